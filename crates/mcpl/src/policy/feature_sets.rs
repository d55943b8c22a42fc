//! Feature-set declarations (§6.1, §6.2, App. B.2), name selection (§6.3) and the
//! derivation of each set's status (§6.4).

use super::*;

// Feature-set declarations (§6.1, §6.2, App. B.2)

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
    /// `uses` is absent, or written `null`: read as absent, which for a required member is
    /// the same refusal (fail closed, §6.4 rule 1: nothing is guessed).
    #[error("uses is absent or null: list the §6.2 capability paths the feature set exercises")]
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

// Feature-set name selection (§6.3)

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
pub struct NamePattern(pub(super) String);

impl NamePattern {
    /// The entry as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this `enabled` entry selects `name` (one-segment `*`).
    pub fn selects(&self, name: &str) -> bool {
        name_matches(&self.0, name, false)
    }

    /// Whether this `disabled` entry covers `name` (trailing `*` is a subtree).
    pub fn covers(&self, name: &str) -> bool {
        name_matches(&self.0, name, true)
    }
}

/// Whether `pattern` matches `name` segment by segment (a whole `*` segment matches any one;
/// with `subtree`, a trailing `*` matches one or more). Walked along `name`, stopping at the
/// first segment that differs: what a match costs is bounded by `name` (a declared set's,
/// §6.1), never by the entry (the host's, up to a whole message long), which every
/// derivation (§6.4) matches against every declared set.
fn name_matches(pattern: &str, name: &str, subtree: bool) -> bool {
    /// What is left of `rest` once its first segment, `head`, is taken: `Some(None)` when it
    /// was the last; `None` when the first segment is not `head`.
    fn after<'a>(rest: &'a str, head: &str) -> Option<Option<&'a str>> {
        let tail = rest.strip_prefix(head)?;
        if tail.is_empty() {
            return Some(None);
        }
        tail.strip_prefix('.').map(Some)
    }
    let mut rest = pattern;
    let mut segments = name.split('.').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        let (star, next) = match after(rest, "*") {
            Some(next) => (true, next),
            None => match after(rest, segment) {
                Some(next) => (false, next),
                None => return false,
            },
        };
        match next {
            // The pattern's last segment: the name must end here too, unless it is a
            // subtree's `*`, which has taken one segment and takes the rest.
            None => return last || (subtree && star),
            Some(_) if last => return false,
            Some(next) => rest = next,
        }
    }
    false
}

/// The host's selection: `enabled` (an allowlist when present) and `disabled`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// `None`: absent, constrains nothing (§5.3). `Some`: only sets it selects may be available.
    pub enabled: Option<Vec<NamePattern>>,
    /// Sets covered here are unavailable, always (§5.3).
    pub disabled: Vec<NamePattern>,
}

// Derivation (§6.4)

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

pub(super) fn derive_one(
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// §6.2, §6.4 rule 1: `uses` written `null` is refused as absent is, and the refusal says
    /// `null` too, so an author who wrote it is not told the member is missing.
    #[test]
    fn s6_4_uses_written_null_is_refused_saying_so() {
        let d: FeatureSetDeclaration =
            serde_json::from_value(serde_json::json!({"description": "d", "uses": null})).unwrap();
        let e = d.validated_uses().unwrap_err();
        assert_eq!(e, UsesError::Absent);
        assert!(e.to_string().contains("absent or null"), "{e}");
    }

    /// §6.3 matching as first written (each side split into segments up front): the model
    /// the walk along the name must agree with.
    fn model(pattern: &str, name: &str, subtree: bool) -> bool {
        let p: Vec<&str> = pattern.split('.').collect();
        let n: Vec<&str> = name.split('.').collect();
        let seg = |(a, b): (&&str, &&str)| *a == "*" || a == b;
        if subtree && p.last() == Some(&"*") {
            n.len() >= p.len() && p[..p.len() - 1].iter().zip(&n).all(seg)
        } else {
            p.len() == n.len() && p.iter().zip(&n).all(seg)
        }
    }

    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(prop_oneof!["a", "b", "ab", "\\*", "\\.", "\\*\\*"], 0..8)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn s6_3_walking_the_name_matches_as_splitting_both(
            pattern in text(),
            name in text(),
        ) {
            let p = NamePattern(pattern.clone());
            prop_assert_eq!(p.selects(&name), model(&pattern, &name, false));
            prop_assert_eq!(p.covers(&name), model(&pattern, &name, true));
        }
    }

    #[test]
    fn s6_3_trailing_star_reads() {
        let p = |s: &str| NamePattern(s.into());
        assert!(p("memory.*").selects("memory.retrieval"));
        assert!(!p("memory.*").selects("memory.a.b"));
        assert!(p("memory.*").covers("memory.a.b"));
        assert!(!p("memory.*").covers("memory"));
        assert!(p("*").covers("a.b.c"));
        assert!(!p("*").selects("a.b"));
        assert!(p("a.*.c").covers("a.x.c"));
        assert!(!p("a.*.c").covers("a.x.c.d"));
    }
}
