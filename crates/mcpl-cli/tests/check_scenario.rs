//! `mcpl check` scenario steps (`--call`, `--call-once`, `--enable`, `--scenario`): a server
//! that only starts work after a tool call is exercised with `--call`, and bad steps are
//! usage errors (exit 2), never a panic or a hang.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use common::{ids_with, temp_file};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn mcpl_check(args: &[&str]) -> Run {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--timeout", "1", "--watch", "0"])
        .args(args)
        .timeout(GUARD)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `mcpl check --json ARGS -- FIXTURE MODE`.
fn scripted(mode: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", FIXTURE, mode]);
    let run = mcpl_check(&all);
    let doc = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", run.stdout));
    (run.code, doc)
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

fn detail<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_else(|| panic!("no {id} in {doc:#}"))
}

/// What the `after-call` fixture does only once its tool is called: push, inject under its
/// hook's set, announce a manifest change.
const TRIGGERED: &[&str] = &[
    "push.event-is-request",
    "push.event-shape",
    "push.feature-set-declared",
    "hooks.feature-set-declared",
    "manifest.changed-shape",
    "manifest.changed-revision-matches",
    "manifest.changed-domains-match",
];

/// Without a trigger the fixture does nothing, and the skips say how to give one.
#[test]
fn a_server_that_waits_for_a_tool_call_is_skipped_with_a_hint() {
    let (code, doc) = scripted("after-call", &[]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let skipped = ids_with(&doc, "skip");
    for id in TRIGGERED {
        assert!(skipped.contains(*id), "{id}: {doc:#}");
    }
    let why = detail(&doc, "push.event-shape");
    assert!(
        why.contains("server sent no push/event") && why.contains("--call NAME ARGS"),
        "{why}"
    );
    assert!(detail(&doc, "manifest.changed-shape").contains("--call"));
    assert!(doc.get("scenario").is_none(), "{doc:#}");
    assert_eq!(code, 0);
}

/// `--call remind ARGS` after the policy exchange starts the work, and it is judged; the
/// call runs in every session whose grant has `tools` (and is not sent in the others).
#[test]
fn call_exercises_what_a_tool_call_starts() {
    let (code, doc) = scripted("after-call", &["--call", "remind", r#"{"text":"tea"}"#]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let passed = ids_with(&doc, "pass");
    for id in TRIGGERED {
        assert!(passed.contains(*id), "{id}: {doc:#}");
    }
    let steps = doc["scenario"].as_array().unwrap();
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(steps.len(), sessions.len(), "{doc:#}");
    assert_eq!(steps[0]["session"], 1);
    assert_eq!(steps[0]["sent"], true);
    assert_eq!(steps[0]["step"], r#"call remind {"text":"tea"}"#);
    assert_eq!(steps[0]["outcome"], "answered: reminder set");
    for (step, session) in steps.iter().zip(sessions) {
        let tools = session["grant"]["effectiveCapabilities"]
            .as_array()
            .is_some_and(|g| g.iter().any(|c| c == "tools"));
        assert_eq!(step["sent"], tools, "{step} in {}", session["label"]);
        if !tools {
            assert_eq!(
                step["outcome"],
                "not sent: tools is not granted in this session"
            );
        }
    }
    assert_eq!(code, 0);
    // --call-once: the first session only.
    let (code, doc) = scripted(
        "after-call",
        &["--call", "remind", r#"{"text":"tea"}"#, "--call-once"],
    );
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(doc["scenario"].as_array().map(Vec::len), Some(1), "{doc:#}");
    assert!(doc["sessions"].as_array().unwrap().len() > 1);
    assert_eq!(code, 0);
}

/// A scenario file: the call, then a `waitFor` satisfied by the push the call started (it
/// arrived while the call was answered: each `waitFor` consumes one such message), then a
/// `waitFor` for something that never comes, bounded by its own timeout.
#[test]
fn scenario_file_steps_run_in_order() {
    let file = temp_file(
        "scenario_in_order.json",
        r#"[{"call": "remind", "arguments": {"text": "tea"}},
            {"waitFor": "push/event", "timeout": 1},
            {"waitFor": "channels/incoming", "timeout": 0.2},
            {"sleep": 0},
            {"publish": null}]"#,
    );
    let (code, doc) = scripted("after-call", &["--scenario", &file, "--quick"]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let outcomes: Vec<&str> = doc["scenario"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "answered: reminder set",
            "push/event arrived",
            "no channels/incoming within 0.2s",
            "slept",
            "not sent: the server registered no channel",
        ],
        "{doc:#}"
    );
    assert_eq!(code, 0);
}

/// `--enable` is sent as `enabled` in the policy Request (§5.3).
#[test]
fn enable_is_sent_in_the_policy_request() {
    let transcript = temp_file("enable_transcript.jsonl", "");
    let (code, doc) = scripted("good", &["--enable", "demo.*", "--transcript", &transcript]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(&transcript).unwrap();
    let policy = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|f| {
            f["direction"] == "sent"
                && f["message"]["method"] == "featureSets/update"
                && f["message"].get("id").is_some()
        })
        .expect("a policy Request");
    assert_eq!(
        policy["message"]["params"]["enabled"],
        serde_json::json!(["demo.*"])
    );
}

/// Each usage error is one line on stderr, nothing on stdout, exit 2; `--json` carries it.
#[test]
fn bad_steps_are_usage_errors() {
    let bad_file = temp_file("scenario_bad.json", r#"[{"cal": "remind"}]"#);
    let not_json = temp_file("scenario_not_json.json", "call remind");
    for (args, says) in [
        (
            vec!["--call", "remind", "[1]"],
            "the arguments must be a JSON object, not an array",
        ),
        (vec!["--call", "remind", "{"], "not JSON"),
        (
            vec!["--call", "nosuch", "{}"],
            r#"the server has no tool "nosuch" (tools/list names: remind)"#,
        ),
        (
            vec!["--scenario", bad_file.as_str()],
            "step 1: no step form",
        ),
        (vec!["--scenario", not_json.as_str()], "not JSON"),
        (
            vec!["--scenario", "/nonexistent/scenario.json"],
            "--scenario",
        ),
        (
            vec!["--enable", "nosuch"],
            "--enable nosuch: the server declares no such feature set",
        ),
    ] {
        let mut all = args.clone();
        all.extend_from_slice(&["--", FIXTURE, "after-call"]);
        let run = mcpl_check(&all);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        let (code, doc) = scripted("after-call", &args);
        assert_eq!(code, 2, "{args:?}");
        assert!(doc["error"].as_str().unwrap().contains(says), "{doc:#}");
    }
}

/// The README's scenario for the bundled reference server: every step is sent and
/// answered, and nothing fails.
#[test]
fn readme_reference_scenario_runs() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/reference.json");
    let run = mcpl_check(&["--json", "--scenario", file, "--call-once"]);
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let outcomes: Vec<(&str, &str)> = doc["scenario"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].as_str().unwrap(), s["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes.len(), 7, "{doc:#}");
    assert!(
        outcomes[0].1.starts_with("answered: 1 note(s)"),
        "{outcomes:?}"
    );
    assert!(
        outcomes[1].1.starts_with("answered: scheduled evt_"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[2].1, "push/event arrived");
    assert!(
        outcomes[3].1.contains(r#""delivered":true"#),
        "{outcomes:?}"
    );
    assert!(
        outcomes[4].1.contains(r#""id":"ref:lobby""#),
        "{outcomes:?}"
    );
    assert!(outcomes[5].1.contains(r#""closed":true"#), "{outcomes:?}");
    assert_eq!(outcomes[6].1, "slept");
    assert_eq!(run.code, 0);
}

/// A `tools/list` that never ends (the same `nextCursor` on every page) proves nothing about
/// which tools exist: the checker read its page bound (20), then took the names read so far
/// for the whole list and refused `--call remind` as a usage error (exit 2, "the server has
/// no tool"), without a single check run. An unfinished list is not a list: the call is
/// sent (the one rule for a server that does not answer `tools/list` at all).
#[test]
fn a_tools_list_that_never_ends_does_not_refuse_the_call() {
    let (code, doc) = scripted("pages-forever", &["--quick", "--call", "remind", "{}"]);
    assert_ne!(code, 2, "{doc:#}");
    let steps = doc["scenario"].as_array().expect("scenario steps");
    assert_eq!(steps[0]["sent"], true, "{doc:#}");
    assert_eq!(steps[0]["outcome"], "answered: called", "{doc:#}");
}
