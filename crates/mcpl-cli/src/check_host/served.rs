//! What the checker serves and sends: its manifest and `initialize` answer, and the params
//! of every probe. None of it depends on what the host sends, except the MCP protocol
//! version the answer echoes when this side speaks it.

use mcpl::capability::{self, CapabilitySet};
use mcpl::protocol::handshake::{negotiate_protocol_version, MCP_PROTOCOL_VERSION};
use serde_json::{json, Value};

use super::tolerance::{unknown_value, with_unknown, UNKNOWN_MEMBER};

/// The version `initialize` is answered with (issue #19 item 7): the one the host asked for
/// when the library speaks it, else the newest it does (MCP's version negotiation: the host
/// decides whether it can go on with it). A `protocolVersion` that is not a string asks for
/// nothing. The checker's MCP surface (the handshake, `ping`, an empty `tools/list`) is the
/// same in every supported version.
pub(super) fn negotiated_version(requested: Option<&Value>) -> &'static str {
    requested
        .and_then(Value::as_str)
        .map_or(MCP_PROTOCOL_VERSION, negotiate_protocol_version)
}

/// The feature set the checker declares with an invalid `uses` (§6.2: [`TYPO_USE`] is not a
/// capability path), which a host disables with reason `invalid_uses` (§6.4 rule 1).
pub(super) const TYPO_SET: &str = "check.typo";

/// The `uses` entry of [`TYPO_SET`] outside §6.2's vocabulary: `pushEvents` misspelt, the
/// kind of slip AUDIT-001 §2.5 found in live servers' `uses`.
pub(super) const TYPO_USE: &str = "pushEvent";

/// The manifest the checker serves: pushes, server-initiated inference (streamed too,
/// [`STREAM_SET`]), a beforeUser injection, lifecycle signals (judged,
/// [`super::lifecycle`]), and channels, under five feature sets, beside one whose
/// `uses` is invalid ([`TYPO_SET`]) and the two the manifest changes remove ([`GONE_SETS`]).
pub(super) fn manifest() -> Value {
    let mut m = json!({
        "version": "0.5",
        "pushEvents": true,
        // `true`, streaming included, so a grant of `inferenceRequest.streaming` is legal
        // (and, granted, exercised: the inference probe then asks `stream: true` under
        // [`STREAM_SET`], §11.4, [`super::streamed`]). `{ "streaming": false }` would show a
        // host that cannot mask the leaf (AUDIT-001 §2.8), but a host reading a nested object
        // as its members only (§5.1 names no way to advertise `inferenceRequest` without its
        // leaf) then grants nothing of it, and the inference probe goes unjudged.
        "inferenceRequest": true,
        "inferenceLifecycle": true,
        "contextHooks": { "beforeInference": { "inject": { "beforeUser": true } } },
        "channels": { "register": true, "incoming": true },
        "featureSets": {
            "check.push": { "description": "Probe push events", "uses": ["pushEvents"] },
            "check.infer": {
                "description": "Probe server-initiated inference",
                "uses": ["inferenceRequest"]
            },
            STREAM_SET: {
                "description": "Probe streamed server-initiated inference (§11.4)",
                "uses": ["inferenceRequest", "inferenceRequest.streaming"]
            },
            "check.hints": {
                "description": "Probe hooks",
                "uses": ["contextHooks.beforeInference.inject.beforeUser"]
            },
            "check.turns": {
                "description": "Judge lifecycle signals (§10.5)",
                "uses": ["inferenceLifecycle"]
            },
            TYPO_SET: {
                "description": "Probe invalid uses: the host must disable this set (§6.4)",
                "uses": ["pushEvents", TYPO_USE]
            },
            GONE_SETS[0]: {
                "description": "Removed by the first manifest change (§17.5)",
                "uses": ["pushEvents"]
            },
            GONE_SETS[1]: {
                "description": "Removed by the partially invalid manifest change (§17.5)",
                "uses": ["pushEvents"]
            }
        }
    });
    with_revision(&mut m);
    m
}

/// The feature sets the manifest changes remove ([`super::manifest_change`]): the first by
/// the valid change ([`manifest_narrowed`]), the second by the partially invalid one
/// ([`manifest_partial`]). Both use only `pushEvents`, so a push under either is refused
/// only for the removal.
pub(super) const GONE_SETS: [&str; 2] = ["check.gone", "check.gone-too"];

/// Adds the `revision` member (§17.2) to a manifest built without one. Never an invalid
/// one (App. B.3): were the §17.2 digest refused, the digest of the JSON value stands in
/// ([`mcpl::manifest::value_digest`], B.3's shape), as the announcements' does.
fn with_revision(m: &mut Value) {
    let revision = mcpl::manifest::revision(m).unwrap_or_else(|_| mcpl::manifest::value_digest(m));
    if let Some(o) = m.as_object_mut() {
        o.insert("revision".into(), json!(revision));
    }
}

/// The manifest after the first change: [`manifest`] without `channels.incoming` and
/// without the first of [`GONE_SETS`] (two removals, one capability, one feature set).
pub(super) fn manifest_narrowed() -> Value {
    let mut m = manifest();
    if let Some(o) = m.as_object_mut() {
        o.remove("revision");
        o.insert("channels".into(), json!({ "register": true }));
    }
    if let Some(sets) = m.get_mut("featureSets").and_then(Value::as_object_mut) {
        sets.remove(GONE_SETS[0]);
    }
    with_revision(&mut m);
    m
}

/// The feature sets [`manifest_partial`] declares invalidly: `uses` a string, not an array
/// (§6.4 rule 1: disabled, `invalid_uses`), and a declaration that is no object.
pub(super) const BROKEN_SETS: [&str; 2] = ["check.broken", "check.not-an-object"];

/// The partially invalid manifest of the second change (§17.5 step 1): it parses, two of its
/// declarations are invalid ([`BROKEN_SETS`]), it removes the second of [`GONE_SETS`], it
/// adds `modelInfo` and advertises `channels.incoming` again (additions: never
/// auto-granted).
pub(super) fn manifest_partial() -> Value {
    let mut m = manifest_narrowed();
    if let Some(o) = m.as_object_mut() {
        o.remove("revision");
        o.insert(
            "channels".into(),
            json!({ "register": true, "incoming": true }),
        );
        o.insert("modelInfo".into(), json!(true));
    }
    if let Some(sets) = m.get_mut("featureSets").and_then(Value::as_object_mut) {
        sets.remove(GONE_SETS[1]);
        sets.insert(
            BROKEN_SETS[0].into(),
            json!({ "description": "uses is not an array", "uses": "pushEvents" }),
        );
        sets.insert(BROKEN_SETS[1].into(), json!(7));
    }
    with_revision(&mut m);
    m
}

/// What `manifest` advertises as this checker's `initialize` would carry it (§5.1, MCP
/// `tools` beside it): the server's side of the grant's ceiling.
pub(super) fn advertisement_of(manifest: &Value) -> CapabilitySet {
    let caps = json!({ "tools": {}, "experimental": { "mcpl": manifest } });
    capability::advertised_from_capabilities(&caps).capabilities
}

/// The `initialize` result, answering with `protocol_version`: with a member no spec
/// defines in the result, in `capabilities` and in `serverInfo`, which the host must
/// tolerate (§8, `host.unknown-fields-tolerated`, [`super::tolerance`]). The manifest has
/// none: its members are the host's to diff (§17.1).
pub(super) fn initialize_result(protocol_version: &str) -> Value {
    let unknown = unknown_value();
    with_unknown(json!({
        "protocolVersion": protocol_version,
        "capabilities": {
            "tools": {}, "experimental": { "mcpl": manifest() }, UNKNOWN_MEMBER: unknown.clone()
        },
        "serverInfo": {
            "name": "mcpl-check-host", "version": env!("CARGO_PKG_VERSION"),
            UNKNOWN_MEMBER: unknown
        }
    }))
}

/// The `tools/list` result: no tools, and a member no spec defines beside them (§8).
pub(super) fn tools_list_result() -> Value {
    with_unknown(json!({ "tools": [] }))
}

/// The paths this checker's own `initialize` advertises (§5.1).
pub(super) fn served_advertisement() -> CapabilitySet {
    let result = initialize_result(MCP_PROTOCOL_VERSION);
    let caps = result.get("capabilities").unwrap_or(&Value::Null);
    capability::advertised_from_capabilities(caps).capabilities
}

/// A `push/event` Request's params under `feature_set`.
pub(super) fn push(feature_set: &str, event_id: &str) -> Value {
    json!({
        "featureSet": feature_set, "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": { "content": [ { "type": "text", "text": "mcpl check-host probe" } ] }
    })
}

/// The `inference/request` probe's params: one short message under `check.infer` (§11.2).
pub(super) fn inference_request() -> Value {
    json!({
        "featureSet": "check.infer",
        "messages": [ { "role": "user", "content": "mcpl check-host probe: reply with OK." } ],
        "preferences": { "maxTokens": 16 }
    })
}

/// The feature set the streamed inference probe goes under: it declares
/// `inferenceRequest.streaming` beside `inferenceRequest` (§6.4 rule 2: a use its set does
/// not declare is refused), and is its own so that a grant without the streaming leaf, which
/// disables it (§6.4), leaves `check.infer` and the unstreamed probe as they were.
pub(super) const STREAM_SET: &str = "check.stream";

/// The streamed `inference/request` probe's params: [`inference_request`]'s message under
/// [`STREAM_SET`], with `stream: true` (§11.2, §11.4).
pub(super) fn inference_request_streamed() -> Value {
    let mut p = inference_request();
    if let Some(o) = p.as_object_mut() {
        o.insert("featureSet".into(), json!(STREAM_SET));
        o.insert("stream".into(), json!(true));
    }
    p
}

/// `channels/incoming` params with one message for `channel`.
pub(super) fn incoming(channel: &str) -> Value {
    incoming_message(channel, "m1")
}

/// `channels/incoming` params with one message for `channel`, under `message_id`.
pub(super) fn incoming_message(channel: &str, message_id: &str) -> Value {
    json!({ "messages": [ {
        "channelId": channel, "messageId": message_id,
        "content": [ { "type": "text", "text": "mcpl check-host probe" } ]
    } ] })
}

/// The channels of [`unregistered_incoming`]: none is ever registered.
pub(super) const UNREGISTERED: [&str; 2] = ["check:never-registered", "check:never-registered-2"];

/// `channels/incoming` params with one message for each of [`UNREGISTERED`], so a host that
/// validates only the first message is seen accepting the second (§14.5).
pub(super) fn unregistered_incoming() -> Value {
    let messages: Vec<Value> = UNREGISTERED
        .iter()
        .enumerate()
        .map(|(i, channel)| {
            json!({
                "channelId": channel, "messageId": format!("m{}", i + 1),
                "content": [ { "type": "text", "text": "mcpl check-host probe" } ]
            })
        })
        .collect();
    json!({ "messages": messages })
}

/// `channels/register` params: two descriptors, each to be judged on its own (§14.5).
pub(super) fn descriptors() -> Value {
    json!({ "channels": [
        { "id": "check:a", "type": "check", "direction": "bidirectional" },
        { "id": "check:b", "type": "check", "direction": "inbound" }
    ] })
}

/// The descriptors of [`descriptors`] that `result`, the host's answer to them, accepts
/// (§14.5: `accepted: true` in the result under their id).
pub(super) fn accepted_descriptors(result: &Value) -> Vec<Value> {
    let sent = descriptors();
    sent.get("channels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|d| {
            d.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| super::channels::accepts(result, id))
        })
        .cloned()
        .collect()
}

/// `channels/register` params sent before the policy receipt (§5.3): one descriptor whose id
/// no other probe uses, so a host that wrongly accepts it changes no later verdict.
pub(super) fn early_descriptor() -> Value {
    json!({ "channels": [
        { "id": "check:early", "type": "check", "direction": "inbound" }
    ] })
}

/// The channel and message id of [`mixed_incoming`]'s second message: never registered.
pub(super) const MIXED_UNREGISTERED: (&str, &str) = ("check:never-registered", "mixed-2");

/// `channels/incoming` params with one message for `check:a` (registered by the
/// `channels/register` probe) and one for [`MIXED_UNREGISTERED`], so a host that validates
/// only the first message is seen accepting the second (§14.5).
pub(super) fn mixed_incoming() -> Value {
    let (channel, message) = MIXED_UNREGISTERED;
    json!({ "messages": [
        { "channelId": "check:a", "messageId": "mixed-1",
          "content": [ { "type": "text", "text": "mcpl check-host probe" } ] },
        { "channelId": channel, "messageId": message,
          "content": [ { "type": "text", "text": "mcpl check-host probe" } ] }
    ] })
}

/// The ids [`changed_descriptors`] adds: one no other probe uses, and `check:a`, which the
/// `channels/register` probe registered when the grant allowed it.
pub(super) const CHANGED_IDS: [&str; 2] = ["check:changed", "check:a"];

/// `channels/changed` params adding the two descriptors of [`CHANGED_IDS`], each to be
/// judged on its own (§14.5).
pub(super) fn changed_descriptors() -> Value {
    json!({ "added": [
        { "id": CHANGED_IDS[0], "type": "check", "direction": "inbound" },
        { "id": CHANGED_IDS[1], "type": "check", "direction": "bidirectional" }
    ] })
}

/// The id [`duplicate_descriptors`] names twice.
pub(super) const DUPLICATE_ID: &str = "check:dup";

/// `channels/register` params whose two descriptors share one id ([`DUPLICATE_ID`]) and
/// differ in direction, so a host that keeps the later one holds another channel than the
/// one it accepted first (§14.2, §14.5).
pub(super) fn duplicate_descriptors() -> Value {
    json!({ "channels": [
        { "id": DUPLICATE_ID, "type": "check", "direction": "inbound" },
        { "id": DUPLICATE_ID, "type": "check", "direction": "bidirectional" }
    ] })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 7 of issue #19: the host's version when this side speaks it, else the newest.
    #[test]
    fn initialize_answers_the_version_the_host_asked_for() {
        assert_eq!(negotiated_version(Some(&json!("2025-03-26"))), "2025-03-26");
        assert_eq!(negotiated_version(Some(&json!("2024-11-05"))), "2024-11-05");
        assert_eq!(
            negotiated_version(Some(&json!("1999-01-01"))),
            MCP_PROTOCOL_VERSION
        );
        assert_eq!(
            negotiated_version(Some(&json!(20250618))),
            MCP_PROTOCOL_VERSION
        );
        assert_eq!(negotiated_version(None), MCP_PROTOCOL_VERSION);
    }
}
