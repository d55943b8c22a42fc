//! Adversarial property test of the sans-I/O state machines: a real `HostState` against a
//! scripted hostile server, and a real `ServerState` against a scripted hostile host. The
//! hostile peer writes JSON text (read through `Message::parse`, as a driver does; what does
//! not parse is the driver's, never the machine's) holding requests, notifications and
//! responses with every method the crate knows (`protocol::METHOD_NAMES`, the untyped MCP
//! ones, the removed ones) and mutations of them; params of the wrong type, members missing,
//! unknown or replaced by huge numbers, long strings and deep nesting; duplicate ids,
//! responses to ids never sent, answers with junk. These are interleaved with time moving
//! forward (from nothing to centuries) and application calls (policy changes, hooks,
//! turns, streams, requests, notifications, and answers to every request handed out, some
//! with garbage). Part of the cases first bring the machine to its ready state through a
//! genuine counterpart (the other machine), so the later phases are reached.
//!
//! After every step:
//! 1. no panic;
//! 2. §6.6 / JSON-RPC 2.0 §5: every request with an id the peer delivered while the
//!    connection was open gets exactly one response: at once, after the application's answer,
//!    or when time passes. A response for a request that was not delivered (or is already
//!    answered) fails the case; so do requests still unanswered at the end, once the driver
//!    answered everything it was handed. A duplicate id in flight is answered once per
//!    delivery (the second at once, `-32600`, as both machines document);
//! 3. draining `poll_output` ends within `MAX_OUTPUTS_PER_INPUT` outputs;
//! 4. (`*_state_stays_bounded`) 60,000 junk messages leave the machine's state no larger
//!    than after the first few thousand;
//! 5. `handle_timeout(now)` ends every deadline at or before `now`: `poll_timeout` does not
//!    keep returning one that is due (no busy loop).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use mcpl::capability::{advertisement_to_value, Capability, CapabilitySet};
use mcpl::jsonrpc::{Encoded, ErrorObject, Message, RequestId};
use mcpl::lifecycle::{LifecycleConfig, LifecycleDiagnostic, TurnEvent, TurnOutcome};
use mcpl::manifest::{ChangeDomain, ManifestChanged};
use mcpl::policy::Fallback;
use mcpl::session::{
    ChannelLimits, HostOutput, HostRules, HostState, ServerDiagnostic, ServerOutput, ServerRules,
    ServerState, StateError, Terminal,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// The most outputs one input may produce (invariant 3).
const MAX_OUTPUTS_PER_INPUT: usize = 1000;
/// The most `handle_timeout` rounds one tick may need (invariant 5).
const MAX_TIMEOUT_ROUNDS: usize = 64;

// ---------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------

/// Every method name the crate knows: typed, untyped MCP, removed.
fn known_methods() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = mcpl::protocol::METHOD_NAMES.to_vec();
    v.extend(mcpl::protocol::UNTYPED_MCP_METHODS);
    v.extend(mcpl::protocol::REMOVED_METHODS.iter().map(|(m, _)| *m));
    v
}

/// The methods a host receives (and a few it does not), for the hostile server; one named
/// more than once is picked that much more often.
const TO_HOST: &[&str] = &[
    "push/event",
    "push/event",
    "push/event",
    "push/event",
    "channels/register",
    "channels/incoming",
    "inference/request",
    "channels/changed",
    "channels/incoming",
    "channels/list",
    "inference/request",
    "inference/request",
    "model/info",
    "mcpl/manifestChanged",
    "ping",
    "notifications/tools/list_changed",
    "notifications/message",
    "featureSets/update",
];

/// The methods a server receives (and a few it does not), for the hostile host; one named
/// more than once is picked that much more often.
const TO_SERVER: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "featureSets/update",
    "featureSets/update",
    "context/beforeInference",
    "inference/lifecycle",
    "inference/lifecycle",
    "inference/lifecycle",
    "inference/lifecycle",
    "inference/lifecycle",
    "context/beforeInference",
    "inference/chunk",
    "tools/call",
    "tools/list",
    "state/rollback",
    "channels/open",
    "channels/close",
    "channels/outgoing/chunk",
    "channels/outgoing/complete",
    "channels/publish",
    "channels/acknowledge",
    "channels/typing",
    "channels/list",
    "mcpl/manifest",
    "ping",
    "resources/list",
    "push/event",
];

/// A method name: mostly one `to` receives, else any known one, or a mutation of one.
fn method_to(to: &'static [&'static str]) -> impl Strategy<Value = String> {
    let known = known_methods();
    let n = known.len();
    prop_oneof![
        10 => (0..to.len()).prop_map(move |i| to[i].to_owned()),
        2 => (0..n).prop_map(move |i| known_methods()[i].to_owned()),
        1 => ((0..n), 0u8..12).prop_map(move |(i, m)| mutate_method(known_methods()[i], m)),
    ]
}

/// Any method name: a known one, or a mutation of one.
fn method() -> impl Strategy<Value = String> {
    let known = known_methods();
    let n = known.len();
    prop_oneof![
        6 => (0..n).prop_map(move |i| known_methods()[i].to_owned()),
        2 => ((0..n), 0u8..12).prop_map(move |(i, m)| mutate_method(known_methods()[i], m)),
    ]
}

fn mutate_method(m: &str, how: u8) -> String {
    match how {
        0 => m.to_uppercase(),
        1 => format!("{m}/"),
        2 => format!("/{m}"),
        3 => m.replace('/', "."),
        4 => m[..m.len().saturating_sub(1)].to_owned(),
        5 => format!("notifications/{m}"),
        6 => format!("{m}/list_changed"),
        7 => String::new(),
        8 => format!(" {m}"),
        9 => format!("{m}\u{0}"),
        10 => "x".repeat(4096),
        _ => format!("rpc.{m}"),
    }
}

/// The feature sets the manifests declare, and names that are none.
const SETS: [&str; 7] = ["news", "hook", "chan", "inf", "life", "nope", ""];
const INFERENCE_IDS: [&str; 4] = ["i0", "i1", "i2", ""];
const CHANNELS: [&str; 3] = ["c0", "c1", "c:2"];

/// The manifest both sides use: every capability advertised, one feature set per area.
fn manifest(revision: &str, mask: u32) -> Value {
    let all: CapabilitySet = Capability::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c)
        .collect();
    let mut m = advertisement_to_value(all);
    m["version"] = json!("0.5");
    if !revision.is_empty() {
        m["revision"] = json!(revision);
    }
    let mut fs = Map::new();
    let mut set = |name: &str, caps: &[Capability]| {
        let uses: Vec<&str> = caps
            .iter()
            .filter(|c| all.contains(**c))
            .map(|c| c.as_str())
            .collect();
        if !uses.is_empty() {
            fs.insert(name.into(), json!({"description": name, "uses": uses}));
        }
    };
    set("news", &[Capability::PushEvents]);
    set(
        "hook",
        &[
            Capability::Observe,
            Capability::InjectSystem,
            Capability::InjectBeforeUser,
            Capability::InjectAfterUser,
        ],
    );
    set(
        "chan",
        &[
            Capability::ChannelsRegister,
            Capability::ChannelsIncoming,
            Capability::ChannelsStreaming,
            Capability::ChannelsPublish,
            Capability::ChannelsLifecycle,
            Capability::ChannelsAcknowledge,
            Capability::ChannelsTyping,
        ],
    );
    set(
        "inf",
        &[
            Capability::InferenceRequest,
            Capability::InferenceRequestStreaming,
            Capability::ModelInfo,
        ],
    );
    set("life", &[Capability::InferenceLifecycle]);
    m["featureSets"] = Value::Object(fs);
    m
}

const ALL_CAPS: u32 = (1 << 17) - 1;

fn content(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

/// Valid-looking params for `method` (picked by `k` where there is a choice).
fn template(method: &str, k: u64) -> Value {
    let i = INFERENCE_IDS[(k % 4) as usize];
    let ch = CHANNELS[(k % 3) as usize];
    // The set a method belongs to most of the time, else any (or none).
    let set = match (k % 3, method) {
        (0, _) => SETS[((k / 3) % 7) as usize],
        (_, "push/event") => "news",
        (_, "inference/request" | "model/info") => "inf",
        (_, "state/rollback") => "life",
        _ => "hook",
    };
    let phases = [
        "started",
        "started",
        "started",
        "completed",
        "completed",
        "aborted",
        "failed",
        "bogus",
    ];
    match method {
        "initialize" => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": {"version": if k % 5 == 0 { "0.4" } else { "0.5" }}}},
            "clientInfo": {"name": "hostile", "version": "1"}
        }),
        "push/event" => json!({
            "featureSet": set, "eventId": format!("e{}", k % 5),
            "timestamp": "2026-01-01T00:00:00Z",
            "payload": {"content": content("hi")}, "tags": ["a.b"]
        }),
        "context/beforeInference" => json!({
            "inferenceId": i, "conversationId": "c", "turnIndex": k,
            "userMessage": "secret"
        }),
        "inference/lifecycle" => json!({
            "inferenceId": i, "conversationId": "c", "turnIndex": k % 3,
            "phase": phases[((k / 4) % 8) as usize],
            "usage": {"inputTokens": 1}
        }),
        "inference/request" => json!({
            "featureSet": set, "stream": k % 2 == 0,
            "messages": [{"role": "user", "content": content("q")}],
            "preferences": {"maxTokens": 10}
        }),
        "inference/chunk" => json!({"requestId": k % 6, "index": k % 3, "delta": "d"}),
        "model/info" => json!({}),
        "featureSets/update" => {
            // Mostly the whole grant, else a random part of it.
            let mask = if k % 4 == 0 { k >> 2 } else { u64::MAX };
            let caps: Vec<&str> = Capability::ALL
                .iter()
                .enumerate()
                .filter(|(b, _)| mask & (1 << b) != 0)
                .map(|(_, c)| c.as_str())
                .collect();
            json!({"effectiveCapabilities": caps, "deniedCapabilities": [],
                   "disabled": if k % 8 == 1 { json!([set]) } else { json!([]) }})
        }
        "state/rollback" => json!({"featureSet": set, "checkpoint": "cp"}),
        "channels/register" => json!({"channels": [
            {"id": ch, "type": "chat", "direction": "bidirectional"}]}),
        "channels/changed" => json!({
            "added": [{"id": ch, "type": "chat", "direction": "outbound"}],
            "removed": [CHANNELS[((k + 1) % 3) as usize]],
            "updated": [{"id": CHANNELS[((k + 2) % 3) as usize], "type": "chat"}]
        }),
        "channels/list" => json!({}),
        "channels/open" => json!({"type": "chat", "address": {"to": "x"}}),
        "channels/close" => json!({"channelId": ch}),
        "channels/outgoing/chunk" => json!({
            "inferenceId": i, "channelId": ch, "index": k % 3, "delta": "d"}),
        "channels/outgoing/complete" => json!({
            "inferenceId": i, "channelId": ch, "content": content("d")}),
        "channels/publish" => json!({"channelId": ch, "content": content("p")}),
        "channels/incoming" => json!({"messages": [{
            "channelId": ch, "messageId": format!("m{}", k % 4),
            "content": content("hi"), "tags": ["t"]}]}),
        "channels/acknowledge" => json!({"channelId": ch, "messageId": "m0"}),
        "channels/typing" => json!({"channelId": ch}),
        "mcpl/manifest" => json!({}),
        "mcpl/manifestChanged" => json!({
            "revision": format!("r{}", k % 4),
            "domains": [(["capabilities", "featureSets", "tagOntology", "other"][(k % 4) as usize])]
        }),
        "tools/call" => json!({"name": "t", "arguments": {}}),
        "tools/list" => json!({}),
        _ => json!({"k": k}),
    }
}

/// A JSON value of any shape, biased towards the members the protocol reads.
fn junk() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        Just(json!(u64::MAX)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        Just(json!(0.5)),
        ".{0,6}".prop_map(Value::String),
        (0..SETS.len()).prop_map(|i| json!(SETS[i])),
        (0..INFERENCE_IDS.len()).prop_map(|i| json!(INFERENCE_IDS[i])),
        (0..CHANNELS.len()).prop_map(|i| json!(CHANNELS[i])),
        Just(json!("started")),
        Just(json!("x".repeat(70_000))),
    ];
    let key = prop_oneof![
        Just("featureSet"),
        Just("eventId"),
        Just("timestamp"),
        Just("payload"),
        Just("content"),
        Just("channels"),
        Just("messages"),
        Just("channelId"),
        Just("messageId"),
        Just("inferenceId"),
        Just("requestId"),
        Just("phase"),
        Just("index"),
        Just("delta"),
        Just("id"),
        Just("type"),
        Just("added"),
        Just("removed"),
        Just("updated"),
        Just("revision"),
        Just("stream"),
        Just("accepted"),
        Just("contextInjections"),
        Just("capabilities"),
        Just("experimental"),
        Just("mcpl"),
        Just("effectiveCapabilities"),
        Just("disabled"),
        Just("results"),
        Just("__proto__"),
    ]
    .prop_map(str::to_owned);
    leaf.prop_recursive(4, 32, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `depth` nested arrays (within what the JSON parser reads: 128).
fn deep(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

/// How the params of a hostile message are made.
#[derive(Debug, Clone)]
enum Params {
    Absent,
    Null,
    Junk(Value),
    /// The method's template, mutated: 0 as is, 1 a member dropped, 2 a member made junk,
    /// 3 an unknown member added, 4 a member a huge number, 5 all members null, 6 deep.
    Template(u64, u8, usize, Value),
    Deep(usize),
    Array(Vec<Value>),
}

fn params() -> impl Strategy<Value = Params> {
    prop_oneof![
        1 => Just(Params::Absent),
        1 => Just(Params::Null),
        2 => junk().prop_map(Params::Junk),
        10 => (any::<u64>(), any::<usize>(), junk())
            .prop_map(|(k, at, j)| Params::Template(k, 0, at, j)),
        5 => (any::<u64>(), 1u8..7, any::<usize>(), junk())
            .prop_map(|(k, m, at, j)| Params::Template(k, m, at, j)),
        1 => (60usize..126).prop_map(Params::Deep),
        1 => prop::collection::vec(junk(), 0..3).prop_map(Params::Array),
    ]
}

/// Params for an application call: the application's own API takes any `Value`, but only
/// structured params (or `null`) make a valid frame (JSON-RPC 2.0 §4.2); the sessions
/// write what they are given, as the peer's raw senders do.
fn app_params(method: &str, p: &Params) -> Value {
    // Nesting the parser refuses (past 128) would make the frame unreadable too.
    let p = match p {
        Params::Deep(d) => Params::Deep((*d).min(100)),
        other => other.clone(),
    };
    match make_params(method, &p) {
        Some(v @ (Value::Object(_) | Value::Array(_) | Value::Null)) => v,
        Some(other) => json!({ "value": other }),
        None => Value::Null,
    }
}

fn make_params(method: &str, p: &Params) -> Option<Value> {
    match p {
        Params::Absent => None,
        Params::Null => Some(Value::Null),
        Params::Junk(v) => Some(v.clone()),
        Params::Deep(d) => Some(json!({"payload": deep(*d)})),
        Params::Array(a) => Some(Value::Array(a.clone())),
        Params::Template(k, how, at, j) => {
            let mut t = template(method, *k);
            if let Some(obj) = t.as_object_mut() {
                let keys: Vec<String> = obj.keys().cloned().collect();
                let key = (!keys.is_empty()).then(|| keys[at % keys.len()].clone());
                match (how, key) {
                    (1, Some(key)) => {
                        obj.remove(&key);
                    }
                    (2, Some(key)) => {
                        obj.insert(key, j.clone());
                    }
                    (3, _) => {
                        obj.insert("unknownMember".into(), j.clone());
                    }
                    (4, Some(key)) => {
                        obj.insert(key, json!(u64::MAX));
                    }
                    (5, _) => obj.values_mut().for_each(|v| *v = Value::Null),
                    (6, Some(key)) => {
                        obj.insert(key, deep(100));
                    }
                    _ => {}
                }
            }
            Some(t)
        }
    }
}

/// Request ids from a small pool, so duplicates are frequent.
fn id_pool(i: u8) -> Value {
    match i % 10 {
        0 => json!(0),
        1 => json!(1),
        2 => json!(2),
        3 => json!(-1),
        4 => json!(i64::MIN),
        5 => json!(u64::MAX),
        6 => json!("a"),
        7 => json!(""),
        8 => json!("0"),
        _ => json!("x".repeat(300)),
    }
}

/// The error object of a hostile response.
fn error_value(code: i64, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": "hostile"});
    if let Some(d) = data {
        e["data"] = d;
    }
    e
}

/// How the hostile peer answers one of the machine's requests.
#[derive(Debug, Clone)]
enum Body {
    /// The answer a genuine peer gives (`k` picks a variant).
    Valid(u64),
    Junk(Value),
    Error(i64, Option<Value>),
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        4 => any::<u64>().prop_map(Body::Valid),
        2 => junk().prop_map(Body::Junk),
        1 => (prop_oneof![Just(-32601i64), Just(-32602), Just(-32000), any::<i64>()],
              prop::option::of(junk()))
            .prop_map(|(c, d)| Body::Error(c, d)),
    ]
}

/// Who a hostile response names.
#[derive(Debug, Clone)]
enum RespTo {
    /// The `k`-th request of the machine not yet answered; `again`: it stays answerable.
    Pending {
        k: usize,
        again: bool,
    },
    /// An id from the pool (mostly never sent).
    Pool(u8),
    Null,
    /// A number the machine may well have used, as a string (`"1"` is not `1`).
    StringOf(u8),
}

fn resp_to() -> impl Strategy<Value = RespTo> {
    prop_oneof![
        6 => (any::<usize>(), prop::bool::weighted(0.15))
            .prop_map(|(k, again)| RespTo::Pending { k, again }),
        1 => any::<u8>().prop_map(RespTo::Pool),
        1 => Just(RespTo::Null),
        1 => any::<u8>().prop_map(RespTo::StringOf),
    ]
}

/// A message of the hostile peer.
#[derive(Debug, Clone)]
enum Hostile {
    Request {
        id: u8,
        method: String,
        params: Params,
        extra: Option<Value>,
    },
    Notification {
        method: String,
        params: Params,
    },
    Response {
        to: RespTo,
        body: Body,
    },
    /// A whole message twice in a row (a duplicate id in flight).
    Twice {
        id: u8,
        method: String,
        params: Params,
    },
}

fn hostile(to: &'static [&'static str]) -> impl Strategy<Value = Hostile> {
    prop_oneof![
        5 => (any::<u8>(), method_to(to), params(), prop::option::weighted(0.1, junk()))
            .prop_map(|(id, method, params, extra)| Hostile::Request { id, method, params, extra }),
        4 => (method_to(to), params())
            .prop_map(|(method, params)| Hostile::Notification { method, params }),
        4 => (resp_to(), body()).prop_map(|(to, body)| Hostile::Response { to, body }),
        1 => (any::<u8>(), method_to(to), params())
            .prop_map(|(id, method, params)| Hostile::Twice { id, method, params }),
    ]
}

/// How far time moves.
#[derive(Debug, Clone)]
enum Tick {
    Millis(u64),
    Secs(u64),
    /// To the machine's next deadline exactly.
    ToDeadline,
    /// Years.
    Years(u64),
}

fn tick() -> impl Strategy<Value = Tick> {
    prop_oneof![
        3 => (0u64..2000).prop_map(Tick::Millis),
        3 => (0u64..700).prop_map(Tick::Secs),
        3 => Just(Tick::ToDeadline),
        1 => (1u64..300).prop_map(Tick::Years),
    ]
}

/// `ms` milliseconds; `u64::MAX` is `Duration::MAX` ("for ever").
fn millis(ms: u64) -> Duration {
    if ms == u64::MAX {
        Duration::MAX
    } else {
        Duration::from_millis(ms)
    }
}

fn advance(now: Instant, t: &Tick, deadline: Option<Instant>) -> Instant {
    match t {
        Tick::Millis(ms) => now + Duration::from_millis(*ms),
        Tick::Secs(s) => now + Duration::from_secs(*s),
        Tick::ToDeadline => deadline.map_or(now, |d| d.max(now)),
        Tick::Years(y) => now + Duration::from_secs(y * 365 * 24 * 3600),
    }
}

fn capability_patterns(mask: u32) -> Vec<String> {
    let mut v: Vec<String> = Capability::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c.as_str().to_owned())
        .collect();
    if mask & (1 << 20) != 0 {
        v.push("channels.*".into());
    }
    if mask & (1 << 21) != 0 {
        v.push("not a pattern!*".into());
    }
    v
}

// ---------------------------------------------------------------------------------------
// The ledger of requests delivered to a machine (invariant 2)
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Ledger {
    /// Deliveries per id not yet answered.
    owed: HashMap<RequestId, usize>,
    /// Requests handed out to the application and not yet answered by it, in order.
    handed: Vec<RequestId>,
}

impl Ledger {
    fn delivered(&mut self, id: RequestId) {
        *self.owed.entry(id).or_default() += 1;
    }

    fn responded(&mut self, id: Option<RequestId>, frame: &str) -> Result<(), TestCaseError> {
        let Some(id) = id else {
            return Err(TestCaseError::fail(format!(
                "a response with a null id: {frame}"
            )));
        };
        match self.owed.get_mut(&id) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    self.owed.remove(&id);
                }
                Ok(())
            }
            _ => Err(TestCaseError::fail(format!(
                "a response to {id} that was never delivered or is answered already: {frame}"
            ))),
        }
    }

    fn handed_out(&mut self, id: &RequestId) -> Result<(), TestCaseError> {
        let owed = self.owed.get(id).copied().unwrap_or(0);
        let handed = self.handed.iter().filter(|h| *h == id).count();
        prop_assert!(
            handed < owed,
            "request {id} handed out {} times for {owed} unanswered deliveries",
            handed + 1
        );
        self.handed.push(id.clone());
        Ok(())
    }

    /// The host cancelled request `id` (MCP `notifications/cancelled`): only one handed out
    /// and not yet answered may be, and the machine has answered it (`-32800`, counted by
    /// [`Self::responded`]): the application no longer does.
    fn cancelled(&mut self, id: &RequestId) -> Result<(), TestCaseError> {
        let Some(i) = self.handed.iter().position(|h| h == id) else {
            return Err(TestCaseError::fail(format!(
                "request {id} cancelled, but it is not handed out"
            )));
        };
        self.handed.remove(i);
        Ok(())
    }

    /// A `notifications/cancelled` naming the `k`-th request handed out (any id when none
    /// is).
    fn cancel_text(&self, k: usize) -> String {
        let id = match self.handed.len() {
            0 => json!(k),
            n => self.handed[k % n].to_value(),
        };
        request_text(
            None,
            "notifications/cancelled",
            Some(json!({ "requestId": id })),
            None,
        )
    }

    fn unanswered(&self) -> Vec<(&RequestId, &usize)> {
        self.owed.iter().collect()
    }
}

fn text_of(v: &Value) -> String {
    serde_json::to_string(v).expect("a Value serializes")
}

/// The text of a hostile request or notification (`id` `None`: a notification).
fn request_text(
    id: Option<&Value>,
    method: &str,
    params: Option<Value>,
    extra: Option<Value>,
) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        m.insert("id".into(), id.clone());
    }
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    if let Some(e) = extra {
        m.insert("unknown".into(), e);
    }
    text_of(&Value::Object(m))
}

fn response_text(id: &Value, body: Result<Value, Value>) -> String {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    m.insert("id".into(), id.clone());
    match body {
        Ok(r) => m.insert("result".into(), r),
        Err(e) => m.insert("error".into(), e),
    };
    text_of(&Value::Object(m))
}

// ---------------------------------------------------------------------------------------
// Host against a hostile server
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum HostCall {
    SetPolicy(u32),
    BeforeInference(Params),
    StartTurn(u8, u64),
    EndTurn(u8, u8, Option<Value>),
    StartStream(u8),
    StreamChunk(u8, u8),
    StreamComplete(u8, u8),
    EndStream(u8),
    Request(String, Params, u64),
    Notify(String, Params),
    Disable(Vec<String>),
    Refresh,
    /// Answers the `k`-th request handed out: 0 a valid result, 1 junk, 2 an error, 3 an id
    /// never handed out.
    Answer(usize, u8, Value),
    InferenceChunk(usize),
    EventRoom(usize),
    Ontology(u8, bool),
    /// The connection ends (`HostState::handle_close`).
    Close,
}

fn host_call() -> impl Strategy<Value = HostCall> {
    prop_oneof![
        2 => any::<u32>().prop_map(HostCall::SetPolicy),
        2 => params().prop_map(HostCall::BeforeInference),
        2 => (any::<u8>(), any::<u64>()).prop_map(|(i, t)| HostCall::StartTurn(i, t)),
        2 => (any::<u8>(), any::<u8>(), prop::option::of(junk()))
            .prop_map(|(i, t, u)| HostCall::EndTurn(i, t, u)),
        1 => any::<u8>().prop_map(HostCall::StartStream),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(i, c)| HostCall::StreamChunk(i, c)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(i, c)| HostCall::StreamComplete(i, c)),
        1 => any::<u8>().prop_map(HostCall::EndStream),
        2 => (method(), params(), prop_oneof![4 => 0u64..20_000, 1 => Just(u64::MAX)])
            .prop_map(|(m, p, t)| HostCall::Request(m, p, t)),
        1 => (method(), params()).prop_map(|(m, p)| HostCall::Notify(m, p)),
        1 => prop::collection::vec((0..SETS.len()).prop_map(|i| SETS[i].to_owned()), 0..3)
            .prop_map(HostCall::Disable),
        1 => Just(HostCall::Refresh),
        5 => (any::<usize>(), 0u8..4, junk()).prop_map(|(k, h, j)| HostCall::Answer(k, h, j)),
        1 => any::<usize>().prop_map(HostCall::InferenceChunk),
        1 => prop_oneof![Just(0usize), Just(1), Just(usize::MAX)].prop_map(HostCall::EventRoom),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(s, a)| HostCall::Ontology(s, a)),
        1 => Just(HostCall::Close),
    ]
}

#[derive(Debug, Clone)]
enum HostStep {
    Msg(Hostile),
    Tick(Tick),
    Call(HostCall),
    /// The server cancels the `k`-th request handed out (any id when none is).
    Cancel(usize),
}

fn host_step() -> impl Strategy<Value = HostStep> {
    prop_oneof![
        6 => hostile(TO_HOST).prop_map(HostStep::Msg),
        2 => tick().prop_map(HostStep::Tick),
        4 => host_call().prop_map(HostStep::Call),
        1 => any::<usize>().prop_map(HostStep::Cancel),
    ]
}

/// How the host is configured, and how far a genuine server brings it first.
#[derive(Debug, Clone)]
struct HostSetup {
    policy: u32,
    /// 0: `start` not called; 1: started, hostile from the first answer; 2: connected
    /// through a genuine `ServerState`.
    phase: u8,
    /// 0: defaults; 1: small bounds; 3: small windows; 4: timeouts `Duration::MAX`;
    /// 5: 1 ms timeouts (the least `HostRules` takes).
    rules: u8,
    advertised: u32,
}

fn host_setup() -> impl Strategy<Value = HostSetup> {
    (
        prop_oneof![2 => Just(ALL_CAPS), 1 => any::<u32>()],
        prop_oneof![1 => Just(0u8), 3 => Just(1u8), 6 => Just(2u8)],
        0u8..6,
        prop_oneof![2 => Just(ALL_CAPS), 1 => any::<u32>()],
    )
        .prop_map(|(policy, phase, rules, advertised)| HostSetup {
            policy,
            phase,
            rules,
            advertised,
        })
}

struct HostHarness {
    host: HostState,
    now: Instant,
    ledger: Ledger,
    /// The host's requests the hostile server read and has not answered: id and method.
    asked: Vec<(Value, String)>,
    closed: bool,
    /// What the manifests of the server advertise (a mask of `Capability::ALL`).
    advertised: u32,
}

impl HostHarness {
    fn new(setup: &HostSetup) -> Result<HostHarness, TestCaseError> {
        let now = Instant::now();
        let base = HostRules::new(capability_patterns(setup.policy & !(1 << 21)));
        let rules = match setup.rules {
            0 => base,
            1 => HostRules {
                dedupe_window: 4,
                max_event_id_bytes: 8,
                max_feature_sets: 3,
                manifest_fetch_burst: 1,
                manifest_fetch_per_sec: 0.01,
                suspend_after_failures: 2,
                max_injections_per_hook: 1,
                max_pending_outputs: 2,
                ..base
            },
            3 => HostRules {
                dedupe_window: 64,
                max_pending_outputs: 16,
                channels: ChannelLimits {
                    max_channels: 32,
                    ..ChannelLimits::default()
                },
                ..base
            },
            4 => HostRules {
                initialize_timeout: Duration::MAX,
                policy_timeout: Duration::MAX,
                manifest_timeout: Duration::MAX,
                hook_timeout: Duration::MAX,
                ..base
            },
            // The shortest timeouts `HostRules::defects` takes (zero is refused).
            _ => HostRules {
                initialize_timeout: Duration::from_millis(1),
                policy_timeout: Duration::from_millis(1),
                manifest_timeout: Duration::from_millis(1),
                hook_timeout: Duration::from_millis(1),
                manifest_fetch_burst: 1000,
                manifest_fetch_per_sec: 1000.0,
                ..base
            },
        };
        let host = HostState::new(rules, now, SystemTime::UNIX_EPOCH)
            .map_err(|e| TestCaseError::fail(format!("policy: {e}")))?;
        let mut h = HostHarness {
            host,
            now,
            ledger: Ledger::default(),
            asked: Vec::new(),
            closed: false,
            advertised: setup.advertised,
        };
        if setup.phase >= 1 {
            h.host.start(now);
        }
        if setup.phase == 2 {
            h.connect_genuinely()?;
        } else {
            h.drain()?;
        }
        Ok(h)
    }

    /// A genuine `ServerState` answers the handshake and the initial policy exchange.
    fn connect_genuinely(&mut self) -> Result<(), TestCaseError> {
        let mut server = ServerState::new(
            ServerRules::new(
                json!({"name": "genuine", "version": "1"}),
                manifest("r0", self.advertised),
            )
            .unwrap(),
        );
        for _ in 0..32 {
            let mut to_server = Vec::new();
            let mut n = 0;
            while let Some(o) = self.host.poll_output() {
                n += 1;
                prop_assert!(n <= MAX_OUTPUTS_PER_INPUT);
                if let Some(text) = o.frame() {
                    to_server.push(text);
                }
                if let HostOutput::Close = o {
                    self.closed = true;
                }
            }
            if to_server.is_empty() {
                break;
            }
            for text in to_server {
                server.handle_message(self.now, Message::parse(&text).expect("host frame"));
                while let Some(o) = server.poll_output() {
                    if let Some(text) = o.frame() {
                        let m = Message::parse(&text).expect("server frame");
                        self.host.handle_message(self.now, m);
                    }
                }
            }
        }
        Ok(())
    }

    /// Drains every output, checking each (invariants 2 and 3).
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let mut n = 0;
        while let Some(o) = self.host.poll_output() {
            n += 1;
            prop_assert!(
                n <= MAX_OUTPUTS_PER_INPUT,
                "more than {MAX_OUTPUTS_PER_INPUT} outputs for one input"
            );
            if let Some(text) = o.frame() {
                prop_assert!(!text.contains('\n'), "a frame with a newline: {text}");
                let m = Message::parse(&text)
                    .map_err(|e| TestCaseError::fail(format!("the host wrote {text}: {e}")))?;
                match m {
                    Message::Response(r) => self.ledger.responded(r.id, &text)?,
                    Message::Request(r) => self.asked.push((r.id.to_value(), r.method)),
                    Message::Notification(_) => {}
                }
                continue;
            }
            match o {
                HostOutput::Request { id, .. } => self.ledger.handed_out(&id)?,
                // Answered by the machine (its frame came just before): no longer owed by
                // the application, whether the server cancelled it or its answer's deadline
                // (`HostRules::answer_timeout`) passed.
                HostOutput::Cancelled { id } | HostOutput::AnswerTimedOut { id } => {
                    self.ledger.cancelled(&id)?
                }
                HostOutput::Close => self.closed = true,
                _ => {}
            }
        }
        Ok(())
    }

    /// The server's `notifications/cancelled` for the `k`-th request handed out.
    fn cancel(&mut self, k: usize) -> Result<(), TestCaseError> {
        let text = self.ledger.cancel_text(k);
        self.deliver(&text)
    }

    /// Delivers one text the hostile server wrote; what does not parse is the driver's.
    fn deliver(&mut self, text: &str) -> Result<(), TestCaseError> {
        let Ok(m) = Message::parse(text) else {
            return Ok(());
        };
        if let (Message::Request(r), false) = (&m, self.closed) {
            self.ledger.delivered(r.id.clone());
        }
        self.host.handle_message(self.now, m);
        self.drain()
    }

    /// The answer a genuine server gives to the host's `method`.
    fn valid_answer(&self, method: &str, k: u64) -> Value {
        match method {
            "initialize" => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": if k % 7 == 0 { json!({"tools": {}}) } else {
                    json!({"experimental": {"mcpl": manifest("r0", self.advertised)}})
                },
                "serverInfo": {"name": "hostile", "version": "1"}
            }),
            "featureSets/update" => match k % 4 {
                0 | 1 => json!({"accepted": true}),
                2 => json!({"accepted": false, "fallback": "mcp-only"}),
                _ => json!({"accepted": false, "fallback": "close"}),
            },
            "mcpl/manifest" => match k % 3 {
                0 => manifest(&format!("r{}", k % 5), self.advertised),
                1 => manifest(&format!("r{}", k % 5), k as u32),
                _ => json!({"version": "0.5", "featureSets": "broken"}),
            },
            "context/beforeInference" => json!({
                "featureSet": (["hook", "news", "nope"][(k % 3) as usize]),
                "contextInjections": [{
                    "namespace": "n",
                    "position": (["system", "beforeUser", "afterUser", "nowhere"][(k % 4) as usize]),
                    "content": content("x")
                }]
            }),
            _ => json!({}),
        }
    }

    fn hostile(&mut self, h: &Hostile) -> Result<(), TestCaseError> {
        let mut asked = std::mem::take(&mut self.asked);
        let frames = hostile_frames(h, &mut asked, |m, k| self.valid_answer(m, k), |_, _| {});
        self.asked = asked;
        frames.iter().try_for_each(|f| self.deliver(f))
    }

    /// Moves time and fires every deadline due (invariant 5).
    fn tick(&mut self, t: &Tick) -> Result<(), TestCaseError> {
        self.now = advance(self.now, t, self.host.poll_timeout());
        self.fire()
    }

    fn fire(&mut self) -> Result<(), TestCaseError> {
        let mut rounds = 0;
        while let Some(d) = self.host.poll_timeout() {
            if d > self.now {
                break;
            }
            rounds += 1;
            prop_assert!(
                rounds <= MAX_TIMEOUT_ROUNDS,
                "poll_timeout keeps returning a due deadline ({:?} before now)",
                self.now - d
            );
            self.host.handle_timeout(self.now);
            self.drain()?;
        }
        Ok(())
    }

    fn call(&mut self, c: &HostCall) -> Result<(), TestCaseError> {
        let now = self.now;
        let h = &mut self.host;
        match c {
            HostCall::SetPolicy(mask) => drop(h.set_policy(now, capability_patterns(*mask))),
            HostCall::BeforeInference(p) => {
                let p = app_params("context/beforeInference", p);
                let _ = h.before_inference(now, p);
            }
            HostCall::StartTurn(i, t) => {
                let i = INFERENCE_IDS[(*i % 4) as usize];
                drop(h.start_turn(i, "c", *t));
            }
            HostCall::EndTurn(i, t, usage) => {
                let i = INFERENCE_IDS[(*i % 4) as usize];
                let t =
                    [Terminal::Completed, Terminal::Aborted, Terminal::Failed][(*t % 3) as usize];
                drop(h.end_turn(i, t, usage.clone()));
            }
            HostCall::StartStream(i) => {
                drop(h.start_stream(INFERENCE_IDS[(*i % 4) as usize], Some("c")));
            }
            HostCall::StreamChunk(i, c) => drop(h.stream_chunk(
                INFERENCE_IDS[(*i % 4) as usize],
                CHANNELS[(*c % 3) as usize],
                "delta",
            )),
            HostCall::StreamComplete(i, c) => drop(h.stream_complete(
                INFERENCE_IDS[(*i % 4) as usize],
                CHANNELS[(*c % 3) as usize],
            )),
            HostCall::EndStream(i) => drop(h.end_stream(INFERENCE_IDS[(*i % 4) as usize])),
            HostCall::Request(m, p, t) => {
                let p = app_params(m, p);
                drop(h.request(now, m, p, millis(*t)));
            }
            HostCall::Notify(m, p) => {
                let p = app_params(m, p);
                drop(h.notify(m, p));
            }
            HostCall::Disable(sets) => drop(h.disable_by_notification(sets)),
            HostCall::Refresh => drop(h.refresh_manifest(now)),
            HostCall::Close => {
                h.handle_close(now);
                self.closed = true;
                prop_assert_eq!(h.poll_timeout(), None, "a deadline after close");
            }
            HostCall::Answer(k, how, j) => return self.answer(*k, *how, j.clone()),
            HostCall::InferenceChunk(k) => {
                if !self.ledger.handed.is_empty() {
                    let id = self.ledger.handed[k % self.ledger.handed.len()].clone();
                    drop(h.inference_chunk(now, &id, "chunk"));
                }
            }
            HostCall::EventRoom(n) => h.set_event_room(*n),
            HostCall::Ontology(s, accept) => {
                let s = SETS[(*s % 7) as usize];
                if *accept {
                    // Both calls: the deprecated one keeps its meaning.
                    #[allow(deprecated)]
                    drop(h.accept_ontology(s));
                    let digest = h.ontology_digest(s).unwrap_or_default();
                    drop(h.accept_reviewed_ontology(s, &digest));
                } else {
                    drop(h.revoke_ontology(s));
                }
            }
        }
        self.drain()
    }

    /// Answers the `k`-th request handed out (`how`: 0 valid, 1 junk, 2 error, 3 unknown id).
    fn answer(&mut self, k: usize, how: u8, junk: Value) -> Result<(), TestCaseError> {
        if how == 3 || self.ledger.handed.is_empty() {
            let r = self
                .host
                .answer(RequestId::from("never handed out"), Ok(json!({})));
            prop_assert!(r.is_err(), "an answer to an id never handed out was taken");
            return self.drain();
        }
        let id = self.ledger.handed.remove(k % self.ledger.handed.len());
        let outcome = match how {
            0 => Ok(json!({"content": content("answer"), "model": "m", "finishReason": "stop"})),
            1 => Ok(junk),
            _ => Err(ErrorObject::new(-32000, "application error")),
        };
        let r = self.host.answer(id.clone(), outcome);
        if self.closed {
            // Closed (a `Close` output, or `handle_close`): nothing is sent any more.
            prop_assert_eq!(r, Err(StateError::NotConnected));
            return self.drain();
        }
        prop_assert!(
            r.is_ok(),
            "request {id} was handed out but its answer was refused: {r:?}"
        );
        self.drain()
    }

    /// Answers everything still handed out, then checks every delivered request was
    /// answered (invariant 2).
    fn finish(&mut self) -> Result<(), TestCaseError> {
        while !self.ledger.handed.is_empty() {
            self.answer(0, 0, Value::Null)?;
        }
        if !self.closed {
            let open = self.ledger.unanswered();
            prop_assert!(open.is_empty(), "requests never answered: {open:?}");
        }
        Ok(())
    }
}

fn run_host(setup: &HostSetup, steps: &[HostStep]) -> Result<(), TestCaseError> {
    let mut h = HostHarness::new(setup)?;
    for s in steps {
        match s {
            HostStep::Msg(m) => h.hostile(m)?,
            HostStep::Tick(t) => h.tick(t)?,
            HostStep::Call(c) => h.call(c)?,
            HostStep::Cancel(k) => h.cancel(*k)?,
        }
    }
    h.finish()
}

// ---------------------------------------------------------------------------------------
// Server against a hostile host
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum ServerCall {
    Request(String, Params),
    Notify(String, Params),
    /// Answers the `k`-th request handed out: 0 a valid result, 1 junk, 2 an error, 3 encoded
    /// junk, 4 an id never handed out.
    Answer(usize, u8, Value),
    ManifestChanged(u32, u8),
    SetManifest(u32),
    Close,
}

fn server_call() -> impl Strategy<Value = ServerCall> {
    let to_host = prop_oneof![
        Just("push/event"),
        Just("inference/request"),
        Just("model/info"),
        Just("channels/register"),
        Just("channels/changed"),
        Just("channels/incoming"),
        Just("channels/list"),
        Just("ping"),
        Just("mcpl/manifestChanged"),
    ]
    .prop_map(str::to_owned);
    prop_oneof![
        20 => (prop_oneof![3 => to_host.clone(), 1 => method()], params())
            .prop_map(|(m, p)| ServerCall::Request(m, p)),
        5 => (prop_oneof![3 => to_host, 1 => method()], params())
            .prop_map(|(m, p)| ServerCall::Notify(m, p)),
        30 => (any::<usize>(), 0u8..5, junk()).prop_map(|(k, h, j)| ServerCall::Answer(k, h, j)),
        5 => (any::<u32>(), any::<u8>()).prop_map(|(m, d)| ServerCall::ManifestChanged(m, d)),
        5 => any::<u32>().prop_map(ServerCall::SetManifest),
        1 => Just(ServerCall::Close),
    ]
}

#[derive(Debug, Clone)]
enum ServerStep {
    Msg(Hostile),
    Tick(Tick),
    Call(ServerCall),
    /// The host cancels the `k`-th request handed out (any id when none is).
    Cancel(usize),
}

fn server_step() -> impl Strategy<Value = ServerStep> {
    prop_oneof![
        7 => hostile(TO_SERVER).prop_map(ServerStep::Msg),
        2 => tick().prop_map(ServerStep::Tick),
        4 => server_call().prop_map(ServerStep::Call),
        1 => any::<usize>().prop_map(ServerStep::Cancel),
    ]
}

#[derive(Debug, Clone)]
struct ServerSetup {
    /// Bits: answers_manifest_fetch, channels_list_by_application,
    /// application_checks_params, initialize_by_application.
    flags: u8,
    max_in_flight: usize,
    request_timeout: Option<u64>,
    max_pending: usize,
    /// 0 none, 1 pushEvents required with close, 2 with mcp-only.
    required: u8,
    hook_set: u8,
    /// (safety timeout in milliseconds, remembered terminals, max open turns).
    lifecycle: (u64, usize, usize),
    /// 0: hostile from the start; 1: made ready by a genuine `HostState`.
    phase: u8,
    host_policy: u32,
}

fn server_setup() -> impl Strategy<Value = ServerSetup> {
    (
        any::<u8>(),
        prop_oneof![Just(1usize), Just(3), Just(128)],
        prop_oneof![
            Just(None),
            Just(Some(0u64)),
            Just(Some(1_000)),
            Just(Some(30_000)),
            Just(Some(u64::MAX))
        ],
        prop_oneof![Just(1usize), Just(4), Just(1024)],
        prop_oneof![4 => Just(0u8), 1 => Just(1), 1 => Just(2)],
        0u8..3,
        (
            prop_oneof![Just(0u64), Just(1_000), Just(600_000), Just(u64::MAX)],
            prop_oneof![Just(0usize), Just(2), Just(4096)],
            prop_oneof![Just(1usize), Just(3), Just(1024)],
        ),
        prop_oneof![1 => Just(0u8), 3 => Just(1u8)],
        prop_oneof![2 => Just(ALL_CAPS), 1 => any::<u32>()],
    )
        .prop_map(
            |(
                flags,
                max_in_flight,
                request_timeout,
                max_pending,
                required,
                hook_set,
                lifecycle,
                phase,
                host_policy,
            )| {
                ServerSetup {
                    flags,
                    max_in_flight,
                    request_timeout,
                    max_pending,
                    required,
                    hook_set,
                    lifecycle,
                    phase,
                    host_policy,
                }
            },
        )
}

struct ServerHarness {
    server: ServerState,
    now: Instant,
    ledger: Ledger,
    /// The server's requests the hostile host read and has not answered: id and method.
    asked: Vec<(Value, String)>,
    /// Methods of the requests handed out, by id (the last one handed out under it).
    handed_methods: HashMap<RequestId, String>,
    closed: bool,
    /// The tracker's safety timeout (§10.5).
    safety: Duration,
}

impl ServerHarness {
    fn new(setup: &ServerSetup) -> Result<ServerHarness, TestCaseError> {
        let now = Instant::now();
        let mut mcp = Map::new();
        mcp.insert("tools".into(), json!({}));
        let required: CapabilitySet = [Capability::PushEvents].into_iter().collect();
        let rules = ServerRules {
            mcp_capabilities: mcp,
            answers_manifest_fetch: setup.flags & 1 != 0,
            channels_list_by_application: setup.flags & 2 != 0,
            application_checks_params: setup.flags & 4 != 0,
            initialize_by_application: setup.flags & 8 != 0,
            max_in_flight: setup.max_in_flight,
            request_timeout: setup.request_timeout.map(millis),
            max_pending: setup.max_pending,
            required: match setup.required {
                1 => Some((required, Fallback::Close)),
                2 => Some((required, Fallback::McpOnly)),
                _ => None,
            },
            hook_feature_set: match setup.hook_set {
                0 => None,
                1 => Some("hook".into()),
                _ => Some("nope".into()),
            },
            lifecycle: LifecycleConfig {
                safety_timeout: millis(setup.lifecycle.0),
                remembered_terminals: setup.lifecycle.1,
                max_open_turns: setup.lifecycle.2,
                ..LifecycleConfig::default()
            },
            ..ServerRules::new(
                json!({"name": "s", "version": "1"}),
                manifest("r0", ALL_CAPS),
            )
            .unwrap()
        };
        let mut s = ServerHarness {
            server: ServerState::new(rules),
            now,
            ledger: Ledger::default(),
            asked: Vec::new(),
            handed_methods: HashMap::new(),
            closed: false,
            safety: millis(setup.lifecycle.0),
        };
        if setup.phase == 1 {
            s.connect_genuinely(setup.host_policy)?;
        }
        Ok(s)
    }

    /// A genuine `HostState` runs the handshake and the initial policy exchange; what the
    /// server hands out meanwhile (an `initialize`) is answered genuinely.
    fn connect_genuinely(&mut self, policy: u32) -> Result<(), TestCaseError> {
        let rules = HostRules::new(capability_patterns(policy & !(1 << 21)));
        let mut host = HostState::new(rules, self.now, SystemTime::UNIX_EPOCH)
            .map_err(|e| TestCaseError::fail(format!("policy: {e}")))?;
        host.start(self.now);
        for _ in 0..32 {
            let mut to_server = Vec::new();
            while let Some(o) = host.poll_output() {
                if let Some(text) = o.frame() {
                    to_server.push(text);
                }
            }
            if to_server.is_empty() {
                break;
            }
            for text in to_server {
                self.server
                    .handle_message(self.now, Message::parse(&text).expect("host frame"));
                let mut n = 0;
                while let Some(o) = self.server.poll_output() {
                    n += 1;
                    prop_assert!(n <= MAX_OUTPUTS_PER_INPUT);
                    if let Some(text) = o.frame() {
                        host.handle_message(self.now, Message::parse(&text).expect("server frame"));
                    }
                    match o {
                        ServerOutput::Request { id, method, .. } if method == "initialize" => {
                            let r = self.server.answer(
                                id,
                                Ok(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                                          "serverInfo": {"name": "app", "version": "1"}})),
                            );
                            prop_assert!(r.is_ok());
                        }
                        ServerOutput::Request { id, .. } => {
                            let r = self.server.answer(id, Ok(Value::Object(Map::new())));
                            prop_assert!(r.is_ok(), "{:?}", r);
                        }
                        ServerOutput::Close => {
                            self.server.handle_close(self.now);
                            self.closed = true;
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        let mut n = 0;
        let mut close = false;
        let mut evicted = Vec::new();
        while let Some(o) = self.server.poll_output() {
            n += 1;
            prop_assert!(
                n <= MAX_OUTPUTS_PER_INPUT,
                "more than {MAX_OUTPUTS_PER_INPUT} outputs for one input"
            );
            if let Some(text) = o.frame() {
                prop_assert!(!text.contains('\n'), "a frame with a newline: {text}");
                let m = Message::parse(&text)
                    .map_err(|e| TestCaseError::fail(format!("the server wrote {text}: {e}")))?;
                match m {
                    Message::Response(r) => self.ledger.responded(r.id, &text)?,
                    Message::Request(r) => self.asked.push((r.id.to_value(), r.method)),
                    Message::Notification(_) => {}
                }
                continue;
            }
            match o {
                ServerOutput::Request { id, method, .. } => {
                    self.ledger.handed_out(&id)?;
                    self.handed_methods.insert(id, method);
                }
                ServerOutput::Cancelled { id, .. } => {
                    prop_assert_ne!(
                        self.handed_methods.get(&id).map(String::as_str),
                        Some("initialize"),
                        "initialize cancelled"
                    );
                    self.ledger.cancelled(&id)?;
                }
                ServerOutput::Close => close = true,
                ServerOutput::Diagnostic(ServerDiagnostic::Lifecycle(
                    LifecycleDiagnostic::OpenTurnsLimit { ended, .. },
                )) => evicted.push(ended),
                ServerOutput::Turn(TurnEvent::Ended(e)) if e.outcome == TurnOutcome::TimedOut => {
                    // §10.5: by the safety timeout only once it has passed (a century at
                    // most), or to make room, or at the close.
                    let waited = e.at.saturating_duration_since(e.started_at);
                    let century = Duration::from_secs(100 * 365 * 24 * 3600);
                    prop_assert!(
                        self.closed
                            || evicted.contains(&e.inference_id)
                            || waited >= self.safety.min(century),
                        "turn {} ended TimedOut after {waited:?} of {:?}",
                        e.inference_id,
                        self.safety
                    );
                }
                _ => {}
            }
        }
        if close && !self.closed {
            // The driver closes the connection, as `server::Server` does.
            self.closed = true;
            self.server.handle_close(self.now);
            self.drain()?;
        }
        Ok(())
    }

    /// The host's `notifications/cancelled` for the `k`-th request handed out.
    fn cancel(&mut self, k: usize) -> Result<(), TestCaseError> {
        let text = self.ledger.cancel_text(k);
        self.deliver(&text)
    }

    fn deliver(&mut self, text: &str) -> Result<(), TestCaseError> {
        let Ok(m) = Message::parse(text) else {
            return Ok(());
        };
        if let (Message::Request(r), false) = (&m, self.closed) {
            self.ledger.delivered(r.id.clone());
        }
        self.server.handle_message(self.now, m);
        self.drain()
    }

    /// The answer a genuine host gives to the server's `method`.
    fn valid_answer(method: &str, k: u64) -> Value {
        match method {
            "push/event" => json!({"accepted": k % 2 == 0}),
            "inference/request" => json!({
                "content": content("answer"), "model": "m",
                "finishReason": (["stop", "length", "bogus"][(k % 3) as usize]),
                "usage": {"inputTokens": 1, "outputTokens": 2}
            }),
            "model/info" => json!({"id": "m", "contextWindow": 1000}),
            "channels/register" | "channels/changed" => json!({"results": [
                {"id": CHANNELS[(k % 3) as usize], "accepted": k % 2 == 0}]}),
            "channels/incoming" => json!({"results": []}),
            "channels/list" => json!({"channels": []}),
            _ => json!({}),
        }
    }

    fn hostile(&mut self, h: &Hostile) -> Result<(), TestCaseError> {
        // Chunks name the server's own streamed requests now and then.
        let first = self.asked.first().map(|(id, _)| id.clone());
        let tweak = |method: &str, p: &mut Option<Value>| {
            if let (Some(Value::Object(o)), Some(id)) = (p.as_mut(), first) {
                if method == "inference/chunk" && o.contains_key("requestId") {
                    o.insert("requestId".into(), id);
                }
            }
        };
        let frames = hostile_frames(h, &mut self.asked, Self::valid_answer, tweak);
        frames.iter().try_for_each(|f| self.deliver(f))
    }

    fn tick(&mut self, t: &Tick) -> Result<(), TestCaseError> {
        self.now = advance(self.now, t, self.server.poll_timeout());
        let mut rounds = 0;
        while let Some(d) = self.server.poll_timeout() {
            if d > self.now {
                break;
            }
            rounds += 1;
            prop_assert!(
                rounds <= MAX_TIMEOUT_ROUNDS,
                "poll_timeout keeps returning a due deadline ({:?} before now)",
                self.now - d
            );
            self.server.handle_timeout(self.now);
            self.drain()?;
        }
        Ok(())
    }

    /// A genuine answer from the application for a request of `method`.
    fn application_answer(method: &str) -> Value {
        match method {
            "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {},
                                   "serverInfo": {"name": "app", "version": "1"}}),
            "context/beforeInference" => json!({"featureSet": "hook", "contextInjections": [
                {"namespace": "n", "position": "system", "content": content("x")}]}),
            "tools/call" => json!({"content": content("ok")}),
            "state/rollback" => json!({"checkpoint": "cp", "success": true}),
            _ => json!({}),
        }
    }

    fn answer(&mut self, k: usize, how: u8, junk: Value) -> Result<(), TestCaseError> {
        if how == 4 || self.ledger.handed.is_empty() {
            let r = self
                .server
                .answer(RequestId::from("never handed out"), Ok(json!({})));
            prop_assert!(r.is_err(), "an answer to an id never handed out was taken");
            return self.drain();
        }
        let id = self.ledger.handed.remove(k % self.ledger.handed.len());
        let method = self.handed_methods.get(&id).cloned().unwrap_or_default();
        let r = match how {
            0 => self
                .server
                .answer(id.clone(), Ok(Self::application_answer(&method))),
            1 => self.server.answer(id.clone(), Ok(junk)),
            2 => self.server.answer(
                id.clone(),
                Err(ErrorObject::new(-32000, "application error").with_data(junk)),
            ),
            _ => {
                let e = Encoded::encode(&junk).expect("a Value encodes");
                self.server.answer_encoded(id.clone(), e)
            }
        };
        if self.closed {
            // Closed: nothing waits for an answer any more.
            return self.drain();
        }
        prop_assert!(
            r.is_ok(),
            "request {id} was handed out but its answer was refused: {r:?}"
        );
        self.drain()
    }

    fn call(&mut self, c: &ServerCall) -> Result<(), TestCaseError> {
        let now = self.now;
        match c {
            ServerCall::Request(m, p) => {
                let p = app_params(m, p);
                drop(self.server.request(now, m, p));
            }
            ServerCall::Notify(m, p) => {
                let p = app_params(m, p);
                drop(self.server.notify(m, p));
            }
            ServerCall::Answer(k, how, j) => return self.answer(*k, *how, j.clone()),
            ServerCall::ManifestChanged(mask, d) => {
                let domains = [
                    ChangeDomain::Capabilities,
                    ChangeDomain::FeatureSets,
                    ChangeDomain::TagOntology,
                ];
                let change = ManifestChanged {
                    revision: format!("r{d}"),
                    domains: vec![domains[(*d % 3) as usize]],
                };
                self.server
                    .manifest_changed(manifest(&format!("r{d}"), *mask), change);
            }
            ServerCall::SetManifest(mask) => self.server.set_manifest(manifest("r9", *mask)),
            ServerCall::Close => {
                self.server.handle_close(now);
                self.closed = true;
            }
        }
        self.drain()
    }

    fn finish(&mut self) -> Result<(), TestCaseError> {
        while !self.ledger.handed.is_empty() {
            self.answer(0, 0, Value::Null)?;
        }
        if !self.closed {
            let open = self.ledger.unanswered();
            prop_assert!(open.is_empty(), "requests never answered: {open:?}");
        }
        Ok(())
    }
}

fn run_server(setup: &ServerSetup, steps: &[ServerStep]) -> Result<(), TestCaseError> {
    let mut s = ServerHarness::new(setup)?;
    for step in steps {
        match step {
            ServerStep::Msg(m) => s.hostile(m)?,
            ServerStep::Tick(t) => s.tick(t)?,
            ServerStep::Call(c) => s.call(c)?,
            ServerStep::Cancel(k) => s.cancel(*k)?,
        }
    }
    s.finish()
}

proptest! {
    // 256 cases (`PROPTEST_CASES` raises it for a longer hunt).
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn host_state_survives_a_hostile_server(
        setup in host_setup(),
        steps in prop::collection::vec(host_step(), 1..60),
    ) {
        run_host(&setup, &steps)?;
    }

    #[test]
    fn server_state_survives_a_hostile_host(
        setup in server_setup(),
        steps in prop::collection::vec(server_step(), 1..60),
    ) {
        run_server(&setup, &steps)?;
    }
}

// ---------------------------------------------------------------------------------------
// Invariant 4: memory stays bounded under a long stream of junk
// ---------------------------------------------------------------------------------------

/// How many junk messages the bound tests send.
const FLOOD: usize = 60_000;
/// When the size of the state is first measured: past every bound the flood can fill.
const WARM: usize = 6_000;

/// The size of a machine's state, by its `Debug` text (the public API has no other view of
/// its collections): what grows with what it holds.
fn size_of(state: &impl std::fmt::Debug) -> usize {
    format!("{state:?}").len()
}
/// The frames one hostile step `h` writes, in order. `asked` holds the requests the machine
/// sent, which a response step answers (and takes, unless it answers again); `answer` makes
/// a valid answer for a method; `tweak` adjusts a notification's params.
fn hostile_frames(
    h: &Hostile,
    asked: &mut Vec<(Value, String)>,
    answer: impl Fn(&str, u64) -> Value,
    tweak: impl FnOnce(&str, &mut Option<Value>),
) -> Vec<String> {
    match h {
        Hostile::Request {
            id,
            method,
            params,
            extra,
        } => vec![request_text(
            Some(&id_pool(*id)),
            method,
            make_params(method, params),
            extra.clone(),
        )],
        Hostile::Twice { id, method, params } => {
            let text = request_text(
                Some(&id_pool(*id)),
                method,
                make_params(method, params),
                None,
            );
            vec![text.clone(), text]
        }
        Hostile::Notification { method, params } => {
            let mut p = make_params(method, params);
            tweak(method, &mut p);
            vec![request_text(None, method, p, None)]
        }
        Hostile::Response { to, body } => {
            let (id, method) = match to {
                RespTo::Pending { k, again } => {
                    if asked.is_empty() {
                        return Vec::new();
                    }
                    let i = k % asked.len();
                    if *again {
                        asked[i].clone()
                    } else {
                        asked.remove(i)
                    }
                }
                RespTo::Pool(i) => (id_pool(*i), String::new()),
                RespTo::Null => (Value::Null, String::new()),
                RespTo::StringOf(i) => (json!(i.to_string()), String::new()),
            };
            let body = match body {
                Body::Valid(k) => Ok(answer(&method, *k)),
                Body::Junk(v) => Ok(v.clone()),
                Body::Error(c, d) => Err(error_value(*c, d.clone())),
            };
            vec![response_text(&id, body)]
        }
    }
}

/// Every output drained, each frame read; the requests the machine sent, by id and method.
fn drain_host(host: &mut HostState, asked: &mut Vec<(Value, String)>) -> usize {
    let mut n = 0;
    while let Some(o) = host.poll_output() {
        n += 1;
        assert!(n <= MAX_OUTPUTS_PER_INPUT);
        if let Some(Ok(Message::Request(r))) = o.frame().map(|t| Message::parse(&t)) {
            asked.push((r.id.to_value(), r.method));
        }
    }
    n
}

/// The flood a hostile server sends the host: `i` makes every id, event, channel and
/// message new, so nothing is deduplicated into nothing.
fn host_flood_message(i: usize) -> String {
    let k = i as u64;
    match i % 9 {
        0 => request_text(
            Some(&json!(i)),
            "push/event",
            Some(json!({
            "featureSet": "news", "eventId": format!("e{i}"),
            "timestamp": "2026-01-01T00:00:00Z", "payload": {"content": content("hi")}})),
            None,
        ),
        1 => request_text(
            Some(&json!(i)),
            "channels/register",
            Some(json!({"channels": [
            {"id": format!("c{i}"), "type": "chat", "direction": "bidirectional"}]})),
            None,
        ),
        2 => request_text(
            Some(&json!(i)),
            "channels/incoming",
            Some(json!({"messages": [{
            "channelId": format!("c{}", i - 1), "messageId": format!("m{i}"),
            "content": content("hi")}]})),
            None,
        ),
        // Handed out and never answered by the application.
        3 => request_text(
            Some(&json!(format!("inf{i}"))),
            "inference/request",
            Some(template("inference/request", k * 3 + 1)),
            None,
        ),
        4 => response_text(&json!(i + 1_000_000), Ok(json!({"junk": i}))),
        5 => request_text(None, &format!("x/unknown{i}"), Some(json!({"i": i})), None),
        6 => request_text(
            None,
            "mcpl/manifestChanged",
            Some(json!({
            "revision": format!("r{i}"), "domains": ["featureSets"]})),
            None,
        ),
        7 => request_text(
            None,
            "channels/changed",
            Some(json!({
            "removed": [format!("never{i}")]})),
            None,
        ),
        _ => request_text(Some(&json!(format!("p{i}"))), "ping", None, None),
    }
}

#[test]
fn host_state_stays_bounded_under_a_flood() {
    let setup = HostSetup {
        policy: ALL_CAPS,
        phase: 2,
        rules: 3,
        advertised: ALL_CAPS,
    };
    let mut h = HostHarness::new(&setup).expect("connects");
    assert!(h.host.is_ready());
    let mut asked = std::mem::take(&mut h.asked);
    let (mut host, mut now) = (h.host, h.now);
    let mut warm = 0;
    for i in 0..FLOOD {
        if i % 100 == 0 {
            // Time passes: fetches are answered or time out, the rate limit refills.
            now += Duration::from_secs(7);
            while host.poll_timeout().is_some_and(|d| d <= now) {
                host.handle_timeout(now);
                drain_host(&mut host, &mut asked);
            }
        }
        let m = Message::parse(&host_flood_message(i)).expect("valid");
        host.handle_message(now, m);
        drain_host(&mut host, &mut asked);
        // Every manifest fetch gets a new revision of the manifest.
        for (id, method) in std::mem::take(&mut asked) {
            let answer = match method.as_str() {
                "mcpl/manifest" => manifest(&format!("r{i}"), ALL_CAPS),
                "featureSets/update" => json!({"accepted": true}),
                _ => json!({}),
            };
            let m = Message::parse(&response_text(&id, Ok(answer))).expect("valid");
            host.handle_message(now, m);
            drain_host(&mut host, &mut asked);
        }
        if i == WARM {
            warm = size_of(&host);
        }
    }
    let end = size_of(&host);
    assert!(
        end <= warm + warm / 2,
        "the host's state grew from {warm} to {end} bytes of Debug text"
    );
}

/// The flood a hostile host sends the server.
fn server_flood_message(i: usize) -> String {
    match i % 9 {
        0 => request_text(
            None,
            "inference/lifecycle",
            Some(json!({
            "inferenceId": format!("i{i}"), "phase": "started"})),
            None,
        ),
        1 => request_text(
            None,
            "inference/lifecycle",
            Some(json!({
            "inferenceId": format!("o{i}"), "phase": "completed"})),
            None,
        ),
        // Handed out and never answered by the application.
        2 => request_text(
            Some(&json!(i)),
            "tools/call",
            Some(json!({"name": "t"})),
            None,
        ),
        3 => request_text(
            None,
            "featureSets/update",
            Some(json!({
            "disabled": [format!("x{i}")]})),
            None,
        ),
        4 => request_text(
            None,
            "inference/chunk",
            Some(json!({
            "requestId": i, "index": 0, "delta": "d"})),
            None,
        ),
        5 => response_text(&json!(i + 1_000_000), Ok(json!({"junk": i}))),
        6 => request_text(None, &format!("x/unknown{i}"), Some(json!({"i": i})), None),
        7 => request_text(
            Some(&json!(format!("fs{i}"))),
            "featureSets/update",
            Some(template("featureSets/update", 1)),
            None,
        ),
        _ => request_text(Some(&json!(format!("p{i}"))), "ping", None, None),
    }
}

#[test]
fn server_state_stays_bounded_under_a_flood() {
    let setup = ServerSetup {
        flags: 0,
        max_in_flight: 8,
        request_timeout: None,
        max_pending: 8,
        required: 0,
        hook_set: 0,
        lifecycle: (600_000, 32, 16),
        phase: 1,
        host_policy: ALL_CAPS,
    };
    let s = ServerHarness::new(&setup).expect("connects");
    assert!(s.server.is_ready());
    let (mut server, mut now) = (s.server, s.now);
    let mut warm = 0;
    for i in 0..FLOOD {
        if i % 10 == 0 {
            // The application's own requests, never answered (no timeout: only the bound).
            let _ = server.request(now, "push/event", template("push/event", 1));
            now += Duration::from_secs(1);
            server.handle_timeout(now);
        }
        let m = Message::parse(&server_flood_message(i)).expect("valid");
        server.handle_message(now, m);
        let mut n = 0;
        while server.poll_output().is_some() {
            n += 1;
            assert!(n <= MAX_OUTPUTS_PER_INPUT);
        }
        if i == WARM {
            warm = size_of(&server);
        }
    }
    let end = size_of(&server);
    assert!(
        end <= warm + warm / 2,
        "the server's state grew from {warm} to {end} bytes of Debug text"
    );
}
