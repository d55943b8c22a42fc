//! The capability universe, the scripted server's messages and the expected hook outcome
//! shared by the model-based host tests: `model_host.rs` (against `HostSession`) and
//! `model_host_state.rs` (against `HostState`). No tokio: both the runtime-free and the full
//! build use it.
#![allow(dead_code)] // each test file uses a different part

use mcpl::capability::{Capability, CapabilitySet};
use mcpl::session::HostEvent;
use serde_json::{json, Value};

/// The capabilities the scripts play with: the seven paths a host receives traffic for.
pub const UNIVERSE: [Capability; 7] = [
    Capability::PushEvents,
    Capability::ChannelsRegister,
    Capability::ChannelsIncoming,
    Capability::Observe,
    Capability::InjectSystem,
    Capability::InjectBeforeUser,
    Capability::InjectAfterUser,
];

/// The injection positions and the inject leaf each needs (§10.1).
pub const INJECT: [(&str, Capability); 3] = [
    ("system", Capability::InjectSystem),
    ("beforeUser", Capability::InjectBeforeUser),
    ("afterUser", Capability::InjectAfterUser),
];

/// The capabilities with which `context/beforeInference` is sent (§10.1).
pub const HOOK_CAPS: [Capability; 4] = [
    Capability::Observe,
    Capability::InjectSystem,
    Capability::InjectBeforeUser,
    Capability::InjectAfterUser,
];

/// The members of [`UNIVERSE`] whose bit is set in `mask`.
pub fn set_of(mask: u8) -> CapabilitySet {
    UNIVERSE
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// A host policy naming exactly `p`.
pub fn patterns(p: CapabilitySet) -> Vec<String> {
    p.sorted_paths().into_iter().map(str::to_owned).collect()
}

/// The manifest advertising exactly `a` (within the universe), with one feature set per
/// advertised area so `uses` never names an unadvertised path.
pub fn manifest(a: CapabilitySet) -> Value {
    let mut m = mcpl::capability::advertisement_to_value(a);
    m["version"] = json!("0.5");
    let mut fs = serde_json::Map::new();
    if a.contains(Capability::PushEvents) {
        fs.insert(
            "alerts".into(),
            json!({"description": "Alerts", "uses": ["pushEvents"]}),
        );
    }
    // One hook set per advertised inject leaf: an answer claims one of them, and only
    // injections at that set's position are declared (§6.4 rule 2).
    for (pos, leaf) in INJECT {
        if a.contains(leaf) {
            fs.insert(
                format!("hook.{pos}"),
                json!({"description": "Hook", "uses": [leaf.as_str()]}),
            );
        }
    }
    m["featureSets"] = Value::Object(fs);
    m
}

/// The capability set a policy Request tells (`effectiveCapabilities` of its params).
pub fn effective_of(params: &Value) -> CapabilitySet {
    params["effectiveCapabilities"]
        .as_array()
        .expect("effectiveCapabilities")
        .iter()
        .map(|p| {
            Capability::ALL
                .into_iter()
                .find(|c| Some(c.as_str()) == p.as_str())
                .expect("a known path")
        })
        .collect()
}

/// `push/event` params for event `event_id` of the `alerts` set.
pub fn push_params(event_id: &str) -> Value {
    json!({"featureSet": "alerts", "eventId": event_id,
           "timestamp": "2026-01-01T00:00:00Z",
           "payload": {"content": [{"type": "text", "text": "hi"}]}})
}

/// `channels/register` params for one bidirectional channel.
pub fn register_params(channel: &str) -> Value {
    json!({"channels": [{"id": channel, "type": "chat", "direction": "bidirectional"}]})
}

/// `channels/incoming` params carrying one message on `channel`.
pub fn incoming_params(channel: &str, message_id: &str) -> Value {
    json!({"messages": [{"channelId": channel, "messageId": message_id,
                         "content": [{"type": "text", "text": "hi"}]}]})
}

/// `context/beforeInference` params, with a user message only `observe` may see.
pub fn hook_params() -> Value {
    // §10.1: `userMessage` is a string or null; an object is refused before sending.
    json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": "secret"})
}

/// The position whose hook set an answer claims: the first injection's, or `system`.
fn claimed_position(positions: &[u8]) -> usize {
    positions
        .first()
        .map(|p| usize::from(*p))
        .filter(|p| *p < INJECT.len())
        .unwrap_or(0)
}

/// A hook answer injecting at `positions` (indices into [`INJECT`], 3 = an unknown
/// position), claiming the set of the first one's position.
pub fn hook_answer(positions: &[u8]) -> Value {
    let injections: Vec<Value> = positions
        .iter()
        .map(|p| {
            let pos = INJECT.get(usize::from(*p)).map_or("sideways", |x| x.0);
            json!({"namespace": "model", "position": pos, "content": "x"})
        })
        .collect();
    let claimed = INJECT[claimed_position(positions)].0;
    json!({"featureSet": format!("hook.{claimed}"), "contextInjections": injections})
}

/// How many of [`hook_answer`]`(positions)`'s injections are accepted at each [`INJECT`]
/// position when the answer is read under `judged` (§5.4): those at the claimed set's
/// position (§6.4 rule 2), when its leaf is granted.
pub fn accepted_injections(judged: CapabilitySet, positions: &[u8]) -> [usize; 3] {
    let claimed = claimed_position(positions);
    let mut want = [0; 3];
    if judged.contains(INJECT[claimed].1) {
        want[claimed] = positions
            .iter()
            .filter(|p| usize::from(**p) == claimed)
            .count();
    }
    want
}

/// Takes the one event of `events` that `want` matches, if any; every other event must be a
/// manifest change receipt (§17.6).
pub fn take_event(
    events: impl IntoIterator<Item = HostEvent>,
    want: impl Fn(&HostEvent) -> bool,
) -> bool {
    let mut found = false;
    for e in events {
        if want(&e) {
            assert!(!found, "delivered twice: {e:?}");
            found = true;
        } else {
            assert!(
                matches!(e, HostEvent::ManifestChange(_)),
                "an event nobody asked for: {e:?}"
            );
        }
    }
    found
}

/// Whether `e` delivers push event `event_id`.
pub fn is_push(e: &HostEvent, id: &str) -> bool {
    matches!(e, HostEvent::Push { event_id, .. } if event_id == id)
}

/// Whether `e` delivers channel message `message_id`.
pub fn is_channel_message(e: &HostEvent, message_id: &str) -> bool {
    matches!(e, HostEvent::ChannelMessage { message, .. } if message["messageId"] == message_id)
}

/// A `push/event` read under `grant` (§5.4, §9): with `pushEvents` accepted and delivered;
/// without it refused `-32002` and not delivered. `answer` is the result or the error code.
pub fn check_push(grant: CapabilitySet, answer: &Result<Value, i64>, delivered: bool) {
    if grant.contains(Capability::PushEvents) {
        assert_eq!(
            answer,
            &Ok(json!({"accepted": true})),
            "push under {grant:?}"
        );
        assert!(delivered, "an admitted push was not delivered");
    } else {
        assert_eq!(answer, &Err(-32002), "push without pushEvents");
        assert!(!delivered, "a push was delivered without pushEvents");
    }
}

/// A `channels/register` read under `grant` (§14.5): accepted with `channels.register`,
/// refused `-32002` without. Returns whether the channel is now registered.
pub fn check_register(grant: CapabilitySet, answer: &Result<Value, i64>) -> bool {
    if grant.contains(Capability::ChannelsRegister) {
        let r = answer.as_ref().expect("registration answered");
        assert_eq!(r["results"][0]["accepted"], json!(true), "{r}");
        true
    } else {
        assert_eq!(
            answer,
            &Err(-32002),
            "registration without channels.register"
        );
        false
    }
}

/// A `channels/incoming` read under `grant` on a channel `registered` or not (§14.5): with
/// `channels.incoming`, admitted and delivered only on a registered channel; without it
/// refused `-32002` and not delivered.
pub fn check_incoming(
    grant: CapabilitySet,
    registered: bool,
    answer: &Result<Value, i64>,
    delivered: bool,
) {
    if grant.contains(Capability::ChannelsIncoming) {
        let r = answer.as_ref().expect("incoming answered");
        let accepted = r["results"][0]["accepted"] == json!(true);
        assert_eq!(accepted, registered, "{r}");
        assert_eq!(delivered, accepted);
    } else {
        assert_eq!(answer, &Err(-32002), "incoming without channels.incoming");
        assert!(
            !delivered,
            "a message was delivered without channels.incoming"
        );
    }
}
