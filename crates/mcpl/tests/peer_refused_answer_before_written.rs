//! A response the peer refuses (unparsed, nested too deep, over the size limit, an id
//! written as a whole float, an object with an id and nothing else) or a batch whose
//! responses it could not all keep, read while a request of ours waits in the writer's
//! queue, fails nothing not yet written: JSON-RPC 2.0 §5 (a Response answers a Request its
//! sender received) and MCPL §5, the rule `peer::written` applies to answers taken. Before,
//! these paths failed the request (or every request outstanding), and its real answer was
//! then reported as unknown (reviewer r3, finding 1). Over a real line transport, every
//! byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{IncomingMessage, PeerConfig, RequestOptions};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer_with, Raw};

/// A deadlock guard, never a synchronisation (the paused clock reaches it only once every
/// task waits).
const GUARD: Duration = Duration::from_secs(3600);

/// Holds a request's frame in the writer's queue (as `peer_answer_before_written` does: a
/// 256-byte pipe the raw side does not read, filled by a first frame, a second too large
/// for one write waiting), sends `forged(id)` under its id, then a `mark` notification the
/// peer delivers once it has read the forged line; then reads the frames out and answers
/// the request for real. Returns the raw side (after the request), the answer, and the
/// peer (kept open).
async fn forged_then_real(
    config: PeerConfig,
    forged: impl Fn(&Value) -> String,
) -> (Raw, Result<Value, mcpl::peer::PeerError>, mcpl::peer::Peer) {
    let (peer, mut incoming, mut raw) = raw_peer_with(config, 256);
    peer.notify_raw("big", Some(json!({ "pad": "x".repeat(4096) })))
        .await
        .unwrap();
    peer.notify_raw("bigger", Some(json!({ "pad": "y".repeat(300 * 1024) })))
        .await
        .unwrap();
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let options = RequestOptions::new().on_id(move |id| {
                let _ = id_tx.send(id.clone());
            });
            peer.request_raw_with("m", None, options).await
        })
    };
    let id = tokio::time::timeout(GUARD, id_rx).await.unwrap().unwrap();
    raw.send(&forged(&id.to_value())).await;
    raw.send_json(json!({"jsonrpc": "2.0", "method": "mark"}))
        .await;
    loop {
        match tokio::time::timeout(GUARD, incoming.recv()).await.unwrap() {
            Some(IncomingMessage::Notification(n)) if n.method == "mark" => break,
            Some(_) => {}
            None => panic!("the connection ended"),
        }
    }
    assert_eq!(raw.recv().await["method"], "big");
    assert_eq!(raw.recv().await["method"], "bigger");
    let request = raw.recv().await;
    assert_eq!(request["id"], id.to_value());
    assert_eq!(request["method"], "m");
    raw.send_json(json!({"jsonrpc": "2.0", "id": id.to_value(), "result": "real"}))
        .await;
    let answer = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits")
        .expect("joined");
    (raw, answer, peer)
}

fn no_timeout() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// A response the parser refuses (a number out of a double's range).
#[tokio::test(start_paused = true)]
async fn s5_an_unparsed_answer_fails_nothing_unwritten() {
    let (_, answer, _) = forged_then_real(no_timeout(), |id| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1e400}}"#)
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
}

/// A response nested past what the parser reads.
#[tokio::test(start_paused = true)]
async fn s5_a_too_deep_answer_fails_nothing_unwritten() {
    let (_, answer, _) = forged_then_real(no_timeout(), |id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        )
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
}

/// A response over `max_message_size`, discarded unread.
#[tokio::test(start_paused = true)]
async fn s5_an_oversized_answer_fails_nothing_unwritten() {
    let config = PeerConfig {
        max_message_size: 10_000,
        ..no_timeout()
    };
    let (_, answer, _) = forged_then_real(config, |id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":"{}"}}"#,
            "z".repeat(20_000)
        )
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
}

/// The same id written as a whole float, refused by the parser and read whole.
#[tokio::test(start_paused = true)]
async fn s5_an_integral_float_id_fails_nothing_unwritten() {
    let (_, answer, _) = forged_then_real(no_timeout(), |id| {
        format!(r#"{{"jsonrpc":"2.0","id":{id}.0,"result":1e400}}"#)
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
    let (_, answer, _) = forged_then_real(no_timeout(), |id| {
        format!(r#"{{"jsonrpc":"2.0","id":{id}.0,"result":"forged"}}"#)
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
}

/// An object with an id and neither a method nor an outcome, under the id of a request of
/// ours not yet written: it names no request of ours, so it is answered `-32600` under its
/// id as any such object is (`AnswerUnlessOurs`), and fails nothing.
#[tokio::test(start_paused = true)]
async fn s5_an_id_alone_under_an_unwritten_id_is_answered_and_fails_nothing() {
    let (mut raw, answer, _peer) = forged_then_real(no_timeout(), |id| {
        format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#)
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
    let reply = tokio::time::timeout(GUARD, raw.recv()).await.unwrap();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
}

/// A batch of responses discarded unread whose summaries the reader could not all keep
/// fails every request of ours outstanding that was written, not one still queued.
#[tokio::test(start_paused = true)]
async fn s5_an_unkept_batch_fails_nothing_unwritten() {
    let config = PeerConfig {
        max_message_size: 100_000,
        ..no_timeout()
    };
    let (_, answer, _) = forged_then_real(config, |_| {
        let entries: Vec<String> = (0..3000)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","id":"other-{i:05}","result":0}}"#))
            .collect();
        format!("[{}]", entries.join(","))
    })
    .await;
    assert_eq!(answer.unwrap(), json!("real"));
}
