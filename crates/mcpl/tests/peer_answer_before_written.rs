//! A response under the id of a request of ours whose frame is not yet written (a peer
//! that guessed the id, and ids are sequential) answers nothing this side sent: JSON-RPC
//! 2.0 §5 (a Response answers a Request object it was sent) and MCPL §5 make it a stray,
//! reported as a response to no request, and the request waits for its real answer.
//!
//! The peer registers a request in flight before its frame is queued for the writer
//! (`Peer::start_in`: `pending.insert`, then `try_send_frame`), and the writer may hold the
//! frame longer still (here: the other side does not read, so an earlier frame fills the
//! pipe). A response read in that window settled the request, and the real answer was then
//! reported as unknown. Now the writer notes each request frame as it takes it for the wire
//! (`peer::written`) and an answer under an id not yet so noted settles nothing.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{Diagnostic, IncomingMessage, PeerConfig, RequestOptions};
use serde_json::json;

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer_with;

/// A deadlock guard, never a synchronisation (the paused clock reaches it only once every
/// task waits).
const GUARD: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn s5_a_response_before_its_request_is_written_is_a_stray() {
    let config = PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    };
    // A pipe of 256 bytes the raw side does not read yet: the first frame fills it (written
    // in part), and the writer takes the second, larger than one write's worth
    // (`WRITE_BATCH_BYTES`, 256 KiB), alone for its next write, which waits; every frame
    // after them waits in the peer's queue, not yet handed to the transport.
    let (peer, mut incoming, mut raw) = raw_peer_with(config, 256);
    let small = "x".repeat(4096);
    let large = "y".repeat(300 * 1024);
    peer.notify_raw("big", Some(json!({ "pad": small })))
        .await
        .unwrap();
    peer.notify_raw("bigger", Some(json!({ "pad": large })))
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
    // Registered (its id given), its frame behind the blocker: not on the wire.
    let id = tokio::time::timeout(GUARD, id_rx).await.unwrap().unwrap();
    let mut diags = peer.diagnostics();
    // A malformed one (both an outcome and an error) fails nothing either.
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": id.to_value(), "result": "forged",
                         "error": {"code": 1, "message": "m"}}),
    )
    .await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": id.to_value(), "result": "forged"}))
        .await;
    // Read in order: once this notification is delivered, the forged answer was read.
    raw.send_json(json!({"jsonrpc": "2.0", "method": "mark"}))
        .await;
    loop {
        match tokio::time::timeout(GUARD, incoming.recv()).await.unwrap() {
            Some(IncomingMessage::Notification(n)) if n.method == "mark" => break,
            Some(_) => {}
            None => panic!("the connection ended"),
        }
    }
    // Now the raw side reads: the two frames before it, then the request, which it answers.
    assert_eq!(raw.recv().await["method"], "big");
    assert_eq!(raw.recv().await["method"], "bigger");
    let request = raw.recv().await;
    assert_eq!(request["id"], id.to_value());
    raw.send_json(json!({"jsonrpc": "2.0", "id": id.to_value(), "result": "real"}))
        .await;
    let answer = tokio::time::timeout(GUARD, call).await.unwrap().unwrap();
    assert_eq!(
        answer.unwrap(),
        json!("real"),
        "the request took the stray answer"
    );
    let invalid = tokio::time::timeout(GUARD, diags.recv()).await.unwrap();
    assert!(
        matches!(&invalid, Some(Diagnostic::InvalidMessage { id: Some(i), answered: false, .. })
            if *i == id),
        "{invalid:?}"
    );
    let stray = tokio::time::timeout(GUARD, diags.recv()).await.unwrap();
    assert!(
        matches!(&stray, Some(Diagnostic::UnknownResponse { id: Some(i), .. }) if *i == id),
        "{stray:?}"
    );
}
