//! A [`HostState`] and a [`ServerState`] wired back to back (as quinn-proto's `Pair`):
//! every frame goes through JSON text and back, in wire order, one step at a time, so each
//! interleaving the race tests hunt for with threads is a plain deterministic test here.

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
        ..ServerRules::new(json!({ "name": "pair-server", "version": "1" }), manifest())
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
            match o {
                HostOutput::Transmit(m) => {
                    self.host_wrote.push(m.to_json());
                    self.to_server.push_back(m.to_json());
                }
                other => self.host_out.push(other),
            }
        }
        while let Some(o) = self.server.poll_output() {
            match o {
                ServerOutput::Transmit(m) => self.to_host.push_back(m.to_json()),
                other => self.server_out.push(other),
            }
        }
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

#[test]
fn s5_3_handshake_then_policy_request_then_ready_in_mcpl() {
    let p = Pair::connect(&["pushEvents"], server_rules());
    assert_eq!(p.connected(), vec![&Ok(())]);
    assert_eq!(p.host.mode(), &Mode::Mcpl);
    assert!(p.host.is_ready());
    assert!(p.host.grant().allows(Capability::PushEvents));
    // §5.4: nothing the policy did not name is granted, whatever the server advertised.
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.server.is_ready());
    assert_eq!(p.server.grant(), p.host.grant());
    assert_eq!(p.host.label(), "pair-server");
    assert!(matches!(
        p.server_out.last(),
        Some(ServerOutput::PolicyApplied { .. })
    ));
}

#[test]
fn s5_3_a_push_right_behind_the_receipt_is_admitted() {
    // RELIABILITY.md's first ordering bug: readiness set in another task refused a greeting
    // written right after the receipt. In wire order the receipt is handled first.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // its result: the host sends initialized and the policy Request
    p.step_server(); // initialized
    p.step_server(); // the policy Request: the receipt is on the wire to the host
    assert!(p.server.is_ready(), "the server applied the policy");
    assert!(!p.host.is_ready(), "its receipt is still on the wire");
    let id = p
        .server
        .request("push/event", push(0, "e1")["params"].clone())
        .expect("ready and granted");
    p.drive();
    assert_eq!(p.pushes(), 1);
    assert!(p.server_out.iter().any(|o| matches!(
        o,
        ServerOutput::Response { id: got, outcome: Ok(v) } if *got == id && v["accepted"] == true
    )));
}

#[test]
fn s5_3_a_push_read_before_the_receipt_is_refused_however_late_judged() {
    // The mirror case, which failed open: a push on the wire ahead of the receipt is judged
    // under the state it arrived in.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // initialize result: the host sends initialized + the policy Request
    p.step_server(); // initialized
    p.step_server(); // the policy Request: the receipt is now on the wire to the host
                     // A racing server slips a push ahead of its receipt.
    let receipt = p.to_host.pop_front().expect("receipt in flight");
    p.server_writes(push(900, "early"));
    p.to_host.push_back(receipt);
    p.drive();
    let answer = p.host_answer(900).expect("the push was answered");
    assert_eq!(answer["error"]["code"], -32002);
    assert_eq!(p.pushes(), 0);
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::PrivilegedBeforeReady { method }) if method == "push/event"
    )));
    // The receipt after it still made the session ready.
    assert!(p.host.is_ready());
}

#[test]
fn s9_4_a_duplicate_event_is_acknowledged_once_and_not_redelivered() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(push(50, "same"));
    p.server_writes(push(51, "same"));
    p.drive();
    assert_eq!(p.pushes(), 1);
    assert_eq!(
        p.host_answer(50).unwrap()["result"],
        json!({"accepted": true})
    );
    assert_eq!(
        p.host_answer(51).unwrap()["result"],
        json!({"accepted": true, "reason": "duplicate"})
    );
}

#[test]
fn s5_4_the_server_does_not_send_what_the_host_would_refuse() {
    let mut p = Pair::connect(&[], server_rules());
    assert!(p.host.is_ready());
    let refused = p
        .server
        .request("push/event", push(0, "x")["params"].clone());
    assert!(matches!(
        refused,
        Err(server::SendRefusal::Admission(Refusal::Denied(_), _))
    ));
    // Before readiness it is refused as not ready.
    let mut q = Pair::new(&["pushEvents"], server_rules());
    let early = q
        .server
        .request("push/event", push(0, "x")["params"].clone());
    assert!(matches!(
        early,
        Err(server::SendRefusal::Admission(Refusal::NotReady(_), _))
    ));
    // Notifications go through the same gate: `channels/changed` needs `channels.register`.
    let changed = json!({"added": [{"id": "c1", "type": "chat", "direction": "inbound"}]});
    assert!(matches!(
        p.server.notify("channels/changed", changed.clone()),
        Err(server::SendRefusal::Admission(Refusal::Denied(_), _))
    ));
    assert!(matches!(
        p.server.notify("context/beforeInference", json!({})),
        Err(server::SendRefusal::Admission(Refusal::NotReceived, _))
    ));
    let mut c = Pair::connect(
        &["channels.register", "channels.incoming"],
        channels_rules(),
    );
    c.server.notify("channels/changed", changed).unwrap();
    c.drive();
    assert_eq!(c.host.channels().ids(), ["c1"]);
}

#[test]
fn s6_7_a_narrowing_applies_before_the_request_and_a_widening_on_the_receipt() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.host
        .set_policy(p.now, vec![])
        .expect("no exchange in flight");
    // Narrowed at once, before the Request is even written.
    assert!(!p.host.grant().allows(Capability::PushEvents));
    // A push already on the wire is refused: the narrowing wins.
    p.server_writes(push(60, "n1"));
    p.drive();
    assert_eq!(p.host_answer(60).unwrap()["error"]["code"], -32002);
    // Widening back activates only with the accepting receipt.
    p.host
        .set_policy(p.now, vec!["pushEvents".into()])
        .expect("previous exchange ended");
    assert!(!p.host.grant().allows(Capability::PushEvents));
    assert_eq!(
        p.host.set_policy(p.now, vec![]),
        Err(StateError::PolicyInFlight)
    );
    p.drive();
    assert!(p.host.grant().allows(Capability::PushEvents));
    let changes: Vec<_> = p
        .host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::PolicyChanged(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(changes.len(), 2);
    assert!(changes[1].activated.contains(Capability::PushEvents));
}

/// §6.7: a `disabled` carried by a Notification is a reduction; the host applies it before
/// the Notification is written, and every later policy Request repeats it after the host's
/// configured `disabled` (one rule with `HostSession::disable_by_notification`:
/// `HostPolicy::disable_later`).
#[test]
fn s6_7_disabling_by_notification_narrows_the_host_first_and_sticks() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.disabled = vec!["configured".into()];
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).expect("policy parses");
    p.host.start(p.now);
    p.drive();
    p.server_writes(push(70, "before"));
    p.drive();
    assert_eq!(p.host_answer(70).unwrap()["result"]["accepted"], true);

    p.host
        .disable_by_notification(&["news".to_owned()])
        .expect("ready, nothing in flight");
    // Applied before anything is written: a push already on the wire is refused (-32001:
    // declared, but not available now).
    p.server_writes(push(71, "after"));
    let written = p.host_wrote.len();
    p.drive();
    let note: Value = serde_json::from_str(&p.host_wrote[written]).unwrap();
    assert_eq!(note["method"], "featureSets/update");
    assert_eq!(note["params"], json!({ "disabled": ["news"] }));
    assert!(note.get("id").is_none(), "a Notification: {note}");
    assert_eq!(p.host_answer(71).unwrap()["error"]["code"], -32001);
    assert!(
        p.host.grant().allows(Capability::PushEvents),
        "nothing narrowed the grant"
    );

    // A later Request repeats it after the configured list, so it never re-enables the set.
    let written = p.host_wrote.len();
    p.host
        .set_policy(p.now, vec!["pushEvents".into()])
        .expect("nothing in flight");
    p.drive();
    let request: Value = serde_json::from_str(&p.host_wrote[written]).unwrap();
    assert_eq!(request["method"], "featureSets/update");
    assert_eq!(request["params"]["disabled"], json!(["configured", "news"]));
    p.server_writes(push(72, "later"));
    p.drive();
    assert_eq!(p.host_answer(72).unwrap()["error"]["code"], -32001);

    // Past the list bound: refused before anything is sent or applied.
    let many: Vec<String> = (0..1025).map(|i| format!("s{i}")).collect();
    let written = p.host_wrote.len();
    assert!(matches!(
        p.host.disable_by_notification(&many),
        Err(StateError::Selection(_))
    ));
    p.drive();
    assert_eq!(p.host_wrote.len(), written);
}

/// A disable by Notification waits like a policy change: not before the connection is up,
/// not while a policy Request is in flight, never on an MCP-only connection (§3.2).
#[test]
fn s6_7_disabling_by_notification_is_refused_while_a_policy_exchange_is_in_flight() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let names = ["news".to_owned()];
    assert_eq!(
        p.host.disable_by_notification(&names),
        Err(StateError::PolicyInFlight)
    );
    p.host.start(p.now);
    p.drive();
    p.host.set_policy(p.now, vec![]).expect("nothing in flight");
    assert_eq!(
        p.host.disable_by_notification(&names),
        Err(StateError::PolicyInFlight)
    );
    p.drive();
    assert_eq!(p.host.disable_by_notification(&names), Ok(()));

    let mut mcp = Pair::new(&["tools"], server_rules());
    mcp.host.start(mcp.now);
    mcp.step_server();
    mcp.to_host.clear();
    mcp.server_writes(json!({
        "jsonrpc": "2.0", "id": 1,
        "result": { "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                    "serverInfo": { "name": "plain" } }
    }));
    mcp.drive();
    assert!(
        matches!(mcp.host.mode(), Mode::McpOnly(_)),
        "{:?}",
        mcp.host.mode()
    );
    assert!(matches!(
        mcp.host.disable_by_notification(&names),
        Err(StateError::McpOnly(_))
    ));
}

#[test]
fn s5_3_an_unanswered_policy_request_times_out_into_mcp_only_and_is_told() {
    let mut p = Pair::new(&["pushEvents", "tools"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host(); // the policy Request is now on the wire; the server never answers it
    let deadline = p
        .host
        .poll_timeout()
        .expect("the policy Request has a deadline");
    assert_eq!(deadline, p.now + Duration::from_secs(10));
    p.to_server.clear();
    p.host.handle_timeout(deadline);
    p.collect();
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    assert!(p.host.grant().allows(Capability::Tools));
    assert!(!p.host.grant().allows(Capability::PushEvents));
    // §6.7: the server may believe the grant it was told; the reduction is told.
    let told: Vec<Value> = p
        .to_server
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    assert!(told.iter().any(|v| v["method"] == "featureSets/update"
        && v["params"]["effectiveCapabilities"]
            .as_array()
            .is_some_and(|a| !a.iter().any(|c| c == "pushEvents"))));
    assert!(
        p.connected().is_empty(),
        "connected once the reduction ends"
    );
    p.drive();
    assert_eq!(p.connected(), vec![&Ok(())]);
}

#[test]
fn s6_7_a_refusal_naming_close_ends_the_connection() {
    let mut rules = server_rules();
    rules.required = Some((
        crate::capability::CapabilitySet::EMPTY.with(Capability::ChannelsRegister),
        crate::policy::Fallback::Close,
    ));
    let p = Pair::connect(&["pushEvents"], rules);
    assert_eq!(p.connected(), vec![&Err(ConnectError::Refused)]);
    assert!(p.host_out.contains(&HostOutput::Close));
    assert!(p.server_out.contains(&ServerOutput::Close));
}

#[test]
fn s3_3_a_server_without_mcpl_is_mcp_only_with_tools_at_most() {
    let mut p = Pair::new(&["tools", "pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    // Replace the server's answer with a plain MCP one.
    p.to_host.clear();
    p.server_writes(json!({
        "jsonrpc": "2.0", "id": 1,
        "result": { "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                    "serverInfo": { "name": "plain" } }
    }));
    p.drive();
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::NotAdvertised));
    assert_eq!(
        p.host.grant().capabilities(),
        crate::capability::CapabilitySet::EMPTY.with(Capability::Tools)
    );
    // No policy Request goes to a server with no MCPL to configure.
    assert!(!p.to_server.iter().any(|t| t.contains("featureSets/update")));
}

#[test]
fn s4_1_a_host_method_sent_by_the_server_is_not_found() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {}}));
    p.server_writes(json!({"jsonrpc": "2.0", "id": 71, "method": "ping"}));
    p.drive();
    assert_eq!(p.host_answer(70).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(71).unwrap()["result"], json!({}));
}

/// §17.3, §14.3: a method the host receives only as a Notification, sent as a Request, is
/// answered `-32601` (as `host::HostSession` answers it), not handed to the driver: found by
/// `host_differential.rs`.
#[test]
fn s17_3_a_notification_method_sent_as_a_request_is_not_found() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let methods = [
        "mcpl/manifestChanged",
        "notifications/tools/list_changed",
        "ping",
    ];
    for (id, method) in (72..).zip(methods) {
        p.server_writes(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}));
    }
    p.drive();
    assert_eq!(p.host_answer(72).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(73).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(74).unwrap()["result"], json!({}));
    assert!(!p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Unhandled { .. })));
}

/// The server's admission (`session::admit_at_server`, as `server::Server`): nothing but
/// `initialize` and `ping` before `initialize`; then, on an MCP-only connection, MCP methods
/// run ungated and MCPL ones do not exist (§3.2).
#[test]
fn s3_2_a_server_admits_by_initialize_then_mcp_only() {
    let mut server = ServerState::new(server_rules());
    let answer = |server: &mut ServerState, frame: Value| -> Value {
        server.handle_message(
            Instant::now(),
            Message::parse(&frame.to_string()).expect("valid"),
        );
        let mut last = Value::Null;
        while let Some(o) = server.poll_output() {
            if let ServerOutput::Transmit(m) = o {
                last = serde_json::from_str(&m.to_json()).expect("valid");
            }
        }
        last
    };
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}),
    );
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    );
    assert_eq!(r["result"], json!({}));
    // A host without `experimental.mcpl`.
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "plain", "version": "1"}}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 4, "method": "context/beforeInference", "params": {}}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");
    server.handle_message(
        Instant::now(),
        Message::parse(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "t"}})
                .to_string(),
        )
        .expect("valid"),
    );
    assert!(matches!(
        server.poll_output(),
        Some(ServerOutput::Request { method, .. }) if method == "tools/call"
    ));
}

/// §11.3: the application's `inference/request` result is held to the one result rule
/// before it is sent: a malformed one is answered `-32603`, as `host::HostSession` answers
/// it (found by `host_differential.rs`); a well-formed one goes out unchanged.
#[test]
fn s11_3_a_malformed_application_result_is_answered_internal_error() {
    let rules = ServerRules::new(
        json!({ "name": "asker", "version": "1" }),
        json!({ "version": "0.5", "inferenceRequest": {},
                "featureSets": { "assist": { "uses": ["inferenceRequest"] } } }),
    );
    let mut p = Pair::connect(&["inferenceRequest"], rules);
    for id in [90, 91] {
        p.server_writes(
            json!({"jsonrpc": "2.0", "id": id, "method": "inference/request",
            "params": {"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}}),
        );
    }
    p.drive();
    let handed: Vec<RequestId> = p
        .host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Request { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(handed, [RequestId::from(90i64), RequestId::from(91i64)]);
    let good = json!({ "content": "ok", "finishReason": "end_turn" });
    p.host
        .answer(RequestId::from(90i64), Ok(json!({ "content": 5 })))
        .unwrap();
    p.host
        .answer(RequestId::from(91i64), Ok(good.clone()))
        .unwrap();
    p.collect();
    assert_eq!(p.host_answer(90).unwrap()["error"]["code"], -32603);
    assert_eq!(p.host_answer(91).unwrap()["result"], good);
}

#[test]
fn s11_1_inference_requests_go_to_the_application_after_the_gates() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    // Not granted: refused before the application sees it.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 80, "method": "inference/request",
        "params": {"featureSet": "news", "messages": []}}),
    );
    p.drive();
    assert_eq!(p.host_answer(80).unwrap()["error"]["code"], -32002);
    assert!(!p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Request { .. })));
    // An answer to nothing handed out is refused.
    assert!(matches!(
        p.host.answer(RequestId::from(80i64), Ok(json!({}))),
        Err(StateError::UnknownRequest(_))
    ));
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

/// §11.4: the chunks of a streamed `inference/request` (`requestId` its id, `index` from 0)
/// go out before its answer; one that got none gets the result's text as one chunk; a
/// request that is not streamed takes no chunk; and the answer is held to §11.3 (a
/// malformed result is answered `-32603` in its place).
#[test]
fn s11_4_chunks_go_before_the_answer_and_a_stream_without_any_owes_one() {
    let mut p = Pair::connect(
        &["inferenceRequest", "inferenceRequest.streaming"],
        inference_rules(),
    );
    assert!(p.host.grant().allows(Capability::InferenceRequestStreaming));
    let streamed = json!({ "featureSet": "assist", "stream": true,
                           "messages": [{ "role": "user", "content": "hi" }] });
    let result = json!({ "content": "Hello", "finishReason": "end_turn" });

    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 90, "method": "inference/request",
                           "params": streamed}),
    );
    p.drive();
    let id = handed_inference(&p);
    let from = p.host_wrote.len();
    p.host
        .inference_chunk(&id, "Hel")
        .expect("streamed, waiting");
    p.host
        .inference_chunk(&id, "lo")
        .expect("streamed, waiting");
    p.host
        .answer(id.clone(), Ok(result.clone()))
        .expect("handed out");
    p.drive();
    let wrote: Vec<Value> = p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(wrote.len(), 3, "{wrote:?}");
    assert_eq!(
        wrote[0]["params"],
        json!({ "requestId": 90, "index": 0, "delta": "Hel" })
    );
    assert_eq!(
        wrote[1]["params"],
        json!({ "requestId": 90, "index": 1, "delta": "lo" })
    );
    assert_eq!(wrote[2]["result"], result);
    assert!(matches!(
        p.host.inference_chunk(&id, "late"),
        Err(StateError::Stream(_))
    ));

    // None sent: the text goes out as chunk 0 before the answer.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 91, "method": "inference/request",
                           "params": streamed}),
    );
    p.drive();
    let id = handed_inference(&p);
    let from = p.host_wrote.len();
    p.host.answer(id, Ok(result.clone())).expect("handed out");
    p.drive();
    let wrote: Vec<Value> = p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(wrote.len(), 2, "{wrote:?}");
    assert_eq!(wrote[0]["method"], "inference/chunk");
    assert_eq!(
        wrote[0]["params"],
        json!({ "requestId": 91, "index": 0, "delta": "Hello" })
    );

    // Not streamed: no chunk, before or with the answer; a malformed result is not sent.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 92, "method": "inference/request",
                           "params": { "featureSet": "assist",
                                       "messages": [{ "role": "user", "content": "hi" }] }}),
    );
    p.drive();
    let id = handed_inference(&p);
    assert!(matches!(
        p.host.inference_chunk(&id, "x"),
        Err(StateError::Stream(_))
    ));
    let from = p.host_wrote.len();
    p.host
        .answer(id, Ok(json!({ "content": 7 })))
        .expect("handed out");
    p.drive();
    assert_eq!(p.host_wrote.len(), from + 1);
    assert_eq!(p.host_answer(92).unwrap()["error"]["code"], -32603);
}

#[test]
fn an_unknown_response_is_reported_not_dropped() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(json!({"jsonrpc": "2.0", "id": 4242, "result": {}}));
    p.drive();
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::UnexpectedResponse { id }) if id == "4242"
    )));
}

#[test]
fn events_past_the_bound_are_answered_host_busy() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.max_pending_outputs = 2;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    // The application drains nothing: the outputs stay queued in the host.
    let before = p.host_out.len();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        p.server_writes(push(100 + i as i64, id));
    }
    // Deliver without draining the host's outputs into `host_out`.
    while let Some(text) = p.to_host.pop_front() {
        let msg = Message::parse(&text).unwrap();
        p.host.handle_message(p.now, msg);
    }
    let mut answers = Vec::new();
    let mut events = 0;
    while let Some(o) = p.host.poll_output() {
        match o {
            HostOutput::Transmit(Message::Response(r)) => answers.push(r.outcome),
            HostOutput::Event(HostEvent::Push { .. }) => events += 1,
            _ => {}
        }
    }
    assert_eq!(p.host_out.len(), before);
    assert_eq!(events, 2);
    assert_eq!(
        answers.last().cloned(),
        Some(Ok(json!({"accepted": false, "reason": "host_busy"})))
    );
}

/// An event with no answer to carry a refusal (here a `surface-changed` receipt of a
/// `notifications/tools/list_changed`, §17.7) that finds the queue full is reported, never
/// lost silently.
#[test]
fn an_event_the_queue_cannot_take_is_reported() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.max_pending_outputs = 1;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    let list_changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    for frame in [push(110, "a"), list_changed.clone()] {
        let msg = Message::parse(&frame.to_string()).unwrap();
        p.host.handle_message(p.now, msg);
    }
    let mut dropped = Vec::new();
    let mut receipts = 0;
    while let Some(o) = p.host.poll_output() {
        match o {
            HostOutput::Diagnostic(HostDiagnostic::EventDropped { event }) => dropped.push(event),
            HostOutput::Event(HostEvent::ManifestChange(_)) => receipts += 1,
            _ => {}
        }
    }
    assert_eq!(dropped, ["ManifestChange"]);
    assert_eq!(receipts, 0);
    // With room, the same notification is delivered.
    p.host
        .handle_message(p.now, Message::parse(&list_changed.to_string()).unwrap());
    assert!(std::iter::from_fn(|| p.host.poll_output())
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
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
    let i = p
        .server_out
        .iter()
        .position(|o| matches!(o, ServerOutput::Request { method, .. } if method == "context/beforeInference"))
        .expect("the hook reached the server application");
    let ServerOutput::Request { id, .. } = p.server_out.remove(i) else {
        unreachable!("matched above")
    };
    p.server.answer(id, Ok(answer)).expect("handed out");
}

#[test]
fn s5_4_a_hook_answer_read_before_a_widening_receipt_is_judged_without_it() {
    // RELIABILITY.md's hook race as a plain test: the hook answer is on the wire ahead of the
    // receipt that grants `inject.system`, so its system injection is rejected.
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let params =
        json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": "hi"});
    let id = p
        .host
        .before_inference(p.now, params)
        .expect("an inject leaf is granted");
    p.host
        .set_policy(
            p.now,
            vec![
                "contextHooks.beforeInference.inject.afterUser".into(),
                "contextHooks.beforeInference.inject.system".into(),
            ],
        )
        .unwrap();
    p.step_server(); // the hook reaches the server application
                     // A server that answers with what it was not granted yet (`ServerState` would drop it,
                     // `s10_8_the_server_sends_only_injections_the_host_would_accept`): written raw.
    p.server_out.clear();
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": id, "result": {"featureSet": "ctx",
        "contextInjections": [{"namespace": "n", "position": "system", "content": "too soon"}]}}),
    );
    p.drive(); // the server then reads the policy Request: its receipt follows the answer
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert!(v[0].accepted.is_empty(), "{:?}", v[0]);
    assert!(matches!(
        v[0].rejected.as_slice(),
        [(_, crate::policy::InjectionDenied::Denied(d))] if d.capability == Capability::InjectSystem
    ));
    assert!(
        p.host.grant().allows(Capability::InjectSystem),
        "widened after"
    );
    // The same answer read after the receipt is accepted.
    let again =
        json!({"inferenceId": "j", "conversationId": "c", "turnIndex": 1, "userMessage": null});
    p.host.before_inference(p.now, again).unwrap();
    p.step_server();
    answer_hook(
        &mut p,
        json!([{"namespace": "n", "position": "system", "content": "now"}]),
    );
    p.drive();
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].accepted.len(), 1, "{:?}", v[1]);
    assert_eq!(v[1].accepted[0].0, Capability::InjectSystem);
    // §10.1: userMessage is redacted without observe.
    let sent = p
        .host_wrote
        .iter()
        .find(|t| t.contains("context/beforeInference"))
        .unwrap();
    assert!(sent.contains("\"userMessage\":null"), "{sent}");
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Hook { id: got, .. } if *got == id)));
}

/// §10.8 at the server: its hook answer carries only what the host would accept now, judged
/// by the host's own rule (`rules::hook_answer_to_send`); what it drops is reported.
#[test]
fn s10_8_the_server_sends_only_injections_the_host_would_accept() {
    let mut rules = hook_rules();
    rules.manifest["featureSets"] = json!({
        "ctx": {"uses": ["contextHooks.beforeInference.inject.afterUser"]},
        "sys": {"uses": ["contextHooks.beforeInference.inject.system"]}});
    let mut p = Pair::connect(&["contextHooks.beforeInference.inject.afterUser"], rules);
    let params =
        json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": null});
    p.host.before_inference(p.now, params).unwrap();
    p.step_server();
    answer_hook(
        &mut p,
        json!([{"namespace": "n", "position": "system", "content": "not granted"},
               {"namespace": "n", "position": "afterUser", "content": "granted"}]),
    );
    p.drive();
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].accepted.len(), 1, "{:?}", v[0]);
    assert!(v[0].rejected.is_empty(), "{:?}", v[0]);
    let dropped: Vec<String> = p
        .server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Diagnostic(d) if d.code() == "injection_dropped" => Some(d.detail()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("position system"), "{}", dropped[0]);
    // An answer to a request never handed out sends nothing.
    assert!(matches!(
        p.server.answer(RequestId::from(999i64), Ok(json!({}))),
        Err(SendRefusal::UnknownRequest(_))
    ));
}

/// §6.5, §6.6 at the server: an answer claiming an undeclared feature set loses every
/// injection, and the `injection_dropped` detail names the set it claimed (the reason,
/// `Unknown feature set`, does not). `ServerState` does not know the hook's own set, so the
/// detail must not call it "(none)" either.
#[test]
fn s6_6_a_dropped_answer_names_the_feature_set_it_claimed() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let params =
        json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": null});
    p.host.before_inference(p.now, params).unwrap();
    p.step_server();
    answer_hook_with(
        &mut p,
        json!({"featureSet": "ghost", "contextInjections": [
            {"namespace": "n", "position": "afterUser", "content": "x"}]}),
    );
    p.drive();
    let dropped: Vec<String> = p
        .server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Diagnostic(d) if d.code() == "injection_dropped" => Some(d.detail()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("\"ghost\""), "{}", dropped[0]);
    assert!(!dropped[0].contains("(none)"), "{}", dropped[0]);
}

/// Issue #24 item 3, §10.2: a hook answer that is not an object is refused by the host's
/// rule (`rules::judge_hook_answer`, a `HookFailed`), as the shape rule `mcpl check`
/// reports (`protocol::hooks::result_defects`) fails it; an object is judged entry-wise.
#[test]
fn s10_2_a_hook_result_that_is_not_an_object_is_refused_by_host_and_checker() {
    use crate::capability::Grant;
    use crate::protocol::hooks::result_defects;
    let grant = Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"]).unwrap();
    for v in [json!([]), json!(null), json!("x"), json!(7)] {
        let verdict = rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16);
        assert!(verdict.failure.is_some(), "{v}: {verdict:?}");
        assert!(!result_defects(&v).is_empty(), "{v}");
    }
    for v in [json!({}), json!({"contextInjections": []})] {
        let verdict = rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16);
        assert_eq!(verdict, rules::HookVerdict::default(), "{v}");
        assert_eq!(result_defects(&v), Vec::<String>::new(), "{v}");
    }
    let v = json!({"contextInjections": 3});
    assert!(rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16)
        .failure
        .is_some());
    assert_eq!(result_defects(&v), ["contextInjections is not an array"]);
}

#[test]
fn s10_1_an_unanswered_hook_fails_open_at_its_deadline() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let params =
        json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": null});
    p.host.before_inference(p.now, params).unwrap();
    p.collect();
    p.to_server.clear();
    let at = p.host.poll_timeout().unwrap();
    assert_eq!(at, p.now + Duration::from_secs(5));
    p.host.handle_timeout(at);
    p.collect();
    let v = hook_verdicts(&p);
    assert!(v[0].failure.is_some() && v[0].accepted.is_empty());
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::HookFailed { .. }))));
    // Nothing granted, no hook at all.
    let mut q = Pair::connect(&["pushEvents"], hook_rules());
    assert_eq!(q.host.before_inference(q.now, json!({})), None);
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

#[test]
fn s17_5_a_fetched_manifest_that_removes_a_capability_revokes_it_and_is_told() {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    assert!(p.host.grant().allows(Capability::ChannelsRegister));
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    p.drive();
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    assert!(
        answer_fetch(&mut p, smaller),
        "the host fetched mcpl/manifest"
    );
    let policy_requests_before = p
        .host_wrote
        .iter()
        .filter(|t| t.contains("featureSets/update"))
        .count();
    p.drive();
    // §17.5 step 3: revoked host-side at once, and told by Request (§6.7).
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.host.grant().allows(Capability::PushEvents));
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
    let after = p
        .host_wrote
        .iter()
        .filter(|t| t.contains("featureSets/update"))
        .count();
    assert_eq!(after, policy_requests_before + 1);
    assert!(
        !p.server.grant().allows(Capability::ChannelsRegister),
        "the server was told"
    );
}

/// §17.4: the application may fetch the manifest at any time; the answer is reviewed like an
/// announced one (§17.5: a revocation applies at once and is told by Request), and spends
/// nothing of the announcement rate limit (§17.8).
#[test]
fn s17_4_a_fetch_the_application_asks_for_is_reviewed_like_an_announced_one() {
    let mut p = Pair::new(&["pushEvents", "channels.register"], server_rules());
    assert_eq!(
        p.host.refresh_manifest(p.now),
        Err(StateError::NotConnected)
    );
    p.host.start(p.now);
    p.drive();
    for _ in 0..5 {
        p.host.refresh_manifest(p.now).expect("up, MCPL advertised");
        p.drive();
        assert!(answer_fetch(&mut p, manifest()), "fetched at once");
        p.drive();
    }
    assert!(
        !p.host_out.iter().any(|o| matches!(
            o,
            HostOutput::Diagnostic(HostDiagnostic::ManifestFetchDropped { .. })
        )),
        "outside the announcement limit"
    );
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    p.host.refresh_manifest(p.now).expect("up");
    p.drive();
    assert!(answer_fetch(&mut p, smaller));
    p.drive();
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
    assert!(
        !p.server.grant().allows(Capability::ChannelsRegister),
        "the revocation was told by Request (§6.7)"
    );
    // Announcements still get their own burst.
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    p.drive();
    assert!(answer_fetch(&mut p, manifest()), "an announcement fetches");

    let mut mcp = Pair::new(&["tools"], server_rules());
    mcp.host.start(mcp.now);
    mcp.step_server();
    mcp.to_host.clear();
    mcp.server_writes(json!({
        "jsonrpc": "2.0", "id": 1,
        "result": { "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                    "serverInfo": { "name": "plain" } }
    }));
    mcp.drive();
    assert_eq!(
        mcp.host.refresh_manifest(mcp.now),
        Err(StateError::McpOnly(McpOnlyReason::NotAdvertised))
    );
}

/// §5.4: what the application sends goes through the host's outbound gate, methods with an
/// API of their own are refused by name, and every request ends in its answer or its
/// timeout, a late answer reported rather than dropped.
#[test]
fn s5_4_the_applications_own_requests_are_gated_and_end_in_an_answer_or_a_timeout() {
    let mut p = Pair::new(&["tools", "pushEvents"], server_rules());
    let call = json!({ "name": "echo", "arguments": {} });
    assert_eq!(
        p.host
            .request(p.now, "tools/call", call.clone(), Duration::from_secs(1)),
        Err(StateError::NotConnected)
    );
    p.host.start(p.now);
    p.drive();
    for (method, instead) in [
        ("featureSets/update", "HostState::set_policy"),
        ("context/beforeInference", "HostState::before_inference"),
        ("inference/lifecycle", "HostState::start_turn"),
        ("channels/outgoing/chunk", "HostState::start_stream"),
    ] {
        assert_eq!(
            p.host.notify(method, json!({})),
            Err(StateError::UseDedicated {
                method: method.into(),
                instead
            })
        );
    }
    // Not granted (channels.publish): refused locally, nothing written.
    let written = p.host_wrote.len();
    assert!(matches!(
        p.host
            .notify("channels/publish", json!({ "channelId": "c" })),
        Err(StateError::NotSent(_))
    ));
    p.drive();
    assert_eq!(p.host_wrote.len(), written);

    let id = p
        .host
        .request(p.now, "tools/call", call.clone(), Duration::from_secs(1))
        .expect("tools granted");
    p.drive();
    let Some(ServerOutput::Request { id: sid, .. }) = p
        .server_out
        .iter()
        .rfind(|o| matches!(o, ServerOutput::Request { method, .. } if method == "tools/call"))
        .cloned()
    else {
        panic!("the server got the call: {:?}", p.server_out);
    };
    p.server
        .answer(sid, Ok(json!({ "content": [] })))
        .expect("handed out");
    p.drive();
    assert!(p.host_out.contains(&HostOutput::Response {
        id,
        outcome: Ok(json!({ "content": [] }))
    }));

    // Unanswered: it times out at its deadline, and the late answer is reported.
    let late = p
        .host
        .request(p.now, "tools/call", call, Duration::from_secs(1))
        .expect("tools granted");
    p.drive();
    let Some(ServerOutput::Request { id: sid, .. }) = p.server_out.last().cloned() else {
        panic!("the server got the call");
    };
    p.host.handle_timeout(p.now + Duration::from_secs(2));
    p.collect();
    assert!(p
        .host_out
        .contains(&HostOutput::RequestTimedOut { id: late }));
    p.server.answer(sid, Ok(json!({}))).expect("handed out");
    p.drive();
    assert!(matches!(
        p.host_out.last(),
        Some(HostOutput::Diagnostic(
            HostDiagnostic::UnexpectedResponse { .. }
        ))
    ));
}

#[test]
fn s17_8_announcements_are_coalesced_and_rate_limited() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for _ in 0..5 {
        p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    }
    p.drive();
    let fetches = |p: &Pair| {
        p.host_wrote
            .iter()
            .filter(|t| t.contains("\"mcpl/manifest\""))
            .count()
    };
    // One fetch in flight; the others fold into a single follow-up.
    assert_eq!(fetches(&p), 1);
    assert!(answer_fetch(&mut p, manifest()));
    p.drive();
    assert_eq!(fetches(&p), 2, "one coalesced follow-up");
    assert!(answer_fetch(&mut p, manifest()));
    p.drive();
    assert_eq!(fetches(&p), 2, "nothing more was announced");
}

#[test]
fn s17_5_repeated_unusable_manifests_suspend_mcpl() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for _ in 0..3 {
        p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
        p.drive();
        assert!(answer_fetch(&mut p, json!("not a manifest")));
        p.drive();
    }
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::Suspended));
    assert!(!p.host.grant().allows(Capability::PushEvents));
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::ManifestUnparseable { .. })
    )));
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

#[test]
fn s14_5_channels_are_authorized_item_wise_and_messages_against_what_was_registered() {
    let mut p = Pair::connect(
        &["channels.register", "channels.incoming"],
        channels_rules(),
    );
    let limits = ChannelLimits {
        patterns: Some(vec!["chat-*".into()]),
        ..ChannelLimits::default()
    };
    let mut rules = HostRules::new(["channels.register", "channels.incoming"]);
    rules.channels = limits;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.server = ServerState::new(channels_rules());
    p.host.start(p.now);
    p.drive();
    let r = call(
        &mut p,
        200,
        "channels/register",
        json!({"channels": [
            {"id": "chat-1", "type": "chat", "direction": "bidirectional"},
            {"id": "ops", "type": "chat", "direction": "inbound"},
            {"id": "chat-2"}
        ]}),
    );
    assert_eq!(
        r["result"]["results"],
        json!([
            {"id": "chat-1", "accepted": true},
            {"id": "ops", "accepted": false, "reason": "capability_denied"},
            {"id": "chat-2", "accepted": false, "reason": "invalid_descriptor"}
        ])
    );
    assert_eq!(p.host.channels().ids(), ["chat-1"]);
    let r = call(
        &mut p,
        201,
        "channels/incoming",
        json!({"messages": [
            {"channelId": "chat-1", "messageId": "m1", "content": "hi"},
            {"channelId": "ops", "messageId": "m2", "content": "no"}
        ]}),
    );
    let results = &r["result"]["results"];
    assert_eq!(results[0], json!({"messageId": "m1", "accepted": true}));
    assert_eq!(results[1]["code"], -32023, "{results}");
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Event(HostEvent::ChannelMessage { channel_id, .. }) if channel_id == "chat-1"
    )));
    // §6.7: without channels.register, a removal still applies (it narrows).
    p.host
        .set_policy(p.now, vec!["channels.incoming".into()])
        .unwrap();
    p.drive();
    let r = call(
        &mut p,
        202,
        "channels/changed",
        json!({"removed": ["chat-1"],
        "added": [{"id": "chat-3", "type": "chat"}]}),
    );
    assert_eq!(
        r["result"]["results"],
        json!([
            {"id": "chat-1", "accepted": true},
            {"id": "chat-3", "accepted": false, "reason": "capability_denied"}
        ])
    );
    assert!(p.host.channels().ids().is_empty());
}

#[test]
fn s10_5_a_turn_gets_exactly_one_started_and_one_terminal() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    assert!(matches!(
        p.host.start_turn("i1", "c", 0),
        Err(StateError::Turn(_))
    ));
    p.host
        .end_turn("i1", Terminal::Completed, Some(json!({"outputTokens": 3})))
        .unwrap();
    assert!(matches!(
        p.host.end_turn("i1", Terminal::Aborted, None),
        Err(StateError::Turn(_))
    ));
    // Ended ids are remembered: the same inference cannot start a second turn.
    assert!(matches!(
        p.host.start_turn("i1", "c", 1),
        Err(StateError::Turn(_))
    ));
    p.drive();
    // The server pairs them with its §10.5 tracker: one start, one end, usage kept.
    let turns: Vec<String> = p
        .server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Turn(TurnEvent::Started(s)) => Some(format!("start {}", s.inference_id)),
            ServerOutput::Turn(TurnEvent::Ended(e)) => Some(format!(
                "end {} {:?}",
                e.inference_id,
                matches!(&e.outcome, TurnOutcome::Completed { usage: Some(u) } if u.output_tokens == Some(3))
            )),
            _ => None,
        })
        .collect();
    assert_eq!(turns, ["start i1", "end i1 true"]);
    // Not granted: nothing is sent (§5.4).
    let mut q = Pair::connect(&["pushEvents"], server_rules());
    assert!(matches!(
        q.host.start_turn("i2", "c", 0),
        Err(StateError::Turn(_))
    ));
    q.collect();
    assert!(!q
        .to_server
        .iter()
        .any(|t| t.contains("inference/lifecycle")));
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

/// §14.3 through the real pair: one index across the inference's channels, one `complete`
/// per channel with its whole text (also when the stream just ends), a completed channel
/// closed, one stream per inference, and every frame gated (§5.4, §14.1): a channel the
/// server did not register as outbound, or a stream without `channels.streaming`, sends
/// nothing; a `complete` the gate no longer allows at the end is reported, not sent.
#[test]
fn s14_3_outgoing_streams_index_per_inference_complete_once_and_are_gated() {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "streaming": {} });
    let mut p = Pair::connect(&["channels.register", "channels.streaming"], rules.clone());
    let r = call(
        &mut p,
        300,
        "channels/register",
        json!({"channels": [
            {"id": "a", "type": "chat", "direction": "outbound"},
            {"id": "b", "type": "chat", "direction": "bidirectional"},
            {"id": "in", "type": "chat", "direction": "inbound"}
        ]}),
    );
    assert_eq!(r["result"]["results"][2]["accepted"], true, "{r}");
    p.host.start_stream("i1", Some("c1")).unwrap();
    assert!(matches!(
        p.host.start_stream("i1", None),
        Err(StateError::Stream(_))
    ));
    p.host.stream_chunk("i1", "a", "Hel").unwrap();
    p.host.stream_chunk("i1", "b", "x").unwrap();
    assert!(matches!(
        p.host.stream_chunk("i1", "in", "no"),
        Err(StateError::NotSent(OutboundRefusal::ChannelNotPermitted(_)))
    ));
    p.host.stream_chunk("i1", "a", "lo").unwrap();
    p.host.stream_complete("i1", "a").unwrap();
    assert!(matches!(
        p.host.stream_chunk("i1", "a", "again"),
        Err(StateError::Completed(_))
    ));
    p.host.end_stream("i1").unwrap();
    assert!(matches!(
        p.host.start_stream("i1", None),
        Err(StateError::Stream(_))
    ));
    p.drive();
    let chunks = server_notifications(&p, "channels/outgoing/chunk");
    let indexes: Vec<(&Value, &Value)> = chunks
        .iter()
        .map(|c| (&c["channelId"], &c["index"]))
        .collect();
    assert_eq!(
        indexes,
        [
            (&json!("a"), &json!(0)),
            (&json!("b"), &json!(1)),
            (&json!("a"), &json!(2))
        ]
    );
    assert!(chunks.iter().all(|c| c["conversationId"] == "c1"));
    let completes = server_notifications(&p, "channels/outgoing/complete");
    let texts: Vec<(&Value, &Value)> = completes
        .iter()
        .map(|c| (&c["channelId"], &c["content"][0]["text"]))
        .collect();
    assert_eq!(
        texts,
        [(&json!("a"), &json!("Hello")), (&json!("b"), &json!("x"))]
    );

    // Narrowed mid-stream: the owed `complete` is reported, not sent.
    p.host.start_stream("i2", None).unwrap();
    p.host.stream_chunk("i2", "b", "y").unwrap();
    p.host
        .set_policy(p.now, vec!["channels.register".into()])
        .unwrap();
    p.drive();
    p.host.end_stream("i2").unwrap();
    p.drive();
    assert_eq!(
        server_notifications(&p, "channels/outgoing/complete").len(),
        2
    );
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::OutgoingNotCompleted { inference_id, channel_id, .. })
            if inference_id == "i2" && channel_id == "b"
    )));

    // Without channels.streaming nothing is streamed.
    let mut q = Pair::connect(&["channels.register"], rules);
    call(
        &mut q,
        301,
        "channels/register",
        json!({"channels": [{"id": "a", "type": "chat", "direction": "outbound"}]}),
    );
    q.host.start_stream("i1", None).unwrap();
    assert!(matches!(
        q.host.stream_chunk("i1", "a", "x"),
        Err(StateError::NotSent(OutboundRefusal::NotGranted(
            Capability::ChannelsStreaming
        )))
    ));
    q.drive();
    assert!(server_notifications(&q, "channels/outgoing/chunk").is_empty());
}

/// §10.5 at the server: the host's signal is admitted by the one rule first (a
/// notification the grant does not allow is reported `notification_denied`, never a turn),
/// then paired; an open turn is ended by the safety timeout the state machine asks to be
/// woken for.
#[test]
fn s10_5_the_server_gates_then_pairs_turns_and_times_them_out() {
    let lifecycle = |phase: &str| {
        json!({"jsonrpc": "2.0", "method": "inference/lifecycle",
               "params": {"inferenceId": "i9", "conversationId": "c", "turnIndex": 0, "phase": phase}})
        .to_string()
    };
    let turns = |p: &Pair| {
        p.server_out
            .iter()
            .filter(|o| matches!(o, ServerOutput::Turn(_)))
            .count()
    };
    // Not granted: reported, no turn.
    let mut q = Pair::connect(&["pushEvents"], server_rules());
    q.to_server.push_back(lifecycle("started"));
    q.drive();
    assert_eq!(turns(&q), 0);
    assert!(q.server_out.iter().any(|o| matches!(
        o,
        ServerOutput::Diagnostic(d) if d.code() == "notification_denied"
    )));

    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    rules.lifecycle.safety_timeout = Duration::from_secs(30);
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    assert_eq!(p.server.poll_timeout(), None);
    p.to_server.push_back(lifecycle("started"));
    p.to_server.push_back(lifecycle("started"));
    p.drive();
    assert_eq!(turns(&p), 1, "a second started is no second turn");
    let due = p
        .server
        .poll_timeout()
        .expect("an open turn has a deadline");
    assert_eq!(due, p.now + Duration::from_secs(30));
    p.server.handle_timeout(due - Duration::from_millis(1));
    p.collect();
    assert_eq!(turns(&p), 1);
    p.server.handle_timeout(due);
    p.collect();
    assert!(matches!(
        p.server_out.last(),
        Some(ServerOutput::Turn(TurnEvent::Ended(e))) if e.outcome == TurnOutcome::TimedOut
    ));
    // A terminal after the timeout ends nothing twice.
    p.to_server.push_back(lifecycle("completed"));
    p.drive();
    assert_eq!(turns(&p), 2);
    assert_eq!(p.server.poll_timeout(), None);
}

/// §3.2, §6.7: on a connection whose host does not speak MCPL 0.5, `featureSets/update` is
/// no method: the one server rule (`host_notification`, as `server::Server` applies it)
/// reports it and hands nothing out; the application's notifications still come out.
#[test]
fn s3_2_a_policy_notification_on_an_mcp_only_connection_is_reported_not_applied() {
    let mut s = ServerState::new(server_rules());
    let now = Instant::now();
    let feed = |s: &mut ServerState, v: Value| {
        s.handle_message(now, Message::parse(&v.to_string()).unwrap());
    };
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "mcp-host", "version": "0"}}}),
    );
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents"]}}),
    );
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
    );
    let out: Vec<ServerOutput> = std::iter::from_fn(|| s.poll_output()).collect();
    assert!(!s.mcpl() && !s.is_ready());
    let rest: Vec<&ServerOutput> = out
        .iter()
        .filter(|o| !matches!(o, ServerOutput::Transmit(_)))
        .collect();
    assert!(
        matches!(
            rest[..],
            [
                ServerOutput::Diagnostic(ServerDiagnostic::UnknownNotification {
                    mcp_only: true,
                    ..
                }),
                ServerOutput::Notification(n),
            ] if n.method == "notifications/roots/list_changed"
        ),
        "{rest:?}"
    );
}

/// Issue #24 item 3: the feature-set step every host answers a tagged server request by
/// (`rules::gate_tagged_request`, §6.4 rule 2, §6.5, §6.6), which `judge_push`,
/// `check_inference_feature_set` and the checkers' strict hosts call alike.
#[test]
fn s6_6_tagged_requests_are_gated_by_one_rule() {
    use crate::capability::Grant;
    use crate::jsonrpc::codes;
    use crate::policy::{derive, FeatureSets, Selection};
    let (decls, _) = FeatureSets::parse(&json!({
        "a.push": { "description": "a", "uses": ["pushEvents"] },
        "b.hints": { "description": "b", "uses": ["modelInfo"] },
        "c.infer": { "description": "c", "uses": ["inferenceRequest"] }
    }));
    let grant = Grant::from_patterns(["pushEvents", "modelInfo"]).unwrap();
    let statuses = derive(&decls, &grant, &Selection::default());
    let code = |method: &str, params: Value| {
        let mut diags = Vec::new();
        let r = rules::gate_tagged_request(&mut diags, method, Some(&params), &decls, &statuses);
        (r.err().map(|e| e.code), diags.len())
    };
    assert_eq!(
        code("push/event", json!({"featureSet": "a.push"})),
        (None, 0)
    );
    assert_eq!(
        code("push/event", json!({"featureSet": "zzz"})),
        (Some(codes::UNKNOWN_FEATURE_SET), 0)
    );
    assert_eq!(
        code("inference/request", json!({"featureSet": "c.infer"})),
        (Some(codes::FEATURE_SET_NOT_ENABLED), 0)
    );
    // Available, but its `uses` lacks pushEvents: refused and reported (§6.4 rule 2).
    assert_eq!(
        code("push/event", json!({"featureSet": "b.hints"})),
        (Some(codes::CAPABILITY_DENIED), 1)
    );
    assert_eq!(
        code("push/event", json!({})),
        (Some(codes::INVALID_PARAMS), 1)
    );
}

mod model {
    //! Model-based test of the real [`HostState`] against the real [`ServerState`]: random
    //! policy changes (accepted, answered with an error, or never answered) and server
    //! messages, checked after every step against plain set algebra:
    //! initial G = P ∩ A; a change to P' narrows first (G ∩ P' ∩ A) and widens to P' ∩ A only
    //! on an accepting receipt; a message needing c is admitted iff c ∈ G where it is read.

    use super::*;
    use crate::capability::CapabilitySet;
    use proptest::prelude::*;

    const UNIVERSE: [Capability; 3] = [
        Capability::PushEvents,
        Capability::ChannelsRegister,
        Capability::ChannelsIncoming,
    ];

    fn set_of(mask: u8) -> CapabilitySet {
        UNIVERSE
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| *c)
            .collect()
    }

    fn paths(set: CapabilitySet) -> Vec<String> {
        set.sorted_paths().into_iter().map(str::to_owned).collect()
    }

    #[derive(Debug, Clone)]
    enum Answer {
        Accept,
        Error,
        Silent,
    }

    #[derive(Debug, Clone)]
    enum Step {
        Policy(u8, Answer),
        Send(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (
                0u8..8,
                prop_oneof![
                    Just(Answer::Accept),
                    Just(Answer::Error),
                    Just(Answer::Silent)
                ]
            )
                .prop_map(|(m, a)| Step::Policy(m, a)),
            (0usize..3).prop_map(Step::Send),
        ]
    }

    fn advertised_rules(adv: u8) -> ServerRules {
        let mut m =
            json!({ "version": "0.5", "featureSets": { "news": { "uses": ["pushEvents"] } } });
        let set = set_of(adv);
        if set.contains(Capability::PushEvents) {
            m["pushEvents"] = json!({});
        }
        let mut channels = Map::new();
        if set.contains(Capability::ChannelsRegister) {
            channels.insert("register".into(), json!({}));
        }
        if set.contains(Capability::ChannelsIncoming) {
            channels.insert("incoming".into(), json!({}));
        }
        if !channels.is_empty() {
            m["channels"] = Value::Object(channels);
        }
        let mut rules = server_rules();
        rules.manifest = m;
        rules
    }

    fn message(i: usize, n: i64) -> Value {
        match i {
            0 => push(n, &format!("e{n}")),
            1 => json!({"jsonrpc": "2.0", "id": n, "method": "channels/register",
                        "params": {"channels": []}}),
            _ => json!({"jsonrpc": "2.0", "id": n, "method": "channels/incoming",
                        "params": {"messages": []}}),
        }
    }

    fn admitted(p: &Pair, n: i64) -> bool {
        let answered = p.host_answer(n);
        match answered {
            // Answered by the host: push/event.
            Some(v) => v.get("result").is_some(),
            // Handed to the driver: admitted.
            None => p.host_out.iter().any(|o| matches!(
                o,
                HostOutput::Unhandled { message: Message::Request(r), .. } if r.id == RequestId::from(n)
            )),
        }
    }

    proptest! {
        #[test]
        fn host_state_grant_follows_the_set_algebra(
            adv in 0u8..8,
            initial in 0u8..8,
            steps in proptest::collection::vec(step(), 1..24),
        ) {
            let a = set_of(adv);
            let mut p = Pair::new(&[], advertised_rules(adv));
            p.host = HostState::new(
                HostRules::new(paths(set_of(initial))),
                p.now,
                SystemTime::UNIX_EPOCH,
            ).unwrap();
            p.host.start(p.now);
            p.drive();
            let mut g = set_of(initial).intersection(a);
            prop_assert_eq!(p.host.grant().capabilities(), g);
            let mut n = 1000;
            for s in steps {
                match s {
                    Step::Policy(mask, answer) => {
                        let new = set_of(mask);
                        p.host.set_policy(p.now, paths(new)).unwrap();
                        g = g.intersection(new).intersection(a);
                        prop_assert_eq!(p.host.grant().capabilities(), g, "narrowed first");
                        match answer {
                            Answer::Accept => {
                                p.drive();
                                g = new.intersection(a);
                            }
                            Answer::Error => {
                                p.collect();
                                let req = p.to_server.pop_back().unwrap();
                                let id: Value = serde_json::from_str::<Value>(&req).unwrap()["id"].clone();
                                p.server_writes(json!({"jsonrpc": "2.0", "id": id,
                                    "error": {"code": -32603, "message": "no"}}));
                                p.drive();
                            }
                            Answer::Silent => {
                                p.collect();
                                p.to_server.pop_back();
                                let at = p.host.poll_timeout().unwrap();
                                p.host.handle_timeout(at);
                                p.collect();
                            }
                        }
                        prop_assert_eq!(p.host.grant().capabilities(), g);
                    }
                    Step::Send(i) => {
                        n += 1;
                        p.server_writes(message(i, n));
                        p.drive();
                        let need = UNIVERSE[i];
                        prop_assert_eq!(admitted(&p, n), g.contains(need), "{:?} under {:?}", need, g);
                    }
                }
            }
        }
    }
}

// --- manifest announcements and reductions in flight (found by an audit) ------------

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

/// §17.3: a malformed announcement is reported by the shape rule `mcpl check` fails it by
/// ([`crate::protocol::manifest::manifest_changed_defects`]), and still fetches (it is only
/// a hint); a well-formed one is not reported. `HostSession` reports alike
/// (`host_session.rs`, `s17_3_a_malformed_announcement_is_reported_and_still_fetches`).
#[test]
fn s17_3_a_malformed_announcement_is_reported_and_still_fetches() {
    let bad_params = |p: &Pair| -> Vec<String> {
        p.host_out
            .iter()
            .filter_map(|o| match o {
                HostOutput::Diagnostic(HostDiagnostic::BadParams { method, detail })
                    if method == "mcpl/manifestChanged" =>
                {
                    Some(detail.clone())
                }
                _ => None,
            })
            .collect()
    };
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let good = json!({"revision": "sha256:x", "domains": ["capabilities"]});
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": good}));
    p.step_host();
    assert_eq!(bad_params(&p), Vec::<String>::new());
    assert_eq!(fetches(&p), 1);
    let bad = json!({"revision": "sha256:y", "domains": ["tools"], "added": ["a"]});
    let expected = crate::protocol::manifest::manifest_changed_defects(Some(&bad)).join("; ");
    assert!(expected.contains("unknown domain") && expected.contains("payload member"));
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": bad}));
    p.step_host();
    assert_eq!(bad_params(&p), [expected]);
}

#[test]
fn s17_8_a_follow_up_due_before_ready_is_fetched_and_later_announcements_still_fetch() {
    // Two announcements during the initial policy exchange: the first fetches, the second
    // is coalesced into a follow-up. The fetch is answered before the receipt.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // its result: initialized and the policy Request go out
    p.server_writes(announce());
    p.server_writes(announce());
    p.step_host();
    p.step_host();
    assert_eq!(fetches(&p), 1, "one fetch, one coalesced follow-up");
    let id = last_fetch_id(&p);
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": id, "result": manifest()}).to_string());
    p.step_host(); // the fetch answer, read while the policy Request is in flight
                   // The coalesced follow-up is due now (a token was spent for it).
    assert_eq!(fetches(&p), 2, "the coalesced follow-up is fetched");
}

#[test]
fn s17_8_announcements_after_ready_are_fetched_after_a_follow_up_came_due_before_ready() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host();
    p.server_writes(announce());
    p.server_writes(announce());
    p.step_host();
    p.step_host();
    let id = last_fetch_id(&p);
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": id, "result": manifest()}).to_string());
    p.step_host();
    p.drive();
    while answer_fetch(&mut p, manifest()) {
        p.drive();
    }
    assert_eq!(p.connected(), vec![&Ok(())]);
    let before = fetches(&p);
    // Much later (the bucket refilled), the server announces a change: it must be fetched.
    p.now += Duration::from_secs(3600);
    p.server_writes(announce());
    p.drive();
    assert_eq!(
        fetches(&p),
        before + 1,
        "an announcement once ready is fetched (§17.5 revocations depend on it)"
    );
}

#[test]
fn s6_7_a_revocation_fetched_while_the_reduction_is_in_flight_is_told_too() {
    let policy = ["pushEvents", "channels.register"];
    let mut p = Pair::new(&policy, server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // initialized + policy Request
    p.server_writes(announce());
    p.step_host(); // fetch #1 goes out
    let fetch1 = last_fetch_id(&p);
    p.step_server(); // initialized
    p.step_server(); // policy Request: its receipt is on the wire to the host
    p.step_server(); // the fetch reaches the server application (not answered there)
                     // Fetch #1 answered ahead of the receipt: `channels` is gone.
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch1, "result": smaller}).to_string());
    p.step_host(); // the revocation, during the exchange
    p.step_host(); // the receipt: the grant applied is narrower than told → reduction Request
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.host.grant().allows(Capability::PushEvents));
    assert!(p.connected().is_empty(), "the reduction is in flight");
    // While the reduction is in flight, a second change removes pushEvents too.
    p.server_writes(announce());
    p.step_host(); // fetch #2 goes out
    let fetch2 = last_fetch_id(&p);
    assert_ne!(fetch1, fetch2);
    let smallest = json!({"version": "0.5", "featureSets": {}});
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch2, "result": smallest}).to_string());
    p.step_host();
    assert!(
        !p.host.grant().allows(Capability::PushEvents),
        "revoked host-side"
    );
    p.drive();
    assert_eq!(p.connected(), vec![&Ok(())]);
    // §6.7: any change to the effective grant goes by Request; the server must not be left
    // believing a capability the host revoked.
    assert!(
        !p.server.grant().allows(Capability::PushEvents),
        "the server was told the second revocation"
    );
}

/// Found by `tests/model_host_state.rs`: a revocation fetched while a widening Request is in
/// flight is told at once by a reduction Request, which the server reads, and applies, after
/// the widening. The widening's accepting receipt, read later, must not activate what that
/// reduction withheld: the server's last word is the reduction (§6.7: every change to the
/// grant goes by Request, and nothing is activated the server does not believe it has).
#[test]
fn s6_7_a_widening_in_flight_activates_no_more_than_a_later_reduction_told() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    p.host
        .set_policy(p.now, vec!["pushEvents".into(), "channels.register".into()])
        .unwrap();
    p.server_writes(announce());
    p.step_host(); // the fetch goes out behind the widening Request
    let fetch = last_fetch_id(&p);
    p.step_server(); // the widening Request: applied, its receipt is on the wire to the host
    p.step_server(); // the fetch reaches the server application
                     // The fetch answered ahead of that receipt: `pushEvents` is gone.
    let smaller = json!({"version": "0.5", "channels": {"register": {}}, "featureSets": {}});
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch, "result": smaller}).to_string());
    p.step_host(); // the revocation: nothing is left, and a reduction Request tells so
    assert!(!p.host.grant().allows(Capability::PushEvents));
    p.drive(); // the widening's receipt; the server reads the reduction and answers it
    let change = p
        .host_out
        .iter()
        .find_map(|o| match o {
            HostOutput::PolicyChanged(c) => Some(c),
            _ => None,
        })
        .expect("the change ended");
    assert!(change.activated.is_empty(), "{change:?}");
    assert!(change.not_activated.contains(Capability::ChannelsRegister));
    assert!(
        !p.host.grant().allows(Capability::ChannelsRegister),
        "activated past the reduction the server applied last"
    );
    assert_eq!(p.server.grant(), p.host.grant());
}

#[test]
fn requests_the_application_holds_unanswered_are_bounded() {
    // The application drains every output but answers nothing yet (a slow model): each
    // server request it was handed stays in `app_pending`. The peer must not grow that set
    // without bound (the async host bounds it by `PeerConfig::max_in_flight_requests`).
    let mut rules = server_rules();
    rules.manifest["modelInfo"] = json!({});
    let mut p = Pair::new(&["modelInfo"], rules);
    let mut hr = HostRules::new(["modelInfo"]);
    hr.max_pending_outputs = 4;
    p.host = HostState::new(hr, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    assert!(p.host.grant().allows(Capability::ModelInfo));
    for i in 0..100 {
        p.server_writes(json!({"jsonrpc": "2.0", "id": 500 + i, "method": "model/info"}));
    }
    p.drive(); // drains every output into `host_out`
    let handed = p
        .host_out
        .iter()
        .filter(|o| matches!(o, HostOutput::Request { .. }))
        .count();
    assert!(
        handed <= 4,
        "{handed} requests held unanswered by the application at once"
    );
}

// ---------------------------------------------------------------------------------------
// What `server::Server` decides that `ServerState` now decides too (issue #24 item 1)
// ---------------------------------------------------------------------------------------

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

#[test]
fn s17_3_a_manifest_change_on_a_live_connection_is_declared_and_announced() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(p.server.request("push/event", sports_push()).is_err());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.collect();
    let sent = announcements_in_flight(&p);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["params"],
        json!({ "revision": "r2", "domains": ["featureSets"] })
    );
    // §17.5: the added set is derived under the grant in force, so it may be used at once.
    assert!(p.server.request("push/event", sports_push()).is_ok());
}

#[test]
fn s17_8_changes_made_before_the_driver_polls_are_one_announcement() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.server
        .manifest_changed(manifest(), changed("r3", &[ChangeDomain::Capabilities]));
    p.collect();
    let sent = announcements_in_flight(&p);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["params"],
        json!({ "revision": "r3", "domains": ["capabilities", "featureSets"] })
    );
}

#[test]
fn s17_10_a_change_before_initialize_is_answered_by_initialize_not_announced() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.host.start(p.now);
    p.step_server(); // initialize
    assert!(announcements_in_flight(&p).is_empty());
    let init: Value =
        serde_json::from_str(p.to_host.front().expect("initialize answered")).expect("json");
    assert!(
        init["result"]["capabilities"]["experimental"]["mcpl"]["featureSets"]["sports"].is_object(),
        "{init}"
    );
    p.drive();
    assert!(p.server.request("push/event", sports_push()).is_ok());
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

#[test]
fn s3_2_an_mcp_only_connection_is_not_told_of_manifest_changes() {
    use crate::manifest::domains::ChangeDomain;
    let mut s = ServerState::new(server_rules());
    initialize_plain(&mut s);
    while s.poll_output().is_some() {}
    assert!(!s.mcpl());
    s.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    assert_eq!(s.poll_output(), None);
}

fn channel(id: &str, label: &str) -> Value {
    json!({ "id": id, "type": "chat", "label": label })
}

/// A pair whose server may register channels, and has sent `channels/register` with
/// `descriptors` (not yet delivered).
fn registering(descriptors: Value) -> Pair {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    p.server
        .request("channels/register", json!({ "channels": descriptors }))
        .expect("granted");
    p
}

fn labels(s: &ServerState) -> Vec<(String, Option<String>)> {
    s.channels().into_iter().map(|d| (d.id, d.label)).collect()
}

#[test]
fn s14_5_the_channels_the_host_accepted_are_kept_from_itemized_results() {
    let mut p = registering(json!([channel("a", "one"), channel("b", "two")]));
    p.drive();
    assert_eq!(
        labels(&p.server),
        vec![
            ("a".into(), Some("one".into())),
            ("b".into(), Some("two".into()))
        ]
    );
    p.server
        .request("channels/changed", json!({ "removed": ["a"] }))
        .expect("granted");
    p.drive();
    assert_eq!(labels(&p.server), vec![("b".into(), Some("two".into()))]);
}

#[test]
fn s14_5_channel_results_apply_in_send_order_whatever_order_the_answers_arrive_in() {
    let mut p = registering(json!([channel("a", "old")]));
    p.server
        .request(
            "channels/changed",
            json!({ "updated": [channel("a", "new")] }),
        )
        .expect("granted");
    p.step_host();
    p.step_host();
    assert_eq!(p.to_server.len(), 2, "both answered by the host");
    p.to_server.swap(0, 1); // the update's answer is read first
    p.drive();
    assert_eq!(labels(&p.server), vec![("a".into(), Some("new".into()))]);
}

#[test]
fn s14_5_a_refused_or_malformed_channel_answer_accepts_nothing() {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    let refused = p
        .server
        .request(
            "channels/register",
            json!({ "channels": [channel("a", "x")] }),
        )
        .expect("granted");
    let malformed = p
        .server
        .request(
            "channels/register",
            json!({ "channels": [channel("b", "y")] }),
        )
        .expect("granted");
    p.collect();
    p.to_host.clear(); // the host never reads them; these answers come instead
    let answers = [
        json!({"jsonrpc": "2.0", "id": refused, "error": {"code": -32002, "message": "no"}}),
        json!({"jsonrpc": "2.0", "id": malformed, "result": {"results": "all"}}),
    ];
    for a in answers {
        let msg = Message::parse(&a.to_string()).expect("json-rpc");
        p.server.handle_message(p.now, msg);
    }
    assert!(p.server.channels().is_empty());
}

/// A pair whose server has sent one `inference/request` without `stream`, and its id.
fn asked_without_stream() -> (Pair, u64) {
    let mut p = inference_pair();
    let asked = p
        .server
        .request("inference/request", ask(false))
        .expect("granted");
    p.collect();
    (p, asked)
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

#[test]
fn s11_4_the_hosts_chunks_reach_the_streaming_request_before_its_response() {
    let mut p = inference_pair();
    let asked = p
        .server
        .request("inference/request", ask(true))
        .expect("granted");
    p.drive();
    let id = handed_inference(&p);
    p.host.inference_chunk(&id, "Hel").expect("streamed");
    p.host.inference_chunk(&id, "lo").expect("streamed");
    let result = json!({ "content": "Hello", "finishReason": "end_turn" });
    p.host.answer(id, Ok(result.clone())).expect("handed out");
    let from = p.server_out.len();
    p.drive();
    let got: Vec<(u64, Option<String>)> = p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::InferenceChunk { id, chunk } => Some((*id, Some(chunk.delta.clone()))),
            ServerOutput::Response { id, outcome } => {
                assert_eq!(outcome, &Ok(result.clone()));
                Some((*id, None))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (asked, Some("Hel".into())),
            (asked, Some("lo".into())),
            (asked, None)
        ]
    );
    assert!(server_diagnostics(&p, from).is_empty());
    // Answered: a chunk after it has no stream to go to.
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk",
               "params": { "requestId": asked, "index": 2, "delta": "!" }}),
    );
    assert!(matches!(
        server_diagnostics(&p, from)[..],
        [ServerDiagnostic::UnknownInferenceChunk { .. }]
    ));
}

#[test]
fn s11_4_a_chunk_for_no_streaming_request_or_unreadable_is_reported() {
    let (mut p, asked) = asked_without_stream();
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk",
               "params": { "requestId": asked, "index": 0, "delta": "x" }}),
    );
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk", "params": { "index": "0" }}),
    );
    let d = server_diagnostics(&p, from);
    assert!(
        matches!(
            d[..],
            [
                ServerDiagnostic::UnknownInferenceChunk { .. },
                ServerDiagnostic::InvalidNotification { .. }
            ]
        ),
        "{d:?}"
    );
    assert!(!p.server_out[from..].iter().any(|o| matches!(
        o,
        ServerOutput::InferenceChunk { .. } | ServerOutput::Notification(_)
    )));
}

#[test]
fn s11_3_a_malformed_inference_result_is_reported_and_still_answered() {
    let (mut p, asked) = asked_without_stream();
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": asked, "result": { "content": 7 }}),
    );
    assert!(matches!(
        server_diagnostics(&p, from)[..],
        [ServerDiagnostic::InferenceResultMalformed { .. }]
    ));
    assert!(p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::Response { id, .. } if *id == asked)));
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

#[test]
fn s5_3_every_accepted_policy_request_is_a_ready_moment_and_only_the_first_is_first() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert_eq!(ready_moments(&p), [true]);
    p.host
        .set_policy(p.now, vec!["pushEvents".into(), "channels.register".into()])
        .expect("a new policy");
    p.drive();
    assert_eq!(ready_moments(&p), [true, false]);
}

#[test]
fn s10_5_open_turns_end_when_the_connection_closes_and_nothing_is_read_after() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    p.drive();
    let from = p.server_out.len();
    p.server.handle_close(p.now);
    p.collect();
    let ended: Vec<&str> = p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Turn(TurnEvent::Ended(e)) => Some(e.inference_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ended, ["i1"]);
    assert_eq!(p.server.poll_timeout(), None);
    // A frame read after the close (a driver's mistake) is not acted on.
    server_reads(&mut p, json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert!(p.to_host.is_empty());
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

#[test]
fn s6_7_a_hook_whose_own_set_is_unavailable_is_answered_empty_without_running() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        split_hook_rules("sys"),
    );
    let id = p
        .host
        .before_inference(p.now, hook_params())
        .expect("an inject leaf is granted");
    p.drive();
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].accepted.is_empty() && v[0].rejected.is_empty(),
        "{:?}",
        v[0]
    );
    assert!(v[0].failure.is_none(), "{:?}", v[0]);
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Hook { id: got, .. } if *got == id)));
}

#[test]
fn s6_5_a_hook_answer_naming_no_set_claims_the_hooks_own() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        split_hook_rules("ctx"),
    );
    p.host
        .before_inference(p.now, hook_params())
        .expect("an inject leaf is granted");
    p.drive();
    answer_hook_with(
        &mut p,
        json!({"contextInjections":
            [{"namespace": "n", "position": "afterUser", "content": "fact"}]}),
    );
    p.drive();
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].accepted.len(), 1, "{:?}", v[0]);
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Diagnostic(_))));
}

#[test]
fn s5_1_initialize_carries_the_servers_instructions() {
    let mut rules = server_rules();
    rules.instructions = Some("Ask about the news.".into());
    let mut s = ServerState::new(rules);
    initialize_plain(&mut s);
    let Some(ServerOutput::Transmit(Message::Response(r))) = s.poll_output() else {
        panic!("initialize answered first")
    };
    let result = r.outcome.expect("accepted");
    assert_eq!(result["instructions"], "Ask about the news.");
    assert_eq!(result["capabilities"]["tools"], json!({}));
    assert_eq!(result["capabilities"]["experimental"]["mcpl"], manifest());
}

#[test]
fn s5_4_a_typed_host_request_whose_params_do_not_parse_reaches_no_application() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 9, "method": "context/beforeInference",
               "params": {"inferenceId": 5}}),
    );
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(9))
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(!p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
}

#[test]
fn s5_4_a_typed_host_notification_whose_params_do_not_parse_is_reported() {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "typing": {} });
    let mut p = Pair::connect(&["channels.typing"], rules);
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "channels/typing", "params": {"channelId": 5}}),
    );
    let out = &p.server_out[from..];
    assert!(
        matches!(
            out,
            [ServerOutput::Diagnostic(ServerDiagnostic::InvalidNotification { method, .. })]
                if method == "channels/typing"
        ),
        "{out:?}"
    );
}

#[test]
fn s14_3_channels_list_is_answered_with_the_channels_the_host_accepted() {
    let mut p = registering(json!([channel("a", "one")]));
    p.drive();
    let asked = p
        .host
        .request(p.now, "channels/list", json!({}), Duration::from_secs(5))
        .expect("granted");
    p.drive();
    let listed = p.host_out.iter().find_map(|o| match o {
        HostOutput::Response { id, outcome } if *id == asked => Some(outcome.clone()),
        _ => None,
    });
    assert_eq!(
        listed,
        Some(Ok(json!({ "channels": [channel("a", "one")] })))
    );
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
    // An application that lists them itself is handed the request.
    let mut rules = server_rules();
    rules.channels_list_by_application = true;
    let mut q = Pair::connect(&["pushEvents", "channels.register"], rules);
    q.host
        .request(q.now, "channels/list", json!({}), Duration::from_secs(5))
        .expect("granted");
    q.drive();
    assert!(q
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { method, .. } if method == "channels/list")));
}

#[test]
fn s6_7_s7_s10_5_removed_surfaces_are_unknown_and_never_reach_the_application() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 11, "method": "scope/elevate", "params": {}}),
    );
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "featureSets/changed", "params": {}}),
    );
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(11))
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let out = &p.server_out[from..];
    assert!(
        matches!(
            out,
            [ServerOutput::Diagnostic(ServerDiagnostic::UnknownNotification { method, mcp_only: false })]
                if method == "featureSets/changed"
        ),
        "{out:?}"
    );
}

#[test]
fn s17_4_a_fetch_is_answered_with_the_manifest_in_force_when_the_rules_say_so() {
    use crate::manifest::domains::ChangeDomain;
    let mut rules = server_rules();
    rules.answers_manifest_fetch = true;
    let mut p = Pair::connect(&["pushEvents"], rules);
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.collect();
    p.step_host(); // the announcement: the host fetches
    let fetch = last_fetch_id(&p);
    p.step_server();
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(fetch))
        .expect("answered by the state machine");
    assert_eq!(answer["result"], manifest_with_sports());
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { method, .. } if method == "mcpl/manifest")));
}
