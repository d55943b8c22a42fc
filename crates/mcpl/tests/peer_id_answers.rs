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
