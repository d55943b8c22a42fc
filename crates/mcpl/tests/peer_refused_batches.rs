//! A batch the peer refuses whole (it does not parse, holds more entries than
//! `max_batch_entries`, or costs more than `max_parsed_cost` parsed) that holds answers to
//! requests of ours ends each of those requests at once, failed
//! ([`PeerError::InvalidResponse`], or a `-32603` at its place for one sent in order),
//! rather than leaving it waiting for its deadline, for ever without one: the envelope
//! scanner reads the batch's entries (`transport::envelope::batch_entries`). The batch is
//! still answered as before (one error under no id). Over a real line transport (an
//! in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{
    Diagnostic, Ordered, Peer, PeerConfig, PeerError, RequestOptions, RequestTimeout,
};
use serde_json::Value;

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how a missing answer shows.
const GUARD: Duration = Duration::from_secs(3600);

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        max_batch_entries: 4,
        max_parsed_cost: 10_000,
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
/// before that answer.
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// Batches refused whole, `{id}` standing for our request's id, each with the error code
/// it is answered with and a word of the reason our request fails with.
fn refused_batches() -> Vec<(String, i64, &'static str)> {
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let pad = "\"p\",".repeat(20_000);
    vec![
        // The answer first, then an entry that does not parse.
        (
            r#"[{"jsonrpc":"2.0","id":{id},"result":1},{"jsonrpc":"2.0","id":"x","result":1e400}]"#
                .into(),
            -32700,
            "could not be parsed",
        ),
        // The entry that does not parse first (the scanner reads on past a bad value).
        (
            r#"[{"jsonrpc":"2.0","id":"x","result":"\ud800"},{"jsonrpc":"2.0","result":2,"id":{id}}]"#
                .into(),
            -32700,
            "could not be parsed",
        ),
        // Entries that are no objects before it, and a batch cut short after it.
        (
            r#"[1, "s,]", [2,{"id":{id}}], null, {"jsonrpc":"2.0","id":{id},"error":{"code":1,"message":"m"}}, {"#
                .into(),
            -32700,
            "could not be parsed",
        ),
        // Nested past the parser.
        (
            format!(r#"[{deep},{{"jsonrpc":"2.0","id":{{id}},"result":1}}]"#),
            -32700,
            "could not be parsed",
        ),
        // Large enough to be read off the worker (256 KiB), its bad number at its end.
        (
            format!(
                r#"[{{"jsonrpc":"2.0","id":{{id}},"result":1}},{{"p":"{}","x":1e400}}]"#,
                "x".repeat(300 * 1024)
            ),
            -32700,
            "could not be parsed",
        ),
        // More entries than the limit (4).
        (
            r#"[1,2,3,4,{"jsonrpc":"2.0","id":{id},"result":1}]"#.into(),
            -32600,
            "entries",
        ),
        // More parsed cost than the limit.
        (
            format!(r#"[{{"jsonrpc":"2.0","id":{{id}},"result":1}},[{pad}0]]"#),
            -32600,
            "cost",
        ),
    ]
}

/// Each refused batch holding our answer fails our request at once, is reported under its
/// id, and is answered as before (one error, `id: null`).
#[tokio::test(start_paused = true)]
async fn a_refused_batch_holding_our_answer_fails_our_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    for (template, code, word) in refused_batches() {
        let what = template[..template.len().min(60)].to_owned();
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let request = answer(&mut raw, "a request of ours").await;
        let line = template.replace("{id}", &request["id"].to_string());
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{what}: {got:?}");
        assert_eq!(got[0]["id"], Value::Null, "{what}: {}", got[0]);
        assert_eq!(got[0]["error"]["code"], code, "{what}: {}", got[0]);
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

/// What names no answer of ours ends nothing: a request entry carrying our id, an id only
/// inside a value, an entry after a syntax error between entries, a response to a request
/// we never sent. Our request still waits, and takes its real answer after.
#[tokio::test(start_paused = true)]
async fn a_refused_batch_naming_no_answer_of_ours_ends_nothing() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let request = answer(&mut raw, "a request of ours").await;
    let id = request["id"].to_string();
    for template in [
        r#"[{"jsonrpc":"2.0","id":{id},"method":"m"},{"x":1e400}]"#,
        r#"[{"jsonrpc":"2.0","result":{"id":{id}}},{"x":1e400}]"#,
        r#"[{"x":1} x {"jsonrpc":"2.0","id":{id},"result":1}]"#,
        r#"[{"jsonrpc":"2.0","id":"never-sent","result":1},{"x":1e400}]"#,
        r#"[1,2,3,4,{"jsonrpc":"2.0","id":"never-sent","result":1}]"#,
    ] {
        let line = template.replace("{id}", &id);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{line}: {got:?}");
        assert_eq!(got[0]["id"], Value::Null, "{line}: {}", got[0]);
        assert_eq!(peer.pending_requests(), 1, "{line}");
    }
    raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":2}}"#))
        .await;
    let outcome = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert_eq!(outcome.ok(), Some(Value::from(2)));
}

/// A [`Peer::send_request`]'s answer in a refused batch is delivered at its place in wire
/// order, as a `-32603` naming why, before what follows the batch.
#[tokio::test(start_paused = true)]
async fn an_ordered_requests_answer_in_a_refused_batch_is_delivered_at_its_place() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let peer: Peer = peer;
    let id = peer.send_request("x", None, |_| {}).await.unwrap();
    let request = answer(&mut raw, "a request of ours").await;
    raw.send(&format!(
        r#"[{{"jsonrpc":"2.0","id":{},"result":1}},{{"x":1e400}}]"#,
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
            assert!(e.message.contains("could not be parsed"), "{e:?}");
        }
        other => panic!("the answer's place: {other:?}"),
    }
    let second = incoming.recv_ordered().await;
    assert!(
        matches!(&second, Some(Ordered::Message(m)) if m.method() == "after"),
        "{second:?}"
    );
}

/// A batch the line reader discards unread (over `max_message_size`, or not UTF-8) whose
/// entries answer requests of ours, past its first 2 KiB or not: each of those requests
/// fails at once, naming why, and the batch is answered as before (`-32600` over the size,
/// `-32700` not UTF-8, `id: null`). Before, only the first 2 KiB were kept, read as no
/// message, and the requests waited for their deadlines, for ever without one.
#[tokio::test(start_paused = true)]
async fn a_batch_discarded_unread_ends_each_request_of_ours_it_answers() {
    let config = PeerConfig {
        max_message_size: 8 * 1024,
        ..config()
    };
    let (peer, incoming, mut raw) = raw_peer(config);
    answer_all(incoming);
    let pad = "x".repeat(20 * 1024);
    for (over, code, word) in [(true, -32600, "limit"), (false, -32700, "no text")] {
        let mut calls = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let p = peer.clone();
            calls.push(tokio::spawn(async move {
                p.request_raw_with("x", None, never()).await
            }));
            ids.push(answer(&mut raw, "a request of ours").await["id"].to_string());
        }
        let mut line = format!(
            r#"[{{"jsonrpc":"2.0","id":{},"result":1}},{{"jsonrpc":"2.0","id":"x","result":"{}"}},{{"jsonrpc":"2.0","method":"m","id":{}}},{{"jsonrpc":"2.0","result":2,"id":{}}}"#,
            ids[0],
            if over { pad.as_str() } else { "p" },
            ids[1],
            ids[1],
        )
        .into_bytes();
        if !over {
            line.extend_from_slice(b",\"\xe9\"");
        }
        line.push(b']');
        raw.send_bytes(&line).await;
        raw.send(r#"{"jsonrpc":"2.0","id":"sync","method":"sync"}"#)
            .await;
        let refused = answer(&mut raw, "the batch").await;
        assert_eq!(refused["id"], Value::Null, "{refused}");
        assert_eq!(refused["error"]["code"], code, "{refused}");
        assert_eq!(answer(&mut raw, "sync").await["id"], "sync");
        for call in calls {
            let outcome = tokio::time::timeout(GUARD, call)
                .await
                .expect("the request still waits (deadlock guard)")
                .unwrap();
            assert!(
                matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains(word)),
                "{outcome:?}"
            );
        }
    }
    assert_eq!(peer.pending_requests(), 0);
}

/// JSON-RPC 2.0 §5, §6: a batch of responses only is owed nothing, as a response never is
/// (answering one could loop), whatever bound refused it: over the size limit, over the
/// parsed cost, over the entry count. Each request of ours it answers fails at once, and
/// nothing is written back. Before, such a batch was answered `-32600` under a null id,
/// while the same batch within the bounds was (rightly) answered nothing. A batch holding
/// anything else (a request) is still answered as before.
#[tokio::test(start_paused = true)]
async fn a_refused_batch_of_responses_only_is_never_answered() {
    let pad = "x".repeat(300 * 1024);
    let dense = vec![r#"{"a":1}"#; 2000].join(",");
    let small = r#"{"jsonrpc":"2.0","id":"z","result":1}"#;
    for (name, template) in [
        (
            "size",
            format!(r#"[{{"jsonrpc":"2.0","id":{{id}},"result":"{pad}"}}]"#),
        ),
        (
            "cost",
            format!(r#"[{{"jsonrpc":"2.0","id":{{id}},"result":[{dense}]}}]"#),
        ),
        (
            "count",
            format!(
                r#"[{small},{small},{small},{small},{{"jsonrpc":"2.0","id":{{id}},"error":{{"code":1,"message":"m"}}}}]"#
            ),
        ),
    ] {
        let (peer, incoming, mut raw) = raw_peer(PeerConfig {
            max_message_size: 256 * 1024,
            ..config()
        });
        answer_all(incoming);
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let request = answer(&mut raw, "our request").await;
        let line = template.replace("{id}", &request["id"].to_string());
        assert_eq!(
            exchange(&mut raw, &line).await,
            Vec::<Value>::new(),
            "{name}"
        );
        match tokio::time::timeout(GUARD, call).await {
            Ok(Ok(Err(PeerError::InvalidResponse(_)))) => {}
            other => panic!("{name}: {other:?}"),
        }
        // With a request among them: answered, under no id.
        let mixed = template.replace("{id}", "\"q\"").replacen(
            '[',
            r#"[{"jsonrpc":"2.0","id":"r","method":"m"},"#,
            1,
        );
        let got = exchange(&mut raw, &mixed).await;
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert_eq!(got[0]["id"], Value::Null, "{name}: {got:?}");
    }
}
