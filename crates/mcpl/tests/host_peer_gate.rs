//! §5.4, §6: a `HostSession`'s peer is not a way around its gate. With `channels.publish`
//! not granted, `HostSession::notify_raw("channels/publish", …)` was refused `NotGranted`
//! while `session.peer().notify_raw` of the same frame went out, and
//! `session.peer().notify_raw("featureSets/update", …)` told the server of a grant the host
//! never gave. Every public send method of a peer a `HostSession` owns now refuses MCPL
//! methods, naming the `HostSession` method to use; MCP methods still pass. A raw server
//! side reads every line, so what is checked is exactly what reached the wire.
#![cfg(feature = "runtime")]

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{Peer, PeerConfig, PeerError};
use mcpl::protocol::handshake::Ping;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

fn manifest() -> Value {
    json!({ "version": "0.5", "channels": { "register": true, "publish": true } })
}

/// A session granted `channels.register` only (so `channels.publish` is not granted) over a
/// raw server side, and a clone of the peer the caller kept before `connect_peer`.
async fn connected() -> (HostSession, Peer, Raw) {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let kept = peer.clone();
    let cfg = HostConfig {
        policy: vec!["channels.register".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = raw.recv().await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest()))}))
        .await;
    let mut policy = raw.recv().await;
    if policy["method"] == "notifications/initialized" {
        policy = raw.recv().await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (session, _streams) = connect.await.unwrap().unwrap();
    (session, kept, raw)
}

fn publish() -> Value {
    json!({ "channelId": "c1", "content": [{ "type": "text", "text": "hi" }] })
}

/// The refusal a peer owned by a session gives an MCPL method: the method and the
/// `HostSession` method to use instead.
fn assert_refused(r: Result<impl std::fmt::Debug, PeerError>, method: &str, instead: &str) {
    match r {
        Err(e @ PeerError::OwnedBySession { .. }) => {
            let text = e.to_string();
            assert!(text.contains(method), "{text}");
            assert!(text.contains(instead), "{text}");
        }
        other => panic!("{method} through the session's peer: {other:?}"),
    }
}

/// Sends a `ping` through the session and checks it is the next line on the wire: nothing
/// refused before it was written.
async fn next_line_is_ping(s: &HostSession, raw: &mut Raw) {
    let s2 = s.clone();
    let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
    let line = raw.recv().await;
    assert_eq!(
        line["method"], "ping",
        "something else reached the wire: {line}"
    );
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    ping.await.unwrap().unwrap();
}

#[tokio::test]
async fn s5_4_an_ungranted_publish_through_the_sessions_peer_is_refused_and_not_sent() {
    let (s, _kept, mut raw) = connected().await;
    // The session's own path refuses it (the reference behaviour).
    assert!(s.notify_raw("channels/publish", publish()).await.is_err());
    assert_refused(
        s.peer()
            .notify_raw("channels/publish", Some(publish()))
            .await,
        "channels/publish",
        "HostSession::notify_raw",
    );
    next_line_is_ping(&s, &mut raw).await;
}

#[tokio::test]
async fn s6_a_policy_the_host_never_gave_cannot_be_sent_through_the_sessions_peer() {
    let (s, _kept, mut raw) = connected().await;
    let policy = json!({ "effectiveCapabilities": ["channels.register", "channels.publish"] });
    assert_refused(
        s.peer()
            .notify_raw("featureSets/update", Some(policy.clone()))
            .await,
        "featureSets/update",
        "HostSession::set_policy",
    );
    assert_refused(
        s.peer()
            .request_raw("featureSets/update", Some(policy.clone()))
            .await,
        "featureSets/update",
        "HostSession::set_policy",
    );
    assert_refused(
        s.peer()
            .send_request("featureSets/update", Some(policy), |_| {})
            .await,
        "featureSets/update",
        "HostSession::set_policy",
    );
    next_line_is_ping(&s, &mut raw).await;
}

#[tokio::test]
async fn a_peer_clone_kept_before_connect_peer_is_refused_mcpl_methods_too() {
    let (s, kept, mut raw) = connected().await;
    assert_refused(
        kept.notify_raw("channels/publish", Some(publish())).await,
        "channels/publish",
        "HostSession::notify_raw",
    );
    assert_refused(
        kept.request_raw(
            "channels/open",
            Some(json!({ "type": "chat", "address": {} })),
        )
        .await,
        "channels/open",
        "HostSession::request_raw",
    );
    assert_refused(
        kept.request::<mcpl::protocol::feature_sets::FeatureSetsUpdate>(
            &serde_json::from_value(json!({ "enabled": ["channels.publish"] })).unwrap(),
        )
        .await,
        "featureSets/update",
        "HostSession::set_policy",
    );
    next_line_is_ping(&s, &mut raw).await;
}

#[tokio::test]
async fn mcp_methods_still_pass_through_the_sessions_peer() {
    let (s, kept, mut raw) = connected().await;
    let p = s.peer().clone();
    let ping = tokio::spawn(async move { p.request::<Ping>(&Default::default()).await });
    let line = raw.recv().await;
    assert_eq!(line["method"], "ping", "{line}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    ping.await.unwrap().unwrap();
    kept.notify_raw(
        "notifications/progress",
        Some(json!({ "progressToken": 1, "progress": 1 })),
    )
    .await
    .unwrap();
    let line = raw.recv().await;
    assert_eq!(line["method"], "notifications/progress", "{line}");
    // An extension method is the application's own, not MCPL's: it passes too.
    kept.notify_raw("x-app/hello", None).await.unwrap();
    let line = raw.recv().await;
    assert_eq!(line["method"], "x-app/hello", "{line}");
}

/// A peer no `HostSession` owns refuses nothing (the bare peer is MCPL-agnostic).
#[tokio::test]
async fn a_peer_no_session_owns_still_sends_mcpl_methods() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    peer.notify_raw("channels/publish", Some(publish()))
        .await
        .unwrap();
    let line = raw.recv().await;
    assert_eq!(line["method"], "channels/publish", "{line}");
}

/// §6.7: the surfaces MCPL removed (`featureSets/changed`, `scope/elevate`,
/// `context/afterInference`) are refused by the session's own send path; through the
/// session's peer they went out as if they were MCP.
#[tokio::test]
async fn removed_mcpl_methods_cannot_be_sent_through_the_sessions_peer() {
    let (s, _kept, mut raw) = connected().await;
    for (method, _) in mcpl::protocol::REMOVED_METHODS {
        assert!(s.notify_raw(method, json!({})).await.is_err(), "{method}");
        assert_refused(
            s.peer().notify_raw(method, Some(json!({}))).await,
            method,
            "HostSession::notify_raw",
        );
    }
    next_line_is_ping(&s, &mut raw).await;
}

/// The session answers every request the server sends it (its handlers, §4.1); an answer
/// sent by id through the session's peer is a second one for the same request (JSON-RPC:
/// one response per request) or an answer to a request never made, so it is refused and
/// nothing is written.
#[tokio::test]
async fn an_answer_by_id_through_the_sessions_peer_is_refused() {
    let (s, kept, mut raw) = connected().await;
    let id = mcpl::jsonrpc::RequestId::Number(77.into());
    for peer in [s.peer().clone(), kept] {
        assert!(matches!(
            peer.respond(id.clone(), json!({})).await,
            Err(PeerError::AnswerOwnedBySession { .. })
        ));
        assert!(matches!(
            peer.respond_error(id.clone(), mcpl::jsonrpc::ErrorObject::internal("x"))
                .await,
            Err(PeerError::AnswerOwnedBySession { .. })
        ));
    }
    next_line_is_ping(&s, &mut raw).await;
}
