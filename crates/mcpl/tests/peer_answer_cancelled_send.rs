//! An answer whose send is given up while it waits for room in the outgoing queue (the
//! caller's `respond` future dropped: a timeout around it, a `select!` taking another arm)
//! is still sent: its request is owed a response (JSON-RPC 2.0 §5). Before, the answer was
//! dropped with the future and the request was never answered, with no word of it. Over a
//! real line transport (an in-memory pipe the test reads only once the answer was given up).
#![cfg(feature = "runtime")]

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use mcpl::peer::{IncomingMessage, IncomingRequest, Peer, PeerConfig, PeerError};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer_with, Raw};

/// A deadlock guard, never a synchronisation.
const GUARD: Duration = Duration::from_secs(3600);

type Send = Pin<Box<dyn Future<Output = Result<(), PeerError>> + std::marker::Send>>;

/// Polls `f` once: whether it finished.
async fn poll_once(f: &mut Send) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_ready())).await
}

/// Fills the peer's outgoing queue (the other side reads nothing): notifications until one
/// must wait, which is then given up (a notification's sender may).
async fn fill(peer: &Peer) {
    for _ in 0..10_000 {
        let p = peer.clone();
        let mut f: Send = Box::pin(async move {
            p.notify_raw("fill", Some(json!({ "pad": "x".repeat(512) })))
                .await
        });
        if !poll_once(&mut f).await {
            return;
        }
    }
    panic!("the queue never filled");
}

/// The requests `ids` sent by the other side, as the application receives them.
async fn requests(
    raw: &mut Raw,
    incoming: &mut mcpl::peer::Incoming,
    line: &str,
    n: usize,
) -> Vec<IncomingRequest> {
    raw.send(line).await;
    let mut got = Vec::new();
    while got.len() < n {
        match incoming.recv().await {
            Some(IncomingMessage::Request(r)) => got.push(r),
            Some(_) => {}
            None => panic!("incoming closed"),
        }
    }
    got
}

/// Reads lines until one satisfies `wanted`, within the guard.
async fn recv_until(raw: &mut Raw, mut wanted: impl FnMut(&Value) -> bool) -> Value {
    loop {
        let v = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("the answer never reached the wire");
        if wanted(&v) {
            return v;
        }
    }
}

/// `IncomingRequest::respond`, `Peer::respond` (after `into_id`) and a batch's last answer,
/// each given up while waiting for room: every answer still reaches the wire.
#[tokio::test(start_paused = true)]
async fn an_answer_given_up_while_waiting_for_room_is_still_sent() {
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (peer, mut incoming, mut raw) = raw_peer_with(config, 1024);
    let mut single = requests(
        &mut raw,
        &mut incoming,
        r#"{"jsonrpc":"2.0","id":"single","method":"m"}"#,
        1,
    )
    .await;
    let mut by_id = requests(
        &mut raw,
        &mut incoming,
        r#"{"jsonrpc":"2.0","id":"by-id","method":"m"}"#,
        1,
    )
    .await;
    let mut batch = requests(
        &mut raw,
        &mut incoming,
        r#"[{"jsonrpc":"2.0","id":"b1","method":"m"},{"jsonrpc":"2.0","id":"b2","method":"m"}]"#,
        2,
    )
    .await;
    fill(&peer).await;

    let r = single.remove(0);
    let mut f: Send = Box::pin(async move { r.respond("single").await });
    assert!(!poll_once(&mut f).await, "waits for room");
    drop(f);

    let id = by_id.remove(0).into_id().expect("not in a batch");
    let p = peer.clone();
    let mut f: Send = Box::pin(async move { p.respond(id, json!("by-id")).await });
    assert!(!poll_once(&mut f).await, "waits for room");
    drop(f);

    // The batch's first answer is held for its array; the last one sends the array.
    let b2 = batch.remove(1);
    let b1 = batch.remove(0);
    let mut f: Send = Box::pin(async move { b1.respond("b1").await });
    assert!(poll_once(&mut f).await, "held for the array");
    let mut f: Send = Box::pin(async move { b2.respond("b2").await });
    assert!(!poll_once(&mut f).await, "waits for room");
    drop(f);

    let got = recv_until(&mut raw, |v| v["id"] == "single").await;
    assert_eq!(got["result"], "single");
    let got = recv_until(&mut raw, |v| v["id"] == "by-id").await;
    assert_eq!(got["result"], "by-id");
    let got = recv_until(&mut raw, Value::is_array).await;
    assert_eq!(got.as_array().map(Vec::len), Some(2), "{got}");
}

/// A request sent in order (`Peer::send_request`) whose send is given up while it waits for
/// room was never sent: it no longer counts against `max_pending_requests`, and nothing is
/// left to forget (no `notifications/cancelled` for a request the other side never saw).
/// Before, its id stayed registered for ever, so with a limit of one no request could be
/// sent again until the caller forgot an id it had no answer for.
#[tokio::test(start_paused = true)]
async fn a_request_in_order_given_up_before_it_was_sent_is_not_left_registered() {
    let config = PeerConfig {
        outgoing_capacity: 2,
        max_pending_requests: 1,
        ..PeerConfig::default()
    };
    let (peer, _incoming, _raw) = raw_peer_with(config, 1024);
    fill(&peer).await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (p, s) = (peer.clone(), seen.clone());
    let mut f: Send = Box::pin(async move {
        p.send_request("a", None, |id| *s.lock().unwrap() = Some(id.clone()))
            .await
            .map(drop)
    });
    assert!(!poll_once(&mut f).await, "waits for room");
    drop(f);
    let id = seen.lock().unwrap().clone().expect("an id was given");
    assert!(!peer.forget(&id, "given up"), "still registered");
    let p = peer.clone();
    let mut f: Send = Box::pin(async move { p.send_request("b", None, |_| {}).await.map(drop) });
    let outcome = std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await;
    assert!(
        outcome.is_pending(),
        "waits for room, not refused: {outcome:?}"
    );
}

/// A request of ours given up while its frame still waits for room was never sent: no
/// `notifications/cancelled` goes out for it (the other side never saw it), so a caller
/// giving up again and again on a stuck connection does not pile up cancellations. Before,
/// each such request left a cancellation waiting in a task of its own.
#[tokio::test(start_paused = true)]
async fn a_request_given_up_before_it_was_sent_sends_no_cancellation() {
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (peer, _incoming, mut raw) = raw_peer_with(config, 1024);
    fill(&peer).await;
    for _ in 0..3 {
        let p = peer.clone();
        let mut f: Send =
            Box::pin(async move { p.request_raw("never-sent", None).await.map(drop) });
        assert!(!poll_once(&mut f).await, "waits for room");
        drop(f);
    }
    assert_eq!(peer.pending_requests(), 0);
    // Queued behind anything those left waiting: once it is read, all of it was.
    let p = peer.clone();
    tokio::spawn(async move { p.notify_raw("marker", None).await });
    let mut seen = Vec::new();
    let marker = recv_until(&mut raw, |v| {
        seen.push(v["method"].clone());
        v["method"] == "marker"
    })
    .await;
    assert_eq!(marker["method"], "marker");
    assert!(
        seen.iter().all(|m| m == "fill" || m == "marker"),
        "{seen:?}"
    );
}

/// A request dropped unanswered on a thread outside any runtime while the outgoing queue is
/// full is still answered (`-32601`, as when dropped anywhere): its answer waits for room in
/// a task of the connection's own runtime. Before, no runtime was at hand there and the
/// answer was dropped without a word.
#[tokio::test(start_paused = true)]
async fn a_request_dropped_outside_the_runtime_with_the_queue_full_is_still_answered() {
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (peer, mut incoming, mut raw) = raw_peer_with(config, 1024);
    let mut got = requests(
        &mut raw,
        &mut incoming,
        r#"{"jsonrpc":"2.0","id":"elsewhere","method":"m"}"#,
        1,
    )
    .await;
    fill(&peer).await;
    let r = got.remove(0);
    std::thread::spawn(move || drop(r)).join().expect("dropped");
    let answer = recv_until(&mut raw, |v| v["id"] == "elsewhere").await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
}
