//! `mcpl check`'s report is one a server author can act on (issue #18 item 7): on a
//! terminal each check is shown once, a cascade of timeouts is named as one, a detail line
//! is bounded, and a skip names its real cause.

mod common;

use std::process::Command as StdCommand;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
const MCPL: &str = env!("CARGO_BIN_EXE_mcpl");
/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

/// `mcpl check --timeout 1 --watch 0 --quick ARGS` with stdout and stderr piped: (exit
/// code, stdout, stderr).
fn check(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--timeout", "1", "--watch", "0", "--quick"])
        .args(args)
        .timeout(GUARD)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn check_json(args: &[&str]) -> Value {
    let (_, stdout, _) = check(&[&["--json"][..], args].concat());
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn detail<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_else(|| panic!("{id} missing: {doc:#}"))
}

/// What a terminal shows of `raw` output: per line, what is left after the last carriage
/// return (the live progress line is rewritten in place), without escape sequences.
fn screen(raw: &str) -> Vec<String> {
    raw.split('\n')
        .map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let visible = line.rsplit('\r').next().unwrap_or(line);
            visible.replace("\u{1b}[2K", "")
        })
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// On a terminal (a pseudo-terminal from `script(1)`) the live progress line is replaced in
/// place and erased before the report: every check id is on screen exactly once.
#[test]
fn on_a_terminal_each_check_is_shown_once() {
    let cmd = format!("{MCPL} check --timeout 1 --watch 0 --quick -- {FIXTURE} good");
    let out = match StdCommand::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .output()
    {
        Ok(o) => o,
        // No script(1) (util-linux) on this machine: there is no terminal to test on. Under
        // CI the test must run (`.ci/run` installs util-linux's bsdutils when it is missing).
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "under CI this test must run: cannot run script(1): {e}"
            );
            return eprintln!("skipped: cannot run script(1): {e}");
        }
    };
    let raw = String::from_utf8_lossy(&out.stdout);
    let lines = screen(&raw);
    for id in ["initialize.answered", "push.event-shape", "manifest.fetch"] {
        let shown = lines.iter().filter(|l| l.contains(id)).count();
        assert_eq!(shown, 1, "{id} shown {shown} times:\n{}", lines.join("\n"));
    }
}

/// With stderr not a terminal there is no progress at all.
#[test]
fn without_a_terminal_there_is_no_progress_line() {
    let (code, stdout, stderr) = check(&["--", FIXTURE, "good"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(!stderr.contains("initialize.answered"), "{stderr}");
    assert_eq!(stdout.matches("initialize.answered").count(), 1);
}

/// A server silent from its `initialize` answer on: the first requests left unanswered are
/// the quiet windows' `ping`s, which no check judges, so the first judged request is where
/// the defect is reported, and every later timeout follows from it. The cascades named the
/// `ping` as "reported there", which no check was, and `summary.defects` counted none.
#[test]
fn a_server_silent_from_the_start_has_its_silence_reported_once() {
    let init = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": "2025-06-18",
        "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
        "serverInfo": { "name": "silent", "version": "0" } } });
    let script = format!("read -r _; printf '%s\\n' '{init}'; while read -r _; do :; done");
    let doc = check_json(&["--", "sh", "-c", &script]);
    let failed: Vec<&Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    let roots: Vec<&Value> = failed
        .iter()
        .copied()
        .filter(|c| c.get("followsFrom").is_none())
        .collect();
    assert_eq!(roots.len(), 1, "{doc:#}");
    let root = roots[0]["id"].as_str().unwrap();
    let detail = roots[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("no response within the timeout"),
        "{detail}"
    );
    assert!(
        detail.contains("ping"),
        "the ping before it is named: {detail}"
    );
    assert!(failed.len() > 1, "{doc:#}");
    for c in &failed {
        let d = c["detail"].as_str().unwrap();
        assert!(!d.contains("ping was the first"), "{d}");
        if c["id"] != root {
            assert_eq!(c["followsFrom"], root, "{doc:#}");
        }
    }
    assert_eq!(doc["summary"]["defects"].as_u64(), Some(1), "{doc:#}");
}

/// A server that stops answering: the first unanswered request fails on its own; every
/// later timeout says it follows from that, and the summary counts it apart.
#[test]
fn a_cascade_of_timeouts_is_named() {
    // The report as JSON and as text: two independent runs, each waiting out a timeout per
    // request the server leaves unanswered, so they run at once.
    let (doc, (code, stdout, _)) = std::thread::scope(|scope| {
        let text = scope.spawn(|| check(&["--", FIXTURE, "silent"]));
        let doc = check_json(&["--", FIXTURE, "silent"]);
        (doc, text.join().expect("the text run"))
    });
    let cascade: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .filter_map(|c| c["detail"].as_str())
        .filter(|d| d.contains("no answer since the server stopped answering after"))
        .collect();
    assert!(!cascade.is_empty(), "{doc:#}");
    for d in &cascade {
        // The last request answered, and the first left unanswered, where it is counted.
        assert!(d.contains("(a result)"), "names the last answer: {d}");
        assert!(d.contains("was the first request left unanswered"), "{d}");
    }
    // In --json too, one defect is counted once: each cascaded check names the check that
    // reports the defect (`followsFrom`), which fails on its own, and `summary.defects`
    // counts the failures that are not cascades.
    let checks = doc["checks"].as_array().unwrap();
    let failed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "fail").collect();
    let cascaded: Vec<&Value> = failed
        .iter()
        .copied()
        .filter(|c| {
            c["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("stopped answering after")
        })
        .collect();
    let roots: std::collections::BTreeSet<&str> = cascaded
        .iter()
        .map(|c| {
            c["followsFrom"]
                .as_str()
                .expect("followsFrom on a cascaded check")
        })
        .collect();
    assert_eq!(roots.len(), 1, "{doc:#}");
    let root = roots.iter().next().copied().unwrap_or_default();
    let root_check = checks.iter().find(|c| c["id"] == root).unwrap();
    assert_eq!(root_check["status"], "fail", "{doc:#}");
    assert!(root_check.get("followsFrom").is_none(), "{doc:#}");
    assert_eq!(
        doc["summary"]["defects"].as_u64(),
        Some((failed.len() - cascaded.len()) as u64),
        "{doc:#}"
    );
    assert_eq!(doc["summary"]["fail"].as_u64(), Some(failed.len() as u64));
    assert_eq!(code, 1);
    assert!(
        stdout.contains(&format!(
            "only because the server had stopped answering after {root}"
        )),
        "{stdout}"
    );
}

/// A skip after a refused policy names the refusal, not a capability "not granted".
#[test]
fn a_skip_names_its_real_cause() {
    let doc = check_json(&["--", FIXTURE, "refusal-no-fallback"]);
    for id in [
        "state.rollback-unknown-checkpoint",
        "lifecycle.defensive",
        "channels.close-unknown-error",
        "channels.list-answered",
    ] {
        let d = detail(&doc, id);
        assert!(d.contains("no receipt was accepted"), "{id}: {d}");
        assert!(!d.contains("not granted"), "{id}: {d}");
    }
}
