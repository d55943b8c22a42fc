//! A `Server` and a `HostSession` of this crate facing each other, both writing hard at once:
//! neither may stop reading because its own writes wait, or the two wait on each other for
//! good. And a server facing a host that stops reading still ends its requests at the
//! request timeout. Found by an audit of the sessions' drivers (issue #24); the server's
//! driver failed both and was reverted.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{Peer, PeerConfig};
use mcpl::server::{PushEvent, Server};
use serde_json::json;

/// A deadlock guard, far above what the exchange takes (well under a second).
const GUARD: Duration = Duration::from_secs(20);

fn small() -> PeerConfig {
    PeerConfig {
        outgoing_capacity: 2,
        incoming_capacity: 2,
        ..PeerConfig::default()
    }
}

/// Connects a host granted `pushEvents` and `also` to `server` over memory, and waits until
/// the server's session holds the grant.
async fn connect(
    server: &Server,
    peer: PeerConfig,
    also: &str,
) -> (HostSession, mcpl::host::HostStreams, mcpl::server::Session) {
    let (a, b) = mcpl::transport::memory::pair();
    let session = server.start(b);
    let mut grant = session.grant_changes();
    let config = HostConfig {
        policy: vec!["pushEvents".into(), also.into()],
        peer,
        ..HostConfig::default()
    };
    let (host, streams) = HostSession::connect(a, config).await.unwrap();
    while !session.granted(Capability::PushEvents) {
        grant.changed().await.unwrap();
    }
    (host, streams, session)
}

/// The server pushes `pushes` events of ≈ 2 KB while the host starts `turns` turns with
/// 20 KB ids (`inference/lifecycle`, §10.5): both pipes fill at once.
async fn both_ways(peer: PeerConfig, pushes: usize, turns: usize) {
    let server = Server::builder("burst", "1")
        .feature_set(
            "alerts",
            "Alerts",
            &[Capability::PushEvents, Capability::InferenceLifecycle],
        )
        .peer_config(peer.clone())
        .build()
        .unwrap();
    let (host, _streams, session) = connect(&server, peer, "inferenceLifecycle").await;
    let body = "x".repeat(2_000);
    let pushed: Vec<_> = (0..pushes)
        .map(|i| {
            let s = session.clone();
            let e = PushEvent::text("alerts", format!("{i}{body}")).event_id(format!("e{i}"));
            tokio::spawn(async move { s.push_event(e).await })
        })
        .collect();
    let started = tokio::spawn(async move {
        let big = "y".repeat(20_000);
        let mut kept = Vec::new();
        for i in 0..turns {
            kept.push(host.start_turn(&format!("{big}{i}"), "c", 0).await.unwrap());
        }
        kept
    });
    let pushed = tokio::time::timeout(GUARD, futures_util::future::join_all(pushed)).await;
    assert!(
        pushed.is_ok(),
        "the server's push events did not complete (deadlock)"
    );
    let started = tokio::time::timeout(GUARD, started).await;
    assert!(
        started.is_ok(),
        "the host's turns did not complete (deadlock)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_and_a_server_both_writing_hard_do_not_deadlock() {
    both_ways(PeerConfig::default(), 1000, 200).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_and_a_server_both_writing_hard_do_not_deadlock_on_small_queues() {
    both_ways(small(), 1000, 200).await
}

/// A server (from `builder`, with an `alerts` feature set) on two-frame queues whose host
/// completes the handshake granting `granted` and then reads nothing, while the server
/// application pushes 100 events of ≈ 4 KB: the host's peer and its `Incoming` (kept, never
/// read), the server's session and the pushes.
async fn pushing_to_a_host_that_stops_reading(
    builder: mcpl::server::ServerBuilder,
    granted: &[&str],
) -> (
    Peer,
    mcpl::peer::Incoming,
    mcpl::server::Session,
    Vec<
        tokio::task::JoinHandle<
            Result<mcpl::protocol::push::PushEventResult, mcpl::server::SendError>,
        >,
    >,
) {
    let server = builder
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .peer_config(small())
        .build()
        .unwrap();
    let (a, b) = mcpl::transport::memory::pair();
    let session = server.start(b);
    let (peer, incoming) = Peer::new(a, small());
    let init = json!({"protocolVersion": "2025-06-18",
                      "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}});
    peer.request_raw("initialize", Some(init)).await.unwrap();
    let policy = json!({ "effectiveCapabilities": granted });
    peer.request_raw("featureSets/update", Some(policy))
        .await
        .unwrap();
    let body = "x".repeat(4_000);
    let pushed = (0..100)
        .map(|i| {
            let s = session.clone();
            let e = PushEvent::text("alerts", format!("{i}{body}")).event_id(format!("e{i}"));
            tokio::spawn(async move { s.push_event(e).await })
        })
        .collect();
    (peer, incoming, session, pushed)
}

/// A host that completes the handshake and then reads nothing: the server application's
/// `push/event`s still end, at the latest at the connection's request timeout (30 s).
#[tokio::test(start_paused = true)]
async fn requests_to_a_host_that_stops_reading_still_end() {
    let builder = Server::builder("stuck", "1");
    let (_peer, _incoming, _session, pushed) =
        pushing_to_a_host_that_stops_reading(builder, &["pushEvents"]).await;
    let all = tokio::time::timeout(
        Duration::from_secs(300),
        futures_util::future::join_all(pushed),
    )
    .await;
    assert!(all.is_ok(), "push_event hung past the 30 s request timeout");
}

/// A host that completes the handshake and then reads nothing, while the server application
/// pushes: the server's writes wait for the host, its reading does not (issue #24: the
/// driver never waits for its own writes), so the host's `tools/call`s still reach their
/// handler.
#[tokio::test(start_paused = true)]
async fn a_host_that_stops_reading_is_still_read() {
    const CALLS: usize = 20;
    let (called_tx, mut called) = tokio::sync::mpsc::unbounded_channel::<()>();
    let builder = Server::builder("stuck", "1").tool(
        "touch",
        "Touch",
        json!({"type": "object"}),
        move |_s, _p| {
            let _ = called_tx.send(());
            async move { Ok(mcpl::protocol::handshake::ToolsCallResult::text("ok")) }
        },
    );
    let (peer, _incoming, _session, _pushed) =
        pushing_to_a_host_that_stops_reading(builder, &["pushEvents", "tools"]).await;
    // Everything runs until it blocks: the server's writer is full.
    tokio::time::sleep(Duration::from_millis(10)).await;
    for _ in 0..CALLS {
        let peer = peer.clone();
        tokio::spawn(async move {
            let _ = peer
                .request_raw(
                    "tools/call",
                    Some(json!({"name": "touch", "arguments": {}})),
                )
                .await;
        });
    }
    for i in 0..CALLS {
        tokio::time::timeout(Duration::from_secs(5), called.recv())
            .await
            .unwrap_or_else(|_| panic!("only {i} of {CALLS} tools/calls were read"))
            .expect("the handler is gone");
    }
}

/// Each side has more requests of the other's in flight than its in-flight bound while
/// neither reads fast enough: the server's application pushes events (each answered by
/// the host at once, but held while the server does not read), the host's application
/// calls a tool (answered by the server at once, held alike), both with ≈ 8 KB frames, on
/// default peer configurations. Answers held stay owed, so both peers reach their bound,
/// and past it each peer's reader answers `busy` itself: a reader that waited for its own
/// writer to do so stopped reading, and the two readers waited on each other for good (no
/// write timeout is set by default).
#[tokio::test(start_paused = true)]
async fn both_sides_past_their_in_flight_bound_do_not_deadlock() {
    const N: usize = 400;
    let peer = PeerConfig::default();
    let text = "t".repeat(8_000);
    let server = Server::builder("burst", "1")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .tool("big", "Big", json!({"type": "object"}), move |_s, _p| {
            let text = text.clone();
            async move { Ok(mcpl::protocol::handshake::ToolsCallResult::text(text)) }
        })
        .peer_config(peer.clone())
        .build()
        .unwrap();
    let (host, _streams, session) = connect(&server, peer, "tools").await;
    let body = "x".repeat(8_000);
    let pushed: Vec<_> = (0..N)
        .map(|i| {
            let s = session.clone();
            let e = PushEvent::text("alerts", format!("{i}{body}")).event_id(format!("e{i}"));
            tokio::spawn(
                async move { s.push_event(e).await.map(|_| ()).map_err(|e| e.to_string()) },
            )
        })
        .collect();
    let called: Vec<_> = (0..N)
        .map(|_| {
            let h = host.clone();
            let body = body.clone();
            tokio::spawn(async move {
                h.request_raw(
                    "tools/call",
                    json!({"name": "big", "arguments": {"b": body}}),
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            })
        })
        .collect();
    // Under the paused clock time moves only once every task waits: a deadlock reaches
    // the guard, long before any request's own timeout (30 s).
    let both = async {
        let pushed = futures_util::future::join_all(pushed).await;
        let called = futures_util::future::join_all(called).await;
        (pushed, called)
    };
    let (pushed, called) = tokio::time::timeout(GUARD, both)
        .await
        .expect("the host and the server wait on each other (deadlock)");
    // Each side did get past the other's bound (the case under test); every call ended,
    // answered or `busy`.
    for (side, results) in [("host", pushed), ("server", called)] {
        let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        let busy = results
            .iter()
            .filter(|r| r.as_ref().is_err_and(|e| e.contains("Busy")))
            .count();
        assert!(busy > 0, "the {side} never reached its in-flight bound");
        for r in results {
            if let Err(e) = r {
                assert!(e.contains("Busy"), "{e}");
            }
        }
    }
}

/// A plain MCP notification the server application sends straight through the peer
/// (`Session::send_mcp_notification`) after its pushes is written after them, although the
/// driver still held the pushes for a host that was not reading: it waits for them to
/// leave the driver's outbox instead of taking the writer's room first.
#[tokio::test(start_paused = true)]
async fn a_direct_send_is_not_written_ahead_of_what_the_driver_holds() {
    const PUSHES: usize = 100;
    let builder = Server::builder("ordered", "1");
    let (_peer, mut incoming, server_session, _pushed) =
        pushing_to_a_host_that_stops_reading(builder, &["pushEvents"]).await;
    // Everything runs until it blocks: the driver holds most pushes.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let s = server_session.clone();
    let note = tokio::spawn(async move {
        s.send_mcp_notification(
            "notifications/message",
            Some(json!({"level": "info", "data": "after"})),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The host reads now: every push comes before the notification.
    let mut pushes = 0;
    loop {
        let m = tokio::time::timeout(GUARD, incoming.recv())
            .await
            .expect("the host got nothing more")
            .expect("the connection ended");
        match m {
            mcpl::peer::IncomingMessage::Request(r) => {
                assert_eq!(r.method(), "push/event");
                pushes += 1;
                r.respond(json!({"accepted": true})).await.unwrap();
            }
            mcpl::peer::IncomingMessage::Notification(n) => {
                assert_eq!(n.method, "notifications/message");
                break;
            }
        }
    }
    assert_eq!(
        pushes, PUSHES,
        "the notification was written ahead of held pushes"
    );
    note.await.unwrap().unwrap();
}
