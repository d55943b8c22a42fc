//! [`GrantState`]: the negotiated state of one connection as the application sees it.

use std::collections::BTreeMap;

use super::*;
use crate::capability::{Capability, CapabilitySet, Grant, Requirement};
use crate::policy::{self, FeatureSetStatus, FeatureSets, SetRefusal, UnavailableReason};

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

    /// The host's feature-set gate ([`crate::policy::feature_set_gate`]) applied before a
    /// send under `name` that exercises `required`, against this connection's declarations
    /// `decls`: a message the host would refuse is not sent.
    pub(super) fn gate_feature_set(
        &self,
        decls: &FeatureSets,
        name: &str,
        required: Requirement,
    ) -> Result<(), SendError> {
        let refusal = match policy::feature_set_gate(decls, &self.feature_sets, name, required) {
            Ok(()) => return Ok(()),
            Err(r) => r,
        };
        let name = name.to_owned();
        match refusal {
            SetRefusal::Unknown => Err(SendError::UnknownFeatureSet(name)),
            SetRefusal::Unavailable(reason) => Err(SendError::FeatureSetUnavailable {
                name,
                reason: reason.code(),
            }),
            // A mismatch names what is missing (never nothing).
            SetRefusal::Undeclared(missing) => match missing.iter().next() {
                Some(capability) => Err(SendError::Undeclared { name, capability }),
                None => Ok(()),
            },
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
