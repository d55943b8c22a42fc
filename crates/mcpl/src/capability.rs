//! Capability paths (§5.4, §6.2, App. B.2): the closed vocabulary of 17 paths.
//!
//! [`Capability`] is the single source of truth for the vocabulary; the advertisement
//! tree ([`advertised`]), `*` patterns ([`Pattern`]) and the [`Grant`] are derived from it,
//! never from a hand-written list of nestable keys (§5.4).

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

/// One of the 17 capability paths of §6.2 / App. B.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `pushEvents` (§9).
    PushEvents,
    /// `tools` (MCP tools; advertised only by the outer MCP `capabilities.tools`).
    Tools,
    /// `modelInfo` (§12).
    ModelInfo,
    /// `inferenceRequest` (§11).
    InferenceRequest,
    /// `inferenceRequest.streaming` (§11.4).
    InferenceRequestStreaming,
    /// `inferenceLifecycle` (§10.5).
    InferenceLifecycle,
    /// `contextHooks.beforeInference.observe` (§10.1).
    Observe,
    /// `contextHooks.beforeInference.inject.system` (§10.2).
    InjectSystem,
    /// `contextHooks.beforeInference.inject.beforeUser` (§10.2).
    InjectBeforeUser,
    /// `contextHooks.beforeInference.inject.afterUser` (§10.2).
    InjectAfterUser,
    /// `channels.register` (§14.1).
    ChannelsRegister,
    /// `channels.lifecycle` (§14.1).
    ChannelsLifecycle,
    /// `channels.publish` (§14.1).
    ChannelsPublish,
    /// `channels.incoming` (§14.1).
    ChannelsIncoming,
    /// `channels.streaming` (§14.1).
    ChannelsStreaming,
    /// `channels.acknowledge` (§14.1).
    ChannelsAcknowledge,
    /// `channels.typing` (§14.1).
    ChannelsTyping,
}

impl Capability {
    /// Every path, in App. B.2 order.
    pub const ALL: [Capability; 17] = [
        Capability::PushEvents,
        Capability::Tools,
        Capability::ModelInfo,
        Capability::InferenceRequest,
        Capability::InferenceRequestStreaming,
        Capability::InferenceLifecycle,
        Capability::Observe,
        Capability::InjectSystem,
        Capability::InjectBeforeUser,
        Capability::InjectAfterUser,
        Capability::ChannelsRegister,
        Capability::ChannelsLifecycle,
        Capability::ChannelsPublish,
        Capability::ChannelsIncoming,
        Capability::ChannelsStreaming,
        Capability::ChannelsAcknowledge,
        Capability::ChannelsTyping,
    ];

    /// The dot-separated wire path.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::PushEvents => "pushEvents",
            Capability::Tools => "tools",
            Capability::ModelInfo => "modelInfo",
            Capability::InferenceRequest => "inferenceRequest",
            Capability::InferenceRequestStreaming => "inferenceRequest.streaming",
            Capability::InferenceLifecycle => "inferenceLifecycle",
            Capability::Observe => "contextHooks.beforeInference.observe",
            Capability::InjectSystem => "contextHooks.beforeInference.inject.system",
            Capability::InjectBeforeUser => "contextHooks.beforeInference.inject.beforeUser",
            Capability::InjectAfterUser => "contextHooks.beforeInference.inject.afterUser",
            Capability::ChannelsRegister => "channels.register",
            Capability::ChannelsLifecycle => "channels.lifecycle",
            Capability::ChannelsPublish => "channels.publish",
            Capability::ChannelsIncoming => "channels.incoming",
            Capability::ChannelsStreaming => "channels.streaming",
            Capability::ChannelsAcknowledge => "channels.acknowledge",
            Capability::ChannelsTyping => "channels.typing",
        }
    }
}

impl Capability {
    /// Position of this path in [`Capability::ALL`] (the bit used by [`CapabilitySet`]).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The path's dot-separated segments.
    pub fn segments(self) -> std::str::Split<'static, char> {
        self.as_str().split('.')
    }

    /// Number of segments (1 for `tools`, 4 for the inject leaves).
    pub fn depth(self) -> usize {
        self.segments().count()
    }

    /// Whether `prefix` (dot-separated) names this path or an ancestor node of it in the
    /// advertisement tree (e.g. `contextHooks.beforeInference` for the inject leaves).
    pub fn is_at_or_below(self, prefix: &str) -> bool {
        let path = self.as_str();
        path == prefix
            || (path.len() > prefix.len()
                && path.starts_with(prefix)
                && path.as_bytes()[prefix.len()] == b'.')
    }

    /// The injection leaf authorising a `contextInjections[].position` value (§10.4, App. B.4).
    /// Unknown positions map to `None` and are denied.
    pub fn for_position(position: &str) -> Option<Capability> {
        match position {
            "system" => Some(Capability::InjectSystem),
            "beforeUser" => Some(Capability::InjectBeforeUser),
            "afterUser" => Some(Capability::InjectAfterUser),
            _ => None,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the 17 paths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unrecognised capability path {0:?}: use a §6.2 path exactly as written (e.g. pushEvents, channels.register)")]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_owned()))
    }
}

impl serde::Serialize for Capability {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What a method requires of the grant (used by the method → capability table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Unprivileged: no capability needed (e.g. `ping`, `mcpl/manifest`).
    None,
    /// Exactly this path.
    One(Capability),
    /// Any one of these paths (e.g. `context/beforeInference`: observe or any inject leaf).
    AnyOf(&'static [Capability]),
    /// All of these paths (e.g. streaming `inference/request`).
    AllOf(&'static [Capability]),
}

impl Requirement {
    /// The capabilities this requirement names, as a set (empty for [`Requirement::None`]).
    pub fn capabilities(self) -> CapabilitySet {
        match self {
            Requirement::None => CapabilitySet::EMPTY,
            Requirement::One(c) => CapabilitySet::EMPTY.with(c),
            Requirement::AnyOf(cs) | Requirement::AllOf(cs) => cs.iter().copied().collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// CapabilitySet
// ---------------------------------------------------------------------------------------

/// A set of capability paths, stored as a bitset over [`Capability::ALL`]: `Copy`,
/// allocation-free, and O(1) for membership.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CapabilitySet(u32);

impl CapabilitySet {
    /// The empty set.
    pub const EMPTY: CapabilitySet = CapabilitySet(0);
    /// All 17 paths.
    pub const ALL: CapabilitySet = CapabilitySet((1 << Capability::ALL.len()) - 1);

    /// This set plus `c`.
    pub const fn with(self, c: Capability) -> CapabilitySet {
        CapabilitySet(self.0 | (1 << c as u32))
    }

    /// This set minus `c`.
    pub const fn without(self, c: Capability) -> CapabilitySet {
        CapabilitySet(self.0 & !(1 << c as u32))
    }

    /// Adds `c`.
    pub fn insert(&mut self, c: Capability) {
        *self = self.with(c);
    }

    /// Removes `c`.
    pub fn remove(&mut self, c: Capability) {
        *self = self.without(c);
    }

    /// Whether `c` is in the set.
    pub const fn contains(self, c: Capability) -> bool {
        self.0 & (1 << c as u32) != 0
    }

    /// Union.
    pub const fn union(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 | other.0)
    }

    /// Intersection.
    pub const fn intersection(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & other.0)
    }

    /// Paths in `self` that are not in `other`.
    pub const fn difference(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & !other.0)
    }

    /// Whether every path of `self` is in `other`.
    pub const fn is_subset(self, other: CapabilitySet) -> bool {
        self.0 & !other.0 == 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Number of paths in the set.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The paths, in [`Capability::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }

    /// The wire paths, sorted by string (the order used in every JSON output of this crate).
    pub fn sorted_paths(self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.iter().map(Capability::as_str).collect();
        v.sort_unstable();
        v
    }
}

impl fmt::Debug for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.sorted_paths()).finish()
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        iter.into_iter()
            .fold(CapabilitySet::EMPTY, CapabilitySet::with)
    }
}

impl serde::Serialize for CapabilitySet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted_paths())
    }
}

// ---------------------------------------------------------------------------------------
// Patterns
// ---------------------------------------------------------------------------------------

/// A grant entry that is not a well-formed path or pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Empty string or an empty segment (`""`, `"a..b"`, `".a"`).
    #[error("capability pattern {0:?} has an empty segment: remove the stray dot (§5.4)")]
    EmptySegment(String),
    /// `*` used inside a segment (`"chan*"`): §5.4 defines `*` only as a whole segment.
    #[error("capability pattern {0:?} uses '*' inside a segment; '*' must be a whole segment, as in `channels.*` (§5.4)")]
    PartialWildcard(String),
    /// A host's own policy entry that is well formed but names no path of the vocabulary
    /// (a bare parent `channels`, a `*` short of the paths' segments `contextHooks.*`, a
    /// typo), so it would grant nothing: [`Grant::from_policy`] refuses it.
    #[error("capability pattern {pattern:?} names no capability path, so it would grant nothing; {hint} (§5.4, §6.2)")]
    NoPath {
        /// The entry as written.
        pattern: String,
        /// What to write instead.
        hint: String,
    },
}

impl PatternError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            PatternError::EmptySegment(_) => "pattern_empty_segment",
            PatternError::PartialWildcard(_) => "pattern_partial_wildcard",
            PatternError::NoPath { .. } => "pattern_no_path",
        }
    }
}

/// A §5.4 grant entry: an exact path or a pattern where a `*` segment matches exactly one
/// segment and segment counts must be equal. It is resolved against the vocabulary once;
/// an entry that names no path of the vocabulary (e.g. the bare parent `channels`) is
/// well-formed and grants nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    resolved: CapabilitySet,
}

impl Pattern {
    /// Parses and resolves one entry. Fails on empty segments and on `*` inside a segment
    /// (neither has a §5.4 meaning; refusing them is the fail-closed reading).
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        for seg in text.split('.') {
            if seg.is_empty() {
                return Err(PatternError::EmptySegment(text.to_owned()));
            }
            if seg != "*" && seg.contains('*') {
                return Err(PatternError::PartialWildcard(text.to_owned()));
            }
        }
        // Without a `*`, equal segment counts with every segment equal is string equality:
        // one comparison per path instead of a segment walk per path (issue #24: the grant
        // of a session setup parses each entry several times).
        let resolved = if text.contains('*') {
            Capability::ALL
                .into_iter()
                .filter(|c| segments_match(text, c.as_str()))
                .collect()
        } else {
            Capability::ALL
                .into_iter()
                .filter(|c| c.as_str() == text)
                .collect()
        };
        Ok(Pattern {
            text: text.to_owned(),
            resolved,
        })
    }

    /// The entry as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this pattern matches `c` (precomputed; O(1)).
    pub fn matches(&self, c: Capability) -> bool {
        self.resolved.contains(c)
    }

    /// Every vocabulary path this pattern matches.
    pub fn resolved(&self) -> CapabilitySet {
        self.resolved
    }
}

/// §5.4 matching of a well-formed pattern against a path: equal segment counts, and each
/// segment equal or `*`.
fn segments_match(pattern: &str, path: &str) -> bool {
    let mut p = pattern.split('.');
    let mut q = path.split('.');
    loop {
        match (p.next(), q.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == "*" || a == b => {}
            _ => return false,
        }
    }
}

/// How many segments below `entry` each path under it lies, sorted and deduplicated: the
/// paths whose leading segments `entry`'s match (a `*` matching any one) and that have more.
fn depths_below(entry: &str) -> Vec<usize> {
    let segments: Vec<&str> = entry.split('.').collect();
    let mut depths: Vec<usize> = Capability::ALL
        .iter()
        .map(|c| c.as_str().split('.').collect::<Vec<_>>())
        .filter(|path| {
            path.len() > segments.len()
                && segments.iter().zip(path).all(|(a, b)| *a == "*" || a == b)
        })
        .map(|path| path.len() - segments.len())
        .collect();
    depths.sort_unstable();
    depths.dedup();
    depths
}

/// Whether paths of the vocabulary lie below `entry`: for an entry that names no path, a
/// bare parent (`channels`) or a pattern short of the leaves' depth (`contextHooks.*`), which
/// §5.4 reads as granting none of them, rather than a typo (`PushEvents`), which names nothing.
pub fn names_a_node(entry: &str) -> bool {
    !depths_below(entry).is_empty()
}

/// What to write for a well-formed `entry` that names no path: the patterns naming the
/// paths under it (`channels` → `channels.*`), else the closest path (a typo).
fn no_path_hint(entry: &str) -> String {
    let depths = depths_below(entry);
    if !depths.is_empty() {
        let forms: Vec<String> = depths
            .iter()
            .map(|d| format!("`{entry}{}`", ".*".repeat(*d)))
            .collect();
        return format!(
            "a pattern has as many segments as the paths it names, `*` standing for one \
             whole segment: for the paths under it write {}",
            forms.join(" or ")
        );
    }
    let paths: Vec<String> = Capability::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    match crate::manifest::edit::closest_first(entry, paths.iter()).first() {
        Some(closest) => format!("did you mean `{closest}`?"),
        None => "name a capability path".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Grant
// ---------------------------------------------------------------------------------------

/// The effective capability grant of one connection (§5.4): the sole authority. Absence is
/// denial: [`Grant::none`] (also the `Default`) grants nothing. Patterns are resolved at
/// construction, so [`Grant::allows`] and [`Grant::satisfies`] are bit tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    set: CapabilitySet,
}

impl Grant {
    /// The grant of nothing.
    pub const fn none() -> Grant {
        Grant {
            set: CapabilitySet::EMPTY,
        }
    }

    /// A grant of exactly these paths.
    pub const fn from_set(set: CapabilitySet) -> Grant {
        Grant { set }
    }

    /// Builds a grant from `effectiveCapabilities` entries (exact paths or `*` patterns).
    /// A malformed entry fails the whole grant: the caller then grants nothing.
    pub fn from_patterns<'a, I>(entries: I) -> Result<Grant, PatternError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut set = CapabilitySet::EMPTY;
        for e in entries {
            set = set.union(Pattern::parse(e)?.resolved());
        }
        Ok(Grant { set })
    }

    /// The grant a host's own policy allows (`HostConfig::policy`, §5.4): as
    /// [`Self::from_patterns`], and an entry that names no path of the vocabulary is an
    /// error too ([`PatternError::NoPath`], saying what to write). Reading: a grant read off
    /// the wire tolerates such an entry (it grants nothing); in the host's configuration it
    /// is its author's mistake, refused rather than granting less than it says.
    pub fn from_policy<'a, I>(entries: I) -> Result<Grant, PatternError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut set = CapabilitySet::EMPTY;
        for e in entries {
            let resolved = Pattern::parse(e)?.resolved();
            if resolved.is_empty() {
                return Err(PatternError::NoPath {
                    pattern: e.to_owned(),
                    hint: no_path_hint(e),
                });
            }
            set = set.union(resolved);
        }
        Ok(Grant { set })
    }

    /// Whether `c` is granted.
    #[inline]
    pub const fn allows(&self, c: Capability) -> bool {
        self.set.contains(c)
    }

    /// Whether the grant meets `req`. `AnyOf(&[])` is never satisfied; `AllOf(&[])` always is.
    #[inline]
    pub fn satisfies(&self, req: Requirement) -> bool {
        match req {
            Requirement::None => true,
            Requirement::One(c) => self.allows(c),
            Requirement::AnyOf(cs) => cs.iter().any(|c| self.allows(*c)),
            Requirement::AllOf(cs) => cs.iter().all(|c| self.allows(*c)),
        }
    }

    /// `Ok` if `req` is met, else the [`Denied`] capability to report in `-32002`.
    /// For `AllOf` that is the first missing path; for `AnyOf`, the first listed path
    /// (the spec gives `data` a single `capability`, so one representative is named).
    pub fn check(&self, req: Requirement) -> Result<(), Denied> {
        if self.satisfies(req) {
            return Ok(());
        }
        let capability = match req {
            Requirement::None => return Ok(()),
            Requirement::One(c) => c,
            Requirement::AllOf(cs) => match cs.iter().find(|c| !self.allows(**c)) {
                Some(c) => *c,
                None => return Ok(()),
            },
            Requirement::AnyOf(cs) => match cs.first() {
                Some(c) => *c,
                // An empty AnyOf can never be met; name nothing more specific than hooks.
                None => Capability::Observe,
            },
        };
        Err(Denied { capability })
    }

    /// The granted paths.
    pub const fn capabilities(&self) -> CapabilitySet {
        self.set
    }

    /// This grant narrowed to `other` (e.g. advertisement ∩ host policy).
    pub const fn intersect(&self, other: CapabilitySet) -> Grant {
        Grant {
            set: self.set.intersection(other),
        }
    }

    /// The grant as sorted `effectiveCapabilities` paths (exact paths, never patterns).
    pub fn to_effective_capabilities(&self) -> Vec<&'static str> {
        self.set.sorted_paths()
    }
}

impl serde::Serialize for Grant {
    /// Serialises as the sorted exact paths of `effectiveCapabilities`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.set.serialize(s)
    }
}

/// A capability-denied decision (§5.4, App. A `-32002`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("capability denied: `{capability}` is not in the effective grant (§5.4); what needs it is refused until the server advertises it and the host's policy grants it")]
pub struct Denied {
    /// The path that is not granted.
    pub capability: Capability,
}

impl Denied {
    /// The wire error: `-32002` with `data: { capability }`.
    pub fn to_error(&self) -> crate::jsonrpc::ErrorObject {
        crate::jsonrpc::ErrorObject::capability_denied(self.capability.as_str())
    }
}

// ---------------------------------------------------------------------------------------
// Advertisement (§5.1)
// ---------------------------------------------------------------------------------------

/// Members of `experimental.mcpl` that are not capability nodes but are defined by the spec
/// (§5.1, §6.1, §16.4, §17.1); they are never reported as unrecognised.
const MCPL_META_MEMBERS: [&str; 4] = ["version", "revision", "featureSets", "tagOntology"];

/// What kind of non-conformance an advertisement (or feature-set declaration) finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FindingKind {
    /// `experimental.mcpl` is not an object: nothing is advertised.
    McplNotObject,
    /// `tools` inside `experimental.mcpl`: ignored, only the outer MCP `tools` counts
    /// (§5.1; seed review finding 1).
    ToolsInsideMcpl,
    /// A member that names no node of the vocabulary: it advertises nothing.
    UnrecognisedMember,
    /// A capability node whose value is neither boolean, null nor object: nothing.
    NotBooleanOrObject,
    /// The 0.4 shape `channels: true` in an advertisement that does not name MCPL 0.5 in
    /// `version`. §5.1 reads it as every channels leaf, which for a 0.4 server includes
    /// leaves that did not exist then; reported so a human can check. Beside `version:
    /// "0.5"` it is 0.5's own shorthand and not reported.
    LegacyChannelsTrue,
    /// The 0.4 shape `featureSets: [{ name, … }]`, read by name.
    LegacyFeatureSetsArray,
    /// `featureSets` is neither an object nor a 0.4 array: no declarations are read.
    FeatureSetsMalformed,
    /// A 0.4 array entry without a string `name`, or a duplicate name: dropped.
    FeatureSetUnnamed,
    /// A declaration that is not an object: dropped.
    FeatureSetNotObject,
    /// A declaration without a string `description` (§6.2 requires it).
    MissingDescription,
    /// A declaration whose `uses` is absent, empty, or names an unrecognised value (§6.4).
    InvalidUses,
}

impl FindingKind {
    /// Stable machine-readable code (snake_case).
    pub fn code(self) -> &'static str {
        match self {
            FindingKind::McplNotObject => "mcpl_not_object",
            FindingKind::ToolsInsideMcpl => "tools_inside_mcpl",
            FindingKind::UnrecognisedMember => "unrecognised_member",
            FindingKind::NotBooleanOrObject => "not_boolean_or_object",
            FindingKind::LegacyChannelsTrue => "legacy_channels_true",
            FindingKind::LegacyFeatureSetsArray => "legacy_feature_sets_array",
            FindingKind::FeatureSetsMalformed => "feature_sets_malformed",
            FindingKind::FeatureSetUnnamed => "feature_set_unnamed",
            FindingKind::FeatureSetNotObject => "feature_set_not_object",
            FindingKind::MissingDescription => "missing_description",
            FindingKind::InvalidUses => "invalid_uses",
        }
    }
}

/// One non-conformance found while reading a peer's advertisement or declarations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was wrong.
    pub kind: FindingKind,
    /// Where: a dot path inside `experimental.mcpl` (or a feature-set name).
    pub path: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {:?}", self.kind.code(), self.path)
    }
}

/// The result of reading an advertisement: what it advertises, and what was non-conformant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Advertisement {
    /// The advertised paths.
    pub capabilities: CapabilitySet,
    /// Non-conformances (reading tolerated them). Members outside the vocabulary
    /// ([`FindingKind::UnrecognisedMember`]) are kept up to
    /// [`crate::manifest::review::MAX_FINDINGS`], the rest counted in
    /// [`Self::unrecognised_not_kept`]; every other finding is kept.
    pub findings: Vec<Finding>,
    /// Members outside the vocabulary past those kept in [`Self::findings`]: counted, not
    /// kept, so reading an advertisement of 100,000 of them builds 256 findings, not
    /// 100,000.
    pub unrecognised_not_kept: usize,
}

impl Advertisement {
    /// Records member `path`, outside the vocabulary: kept while fewer than
    /// [`crate::manifest::review::MAX_FINDINGS`] findings are, else counted.
    fn unrecognised(&mut self, path: impl Into<String>) {
        if self.findings.len() < crate::manifest::review::MAX_FINDINGS {
            self.findings.push(Finding {
                kind: FindingKind::UnrecognisedMember,
                path: path.into(),
            });
        } else {
            self.unrecognised_not_kept = self.unrecognised_not_kept.saturating_add(1);
        }
    }
}

/// Whether `prefix` names a node of the advertisement tree that may appear inside
/// `experimental.mcpl`, derived from the vocabulary (`tools` is excluded: it is sourced only
/// from the outer MCP capabilities).
fn is_mcpl_node(prefix: &str) -> bool {
    Capability::ALL
        .into_iter()
        .any(|c| c != Capability::Tools && c.is_at_or_below(prefix))
}

/// Whether an `experimental.mcpl` object names MCPL 0.5 in `version` (or one of its other
/// spellings): then `channels: true` is §5.1's shorthand for every 0.5 channels leaf, read
/// as `contextHooks: true` is, and not the 0.4 shape [`FindingKind::LegacyChannelsTrue`]
/// reports (whose reading would reach leaves a 0.4 server never knew).
fn names_0_5(mcpl: &serde_json::Map<String, Value>) -> bool {
    use crate::protocol::handshake::{MCPL_VERSION, MCPL_VERSION_ALIASES};
    mcpl.get("version")
        .and_then(Value::as_str)
        .is_some_and(|v| v == MCPL_VERSION || MCPL_VERSION_ALIASES.contains(&v))
}

/// Every path at or below `prefix`, excluding `tools`.
fn mcpl_paths_below(prefix: &str) -> CapabilitySet {
    Capability::ALL
        .into_iter()
        .filter(|c| *c != Capability::Tools && c.is_at_or_below(prefix))
        .collect()
}

/// The paths advertised by an `experimental.mcpl` object (§5.1), by a generic recursive walk
/// over the tree derived from [`Capability::ALL`]: `true` is every leaf beneath; `false`,
/// `null`, absence and non-object values advertise nothing; an unrecognised member mints
/// nothing; an object at a node that is itself a path advertises it and descends. `tools`
/// is never sourced here (use [`advertised_from_capabilities`]). A non-object `mcpl`
/// advertises nothing (fail closed; §5.1 shows it only as an object).
pub fn advertised(mcpl: &Value) -> Advertisement {
    let mut adv = Advertisement::default();
    let Some(obj) = mcpl.as_object() else {
        adv.findings.push(Finding {
            kind: FindingKind::McplNotObject,
            path: String::new(),
        });
        return adv;
    };
    for (k, v) in obj {
        if k == "tools" {
            adv.findings.push(Finding {
                kind: FindingKind::ToolsInsideMcpl,
                path: k.clone(),
            });
        } else if is_member_name(k) && is_mcpl_node(k) {
            if k == "channels" && *v == Value::Bool(true) && !names_0_5(obj) {
                adv.findings.push(Finding {
                    kind: FindingKind::LegacyChannelsTrue,
                    path: k.clone(),
                });
            }
            walk(k, v, &mut adv);
        } else if !MCPL_META_MEMBERS.contains(&k.as_str()) {
            adv.unrecognised(k.as_str());
        }
    }
    adv
}

/// Whether `k` can be one member of the advertisement tree: one segment, never a dotted path.
/// §5.1's advertisement is a nested object, so `"contextHooks.beforeInference.inject.system":
/// true` (or `"beforeInference.inject"` inside `contextHooks`) names no member and mints
/// nothing (fail closed: read as a path it would advertise a whole subtree unseen).
fn is_member_name(k: &str) -> bool {
    !k.is_empty() && !k.contains('.')
}

fn walk(path: &str, v: &Value, adv: &mut Advertisement) {
    match v {
        Value::Bool(true) => adv.capabilities = adv.capabilities.union(mcpl_paths_below(path)),
        Value::Bool(false) | Value::Null => {}
        Value::Object(members) => {
            if let Ok(c) = Capability::from_str(path) {
                adv.capabilities.insert(c);
            }
            for (k, child) in members {
                let child_path = format!("{path}.{k}");
                if is_member_name(k) && is_mcpl_node(&child_path) {
                    walk(&child_path, child, adv);
                } else {
                    adv.unrecognised(child_path);
                }
            }
        }
        _ => adv.findings.push(Finding {
            kind: FindingKind::NotBooleanOrObject,
            path: path.to_owned(),
        }),
    }
}

/// The paths advertised by a whole MCP `capabilities` object: the walk of
/// `experimental.mcpl`, plus `tools` if and only if the outer MCP `capabilities.tools` is an
/// object or `true`. Absent `experimental.mcpl` advertises no MCPL path (no finding).
pub fn advertised_from_capabilities(capabilities: &Value) -> Advertisement {
    let mut adv = match capabilities.get("experimental").and_then(|e| e.get("mcpl")) {
        Some(mcpl) => advertised(mcpl),
        None => Advertisement::default(),
    };
    if declares_tools(capabilities.get("tools")) {
        adv.capabilities.insert(Capability::Tools);
    }
    adv
}

/// Whether the MCP `capabilities.tools` member `tools` advertises `tools` (an object or
/// `true`): the one reading the host's review, its MCP-only grant and the server's ceiling
/// share.
pub fn declares_tools(tools: Option<&Value>) -> bool {
    matches!(tools, Some(Value::Object(_)) | Some(Value::Bool(true)))
}

/// Writes `set` as a 0.5 `experimental.mcpl` capability tree (no `version`, no
/// `featureSets`): explicit nested objects with `true` at leaves, and `{}` at a node that is
/// itself a path but has none of its children advertised. `tools` is omitted (it belongs in
/// the outer MCP capabilities). Reading the output back with [`advertised`] yields `set`
/// minus `tools`, plus any path ancestor of a member (a `inferenceRequest.streaming` leaf
/// cannot be written without advertising `inferenceRequest`, §5.1).
pub fn advertisement_to_value(set: CapabilitySet) -> Value {
    let mut root = Map::new();
    for c in set.iter().filter(|c| *c != Capability::Tools) {
        let segs: Vec<&str> = c.segments().collect();
        insert_path(&mut root, &segs, "");
    }
    Value::Object(root)
}

fn insert_path(node: &mut Map<String, Value>, segs: &[&str], prefix: &str) {
    let Some((first, rest)) = segs.split_first() else {
        return;
    };
    let path = if prefix.is_empty() {
        (*first).to_owned()
    } else {
        format!("{prefix}.{first}")
    };
    // A node with descendants in the vocabulary is written as an object; a pure leaf as true.
    let has_children = Capability::ALL
        .into_iter()
        .any(|c| c != Capability::Tools && c.as_str() != path && c.is_at_or_below(&path));
    if !has_children {
        node.insert((*first).to_owned(), Value::Bool(true));
        return;
    }
    let entry = node
        .entry((*first).to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Value::Object(child) = entry {
        insert_path(child, rest, &path);
    }
}
