//! What hosts written with the other MCPL libraries (the TypeScript library, `mcpl-core`)
//! put on the wire, fed to a real `Server` over TCP: each shape the spec allows is served,
//! each a MUST forbids is refused.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{Server, ServerBuilder, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// The host side of one TCP connection, in raw lines.
struct Host {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    next_id: u64,
}

impl Host {
    /// Serves one connection of `server` and dials it; the server's [`Session`] with it.
    async fn connect(server: &Server) -> (Host, Session) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = server.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = tx.send(server.start(mcpl::transport::tcp::from_stream(stream)));
        });
        let (r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        let host = Host {
            lines: BufReader::new(r).lines(),
            write: w,
            next_id: 0,
        };
        (host, rx.await.unwrap())
    }

    async fn send(&mut self, v: Value) {
        self.write
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Sends a request and returns its response (no other frame may come first).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let line = self.lines.next_line().await.unwrap().expect("a frame");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], json!(id), "{v}");
        v
    }

    /// `initialize` with `capabilities`, then `notifications/initialized`.
    async fn initialize(&mut self, capabilities: Value) -> Value {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                       "clientInfo": {"name": "other-lib-host", "version": "0.2.2"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }
}

/// The codes of the diagnostics `session` reported so far.
fn diagnostic_codes(
    diags: &mut tokio::sync::broadcast::Receiver<mcpl::server::ServerDiagnostic>,
) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(d) = diags.try_recv() {
        seen.push(format!("{}: {}", d.code(), d.detail()));
    }
    seen
}

const INJECT: &str = "contextHooks.beforeInference.inject.beforeUser";

fn hook_server() -> ServerBuilder {
    Server::builder("interop", "1.0.0")
        .feature_set("notes", "Notes", &[Capability::InjectBeforeUser])
        .on_before_inference("notes", |_g, _p| async move {
            Ok(BeforeInferenceResult::with_injections([
                ContextInjection::new("notes", Position::BeforeUser, "a note"),
            ]))
        })
}

fn host_caps() -> Value {
    json!({"experimental": {"mcpl": {"version": "0.5", "contextHooks": {"beforeInference": true},
        "inferenceLifecycle": true, "channels": {"register": true, "publish": true, "incoming": true},
        "featureSets": true}}})
}

/// A ready connection: initialized and granted `grant` by a policy Request.
async fn ready(server: &Server, grant: Value) -> (Host, Session) {
    let (mut host, session) = Host::connect(server).await;
    host.initialize(host_caps()).await;
    let r = host.request("featureSets/update", grant).await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    (host, session)
}

/// §10.1 params as the other libraries write them: `mcpl-core` always writes
/// `userMessage` (as `null` when there is none) and a full `model`; the TypeScript library
/// adds §14.4 `channels` and members of its own; hosts in JavaScript-adjacent stacks write
/// integers as `7.0` (§10.1 says `integer`; JSON has one number type, and `7.0` is the
/// integer 7). Each is answered with the hook's injection.
#[tokio::test]
async fn s10_1_before_inference_params_from_other_hosts_are_served() {
    let server = hook_server().build().unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": [INJECT]})).await;
    let model =
        json!({"id": "m", "vendor": "v", "contextWindow": 200000, "capabilities": ["vision"]});
    let shapes = [
        // mcpl-core: every member, `userMessage` null.
        json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 7,
               "userMessage": null, "model": model}),
        // Member order reversed, unknown members at every level, §14.4 channels.
        json!({"model": {"capabilities": [], "contextWindow": 1, "vendor": "v", "id": "m", "x": 1},
               "channels": {"incoming": {"channelId": "discord:#g", "messageId": "d1", "threadId": "t"},
                            "defaultOutgoing": {"channelId": "discord:#g"},
                            "candidates": ["ui", "discord:#g"], "extra": true},
               "turnIndex": 0, "conversationId": "c", "inferenceId": "i2", "hostHint": {"a": [1]}}),
        // Optional members as `null`.
        json!({"inferenceId": "i3", "conversationId": "c", "turnIndex": 1,
               "userMessage": null, "model": null, "channels": null}),
        json!({"inferenceId": "i4", "conversationId": "c", "turnIndex": 1,
               "model": {"id": "m", "vendor": null, "contextWindow": null, "capabilities": null}}),
        // Integers written as floats.
        json!({"inferenceId": "i5", "conversationId": "c", "turnIndex": 7.0,
               "userMessage": "hi", "model": {"id": "m", "vendor": "v", "contextWindow": 200000.0}}),
    ];
    for params in shapes {
        let r = host
            .request("context/beforeInference", params.clone())
            .await;
        assert_eq!(r["result"]["featureSet"], "notes", "{params}: {r}");
        assert_eq!(
            r["result"]["contextInjections"][0]["position"], "beforeUser",
            "{params}: {r}"
        );
    }
}

/// A non-integral or negative `turnIndex` is not a §10.1 `integer`: refused `-32602`.
#[tokio::test]
async fn s10_1_a_turn_index_that_is_not_an_integer_is_refused() {
    let server = hook_server().build().unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": [INJECT]})).await;
    for bad in [json!(7.5), json!(-1), json!("7"), json!(null)] {
        let r = host
            .request(
                "context/beforeInference",
                json!({"inferenceId": "i", "conversationId": "c", "turnIndex": bad}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
}

/// `featureSets/update` Requests as the other libraries' hosts send them (§5.3, §6.7): the
/// TypeScript 0.5 host's full form with a one-segment wildcard (§5.4); unknown members, `null`
/// or not; an `mcpl-core` host's form with only `enabled` and its 0.4
/// `scopes` (no `effectiveCapabilities`: a grant of nothing, §5.3); no params at all (the
/// same). Each gets a receipt; the hook is served exactly when the grant covers it.
#[tokio::test]
async fn s6_7_policy_requests_from_other_hosts_get_receipts() {
    let cases = [
        (
            json!({"effectiveCapabilities": ["tools", "contextHooks.beforeInference.inject.*"],
                   "deniedCapabilities": ["contextHooks.beforeInference.observe"],
                   "enabled": ["notes"], "disabled": []}),
            true,
        ),
        (
            json!({"effectiveCapabilities": [INJECT], "scopes": null, "notes": null}),
            true,
        ),
        (
            json!({"enabled": ["notes"], "scopes": {"notes": {"whitelist": ["a"], "blacklist": []}}}),
            false,
        ),
        (Value::Null, false),
        (json!({}), false),
    ];
    for (grant, served) in cases {
        let server = hook_server().build().unwrap();
        let (mut host, _s) = Host::connect(&server).await;
        host.initialize(host_caps()).await;
        let r = if grant.is_null() {
            host.next_id += 1;
            let id = host.next_id;
            host.send(json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update"}))
                .await;
            let line = host.lines.next_line().await.unwrap().unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        } else {
            host.request("featureSets/update", grant.clone()).await
        };
        assert_eq!(r["result"]["accepted"], true, "{grant}: {r}");
        let r = host
            .request(
                "context/beforeInference",
                json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0}),
            )
            .await;
        if served {
            assert_eq!(
                r["result"]["contextInjections"][0]["namespace"], "notes",
                "{grant}: {r}"
            );
        } else {
            assert!(
                r.get("error").is_some() || r["result"]["contextInjections"] == json!([]),
                "{grant}: {r}"
            );
        }
    }
}

/// §5.4: a path in both `effectiveCapabilities` and `deniedCapabilities` makes the policy
/// message malformed and the receiver MUST fail closed: the Request is refused and grants
/// nothing.
#[tokio::test]
async fn s5_4_a_path_both_granted_and_denied_is_refused() {
    let server = hook_server().build().unwrap();
    let (mut host, session) = Host::connect(&server).await;
    host.initialize(host_caps()).await;
    let r = host
        .request(
            "featureSets/update",
            json!({"effectiveCapabilities": [INJECT], "deniedCapabilities": [INJECT]}),
        )
        .await;
    assert!(
        r.get("error").is_some() || r["result"]["accepted"] == false,
        "{r}"
    );
    assert!(!session.granted(Capability::InjectBeforeUser));
}

/// §6.7: a Notification carrying grant fields (the form `mcpl-core` and pre-0.5 hosts send)
/// never widens and never makes the connection ready; its `disabled` still narrows.
#[tokio::test]
async fn s6_7_a_policy_notification_narrows_only() {
    let server = hook_server().build().unwrap();
    let (mut host, session) = Host::connect(&server).await;
    host.initialize(host_caps()).await;
    host.send(json!({"jsonrpc": "2.0", "method": "featureSets/update",
                     "params": {"effectiveCapabilities": [INJECT], "enabled": ["notes"]}}))
        .await;
    let r = host.request("ping", json!({})).await;
    assert_eq!(r["result"], json!({}));
    assert!(!session.granted(Capability::InjectBeforeUser));
    let r = host
        .request(
            "context/beforeInference",
            json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0}),
        )
        .await;
    assert!(
        r.get("error").is_some() || r["result"]["contextInjections"] == json!([]),
        "{r}"
    );
    // Ready by a Request, then narrowed by a Notification.
    let r = host
        .request(
            "featureSets/update",
            json!({"effectiveCapabilities": [INJECT]}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    host.send(json!({"jsonrpc": "2.0", "method": "featureSets/update",
                     "params": {"disabled": ["notes"], "scopes": {}}}))
        .await;
    let r = host
        .request(
            "context/beforeInference",
            json!({"inferenceId": "i2", "conversationId": "c", "turnIndex": 1}),
        )
        .await;
    assert_eq!(r["result"]["contextInjections"], json!([]), "{r}");
}

/// §10.5 signals as the other hosts write them: every optional member, `null` for an
/// absent one, unknown members (a TypeScript host's `cacheReadTokens`), member order
/// reversed, token counts as floats. Each reaches the application's turn hooks and none is
/// reported invalid.
#[tokio::test]
async fn s10_5_lifecycle_signals_from_other_hosts_reach_the_turn_hooks() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (starts, ends) = (seen.clone(), seen.clone());
    let server = Server::builder("life", "1.0.0")
        .feature_set("turns", "Turns", &[Capability::InferenceLifecycle])
        .on_turn_start(move |t| {
            starts
                .lock()
                .unwrap()
                .push(format!("start {}", t.inference_id))
        })
        .on_turn_end(move |t| ends.lock().unwrap().push(format!("end {}", t.inference_id)))
        .build()
        .unwrap();
    let (mut host, session) = ready(
        &server,
        json!({"effectiveCapabilities": ["inferenceLifecycle"]}),
    )
    .await;
    let mut diags = session.diagnostics();
    let signals = [
        json!({"inferenceId": "a", "conversationId": "c", "turnIndex": 7, "phase": "started",
               "model": {"id": "m", "vendor": "v", "contextWindow": 200000, "capabilities": []}}),
        json!({"usage": {"outputTokens": 340, "inputTokens": 1250, "cacheReadTokens": 9},
               "phase": "completed", "turnIndex": 7, "conversationId": "c", "inferenceId": "a",
               "hostTiming": {"ms": 12}}),
        json!({"inferenceId": "b", "conversationId": "c", "turnIndex": 8.0, "phase": "started",
               "model": null, "usage": null}),
        json!({"inferenceId": "b", "conversationId": "c", "turnIndex": 8, "phase": "completed",
               "usage": {"inputTokens": 1250.0, "outputTokens": 340.0}}),
    ];
    for s in signals {
        host.send(json!({"jsonrpc": "2.0", "method": "inference/lifecycle", "params": s}))
            .await;
    }
    let r = host.request("ping", json!({})).await;
    assert_eq!(r["result"], json!({}));
    let codes = diagnostic_codes(&mut diags);
    assert!(
        !codes.iter().any(|c| c.starts_with("invalid_notification")),
        "{codes:?}"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        ["start a", "end a", "start b", "end b"],
        "{codes:?}"
    );
}

fn channel_server(log: Arc<Mutex<Vec<String>>>) -> Server {
    let (l1, l2, l3, l4) = (log.clone(), log.clone(), log.clone(), log);
    Server::builder("chan", "1.0.0")
        .feature_set(
            "chat",
            "Chat",
            &[
                Capability::ChannelsLifecycle,
                Capability::ChannelsPublish,
                Capability::ChannelsStreaming,
            ],
        )
        // on_turn_start needs it advertised (build() refuses a handler no host could reach).
        .advertise(&[Capability::InferenceLifecycle])
        .on_channels_open(|_s, p| async move {
            Ok(mcpl::protocol::channels::OpenResult::new(
                mcpl::protocol::channels::ChannelDescriptor::new(format!("{}:x", p.kind), p.kind),
            ))
        })
        .on_channels_close(
            |_s, _p| async move { Ok(mcpl::protocol::channels::CloseResult::new(true)) },
        )
        .on_channels_publish(move |_s, p| {
            l1.lock().unwrap().push(format!("publish {}", p.channel_id));
            async move { Ok(mcpl::protocol::channels::PublishResult::delivered(None)) }
        })
        .on_outgoing_chunk(move |p| l2.lock().unwrap().push(format!("chunk {}", p.index)))
        .on_outgoing_complete(move |p| {
            l3.lock()
                .unwrap()
                .push(format!("complete {}", p.channel_id))
        })
        .on_turn_start(move |t| l4.lock().unwrap().push(format!("start {}", t.inference_id)))
        .build()
        .unwrap()
}

const CHANNEL_GRANT: &str = r#"{"effectiveCapabilities": ["channels.lifecycle", "channels.publish",
    "channels.streaming"]}"#;

/// §14.3 host → server channel methods as the other hosts send them: `mcpl-core`'s
/// `channels/open` (`type`, `address`, `metadata`), `channels/publish` as a Request and as a
/// Notification with `stream`, streaming chunks with members reordered and extra members,
/// content blocks with members beyond App. B.1 (`annotations`, `_meta`), and `null`
/// optional members. Each is served.
#[tokio::test]
async fn s14_3_channel_methods_from_other_hosts_are_served() {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let server = channel_server(log.clone());
    let (mut host, session) = ready(&server, serde_json::from_str(CHANNEL_GRANT).unwrap()).await;
    let mut diags = session.diagnostics();
    let r = host
        .request(
            "channels/open",
            json!({"type": "discord", "address": {"guild": "acme", "channel": "#general"},
                   "metadata": {}}),
        )
        .await;
    assert_eq!(r["result"]["channel"]["id"], "discord:x", "{r}");
    let r = host
        .request(
            "channels/open",
            json!({"metadata": null, "address": null, "type": "zulip", "channelId": "zulip:x",
                   "history": {"limit": 20, "sinceLastSeen": true}}),
        )
        .await;
    assert_eq!(r["result"]["channel"]["id"], "zulip:x", "{r}");
    let r = host
        .request(
            "channels/publish",
            json!({"conversationId": "c", "channelId": "discord:x", "stream": false,
                   "content": [{"type": "text", "text": "hi", "annotations": {"audience": ["user"]},
                                "_meta": {"k": 1}}],
                   "tags": ["chat:reply"]}),
        )
        .await;
    assert_eq!(r["result"]["delivered"], true, "{r}");
    let r = host
        .request(
            "channels/publish",
            json!({"content": "plain string", "channelId": "zulip:x", "stream": null,
                   "conversationId": null}),
        )
        .await;
    assert_eq!(r["result"]["delivered"], true, "{r}");
    host.send(json!({"jsonrpc": "2.0", "method": "channels/publish",
                     "params": {"conversationId": "c", "channelId": "discord:x",
                                "content": [{"type": "text", "text": "fire and forget"}]}}))
        .await;
    for i in 0..2 {
        host.send(
            json!({"jsonrpc": "2.0", "method": "channels/outgoing/chunk",
                         "params": {"delta": "x", "index": i, "channelId": "discord:x",
                                    "conversationId": "c", "inferenceId": "i", "seq": i}}),
        )
        .await;
    }
    host.send(
        json!({"jsonrpc": "2.0", "method": "channels/outgoing/complete",
                     "params": {"inferenceId": "i", "conversationId": "c",
                                "channelId": "discord:x",
                                "content": [{"type": "text", "text": "xx", "_meta": {}}]}}),
    )
    .await;
    let r = host
        .request(
            "channels/close",
            json!({"channelId": "discord:x", "reason": null}),
        )
        .await;
    assert_eq!(r["result"]["closed"], true, "{r}");
    let codes = diagnostic_codes(&mut diags);
    let mut seen = log.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "chunk 0",
            "chunk 1",
            "complete discord:x",
            "publish discord:x",
            "publish discord:x",
            "publish zulip:x"
        ],
        "{codes:?}"
    );
}

/// §8.4 `tools/call` as a host that keeps state sends it: `state` data, a `checkpoint`
/// reference, both `null`, and MCP's `_meta`. Each reaches the tool.
#[tokio::test]
async fn s8_4_tool_calls_with_state_members_reach_the_tool() {
    let server = Server::builder("tools", "1.0.0")
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s, p| async move {
                let seen = json!({"state": p.state, "checkpoint": p.checkpoint});
                Ok(mcpl::protocol::handshake::ToolsCallResult {
                    content: vec![mcpl::protocol::handshake::ToolContent::text(
                        seen.to_string(),
                    )],
                    is_error: None,
                    state: None,
                    extra: Default::default(),
                })
            },
        )
        .build()
        .unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": ["tools"]})).await;
    let cases = [
        (
            json!({"name": "echo", "state": {"notes": [{"id": 1}]}, "arguments": {"t": 1}}),
            json!({"state": {"notes": [{"id": 1}]}, "checkpoint": null}),
        ),
        (
            json!({"checkpoint": "chk_def", "arguments": {}, "name": "echo", "_meta": {"progressToken": 3}}),
            json!({"state": null, "checkpoint": "chk_def"}),
        ),
        (
            json!({"name": "echo", "arguments": null, "state": null, "checkpoint": null}),
            json!({"state": null, "checkpoint": null}),
        ),
    ];
    for (params, want) in cases {
        let r = host.request("tools/call", params.clone()).await;
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let got: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        assert_eq!(got, want, "{params}: {r}");
    }
}

/// §17.4 `mcpl/manifest` with the params shapes hosts send (`{}`, absent, `null`, extra
/// members) is answered with the flat manifest (no `capabilities` wrapper, §17.1).
#[tokio::test]
async fn s17_4_manifest_requests_from_other_hosts_are_answered() {
    let server = hook_server().build().unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": [INJECT]})).await;
    for params in [json!({}), Value::Null, json!({"_meta": {"x": 1}})] {
        host.next_id += 1;
        let id = host.next_id;
        let mut req = json!({"jsonrpc": "2.0", "id": id, "method": "mcpl/manifest"});
        if !params.is_null() {
            req["params"] = params.clone();
        }
        host.send(req).await;
        let line = host.lines.next_line().await.unwrap().unwrap();
        let r: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(r["result"]["version"], "0.5", "{params}: {r}");
        assert!(r["result"].get("capabilities").is_none(), "{r}");
        assert!(r["result"]["featureSets"]["notes"].is_object(), "{r}");
    }
}

/// A policy list written as `null` is not a list of strings (§5.3): the Request is refused
/// `-32602` and grants nothing, so the server stays fail-closed rather than guessing whether
/// `"enabled": null` means "no constraint" or "nothing". Neither other library writes it
/// (both omit an absent list).
#[tokio::test]
async fn s5_3_a_policy_list_written_as_null_is_refused() {
    for member in [
        "effectiveCapabilities",
        "deniedCapabilities",
        "enabled",
        "disabled",
    ] {
        let server = hook_server().build().unwrap();
        let (mut host, session) = Host::connect(&server).await;
        host.initialize(host_caps()).await;
        let mut grant = json!({"effectiveCapabilities": [INJECT]});
        grant[member] = Value::Null;
        let r = host.request("featureSets/update", grant).await;
        assert_eq!(r["error"]["code"], -32602, "{member}: {r}");
        assert!(!session.granted(Capability::InjectBeforeUser), "{member}");
    }
}

/// §5.2 host advertisements as the other hosts write them — the TypeScript host's (MCP
/// client capabilities beside MCPL, `channels` still a boolean as its 0.2 library wrote it,
/// `inferenceRequest` an object, `clientInfo` with `title`), a minimal one, and one with
/// `null` members — all speak MCPL 0.5 with this server: its policy Request is answered with
/// a receipt and the grant it carries takes effect.
#[tokio::test]
async fn s5_2_host_advertisements_from_other_hosts_speak_mcpl() {
    let adverts = [
        json!({"roots": {"listChanged": true}, "sampling": {},
               "experimental": {"mcpl": {"version": "0.5", "pushEvents": true,
                   "contextHooks": {"beforeInference": true}, "inferenceLifecycle": true,
                   "inferenceRequest": {"streaming": true}, "channels": true,
                   "featureSets": true, "modelInfo": false}}}),
        json!({"experimental": {"mcpl": {"version": "0.5"}}}),
        json!({"experimental": {"mcpl": {"version": "0.5", "channels": null,
                                         "contextHooks": null, "featureSets": null},
                                "other": null}}),
    ];
    for caps in adverts {
        let server = hook_server().build().unwrap();
        let (mut host, session) = Host::connect(&server).await;
        let init = host
            .request(
                "initialize",
                json!({"protocolVersion": "2024-11-05", "capabilities": caps,
                       "clientInfo": {"name": "h", "title": "Host", "version": "1"}}),
            )
            .await;
        assert_eq!(
            init["result"]["capabilities"]["experimental"]["mcpl"]["version"], "0.5",
            "{init}"
        );
        host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        let r = host
            .request(
                "featureSets/update",
                json!({"effectiveCapabilities": [INJECT]}),
            )
            .await;
        assert_eq!(r["result"]["accepted"], true, "{caps}: {r}");
        assert!(session.is_mcpl(), "{caps}");
        assert!(session.granted(Capability::InjectBeforeUser), "{caps}");
    }
}

/// What older hosts of the other libraries still send: notifications this server does not
/// know (`branches/changed`, a `context/afterInference` notification, `$/progress`-style
/// names, a `notifications/cancelled` for no request) get no answer and leave the
/// connection working; removed or unhandled Requests (`context/afterInference`,
/// `scope/elevate`'s sibling `state/rollback` with no handler, `channels/list` with no
/// handler) are answered with an error, never silence (§14.3), and string ids are echoed.
#[tokio::test]
async fn older_host_traffic_is_answered_or_ignored_never_hung() {
    let server = hook_server().build().unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": [INJECT]})).await;
    for method in [
        "branches/changed",
        "context/afterInference",
        "featureSets/changed",
        "notifications/cancelled",
    ] {
        host.send(json!({"jsonrpc": "2.0", "method": method,
                         "params": {"event": "created", "branch": "b", "requestId": 99}}))
            .await;
    }
    let r = host.request("ping", json!({})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    for method in ["context/afterInference", "state/rollback", "channels/list"] {
        let r = host
            .request(
                method,
                json!({"featureSet": "notes", "checkpoint": "c", "inferenceId": "i"}),
            )
            .await;
        assert!(r["error"]["code"].is_i64(), "{method}: {r}");
    }
    host.send(
        json!({"jsonrpc": "2.0", "id": "req-a", "method": "context/beforeInference",
                     "params": {"inferenceId": "i", "conversationId": "c", "turnIndex": 0}}),
    )
    .await;
    let line = host.lines.next_line().await.unwrap().unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["id"], "req-a", "{r}");
    assert_eq!(r["result"]["featureSet"], "notes", "{r}");
}

/// §5.4 / §6.7 grant lists a host may legally send: paths this server never heard of (a
/// newer vocabulary), one-segment wildcards, `disabled` naming a set this server does not
/// declare, a §6.3 wildcard in `enabled` — each accepted. A wildcard in `disabled` subtracts
/// (§6.3). A present empty `enabled` is an allowlist of nothing (§5.3):
/// the hook's set is disabled, so it injects nothing.
#[tokio::test]
async fn s5_4_grant_lists_with_unknown_paths_and_names_are_accepted() {
    let cases = [
        (
            json!({"effectiveCapabilities": [INJECT, "futureThing.x", "channels.*", "*"]}),
            true,
        ),
        (
            json!({"effectiveCapabilities": [INJECT], "disabled": ["not.declared"]}),
            true,
        ),
        (
            json!({"effectiveCapabilities": ["contextHooks.beforeInference.*.beforeUser"]}),
            true,
        ),
        (
            json!({"effectiveCapabilities": [INJECT], "enabled": ["*"]}),
            true,
        ),
        (
            json!({"effectiveCapabilities": [INJECT], "enabled": []}),
            false,
        ),
        (
            json!({"effectiveCapabilities": [INJECT], "disabled": ["*"]}),
            false,
        ),
        (json!({"effectiveCapabilities": ["contextHooks.*"]}), false),
    ];
    for (grant, served) in cases {
        let server = hook_server().build().unwrap();
        let (mut host, _s) = ready(&server, grant.clone()).await;
        let r = host
            .request(
                "context/beforeInference",
                json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0}),
            )
            .await;
        let injected = r["result"]["contextInjections"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        assert_eq!(injected, served, "{grant}: {r}");
    }
}

/// App. B.1 content on `channels/publish` as hosts write it: media by `uri` (with or without
/// `mimeType`), inline audio, a `resource` with members beyond `uri`, blocks with MCP's
/// `annotations`: all delivered. A block outside B.1's closed `oneOf` (MCP's nested
/// `resource`, a media block with both forms) is refused `-32602`.
#[tokio::test]
async fn b1_content_blocks_from_hosts_are_read_as_b1_says() {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let server = channel_server(log);
    let (mut host, _s) = ready(&server, serde_json::from_str(CHANNEL_GRANT).unwrap()).await;
    // §14.6: publish names a channel the server opened.
    let r = host.request("channels/open", json!({"type": "a"})).await;
    assert_eq!(r["result"]["channel"]["id"], "a:x", "{r}");
    let good = json!([
        {"type": "image", "uri": "https://x/y.png"},
        {"type": "image", "uri": "https://x/y.png", "mimeType": "image/png", "annotations": {}},
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "resource", "uri": "memory://1", "mimeType": "text/plain", "text": "t"},
        {"type": "text", "text": "", "annotations": {"priority": 0.5}}
    ]);
    let r = host
        .request(
            "channels/publish",
            json!({"conversationId": "c", "channelId": "a:x", "content": good}),
        )
        .await;
    assert_eq!(r["result"]["delivered"], true, "{r}");
    for bad in [
        json!({"type": "resource", "resource": {"uri": "memory://1", "text": "t"}}),
        json!({"type": "image", "uri": "u", "data": "AAAA", "mimeType": "image/png"}),
        json!({"type": "text"}),
    ] {
        let r = host
            .request(
                "channels/publish",
                json!({"conversationId": "c", "channelId": "a:x", "content": [bad]}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
}

impl Host {
    /// Reads the next frame (a request the server sent) and answers it with `result`;
    /// returns the request.
    async fn answer(&mut self, result: Value) -> Value {
        let line = self.lines.next_line().await.unwrap().expect("a request");
        let req: Value = serde_json::from_str(&line).unwrap();
        self.send(json!({"jsonrpc": "2.0", "id": req["id"].clone(), "result": result}))
            .await;
        req
    }
}

/// The results the other hosts answer the server's requests with: the TypeScript host's
/// `push/event` refusal as a result (§9.3, with `inferenceId: null` and members of its
/// own), its `channels/register` result carrying the legacy `registered` beside §14.5's
/// `results`, and an `inference/request` result (§11.3) with token counts as floats and a
/// `finishReason` outside App. B.4. Each is read as the spec says.
#[tokio::test]
async fn s9_3_s14_5_s11_3_host_results_from_other_hosts_are_read() {
    use mcpl::protocol::channels::ChannelDescriptor;
    use mcpl::protocol::inference::{InferenceMessage, InferenceRequestParams};
    use mcpl::server::PushEvent;
    let server = Server::builder("out", "1.0.0")
        .feature_set(
            "alerts",
            "Alerts",
            &[
                Capability::PushEvents,
                Capability::ChannelsRegister,
                Capability::InferenceRequest,
            ],
        )
        .build()
        .unwrap();
    let grant =
        json!({"effectiveCapabilities": ["pushEvents", "channels.register", "inferenceRequest"]});
    let (mut host, session) = ready(&server, grant).await;

    let s = session.clone();
    let push = tokio::spawn(async move { s.push_event(PushEvent::text("alerts", "x")).await });
    let req = host
        .answer(
            json!({"reason": "feature set disabled", "inferenceId": null, "accepted": false,
                       "hostNote": 1}),
        )
        .await;
    assert_eq!(req["method"], "push/event");
    let r = push.await.unwrap().unwrap();
    assert!(!r.accepted);
    assert_eq!(r.reason.as_deref(), Some("feature set disabled"));

    let s = session.clone();
    let reg = tokio::spawn(async move {
        s.channels_register(vec![ChannelDescriptor::new("discord:#g", "discord")])
            .await
    });
    host.answer(json!({"registered": ["discord:#g"],
                       "results": [{"id": "discord:#g", "accepted": true, "reason": null}]}))
        .await;
    let r = reg.await.unwrap().unwrap();
    assert!(r.results.iter().all(|i| i.accepted), "{r:?}");
    assert_eq!(session.channels().len(), 1);

    let s = session.clone();
    let inf = tokio::spawn(async move {
        s.inference_request(InferenceRequestParams::new(
            "alerts",
            [InferenceMessage::user("hi")],
        ))
        .await
    });
    host.answer(
        json!({"content": "hello", "model": "m", "finishReason": "tool_use",
                       "usage": {"inputTokens": 10.0, "outputTokens": 2}}),
    )
    .await;
    let r = inf.await.unwrap().unwrap();
    assert_eq!(r.usage.and_then(|u| u.input_tokens), Some(10));
}

/// MCP lets a client send requests once `initialize` is answered; `notifications/initialized`
/// may follow them. A host that sends its policy Request (§5.3) and a hook before the
/// notification is served, and the late notification changes nothing.
#[tokio::test]
async fn s5_3_a_policy_request_before_notifications_initialized_is_served() {
    let server = hook_server().build().unwrap();
    let (mut host, session) = Host::connect(&server).await;
    let init = host
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": host_caps(),
                   "clientInfo": {"name": "eager", "version": "1"}}),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    let r = host
        .request(
            "featureSets/update",
            json!({"effectiveCapabilities": [INJECT]}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    let r = host
        .request(
            "context/beforeInference",
            json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0}),
        )
        .await;
    assert_eq!(
        r["result"]["contextInjections"][0]["namespace"], "notes",
        "{r}"
    );
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let r = host.request("ping", json!({})).await;
    assert_eq!(r["result"], json!({}));
    assert!(session.granted(Capability::InjectBeforeUser));
}

/// MCP list and call params as hosts send them: `cursor: null`, `_meta`, absent params, a
/// call without `arguments`. Each is answered with a result.
#[tokio::test]
async fn mcp_list_and_call_params_from_other_hosts_are_served() {
    let server = Server::builder("tools", "1.0.0")
        .tool("t", "T", json!({"type": "object"}), |_s, _p| async move {
            Ok(mcpl::protocol::handshake::ToolsCallResult {
                content: vec![mcpl::protocol::handshake::ToolContent::text("ok")],
                is_error: None,
                state: None,
                extra: Default::default(),
            })
        })
        .build()
        .unwrap();
    let (mut host, _s) = ready(&server, json!({"effectiveCapabilities": ["tools"]})).await;
    for params in [
        json!({"cursor": null}),
        json!({"_meta": {"progressToken": "p"}}),
        json!({}),
    ] {
        let r = host.request("tools/list", params.clone()).await;
        assert_eq!(r["result"]["tools"][0]["name"], "t", "{params}: {r}");
    }
    host.next_id += 1;
    let id = host.next_id;
    host.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
        .await;
    let line = host.lines.next_line().await.unwrap().unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["result"]["tools"][0]["name"], "t", "{r}");
    let r = host.request("tools/call", json!({"name": "t"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "ok", "{r}");
}

/// A pre-0.5 host's `channels/register` result carries only `registered` (the TypeScript
/// library's legacy field), no §14.5 itemized `results`. The server must not read that as
/// registering anything it cannot see a verdict for: the call fails and no channel counts
/// as registered.
#[tokio::test]
async fn s14_5_a_register_result_without_itemized_results_registers_nothing() {
    use mcpl::protocol::channels::ChannelDescriptor;
    let server = Server::builder("out", "1.0.0")
        .feature_set("chat", "Chat", &[Capability::ChannelsRegister])
        .build()
        .unwrap();
    let (mut host, session) = ready(
        &server,
        json!({"effectiveCapabilities": ["channels.register"]}),
    )
    .await;
    let s = session.clone();
    let reg = tokio::spawn(async move {
        s.channels_register(vec![ChannelDescriptor::new("discord:#g", "discord")])
            .await
    });
    host.answer(json!({"registered": ["discord:#g"]})).await;
    let r = reg.await.unwrap();
    assert!(
        r.as_ref()
            .map_or(true, |r| r.results.iter().all(|i| !i.accepted)),
        "{r:?}"
    );
    assert!(session.channels().is_empty(), "{:?}", session.channels());
}
