//! An answer of the other side to a request of ours that the JSON parser refuses (a number
//! out of a float's range, a lone surrogate escape, a text cut short) fails that request at
//! once, with a clear [`PeerError::InvalidResponse`], when its envelope shows its id
//! (`transport::envelope`); it is not answered (JSON-RPC 2.0 §5: a response is never
//! answered). Before, it was answered `-32700` with `id: null` and our request waited for
//! its deadline, for ever without one. A request the parser refuses is still answered
//! `-32700` (JSON-RPC 2.0 §5.1), under its id when that was read before the error without
//! doubt (`peer_unparsed_requests.rs`), else with `id: null`. Over a real line transport (an in-memory pipe),
//! every byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{Diagnostic, Ordered, PeerConfig, PeerError, RequestOptions, RequestTimeout};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how a missing answer shows.
const GUARD: Duration = Duration::from_secs(3600);

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

fn never() -> RequestOptions<'static> {
    RequestOptions::new().wait(RequestTimeout::Never)
}

/// The next line from the peer, or a panic naming `what` if none comes.
async fn answer(raw: &mut Raw, what: &str) -> Value {
    tokio::time::timeout(GUARD, raw.recv())
        .await
        .unwrap_or_else(|_| panic!("no answer to {what}"))
}

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer (the frames are handled in order, so `line` was handled by then).
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// Responses the parser refuses, `{id}` standing for the id, each with a word of the
/// parser's error: out of range, lone surrogate, cut short, and one past the size read off
/// the worker (256 KiB), its bad number at its end.
fn broken_answers() -> Vec<(String, &'static str)> {
    let pad = "x".repeat(300 * 1024);
    vec![
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":1e400}"#.into(),
            "out of range",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":"\ud800"}"#.into(),
            "escape",
        ),
        (
            r#"{"jsonrpc":"2.0","result":{"a":[1,"b"],"c":"\ud800x"},"id":{id}}"#.into(),
            "escape",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":{"a":[1,"#.into(),
            "EOF",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32601,"message":"no","data":1e400}}"#
                .into(),
            "out of range",
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}","n":-1e999}},"id":{{id}}}}"#),
            "out of range",
        ),
    ]
}

/// Each answer the parser refuses fails the caller's request at once, naming the parser's
/// error, is not answered, and is reported under its id as the invalid response it is.
#[tokio::test(start_paused = true)]
async fn an_unparseable_answer_fails_the_callers_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    for (template, word) in broken_answers() {
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let request = answer(&mut raw, "a request of ours").await;
        let line = template.replace("{id}", &request["id"].to_string());
        let what = &template[..template.len().min(80)];
        let got = exchange(&mut raw, &line).await;
        assert!(got.is_empty(), "{what}: a response was answered: {got:?}");
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .unwrap_or_else(|_| panic!("{what}: the request still waits (deadlock guard)"))
            .unwrap();
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains(word)),
            "{what}: {outcome:?}"
        );
        let mut named = false;
        while let Some(d) = diags.try_recv() {
            named |= matches!(&d, Diagnostic::InvalidMessage { id: Some(id), answered: false, .. }
                if serde_json::to_value(id).ok().as_ref() == Some(&request["id"]));
        }
        assert!(named, "{what}: not reported under its id");
    }
    assert_eq!(peer.pending_requests(), 0);
}

/// A [`mcpl::peer::Peer::send_request`]'s unparseable answer is delivered at its place in
/// wire order, as a `-32603` naming the parser's error, as an invalid answer taken is.
#[tokio::test(start_paused = true)]
async fn an_unparseable_answer_to_an_ordered_request_is_delivered_at_its_place() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let id = peer.send_request("x", None, |_| {}).await.unwrap();
    let request = answer(&mut raw, "a request of ours").await;
    assert_eq!(serde_json::to_value(&id).unwrap(), request["id"]);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":1e400}}"#,
        request["id"]
    ))
    .await;
    raw.send(r#"{"jsonrpc":"2.0","method":"after"}"#).await;
    let first = tokio::time::timeout(GUARD, incoming.recv_ordered())
        .await
        .expect("nothing delivered (deadlock guard)");
    match first {
        Some(Ordered::Response(r)) => {
            assert_eq!(r.id.as_ref(), Some(&id));
            let e = r.outcome.expect_err("an error at its place");
            assert_eq!(e.code, -32603, "{e:?}");
            assert!(e.message.contains("out of range"), "{e:?}");
        }
        other => panic!("the answer's place: {other:?}"),
    }
    let second = incoming.recv_ordered().await;
    assert!(
        matches!(&second, Some(Ordered::Message(m)) if m.method() == "after"),
        "{second:?}"
    );
}

/// What the parser refuses and is no response keeps its answer: a request `-32700`
/// (JSON-RPC 2.0 §5.1; under its id when read before the error, `peer_unparsed_requests.rs`;
/// before, with `id: null`), an object with neither a method nor an outcome `-32700` with
/// `id: null`; an unparseable response naming no request of ours is not
/// answered, and fails nothing.
#[tokio::test(start_paused = true)]
async fn what_is_no_answer_of_ours_is_handled_as_before() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for (line, id) in [
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"m","params":[1e400]}"#,
            Value::from(5),
        ),
        (r#"{"jsonrpc":"2.0","id":5,"x":"\ud800"}"#, Value::Null),
    ] {
        let got = exchange(&mut raw, line).await;
        assert_eq!(got.len(), 1, "{line}: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32700, "{line}: {}", got[0]);
        assert_eq!(got[0]["id"], id, "{line}: {}", got[0]);
    }
    // Our request stays pending while an unparseable answer names another id.
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let request = answer(&mut raw, "a request of ours").await;
    let got = exchange(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":"never-sent","result":1e400}"#,
    )
    .await;
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(peer.pending_requests(), 1);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":2}}"#,
        request["id"]
    ))
    .await;
    let outcome = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert_eq!(outcome.ok(), Some(Value::from(2)));
}

/// An answer followed on its line by another whole message (after a space, or after a lone
/// `\r`, which is no line end here) is the sender's framing defect: each is read as if it
/// had come on its own line (`jsonrpc::several_values`), so the answer settles its request
/// and the request after it is answered once. Before, the answer failed its request and
/// the line was answered `-32700`, `id: null`, leaving the request's id unanswered. Followed
/// by what is no whole message, the line keeps that `-32700` (JSON-RPC 2.0 §5.1).
#[tokio::test(start_paused = true)]
async fn an_answer_with_more_after_it_on_its_line_fails_its_request_and_is_answered_32700() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for (sep, more) in [
        (" ", r#"{"jsonrpc":"2.0","id":97,"method":"m"}"#),
        ("\r", r#"{"jsonrpc":"2.0","id":97,"method":"m"}"#),
        (" ", r#"{"jsonrpc":"2.0","id":97,"method":"#),
    ] {
        let whole = more.ends_with('}');
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let request = answer(&mut raw, "a request of ours").await;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":1}}{sep}{more}"#,
            request["id"]
        );
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{sep:?}: {got:?}");
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .expect("the request still waits (deadlock guard)")
            .unwrap();
        if whole {
            assert_eq!(got[0], json!({"jsonrpc":"2.0","id":97,"result":"ok"}));
            assert_eq!(outcome.ok(), Some(Value::from(1)), "{sep:?}");
            continue;
        }
        assert_eq!(got[0]["error"]["code"], -32700, "{sep:?}: {}", got[0]);
        assert_eq!(got[0]["id"], Value::Null, "{sep:?}: {}", got[0]);
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("trailing")),
            "{sep:?}: {outcome:?}"
        );
    }
}
