//! The canonical manifest digest of §17.2.
//!
//! `revision = "sha256:" + base64url_unpadded(SHA-256(JCS(manifest_without_revision)))`.
//!
//! The three steps are exposed separately ([`canonical_json`], [`sha256_hex`],
//! [`revision_of_canonical`]) so that a conformance failure localises to canonicalisation,
//! hashing or encoding. [`revision`] runs all three. The manifest rules (root-only `revision`
//! strip, set semantics, identifier checks) are applied while writing, without copying the
//! manifest.
//!
//! Readings where §17.2 is silent, each resolved fail-closed and documented here:
//! - Identifier positions are those §17.2 lists: every root member name other than
//!   `version`, `revision` and `featureSets` and every object member name at any depth
//!   beneath such a capability member (through arrays too), feature-set names, `uses`,
//!   `coreTags`, `tags` keys, `implies`, `keyed` keys and `values`, rule matchers. A tag's
//!   `facet` is not among them: the conformance file's `identifierPositions` adds
//!   `tags.*.facet` as its own fail-closed reading, but §17.2 names the only refusal and its
//!   positions, so a `facet` is hashed as any string (a digest that refused it would make a
//!   host grant that server nothing where other implementations digest it).
//! - In list-valued identifier positions (`keyed.*.values`, `suggestedTreatment` matchers)
//!   every *string* element is checked; non-string elements are hashed verbatim. A
//!   set-declared array with any non-string member is hashed verbatim with no check at all
//!   (§17.2 second totality corollary).
//! - `suggestedTreatment.*` means every element of the rule list (or every member value, if a
//!   non-conforming server sent an object).

use super::jcs;
use base64::Engine;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Why a manifest digest could not be computed (§17.2). The only refusals are these two.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// An identifier position held an empty string or a character outside `[A-Za-z0-9._:*-]`.
    #[error("identifier_charset: {} at {} is not a non-empty [A-Za-z0-9._:*-] identifier; rename it with letters, digits and . _ : * - only (§17.2)", format!("{:?}", clipped(.value)), clipped(.path))]
    IdentifierCharset {
        /// Dotted path of the offending position (`featureSets.demo.uses[2]`, `channels.#key`).
        path: String,
        /// The offending identifier as received.
        value: String,
    },
    /// The manifest was not a JSON object.
    #[error("manifest_not_object: the manifest is a JSON {found}, not an object; pass the experimental.mcpl object itself (§5.1, §17.2)")]
    ManifestNotObject {
        /// The JSON type that was found instead (`array`, `string`, …).
        found: &'static str,
    },
}

/// `text` cut to [`crate::session::DIAGNOSTIC_TEXT_BYTES`] with its length said: an
/// identifier (and the path naming it) is the manifest author's, up to a whole message long,
/// and an error quoting it whole is no clearer for it.
pub(crate) fn clipped(text: &str) -> String {
    let mut s = text.to_owned();
    crate::session::clip_text(&mut s);
    s
}

impl DigestError {
    /// The stable error code, as used in the conformance file's `errorCodes`.
    pub fn code(&self) -> &'static str {
        match self {
            DigestError::IdentifierCharset { .. } => "identifier_charset",
            DigestError::ManifestNotObject { .. } => "manifest_not_object",
        }
    }
}

/// The three intermediate results of a §17.2 digest, kept apart for diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestDigest {
    /// The canonical JSON text (JCS after stripping `revision` and applying set semantics).
    pub canonical: String,
    /// Lowercase hex of SHA-256 over the canonical text's UTF-8 bytes.
    pub sha256_hex: String,
    /// The `sha256:<base64url unpadded>` revision.
    pub revision: String,
}

/// Returns true when `s` is a non-empty run of `[A-Za-z0-9._:*-]` (§17.2 identifier charset).
#[inline]
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty() && !jcs::any_word(s.as_bytes(), |w| !word_is_identifier(w))
}

/// Whether all eight bytes of `w` are in `[A-Za-z0-9._:*-]`, by SWAR range tests (identifiers
/// are checked on every digest; this looks at eight bytes per step instead of one).
#[inline]
const fn word_is_identifier(w: u64) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    if w & HI != 0 {
        return false;
    }
    // Every byte is below 0x80 from here, so `x + (0x80 - c)` stays within its byte and its
    // top bit says `x >= c`.
    const fn ge(x: u64, c: u8) -> u64 {
        x.wrapping_add(LO * (0x80 - c as u64)) & HI
    }
    const fn within(x: u64, lo: u8, hi: u8) -> u64 {
        ge(x, lo) & !ge(x, hi + 1)
    }
    // `| 0x20` folds A-Z onto a-z and maps nothing else into a-z.
    let letter = within(w | (LO * 0x20), b'a', b'z');
    let digit_or_colon = within(w, b'0', b':');
    let dash_or_dot = within(w, b'-', b'.');
    let star = within(w, b'*', b'*');
    let underscore = within(w, b'_', b'_');
    (letter | digit_or_colon | dash_or_dot | star | underscore) == HI
}

/// Sorts a set-valued array as §17.2 requires: duplicates removed, ascending UTF-8 bytes.
pub fn sort_set<S: AsRef<str>>(items: &[S]) -> Vec<String> {
    let mut v: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    set_order(&mut v);
    v.into_iter().map(str::to_owned).collect()
}

/// The one §17.2 set order, used by the digest and by [`sort_set`] (so the conformance
/// file's sort vectors exercise what the digest does): ascending UTF-8 bytes, no repeats.
fn set_order(v: &mut Vec<&str>) {
    v.sort_unstable();
    v.dedup();
}

/// The canonical JSON of a manifest (§17.2): `revision` stripped at the root, set semantics
/// applied at the three set positions, identifiers checked, then RFC 8785.
pub fn canonical_json(manifest: &Value) -> Result<String, DigestError> {
    let map = root_object(manifest)?;
    let mut w = Writer::new(true, 512);
    w.root(map, |_| true)?;
    Ok(w.out)
}

/// Lowercase hex SHA-256 of a canonical text's UTF-8 bytes.
pub fn sha256_hex(canonical: &str) -> String {
    let hash = Sha256::digest(canonical.as_bytes());
    let mut s = String::with_capacity(64);
    for b in hash {
        use fmt::Write;
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The `sha256:` revision of an already-canonical text (hash, then base64url unpadded).
pub fn revision_of_canonical(canonical: &str) -> String {
    encode_revision(&Sha256::digest(canonical.as_bytes()))
}

fn encode_revision(hash: &[u8]) -> String {
    let mut s = String::with_capacity(7 + 43);
    s.push_str("sha256:");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(hash, &mut s);
    s
}

/// The manifest revision of §17.2: `sha256:` + base64url_unpadded(SHA-256(canonical)).
pub fn revision(manifest: &Value) -> Result<String, DigestError> {
    Ok(revision_of_canonical(&canonical_json(manifest)?))
}

/// Canonical text, SHA-256 hex and revision of a manifest in one call.
pub fn digest(manifest: &Value) -> Result<ManifestDigest, DigestError> {
    let canonical = canonical_json(manifest)?;
    let hash = Sha256::digest(canonical.as_bytes());
    let sha256_hex = hash.iter().fold(String::with_capacity(64), |mut s, b| {
        use fmt::Write;
        let _ = write!(s, "{b:02x}");
        s
    });
    Ok(ManifestDigest {
        revision: encode_revision(&hash),
        sha256_hex,
        canonical,
    })
}

/// The digest of an arbitrary JSON value: `sha256:` + base64url_unpadded(SHA-256(JCS(value)))
/// with no manifest rules (no strip, no set semantics, no identifier check). Never fails.
///
/// Reading: §16.5/§17.5 bind ontology acceptance to "a revision", and §17.10 asks hosts to
/// keep an "accepted ontology digest" without defining it. For a `tagOntology` use
/// [`ontology_digest`], which applies the same set semantics the manifest digest does, so the
/// ontology digest is unchanged exactly when the manifest digest would not see a change in it.
pub fn value_digest(value: &Value) -> String {
    revision_of_canonical(&jcs::to_string(value))
}

/// The digest of one feature set's `tagOntology` value, canonicalised exactly as it is inside
/// the manifest digest (`coreTags` and `tags.*.implies` as sets, identifiers checked), so two
/// orderings of the same ontology share a digest. Same `sha256:` encoding as [`revision`].
pub fn ontology_digest(tag_ontology: &Value) -> Result<String, DigestError> {
    let mut w = Writer::new(true, 256);
    w.tag_ontology(tag_ontology, &Path::Root("tagOntology"))?;
    Ok(revision_of_canonical(&w.out))
}

pub(crate) fn root_object(manifest: &Value) -> Result<&Map<String, Value>, DigestError> {
    match manifest {
        Value::Object(m) => Ok(m),
        other => Err(DigestError::ManifestNotObject {
            found: type_name(other),
        }),
    }
}

use crate::jsonrpc::json_type_name as type_name;

/// A position in the manifest, rendered to a dotted string only when an error needs it, so
/// the hot path never allocates for paths.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    /// The top of the walk, with a name prefix (empty for the manifest root).
    Root(&'a str),
    /// A named member of the parent.
    Member(&'a Path<'a>, &'a str),
    /// An array element of the parent.
    Index(&'a Path<'a>, usize),
    /// The member names of the parent object (`#key`).
    Key(&'a Path<'a>),
}

impl Path<'_> {
    fn render(&self) -> String {
        let mut s = String::new();
        self.render_into(&mut s);
        s
    }

    fn render_into(&self, s: &mut String) {
        match self {
            Path::Root(name) => s.push_str(name),
            Path::Member(parent, name) => {
                parent.render_into(s);
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(name);
            }
            Path::Index(parent, i) => {
                parent.render_into(s);
                s.push_str(&format!("[{i}]"));
            }
            Path::Key(parent) => {
                parent.render_into(s);
                s.push_str(".#key");
            }
        }
    }
}

/// The refusal for a non-identifier, built out of line: the hot path only checks.
#[cold]
#[inline(never)]
fn charset_error(value: &str, path: &Path<'_>) -> DigestError {
    DigestError::IdentifierCharset {
        path: path.render(),
        value: value.to_owned(),
    }
}

/// Streaming writer for the manifest canonical form. With `check` off it never fails (used by
/// the domain diff, which must be total over manifests that would fail the digest).
pub(crate) struct Writer {
    pub(crate) out: String,
    check: bool,
}

impl Writer {
    pub(crate) fn new(check: bool, capacity: usize) -> Self {
        Writer {
            out: String::with_capacity(capacity),
            check,
        }
    }

    /// Writes a string that has just passed [`Writer::ident`]: with checking on it is an
    /// identifier, whose characters never need escaping, so the escape scan is skipped.
    #[inline]
    fn checked_string(&mut self, s: &str) {
        if self.check {
            self.out.reserve(s.len() + 2);
            self.out.push('"');
            self.out.push_str(s);
            self.out.push('"');
        } else {
            jcs::write_string(&mut self.out, s);
        }
    }

    #[inline]
    fn ident(&self, value: &str, path: &Path<'_>) -> Result<(), DigestError> {
        if self.check && !is_identifier(value) {
            return Err(charset_error(value, path));
        }
        Ok(())
    }

    /// Writes an object in JCS member order; `f` writes each member's value (after the name
    /// is written), returning `Ok(None)` to drop the member again.
    fn object<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        f: impl FnMut(&mut Self, &'v str, &'v Value) -> Result<Option<()>, DigestError>,
    ) -> Result<(), DigestError> {
        self.object_named(map, None, f)
    }

    /// [`Writer::object`] for an object whose member names are identifier positions: each
    /// name is checked (its error path is `parent.name`) before anything else of the member,
    /// then written without the escape scan (an identifier never needs escaping).
    fn ident_object<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        parent: &Path<'_>,
        f: impl FnMut(&mut Self, &'v str, &'v Value) -> Result<Option<()>, DigestError>,
    ) -> Result<(), DigestError> {
        self.object_named(map, Some(parent), f)
    }

    fn object_named<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        ident_parent: Option<&Path<'_>>,
        mut f: impl FnMut(&mut Self, &'v str, &'v Value) -> Result<Option<()>, DigestError>,
    ) -> Result<(), DigestError> {
        self.out.push('{');
        let mut first = true;
        let mut result = Ok(());
        jcs::for_each_member_sorted(map, |name, member| {
            if result.is_err() {
                return;
            }
            let mark = self.out.len();
            if !first {
                self.out.push(',');
            }
            match ident_parent {
                Some(parent) if self.check => {
                    if let Err(e) = self.ident(name, &Path::Member(parent, name)) {
                        result = Err(e);
                        return;
                    }
                    self.checked_string(name);
                }
                _ => jcs::write_string(&mut self.out, name),
            }
            self.out.push(':');
            match f(self, name, member) {
                Ok(Some(())) => first = false,
                Ok(None) => self.out.truncate(mark),
                Err(e) => result = Err(e),
            }
        });
        result?;
        self.out.push('}');
        Ok(())
    }

    /// Writes the root object minus `revision`, keeping only members `keep` accepts.
    pub(crate) fn root(
        &mut self,
        map: &Map<String, Value>,
        keep: impl Fn(&str) -> bool,
    ) -> Result<(), DigestError> {
        let root = Path::Root("");
        self.object(map, |w, name, member| {
            if name == "revision" || !keep(name) {
                return Ok(None);
            }
            let path = Path::Member(&root, name);
            match name {
                "version" => jcs::write_value(&mut w.out, member),
                "featureSets" => w.feature_sets(member, false)?,
                _ => {
                    w.ident(name, &path)?;
                    w.capability(member, &path)?;
                }
            }
            Ok(Some(()))
        })
    }

    /// A capability subtree: every object member name at every depth is an identifier.
    fn capability(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        match v {
            Value::Object(map) => self.ident_object(map, path, |w, name, member| {
                let sub = Path::Member(path, name);
                w.capability(member, &sub)?;
                Ok(Some(()))
            }),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.capability(item, &Path::Index(path, i))?;
                }
                self.out.push(']');
                Ok(())
            }
            scalar => {
                jcs::write_value(&mut self.out, scalar);
                Ok(())
            }
        }
    }

    /// The `featureSets` member. Only the object-keyed shape gets set semantics and checks;
    /// anything else is hashed verbatim. With `omit_ontology`, `tagOntology` members of the
    /// feature sets are left out (the `featureSets` change domain, §17.1).
    pub(crate) fn feature_sets(
        &mut self,
        v: &Value,
        omit_ontology: bool,
    ) -> Result<(), DigestError> {
        let Value::Object(map) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        let path = Path::Root("featureSets");
        self.ident_object(map, &path, |w, name, fs| {
            let sub = Path::Member(&path, name);
            w.feature_set(fs, &sub, omit_ontology)?;
            Ok(Some(()))
        })
    }

    fn feature_set(
        &mut self,
        v: &Value,
        path: &Path<'_>,
        omit_ontology: bool,
    ) -> Result<(), DigestError> {
        let Value::Object(map) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        self.object(map, |w, name, member| {
            let sub = Path::Member(path, name);
            match name {
                "tagOntology" if omit_ontology => return Ok(None),
                "uses" => w.set_array(member, &sub)?,
                "tagOntology" => w.tag_ontology(member, &sub)?,
                _ => jcs::write_value(&mut w.out, member),
            }
            Ok(Some(()))
        })
    }

    /// A `tagOntology` value (§16.4): `coreTags` and `tags.*.implies` are sets; `tags` and
    /// `keyed` keys, `keyed.*.values` and rule matchers are identifiers (§17.2; a `facet`
    /// is not, see the module docs).
    pub(crate) fn tag_ontology(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        let Value::Object(map) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        self.object(map, |w, name, member| {
            let sub = Path::Member(path, name);
            match name {
                "coreTags" => w.set_array(member, &sub)?,
                "tags" => w.keyed_objects(member, &sub, Self::tag_entry)?,
                "keyed" => w.keyed_objects(member, &sub, Self::keyed_entry)?,
                "suggestedTreatment" => w.rules(member, &sub)?,
                _ => jcs::write_value(&mut w.out, member),
            }
            Ok(Some(()))
        })
    }

    /// An object whose member names are identifiers and whose values `entry` writes.
    fn keyed_objects(
        &mut self,
        v: &Value,
        path: &Path<'_>,
        entry: fn(&mut Self, &Value, &Path<'_>) -> Result<(), DigestError>,
    ) -> Result<(), DigestError> {
        let Value::Object(map) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        self.ident_object(map, &Path::Key(path), |w, name, member| {
            entry(w, member, &Path::Member(path, name))?;
            Ok(Some(()))
        })
    }

    fn tag_entry(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        self.members(v, |w, name, member| {
            let sub = Path::Member(path, name);
            match (name, member) {
                ("implies", _) => w.set_array(member, &sub),
                _ => {
                    jcs::write_value(&mut w.out, member);
                    Ok(())
                }
            }
        })
    }

    fn keyed_entry(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        self.members(v, |w, name, member| match name {
            "values" => w.ident_list(member, &Path::Member(path, name)),
            _ => {
                jcs::write_value(&mut w.out, member);
                Ok(())
            }
        })
    }

    /// `suggestedTreatment` rule list: `tagsAny`/`tagsAll`/`tagsNone` are identifier lists.
    fn rules(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        fn rule(w: &mut Writer, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
            w.members(v, |w, name, member| match name {
                "tagsAny" | "tagsAll" | "tagsNone" => {
                    w.ident_list(member, &Path::Member(path, name))
                }
                _ => {
                    jcs::write_value(&mut w.out, member);
                    Ok(())
                }
            })
        }
        match v {
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    rule(self, item, &Path::Index(path, i))?;
                }
                self.out.push(']');
                Ok(())
            }
            Value::Object(_) => self.members(v, |w, name, member| {
                rule(w, member, &Path::Member(path, name))
            }),
            _ => {
                jcs::write_value(&mut self.out, v);
                Ok(())
            }
        }
    }

    /// Writes an object, delegating each member value to `f`; non-objects verbatim.
    fn members(
        &mut self,
        v: &Value,
        mut f: impl FnMut(&mut Self, &str, &Value) -> Result<(), DigestError>,
    ) -> Result<(), DigestError> {
        let Value::Object(map) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        self.object(map, |w, name, member| f(w, name, member).map(Some))
    }

    /// A list-valued identifier position: order kept, every string element checked.
    fn ident_list(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        if let Value::Array(items) = v {
            for (i, item) in items.iter().enumerate() {
                if let Value::String(s) = item {
                    self.ident(s, &Path::Index(path, i))?;
                }
            }
        }
        jcs::write_value(&mut self.out, v);
        Ok(())
    }

    /// A set-valued position: an all-string array is checked, deduped and sorted by UTF-8
    /// bytes; anything else is hashed verbatim (§17.2 totality).
    fn set_array(&mut self, v: &Value, path: &Path<'_>) -> Result<(), DigestError> {
        let Value::Array(items) = v else {
            jcs::write_value(&mut self.out, v);
            return Ok(());
        };
        let mut strings: Vec<&str> = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Value::String(s) => strings.push(s),
                _ => {
                    jcs::write_value(&mut self.out, v);
                    return Ok(());
                }
            }
        }
        for (i, s) in strings.iter().enumerate() {
            self.ident(s, &Path::Index(path, i))?;
        }
        set_order(&mut strings);
        self.out.push('[');
        for (i, s) in strings.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.checked_string(s);
        }
        self.out.push(']');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worked_example() -> Value {
        json!({"version":"0.5","pushEvents":true,"contextHooks":{"beforeInference":true},
         "inferenceLifecycle":true,"channels":{"register":true,"publish":true,"incoming":true},
         "featureSets":{"demo.messaging":{"description":"Demo",
           "uses":["channels.publish","channels.incoming","pushEvents","tools"]}}})
    }

    #[test]
    fn s17_2_worked_example_reproduces() {
        let d = digest(&worked_example()).unwrap();
        assert_eq!(
            d.canonical,
            r#"{"channels":{"incoming":true,"publish":true,"register":true},"contextHooks":{"beforeInference":true},"featureSets":{"demo.messaging":{"description":"Demo","uses":["channels.incoming","channels.publish","pushEvents","tools"]}},"inferenceLifecycle":true,"pushEvents":true,"version":"0.5"}"#
        );
        assert_eq!(
            d.sha256_hex,
            "fd86534b4875b6a4c031923a784942b3349013658dc77c610219a052f348f47e"
        );
        assert_eq!(
            d.revision,
            "sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4"
        );
        assert_eq!(revision(&worked_example()).unwrap(), d.revision);
    }

    #[test]
    fn s17_2_revision_stripped_at_root_only() {
        let mut m = worked_example();
        m["revision"] = json!("sha256:wrong");
        assert_eq!(revision(&m).unwrap(), revision(&worked_example()).unwrap());
        let nested = json!({"version":"0.5","x":{"revision":"r"}});
        assert!(canonical_json(&nested)
            .unwrap()
            .contains("\"revision\":\"r\""));
    }

    #[test]
    fn s17_2_identifier_charset_refusal_carries_path_and_value() {
        let m = json!({"version":"0.5","contextHooks":{"beforeInference":{"inject":{"before user":true}}}});
        let e = canonical_json(&m).unwrap_err();
        assert_eq!(e.code(), "identifier_charset");
        assert_eq!(
            e,
            DigestError::IdentifierCharset {
                path: "contextHooks.beforeInference.inject.before user".into(),
                value: "before user".into()
            }
        );
        let e = canonical_json(&json!({"featureSets":{"f":{"uses":["tools",""]}}})).unwrap_err();
        assert_eq!(
            e,
            DigestError::IdentifierCharset {
                path: "featureSets.f.uses[1]".into(),
                value: String::new()
            }
        );
    }

    /// §17.2: every identifier position refuses a non-identifier, each one on its own (so
    /// dropping the check at any one position fails here).
    #[test]
    fn s17_2_identifier_charset_refused_at_every_position() {
        let onto = |o: Value| json!({"version":"0.5","featureSets":{"f":{"uses":["pushEvents"],"tagOntology":o}}});
        for (m, bad) in [
            (json!({"version":"0.5","bad name":true}), "bad name"),
            (
                json!({"version":"0.5","channels":{"bad key":true}}),
                "bad key",
            ),
            (
                json!({"version":"0.5","channels":[{"bad key":1}]}),
                "bad key",
            ),
            (
                json!({"featureSets":{"bad set":{"uses":["tools"]}}}),
                "bad set",
            ),
            (
                json!({"featureSets":{"f":{"uses":["tools","bad use"]}}}),
                "bad use",
            ),
            (onto(json!({"coreTags":["bad id"]})), "bad id"),
            (onto(json!({"tags":{"v:bad tag":{}}})), "v:bad tag"),
            (
                onto(json!({"tags":{"v:t":{"implies":["v:bad imp"]}}})),
                "v:bad imp",
            ),
            (onto(json!({"keyed":{"bad k":{"values":["a"]}}})), "bad k"),
            (
                onto(json!({"keyed":{"k":{"values":["ok",1,"bad v"]}}})),
                "bad v",
            ),
            (
                onto(json!({"suggestedTreatment":[{"tagsAny":["x y"],"behavior":"b"}]})),
                "x y",
            ),
            (
                onto(json!({"suggestedTreatment":[{"tagsAll":["x y"],"behavior":"b"}]})),
                "x y",
            ),
            (
                onto(json!({"suggestedTreatment":[{"tagsNone":["x y"],"behavior":"b"}]})),
                "x y",
            ),
        ] {
            match canonical_json(&m) {
                Err(DigestError::IdentifierCharset { value, .. }) => assert_eq!(value, bad, "{m}"),
                other => panic!("{m}: expected identifier_charset for {bad:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn s17_2_identifier_charset_word_check_agrees_with_the_byte_rule() {
        // The SWAR word check against the plain per-byte rule, for every byte at every
        // offset of strings of 0..=20 bytes (short, exact-word and ragged-tail lengths).
        let byte_rule = |s: &[u8]| {
            !s.is_empty()
                && s.iter().all(|&b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'*' | b'-')
                })
        };
        for len in 0..=20usize {
            for at in 0..len.max(1) {
                for b in 0..=255u8 {
                    let mut v = b"abcdefghijklmnopqrstuvwxyz"[..len].to_vec();
                    if len > 0 {
                        v[at] = b;
                    }
                    let expected = byte_rule(&v);
                    match std::str::from_utf8(&v) {
                        Ok(s) => assert_eq!(is_identifier(s), expected, "{v:?}"),
                        Err(_) => assert!(!expected),
                    }
                }
            }
        }
        assert!(is_identifier("chat:from-human.x_y*Z09"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("before user"));
        assert!(!is_identifier("caf\u{e9}"));
    }

    /// §17.2 lists the identifier positions, and a tag's `facet` is not one of them (the
    /// conformance file's `identifierPositions` adds it): a facet that is no identifier is
    /// hashed as the string it is, never refused, as every other free position.
    #[test]
    fn s17_2_a_facet_is_not_an_identifier_position() {
        let m = json!({"version":"0.5","featureSets":{"f":{"uses":["pushEvents"],
            "tagOntology":{"tags":{"v:t":{"facet":"my facet \u{e9}"}}}}}});
        assert_eq!(
            canonical_json(&m).unwrap(),
            "{\"featureSets\":{\"f\":{\"tagOntology\":{\"tags\":{\"v:t\":{\"facet\":\"my facet \u{e9}\"}}},\"uses\":[\"pushEvents\"]}},\"version\":\"0.5\"}"
        );
        let named = json!({"version":"0.5","featureSets":{"f":{"uses":["pushEvents"],
            "tagOntology":{"tags":{"v:t":{"facet":"content"}}}}}});
        assert_ne!(revision(&m).unwrap(), revision(&named).unwrap());
    }

    #[test]
    fn s17_2_manifest_not_object() {
        assert_eq!(
            canonical_json(&json!([1])).unwrap_err(),
            DigestError::ManifestNotObject { found: "array" }
        );
        assert_eq!(
            revision(&Value::Null).unwrap_err().code(),
            "manifest_not_object"
        );
    }

    #[test]
    fn s17_2_set_semantics_only_for_all_string_arrays_in_object_shape() {
        let m = json!({"featureSets":{"f":{"uses":["tools",1,"tools"]}}});
        assert_eq!(
            canonical_json(&m).unwrap(),
            r#"{"featureSets":{"f":{"uses":["tools",1,"tools"]}}}"#
        );
        let m = json!({"featureSets":[{"name":"f","uses":["tools","pushEvents"]}]});
        assert_eq!(
            canonical_json(&m).unwrap(),
            r#"{"featureSets":[{"name":"f","uses":["tools","pushEvents"]}]}"#
        );
        let m = json!({"featureSets":{"f":{"tagOntology":{"coreTags":["b","a","a"],"tags":{"t":{"implies":["z","y"]}},"keyed":{"k":{"values":["z","y"]}}}}}});
        assert_eq!(
            canonical_json(&m).unwrap(),
            r#"{"featureSets":{"f":{"tagOntology":{"coreTags":["a","b"],"keyed":{"k":{"values":["z","y"]}},"tags":{"t":{"implies":["y","z"]}}}}}}"#
        );
    }

    #[test]
    fn s17_2_ontology_digest_ignores_set_order() {
        let a = json!({"coreTags":["chat:b","chat:a"],"tags":{"x:y":{"implies":["a","b"]}}});
        let b = json!({"tags":{"x:y":{"implies":["b","a","a"]}},"coreTags":["chat:a","chat:b"]});
        assert_eq!(ontology_digest(&a).unwrap(), ontology_digest(&b).unwrap());
        assert_ne!(value_digest(&a), value_digest(&b));
        assert_eq!(
            ontology_digest(&json!({"tags":{"bad key":{}}}))
                .unwrap_err()
                .code(),
            "identifier_charset"
        );
    }
}
