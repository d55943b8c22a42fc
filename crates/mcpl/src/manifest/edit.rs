//! Typed manifest edits: [`ManifestEdit`], handed to the closure of
//! [`ManifestTracker::edit`](super::ManifestTracker::edit).
//!
//! Each operation states what it expects to find, and an edit that would find something
//! else is an error naming the problem ([`ManifestEditError`]) instead of a silent no-op:
//! adding a feature set that exists, removing or changing one that does not (the error lists
//! the declared sets, closest to the name given first), a name that is not a feature-set name
//! (§6.3, §17.2), `uses` that is empty (§6.2), advertising what is advertised, withdrawing
//! what is not or what a declared set still uses (§6.4: the set would be disabled). The
//! closure works on a copy, so the first error leaves the installed manifest as it was: an
//! edit is all or nothing, and installing it is the tracker's, which digests, diffs and
//! announces exactly as [`ManifestTracker::set_manifest`](super::ManifestTracker::set_manifest)
//! does (§17.2, §17.3).
//!
//! Readings (the spec is silent on these):
//! - A feature-set name is one or more non-empty dot-separated segments (§6.3) of the §17.2
//!   identifier charset without `*`, which §6.3 reserves for selecting sets.
//! - Adding a set, or setting its `uses`, also advertises every capability it uses (§5.1),
//!   as [`ServerBuilder::feature_set`](crate::server::ServerBuilder::feature_set) does: a set
//!   using what the manifest does not advertise could never be granted. `tools` is the one
//!   exception: it is advertised in MCP's `capabilities.tools`, outside the manifest, so
//!   [`ManifestEdit::advertise`] and [`ManifestEdit::withdraw`] refuse it.
//! - Removing a set does not withdraw what it used (another set, or the server, may still
//!   use it); [`ManifestEdit::withdraw`] says so explicitly.
//! - Advertisement edits rewrite only the top-level capability members whose advertised
//!   paths changed, in the explicit form of
//!   [`advertisement_to_value`]; other members (vendor ones, a `true` shorthand the edit did
//!   not touch) stay as they were, so their digest does not move (§17.2: shorthand is not
//!   expanded before hashing).
//! - A feature set bound to a server's `context/beforeInference` hook cannot be removed: the
//!   hook would never run again (its set undeclared, so unavailable, §6.4) and answer every
//!   turn with nothing. [`ManifestEditError::BoundFeatureSet`] says which registration holds
//!   it. The raw [`ManifestTracker::transaction`](super::ManifestTracker::transaction) does
//!   not check this; the hook then stays silent (fail closed).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::digest::{is_identifier, DigestError};
use crate::capability::{advertised, advertisement_to_value, Capability, CapabilitySet};
use crate::policy::{FeatureSetDeclaration, UsesError};

/// Why a typed manifest edit was refused; nothing was installed or announced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestEditError {
    /// [`ManifestEdit::add_feature_set`] of a name the manifest already declares.
    #[error("feature set {0:?} is already declared; change it with set_feature_set_uses / set_feature_set_description, or remove it first")]
    FeatureSetExists(String),
    /// A set the manifest does not declare was named for removal or change.
    #[error("{}", unknown_message(name, declared))]
    UnknownFeatureSet {
        /// The name given.
        name: String,
        /// The declared sets, closest to `name` first.
        declared: Vec<String>,
    },
    /// Not a feature-set name: dot-separated non-empty segments of `[A-Za-z0-9._:-]` (§6.3,
    /// §17.2; `*` selects sets, it does not name one).
    #[error("{0:?} is not a feature-set name: use dot-separated non-empty segments of [A-Za-z0-9_:-] (§6.3, §17.2)")]
    InvalidName(String),
    /// The declaration's `uses` is not a valid §6.2 list.
    #[error("feature set {name:?}: {reason} (§6.2: uses is a non-empty list of capability paths)")]
    InvalidUses {
        /// The set.
        name: String,
        /// Why.
        reason: UsesError,
    },
    /// [`ManifestEdit::advertise`] of a capability already advertised.
    #[error("{0} is already advertised: nothing to add (§5.1)")]
    AlreadyAdvertised(Capability),
    /// [`ManifestEdit::withdraw`] of a capability the manifest does not advertise.
    #[error("{0} is not advertised, so it cannot be withdrawn: check the path (§5.1)")]
    NotAdvertised(Capability),
    /// [`ManifestEdit::withdraw`] of a capability a declared set uses: the host would disable
    /// the set (§6.4).
    #[error("{capability} is used by feature set(s) {}: withdrawing it would disable them (§6.4); remove them or change their uses first", quoted(feature_sets))]
    InUse {
        /// The capability.
        capability: Capability,
        /// The sets whose `uses` names it.
        feature_sets: Vec<String>,
    },
    /// [`ManifestEdit::withdraw`] of a capability a more specific advertised one implies
    /// (`inferenceRequest` while `inferenceRequest.streaming` is advertised, §5.1).
    #[error("{capability} cannot be withdrawn while {implied_by} is advertised (§5.1 nests it beneath); withdraw {implied_by} first")]
    Implied {
        /// The capability.
        capability: Capability,
        /// The advertised capability beneath it.
        implied_by: Capability,
    },
    /// `tools` lives in MCP's `capabilities.tools`, not in the manifest (§5.1).
    #[error("tools is advertised by MCP's capabilities.tools, not by the MCPL manifest; register or remove tools on the Server instead")]
    ToolsNotInManifest,
    /// The feature set is bound to a server registration that would silently stop working.
    #[error("feature set {name:?} is bound to {registration}, which would never run again once the set is gone; keep the set (its uses can change) or register the hook under another set")]
    BoundFeatureSet {
        /// The set.
        name: String,
        /// The registration, e.g. `on_before_inference`.
        registration: &'static str,
    },
    /// The manifest's `featureSets` member is not the 0.5 object form, so it cannot be edited
    /// by name (§6.1).
    #[error("the manifest's featureSets is not an object keyed by name (§6.1); replace it with set_manifest")]
    FeatureSetsNotObject,
    /// The edited manifest could not be digested (§17.2).
    #[error("the edited manifest was refused: {0}")]
    Digest(#[from] DigestError),
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn unknown_message(name: &str, declared: &[String]) -> String {
    match declared {
        [] => format!("feature set {name:?} is not declared; the manifest declares none"),
        [closest, ..] => format!(
            "feature set {name:?} is not declared; declared: {} (did you mean {closest:?}?)",
            quoted(declared)
        ),
    }
}

/// Whether `name` can name a feature set: see the module's readings.
pub fn is_feature_set_name(name: &str) -> bool {
    is_identifier(name) && !name.contains('*') && name.split('.').all(|s| !s.is_empty())
}

/// Whether `entry` can select feature sets in an `enabled` or `disabled` list: a feature-set
/// name, or one in which whole segments are `*` (§6.3's `memory.*`). Anything else selects
/// nothing.
pub fn is_feature_set_pattern(entry: &str) -> bool {
    !entry.is_empty()
        && entry
            .split('.')
            .all(|segment| segment == "*" || is_feature_set_name(segment))
}

/// A copy of the manifest under typed edit (§5.1, §6.1); see the [module docs](self).
#[derive(Debug)]
pub struct ManifestEdit<'a> {
    manifest: Map<String, Value>,
    advertised: CapabilitySet,
    bound: &'a BTreeMap<String, &'static str>,
}

impl<'a> ManifestEdit<'a> {
    pub(super) fn new(manifest: Value, bound: &'a BTreeMap<String, &'static str>) -> Self {
        let advertised = advertised(&manifest).capabilities;
        let manifest = match manifest {
            Value::Object(m) => m,
            // The tracker only installs objects (§17.2 refuses anything else).
            _ => Map::new(),
        };
        ManifestEdit {
            manifest,
            advertised,
            bound,
        }
    }

    pub(super) fn into_value(self) -> Value {
        Value::Object(self.manifest)
    }

    /// The declared feature-set names, in name order.
    pub fn feature_set_names(&self) -> Vec<String> {
        match self.manifest.get("featureSets") {
            Some(Value::Object(sets)) => sets.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The declaration of `name`, if declared.
    pub fn feature_set(&self, name: &str) -> Option<FeatureSetDeclaration> {
        let sets = self.manifest.get("featureSets")?.as_object()?;
        serde_json::from_value(sets.get(name)?.clone()).ok()
    }

    /// The capabilities the manifest advertises now (§5.1; without `tools`).
    pub fn advertised(&self) -> CapabilitySet {
        self.advertised
    }

    /// Declares feature set `name` (§6.1) and advertises what it uses (except `tools`).
    /// Refused when `name` is declared already or is not a feature-set name, or when `uses`
    /// is not a valid §6.2 list.
    pub fn add_feature_set(
        &mut self,
        name: impl Into<String>,
        declaration: FeatureSetDeclaration,
    ) -> Result<(), ManifestEditError> {
        let name = name.into();
        if !is_feature_set_name(&name) {
            return Err(ManifestEditError::InvalidName(name));
        }
        let uses = validated(&name, &declaration)?;
        let sets = self.sets_mut()?;
        if sets.contains_key(&name) {
            return Err(ManifestEditError::FeatureSetExists(name));
        }
        sets.insert(name, declaration_value(declaration));
        self.advertise_all(uses);
        Ok(())
    }

    /// Removes feature set `name` (with its `tagOntology`); what it used stays advertised.
    /// Refused when it is not declared or a server hook is bound to it.
    pub fn remove_feature_set(&mut self, name: &str) -> Result<(), ManifestEditError> {
        self.declared(name)?;
        if let Some(registration) = self.bound.get(name) {
            return Err(ManifestEditError::BoundFeatureSet {
                name: name.to_owned(),
                registration,
            });
        }
        self.sets_mut()?.remove(name);
        Ok(())
    }

    /// Replaces the `uses` of feature set `name` (§6.2) and advertises what it now uses
    /// (except `tools`). Refused when it is not declared or `uses` is empty.
    pub fn set_feature_set_uses(
        &mut self,
        name: &str,
        uses: &[Capability],
    ) -> Result<(), ManifestEditError> {
        self.declared(name)?;
        let probe = FeatureSetDeclaration::new("", uses);
        let set = validated(name, &probe)?;
        let uses_value = probe.uses.unwrap_or(Value::Null);
        if let Some(Value::Object(d)) = self.sets_mut()?.get_mut(name) {
            d.insert("uses".into(), uses_value);
        }
        self.advertise_all(set);
        Ok(())
    }

    /// Replaces the `description` of feature set `name`. Refused when it is not declared.
    pub fn set_feature_set_description(
        &mut self,
        name: &str,
        description: impl Into<String>,
    ) -> Result<(), ManifestEditError> {
        self.declared(name)?;
        if let Some(Value::Object(d)) = self.sets_mut()?.get_mut(name) {
            d.insert("description".into(), Value::String(description.into()));
        }
        Ok(())
    }

    /// Advertises `capability` (§5.1). Refused for `tools` and for one already advertised.
    pub fn advertise(&mut self, capability: Capability) -> Result<(), ManifestEditError> {
        if capability == Capability::Tools {
            return Err(ManifestEditError::ToolsNotInManifest);
        }
        if self.advertised.contains(capability) {
            return Err(ManifestEditError::AlreadyAdvertised(capability));
        }
        self.advertise_all(CapabilitySet::EMPTY.with(capability));
        Ok(())
    }

    /// Stops advertising `capability` (§5.1). Refused for `tools`, for one not advertised,
    /// for one a declared set uses, and for one implied by a more specific advertised path.
    pub fn withdraw(&mut self, capability: Capability) -> Result<(), ManifestEditError> {
        if capability == Capability::Tools {
            return Err(ManifestEditError::ToolsNotInManifest);
        }
        if !self.advertised.contains(capability) {
            return Err(ManifestEditError::NotAdvertised(capability));
        }
        if let Some(implied_by) = self
            .advertised
            .iter()
            .find(|c| *c != capability && c.is_at_or_below(capability.as_str()))
        {
            return Err(ManifestEditError::Implied {
                capability,
                implied_by,
            });
        }
        let users: Vec<String> = self
            .feature_set_names()
            .into_iter()
            .filter(|n| {
                self.feature_set(n)
                    .and_then(|d| d.validated_uses().ok())
                    .is_some_and(|u| u.contains(capability))
            })
            .collect();
        if !users.is_empty() {
            return Err(ManifestEditError::InUse {
                capability,
                feature_sets: users,
            });
        }
        self.set_advertised(self.advertised.without(capability));
        Ok(())
    }

    fn declared(&self, name: &str) -> Result<(), ManifestEditError> {
        let names = self.feature_set_names();
        if names.iter().any(|n| n == name) {
            return Ok(());
        }
        Err(ManifestEditError::UnknownFeatureSet {
            name: name.to_owned(),
            declared: closest_first(name, names.iter()),
        })
    }

    fn sets_mut(&mut self) -> Result<&mut Map<String, Value>, ManifestEditError> {
        match self
            .manifest
            .entry("featureSets")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(sets) => Ok(sets),
            _ => Err(ManifestEditError::FeatureSetsNotObject),
        }
    }

    fn advertise_all(&mut self, uses: CapabilitySet) {
        let next = self.advertised.union(uses.without(Capability::Tools));
        self.set_advertised(next);
    }

    /// Rewrites the top-level capability members whose advertised paths differ.
    fn set_advertised(&mut self, next: CapabilitySet) {
        let tree = advertisement_to_value(next);
        let roots: std::collections::BTreeSet<&str> = Capability::ALL
            .iter()
            .filter(|c| **c != Capability::Tools)
            .filter_map(|c| c.segments().next())
            .collect();
        for root in roots {
            let below: CapabilitySet = Capability::ALL
                .into_iter()
                .filter(|c| c.is_at_or_below(root))
                .collect();
            if self.advertised.intersection(below) == next.intersection(below) {
                continue;
            }
            match tree.get(root) {
                Some(v) => self.manifest.insert(root.to_owned(), v.clone()),
                None => self.manifest.remove(root),
            };
        }
        self.advertised = next;
    }
}

fn validated(
    name: &str,
    declaration: &FeatureSetDeclaration,
) -> Result<CapabilitySet, ManifestEditError> {
    declaration
        .validated_uses()
        .map_err(|reason| ManifestEditError::InvalidUses {
            name: name.to_owned(),
            reason,
        })
}

fn declaration_value(declaration: FeatureSetDeclaration) -> Value {
    serde_json::to_value(declaration).unwrap_or(Value::Null)
}

/// `declared`, closest to `name` first (Levenshtein distance over chars, then name order), so
/// a typo's intended name leads the list.
pub(crate) fn closest_first<'a>(
    name: &str,
    declared: impl Iterator<Item = &'a String>,
) -> Vec<String> {
    let mut ranked: Vec<(usize, &String)> = declared.map(|d| (edit_distance(name, d), d)).collect();
    ranked.sort();
    ranked.into_iter().map(|(_, d)| d.clone()).collect()
}

/// The Levenshtein distance between `a` and `b` (insertions, deletions, substitutions), in
/// O(|a|·|b|) time and O(|b|) memory; names are short.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            let cost = usize::from(ca != *cb);
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + cost);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("reminders.ctx", "reminders.context"), 4);
    }

    #[test]
    fn closest_declared_name_comes_first() {
        let declared: Vec<String> = ["alpha", "reminders.push", "reminders.context"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            closest_first("reminders.ctx", declared.iter()),
            ["reminders.context", "reminders.push", "alpha"]
        );
    }

    #[test]
    fn s6_3_feature_set_names() {
        for ok in ["a", "memory.recall", "x-y_z:1.b"] {
            assert!(is_feature_set_name(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "memory.*", "é", "a b"] {
            assert!(!is_feature_set_name(bad), "{bad}");
        }
    }
}
