//! §5.3 ordering at the end of the initial policy exchange: a server that sends a privileged
//! message right after its receipt (as `mcpl::reference` does with its greeting push) must
//! have it judged by the grant the receipt completed — the receipt is first on the wire.
//! Regression test of the host-side race recorded in RELIABILITY.md (load test: 1,000 of
//! 1,000 greetings refused before the fix, which orders inbound requests against the receipt
//! by wire position). It needs a multi-thread runtime to show; 50 rounds make it reliable.
//! The mirror case: a privileged request written just *before* the receipt is judged under
//! the state it arrived in (not ready: `-32002`), even when the host handles it only after
//! the receipt has made the session ready. Likewise for a later widening: a push for a feature
//! set that only the widened grant makes available is refused `-32001` when it was written
//! before the receipt.
#![cfg(feature = "runtime")]

use futures_util::FutureExt;
use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{Incoming, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/server_side.rs"]
mod server_side;
use server_side::next_request;

fn manifest() -> Value {
    json!({"version": "0.5", "pushEvents": true, "channels": {"register": true},
           "featureSets": {
               "alerts": {"description": "Alerts", "uses": ["pushEvents"]},
               "relay": {"description": "Relays channel traffic",
                         "uses": ["pushEvents", "channels.register"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_a_push_sent_right_after_the_receipt_is_admitted() {
    for _ in 0..50 {
        one_round().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_a_push_sent_right_before_the_receipt_is_refused() {
    for _ in 0..50 {
        one_round_push_first().await;
    }
}

fn push_params() -> Value {
    push_for("alerts", "e1")
}

fn push_for(feature_set: &str, event_id: &str) -> Value {
    json!({"featureSet": feature_set, "eventId": event_id, "timestamp": "2026-01-01T00:00:00Z",
           "payload": {"content": [{"type": "text", "text": "hi"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_a_push_for_a_set_only_the_receipt_enables_sent_before_it_is_refused() {
    for _ in 0..50 {
        one_round_widening().await;
    }
}

/// `relay` needs `channels.register` too: unavailable under the initial grant, available
/// once the widening's receipt is read.
async fn one_round_widening() {
    let (connect, server, mut incoming, update) = until_policy_request(&["pushEvents"]).await;
    update.respond(json!({"accepted": true})).await.unwrap();
    let (session, _streams) = connect.await.unwrap().unwrap();
    let s = session.clone();
    let widen = tokio::spawn(async move {
        s.set_policy(vec!["pushEvents".into(), "channels.register".into()])
            .await
    });
    let update = next_request(&mut incoming, "featureSets/update").await;
    let mut push = Box::pin(server.request_raw("push/event", Some(push_for("relay", "r1"))));
    let early = (&mut push).now_or_never();
    update.respond(json!({"accepted": true})).await.unwrap();
    let result = match early {
        Some(r) => r,
        None => push.await,
    };
    widen.await.unwrap().unwrap();
    let err = result.expect_err("a push read before the widening's receipt must be refused");
    assert_eq!(err.remote().map(|e| e.code), Some(-32001), "{err}");
    // Read after the receipt, the same feature set is available.
    let after = server
        .request_raw("push/event", Some(push_for("relay", "r2")))
        .await;
    assert_eq!(after, Ok(json!({"accepted": true})));
}

/// Connects a host with a `*` policy and answers `initialize`; returns the pending
/// `featureSets/update` for the test to answer.
async fn until_policy_request(
    policy: &[&str],
) -> (
    tokio::task::JoinHandle<Result<(HostSession, mcpl::host::HostStreams), mcpl::host::HostError>>,
    Peer,
    Incoming,
    IncomingRequest,
) {
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
            "serverInfo": {"name": "eager", "version": "1"}}))
        .await
        .unwrap();
    let update = next_request(&mut incoming, "featureSets/update").await;
    (connect, server, incoming, update)
}

async fn one_round_push_first() {
    let (connect, server, _incoming, update) = until_policy_request(&["*"]).await;
    // The push first: its first poll puts it on the wire (or in the writer's queue, which
    // keeps order); then the receipt, so the host reads the push before the receipt.
    // (On two worker threads the host may even answer within that first poll.)
    let mut push = Box::pin(server.request_raw("push/event", Some(push_params())));
    let early = (&mut push).now_or_never();
    update.respond(json!({"accepted": true})).await.unwrap();
    let result = match early {
        Some(r) => r,
        None => push.await,
    };
    let (session, _streams) = connect.await.unwrap().unwrap();
    assert!(session.is_ready());
    let err = result.expect_err("a push read before the receipt must be refused");
    assert_eq!(err.remote().map(|e| e.code), Some(-32002), "{err}");
}

async fn one_round() {
    let (connect, server, _incoming, update) = until_policy_request(&["*"]).await;
    // The receipt, then at once the push: both queued in this order on the wire.
    update.respond(json!({"accepted": true})).await.unwrap();
    let push = server.request_raw("push/event", Some(push_params()));
    let result = push.await;
    connect.await.unwrap().unwrap();
    assert_eq!(result, Ok(json!({"accepted": true})));
}

/// §5.4 / §6.7 for hook responses: an injection is judged by the grant in force when its
/// response was read. A widening whose receipt follows the response on the wire does not
/// apply to it, however soon the policy exchange applies it. Two worker threads, 50 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_4_a_hook_response_read_before_a_widening_is_judged_without_it() {
    for _ in 0..50 {
        hook_round().await;
    }
}

async fn hook_round() {
    let ((hp, hin), (server, mut incoming)) = Peer::memory_pair(PeerConfig::default());
    let cfg = HostConfig {
        policy: vec!["contextHooks.beforeInference.inject.afterUser".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    let manifest = json!({"version": "0.5",
        "contextHooks": {"beforeInference": {"inject": {"afterUser": true, "system": true}}},
        "featureSets": {"ctx": {"description": "Context",
            "uses": ["contextHooks.beforeInference.inject.afterUser",
                     "contextHooks.beforeInference.inject.system"]},
                        "late": {"description": "Late notes",
            "uses": ["contextHooks.beforeInference.inject.afterUser"]}}});
    next_request(&mut incoming, "initialize")
        .await
        .respond(json!({"protocolVersion": "2024-11-05",
            "capabilities": {"experimental": {"mcpl": manifest}},
            "serverInfo": {"name": "hooks", "version": "1"}}))
        .await
        .unwrap();
    next_request(&mut incoming, "featureSets/update")
        .await
        .respond(json!({"accepted": true}))
        .await
        .unwrap();
    let (session, _streams) = connect.await.unwrap().unwrap();
    let s = session.clone();
    let fan = tokio::spawn(async move {
        let params = json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                            "userMessage": null});
        mcpl::host::before_inference(&[&s], &params).await
    });
    let hook = next_request(&mut incoming, "context/beforeInference").await;
    let s = session.clone();
    let widen = tokio::spawn(async move {
        s.set_policy(vec![
            "contextHooks.beforeInference.inject.afterUser".into(),
            "contextHooks.beforeInference.inject.system".into(),
        ])
        .await
    });
    let update = next_request(&mut incoming, "featureSets/update").await;
    // The hook response first, then the receipt that widens: both on the wire in this order.
    hook.respond(json!({"featureSet": "ctx", "contextInjections": [
        {"namespace": "n", "position": "system", "content": "widened too soon"}]}))
        .await
        .unwrap();
    update.respond(json!({"accepted": true})).await.unwrap();
    widen.await.unwrap().unwrap();
    let out = fan.await.unwrap();
    assert!(out.system.is_empty(), "{out:?}");
    assert!(matches!(
        &out.rejected[0].reason,
        mcpl::policy::InjectionDenied::Denied(d)
            if d.capability == mcpl::capability::Capability::InjectSystem
    ));
    drop(server);
}
