//! Issue #24: `HostSession::request::<M>` of a method naming no channel is gated by its type
//! and sent without a `Value` of its params. Every refusal must still be the one the
//! `Value` way gave (`HostSession::request_raw` of the same params), word for word.
#![cfg(feature = "runtime")]

use mcpl::host::{HostConfig, HostSession};
use mcpl::peer::PeerConfig;
use mcpl::protocol::handshake::{ToolsCall, ToolsCallParams};
use serde_json::{json, Map, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer_with, Raw};

/// A session past its policy exchange over a raw server side, `policy` granted.
async fn connected(policy: &[&str]) -> (HostSession, Raw) {
    let (peer, incoming, mut raw) = raw_peer_with(PeerConfig::default(), 1 << 16);
    let cfg = HostConfig {
        policy: policy.iter().map(|p| p.to_string()).collect(),
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = raw.recv().await;
    assert_eq!(init["method"], "initialize");
    let manifest = json!({ "version": "0.5", "channels": { "register": true } });
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest))}))
        .await;
    let mut policy = raw.recv().await;
    if policy["method"] == "notifications/initialized" {
        policy = raw.recv().await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (session, _streams) = connect.await.unwrap().unwrap();
    (session, raw)
}

/// JSON-RPC 2.0 §4.2 and the reader's nesting rule: params nested past what a reader reads
/// are refused before anything is sent, by the typed call as by the raw one, with the same
/// error, whether the method is granted or not (the shape is judged first).
#[tokio::test]
async fn typed_params_nested_too_deep_are_refused_as_the_raw_call_refuses_them() {
    for policy in [&["channels.register", "tools"][..], &["channels.register"]] {
        too_deep_refused_as_raw(policy).await;
    }
}

async fn too_deep_refused_as_raw(policy: &[&str]) {
    let (session, mut raw) = connected(policy).await;
    assert_eq!(
        session.grant().allows(mcpl::capability::Capability::Tools),
        policy.contains(&"tools"),
        "{policy:?}"
    );
    let mut deep = json!(1);
    for _ in 0..300 {
        deep = json!([deep]);
    }
    let mut arguments = Map::new();
    arguments.insert("deep".into(), deep);
    let params = ToolsCallParams {
        name: "echo".into(),
        arguments: Some(arguments),
        state: None,
        checkpoint: None,
        extra: Default::default(),
    };
    let by_value = session
        .request_raw("tools/call", serde_json::to_value(&params).unwrap())
        .await
        .expect_err("the raw call refuses it");
    let typed = session
        .request::<ToolsCall>(&params)
        .await
        .expect_err("the typed call refuses it");
    assert_eq!(format!("{typed:?}"), format!("{by_value:?}"), "{policy:?}");
    // Nothing was sent: the next line is the next request.
    let s = session.clone();
    let ping = tokio::spawn(async move { s.request_raw("ping", Value::Null).await });
    let line = raw.recv().await;
    assert_eq!(line["method"], "ping", "{line}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    ping.await.unwrap().unwrap();
}

/// §5.4: the sessions gate the typed methods by name. An application's own `Method` type
/// that spells one of those names (its requirement left at the default, none) is gated as
/// that method: `tools/call` without `tools` granted is refused unsent, as the raw call is.
#[tokio::test]
async fn a_method_type_of_the_applications_under_a_gated_name_is_gated_by_the_name() {
    struct MyCall;
    impl mcpl::protocol::Method for MyCall {
        const NAME: &'static str = "tools/call";
        const KIND: mcpl::protocol::Kind = mcpl::protocol::Kind::Request;
        const DIRECTION: mcpl::protocol::Direction = mcpl::protocol::Direction::HostToServer;
        type Params = Value;
        type Result = Value;
    }
    let (session, mut raw) = connected(&["channels.register"]).await;
    let params = json!({"name": "echo", "arguments": {}});
    let by_value = session
        .request_raw("tools/call", params.clone())
        .await
        .expect_err("the raw call is refused");
    let s = session.clone();
    let typed = tokio::spawn(async move { s.request::<MyCall>(&params).await });
    let s = session.clone();
    let ping = tokio::spawn(async move {
        // After the typed call has been decided: its refusal, or its line, comes first.
        s.request_raw("ping", Value::Null).await
    });
    let line = raw.recv().await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    if line["method"] == "ping" {
        ping.await.unwrap().unwrap();
    }
    let typed = typed.await.unwrap();
    assert_eq!(line["method"], "ping", "sent ungated: {line}");
    assert_eq!(
        format!("{:?}", typed.expect_err("the typed call is refused")),
        format!("{by_value:?}")
    );
}
