//! A request the JSON parser refuses is answered under its id when its id is not in doubt
//! (JSON-RPC 2.0 §5: the id is Null only when it could not be detected). Before, every
//! such request was answered `-32700` with `id: null`, so its sender could never match the
//! error to its request and waited for its own deadline, for ever without one.
//!
//! Reading (`jsonrpc::refused_request_id`): before the byte the parser failed at, the
//! object showed `"jsonrpc": "2.0"`, a `method` member and exactly one `id` member, of
//! string or integer type, whose value ended; no other top-level `id` member follows.
//! Anything less keeps `id: null`. Over a real line transport (an in-memory pipe), every
//! byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::Message;
use mcpl::peer::PeerConfig;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer (the frames are handled in order, so `line` was handled by then).
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// The one answer a line got, which must be a `-32700`.
async fn parse_error_to(raw: &mut Raw, line: &str) -> Value {
    let got = exchange(raw, line).await;
    assert_eq!(got.len(), 1, "{line}: {got:?}");
    assert_eq!(got[0]["error"]["code"], -32700, "{line}: {}", got[0]);
    // A driver of the sans-I/O machines answers it by the same rule (one rule, in
    // `jsonrpc`): the same id.
    let e = Message::parse(line).expect_err("no message");
    let driver = e.answer(line).id.map_or(Value::Null, |id| id.to_value());
    assert_eq!(
        driver, got[0]["id"],
        "{line}: the driver's answer and the peer's differ"
    );
    got[0]["id"].clone()
}

/// A request whose id was read before the parser's error is answered `-32700` under it:
/// a number out of range, a lone surrogate, a text cut short, text after the object, a
/// bad token in the params, a control character in a string; string and integer ids,
/// the id before or after the method, a huge integer id within 64 bits, a long string id.
#[tokio::test(start_paused = true)]
async fn a_request_whose_id_was_read_before_the_error_is_answered_under_it() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let long = "i".repeat(1024);
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"m","params":[1e400]}"#.to_owned(),
            json!(5),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":"s","params":["\ud800"]}"#.to_owned(),
            json!("s"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"cut","method":"echo","params":[1,2"#.to_owned(),
            json!("cut"),
        ),
        (
            // (` {"x":1}` after it, a complete message, is read as its own:
            // `jsonrpc::several_values`, `peer_id_answers.rs`.)
            r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{}} {"x":"#.to_owned(),
            json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"m","params":[nope]}"#.to_owned(),
            json!(8),
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"m\",\"params\":[\"a\u{1}\"]}".to_owned(),
            json!(9),
        ),
        (
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m","params":[1e400]}"#
                .to_owned(),
            json!(18446744073709551615_u64),
        ),
        (
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"m","params":[1e400]}"#
                .to_owned(),
            json!(-9223372036854775808_i64),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"m","params":[1e400]}}"#),
            json!(long),
        ),
        (
            r#"{"id":"esc\"aped","j\u0073onrpc":"2.0","method":"m","params":[1e400]}"#.to_owned(),
            json!("esc\"aped"),
        ),
        // An `id` inside the params before the top-level one is not the id.
        (
            r#"{"jsonrpc":"2.0","params":{"id":1},"method":"m","id":"top","x":[1e400]}"#.to_owned(),
            json!("top"),
        ),
    ];
    for (line, id) in cases {
        assert_eq!(parse_error_to(&mut raw, &line).await, id, "{line}");
    }
}

/// Where the id is in doubt the answer keeps `id: null`: two `id` members (whichever
/// side of the error the second is), an id that is a float, a boolean, null, an object, an
/// array or a string over the length limit, an id after the error or cut by it, no
/// `jsonrpc` or another version, no `method`, an `id` only inside the params, a batch.
#[tokio::test(start_paused = true)]
async fn a_request_whose_id_is_in_doubt_is_answered_under_null() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let long = "i".repeat(1025);
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1e400],"id":2}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1e400],"id":1}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"i\u0064":2,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1e30,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1e400,"method":"m"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":true,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":null,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":[1],"method":"m","params":[1e400]}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"m","params":[1e400]}}"#),
        r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":[1e400],"id":3}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","id":"cu"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","id":12"#.to_owned(),
        r#"{"id":4,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"1.0","id":4,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"meth"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":{"id":5,"x":1e400}}"#.to_owned(),
        r#"[{"jsonrpc":"2.0","id":6,"method":"m","params":[1e400]}]"#.to_owned(),
        r#"{"jsonrpc":"2.0" "id":7,"method":"m"}"#.to_owned(),
    ];
    for line in lines {
        assert_eq!(parse_error_to(&mut raw, &line).await, Value::Null, "{line}");
    }
    // JSON-RPC 2.0 §4/§5: a fraction is an id (SHOULD NOT, `jsonrpc::request_id_number`),
    // answered under the same value as a taken request is.
    for (id, same) in [("1.5", json!(1.5)), ("1.0", json!(1.0))] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":[1e400]}}"#);
        assert_eq!(parse_error_to(&mut raw, &line).await, same, "{line}");
    }
}

/// A request that parses but is no valid one keeps its `-32600` under the id the parser
/// read (unchanged): the id is not in doubt once the text parsed.
#[tokio::test(start_paused = true)]
async fn a_request_that_parses_keeps_its_32600_under_its_id() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":3,"method":42}"#).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32600);
    assert_eq!(got[0]["id"], 3);
}

/// A request nested past what the parser reads is answered by the peer and by a driver of
/// the sans-I/O machines alike (`ParseError::answer`, one rule): `-32600` with `reason:
/// "nesting"`, under its id wherever it is, or `null` when in doubt.
#[tokio::test(start_paused = true)]
async fn a_request_nested_too_deep_is_answered_alike_by_the_peer_and_a_driver() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for (line, id) in [
        (
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{deep},"id":"after"}}"#),
            json!("after"),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{deep}}}"#),
            json!(3),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{deep},"id":4}}"#),
            Value::Null,
        ),
        // No `jsonrpc` member: an Invalid Request whose id is read all the same, as it is
        // in a request that parses (only a parse error makes the version a doubt).
        (
            format!(r#"{{"id":8,"method":"m","params":{deep}}}"#),
            json!(8),
        ),
        // A batch nested past the parser: one `-32700` under null (RELIABILITY.md), by both.
        (format!("[{deep}]"), Value::Null),
    ] {
        let got = exchange(&mut raw, &line).await;
        assert_eq!(got.len(), 1, "{got:?}");
        let e = Message::parse(&line).expect_err("too deep");
        let driver = Message::Response(e.answer(&line)).to_value();
        let peer = &got[0];
        assert_eq!(peer["id"], id, "{peer}");
        assert_eq!(driver["id"], id, "{driver}");
        assert_eq!(peer["error"], driver["error"], "{peer} / {driver}");
    }
}

/// What the peer never answers a driver of the sans-I/O machines is not owed either
/// (`ParseError::owed_answer`, the peer's reading, JSON-RPC 2.0 §4.1 and §5): a response
/// that does not parse, or nested past the parser, or naming `result` and `error` both
/// (answering a response can loop); a notification nested past the parser; an object
/// nested so with no `method`; a junk line or a scalar. A request that does not parse still is, as the peer
/// answers it. Before, `ParseError::answer` was the only rule a driver had, and it answered
/// every one of them (the sans-I/O example driver wrote each answer).
#[tokio::test(start_paused = true)]
async fn what_the_peer_never_answers_a_driver_owes_no_answer_either() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for line in [
        r#"{"jsonrpc":"2.0","id":"nobody","result":{"a":}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":"nobody","result":{deep}}}"#),
        r#"{"jsonrpc":"2.0","id":"nobody","result":1,"error":{"code":1,"message":"m"}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","method":"m","params":{deep}}}"#),
        format!(r#"{{"jsonrpc":"2.0","x":{deep}}}"#),
        // Junk and a scalar: junk lines, reported only.
        "not json".to_owned(),
        "5".to_owned(),
    ] {
        let got = exchange(&mut raw, &line).await;
        let at = line.len().min(40);
        assert!(got.is_empty(), "{}: the peer answered {got:?}", &line[..at]);
        let e = Message::parse(&line).expect_err("no message");
        assert_eq!(e.owed_answer(&line), None, "{}", &line[..at]);
    }
    // Owed as the peer answers it: a request whose text does not parse.
    let line = r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":}}"#;
    let got = exchange(&mut raw, line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let e = Message::parse(line).expect_err("no message");
    let owed = e.owed_answer(line).map(|r| Message::Response(r).to_value());
    assert_eq!(owed.as_ref(), Some(&got[0]));
}

/// The peer answers a text the parser refuses exactly when a driver of the sans-I/O
/// machines is owed an answer for it (`ParseError::owed_answer`), and with the same answer:
/// one rule (`jsonrpc::unparsed`), not two copies. Before, they disagreed on an object
/// whose top level breaks after a value nested past the parser (no `method`: the peer
/// answered it `-32600`, `id: null`, as the text that does not parse it is; a driver owed
/// nothing), and on a response followed by more text on its line (the peer answered the
/// text after it `-32700`, `id: null`, as it may be a request; a driver owed nothing).
/// A notification nested past the parser, its `method` named twice or not, is owed nothing
/// by either (JSON-RPC 2.0 §4.1), whatever `ParseError::answer` would write.
#[tokio::test(start_paused = true)]
async fn the_peer_answers_a_refused_text_exactly_when_a_driver_is_owed_one() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for line in [
        format!(r#"{{"jsonrpc":"2.0","x":{deep} "y":1}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":"nobody","result":{deep} "y":1}}"#),
        r#"{"jsonrpc":"2.0","id":"nobody","result":1} {"jsonrpc":"2.0","id":5,"method":"#
            .to_owned(),
        r#"{"jsonrpc":"2.0","id":"nobody","error":{"code":1,"message":"m"}}x"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","method":"a","method":"b","params":{deep}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"a","params":{deep}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"id":2,"method":"b","params":{deep}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"a","params":{deep} "y":1}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":"nobody","result":{deep}}}"#),
        format!("[{deep}]"),
        r#"{"jsonrpc":"2.0","id":"nobody","result":{"a":}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":[1e400]}"#.to_owned(),
    ] {
        let peer = exchange(&mut raw, &line).await;
        let e = Message::parse(&line).expect_err("no message");
        let owed: Vec<Value> = e
            .owed_answer(&line)
            .map(|r| Message::Response(r).to_value())
            .into_iter()
            .collect();
        let at = line.len().min(60);
        assert_eq!(
            peer,
            owed,
            "{}: the peer's answer and a driver's differ",
            &line[..at]
        );
    }
}

/// A text that parses but is no valid message is answered by the peer and by a driver of
/// the sans-I/O machines with the same error, word for word (`InvalidMessage::answer_error`,
/// one rule): before, the peer wrote `Invalid Request: {reason}` and
/// `ParseError::answer` the bare reason.
#[tokio::test(start_paused = true)]
async fn an_invalid_message_is_answered_alike_by_the_peer_and_a_driver() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    for line in [
        r#"{"jsonrpc":"2.0","id":3,"method":42}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"m","params":5}"#,
        r#"{"jsonrpc":"2.0","id":1e30,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":4,"i\u0064":5,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":20,"method":"n"}"#,
        r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
    ] {
        let peer = exchange(&mut raw, line).await;
        let e = Message::parse(line).expect_err("no message");
        let owed: Vec<Value> = e
            .owed_answer(line)
            .map(|r| Message::Response(r).to_value())
            .into_iter()
            .collect();
        assert_eq!(peer.len(), 1, "{line}: {peer:?}");
        assert_eq!(
            peer, owed,
            "{line}: the peer's answer and a driver's differ"
        );
    }
}

/// What the peer reads past before and after a message (whitespace, a UTF-8 byte order
/// mark, RFC 8259 §8.1) a driver of the sans-I/O machines reads past too
/// (`jsonrpc::message_start`, one reading, now also `Message::parse`'s): a request after a
/// byte order mark is taken by both, and one that does not parse after it is answered by
/// both under its id. Before, `Message::parse` refused every such line, so a driver
/// answered `-32700` under id null a request the peer takes and answers.
#[tokio::test(start_paused = true)]
async fn what_precedes_a_message_is_read_past_alike_by_the_peer_and_a_driver() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    for line in [
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}",
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\",\"params\":[1e400]}",
        " \u{feff} {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"m\"}",
        "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"m\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"m\"}\u{a0}",
        "\u{feff}[{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"m\",\"params\":{\"a\":}}]",
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":\"nobody\",\"result\":{\"a\":}}",
    ] {
        let peer = exchange(&mut raw, line).await;
        let driver: Vec<Value> = match Message::parse(line) {
            Ok(Message::Request(r)) => {
                vec![json!({"jsonrpc": "2.0", "id": r.id.to_value(), "result": "ok"})]
            }
            Ok(_) => Vec::new(),
            Err(e) => e
                .owed_answer(line)
                .map(|r| Message::Response(r).to_value())
                .into_iter()
                .collect(),
        };
        assert_eq!(
            peer, driver,
            "{line:?}: the peer's answer and a driver's differ"
        );
    }
}
