//! A frame produced inside the connection's own `Tap` still reaches the wire: the
//! `notifications/cancelled` of a request future dropped there, and the answer of an
//! `IncomingRequest` dropped there (its request is owed one, JSON-RPC 2.0 §5). Such a frame
//! cannot be written from the tap (the tap may run under the writer's lock), so it is sent
//! once the tap returns; before, `Shared::send_frame_detached` dropped it without a word,
//! and the request it answered waited for ever. Over a real line transport (an in-memory
//! pipe), every byte read at the other end.
#![cfg(feature = "runtime")]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use mcpl::peer::{FrameDirection, IncomingMessage, IncomingRequest, PeerConfig, Tap};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw};

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how a frame that never comes shows.
const GUARD: Duration = Duration::from_secs(3600);

/// The notification whose inbound frame makes the tap drop what it holds.
const DROP_IT: &str = r#"{"jsonrpc":"2.0","method":"drop-it"}"#;

/// A tap that, on seeing [`DROP_IT`] come in, drops what `held` holds (inside the tap).
fn dropping_tap<T: Send + 'static>(held: Arc<Mutex<Option<T>>>) -> Tap {
    Tap::new(move |ev| {
        if ev.direction == FrameDirection::Inbound && ev.text.contains("drop-it") {
            drop(held.lock().unwrap().take());
        }
    })
}

/// Reads lines until one satisfies `wanted`, within the guard.
async fn recv_until(raw: &mut Raw, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let v = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("the frame never reached the wire");
        if wanted(&v) {
            return v;
        }
    }
}

type Pending = Pin<Box<dyn Future<Output = Result<Value, mcpl::peer::PeerError>> + Send>>;

/// A request of ours whose future is dropped inside the tap is given up: the other side is
/// told (`notifications/cancelled`, MCP), as when it is dropped anywhere else.
#[tokio::test(start_paused = true)]
async fn a_request_dropped_inside_the_tap_is_still_cancelled_on_the_wire() {
    let held: Arc<Mutex<Option<Pending>>> = Arc::default();
    let cfg = PeerConfig {
        tap: Some(dropping_tap(held.clone())),
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer(cfg);
    let p = peer.clone();
    let mut fut: Pending = Box::pin(async move { p.request_raw("slow", None).await });
    // Polled once: registered and sent.
    std::future::poll_fn(|cx| {
        assert!(fut.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    let sent = raw.recv().await;
    assert_eq!(sent["method"], "slow");
    *held.lock().unwrap() = Some(fut);
    raw.send(DROP_IT).await;
    let cancel = recv_until(&mut raw, |v| v["method"] == "notifications/cancelled").await;
    assert_eq!(cancel["params"]["requestId"], sent["id"]);
    assert!(held.lock().unwrap().is_none(), "dropped in the tap");
    assert_eq!(peer.pending_requests(), 0);
}

/// A request of the other side whose `IncomingRequest` is dropped unanswered inside the tap
/// is still answered (`-32601`, as when dropped anywhere else).
#[tokio::test(start_paused = true)]
async fn a_request_dropped_unanswered_inside_the_tap_is_still_answered() {
    let held: Arc<Mutex<Option<IncomingRequest>>> = Arc::default();
    let cfg = PeerConfig {
        tap: Some(dropping_tap(held.clone())),
        ..PeerConfig::default()
    };
    let (_peer, mut incoming, mut raw) = raw_peer(cfg);
    let (got_tx, got_rx) = tokio::sync::oneshot::channel();
    let keep = held.clone();
    tokio::spawn(async move {
        let mut got_tx = Some(got_tx);
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                *keep.lock().unwrap() = Some(r);
                if let Some(tx) = got_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    raw.send_json(json!({"jsonrpc": "2.0", "id": "held", "method": "held"}))
        .await;
    got_rx.await.expect("the request was delivered");
    raw.send(DROP_IT).await;
    let answer = recv_until(&mut raw, |v| v["id"] == "held").await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert!(held.lock().unwrap().is_none(), "dropped in the tap");
}
