//! Issue #24, one rule: a line the async peer reads is answered exactly as a driver of the
//! sans-I/O machines answers it by the library's own functions (`Message::parse`, then
//! `ParseError::owed_answer` for a line that is no message), for hostile lines made by
//! editing valid ones: a request, a response, a notification, a request nested deep. Each
//! line goes over a real line transport (an in-memory pipe); a request the peer takes is
//! answered by the application, so the driver's reading of it is the answer it would get.
//! Batches are left out: a driver splits them itself.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::Message;
use mcpl::peer::PeerConfig;
use proptest::prelude::*;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer};

/// What a driver writes for `line`: a request's answer (the application answers `"ok"`,
/// as [`answer_all`] does), nothing for a notification or a response, else what
/// `ParseError::owed_answer` gives.
fn driver(line: &str) -> Vec<Value> {
    match Message::parse(line) {
        Ok(Message::Request(r)) => {
            vec![json!({"jsonrpc": "2.0", "id": r.id.to_value(), "result": "ok"})]
        }
        Ok(_) => Vec::new(),
        Err(e) => e
            .owed_answer(line)
            .map(|r| Message::Response(r).to_value())
            .into_iter()
            .collect(),
    }
}

/// Valid lines to edit.
fn templates() -> Vec<String> {
    let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
    vec![
        r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":[1,"x"]}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":"s","result":{"a":1}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"n","params":[true,null]}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":8,"method":"m","params":{deep}}}"#),
    ]
}

/// A template with one to three edits: at a byte (moved back to a character boundary),
/// up to three bytes replaced by a hostile piece.
fn hostile_line() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        "\"",
        ",",
        ":",
        "\\",
        " ",
        "id",
        "\"id\":",
        "\"method\":",
        "1e400",
        "\\ud800",
        "null",
        "1.0",
        "\u{feff}",
        "\u{a0}",
        "\"id\":9,",
        "\"result\":1,",
        "\"method\":\"x\",",
        "\"error\":{},",
    ]);
    let edit = (0_usize..320, 0_usize..4, piece);
    let edits = prop::collection::vec(edit, 1..4);
    (prop::sample::select(templates()), edits).prop_map(|(mut line, edits)| {
        for (at, cut, piece) in edits {
            let mut at = at.min(line.len());
            while !line.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + cut).min(line.len());
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.replace_range(at..end.max(at), piece);
        }
        line
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The peer's answers to a hostile line are the driver's, to the byte.
    #[test]
    fn the_peer_answers_a_hostile_line_as_a_driver_does(line in hostile_line()) {
        prop_assume!(!line.trim_start_matches([' ', '\u{feff}', '\u{a0}']).starts_with('['));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let peer = runtime.block_on(async {
            let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
            answer_all(incoming);
            raw.send(&line).await;
            raw.before_sync().await
        });
        prop_assert_eq!(peer, driver(&line), "{}", line);
    }
}

/// A request after Unicode whitespace (a no-break space: no JSON text, RFC 8259 §2) that
/// the lead's check reads whole but a `Value` does not (nested past the parser, a number
/// out of range, a lone surrogate) is answered alike: the peer refuses it for its lead
/// (`-32700` under its id) before parsing it, and `Message::parse` now does too. Before,
/// `Message::parse` parsed it first, so a driver answered `-32600` (nesting) or `-32700`
/// with the parser's message instead.
#[tokio::test(start_paused = true)]
async fn a_request_after_unicode_whitespace_is_refused_for_its_lead_by_both() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
    for line in [
        format!("\u{a0}{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{deep}}}"),
        "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[1e400]}".to_owned(),
        "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[\"\\ud800\"]}".to_owned(),
    ] {
        raw.send(&line).await;
        let peer = raw.before_sync().await;
        assert_eq!(peer.len(), 1, "{line:?}: {peer:?}");
        assert_eq!(peer[0]["id"], 1, "{line:?}: {}", peer[0]);
        assert_eq!(peer[0]["error"]["code"], -32700, "{line:?}: {}", peer[0]);
        assert_eq!(
            peer,
            driver(&line),
            "{line:?}: the peer's answer and a driver's differ"
        );
    }
}

/// A line that begins with a batch the parser refuses only for what follows it (junk, a
/// message with nothing between, a message cut short): the peer answers each of the
/// batch's requests `-32700` under its id, in one array (JSON-RPC 2.0 §5, §6), and a
/// driver that writes what the library owes it writes the same. Before, a driver had one
/// `-32700` under a null id (`ParseError::owed_answer`), and no request of the batch could
/// tell it was refused.
#[tokio::test(start_paused = true)]
async fn a_line_beginning_with_a_batch_refused_for_what_follows_is_answered_alike() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"b","method":"m"}]"#;
    for line in [
        format!("{batch} x"),
        format!(r#"{batch}{{"jsonrpc":"2.0","id":3,"method":"m"}}"#),
        format!(r#"{batch} {{"jsonrpc":"2.0","id":3,"#),
    ] {
        raw.send(&line).await;
        let peer = raw.before_sync().await;
        assert_eq!(peer.len(), 1, "{line:?}: {peer:?}");
        let ids: Vec<&Value> = peer[0]
            .as_array()
            .map(|a| a.iter().map(|r| &r["id"]).collect())
            .unwrap_or_default();
        assert_eq!(ids, [&json!(1), &json!("b")], "{line:?}: {}", peer[0]);
        assert_eq!(
            peer,
            driver_batch_first(&line),
            "{line:?}: the peer's answer and a driver's differ"
        );
    }
}

/// What a driver writes for a line that is no message, by the library's rule
/// (`ParseError::owed_answers`, under the peer's bound on a batch).
fn driver_batch_first(line: &str) -> Vec<Value> {
    match Message::parse(line) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .owed_answers(line, PeerConfig::default().max_batch_entries)
            .map(|a| a.to_value())
            .into_iter()
            .collect(),
    }
}
