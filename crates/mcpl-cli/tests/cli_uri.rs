//! `mcpl uri` end to end: RFC-004 three values, rejection codes, `--json` array shape.

use serde_json::{json, Value};

mod common;
use common::Out;

fn run(args: &[&str]) -> Out {
    common::run(args, None)
}

#[test]
fn rfc004_s3_three_values_readable() {
    let o = run(&["uri", "mcpl://Example.COM:443/a?x=1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "configuredUri      mcpl://Example.COM:443/a?x=1\n\
         canonicalUri       mcpl://example.com/a?x=1\n\
         resolvedTransport  wss://example.com/a?x=1\n"
    );
}

#[test]
fn rfc004_s3_json_array_one_object_per_uri() {
    let o = run(&["uri", "--json", "mcpl://h/x", "ws://localhost:8080"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["configuredUri"], "mcpl://h/x");
    assert_eq!(a[0]["canonicalUri"], "mcpl://h/x");
    assert_eq!(a[0]["resolvedTransport"], "wss://h/x");
    assert_eq!(a[0].as_object().unwrap().len(), 3);
    assert_eq!(a[1]["configuredUri"], "ws://localhost:8080");
    assert_eq!(a[1]["resolvedTransport"], "ws://localhost:8080/");
}

#[test]
fn rfc004_s2_1_rejections_print_reason_code_and_exit_1() {
    let cases = [
        ("mcpl://h/x#frag", "fragment"),
        ("mcpl://u:p@h/x", "userinfo"),
        ("mcpl:///evil", "empty_authority"),
        ("mcpl://h/a/../b", "dot_segment"),
        ("mcpl://h/a/%2e%2e/b", "dot_segment"),
        ("mcpl://h:99999/", "invalid_port"),
        ("https://h/", "unsupported_scheme"),
    ];
    for (uri, code) in cases {
        let o = run(&["uri", uri]);
        assert_eq!(o.code, 1, "{uri}");
        assert!(
            o.stdout.contains(&format!("error              {code}: ")),
            "{uri}: {}",
            o.stdout
        );
        assert!(!o.stdout.contains("resolvedTransport"), "{uri}");

        let o = run(&["uri", "--json", uri]);
        assert_eq!(o.code, 1, "{uri}");
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v[0]["configuredUri"], uri);
        assert_eq!(v[0]["error"]["code"], code, "{uri}");
        assert!(v[0]["error"]["message"].as_str().unwrap().len() > 3);
        assert!(v[0].get("canonicalUri").is_none());
        assert!(v[0].get("resolvedTransport").is_none());
    }
}

#[test]
fn mixed_input_reports_every_uri_in_order() {
    let o = run(&["uri", "--json", "mcpl://a/", "mcpl:///b", "wss://c/"]);
    assert_eq!(o.code, 1);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let configured: Vec<&Value> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["configuredUri"])
        .collect();
    assert_eq!(
        configured,
        [&json!("mcpl://a/"), &json!("mcpl:///b"), &json!("wss://c/")]
    );
    assert!(v[0].get("error").is_none());
    assert_eq!(v[1]["error"]["code"], "empty_authority");
    assert_eq!(v[2]["resolvedTransport"], "wss://c/");
}

#[test]
fn no_uri_is_a_usage_error() {
    let o = run(&["uri"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("URI"), "{}", o.stderr);
}

/// README.md's `uri` example is what `mcpl uri` prints, the refusal's remedy included
/// (issue #21: the human text of a reason says what to write instead; the code stays first).
#[test]
fn readme_uri_example_is_true() {
    let o = run(&["uri", "mcpl://Example.com:443/a?x=1", "mcpl:///evil"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        common::readme_output("mcpl uri mcpl://Example.com:443/a?x=1 mcpl:///evil")
    );
    assert!(o.stdout.contains("write the host after"), "{}", o.stdout);
}

/// The configured URI is printed as given, and a newline or carriage return in it started a
/// line of the report's own shape (a forged `canonicalUri` for a URI that was refused);
/// it stays on its own line with the break written as its escape, like every other
/// report's quoted text (`term::one_line`). `--json` escapes it anyway.
#[test]
fn rfc004_s5_a_configured_uri_cannot_forge_a_line_of_the_report() {
    let forged = "mcpl://h/x\ncanonicalUri       mcpl://forged/\rresolvedTransport  wss://forged/";
    let o = run(&["uri", forged]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", o.stdout);
    assert!(lines[0].starts_with("configuredUri      mcpl://h/x\\u{a}canonicalUri"));
    assert!(lines[1].contains("invalid_character"), "{}", o.stdout);
    assert!(!o.stdout.contains('\r'), "{:?}", o.stdout);
}

/// `--json` is a published machine format: it must parse. serde_json leaves DEL, C1
/// controls and the bidirectional overrides unescaped (JSON requires only C0 escaped), and
/// the terminal guard then rewrote them as `\u{202e}`, which is no JSON escape, so the
/// whole array failed to parse. They are now written as JSON escapes (`\u202e`), which
/// read back as the same characters and leave a terminal nothing to act on.
#[test]
fn rfc004_s5_json_output_parses_whatever_the_configured_uri_holds() {
    let configured = "mcpl://h/x\u{202e}txt\u{7f}\u{85}";
    let o = run(&["uri", "--json", configured]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let v: Value =
        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", o.stdout));
    assert_eq!(v[0]["configuredUri"], configured);
    assert!(
        !o.stdout.contains(['\u{202e}', '\u{7f}', '\u{85}']),
        "{}",
        o.stdout
    );
}
