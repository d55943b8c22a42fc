//! The reference server over a real connection (TCP, real JSON lines), driven by a scripted
//! host.

use mcpl::peer::{Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::tcp;
use serde_json::{json, Value};

async fn next_request(incoming: &mut Incoming) -> mcpl::peer::IncomingRequest {
    match incoming.recv().await {
        Some(IncomingMessage::Request(r)) => r,
        other => panic!("expected a request, got {other:?}"),
    }
}

async fn call_tool(peer: &Peer, name: &str, args: Value) -> Value {
    peer.request_raw("tools/call", Some(json!({"name": name, "arguments": args})))
        .await
        .unwrap()
}

#[tokio::test]
async fn reference_server_full_session_over_tcp() {
    let listener = tcp::Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let srv = mcpl::reference::server();
    let serve = tokio::spawn(async move {
        let (t, _) = listener.accept().await.unwrap();
        srv.serve(t).await
    });
    let (peer, mut incoming) = Peer::new(tcp::connect(addr).await.unwrap(), PeerConfig::default());

    let init = peer
        .request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
        )
        .await
        .unwrap();
    let m = &init["capabilities"]["experimental"]["mcpl"];
    assert_eq!(m["version"], "0.5");
    assert!(m["revision"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(
        m["featureSets"]["ref.events"]["tagOntology"]["coreTags"],
        json!(["chat:broadcast"])
    );
    assert_eq!(
        m["contextHooks"]["beforeInference"]["inject"]["beforeUser"],
        true
    );
    assert!(m["contextHooks"]["beforeInference"]
        .get("observe")
        .is_none());
    assert!(init["capabilities"]["tools"].is_object());
    let initial_revision = m["revision"].as_str().unwrap().to_owned();

    // Strict §5.3: privileged behaviour is refused before the policy Request.
    let e = peer
        .request_raw(
            "tools/call",
            Some(json!({"name": "echo", "arguments": {"text": "x"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.remote().unwrap().code, -32002);

    let all = [
        "tools",
        "pushEvents",
        "modelInfo",
        "inferenceLifecycle",
        "contextHooks.beforeInference.inject.beforeUser",
        "channels.register",
        "channels.publish",
        "channels.incoming",
    ];
    let receipt = peer
        .request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": all})),
        )
        .await
        .unwrap();
    assert_eq!(
        receipt,
        json!({"accepted": true, "unavailableFeatures": []})
    );

    // After the receipt: channels registered, then one tagged push event.
    let reg = next_request(&mut incoming).await;
    assert_eq!(reg.method(), "channels/register");
    let p = reg.request().params.clone().unwrap();
    assert_eq!(p["channels"][0]["id"], "ref:lobby");
    assert_eq!(p["channels"][0]["type"], "reference-chat");
    reg.respond(json!({"results": [{"id": "ref:lobby", "accepted": true}]}))
        .await
        .unwrap();
    let ev = next_request(&mut incoming).await;
    assert_eq!(ev.method(), "push/event");
    let p = ev.request().params.clone().unwrap();
    assert_eq!(p["featureSet"], "ref.events");
    assert_eq!(p["eventId"], "evt_ref_greeting");
    assert_eq!(p["tags"], json!(["ref:greeting", "chat:broadcast"]));
    assert_eq!(p["payload"]["content"][0]["type"], "text");
    ev.respond(json!({"accepted": true})).await.unwrap();

    // beforeUser injection without observe.
    let r = peer
        .request_raw(
            "context/beforeInference",
            Some(
                json!({"inferenceId": "inf_1", "conversationId": "conv", "turnIndex": 3,
                        "userMessage": null}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r["featureSet"], "ref.hints");
    assert_eq!(r["contextInjections"][0]["position"], "beforeUser");

    // Lifecycle consumer: a duplicate terminal is counted once.
    for phase in ["started", "completed", "completed"] {
        peer.notify_raw(
            "inference/lifecycle",
            Some(json!({"inferenceId": "inf_1", "phase": phase})),
        )
        .await
        .unwrap();
    }
    let turns = call_tool(&peer, "turns", json!({})).await;
    let counts: Value =
        serde_json::from_str(turns["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        (counts["started"].clone(), counts["ended"].clone()),
        (json!(1), json!(1))
    );

    // channels/publish is the delivery path.
    let r = peer
        .request_raw(
            "channels/publish",
            Some(json!({"channelId": "ref:lobby", "content": [{"type": "text", "text": "hi"}]})),
        )
        .await
        .unwrap();
    assert_eq!(r["delivered"], true);
    let e = peer
        .request_raw(
            "channels/publish",
            Some(json!({"channelId": "elsewhere", "content": "x"})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.remote().unwrap().code, -32023);

    // add_topic changes the manifest: one mcpl/manifestChanged, and mcpl/manifest agrees.
    let out = call_tool(&peer, "add_topic", json!({"name": "weather"})).await;
    let Some(IncomingMessage::Notification(n)) = incoming.recv().await else {
        panic!("expected mcpl/manifestChanged")
    };
    assert_eq!(n.method, "mcpl/manifestChanged");
    let announced = n.params.unwrap();
    assert_ne!(announced["revision"], initial_revision.as_str());
    assert_eq!(announced["domains"], json!(["featureSets"]));
    assert!(out["content"][0]["text"]
        .as_str()
        .unwrap()
        .ends_with(announced["revision"].as_str().unwrap()));
    let manifest = peer
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(manifest["revision"], announced["revision"]);
    assert!(manifest["featureSets"]["topic.weather"].is_object());

    // schedule_event sends a push event tagged ref:scheduled.
    let peer2 = peer.clone();
    let call = tokio::spawn(async move {
        call_tool(&peer2, "schedule_event", json!({"text": "rain at noon"})).await
    });
    let ev = next_request(&mut incoming).await;
    assert_eq!(ev.method(), "push/event");
    let p = ev.request().params.clone().unwrap();
    assert_eq!(p["tags"], json!(["ref:scheduled"]));
    ev.respond(json!({"accepted": true})).await.unwrap();
    assert!(call.await.unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("scheduled evt_"));

    // say: channels/incoming from the in-memory surface.
    let peer3 = peer.clone();
    let call =
        tokio::spawn(async move { call_tool(&peer3, "say", json!({"text": "hello"})).await });
    let inc = next_request(&mut incoming).await;
    assert_eq!(inc.method(), "channels/incoming");
    let p = inc.request().params.clone().unwrap();
    assert_eq!(p["messages"][0]["channelId"], "ref:lobby");
    inc.respond(
        json!({"results": [{"messageId": p["messages"][0]["messageId"], "accepted": true}]}),
    )
    .await
    .unwrap();
    assert!(call.await.unwrap()["isError"].is_null());

    peer.close();
    serve.await.unwrap();
}

#[tokio::test]
async fn reference_server_degrades_and_stays_quiet_without_grants() {
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let srv = mcpl::reference::server();
    let _session = srv.start(server_t);
    let (peer, mut incoming) = Peer::new(host_t, PeerConfig::default());
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {}}}})),
    )
    .await
    .unwrap();
    let receipt = peer
        .request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": ["tools"]})),
        )
        .await
        .unwrap();
    assert_eq!(receipt["mode"], "degraded");
    assert_eq!(receipt["unavailableFeatures"].as_array().unwrap().len(), 5);
    // model/info is not granted: the tool reports the local refusal, nothing is sent.
    let r = call_tool(&peer, "model", json!({})).await;
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("modelInfo"));
    peer.close();
    // Nothing server-initiated arrived (no register, no push event).
    if let Some(msg) = incoming.recv().await {
        panic!("unexpected {}", msg.method());
    }
}

/// Our host against our reference server (§14.2, §14.3, §14.5): the lobby descriptor the
/// server registers is accepted, and a message the server delivers on it reaches the host
/// application; `channels/list` answers the same channel from both ends.
#[tokio::test]
async fn host_session_and_reference_server_agree_on_channels() {
    use mcpl::host::{HostConfig, HostEvent, HostSession};
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let srv = mcpl::reference::server();
    tokio::spawn(async move { srv.serve(server_t).await });
    let cfg = HostConfig {
        policy: vec!["*".into(), "channels.*".into()],
        ..HostConfig::default()
    };
    let (host, mut streams) = HostSession::connect(host_t, cfg).await.unwrap();
    // The server registers its lobby, then pushes its greeting.
    loop {
        match streams.events.recv().await.expect("event stream ended") {
            HostEvent::Push { event_id, .. } if event_id == "evt_ref_greeting" => break,
            _ => {}
        }
    }
    assert_eq!(host.channels(), ["ref:lobby"]);
    let listed = host.request_raw("channels/list", json!({})).await.unwrap();
    assert_eq!(listed["channels"][0]["id"], "ref:lobby");
    assert_eq!(listed["channels"][0]["type"], "reference-chat");
    let said = host
        .request_raw(
            "tools/call",
            json!({"name": "say", "arguments": {"text": "hello"}}),
        )
        .await
        .unwrap();
    assert!(
        said["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"accepted\":true"),
        "{said}"
    );
    loop {
        if let HostEvent::ChannelMessage {
            channel_id,
            message,
            ..
        } = streams.events.recv().await.expect("event stream ended")
        {
            assert_eq!(channel_id, "ref:lobby");
            assert_eq!(message["content"][0]["text"], "hello");
            break;
        }
    }
}
