//! A message refused before it is built, over `PeerConfig::max_message_size` (discarded
//! unread, only its first `DISCARDED_HEAD_BYTES` kept) or over `max_parsed_cost` (refused
//! unbuilt), is answered under the same id as the same request under the bounds, whatever
//! form the id takes (JSON-RPC 2.0 §5: the id, or `null` when it cannot be read), and a
//! response among them fails only a request whose id is truly in what was read. Over a real
//! line transport (an in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{IncomingMessage, PeerConfig, RequestOptions, RequestTimeout};
use mcpl::transport::DISCARDED_HEAD_BYTES;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how a missing answer shows.
const GUARD: Duration = Duration::from_secs(3600);

const MAX_SIZE: usize = 4096;
const MAX_COST: usize = 1000;

fn config() -> PeerConfig {
    PeerConfig {
        max_message_size: MAX_SIZE,
        max_parsed_cost: MAX_COST,
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// `{"a":1}` 100 times: 800 bytes of text (under the size limit), 2,200 cost units.
fn dense() -> String {
    format!("[{}]", vec![r#"{"a":1}"#; 100].join(","))
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

/// Each id form the other side may write (as JSON text) and the id its request is answered
/// under when taken: an integer or a string as read (escapes undone), a fraction or a whole
/// float as the same value, `null` for what is no id (a whole value past 64 bits, a string
/// over `MAX_ID_BYTES`, `null`).
fn id_forms() -> Vec<(String, Value)> {
    let long = "x".repeat(1500);
    vec![
        ("7".into(), json!(7)),
        ("-7".into(), json!(-7)),
        ("0".into(), json!(0)),
        // JSON-RPC 2.0 §4: a fraction or an exponent SHOULD NOT be, yet is an id, answered
        // under the same value (`jsonrpc::request_id_number`); a whole value past 64 bits
        // is none.
        ("1.0".into(), json!(1.0)),
        ("1e2".into(), json!(100.0)),
        ("2.5".into(), json!(2.5)),
        ("1e30".into(), Value::Null),
        ("null".into(), Value::Null),
        (r#""a\"b\u0063""#.into(), json!("a\"bc")),
        (format!("\"{long}\""), Value::Null),
    ]
}

/// Every request form, each sent small (taken), over the size limit, and over the parsed
/// cost, is answered, and under one id: the one a taken request is answered under.
#[tokio::test(start_paused = true)]
async fn a_refused_request_is_answered_under_the_id_it_has_when_taken() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(MAX_SIZE + 1000);
    let dense = dense();
    let mut shapes: Vec<(String, Value)> = Vec::new();
    for (id, expected) in id_forms() {
        // The id before the method, after it, and with an escaped member name.
        shapes.push((format!(r#""id":{id},"method":"m""#), expected.clone()));
        shapes.push((format!(r#""method":"m","id":{id}"#), expected.clone()));
        shapes.push((format!(r#""i\u0064":{id},"method":"m""#), expected));
    }
    // A method beside an outcome is a request, as built (the outcome is ignored).
    shapes.push((r#""id":8,"result":1,"method":"m""#.into(), json!(8)));
    // A method that is no string: an Invalid Request, answered under its id.
    shapes.push((r#""id":9,"method":1"#.into(), json!(9)));
    // An `id` nested in another member, or inside a string, before the true one.
    shapes.push((
        r#""method":"m","x":{"id":9,"y":["id",9]},"z":"\"id\":9,","id":12"#.into(),
        json!(12),
    ));
    // An id named twice: in doubt, so a null id, taken or refused (`jsonrpc::doubled::DOUBLED_ID`,
    // JSON-RPC 2.0 §4, §5; before, the last counted).
    shapes.push((r#""id":1,"id":10,"method":"m""#.into(), Value::Null));
    // A string id over `MAX_ID_BYTES` and longer than the kept head: no id either way.
    shapes.push((
        format!(r#""method":"m","id":"{}""#, "y".repeat(3000)),
        Value::Null,
    ));
    for (members, expected) in shapes {
        let lines = [
            (
                "taken",
                format!(r#"{{"jsonrpc":"2.0",{members},"params":{{}}}}"#),
            ),
            (
                "max_message_size",
                format!(r#"{{"jsonrpc":"2.0",{members},"params":{{"pad":"{pad}"}}}}"#),
            ),
            (
                "parsed_cost",
                format!(r#"{{"jsonrpc":"2.0",{members},"params":{dense}}}"#),
            ),
        ];
        for (limit, line) in lines {
            let got = exchange(&mut raw, &line).await;
            let what = format!("{members} ({limit})");
            assert_eq!(got.len(), 1, "{what}: one answer, got {got:?}");
            assert_eq!(got[0]["id"], expected, "{what}: {}", got[0]);
            if limit != "taken" {
                assert_eq!(got[0]["error"]["code"], -32600, "{what}: {}", got[0]);
                assert_eq!(
                    got[0]["error"]["data"]["reason"], limit,
                    "{what}: {}",
                    got[0]
                );
            }
        }
    }
    // A batch over either limit is answered once, `id: null`, as one over
    // `max_batch_entries` is.
    let entry =
        |params: &str| format!(r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{params}}}"#);
    let big = format!(r#"["{pad}"]"#);
    for line in [
        format!("[{},{}]", entry("[]"), entry(&big)),
        format!("[{},{}]", entry("[]"), entry(&dense)),
        format!("  \u{feff}[{}]", entry(&big)),
    ] {
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["id"], Value::Null, "{}", got[0]);
        assert_eq!(got[0]["error"]["code"], -32600, "{}", got[0]);
    }
}

/// An id after the params is read over the parsed cost (the whole text is there), and over
/// the size limit too: the line reader reads the envelope of the line it discards as it
/// streams past (`transport::envelope`), so the id is found wherever it is. Before, only the
/// first `DISCARDED_HEAD_BYTES` were read, and such a request was reported only: its
/// sender waited for its own deadline. A notification (no id anywhere) is still not
/// answered (§4.1).
#[tokio::test(start_paused = true)]
async fn an_id_after_huge_params_is_answered_where_it_is_read() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        &format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":{},"id":11}}"#,
            dense()
        ),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 11);
    let pad = "x".repeat(MAX_SIZE);
    let got = exchange(
        &mut raw,
        &format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"pad":"{pad}"}},"id":11}}"#),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 11, "{}", got[0]);
    assert_eq!(got[0]["error"]["data"]["reason"], "max_message_size");
    // Far past the limit, split over many reads, behind an `id` nested in the params.
    let pad = "x".repeat(20 * MAX_SIZE);
    let got = exchange(
        &mut raw,
        &format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":{{"id":1,"pad":"{pad}"}},"id":"late"}}"#
        ),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], "late", "{}", got[0]);
    let got = exchange(
        &mut raw,
        &format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"id":1,"pad":"{pad}"}}}}"#),
    )
    .await;
    assert!(got.is_empty(), "a notification was answered: {got:?}");
}

/// A response of the other side whose id comes after its result, past the first
/// `DISCARDED_HEAD_BYTES` of a line over the size limit, fails its request at once. Before,
/// the request waited for its deadline (for ever here).
#[tokio::test(start_paused = true)]
async fn an_answer_whose_id_comes_after_a_huge_result_fails_its_request_at_once() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let request = answer(&mut raw, "a request of ours").await;
    let pad = "x".repeat(3 * MAX_SIZE);
    let line = format!(
        r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}"}},"id":{}}}"#,
        request["id"]
    );
    let got = exchange(&mut raw, &line).await;
    assert!(got.is_empty(), "a response was answered: {got:?}");
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    assert!(
        matches!(&outcome, Err(mcpl::peer::PeerError::InvalidResponse(why)) if why.contains("4096")),
        "{outcome:?}"
    );
}

/// Past `max_in_flight_requests` each form is answered `busy` under the same id, or, for what
/// is no id, `-32600` with `id: null` as when taken.
#[tokio::test(start_paused = true)]
async fn past_the_in_flight_bound_each_id_form_is_answered_under_its_id() {
    let (_peer, mut incoming, mut raw) = raw_peer(PeerConfig {
        max_in_flight_requests: 1,
        ..config()
    });
    raw.send(r#"{"jsonrpc":"2.0","id":"held","method":"m"}"#)
        .await;
    let held = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => r,
        other => panic!("expected the held request, got {other:?}"),
    };
    for (id, expected) in id_forms() {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#))
            .await;
        let got = answer(&mut raw, &id).await;
        assert_eq!(got["id"], expected, "{id}: {got}");
        assert!(got["error"]["code"].is_i64(), "{id}: {got}");
    }
    drop(held);
}

fn never() -> RequestOptions<'static> {
    RequestOptions::new().wait(RequestTimeout::Never)
}

/// An oversized response whose id is cut at the end of the kept head (`"id":12|3`) names
/// no request: the cut token reads as another number (`12`), which failed that request of
/// ours. Every offset of the cut through the id, for ids of integer, float and string form,
/// none of which names a request of ours whole; the requests `1`, `12`, `123` (prefixes of
/// them) are outstanding and none may fail.
#[tokio::test(start_paused = true)]
async fn an_id_cut_at_the_head_boundary_names_no_request() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_message_size: 1024,
        ..config()
    });
    answer_all(incoming);
    let mut calls = Vec::new();
    for _ in 0..130 {
        let p = peer.clone();
        calls.push(tokio::spawn(async move {
            p.request_raw_with("x", None, never()).await
        }));
        answer(&mut raw, "a request of ours").await;
    }
    assert_eq!(peer.pending_requests(), 130);
    let rest = format!(r#","more":"{}"}}"#, "z".repeat(3000));
    for id in [
        "1234",
        "-123",
        "123.5",
        "12e3",
        "1.25e1",
        r#""12x""#,
        "12345678901234567890123",
    ] {
        let member = format!(r#","id":{id}"#);
        let start = r#"{"jsonrpc":"2.0","result":""#;
        // The cut falls at every byte from before the member to past its end.
        for cut in 0..=member.len() + 1 {
            let before = DISCARDED_HEAD_BYTES - cut;
            let pad = "p".repeat(before - start.len() - 1);
            let line = format!(r#"{start}{pad}"{member}{rest}"#);
            assert!(line.len() > 1024);
            let got = exchange(&mut raw, &line).await;
            assert!(got.is_empty(), "a response was answered: {got:?}");
            assert_eq!(
                peer.pending_requests(),
                130,
                "a request failed for the id {id} cut {cut} bytes into `{member}`: the head \
                 ended `{}`",
                &line[DISCARDED_HEAD_BYTES - 12..DISCARDED_HEAD_BYTES]
            );
        }
    }
    // An id whole in the head, and ours, still fails its request at once.
    let line = format!(r#"{{"jsonrpc":"2.0","result":"","id":123{rest}"#);
    exchange(&mut raw, &line).await;
    assert_eq!(peer.pending_requests(), 129);
    drop(calls);
}

/// What an adversary may put in a refused message's head before the true `id`: an `id`
/// inside a nested object or inside a string, an escaped member name, a byte order mark and
/// whitespace. Only a top-level `id` member names a request, and a request-shaped message
/// (a `method`, with whatever else) never fails one of ours.
#[tokio::test(start_paused = true)]
async fn only_a_top_level_id_of_a_response_fails_a_request() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let ours = answer(&mut raw, "our request").await["id"].clone();
    assert_eq!(ours, 1);
    let pad = "x".repeat(MAX_SIZE);
    let dense = dense();
    let none_fails = [
        format!(r#"{{"result":{{"id":1,"pad":"{pad}"}}}}"#),
        format!(r#"{{"result":"\"id\":1,","pad":"{pad}"}}"#),
        format!(r#"{{"error":{{"code":1,"message":"m","data":{{"id":1}}}},"pad":"{pad}"}}"#),
        format!(r#"{{"result":{{"id":1,"pad":{dense}}}}}"#),
        // The other side's own request reusing our id, its method not a string.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":1,"params":{dense}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":1,"method":"m","params":{dense}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":1,"method":"m","pad":"{pad}"}}"#),
    ];
    for line in none_fails {
        exchange(&mut raw, &line).await;
        assert_eq!(
            peer.pending_requests(),
            1,
            "our request failed for {}",
            &line[..60]
        );
    }
    let line = format!("\u{feff} \t{{\"jsonrpc\":\"2.0\",\"i\\u0064\":1,\"result\":\"{pad}\"}}");
    exchange(&mut raw, &line).await;
    assert_eq!(peer.pending_requests(), 0);
    let outcome = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert!(outcome.is_err(), "{outcome:?}");
}

/// The failure an answer refused for its size or its parsed cost is delivered as
/// (`Peer::send_request`'s, at its place in the incoming queue) weighs what it holds, not a
/// frame: discarded unread, it weighed the frame before it; refused unbuilt, its own text.
/// After a 5 MiB notification nobody took, the queue counted 9 or 10 MiB, over its 8 MiB
/// bound (`INCOMING_QUEUE_BYTES`), and the reader stopped at the next message: the answer
/// to our next request after it was never read.
#[tokio::test(start_paused = true)]
async fn a_refused_answer_weighs_its_failure_not_a_frame() {
    const BIG: usize = 5 << 20;
    let pad = "x".repeat(BIG);
    let answers = [
        format!(r#""result":{{"pad":"{pad}{}"}}"#, "x".repeat(2048)),
        format!(
            r#""result":{{"pad":"{}","d":{}}}"#,
            &pad[..4 << 20],
            dense()
        ),
    ];
    for outcome in answers {
        let (peer, _incoming, mut raw) = raw::raw_peer_with(
            PeerConfig {
                max_message_size: BIG + 1024,
                ..config()
            },
            1 << 20,
        );
        // Nobody takes the incoming queue: the notification stays in it, weighing ~5 MiB.
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"s":"{pad}"}}}}"#
        ))
        .await;
        let _in_order = peer.send_request("big", None, |_| {}).await.unwrap();
        let id = answer(&mut raw, "our in-order request").await["id"].clone();
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},{outcome}}}"#))
            .await;
        raw.send(r#"{"jsonrpc":"2.0","method":"small"}"#).await;
        let p = peer.clone();
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
        let id = answer(&mut raw, "our request").await["id"].clone();
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"done"}}"#))
            .await;
        let got = tokio::time::timeout(GUARD, call)
            .await
            .expect("the reader stopped: the answer after the refused one was never read")
            .unwrap();
        assert_eq!(got.unwrap(), "done");
    }
}

/// What may come before a message is read alike whichever way the message is read: a
/// request after it is answered under its id, taken or refused. JSON whitespace and a byte
/// order mark are read past (RFC 8259 §2, §8.1); other Unicode whitespace is read past for
/// the id alone, the message refused (`jsonrpc::message_lead`).
#[tokio::test(start_paused = true)]
async fn a_request_after_leading_whitespace_is_answered_alike() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(MAX_SIZE);
    let dense = dense();
    for before in [
        " \t",
        "\u{feff}",
        " \u{feff} ",
        "\u{a0}",
        "\u{2028}\u{3000}",
    ] {
        for params in [
            "{}".to_owned(),
            format!(r#"{{"pad":"{pad}"}}"#),
            dense.clone(),
        ] {
            let line =
                format!(r#"{before}{{"jsonrpc":"2.0","id":7,"method":"m","params":{params}}}"#);
            let got = exchange(&mut raw, &line).await;
            assert_eq!(got.len(), 1, "{before:?} {}: {got:?}", params.len());
            assert_eq!(got[0]["id"], 7, "{before:?} {}: {}", params.len(), got[0]);
        }
    }
}

/// What a small message is answered with under no id, an oversized or too costly one is
/// too: a message whose first bytes are no UTF-8 (a small one is `-32700`, no text), and a
/// whole text refused for its cost that is no JSON (its error before any `method`). Before,
/// both were only reported: nothing told the sender its message was refused.
#[tokio::test(start_paused = true)]
async fn a_refused_message_that_is_no_json_text_is_answered_as_a_small_one() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(MAX_SIZE + 1000);
    // Over the cost limit, under the size limit.
    let zeros = vec!["0"; MAX_COST * 3 / 2].join(",");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "small, no UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"x\":\"\xff\",\"id\":6,\"method\":\"m\"}".to_vec(),
        ),
        (
            "oversized, no UTF-8",
            [
                &b"{\"jsonrpc\":\"2.0\",\"x\":\"\xff\",\"id\":6,\"method\":\"m\",\"pad\":\""[..],
                pad.as_bytes(),
                b"\"}",
            ]
            .concat(),
        ),
        (
            "small, no JSON",
            br#"{"jsonrpc":"2.0","x":[0,],"id":5,"method":"m"}"#.to_vec(),
        ),
        (
            "too costly, no JSON",
            format!(r#"{{"jsonrpc":"2.0","x":[{zeros},],"id":5,"method":"m"}}"#).into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        raw.send_bytes(&bytes).await;
        raw.send(r#"{"jsonrpc":"2.0","id":"sync","method":"sync"}"#)
            .await;
        let got = answer(&mut raw, what).await;
        assert_eq!(got["id"], Value::Null, "{what}: {got}");
        assert!(got["error"]["code"].is_i64(), "{what}: {got}");
        let sync = answer(&mut raw, what).await;
        assert_eq!(
            sync["id"], "sync",
            "{what}: one answer, then the next: {sync}"
        );
    }
}

/// A message nested past what the parser reads (serde_json's 128 levels; valid JSON all
/// the same) is refused by the one rule too, its envelope read past the nesting: a request
/// is answered under its id (`-32600`, `data: { limit, reason: "nesting" }`), wherever the
/// id is; a response of ours fails its request at once and is not answered. Before, both
/// were answered `-32700` with `id: null`: the request's sender could not tell which
/// request it was, and our request waited for ever while the other side read an answer to
/// its answer.
#[tokio::test(start_paused = true)]
async fn a_message_nested_past_the_parser_is_refused_under_its_id() {
    let (peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let (open, close) = ("[".repeat(300), "]".repeat(300));
    for line in [
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{open}{close}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"m","params":{open}{close},"id":7}}"#),
    ] {
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["id"], 7, "{}", got[0]);
        assert_eq!(got[0]["error"]["code"], -32600, "{}", got[0]);
        assert_eq!(got[0]["error"]["data"]["reason"], "nesting", "{}", got[0]);
    }
    // A notification so nested is not answered.
    let got = exchange(
        &mut raw,
        &format!(r#"{{"jsonrpc":"2.0","method":"m","params":{open}{close}}}"#),
    )
    .await;
    assert!(got.is_empty(), "{got:?}");
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("x", None, never()).await });
    let request = answer(&mut raw, "a request of ours").await;
    let mut diags = peer.diagnostics();
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{open}{close}}}"#,
        request["id"]
    );
    let got = exchange(&mut raw, &line).await;
    assert!(got.is_empty(), "a response was answered: {got:?}");
    // Reported under its id, as an invalid response taken is (how an application tells
    // the failure delivered at its place from an answer).
    let mut seen = Vec::new();
    while let Some(d) = diags.try_recv() {
        seen.push(d);
    }
    let named = seen.iter().any(|d| {
        matches!(d, mcpl::peer::Diagnostic::InvalidMessage { id: Some(id), answered: false, .. }
            if serde_json::to_value(id).ok().as_ref() == Some(&request["id"]))
    });
    assert!(named, "no invalid message under the id: {seen:?}");
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    assert!(
        matches!(&outcome, Err(mcpl::peer::PeerError::InvalidResponse(why)) if why.contains("nest")),
        "{outcome:?}"
    );
}

/// A request over the size limit whose `id` comes after its huge params is answered under
/// that id after whatever the peer reads past before a message (`jsonrpc::message_start`:
/// any whitespace `str::trim_start` takes, one byte order mark), as after JSON whitespace:
/// the line's envelope reads past the same (one reading). Before, a no-break space or an
/// ideographic space before it made the envelope read no object, only the first bytes were
/// kept, the `id` was past them, and the request was never answered.
#[tokio::test(start_paused = true)]
async fn an_id_after_huge_params_is_answered_after_unicode_whitespace_too() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(4 * MAX_SIZE);
    for before in [" \t", "\u{a0}", "\u{feff}\u{3000}", "\u{2028} \u{feff}"] {
        let line = format!(
            r#"{before}{{"jsonrpc":"2.0","method":"m","params":{{"pad":"{pad}"}},"id":12}}"#
        );
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{before:?}: {got:?}");
        assert_eq!(got[0]["id"], 12, "{before:?}: {}", got[0]);
    }
}

/// RFC 8259 §2: only space, tab, line feed and carriage return are whitespace in a JSON
/// text (and §8.1 lets a parser ignore one byte order mark). A message after other Unicode
/// whitespace (a no-break space, U+2028, an ideographic space) is no JSON text: a strict
/// peer or proxy rejects it, so taking it would be a parser differential. It is refused by
/// the one rule for a refused text: a request answered `-32700` under its id (not run), a
/// notification not answered (JSON-RPC 2.0 §4.1). Before, all were taken and run.
#[tokio::test(start_paused = true)]
async fn a_message_after_whitespace_json_does_not_have_is_refused() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    for before in [
        "\u{a0}",
        "\u{2028}",
        " \u{3000}",
        "\u{feff}\u{a0}",
        "\u{85}",
    ] {
        let line = format!(r#"{before}{{"jsonrpc":"2.0","id":7,"method":"m","params":{{}}}}"#);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{before:?}: {got:?}");
        assert_eq!(got[0]["id"], 7, "{before:?}: {}", got[0]);
        assert_eq!(got[0]["error"]["code"], -32700, "{before:?}: {}", got[0]);
        let line = format!(r#"{before}{{"jsonrpc":"2.0","method":"m"}}"#);
        assert_eq!(
            exchange(&mut raw, &line).await,
            Vec::<Value>::new(),
            "{before:?}"
        );
        // Whitespace after the message is JSON whitespace or text the parser refuses.
        let line = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"m"}}{before}"#);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{before:?}: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32700, "{before:?}: {}", got[0]);
    }
    for before in [" \t\r", "\u{feff}", " \u{feff}\t"] {
        let line = format!(r#"{before}{{"jsonrpc":"2.0","id":9,"method":"m"}}  "#);
        let got = exchange(&mut raw, &line).await;
        assert_eq!(
            got,
            vec![json!({"jsonrpc":"2.0","id":9,"result":"ok"})],
            "{before:?}"
        );
    }
}

/// A request with whitespace JSON does not have after it is refused whatever its size, and
/// answered under its id (JSON-RPC 2.0 §5): small, `-32700` (the parser refuses the text
/// after the object, RFC 8259 §2); over the size or cost limit, `-32600` (the limit).
#[tokio::test(start_paused = true)]
async fn a_request_with_unicode_whitespace_after_it_is_answered_whatever_its_size() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let pad = "x".repeat(MAX_SIZE);
    for params in ["{}".to_owned(), format!(r#"{{"pad":"{pad}"}}"#), dense()] {
        for after in ["\u{a0}", " \u{2028}"] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{params}}}{after}"#);
            let got = exchange(&mut raw, &line).await;
            assert_eq!(got.len(), 1, "{after:?} {}: {got:?}", params.len());
            assert!(
                got[0].get("error").is_some(),
                "{after:?} {}: {}",
                params.len(),
                got[0]
            );
            assert_eq!(got[0]["id"], 7, "{after:?} {}: {}", params.len(), got[0]);
        }
    }
}
