//! Wire-level tests of the peer: real JSON text over the in-memory, TCP and child-process
//! transports. A "raw" side writes and reads lines directly so every byte is under test.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::jsonrpc::{codes, ErrorObject, RequestId};
use mcpl::peer::{
    CloseReason, Diagnostic, FrameDirection, Incoming, IncomingMessage, Peer, PeerConfig,
    PeerError, RequestOptions, Tap,
};
use mcpl::transport::{self, Transport};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, raw_peer_with, Raw};

/// Answers `ping` with `{}` and `echo` with its params; drops everything else (-32601).
fn spawn_ping_server(mut incoming: Incoming) {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(req) = msg {
                match req.method() {
                    "ping" => req.respond(json!({})).await.unwrap(),
                    "echo" => {
                        let p = req.request().params.clone().unwrap_or(Value::Null);
                        req.respond(p).await.unwrap()
                    }
                    _ => {}
                }
            }
        }
    });
}

/// The raw side pings the peer and expects the answer as the very next line.
async fn assert_ping_works(raw: &mut Raw, id: i64) {
    raw.send_json(json!({"jsonrpc":"2.0","id":id,"method":"ping"}))
        .await;
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":id,"result":{}})
    );
}

/// Collects three requests, then answers them in reverse order of arrival.
fn answer_three_reversed(mut incoming: Incoming, tag: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        while held.len() < 3 {
            match incoming.recv().await {
                Some(IncomingMessage::Request(r)) => held.push(r),
                Some(_) => {}
                None => return,
            }
        }
        while let Some(r) = held.pop() {
            let n = r.request().params.clone().unwrap()["n"].clone();
            r.respond(json!({"from": tag, "n": n})).await.unwrap();
        }
    })
}

#[tokio::test]
async fn concurrent_requests_both_directions_with_interleaved_responses() {
    let ((a, a_in), (b, b_in)) = Peer::memory_pair(PeerConfig::default());
    // Each side holds all three requests before answering, so both directions have requests
    // open at once and responses arrive out of order.
    let ha = answer_three_reversed(a_in, "a");
    let hb = answer_three_reversed(b_in, "b");
    let calls: Vec<_> = (0..3)
        .flat_map(|n| {
            let (a, b) = (a.clone(), b.clone());
            [
                tokio::spawn(async move {
                    ("a", n, a.request_raw("work", Some(json!({"n": n}))).await)
                }),
                tokio::spawn(async move {
                    ("b", n, b.request_raw("work", Some(json!({"n": n}))).await)
                }),
            ]
        })
        .collect();
    for c in calls {
        let (caller, n, result) = c.await.unwrap();
        let answerer = if caller == "a" { "b" } else { "a" };
        assert_eq!(result.unwrap(), json!({"from": answerer, "n": n}));
    }
    ha.await.unwrap();
    hb.await.unwrap();
}

#[tokio::test]
async fn the_wire_carries_jsonrpc_2_0_requests_with_integer_ids_and_omitted_params() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("ping", None).await });
    let req = raw.recv().await;
    assert_eq!(req, json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"result":{"pong":true}}))
        .await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"pong": true}));
}

#[tokio::test(start_paused = true)]
async fn timeout_then_late_response_is_a_diagnostic() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    let p = peer.clone();
    let call = tokio::spawn(async move {
        p.request_raw_with(
            "slow",
            None,
            RequestOptions::new().timeout(Duration::from_secs(5)),
        )
        .await
    });
    let req = raw.recv().await;
    let err = call.await.unwrap().unwrap_err();
    let PeerError::Timeout { method, id, after } = err else {
        panic!("expected a timeout, got {err:?}")
    };
    assert_eq!((method.as_str(), after), ("slow", Duration::from_secs(5)));
    assert_eq!(id.to_value(), req["id"]);
    assert_eq!(peer.pending_requests(), 0);
    // MCP's cancellation tells the other side to stop working on it.
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","method":"notifications/cancelled",
               "params":{"requestId":req["id"],"reason":"timed out after 5s"}})
    );
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{}}))
        .await;
    assert_eq!(diags.recv().await, Some(Diagnostic::LateResponse { id }));
    assert_ping_works(&mut raw, 9).await;
}

/// `Peer::send_request`: the response is delivered by `Incoming::recv_ordered` at its wire
/// position, between the messages read before and after it (§5.3: a host applies a policy
/// receipt before the request read right after it).
#[tokio::test]
async fn an_in_order_response_is_delivered_at_its_wire_position() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let id = peer
        .send_request("featureSets/update", Some(json!({})), |_| {})
        .await
        .unwrap();
    let req = raw.recv().await;
    assert_eq!(req["id"], id.to_value());
    raw.send_json(json!({"jsonrpc":"2.0","method":"before"}))
        .await;
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{"accepted":true}}))
        .await;
    raw.send_json(json!({"jsonrpc":"2.0","method":"after"}))
        .await;
    let mut order = Vec::new();
    for _ in 0..3 {
        match incoming.recv_ordered().await.unwrap() {
            mcpl::peer::Ordered::Message(IncomingMessage::Notification(n)) => order.push(n.method),
            mcpl::peer::Ordered::Response(r) => {
                assert_eq!(r.id, Some(id.clone()));
                assert_eq!(r.outcome, Ok(json!({"accepted": true})));
                order.push("response".into());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(order, ["before", "response", "after"]);
    assert_eq!(peer.pending_requests(), 0);
}

/// A forgotten in-order request's late response is reported, never delivered.
#[tokio::test]
async fn a_forgotten_in_order_request_is_reported_late_not_delivered() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let id = peer.send_request("slow", None, |_| {}).await.unwrap();
    let req = raw.recv().await;
    assert!(peer.forget(&id, "timed out"));
    assert!(!peer.forget(&id, "twice"));
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{}}))
        .await;
    assert_eq!(diags.recv().await, Some(Diagnostic::LateResponse { id }));
    raw.send_json(json!({"jsonrpc":"2.0","method":"next"}))
        .await;
    match incoming.recv_ordered().await.unwrap() {
        mcpl::peer::Ordered::Message(IncomingMessage::Notification(n)) => {
            assert_eq!(n.method, "next")
        }
        other => panic!("the late response was delivered: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_applies_and_is_configurable() {
    let config = PeerConfig {
        request_timeout: Some(Duration::from_millis(1500)),
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer(config);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("slow", None).await });
    raw.recv().await;
    match call.await.unwrap() {
        Err(PeerError::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(1500)),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn local_close_fails_every_pending_request_at_once() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let p = peer.clone();
            tokio::spawn(async move { p.request_raw("never", None).await })
        })
        .collect();
    for _ in 0..3 {
        raw.recv().await;
    }
    assert_eq!(peer.pending_requests(), 3);
    peer.close();
    for c in calls {
        assert_eq!(c.await.unwrap(), Err(PeerError::Closed(CloseReason::Local)));
    }
    assert_eq!(
        peer.request_raw("after", None).await,
        Err(PeerError::Closed(CloseReason::Local))
    );
}

#[tokio::test]
async fn eof_fails_every_pending_request_and_ends_incoming() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let p = peer.clone();
            tokio::spawn(async move { p.request_raw("never", None).await })
        })
        .collect();
    raw.recv().await;
    raw.recv().await;
    drop(raw);
    for c in calls {
        assert_eq!(c.await.unwrap(), Err(PeerError::Closed(CloseReason::Eof)));
    }
    assert!(incoming.recv().await.is_none());
    assert_eq!(peer.closed().await, CloseReason::Eof);
}

#[tokio::test]
async fn junk_line_gets_a_diagnostic_and_no_reply_then_a_request_works() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send("server starting up on port 4000...").await;
    raw.send("").await;
    assert_ping_works(&mut raw, 1).await;
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::JunkLine {
            excerpt: "server starting up on port 4000...".into()
        })
    );
    assert_eq!(diags.try_recv(), None, "blank lines are not reported");
}

/// RFC 8259 §2: only space, tab, line feed and carriage return are JSON whitespace. A line
/// of other whitespace (a no-break space, U+2028) is no blank line but junk, reported
/// (`jsonrpc::message_lead`); a line of JSON whitespace (and a byte order mark) stays blank.
/// Before, both were skipped unreported.
#[tokio::test]
async fn a_line_of_whitespace_json_does_not_have_is_junk_not_blank() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send(" \t\r").await;
    raw.send("\u{feff} ").await;
    raw.send("\u{a0}\u{2028}").await;
    assert_ping_works(&mut raw, 1).await;
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::JunkLine {
            excerpt: "\u{a0}\u{2028}".into()
        })
    );
    assert_eq!(diags.try_recv(), None, "blank lines are not reported");
}

#[tokio::test]
async fn unparseable_json_gets_32700_with_null_id_then_a_request_works() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"#).await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], json!(codes::PARSE_ERROR));
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::ParseError { .. })
    ));
    assert_ping_works(&mut raw, 2).await;
}

#[tokio::test]
async fn oversized_line_is_discarded_and_the_connection_survives() {
    let config = PeerConfig {
        max_message_size: 1024,
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    let big = json!({"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"y".repeat(5000)}});
    raw.send_json(big).await;
    // Its id is in the part read before the cut: it is answered -32600, saying why (§6.6: a
    // request with an id gets an answer).
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(1), "{reply}");
    assert_eq!(
        reply["error"]["code"],
        json!(codes::INVALID_REQUEST),
        "{reply}"
    );
    assert_eq!(reply["error"]["data"]["limit"], json!(1024), "{reply}");
    assert_eq!(
        reply["error"]["data"]["reason"],
        json!("max_message_size"),
        "{reply}"
    );
    assert_ping_works(&mut raw, 2).await;
    match diags.try_recv() {
        Some(Diagnostic::Oversized { bytes, limit }) => {
            assert_eq!(limit, 1024);
            assert!(bytes > 5000);
        }
        other => panic!("expected an oversize diagnostic, got {other:?}"),
    }
    // A message just under the limit still passes.
    raw.send_json(json!({"jsonrpc":"2.0","id":3,"method":"echo","params":{"x":"y".repeat(900)}}))
        .await;
    assert_eq!(raw.recv().await["result"]["x"], json!("y".repeat(900)));
}

#[tokio::test]
async fn invalid_message_with_id_gets_32600_then_a_request_works() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send_json(json!({"jsonrpc":"1.0","id":"x7","method":"ping"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!("x7"));
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::InvalidMessage { answered: true, .. })
    ));
    // Params of the wrong type, too.
    raw.send_json(json!({"jsonrpc":"2.0","id":8,"method":"ping","params":"str"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(8));
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
    assert_ping_works(&mut raw, 9).await;
}

/// JSON-RPC 2.0 §5: an invalid request whose id cannot be read is still answered -32600,
/// with `"id": null`, alone as in a batch (the spec's own `"method": 1` example; a null id,
/// which MCP forbids; an id of the wrong type, or a whole number past 64 bits).
/// A line that is not a JSON object or array at
/// all stays a junk line (a diagnostic), as before.
#[tokio::test]
async fn invalid_request_without_a_readable_id_gets_32600_with_null_id() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    for line in [
        r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
        // An integer past 64 bits could not be echoed digit for digit: no id. (A fraction,
        // `1.5`, is one: JSON-RPC 2.0 §4 says SHOULD NOT, `fractional_request_ids.rs`.)
        r#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1e30,"method":"ping"}"#,
    ] {
        raw.send(line).await;
        let reply = raw.recv().await;
        assert_eq!(reply["id"], Value::Null, "{line}: {reply}");
        assert_eq!(
            reply["error"]["code"],
            json!(codes::INVALID_REQUEST),
            "{line}"
        );
    }
    assert_ping_works(&mut raw, 9).await;
}

/// The widest integer ids are kept digit for digit.
#[tokio::test]
async fn integer_ids_at_the_64_bit_edges_are_echoed_exactly() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    for id in ["18446744073709551615", "-9223372036854775808", "0"] {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .await;
        let reply = raw.recv_line().await;
        assert!(reply.contains(&format!(r#""id":{id}"#)), "{reply}");
    }
}

#[tokio::test]
async fn non_2_0_json_without_id_is_skipped_with_a_diagnostic() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send(r#"{"level":"info","msg":"listening"}"#).await;
    assert_ping_works(&mut raw, 1).await;
    assert!(matches!(
        diags.try_recv(),
        Some(Diagnostic::InvalidMessage {
            id: None,
            answered: false,
            ..
        })
    ));
}

#[tokio::test]
async fn malformed_response_fails_its_pending_request_at_once() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("x", None).await });
    let req = raw.recv().await;
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"]})).await;
    assert!(matches!(
        call.await.unwrap(),
        Err(PeerError::InvalidResponse(_))
    ));
}

/// The same for a `Peer::send_request`: a malformed response (neither result nor error,
/// both, or one over `max_parsed_cost`) to an in-order request is delivered by
/// `Incoming::recv_ordered` at its wire position as an error (`-32603` naming the defect),
/// not left to the request's deadline. It was only reported, so a host's `initialize`
/// waited its `initialize_timeout`, its policy Request its `policy_timeout`, and what the
/// server sent after it was judged as if it had not answered.
#[tokio::test]
async fn a_malformed_response_to_an_in_order_request_is_delivered_at_its_position() {
    let config = PeerConfig {
        max_parsed_cost: 10_000,
        ..PeerConfig::default()
    };
    let (peer, mut incoming, mut raw) = raw_peer(config);
    let objects = vec![r#"{"a":1}"#; 1000].join(",");
    let malformed = [
        json!({"jsonrpc":"2.0"}).to_string(),
        json!({"jsonrpc":"2.0","result":{},"error":{"code":1,"message":"m"}}).to_string(),
        format!(r#"{{"jsonrpc":"2.0","result":[{objects}]}}"#),
    ];
    for (i, text) in malformed.iter().enumerate() {
        let id = peer.send_request("slow", None, |_| {}).await.unwrap();
        let req = raw.recv().await;
        // The request's id spliced in first, then a notification read after it.
        let line = format!(r#"{{"id":{},{}"#, req["id"], &text[1..]);
        raw.send(&line).await;
        raw.send_json(json!({"jsonrpc":"2.0","method":"after"}))
            .await;
        match incoming.recv_ordered().await.unwrap() {
            mcpl::peer::Ordered::Response(r) => {
                assert_eq!(r.id, Some(id.clone()), "case {i}");
                let e = r.outcome.expect_err("delivered as an error");
                assert_eq!(e.code, codes::INTERNAL_ERROR, "case {i}");
            }
            other => panic!("case {i}: the malformed response was not delivered: {other:?}"),
        }
        match incoming.recv_ordered().await.unwrap() {
            mcpl::peer::Ordered::Message(IncomingMessage::Notification(n)) => {
                assert_eq!(n.method, "after", "case {i}")
            }
            other => panic!("case {i}: {other:?}"),
        }
        assert!(!peer.forget(&id, "settled"), "case {i}: still waiting");
    }
}

#[tokio::test]
async fn s6_6_unknown_method_is_answered_32601_by_the_dropped_guard() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    raw.send_json(json!({"jsonrpc":"2.0","id":0,"method":"tools/frobnicate"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(0));
    assert_eq!(reply["error"]["code"], json!(codes::METHOD_NOT_FOUND));
    assert_eq!(
        reply["error"]["data"],
        json!({"method": "tools/frobnicate"})
    );
}

#[tokio::test]
async fn s6_6_requests_are_answered_32601_when_nobody_receives() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    drop(incoming);
    let mut diags = peer.diagnostics();
    raw.send_json(json!({"jsonrpc":"2.0","method":"note"}))
        .await;
    raw.send_json(json!({"jsonrpc":"2.0","id":"r1","method":"ping"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!("r1"));
    assert_eq!(reply["error"]["code"], json!(codes::METHOD_NOT_FOUND));
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::UnhandledNotification {
            method: "note".into()
        })
    );
}

#[tokio::test]
async fn error_data_round_trips_verbatim() {
    let ((a, _a_in), (_b, mut b_in)) = Peer::memory_pair(PeerConfig::default());
    let data = json!({"capability": "pushEvents", "nested": [1, 2.5, null, {"k": "v"}]});
    let sent = ErrorObject::new(codes::CAPABILITY_DENIED, "Capability denied").with_data(data);
    let expected = sent.clone();
    tokio::spawn(async move {
        if let Some(IncomingMessage::Request(r)) = b_in.recv().await {
            r.respond_error(sent).await.unwrap();
        }
    });
    let err = a
        .request_raw("push/event", Some(json!({})))
        .await
        .unwrap_err();
    assert_eq!(err, PeerError::Remote(expected));
}

#[tokio::test]
async fn a_batch_gets_one_array_of_responses_and_none_for_notifications() {
    let (_peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            seen2.lock().unwrap().push(msg.method().to_owned());
            if let IncomingMessage::Request(r) = msg {
                if r.method() == "echo" {
                    let p = r.request().params.clone().unwrap();
                    r.respond(p).await.unwrap();
                }
            }
        }
    });
    raw.send_json(json!([
        {"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}},
        {"jsonrpc":"2.0","method":"note"},
        {"jsonrpc":"2.0","id":2,"method":"nope"},
        {"jsonrpc":"2.0","id":3,"method":"echo","params":{"b":2}},
        1
    ]))
    .await;
    let reply = raw.recv().await;
    let arr = reply.as_array().expect("one array of responses");
    assert_eq!(arr.len(), 4);
    let by_id = |id: Value| arr.iter().find(|r| r["id"] == id).cloned().unwrap();
    assert_eq!(by_id(json!(1))["result"], json!({"a":1}));
    assert_eq!(by_id(json!(3))["result"], json!({"b":2}));
    assert_eq!(
        by_id(json!(2))["error"]["code"],
        json!(codes::METHOD_NOT_FOUND)
    );
    assert_eq!(
        by_id(Value::Null)["error"]["code"],
        json!(codes::INVALID_REQUEST)
    );
    assert_eq!(*seen.lock().unwrap(), vec!["echo", "note", "nope", "echo"]);

    // A batch of notifications only gets no reply at all: the next line answers the echo.
    raw.send_json(json!([{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"2.0","method":"note"}]))
        .await;
    raw.send_json(json!({"jsonrpc":"2.0","id":4,"method":"echo","params":[]}))
        .await;
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":4,"result":[]})
    );
}

#[tokio::test]
async fn an_empty_batch_is_an_invalid_request() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send("[]").await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
    assert_eq!(diags.recv().await, Some(Diagnostic::EmptyBatch));
    assert_ping_works(&mut raw, 1).await;
}

#[tokio::test]
async fn a_batch_over_max_batch_entries_gets_one_32600_and_no_entry_is_handled() {
    let config = PeerConfig {
        max_batch_entries: 3,
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    // Four valid pings and a thousand invalid entries: none is answered on its own.
    let mut entries: Vec<Value> = (10..14)
        .map(|id| json!({"jsonrpc":"2.0","id":id,"method":"ping"}))
        .collect();
    entries.extend(std::iter::repeat(json!(1)).take(1000));
    raw.send_json(Value::Array(entries)).await;
    let reply = raw.recv().await;
    assert_eq!(reply["jsonrpc"], json!("2.0"));
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
    assert_eq!(reply["error"]["data"], json!({"limit": 3, "count": 1004}));
    assert_eq!(
        diags.recv().await,
        Some(Diagnostic::BatchTooLarge {
            count: 1004,
            limit: 3
        })
    );
    // The very next line is the ping's answer: nothing of the batch was handled.
    assert_ping_works(&mut raw, 1).await;
    assert!(diags.try_recv().is_none());

    // A batch at the limit is handled entry by entry.
    raw.send_json(json!([
        {"jsonrpc":"2.0","id":20,"method":"ping"},
        {"jsonrpc":"2.0","id":21,"method":"ping"},
        7
    ]))
    .await;
    let reply = raw.recv().await;
    let arr = reply.as_array().expect("one array of responses");
    assert_eq!(arr.len(), 3);
    for id in [json!(20), json!(21)] {
        assert!(arr.contains(&json!({"jsonrpc":"2.0","id":id,"result":{}})));
    }
    assert!(arr
        .iter()
        .any(|r| r["id"].is_null() && r["error"]["code"] == json!(codes::INVALID_REQUEST)));
    assert_ping_works(&mut raw, 2).await;
}

#[tokio::test]
async fn responses_inside_a_batch_settle_pending_requests() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let (p1, p2) = (peer.clone(), peer.clone());
    let c1 = tokio::spawn(async move { p1.request_raw("a", None).await });
    let c2 = tokio::spawn(async move { p2.request_raw("b", None).await });
    let first = raw.recv().await;
    let second = raw.recv().await;
    let answer = |req: &Value| json!({"jsonrpc":"2.0","id":req["id"],"result":req["method"]});
    raw.send_json(json!([answer(&second), answer(&first)]))
        .await;
    assert_eq!(c1.await.unwrap().unwrap(), json!("a"));
    assert_eq!(c2.await.unwrap().unwrap(), json!("b"));
}

#[tokio::test]
async fn unknown_response_id_is_a_diagnostic() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    raw.send_json(json!({"jsonrpc":"2.0","id":"nobody","result":{}}))
        .await;
    assert_ping_works(&mut raw, 1).await;
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::UnknownResponse {
            id: Some(RequestId::from("nobody")),
            error: None
        })
    );
}

#[tokio::test]
async fn too_many_pending_requests_fail_at_once() {
    let config = PeerConfig {
        max_pending_requests: 2,
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer(config);
    for _ in 0..2 {
        let p = peer.clone();
        tokio::spawn(async move { p.request_raw("hold", None).await });
    }
    raw.recv().await;
    raw.recv().await;
    assert_eq!(
        peer.request_raw("third", None).await,
        Err(PeerError::TooManyPending { limit: 2 })
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_hits_the_write_timeout() {
    let config = PeerConfig {
        write_timeout: Some(Duration::from_secs(2)),
        ..PeerConfig::default()
    };
    // A 64-byte pipe and a raw side that never reads.
    let (peer, _incoming, _raw) = raw_peer_with(config, 64);
    let big = json!({"blob": "z".repeat(1000)});
    let result = peer.request_raw("upload", Some(big)).await;
    assert_eq!(
        result,
        Err(PeerError::Closed(CloseReason::WriteTimeout(
            Duration::from_secs(2)
        )))
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_closes_a_silent_connection() {
    let config = PeerConfig {
        idle_timeout: Some(Duration::from_secs(10)),
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    assert_ping_works(&mut raw, 1).await;
    assert_eq!(
        peer.closed().await,
        CloseReason::IdleTimeout(Duration::from_secs(10))
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_fires_while_the_reader_is_blocked_answering_a_side_that_never_reads() {
    let config = PeerConfig {
        idle_timeout: Some(Duration::from_secs(1)),
        ..PeerConfig::default()
    };
    let (peer, _incoming, raw) = raw_peer_with(config, 1024);
    // The raw side floods unparseable lines (each answered -32700) and never reads: the pipe
    // and the outgoing queue fill, and the reader blocks sending a reply.
    let Raw { lines, mut write } = raw;
    let flood = tokio::spawn(async move {
        let junk = "{x\n".repeat(1000);
        while write.write_all(junk.as_bytes()).await.is_ok() {}
    });
    let start = tokio::time::Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(60), peer.closed()).await;
    assert_eq!(reason, Ok(CloseReason::IdleTimeout(Duration::from_secs(1))));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(2),
        "closed after {took:?}"
    );
    flood.abort();
    drop(lines);
}

#[tokio::test(start_paused = true)]
async fn a_flooding_peer_is_slowed_at_the_transport() {
    let config = PeerConfig {
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let (_peer, mut incoming, mut raw) = raw_peer_with(config, 256);
    let mut flood = tokio::spawn(async move {
        for i in 0..200 {
            raw.send_json(json!({"jsonrpc":"2.0","method":"flood","params":{"i":i}}))
                .await;
        }
        raw
    });
    // Nobody reads, so the flood must stall on the full pipe. With paused time this timeout
    // only fires once every task is blocked: it is a deadlock check, not a wall-clock wait.
    assert!(
        tokio::time::timeout(Duration::from_secs(60), &mut flood)
            .await
            .is_err(),
        "the flood was buffered without bound"
    );
    for i in 0..200 {
        let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
            panic!("expected notification {i}")
        };
        assert_eq!(n.params, Some(json!({"i": i})));
    }
    flood.await.unwrap();
}

/// A batch whose entries overrun the incoming queue makes the reader wait for room part-way
/// through it (the boxed rare path of `peer::reader`), both for a small batch and for one
/// read off the worker (past 256 KiB): every entry is still delivered, in order, and the
/// connection reads on after it.
#[tokio::test]
async fn a_batch_larger_than_the_incoming_queue_is_delivered_whole_and_in_order() {
    let config = PeerConfig {
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let (_peer, mut incoming, mut raw) = raw_peer(config);
    for pad in [0usize, 30 * 1024] {
        let filler = "x".repeat(pad);
        let batch: Vec<Value> = (0..10)
            .map(|i| json!({"jsonrpc": "2.0", "method": "n", "params": {"i": i, "pad": filler}}))
            .collect();
        raw.send_json(Value::Array(batch)).await;
        raw.send_json(json!({"jsonrpc": "2.0", "method": "after", "params": {"pad": pad}}))
            .await;
        for i in 0..10 {
            let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
                panic!("expected entry {i} of the batch padded {pad}")
            };
            assert_eq!(n.method, "n");
            assert_eq!(n.params.as_ref().and_then(|p| p.get("i")), Some(&json!(i)));
        }
        let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
            panic!("expected the message after the batch padded {pad}")
        };
        assert_eq!(
            (n.method.as_str(), n.params),
            ("after", Some(json!({"pad": pad})))
        );
    }
}

#[tokio::test]
async fn the_tap_sees_every_frame_in_and_out() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let config = PeerConfig {
        tap: Some(Tap::new(move |ev| {
            log2.lock()
                .unwrap()
                .push((ev.direction, ev.text.to_owned()))
        })),
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#)
        .await;
    raw.recv().await;
    peer.notify_raw("note", Some(json!([1]))).await.unwrap();
    raw.recv().await;
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec![
            (
                FrameDirection::Inbound,
                r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#.to_owned()
            ),
            (
                FrameDirection::Outbound,
                r#"{"id":5,"jsonrpc":"2.0","result":{}}"#.to_owned()
            ),
            (
                FrameDirection::Outbound,
                r#"{"jsonrpc":"2.0","method":"note","params":[1]}"#.to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn diagnostics_overflow_is_counted_not_buffered() {
    let config = PeerConfig {
        diagnostics_capacity: 2,
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    for i in 0..5 {
        raw.send(&format!("junk {i}")).await;
    }
    assert_ping_works(&mut raw, 1).await;
    assert_eq!(diags.recv().await, Some(Diagnostic::Dropped { count: 3 }));
    assert_eq!(
        diags.recv().await,
        Some(Diagnostic::JunkLine {
            excerpt: "junk 3".into()
        })
    );
    assert_eq!(
        diags.recv().await,
        Some(Diagnostic::JunkLine {
            excerpt: "junk 4".into()
        })
    );
}

#[tokio::test]
async fn handler_style_dispatch_serves_requests() {
    let ((a, _a_in), (_b, b_in)) = Peer::memory_pair(PeerConfig::default());
    tokio::spawn(b_in.serve(4, |msg| async move {
        if let IncomingMessage::Request(r) = msg {
            if r.method() == "add" {
                let p: (i64, i64) = match r.params() {
                    Ok(p) => p,
                    Err(e) => return r.respond_error(e).await.unwrap(),
                };
                r.respond(p.0 + p.1).await.unwrap();
            }
        }
    }));
    assert_eq!(
        a.request_raw("add", Some(json!([2, 3]))).await.unwrap(),
        json!(5)
    );
    let bad = a
        .request_raw("add", Some(json!({"x": 1})))
        .await
        .unwrap_err();
    assert_eq!(bad.remote().map(|e| e.code), Some(codes::INVALID_PARAMS));
    let missing = a.request_raw("sub", None).await.unwrap_err();
    assert_eq!(
        missing.remote().map(|e| e.code),
        Some(codes::METHOD_NOT_FOUND)
    );
}

#[tokio::test]
async fn incoming_recv_is_cancel_safe_in_select() {
    let ((a, _a_in), (_b, mut b_in)) = Peer::memory_pair(PeerConfig::default());
    let sender = tokio::spawn(async move {
        for i in 0..50 {
            a.notify_raw("n", Some(json!([i]))).await.unwrap();
        }
        a
    });
    // A competing branch that is often ready: a cancelled recv must not lose a message.
    let mut got = Vec::new();
    while got.len() < 50 {
        tokio::select! {
            m = b_in.recv() => got.push(m.unwrap()),
            _ = tokio::task::yield_now() => {}
        }
    }
    for (i, m) in got.iter().enumerate() {
        let IncomingMessage::Notification(n) = m else {
            panic!("expected a notification")
        };
        assert_eq!(n.params, Some(json!([i])));
    }
    sender.await.unwrap();
}

#[tokio::test]
async fn dropping_every_handle_closes_the_connection() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    drop(peer);
    assert!(raw.lines.next_line().await.unwrap().is_none());
}

#[tokio::test]
async fn tcp_listener_accepts_one_session_after_another() {
    let listener = transport::tcp::Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for session in 0..2 {
            let (t, _) = listener.accept().await.unwrap();
            let (peer, mut incoming) = Peer::new(t, PeerConfig::default());
            // A server-initiated request while the client's request is still open.
            if let Some(IncomingMessage::Request(r)) = incoming.recv().await {
                let hello = peer.request_raw("client/hello", None).await.unwrap();
                r.respond(json!({"session": session, "client": hello}))
                    .await
                    .unwrap();
            }
            peer.closed().await;
        }
    });
    for session in 0..2 {
        let t = transport::tcp::connect(addr).await.unwrap();
        let (peer, mut incoming) = Peer::new(t, PeerConfig::default());
        tokio::spawn(async move {
            while let Some(IncomingMessage::Request(r)) = incoming.recv().await {
                r.respond(json!("hi")).await.unwrap();
            }
        });
        let r = peer.request_raw("work", None).await.unwrap();
        assert_eq!(r, json!({"session": session, "client": "hi"}));
        peer.close();
        peer.closed().await;
    }
    server.await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn child_process_exchange_reads_output_written_before_exit() {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(
        r#"read line; echo 'log: got a request'; echo '{"jsonrpc":"2.0","id":1,"result":{"ok":true}}'"#,
    );
    let (t, _control) = transport::child::spawn(&mut cmd).unwrap();
    let (peer, _incoming) = Peer::new(t, PeerConfig::default());
    let mut diags = peer.diagnostics();
    assert_eq!(
        peer.request_raw("ping", None).await.unwrap(),
        json!({"ok": true})
    );
    assert_eq!(peer.closed().await, CloseReason::Eof);
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::JunkLine { .. })
    ));
}

#[cfg(unix)]
#[tokio::test]
async fn child_killed_mid_request_fails_the_request_promptly() {
    let mut cmd = tokio::process::Command::new("sh");
    // The `sleep` grandchild keeps the stdout pipe open after `sh` dies: the child's exit
    // itself must end the connection.
    cmd.arg("-c")
        .arg("read line; echo '{\"jsonrpc\":\"2.0\",\"method\":\"got\"}'; sleep 30; true");
    let (t, control) = transport::child::spawn(&mut cmd).unwrap();
    let config = PeerConfig {
        request_timeout: Some(Duration::from_secs(600)),
        ..PeerConfig::default()
    };
    let (peer, mut incoming) = Peer::new(t, config);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("work", None).await });
    // The child announces it read the request; then it is killed mid-request.
    let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
        panic!("the child did not announce")
    };
    assert_eq!(n.method, "got");
    control.kill();
    assert_eq!(
        call.await.unwrap(),
        Err(PeerError::Closed(CloseReason::Eof))
    );
    assert!(!control.wait().await.unwrap().success());
}

/// A typed method for the tests: `math/add` with `[a, b]` params and a `{ sum }` result.
struct Add;

#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct Sum {
    sum: i64,
}

impl mcpl::protocol::Method for Add {
    const NAME: &'static str = "math/add";
    const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
    const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
    type Params = (i64, i64);
    type Result = Sum;
    fn requirement(_: &Self::Params) -> mcpl::capability::Requirement {
        mcpl::capability::Requirement::None
    }
}

/// A typed notification with unit params, sent without a `params` member.
struct Tick;

impl mcpl::protocol::Method for Tick {
    const NAME: &'static str = "tick";
    const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Notification;
    const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
    type Params = ();
    type Result = ();
    fn requirement(_: &Self::Params) -> mcpl::capability::Requirement {
        mcpl::capability::Requirement::None
    }
}

#[tokio::test]
async fn typed_requests_and_notifications_round_trip() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request::<Add>(&(2, 40)).await });
    let req = raw.recv().await;
    assert_eq!(req["method"], json!("math/add"));
    assert_eq!(req["params"], json!([2, 40]));
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{"sum":42}}))
        .await;
    assert_eq!(call.await.unwrap().unwrap(), Sum { sum: 42 });

    // A result of the wrong shape is a decode error, not a panic.
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request::<Add>(&(1, 1)).await });
    let req = raw.recv().await;
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":"two"}))
        .await;
    assert!(matches!(call.await.unwrap(), Err(PeerError::Decode { .. })));

    peer.notify::<Tick>(&()).await.unwrap();
    assert_eq!(raw.recv().await, json!({"jsonrpc":"2.0","method":"tick"}));
}

#[tokio::test]
async fn typed_params_extraction_on_the_receiving_side() {
    let ((a, _a_in), (_b, mut b_in)) = Peer::memory_pair(PeerConfig::default());
    tokio::spawn(async move {
        while let Some(IncomingMessage::Request(r)) = b_in.recv().await {
            if r.is::<Add>() {
                match r.typed_params::<Add>() {
                    Ok((x, y)) => r.respond(Sum { sum: x + y }).await.unwrap(),
                    Err(e) => r.respond_error(e).await.unwrap(),
                }
            }
        }
    });
    assert_eq!(a.request::<Add>(&(3, 4)).await.unwrap(), Sum { sum: 7 });
    let err = a
        .request_raw("math/add", Some(json!({"a": 1})))
        .await
        .unwrap_err();
    assert_eq!(err.remote().map(|e| e.code), Some(codes::INVALID_PARAMS));
}

#[cfg(unix)]
#[tokio::test(start_paused = true)]
async fn closing_the_peer_kills_a_child_that_ignores_eof_after_the_grace() {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg("exec sleep 1000");
    let (t, control) = transport::child::spawn(&mut cmd).unwrap();
    let (peer, _incoming) = Peer::new(t, PeerConfig::default());
    peer.close();
    // Paused time: the grace elapses as soon as everything is idle; the child is then killed.
    let status = control.wait().await.unwrap();
    assert!(!status.success());
}

#[tokio::test]
async fn dropping_a_request_future_cancels_it_and_its_response_is_late() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("long", None).await });
    let req = raw.recv().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let cancel = raw.recv().await;
    assert_eq!(cancel["method"], json!("notifications/cancelled"));
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    assert_eq!(peer.pending_requests(), 0);
    raw.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{}}))
        .await;
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::LateResponse { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn cancellation_notifications_can_be_turned_off() {
    let config = PeerConfig {
        cancel_method: None,
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer(config);
    let r = peer
        .request_raw_with(
            "slow",
            None,
            RequestOptions::new().timeout(Duration::from_secs(1)),
        )
        .await;
    assert!(matches!(r, Err(PeerError::Timeout { .. })));
    raw.recv().await; // the request itself
    peer.notify_raw("marker", None).await.unwrap();
    assert_eq!(raw.recv().await["method"], json!("marker"));
}

#[tokio::test]
async fn a_panicking_handler_answers_32603() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    tokio::spawn(incoming.serve(2, |msg| async move {
        if let IncomingMessage::Request(r) = msg {
            if r.method() == "boom" {
                panic!("handler bug (expected by this test)");
            }
            r.respond(json!("fine")).await.unwrap();
        }
    }));
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"boom"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(1));
    assert_eq!(reply["error"]["code"], json!(codes::INTERNAL_ERROR));
    raw.send_json(json!({"jsonrpc":"2.0","id":2,"method":"ok"}))
        .await;
    assert_eq!(raw.recv().await["result"], json!("fine"));
}

/// §6.6: a request with an id always gets an answer — even when the other side ends its
/// stream right after sending it (`printf '<request>\n' | server`). The response is still
/// written after EOF; only then does the connection close.
#[tokio::test(start_paused = true)]
async fn s6_6_responses_owed_at_eof_are_still_written() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"slow"}))
        .await;
    raw.write.shutdown().await.unwrap();
    let IncomingMessage::Request(req) = incoming.recv().await.unwrap() else {
        panic!("expected a request");
    };
    // Paused time only advances once every task is idle, so the reader has seen EOF by the
    // time this handler answers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        peer.close_reason().is_none(),
        "closed before the owed answer"
    );
    req.respond(json!({"ok": true})).await.unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":1,"result":{"ok":true}})
    );
    assert!(matches!(peer.closed().await, CloseReason::Eof));
    // Our own requests fail at once after EOF: nobody can answer them.
    assert!(matches!(
        peer.request_raw("x", None).await,
        Err(PeerError::Closed(_))
    ));
}

/// Senders write their own frames when the writer is free and queue them otherwise; over a
/// 64-byte pipe that forces partial writes, every frame still arrives whole and each
/// sender's frames arrive in the order it sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frames_stay_whole_and_in_order_when_senders_write_directly_or_queue() {
    const SENDERS: u64 = 8;
    const EACH: u64 = 200;
    let (peer, _incoming, mut raw) = raw_peer_with(PeerConfig::default(), 64);
    let mut tasks = Vec::new();
    for task in 0..SENDERS {
        let peer = peer.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let params = json!({"task": task, "n": n, "pad": "x".repeat((n % 50) as usize)});
                peer.notify_raw("seq", Some(params)).await.unwrap();
            }
        }));
    }
    let mut next = vec![0u64; SENDERS as usize];
    for _ in 0..SENDERS * EACH {
        let v = raw.recv().await;
        assert_eq!(v["method"], "seq");
        let task = v["params"]["task"].as_u64().unwrap() as usize;
        assert_eq!(
            v["params"]["n"].as_u64().unwrap(),
            next[task],
            "sender {task}"
        );
        next[task] += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(next.iter().all(|&n| n == EACH));
}

/// A writer that records how each frame reached it: `try_send_now` (the sender wrote it) or
/// `send`/`send_many` (the writer task did).
struct RecordingWriter {
    log: tokio::sync::watch::Sender<Vec<(&'static str, String)>>,
}

impl transport::FrameWriter for RecordingWriter {
    fn send<'a>(&'a mut self, text: &'a str) -> transport::BoxFuture<'a, std::io::Result<()>> {
        self.log
            .send_modify(|l| l.push(("queued", text.to_owned())));
        Box::pin(async { Ok(()) })
    }
    fn send_many<'a>(
        &'a mut self,
        texts: &'a [String],
    ) -> transport::BoxFuture<'a, std::io::Result<()>> {
        self.log
            .send_modify(|l| l.extend(texts.iter().map(|t| ("queued", t.clone()))));
        Box::pin(async { Ok(()) })
    }
    fn close(&mut self) -> transport::BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn try_send_now(&mut self, text: &str) -> std::io::Result<transport::TrySend> {
        self.log
            .send_modify(|l| l.push(("direct", text.to_owned())));
        Ok(transport::TrySend::Written)
    }
}

/// A reader on which nothing ever arrives.
struct SilentReader;

impl transport::FrameReader for SilentReader {
    fn next_frame(
        &mut self,
    ) -> transport::BoxFuture<'_, std::io::Result<Option<transport::Frame>>> {
        Box::pin(std::future::pending())
    }
    fn set_max_message_size(&mut self, _limit: usize) {}
}

/// One frame at a time, senders write their own frames; once a burst is under way (more
/// than one request in flight), frames go through the writer task so they can share writes.
/// Either way every frame is written once, in order.
#[tokio::test]
async fn quiet_sends_are_written_directly_and_a_burst_is_left_to_the_writer_task() {
    let (log, mut seen) = tokio::sync::watch::channel(Vec::new());
    let t = Transport {
        reader: Box::new(SilentReader),
        writer: Box::new(RecordingWriter { log }),
        guard: None,
        description: "recording".into(),
    };
    let config = PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    };
    let (peer, _incoming) = Peer::new(t, config);
    for n in 0..5 {
        peer.notify_raw("quiet", Some(json!({ "n": n })))
            .await
            .unwrap();
    }
    // 20 requests nobody answers: the first is the only one in flight when it is sent.
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_raw("burst", None).await })
        })
        .collect();
    let log = seen.wait_for(|l| l.len() == 25).await.unwrap().clone();
    let how: Vec<&str> = log.iter().map(|(how, _)| *how).collect();
    assert_eq!(how[..5], ["direct"; 5], "{how:?}");
    assert_eq!(how[5], "direct", "{how:?}");
    assert!(how[6..].iter().all(|h| *h == "queued"), "{how:?}");
    let ids: Vec<u64> = log[5..]
        .iter()
        .map(|(_, text)| {
            serde_json::from_str::<Value>(text).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 20, "every request written once: {ids:?}");
    for b in burst {
        b.abort();
    }
}

/// Issue #20: a message whose parsed form would be many times its text (here a `ping` whose
/// params hold small objects, the shape that took a server from 16 MiB of text to 1.4 GB) is
/// refused before it is built: a request `-32600` under its own id with
/// `data: {limit, count, reason}`, a notification reported only, a response failing the
/// request it answers; the connection goes on.
#[tokio::test]
async fn a_message_over_max_parsed_cost_is_refused_unbuilt_and_the_connection_goes_on() {
    let config = PeerConfig {
        max_parsed_cost: 10_000,
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let mut diags = peer.diagnostics();
    let objects = vec![r#"{"a":1}"#; 1000].join(",");
    // A request: its id is read without building the params, and answered.
    let line =
        format!(r#"{{"jsonrpc":"2.0","method":"echo","id":"big-1","params":{{"x":[{objects}]}}}}"#);
    let cost = mcpl::jsonrpc::parsed_cost(&line);
    assert!(cost > 20_000, "{cost}");
    raw.send(&line).await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!("big-1"));
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
    assert_eq!(
        reply["error"]["data"],
        json!({"limit": 10_000, "count": cost, "reason": "parsed_cost"})
    );
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::TooCostly { id: Some(_), method: Some(m), limit: 10_000, .. }) if m == "echo"
    ));
    // A notification: reported, not answered, not delivered.
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/x","params":[{objects}]}}"#
    ))
    .await;
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::TooCostly { id: None, .. })
    ));
    // An object with neither id nor method: reported, never answered (the next line read is
    // the ping's answer).
    raw.send(&format!(r#"{{"jsonrpc":"2.0","result":[{objects}]}}"#))
        .await;
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::TooCostly {
            id: None,
            method: None,
            ..
        })
    ));
    assert_ping_works(&mut raw, 2).await;
    // A batch: one `id: null` error.
    raw.send(&format!("[{objects}]")).await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["data"]["reason"], json!("parsed_cost"));
    // A response: the request it answers fails at once.
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("slow", None).await });
    let req = raw.recv().await;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":[{objects}]}}"#,
        req["id"]
    ))
    .await;
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, PeerError::InvalidResponse(r) if r.contains("max_parsed_cost")),
        "{err:?}"
    );
    assert_ping_works(&mut raw, 3).await;
}

/// A request whose id is no id (`null`, a whole `1e30`, a boolean, an object, an integer
/// past 64 bits) is an Invalid Request answered `-32600` with `id: null` (JSON-RPC 2.0 §5), over the
/// parsed-cost bound as under it. Over the bound it was read as a notification (its unusable
/// id was skipped like an absent one) and only reported.
#[tokio::test]
async fn a_costly_request_with_an_unusable_id_is_answered_with_a_null_id() {
    let config = PeerConfig {
        max_parsed_cost: 10_000,
        ..PeerConfig::default()
    };
    let (_peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let objects = vec![r#"{"a":1}"#; 1000].join(",");
    for (n, id) in ["null", "1e30", "true", r#"{"a":1}"#, "18446744073709551616"]
        .into_iter()
        .enumerate()
    {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"echo","id":{id},"params":{{"x":[{objects}]}}}}"#
        ))
        .await;
        // The refusal comes first, then the ping's answer.
        raw.send_json(json!({"jsonrpc": "2.0", "id": n, "method": "ping"}))
            .await;
        let reply = raw.recv().await;
        assert_eq!(reply["id"], Value::Null, "id {id}: {reply}");
        assert_eq!(
            reply["error"]["code"],
            json!(codes::INVALID_REQUEST),
            "{reply}"
        );
        assert_eq!(
            reply["error"]["data"]["reason"],
            json!("parsed_cost"),
            "{reply}"
        );
        assert_eq!(raw.recv().await["id"], json!(n));
    }
}

/// JSON-RPC 2.0 §5: a string id past `jsonrpc::MAX_ID_BYTES` cannot be used (a session
/// keeps a request's id in several places until it is answered, so 128 requests in flight
/// with 16 MiB ids held gigabytes): the request is answered `-32600` with `id: null`, under
/// the parsed-cost bound and over it, and the connection goes on. An id at the bound is
/// echoed as sent.
#[tokio::test]
async fn a_request_whose_string_id_is_past_the_bound_is_answered_with_a_null_id() {
    use mcpl::jsonrpc::MAX_ID_BYTES;
    let config = PeerConfig {
        max_parsed_cost: 10_000,
        ..PeerConfig::default()
    };
    let (_peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let long = "x".repeat(MAX_ID_BYTES + 1);
    let objects = vec![r#"{"a":1}"#; 1000].join(",");
    for params in ["{}".to_owned(), format!(r#"{{"x":[{objects}]}}"#)] {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"ping","id":"{long}","params":{params}}}"#
        ))
        .await;
        let reply = raw.recv().await;
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(
            reply["error"]["code"],
            json!(codes::INVALID_REQUEST),
            "{reply}"
        );
    }
    let at_bound = "y".repeat(MAX_ID_BYTES);
    raw.send_json(json!({"jsonrpc": "2.0", "id": at_bound, "method": "ping"}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(at_bound));
    assert!(reply.get("result").is_some(), "{reply}");
}

/// The default bound (`jsonrpc::DEFAULT_MAX_PARSED_COST`) refuses the attack's shape at
/// 2 MB of text, and keeps what a large legitimate message needs.
#[tokio::test]
async fn the_default_parsed_cost_bound_refuses_a_flood_of_objects_and_takes_big_text() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_ping_server(incoming);
    let objects = vec![r#"{"a":1}"#; 250_000].join(",");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"echo","id":1,"params":[{objects}]}}"#
    ))
    .await;
    let reply = raw.recv().await;
    assert_eq!(reply["error"]["data"]["reason"], json!("parsed_cost"));
    // 8 MB of one string costs one value.
    let text = "x".repeat(8 * 1024 * 1024);
    raw.send_json(json!({"jsonrpc":"2.0","method":"echo","id":2,"params":{"t": text}}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(
        reply["result"]["t"].as_str().map(str::len),
        Some(text.len())
    );
    drop(peer);
}

/// Issue #20: a text of 256 KiB or more is parsed off the connection's worker, and the
/// connection's messages still arrive in wire order: a large request written just before a
/// small one is delivered first, and a response read after a large notification settles
/// after it.
#[tokio::test]
async fn large_frames_read_off_the_worker_keep_wire_order() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let big = "y".repeat(300 * 1024);
    let lines = format!(
        "{}\n{}\n",
        json!({"jsonrpc":"2.0","method":"notifications/big","params":{"t": big}}),
        json!({"jsonrpc":"2.0","id":"small","method":"ping"})
    );
    raw.send(lines.trim_end()).await;
    let first = incoming.recv().await.expect("a message");
    assert!(
        matches!(&first, IncomingMessage::Notification(n) if n.method == "notifications/big"),
        "{first:?}"
    );
    let second = incoming.recv().await.expect("a message");
    assert!(
        matches!(&second, IncomingMessage::Request(r) if r.method() == "ping"),
        "{second:?}"
    );
    drop(second);
    // Answered -32601 by the dropped guard: the small request was read after the large one.
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!("small"));
    drop(peer);
}

/// Notes each frame as it is handed to the transport, written inline by a sender
/// (`try_send_now`) or by the writer task (`send`).
struct NotingWriter {
    inner: transport::LineWriter<tokio::io::DuplexStream>,
    wire: Arc<Mutex<Vec<String>>>,
    /// `false`: never takes a frame inline (as a transport without a fast path).
    inline: bool,
}

impl transport::FrameWriter for NotingWriter {
    fn send<'a>(&'a mut self, text: &'a str) -> transport::BoxFuture<'a, std::io::Result<()>> {
        self.wire.lock().unwrap().push(text.to_owned());
        self.inner.send(text)
    }
    fn close(&mut self) -> transport::BoxFuture<'_, std::io::Result<()>> {
        self.inner.close()
    }
    fn try_send_now(&mut self, text: &str) -> std::io::Result<transport::TrySend> {
        if !self.inline {
            return Ok(transport::TrySend::NotTaken);
        }
        let taken = self.inner.try_send_now(text)?;
        if taken != transport::TrySend::NotTaken {
            self.wire.lock().unwrap().push(text.to_owned());
        }
        Ok(taken)
    }
    fn flush_pending(&mut self) -> transport::BoxFuture<'_, std::io::Result<()>> {
        self.inner.flush_pending()
    }
}

/// The tap sees every outgoing frame before the transport has it, so a transcript never
/// shows an answer ahead of the request it answers. Before the fix, a frame a quiet peer
/// wrote inline was tapped only after the write, and a fast peer's answer could be tapped
/// first (an inspector once read a null `serverInfo` because of it).
#[tokio::test]
async fn the_tap_sees_an_outgoing_frame_before_the_transport_has_it() {
    tap_order_with(true).await;
}

/// The same when the transport takes nothing inline: a frame the sender tapped before
/// trying is written by the writer task and tapped once, not twice.
#[tokio::test]
async fn a_frame_the_transport_did_not_take_inline_is_tapped_once() {
    tap_order_with(false).await;
}

async fn tap_order_with(inline: bool) {
    let (a_write, b_read) = tokio::io::duplex(64 * 1024);
    let (b_write, a_read) = tokio::io::duplex(64 * 1024);
    let (_b, b_incoming) = Peer::new(
        Transport::lines(b_read, b_write, "b"),
        PeerConfig::default(),
    );
    spawn_ping_server(b_incoming);

    let wire = Arc::new(Mutex::new(Vec::<String>::new()));
    let late = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::new(Mutex::new(Vec::<(FrameDirection, String)>::new()));
    let tap = {
        let (wire, late, log) = (wire.clone(), late.clone(), log.clone());
        Tap::new(move |e| {
            if e.direction == FrameDirection::Outbound
                && wire.lock().unwrap().iter().any(|w| w == e.text)
            {
                late.lock().unwrap().push(e.text.to_owned());
            }
            log.lock().unwrap().push((e.direction, e.text.to_owned()));
        })
    };
    let transport = Transport {
        reader: Box::new(transport::LineReader::new(a_read)),
        writer: Box::new(NotingWriter {
            inner: transport::LineWriter::new(a_write),
            wire: wire.clone(),
            inline,
        }),
        guard: None,
        description: "a".into(),
    };
    let (a, _a_incoming) = Peer::new(
        transport,
        PeerConfig {
            tap: Some(tap),
            ..PeerConfig::default()
        },
    );
    for _ in 0..20 {
        a.request_raw("ping", None).await.unwrap();
    }
    assert_eq!(
        *late.lock().unwrap(),
        Vec::<String>::new(),
        "tapped after the write"
    );
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 40);
    for pair in log.chunks(2) {
        let [(d1, req), (d2, resp)] = pair else {
            unreachable!()
        };
        assert_eq!(
            (*d1, *d2),
            (FrameDirection::Outbound, FrameDirection::Inbound)
        );
        let req: Value = serde_json::from_str(req).unwrap();
        let resp: Value = serde_json::from_str(resp).unwrap();
        assert_eq!(req["id"], resp["id"], "each answer right after its request");
    }
    assert_eq!(wire.lock().unwrap().len(), 20);
}

/// A local close stops the reader at once: the incoming stream ends while the other side
/// neither writes nor hangs up (the reader's stop is woken by the close itself, not by the
/// next bytes), and nothing sent after the close is delivered.
#[tokio::test]
async fn a_local_close_ends_the_incoming_stream_without_the_other_side() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    raw.send(r#"{"jsonrpc":"2.0","method":"first"}"#).await;
    let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
        panic!("the first notification arrives");
    };
    assert_eq!(n.method, "first");
    // The reader now waits for bytes that never come.
    tokio::task::yield_now().await;
    peer.close();
    let end = tokio::time::timeout(Duration::from_secs(30), incoming.recv()).await;
    assert!(
        matches!(end, Ok(None)),
        "the stream ends at the close: {end:?}"
    );
}

/// A result holding a `RawValue` with newlines (a pretty-printed document, or one forged to
/// carry a second message) is still answered as one line of one message: the other side
/// reads the response whole, then the next answer, and no injected notification.
#[tokio::test]
async fn a_respond_result_with_newlines_is_still_one_line() {
    use serde_json::value::RawValue;
    #[derive(serde::Serialize)]
    struct Doc {
        doc: Box<RawValue>,
    }
    let (_peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"acme/get"}))
        .await;
    let Some(IncomingMessage::Request(req)) = incoming.recv().await else {
        panic!("the request arrives");
    };
    let doc = RawValue::from_string(
        "[\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/injected\"}\n]".into(),
    )
    .unwrap();
    req.respond(Doc { doc }).await.unwrap();
    spawn_ping_server(incoming);
    let line = raw.recv_line().await;
    let v: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the response is one line of JSON ({e}): {line:?}"));
    assert_eq!(v["id"], 1);
    assert_eq!(v["result"]["doc"][0]["method"], "notifications/injected");
    // The very next line answers the next request: nothing was injected in between.
    assert_ping_works(&mut raw, 2).await;
}

/// The peer's first request, `ping` with `params`, reaches the wire as id 1 with no params
/// member and gets its answer.
async fn ping_goes_as_id_1_without_params(peer: &Peer, raw: &mut Raw, params: Option<Value>) {
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("ping", params).await });
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":1,"method":"ping"})
    );
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"result":{}}))
        .await;
    assert_eq!(call.await.unwrap().unwrap(), json!({}));
}

/// JSON-RPC 2.0 §4.2: `params` is an object or an array. A scalar the application passes
/// is refused before anything is written or registered (`PeerError::Encode`, naming the
/// method), on every send path, so no peer ever reads a message it must reject; the very
/// next line on the wire is the next valid request, with the next id.
#[tokio::test]
async fn scalar_params_are_refused_before_anything_is_sent() {
    // Bounded: before the rule, the request went out and waited for an answer.
    let config = PeerConfig {
        request_timeout: Some(Duration::from_secs(5)),
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer(config);
    for params in [json!(false), json!(7), json!("text")] {
        let refused = |r: Result<_, PeerError>, path: &str| match r {
            Err(PeerError::Encode { method, reason }) => {
                assert_eq!(method, "acme/do", "{path}");
                assert!(reason.contains("JSON-RPC 2.0 §4.2"), "{path}: {reason}");
            }
            other => panic!("{path}: {params} refused, got {other:?}"),
        };
        refused(
            peer.request_raw("acme/do", Some(params.clone()))
                .await
                .map(drop),
            "request_raw",
        );
        refused(
            peer.notify_raw("acme/do", Some(params.clone())).await,
            "notify_raw",
        );
        refused(
            peer.send_request("acme/do", Some(params.clone()), |_| {})
                .await
                .map(drop),
            "send_request",
        );
    }
    // Objects, arrays, null and no params still go; nothing refused above was written and
    // no id was spent on it.
    peer.notify_raw("acme/note", Some(json!([1, 2])))
        .await
        .unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","method":"acme/note","params":[1,2]})
    );
    ping_goes_as_id_1_without_params(&peer, &mut raw, None).await;
}

/// JSON-RPC 2.0 §4.2: `params` is an object, an array or absent. `null` params (what a
/// caller of a `Value` API passes for "none") go as no member, which every peer reads,
/// where `"params": null` is refused by schema-validating ones.
#[tokio::test]
async fn null_params_go_as_no_member() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    peer.notify_raw("acme/note", Some(Value::Null))
        .await
        .unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","method":"acme/note"})
    );
    ping_goes_as_id_1_without_params(&peer, &mut raw, Some(Value::Null)).await;
    let id = peer
        .send_request("ping", Some(Value::Null), |_| {})
        .await
        .unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":id.to_value(),"method":"ping"})
    );
}

/// `levels` arrays nested in one another (`[]` is 1).
fn nested(levels: usize) -> Value {
    (1..levels).fold(json!([]), |inner, _| json!([inner]))
}

/// No message nested past what a peer reads is written (`jsonrpc::MAX_MEMBER_NESTING`: the
/// message is one level more, and serde_json reads 127): params that deep are refused
/// before anything is sent, and an answer that deep (a `Value` through `finish`, a typed
/// result through `respond`, in a batch too) goes as `-32603` saying so, where the
/// requester would have read nothing and waited for its timeout. As deep as is read still
/// goes as it is.
#[tokio::test]
async fn nothing_nested_past_what_a_peer_reads_is_written() {
    use mcpl::jsonrpc::MAX_MEMBER_NESTING;
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let too_deep = nested(MAX_MEMBER_NESTING + 1);
    match peer.request_raw("acme/do", Some(too_deep.clone())).await {
        Err(PeerError::Encode { method, reason }) => {
            assert_eq!(method, "acme/do");
            assert!(reason.contains("deeper than 126 levels"), "{reason}");
        }
        other => panic!("too deep params refused, got {other:?}"),
    }
    let deepest = nested(MAX_MEMBER_NESTING);
    peer.notify_raw("acme/note", Some(deepest.clone()))
        .await
        .unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","method":"acme/note","params":deepest})
    );

    for (id, value, typed) in [
        (1, too_deep.clone(), false),
        (2, too_deep.clone(), true),
        (3, deepest.clone(), false),
    ] {
        raw.send_json(json!({"jsonrpc":"2.0","id":id,"method":"acme/get"}))
            .await;
        let Some(IncomingMessage::Request(req)) = incoming.recv().await else {
            panic!("the request is delivered");
        };
        if typed {
            req.respond(&value).await.unwrap();
        } else {
            req.finish(Ok(value.clone())).await.unwrap();
        }
        let got = raw.recv().await;
        assert_eq!(got["id"], id);
        if value == deepest {
            assert_eq!(got["result"], deepest);
        } else {
            assert_eq!(got["error"]["code"], codes::INTERNAL_ERROR, "{got}");
            let message = got["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("deeper than 126 levels"), "{message}");
        }
    }

    // In a batch: the member is replaced, the batch is answered whole.
    raw.send_json(json!([{"jsonrpc":"2.0","id":7,"method":"acme/get"}]))
        .await;
    let Some(IncomingMessage::Request(req)) = incoming.recv().await else {
        panic!("the batch's request is delivered");
    };
    req.finish(Ok(too_deep)).await.unwrap();
    let got = raw.recv().await;
    assert_eq!(got[0]["id"], 7);
    assert_eq!(got[0]["error"]["code"], codes::INTERNAL_ERROR, "{got}");
}

/// A batch's requests each weigh their share of the batch's frame against
/// `PeerConfig::max_in_flight_bytes`, not the whole frame: 64 requests of 64 KiB in one
/// 4 MiB batch are all delivered (weighing the whole frame each, all but 8 were refused
/// busy, though together they are an eighth of the bound).
#[tokio::test]
async fn a_batchs_requests_weigh_their_share_of_its_frame() {
    const N: usize = 64;
    let (_peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let pad = "x".repeat(64 * 1024);
    let batch: Vec<Value> = (0..N)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "work", "params": {"pad": pad}}))
        .collect();
    raw.send_json(Value::Array(batch)).await;
    let mut held = Vec::new();
    for _ in 0..N {
        match tokio::time::timeout(Duration::from_secs(10), incoming.recv())
            .await
            .expect("a request of the batch was not delivered")
        {
            Some(IncomingMessage::Request(r)) => held.push(r),
            other => panic!("expected a request, got {other:?}"),
        }
    }
    for r in held {
        r.respond(json!({})).await.unwrap();
    }
    let answers = raw.recv().await;
    let answers = answers.as_array().expect("one array answers the batch");
    assert_eq!(answers.len(), N);
    assert!(
        answers.iter().all(|a| a.get("result").is_some()),
        "refused: {:?}",
        answers.iter().find(|a| a.get("error").is_some())
    );
}

/// JSON-RPC 2.0 §4/§5: a request with a fractional id refused for its parsed cost is
/// answered under that id, as taking it would answer it (one rule, `jsonrpc::head`).
#[tokio::test]
async fn a_costly_request_with_a_fractional_id_is_answered_under_it() {
    let config = PeerConfig {
        max_parsed_cost: 10_000,
        ..PeerConfig::default()
    };
    let (_peer, incoming, mut raw) = raw_peer(config);
    spawn_ping_server(incoming);
    let objects = vec![r#"{"a":1}"#; 1000].join(",");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"echo","id":1.5,"params":{{"x":[{objects}]}}}}"#
    ))
    .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], json!(1.5), "{reply}");
    assert_eq!(reply["error"]["code"], json!(codes::INVALID_REQUEST));
}
