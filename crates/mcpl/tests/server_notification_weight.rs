//! The notification handlers a `Server` runs at once hold their params within
//! `PeerConfig::max_in_flight_bytes` weighed by what the params hold parsed, not by their
//! text: params dense in small objects (`{"a":1}`, 7 bytes of text, a map node of ~640
//! bytes once parsed) let a host keep ~90 times the bound alive behind a slow handler.
//!
//! A counting global allocator measures the live heap: this binary holds a single test, so
//! nothing else allocates meanwhile. Over the in-memory transport (real newline framing).
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcpl::capability::Capability;
use mcpl::peer::{Peer, PeerConfig};
use mcpl::server::Server;
use mcpl::transport::memory;
use serde_json::{json, Value};

#[path = "support/live_bytes.rs"]
mod live_bytes;

/// `{"a":1}` this many times: 16 KB of text, about 1.4 MB parsed.
const OBJECTS: usize = 2_000;

#[tokio::test]
async fn notification_handlers_hold_their_params_within_the_bound_by_their_parsed_weight() {
    let alive = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let server = {
        let alive = alive.clone();
        let gate = gate.clone();
        Server::builder("weights", "1.0.0")
            .feature_set(
                "chat",
                "Chat channels",
                &[Capability::ChannelsTyping, Capability::ChannelsRegister],
            )
            .on_channels_typing(move |_s, p| {
                alive.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                // The handler holds its params until it ends, as a slow connector would.
                async move {
                    let _p = p;
                    let _ = gate.acquire().await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    let (host_t, server_t) = memory::pair();
    let (peer, mut incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                    "clientInfo": {"name": "dense-host", "version": "0"}})),
    )
    .await
    .unwrap();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let receipt = peer
        .request_raw(
            "featureSets/update",
            Some(json!({ "effectiveCapabilities": ["channels.typing", "channels.register"] })),
        )
        .await
        .unwrap();
    assert_eq!(receipt["accepted"], true, "{receipt}");
    // The server holds channel `c` (§14.6: `channels/typing` names a registered channel).
    let s = session.clone();
    let c = mcpl::protocol::channels::ChannelDescriptor::new("c", "chat");
    let register = tokio::spawn(async move { s.channels_register(vec![c]).await });
    let Some(mcpl::peer::IncomingMessage::Request(req)) = incoming.recv().await else {
        panic!("expected channels/register")
    };
    req.respond(json!({"results": [{"id": "c", "accepted": true}]}))
        .await
        .unwrap();
    register.await.unwrap().unwrap();
    let mut diags = session.diagnostics();

    let pad = Value::Array(vec![json!({"a": 1}); OBJECTS]);
    let baseline = live_bytes::live();
    live_bytes::reset_peak(baseline);
    let sent = 100;
    for _ in 0..sent {
        let params = json!({"channelId": "c", "pad": pad.clone()});
        peer.notify_raw("channels/typing", Some(params))
            .await
            .unwrap();
    }
    // The server reads in order: once `ping` is answered, every notification was handled
    // or dropped.
    peer.request_raw("ping", None).await.unwrap();
    let held = live_bytes::live() - baseline;
    let peak = live_bytes::peak() - baseline;
    let running = alive.load(Ordering::SeqCst);
    let mut dropped = 0;
    while let Ok(d) = diags.try_recv() {
        if d.code() == "notification_dropped" {
            dropped += 1;
        }
    }
    eprintln!("{running} handlers alive, {dropped} dropped: {held} bytes held, peak {peak}");
    // `max_in_flight_bytes` (32 MiB), plus the queues' and the pipe's share in passing.
    assert!(
        held < 40 << 20,
        "{running} handlers alive held {held} bytes past the 32 MiB bound"
    );
    assert!(running >= 1);
    assert_eq!(running + dropped, sent);
    gate.add_permits(sent);
}
