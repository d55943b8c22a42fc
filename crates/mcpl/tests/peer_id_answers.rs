//! Every frame with an id gets exactly one answer, under that id, and nothing that is a
//! response (or a notification) is ever answered (JSON-RPC 2.0 §4, §5; MCP base protocol:
//! a request id is not reused while in flight). Over a real line transport (an in-memory
//! pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::peer::{Diagnostic, PeerConfig, PeerError};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw, GUARD};

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer (the frames are handled in order, so `line` was handled by then).
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// An object with an id and neither a `method` nor a `result`/`error` is no Request object
/// (§4) nor a Response object (§5): when its id names no request of the peer's own, it is
/// answered `-32600` under that id, once, the reason naming what is missing, and reported.
/// Before, it was read as a malformed response and only reported: the id got no answer.
#[tokio::test(start_paused = true)]
async fn an_id_with_no_method_nor_outcome_is_answered_under_its_id() {
    let (peer, incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    for (line, id) in [
        (r#"{"jsonrpc":"2.0","id":302}"#, json!(302)),
        (r#"{"jsonrpc":"2.0","id":"s","params":{"a":1}}"#, json!("s")),
        (
            r#"{"jsonrpc":"2.0","id":-4,"params":[],"x":null}"#,
            json!(-4),
        ),
    ] {
        let got = exchange(&mut raw, line).await;
        assert_eq!(got.len(), 1, "{line}: {got:?}");
        assert_eq!(got[0]["id"], id, "{line}: {}", got[0]);
        assert_eq!(got[0]["error"]["code"], -32600, "{line}: {}", got[0]);
        let message = got[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("method"), "{line}: {message}");
        match diags.recv().await {
            Some(Diagnostic::InvalidMessage {
                id: Some(_),
                answered: true,
                ..
            }) => {}
            other => panic!("{line}: {other:?}"),
        }
    }
    // With no `"jsonrpc": "2.0"` either: still answered under its id (for that defect).
    let got = exchange(&mut raw, r#"{"id":9}"#).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0]["id"], &got[0]["error"]["code"]),
        (&json!(9), &json!(-32600))
    );
    // In a batch: that entry is answered in the batch's answer, the others as usual.
    let got = exchange(
        &mut raw,
        r#"[{"jsonrpc":"2.0","id":302},{"jsonrpc":"2.0","id":5,"method":"x"}]"#,
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    let answers = got[0].as_array().expect("a batch answer");
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers
        .iter()
        .any(|a| a["id"] == 302 && a["error"]["code"] == -32600));
    assert!(answers.iter().any(|a| a["id"] == 5 && a["result"] == "ok"));
}

/// The same object under the id of a request of the peer's own still pending is the
/// malformed answer to it: that request fails at once with a clear error to its caller, and
/// nothing is answered (an answer to an answer could loop). In a batch too.
#[tokio::test(start_paused = true)]
async fn an_id_with_no_method_nor_outcome_fails_the_request_of_ours_it_names() {
    for batch in [false, true] {
        let (peer, incoming, mut raw) = raw_peer(config());
        answer_all(incoming);
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move { peer.request_raw("x", None).await }
        });
        let request = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("no request");
        let junk = json!({"jsonrpc": "2.0", "id": request["id"], "params": {}});
        let line = match batch {
            true => json!([junk]).to_string(),
            false => junk.to_string(),
        };
        assert_eq!(exchange(&mut raw, &line).await, Vec::<Value>::new());
        match tokio::time::timeout(GUARD, asking).await {
            Ok(Ok(Err(PeerError::InvalidResponse(reason)))) => {
                assert!(reason.contains("result"), "{reason}")
            }
            other => panic!("batch {batch}: {other:?}"),
        }
    }
}

/// No answer loop: the peer's `-32600` to such an object, handed to a second library peer
/// (which sent no such request), is reported there and answered with nothing.
#[tokio::test(start_paused = true)]
async fn the_refusal_is_never_answered_back() {
    let (_a, incoming, mut a) = raw_peer(config());
    answer_all(incoming);
    let (b_peer, incoming, mut b) = raw_peer(config());
    let mut b_diags = b_peer.diagnostics();
    answer_all(incoming);
    let got = exchange(&mut a, r#"{"jsonrpc":"2.0","id":302}"#).await;
    assert_eq!(got.len(), 1, "{got:?}");
    // Handed on to the other peer as it came, on its own line.
    let got = exchange(&mut b, &got[0].to_string()).await;
    assert_eq!(got, Vec::<Value>::new());
    match b_diags.recv().await {
        Some(Diagnostic::UnknownResponse { id: Some(id), .. }) => {
            assert_eq!(id, 302_i64.into())
        }
        other => panic!("{other:?}"),
    }
}

/// The same object refused unbuilt for its parsed cost is answered under its id too, as
/// the small one is (one rule, `jsonrpc::refusal_of`); before, it was read as a response.
#[tokio::test(start_paused = true)]
async fn a_costly_id_with_no_method_nor_outcome_is_answered_under_its_id() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_parsed_cost: 1000,
        ..config()
    });
    answer_all(incoming);
    let dense = vec![r#"{"a":1}"#; 100].join(",");
    let line = format!(r#"{{"jsonrpc":"2.0","id":303,"params":[{dense}]}}"#);
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 303, "{}", got[0]);
    assert_eq!(got[0]["error"]["code"], -32600, "{}", got[0]);
}

/// MCP base protocol: a request id is not reused by its sender within the session. One
/// whose id is that of a request of the other side's still in flight (an earlier entry of
/// the same batch too) is answered `-32600` (the id is in use) and never run; the first
/// runs and is answered as usual. Before, a batch with two entries under 7 was answered
/// twice under 7 with results, and a second request under an id being handled was run too.
#[tokio::test(start_paused = true)]
async fn a_request_id_in_flight_is_not_taken_again() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"slow"}"#)
        .await;
    let first = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(mcpl::peer::IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    };
    // The same id again while the first is held (not answered): refused, not delivered.
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"again","params":{}}"#)
        .await;
    let refused = tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("no answer to the reused id");
    assert_eq!(refused["id"], 7, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("in use"), "{message}");
    match diags.recv().await {
        Some(Diagnostic::InvalidMessage {
            id: Some(_),
            answered: true,
            reason,
        }) => assert!(reason.contains("in use"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A different id is taken meanwhile; once 7 is answered, 7 may come again.
    raw.send(r#"{"jsonrpc":"2.0","id":8,"method":"other"}"#)
        .await;
    let other = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(mcpl::peer::IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(other.request().method, "other");
    first.respond("first").await.unwrap();
    other.respond("other").await.unwrap();
    let answers = [raw.recv().await, raw.recv().await];
    assert!(answers.contains(&json!({"jsonrpc":"2.0","id":7,"result":"first"})));
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":7,"method":"later"}"#).await;
    assert_eq!(got, vec![json!({"jsonrpc":"2.0","id":7,"result":"ok"})]);
}

/// In one batch: the second entry under an id is refused `-32600` (in use), the first runs.
#[tokio::test(start_paused = true)]
async fn a_batch_reusing_an_id_runs_the_first_only() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        r#"[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","id":7,"method":"x"},{"jsonrpc":"2.0","id":"7","method":"y"}]"#,
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    let answers = got[0].as_array().expect("a batch answer");
    assert_eq!(answers.len(), 3, "{answers:?}");
    let under_7: Vec<_> = answers.iter().filter(|a| a["id"] == 7).collect();
    assert_eq!(under_7.len(), 2, "{answers:?}");
    assert_eq!(
        under_7.iter().filter(|a| a["result"] == "ok").count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        under_7
            .iter()
            .filter(|a| a["error"]["code"] == -32600)
            .count(),
        1,
        "{answers:?}"
    );
    // The string "7" is another id (JSON-RPC 2.0 §4: ids are compared as values).
    assert!(answers
        .iter()
        .any(|a| a["id"] == "7" && a["result"] == "ok"));
    // As are -1 and 18446744073709551615, whose plain hashes agree.
    let got = exchange(
        &mut raw,
        r#"[{"jsonrpc":"2.0","id":-1,"method":"x"},{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}]"#,
    )
    .await;
    let answers = got[0].as_array().expect("a batch answer");
    assert_eq!(
        answers.iter().filter(|a| a["result"] == "ok").count(),
        2,
        "{answers:?}"
    );
}

/// One id in flight is one numeric value (JSON-RPC 2.0 §5: an answer carries "the same
/// value"; `jsonrpc::identity::Identity`): `7.0` and `7e0` while `7` is in flight, `-0.0` and `0`
/// while `0.0` is, are refused `-32600` (in use), each answered under its own
/// representation; the string `"7"` is another id. Before, ids were told apart by their
/// representation, and `7` and `7.0` both ran.
#[tokio::test(start_paused = true)]
async fn a_batch_reusing_an_id_by_value_runs_the_first_only() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for (line, ok, refused) in [
        (
            r#"[{"jsonrpc":"2.0","id":7,"method":"x"},{"jsonrpc":"2.0","id":7.0,"method":"x"},{"jsonrpc":"2.0","id":7e0,"method":"x"},{"jsonrpc":"2.0","id":"7","method":"x"}]"#,
            vec![json!(7), json!("7")],
            vec![json!(7.0), json!(7.0)],
        ),
        (
            r#"[{"jsonrpc":"2.0","id":0.0,"method":"x"},{"jsonrpc":"2.0","id":-0.0,"method":"x"},{"jsonrpc":"2.0","id":0,"method":"x"}]"#,
            vec![json!(0.0)],
            vec![json!(-0.0), json!(0)],
        ),
    ] {
        let got = exchange(&mut raw, line).await;
        assert_eq!(got.len(), 1, "{got:?}");
        let answers = got[0].as_array().expect("a batch answer");
        let text = |v: &Value| v.to_string();
        let mut oks: Vec<String> = answers
            .iter()
            .filter(|a| a["result"] == "ok")
            .map(|a| text(&a["id"]))
            .collect();
        let mut refusals: Vec<String> = answers
            .iter()
            .filter(|a| a["error"]["code"] == -32600)
            .map(|a| text(&a["id"]))
            .collect();
        oks.sort();
        refusals.sort();
        let mut want_ok: Vec<String> = ok.iter().map(text).collect();
        let mut want_refused: Vec<String> = refused.iter().map(text).collect();
        want_ok.sort();
        want_refused.sort();
        assert_eq!(
            (oks, refusals),
            (want_ok, want_refused),
            "{line}: {answers:?}"
        );
    }
}

/// MCP stdio framing is one message per line. A line holding several complete messages
/// separated by JSON whitespace is the sender's framing defect, reported once
/// (`Diagnostic::SeveralOnALine`), and each is read as if it had come on its own line: each
/// request answered once under its id. Before, the line was answered `-32700` (trailing
/// characters) under the first id and the second got nothing.
#[tokio::test(start_paused = true)]
async fn several_messages_on_one_line_are_each_answered() {
    let (peer, incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"} {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}\t[{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"x\"}]",
    )
    .await;
    assert_eq!(
        got,
        vec![
            json!({"jsonrpc":"2.0","id":8,"result":"ok"}),
            json!({"jsonrpc":"2.0","id":9,"result":"ok"}),
            json!([{"jsonrpc":"2.0","id":10,"result":"ok"}]),
        ]
    );
    match diags.recv().await {
        Some(Diagnostic::SeveralOnALine { count: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    // A message followed by what is no complete message keeps its `-32700`.
    let got = exchange(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"} {"jsonrpc""#,
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32700, "{got:?}");
}

/// Bounded: past `PeerConfig::max_batch_entries` messages on a line, the rest is refused
/// unread with one `-32600` under a null id.
#[tokio::test(start_paused = true)]
async fn several_messages_on_one_line_are_bounded() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_batch_entries: 2,
        ..config()
    });
    answer_all(incoming);
    let line = (1..=4)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#))
        .collect::<Vec<_>>()
        .join(" ");
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let refused: Vec<_> = got
        .iter()
        .filter(|a| a["error"]["code"] == -32600)
        .collect();
    assert_eq!(refused.len(), 1, "{got:?}");
    assert_eq!(refused[0]["id"], Value::Null, "{got:?}");
    for id in [1, 2] {
        assert!(
            got.iter().any(|a| a["id"] == id && a["result"] == "ok"),
            "{got:?}"
        );
    }
}

/// A request after NUL bytes on its line (a stream padded with zeros) is no JSON text and
/// is refused as a message after other whitespace is (`jsonrpc::message_lead`): `-32700`
/// under its id. Before, the line was skipped as junk and the id got no answer. (A byte
/// order mark between messages on a line: `peer_inflight_ids.rs`.)
#[tokio::test(start_paused = true)]
async fn a_request_after_nul_bytes_is_refused_under_its_id() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        "\0\0{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\"}",
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0]["id"], &got[0]["error"]["code"]),
        (&json!(7), &json!(-32700))
    );
}

/// A request after more than one byte order mark (or marks and NUL bytes mixed) is no
/// JSON text either (RFC 8259 §8.1 lets a reader skip one mark at a text's start), and is
/// refused as one after NUL bytes is: `-32700` under its id. Before, the line was skipped
/// as junk and the id got no answer. Over the size limit, alike: answered under its id.
#[tokio::test(start_paused = true)]
async fn a_request_after_several_byte_order_marks_is_refused_under_its_id() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for (lead, id) in [
        ("\u{feff}\u{feff}", 4),
        ("\u{feff}\0\u{feff} ", 5),
        ("\0\u{feff}\u{feff}\0", 6),
    ] {
        let got = exchange(
            &mut raw,
            &format!("{lead}{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"x\"}}"),
        )
        .await;
        assert_eq!(got.len(), 1, "{lead:?}: {got:?}");
        assert_eq!(
            (&got[0]["id"], &got[0]["error"]["code"]),
            (&json!(id), &json!(-32700)),
            "{lead:?}"
        );
    }
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_message_size: 1024,
        ..config()
    });
    answer_all(incoming);
    let pad = "x".repeat(3000);
    let got = exchange(
        &mut raw,
        &format!("\u{feff}\0\u{feff}{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"{pad}\",\"id\":7}}"),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0]["id"], &got[0]["error"]["code"]),
        (&json!(7), &json!(-32600))
    );
}

/// An id with no method nor outcome that names `id` twice: which id is in doubt, so it is
/// answered under neither (an answer under the last could name another request of its
/// sender's), and reported; as a text refused unbuilt reads it (`Head::then`). Before this
/// was settled, it was answered under the last id.
#[tokio::test(start_paused = true)]
async fn an_id_named_twice_with_no_method_nor_outcome_is_answered_under_neither() {
    let (peer, incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":15,"id":16}"#).await;
    assert_eq!(got, Vec::<Value>::new());
    match diags.recv().await {
        Some(Diagnostic::InvalidMessage {
            id: None,
            answered: false,
            reason,
        }) => assert!(reason.contains("more than once"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// Over WebSocket (real sockets) the same rules hold for a text frame: several messages on
/// one of its lines each answered once, an id with no method nor outcome answered under it,
/// a reused id refused while the first is in flight.
#[tokio::test]
async fn over_websocket_every_id_gets_exactly_one_answer() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let listener = mcpl::transport::ws::Listener::bind("127.0.0.1:0", None)
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (t, _) = listener.accept().await.unwrap();
        let (peer, incoming) = mcpl::peer::Peer::new(t, config());
        answer_all(incoming);
        peer
    });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}"))
        .await
        .unwrap();
    let _peer = server.await.unwrap();
    let frame = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"x"} {"jsonrpc":"2.0","id":2,"method":"x"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":3}"#,
        "\n",
        r#"[{"jsonrpc":"2.0","id":4,"method":"x"},{"jsonrpc":"2.0","id":4,"method":"x"}]"#,
    );
    ws.send(WsMessage::text(frame)).await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < 5 {
        let msg = tokio::time::timeout(std::time::Duration::from_secs(60), ws.next())
            .await
            .expect("an answer (deadlock guard)");
        if let Some(Ok(WsMessage::Text(t))) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            match v {
                Value::Array(items) => answers.extend(items),
                v => answers.push(v),
            }
        }
    }
    let under = |id: i64| answers.iter().filter(|a| a["id"] == id).count();
    assert_eq!(
        (under(1), under(2), under(3), under(4)),
        (1, 1, 1, 2),
        "{answers:?}"
    );
    assert!(answers
        .iter()
        .any(|a| a["id"] == 3 && a["error"]["code"] == -32600));
    assert!(answers
        .iter()
        .any(|a| a["id"] == 4 && a["error"]["code"] == -32600));
    assert!(answers.iter().any(|a| a["id"] == 4 && a["result"] == "ok"));
}

/// Past `PeerConfig::max_batch_entries` messages on a line, the rest is refused unread (one
/// `-32600` under a null id), but an answer to a request of ours there is not lost: that
/// request fails at once, as for a batch refused whole, rather than waiting for its
/// deadline (for ever without one), which it did before.
#[tokio::test(start_paused = true)]
async fn an_answer_of_ours_past_the_bound_of_a_line_fails_its_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_batch_entries: 2,
        ..config()
    });
    answer_all(incoming);
    let mut calls = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let p = peer.clone();
        calls.push(tokio::spawn(async move { p.request_raw("x", None).await }));
        let r = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("no request");
        ids.push(r["id"].clone());
    }
    let line = ids
        .iter()
        .map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#))
        .collect::<Vec<_>>()
        .join(" ");
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["error"]["data"]["reason"], "messages_per_line",
        "{got:?}"
    );
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(
            tokio::time::timeout(GUARD, call)
                .await
                .expect("a request waits for the answer that came (deadlock guard)")
                .unwrap(),
        );
    }
    assert_eq!(outcomes[0].as_ref().ok(), Some(&json!(1)));
    assert_eq!(outcomes[1].as_ref().ok(), Some(&json!(1)));
    assert!(
        matches!(&outcomes[2], Err(PeerError::InvalidResponse(why)) if why.contains("refused unread")),
        "{:?}",
        outcomes[2]
    );
}
