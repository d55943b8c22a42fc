//! A hostile server against a real `HostSession`: random methods (host-bound, host → server,
//! unknown) with random params, as requests and notifications. Never a panic; every request
//! answered exactly once; the session stays up; nothing is delivered to the application whose
//! capability is not granted.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::host::{HostConfig, HostEvent, HostSession};
use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const METHODS: [&str; 16] = [
    "push/event",
    "channels/register",
    "channels/changed",
    "channels/incoming",
    "channels/list",
    "inference/request",
    "model/info",
    "mcpl/manifestChanged",
    "featureSets/update",
    "context/beforeInference",
    "inference/lifecycle",
    "tools/call",
    "ping",
    "notifications/tools/list_changed",
    "no/such/method",
    "",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,8}".prop_map(Value::String),
        Just(json!("alerts")),
        Just(json!("ch0")),
    ];
    let key = prop_oneof![
        Just("featureSet"),
        Just("eventId"),
        Just("timestamp"),
        Just("payload"),
        Just("content"),
        Just("channels"),
        Just("messages"),
        Just("channelId"),
        Just("messageId"),
        Just("id"),
        Just("type"),
        Just("added"),
        Just("removed"),
        Just("updated"),
        Just("tags"),
        Just("revision"),
        Just("stream"),
        Just("direction"),
    ]
    .prop_map(str::to_owned);
    leaf.prop_recursive(4, 40, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn manifest(a: CapabilitySet) -> Value {
    let mut m = mcpl::capability::advertisement_to_value(a);
    m["version"] = json!("0.5");
    m["featureSets"] = json!({"alerts": {"description": "Alerts", "uses": ["pushEvents"]}});
    m
}

#[path = "support/server_side.rs"]
mod server_side;
use server_side::next_request;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hostile_server_messages_never_crash_and_are_each_answered(
        policy_mask in any::<u8>(),
        msgs in prop::collection::vec((0..METHODS.len(), value(), any::<bool>()), 1..30),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async move {
            let all: CapabilitySet = [
                Capability::PushEvents, Capability::ChannelsRegister, Capability::ChannelsIncoming,
                Capability::InferenceRequest, Capability::ModelInfo, Capability::Observe,
            ].into_iter().collect();
            let policy: CapabilitySet = all.iter().enumerate()
                .filter(|(i, _)| policy_mask & (1 << i) != 0).map(|(_, c)| c).collect();
            let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
            let cfg = HostConfig {
                policy: policy.sorted_paths().into_iter().map(str::to_owned).collect(),
                policy_timeout: Duration::from_secs(5),
                manifest_timeout: Duration::from_secs(5),
                // Served, so granted (`HostConfig::request_handler`, §5.4).
                request_handler: Some(std::sync::Arc::new(|_m: &str, _p: Value| {
                    Box::pin(async {
                        Ok(json!({"content": "x", "model": "m", "finishReason": "end_turn"}))
                    })
                })),
                ..HostConfig::default()
            };
            let task = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
            let init = next_request(&mut incoming, "initialize").await;
            init.respond(json!({"protocolVersion": "2024-11-05",
                "capabilities": {"experimental": {"mcpl": manifest(all)}},
                "serverInfo": {"name": "hostile", "version": "1"}})).await.unwrap();
            next_request(&mut incoming, "featureSets/update").await
                .respond(json!({"accepted": true})).await.unwrap();
            let (session, mut streams) = task.await.unwrap().unwrap();
            prop_assert_eq!(session.grant().capabilities(), policy);
            // Whatever the host asks of the hostile server (manifest fetches…) gets junk back.
            tokio::spawn(async move {
                while let Some(m) = incoming.recv().await {
                    if let IncomingMessage::Request(r) = m {
                        let _ = r.respond(json!({"junk": [1, 2, 3]})).await;
                    }
                }
            });
            for (i, params, as_request) in &msgs {
                let method = METHODS[*i];
                // A `Peer` sends no scalar params (JSON-RPC 2.0 §4.2, refused before the
                // wire); how a host's peer answers them as text is `peer.rs`'s.
                let params = &match mcpl::jsonrpc::params_shape(params) {
                    Ok(()) => params.clone(),
                    Err(_) => json!([params]),
                };
                if *as_request {
                    // Exactly one answer (the peer matches it to this id) and never a hang.
                    let r = tokio::time::timeout(
                        Duration::from_secs(60),
                        server.request_raw(method, Some(params.clone())),
                    ).await;
                    let r = r.expect("the host did not answer");
                    if let Err(e) = &r {
                        prop_assert!(e.remote().is_some(), "{method}: {e}");
                    }
                } else {
                    server.notify_raw(method, Some(params.clone())).await.unwrap();
                }
            }
            // A final ping proves the session is alive and processed everything before it.
            prop_assert_eq!(server.request_raw("ping", None).await, Ok(json!({})));
            while let Ok(e) = streams.events.try_recv() {
                match e {
                    HostEvent::Push { .. } => prop_assert!(policy.contains(Capability::PushEvents)),
                    HostEvent::ChannelMessage { .. } => {
                        prop_assert!(policy.contains(Capability::ChannelsIncoming))
                    }
                    _ => {}
                }
            }
            prop_assert!(session.peer().close_reason().is_none());
            prop_assert!(session.grant().capabilities().is_subset(policy));
            Ok(())
        })?;
    }
}
