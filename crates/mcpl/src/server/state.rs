//! [`GrantState`]: the negotiated state of one connection as the application sees it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;
use crate::capability::{Capability, CapabilitySet, Grant};
use crate::jsonrpc::ErrorObject;
use crate::peer::PeerError;
use crate::policy::{FeatureSetStatus, FeatureSets, SetRefusal, UnavailableReason};
use crate::session::{gate_to_host, Refusal, SendRefusal, SendState};

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

    /// What both states allow: readiness, grant and available feature sets only where both
    /// have them (a set `other` does not know is unavailable).
    pub(super) fn meet(&self, other: &GrantState) -> GrantState {
        let feature_sets = self
            .feature_sets
            .iter()
            .map(|(name, status)| {
                let status = match (status, other.feature_sets.get(name)) {
                    (FeatureSetStatus::Available, Some(o)) => *o,
                    (FeatureSetStatus::Available, None) => FeatureSetStatus::Unavailable {
                        reason: UnavailableReason::CapabilityDenied,
                        missing: CapabilitySet::EMPTY,
                    },
                    (unavailable, _) => *unavailable,
                };
                (name.clone(), status)
            })
            .collect();
        GrantState {
            initialized: self.initialized && other.initialized,
            mcpl: self.mcpl && other.mcpl,
            ready: self.ready && other.ready,
            grant: self.grant.intersect(other.grant.capabilities()),
            feature_sets,
        }
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

    /// The server's outbound gate ([`crate::session::gate_to_host`], the one
    /// [`crate::session::ServerState`] applies too) under this state and the connection's
    /// declarations `decls`, before sending `method` with `params` (its wire form): a
    /// message the host would refuse is not sent.
    pub(super) fn gate(
        &self,
        decls: &FeatureSets,
        method: &str,
        params: &Value,
    ) -> Result<(), SendError> {
        let at = SendState {
            initialized: self.initialized,
            mcpl: self.mcpl,
            ready: self.ready,
            grant: &self.grant,
            declarations: decls,
            statuses: &self.feature_sets,
        };
        match gate_to_host(method, Some(params), &at) {
            Ok(_) => Ok(()),
            Err(refusal) => Err(refused(method, refusal)),
        }
    }
}

/// A refusal of [`gate_to_host`] as the [`SendError`] a typed sender returns.
fn refused(method: &str, refusal: SendRefusal) -> SendError {
    match refusal {
        SendRefusal::McpOnly => SendError::McpOnly,
        SendRefusal::Admission(Refusal::NotReady(d), _) => SendError::NotReady {
            capability: d.capability,
        },
        SendRefusal::Admission(Refusal::Denied(d), _) => SendError::CapabilityDenied {
            capability: d.capability,
        },
        SendRefusal::FeatureSet(SetRefusal::Unknown, name) => SendError::UnknownFeatureSet(name),
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
        assert_eq!(
            g.gate(
                &FeatureSets::default(),
                push::PushEvent::NAME,
                &serde_json::json!({"featureSet": "s"})
            ),
            Err(SendError::NotReady {
                capability: Capability::PushEvents
            })
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
