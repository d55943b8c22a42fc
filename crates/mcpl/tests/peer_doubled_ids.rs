//! A request that names its `id` member more than once is ambiguous (JSON-RPC 2.0 §4, §5;
//! RFC 8259 §4 leaves duplicate names to the reader): serde_json keeps the last, so before,
//! `{"jsonrpc":"2.0","id":1,"method":"x","id":2}` was handled as request 2 while its
//! sender may have meant 1. Fail closed: an Invalid Request, answered `-32600` under a null
//! id and reported, never handled; a message refused for its size, its parsed cost or its
//! depth agrees (before, it was answered under the last id). Over a real line transport (an
//! in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::{Message, ParseError};
use mcpl::peer::{Diagnostic, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer.
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// The one answer `line` got: a `-32600` under a null id, never the application's.
async fn refused_under_null(raw: &mut Raw, text: &str) -> Value {
    let got = exchange(raw, text).await;
    let line = text.get(..120).unwrap_or(text);
    assert_eq!(got.len(), 1, "{line}: {got:?}");
    assert_eq!(got[0]["error"]["code"], -32600, "{line}: {}", got[0]);
    assert_eq!(got[0]["id"], Value::Null, "{line}: {}", got[0]);
    got[0].clone()
}

/// Valid JSON naming `id` twice (the same id, two ids, one name escaped, either side of the
/// method) is refused under a null id and reported; a driver of the sans-I/O machines reads
/// it the same way (`Message::parse`, one rule).
#[tokio::test(start_paused = true)]
async fn a_request_naming_its_id_twice_is_refused_under_null() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"x","id":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":1,"method":"x"}"#,
        r#"{"jsonrpc":"2.0","id":"a","method":"x","i\u0064":"b","params":{}}"#,
        r#"{"id":1,"jsonrpc":"2.0","id":null,"method":"x"}"#,
        r#"{"jsonrpc":"2.0","method":"notify","id":3,"id":4}"#,
    ];
    for line in lines {
        refused_under_null(&mut raw, line).await;
        match diags.recv().await {
            Some(Diagnostic::InvalidMessage {
                id: None,
                answered: true,
                reason,
            }) => assert!(reason.contains("more than once"), "{reason}"),
            other => panic!("{line}: {other:?}"),
        }
        let Err(ParseError::Invalid(e)) = Message::parse(line) else {
            panic!("{line}: Message::parse took it");
        };
        assert_eq!(e.id, None, "{line}");
    }
    // One `id` inside the params besides the top-level one is no second id.
    let got = exchange(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"id":6}}"#,
    )
    .await;
    assert_eq!(
        got,
        vec![json!({"jsonrpc": "2.0", "id": 5, "result": "ok"})]
    );
}

/// A request naming its `method` or `params` twice (one name possibly escaped) is refused
/// under its id and reported, never handled: which method, or which params, the sender
/// meant is in doubt (and a validator in between may have read the first). In a batch too.
#[tokio::test(start_paused = true)]
async fn a_request_naming_its_method_or_params_twice_is_refused_under_its_id() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    for (line, member) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"read","method":"delete"}"#,
            "method",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"read","method":"delete"}"#,
            "method",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1},"params":{"a":2}}"#,
            "params",
        ),
    ] {
        let got = exchange(&mut raw, line).await;
        assert_eq!(got.len(), 1, "{line}: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32600, "{line}: {}", got[0]);
        assert_eq!(got[0]["id"], 1, "{line}: {}", got[0]);
        match diags.recv().await {
            Some(Diagnostic::InvalidMessage {
                id: Some(_),
                answered: true,
                reason,
            }) => assert!(reason.contains(member), "{reason}"),
            other => panic!("{line}: {other:?}"),
        }
        let Err(ParseError::Invalid(e)) = Message::parse(line) else {
            panic!("{line}: Message::parse took it");
        };
        assert_eq!(e.id, Some(1_i64.into()), "{line}");
    }
    let line = r#"[{"jsonrpc":"2.0","id":2,"method":"x"},{"jsonrpc":"2.0","id":3,"method":"a","method":"b"}]"#;
    let got = exchange(&mut raw, line).await;
    let answers = got[0].as_array().expect("a batch answer");
    let three: Vec<_> = answers.iter().filter(|a| a["id"] == 3).collect();
    assert_eq!(three.len(), 1, "{answers:?}");
    assert_eq!(three[0]["error"]["code"], -32600, "{answers:?}");
    assert!(answers.iter().any(|a| a["id"] == 2 && a["result"] == "ok"));
}

/// In a batch, the entry naming its id twice is refused under a null id; the others are
/// handled as before.
#[tokio::test(start_paused = true)]
async fn a_batch_entry_naming_its_id_twice_is_refused_under_null() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    answer_all(incoming);
    let line =
        r#"[{"jsonrpc":"2.0","id":7,"method":"x"},5,{"jsonrpc":"2.0","id":1,"method":"x","id":2}]"#;
    let got = exchange(&mut raw, line).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let answers = got[0].as_array().expect("a batch answer");
    assert_eq!(answers.len(), 3, "{answers:?}");
    let under = |id: Value| answers.iter().filter(move |a| a["id"] == id);
    assert_eq!(under(json!(7)).count(), 1, "{answers:?}");
    assert_eq!(under(json!(2)).count(), 0, "{answers:?}");
    assert!(
        under(Value::Null).all(|a| a["error"]["code"] == -32600),
        "{answers:?}"
    );
    assert_eq!(under(Value::Null).count(), 2, "{answers:?}");
}

/// Refused for its size, its parsed cost or its depth, a request naming its id twice is
/// answered under a null id too (before: under its last id).
#[tokio::test(start_paused = true)]
async fn the_size_cost_and_depth_refusals_agree() {
    let config = PeerConfig {
        max_message_size: 4096,
        max_parsed_cost: 2000,
        ..PeerConfig::default()
    };
    let (_peer, incoming, mut raw) = raw_peer(config);
    answer_all(incoming);
    let pad = "y".repeat(8000);
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"p":"{pad}"}},"id":2}}"#);
    let reply = refused_under_null(&mut raw, &big).await;
    assert_eq!(reply["error"]["data"]["reason"], "max_message_size");
    let many = vec!["[]"; 1000].join(",");
    let costly = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":[{many}],"id":2}}"#);
    let reply = refused_under_null(&mut raw, &costly).await;
    assert_eq!(reply["error"]["data"]["reason"], "parsed_cost");
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{}{},"id":2}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let reply = refused_under_null(&mut raw, &deep).await;
    assert_eq!(reply["error"]["data"]["reason"], "nesting");
    // One id, refused the same ways: still answered under it.
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"p":"{pad}"}}}}"#);
    let got = exchange(&mut raw, &big).await;
    assert_eq!(got[0]["id"], 1, "{got:?}");
}
