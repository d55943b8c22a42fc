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
use raw::{answer_all, raw_peer, raw_peer_with, Raw};

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

/// A request over the budget whose `id` (or `method` and `id`) comes after the part read
/// when it was refused is answered `-32000` under that id all the same: what was read
/// showed no refusal but a report (no id: it may be a notification, §4.1), so the line
/// reader reads the rest of the line into its envelope, in bounded memory, and the frame is
/// refused at the line's end (JSON-RPC 2.0 §5: a request gets a response). Before, it was
/// reported only and the request never answered. A notification over the budget (no `id`
/// anywhere) is still never answered; a request after it on the same line is answered
/// under its own id, as each message of a line refused unread is.
#[tokio::test(start_paused = true)]
async fn a_request_whose_id_comes_past_the_budget_is_answered_under_it() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    // Past the read that crosses the budget: the line's end comes in later reads.
    let pad = format!("{}{}", pad(), "y".repeat(100_000));
    for (line, expected) in [
        (
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"pad":"{pad}"}},"id":9}}"#),
            json!(9),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","params":{{"pad":"{pad}"}},"method":"m","id":"late"}}"#),
            json!("late"),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"pad":"{pad}"}},"id":null}}"#),
            Value::Null,
        ),
    ] {
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{expected}: {got:?}");
        assert_eq!(got[0]["id"], expected, "{}", got[0]);
        assert_eq!(got[0]["error"]["code"], codes::BUSY, "{}", got[0]);
        assert_eq!(
            got[0]["error"]["data"],
            json!({"limit": BUDGET, "reason": "message_budget"})
        );
        assert!(matches!(
            diags.recv().await,
            Some(Diagnostic::OverBudget { limit: BUDGET, .. })
        ));
    }
    // A notification: never answered (§4.1), reported.
    let note = format!(r#"{{"jsonrpc":"2.0","method":"n","params":{{"pad":"{pad}"}}}}"#);
    let got = exchange(&mut raw, &note).await;
    assert!(got.is_empty(), "a notification was answered: {got:?}");
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::OverBudget { limit: BUDGET, .. })
    ));
    // A request after it on its line: answered under its own id.
    let line = format!(r#"{note} {{"jsonrpc":"2.0","id":13,"method":"ping"}}"#);
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 13, "{}", got[0]);
    assert_eq!(got[0]["error"]["code"], codes::BUSY, "{}", got[0]);
}

/// A line of several messages (MCP's stdio framing is one per line) the budget refused
/// after its first, small one was read whole: the line is what was refused, so the answer
/// under that first message's id says its line held more than one message rather than
/// blaming it (it was refused for its line, not its own size); a line of one message keeps
/// the plain wording. Before, the first was answered as if it alone had run the budget out.
#[tokio::test(start_paused = true)]
async fn a_line_of_several_refused_by_the_budget_says_so() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = format!("{}{}", pad(), "y".repeat(100_000));
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":14,"method":"ping"}} {{"jsonrpc":"2.0","id":15,"method":"m","params":{{"pad":"{pad}"}}}}"#
    );
    let got = exchange(&mut raw, &line).await;
    let first = got.iter().find(|v| v["id"] == 14).expect("14 is answered");
    assert_eq!(first["error"]["code"], codes::BUSY, "{first}");
    let message = first["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the line holding the request")
            && message.contains("more than one message"),
        "{message}"
    );
    // Every request of the line is answered, 15 under its id (the line read to its end:
    // what followed the cut was unseen), none of them told it alone ran the budget out.
    assert!(got.iter().any(|v| v["id"] == 15), "{got:?}");
    for v in &got {
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(!m.contains("the request was refused"), "{v}");
    }
    // One message on its line: the plain wording.
    let alone = format!(r#"{{"jsonrpc":"2.0","id":16,"method":"m","params":{{"pad":"{pad}"}}}}"#);
    let got = exchange(&mut raw, &alone).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let m = got[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("the request was refused after"), "{m}");
}

/// A line of several messages the budget refused after its first showed its id: the
/// messages after the cut were unseen, so the frame waits for the line's end, its rest read
/// by the envelope (bounded), and every request on it is answered `-32000` under its own id
/// (JSON-RPC 2.0 §5), whether its id came before or after the cut. Before (r14 F1), 15 was
/// answered only by a null-id `-32600` "more messages on one line than could be kept", and
/// that mark failed every request of ours outstanding: here ours stays pending and takes
/// its answer.
#[tokio::test(start_paused = true)]
async fn a_line_of_several_cut_past_its_first_message_is_answered_message_by_message() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("ours", None).await })
    };
    let ours = raw.recv().await;
    let pad = format!("{}{}", pad(), "y".repeat(100_000));
    let ping = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    for (line, ids) in [
        (
            format!(
                r#"{} {{"jsonrpc":"2.0","method":"m","params":{{"pad":"{pad}"}},"id":15}}"#,
                ping(14)
            ),
            vec![14, 15],
        ),
        (
            format!(
                r#"{} {{"jsonrpc":"2.0","id":17,"method":"m","params":{{"pad":"{pad}"}}}} {}"#,
                ping(16),
                ping(18)
            ),
            vec![16, 17, 18],
        ),
    ] {
        let got = exchange(&mut raw, &line).await;
        let answered: Vec<Value> = got.iter().map(|v| v["id"].clone()).collect();
        let want: Vec<Value> = ids.iter().map(|id| json!(id)).collect();
        assert_eq!(answered, want, "{got:?}");
        for v in &got {
            assert_eq!(v["error"]["code"], codes::BUSY, "{v}");
            assert_eq!(v["error"]["data"]["reason"], "message_budget", "{v}");
        }
        assert_eq!(
            peer.pending_requests(),
            1,
            "our request was failed: {got:?}"
        );
    }
    raw.send_json(json!({"jsonrpc":"2.0","id":ours["id"],"result":"fine"}))
        .await;
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("deadlock guard")
        .unwrap();
    assert_eq!(outcome.unwrap(), json!("fine"));
}

/// A response of ours over the budget whose `id` comes after the cut: what was read shows
/// an outcome and no id, so the frame waits for the line's end and the id read there fails
/// its request at once, as one whose id came first does. Before (r14 F2), it counted as a
/// response without id, and our request waited for its deadline.
#[tokio::test(start_paused = true)]
async fn an_answer_over_the_budget_whose_id_comes_last_fails_its_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("big", None).await })
    };
    let request = raw.recv().await;
    let pad = format!("{}{}", pad(), "y".repeat(100_000));
    let line = format!(
        r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}"}},"id":{}}}"#,
        request["id"]
    );
    let written = exchange(&mut raw, &line).await;
    assert!(written.is_empty(), "the response was answered: {written:?}");
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    assert!(
        matches!(outcome, Err(PeerError::InvalidResponse(ref why)) if why.contains("message_budget")),
        "{outcome:?}"
    );
    assert_eq!(peer.pending_requests(), 0);
}

/// A request whose `id` the cut splits (`"id":12` | cut | `345}`): the id is in doubt, so
/// the frame waits for the line's end and the request is answered under 12345. Before
/// (r14 F3), under null. The pipe carries 8 KiB at a time, so the budget's cut falls at the
/// end of the third read (24,576 bytes, the diagnostic says so), right inside the id.
#[tokio::test(start_paused = true)]
async fn a_request_whose_id_the_cut_splits_is_answered_under_its_whole_id() {
    let (peer, incoming, mut raw) = raw_peer_with(config(), 8192);
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    let cut = 3 * 8192;
    let head = r#"{"jsonrpc":"2.0","method":"m","params":{"pad":""#;
    let tail = r#""},"id":12"#;
    let pad = "x".repeat(cut - head.len() - tail.len());
    let line = format!("{head}{pad}{tail}345}}");
    assert_eq!(line.find("345}"), Some(cut));
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 12345, "{}", got[0]);
    assert_eq!(got[0]["error"]["code"], codes::BUSY, "{}", got[0]);
    match diags.recv().await {
        Some(Diagnostic::OverBudget { bytes, .. }) => assert_eq!(bytes, cut, "the cut moved"),
        other => panic!("{other:?}"),
    }
}

/// A request after more JSON whitespace than the budget covers (valid JSON, RFC 8259 §2):
/// what was read shows nothing yet, so the frame waits for the line's end and the request
/// is answered under its id. Before (r14 F4), it was never answered. A notification so
/// led is still never answered (§4.1).
#[tokio::test(start_paused = true)]
async fn a_request_after_whitespace_past_the_budget_is_answered_under_its_id() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let lead = " \t".repeat(UNBUDGETED_BYTES + BUDGET + 50_000);
    let got = exchange(
        &mut raw,
        &format!(r#"{lead}{{"jsonrpc":"2.0","id":1,"method":"ping"}}"#),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 1, "{}", got[0]);
    assert_eq!(got[0]["error"]["code"], codes::BUSY, "{}", got[0]);
    let got = exchange(
        &mut raw,
        &format!(r#"{lead}{{"jsonrpc":"2.0","method":"n"}}"#),
    )
    .await;
    assert!(got.is_empty(), "a notification was answered: {got:?}");
}
