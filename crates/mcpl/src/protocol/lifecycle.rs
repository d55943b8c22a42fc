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
/// `inferenceId` and `phase`, and a lifecycle signal is correlation-only. A `started`
/// requires both ([`LifecycleParams::missing_members`]).
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

/// Most values [`LifecycleParams::content_like_members`] reads (a hostile signal may nest
/// an unknown member deep and wide; the walk's time is bounded by it, its memory by the
/// message).
pub const MAX_CONTENT_SCAN_VALUES: usize = 4_096;

/// Deepest nesting [`LifecycleParams::content_like_members`] reads below a member.
pub const MAX_CONTENT_SCAN_DEPTH: usize = 16;

/// Bytes of one path [`LifecycleParams::content_like_members`] names (longer ones are cut).
const MAX_PATH_BYTES: usize = 128;

/// Most paths [`LifecycleParams::content_like_members`] names.
const MAX_PATHS: usize = 16;

impl LifecycleParams {
    /// Paths of received members that look like message content (see
    /// [`CONTENT_LIKE_MEMBERS`]); non-empty means the sender violated §10.5. The names are
    /// looked for at any depth of the unknown members, of `usage`'s and of `model`'s
    /// (`usage.text`, `metadata.history[0].content`): §10.5 forbids content anywhere in
    /// the signal, not only at its top level (finding F4). A member written `null` carries
    /// no content and is read as absent ([`super::given`]'s reading of every optional
    /// member: a serializer writing `null` for "not set" means absent).
    ///
    /// Bounded: at most [`MAX_CONTENT_SCAN_VALUES`] values and [`MAX_CONTENT_SCAN_DEPTH`]
    /// levels are read, at most 16 paths named, each cut to 128 bytes. What lies past a
    /// bound is not read and is named `<member>…` (fail closed: it may hold content).
    pub fn content_like_members(&self) -> Vec<String> {
        // No unknown member anywhere (every signal a conforming host sends): nothing to scan,
        // and no scan built (issue #24: the server reads two per turn).
        if self.extra.is_empty()
            && self.usage.as_ref().map_or(true, |u| u.extra.is_empty())
            && self.model.as_ref().map_or(true, |m| m.extra.is_empty())
        {
            return Vec::new();
        }
        let roots = self
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v))
            .chain(
                self.usage
                    .iter()
                    .flat_map(|u| u.extra.iter().map(|(k, v)| (format!("usage.{k}"), v))),
            )
            .chain(
                self.model
                    .iter()
                    .flat_map(|m| m.extra.iter().map(|(k, v)| (format!("model.{k}"), v))),
            );
        let mut found = Vec::new();
        let mut budget = MAX_CONTENT_SCAN_VALUES;
        for (name, value) in roots {
            let leaf = name.rsplit('.').next().unwrap_or(&name);
            if !value.is_null() && CONTENT_LIKE_MEMBERS.contains(&leaf) {
                found.push(cut(name.clone()));
            }
            let mut stack = vec![(name, value, 0usize)];
            while let Some((path, v, depth)) = stack.pop() {
                if budget == 0 || depth > MAX_CONTENT_SCAN_DEPTH {
                    found.push(cut(format!("{path}…")));
                    break;
                }
                budget -= 1;
                match v {
                    serde_json::Value::Object(o) => {
                        for (k, c) in o {
                            let p = format!("{path}.{k}");
                            if !c.is_null() && CONTENT_LIKE_MEMBERS.contains(&k.as_str()) {
                                found.push(cut(p.clone()));
                            }
                            stack.push((p, c, depth + 1));
                        }
                    }
                    serde_json::Value::Array(a) => {
                        for (i, c) in a.iter().enumerate() {
                            stack.push((format!("{path}[{i}]"), c, depth + 1));
                        }
                    }
                    _ => {}
                }
                if found.len() >= MAX_PATHS {
                    break;
                }
            }
            if found.len() >= MAX_PATHS || budget == 0 {
                break;
            }
        }
        found.sort();
        found.dedup();
        found.truncate(MAX_PATHS);
        found
    }
}

impl LifecycleParams {
    /// The members §10.5's table requires that this signal leaves out (written `null`
    /// counts as left out, [`super::given`]'s reading), one name each; empty when none is.
    ///
    /// Reading (finding F5): §10.5's table marks only `model` and `usage` OPTIONAL, so
    /// `inferenceId`, `conversationId`, `turnIndex` and `phase` are required, and a signal
    /// without `inferenceId` (or with `null`) is not parsed at all. §15.2's terminal
    /// example carries only `inferenceId` and `phase`: a terminal correlates by its id, so
    /// `conversationId` and `turnIndex` are required on `started` only. The one rule
    /// `mcpl check-host` (`host.lifecycle-metadata-only`) judges a host by.
    pub fn missing_members(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.phase == Phase::Started {
            if self.conversation_id.is_none() {
                out.push("conversationId");
            }
            if self.turn_index.is_none() {
                out.push("turnIndex");
            }
        }
        out
    }
}

/// `path` cut to at most [`MAX_PATH_BYTES`] bytes, on a character boundary.
fn cut(mut path: String) -> String {
    if path.len() > MAX_PATH_BYTES {
        let mut end = MAX_PATH_BYTES;
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        path.truncate(end);
        path.push('…');
    }
    path
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
        let m = p.content_like_members();
        assert_eq!(m, vec!["assistantMessage", "userMessage"]);
        assert!(p.phase.is_terminal());
    }

    /// §10.5's table with §15.2 (F5): `conversationId` and `turnIndex` are required on a
    /// `started`, left out or `null`; a terminal may carry `inferenceId` and `phase` only.
    #[test]
    fn s10_5_a_started_needs_its_conversation_and_turn() {
        let p = |v| serde_json::from_value::<LifecycleParams>(v).unwrap();
        let full = json!({ "inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                           "phase": "started" });
        assert!(p(full).missing_members().is_empty());
        let null = json!({ "inferenceId": "i", "conversationId": null, "turnIndex": 0,
                           "phase": "started" });
        assert_eq!(p(null).missing_members(), ["conversationId"]);
        let bare = json!({ "inferenceId": "i", "phase": "started" });
        assert_eq!(p(bare).missing_members(), ["conversationId", "turnIndex"]);
        let terminal = json!({ "inferenceId": "i", "phase": "aborted" });
        assert!(p(terminal).missing_members().is_empty());
        let no_id = json!({ "inferenceId": null, "conversationId": "c", "turnIndex": 0,
                            "phase": "started" });
        assert!(serde_json::from_value::<LifecycleParams>(no_id).is_err());
    }

    /// §10.5 (F4): content anywhere in the signal is content, not only at its top level:
    /// under `usage`, under `model`, under an unknown member, in an array.
    #[test]
    fn s10_5_nested_content_members_are_reported() {
        let p: LifecycleParams = serde_json::from_value(json!({
            "inferenceId": "inf_1", "phase": "completed",
            "usage": { "inputTokens": 1, "text": "the reply" },
            "model": { "id": "m", "prompt": "the user's" },
            "metadata": { "history": [{ "content": "earlier" }], "n": 3, "response": null }
        }))
        .unwrap();
        assert_eq!(
            p.content_like_members(),
            vec!["metadata.history[0].content", "model.prompt", "usage.text"]
        );
    }

    /// The walk is bounded in depth and in values; what it did not read is named (fail
    /// closed), never walked at length.
    #[test]
    fn the_content_scan_is_bounded() {
        let mut deep = json!(1);
        for _ in 0..(MAX_CONTENT_SCAN_DEPTH + 4) {
            deep = json!({ "a": deep });
        }
        let p: LifecycleParams =
            serde_json::from_value(json!({ "inferenceId": "i", "phase": "started", "deep": deep }))
                .unwrap();
        let m = p.content_like_members();
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("deep.a.a") && m[0].ends_with('…'), "{m:?}");
        let wide = vec![0; MAX_CONTENT_SCAN_VALUES + 1];
        let p: LifecycleParams =
            serde_json::from_value(json!({ "inferenceId": "i", "phase": "started", "wide": wide }))
                .unwrap();
        assert_eq!(p.content_like_members().len(), 1);
        let p: LifecycleParams = serde_json::from_value(
            json!({ "inferenceId": "i", "phase": "started", "small": [0, 1, {"k": 2}] }),
        )
        .unwrap();
        assert!(p.content_like_members().is_empty());
    }

    #[test]
    fn s10_5_unknown_phase_is_rejected() {
        let r = serde_json::from_value::<LifecycleParams>(
            json!({"inferenceId": "i", "phase": "paused"}),
        );
        assert!(r.is_err());
    }
}
