//! Pure judgements over what the server sent: manifest checks at `initialize`, and the shape
//! of push events, channel descriptors and manifest-change notifications. No I/O here, so
//! every rule is unit-tested against the spec's pinned cases.

use std::collections::{BTreeMap, BTreeSet};

use mcpl::capability::{self, Finding, FindingKind, Grant};
use mcpl::manifest;
use mcpl::policy::{FeatureSetStatus, FeatureSets, Receipt, ReceiptReport, UnavailableFeature};
use serde_json::Value;

use super::report::Status;

/// An outcome and its one-line reason.
pub type Verdict = (Status, String);

fn pass(d: impl Into<String>) -> Verdict {
    (Status::Pass, d.into())
}
fn fail(d: impl Into<String>) -> Verdict {
    (Status::Fail, d.into())
}

/// `initialize.version` (§5.1): the extension version must be the string `"0.5"`.
pub fn version(mcpl: &Value) -> Verdict {
    match mcpl.get("version") {
        Some(Value::String(v)) if v == "0.5" => pass("version 0.5"),
        Some(Value::String(v)) => fail(format!("server speaks MCPL {v}, not 0.5")),
        Some(other) => fail(format!("version is not a string: {other}")),
        None => fail("experimental.mcpl has no version member"),
    }
}

/// `initialize.advertisement-shape` (§5.1): members that advertise nothing or use the 0.4
/// shapes are tolerated by the host (read fail-closed) and reported as `warn`.
pub fn advertisement_shape(mcpl: &Value) -> Verdict {
    shape_verdict(mcpl, true)
}

/// `host.advertisement-shape` (§5.2: a host's advertisement mirrors the server's shape):
/// as [`advertisement_shape`], except that `channels: true` passes. Reading: §5.1 makes a
/// boolean `true` at any node shorthand for every leaf beneath it, and §5.2's own host
/// example writes `beforeInference: true` and `featureSets: true`, so a host saying
/// `channels: true` claims every channels leaf, a shape §5.1 allows. The server-side
/// warning stays for a server whose advertisement does not name MCPL 0.5 in `version`: its
/// `channels: true` claims leaves a 0.4 server never had, and what a server claims becomes
/// what a host grants (beside `version: "0.5"` the library reports nothing).
pub fn host_advertisement_shape(mcpl: &Value) -> Verdict {
    shape_verdict(mcpl, false)
}

/// The advertisement-shape verdict; `legacy_channels`: `channels: true` warns.
fn shape_verdict(mcpl: &Value, legacy_channels: bool) -> Verdict {
    let adv = capability::advertised(mcpl);
    let mut odd: Vec<String> = adv
        .findings
        .iter()
        .filter(|f| match f.kind {
            FindingKind::ToolsInsideMcpl
            | FindingKind::UnrecognisedMember
            | FindingKind::NotBooleanOrObject => true,
            FindingKind::LegacyChannelsTrue => legacy_channels,
            _ => false,
        })
        .map(said)
        .collect();
    if adv.unrecognised_not_kept > 0 {
        odd.push(format!(
            "{} more members outside the vocabulary not listed",
            adv.unrecognised_not_kept
        ));
    }
    if odd.is_empty() {
        pass(format!(
            "advertises {}",
            join_or_none(&adv.capabilities.sorted_paths())
        ))
    } else {
        (Status::Warn, odd.join("; "))
    }
}

/// `f` in the words `mcpl validate` prints for it ([`manifest::review::describe`]), so one
/// defect reads the same in both tools (issue #18 item 7).
fn said(f: &capability::Finding) -> String {
    manifest::review::describe(f).to_string()
}

/// The `mcpl validate` lines of `mcpl` with one of `codes`, when there are any.
fn validate_lines(mcpl: &Value, codes: &[&str]) -> Option<String> {
    let lines: Vec<String> = manifest::review::validate(mcpl)
        .iter()
        .filter(|f| codes.contains(&f.code))
        .map(ToString::to_string)
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

fn join_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

/// `manifest.feature-set-count` (§6.1): how many feature sets the manifest declares,
/// counted without building any ([`manifest::feature_set_count`]), against the bound a
/// library host reads ([`manifest::DEFAULT_MAX_FEATURE_SETS`], 1,024); the verdict, and
/// whether the count is within the bound. Past it the verdict is a `warn`, not a `fail`:
/// §6.1 sets no number, so the manifest may conform, but library hosts refuse such a
/// manifest whole at `initialize` (served as plain MCP,
/// `McpOnlyReason::TooManyFeatureSets`, nothing granted), and
/// the checker, acting as such a host, then judges no feature set of it (issue #20: a
/// manifest of 100,000 sets had taken the checker to 755 MB and 48 s, debug build).
pub fn feature_set_count(mcpl: &Value) -> (Verdict, bool) {
    feature_set_count_as(mcpl, false)
}

/// [`feature_set_count`] for a manifest fetched after `initialize` (§17.5): past the bound
/// the warning says what a library host does with such a manifest, which is not what it
/// does at `initialize`: it applies the manifest's removals only (what it no longer
/// advertises or declares, `ManifestReview::on_fetched_past_bound`), adds nothing of it,
/// and the manifest in force less those removals stands.
pub fn fetched_feature_set_count(mcpl: &Value) -> (Verdict, bool) {
    feature_set_count_as(mcpl, true)
}

/// [`feature_set_count`], or [`fetched_feature_set_count`] when `fetched`.
fn feature_set_count_as(mcpl: &Value, fetched: bool) -> (Verdict, bool) {
    let count = manifest::feature_set_count(mcpl);
    let limit = manifest::DEFAULT_MAX_FEATURE_SETS;
    if count <= limit {
        return (
            pass(format!(
                "{count} feature set(s), within the {limit} a library host reads"
            )),
            true,
        );
    }
    let past = format!(
        "{count} feature sets declared, past the {limit} a library host reads \
         (manifest::DEFAULT_MAX_FEATURE_SETS; §6.1 sets no number)"
    );
    let d = if fetched {
        format!(
            "{past}: a library host does not read this fetched manifest whole; it applies \
             only its removals (what it no longer advertises or declares, §17.5; \
             ManifestReview::on_fetched_past_bound), adds nothing of it, and the manifest in \
             force less those removals stands, so none of its feature sets was judged"
        )
    } else {
        format!(
            "{past}: library hosts refuse this manifest at initialize (served as plain MCP, \
             McpOnlyReason::TooManyFeatureSets) and grant nothing, so no feature set and no \
             MCPL behaviour was judged"
        )
    };
    ((Status::Warn, d), false)
}

/// `manifest.feature-sets-shape` (§6.1, §6.2): `featureSets` absent, or an object whose
/// members are objects with a string `description`. The 0.4 array form fails, and so does a
/// declaration without a string `description` (§6.2's table: "Required: Yes"; graded as
/// `mcpl validate` grades it, an error).
pub fn feature_sets_shape(mcpl: &Value, sets: &FeatureSets, findings: &[Finding]) -> Verdict {
    let bad: Vec<String> = findings
        .iter()
        .filter(|f| f.kind != FindingKind::InvalidUses)
        .map(said)
        .collect();
    if !bad.is_empty() {
        return fail(bad.join("; "));
    }
    match mcpl.get("featureSets") {
        None => pass("no featureSets declared"),
        Some(_) => pass(format!("{} feature set(s) declared", sets.sets.len())),
    }
}

/// `manifest.uses-valid` (§6.2, §6.4): every declaration's `uses` is non-empty and names
/// only vocabulary paths.
pub fn uses_valid(sets: &FeatureSets, findings: &[Finding]) -> Verdict {
    let bad: Vec<String> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::InvalidUses)
        .map(said)
        .collect();
    if bad.is_empty() {
        pass(format!(
            "{} declaration(s) with valid uses",
            sets.sets.len()
        ))
    } else {
        fail(bad.join("; "))
    }
}

/// `manifest.identifier-charset` (§17.2): the manifest can be digested, i.e. every
/// identifier position is a non-empty `[A-Za-z0-9._:*-]` run.
pub fn identifier_charset(mcpl: &Value) -> Verdict {
    match manifest::revision(mcpl) {
        Ok(_) => pass("all identifiers in charset"),
        Err(e) => fail(validate_lines(mcpl, &["identifier_charset"]).unwrap_or(e.to_string())),
    }
}

/// `manifest.revision-matches-digest` (§17.1): a `revision` member, when present, equals
/// the §17.2 digest. Absent is `skip` (the manifest is then fixed, §5.1); a manifest that
/// cannot be digested is judged by `manifest.identifier-charset` and skipped here.
pub fn revision_matches(mcpl: &Value) -> Verdict {
    let Some(claimed) = mcpl.get("revision") else {
        return (
            Status::Skip,
            "no revision member (manifest fixed for the connection, §5.1)".into(),
        );
    };
    let Some(claimed) = claimed.as_str() else {
        return fail(
            validate_lines(mcpl, &["revision_malformed"])
                .unwrap_or(format!("revision is not a string: {claimed}")),
        );
    };
    match manifest::revision(mcpl) {
        Ok(computed) if computed == claimed => pass(format!("revision {claimed}")),
        Ok(computed) => fail(
            validate_lines(mcpl, &["revision_mismatch", "revision_malformed"])
                .unwrap_or(format!("revision {claimed} but digest is {computed}")),
        ),
        Err(e) => (
            Status::Skip,
            format!("manifest cannot be digested ({})", e.code()),
        ),
    }
}

/// `manifest.tag-facets` (§16.4, RFC-001 §5.1): every tag descriptor's `facet` is one of
/// the five RFC-001 §5.1 names, by the rule `mcpl validate` applies
/// ([`manifest::review::unnamed_facets`]). Another facet is tolerated by §16.4 (a hint
/// catalog) and reported as info, as `validate` grades it: the check has no info status, so
/// it passes with `info: unnamed_facet …` in its detail rather than warning.
pub fn tag_facets(mcpl: &Value) -> Verdict {
    let unnamed = manifest::review::unnamed_facets(mcpl);
    if unnamed.is_empty() {
        return pass("every tag facet is one RFC-001 §5.1 names (or none is given)");
    }
    let items: Vec<String> = unnamed.iter().map(ToString::to_string).collect();
    pass(format!("info: {}", items.join("; ")))
}

/// `manifest.tag-ontology` (§16.4): every feature set's `tagOntology` is one a host reads
/// whole, by the rule `mcpl validate` applies ([`manifest::review::ontology_findings`]). A
/// malformed part is tolerated by the host and dropped (a hint catalog), so it warns, never
/// fails: what the producer meant by it reaches no host.
pub fn tag_ontology(mcpl: &Value) -> Verdict {
    let found = manifest::review::ontology_findings(mcpl);
    if found.is_empty() {
        return pass("every tagOntology is well formed (or none is given)");
    }
    // The detail names the first 16; a huge ontology of defects is counted, not listed.
    const LISTED: usize = 16;
    let mut items: Vec<String> = found.iter().take(LISTED).map(ToString::to_string).collect();
    if found.len() > LISTED {
        items.push(format!("{} more not listed", found.len() - LISTED));
    }
    (Status::Warn, items.join("; "))
}

/// Which §6.7 rule a receipt defect belongs to: `fallback` (refusal without a valid
/// fallback), `mode` (mode invented when nothing degraded) or `shape` (everything else).
pub fn receipt_defects(report: &ReceiptReport) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut shape, mut fallback, mut mode) = (Vec::new(), Vec::new(), Vec::new());
    for d in &report.defects {
        let text = format!("{} at {:?}", d.code, d.path);
        match d.code {
            "fallback_missing" | "fallback_invalid" => fallback.push(text),
            "mode_without_degradation" => mode.push(text),
            _ => shape.push(text),
        }
    }
    (shape, fallback, mode)
}

/// `policy.receipt-matches-derivation` (§6.4, §6.7): an accepted `receipt` against the
/// host's own derivation `statuses` under `grant`.
///
/// Readings where the spec is silent, failing closed:
/// - a set the derivation leaves unavailable that the receipt does not report **fails**:
///   the receipt says what the server will do (§6.7), so leaving it out claims the server
///   will run a set the grant disables — either it would act without authority, or the
///   receipt is false;
/// - a set reported unavailable that the derivation leaves available is allowed when the
///   entry names a further need the grant does not meet (§6.4 rule 3: testimony from the
///   server's knowledge of itself), and **warns** otherwise: declining a set is the
///   server's choice and widens nothing, but a host cannot tell why;
/// - entries naming undeclared sets are testimony about nothing the host derives: ignored.
pub fn receipt_against_derivation(
    receipt: &Receipt,
    statuses: &BTreeMap<String, FeatureSetStatus>,
    grant: &Grant,
) -> Verdict {
    let Receipt::Accepted {
        unavailable_features,
        ..
    } = receipt
    else {
        return (Status::Skip, "not an accepted receipt".into());
    };
    let reported: BTreeMap<&str, &UnavailableFeature> = unavailable_features
        .iter()
        .map(|u| (u.feature_set.as_str(), u))
        .collect();
    let mut unreported = Vec::new();
    let mut unexplained = Vec::new();
    let mut further = 0usize;
    for (name, status) in statuses {
        match (status, reported.get(name.as_str())) {
            (FeatureSetStatus::Unavailable { reason, missing }, None) => {
                let missing = match missing.sorted_paths() {
                    m if m.is_empty() => String::new(),
                    m => format!(", missing {}", m.join(", ")),
                };
                unreported.push(format!("{name} ({reason}{missing})"));
            }
            (FeatureSetStatus::Available, Some(entry)) => {
                let unmet = entry.missing_capabilities.iter().any(|path| {
                    path.parse::<capability::Capability>()
                        .map_or(true, |c| !grant.allows(c))
                });
                if unmet {
                    further += 1;
                } else {
                    unexplained.push(name.as_str());
                }
            }
            _ => {}
        }
    }
    if !unreported.is_empty() {
        return fail(format!(
            "the receipt does not report {}, which the grant disables (§6.4)",
            unreported.join(", ")
        ));
    }
    if !unexplained.is_empty() {
        return (
            Status::Warn,
            format!(
                "the receipt reports {} unavailable, which the grant allows, naming no further need it does not meet (§6.4 rule 3)",
                unexplained.join(", ")
            ),
        );
    }
    let disabled = statuses.values().filter(|s| !s.is_available()).count();
    let mut d = format!("reports the {disabled} set(s) the derivation disables");
    if further > 0 {
        d.push_str(&format!(
            ", and {further} more for further needs (§6.4 rule 3)"
        ));
    }
    pass(d)
}

/// A channel id shaped like the server's own `own` (same prefix, its last segment
/// changed) that is none of `taken`, for the unknown-channel probes (§14.6): a server that
/// parses its ids then reaches its registration check, instead of refusing the probe's
/// foreign shape first. The last segment follows the last `:`, `/`, `#` or `.`; an
/// all-digit segment (a numeric platform id) becomes as many `9`s (or `8`s), anything
/// else keeps its leading punctuation and becomes `mcpl-check-unknown`.
pub fn sibling_channel_id(own: &str, taken: &BTreeSet<String>) -> Option<String> {
    let cut = own.rfind([':', '/', '#', '.']).map_or(0, |i| i + 1);
    let (prefix, last) = own.split_at(cut);
    let candidates: Vec<String> = if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        ['9', '8']
            .iter()
            .map(|d| format!("{prefix}{}", d.to_string().repeat(last.len())))
            .collect()
    } else {
        let lead: String = last.chars().take_while(|c| !c.is_alphanumeric()).collect();
        ["mcpl-check-unknown", "mcpl-check-unknown-2"]
            .iter()
            .map(|s| format!("{prefix}{lead}{s}"))
            .collect()
    };
    candidates
        .into_iter()
        .find(|c| c != own && !taken.contains(c))
}

/// §16.1: `tags` is an array of strings, each a tag a producer may emit (namespaced,
/// well-formed, not inventing in the reserved `chat:` / `mcpl:` namespaces), read by the
/// host's own rule ([`mcpl::tags::TagSet::from_json`], whose issues the host reports as
/// `HostDiagnostic::TagIssue`): one defect per issue it finds.
fn tag_defects(tags: &Value, out: &mut Vec<String>) {
    use mcpl::tags::{TagError, TagSet};
    let (_, issues) = TagSet::from_json(Some(tags));
    for i in issues {
        out.push(match i.error {
            TagError::NotAString | TagError::NotAnArray => "tags is not an array of strings".into(),
            // The library's text names §16.1 itself in most cases: cited once.
            e => {
                let text = e.to_string();
                if text.contains("§16.1") {
                    text
                } else {
                    format!("{text} (§16.1)")
                }
            }
        });
    }
}

/// Defects of `push/event` params against §9.2: the host's own shape rule
/// ([`mcpl::protocol::push::push_event_defects`]), and the §16.1 tags, which the host reads
/// only after admission (§16.6) but a producer must still get right.
pub fn push_event_defects(params: Option<&Value>) -> Vec<String> {
    let mut out = mcpl::protocol::push::push_event_defects(params);
    if let Some(t) = params.and_then(|p| p.get("tags")) {
        tag_defects(t, &mut out);
    }
    out
}

/// Defects of `channels/incoming` params against §14.3 and §16.1: `messages` an array, each
/// message by the host's own rule ([`mcpl::protocol::channels::incoming_message_defects`]:
/// string `channelId`, non-empty string `messageId`, content a string or blocks, `author` an
/// object and `timestamp` a string when present), and its `tags` namespaced (read by the
/// host only after admission, §16.6, but a producer must still get them right).
pub fn incoming_defects(params: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(msgs) = params
        .and_then(|p| p.get("messages"))
        .and_then(Value::as_array)
    else {
        out.push("params.messages is not an array".into());
        return out;
    };
    for (i, m) in msgs.iter().enumerate() {
        let at = format!("messages[{i}]");
        out.extend(mcpl::protocol::channels::incoming_message_defects(m, &at));
        if let Some(t) = m.get("tags") {
            let mut tags = Vec::new();
            tag_defects(t, &mut tags);
            out.extend(tags.into_iter().map(|d| format!("{at}: {d}")));
        }
    }
    out
}

pub use mcpl::protocol::inference::request_defects as inference_request_defects;

/// Defects of a `context/beforeInference` result against §10.2 / §10.4 / §6.5, by the
/// host's rule ([`mcpl::protocol::hooks::result_defects`]). Whether the position is
/// *granted* is a separate check (`hooks.injection-positions`).
pub use mcpl::protocol::hooks::result_defects as before_inference_defects;

pub use mcpl::protocol::channels::descriptor_defects;

/// Defects of `mcpl/manifestChanged` params (§17.3), by the rule the library's hosts
/// report a malformed announcement by ([`mcpl::protocol::manifest::manifest_changed_defects`]).
pub use mcpl::protocol::manifest::manifest_changed_defects;

#[cfg(test)]
mod tests {
    use super::*;

    /// `feature_sets_shape` of a manifest, parsed as the driver parses it.
    fn shape_of(m: &Value) -> Verdict {
        let (sets, findings) = FeatureSets::from_mcpl(m);
        feature_sets_shape(m, &sets, &findings)
    }

    /// `uses_valid` of a manifest, parsed as the driver parses it.
    fn uses_of(m: &Value) -> Verdict {
        let (sets, findings) = FeatureSets::from_mcpl(m);
        uses_valid(&sets, &findings)
    }

    /// §16.4: a malformed tagOntology warns `manifest.tag-ontology` with each part a host
    /// drops (`mcpl validate`'s findings); a well-formed one passes; a flood of defects is
    /// counted past the first 16.
    #[test]
    fn s16_4_malformed_ontology_warns() {
        let bad = json!({"version":"0.5","pushEvents":true,"featureSets":{
            "a":{"description":"d","uses":["pushEvents"],
                 "tagOntology":{"coreTags":["chat:nope"],"open":"yes"}},
            "b":{"description":"d","uses":["pushEvents"],"tagOntology":"everything"}}});
        let (st, d) = tag_ontology(&bad);
        assert_eq!(st, Status::Warn, "{d}");
        for part in [
            "featureSets.a.tagOntology.coreTags.0: reserved_namespace",
            "featureSets.a.tagOntology.open: not_boolean",
            "featureSets.b.tagOntology: ontology_not_object",
        ] {
            assert!(d.contains(part), "{part} in {d}");
        }
        let good = json!({"version":"0.5","pushEvents":true,"featureSets":{
            "a":{"description":"d","uses":["pushEvents"],
                 "tagOntology":{"coreTags":["chat:dm"],"tags":{"a:x":{"facet":"content"}}}}}});
        assert_eq!(tag_ontology(&good).0, Status::Pass);
        let many: serde_json::Map<String, Value> =
            (0..40).map(|i| (format!("bare{i}"), json!({}))).collect();
        let flood = json!({"version":"0.5","pushEvents":true,"featureSets":{
            "a":{"description":"d","uses":["pushEvents"],"tagOntology":{"tags":many}}}});
        let (st, d) = tag_ontology(&flood);
        assert_eq!(st, Status::Warn);
        assert!(d.ends_with("24 more not listed"), "{d}");
    }

    /// §16.4 / RFC-001 §5.1: an unnamed facet is info (the check passes and says so, by the
    /// rule `mcpl validate` applies); the five named facets pass without a note.
    #[test]
    fn s16_4_unnamed_facet_is_reported_as_info() {
        let m = |facet: &str| {
            json!({"version": "0.5", "pushEvents": true, "featureSets": {"a.b": {
                "description": "d", "uses": ["pushEvents"],
                "tagOntology": {"tags": {"a:x": {"facet": facet}}}}}})
        };
        let (st, d) = tag_facets(&m("origin"));
        assert_eq!(st, Status::Pass);
        assert!(d.starts_with("info: "), "{d}");
        assert!(d.contains(": unnamed_facet: "), "{d}");
        assert!(
            d.contains("featureSets.a.b.tagOntology.tags.a:x.facet"),
            "{d}"
        );
        assert!(d.contains("\"origin\""), "{d}");
        for facet in mcpl::tags::FACETS {
            let (st, d) = tag_facets(&m(facet));
            assert_eq!(st, Status::Pass);
            assert!(!d.contains("unnamed_facet"), "{facet}: {d}");
        }
    }

    /// Issue #18 item 7: an advertisement or manifest finding reads in the check's detail
    /// exactly as `mcpl validate` prints it (`path: code: message`), for every finding
    /// validate reports on a manifest broken in each way the initialize checks judge.
    #[test]
    fn s5_1_s6_s17_findings_use_the_sentences_of_validate() {
        let manifests = [
            json!({"version": "0.5", "tools": true, "channels": true, "pushEvents": 3,
                   "vendorThing": {}}),
            json!({"version": "0.5", "featureSets": [{"name": "a", "uses": ["pushEvents"]}]}),
            json!({"version": "0.5", "pushEvents": true,
                   "featureSets": {"a": {"uses": ["pushEvents"]}, "b": 7,
                                   "c": {"description": "d", "uses": []}}}),
            json!({"version": "0.5", "featureSets": {"a b": {"description": "d",
                                                            "uses": ["pushEvents"]}}}),
            json!({"version": "0.5", "pushEvents": true,
                   "revision": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}),
            json!({"version": "0.5", "revision": "not-a-digest"}),
            json!({"version": "0.5", "pushEvents": true, "featureSets": {"a.b": {
                "description": "d", "uses": ["pushEvents"],
                "tagOntology": {"tags": {"a:x": {"facet": "origin"}}}}}}),
        ];
        for m in &manifests {
            let details: Vec<String> = [
                advertisement_shape(m),
                shape_of(m),
                uses_of(m),
                identifier_charset(m),
                revision_matches(m),
                tag_facets(m),
            ]
            .into_iter()
            .map(|(_, d)| d)
            .collect();
            let findings = manifest::review::validate(m);
            assert!(!findings.is_empty(), "{m}");
            for f in findings {
                let line = f.to_string();
                assert!(
                    details.iter().any(|d| d.contains(&line)),
                    "{m}: validate says {line:?}, no check detail does: {details:?}"
                );
            }
        }
    }

    /// §6.4, §6.7: the receipt against the library's own derivation.
    #[test]
    fn s6_4_receipts_are_cross_checked_against_the_derivation() {
        use mcpl::capability::Capability;
        use mcpl::policy::{derive, parse_receipt, Selection};
        let (sets, _) = FeatureSets::parse(&json!({
            "a.push": { "description": "a", "uses": ["pushEvents"] },
            "b.tools": { "description": "b", "uses": ["tools"] }
        }));
        let grant = Grant::from_set([Capability::Tools].into_iter().collect());
        let statuses = derive(&sets, &grant, &Selection::default());
        let judge = |receipt: Value| {
            let r = parse_receipt(&receipt).receipt.unwrap();
            receipt_against_derivation(&r, &statuses, &grant)
        };
        let entry = |set: &str, missing: &[&str]| json!({ "featureSet": set, "missingCapabilities": missing, "effect": "disabled" });
        // Exactly the derivation (what the library's own server writes).
        let (st, _) = judge(json!({ "accepted": true, "mode": "degraded",
            "unavailableFeatures": [entry("a.push", &["pushEvents"])] }));
        assert_eq!(st, Status::Pass);
        // Claims nothing degraded while a.push is disabled.
        let (st, d) = judge(json!({ "accepted": true }));
        assert_eq!(st, Status::Fail);
        assert!(
            d.contains("a.push (capability_denied, missing pushEvents)"),
            "{d}"
        );
        // A further need the grant does not meet (§6.4 rule 3): testimony, allowed.
        let (st, d) = judge(
            json!({ "accepted": true, "mode": "degraded", "unavailableFeatures": [
            entry("a.push", &["pushEvents"]), entry("b.tools", &["modelInfo"]) ] }),
        );
        assert_eq!(st, Status::Pass, "{d}");
        assert!(d.contains("1 more for further needs"), "{d}");
        // Reported unavailable though the grant allows it, naming nothing unmet: a warning.
        let (st, _) = judge(
            json!({ "accepted": true, "mode": "degraded", "unavailableFeatures": [
            entry("a.push", &["pushEvents"]), entry("b.tools", &["tools"]) ] }),
        );
        assert_eq!(st, Status::Warn);
        // Undeclared sets are ignored.
        let (st, _) = judge(
            json!({ "accepted": true, "mode": "degraded", "unavailableFeatures": [
            entry("a.push", &[]), entry("zzz", &[]) ] }),
        );
        assert_eq!(st, Status::Pass);
    }

    /// §14.6 probes: an id of the server's own shape, never one it registered.
    #[test]
    fn sibling_channel_ids_keep_the_prefix_and_change_the_last_segment() {
        let none = BTreeSet::new();
        let s = |own: &str| sibling_channel_id(own, &none).unwrap();
        assert_eq!(s("demo:#general"), "demo:#mcpl-check-unknown");
        assert_eq!(s("ref:lobby"), "ref:mcpl-check-unknown");
        assert_eq!(s("discord:123456789"), "discord:999999999");
        assert_eq!(s("discord:999"), "discord:888");
        assert_eq!(s("a/b/c"), "a/b/mcpl-check-unknown");
        assert_eq!(s("plain"), "mcpl-check-unknown");
        let taken: BTreeSet<String> = ["x:mcpl-check-unknown".to_owned()].into();
        assert_eq!(
            sibling_channel_id("x:y", &taken).as_deref(),
            Some("x:mcpl-check-unknown-2")
        );
    }

    /// §11.1's example is well-formed; each §11.2 field is judged by its table type.
    #[test]
    fn s11_2_inference_request_params() {
        let ok = json!({ "featureSet": "memory.consolidation", "conversationId": "conv_123",
            "stream": false, "messages": [ { "role": "user", "content": "Summarize" } ],
            "preferences": { "maxTokens": 500, "temperature": 0.7, "modelTier": "x" } });
        assert_eq!(inference_request_defects(Some(&ok)), Vec::<String>::new());
        let blocks = json!({ "featureSet": "a", "messages": [
            { "role": "assistant", "content": [ { "type": "text", "text": "hi" } ] } ] });
        assert_eq!(
            inference_request_defects(Some(&blocks)),
            Vec::<String>::new()
        );
        let bad = json!({ "stream": "yes", "conversationId": 3,
            "messages": [ 1, { "content": [ { "type": "text" } ] } ],
            "preferences": { "maxTokens": 1.5, "temperature": "hot" } });
        assert_eq!(
            inference_request_defects(Some(&bad)),
            [
                "featureSet missing or not a string",
                "messages[0] is not an object",
                "messages[1].role missing or not a string",
                "messages[1].content[0] text block without a string text (App. B.1)",
                "stream is not a boolean",
                "conversationId is not a string",
                "preferences.maxTokens is not a non-negative integer",
                "preferences.temperature is not a number",
            ]
        );
        assert_eq!(
            inference_request_defects(Some(&json!({ "featureSet": "a" }))),
            ["messages missing"]
        );
        assert_eq!(inference_request_defects(None), ["params is not an object"]);
    }
    use serde_json::json;

    #[test]
    fn s5_1_version_must_be_0_5() {
        assert_eq!(version(&json!({"version": "0.5"})).0, Status::Pass);
        assert_eq!(version(&json!({"version": "0.4"})).0, Status::Fail);
        assert_eq!(version(&json!({})).0, Status::Fail);
        assert_eq!(version(&json!({"version": 0.5})).0, Status::Fail);
    }

    #[test]
    fn s5_1_tools_inside_mcpl_advertises_nothing_and_warns() {
        assert_eq!(
            advertisement_shape(&json!({"version":"0.5","tools":true})).0,
            Status::Warn
        );
        assert_eq!(
            advertisement_shape(&json!({"version":"0.5","pushEvents":true})).0,
            Status::Pass
        );
    }

    #[test]
    fn s6_7_receipt_defects_are_sorted_by_rule() {
        let r = mcpl::policy::parse_receipt(&json!({"accepted": false}));
        let (shape, fallback, mode) = receipt_defects(&r);
        assert!(shape.is_empty() && mode.is_empty());
        assert_eq!(fallback.len(), 1);
        let r = mcpl::policy::parse_receipt(&json!({"accepted": true, "mode": "degraded"}));
        let (shape, fallback, mode) = receipt_defects(&r);
        assert!(shape.is_empty() && fallback.is_empty());
        assert_eq!(mode.len(), 1);
        let r = mcpl::policy::parse_receipt(&json!({"ok": true}));
        assert_eq!(receipt_defects(&r).0.len(), 1);
    }

    #[test]
    fn s6_1_array_feature_sets_fail_shape() {
        let m = json!({"version":"0.4","featureSets":[{"name":"a","description":"d","uses":["tools"]}]});
        assert_eq!(shape_of(&m).0, Status::Fail);
        assert_eq!(shape_of(&json!({"version":"0.5"})).0, Status::Pass);
        let m = json!({"featureSets":{"a":{"uses":["tools"]}}});
        let (st, d) = shape_of(&m);
        assert_eq!(
            st,
            Status::Fail,
            "§6.2: a missing description is an error, as in `mcpl validate`"
        );
        assert!(d.contains("missing_description"), "{d}");
    }

    #[test]
    fn s6_2_uses_must_be_vocabulary_paths() {
        let ok = json!({"featureSets":{"a":{"description":"d","uses":["pushEvents"]}}});
        assert_eq!(uses_of(&ok).0, Status::Pass);
        for uses in [
            json!([]),
            json!(["contextHooks.beforeInference"]),
            json!(null),
        ] {
            let m = json!({"featureSets":{"a":{"description":"d","uses":uses}}});
            assert_eq!(uses_of(&m).0, Status::Fail, "{uses}");
        }
    }

    #[test]
    fn s17_2_identifier_charset_and_s17_1_revision() {
        let m = json!({"version":"0.5","featureSets":{"bad name":{"description":"d","uses":["tools"]}}});
        assert_eq!(identifier_charset(&m).0, Status::Fail);
        assert_eq!(revision_matches(&m).0, Status::Skip);
        let mut good = json!({"version":"0.5","pushEvents":true});
        assert_eq!(revision_matches(&good).0, Status::Skip);
        let rev = manifest::revision(&good).unwrap();
        good["revision"] = json!(rev);
        assert_eq!(revision_matches(&good).0, Status::Pass);
        good["revision"] = json!("sha256:AAAA");
        assert_eq!(revision_matches(&good).0, Status::Fail);
    }

    #[test]
    fn s9_2_push_event_required_fields() {
        let ok = json!({"featureSet":"a","eventId":"e1","timestamp":"2026-01-01T00:00:00Z",
            "payload":{"content":[{"type":"text","text":"hi"}]}});
        assert!(push_event_defects(Some(&ok)).is_empty());
        let bad = json!({"featureSet":"a","payload":{"content":"hi"}});
        let d = push_event_defects(Some(&bad));
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(!push_event_defects(None).is_empty());
    }

    /// §9.2 / App. B.1: the timestamp is ISO 8601 and every block is one of B.1's four shapes;
    /// each defect is named with where it is.
    #[test]
    fn s9_2_push_event_timestamp_and_b1_blocks() {
        let p = json!({"featureSet":"a","eventId":"e1","timestamp":"1706005800",
            "payload":{"content":[
                {"type":"text","text":"hi"},
                {"type":"image","data":"iVBO"},
                {"type":"resource","resource":{"uri":"memory://x","text":"t"}},
                {"type":"resource_link","uri":"memory://x"}]}});
        let d = push_event_defects(Some(&p));
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(
            d[0].starts_with("timestamp \"1706005800\" is not ISO 8601"),
            "{d:?}"
        );
        assert!(d[1].starts_with("payload.content[1] image block has data but no mimeType"));
        assert!(d[2].starts_with("payload.content[2] resource block without a string uri"));
        assert!(
            d[3].starts_with("payload.content[3] type \"resource_link\""),
            "{d:?}"
        );
    }

    /// §16.1: un-namespaced tags, and tags invented in the reserved namespaces, are defects.
    #[test]
    fn s16_1_push_tags_a_producer_may_not_emit() {
        let mut p = json!({"featureSet":"a","eventId":"e1","timestamp":"2026-01-01T00:00:00Z",
            "payload":{"content":[{"type":"text","text":"hi"}]},
            "tags": ["discord:everyone", "chat:mention"]});
        assert!(push_event_defects(Some(&p)).is_empty());
        p["tags"] = json!(["mention", "chat:bogus", "mcpl:x", 3]);
        let d = push_event_defects(Some(&p));
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(d[0].contains("not namespaced"), "{d:?}");
    }

    /// Issue #24 item 3: a message's tags are judged by the host's own reading
    /// (`session::expand_tags`, one `TagIssue` per refused entry): the checker names a
    /// defect exactly where the host reports an issue, and none where it reports none.
    #[test]
    fn s16_1_tag_defects_are_the_hosts_tag_issues() {
        use mcpl::session::rules::expand_tags;
        use mcpl::session::HostDiagnostic;
        use mcpl::tags::AdmittedEvent;
        for tags in [
            json!(["discord:everyone", "chat:mention", "a:k=v"]),
            json!(["mention", "chat:bogus", "mcpl:x", 3, "a:", "a:b=c=d", "a:é"]),
            json!(null),
            json!("discord:x"),
            json!({"a": "b"}),
            json!([]),
        ] {
            let mut diags = Vec::new();
            let ev = AdmittedEvent {
                source: "s",
                feature_set: None,
                channel: None,
            };
            let _ = expand_tags(&mut diags, None, "push/event", Some(&tags), ev);
            let host = diags
                .iter()
                .filter(|d| matches!(d, HostDiagnostic::TagIssue { .. }))
                .count();
            let mut checker = Vec::new();
            tag_defects(&tags, &mut checker);
            assert_eq!(checker.len(), host, "{tags}: {checker:?} vs {diags:?}");
        }
    }

    #[test]
    fn s10_4_injection_shape() {
        let ok = json!({"featureSet":"a","contextInjections":[
            {"namespace":"n","position":"afterUser","content":"text"},
            {"namespace":"n","position":"system","content":[{"type":"text","text":"t"}]}]});
        assert!(before_inference_defects(&ok).is_empty());
        assert!(before_inference_defects(&json!({})).is_empty());
        let no_fs =
            json!({"contextInjections":[{"namespace":"n","position":"system","content":"x"}]});
        assert_eq!(before_inference_defects(&no_fs).len(), 1);
        let bad = json!({"featureSet":"a","contextInjections":[{"position":"system","content":7}]});
        assert_eq!(before_inference_defects(&bad).len(), 2);
    }

    #[test]
    fn s14_2_descriptor_shape() {
        assert!(
            descriptor_defects(&json!({"id":"ui","type":"ui","direction":"bidirectional"}))
                .is_empty()
        );
        assert_eq!(descriptor_defects(&json!({"id":"","type":"ui"})).len(), 1);
        assert_eq!(
            descriptor_defects(&json!({"id":"x","type":"ui","direction":"up"})).len(),
            1
        );
        assert_eq!(descriptor_defects(&json!("x")).len(), 1);
    }

    #[test]
    fn s17_3_manifest_changed_carries_no_payload() {
        let r = "sha256:QLXa7BigUFzNlw_IWPSqpYbDzdvBX7PVQIPS5lgnkaw";
        let ok = json!({"revision":r,"domains":["capabilities"]});
        assert!(manifest_changed_defects(Some(&ok)).is_empty());
        let bad = json!({"revision":r,"domains":["tools"],"added":["a"]});
        assert_eq!(manifest_changed_defects(Some(&bad)).len(), 2);
        let empty = json!({"revision":r,"domains":[]});
        assert_eq!(manifest_changed_defects(Some(&empty)).len(), 1);
        // App. B.3: the revision has the digest's shape.
        let hand_kept = json!({"revision":"sha256:x","domains":["capabilities"]});
        let d = manifest_changed_defects(Some(&hand_kept));
        assert!(d.len() == 1 && d[0].contains("App. B.3"), "{d:?}");
    }
}
