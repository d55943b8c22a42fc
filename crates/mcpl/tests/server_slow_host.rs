//! A host that stopped reading, on one connection of a `Server`, holds up none of its other
//! connections: the server's answers and pushes to it wait in that connection's own bounded
//! queues (the pipe, the writer's, the driver's outbox, `max_in_flight_*`), and what the
//! server does for every connection (a tool change, a manifest change, §17.3) reaches the
//! others at once. Over real transports (JSON lines on pipes); the clock is paused, so
//! "every task has gone as far as it can" is `tokio::time::sleep` returning, never a timing.
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcpl::capability::Capability;
use mcpl::peer::{Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{PushEvent, Server, ToolSpec};
use mcpl::transport::memory;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Bytes of each `big` answer: 300 of them are far past everything the connection holds
/// for a host that does not read (a 64 KiB pipe, the 8 MiB writer queue, 32 MiB in flight).
const BIG: usize = 256 * 1024;

fn server(calls: Arc<AtomicUsize>) -> Server {
    Server::builder("slow", "1.0.0")
        .feature_set("t", "Tools", &[Capability::Tools])
        .feature_set("e", "Events", &[Capability::PushEvents])
        .tool(
            "big",
            "A large answer",
            json!({"type": "object"}),
            move |_s, _p| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolsCallResult::text("x".repeat(BIG))) }
            },
        )
        .tool("echo", "Echo", json!({"type": "object"}), |_s, _p| async {
            Ok(ToolsCallResult::text("echo"))
        })
        .build()
        .unwrap()
}

fn initialize(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18",
                      "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                      "clientInfo": {"name": "host", "version": "0"}}})
}

fn policy(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update",
           "params": {"effectiveCapabilities": ["tools", "pushEvents"]}})
}

/// The next message on `incoming` that is not `push/event` (answered, as a host would).
async fn next_other(incoming: &mut Incoming) -> IncomingMessage {
    loop {
        match incoming.recv().await.expect("the server is up") {
            IncomingMessage::Request(r) if r.method() == "push/event" => {
                r.respond(json!({"accepted": true})).await.unwrap()
            }
            m => return m,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_host_that_never_reads_holds_up_no_other_connection_of_the_server() {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = server(calls.clone());

    // Host A: ready, then 300 calls of `big`, and it never reads again.
    let (a_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session_a = server.start(mcpl::transport::Transport::lines(sr, sw, "a"));
    let (a_read, mut a_write) = tokio::io::split(a_end);
    let mut a_lines = BufReader::new(a_read).lines();
    for (id, frame) in [
        (json!(0), initialize(json!(0))),
        (json!(1), policy(json!(1))),
    ] {
        a_write
            .write_all(format!("{frame}\n").as_bytes())
            .await
            .unwrap();
        let line = a_lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id, "{v}");
    }
    let flood = tokio::spawn(async move {
        for id in 2..302 {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": "big", "arguments": {}}});
            if a_write
                .write_all(format!("{call}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        a_write
    });
    // A push to A too: it waits for an answer A never reads.
    let push_a = {
        let s = session_a.clone();
        tokio::spawn(async move { s.push_event(PushEvent::text("e", "to a")).await })
    };
    // A's calls start running (a condition, not a time: yield until one has run); its
    // connection backs up, as A reads nothing.
    for _ in 0..1_000_000 {
        if calls.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let backed_up = calls.load(Ordering::SeqCst);
    // Some ran, the rest were answered busy unrun (`max_in_flight_bytes`) or wait unread.
    assert!(
        backed_up > 0 && backed_up < 300,
        "A's calls run within the bounds: {backed_up}"
    );
    assert!(!push_a.is_finished(), "A never answers its push");

    // Host B, on another connection of the same server: served in full meanwhile.
    let (b_t, server_t) = memory::pair();
    let (b, mut b_incoming) = Peer::new(b_t, PeerConfig::default());
    let session_b = server.start(server_t);
    b.request_raw("initialize", initialize(json!(0))["params"].clone().into())
        .await
        .unwrap();
    b.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let receipt = b
        .request_raw(
            "featureSets/update",
            policy(json!(0))["params"].clone().into(),
        )
        .await
        .unwrap();
    assert_eq!(receipt["accepted"], true, "{receipt}");
    let echo = b
        .request_raw("tools/call", Some(json!({"name": "echo", "arguments": {}})))
        .await
        .unwrap();
    assert_eq!(echo["content"][0]["text"], "echo", "{echo}");
    // A push to B is answered.
    let push_b = {
        let s = session_b.clone();
        tokio::spawn(async move { s.push_event(PushEvent::text("e", "to b")).await })
    };
    let IncomingMessage::Request(r) = b_incoming.recv().await.unwrap() else {
        panic!("expected push/event")
    };
    assert_eq!(r.method(), "push/event");
    r.respond(json!({"accepted": true})).await.unwrap();
    push_b.await.unwrap().expect("B's push is answered");

    // A change to the server's tools (every connection is told, §3.3 MCP `list_changed`):
    // the change returns, and B hears of it.
    server
        .add_tool(ToolSpec::new(
            "late",
            "Added late",
            json!({"type": "object"}),
            |_s, _p| async { Ok(ToolsCallResult::text("late")) },
        ))
        .unwrap();
    let m = next_other(&mut b_incoming).await;
    assert_eq!(m.method(), "notifications/tools/list_changed");
    // A manifest change (§17.3): installed at once, announced to B.
    server
        .tracker()
        .transaction(|m| {
            m["featureSets"]["later"] = json!({"description": "Later", "uses": ["tools"]});
        })
        .unwrap();
    let m = next_other(&mut b_incoming).await;
    assert_eq!(m.method(), "mcpl/manifestChanged");
    let late = b
        .request_raw("tools/call", Some(json!({"name": "late", "arguments": {}})))
        .await
        .unwrap();
    assert_eq!(late["content"][0]["text"], "late", "{late}");

    // A is still backed up: none of that went through it.
    assert!(!push_a.is_finished(), "A never answers its push");
    drop(session_a);
    drop(flood);
}
