//! `mcpl validate` end to end: findings with severity and section (§5.1, §6, §17.2), the
//! `--json` shape, exit codes, accepted document shapes and bad input.

use serde_json::{json, Value};

mod common;
use common::{run, temp_file};

fn good() -> Value {
    json!({"version":"0.5","pushEvents":true,
      "featureSets":{"demo.push":{"description":"Push","uses":["pushEvents"]}}})
}

/// Runs `validate --json -` and returns (exit code, findings).
fn findings(m: &Value) -> (i32, Vec<Value>) {
    let o = run(&["validate", "--json", "-"], Some(&m.to_string()));
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 1, "only `findings`: {v}");
    (o.code, v["findings"].as_array().unwrap().clone())
}

fn find<'a>(fs: &'a [Value], code: &str) -> &'a Value {
    fs.iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no {code} finding in {fs:?}"))
}

#[test]
fn a_conforming_manifest_has_no_findings_and_exits_0() {
    let (code, fs) = findings(&good());
    assert_eq!(code, 0);
    assert_eq!(fs, Vec::<Value>::new());
    let o = run(&["validate", "-"], Some(&good().to_string()));
    assert_eq!(o.code, 0);
    assert_eq!(o.stdout, "0 errors, 0 warnings, 0 info\n");
}

#[test]
fn json_finding_has_exactly_the_five_fields() {
    let mut m = good();
    m["featureSets"]["demo.push"]["uses"] = json!(["nope"]);
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    let f = find(&fs, "invalid_uses");
    let obj = f.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "path", "section", "severity"]);
    assert_eq!(f["severity"], "error");
    assert_eq!(f["section"], "§6.4");
    assert_eq!(f["path"], "featureSets.demo.push");
    assert!(f["message"].as_str().unwrap().contains("demo.push"));
}

#[test]
fn s5_1_missing_and_non_0_5_version_are_errors() {
    let mut m = good();
    m.as_object_mut().unwrap().remove("version");
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    assert_eq!(find(&fs, "missing_version")["severity"], "error");

    m["version"] = json!("0.4");
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    let f = find(&fs, "unsupported_version");
    assert_eq!(f["section"], "§5.1");
    assert_eq!(f["path"], "version");
}

#[test]
fn s6_1_array_form_feature_sets_and_s6_2_missing_description() {
    let m = json!({"version":"0.5","pushEvents":true,
      "featureSets":[{"name":"x","uses":["pushEvents"]}]});
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    assert_eq!(
        find(&fs, "legacy_feature_sets_array")["path"],
        "featureSets"
    );
    let d = find(&fs, "missing_description");
    assert_eq!(d["section"], "§6.2");
    assert_eq!(d["path"], "featureSets.x");
}

#[test]
fn s17_2_identifier_charset_and_revision_mismatch() {
    let m =
        json!({"version":"0.5","contextHooks":{"beforeInference":{"inject":{"before user":true}}}});
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    let f = find(&fs, "identifier_charset");
    assert_eq!(f["section"], "§17.2");
    assert_eq!(f["path"], "contextHooks.beforeInference.inject.before user");

    // A well-formed revision that is not the content digest.
    let mut m = good();
    m["revision"] = json!("sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4");
    let (code, fs) = findings(&m);
    assert_eq!(code, 1);
    let f = find(&fs, "revision_mismatch");
    assert_eq!(f["path"], "revision");
    assert_eq!(f["section"], "§17.2");

    // The right revision (as `mcpl digest` computes it) is no finding.
    let rev = run(&["digest"], Some(&good().to_string())).stdout;
    let mut m = good();
    m["revision"] = json!(rev.trim());
    let (code, fs) = findings(&m);
    assert_eq!(code, 0, "{fs:?}");
}

#[test]
fn s5_1_unknown_member_is_info_and_does_not_fail() {
    let mut m = good();
    m["vendorThing"] = json!(true);
    let (code, fs) = findings(&m);
    assert_eq!(code, 0);
    let f = find(&fs, "unrecognised_member");
    assert_eq!(f["severity"], "info");
    assert_eq!(f["path"], "vendorThing");
}

/// §16.4 / RFC-001 §5.1: a facet outside the five named ones is info, naming them.
#[test]
fn s16_4_unnamed_facet_is_info_and_does_not_fail() {
    let mut m = good();
    m["featureSets"]["demo.push"]["tagOntology"] =
        json!({"tags": {"demo:hello": {"desc": "Hello", "facet": "origin"}}});
    let (code, fs) = findings(&m);
    assert_eq!(code, 0);
    let f = find(&fs, "unnamed_facet");
    assert_eq!(f["severity"], "info");
    assert_eq!(f["section"], "§16.4");
    assert_eq!(
        f["path"],
        "featureSets.demo.push.tagOntology.tags.demo:hello.facet"
    );
    assert!(f["message"].as_str().unwrap().contains("lifecycle"), "{f}");
    m["featureSets"]["demo.push"]["tagOntology"]["tags"]["demo:hello"]["facet"] = json!("sender");
    assert_eq!(findings(&m), (0, vec![]));
}

#[test]
fn readable_output_names_severity_section_path_and_code() {
    let m = json!({"version":"0.5","pushEvents":true,
      "featureSets":{"x":{"description":"X","uses":[]}}});
    let f = temp_file("invalid_uses.json", &m.to_string());
    let o = run(&["validate", &f], None);
    assert_eq!(o.code, 1);
    let line = o
        .stdout
        .lines()
        .find(|l| l.contains("invalid_uses"))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(line.starts_with("error"), "{line}");
    assert!(line.contains("§6.4"), "{line}");
    assert!(line.contains("featureSets.x: invalid_uses: "), "{line}");
    assert!(
        o.stdout.lines().last().unwrap().starts_with("1 errors"),
        "{}",
        o.stdout
    );
}

#[test]
fn initialize_result_is_validated_on_its_experimental_mcpl() {
    let result = json!({"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"pushEvents":true}}}});
    let (code, fs) = findings(&result);
    assert_eq!(code, 1);
    // The manifest lacks `version`; the wrapper's own members are not findings.
    assert_eq!(find(&fs, "missing_version")["path"], "version");
    assert!(
        fs.iter().all(|f| f["code"] != "unrecognised_member"),
        "{fs:?}"
    );
}

/// Issue #21: `{"version":"0.5","capabilities":{…}}` is a manifest with a vendor member,
/// validated as itself (it was refused as `no_manifest`); `--initialize` says otherwise and
/// then refuses it for having no `experimental.mcpl` (exit 2).
#[test]
fn s17_1_a_vendor_capabilities_member_is_validated_as_the_manifest() {
    let mut m = good();
    m["capabilities"] = json!({"tools":{}});
    let (code, fs) = findings(&m);
    assert_eq!(code, 0);
    let f = find(&fs, "unrecognised_member");
    assert_eq!(f["path"], "capabilities");
    let o = run(&["validate", "--initialize", "-"], Some(&m.to_string()));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no_manifest"), "{}", o.stderr);
    // `--manifest` validates an initialize-looking document as it is.
    let result =
        json!({"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":good()}}});
    let o = run(
        &["validate", "--manifest", "--json", "-"],
        Some(&result.to_string()),
    );
    assert_eq!(o.code, 1, "no version at the top: {}", o.stdout);
    assert!(o.stdout.contains("missing_version"), "{}", o.stdout);
}

#[test]
fn bad_input_not_json_wrong_type_missing_file() {
    let o = run(&["validate", "-"], Some("{\"version\": "));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("<stdin>: not JSON"), "{}", o.stderr);
    // The hint is about validate's input, not another command's flag.
    assert!(
        o.stderr.contains("hint: validate reads one JSON document"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("--lines"), "{}", o.stderr);

    let f = temp_file("number.json", "42");
    let o = run(&["validate", &f], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains(&f) && o.stderr.contains("found number"),
        "{}",
        o.stderr
    );

    let o = run(&["validate", "/no/such/manifest.json"], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("/no/such/manifest.json: cannot read"),
        "{}",
        o.stderr
    );

    for (flags, doc) in [
        (
            &[][..],
            r#"{"serverInfo":{"name":"s","version":"1"},"capabilities":{"tools":{}}}"#,
        ),
        (&["--initialize"][..], r#"{"capabilities":{"tools":{}}}"#),
    ] {
        let o = run(&[&["validate"][..], flags, &["-"]].concat(), Some(doc));
        assert_eq!(o.code, 2, "{doc}");
        assert!(o.stderr.contains("no_manifest"), "{}", o.stderr);
    }

    let o = run(&["validate"], None);
    assert_eq!(o.code, 2, "FILE is required");
}

/// A manifest repeating a member name is not one manifest (I-JSON, RFC 7493 §2.3; the
/// §17.2 digest is JCS over I-JSON, RFC 8785 §3.1): validate refuses it (exit 2, naming the
/// member) instead of judging whichever declaration the parser kept. Here the kept one is
/// valid and the other is not.
#[test]
fn a_manifest_repeating_a_member_name_is_refused() {
    let text = r#"{"version":"0.5","pushEvents":true,"featureSets":{
        "demo.push":{"description":"Push","uses":["bogus"]},
        "demo.push":{"description":"Push","uses":["pushEvents"]}}}"#;
    let o = run(&["validate", "-"], Some(text));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("duplicate member name \"demo.push\""),
        "{}",
        o.stderr
    );
}

/// Every place a manifest can leave a description out, graded as the spec grades it. A
/// feature set's `description` is required (§6.2's table: "Required: Yes"; App. B.2
/// `"required": ["description", "uses"]`, `"type": "string"`): absent or not a string, it is
/// an error and validate exits 1 (it was a warning, exit 0). A tag's `desc` in a feature
/// set's `tagOntology` is optional (§16.4: "Fields (all optional)"; hosts MUST tolerate
/// undescribed tags): its absence is no finding at all.
#[test]
fn s6_2_a_feature_set_description_is_required_and_s16_4_a_tag_desc_is_not() {
    for bad in [
        None,
        Some(json!(42)),
        Some(json!(null)),
        Some(json!(["Push"])),
    ] {
        let mut m = good();
        match &bad {
            None => {
                m["featureSets"]["demo.push"]
                    .as_object_mut()
                    .unwrap()
                    .remove("description");
            }
            Some(v) => m["featureSets"]["demo.push"]["description"] = v.clone(),
        }
        let (code, fs) = findings(&m);
        assert_eq!(code, 1, "{bad:?}: {fs:?}");
        let f = find(&fs, "missing_description");
        assert_eq!(f["severity"], "error", "{bad:?}");
        assert_eq!(f["section"], "§6.2");
        assert_eq!(f["path"], "featureSets.demo.push");
    }
    // An empty string is a string: the table asks for the type, not for content.
    let mut m = good();
    m["featureSets"]["demo.push"]["description"] = json!("");
    assert_eq!(findings(&m), (0, vec![]));
    // §16.4: a tag without `desc`, and a keyed family without one, are no finding.
    let mut m = good();
    m["featureSets"]["demo.push"]["tagOntology"] =
        json!({"tags": {"demo:hello": {"facet": "sender"}}, "keyed": {"demo:item": {}}});
    assert_eq!(findings(&m), (0, vec![]));
}
