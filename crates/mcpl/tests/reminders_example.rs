//! Issue #21's must-show: the reminders example (`examples/reminders.rs`) passes `mcpl check`
//! with its push (§9), hook (§10.1) and manifest change (§17.3) exercised, so their checks
//! pass rather than skip. `cargo test --workspace` builds both the example and the checker.
#![cfg(feature = "runtime")]

use std::path::PathBuf;

/// `target/<profile>/<rel>`, where this test runs from `target/<profile>/deps`.
fn built(rel: &str, hint: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows where it runs from");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let bin = profile.join(format!("{rel}{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} is missing: {hint}", bin.display());
    bin
}

/// The call at 0 s is pushed at once (push checks); the one an hour away is still pending
/// when the checker asks `context/beforeInference` (hook checks); the first reminder enables
/// `snooze` and declares `reminders.snooze` with a typed manifest edit (manifest checks).
#[test]
fn the_reminders_example_passes_mcpl_check_with_push_hook_and_manifest_exercised() {
    let example = built(
        "examples/reminders",
        "`cargo test -p mcpl` builds the examples",
    );
    let checker = built("mcpl", "run `cargo test --workspace`, which builds it");
    let out = std::process::Command::new(checker)
        .args(["check", "--json", "--timeout", "2"])
        .args(["--call", "remind", r#"{"text":"tea","seconds":0}"#])
        .args(["--call", "remind", r#"{"text":"stretch","seconds":3600}"#])
        .arg("--")
        .arg(example)
        .output()
        .expect("mcpl check runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "--json report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["summary"]["fail"], 0, "{report:#}");
    assert_eq!(report["summary"]["warn"], 0, "{report:#}");
    let status = |id: &str| {
        report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == id))
            .map(|c| c["status"].clone())
    };
    for id in [
        "push.event-is-request",
        "push.event-shape",
        "push.feature-set-declared",
        "hooks.injection-shape",
        "hooks.injection-positions",
        "hooks.feature-set-declared",
        "manifest.changed-shape",
        "manifest.changed-revision-matches",
        "manifest.changed-domains-match",
        "grant.narrowed-respected",
        "featuresets.narrowed-respected",
    ] {
        assert_eq!(status(id), Some("pass".into()), "{id}: {report:#}");
    }
}
