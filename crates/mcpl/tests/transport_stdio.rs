//! The stdio transport end to end: this test binary re-runs itself as a child process whose
//! stdin/stdout carry the connection (`transport::stdio` in the child, `transport::child` in
//! the parent). libtest's own chatter on the child's stdout ("running 1 test") is exactly the
//! kind of junk a logging server produces; it must be skipped with diagnostics.
#![cfg(feature = "runtime")]

use mcpl::peer::{CloseReason, Diagnostic, IncomingMessage, Peer, PeerConfig};
use mcpl::transport;
use serde_json::{json, Value};

const CHILD_ENV: &str = "MCPL_TEST_STDIO_CHILD";

/// Child mode: serve `echo` over stdio and ask the parent `hello` once.
async fn run_child() {
    let (peer, mut incoming) = Peer::new(transport::stdio::stdio(), PeerConfig::default());
    while let Some(msg) = incoming.recv().await {
        if let IncomingMessage::Request(r) = msg {
            if r.method() == "echo" {
                // A request in the other direction while the parent's request is open.
                let hello = peer.request_raw("hello", None).await.unwrap();
                let p = r.request().params.clone().unwrap_or(Value::Null);
                r.respond(json!({"echo": p, "parent": hello}))
                    .await
                    .unwrap();
            }
        }
    }
    assert_eq!(peer.closed().await, CloseReason::Eof);
}

#[tokio::test]
async fn stdio_transport_end_to_end() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return run_child().await;
    }
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "stdio_transport_end_to_end",
        "--nocapture",
        "--test-threads=1",
        // Quiet: libtest otherwise prints "test name ... " without a newline before the test
        // runs, gluing it to the child's first message on one (junk) line.
        "--quiet",
    ])
    .env(CHILD_ENV, "1");
    let (t, control) = transport::child::spawn(&mut cmd).unwrap();
    let (peer, mut incoming) = Peer::new(t, PeerConfig::default());
    let mut diags = peer.diagnostics();
    tokio::spawn(async move {
        while let Some(IncomingMessage::Request(r)) = incoming.recv().await {
            r.respond(json!("from parent")).await.unwrap();
        }
    });
    let r = peer
        .request_raw("echo", Some(json!({"x": [1, "two"]})))
        .await
        .unwrap();
    assert_eq!(
        r,
        json!({"echo": {"x": [1, "two"]}, "parent": "from parent"})
    );
    // Closing our side ends the child's stdin; it finishes its test and exits cleanly.
    peer.close();
    assert!(control.wait().await.unwrap().success());
    let mut junk = Vec::new();
    while let Some(d) = diags.try_recv() {
        if let Diagnostic::JunkLine { excerpt } = d {
            junk.push(excerpt);
        }
    }
    assert!(
        junk.iter().any(|l| l.contains("running 1 test")),
        "libtest's banner should have been skipped as junk: {junk:?}"
    );
}
