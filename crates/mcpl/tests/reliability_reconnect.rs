//! Reconnect (§5.3): a host that re-dials a server over TCP runs the policy exchange again from
//! scratch. The new session starts with an empty grant until its own receipt — privileged
//! server messages before it are refused `-32002` — and its grant is computed from the new
//! connection's advertisement alone: nothing of the old session's grant survives.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig};
use mcpl::transport::tcp;
use serde_json::{json, Value};

async fn next_request(incoming: &mut Incoming, method: &str) -> IncomingRequest {
    loop {
        match incoming.recv().await.expect("connection ended") {
            IncomingMessage::Request(r) if r.method() == method => return r,
            IncomingMessage::Request(r) => panic!("expected {method}, got {}", r.method()),
            IncomingMessage::Notification(n) if n.method == "notifications/initialized" => {}
            IncomingMessage::Notification(n) => panic!("unexpected notification {}", n.method),
        }
    }
}

fn manifest(a: CapabilitySet) -> Value {
    let mut m = mcpl::capability::advertisement_to_value(a);
    m["version"] = json!("0.5");
    m["featureSets"] = if a.contains(Capability::PushEvents) {
        json!({"alerts": {"description": "Alerts", "uses": ["pushEvents"]}})
    } else {
        json!({})
    };
    m
}

fn push(id: &str) -> Value {
    json!({"featureSet": "alerts", "eventId": id, "timestamp": "2026-01-01T00:00:00Z",
           "payload": {"content": [{"type": "text", "text": "hi"}]}})
}

fn effective_of(req: &IncomingRequest) -> Vec<String> {
    serde_json::from_value(req.request().params.as_ref().unwrap()["effectiveCapabilities"].clone())
        .unwrap()
}

async fn code_of(server: &Peer, method: &str, params: Value) -> Result<Value, i64> {
    server
        .request_raw(method, Some(params))
        .await
        .map_err(|e| e.remote().map(|e| e.code).unwrap_or(0))
}

/// Accepts one TCP connection and answers `initialize` advertising `advertised`; returns the
/// server peer with the initial policy Request still unanswered.
async fn accept_and_initialize(
    listener: &tcp::Listener,
    advertised: CapabilitySet,
) -> (Peer, Incoming, IncomingRequest) {
    let (transport, _) = listener.accept().await.unwrap();
    let (server, mut incoming) = Peer::new(transport, PeerConfig::default());
    let init = next_request(&mut incoming, "initialize").await;
    init.respond(json!({
        "protocolVersion": "2024-11-05",
        "capabilities": {"experimental": {"mcpl": manifest(advertised)}},
        "serverInfo": {"name": "redial", "version": "1"}
    }))
    .await
    .unwrap();
    let update = next_request(&mut incoming, "featureSets/update").await;
    (server, incoming, update)
}

#[tokio::test]
async fn s5_3_a_redialled_session_starts_from_an_empty_grant_until_its_own_receipt() {
    let listener = tcp::Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = HostConfig {
        policy: vec![
            "*".into(),
            "channels.*".into(),
            "contextHooks.beforeInference.observe".into(),
        ],
        policy_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    };
    let everything: CapabilitySet = [
        Capability::PushEvents,
        Capability::ChannelsRegister,
        Capability::ChannelsIncoming,
        Capability::Observe,
    ]
    .into_iter()
    .collect();

    // First session: everything advertised and granted.
    let dial = tokio::spawn(HostSession::connect(
        tcp::connect(addr).await.unwrap(),
        cfg.clone(),
    ));
    let (server1, _in1, update1) = accept_and_initialize(&listener, everything).await;
    assert_eq!(effective_of(&update1).len(), 4);
    update1.respond(json!({"accepted": true})).await.unwrap();
    let (first, _streams1) = dial.await.unwrap().unwrap();
    assert_eq!(first.grant().capabilities(), everything);
    assert_eq!(
        code_of(&server1, "push/event", push("a")).await,
        Ok(json!({"accepted": true}))
    );

    // The connection drops; the host re-dials the same address.
    server1.close();
    first.peer().closed().await;
    let dial = tokio::spawn(HostSession::connect(
        tcp::connect(addr).await.unwrap(),
        cfg.clone(),
    ));
    // This time the server advertises channels only.
    let channels_only: CapabilitySet = [Capability::ChannelsRegister, Capability::ChannelsIncoming]
        .into_iter()
        .collect();
    let (server2, _in2, update2) = accept_and_initialize(&listener, channels_only).await;

    // Before its own receipt the new session grants nothing, whatever the old one held.
    assert_eq!(
        code_of(&server2, "push/event", push("b")).await,
        Err(-32002)
    );
    assert_eq!(
        code_of(
            &server2,
            "channels/register",
            json!({"channels": [{"id": "c", "type": "chat", "direction": "bidirectional"}]})
        )
        .await,
        Err(-32002)
    );
    // The Request carries the grant computed from this connection's advertisement alone.
    assert_eq!(
        effective_of(&update2),
        vec!["channels.incoming", "channels.register"]
    );
    update2.respond(json!({"accepted": true})).await.unwrap();
    let (second, _streams2) = dial.await.unwrap().unwrap();
    assert_eq!(second.grant().capabilities(), channels_only);
    // pushEvents from the first session did not survive.
    assert_eq!(
        code_of(&server2, "push/event", push("c")).await,
        Err(-32002)
    );
    let r = code_of(
        &server2,
        "channels/register",
        json!({"channels": [{"id": "c", "type": "chat", "direction": "bidirectional"}]}),
    )
    .await
    .unwrap();
    assert_eq!(r["results"][0]["accepted"], json!(true));
    // The old session object is closed and grants nothing new.
    assert!(first.peer().close_reason().is_some());
}

#[tokio::test]
async fn s5_3_a_redialled_session_whose_receipt_never_comes_keeps_nothing_privileged() {
    let listener = tcp::Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = HostConfig {
        policy: vec!["*".into()],
        // Real time over real sockets: the unanswered Request gives up after this.
        policy_timeout: Duration::from_millis(300),
        ..HostConfig::default()
    };
    let push_only = CapabilitySet::EMPTY.with(Capability::PushEvents);

    let dial = tokio::spawn(HostSession::connect(
        tcp::connect(addr).await.unwrap(),
        cfg.clone(),
    ));
    let (server1, _in1, update1) = accept_and_initialize(&listener, push_only).await;
    update1.respond(json!({"accepted": true})).await.unwrap();
    let (first, _s1) = dial.await.unwrap().unwrap();
    assert!(first.grant().allows(Capability::PushEvents));
    server1.close();
    first.peer().closed().await;

    let dial = tokio::spawn(HostSession::connect(
        tcp::connect(addr).await.unwrap(),
        cfg.clone(),
    ));
    let (server2, _in2, update2) = accept_and_initialize(&listener, push_only).await;
    // The server never answers the new policy Request: MCP-only, no MCPL capability.
    let _held = update2.into_id();
    let (second, _s2) = dial.await.unwrap().unwrap();
    assert!(!second.grant().allows(Capability::PushEvents));
    assert_eq!(
        code_of(&server2, "push/event", push("x")).await,
        Err(-32002)
    );
}
