//! The manifest in force (§17.5): the strict host judges what the server sends against the
//! manifest it last fetched, not the one `initialize` presented. A fetched manifest is
//! reviewed by the library host's own rule ([`mcpl::manifest::review::ManifestReview`], the
//! review `HostState` runs): every removal applies at once (a capability no longer
//! advertised leaves the grant, a set no longer declared is undeclared), additions never
//! grant anything (the grant is only ever intersected with what is advertised now), and a
//! manifest that does not parse leaves the previous one standing.
//!
//! §17.5 step 3: a removal revokes host-first, then the Request and its receipt (§6.7: a
//! Request for any change to the effective grant). Once ready, the checker applies what the
//! served manifest took away first, then tells it by a `featureSets/update` Request with
//! the grant and selection now in force ([`Session::tell_revocation`]), and judges the
//! answer under `manifest.revocation-answered` as the reduction probe judges its own (a
//! receipt, well-formed, a refusal naming its fallback; an accepted one against the host's
//! derivation). Before the first policy nothing is told: that policy carries the grant in
//! force. What the server sends afterwards under what it removed is its own defect, judged
//! by the checks that judge the same use under a grant that never held it.

use std::collections::BTreeSet;
use std::time::SystemTime;

use mcpl::capability::{CapabilitySet, Grant};
use mcpl::manifest::review::ManifestReview;
use mcpl::manifest::DEFAULT_MAX_FEATURE_SETS as MAX_FEATURE_SETS;
use mcpl::policy::{self, FeatureSetStatus, HostGrant};
use mcpl::protocol::feature_sets::FeatureSetsUpdate;
use mcpl::protocol::Method;
use serde_json::Value;

use super::*;

/// The host's review of the manifest in force, and what it withdrew since `initialize`.
#[derive(Debug, Default)]
pub(super) struct InForce {
    /// The review, from the manifest `initialize` presented on (`None` before, and for a
    /// server whose MCPL is not used).
    review: Option<ManifestReview>,
    /// Capabilities advertised at `initialize` that the manifest in force no longer
    /// advertises.
    withdrawn: CapabilitySet,
    /// Feature sets declared at `initialize` that the manifest in force no longer declares
    /// (at most the sets of the initial manifest, which the feature-set bound bounds).
    undeclared: BTreeSet<String>,
}

/// The check judging the answer to the policy Request that tells what the served manifest
/// revoked ([`Session::tell_revocation`]).
pub(super) const REVOCATION_ANSWERED: &str = "manifest.revocation-answered";

/// How a detail says that the manifest in force took something away.
const WITHDRAWN: &str =
    "withdrawn by the manifest in force, the one mcpl/manifest served (§17.5: removals apply at once)";

impl Session {
    /// Starts the review of the manifest `initialize` presented (`capabilities`, the MCP
    /// ones, is where `tools` comes from), under the checker's host policy.
    pub(super) fn review_initial(&mut self, mcpl: &Value, capabilities: &Value) {
        self.in_force.review =
            ManifestReview::initial(mcpl, Some(capabilities), host_policy(), SystemTime::now())
                .ok()
                .map(|(review, _)| review);
    }

    /// A manifest `mcpl/manifest` served: reviewed as the library host reviews it; when it
    /// changed what is in force, the grant loses what is no longer advertised (and so does
    /// every grant the checker judges against: the first session's, the one before the
    /// reduction, the one later Requests tell), and the declarations and derived statuses
    /// become the new manifest's (the sets the probes disabled stay disabled).
    pub(super) fn take_fetched(&mut self, fetched: &Value) {
        let Some(review) = self.in_force.review.as_mut() else {
            return;
        };
        let before = review.advertised();
        let declared_before: Vec<String> = review.declarations().sets.keys().cloned().collect();
        let (grant_before, undeclared_before) = (self.grant, self.in_force.undeclared.len());
        // Past the feature-set bound only its removals apply, as in the library host
        // (`on_fetched_past_bound`: the sets in force are read, the fetched ones not built).
        let within = mcpl::manifest::feature_set_count(fetched) <= MAX_FEATURE_SETS;
        let now = SystemTime::now();
        let outcome = if within {
            review.on_fetched(fetched, self.announced.as_deref(), now)
        } else {
            review.on_fetched_past_bound(fetched, now)
        };
        if outcome.receipt().is_none() {
            return; // unchanged, or unusable: the manifest in force stands
        }
        let adv = review.advertised();
        let decls = review.declarations().clone();
        self.in_force.withdrawn = self.in_force.withdrawn.union(before).difference(adv);
        for name in declared_before {
            if !decls.sets.contains_key(&name) {
                self.in_force.undeclared.insert(name);
            }
        }
        self.in_force
            .undeclared
            .retain(|n| !decls.sets.contains_key(n));
        self.grant = self.grant.intersect(adv);
        if let Some(g) = &mut self.pre_reduction_grant {
            *g = g.intersect(adv);
        }
        if let Some(hg) = self.host_grant.take() {
            self.host_grant = Some(in_force_grant(hg, adv));
        }
        if let Some(n) = &mut self.narrowed {
            n.full = n.full.intersect(adv);
            n.full_available.retain(|s| decls.sets.contains_key(s));
        }
        self.decls = decls;
        self.statuses = self.statuses_in_force();
        let revoked = grant_before
            .capabilities()
            .difference(self.grant.capabilities());
        if revoked != CapabilitySet::EMPTY || self.in_force.undeclared.len() > undeclared_before {
            self.tell_revocation(revoked);
        }
    }

    /// §17.5 step 3, §6.7: what the served manifest revoked (`revoked`, from the grant; the
    /// sets it no longer declares) has taken effect; now the server is told by a
    /// `featureSets/update` Request carrying the grant in force and the sets disabled so
    /// far, and its answer is judged under [`REVOCATION_ANSWERED`]. Nothing is told before
    /// the session is ready (no policy in force: the first one carries the grant in force).
    fn tell_revocation(&mut self, revoked: CapabilitySet) {
        let Some(hg) = self
            .host_grant
            .filter(|_| self.ready && self.closed.is_none())
        else {
            return;
        };
        let params = self.policy_in_force(hg, true);
        let mut parts = Vec::new();
        if revoked != CapabilitySet::EMPTY {
            parts.push(format!("revoking {}", revoked.sorted_paths().join(", ")));
        }
        if !self.in_force.undeclared.is_empty() {
            let sets: Vec<&str> = self
                .in_force
                .undeclared
                .iter()
                .map(String::as_str)
                .collect();
            parts.push(format!("no longer declaring {}", sets.join(", ")));
        }
        let what = format!(
            "the policy Request telling what the served manifest withdrew ({})",
            parts.join(" and ")
        );
        let statuses = super::negotiation::derivation(&self.decls, &params);
        let (status, detail) = match self.request(FeatureSetsUpdate::NAME, params) {
            Reply::Result(r) => {
                let report = policy::parse_receipt(&r);
                if report.accepted == Some(true) {
                    self.judge_receipt(&report, &statuses, "the revocation by the manifest");
                }
                let (mut defects, fallback, _) = crate::check::inspect::receipt_defects(&report);
                if report.accepted == Some(false) {
                    defects.extend(fallback);
                }
                match (defects.is_empty(), report.accepted) {
                    (true, Some(false)) => (
                        Status::Pass,
                        format!("{what}: refused, naming its fallback"),
                    ),
                    (true, _) => (Status::Pass, format!("{what}: receipt accepted")),
                    (false, _) => (Status::Fail, format!("{what}: {}", defects.join("; "))),
                }
            }
            Reply::Error(e) => (
                Status::Fail,
                format!(
                    "{what}: answered with error {} {:?}, not a degradation receipt",
                    e.code, e.message
                ),
            ),
            other => (Status::Fail, format!("{what}: got {}", other.describe())),
        };
        self.rec.record(REVOCATION_ANSWERED, status, detail);
        // What came with the receipt is judged as after it.
        self.settle();
    }

    /// `hg` as the manifest in force leaves it (what it no longer advertises is neither
    /// advertised nor granted): what a later policy Request may tell (§5.4).
    pub(super) fn grant_in_force(&self, hg: HostGrant) -> HostGrant {
        match &self.in_force.review {
            Some(r) => in_force_grant(hg, r.advertised()),
            None => hg,
        }
    }

    /// The derivation (§6.4) of the declarations in force under the grant in force (none
    /// before an accepted receipt) and the selection the last policy Request carried, with
    /// the sets the probes disabled since marked so.
    fn statuses_in_force(&self) -> BTreeMap<String, FeatureSetStatus> {
        let grant = if self.ready {
            self.grant
        } else {
            Grant::none()
        };
        let selection = self
            .sent_policy
            .as_ref()
            .and_then(|p| policy::UpdateParams::parse(p).ok())
            .map(|p| policy::Selection {
                enabled: p.enabled,
                disabled: p.disabled,
            })
            .unwrap_or_default();
        let mut statuses = policy::derive(&self.decls, &grant, &selection);
        for name in self.reduced.iter().chain(&self.notified_disabled) {
            if let Some(st) = statuses.get_mut(name) {
                *st = FeatureSetStatus::Unavailable {
                    reason: policy::UnavailableReason::Disabled,
                    missing: CapabilitySet::EMPTY,
                };
            }
        }
        statuses
    }

    /// `": WHY"` when the manifest in force withdrew one of `needs` or the set `set`, for
    /// a detail to say the finding comes from the fetched manifest; empty otherwise.
    pub(super) fn withdrawn_note(&self, needs: CapabilitySet, set: Option<&str>) -> String {
        let caps = self.in_force.withdrawn.intersection(needs);
        let set = set.filter(|s| self.in_force.undeclared.contains(*s));
        match (caps.is_empty(), set) {
            (true, None) => String::new(),
            (false, _) => format!(": {} {WITHDRAWN}", caps.sorted_paths().join(", ")),
            (true, Some(s)) => format!(": {s:?} {WITHDRAWN}"),
        }
    }
}

/// `hg` with what `adv` no longer advertises taken out of each of its sets.
fn in_force_grant(hg: HostGrant, adv: CapabilitySet) -> HostGrant {
    HostGrant {
        advertised: hg.advertised.intersection(adv),
        effective: hg.effective.intersect(adv),
        denied: hg.denied.intersection(adv),
    }
}
