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
