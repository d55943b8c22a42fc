//! §14.3, §14.6 at the server: a host → server method naming a channel this connection
//! does not hold ([`ChannelLedger::is_known`](crate::session::server_channels::ChannelLedger::is_known))
//! reaches no application, and the application's answers to the host's `channels/open` and
//! `channels/close` say which channels it holds.

use serde::Deserialize;
use serde_json::Value;

use super::{Handed, ServerOutput, ServerState};
use crate::capability::Capability;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::protocol::channels::{
    descriptor_defects, ChannelDescriptor, ChannelsAcknowledge, ChannelsClose, ChannelsIncoming,
    ChannelsOpen, ChannelsOutgoingChunk, ChannelsOutgoingComplete, ChannelsPublish, ChannelsTyping,
};
use crate::protocol::Method as _;
use crate::session::{SendRefusal, ServerDiagnostic};

/// The channel a host → server `method` names in `params` (`channelId`, §14.3), for the
/// methods that act on a channel the server holds: `channels/publish`, `channels/close`,
/// `channels/outgoing/chunk`, `channels/outgoing/complete`, `channels/acknowledge`,
/// `channels/typing`. `None` for any other method, or params naming no channel as a string
/// (their params check answers those).
fn named_channel<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    match method {
        ChannelsPublish::NAME
        | ChannelsClose::NAME
        | ChannelsOutgoingChunk::NAME
        | ChannelsOutgoingComplete::NAME
        | ChannelsAcknowledge::NAME
        | ChannelsTyping::NAME => params?.get("channelId")?.as_str(),
        _ => None,
    }
}

impl ServerState {
    /// §14.5 for the server's own `channels/incoming`: every message's `channelId` is a
    /// channel this connection holds (or a change in flight proposes), as the host validates
    /// it against the channel actually registered; the first that is not refuses the whole
    /// request ([`SendRefusal::UnknownChannel`]), before the wire. Reading (fail closed):
    /// a host answers such a message refused at best, so it is never sent.
    pub(super) fn incoming_channels_held(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<(), SendRefusal> {
        if method != ChannelsIncoming::NAME {
            return Ok(());
        }
        let messages = params.get("messages").and_then(Value::as_array);
        for m in messages.into_iter().flatten() {
            if let Some(id) = m.get("channelId").and_then(Value::as_str) {
                if !self.channels.is_known(id) {
                    return Err(SendRefusal::UnknownChannel(id.to_owned()));
                }
            }
        }
        Ok(())
    }

    /// The channel `method` with `params` names when this connection does not hold it
    /// (§14.6 `-32023` for a Request; a Notification is reported `unknown_channel`). One
    /// it holds is one the host holds ([`ChannelLedger::named`](crate::session::server_channels::ChannelLedger::named)).
    pub(super) fn unknown_channel<'a>(
        &mut self,
        method: &str,
        params: Option<&'a Value>,
    ) -> Option<&'a str> {
        let id = named_channel(method, params)?;
        if self.channels.is_known(id) {
            self.channels.named(id);
            return None;
        }
        Some(id)
    }

    /// A policy Request was read (§6.7): when the grant in force no longer has
    /// `channels.lifecycle`, the channels opened by answers the host may have read only
    /// after its narrowing are no longer held, each reported
    /// ([`ServerDiagnostic::OpenedChannelDropped`]).
    pub(super) fn after_policy(&mut self) {
        if self.grant().allows(Capability::ChannelsLifecycle) {
            return;
        }
        for channel_id in self.channels.lifecycle_revoked() {
            // What `channels()` and the `channels/list` answer say may change.
            self.generation += 1;
            let d = ServerDiagnostic::OpenedChannelDropped {
                channel_id,
                cancelled: false,
            };
            self.out.push_back(ServerOutput::Diagnostic(d));
        }
    }

    /// How a host request of `method` with `params` is handed out: its answer is read when
    /// it is a hook's (§10.8) or says which channels the server holds (§14.3).
    pub(super) fn handed_as(method: &str, params: Option<&Value>) -> Handed {
        match method {
            crate::protocol::hooks::BeforeInference::NAME => Handed::Hook,
            ChannelsOpen::NAME => {
                let asked = params.and_then(|p| p.get("type")).and_then(Value::as_str);
                Handed::ChannelOpen(asked.map(str::to_owned))
            }
            ChannelsClose::NAME => match named_channel(method, params) {
                Some(id) => Handed::ChannelClose(id.to_owned()),
                None => Handed::Plain,
            },
            _ => Handed::Plain,
        }
    }

    /// The application's answer to a `channels/open` or `channels/close` (§14.3): the
    /// channel a result's `channel` describes is opened, if the host can hold it as asked
    /// under the grant now; one answered `closed: true` is gone (the rule the host applies
    /// to the same answers). An error, or `closed: false`, changes nothing. An open past
    /// [`crate::session::MAX_OPENED_CHANNELS`] becomes a `-32024` answer naming the limit.
    pub(super) fn channel_lifecycle_answered(
        &mut self,
        request: &RequestId,
        handed: &Handed,
        outcome: &mut Result<Value, ErrorObject>,
    ) {
        let Ok(result) = outcome else { return };
        match handed {
            Handed::ChannelOpen(asked) => {
                // Reading (fail closed): a result whose `channel` is no descriptor, or one
                // the host refuses to hold (§14.2's shape, or another `type` than it asked
                // for: its `invalid_descriptor`, `type_mismatch`; or `channels.lifecycle` no
                // longer granted, §5.4: judged under the grant current when it reads the
                // answer, its `capability_denied`), opens nothing, and is reported.
                let d = result.get("channel").unwrap_or(&Value::Null);
                let kind = d.get("type").and_then(Value::as_str);
                let reason = match ChannelDescriptor::deserialize(d) {
                    Ok(_) if !descriptor_defects(d).is_empty() => "invalid_descriptor",
                    Err(_) => "invalid_descriptor",
                    Ok(_) if kind.is_none() || kind != asked.as_deref() => "type_mismatch",
                    Ok(_) if !self.grant().allows(Capability::ChannelsLifecycle) => {
                        "capability_denied"
                    }
                    Ok(channel) => {
                        let id = channel.id.clone();
                        if let Err(limit) = self.channels.opened(channel, request) {
                            // Past the bound: the host is told the open failed, and why.
                            let data = serde_json::json!({ "channelId": id, "limit": limit });
                            *outcome = Err(ErrorObject::channel_open_failed(&id).with_data(data));
                        }
                        return;
                    }
                };
                let channel_id = d.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                let d = ServerDiagnostic::OpenAnswerRefused { channel_id, reason };
                self.out.push_back(ServerOutput::Diagnostic(d));
            }
            Handed::ChannelClose(id) if result.get("closed") == Some(&Value::Bool(true)) => {
                // What `channels()` lists may change.
                self.generation += u64::from(self.channels.closed(id));
            }
            _ => {}
        }
    }
}
