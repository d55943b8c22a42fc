//! README.md's examples are runnable as written: every `console` example of a command that
//! runs offline (`digest`, `validate`, `diff`, `grant`, `uri`, `vectors`), and the `check` of
//! `examples/my_server.py`, is run from the repository's root with its input files there,
//! and prints what the README shows. In the README's output, `…` stands for any text within
//! a line, and a line that is only `…` for any number of lines. The live examples (`serve`,
//! `check-host`, `inspect`, the reference server's `check`) are exercised by their own tests.

use std::path::Path;
use std::process::Command;

/// The repository's root, where the README's commands run.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Each `$ COMMAND` of a `console` block of README.md with the lines shown after it.
fn examples() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_console = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_console = line == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        match (line.strip_prefix("$ "), out.last_mut()) {
            (Some(command), _) => out.push((command.to_owned(), Vec::new())),
            (None, Some((_, shown))) => shown.push(line.to_owned()),
            (None, None) => {}
        }
    }
    out
}

/// Whether the README runs `command` here: the offline tools, and `check` of the example
/// server (which needs `python3`).
fn runs_here(command: &str) -> bool {
    let offline = ["digest", "validate", "diff", "grant", "uri", "vectors"]
        .iter()
        .any(|tool| command.contains(&format!("mcpl {tool}")));
    offline || command.starts_with("mcpl check -- python3 examples/")
}

/// Whether `text` matches `pattern`, where each `…` matches any text.
fn line_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Whether the lines `text` match the README's lines `shown` (a line `…` matches any run of
/// lines, the other `…`s as in [`line_matches`]).
fn lines_match(shown: &[String], text: &[&str]) -> bool {
    match shown.split_first() {
        None => text.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=text.len()).any(|skip| lines_match(rest, &text[skip..]))
        }
        Some((first, rest)) => match text.split_first() {
            Some((line, more)) => line_matches(first, line) && lines_match(rest, more),
            None => false,
        },
    }
}

#[test]
fn every_offline_example_prints_what_the_readme_shows() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_mcpl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ran: Vec<(String, Vec<String>)> = examples()
        .into_iter()
        .filter(|(command, _)| runs_here(command))
        .collect();
    // The examples whose input files are in the repository are among them.
    for must in [
        "mcpl digest examples/manifest.json",
        "mcpl validate examples/invalid-manifest.json",
        "mcpl diff examples/old.json examples/new.json",
        "mcpl grant --advertised examples/manifest.json --allow 'channels.*' pushEvents",
        "mcpl check -- python3 examples/my_server.py",
    ] {
        assert!(
            ran.iter().any(|(c, _)| c == must),
            "README.md shows no `$ {must}`"
        );
    }
    assert!(ran.len() >= 10, "{ran:?}");
    // `.ci/run` installs Python; elsewhere, without it, its example is left out, saying so.
    let python = Command::new("python3").arg("--version").output().is_ok();
    assert!(
        python || std::env::var("CI").as_deref() != Ok("true"),
        "python3 is needed for README.md's check example"
    );
    for (command, shown) in &ran {
        if !python && command.contains("python3") {
            eprintln!("skipped `{command}`: no python3 on this machine");
            continue;
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{command} 2>&1"))
            .current_dir(root())
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env_remove("MCPL_DIGEST_VECTORS")
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines_match(shown, &lines),
            "`{command}` printed\n{text}\nwhere README.md shows\n{}",
            shown.join("\n")
        );
    }
}

#[test]
fn the_readme_patterns_match_as_documented() {
    assert!(line_matches("a…c", "abbbc"));
    assert!(line_matches("a…", "a"));
    assert!(!line_matches("a…c", "abd"));
    assert!(!line_matches("abc", "abcd"));
    let shown: Vec<String> = ["x", "…", "z"].iter().map(|s| s.to_string()).collect();
    assert!(lines_match(&shown, &["x", "z"]));
    assert!(lines_match(&shown, &["x", "y", "y", "z"]));
    assert!(!lines_match(&shown, &["x", "y"]));
}
