//! The channels a host holds for one connection, measured in live heap bytes (a counting
//! global allocator, not RSS). This binary holds a single test so nothing else allocates
//! meanwhile.
//!
//! `HostConfig::max_channels` (4,096) and `max_descriptor_bytes` (4 KiB of compact JSON per
//! descriptor) were meant to bound what a connection's channels hold to their product
//! (16 MiB). But the table holds each descriptor parsed, and a descriptor within 4 KiB of
//! text dense in small objects (`{"a":0}`: 7 bytes of text, about 630 parsed, in a
//! server-defined `metadata`, §14.2) holds some 300 KB: 4,096 of them 1.3 GB. The channels'
//! parsed heap is now bounded by that product as a whole: a descriptor that would take the
//! table past it is rejected item-wise (`channel_limit`).
//!
//! The driver also publishes a copy of the table for the session's getters whenever a
//! message changes it: a deep copy of every descriptor, so a server holding a full table
//! and sending a stream of small `channels/changed` updates (an update storm, §14.3) made
//! the host copy the whole table per message. The table now shares its descriptors between
//! copies, so a change costs what the message carries, not what the table holds.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{IncomingMessage, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;

#[path = "support/live_bytes.rs"]
mod live_bytes;

const MAX_CHANNELS: usize = 64;
const MAX_DESCRIPTOR_BYTES: usize = 4096;

/// §14.2: a descriptor within `MAX_DESCRIPTOR_BYTES` of compact JSON whose server-defined
/// `metadata` is dense in small objects.
fn dense_descriptor(i: usize) -> Value {
    let objects: Vec<Value> = (0..450).map(|_| json!({ "a": 0 })).collect();
    let d = json!({ "id": format!("c{i}"), "type": "chat", "direction": "inbound",
                    "metadata": { "o": objects } });
    assert!(serde_json::to_string(&d).unwrap().len() <= MAX_DESCRIPTOR_BYTES);
    d
}

async fn next(incoming: &mut mcpl::peer::Incoming) -> Option<IncomingRequest> {
    match tokio::time::timeout(Duration::from_secs(10), incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => Some(r),
        Ok(Some(IncomingMessage::Notification(_))) => None,
        other => panic!("the host went quiet: {:?}", other.is_ok()),
    }
}

/// A session granted `channels.register` under the channel bounds of this file, and the
/// server's side of it.
async fn connected() -> (
    HostSession,
    mcpl::host::HostStreams,
    Peer,
    mcpl::peer::Incoming,
) {
    let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
    let cfg = HostConfig {
        policy: vec!["channels.register".into()],
        max_channels: MAX_CHANNELS,
        max_descriptor_bytes: MAX_DESCRIPTOR_BYTES,
        policy_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    let manifest = json!({ "version": "0.5", "channels": { "register": true } });
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
    let (session, streams) = connect.await.unwrap().unwrap();
    (session, streams, server, incoming)
}

#[test]
fn s14_5_channels_held_by_a_connection_are_bounded_in_heap_bytes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (session, _streams, server, _incoming) = connected().await;
        let plain =
            json!({ "channels": [{ "id": "plain", "type": "chat", "direction": "inbound" }] });
        let r = server
            .request_raw("channels/register", Some(plain))
            .await
            .unwrap();
        assert_eq!(r["results"][0]["accepted"], true, "{r}");
        let before = live_bytes::live();
        let mut accepted = 0;
        for i in 0..MAX_CHANNELS {
            // Made and dropped within the step: what stays is what the host holds.
            let params = json!({ "channels": [dense_descriptor(i)] });
            let r = server
                .request_raw("channels/register", Some(params))
                .await
                .unwrap();
            if r["results"][0]["accepted"] == true {
                accepted += 1;
            } else {
                assert_eq!(r["results"][0]["reason"], "channel_limit", "{r}");
            }
        }
        let held = live_bytes::live() - before;
        assert!(session.channels().contains(&"plain".to_owned()));
        // The table, the copy the session's getters read, and slack.
        let bound = (2 * MAX_CHANNELS * MAX_DESCRIPTOR_BYTES + 256 * 1024) as isize;
        assert!(
            held <= bound,
            "{accepted} of {MAX_CHANNELS} dense descriptors accepted; the host holds {held} \
             bytes more, past {bound} (max_channels × max_descriptor_bytes = {})",
            MAX_CHANNELS * MAX_DESCRIPTOR_BYTES
        );
        drop((session, server));
        update_storm().await;
    });
}

/// §14.3 `channels/changed`: a full table of channels whose descriptors carry long labels,
/// then a stream of small updates to one of them. What the host allocates per update is
/// bounded by the update, not by the table (which was copied whole per message).
async fn update_storm() {
    const UPDATES: usize = 200;
    let (session, _streams, server, _incoming) = connected().await;
    let label = "l".repeat(3000);
    for i in 0..MAX_CHANNELS - 1 {
        let d = json!({ "id": format!("c{i}"), "type": "chat", "direction": "inbound",
                        "label": label });
        let r = server
            .request_raw("channels/register", Some(json!({ "channels": [d] })))
            .await
            .unwrap();
        assert_eq!(r["results"][0]["accepted"], true, "channel {i}: {r}");
    }
    let before = live_bytes::total();
    for i in 0..UPDATES {
        let d = json!({ "id": "c0", "type": "chat", "direction": "inbound",
                        "label": format!("{}", i % 2) });
        let r = server
            .request_raw("channels/changed", Some(json!({ "updated": [d] })))
            .await
            .unwrap();
        assert_eq!(r["results"][0]["accepted"], true, "update {i}: {r}");
    }
    let allocated = live_bytes::total() - before;
    assert_eq!(session.channels().len(), MAX_CHANNELS - 1);
    let per_update = 64 * 1024;
    assert!(
        allocated <= (UPDATES * per_update) as isize,
        "{UPDATES} small updates to a table of {} channels allocated {allocated} bytes, past \
         {per_update} per update",
        MAX_CHANNELS - 1
    );
}
