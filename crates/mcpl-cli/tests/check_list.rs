//! README.md's check tables and `--list` agree: every check `mcpl check` and `mcpl check-host`
//! can report is in the README with its section and meaning, in catalogue order, and the
//! README lists no check the checkers do not have (check ids are a published contract).

use std::path::Path;
use std::process::Command;

/// One check: id, section, what conforms.
type Row = (String, String, String);

/// `mcpl COMMAND --list`, read back into rows (`ID  SECTION  TITLE`, padded columns).
fn listed(command: &str) -> Vec<Row> {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([command, "--list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{command} --list: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|line| {
            let (id, rest) = line.split_once(' ').unwrap();
            let (section, title) = rest.trim_start().split_once(' ').unwrap();
            (
                id.to_owned(),
                section.to_owned(),
                title.trim_start().to_owned(),
            )
        })
        .collect()
}

/// The rows of the README table after the line `<!-- checks: COMMAND -->` (its header and
/// separator skipped).
fn documented(command: &str) -> Vec<Row> {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let readme = std::fs::read_to_string(path).unwrap();
    let marker = format!("<!-- checks: {command} -->");
    assert_eq!(readme.matches(&marker).count(), 1, "{marker} in README.md");
    let after = readme.split_once(&marker).unwrap().1;
    after
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "a table row of three cells: {l}");
            let id = cells[0].trim_matches('`');
            (id.to_owned(), cells[1].to_owned(), cells[2].to_owned())
        })
        .collect()
}

#[test]
fn readme_check_tables_are_the_listed_catalogues() {
    for command in ["check", "check-host"] {
        let (listed, documented) = (listed(command), documented(command));
        for row in &listed {
            assert!(
                documented.contains(row),
                "README.md lacks (or words differently) {command}'s {row:?}"
            );
        }
        for row in &documented {
            assert!(
                listed.contains(row),
                "README.md documents {row:?}, which `mcpl {command} --list` does not print"
            );
        }
        assert_eq!(listed, documented, "{command}: the order differs");
    }
}

/// The count the README's check-host paragraph states is the catalogue's.
#[test]
fn readme_states_the_check_host_count() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let readme = std::fs::read_to_string(path).unwrap();
    let n = listed("check-host").len();
    let said = format!("`--list` prints its {n} checks");
    assert!(readme.contains(&said), "README.md should say {said:?}");
}
