//! Every public error's `Display` says what happened and what to change (issue #21): the
//! messages a user reads when an example's `main` prints an error. Each assertion pins the
//! remedy, not the whole sentence, so the wording may improve without breaking the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::{Capability, PatternError};
use mcpl::host::{HostError, McpOnlyReason};
use mcpl::jsonrpc::RequestId;
use mcpl::peer::{CloseReason, PeerError};
use mcpl::policy::UsesError;
use mcpl::server::{SendError, ToolChangeError};

fn says(e: &impl std::fmt::Display, parts: &[&str]) {
    let text = e.to_string();
    for p in parts {
        assert!(text.contains(p), "{text:?} does not say {p:?}");
    }
    assert!(!text.contains('\n'), "one line: {text:?}");
}

/// §5.4: the issue's own example, `tools/call` with a policy that leaves out `tools`.
#[test]
fn s5_4_not_granted_names_the_capability_and_the_policy_to_change() {
    says(
        &HostError::NotGranted(Capability::Tools),
        &["`tools`", "not granted", "HostConfig.policy"],
    );
    let text = HostError::NotGranted(Capability::Tools).to_string();
    assert!(!text.contains("NotGranted("), "Display, not Debug: {text}");
}

/// §3.2, §6.7: MCP-only says why, in words (not a Debug dump), and what to check.
#[test]
fn s3_2_mcp_only_says_why_and_what_to_check() {
    for (reason, why) in [
        (McpOnlyReason::NotAdvertised, "does not advertise"),
        (McpOnlyReason::PolicyMethodNotFound, "-32601"),
        (McpOnlyReason::PolicyTimeout, "policy_timeout"),
        (McpOnlyReason::Refused, "mcp-only"),
        (McpOnlyReason::Suspended, "§17.5"),
        (McpOnlyReason::NotAnObject("null".into()), "not an object"),
    ] {
        let e = HostError::McpOnly(reason);
        says(&e, &[why, "HostSession::mode()"]);
        assert!(!e.to_string().contains("McpOnly"), "{e}");
    }
    says(
        &HostError::Refused("close"),
        &["\"close\"", "grant what its manifest requires"],
    );
    says(
        &HostError::ChannelNotPermitted("d:#x".into()),
        &["channel_patterns", "HostSession::channels()"],
    );
}

/// The peer's errors name the limit or timeout to raise.
#[test]
fn peer_errors_name_the_setting_to_change() {
    says(
        &PeerError::Timeout {
            method: "tools/call".into(),
            id: RequestId::Number(7.into()),
            after: Duration::from_secs(30),
        },
        &["tools/call", "PeerConfig::request_timeout"],
    );
    says(
        &PeerError::TooManyPending { limit: 1024 },
        &["1024", "PeerConfig::max_pending_requests"],
    );
    says(
        &PeerError::Closed(CloseReason::Eof),
        &["closed", "reconnect"],
    );
}

/// The server's senders say which check to make before sending (§5.3, §5.4, §6.4).
#[test]
fn s5_4_send_errors_say_what_to_check_before_sending() {
    says(&SendError::McpOnly, &["Session::is_mcpl()"]);
    says(
        &SendError::NotReady {
            capability: Capability::PushEvents,
        },
        &["pushEvents", "on_ready"],
    );
    says(
        &ToolChangeError::Unknown("remind".into()),
        &["\"remind\"", "Server::add_tool"],
    );
}

/// §5.4, §6.2: configuration mistakes name the rule to follow.
#[test]
fn s5_4_s6_2_pattern_and_uses_errors_name_the_rule() {
    says(
        &PatternError::EmptySegment("channels..x".into()),
        &["\"channels..x\"", "stray dot"],
    );
    says(
        &PatternError::PartialWildcard("chan*".into()),
        &["whole segment", "`channels.*`"],
    );
    says(&UsesError::Empty, &["at least one", "capability path"]);
    says(&UsesError::Absent, &["capability paths"]);
}

/// §17.2: a refused digest names the position and the alphabet to rename it into; a
/// non-object says what to pass instead. The codes stay first (the CLI strips them).
#[test]
fn s17_2_digest_errors_say_what_to_rename_or_pass() {
    use mcpl::manifest::digest;
    let e = digest::revision(&serde_json::json!({"featureSets": {"a b": {}}})).unwrap_err();
    assert!(e.to_string().starts_with("identifier_charset: "), "{e}");
    says(&e, &["featureSets.a b", "rename it", "(§17.2)"]);
    let e = digest::revision(&serde_json::json!([1])).unwrap_err();
    assert!(e.to_string().starts_with("manifest_not_object: "), "{e}");
    says(&e, &["array", "pass the experimental.mcpl object itself"]);
}

/// §16.5: accepting an ontology a set does not declare says which set to name instead; a
/// malformed host pattern names the setting.
#[test]
fn s16_5_review_errors_name_what_to_accept_or_fix() {
    use mcpl::manifest::review::ReviewError;
    says(
        &ReviewError::NoOntology("demo".into()),
        &[
            "\"demo\"",
            "no tagOntology",
            "name a set whose declaration carries one",
        ],
    );
    says(
        &ReviewError::Policy(PatternError::PartialWildcard("chan*".into())),
        &["HostConfig.policy", "`prefix.*`"],
    );
}

/// §5.3, §5.4: a malformed `featureSets/update` (its Display is the `-32602` message the
/// host reads) says what the sender must send instead.
#[test]
fn s5_3_policy_errors_say_what_the_sender_must_send() {
    use mcpl::policy::UpdateParams;
    let parse = |v: serde_json::Value| UpdateParams::parse(&v).unwrap_err();
    says(
        &parse(serde_json::json!(5)),
        &["must be an object", "(§5.3)"],
    );
    says(
        &parse(serde_json::json!({"effectiveCapabilities": [1]})),
        &["effectiveCapabilities", "as strings (§5.3)"],
    );
    says(
        &parse(serde_json::json!({
            "effectiveCapabilities": ["pushEvents"],
            "deniedCapabilities": ["pushEvents"]
        })),
        &["malformed (§5.4)", "in one of them only"],
    );
    says(
        &parse(serde_json::json!({"effectiveCapabilities": ["a..b"]})),
        &["stray dot", "the sender must fix the entry"],
    );
    let many: Vec<String> = (0..2000).map(|i| format!("s{i}")).collect();
    says(
        &parse(serde_json::json!({"effectiveCapabilities": [], "disabled": many})),
        &["exceed the limit", "`prefix.*`"],
    );
}

/// §5.4, §6.4, §10.4: a refused injection says what its answer must carry.
#[test]
fn s10_4_injection_refusals_say_what_the_answer_must_carry() {
    use mcpl::capability::Denied;
    use mcpl::policy::InjectionDenied;
    says(
        &InjectionDenied::MissingPosition,
        &["string `position` (§10.4)"],
    );
    says(
        &InjectionDenied::UnknownPosition("middle".into()),
        &["\"middle\"", "App. B.4"],
    );
    says(
        &InjectionDenied::Malformed("namespace is a number".into()),
        &["namespace is a number", "string `namespace`"],
    );
    says(
        &InjectionDenied::FeatureSet {
            feature_set: None,
            code: "missing",
        },
        &["missing", "`featureSet` (§6.5, §6.6)"],
    );
    says(
        &InjectionDenied::Undeclared {
            feature_set: "demo".into(),
            capability: Capability::InjectBeforeUser,
        },
        &["\"demo\"", "§6.4 rule 2", "add it to the set's uses"],
    );
    says(
        &InjectionDenied::Denied(Denied {
            capability: Capability::PushEvents,
        }),
        &["`pushEvents`", "(§5.4)", "policy grants it"],
    );
}

/// §16.1, §16.2: a tag a producer may not emit says how to write it (what a server's
/// `SendError::InvalidTag` prints).
#[test]
fn s16_1_tag_errors_say_how_to_write_the_tag() {
    use mcpl::tags::{Tag, TagError, TagSet};
    let bad = |s: &str| Tag::parse_producer(s).unwrap_err();
    says(
        &bad("mention"),
        &["`namespace:value`", "`discord:mention`", "(§16.1)"],
    );
    says(&bad("a:"), &["non-empty", "one `=` at most"]);
    says(&bad("a b:c"), &["ASCII letters, digits"]);
    says(&bad("chat:shout"), &["§16.2", "use your own namespace"]);
    says(&bad("mcpl:x"), &["`mcpl:` is reserved"]);
    let (_, issues) = TagSet::from_json(Some(&serde_json::json!("chat:dm")));
    says(&issues[0].error, &["array of `namespace:value` strings"]);
    says(&TagError::NotAString, &["every `tags` entry"]);
}

/// §16.7: treatment rules and patterns that cannot load say what a rule looks like.
#[test]
fn s16_7_rule_errors_say_what_a_rule_looks_like() {
    use mcpl::tags::{IdPattern, TagPattern, TreatmentRule};
    says(
        &TagPattern::new("a b").unwrap_err(),
        &["`*` globs", "(§16.7)"],
    );
    says(&TagPattern::new("mention").unwrap_err(), &["`chat:*`"]);
    says(
        &IdPattern::new("").unwrap_err(),
        &["give a server or channel id"],
    );
    says(
        &TreatmentRule::from_json(&serde_json::json!({"tagsAnyy": ["chat:*"]})).unwrap_err(),
        &["tagsAnyy", "a `behavior` (§16.7)"],
    );
}

/// §16.4, §16.5, §17.5: ontology and acceptance errors say what to give or to do again.
#[test]
fn s16_5_ontology_and_acceptance_errors_say_what_to_do() {
    use mcpl::tags::{AcceptanceError, OntologyError, TagOntology};
    says(
        &TagOntology::parse(&serde_json::json!([])).unwrap_err(),
        &["tagOntology", "JSON object", "(§16.4)"],
    );
    says(&OntologyError::DeclarationNotObject, &["(§6.1)"]);
    says(
        &AcceptanceError::DigestChanged,
        &["(§17.5)", "accept it again"],
    );
    says(&AcceptanceError::OtherFeatureSet, &["(§16.5)"]);
}

/// RFC-004 §2, §2.1, §3.2: a refused endpoint URI says what to write instead; the codes the
/// CLI and vectors compare are unchanged.
#[test]
fn rfc004_reject_reasons_say_what_to_write_instead() {
    for (uri, code, remedy) in [
        (
            "mcpl:///evil",
            "empty_authority",
            "write the host after \"//\"",
        ),
        ("mcpl://h/x#frag", "fragment", "remove it (RFC-004 §2.1)"),
        ("mcpl://u:p@h/x", "userinfo", "credentials out of band"),
        (
            "mcpl://h/a/../b",
            "dot_segment",
            "without them (RFC-004 §3.2)",
        ),
        ("mcpl://h:99999/", "invalid_port", "0..=65535"),
        (
            "https://h/",
            "unsupported_scheme",
            "mcpl://, wss:// or ws://",
        ),
        ("mcpl:h/x", "missing_authority", "mcpl://host/path"),
        ("mcpl://h/a b", "invalid_character", "percent-encode it"),
    ] {
        let e = mcpl::uri::resolve(uri).unwrap_err();
        assert_eq!(e.code(), code, "{uri}");
        says(&e, &[remedy]);
    }
}

/// Dialling and transport errors name what to check or which setting to change.
#[tokio::test]
async fn transport_errors_name_what_to_check() {
    use mcpl::transport::budget::OverBudget;
    use mcpl::transport::{endpoint, ws};
    let e = endpoint::resolve_ws("mcpl:///evil").unwrap_err();
    says(
        &e,
        &["\"mcpl:///evil\"", "(empty_authority)", "write the host"],
    );
    let e = match ws::connect("wss://127.0.0.1:9/", None).await {
        Err(e) => e,
        Ok(_) => panic!("wss:// without a ClientConfig connected"),
    };
    says(&e, &["endpoint::default_tls_config()"]);
    let e = match ws::connect("not a url", None).await {
        Err(e) => e,
        Ok(_) => panic!("a non-URL connected"),
    };
    says(&e, &["ws://host:port/path"]);
    says(
        &ws::WsError::Handshake("HTTP error: 404 Not Found".into()),
        &["404", "serves WebSocket upgrades"],
    );
    says(
        &ws::WsError::Tls(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        )),
        &["UnknownIssuer", "chains to a root the ClientConfig trusts"],
    );
    says(
        &ws::WsError::HandshakeTimeout(Duration::from_secs(10)),
        &["10s", "ListenConfig::handshake_timeout"],
    );
    says(
        &ws::WsError::ConnectTimeout(Duration::from_secs(10)),
        &["10s", "serves WebSocket upgrades", "ws::connect_within"],
    );
    says(
        &OverBudget {
            bytes: 1 << 20,
            limit: 1 << 20,
        },
        &["ListenConfig::message_budget", "--max-buffered-bytes"],
    );
}

/// A text that is not a JSON-RPC message says what the sender must send; PeerError's
/// remaining variants say what to change.
#[test]
fn jsonrpc_and_peer_errors_say_what_to_send() {
    use mcpl::jsonrpc::Message;
    says(
        &Message::parse("{not json").unwrap_err(),
        &["not JSON", "one JSON value per message"],
    );
    says(
        &Message::parse(r#"{"jsonrpc":"1.0","method":"x"}"#).unwrap_err(),
        &["invalid JSON-RPC message", "\"jsonrpc\": \"2.0\""],
    );
    says(
        &PeerError::Encode {
            method: "x".into(),
            reason: "key must be a string".into(),
        },
        &["Serialize yields a JSON object"],
    );
    says(
        &PeerError::InvalidResponse("no id".into()),
        &["report it to its author"],
    );
}

/// The host's remaining refusals say what to change (§10.5, §11.4, §14.3).
#[test]
fn host_stream_and_limit_errors_say_what_to_change() {
    says(
        &HostError::TooManyFeatureSets {
            count: 300,
            limit: 256,
        },
        &["300", "HostConfig::max_feature_sets"],
    );
    says(
        &HostError::StreamEnded,
        &["(§11.4)", "before the stream handler returns"],
    );
    says(
        &HostError::StreamExists("i1".into()),
        &["(§14.3)", "its own id"],
    );
    says(
        &HostError::TurnExists("i1".into()),
        &["(§10.5)", "HostSession::start_turn"],
    );
    says(
        &HostError::ChannelCompleted {
            inference_id: "i1".into(),
            channel_id: "c".into(),
        },
        &["one complete per channel", "all of it"],
    );
}
