//! `mcpl grant` end to end: §5.4 effective = advertised ∩ policy, §6.4 derivation, the
//! `--json` shape, pattern errors and bad input.

use serde_json::{json, Value};

mod common;
use common::{run, temp_file, Out};

fn mcpl_manifest() -> Value {
    json!({"version":"0.5","pushEvents":true,
      "channels":{"register":true,"publish":true,"incoming":true},
      "featureSets":{
        "demo.messaging":{"description":"Demo","uses":["channels.publish","channels.incoming"]},
        "demo.push":{"description":"Push","uses":["pushEvents"]}}})
}

fn grant_json(stdin: &Value, allow: &[&str]) -> (Out, Value) {
    let mut args = vec!["grant", "--advertised", "-", "--json"];
    if !allow.is_empty() {
        args.push("--allow");
        args.extend_from_slice(allow);
    }
    let o = run(&args, Some(&stdin.to_string()));
    let v = serde_json::from_str(&o.stdout).unwrap_or(Value::Null);
    (o, v)
}

#[test]
fn s5_4_json_shape_field_by_field() {
    let (o, v) = grant_json(&mcpl_manifest(), &["channels.*"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        v["advertised"],
        json!([
            "channels.incoming",
            "channels.publish",
            "channels.register",
            "pushEvents"
        ])
    );
    assert_eq!(
        v["effectiveCapabilities"],
        json!(["channels.incoming", "channels.publish", "channels.register"])
    );
    assert_eq!(v["deniedCapabilities"], json!(["pushEvents"]));
    let fs = &v["featureSets"];
    assert_eq!(fs["demo.messaging"]["available"], true);
    assert_eq!(fs["demo.messaging"]["missingCapabilities"], json!([]));
    assert!(fs["demo.messaging"].get("reason").is_none());
    assert_eq!(fs["demo.push"]["available"], false);
    assert_eq!(
        fs["demo.push"]["missingCapabilities"],
        json!(["pushEvents"])
    );
    assert_eq!(fs["demo.push"]["reason"], "capability_denied");
    assert!(v.get("findings").is_none(), "{v}");
}

#[test]
fn s5_4_without_allow_nothing_is_granted() {
    let (o, v) = grant_json(&mcpl_manifest(), &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(v["effectiveCapabilities"], json!([]));
    assert_eq!(v["deniedCapabilities"], v["advertised"]);
    assert_eq!(v["featureSets"]["demo.messaging"]["available"], false);
}

#[test]
fn allow_takes_several_values_and_repeats() {
    let m = mcpl_manifest().to_string();
    let a = run(
        &[
            "grant",
            "--advertised",
            "-",
            "--json",
            "--allow",
            "pushEvents",
            "channels.publish",
        ],
        Some(&m),
    );
    let b = run(
        &[
            "grant",
            "--advertised",
            "-",
            "--allow",
            "pushEvents",
            "--json",
            "--allow",
            "channels.publish",
        ],
        Some(&m),
    );
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.stdout, b.stdout);
    let v: Value = serde_json::from_str(&a.stdout).unwrap();
    assert_eq!(
        v["effectiveCapabilities"],
        json!(["channels.publish", "pushEvents"])
    );
}

#[test]
fn s5_4_star_matches_exactly_one_segment() {
    let m = json!({"contextHooks":{"beforeInference":true}});
    let (_, v) = grant_json(&m, &["contextHooks.*.observe"]);
    assert_eq!(
        v["effectiveCapabilities"],
        json!(["contextHooks.beforeInference.observe"])
    );
    let (_, v) = grant_json(&m, &["contextHooks.*"]);
    assert_eq!(v["effectiveCapabilities"], json!([]));
}

#[test]
fn s5_1_initialize_result_counts_outer_tools_only() {
    let result = json!({"protocolVersion":"2025-06-18","capabilities":{
        "tools":{},"experimental":{"mcpl":{"pushEvents":true,
          "featureSets":{"t":{"description":"T","uses":["tools"]}}}}}});
    let f = temp_file("init.json", &result.to_string());
    let o = run(
        &["grant", "--advertised", &f, "--json", "--allow", "*"],
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["advertised"], json!(["pushEvents", "tools"]));
    assert_eq!(v["effectiveCapabilities"], json!(["pushEvents", "tools"]));
    assert_eq!(v["featureSets"]["t"]["available"], true);

    // `tools` inside experimental.mcpl advertises nothing and is reported.
    let inner = json!({"tools":true,"pushEvents":true});
    let (o, v) = grant_json(&inner, &["*"]);
    assert_eq!(o.code, 0);
    assert_eq!(v["advertised"], json!(["pushEvents"]));
    assert!(
        v["findings"].to_string().contains("tools_inside_mcpl"),
        "{v}"
    );
}

/// A trimmed `{capabilities}` is an `initialize` when `--initialize` says so, also inside a
/// JSON-RPC message; without the flag it is read as the manifest (issue #21: no guessing).
#[test]
fn initialize_flag_reads_a_trimmed_capabilities_wrapper_and_envelope() {
    let caps = json!({"tools":{},"experimental":{"mcpl":{"pushEvents":true}}});
    let wrapped = json!({"capabilities":caps});
    let init = |doc: &Value| {
        let o = run(
            &[
                "grant",
                "--advertised",
                "-",
                "--json",
                "--initialize",
                "--allow",
                "*",
            ],
            Some(&doc.to_string()),
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str::<Value>(&o.stdout).unwrap()
    };
    let v = init(&wrapped);
    assert_eq!(v["advertised"], json!(["pushEvents", "tools"]));
    let env = json!({"jsonrpc":"2.0","id":0,"result":wrapped});
    assert_eq!(init(&env), v);
    let (o, w) = grant_json(&wrapped, &["*"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(w["advertised"], json!([]), "{w}");
    assert!(
        o.stderr.contains("note: read as the manifest itself"),
        "{}",
        o.stderr
    );
}

/// Issue #21: a manifest with a vendor member named `capabilities` is the advertisement
/// itself (it was read as its `capabilities.experimental.mcpl`, granting what that named).
#[test]
fn s5_1_a_vendor_capabilities_member_is_not_unwrapped() {
    let mut m = mcpl_manifest();
    m["capabilities"] = json!({"tools":{},"experimental":{"mcpl":{"inferenceRequest":true}}});
    let (o, v) = grant_json(&m, &["*"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let (_, plain) = grant_json(&mcpl_manifest(), &["*"]);
    assert_eq!(v["advertised"], plain["advertised"], "{v}");
    assert!(!v["advertised"].to_string().contains("inferenceRequest"));
    assert_eq!(v["featureSets"]["demo.push"]["available"], true);
    let o = run(
        &["grant", "--advertised", "-", "--initialize"],
        Some(&mcpl_manifest().to_string()),
    );
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("not_initialize"), "{}", o.stderr);
}

#[test]
fn s6_4_invalid_uses_is_unavailable() {
    let m = json!({"pushEvents":true,"featureSets":{"bad":{"description":"B","uses":["nope"]}}});
    let (_, v) = grant_json(&m, &["pushEvents"]);
    assert_eq!(v["featureSets"]["bad"]["available"], false);
    assert_eq!(v["featureSets"]["bad"]["reason"], "invalid_uses");
}

#[test]
fn readable_table_by_default() {
    let o = run(
        &["grant", "--advertised", "-", "--allow", "channels.*"],
        Some(&mcpl_manifest().to_string()),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = |prefix: &str| {
        o.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix}: {}", o.stdout))
            .to_owned()
    };
    assert!(line("channels.publish ").ends_with("granted"));
    assert!(line("pushEvents ").ends_with("denied"));
    assert!(line("demo.messaging ").ends_with("available"));
    assert!(line("demo.push ").contains("unavailable: capability_denied (missing pushEvents)"));
    assert!(o.stdout.contains("3 of 4 advertised paths granted"));
    assert!(!o.stdout.contains('\x1b'), "no colour off a terminal");
}

#[test]
fn s5_4_malformed_pattern_is_a_usage_error() {
    for bad in ["chan*", "channels..publish", ""] {
        let o = run(
            &["grant", "--advertised", "-", "--allow", bad],
            Some(&mcpl_manifest().to_string()),
        );
        assert_eq!(o.code, 2, "{bad:?}");
        assert_eq!(o.stdout, "", "{bad:?}");
        assert!(o.stderr.contains("invalid --allow pattern"), "{}", o.stderr);
        assert!(o.stderr.contains(&format!("{bad:?}")), "{}", o.stderr);
    }
}

#[test]
fn pattern_naming_no_path_warns_and_grants_nothing() {
    let (o, v) = grant_json(&mcpl_manifest(), &["channels"]);
    assert_eq!(o.code, 0);
    assert_eq!(v["effectiveCapabilities"], json!([]));
    assert!(o.stderr.contains("warning:"), "{}", o.stderr);
    assert!(o.stderr.contains("channels.*"), "{}", o.stderr);
}

#[test]
fn advertised_is_required() {
    let o = run(&["grant", "--allow", "*"], None);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--advertised"), "{}", o.stderr);
}

#[test]
fn bad_input_not_json_wrong_type_missing_file() {
    let f = temp_file("notjson.json", "pushEvents: true");
    let o = run(&["grant", "--advertised", &f], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains(&f) && o.stderr.contains("not JSON"),
        "{}",
        o.stderr
    );

    let o = run(&["grant", "--advertised", "-"], Some("\"pushEvents\""));
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("<stdin>") && o.stderr.contains("found string"),
        "{}",
        o.stderr
    );

    let o = run(&["grant", "--advertised", "/no/such/adv.json"], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("/no/such/adv.json: cannot read: no such file"),
        "{}",
        o.stderr
    );
}

/// A wildcard short of the paths' segments: the warning said "try `contextHooks.*.*`",
/// which names only `observe`; it now names both depths (the library's hint,
/// `Grant::from_policy`), and a typo gets the closest path.
#[test]
fn pattern_naming_no_path_hint_names_every_depth_and_the_closest_path() {
    let m = json!({"contextHooks":{"beforeInference":true},"pushEvents":true});
    let (o, _) = grant_json(&m, &["contextHooks.*"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("`contextHooks.*.*.*`"), "{}", o.stderr);
    let (o, _) = grant_json(&m, &["pushEvent"]);
    assert!(o.stderr.contains("`pushEvents`"), "{}", o.stderr);
}

/// `mcpl inspect --allow channels` connected and granted nothing of what it said (the
/// library host took the entry); it is a usage error now, as a malformed pattern is, with
/// what to write.
#[test]
fn inspect_refuses_an_allow_pattern_naming_no_path() {
    let o = run(&["inspect", "--repl", "--allow", "channels"], Some(""));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("`channels.*`"), "{}", o.stderr);
}
