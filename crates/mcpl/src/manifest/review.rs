//! Host-side manifest review (§5.1, §6, §17.1–§17.8): validation findings, the diff of two
//! manifests, the per-connection review state that turns a fetched manifest into one change
//! receipt, and the §17.8 fetch limiter.
//!
//! Everything here is pure: time is passed in, nothing is fetched.
//!
//! # Paths in findings
//! A [`Finding`]'s `path` is **dotted**, relative to the manifest (the `experimental.mcpl`
//! object): `contextHooks.afterInference`, `featureSets.memory.retrieval` (a feature-set
//! name is appended verbatim, dots included), `featureSets[2]` for an entry of the 0.4 array
//! form. The empty string is the manifest itself.
//!
//! # Readings where the spec is silent (fail closed)
//! - A manifest the §17.2 digest refuses (`identifier_charset`) is treated like an unparseable
//!   one: on a fetch the previous manifest stands (§17.5 step 1); at `initialize` it grants
//!   nothing (nothing was learned that could be trusted).
//! - `tools` is sourced only from the outer MCP capabilities (§5.1), which `mcpl/manifest`
//!   does not return, so a fetch keeps the `tools` advertisement seen at `initialize`.
//! - A newly declared feature set that is available under the standing grant produces no
//!   impact (none of the §17.6 vocabulary fits and it widens nothing); one that is born
//!   unavailable is `feature-degraded`/`informational`. A feature set that disappears while
//!   available is `feature-degraded`/`applied` with reason `removed`.
//! - `ontology-reference-undeclared` is derived from the tags declared under
//!   `featureSets.*.tagOntology.tags` only (keyed families are not consulted); its subject
//!   is the tag that disappeared.

use serde::Serialize;
use serde_json::Value;

use super::digest::{self, DigestError};
use crate::capability::{self, FindingKind};
use crate::policy::FeatureSets;

// ---------------------------------------------------------------------------------------
// Validation (§5.1, §6, §17.1, §17.2, App. B.3)
// ---------------------------------------------------------------------------------------

/// How serious a validation finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Non-conforming: the manifest (or the named declaration) fails validation.
    Error,
    /// Tolerated, but the server should fix it.
    Warning,
    /// For the record (e.g. a vendor member that advertises nothing).
    Info,
}

/// One validation finding, serialised as `{ "code", "severity", "section", "path", "message" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable snake_case code (`invalid_uses`, `identifier_charset`, …).
    pub code: &'static str,
    /// Error, warning or info.
    pub severity: Severity,
    /// The spec section that decides it, e.g. `§6.2`.
    pub section: &'static str,
    /// Dotted path inside the manifest (see the module docs); empty for the manifest itself.
    pub path: String,
    /// One line saying what is wrong and what to do.
    pub message: String,
}

impl Finding {
    fn new(
        code: &'static str,
        severity: Severity,
        section: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            code,
            severity,
            section,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// Finds the manifest in a JSON document: a whole `initialize` result or params (with
/// `capabilities`), an MCP `capabilities` object (with `experimental`), or the manifest
/// itself. Returns the manifest and, when there was one, the outer `capabilities` object.
/// `None` when the document is a wrapper that carries no `experimental.mcpl`.
pub fn extract_manifest(doc: &Value) -> Option<(&Value, Option<&Value>)> {
    let caps = if let Some(caps) = doc.get("capabilities") {
        caps
    } else if doc.get("experimental").is_some() {
        doc
    } else {
        return Some((doc, None));
    };
    let mcpl = caps.get("experimental").and_then(|e| e.get("mcpl"))?;
    Some((mcpl, Some(caps)))
}

/// The only protocol version this library validates against (§5.1).
pub const VERSION: &str = "0.5";

/// Whether `s` has the App. B.3 revision shape `^sha256:[A-Za-z0-9_-]{43}$`.
pub fn is_well_formed_revision(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|b| {
        b.len() == 43
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    })
}

/// Validates a manifest (the `experimental.mcpl` object) exactly as a host does at
/// `initialize` and on every fetch (§17.5 step 1). Total: never fails, reports everything.
pub fn validate(manifest: &Value) -> Vec<Finding> {
    validate_with_digest(manifest).0
}

/// [`validate`], also returning the recomputed revision (or the digest's refusal).
fn validate_with_digest(manifest: &Value) -> (Vec<Finding>, Result<String, DigestError>) {
    let mut out = Vec::new();
    let Some(obj) = manifest.as_object() else {
        out.push(Finding::new(
            "manifest_not_object",
            Severity::Error,
            "§5.1",
            "",
            format!(
                "the manifest is a JSON {}; experimental.mcpl must be an object",
                json_type(manifest)
            ),
        ));
        let err = digest::revision(manifest);
        return (out, err);
    };

    // Version (§5.1, App. B.3).
    match obj.get("version") {
        None => out.push(Finding::new(
            "missing_version",
            Severity::Error,
            "§5.1",
            "version",
            "the manifest has no `version`; add \"version\": \"0.5\"",
        )),
        Some(Value::String(v)) if v == VERSION => {}
        Some(other) => out.push(Finding::new(
            "unsupported_version",
            Severity::Error,
            "§5.1",
            "version",
            format!("`version` is {other}; this host speaks MCPL \"0.5\""),
        )),
    }

    // Digest and revision (§17.2, App. B.3).
    let recomputed = digest::revision(manifest);
    if let Err(DigestError::IdentifierCharset { path, value }) = &recomputed {
        out.push(Finding::new(
            "identifier_charset",
            Severity::Error,
            "§17.2",
            path.clone(),
            format!(
                "{value:?} is not a [A-Za-z0-9._:*-] identifier; rename it (the digest refuses it)"
            ),
        ));
    }
    if let Some(rev) = obj.get("revision") {
        match rev.as_str().filter(|s| is_well_formed_revision(s)) {
            None => out.push(Finding::new(
                "revision_malformed",
                Severity::Error,
                "§17.2",
                "revision",
                "`revision` must be \"sha256:\" + 43 base64url characters; compute it per §17.2",
            )),
            Some(r) => {
                if let Ok(actual) = &recomputed {
                    if r != actual {
                        out.push(Finding::new(
                            "revision_mismatch",
                            Severity::Error,
                            "§17.2",
                            "revision",
                            format!(
                                "`revision` is {r} but the content digest is {actual}; \
                                 derive it from the content, never by hand"
                            ),
                        ));
                    }
                }
            }
        }
    }

    // Advertisement (§5.1).
    for f in capability::advertised(manifest).findings {
        out.push(from_capability_finding(&f));
    }

    // Feature sets (§6.1, §6.2, §6.4).
    for f in FeatureSets::from_mcpl(manifest).1 {
        out.push(from_capability_finding(&f));
    }
    (out, recomputed)
}

fn from_capability_finding(f: &capability::Finding) -> Finding {
    let p = f.path.clone();
    let (severity, section, message) = match f.kind {
        FindingKind::McplNotObject => (
            Severity::Error,
            "§5.1",
            "experimental.mcpl must be an object".to_owned(),
        ),
        FindingKind::ToolsInsideMcpl => (
            Severity::Warning,
            "§5.1",
            "`tools` inside experimental.mcpl advertises nothing; advertise tools in the outer \
             MCP capabilities"
                .to_owned(),
        ),
        FindingKind::UnrecognisedMember => (
            Severity::Info,
            "§5.1",
            format!("`{p}` is not part of the capability vocabulary and advertises nothing"),
        ),
        FindingKind::NotBooleanOrObject => (
            Severity::Warning,
            "§5.1",
            format!("`{p}` is neither a boolean nor an object, so it advertises nothing"),
        ),
        FindingKind::LegacyChannelsTrue => (
            Severity::Warning,
            "§5.1",
            "`channels: true` (0.4 shape) advertises every channels leaf; list the leaves you \
             implement"
                .to_owned(),
        ),
        FindingKind::LegacyFeatureSetsArray => (
            Severity::Error,
            "§6.1",
            "`featureSets` is an array (0.4 shape); use an object keyed by feature-set name"
                .to_owned(),
        ),
        FindingKind::FeatureSetsMalformed => (
            Severity::Error,
            "§6.1",
            "`featureSets` must be an object keyed by feature-set name".to_owned(),
        ),
        FindingKind::FeatureSetUnnamed => (
            Severity::Error,
            "§6.1",
            format!("`{p}` has no string `name` or repeats one; it was dropped"),
        ),
        FindingKind::FeatureSetNotObject => (
            Severity::Error,
            "§6.2",
            format!("feature set `{p}` is not an object; declare {{ description, uses }}"),
        ),
        FindingKind::MissingDescription => (
            Severity::Warning,
            "§6.2",
            format!("feature set `{p}` has no string `description`; add one"),
        ),
        FindingKind::InvalidUses => (
            Severity::Error,
            "§6.4",
            format!(
                "feature set `{p}` has an absent, empty or unrecognised `uses`; it is disabled \
                 with invalid_uses — list exact §6.2 capability paths"
            ),
        ),
    };
    let path = match f.kind {
        FindingKind::FeatureSetNotObject
        | FindingKind::MissingDescription
        | FindingKind::InvalidUses => format!("featureSets.{p}"),
        _ => p,
    };
    Finding::new(f.kind.code(), severity, section, path, message)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
