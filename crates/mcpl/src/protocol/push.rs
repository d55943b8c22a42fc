//! `push/event` (§9).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::Content;
use super::Extra;

/// The one ISO 8601 rule, here since §9.2 was its first user ([`super::time`]).
pub use super::time::{timestamp, timestamp_defect, timestamp_millis};

/// `push/event` params (§9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEventParams {
    /// The declaring feature set (testimony, never authority: §5.4).
    pub feature_set: String,
    /// Unique event id, for idempotency (§9.4).
    pub event_id: String,
    /// When the event occurred (ISO 8601, kept as received).
    pub timestamp: String,
    /// Server-defined provenance metadata (untrusted claims, §16.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Map<String, Value>>,
    /// The event payload.
    pub payload: PushPayload,
    /// Namespaced semantic labels (§16); descriptive claims, never authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `push/event` `payload` (§9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushPayload {
    /// Content for the model to interpret (a plain string is tolerated, §10.3).
    pub content: Content,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl PushPayload {
    /// A payload of `content` (a string, a [`ContentBlock`](super::content::ContentBlock) or
    /// blocks), always written as blocks: §9.2 types `payload.content` as `ContentBlock[]`,
    /// so a string becomes one text block (§10.3).
    pub fn new(content: impl Into<Content>) -> Self {
        PushPayload {
            content: Content::Blocks(content.into().to_blocks()),
            extra: Extra::new(),
        }
    }
}

/// `push/event` result (§9.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEventResult {
    /// Whether the host accepted the event.
    pub accepted: bool,
    /// Present if inference was triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_id: Option<String>,
    /// Present if `accepted` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// `push/event` (§9.1): Server → Host Request; requires `pushEvents`.
    PushEvent, "push/event", Mcpl, Request, ServerToHost, PushEventParams, PushEventResult,
    requires: One(PushEvents)
);

/// Every defect of `push/event` params against §9.2, empty when the shape is right: an
/// object with string `featureSet`, `eventId` and `timestamp`, the timestamp ISO 8601
/// ([`timestamp_defect`]), `origin` (when present and not `null`, [`super::given`]) an object, and `payload` an object whose
/// `content` is ContentBlock[] (App. B.1, [`super::content::content_defects`]; §9.2 gives no
/// string form). `tags` are not judged here: they are read after admission and never refuse
/// a message (§16.6). The one rule the host refuses on (`-32602`) and `mcpl check`
/// (`push.params-shape`) reports.
pub fn push_event_defects(params: Option<&Value>) -> Vec<String> {
    let Some(p) = params.and_then(Value::as_object) else {
        return vec!["params is not an object".into()];
    };
    let mut out = Vec::new();
    for field in ["featureSet", "eventId", "timestamp"] {
        if !p.get(field).is_some_and(Value::is_string) {
            out.push(format!("{field} missing or not a string"));
        }
    }
    if let Some(ts) = p.get("timestamp").and_then(Value::as_str) {
        if let Some(d) = timestamp_defect(ts) {
            out.push(format!("timestamp {ts:?} is not ISO 8601 (§9.2): {d}"));
        }
    }
    if super::given(p, "origin").is_some_and(|o| !o.is_object()) {
        out.push("origin is not an object".into());
    }
    match p.get("payload") {
        Some(Value::Object(payload)) => out.extend(super::content::content_defects(
            payload.get("content"),
            "payload.content",
            false,
        )),
        Some(_) => out.push("payload is not an object".into()),
        None => out.push("payload missing".into()),
    }
    super::listed_defects(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §9.2: one defect per rule broken, the host's refusal and the checker's report alike;
    /// tags are not judged (§16.6: read after admission).
    #[test]
    fn s9_2_push_event_defects() {
        use serde_json::json;
        let ok = json!({"featureSet": "f", "eventId": "e", "timestamp": "2026-01-23T10:30:00Z",
            "origin": {}, "payload": {"content": [{"type": "text", "text": "t"}]},
            "tags": ["mention"]});
        assert!(push_event_defects(Some(&ok)).is_empty());
        let one = |f: &dyn Fn(&mut Value)| {
            let mut v = ok.clone();
            f(&mut v);
            push_event_defects(Some(&v))
        };
        for (what, d) in [
            ("featureSet", one(&|v| v["featureSet"] = json!(1))),
            (
                "eventId",
                one(&|v| drop(v.as_object_mut().map(|o| o.remove("eventId")))),
            ),
            (
                "timestamp",
                one(&|v| v["timestamp"] = json!("2026-01-23 10:30")),
            ),
            ("origin", one(&|v| v["origin"] = json!("x"))),
            ("payload", one(&|v| v["payload"] = json!([]))),
            (
                "payload.content",
                one(&|v| v["payload"]["content"] = json!("text")),
            ),
            (
                "payload.content[0]",
                one(&|v| v["payload"]["content"] = json!([{"type": "x"}])),
            ),
        ] {
            assert_eq!(d.len(), 1, "{what}: {d:?}");
            assert!(d[0].contains(what), "{what}: {d:?}");
        }
        assert_eq!(push_event_defects(None), ["params is not an object"]);
    }
}
