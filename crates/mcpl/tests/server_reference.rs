//! The reference server over a real connection (TCP, real JSON lines), driven by a scripted
//! host.
#![cfg(feature = "runtime")]

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
        "channels.lifecycle",
        "inferenceRequest",
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
    assert!(
        r["contextInjections"][0]["content"]
            .as_str()
            .is_some_and(|t| t.contains("turn 3 of conv.")),
        "{r}"
    );
    // The hint quotes the host's conversationId cut to `HINT_CONVERSATION_ID_BYTES`, its
    // length said: a 64 KiB id does not come back whole in every answer.
    let long = "c".repeat(64 * 1024);
    let r = peer
        .request_raw(
            "context/beforeInference",
            Some(
                json!({"inferenceId": "inf_2", "conversationId": long, "turnIndex": 4,
                        "userMessage": null}),
            ),
        )
        .await
        .unwrap();
    let hint = r["contextInjections"][0]["content"].as_str().unwrap_or("");
    assert!(
        hint.len() < 2 * mcpl::reference::HINT_CONVERSATION_ID_BYTES
            && hint.contains("(65536 bytes)"),
        "{} bytes: {}",
        hint.len(),
        hint.get(..200).unwrap_or(hint)
    );

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
    // Every set but ref.tools and ref.notes (which use only tools).
    assert_eq!(receipt["unavailableFeatures"].as_array().unwrap().len(), 6);
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

/// A host peer over a fresh reference server, initialized and granted everything the
/// server advertises; the server's own requests (register, greeting) are left unanswered.
async fn granted_peer() -> (Peer, mcpl::peer::Incoming) {
    let (host_t, server_t) = mcpl::transport::memory::pair();
    tokio::spawn(mcpl::reference::serve(server_t));
    let (peer, incoming) = Peer::new(host_t, PeerConfig::default());
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
    )
    .await
    .unwrap();
    let receipt = peer
        .request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": ["*", "channels.*"]})),
        )
        .await
        .unwrap();
    assert_eq!(receipt["accepted"], true, "{receipt}");
    (peer, incoming)
}

fn tool_json(out: &Value) -> Value {
    serde_json::from_str(out["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// §8.4–§8.7: `note` returns checkpoints; `state/rollback` to one drops the later notes and
/// checkpoints; a checkpoint never issued, or pruned by the rollback, is `-32005`.
#[tokio::test]
async fn reference_notes_roll_back_to_their_checkpoints() {
    let (peer, _incoming) = granted_peer().await;
    let a = call_tool(&peer, "note", json!({"text": "a"})).await;
    assert_eq!(a["state"]["checkpoint"], "chk_ref_1");
    assert_eq!(a["state"]["parent"], Value::Null);
    let b = call_tool(&peer, "note", json!({"text": "b"})).await;
    assert_eq!(b["state"]["checkpoint"], "chk_ref_2");
    assert_eq!(b["state"]["parent"], "chk_ref_1");
    assert_eq!(b["state"]["data"]["notes"], json!(["a", "b"]));
    let rollback = |checkpoint: &str| {
        peer.request_raw(
            "state/rollback",
            Some(json!({"featureSet": "ref.notes", "checkpoint": checkpoint})),
        )
    };
    let r = rollback("chk_ref_1").await.unwrap();
    assert_eq!(r, json!({"checkpoint": "chk_ref_1", "success": true}));
    assert_eq!(
        tool_json(&call_tool(&peer, "turns", json!({})).await)["notes"],
        json!(["a"])
    );
    for gone in ["chk_ref_2", "chk_never_issued"] {
        let e = rollback(gone).await.unwrap_err();
        let e = e.remote().unwrap();
        assert_eq!(e.code, -32005, "{gone}");
        assert_eq!(e.data, Some(json!({"checkpoint": gone})));
    }
}

/// §14.3, §14.6: `channels.lifecycle` is advertised; the lobby opens and closes, and any
/// other channel is `-32023`.
#[tokio::test]
async fn reference_channels_open_and_close() {
    let (peer, _incoming) = granted_peer().await;
    let opened = peer
        .request_raw("channels/open", Some(json!({"type": "reference-chat"})))
        .await
        .unwrap();
    assert_eq!(opened["channel"]["id"], "ref:lobby");
    let e = peer
        .request_raw("channels/open", Some(json!({"type": "discord"})))
        .await
        .unwrap_err();
    assert_eq!(e.remote().unwrap().code, -32602);
    let closed = peer
        .request_raw("channels/close", Some(json!({"channelId": "ref:lobby"})))
        .await
        .unwrap();
    assert_eq!(closed["closed"], true);
    let e = peer
        .request_raw("channels/close", Some(json!({"channelId": "ref:nowhere"})))
        .await
        .unwrap_err();
    assert_eq!(e.remote().unwrap().code, -32023);
}

/// `ask` sends a non-streaming `inference/request` under `ref.ask` (§11.2) and returns the
/// host's answer.
#[tokio::test]
async fn reference_ask_sends_an_inference_request() {
    let (peer, mut incoming) = granted_peer().await;
    let asker = peer.clone();
    let call = tokio::spawn(async move { call_tool(&asker, "ask", json!({"text": "why?"})).await });
    let req = loop {
        let r = next_request(&mut incoming).await;
        if r.method() == "inference/request" {
            break r;
        }
    };
    let p = req.request().params.clone().unwrap();
    assert_eq!(p["featureSet"], "ref.ask");
    assert_eq!(p["messages"], json!([{"role": "user", "content": "why?"}]));
    req.respond(
        json!({"role": "assistant", "content": "because", "model": "m",
                       "finishReason": "end_turn"}),
    )
    .await
    .unwrap();
    let out = call.await.unwrap();
    assert!(out["isError"].is_null(), "{out}");
    assert_eq!(tool_json(&out)["content"], "because");
}

/// Issue #20: what a client makes the reference server keep is bounded (topics, published
/// texts, notes), whatever it sends, and a topic name is a valid identifier (§17.2).
#[tokio::test]
async fn reference_state_is_bounded() {
    let (peer, mut incoming) = granted_peer().await;
    // The lobby is the connection's once the host accepts its registration (§14.5).
    let register = loop {
        let r = next_request(&mut incoming).await;
        if r.method() == "channels/register" {
            break r;
        }
    };
    register
        .respond(json!({"results": [{"id": "ref:lobby", "accepted": true}]}))
        .await
        .unwrap();
    let mut added = 0;
    for i in 0..mcpl::reference::MAX_TOPICS + 4 {
        let out = call_tool(&peer, "add_topic", json!({"name": format!("t{i}")})).await;
        if out["isError"].is_null() {
            added += 1;
        }
    }
    assert_eq!(added, mcpl::reference::MAX_TOPICS);
    let out = call_tool(&peer, "add_topic", json!({"name": "Not An Identifier"})).await;
    assert_eq!(out["isError"], true);
    let manifest = peer
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    let topics = manifest["featureSets"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("topic."))
        .count();
    assert_eq!(topics, mcpl::reference::MAX_TOPICS);
    let long = "x".repeat(mcpl::reference::KEPT_CHARS * 2);
    for _ in 0..mcpl::reference::KEPT_PUBLISHED + 4 {
        peer.request_raw(
            "channels/publish",
            Some(json!({"channelId": "ref:lobby", "content": [{"type": "text", "text": long}]})),
        )
        .await
        .unwrap();
    }
    for _ in 0..mcpl::reference::MAX_NOTES + 1 {
        call_tool(&peer, "note", json!({"text": long})).await;
    }
    let state = tool_json(&call_tool(&peer, "turns", json!({})).await);
    assert_eq!(state["publishedCount"], mcpl::reference::KEPT_PUBLISHED + 4);
    let kept = state["published"].as_array().unwrap();
    assert_eq!(kept.len(), mcpl::reference::KEPT_PUBLISHED);
    assert!(kept
        .iter()
        .all(|t| t.as_str().unwrap().len() == mcpl::reference::KEPT_CHARS));
    assert_eq!(
        state["notes"].as_array().unwrap().len(),
        mcpl::reference::MAX_NOTES
    );
}

/// Issue #20: over one listener (one shared server), a connection's topics, notes,
/// published messages and turns are its own while both are open (§17: a connection's
/// manifest changes only by what that connection does; §8.7: a checkpoint is the issuing
/// connection's): nothing one client does reaches the other, and the next client starts
/// fresh.
#[tokio::test]
async fn reference_connections_do_not_share_state() {
    let listener = tcp::Listener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mcpl::reference::serve_tcp(listener));
    let connect = || async {
        let (peer, incoming) = Peer::new(tcp::connect(addr).await.unwrap(), PeerConfig::default());
        let init = peer
            .request_raw(
                "initialize",
                Some(json!({"protocolVersion": "2025-06-18",
                            "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
            )
            .await
            .unwrap();
        peer.request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": ["*", "channels.*"]})),
        )
        .await
        .unwrap();
        let revision = init["capabilities"]["experimental"]["mcpl"]["revision"].clone();
        (peer, incoming, revision)
    };
    // The server's own requests (register, greeting) are answered; the first
    // manifestChanged a connection hears is sent on.
    let host = |mut incoming: mcpl::peer::Incoming| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        tokio::spawn(async move {
            while let Some(m) = incoming.recv().await {
                match m {
                    IncomingMessage::Request(r) => {
                        let reply = match r.method() {
                            "channels/register" => {
                                json!({"results": [{"id": "ref:lobby", "accepted": true}]})
                            }
                            _ => json!({"accepted": true}),
                        };
                        let _ = r.respond(reply).await;
                    }
                    IncomingMessage::Notification(n) => {
                        let _ = tx.send(json!({"method": n.method, "params": n.params}));
                    }
                }
            }
        });
        rx
    };
    let (first, in1, fresh) = connect().await;
    let mut heard1 = host(in1);
    let (second, in2, revision2) = connect().await;
    let mut heard2 = host(in2);
    assert_eq!(revision2, fresh);

    let added = call_tool(&first, "add_topic", json!({"name": "weather"})).await;
    assert!(added["isError"].is_null(), "{added}");
    let announced = heard1.recv().await.unwrap();
    assert_eq!(announced["method"], "mcpl/manifestChanged");
    assert_ne!(announced["params"]["revision"], fresh);
    let m1 = first
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    assert!(m1["featureSets"]["topic.weather"].is_object());
    let m2 = second
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(m2["revision"], fresh);
    assert!(m2["featureSets"].get("topic.weather").is_none());

    let note = call_tool(&first, "note", json!({"text": "mine"})).await;
    let checkpoint = note["state"]["checkpoint"].as_str().unwrap().to_owned();
    let e = second
        .request_raw(
            "state/rollback",
            Some(json!({"featureSet": "ref.notes", "checkpoint": checkpoint})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.remote().unwrap().code, -32005);
    first
        .request_raw(
            "channels/publish",
            Some(json!({"channelId": "ref:lobby", "content": "kept?"})),
        )
        .await
        .unwrap();
    for phase in ["started", "completed"] {
        first
            .notify_raw(
                "inference/lifecycle",
                Some(json!({"inferenceId": "inf_1", "phase": phase})),
            )
            .await
            .unwrap();
    }
    let state1 = tool_json(&call_tool(&first, "turns", json!({})).await);
    assert_eq!(
        (
            &state1["started"],
            &state1["publishedCount"],
            &state1["notes"]
        ),
        (&json!(1), &json!(1), &json!(["mine"]))
    );
    let state2 = tool_json(&call_tool(&second, "turns", json!({})).await);
    assert_eq!(
        (
            &state2["started"],
            &state2["publishedCount"],
            &state2["notes"]
        ),
        (&json!(0), &json!(0), &json!([]))
    );
    assert!(
        heard2.try_recv().is_err(),
        "the second connection heard of the first's topic"
    );

    let (third, _in3, revision3) = connect().await;
    assert_eq!(revision3, fresh);
    first.close();
    second.close();
    third.close();
}

/// A tool whose `inputSchema` requires a string argument, called without it (no
/// `arguments`, `null`, `{}`) or with another type, is the host's mistake: answered
/// `-32602` naming the argument, the tool not run (no note kept, no event pushed, no
/// message delivered, no inference asked). Before, each one ran with a made-up value (an
/// empty text, "Hello", "scheduled event"), absorbing the mistake.
#[tokio::test]
async fn reference_tools_refuse_a_missing_or_mistyped_required_argument() {
    let (peer, _incoming) = granted_peer().await;
    let tools = peer.request_raw("tools/list", None).await.unwrap();
    let mut required = Vec::new();
    for t in tools["tools"].as_array().unwrap() {
        for arg in t["inputSchema"]["required"]
            .as_array()
            .into_iter()
            .flatten()
        {
            required.push((
                t["name"].as_str().unwrap().to_owned(),
                arg.as_str().unwrap().to_owned(),
            ));
        }
    }
    assert!(required.len() >= 6, "{required:?}");
    for (tool, arg) in &required {
        for params in [
            json!({"name": tool}),
            json!({"name": tool, "arguments": null}),
            json!({"name": tool, "arguments": {}}),
            json!({"name": tool, "arguments": {arg.as_str(): 5}}),
            json!({"name": tool, "arguments": {arg.as_str(): null}}),
        ] {
            let e = peer
                .request_raw("tools/call", Some(params.clone()))
                .await
                .expect_err(&format!("{params} is refused"));
            let e = e.remote().unwrap();
            assert_eq!(e.code, -32602, "{params}: {e:?}");
            assert!(e.message.contains(arg.as_str()), "{params}: {e:?}");
        }
    }
    // Nothing ran: no note was kept.
    let turns = call_tool(&peer, "turns", json!({})).await;
    assert_eq!(tool_json(&turns)["notes"], json!([]), "{turns}");
}

/// §14.3: `channels/list` lists the channels known *for this connection*: the lobby once the
/// host accepted its registration or opened it, not after the host closed it (its methods are
/// then `-32023`, §14.6), nor when the host refused its registration. Before, the reference
/// answered with the lobby whatever happened, so the list named a channel the server no
/// longer held.
#[tokio::test]
async fn reference_channel_list_follows_the_connection() {
    for accept in [true, false] {
        let (host_t, server_t) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_t));
        let (peer, mut incoming) = Peer::new(host_t, PeerConfig::default());
        peer.request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
        )
        .await
        .unwrap();
        peer.notify_raw("notifications/initialized", None)
            .await
            .unwrap();
        let receipt = peer
            .request_raw(
                "featureSets/update",
                Some(json!({"effectiveCapabilities": ["channels.*"]})),
            )
            .await
            .unwrap();
        assert_eq!(receipt["accepted"], true, "{receipt}");
        let reg = next_request(&mut incoming).await;
        assert_eq!(reg.method(), "channels/register");
        reg.respond(json!({"results": [{"id": "ref:lobby", "accepted": accept}]}))
            .await
            .unwrap();
        let listed = |v: Value| -> Vec<String> {
            v["channels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .collect()
        };
        let list = peer.request_raw("channels/list", None).await.unwrap();
        let want: &[&str] = if accept { &["ref:lobby"] } else { &[] };
        assert_eq!(listed(list), want, "registration accepted: {accept}");
        if accept {
            let closed = peer
                .request_raw("channels/close", Some(json!({"channelId": "ref:lobby"})))
                .await
                .unwrap();
            assert_eq!(closed["closed"], true);
            let list = peer.request_raw("channels/list", None).await.unwrap();
            assert_eq!(listed(list), Vec::<String>::new(), "after the close");
        }
        peer.request_raw("channels/open", Some(json!({"type": "reference-chat"})))
            .await
            .unwrap();
        let list = peer.request_raw("channels/list", None).await.unwrap();
        assert_eq!(listed(list), ["ref:lobby"], "opened again");
    }
}

/// §6.7: "Servers MUST immediately respect a reduction", and a feature set the host
/// disables (`disabled`, in a Notification too) is one: the reference's tools stop serving
/// the sets they belong to (`note` and `state/rollback`: `ref.notes`; `say`: `ref.chat`;
/// `model`: `ref.model`) while the capabilities they use stay granted. A rollback naming
/// another set is refused (§8.1: only a set declaring `rollback: true` keeps checkpoints;
/// an undeclared one is `-32003`, §6.6). Before, `note` and `state/rollback` went on under
/// a disabled `ref.notes`, and a rollback naming any set rolled `ref.notes` back.
#[tokio::test]
async fn reference_tools_respect_a_disabled_feature_set() {
    let (peer, _incoming) = granted_peer().await;
    let note = call_tool(&peer, "note", json!({"text": "a"})).await;
    let checkpoint = note["state"]["checkpoint"].as_str().unwrap().to_owned();
    for (set, code) in [("ghost", -32003), ("ref.tools", -32602)] {
        let e = peer
            .request_raw(
                "state/rollback",
                Some(json!({"featureSet": set, "checkpoint": checkpoint})),
            )
            .await
            .unwrap_err();
        assert_eq!(e.remote().unwrap().code, code, "{set}");
    }
    peer.notify_raw(
        "featureSets/update",
        Some(json!({"disabled": ["ref.notes", "ref.chat", "ref.model"]})),
    )
    .await
    .unwrap();
    for (tool, args) in [
        ("note", json!({"text": "b"})),
        ("say", json!({"text": "hi"})),
        ("model", json!({})),
    ] {
        let r = call_tool(&peer, tool, args).await;
        assert_eq!(r["isError"], true, "{tool}: {r}");
        assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not available"),
            "{tool}: {r}"
        );
    }
    for params in [
        json!({"featureSet": "ref.notes", "checkpoint": checkpoint}),
        json!({"checkpoint": checkpoint}),
    ] {
        let e = peer
            .request_raw("state/rollback", Some(params.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.remote().unwrap().code, -32001, "{params}");
    }
    let turns = call_tool(&peer, "turns", json!({})).await;
    assert_eq!(tool_json(&turns)["notes"], json!(["a"]), "{turns}");
}
