//! `push/event` (§9).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::Content;
use super::Extra;

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
    PushEvent, "push/event", Request, ServerToHost, PushEventParams, PushEventResult
);
