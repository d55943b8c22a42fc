//! A line that begins with a batch and holds more after it (MCP stdio framing is one
//! message per line). Separated by JSON whitespace, each message is read as its own line's
//! (`jsonrpc::several_values`), the batch first. With nothing between them, or what
//! follows no complete message, the parser refuses the line (`trailing characters`); a
//! single object so refused has its request answered `-32700` under the id it showed
//! before the error, and the batch-first line follows the same rule: each request of the
//! batch, read whole before the error, is answered `-32700` under its id, in one array
//! (JSON-RPC 2.0 §5, §6), so none is lost under a null id. Over a real line transport (an
//! in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::peer::PeerConfig;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw};

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// Separated by whitespace: the batch answered as a batch, the object as an object.
#[tokio::test(start_paused = true)]
async fn a_batch_then_a_message_on_one_line_are_each_answered() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        r#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"}] {"jsonrpc":"2.0","id":2,"method":"b"}"#,
    )
    .await;
    assert_eq!(
        got,
        vec![
            json!([{"jsonrpc":"2.0","id":1,"result":"ok"}]),
            json!({"jsonrpc":"2.0","id":2,"result":"ok"}),
        ]
    );
}

/// Nothing between them, or junk or a cut message after the batch: each request of the
/// batch is refused `-32700` under its id (one array), as the first object of such a line
/// is; a notification of it is not answered. Before, one `-32700` under a null id answered
/// the line, and no request of the batch could tell it was refused.
#[tokio::test(start_paused = true)]
async fn a_batch_the_parser_refuses_for_what_follows_it_is_refused_under_each_id() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"s","method":"c"}]"#;
    for after in [
        r#"{"jsonrpc":"2.0","id":2,"method":"b"}"#,
        r#"[{"jsonrpc":"2.0","id":2,"method":"b"}]"#,
        " x",
        r#" {"jsonrpc""#,
    ] {
        let got = exchange(&mut raw, &format!("{batch}{after}")).await;
        assert_eq!(got.len(), 1, "{after}: {got:?}");
        let answers = got[0]
            .as_array()
            .unwrap_or_else(|| panic!("{after}: {got:?}"));
        let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
        assert_eq!(ids, [&json!(1), &json!("s")], "{after}: {got:?}");
        for a in answers {
            assert_eq!(a["error"]["code"], -32700, "{after}: {a}");
            let message = a["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("trailing characters"), "{message}");
        }
    }
    // The object-first line, the rule it follows: its request refused under its id.
    let got = exchange(
        &mut raw,
        r#"{"jsonrpc":"2.0","id":1,"method":"a"}{"jsonrpc":"2.0","id":2,"method":"b"}"#,
    )
    .await;
    assert_eq!(
        (got.len(), &got[0]["id"], &got[0]["error"]["code"]),
        (1, &json!(1), &json!(-32700))
    );
    // A batch of notifications only has no id to answer under: `-32700`, `id: null`.
    let got = exchange(&mut raw, r#"[{"jsonrpc":"2.0","method":"n"}] x"#).await;
    assert_eq!(
        (got.len(), &got[0]["id"], &got[0]["error"]["code"]),
        (1, &Value::Null, &json!(-32700))
    );
}
