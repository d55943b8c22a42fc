//! The heap a host allocates per tagged event from a server whose tag ontology it accepted
//! (§16.3, §16.5), counted by a counting global allocator (bytes, not a timing). This binary
//! holds a single test so nothing else allocates meanwhile.
//!
//! Expanding an event's `tags` under a standing acceptance cloned the whole parsed ontology
//! for every event: a server whose accepted ontology describes 4,000 tags made each
//! 200-byte `push/event` cost the host megabytes of allocation, so the work a host did per
//! event grew with the ontology, not with the event.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use mcpl::session::HostEvent;
use serde_json::{json, Map, Value};

#[path = "support/raw.rs"]
mod raw;

#[path = "support/live_bytes.rs"]
mod live_bytes;

const TAGS: usize = 4_000;
const PUSHES: usize = 20;
/// Far more than a small event costs to judge, far less than one copy of the ontology.
const PER_PUSH_BOUND: isize = 256 * 1024;

fn push(i: usize) -> Value {
    json!({ "featureSet": "alerts", "eventId": format!("e{i}"),
            "timestamp": "2026-01-01T00:00:00Z", "tags": ["acme:t0"],
            "payload": { "content": [{ "type": "text", "text": "hi" }] } })
}

#[test]
fn s16_5_a_tagged_event_under_an_accepted_ontology_does_not_copy_the_ontology() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
        let cfg = HostConfig {
            policy: vec!["pushEvents".into()],
            policy_timeout: Duration::from_secs(30),
            ..HostConfig::default()
        };
        let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
        let mut tags = Map::new();
        for i in 0..TAGS {
            tags.insert(
                format!("acme:t{i}"),
                json!({ "desc": "d".repeat(100), "implies": [format!("acme:u{i}")] }),
            );
        }
        let manifest = json!({ "version": "0.5", "pushEvents": true,
            "featureSets": { "alerts": { "description": "Alerts", "uses": ["pushEvents"],
                "tagOntology": { "tags": tags } } } });
        async fn next(incoming: &mut mcpl::peer::Incoming) -> Option<mcpl::peer::IncomingRequest> {
            match tokio::time::timeout(Duration::from_secs(10), incoming.recv()).await {
                Ok(Some(IncomingMessage::Request(r))) => Some(r),
                Ok(Some(IncomingMessage::Notification(_))) => None,
                other => panic!("the host went quiet: {:?}", other.is_ok()),
            }
        }
        let init = next(&mut incoming).await.expect("initialize");
        init.respond(raw::init_result(Some(manifest)))
            .await
            .unwrap();
        let policy = loop {
            if let Some(r) = next(&mut incoming).await {
                break r;
            }
        };
        assert_eq!(policy.method(), "featureSets/update");
        policy.respond(json!({ "accepted": true })).await.unwrap();
        let (session, mut streams) = connect.await.unwrap().unwrap();
        let (shown, _) = session.manifest().unwrap();
        let o = &shown["featureSets"]["alerts"]["tagOntology"];
        let digest = mcpl::manifest::digest::ontology_digest(o).unwrap();
        session
            .accept_reviewed_ontology("alerts", &digest)
            .await
            .unwrap();
        let before = live_bytes::total();
        for i in 0..PUSHES {
            let r = server
                .request_raw("push/event", Some(push(i)))
                .await
                .unwrap();
            assert_eq!(r["accepted"], true, "{r}");
            match streams.events.recv().await {
                Some(HostEvent::Push { tags, .. }) => {
                    assert!(tags.contains("acme:u0"), "the accepted edge applies");
                }
                other => panic!("not a push: {other:?}"),
            }
        }
        let spent = live_bytes::total() - before;
        let bound = PER_PUSH_BOUND * PUSHES as isize;
        assert!(
            spent <= bound,
            "{PUSHES} tagged pushes allocated {spent} bytes, past {bound}: the host copies \
             what does not grow with the event"
        );
    });
}
