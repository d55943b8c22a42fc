//! A message refused by the shared `MessageBudget` for partial messages (refused at once,
//! the rest of it discarded unread) is handled by the one rule every refused message is
//! (`peer/refused.rs`): a request is answered under the id its first bytes show, a response
//! of ours fails its request at once, as for `max_message_size`. Before, every one was
//! answered `-32000` with `id: null`: the sender of a request could not tell which of its
//! requests was refused, and a response to one of ours left that request waiting for its
//! deadline (for ever without one), while the other side read a `-32000` answer to its
//! answer. Over a real line transport (an in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::jsonrpc::{codes, ErrorObject};
use mcpl::peer::{Diagnostic, PeerConfig, PeerError};
use mcpl::transport::{MessageBudget, UNBUDGETED_BYTES};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how a missing answer shows.
const GUARD: Duration = Duration::from_secs(3600);

/// The budget: a message past `UNBUDGETED_BYTES + BUDGET` cannot be covered.
const BUDGET: usize = 4096;

fn config() -> PeerConfig {
    PeerConfig {
        message_budget: Some(MessageBudget::new(BUDGET)),
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// Padding that takes a message past the budget (and nowhere near `max_message_size`).
fn pad() -> String {
    "x".repeat(UNBUDGETED_BYTES + BUDGET + 1000)
}

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer.
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// A request over the budget whose first bytes show its id is answered `-32000` under
/// that id (`data: { limit, reason: "message_budget" }`), each id form as a taken request
/// is answered: an integer or a string under it, what is no id under `null`.
#[tokio::test(start_paused = true)]
async fn a_request_over_the_budget_is_answered_under_its_id() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    let pad = pad();
    for (id, expected) in [
        ("5", json!(5)),
        (r#""a\u0062""#, json!("ab")),
        ("1.5", json!(1.5)),
        ("1e30", Value::Null),
        ("null", Value::Null),
    ] {
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":{{"pad":"{pad}"}}}}"#);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{id}: {got:?}");
        assert_eq!(got[0]["id"], expected, "{id}: {}", got[0]);
        assert_eq!(got[0]["error"]["code"], codes::BUSY, "{id}: {}", got[0]);
        assert_eq!(
            got[0]["error"]["data"],
            json!({"limit": BUDGET, "reason": "message_budget"}),
            "{id}"
        );
        // The one public answer (JSON-RPC 2.0 §5.1: a server error, not an invalid
        // request), word for word: what `mcpl check` is to answer too.
        let bytes = got[0]["error"]["message"]
            .as_str()
            .and_then(|m| m.split("refused after ").nth(1))
            .and_then(|m| m.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok())
            .expect("the message names the bytes read");
        let expected = ErrorObject::over_message_budget(bytes, BUDGET, false);
        assert_eq!(
            got[0]["error"],
            serde_json::to_value(&expected).unwrap(),
            "{id}"
        );
        assert!(matches!(
            diags.recv().await,
            Some(Diagnostic::OverBudget { limit: BUDGET, .. })
        ));
    }
    // A batch over the budget is answered once, under no id.
    let line = format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"m","params":"{pad}"}}]"#);
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], Value::Null);
    assert_eq!(got[0]["error"]["code"], codes::BUSY);
}

/// A response to one of our requests over the budget fails that request at once, naming
/// the budget, and is never answered (answering a response could loop).
#[tokio::test(start_paused = true)]
async fn an_answer_over_the_budget_fails_its_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("big", None).await })
    };
    let request = raw.recv().await;
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"pad":"{}"}}}}"#,
        request["id"],
        pad()
    );
    let written = exchange(&mut raw, &line).await;
    assert!(written.is_empty(), "the response was answered: {written:?}");
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    match outcome {
        Err(PeerError::InvalidResponse(why)) => {
            assert!(why.contains(&BUDGET.to_string()), "{why}");
            assert!(
                why.contains("message_budget") || why.contains("MessageBudget"),
                "{why}"
            );
        }
        other => panic!("expected the request to fail as an invalid response, got {other:?}"),
    }
    assert_eq!(peer.pending_requests(), 0);
}
