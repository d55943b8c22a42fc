//! The server manifest — the `experimental.mcpl` object (§5.1, §17.1) — and the §17 methods
//! `mcpl/manifest` and `mcpl/manifestChanged`, plus the App. B.4 change vocabulary.
//!
//! [`Manifest`] is backed by the JSON object exactly as received: digests (§17.2) are
//! computed over it, never over a typed struct. [`ManifestView`] is a typed reading of it
//! that tolerates what older or sloppier servers send — bool-or-object advertisement values,
//! the 0.4 array form of `featureSets`, malformed declarations — and reports it through
//! [`ManifestView::defects`].

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{EmptyObject, Extra};

/// The manifest as received: the `experimental.mcpl` JSON object, kept verbatim (§17.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Manifest(pub Map<String, Value>);

impl Manifest {
    /// The raw object, for hashing and diffing.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The manifest as a JSON value.
    pub fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }

    /// A typed reading of the manifest; fails only if `version` or `revision` is not a
    /// string (everything else is tolerated and reported by [`ManifestView::defects`]).
    pub fn view(&self) -> Result<ManifestView, serde_json::Error> {
        serde_json::from_value(self.to_value())
    }
}

/// A typed reading of a manifest. Writing it emits the 0.5 form (an array-form
/// `featureSets` is written keyed by name); everything else round-trips.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestView {
    /// Protocol version (`"0.5"`); required by App. B.3, tolerated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The §17.2 content digest, when the server supports §17. Untrusted; equality only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Feature-set declarations (§6.1). A present `null` is kept (absent and null differ
    /// for §17.3 domains).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub feature_sets: Option<FeatureSets>,
    /// Every other member: the capability advertisement (§5.1), kept verbatim.
    #[serde(flatten)]
    pub capabilities: BTreeMap<String, Advertisement>,
}

/// Reads a member that is present (even as `null`) as `Some`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Something a [`ManifestView`] tolerated but that does not conform to 0.5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestDefect {
    /// No `version` member (App. B.3 requires it).
    MissingVersion,
    /// `featureSets` in the 0.4 array form `[{name, …}]`; read by name.
    LegacyFeatureSetArray,
    /// `featureSets` is neither an object, nor a legacy array, nor a bool.
    MalformedFeatureSets,
    /// The named feature set's declaration is not an object of the B.2 shape.
    MalformedFeatureSet(String),
    /// The named feature set's `uses` is absent or not an array of strings (§6.4).
    MalformedUses(String),
    /// A capability member whose value is neither a bool nor an object.
    MalformedAdvertisement(String),
}

impl ManifestView {
    /// Every tolerated non-conformance, in a stable order.
    pub fn defects(&self) -> Vec<ManifestDefect> {
        let mut out = Vec::new();
        if self.version.is_none() {
            out.push(ManifestDefect::MissingVersion);
        }
        match &self.feature_sets {
            Some(FeatureSets::Legacy(_)) => out.push(ManifestDefect::LegacyFeatureSetArray),
            Some(FeatureSets::Other(_)) => out.push(ManifestDefect::MalformedFeatureSets),
            _ => {}
        }
        if let Some(fs) = &self.feature_sets {
            for (name, entry) in fs.entries() {
                match entry {
                    FeatureSetEntry::Malformed(_) => {
                        out.push(ManifestDefect::MalformedFeatureSet(name.to_owned()))
                    }
                    FeatureSetEntry::Declared(d) if d.uses_paths().is_none() => {
                        out.push(ManifestDefect::MalformedUses(name.to_owned()))
                    }
                    FeatureSetEntry::Declared(_) => {}
                }
            }
        }
        for (name, adv) in &self.capabilities {
            if adv.has_malformed() {
                out.push(ManifestDefect::MalformedAdvertisement(name.clone()));
            }
        }
        out
    }
}

/// An advertisement value (§5.1): `true`/`false` at any level, or a nested object of the
/// same. Anything else is kept verbatim as `Other` (advertising nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Advertisement {
    /// `true` (every leaf beneath) or `false` (none).
    Flag(bool),
    /// A nested object.
    Node(BTreeMap<String, Advertisement>),
    /// Any other JSON value, kept verbatim.
    Other(Value),
}

impl Advertisement {
    fn has_malformed(&self) -> bool {
        match self {
            Advertisement::Flag(_) => false,
            Advertisement::Node(m) => m.values().any(Advertisement::has_malformed),
            Advertisement::Other(_) => true,
        }
    }
}

/// The `featureSets` member.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureSets {
    /// The 0.5 form: an object keyed by feature-set name (§6.1).
    Declared(BTreeMap<String, FeatureSetEntry>),
    /// The 0.4 array form `[{name, …}]`, read by name and written in the 0.5 form.
    Legacy(Vec<LegacyFeatureSet>),
    /// A bool (the host advertisement of §5.2 says `"featureSets": true`).
    Flag(bool),
    /// Anything else (including `null`), kept verbatim.
    Other(Value),
}

impl FeatureSets {
    /// `(name, entry)` pairs of either form; empty for `Flag`/`Other`.
    pub fn entries(&self) -> Vec<(&str, FeatureSetEntry)> {
        match self {
            FeatureSets::Declared(m) => m.iter().map(|(k, v)| (k.as_str(), v.clone())).collect(),
            FeatureSets::Legacy(v) => v
                .iter()
                .map(|l| {
                    (
                        l.name.as_str(),
                        FeatureSetEntry::Declared(l.declaration.clone()),
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Serialize for FeatureSets {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FeatureSets::Declared(m) => m.serialize(s),
            FeatureSets::Legacy(v) => {
                let m: BTreeMap<&str, &FeatureSetDeclaration> = v
                    .iter()
                    .map(|l| (l.name.as_str(), &l.declaration))
                    .collect();
                m.serialize(s)
            }
            FeatureSets::Flag(b) => b.serialize(s),
            FeatureSets::Other(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for FeatureSets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Object(m) => FeatureSets::Declared(
                m.into_iter()
                    .map(|(k, v)| (k, FeatureSetEntry::from_value(v)))
                    .collect(),
            ),
            Value::Array(a) => match serde_json::from_value(Value::Array(a.clone())) {
                Ok(legacy) => FeatureSets::Legacy(legacy),
                Err(_) => FeatureSets::Other(Value::Array(a)),
            },
            Value::Bool(b) => FeatureSets::Flag(b),
            other => FeatureSets::Other(other),
        })
    }
}

/// One entry of the object-form `featureSets`.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureSetEntry {
    /// A declaration of the B.2 shape (its `uses` may still be invalid).
    Declared(FeatureSetDeclaration),
    /// Not an object of that shape; kept verbatim (§6.4: the host disables it).
    Malformed(Value),
}

impl FeatureSetEntry {
    fn from_value(v: Value) -> Self {
        if v.is_object() {
            if let Ok(d) = serde_json::from_value(v.clone()) {
                return FeatureSetEntry::Declared(d);
            }
        }
        FeatureSetEntry::Malformed(v)
    }
}

impl Serialize for FeatureSetEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FeatureSetEntry::Declared(d) => d.serialize(s),
            FeatureSetEntry::Malformed(v) => v.serialize(s),
        }
    }
}

/// A feature-set declaration (§6.1, §6.2, App. B.2). `uses` is kept as received; validating
/// it against the vocabulary is the policy module's job (§6.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeatureSetDeclaration {
    /// Human-readable description (required by B.2, tolerated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Capability paths used, as received.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub uses: Option<Uses>,
    /// Rollback support (§8.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<bool>,
    /// Producer tag ontology (§16.4), kept verbatim; a present `null` is kept.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub tag_ontology: Option<Value>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl FeatureSetDeclaration {
    /// `uses` when it is an array of strings; `None` when absent or malformed.
    pub fn uses_paths(&self) -> Option<&[String]> {
        match &self.uses {
            Some(Uses::Paths(p)) => Some(p),
            _ => None,
        }
    }
}

/// A `uses` member: an array of strings, or anything else kept verbatim (the digest hashes
/// it as is, §17.2, and validation fails it, §6.4).
#[derive(Debug, Clone, PartialEq)]
pub enum Uses {
    /// An array of strings, in received order, duplicates kept.
    Paths(Vec<String>),
    /// Any other value (wrong type, non-string member, `null`).
    Malformed(Value),
}

impl Serialize for Uses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Uses::Paths(p) => p.serialize(s),
            Uses::Malformed(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Uses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(match serde_json::from_value::<Vec<String>>(v.clone()) {
            Ok(p) if v.is_array() => Uses::Paths(p),
            _ => Uses::Malformed(v),
        })
    }
}

/// One element of the 0.4 array-form `featureSets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyFeatureSet {
    /// The feature-set name.
    pub name: String,
    /// The rest of the declaration.
    #[serde(flatten)]
    pub declaration: FeatureSetDeclaration,
}

/// A §17.1 change domain (App. B.4 ChangeDomain). Unknown values are kept as `Other`: the
/// notification is only a hint to re-fetch, so an unknown domain decides nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeDomain {
    /// Every member other than `version`, `revision`, `featureSets`.
    Capabilities,
    /// `featureSets`, excluding `tagOntology`.
    FeatureSets,
    /// Any feature set's `tagOntology`.
    TagOntology,
    /// A value outside App. B.4, kept as received.
    #[serde(untagged)]
    Other(String),
}

/// The host-derived change-receipt vocabulary (§17.6, App. B.4), defined once in
/// [`crate::manifest::domains`].
pub use crate::manifest::domains::{ChangeImpact, Disposition};

/// `mcpl/manifestChanged` params (§17.3), as received: unknown domains and members are kept
/// for reporting. A server sends the strict [`crate::manifest::tracker::ManifestChanged`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestChangedParams {
    /// The new revision (opaque; equality only).
    pub revision: String,
    /// Changed domains.
    pub domains: Vec<ChangeDomain>,
    /// Unknown members. App. B.3 forbids any (`additionalProperties: false`, the
    /// notification carries no payload); they are kept only so the receiver can report them
    /// via [`Self::payload_members`] and must never be acted on.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ManifestChangedParams {
    /// Names of members beyond `revision` and `domains` — a §17.3 conformance defect.
    pub fn payload_members(&self) -> Vec<&str> {
        self.extra.keys().map(String::as_str).collect()
    }
}

method!(
    /// `mcpl/manifest` (§17.4): Host → Server Request returning the complete current manifest;
    /// unprivileged.
    ManifestFetch, "mcpl/manifest", Mcpl, Request, HostToServer, EmptyObject, Manifest,
    requires: None
);

method!(
    /// `mcpl/manifestChanged` (§17.3): Server → Host Notification; deliberately ungated.
    ManifestChanged, "mcpl/manifestChanged", Mcpl, Notification, ServerToHost,
    ManifestChangedParams, (),
    requires: None
);

/// The revision of a `mcpl/manifestChanged` kept for the fetch that follows it (§17.3,
/// §17.5): the announcement's `revision` only when of the digest's shape (App. B.3,
/// [`crate::manifest::review::is_well_formed_revision`]); any other can never equal a digest,
/// is a defect [`manifest_changed_defects`] reports, and is not kept. The one rule for the
/// host and `mcpl check`: a later announcement replaces an earlier one, well formed or not.
pub fn announced_revision(params: Option<&Value>) -> Option<&str> {
    params
        .and_then(|p| p.get("revision"))
        .and_then(Value::as_str)
        .filter(|r| crate::manifest::review::is_well_formed_revision(r))
}

/// Defects of `mcpl/manifestChanged` params (§17.3): exactly `{revision, domains}`, with
/// `revision` a string of the digest's shape (App. B.3 `pattern`, by the rule a manifest's
/// own `revision` is judged by, [`crate::manifest::review::is_well_formed_revision`]) and
/// `domains` a non-empty (App. B.3: `minItems` 1) subset of
/// `capabilities | featureSets | tagOntology` — no payload. The one shape rule the hosts
/// report a malformed announcement by and `mcpl check` (`manifest.changed-shape`) fails.
pub fn manifest_changed_defects(params: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(p) = params.and_then(Value::as_object) else {
        out.push("params is not an object".into());
        return out;
    };
    match p.get("revision") {
        Some(Value::String(r)) if crate::manifest::review::is_well_formed_revision(r) => {}
        Some(Value::String(r)) => out.push(format!(
            "revision is not \"sha256:\" and 43 base64url characters (App. B.3, §17.2): {} \
             characters",
            r.chars().count()
        )),
        _ => out.push("revision missing or not a string".into()),
    }
    match p.get("domains").and_then(Value::as_array) {
        None => out.push("domains missing or not an array".into()),
        Some(ds) => {
            if ds.is_empty() {
                out.push("domains is empty (App. B.3: minItems 1)".into());
            }
            out.extend(super::listed_defects(ds.iter().filter_map(|d| {
                let known = crate::manifest::ChangeDomain::ALL
                    .iter()
                    .any(|c| Some(c.as_str()) == d.as_str());
                (!known).then(|| format!("unknown domain {d}"))
            })));
        }
    }
    out.extend(super::listed_defects(
        p.keys()
            .filter(|k| *k != "revision" && *k != "domains")
            .map(|k| format!("carries payload member {k:?}")),
    ));
    super::listed_defects(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(v: Value) -> ManifestView {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn s5_1_bool_or_object_advertisement_round_trips() {
        let v = json!({"version":"0.5","pushEvents":true,"modelInfo":false,
            "contextHooks":{"beforeInference":{"observe":true,"inject":{"system":false}}},
            "channels":{"register":true}});
        let m = view(v.clone());
        assert!(matches!(
            m.capabilities["pushEvents"],
            Advertisement::Flag(true)
        ));
        assert!(matches!(
            m.capabilities["contextHooks"],
            Advertisement::Node(_)
        ));
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
        assert!(m.defects().is_empty());
    }

    #[test]
    fn s6_1_legacy_array_feature_sets_are_read_and_reported() {
        let m = view(json!({"version":"0.4","featureSets":[
            {"name":"a.b","description":"d","uses":["tools"]}]}));
        assert_eq!(m.defects(), vec![ManifestDefect::LegacyFeatureSetArray]);
        let out = serde_json::to_value(&m).unwrap();
        assert_eq!(
            out["featureSets"],
            json!({"a.b":{"description":"d","uses":["tools"]}})
        );
    }

    #[test]
    fn s17_2_malformed_uses_and_null_members_survive() {
        let v = json!({"version":"0.5","featureSets":{
            "x":{"description":"d","uses":"tools"},
            "y":{"description":"d","uses":["tools",1],"tagOntology":null},
            "z":7}});
        let m = view(v.clone());
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
        assert_eq!(
            m.defects(),
            vec![
                ManifestDefect::MalformedUses("x".into()),
                ManifestDefect::MalformedUses("y".into()),
                ManifestDefect::MalformedFeatureSet("z".into()),
            ]
        );
        let null_fs = json!({"version":"0.5","featureSets":null});
        assert_eq!(
            serde_json::to_value(view(null_fs.clone())).unwrap(),
            null_fs
        );
    }

    #[test]
    fn s17_3_payload_members_are_reported() {
        let p: ManifestChangedParams = serde_json::from_value(
            json!({"revision":"sha256:x","domains":["featureSets"],"added":["tools"]}),
        )
        .unwrap();
        assert_eq!(p.payload_members(), vec!["added"]);
    }

    #[test]
    fn b4_change_impact_is_closed() {
        assert!(serde_json::from_value::<ChangeImpact>(json!("requires-review")).is_err());
        assert_eq!(
            serde_json::to_value(ChangeImpact::CapabilityExpansionPending).unwrap(),
            json!("capability-expansion-pending")
        );
        assert_eq!(
            serde_json::to_value(Disposition::DecisionNeeded).unwrap(),
            json!("decision-needed")
        );
    }
}
