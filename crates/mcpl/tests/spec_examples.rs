//! Every JSON example of SPEC.md §5–§17 parses into its type and serialises back to the same
//! JSON; plus inline examples and the tolerant readings, so something runs without SPEC.md.
//!
//! SPEC.md is read at test time from the `shared/` directory beside the repository. Each
//! fenced `jsonc` block is stripped of `//` and `/* */` comments and of `...` placeholders
//! (outside strings), split into its JSON values, and each value is keyed `"<section>#<n>"`
//! (n counts values within the section). A value with a `method` is checked against that
//! method's params type; every other value must appear in [`TABLE`], as a check or a skip
//! with a reason. Placeholders that a type cannot accept are filled from [`FILLS`].

use mcpl::jsonrpc::{ErrorObject, Message};
use mcpl::protocol::channels::{self, ChannelDescriptor, ItemizedResult};
use mcpl::protocol::content::Content;
use mcpl::protocol::feature_sets::{self, Receipt};
use mcpl::protocol::handshake::{self, Capabilities, Experimental, InitializeParams};
use mcpl::protocol::hooks::{self, ChannelContext};
use mcpl::protocol::manifest::{self, ManifestView};
use mcpl::protocol::state::StateInfo;
use mcpl::protocol::{
    inference, is_known_method, lifecycle, method_info, model, push, state, Kind, Method,
    METHOD_NAMES,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

const SPEC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/spec/SPEC.md");

type Check = fn(&Value) -> Result<(), String>;

/// Parse `v` as `T`, serialise it back, and compare as JSON.
fn rt<T: Serialize + DeserializeOwned>(v: &Value) -> Result<(), String> {
    let t: T = serde_json::from_value(v.clone())
        .map_err(|e| format!("does not parse as {}: {e}", std::any::type_name::<T>()))?;
    let back = serde_json::to_value(&t).map_err(|e| format!("does not serialise: {e}"))?;
    if &back != v {
        return Err(format!(
            "round trip through {} changed it:\n  in:  {v}\n  out: {back}",
            std::any::type_name::<T>()
        ));
    }
    Ok(())
}

macro_rules! table_of {
    ($which:ident, $($m:ty),* $(,)?) => {
        &[$((<$m as Method>::NAME, rt::<<$m as Method>::$which> as Check)),*]
    };
}

/// Method name → params check.
const PARAMS: &[(&str, Check)] = table_of!(
    Params,
    handshake::Initialize,
    handshake::Initialized,
    handshake::Ping,
    handshake::ToolsList,
    handshake::ToolsCall,
    push::PushEvent,
    hooks::BeforeInference,
    lifecycle::InferenceLifecycle,
    inference::InferenceRequest,
    inference::InferenceChunk,
    model::ModelInfoRequest,
    feature_sets::FeatureSetsUpdate,
    state::StateRollback,
    channels::ChannelsRegister,
    channels::ChannelsChanged,
    channels::ChannelsList,
    channels::ChannelsOpen,
    channels::ChannelsClose,
    channels::ChannelsOutgoingChunk,
    channels::ChannelsOutgoingComplete,
    channels::ChannelsPublish,
    channels::ChannelsIncoming,
    channels::ChannelsAcknowledge,
    channels::ChannelsTyping,
    manifest::ManifestFetch,
    manifest::ManifestChanged,
);

/// Method name → result check.
const RESULTS: &[(&str, Check)] = table_of!(
    Result,
    handshake::Initialize,
    handshake::Ping,
    handshake::ToolsList,
    handshake::ToolsCall,
    push::PushEvent,
    hooks::BeforeInference,
    inference::InferenceRequest,
    model::ModelInfoRequest,
    feature_sets::FeatureSetsUpdate,
    state::StateRollback,
    channels::ChannelsRegister,
    channels::ChannelsChanged,
    channels::ChannelsList,
    channels::ChannelsOpen,
    channels::ChannelsClose,
    channels::ChannelsPublish,
    channels::ChannelsIncoming,
    channels::ChannelsAcknowledge,
    channels::ChannelsTyping,
    manifest::ManifestFetch,
);

fn lookup(t: &[(&str, Check)], method: &str) -> Option<Check> {
    t.iter().find(|(n, _)| *n == method).map(|(_, c)| *c)
}

/// How a value without a `method` is checked.
enum Target {
    /// A response envelope: `result` is the given method's result type.
    Result(&'static str),
    /// The value at a JSON pointer round-trips through a type.
    At(&'static str, Check),
    /// Not checked, with the reason.
    Skip(&'static str),
}

/// Explicit mapping for every example value that carries no `method`.
const TABLE: &[(&str, Target)] = &[
    ("5.1#0", Target::At("/capabilities", rt::<Capabilities>)),
    (
        "5.1#0",
        Target::At("/capabilities/experimental/mcpl", rt::<ManifestView>),
    ),
    ("5.2#0", Target::At("", rt::<InitializeParams>)),
    (
        "5.2#0",
        Target::At("/capabilities/experimental/mcpl", rt::<ManifestView>),
    ),
    ("6.1#0", Target::At("/experimental", rt::<Experimental>)),
    (
        "6.1#0",
        Target::At("/experimental/mcpl", rt::<ManifestView>),
    ),
    ("6.5#2", Target::Result("context/beforeInference")),
    ("6.6#0", Target::At("/error", rt::<ErrorObject>)),
    ("6.7#0", Target::Result("featureSets/update")),
    ("6.7#1", Target::At("", rt::<Receipt>)),
    ("8.1#0", Target::At("", rt::<ManifestView>)),
    ("8.2#0", Target::Result("tools/call")),
    ("8.3#0", Target::At("/state", rt::<StateInfo>)),
    ("8.3#1", Target::At("/state", rt::<StateInfo>)),
    ("8.4#2", Target::Result("tools/call")),
    ("8.6#0", Target::Result("state/rollback")),
    ("8.6#1", Target::Result("state/rollback")),
    ("8.7#0", Target::At("/error", rt::<ErrorObject>)),
    ("9.3#0", Target::Result("push/event")),
    ("10.2#0", Target::Result("context/beforeInference")),
    ("10.3#0", Target::At("/content", rt::<Content>)),
    ("10.3#1", Target::At("/content", rt::<Content>)),
    ("10.3#2", Target::At("/content", rt::<Content>)),
    ("11.3#0", Target::Result("inference/request")),
    (
        "11.5#0",
        Target::Skip("non-normative host routing policy: host configuration, not a wire message"),
    ),
    ("12.2#0", Target::Result("model/info")),
    ("14.1#0", Target::At("/capabilities", rt::<Capabilities>)),
    (
        "14.1#0",
        Target::At("/capabilities/experimental/mcpl", rt::<ManifestView>),
    ),
    ("14.2#0", Target::At("", rt::<ChannelDescriptor>)),
    ("14.3#4", Target::Result("channels/open")),
    ("14.3#6", Target::Result("channels/close")),
    ("14.3#11", Target::Result("channels/incoming")),
    ("14.4#0", Target::At("/channels", rt::<ChannelContext>)),
    ("14.5#0", Target::At("", rt::<ItemizedResult>)),
    ("15.1#0", Target::At("/capabilities", rt::<Capabilities>)),
    (
        "15.1#0",
        Target::At("/capabilities/experimental/mcpl", rt::<ManifestView>),
    ),
    ("15.1#2", Target::Result("context/beforeInference")),
    ("15.2#0", Target::At("/capabilities", rt::<Capabilities>)),
    (
        "15.2#0",
        Target::At("/capabilities/experimental/mcpl", rt::<ManifestView>),
    ),
    ("15.2#2", Target::Result("context/beforeInference")),
    ("17.4#1", Target::Result("mcpl/manifest")),
    ("17.4#1", Target::At("/result", rt::<ManifestView>)),
];

/// Placeholder fills: members merged into the object at a pointer (the spec elides them
/// with `...` or `{ "…": "…" }`, but the type requires them).
fn fills() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "6.5#0",
            "/params",
            json!({"eventId": "evt_1", "timestamp": "2026-01-23T10:30:00Z",
                   "payload": {"content": [{"type": "text", "text": "reminder"}]}}),
        ),
        (
            "6.5#1",
            "/params",
            json!({"conversationId": "conv_123", "turnIndex": 0, "userMessage": null}),
        ),
        (
            "10.5#0",
            "/params/model",
            json!({"id": "claude-opus-4-5-20251101"}),
        ),
        (
            "17.4#1",
            "/result/featureSets",
            json!({"demo.messaging": {"description": "Demo", "uses": ["tools"]}}),
        ),
    ]
}

/// Strip comments and `...` placeholders outside strings.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '/' if b.get(i + 1) == Some(&'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            '.' if b.get(i + 1) == Some(&'.') && b.get(i + 2) == Some(&'.') => {
                // Drop the placeholder and a comma that only introduced it.
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.truncate(trimmed - 1);
                }
                i += 3;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Parse a stripped block into its JSON values. Fragments (`"content": …` members) are
/// wrapped in braces, whole or line by line.
fn values_of(text: &str) -> Result<Vec<Value>, String> {
    let t = text.trim();
    let stream = |s: &str| -> Result<Vec<Value>, serde_json::Error> {
        serde_json::Deserializer::from_str(s)
            .into_iter::<Value>()
            .collect()
    };
    if !t.starts_with('"') {
        return stream(t).map_err(|e| format!("{e}\n{t}"));
    }
    if let Ok(v) = stream(&format!("{{{t}}}")) {
        return Ok(v);
    }
    t.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(&format!("{{{l}}}")).map_err(|e| format!("{e}\n{l}")))
        .collect()
}

/// `(section, block text)` for every `jsonc` block of §5–§17.
fn blocks(spec: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut cur: Option<String> = None;
    for line in spec.lines() {
        if let Some(body) = cur.as_mut() {
            if line.starts_with("```") {
                out.push((section.clone(), std::mem::take(body)));
                cur = None;
            } else {
                body.push_str(line);
                body.push('\n');
            }
            continue;
        }
        if line.starts_with('#') {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words[0] == "###" || words[0] == "##" {
                section = words.get(1).unwrap_or(&"").trim_end_matches('.').to_owned();
            }
        } else if line.trim() == "```jsonc" {
            cur = Some(String::new());
        }
    }
    out.into_iter()
        .filter(|(s, _)| {
            s.split('.')
                .next()
                .and_then(|m| m.parse::<u32>().ok())
                .is_some_and(|m| (5..=17).contains(&m))
        })
        .collect()
}

fn merge_at(v: &mut Value, pointer: &str, fill: &Value) -> Result<(), String> {
    let target = v
        .pointer_mut(pointer)
        .ok_or_else(|| format!("fill pointer {pointer} not found"))?;
    match (target.as_object_mut(), fill.as_object()) {
        (Some(t), Some(f)) if !t.contains_key("…") => {
            for (k, x) in f {
                t.insert(k.clone(), x.clone());
            }
        }
        _ => *target = fill.clone(),
    }
    Ok(())
}

fn check_message(v: &Value) -> Result<(), String> {
    let method = v["method"].as_str().ok_or("method is not a string")?;
    if !is_known_method(method) {
        return Err(format!("example uses untyped method {method}"));
    }
    let check = lookup(PARAMS, method).ok_or_else(|| format!("no params check for {method}"))?;
    check(v.get("params").unwrap_or(&json!({})))?;
    // §4.1: an example with `jsonrpc` shows the form; it must be one the method allows.
    if v.get("jsonrpc").is_some() {
        let kind = method_info(method).ok_or("no method info")?.kind;
        let ok = match (v.get("id").is_some(), kind) {
            (_, Kind::Either) => true,
            (true, k) => k == Kind::Request,
            (false, k) => k == Kind::Notification,
        };
        if !ok {
            return Err(format!("{method} sent in a form its Kind {kind:?} forbids"));
        }
    }
    envelope(v)
}

/// Examples that carry `jsonrpc` must also be valid envelopes.
fn envelope(v: &Value) -> Result<(), String> {
    if v.get("jsonrpc").is_some() {
        Message::from_value(v.clone()).map_err(|e| format!("invalid envelope: {e:?}"))?;
    }
    Ok(())
}

#[test]
fn s5_to_s17_every_spec_example_round_trips() {
    let spec = std::fs::read_to_string(SPEC_PATH).unwrap_or_else(|e| {
        panic!("SPEC.md not found: looked at {SPEC_PATH} (shared/ must sit beside the repository root): {e}")
    });
    let fills = fills();
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    let mut counters: std::collections::BTreeMap<String, usize> = Default::default();
    let mut checked = 0;
    let mut skipped = 0;
    for (section, body) in blocks(&spec) {
        let values = match values_of(&strip(&body)) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("§{section}: block does not parse: {e}"));
                continue;
            }
        };
        for mut v in values {
            let n = counters.entry(section.clone()).or_default();
            let key = format!("{section}#{n}");
            *n += 1;
            seen.push(key.clone());
            for (_, ptr, fill) in fills.iter().filter(|(k, _, _)| *k == key) {
                if let Err(e) = merge_at(&mut v, ptr, fill) {
                    failures.push(format!("§{key}: {e}"));
                }
            }
            let mut results = Vec::new();
            if v.get("method").is_some() {
                results.push(check_message(&v));
            } else {
                let targets: Vec<&Target> = TABLE
                    .iter()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, t)| t)
                    .collect();
                if targets.is_empty() {
                    failures.push(format!("§{key}: example not mapped to a type: {v}"));
                }
                for t in targets {
                    results.push(match t {
                        Target::Skip(reason) => {
                            eprintln!("§{key}: skipped: {reason}");
                            skipped += 1;
                            continue;
                        }
                        Target::At(ptr, check) => match v.pointer(ptr) {
                            Some(x) => check(x),
                            None => Err(format!("pointer {ptr} not found")),
                        },
                        Target::Result(method) => {
                            match (lookup(RESULTS, method), v.get("result")) {
                                (Some(check), Some(r)) => check(r).and_then(|_| envelope(&v)),
                                _ => Err(format!("no result check for {method} or no result")),
                            }
                        }
                    });
                }
            }
            for r in results {
                match r {
                    Ok(()) => checked += 1,
                    Err(e) => failures.push(format!("§{key}: {e}")),
                }
            }
        }
    }
    for (k, _) in TABLE {
        if !seen.iter().any(|s| s == k) {
            failures.push(format!(
                "table entry {k} matches no example (spec changed?)"
            ));
        }
    }
    for (k, _, _) in &fills {
        if !seen.iter().any(|s| s == k) {
            failures.push(format!("fill {k} matches no example (spec changed?)"));
        }
    }
    eprintln!(
        "{checked} checks passed over {} example values, {skipped} skipped",
        seen.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // §5–§17 hold well over fifty example values; a broken extractor must not pass quietly.
    assert!(checked >= 50, "only {checked} examples checked");
}

#[test]
fn s4_1_every_typed_method_has_params_and_result_checks() {
    for name in METHOD_NAMES {
        assert!(lookup(PARAMS, name).is_some(), "{name} has no params check");
    }
    for (name, _) in RESULTS {
        assert!(is_known_method(name));
    }
}

#[test]
fn strip_keeps_strings_and_drops_placeholders() {
    let s = strip(
        r#"{ "u": "memory://x", "t": "a ... b", // c
      "l": [...], "o": { ... }, "p": 1, ... }"#,
    );
    let v: Value = serde_json::from_str(&s).unwrap();
    assert_eq!(
        v,
        json!({"u": "memory://x", "t": "a ... b", "l": [], "o": {}, "p": 1})
    );
}

/// Inline examples, so the round trip runs even where SPEC.md is absent.
#[test]
fn inline_examples_round_trip() {
    let cases: &[(&str, Check, Value)] = &[
        (
            "push/event",
            lookup(PARAMS, "push/event").unwrap(),
            json!({"featureSet": "memory.proactive", "eventId": "evt_1",
                   "timestamp": "2026-01-23T14:00:00Z", "origin": {"server": "memory"},
                   "payload": {"content": [{"type": "text", "text": "hi"}]},
                   "tags": ["chat:mention"]}),
        ),
        (
            "context/beforeInference",
            lookup(PARAMS, "context/beforeInference").unwrap(),
            json!({"inferenceId": "inf_1", "conversationId": "c", "turnIndex": 0,
                   "userMessage": null, "model": {"id": "m", "contextWindow": 200000}}),
        ),
        (
            "context/beforeInference result",
            lookup(RESULTS, "context/beforeInference").unwrap(),
            json!({"featureSet": "body.presence", "contextInjections": [
                {"namespace": "body", "position": "beforeUser", "content": "[body] online"}]}),
        ),
        (
            "inference/lifecycle",
            lookup(PARAMS, "inference/lifecycle").unwrap(),
            json!({"inferenceId": "inf_abc", "phase": "aborted"}),
        ),
        (
            "featureSets/update result",
            lookup(RESULTS, "featureSets/update").unwrap(),
            json!({"accepted": true, "mode": "degraded", "unavailableFeatures": [
                {"featureSet": "memory.extraction", "missingCapabilities": ["inferenceLifecycle"],
                 "effect": "disabled"}], "notes": []}),
        ),
        (
            "mcpl/manifest result",
            lookup(RESULTS, "mcpl/manifest").unwrap(),
            json!({"version": "0.5", "pushEvents": true,
                   "channels": {"register": true, "publish": false},
                   "featureSets": {"demo.messaging": {"description": "Demo",
                                                      "uses": ["channels.publish"]}}}),
        ),
        (
            "mcpl/manifestChanged",
            lookup(PARAMS, "mcpl/manifestChanged").unwrap(),
            json!({"revision": "sha256:QLXa7BigUFzNlw_IWPSqpYbDzdvBX7PVQIPS5lgnkaw",
                   "domains": ["capabilities", "featureSets"]}),
        ),
    ];
    for (name, check, v) in cases {
        check(v).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn s10_3_tolerant_string_content() {
    for (method, params) in [
        (
            "channels/publish",
            json!({"channelId": "ui", "content": "Hello team"}),
        ),
        (
            "channels/outgoing/complete",
            json!({"inferenceId": "i", "channelId": "ui", "content": "full text"}),
        ),
        (
            "push/event",
            json!({"featureSet": "f", "eventId": "e", "timestamp": "t",
                   "payload": {"content": "plain"}}),
        ),
    ] {
        lookup(PARAMS, method).unwrap()(&params).unwrap_or_else(|e| panic!("{method}: {e}"));
    }
    let c: Content = serde_json::from_value(json!("Simple text injection")).unwrap();
    let blocks = serde_json::to_value(c.to_blocks()).unwrap();
    assert_eq!(
        blocks,
        json!([{"type": "text", "text": "Simple text injection"}])
    );
}

#[test]
fn s8_unknown_members_survive_everywhere() {
    let x = json!({"vendor.ext": {"a": [1, 2]}});
    let with = |mut v: Value| {
        for (k, val) in x.as_object().unwrap() {
            v.as_object_mut().unwrap().insert(k.clone(), val.clone());
        }
        v
    };
    let cases = [
        (
            "tools/call",
            with(json!({"name": "add_note", "checkpoint": "chk_def"})),
        ),
        (
            "featureSets/update",
            with(json!({"effectiveCapabilities": ["channels.*"]})),
        ),
        (
            "channels/register",
            with(json!({"channels": [with(json!({
            "id": "d:#g", "type": "discord", "direction": "outbound"}))]})),
        ),
        (
            "inference/request",
            with(json!({"featureSet": "f", "messages": [
            with(json!({"role": "user", "content": "x"}))],
            "preferences": with(json!({"maxTokens": 5, "modelTier": "cheap"}))})),
        ),
        ("state/rollback", with(json!({"checkpoint": "chk_abc"}))),
        ("model/info", with(json!({}))),
    ];
    for (method, params) in cases {
        lookup(PARAMS, method).unwrap()(&params).unwrap_or_else(|e| panic!("{method}: {e}"));
    }
    // A result's unknown members survive too (hosts MUST tolerate unknown response fields).
    let r = with(json!({"content": [{"type": "text", "text": "ok"}], "structuredContent": {}}));
    lookup(RESULTS, "tools/call").unwrap()(&r).unwrap();
}

#[test]
fn s5_1_bool_or_object_advertisement_values_survive() {
    for adv in [
        json!({"version": "0.5", "contextHooks": {"beforeInference": true}}),
        json!({"version": "0.5", "contextHooks": {"beforeInference": {
            "observe": false, "inject": {"system": false, "beforeUser": true}}}}),
        json!({"version": "0.5", "channels": false, "pushEvents": true, "featureSets": true}),
    ] {
        rt::<ManifestView>(&adv).unwrap();
        rt::<Capabilities>(&json!({"experimental": {"mcpl": adv}})).unwrap();
    }
}

/// §17.2's test vector as the spec text gives it (a `json` block, not `jsonc`, so the round
/// trip above does not read it): the manifest after "#### Test vector" digests to the
/// `revision = …` line below it, and round-trips through the typed manifest.
#[test]
fn s17_2_test_vector_from_the_spec_text() {
    let spec = std::fs::read_to_string(SPEC_PATH)
        .unwrap_or_else(|e| panic!("SPEC.md not found at {SPEC_PATH}: {e}"));
    let from = spec
        .find("#### Test vector")
        .expect("§17.2 has a test vector");
    let rest = &spec[from..];
    let open = rest.find("```json\n").expect("the manifest block") + "```json\n".len();
    let close = open + rest[open..].find("```").expect("its end");
    let manifest: Value = serde_json::from_str(&rest[open..close]).expect("the block is JSON");
    let expected = rest
        .lines()
        .find_map(|l| l.trim().strip_prefix("revision = "))
        .expect("the expected revision line");
    assert_eq!(mcpl::manifest::revision(&manifest).unwrap(), expected);
    rt::<mcpl::protocol::manifest::Manifest>(&manifest).unwrap();
}
