//! The crate's example, `examples/counter.rs`, run as a child process over its stdio (cargo
//! builds examples before running tests): a plain rmcp client, which knows nothing of MCPL,
//! still lists and calls its two tools (§3.2).

use std::path::PathBuf;
use std::process::Stdio;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::ServiceExt;

/// `target/<profile>/examples/counter`, next to this test's `deps/` directory.
pub fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows where it runs from");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("counter{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: `cargo test -p mcpl-rmcp` builds it",
        bin.display()
    );
    bin
}

#[tokio::test]
async fn s3_2_a_plain_rmcp_client_lists_and_calls_the_counters_tools() {
    let mut child = tokio::process::Command::new(example_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        panic!("the child's stdio is piped");
    };
    let client = ().serve((stdout, stdin)).await.expect("initialize");
    let info = client.peer_info().expect("the server introduced itself");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("counter")
    );
    // The MCPL manifest rides along under experimental, which an MCP client ignores.
    assert!(info
        .capabilities
        .experimental
        .as_ref()
        .is_some_and(|e| e.contains_key("mcpl")));
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, ["get_value", "increment"]);
    for expected in ["1", "2", "3"] {
        let r = client
            .call_tool(CallToolRequestParams::new("increment"))
            .await
            .unwrap();
        // Reaching the threshold (3) tries a push, which an MCP host never gets (§3.2).
        assert_eq!(r.content, vec![ContentBlock::text(expected)]);
    }
    let r = client
        .call_tool(CallToolRequestParams::new("get_value"))
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("3")]);
    client.cancel().await.unwrap();
    let status = child.wait().await.unwrap();
    assert!(
        status.success(),
        "the example exits cleanly when stdin closes"
    );
}

/// `target/<profile>/mcpl`, the checker `cargo test --workspace` builds beside the example.
fn checker_binary() -> PathBuf {
    let bin = example_binary()
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join(format!("mcpl{}", std::env::consts::EXE_SUFFIX)))
        .expect("the example lives in target/<profile>/examples");
    assert!(
        bin.exists(),
        "{} is missing: run the workspace's tests (`cargo test --workspace`), which build it",
        bin.display()
    );
    bin
}

/// Issue #23's must-show: `mcpl check --call increment '{}' -- <example>` passes, and the
/// call makes the push (§9), the hook's injection (§10.4) and the manifest change (§17.3)
/// happen, so their checks pass rather than skip, in every session the checker runs.
#[test]
fn the_example_passes_mcpl_check_with_push_hook_and_manifest_exercised() {
    let out = std::process::Command::new(checker_binary())
        .args(["check", "--json", "--call", "increment", "{}", "--"])
        .arg(example_binary())
        .args(["--threshold", "1"])
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
        "push.event-shape",
        "push.feature-set-declared",
        "hooks.injection-shape",
        "hooks.injection-positions",
        "hooks.feature-set-declared",
        "manifest.changed-shape",
        "manifest.changed-revision-matches",
        "manifest.changed-domains-match",
        "grant.narrowed-respected",
    ] {
        assert_eq!(status(id), Some("pass".into()), "{id}: {report:#}");
    }
    let sessions = report["sessions"].as_array().map_or(0, Vec::len);
    assert!(sessions > 1, "narrowed-grant sessions ran: {report:#}");
}

/// Issue #21: the example's `main` prints an error with `Display` ("error: …" on stderr,
/// exit 1), never `Debug` (`Error: ParseIntError { kind: InvalidDigit }`).
#[test]
fn a_bad_argument_is_printed_with_display() {
    let out = std::process::Command::new(example_binary())
        .args(["--threshold", "x"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: --threshold x: invalid digit"),
        "{stderr}"
    );
    assert!(!stderr.contains("Error: "), "Debug-printed: {stderr}");
}
