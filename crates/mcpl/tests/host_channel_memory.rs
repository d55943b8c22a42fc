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
#![cfg(feature = "runtime")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{IncomingMessage, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

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

#[test]
fn s14_5_channels_held_by_a_connection_are_bounded_in_heap_bytes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
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
        let (session, _streams) = connect.await.unwrap().unwrap();
        let plain =
            json!({ "channels": [{ "id": "plain", "type": "chat", "direction": "inbound" }] });
        let r = server
            .request_raw("channels/register", Some(plain))
            .await
            .unwrap();
        assert_eq!(r["results"][0]["accepted"], true, "{r}");
        let before = LIVE.load(Ordering::Relaxed);
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
        let held = LIVE.load(Ordering::Relaxed) - before;
        assert!(session.channels().contains(&"plain".to_owned()));
        // The table, the copy the session's getters read, and slack.
        let bound = (2 * MAX_CHANNELS * MAX_DESCRIPTOR_BYTES + 256 * 1024) as isize;
        assert!(
            held <= bound,
            "{accepted} of {MAX_CHANNELS} dense descriptors accepted; the host holds {held} \
             bytes more, past {bound} (max_channels × max_descriptor_bytes = {})",
            MAX_CHANNELS * MAX_DESCRIPTOR_BYTES
        );
    });
}
