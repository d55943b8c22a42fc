//! Manifest validation (§5.1, §6, §17.1, §17.2, App. B.3): findings, their severities and
//! sentences.

use super::*;

// Validation (§5.1, §6, §17.1, §17.2, App. B.3)

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
    pub(super) fn new(
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

/// `path: code: message`, the path `(manifest)` when empty: the line `mcpl validate` prints
/// after the severity and section, and `mcpl check` quotes in its details.
impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "(manifest)"
        } else {
            self.path.as_str()
        };
        write!(f, "{path}: {}: {}", self.code, self.message)
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// The members that make a document recognisably an MCP `initialize` result or params
/// (MCP requires `protocolVersion` in both, `serverInfo` in the result and `clientInfo` in
/// the params); a manifest defines none of them (§5.1, App. B.3).
pub const INITIALIZE_MARKERS: [&str; 3] = ["protocolVersion", "serverInfo", "clientInfo"];

/// Whether `doc` is recognisably an `initialize` result or params: an object carrying one of
/// [`INITIALIZE_MARKERS`]. Nothing else is taken for one, so a manifest with a vendor member
/// named `capabilities` or `experimental` is still a manifest.
pub fn is_initialize(doc: &Value) -> bool {
    doc.as_object()
        .is_some_and(|o| INITIALIZE_MARKERS.iter().any(|k| o.contains_key(*k)))
}

/// Finds the manifest in a JSON document: the `capabilities.experimental.mcpl` of a
/// document that [`is_initialize`], or else the document itself, never guessed from other
/// members (a bare MCP `capabilities` object is read as a manifest, like any object without
/// the markers). Returns the manifest and, for an `initialize`, its `capabilities` object.
/// `None` when an `initialize` carries no `capabilities.experimental.mcpl`.
pub fn extract_manifest(doc: &Value) -> Option<(&Value, Option<&Value>)> {
    if !is_initialize(doc) {
        return Some((doc, None));
    }
    let caps = doc.get("capabilities")?;
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
/// `initialize` and on every fetch (§17.5 step 1). Total: never fails, reports everything,
/// the first [`MAX_FINDINGS`] findings whole and the rest counted.
pub fn validate(manifest: &Value) -> Vec<Finding> {
    validate_with_digest(manifest).0
}

/// Most findings one validation keeps ([`validate`], and so [`ManifestReview`] for the
/// manifest in force): 256. Past it findings are only counted, and one more,
/// `findings_not_kept` (path empty), says how many of each severity were not kept; it takes
/// the worst severity among them and that finding's section, so [`has_errors`] reads the
/// same as over every finding. Before, each member outside the vocabulary was kept as a
/// finding: a 16 MiB manifest of them, estimated at some 300 MB per review.
pub const MAX_FINDINGS: usize = 256;

/// Findings as a validation keeps them: the first [`MAX_FINDINGS`], the rest counted.
#[derive(Default)]
struct Kept {
    out: Vec<Finding>,
    /// Findings not kept, by severity (error, warning, info).
    dropped: [usize; 3],
    /// The worst severity not kept, and the section of its first finding.
    worst: Option<(Severity, &'static str)>,
}

impl Kept {
    fn push(&mut self, f: Finding) {
        if self.out.len() < MAX_FINDINGS {
            self.out.push(f);
            return;
        }
        self.not_kept(f.severity, f.section, 1);
    }

    /// Counts `n` findings of `severity` (from `section`) not kept.
    fn not_kept(&mut self, severity: Severity, section: &'static str, n: usize) {
        let slot = match severity {
            Severity::Error => 0,
            Severity::Warning => 1,
            Severity::Info => 2,
        };
        self.dropped[slot] = self.dropped[slot].saturating_add(n);
        if self.worst.map_or(true, |(s, _)| severity < s) {
            self.worst = Some((severity, section));
        }
    }

    fn finish(mut self) -> Vec<Finding> {
        if let Some((severity, section)) = self.worst {
            let [e, w, i] = self.dropped;
            let n = e.saturating_add(w).saturating_add(i);
            self.out.push(Finding::new(
                "findings_not_kept",
                severity,
                section,
                "",
                format!(
                    "{n} more findings ({e} errors, {w} warnings, {i} info) past the first \
                     {MAX_FINDINGS} were not kept; fix those listed and validate again"
                ),
            ));
        }
        self.out
    }
}

impl Extend<Finding> for Kept {
    fn extend<T: IntoIterator<Item = Finding>>(&mut self, iter: T) {
        for f in iter {
            self.push(f);
        }
    }
}

/// [`validate`], also returning the recomputed revision (or the digest's refusal).
pub(super) fn validate_with_digest(
    manifest: &Value,
) -> (Vec<Finding>, Result<String, DigestError>) {
    let mut out = Kept::default();
    let Some(obj) = manifest.as_object() else {
        out.push(Finding::new(
            "manifest_not_object",
            Severity::Error,
            "§5.1",
            "",
            format!(
                "the manifest is a JSON {}; experimental.mcpl must be an object",
                crate::jsonrpc::json_type_name(manifest)
            ),
        ));
        let err = digest::revision(manifest);
        return (out.finish(), err);
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
        // Both are the author's, up to a whole message long: quoted cut (digest::clipped).
        out.push(Finding::new(
            "identifier_charset",
            Severity::Error,
            "§17.2",
            digest::clipped(path),
            format!(
                "{:?} is not a [A-Za-z0-9._:*-] identifier; rename it (the digest refuses it)",
                digest::clipped(value)
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

    // Advertisement (§5.1): the members outside the vocabulary past those it kept are
    // counted as the findings not kept they would be.
    let adv = capability::advertised(manifest);
    for f in &adv.findings {
        out.push(describe(f));
    }
    if adv.unrecognised_not_kept > 0 {
        let like = describe(&capability::Finding {
            kind: FindingKind::UnrecognisedMember,
            path: String::new(),
        });
        out.not_kept(like.severity, like.section, adv.unrecognised_not_kept);
    }

    // Feature sets (§6.1, §6.2, §6.4).
    for f in FeatureSets::from_mcpl(manifest).1 {
        out.push(describe(&f));
    }

    // Tag ontologies (§16.4, RFC-001 §5.1).
    out.extend(ontology_findings(manifest));
    out.extend(unnamed_facets(manifest));
    (out.finish(), recomputed)
}

/// One warning (§16.4) for every part of a feature set's `tagOntology` a host ignores as
/// malformed: an ontology that is not an object, a wrong-typed member, a described name that
/// is not a tag (§16.1), a `chat:` name §16.2 does not reserve, a core tag described rather
/// than listed in `coreTags`, a treatment rule that does not parse. The parts come from the
/// parser the host reads ontologies with ([`crate::tags::TagOntology::parse`]), so the tools
/// report exactly what a host drops.
///
/// Reading: §16.4 makes the ontology an open hint catalog that hosts must tolerate, so a
/// malformed part leaves the manifest valid (a warning, never an error); but the producer
/// meant something by it that no host will see. Used by [`validate`] and by `mcpl check`'s
/// `manifest.tag-ontology`.
pub fn ontology_findings(manifest: &Value) -> Vec<Finding> {
    let Some(sets) = manifest.get("featureSets").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (set, decl) in sets {
        let base = format!("featureSets.{set}.tagOntology");
        // A declaration that is not an object is reported with the feature sets (§6.1).
        if !decl.is_object() {
            continue;
        }
        match crate::tags::TagOntology::from_feature_set(decl) {
            Ok(None) => {}
            Err(e) => out.push(Finding::new(
                e.code(),
                Severity::Warning,
                "§16.4",
                base,
                format!("{e}; a host ignores the whole ontology"),
            )),
            Ok(Some((_, issues))) => {
                for i in issues {
                    out.push(Finding::new(
                        i.code,
                        Severity::Warning,
                        "§16.4",
                        format!("{base}.{}", i.path.replace('/', ".")),
                        format!("{}; a host ignores this part of the ontology", i.detail),
                    ));
                }
            }
        }
    }
    out
}

/// One `unnamed_facet` finding (info, §16.4) for every tag descriptor under
/// `featureSets.*.tagOntology.tags` whose string `facet` is not one of the five RFC-001 §5.1
/// names ([`crate::tags::FACETS`]). The manifest stays valid (§16.4: a hint catalog), but a
/// host reading the list as closed refuses the manifest. Used by [`validate`] and by
/// `mcpl check`, so both report the same rule. Non-object parts are skipped (other findings
/// report them).
pub fn unnamed_facets(manifest: &Value) -> Vec<Finding> {
    let Some(sets) = manifest.get("featureSets").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (set, decl) in sets {
        let Some(tags) = decl
            .get("tagOntology")
            .and_then(|o| o.get("tags"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (tag, descriptor) in tags {
            let Some(facet) = descriptor.get("facet").and_then(Value::as_str) else {
                continue;
            };
            if crate::tags::is_named_facet(facet) {
                continue;
            }
            out.push(Finding::new(
                "unnamed_facet",
                Severity::Info,
                "§16.4",
                format!("featureSets.{set}.tagOntology.tags.{tag}.facet"),
                format!(
                    "facet {facet:?} of tag `{tag}` is not one RFC-001 §5.1 names; use one of {} \
                     (a host that reads that list as closed refuses the whole manifest)",
                    crate::tags::FACETS.join(", ")
                ),
            ));
        }
    }
    out
}

/// The [`validate`] finding for one reading finding of the advertisement or of the feature
/// sets: its severity, section, path and sentence. `mcpl check` words its verdicts with it,
/// so a defect reads the same in both tools (issue #18).
pub fn describe(f: &capability::Finding) -> Finding {
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
        // §6.2's table marks `description` "Required: Yes", a string (App. B.2): an error,
        // though a host still reads the declaration (only `uses` decides validity, §6.4).
        FindingKind::MissingDescription => (
            Severity::Error,
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
