//! The policy receipt a host keeps for one connection (§6.7), measured in live heap bytes (a
//! counting global allocator, not RSS). This binary holds a single test so nothing else
//! allocates meanwhile.
//!
//! A receipt is testimony the host keeps as the connection's last receipt (and in the copy
//! its getters read), for the connection's life. Nothing bounded it but the message: a
//! receipt whose free-form `notes` held 20,000 small objects (160 KB of text, 13 MB parsed)
//! was kept twice, 26 MB, and a 16 MiB one could hold some 128 MiB parsed, twice. A receipt
//! whose parsed JSON takes more than `session::rules::MAX_RECEIPT_BYTES` is now unusable,
//! refused before it is read (fail closed, as any unusable receipt).
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{IncomingMessage, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;

#[path = "support/live_bytes.rs"]
mod live_bytes;

const NOTES: usize = 20_000;

async fn next(incoming: &mut mcpl::peer::Incoming) -> Option<IncomingRequest> {
    match tokio::time::timeout(Duration::from_secs(10), incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => Some(r),
        Ok(Some(IncomingMessage::Notification(_))) => None,
        other => panic!("the host went quiet: {:?}", other.is_ok()),
    }
}

async fn next_request(incoming: &mut mcpl::peer::Incoming) -> IncomingRequest {
    loop {
        if let Some(r) = next(incoming).await {
            return r;
        }
    }
}

/// Connects a session whose initial receipt carries `notes` small objects as its `notes`;
/// returns what the host holds after it (the session held), the receipt's own parsed size,
/// whether the receipt was taken (else the reduction was told, §6.7), and the session.
async fn with_receipt(notes: usize) -> (isize, isize, bool, HostSession) {
    let ((hp, hin), (_server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
    let cfg = HostConfig {
        policy: vec!["pushEvents".into()],
        policy_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    };
    let before = live_bytes::live();
    let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    let manifest = json!({ "version": "0.5", "pushEvents": true });
    let init = next_request(&mut incoming).await;
    init.respond(raw::init_result(Some(manifest)))
        .await
        .unwrap();
    let policy = next_request(&mut incoming).await;
    assert_eq!(policy.method(), "featureSets/update");
    // Made and dropped within the step: what stays is what the host keeps.
    let made = live_bytes::live();
    let mut answer = json!({ "accepted": true });
    answer["notes"] = Value::Array((0..notes).map(|_| json!({ "a": 0 })).collect());
    let size = live_bytes::live() - made;
    policy.respond(answer).await.unwrap();
    // An unusable receipt ends in MCP-only, and the reduction is told by a second
    // Request, which `connect` waits for; an accepted one connects at once.
    let mut connect = connect;
    let mut taken = true;
    let (session, streams) = tokio::select! {
        done = &mut connect => done.unwrap().unwrap(),
        r = next_request(&mut incoming) => {
            assert_eq!(r.method(), "featureSets/update");
            r.respond(json!({ "accepted": true })).await.unwrap();
            taken = false;
            connect.await.unwrap().unwrap()
        }
    };
    drop(streams);
    let held = live_bytes::live() - before;
    (held, size, taken, session)
}

#[test]
fn s6_7_the_receipt_a_host_keeps_is_bounded_in_heap_bytes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Past the bound: unusable, nothing of it kept.
        let (held, size, taken, session) = with_receipt(NOTES).await;
        let bound = 2 * 1024 * 1024;
        assert!(
            held <= bound,
            "the host holds {held} bytes for a connection whose receipt ({size} bytes parsed) \
             carried {NOTES} notes (mode {:?}, taken: {taken}), past {bound}",
            session.mode()
        );
        drop(session);
        // Within it: taken, and kept once. The state machine and the copy the session's
        // getters read share it: they held a copy each, and the driver compared the two
        // by value after every message the server sent.
        let (held, size, taken, session) = with_receipt(4_000).await;
        assert!(taken, "a receipt within the bound is taken");
        assert!(session.last_receipt().is_some());
        let bound = size + size / 4 + 512 * 1024;
        assert!(
            held <= bound,
            "the host holds {held} bytes for a connection whose receipt is {size} bytes \
             parsed, past {bound}: it is kept more than once"
        );
    });
}
