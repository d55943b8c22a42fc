//! A [`HostState`] and a [`ServerState`] wired back to back (as quinn-proto's `Pair`):
//! every frame goes through JSON text and back, in wire order, one step at a time, so each
//! interleaving the race tests hunt for with threads is a plain deterministic test here.
//! The `Pair` and the shared fixtures live here; the tests, by concern, in `policy`,
//! `messages`, `hooks`, `manifest` and `model`.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use super::*;
use crate::capability::Capability;
use crate::jsonrpc::{Message, RequestId};
use crate::lifecycle::{TurnEvent, TurnOutcome};

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": {},
        "channels": { "register": {} },
        "featureSets": {
            "news": { "uses": ["pushEvents"] }
        }
    })
}

fn server_rules() -> ServerRules {
    let mut mcp = Map::new();
    mcp.insert("tools".into(), json!({}));
    ServerRules {
        mcp_capabilities: mcp,
        ..ServerRules::new(json!({ "name": "pair-server", "version": "1" }), manifest()).unwrap()
    }
}

/// The two state machines and the frames in flight each way (already serialised).
struct Pair {
    now: Instant,
    host: HostState,
    server: ServerState,
    to_server: VecDeque<String>,
    to_host: VecDeque<String>,
    /// Every frame the host wrote, in order.
    host_wrote: Vec<String>,
    host_out: Vec<HostOutput>,
    server_out: Vec<ServerOutput>,
}

impl Pair {
    fn new(policy: &[&str], server: ServerRules) -> Pair {
        let now = Instant::now();
        let host = HostState::new(
            HostRules::new(policy.iter().copied()),
            now,
            SystemTime::UNIX_EPOCH,
        )
        .expect("host policy parses");
        Pair {
            now,
            host,
            server: ServerState::new(server),
            to_server: VecDeque::new(),
            to_host: VecDeque::new(),
            host_wrote: Vec::new(),
            host_out: Vec::new(),
            server_out: Vec::new(),
        }
    }

    /// Moves every output of both sides to where it goes: frames onto the wire (as text),
    /// everything else into the recorded outputs.
    fn collect(&mut self) {
        while let Some(o) = self.host.poll_output() {
            match o.frame() {
                Some(text) => {
                    self.host_wrote.push(text.clone());
                    self.to_server.push_back(text);
                }
                None => self.host_out.push(o),
            }
        }
        while let Some(o) = self.server.poll_output() {
            match o.frame() {
                Some(text) => self.to_host.push_back(text),
                None => self.server_out.push(o),
            }
        }
    }

    /// The host's outputs recorded after the first `from` (frames went onto the wire),
    /// once everything pending is collected.
    fn host_outputs_from(&mut self, from: usize) -> Vec<HostOutput> {
        self.collect();
        self.host_out[from..].to_vec()
    }

    /// Delivers the next frame to the server; `false` if none was in flight.
    fn step_server(&mut self) -> bool {
        self.collect();
        let Some(text) = self.to_server.pop_front() else {
            return false;
        };
        let msg = Message::parse(&text).expect("the host writes valid JSON-RPC");
        self.server.handle_message(self.now, msg);
        self.collect();
        true
    }

    /// Delivers the next frame to the host; `false` if none was in flight.
    fn step_host(&mut self) -> bool {
        self.collect();
        let Some(text) = self.to_host.pop_front() else {
            return false;
        };
        let msg = Message::parse(&text).expect("the server writes valid JSON-RPC");
        self.host.handle_message(self.now, msg);
        self.collect();
        true
    }

    /// Runs until neither side has a frame in flight.
    fn drive(&mut self) {
        while self.step_server() | self.step_host() {}
    }

    fn connect(policy: &[&str], server: ServerRules) -> Pair {
        let mut p = Pair::new(policy, server);
        p.host.start(p.now);
        p.drive();
        p
    }

    /// A host under `policy` connected to a plain MCP server (§3.3: its `initialize`
    /// answer carries no `experimental.mcpl`).
    fn connect_plain_mcp(policy: &[&str]) -> Pair {
        let mut p = Pair::new(policy, server_rules());
        p.host.start(p.now);
        p.step_server();
        // The server's answer replaced by a plain MCP one.
        p.to_host.clear();
        p.server_writes(json!({
            "jsonrpc": "2.0", "id": 1,
            "result": { "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                        "serverInfo": { "name": "plain" } }
        }));
        p.drive();
        p
    }

    /// The details of the server's diagnostics with `code`, in order.
    fn server_details(&self, code: &str) -> Vec<String> {
        self.server_out
            .iter()
            .filter_map(|o| match o {
                ServerOutput::Diagnostic(d) if d.code() == code => Some(d.detail()),
                _ => None,
            })
            .collect()
    }

    /// A frame the server side writes as it is (a misbehaving or racing server).
    fn server_writes(&mut self, frame: Value) {
        self.to_host.push_back(frame.to_string());
    }

    /// The last response the host wrote for request `id`.
    fn host_answer(&self, id: i64) -> Option<Value> {
        self.host_wrote
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .rfind(|v| v.get("id") == Some(&json!(id)) && v.get("method").is_none())
    }

    fn connected(&self) -> Vec<&Result<(), ConnectError>> {
        self.host_out
            .iter()
            .filter_map(|o| match o {
                HostOutput::Connected(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn pushes(&self) -> usize {
        self.host_out
            .iter()
            .filter(|o| matches!(o, HostOutput::Event(HostEvent::Push { .. })))
            .count()
    }
}

fn push(id: i64, event_id: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "push/event",
        "params": {
            "featureSet": "news",
            "eventId": event_id,
            "timestamp": "2026-12-02T00:00:00Z",
            "payload": { "content": [{ "type": "text", "text": "hello" }] }
        }
    })
}

fn inference_rules() -> ServerRules {
    let mut rules = server_rules();
    rules.manifest = json!({
        "version": "0.5",
        "inferenceRequest": { "streaming": {} },
        "featureSets": { "assist": { "uses": ["inferenceRequest", "inferenceRequest.streaming"] } }
    });
    rules
}

/// The `inference/request` handed to the application, by its id.
fn handed_inference(p: &Pair) -> RequestId {
    p.host_out
        .iter()
        .rev()
        .find_map(|o| match o {
            HostOutput::Request { id, method, .. } if method == "inference/request" => {
                Some(id.clone())
            }
            _ => None,
        })
        .expect("handed to the application")
}

fn hook_rules() -> ServerRules {
    let mut rules = server_rules();
    rules.manifest = json!({"version": "0.5",
        "contextHooks": {"beforeInference": {"inject": {"afterUser": true, "system": true}}},
        "featureSets": {"ctx": {"description": "Context",
            "uses": ["contextHooks.beforeInference.inject.afterUser",
                     "contextHooks.beforeInference.inject.system"]}}});
    rules
}

fn hook_verdicts(p: &Pair) -> Vec<&rules::HookVerdict> {
    p.host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Hook { verdict, .. } => Some(verdict),
            _ => None,
        })
        .collect()
}

/// The server application answers the hook it was handed with `injections`.
fn answer_hook(p: &mut Pair, injections: Value) {
    answer_hook_with(
        p,
        json!({"featureSet": "ctx", "contextInjections": injections}),
    );
}

/// The server application answers the hook it was handed with the whole `answer`.
fn answer_hook_with(p: &mut Pair, answer: Value) {
    let id = handed_hook(p);
    p.server.answer(id, Ok(answer)).expect("handed out");
}

/// The id of the hook handed to the server application, taken out of its outputs.
fn handed_hook(p: &mut Pair) -> RequestId {
    let i = p
        .server_out
        .iter()
        .position(|o| matches!(o, ServerOutput::Request { method, .. } if method == "context/beforeInference"))
        .expect("the hook reached the server application");
    let ServerOutput::Request { id, .. } = p.server_out.remove(i) else {
        unreachable!("matched above")
    };
    id
}

/// The server application answers the host's `mcpl/manifest` fetch with `manifest`.
fn answer_fetch(p: &mut Pair, manifest: Value) -> bool {
    let Some(i) = p.server_out.iter().position(
        |o| matches!(o, ServerOutput::Request { method, .. } if method == "mcpl/manifest"),
    ) else {
        return false;
    };
    let ServerOutput::Request { id, .. } = p.server_out.remove(i) else {
        unreachable!("matched above")
    };
    p.server.answer(id, Ok(manifest)).expect("handed out");
    true
}

fn channels_rules() -> ServerRules {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "incoming": {} });
    rules
}

fn call(p: &mut Pair, id: i64, method: &str, params: Value) -> Value {
    p.server_writes(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    p.drive();
    p.host_answer(id).expect("answered")
}

fn server_notifications<'a>(p: &'a Pair, method: &str) -> Vec<&'a Value> {
    p.server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Notification(n) if n.method == method => n.params.as_ref(),
            _ => None,
        })
        .collect()
}

fn announce() -> Value {
    json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}})
}

fn fetches(p: &Pair) -> usize {
    p.host_wrote
        .iter()
        .filter(|t| t.contains("\"mcpl/manifest\""))
        .count()
}

/// The id of the last `mcpl/manifest` request the host wrote.
fn last_fetch_id(p: &Pair) -> i64 {
    p.host_wrote
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .rfind(|v| v["method"] == "mcpl/manifest")
        .and_then(|v| v["id"].as_i64())
        .expect("a fetch was written")
}

/// `manifest()` with a second feature set, `sports`, using `pushEvents`.
fn manifest_with_sports() -> Value {
    let mut m = manifest();
    m["featureSets"]["sports"] = json!({ "uses": ["pushEvents"] });
    m
}

fn changed(
    revision: &str,
    domains: &[crate::manifest::domains::ChangeDomain],
) -> crate::manifest::ManifestChanged {
    crate::manifest::ManifestChanged {
        revision: revision.into(),
        domains: domains.to_vec(),
    }
}

/// The `mcpl/manifestChanged` frames the server has written and the host not yet read.
fn announcements_in_flight(p: &Pair) -> Vec<Value> {
    p.to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v["method"] == "mcpl/manifestChanged")
        .collect()
}

fn sports_push() -> Value {
    json!({ "featureSet": "sports", "eventId": "e1", "timestamp": "2026-01-01T00:00:00Z",
            "payload": { "content": [{ "type": "text", "text": "goal" }] } })
}

/// `s` reads an `initialize` from a host that does not advertise MCPL.
fn initialize_plain(s: &mut ServerState) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {}}});
    s.handle_message(
        Instant::now(),
        Message::parse(&init.to_string()).expect("json-rpc"),
    );
}

fn channel(id: &str, label: &str) -> Value {
    json!({ "id": id, "type": "chat", "label": label })
}

/// A pair whose server may register channels, and has sent `channels/register` with
/// `descriptors` (not yet delivered).
fn registering(descriptors: Value) -> Pair {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    p.server
        .request(
            p.now,
            "channels/register",
            json!({ "channels": descriptors }),
        )
        .expect("granted");
    p
}

fn labels(s: &ServerState) -> Vec<(String, Option<String>)> {
    s.channels().into_iter().map(|d| (d.id, d.label)).collect()
}

/// A pair whose server has sent one `inference/request` without `stream`, and its id.
fn asked_without_stream() -> (Pair, u64) {
    let mut p = inference_pair();
    let asked = p
        .server
        .request(p.now, "inference/request", ask(false))
        .expect("granted");
    p.collect();
    (p, asked)
}

/// A streaming `inference/request` the server sent and the host handed to its application:
/// the pair, the server's id for it, the host's.
fn streaming_asked() -> (Pair, u64, RequestId) {
    let mut p = inference_pair();
    let asked = p
        .server
        .request(p.now, "inference/request", ask(true))
        .expect("granted");
    p.drive();
    let id = handed_inference(&p);
    (p, asked, id)
}

fn inference_pair() -> Pair {
    Pair::connect(
        &["inferenceRequest", "inferenceRequest.streaming"],
        inference_rules(),
    )
}

fn ask(stream: bool) -> Value {
    json!({ "featureSet": "assist", "stream": stream,
            "messages": [{ "role": "user", "content": "hi" }] })
}

/// What the server reports from now on, after `from` outputs.
fn server_diagnostics(p: &Pair, from: usize) -> Vec<&ServerDiagnostic> {
    p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Diagnostic(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn server_reads(p: &mut Pair, frame: Value) {
    let msg = Message::parse(&frame.to_string()).expect("json-rpc");
    p.server.handle_message(p.now, msg);
    p.collect();
}

fn ready_moments(p: &Pair) -> Vec<bool> {
    p.server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::PolicyApplied { first, .. } => Some(*first),
            _ => None,
        })
        .collect()
}

/// `hook_rules()` with the hook's injections split over two sets: `ctx` (afterUser) and
/// `sys` (system).
fn split_hook_rules(hook_set: &str) -> ServerRules {
    let mut rules = hook_rules();
    rules.manifest["featureSets"] = json!({
        "ctx": {"uses": ["contextHooks.beforeInference.inject.afterUser"]},
        "sys": {"uses": ["contextHooks.beforeInference.inject.system"]}});
    rules.hook_feature_set = Some(hook_set.into());
    rules
}

fn hook_params() -> Value {
    json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": "hi"})
}

mod answer_deadline;
mod cancel;
mod channels;
mod close;
mod eof;
mod hooks;
mod host_before_initialize;
mod host_cancel;
mod host_fetched_version;
mod host_frames;
mod host_label;
mod host_repeated_answer;
mod host_written;
mod hostile;
mod initialize;
mod manifest;
mod messages;
mod model;
mod policy;
mod requests;
mod server_channel_gate;
mod server_eof;
mod server_frames;
mod turns;
mod unparsed;
