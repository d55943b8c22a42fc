//! Lifecycle turns at the host (§10.5): `inference/lifecycle` `started` and its one
//! terminal, each gated as the server admits it, their params encoded straight from their
//! type (issue #24: no `Value` tree per notification).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::{HostOutput, HostState, StateError};
use crate::jsonrpc::Encoded;
use crate::manifest::jcs;
use crate::protocol::lifecycle::InferenceLifecycle;
use crate::protocol::Method as _;
use crate::session::HostDiagnostic;
use crate::session::Transmission;

/// `inference/lifecycle` params as the host sends them (§10.5), members in sorted order, as
/// a `Value` writes them: the borrowed, write-only form of
/// [`LifecycleParams`](crate::protocol::lifecycle::LifecycleParams), which owns its strings
/// (one allocation each per notification) and is what a receiver reads.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Lifecycle<'a> {
    conversation_id: &'a str,
    inference_id: &'a str,
    phase: &'a str,
    turn_index: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Value>,
}

impl Lifecycle<'_> {
    /// Bytes of the params' text besides the three strings' contents: the member names,
    /// braces and quotes (62) and a `u64` (at most 20 digits). Escapes may need more.
    const FIXED_BYTES: usize = 82;

    /// The params as JSON text, exactly as [`Encoded::encode`] writes them (pinned by the
    /// tests below): without `usage`, written member by member into one `String` sized to
    /// hold it (issue #24: no serializer machinery, no member-name checks for these four
    /// fixed names, no regrowth, no UTF-8 check), each string escaped by
    /// [`jcs::write_string`], which escapes exactly as serde_json does (pinned by its
    /// tests); with `usage`, encoded (`usage` is the application's `Value`, checked as any).
    fn encode(&self) -> Result<Encoded, serde_json::Error> {
        if self.usage.is_some() {
            return Encoded::encode(self);
        }
        let mut text = String::with_capacity(
            Self::FIXED_BYTES
                + self.conversation_id.len()
                + self.inference_id.len()
                + self.phase.len(),
        );
        for (name, value) in [
            ("{\"conversationId\":", self.conversation_id),
            (",\"inferenceId\":", self.inference_id),
            (",\"phase\":", self.phase),
        ] {
            text.push_str(name);
            jcs::write_string(&mut text, value);
        }
        text.push_str(",\"turnIndex\":");
        jcs::push_u64(&mut text, self.turn_index);
        text.push('}');
        Ok(Encoded::from_written_text(text))
    }
}

impl HostState {
    /// Writes `inference/lifecycle` with `params` ([`Transmission::Notification`]); params
    /// that do not encode (an application's `usage` nested too deep) are reported and
    /// nothing is written.
    fn transmit_lifecycle(&mut self, params: &Lifecycle<'_>) {
        let method = InferenceLifecycle::NAME;
        match params.encode() {
            Ok(params) => self
                .out
                .push_back(HostOutput::Transmit(Transmission::Notification {
                    method,
                    params,
                })),
            Err(e) => tracing::error!(method, "params not encoded, nothing sent: {e}"),
        }
    }

    /// Starts a lifecycle turn (§10.5): sends `inference/lifecycle` `started`, gated as the
    /// server admits it (`inferenceLifecycle`; refused [`StateError::NotSent`]). Refused
    /// ([`StateError::Turn`]) while a turn for `inference_id` is open or among the last
    /// [`ENDED_IDS_REMEMBERED`](crate::session::ENDED_IDS_REMEMBERED) ended ones (also at the open
    /// limit), and [`StateError::TooManyOpen`] past that many open turns.
    pub fn start_turn(
        &mut self,
        inference_id: &str,
        conversation_id: &str,
        turn_index: u64,
    ) -> Result<(), StateError> {
        self.start_turn_owned(
            Arc::from(inference_id),
            conversation_id.to_owned(),
            turn_index,
        )
    }

    /// [`Self::start_turn`] with the ids already owned: they are kept, not copied (issue #24:
    /// `HostSession::start_turn` hands its own over).
    pub(crate) fn start_turn_owned(
        &mut self,
        inference_id: Arc<str>,
        conversation_id: String,
        turn_index: u64,
    ) -> Result<(), StateError> {
        self.open()?;
        // The gate reads no params of this method: its requirement is the method's own
        // (`InferenceLifecycle::REQUIREMENT`, §10.5), and it addresses no channel.
        self.gate_params(InferenceLifecycle::NAME, None)
            .map_err(StateError::NotSent)?;
        let duplicate = || {
            StateError::Turn(format!(
                "a turn for inference {inference_id:?} is open or recently ended"
            ))
        };
        // A duplicate is refused as one even at the open limit: ending turns would not make
        // room for it.
        if self.open_turns.len() >= crate::session::ENDED_IDS_REMEMBERED {
            if self.turns.knows(&inference_id) {
                return Err(duplicate());
            }
            return Err(StateError::TooManyOpen {
                what: "lifecycle turns",
                limit: crate::session::ENDED_IDS_REMEMBERED,
            });
        }
        // Below the limit, the claim is the duplicate check (one lookup of the id, not two).
        if !self.turns.claim(inference_id.clone()) {
            return Err(duplicate());
        }
        let params = Lifecycle {
            conversation_id: &conversation_id,
            inference_id: &inference_id,
            phase: "started",
            turn_index,
            usage: None,
        };
        self.transmit_lifecycle(&params);
        self.open_turns
            .insert(inference_id, (conversation_id, turn_index));
        Ok(())
    }

    /// Ends the open turn of `inference_id` with its one terminal (§10.5), `usage` attached
    /// when given. A terminal the grant no longer allows is not sent (outbound gating wins):
    /// reported, and [`StateError::NotSent`]; the turn ends either way. A `usage` that is
    /// not token usage (not an object, or a member that is not a number: §10.5, metadata
    /// only) is left out of the terminal, which is sent, and the call is
    /// [`StateError::UsageNotSent`].
    pub fn end_turn(
        &mut self,
        inference_id: &str,
        terminal: crate::session::Terminal,
        usage: Option<Value>,
    ) -> Result<(), StateError> {
        self.open()?;
        let Some((conversation_id, turn_index)) = self.open_turns.remove(inference_id) else {
            return Err(StateError::Turn(format!(
                "no turn for inference {inference_id:?} is open"
            )));
        };
        self.turns.end(inference_id);
        // The server's admission rule, applied before sending (§5.4); as at the start, it
        // reads no params.
        if let Err(r) = self.gate_params(InferenceLifecycle::NAME, None) {
            self.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: inference_id.to_owned(),
                detail: r.to_string(),
            });
            return Err(StateError::NotSent(r));
        }
        // §10.5: a terminal is owed whatever the usage; one that is not token usage is left
        // out and the caller told.
        let refused = usage.as_ref().and_then(usage_defect);
        let params = Lifecycle {
            conversation_id: &conversation_id,
            inference_id,
            phase: terminal.as_str(),
            turn_index,
            usage: usage.as_ref().filter(|_| refused.is_none()),
        };
        self.transmit_lifecycle(&params);
        match refused {
            Some(why) => Err(StateError::UsageNotSent(why)),
            None => Ok(()),
        }
    }
}

/// Why `usage` is not what a lifecycle terminal may carry, if it is not (§10.5: `usage` an
/// object of token usage, and no signal carries message content). Reading: `null` is
/// absent; otherwise an object whose `inputTokens` and `outputTokens` are token counts when
/// present ([`crate::protocol::inference::Usage`]) and whose every member is a number or
/// `null`, so vendor counters pass and no text or structure (where content would go) does.
fn usage_defect(usage: &Value) -> Option<String> {
    if usage.is_null() {
        return None;
    }
    let Some(o) = usage.as_object() else {
        let kind = crate::jsonrpc::json_type_name(usage);
        return Some(format!("usage is a JSON {kind}, not an object"));
    };
    if let Some((k, v)) = o.iter().find(|(_, v)| !v.is_number() && !v.is_null()) {
        let kind = crate::jsonrpc::json_type_name(v);
        let shown: String = k.chars().take(64).collect();
        return Some(format!("usage.{shown} is a JSON {kind}, not a number"));
    }
    serde_json::from_value::<crate::protocol::inference::Usage>(usage.clone())
        .err()
        .map(|e| format!("usage is not token usage: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{Encoded, Message, Notification};
    use serde_json::json;

    /// The lines are byte for byte the ones the `json!` tree wrote before the params were
    /// encoded from their type (audit of `165cc51`): every phase, with and without usage,
    /// escapes and extremes included.
    #[test]
    fn s10_5_lifecycle_lines_match_the_json_tree() {
        let usages = [
            None,
            Some(json!(null)),
            Some(json!({"z": 1.5, "a": {"y": [1, "\u{2028}"], "b": -0.0}, "é\n": u64::MAX})),
        ];
        for phase in ["started", "completed", "failed", "aborted"] {
            for usage in &usages {
                let (iid, cid, ti) = ("i\"\\\u{1}x", "c\u{7f}é", u64::MAX);
                let mut old = json!({ "inferenceId": iid, "conversationId": cid,
                                      "turnIndex": ti, "phase": phase });
                if let (Some(u), Some(o)) = (usage.clone(), old.as_object_mut()) {
                    o.insert("usage".into(), u);
                }
                let old_line = Message::Notification(Notification {
                    method: "inference/lifecycle".into(),
                    params: Some(old),
                })
                .to_json();
                let new = Lifecycle {
                    conversation_id: cid,
                    inference_id: iid,
                    phase,
                    turn_index: ti,
                    usage: usage.as_ref(),
                };
                let line = new.encode().unwrap().notification("inference/lifecycle");
                assert_eq!(line, old_line);
                assert_eq!(new.encode().unwrap(), Encoded::encode(&new).unwrap());
            }
        }
    }

    /// The params' text is the fixed part plus the three strings, no more (nothing to
    /// escape), at the longest turn index: the buffer `encode` sizes is never regrown.
    #[test]
    fn lifecycle_text_fits_its_fixed_size() {
        for phase in ["started", "completed", "failed", "aborted"] {
            let params = Lifecycle {
                conversation_id: "conversation",
                inference_id: "a-0000001",
                phase,
                turn_index: u64::MAX,
                usage: None,
            };
            let text = params.encode().unwrap();
            let strings = params.conversation_id.len() + params.inference_id.len() + phase.len();
            assert_eq!(text.get().len(), Lifecycle::FIXED_BYTES + strings);
        }
    }

    /// The write-only `Lifecycle` is read back whole by the receiver's own type
    /// ([`LifecycleParams`](crate::protocol::lifecycle::LifecycleParams)): no member it
    /// writes falls into `extra`, so the two forms of §10.5's params cannot drift apart.
    #[test]
    fn s10_5_lifecycle_reads_back_as_lifecycle_params() {
        use crate::protocol::lifecycle::{LifecycleParams, Phase};
        let usage = json!({"inputTokens": 1, "outputTokens": 2});
        for (phase, wire, usage) in [
            (Phase::Started, "started", None),
            (Phase::Completed, "completed", Some(&usage)),
            (Phase::Aborted, "aborted", None),
            (Phase::Failed, "failed", Some(&usage)),
        ] {
            let sent = Lifecycle {
                conversation_id: "c",
                inference_id: "i",
                phase: wire,
                turn_index: 3,
                usage,
            };
            let text = sent.encode().unwrap();
            let read: LifecycleParams = serde_json::from_str(text.get()).unwrap();
            assert_eq!(read.inference_id, "i");
            assert_eq!(read.conversation_id.as_deref(), Some("c"));
            assert_eq!(read.turn_index, Some(3));
            assert_eq!(read.phase, phase);
            assert_eq!(read.usage.is_some(), usage.is_some());
            assert!(read.extra.is_empty(), "{:?}", read.extra);
        }
    }
}
