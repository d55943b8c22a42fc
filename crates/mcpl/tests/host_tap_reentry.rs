//! A `Tap` that reads the host session whose frames it sees (§5.4's grant, the channels held)
//! is answered, never left hanging: the session's own plain sends tap their frame while the
//! state they were gated against is held, and a getter called from the tap then waited for
//! that very hold on the same thread for ever.
#![cfg(feature = "runtime")]

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use mcpl::capability::Grant;
use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{FrameDirection, PeerConfig, Tap};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

/// The host's next line, as JSON.
async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host said nothing")
}

/// What the tap read from the session, per outbound `ping`.
type Seen = Arc<Mutex<Vec<(Grant, Vec<String>, bool)>>>;

/// Connects a host whose peer taps every frame into `session.grant()`, `channels()` and
/// `is_ready()` once `slot` holds the session; sends one plain request (`ping`) through the
/// session's gated path and returns what the tap read.
async fn tapped_send() -> Vec<(Grant, Vec<String>, bool)> {
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
                // Every getter reads the published state; each is read here once.
                let _ = (s.mode(), s.label(), s.input_ended(), s.last_receipt());
                let _ = (
                    s.manifest(),
                    s.last_change_receipt(),
                    s.accepted_ontology("x"),
                );
                let read = (s.grant(), s.channels(), s.is_ready());
                seen.lock().unwrap().push(read);
            }
        })
    };
    let cfg = PeerConfig {
        tap: Some(tap),
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(cfg);
    let host_cfg = HostConfig {
        policy: vec!["pushEvents".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, host_cfg));
    let init = recv(&mut raw).await;
    let m = json!({ "version": "0.5", "pushEvents": true });
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, _streams) = connect.await.unwrap().unwrap();
    *slot.lock().unwrap() = Some(s.clone());
    let ping = {
        let s = s.clone();
        tokio::spawn(async move { s.request_raw("ping", Value::Null).await })
    };
    let sent = recv(&mut raw).await;
    assert_eq!(sent["method"], "ping", "{sent}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": {}}))
        .await;
    assert_eq!(ping.await.unwrap().unwrap(), json!({}));
    // The tap holds a session: let it go, so the connection can end.
    slot.lock().unwrap().take();
    let read = std::mem::take(&mut *seen.lock().unwrap());
    s.close();
    read
}

/// The session's getters, called from a `Tap` on the session's own gated send, answer with
/// the state that send was gated against (here: ready, `pushEvents` granted, no channels).
/// Before, the tap ran while that state was held, and the getter waited for it on the same
/// thread: the send never returned and the runtime's worker was lost.
#[test]
fn a_tap_reading_the_session_during_its_own_send_does_not_hang() {
    let (tx, rx) = mpsc::channel();
    // The test runs on its own thread, so a hang is reported as a failure (that thread is
    // then leaked) rather than stopping the test binary.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(tapped_send()));
    });
    let read = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(read) => read,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the session hung: a Tap reading the session deadlocked its send")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test's thread panicked"),
    };
    assert_eq!(read.len(), 1, "{read:?}");
    let (grant, channels, ready) = &read[0];
    assert!(
        grant.allows(mcpl::capability::Capability::PushEvents),
        "{grant:?}"
    );
    assert!(channels.is_empty());
    assert!(ready);
}

/// Rounds of each send in [`tapped_sends_on_two_threads`]: the hold of one and the tap of the
/// other meet within a few hundred on two workers.
const ROUNDS: usize = 3_000;

/// Connects a host whose peer taps every outbound frame into `session.grant()`, then sends
/// from two tasks on a two-worker runtime at once: plain requests through the session's gated
/// path (each holds the published state, then takes the connection's writer lock) and
/// notifications through the bare peer (each takes the writer lock, then taps under it).
/// Returns how many frames the tap read the session for.
async fn tapped_sends_on_two_threads() -> usize {
    let slot: Arc<Mutex<Option<HostSession>>> = Arc::new(Mutex::new(None));
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tap = {
        let (slot, reads) = (slot.clone(), reads.clone());
        Tap::new(move |ev| {
            if ev.direction != FrameDirection::Outbound {
                return;
            }
            let s = slot.lock().unwrap().clone();
            if let Some(s) = s {
                let _ = s.grant();
                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let cfg = PeerConfig {
        tap: Some(tap),
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(cfg);
    let host_cfg = HostConfig {
        policy: vec!["pushEvents".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, host_cfg));
    let init = recv(&mut raw).await;
    let m = json!({ "version": "0.5", "pushEvents": true });
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, _streams) = connect.await.unwrap().unwrap();
    *slot.lock().unwrap() = Some(s.clone());
    // The other side answers every request `{}` and reads the rest.
    let answering = tokio::spawn(async move {
        loop {
            let Ok(Some(line)) = raw.lines.next_line().await else {
                return;
            };
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("method").is_some() && v.get("id").is_some() {
                raw.send_json(json!({"jsonrpc": "2.0", "id": v["id"], "result": {}}))
                    .await;
            }
        }
    });
    let gated = {
        let s = s.clone();
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                s.request_raw("ping", Value::Null).await.unwrap();
            }
        })
    };
    let bare = {
        let s = s.clone();
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                s.peer()
                    .notify_raw("notifications/message", None)
                    .await
                    .unwrap();
            }
        })
    };
    gated.await.unwrap();
    bare.await.unwrap();
    slot.lock().unwrap().take();
    s.close();
    answering.abort();
    reads.load(std::sync::atomic::Ordering::Relaxed)
}

/// A `Tap` that reads the session, tapping a frame another thread writes under the
/// connection's writer lock, is answered whatever the session's own sends hold meanwhile.
/// Before, the getter waited for the published state, held by a gated send on another thread
/// that waited for that writer lock in turn: both threads stopped for good.
#[test]
fn a_tap_reading_the_session_beside_a_gated_send_on_another_thread_does_not_deadlock() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(tapped_sends_on_two_threads()));
    });
    let reads = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(reads) => reads,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "the session deadlocked: a Tap reading it under the writer lock waited for a \
             gated send holding its state, which waited for that lock"
        ),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test's thread panicked"),
    };
    assert!(reads >= 2 * ROUNDS, "{reads}");
}
