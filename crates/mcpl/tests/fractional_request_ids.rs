//! A request whose id is a number with a fractional part or an exponent (`2.0`, `2.5`,
//! `-3.0`): JSON-RPC 2.0 §4 says such ids SHOULD NOT be used, a SHOULD NOT, so the request
//! is valid and its answer carries the same value (§5), the number as parsed. It was refused
//! `-32600` under id null. Ids no double holds exactly as an integer id
//! (`18446744073709551617`) stay refused. Over real transports (in-memory pipes), every byte
//! of the other side written by the test: a raw peer, an async `Server`, a `HostSession`.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostDiagnostic, HostSession};
use mcpl::jsonrpc::RequestId;
use mcpl::peer::{Diagnostic, PeerConfig};
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{Server, Session};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: only a failing test waits this long.
const GUARD: Duration = Duration::from_secs(10);

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("nothing was written")
}

/// A plain peer takes the request, hands it to the application under its id, answers it
/// under the same value, and reports the form once.
#[tokio::test]
async fn s4_a_peer_answers_a_fractional_id_under_the_same_value_and_reports_it() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    raw.send(r#"{"jsonrpc":"2.0","id":2.5,"method":"x/echo"}"#)
        .await;
    let req = tokio::time::timeout(GUARD, incoming.recv())
        .await
        .expect("delivered")
        .expect("open");
    let mcpl::peer::IncomingMessage::Request(req) = req else {
        panic!("not a request")
    };
    let two_and_a_half: serde_json::Number = serde_json::from_str("2.5").unwrap();
    assert_eq!(req.id(), &RequestId::Number(two_and_a_half.clone()));
    req.respond(json!({"ok": true})).await.expect("answered");
    let line = tokio::time::timeout(GUARD, raw.recv_line())
        .await
        .expect("answered");
    assert!(line.contains(r#""id":2.5"#), "{line}");
    match diags.recv().await {
        Some(Diagnostic::FractionalId { id, method }) => {
            assert_eq!(id, RequestId::Number(two_and_a_half));
            assert_eq!(method, "x/echo");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(diags.try_recv(), None, "reported once");
}

fn server() -> Server {
    Server::builder("fractional", "1")
        .feature_set("work", "Work", &[Capability::Tools])
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s: Session, _p| async { Ok(ToolsCallResult::text("echo")) },
        )
        .build()
        .expect("server builds")
}

/// The async `Server` answers `ping` under `2.0` (not `2`), `-3.0` and `2.5`; an integer past
/// 64 bits is still refused `-32600` under null.
#[tokio::test]
async fn s4_a_server_answers_a_fractional_id_under_the_same_value() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, mut aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let _session = server().start(Transport::lines(br, bw, "test"));
    let mut lines = BufReader::new(ar).lines();
    for (id, echoed) in [("2.0", "2.0"), ("-3.0", "-3.0"), ("2.5", "2.5")] {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n");
        aw.write_all(line.as_bytes()).await.unwrap();
        let got = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("answered")
            .unwrap()
            .expect("a line");
        assert!(got.contains(&format!(r#""id":{echoed}"#)), "{got}");
        let v: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["result"], json!({}), "{got}");
    }
    aw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551617,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    let got = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("answered")
        .unwrap()
        .expect("a line");
    let v: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(v["id"], Value::Null, "{got}");
    assert_eq!(v["error"]["code"], json!(-32600), "{got}");
}

/// A `HostSession` answers a server's `ping` under `-3.0` and reports the form as a
/// connection defect (`HostDiagnostic::Connection`).
#[tokio::test]
async fn s4_a_host_session_answers_a_fractional_id_under_the_same_value() {
    let cfg = HostConfig {
        policy: vec!["pushEvents".to_owned()],
        ..HostConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    let m = json!({"version": "0.5", "pushEvents": {},
        "featureSets": {"news": {"description": "news", "uses": ["pushEvents"]}}});
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let policy = loop {
        let v = recv(&mut raw).await;
        if v.get("id").is_some() && v.get("method").is_some() {
            break v;
        }
    };
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (_s, mut streams) = connect.await.unwrap().unwrap();
    raw.send(r#"{"jsonrpc":"2.0","id":-3.0,"method":"ping"}"#)
        .await;
    let answer = loop {
        let line = tokio::time::timeout(GUARD, raw.recv_line())
            .await
            .expect("answered");
        if line.contains("\"result\"") || line.contains("\"error\"") {
            break line;
        }
    };
    assert!(answer.contains(r#""id":-3.0"#), "{answer}");
    assert!(answer.contains(r#""result":{}"#), "{answer}");
    let reported = loop {
        let d = tokio::time::timeout(GUARD, streams.diagnostics.recv())
            .await
            .expect("reported")
            .expect("open");
        if let HostDiagnostic::Connection(Diagnostic::FractionalId { id, method }) = d {
            break (id.to_value(), method);
        }
    };
    assert_eq!(reported, (json!(-3.0), "ping".to_owned()));
}
