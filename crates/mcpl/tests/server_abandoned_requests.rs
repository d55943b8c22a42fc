//! A request of the server's whose caller goes away before its answer (F7): a tool that
//! asks the host for an inference, then the host cancels the tool call. Over a real
//! transport (JSON lines on a pipe), the host side written by hand.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::inference::InferenceRequestParams;
use mcpl::server::{Server, ServerDiagnostic};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A deadlock guard, never a synchronisation: a line that never comes fails here.
const GUARD: Duration = Duration::from_secs(20);

struct RawHost {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl RawHost {
    async fn send(&mut self, v: Value) {
        self.write
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(GUARD, self.lines.next_line())
            .await
            .expect("the server said nothing")
            .unwrap()
            .expect("the server is up");
        serde_json::from_str(&line).unwrap()
    }
}

fn server() -> Server {
    Server::builder("asks", "1.0.0")
        .feature_set(
            "ask",
            "Asks the host",
            &[Capability::Tools, Capability::InferenceRequest],
        )
        .tool(
            "ask",
            "Asks the host's model",
            json!({"type": "object"}),
            |s, _p| async move {
                let params: InferenceRequestParams = serde_json::from_value(json!({
                    "featureSet": "ask",
                    "messages": [{"role": "user", "content": "q"}]
                }))
                .expect("params");
                let r = s.inference_request(params).await;
                Ok(ToolsCallResult::text(format!("{r:?}")))
            },
        )
        .build()
        .unwrap()
}

/// MCP cancellation, §11: the host cancels a tool call whose handler waits on its own
/// `inference/request`. The call is answered `-32800`, the handler stops, and the server
/// cancels its `inference/request` toward the host (`notifications/cancelled` naming its
/// id) and forgets it: the host's answer after that is reported as late. Before, the
/// `inference/request` stayed in flight until its deadline, the host was never told, and
/// its answer was dropped with nothing reported.
#[tokio::test]
async fn a_request_whose_caller_went_away_is_cancelled_toward_the_host() {
    let server = server();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut diags = session.diagnostics();
    let mut host = RawHost {
        lines: BufReader::new(read).lines(),
        write,
    };
    host.send(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl":
                       {"version": "0.5", "inferenceRequest": true}}},
                   "clientInfo": {"name": "host", "version": "0"}}}))
        .await;
    assert_eq!(host.recv().await["id"], "i");
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    host.send(
        json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools", "inferenceRequest"]}}),
    )
    .await;
    let receipt = host.recv().await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.send(
        json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
        "params": {"name": "ask", "arguments": {}}}),
    )
    .await;
    let inference = host.recv().await;
    assert_eq!(inference["method"], "inference/request", "{inference}");
    host.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "ask", "reason": "the user gave up"}}),
    )
    .await;
    let (mut answered, mut cancelled) = (false, false);
    while !(answered && cancelled) {
        let v = host.recv().await;
        if v["id"] == "ask" {
            assert_eq!(v["error"]["code"], -32800, "{v}");
            answered = true;
        } else if v["method"] == "notifications/cancelled" {
            assert_eq!(v["params"]["requestId"], inference["id"], "{v}");
            cancelled = true;
        } else {
            panic!("unexpected {v}");
        }
    }
    host.send(json!({"jsonrpc": "2.0", "id": inference["id"],
        "result": {"content": "late", "model": "m", "finishReason": "end_turn"}}))
        .await;
    loop {
        match tokio::time::timeout(GUARD, diags.recv()).await {
            Ok(Ok(ServerDiagnostic::Connection(mcpl::peer::Diagnostic::LateResponse { id }))) => {
                assert_eq!(id.to_value(), inference["id"]);
                break;
            }
            Ok(Ok(_)) => {}
            other => panic!("no late answer reported: {other:?}"),
        }
    }
}

/// A server whose tool `ask` asks the host's model the call's `q`.
fn server_asking_q() -> Server {
    Server::builder("asks", "1.0.0")
        .feature_set(
            "ask",
            "Asks the host",
            &[Capability::Tools, Capability::InferenceRequest],
        )
        .tool(
            "ask",
            "Asks the host's model",
            json!({"type": "object"}),
            |s, p| async move {
                let q = p
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("q"))
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                let params: InferenceRequestParams = serde_json::from_value(json!({
                    "featureSet": "ask",
                    "messages": [{"role": "user", "content": q}]
                }))
                .expect("params");
                let r = s.inference_request(params).await;
                Ok(ToolsCallResult::text(match r {
                    Ok(r) => format!(
                        "answered {}",
                        serde_json::to_value(&r.content).unwrap_or_default()
                    ),
                    Err(e) => format!("failed {e}"),
                }))
            },
        )
        .build()
        .unwrap()
}

/// With several requests of the server's in flight, the one whose caller went away is the
/// one cancelled toward the host, whichever it is, and only it: the others are still
/// answered to their callers. (The driver learns of a caller gone from its reply's drop,
/// once per caller, rather than looking at every request in flight at each wake.)
#[tokio::test]
async fn of_several_requests_in_flight_only_the_one_whose_caller_went_away_is_cancelled() {
    for cancel in ["a", "b", "c"] {
        let server = server_asking_q();
        let (host_end, server_end) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(host_end);
        let (sr, sw) = tokio::io::split(server_end);
        let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
        let mut host = RawHost {
            lines: BufReader::new(read).lines(),
            write,
        };
        host.send(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18",
                       "capabilities": {"experimental": {"mcpl":
                           {"version": "0.5", "inferenceRequest": true}}},
                       "clientInfo": {"name": "host", "version": "0"}}}))
            .await;
        assert_eq!(host.recv().await["id"], "i");
        host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        host.send(
            json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
            "params": {"effectiveCapabilities": ["tools", "inferenceRequest"]}}),
        )
        .await;
        assert_eq!(host.recv().await["result"]["accepted"], true);
        // The inference each tool call asked, by the call's id.
        let mut asked = std::collections::HashMap::new();
        for q in ["a", "b", "c"] {
            host.send(json!({"jsonrpc": "2.0", "id": q, "method": "tools/call",
                "params": {"name": "ask", "arguments": {"q": q}}}))
                .await;
        }
        while asked.len() < 3 {
            let v = host.recv().await;
            assert_eq!(v["method"], "inference/request", "{v}");
            let q = v["params"]["messages"][0]["content"]
                .as_str()
                .expect("the question")
                .to_owned();
            asked.insert(q, v["id"].clone());
        }
        host.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": cancel, "reason": "the user gave up"}}),
        )
        .await;
        let (mut answered, mut cancelled) = (false, false);
        while !(answered && cancelled) {
            let v = host.recv().await;
            if v["id"] == cancel {
                assert_eq!(v["error"]["code"], -32800, "{v}");
                answered = true;
            } else if v["method"] == "notifications/cancelled" {
                assert_eq!(v["params"]["requestId"], asked[cancel], "{cancel}: {v}");
                cancelled = true;
            } else {
                panic!("{cancel}: unexpected {v}");
            }
        }
        for q in ["a", "b", "c"].into_iter().filter(|q| *q != cancel) {
            host.send(json!({"jsonrpc": "2.0", "id": asked[q],
                "result": {"content": format!("to {q}"), "model": "m", "finishReason": "end_turn"}}))
                .await;
            let v = host.recv().await;
            assert_eq!(v["id"], q, "{cancel}: {v}");
            let text = v["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert!(text.contains(&format!("to {q}")), "{cancel}: {v}");
        }
    }
}
