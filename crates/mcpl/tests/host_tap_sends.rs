//! A `Tap` that sends on the connection whose frames it sees gets an error, never a hang.
//! The tap runs while the frame it sees is being written: under the peer's writer lock
//! (`peer/shared.rs`, a sender writing its own frame) and, for a `HostSession`'s plain
//! send, while the session's published state is held. A send from it waited for those
//! locks on the same thread for ever. Each send is polled once from the tap (a tap is a
//! plain callback); it is now ready at once with `PeerError::SentFromTap`.
#![cfg(feature = "runtime")]

use std::future::Future;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use mcpl::host::{HostConfig, HostError, HostSession};
use mcpl::peer::{FrameDirection, PeerConfig, PeerError, Tap};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host said nothing")
}

/// Polls `f` once, as a callback that cannot await can.
fn poll_once<T>(f: impl Future<Output = T>) -> Poll<T> {
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    std::pin::pin!(f).poll(&mut cx)
}

/// What the sends from the tap gave: through the peer, through the session.
type Seen = Arc<Mutex<Vec<(Poll<Result<(), PeerError>>, Poll<Result<(), HostError>>)>>>;

/// Connects a host whose tap, on the session's outbound `ping`, sends a notification
/// through the session's peer and one through the session; returns what they gave.
async fn tapped_send() -> Vec<(Poll<Result<(), PeerError>>, Poll<Result<(), HostError>>)> {
    let slot: Arc<Mutex<Option<HostSession>>> = Arc::new(Mutex::new(None));
    let seen: Seen = Arc::default();
    let tap = {
        let (slot, seen) = (slot.clone(), seen.clone());
        Tap::new(move |ev| {
            if ev.direction != FrameDirection::Outbound || !ev.text.contains(r#""method":"ping""#) {
                return;
            }
            let s = slot.lock().unwrap().clone();
            if let Some(s) = s {
                let progress = json!({ "progressToken": 1, "progress": 1 });
                let by_peer = poll_once(
                    s.peer()
                        .notify_raw("notifications/progress", Some(progress.clone())),
                );
                let by_session = poll_once(s.notify_raw("notifications/progress", progress));
                seen.lock().unwrap().push((by_peer, by_session));
            }
        })
    };
    let cfg = PeerConfig {
        tap: Some(tap),
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(cfg);
    let connect = tokio::spawn(HostSession::connect_peer(
        peer,
        incoming,
        HostConfig::default(),
    ));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(None)}))
        .await;
    let (s, _streams) = connect.await.unwrap().unwrap();
    *slot.lock().unwrap() = Some(s.clone());
    let ping = {
        let s = s.clone();
        tokio::spawn(async move { s.request_raw("ping", Value::Null).await })
    };
    let mut sent = recv(&mut raw).await;
    if sent["method"] == "notifications/initialized" {
        sent = recv(&mut raw).await;
    }
    assert_eq!(
        sent["method"], "ping",
        "nothing from the tap went out: {sent}"
    );
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": {}}))
        .await;
    assert_eq!(ping.await.unwrap().unwrap(), json!({}));
    slot.lock().unwrap().take();
    let read = std::mem::take(&mut *seen.lock().unwrap());
    s.close();
    read
}

#[test]
fn a_tap_sending_on_its_own_connection_gets_an_error_not_a_hang() {
    let (tx, rx) = mpsc::channel();
    // Its own thread, so a hang is reported as a failure (the thread is then leaked).
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(tapped_send()));
    });
    let read = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(read) => read,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the session hung: a Tap sending on its connection deadlocked")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test's thread panicked"),
    };
    assert_eq!(read.len(), 1, "{read:?}");
    let (by_peer, by_session) = &read[0];
    assert!(
        matches!(by_peer, Poll::Ready(Err(PeerError::SentFromTap))),
        "{by_peer:?}"
    );
    assert!(
        matches!(
            by_session,
            Poll::Ready(Err(HostError::Peer(PeerError::SentFromTap)))
        ),
        "{by_session:?}"
    );
}
