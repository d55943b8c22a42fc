//! `host::Supervisor`: re-dialling a server whose connection ends, with a backoff, and a new
//! handshake and policy exchange for every connection (§5.3). Each connection is an in-memory
//! pair whose server end the test plays over a real JSON-RPC peer; the clock is paused, so
//! the backoff waits are exact and take no time.
#![cfg(feature = "runtime")]

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::host::{Backoff, HostConfig, Supervisor, SupervisorEvent};
use mcpl::peer::{CloseReason, Incoming, Peer, PeerConfig};
use mcpl::transport::{memory, Transport};
use serde_json::{json, Value};
use tokio::sync::mpsc;

#[path = "support/server_side.rs"]
mod server_side;
use server_side::next_request;

fn manifest(a: CapabilitySet) -> Value {
    let mut m = mcpl::capability::advertisement_to_value(a);
    m["version"] = json!("0.5");
    m["featureSets"] = json!({"alerts": {"description": "Alerts", "uses": ["pushEvents"]}});
    m
}

/// Plays the server of one connection up to an accepted initial receipt, advertising `a`.
/// Returns the server peer (to close it) and the capabilities the host's Request granted.
async fn serve(transport: Transport, a: CapabilitySet) -> (Peer, Incoming, Vec<String>) {
    let (server, mut incoming) = Peer::new(transport, PeerConfig::default());
    next_request(&mut incoming, "initialize")
        .await
        .respond(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": manifest(a)}},
            "serverInfo": {"name": "supervised", "version": "1"}
        }))
        .await
        .unwrap();
    let update = next_request(&mut incoming, "featureSets/update").await;
    let told = serde_json::from_value(
        update.request().params.as_ref().unwrap()["effectiveCapabilities"].clone(),
    )
    .unwrap();
    update.respond(json!({"accepted": true})).await.unwrap();
    (server, incoming, told)
}

type DialFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<Transport>> + Send>>;

/// A dialler whose server ends arrive on the returned channel; the first `refuse` dials fail.
/// The counter says how many dials were made.
struct Dialler {
    servers: mpsc::UnboundedReceiver<Transport>,
    dials: Arc<AtomicU32>,
}

fn dialler(refuse: u32) -> (impl Fn() -> DialFuture + Send + Sync + 'static, Dialler) {
    let (tx, servers) = mpsc::unbounded_channel();
    let dials = Arc::new(AtomicU32::new(0));
    let counter = dials.clone();
    let dial = move || {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let tx = tx.clone();
        Box::pin(async move {
            if n <= refuse {
                return Err(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
            }
            let (host, server) = memory::pair();
            tx.send(server)
                .map_err(|_| io::Error::other("test ended"))?;
            Ok(host)
        }) as DialFuture
    };
    (dial, Dialler { servers, dials })
}

fn config() -> HostConfig {
    HostConfig {
        policy: vec!["pushEvents".into()],
        ..HostConfig::default()
    }
}

fn backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
        reset_after: Duration::from_secs(10),
        max_attempts: None,
    }
}

/// A lost connection is re-dialled, and the new session runs its own handshake and policy
/// exchange: its grant is computed from the new advertisement alone (§5.3).
#[tokio::test(start_paused = true)]
async fn s5_3_a_lost_connection_is_redialled_into_a_fresh_session() {
    let (dial, Dialler { mut servers, dials }) = dialler(0);
    let mut sup = Supervisor::spawn(dial, config(), backoff());
    let push: CapabilitySet = [Capability::PushEvents].into_iter().collect();
    let (server1, _in1, told1) = serve(servers.recv().await.unwrap(), push).await;
    assert_eq!(told1, ["pushEvents"]);
    let first = match sup.next_event().await.unwrap() {
        SupervisorEvent::Connected {
            generation,
            session,
            ..
        } => {
            assert_eq!(generation, 1);
            session
        }
        other => panic!("unexpected {other:?}"),
    };
    assert!(first.grant().allows(Capability::PushEvents));
    assert!(sup.current().is_some());

    // Held past `reset_after`, then lost: re-dialled after the first wait.
    tokio::time::sleep(Duration::from_secs(11)).await;
    server1.close();
    match sup.next_event().await.unwrap() {
        SupervisorEvent::Disconnected { generation, reason } => {
            assert_eq!(generation, 1);
            assert_eq!(reason, CloseReason::Eof);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(sup.current().is_none());
    // The new server no longer advertises pushEvents: the new grant has none of the old.
    let (_server2, _in2, told2) = serve(servers.recv().await.unwrap(), CapabilitySet::EMPTY).await;
    assert!(told2.is_empty(), "{told2:?}");
    match sup.next_event().await.unwrap() {
        SupervisorEvent::Connected {
            generation,
            session,
            ..
        } => {
            assert_eq!(generation, 2);
            assert!(!session.grant().allows(Capability::PushEvents));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(dials.load(Ordering::SeqCst), 2);
}

/// Failed dials back off exponentially up to `max`; after a success the count starts again
/// only once a connection has held for `reset_after`.
#[tokio::test(start_paused = true)]
async fn failed_dials_back_off_exponentially_and_a_short_connection_counts_as_a_failure() {
    let (dial, Dialler { mut servers, .. }) = dialler(5);
    let mut sup = Supervisor::spawn(dial, config(), backoff());
    let mut waits = Vec::new();
    for attempt in 1..=5 {
        match sup.next_event().await.unwrap() {
            SupervisorEvent::Failed {
                attempt: a,
                error,
                retry_in,
            } => {
                assert_eq!(a, attempt);
                assert!(error.contains("refused"), "{error}");
                waits.push(retry_in.unwrap().as_millis());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(waits, [100, 200, 400, 800, 1000]);
    let (server, _in, _) = serve(servers.recv().await.unwrap(), CapabilitySet::EMPTY).await;
    assert!(matches!(
        sup.next_event().await,
        Some(SupervisorEvent::Connected { generation: 1, .. })
    ));
    // Dropped at once: a failure (the sixth in a row), not a fresh start.
    server.close();
    assert!(matches!(
        sup.next_event().await,
        Some(SupervisorEvent::Disconnected { generation: 1, .. })
    ));
    match sup.next_event().await.unwrap() {
        SupervisorEvent::Failed {
            attempt, retry_in, ..
        } => {
            assert_eq!(attempt, 6);
            assert_eq!(retry_in, Some(Duration::from_secs(1)));
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// With `max_attempts`, the supervisor gives up: the last failure says so and the event
/// stream ends.
#[tokio::test(start_paused = true)]
async fn max_attempts_gives_up_and_ends_the_events() {
    let (dial, Dialler { dials, .. }) = dialler(u32::MAX);
    let b = Backoff {
        max_attempts: Some(3),
        ..backoff()
    };
    let mut sup = Supervisor::spawn(dial, config(), b);
    let mut retries = Vec::new();
    while let Some(ev) = sup.next_event().await {
        match ev {
            SupervisorEvent::Failed { retry_in, .. } => retries.push(retry_in),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        retries,
        [
            Some(Duration::from_millis(100)),
            Some(Duration::from_millis(200)),
            None
        ]
    );
    assert_eq!(dials.load(Ordering::SeqCst), 3);
}

/// A handshake that fails (the server never answers `initialize` and closes) is a failed
/// attempt like a refused dial.
#[tokio::test(start_paused = true)]
async fn a_failed_handshake_is_a_failed_attempt() {
    let (dial, Dialler { mut servers, .. }) = dialler(0);
    let mut sup = Supervisor::spawn(dial, config(), backoff());
    let (server, mut incoming) = Peer::new(servers.recv().await.unwrap(), PeerConfig::default());
    let init = next_request(&mut incoming, "initialize").await;
    drop(init); // answered -32601 by the guard
    match sup.next_event().await.unwrap() {
        SupervisorEvent::Failed {
            attempt,
            error,
            retry_in,
        } => {
            assert_eq!(attempt, 1);
            assert!(error.starts_with("handshake"), "{error}");
            assert_eq!(retry_in, Some(Duration::from_millis(100)));
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(server);
    // The next attempt is a new connection.
    assert!(servers.recv().await.is_some());
}

/// Stopping the supervisor closes the session it holds, even while the application still
/// has a handle to it.
#[tokio::test(start_paused = true)]
async fn stopping_the_supervisor_closes_the_current_session() {
    let (dial, Dialler { mut servers, .. }) = dialler(0);
    let mut sup = Supervisor::spawn(dial, config(), backoff());
    let (server, _in, _) = serve(servers.recv().await.unwrap(), CapabilitySet::EMPTY).await;
    let Some(SupervisorEvent::Connected { session, .. }) = sup.next_event().await else {
        panic!("expected a session")
    };
    sup.stop();
    // Paused clock: the timeout fires only once nothing else can run, i.e. if nothing closed.
    let closed = tokio::time::timeout(Duration::from_secs(10), server.closed()).await;
    assert_eq!(closed, Ok(CloseReason::Eof));
    assert_eq!(session.peer().close_reason(), Some(CloseReason::Local));
}

/// Unread events are bounded: with the buffer full the supervisor waits instead of dialling
/// on (a server that refuses forever is dialled at most once per buffered event, plus one).
#[tokio::test(start_paused = true)]
async fn unread_events_are_bounded_and_hold_back_the_next_dial() {
    let (dial, Dialler { dials, .. }) = dialler(u32::MAX);
    let b = Backoff {
        max: Duration::from_millis(100),
        ..backoff()
    };
    let mut sup = Supervisor::spawn(dial, config(), b);
    // Long enough for hundreds of attempts at 100 ms each, were nothing holding them back.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let held = dials.load(Ordering::SeqCst);
    assert_eq!(held as usize, mcpl::host::EVENT_CAPACITY + 1);
    // Reading lets it go on.
    assert!(sup.next_event().await.is_some());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(dials.load(Ordering::SeqCst) > held);
}

/// A configuration or backoff that cannot work is the application's mistake, said once and
/// never dialled: the supervisor's first event is `Failed` naming each defect, with no
/// retry, and its events end. Before, an invalid `HostConfig` was dialled and refused at
/// every attempt, forever (the server dialled each time for a connect that could never
/// succeed), and a zero `Backoff::initial` (or `max`) re-dialled a refusing server with no
/// wait at all, a busy loop; a wait under `Backoff::MIN_WAIT` (1 ms passed) a storm. The
/// refusal's `attempt` is 0: nothing was dialled (it said 1).
#[tokio::test(start_paused = true)]
async fn an_unusable_config_or_backoff_is_refused_once_and_never_dialled() {
    let unusable_config = HostConfig {
        event_capacity: 0,
        ..config()
    };
    let zero_wait = Backoff {
        initial: Duration::ZERO,
        max: Duration::ZERO,
        ..backoff()
    };
    let cases = [
        (unusable_config, backoff(), "HostConfig.event_capacity"),
        (config(), zero_wait, "Backoff.initial"),
        // Under the floor: a reconnect storm against a failing server, if not a busy loop.
        (
            config(),
            Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(99),
                ..backoff()
            },
            "Backoff.MIN_WAIT",
        ),
        (
            config(),
            Backoff {
                max_attempts: Some(0),
                ..backoff()
            },
            "Backoff.max_attempts",
        ),
    ];
    for (cfg, b, named) in cases {
        let (dial, Dialler { dials, .. }) = dialler(u32::MAX);
        let mut sup = Supervisor::spawn(dial, cfg, b);
        match sup.next_event().await {
            Some(SupervisorEvent::Failed {
                attempt,
                error,
                retry_in,
            }) => {
                // Nothing was dialled: no attempt to count.
                assert_eq!((attempt, retry_in), (0, None), "{error}");
                assert!(error.contains(named), "{named}: {error}");
            }
            other => panic!("{named}: unexpected {other:?}"),
        }
        assert!(sup.next_event().await.is_none(), "{named}: the events end");
        assert_eq!(dials.load(Ordering::SeqCst), 0, "{named}: dialled");
    }
}
