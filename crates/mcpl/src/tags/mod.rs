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

mod ontology;
mod rules;

pub use ontology::*;
pub use rules::*;

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

/// Whether a producer's `tags` carry `chat:ambient` beside a tag implying `chat:addressed`
/// under §16.3's core closure (`chat:addressed` itself, `chat:mention`, `chat:reply`,
/// `chat:dm`): what §16.3 says producers SHOULD NOT emit (a host drops `chat:ambient`).
/// Non-string entries are ignored (their shape is [`TagError`]'s concern). Linear in `tags`.
pub fn ambient_beside_addressed(tags: &[serde_json::Value]) -> bool {
    let strs = || tags.iter().filter_map(serde_json::Value::as_str);
    let addressed = strs().any(|t| {
        t == ADDRESSED
            || CORE_IMPLICATIONS
                .iter()
                .any(|(from, to)| *from == t && to.contains(&ADDRESSED))
    });
    addressed && strs().any(|t| t == AMBIENT)
}

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

/// In words: the entry (`tags[2]`, or `tags` for the field itself) and what is wrong with
/// it, e.g. ``tags[2]: tag "mention" is not namespaced: write it as `namespace:value` …``.
impl fmt::Display for TagIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "tags[{i}]: {}", self.error),
            None => write!(f, "tags: {}", self.error),
        }
    }
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

    /// Parses the raw JSON `tags` member (absent or `null` ⇒ empty set); wrong types are reported.
    pub fn from_json(tags: Option<&Value>) -> (TagSet, Vec<TagIssue>) {
        match tags {
            // `null` is absent, as every optional member is read (`protocol::given`).
            None | Some(Value::Null) => (TagSet::default(), Vec::new()),
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

#[cfg(test)]
mod tests;

#[cfg(test)]
mod ambient_tests {
    use super::*;
    /// §16.3 (F9): `chat:ambient` beside `chat:mention` (or anything implying
    /// `chat:addressed`) is what producers SHOULD NOT emit; alone, or beside other tags, it
    /// is not.
    #[test]
    fn s16_3_ambient_beside_addressed_is_found() {
        use serde_json::json;
        let t = |v: serde_json::Value| ambient_beside_addressed(v.as_array().unwrap());
        assert!(t(json!(["chat:mention", "chat:ambient"])));
        assert!(t(json!(["chat:ambient", "chat:addressed"])));
        assert!(t(json!(["chat:dm", 3, "chat:ambient"])));
        assert!(!t(json!(["chat:ambient", "chat:thread"])));
        assert!(!t(json!(["chat:mention", "chat:private"])));
    }
}
