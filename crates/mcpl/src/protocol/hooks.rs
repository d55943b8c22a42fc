//! `context/beforeInference` (§10.1–§10.4, §14.4).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::content::Content;
use super::model::ModelInfo;
use super::Extra;
use crate::capability::Capability;

/// `context/beforeInference` params (§10.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeforeInferenceParams {
    /// Unique id of this inference.
    pub inference_id: String,
    /// Persistent across turns.
    pub conversation_id: String,
    /// 0-indexed turn number.
    #[serde(deserialize_with = "super::int::u64")]
    pub turn_index: u64,
    /// The user's input. Always written, as `null` when absent: `null` for continued
    /// generation and whenever `observe` is not granted (§10.1). An absent member is read as
    /// `null`.
    #[serde(default)]
    pub user_message: Option<String>,
    /// Current model metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelInfo>,
    /// Optional channel context (§14.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelContext>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The §14.4 `channels` member of `context/beforeInference` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelContext {
    /// The message that triggered this inference (`channelId`, `messageId`, `threadId` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming: Option<Value>,
    /// Where output goes by default (`{ channelId }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_outgoing: Option<Value>,
    /// Candidate channel ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<String>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `context/beforeInference` result (§10.2); the default injects nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeforeInferenceResult {
    /// The feature set the server claims (§6.5). Testimony only: authorization MUST NOT use
    /// it (§5.4). Tolerated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_set: Option<String>,
    /// The injections; an absent member is read as none. Each is authorized independently
    /// by its [`Position`] at response-receipt (§10.8).
    #[serde(default)]
    pub context_injections: Vec<ContextInjection>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl BeforeInferenceResult {
    /// A result carrying `injections`; the session stamps the hook's feature set (§6.5).
    pub fn with_injections(injections: impl IntoIterator<Item = ContextInjection>) -> Self {
        BeforeInferenceResult {
            context_injections: injections.into_iter().collect(),
            ..Default::default()
        }
    }
}

/// One context injection (§10.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextInjection {
    /// Server-defined namespace (testimony, never authority).
    pub namespace: String,
    /// Where to inject.
    pub position: Position,
    /// The content: a string or content blocks.
    pub content: Content,
    /// Arbitrary metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ContextInjection {
    /// An injection of `content` (a string, a [`ContentBlock`](super::content::ContentBlock)
    /// or blocks) at `position`, under the server-chosen `namespace` (§10.4).
    pub fn new(
        namespace: impl Into<String>,
        position: Position,
        content: impl Into<Content>,
    ) -> Self {
        ContextInjection {
            namespace: namespace.into(),
            position,
            content: content.into(),
            metadata: None,
            extra: Extra::new(),
        }
    }

    /// Sets the `metadata` (§10.4: arbitrary, testimony).
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// Where an injection goes (App. B.4 Position).
///
/// An unknown value is kept as `Unknown` rather than failing the whole response, so the
/// other injections of a mixed array can still be judged one by one (§10.8); an `Unknown`
/// position maps to no capability and is therefore never authorized (absence is denial).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Position {
    /// `system`.
    System,
    /// `beforeUser`.
    BeforeUser,
    /// `afterUser`.
    AfterUser,
    /// A value outside App. B.4, kept as received; never authorized.
    #[serde(untagged)]
    Unknown(String),
}

impl Position {
    /// The wire value (`system`, `beforeUser`, `afterUser`, or the unknown value as received).
    pub fn as_str(&self) -> &str {
        match self {
            Position::System => "system",
            Position::BeforeUser => "beforeUser",
            Position::AfterUser => "afterUser",
            Position::Unknown(s) => s,
        }
    }

    /// The inject leaf that authorizes this position, or `None` for an unknown one (deny).
    /// The mapping itself is [`Capability::for_position`], the one the host enforces with.
    pub fn capability(&self) -> Option<Capability> {
        match self {
            Position::Unknown(_) => None,
            known => Capability::for_position(known.as_str()),
        }
    }
}

method!(
    /// `context/beforeInference` (§10.1): Host → Server Request; sent to a server granted
    /// `observe` or any inject leaf (§10.1: injection without observation still gets the call).
    BeforeInference, "context/beforeInference", Mcpl, Request, HostToServer, BeforeInferenceParams,
    BeforeInferenceResult,
    requires: AnyOf(&[Observe, InjectSystem, InjectBeforeUser, InjectAfterUser])
);

/// Every defect of one `contextInjections` entry, named `at`, against §10.4; empty when its
/// shape is right: an object with a non-empty string `namespace`, a string `position`, `content` a string or
/// content blocks (§10.3, [`super::content::content_defects`]) and `metadata`, when present
/// and not `null` ([`super::given`]), an object. Whether the position is one of App. B.4's and granted is not shape: the host
/// authorizes that first ([`crate::policy::judge_injection`]). The one rule the host refuses
/// an injection on and `mcpl check` (`hooks.injection-shape`) reports.
pub fn injection_defects(injection: &Value, at: &str) -> Vec<String> {
    let Some(o) = injection.as_object() else {
        return vec![format!("{at} is not an object")];
    };
    let mut out = Vec::new();
    // §10.4 requires `namespace`, a server-defined name: read fail-closed, an empty one
    // names nothing (finding F9), as a descriptor's empty `id` does (§14.2).
    if !o
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        out.push(format!("{at}.namespace missing, empty or not a string"));
    }
    if !o.get("position").is_some_and(Value::is_string) {
        out.push(format!("{at}.position missing or not a string"));
    }
    out.extend(super::content::content_defects(
        o.get("content"),
        &format!("{at}.content"),
        true,
    ));
    if super::given(o, "metadata").is_some_and(|m| !m.is_object()) {
        out.push(format!("{at}.metadata is not an object"));
    }
    out
}

/// Every defect of a `context/beforeInference` result against §10.2, §10.4 and §6.5; empty
/// when its shape is right: an object whose `contextInjections`, when present and not `null`
/// ([`super::given`]), is an array
/// of entries each of the right shape ([`injection_defects`]), under a string `featureSet`
/// whenever it injects anything (§6.5). Whether each position is granted, and the set
/// declared and available, is the host's authorization ([`crate::policy::judge_injection`]).
/// The rule `session::rules::judge_hook_answer` refuses an answer on and `mcpl check`
/// (`hooks.injection-shape`) reports.
pub fn result_defects(result: &Value) -> Vec<String> {
    let Some(obj) = result.as_object() else {
        return vec!["result is not an object".into()];
    };
    let injections = match super::given(obj, "contextInjections") {
        None => return Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return vec!["contextInjections is not an array".into()],
    };
    let mut out = Vec::new();
    if !injections.is_empty() {
        match super::given(obj, "featureSet") {
            Some(Value::String(_)) => {}
            None => out.push("injections returned without a featureSet (§6.5)".into()),
            Some(other) => out.push(format!(
                "featureSet {} is not a string: name the feature set the injections belong \
                 to (§6.5)",
                scalar_or_kind(other)
            )),
        }
    }
    out.extend(super::listed_defects(
        injections
            .iter()
            .enumerate()
            .flat_map(|(i, inj)| injection_defects(inj, &format!("contextInjections[{i}]"))),
    ));
    super::listed_defects(out)
}

/// Every defect of `context/beforeInference` params against §10.1; empty when their shape is
/// right: an object with a string `inferenceId` and `conversationId`, a non-negative integer
/// `turnIndex`, a `userMessage` written as a string or `null` (§10.1: the host MUST send
/// `null` when `observe` is not granted, so the member is never left out), `model`, when
/// present and not `null` ([`super::given`]), a ModelInfo object (§12.2: a string `id`),
/// and `channels`, when present and not `null`, an object (§14.4). Whether `userMessage` may
/// carry text is the grant's question ([`crate::policy::unredacted_user_message`]). The rule
/// `mcpl check-host` (`host.hook-params-shape`) judges a host's hooks by; the library server
/// reads the same params leniently (an absent `userMessage` as `null`), as §8 lets it.
pub fn params_defects(params: Option<&Value>) -> Vec<String> {
    let Some(o) = params.and_then(Value::as_object) else {
        return vec!["params are not an object".into()];
    };
    let mut out = Vec::new();
    for field in ["inferenceId", "conversationId"] {
        match o.get(field) {
            Some(Value::String(_)) => {}
            None => out.push(format!("{field} missing")),
            Some(other) => out.push(format!("{field} {} is not a string", scalar_or_kind(other))),
        }
    }
    match o.get("turnIndex") {
        // The library's one reading of an integer (`int`: `7.0` is 7, as the typed hook
        // reads it).
        Some(v @ Value::Number(_)) if super::int::is_count(v) => {}
        None => out.push("turnIndex missing".into()),
        Some(other) => out.push(format!(
            "turnIndex {} is not a non-negative integer",
            scalar_or_kind(other)
        )),
    }
    match o.get("userMessage") {
        Some(Value::String(_) | Value::Null) => {}
        None => out.push("userMessage missing (§10.1: written, as null when absent)".into()),
        Some(other) => out.push(format!(
            "userMessage {} is neither a string nor null",
            scalar_or_kind(other)
        )),
    }
    match super::given(o, "model") {
        None => {}
        Some(Value::Object(m)) if m.get("id").is_some_and(Value::is_string) => {}
        Some(Value::Object(_)) => out.push("model.id missing or not a string (§12.2)".into()),
        Some(other) => out.push(format!("model {} is not an object", scalar_or_kind(other))),
    }
    if let Some(c) = super::given(o, "channels") {
        if !c.is_object() {
            out.push(format!(
                "channels {} is not an object (§14.4)",
                scalar_or_kind(c)
            ));
        }
    }
    super::listed_defects(out)
}

/// A number or boolean as written, anything else by its JSON kind (an array or object
/// may be long; a defect names what is wrong, not all of it).
fn scalar_or_kind(v: &Value) -> String {
    match v {
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        Value::Array(_) => "(an array)".into(),
        Value::Object(_) => "(an object)".into(),
        Value::String(_) => "(a string)".into(),
        Value::Null => "null".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §10.1: the params a host sends with each hook: well-formed ones have no defect; null,
    /// wrong-typed or missing correlation ids, a negative or fractional `turnIndex`, a left
    /// out `userMessage` and a `model` without a string `id` are each named.
    #[test]
    fn s10_1_hook_params_defects() {
        let good = json!({"inferenceId":"i","conversationId":"c","turnIndex":0,
                          "userMessage":null,"model":{"id":"m"},"channels":{}});
        assert!(params_defects(Some(&good)).is_empty());
        let with_text = json!({"inferenceId":"i","conversationId":"c","turnIndex":3,
                               "userMessage":"hi"});
        assert!(params_defects(Some(&with_text)).is_empty());
        let nulls = json!({"inferenceId":null,"conversationId":null,"turnIndex":null,
                           "userMessage":null,"model":null});
        let d = params_defects(Some(&nulls)).join("; ");
        for said in [
            "inferenceId null is not a string",
            "conversationId null",
            "turnIndex null is not a non-negative integer",
        ] {
            assert!(d.contains(said), "{said} in {d}");
        }
        assert!(!d.contains("model"), "{d}");
        let odd = json!({"inferenceId":5,"conversationId":"c","turnIndex":-1,
                         "model":{"vendor":"v"},"channels":[]});
        let d = params_defects(Some(&odd)).join("; ");
        for said in [
            "inferenceId 5",
            "turnIndex -1",
            "userMessage missing",
            "model.id",
            "channels (an array)",
        ] {
            assert!(d.contains(said), "{said} in {d}");
        }
        let frac = json!({"inferenceId":"i","conversationId":"c","turnIndex":1.5,
                          "userMessage":null});
        assert!(params_defects(Some(&frac))
            .join("")
            .contains("turnIndex 1.5"));
        // `7.0` is the integer 7 by the library's one reading of integers (`int`), as the
        // typed hook reads it (r2 #6: `is_u64` alone refused it).
        let float = json!({"inferenceId":"i","conversationId":"c","turnIndex":7.0,
                           "userMessage":null});
        assert_eq!(params_defects(Some(&float)), Vec::<String>::new());
        assert_eq!(
            params_defects(None),
            vec!["params are not an object".to_owned()]
        );
    }

    /// §6.5: injections under a `featureSet` that is no string are told that, not that they
    /// name none; `null` is the member absent (`super::given`).
    #[test]
    fn s6_5_a_feature_set_of_another_type_is_named() {
        let inj = json!([{"namespace": "n", "position": "system", "content": "c"}]);
        for (fs, said) in [
            (json!(5), "featureSet 5 is not a string"),
            (json!({"a": 1}), "featureSet (an object) is not a string"),
            (json!(null), "without a featureSet"),
        ] {
            let d = result_defects(&json!({"featureSet": fs, "contextInjections": inj}));
            assert_eq!(d.len(), 1, "{d:?}");
            assert!(d[0].contains(said), "{d:?}");
        }
    }

    /// §10.4: one defect per rule broken.
    #[test]
    fn s10_4_injection_defects() {
        let ok = json!({"namespace": "n", "position": "system", "content": "c", "metadata": {}});
        assert!(injection_defects(&ok, "i").is_empty());
        for (bad, what) in [
            (json!({"position": "system", "content": "c"}), "namespace"),
            (
                json!({"namespace": "", "position": "system", "content": "c"}),
                "namespace missing, empty",
            ),
            (
                json!({"namespace": "n", "position": 1, "content": "c"}),
                "position",
            ),
            (json!({"namespace": "n", "position": "system"}), "content"),
            (
                json!({"namespace": "n", "position": "system", "content": [{}]}),
                "content[0]",
            ),
            (
                json!({"namespace": "n", "position": "system", "content": "c", "metadata": 1}),
                "metadata",
            ),
            (json!("x"), "not an object"),
        ] {
            let d = injection_defects(&bad, "i");
            assert_eq!(d.len(), 1, "{bad}: {d:?}");
            assert!(d[0].contains(what), "{bad}: {d:?}");
        }
    }

    #[test]
    fn s10_1_user_message_null_is_written() {
        let p: BeforeInferenceParams =
            serde_json::from_value(json!({"inferenceId":"i","conversationId":"c","turnIndex":0}))
                .unwrap();
        assert_eq!(p.user_message, None);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["userMessage"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("userMessage"));
    }

    #[test]
    fn b4_unknown_position_is_kept_and_never_authorized() {
        let i: ContextInjection =
            serde_json::from_value(json!({"namespace":"n","position":"top","content":"x"}))
                .unwrap();
        assert_eq!(i.position, Position::Unknown("top".into()));
        assert_eq!(i.position.capability(), None);
        assert_eq!(
            Position::System.capability(),
            Some(Capability::InjectSystem)
        );
    }
}
