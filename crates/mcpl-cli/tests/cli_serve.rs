//! `mcpl serve`: argument handling. The reference server (`mcpl::reference`) has not landed
//! in this build, so `serve` must say so clearly and exit 2 rather than pretend to run.

use assert_cmd::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .env("NO_COLOR", "1")
        .args(args)
        .write_stdin("")
        .output()
        .unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[test]
fn serve_without_reference_server_exits_2_with_a_clear_message() {
    for args in [
        &["serve"][..],
        &["serve", "--stdio"],
        &["serve", "--tcp", "127.0.0.1:0"],
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.contains("not available in this build"), "{stderr}");
    }
}

#[test]
fn serve_takes_at_most_one_transport() {
    let (code, _, stderr) = run(&["serve", "--stdio", "--tcp", "127.0.0.1:0"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
