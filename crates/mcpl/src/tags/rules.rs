//! Tag and id patterns and treatment rules (§16.7).

use super::*;
use std::ops::Bound;

// Patterns and rules (§16.7)

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
pub struct TagPattern(pub(super) String);

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

    /// Validates every pattern of `patterns` (§16.7): all of them, or each refused one.
    pub fn all<'a, I>(patterns: I) -> Result<Vec<TagPattern>, Vec<RuleError>>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let (mut ok, mut refused) = (Vec::new(), Vec::new());
        for p in patterns {
            match TagPattern::new(p) {
                Ok(t) => ok.push(t),
                Err(e) => refused.push(e),
            }
        }
        if refused.is_empty() {
            Ok(ok)
        } else {
            Err(refused)
        }
    }

    /// Whether the pattern matches `tag`.
    pub fn matches(&self, tag: &Tag) -> bool {
        glob_match(&self.0, &tag.0)
    }

    /// Whether the pattern matches some tag of `tags`: a pattern without `*` is one set
    /// lookup, and a glob only runs over the tags that share its literal prefix, so a rule
    /// list (an accepted ontology's suggestions are one rule per tag) is not evaluated as
    /// every pattern against every tag.
    pub fn matches_any(&self, tags: &ExpandedTags) -> bool {
        let p = self.0.as_str();
        match p.find('*') {
            None => tags.0.contains(p),
            Some(star) => {
                // `*` is ASCII, so `star` is a char boundary.
                let prefix = &p[..star];
                tags.0
                    .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
                    .take_while(|t| t.0.starts_with(prefix))
                    .any(|t| self.matches(t))
            }
        }
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
pub struct IdPattern(pub(super) String);

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
        glob_match(&self.0, id)
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
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
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
        let hit = |p: &TagPattern| p.matches_any(tags);
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

/// `*` wildcard matching (`*` matches any run, including an empty one), the one glob of
/// §16.7 tag patterns and id patterns, in time linear in `pattern` and `text`.
///
/// The text before the first `*` must be a prefix and the text after the last one a
/// suffix; every literal run between stars is then taken at its leftmost place after the
/// previous one (with `*` as the only wildcard, the leftmost place never loses a match).
/// Each search is a linear-time substring search over text not searched before. Reading:
/// §16.7 bounds neither patterns nor tags, and both can be a message long (an accepted
/// producer ontology's suggestions, an event's tags), so a glob that backtracked over the
/// text for every place a run could start took `pattern × text` steps.
pub(super) fn glob_match(pattern: &str, text: &str) -> bool {
    #[cfg(test)]
    GLOB_CALLS.with(|c| c.set(c.get() + 1));
    let (Some(first), Some(last)) = (pattern.find('*'), pattern.rfind('*')) else {
        return pattern == text;
    };
    // `*` is ASCII, so every cut below is on a char boundary.
    let (head, tail) = (&pattern[..first], &pattern[last + 1..]);
    if text.len() < head.len() + tail.len() || !text.starts_with(head) || !text.ends_with(tail) {
        return false;
    }
    let mut window = &text[head.len()..text.len() - tail.len()];
    // Between the first and the last star (nothing when they are one star).
    let middle = pattern.get(first + 1..last).unwrap_or_default();
    for run in middle.split('*').filter(|r| !r.is_empty()) {
        let Some(at) = window.find(run) else {
            return false;
        };
        #[cfg(test)]
        GLOB_STEPS.with(|c| c.set(c.get() + at + 2 * run.len()));
        window = &window[at + run.len()..];
    }
    true
}

#[cfg(test)]
thread_local! {
    /// How many times [`glob_match`] ran on this thread (tests count evaluation work with it).
    pub(super) static GLOB_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// How many bytes of text and pattern [`glob_match`] stepped over on this thread.
    pub(super) static GLOB_STEPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
