//! Event tags (§16): parsing, the normative core closure, producer ontologies and consumer
//! treatment rules.
//!
//! A host uses this module *after* a `push/event` or `channels/incoming` message has been
//! admitted, to decide how to treat it:
//!
//! 1. [`TagSet::from_json`] / [`TagSet::from_wire`] parse the untrusted `tags` field into a
//!    deduplicated, order-free set, reporting every non-conformant entry (§16.1);
//! 2. [`TagSet::expand`] applies the normative core closure (§16.3), plus the `implies`
//!    edges of producer ontologies the host has **explicitly accepted** ([`AcceptedOntology`]),
//!    and then drops `chat:ambient` when `chat:addressed` is present;
//! 3. [`TreatmentRules::evaluate`] runs the consumer's ordered, first-match-wins rule list
//!    over the expanded set (§16.7) and returns the matched rule or the host default.
//!
//! # Tags are never authority (§16.6)
//!
//! Nothing here admits anything. The API takes messages the host has **already admitted**
//! under the capability grant (§5.4) and channel authorization (§14.5); it has no access to a
//! grant and cannot widen one, authorize a channel, or let a message on an unauthorized
//! channel in. Tags and ontologies are untrusted producer testimony that only select a
//! *treatment* among behaviours the host already allows.
//!
//! # Producer ontologies and acceptance (§16.4, §16.5, §17.5)
//!
//! A producer's `implies` edges and `suggestedTreatment` are inert until the host or operator
//! accepts them. An [`OntologyAcceptance`] is bound to a server, a feature set and the §17.2
//! digest of that feature set's `tagOntology`; [`OntologyAcceptance::bind`] only yields an
//! [`AcceptedOntology`] while the *current* digest equals the accepted one, so a changed
//! ontology stops applying until it is accepted again (the host reports that as
//! `ontology-acceptance-invalidated`, §17.6, and calls [`TreatmentRules::invalidate_stale`]).
//! This module does not hash: the caller supplies digests computed by `crate::manifest`.
//!
//! # Readings where the spec is silent (fail closed)
//!
//! - **Syntax.** A tag is ASCII `namespace:value` or `namespace:key=value`; the namespace is
//!   `[A-Za-z0-9._-]+`, the remainder uses the §17.2 identifier characters minus the glob
//!   `*` plus the facet `=`, with at most one `=` and no empty key or value. Tags compare
//!   case-sensitively.
//! - **Reserved namespaces.** The `mcpl:` namespace is reserved for the spec and 0.5 defines
//!   no tag in it, and the `chat:` vocabulary of §16.2 is closed; so a producer-sent
//!   `mcpl:*` tag, or a `chat:*` tag outside §16.2, is reported and not admitted as a tag;
//!   so is a namespace that is a reserved one but for case (`CHAT:mention`).
//! - **Unmatchable patterns.** A consumer tag pattern with neither `:` nor `*` can never match
//!   a tag; inside `tagsNone` it would silently match everything, so it is refused at load.
//! - **Unknown rule members** (e.g. a misspelt `tagsAnyy`) are refused at load rather than
//!   ignored, since ignoring a matcher widens the rule; so is a matcher given as `null`.
//! - **Behaviours** are host-defined and carried opaquely, but must be a non-empty string or
//!   an object; anything else is refused at load (or reported, in a producer ontology).
//! - **Ambient exclusion runs last**, after core *and* accepted producer edges, so no
//!   expanded set ever holds both `chat:addressed` and `chat:ambient`.
//! - **Empty matcher lists.** `tagsAny: []` matches nothing; `tagsAll: []` and `tagsNone: []`
//!   impose no constraint. A rule with no matcher at all matches every event.
//! - **`channel`** in a rule never matches an event that has no channel (a `push/event`).
//! - **Producer edges are scoped** to events from the accepting server *and* naming the
//!   accepted feature set; an event without a feature set gets no producer edges.
//! - **Producer suggestions** are ordered per-tag suggestions first (in tag order), then the
//!   top-level `suggestedTreatment` list, and are appended *after* the consumer's own rules
//!   (consumer rules win); a merged suggestion only ever matches events from its own server
//!   and feature set. `defaultTreatment` is read only when `suggestedTreatment` is
//!   absent; when both are present the alias is ignored and reported.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The §16.2 reserved `chat:*` vocabulary.
pub const CORE_TAGS: [&str; 23] = [
    "chat:addressed",
    "chat:mention",
    "chat:reply",
    "chat:dm",
    "chat:ambient",
    "chat:broadcast",
    "chat:to-self",
    "chat:from-human",
    "chat:from-bot",
    "chat:from-self",
    "chat:from-agent",
    "chat:edited",
    "chat:deleted",
    "chat:reaction",
    "chat:reaction-remove",
    "chat:has-image",
    "chat:has-audio",
    "chat:has-file",
    "chat:has-link",
    "chat:command",
    "chat:private",
    "chat:group",
    "chat:thread",
];

/// The §16.3 normative core implications, applied by every host without any ontology.
pub const CORE_IMPLICATIONS: [(&str, &[&str]); 3] = [
    ("chat:mention", &["chat:addressed"]),
    ("chat:reply", &["chat:addressed"]),
    ("chat:dm", &["chat:addressed", "chat:private"]),
];

const ADDRESSED: &str = "chat:addressed";
const AMBIENT: &str = "chat:ambient";

/// Why a string is not a conformant tag (§16.1); each variant has a stable [`code`](Self::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagError {
    /// A `tags` member is not a string.
    #[error("a tag is not a string: every `tags` entry is a `namespace:value` string (§16.1)")]
    NotAString,
    /// The `tags` field is present but not an array.
    #[error("tags is not an array: send `tags` as an array of `namespace:value` strings (§16.1)")]
    NotAnArray,
    /// The tag has no `namespace:` prefix (a bare `"mention"` is not a tag).
    #[error("tag {0:?} is not namespaced: write it as `namespace:value`, e.g. `discord:mention` (§16.1)")]
    NotNamespaced(String),
    /// The namespace or the value after `:` is empty, a facet key or value is empty, or the
    /// facet has more than one `=`.
    #[error("tag {0:?} has an empty namespace, key or value: write `namespace:value` or `namespace:key=value`, each part non-empty and one `=` at most (§16.1)")]
    EmptyPart(String),
    /// The tag contains a character outside the tag alphabet (ASCII only).
    #[error("tag {tag:?} contains invalid character {character:?}: use ASCII letters, digits and . _ - (plus : and = after the namespace, §16.1)")]
    InvalidCharacter {
        /// The tag as received.
        tag: String,
        /// The first offending character.
        character: char,
    },
    /// A producer used the spec-reserved `mcpl:` namespace, or a `chat:` tag outside §16.2.
    #[error("tag {0:?} is in a reserved namespace but not defined by the spec: `mcpl:` is reserved and `chat:` holds only the §16.2 tags; use your own namespace")]
    Reserved(String),
}

impl TagError {
    /// The stable snake_case code for diagnostics and the CLI.
    pub fn code(&self) -> &'static str {
        match self {
            TagError::NotAString => "tag_not_string",
            TagError::NotAnArray => "tags_not_array",
            TagError::NotNamespaced(_) => "not_namespaced",
            TagError::EmptyPart(_) => "empty_part",
            TagError::InvalidCharacter { .. } => "invalid_character",
            TagError::Reserved(_) => "reserved_namespace",
        }
    }
}

/// A syntactically valid tag: `namespace:value` or `namespace:key=value` (§16.1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Tag(String);

impl Tag {
    /// Parses a tag's syntax only (no reserved-namespace check; see [`Tag::parse_producer`]).
    pub fn parse(s: &str) -> Result<Tag, TagError> {
        let Some((ns, rest)) = s.split_once(':') else {
            return Err(TagError::NotNamespaced(s.to_owned()));
        };
        if let Some(c) = ns
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(TagError::InvalidCharacter {
                tag: s.to_owned(),
                character: c,
            });
        }
        if let Some(c) = rest
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '=')))
        {
            return Err(TagError::InvalidCharacter {
                tag: s.to_owned(),
                character: c,
            });
        }
        let facet_ok = match rest.split_once('=') {
            None => true,
            Some((k, v)) => !k.is_empty() && !v.is_empty() && !v.contains('='),
        };
        if ns.is_empty() || rest.is_empty() || !facet_ok {
            return Err(TagError::EmptyPart(s.to_owned()));
        }
        Ok(Tag(s.to_owned()))
    }

    /// Parses a tag sent by a producer: syntax plus the reserved-namespace rule (§16.1, §16.2).
    ///
    /// Tags compare case-sensitively, so `Chat:mention` is not `chat:mention`; a namespace
    /// that differs from a reserved one only in case (`CHAT:`, `Mcpl:`) is refused all the
    /// same, since it reads as the reserved one to a person and to a careless matcher.
    pub fn parse_producer(s: &str) -> Result<Tag, TagError> {
        let tag = Tag::parse(s)?;
        let ns = tag.namespace();
        match ns {
            "mcpl" => Err(TagError::Reserved(s.to_owned())),
            "chat" if CORE_TAGS.contains(&s) => Ok(tag),
            "chat" => Err(TagError::Reserved(s.to_owned())),
            _ if ns.eq_ignore_ascii_case("chat") || ns.eq_ignore_ascii_case("mcpl") => {
                Err(TagError::Reserved(s.to_owned()))
            }
            _ => Ok(tag),
        }
    }

    /// The tag as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace before the first `:`.
    pub fn namespace(&self) -> &str {
        self.0.split_once(':').map_or("", |(ns, _)| ns)
    }

    /// For a faceted `namespace:key=value` tag, the key and the value.
    pub fn facet(&self) -> Option<(&str, &str)> {
        self.0
            .split_once(':')
            .and_then(|(_, rest)| rest.split_once('='))
    }

    /// Whether the tag is in the reserved `chat:` core vocabulary.
    pub fn is_core(&self) -> bool {
        self.namespace() == "chat"
    }
}

impl std::borrow::Borrow<str> for Tag {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tag entry that was reported and not admitted as a tag (§16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagIssue {
    /// Index of the entry in the `tags` array (`None` when the field itself is malformed).
    pub index: Option<usize>,
    /// Why it was refused.
    pub error: TagError,
}

/// The producer's tags as a deduplicated, order-free set (§16.1), before any expansion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagSet(BTreeSet<Tag>);

impl TagSet {
    /// Parses the `tags` strings of an admitted message, returning the set and every refused entry.
    pub fn from_wire<I, S>(raw: I) -> (TagSet, Vec<TagIssue>)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = BTreeSet::new();
        let mut issues = Vec::new();
        for (i, s) in raw.into_iter().enumerate() {
            match Tag::parse_producer(s.as_ref()) {
                Ok(t) => {
                    set.insert(t);
                }
                Err(error) => issues.push(TagIssue {
                    index: Some(i),
                    error,
                }),
            }
        }
        (TagSet(set), issues)
    }

    /// Parses the raw JSON `tags` member (absent ⇒ `None` ⇒ empty set); wrong types are reported.
    pub fn from_json(tags: Option<&Value>) -> (TagSet, Vec<TagIssue>) {
        match tags {
            None => (TagSet::default(), Vec::new()),
            Some(Value::Array(items)) => {
                let mut issues = Vec::new();
                let mut strings = Vec::new();
                for (i, v) in items.iter().enumerate() {
                    match v.as_str() {
                        Some(s) => strings.push((i, s)),
                        None => issues.push(TagIssue {
                            index: Some(i),
                            error: TagError::NotAString,
                        }),
                    }
                }
                let (set, parse_issues) = TagSet::from_wire(strings.iter().map(|(_, s)| *s));
                issues.extend(parse_issues.into_iter().map(|mut issue| {
                    issue.index = issue.index.map(|k| strings[k].0);
                    issue
                }));
                issues.sort_by_key(|issue| issue.index);
                (set, issues)
            }
            Some(_) => (
                TagSet::default(),
                vec![TagIssue {
                    index: None,
                    error: TagError::NotAnArray,
                }],
            ),
        }
    }

    /// Whether the set contains `tag`.
    pub fn contains(&self, tag: &str) -> bool {
        self.0.contains(tag)
    }

    /// The tags in sorted order.
    pub fn iter(&self) -> impl Iterator<Item = &Tag> {
        self.0.iter()
    }

    /// The number of tags.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Expands the set for `event`: §16.3 core closure plus the edges of those `accepted`
    /// ontologies that belong to the event's server and feature set, transitively; then drops
    /// `chat:ambient` if `chat:addressed` is present.
    pub fn expand(
        &self,
        event: &AdmittedEvent<'_>,
        accepted: &[AcceptedOntology<'_>],
    ) -> ExpandedTags {
        let producer: Vec<&AcceptedOntology<'_>> = accepted
            .iter()
            .filter(|a| {
                a.source == event.source && Some(a.feature_set.as_str()) == event.feature_set
            })
            .collect();
        let mut set: BTreeSet<String> = self.0.iter().map(|t| t.0.clone()).collect();
        let mut work: Vec<String> = set.iter().cloned().collect();
        while let Some(tag) = work.pop() {
            let core = CORE_IMPLICATIONS
                .iter()
                .filter(|(from, _)| *from == tag)
                .flat_map(|(_, to)| to.iter().map(|s| (*s).to_owned()));
            let edges = producer
                .iter()
                .flat_map(|a| a.implied_by(&tag))
                .map(|t| t.0.clone());
            for implied in core.chain(edges).collect::<Vec<_>>() {
                if set.insert(implied.clone()) {
                    work.push(implied);
                }
            }
        }
        if set.contains(ADDRESSED) {
            set.remove(AMBIENT);
        }
        ExpandedTags(set.into_iter().map(Tag).collect())
    }
}

/// A closure-expanded tag set (§16.3), the only input treatment rules evaluate over (§16.7).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpandedTags(BTreeSet<Tag>);

impl ExpandedTags {
    /// Whether the expanded set contains `tag`.
    pub fn contains(&self, tag: &str) -> bool {
        self.0.contains(tag)
    }

    /// The tags in sorted order.
    pub fn iter(&self) -> impl Iterator<Item = &Tag> {
        self.0.iter()
    }

    /// The tags as strings, sorted.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|t| t.0.clone()).collect()
    }
}

/// Who sent an already-admitted message and where: the facts rules compose with (§16.7).
///
/// Constructing one asserts that admission (§5.4, §14.5) has already happened; nothing in
/// this module checks or grants it (§16.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmittedEvent<'a> {
    /// The host's id for the server that sent the message.
    pub source: &'a str,
    /// The declaring feature set (`push/event` `featureSet`), if the message names one.
    pub feature_set: Option<&'a str>,
    /// The channel id (`channels/incoming`), if any.
    pub channel: Option<&'a str>,
}

// ---------------------------------------------------------------------------------------
// Patterns and rules (§16.7)
// ---------------------------------------------------------------------------------------

/// Why a treatment rule or pattern was refused when loading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// A tag pattern is empty or contains a character outside the tag alphabet plus `*`.
    #[error("invalid tag pattern {0:?}: a pattern is a non-empty tag with `*` globs, in ASCII letters, digits and . _ - : = * (§16.7)")]
    InvalidPattern(String),
    /// A tag pattern has neither `:` nor `*`, so it can never match a tag.
    #[error("tag pattern {0:?} is not namespaced and can never match: write `namespace:value` or use `*`, e.g. `chat:*` (§16.1, §16.7)")]
    UnnamespacedPattern(String),
    /// A `source` or `channel` pattern is empty.
    #[error("empty {0} pattern: give a server or channel id, with `*` globs if wanted, or leave the matcher out (§16.7)")]
    EmptyIdPattern(&'static str),
    /// The rule JSON does not have the rule shape (unknown member, wrong type, no behavior).
    #[error("malformed rule: {0}; a rule is an object of tagsAny / tagsAll / tagsNone / source / channel matchers and a `behavior` (§16.7)")]
    Malformed(String),
}

impl RuleError {
    /// The stable snake_case code for diagnostics and the CLI.
    pub fn code(&self) -> &'static str {
        match self {
            RuleError::InvalidPattern(_) => "invalid_pattern",
            RuleError::UnnamespacedPattern(_) => "unnamespaced_pattern",
            RuleError::EmptyIdPattern(_) => "empty_id_pattern",
            RuleError::Malformed(_) => "malformed_rule",
        }
    }
}

/// A glob over tags, e.g. `discord:*` or `chat:mention`; `*` matches any run of characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TagPattern(String);

impl TagPattern {
    /// Validates a tag pattern (tag alphabet plus `*`, and namespaced or containing `*`).
    pub fn new(s: &str) -> Result<TagPattern, RuleError> {
        let alphabet =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '=' | '*');
        if s.is_empty() || !s.chars().all(alphabet) {
            return Err(RuleError::InvalidPattern(s.to_owned()));
        }
        if !s.contains(':') && !s.contains('*') {
            return Err(RuleError::UnnamespacedPattern(s.to_owned()));
        }
        Ok(TagPattern(s.to_owned()))
    }

    /// Whether the pattern matches `tag`.
    pub fn matches(&self, tag: &Tag) -> bool {
        glob_match(self.0.as_bytes(), tag.0.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TagPattern {
    type Error = RuleError;
    fn try_from(s: String) -> Result<Self, RuleError> {
        TagPattern::new(&s)
    }
}

impl From<TagPattern> for String {
    fn from(p: TagPattern) -> String {
        p.0
    }
}

/// A glob over server or channel ids (`*` matches any run of characters; case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdPattern(String);

impl IdPattern {
    /// Validates an id pattern (any non-empty string).
    pub fn new(s: &str) -> Result<IdPattern, RuleError> {
        if s.is_empty() {
            return Err(RuleError::EmptyIdPattern("id"));
        }
        Ok(IdPattern(s.to_owned()))
    }

    /// Whether the pattern matches `id`.
    pub fn matches(&self, id: &str) -> bool {
        glob_match(self.0.as_bytes(), id.as_bytes())
    }
}

impl TryFrom<String> for IdPattern {
    type Error = RuleError;
    fn try_from(s: String) -> Result<Self, RuleError> {
        IdPattern::new(&s)
    }
}

impl From<IdPattern> for String {
    fn from(p: IdPattern) -> String {
        p.0
    }
}

/// A host-defined treatment behaviour (`"immediate"`, `"mute"`, `{"debounce": 180000}`, …).
///
/// The vocabulary is host territory (RFC-001 §6); the core carries it opaquely.
///
/// When loaded from JSON it must be a non-empty string or an object; `null`, numbers,
/// booleans and arrays are refused rather than guessed at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct Behavior(pub Value);

impl TryFrom<Value> for Behavior {
    type Error = RuleError;
    fn try_from(v: Value) -> Result<Self, RuleError> {
        match &v {
            Value::String(s) if !s.is_empty() => Ok(Behavior(v)),
            Value::Object(_) => Ok(Behavior(v)),
            _ => Err(RuleError::Malformed(format!(
                "behavior must be a string or an object, got {v}"
            ))),
        }
    }
}

impl From<Behavior> for Value {
    fn from(b: Behavior) -> Value {
        b.0
    }
}

impl Behavior {
    /// The behaviour's keyword when it is a plain string such as `"immediate"`.
    pub fn keyword(&self) -> Option<&str> {
        self.0.as_str()
    }
}

/// Where a rule came from, so accepted producer suggestions stay attributable and revocable
/// (§16.5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RuleOrigin {
    /// Written by the consumer (host or operator).
    #[default]
    Consumer,
    /// An accepted producer suggestion.
    Producer {
        /// The server that declared it.
        source: String,
        /// The feature set whose `tagOntology` declared it.
        feature_set: String,
        /// The ontology digest the acceptance was bound to.
        ontology_digest: String,
    },
}

/// A matcher given explicitly: `null` is refused, not read as absent (an ignored matcher
/// widens its rule into a catch-all).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// One treatment rule: matchers plus the behaviour applied when they all hold (§16.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TreatmentRule {
    /// Matches if any pattern matches any tag (an empty list matches nothing).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tags_any: Option<Vec<TagPattern>>,
    /// Matches if every pattern matches some tag.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tags_all: Option<Vec<TagPattern>>,
    /// Matches if no pattern matches any tag.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tags_none: Option<Vec<TagPattern>>,
    /// The sending server's id must match.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub source: Option<IdPattern>,
    /// The channel id must match; never matches an event without a channel.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub channel: Option<IdPattern>,
    /// What to do with a matching event.
    pub behavior: Behavior,
    /// Provenance; not part of the wire form.
    #[serde(skip)]
    pub origin: RuleOrigin,
}

impl TreatmentRule {
    /// Whether every matcher of the rule holds for `event` with expanded `tags`.
    ///
    /// An accepted producer suggestion additionally only ever matches events from its own
    /// server and feature set: one server's suggestion never decides another's treatment.
    pub fn matches(&self, event: &AdmittedEvent<'_>, tags: &ExpandedTags) -> bool {
        let hit = |p: &TagPattern| tags.0.iter().any(|t| p.matches(t));
        let scoped = match &self.origin {
            RuleOrigin::Consumer => true,
            RuleOrigin::Producer {
                source,
                feature_set,
                ..
            } => event.source == source && event.feature_set == Some(feature_set.as_str()),
        };
        scoped
            && self.tags_any.as_ref().map_or(true, |ps| ps.iter().any(hit))
            && self.tags_all.as_ref().map_or(true, |ps| ps.iter().all(hit))
            && self
                .tags_none
                .as_ref()
                .map_or(true, |ps| !ps.iter().any(hit))
            && self
                .source
                .as_ref()
                .map_or(true, |p| p.matches(event.source))
            && self
                .channel
                .as_ref()
                .map_or(true, |p| event.channel.is_some_and(|c| p.matches(c)))
    }

    /// Parses one rule from JSON, refusing unknown members and malformed patterns.
    pub fn from_json(value: &Value) -> Result<TreatmentRule, RuleError> {
        TreatmentRule::deserialize(value).map_err(|e| RuleError::Malformed(e.to_string()))
    }
}

/// The outcome of treatment evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Treatment<'a> {
    /// The first matching rule, with its index in the list.
    Rule {
        /// Position in [`TreatmentRules`].
        index: usize,
        /// The rule itself (its `origin` says who wrote it).
        rule: &'a TreatmentRule,
    },
    /// No rule matched: the host default applies (§16.5: there is no producer tier).
    Default(&'a Behavior),
}

impl<'a> Treatment<'a> {
    /// The behaviour to apply.
    pub fn behavior(&self) -> &'a Behavior {
        match self {
            Treatment::Rule { rule, .. } => &rule.behavior,
            Treatment::Default(b) => b,
        }
    }
}

/// The consumer's ordered, first-match-wins rule list (§16.7); deserialises from a JSON array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TreatmentRules(pub Vec<TreatmentRule>);

impl TreatmentRules {
    /// Parses a JSON array of rules (consumer configuration).
    pub fn from_json(value: &Value) -> Result<TreatmentRules, RuleError> {
        TreatmentRules::deserialize(value).map_err(|e| RuleError::Malformed(e.to_string()))
    }

    /// Returns the first rule matching `event` over the expanded tags, else `default`.
    pub fn evaluate<'a>(
        &'a self,
        event: &AdmittedEvent<'_>,
        tags: &ExpandedTags,
        default: &'a Behavior,
    ) -> Treatment<'a> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(event, tags))
            .map_or(Treatment::Default(default), |(index, rule)| {
                Treatment::Rule { index, rule }
            })
    }

    /// Merges an accepted ontology's suggestions at acceptance time (RFC-001 §6), after the
    /// consumer's rules and replacing earlier suggestions from the same server and feature set.
    pub fn accept_suggestions(&mut self, accepted: &AcceptedOntology<'_>) {
        self.revoke(&accepted.source, &accepted.feature_set);
        self.0.extend(accepted.suggested_rules());
    }

    /// Removes the accepted suggestions of one server's feature set; returns how many.
    pub fn revoke(&mut self, source: &str, feature_set: &str) -> usize {
        let before = self.0.len();
        self.0.retain(|r| {
            !matches!(&r.origin, RuleOrigin::Producer { source: s, feature_set: f, .. }
                if s == source && f == feature_set)
        });
        before - self.0.len()
    }

    /// Drops suggestions of one server's feature set that were accepted against a digest other
    /// than `current_digest` (`None`: the ontology is gone); returns how many (§17.5 step 3).
    pub fn invalidate_stale(
        &mut self,
        source: &str,
        feature_set: &str,
        current_digest: Option<&str>,
    ) -> usize {
        let before = self.0.len();
        self.0.retain(|r| match &r.origin {
            RuleOrigin::Producer {
                source: s,
                feature_set: f,
                ontology_digest,
            } if s == source && f == feature_set => {
                Some(ontology_digest.as_str()) == current_digest
            }
            _ => true,
        });
        before - self.0.len()
    }

    /// Every tag pattern the rules reference (for §17.6 `ontology-reference-undeclared`).
    pub fn referenced_patterns(&self) -> BTreeSet<&str> {
        self.0
            .iter()
            .flat_map(|r| [&r.tags_any, &r.tags_all, &r.tags_none])
            .flatten()
            .flatten()
            .map(TagPattern::as_str)
            .collect()
    }
}

/// Classic `*` wildcard matching over bytes (`*` matches any run, including an empty one).
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

// ---------------------------------------------------------------------------------------
// Producer ontology (§16.4, RFC-001 §5)
// ---------------------------------------------------------------------------------------

/// The facets RFC-001 §5.1 names for `tags.<tag>.facet` (§16.4 lists `facet` among the
/// descriptor fields without naming its values).
///
/// Reading: §16.4 makes the ontology an open hint catalog, so another facet is tolerated
/// (parsed and kept, never a reason to drop the descriptor); but a peer that reads the
/// RFC-001 list as closed refuses the whole manifest for it, so the producer side should
/// keep to these, and `mcpl validate` and `mcpl check` report any other as info
/// (`unnamed_facet`, see [`is_named_facet`]).
pub const FACETS: [&str; 5] = ["addressing", "sender", "content", "lifecycle", "locus"];

/// Whether `facet` is one of the [`FACETS`] RFC-001 §5.1 names (compared exactly).
pub fn is_named_facet(facet: &str) -> bool {
    FACETS.contains(&facet)
}

/// Lifecycle of a described tag (RFC-001 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// The default.
    Stable,
    /// May change.
    Experimental,
    /// Being retired.
    Deprecated,
}

/// A producer's description of one tag (RFC-001 §5.1); advisory until accepted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TagDescriptor {
    /// Human/agent-readable description.
    pub desc: Option<String>,
    /// Facet group, kept as written; RFC-001 §5.1 names five ([`FACETS`]), any other is
    /// tolerated (§16.4: a hint catalog).
    pub facet: Option<String>,
    /// Declared implications; applied only under acceptance (§16.3).
    pub implies: BTreeSet<Tag>,
    /// Per-tag suggested behaviour; applied only under acceptance (§16.5).
    pub suggested_treatment: Option<Behavior>,
    /// Declared stability (`None` when absent, which means stable).
    pub stability: Option<Stability>,
}

/// A `key=value` tag family (RFC-001 §5.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyedFamily {
    /// Description.
    pub desc: Option<String>,
    /// Suggested values, order kept (a list per §17.2).
    pub values: Vec<String>,
    /// Whether the values are ordered *within this namespace only*.
    pub ordered: bool,
}

/// Something in a `tagOntology` that was ignored because it is malformed; never fatal (§16.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OntologyIssue {
    /// JSON-pointer-like location, e.g. `tags/discord:x/implies/0`.
    pub path: String,
    /// Stable snake_case code.
    pub code: &'static str,
    /// Human-readable detail.
    pub detail: String,
}

/// A parsed producer `tagOntology` (§16.4): an open-world hint catalog, inert until accepted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TagOntology {
    /// Reserved `chat:*` tags the server says it emits.
    pub core_tags: BTreeSet<Tag>,
    /// Described tags.
    pub tags: BTreeMap<Tag, TagDescriptor>,
    /// Keyed families by key.
    pub keyed: BTreeMap<String, KeyedFamily>,
    /// The top-level suggested rule list (or the deprecated `defaultTreatment`).
    pub suggested_treatment: Vec<TreatmentRule>,
    /// Whether the server may emit undescribed tags in its namespaces.
    pub open: Option<bool>,
    /// Whether the list came from the deprecated `defaultTreatment` alias.
    pub uses_deprecated_alias: bool,
}

impl TagOntology {
    /// Reads the `tagOntology` member of one feature-set declaration; `Ok(None)` if absent.
    pub fn from_feature_set(
        declaration: &Value,
    ) -> Result<Option<(TagOntology, Vec<OntologyIssue>)>, OntologyError> {
        let decl = declaration
            .as_object()
            .ok_or(OntologyError::DeclarationNotObject)?;
        decl.get("tagOntology").map(TagOntology::parse).transpose()
    }

    /// Parses a `tagOntology` object leniently: malformed parts are reported and ignored,
    /// unknown members are tolerated, only a non-object is an error.
    pub fn parse(value: &Value) -> Result<(TagOntology, Vec<OntologyIssue>), OntologyError> {
        let obj = value.as_object().ok_or(OntologyError::NotObject)?;
        let mut issues = Vec::new();
        let mut issue = |path: String, code: &'static str, detail: String| {
            issues.push(OntologyIssue { path, code, detail })
        };
        let mut out = TagOntology::default();

        if let Some(v) = obj.get("coreTags") {
            for (i, s) in string_array(v, "coreTags", &mut issue)
                .into_iter()
                .enumerate()
            {
                match Tag::parse_producer(s) {
                    Ok(t) if t.is_core() => {
                        out.core_tags.insert(t);
                    }
                    Ok(_) => issue(format!("coreTags/{i}"), "not_core_tag", s.to_owned()),
                    Err(e) => issue(format!("coreTags/{i}"), e.code(), e.to_string()),
                }
            }
        }

        if let Some(v) = obj.get("tags") {
            match v.as_object() {
                None => issue("tags".into(), "not_object", "tags must be an object".into()),
                Some(tags) => {
                    for (name, d) in tags {
                        let path = format!("tags/{name}");
                        let tag = match Tag::parse_producer(name) {
                            Ok(t) => t,
                            Err(e) => {
                                issue(path, e.code(), e.to_string());
                                continue;
                            }
                        };
                        // Core tags are described by §16.2 and closed by §16.3 alone; a
                        // producer lists the ones it emits in `coreTags` and does not
                        // redescribe them (RFC-001 §5). Accepted, `chat:ambient → chat:addressed`
                        // would make every overheard event addressed: reported, dropped.
                        if tag.is_core() {
                            issue(
                                path,
                                "core_tag_redescribed",
                                format!("{name} is core vocabulary (§16.2); list it in coreTags"),
                            );
                            continue;
                        }
                        match parse_descriptor(d, &path, &mut issue) {
                            Some(desc) => {
                                out.tags.insert(tag, desc);
                            }
                            None => issue(
                                path,
                                "not_object",
                                "tag descriptor must be an object".into(),
                            ),
                        }
                    }
                }
            }
        }

        if let Some(v) = obj.get("keyed") {
            match v.as_object() {
                None => issue(
                    "keyed".into(),
                    "not_object",
                    "keyed must be an object".into(),
                ),
                Some(keyed) => {
                    for (key, f) in keyed {
                        let path = format!("keyed/{key}");
                        let Some(f) = f.as_object() else {
                            issue(path, "not_object", "keyed family must be an object".into());
                            continue;
                        };
                        let mut fam = KeyedFamily {
                            desc: opt_string(f.get("desc"), &format!("{path}/desc"), &mut issue),
                            ..KeyedFamily::default()
                        };
                        if let Some(vs) = f.get("values") {
                            fam.values = string_array(vs, &format!("{path}/values"), &mut issue)
                                .into_iter()
                                .map(str::to_owned)
                                .collect();
                        }
                        match f.get("ordered") {
                            None => {}
                            Some(Value::Bool(b)) => fam.ordered = *b,
                            Some(_) => issue(
                                format!("{path}/ordered"),
                                "not_boolean",
                                "ordered must be a boolean".into(),
                            ),
                        }
                        out.keyed.insert(key.clone(), fam);
                    }
                }
            }
        }

        let (rules_key, rules) = match (obj.get("suggestedTreatment"), obj.get("defaultTreatment"))
        {
            (Some(s), d) => {
                if d.is_some() {
                    issue(
                        "defaultTreatment".into(),
                        "deprecated_alias_ignored",
                        "suggestedTreatment is present; the deprecated alias is ignored".into(),
                    );
                }
                ("suggestedTreatment", Some(s))
            }
            (None, Some(d)) => {
                out.uses_deprecated_alias = true;
                ("defaultTreatment", Some(d))
            }
            (None, None) => ("suggestedTreatment", None),
        };
        if let Some(rules) = rules {
            match rules.as_array() {
                None => issue(
                    rules_key.into(),
                    "not_array",
                    "rule list must be an array".into(),
                ),
                Some(rules) => {
                    for (i, r) in rules.iter().enumerate() {
                        match TreatmentRule::from_json(r) {
                            Ok(rule) => out.suggested_treatment.push(rule),
                            Err(e) => issue(format!("{rules_key}/{i}"), e.code(), e.to_string()),
                        }
                    }
                }
            }
        }

        match obj.get("open") {
            None => {}
            Some(Value::Bool(b)) => out.open = Some(*b),
            Some(_) => issue(
                "open".into(),
                "not_boolean",
                "open must be a boolean".into(),
            ),
        }
        Ok((out, issues))
    }

    /// The producer's `implies` targets of `tag` (advisory; see [`AcceptedOntology`]).
    pub fn declared_implications(&self, tag: &str) -> impl Iterator<Item = &Tag> {
        self.tags
            .get(tag)
            .into_iter()
            .flat_map(|d| d.implies.iter())
    }
}

/// A `tagOntology` that is not a JSON object, or a declaration that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OntologyError {
    /// The feature-set declaration is not a JSON object.
    #[error("feature-set declaration is not an object: declare each feature set as a JSON object (§6.1)")]
    DeclarationNotObject,
    /// `tagOntology` is not a JSON object.
    #[error("tagOntology is not an object: give it as a JSON object of coreTags, tags, keyed, suggestedTreatment and open (§16.4)")]
    NotObject,
}

impl OntologyError {
    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            OntologyError::DeclarationNotObject => "declaration_not_object",
            OntologyError::NotObject => "ontology_not_object",
        }
    }
}

fn string_array<'v>(
    v: &'v Value,
    path: &str,
    issue: &mut impl FnMut(String, &'static str, String),
) -> Vec<&'v str> {
    let Some(items) = v.as_array() else {
        issue(
            path.to_owned(),
            "not_array",
            "expected an array of strings".into(),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) => out.push(s),
            None => issue(
                format!("{path}/{i}"),
                "not_string",
                "expected a string".into(),
            ),
        }
    }
    out
}

fn opt_string(
    v: Option<&Value>,
    path: &str,
    issue: &mut impl FnMut(String, &'static str, String),
) -> Option<String> {
    match v {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            issue(path.to_owned(), "not_string", "expected a string".into());
            None
        }
    }
}

fn parse_descriptor(
    d: &Value,
    path: &str,
    issue: &mut impl FnMut(String, &'static str, String),
) -> Option<TagDescriptor> {
    let d: &Map<String, Value> = d.as_object()?;
    let mut out = TagDescriptor {
        desc: opt_string(d.get("desc"), &format!("{path}/desc"), issue),
        facet: opt_string(d.get("facet"), &format!("{path}/facet"), issue),
        ..TagDescriptor::default()
    };
    if let Some(v) = d.get("implies") {
        for (i, s) in string_array(v, &format!("{path}/implies"), issue)
            .into_iter()
            .enumerate()
        {
            match Tag::parse_producer(s) {
                Ok(t) => {
                    out.implies.insert(t);
                }
                Err(e) => issue(format!("{path}/implies/{i}"), e.code(), e.to_string()),
            }
        }
    }
    if let Some(v) = d.get("suggestedTreatment") {
        match Behavior::try_from(v.clone()) {
            Ok(b) => out.suggested_treatment = Some(b),
            Err(e) => issue(
                format!("{path}/suggestedTreatment"),
                e.code(),
                e.to_string(),
            ),
        }
    }
    out.stability =
        match opt_string(d.get("stability"), &format!("{path}/stability"), issue).as_deref() {
            None => None,
            Some("stable") => Some(Stability::Stable),
            Some("experimental") => Some(Stability::Experimental),
            Some("deprecated") => Some(Stability::Deprecated),
            Some(other) => {
                issue(
                    format!("{path}/stability"),
                    "unknown_stability",
                    other.to_owned(),
                );
                None
            }
        };
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Acceptance (§16.5, §17.5)
// ---------------------------------------------------------------------------------------

/// An explicit host/operator acceptance of one server's feature-set ontology, bound to the
/// §17.2 digest of that `tagOntology` at the time of acceptance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OntologyAcceptance {
    source: String,
    feature_set: String,
    ontology_digest: String,
}

/// Why an acceptance does not apply to an ontology now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptanceError {
    /// The acceptance is for another server or feature set.
    #[error("the acceptance is for another server or feature set: accept this server's set's ontology itself (§16.5)")]
    OtherFeatureSet,
    /// The ontology changed since it was accepted (§17.5: acceptance does not carry over).
    #[error("the ontology changed since it was accepted, so the acceptance no longer applies (§17.5); review the new ontology and accept it again")]
    DigestChanged,
}

impl AcceptanceError {
    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            AcceptanceError::OtherFeatureSet => "acceptance_other_feature_set",
            AcceptanceError::DigestChanged => "ontology_acceptance_invalidated",
        }
    }
}

impl OntologyAcceptance {
    /// Records an explicit acceptance of `source`'s `feature_set` ontology whose §17.2 digest
    /// is `ontology_digest` (computed by `crate::manifest`, never by this module).
    pub fn accept(
        source: impl Into<String>,
        feature_set: impl Into<String>,
        ontology_digest: impl Into<String>,
    ) -> Self {
        OntologyAcceptance {
            source: source.into(),
            feature_set: feature_set.into(),
            ontology_digest: ontology_digest.into(),
        }
    }

    /// The accepted server id.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The accepted feature set.
    pub fn feature_set(&self) -> &str {
        &self.feature_set
    }

    /// The digest the acceptance is bound to.
    pub fn ontology_digest(&self) -> &str {
        &self.ontology_digest
    }

    /// Whether this acceptance still covers `source`'s `feature_set` whose ontology now has
    /// digest `current_digest`.
    pub fn is_current(&self, source: &str, feature_set: &str, current_digest: &str) -> bool {
        self.source == source
            && self.feature_set == feature_set
            && self.ontology_digest == current_digest
    }

    /// Binds the acceptance to the ontology currently declared by `source`'s `feature_set`,
    /// whose digest is `current_digest`; fails if that is not what was accepted.
    pub fn bind<'o>(
        &self,
        ontology: &'o TagOntology,
        source: &str,
        feature_set: &str,
        current_digest: &str,
    ) -> Result<AcceptedOntology<'o>, AcceptanceError> {
        if self.source != source || self.feature_set != feature_set {
            return Err(AcceptanceError::OtherFeatureSet);
        }
        if self.ontology_digest != current_digest {
            return Err(AcceptanceError::DigestChanged);
        }
        Ok(AcceptedOntology {
            ontology,
            source: self.source.clone(),
            feature_set: self.feature_set.clone(),
            ontology_digest: self.ontology_digest.clone(),
        })
    }
}

/// An ontology whose acceptance matches its current digest: the only way producer `implies`
/// edges and suggestions take effect (§16.3, §16.5).
#[derive(Debug, Clone)]
pub struct AcceptedOntology<'o> {
    ontology: &'o TagOntology,
    source: String,
    feature_set: String,
    ontology_digest: String,
}

impl AcceptedOntology<'_> {
    /// The accepted ontology.
    pub fn ontology(&self) -> &TagOntology {
        self.ontology
    }

    /// Accepted implications of `tag`.
    fn implied_by<'s>(&'s self, tag: &'s str) -> impl Iterator<Item = &'s Tag> + 's {
        self.ontology.declared_implications(tag)
    }

    /// The producer's suggestions as rules attributed to this acceptance: per-tag suggestions
    /// (as `tagsAny: [tag]`, in tag order) and then the top-level list.
    pub fn suggested_rules(&self) -> Vec<TreatmentRule> {
        let origin = RuleOrigin::Producer {
            source: self.source.clone(),
            feature_set: self.feature_set.clone(),
            ontology_digest: self.ontology_digest.clone(),
        };
        let per_tag = self.ontology.tags.iter().filter_map(|(tag, d)| {
            let behavior = d.suggested_treatment.clone()?;
            Some(TreatmentRule {
                tags_any: Some(vec![TagPattern(tag.0.clone())]),
                tags_all: None,
                tags_none: None,
                source: None,
                channel: None,
                behavior,
                origin: RuleOrigin::Consumer,
            })
        });
        per_tag
            .chain(self.ontology.suggested_treatment.iter().cloned())
            .map(|mut r| {
                r.origin = origin.clone();
                r
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s16_7_glob_star_semantics() {
        let m = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "chat:dm"));
        assert!(m("chat:*", "chat:dm"));
        assert!(!m("chat:*", "chatter:dm"));
        assert!(m("*:dm", "chat:dm"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("a**c", "ac"));
        assert!(!m("chat:dm", "chat:dms"));
        assert!(!m("chat:dms", "chat:dm"));
    }

    #[test]
    fn s16_2_core_vocabulary_is_complete_and_unique() {
        let set: BTreeSet<&str> = CORE_TAGS.iter().copied().collect();
        assert_eq!(set.len(), CORE_TAGS.len());
        for t in CORE_TAGS {
            assert!(Tag::parse_producer(t).is_ok(), "{t}");
        }
        for (from, to) in CORE_IMPLICATIONS {
            assert!(set.contains(from));
            assert!(to.iter().all(|t| set.contains(t)));
        }
    }
}
