//! The events a host holds for an application that has not taken them, measured in live heap
//! bytes (a counting global allocator, not RSS). This binary holds a single test so nothing
//! else allocates meanwhile.
//!
//! `HostConfig::max_event_bytes` bounds the events waiting for the application by their
//! weight (`HostEvent::weight`). The weight was the compact JSON length of what an event
//! holds, but an event holds parsed JSON, which costs far more than its text where the text
//! is dense in small objects: `{"a":0}` is 7 bytes of text and a B-tree node of about 630
//! bytes once parsed. A server pushing events whose `origin` (server-defined, §9.2) holds
//! 5,000 such objects (36 KB of text, 3 MB parsed each) had every one of 40 taken under a
//! 4 MiB bound: 120 MB held. The weight now estimates the heap a parsed value holds.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;

#[path = "support/live_bytes.rs"]
mod live_bytes;

const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
const PUSHES: usize = 40;
const OBJECTS_PER_PUSH: usize = 5_000;

/// §9.2: `origin` is server-defined; a push whose `origin` is dense in small objects.
fn dense_push(i: usize) -> Value {
    let objects: Vec<Value> = (0..OBJECTS_PER_PUSH).map(|_| json!({ "a": 0 })).collect();
    json!({ "featureSet": "alerts", "eventId": format!("e{i}"),
            "timestamp": "2026-01-01T00:00:00Z", "origin": { "o": objects },
            "payload": { "content": [{ "type": "text", "text": "hi" }] } })
}

#[test]
fn s9_events_held_for_the_application_are_bounded_in_heap_bytes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
        let cfg = HostConfig {
            policy: vec!["pushEvents".into()],
            max_event_bytes: MAX_EVENT_BYTES,
            policy_timeout: Duration::from_secs(30),
            ..HostConfig::default()
        };
        let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
        let manifest = json!({ "version": "0.5", "pushEvents": true,
            "featureSets": { "alerts": { "description": "Alerts", "uses": ["pushEvents"] } } });
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
        // The application holds its streams and never takes an event.
        let (_session, _streams) = connect.await.unwrap().unwrap();
        let before = live_bytes::live();
        let mut accepted = 0;
        for i in 0..PUSHES {
            // Made and dropped within the step: what stays is what the host holds.
            let r = server
                .request_raw("push/event", Some(dense_push(i)))
                .await
                .unwrap();
            if r["accepted"] == true {
                accepted += 1;
            } else {
                assert_eq!(r["reason"], "host_busy", "{r}");
            }
        }
        let held = live_bytes::live() - before;
        assert!(accepted >= 1, "the first event goes to the empty queue");
        // The bound, plus the one event an empty queue takes whatever its weight, plus
        // slack for the session's own bookkeeping.
        let bound = 3 * MAX_EVENT_BYTES as isize;
        assert!(
            held <= bound,
            "{accepted} of {PUSHES} pushes taken; the host holds {held} bytes more for an \
             application that took none, past {bound} (max_event_bytes {MAX_EVENT_BYTES})"
        );
    });
}
