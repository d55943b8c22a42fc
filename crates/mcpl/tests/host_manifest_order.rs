//! The host session applies an `mcpl/manifest` answer where it is read, as `session::HostState`
//! does (§17.5, §6.7): found by an audit of the two against each other.
#![cfg(feature = "runtime")]

use futures_util::FutureExt;
use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{Incoming, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/server_side.rs"]
mod server_side;
use server_side::next_request;

fn manifest() -> Value {
    json!({"version": "0.5", "pushEvents": true, "channels": {"register": true},
           "featureSets": {"alerts": {"description": "Alerts", "uses": ["pushEvents"]}}})
}

fn push(event_id: &str) -> Value {
    json!({"featureSet": "alerts", "eventId": event_id, "timestamp": "2026-01-01T00:00:00Z",
           "payload": {"content": [{"type": "text", "text": "hi"}]}})
}

async fn connected(policy: &[&str]) -> (HostSession, mcpl::host::HostStreams, Peer, Incoming) {
    let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
    let cfg = HostConfig {
        policy: policy.iter().map(|p| p.to_string()).collect(),
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    next_request(&mut incoming, "initialize")
        .await
        .respond(json!({"protocolVersion": "2024-11-05",
            "capabilities": {"experimental": {"mcpl": manifest()}},
            "serverInfo": {"name": "revoker", "version": "1"}}))
        .await
        .unwrap();
    next_request(&mut incoming, "featureSets/update")
        .await
        .respond(json!({"accepted": true}))
        .await
        .unwrap();
    let (s, streams) = connect.await.unwrap().unwrap();
    (s, streams, server, incoming)
}

/// §17.5 step 3 / §6.7: a fetched manifest that removes `pushEvents` revokes it host-first.
/// A push the server writes right behind that fetch answer is read after the revocation, so
/// `HostState` (wire order) refuses it `-32002`; `HostSession` must decide the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_5_a_push_right_behind_a_revoking_fetch_answer_is_refused() {
    let mut admitted = 0;
    for round in 0..50 {
        let (s, _streams, server, mut incoming) = connected(&["pushEvents"]).await;
        let s2 = s.clone();
        let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
        let fetch = next_request(&mut incoming, "mcpl/manifest").await;
        let smaller = json!({"version": "0.5", "channels": {"register": true}, "featureSets": {}});
        // The fetch answer, then at once the push: in this order on the wire.
        fetch.respond(smaller).await.unwrap();
        let mut p = Box::pin(server.request_raw("push/event", Some(push(&format!("e{round}")))));
        let early = (&mut p).now_or_never();
        let r = match early {
            Some(r) => r,
            None => p.await,
        };
        // The revocation is told by Request (§6.7): answered, so the refresh ends.
        next_request(&mut incoming, "featureSets/update")
            .await
            .respond(json!({"accepted": true}))
            .await
            .unwrap();
        refresh.await.unwrap().unwrap();
        if r.is_ok() {
            admitted += 1;
        }
        assert!(!s.grant().allows(mcpl::capability::Capability::PushEvents));
    }
    assert_eq!(
        admitted, 0,
        "pushes admitted after the revoking fetch answer was read"
    );
}
