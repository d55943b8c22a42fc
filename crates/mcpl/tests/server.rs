//! Wire-level tests of the server session: a scripted host (a real `Peer` over the in-memory
//! transport, real JSON lines) drives a `Server` and checks every obligation on the wire.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::jsonrpc::ErrorObject;
use mcpl::peer::{FrameDirection, Incoming, IncomingMessage, Peer, PeerConfig, Tap};
use mcpl::policy::{FeatureSets, Form, ServerPolicyState};
use mcpl::protocol::content::{Content, ContentBlock};
use mcpl::protocol::handshake::{ToolContent, ToolsCallResult};
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{PushEvent, SendError, Server, ServerBuilder, Session};
use mcpl::transport::memory;
use serde_json::{json, Map, Value};

/// Frames the host received, as parsed JSON.
type Wire = Arc<Mutex<Vec<Value>>>;

struct Host {
    peer: Peer,
    incoming: Incoming,
    received: Wire,
    session: Session,
}

fn builder() -> ServerBuilder {
    Server::builder("test-server", "1.0.0")
        .feature_set("alerts", "Push alerts", &[Capability::PushEvents])
        .feature_set(
            "memory.recall",
            "Inject memories",
            &[Capability::InjectBeforeUser, Capability::InjectSystem],
        )
        .feature_set("turns", "Watch turns", &[Capability::InferenceLifecycle])
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s, p| async move {
                let text = p
                    .arguments
                    .and_then(|a| a.get("text").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default();
                Ok(ToolsCallResult {
                    content: vec![ToolContent::text(text)],
                    is_error: None,
                    state: None,
                    extra: Map::new(),
                })
            },
        )
}

fn host_config(received: Wire) -> PeerConfig {
    PeerConfig {
        tap: Some(Tap::new(move |ev| {
            if ev.direction == FrameDirection::Inbound {
                if let Ok(v) = serde_json::from_str::<Value>(ev.text) {
                    received.lock().unwrap().push(v);
                }
            }
        })),
        ..PeerConfig::default()
    }
}

async fn connect(server: &Server, mcpl: bool) -> Host {
    let (host_t, server_t) = memory::pair();
    let received: Wire = Arc::default();
    let (peer, incoming) = Peer::new(host_t, host_config(received.clone()));
    let session = server.start(server_t);
    let mut caps = json!({});
    if mcpl {
        caps = json!({"experimental": {"mcpl": {"version": "0.5", "pushEvents": true,
            "contextHooks": {"beforeInference": true}, "featureSets": true}}});
    }
    let init = peer
        .request_raw(
            "initialize",
            Some(
                json!({"protocolVersion": "2025-06-18", "capabilities": caps,
                        "clientInfo": {"name": "scripted-host", "version": "0"}}),
            ),
        )
        .await
        .unwrap();
    assert!(init["capabilities"]["experimental"]["mcpl"]["revision"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    Host {
        peer,
        incoming,
        received,
        session,
    }
}

async fn policy(host: &Host, params: Value) -> Value {
    host.peer
        .request_raw("featureSets/update", Some(params))
        .await
        .unwrap()
}

/// A round trip: everything the host sent before it has been processed by the session's
/// (sequential) dispatch loop.
async fn sync(host: &Host) {
    host.peer.request_raw("ping", None).await.unwrap();
}

/// Sends the host's `context/beforeInference` for a minimal turn.
async fn before_inference(host: &Host) -> Result<Value, mcpl::peer::PeerError> {
    host.peer
        .request_raw(
            "context/beforeInference",
            Some(
                json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                        "userMessage": null}),
            ),
        )
        .await
}

fn err_of(r: Result<Value, mcpl::peer::PeerError>) -> ErrorObject {
    r.unwrap_err().remote().cloned().expect("a remote error")
}

fn methods_received(w: &Wire) -> Vec<String> {
    w.lock()
        .unwrap()
        .iter()
        .filter_map(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The server registers channel `id` (`channels.register` granted) and the host accepts it
/// (§14.3, §14.5), so the host's channel methods may name it (§14.6); the frames the host
/// received are forgotten.
async fn register(host: &mut Host, id: &str) {
    let session = host.session.clone();
    let d: mcpl::protocol::channels::ChannelDescriptor =
        serde_json::from_value(json!({"id": id, "type": "chat"})).unwrap();
    let task = tokio::spawn(async move { session.channels_register(vec![d]).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected channels/register")
    };
    assert_eq!(req.method(), "channels/register");
    req.respond(json!({"results": [{"id": id, "accepted": true}]}))
        .await
        .unwrap();
    task.await.unwrap().unwrap();
    host.received.lock().unwrap().clear();
}

#[tokio::test]
async fn s5_3_nothing_privileged_before_the_policy_request() {
    let server = builder()
        .on_before_inference("memory.recall", |_g, _p| async {
            panic!("the hook must not run before the policy Request")
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    assert!(!host.session.grant_state().ready);
    assert!(!host.session.granted(Capability::PushEvents));
    assert!(!host.session.feature_available("alerts"));

    let e = host
        .session
        .push_event(PushEvent::text("alerts", "hi"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        SendError::NotReady {
            capability: Capability::PushEvents
        }
    );
    assert!(matches!(
        host.session.model_info().await,
        Err(SendError::NotReady {
            capability: Capability::ModelInfo
        })
    ));

    let e = err_of(
        host.peer
            .request_raw(
                "tools/call",
                Some(json!({"name": "echo", "arguments": {"text": "x"}})),
            )
            .await,
    );
    assert_eq!(e.code, -32002);
    assert_eq!(e.data, Some(json!({"capability": "tools"})));
    let e = err_of(before_inference(&host).await);
    assert_eq!(e.code, -32002);

    // tools/list only describes and is unprivileged; mcpl/manifest too (§17.4).
    let list = host.peer.request_raw("tools/list", None).await.unwrap();
    assert_eq!(list["tools"][0]["name"], "echo");
    let m = host
        .peer
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(&m, server.tracker().snapshot().manifest());
    sync(&host).await;
    // The host saw responses only: no server-initiated request or notification.
    assert!(methods_received(&host.received).is_empty());
}

#[tokio::test]
async fn s6_7_receipt_matches_the_derivation() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let params = json!({
        "effectiveCapabilities": ["pushEvents", "contextHooks.beforeInference.inject.beforeUser"],
        "disabled": ["turns"]
    });
    let receipt = policy(&host, params.clone()).await;

    let manifest = server.tracker().snapshot().manifest().clone();
    let mut expected = ServerPolicyState::new(
        FeatureSets::from_mcpl(&manifest).0,
        mcpl::capability::CapabilitySet::ALL,
    );
    let outcome = expected.apply(Form::Request, &params).unwrap();
    assert_eq!(receipt, outcome.receipt.unwrap().to_value());
    assert_eq!(receipt["accepted"], true);
    assert_eq!(receipt["mode"], "degraded");
    let unavailable: Vec<&str> = receipt["unavailableFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["featureSet"].as_str().unwrap())
        .collect();
    assert_eq!(unavailable, ["memory.recall", "turns"]);
    assert!(host.session.feature_available("alerts"));
    assert!(host.session.granted(Capability::PushEvents));
    assert!(!host.session.granted(Capability::InjectSystem));
}

#[tokio::test]
async fn s6_7_nothing_degraded_omits_mode() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let receipt = policy(
        &host,
        json!({"effectiveCapabilities": ["pushEvents", "inferenceLifecycle",
            "contextHooks.beforeInference.inject.beforeUser",
            "contextHooks.beforeInference.inject.system"]}),
    )
    .await;
    assert_eq!(
        receipt,
        json!({"accepted": true, "unavailableFeatures": []})
    );
}

#[tokio::test]
async fn s5_3_malformed_policy_request_is_rejected_and_grants_nothing() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let e = err_of(
        host.peer
            .request_raw(
                "featureSets/update",
                Some(json!({"effectiveCapabilities": ["pushEvents"],
                            "deniedCapabilities": ["pushEvents"]})),
            )
            .await,
    );
    assert_eq!(e.code, -32602);
    assert!(!host.session.granted(Capability::PushEvents));
}

#[tokio::test]
async fn s6_7_narrowing_notification_takes_effect_immediately_and_never_widens() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    assert!(host.session.feature_available("alerts"));
    let mut changes = host.session.grant_changes();
    changes.mark_unchanged();

    host.peer
        .notify_raw(
            "featureSets/update",
            Some(json!({"disabled": ["alerts"],
                        "effectiveCapabilities": ["pushEvents", "modelInfo"]})),
        )
        .await
        .unwrap();
    sync(&host).await;
    assert!(changes.has_changed().unwrap());
    assert!(!host.session.feature_available("alerts"));
    // The widening in the Notification was discarded.
    assert!(!host.session.granted(Capability::ModelInfo));
    let before = host.received.lock().unwrap().len();
    let e = host
        .session
        .push_event(PushEvent::text("alerts", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        SendError::FeatureSetUnavailable {
            name: "alerts".into(),
            reason: "disabled"
        }
    );
    sync(&host).await;
    // Only the ping response arrived: nothing was sent for the refused event.
    assert_eq!(host.received.lock().unwrap().len(), before + 1);
}

#[tokio::test]
async fn s5_4_denied_send_fails_locally_and_nothing_reaches_the_wire() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["tools"]})).await;
    let before = host.received.lock().unwrap().len();

    let e = host
        .session
        .push_event(PushEvent::text("alerts", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        SendError::CapabilityDenied {
            capability: Capability::PushEvents
        }
    );
    assert_eq!(e.capability(), Some(Capability::PushEvents));
    assert!(e.to_string().contains("pushEvents"));
    assert!(matches!(
        host.session.channels_register(vec![]).await,
        Err(SendError::CapabilityDenied {
            capability: Capability::ChannelsRegister
        })
    ));
    assert!(matches!(
        host.session.channels_incoming(vec![]).await,
        Err(SendError::CapabilityDenied {
            capability: Capability::ChannelsIncoming
        })
    ));
    sync(&host).await;
    assert_eq!(host.received.lock().unwrap().len(), before + 1);
    assert!(methods_received(&host.received).is_empty());
}

#[tokio::test]
async fn s9_4_push_event_is_stamped_and_event_id_is_stable() {
    let server = builder().build().unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let ev = PushEvent::text("alerts", "disk full").tags(["chat:mention"]);
    let id = ev.stable_event_id();
    assert_eq!(
        id,
        ev.clone()
            .timestamp("2020-01-01T00:00:00Z")
            .stable_event_id()
    );
    let session = host.session.clone();
    let send = tokio::spawn(async move { session.push_event(ev).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected push/event")
    };
    assert_eq!(req.method(), "push/event");
    let p = req.request().params.clone().unwrap();
    assert_eq!(p["featureSet"], "alerts");
    assert_eq!(p["eventId"], id);
    assert_eq!(p["tags"], json!(["chat:mention"]));
    assert!(p["timestamp"].as_str().unwrap().ends_with('Z'));
    req.respond(json!({"accepted": true})).await.unwrap();
    assert!(send.await.unwrap().unwrap().accepted);
    // §9.2: payload.content goes out as ContentBlock[] even when built from a string.
    let mut ev = PushEvent::text("alerts", "unused");
    ev.content = Content::Text("plain".into());
    let session = host.session.clone();
    let send = tokio::spawn(async move { session.push_event(ev).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected push/event")
    };
    let p = req.request().params.clone().unwrap();
    assert_eq!(
        p["payload"]["content"],
        json!([{"type": "text", "text": "plain"}])
    );
    req.respond(json!({"accepted": true})).await.unwrap();
    assert!(send.await.unwrap().unwrap().accepted);
}

#[tokio::test]
async fn s3_2_mcp_only_host_gets_a_plain_mcp_server() {
    let server = builder().build().unwrap();
    let host = connect(&server, false).await;
    assert!(!host.session.is_mcpl());
    let r = host
        .peer
        .request_raw(
            "tools/call",
            Some(json!({"name": "echo", "arguments": {"text": "hello"}})),
        )
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "hello");
    let e = err_of(
        host.peer
            .request_raw(
                "featureSets/update",
                Some(json!({"effectiveCapabilities": ["pushEvents"]})),
            )
            .await,
    );
    assert_eq!(e.code, -32601);
    assert_eq!(
        host.session
            .push_event(PushEvent::text("alerts", "x"))
            .await
            .unwrap_err(),
        SendError::McpOnly
    );
    // No manifest announcements for a host that does not speak MCPL.
    let out = server
        .tracker()
        .transaction(|m| {
            m["featureSets"]["extra"] = json!({"description": "x", "uses": ["pushEvents"]});
        })
        .unwrap();
    assert!(out.changed);
    assert_eq!(out.announced, 0);
}

#[tokio::test]
async fn s6_6_unknown_and_removed_methods_are_minus_32601() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["tools", "pushEvents"]}),
    )
    .await;
    for m in [
        "context/afterInference",
        "featureSets/changed",
        "scope/elevate",
        "no/such",
        // Server → Host methods arriving from the host.
        "push/event",
        "model/info",
    ] {
        let e = err_of(host.peer.request_raw(m, Some(json!({}))).await);
        assert_eq!(e.code, -32601, "{m}");
    }
    // A notification-only method sent as a request still gets exactly one answer: `-32601`
    // naming it (JSON-RPC 2.0 §5.1: a well-formed Request for a method with no request form;
    // the rule the host keeps too).
    let e = err_of(
        host.peer
            .request_raw(
                "inference/lifecycle",
                Some(json!({"inferenceId": "i", "phase": "started"})),
            )
            .await,
    );
    assert_eq!(e.code, -32601, "{e:?}");
    assert_eq!(e.data, Some(json!({"method": "inference/lifecycle"})));
    assert!(e.message.contains("is a notification"), "{e:?}");
}

#[tokio::test]
async fn s5_4_inbound_without_capability_is_minus_32002_not_the_handler() {
    let server = builder()
        // The handlers below need these advertised (else build() refuses them: no host
        // could grant them, §5.4); the grant in force decides the rest.
        .advertise(&[Capability::ChannelsPublish])
        .on_channels_publish(|_s, _p| async { panic!("publish without channels.publish") })
        .on_before_inference("memory.recall", |_g, _p| async {
            panic!("hook without observe/inject")
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let e = err_of(
        host.peer
            .request_raw(
                "channels/publish",
                Some(json!({"channelId": "c", "content": "x"})),
            )
            .await,
    );
    assert_eq!(
        (e.code, e.data),
        (-32002, Some(json!({"capability": "channels.publish"})))
    );
    let e = err_of(before_inference(&host).await);
    assert_eq!(e.code, -32002);
}

#[tokio::test]
async fn s10_8_injections_at_ungranted_positions_are_dropped_before_sending() {
    // Its own declaration of `memory.recall` (only `beforeUser`): declaring the set twice
    // is a build error.
    let server = Server::builder("test-server", "1.0.0")
        .on_before_inference("memory.recall", |_g, p| async move {
            let inj = |pos: Position, t: &str| ContextInjection {
                namespace: "memory".into(),
                position: pos,
                content: Content::Text(t.into()),
                metadata: None,
                extra: Map::new(),
            };
            assert_eq!(p.user_message, None);
            Ok(BeforeInferenceResult {
                feature_set: None,
                context_injections: vec![
                    inj(Position::System, "sys"),
                    inj(Position::BeforeUser, "before"),
                    inj(Position::AfterUser, "after"),
                ],
                extra: Map::new(),
            })
        })
        .feature_set(
            "memory.recall",
            "Inject memories",
            &[Capability::InjectBeforeUser],
        )
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["contextHooks.beforeInference.inject.beforeUser"]}),
    )
    .await;
    let r = before_inference(&host).await.unwrap();
    assert_eq!(r["featureSet"], "memory.recall");
    let positions: Vec<&str> = r["contextInjections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["position"].as_str().unwrap())
        .collect();
    assert_eq!(positions, ["beforeUser"]);
    let d = diags.recv().await.unwrap();
    assert_eq!(d.code(), "injection_dropped");
}

/// §10.4, §10.8: the server sends only what the host's own rule accepts
/// (`session::rules::hook_answer_to_send`), shape included: an injection whose `metadata` is
/// not an object, which a host refuses, is dropped and reported, never sent.
#[tokio::test]
async fn s10_4_a_malformed_injection_is_dropped_before_sending() {
    let server = Server::builder("test-server", "1.0.0")
        .on_before_inference("memory.recall", |_g, _p| async move {
            let inj = |meta: Option<Value>, t: &str| ContextInjection {
                namespace: "memory".into(),
                position: Position::BeforeUser,
                content: Content::Text(t.into()),
                metadata: meta,
                extra: Map::new(),
            };
            Ok(BeforeInferenceResult {
                feature_set: None,
                context_injections: vec![
                    inj(Some(json!("not an object")), "bad"),
                    inj(Some(json!({"k": 1})), "good"),
                ],
                extra: Map::new(),
            })
        })
        .feature_set(
            "memory.recall",
            "Inject memories",
            &[Capability::InjectBeforeUser],
        )
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["contextHooks.beforeInference.inject.beforeUser"]}),
    )
    .await;
    let r = before_inference(&host).await.unwrap();
    let texts: Vec<&str> = r["contextInjections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["good"]);
    let d = diags
        .try_recv()
        .expect("reported before the answer is sent");
    assert_eq!(d.code(), "injection_dropped");
    assert!(d.detail().contains("metadata"), "{}", d.detail());
}

/// §6.7: a hook whose feature set the receipt reported disabled is not run — the turn's
/// user message never reaches it — and the answer injects nothing and claims no set.
#[tokio::test]
async fn s6_7_a_disabled_sets_hook_does_not_run() {
    let seen = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let saw = seen.clone();
    let server = builder()
        // §5.4: the server grants only what it advertises.
        .advertise(&[Capability::Observe])
        .on_before_inference("memory.recall", move |_g, p| {
            saw.lock().unwrap().push(p.user_message.clone());
            async { Ok(BeforeInferenceResult::default()) }
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let grant = |disabled: &[&str]| {
        json!({"effectiveCapabilities": ["contextHooks.beforeInference.observe",
                                         "contextHooks.beforeInference.inject.beforeUser",
                                         "contextHooks.beforeInference.inject.system"],
               "disabled": disabled})
    };
    let turn = |id: &str, text: &str| {
        let p = json!({"inferenceId": id, "conversationId": "c", "turnIndex": 0,
                       "userMessage": text});
        host.peer.request_raw("context/beforeInference", Some(p))
    };
    let receipt = policy(&host, grant(&["memory.recall"])).await;
    assert!(receipt.to_string().contains("memory.recall"), "{receipt}");
    let r = turn("i", "my secret").await.unwrap();
    // Nothing injected; the answer still names the hook's set (§6.5, issue #21).
    assert_eq!(
        r,
        json!({"featureSet": "memory.recall", "contextInjections": []})
    );
    assert!(seen.lock().unwrap().is_empty(), "the hook ran");
    // Enabled again by Request: the hook runs and sees the message (observe is granted).
    policy(&host, grant(&[])).await;
    turn("j", "hello").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [Some("hello".to_owned())]);
}

#[tokio::test]
async fn s10_5_lifecycle_consumer_dedupes_and_reports_defects_over_the_wire() {
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let (e1, e2) = (events.clone(), events.clone());
    let server = builder()
        .on_turn_start(move |s| e1.lock().unwrap().push(format!("start {}", s.inference_id)))
        .on_turn_end(move |e| {
            e2.lock()
                .unwrap()
                .push(format!("end {} {:?}", e.inference_id, e.outcome))
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    for (id, phase) in [
        ("i1", "started"),
        ("i1", "aborted"),
        ("i1", "completed"),
        ("i2", "failed"),
    ] {
        host.peer
            .notify_raw(
                "inference/lifecycle",
                // A `started` carries what §10.5's table requires of it (else
                // `lifecycle_missing_members` too).
                Some(match phase {
                    "started" => json!({"inferenceId": id, "phase": phase,
                                        "conversationId": "c", "turnIndex": 0}),
                    _ => json!({"inferenceId": id, "phase": phase}),
                }),
            )
            .await
            .unwrap();
    }
    sync(&host).await;
    assert_eq!(*events.lock().unwrap(), ["start i1", "end i1 Aborted"]);
    let codes = [
        diags.recv().await.unwrap().code(),
        diags.recv().await.unwrap().code(),
    ];
    assert_eq!(
        codes,
        [
            "lifecycle_second_terminal",
            "lifecycle_terminal_without_started"
        ]
    );
}

#[tokio::test]
async fn s10_5_lifecycle_without_grant_is_ignored() {
    let started = Arc::new(Mutex::new(0));
    let s2 = started.clone();
    let server = builder()
        .on_turn_start(move |_| *s2.lock().unwrap() += 1)
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    host.peer
        .notify_raw(
            "inference/lifecycle",
            Some(json!({"inferenceId": "i", "phase": "started"})),
        )
        .await
        .unwrap();
    sync(&host).await;
    assert_eq!(*started.lock().unwrap(), 0);
}

/// §10.5 forbids message content in `inference/lifecycle`; a content-like member written
/// `null` carries none, and is read as absent (`protocol::given`), as a host whose serializer
/// writes `null` for "not set" means it. The server reported it as
/// `lifecycle_content_members`, a host defect the host never made; a member with a value is
/// still reported.
#[tokio::test]
async fn s10_5_content_like_members_written_null_carry_no_content() {
    let server = builder().on_turn_start(|_| {}).build().unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    host.peer
        .notify_raw(
            "inference/lifecycle",
            Some(
                json!({"inferenceId": "i", "phase": "started", "conversationId": "c",
                        "turnIndex": 0, "userMessage": null, "content": null}),
            ),
        )
        .await
        .unwrap();
    host.peer
        .notify_raw(
            "inference/lifecycle",
            Some(json!({"inferenceId": "i", "phase": "completed",
                        "assistantMessage": "secret", "messages": null})),
        )
        .await
        .unwrap();
    sync(&host).await;
    let mut codes = Vec::new();
    while let Ok(d) = diags.try_recv() {
        codes.push((d.code(), d.detail()));
    }
    assert_eq!(codes.len(), 1, "{codes:?}");
    assert_eq!(codes[0].0, "lifecycle_content_members", "{codes:?}");
    assert!(codes[0].1.contains("assistantMessage"), "{codes:?}");
    assert!(!codes[0].1.contains("\"messages\""), "{codes:?}");
}

#[tokio::test(start_paused = true)]
async fn s10_5_safety_timeout_ends_a_turn_without_terminal() {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let e2 = ends.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let server = builder()
        .lifecycle_config(mcpl::lifecycle::LifecycleConfig {
            safety_timeout: std::time::Duration::from_secs(30),
            remembered_terminals: 16,
            ..Default::default()
        })
        .on_turn_end(move |e| {
            e2.lock().unwrap().push(e.outcome.clone());
            let _ = tx.send(());
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    host.peer
        .notify_raw(
            "inference/lifecycle",
            Some(json!({"inferenceId": "i", "phase": "started"})),
        )
        .await
        .unwrap();
    sync(&host).await;
    // Paused clock: the runtime advances time only when every task is idle.
    rx.recv().await.unwrap();
    assert_eq!(
        *ends.lock().unwrap(),
        [mcpl::lifecycle::TurnOutcome::TimedOut]
    );
}

/// §10.5 sets no number of open turns: a host that starts turns and never ends them makes
/// the server hold at most `max_open_turns`; each start past it ends the oldest as timed out
/// (delivered to `on_turn_end`, reported), and the connection goes on answering.
#[tokio::test]
async fn s10_5_a_host_starting_turns_without_end_is_held_to_the_limit() {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let e2 = ends.clone();
    let server = builder()
        .lifecycle_config(mcpl::lifecycle::LifecycleConfig {
            max_open_turns: 4,
            ..Default::default()
        })
        .on_turn_end(move |e| e2.lock().unwrap().push(e.inference_id.clone()))
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    for i in 0..10 {
        host.peer
            .notify_raw(
                "inference/lifecycle",
                Some(json!({"inferenceId": format!("i{i}"), "phase": "started"})),
            )
            .await
            .unwrap();
    }
    sync(&host).await;
    assert_eq!(*ends.lock().unwrap(), ["i0", "i1", "i2", "i3", "i4", "i5"]);
    // The server's own bound at work, not a §10.5 defect of the host.
    assert_eq!(notices(&mut diags, "lifecycle_open_turns_limit"), 6);
}

/// How many diagnostics with `code` are waiting on `diags`, each a `Notice` (the server's
/// own bound at work, no defect of the host's).
fn notices(
    diags: &mut tokio::sync::broadcast::Receiver<mcpl::server::ServerDiagnostic>,
    code: &str,
) -> usize {
    let mut n = 0;
    while let Ok(d) = diags.try_recv() {
        if d.code() == code {
            assert_eq!(d.kind(), mcpl::server::DiagnosticKind::Notice, "{d}");
            n += 1;
        }
    }
    n
}

/// §10.5 sets no length for `inferenceId` or `conversationId`, and the server keeps them (each
/// open turn, and each ended id it remembers to tell a second terminal): a host sending
/// megabyte ids made a connection hold gigabytes within those counts. A signal with an id
/// past `LifecycleConfig::max_id_bytes` is reported and changes nothing.
#[tokio::test]
async fn s10_5_a_signal_with_an_over_long_id_is_reported_and_changes_nothing() {
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s2 = starts.clone();
    let server = builder()
        .on_turn_start(move |t| s2.lock().unwrap().push(t.inference_id.clone()))
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    let long = "i".repeat(2048);
    for params in [
        json!({"inferenceId": long, "phase": "started"}),
        json!({"inferenceId": "short", "conversationId": long, "phase": "started"}),
        json!({"inferenceId": long, "phase": "completed"}),
        json!({"inferenceId": "ok", "phase": "started"}),
    ] {
        host.peer
            .notify_raw("inference/lifecycle", Some(params))
            .await
            .unwrap();
    }
    sync(&host).await;
    assert_eq!(*starts.lock().unwrap(), ["ok"]);
    assert_eq!(notices(&mut diags, "lifecycle_id_too_long"), 3);
}

#[tokio::test]
async fn s17_tracker_over_a_real_connection() {
    let server = builder().build().unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let initial = server.tracker().revision();

    // A no-op edit: no revision change, nothing announced.
    let out = server.tracker().transaction(|_| {}).unwrap();
    assert!(!out.changed);
    assert_eq!(out.announced, 0);

    // One transaction of two edits: one announcement.
    let out = server
        .tracker()
        .transaction(|m| {
            m["featureSets"]["digest"] =
                json!({"description": "Daily digest", "uses": ["pushEvents"]});
            m["featureSets"]["alerts"]["description"] = json!("Push alerts (v2)");
        })
        .unwrap();
    assert!(out.changed);
    assert_eq!(out.announced, 1);

    // The first message the host receives is that announcement: none was sent right after
    // initialize or for the no-op edit.
    let Some(IncomingMessage::Notification(n)) = host.incoming.recv().await else {
        panic!("expected mcpl/manifestChanged")
    };
    assert_eq!(n.method, "mcpl/manifestChanged");
    let p = n.params.unwrap();
    assert_eq!(p["revision"], out.revision.as_str());
    assert_ne!(p["revision"], initial.as_str());
    assert_eq!(p["domains"], json!(["featureSets"]));

    let m = host
        .peer
        .request_raw("mcpl/manifest", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(m["revision"], out.revision.as_str());
    assert_eq!(&m, server.tracker().snapshot().manifest());
    // The new set is declared on the live session at once.
    assert!(host.session.feature_available("digest"));
    sync(&host).await;
    assert_eq!(methods_received(&host.received), ["mcpl/manifestChanged"]);
}

#[tokio::test]
async fn s5_3_requests_before_initialize_are_refused_and_initialize_once() {
    let server = builder().build().unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let _session = server.start(server_t);
    let e = err_of(peer.request_raw("tools/list", None).await);
    assert_eq!(e.code, -32600);
    assert_eq!(peer.request_raw("ping", None).await.unwrap(), json!({}));
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
    peer.request_raw("initialize", Some(init.clone()))
        .await
        .unwrap();
    let e = err_of(peer.request_raw("initialize", Some(init)).await);
    assert_eq!(e.code, -32600);
}

#[test]
fn build_refuses_reserved_custom_methods_and_invalid_uses() {
    let r = Server::builder("s", "1")
        .method("context/afterInference", |_s, _p| async { Ok(Value::Null) })
        .build();
    assert!(matches!(
        r,
        Err(mcpl::server::BuildError::ReservedMethod(_))
    ));
    let r = Server::builder("s", "1")
        .feature_set_declaration(
            "bad",
            mcpl::policy::FeatureSetDeclaration {
                description: Some("x".into()),
                uses: Some(json!([])),
                extra: Map::new(),
            },
        )
        .build();
    assert!(matches!(
        r,
        Err(mcpl::server::BuildError::InvalidFeatureSet { .. })
    ));
}

/// A server whose `digest` set may ask for inference, streamed or not (§11).
fn streaming_server() -> Server {
    builder()
        .feature_set(
            "digest",
            "Summaries",
            &[
                Capability::InferenceRequest,
                Capability::InferenceRequestStreaming,
            ],
        )
        .build()
        .unwrap()
}

fn inference_params(feature_set: &str) -> mcpl::protocol::inference::InferenceRequestParams {
    serde_json::from_value(json!({
        "featureSet": feature_set,
        "messages": [{"role": "user", "content": "summarise"}]
    }))
    .unwrap()
}

#[tokio::test]
async fn s11_4_streaming_chunks_are_routed_by_request_id() {
    let server = streaming_server();
    let mut host = connect(&server, true).await;

    // Only inferenceRequest granted: streaming is refused locally, naming the missing leaf.
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest"]}),
    )
    .await;
    let e = host
        .session
        .inference_stream(inference_params("digest"))
        .await
        .unwrap_err();
    // The set needs streaming too, so the grant check names the leaf first.
    assert_eq!(
        e,
        SendError::CapabilityDenied {
            capability: Capability::InferenceRequestStreaming
        }
    );

    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest", "inferenceRequest.streaming"]}),
    )
    .await;
    let mut stream = host
        .session
        .inference_stream(inference_params("digest"))
        .await
        .unwrap();
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected inference/request")
    };
    assert_eq!(req.method(), "inference/request");
    assert_eq!(req.request().params.as_ref().unwrap()["stream"], true);
    let id = req.id().to_value();
    for (i, d) in ["Hel", "lo"].iter().enumerate() {
        host.peer
            .notify_raw(
                "inference/chunk",
                Some(json!({"requestId": id, "index": i, "delta": d})),
            )
            .await
            .unwrap();
    }
    sync(&host).await;
    req.respond(
        json!({"content": [{"type": "text", "text": "Hello"}], "finishReason": "end_turn"}),
    )
    .await
    .unwrap();
    let mut deltas = String::new();
    while let Some(c) = stream.next_chunk().await {
        deltas.push_str(&c.delta);
    }
    assert_eq!(deltas, "Hello");
    let result = stream.finish().await.unwrap();
    assert_eq!(
        serde_json::to_value(&result.content).unwrap()[0]["text"],
        "Hello"
    );
}

/// The host names a stream by the id its `inference/request` went out under (§11.4). A plain
/// MCP request the application sent first (`Session::send_mcp_request`, straight through the
/// peer) took a wire id the session's own requests did not count, so the session's ids and
/// the wire's went apart: the first stream's chunks reached the second stream, and the
/// second's were reported as for no request.
#[tokio::test]
async fn s11_4_chunks_reach_their_stream_after_a_plain_mcp_request() {
    let server = streaming_server();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest", "inferenceRequest.streaming"]}),
    )
    .await;
    let session = host.session.clone();
    let roots = tokio::spawn(async move { session.send_mcp_request("roots/list", None).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected roots/list")
    };
    assert_eq!(req.method(), "roots/list");
    req.respond(json!({"roots": []})).await.unwrap();
    roots.await.unwrap().unwrap();

    let mut streams = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..2 {
        streams.push(
            host.session
                .inference_stream(inference_params("digest"))
                .await
                .unwrap(),
        );
        let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
            panic!("expected inference/request")
        };
        requests.push(req);
    }
    for (req, delta) in requests.iter().zip(["first", "second"]) {
        host.peer
            .notify_raw(
                "inference/chunk",
                Some(json!({"requestId": req.id().to_value(), "index": 0, "delta": delta})),
            )
            .await
            .unwrap();
    }
    sync(&host).await;
    for req in requests {
        req.respond(json!({"content": "done"})).await.unwrap();
    }
    let mut got = Vec::new();
    for stream in &mut streams {
        let mut deltas = Vec::new();
        while let Some(c) = stream.next_chunk().await {
            deltas.push((c.request_id.to_value(), c.delta));
        }
        got.push(deltas);
    }
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], vec![(json!(2), "first".to_owned())]);
    assert_eq!(got[1], vec![(json!(3), "second".to_owned())]);
}

/// A server whose `digest` set streams, granted both inference leaves, with one streamed
/// `inference/request` sent (§11.4): the host, the server's diagnostics (subscribed before
/// the grant), the stream and the request as the host read it.
async fn streaming_request() -> (
    Host,
    tokio::sync::broadcast::Receiver<mcpl::server::ServerDiagnostic>,
    mcpl::server::InferenceStream,
    mcpl::peer::IncomingRequest,
) {
    let server = streaming_server();
    let mut host = connect(&server, true).await;
    let diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest", "inferenceRequest.streaming"]}),
    )
    .await;
    let stream = host
        .session
        .inference_stream(inference_params("digest"))
        .await
        .unwrap();
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected inference/request")
    };
    (host, diags, stream, req)
}

/// The host sends `n` one-character `inference/chunk`s for `req` (§11.4), then waits until
/// the server has handled them.
async fn send_chunks(host: &Host, req: &mcpl::peer::IncomingRequest, n: usize) {
    let id = req.id().to_value();
    for i in 0..n {
        host.peer
            .notify_raw(
                "inference/chunk",
                Some(json!({"requestId": id, "index": i, "delta": "x"})),
            )
            .await
            .unwrap();
    }
    sync(host).await;
}

/// §11.4 sets no number of chunks: a host streaming more `inference/chunk`s than the
/// application reads is held to `session::INFERENCE_CHUNKS_HELD` unread ones; each one past
/// it is dropped and reported (`inference_chunks_dropped`), never held without bound, and the
/// final result still arrives whole.
#[tokio::test]
async fn s11_4_chunks_past_what_the_reader_holds_are_dropped_and_reported() {
    let (host, mut diags, mut stream, req) = streaming_request().await;
    let held = mcpl::session::INFERENCE_CHUNKS_HELD;
    send_chunks(&host, &req, held + 3).await;
    let mut dropped = 0;
    while let Ok(d) = diags.try_recv() {
        assert_eq!(d.code(), "inference_chunks_dropped", "{d}");
        assert_eq!(d.kind(), mcpl::server::DiagnosticKind::Notice);
        dropped += 1;
    }
    assert_eq!(dropped, 3);
    req.respond(json!({"content": "whole", "finishReason": "end_turn"}))
        .await
        .unwrap();
    let mut read = 0;
    while stream.next_chunk().await.is_some() {
        read += 1;
    }
    assert_eq!(read, held, "what it held, in order, and no more");
    let result = stream.finish().await.unwrap();
    assert_eq!(serde_json::to_value(&result.content).unwrap(), "whole");
}

/// §11.4, MCP cancellation: an application that drops its `InferenceStream` no longer
/// waits for the request: the server cancels it toward the host (`notifications/cancelled`
/// naming it) and forgets it. The chunks the host sent before it read the cancel are
/// reported once (`inference_chunks_dropped`, `cancelled`), not once each, and its result
/// is reported late. Before (F7), the request stayed in flight, the host was never told,
/// and the chunks were reported as for a stream no longer read (`closed`).
#[tokio::test]
async fn s11_4_chunks_for_a_dropped_stream_are_reported_once() {
    let (mut host, mut diags, stream, req) = streaming_request().await;
    drop(stream);
    let cancel = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            match host.incoming.recv().await {
                Some(IncomingMessage::Notification(n)) if n.method == "notifications/cancelled" => {
                    return n
                }
                Some(_) => {}
                None => panic!("the connection ended"),
            }
        }
    })
    .await
    .expect("the dropped stream's request was not cancelled toward the host");
    let cancelled = cancel.params.unwrap_or_default();
    assert_eq!(cancelled["requestId"], req.id().to_value(), "{cancelled}");
    send_chunks(&host, &req, 5).await;
    let mut dropped = 0;
    while let Ok(d) = diags.try_recv() {
        assert_eq!(d.code(), "inference_chunks_dropped", "{d}");
        assert!(d.to_string().contains("cancelled the request"), "{d}");
        dropped += 1;
    }
    assert_eq!(dropped, 1, "one report for the dropped stream");
    let _ = req
        .respond(json!({"content": "whole", "finishReason": "end_turn"}))
        .await;
    sync(&host).await;
    let late = diags.try_recv().expect("the late result is reported");
    assert!(
        matches!(
            &late,
            mcpl::server::ServerDiagnostic::Connection(mcpl::peer::Diagnostic::LateResponse { .. })
        ),
        "{late}"
    );
}

/// §11.3 / App. B.4: a host's malformed `inference/request` result (an audited host's
/// `finishReason: "stop"`) is reported as a host defect by the rule `mcpl check-host`
/// applies; the server author still gets what could be read.
#[tokio::test]
async fn s11_3_a_hosts_malformed_inference_result_is_reported() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest"]}),
    )
    .await;
    let session = host.session.clone();
    let call =
        tokio::spawn(async move { session.inference_request(inference_params("digest")).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected inference/request")
    };
    req.respond(json!({"content": "Hello", "finishReason": "stop"}))
        .await
        .unwrap();
    let result = call.await.unwrap().unwrap();
    assert_eq!(serde_json::to_value(&result.content).unwrap(), "Hello");
    let d = diags
        .try_recv()
        .expect("reported before the result is handed over");
    assert_eq!(d.code(), "inference_result_malformed");
    assert!(
        d.detail().contains("finishReason \"stop\""),
        "{}",
        d.detail()
    );
}

/// §11.3, with optional members read as everywhere (`protocol::given`): a host whose
/// serializer writes `null` for "not set" (`model`, `finishReason`, `usage` and its counts)
/// is no defect. The server reported it as `inference_result_malformed` ("model is not a
/// string"), a host defect the host never made.
#[tokio::test]
async fn s11_3_optional_result_members_written_null_are_no_defect() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest"]}),
    )
    .await;
    let session = host.session.clone();
    let call =
        tokio::spawn(async move { session.inference_request(inference_params("digest")).await });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected inference/request")
    };
    req.respond(
        json!({"content": "Hello", "model": null, "finishReason": null,
                       "usage": {"inputTokens": null, "outputTokens": 3}}),
    )
    .await
    .unwrap();
    let result = call.await.unwrap().unwrap();
    assert_eq!(serde_json::to_value(&result.content).unwrap(), "Hello");
    if let Ok(d) = diags.try_recv() {
        panic!("a result with null optional members reported: {d}");
    }
}

/// §11.3 / §11.4: the final result of a streamed `inference/request` is held to the same
/// rule as an unstreamed one: a malformed one is reported, what could be read is returned.
#[tokio::test]
async fn s11_4_a_hosts_malformed_streamed_result_is_reported() {
    let (_host, mut diags, mut stream, req) = streaming_request().await;
    req.respond(json!({"content": "Hello", "finishReason": "stop"}))
        .await
        .unwrap();
    while stream.next_chunk().await.is_some() {}
    let result = stream.finish().await.unwrap();
    assert_eq!(serde_json::to_value(&result.content).unwrap(), "Hello");
    let d = diags
        .try_recv()
        .expect("reported before the result is handed over");
    assert_eq!(d.code(), "inference_result_malformed");
    assert!(
        d.detail().contains("finishReason \"stop\""),
        "{}",
        d.detail()
    );
}

#[tokio::test]
async fn s11_inference_request_needs_an_available_feature_set() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["inferenceRequest"], "enabled": ["alerts"]}),
    )
    .await;
    let e = host
        .session
        .inference_request(inference_params("digest"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        SendError::FeatureSetUnavailable {
            name: "digest".into(),
            reason: "not_selected"
        }
    );
    let e = host
        .session
        .inference_request(inference_params("undeclared"))
        .await
        .unwrap_err();
    assert_eq!(e, SendError::UnknownFeatureSet("undeclared".into()));
    sync(&host).await;
    assert!(methods_received(&host.received).is_empty());
}

#[tokio::test]
async fn s14_outgoing_stream_is_observed_only_when_streaming_is_granted() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (s1, s2) = (seen.clone(), seen.clone());
    let server = builder()
        // The handlers below need these advertised (else build() refuses them: no host
        // could grant them, §5.4); the grant in force decides the rest.
        .advertise(&[Capability::ChannelsStreaming, Capability::ChannelsRegister])
        .on_outgoing_chunk(move |c| s1.lock().unwrap().push(c.delta.clone()))
        .on_outgoing_complete(move |c| s2.lock().unwrap().push(format!("done {}", c.channel_id)))
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    let chunk = json!({"inferenceId": "i", "channelId": "c", "index": 0, "delta": "hi"});
    let complete = json!({"inferenceId": "i", "channelId": "c", "content": "hi"});
    policy(
        &host,
        json!({"effectiveCapabilities": ["pushEvents", "channels.register"]}),
    )
    .await;
    register(&mut host, "c").await;
    host.peer
        .notify_raw("channels/outgoing/chunk", Some(chunk.clone()))
        .await
        .unwrap();
    sync(&host).await;
    assert!(seen.lock().unwrap().is_empty());
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.streaming"]}),
    )
    .await;
    host.peer
        .notify_raw("channels/outgoing/chunk", Some(chunk))
        .await
        .unwrap();
    host.peer
        .notify_raw("channels/outgoing/complete", Some(complete))
        .await
        .unwrap();
    sync(&host).await;
    assert_eq!(*seen.lock().unwrap(), ["hi", "done c"]);
    // Observing the stream sent nothing (§14.5).
    assert!(methods_received(&host.received).is_empty());
}

#[tokio::test]
async fn s14_5_channels_changed_uses_the_request_form_and_model_info_when_granted() {
    let server = builder()
        // §5.4: the server grants only what it advertises.
        .advertise(&[Capability::ChannelsRegister, Capability::ModelInfo])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.register", "modelInfo"]}),
    )
    .await;
    let session = host.session.clone();
    let task = tokio::spawn(async move {
        let change: mcpl::protocol::channels::ChangedParams =
            serde_json::from_value(json!({"removed": ["x"]})).unwrap();
        let r = session.channels_changed(change).await.unwrap();
        let m = session.model_info().await.unwrap();
        (r, m)
    });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected channels/changed as a request")
    };
    assert_eq!(req.method(), "channels/changed");
    req.respond(json!({"results": [{"id": "x", "accepted": true}]}))
        .await
        .unwrap();
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected model/info")
    };
    assert_eq!(req.method(), "model/info");
    req.respond(json!({"id": "model-1"})).await.unwrap();
    let (r, m) = task.await.unwrap();
    assert!(r.results[0].accepted);
    assert_eq!(m.id, "model-1");
}

/// §14.3 / §14.5: with no `channels/list` handler the server answers with the channels the
/// host accepted — itemized results applied as the host applies them: a rejected addition
/// changes nothing, a rejected update drops the channel, a removal drops it.
#[tokio::test]
async fn s14_3_channels_list_without_handler_answers_what_the_host_accepted() {
    let server = builder()
        // §5.4: the server grants only what it advertises.
        .advertise(&[Capability::ChannelsRegister])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.register"]}),
    )
    .await;
    let d = |id: &str, label: &str| -> mcpl::protocol::channels::ChannelDescriptor {
        serde_json::from_value(json!({"id": id, "type": "chat", "label": label})).unwrap()
    };
    let session = host.session.clone();
    let (a, b, c) = (d("chat:a", "A"), d("chat:b", "B"), d("chat:c", "C"));
    let task = tokio::spawn(async move {
        session
            .channels_register(vec![a, b.clone(), c.clone()])
            .await
            .unwrap();
        let change = mcpl::protocol::channels::ChangedParams {
            added: Some(vec![d("chat:d", "D")]),
            updated: Some(vec![d("chat:b", "B2"), d("chat:c", "C2")]),
            removed: Some(vec!["chat:a".into()]),
            extra: Default::default(),
        };
        session.channels_changed(change).await.unwrap();
        session
    });
    let answer = |req: mcpl::peer::IncomingRequest, results: Value| async move {
        req.respond(json!({ "results": results })).await.unwrap()
    };
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected channels/register")
    };
    answer(
        req,
        json!([{"id": "chat:a", "accepted": true}, {"id": "chat:b", "accepted": true},
               {"id": "chat:c", "accepted": false, "reason": "capability_denied"}]),
    )
    .await;
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected channels/changed")
    };
    // chat:d is refused, chat:b's update accepted, chat:c's update refused.
    answer(
        req,
        json!([{"id": "chat:a", "accepted": true},
               {"id": "chat:d", "accepted": false, "reason": "channel_limit"},
               {"id": "chat:b", "accepted": true},
               {"id": "chat:c", "accepted": false, "reason": "unknown_channel"}]),
    )
    .await;
    let session = task.await.unwrap();
    let listed = host
        .peer
        .request_raw("channels/list", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(
        listed,
        json!({"channels": [{"id": "chat:b", "type": "chat", "label": "B2"}]})
    );
    assert_eq!(session.channels().len(), 1);
}

/// §14.5: the server's view of its channels follows the host's, which applies register and
/// changed in the order they arrive. A removal sent while a registration is still unanswered
/// goes out only after it, so answers can never be applied in the other order.
#[tokio::test(start_paused = true)]
async fn s14_5_concurrent_channel_changes_apply_in_the_order_sent() {
    let server = builder()
        // §5.4: the server grants only what it advertises.
        .advertise(&[Capability::ChannelsRegister])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.register"]}),
    )
    .await;
    let x: mcpl::protocol::channels::ChannelDescriptor =
        serde_json::from_value(json!({"id": "chat:x", "type": "chat"})).unwrap();
    let (s1, s2) = (host.session.clone(), host.session.clone());
    let register = tokio::spawn(async move { s1.channels_register(vec![x]).await.unwrap() });
    let remove = tokio::spawn(async move {
        let change = mcpl::protocol::channels::ChangedParams {
            added: None,
            updated: None,
            removed: Some(vec!["chat:x".into()]),
            extra: Default::default(),
        };
        s2.channels_changed(change).await.unwrap()
    });
    let Some(IncomingMessage::Request(first)) = host.incoming.recv().await else {
        panic!("expected channels/register")
    };
    assert_eq!(first.method(), "channels/register");
    // Paused clock: the timeout fires only once every task is idle, so a second request
    // would have arrived by then if it had been sent.
    let early = tokio::time::timeout(std::time::Duration::from_secs(1), host.incoming.recv()).await;
    let mut answers = vec![first];
    if let Ok(Some(IncomingMessage::Request(second))) = early {
        // Both were in flight: the host answers the later one first.
        answers.insert(0, second);
    }
    let second_pending = answers.len() == 1;
    for req in answers {
        let results = if req.method() == "channels/register" {
            json!([{"id": "chat:x", "accepted": true}])
        } else {
            json!([])
        };
        req.respond(json!({ "results": results })).await.unwrap();
    }
    register.await.unwrap();
    if second_pending {
        let Some(IncomingMessage::Request(second)) = host.incoming.recv().await else {
            panic!("expected channels/changed")
        };
        assert_eq!(second.method(), "channels/changed");
        second.respond(json!({ "results": [] })).await.unwrap();
    }
    remove.await.unwrap();
    // Registered, then removed: nothing is left, as on the host.
    assert!(
        host.session.channels().is_empty(),
        "{:?}",
        host.session.channels()
    );
}

#[tokio::test]
async fn s6_7_a_reducing_request_applies_before_its_receipt() {
    let server = builder()
        // §5.4: the server grants only what it advertises.
        .advertise(&[Capability::ModelInfo])
        .build()
        .unwrap();
    let (host_t, server_t) = memory::pair();
    let session = server.start(server_t);
    // Before initialize nothing is known, so nothing is allowed.
    assert_eq!(
        session
            .push_event(PushEvent::text("alerts", "x"))
            .await
            .unwrap_err(),
        SendError::NotReady {
            capability: Capability::PushEvents
        }
    );
    drop(session);
    drop(host_t);

    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["pushEvents", "modelInfo"]}),
    )
    .await;
    assert!(host.session.granted(Capability::ModelInfo));
    let receipt = policy(&host, json!({"effectiveCapabilities": ["modelInfo"]})).await;
    assert_eq!(receipt["unavailableFeatures"][0]["featureSet"], "alerts");
    assert!(!host.session.granted(Capability::PushEvents));
    assert!(matches!(
        host.session
            .push_event(PushEvent::text("alerts", "x"))
            .await,
        Err(SendError::CapabilityDenied {
            capability: Capability::PushEvents
        })
    ));
}

#[tokio::test]
async fn s6_6_a_panicking_handler_still_answers() {
    let server = builder()
        .tool(
            "boom",
            "Panics",
            json!({"type": "object"}),
            |_s, _p| async { panic!("tool bug") },
        )
        .build()
        .unwrap();
    let host = connect(&server, false).await;
    let e = err_of(
        host.peer
            .request_raw("tools/call", Some(json!({"name": "boom"})))
            .await,
    );
    assert_eq!(e.code, -32603);
    let e = err_of(
        host.peer
            .request_raw("tools/call", Some(json!({"name": "nope"})))
            .await,
    );
    assert_eq!(e.code, -32602);
}

#[tokio::test]
async fn s3_2_a_non_object_mcpl_advertisement_means_mcp_only() {
    let server = builder().build().unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": true}}})),
    )
    .await
    .unwrap();
    assert!(!session.is_mcpl());
    let e = err_of(
        peer.request_raw("featureSets/update", Some(json!({})))
            .await,
    );
    assert_eq!(e.code, -32601);
}

#[tokio::test]
async fn s14_1_acknowledge_typing_and_rollback_follow_the_grant() {
    let server = builder()
        // The handlers below need these advertised (else build() refuses them: no host
        // could grant them, §5.4); the grant in force decides the rest.
        .advertise(&[
            Capability::ChannelsAcknowledge,
            Capability::ChannelsTyping,
            // Advertised with no handler: granted, `channels/open` is still `-32601`.
            Capability::ChannelsLifecycle,
            Capability::ChannelsRegister,
        ])
        .on_channels_acknowledge(|_s, _p| async { Ok(()) })
        .on_channels_typing(|_s, _p| async { Ok(()) })
        .on_rollback(|_s, p| async move {
            Ok(
                serde_json::from_value(json!({"checkpoint": p.checkpoint, "success": true}))
                    .unwrap(),
            )
        })
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.acknowledge", "channels.register"]}),
    )
    .await;
    register(&mut host, "c").await;
    let ack = json!({"channelId": "c", "messageId": "m"});
    assert_eq!(
        host.peer
            .request_raw("channels/acknowledge", Some(ack))
            .await
            .unwrap(),
        json!({})
    );
    let e = err_of(
        host.peer
            .request_raw("channels/typing", Some(json!({"channelId": "c"})))
            .await,
    );
    assert_eq!(e.data, Some(json!({"capability": "channels.typing"})));
    let e = err_of(
        host.peer
            .request_raw("state/rollback", Some(json!({"checkpoint": "chk"})))
            .await,
    );
    assert_eq!(e.data, Some(json!({"capability": "tools"})));
    policy(&host, json!({"effectiveCapabilities": ["tools"]})).await;
    let r = host
        .peer
        .request_raw("state/rollback", Some(json!({"checkpoint": "chk"})))
        .await
        .unwrap();
    assert_eq!(r["success"], true);
    // No handler registered for channels/open: -32601 even when granted.
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.lifecycle"]}),
    )
    .await;
    let e = err_of(
        host.peer
            .request_raw("channels/open", Some(json!({"type": "x"})))
            .await,
    );
    assert_eq!(e.code, -32601);
}

#[tokio::test]
async fn s6_7_a_refusal_names_its_fallback_and_the_server_does_it() {
    let server = builder()
        .require(&[Capability::PushEvents], mcpl::policy::Fallback::McpOnly)
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let receipt = policy(&host, json!({"effectiveCapabilities": ["tools"]})).await;
    assert_eq!(
        receipt,
        json!({"accepted": false, "fallback": "mcp-only",
               "missingCapabilities": ["pushEvents"],
               "reason": "required capabilities are not granted"})
    );
    // mcp-only: MCPL is off, tools keep working.
    assert!(!host.session.is_mcpl());
    assert_eq!(
        host.session
            .push_event(PushEvent::text("alerts", "x"))
            .await
            .unwrap_err(),
        SendError::McpOnly
    );
    let r = host
        .peer
        .request_raw(
            "tools/call",
            Some(json!({"name": "echo", "arguments": {"text": "still here"}})),
        )
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "still here");
    // The refused policy is not operated under: tools was in it, yet nothing is granted.
    assert!(!host.session.grant_state().ready);
    assert!(!host.session.granted(Capability::Tools));
    // §17.10: no MCPL, so a manifest change is not announced (it could not be fetched).
    let out = server
        .tracker()
        .transaction(|m| m["featureSets"]["alerts"]["description"] = json!("v2"))
        .unwrap();
    assert!(out.changed);
    assert_eq!(out.announced, 0);
    sync(&host).await;
    assert!(methods_received(&host.received).is_empty());

    let server = builder()
        .require(&[Capability::PushEvents], mcpl::policy::Fallback::Close)
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let receipt = policy(&host, json!({"effectiveCapabilities": ["tools"]})).await;
    assert_eq!(receipt["fallback"], "close");
    // Never ready under the policy it refused, not even until the connection is gone.
    let state = host.session.grant_state();
    assert!(
        !state.ready && !state.granted(Capability::Tools),
        "{state:?}"
    );
    host.peer.closed().await;
}

/// §6.7: a policy refused with `fallback: "close"` is answered with its receipt (naming the
/// consequence is the server's job), then the connection closes. The receipt was dropped
/// when it had to wait for room in the writer's queue (here a queue of one frame): the
/// connection was closed first, and the host read EOF without it.
#[tokio::test]
async fn s6_7_the_receipt_of_a_policy_refused_with_close_is_written_before_the_close() {
    use mcpl::peer::PeerConfig;
    use mcpl::transport::Transport;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let server = builder()
        .require(&[Capability::PushEvents], mcpl::policy::Fallback::Close)
        .peer_config(PeerConfig {
            outgoing_capacity: 1,
            ..PeerConfig::default()
        })
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(Transport::lines(sr, sw, "test"));
    let (hr, mut hw) = tokio::io::split(host_end);
    for v in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18",
                          "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                          "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
               "params": {"effectiveCapabilities": ["tools"]}}),
    ] {
        hw.write_all(format!("{v}\n").as_bytes()).await.unwrap();
    }
    let mut lines = BufReader::new(hr).lines();
    let mut ids = Vec::new();
    let mut receipt = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        let v: Value = serde_json::from_str(&line).unwrap();
        ids.push(v["id"].clone());
        if v["id"] == 2 {
            receipt = Some(v);
        }
    }
    assert_eq!(ids, [json!(1), json!(2)]);
    let receipt = receipt.unwrap();
    assert_eq!(receipt["result"]["accepted"], false, "{receipt}");
    assert_eq!(receipt["result"]["fallback"], "close", "{receipt}");
    session.closed().await;
}

/// Nothing received vanishes: a notification the session does not act on — an MCP one such
/// as `notifications/cancelled`, or an unknown method — is reported as a diagnostic.
#[tokio::test]
async fn ignored_notifications_are_reported() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    host.peer
        .notify_raw("notifications/cancelled", Some(json!({"requestId": 9})))
        .await
        .unwrap();
    host.peer
        .notify_raw("vendor/whatever", Some(json!({})))
        .await
        .unwrap();
    let d = diags.recv().await.unwrap();
    assert_eq!(d.code(), "ignored_notification");
    assert!(d.detail().contains("notifications/cancelled"));
    let d = diags.recv().await.unwrap();
    assert_eq!(d.code(), "unknown_notification");
}

/// §14.3: an outgoing stream the grant lets through (`channels.streaming`) to a server with
/// no handler for it, neither `on_outgoing_chunk` nor `on_outgoing_complete`, is reported
/// (`unhandled_notification`, an author mistake): the text would vanish. A server with
/// only the `complete` handler reads the whole text there, so its chunks are no mistake,
/// and a server with only the chunk handler has read the text by the `complete`.
#[tokio::test]
async fn s14_3_an_outgoing_stream_with_no_handler_is_reported_not_dropped_silently() {
    let chunk = json!({"inferenceId": "i", "channelId": "c", "index": 0, "delta": "hi"});
    let complete = json!({"inferenceId": "i", "channelId": "c", "content": "hi"});
    let stream = |host: &Host| {
        let (peer, chunk, complete) = (host.peer.clone(), chunk.clone(), complete.clone());
        async move {
            peer.notify_raw("channels/outgoing/chunk", Some(chunk))
                .await
                .unwrap();
            peer.notify_raw("channels/outgoing/complete", Some(complete))
                .await
                .unwrap();
            // A marker after them: whatever they caused is on the stream before it.
            peer.notify_raw("vendor/marker", Some(json!({})))
                .await
                .unwrap();
        }
    };
    let codes_until_marker = |mut diags: tokio::sync::broadcast::Receiver<_>| async move {
        let mut codes = Vec::new();
        loop {
            let d: mcpl::server::ServerDiagnostic = diags.recv().await.unwrap();
            if matches!(&d, mcpl::server::ServerDiagnostic::UnknownNotification { method, .. } if method == "vendor/marker")
            {
                return codes;
            }
            codes.push((d.code(), d.detail()));
        }
    };
    let granted = json!({"effectiveCapabilities": ["channels.streaming", "channels.register"]});

    // Advertised (§5.4: the server grants only what it advertises), with no handler.
    let server = builder()
        .advertise(&[Capability::ChannelsStreaming, Capability::ChannelsRegister])
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, granted.clone()).await;
    register(&mut host, "c").await;
    let diags = host.session.diagnostics();
    stream(&host).await;
    let codes = codes_until_marker(diags).await;
    assert_eq!(codes.len(), 2, "{codes:?}");
    assert!(
        codes.iter().all(|(c, _)| *c == "unhandled_notification"),
        "{codes:?}"
    );
    assert!(codes[0].1.contains("channels/outgoing/chunk"), "{codes:?}");
    assert!(
        codes[1].1.contains("channels/outgoing/complete"),
        "{codes:?}"
    );

    let done = Arc::new(Mutex::new(Vec::<String>::new()));
    let d2 = done.clone();
    let server = builder()
        // The handlers below need these advertised (else build() refuses them: no host
        // could grant them, §5.4); the grant in force decides the rest.
        .advertise(&[Capability::ChannelsStreaming, Capability::ChannelsRegister])
        .on_outgoing_complete(move |c| d2.lock().unwrap().push(c.channel_id.clone()))
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, granted.clone()).await;
    register(&mut host, "c").await;
    let diags = host.session.diagnostics();
    stream(&host).await;
    assert_eq!(codes_until_marker(diags).await, []);
    assert_eq!(*done.lock().unwrap(), ["c"]);

    let server = builder()
        .advertise(&[Capability::ChannelsStreaming, Capability::ChannelsRegister])
        .on_outgoing_chunk(|_| {})
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, granted).await;
    register(&mut host, "c").await;
    let diags = host.session.diagnostics();
    stream(&host).await;
    assert_eq!(codes_until_marker(diags).await, []);
}

/// A diagnostic holds at most `session::DIAGNOSTIC_TEXT_BYTES` of what the host chose,
/// saying its length: the stream keeps the last 256 diagnostics for a subscriber, and a host
/// naming its notifications with 4 MiB methods made each of them hold the whole name.
#[tokio::test]
async fn a_diagnostic_keeps_the_hosts_text_cut_to_its_bound() {
    use mcpl::session::DIAGNOSTIC_TEXT_BYTES;
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    let method = format!("vendor/{}", "m".repeat(4 << 20));
    host.peer
        .notify_raw(&method, Some(json!({})))
        .await
        .unwrap();
    let d = diags.recv().await.unwrap();
    let mcpl::server::ServerDiagnostic::UnknownNotification { method: kept, .. } = d else {
        panic!("{d:?}")
    };
    assert!(kept.len() <= DIAGNOSTIC_TEXT_BYTES, "{}", kept.len());
    assert!(kept.starts_with("vendor/mmm"), "{kept}");
    assert!(
        kept.ends_with(&format!("({} bytes)", method.len())),
        "{kept}"
    );
}

/// §5.3 / §6.7 on the server's side of the wire: while the receipt of the initial policy
/// Request is being written, the session does not yet report the widened grant to senders,
/// so nothing privileged can be put on the wire ahead of that receipt. Observed from the
/// server's own tap, at the moment the receipt frame goes out.
#[tokio::test]
async fn s5_3_the_widening_reaches_senders_only_after_the_receipt_is_written() {
    let session_slot: Arc<std::sync::OnceLock<Session>> = Arc::default();
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let (slot, log) = (session_slot.clone(), seen.clone());
    let tap = Tap::new(move |ev| {
        let receipt = ev.direction == FrameDirection::Outbound
            && serde_json::from_str::<Value>(ev.text)
                .is_ok_and(|v| v["result"].get("accepted").is_some());
        if let (true, Some(s)) = (receipt, slot.get()) {
            log.lock().unwrap().push(s.granted(Capability::PushEvents));
        }
    });
    let server = builder()
        .peer_config(PeerConfig {
            tap: Some(tap),
            ..PeerConfig::default()
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    let _ = session_slot.set(host.session.clone());
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    assert_eq!(*seen.lock().unwrap(), [false]);
    sync(&host).await; // the exchange has finished on the server's side
    assert!(host.session.granted(Capability::PushEvents));
}

/// §6.4 rule 2 from the server's side: a host rejects a use the exercising set does not
/// declare, so the session refuses it before the wire — a push tagged with a set whose
/// `uses` lacks `pushEvents`, and an injection at a position its set does not declare.
#[tokio::test]
async fn s6_4_undeclared_uses_are_refused_before_the_wire() {
    let server = builder()
        .on_before_inference("memory.recall", |_g, _p| async move {
            Ok(BeforeInferenceResult {
                feature_set: None,
                context_injections: vec![
                    ContextInjection {
                        namespace: "m".into(),
                        position: Position::BeforeUser,
                        content: Content::Text("declared".into()),
                        metadata: None,
                        extra: Map::new(),
                    },
                    ContextInjection {
                        namespace: "m".into(),
                        position: Position::AfterUser,
                        content: Content::Text("undeclared".into()),
                        metadata: None,
                        extra: Map::new(),
                    },
                ],
                extra: Map::new(),
            })
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["pushEvents", "inferenceLifecycle",
            "contextHooks.beforeInference.inject.beforeUser",
            "contextHooks.beforeInference.inject.afterUser",
            "contextHooks.beforeInference.inject.system"]}),
    )
    .await;
    let e = host
        .session
        .push_event(PushEvent::text("turns", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        SendError::Undeclared {
            name: "turns".into(),
            capability: Capability::PushEvents
        }
    );
    let r = before_inference(&host).await.unwrap();
    assert_eq!(r["featureSet"], "memory.recall");
    let injections = r["contextInjections"].as_array().unwrap();
    assert_eq!(injections.len(), 1, "{r}");
    assert_eq!(injections[0]["content"], "declared");
    assert!(!methods_received(&host.received).contains(&"push/event".to_owned()));
}

/// §9.2: a caller-set timestamp that is not ISO 8601 is refused before the wire (a host would
/// reject the event); a valid one goes out as given.
#[tokio::test]
async fn s9_2_push_timestamp_is_iso8601_or_refused() {
    let server = builder().build().unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let s = &host.session;
    let e = s
        .push_event(PushEvent::text("alerts", "x").timestamp("1706005800"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SendError::InvalidTimestamp { timestamp, .. } if timestamp == "1706005800")
    );
    assert_eq!(e.code(), "invalid_timestamp");
    assert!(methods_received(&host.received).is_empty());
    let session = s.clone();
    let send = tokio::spawn(async move {
        let ev = PushEvent::text("alerts", "x").timestamp("2026-01-23T10:30:00+01:00");
        session.push_event(ev).await
    });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected push/event")
    };
    let p = req.request().params.clone().unwrap();
    assert_eq!(p["timestamp"], "2026-01-23T10:30:00+01:00");
    req.respond(json!({"accepted": true})).await.unwrap();
    send.await.unwrap().unwrap();
}

/// §14.3, §9.2: a `channels/incoming` message's timestamp is judged by the same ISO 8601 rule
/// as a push's, before the wire (the host refuses it as `invalid_message`). Found by the
/// channels hunt: only `push_event` checked it, so `channels_incoming` sent what the host
/// then refused.
#[tokio::test]
async fn s14_3_incoming_timestamp_is_iso8601_or_refused() {
    use mcpl::protocol::channels::IncomingMessage as ChannelMessage;
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.incoming"]}),
    )
    .await;
    let m = ChannelMessage::new("c1", "m1", "hi").with_timestamp("1706005800");
    let e = host.session.channels_incoming(vec![m]).await.unwrap_err();
    assert!(
        matches!(&e, SendError::InvalidTimestamp { timestamp, .. } if timestamp == "1706005800"),
        "{e:?}"
    );
    assert!(methods_received(&host.received).is_empty());
}

/// §4.1: a Request-only method sent as a Notification (`channels/open`, `channels/close`) is
/// not applied and is reported as one the server does not take so, by the one form rule
/// (`protocol::Kind::takes`) the host applies too, before admission: the defect is the form,
/// whatever the grant (it was reported `notification_denied` when not granted).
#[tokio::test]
async fn s4_1_a_request_only_method_as_a_notification_is_reported_by_its_form() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let mut diags = host.session.diagnostics();
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    for method in ["channels/open", "channels/close"] {
        host.peer
            .notify_raw(method, Some(json!({"type": "chat", "channelId": "c"})))
            .await
            .unwrap();
        sync(&host).await;
        let d = diags.recv().await.unwrap();
        assert_eq!(d.code(), "unexpected_notification", "{method}: {d:?}");
    }
}

/// App. B.1: a typed block can still be built malformed (public fields); the session refuses
/// it before the wire, naming where, as a host would refuse it after.
#[tokio::test]
async fn b1_malformed_typed_content_is_refused_before_the_wire() {
    use mcpl::protocol::content::MediaBlock;
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let image = ContentBlock::Image(MediaBlock {
        data: Some("AAAA".into()),
        mime_type: None,
        uri: None,
        extra: Map::new(),
    });
    let mut ev = PushEvent::text("alerts", "x");
    ev.content = Content::Blocks(vec![ContentBlock::text("ok"), image]);
    let e = host.session.push_event(ev).await.unwrap_err();
    assert_eq!(e.code(), "invalid_content");
    assert!(
        e.to_string()
            .contains("payload.content[1] image block has data but no mimeType"),
        "{e}"
    );
    sync(&host).await;
    assert!(methods_received(&host.received).is_empty());
}

/// §16.1: producers must not emit un-namespaced tags, nor invent tags in the reserved
/// `chat:` / `mcpl:` namespaces; tags are a set. Refused before the wire, repeats dropped.
#[tokio::test]
async fn s16_1_producer_tags_are_namespaced_and_a_set() {
    use mcpl::tags::TagError;
    let server = builder().build().unwrap();
    let mut host = connect(&server, true).await;
    policy(&host, json!({"effectiveCapabilities": ["pushEvents"]})).await;
    let s = &host.session;
    for (tags, err) in [
        (vec!["mention"], TagError::NotNamespaced("mention".into())),
        (vec!["chat:bogus"], TagError::Reserved("chat:bogus".into())),
        (vec!["mcpl:x"], TagError::Reserved("mcpl:x".into())),
    ] {
        let e = s
            .push_event(PushEvent::text("alerts", "x").tags(tags))
            .await
            .unwrap_err();
        assert_eq!(e, SendError::InvalidTag(err));
    }
    assert!(methods_received(&host.received).is_empty());
    let session = s.clone();
    let send = tokio::spawn(async move {
        let ev = PushEvent::text("alerts", "x").tags(["acme:alert", "chat:mention", "acme:alert"]);
        session.push_event(ev).await
    });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected push/event")
    };
    let p = req.request().params.clone().unwrap();
    assert_eq!(p["tags"], json!(["acme:alert", "chat:mention"]));
    req.respond(json!({"accepted": true})).await.unwrap();
    send.await.unwrap().unwrap();
}

/// `ServerBuilder::on::<M>` serves the typed method over the wire like the named
/// registration, behind the same capability gate (§14.1, §14.3; issue #24, item 5).
#[tokio::test]
async fn s14_3_generic_on_handlers_serve_their_method_behind_its_capability() {
    use mcpl::protocol::channels::{
        ChannelDescriptor, ChannelsAcknowledge, ChannelsList, ChannelsOpen, ListResult, OpenResult,
    };
    let server = builder()
        // The handlers below need these advertised (else build() refuses them: no host
        // could grant them, §5.4); the grant in force decides the rest.
        .advertise(&[
            Capability::ChannelsLifecycle,
            Capability::ChannelsAcknowledge,
            Capability::ChannelsRegister,
        ])
        .on::<ChannelsOpen, _, _>(|_s, p| async move {
            Ok(OpenResult::new(ChannelDescriptor::new("opened-1", p.kind)))
        })
        .on::<ChannelsAcknowledge, _, _>(|_s, _p| async { Ok(Default::default()) })
        .on::<ChannelsList, _, _>(|_s, _p| async {
            Ok(serde_json::from_value::<ListResult>(json!({"channels": []})).unwrap())
        })
        .build()
        .unwrap();
    let host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.acknowledge"]}),
    )
    .await;
    let e = err_of(
        host.peer
            .request_raw("channels/open", Some(json!({"type": "chat"})))
            .await,
    );
    assert_eq!(e.data, Some(json!({"capability": "channels.lifecycle"})));
    // §14.6: a channel never registered nor opened is answered by the session.
    let e = err_of(
        host.peer
            .request_raw(
                "channels/acknowledge",
                Some(json!({"channelId": "c", "messageId": "m"})),
            )
            .await,
    );
    assert_eq!(e.code, -32023, "{e:?}");
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.lifecycle", "channels.register",
                                          "channels.acknowledge"]}),
    )
    .await;
    let opened = host
        .peer
        .request_raw("channels/open", Some(json!({"type": "chat"})))
        .await
        .unwrap();
    assert_eq!(opened["channel"], json!({"id": "opened-1", "type": "chat"}));
    let ack = json!({"channelId": "opened-1", "messageId": "m"});
    assert_eq!(
        host.peer
            .request_raw("channels/acknowledge", Some(ack))
            .await
            .unwrap(),
        json!({})
    );
    let listed = host
        .peer
        .request_raw("channels/list", Some(json!({})))
        .await
        .unwrap();
    assert_eq!(listed, json!({"channels": []}));
}

/// §6.7 against a host that floods policy Requests, alternately widening and narrowing,
/// without waiting for their receipts: every Request gets its receipt, and the grant in
/// force afterwards is the one the last Request named (no widening left behind by an
/// earlier one).
#[tokio::test]
async fn s6_7_a_flood_of_alternating_policy_requests_ends_in_the_last_grant() {
    let server = builder().build().unwrap();
    let host = connect(&server, true).await;
    let wide = json!({"effectiveCapabilities":
        ["pushEvents", "contextHooks.beforeInference.inject.beforeUser"]});
    let narrow = json!({"effectiveCapabilities": ["pushEvents"]});
    let sends = (0..300).map(|i| {
        let p = if i % 2 == 0 {
            wide.clone()
        } else {
            narrow.clone()
        };
        host.peer.request_raw("featureSets/update", Some(p))
    });
    let answers = futures_util::future::join_all(sends).await;
    assert!(
        answers.iter().all(|a| a.is_ok()),
        "every Request has its receipt"
    );
    policy(&host, narrow).await;
    sync(&host).await;
    assert!(host.session.granted(Capability::PushEvents));
    assert!(!host.session.granted(Capability::InjectBeforeUser));
}

/// §14.5: the host validates `channels/incoming` at receipt against the channel actually
/// registered (or opened) on the connection, so a message for a channel this connection does
/// not hold (never registered, refused, or closed by the host) is refused before the wire,
/// naming the channel (`SendError::UnknownChannel`), as the host's inbound methods naming
/// such a channel are `-32023` (§14.6). Before, it was sent for the host to refuse.
#[tokio::test]
async fn s14_5_incoming_for_a_channel_not_held_is_refused_before_the_wire() {
    use mcpl::protocol::channels::IncomingMessage as ChannelMessage;
    let server = builder()
        .feature_set(
            "chat",
            "Chat",
            &[Capability::ChannelsRegister, Capability::ChannelsIncoming],
        )
        .build()
        .unwrap();
    let mut host = connect(&server, true).await;
    policy(
        &host,
        json!({"effectiveCapabilities": ["channels.register", "channels.incoming"]}),
    )
    .await;
    register(&mut host, "c1").await;
    for ids in [vec!["c2"], vec!["c1", "c2"]] {
        let messages: Vec<ChannelMessage> = ids
            .iter()
            .map(|id| ChannelMessage::new(*id, "m", "hi"))
            .collect();
        let e = host.session.channels_incoming(messages).await.unwrap_err();
        assert!(
            matches!(&e, SendError::UnknownChannel(id) if id == "c2"),
            "{ids:?}: {e:?}"
        );
    }
    sync(&host).await;
    assert!(
        methods_received(&host.received).is_empty(),
        "nothing sent: {:?}",
        methods_received(&host.received)
    );
    // The one held is sent.
    let session = host.session.clone();
    let send = tokio::spawn(async move {
        session
            .channels_incoming(vec![ChannelMessage::new("c1", "m", "hi")])
            .await
    });
    let Some(IncomingMessage::Request(req)) = host.incoming.recv().await else {
        panic!("expected channels/incoming")
    };
    assert_eq!(req.method(), "channels/incoming");
    req.respond(json!({"results": [{"messageId": "m", "accepted": true}]}))
        .await
        .unwrap();
    send.await.unwrap().unwrap();
}
