//! `manifest::review::validate` — one manifest per finding code (§5.1, §6, §17.1, §17.2).
#![cfg(feature = "runtime")]

use mcpl::manifest::review::{
    extract_manifest, has_errors, is_initialize, validate, Finding, Severity,
};
use mcpl::manifest::revision;
use serde_json::{json, Value};

fn good() -> Value {
    json!({"version":"0.5","pushEvents":true,
           "featureSets":{"demo.push":{"description":"Push","uses":["pushEvents"]}}})
}

fn only(manifest: &Value, code: &str) -> Finding {
    let f = validate(manifest);
    let hits: Vec<_> = f.iter().filter(|x| x.code == code).cloned().collect();
    assert_eq!(hits.len(), 1, "expected one {code} in {f:?}");
    hits[0].clone()
}

#[test]
fn s17_2_clean_manifest_has_no_findings() {
    let mut m = good();
    assert!(validate(&m).is_empty(), "{:?}", validate(&m));
    let r = revision(&m).unwrap();
    m["revision"] = json!(r);
    assert!(validate(&m).is_empty());
}

#[test]
fn s6_4_invalid_uses_per_feature_set() {
    let m = json!({"version":"0.5","featureSets":{
        "a":{"description":"x","uses":[]},
        "b":{"description":"x","uses":["contextHooks.*"]},
        "c":{"description":"x"},
        "ok":{"description":"x","uses":["tools"]}}});
    let f = validate(&m);
    let mut paths: Vec<_> = f
        .iter()
        .filter(|x| x.code == "invalid_uses")
        .map(|x| (x.path.clone(), x.severity, x.section))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            ("featureSets.a".into(), Severity::Error, "§6.4"),
            ("featureSets.b".into(), Severity::Error, "§6.4"),
            ("featureSets.c".into(), Severity::Error, "§6.4"),
        ]
    );
    assert!(has_errors(&f));
}

#[test]
fn s17_2_identifier_charset_reported_with_path() {
    let m = json!({"version":"0.5","featureSets":{"démo":{"description":"x","uses":["tools"]}}});
    let f = only(&m, "identifier_charset");
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.section, "§17.2");
    assert!(f.path.starts_with("featureSets"), "{}", f.path);
}

#[test]
fn s6_1_array_feature_sets_is_an_error() {
    let m =
        json!({"version":"0.5","featureSets":[{"name":"a","description":"x","uses":["tools"]}]});
    let f = only(&m, "legacy_feature_sets_array");
    assert_eq!(
        (f.severity, f.path.as_str()),
        (Severity::Error, "featureSets")
    );
}

#[test]
fn s6_2_missing_description_is_an_error() {
    let m = json!({"version":"0.5","featureSets":{"a":{"uses":["tools"]}}});
    let f = validate(&m);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].code, "missing_description");
    // §6.2's table: "Required: Yes" (App. B.2 lists it under `required`).
    assert_eq!(f[0].severity, Severity::Error);
    assert_eq!(f[0].path, "featureSets.a");
    assert!(has_errors(&f));
}

#[test]
fn s5_1_missing_version_is_an_error() {
    let f = only(&json!({"pushEvents":true}), "missing_version");
    assert_eq!((f.severity, f.path.as_str()), (Severity::Error, "version"));
}

#[test]
fn s5_1_other_version_is_an_error() {
    only(&json!({"version":"0.4"}), "unsupported_version");
    only(&json!({"version":5}), "unsupported_version");
}

#[test]
fn s17_2_revision_mismatch_is_an_error() {
    let mut m = good();
    m["revision"] = json!("sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4");
    let f = only(&m, "revision_mismatch");
    assert_eq!((f.severity, f.path.as_str()), (Severity::Error, "revision"));
}

#[test]
fn s17_2_malformed_revision_is_an_error() {
    for bad in [json!("v1.2.3"), json!(7), json!("sha256:short")] {
        let mut m = good();
        m["revision"] = bad;
        assert_eq!(only(&m, "revision_malformed").severity, Severity::Error);
    }
}

#[test]
fn s5_1_unknown_capability_members_are_info() {
    let m = json!({"version":"0.5","contextHooks":{"afterInference":true},"acme.vendor":{}});
    let f = validate(&m);
    let mut got: Vec<_> = f
        .iter()
        .map(|x| (x.code, x.severity, x.path.as_str()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("unrecognised_member", Severity::Info, "acme.vendor"),
            (
                "unrecognised_member",
                Severity::Info,
                "contextHooks.afterInference"
            ),
        ]
    );
}

#[test]
fn s5_1_legacy_channels_true_is_a_warning() {
    let f = only(
        &json!({"version":"0.4","channels":true}),
        "legacy_channels_true",
    );
    assert_eq!(
        (f.severity, f.path.as_str()),
        (Severity::Warning, "channels")
    );
}

#[test]
fn s5_1_non_boolean_capability_value_is_a_warning() {
    let f = only(
        &json!({"version":"0.5","pushEvents":"yes"}),
        "not_boolean_or_object",
    );
    assert_eq!(
        (f.severity, f.path.as_str()),
        (Severity::Warning, "pushEvents")
    );
}

#[test]
fn s5_1_tools_inside_mcpl_is_a_warning() {
    let f = only(&json!({"version":"0.5","tools":{}}), "tools_inside_mcpl");
    assert_eq!((f.severity, f.path.as_str()), (Severity::Warning, "tools"));
}

#[test]
fn s5_1_manifest_not_object_is_an_error() {
    for v in [json!([]), json!("x"), json!(null), json!(true)] {
        let f = validate(&v);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].code, f[0].severity),
            ("manifest_not_object", Severity::Error)
        );
    }
}

#[test]
fn s6_2_feature_set_not_object_and_malformed_feature_sets_are_errors() {
    only(
        &json!({"version":"0.5","featureSets":{"a":true}}),
        "feature_set_not_object",
    );
    only(
        &json!({"version":"0.5","featureSets":"x"}),
        "feature_sets_malformed",
    );
}

#[test]
fn finding_serialises_to_the_five_members() {
    let f = only(&json!({"pushEvents":true}), "missing_version");
    let v = serde_json::to_value(&f).unwrap();
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 5);
    assert_eq!(v["severity"], "error");
    assert_eq!(v["section"], "§5.1");
    assert_eq!(v["code"], "missing_version");
    assert!(v["message"].as_str().unwrap().contains("0.5"));
}

#[test]
fn s17_1_extract_manifest_from_initialize_result_or_bare() {
    let m = good();
    let init = json!({"protocolVersion":"2024-11-05","capabilities":{"tools":{},"experimental":{"mcpl":m}}});
    let (got, outer) = extract_manifest(&init).unwrap();
    assert_eq!(got, &m);
    assert_eq!(outer.unwrap()["tools"], json!({}));
    let (got, outer) = extract_manifest(&m).unwrap();
    assert_eq!((got, outer), (&m, None));
    let params =
        json!({"clientInfo":{"name":"h","version":"1"},"capabilities":{"experimental":{"mcpl":m}}});
    assert_eq!(extract_manifest(&params).unwrap().0, &m);
    assert!(
        extract_manifest(&json!({"protocolVersion":"x","capabilities":{"tools":{}}})).is_none()
    );
}

/// Issue #21: only a document with `protocolVersion`, `serverInfo` or `clientInfo` is an
/// `initialize`; a manifest with a vendor member named `capabilities` (or a bare MCP
/// `capabilities` object) is read as itself, not unwrapped.
#[test]
fn s17_1_vendor_capabilities_member_is_not_unwrapped() {
    let mut m = good();
    m["capabilities"] = json!({"experimental": {"mcpl": {"version": "0.5"}}});
    assert_eq!(extract_manifest(&m), Some((&m, None)));
    assert!(!is_initialize(&m));
    let caps = json!({"tools":{},"experimental":{"mcpl":good()}});
    assert_eq!(extract_manifest(&caps), Some((&caps, None)));
    let no_mcpl = json!({"version":"0.5","capabilities":{"tools":{}}});
    assert_eq!(extract_manifest(&no_mcpl), Some((&no_mcpl, None)));
}

fn with_facet(facet: Value) -> Value {
    let mut m = good();
    m["featureSets"]["demo.push"]["tagOntology"] =
        json!({"tags": {"demo:ping": {"desc": "A ping", "facet": facet}}});
    m
}

/// §16.4 / RFC-001 §5.1: a facet outside the five named ones is reported as info (the
/// manifest stays valid), with its path and the names to use instead.
#[test]
fn s16_4_unnamed_facet_is_info() {
    let m = with_facet(json!("origin"));
    let f = only(&m, "unnamed_facet");
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(f.section, "§16.4");
    assert_eq!(
        f.path,
        "featureSets.demo.push.tagOntology.tags.demo:ping.facet"
    );
    assert!(f.message.contains("\"origin\""), "{}", f.message);
    assert!(f
        .message
        .contains("addressing, sender, content, lifecycle, locus"));
    assert!(!has_errors(&validate(&m)));
}

/// Each of the five named facets passes; a different case is another facet.
#[test]
fn s16_4_named_facets_are_clean() {
    for facet in mcpl::tags::FACETS {
        let findings = validate(&with_facet(json!(facet)));
        assert!(findings.is_empty(), "{facet}: {findings:?}");
    }
    only(&with_facet(json!("Sender")), "unnamed_facet");
}

/// §16.4: a malformed ontology leaves the manifest valid (a hint catalog the host must
/// tolerate) but every part a host drops is a warning with its path: an ontology that is not
/// an object, wrong-typed members, a described name that is not a tag (§16.1), a `chat:`
/// name §16.2 does not reserve, a core tag redescribed (§16.3). Before, `validate` said
/// nothing about any of them.
#[test]
fn s16_4_malformed_ontology_parts_are_warnings() {
    let m = json!({"version":"0.5","pushEvents":true,"featureSets":{
        "a":{"description":"d","uses":["pushEvents"],"tagOntology":{
            "tags":{"mention":{"implies":"x:z"},"chat:dm":{"implies":["chat:ambient"]},
                    "a:ok":{"implies":"a:z"}},
            "keyed":{"k":{"values":5}},
            "coreTags":["chat:nope","mention","chat:dm"],
            "open":"yes"}},
        "b":{"description":"d","uses":["pushEvents"],"tagOntology":"everything"}}});
    let f = validate(&m);
    assert!(!has_errors(&f), "{f:?}");
    let at = |path: &str| {
        f.iter()
            .find(|x| x.path == path)
            .unwrap_or_else(|| panic!("no finding at {path} in {f:?}"))
    };
    for (path, code) in [
        ("featureSets.b.tagOntology", "ontology_not_object"),
        ("featureSets.a.tagOntology.tags.mention", "not_namespaced"),
        (
            "featureSets.a.tagOntology.tags.chat:dm",
            "core_tag_redescribed",
        ),
        ("featureSets.a.tagOntology.keyed.k.values", "not_array"),
        ("featureSets.a.tagOntology.coreTags.0", "reserved_namespace"),
        ("featureSets.a.tagOntology.coreTags.1", "not_namespaced"),
        ("featureSets.a.tagOntology.open", "not_boolean"),
    ] {
        let x = at(path);
        assert_eq!(x.code, code, "{x:?}");
        assert_eq!(x.severity, Severity::Warning, "{x:?}");
        assert_eq!(x.section, "§16.4", "{x:?}");
    }
    assert!(
        f.iter().any(|x| x
            .path
            .starts_with("featureSets.a.tagOntology.tags.a:ok.implies")),
        "{f:?}"
    );
    // `chat:dm` in coreTags is what §16.4 asks for: no finding of its own.
    assert!(!f
        .iter()
        .any(|x| x.path == "featureSets.a.tagOntology.coreTags.2"));
}

/// §16.4: a well-formed ontology gives no ontology finding.
#[test]
fn s16_4_well_formed_ontology_is_clean() {
    let m = json!({"version":"0.5","pushEvents":true,"featureSets":{
        "a":{"description":"d","uses":["pushEvents"],"tagOntology":{
            "tags":{"a:ping":{"desc":"x","facet":"content","implies":["a:pong"],
                               "stability":"experimental"}},
            "keyed":{"prio":{"desc":"p","values":["low","high"],"ordered":true}},
            "coreTags":["chat:dm","chat:mention"],
            "suggestedTreatment":[],
            "open":true}}}});
    assert!(validate(&m).is_empty(), "{:?}", validate(&m));
}

/// The reference server keeps to the named facets, so no peer refuses its manifest for it
/// (issue #21: it advertised `"facet": "origin"`).
#[cfg(feature = "runtime")]
#[test]
fn s16_4_reference_server_uses_named_facets() {
    let server = mcpl::reference::server();
    let snapshot = server.tracker().snapshot();
    let findings = mcpl::manifest::review::unnamed_facets(snapshot.manifest());
    assert!(findings.is_empty(), "{findings:?}");
    let m = snapshot.manifest();
    assert!(m["featureSets"]["ref.events"]["tagOntology"]["tags"]
        .as_object()
        .is_some_and(|t| !t.is_empty()));
}

/// A manifest of 100,000 members outside the vocabulary (an info finding each) and one
/// feature set without `uses` (an error, found after them): validation keeps at most
/// `review::MAX_FINDINGS` findings, then one `findings_not_kept` counting the rest, graded
/// as the worst of them, so the error still fails the manifest. Before, every finding was
/// kept, by `ManifestReview` too for the manifest in force: a 16 MiB manifest of such
/// members, some 300 MB estimated.
#[test]
fn findings_kept_are_bounded_and_the_rest_counted_at_their_worst_severity() {
    use mcpl::manifest::review::{ManifestReview, MAX_FINDINGS};
    const MEMBERS: usize = 100_000;
    let mut obj = serde_json::Map::new();
    obj.insert("version".into(), json!("0.5"));
    for i in 0..MEMBERS {
        obj.insert(format!("x{i}"), json!(0));
    }
    obj.insert("featureSets".into(), json!({"a": {"description": "x"}}));
    let m = Value::Object(obj);
    let f = validate(&m);
    let kept = MAX_FINDINGS;
    assert_eq!(kept, 256);
    assert_eq!(f.len(), kept + 1, "{} findings kept", f.len());
    let last = f.last().unwrap();
    assert_eq!(last.code, "findings_not_kept");
    assert_eq!(last.severity, Severity::Error, "{last:?}");
    assert_eq!(last.path, "");
    let dropped = MEMBERS + 1 - kept;
    assert!(
        last.message
            .starts_with(&format!("{dropped} more findings")),
        "{}",
        last.message
    );
    assert!(has_errors(&f));
    let (review, findings) =
        ManifestReview::initial(&m, None, ["*"], std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(findings, f);
    assert_eq!(review.findings(), &f[..]);
}

/// Reading an advertisement (`capability::advertised`, which a validation and
/// `ManifestReview::initial` each run) keeps at most `review::MAX_FINDINGS` members outside
/// the vocabulary as findings, at the top and nested alike, and counts the rest
/// (`Advertisement::unrecognised_not_kept`); its other findings (`tools` inside `mcpl`) are
/// kept past them. Before, it built one finding per such member (100,000 for this
/// manifest) before the validation kept 256 of them, and the review built them twice.
#[test]
fn an_advertisement_read_keeps_a_bounded_number_of_unknown_members() {
    use mcpl::capability::{advertised, FindingKind};
    use mcpl::manifest::review::MAX_FINDINGS;
    const MEMBERS: usize = 100_000;
    let mut obj = serde_json::Map::new();
    let mut nested = serde_json::Map::new();
    for i in 0..MEMBERS / 2 {
        // Before `tools` in the map's order.
        obj.insert(format!("a{i}"), json!(true));
        nested.insert(format!("a{i}"), json!(true));
    }
    obj.insert("channels".into(), Value::Object(nested));
    obj.insert("tools".into(), json!({}));
    obj.insert("pushEvents".into(), json!(true));
    let adv = advertised(&Value::Object(obj));
    let unknown = adv
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::UnrecognisedMember)
        .count();
    assert_eq!(unknown, MAX_FINDINGS, "{unknown} unknown members kept");
    assert_eq!(adv.unrecognised_not_kept, MEMBERS - MAX_FINDINGS);
    assert!(adv
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::ToolsInsideMcpl));
    // The vocabulary past them is still read.
    assert!(adv
        .capabilities
        .contains(mcpl::capability::Capability::PushEvents));
}
