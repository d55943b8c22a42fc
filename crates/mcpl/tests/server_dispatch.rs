//! How a `Server` runs request handlers (issue #24): a handler that finishes without waiting
//! is answered from the read loop, one that has to wait goes on in its own task, and neither
//! way holds up the messages behind it or loses a panic's `-32603` answer.
#![cfg(feature = "runtime")]

use std::sync::Arc;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostSession, HostStreams};
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{Server, Session};
use serde_json::{json, Value};
use tokio::sync::Notify;

fn server(release: Arc<Notify>) -> Server {
    Server::builder("dispatch", "1")
        .feature_set("tools", "Tools", &[Capability::Tools])
        .tool(
            "fast",
            "Answers at once",
            json!({"type": "object"}),
            |_s, _p| async { Ok(ToolsCallResult::text("fast")) },
        )
        .tool(
            "slow",
            "Answers once released",
            json!({"type": "object"}),
            move |_s, _p| {
                let release = release.clone();
                async move {
                    release.notified().await;
                    Ok(ToolsCallResult::text("slow"))
                }
            },
        )
        .tool(
            "yields",
            "Waits once, then answers",
            json!({"type": "object"}),
            |_s, _p| async {
                tokio::task::yield_now().await;
                Ok(ToolsCallResult::text("yielded"))
            },
        )
        .tool(
            "panics",
            "Panics at its first poll",
            json!({"type": "object"}),
            |_s, _p| async { panic!("at the first poll") },
        )
        .build()
        .unwrap()
}

async fn connect(server: &Server) -> (HostSession, HostStreams, Session) {
    let (a, b) = mcpl::transport::memory::pair();
    let session = server.start(b);
    let config = HostConfig {
        policy: vec!["tools".into()],
        ..HostConfig::default()
    };
    let (host, streams) = HostSession::connect(a, config).await.unwrap();
    (host, streams, session)
}

fn call(name: &str) -> Value {
    json!({"name": name, "arguments": {}})
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// §5.4 runs the tool; a slow `tools/call` does not hold up a `ping` or a fast call sent
/// after it on the same connection, and is answered once it finishes.
#[tokio::test]
async fn a_waiting_handler_does_not_hold_up_the_requests_behind_it() {
    let release = Arc::new(Notify::new());
    let server = server(release.clone());
    let (host, _streams, _session) = connect(&server).await;
    let slow = {
        let host = host.clone();
        tokio::spawn(async move { host.request_raw("tools/call", call("slow")).await })
    };
    // Each answered while the slow call is still waiting for its release.
    for _ in 0..3 {
        host.peer().request_raw("ping", None).await.unwrap();
        let fast = host.request_raw("tools/call", call("fast")).await.unwrap();
        assert_eq!(text(&fast), "fast");
    }
    assert!(!slow.is_finished(), "released only below");
    release.notify_one();
    let answer = slow.await.unwrap().unwrap();
    assert_eq!(text(&answer), "slow");
}

/// Handlers that finish at once and handlers that wait once are both answered, each under
/// its own id, when sent together.
#[tokio::test]
async fn handlers_finishing_at_once_or_after_waiting_are_all_answered() {
    let server = server(Arc::new(Notify::new()));
    let (host, _streams, _session) = connect(&server).await;
    let calls = (0..50).map(|i| {
        let host = host.clone();
        let name = if i % 2 == 0 { "fast" } else { "yields" };
        async move { (name, host.request_raw("tools/call", call(name)).await) }
    });
    for (name, answer) in futures_util::future::join_all(calls).await {
        let answer = answer.unwrap();
        let want = if name == "fast" { "fast" } else { "yielded" };
        assert_eq!(text(&answer), want);
    }
}

/// A handler that panics before it ever waits is still answered `-32603` (JSON-RPC internal
/// error), counted as the author's mistake, and the connection keeps serving.
#[tokio::test]
async fn a_handler_panicking_at_its_first_poll_is_answered_internal_error() {
    let server = server(Arc::new(Notify::new()));
    let (host, _streams, session) = connect(&server).await;
    let err = host
        .request_raw("tools/call", call("panics"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("-32603"), "{err}");
    assert_eq!(session.author_mistakes(), 1);
    let fast = host.request_raw("tools/call", call("fast")).await.unwrap();
    assert_eq!(text(&fast), "fast");
}

/// A host cancels request 1 whose handler has just finished (its answer is queued for the
/// driver, which is taking no answers while a host that reads slowly holds it up), then
/// reuses id 1 for another request (allowed: the cancelled one was answered `-32800`). The
/// first handler's answer used to answer the second request, whose own answer was then
/// dropped.
#[tokio::test]
async fn an_answer_for_a_cancelled_request_never_answers_a_later_request_with_its_id() {
    use mcpl::peer::PeerConfig;
    use mcpl::transport::Transport;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::sync::mpsc;

    let (go_first, go_second) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (done_tx, mut done) = mpsc::unbounded_channel::<()>();
    let (probe_tx, mut probed) = mpsc::unbounded_channel::<()>();
    let (g1, g2) = (go_first.clone(), go_second.clone());
    let server = Server::builder("dispatch", "1")
        .method("first", move |_s, _p| {
            let (go, done) = (g1.clone(), done_tx.clone());
            async move {
                go.notified().await;
                let _ = done.send(());
                Ok(json!("first"))
            }
        })
        .method("second", move |_s, _p| {
            let go = g2.clone();
            async move {
                go.notified().await;
                Ok(json!("second"))
            }
        })
        .method("echo", |_s, p| async move { Ok(p.unwrap_or_default()) })
        .method("probe", move |_s, _p| {
            let probe = probe_tx.clone();
            async move {
                let _ = probe.send(());
                Ok(json!("probe"))
            }
        })
        .peer_config(PeerConfig {
            outgoing_capacity: 1,
            ..PeerConfig::default()
        })
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(Transport::lines(sr, sw, "test"));
    let (hr, mut hw) = tokio::io::split(host_end);
    let mut lines = BufReader::new(hr).lines();
    let send = |v: Value| format!("{v}\n").into_bytes();

    hw.write_all(&send(
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}),
    ))
    .await
    .unwrap();
    hw.write_all(&send(json!({"jsonrpc": "2.0", "id": 1, "method": "first"})))
        .await
        .unwrap();
    // The host reads nothing: the answers to these echoes (100 KiB each, 6.4 MB in all,
    // answered at once) stay held by the server's driver, which then takes no handler
    // answers.
    let big = "x".repeat(100 * 1024);
    for i in 0..64 {
        let echo = json!({"jsonrpc": "2.0", "id": format!("e{i}"), "method": "echo",
                          "params": {"x": big}});
        hw.write_all(&send(echo)).await.unwrap();
    }
    hw.write_all(&send(
        json!({"jsonrpc": "2.0", "id": "p1", "method": "probe"}),
    ))
    .await
    .unwrap();
    probed.recv().await.unwrap();
    go_first.notify_one();
    done.recv().await.unwrap();
    for v in [
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "second"}),
        json!({"jsonrpc": "2.0", "id": "p2", "method": "probe"}),
    ] {
        hw.write_all(&send(v)).await.unwrap();
    }
    probed.recv().await.unwrap();

    // Read up to the second probe's answer: request 1 was answered `-32800` only.
    let mut answers_to_1 = Vec::new();
    loop {
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        if v["id"] == 1 {
            answers_to_1.push(v.clone());
        }
        if v["id"] == "p2" {
            break;
        }
    }
    assert_eq!(answers_to_1.len(), 1, "{answers_to_1:?}");
    assert_eq!(answers_to_1[0]["error"]["code"], -32800);
    // The second request's answer is its own handler's.
    go_second.notify_one();
    let answer = loop {
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        if v["id"] == 1 {
            break v;
        }
    };
    assert_eq!(answer["result"], "second", "{answer}");
}
