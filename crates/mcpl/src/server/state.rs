//! [`GrantState`]: the negotiated state of one connection as the application sees it.

use std::collections::BTreeMap;

use super::*;
use crate::capability::{Capability, CapabilitySet, Grant, Requirement};
use crate::policy::{FeatureSetStatus, UnavailableReason};

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

    pub(super) fn check(&self, req: Requirement) -> Result<(), SendError> {
        if self.initialized && !self.mcpl {
            return Err(SendError::McpOnly);
        }
        let grant = if self.ready {
            self.grant
        } else {
            Grant::none()
        };
        match grant.check(req) {
            Ok(()) => Ok(()),
            Err(d) if !self.ready => Err(SendError::NotReady {
                capability: d.capability,
            }),
            Err(d) => Err(SendError::CapabilityDenied {
                capability: d.capability,
            }),
        }
    }

    pub(super) fn check_feature_set(&self, name: &str) -> Result<(), SendError> {
        match self.feature_sets.get(name) {
            None => Err(SendError::UnknownFeatureSet(name.to_owned())),
            Some(FeatureSetStatus::Available) => Ok(()),
            Some(FeatureSetStatus::Unavailable { reason, .. }) => {
                Err(SendError::FeatureSetUnavailable {
                    name: name.to_owned(),
                    reason: reason.code(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn s5_3_inert_state_refuses_as_not_ready() {
        let g = GrantState::inert();
        assert!(!g.granted(Capability::PushEvents));
        assert_eq!(
            g.check(Requirement::One(Capability::PushEvents)),
            Err(SendError::NotReady {
                capability: Capability::PushEvents
            })
        );
    }
}
