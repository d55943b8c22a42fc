//! Helpers shared by the `cli_*` end-to-end tests: the `mcpl` binary, running it with its
//! output captured, and temporary input files. Each test file uses a subset of them.
#![allow(dead_code)]

use assert_cmd::Command;

/// The `mcpl` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcpl");

/// What one run of `mcpl` produced.
pub struct Out {
    /// The exit code.
    pub code: i32,
    /// Standard output, as UTF-8.
    pub stdout: String,
    /// Standard error, as UTF-8.
    pub stderr: String,
}

/// `mcpl` with colours off (`NO_COLOR`), so output compares as plain text.
pub fn mcpl() -> Command {
    let mut c = Command::new(BIN);
    c.env("NO_COLOR", "1");
    c
}

/// Runs a prepared command to completion and captures its exit code and output.
pub fn output(c: &mut Command) -> Out {
    let o = c.output().unwrap();
    Out {
        code: o.status.code().unwrap(),
        stdout: String::from_utf8(o.stdout).unwrap(),
        stderr: String::from_utf8(o.stderr).unwrap(),
    }
}

/// Runs `mcpl ARGS`, feeding `stdin` when given.
pub fn run(args: &[&str], stdin: Option<&str>) -> Out {
    let mut c = mcpl();
    c.args(args);
    if let Some(s) = stdin {
        c.write_stdin(s.to_owned());
    }
    output(&mut c)
}

/// Writes `contents` to `<test crate>_<name>` in Cargo's temporary directory (so test files
/// running in parallel never share a file) and returns its path.
pub fn temp_file(name: &str, contents: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}_{name}", env!("CARGO_CRATE_NAME")));
    std::fs::write(&path, contents).unwrap();
    path.to_string_lossy().into_owned()
}

/// The ids of the checks with `status` in a `check --json` / `check-host --json` report.
pub fn ids_with(doc: &serde_json::Value, status: &str) -> std::collections::BTreeSet<String> {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == status)
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The output README.md shows under `$ COMMAND` in a `console` block: the lines after it up
/// to the next `$ ` line or the block's end, each ending in `\n`. Panics if the README has
/// no such command, so a test that pins a README example fails when the example moves.
pub fn readme_output(command: &str) -> String {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let mut lines = readme.lines();
    let prompt = format!("$ {command}");
    assert!(lines.any(|l| l == prompt), "README.md shows no `{prompt}`");
    let mut out = String::new();
    for l in lines.take_while(|l| !l.starts_with("$ ") && !l.starts_with("```")) {
        out.push_str(l);
        out.push('\n');
    }
    out
}
