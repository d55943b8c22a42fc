//! Issue #24: a typed request (`Peer::request::<M>`) writes its params straight from their
//! type and decodes its result straight from the result's text when the reader can hand it
//! so (`jsonrpc::parse_answer`). These wire tests pin that every answer reads as it read
//! through a `Value`: the same results, the same refusals, the same diagnostics, for typed
//! and raw callers alike.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::RequestId;
use mcpl::peer::{Diagnostic, Peer, PeerConfig, PeerError};
use mcpl::protocol::handshake::{ToolsCall, ToolsCallParams, ToolsCallResult};
use serde_json::{json, Map, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw};

fn echo(text: &str) -> ToolsCallParams {
    let mut arguments = Map::new();
    arguments.insert("text".into(), json!(text));
    ToolsCallParams {
        name: "echo".into(),
        arguments: Some(arguments),
        state: None,
        checkpoint: None,
        extra: Default::default(),
    }
}

/// Starts a typed `tools/call` on `peer`; returns its task and the request line as read.
async fn typed_call(
    peer: &Peer,
    raw: &mut Raw,
    text: &str,
) -> (
    tokio::task::JoinHandle<Result<ToolsCallResult, PeerError>>,
    Value,
) {
    let p = peer.clone();
    let params = echo(text);
    let call = tokio::spawn(async move { p.request::<ToolsCall>(&params).await });
    (call, raw.recv().await)
}

/// The line this crate's peers answer `id` with `result` in (sorted members, compact).
fn answer_line(id: &Value, result: &str) -> String {
    format!("{{\"id\":{id},\"jsonrpc\":\"2.0\",\"result\":{result}}}")
}

#[tokio::test]
async fn a_typed_request_goes_out_as_its_params_and_reads_its_result_from_the_text() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let (call, request) = typed_call(&peer, &mut raw, "hello").await;
    assert_eq!(
        request,
        json!({"jsonrpc":"2.0","id":request["id"],"method":"tools/call",
               "params":{"name":"echo","arguments":{"text":"hello"}}})
    );
    let result =
        r#"{"content":[{"type":"text","text":"hé\n"}],"isError":false,"x":[1,{"y":null}]}"#;
    raw.send(&answer_line(&request["id"], result)).await;
    let typed = call.await.unwrap().unwrap();
    let expected: ToolsCallResult =
        serde_json::from_value(serde_json::from_str::<Value>(result).unwrap()).unwrap();
    assert_eq!(typed, expected);
    assert_eq!(typed.extra.get("x"), Some(&json!([1, {"y": null}])));
}

/// RFC 8259 §4 leaves a repeated member name's meaning open; the `Value` way kept the last,
/// and a typed caller still gets that, where decoding the text would have refused it.
#[tokio::test]
async fn a_result_naming_a_member_twice_reads_as_the_value_way_read_it() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    for result in [
        r#"{"content":[{"type":"text","text":"a"}],"content":[{"type":"text","text":"b"}]}"#,
        r#"{"content":[{"type":"text","text":"a","text":"b"}]}"#,
        r#"{"c\u006fntent":[{"type":"text","text":"b"}]}"#,
    ] {
        let (call, request) = typed_call(&peer, &mut raw, "x").await;
        raw.send(&answer_line(&request["id"], result)).await;
        let typed = call.await.unwrap().unwrap();
        assert_eq!(typed, ToolsCallResult::text("b"), "{result}");
    }
}

#[tokio::test]
async fn a_result_that_does_not_fit_the_type_is_a_decode_error_from_either_way() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    // Read fast, then read the `Value` way (the repeated member).
    for result in [r#"{"content":5}"#, r#"{"content":5,"content":6}"#] {
        let (call, request) = typed_call(&peer, &mut raw, "x").await;
        raw.send(&answer_line(&request["id"], result)).await;
        match call.await.unwrap() {
            Err(PeerError::Decode { method, .. }) => assert_eq!(method, "tools/call"),
            other => panic!("{result}: {other:?}"),
        }
    }
}

/// Raw and typed callers waiting at once each get their answer as they take it, whichever
/// way the reader read it.
#[tokio::test]
async fn raw_and_typed_callers_on_one_connection_each_get_their_own_answer() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let (typed, typed_request) = typed_call(&peer, &mut raw, "t").await;
    let p = peer.clone();
    let raw_call = tokio::spawn(async move { p.request_raw("tools/call", None).await });
    let raw_request = raw.recv().await;
    let result = r#"{"content":[{"type":"text","text":"r"}]}"#;
    raw.send(&answer_line(&raw_request["id"], result)).await;
    raw.send(&answer_line(
        &typed_request["id"],
        r#"{"content":[{"type":"text","text":"t"}]}"#,
    ))
    .await;
    assert_eq!(
        raw_call.await.unwrap().unwrap(),
        serde_json::from_str::<Value>(result).unwrap()
    );
    assert_eq!(typed.await.unwrap().unwrap(), ToolsCallResult::text("t"));
    // An error answer still reaches a typed caller as the remote error.
    let (call, request) = typed_call(&peer, &mut raw, "e").await;
    raw.send(&format!(
        r#"{{"id":{},"jsonrpc":"2.0","error":{{"code":-32602,"message":"no"}}}}"#,
        request["id"]
    ))
    .await;
    match call.await.unwrap() {
        Err(PeerError::Remote(e)) => assert_eq!(e.code, -32602),
        other => panic!("{other:?}"),
    }
}

/// A result read fast that answers nothing of ours is reported as before.
#[tokio::test]
async fn a_fast_read_answer_to_no_request_is_reported() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let (call, request) = typed_call(&peer, &mut raw, "x").await;
    raw.send(&answer_line(&json!(987_654), r#"{"content":[]}"#))
        .await;
    raw.send(&answer_line(&request["id"], r#"{"content":[]}"#))
        .await;
    assert_eq!(
        call.await.unwrap().unwrap(),
        ToolsCallResult::new(Vec::<String>::new())
    );
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::UnknownResponse {
            id: Some(RequestId::from(987_654u64)),
            error: None
        })
    );
}

/// A typed request whose params are no object or array is refused before anything is sent,
/// as the raw call refuses a scalar (JSON-RPC 2.0 §4.2).
#[tokio::test]
async fn typed_params_that_are_a_scalar_are_refused_unsent() {
    struct Scalar;
    impl mcpl::protocol::Method for Scalar {
        const NAME: &'static str = "x/scalar";
        const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
        const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
        type Params = u32;
        type Result = Value;
    }
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    match peer.request::<Scalar>(&5).await {
        Err(PeerError::Encode { method, reason }) => {
            assert_eq!(method, "x/scalar");
            assert!(reason.contains("not a number"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing was written: the next line is the next request.
    let p = peer.clone();
    let next = tokio::spawn(async move { p.request_raw("ping", None).await });
    let line = raw.recv().await;
    assert_eq!(line["method"], "ping");
    raw.send(&answer_line(&line["id"], "{}")).await;
    assert_eq!(next.await.unwrap().unwrap(), json!({}));
}

/// An extension method whose result type reads its text itself (`Box<RawValue>`): the
/// `Value` way handed it the `Value`'s compact text, and a typed caller still gets that.
#[tokio::test]
async fn an_extension_result_holding_raw_text_reads_as_the_value_way_read_it() {
    struct Raw_;
    impl mcpl::protocol::Method for Raw_ {
        const NAME: &'static str = "x/raw";
        const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
        const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
        type Params = Map<String, Value>;
        type Result = Box<serde_json::value::RawValue>;
    }
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request::<Raw_>(&Map::new()).await });
    let request = raw.recv().await;
    raw.send(&answer_line(&request["id"], r#"{"a": 1.50, "b" :[ ]} "#))
        .await;
    let typed = call.await.unwrap().unwrap();
    assert_eq!(typed.get(), r#"{"a":1.5,"b":[]}"#);
}

/// An extension method whose result is a `u128`: a number past `u64` is a float in a
/// `Value`, which a `u128` refuses; a typed caller is refused as before.
#[tokio::test]
async fn an_extension_result_past_u64_is_refused_as_the_value_way_refused_it() {
    struct Wide;
    impl mcpl::protocol::Method for Wide {
        const NAME: &'static str = "x/wide";
        const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
        const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
        type Params = Map<String, Value>;
        type Result = u128;
    }
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request::<Wide>(&Map::new()).await });
    let request = raw.recv().await;
    raw.send(&answer_line(&request["id"], "18446744073709551616"))
        .await;
    match call.await.unwrap() {
        Err(PeerError::Decode { method, .. }) => assert_eq!(method, "x/wide"),
        other => panic!("{other:?}"),
    }
}

/// A result read fast that does not fit the type is refused with the `Value` way's own
/// reason, word for word (no text position the `Value` way never had).
#[tokio::test]
async fn a_decode_error_read_fast_gives_the_value_ways_reason() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let result = r#"{"content":5}"#;
    let (call, request) = typed_call(&peer, &mut raw, "x").await;
    raw.send(&answer_line(&request["id"], result)).await;
    let expected = serde_json::from_value::<ToolsCallResult>(serde_json::from_str(result).unwrap())
        .unwrap_err()
        .to_string();
    match call.await.unwrap() {
        Err(PeerError::Decode { reason, .. }) => assert_eq!(reason, expected),
        other => panic!("{other:?}"),
    }
}

/// Params nested about as deep as a reader reads (JSON-RPC 2.0 §4.2, the reader's nesting
/// rule): the typed call sends what the raw call sends and refuses what it refuses, with the
/// same reason, at every depth around the limit.
#[tokio::test]
async fn typed_params_near_the_nesting_limit_go_or_are_refused_as_raw_params() {
    struct Deep;
    impl mcpl::protocol::Method for Deep {
        const NAME: &'static str = "x/deep";
        const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
        const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::Either;
        type Params = Value;
        type Result = Value;
    }
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    for depth in 120..=132 {
        let mut params = json!(1);
        for _ in 0..depth {
            params = json!([params]);
        }
        let mut outcomes = Vec::new();
        for typed in [true, false] {
            let (p, v) = (peer.clone(), params.clone());
            let call = tokio::spawn(async move {
                if typed {
                    p.request::<Deep>(&v).await
                } else {
                    p.request_raw("x/deep", Some(v)).await
                }
            });
            // A request sent is answered; one refused sends nothing (the ping shows it).
            let p = peer.clone();
            let ping = tokio::spawn(async move { p.request_raw("ping", None).await });
            let mut sent = false;
            loop {
                let line = raw.recv().await;
                raw.send(&answer_line(&line["id"], "{}")).await;
                if line["method"] == "ping" {
                    break;
                }
                sent = true;
            }
            ping.await.unwrap().unwrap();
            let outcome = match call.await.unwrap() {
                Ok(_) => "sent".to_owned(),
                Err(e) => format!("{e}"),
            };
            outcomes.push((sent, outcome));
        }
        assert_eq!(outcomes[0], outcomes[1], "depth {depth}");
    }
}

/// Issue #24: the reader copies a result handed as text into the buffer the last typed
/// caller gave back. With many typed calls outstanding, answered out of order, results
/// short and long (past the kept buffer's bound), plain (read without the derive) and not,
/// each caller gets its own result, read as the `Value` way reads it, and nothing of an
/// earlier, longer one.
#[tokio::test]
async fn many_typed_calls_outstanding_each_read_their_own_result() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let results: Vec<String> = (0..24usize)
        .map(|i| {
            let text = match i % 4 {
                0 => "x".repeat(2000 - i),
                1 => format!("{i}"),
                2 => format!("é\\n\\\"{}\\\"", "y".repeat(600 + i)),
                _ => String::new(),
            };
            if i % 3 == 0 {
                format!(r#"{{"content":[{{"type":"text","text":"{text}"}}],"isError":{}}}"#, i % 2 == 0)
            } else if i % 3 == 1 {
                format!(r#"{{"content":[{{"text":"{text}","type":"text"}},{{"type":"text","text":"{i}"}}]}}"#)
            } else {
                format!(r#"{{"content":[{{"type":"text","text":"{text}","_meta":{{"i":{i}}}}}],"x":{i}}}"#)
            }
        })
        .collect();
    for round in 0..2 {
        let mut calls = Vec::new();
        for i in 0..results.len() {
            calls.push(typed_call(&peer, &mut raw, &format!("{round}-{i}")).await);
        }
        // Answered last first, then the first of each pair swapped: never in call order.
        let mut order: Vec<usize> = (0..results.len()).rev().collect();
        order.swap(0, results.len() / 2);
        for &i in &order {
            raw.send(&answer_line(&calls[i].1["id"], &results[i])).await;
        }
        for (i, (call, _)) in calls.into_iter().enumerate() {
            let expected: ToolsCallResult =
                serde_json::from_value(serde_json::from_str::<Value>(&results[i]).unwrap())
                    .unwrap();
            assert_eq!(
                call.await.unwrap().unwrap(),
                expected,
                "round {round} call {i}"
            );
        }
    }
    // One at a time, each shorter than the last: the kept buffer holds nothing stale.
    for len in [500usize, 300, 40, 3, 0] {
        let (call, request) = typed_call(&peer, &mut raw, "s").await;
        let text = "z".repeat(len);
        raw.send(&answer_line(
            &request["id"],
            &format!(r#"{{"content":[{{"type":"text","text":"{text}"}}]}}"#),
        ))
        .await;
        assert_eq!(call.await.unwrap().unwrap(), ToolsCallResult::text(text));
    }
}
