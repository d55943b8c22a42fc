//! When `on_ready` and `on_first_ready` run (issue #21): `on_ready` after every accepted
//! policy Request of a connection (§5.3, §6.7), `on_first_ready` once per connection, before
//! `on_ready` on the first one. A scripted host (a real `Peer` over the in-memory transport)
//! sends real `featureSets/update` Requests.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::peer::{Peer, PeerConfig};
use mcpl::server::Server;
use serde_json::json;
use tokio::sync::mpsc;

#[tokio::test]
async fn on_first_ready_runs_once_per_connection_and_on_ready_after_every_accepted_request() {
    let (tx, mut rx) = mpsc::unbounded_channel::<&'static str>();
    let first_tx = tx.clone();
    let server = Server::builder("ready", "1.0.0")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .on_first_ready(move |_s| {
            let tx = first_tx.clone();
            async move {
                let _ = tx.send("first");
            }
        })
        .on_ready(move |_s| {
            let tx = tx.clone();
            async move {
                let _ = tx.send("every");
            }
        })
        .build()
        .unwrap();
    for _connection in 0..2 {
        let (host_t, server_t) = mcpl::transport::memory::pair();
        let _session = server.start(server_t);
        let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
        peer.request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
        )
        .await
        .unwrap();
        // A Notification narrows but is not a policy Request: nothing runs (§6.7).
        peer.notify_raw("featureSets/update", Some(json!({"disabled": ["alerts"]})))
            .await
            .unwrap();
        let mut seen = Vec::new();
        for grant in [json!(["pushEvents"]), json!([]), json!(["pushEvents"])] {
            let receipt = peer
                .request_raw(
                    "featureSets/update",
                    Some(json!({"effectiveCapabilities": grant})),
                )
                .await
                .unwrap();
            assert_eq!(receipt["accepted"], true, "{receipt}");
            // `on_first_ready` runs before `on_ready` in the same task, so once "every" has
            // arrived for this Request, any "first" of it has arrived before it.
            loop {
                let got = rx.recv().await.unwrap();
                seen.push(got);
                if got == "every" {
                    break;
                }
            }
        }
        assert_eq!(seen, ["first", "every", "every", "every"]);
        peer.close();
    }
}

/// What `on_ready` reads is the grant the policy Request just made (§5.3): the session's
/// state is published before the handler is started, whichever worker runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ready_sees_the_grant_it_runs_for() {
    let (tx, mut rx) = mpsc::unbounded_channel::<bool>();
    let server = Server::builder("ready", "1.0.0")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .on_ready(move |s| {
            let _ = tx.send(s.granted(Capability::PushEvents));
            async {}
        })
        .build()
        .unwrap();
    for _connection in 0..300 {
        let (host_t, server_t) = mcpl::transport::memory::pair();
        let _session = server.start(server_t);
        let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
        peer.request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
        )
        .await
        .unwrap();
        peer.request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": ["pushEvents"]})),
        )
        .await
        .unwrap();
        assert!(
            rx.recv().await.unwrap(),
            "on_ready ran before the grant was published"
        );
        peer.close();
    }
}
