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

// ---------------------------------------------------------------------------------------
// Validation (§5.1, §6, §17.1, §17.2, App. B.3)
// ---------------------------------------------------------------------------------------

/// How serious a validation finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Non-conforming: the manifest (or the named declaration) fails validation.
    Error,
    /// Tolerated, but the server should fix it.
    Warning,
    /// For the record (e.g. a vendor member that advertises nothing).
    Info,
}

/// One validation finding, serialised as `{ "code", "severity", "section", "path", "message" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable snake_case code (`invalid_uses`, `identifier_charset`, …).
    pub code: &'static str,
    /// Error, warning or info.
    pub severity: Severity,
    /// The spec section that decides it, e.g. `§6.2`.
    pub section: &'static str,
    /// Dotted path inside the manifest (see the module docs); empty for the manifest itself.
    pub path: String,
    /// One line saying what is wrong and what to do.
    pub message: String,
}

impl Finding {
    fn new(
        code: &'static str,
        severity: Severity,
        section: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            code,
            severity,
            section,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// `path: code: message`, the path `(manifest)` when empty: the line `mcpl validate` prints
/// after the severity and section, and `mcpl check` quotes in its details.
impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "(manifest)"
        } else {
            self.path.as_str()
        };
        write!(f, "{path}: {}: {}", self.code, self.message)
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// The members that make a document recognisably an MCP `initialize` result or params
/// (MCP requires `protocolVersion` in both, `serverInfo` in the result and `clientInfo` in
/// the params); a manifest defines none of them (§5.1, App. B.3).
pub const INITIALIZE_MARKERS: [&str; 3] = ["protocolVersion", "serverInfo", "clientInfo"];

/// Whether `doc` is recognisably an `initialize` result or params: an object carrying one of
/// [`INITIALIZE_MARKERS`]. Nothing else is taken for one, so a manifest with a vendor member
/// named `capabilities` or `experimental` is still a manifest.
pub fn is_initialize(doc: &Value) -> bool {
    doc.as_object()
        .is_some_and(|o| INITIALIZE_MARKERS.iter().any(|k| o.contains_key(*k)))
}

/// Finds the manifest in a JSON document: the `capabilities.experimental.mcpl` of a
/// document that [`is_initialize`], or else the document itself, never guessed from other
/// members (a bare MCP `capabilities` object is read as a manifest, like any object without
/// the markers). Returns the manifest and, for an `initialize`, its `capabilities` object.
/// `None` when an `initialize` carries no `capabilities.experimental.mcpl`.
pub fn extract_manifest(doc: &Value) -> Option<(&Value, Option<&Value>)> {
    if !is_initialize(doc) {
        return Some((doc, None));
    }
    let caps = doc.get("capabilities")?;
    let mcpl = caps.get("experimental").and_then(|e| e.get("mcpl"))?;
    Some((mcpl, Some(caps)))
}

/// The only protocol version this library validates against (§5.1).
pub const VERSION: &str = "0.5";

/// Whether `s` has the App. B.3 revision shape `^sha256:[A-Za-z0-9_-]{43}$`.
pub fn is_well_formed_revision(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|b| {
        b.len() == 43
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    })
}

/// Validates a manifest (the `experimental.mcpl` object) exactly as a host does at
/// `initialize` and on every fetch (§17.5 step 1). Total: never fails, reports everything.
pub fn validate(manifest: &Value) -> Vec<Finding> {
    validate_with_digest(manifest).0
}

/// [`validate`], also returning the recomputed revision (or the digest's refusal).
fn validate_with_digest(manifest: &Value) -> (Vec<Finding>, Result<String, DigestError>) {
    let mut out = Vec::new();
    let Some(obj) = manifest.as_object() else {
        out.push(Finding::new(
            "manifest_not_object",
            Severity::Error,
            "§5.1",
            "",
            format!(
                "the manifest is a JSON {}; experimental.mcpl must be an object",
                crate::jsonrpc::json_type_name(manifest)
            ),
        ));
        let err = digest::revision(manifest);
        return (out, err);
    };

    // Version (§5.1, App. B.3).
    match obj.get("version") {
        None => out.push(Finding::new(
            "missing_version",
            Severity::Error,
            "§5.1",
            "version",
            "the manifest has no `version`; add \"version\": \"0.5\"",
        )),
        Some(Value::String(v)) if v == VERSION => {}
        Some(other) => out.push(Finding::new(
            "unsupported_version",
            Severity::Error,
            "§5.1",
            "version",
            format!("`version` is {other}; this host speaks MCPL \"0.5\""),
        )),
    }

    // Digest and revision (§17.2, App. B.3).
    let recomputed = digest::revision(manifest);
    if let Err(DigestError::IdentifierCharset { path, value }) = &recomputed {
        out.push(Finding::new(
            "identifier_charset",
            Severity::Error,
            "§17.2",
            path.clone(),
            format!(
                "{value:?} is not a [A-Za-z0-9._:*-] identifier; rename it (the digest refuses it)"
            ),
        ));
    }
    if let Some(rev) = obj.get("revision") {
        match rev.as_str().filter(|s| is_well_formed_revision(s)) {
            None => out.push(Finding::new(
                "revision_malformed",
                Severity::Error,
                "§17.2",
                "revision",
                "`revision` must be \"sha256:\" + 43 base64url characters; compute it per §17.2",
            )),
            Some(r) => {
                if let Ok(actual) = &recomputed {
                    if r != actual {
                        out.push(Finding::new(
                            "revision_mismatch",
                            Severity::Error,
                            "§17.2",
                            "revision",
                            format!(
                                "`revision` is {r} but the content digest is {actual}; \
                                 derive it from the content, never by hand"
                            ),
                        ));
                    }
                }
            }
        }
    }

    // Advertisement (§5.1).
    for f in capability::advertised(manifest).findings {
        out.push(describe(&f));
    }

    // Feature sets (§6.1, §6.2, §6.4).
    for f in FeatureSets::from_mcpl(manifest).1 {
        out.push(describe(&f));
    }

    // Tag ontologies (§16.4, RFC-001 §5.1).
    out.extend(unnamed_facets(manifest));
    (out, recomputed)
}

/// One `unnamed_facet` finding (info, §16.4) for every tag descriptor under
/// `featureSets.*.tagOntology.tags` whose string `facet` is not one of the five RFC-001 §5.1
/// names ([`crate::tags::FACETS`]). The manifest stays valid (§16.4: a hint catalog), but a
/// host reading the list as closed refuses the manifest. Used by [`validate`] and by
/// `mcpl check`, so both report the same rule. Non-object parts are skipped (other findings
/// report them).
pub fn unnamed_facets(manifest: &Value) -> Vec<Finding> {
    let Some(sets) = manifest.get("featureSets").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (set, decl) in sets {
        let Some(tags) = decl
            .get("tagOntology")
            .and_then(|o| o.get("tags"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (tag, descriptor) in tags {
            let Some(facet) = descriptor.get("facet").and_then(Value::as_str) else {
                continue;
            };
            if crate::tags::is_named_facet(facet) {
                continue;
            }
            out.push(Finding::new(
                "unnamed_facet",
                Severity::Info,
                "§16.4",
                format!("featureSets.{set}.tagOntology.tags.{tag}.facet"),
                format!(
                    "facet {facet:?} of tag `{tag}` is not one RFC-001 §5.1 names; use one of {} \
                     (a host that reads that list as closed refuses the whole manifest)",
                    crate::tags::FACETS.join(", ")
                ),
            ));
        }
    }
    out
}

/// The [`validate`] finding for one reading finding of the advertisement or of the feature
/// sets: its severity, section, path and sentence. `mcpl check` words its verdicts with it,
/// so a defect reads the same in both tools (issue #18).
pub fn describe(f: &capability::Finding) -> Finding {
    let p = f.path.clone();
    let (severity, section, message) = match f.kind {
        FindingKind::McplNotObject => (
            Severity::Error,
            "§5.1",
            "experimental.mcpl must be an object".to_owned(),
        ),
        FindingKind::ToolsInsideMcpl => (
            Severity::Warning,
            "§5.1",
            "`tools` inside experimental.mcpl advertises nothing; advertise tools in the outer \
             MCP capabilities"
                .to_owned(),
        ),
        FindingKind::UnrecognisedMember => (
            Severity::Info,
            "§5.1",
            format!("`{p}` is not part of the capability vocabulary and advertises nothing"),
        ),
        FindingKind::NotBooleanOrObject => (
            Severity::Warning,
            "§5.1",
            format!("`{p}` is neither a boolean nor an object, so it advertises nothing"),
        ),
        FindingKind::LegacyChannelsTrue => (
            Severity::Warning,
            "§5.1",
            "`channels: true` (0.4 shape) advertises every channels leaf; list the leaves you \
             implement"
                .to_owned(),
        ),
        FindingKind::LegacyFeatureSetsArray => (
            Severity::Error,
            "§6.1",
            "`featureSets` is an array (0.4 shape); use an object keyed by feature-set name"
                .to_owned(),
        ),
        FindingKind::FeatureSetsMalformed => (
            Severity::Error,
            "§6.1",
            "`featureSets` must be an object keyed by feature-set name".to_owned(),
        ),
        FindingKind::FeatureSetUnnamed => (
            Severity::Error,
            "§6.1",
            format!("`{p}` has no string `name` or repeats one; it was dropped"),
        ),
        FindingKind::FeatureSetNotObject => (
            Severity::Error,
            "§6.2",
            format!("feature set `{p}` is not an object; declare {{ description, uses }}"),
        ),
        FindingKind::MissingDescription => (
            Severity::Warning,
            "§6.2",
            format!("feature set `{p}` has no string `description`; add one"),
        ),
        FindingKind::InvalidUses => (
            Severity::Error,
            "§6.4",
            format!(
                "feature set `{p}` has an absent, empty or unrecognised `uses`; it is disabled \
                 with invalid_uses — list exact §6.2 capability paths"
            ),
        ),
    };
    let path = match f.kind {
        FindingKind::FeatureSetNotObject
        | FindingKind::MissingDescription
        | FindingKind::InvalidUses => format!("featureSets.{p}"),
        _ => p,
    };
    Finding::new(f.kind.code(), severity, section, path, message)
}

// ---------------------------------------------------------------------------------------
// Impacts, diff and the change receipt (§17.5, §17.6, App. B.4)
// ---------------------------------------------------------------------------------------

/// One entry of a change receipt: a host-derived impact (§17.6), how the host handled it,
/// the domain it belongs to, and its subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Impact {
    /// The closed §17.6 impact.
    pub impact: ChangeImpact,
    /// `applied`, `decision-needed` or `informational`.
    pub disposition: Disposition,
    /// The §17.1 domain the impact comes from (absent for `surface-changed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<ChangeDomain>,
    /// A capability path, a feature-set name, a tag (`ontology-reference-undeclared`) or a
    /// surface (`surface-changed`).
    pub subject: String,
    /// For `feature-degraded`: the derivation reason code (`invalid_uses`,
    /// `capability_denied`, …) or `removed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

impl Impact {
    fn new(
        impact: ChangeImpact,
        disposition: Disposition,
        domain: ChangeDomain,
        subject: impl Into<String>,
    ) -> Impact {
        Impact {
            impact,
            disposition,
            domain: Some(domain),
            subject: subject.into(),
            reason: None,
        }
    }
}

/// The offline comparison of two manifests, serialised as exactly
/// `{ "domains": [...], "impacts": [...] }` (used by `mcpl diff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// Changed §17.1 domains, in wire order.
    pub domains: Vec<ChangeDomain>,
    /// Impacts, grouped: capabilities, feature sets, ontologies.
    pub impacts: Vec<Impact>,
}

/// The single normalised receipt a host emits per manifest change (§17.5 step 4, §17.6).
/// §17.6 gives no JSON shape; this one is `{ previousRevision?, revision, domains, impacts }`,
/// revisions being the host's own recomputed digests, never the server's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeReceipt {
    /// Digest of the manifest that was in force (absent if it had none: non-object or refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    /// Digest of the manifest now in force, recomputed by the host.
    pub revision: String,
    /// Changed §17.1 domains, in wire order.
    pub domains: Vec<ChangeDomain>,
    /// Every impact of the change.
    pub impacts: Vec<Impact>,
}

/// Offline diff for `mcpl diff OLD NEW` (§17.5 steps 2–3). Host policy is assumed to have
/// granted everything the old manifest advertised and accepted every tag ontology it carried,
/// so removals are `capability-revoked`/`applied`, additions
/// `capability-expansion-pending`/`decision-needed`, a changed ontology
/// `ontology-acceptance-invalidated`. No consumer rules are known, so
/// `ontology-reference-undeclared` never appears here. Total over any two JSON values.
pub fn diff(old: &Value, new: &Value) -> Diff {
    let advertised = capability::advertised(old).capabilities;
    let decls = FeatureSets::from_mcpl(old).0;
    let grant = Grant::from_set(advertised);
    let selection = Selection::default();
    let statuses = policy::derive(&decls, &grant, &selection);
    let accepted: BTreeMap<String, String> = decls
        .sets
        .keys()
        .filter_map(|name| Some((name.clone(), ontology_digest_of(old, name)?)))
        .collect();
    let before = Before {
        manifest: old,
        advertised,
        grant: advertised,
        statuses: &statuses,
        accepted: &accepted,
        patterns: &[],
        selection: &selection,
        outer_tools: false,
    };
    let after = assess(&before, new);
    Diff {
        domains: changed_domains(old, new),
        impacts: after.impacts,
    }
}

/// The digest of feature set `name`'s `tagOntology` in `manifest`, if it has one the digest
/// accepts.
fn ontology_digest_of(manifest: &Value, name: &str) -> Option<String> {
    let onto = manifest
        .get("featureSets")?
        .as_object()?
        .get(name)?
        .get("tagOntology")?;
    digest::ontology_digest(onto).ok()
}

/// Tags declared under `featureSets.*.tagOntology.tags` (object form only).
fn declared_tags(manifest: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(sets) = manifest.get("featureSets").and_then(Value::as_object) {
        for fs in sets.values() {
            if let Some(tags) = fs
                .get("tagOntology")
                .and_then(|o| o.get("tags"))
                .and_then(Value::as_object)
            {
                out.extend(tags.keys().cloned());
            }
        }
    }
    out
}

/// What was in force before a change, as the assessment needs it.
struct Before<'a> {
    manifest: &'a Value,
    advertised: CapabilitySet,
    grant: CapabilitySet,
    statuses: &'a BTreeMap<String, FeatureSetStatus>,
    accepted: &'a BTreeMap<String, String>,
    patterns: &'a [TagPattern],
    selection: &'a Selection,
    outer_tools: bool,
}

/// The consequences of a new manifest (§17.5 step 3).
struct After {
    advertised: CapabilitySet,
    grant: CapabilitySet,
    decls: FeatureSets,
    statuses: BTreeMap<String, FeatureSetStatus>,
    impacts: Vec<Impact>,
    invalidated: Vec<String>,
}

fn advertised_by(manifest: &Value, outer_tools: bool) -> CapabilitySet {
    let mut adv = capability::advertised(manifest).capabilities;
    if outer_tools {
        adv.insert(Capability::Tools);
    }
    adv
}

/// §17.5 step 1 for a manifest that parses but cannot be taken whole: `old` (the manifest
/// in force) with only what `new` removes applied, never what it adds —
/// - capabilities `new` no longer advertises are dropped;
/// - feature sets `new` no longer declares are dropped;
/// - a kept set whose `uses` changed (or became invalid) is disabled (`uses: []`, so
///   `invalid_uses`) until a manifest can be taken whole: neither its new requirements nor
///   its new declared leaves are adopted, and the old ones no longer describe it;
/// - a kept set whose `tagOntology` changed loses it (prior acceptance does not carry over).
fn removals_only(old: &Value, new: &Value) -> Value {
    let kept = capability::advertised(old)
        .capabilities
        .intersection(capability::advertised(new).capabilities);
    let mut merged = capability::advertisement_to_value(kept);
    if let Some(v) = old.get("version") {
        merged["version"] = v.clone();
    }
    let Some(old_raw) = old.get("featureSets").and_then(Value::as_object) else {
        return merged;
    };
    let old_sets = FeatureSets::from_mcpl(old).0;
    let new_sets = FeatureSets::from_mcpl(new).0;
    let new_raw = new.get("featureSets").and_then(Value::as_object);
    let mut sets = serde_json::Map::new();
    for (name, old_decl) in old_raw {
        let (Some(nd), Some(od)) = (new_sets.sets.get(name), old_sets.sets.get(name)) else {
            continue; // removed (or unusable in the manifest in force)
        };
        let mut decl = old_decl.clone();
        if od.validated_uses().ok() != nd.validated_uses().ok() {
            decl["uses"] = json!([]);
        }
        let new_ontology = new_raw
            .and_then(|r| r.get(name))
            .and_then(|d| d.get("tagOntology"));
        if old_decl.get("tagOntology") != new_ontology {
            if let Some(o) = decl.as_object_mut() {
                o.remove("tagOntology");
            }
        }
        sets.insert(name.clone(), decl);
    }
    merged["featureSets"] = Value::Object(sets);
    merged
}

/// Applies §17.5 step 3 to a parsed (object, digestible) or — for the offline diff — any
/// manifest: removals revoke now (grant ∩ new advertisement), additions are pending, feature
/// sets are re-derived, ontologies re-checked.
fn assess(b: &Before<'_>, new: &Value) -> After {
    use ChangeDomain as D;
    use ChangeImpact as I;
    use Disposition as P;
    let advertised = advertised_by(new, b.outer_tools);
    let grant = b.grant.intersection(advertised);
    let mut impacts = Vec::new();
    for c in b.grant.difference(grant).iter() {
        impacts.push(Impact::new(
            I::CapabilityRevoked,
            P::Applied,
            D::Capabilities,
            c.as_str(),
        ));
    }
    for c in advertised.difference(b.advertised).iter() {
        impacts.push(Impact::new(
            I::CapabilityExpansionPending,
            P::DecisionNeeded,
            D::Capabilities,
            c.as_str(),
        ));
    }

    let decls = FeatureSets::from_mcpl(new).0;
    let statuses = policy::derive(&decls, &Grant::from_set(grant), b.selection);
    let names: BTreeSet<&String> = b.statuses.keys().chain(statuses.keys()).collect();
    for name in names {
        let degraded = |disposition, reason| Impact {
            reason: Some(reason),
            ..Impact::new(
                I::FeatureDegraded,
                disposition,
                D::FeatureSets,
                name.as_str(),
            )
        };
        match (b.statuses.get(name), statuses.get(name)) {
            (Some(FeatureSetStatus::Available), None) => {
                impacts.push(degraded(P::Applied, "removed"))
            }
            (
                Some(FeatureSetStatus::Available),
                Some(FeatureSetStatus::Unavailable { reason, .. }),
            ) => impacts.push(degraded(P::Applied, reason.code())),
            (None, Some(FeatureSetStatus::Unavailable { reason, .. })) => {
                impacts.push(degraded(P::Informational, reason.code()))
            }
            (Some(FeatureSetStatus::Unavailable { .. }), Some(FeatureSetStatus::Available)) => {
                impacts.push(Impact::new(
                    I::FeatureRestored,
                    P::Applied,
                    D::FeatureSets,
                    name.as_str(),
                ))
            }
            _ => {}
        }
    }

    let mut invalidated = Vec::new();
    for (name, accepted) in b.accepted {
        if ontology_digest_of(new, name).as_deref() != Some(accepted.as_str()) {
            invalidated.push(name.clone());
            impacts.push(Impact::new(
                I::OntologyAcceptanceInvalidated,
                P::Applied,
                D::TagOntology,
                name.as_str(),
            ));
        }
    }

    if !b.patterns.is_empty() {
        let now_declared = declared_tags(new);
        for gone in declared_tags(b.manifest).difference(&now_declared) {
            let Ok(tag) = Tag::parse(gone) else { continue };
            if b.patterns.iter().any(|p| p.matches(&tag)) {
                impacts.push(Impact::new(
                    I::OntologyReferenceUndeclared,
                    P::Informational,
                    D::TagOntology,
                    gone.as_str(),
                ));
            }
        }
    }

    After {
        advertised,
        grant,
        decls,
        statuses,
        impacts,
        invalidated,
    }
}

// ---------------------------------------------------------------------------------------
// Per-connection review state (§17.5, §17.10 implementation note)
// ---------------------------------------------------------------------------------------

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
    manifest: Value,
    revision: Option<String>,
    findings: Vec<Finding>,
    outer_tools: bool,
    advertised: CapabilitySet,
    decls: FeatureSets,
    selection: Selection,
    statuses: BTreeMap<String, FeatureSetStatus>,
    grant: GrantRecord,
    accepted: BTreeMap<String, String>,
    patterns: Vec<TagPattern>,
    last_receipt: Option<ChangeReceipt>,
    failures: u32,
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
        let outer_tools = matches!(
            outer_caps.and_then(|c| c.get("tools")),
            Some(Value::Object(_)) | Some(Value::Bool(true))
        );
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
            manifest: manifest.clone(),
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
                // Built only from members of the manifest in force, whose digest succeeded,
                // so this review takes the digestible path.
                let merged = removals_only(&self.manifest, new);
                let mut outcome = self.on_fetched(&merged, None, now);
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

        let before = Before {
            manifest: &self.manifest,
            advertised: self.advertised,
            grant: self.grant.grant.capabilities(),
            statuses: &self.statuses,
            accepted: &self.accepted,
            patterns: &self.patterns,
            selection: &self.selection,
            outer_tools: self.outer_tools,
        };
        let after = assess(&before, new);
        let receipt = ChangeReceipt {
            previous_revision: self.revision.take(),
            revision: rev.clone(),
            domains: changed_domains(&self.manifest, new),
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
        self.manifest = new.clone();
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
        let d = self
            .revision
            .as_ref()
            .and_then(|_| ontology_digest_of(&self.manifest, name))
            .ok_or_else(|| ReviewError::NoOntology(name.to_owned()))?;
        self.accepted.insert(name.to_owned(), d.clone());
        Ok(d)
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5: accepted
    /// suggestions stay revocable); returns the digest that was accepted, if any.
    pub fn revoke_ontology(&mut self, name: &str) -> Option<String> {
        self.accepted.remove(name)
    }

    /// The accepted ontology digest of feature set `name`, if acceptance still stands.
    pub fn accepted_ontology(&self, name: &str) -> Option<&str> {
        self.accepted.get(name).map(String::as_str)
    }

    /// Sets the tag patterns the consumer's treatment rules reference (e.g.
    /// `TreatmentRules::referenced_patterns`), so a fetch can report
    /// `ontology-reference-undeclared`. Malformed patterns are skipped.
    pub fn set_consumer_patterns<'a, I>(&mut self, patterns: I)
    where
        I: IntoIterator<Item = &'a str>,
    {
        self.patterns = patterns
            .into_iter()
            .filter_map(|p| TagPattern::new(p).ok())
            .collect();
    }

    /// The manifest in force.
    pub fn manifest(&self) -> &Value {
        &self.manifest
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

// ---------------------------------------------------------------------------------------
// Fetch limiter (§17.8)
// ---------------------------------------------------------------------------------------

/// What to do with one `mcpl/manifestChanged` (§17.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchDecision {
    /// Fetch now (a token was spent).
    FetchNow,
    /// A fetch is already pending: folded into one follow-up fetch after it completes.
    Coalesced,
    /// Over the limit: dropped; a conformance defect the host should surface.
    Dropped,
}

/// A per-connection token bucket bounding manifest fetches (§17.8). Notifications arriving
/// while a fetch is pending coalesce into one follow-up fetch; a notification (or follow-up)
/// finding no token is dropped and counted. Over any window of `t` seconds at most
/// `burst + refill_per_sec · t` fetches start. Time is passed in.
#[derive(Debug, Clone)]
pub struct FetchLimiter {
    burst: f64,
    refill_per_sec: f64,
    tokens: f64,
    last: Option<Instant>,
    pending: bool,
    follow_up: bool,
    dropped: u64,
}

impl FetchLimiter {
    /// A full bucket of `burst` tokens (at least 1) refilled at `refill_per_sec` (negative
    /// or non-finite rates count as 0: no refill).
    pub fn new(burst: u32, refill_per_sec: f64) -> FetchLimiter {
        let burst = f64::from(burst.max(1));
        let refill = if refill_per_sec.is_finite() && refill_per_sec > 0.0 {
            refill_per_sec
        } else {
            0.0
        };
        FetchLimiter {
            burst,
            refill_per_sec: refill,
            tokens: burst,
            last: None,
            pending: false,
            follow_up: false,
            dropped: 0,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.refill_per_sec).min(self.burst);
        }
        if self.last.map_or(true, |l| now > l) {
            self.last = Some(now);
        }
    }

    fn try_start(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.pending = true;
            true
        } else {
            self.dropped += 1;
            tracing::warn!(
                dropped = self.dropped,
                "§17.8: mcpl/manifestChanged over the fetch limit dropped (conformance defect)"
            );
            false
        }
    }

    /// Decides what to do with a `mcpl/manifestChanged` received at `now`.
    pub fn on_notification(&mut self, now: Instant) -> FetchDecision {
        self.refill(now);
        if self.pending {
            self.follow_up = true;
            return FetchDecision::Coalesced;
        }
        if self.try_start() {
            FetchDecision::FetchNow
        } else {
            FetchDecision::Dropped
        }
    }

    /// Records that the pending fetch finished at `now`. Returns true when a coalesced
    /// follow-up fetch should start now (a token was spent); a follow-up that finds no token
    /// is dropped and counted.
    pub fn on_fetch_complete(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.pending = false;
        if std::mem::take(&mut self.follow_up) {
            self.try_start()
        } else {
            false
        }
    }

    /// Whether a fetch is in flight.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// Notifications (or follow-ups) dropped over the limit so far: the defect count.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
