//! `mcpl check`'s memory against servers that flood it (issue #20): whatever a server
//! writes, and however much faster it writes than the checker judges, the checker's peak
//! memory stays within its documented bounds (32 MiB of frames not yet judged per
//! connection, bounded findings). Each test measures the peak resident size of the checker
//! it ran (`getrusage(RUSAGE_CHILDREN)` after it is reaped), so this file runs nothing else
//! that could raise that figure: every run here is one of these floods.

#![cfg(target_os = "linux")]

use std::time::Duration;

use assert_cmd::Command;
use serde_json::{json, Value};

/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(120);

/// The most any flooded checker here may reach: the 32 MiB queue bound, the checker's own
/// ~20 MB and room for the allocator. Before the fixes the floods below took it to
/// 100–270 MB in a 10-second run and grew for as long as the session lasted.
const PEAK_BYTES: u64 = 96 * 1024 * 1024;

/// The largest peak resident size of any child this process has reaped, in bytes.
fn children_peak() -> u64 {
    // SAFETY: getrusage writes one plain struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0);
    u64::try_from(usage.ru_maxrss).unwrap() * 1024
}

/// The answer to the checker's `initialize` (id 1): MCPL 0.5 with one push set.
fn init_answer() -> String {
    json!({ "jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": "2025-06-18",
        "capabilities": { "experimental": { "mcpl": {
            "version": "0.5", "pushEvents": true,
            "featureSets": { "demo.push": { "description": "d", "uses": ["pushEvents"] } } } } },
        "serverInfo": { "name": "flood", "version": "0" } } })
    .to_string()
}

/// `mcpl check --json --quick --timeout T --watch 0` of a server that answers `initialize`
/// and then writes `line` forever (`yes`; `line` is a `printf` format, so bytes that are
/// not UTF-8 can be given as octal escapes), never reading again: exit code and report,
/// with the peak memory asserted.
fn flooded_by(line: &str, timeout: &str) -> (i32, Value) {
    flooded_with("exec yes \"$(printf \"$1\")\"", line, timeout)
}

/// [`flooded_by`] with the shell command `writer` (given `$1`) writing after `initialize`.
fn flooded_with(writer: &str, line: &str, timeout: &str) -> (i32, Value) {
    let script = format!("read -r _; printf '%s\\n' '{}'; {writer}", init_answer());
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--json",
            "--quick",
            "--timeout",
            timeout,
            "--watch",
            "0",
        ])
        .args(["--", "sh", "-c", &script, "flood"])
        .arg(line)
        .timeout(GUARD)
        .output()
        .unwrap();
    let peak = children_peak();
    let code = out.status.code().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        peak < PEAK_BYTES,
        "the checker peaked at {} MiB",
        peak / (1024 * 1024)
    );
    (code, doc)
}

fn detail<'a>(doc: &'a Value, id: &str) -> (&'a str, &'a str) {
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id}: {doc:#}"));
    (c["status"].as_str().unwrap(), c["detail"].as_str().unwrap())
}

/// Lines that are not UTF-8 (two bytes each) are discarded by the transport; their events
/// (a reason string each) had been counted as costing nothing, so the queue of frames not
/// yet judged grew without bound whenever the server wrote faster than the checker judged.
#[test]
fn a_flood_of_lines_that_are_not_utf8_stays_within_the_queue_bound() {
    let (code, doc) = flooded_by("\\377", "2");
    let (status, detail) = detail(&doc, "transport.frames-valid");
    assert_eq!(status, "fail", "{doc:#}");
    assert!(detail.contains("not valid UTF-8"), "{detail}");
    assert_eq!(code, 1, "{doc:#}");
}

/// `push/event` notifications from the moment `initialize` is answered, as fast as the pipe
/// takes them: each is a finding of `policy.no-privileged-before-ready` (those after the
/// grant went as a Notification are listed under `policy.notification-not-ready`, skipped:
/// a server that pushed before it says nothing of how it read it, one defect is one
/// failure). Those findings were a list of every message's method, joined into one detail
/// at the end: memory grew with every push for the whole session. The first ones are
/// quoted, the rest counted.
#[test]
fn a_flood_of_pushes_before_the_policy_is_counted_not_listed() {
    let push = json!({ "jsonrpc": "2.0", "method": "push/event", "params": {
        "featureSet": "demo.push", "eventId": "e", "timestamp": "2026-01-23T10:30:00Z",
        "payload": { "content": [ { "type": "text", "text": "x" } ] } } })
    .to_string()
    .replace('%', "%%");
    let (code, doc) = flooded_by(&push, "1");
    for (id, verdict) in [
        ("policy.no-privileged-before-ready", "fail"),
        ("policy.notification-not-ready", "skip"),
    ] {
        let (status, detail) = detail(&doc, id);
        assert_eq!(status, verdict, "{id}: {doc:#}");
        let more = detail
            .rsplit_once("and ")
            .and_then(|(_, n)| n.strip_suffix(" more"))
            .and_then(|n| n.parse::<u64>().ok());
        assert!(more.is_some_and(|n| n > 0), "{id}: {detail}");
        assert_eq!(detail.matches("push/event").count(), 32, "{id}: {detail}");
    }
    assert_eq!(code, 1, "{doc:#}");
}

/// `mcpl/manifestChanged` announcements naming domains no server may (§17.3 names three),
/// each one new, as fast as `awk` writes them: each is a shape finding, and the set of
/// announced domains the checker compares with what changed kept every name, growing for
/// the whole session. Only the three domains are kept now.
#[test]
fn a_flood_of_announcements_of_made_up_domains_keeps_no_name() {
    let writer = r#"exec awk 'BEGIN { for (i = 0; ; i++) { printf "{\"jsonrpc\":\"2.0\",\"method\":\"mcpl/manifestChanged\",\"params\":{\"revision\":\"r%d\",\"domains\":[", i; for (j = 0; j < 40; j++) printf "%s\"made-up-domain-number-%d-%d\"", (j ? "," : ""), i, j; print "]}}" } }'"#;
    let (code, doc) = flooded_with(writer, "", "1");
    let (status, detail) = detail(&doc, "manifest.changed-shape");
    assert_eq!(status, "fail", "{doc:#}");
    assert!(detail.contains("unknown domain"), "{detail}");
    assert_eq!(code, 1, "{doc:#}");
}

/// `mcpl digest --lines` answers each line as it reads it: one short error line per blank
/// input line was kept for the end before, 66 bytes of output per byte of input (4 MiB of
/// newlines held 270 MB).
#[test]
fn digest_lines_answers_each_line_as_it_reads_it() {
    let input = "\n".repeat(4 * 1024 * 1024);
    let o = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["digest", "--lines"])
        .write_stdin(input)
        .timeout(GUARD)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        o.stdout.iter().filter(|b| **b == b'\n').count(),
        4 * 1024 * 1024
    );
    let peak = children_peak();
    assert!(peak < PEAK_BYTES, "peak {} MiB", peak >> 20);
}
