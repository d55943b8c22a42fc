//! `mcpl diff` end to end: §17.1 changed domains and §17.6 impacts with dispositions, the
//! `--json` shape, stdin and bad input.

use serde_json::{json, Value};

mod common;
use common::{run, temp_file};

/// A temporary file holding `v`.
fn temp_json(name: &str, v: &Value) -> String {
    temp_file(name, &v.to_string())
}

fn old() -> Value {
    json!({"version":"0.5","pushEvents":true,
      "channels":{"register":true,"publish":true},
      "featureSets":{"demo.push":{"description":"Push","uses":["pushEvents"]}}})
}

/// `pushEvents` removed, `inferenceLifecycle` added.
fn new() -> Value {
    json!({"version":"0.5","inferenceLifecycle":true,
      "channels":{"register":true,"publish":true},
      "featureSets":{"demo.push":{"description":"Push","uses":["pushEvents"]}}})
}

fn impact<'a>(impacts: &'a [Value], kind: &str, subject: &str) -> &'a Value {
    impacts
        .iter()
        .find(|i| i["impact"] == kind && i["subject"] == subject)
        .unwrap_or_else(|| panic!("no {kind} {subject} in {impacts:?}"))
}

#[test]
fn s17_6_json_domains_and_impacts_with_dispositions() {
    let (a, b) = (temp_json("old.json", &old()), temp_json("new.json", &new()));
    let o = run(&["diff", "--json", &a, &b], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["domains", "impacts"]);
    assert_eq!(v["domains"], json!(["capabilities"]));
    let impacts = v["impacts"].as_array().unwrap();
    let revoked = impact(impacts, "capability-revoked", "pushEvents");
    assert_eq!(revoked["disposition"], "applied");
    assert_eq!(revoked["domain"], "capabilities");
    let pending = impact(
        impacts,
        "capability-expansion-pending",
        "inferenceLifecycle",
    );
    assert_eq!(pending["disposition"], "decision-needed");
    let degraded = impact(impacts, "feature-degraded", "demo.push");
    assert_eq!(degraded["reason"], "capability_denied");
}

#[test]
fn s17_3_absent_to_empty_feature_sets_is_a_change() {
    let a = temp_json("bare.json", &json!({"version":"0.5"}));
    let o = run(
        &["diff", "--json", &a, "-"],
        Some(r#"{"version":"0.5","featureSets":{}}"#),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["domains"], json!(["featureSets", "tagOntology"]));
}

#[test]
fn readable_output_lists_domains_and_impacts() {
    let (a, b) = (
        temp_json("old2.json", &old()),
        temp_json("new2.json", &new()),
    );
    let o = run(&["diff", &a, &b], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.starts_with("changed domains: capabilities\n"),
        "{}",
        o.stdout
    );
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("capability-revoked"))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(
        line.contains("applied") && line.ends_with("pushEvents"),
        "{line}"
    );
    assert!(o.stdout.contains("decision-needed"), "{}", o.stdout);
}

#[test]
fn identical_manifests_print_no_change() {
    let a = temp_json("same.json", &old());
    let o = run(&["diff", &a, "-"], Some(&old().to_string()));
    assert_eq!(o.code, 0);
    assert_eq!(o.stdout, "no change\n");
    let o = run(&["diff", "--json", &a, &a], None);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v, json!({"domains": [], "impacts": []}));
}

#[test]
fn initialize_results_are_compared_on_experimental_mcpl() {
    let wrap = |m: Value| json!({"jsonrpc":"2.0","id":1,"result":{"capabilities":{"experimental":{"mcpl":m}}}});
    let (a, b) = (
        temp_json("init_old.json", &wrap(old())),
        temp_json("init_new.json", &wrap(new())),
    );
    let o = run(&["diff", "--json", &a, &b], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["domains"], json!(["capabilities"]));
}

#[test]
fn invalid_new_manifest_is_diffed_with_a_warning() {
    let a = temp_json("old3.json", &old());
    let bad =
        json!({"version":"0.5","featureSets":{"demo.push":{"description":"Push","uses":["nope"]}}});
    let o = run(&["diff", "--json", &a, "-"], Some(&bad.to_string()));
    assert_eq!(o.code, 0);
    assert!(
        o.stderr.contains("warning:") && o.stderr.contains("mcpl validate"),
        "{}",
        o.stderr
    );
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let d = impact(
        v["impacts"].as_array().unwrap(),
        "feature-degraded",
        "demo.push",
    );
    assert_eq!(d["reason"], "invalid_uses");
}

#[test]
fn bad_input_not_json_wrong_type_missing_file_and_double_stdin() {
    let a = temp_json("old4.json", &old());
    let o = run(&["diff", &a, "-"], Some("nope"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("<stdin>: not JSON"), "{}", o.stderr);

    let o = run(&["diff", "-", &a], Some("[]"));
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("<stdin>") && o.stderr.contains("found array"),
        "{}",
        o.stderr
    );

    let o = run(&["diff", "/no/such/old.json", &a], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("/no/such/old.json: cannot read"),
        "{}",
        o.stderr
    );

    let o = run(&["diff", "-", "-"], Some("{}"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("both be stdin"), "{}", o.stderr);

    let o = run(&["diff", &a], None);
    assert_eq!(o.code, 2, "NEW is required");
}

/// §17.5 step 1: a manifest that parses but that the §17.2 digest refuses (here a capability
/// member named `bad name`) is partially invalid, and the host applies only its removals:
/// its additions are ignored, not pending. `diff` shows the receipt the host emits for it
/// (`ManifestReview::on_fetched`), so the removal of `channels.publish` is revoked and the
/// `inferenceLifecycle` it adds is not `capability-expansion-pending`.
#[test]
fn s17_5_a_partially_invalid_new_manifest_shows_only_its_removals() {
    let a = temp_json("old4.json", &old());
    let bad = json!({"version":"0.5","pushEvents":true,"inferenceLifecycle":true,
      "bad name":true,"channels":{"register":true},
      "featureSets":{"demo.push":{"description":"Push","uses":["pushEvents"]}}});
    let o = run(&["diff", "--json", &a, "-"], Some(&bad.to_string()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let impacts = v["impacts"].as_array().unwrap();
    let revoked = impact(impacts, "capability-revoked", "channels.publish");
    assert_eq!(revoked["disposition"], "applied");
    assert!(
        impacts
            .iter()
            .all(|i| i["impact"] != "capability-expansion-pending"),
        "{impacts:?}"
    );
}

/// `version` is protocol identity, not a §17.1 domain, so a change to it alone changes no
/// domain and has no impact; the readable output said "no change" for two manifests that
/// differ. It says what changed instead (the JSON form is unchanged: no domains, no impacts).
#[test]
fn s17_1_a_version_change_alone_is_not_reported_as_no_change() {
    let a = temp_json("v05.json", &old());
    let mut next = old();
    next["version"] = json!("0.6");
    let o = run(&["diff", &a, "-"], Some(&next.to_string()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "no domain changed; version changed from \"0.5\" to \"0.6\" (protocol identity, not a \
         domain, §17.1)\n"
    );
    let o = run(&["diff", "--json", &a, "-"], Some(&next.to_string()));
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v, json!({"domains": [], "impacts": []}));
}
