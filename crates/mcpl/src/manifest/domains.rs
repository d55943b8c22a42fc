//! Change domains of a manifest (§17.1) and their derivation for `mcpl/manifestChanged`
//! (§17.3).
//!
//! Each domain is compared through a canonical *projection* of the manifest, written with the
//! same rules as the §17.2 digest (so reordering a set such as `uses` is no change), but
//! without the identifier check, so the diff is total even over manifests the digest refuses.
//!
//! Readings, each resolved towards announcing rather than staying silent:
//! - Absent, `null` and `{}` are three different states: the `featureSets` projection records
//!   presence, so a member appearing or disappearing changes its domain, and the appearance
//!   or disappearance of the `featureSets` carrier changes `tagOntology` too (§17.3).
//! - Within an object-keyed `featureSets`, the `tagOntology` projection is the map from
//!   feature-set name to that set's `tagOntology` (present members only); adding a feature set
//!   without an ontology is not an ontology change, dropping one that had one is.
//! - A non-object `featureSets` (the non-conforming array shape, `null`, …) is projected
//!   verbatim into **both** `featureSets` and `tagOntology`: the ontology cannot be separated
//!   from it, so any change announces both.
//! - A non-object manifest has no members; comparing it with anything different announces all
//!   three domains.

use super::digest::{Path, Writer};
use super::jcs;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One of the three change domains of §17.1 (App. B.4 `ChangeDomain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeDomain {
    /// Every manifest member other than `version`, `revision` and `featureSets`.
    Capabilities,
    /// The `featureSets` member, excluding any `tagOntology` within it.
    FeatureSets,
    /// The `tagOntology` of any feature set.
    TagOntology,
}

impl ChangeDomain {
    /// All three domains, in wire order.
    pub const ALL: [ChangeDomain; 3] = [
        ChangeDomain::Capabilities,
        ChangeDomain::FeatureSets,
        ChangeDomain::TagOntology,
    ];

    /// The wire spelling (`capabilities`, `featureSets`, `tagOntology`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeDomain::Capabilities => "capabilities",
            ChangeDomain::FeatureSets => "featureSets",
            ChangeDomain::TagOntology => "tagOntology",
        }
    }
}

/// A host-derived change impact of the §17.6 receipt (App. B.4 `ChangeImpact`). Hosts derive
/// these from their own diff; the server-side tracker never produces them (§17.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeImpact {
    /// A capability in force is no longer granted.
    CapabilityRevoked,
    /// A capability is newly advertised and awaits a policy decision.
    CapabilityExpansionPending,
    /// A feature set was disabled by derivation.
    FeatureDegraded,
    /// A previously degraded feature set is available again.
    FeatureRestored,
    /// An accepted tag ontology no longer applies.
    OntologyAcceptanceInvalidated,
    /// A consumer rule references a tag the server no longer declares.
    OntologyReferenceUndeclared,
    /// Tools, resources, prompts or channels changed.
    SurfaceChanged,
}

/// How a host handled one change impact (App. B.4 `Disposition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disposition {
    /// The host already applied it.
    Applied,
    /// A resident or operator decision is needed.
    DecisionNeeded,
    /// Nothing to do; for the record.
    Informational,
}

/// The canonical projections of one manifest onto the three domains; comparing two of these
/// is how domains are derived. Cheap to keep per installed manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainProjection {
    capabilities: Option<String>,
    feature_sets: Option<String>,
    tag_ontology: Option<String>,
}

impl DomainProjection {
    /// Projects a manifest. Total: never fails, whatever the value holds.
    pub fn of(manifest: &Value) -> Self {
        let Value::Object(map) = manifest else {
            // Not a manifest at all: a distinct state in every domain.
            let verbatim = Some(format!("!{}", jcs::to_string(manifest)));
            return DomainProjection {
                capabilities: verbatim.clone(),
                feature_sets: verbatim.clone(),
                tag_ontology: verbatim,
            };
        };
        let mut w = Writer::new(false, 256);
        // Unchecked writer: cannot fail.
        let _ = w.root(map, |name| name != "version" && name != "featureSets");
        let capabilities = Some(w.out);
        let (feature_sets, tag_ontology) = match map.get("featureSets") {
            None => (None, None),
            Some(fs @ Value::Object(sets)) => {
                let mut w = Writer::new(false, 256);
                let _ = w.feature_sets(fs, true);
                (Some(w.out), Some(ontologies(sets)))
            }
            Some(other) => {
                let v = jcs::to_string(other);
                (Some(v.clone()), Some(v))
            }
        };
        DomainProjection {
            capabilities,
            feature_sets,
            tag_ontology,
        }
    }

    /// The domains in which `self` (old) and `next` (new) differ, in wire order.
    pub fn diff(&self, next: &DomainProjection) -> Vec<ChangeDomain> {
        let mut out = Vec::new();
        if self.capabilities != next.capabilities {
            out.push(ChangeDomain::Capabilities);
        }
        if self.feature_sets != next.feature_sets {
            out.push(ChangeDomain::FeatureSets);
        }
        if self.tag_ontology != next.tag_ontology {
            out.push(ChangeDomain::TagOntology);
        }
        out
    }
}

/// `{name: tagOntology}` for the feature sets that carry one, canonicalised.
fn ontologies(sets: &Map<String, Value>) -> String {
    let mut w = Writer::new(false, 128);
    w.out.push('{');
    let mut first = true;
    jcs::for_each_member_sorted(sets, |name, fs| {
        if let Some(onto) = fs.get("tagOntology").filter(|_| fs.is_object()) {
            if !first {
                w.out.push(',');
            }
            first = false;
            jcs::write_string(&mut w.out, name);
            w.out.push(':');
            let _ = w.tag_ontology(onto, &Path::Root(""));
        }
    });
    w.out.push('}');
    w.out
}

/// The domains that differ between two manifests (§17.1, §17.3), compared canonically with
/// set semantics. Empty when nothing outside `version`/`revision` changed. Total.
pub fn changed_domains(old: &Value, new: &Value) -> Vec<ChangeDomain> {
    DomainProjection::of(old).diff(&DomainProjection::of(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use ChangeDomain::*;

    #[test]
    fn s17_3_featuresets_appearing_as_null_announces_featuresets_and_ontology() {
        let old = json!({"version":"0.5"});
        let new = json!({"version":"0.5","featureSets":null});
        assert_eq!(changed_domains(&old, &new), vec![FeatureSets, TagOntology]);
        assert_eq!(changed_domains(&new, &old), vec![FeatureSets, TagOntology]);
    }

    #[test]
    fn s17_3_absent_null_and_empty_are_three_states() {
        let absent = json!({"version":"0.5"});
        let null = json!({"version":"0.5","featureSets":null});
        let empty = json!({"version":"0.5","featureSets":{}});
        assert_eq!(
            changed_domains(&absent, &empty),
            vec![FeatureSets, TagOntology]
        );
        assert_eq!(
            changed_domains(&null, &empty),
            vec![FeatureSets, TagOntology]
        );
        let cap_absent = json!({"version":"0.5"});
        let cap_null = json!({"version":"0.5","x":null});
        let cap_empty = json!({"version":"0.5","x":{}});
        assert_eq!(changed_domains(&cap_absent, &cap_null), vec![Capabilities]);
        assert_eq!(changed_domains(&cap_null, &cap_empty), vec![Capabilities]);
    }

    #[test]
    fn s17_3_set_reordering_is_no_change() {
        let a = json!({"version":"0.5","pushEvents":true,"featureSets":{"f":{"uses":["tools","pushEvents"],
            "tagOntology":{"coreTags":["chat:a","chat:b"]}}}});
        let b = json!({"featureSets":{"f":{"tagOntology":{"coreTags":["chat:b","chat:a","chat:a"]},
            "uses":["pushEvents","tools","tools"]}},"pushEvents":true,"version":"0.5","revision":"x"});
        assert!(changed_domains(&a, &b).is_empty());
    }

    #[test]
    fn s17_1_version_is_not_a_domain() {
        assert!(changed_domains(&json!({"version":"0.5"}), &json!({"version":"0.6"})).is_empty());
    }

    #[test]
    fn s17_1_ontology_edit_is_only_tag_ontology() {
        let a = json!({"featureSets":{"f":{"uses":["tools"],"tagOntology":{"open":true}}}});
        let b = json!({"featureSets":{"f":{"uses":["tools"],"tagOntology":{"open":false}}}});
        assert_eq!(changed_domains(&a, &b), vec![TagOntology]);
        let c = json!({"featureSets":{"f":{"uses":["tools"]}}});
        assert_eq!(changed_domains(&a, &c), vec![TagOntology]);
        let d = json!({"featureSets":{"f":{"uses":["tools"]},"g":{"uses":[]}}});
        assert_eq!(changed_domains(&c, &d), vec![FeatureSets]);
    }

    #[test]
    fn s17_1_capability_edit_is_only_capabilities() {
        let a = json!({"version":"0.5","channels":{"publish":true},"featureSets":{}});
        let b = json!({"version":"0.5","channels":{"publish":false},"featureSets":{}});
        assert_eq!(changed_domains(&a, &b), vec![Capabilities]);
    }

    #[test]
    fn s17_1_array_featuresets_changes_announce_both() {
        let a = json!({"featureSets":[{"name":"f","tagOntology":{"open":true}}]});
        let b = json!({"featureSets":[{"name":"f","tagOntology":{"open":false}}]});
        assert_eq!(changed_domains(&a, &b), vec![FeatureSets, TagOntology]);
    }

    #[test]
    fn s17_1_total_over_refused_and_non_object_manifests() {
        let bad = json!({"bad key":true});
        assert_eq!(changed_domains(&json!({}), &bad), vec![Capabilities]);
        assert_eq!(
            changed_domains(&json!({}), &json!([])),
            ChangeDomain::ALL.to_vec()
        );
        assert!(changed_domains(&json!([]), &json!([])).is_empty());
    }

    #[test]
    fn b4_change_domain_wire_spelling() {
        assert_eq!(
            serde_json::to_value(ChangeDomain::ALL).unwrap(),
            json!(["capabilities", "featureSets", "tagOntology"])
        );
        assert_eq!(TagOntology.as_str(), "tagOntology");
        assert_eq!(
            serde_json::to_value(ChangeImpact::OntologyAcceptanceInvalidated).unwrap(),
            json!("ontology-acceptance-invalidated")
        );
        assert_eq!(
            serde_json::to_value(Disposition::DecisionNeeded).unwrap(),
            json!("decision-needed")
        );
    }
}
