//! `mcpl check` against hostile servers (issue #20): whatever the server does, the run ends
//! within its documented bound, leaves no process of the spawned target behind, and writes a
//! bounded report.

use std::path::PathBuf;
use std::process::Command as StdCommand;
use std::time::Duration;

use assert_cmd::Command;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(90);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Whether process `pid` still exists (a zombie waiting to be reaped does not count: it
/// runs nothing and holds nothing).
#[cfg(target_os = "linux")]
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// `mcpl check` of `sh -c SCRIPT`, where the script forks `sleep` with SIGTERM ignored and
/// its stdout (the checker's pipe) inherited, and records its pid in a file. After the
/// checker exits, no such process may remain.
#[cfg(target_os = "linux")]
fn leaves_no_process(name: &str, then: &str, codes: &[i32]) {
    let pids = scratch(name);
    let script = format!(
        "trap '' TERM; (exec sleep 600 2>/dev/null) & echo $! >> '{}'; {then}",
        pids.display()
    );
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--json",
            "--timeout",
            "1",
            "--watch",
            "0",
            "--quick",
        ])
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    let recorded = std::fs::read_to_string(&pids).unwrap();
    let left: Vec<&str> = recorded.split_whitespace().filter(|p| alive(p)).collect();
    for pid in &left {
        // Clean up after a failing run.
        let _ = StdCommand::new("kill").args(["-KILL", pid]).status();
    }
    assert!(
        !recorded.trim().is_empty(),
        "the fixture recorded its child"
    );
    assert!(left.is_empty(), "{name}: processes left behind: {left:?}");
    assert!(codes.contains(&code), "{name}: exit {code}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_forked_child_ignoring_sigterm_and_holding_stdout_does_not_outlive_the_check() {
    // The server itself also ignores SIGTERM (inherited) and serves the whole check.
    leaves_no_process("serving.pids", &format!("exec '{FIXTURE}' good"), &[0, 1]);
    // The server exits at once; its child keeps the stdout pipe open. Exiting before
    // answering `initialize` is a startup error (issue #18 item 8): exit 2.
    leaves_no_process("exiting.pids", "exit 0", &[2]);
}

/// `mcpl check --quick --timeout 1 --watch 0 ARGS`: exit code, stdout.
fn check_quick(args: &[&str]) -> (i32, Vec<u8>) {
    check_quick_within("1", args)
}

/// [`check_quick`] with `--timeout timeout` (seconds).
fn check_quick_within(timeout: &str, args: &[&str]) -> (i32, Vec<u8>) {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--timeout", timeout, "--watch", "0", "--quick"])
        .args(args)
        .timeout(GUARD)
        .output()
        .unwrap();
    (out.status.code().unwrap(), out.stdout)
}

fn frames_detail(doc: &serde_json::Value) -> String {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "transport.frames-valid")
        .unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A server that writes non-JSON lines as fast as the pipe takes (`yes`), never anything
/// else: the flood is summarised, the report and the transcript stay bounded.
#[cfg(unix)]
#[test]
fn a_junk_flood_is_summarised_and_the_report_and_transcript_stay_bounded() {
    let line = "junk ".repeat(200);
    let transcript = scratch("flood.jsonl");
    let transcript_arg = transcript.display().to_string();
    let (code, json) = check_quick(&[
        "--json",
        "--transcript",
        &transcript_arg,
        "--",
        "yes",
        &line,
    ]);
    assert!(json.len() < 1_000_000, "report of {} bytes", json.len());
    let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(code, 1, "{doc:#}");
    let detail = frames_detail(&doc);
    assert!(
        detail.contains("frames of junk (not JSON), first 3 shown"),
        "{detail}"
    );
    assert!(detail.len() <= 2048 + 32, "{} bytes", detail.len());
    // The transcript: at most 100 junk frames written, the rest counted in a last note.
    let text = std::fs::read_to_string(&transcript).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let junk = lines.iter().filter(|l| l["message"].is_string()).count();
    assert!(junk <= 100, "{junk} junk frames written");
    let note = lines.last().unwrap();
    assert_eq!(note["direction"], "note", "{note}");
    assert!(note["omitted"]["junk"].as_u64().unwrap() > 0, "{note}");

    // The terminal report: each detail is cut to 200 characters.
    let (code, text) = check_quick(&["--", "yes", &line]);
    assert_eq!(code, 1);
    let text = String::from_utf8(text).unwrap();
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(longest < 300, "a report line of {longest} characters");
    assert!(text.contains("bytes cut)"), "{text}");
}

/// 100,000 `ping` requests after `initialize`: every one is legitimate, the run passes,
/// and the report stays small. The policy answer comes after the 100,000 answers, which a
/// loaded machine writes in a debug build in more than 1 s: `--timeout 10`, or the test
/// would judge the machine's speed (each step still ends at its answer).
#[test]
fn a_ping_flood_gets_a_small_report_and_a_pass() {
    let (code, json) = check_quick_within("10", &["--json", "--", FIXTURE, "ping-flood"]);
    assert!(json.len() < 1_000_000, "report of {} bytes", json.len());
    let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["summary"]["fail"], 0, "{doc:#}");
}

/// A server that answers `initialize` and then nothing, while a forked writer trickles one
/// notification every 200 ms forever (never finishing anything): every run ends within its
/// documented bound, `N × (43 × timeout + 5 × watch + scenario + 2.5 s)` (`mcpl check
/// --help`), here 2 × (43 × 0.5 + 2.5) = 48 s; the guard only catches a hung run.
#[cfg(unix)]
#[test]
fn a_trickling_server_does_not_keep_the_run_alive() {
    let script = format!(
        "(while :; do echo '{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\
         \"params\":{{\"level\":\"info\",\"data\":\"still here\"}}}}'; sleep 0.2; done) & \
         exec '{FIXTURE}' silent"
    );
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--json", "--timeout", "0.5", "--watch", "0"])
        .args(["--sessions", "2", "--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{doc:#}");
    assert!(doc["checks"].as_array().unwrap().len() > 10, "{doc:#}");
}

/// A manifest of 100,004 feature sets (§6.1 sets no number): the checker counts them before
/// building any and, past the 1,024 a library host reads
/// (`manifest::DEFAULT_MAX_FEATURE_SETS`), warns under `manifest.feature-set-count` that
/// library hosts refuse it, judges none of its sets and sends no policy (a library host
/// grants nothing), while the MCP-level probe still runs. Before, the checker built and
/// judged every set (755 MB, 48 s in a debug build) and had no such check.
#[test]
fn a_manifest_past_the_feature_set_bound_warns_and_is_not_built() {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--json",
            "--quick",
            "--timeout",
            "20",
            "--watch",
            "0",
        ])
        .args(["--", FIXTURE, "many-sets"])
        .timeout(GUARD)
        .output()
        .unwrap();
    assert!(
        out.stdout.len() < 1_000_000,
        "report of {} bytes",
        out.stdout.len()
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |id: &str| -> serde_json::Value {
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id}: {doc:#}"))
            .clone()
    };
    let count = check("manifest.feature-set-count");
    assert_eq!(count["status"], "warn", "{doc:#}");
    let detail = count["detail"].as_str().unwrap();
    assert!(detail.contains("100004 feature sets"), "{detail}");
    assert!(detail.contains("library hosts refuse"), "{detail}");
    for id in [
        "manifest.feature-sets-shape",
        "manifest.uses-valid",
        "policy.request-answered",
        "policy.receipt-matches-derivation",
    ] {
        let c = check(id);
        assert_eq!(c["status"], "skip", "{id}: {doc:#}");
        assert!(
            c["detail"]
                .as_str()
                .unwrap()
                .contains("manifest.feature-set-count"),
            "{id}: {doc:#}"
        );
    }
    assert_eq!(check("initialize.version")["status"], "pass", "{doc:#}");
    assert_eq!(
        check("rpc.unknown-method-errors")["status"],
        "pass",
        "{doc:#}"
    );
    assert_eq!(doc["summary"]["fail"], 0, "{doc:#}");
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
}

/// Issue #20: a frame whose parsed form would be many times its text (250,000 small objects
/// in 2 MB) is discarded unbuilt, reported under `transport.frames-valid` as the oversized
/// line is, and the run completes.
#[test]
fn a_frame_over_the_parsed_cost_bound_is_discarded_unbuilt_and_reported() {
    let (code, doc) = check_quick(&["--json", "--", FIXTURE, "costly"]);
    let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
    let frames = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "transport.frames-valid")
        .unwrap_or_else(|| panic!("no transport.frames-valid: {doc:#}"))
        .clone();
    assert_eq!(frames["status"], "fail", "{doc:#}");
    let detail = frames["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("units parsed"), "{detail}");
    assert_eq!(code, 1, "{doc:#}");
}

/// The checker's peak resident memory (`VmHWM`, read from `/proc` until it exits) while it
/// checks `-- SERVER…` (`--quick`), and its exit code; fails past [`GUARD`].
#[cfg(target_os = "linux")]
fn peak_rss_kib(server: &[&str]) -> (u64, Option<i32>) {
    peak_rss_kib_within("2", server)
}

/// [`peak_rss_kib`] with `--timeout timeout` (seconds).
#[cfg(target_os = "linux")]
fn peak_rss_kib_within(timeout: &str, server: &[&str]) -> (u64, Option<i32>) {
    let mut child = StdCommand::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([
            "check",
            "--json",
            "--quick",
            "--timeout",
            timeout,
            "--watch",
            "0",
        ])
        .arg("--")
        .args(server)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let guard = std::time::Instant::now() + GUARD;
    let mut peak = 0;
    loop {
        // The peak so far: nothing is missed between two reads.
        if let Ok(s) = std::fs::read_to_string(&status) {
            let hwm = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak = peak.max(hwm.unwrap_or(0));
        }
        if let Some(code) = child.try_wait().unwrap() {
            return (peak, code.code());
        }
        if std::time::Instant::now() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the check never ended (its memory peaked at {} MiB)",
                peak / 1024
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Notifications under 40 distinct 8 MiB method names: the checker counts the methods a
/// server sends by name (for `waitFor` steps), and kept each whole name (320 MiB here; up to
/// 256 names of 16 MiB, 4 GiB). A name longer than any `waitFor` may give is not counted
/// now, and the run stays within the frame queue's bound. The policy answer comes after the
/// 320 MiB, which a loaded machine reads in a debug build in more than 2 s: `--timeout 10`,
/// or the test would judge the machine's speed (each step still ends at its answer).
#[cfg(target_os = "linux")]
#[test]
fn method_names_the_checker_counts_are_bounded() {
    let (peak, code) = peak_rss_kib_within("10", &[FIXTURE, "long-methods"]);
    assert_eq!(code, Some(0), "it ran (the names only warn)");
    assert!(
        peak < 200 * 1024,
        "the checker peaked at {} MiB",
        peak / 1024
    );
}

/// Pushes under 40 distinct, undeclared 8 MiB feature-set names: the checker remembers the
/// sets it sees in use (later sessions disable them in turn), up to 64, and kept each whole
/// name (320 MiB here, 410 MiB at its peak; 64 of 16 MiB would be 1 GiB). Only a declared
/// set is remembered now (an undeclared one cannot be disabled), and the run stays within
/// the frame queue's bound; the pushes still fail `push.feature-set-declared`.
#[cfg(target_os = "linux")]
#[test]
fn feature_set_names_the_checker_remembers_are_bounded() {
    let (peak, code) = peak_rss_kib(&[FIXTURE, "long-sets"]);
    assert_eq!(code, Some(1), "the undeclared sets fail");
    assert!(
        peak < 200 * 1024,
        "the checker peaked at {} MiB",
        peak / 1024
    );
}

/// A server that floods requests and never reads what the checker writes (`yes` after its
/// `initialize` answer): the checker answers each, and once its answers fill the pipe its
/// writer waits for good. The answers were queued without bound while it read on, and when
/// the session ended the checker waited for that writer for ever. Now it stops reading
/// while `conn::UNSENT_BYTES` of its own frames wait, and gives up on writing them once the
/// session ends (within `--timeout`), so the run ends within its bound (`mcpl check --help`),
/// here 43 × 2 + 2.5 s; the guard only catches a hung run.
#[cfg(target_os = "linux")]
#[test]
fn a_server_that_never_reads_neither_holds_the_checker_nor_fills_its_memory() {
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let script = format!("read line; echo '{init}'; exec yes '{ping}'");
    let (peak, code) = peak_rss_kib(&["sh", "-c", &script]);
    assert_eq!(
        code,
        Some(1),
        "a complete run: its requests went unanswered"
    );
    assert!(
        peak < 200 * 1024,
        "the checker peaked at {} MiB",
        peak / 1024
    );
}
