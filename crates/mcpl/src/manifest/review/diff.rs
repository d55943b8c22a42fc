//! Impacts, the diff of two manifests and the change receipt (§17.5, §17.6, App. B.4).

use super::*;

// Impacts, diff and the change receipt (§17.5, §17.6, App. B.4)

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
    pub(super) fn new(
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

/// Offline diff for `mcpl diff OLD NEW` (§17.5 steps 1–3): the receipt a host emits when it
/// fetches `new` with `old` in force ([`ManifestReview::on_fetched`]), so the two never
/// disagree. Host policy is assumed to have granted everything the old manifest advertised
/// and accepted every tag ontology it carried, so removals are
/// `capability-revoked`/`applied`, additions `capability-expansion-pending`/`decision-needed`,
/// a changed ontology `ontology-acceptance-invalidated`. A `new` that parses but that the
/// digest refuses is partially invalid (§17.5 step 1): only its removals show, its additions
/// are ignored. An `old` the digest refuses was never in force (a host grants nothing of it,
/// see the module docs), so everything `new` advertises is pending. No consumer rules are
/// known, so `ontology-reference-undeclared` never appears here. `domains` are those of the
/// two manifests as written (§17.3). Total over any two JSON values.
pub fn diff(old: &Value, new: &Value) -> Diff {
    let at = std::time::SystemTime::UNIX_EPOCH;
    let impacts = match ManifestReview::initial(old, None, std::iter::empty(), at) {
        Ok((mut review, _)) => {
            review.set_grant(Grant::from_set(CapabilitySet::ALL), at, "diff");
            let names: Vec<String> = review.declarations().sets.keys().cloned().collect();
            for name in names {
                // A set without an ontology the digest accepts has none to accept.
                let _ = review.accept_ontology(&name);
            }
            match review.on_fetched(new, None, at).result {
                FetchResult::Changed(receipt) => receipt.impacts,
                FetchResult::Unchanged | FetchResult::PreviousStands { .. } => Vec::new(),
            }
        }
        // Unreachable: an empty policy has no malformed pattern.
        Err(_) => Vec::new(),
    };
    Diff {
        domains: changed_domains(old, new),
        impacts,
    }
}

/// The digest of feature set `name`'s `tagOntology` in `manifest`, if it has one the digest
/// accepts.
pub(super) fn ontology_digest_of(manifest: &Value, name: &str) -> Option<String> {
    digest::ontology_digest(ontology_of(manifest, name)?).ok()
}

/// Feature set `name`'s `tagOntology` in `manifest`.
pub(super) fn ontology_of<'a>(manifest: &'a Value, name: &str) -> Option<&'a Value> {
    manifest
        .get("featureSets")?
        .as_object()?
        .get(name)?
        .get("tagOntology")
}

/// Tags declared under `featureSets.*.tagOntology.tags` (object form only).
pub(super) fn declared_tags(manifest: &Value) -> BTreeSet<String> {
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
pub(super) struct Before<'a> {
    pub(super) manifest: &'a Value,
    pub(super) advertised: CapabilitySet,
    pub(super) grant: CapabilitySet,
    pub(super) statuses: &'a BTreeMap<String, FeatureSetStatus>,
    /// Accepted ontologies: each feature set's name and accepted digest.
    pub(super) accepted: Vec<(&'a str, &'a str)>,
    pub(super) patterns: &'a [TagPattern],
    pub(super) selection: &'a Selection,
    pub(super) outer_tools: bool,
}

/// The consequences of a new manifest (§17.5 step 3).
pub(super) struct After {
    pub(super) advertised: CapabilitySet,
    pub(super) grant: CapabilitySet,
    pub(super) decls: FeatureSets,
    pub(super) statuses: BTreeMap<String, FeatureSetStatus>,
    pub(super) impacts: Vec<Impact>,
    pub(super) invalidated: Vec<String>,
}

pub(super) fn advertised_by(manifest: &Value, outer_tools: bool) -> CapabilitySet {
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
///
/// Of `new`'s feature sets only those `old` declares are read ([`sets_named`]), so the cost
/// is bounded by the manifest in force however many sets `new` carries.
pub(super) fn removals_only(old: &Value, new: &Value) -> Value {
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
    let new_sets = FeatureSets::parse(&sets_named(new.get("featureSets"), old_raw)).0;
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

/// The entries of a `featureSets` value (`sets`, in its 0.5 object or 0.4 array form) whose
/// names `names` holds, in the same form; any other value as it is. One lookup per name of
/// `names` (object form) or one pass (array form): nothing else of `sets` is copied.
fn sets_named(sets: Option<&Value>, names: &serde_json::Map<String, Value>) -> Value {
    match sets {
        Some(Value::Object(m)) => Value::Object(
            names
                .keys()
                .filter_map(|n| m.get(n).map(|d| (n.clone(), d.clone())))
                .collect(),
        ),
        Some(Value::Array(a)) => Value::Array(
            a.iter()
                .filter(|d| {
                    d.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| names.contains_key(n))
                })
                .cloned()
                .collect(),
        ),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// Applies §17.5 step 3 to a parsed (object, digestible) or — for the offline diff — any
/// manifest: removals revoke now (grant ∩ new advertisement), additions are pending, feature
/// sets are re-derived, ontologies re-checked.
pub(super) fn assess(b: &Before<'_>, new: &Value) -> After {
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
    for &(name, accepted) in &b.accepted {
        if ontology_digest_of(new, name).as_deref() != Some(accepted) {
            invalidated.push(name.to_owned());
            impacts.push(Impact::new(
                I::OntologyAcceptanceInvalidated,
                P::Applied,
                D::TagOntology,
                name,
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
