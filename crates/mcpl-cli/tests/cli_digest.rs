//! `mcpl digest` end to end: §17.2 worked example, stdin, `--canonical`, `--json`,
//! `--lines`, initialize-shaped input and bad input.

use serde_json::{json, Value};

mod common;
use common::{run, temp_file};

const WORKED_REVISION: &str = "sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4";
const WORKED_CANONICAL: &str = r#"{"channels":{"incoming":true,"publish":true,"register":true},"contextHooks":{"beforeInference":true},"featureSets":{"demo.messaging":{"description":"Demo","uses":["channels.incoming","channels.publish","pushEvents","tools"]}},"inferenceLifecycle":true,"pushEvents":true,"version":"0.5"}"#;

fn worked_example() -> Value {
    json!({"version":"0.5","pushEvents":true,"contextHooks":{"beforeInference":true},
     "inferenceLifecycle":true,"channels":{"register":true,"publish":true,"incoming":true},
     "featureSets":{"demo.messaging":{"description":"Demo",
       "uses":["channels.publish","channels.incoming","pushEvents","tools"]}}})
}

#[test]
fn s17_2_worked_example_revision_from_file() {
    let f = temp_file("worked.json", &worked_example().to_string());
    let o = run(&["digest", &f], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"));
    assert_eq!(o.stderr, "");
}

#[test]
fn s17_2_worked_example_canonical_text() {
    let o = run(
        &["digest", "--canonical", "-"],
        Some(&worked_example().to_string()),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{WORKED_CANONICAL}\n"));
}

#[test]
fn stdin_by_dash_and_by_default() {
    let input = worked_example().to_string();
    for args in [&["digest", "-"][..], &["digest"][..]] {
        let o = run(args, Some(&input));
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"), "{args:?}");
    }
}

#[test]
fn s17_2_root_revision_is_not_hashed() {
    let mut m = worked_example();
    m["revision"] = json!("sha256:whatever");
    let o = run(&["digest"], Some(&m.to_string()));
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"));
}

#[test]
fn json_output_fields() {
    let o = run(&["digest", "--json"], Some(&worked_example().to_string()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["revision"], WORKED_REVISION);
    assert_eq!(
        v["sha256Hex"],
        "fd86534b4875b6a4c031923a784942b3349013658dc77c610219a052f348f47e"
    );
    assert_eq!(v["canonicalJson"], WORKED_CANONICAL);
    assert_eq!(v.as_object().unwrap().len(), 3);
}

#[test]
fn s17_1_initialize_result_params_and_envelope_use_experimental_mcpl() {
    let caps = json!({"tools":{},"experimental":{"mcpl":worked_example()}});
    let result = json!({"protocolVersion":"2025-06-18","capabilities":caps,"serverInfo":{"name":"x","version":"1"}});
    let params = json!({"protocolVersion":"2025-06-18","capabilities":caps,"clientInfo":{"name":"h","version":"1"}});
    let envelope = json!({"jsonrpc":"2.0","id":1,"result":result});
    for doc in [result, params, envelope] {
        let o = run(&["digest"], Some(&doc.to_string()));
        assert_eq!(o.code, 0, "{doc}: {}", o.stderr);
        assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"), "{doc}");
    }
}

#[test]
fn s17_2_lines_refused_line_in_the_middle_keeps_order_and_exits_1() {
    let refused =
        json!({"version":"0.5","featureSets":{"demo/x":{"description":"d","uses":["tools"]}}});
    let input = format!("{}\n{}\n{}\n", worked_example(), refused, json!({}));
    let o = run(&["digest", "--lines"], Some(&input));
    assert_eq!(o.code, 1, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    assert_eq!(lines[0], WORKED_REVISION);
    assert!(
        lines[1].starts_with("error: identifier_charset: "),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("demo/x"), "{}", lines[1]);
    assert_eq!(
        lines[2],
        "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
    );
}

#[test]
fn lines_canonical_and_json_forms() {
    let input = format!("{}\n[1]\n", worked_example());
    let o = run(&["digest", "--lines", "--canonical"], Some(&input));
    assert_eq!(o.code, 1);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], WORKED_CANONICAL);
    assert!(
        lines[1].starts_with("error: manifest_not_object: "),
        "{}",
        lines[1]
    );

    let o = run(&["digest", "--lines", "--json"], Some(&input));
    assert_eq!(o.code, 1);
    let lines: Vec<Value> = o
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["revision"], WORKED_REVISION);
    assert_eq!(lines[1]["error"]["code"], "manifest_not_object");
    assert!(lines[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("array"));
}

#[test]
fn lines_with_a_non_json_line_reports_it_in_place_and_exits_2() {
    let input = format!("{}\nnot json\n{}\n", json!({}), worked_example());
    let o = run(&["digest", "--lines"], Some(&input));
    assert_eq!(o.code, 2);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(
        lines[1].starts_with("error: invalid_json: line 2"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2], WORKED_REVISION);
}

#[test]
fn s17_2_identifier_charset_is_refused_with_exit_1() {
    let m =
        json!({"version":"0.5","contextHooks":{"beforeInference":{"inject":{"before user":true}}}});
    let o = run(&["digest"], Some(&m.to_string()));
    assert_eq!(o.code, 1);
    assert_eq!(o.stdout, "");
    assert!(o.stderr.contains("identifier_charset"), "{}", o.stderr);
    assert!(o.stderr.contains("hint: §17.2"), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("contextHooks.beforeInference.inject.before user"),
        "{}",
        o.stderr
    );
}

#[test]
fn bad_input_not_json_exits_2_naming_the_file() {
    let f = temp_file("notjson.json", "{ this is not json");
    let o = run(&["digest", &f], None);
    assert_eq!(o.code, 2);
    assert_eq!(o.stdout, "");
    assert!(o.stderr.contains(&f), "{}", o.stderr);
    assert!(o.stderr.contains("not JSON"), "{}", o.stderr);
    assert!(o.stderr.contains("digest --lines"), "{}", o.stderr);
}

#[test]
fn bad_input_wrong_type_exits_2() {
    let o = run(&["digest", "-"], Some("[\"version\"]"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("<stdin>"), "{}", o.stderr);
    assert!(o.stderr.contains("found array"), "{}", o.stderr);
}

/// An `experimental.mcpl` that is not an object is input of the wrong shape (exit 2), told
/// what was expected, with no §17.2 identifier hint.
#[test]
fn bad_input_nested_manifest_of_the_wrong_type_exits_2() {
    for (flags, doc) in [
        (
            &[][..],
            r#"{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":5}}}"#,
        ),
        (
            &["--initialize"][..],
            r#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"experimental":{"mcpl":[]}}}}"#,
        ),
    ] {
        let o = run(&[&["digest"][..], flags, &["-"]].concat(), Some(doc));
        assert_eq!(o.code, 2, "{doc}: {}", o.stderr);
        assert_eq!(o.stdout, "");
        assert!(o.stderr.contains("manifest_not_object"), "{}", o.stderr);
        assert!(
            o.stderr
                .contains("expected the manifest (experimental.mcpl) to be a JSON object"),
            "{}",
            o.stderr
        );
        assert!(!o.stderr.contains("identifier"), "{}", o.stderr);
    }
}

#[test]
fn bad_input_missing_file_exits_2() {
    let o = run(&["digest", "/definitely/not/here.json"], None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("/definitely/not/here.json: cannot read: no such file"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("hint:"), "{}", o.stderr);
}

#[test]
fn bad_input_initialize_result_without_mcpl_exits_2() {
    for (flags, doc) in [
        (
            &[][..],
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}}}"#,
        ),
        (&["--initialize"][..], r#"{"capabilities":{"tools":{}}}"#),
    ] {
        let o = run(&[&["digest"][..], flags].concat(), Some(doc));
        assert_eq!(o.code, 2, "{doc}");
        assert!(o.stderr.contains("no_manifest"), "{}", o.stderr);
        assert!(
            o.stderr.contains("capabilities.experimental.mcpl"),
            "{}",
            o.stderr
        );
    }
}

/// Issue #21: only a document carrying `protocolVersion`, `serverInfo` or `clientInfo` is
/// unwrapped as an `initialize`; a manifest with a vendor member named `capabilities` is
/// digested as itself (it was digested as its `capabilities.experimental.mcpl`), and one
/// whose `capabilities` has no `experimental.mcpl` is not refused as `no_manifest`.
#[test]
fn s17_1_a_vendor_capabilities_member_is_digested_as_itself() {
    let inner = json!({"version":"0.5","pushEvents":true});
    let mut m = worked_example();
    m["capabilities"] = json!({"experimental":{"mcpl":inner}});
    let own = run(&["digest", "--json"], Some(&m.to_string()));
    assert_eq!(own.code, 0, "{}", own.stderr);
    let own: Value = serde_json::from_str(&own.stdout).unwrap();
    assert!(
        own["canonicalJson"]
            .as_str()
            .unwrap()
            .contains("\"capabilities\""),
        "{own}"
    );
    let of_inner = run(&["digest"], Some(&inner.to_string()));
    assert_ne!(own["revision"].as_str(), of_inner.stdout.lines().next());
    // Saying so gives the same digest.
    let forced = run(&["digest", "--manifest"], Some(&m.to_string()));
    assert_eq!(
        forced.stdout,
        format!("{}\n", own["revision"].as_str().unwrap())
    );

    let o = run(
        &["digest"],
        Some(r#"{"version":"0.5","capabilities":{"x":1}}"#),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("sha256:"), "{}", o.stdout);
    assert_eq!(o.stderr, "", "a manifest with a version gets no note");
}

/// `--manifest` takes the document as it is, even one that looks like an `initialize`;
/// `--initialize` takes a trimmed `{capabilities}` too, and refuses (exit 2) a document with
/// no `capabilities` object, also as a `--lines` line. Both at once is a usage error.
#[test]
fn s17_1_manifest_and_initialize_flags_say_which() {
    let result = json!({"protocolVersion":"2025-06-18",
        "capabilities":{"experimental":{"mcpl":worked_example()}}});
    let o = run(&["digest", "--initialize"], Some(&result.to_string()));
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"), "{}", o.stderr);
    let trimmed = json!({"capabilities":result["capabilities"]});
    let o = run(&["digest", "--initialize"], Some(&trimmed.to_string()));
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"), "{}", o.stderr);
    let o = run(&["digest", "--manifest"], Some(&result.to_string()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_ne!(o.stdout, format!("{WORKED_REVISION}\n"));

    let o = run(
        &["digest", "--initialize"],
        Some(&worked_example().to_string()),
    );
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("not_initialize"), "{}", o.stderr);
    assert!(
        o.stderr.contains("no `capabilities` member"),
        "{}",
        o.stderr
    );
    let o = run(&["digest", "--initialize"], Some("[1]"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("not_initialize"), "{}", o.stderr);

    let input = format!("{result}\n{}\n", worked_example());
    let o = run(&["digest", "--lines", "--initialize"], Some(&input));
    assert_eq!(o.code, 2, "{}", o.stdout);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], WORKED_REVISION);
    assert!(
        lines[1].starts_with("error: not_initialize: "),
        "{}",
        lines[1]
    );

    let o = run(&["digest", "--manifest", "--initialize"], Some("{}"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("cannot be used with"), "{}", o.stderr);
}

/// A bare MCP `capabilities` object is no longer unwrapped: it is read as the manifest,
/// with a note on stderr saying how to ask for the other reading.
#[test]
fn a_bare_capabilities_object_is_read_as_the_manifest_with_a_note() {
    let caps = json!({"tools":{},"experimental":{"mcpl":worked_example()}});
    let o = run(&["digest"], Some(&caps.to_string()));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_ne!(o.stdout, format!("{WORKED_REVISION}\n"));
    assert!(
        o.stderr.contains("note: read as the manifest itself"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("--initialize"), "{}", o.stderr);
}

#[test]
fn bad_input_empty_stdin_exits_2() {
    let o = run(&["digest"], Some(""));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("empty input"), "{}", o.stderr);
}

/// §17.2 / RFC 8785: numbers canonicalise from the exact double. serde_json reads this one
/// a unit off without `float_roundtrip` (workspace Cargo.toml). The library's tests cannot see
/// that feature go (a dev-dependency turns it on for them); `cargo test -p mcpl-cli` can.
#[test]
fn numbers_are_read_exactly_float_roundtrip() {
    let text = r#"{"version":"0.5","x":{"n":1.0715660391465826e-75}}"#;
    let o = run(&["digest", "--canonical", "-"], Some(text));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{text}\n"));
}

/// README.md's `digest --lines` example is what `mcpl digest` prints, the §17.2 remedy
/// included (issue #21).
#[test]
fn readme_digest_lines_example_is_true() {
    let o = run(
        &["digest", "--lines", "-"],
        Some("{}\n{\"featureSets\":{\"a b\":{}}}\n"),
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        common::readme_output(
            r#"printf '{}\n{"featureSets":{"a b":{}}}\n' | mcpl digest --lines -"#
        )
    );
    assert!(o.stdout.contains("rename it"), "{}", o.stdout);
}

/// RFC 8785 §3.1 canonicalises I-JSON only, and I-JSON (RFC 7493 §2.3) forbids duplicate
/// member names: a document repeating a name has no one canonical form (which of the two is
/// the manifest?). It is refused, naming the member and where it repeats, at any depth and
/// under `--lines`, never digested as whichever value the parser kept.
#[test]
fn duplicate_member_names_are_refused() {
    let root = r#"{"version":"0.5","version":"0.6"}"#;
    let o = run(&["digest", "--canonical"], Some(root));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, "");
    assert!(
        o.stderr.contains("duplicate member name \"version\"")
            && o.stderr.contains("line 1 column"),
        "{}",
        o.stderr
    );
    let nested = r#"{"version":"0.5","featureSets":{"a":{"description":"d","uses":["tools"]},
        "a":{"description":"d","uses":["pushEvents"]}}}"#;
    let o = run(&["digest"], Some(nested));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("duplicate member name \"a\"") && o.stderr.contains("line 2"),
        "{}",
        o.stderr
    );
    let input = format!("{}\n{root}\n", worked_example());
    let o = run(&["digest", "--lines"], Some(&input));
    assert_eq!(o.code, 2, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", o.stdout);
    assert_eq!(lines[0], WORKED_REVISION);
    assert!(
        lines[1].starts_with("error: invalid_json: line 2: duplicate member name \"version\""),
        "{}",
        lines[1]
    );
}

/// One input is read up to a bound (64 MiB, four times the largest message the library reads
/// from a transport), past which it is refused naming the bound, not read to the end: a
/// file like `/dev/zero` or an endless pipe would otherwise be held whole in memory. Here a
/// valid manifest padded past the bound.
#[test]
fn an_input_past_the_byte_bound_is_refused() {
    let bound = 64 * 1024 * 1024;
    let mut input = worked_example().to_string();
    input.push_str(&" ".repeat(bound + 1 - input.len()));
    let o = run(&["digest"], Some(&input));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, "");
    assert!(
        o.stderr.contains("<stdin>: larger than 64 MiB"),
        "{}",
        o.stderr
    );
    input.truncate(bound);
    let o = run(&["digest"], Some(&input));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"));
}

/// `--lines` reads a line at a time, each line within the same bound, and answers each as it
/// is read: a line past the bound ends the run there (exit 2) after the lines before it were
/// answered, since what follows cannot be found without reading all of it.
#[test]
fn lines_past_the_byte_bound_end_the_run_after_the_lines_before() {
    let bound = 64 * 1024 * 1024;
    let first = worked_example().to_string();
    let mut long = worked_example().to_string();
    long.push_str(&" ".repeat(bound + 1 - long.len()));
    let input = format!("{first}\n{long}\n{first}\n");
    let o = run(&["digest", "--lines"], Some(&input));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, format!("{WORKED_REVISION}\n"));
    assert!(
        o.stderr.contains("<stdin>: line 2 is longer than 64 MiB"),
        "{}",
        o.stderr
    );
}

/// An identifier refusal names the offending identifier and where it is, each cut to 1 KiB
/// (`session::DIAGNOSTIC_TEXT_BYTES`) with its length said: a feature-set name of a MiB with
/// one space in it printed the name twice whole (path and value), and `validate` likewise.
#[test]
fn s17_2_an_identifier_refusal_quotes_a_long_identifier_cut() {
    let name = format!("{} x", "a".repeat(1 << 20));
    let m = json!({"version": "0.5", "featureSets": {name: {"description": "d", "uses": ["pushEvents"]}}});
    let o = run(&["digest"], Some(&m.to_string()));
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("identifier_charset"),
        "{}",
        &o.stderr[..200]
    );
    assert!(o.stderr.contains("(1048578 bytes)"), "{}", &o.stderr[..200]);
    assert!(o.stderr.len() < 4096, "{} bytes of error", o.stderr.len());
    let o = run(&["validate", "--json", "-"], Some(&m.to_string()));
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.len() < 8192,
        "{} bytes of findings",
        o.stdout.len()
    );
    assert!(o.stdout.contains("identifier_charset"));
}

/// `--lines` answers each input line with exactly one output line. A refusal quotes the
/// position's path, made of the manifest's member names as written, so a name holding a
/// newline printed a line of its own (a forged `sha256:…` answer one line below, taken
/// for the next manifest's revision), and a name holding an escape sequence was written to
/// the terminal raw (it retitled the window). Both now print as their escapes, as the
/// single-document refusal and every other report already did.
#[test]
fn s17_2_lines_a_hostile_member_name_stays_on_its_own_line_as_text() {
    let input = concat!(
        r#"{"featureSets":{"a\nsha256:FORGED":{}}}"#,
        "\n",
        r#"{"featureSets":{"\u001b]0;PWNED\u0007":{}}}"#,
        "\n{}\n"
    );
    let o = run(&["digest", "--lines", "-"], Some(input));
    assert_eq!(o.code, 1, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    assert!(
        lines[0].starts_with("error: identifier_charset: "),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("featureSets.a\\u{a}sha256:FORGED"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("featureSets.\\u{1b}]0;PWNED\\u{7}"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("sha256:"), "{}", lines[2]);
    assert!(
        !o.stdout.contains(['\u{1b}', '\u{7}', '\r']),
        "{:?}",
        o.stdout
    );
}

/// `digest --json` must parse, and its `canonicalJson` must be the text `sha256Hex` is the
/// hash of: a manifest string holding DEL, a C1 control or a bidirectional override (which
/// JCS, like serde_json, leaves unescaped) printed as `\u{7f}`, no JSON escape, so the
/// output did not parse (`--lines --json` likewise).
#[test]
fn s17_2_json_output_parses_whatever_the_manifest_strings_hold() {
    let manifest = r#"{"version":"0.5","d":"x\u007fy\u202ez\u0085"}"#;
    for args in [
        &["digest", "--json", "-"][..],
        &["digest", "--lines", "--json", "-"],
    ] {
        let o = run(args, Some(manifest));
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: Value = serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", o.stdout));
        let canonical = v["canonicalJson"].as_str().unwrap();
        assert_eq!(
            canonical,
            "{\"d\":\"x\u{7f}y\u{202e}z\u{85}\",\"version\":\"0.5\"}"
        );
        assert!(
            !o.stdout.contains(['\u{202e}', '\u{7f}', '\u{85}']),
            "{}",
            o.stdout
        );
    }
}

/// `--canonical` prints the JCS text the revision is the hash of, byte for byte, when the
/// output is not a terminal: a manifest string holding DEL, a C1 control or a bidirectional
/// override (which JCS leaves unescaped) was printed as `\u{7f}` text, so hashing the
/// printed text did not give `sha256Hex`. On a terminal they are still shown as escapes.
#[test]
fn s17_2_canonical_output_is_the_hashed_bytes() {
    let manifest = r#"{"version":"0.5","d":"x\u007fy\u202ez\u0085"}"#;
    let canonical = "{\"d\":\"x\u{7f}y\u{202e}z\u{85}\",\"version\":\"0.5\"}";
    let o = run(&["digest", "--canonical", "-"], Some(manifest));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{canonical}\n"));
    let o = run(&["digest", "--lines", "--canonical", "-"], Some(manifest));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{canonical}\n"));
}

/// Past the byte bound, what an input holds once parsed is bounded too: a text of small
/// objects holds some 80 times its size parsed, so a 64 MiB file of `{"a":0}` is estimated to
/// take the tool past 5 GB (6 MB of them: about 500 MB; 64 MiB of `0,` measured 1.1 GB). An input whose parsed cost
/// (`mcpl::jsonrpc::parsed_cost`) is over four times the library's default bound for one
/// message (as the byte bound is four times its message size) is refused before it is
/// built, exit 2, naming the bound; a `--lines` line likewise, in place (`too_costly`).
#[test]
fn an_input_past_the_parsed_cost_bound_is_refused_before_it_is_parsed() {
    let n = 4 * mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST / (mcpl::jsonrpc::OBJECT_COST + 2) + 1;
    let mut input = String::from(r#"{"version":"0.5","x":["#);
    input.push_str(&r#"{"a":0},"#.repeat(n));
    input.push_str("0]}");
    let o = run(&["digest"], Some(&input));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, "");
    assert!(
        o.stderr.contains("<stdin>: would hold more than"),
        "{}",
        o.stderr
    );
    let lines = format!("{{}}\n{input}\n{{}}\n");
    let o = run(&["digest", "--lines"], Some(&lines));
    assert_eq!(o.code, 2, "{}", o.stderr);
    let out: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(out.len(), 3, "{}", o.stdout);
    assert!(
        out[1].starts_with("error: too_costly: line 2: "),
        "{}",
        out[1]
    );
    assert!(out[0].starts_with("sha256:") && out[2].starts_with("sha256:"));
}
