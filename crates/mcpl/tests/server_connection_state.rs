//! Per-connection state with one shared `Server` (issue #20): `ServerBuilder::connection_state`
//! made on first use and dropped when the connection ends, the turn callbacks that read it,
//! and a connection's own manifest (`Session::own_manifest`, §17.3/§17.4 per connection).
//! Scripted hosts over the in-memory transport, real JSON lines.
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::peer::{Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::protocol::handshake::{ToolContent, ToolsCallResult};
use mcpl::server::{BuildError, Server, ServerBuilder};
use mcpl::transport::memory;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

/// A connection's state: a counter, and a drop report so the test can wait for the drop.
struct Counter {
    calls: Mutex<u64>,
    turns: Mutex<(u64, u64)>,
    dropped: mpsc::UnboundedSender<()>,
}

impl Drop for Counter {
    fn drop(&mut self) {
        let _ = self.dropped.send(());
    }
}

fn text(t: impl Into<String>) -> ToolsCallResult {
    ToolsCallResult {
        content: vec![ToolContent::text(t)],
        is_error: None,
        state: None,
        extra: Map::new(),
    }
}

fn base() -> ServerBuilder {
    Server::builder("state-test", "1.0.0")
        .feature_set("alerts", "Push alerts", &[Capability::PushEvents])
        .feature_set("turns", "Watch turns", &[Capability::InferenceLifecycle])
}

/// A server whose `count` tool counts the calls on its connection; returns how many states
/// were made and the receiver of their drops.
fn counting_server() -> (Server, Arc<AtomicUsize>, mpsc::UnboundedReceiver<()>) {
    let made = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let m = made.clone();
    let server = base()
        .connection_state(move || {
            m.fetch_add(1, Ordering::SeqCst);
            Counter {
                calls: Mutex::new(0),
                turns: Mutex::new((0, 0)),
                dropped: tx.clone(),
            }
        })
        .on_turn_start_with_state(|c: &Counter, _| c.turns.lock().unwrap().0 += 1)
        .on_turn_end_with_state(|c: &Counter, _| c.turns.lock().unwrap().1 += 1)
        .tool(
            "count",
            "Count",
            json!({"type": "object"}),
            |s, _p| async move {
                let c = s.state::<Counter>().expect("registered state");
                let mut n = c.calls.lock().unwrap();
                *n += 1;
                Ok(text(n.to_string()))
            },
        )
        .tool(
            "turns",
            "Turns",
            json!({"type": "object"}),
            |s, _p| async move {
                let c = s.state::<Counter>().expect("registered state");
                let t = *c.turns.lock().unwrap();
                Ok(text(format!("{} {}", t.0, t.1)))
            },
        )
        .tool(
            "add_set",
            "Adds a feature set to this connection's manifest",
            json!({"type": "object"}),
            |s, p| async move {
                let name = p.arguments.as_ref().and_then(|a| a.get("name")).cloned();
                let name = name.and_then(|n| n.as_str().map(str::to_owned)).unwrap();
                let out = s
                    .own_manifest()
                    .transaction(|m| {
                        m["featureSets"][name.as_str()] =
                            json!({"description": "added", "uses": ["pushEvents"]});
                    })
                    .unwrap();
                Ok(text(out.revision))
            },
        )
        .build()
        .unwrap();
    (server, made, rx)
}

struct Host {
    peer: Peer,
    incoming: Incoming,
    revision: String,
    session: mcpl::server::Session,
}

/// A host connected to `server`, initialized with MCPL and every capability granted.
async fn host(server: &Server) -> Host {
    let (host_t, server_t) = memory::pair();
    let (peer, incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    let init = peer
        .request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
        )
        .await
        .unwrap();
    peer.request_raw(
        "featureSets/update",
        Some(json!({"effectiveCapabilities": ["*"]})),
    )
    .await
    .unwrap();
    let revision = init["capabilities"]["experimental"]["mcpl"]["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    Host {
        peer,
        incoming,
        revision,
        session,
    }
}

async fn call(host: &Host, name: &str, args: Value) -> String {
    let r = host
        .peer
        .request_raw("tools/call", Some(json!({"name": name, "arguments": args})))
        .await
        .unwrap();
    r["content"][0]["text"].as_str().unwrap().to_owned()
}

/// The next `mcpl/manifestChanged` revision the host receives (each host here receives
/// nothing else unasked).
async fn announced(host: &mut Host) -> String {
    let next = tokio::time::timeout(Duration::from_secs(5), host.incoming.recv()).await;
    match next {
        Ok(Some(IncomingMessage::Notification(n))) if n.method == "mcpl/manifestChanged" => {
            n.params.unwrap()["revision"].as_str().unwrap().to_owned()
        }
        other => panic!("expected mcpl/manifestChanged, got {other:?}"),
    }
}

async fn manifest(host: &Host) -> Value {
    host.peer
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap()
}

#[tokio::test]
async fn connection_state_is_made_on_first_use_per_connection_and_dropped_at_the_end() {
    let (server, made, mut dropped) = counting_server();
    let a = host(&server).await;
    let b = host(&server).await;
    // Initialized and granted, no handler has asked: nothing made yet.
    assert_eq!(made.load(Ordering::SeqCst), 0);
    for expected in ["1", "2", "3"] {
        assert_eq!(call(&a, "count", json!({})).await, expected);
    }
    assert_eq!(made.load(Ordering::SeqCst), 1);
    // The other connection's count starts at one: the state is not shared.
    assert_eq!(call(&b, "count", json!({})).await, "1");
    assert_eq!(made.load(Ordering::SeqCst), 2);

    // §10.5: the lifecycle callbacks count into the connection whose host sent the turn.
    for phase in ["started", "completed"] {
        a.peer
            .notify_raw(
                "inference/lifecycle",
                Some(json!({"inferenceId": "inf_a", "phase": phase})),
            )
            .await
            .unwrap();
    }
    assert_eq!(call(&a, "turns", json!({})).await, "1 1");
    assert_eq!(call(&b, "turns", json!({})).await, "0 0");

    // Ending a connection drops its state (and only its state).
    a.peer.close();
    tokio::time::timeout(Duration::from_secs(5), dropped.recv())
        .await
        .expect("the closed connection's state is dropped")
        .unwrap();
    assert_eq!(call(&b, "count", json!({})).await, "2");
    assert!(dropped.try_recv().is_err());
}

#[tokio::test]
async fn a_turn_still_open_at_the_end_reaches_the_state_before_it_is_dropped() {
    /// Reports each turn end, then its own drop.
    struct Ends(mpsc::UnboundedSender<String>);
    impl Drop for Ends {
        fn drop(&mut self) {
            let _ = self.0.send("dropped".into());
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let server = base()
        .connection_state(move || Ends(tx.clone()))
        .on_turn_end_with_state(|e: &Ends, t| {
            let _ = e.0.send(t.inference_id.clone());
        })
        .tool(
            "touch",
            "Makes the state",
            json!({"type": "object"}),
            |s, _p| async move { Ok(text(format!("{}", s.state::<Ends>().is_some()))) },
        )
        .build()
        .unwrap();
    let h = host(&server).await;
    h.peer
        .notify_raw(
            "inference/lifecycle",
            Some(json!({"inferenceId": "inf_open", "phase": "started"})),
        )
        .await
        .unwrap();
    assert_eq!(call(&h, "touch", json!({})).await, "true");
    h.peer.close();
    // §10.5: the open turn is ended at the connection's end, into its state, then the state
    // is dropped.
    for expected in ["inf_open", "dropped"] {
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.expect("reported").unwrap(), expected);
    }
    // Once the connection has ended, its state is gone and is not made again.
    assert!(h.session.state::<Ends>().is_none());
}

#[test]
fn state_readers_need_the_registered_type() {
    let e = base()
        .on_turn_start_with_state(|_: &String, _| {})
        .build()
        .unwrap_err();
    assert!(matches!(
        e,
        BuildError::ConnectionStateType {
            registration: "on_turn_start_with_state",
            wanted,
            registered: None,
        } if wanted.ends_with("String")
    ));
    assert!(e.to_string().contains("no connection_state is registered"));
    let e = base()
        .connection_state(|| 0u32)
        .on_turn_end_with_state(|_: &u64, _| {})
        .build()
        .unwrap_err();
    assert!(matches!(
        e,
        BuildError::ConnectionStateType {
            registration: "on_turn_end_with_state",
            registered: Some("u32"),
            ..
        }
    ));
    let e = base()
        .connection_state(|| 0u32)
        .connection_state(|| 1u32)
        .build()
        .unwrap_err();
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "connection_state".into()
        }
    );
}

#[tokio::test]
async fn a_state_of_another_type_is_none() {
    let server = base()
        .connection_state(|| 7u32)
        .tool(
            "probe",
            "Probe",
            json!({"type": "object"}),
            |s, _p| async move {
                Ok(text(format!(
                    "{:?} {:?}",
                    s.state::<u32>().map(|v| *v),
                    s.state::<u64>().map(|v| *v)
                )))
            },
        )
        .build()
        .unwrap();
    let h = host(&server).await;
    assert_eq!(call(&h, "probe", json!({})).await, "Some(7) None");
}

/// §17.3/§17.4 per connection: a connection that takes its own manifest changes it alone;
/// the others are told nothing and keep the server's, and the server's later changes no
/// longer reach the one that left.
#[tokio::test]
async fn own_manifest_changes_reach_only_that_connection() {
    let (server, _made, _dropped) = counting_server();
    let mut a = host(&server).await;
    let mut b = host(&server).await;
    assert_eq!(a.revision, b.revision);
    let shared = server.tracker().revision();

    let own = call(&a, "add_set", json!({"name": "mine"})).await;
    assert_ne!(own, shared);
    // The fork announced nothing: A's first announcement is its own change.
    assert_eq!(announced(&mut a).await, own);
    let ma = manifest(&a).await;
    assert_eq!(ma["revision"], own.as_str());
    assert!(ma["featureSets"]["mine"].is_object());
    let mb = manifest(&b).await;
    assert_eq!(mb["revision"], shared.as_str());
    assert!(mb["featureSets"].get("mine").is_none());
    assert_eq!(server.tracker().revision(), shared);

    // The server changes its manifest: B hears it first (so it heard nothing of A's), A
    // does not (its next announcement is its own next change).
    let out = server
        .tracker()
        .transaction(|m| {
            m["featureSets"]["server-wide"] = json!({"description": "x", "uses": ["pushEvents"]})
        })
        .unwrap();
    assert_eq!(out.announced, 1);
    assert_eq!(announced(&mut b).await, out.revision);
    let again = call(&a, "add_set", json!({"name": "mine-too"})).await;
    assert_eq!(announced(&mut a).await, again);
    assert!(manifest(&a).await["featureSets"]
        .get("server-wide")
        .is_none());

    // A new connection is initialized with the server's manifest, not A's.
    let c = host(&server).await;
    assert_eq!(c.revision, out.revision);
}
