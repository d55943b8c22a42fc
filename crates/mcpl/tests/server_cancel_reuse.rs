//! MCP cancellation and an id reused right behind it (`Peer::answers_cancels`, the
//! in-flight id rule of `peer::serving`): on a `Server`, a cancel frees its request's id
//! as it is read, so a request reusing the id right behind it is taken. Reading (JSON-RPC
//! 2.0 §5: an answer names its request by id alone): that is safe only if the server
//! writes exactly one answer for the cancelled request, before anything it writes for the
//! reuse. A request the server answers as it handles it (a `ping`) was answered before the
//! cancel was handled; one handed to a handler is answered `-32800` as the cancel is
//! handled, its handler's own answer dropped. Over a real transport (JSON lines on a pipe),
//! the host side written by hand.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::Server;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A deadlock guard, never a synchronisation: a line that never comes fails here.
const GUARD: Duration = Duration::from_secs(20);

type Lines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;
type Write = tokio::io::WriteHalf<tokio::io::DuplexStream>;

async fn send(w: &mut Write, v: Value) {
    w.write_all(format!("{v}\n").as_bytes()).await.unwrap();
}

async fn recv(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the server said nothing")
        .unwrap()
        .expect("the server is up");
    serde_json::from_str(&line).unwrap()
}

fn call(id: &str, q: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"q": q}}})
}

fn cancel(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "reused"}})
}

/// A cancelled call (its handler never ends) and a cancelled `ping` (answered as it was
/// handled), each id reused right behind its cancel: every request is answered once, the
/// cancelled one's answer first under its id, so no answer under a reused id is the other
/// request's.
#[tokio::test]
async fn a_cancelled_request_is_answered_once_before_the_request_reusing_its_id() {
    let server = Server::builder("reuse", "1.0.0")
        .feature_set("echo", "Echoes", &[Capability::Tools])
        .tool(
            "echo",
            "Echoes q; never ends for \"slow\"",
            json!({"type": "object"}),
            |_s, p| async move {
                let q = p
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("q"))
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                if q == "slow" {
                    std::future::pending::<()>().await;
                }
                Ok(ToolsCallResult::text(q))
            },
        )
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut lines = BufReader::new(read).lines();
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "host", "version": "0"}}}),
    )
    .await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}}),
    )
    .await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    // One write: the server reads the cancels and the reuses before it answers anything.
    let burst = [
        call("a", "slow"),
        json!({"jsonrpc": "2.0", "id": "b", "method": "ping"}),
        cancel("b"),
        call("b", "second b"),
        cancel("a"),
        call("a", "second a"),
    ];
    let text: String = burst.iter().map(|v| format!("{v}\n")).collect();
    write.write_all(text.as_bytes()).await.unwrap();
    // Under each id, in order: the first request's one answer, then the reuse's.
    let mut by_id: std::collections::HashMap<String, Vec<Value>> = Default::default();
    while by_id.values().map(Vec::len).sum::<usize>() < 4 {
        let v = recv(&mut lines).await;
        let id = v["id"]
            .as_str()
            .expect("an answer under a string id")
            .to_owned();
        by_id.entry(id).or_default().push(v);
    }
    let a = &by_id["a"];
    assert_eq!(a[0]["error"]["code"], -32800, "{a:?}");
    assert_eq!(a[1]["result"]["content"][0]["text"], "second a", "{a:?}");
    let b = &by_id["b"];
    assert_eq!(b[0]["result"], json!({}), "the ping's answer first: {b:?}");
    assert_eq!(b[1]["result"]["content"][0]["text"], "second b", "{b:?}");
    // Nothing more: the slow handler's answer, were it to come, is dropped.
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"}),
    )
    .await;
    let v = recv(&mut lines).await;
    assert_eq!(v["id"], "sync", "{v}");
}
