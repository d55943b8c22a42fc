//! `inference/lifecycle` (§10.5): a metadata-only Notification. It has no content members;
//! a message that carries one anyway is still parsed, and the offending member names are
//! reported by [`LifecycleParams::content_like_members`] so the receiver can raise a
//! diagnostic. The members stay in `extra` and are never surfaced as content.

use serde::{Deserialize, Serialize};

use super::inference::Usage;
use super::model::ModelInfo;
use super::Extra;

/// Member names that would carry message content, which §10.5 forbids on a lifecycle
/// signal (the removed `context/afterInference` carried several of them).
pub const CONTENT_LIKE_MEMBERS: &[&str] = &[
    "userMessage",
    "assistantMessage",
    "messages",
    "content",
    "contextInjections",
    "injections",
    "modifiedResponse",
    "response",
    "text",
    "prompt",
    "arguments",
    "toolArguments",
    "toolCalls",
    "toolResults",
    "result",
];

/// The lifecycle position (§10.5 `phase`).
///
/// Unknown values are **rejected**: consumers run pairing state machines on the phase
/// (one terminal per `started`), and a phase they cannot classify as start or terminal
/// cannot be placed in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The inference began.
    Started,
    /// Terminal: finished normally.
    Completed,
    /// Terminal: aborted.
    Aborted,
    /// Terminal: failed.
    Failed,
}

impl Phase {
    /// Whether this is one of the three terminal phases (§10.5).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Phase::Started)
    }
}

/// `inference/lifecycle` params (§10.5).
///
/// `conversationId` and `turnIndex` are optional here: §15.2's terminal example carries only
/// `inferenceId` and `phase`, and a lifecycle signal is correlation-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleParams {
    /// Identifies the inference.
    pub inference_id: String,
    /// Persistent across turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// 0-indexed turn number.
    #[serde(
        default,
        deserialize_with = "super::int::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub turn_index: Option<u64>,
    /// Lifecycle position.
    pub phase: Phase,
    /// Model metadata; only sent when `modelInfo` is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelInfo>,
    /// Token usage; `completed` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Unknown members, kept verbatim (and checked by [`Self::content_like_members`]).
    #[serde(flatten)]
    pub extra: Extra,
}

impl LifecycleParams {
    /// Names of received members that look like message content (see
    /// [`CONTENT_LIKE_MEMBERS`]); non-empty means the sender violated §10.5. A member
    /// written `null` carries no content and is read as absent ([`super::given`]'s reading
    /// of every optional member: a serializer writing `null` for "not set" means absent).
    pub fn content_like_members(&self) -> Vec<&str> {
        self.extra
            .iter()
            .filter(|(k, v)| !v.is_null() && CONTENT_LIKE_MEMBERS.contains(&k.as_str()))
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

method!(
    /// `inference/lifecycle` (§10.5): Host → Server Notification; requires `inferenceLifecycle`.
    InferenceLifecycle, "inference/lifecycle", Mcpl, Notification, HostToServer, LifecycleParams, (),
    requires: One(InferenceLifecycle)
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s10_5_content_members_are_parsed_and_reported_not_surfaced() {
        let p: LifecycleParams = serde_json::from_value(json!({
            "inferenceId": "inf_1", "phase": "completed",
            "userMessage": "secret", "assistantMessage": "also secret", "vendorX": 1
        }))
        .unwrap();
        let mut m = p.content_like_members();
        m.sort();
        assert_eq!(m, vec!["assistantMessage", "userMessage"]);
        assert!(p.phase.is_terminal());
    }

    #[test]
    fn s10_5_unknown_phase_is_rejected() {
        let r = serde_json::from_value::<LifecycleParams>(
            json!({"inferenceId": "i", "phase": "paused"}),
        );
        assert!(r.is_err());
    }
}
