//! What the host may send, and its outgoing channel streams (§5.4, §14.1, §14.3), over plain
//! data: one gate and one stream bookkeeping for `host::HostSession` and [`HostState`].
//!
//! [`HostState`]: super::HostState

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Value};

use super::channels::{ChannelLimits, ChannelTable};
use super::{admit_outbound, admit_outbound_typed, McpOnlyReason, Mode, Receiver, Refusal};
use crate::capability::{Capability, Grant, Requirement};

/// Why the host may not send a message (§5.4, §14.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboundRefusal {
    /// The server never receives this method (its direction is host-bound, or it is not a
    /// method the tables know).
    #[error("{0} is not sent to a server")]
    WrongDirection(String),
    /// The grant (or readiness, §5.3) does not allow it.
    #[error("not granted: {0:?}")]
    NotGranted(Capability),
    /// The connection is MCP-only: no MCPL method is sent (§3.3).
    #[error("the connection is MCP-only ({0})")]
    McpOnly(McpOnlyReason),
    /// The channel is not this connection's, does not claim the direction, or the host's
    /// channel patterns do not permit it (§14.1, §14.3).
    #[error("channel {0:?} is not one this server registered for this, or the host's patterns refuse it")]
    ChannelNotPermitted(String),
    /// The params are a scalar, which no message carries (JSON-RPC 2.0 §4.2), or nested
    /// too deep for the peer to read ([`crate::jsonrpc::params_shape`]).
    #[error("{0}")]
    InvalidParams(crate::jsonrpc::ParamsDefect),
    /// The method is not sent in this form: §4.1 gives it as `kind`, and the server would
    /// not apply it ([`crate::protocol::form_refused`]).
    #[error(
        "{method} is sent only as a {kind:?} (§4.1); a server does not apply it in another form"
    )]
    WrongForm {
        /// The method.
        method: String,
        /// The form §4.1 gives it.
        kind: crate::protocol::Kind,
    },
}

/// The rule after [`gate`] for a message sent as a Notification (`notification`) or a
/// Request: the form §4.1 gives the method ([`crate::protocol::form_refused`]), as the
/// server's notification path applies it on receipt.
pub fn gate_form(method: &str, notification: bool) -> Result<(), OutboundRefusal> {
    match crate::protocol::form_refused(method, notification) {
        Some(kind) => Err(OutboundRefusal::WrongForm {
            method: method.to_owned(),
            kind,
        }),
        None => Ok(()),
    }
}

/// A host method with an API of its own, which keeps the host's obligations for it: the
/// generic send paths of `host::HostSession` and [`HostState`] refuse it and name the call.
///
/// [`HostState`]: super::HostState
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dedicated {
    /// `featureSets/update`: the policy exchange narrows first and widens on the receipt
    /// (§5.3, §6.7).
    Policy,
    /// `context/beforeInference`: sent only where it applies, `userMessage` redacted without
    /// `observe`, the answer judged under the grant at its receipt (§10.1, §5.4).
    Hook,
    /// `inference/lifecycle`: one `started` and one terminal per turn (§10.5).
    Lifecycle,
    /// `channels/outgoing/chunk` and `/complete`: indexed per inference, completed once
    /// (§14.3).
    OutgoingStream,
    /// `inference/chunk`: indexed per streamed `inference/request`, sent only while it is
    /// unanswered, and counted for the chunk its answer may still owe (§11.4).
    InferenceChunk,
}

/// Whether `method` is one of the host's [`Dedicated`] methods: one rule for every generic
/// send path.
pub fn dedicated(method: &str) -> Option<Dedicated> {
    use crate::protocol::channels::{ChannelsOutgoingChunk, ChannelsOutgoingComplete};
    use crate::protocol::feature_sets::FeatureSetsUpdate;
    use crate::protocol::hooks::BeforeInference;
    use crate::protocol::inference::InferenceChunk;
    use crate::protocol::lifecycle::InferenceLifecycle;
    use crate::protocol::Method;
    match method {
        FeatureSetsUpdate::NAME => Some(Dedicated::Policy),
        BeforeInference::NAME => Some(Dedicated::Hook),
        InferenceLifecycle::NAME => Some(Dedicated::Lifecycle),
        ChannelsOutgoingChunk::NAME | ChannelsOutgoingComplete::NAME => {
            Some(Dedicated::OutgoingStream)
        }
        InferenceChunk::NAME => Some(Dedicated::InferenceChunk),
        _ => None,
    }
}

/// The channel methods addressed to one channel by its `channelId` (§14.3).
fn keyed(method: &str) -> bool {
    matches!(
        method,
        "channels/publish"
            | "channels/outgoing/chunk"
            | "channels/outgoing/complete"
            | "channels/acknowledge"
            | "channels/typing"
    )
}

/// The host's outbound gate: the server's own admission rule (direction, readiness, grant;
/// §5.4), no MCPL method on an MCP-only connection, and a channel-addressed method only to
/// a channel this server registered with the direction it needs and the host's patterns
/// permit ([`ChannelTable::may_send`]).
pub fn gate(
    method: &str,
    params: Option<&Value>,
    mode: &Mode,
    ready: bool,
    grant: &Grant,
    channels: &ChannelTable,
    limits: &ChannelLimits,
) -> Result<(), OutboundRefusal> {
    if let Some(Err(kind)) = params.map(crate::jsonrpc::params_shape) {
        return Err(OutboundRefusal::InvalidParams(kind));
    }
    let admitted = admit_outbound(Receiver::Server, method, params, ready, grant);
    refuse_unadmitted(method, admitted, mode)?;
    if keyed(method) {
        let id = params
            .and_then(|p| p.get("channelId"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !channels.may_send(method, id, limits) {
            return Err(OutboundRefusal::ChannelNotPermitted(id.to_owned()));
        }
    }
    Ok(())
}

/// [`gate`] for a typed message that names no channel ([`names_a_channel`] false), its
/// requirement given by its type (`Method::requirement` of its params): the same decision
/// without a `Value` of its params (their shape is the encoder's to refuse).
pub fn gate_typed(
    method: &str,
    req: Requirement,
    mode: &Mode,
    ready: bool,
    grant: &Grant,
) -> Result<(), OutboundRefusal> {
    let admitted = admit_outbound_typed(Receiver::Server, method, req, ready, grant);
    refuse_unadmitted(method, admitted, mode)
}

/// Whether `method` is addressed to one of the server's channels (`channelId`), which
/// [`gate`] checks against the channel table and [`gate_typed`] cannot.
pub fn names_a_channel(method: &str) -> bool {
    keyed(method)
}

/// [`gate`]'s reading of the admission rule's answer, then no MCPL method on an MCP-only
/// connection (§3.2).
fn refuse_unadmitted(
    method: &str,
    admitted: Result<Requirement, Refusal>,
    mode: &Mode,
) -> Result<(), OutboundRefusal> {
    match admitted {
        Ok(_) => {}
        Err(Refusal::NotReceived) => return Err(OutboundRefusal::WrongDirection(method.into())),
        Err(Refusal::NotReady(d) | Refusal::Denied(d)) => {
            return Err(OutboundRefusal::NotGranted(d.capability))
        }
    }
    if crate::protocol::is_mcpl_method(method) {
        if let Mode::McpOnly(r) = mode {
            return Err(OutboundRefusal::McpOnly(r.clone()));
        }
    }
    Ok(())
}

/// One inference's outgoing stream to one server (§14.3): `index` is one counter across
/// all its channels, and each channel that received chunks gets exactly one `complete`
/// carrying its whole text, after which it is closed for the rest of the inference. The
/// caller sends what [`Self::chunk`]/[`Self::complete`] compose and then records it with
/// [`Self::chunk_sent`]/[`Self::complete_sent`], so a send that failed changes nothing.
#[derive(Debug, Clone)]
pub struct Outgoing {
    inference_id: String,
    conversation_id: Option<String>,
    next: u64,
    open: BTreeMap<String, String>,
    /// Channels whose `complete` was sent. Bounded by the channels the server may hold
    /// registered (only those pass [`gate`]).
    completed: HashSet<String>,
}

/// A channel of the stream already got its `complete` (§14.3): a reopened channel would get
/// a second `complete` carrying only its later text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("channel {channel_id:?} of inference {inference_id:?} was already completed (§14.3)")]
pub struct Completed {
    /// The inference.
    pub inference_id: String,
    /// The channel.
    pub channel_id: String,
}

impl Outgoing {
    /// The stream of inference `inference_id`, its frames carrying `conversation_id` when
    /// given.
    pub fn new(inference_id: &str, conversation_id: Option<&str>) -> Outgoing {
        Outgoing {
            inference_id: inference_id.to_owned(),
            conversation_id: conversation_id.map(str::to_owned),
            next: 0,
            open: BTreeMap::new(),
            completed: HashSet::new(),
        }
    }

    /// The inference this stream belongs to.
    pub fn inference_id(&self) -> &str {
        &self.inference_id
    }

    fn not_completed(&self, channel_id: &str) -> Result<(), Completed> {
        if self.completed.contains(channel_id) {
            return Err(Completed {
                inference_id: self.inference_id.clone(),
                channel_id: channel_id.to_owned(),
            });
        }
        Ok(())
    }

    /// The params of the next `channels/outgoing/chunk` for `channel_id`.
    pub fn chunk(&self, channel_id: &str, delta: &str) -> Result<Value, Completed> {
        self.not_completed(channel_id)?;
        let mut params = json!({ "inferenceId": self.inference_id, "channelId": channel_id,
                                 "index": self.next, "delta": delta });
        if let Some(c) = &self.conversation_id {
            params["conversationId"] = json!(c);
        }
        Ok(params)
    }

    /// Records that the chunk [`Self::chunk`] composed was sent.
    pub fn chunk_sent(&mut self, channel_id: &str, delta: &str) {
        self.next += 1;
        self.open
            .entry(channel_id.to_owned())
            .or_default()
            .push_str(delta);
    }

    /// The params of `channels/outgoing/complete` for `channel_id`, with the whole text it
    /// streamed; `None` for a channel that got no chunk (nothing is owed).
    pub fn complete(&self, channel_id: &str) -> Result<Option<Value>, Completed> {
        self.not_completed(channel_id)?;
        Ok(self
            .open
            .get(channel_id)
            .map(|text| self.complete_params(channel_id, text)))
    }

    /// Records that the `complete` of `channel_id` was sent: the channel is closed.
    pub fn complete_sent(&mut self, channel_id: &str) {
        self.open.remove(channel_id);
        self.completed.insert(channel_id.to_owned());
    }

    /// The channels that got chunks and are still owed their `complete`.
    pub fn open_channels(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }

    /// Takes every `complete` still owed, as (channel, params), leaving none open: for a
    /// stream that ends without [`Self::complete`] on each channel.
    pub fn take_owed(&mut self) -> Vec<(String, Value)> {
        let open = std::mem::take(&mut self.open);
        open.into_iter()
            .map(|(channel_id, text)| {
                let params = self.complete_params(&channel_id, &text);
                self.completed.insert(channel_id.clone());
                (channel_id, params)
            })
            .collect()
    }

    fn complete_params(&self, channel_id: &str, text: &str) -> Value {
        let mut params = json!({ "inferenceId": self.inference_id, "channelId": channel_id,
                                 "content": [{ "type": "text", "text": text }] });
        if let Some(c) = &self.conversation_id {
            params["conversationId"] = json!(c);
        }
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §5.3, §5.4, §3.2, §4.1: the typed gate decides every method naming no channel as the
    /// `Value` gate decides it (absent params, read as `{}`: the requirement the type gives
    /// for params leaving every optional member out), ready or not, under no grant, a part
    /// of one or all of it, on an MCPL or an MCP-only connection.
    #[test]
    fn the_typed_gate_decides_as_the_value_gate() {
        let grants = [
            Grant::none(),
            Grant::from_patterns(["tools", "channels.*", "state"]).expect("patterns parse"),
            Grant::from_set(crate::capability::CapabilitySet::ALL),
        ];
        let modes = [Mode::Mcpl, Mode::McpOnly(McpOnlyReason::NotAdvertised)];
        let (table, limits) = (ChannelTable::default(), ChannelLimits::default());
        let mut judged = 0;
        let names = crate::protocol::METHODS.iter().map(|m| m.name);
        for method in names.chain(["x/unknown", "tools/call"]) {
            if names_a_channel(method) {
                continue;
            }
            let req =
                crate::protocol::method_requirement(method, None).unwrap_or(Requirement::None);
            for grant in &grants {
                for mode in &modes {
                    for ready in [false, true] {
                        let by_value = gate(method, None, mode, ready, grant, &table, &limits);
                        let typed = gate_typed(method, req, mode, ready, grant);
                        assert_eq!(typed, by_value, "{method} {mode:?} ready {ready} {grant:?}");
                        judged += 1;
                    }
                }
            }
        }
        assert!(judged > 100, "{judged}");
    }

    /// §14.3: one index across channels, one `complete` per channel that got chunks, with
    /// its whole text; a completed channel stays closed; a channel without chunks owes none.
    #[test]
    fn s14_3_index_is_per_inference_and_complete_carries_the_whole_text() {
        let mut s = Outgoing::new("inf-1", Some("conv"));
        for (ch, d) in [("a", "Hel"), ("b", "x"), ("a", "lo")] {
            let p = s.chunk(ch, d).unwrap();
            s.chunk_sent(ch, d);
            assert_eq!(p["conversationId"], "conv");
            assert_eq!(p["channelId"], ch);
        }
        assert_eq!(s.chunk("a", "!").unwrap()["index"], 3);
        let p = s.complete("a").unwrap().unwrap();
        assert_eq!(p["content"][0]["text"], "Hello");
        s.complete_sent("a");
        assert!(s.chunk("a", "again").is_err());
        assert!(s.complete("a").is_err());
        assert_eq!(s.complete("never").unwrap(), None);
        assert_eq!(s.open_channels(), ["b"]);
        let owed = s.take_owed();
        assert_eq!(owed.len(), 1);
        assert_eq!(owed[0].1["content"][0]["text"], "x");
        assert!(s.open_channels().is_empty());
        assert!(s.chunk("b", "late").is_err());
    }

    /// A chunk composed but not sent changes nothing: the next chunk gets the same index.
    #[test]
    fn s14_3_an_unsent_chunk_takes_no_index() {
        let s = Outgoing::new("inf-1", None);
        let first = s.chunk("a", "x").unwrap();
        assert_eq!(first.get("conversationId"), None);
        assert_eq!(s.chunk("a", "x").unwrap()["index"], 0);
        assert_eq!(s.complete("a").unwrap(), None);
    }
}
