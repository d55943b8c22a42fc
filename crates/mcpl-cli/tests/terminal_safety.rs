//! What a server or a manifest file writes reaches the human reports of `mcpl check`,
//! `validate` and `inspect --repl` as text, never as terminal control: a server naming a
//! feature set `ESC ] 0 ; … BEL ESC [ 2 J` retitled the window and cleared the screen of
//! whoever checked it, and a newline in a name printed a line of the report's own shape
//! (a forged `PASS`). Each is run against a scripted hostile server (`python3`) or file.
//!
//! A spawned server's own stderr is passed through made printable too, and bounded (its
//! lines and its whole): a server that is broken or not the one the user meant to run
//! (`mcpl check -- npx some-package`) wrote OSC 52 clipboard writes, screen clears or a
//! line of megabytes straight into the user's terminal. What the checkers quote of it
//! themselves (a dead server's last lines, in the report) is made printable like the rest.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_mcpl");

/// Characters a terminal acts on: ESC, BEL, CSI as one C1 character, a right-to-left
/// override, and the carriage return that would let a line overwrite itself.
const HOSTILE: &str = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}1A\u{202e}txt.exe\r";
/// A name that, printed raw, starts a line shaped like one of the report's own.
const FORGED: &str = "x\n  PASS  forged.check  §0  all good";

fn python() -> bool {
    Command::new("python3").arg("--version").output().is_ok()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-terminal-safety-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A server answering every request with the hostile strings in every member it can.
fn hostile_server() -> PathBuf {
    let script = r#"
import sys, json
E = HOSTILE + FORGED
def send(m):
    print(json.dumps(m), flush=True)
for line in sys.stdin:
    try:
        m = json.loads(line)
    except Exception:
        continue
    if "id" not in m or "method" not in m:
        continue
    i, meth = m["id"], m["method"]
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {
            "protocolVersion": "2025-06-18",
            "serverInfo": {"name": E, "version": E},
            "capabilities": {"tools": {}, "experimental": {"mcpl": {
                "version": "0.5", "pushEvents": True,
                "featureSets": {E: {"description": E, "uses": ["pushEvents"]}}}}}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": [
            {"name": E, "description": E, "inputSchema": {"type": "object"}}]}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": E}})
"#
    .replace("HOSTILE", &serde_json::to_string(HOSTILE).unwrap())
    .replace("FORGED", &serde_json::to_string(FORGED).unwrap());
    let path = scratch("hostile_server.py");
    std::fs::write(&path, script).unwrap();
    path
}

/// Asserts `out` (a command's stdout and stderr) shows the hostile strings only as text.
fn assert_printable(what: &str, out: &str) {
    for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\r'] {
        assert!(
            !out.contains(c),
            "{what} printed {c:?} for the terminal to act on:\n{out}"
        );
    }
    assert!(
        !out.lines().any(|l| l.starts_with("  PASS  forged")),
        "{what} printed a line a server's name began as one of its own:\n{out}"
    );
}

fn run(args: &[&str], stdin: &str) -> String {
    let (out, err) = run_split(args, stdin);
    out + &err
}

/// [`run`], its stdout and stderr apart.
fn run_split(args: &[&str], stdin: &str) -> (String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap();
    (out, errs.join().unwrap())
}

#[test]
fn check_prints_a_hostile_servers_strings_as_text() {
    if !python() {
        panic!("python3 is needed for this test (CI installs it)");
    }
    let server = hostile_server();
    let out = run(
        &["check", "--timeout", "5", "--", "python3", path(&server)],
        "",
    );
    assert_printable("mcpl check", &out);
    // Shown, escaped, where it was written.
    assert!(out.contains("\\u{1b}]0;PWNED\\u{7}"), "{out}");
    assert!(out.contains("manifest.identifier-charset"), "{out}");
}

/// `--json` output is JSON whatever the server's strings hold: DEL, C1 controls and
/// bidirectional overrides, which serde_json leaves raw and the terminal guard rewrote as
/// `\u{202e}` (no JSON escape), are written as JSON escapes (review of `a2440be`: `check`,
/// `check-host` and `inspect --repl` printed reports that did not parse).
#[test]
fn json_output_parses_whatever_a_hostile_server_writes() {
    if !python() {
        panic!("python3 is needed for this test (CI installs it)");
    }
    let server = hostile_server();
    let (out, _) = run_split(
        &[
            "check",
            "--json",
            "--timeout",
            "5",
            "--",
            "python3",
            path(&server),
        ],
        "",
    );
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("check --json: {e}:\n{out}"));
    assert!(report["checks"].is_array(), "{out}");
    assert_printable("mcpl check --json", &out);
    let (out, _) = run_split(
        &[
            "inspect",
            "--repl",
            "--json",
            "--timeout",
            "5",
            "--",
            "python3",
            path(&server),
        ],
        "tools\n",
    );
    assert!(out.contains("202e"), "the tool list was printed: {out}");
    for line in out.lines().filter(|l| !l.is_empty()) {
        let _: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("inspect --repl --json: {e}: {line}"));
    }
    assert_printable("mcpl inspect --repl --json", &out);
}

#[test]
fn the_repl_prints_a_hostile_servers_strings_as_text() {
    if !python() {
        panic!("python3 is needed for this test (CI installs it)");
    }
    let server = hostile_server();
    let out = run(
        &[
            "inspect",
            "--repl",
            "--timeout",
            "5",
            "--",
            "python3",
            path(&server),
        ],
        "tools\n",
    );
    assert_printable("mcpl inspect --repl", &out);
    assert!(out.contains("\\u{202e}txt.exe"), "{out}");
}

#[test]
fn validate_and_digest_print_a_hostile_manifests_keys_as_text() {
    let name = format!("{HOSTILE}{FORGED}");
    let manifest = serde_json::json!({
        "version": "0.5",
        "pushEvents": true,
        "featureSets": { name: { "description": "d", "uses": ["pushEvents"] } }
    });
    let file = scratch("hostile_manifest.json");
    std::fs::write(&file, manifest.to_string()).unwrap();
    for cmd in ["validate", "digest"] {
        let out = run(&[cmd, path(&file)], "");
        assert_printable(cmd, &out);
        assert!(out.contains("identifier_charset"), "{cmd}: {out}");
    }
    let before = scratch("plain_manifest.json");
    std::fs::write(&before, r#"{"version":"0.5","pushEvents":true}"#).unwrap();
    let out = run(&["diff", path(&file), path(&before)], "");
    assert_printable("diff", &out);
    let out = run(&["grant", "--advertised", path(&file), "--allow", "*"], "");
    assert_printable("grant", &out);
    assert!(out.contains("\\u{1b}]0;PWNED"), "grant: {out}");
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A server that writes the hostile strings, an OSC 52 clipboard write, a line far over
/// the line bound and, given `flood`, stderr far over the total bound, then answers
/// `initialize` and every request with an error.
fn stderr_server(flood: bool) -> PathBuf {
    let script = r#"
import sys, json
E = HOSTILE
sys.stderr.write("stderr-tag " + E + "\x1b]52;c;cm0gLXJmIH4K\x07 crlf\r\n")
sys.stderr.write("long " + "y" * 200000 + " end-of-long\n")
if FLOOD:
    for i in range(100000):
        sys.stderr.write("flood line %d %s\n" % (i, "z" * 80))
sys.stderr.write("after-flood\n")
sys.stderr.flush()
def send(m):
    print(json.dumps(m), flush=True)
for line in sys.stdin:
    try:
        m = json.loads(line)
    except Exception:
        continue
    if "id" not in m or "method" not in m:
        continue
    i, meth = m["id"], m["method"]
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {
            "protocolVersion": "2025-06-18",
            "serverInfo": {"name": "s", "version": "1"},
            "capabilities": {"tools": {}}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": []}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no"}})
"#
    .replace("HOSTILE", &serde_json::to_string(HOSTILE).unwrap())
    .replace("FLOOD", if flood { "True" } else { "False" });
    let path = scratch(if flood {
        "stderr_flood.py"
    } else {
        "stderr_server.py"
    });
    std::fs::write(&path, script).unwrap();
    path
}

/// What `check` and `inspect --repl` show of a server's stderr: its escapes as text
/// (the OSC 52 clipboard write too), a CRLF line ending as a newline, and a line over
/// the line bound (4 KiB) cut and ended with `…`, the text after it in the line dropped.
#[test]
fn a_servers_stderr_is_shown_as_text_and_its_lines_bounded() {
    if !python() {
        panic!("python3 is needed for this test (CI installs it)");
    }
    let server = stderr_server(false);
    let runs = [
        (
            "mcpl check",
            run(
                &["check", "--timeout", "5", "--", "python3", path(&server)],
                "",
            ),
        ),
        (
            "mcpl inspect --repl",
            run(
                &[
                    "inspect",
                    "--repl",
                    "--timeout",
                    "5",
                    "--",
                    "python3",
                    path(&server),
                ],
                "tools\n",
            ),
        ),
    ];
    for (what, out) in runs {
        assert_printable(what, &out);
        assert!(
            out.contains("stderr-tag \\u{1b}]0;PWNED\\u{7}\\u{1b}[2J"),
            "{what}: {out}"
        );
        assert!(out.contains("\\u{1b}]52;c;"), "{what}: {out}");
        assert!(
            out.contains("crlf\n"),
            "{what}: a CRLF ending shown as a newline: {out}"
        );
        let long = out
            .lines()
            .find(|l| l.starts_with("long "))
            .unwrap_or_else(|| panic!("{what}: no long line: {out}"));
        assert!(long.ends_with('…'), "{what}: {}", long.len());
        assert!(
            long.len() <= 4096 + 3,
            "{what}: a line of {} bytes",
            long.len()
        );
        assert!(!out.contains("end-of-long"), "{what}: {out}");
        assert!(out.contains("after-flood"), "{what}: {out}");
    }
}

/// A server writing ~9 MiB of stderr: what is shown stops at the total bound (4 MiB) with
/// one line saying the rest is not shown; the server is still read (it answers and the
/// check completes).
#[test]
fn a_servers_stderr_is_shown_up_to_its_total_bound() {
    if !python() {
        panic!("python3 is needed for this test (CI installs it)");
    }
    let server = stderr_server(true);
    let out = run(
        &["check", "--timeout", "10", "--", "python3", path(&server)],
        "",
    );
    assert_printable("mcpl check", &out);
    assert!(out.contains("flood line 0 "), "{}", out.len());
    assert!(
        !out.contains("after-flood"),
        "shown past the bound: {}",
        out.len()
    );
    assert!(
        out.contains("the rest of the server's stderr is not shown"),
        "{}",
        out.len()
    );
    assert!(
        out.len() < 4 * 1024 * 1024 + 256 * 1024,
        "{} bytes",
        out.len()
    );
    assert!(out.contains("initialize"), "the check ran: {}", out.len());
}
