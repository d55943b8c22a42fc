//! Wire-level tests of the host session against scripted servers: real JSON over the
//! in-memory transport pair, the server side driven step by step from the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{
    before_inference, HostConfig, HostDiagnostic, HostError, HostEvent, HostSession, HostStreams,
    Injections, McpOnlyReason, Mode,
};
use mcpl::jsonrpc::ErrorObject;
use mcpl::manifest::{ChangeImpact, Disposition};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::init_result;

/// A session connecting over `peer`/`incoming` to the server the test speaks for on `raw`:
/// `initialize` answered with `manifest`, then the policy Request (after
/// `notifications/initialized`) accepted.
async fn connect_raw(
    peer: Peer,
    incoming: mcpl::peer::Incoming,
    raw: &mut raw::Raw,
    cfg: HostConfig,
    manifest: Value,
) -> (HostSession, HostStreams) {
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = raw.recv().await;
    assert_eq!(init["method"], "initialize");
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
    connect.await.unwrap().unwrap()
}

/// The scripted server side of one connection.
struct Server {
    peer: Peer,
    incoming: Incoming,
}

impl Server {
    async fn next(&mut self) -> IncomingMessage {
        tokio::time::timeout(Duration::from_secs(10), self.incoming.recv())
            .await
            .expect("server waited too long for the host")
            .expect("connection ended")
    }

    /// Sends notification `method` with `params` to the host.
    async fn notify(&self, method: &str, params: Option<Value>) {
        self.peer.notify_raw(method, params).await.unwrap();
    }

    async fn request(&mut self, method: &str) -> IncomingRequest {
        match self.next().await {
            IncomingMessage::Request(r) if r.method() == method => r,
            IncomingMessage::Request(r) => panic!("expected {method}, got request {}", r.method()),
            IncomingMessage::Notification(n) => {
                panic!("expected {method}, got notification {}", n.method)
            }
        }
    }

    async fn notification(&mut self, method: &str) -> Option<Value> {
        match self.next().await {
            IncomingMessage::Notification(n) if n.method == method => n.params,
            IncomingMessage::Notification(n) => panic!("expected {method}, got {}", n.method),
            IncomingMessage::Request(r) => panic!("expected {method}, got request {}", r.method()),
        }
    }

    /// Has the host ping this server and answers it: asserts that the ping is the very next
    /// message the server receives (nothing else reached the wire before it).
    async fn expect_ping_next(&mut self, host: &HostSession) {
        let h = host.clone();
        let ping = tokio::spawn(async move { h.request_raw("ping", json!({})).await });
        self.request("ping").await.respond(json!({})).await.unwrap();
        ping.await.unwrap().unwrap();
    }

    /// Announces a manifest change (§17.3) and answers the host's `mcpl/manifest` fetch.
    async fn announce_manifest(&mut self, manifest: Value) {
        // Of the digest's shape (App. B.3), and never a manifest's digest.
        let announced = json!({ "revision": ANNOUNCED, "domains": ["capabilities"] });
        self.announce_manifest_as(announced, manifest).await
    }

    /// [`Self::announce_manifest`] with the announcement's params `announced`.
    async fn announce_manifest_as(&mut self, announced: Value, manifest: Value) {
        self.notify("mcpl/manifestChanged", Some(announced)).await;
        self.request("mcpl/manifest")
            .await
            .respond(manifest)
            .await
            .unwrap();
    }

    /// Registers one outbound chat channel `id` (§14.5); the host accepts it.
    async fn register_outbound(&self, id: &str) {
        let channels =
            json!({ "channels": [{ "id": id, "type": "chat", "direction": "outbound" }] });
        self.call("channels/register", channels)
            .await
            .expect("the host accepts the registration");
    }

    /// Registers one inbound channel `id` (§14.5); the host accepts it.
    async fn register_inbound(&self, id: &str) {
        let channels = json!({ "channels": [{ "id": id, "type": "k", "direction": "inbound" }] });
        let r = self.call("channels/register", channels).await.unwrap();
        assert_eq!(r["results"][0]["accepted"], true, "{r}");
    }

    /// Sends a request to the host and returns the error code, if it answered with one.
    async fn call(&self, method: &str, params: Value) -> Result<Value, i64> {
        self.peer
            .request_raw(method, Some(params))
            .await
            .map_err(|e| e.remote().map(|e| e.code).unwrap_or(0))
    }
}

/// An announced revision (§17.3) of the digest's shape (App. B.3) that no manifest here
/// digests to.
const ANNOUNCED: &str = "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn full_manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "inferenceLifecycle": true,
        "inferenceRequest": true,
        "contextHooks": { "beforeInference": {
            "observe": true,
            "inject": { "system": true, "beforeUser": true, "afterUser": true } } },
        "channels": { "register": true, "incoming": true, "publish": true, "streaming": true },
        "featureSets": {
            "alerts": { "description": "Alerts", "uses": ["pushEvents"],
                "tagOntology": { "tags": { "acme:alert": { "desc": "An alert" } } } },
            "assist": { "description": "Assist", "uses": ["inferenceRequest"] },
            "memory": { "description": "Memory",
                "uses": ["contextHooks.beforeInference.observe",
                         "contextHooks.beforeInference.inject.beforeUser"] },
            "notes": { "description": "Notes after the user message",
                "uses": ["contextHooks.beforeInference.inject.afterUser"] },
            "context": { "description": "Context before the user message",
                "uses": ["contextHooks.beforeInference.inject.beforeUser"] }
        }
    })
}

/// Generous timeouts: tests that answer must never race them on a loaded machine.
fn config(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        policy_timeout: Duration::from_secs(30),
        hook_timeout: Duration::from_secs(30),
        request_handler: Some(declining()),
        ..HostConfig::default()
    }
}

/// A request handler that declines every request `-32601`: with it `modelInfo` and
/// `inferenceRequest` are grantable (a host with no handler grants neither, §5.4,
/// `tests/host_unserved.rs`), and what reaches it is told apart from a refusal.
fn declining() -> mcpl::host::RequestHandler {
    std::sync::Arc::new(|method: &str, _p: Value| {
        let e = ErrorObject::method_not_found(method);
        Box::pin(async move { Err(e) })
    })
}

/// Short timeouts, for the tests where the server never answers: the host's own timeout
/// ends the wait (the test awaits the host's result, it never sleeps).
fn short(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy_timeout: Duration::from_secs(1),
        hook_timeout: Duration::from_secs(1),
        ..config(policy)
    }
}

fn pair_with(peer_config: PeerConfig) -> ((Peer, Incoming), Server) {
    let (h, (peer, incoming)) = Peer::memory_pair(peer_config);
    (h, Server { peer, incoming })
}

type Connecting = tokio::task::JoinHandle<Result<(HostSession, HostStreams), HostError>>;

/// Starts `connect` and answers `initialize`; returns with `notifications/initialized` read.
async fn start(cfg: HostConfig, manifest: Option<Value>) -> (Connecting, Server) {
    start_with(cfg, manifest, PeerConfig::default()).await
}

/// [`start`] over peers (both sides) configured by `peer_config`.
async fn start_with(
    cfg: HostConfig,
    manifest: Option<Value>,
    peer_config: PeerConfig,
) -> (Connecting, Server) {
    let ((hp, hin), mut server) = pair_with(peer_config);
    let task = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    let init = server.request("initialize").await;
    let p = init.request().params.clone().unwrap();
    assert_eq!(p["capabilities"]["experimental"]["mcpl"]["version"], "0.5");
    init.respond(init_result(manifest)).await.unwrap();
    server.notification("notifications/initialized").await;
    (task, server)
}

/// Under a paused clock (`start_paused`), returns once every other task is idle: the runtime
/// advances the clock to the timer only then. Used to pin an order the scheduler would
/// otherwise choose (here: the host has reviewed a fetched manifest before the next step).
async fn until_idle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// `set_policy(patterns)` answered `{accepted: true}` by the server: the change it made.
async fn set_policy_accepted(
    s: &HostSession,
    server: &mut Server,
    patterns: &[&str],
) -> mcpl::host::PolicyChange {
    let s2 = s.clone();
    let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
    let change = tokio::spawn(async move { s2.set_policy(patterns).await });
    server
        .request("featureSets/update")
        .await
        .respond(json!({ "accepted": true }))
        .await
        .unwrap();
    change.await.unwrap().unwrap()
}

/// A fully connected session whose initial receipt was `{accepted: true}`.
/// Accepts set `name`'s `tagOntology` as the application reviewed it from
/// `HostSession::manifest` (§16.5, §17.5): its digest.
async fn accept_as_shown(s: &HostSession, name: &str) -> String {
    let (shown, _) = s.manifest().expect("a manifest");
    let o = &shown["featureSets"][name]["tagOntology"];
    let digest = mcpl::manifest::digest::ontology_digest(o).expect("an ontology");
    s.accept_reviewed_ontology(name, &digest)
        .await
        .expect("as reviewed")
}

async fn connected(policy: &[&str], manifest: Value) -> (HostSession, HostStreams, Server) {
    connected_cfg(config(policy), manifest).await
}

async fn connected_cfg(cfg: HostConfig, manifest: Value) -> (HostSession, HostStreams, Server) {
    connected_with(cfg, manifest, PeerConfig::default()).await
}

/// A host granted `observe` and `inject.beforeUser` on [`full_manifest`], with one
/// `before_inference` fan-out in flight whose `context/beforeInference` the server holds.
async fn hook_in_flight() -> (
    HostSession,
    HostStreams,
    Server,
    tokio::task::JoinHandle<Injections>,
    IncomingRequest,
) {
    let (s, streams, mut server) = connected(
        &[
            "contextHooks.beforeInference.observe",
            "contextHooks.beforeInference.inject.beforeUser",
        ],
        full_manifest(),
    )
    .await;
    let s2 = s.clone();
    let params =
        json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"hello"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    let hook = server.request("context/beforeInference").await;
    (s, streams, server, fan, hook)
}

/// [`connected_cfg`] over peers (both sides) configured by `peer_config`.
async fn connected_with(
    cfg: HostConfig,
    manifest: Value,
    peer_config: PeerConfig,
) -> (HostSession, HostStreams, Server) {
    let (task, mut server) = start_with(cfg, Some(manifest), peer_config).await;
    let upd = server.request("featureSets/update").await;
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (s, streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::Mcpl);
    (s, streams, server)
}

/// Has the host refresh its manifest (§17.4) and answers the fetch with `manifest`.
async fn refresh_with(
    s: &HostSession,
    server: &mut Server,
    manifest: Value,
) -> Result<Option<mcpl::manifest::review::ChangeReceipt>, HostError> {
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    server
        .request("mcpl/manifest")
        .await
        .respond(manifest)
        .await
        .unwrap();
    refresh.await.unwrap()
}

fn push(event_id: &str) -> Value {
    json!({ "featureSet": "alerts", "eventId": event_id, "timestamp": "2026-01-01T00:00:00Z",
            "payload": { "content": [{ "type": "text", "text": "hi" }] },
            "tags": ["chat:addressed"] })
}

fn drain_diags(streams: &mut HostStreams) -> Vec<HostDiagnostic> {
    let mut v = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        v.push(d);
    }
    v
}

// ---------------------------------------------------------------------------------------
// §5.3 / §6.7 policy exchange
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn s5_3_policy_request_sent_even_with_empty_grant() {
    let (task, mut server) = start(config(&[]), Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    let p = upd.request().params.clone().unwrap();
    assert_eq!(p["effectiveCapabilities"], json!([]));
    assert!(p["deniedCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("pushEvents")));
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert!(s.is_ready());
    assert!(s.grant().capabilities().is_empty());
}

#[tokio::test]
async fn s5_3_privileged_push_before_receipt_rejected_32002() {
    let (task, mut server) = start(config(&["pushEvents"]), Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    // The receipt has not been sent: the host must refuse privileged methods.
    let r = server
        .peer
        .request_raw("push/event", Some(push("e1")))
        .await;
    let err = r.unwrap_err();
    let e = err.remote().unwrap();
    assert_eq!(e.code, -32002);
    assert_eq!(e.data.as_ref().unwrap()["capability"], "pushEvents");
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (_s, mut streams) = task.await.unwrap().unwrap();
    // After the receipt the same method is admitted.
    let ok = server.call("push/event", push("e2")).await.unwrap();
    assert_eq!(ok["accepted"], true);
    assert!(drain_diags(&mut streams).iter().any(
        |d| matches!(d, HostDiagnostic::PrivilegedBeforeReady { method } if method == "push/event")
    ));
}

#[tokio::test]
async fn s6_7_server_answering_32601_is_recorded_mcp_only() {
    let (task, mut server) = start(config(&["pushEvents"]), Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    upd.respond_error(mcpl::jsonrpc::ErrorObject::method_not_found(
        "featureSets/update",
    ))
    .await
    .unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyMethodNotFound));
    // MCP-only keeps tools, disables MCPL.
    assert!(s.grant().capabilities().is_empty());
    assert!(!s.grant().allows(Capability::PushEvents));
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
}

/// §17.6: a change receipt reports what changed against the grant in force. After the
/// fallback to MCP-only (here a 0.4-era server's `-32601`) only `tools` is in force, so a
/// manifest that drops `pushEvents` revokes nothing: `pushEvents` was never granted.
#[tokio::test]
async fn s17_6_after_mcp_only_fallback_a_removal_never_granted_is_not_revoked() {
    let (task, mut server) = start(config(&["pushEvents", "tools"]), Some(full_manifest())).await;
    server
        .request("featureSets/update")
        .await
        .respond_error(ErrorObject::method_not_found("featureSets/update"))
        .await
        .unwrap();
    let (s, mut streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyMethodNotFound));
    assert_eq!(s.grant().capabilities().sorted_paths(), ["tools"]);
    let mut next = full_manifest();
    next.as_object_mut().unwrap().remove("pushEvents");
    let receipt = refresh_with(&s, &mut server, next).await.unwrap().unwrap();
    assert!(
        receipt
            .impacts
            .iter()
            .all(|i| i.impact != ChangeImpact::CapabilityRevoked),
        "{receipt:?}"
    );
    let events: Vec<HostEvent> = std::iter::from_fn(|| streams.events.try_recv().ok()).collect();
    assert!(events.contains(&HostEvent::ManifestChange(receipt)));
}

#[tokio::test]
async fn s6_7_unanswered_policy_request_times_out_into_mcp_only() {
    let (task, mut server) = start(short(&["pushEvents", "tools"]), Some(full_manifest())).await;
    let held = server.request("featureSets/update").await; // never answered
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    assert!(s.grant().allows(Capability::Tools));
    assert!(!s.grant().allows(Capability::PushEvents));
    drop(held);
}

/// §6.7: an accepting receipt the host cannot use puts it in MCP-only on its own, while the
/// server believes the grant it accepted — so the reduction is told by a second Request
/// (`tools` only). Its receipt widens nothing.
#[tokio::test]
async fn s6_7_mcp_only_after_an_unusable_receipt_is_told_to_the_server() {
    let (task, mut server) = start(config(&["pushEvents", "tools"]), Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    let told = upd.request().params.clone().unwrap()["effectiveCapabilities"].clone();
    assert_eq!(told, json!(["pushEvents", "tools"]));
    // `unavailableFeatures` entries MUST carry `effect`: this receipt is unusable.
    upd.respond(json!({ "accepted": true, "unavailableFeatures": [{ "featureSet": "alerts" }] }))
        .await
        .unwrap();
    let again = server.request("featureSets/update").await;
    let p = again.request().params.clone().unwrap();
    assert_eq!(p["effectiveCapabilities"], json!(["tools"]));
    assert!(p["deniedCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("pushEvents")));
    again.respond(json!({ "accepted": true })).await.unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert!(matches!(
        s.mode(),
        Mode::McpOnly(McpOnlyReason::PolicyFailed(_))
    ));
    assert_eq!(s.grant().capabilities().sorted_paths(), ["tools"]);
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
    server.expect_ping_next(&s).await;
}

/// §6.7: the same after the initial Request timed out (paused clock: the host's policy
/// timeout fires once everything is idle). The abandoned Request is cancelled, then the
/// reduction is told.
#[tokio::test(start_paused = true)]
async fn s6_7_mcp_only_after_a_policy_timeout_is_told_to_the_server() {
    let (task, mut server) = start(short(&["pushEvents", "tools"]), Some(full_manifest())).await;
    let held = server.request("featureSets/update").await;
    server.notification("notifications/cancelled").await;
    let again = server.request("featureSets/update").await;
    assert_eq!(
        again.request().params.clone().unwrap()["effectiveCapabilities"],
        json!(["tools"])
    );
    again.respond(json!({ "accepted": true })).await.unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    assert_eq!(s.grant().capabilities().sorted_paths(), ["tools"]);
    server.expect_ping_next(&s).await;
    drop(held);
}

/// §6.7: a fallback the server named itself — `-32601` from a 0.4-era server, or a refusal
/// with `fallback: "mcp-only"` — is not told again: the next message is a ping.
#[tokio::test]
async fn s6_7_a_fallback_the_server_named_is_not_told_again() {
    for answer in [
        Err(ErrorObject::method_not_found("featureSets/update")),
        Ok(json!({ "accepted": false, "fallback": "mcp-only", "reason": "no" })),
    ] {
        let (task, mut server) =
            start(config(&["pushEvents", "tools"]), Some(full_manifest())).await;
        let upd = server.request("featureSets/update").await;
        match answer {
            Ok(v) => upd.respond(v).await.unwrap(),
            Err(e) => upd.respond_error(e).await.unwrap(),
        }
        let (s, _streams) = task.await.unwrap().unwrap();
        assert!(matches!(s.mode(), Mode::McpOnly(_)));
        server.expect_ping_next(&s).await;
    }
}

#[tokio::test]
async fn s6_7_refusal_records_fallback_mcp_only() {
    let (task, mut server) = start(config(&["pushEvents"]), Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    upd.respond(json!({ "accepted": false, "fallback": "mcp-only",
                        "missingCapabilities": ["contextHooks.beforeInference.inject.system"] }))
        .await
        .unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Refused));
    assert!(matches!(
        s.last_receipt(),
        Some(mcpl::policy::Receipt::Refused { .. })
    ));
    // The refusal widened nothing.
    assert!(!s.grant().allows(Capability::InjectSystem));
}

/// §6.7: a receipt never widens. A later expansion that adds `tools` and is refused with
/// `fallback: mcp-only` leaves the session MCP-only with what was in force and still
/// allowed — not with the `tools` the refused policy named.
#[tokio::test]
async fn s6_7_a_refused_expansion_never_activates_what_it_named() {
    let (s, _streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    assert!(!s.grant().allows(Capability::Tools));
    let s2 = s.clone();
    let change = tokio::spawn(async move {
        s2.set_policy(vec!["pushEvents".into(), "tools".into()])
            .await
    });
    let upd = server.request("featureSets/update").await;
    upd.respond(json!({ "accepted": false, "fallback": "mcp-only", "reason": "no" }))
        .await
        .unwrap();
    let c = change.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Refused));
    assert!(!c.grant.allows(Capability::Tools), "{:?}", c.grant);
    assert!(!s.grant().allows(Capability::Tools));
}

#[tokio::test]
async fn s3_3_server_without_mcpl_is_mcp_only() {
    let (task, server) = start(config(&["*", "tools"]), None).await;
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::NotAdvertised));
    assert!(s.grant().allows(Capability::Tools));
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
    let inj = before_inference(
        &[&s],
        &json!({"inferenceId":"i","conversationId":"c","turnIndex":0,"userMessage":"x"}),
    )
    .await;
    assert!(inj.consulted.is_empty());
}

/// §3.2 / §3.3: a manifest the §17.2 digest refuses at `initialize` (here a feature-set name
/// outside the identifier charset) grants nothing of MCPL, but MCP `tools` from the outer
/// capabilities stands: `tools/call` goes out, `push/event` is refused.
#[tokio::test]
async fn s3_3_a_digest_refused_manifest_keeps_mcp_tools() {
    let mut manifest = full_manifest();
    manifest["featureSets"]["bad name!"] = json!({ "description": "x", "uses": ["pushEvents"] });
    let (task, mut server) = start(config(&["tools", "pushEvents"]), Some(manifest)).await;
    let upd = server.request("featureSets/update").await;
    assert_eq!(
        upd.request().params.clone().unwrap()["effectiveCapabilities"],
        json!(["tools"])
    );
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (s, mut streams) = task.await.unwrap().unwrap();
    assert_eq!(s.grant().capabilities().sorted_paths(), ["tools"]);
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(d,
        HostDiagnostic::ManifestFinding { code, .. } if *code == "identifier_charset")));
    let s2 = s.clone();
    let call = tokio::spawn(async move {
        s2.request_raw("tools/call", json!({ "name": "t", "arguments": {} }))
            .await
    });
    server
        .request("tools/call")
        .await
        .respond(json!({ "content": [] }))
        .await
        .unwrap();
    assert_eq!(call.await.unwrap().unwrap(), json!({ "content": [] }));
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
}

#[tokio::test]
async fn s6_7_narrowing_takes_effect_before_the_request_goes_out() {
    let (s, _streams, mut server) = connected(&["pushEvents", "tools"], full_manifest()).await;
    assert!(s.grant().allows(Capability::PushEvents));
    let s2 = s.clone();
    let change = tokio::spawn(async move { s2.set_policy(vec!["tools".into()]).await });
    let upd = server.request("featureSets/update").await;
    let p = upd.request().params.clone().unwrap();
    assert_eq!(p["effectiveCapabilities"], json!(["tools"]));
    // The Request is on the wire but unanswered: the narrowing is already in force.
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let c = change.await.unwrap().unwrap();
    assert!(c.narrowed.contains(Capability::PushEvents));
    assert!(!s.grant().allows(Capability::PushEvents));
}

/// §6.7: a `disabled` carried by a Notification is a reduction servers must respect; a host
/// that sends one (`disable_by_notification`) applies it first: a push under the set is
/// refused once the Notification is read, and the next policy Request repeats it.
#[tokio::test]
async fn s6_7_disabling_by_notification_narrows_the_host_first_and_sticks() {
    let (s, _streams, mut server) = connected(&["pushEvents", "tools"], full_manifest()).await;
    assert_eq!(
        server.call("push/event", push("before")).await.unwrap()["accepted"],
        true
    );
    s.disable_by_notification(&["alerts".to_owned()])
        .await
        .unwrap();
    let n = server.notification("featureSets/update").await;
    assert_eq!(n, Some(json!({ "disabled": ["alerts"] })));
    // -32001: declared, but unavailable (disabled) now.
    assert_eq!(server.call("push/event", push("after")).await, Err(-32001));
    // A later grant change by Request does not re-enable it.
    let s2 = s.clone();
    let change = tokio::spawn(async move { s2.set_policy(vec!["pushEvents".into()]).await });
    let upd = server.request("featureSets/update").await;
    let p = upd.request().params.clone().unwrap();
    assert_eq!(p["disabled"], json!(["alerts"]), "{p}");
    upd.respond(json!({ "accepted": true })).await.unwrap();
    change.await.unwrap().unwrap();
    assert_eq!(server.call("push/event", push("later")).await, Err(-32001));
    // Past the list bound: refused before anything is sent or applied.
    let many: Vec<String> = (0..1025).map(|i| format!("s{i}")).collect();
    let e = s.disable_by_notification(&many).await.unwrap_err();
    assert!(matches!(e, HostError::BadSelection(_)), "{e:?}");
}

#[tokio::test]
async fn s6_7_unanswered_expansion_never_activates() {
    let (s, _streams, mut server) = connected_cfg(short(&["tools"]), full_manifest()).await;
    let s2 = s.clone();
    let change = tokio::spawn(async move {
        s2.set_policy(vec!["tools".into(), "pushEvents".into()])
            .await
    });
    let held = server.request("featureSets/update").await;
    // While waiting for the receipt the widening is not active.
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
    let c = change.await.unwrap().unwrap(); // the host's timeout ends the wait
    assert!(c.receipt.is_none());
    assert!(c.not_activated.contains(Capability::PushEvents));
    assert!(!s.grant().allows(Capability::PushEvents));
    assert_eq!(server.call("push/event", push("e2")).await, Err(-32002));
    drop(held);
}

#[tokio::test]
async fn s6_7_answered_expansion_activates_after_receipt() {
    let (s, _streams, mut server) = connected(&["tools"], full_manifest()).await;
    let c = set_policy_accepted(&s, &mut server, &["tools", "pushEvents"]).await;
    assert!(c.activated.contains(Capability::PushEvents));
    assert_eq!(
        server.call("push/event", push("e1")).await.unwrap()["accepted"],
        true
    );
}

// ---------------------------------------------------------------------------------------
// Enforcement
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn s9_4_duplicate_event_id_dropped_and_reported() {
    let (_s, mut streams, server) = connected(&["pushEvents"], full_manifest()).await;
    assert_eq!(
        server.call("push/event", push("e1")).await.unwrap()["accepted"],
        true
    );
    let second = server.call("push/event", push("e1")).await.unwrap();
    assert_eq!(second["reason"], "duplicate");
    match streams.events.recv().await.unwrap() {
        HostEvent::Push { event_id, tags, .. } => {
            assert_eq!(event_id, "e1");
            // §16.3 closure: chat:addressed implies more than itself and excludes ambient.
            assert!(tags.contains("chat:addressed"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        streams.events.try_recv().is_err(),
        "the duplicate was delivered"
    );
    assert!(drain_diags(&mut streams)
        .iter()
        .any(|d| matches!(d, HostDiagnostic::DuplicateEvent { event_id } if event_id == "e1")));
}

/// §9.4 deduplication remembers `eventId`s, so their length is bounded
/// (`HostConfig::max_event_id_bytes`, 1 KiB by default): a longer id is refused with
/// `-32602` before anything is stored or delivered; one at the limit is accepted.
#[tokio::test]
async fn s9_4_an_over_long_event_id_is_refused_32602() {
    let (_s, mut streams, server) = connected(&["pushEvents"], full_manifest()).await;
    let long = "x".repeat(1025);
    let err = server
        .peer
        .request_raw("push/event", Some(push(&long)))
        .await
        .unwrap_err();
    let e = err.remote().unwrap();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data, Some(json!({ "limit": 1024, "length": 1025 })));
    assert!(
        streams.events.try_recv().is_err(),
        "the event was delivered"
    );
    let at_limit = "y".repeat(1024);
    let ok = server.call("push/event", push(&at_limit)).await.unwrap();
    assert_eq!(ok, json!({ "accepted": true }));
    assert!(matches!(
        streams.events.recv().await.unwrap(),
        HostEvent::Push { event_id, .. } if event_id == at_limit
    ));
}

#[tokio::test]
async fn s9_push_event_shape_and_feature_set_checked() {
    let (_s, _streams, server) = connected(&["pushEvents"], full_manifest()).await;
    let mut p = push("e1");
    p.as_object_mut().unwrap().remove("timestamp");
    assert_eq!(server.call("push/event", p).await, Err(-32602));
    let mut p = push("e2");
    p["payload"] = json!({});
    assert_eq!(server.call("push/event", p).await, Err(-32602));
    // §9.2: payload.content is ContentBlock[], origin an object.
    for (i, bad) in [
        json!(null),
        json!(42),
        json!("a string"),
        json!([{ "text": "no type" }]),
        json!([{ "type": "text" }]),
        // App. B.1: the four shapes only, each with its members.
        json!([{ "type": "image", "data": "iVBO" }]),
        json!([{ "type": "audio", "data": "x", "mimeType": "audio/wav", "uri": "file:///a" }]),
        json!([{ "type": "resource", "resource": { "uri": "memory://x", "text": "t" } }]),
        json!([{ "type": "resource_link", "uri": "memory://x" }]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut p = push(&format!("c{i}"));
        p["payload"]["content"] = bad;
        assert_eq!(server.call("push/event", p).await, Err(-32602));
    }
    let mut p = push("b1");
    p["payload"]["content"] = json!([{ "type": "text", "text": "t" },
        { "type": "image", "uri": "memory://i/1" }, { "type": "resource", "uri": "memory://x" }]);
    assert_eq!(
        server.call("push/event", p).await.unwrap()["accepted"],
        true
    );
    // §9.2: timestamp is ISO 8601; epoch seconds and RFC 3339's space are not.
    for (i, bad) in ["1706005800", "2026-01-23 10:30:00Z", "2026-02-30T00:00:00Z"]
        .into_iter()
        .enumerate()
    {
        let mut p = push(&format!("t{i}"));
        p["timestamp"] = json!(bad);
        assert_eq!(server.call("push/event", p).await, Err(-32602), "{bad}");
    }
    let mut p = push("o1");
    p["origin"] = json!("somewhere");
    assert_eq!(server.call("push/event", p).await, Err(-32602));
    let mut p = push("e3");
    p["featureSet"] = json!("nope");
    assert_eq!(server.call("push/event", p).await, Err(-32003));
    // `memory` is declared but unavailable under this grant (observe not granted).
    let mut p = push("e4");
    p["featureSet"] = json!("memory");
    assert_eq!(server.call("push/event", p).await, Err(-32001));
}

#[tokio::test]
async fn s11_inference_request_gated_and_minus_32601_from_a_declining_handler() {
    let (_s, _streams, server) = connected(&["inferenceRequest"], full_manifest()).await;
    let p = json!({ "featureSet": "assist", "messages": [] });
    assert_eq!(
        server.call("inference/request", p.clone()).await,
        Err(-32601)
    );
    // §11.2: messages is required.
    assert_eq!(
        server
            .call("inference/request", json!({ "featureSet": "assist" }))
            .await,
        Err(-32602)
    );
    let undeclared = json!({ "featureSet": "nope", "messages": [] });
    assert_eq!(
        server.call("inference/request", undeclared).await,
        Err(-32003)
    );
    let unavailable = json!({ "featureSet": "alerts", "messages": [] });
    assert_eq!(
        server.call("inference/request", unavailable).await,
        Err(-32001)
    );
    let mut streaming = p.clone();
    streaming["stream"] = json!(true);
    assert_eq!(
        server.call("inference/request", streaming).await,
        Err(-32002)
    );
    assert_eq!(server.call("model/info", json!({})).await, Err(-32002));
    // A host → server method sent by the server is not a method the host serves.
    assert_eq!(
        server.call("context/beforeInference", json!({})).await,
        Err(-32601)
    );
}

/// §11.2 types every member: a request whose messages or optional members are mistyped is
/// `-32602` by the one rule `mcpl check` reports (`inference.request-shape`). The host used
/// to check only `messages` and `featureSet` and passed such a request to its inference
/// handler (here: one declining every request, `-32601`).
#[tokio::test]
async fn s11_2_a_mistyped_inference_request_is_invalid_params() {
    let (_s, _streams, server) = connected(&["inferenceRequest"], full_manifest()).await;
    let mistyped = [
        json!({ "featureSet": "assist", "messages": [{ "role": 1, "content": "x" }] }),
        json!({ "featureSet": "assist", "messages": [{ "role": "user", "content": 5 }] }),
        json!({ "featureSet": "assist", "messages": ["hi"] }),
        json!({ "featureSet": "assist", "messages": [], "conversationId": 7 }),
        json!({ "featureSet": "assist", "messages": [], "preferences": { "maxTokens": -1 } }),
        json!({ "featureSet": "assist", "messages": [], "preferences": 3 }),
    ];
    for p in mistyped {
        assert_eq!(
            server.call("inference/request", p.clone()).await,
            Err(-32602),
            "{p}"
        );
    }
    let fine = json!({ "featureSet": "assist", "conversationId": "c",
        "messages": [{ "role": "user", "content": [{ "type": "text", "text": "x" }] }],
        "preferences": { "maxTokens": 5, "temperature": 0.5, "model": "any" } });
    assert_eq!(server.call("inference/request", fine).await, Err(-32601));
}

/// A request with a defect in each of many entries (§11.2 messages, §9.2 content blocks)
/// is refused `-32602` with a bounded message: the first defects and a count of the rest,
/// not each one. Found by the protocol-area hunt: 100,000 messages that were not objects
/// (200 KB of `1,`) drew an error message of 3.6 MB, every defect formatted and joined
/// (a message at the parsed-cost bound built gigabytes of defect text).
#[tokio::test]
async fn s11_2_a_request_with_countless_defects_is_refused_with_a_bounded_message() {
    let (_s, mut streams, server) =
        connected(&["inferenceRequest", "pushEvents"], full_manifest()).await;
    let many = vec![json!(1); 100_000];
    let inference = json!({ "featureSet": "assist", "messages": many });
    let mut pushed = push("e1");
    pushed["payload"]["content"] = json!(many);
    for (method, params) in [("inference/request", inference), ("push/event", pushed)] {
        let e = server
            .peer
            .request_raw(method, Some(params))
            .await
            .unwrap_err();
        let e = e.remote().expect("an error answer").clone();
        assert_eq!(e.code, -32602, "{method}");
        assert!(
            e.message.len() <= 2048,
            "{method}: {} bytes",
            e.message.len()
        );
        assert!(e.message.contains("more"), "{method}: {}", e.message);
    }
    for d in drain_diags(&mut streams) {
        if let HostDiagnostic::BadParams { detail, .. } = d {
            assert!(detail.len() <= 2048);
        }
    }
}

/// §16.1: a push whose `tags` hold a defect in each of many entries is reported by a
/// bounded number of `TagIssue` diagnostics (the first few and one counting the rest), and
/// the push itself is still judged. Found by the protocol-area hunt: each of 100,000
/// non-string tags became a diagnostic of its own, all made and queued at once (a message
/// at the parsed-cost bound made four million), past the diagnostics stream's room.
#[tokio::test]
async fn s16_1_a_push_with_countless_bad_tags_is_reported_in_bounded_diagnostics() {
    let (_s, mut streams, server) = connected(&["pushEvents"], full_manifest()).await;
    let mut p = push("e1");
    p["tags"] = json!(vec![json!(1); 100_000]);
    let r = server.call("push/event", p).await.unwrap();
    assert_eq!(r["accepted"], true, "{r}");
    let diags = drain_diags(&mut streams);
    let issues: Vec<&String> = diags
        .iter()
        .filter_map(|d| match d {
            HostDiagnostic::TagIssue { issue, .. } => Some(issue),
            _ => None,
        })
        .collect();
    assert!(issues.len() <= 17, "{} tag issues", issues.len());
    assert!(
        issues.last().is_some_and(|i| i.contains("99984 more")),
        "{issues:?}"
    );
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::DiagnosticsDropped { .. })),
        "{diags:?}"
    );
}

/// §14.3: a server that never answers `channels/open` (or answers `channels/close` twice
/// over, or late) holds nothing for good: the host's request fails at the request timeout,
/// and the answer arriving after it is reported, not applied.
#[tokio::test(start_paused = true)]
async fn s14_3_a_channels_open_never_answered_ends_at_the_request_timeout() {
    let mut m = full_manifest();
    m["channels"]["lifecycle"] = json!(true);
    let (s, mut streams, mut server) = connected(&["channels.lifecycle"], m).await;
    let s2 = s.clone();
    let open = tokio::spawn(async move {
        s2.request_raw("channels/open", json!({ "type": "chat", "address": {} }))
            .await
    });
    let held = server.request("channels/open").await;
    let r = open.await.unwrap();
    assert!(
        matches!(
            r,
            Err(HostError::Peer(mcpl::peer::PeerError::Timeout { .. }))
        ),
        "{r:?}"
    );
    held.respond(json!({ "channel": { "id": "c", "type": "chat" } }))
        .await
        .unwrap();
    server.call("ping", json!({})).await.unwrap();
    assert!(
        s.channels().is_empty(),
        "an open answer registers nothing (§14.5)"
    );
    let diags = drain_diags(&mut streams);
    assert!(
        diags.iter().any(|d| matches!(
            d,
            HostDiagnostic::Connection(mcpl::peer::Diagnostic::LateResponse { .. })
        )),
        "{diags:?}"
    );
}

/// A session granted the channel lifecycle, registration, incoming and publish, with
/// bidirectional channel `c1` registered.
async fn lifecycle_session(cfg: HostConfig) -> (HostSession, HostStreams, Server) {
    let mut m = full_manifest();
    m["channels"]["lifecycle"] = json!(true);
    let (s, streams, server) = connected_cfg(cfg, m).await;
    let c1 = json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "bidirectional" }] });
    let r = server.call("channels/register", c1).await.unwrap();
    assert_eq!(r["results"][0]["accepted"], true, "{r}");
    (s, streams, server)
}

fn lifecycle_config() -> HostConfig {
    config(&[
        "channels.register",
        "channels.lifecycle",
        "channels.incoming",
        "channels.publish",
    ])
}

/// One `channels/incoming` message on `channel`: its result.
async fn incoming_on(server: &Server, channel: &str) -> Value {
    let m = json!({ "messages": [{ "channelId": channel, "messageId": "m", "content": "hi" }] });
    let r = server.call("channels/incoming", m).await.unwrap();
    r["results"][0].clone()
}

/// §14.3, §14.5: a `channels/close` the server confirmed (`closed: true`) takes the channel
/// out of the set `channels/incoming` is validated against, in wire order: a message the
/// server sends right behind its answer is `-32023`, and publishing to it is refused
/// locally. A close answered with an error, or `closed: false`, changes nothing. Found by
/// the channels hunt: a confirmed close left the channel registered.
#[tokio::test]
async fn s14_5_a_confirmed_close_unregisters_the_channel_in_wire_order() {
    let (s, _streams, mut server) = lifecycle_session(lifecycle_config()).await;
    let close = |s: &HostSession| {
        let s = s.clone();
        tokio::spawn(async move {
            s.request_raw("channels/close", json!({ "channelId": "c1" }))
                .await
        })
    };
    // Refused, then not closed: the channel stays.
    let refused = close(&s);
    let req = server.request("channels/close").await;
    req.respond_error(ErrorObject::new(-32023, "unknown channel"))
        .await
        .unwrap();
    assert!(refused.await.unwrap().is_err());
    let not_closed = close(&s);
    let req = server.request("channels/close").await;
    req.respond(json!({ "closed": false })).await.unwrap();
    not_closed.await.unwrap().unwrap();
    assert_eq!(s.channels(), ["c1"]);
    assert_eq!(incoming_on(&server, "c1").await["accepted"], true);
    // Closed: the message sent right behind the answer is judged after it.
    let closed = close(&s);
    let req = server.request("channels/close").await;
    req.respond(json!({ "closed": true })).await.unwrap();
    let r = incoming_on(&server, "c1").await;
    assert_eq!(r["accepted"], false, "{r}");
    assert_eq!(r["code"], -32023, "{r}");
    assert_eq!(closed.await.unwrap().unwrap(), json!({ "closed": true }));
    assert!(s.channels().is_empty(), "{:?}", s.channels());
    let publish = json!({ "channelId": "c1", "content": [{ "type": "text", "text": "hi" }] });
    assert_eq!(
        s.notify_raw("channels/publish", publish).await,
        Err(HostError::ChannelNotPermitted("c1".into()))
    );
}

/// §14.5, fail closed, over the wire: a `channels/close` the server never answers in time
/// fails at the request timeout and takes the channel out (the server may have closed it):
/// a message on it is `-32023`, publishing to it is refused locally, and the late
/// `closed: true` is reported, not applied.
#[tokio::test(start_paused = true)]
async fn s14_5_a_close_never_answered_in_time_takes_the_channel_out() {
    let (s, _streams, mut server) = lifecycle_session(lifecycle_config()).await;
    let s2 = s.clone();
    let close = tokio::spawn(async move {
        s2.request_raw("channels/close", json!({ "channelId": "c1" }))
            .await
    });
    let held = server.request("channels/close").await;
    let r = close.await.unwrap();
    assert!(
        matches!(
            r,
            Err(HostError::Peer(mcpl::peer::PeerError::Timeout { .. }))
        ),
        "{r:?}"
    );
    assert!(s.channels().is_empty(), "{:?}", s.channels());
    let r = incoming_on(&server, "c1").await;
    assert_eq!(r["code"], -32023, "{r}");
    let publish = json!({ "channelId": "c1", "content": [{ "type": "text", "text": "hi" }] });
    assert_eq!(
        s.notify_raw("channels/publish", publish).await,
        Err(HostError::ChannelNotPermitted("c1".into()))
    );
    held.respond(json!({ "closed": true })).await.unwrap();
    server.call("ping", json!({})).await.unwrap();
    assert!(s.channels().is_empty());
}

/// §14.3, §14.5, §5.4: the channel a confirmed `channels/open` names joins the set the host
/// validates against, authorized at the answer's receipt like a registered descriptor (its
/// shape, the host's patterns, the grant's `channels.lifecycle`) and of the `type` asked for;
/// one refused is reported (`ChannelRejected`) and registers nothing, and an open answer
/// never replaces a channel already held. Found by the channels hunt: an opened channel was
/// never usable (incoming `-32023`, publish refused locally).
#[tokio::test]
async fn s14_5_a_confirmed_open_registers_the_channel_it_names_authorized_at_receipt() {
    let mut cfg = lifecycle_config();
    cfg.channel_patterns = Some(vec!["c1".into(), "chat:*".into()]);
    let (s, mut streams, mut server) = lifecycle_session(cfg).await;
    let open = |s: &HostSession| {
        let s = s.clone();
        tokio::spawn(async move {
            s.request_raw("channels/open", json!({ "type": "chat", "address": {} }))
                .await
        })
    };
    for (answer, reason) in [
        (
            json!({ "id": "chat:1", "type": "discord" }),
            "type_mismatch",
        ),
        (
            json!({ "id": "evil:1", "type": "chat" }),
            "capability_denied",
        ),
        (
            json!({ "id": "chat:1", "type": "chat", "direction": "up" }),
            "invalid_descriptor",
        ),
    ] {
        let call = open(&s);
        let req = server.request("channels/open").await;
        req.respond(json!({ "channel": answer })).await.unwrap();
        call.await.unwrap().unwrap();
        assert!(s.channels() == ["c1"], "{reason}: {:?}", s.channels());
        let diags = drain_diags(&mut streams);
        assert!(
            diags.iter().any(
                |d| matches!(d, HostDiagnostic::ChannelRejected { method, reason: r, .. }
                if method == "channels/open" && *r == reason)
            ),
            "{reason}: {diags:?}"
        );
    }
    // An open naming a held channel leaves its descriptor as registered (no widening).
    let call = open(&s);
    let req = server.request("channels/open").await;
    req.respond(json!({ "channel": { "id": "c1", "type": "chat", "direction": "inbound" } }))
        .await
        .unwrap();
    call.await.unwrap().unwrap();
    let publish = json!({ "channelId": "c1", "content": [{ "type": "text", "text": "hi" }] });
    s.notify_raw("channels/publish", publish).await.unwrap();
    server.notification("channels/publish").await;
    // Accepted: usable at once, in wire order.
    let call = open(&s);
    let req = server.request("channels/open").await;
    req.respond(
        json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "bidirectional" } }),
    )
    .await
    .unwrap();
    assert_eq!(incoming_on(&server, "chat:1").await["accepted"], true);
    call.await.unwrap().unwrap();
    assert_eq!(s.channels(), ["c1", "chat:1"]);
}

/// §4.1: the host sends each method only in the form its table gives it, by the rule the
/// receivers apply (`protocol::Kind::takes`): `channels/open` or `channels/close` as a
/// Notification is refused locally (a server would not apply it), typed or raw. Found by
/// the channels hunt: the outbound gate judged direction and grant only, so the call
/// succeeded and the server dropped the message.
#[tokio::test]
async fn s4_1_a_request_only_method_is_not_sent_as_a_notification() {
    let (s, _streams, mut server) = lifecycle_session(lifecycle_config()).await;
    let close = mcpl::protocol::channels::CloseParams {
        channel_id: "c1".into(),
        extra: Default::default(),
    };
    let typed = s
        .notify::<mcpl::protocol::channels::ChannelsClose>(&close)
        .await;
    assert!(
        matches!(&typed, Err(HostError::WrongForm { method, .. }) if method == "channels/close"),
        "{typed:?}"
    );
    let raw = s
        .notify_raw("channels/open", json!({ "type": "chat" }))
        .await;
    assert!(
        matches!(&raw, Err(HostError::WrongForm { method, .. }) if method == "channels/open"),
        "{raw:?}"
    );
    // Nothing reached the wire before the ping.
    server.expect_ping_next(&s).await;
}

#[tokio::test]
async fn s11_inference_request_answered_by_application_handler() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|method: &str, _p: Value| {
        let m = method.to_owned();
        Box::pin(async move { Ok(json!({ "content": [{"type":"text","text": m}] })) })
    }));
    let (_s, _streams, server) = connected_cfg(cfg, full_manifest()).await;
    let r = server
        .call(
            "inference/request",
            json!({ "featureSet": "assist", "messages": [] }),
        )
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "inference/request");
}

/// §11.3: the application's malformed `inference/request` result is not sent; the server
/// is answered `-32603` saying why, and the application is told on its diagnostics stream
/// (`AnswerReplaced`), where the mistake was only logged.
#[tokio::test]
async fn s11_3_a_malformed_application_result_is_answered_32603_and_reported() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_method: &str, _p: Value| {
        Box::pin(async move { Ok(json!({ "content": 5 })) })
    }));
    let (_s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let asked = json!({ "featureSet": "assist", "messages": [] });
    assert_eq!(server.call("inference/request", asked).await, Err(-32603));
    loop {
        match streams.diagnostics.recv().await {
            Some(HostDiagnostic::AnswerReplaced { reason, .. }) => {
                assert!(reason.contains("(§11.3)"), "{reason}");
                break;
            }
            Some(_) => {}
            None => panic!("no AnswerReplaced diagnostic"),
        }
    }
}

/// MCP `notifications/cancelled` from the server for an `inference/request` the application
/// is still working on: the host answers it `-32800` at once (every request gets an answer;
/// the server ignores it) and stops the handler (its future is dropped at its `.await`).
/// Before, the cancel was reported as an unexpected method and the handler ran on.
#[tokio::test]
async fn s11_an_inference_request_the_server_cancels_stops_its_handler() {
    struct Stopped(Option<tokio::sync::oneshot::Sender<()>>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
    let (stopped_tx, stopped) = tokio::sync::oneshot::channel();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some((started_tx, stopped_tx))));
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let (started, stopped) = slot.lock().unwrap().take().expect("called once");
        let _ = started.send(());
        let guard = Stopped(Some(stopped));
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            unreachable!("never resolves")
        })
    }));
    let (_s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let peer = server.peer.clone();
    let asked = tokio::spawn(async move {
        peer.request_raw(
            "inference/request",
            Some(json!({ "featureSet": "assist", "messages": [] })),
        )
        .await
    });
    // The server's first request of its own is id 1; cancelled once the handler has it.
    started.await.unwrap();
    server
        .peer
        .notify_raw(
            "notifications/cancelled",
            Some(json!({ "requestId": 1, "reason": "the user left" })),
        )
        .await
        .unwrap();
    let Err(mcpl::peer::PeerError::Remote(e)) = asked.await.unwrap() else {
        panic!("answered as cancelled")
    };
    assert_eq!(e.code, mcpl::jsonrpc::codes::REQUEST_CANCELLED);
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the handler is stopped (a guard: before, it ran for ever)")
        .unwrap();
    assert!(
        !drain_diags(&mut streams)
            .iter()
            .any(|d| matches!(d, HostDiagnostic::UnexpectedMethod { .. })),
        "a cancel is no unexpected method"
    );
}

/// §11.3 / App. B.4: a malformed result from the application (here OpenAI's
/// `finishReason: "stop"`, what an audited host sent) is not sent on: the server gets
/// `-32603` naming the defect, as `mcpl check-host` would report it.
#[tokio::test]
async fn s11_3_a_malformed_application_result_is_not_sent() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async move { Ok(json!({ "content": "Hello", "finishReason": "stop" })) })
    }));
    let (_s, _streams, server) = connected_cfg(cfg, full_manifest()).await;
    let r = server
        .peer
        .request_raw(
            "inference/request",
            Some(json!({ "featureSet": "assist", "messages": [] })),
        )
        .await;
    let Err(mcpl::peer::PeerError::Remote(e)) = r else {
        panic!("expected an error, got {r:?}")
    };
    assert_eq!(e.code, -32603);
    assert!(e.message.contains("finishReason \"stop\""), "{}", e.message);
}

/// A manifest advertising streamed inference with an `assist.stream` set that uses it, and a
/// host config granting both leaves (§11.4).
fn streaming_setup() -> (Value, HostConfig) {
    let mut m = full_manifest();
    m["inferenceRequest"] = json!({ "streaming": true });
    m["featureSets"]["assist.stream"] = json!({ "description": "Streams",
        "uses": ["inferenceRequest", "inferenceRequest.streaming"] });
    (
        m,
        config(&["inferenceRequest", "inferenceRequest.streaming"]),
    )
}

/// Sends a streamed `inference/request` under `assist.stream` from the server with
/// `Peer::send_request`, and reads the wire in order until its response: the `inference/chunk`
/// params read before it, and its outcome.
async fn streamed_request(
    server: &mut Server,
    text: &str,
) -> (Vec<Value>, Result<Value, ErrorObject>) {
    let params = json!({ "featureSet": "assist.stream", "stream": true,
                         "messages": [{ "role": "user", "content": text }] });
    let id = server
        .peer
        .send_request("inference/request", Some(params), |_| {})
        .await
        .unwrap();
    let mut chunks = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), server.incoming.recv_ordered())
            .await
            .expect("the host answers within 10 s")
            .expect("the connection stays open");
        match item {
            mcpl::peer::Ordered::Response(r) if r.id.as_ref() == Some(&id) => {
                return (chunks, r.outcome)
            }
            mcpl::peer::Ordered::Message(IncomingMessage::Notification(n))
                if n.method == "inference/chunk" =>
            {
                chunks.push(n.params.unwrap_or(Value::Null))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// §11.4: with a stream handler, a `stream: true` request gets its `inference/chunk`
/// notifications (`requestId` its id, `index` from 0) before the final response.
#[tokio::test]
async fn s11_4_streaming_inference_sends_chunks_before_the_result() {
    let (m, mut cfg) = streaming_setup();
    cfg.stream_handler = Some(std::sync::Arc::new(
        |_p: Value, mut sink: mcpl::host::ChunkSink| {
            Box::pin(async move {
                sink.send("Hel")
                    .await
                    .map_err(|e| ErrorObject::internal(e.to_string()))?;
                sink.send("lo")
                    .await
                    .map_err(|e| ErrorObject::internal(e.to_string()))?;
                Ok(json!({ "content": "Hello", "finishReason": "end_turn",
                       "usage": { "outputTokens": sink.sent() } }))
            })
        },
    ));
    let (s, _streams, mut server) = connected_cfg(cfg, m).await;
    assert!(s.grant().allows(Capability::InferenceRequestStreaming));
    let peer = server.peer.clone();
    let sent_as = std::sync::Arc::new(std::sync::Mutex::new(None));
    let id_slot = sent_as.clone();
    let call = tokio::spawn(async move {
        peer.request_raw_with(
            "inference/request",
            Some(json!({ "featureSet": "assist.stream", "stream": true,
                         "messages": [{ "role": "user", "content": "hi" }] })),
            mcpl::peer::RequestOptions::new()
                .on_id(move |id| *id_slot.lock().unwrap() = Some(id.to_value())),
        )
        .await
    });
    for (i, delta) in ["Hel", "lo"].into_iter().enumerate() {
        let c = server.notification("inference/chunk").await.unwrap();
        let id = sent_as.lock().unwrap().clone().unwrap();
        assert_eq!(c, json!({ "requestId": id, "index": i, "delta": delta }));
    }
    let r = call.await.unwrap().unwrap();
    assert_eq!(r["content"], "Hello");
    assert_eq!(r["usage"]["outputTokens"], 2);
    // On the wire, both chunks come before the response (read in wire order).
    let (chunks, r) = streamed_request(&mut server, "again").await;
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert_eq!(r.unwrap()["content"], "Hello");
}

/// Connects under `cfg` to `m` and sends a streamed request whose answer is `Hello`: it
/// reaches the server as exactly one chunk (`index` 0, the whole text) before the response.
async fn streamed_text_is_one_chunk(cfg: HostConfig, m: Value) {
    let (_s, _streams, mut server) = connected_cfg(cfg, m).await;
    let (chunks, r) = streamed_request(&mut server, "hi").await;
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert_eq!(
        (&chunks[0]["index"], &chunks[0]["delta"]),
        (&json!(0), &json!("Hello"))
    );
    assert_eq!(r.unwrap()["content"], "Hello");
}

/// §11.4 without a stream handler: the request handler's final text still reaches the server
/// as a chunk (`index` 0, the whole text) before the response.
#[tokio::test]
async fn s11_4_without_a_stream_handler_the_final_text_is_one_chunk() {
    let (m, mut cfg) = streaming_setup();
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async move { Ok(json!({ "content": "Hello", "finishReason": "end_turn" })) })
    }));
    streamed_text_is_one_chunk(cfg, m).await;
}

/// §11.4: a stream handler that sent no chunk still owes one: its final text goes out as
/// chunk 0 before the response (the rule `HostState::answer` applies too,
/// `session::rules::owed_chunk`).
#[tokio::test]
async fn s11_4_a_stream_handler_that_sent_no_chunk_still_sends_the_text_as_one() {
    let (m, mut cfg) = streaming_setup();
    cfg.stream_handler = Some(std::sync::Arc::new(
        |_p: Value, _sink: mcpl::host::ChunkSink| {
            Box::pin(async move { Ok(json!({ "content": "Hello", "finishReason": "end_turn" })) })
        },
    ));
    streamed_text_is_one_chunk(cfg, m).await;
}

/// §5.4, §17.5: a hook answer is judged under the grant and the manifest in force where it
/// is read. A fetched manifest read right behind it, which drops the feature set the answer
/// names, does not reach back: the injection stands (`HostState` judges it so too; found by
/// `host_differential.rs`).
#[tokio::test]
async fn s5_4_a_hook_answer_is_judged_under_the_manifest_in_force_where_it_is_read() {
    let (s, _streams, mut server, fan, hook) = hook_in_flight().await;
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = server.request("mcpl/manifest").await;
    hook.respond(json!({ "featureSet": "memory", "contextInjections": [
        { "namespace": "m", "position": "beforeUser", "content": "ctx" }
    ]}))
    .await
    .unwrap();
    let mut without_memory = full_manifest();
    without_memory["featureSets"]
        .as_object_mut()
        .unwrap()
        .remove("memory");
    fetch.respond(without_memory).await.unwrap();
    refresh.await.unwrap().unwrap();
    let inj = fan.await.unwrap();
    assert!(inj.rejected.is_empty(), "{:?}", inj.rejected);
    assert_eq!(inj.before_user.len(), 1);
    assert_eq!(inj.before_user[0].injection["content"], "ctx");
}

#[tokio::test]
async fn s10_system_injection_rejected_while_before_user_accepted() {
    let (_s, mut streams, _server, fan, hook) = hook_in_flight().await;
    assert_eq!(
        hook.request().params.as_ref().unwrap()["userMessage"],
        "hello"
    );
    hook.respond(json!({ "featureSet": "memory", "contextInjections": [
        { "namespace": "m", "position": "system", "content": "sys" },
        { "namespace": "m", "position": "beforeUser", "content": "ctx" },
        { "namespace": "m", "position": "sideways", "content": "?" }
    ]}))
    .await
    .unwrap();
    let inj = fan.await.unwrap();
    assert_eq!(inj.before_user.len(), 1);
    assert_eq!(inj.before_user[0].injection["content"], "ctx");
    assert!(inj.system.is_empty());
    assert_eq!(inj.rejected.len(), 2);
    assert!(matches!(
        &inj.rejected[0].reason,
        mcpl::policy::InjectionDenied::Denied(d) if d.capability == Capability::InjectSystem
    ));
    assert!(drain_diags(&mut streams)
        .iter()
        .any(|d| matches!(d, HostDiagnostic::InjectionRejected { .. })));
}

/// §6.4 rule 2: a use the exercising feature set did not declare is rejected — `-32002`
/// naming the capability and the set — with a declaration-mismatch diagnostic, although
/// the grant holds the capability.
#[tokio::test]
async fn s6_4_an_undeclared_use_is_rejected_with_a_declaration_mismatch() {
    let (_s, mut streams, server) =
        connected(&["pushEvents", "inferenceRequest"], full_manifest()).await;
    let mut p = push("e1");
    p["featureSet"] = json!("assist"); // uses: [inferenceRequest]
    let e = server
        .peer
        .request_raw("push/event", Some(p))
        .await
        .unwrap_err();
    let e = e.remote().unwrap();
    assert_eq!(e.code, -32002);
    assert_eq!(
        e.data,
        Some(json!({ "capability": "pushEvents", "featureSet": "assist",
                     "reason": "declaration_mismatch" }))
    );
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(d,
        HostDiagnostic::DeclarationMismatch { feature_set, missing, .. }
            if feature_set == "assist" && missing == &["pushEvents"])));
    // The declared use goes through.
    assert_eq!(
        server.call("push/event", push("e2")).await.unwrap()["accepted"],
        true
    );
}

/// §10.4, §6.5, §6.4 rule 2: beyond its position, each injection is judged by its shape
/// and by the set the response claims — named, declared, available, declaring the position.
#[tokio::test]
async fn s10_4_injections_are_judged_by_shape_and_by_the_claimed_set() {
    let policy = [
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    ];
    let (s, _streams, mut server) = connected(&policy, full_manifest()).await;
    let mut outcomes = Vec::new();
    for result in [
        // memory declares beforeUser, not afterUser; one malformed entry.
        json!({ "featureSet": "memory", "contextInjections": [
            { "namespace": "m", "position": "beforeUser", "content": "ok" },
            { "namespace": "m", "position": "afterUser", "content": "undeclared" },
            { "position": "beforeUser", "content": "no namespace" },
            { "namespace": "m", "position": "beforeUser", "content": 7 } ]}),
        // No featureSet, and an undeclared one.
        json!({ "contextInjections": [
            { "namespace": "m", "position": "beforeUser", "content": "unclaimed" } ]}),
        json!({ "featureSet": "ghost", "contextInjections": [
            { "namespace": "m", "position": "beforeUser", "content": "ghost" } ]}),
    ] {
        let s2 = s.clone();
        let params =
            json!({"inferenceId":"i","conversationId":"c","turnIndex":0,"userMessage":"u"});
        let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
        server
            .request("context/beforeInference")
            .await
            .respond(result)
            .await
            .unwrap();
        outcomes.push(fan.await.unwrap());
    }
    use mcpl::policy::InjectionDenied as D;
    let first = &outcomes[0];
    assert_eq!(first.before_user.len(), 1);
    assert_eq!(first.before_user[0].injection["content"], "ok");
    let reasons: Vec<&D> = first.rejected.iter().map(|r| &r.reason).collect();
    assert!(
        matches!(reasons[0], D::Undeclared { feature_set, capability }
        if feature_set == "memory" && *capability == Capability::InjectAfterUser)
    );
    assert!(matches!(reasons[1], D::Malformed(_)));
    assert!(matches!(reasons[2], D::Malformed(_)));
    assert!(matches!(
        &outcomes[1].rejected[0].reason,
        D::FeatureSet {
            feature_set: None,
            code: "missing"
        }
    ));
    assert!(matches!(
        &outcomes[2].rejected[0].reason,
        D::FeatureSet {
            code: "unknown_feature_set",
            ..
        }
    ));
    assert!(outcomes[1..].iter().all(|o| o.before_user.is_empty()));
}

#[tokio::test]
async fn s10_1_user_message_null_without_observe() {
    let (s, _streams, mut server) = connected(
        &["contextHooks.beforeInference.inject.afterUser"],
        full_manifest(),
    )
    .await;
    let s2 = s.clone();
    let params =
        json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"secret"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    let hook = server.request("context/beforeInference").await;
    assert_eq!(
        hook.request().params.as_ref().unwrap()["userMessage"],
        Value::Null
    );
    hook.respond(json!({ "featureSet": "notes", "contextInjections": [
        { "namespace": "m", "position": "afterUser", "content": "x" }]}))
        .await
        .unwrap();
    assert_eq!(fan.await.unwrap().after_user.len(), 1);
}

#[tokio::test]
async fn s5_4_revocation_during_hook_rejects_its_injections() {
    let (s, _streams, mut server) = connected(
        &["contextHooks.beforeInference.inject.beforeUser", "tools"],
        full_manifest(),
    )
    .await;
    let s2 = s.clone();
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    let hook = server.request("context/beforeInference").await;
    // The revocation lands while the hook is in flight.
    set_policy_accepted(&s, &mut server, &["tools"]).await;
    hook.respond(json!({ "featureSet": "context", "contextInjections": [
        { "namespace": "m", "position": "beforeUser", "content": "late" }]}))
        .await
        .unwrap();
    let inj = fan.await.unwrap();
    assert!(inj.before_user.is_empty());
    assert_eq!(inj.rejected.len(), 1);
}

#[tokio::test]
async fn s10_hook_timeout_fails_open() {
    let (s, _streams, mut server) = connected_cfg(
        short(&["contextHooks.beforeInference.observe"]),
        full_manifest(),
    )
    .await;
    let s2 = s.clone();
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    let held = server.request("context/beforeInference").await;
    let inj = fan.await.unwrap();
    assert_eq!(inj.failures.len(), 1);
    assert!(inj.before_user.is_empty() && inj.rejected.is_empty());
    drop(held);
}

// ---------------------------------------------------------------------------------------
// Channels (§14.5)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn s14_5_register_itemized_and_incoming_validated_per_message() {
    let mut cfg = config(&["channels.register", "channels.incoming"]);
    cfg.channel_patterns = Some(vec!["discord:acme/*".into()]);
    let (s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [
                { "id": "discord:acme/general", "type": "discord", "direction": "bidirectional" },
                { "id": "discord:evil/admin", "type": "discord", "direction": "bidirectional" },
                { "id": "", "type": "discord", "direction": "bidirectional" }
            ]}),
        )
        .await
        .unwrap();
    let res = r["results"].as_array().unwrap();
    assert_eq!(res.len(), 3);
    assert_eq!(
        res[0],
        json!({ "id": "discord:acme/general", "accepted": true })
    );
    assert_eq!(res[1]["accepted"], false);
    assert_eq!(res[1]["reason"], "capability_denied");
    assert_eq!(res[2]["reason"], "invalid_descriptor");
    assert_eq!(s.channels(), vec!["discord:acme/general".to_string()]);

    let r = server
        .call(
            "channels/incoming",
            json!({ "messages": [
                { "channelId": "discord:acme/general", "messageId": "m1", "content": "hi" },
                { "channelId": "discord:evil/admin", "messageId": "m2", "content": "hi" },
                // §14.3 content is a string or App. B.1 blocks: MCP's nested resource is not.
                { "channelId": "discord:acme/general", "messageId": "m3",
                  "content": [{ "type": "resource", "resource": { "uri": "x://y" } }] }
            ]}),
        )
        .await
        .unwrap();
    let res = r["results"].as_array().unwrap();
    assert_eq!(res[0]["accepted"], true);
    assert_eq!(res[1]["accepted"], false);
    assert_eq!(res[1]["code"], -32023);
    assert_eq!(
        res[2],
        json!({ "messageId": "m3", "accepted": false, "reason": "invalid_message", "code": -32602 })
    );
    match streams.events.recv().await.unwrap() {
        HostEvent::ChannelMessage { channel_id, .. } => {
            assert_eq!(channel_id, "discord:acme/general")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(streams.events.try_recv().is_err());
}

/// §14.3, one rule with `mcpl check`'s `channels.incoming-shape`: a message without a
/// string `channelId`, or with a mistyped `author` or `timestamp`, is `invalid_message`
/// (the host used to take a missing `channelId` for an unknown channel and to admit the
/// other two); bad tags do not refuse a message (§16.6).
#[tokio::test]
async fn s14_3_incoming_message_shape_is_one_rule() {
    let (_s, mut streams, server) =
        connected(&["channels.register", "channels.incoming"], full_manifest()).await;
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "c1", "type": "k", "direction": "inbound" }] }),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["accepted"], true);
    let r = server
        .call(
            "channels/incoming",
            json!({ "messages": [
                { "messageId": "m1", "content": "hi" },
                { "channelId": "c1", "messageId": "m2", "content": "hi", "author": "alice" },
                { "channelId": "c1", "messageId": "m3", "content": "hi", "timestamp": 5 },
                { "channelId": "c1", "messageId": "m4", "content": "hi", "tags": ["bare"] }
            ]}),
        )
        .await
        .unwrap();
    let res = r["results"].as_array().unwrap();
    for (i, mid) in ["m1", "m2", "m3"].into_iter().enumerate() {
        assert_eq!(
            res[i],
            json!({ "messageId": mid, "accepted": false, "reason": "invalid_message", "code": -32602 })
        );
    }
    assert_eq!(res[3], json!({ "messageId": "m4", "accepted": true }));
    match streams.events.recv().await.unwrap() {
        HostEvent::ChannelMessage { channel_id, .. } => assert_eq!(channel_id, "c1"),
        other => panic!("unexpected {other:?}"),
    }
}

/// §14.3, §9.2: a `channels/incoming` message's `timestamp` is judged by the one ISO 8601
/// rule `push/event`'s is (`protocol::time::timestamp_defect`): a string that is no ISO 8601
/// time is `invalid_message`. Found by the channels hunt: only the JSON type was checked, so
/// `"yesterday"` was admitted while a push with it was refused.
#[tokio::test]
async fn s14_3_an_incoming_timestamp_is_judged_as_iso_8601_like_a_push() {
    let (_s, mut streams, server) =
        connected(&["channels.register", "channels.incoming"], full_manifest()).await;
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "c1", "type": "k", "direction": "inbound" }] }),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["accepted"], true);
    let r = server
        .call(
            "channels/incoming",
            json!({ "messages": [
                { "channelId": "c1", "messageId": "m1", "content": "hi", "timestamp": "yesterday" },
                { "channelId": "c1", "messageId": "m2", "content": "hi",
                  "timestamp": "2026-03-05 10:30:00Z" },
                { "channelId": "c1", "messageId": "m3", "content": "hi",
                  "timestamp": "2026-03-05T10:30:00Z" }
            ]}),
        )
        .await
        .unwrap();
    let res = r["results"].as_array().unwrap();
    for (i, mid) in ["m1", "m2"].into_iter().enumerate() {
        assert_eq!(
            res[i],
            json!({ "messageId": mid, "accepted": false, "reason": "invalid_message", "code": -32602 })
        );
    }
    assert_eq!(res[2], json!({ "messageId": "m3", "accepted": true }));
    match streams.events.recv().await.unwrap() {
        HostEvent::ChannelMessage { message, .. } => assert_eq!(message["messageId"], "m3"),
        other => panic!("unexpected {other:?}"),
    }
}

/// §4.1, §14.3: each channel method is taken only in the form §4.1's table gives it (the
/// `protocol::Kind` of its `Method`): `channels/register`, `channels/incoming` and
/// `channels/list` are Requests, so sent as Notifications they are not applied and each is
/// reported (`UnexpectedMethod`), while `channels/changed` (Notification or Request) is
/// applied. Found by the channels hunt: a `channels/register` Notification was applied while
/// a `channels/incoming` one (AUDIT-001: x-mcpl, xgate) was reported and dropped.
#[tokio::test]
async fn s4_1_a_request_only_channel_method_sent_as_a_notification_is_reported_not_applied() {
    let (s, mut streams, server) =
        connected(&["channels.register", "channels.incoming"], full_manifest()).await;
    let d = |id: &str| json!({ "id": id, "type": "k", "direction": "inbound" });
    server
        .notify("channels/register", Some(json!({ "channels": [d("c1")] })))
        .await;
    server.notify("channels/list", Some(json!({}))).await;
    server.call("ping", json!({})).await.unwrap();
    assert!(s.channels().is_empty(), "{:?}", s.channels());
    server.register_inbound("c2").await;
    server
        .notify(
            "channels/incoming",
            Some(
                json!({ "messages": [{ "channelId": "c2", "messageId": "m1", "content": "hi" }] }),
            ),
        )
        .await;
    server
        .notify("channels/changed", Some(json!({ "added": [d("c3")] })))
        .await;
    server.call("ping", json!({})).await.unwrap();
    assert_eq!(s.channels(), vec!["c2".to_string(), "c3".to_string()]);
    while let Ok(e) = streams.events.try_recv() {
        assert!(
            !matches!(e, HostEvent::ChannelMessage { .. }),
            "no message admitted: {e:?}"
        );
    }
    let unexpected: Vec<String> = drain_diags(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::UnexpectedMethod { method } => Some(method),
            _ => None,
        })
        .collect();
    assert_eq!(
        unexpected,
        ["channels/register", "channels/list", "channels/incoming"],
        "each one not applied is reported"
    );
}

/// §14.5: a malformed channel Notification is one defect, reported once, as `HostState`
/// does (found by `host_differential.rs`): a `channels/changed` one by the core channel
/// table, a `channels/register` one by its form (§4.1: a Request, so as a Notification it is
/// not read at all).
#[tokio::test]
async fn s14_5_a_malformed_channel_notification_is_reported_once() {
    let (_s, mut streams, server) = connected(&["channels.register"], full_manifest()).await;
    for (method, params) in [
        ("channels/register", json!({ "channels": 5 })),
        ("channels/changed", json!({ "removed": 5 })),
    ] {
        server.notify(method, Some(params)).await;
        // Answered after the dispatch loop handled the notification before it.
        server.call("ping", json!({})).await.unwrap();
        let reported = drain_diags(&mut streams)
            .iter()
            .filter(|d| match d {
                HostDiagnostic::BadParams { method: m, .. }
                | HostDiagnostic::UnexpectedMethod { method: m } => m == method,
                _ => false,
            })
            .count();
        assert_eq!(reported, 1, "{method}: one defect, one diagnostic");
    }
}

#[tokio::test]
async fn s14_5_incoming_after_grant_narrowed_is_not_permitted() {
    let (s, _streams, mut server) = connected(
        &["channels.register", "channels.incoming", "tools"],
        full_manifest(),
    )
    .await;
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "c1", "type": "k", "direction": "bidirectional" }] }),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["accepted"], true);
    set_policy_accepted(&s, &mut server, &["channels.register"]).await;
    // The whole method is now denied: channels.incoming was revoked.
    assert_eq!(
        server
            .call(
                "channels/incoming",
                json!({ "messages": [
                { "channelId": "c1", "messageId": "m1", "content": "hi" }]})
            )
            .await,
        Err(-32002)
    );
}

#[tokio::test]
async fn s14_5_changed_notification_filtered_itemwise_with_diagnostic() {
    let mut cfg = config(&["channels.register"]);
    cfg.channel_patterns = Some(vec!["ok:*".into()]);
    let (s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    server.notify(
            "channels/changed",
            Some(json!({ "added": [
                { "id": "ok:1", "type": "k", "direction": "bidirectional" }, { "id": "bad:1", "type": "k", "direction": "bidirectional" }]})),
        ).await;
    // A request after the notification: the host handles messages in order.
    let r = server
        .call("channels/changed", json!({ "removed": ["ok:1", "never"] }))
        .await
        .unwrap();
    assert_eq!(r["results"][0], json!({"id": "ok:1", "accepted": true}));
    assert_eq!(r["results"][1]["reason"], "unknown_channel");
    assert!(s.channels().is_empty());
    let diags = drain_diags(&mut streams);
    assert!(diags.iter().any(|d| matches!(d,
        HostDiagnostic::ChannelRejected { id, filtered_notification: true, .. } if id == "bad:1")));
}

/// §14.5 / §6.7: a removal only narrows, so `channels/changed` still removes a channel this
/// connection registered after `channels.register` was revoked — as a Request (answered
/// item-wise: the removal accepted, an addition in the same message `capability_denied`)
/// and as a Notification. The removed channel is no longer published to.
#[tokio::test]
async fn s14_5_removals_apply_after_channels_register_was_revoked() {
    let (s, mut streams, mut server) =
        connected(&["channels.register", "channels.publish"], full_manifest()).await;
    server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "outbound" },
                                 { "id": "c2", "type": "chat", "direction": "outbound" }] }),
        )
        .await
        .unwrap();
    let c = set_policy_accepted(&s, &mut server, &["channels.publish"]).await;
    assert!(c.narrowed.contains(Capability::ChannelsRegister));

    let r = server
        .call(
            "channels/changed",
            json!({ "removed": ["c1"],
                    "added": [{ "id": "c3", "type": "chat", "direction": "outbound" }] }),
        )
        .await
        .unwrap();
    assert_eq!(
        r["results"],
        json!([{ "id": "c1", "accepted": true },
               { "id": "c3", "accepted": false, "reason": "capability_denied" }])
    );
    assert_eq!(s.channels(), ["c2"]);
    let publish =
        |id: &str| json!({ "channelId": id, "content": [{ "type": "text", "text": "hi" }] });
    assert_eq!(
        s.notify_raw("channels/publish", publish("c1")).await,
        Err(HostError::ChannelNotPermitted("c1".into()))
    );

    server
        .notify("channels/changed", Some(json!({ "removed": ["c2"] })))
        .await;
    // Handled in order: once the ping is answered, the notification was applied.
    server.call("ping", json!({})).await.unwrap();
    assert!(s.channels().is_empty());
    let diags = drain_diags(&mut streams);
    assert!(diags.iter().any(|d| matches!(d,
        HostDiagnostic::ChannelRejected { id, reason: "capability_denied", .. } if id == "c3")));
    server.expect_ping_next(&s).await;
}

/// §17.6, §17.7: a `channels/changed` that changed no channel (every item rejected, or
/// nothing in it) makes no `surface-changed` receipt; one that changed a channel makes one.
/// Found by the protocol-area hunt: every answered `channels/changed` made one, so a server
/// repeating `{"removed": ["nope"]}` had the host tell the resident its channels changed
/// each time, while none had.
#[tokio::test]
async fn s17_7_a_channel_change_that_changed_nothing_makes_no_receipt() {
    let (s, mut streams, server) = connected(&["channels.register"], full_manifest()).await;
    server.register_outbound("c1").await;
    let unchanged = [
        json!({ "removed": ["nope"] }),
        json!({}),
        json!({ "updated": [{ "id": "ghost", "type": "chat", "direction": "outbound" }] }),
        json!({ "added": [{ "id": "", "type": "chat" }] }),
    ];
    for params in unchanged.iter().cloned() {
        server
            .call("channels/changed", params.clone())
            .await
            .unwrap();
        server.notify("channels/changed", Some(params)).await;
    }
    server
        .call("channels/changed", json!({ "removed": ["c1"] }))
        .await
        .unwrap();
    assert!(s.channels().is_empty());
    let mut receipts = 0;
    while let Ok(e) = streams.events.try_recv() {
        if let HostEvent::ManifestChange(r) = e {
            assert_eq!(r.impacts[0].subject, "channels");
            receipts += 1;
        }
    }
    assert_eq!(receipts, 1, "only the change that removed c1 is told");
}

// ---------------------------------------------------------------------------------------
// Outbound gating and lifecycle (§10.5)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn s14_outbound_gating_refuses_locally() {
    let (s, _streams, mut server) =
        connected(&["channels.publish", "tools"], full_manifest()).await;
    assert_eq!(
        s.outgoing_stream("i", None)
            .await
            .unwrap()
            .chunk("c", "x")
            .await,
        Err(HostError::NotGranted(Capability::ChannelsStreaming))
    );
    assert_eq!(
        s.start_turn("i1", "c", 0).await.err(),
        Some(HostError::NotGranted(Capability::InferenceLifecycle))
    );
    assert!(matches!(
        s.notify_raw("push/event", json!({})).await,
        Err(HostError::WrongDirection(_))
    ));
    // Nothing of the above reached the wire: the next message is this ping.
    server.expect_ping_next(&s).await;
}

/// The generic send paths keep no method's obligations, so methods that have them are
/// refused there: `context/beforeInference` (redaction, per-injection judgement),
/// `featureSets/update` (grant bookkeeping) and `inference/lifecycle` (one terminal).
/// Channel methods are keyed on the channel id (§14.1, §14.5): only a channel this server
/// registered, and the host's patterns permit, can be published to.
#[tokio::test]
async fn outbound_generic_paths_refuse_dedicated_methods_and_unregistered_channels() {
    let mut cfg = config(&[
        "channels.register",
        "channels.publish",
        "inferenceLifecycle",
        "contextHooks.beforeInference.inject.beforeUser",
    ]);
    cfg.channel_patterns = Some(vec!["chat:*".into(), "ops:allowed".into()]);
    let (s, _streams, mut server) = connected_cfg(cfg, full_manifest()).await;
    for (method, instead) in [
        ("context/beforeInference", "host::before_inference"),
        ("featureSets/update", "HostSession::set_policy"),
        ("inference/lifecycle", "HostSession::start_turn"),
        ("inference/chunk", "ChunkSink::send"),
    ] {
        let e = s.request_raw(method, json!({})).await.unwrap_err();
        assert_eq!(
            e,
            HostError::UseDedicated {
                method: method.into(),
                instead
            }
        );
        assert!(s.notify_raw(method, json!({})).await.is_err());
    }
    let publish =
        |id: &str| json!({ "channelId": id, "content": [{ "type": "text", "text": "hi" }] });
    assert_eq!(
        s.notify_raw("channels/publish", publish("chat:a")).await,
        Err(HostError::ChannelNotPermitted("chat:a".into()))
    );
    server.expect_ping_next(&s).await;
    server.register_outbound("chat:a").await;
    s.notify_raw("channels/publish", publish("chat:a"))
        .await
        .unwrap();
    let got = server.notification("channels/publish").await.unwrap();
    assert_eq!(got["channelId"], "chat:a");
    assert_eq!(
        s.notify_raw("channels/publish", publish("chat:b")).await,
        Err(HostError::ChannelNotPermitted("chat:b".into()))
    );
    // Publishing needs a channel that claims outbound ability (§14.2).
    server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "chat:in", "type": "chat", "direction": "inbound" },
                                 { "id": "chat:any", "type": "chat" }] }),
        )
        .await
        .unwrap();
    for id in ["chat:in", "chat:any"] {
        assert_eq!(
            s.notify_raw("channels/publish", publish(id)).await,
            Err(HostError::ChannelNotPermitted(id.into()))
        );
    }
}

/// A session granted `channels.register` and `channels.streaming` whose server registered
/// the given `(id, direction)` channels.
async fn streaming_to(channels: &[(&str, &str)]) -> (HostSession, HostStreams, Server) {
    let (s, streams, server) = connected(
        &["channels.register", "channels.streaming"],
        full_manifest(),
    )
    .await;
    let descriptors: Vec<Value> = channels
        .iter()
        .map(|(id, dir)| json!({ "id": id, "type": "chat", "direction": dir }))
        .collect();
    server
        .call("channels/register", json!({ "channels": descriptors }))
        .await
        .unwrap();
    (s, streams, server)
}

/// The next `channels/outgoing/chunk`'s `(channelId, index)`.
async fn next_chunk(server: &mut Server) -> (Value, Value) {
    let c = server
        .notification("channels/outgoing/chunk")
        .await
        .unwrap();
    (c["channelId"].clone(), c["index"].clone())
}

/// §14.3 outgoing streams: one `index` counter across the inference's channels, exactly one
/// `complete` per channel that got chunks carrying its whole text — the rest completed when
/// the stream is dropped — and only to channels this server registered as outbound.
#[tokio::test]
async fn s14_3_outgoing_stream_indexes_across_channels_and_completes_each_once() {
    let (s, _streams, mut server) =
        streaming_to(&[("a", "outbound"), ("b", "bidirectional")]).await;
    let mut out = s.outgoing_stream("inf", Some("conv")).await.unwrap();
    // One stream per inference: a second would restart `index` at 0.
    assert_eq!(
        s.outgoing_stream("inf", None).await.err(),
        Some(HostError::StreamExists("inf".into()))
    );
    assert_eq!(
        out.chunk("nope", "x").await,
        Err(HostError::ChannelNotPermitted("nope".into()))
    );
    out.chunk("a", "Hel").await.unwrap();
    out.chunk("b", "Yo").await.unwrap();
    out.chunk("a", "lo").await.unwrap();
    out.complete("a").await.unwrap();
    // Nothing more: a was completed (§14.3, one `complete` per channel).
    assert!(matches!(
        out.complete("a").await,
        Err(HostError::ChannelCompleted { .. })
    ));
    drop(out); // b still open: completed from a spawned task
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            server
                .notification("channels/outgoing/chunk")
                .await
                .unwrap(),
        );
    }
    let indexes: Vec<_> = got.iter().map(|c| c["index"].clone()).collect();
    assert_eq!(indexes, [json!(0), json!(1), json!(2)]);
    assert_eq!(got[1]["channelId"], "b");
    let done_a = server
        .notification("channels/outgoing/complete")
        .await
        .unwrap();
    assert_eq!(
        done_a,
        json!({ "inferenceId": "inf", "conversationId": "conv", "channelId": "a",
                "content": [{ "type": "text", "text": "Hello" }] })
    );
    let done_b = server
        .notification("channels/outgoing/complete")
        .await
        .unwrap();
    assert_eq!(done_b["channelId"], "b");
    assert_eq!(done_b["content"][0]["text"], "Yo");
    server.expect_ping_next(&s).await;
    // Ended, it is not restarted either (its channels were completed); another inference is
    // a new stream.
    assert_eq!(
        s.outgoing_stream("inf", None).await.err(),
        Some(HostError::StreamExists("inf".into()))
    );
    let mut next = s.outgoing_stream("inf2", None).await.unwrap();
    next.chunk("a", "x").await.unwrap();
    let first = server
        .notification("channels/outgoing/chunk")
        .await
        .unwrap();
    assert_eq!(
        (first["inferenceId"].clone(), first["index"].clone()),
        (json!("inf2"), json!(0))
    );
    next.finish().await.unwrap();
}

/// §14.3: `complete` is sent once per `(inferenceId, channelId)` and carries the channel's
/// whole text. A chunk (or a second `complete`) on a channel after its `complete` is refused
/// locally and sends nothing; the stream's other channels, and `finish`, go on as before.
#[tokio::test]
async fn s14_3_a_completed_channel_is_not_reopened_by_a_later_chunk() {
    let (s, _streams, mut server) = streaming_to(&[("a", "outbound"), ("b", "outbound")]).await;
    let mut out = s.outgoing_stream("inf", None).await.unwrap();
    out.chunk("a", "Hello ").await.unwrap();
    out.complete("a").await.unwrap();
    let refused = HostError::ChannelCompleted {
        inference_id: "inf".into(),
        channel_id: "a".into(),
    };
    assert_eq!(out.chunk("a", "world").await, Err(refused.clone()));
    assert_eq!(out.complete("a").await, Err(refused));
    out.chunk("b", "other").await.unwrap();
    out.finish().await.unwrap();

    assert_eq!(next_chunk(&mut server).await, (json!("a"), json!(0)));
    let done = server
        .notification("channels/outgoing/complete")
        .await
        .unwrap();
    assert_eq!(done["channelId"], "a");
    assert_eq!(done["content"][0]["text"], "Hello ");
    // The refused chunk took no index and reached no wire: b's chunk is index 1.
    assert_eq!(next_chunk(&mut server).await, (json!("b"), json!(1)));
    let done = server
        .notification("channels/outgoing/complete")
        .await
        .unwrap();
    assert_eq!(done["channelId"], "b");
    // No second `complete` for a follows.
    server.expect_ping_next(&s).await;
}

#[tokio::test]
async fn s10_5_dropped_turn_sends_aborted_once() {
    let (s, _streams, mut server) = connected(&["inferenceLifecycle"], full_manifest()).await;
    let turn = s.start_turn("i1", "c", 3).await.unwrap();
    let started = server.notification("inference/lifecycle").await.unwrap();
    assert_eq!(started["phase"], "started");
    drop(turn);
    let term = server.notification("inference/lifecycle").await.unwrap();
    assert_eq!(term["phase"], "aborted");
    assert_eq!(term["inferenceId"], "i1");

    let turn = s.start_turn("i2", "c", 4).await.unwrap();
    server.notification("inference/lifecycle").await;
    turn.complete(Some(json!({"inputTokens": 1, "outputTokens": 2})))
        .await
        .unwrap();
    let term = server.notification("inference/lifecycle").await.unwrap();
    assert_eq!(term["phase"], "completed");
    assert_eq!(term["usage"]["outputTokens"], 2);
    // Exactly one terminal: the next message is a ping, not a second terminal.
    server.expect_ping_next(&s).await;

    // §10.5: usage carrying content is left out; `completed` still goes, the call says so.
    let turn = s.start_turn("i3", "c", 5).await.unwrap();
    server.notification("inference/lifecycle").await;
    let r = turn
        .complete(Some(
            json!({"outputTokens": 2, "assistantMessage": "the reply"}),
        ))
        .await;
    assert!(matches!(&r, Err(HostError::UsageNotSent(_))), "{r:?}");
    let term = server.notification("inference/lifecycle").await.unwrap();
    assert_eq!(term["phase"], "completed");
    assert!(term.get("usage").is_none(), "{term}");
    server.expect_ping_next(&s).await;
}

/// §10.5: one `started` and one terminal per `inferenceId`. A second turn for an id whose
/// turn is open, or recently ended, is refused locally and sends nothing.
#[tokio::test]
async fn s10_5_a_second_turn_for_the_same_inference_id_is_refused() {
    let (s, _streams, mut server) = connected(&["inferenceLifecycle"], full_manifest()).await;
    let first = s.start_turn("i1", "c", 0).await.unwrap();
    assert_eq!(
        s.start_turn("i1", "c", 0).await.err(),
        Some(HostError::TurnExists("i1".into()))
    );
    first.complete(None).await.unwrap();
    // Ended, it is not restarted either: a second `started` would pair with a second terminal.
    assert_eq!(
        s.start_turn("i1", "c", 1).await.err(),
        Some(HostError::TurnExists("i1".into()))
    );
    let other = s.start_turn("i2", "c", 1).await.unwrap();
    drop(other);
    let phases: Vec<(Value, Value)> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            let p = server.notification("inference/lifecycle").await.unwrap();
            v.push((p["inferenceId"].clone(), p["phase"].clone()));
        }
        v
    };
    assert_eq!(
        phases,
        [
            (json!("i1"), json!("started")),
            (json!("i1"), json!("completed")),
            (json!("i2"), json!("started")),
            (json!("i2"), json!("aborted")),
        ]
    );
    server.expect_ping_next(&s).await;
}

/// §10.5: one terminal per `started` on every exit path the host controls — including a
/// `complete()` whose future is cancelled (here by a timeout) while the terminal waits for
/// room in a full outgoing queue. Nothing was queued, so the dropped turn sends `aborted`.
/// The clock is paused: the timeouts fire only once every task is idle, i.e. once the
/// queue is stuck behind a server that is not reading.
#[tokio::test(start_paused = true)]
async fn s10_5_a_cancelled_complete_still_ends_the_turn_with_aborted() {
    let small = PeerConfig {
        outgoing_capacity: 2,
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let (s, mut streams, mut server) =
        connected_with(config(&["inferenceLifecycle"]), full_manifest(), small).await;
    let turn = s.start_turn("victim", "c", 0).await.unwrap();
    // The server stops reading: large `started` frames fill the pipe, the server's inbox and
    // the host's outgoing queue until a send cannot complete.
    let big = "x".repeat(60_000);
    let mut fillers = Vec::new();
    for i in 0.. {
        let id = format!("{big}{i}");
        match tokio::time::timeout(Duration::from_secs(1), s.start_turn(&id, "c", 0)).await {
            Ok(t) => fillers.push(t.unwrap()),
            Err(_) => break,
        }
        assert!(i < 1000, "the outgoing queue never filled");
    }
    let cancelled = tokio::time::timeout(Duration::from_secs(1), turn.complete(None)).await;
    assert!(
        cancelled.is_err(),
        "complete() was expected to wait for room"
    );
    // The server reads again; the host pings once the dropped turn's terminal is on its way.
    until_idle().await;
    let h = s.clone();
    let ping = tokio::spawn(async move { h.request_raw("ping", json!({})).await });
    let mut victim = Vec::new();
    loop {
        match server.next().await {
            IncomingMessage::Notification(n) => {
                let p = n.params.unwrap();
                if p["inferenceId"] == "victim" {
                    victim.push(p["phase"].as_str().unwrap().to_owned());
                }
            }
            IncomingMessage::Request(r) => {
                assert_eq!(r.method(), "ping");
                r.respond(json!({})).await.unwrap();
                break;
            }
        }
    }
    ping.await.unwrap().unwrap();
    assert_eq!(victim, ["started", "aborted"]);
    assert!(drain_diags(&mut streams).iter().all(
        |d| !matches!(d, HostDiagnostic::LifecycleNotSent { inference_id, .. } if inference_id == "victim")
    ));
    drop(fillers);
}

// ---------------------------------------------------------------------------------------
// Manifest review (§17.5–§17.8)
// ---------------------------------------------------------------------------------------

/// §17.5 step 1: a partially invalid manifest still revokes what it removes — whether the
/// invalid part is a declaration (`invalid_uses`) or an identifier the digest refuses.
#[tokio::test]
async fn s17_5_partially_invalid_manifest_still_revokes_removals() {
    let mut next = full_manifest();
    next.as_object_mut().unwrap().remove("pushEvents");
    next["featureSets"]["broken"] = json!({ "description": "x", "uses": ["no.such.path"] });
    revokes_removals_of(next, "invalid_uses").await;
    let mut next = full_manifest();
    next.as_object_mut().unwrap().remove("pushEvents");
    next["featureSets"]["bad name!"] = json!({ "description": "x", "uses": ["tools"] });
    revokes_removals_of(next, "identifier_charset").await;
}

async fn revokes_removals_of(next: Value, finding: &str) {
    let (s, mut streams, mut server) = connected(
        &["pushEvents", "channels.register", "tools"],
        full_manifest(),
    )
    .await;
    server.announce_manifest(next).await;
    // Host-first: revoked before the policy Request is answered.
    let upd = server.request("featureSets/update").await;
    let p = upd.request().params.clone().unwrap();
    assert!(!p["effectiveCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("pushEvents")));
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32002));
    upd.respond(json!({ "accepted": true })).await.unwrap();
    assert!(!s.grant().allows(Capability::PushEvents));
    assert!(s.grant().allows(Capability::ChannelsRegister));
    // Exactly one change receipt, with the revocation applied.
    let receipt = match streams.events.recv().await.unwrap() {
        HostEvent::ManifestChange(r) => r,
        other => panic!("unexpected {other:?}"),
    };
    assert!(receipt
        .impacts
        .iter()
        .any(|i| i.impact == ChangeImpact::CapabilityRevoked
            && i.disposition == Disposition::Applied
            && i.subject == "pushEvents"));
    assert!(streams.events.try_recv().is_err());
    let diags = drain_diags(&mut streams);
    assert!(
        diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::ManifestDefect { .. })),
        "{diags:?}"
    );
    assert!(
        diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::ManifestFinding { code, .. } if *code == finding)),
        "{diags:?}"
    );
}

/// §6.7 / §17.5: a removal fetched while the initial policy Request is in flight narrows
/// the grant that receipt activates — and since the Request told the wider grant, the
/// server is told the narrower one by a second Request.
#[tokio::test(start_paused = true)]
async fn s6_7_a_removal_during_the_initial_exchange_is_told_again() {
    let (task, mut server) = start(config(&["pushEvents", "tools"]), Some(full_manifest())).await;
    let first = server.request("featureSets/update").await;
    let told = first.request().params.clone().unwrap();
    assert!(told["effectiveCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("pushEvents")));
    let mut next = full_manifest();
    next.as_object_mut().unwrap().remove("pushEvents");
    server.announce_manifest(next).await;
    // The removal is reviewed before the receipt arrives (the order that needs the second
    // Request).
    until_idle().await;
    first.respond(json!({ "accepted": true })).await.unwrap();
    let second = server.request("featureSets/update").await;
    let p = second.request().params.clone().unwrap();
    assert!(!p["effectiveCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("pushEvents")));
    second.respond(json!({ "accepted": true })).await.unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert!(!s.grant().allows(Capability::PushEvents));
    assert!(s.grant().allows(Capability::Tools));
}

/// §17.3, §17.8: announcements sent before `initialize` is answered fetch nothing (there is
/// no manifest in force to review against yet) and each is reported; the handshake goes on
/// as if they had not been sent.
#[tokio::test]
async fn s17_3_announcements_before_initialize_is_answered_fetch_nothing() {
    let ((hp, hin), mut server) = pair_with(PeerConfig::default());
    let task = tokio::spawn(HostSession::connect_peer(hp, hin, config(&["pushEvents"])));
    let init = server.request("initialize").await;
    for _ in 0..50 {
        let announced = json!({ "revision": "sha256:early", "domains": ["capabilities"] });
        server.notify("mcpl/manifestChanged", Some(announced)).await;
    }
    init.respond(init_result(Some(full_manifest())))
        .await
        .unwrap();
    server.notification("notifications/initialized").await;
    // The next request is the policy Request, not a fetch.
    let upd = server.request("featureSets/update").await;
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (s, mut streams) = task.await.unwrap().unwrap();
    assert!(s.grant().allows(Capability::PushEvents));
    server.expect_ping_next(&s).await;
    let early = drain_diags(&mut streams)
        .into_iter()
        .filter(|d| matches!(d, HostDiagnostic::UnexpectedMethod { method } if method == "mcpl/manifestChanged"))
        .count();
    assert_eq!(early, 50);
}

#[tokio::test]
async fn s17_5_additions_never_auto_grant() {
    let mut m = full_manifest();
    m.as_object_mut().unwrap().remove("pushEvents");
    let (s, mut streams, mut server) = connected(&["pushEvents", "tools"], m).await;
    assert!(!s.grant().allows(Capability::PushEvents));
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    server
        .request("mcpl/manifest")
        .await
        .respond(full_manifest())
        .await
        .unwrap();
    let receipt = refresh.await.unwrap().unwrap().unwrap();
    assert!(receipt
        .impacts
        .iter()
        .any(|i| i.impact == ChangeImpact::CapabilityExpansionPending
            && i.disposition == Disposition::DecisionNeeded));
    assert!(!s.grant().allows(Capability::PushEvents));
    assert!(matches!(
        streams.events.recv().await,
        Some(HostEvent::ManifestChange(_))
    ));
}

#[tokio::test]
async fn s17_5_unparseable_manifest_leaves_previous_standing() {
    let (s, mut streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    let before = s.manifest().unwrap();
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    server
        .request("mcpl/manifest")
        .await
        .respond(json!("not a manifest"))
        .await
        .unwrap();
    let r = refresh.await.unwrap().unwrap();
    assert!(r.is_none());
    assert_eq!(s.manifest().unwrap(), before);
    assert!(s.grant().allows(Capability::PushEvents));
    // A single failure never suspends MCPL.
    assert_eq!(s.mode(), Mode::Mcpl);
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(
        d,
        HostDiagnostic::ManifestUnparseable {
            consecutive_failures: 1,
            ..
        }
    )));
}

/// §17.3: a malformed announcement is reported by the one shape rule
/// (`protocol::manifest::manifest_changed_defects`, which `mcpl check` fails it by), as
/// `HostState` reports it (`session::tests`), and is still fetched (it is only a hint).
#[tokio::test]
async fn s17_3_a_malformed_announcement_is_reported_and_still_fetches() {
    let (s, mut streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    let bad = json!({ "revision": "sha256:y", "domains": ["tools"], "added": ["a"] });
    let expected = mcpl::protocol::manifest::manifest_changed_defects(Some(&bad)).join("; ");
    server.announce_manifest_as(bad, full_manifest()).await;
    server.expect_ping_next(&s).await;
    let reported: Vec<String> = drain_diags(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::BadParams { method, detail } if method == "mcpl/manifestChanged" => {
                Some(detail)
            }
            _ => None,
        })
        .collect();
    assert_eq!(reported, [expected]);
}

#[tokio::test]
async fn s17_8_storm_of_manifest_changed_causes_bounded_fetches() {
    let mut cfg = config(&["pushEvents"]);
    cfg.manifest_fetch_burst = 2;
    cfg.manifest_fetch_per_sec = 0.0;
    let (s, mut streams, mut server) = connected_cfg(cfg, full_manifest()).await;
    let changed = json!({ "revision": "sha256:x", "domains": ["capabilities"] });
    let storm = |server: &Server| {
        let peer = server.peer.clone();
        let changed = changed.clone();
        tokio::spawn(async move {
            for _ in 0..500 {
                peer.notify_raw("mcpl/manifestChanged", Some(changed.clone()))
                    .await
                    .unwrap();
            }
            // Answered only after the host processed every notification before it.
            peer.request_raw("ping", Some(json!({}))).await.unwrap();
        })
    };
    // Round 1: the first notification fetches, the other 499 coalesce into one follow-up.
    let round = storm(&server);
    for _ in 0..2 {
        server
            .request("mcpl/manifest")
            .await
            .respond(full_manifest())
            .await
            .unwrap();
    }
    round.await.unwrap();
    // Round 2: the bucket is empty (no refill): nothing more is fetched.
    storm(&server).await.unwrap();
    server.expect_ping_next(&s).await;
    // The excess is reported as a defect.
    loop {
        match streams.diagnostics.recv().await {
            Some(HostDiagnostic::ManifestFetchDropped { dropped_total }) => {
                assert!(dropped_total >= 1);
                break;
            }
            Some(_) => {}
            None => panic!("no ManifestFetchDropped diagnostic"),
        }
    }
}

/// §16.7, §17.6: a tag pattern the host's rules reference that is malformed (outside the
/// tag alphabet, or without `:` or `*`, so it can never match) is the application's
/// mistake: `set_consumer_patterns` refuses the call whole, naming each, and keeps the
/// patterns it had. It dropped them unseen, so a rule's reference was never watched.
#[tokio::test]
async fn s16_7_malformed_consumer_patterns_are_refused_not_dropped() {
    let (s, _streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    s.set_consumer_patterns(["acme:alert"]).await.unwrap();
    let refused = s
        .set_consumer_patterns(["acme:page", "acme alert", "alert"])
        .await;
    let Err(HostError::TagPatterns(errors)) = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(
        errors,
        &[
            mcpl::tags::RuleError::InvalidPattern("acme alert".into()),
            mcpl::tags::RuleError::UnnamespacedPattern("alert".into()),
        ]
    );
    let said = refused.unwrap_err().to_string();
    assert!(
        said.contains("\"acme alert\"") && said.contains("§16.7"),
        "{said}"
    );
    // The patterns set before stand: dropping `acme:alert` is still reported.
    let mut next = full_manifest();
    next["featureSets"]["alerts"]["tagOntology"] = json!({ "tags": { "acme:page": {} } });
    let receipt = refresh_with(&s, &mut server, next).await.unwrap().unwrap();
    assert!(
        receipt
            .impacts
            .iter()
            .any(|i| i.impact == ChangeImpact::OntologyReferenceUndeclared
                && i.subject == "acme:alert"),
        "{receipt:?}"
    );
}

/// §17.6: with the host's treatment rules registered, a manifest change that drops a tag
/// they reference is reported as `ontology-reference-undeclared`.
#[tokio::test]
async fn s17_6_dropping_a_tag_the_host_rules_reference_is_reported() {
    let (s, _streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    s.set_consumer_patterns(["acme:alert"]).await.unwrap();
    let mut next = full_manifest();
    next["featureSets"]["alerts"]["tagOntology"] = json!({ "tags": { "acme:page": {} } });
    let receipt = refresh_with(&s, &mut server, next).await.unwrap().unwrap();
    assert!(
        receipt
            .impacts
            .iter()
            .any(|i| i.impact == ChangeImpact::OntologyReferenceUndeclared
                && i.subject == "acme:alert"),
        "{receipt:?}"
    );
}

#[tokio::test]
async fn s17_5_changed_tag_ontology_invalidates_prior_acceptance() {
    let (s, mut streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    // The deprecated call keeps its meaning for existing callers.
    #[allow(deprecated)]
    let digest = s.accept_ontology("alerts").await.unwrap();
    assert_eq!(s.accepted_ontology("alerts"), Some(digest));
    let mut next = full_manifest();
    next["featureSets"]["alerts"]["tagOntology"]["tags"]["acme:page"] = json!({});
    let receipt = refresh_with(&s, &mut server, next).await.unwrap().unwrap();
    assert!(receipt
        .impacts
        .iter()
        .any(|i| i.impact == ChangeImpact::OntologyAcceptanceInvalidated));
    assert_eq!(s.accepted_ontology("alerts"), None);
    // The grant did not change, so no policy Request was needed; one receipt was emitted.
    assert!(matches!(
        streams.events.recv().await,
        Some(HostEvent::ManifestChange(_))
    ));
    assert!(streams.events.try_recv().is_err());
}

/// §16.5, §17.5: an application reviews a set's `tagOntology` as `HostSession::manifest`
/// shows it, then accepts it; a manifest change read between the two must not be accepted
/// in its place (`accept_ontology` accepts what is declared when the driver takes the call:
/// a server could swap in new `implies` edges mid-review). `accept_reviewed_ontology`
/// accepts only the ontology whose digest was reviewed; otherwise it names the current one
/// and accepts nothing. Found by the host hunt (manifests changing mid-review).
#[tokio::test]
async fn s16_5_an_ontology_changed_after_review_is_not_accepted_in_its_place() {
    use mcpl::manifest::digest::ontology_digest;
    let (s, _streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    let (shown, _) = s.manifest().unwrap();
    let reviewed = ontology_digest(&shown["featureSets"]["alerts"]["tagOntology"]).unwrap();
    let mut next = full_manifest();
    next["featureSets"]["alerts"]["tagOntology"]["tags"]["acme:alert"]["implies"] =
        json!(["acme:urgent"]);
    let current = ontology_digest(&next["featureSets"]["alerts"]["tagOntology"]).unwrap();
    assert_ne!(current, reviewed);
    refresh_with(&s, &mut server, next).await.unwrap();
    let r = s.accept_reviewed_ontology("alerts", &reviewed).await;
    let changed = HostError::OntologyChanged {
        name: "alerts".into(),
        current: Some(current.clone()),
    };
    assert_eq!(r, Err(changed));
    assert_eq!(s.accepted_ontology("alerts"), None);
    // The one now declared, once reviewed, is accepted.
    let r = s.accept_reviewed_ontology("alerts", &current).await;
    assert_eq!(r, Ok(current.clone()));
    assert_eq!(s.accepted_ontology("alerts"), Some(current));
    // A set that declares none: nothing to accept.
    let r = s.accept_reviewed_ontology("assist", &reviewed).await;
    let none = HostError::OntologyChanged {
        name: "assist".into(),
        current: None,
    };
    assert_eq!(r, Err(none));
}

#[tokio::test]
async fn s5_3_host_disabled_feature_set_refuses_its_events_32001() {
    let mut cfg = config(&["pushEvents"]);
    cfg.disabled = vec!["alerts".into()];
    let (task, mut server) = start(cfg, Some(full_manifest())).await;
    let upd = server.request("featureSets/update").await;
    assert_eq!(
        upd.request().params.as_ref().unwrap()["disabled"],
        json!(["alerts"])
    );
    upd.respond(json!({ "accepted": true })).await.unwrap();
    let (_s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(server.call("push/event", push("e1")).await, Err(-32001));
}

#[tokio::test]
async fn s6_7_late_receipt_after_timeout_is_a_reported_defect() {
    let (task, mut server) = start(short(&["pushEvents"]), Some(full_manifest())).await;
    let held = server.request("featureSets/update").await;
    let (s, mut streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    held.respond(json!({ "accepted": true })).await.unwrap();
    // The late receipt changes nothing and is reported.
    loop {
        match streams.diagnostics.recv().await {
            Some(HostDiagnostic::Connection(mcpl::peer::Diagnostic::LateResponse { .. })) => break,
            Some(_) => {}
            None => panic!("no late-response diagnostic"),
        }
    }
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    assert!(!s.grant().allows(Capability::PushEvents));
}

#[tokio::test]
async fn s17_5_repeated_unparseable_manifests_may_suspend_never_one() {
    let mut cfg = config(&["pushEvents"]);
    cfg.suspend_after_failures = 2;
    let (s, mut streams, mut server) = connected_cfg(cfg, full_manifest()).await;
    let bad = json!([1, 2]);
    for round in 1..=2 {
        let s2 = s.clone();
        let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
        server
            .request("mcpl/manifest")
            .await
            .respond(bad.clone())
            .await
            .unwrap();
        if round == 2 {
            // Suspension shrinks the grant: the server is told by Request (§6.7).
            let upd = server.request("featureSets/update").await;
            let p = upd.request().params.clone().unwrap();
            assert_eq!(p["effectiveCapabilities"], json!([]));
            upd.respond(json!({ "accepted": true })).await.unwrap();
        }
        refresh.await.unwrap().unwrap();
        if round == 1 {
            assert_eq!(s.mode(), Mode::Mcpl);
        }
    }
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Suspended));
    assert!(!s.grant().allows(Capability::PushEvents));
    assert!(matches!(
        streams.events.recv().await,
        Some(HostEvent::ModeChanged(Mode::McpOnly(
            McpOnlyReason::Suspended
        )))
    ));
}

/// §6.7 / §17.5: MCPL suspended while an expansion's Request is in flight — its accepting
/// receipt then activates nothing, and the suspension's own Request tells the reduced grant.
#[tokio::test]
async fn s6_7_an_expansion_answered_after_suspension_activates_nothing() {
    let mut cfg = config(&["tools"]);
    cfg.suspend_after_failures = 2;
    let (s, mut streams, mut server) = connected_cfg(cfg, full_manifest()).await;
    let s2 = s.clone();
    let widen = tokio::spawn(async move {
        s2.set_policy(vec!["tools".into(), "pushEvents".into()])
            .await
    });
    let held = server.request("featureSets/update").await;
    let mut refreshes = Vec::new();
    for _ in 0..2 {
        let s3 = s.clone();
        refreshes.push(tokio::spawn(async move { s3.refresh_manifest().await }));
        server
            .request("mcpl/manifest")
            .await
            .respond(json!("not a manifest"))
            .await
            .unwrap();
    }
    loop {
        if let Some(HostEvent::ModeChanged(m)) = streams.events.recv().await {
            assert_eq!(m, Mode::McpOnly(McpOnlyReason::Suspended));
            break;
        }
    }
    held.respond(json!({ "accepted": true })).await.unwrap();
    let c = widen.await.unwrap().unwrap();
    assert!(c.activated.is_empty(), "{c:?}");
    assert!(!s.grant().allows(Capability::PushEvents));
    let tell = server.request("featureSets/update").await;
    assert!(
        !tell.request().params.as_ref().unwrap()["effectiveCapabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("pushEvents"))
    );
    tell.respond(json!({ "accepted": true })).await.unwrap();
    for r in refreshes {
        r.await.unwrap().unwrap();
    }
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Suspended));
    assert!(!s.grant().allows(Capability::PushEvents));
}

/// §17.5: unparseable manifests fetched during the initial exchange count towards
/// suspension; once the receipt makes MCPL active, the session is suspended and the server
/// is told the reduced grant by Request (§6.7).
#[tokio::test(start_paused = true)]
async fn s17_5_failures_during_the_initial_exchange_suspend_once_mcpl_is_active() {
    let mut cfg = config(&["pushEvents"]);
    cfg.suspend_after_failures = 2;
    let (task, mut server) = start(cfg, Some(full_manifest())).await;
    let first = server.request("featureSets/update").await;
    for _ in 0..2 {
        server.announce_manifest(json!("not a manifest")).await;
    }
    // Both failures are counted before the receipt arrives.
    until_idle().await;
    first.respond(json!({ "accepted": true })).await.unwrap();
    let tell = server.request("featureSets/update").await;
    assert_eq!(
        tell.request().params.as_ref().unwrap()["effectiveCapabilities"],
        json!([])
    );
    tell.respond(json!({ "accepted": true })).await.unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Suspended));
    assert!(!s.grant().allows(Capability::PushEvents));
}

/// §17.5, §5.3: the suspension those failures earn applies where the receipt is read, so a
/// `push/event` written right behind the receipt is judged MCP-only (`-32002`), never under
/// the MCPL grant the receipt would have brought (it was admitted before: fail-open; found
/// by `host_differential.rs`, as `HostState` decides it).
#[tokio::test(start_paused = true)]
async fn s17_5_a_push_right_behind_the_receipt_that_suspends_is_refused() {
    let mut cfg = config(&["pushEvents"]);
    cfg.suspend_after_failures = 2;
    let (task, mut server) = start(cfg, Some(full_manifest())).await;
    let first = server.request("featureSets/update").await;
    for _ in 0..2 {
        server.announce_manifest(json!("not a manifest")).await;
    }
    until_idle().await;
    // The receipt and the push go out back to back, before the host reads either.
    first.respond(json!({ "accepted": true })).await.unwrap();
    let id = server
        .peer
        .send_request("push/event", Some(push("e1")), |_| {})
        .await
        .unwrap();
    let mut pushed = None;
    let mut told = false;
    while pushed.is_none() || !told {
        let item = tokio::time::timeout(Duration::from_secs(10), server.incoming.recv_ordered())
            .await
            .expect("the host answers")
            .expect("the connection stays open");
        match item {
            mcpl::peer::Ordered::Response(r) if r.id.as_ref() == Some(&id) => {
                pushed = Some(r.outcome)
            }
            mcpl::peer::Ordered::Message(IncomingMessage::Request(tell))
                if tell.method() == "featureSets/update" =>
            {
                tell.respond(json!({ "accepted": true })).await.unwrap();
                told = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let code = pushed.and_then(|o| o.err()).map(|e| e.code);
    assert_eq!(code, Some(-32002), "refused as MCP-only");
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Suspended));
}

/// §17.8, §6.7: an announcement folded into the fetch in flight is fetched as soon as that
/// fetch is reviewed, not held behind the receipt of the reduction the review prompted, so a
/// revocation in the newer manifest is learned without waiting up to `policy_timeout` (as
/// `HostState` does; found by `host_differential.rs`).
#[tokio::test]
async fn s17_8_a_coalesced_follow_up_fetch_is_not_held_behind_the_reduction() {
    let (s, _streams, mut server) =
        connected(&["pushEvents", "channels.register"], full_manifest()).await;
    let announce = json!({ "revision": ANNOUNCED, "domains": ["capabilities"] });
    server
        .notify("mcpl/manifestChanged", Some(announce.clone()))
        .await;
    let fetch = server.request("mcpl/manifest").await;
    server.notify("mcpl/manifestChanged", Some(announce)).await;
    // Handled (folded into the fetch in flight) before the fetch is answered.
    server.call("ping", json!({})).await.unwrap();
    let mut revoking = full_manifest();
    revoking.as_object_mut().unwrap().remove("channels");
    fetch.respond(revoking).await.unwrap();
    let mut methods = Vec::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        let r = server.next().await;
        let IncomingMessage::Request(r) = r else {
            panic!("expected a request, got {r:?}")
        };
        methods.push(r.method().to_owned());
        held.push(r);
    }
    methods.sort();
    assert_eq!(methods, ["featureSets/update", "mcpl/manifest"]);
    assert!(!s.grant().allows(Capability::ChannelsRegister));
}

#[tokio::test]
async fn dropping_the_last_session_handle_closes_the_connection() {
    let (s, streams, mut server) = connected(&["pushEvents"], full_manifest()).await;
    drop(s);
    drop(streams);
    let end = tokio::time::timeout(Duration::from_secs(10), server.incoming.recv())
        .await
        .expect("connection stayed open");
    assert!(end.is_none(), "unexpected {end:?}");
}

#[tokio::test]
async fn s16_5_accepted_ontology_implies_edges_apply_to_push_tags() {
    let mut m = full_manifest();
    m["featureSets"]["alerts"]["tagOntology"] = json!({ "tags": { "acme:page": { "desc": "A page", "implies": ["acme:urgent"] },
                          "acme:urgent": { "desc": "Urgent" } } });
    let (s, mut streams, server) = connected(&["pushEvents"], m).await;
    let mut p = push("e1");
    p["tags"] = json!(["acme:page"]);
    server.call("push/event", p.clone()).await.unwrap();
    match streams.events.recv().await.unwrap() {
        HostEvent::Push { tags, .. } => assert!(!tags.contains("acme:urgent")),
        other => panic!("unexpected {other:?}"),
    }
    let digest = accept_as_shown(&s, "alerts").await;
    p["eventId"] = json!("e2");
    server.call("push/event", p.clone()).await.unwrap();
    match streams.events.recv().await.unwrap() {
        HostEvent::Push { tags, .. } => assert!(tags.contains("acme:urgent")),
        other => panic!("unexpected {other:?}"),
    }
    // Acceptance stays revocable: after it, the edges no longer apply.
    assert_eq!(s.revoke_ontology("alerts").await.unwrap(), Some(digest));
    assert_eq!(s.accepted_ontology("alerts"), None);
    p["eventId"] = json!("e3");
    server.call("push/event", p).await.unwrap();
    match streams.events.recv().await.unwrap() {
        HostEvent::Push { tags, .. } => assert!(!tags.contains("acme:urgent")),
        other => panic!("unexpected {other:?}"),
    }
}

/// §14.2 / §14.5: only a channel that claims to deliver messages (`inbound` or
/// `bidirectional`) may; an outbound-only channel, or one whose descriptor gives no
/// direction (it claims neither: fail closed), is refused per message with `-32017`.
#[tokio::test]
async fn s14_5_incoming_on_outbound_only_channel_is_not_permitted_32017() {
    let (_s, _streams, server) =
        connected(&["channels.register", "channels.incoming"], full_manifest()).await;
    server
        .call(
            "channels/register",
            json!({ "channels": [
            { "id": "out", "type": "k", "direction": "outbound" },
            { "id": "undirected", "type": "k" }]}),
        )
        .await
        .unwrap();
    let r = server
        .call(
            "channels/incoming",
            json!({ "messages": [
            { "channelId": "out", "messageId": "m1", "content": "hi" },
            { "channelId": "undirected", "messageId": "m2", "content": "hi" }]}),
        )
        .await
        .unwrap();
    for i in 0..2 {
        assert_eq!(r["results"][i]["accepted"], false, "{r}");
        assert_eq!(r["results"][i]["code"], -32017, "{r}");
    }
}

/// §14.2: a descriptor is `{id, type, direction?…}`. The spec's own example is accepted; one
/// without a `type` (e.g. naming it `kind`) or with a direction outside the three is refused
/// item-wise as `invalid_descriptor`.
#[tokio::test]
async fn s14_2_descriptors_are_judged_by_the_spec_shape() {
    let (s, _streams, server) = connected(&["channels.register"], full_manifest()).await;
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [
                { "id": "discord:#general", "type": "discord", "label": "#general (Acme Discord)",
                  "direction": "outbound", "address": { "guild": "acme", "channel": "#general" },
                  "metadata": { "serverId": "discord-connector" } },
                { "id": "no-type", "kind": "discord", "direction": "inbound" },
                { "id": "sideways", "type": "discord", "direction": "sideways" }
            ]}),
        )
        .await
        .unwrap();
    assert_eq!(
        r["results"],
        json!([
            { "id": "discord:#general", "accepted": true },
            { "id": "no-type", "accepted": false, "reason": "invalid_descriptor" },
            { "id": "sideways", "accepted": false, "reason": "invalid_descriptor" }
        ])
    );
    assert_eq!(s.channels(), ["discord:#general"]);
}

#[tokio::test]
async fn s10_fan_out_is_concurrent_and_fails_open_per_server() {
    let policy = ["contextHooks.beforeInference.inject.beforeUser"];
    // `a` never answers and has a short hook timeout; `b` answers within a long one.
    let (a, _sa, mut server_a) = connected_cfg(short(&policy), full_manifest()).await;
    let (b, _sb, mut server_b) = connected(&policy, full_manifest()).await;
    let (no_hooks, _sc, _server_c) = connected(&["tools"], full_manifest()).await;
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let fan = tokio::spawn(async move { before_inference(&[&a, &b, &no_hooks], &params).await });
    // Both hooks are in flight at once: neither server has answered yet.
    let held = server_a.request("context/beforeInference").await;
    let hook_b = server_b.request("context/beforeInference").await;
    hook_b
        .respond(json!({ "featureSet": "context", "contextInjections": [
            { "namespace": "b", "position": "beforeUser", "content": "from b" }]}))
        .await
        .unwrap();
    let inj = fan.await.unwrap(); // a times out: fail-open
    assert_eq!(
        inj.consulted.len(),
        2,
        "a server without hook grants is not consulted"
    );
    assert_eq!(inj.before_user.len(), 1);
    assert_eq!(inj.failures.len(), 1);
    drop(held);
}

/// `revoke_ontology` on a closed session is its error: the revocation did not happen, and
/// "nothing was accepted" (`Ok(None)`) would say it had nothing to do (§16.5).
#[tokio::test]
async fn s16_5_revoking_on_a_closed_session_is_an_error_not_nothing_accepted() {
    let (s, _streams, _server) = connected(&["pushEvents"], full_manifest()).await;
    assert_eq!(s.revoke_ontology("alerts").await.unwrap(), None);
    s.close();
    let r = s.revoke_ontology("alerts").await;
    assert!(r.is_err(), "{r:?}");
}

/// A session handed to the fan-out that is already closed cannot be sent the hook: it is a
/// failure the application sees (fail-open, §10), never silently left out, and not counted
/// as consulted.
#[tokio::test]
async fn s10_a_closed_session_given_to_the_fan_out_is_reported_not_skipped() {
    let policy = ["contextHooks.beforeInference.inject.beforeUser"];
    let (gone, _sg, _server_gone) = connected(&policy, full_manifest()).await;
    let (live, _sl, mut server_live) = connected(&policy, full_manifest()).await;
    gone.close();
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let fan = tokio::spawn(async move { before_inference(&[&gone, &live], &params).await });
    server_live
        .request("context/beforeInference")
        .await
        .respond(json!({ "contextInjections": [] }))
        .await
        .unwrap();
    let inj = fan.await.unwrap();
    assert_eq!(
        inj.consulted.len(),
        1,
        "only the live session was sent the hook"
    );
    assert_eq!(inj.failures.len(), 1, "the closed one is reported: {inj:?}");
    assert!(
        inj.failures[0].detail.contains("not sent"),
        "{:?}",
        inj.failures[0]
    );
}

#[tokio::test]
async fn connect_over_a_transport_runs_the_same_handshake() {
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let (peer, incoming) = Peer::new(server_t, PeerConfig::default());
    let mut server = Server { peer, incoming };
    let task = tokio::spawn(HostSession::connect(host_t, config(&["pushEvents"])));
    server
        .request("initialize")
        .await
        .respond(init_result(Some(full_manifest())))
        .await
        .unwrap();
    server.notification("notifications/initialized").await;
    server
        .request("featureSets/update")
        .await
        .respond(json!({ "accepted": true }))
        .await
        .unwrap();
    let (s, _streams) = task.await.unwrap().unwrap();
    assert_eq!(s.label(), "scripted");
    assert_eq!(
        server.call("push/event", push("e1")).await.unwrap()["accepted"],
        true
    );
}

#[tokio::test]
async fn s10_5_emitter_output_pairs_cleanly_in_the_consumer_tracker() {
    use mcpl::lifecycle::{LifecycleConfig, LifecycleTracker, TurnEvent, TurnOutcome};
    use mcpl::protocol::lifecycle::LifecycleParams;
    let (s, _streams, mut server) = connected(&["inferenceLifecycle"], full_manifest()).await;
    // Three turns, three exit paths: completed, failed, dropped (aborted).
    let t1 = s.start_turn("i1", "c", 0).await.unwrap();
    t1.complete(None).await.unwrap();
    let t2 = s.start_turn("i2", "c", 1).await.unwrap();
    t2.fail().await.unwrap();
    let t3 = s.start_turn("i3", "c", 2).await.unwrap();
    drop(t3);
    let mut tracker = LifecycleTracker::new(LifecycleConfig::default());
    let mut ends = Vec::new();
    for _ in 0..6 {
        let p = server.notification("inference/lifecycle").await.unwrap();
        let params: LifecycleParams = serde_json::from_value(p).unwrap();
        let obs = tracker.observe(&params, std::time::Instant::now());
        assert!(obs.diagnostics.is_empty(), "{:?}", obs.diagnostics);
        if let Some(TurnEvent::Ended(end)) = obs.event {
            ends.push((end.inference_id, end.outcome));
        }
    }
    assert_eq!(ends.len(), 3);
    assert!(matches!(ends[0], (ref id, TurnOutcome::Completed { .. }) if id == "i1"));
    assert!(matches!(ends[1], (ref id, TurnOutcome::Failed) if id == "i2"));
    assert!(matches!(ends[2], (ref id, TurnOutcome::Aborted) if id == "i3"));
    assert_eq!(tracker.open_turns(), 0);
}

/// Host limit on channels held at once (§14.5 itemized results): past `max_channels` a new
/// descriptor is rejected item-wise with `channel_limit` and a diagnostic, while a
/// re-registration of a held channel, `updated` entries and removals still go through, and a
/// removal makes room again.
/// Registered descriptors are held for the connection's life, so each one's encoded size
/// is bounded (`HostConfig::max_descriptor_bytes`, 4 KiB by default): a larger one is
/// rejected item-wise as `invalid_descriptor` (§14.5), by `channels/register` and by a
/// `channels/changed` addition alike; the others in the same message are unaffected.
#[tokio::test]
async fn s14_5_an_oversized_descriptor_is_rejected_item_wise() {
    let (s, mut streams, server) = connected(&["channels.register"], full_manifest()).await;
    let big = json!({ "id": "big", "type": "chat", "direction": "outbound",
                      "metadata": { "blob": "x".repeat(5000) } });
    let r = server
        .call(
            "channels/register",
            json!({ "channels": [big.clone(),
                                 { "id": "ok", "type": "chat", "direction": "outbound" }] }),
        )
        .await
        .unwrap();
    assert_eq!(
        r["results"],
        json!([{ "id": "big", "accepted": false, "reason": "invalid_descriptor" },
               { "id": "ok", "accepted": true }])
    );
    let r = server
        .call("channels/changed", json!({ "added": [big] }))
        .await
        .unwrap();
    assert_eq!(r["results"][0]["reason"], "invalid_descriptor");
    assert_eq!(s.channels(), ["ok"]);
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(d,
        HostDiagnostic::ChannelRejected { id, reason: "invalid_descriptor", .. } if id == "big")));
}

#[tokio::test]
async fn limits_channels_held_per_connection_item_wise() {
    let mut cfg = config(&["channels.register"]);
    cfg.max_channels = 2;
    let (s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let chans = |ids: &[&str]| -> Value {
        ids.iter()
            .map(|id| json!({ "id": id, "type": "chat", "direction": "bidirectional" }))
            .collect()
    };
    let r = server
        .call(
            "channels/register",
            json!({ "channels": chans(&["chat:a", "chat:b", "chat:c"]) }),
        )
        .await
        .unwrap();
    assert_eq!(
        r["results"],
        json!([{ "id": "chat:a", "accepted": true }, { "id": "chat:b", "accepted": true },
               { "id": "chat:c", "accepted": false, "reason": "channel_limit" }])
    );
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(d,
        HostDiagnostic::ChannelRejected { id, reason: "channel_limit", .. } if id == "chat:c")));
    // Held channels can be re-registered and updated at the limit.
    let r = server
        .call(
            "channels/register",
            json!({ "channels": chans(&["chat:a"]) }),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["accepted"], true);
    let r = server
        .call(
            "channels/changed",
            json!({ "updated": chans(&["chat:b"]), "removed": ["chat:a"],
                    "added": chans(&["chat:c"]) }),
        )
        .await
        .unwrap();
    // The removal is applied first, so the addition fits.
    assert!(r["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["accepted"] == true));
    assert_eq!(s.channels(), ["chat:b", "chat:c"]);
}

/// Host limits (RELIABILITY.md): a `channels/register` or `channels/incoming` carrying more
/// items than configured is refused whole with `-32602` and `data: { limit, count }`; a
/// message within the limit is still itemized normally.
#[tokio::test]
async fn limits_channels_per_registration_and_messages_per_incoming_batch() {
    let mut cfg = config(&["channels.register", "channels.incoming"]);
    cfg.max_channels_per_message = 2;
    cfg.max_incoming_per_batch = 1;
    let (s, _streams, server) = connected_cfg(cfg, full_manifest()).await;
    let three: Vec<Value> = (0..3)
        .map(|i| json!({ "id": format!("chat:{i}"), "type": "chat", "direction": "bidirectional" }))
        .collect();
    let e = server
        .peer
        .request_raw("channels/register", Some(json!({ "channels": three })))
        .await
        .unwrap_err();
    let e = e.remote().unwrap();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data, Some(json!({ "limit": 2, "count": 3 })));
    assert!(
        s.channels().is_empty(),
        "nothing registered from a refused message"
    );

    let r = server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "chat:0", "type": "chat", "direction": "bidirectional" }] }),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["accepted"], true);
    let e = server
        .peer
        .request_raw(
            "channels/incoming",
            Some(json!({ "messages": [
                { "channelId": "chat:0", "messageId": "m1", "content": "a" },
                { "channelId": "chat:0", "messageId": "m2", "content": "b" }
            ]})),
        )
        .await
        .unwrap_err();
    let e = e.remote().unwrap();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data, Some(json!({ "limit": 1, "count": 2 })));
}

/// Nothing received vanishes: a notification the host session does not act on (here one
/// MCP does not give a server; a server log message is handed to the application,
/// `tests/host_mcp_notifications.rs`) is reported as a diagnostic rather than dropped
/// silently.
#[tokio::test]
async fn unhandled_notifications_are_reported() {
    let (_s, mut streams, server) = connected(&["pushEvents"], full_manifest()).await;
    server
        .notify(
            "notifications/not_mcp",
            Some(json!({"level": "info", "data": "hello"})),
        )
        .await;
    loop {
        match streams.diagnostics.recv().await {
            Some(HostDiagnostic::UnexpectedMethod { method }) => {
                assert_eq!(method, "notifications/not_mcp");
                break;
            }
            Some(_) => {}
            None => panic!("diagnostics ended without reporting the notification"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Amplification bounds (issue #20): a large list is refused at its documented count before
// the host builds anything per entry.
// ---------------------------------------------------------------------------------------

/// §10: a hook answer with 100,003 injections (past `max_injections_per_hook`, 1,024) is
/// refused whole: one `HookFailed` naming the count and the limit, nothing accepted or
/// rejected entry by entry.
#[tokio::test]
async fn s10_a_hook_answer_past_the_injection_bound_is_refused_whole() {
    let (_s, mut streams, _server, fan, hook) = hook_in_flight().await;
    let many: Vec<Value> = (0..100_003)
        .map(|_| json!({ "namespace": "m", "position": "system", "content": "x" }))
        .collect();
    hook.respond(json!({ "featureSet": "memory", "contextInjections": many }))
        .await
        .unwrap();
    let inj = fan.await.unwrap();
    assert!(inj.system.is_empty() && inj.before_user.is_empty() && inj.after_user.is_empty());
    assert!(inj.rejected.is_empty(), "no per-entry verdicts were built");
    assert_eq!(inj.failures.len(), 1);
    assert!(
        inj.failures[0]
            .detail
            .contains("100003 contextInjections exceed the limit of 1024"),
        "{}",
        inj.failures[0].detail
    );
    let diags = drain_diags(&mut streams);
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::InjectionRejected { .. })),
        "{diags:?}"
    );
    assert!(diags.iter().any(
        |d| matches!(d, HostDiagnostic::HookFailed { detail, .. } if detail.contains("100003"))
    ));
}

/// §10.1: the connection closes while the server holds the hook. The fan-out does not wait
/// for the hook timeout: the hook fails open where the server's output ended
/// (`HostState::handle_eof`, the close's first sign at the host), and the session reports
/// no `HookFailed` (the server was not late: it is gone).
#[tokio::test]
async fn s10_1_a_hook_in_flight_when_the_connection_closes_fails_open_as_closed() {
    let (s, mut streams, server, fan, hook) = hook_in_flight().await;
    server.peer.close();
    let inj = fan.await.unwrap();
    drop(hook);
    assert_eq!(inj.consulted, vec![s.label()]);
    assert_eq!(inj.failures.len(), 1, "{inj:?}");
    assert!(
        inj.failures[0].detail.contains("ended its output"),
        "{}",
        inj.failures[0].detail
    );
    assert!(inj.system.is_empty() && inj.before_user.is_empty() && inj.after_user.is_empty());
    let diags = drain_diags(&mut streams);
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::HookFailed { .. })),
        "{diags:?}"
    );
    // A later fan-out cannot send it the hook: reported, not silently left out.
    let params = json!({"inferenceId":"i2","conversationId":"c","turnIndex":1,"userMessage":"x"});
    let inj = before_inference(&[&s], &params).await;
    assert!(inj.consulted.is_empty(), "{inj:?}");
    assert_eq!(inj.failures.len(), 1, "{inj:?}");
}

/// §6.1, §17.5: an `mcpl/manifest` answer with 100,000 feature sets (past
/// `max_feature_sets`, 1,024) is not reviewed whole: a `ManifestFetchFailed` naming the
/// count, none of its sets read, the grant as it was (it advertises the same capabilities);
/// only its removals apply (§17.5 step 1): the sets in force it no longer declares are
/// degraded, nothing it adds is taken.
#[tokio::test]
async fn s17_5_a_manifest_past_the_feature_set_bound_is_refused() {
    let (s, mut streams, mut server) = connected(&["pushEvents", "tools"], full_manifest()).await;
    let before = s.grant();
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let mut m = full_manifest();
    let sets: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| {
            (
                format!("set{i}"),
                json!({ "description": "s", "uses": ["pushEvents"] }),
            )
        })
        .collect();
    m["featureSets"] = Value::Object(sets);
    server
        .request("mcpl/manifest")
        .await
        .respond(m)
        .await
        .unwrap();
    let receipt = refresh.await.unwrap().unwrap().expect("its removals apply");
    assert!(
        receipt
            .impacts
            .iter()
            .all(|i| i.impact == ChangeImpact::FeatureDegraded
                || i.impact == ChangeImpact::OntologyAcceptanceInvalidated),
        "only removals: {receipt:?}"
    );
    assert!(
        receipt
            .impacts
            .iter()
            .all(|i| !i.subject.starts_with("set")),
        "no set of the answer was read: {receipt:?}"
    );
    assert_eq!(s.grant(), before);
    let (in_force, _) = s.manifest().expect("a manifest in force");
    assert_eq!(in_force["featureSets"], json!({}));
    let diags = drain_diags(&mut streams);
    assert!(
        diags.iter().any(
            |d| matches!(d, HostDiagnostic::ManifestFetchFailed { detail }
            if detail.contains("100000 feature sets exceed the limit of 1024"))
        ),
        "{diags:?}"
    );
}

/// §14.5: a `channels/register` with 100,000 descriptors is refused `-32602` with
/// `data: {limit, count}` at the default `max_channels_per_message` (1,024), nothing
/// registered.
#[tokio::test]
async fn s14_5_a_registration_of_100000_descriptors_is_refused_at_the_default_bound() {
    let (s, _streams, server) =
        connected(&["channels.register", "channels.incoming"], full_manifest()).await;
    let many: Vec<Value> = (0..100_000)
        .map(|i| json!({ "id": format!("chat:{i}"), "type": "chat", "direction": "bidirectional" }))
        .collect();
    let e = server
        .peer
        .request_raw("channels/register", Some(json!({ "channels": many })))
        .await
        .unwrap_err();
    let e = e.remote().unwrap();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data, Some(json!({ "limit": 1024, "count": 100_000 })));
    assert!(s.channels().is_empty());
}

/// §6.1, §17.5, §3.3: the same bound holds for the manifest in the `initialize` result:
/// 100,000 feature sets are refused before any review, nothing of MCPL is granted and no
/// policy Request is sent, but the server, a valid MCP server, keeps its MCP connection:
/// served as plain MCP (`McpOnlyReason::TooManyFeatureSets {count, limit}`), with the
/// `too_many_feature_sets` finding reported. Before, `connect` failed whole
/// (`HostError::TooManyFeatureSets`), so the server's tools were lost with its manifest.
#[tokio::test]
async fn s6_1_an_initialize_manifest_past_the_feature_set_bound_is_served_as_plain_mcp() {
    let mut m = full_manifest();
    let sets: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| {
            (
                format!("set{i}"),
                json!({ "description": "s", "uses": ["pushEvents"] }),
            )
        })
        .collect();
    m["featureSets"] = Value::Object(sets);
    let ((hp, hin), mut server) = pair_with(PeerConfig::default());
    let task = tokio::spawn(HostSession::connect_peer(hp, hin, config(&["pushEvents"])));
    let init = server.request("initialize").await;
    init.respond(init_result(Some(m))).await.unwrap();
    let (s, mut streams) = task.await.unwrap().expect("served as plain MCP");
    let reason = McpOnlyReason::TooManyFeatureSets {
        count: 100_000,
        limit: 1024,
    };
    assert_eq!(s.mode(), Mode::McpOnly(reason.clone()));
    assert!(
        reason
            .to_string()
            .contains("declares 100000 feature sets, past this host's limit of 1024"),
        "{reason}"
    );
    assert!(
        !s.grant().allows(Capability::PushEvents),
        "nothing of MCPL granted"
    );
    // `initialized`, then nothing before the answer to our ping (read in wire order, a
    // policy Request sent before it would be queued here first): no policy Request.
    match server.incoming.recv().await.expect("initialized") {
        IncomingMessage::Notification(n) => assert_eq!(n.method, "notifications/initialized"),
        other => panic!("{other:?}"),
    }
    let pong = server.peer.request_raw("ping", None).await;
    assert!(pong.is_ok(), "{pong:?}");
    let next = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::future::Future::poll(
            std::pin::pin!(server.incoming.recv()),
            cx,
        ))
    })
    .await;
    assert!(next.is_pending(), "a policy Request went out: {next:?}");
    assert!(drain_diags(&mut streams).iter().any(|d| matches!(d,
        HostDiagnostic::ManifestFinding { code, .. } if *code == "too_many_feature_sets")));
}

/// Issue #24: `HostConfig`'s defaults are the core's `HostRules` (one place), so a
/// `HostSession` and a `HostState` built with defaults decide under the same bounds.
#[test]
fn host_config_defaults_are_the_cores_rules() {
    // But for what no handler serves: a default `HostConfig` has none (§11, §12), a
    // `HostState`'s application answers what it is handed.
    let unserved = [
        Capability::ModelInfo,
        Capability::InferenceRequest,
        Capability::InferenceRequestStreaming,
    ];
    assert_eq!(
        HostConfig::default().rules(),
        mcpl::session::HostRules {
            unserved: unserved.into_iter().collect(),
            ..mcpl::session::HostRules::new(Vec::<String>::new())
        }
    );
    let limits = HostConfig::default().channel_limits();
    assert_eq!(limits, mcpl::session::ChannelLimits::default());
}

/// An event with no answer to carry a refusal (a `surface-changed` receipt of a
/// `notifications/tools/list_changed`, §17.7) that finds the application's event queue full
/// is reported as `EventDropped`, never lost silently; a push that finds it full is
/// answered `host_busy` instead.
#[tokio::test]
async fn an_event_the_full_queue_cannot_take_is_reported() {
    let cfg = HostConfig {
        event_capacity: 1,
        ..config(&["pushEvents"])
    };
    let (_s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let first = server
        .peer
        .request_raw("push/event", Some(push("e1")))
        .await
        .unwrap();
    assert_eq!(first["accepted"], true);
    server
        .notify("notifications/tools/list_changed", None)
        .await;
    // Handled in wire order: once this is answered, the notification was judged.
    let busy = server
        .peer
        .request_raw("push/event", Some(push("e2")))
        .await
        .unwrap();
    assert_eq!(busy["reason"], "host_busy");
    let dropped: Vec<_> = drain_diags(&mut streams)
        .into_iter()
        .filter(|d| {
            matches!(
                d,
                HostDiagnostic::EventDropped {
                    event: "ManifestChange"
                }
            )
        })
        .collect();
    assert_eq!(dropped.len(), 1);
}

/// §17.6, §17.7: only the MCP surfaces a server announces (`tools`, `resources`, `prompts`)
/// make a `surface-changed` receipt; a `notifications/<name>/list_changed` naming anything
/// else (a name the server chose, of any length, or `roots`, which a host announces) is
/// reported as a method the host does not receive, not turned into a receipt naming it.
/// Found by the protocol-area hunt: the host made a receipt for any name, counted as weighing
/// nothing against `max_event_bytes`, so 1,024 such notifications of 1 MiB each waited in
/// full for an application that did not read.
#[tokio::test]
async fn s17_7_only_the_servers_mcp_surfaces_make_a_surface_changed_receipt() {
    let (_s, mut streams, server) = connected(&["pushEvents"], full_manifest()).await;
    let long = format!("notifications/{}/list_changed", "x".repeat(64 * 1024));
    for method in [
        "notifications/evil/list_changed",
        "notifications/roots/list_changed",
        "notifications/featureSets/list_changed",
        long.as_str(),
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    ] {
        server.notify(method, None).await;
    }
    // Handled in wire order: once this is answered, the notifications were judged.
    let r = server.call("push/event", push("e1")).await.unwrap();
    assert_eq!(r["accepted"], true, "{r}");
    let mut subjects = Vec::new();
    while let Ok(e) = streams.events.try_recv() {
        if let HostEvent::ManifestChange(r) = e {
            for i in r.impacts {
                assert_eq!(i.impact, ChangeImpact::SurfaceChanged);
                subjects.push(i.subject);
            }
        }
    }
    assert_eq!(subjects, ["tools", "resources", "prompts"]);
    let unexpected = drain_diags(&mut streams)
        .into_iter()
        .filter(|d| matches!(d, HostDiagnostic::UnexpectedMethod { .. }))
        .count();
    assert_eq!(unexpected, 4, "each other name is reported");
}

/// A request handler that panics (after yielding, so in its own task) still leaves the
/// server with an answer, `-32603`, instead of its own timeout; the request stops counting
/// against `max_pending_outputs`.
#[tokio::test(start_paused = true)]
async fn a_panicking_request_handler_still_answers_the_server() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async move {
            tokio::task::yield_now().await;
            panic!("application bug")
        })
    }));
    let (_s, _streams, server) = connected_cfg(cfg, full_manifest()).await;
    let r = server
        .call(
            "inference/request",
            json!({ "featureSet": "assist", "messages": [] }),
        )
        .await;
    // 0 would be the test server's own timeout: the host never answered.
    assert_eq!(r, Err(mcpl::jsonrpc::codes::INTERNAL_ERROR), "{r:?}");
}

/// The application's mistake is reported, not only answered: a request handler that panics
/// (here at once, in the call, and after yielding) is `HostDiagnostic::HandlerPanicked`
/// with the request's method, once per panic, beside the server's `-32603`.
#[tokio::test]
async fn a_panicking_request_handler_is_reported_as_the_applications_mistake() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, p: Value| {
        if p["messages"].as_array().is_some_and(Vec::is_empty) {
            panic!("application bug in the call")
        }
        Box::pin(async move {
            tokio::task::yield_now().await;
            panic!("application bug in the future")
        })
    }));
    let (_s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    for messages in [json!([]), json!([{"role": "user", "content": "x"}])] {
        let r = server
            .call(
                "inference/request",
                json!({ "featureSet": "assist", "messages": messages }),
            )
            .await;
        assert_eq!(r, Err(mcpl::jsonrpc::codes::INTERNAL_ERROR), "{r:?}");
    }
    // The host answered both: their panics were reported before the answers were written.
    let panicked: Vec<String> = drain_diags(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::HandlerPanicked { method } => Some(method),
            _ => None,
        })
        .collect();
    assert_eq!(panicked, ["inference/request", "inference/request"]);
}

/// A session whose diagnostics queue holds `capacity`, with what connecting reported
/// drained.
async fn diagnostics_session(capacity: usize) -> (HostSession, HostStreams, Server) {
    let mut cfg = config(&["pushEvents"]);
    cfg.diagnostics_capacity = capacity;
    let (s, mut streams, server) = connected_cfg(cfg, full_manifest()).await;
    let _ = drain_diags(&mut streams);
    (s, streams, server)
}

/// The server sends one notification MCP does not give it (reported by the host as
/// unhandled) per item of `data`, then a ping, answered after the host handled every one.
async fn unhandled(server: &Server, data: std::ops::Range<u32>) {
    for i in data {
        let params = json!({"level": "info", "data": i});
        server.notify("notifications/not_mcp", Some(params)).await;
    }
    server.call("ping", json!({})).await.unwrap();
}

/// Nothing is lost silently: diagnostics that find the application's queue full
/// (`diagnostics_capacity`) are counted, and the count is delivered
/// (`HostDiagnostic::DiagnosticsDropped`) ahead of the next diagnostic that finds room.
#[tokio::test]
async fn diagnostics_the_full_queue_had_no_room_for_are_counted_and_delivered() {
    let (_s, mut streams, server) = diagnostics_session(2).await;
    unhandled(&server, 0..5).await;
    let first = drain_diags(&mut streams);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first
        .iter()
        .all(|d| matches!(d, HostDiagnostic::UnexpectedMethod { .. })));
    unhandled(&server, 5..6).await;
    let next = drain_diags(&mut streams);
    assert!(
        matches!(
            next.as_slice(),
            [
                HostDiagnostic::DiagnosticsDropped { count: 3 },
                HostDiagnostic::UnexpectedMethod { .. }
            ]
        ),
        "{next:?}"
    );
}

/// Every diagnostic received after the session ended, until the queue's end (bounded: a
/// queue that never ends fails the test).
async fn diags_until_end(streams: &mut HostStreams) -> Vec<HostDiagnostic> {
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), streams.diagnostics.recv()).await {
            Ok(Some(d)) => got.push(d),
            Ok(None) => return got,
            Err(_) => panic!("the diagnostics queue never ended: {got:?}"),
        }
    }
}

/// A count of dropped diagnostics that no later diagnostic carried is still delivered when
/// the session ends: at once when the application had drained the queue, and once it makes
/// room when the queue was still full (ending the session does not wait for that).
#[tokio::test]
async fn a_count_of_dropped_diagnostics_is_delivered_when_the_session_ends() {
    // Drained before the end.
    let (s, mut streams, server) = diagnostics_session(2).await;
    unhandled(&server, 0..5).await;
    assert_eq!(drain_diags(&mut streams).len(), 2);
    s.close();
    drop((s, server));
    let rest = diags_until_end(&mut streams).await;
    assert!(
        matches!(
            rest.as_slice(),
            [HostDiagnostic::DiagnosticsDropped { count: 3 }]
        ),
        "{rest:?}"
    );

    // Still full at the end.
    let (s, mut streams, server) = diagnostics_session(2).await;
    unhandled(&server, 0..5).await;
    s.close();
    drop((s, server));
    let rest = diags_until_end(&mut streams).await;
    assert!(
        matches!(
            rest.as_slice(),
            [
                HostDiagnostic::UnexpectedMethod { .. },
                HostDiagnostic::UnexpectedMethod { .. },
                HostDiagnostic::DiagnosticsDropped { count: 3 }
            ]
        ),
        "{rest:?}"
    );
}

/// A diagnostics queue of the smallest capacity (2: 1, once raised to it, is refused at
/// connect, `HostConfig::defects`) still delivers diagnostics after some were dropped: the
/// count of the dropped ones must not take the only slot ahead of every later diagnostic
/// (which would then itself be dropped and counted, round after round, though the
/// application drains the queue each time).
#[tokio::test]
async fn the_smallest_diagnostics_queue_still_delivers_diagnostics_after_a_drop() {
    let (_s, mut streams, server) = diagnostics_session(2).await;
    unhandled(&server, 0..5).await;
    let first = drain_diags(&mut streams);
    assert!(
        !first.is_empty()
            && first
                .iter()
                .all(|d| matches!(d, HostDiagnostic::UnexpectedMethod { .. })),
        "{first:?}"
    );
    let dropped = 5 - first.len() as u64;
    let mut later = Vec::new();
    for i in 5..8 {
        unhandled(&server, i..i + 1).await;
        later.extend(drain_diags(&mut streams));
    }
    assert!(
        later
            .iter()
            .any(|d| matches!(d, HostDiagnostic::UnexpectedMethod { .. })),
        "{later:?}"
    );
    assert!(
        later.iter().any(
            |d| matches!(d, HostDiagnostic::DiagnosticsDropped { count } if *count == dropped)
        ),
        "{later:?}"
    );
}

/// A session whose server stopped reading: its writer is full (large
/// `inference/lifecycle` notifications), so its driver is stuck writing.
async fn stuck_session(
    policy: &[&str],
) -> (HostSession, HostStreams, Server, Vec<mcpl::host::Turn>) {
    let small = PeerConfig {
        outgoing_capacity: 2,
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let (stuck, streams, server) = connected_with(short(policy), full_manifest(), small).await;
    let fillers = fill_until_stuck(&stuck).await;
    (stuck, streams, server, fillers)
}

/// Starts turns with large ids until the session's driver is stuck writing them to a
/// server that does not read (a start that no longer returns within a second); the turns
/// that started.
async fn fill_until_stuck(stuck: &HostSession) -> Vec<mcpl::host::Turn> {
    let big = "x".repeat(60_000);
    let mut fillers = Vec::new();
    for i in 0.. {
        let id = format!("{big}{i}");
        match tokio::time::timeout(Duration::from_secs(1), stuck.start_turn(&id, "c", 0)).await {
            Ok(t) => fillers.push(t.unwrap()),
            Err(_) => break,
        }
        assert!(i < 1000, "the outgoing queue never filled");
    }
    fillers
}

/// One server that stops reading does not hold up a fan-out over other sessions: its
/// session's driver cannot take the hook; the fan-out still ends, within that session's
/// `hook_timeout` plus `DRIVER_GRACE`, with the stuck session counted as failed
/// (fail-open, §10), while the healthy one is decided as usual.
#[tokio::test(start_paused = true)]
async fn a_server_that_stops_reading_does_not_hold_up_a_fan_out() {
    let (stuck, _streams, _server, _fillers) =
        stuck_session(&["inferenceLifecycle", "contextHooks.beforeInference.observe"]).await;
    let (healthy, _hstreams, _hserver) = connected(&["inferenceLifecycle"], full_manifest()).await;
    let params =
        json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"hello"});
    let fan = tokio::time::timeout(
        Duration::from_secs(120),
        before_inference(&[&stuck, &healthy], &params),
    )
    .await
    .expect("before_inference hung on a session whose server stopped reading");
    assert_eq!(fan.failures.len(), 1, "{fan:?}");
    assert!(
        fan.failures[0].detail.contains("did not take the hook"),
        "{fan:?}"
    );
}

fn timed_out<T>(r: &Result<T, HostError>, method: &str) -> bool {
    matches!(r, Err(HostError::Peer(mcpl::peer::PeerError::Timeout { method: m, .. })) if m == method)
}

/// The exchanges an application starts on a session whose server stopped reading end at
/// their own timeout plus `DRIVER_GRACE` (a `PeerError::Timeout` naming the method), as they
/// did before the session had a driver, instead of waiting on the stuck driver for good.
#[tokio::test(start_paused = true)]
async fn exchanges_with_a_server_that_stops_reading_end_at_their_timeout() {
    let (stuck, _streams, _server, _fillers) = stuck_session(&["inferenceLifecycle"]).await;
    let guard = Duration::from_secs(600);
    let r = tokio::time::timeout(guard, stuck.set_policy(vec!["tools".into()]))
        .await
        .expect("set_policy hung");
    assert!(timed_out(&r, "featureSets/update"), "{r:?}");
    let r = tokio::time::timeout(guard, stuck.refresh_manifest())
        .await
        .expect("refresh_manifest hung");
    assert!(timed_out(&r, "mcpl/manifest"), "{r:?}");
    let r = tokio::time::timeout(guard, stuck.request_raw("tools/list", json!({})))
        .await
        .expect("request_raw hung");
    assert!(timed_out(&r, "tools/list"), "{r:?}");
}

/// Every application call is bounded (never unbounded time): on a session whose server
/// stopped reading, starting a turn, ending one and starting an outgoing stream end at the
/// peer's `request_timeout` plus `DRIVER_GRACE` with a `PeerError::Timeout` (as a stream's
/// chunk and the ontology calls do, next test), instead of waiting on the stuck driver for
/// good. Once the
/// server reads again: the turn whose start was given up was never started (its id starts
/// afresh, one `started` on the wire), and the turn whose end was given up is still ended,
/// once, `aborted` (§10.5: one terminal per `started`).
#[tokio::test(start_paused = true)]
async fn turn_and_stream_calls_on_a_server_that_stops_reading_end_at_the_request_timeout() {
    let (stuck, _streams, mut server, mut fillers) = stuck_session(&["inferenceLifecycle"]).await;
    let guard = Duration::from_secs(600);
    let r = tokio::time::timeout(guard, stuck.start_turn("late", "c", 0))
        .await
        .expect("start_turn hung");
    assert!(timed_out(&r, "inference/lifecycle"), "{:?}", r.err());
    let filler = fillers.remove(0);
    let filler_id = filler.inference_id().to_owned();
    let r = tokio::time::timeout(guard, filler.complete(None))
        .await
        .expect("Turn::complete hung");
    assert!(timed_out(&r, "inference/lifecycle"), "{r:?}");
    let r = tokio::time::timeout(guard, stuck.outgoing_stream("late-stream", None))
        .await
        .expect("outgoing_stream hung");
    assert!(timed_out(&r, "channels/outgoing/chunk"), "{:?}", r.err());

    // The server reads again: everything held is written, then the fresh start.
    let again = {
        let s = stuck.clone();
        tokio::spawn(async move { s.start_turn("late", "c", 1).await.map(drop) })
    };
    let mut filler_terminals = Vec::new();
    loop {
        let p = server.notification("inference/lifecycle").await.unwrap();
        let (id, phase) = (
            p["inferenceId"].as_str().unwrap(),
            p["phase"].as_str().unwrap(),
        );
        if id == filler_id && phase != "started" {
            filler_terminals.push(phase.to_owned());
        }
        if id == "late" {
            assert_eq!(phase, "started", "the given-up start was never sent");
            assert_eq!(p["turnIndex"], 1, "{p}");
            break;
        }
    }
    again.await.unwrap().unwrap();
    assert_eq!(filler_terminals, ["aborted"]);
}

/// The same for a chunk of a stream opened before the server stopped reading, and for
/// revoking an accepted ontology: each gives up at the peer's `request_timeout` plus
/// `DRIVER_GRACE`. Once the server reads again, the given-up chunk was never written and
/// took no `index` (§14.3: the next chunk is index 1), the given-up revocation, local
/// bookkeeping that sends nothing, was still carried out when the driver reached it (it
/// only narrows), and an acceptance given up after it was not (it would widen, §16.5).
#[tokio::test(start_paused = true)]
async fn a_stream_chunk_and_an_ontology_call_given_up_on_a_stuck_driver() {
    let small = PeerConfig {
        outgoing_capacity: 2,
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let policy = [
        "inferenceLifecycle",
        "pushEvents",
        "channels.register",
        "channels.streaming",
    ];
    let (s, _streams, mut server) = connected_with(short(&policy), full_manifest(), small).await;
    server.register_outbound("a").await;
    let digest = accept_as_shown(&s, "alerts").await;
    let mut out = s.outgoing_stream("inf", None).await.unwrap();
    out.chunk("a", "sent ").await.unwrap();
    let _fillers = fill_until_stuck(&s).await;

    let guard = Duration::from_secs(600);
    let r = tokio::time::timeout(guard, out.chunk("a", "given up"))
        .await
        .expect("OutgoingStream::chunk hung");
    assert!(timed_out(&r, "channels/outgoing/chunk"), "{r:?}");
    let r = tokio::time::timeout(guard, s.revoke_ontology("alerts"))
        .await
        .expect("revoke_ontology hung");
    // Carried out, it would have returned the revoked digest; not carried out, it says so.
    assert!(timed_out(&r, "revokeOntology"), "{r:?}");
    // An acceptance given up the same way is never applied later (it would widen, §16.5).
    let r = tokio::time::timeout(guard, s.accept_reviewed_ontology("alerts", &digest))
        .await
        .expect("accept_reviewed_ontology hung");
    assert!(timed_out(&r, "acceptOntology"), "{r:?}");
    assert_eq!(s.accepted_ontology("alerts"), Some(digest));

    // The server reads again.
    let after = {
        let mut out = out;
        tokio::spawn(async move {
            out.chunk("a", "after").await?;
            out.finish().await
        })
    };
    let mut chunks = Vec::new();
    loop {
        match server.next().await {
            IncomingMessage::Notification(n) if n.method == "channels/outgoing/chunk" => {
                let p = n.params.unwrap();
                chunks.push((p["index"].clone(), p["delta"].clone()));
            }
            IncomingMessage::Notification(n) if n.method == "channels/outgoing/complete" => {
                let p = n.params.unwrap();
                assert_eq!(p["content"][0]["text"], "sent after", "{p}");
                break;
            }
            IncomingMessage::Notification(n) => {
                assert_eq!(n.method, "inference/lifecycle", "{:?}", n.params)
            }
            IncomingMessage::Request(r) => panic!("unexpected request {}", r.method()),
        }
    }
    after.await.unwrap().unwrap();
    assert_eq!(
        chunks,
        [(json!(0), json!("sent ")), (json!(1), json!("after"))]
    );
    assert_eq!(
        s.accepted_ontology("alerts"),
        None,
        "the revocation was dropped, or the given-up acceptance applied after it"
    );
}

/// §6.7: policy calls queue behind the exchange in flight. A slow server that answers each
/// just inside `policy_timeout` delays the third call far past its own `policy_timeout` plus
/// `DRIVER_GRACE`, but the driver keeps carrying out inputs, so no call gives up: only a
/// driver that carries out nothing (stuck writing) is given up on.
#[tokio::test(start_paused = true)]
async fn policy_calls_queued_behind_a_slow_server_are_not_given_up() {
    let (s, _streams, mut server) = connected_cfg(short(&["tools"]), full_manifest()).await;
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.set_policy(vec!["tools".into()]).await })
        })
        .collect();
    for _ in 0..3 {
        let upd = server.request("featureSets/update").await;
        // The server is slow, but within the host's 1 s policy_timeout.
        tokio::time::sleep(Duration::from_millis(950)).await;
        upd.respond(json!({ "accepted": true })).await.unwrap();
    }
    for c in calls {
        let change = c.await.unwrap();
        assert!(change.is_ok(), "{change:?}");
    }
}

/// The driver never waits for its own writes (issue #24): on a session whose server stopped
/// reading (the host's writer full, its calls held back), what the server sends is still
/// read and carried out: its pushed events reach the application although their answers
/// cannot be written yet. A driver that waited for a write stopped reading with it.
#[tokio::test(start_paused = true)]
async fn a_server_that_stops_reading_is_still_read() {
    let (_stuck, mut streams, server, _fillers) =
        stuck_session(&["inferenceLifecycle", "pushEvents"]).await;
    const PUSHES: usize = 20;
    for i in 0..PUSHES {
        let peer = server.peer.clone();
        tokio::spawn(async move {
            let _ = peer
                .request_raw("push/event", Some(push(&format!("e{i}"))))
                .await;
        });
    }
    let mut ids = Vec::new();
    while ids.len() < PUSHES {
        let e = tokio::time::timeout(Duration::from_secs(600), streams.events.recv())
            .await
            .expect("the host stopped reading while its writes wait")
            .expect("the session ended");
        if let HostEvent::Push { event_id, .. } = e {
            ids.push(event_id);
        }
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), PUSHES);
}

/// `HostSession`'s plain sends keep the application's call order (`in_order`): a `ping`
/// the application sends after `start_turn` returned reaches the wire after that turn's
/// `inference/lifecycle`, also while the server reads slowly and the driver holds the
/// turn's frame in its outbox (a carried-out call is not a written one).
#[tokio::test(start_paused = true)]
async fn a_plain_send_after_a_carried_out_call_is_not_written_ahead_of_it() {
    let small = PeerConfig {
        outgoing_capacity: 2,
        incoming_capacity: 2,
        ..PeerConfig::default()
    };
    let (s, _streams, mut server) =
        connected_with(short(&["inferenceLifecycle"]), full_manifest(), small).await;
    // The server reads nothing yet: the first turns fill the pipe and the writer's queue,
    // the later ones are held by the driver; every call returns once carried out.
    const TURNS: usize = 8;
    let big = "x".repeat(60_000);
    let mut turns = Vec::new();
    for i in 0..TURNS {
        turns.push(s.start_turn(&format!("{big}{i}"), "c", 0).await.unwrap());
    }
    let s2 = s.clone();
    let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
    // Everything runs until blocked: the ping is queued or waits for room.
    until_idle().await;
    // The server says something meanwhile: the host's driver reads it and goes round.
    server
        .notify(
            "notifications/message",
            Some(json!({"level": "info", "data": "hi"})),
        )
        .await;
    until_idle().await;
    for i in 0..TURNS {
        match server.next().await {
            IncomingMessage::Notification(n) if n.method == "inference/lifecycle" => {
                let id = n.params.unwrap()["inferenceId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(id.ends_with(&i.to_string()), "turn {i} out of order");
            }
            IncomingMessage::Request(r) => {
                panic!(
                    "{} written ahead of turn {i}, which was started before it",
                    r.method()
                )
            }
            IncomingMessage::Notification(n) => panic!("unexpected {}", n.method),
        }
    }
    server
        .request("ping")
        .await
        .respond(json!({}))
        .await
        .unwrap();
    ping.await.unwrap().unwrap();
}

/// A server that sends an `inference/request` and then ends its output (EOF) still gets
/// the answer the application's handler gives after that: the host's driver keeps going
/// for what it owes, as the peer keeps the connection open for it (nothing received is
/// lost; before, the request was answered `-32601` by its dropped guard, after the close).
#[tokio::test(start_paused = true)]
async fn a_request_the_server_sent_before_its_eof_is_still_answered() {
    answered_after_the_servers_eof(None, Duration::from_millis(10)).await;
}

/// The same, answered a minute after the server's EOF (a person answering it in `mcpl
/// inspect`): with `PeerConfig::eof_drain` set, the owed answer may take that long, and is
/// written. The drain was the write timeout, else 5 s, whatever the application needed: the
/// connection closed first and the answer was lost.
#[tokio::test(start_paused = true)]
async fn an_owed_answer_may_take_the_configured_eof_drain() {
    answered_after_the_servers_eof(Some(Duration::from_secs(600)), Duration::from_secs(60)).await;
}

/// The lines the host writes to a server over a pipe ([`inference_held_over_eof`]).
type HostLines =
    tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;

/// The host's next line, read as JSON (within a minute).
async fn next_line(lines: &mut HostLines) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the host wrote nothing more")
        .unwrap()
        .expect("the host closed");
    serde_json::from_str(&line).unwrap()
}

/// A server (the test, over a pipe) that connects a host granted `policy`, sends it
/// `inference/request` id 77 and ends its output. The host's handler answers only once the
/// returned sender says `true`, so the answer is owed across the EOF (`eof_drain`).
async fn inference_held_over_eof(
    policy: &[&str],
    eof_drain: Option<Duration>,
) -> (
    HostSession,
    HostStreams,
    HostLines,
    tokio::sync::watch::Sender<bool>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let mut cfg = config(policy);
    cfg.peer.eof_drain = eof_drain;
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let mut release = release_rx.clone();
        Box::pin(async move {
            let _ = release.wait_for(|r| *r).await;
            Ok(json!({ "content": [{ "type": "text", "text": "late" }] }))
        })
    }));
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, aw) = tokio::io::split(a);
    let (br, mut bw) = tokio::io::split(b);
    let mut lines = BufReader::new(br).lines();
    let connect = tokio::spawn(HostSession::connect(
        mcpl::transport::Transport::lines(ar, aw, "host"),
        cfg,
    ));
    let send = |v: Value| format!("{v}\n");
    let init = next_line(&mut lines).await;
    assert_eq!(init["method"], "initialize");
    let answer =
        json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(full_manifest()))});
    bw.write_all(send(answer).as_bytes()).await.unwrap();
    let mut policy = next_line(&mut lines).await;
    if policy["method"] == "notifications/initialized" {
        policy = next_line(&mut lines).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    let receipt = json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}});
    bw.write_all(send(receipt).as_bytes()).await.unwrap();
    let (session, streams) = connect.await.unwrap().unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 77, "method": "inference/request",
        "params": { "featureSet": "assist", "messages": [] }});
    bw.write_all(send(request).as_bytes()).await.unwrap();
    // The server's output ends; the handler answers only afterwards.
    bw.shutdown().await.unwrap();
    (session, streams, lines, release_tx)
}

/// A server that, once connected, sends `inference/request` id 77 and ends its output; the
/// host's handler answers `after` the EOF, under `eof_drain`. The answer must reach the
/// server.
async fn answered_after_the_servers_eof(eof_drain: Option<Duration>, after: Duration) {
    let (_session, _streams, mut lines, release_tx) =
        inference_held_over_eof(&["inferenceRequest"], eof_drain).await;
    tokio::time::sleep(after).await;
    release_tx.send(true).unwrap();
    let answer = next_line(&mut lines).await;
    assert_eq!(answer["id"], 77, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "late", "{answer}");
}

/// A server that ended its output while the host still owes it an answer: the session
/// stays up to write it (`eof_drain`), but nothing could answer a hook now. A fan-out then
/// reports the session as failed, not consulted; it was left out unseen (`None`, as if the
/// hook did not apply).
#[tokio::test]
async fn s10_a_fan_out_after_the_servers_eof_reports_the_session() {
    let policy = [
        "inferenceRequest",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.beforeUser",
    ];
    let (session, _streams, _lines, release_tx) =
        inference_held_over_eof(&policy, Some(Duration::from_secs(600))).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        while !session.input_ended() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the host never read the EOF");
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"x"});
    let inj = before_inference(&[&session], &params).await;
    assert!(inj.consulted.is_empty(), "{inj:?}");
    assert_eq!(inj.failures.len(), 1, "{inj:?}");
    assert!(
        inj.failures[0].detail.contains("ended its output"),
        "{inj:?}"
    );
    release_tx.send(true).unwrap();
}

/// A session with `ENDED_IDS_REMEMBERED` lifecycle turns (§10.5) or outgoing streams
/// (§14.3) open refuses one more with `HostError::TooManyOpen` naming the limit, not as if
/// the new id were a duplicate (`TurnExists`/`StreamExists`, which it is not); ending one
/// makes room. An id that is a duplicate is refused as one at the limit too (ending turns
/// would not make room for it).
#[tokio::test]
async fn more_open_turns_or_streams_than_the_limit_are_refused_as_such() {
    let limit = mcpl::session::ENDED_IDS_REMEMBERED;
    let (s, _streams, mut server) = connected(&["inferenceLifecycle"], full_manifest()).await;
    // The server reads everything (the host's writes never back up).
    tokio::spawn(async move { while server.incoming.recv().await.is_some() {} });
    let mut turns = Vec::new();
    let mut streams = Vec::new();
    for i in 0..limit {
        turns.push(s.start_turn(&format!("t{i}"), "c", 0).await.unwrap());
        streams.push(s.outgoing_stream(&format!("s{i}"), None).await.unwrap());
    }
    let r = s.start_turn("one-more", "c", 0).await;
    assert!(
        matches!(r, Err(HostError::TooManyOpen { what: "lifecycle turns", limit: l }) if l == limit),
        "{:?}",
        r.err()
    );
    let r = s.outgoing_stream("one-more", None).await;
    assert!(
        matches!(r, Err(HostError::TooManyOpen { what: "outgoing streams", limit: l }) if l == limit),
        "{:?}",
        r.err()
    );
    assert_eq!(
        s.start_turn("t0", "c", 1).await.err(),
        Some(HostError::TurnExists("t0".into()))
    );
    assert_eq!(
        s.outgoing_stream("s0", None).await.err(),
        Some(HostError::StreamExists("s0".into()))
    );
    turns.pop().unwrap().complete(None).await.unwrap();
    streams.pop().unwrap().finish().await.unwrap();
    let _turn = s.start_turn("one-more", "c", 0).await.unwrap();
    let _stream = s.outgoing_stream("one-more", None).await.unwrap();
}

/// §10.5 with §5.4: a grant narrowed mid-turn (here `inferenceLifecycle` revoked by the
/// host's own policy change) ends the open turn without sending its terminal (outbound gating
/// wins), and `Turn::complete` returns the gate's refusal, as does a new `start_turn`, which
/// sends nothing either. Pins the errors across the move of the gate into `HostState`.
#[tokio::test]
async fn s10_5_a_grant_narrowed_mid_turn_refuses_the_terminal_and_new_turns() {
    let (s, _streams, mut server) =
        connected(&["inferenceLifecycle", "tools"], full_manifest()).await;
    let turn = s.start_turn("i1", "c", 0).await.unwrap();
    let started = server.notification("inference/lifecycle").await.unwrap();
    assert_eq!(started["phase"], "started");
    set_policy_accepted(&s, &mut server, &["tools"]).await;
    assert!(!s.grant().allows(Capability::InferenceLifecycle));
    assert_eq!(
        turn.complete(None).await.err(),
        Some(HostError::NotGranted(Capability::InferenceLifecycle))
    );
    assert_eq!(
        s.start_turn("i2", "c", 1).await.err(),
        Some(HostError::NotGranted(Capability::InferenceLifecycle))
    );
    // Nothing of either was sent: the next message is a ping.
    server.expect_ping_next(&s).await;
    // The ended turn is not restarted once the grant is back (§10.5: one `started` per id).
    set_policy_accepted(&s, &mut server, &["inferenceLifecycle", "tools"]).await;
    assert_eq!(
        s.start_turn("i1", "c", 2).await.err(),
        Some(HostError::TurnExists("i1".into()))
    );
}

/// The peer reader's own answers (here `-32700` to junk lines) that wait in its outbox for a
/// server that reads slowly are still written when the server ends its output (EOF) right
/// after: the driver, seeing the end, closes the connection, but only once the reader has
/// queued them (they were queued before the EOF was read until the reader held them in an
/// outbox of its own, and the close dropped what it held).
#[tokio::test(start_paused = true)]
async fn the_readers_own_answers_held_at_the_servers_eof_are_still_written() {
    const JUNK: usize = 50;
    let small = PeerConfig {
        outgoing_capacity: 1,
        ..PeerConfig::default()
    };
    let (peer, incoming, mut raw) = raw::raw_peer_with(small, 256);
    let (_session, _streams) = connect_raw(
        peer,
        incoming,
        &mut raw,
        config(&["tools"]),
        full_manifest(),
    )
    .await;
    // Junk the host answers while the server does not read, then the end of its output.
    for _ in 0..JUNK {
        raw.send("{not json").await;
    }
    tokio::io::AsyncWriteExt::shutdown(&mut raw.write)
        .await
        .unwrap();
    // Every task runs until it blocks: the host has seen the end.
    until_idle().await;
    let mut parse_errors = 0;
    while let Some(line) = tokio::time::timeout(Duration::from_secs(3600), raw.lines.next_line())
        .await
        .expect("the host neither wrote nor closed (deadlock guard)")
        .unwrap()
    {
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["error"]["code"] == -32700 {
            parse_errors += 1;
        }
    }
    assert_eq!(parse_errors, JUNK, "answers lost at the close");
}

/// The driver that keeps going after the server's EOF for a request still with the
/// application's handler does not wait for it for ever: a handler that never answers holds
/// the connection open only within the drain limit, then the connection closes and the
/// driver ends (its event queue closes).
#[tokio::test(start_paused = true)]
async fn after_the_servers_eof_a_handler_that_never_answers_does_not_keep_the_driver() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        Box::pin(std::future::pending())
    }));
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (_session, mut streams) = connect_raw(peer, incoming, &mut raw, cfg, full_manifest()).await;
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 77, "method": "inference/request",
                         "params": { "featureSet": "assist", "messages": [] }}),
    )
    .await;
    tokio::io::AsyncWriteExt::shutdown(&mut raw.write)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3600), async {
        while streams.events.recv().await.is_some() {}
    })
    .await
    .expect("the driver never ended (deadlock guard)");
}

/// A server that ends its output (EOF) while the application still answers a request it
/// sent: the application is told at once (`HostEvent::InputEnded`, `input_ended()`), a
/// hook in flight fails open at once (§10.1) rather than at its deadline (nothing can answer
/// it), a new hook is not sent, and the request's answer is still written afterwards.
/// Before, the session looked up and ready until the connection closed, and the hook
/// waited out its deadline.
#[tokio::test(start_paused = true)]
async fn the_servers_eof_is_told_while_its_request_is_still_answered() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let mut cfg = config(&[
        "inferenceRequest",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.beforeUser",
    ]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let mut release = release_rx.clone();
        Box::pin(async move {
            let _ = release.wait_for(|r| *r).await;
            Ok(json!({ "content": [{ "type": "text", "text": "late" }] }))
        })
    }));
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, mut streams) = connect_raw(peer, incoming, &mut raw, cfg, full_manifest()).await;
    let s2 = s.clone();
    let params = json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"hi"});
    let hook = tokio::spawn(async move { before_inference(&[&s2], &params).await });
    assert_eq!(raw.recv().await["method"], "context/beforeInference");
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 77, "method": "inference/request",
                         "params": { "featureSet": "assist", "messages": [] }}),
    )
    .await;
    tokio::io::AsyncWriteExt::shutdown(&mut raw.write)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let ev = tokio::time::timeout(Duration::from_secs(3600), streams.events.recv())
        .await
        .expect("deadlock guard");
    assert_eq!(
        ev,
        Some(HostEvent::InputEnded),
        "the end of the server's output"
    );
    assert!(s.input_ended());
    let injections = hook.await.unwrap();
    assert!(injections.before_user.is_empty(), "{injections:?}");
    assert_eq!(injections.failures.len(), 1, "{injections:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the hook waited {:?} for an answer that could not come",
        started.elapsed()
    );
    // A new fan-out sends nothing to a server that sends nothing more.
    let again = json!({"inferenceId":"i2","conversationId":"c","turnIndex":1,"userMessage":"hi"});
    assert!(before_inference(&[&s], &again).await.consulted.is_empty());
    release_tx.send(true).unwrap();
    // The hook given up is cancelled (the server may still read), then the answer.
    let cancel = raw.recv().await;
    assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
    assert_eq!(cancel["params"]["reason"], "the server ended its output");
    let answer = raw.recv().await;
    assert_eq!(answer["id"], 77, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "late", "{answer}");
}

/// A `channels/close` (or `channels/open`) waiting when the server ends its output ends at
/// once as closed, while the driver still runs for the server's request the application is
/// answering: nothing can answer it. Found by the channels hunt: these two go through the
/// state machine, which forgets the application's requests at EOF, and the call waited out
/// the request timeout.
#[tokio::test(start_paused = true)]
async fn s14_3_a_lifecycle_request_waiting_at_the_servers_eof_ends_as_closed() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let mut cfg = config(&["inferenceRequest", "channels.lifecycle"]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let mut release = release_rx.clone();
        Box::pin(async move {
            let _ = release.wait_for(|r| *r).await;
            Ok(json!({ "content": [{ "type": "text", "text": "late" }] }))
        })
    }));
    let mut m = full_manifest();
    m["channels"]["lifecycle"] = json!(true);
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, _streams) = connect_raw(peer, incoming, &mut raw, cfg, m).await;
    let s2 = s.clone();
    let close = tokio::spawn(async move {
        s2.request_raw("channels/close", json!({ "channelId": "c1" }))
            .await
    });
    assert_eq!(raw.recv().await["method"], "channels/close");
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 77, "method": "inference/request",
                         "params": { "featureSet": "assist", "messages": [] }}),
    )
    .await;
    tokio::io::AsyncWriteExt::shutdown(&mut raw.write)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(3600), close)
        .await
        .expect("deadlock guard")
        .unwrap();
    assert!(
        matches!(r, Err(HostError::Peer(mcpl::peer::PeerError::Closed(_)))),
        "{r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    release_tx.send(true).unwrap();
    // The close given up is cancelled (the server may still read), then the answer.
    let cancel = raw.recv().await;
    assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
    let answer = raw.recv().await;
    assert_eq!(answer["id"], 77, "{answer}");
}

/// The host closing the connection itself is not the server's end of output: the event
/// stream ends without `HostEvent::InputEnded`, and `input_ended()` stays false.
#[tokio::test]
async fn closing_the_session_is_not_told_as_the_servers_end_of_output() {
    let (s, mut streams, _server) = connected(&["pushEvents"], full_manifest()).await;
    s.close();
    let mut events = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), streams.events.recv())
        .await
        .expect("the event stream ends after the close")
    {
        events.push(e);
    }
    assert!(!events.contains(&HostEvent::InputEnded), "{events:?}");
    assert!(!s.input_ended());
}

/// Once the connection has closed, a request still with the application's handler can no
/// longer be answered: its handler is stopped (its future dropped at its next `.await`), so
/// an application waiting on it learns the request is gone rather than answering into
/// nothing. Before, the handler ran on and its answer was dropped unseen.
#[tokio::test(start_paused = true)]
async fn after_the_close_a_handler_still_answering_is_stopped() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<Value>>();
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(answer_tx);
        Box::pin(async move {
            let v = answer_rx.await.unwrap_or(Value::Null);
            Ok(v)
        })
    }));
    let mut rx = rx;
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (_session, mut streams) = connect_raw(peer, incoming, &mut raw, cfg, full_manifest()).await;
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 77, "method": "inference/request",
                         "params": { "featureSet": "assist", "messages": [] }}),
    )
    .await;
    let mut answer = tokio::time::timeout(Duration::from_secs(3600), rx.recv())
        .await
        .expect("deadlock guard")
        .expect("the handler got the request");
    // The server goes away: EOF, then the close after the drain limit.
    drop(raw);
    tokio::time::timeout(Duration::from_secs(3600), async {
        while streams.events.recv().await.is_some() {}
    })
    .await
    .expect("the driver never ended (deadlock guard)");
    tokio::time::timeout(Duration::from_secs(3600), answer.closed())
        .await
        .expect("the handler still runs after the close: its answer would go nowhere");
}

/// JSON-RPC 2.0 §4.2: the application's scalar params are refused by the outbound gate
/// (`HostError::Encode`, the one rule `jsonrpc::params_shape`) before anything reaches the
/// wire; the next message the server reads is the next valid one.
#[tokio::test]
async fn scalar_params_from_the_application_never_reach_the_wire() {
    let (host, _streams, mut server) = connected(&["tools"], full_manifest()).await;
    for params in [json!(false), json!(3), json!("x")] {
        let r = host.request_raw("tools/call", params.clone()).await;
        assert!(
            matches!(&r, Err(HostError::Encode(m)) if m.contains("§4.2")),
            "{params}: {r:?}"
        );
        let r = host.notify_raw("notifications/acme", params.clone()).await;
        assert!(
            matches!(&r, Err(HostError::Encode(m)) if m.contains("§4.2")),
            "{params}: {r:?}"
        );
    }
    server.expect_ping_next(&host).await;
    // `null` (this API's "no params") goes as no member (JSON-RPC 2.0 §4.2).
    let h = host.clone();
    let call = tokio::spawn(async move { h.request_raw("ping", Value::Null).await });
    let ping = server.request("ping").await;
    assert_eq!(ping.request().params, None, "no params member");
    ping.respond(json!({})).await.unwrap();
    call.await.unwrap().unwrap();
}

/// A malformed answer (a `result` and an `error` both, JSON-RPC 2.0 §5) to the host's own
/// requests is applied where it is read, as a failed answer: `initialize` fails at once
/// and a policy Request ends MCP-only as failed (§6.7), where both waited for their
/// deadline and then read as unanswered (`PolicyTimeout`).
#[tokio::test(start_paused = true)]
async fn a_malformed_answer_to_the_hosts_requests_is_applied_where_it_is_read() {
    let both = |id: &Value, result: Value| {
        json!({"jsonrpc": "2.0", "id": id, "result": result,
               "error": {"code": -32000, "message": "and an error"}})
    };
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(
        peer,
        incoming,
        config(&["pushEvents"]),
    ));
    let init = raw.recv().await;
    raw.send_json(both(&init["id"], init_result(Some(full_manifest()))))
        .await;
    let err = connect.await.unwrap().unwrap_err();
    assert!(
        !matches!(&err, HostError::Peer(mcpl::peer::PeerError::Timeout { .. })),
        "initialize waited for its deadline: {err:?}"
    );

    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(
        peer,
        incoming,
        config(&["pushEvents"]),
    ));
    let init = raw.recv().await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(full_manifest()))}))
        .await;
    let mut policy = raw.recv().await;
    if policy["method"] == "notifications/initialized" {
        policy = raw.recv().await;
    }
    raw.send_json(both(&policy["id"], json!({"accepted": true})))
        .await;
    let (s, _streams) = connect.await.unwrap().unwrap();
    assert!(
        matches!(s.mode(), Mode::McpOnly(McpOnlyReason::PolicyFailed(_))),
        "{:?}",
        s.mode()
    );
}

/// §11.4 with MCP's `notifications/cancelled`: once the server cancelled a streamed
/// `inference/request` (answered `-32800`), the id is free for it to use again (JSON-RPC 2.0
/// asks unique ids only among requests in flight). The first request's handler, or a task
/// it handed its `ChunkSink` to, still holds that sink: its chunks must not go out as the
/// new request's (they did, `index` 0 of the new stream, and the new handler's own chunk
/// then came second), and the sink learns its stream ended.
#[tokio::test]
async fn s11_4_a_cancelled_requests_sink_does_not_stream_into_a_new_request_under_its_id() {
    let (m, mut cfg) = streaming_setup();
    let (sinks_tx, mut sinks) = tokio::sync::mpsc::unbounded_channel();
    cfg.stream_handler = Some(std::sync::Arc::new(
        move |_p: Value, sink: mcpl::host::ChunkSink| {
            let _ = sinks_tx.send(sink);
            Box::pin(std::future::pending())
        },
    ));
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (_s, _streams) = connect_raw(peer, incoming, &mut raw, cfg, m).await;
    let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "inference/request",
                     "params": { "featureSet": "assist.stream", "stream": true,
                                 "messages": [{ "role": "user", "content": "hi" }] }});
    raw.send_json(ask.clone()).await;
    let mut first = sinks.recv().await.expect("the first request is handed out");
    raw.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": { "requestId": 7 }}),
    )
    .await;
    let cancelled = raw.recv().await;
    assert_eq!(cancelled["id"], json!(7));
    assert_eq!(
        cancelled["error"]["code"],
        json!(mcpl::jsonrpc::codes::REQUEST_CANCELLED)
    );
    raw.send_json(ask).await;
    let mut second = sinks.recv().await.expect("the new request is handed out");
    assert!(
        first.send("stale").await.is_err(),
        "the cancelled request's sink still streams"
    );
    second.send("fresh").await.unwrap();
    let chunk = raw.recv().await;
    assert_eq!(chunk["method"], json!("inference/chunk"));
    assert_eq!(
        chunk["params"],
        json!({ "requestId": 7, "index": 0, "delta": "fresh" })
    );
}

/// The events waiting for a slow application are bounded in bytes
/// (`HostConfig::max_event_bytes`), not only in number: a server pushing large events the
/// application has not taken yet gets `host_busy` once they would pass the bound, as when
/// the stream is full, and `channels/incoming` messages likewise (each judged with those of
/// its batch before it); one event larger than the bound still goes to an empty stream.
/// Before, `event_capacity` events of up to a whole message each were taken (300 pushes
/// of 4 MiB held 1.28 GB).
#[tokio::test]
async fn events_waiting_for_the_application_are_bounded_in_bytes() {
    let text = "x".repeat(300 * 1024);
    let big = |id: &str| {
        json!({ "featureSet": "alerts", "eventId": id, "timestamp": "2026-01-01T00:00:00Z",
                "payload": { "content": [{ "type": "text", "text": text }] } })
    };
    let mut m = full_manifest();
    m["featureSets"]["alerts"]["uses"] =
        json!(["pushEvents", "channels.register", "channels.incoming"]);
    let cfg = HostConfig {
        max_event_bytes: 1024 * 1024,
        ..config(&["pushEvents", "channels.register", "channels.incoming"])
    };
    let (_s, mut streams, server) = connected_cfg(cfg, m).await;
    // Three fit in 1 MiB, the fourth does not.
    for (i, accepted) in [(1, true), (2, true), (3, true), (4, false)] {
        let r = server
            .call("push/event", big(&format!("e{i}")))
            .await
            .unwrap();
        assert_eq!(r["accepted"], accepted, "push {i}: {r}");
        if !accepted {
            assert_eq!(r["reason"], "host_busy", "push {i}: {r}");
        }
    }
    // The application takes every event: the next push is taken again.
    for _ in 0..3 {
        streams.events.recv().await.unwrap();
    }
    let r = server.call("push/event", big("e5")).await.unwrap();
    assert_eq!(r["accepted"], true, "{r}");
    streams.events.recv().await.unwrap();
    // Larger than the bound alone: taken by the empty stream.
    let huge = "y".repeat(1200 * 1024);
    let mut p = big("e6");
    p["payload"]["content"][0]["text"] = json!(huge);
    let r = server.call("push/event", p).await.unwrap();
    assert_eq!(r["accepted"], true, "{r}");
    streams.events.recv().await.unwrap();
    // A batch of channel messages: the first three fit, the last two do not.
    server
        .call(
            "channels/register",
            json!({ "channels": [{ "id": "c", "type": "chat", "direction": "inbound" }] }),
        )
        .await
        .unwrap();
    let messages: Vec<Value> = (0..5)
        .map(|i| json!({ "channelId": "c", "messageId": format!("m{i}"), "content": text }))
        .collect();
    let r = server
        .call("channels/incoming", json!({ "messages": messages }))
        .await
        .unwrap();
    let accepted: Vec<&Value> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["accepted"])
        .collect();
    assert_eq!(
        accepted,
        [
            &json!(true),
            &json!(true),
            &json!(true),
            &json!(false),
            &json!(false)
        ],
        "{r}"
    );
    assert_eq!(r["results"][3]["reason"], "host_busy");
    for _ in 0..3 {
        assert!(matches!(
            streams.events.recv().await,
            Some(HostEvent::ChannelMessage { .. })
        ));
    }
    assert!(
        streams.events.try_recv().is_err(),
        "no event beyond the results"
    );
}

/// A diagnostic keeps at most `session::DIAGNOSTIC_TEXT_BYTES` of each text the server
/// chose (a method name, an id), cut and its length said: the diagnostics waiting for the
/// application are bounded by their number only, so a server sending notifications under
/// 4 MiB method names had the host hold 1.28 GB of diagnostics after 300 of them (and log
/// each whole). Here a method name (`UnexpectedMethod`), and a response id, which the id
/// bound now refuses before any diagnostic holds it (`Connection(InvalidMessage)`).
#[tokio::test]
async fn server_chosen_text_in_diagnostics_is_clipped() {
    let long = "m".repeat(100 * 1024);
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (_s, mut streams) = connect_raw(
        peer,
        incoming,
        &mut raw,
        config(&["pushEvents"]),
        full_manifest(),
    )
    .await;
    raw.send_json(json!({"jsonrpc": "2.0", "method": long}))
        .await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": long, "result": {}}))
        .await;
    let limit = mcpl::session::DIAGNOSTIC_TEXT_BYTES;
    let (mut method, mut id) = (false, false);
    while !(method && id) {
        let d = tokio::time::timeout(Duration::from_secs(10), streams.diagnostics.recv())
            .await
            .expect("the diagnostics come")
            .unwrap();
        match &d {
            HostDiagnostic::UnexpectedMethod { method: m } => {
                assert!(m.len() <= limit, "{} bytes kept", m.len());
                assert!(
                    m.contains("102400 bytes"),
                    "its length is said: {}",
                    &m[m.len().saturating_sub(80)..]
                );
                method = true;
            }
            // A string id past `jsonrpc::MAX_ID_BYTES` is not read at all: the response is
            // an invalid message, which says the id's length and keeps none of it.
            HostDiagnostic::Connection(mcpl::peer::Diagnostic::InvalidMessage {
                id: None,
                reason,
                ..
            }) => {
                assert!(reason.len() <= limit, "{} bytes kept", reason.len());
                assert!(reason.contains("102400"), "{reason}");
                id = true;
            }
            _ => {}
        }
    }
}

/// `before_inference` params that lack §10.1's members (`inferenceId`, `conversationId`,
/// `turnIndex`), or are not an object, were sent to every server; each refused them with
/// `-32602` (or timed out), and the fan-out reported that as the servers' `HookFailure`s: the
/// host application's own mistake looked like theirs. They are now checked by the core's
/// rule for these params before any is sent: nothing is sent, no server is consulted or
/// blamed, and `params_refused` says what is wrong. The first hook the server then sees is
/// the next, valid one.
#[tokio::test]
async fn s10_1_hook_params_missing_required_members_are_refused_before_any_is_sent() {
    let policy = [
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.beforeUser",
    ];
    let (s, _streams, mut server) = connected_cfg(short(&policy), full_manifest()).await;
    for (params, member) in [
        (json!({}), "inferenceId"),
        (Value::Null, "invalid"),
        (
            json!({"inferenceId": 5, "conversationId": "c", "turnIndex": 0}),
            "invalid type",
        ),
        (
            json!({"inferenceId": "i", "conversationId": "c"}),
            "turnIndex",
        ),
        (
            json!({"inferenceId": "i", "conversationId": "c", "turnIndex": -1}),
            "turnIndex",
        ),
    ] {
        let out = before_inference(&[&s], &params).await;
        assert!(out.failures.is_empty(), "{params}: {:?}", out.failures);
        assert!(out.consulted.is_empty(), "{params}: {:?}", out.consulted);
        let refused = out.params_refused.unwrap_or_default();
        assert!(refused.contains("§10.1"), "{params}: {refused}");
        assert!(refused.contains(member), "{params}: {refused}");
    }
    let s2 = s.clone();
    let good = json!({"inferenceId": "good", "conversationId": "c", "turnIndex": 0,
                      "userMessage": "hi"});
    let fan = tokio::spawn(async move { before_inference(&[&s2], &good).await });
    let hook = server.request("context/beforeInference").await;
    assert_eq!(
        hook.request().params.as_ref().unwrap()["inferenceId"],
        "good"
    );
    hook.respond(json!({ "contextInjections": [] }))
        .await
        .unwrap();
    let out = fan.await.unwrap();
    assert!(out.params_refused.is_none());
    assert!(out.failures.is_empty(), "{:?}", out.failures);
}

/// Hook fan-outs given up on a session whose server stopped reading leave nothing waiting
/// behind them once its driver's queue is full: each one's `Cmd::Forget` found the queue
/// full and used to spawn a task (holding a `HostSession`) to queue it, one more per turn
/// for as long as the server did not read. The driver is now flagged instead, and gives up
/// every call whose caller is gone at its next input.
#[tokio::test(start_paused = true)]
async fn hooks_given_up_on_a_stuck_session_pile_up_no_tasks() {
    let (stuck, _streams, _server, _fillers) =
        stuck_session(&["inferenceLifecycle", "contextHooks.beforeInference.observe"]).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let params =
        json!({"inferenceId":"i1","conversationId":"c","turnIndex":0,"userMessage":"hello"});
    // Each fan-out queues its hook and then its forget: past 128 of them the driver's
    // queue (256) is full, and every later one's forget finds it so.
    for _ in 0..200 {
        let fan = tokio::time::timeout(
            Duration::from_secs(120),
            before_inference(&[&stuck], &params),
        )
        .await
        .expect("before_inference hung on a stuck session");
        assert_eq!(fan.failures.len(), 1, "{fan:?}");
    }
    let alive = metrics.num_alive_tasks();
    assert!(
        alive < 40,
        "{alive} tasks alive after 200 fan-outs given up on a stuck session"
    );
}
