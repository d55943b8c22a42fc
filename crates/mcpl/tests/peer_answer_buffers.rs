//! Issue #24: a peer keeps the buffer of the last result it handed a typed caller as text,
//! for the next one (`SPARE_ANSWER_KEEP`, 512 bytes). A large result's buffer is not kept:
//! after a typed call answered with a result of tens of KiB, the connection holds no more
//! than it held before. Over a real line transport; heap bytes counted, not timed. One test
//! in this file, so nothing else allocates meanwhile.
#![cfg(feature = "runtime")]

use mcpl::peer::PeerConfig;
use mcpl::protocol::handshake::{ToolsCall, ToolsCallParams, ToolsCallResult};

#[path = "support/live_bytes.rs"]
mod live_bytes;
#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw};

/// One typed `tools/call` on `peer`, answered with a plain result of `text`.
async fn round_trip(peer: &mcpl::peer::Peer, raw: &mut Raw, text: &str) {
    let p = peer.clone();
    let call =
        tokio::spawn(async move { p.request::<ToolsCall>(&ToolsCallParams::new("echo")).await });
    let request = raw.recv().await;
    let result = ToolsCallResult::text(text);
    raw.send(
        &serde_json::json!({"id": request["id"], "jsonrpc": "2.0", "result": result}).to_string(),
    )
    .await;
    assert_eq!(call.await.unwrap().unwrap(), result);
}

#[tokio::test]
async fn a_large_typed_result_leaves_no_buffer_behind() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let large = "x".repeat(24 * 1024);
    // The pipe's and the line reader's buffers grow to a large line once, and may stay so
    // (bounds of their own): a raw call's large result grows them before counting.
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("tools/call", None).await });
    let request = raw.recv().await;
    let result = serde_json::to_value(ToolsCallResult::text(large.as_str())).unwrap();
    raw.send(
        &serde_json::json!({"id": request["id"], "jsonrpc": "2.0", "result": result}).to_string(),
    )
    .await;
    assert_eq!(call.await.unwrap().unwrap(), result);
    drop(result);
    for _ in 0..4 {
        round_trip(&peer, &mut raw, "small").await;
    }
    let before = live_bytes::live();
    round_trip(&peer, &mut raw, &large).await;
    for _ in 0..4 {
        round_trip(&peer, &mut raw, "small").await;
    }
    let kept = live_bytes::live() - before;
    drop(large);
    assert!(
        kept < 4 * 1024,
        "{kept} bytes more held after a 24 KiB result"
    );
}
