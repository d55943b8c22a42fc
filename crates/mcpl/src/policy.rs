//! Negotiated policy (§5.3, §6, §6.7, §10.1, §14.1): feature-set declarations and their
//! derivation from the grant, the `featureSets/update` server state machine, degradation
//! receipts, host-side grant computation, and the method → capability table.
//!
//! Everything here is pure: the server and host sessions drive it. The grant
//! ([`Grant`]) is the only authority; feature sets, receipts and `deniedCapabilities` are
//! testimony or diagnostics and never widen anything.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::capability::{
    Advertisement, Capability, CapabilitySet, Denied, Finding, FindingKind, Grant, Pattern,
    PatternError, Requirement,
};
use crate::jsonrpc::ErrorObject;

// ---------------------------------------------------------------------------------------
// Feature-set declarations (§6.1, §6.2, App. B.2)
// ---------------------------------------------------------------------------------------

/// One feature-set declaration (§6.1). `uses` is kept as written so an invalid declaration
/// survives a round trip; [`FeatureSetDeclaration::validated_uses`] judges it. Unknown
/// members (`rollback`, `tagOntology`, vendor fields) are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FeatureSetDeclaration {
    /// Human-readable description (required by §6.2; absence is reported, not fatal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The `uses` member as written (should be an array of exact capability paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<Value>,
    /// Every other member, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Why a declaration's `uses` is invalid (§6.2, §6.4 rule 1): all map to `invalid_uses`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsesError {
    /// `uses` is absent (or `null`).
    #[error("uses is absent: list the §6.2 capability paths the feature set exercises")]
    Absent,
    /// `uses` is not an array.
    #[error("uses is not an array: give a list of §6.2 capability paths")]
    NotArray,
    /// `uses` is an empty array.
    #[error("uses is empty: list at least one §6.2 capability path (§6.2)")]
    Empty,
    /// An entry is not a string or not one of the 17 exact paths (patterns are not allowed).
    #[error(
        "uses contains an unrecognised value: {0}; use §6.2 capability paths exactly as written"
    )]
    Unrecognised(String),
}

impl FeatureSetDeclaration {
    /// A declaration with a description and an exact `uses` list (the 0.5 shape).
    pub fn new(description: impl Into<String>, uses: &[Capability]) -> Self {
        FeatureSetDeclaration {
            description: Some(description.into()),
            uses: Some(Value::Array(
                uses.iter().map(|c| Value::from(c.as_str())).collect(),
            )),
            extra: Map::new(),
        }
    }

    /// The capabilities `uses` names, or why the declaration is invalid. Fail closed: the
    /// host never guesses (§6.4 rule 1); `uses` is a closed list of exact paths.
    pub fn validated_uses(&self) -> Result<CapabilitySet, UsesError> {
        let arr = match &self.uses {
            None | Some(Value::Null) => return Err(UsesError::Absent),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(UsesError::NotArray),
        };
        if arr.is_empty() {
            return Err(UsesError::Empty);
        }
        let mut set = CapabilitySet::EMPTY;
        for v in arr {
            let c = v
                .as_str()
                .and_then(|s| Capability::from_str(s).ok())
                .ok_or_else(|| UsesError::Unrecognised(v.to_string()))?;
            set.insert(c);
        }
        Ok(set)
    }
}

/// The declared feature sets of a server, keyed by name (§6.1), in name order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FeatureSets {
    /// Declarations by name.
    pub sets: BTreeMap<String, FeatureSetDeclaration>,
}

impl FeatureSets {
    /// Reads a `featureSets` value. Accepts the 0.5 object keyed by name and, with a
    /// [`FindingKind::LegacyFeatureSetsArray`] finding, the 0.4 array of `{ name, … }`.
    /// Declarations with a missing description or invalid `uses` are kept (derivation
    /// disables the latter with `invalid_uses`) and reported.
    pub fn parse(value: &Value) -> (FeatureSets, Vec<Finding>) {
        let mut out = FeatureSets::default();
        let mut findings = Vec::new();
        let mut add = |name: String, v: &Value, findings: &mut Vec<Finding>| {
            let Some(obj) = v.as_object() else {
                findings.push(Finding {
                    kind: FindingKind::FeatureSetNotObject,
                    path: name,
                });
                return;
            };
            let mut extra = obj.clone();
            extra.remove("name");
            let description = match extra.remove("description") {
                Some(Value::String(s)) => Some(s),
                Some(other) => {
                    // keep a non-string description verbatim, but it is not a description
                    extra.insert("description".into(), other);
                    None
                }
                None => None,
            };
            let uses = extra.remove("uses");
            let decl = FeatureSetDeclaration {
                description,
                uses,
                extra,
            };
            if decl.description.is_none() {
                findings.push(Finding {
                    kind: FindingKind::MissingDescription,
                    path: name.clone(),
                });
            }
            if decl.validated_uses().is_err() {
                findings.push(Finding {
                    kind: FindingKind::InvalidUses,
                    path: name.clone(),
                });
            }
            out.sets.insert(name, decl);
        };
        match value {
            Value::Object(m) => {
                for (name, v) in m {
                    add(name.clone(), v, &mut findings);
                }
            }
            Value::Array(items) => {
                findings.push(Finding {
                    kind: FindingKind::LegacyFeatureSetsArray,
                    path: "featureSets".into(),
                });
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    match item.get("name").and_then(Value::as_str) {
                        Some(name) if seen.insert(name.to_owned()) => {
                            add(name.to_owned(), item, &mut findings)
                        }
                        _ => findings.push(Finding {
                            kind: FindingKind::FeatureSetUnnamed,
                            path: format!("featureSets[{i}]"),
                        }),
                    }
                }
            }
            _ => findings.push(Finding {
                kind: FindingKind::FeatureSetsMalformed,
                path: "featureSets".into(),
            }),
        }
        (out, findings)
    }

    /// Reads `featureSets` from an `experimental.mcpl` object; absent means none declared.
    pub fn from_mcpl(mcpl: &Value) -> (FeatureSets, Vec<Finding>) {
        match mcpl.get("featureSets") {
            Some(v) => FeatureSets::parse(v),
            None => (FeatureSets::default(), Vec::new()),
        }
    }

    /// The 0.5 object form (keyed by name), for writing.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

// ---------------------------------------------------------------------------------------
// Feature-set name selection (§6.3)
// ---------------------------------------------------------------------------------------

/// An `enabled` / `disabled` entry (§6.3). A whole `*` segment is a wildcard. The two lists
/// read a trailing `*` differently, each in its fail-closed direction:
/// - in `enabled` (which can only narrow), `*` matches exactly one segment, as in §5.4, so
///   `memory.*` selects `memory.retrieval` but not `memory.a.b`;
/// - in `disabled` (which subtracts), a trailing `*` matches one or more segments, so
///   `memory.*` disables every `memory.`-prefixed set at any depth, as §6.3 words it
///   ("all `memory.` features").
///
/// A mistaken entry therefore only ever under-enables or over-disables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern(String);

impl NamePattern {
    /// The entry as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this `enabled` entry selects `name` (one-segment `*`).
    pub fn selects(&self, name: &str) -> bool {
        let mut p = self.0.split('.');
        let mut n = name.split('.');
        loop {
            match (p.next(), n.next()) {
                (None, None) => return true,
                (Some(a), Some(b)) if a == "*" || a == b => {}
                _ => return false,
            }
        }
    }

    /// Whether this `disabled` entry covers `name` (trailing `*` is a subtree).
    pub fn covers(&self, name: &str) -> bool {
        let p: Vec<&str> = self.0.split('.').collect();
        let n: Vec<&str> = name.split('.').collect();
        let trailing_star = p.last() == Some(&"*");
        if trailing_star {
            n.len() >= p.len()
                && p[..p.len() - 1]
                    .iter()
                    .zip(&n)
                    .all(|(a, b)| *a == "*" || a == b)
        } else {
            self.selects(name)
        }
    }
}

/// The host's selection: `enabled` (an allowlist when present) and `disabled`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// `None`: absent, constrains nothing (§5.3). `Some`: only sets it selects may be available.
    pub enabled: Option<Vec<NamePattern>>,
    /// Sets covered here are unavailable, always (§5.3).
    pub disabled: Vec<NamePattern>,
}

// ---------------------------------------------------------------------------------------
// Derivation (§6.4)
// ---------------------------------------------------------------------------------------

/// Why a declared feature set is unavailable. When several apply, the first in this order
/// is reported: `invalid_uses`, `disabled`, `not_selected`, `capability_denied`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnavailableReason {
    /// `uses` is absent, empty or unrecognised (§6.4 rule 1).
    InvalidUses,
    /// Named by `disabled` (§5.3).
    Disabled,
    /// Present `enabled` does not name it (§5.3).
    NotSelected,
    /// A capability its `uses` requires is not granted (§6.4).
    CapabilityDenied,
}

impl UnavailableReason {
    /// Wire/CLI code.
    pub fn code(self) -> &'static str {
        match self {
            UnavailableReason::InvalidUses => "invalid_uses",
            UnavailableReason::Disabled => "disabled",
            UnavailableReason::NotSelected => "not_selected",
            UnavailableReason::CapabilityDenied => "capability_denied",
        }
    }
}

impl fmt::Display for UnavailableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The derived status of one declared feature set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureSetStatus {
    /// Every capability of `uses` is granted and the host's selection allows it.
    Available,
    /// Unavailable, with the reason and the `uses` paths not granted.
    Unavailable {
        /// Why.
        reason: UnavailableReason,
        /// Paths of `uses` missing from the grant (empty for `invalid_uses`).
        missing: CapabilitySet,
    },
}

impl FeatureSetStatus {
    /// Whether the set is available.
    pub fn is_available(&self) -> bool {
        matches!(self, FeatureSetStatus::Available)
    }
}

/// Derives each declared set's status from the grant and the selection (§6.4, §5.3).
/// Selection never widens: a set is available only if its `uses` is valid and fully granted.
pub fn derive(
    decls: &FeatureSets,
    grant: &Grant,
    selection: &Selection,
) -> BTreeMap<String, FeatureSetStatus> {
    decls
        .sets
        .iter()
        .map(|(name, d)| (name.clone(), derive_one(name, d, grant, selection)))
        .collect()
}

fn derive_one(
    name: &str,
    d: &FeatureSetDeclaration,
    grant: &Grant,
    selection: &Selection,
) -> FeatureSetStatus {
    let uses = match d.validated_uses() {
        Ok(u) => u,
        Err(_) => {
            return FeatureSetStatus::Unavailable {
                reason: UnavailableReason::InvalidUses,
                missing: CapabilitySet::EMPTY,
            }
        }
    };
    let missing = uses.difference(grant.capabilities());
    let reason = if selection.disabled.iter().any(|p| p.covers(name)) {
        Some(UnavailableReason::Disabled)
    } else if selection
        .enabled
        .as_ref()
        .is_some_and(|en| !en.iter().any(|p| p.selects(name)))
    {
        Some(UnavailableReason::NotSelected)
    } else if !missing.is_empty() {
        Some(UnavailableReason::CapabilityDenied)
    } else {
        None
    };
    match reason {
        None => FeatureSetStatus::Available,
        Some(reason) => FeatureSetStatus::Unavailable { reason, missing },
    }
}

/// Host-side feature-set check of a server-initiated message's `featureSet` (§6.5, §6.6),
/// run **after** the grant has authorised the method: it can only narrow. An undeclared
/// name is `-32003`, an unavailable one `-32001` with `data: { featureSet }`. The first two
/// steps of [`feature_set_gate`], which also judges the declaration.
pub fn check_feature_set(
    statuses: &BTreeMap<String, FeatureSetStatus>,
    name: &str,
) -> Result<(), ErrorObject> {
    // The gate's first two steps: a use that requires nothing cannot mismatch.
    feature_set_gate(&FeatureSets::default(), statuses, name, Requirement::None)
        .map_err(|refusal| refusal.to_error(name))
}

/// The §6.4 declaration-mismatch diagnostic: the paths `required` names that the exercising
/// set's `uses` does not declare (for `AnyOf`, only when none of them is declared). `None`
/// when the declaration covers the use, the set is undeclared, or its `uses` is invalid.
/// The grant authorizes; a mismatch only refuses more: the host rejects that use (§6.4
/// rule 2), a server declines to send it.
pub fn declaration_mismatch(
    decls: &FeatureSets,
    feature_set: &str,
    required: Requirement,
) -> Option<CapabilitySet> {
    let uses = decls.sets.get(feature_set)?.validated_uses().ok()?;
    let needed = required.capabilities();
    let missing = needed.difference(uses);
    let covered = match required {
        Requirement::AnyOf(_) => needed.is_empty() || !needed.intersection(uses).is_empty(),
        _ => missing.is_empty(),
    };
    (!covered).then_some(missing)
}

/// Why a feature set cannot carry one use (§6.4 rule 2, §6.5, §6.6): the refusals of
/// [`feature_set_gate`], in the order it judges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetRefusal {
    /// The set is not declared (`-32003`, §6.6).
    Unknown,
    /// Declared but unavailable now (`-32001`, §6.4, §6.6), and why.
    Unavailable(UnavailableReason),
    /// Available, but its `uses` does not declare what the use exercises: the host rejects
    /// that use (§6.4 rule 2, a declaration mismatch, `-32002`); the paths missing.
    Undeclared(CapabilitySet),
}

impl SetRefusal {
    /// The code a diagnostic or an itemized refusal names: `unknown_feature_set`,
    /// `feature_set_not_enabled` or `declaration_mismatch`.
    pub fn code(&self) -> &'static str {
        match self {
            SetRefusal::Unknown => "unknown_feature_set",
            SetRefusal::Unavailable(_) => "feature_set_not_enabled",
            SetRefusal::Undeclared(_) => "declaration_mismatch",
        }
    }

    /// The JSON-RPC error a host answers for a use of `feature_set` refused so (§6.6,
    /// App. A): `-32003`, `-32001` with `data: { featureSet }`, or `-32002` naming the first
    /// missing path and the set.
    pub fn to_error(&self, feature_set: &str) -> ErrorObject {
        match self {
            SetRefusal::Unknown => ErrorObject::unknown_feature_set(feature_set),
            SetRefusal::Unavailable(_) => ErrorObject::feature_set_not_enabled(feature_set),
            SetRefusal::Undeclared(missing) => {
                let paths = missing.sorted_paths();
                let capability = paths.first().copied().unwrap_or("");
                ErrorObject::declaration_mismatch(capability, feature_set)
            }
        }
    }
}

/// The one feature-set gate (§6.4, §6.5, §6.6) for a message that names `feature_set` and
/// exercises `required`, run **after** the grant authorised the method, so it can only
/// narrow: the set must be declared (a key of `statuses`, the derivation of the declarations
/// `decls` under the grant in force), available, and — §6.4 rule 2 — declare in its `uses`
/// what the message exercises ([`declaration_mismatch`]). The host refuses on it (push
/// events, inference requests, injections), the server declines to send on it, and
/// `mcpl check`'s strict host answers by it.
pub fn feature_set_gate(
    decls: &FeatureSets,
    statuses: &BTreeMap<String, FeatureSetStatus>,
    feature_set: &str,
    required: Requirement,
) -> Result<(), SetRefusal> {
    match statuses.get(feature_set) {
        None => return Err(SetRefusal::Unknown),
        Some(FeatureSetStatus::Unavailable { reason, .. }) => {
            return Err(SetRefusal::Unavailable(*reason))
        }
        Some(FeatureSetStatus::Available) => {}
    }
    match declaration_mismatch(decls, feature_set, required) {
        Some(missing) => Err(SetRefusal::Undeclared(missing)),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// featureSets/update (§5.3, §6.7)
// ---------------------------------------------------------------------------------------

/// The JSON-RPC form a `featureSets/update` arrived in (§6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Carries an id: may set the grant, answered with a receipt.
    Request,
    /// No id: only `disabled` reductions apply; never establishes readiness.
    Notification,
}

/// A `featureSets/update` the receiver must reject as malformed (`-32602`); the state then
/// grants nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `params` is neither an object nor absent/`null`.
    #[error("featureSets/update params must be an object: the sender must send {{effectiveCapabilities, enabled?, disabled?}} (§5.3)")]
    ParamsNotObject,
    /// A list member is not an array of strings.
    #[error("featureSets/update `{field}` must be an array of strings: the sender must list capability paths or feature-set names as strings (§5.3)")]
    NotStringArray {
        /// The offending member.
        field: &'static str,
    },
    /// An `effectiveCapabilities` entry is not a well-formed path or pattern.
    #[error("featureSets/update effectiveCapabilities: {0}; the sender must fix the entry")]
    Pattern(#[from] PatternError),
    /// A path is both granted and denied (§5.4: fail closed, reject as malformed).
    #[error(
        "featureSets/update: {path:?} appears in both effectiveCapabilities and deniedCapabilities, so the update is malformed (§5.4); the sender must list it in one of them only"
    )]
    GrantedAndDenied {
        /// The conflicting path (or entry).
        path: String,
    },
    /// A list has more entries than [`MAX_POLICY_LIST_ENTRIES`] (for `disabled` on a
    /// Notification: the accumulated list would).
    #[error("featureSets/update {field}: {count} entries exceed the limit of {limit}; the sender must send fewer (a `prefix.*` pattern names many at once)")]
    TooManyEntries {
        /// The list.
        field: &'static str,
        /// The limit.
        limit: usize,
        /// How many entries it had (or the accumulated list would have).
        count: usize,
    },
}

/// Most entries read from each `featureSets/update` list (`effectiveCapabilities`,
/// `deniedCapabilities`, `enabled`, `disabled`), and most `disabled` entries accumulated by
/// Notifications (§6.7). The vocabulary has 17 capability paths and a manifest declares its
/// sets, so a longer list is hostile rather than useful; it is refused whole, before any
/// entry is read, with `-32602` and `data: { reason, field, limit, count }`, and the grant
/// fails closed like any malformed update.
pub const MAX_POLICY_LIST_ENTRIES: usize = 1024;

impl PolicyError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::ParamsNotObject => "params_not_object",
            PolicyError::NotStringArray { .. } => "not_string_array",
            PolicyError::Pattern(p) => p.code(),
            PolicyError::GrantedAndDenied { .. } => "granted_and_denied",
            PolicyError::TooManyEntries { .. } => "too_many_entries",
        }
    }

    /// The `-32602` answer, with `data: { reason }` (plus `field`, `limit` and `count` for
    /// [`PolicyError::TooManyEntries`]).
    pub fn to_error(&self) -> ErrorObject {
        let data = match self {
            PolicyError::TooManyEntries {
                field,
                limit,
                count,
            } => json!({ "reason": self.code(), "field": field, "limit": limit, "count": count }),
            _ => json!({ "reason": self.code() }),
        };
        ErrorObject::invalid_params(self.to_string()).with_data(data)
    }
}

/// Validated `featureSets/update` params (either form). Parsing does not yet apply the
/// Notification restrictions; [`ServerPolicyState::apply`] does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateParams {
    /// `effectiveCapabilities` resolved to a grant; `None` when absent.
    pub effective: Option<Grant>,
    /// Whether `deniedCapabilities` was present (diagnostic only, never used to authorize).
    pub denied_present: bool,
    /// `enabled`, if present.
    pub enabled: Option<Vec<NamePattern>>,
    /// `disabled` (empty when absent).
    pub disabled: Vec<NamePattern>,
}

fn string_array<'a>(
    params: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<Vec<&'a str>>, PolicyError> {
    match params.get(field) {
        None => Ok(None),
        Some(Value::Array(a)) if a.len() > MAX_POLICY_LIST_ENTRIES => {
            Err(PolicyError::TooManyEntries {
                field,
                limit: MAX_POLICY_LIST_ENTRIES,
                count: a.len(),
            })
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().ok_or(PolicyError::NotStringArray { field }))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(PolicyError::NotStringArray { field }),
    }
}

impl UpdateParams {
    /// Validates a params object. `null` is read as `{}`. Malformed lists, malformed grant
    /// entries and a path both granted and denied are errors. An explicit `null` list member
    /// is malformed too (fail closed: it is not "absent"). A denied entry conflicts when it
    /// equals a granted entry or resolves to a granted path. Each list holds at most
    /// [`MAX_POLICY_LIST_ENTRIES`] entries, and the conflict check is linear in them.
    pub fn parse(params: &Value) -> Result<UpdateParams, PolicyError> {
        let empty = Map::new();
        let obj = match params {
            Value::Null => &empty,
            Value::Object(o) => o,
            _ => return Err(PolicyError::ParamsNotObject),
        };
        let effective_entries = string_array(obj, "effectiveCapabilities")?;
        let denied_entries = string_array(obj, "deniedCapabilities")?;
        let enabled = string_array(obj, "enabled")?;
        let disabled = string_array(obj, "disabled")?;
        let effective = match &effective_entries {
            Some(e) => Some(Grant::from_patterns(e.iter().copied())?),
            None => None,
        };
        if let (Some(denied), Some(granted)) = (&denied_entries, &effective) {
            let entries: HashSet<&str> = effective_entries.iter().flatten().copied().collect();
            for d in denied {
                let textual = entries.contains(d);
                let overlap = Pattern::parse(d).ok().and_then(|p| {
                    p.resolved()
                        .intersection(granted.capabilities())
                        .iter()
                        .next()
                });
                if textual || overlap.is_some() {
                    let path = overlap.map_or_else(|| (*d).to_owned(), |c| c.as_str().to_owned());
                    return Err(PolicyError::GrantedAndDenied { path });
                }
            }
        }
        let names = |v: Vec<&str>| v.into_iter().map(|s| NamePattern(s.to_owned())).collect();
        Ok(UpdateParams {
            effective,
            denied_present: denied_entries.is_some(),
            enabled: enabled.map(names),
            disabled: disabled.map(names).unwrap_or_default(),
        })
    }
}

/// A non-fatal observation while applying an update, for the session's diagnostics stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDiagnostic {
    /// `notification_field_discarded` (a grant field on a Notification, §6.7) or
    /// `unknown_feature_set` (an `enabled`/`disabled` entry matching no declared set).
    pub code: &'static str,
    /// The field name or entry concerned.
    pub detail: String,
}

/// What applying an update produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// For a Request, the degradation receipt to answer with; `None` for a Notification.
    pub receipt: Option<Receipt>,
    /// Diagnostics to surface (never silently dropped).
    pub diagnostics: Vec<PolicyDiagnostic>,
}

/// The server's negotiated-policy state (§5.3, §6.7), driven by `featureSets/update`.
/// Starts not ready and granting nothing; only a well-formed Request makes it ready.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerPolicyState {
    ready: bool,
    grant: Grant,
    selection: Selection,
    declarations: FeatureSets,
}

impl ServerPolicyState {
    /// A fresh state for a server declaring `declarations`: not ready, nothing granted.
    pub fn new(declarations: FeatureSets) -> Self {
        ServerPolicyState {
            ready: false,
            grant: Grant::none(),
            selection: Selection::default(),
            declarations,
        }
    }

    /// Whether the initial policy Request has been applied (§5.3).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The current grant (empty until ready).
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The current selection (`enabled` / accumulated `disabled`).
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The declarations the derivation runs over.
    pub fn declarations(&self) -> &FeatureSets {
        &self.declarations
    }

    /// Replaces the declarations (e.g. after a manifest change); the grant is unaffected.
    pub fn set_declarations(&mut self, declarations: FeatureSets) {
        self.declarations = declarations;
    }

    /// Whether behaviour needing `c` may run now: ready and granted.
    pub fn allows(&self, c: Capability) -> bool {
        self.ready && self.grant.allows(c)
    }

    /// Each declared set's current status. Before readiness every set is unavailable.
    pub fn statuses(&self) -> BTreeMap<String, FeatureSetStatus> {
        derive(&self.declarations, &self.grant, &self.selection)
    }

    /// Whether the named set is available now (false before readiness or if undeclared).
    pub fn is_available(&self, name: &str) -> bool {
        self.ready
            && self
                .declarations
                .sets
                .get(name)
                .is_some_and(|d| derive_one(name, d, &self.grant, &self.selection).is_available())
    }

    /// The accepting receipt for the current state (§6.7).
    pub fn receipt(&self) -> Receipt {
        Receipt::from_statuses(&self.statuses())
    }

    /// Applies one `featureSets/update` (§5.3, §6.7).
    ///
    /// - **Request**: the whole policy is replaced. Absent `effectiveCapabilities` grants
    ///   nothing; `enabled` (if present) is the allowlist; `disabled` is the new disabled
    ///   list. The state becomes ready and the accepting receipt is returned.
    /// - **Notification**: only `disabled` entries apply, added to the current disabled list;
    ///   `effectiveCapabilities`, `deniedCapabilities` and `enabled` are discarded with a
    ///   diagnostic; readiness and the grant are untouched.
    ///
    /// Malformed params (either form) fail closed: the grant becomes empty and the error is
    /// returned for the caller to answer `-32602` (a Notification cannot be answered; the
    /// caller reports it as a diagnostic).
    pub fn apply(&mut self, form: Form, params: &Value) -> Result<Outcome, PolicyError> {
        let parsed = match UpdateParams::parse(params) {
            Ok(p) => p,
            Err(e) => {
                self.grant = Grant::none();
                return Err(e);
            }
        };
        let mut diagnostics = Vec::new();
        match form {
            Form::Request => {
                self.grant = parsed.effective.unwrap_or_default();
                self.selection = Selection {
                    enabled: parsed.enabled,
                    disabled: parsed.disabled,
                };
                self.ready = true;
                let all = self
                    .selection
                    .enabled
                    .iter()
                    .flatten()
                    .map(|p| (p, true))
                    .chain(self.selection.disabled.iter().map(|p| (p, false)));
                for (p, is_enabled) in all {
                    let hit = self.declarations.sets.keys().any(|n| {
                        if is_enabled {
                            p.selects(n)
                        } else {
                            p.covers(n)
                        }
                    });
                    if !hit {
                        diagnostics.push(PolicyDiagnostic {
                            code: "unknown_feature_set",
                            detail: p.as_str().to_owned(),
                        });
                    }
                }
                Ok(Outcome {
                    receipt: Some(self.receipt()),
                    diagnostics,
                })
            }
            Form::Notification => {
                let obj = params.as_object();
                for field in ["effectiveCapabilities", "deniedCapabilities", "enabled"] {
                    if obj.is_some_and(|o| o.contains_key(field)) {
                        diagnostics.push(PolicyDiagnostic {
                            code: "notification_field_discarded",
                            detail: field.to_owned(),
                        });
                    }
                }
                // Linear: repeats are found in a set, and the accumulated list is bounded.
                let mut known: HashSet<String> = self
                    .selection
                    .disabled
                    .iter()
                    .map(|p| p.as_str().to_owned())
                    .collect();
                let mut fresh = HashSet::new();
                for p in &parsed.disabled {
                    if !known.contains(p.as_str()) {
                        fresh.insert(p.as_str());
                    }
                }
                let count = known.len() + fresh.len();
                if count > MAX_POLICY_LIST_ENTRIES {
                    self.grant = Grant::none();
                    return Err(PolicyError::TooManyEntries {
                        field: "disabled",
                        limit: MAX_POLICY_LIST_ENTRIES,
                        count,
                    });
                }
                drop(fresh);
                for p in parsed.disabled {
                    // As for a Request: an entry that disables nothing declared (a misspelt
                    // name, a partial `*` like `memory*`) is reported, never a silent no-op.
                    if !self.declarations.sets.keys().any(|n| p.covers(n)) {
                        diagnostics.push(PolicyDiagnostic {
                            code: "unknown_feature_set",
                            detail: p.as_str().to_owned(),
                        });
                    }
                    if known.insert(p.as_str().to_owned()) {
                        self.selection.disabled.push(p);
                    }
                }
                Ok(Outcome {
                    receipt: None,
                    diagnostics,
                })
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Degradation receipts (§6.7)
// ---------------------------------------------------------------------------------------

/// The consequence a refusing server names (§6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Disable MCPL, keep MCP tools/resources/prompts (§3.2).
    McpOnly,
    /// Close the transport.
    Close,
}

impl Fallback {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::McpOnly => "mcp-only",
            Fallback::Close => "close",
        }
    }
}

/// One `unavailableFeatures` entry. Parsed entries keep paths as strings: a receipt is
/// testimony and may name anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableFeature {
    /// `featureSet`.
    pub feature_set: String,
    /// `missingCapabilities`.
    pub missing_capabilities: Vec<String>,
    /// `effect` (this crate writes `"disabled"`).
    pub effect: String,
    /// `reason` (an extension member: `invalid_uses`, `disabled`, `not_selected`,
    /// `capability_denied`).
    pub reason: Option<String>,
}

/// The `featureSets/update` result (§6.7): testimony about what the server will do.
/// The validated reading of the wire form [`crate::protocol::feature_sets::Receipt`]: a
/// refusal always names a known fallback, which [`parse_receipt`] checks.
#[derive(Debug, Clone, PartialEq)]
pub enum Receipt {
    /// `accepted: true`.
    Accepted {
        /// `mode`: written as `"degraded"` only when something is unavailable, else omitted.
        mode: Option<String>,
        /// `unavailableFeatures`.
        unavailable_features: Vec<UnavailableFeature>,
        /// `notes` (free-form; omitted when empty).
        notes: Vec<Value>,
    },
    /// `accepted: false`, always with a `fallback`.
    Refused {
        /// `fallback`.
        fallback: Fallback,
        /// `missingCapabilities` (testimony; confers nothing).
        missing_capabilities: Vec<String>,
        /// `reason`.
        reason: Option<String>,
    },
}

impl Receipt {
    /// The accepting receipt for derived statuses: `mode` omitted when nothing degraded.
    pub fn from_statuses(statuses: &BTreeMap<String, FeatureSetStatus>) -> Receipt {
        let unavailable_features: Vec<UnavailableFeature> = statuses
            .iter()
            .filter_map(|(name, s)| match s {
                FeatureSetStatus::Available => None,
                FeatureSetStatus::Unavailable { reason, missing } => Some(UnavailableFeature {
                    feature_set: name.clone(),
                    missing_capabilities: missing
                        .sorted_paths()
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    effect: "disabled".into(),
                    reason: Some(reason.code().into()),
                }),
            })
            .collect();
        Receipt::Accepted {
            mode: (!unavailable_features.is_empty()).then(|| "degraded".to_owned()),
            unavailable_features,
            notes: Vec::new(),
        }
    }

    /// A refusal naming its consequence.
    pub fn refused(fallback: Fallback, missing: CapabilitySet, reason: Option<String>) -> Receipt {
        Receipt::Refused {
            fallback,
            missing_capabilities: missing
                .sorted_paths()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            reason,
        }
    }

    /// Whether this is `accepted: true`.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Receipt::Accepted { .. })
    }

    /// The §6.7 JSON shape.
    pub fn to_value(&self) -> Value {
        match self {
            Receipt::Accepted {
                mode,
                unavailable_features,
                notes,
            } => {
                let mut m = Map::new();
                m.insert("accepted".into(), Value::Bool(true));
                if let Some(mode) = mode {
                    m.insert("mode".into(), Value::from(mode.as_str()));
                }
                let entries = unavailable_features
                    .iter()
                    .map(|u| {
                        let mut e = json!({
                            "featureSet": u.feature_set,
                            "missingCapabilities": u.missing_capabilities,
                            "effect": u.effect,
                        });
                        if let (Some(r), Some(o)) = (&u.reason, e.as_object_mut()) {
                            o.insert("reason".into(), Value::from(r.as_str()));
                        }
                        e
                    })
                    .collect();
                m.insert("unavailableFeatures".into(), Value::Array(entries));
                if !notes.is_empty() {
                    m.insert("notes".into(), Value::Array(notes.clone()));
                }
                Value::Object(m)
            }
            Receipt::Refused {
                fallback,
                missing_capabilities,
                reason,
            } => {
                let mut v = json!({
                    "accepted": false,
                    "fallback": fallback.as_str(),
                    "missingCapabilities": missing_capabilities,
                });
                if let (Some(r), Some(o)) = (reason, v.as_object_mut()) {
                    o.insert("reason".into(), Value::from(r.as_str()));
                }
                v
            }
        }
    }
}

impl Serialize for Receipt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// A shape defect found in a peer's receipt (check `policy.receipt-shape`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptDefect {
    /// Machine code: `not_object`, `accepted_missing`, `fallback_missing`,
    /// `fallback_invalid`, `unavailable_features_not_array`, `entry_not_object`,
    /// `feature_set_missing`, `effect_missing`, `missing_capabilities_invalid`,
    /// `mode_not_string`, `notes_not_array`, `reason_not_string`,
    /// `mode_without_degradation`.
    pub code: &'static str,
    /// Where (a JSON pointer-ish path).
    pub path: String,
    /// Whether the defect violates a MUST (the receipt is then not usable); only
    /// `mode_without_degradation` is non-fatal.
    pub fatal: bool,
}

/// The result of reading a peer's receipt. Nothing here widens a grant: a host reads it to
/// log, surface to a human, or apply the named fallback.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptReport {
    /// `accepted`, if it was a boolean.
    pub accepted: Option<bool>,
    /// The receipt, when no fatal defect was found.
    pub receipt: Option<Receipt>,
    /// Every defect found.
    pub defects: Vec<ReceiptDefect>,
}

/// Validates a `featureSets/update` result's shape (§6.7) and reads it.
pub fn parse_receipt(v: &Value) -> ReceiptReport {
    let mut defects = Vec::new();
    let mut defect = |code: &'static str, path: &str, fatal: bool| {
        defects.push(ReceiptDefect {
            code,
            path: path.to_owned(),
            fatal,
        })
    };
    let Some(obj) = v.as_object() else {
        defect("not_object", "", true);
        return ReceiptReport {
            accepted: None,
            receipt: None,
            defects,
        };
    };
    let accepted = obj.get("accepted").and_then(Value::as_bool);
    let strings = |v: Option<&Value>| -> Option<Vec<String>> {
        match v {
            None => Some(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(|x| x.as_str().map(str::to_owned)).collect(),
            Some(_) => None,
        }
    };
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            defect("reason_not_string", "/reason", true);
            None
        }
    };
    let receipt = match accepted {
        None => {
            defect("accepted_missing", "/accepted", true);
            None
        }
        Some(false) => {
            let fallback = match obj.get("fallback") {
                None | Some(Value::Null) => {
                    defect("fallback_missing", "/fallback", true);
                    None
                }
                Some(Value::String(s)) if s == "mcp-only" => Some(Fallback::McpOnly),
                Some(Value::String(s)) if s == "close" => Some(Fallback::Close),
                Some(_) => {
                    defect("fallback_invalid", "/fallback", true);
                    None
                }
            };
            let missing = strings(obj.get("missingCapabilities"));
            if missing.is_none() {
                defect("missing_capabilities_invalid", "/missingCapabilities", true);
            }
            match (fallback, missing) {
                (Some(fallback), Some(missing_capabilities)) => Some(Receipt::Refused {
                    fallback,
                    missing_capabilities,
                    reason,
                }),
                _ => None,
            }
        }
        Some(true) => {
            let mode = match obj.get("mode") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    defect("mode_not_string", "/mode", true);
                    None
                }
            };
            let mut entries = Vec::new();
            let mut ok = true;
            match obj.get("unavailableFeatures") {
                None => {}
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let at = format!("/unavailableFeatures/{i}");
                        let Some(e) = item.as_object() else {
                            defect("entry_not_object", &at, true);
                            ok = false;
                            continue;
                        };
                        let fs = e.get("featureSet").and_then(Value::as_str);
                        let effect = e.get("effect").and_then(Value::as_str);
                        let missing = strings(e.get("missingCapabilities"));
                        if fs.is_none() {
                            defect("feature_set_missing", &format!("{at}/featureSet"), true);
                        }
                        if effect.is_none() {
                            defect("effect_missing", &format!("{at}/effect"), true);
                        }
                        if missing.is_none() {
                            defect(
                                "missing_capabilities_invalid",
                                &format!("{at}/missingCapabilities"),
                                true,
                            );
                        }
                        match (fs, effect, missing) {
                            (Some(fs), Some(effect), Some(missing)) => {
                                entries.push(UnavailableFeature {
                                    feature_set: fs.to_owned(),
                                    missing_capabilities: missing,
                                    effect: effect.to_owned(),
                                    reason: e
                                        .get("reason")
                                        .and_then(Value::as_str)
                                        .map(str::to_owned),
                                })
                            }
                            _ => ok = false,
                        }
                    }
                }
                Some(_) => {
                    defect(
                        "unavailable_features_not_array",
                        "/unavailableFeatures",
                        true,
                    );
                    ok = false;
                }
            }
            let notes = match obj.get("notes") {
                None => Vec::new(),
                Some(Value::Array(n)) => n.clone(),
                Some(_) => {
                    defect("notes_not_array", "/notes", true);
                    ok = false;
                    Vec::new()
                }
            };
            if mode.is_some() && entries.is_empty() && ok {
                defect("mode_without_degradation", "/mode", false);
            }
            ok.then_some(Receipt::Accepted {
                mode,
                unavailable_features: entries,
                notes,
            })
        }
    };
    let fatal = defects.iter().any(|d| d.fatal);
    ReceiptReport {
        accepted,
        receipt: if fatal { None } else { receipt },
        defects,
    }
}

// ---------------------------------------------------------------------------------------
// Host side (§5.4, §10.1, §14.1)
// ---------------------------------------------------------------------------------------

/// The host's computation for one connection (§5.4): effective = advertised ∩ policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostGrant {
    /// What the server advertised (as the host understands it).
    pub advertised: CapabilitySet,
    /// The effective grant: the only authority.
    pub effective: Grant,
    /// Derived `deniedCapabilities` diagnostic: advertised paths not granted. Paths the
    /// server never advertised are not listed (they are denied all the same).
    pub denied: CapabilitySet,
}

impl HostGrant {
    /// Computes the grant from the advertisement and host policy patterns (§5.4 matching).
    /// A malformed policy pattern is an error: the host's own configuration is wrong.
    pub fn compute<'a, I>(advertised: CapabilitySet, policy: I) -> Result<HostGrant, PatternError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let effective = Grant::from_patterns(policy)?.intersect(advertised);
        Ok(HostGrant {
            advertised,
            effective,
            denied: advertised.difference(effective.capabilities()),
        })
    }

    /// `featureSets/update` params carrying this grant, to send as a Request (§5.3, §6.7).
    /// `enabled: None` omits the allowlist; an empty `disabled` is omitted.
    pub fn update_params(&self, enabled: Option<&[String]>, disabled: &[String]) -> Value {
        let mut m = Map::new();
        m.insert(
            "effectiveCapabilities".into(),
            json!(self.effective.to_effective_capabilities()),
        );
        m.insert(
            "deniedCapabilities".into(),
            json!(self.denied.sorted_paths()),
        );
        if let Some(en) = enabled {
            m.insert("enabled".into(), json!(en));
        }
        if !disabled.is_empty() {
            m.insert("disabled".into(), json!(disabled));
        }
        Value::Object(m)
    }
}

/// Requirement of `context/beforeInference`: observe or any inject leaf (§10.1).
pub const BEFORE_INFERENCE: Requirement =
    <crate::protocol::hooks::BeforeInference as crate::protocol::Method>::REQUIREMENT;

/// Requirement of streaming inference: `inferenceRequest` and `.streaming` (§11.4).
pub const STREAMING_INFERENCE: Requirement =
    <crate::protocol::inference::InferenceChunk as crate::protocol::Method>::REQUIREMENT;

/// The method → capability table (§5.4, §10, §11, §12, §14.1): a lookup over the typed
/// registry, each method's requirement written once in its [`crate::protocol::Method`] impl.
/// `None` means the method is not typed (MCP methods other than the handshake pieces and
/// `tools/call` are outside it).
///
/// Readings where the spec is silent, each failing closed:
/// - `inference/request` needs `.streaming` as well whenever `stream` is present and not
///   `false`/`null` (a non-boolean `stream` is not trusted to mean "no");
/// - `inference/chunk` (the stream itself) needs both inference paths;
/// - `state/rollback` acts on tool state (§8) and needs `tools`;
/// - `featureSets/update`, `mcpl/manifest` and `mcpl/manifestChanged` are unprivileged.
pub fn method_requirement(method: &str, params: Option<&Value>) -> Option<Requirement> {
    crate::protocol::method_requirement(method, params)
}

pub use crate::protocol::Direction;

/// The sending direction of a method (§4.1, §14.3), from the typed registry in
/// [`crate::protocol`]. A session receiving a method from the wrong side should answer
/// `-32601`.
pub fn method_direction(method: &str) -> Option<Direction> {
    crate::protocol::method_info(method).map(|info| info.direction)
}

/// Why one `contextInjections` entry is refused (§5.4, §10.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectionDenied {
    /// The entry is not an object or has no string `position`.
    #[error(
        "injection has no position: give each contextInjections entry a string `position` (§10.4)"
    )]
    MissingPosition,
    /// A position outside App. B.4: denied (no leaf can authorise it).
    #[error(
        "unknown injection position {0:?}: use one of the App. B.4 positions (e.g. beforeUser)"
    )]
    UnknownPosition(String),
    /// The position's inject leaf is not granted.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// A required member is missing or mistyped (§10.4: `namespace` a string, `content` a
    /// string or content blocks, `metadata` an object).
    #[error("malformed injection: {0}; §10.4 wants a string `namespace`, `content` as a string or content blocks, and `metadata` an object")]
    Malformed(String),
    /// The response names no `featureSet`, an undeclared one, or one not available now
    /// (§6.5, §6.6); `code` is `missing`, `unknown_feature_set` or `feature_set_not_enabled`.
    #[error("feature set {feature_set:?}: {code}: name a declared feature set that is available on this connection in the answer's `featureSet` (§6.5, §6.6)")]
    FeatureSet {
        /// The claimed set, if any.
        feature_set: Option<String>,
        /// Why it cannot carry the injection.
        code: &'static str,
    },
    /// The claimed set's `uses` does not declare the position's inject leaf: the host rejects
    /// that use (§6.4 rule 2, a declaration mismatch).
    #[error("feature set {feature_set:?} does not declare {} in its uses, so the host rejects this use (§6.4 rule 2); add it to the set's uses", capability.as_str())]
    Undeclared {
        /// The claimed set.
        feature_set: String,
        /// The leaf exercised.
        capability: Capability,
    },
}

/// Authorises one injection by its `position` against the grant current at
/// response-receipt (§5.4). Never consults `featureSet` or `namespace`.
pub fn authorize_injection(
    grant: &Grant,
    injection: &Value,
) -> Result<Capability, InjectionDenied> {
    let position = injection
        .get("position")
        .and_then(Value::as_str)
        .ok_or(InjectionDenied::MissingPosition)?;
    let c = Capability::for_position(position)
        .ok_or_else(|| InjectionDenied::UnknownPosition(position.to_owned()))?;
    if grant.allows(c) {
        Ok(c)
    } else {
        Err(Denied { capability: c }.into())
    }
}

/// Judges one injection of a `context/beforeInference` response that claims `feature_set`:
/// its position against `grant` ([`authorize_injection`], §5.4, §10.8), its shape (§10.4),
/// then the claimed set — named, declared, available under `statuses`, and declaring the
/// position's leaf (§6.5, §6.6, §6.4 rule 2). The grant authorizes; the set can only refuse.
pub fn judge_injection(
    grant: &Grant,
    decls: &FeatureSets,
    statuses: &BTreeMap<String, FeatureSetStatus>,
    feature_set: Option<&str>,
    injection: &Value,
) -> Result<Capability, InjectionDenied> {
    let c = authorize_injection(grant, injection)?;
    // §10.4 (content: a plain string or blocks of App. B.1's four shapes, §10.3), by the
    // rule `mcpl check` reports.
    let defects = crate::protocol::hooks::injection_defects(injection, "injection");
    if !defects.is_empty() {
        return Err(InjectionDenied::Malformed(defects.join("; ")));
    }
    let Some(name) = feature_set else {
        return Err(InjectionDenied::FeatureSet {
            feature_set: None,
            code: "missing",
        });
    };
    match feature_set_gate(decls, statuses, name, Requirement::One(c)) {
        Ok(()) => Ok(c),
        Err(SetRefusal::Undeclared(_)) => Err(InjectionDenied::Undeclared {
            feature_set: name.to_owned(),
            capability: c,
        }),
        Err(refusal) => Err(InjectionDenied::FeatureSet {
            feature_set: Some(name.to_owned()),
            code: refusal.code(),
        }),
    }
}

/// Whether the host sends `context/beforeInference` to this server at all (§10.1: observe
/// or any inject leaf).
pub fn before_inference_applies(grant: &Grant) -> bool {
    grant.satisfies(BEFORE_INFERENCE)
}

/// Sets `userMessage` to `null` in `context/beforeInference` params unless `observe` is
/// granted (§10.1). Non-object params are left alone (the caller built them).
pub fn redact_before_inference(grant: &Grant, params: &mut Value) {
    if !grant.allows(Capability::Observe) {
        if let Some(o) = params.as_object_mut() {
            o.insert("userMessage".into(), Value::Null);
        }
    }
}

// ---------------------------------------------------------------------------------------
// `mcpl grant` report
// ---------------------------------------------------------------------------------------

/// One feature set in a [`GrantReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FeatureSetReport {
    /// Whether the set is available under the grant.
    pub available: bool,
    /// `uses` paths not granted, sorted.
    pub missing_capabilities: Vec<&'static str>,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// What `mcpl grant` prints: the host computation for an advertisement and a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantReport {
    /// Advertised paths, sorted.
    pub advertised: Vec<&'static str>,
    /// The effective grant, sorted.
    pub effective_capabilities: Vec<&'static str>,
    /// Advertised but not granted, sorted.
    pub denied_capabilities: Vec<&'static str>,
    /// Per declared feature set.
    pub feature_sets: BTreeMap<String, FeatureSetReport>,
    /// Non-conformances of the advertisement (`code at path`), omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

/// Builds the `mcpl grant` report from a read advertisement, the declarations and host
/// policy patterns (no selection: derivation from the grant alone).
pub fn grant_report<'a, I>(
    adv: &Advertisement,
    decls: &FeatureSets,
    policy: I,
) -> Result<GrantReport, PatternError>
where
    I: IntoIterator<Item = &'a str>,
{
    let hg = HostGrant::compute(adv.capabilities, policy)?;
    let feature_sets = derive(decls, &hg.effective, &Selection::default())
        .into_iter()
        .map(|(name, s)| {
            let r = match s {
                FeatureSetStatus::Available => FeatureSetReport {
                    available: true,
                    missing_capabilities: Vec::new(),
                    reason: None,
                },
                FeatureSetStatus::Unavailable { reason, missing } => FeatureSetReport {
                    available: false,
                    missing_capabilities: missing.sorted_paths(),
                    reason: Some(reason.code()),
                },
            };
            (name, r)
        })
        .collect();
    Ok(GrantReport {
        advertised: hg.advertised.sorted_paths(),
        effective_capabilities: hg.effective.to_effective_capabilities(),
        denied_capabilities: hg.denied.sorted_paths(),
        feature_sets,
        findings: adv.findings.iter().map(ToString::to_string).collect(),
    })
}

/// [`grant_report`] from a whole MCP `capabilities` object (or, if it has no `experimental`
/// member, an `experimental.mcpl` object itself), reading its `featureSets` too.
pub fn grant_report_from_value<'a, I>(value: &Value, policy: I) -> Result<GrantReport, PatternError>
where
    I: IntoIterator<Item = &'a str>,
{
    let (mut adv, mcpl) = if value.get("experimental").is_some() {
        (
            crate::capability::advertised_from_capabilities(value),
            value
                .get("experimental")
                .and_then(|e| e.get("mcpl"))
                .cloned()
                .unwrap_or(Value::Null),
        )
    } else {
        (crate::capability::advertised(value), value.clone())
    };
    let (decls, findings) = FeatureSets::from_mcpl(&mcpl);
    adv.findings.extend(findings);
    grant_report(&adv, &decls, policy)
}
