//! A narrowing policy Request the peer refuses at the envelope, before the server's state
//! reads it (F6): `/tmp/r2/a19_narrow_refused.py` from outside, here over a real transport
//! (JSON lines on a pipe), the host side written by hand.
//!
//! Reading (§6.7: reductions are respected whatever their carrier, a server respects one at
//! once, and a host revokes before it sends): a policy Request the server cannot read may
//! carry a reduction it cannot see, so it is a grant of nothing, fail closed, as one with
//! unreadable params already was (`ServerState::handle_policy_unread`). Before, the peer
//! answered it `-32600` and told the server's state nothing: the wider grant stayed.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::server::Server;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const GUARD: Duration = Duration::from_secs(20);

async fn send(w: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>, v: Value) {
    w.write_all(format!("{v}\n").as_bytes()).await.unwrap();
}

async fn recv(
    lines: &mut tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
) -> Value {
    let line = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the server said nothing")
        .unwrap()
        .expect("the server is up");
    serde_json::from_str(&line).unwrap()
}

/// §6.7 (F6): a narrowing `featureSets/update` written `"jsonrpc": "1.0"` is answered
/// `-32600`, and the wider grant before it no longer holds (as after one with bad params).
#[tokio::test]
async fn s6_7_a_policy_request_refused_at_the_envelope_grants_nothing() {
    refused_narrowing(false).await;
}

/// §6.7 (F6): the same for one whose id is in use by a request still in flight (MCP: an id
/// is not reused while in flight), refused `-32600` by the peer.
#[tokio::test]
async fn s6_7_a_policy_request_under_an_id_in_use_grants_nothing() {
    refused_narrowing(true).await;
}

async fn refused_narrowing(reuse: bool) {
    let server = Server::builder("narrow", "1.0.0")
        .feature_set(
            "alerts",
            "Alerts",
            &[Capability::PushEvents, Capability::Tools],
        )
        .tool(
            "hold",
            "Never returns",
            json!({"type": "object"}),
            |_s, _p| std::future::pending(),
        )
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut lines = BufReader::new(read).lines();
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl":
                       {"version": "0.5", "pushEvents": true}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    send(&mut write, init).await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send(&mut write, initialized).await;
    let policy = json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents", "tools"]}});
    send(&mut write, policy).await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    assert!(session.granted(Capability::PushEvents));
    let version = match reuse {
        true => {
            let hold = json!({"jsonrpc": "2.0", "id": "narrow", "method": "tools/call",
                "params": {"name": "hold", "arguments": {}}});
            send(&mut write, hold).await;
            "2.0"
        }
        false => "1.0",
    };
    let narrow = json!({"jsonrpc": version, "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}});
    send(&mut write, narrow).await;
    let a = recv(&mut lines).await;
    assert_eq!(a["error"]["code"], -32600, "{a}");
    let ping = json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"});
    send(&mut write, ping).await;
    assert_eq!(recv(&mut lines).await["id"], "sync");
    assert!(
        !session.granted(Capability::PushEvents),
        "the grant before an unreadable narrowing still holds"
    );
}
