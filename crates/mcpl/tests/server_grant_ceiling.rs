//! §5.4 at the server: the grant a host sends is the intersection of the server's
//! advertisement and host policy, and "advertisement is an input, never an authorization".
//! A host breaking that rule may name in `effectiveCapabilities` paths this server never
//! advertised; the server's effective grant is the intersection with its own advertisement
//! (fail closed), the excess is reported as a typed host defect, and a later use of an
//! unadvertised path is refused as if never granted. A raw host writes JSON lines over an
//! in-memory pipe, so every frame is under test.
#![cfg(feature = "runtime")]

use mcpl::capability::{Capability, CapabilitySet, Denied};
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{DiagnosticKind, Server, ServerDiagnostic as D, Session};
use mcpl::session::Refusal;
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

/// The host's end: raw JSON lines over an in-memory pipe.
struct RawHost {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    next_id: u64,
}

impl RawHost {
    /// Starts `server` on one end of a pipe; returns the other end and the session.
    fn start(server: &Server) -> (Self, Session) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let session = server.start(Transport::lines(br, bw, "test"));
        let host = RawHost {
            lines: BufReader::new(ar).lines(),
            write: aw,
            next_id: 0,
        };
        (host, session)
    }

    async fn send(&mut self, v: Value) {
        let line = format!("{v}\n");
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// Sends a request and returns its response (skipping the server's own messages).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self.lines.next_line().await.unwrap().expect("a frame");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("method").is_none() && v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// Reads frames until the server's notification `method`, and returns it.
    async fn notified(&mut self, method: &str) -> Value {
        loop {
            let line = self.lines.next_line().await.unwrap().expect("a frame");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["method"] == method && v.get("id").is_none() {
                return v;
            }
        }
    }
}

/// A server advertising `pushEvents` (its one feature set) and `tools` (its one tool), and
/// nothing else.
fn server() -> Server {
    Server::builder("alerts", "1.0.0")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .tool("echo", "Echo", json!({"type": "object"}), |_s, _p| async {
            Ok(ToolsCallResult::text("echo"))
        })
        .build()
        .unwrap()
}

fn set(cs: &[Capability]) -> CapabilitySet {
    cs.iter().copied().collect()
}

/// §5.4: a grant naming `channels.lifecycle` and `inferenceLifecycle` (never advertised) and
/// reaching the inject leaves with a `*` pattern is narrowed to the advertisement; the
/// excess is one `grant_beyond_advertisement` host defect; the host's later `channels/open`
/// is `-32002` naming `channels.lifecycle` and its `inference/lifecycle` is refused, as if
/// never granted; the session reads only the advertised paths as granted.
#[tokio::test]
async fn s5_4_a_grant_beyond_the_advertisement_is_narrowed_reported_and_its_use_refused() {
    let (mut host, session) = RawHost::start(&server());
    let mut diags = session.diagnostics();
    let init = host
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "raw-host", "version": "0"}}),
        )
        .await;
    assert!(init["result"].is_object(), "{init}");
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let receipt = host
        .request(
            "featureSets/update",
            json!({"effectiveCapabilities": ["tools", "pushEvents", "channels.lifecycle",
                                             "inferenceLifecycle",
                                             "contextHooks.beforeInference.inject.*"],
                   "enabled": ["alerts", "ghost"]}),
        )
        .await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let open = host
        .request("channels/open", json!({"type": "discord", "address": {}}))
        .await;
    assert_eq!(open["error"]["code"], -32002, "{open}");
    assert_eq!(
        open["error"]["data"]["capability"], "channels.lifecycle",
        "{open}"
    );
    host.send(json!({"jsonrpc": "2.0", "method": "inference/lifecycle",
                     "params": {"inferenceId": "i1", "phase": "started"}}))
        .await;
    // In order behind everything above.
    host.request("ping", json!({})).await;

    assert!(session.granted(Capability::PushEvents));
    assert!(session.granted(Capability::Tools));
    for c in [
        Capability::ChannelsLifecycle,
        Capability::InferenceLifecycle,
        Capability::InjectSystem,
    ] {
        assert!(!session.granted(c), "{c} read as granted");
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(diags.recv().await.unwrap());
    }
    let beyond = &seen[0];
    assert_eq!(
        *beyond,
        D::GrantBeyondAdvertisement {
            named: set(&[
                Capability::ChannelsLifecycle,
                Capability::InferenceLifecycle
            ]),
            by_pattern: set(&[
                Capability::InjectSystem,
                Capability::InjectBeforeUser,
                Capability::InjectAfterUser
            ]),
        }
    );
    assert_eq!(beyond.code(), "grant_beyond_advertisement");
    assert_eq!(beyond.kind(), DiagnosticKind::PeerDefect);
    let text = beyond.to_string();
    for needle in ["channels.lifecycle", "inferenceLifecycle", "§5.4"] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    // An `enabled` entry naming no declared set was reported already (§5.3).
    assert_eq!(seen[1].code(), "unknown_feature_set");
    assert_eq!(
        seen[2],
        D::NotificationDenied {
            method: "inference/lifecycle".into(),
            refusal: Refusal::Denied(Denied {
                capability: Capability::InferenceLifecycle
            }),
        }
    );
}

/// A grant whose only excess comes from `*` patterns (`channels.*` where the server
/// advertises no channels leaf) is narrowed alike, and reported as a `Notice`: a pattern
/// resolves against the vocabulary, not the advertisement, so reaching past it is the
/// deny-safe reading of §5.4 at work rather than a path the host named. A grant within the
/// advertisement reports nothing.
#[tokio::test]
async fn s5_4_excess_reached_only_by_a_pattern_is_a_notice_and_an_exact_grant_is_silent() {
    let (mut host, session) = RawHost::start(&server());
    let mut diags = session.diagnostics();
    host.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18",
               "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
               "clientInfo": {"name": "raw-host", "version": "0"}}),
    )
    .await;
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    host.request(
        "featureSets/update",
        json!({"effectiveCapabilities": ["tools", "pushEvents", "channels.*"]}),
    )
    .await;
    host.request(
        "featureSets/update",
        json!({"effectiveCapabilities": ["tools", "pushEvents"]}),
    )
    .await;
    // A host defect after both, so the reading below ends.
    host.send(json!({"jsonrpc": "2.0", "method": "no/such"}))
        .await;
    host.request("ping", json!({})).await;
    let first = diags.recv().await.unwrap();
    assert_eq!(first.code(), "grant_beyond_advertisement");
    assert_eq!(first.kind(), DiagnosticKind::Notice);
    assert!(!session.granted(Capability::ChannelsPublish));
    assert_eq!(diags.recv().await.unwrap().code(), "unknown_notification");
}

/// The sans-I/O `ServerState` (which `Server` drives) reports the same value, reads `tools`
/// as advertised only when its MCP capabilities carry it, and keeps the grant in force
/// within the manifest in force: a manifest change that stops advertising a path takes it
/// out of the grant at once (§5.4, §6.7: reductions first), and advertising it again
/// grants nothing until a later policy Request does (§17.5 step 3: additions never
/// auto-grant; this test read the host's last grant as restored before §17.5 was applied).
#[test]
fn s5_4_the_sans_io_server_keeps_the_grant_within_the_manifest_in_force() {
    use mcpl::jsonrpc::Message;
    use mcpl::manifest::ManifestChanged;
    use mcpl::session::{ServerOutput, ServerRules, ServerState};
    use std::time::Instant;

    let sets = json!({"alerts": {"description": "Alerts", "uses": ["pushEvents"]}});
    let manifest = |push: bool| json!({"version": "0.5", "pushEvents": push, "featureSets": sets});
    let mut server = ServerState::new(
        ServerRules::new(json!({"name": "s", "version": "1"}), manifest(true)).unwrap(),
    );
    let now = Instant::now();
    let feed = |server: &mut ServerState, v: Value| {
        server.handle_message(now, Message::parse(&v.to_string()).unwrap());
        let mut diags = Vec::new();
        while let Some(o) = server.poll_output() {
            if let ServerOutput::Diagnostic(d) = o {
                diags.push(d);
            }
        }
        diags
    };
    feed(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18",
                          "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}}}),
    );
    feed(
        &mut server,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let diags = feed(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
               "params": {"effectiveCapabilities": ["tools", "pushEvents"]}}),
    );
    // No MCP `tools` capability: `tools` is not advertised.
    assert_eq!(
        diags,
        [D::GrantBeyondAdvertisement {
            named: set(&[Capability::Tools]),
            by_pattern: CapabilitySet::EMPTY,
        }]
    );
    assert_eq!(
        server.grant().capabilities(),
        set(&[Capability::PushEvents])
    );
    let change = || ManifestChanged {
        revision: "sha256:x".into(),
        domains: vec![],
    };
    server.manifest_changed(manifest(false), change());
    assert!(server.grant().capabilities().is_empty());
    assert!(!server.feature_sets()["alerts"].is_available());
    server.manifest_changed(manifest(true), change());
    assert!(server.grant().capabilities().is_empty());
    assert!(!server.feature_sets()["alerts"].is_available());
    feed(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 3, "method": "featureSets/update",
               "params": {"effectiveCapabilities": ["pushEvents"]}}),
    );
    assert_eq!(
        server.grant().capabilities(),
        set(&[Capability::PushEvents])
    );
    assert!(server.feature_sets()["alerts"].is_available());
}

/// `policy::ServerPolicyState` itself: the ceiling narrows a Request's grant and its
/// receipt (a set using an unadvertised path is `capability_denied`), a Notification
/// reports no excess, and `new` counts every path as advertised until told.
#[test]
fn s5_4_the_policy_state_grants_within_its_advertisement() {
    use mcpl::policy::{FeatureSets, Form, ServerPolicyState};

    let (sets, _) = FeatureSets::parse(&json!({
        "alerts": {"description": "Alerts", "uses": ["pushEvents"]},
        "turns": {"description": "Turns", "uses": ["inferenceLifecycle"]}
    }));
    let grant = json!({"effectiveCapabilities": ["pushEvents", "inferenceLifecycle"]});
    let mut open = ServerPolicyState::new(sets.clone(), CapabilitySet::ALL);
    let o = open.apply(Form::Request, &grant).unwrap();
    assert!(o.excess.is_empty());
    assert!(open.is_available("turns"));

    let mut state = ServerPolicyState::new(sets, CapabilitySet::ALL);
    state.set_advertised(set(&[Capability::PushEvents]));
    let o = state.apply(Form::Request, &grant).unwrap();
    assert_eq!(o.excess.named, set(&[Capability::InferenceLifecycle]));
    assert!(state.is_available("alerts"));
    assert!(!state.is_available("turns"));
    let receipt = o.receipt.unwrap().to_value();
    assert_eq!(
        receipt["unavailableFeatures"][0]["featureSet"], "turns",
        "{receipt}"
    );
    let o = state
        .apply(Form::Notification, &json!({"disabled": ["alerts"]}))
        .unwrap();
    assert!(o.excess.is_empty());
}

/// `GrantExcess::of`, the one §5.4 reading the server and `mcpl check-host` share: an exact
/// unadvertised path is named; what only a `*` pattern reaches past the advertisement is
/// by pattern; a malformed entry reaches nothing.
#[test]
fn s5_4_the_excess_of_a_grants_entries_over_an_advertisement() {
    use mcpl::policy::GrantExcess;
    let advertised = set(&[Capability::PushEvents, Capability::ChannelsPublish]);
    let e = GrantExcess::of(
        &[
            "pushEvents",
            "inferenceLifecycle",
            "channels.*",
            "no such path",
            "",
        ],
        advertised,
    );
    assert_eq!(e.named, set(&[Capability::InferenceLifecycle]));
    assert!(
        e.by_pattern.contains(Capability::ChannelsLifecycle),
        "{e:?}"
    );
    assert!(!e.by_pattern.contains(Capability::ChannelsPublish), "{e:?}");
    assert!(
        !e.by_pattern.contains(Capability::InferenceLifecycle),
        "{e:?}"
    );
    assert!(GrantExcess::of(&["pushEvents"], advertised).is_empty());
}

/// §17.5 step 3 on the sans-I/O `ServerState`: a host grant holding `channels.*` while the
/// server advertises only `channels.lifecycle` grants that leaf; a manifest change that adds
/// `channels.publish` puts nothing new in force (the host's `channels/publish` is still
/// `-32002`), nor does a later change that only narrows (no revival of the old pattern's
/// reach); removals narrow at once; only the next policy Request grants the addition.
#[test]
fn s17_5_an_addition_by_a_manifest_change_is_granted_only_by_a_later_policy_request() {
    use mcpl::jsonrpc::Message;
    use mcpl::manifest::ManifestChanged;
    use mcpl::session::{ServerRules, ServerState};
    use std::time::Instant;

    let sets = json!({"alerts": {"description": "Alerts", "uses": ["pushEvents"]}});
    let manifest = |push: bool, channels: Value| json!({"version": "0.5", "pushEvents": push, "channels": channels, "featureSets": sets});
    let mut server = ServerState::new(
        ServerRules::new(
            json!({"name": "s", "version": "1"}),
            manifest(true, json!({"lifecycle": true})),
        )
        .unwrap(),
    );
    let now = Instant::now();
    // Feeds `v`, answers what is handed out `{}`, and returns the frames written.
    let feed = |server: &mut ServerState, v: Value| {
        server.handle_message(now, Message::parse(&v.to_string()).unwrap());
        let mut frames = Vec::new();
        while let Some(o) = server.poll_output() {
            if let Some(f) = o.frame() {
                frames.push(serde_json::from_str::<Value>(&f).unwrap());
            }
        }
        frames
    };
    feed(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18",
                          "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}}}),
    );
    feed(
        &mut server,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let grant = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update",
               "params": {"effectiveCapabilities": ["pushEvents", "channels.*"]}})
    };
    let publish = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "channels/publish",
               "params": {"channelId": "c1", "content": [{"type": "text", "text": "hi"}]}})
    };
    let code_of = |frames: Vec<Value>, id: u64| {
        let r = frames
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id} in {frames:?}"));
        (
            r["error"]["code"].clone(),
            r["error"]["data"]["capability"].clone(),
        )
    };
    feed(&mut server, grant(2));
    assert_eq!(
        server.grant().capabilities(),
        set(&[Capability::PushEvents, Capability::ChannelsLifecycle])
    );
    let change = || ManifestChanged {
        revision: "sha256:x".into(),
        domains: vec![],
    };
    server.manifest_changed(
        manifest(true, json!({"lifecycle": true, "publish": true})),
        change(),
    );
    assert_eq!(
        server.grant().capabilities(),
        set(&[Capability::PushEvents, Capability::ChannelsLifecycle])
    );
    assert_eq!(
        code_of(feed(&mut server, publish(3)), 3),
        (json!(-32002), json!("channels.publish"))
    );
    // A removal narrows at once, and revives nothing the old pattern reached.
    server.manifest_changed(manifest(false, json!({"publish": true})), change());
    assert!(server.grant().capabilities().is_empty());
    server.manifest_changed(
        manifest(true, json!({"lifecycle": true, "publish": true})),
        change(),
    );
    assert!(server.grant().capabilities().is_empty());
    assert_eq!(
        code_of(feed(&mut server, publish(4)), 4),
        (json!(-32002), json!("channels.publish"))
    );
    // The policy Request that grants it puts it in force.
    let receipt = feed(&mut server, grant(5));
    assert!(receipt
        .iter()
        .any(|f| f["id"] == 5 && f["result"]["accepted"] == true));
    assert_eq!(
        server.grant().capabilities(),
        set(&[
            Capability::PushEvents,
            Capability::ChannelsLifecycle,
            Capability::ChannelsPublish
        ])
    );
    assert_eq!(
        code_of(feed(&mut server, publish(6)), 6),
        (json!(-32023), Value::Null)
    );
}

/// §17.5 step 3 over the wire: the host's grant holds `channels.*` while the server
/// advertises no channels leaf; after the server's manifest adds `channels.publish` (and
/// the host has read the `mcpl/manifestChanged`), the host's `channels/publish` is still
/// refused `-32002` as never granted, until the host sends a policy Request granting it;
/// then it reaches the channel rule (`-32023`, no such channel held).
#[tokio::test]
async fn s17_5_a_host_use_of_a_capability_added_by_a_manifest_change_waits_for_a_policy_request() {
    let server = server();
    let (mut host, session) = RawHost::start(&server);
    host.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18",
               "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
               "clientInfo": {"name": "raw-host", "version": "0"}}),
    )
    .await;
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let grant = json!({"effectiveCapabilities": ["tools", "pushEvents", "channels.*"]});
    let receipt = host.request("featureSets/update", grant.clone()).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let publish = json!({"channelId": "c1", "content": [{"type": "text", "text": "hi"}]});
    let r = host.request("channels/publish", publish.clone()).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");

    server
        .tracker()
        .transaction(|m| m["channels"] = json!({"publish": true}))
        .unwrap();
    host.notified("mcpl/manifestChanged").await;
    let r = host.request("channels/publish", publish.clone()).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["capability"], "channels.publish", "{r}");
    assert!(!session.granted(Capability::ChannelsPublish));

    let receipt = host.request("featureSets/update", grant).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let r = host.request("channels/publish", publish).await;
    assert_eq!(r["error"]["code"], -32023, "{r}");
    assert!(session.granted(Capability::ChannelsPublish));
}
