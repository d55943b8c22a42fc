//! The host against the shapes servers built on the other MCPL libraries (`Anarchid/mcpl-core`,
//! the TypeScript `mcpl-core-ts`) put on the wire: a `HostSession` over a real line transport,
//! the server spoken for in raw JSON lines so every byte (member order, `1.0`, `null`) is the
//! test's. Each test names the shape, the library that sends it, and the SPEC section that
//! decides whether the host must take it.
//!
//! Reading for `null` (the spec is silent): an optional member written as `null` — what a
//! serializer without "skip if absent" writes — is read as absent, never as a wrong type.
//! Reading for numbers: JSON has one number type, so `100.0` is the integer 100 wherever the
//! spec types a member `integer` (JSON Schema reads it so too).
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{
    before_inference, HostConfig, HostDiagnostic, HostEvent, HostSession, HostStreams,
    McpOnlyReason, Mode,
};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

/// The scripted server: raw lines, and the next id of its own requests.
struct Srv {
    raw: Raw,
    next: u64,
}

impl Srv {
    async fn recv(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(10), self.raw.recv())
            .await
            .expect("the host sent nothing")
    }

    /// Sends request `method` with `params` written exactly as `params` (raw JSON text) and
    /// returns the host's response.
    async fn call_text(&mut self, method: &str, params: &str) -> Value {
        self.next += 1;
        let id = self.next;
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        self.raw.send(&line).await;
        loop {
            let v = self.recv().await;
            if v.get("method").is_none() && v["id"] == json!(id) {
                return v;
            }
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.call_text(method, &params.to_string()).await
    }
}

fn cfg(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        policy_timeout: Duration::from_secs(30),
        hook_timeout: Duration::from_secs(30),
        // Served, so grantable (`HostConfig::request_handler`, §5.4).
        request_handler: Some(std::sync::Arc::new(|_m: &str, _p: serde_json::Value| {
            Box::pin(async { Ok(serde_json::json!({"model": "m"})) })
        })),
        ..HostConfig::default()
    }
}

/// Connects a host configured by `config` to a server answering `initialize` with
/// `init` (raw JSON text of the result) and the initial policy Request with `receipt` (raw
/// JSON text).
async fn connect_text(
    config: HostConfig,
    init: &str,
    receipt: &str,
) -> (HostSession, HostStreams, Srv) {
    let (peer, incoming, raw) = raw_peer(Default::default());
    let mut srv = Srv { raw, next: 1000 };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, config));
    let i = srv.recv().await;
    assert_eq!(i["method"], "initialize");
    srv.raw
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{init}}}"#,
            i["id"]
        ))
        .await;
    let mut p = srv.recv().await;
    if p["method"] == "notifications/initialized" {
        p = srv.recv().await;
    }
    assert_eq!(p["method"], "featureSets/update");
    srv.raw
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{receipt}}}"#,
            p["id"]
        ))
        .await;
    // A host that told more than it keeps sends the reduction before it is up (§6.7): the
    // server acknowledges it.
    let mut connect = connect;
    loop {
        tokio::select! {
            up = &mut connect => {
                let (s, streams) = up.unwrap().expect("the host connects");
                return (s, streams, srv);
            }
            v = srv.raw.recv() => {
                if v["method"] == "featureSets/update" {
                    let id = &v["id"];
                    srv.raw
                        .send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"accepted":true}}}}"#))
                        .await;
                }
            }
        }
    }
}

async fn connect(
    policy: &[&str],
    manifest: Value,
    receipt: &str,
) -> (HostSession, HostStreams, Srv) {
    let init = init_result(Some(manifest)).to_string();
    connect_text(cfg(policy), &init, receipt).await
}

const ALL: &[&str] = &["*", "*.*", "*.*.*", "*.*.*.*"];

/// A manifest as a server of either library writes it at 0.5: the feature set keeps the
/// members both libraries still serialize (`name`, `rollback`, `hostState`), `inferenceRequest`
/// is the object form, `channels` lists its seven leaves, and a vendor member rides along.
fn library_manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "modelInfo": true,
        "inferenceRequest": { "streaming": false },
        "inferenceLifecycle": true,
        "contextHooks": { "beforeInference": true },
        "channels": { "register": true, "lifecycle": true, "publish": true, "incoming": true,
                      "streaming": false, "acknowledge": true, "typing": true },
        "x-acme": { "build": 7 },
        "featureSets": {
            "alerts": { "name": "alerts", "description": "Alerts", "uses": ["pushEvents"],
                        "rollback": false, "hostState": false },
            "assist": { "description": "Assist", "uses": ["inferenceRequest"] },
            "memory": { "description": "Memory",
                        "uses": ["contextHooks.beforeInference.observe",
                                 "contextHooks.beforeInference.inject.beforeUser"] }
        }
    })
}

/// §5.1, §6.2, §8 (hosts MUST tolerate unknown response fields): the library manifest is read
/// as written — the legacy feature-set members and the vendor member advertise nothing and
/// refuse nothing; `inferenceRequest: {streaming: false}` advertises the base path only.
#[tokio::test]
async fn library_manifest_with_extra_members_is_read() {
    let (s, _st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    assert_eq!(s.mode(), Mode::Mcpl);
    let g = s.grant();
    for c in [
        Capability::PushEvents,
        Capability::ModelInfo,
        Capability::InferenceRequest,
        Capability::ChannelsAcknowledge,
        Capability::ChannelsTyping,
        Capability::Observe,
        Capability::InjectSystem,
    ] {
        assert!(g.allows(c), "{c} not granted");
    }
    assert!(!g.allows(Capability::InferenceRequestStreaming));
    assert!(!g.allows(Capability::ChannelsStreaming));
    let r = srv.call("push/event", push_params()).await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
}

fn push_params() -> Value {
    json!({ "featureSet": "alerts", "eventId": "e1", "timestamp": "2026-01-23T10:30:00.123Z",
            "payload": { "content": [{ "type": "text", "text": "hi" }] } })
}

/// §6.7 receipts as the libraries write them. Every one is a usable accepting receipt: the
/// host is ready in MCPL mode and keeps it.
#[tokio::test]
async fn accepting_receipts_of_either_library_are_taken() {
    for receipt in [
        r#"{"accepted":true}"#,
        r#"{"accepted":true,"unavailableFeatures":[],"notes":[]}"#,
        r#"{"notes":[],"unavailableFeatures":[],"accepted":true,"x-vendor":{"a":1}}"#,
        // Optional members written as null (serde without skip_serializing_if).
        r#"{"accepted":true,"mode":null,"unavailableFeatures":null,"notes":null,"reason":null}"#,
        r#"{"accepted":true,"mode":"degraded","unavailableFeatures":[{"featureSet":"assist","missingCapabilities":null,"effect":"disabled","reason":null}]}"#,
        r#"{"accepted":true,"mode":"degraded","unavailableFeatures":[{"effect":"disabled","featureSet":"assist","missingCapabilities":["inferenceRequest"],"extra":true}]}"#,
    ] {
        let (s, _st, _srv) = connect(ALL, library_manifest(), receipt).await;
        assert_eq!(s.mode(), Mode::Mcpl, "{receipt}");
        assert!(s.is_ready(), "{receipt}");
        assert!(s.last_receipt().is_some(), "receipt not usable: {receipt}");
    }
}

/// §6.7: a refusal with `fallback` is usable with its optional members `null`.
#[tokio::test]
async fn refusal_with_null_optionals_names_its_fallback() {
    let receipt =
        r#"{"accepted":false,"fallback":"mcp-only","missingCapabilities":null,"reason":null}"#;
    let init = init_result(Some(library_manifest())).to_string();
    let (s, _st, _srv) = connect_text(cfg(ALL), &init, receipt).await;
    assert!(
        s.last_receipt().is_some_and(|r| !r.is_accepted()),
        "refusal not read: {:?}",
        s.last_receipt()
    );
    assert!(matches!(s.mode(), Mode::McpOnly(_)), "{:?}", s.mode());
}

/// §9.2: `push/event` as the libraries send it — member order, a millisecond timestamp
/// (`Date.toISOString()`), optional `origin`/`tags` as `null`, extra members on the params,
/// the payload and the blocks (Draft §19 extras: tolerated, never required).
#[tokio::test]
async fn push_event_shapes_of_either_library_are_admitted() {
    let (_s, mut st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    let shapes = [
        r#"{"payload":{"content":[{"type":"text","text":"hi"}]},"timestamp":"2026-01-23T10:30:00.123Z","eventId":"a1","featureSet":"alerts"}"#,
        r#"{"featureSet":"alerts","eventId":"a2","timestamp":"2026-01-23T10:30:00Z","origin":null,"tags":null,"payload":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"featureSet":"alerts","eventId":"a3","timestamp":"2026-01-23T10:30:00Z","origin":{"source":"discord","channel":"x"},"payload":{"content":[{"type":"text","text":"hi","annotations":{"priority":0.5},"_meta":{"k":1}},{"type":"image","uri":"https://x.test/a.png"}],"extra":1},"x-vendor":true}"#,
        r#"{"featureSet":"alerts","eventId":"a4","timestamp":"2026-01-23T10:30:00Z","payload":{"content":[{"type":"image","uri":"https://x.test/a.png","mimeType":null,"data":null},{"type":"text","text":"t","annotations":null}]}}"#,
    ];
    for (i, p) in shapes.iter().enumerate() {
        let r = srv.call_text("push/event", p).await;
        assert_eq!(r["result"]["accepted"], true, "shape {i}: {r}");
        assert!(
            matches!(st.events.recv().await, Some(HostEvent::Push { .. })),
            "shape {i}"
        );
        // Reported before the answer is written: none of these shapes is a tag defect.
        while let Ok(d) = st.diagnostics.try_recv() {
            assert!(
                !matches!(d, HostDiagnostic::TagIssue { .. }),
                "shape {i}: {d:?}"
            );
        }
    }
}

/// §6.5, §10.4: hook answers as the libraries write them — `contextInjections` with the
/// string and block forms, `metadata` absent, `null` or an object, extra members.
#[tokio::test]
async fn hook_answers_of_either_library_are_judged_by_position() {
    let (s, _st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    let s2 = s.clone();
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    let hook = srv.recv().await;
    assert_eq!(hook["method"], "context/beforeInference");
    let answer = r#"{"contextInjections":[
        {"namespace":"m","position":"beforeUser","content":"text form","metadata":null},
        {"namespace":"m","position":"beforeUser","content":[{"type":"text","text":"blocks","annotations":{}}],"metadata":{"k":1},"extra":2}
      ],"featureSet":"memory","x-vendor":[]}"#
        .replace('\n', "");
    srv.raw
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{answer}}}"#,
            hook["id"]
        ))
        .await;
    let inj = fan.await.unwrap();
    assert_eq!(inj.before_user.len(), 2, "{inj:?}");
    assert!(
        inj.rejected.is_empty() && inj.failures.is_empty(),
        "{inj:?}"
    );
}

/// §14.5: descriptors as the libraries write them, with `address`/`metadata` `null` and the
/// extensions servers added (`initiallyOpen`, `capabilities`).
#[tokio::test]
async fn channel_descriptors_of_either_library_register() {
    let (s, _st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    let r = srv
        .call_text(
            "channels/register",
            r##"{"channels":[
              {"id":"discord:acme/general","type":"discord","label":"#general","direction":"bidirectional","address":null,"metadata":null},
              {"label":"DM","direction":"inbound","type":"discord","id":"discord:acme/dm","address":{"guild":1},"initiallyOpen":true,"capabilities":{"threads":true}}
            ]}"##
            .replace('\n', "")
            .as_str(),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(s.channels().len(), 2, "{r}");
}

/// §14.4: `channels/incoming` as the libraries write it, with optional members `null`.
#[tokio::test]
async fn incoming_messages_of_either_library_are_admitted() {
    let (_s, mut st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    let reg = srv
        .call(
            "channels/register",
            json!({"channels":[{"id":"c1","type":"chat","label":"c","direction":"bidirectional"}]}),
        )
        .await;
    assert!(reg.get("result").is_some(), "{reg}");
    let r = srv
        .call_text(
            "channels/incoming",
            r#"{"messages":[{"channelId":"c1","messageId":"m1","threadId":null,"author":{"id":"u","name":"U"},"timestamp":"2026-01-23T10:30:00.000Z","content":[{"type":"text","text":"hi"}],"metadata":null,"tags":null}]}"#,
        )
        .await;
    assert_eq!(r["result"]["results"][0]["accepted"], true, "{r}");
    assert!(matches!(
        st.events.recv().await,
        Some(HostEvent::ChannelMessage { .. })
    ));
}

/// §11.2: `inference/request` as the libraries write it: member order, optional members
/// `null`.
#[tokio::test]
async fn inference_requests_of_either_library_reach_the_handler() {
    let mut c = cfg(ALL);
    c.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async {
            Ok(json!({"content":"ok","model":"m","finishReason":"end_turn",
                      "usage":{"inputTokens":1,"outputTokens":1}}))
        })
    }));
    let init = init_result(Some(library_manifest())).to_string();
    let (_s, _st, mut srv) = connect_text(c, &init, r#"{"accepted":true}"#).await;
    for (i, p) in [
        r#"{"featureSet":"assist","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"featureSet":"assist","preferences":{"maxTokens":500,"temperature":0.7}}"#,
        r#"{"featureSet":"assist","conversationId":null,"stream":null,"preferences":null,"messages":[{"role":"user","content":"hi"}]}"#,
    ]
    .iter()
    .enumerate()
    {
        let r = srv.call_text("inference/request", p).await;
        assert_eq!(r["result"]["content"], "ok", "shape {i}: {r}");
    }
}

/// §11.2 types `preferences.maxTokens` `integer`; JSON has one number type, so `500.0` (what
/// a Python or a float-typed serializer writes) is the integer 500 and reaches the handler,
/// while `500.5` and `-1` are still refused.
#[tokio::test]
async fn max_tokens_written_as_a_whole_float_is_an_integer() {
    let mut c = cfg(ALL);
    c.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async {
            Ok(json!({"content":"ok","model":"m","finishReason":"end_turn",
                      "usage":{"inputTokens":1,"outputTokens":1}}))
        })
    }));
    let init = init_result(Some(library_manifest())).to_string();
    let (_s, _st, mut srv) = connect_text(c, &init, r#"{"accepted":true}"#).await;
    let req = |max: &str| {
        format!(
            r#"{{"featureSet":"assist","messages":[{{"role":"user","content":"hi"}}],"preferences":{{"maxTokens":{max}}}}}"#
        )
    };
    for max in ["500.0", "5e2"] {
        let r = srv.call_text("inference/request", &req(max)).await;
        assert_eq!(r["result"]["content"], "ok", "{max}: {r}");
    }
    for max in ["500.5", "-1", "-1.0"] {
        let r = srv.call_text("inference/request", &req(max)).await;
        assert_eq!(r["error"]["code"], -32602, "{max}: {r}");
    }
}

/// §5.1: `true` at a node is every leaf beneath it (the TypeScript library reads
/// `inferenceRequest: true` so, seed PR open question 4), and `contextHooks.beforeInference.inject:
/// true` every inject leaf.
#[tokio::test]
async fn boolean_shorthand_advertises_every_leaf_beneath() {
    let manifest = json!({ "version": "0.5", "inferenceRequest": true,
        "contextHooks": { "beforeInference": { "observe": true, "inject": true } },
        "featureSets": { "assist": { "description": "A", "uses": ["inferenceRequest"] } } });
    let (s, _st, _srv) = connect(ALL, manifest, r#"{"accepted":true}"#).await;
    let g = s.grant();
    for c in [
        Capability::InferenceRequest,
        Capability::InferenceRequestStreaming,
        Capability::Observe,
        Capability::InjectSystem,
        Capability::InjectBeforeUser,
        Capability::InjectAfterUser,
    ] {
        assert!(g.allows(c), "{c} not granted");
    }
}

/// §6.1 / §6.2: the 0.4 array form of `featureSets` (what `mcpl-core` 0.1 serializes:
/// `[{name, description?, uses, rollback, hostState}]`) is read by name, and a declaration
/// without `description` (optional in both libraries' types) is still read (only `uses`
/// decides validity, §6.4): its push is admitted.
#[tokio::test]
async fn legacy_feature_set_shapes_are_read() {
    let array = json!({ "version": "0.5", "pushEvents": true, "featureSets": [
        { "name": "alerts", "description": "A", "uses": ["pushEvents"],
          "rollback": false, "hostState": false } ] });
    let undescribed = json!({ "version": "0.5", "pushEvents": true, "featureSets": {
        "alerts": { "uses": ["pushEvents"], "rollback": false, "hostState": false } } });
    for m in [array, undescribed] {
        let (_s, _st, mut srv) = connect(ALL, m.clone(), r#"{"accepted":true}"#).await;
        let r = srv.call("push/event", push_params()).await;
        assert_eq!(r["result"]["accepted"], true, "{m}: {r}");
    }
}

/// §10.2, §6.5: a hook answer with nothing to inject — `contextInjections` empty, absent or
/// `null`, `featureSet` present or `null` — is a clean answer, not a failure.
#[tokio::test]
async fn empty_hook_answers_are_clean() {
    for answer in [
        r#"{"featureSet":"memory","contextInjections":[]}"#,
        r#"{"featureSet":"memory"}"#,
        r#"{}"#,
        r#"{"featureSet":null,"contextInjections":null}"#,
        r#"{"contextInjections":[],"featureSet":"memory","metadata":{"took":3}}"#,
    ] {
        let (s, _st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
        let s2 = s.clone();
        let params =
            json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
        let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
        let hook = srv.recv().await;
        assert_eq!(hook["method"], "context/beforeInference");
        srv.raw
            .send(&format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{answer}}}"#,
                hook["id"]
            ))
            .await;
        let inj = fan.await.unwrap();
        assert!(
            inj.failures.is_empty() && inj.rejected.is_empty(),
            "{answer}: {inj:?}"
        );
    }
}

/// §14.5: `channels/changed` as the libraries write it (`added`/`removed`/`updated`, any of
/// them absent or `null`).
#[tokio::test]
async fn channels_changed_of_either_library_is_applied() {
    let (s, _st, mut srv) = connect(ALL, library_manifest(), r#"{"accepted":true}"#).await;
    let reg = srv
        .call(
            "channels/register",
            json!({"channels":[{"id":"c1","type":"chat","label":"c","direction":"outbound"}]}),
        )
        .await;
    assert!(reg.get("result").is_some(), "{reg}");
    let r = srv
        .call_text(
            "channels/changed",
            r#"{"added":[{"id":"c2","type":"chat","label":"d","direction":"inbound","address":null}],"removed":null,"updated":null}"#,
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = srv
        .call_text("channels/changed", r#"{"removed":["c1"],"added":null}"#)
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(s.channels(), vec!["c2".to_owned()], "{r}");
}

/// Where SPEC says MUST the host stays strict: a `push/event` without `featureSet` (§6.5)
/// is `-32602`; one from a set whose `uses` names a path outside §6.2 (the `tools`-only /
/// `hostState`-era declarations the audit found) is disabled `invalid_uses` (§6.4) and its
/// push refused; a refusal without `fallback` (§6.7: REQUIRED) is not a usable receipt.
#[tokio::test]
async fn must_violations_are_still_refused() {
    let manifest = json!({ "version": "0.5", "pushEvents": true, "featureSets": {
        "alerts": { "description": "A", "uses": ["pushEvents"] },
        "legacy": { "description": "L", "uses": ["pushEvents", "streamObserver"] } } });
    let (_s, _st, mut srv) = connect(ALL, manifest.clone(), r#"{"accepted":true}"#).await;
    let mut p = push_params();
    p.as_object_mut().unwrap().remove("featureSet");
    assert_eq!(srv.call("push/event", p).await["error"]["code"], -32602);
    let mut p = push_params();
    p["featureSet"] = json!("legacy");
    let r = srv.call("push/event", p).await;
    assert!(r.get("error").is_some(), "{r}");

    let init = init_result(Some(manifest)).to_string();
    let (s, _st, _srv) = connect_text(cfg(ALL), &init, r#"{"accepted":false,"reason":"no"}"#).await;
    assert!(
        matches!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyFailed(_))),
        "{:?}",
        s.mode()
    );
}

/// §5.1 is silent on a `version` other than `"0.5"`: a server writing the document's own
/// label (`"0.5.0-draft"`, `"0.5.0"`: `handshake::MCPL_VERSION_ALIASES`, the server's rule
/// too) is reported (`unsupported_version`, the spelling) and still read as the manifest it
/// is, never refused on the label alone. Another version (`"0.4"`) is another protocol:
/// served as plain MCP (`tests/host_mcpl_version.rs`).
#[tokio::test]
async fn another_version_label_is_reported_not_refused() {
    for version in ["0.5.0-draft", "0.5.0"] {
        let mut m = library_manifest();
        m["version"] = json!(version);
        let (s, mut st, mut srv) = connect(ALL, m, r#"{"accepted":true}"#).await;
        assert_eq!(s.mode(), Mode::Mcpl, "{version}");
        let r = srv.call("push/event", push_params()).await;
        assert_eq!(r["result"]["accepted"], true, "{version}: {r}");
        let mut reported = false;
        while let Ok(d) = st.diagnostics.try_recv() {
            reported |= matches!(&d, HostDiagnostic::ManifestFinding { code, .. } if *code == "unsupported_version");
        }
        assert!(reported, "{version}");
    }
}
