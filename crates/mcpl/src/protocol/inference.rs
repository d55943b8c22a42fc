//! `inference/request` and `inference/chunk` (§11).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::content::Content;
use super::Extra;
use crate::capability::{Capability, Requirement};
use crate::jsonrpc::RequestId;

/// Token usage (§10.5 `usage`, §11.3 `usage`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens.
    #[serde(
        default,
        deserialize_with = "super::int::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(
        default,
        deserialize_with = "super::int::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub output_tokens: Option<u64>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One message of an `inference/request` (§11.2 `messages`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferenceMessage {
    /// The role, as received (`"user"`, `"assistant"` …).
    pub role: String,
    /// The message content: a string or content blocks.
    pub content: Content,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `inference/request` `preferences` (§11.2); further advisory keys are kept in `extra`
/// (host-defined, never binding).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preferences {
    /// Max output tokens.
    #[serde(
        default,
        deserialize_with = "super::int::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Advisory hints (`model`, `modelTier` …), kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `inference/request` params (§11.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceRequestParams {
    /// The declaring feature set (testimony, never authority).
    pub feature_set: String,
    /// Conversation to associate with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Whether to stream, as received; absent means `false` (§11.2). See [`Self::is_streaming`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Messages for inference.
    pub messages: Vec<InferenceMessage>,
    /// Generation preferences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferences: Option<Preferences>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl InferenceMessage {
    /// A message of `role` (`"user"`, `"assistant"` …) with `content` (a string or blocks).
    pub fn new(role: impl Into<String>, content: impl Into<Content>) -> Self {
        InferenceMessage {
            role: role.into(),
            content: content.into(),
            extra: Extra::new(),
        }
    }

    /// A `"user"` message with `content`.
    pub fn user(content: impl Into<Content>) -> Self {
        InferenceMessage::new("user", content)
    }
}

impl InferenceRequestParams {
    /// A non-streaming request under `feature_set` (§11.2: required, the set whose `uses`
    /// declares `inferenceRequest`) for `messages`, nothing else set.
    pub fn new(
        feature_set: impl Into<String>,
        messages: impl IntoIterator<Item = InferenceMessage>,
    ) -> Self {
        InferenceRequestParams {
            feature_set: feature_set.into(),
            conversation_id: None,
            stream: None,
            messages: messages.into_iter().collect(),
            preferences: None,
            extra: Extra::new(),
        }
    }

    /// Whether the request asks for streaming (`stream: true`; default `false`, §11.2).
    pub fn is_streaming(&self) -> bool {
        self.stream == Some(true)
    }
}

/// Why generation stopped (App. B.4 FinishReason). Unknown values are kept as `Other`: the
/// reason is descriptive and decides nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// `end_turn`.
    EndTurn,
    /// `max_tokens`.
    MaxTokens,
    /// `stop_sequence`.
    StopSequence,
    /// A value outside App. B.4, kept as received.
    #[serde(untagged)]
    Other(String),
}

impl FinishReason {
    /// Whether this is one of App. B.4's values (not [`FinishReason::Other`]).
    pub fn is_app_b4(&self) -> bool {
        !matches!(self, FinishReason::Other(_))
    }

    /// Reads a wire value: one of App. B.4's, or [`FinishReason::Other`] with it.
    pub fn from_wire(s: &str) -> FinishReason {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .unwrap_or_else(|_| FinishReason::Other(s.to_owned()))
    }
}

/// `inference/request` result (§11.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceResult {
    /// Generated content (a string per §11.3; blocks tolerated).
    pub content: Content,
    /// The model actually used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why generation stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `inference/chunk` params (§11.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceChunkParams {
    /// The JSON-RPC id of the streaming `inference/request`.
    pub request_id: RequestId,
    /// Chunk index, from 0.
    #[serde(deserialize_with = "super::int::u64")]
    pub index: u64,
    /// The text delta.
    pub delta: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Defects of an `inference/request` result against §11.3: `content` the generated text as
/// a string (a content-block array only warns: the library host's reading accepts it, the
/// table says string); `model` a string, `finishReason` one of App. B.4's and `usage` an
/// object, each when present (`null` read as absent, [`super::given`], as for every optional
/// member: a serializer writing `null` for "not set" means absent). Reading: the table marks
/// nothing optional or required; without `content` there is no inference to return, so only
/// it is required (written `null`, it is no string). A `finishReason`
/// outside the enum fails like a `model` that is not a string: the table gives the enum as
/// its type. `usage` members are not typed by the spec; §11.3's example counts tokens, so
/// `inputTokens`/`outputTokens` that are not non-negative integers only warn.
/// `(fails, warnings)`. The one rule `mcpl check-host` reports and the host library holds
/// its application's answers to.
pub fn result_defects(r: &Value) -> (Vec<String>, Vec<String>) {
    let (mut fail, mut warn) = (Vec::new(), Vec::new());
    let Some(o) = r.as_object() else {
        fail.push("the result is not an object".into());
        return (fail, warn);
    };
    match o.get("content") {
        Some(Value::String(_)) => {}
        Some(c @ Value::Array(_)) => {
            match super::content::content_defect(Some(c), "content", false) {
                Some(d) => fail.push(d),
                None => warn.push("content is content blocks; §11.3 gives a string".into()),
            }
        }
        Some(_) => fail.push("content is not a string".into()),
        None => fail.push("content missing".into()),
    }
    if super::given(o, "model").is_some_and(|m| !m.is_string()) {
        fail.push("model is not a string".into());
    }
    match super::given(o, "finishReason") {
        None => {}
        Some(Value::String(f)) if FinishReason::from_wire(f).is_app_b4() => {}
        Some(Value::String(f)) => {
            // Quoted whole only when short: what the peer sent is bounded in a report.
            let shown: String = f.chars().take(64).collect();
            let cut = if shown.len() < f.len() { "…" } else { "" };
            fail.push(format!(
                "finishReason \"{shown}{cut}\" is not one of App. B.4's"
            ))
        }
        Some(f) => fail.push(format!(
            "finishReason is a JSON {}, not one of App. B.4's strings",
            crate::jsonrpc::json_type_name(f)
        )),
    }
    match super::given(o, "usage") {
        None => {}
        Some(Value::Object(u)) => {
            for key in ["inputTokens", "outputTokens"] {
                if super::given(u, key).is_some_and(|n| !super::int::is_count(n)) {
                    warn.push(format!("usage.{key} is not a token count"));
                }
            }
        }
        Some(_) => fail.push("usage is not an object".into()),
    }
    (fail, warn)
}

/// What `inference/request` params do that §11.2 does not forbid but a host cannot act on
/// well, one sentence each; empty when nothing. Reading (finding F9): §11.2 requires
/// `messages` and sets no length, so an empty list is well-formed (a host may answer from
/// its system prompt alone) and no defect; but it gives the model nothing to answer, so
/// `mcpl check` warns (`inference.request-shape`). The library host does not refuse it.
pub fn request_advisories(params: Option<&Value>) -> Vec<String> {
    let empty = params
        .and_then(|p| p.get("messages"))
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    if empty {
        vec!["messages is empty: nothing for the model to answer (§11.2)".into()]
    } else {
        Vec::new()
    }
}

/// Defects of `inference/request` params against §11.2: a string `featureSet`, `messages` an
/// array of objects each with a string `role` and `content` that is a string or content
/// blocks; the optional members typed as the table gives them (`stream` boolean,
/// `conversationId` string, `preferences` an object whose `maxTokens` is a non-negative
/// integer and `temperature` a number; each `null` read as absent, [`super::given`]).
/// Advisory `preferences` keys are not judged. The one
/// rule the host refuses a request on (`-32602`) and `mcpl check`
/// (`inference.request-shape`) reports.
pub fn request_defects(params: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(p) = params.and_then(Value::as_object) else {
        out.push("params is not an object".into());
        return out;
    };
    if !p.get("featureSet").is_some_and(Value::is_string) {
        out.push("featureSet missing or not a string".into());
    }
    match p.get("messages") {
        // Made one message at a time, as many listed as `listed_defects` lists.
        Some(Value::Array(msgs)) => out.extend(super::listed_defects(
            msgs.iter()
                .enumerate()
                .flat_map(|(i, m)| message_defects(&format!("messages[{i}]"), m)),
        )),
        Some(_) => out.push("messages is not an array".into()),
        None => out.push("messages missing".into()),
    }
    if super::given(p, "stream").is_some_and(|v| !v.is_boolean()) {
        out.push("stream is not a boolean".into());
    }
    if super::given(p, "conversationId").is_some_and(|v| !v.is_string()) {
        out.push("conversationId is not a string".into());
    }
    match super::given(p, "preferences") {
        None => {}
        Some(Value::Object(prefs)) => {
            if super::given(prefs, "maxTokens").is_some_and(|v| !super::int::is_count(v)) {
                out.push("preferences.maxTokens is not a non-negative integer".into());
            }
            if super::given(prefs, "temperature").is_some_and(|v| !v.is_number()) {
                out.push("preferences.temperature is not a number".into());
            }
        }
        Some(_) => out.push("preferences is not an object".into()),
    }
    super::listed_defects(out)
}

/// The defects of one §11.2 message, named `at`: an object with a string `role` and
/// `content` a string or content blocks (§10.3).
fn message_defects(at: &str, m: &Value) -> Vec<String> {
    let Some(m) = m.as_object() else {
        return vec![format!("{at} is not an object")];
    };
    let mut out = Vec::new();
    if !m.get("role").is_some_and(Value::is_string) {
        out.push(format!("{at}.role missing or not a string"));
    }
    out.extend(super::content::content_defects(
        m.get("content"),
        &format!("{at}.content"),
        true,
    ));
    out
}

/// The requirement of one `inference/request` (§11.1, §11.4): `inferenceRequest`, and
/// `inferenceRequest.streaming` as well whenever `stream` is present and not `false`/`null`
/// (read fail-closed: a non-boolean `stream` is not trusted to mean "no").
fn request_requirement(params: Option<&Value>) -> Requirement {
    match params.and_then(|p| p.get("stream")) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {
            Requirement::One(Capability::InferenceRequest)
        }
        Some(_) => Requirement::AllOf(&[
            Capability::InferenceRequest,
            Capability::InferenceRequestStreaming,
        ]),
    }
}

method!(
    /// `inference/request` (§11.1): Server → Host Request; requires `inferenceRequest`, plus
    /// `inferenceRequest.streaming` when `stream: true`.
    InferenceRequest, "inference/request", Mcpl, Request, ServerToHost, InferenceRequestParams,
    InferenceResult,
    requires: One(InferenceRequest),
    refined_by: request_requirement
);

method!(
    /// `inference/chunk` (§11.4): Host → Server Notification. Chunks exist only for a
    /// streaming request, so the reading here is that they require both streaming leaves.
    InferenceChunk, "inference/chunk", Mcpl, Notification, HostToServer, InferenceChunkParams, (),
    requires: AllOf(&[InferenceRequest, InferenceRequestStreaming])
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An integral float is a token count (JSON has one number type, `protocol::int`): the
    /// JSON-level checks read `10.0` as the typed reading does; a fraction is still a defect.
    #[test]
    fn s11_integer_members_written_as_floats_are_no_defect() {
        let usage = json!({"content": "OK", "usage": {"inputTokens": 10.0, "outputTokens": 2}});
        assert_eq!(result_defects(&usage), (vec![], vec![]));
        let frac = json!({"content": "OK", "usage": {"inputTokens": 10.5}});
        assert_eq!(result_defects(&frac).1.len(), 1);
        let req = |max: serde_json::Value| {
            request_defects(Some(&json!({"featureSet": "f", "messages": [],
                                         "preferences": {"maxTokens": max}})))
        };
        assert!(req(json!(100.0)).is_empty());
        assert_eq!(req(json!(100.5)).len(), 1);
        assert_eq!(req(json!(-1)).len(), 1);
    }

    /// §11.2 / §11.3 counts: the typed forms take a whole number however written, as the
    /// shape rule does (`500.0` is the integer 500), `null` as absent, and refuse the rest.
    #[test]
    fn s11_counts_written_as_whole_floats_are_integers() {
        let p: Preferences = serde_json::from_value(json!({"maxTokens": 500.0})).unwrap();
        assert_eq!(p.max_tokens, Some(500));
        let p: Preferences = serde_json::from_value(json!({"maxTokens": null})).unwrap();
        assert_eq!(p.max_tokens, None);
        let u: Usage =
            serde_json::from_value(json!({"inputTokens": 1e3, "outputTokens": 2})).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (Some(1000), Some(2)));
        for bad in [json!(0.5), json!(-1), json!(-1.0), json!("5"), json!(1e20)] {
            let r = serde_json::from_value::<Preferences>(json!({ "maxTokens": bad }));
            assert!(r.is_err(), "{bad} taken");
        }
    }

    /// §11.3 / App. B.4: `content` required; `finishReason` one of App. B.4's ("stop" is an
    /// audited host's, not MCPL's); a huge or non-string value is quoted bounded.
    #[test]
    fn s11_3_result_defects_pin_the_table() {
        assert_eq!(
            result_defects(&json!({"content": "OK", "finishReason": "end_turn"})),
            (vec![], vec![])
        );
        assert_eq!(result_defects(&json!({})).0, ["content missing"]);
        assert_eq!(
            result_defects(&json!({"content": "OK", "finishReason": "stop"})).0,
            ["finishReason \"stop\" is not one of App. B.4's"]
        );
        let long = "x".repeat(10_000);
        let (fail, _) = result_defects(&json!({"content": "OK", "finishReason": long}));
        assert!(fail[0].len() < 120, "{}", fail[0].len());
        let (fail, _) = result_defects(&json!({"content": "OK", "finishReason": 3}));
        assert_eq!(
            fail,
            ["finishReason is a JSON number, not one of App. B.4's strings"]
        );
    }

    /// §11.3's optional members written `null` are absent (`super::given`), as everywhere;
    /// the required `content` written `null` is still no string.
    #[test]
    fn s11_3_optional_result_members_written_null_are_absent() {
        let nulls = json!({"content": "OK", "model": null, "finishReason": null,
                           "usage": {"inputTokens": null, "outputTokens": 1}});
        assert_eq!(result_defects(&nulls), (vec![], vec![]));
        let usage = json!({"content": "OK", "usage": null});
        assert_eq!(result_defects(&usage), (vec![], vec![]));
        let content = json!({"content": null, "model": null});
        assert_eq!(result_defects(&content).0, ["content is not a string"]);
    }

    #[test]
    fn b4_finish_reason_from_wire_names_app_b4s_values() {
        for known in ["end_turn", "max_tokens", "stop_sequence"] {
            assert!(FinishReason::from_wire(known).is_app_b4(), "{known}");
        }
        assert_eq!(
            FinishReason::from_wire("stop"),
            FinishReason::Other("stop".into())
        );
        assert!(!FinishReason::from_wire("stop").is_app_b4());
    }

    #[test]
    fn b4_finish_reason_keeps_unknown_values() {
        let r: FinishReason = serde_json::from_value(json!("max_tokens")).unwrap();
        assert_eq!(r, FinishReason::MaxTokens);
        let r: FinishReason = serde_json::from_value(json!("tool_use")).unwrap();
        assert_eq!(r, FinishReason::Other("tool_use".into()));
        assert_eq!(serde_json::to_value(&r).unwrap(), json!("tool_use"));
    }

    #[test]
    fn s11_4_chunk_request_id_keeps_its_type() {
        for id in [json!(1), json!("1"), json!(0)] {
            let v = json!({"requestId": id, "index": 0, "delta": "x"});
            let c: InferenceChunkParams = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&c).unwrap(), v);
        }
    }
}
