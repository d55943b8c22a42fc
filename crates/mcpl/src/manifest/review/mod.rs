//! Host-side manifest review (§5.1, §6, §17.1–§17.8): validation findings, the diff of two
//! manifests, the per-connection review state that turns a fetched manifest into one change
//! receipt, and the §17.8 fetch limiter.
//!
//! Everything here is pure: time is passed in, nothing is fetched.
//!
//! # Paths in findings
//! A [`Finding`]'s `path` is **dotted**, relative to the manifest (the `experimental.mcpl`
//! object): `contextHooks.afterInference`, `featureSets.memory.retrieval` (a feature-set
//! name is appended verbatim, dots included), `featureSets[2]` for an entry of the 0.4 array
//! form. The empty string is the manifest itself.
//!
//! # Readings where the spec is silent (fail closed)
//! - A fetched manifest that parses but that the §17.2 digest refuses (`identifier_charset`)
//!   is partially invalid (§17.5 step 1): only its removals apply, by reviewing the manifest
//!   in force with them applied (`removals_only`); it does not count towards suspension.
//!   At `initialize` such a manifest grants nothing of MCPL (there is nothing in force to
//!   narrow), while MCP `tools` from the outer capabilities stands, as for a server without
//!   MCPL (§3.2, §3.3).
//! - `tools` is sourced only from the outer MCP capabilities (§5.1), which `mcpl/manifest`
//!   does not return, so a fetch keeps the `tools` advertisement seen at `initialize`.
//! - A newly declared feature set that is available under the standing grant produces no
//!   impact (none of the §17.6 vocabulary fits and it widens nothing); one that is born
//!   unavailable is `feature-degraded`/`informational`. A feature set that disappears while
//!   available is `feature-degraded`/`applied` with reason `removed`.
//! - `ontology-reference-undeclared` is derived from the tags declared under
//!   `featureSets.*.tagOntology.tags` only (keyed families are not consulted); its subject
//!   is the tag that disappeared.

use std::collections::{BTreeMap, BTreeSet};

use std::time::{Instant, SystemTime};

use serde::Serialize;

use serde_json::{json, Value};

use super::digest::{self, DigestError};

use super::domains::{changed_domains, ChangeDomain, ChangeImpact, Disposition};

use crate::capability::{self, Capability, CapabilitySet, FindingKind, Grant, PatternError};

use crate::policy::{self, FeatureSetStatus, FeatureSets, HostGrant, Selection};

use crate::tags::{Tag, TagPattern};

mod diff;
mod limiter;
mod validate;

pub use diff::*;
pub use limiter::*;
pub use validate::*;

// Per-connection review state (§17.5, §17.10 implementation note)

/// The effective grant in force, when it was set, and why (§17.10: "last negotiated
/// effective grant with timestamp and provenance").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    /// The effective grant: the only authority.
    pub grant: Grant,
    /// When the host set it (supplied by the caller; no clock is read here).
    pub at: SystemTime,
    /// Why: `initialize`, `manifest-change`, or the caller's own label.
    pub provenance: String,
}

/// What became of a fetched manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchResult {
    /// The content changed; the new manifest is in force and this is its one receipt.
    Changed(ChangeReceipt),
    /// Same recomputed digest as the manifest in force: nothing to do, no receipt.
    Unchanged,
    /// The manifest is not an object or the digest refused it: nothing was learned, the
    /// previous manifest stands (§17.5 step 1).
    PreviousStands {
        /// `manifest_not_object` or `identifier_charset`.
        code: &'static str,
        /// Consecutive failed fetches, this one included.
        consecutive_failures: u32,
    },
}

/// The outcome of [`ManifestReview::on_fetched`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeOutcome {
    /// Whether the manifest changed, stayed, or was not usable.
    pub result: FetchResult,
    /// Validation findings of the fetched manifest (as at `initialize`).
    pub findings: Vec<Finding>,
    /// Conformance defects (§17.2): the announced or embedded revision does not match the
    /// recomputed digest. Reported, never grounds for rejection.
    pub defects: Vec<Finding>,
}

impl ChangeOutcome {
    /// The receipt, when the manifest changed.
    pub fn receipt(&self) -> Option<&ChangeReceipt> {
        match &self.result {
            FetchResult::Changed(r) => Some(r),
            _ => None,
        }
    }
}

/// Why a review operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// A host policy pattern is malformed (the host's own configuration is wrong).
    #[error("the host policy is malformed: {0}; fix the pattern in HostConfig.policy (an exact capability path, or `prefix.*`, §5.4)")]
    Policy(#[from] PatternError),
    /// The named feature set carries no `tagOntology` the digest accepts.
    #[error("no_ontology: feature set {0:?} has no tagOntology to accept (the set declares none, or no manifest is in force, §16.5); name a set whose declaration carries one (HostSession::manifest shows them)")]
    NoOntology(String),
}

impl ReviewError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ReviewError::Policy(p) => p.code(),
            ReviewError::NoOntology(_) => "no_ontology",
        }
    }
}

/// The host's per-connection manifest review (§17.5): the manifest in force and its digest,
/// the effective grant, accepted ontology digests, feature-set degradation and the last
/// receipt. Pure; the host session feeds it fetched manifests and acts on its outcomes.
#[derive(Debug, Clone)]
pub struct ManifestReview {
    manifest: KeptManifest,
    revision: Option<String>,
    findings: Vec<Finding>,
    outer_tools: bool,
    advertised: CapabilitySet,
    decls: FeatureSets,
    selection: Selection,
    statuses: BTreeMap<String, FeatureSetStatus>,
    grant: GrantRecord,
    accepted: BTreeMap<String, AcceptedOntology>,
    patterns: Vec<TagPattern>,
    last_receipt: Option<ChangeReceipt>,
    failures: u32,
}

/// A standing acceptance of a feature set's `tagOntology` (§16.5): its digest, and the
/// ontology as parsed when it was accepted (none if it does not parse), so that applying it
/// to a message never reads the manifest again. A manifest change to it ends the acceptance.
#[derive(Debug, Clone)]
struct AcceptedOntology {
    digest: String,
    ontology: Option<crate::tags::TagOntology>,
}

/// The manifest in force, kept as its JSON text: a `Value` tree of a small manifest costs
/// several times its text (every object a B-tree), per connection, to serve the rare diff
/// (a fetch, accepting an ontology) and the getter. The tree is parsed back when one of
/// those needs it (exact: `float_roundtrip`), and kept only once the getter has asked.
#[derive(Debug, Clone)]
struct KeptManifest {
    text: Box<str>,
    parsed: std::sync::OnceLock<Value>,
}

/// The deepest nesting [`KeptManifest`] keeps as text alone (below `serde_json`'s parse
/// depth limit of 128).
const KEPT_AS_TEXT_DEPTH: usize = 100;

/// Whether `v` nests arrays and objects more than `depth` deep.
fn nested_deeper_than(v: &Value, depth: usize) -> bool {
    match v {
        Value::Array(_) | Value::Object(_) if depth == 0 => true,
        Value::Array(a) => a.iter().any(|x| nested_deeper_than(x, depth - 1)),
        Value::Object(o) => o.values().any(|x| nested_deeper_than(x, depth - 1)),
        _ => false,
    }
}

impl KeptManifest {
    fn new(manifest: &Value) -> KeptManifest {
        let parsed = std::sync::OnceLock::new();
        // Text nested deeper than the parser's depth limit (128) would not parse back: such
        // a manifest keeps its tree, as one whose text could not be written would (writing
        // a `Value` does not fail: its keys are strings).
        let text = match serde_json::to_string(manifest) {
            Ok(text) if !nested_deeper_than(manifest, KEPT_AS_TEXT_DEPTH) => text,
            _ => {
                let _ = parsed.set(manifest.clone());
                String::new()
            }
        };
        KeptManifest {
            text: text.into(),
            parsed,
        }
    }

    fn parse(&self) -> Value {
        // Text this type wrote from a `Value` (nested no deeper than the parser reads)
        // always parses back; a tree it could not keep as text is kept as the tree.
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            tracing::error!(error = %e, "a manifest kept as text did not parse back");
            Value::Null
        })
    }

    /// The tree, parsed now unless the getter kept it.
    fn value(&self) -> std::borrow::Cow<'_, Value> {
        match self.parsed.get() {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(self.parse()),
        }
    }

    /// The tree, parsed once and kept.
    fn kept(&self) -> &Value {
        self.parsed.get_or_init(|| self.parse())
    }
}

impl ManifestReview {
    /// Reviews the manifest presented at `initialize` and computes the effective grant
    /// (advertisement ∩ host policy patterns, §5.4). `outer_caps` is the MCP `capabilities`
    /// object, the only source of `tools`. A non-object or digest-refused manifest grants
    /// nothing of MCPL (fail closed; see the module docs); the outer `tools` still stands.
    pub fn initial<'a, I>(
        manifest: &Value,
        outer_caps: Option<&Value>,
        policy: I,
        now: SystemTime,
    ) -> Result<(ManifestReview, Vec<Finding>), ReviewError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let (findings, recomputed) = validate_with_digest(manifest);
        let outer_tools =
            crate::capability::declares_tools(outer_caps.and_then(|c| c.get("tools")));
        let revision = recomputed.ok();
        let (advertised, decls) = if revision.is_some() {
            (
                advertised_by(manifest, outer_tools),
                FeatureSets::from_mcpl(manifest).0,
            )
        } else {
            // MCPL is refused, MCP is not (§3.2, §3.3): `tools`, taken from the outer
            // capabilities, stands.
            let mut tools_only = CapabilitySet::EMPTY;
            if outer_tools {
                tools_only.insert(Capability::Tools);
            }
            (tools_only, FeatureSets::default())
        };
        let hg = HostGrant::compute(advertised, policy)?;
        let selection = Selection::default();
        let statuses = policy::derive(&decls, &hg.effective, &selection);
        let review = ManifestReview {
            manifest: KeptManifest::new(manifest),
            revision,
            findings: findings.clone(),
            outer_tools,
            advertised,
            decls,
            selection,
            statuses,
            grant: GrantRecord {
                grant: hg.effective,
                at: now,
                provenance: "initialize".into(),
            },
            accepted: BTreeMap::new(),
            patterns: Vec::new(),
            last_receipt: None,
            failures: 0,
        };
        Ok((review, findings))
    }

    /// Processes a manifest fetched with `mcpl/manifest` (§17.5). `announced_revision` is the
    /// revision of the `mcpl/manifestChanged` that prompted the fetch, if any. Never rejects
    /// on a digest mismatch; never grants anything new; emits at most one receipt.
    pub fn on_fetched(
        &mut self,
        new: &Value,
        announced_revision: Option<&str>,
        now: SystemTime,
    ) -> ChangeOutcome {
        let (findings, recomputed) = validate_with_digest(new);
        let rev = match recomputed {
            Ok(r) => r,
            // §17.5 step 1: it parses, so every removal it shows applies; nothing it adds.
            Err(e) if new.is_object() && self.revision.is_some() => {
                let mut outcome = self.removals_of(new, now);
                outcome.findings = findings;
                outcome.defects.push(Finding::new(
                    "partially_invalid_manifest",
                    Severity::Error,
                    "§17.5",
                    "",
                    format!(
                        "the fetched manifest parses but the digest refuses it ({}): only \
                         its removals were applied",
                        e.code()
                    ),
                ));
                return outcome;
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                tracing::warn!(
                    code = e.code(),
                    consecutive_failures = self.failures,
                    "§17.5: fetched manifest unusable; previous manifest stands"
                );
                return ChangeOutcome {
                    result: FetchResult::PreviousStands {
                        code: e.code(),
                        consecutive_failures: self.failures,
                    },
                    findings,
                    defects: Vec::new(),
                };
            }
        };
        self.failures = 0;
        let mut defects: Vec<Finding> = findings
            .iter()
            .filter(|f| f.code == "revision_mismatch")
            .cloned()
            .collect();
        if let Some(a) = announced_revision.filter(|a| *a != rev) {
            defects.push(Finding::new(
                "announced_revision_mismatch",
                Severity::Error,
                "§17.2",
                "revision",
                format!(
                    "mcpl/manifestChanged announced {a} but the fetched manifest digests to \
                     {rev}; the server must announce its content digest"
                ),
            ));
        }
        for d in &defects {
            tracing::warn!(code = d.code, "§17.2 conformance defect: {}", d.message);
        }
        if self.revision.as_deref() == Some(rev.as_str()) {
            self.findings = findings.clone();
            return ChangeOutcome {
                result: FetchResult::Unchanged,
                findings,
                defects,
            };
        }

        let old = self.manifest.value();
        let before = Before {
            manifest: &old,
            advertised: self.advertised,
            grant: self.grant.grant.capabilities(),
            statuses: &self.statuses,
            accepted: self
                .accepted
                .iter()
                .map(|(name, a)| (name.as_str(), a.digest.as_str()))
                .collect(),
            patterns: &self.patterns,
            selection: &self.selection,
            outer_tools: self.outer_tools,
        };
        let after = assess(&before, new);
        let receipt = ChangeReceipt {
            previous_revision: self.revision.take(),
            revision: rev.clone(),
            domains: changed_domains(&old, new),
            impacts: after.impacts,
        };
        if after.grant != self.grant.grant.capabilities() {
            self.grant = GrantRecord {
                grant: Grant::from_set(after.grant),
                at: now,
                provenance: "manifest-change".into(),
            };
        }
        for name in &after.invalidated {
            self.accepted.remove(name);
        }
        drop(old);
        self.manifest = KeptManifest::new(new);
        self.revision = Some(rev);
        self.findings = findings.clone();
        self.advertised = after.advertised;
        self.decls = after.decls;
        self.statuses = after.statuses;
        self.last_receipt = Some(receipt.clone());
        ChangeOutcome {
            result: FetchResult::Changed(receipt),
            findings,
            defects,
        }
    }

    /// [`Self::on_fetched`] for a fetched manifest the host will not read whole: one whose
    /// feature sets are past the host's bound (`host::HostConfig::max_feature_sets`). It
    /// parses, so §17.5 step 1 still applies every removal it shows (a capability it no
    /// longer advertises, a set it no longer declares or whose `uses` changed) and nothing it
    /// adds; the caller reports the bound. Only the sets the manifest in force declares are
    /// read, and the fetched manifest is neither validated, digested nor kept: what comes
    /// into force is the manifest in force less those removals. Refusing the whole of it
    /// left broader authority standing, which §17.5 forbids.
    pub fn on_fetched_past_bound(&mut self, new: &Value, now: SystemTime) -> ChangeOutcome {
        self.removals_of(new, now)
    }

    /// The manifest in force with only what `new` removes applied ([`removals_only`]),
    /// reviewed as a fetched manifest. Built only from members of the manifest in force, so
    /// it digests whenever that one did (it has a revision); one that did not (an
    /// identifier the digest refuses, §17.2) leaves it standing, as its own re-fetch would.
    fn removals_of(&mut self, new: &Value, now: SystemTime) -> ChangeOutcome {
        let merged = removals_only(&self.manifest.value(), new);
        self.on_fetched(&merged, None, now)
    }

    /// Sets the effective grant after a host policy decision (e.g. approving a pending
    /// expansion). Never exceeds the current advertisement: the grant is intersected with it.
    /// Re-derives feature-set statuses and returns the grant now in force.
    pub fn set_grant(&mut self, grant: Grant, now: SystemTime, provenance: &str) -> Grant {
        let g = grant.intersect(self.advertised);
        self.grant = GrantRecord {
            grant: g,
            at: now,
            provenance: provenance.to_owned(),
        };
        self.statuses = policy::derive(&self.decls, &g, &self.selection);
        g
    }

    /// The host's feature-set selection (§5.3) statuses are derived under.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Replaces the host's feature-set selection (§5.3) and re-derives statuses.
    pub fn set_selection(&mut self, selection: Selection) {
        self.selection = selection;
        self.statuses = policy::derive(&self.decls, &self.grant.grant, &self.selection);
    }

    /// Records acceptance of feature set `name`'s current `tagOntology` (§16.5) and returns
    /// the accepted digest. A later fetch whose ontology digest differs invalidates it.
    pub fn accept_ontology(&mut self, name: &str) -> Result<String, ReviewError> {
        let manifest = self.manifest.value();
        let value = self
            .revision
            .as_ref()
            .and_then(|_| diff::ontology_of(&manifest, name));
        let Some((value, digest)) = value.and_then(|v| Some((v, digest::ontology_digest(v).ok()?)))
        else {
            return Err(ReviewError::NoOntology(name.to_owned()));
        };
        let ontology = crate::tags::TagOntology::parse(value).ok().map(|(o, _)| o);
        drop(manifest);
        self.accepted.insert(
            name.to_owned(),
            AcceptedOntology {
                digest: digest.clone(),
                ontology,
            },
        );
        Ok(digest)
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5: accepted
    /// suggestions stay revocable); returns the digest that was accepted, if any.
    pub fn revoke_ontology(&mut self, name: &str) -> Option<String> {
        self.accepted.remove(name).map(|a| a.digest)
    }

    /// The accepted ontology digest of feature set `name`, if acceptance still stands.
    pub fn accepted_ontology(&self, name: &str) -> Option<&str> {
        self.accepted.get(name).map(|a| a.digest.as_str())
    }

    /// Feature set `name`'s accepted `tagOntology` and its digest, while the acceptance
    /// stands (§16.5: the manifest in force still carries that digest, as a change to it
    /// ends the acceptance) and the ontology parses.
    pub(crate) fn standing_ontology(
        &self,
        name: &str,
    ) -> Option<(&crate::tags::TagOntology, &str)> {
        let a = self.accepted.get(name)?;
        Some((a.ontology.as_ref()?, a.digest.as_str()))
    }

    /// Sets the tag patterns the consumer's treatment rules reference (e.g.
    /// `TreatmentRules::referenced_patterns`), so a fetch can report
    /// `ontology-reference-undeclared`. A pattern that is malformed or can never match
    /// (§16.7, [`TagPattern::all`]) refuses the call whole, each named, the patterns set
    /// before standing.
    pub fn set_consumer_patterns<'a, I>(
        &mut self,
        patterns: I,
    ) -> Result<(), Vec<crate::tags::RuleError>>
    where
        I: IntoIterator<Item = &'a str>,
    {
        self.patterns = TagPattern::all(patterns)?;
        Ok(())
    }

    /// [`Self::set_consumer_patterns`] for patterns validated already.
    pub(crate) fn set_valid_patterns(&mut self, patterns: Vec<TagPattern>) {
        self.patterns = patterns;
    }

    /// The manifest in force. Its tree is kept from then on beside its text (see
    /// [`Self::manifest_owned`] for a copy that keeps nothing).
    pub fn manifest(&self) -> &Value {
        self.manifest.kept()
    }

    /// A copy of the manifest in force, read back from its text without keeping the tree.
    pub fn manifest_owned(&self) -> Value {
        self.manifest.value().into_owned()
    }

    /// The host-recomputed digest of the manifest in force (`None` if it had none).
    pub fn revision(&self) -> Option<&str> {
        self.revision.as_deref()
    }

    /// Validation findings of the manifest in force.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// What the manifest in force advertises (plus outer `tools`).
    pub fn advertised(&self) -> CapabilitySet {
        self.advertised
    }

    /// The effective grant with its timestamp and provenance.
    pub fn grant(&self) -> &GrantRecord {
        &self.grant
    }

    /// The declared feature sets in force.
    pub fn declarations(&self) -> &FeatureSets {
        &self.decls
    }

    /// Current derived feature-set statuses (degradation).
    pub fn statuses(&self) -> &BTreeMap<String, FeatureSetStatus> {
        &self.statuses
    }

    /// The statuses as they would be under `grant` (borrowed when it is the grant in force):
    /// how a host judges a message read before a later widening (§5.3, §6.7).
    pub fn statuses_under(
        &self,
        grant: &Grant,
    ) -> std::borrow::Cow<'_, BTreeMap<String, FeatureSetStatus>> {
        if *grant == self.grant.grant {
            std::borrow::Cow::Borrowed(&self.statuses)
        } else {
            let g = grant.intersect(self.advertised);
            std::borrow::Cow::Owned(policy::derive(&self.decls, &g, &self.selection))
        }
    }

    /// The last receipt emitted.
    pub fn last_receipt(&self) -> Option<&ChangeReceipt> {
        self.last_receipt.as_ref()
    }

    /// Consecutive fetches whose manifest could not be used (reset by a usable one).
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Whether the host MAY now suspend MCPL privileges (§17.5): at least `threshold`
    /// consecutive failures, and never on a single one (a threshold below 2 counts as 2).
    pub fn may_suspend(&self, threshold: u32) -> bool {
        self.failures >= threshold.max(2)
    }

    /// A receipt for a §17.7 surface change (`tools`, `resources`, `prompts`, `channels`)
    /// learnt from MCP's `list_changed` or `channels/changed`, for the same changelog
    /// surface. `surface-changed`/`informational`, no domain; the manifest is unchanged.
    /// `None` when no digested manifest is in force (non-object or refused at `initialize`),
    /// since a receipt names the revision it applies to.
    pub fn surface_changed(&mut self, surface: &str) -> Option<ChangeReceipt> {
        let revision = self.revision.clone()?;
        let receipt = ChangeReceipt {
            previous_revision: Some(revision.clone()),
            revision,
            domains: Vec::new(),
            impacts: vec![Impact {
                impact: ChangeImpact::SurfaceChanged,
                disposition: Disposition::Informational,
                domain: None,
                subject: surface.to_owned(),
                reason: None,
            }],
        };
        self.last_receipt = Some(receipt.clone());
        Some(receipt)
    }
}

/// The surface a server's MCP change notification announces (§17.7): `tools`, `resources`
/// or `prompts` for their `notifications/*/list_changed`, `None` for any other method. Only
/// these make a `surface-changed` receipt: a name the server chose is not the host's closed
/// vocabulary (§17.6), and `roots` is a surface the host announces, not the server.
pub fn announced_surface(method: &str) -> Option<&'static str> {
    match method {
        "notifications/tools/list_changed" => Some("tools"),
        "notifications/resources/list_changed" => Some("resources"),
        "notifications/prompts/list_changed" => Some("prompts"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ontology(desc: &str) -> Value {
        json!({"version": "0.5", "pushEvents": true, "featureSets": {"alerts": {
            "description": "Alerts", "uses": ["pushEvents"],
            "tagOntology": {"tags": {"acme:alert": {"desc": desc}}}}}})
    }

    /// §16.5: an accepted ontology is applied from what was parsed when it was accepted,
    /// so using it does not make the review keep the manifest's tree beside its text; a
    /// manifest change to it ends the acceptance (§17.5) and with it the parsed ontology.
    #[test]
    fn s16_5_a_standing_ontology_is_kept_parsed_without_the_manifest_tree() {
        let m = with_ontology("An alert");
        let (mut r, _) = ManifestReview::initial(&m, None, ["*"], SystemTime::UNIX_EPOCH)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(r.standing_ontology("alerts").is_none(), "not accepted yet");
        let digest = r.accept_ontology("alerts").unwrap();
        let (onto, d) = r.standing_ontology("alerts").unwrap();
        assert_eq!(d, digest);
        let (parsed, _) =
            crate::tags::TagOntology::parse(&m["featureSets"]["alerts"]["tagOntology"]).unwrap();
        assert_eq!(onto, &parsed);
        assert!(r.manifest.parsed.get().is_none(), "the tree was kept");
        assert_eq!(r.manifest_owned(), m);
        assert!(r.manifest.parsed.get().is_none(), "the copy kept the tree");
        r.on_fetched(&with_ontology("Changed"), None, SystemTime::UNIX_EPOCH);
        assert!(r.standing_ontology("alerts").is_none());
        assert_eq!(r.accepted_ontology("alerts"), None);
    }
}
