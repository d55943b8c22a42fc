//! [`GrantState`]: the negotiated state of one connection as the application sees it.

use std::collections::BTreeMap;

use super::*;
use crate::capability::{Capability, Grant};
use crate::jsonrpc::ErrorObject;
use crate::peer::{CloseReason, PeerError};
use crate::policy::{FeatureSetStatus, SetRefusal};
use crate::session::{Refusal, SendRefusal};

/// The negotiated state of one connection as the application sees it: published on every
/// change through [`Session::grant_changes`].
#[derive(Debug, Clone, PartialEq)]
pub struct GrantState {
    /// `initialize` has been answered (before that, whether the host speaks MCPL is unknown).
    pub initialized: bool,
    /// The host advertised MCPL (false: MCP-only, §3.2, or not yet initialized).
    pub mcpl: bool,
    /// The policy Request has been applied (§5.3).
    pub ready: bool,
    /// The current grant (empty until ready).
    pub grant: Grant,
    /// Each declared feature set's derived status (§6.4).
    pub feature_sets: BTreeMap<String, FeatureSetStatus>,
}

impl GrantState {
    pub(super) fn inert() -> Self {
        GrantState {
            initialized: false,
            mcpl: false,
            ready: false,
            grant: Grant::none(),
            feature_sets: BTreeMap::new(),
        }
    }

    /// Whether behaviour needing `c` may run now (MCPL active, ready, granted).
    pub fn granted(&self, c: Capability) -> bool {
        self.mcpl && self.ready && self.grant.allows(c)
    }

    /// Whether the named feature set is available now.
    pub fn feature_available(&self, name: &str) -> bool {
        self.mcpl
            && self.ready
            && self
                .feature_sets
                .get(name)
                .is_some_and(FeatureSetStatus::is_available)
    }
}

/// A refusal of the session's outbound gate (`session::ServerState::request`, by the one
/// rule `session::gate_to_host`) as the [`SendError`] a typed sender returns.
pub(super) fn refused(method: &str, refusal: SendRefusal) -> SendError {
    match refusal {
        SendRefusal::McpOnly => SendError::McpOnly,
        SendRefusal::Admission(Refusal::NotReady(d), _) => SendError::NotReady {
            capability: d.capability,
        },
        SendRefusal::Admission(Refusal::Denied(d), _) => SendError::CapabilityDenied {
            capability: d.capability,
        },
        SendRefusal::FeatureSet(SetRefusal::Unknown, name) => SendError::UnknownFeatureSet(name),
        SendRefusal::UnknownChannel(id) => SendError::UnknownChannel(id),
        SendRefusal::FeatureSet(SetRefusal::Unavailable(reason), name) => {
            SendError::FeatureSetUnavailable {
                name,
                reason: reason.code(),
            }
        }
        SendRefusal::FeatureSet(SetRefusal::Undeclared(missing), name) => {
            match missing.iter().next() {
                Some(capability) => SendError::Undeclared { name, capability },
                // Never empty (a mismatch names what is missing); were it, still refused.
                None => SendError::Peer(PeerError::Remote(
                    SetRefusal::Undeclared(missing).to_error(&name),
                )),
            }
        }
        SendRefusal::TooManyPending { limit } => {
            SendError::Peer(PeerError::TooManyPending { limit })
        }
        // The typed senders send each method in its form; were one not to, it is refused
        // as unsendable, naming why.
        refusal @ (SendRefusal::InvalidParams(_) | SendRefusal::WrongForm { .. }) => {
            SendError::Peer(PeerError::Encode {
                method: method.to_owned(),
                reason: refusal.to_string(),
            })
        }
        // The driver feeds its state nothing after closing it (its callers learn the peer's
        // close reason); were it to, the call is refused as on a connection closed here.
        SendRefusal::Closed => SendError::Peer(PeerError::Closed(CloseReason::Local)),
        // The host ended its output: a request fails as the peer fails those it waits on
        // then (`CloseReason::Eof`).
        SendRefusal::InputEnded => SendError::Peer(PeerError::Closed(CloseReason::Eof)),
        // The typed senders send only methods the host receives (the test
        // `s4_1_every_typed_sender_is_a_host_bound_method`); were one not, the host would
        // answer -32601, and so does the gate. `gate_to_host` hands out no unknown request
        // and names no dedicated path (only `ServerState::notify` does).
        SendRefusal::Admission(Refusal::NotReceived, _)
        | SendRefusal::UnknownRequest(_)
        | SendRefusal::UseDedicated { .. } => {
            SendError::Peer(PeerError::Remote(ErrorObject::method_not_found(method)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{push, Method};

    #[test]
    pub(super) fn s5_3_inert_state_refuses_as_not_ready() {
        let g = GrantState::inert();
        assert!(!g.granted(Capability::PushEvents));
        let mut st = crate::session::ServerState::new(
            crate::session::ServerRules::new(
                serde_json::json!({"name": "s", "version": "1"}),
                serde_json::json!({"version": "0.5", "pushEvents": {}}),
            )
            .unwrap(),
        );
        let now = std::time::Instant::now();
        let params = serde_json::json!({"featureSet": "s"});
        let refusal = st
            .request(now, push::PushEvent::NAME, params)
            .expect_err("not initialized");
        assert_eq!(
            refused(push::PushEvent::NAME, refusal),
            SendError::NotReady {
                capability: Capability::PushEvents
            }
        );
    }

    /// §4.1: every method a typed `Session` sender sends is one the host receives, so the
    /// gate's `-32601` refusal never reaches a typed sender.
    #[test]
    pub(super) fn s4_1_every_typed_sender_is_a_host_bound_method() {
        use crate::protocol::{channels, inference, model};
        let sent = [
            push::PushEvent::NAME,
            channels::ChannelsRegister::NAME,
            channels::ChannelsChanged::NAME,
            channels::ChannelsIncoming::NAME,
            inference::InferenceRequest::NAME,
            model::ModelInfoRequest::NAME,
        ];
        for m in sent {
            assert!(crate::protocol::method_info(m).is_some(), "{m}");
            assert!(crate::session::Receiver::Host.receives(m), "{m}");
        }
    }
}
