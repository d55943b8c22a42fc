//! A server's MCP notifications the host does not act on itself reach the application:
//! `notifications/message` (MCP 2024-11-05 logging), `notifications/progress` (for a request
//! the application sent with a `progressToken`) and `notifications/resources/updated` (for
//! a resource it subscribed to with `resources/subscribe`). Each was reported as
//! `HostDiagnostic::UnexpectedMethod` and dropped, so the application never saw the
//! server's logs, progress or resource updates, though all are normal MCP. Each is now
//! `HostEvent::Notification { method, params }`, and nothing is reported; a method MCP does
//! not give a server still is. The server is raw lines; a `ping` orders the check, no sleeps.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostEvent, HostSession, HostStreams};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

/// A session over a raw MCP-only server.
async fn connected() -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let cfg = HostConfig {
        policy: vec!["*".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(None)}))
        .await;
    let (s, streams) = connect.await.unwrap().expect("the host connects");
    (s, streams, raw)
}

#[tokio::test]
async fn mcp_notifications_for_the_application_are_events_and_not_reported() {
    let (_s, mut streams, mut raw) = connected().await;
    let sent = [
        (
            "notifications/message",
            json!({"level": "warning", "logger": "db", "data": "slow query"}),
        ),
        (
            "notifications/progress",
            json!({"progressToken": "t1", "progress": 5, "total": 10}),
        ),
        (
            "notifications/resources/updated",
            json!({"uri": "file:///notes.txt"}),
        ),
        ("notifications/not_mcp", json!({})),
    ];
    for (method, params) in &sent {
        raw.send_json(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }
    raw.send_json(json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"}))
        .await;
    loop {
        if recv(&mut raw).await["id"] == "p1" {
            break;
        }
    }
    let mut events = Vec::new();
    let mut reported = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        if let HostDiagnostic::UnexpectedMethod { method } = d {
            reported.push(method);
        }
    }
    while let Ok(e) = streams.events.try_recv() {
        if let HostEvent::Notification { method, params } = e {
            events.push((method, params));
        }
    }
    let expected: Vec<(String, Option<Value>)> = sent[..3]
        .iter()
        .map(|(m, p)| (m.to_string(), Some(p.clone())))
        .collect();
    assert_eq!(events, expected);
    assert_eq!(reported, ["notifications/not_mcp"]);
}
