//! A server author who installs no `tracing` subscriber still sees the mistakes the session
//! reports (issue #21's rule: a diagnostic the user sees without extra setup). The session
//! logged each one through `tracing` only, which without a subscriber goes nowhere: a
//! panicking tool was answered `-32603` and the author was told nothing. This test runs
//! itself as a child process (no subscriber installed, as in a fresh `main`), so what it
//! checks is the child's real stderr.
#![cfg(feature = "runtime")]

use std::process::Command;

use mcpl::peer::{Peer, PeerConfig};
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::Server;
use serde_json::json;

const CHILD: &str = "MCPL_AUTHOR_MISTAKES_STDERR_CHILD";

/// The child: a server whose tool panics, called once by an MCP host over a memory pair.
#[tokio::test]
async fn child_a_tool_panics_with_no_subscriber() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    a_tool_panics().await;
}

/// The same with a subscriber (whose output goes nowhere): `tracing` carries the warning,
/// so nothing is written to stderr beside it.
#[tokio::test]
async fn child_a_tool_panics_with_a_subscriber() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    tracing_subscriber::fmt().with_writer(std::io::sink).init();
    a_tool_panics().await;
}

async fn a_tool_panics() {
    let server = Server::builder("panicky", "1")
        .tool(
            "boom",
            "Panics",
            json!({"type": "object"}),
            |_s, _p| async {
                if true {
                    panic!("the tool's bug");
                }
                Ok(ToolsCallResult::text("never"))
            },
        )
        .build()
        .expect("builds");
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let _session = server.start(server_t);
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "h", "version": "0"}})),
    )
    .await
    .expect("initialize answered");
    peer.notify_raw("notifications/initialized", None)
        .await
        .expect("sent");
    let e = peer
        .request_raw("tools/call", Some(json!({"name": "boom", "arguments": {}})))
        .await
        .expect_err("a panicking tool is answered with an error");
    assert_eq!(e.remote().map(|e| e.code), Some(-32603), "{e}");
    // The connection goes on after the warning was written (or could not be).
    peer.request_raw("tools/list", None)
        .await
        .expect("the server still answers after the panicking tool");
}

/// Runs the child test `name` in a process of its own; its stderr.
fn child_stderr(name: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args(["--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the child runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn an_author_mistake_reaches_stderr_without_a_subscriber() {
    let stderr = child_stderr("child_a_tool_panics_with_no_subscriber");
    let line = stderr
        .lines()
        .find(|l| l.contains("handler_panicked"))
        .unwrap_or_else(|| panic!("no handler_panicked line on stderr:\n{stderr}"));
    assert!(line.contains("panicky"), "{line}");
    assert!(line.contains("tools/call"), "{line}");
}

#[test]
fn with_a_subscriber_tracing_alone_carries_it() {
    let stderr = child_stderr("child_a_tool_panics_with_a_subscriber");
    assert!(!stderr.contains("mcpl: warning"), "{stderr}");
}

/// With stderr closed (a host that closed the pipe it reads a server's log from), the
/// warning cannot be written: it is dropped, and the server goes on (the panicking tool is
/// still answered `-32603`). `eprintln!` panicked there, in the session's task.
#[test]
fn a_closed_stderr_drops_the_warning_and_the_server_goes_on() {
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "child_a_tool_panics_with_no_subscriber",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the child runs");
    drop(child.stderr.take());
    let out = child.wait_with_output().expect("the child ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}
