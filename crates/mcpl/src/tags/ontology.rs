//! Producer tag ontologies (§16.4, RFC-001 §5) and the host's acceptance of them (§16.5,
//! §17.5).

use super::*;

// Producer ontology (§16.4, RFC-001 §5)

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

pub(super) fn string_array<'v>(
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

pub(super) fn opt_string(
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

pub(super) fn parse_descriptor(
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

// Acceptance (§16.5, §17.5)

/// An explicit host/operator acceptance of one server's feature-set ontology, bound to the
/// §17.2 digest of that `tagOntology` at the time of acceptance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OntologyAcceptance {
    pub(super) source: String,
    pub(super) feature_set: String,
    pub(super) ontology_digest: String,
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
    pub(super) ontology: &'o TagOntology,
    pub(super) source: String,
    pub(super) feature_set: String,
    pub(super) ontology_digest: String,
}

impl AcceptedOntology<'_> {
    /// The accepted ontology.
    pub fn ontology(&self) -> &TagOntology {
        self.ontology
    }

    /// Accepted implications of `tag`.
    pub(super) fn implied_by<'s>(&'s self, tag: &'s str) -> impl Iterator<Item = &'s Tag> + 's {
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
