//! Messages in the wrong encoding, on the wire. JSON text exchanged between systems is UTF-8
//! (RFC 8259 §8.1): a line that is not is not JSON, and one that begins as a JSON-RPC
//! message does (`{` or `[`) is answered as any text that does not parse is (JSON-RPC 2.0
//! §5.1: `-32700`, `id: null`), so its sender learns at once instead of waiting for its
//! timeout. A line that does not begin so (binary junk, a log line) is reported only, as a
//! junk line is.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::codes;
use mcpl::peer::{Diagnostic, IncomingMessage, PeerConfig};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw};

/// A deadlock guard, never a synchronisation.
const GUARD: std::time::Duration = std::time::Duration::from_secs(30);

/// Answers every request with `{}`.
fn spawn_server(mut incoming: mcpl::peer::Incoming) {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                let _ = r.respond(json!({})).await;
            }
        }
    });
}

async fn ping(raw: &mut Raw, id: &str) {
    raw.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
        .await;
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    );
}

#[tokio::test]
async fn a_request_that_is_not_utf8_is_answered_32700_and_junk_is_not() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_server(incoming);
    let mut diags = peer.diagnostics();
    // A request written in Latin-1 (`é` as one byte), a WTF-8 lone surrogate, a batch after a
    // byte order mark and blanks: each is answered -32700, a request under its id (its
    // envelope tells it without doubt: `peer_not_text_answers.rs`; before, a null id), the
    // batch under a null id.
    let json_like: [(&[u8], Value); 3] = [
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"caf\xe9\"}\n",
            json!(1),
        ),
        (
            b"  {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"x\",\"params\":[\"\xed\xa0\x80\"]}\r\n",
            json!(2),
        ),
        (
            b"\xef\xbb\xbf \t[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"\xff\"}]\n",
            Value::Null,
        ),
    ];
    for (line, id) in json_like {
        raw.write.write_all(line).await.unwrap();
        let v: Value = tokio::time::timeout(GUARD, raw.recv())
            .await
            .unwrap_or_else(|_| panic!("no answer to {line:?} (deadlock guard)"));
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["error"]["code"], json!(codes::PARSE_ERROR), "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("UTF-8"), "{message}");
        assert!(matches!(
            diags.recv().await,
            Some(Diagnostic::NotText { .. })
        ));
    }
    // Binary junk is reported only: the next line out is the ping's answer.
    raw.write.write_all(b"\xff\xfe garbage {\n").await.unwrap();
    ping(&mut raw, "after-junk").await;
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::NotText { .. })
    ));
    assert!(diags.try_recv().is_none());
}
