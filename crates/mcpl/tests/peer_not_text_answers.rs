//! An answer of the other side to a request of ours whose line is not UTF-8 (one byte of
//! another encoding in a string, RFC 8259 §8.1) fails that request at once with a clear
//! [`PeerError::InvalidResponse`], wherever its id is in the line, and is not answered
//! (JSON-RPC 2.0 §5: a response is never answered), as an answer that does not parse is.
//! Before, the line was reported (`Diagnostic::NotText`) and answered `-32700`, `id: null`,
//! and our request waited for its deadline, for ever without one. A request in the wrong
//! encoding is answered `-32700`, under its id when its envelope tells it without doubt
//! (as a request that does not parse, `peer_unparsed_requests.rs`; before, always under
//! `null`). Over a real line transport (an in-memory pipe), every
//! byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{Diagnostic, Ordered, PeerConfig, PeerError, RequestOptions, RequestTimeout};
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
        ..PeerConfig::default()
    }
}

fn never() -> RequestOptions<'static> {
    RequestOptions::new().wait(RequestTimeout::Never)
}

async fn answer(raw: &mut Raw, what: &str) -> Value {
    tokio::time::timeout(GUARD, raw.recv())
        .await
        .unwrap_or_else(|_| panic!("no answer to {what}"))
}

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer.
async fn exchange(raw: &mut Raw, line: &[u8]) -> Vec<Value> {
    raw.send_bytes(line).await;
    raw.before_sync().await
}

/// Answers in the wrong encoding, `{id}` standing for the id and `#` for a Latin-1 `é`
/// (one byte that is no UTF-8 there): the id before the bad byte, after it, after 100 KiB
/// (read in steps), in an error's message.
fn latin1_answers() -> Vec<String> {
    let pad = "x".repeat(100 * 1024);
    vec![
        r##"{"jsonrpc":"2.0","id":{id},"result":"caf#"}"##.to_owned(),
        r##"{"jsonrpc":"2.0","result":{"a":"caf#"},"id":{id}}"##.to_owned(),
        format!(r##"{{"jsonrpc":"2.0","result":"{pad}#","id":{{id}}}}"##),
        r##"{"jsonrpc":"2.0","id":{id},"error":{"code":1,"message":"#"}}"##.to_owned(),
    ]
}

/// `template` with its id, and each `#` as the byte 0xE9.
fn latin1(template: &str, id: &str) -> Vec<u8> {
    let mut line = Vec::new();
    for (i, part) in template.replace("{id}", id).split('#').enumerate() {
        if i > 0 {
            line.push(0xe9);
        }
        line.extend_from_slice(part.as_bytes());
    }
    line
}

/// Each answer in the wrong encoding fails the caller's request at once, is not answered,
/// and is reported under its id.
#[tokio::test(start_paused = true)]
async fn an_answer_that_is_not_utf8_fails_the_callers_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let mut diags = peer.diagnostics();
    for template in latin1_answers() {
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let request = answer(&mut raw, "a request of ours").await;
        let line = latin1(&template, &request["id"].to_string());
        let what = String::from_utf8_lossy(&line[..line.len().min(60)]).into_owned();
        let got = exchange(&mut raw, &line).await;
        assert!(got.is_empty(), "{what}: a response was answered: {got:?}");
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .unwrap_or_else(|_| panic!("{what}: the request still waits (deadlock guard)"))
            .unwrap();
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("UTF-8")),
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

/// A [`mcpl::peer::Peer::send_request`]'s answer in the wrong encoding is delivered at its
/// place in wire order, as a `-32603` naming it.
#[tokio::test(start_paused = true)]
async fn an_ordered_requests_answer_that_is_not_utf8_is_delivered_at_its_place() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let id = peer.send_request("x", None, |_| {}).await.unwrap();
    let request = answer(&mut raw, "a request of ours").await;
    let mut line =
        format!(r#"{{"jsonrpc":"2.0","id":{},"result":"caf"#, request["id"]).into_bytes();
    line.extend_from_slice(b"\xe9\"}");
    raw.send_bytes(&line).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"after"}"#).await;
    let first = tokio::time::timeout(GUARD, incoming.recv_ordered())
        .await
        .expect("nothing delivered (deadlock guard)");
    match first {
        Some(Ordered::Response(r)) => {
            assert_eq!(r.id.as_ref(), Some(&id));
            let e = r.outcome.expect_err("an error at its place");
            assert_eq!(e.code, -32603, "{e:?}");
            assert!(e.message.contains("UTF-8"), "{e:?}");
        }
        other => panic!("the answer's place: {other:?}"),
    }
    let second = incoming.recv_ordered().await;
    assert!(
        matches!(&second, Some(Ordered::Message(m)) if m.method() == "after"),
        "{second:?}"
    );
}

/// What names no request of ours ends none: a request in the wrong encoding is answered
/// `-32700` (under its id, below); an answer to a request never sent fails nothing.
#[tokio::test(start_paused = true)]
async fn what_is_no_answer_of_ours_is_handled_as_before() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let request = answer(&mut raw, "a request of ours").await;
    let mut line = br#"{"jsonrpc":"2.0","id":"q","method":"caf"#.to_vec();
    line.extend_from_slice(b"\xe9\"}");
    let got = exchange(&mut raw, &line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32700);
    assert_eq!(got[0]["id"], "q");
    let mut line = br#"{"jsonrpc":"2.0","id":"never-sent","result":"caf"#.to_vec();
    line.extend_from_slice(b"\xe9\"}");
    // A response all the same: never answered (JSON-RPC 2.0 §5), as one that does not
    // parse is not (`peer::refused`), whatever request it names.
    let got = exchange(&mut raw, &line).await;
    assert!(got.is_empty(), "a response was answered: {got:?}");
    assert_eq!(peer.pending_requests(), 1);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":2}}"#,
        request["id"]
    ))
    .await;
    let outcome = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert_eq!(outcome.ok(), Some(Value::from(2)));
}

/// A request in the wrong encoding is answered `-32700` under its id when its envelope
/// tells it without doubt before the first byte that is no UTF-8 (`"jsonrpc": "2.0"`, a
/// `method`, exactly one `id`, a string or an integer, ended), as for a text that does not
/// parse; else under `null`: an id after the bad byte (100 KiB on or not), another `id`
/// after it, two ids, no version, a method after it, an id holding the bad byte, a float
/// id, a structural byte that is none, a batch. Before, always `null`.
#[tokio::test(start_paused = true)]
async fn a_request_that_is_not_utf8_is_answered_under_its_id_when_not_in_doubt() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(100 * 1024);
    let cases = [
        (
            r##"{"jsonrpc":"2.0","id":"a","method":"caf#"}"##.to_owned(),
            Value::from("a"),
        ),
        (
            format!(r##"{{"jsonrpc":"2.0","id":9,"method":"m","params":["{pad}#"]}}"##),
            Value::from(9),
        ),
        (
            r##"{"jsonrpc":"2.0","method":"caf#","id":7}"##.to_owned(),
            Value::Null,
        ),
        (
            format!(r##"{{"jsonrpc":"2.0","method":"m","params":["{pad}#"],"id":8}}"##),
            Value::Null,
        ),
        (
            r##"{"jsonrpc":"2.0","id":8,"method":"caf#","id":8}"##.to_owned(),
            Value::Null,
        ),
        (
            r##"{"jsonrpc":"2.0","id":8,"x":"#","method":"m"}"##.to_owned(),
            Value::Null,
        ),
        (
            r##"{"jsonrpc":"2.0","id":1,"method":"caf#","id":2}"##.to_owned(),
            Value::Null,
        ),
        (r##"{"id":1,"method":"caf#"}"##.to_owned(), Value::Null),
        (
            r##"{"jsonrpc":"2.0","id":"#","method":"m"}"##.to_owned(),
            Value::Null,
        ),
        (
            r##"{"jsonrpc":"2.0","id":1e30,"method":"caf#"}"##.to_owned(),
            Value::Null,
        ),
        (
            // JSON-RPC 2.0 §4: a fraction SHOULD NOT be, yet is an id (`request_id_number`).
            r##"{"jsonrpc":"2.0","id":1.5,"method":"caf#"}"##.to_owned(),
            serde_json::json!(1.5),
        ),
        (
            r##"{"jsonrpc":"2.0","method":"m",#"id":3}"##.to_owned(),
            Value::Null,
        ),
        (
            r##"[{"jsonrpc":"2.0","id":4,"method":"caf#"}]"##.to_owned(),
            Value::Null,
        ),
    ];
    for (template, id) in cases {
        let line = latin1(&template, "");
        let got = exchange(&mut raw, &line).await;
        let what = &template[..template.len().min(60)];
        assert_eq!(got.len(), 1, "{what}: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32700, "{what}: {}", got[0]);
        assert_eq!(got[0]["id"], id, "{what}: {}", got[0]);
    }
}

/// What the peer reads past before a text's message (any whitespace `str::trim_start`
/// takes, a byte order mark: `jsonrpc::message_start`) it reads past before a frame in the
/// wrong encoding too (`transport::begins_as_json`, one reading): a request after a
/// no-break space with a byte of another encoding in its params is answered `-32700`, as
/// the same request in UTF-8 is taken. Before, `begins_as_json` skipped only JSON
/// whitespace, so that request was reported as junk and never answered.
#[tokio::test(start_paused = true)]
async fn a_request_in_the_wrong_encoding_after_unicode_whitespace_is_answered() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for before in ["\u{a0}", "\u{feff}\u{2028}", " \u{3000}"] {
        let mut line = before.as_bytes().to_vec();
        line.extend_from_slice(br#"{"jsonrpc":"2.0","id":9,"method":"m","params":[""#);
        line.push(0xe9);
        line.extend_from_slice(br#""]}"#);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{before:?}: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32700, "{before:?}: {}", got[0]);
    }
}

/// A line that is no text holding several messages (MCP stdio framing: one per line) is
/// refused message by message, as one over the size limit is: each request answered
/// `-32700` under the id its envelope tells, whichever message holds the bad byte. Before,
/// only the first was, and the second request's id got no answer.
#[tokio::test(start_paused = true)]
async fn every_request_on_a_line_of_several_that_is_no_text_is_answered_under_its_id() {
    for line in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"} {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\",\"params\":[\"\xff\"]}"[..],
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[\"\xff\"]} {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\"}"[..],
    ] {
        let (_peer, incoming, mut raw) = raw::raw_peer(mcpl::peer::PeerConfig {
            request_timeout: None,
            ..mcpl::peer::PeerConfig::default()
        });
        raw::answer_all(incoming);
        raw.send_bytes(line).await;
        let got = raw.before_sync().await;
        assert_eq!(got.len(), 2, "{got:?}");
        for (a, id) in got.iter().zip([1, 2]) {
            assert_eq!(
                (&a["id"], &a["error"]["code"]),
                (&serde_json::json!(id), &serde_json::json!(-32700)),
                "{got:?}"
            );
        }
    }
}
