//! A policy Request (`featureSets/update`) the server's peer refuses for a bound, before
//! the server's state can read it: over `PeerConfig::max_message_size`, or over
//! `PeerConfig::max_parsed_cost`. Over a real transport (JSON lines on a pipe), the host side
//! written by hand.
//!
//! Reading (§6.7: a server respects a reduction at once, whatever its carrier; §6.4: the
//! derivation fails closed): such a Request may carry a reduction the server cannot see, so
//! it grants nothing, as one refused at the envelope does (`server_refused_policy.rs`), and
//! its answer tells the host so: a `-32600` under its id whose data names the bound broken
//! (`limit`, `reason`) and that the policy was not applied, so the host does not take the
//! silence of a receipt for one.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::peer::PeerConfig;
use mcpl::server::Server;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const GUARD: Duration = Duration::from_secs(20);

type Lines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;
type Write = tokio::io::WriteHalf<tokio::io::DuplexStream>;

async fn send(w: &mut Write, v: Value) {
    w.write_all(format!("{v}\n").as_bytes()).await.unwrap();
}

async fn recv(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the server said nothing")
        .unwrap()
        .expect("the server is up");
    serde_json::from_str(&line).unwrap()
}

/// Sends a wide grant, then `narrow` (a policy Request the peer refuses for a bound):
/// the answer to it, and whether the wide grant still holds afterwards.
async fn refused_policy(config: PeerConfig, narrow: Value) -> (Value, bool) {
    refused_policy_line(config, &narrow.to_string()).await
}

/// [`refused_policy`] of a line written as it is.
async fn refused_policy_line(config: PeerConfig, narrow: &str) -> (Value, bool) {
    let server = Server::builder("bounds", "1.0.0")
        .feature_set(
            "alerts",
            "Alerts",
            &[Capability::PushEvents, Capability::Tools],
        )
        .peer_config(config)
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(256 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut lines = BufReader::new(read).lines();
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl":
                       {"version": "0.5", "pushEvents": true}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    send(&mut write, init).await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let policy = json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents", "tools"]}});
    send(&mut write, policy).await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    assert!(session.granted(Capability::PushEvents));
    write
        .write_all(format!("{narrow}\n").as_bytes())
        .await
        .unwrap();
    let answer = recv(&mut lines).await;
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"}),
    )
    .await;
    assert_eq!(recv(&mut lines).await["id"], "sync");
    (answer, session.granted(Capability::PushEvents))
}

/// The answer names the bound and says the policy was not applied.
fn assert_refused(answer: &Value, reason: &str, limit: usize) {
    assert_eq!(answer["id"], "narrow", "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let data = &answer["error"]["data"];
    assert_eq!(data["reason"], reason, "{answer}");
    assert_eq!(data["limit"], limit, "{answer}");
    assert_eq!(data["method"], "featureSets/update", "{answer}");
    assert_eq!(data["applied"], false, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not applied"), "{message}");
}

/// §6.7, §6.4: a narrowing policy Request over `max_message_size`, discarded unread, is
/// answered `-32600` naming the bound and that no policy was applied, and the wide grant
/// before it no longer holds.
#[tokio::test]
async fn s6_7_a_policy_request_over_the_size_bound_grants_nothing_and_says_so() {
    let limit = 4096;
    let config = PeerConfig {
        max_message_size: limit,
        ..PeerConfig::default()
    };
    let narrow = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"], "pad": "x".repeat(8192)}});
    let (answer, wide) = refused_policy(config, narrow).await;
    assert_refused(&answer, "max_message_size", limit);
    assert!(
        !wide,
        "the grant before an unread narrowing still holds: {answer}"
    );
}

/// §6.7, §6.4: the same for one over `max_parsed_cost`, refused unbuilt.
#[tokio::test]
async fn s6_7_a_policy_request_over_the_parse_cost_grants_nothing_and_says_so() {
    let limit = 2000;
    let config = PeerConfig {
        max_parsed_cost: limit,
        ..PeerConfig::default()
    };
    let many: Vec<Value> = (0..2000).map(|_| json!({})).collect();
    let narrow = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"], "pad": many}});
    let (answer, wide) = refused_policy(config, narrow).await;
    assert_refused(&answer, "parsed_cost", limit);
    assert!(
        !wide,
        "the grant before an unread narrowing still holds: {answer}"
    );
}

/// §6.7, §6.4: a narrowing policy Request the parser refuses for what follows it on its
/// line (junk after it, alone or as a batch's entry) is answered `-32700` under its id
/// (the parse-error rule) saying the policy was not applied, and the wide grant before it
/// no longer holds. Before, the `-32700` went out and the server's state was never told.
#[tokio::test]
async fn s6_7_a_policy_request_refused_by_the_parser_grants_nothing_and_says_so() {
    let narrow = r#"{"jsonrpc":"2.0","id":"narrow","method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#;
    for line in [format!("{narrow} x"), format!("[{narrow}] x")] {
        let (answer, wide) = refused_policy_line(PeerConfig::default(), &line).await;
        let answer = match answer {
            Value::Array(mut a) if a.len() == 1 => a.remove(0),
            other => other,
        };
        assert_eq!(answer["id"], "narrow", "{line}: {answer}");
        assert_eq!(answer["error"]["code"], -32700, "{line}: {answer}");
        assert_eq!(
            answer["error"]["data"]["applied"], false,
            "{line}: {answer}"
        );
        assert!(
            !wide,
            "{line}: the grant before an unread narrowing still holds"
        );
    }
}

/// §6.7: one refused at the envelope (`"jsonrpc": "1.0"`; the grant is dropped, as
/// `server_refused_policy.rs` pins) says so too: its `-32600`'s data has `applied: false`.
#[tokio::test]
async fn s6_7_a_policy_request_refused_at_the_envelope_says_it_was_not_applied() {
    let narrow = json!({"jsonrpc": "1.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}});
    let (answer, wide) = refused_policy(PeerConfig::default(), narrow).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["error"]["data"]["applied"], false, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not applied"), "{message}");
    assert!(!wide);
}

/// §6.7, §6.4: a narrowing policy Request inside a batch refused whole for a bound (over
/// `max_parsed_cost`, over `max_batch_entries`, or for the characters before it) grants
/// nothing either: the batch was refused unread (one answer under a null id), and it
/// named the policy. Before, only a single message was looked at, and the grant held.
#[tokio::test]
async fn s6_7_a_policy_request_in_a_batch_refused_for_a_bound_grants_nothing() {
    let narrow = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}});
    let many: Vec<Value> = (0..2000).map(|_| json!({})).collect();
    let costly = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"], "pad": many}});
    let ping = json!({"jsonrpc": "2.0", "id": "x", "method": "ping"});
    let cases = [
        (
            PeerConfig {
                max_parsed_cost: 2000,
                ..PeerConfig::default()
            },
            json!([costly]).to_string(),
        ),
        (
            PeerConfig {
                max_batch_entries: 1,
                ..PeerConfig::default()
            },
            json!([narrow, ping]).to_string(),
        ),
        (PeerConfig::default(), format!("\u{a0}{}", json!([narrow]))),
    ];
    for (config, line) in cases {
        let (answer, wide) = refused_policy_line(config, &line).await;
        assert!(answer["id"].is_null(), "{answer}");
        assert!(
            !wide,
            "the grant before an unread narrowing in a batch still holds: {answer}"
        );
    }
}

/// §6.7, §6.4: the same for a batch over `max_message_size`, discarded unread, whose
/// policy entry the line reader saw as the bytes streamed past (first, or after a response
/// to nobody's request).
#[tokio::test]
async fn s6_7_a_policy_request_in_a_batch_over_the_size_bound_grants_nothing() {
    let narrow = json!({"jsonrpc": "2.0", "id": "n", "method": "featureSets/update",
        "params": {"effectiveCapabilities": [], "pad": "x".repeat(8192)}});
    let answer = json!({"jsonrpc": "2.0", "id": 77, "result": {}});
    for batch in [json!([narrow]), json!([answer, narrow])] {
        let config = PeerConfig {
            max_message_size: 4096,
            ..PeerConfig::default()
        };
        let (answer, wide) = refused_policy(config, batch).await;
        assert!(answer["id"].is_null(), "{answer}");
        assert_eq!(
            answer["error"]["data"]["reason"], "max_message_size",
            "{answer}"
        );
        assert!(
            !wide,
            "the grant before an unread narrowing in a batch still holds: {answer}"
        );
    }
}

/// §6.7, §6.4: a policy Request on a line of several messages past
/// `PeerConfig::max_batch_entries` (one message per line), refused unread with the one
/// `-32600` under a null id, grants nothing either.
#[tokio::test]
async fn s6_7_a_policy_request_past_the_messages_per_line_grants_nothing() {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/note"});
    let narrow = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}});
    let config = PeerConfig {
        max_batch_entries: 2,
        ..PeerConfig::default()
    };
    let line = format!("{note} {note} {narrow}");
    let (answer, wide) = refused_policy_line(config, &line).await;
    assert!(answer["id"].is_null(), "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "messages_per_line",
        "{answer}"
    );
    assert!(
        !wide,
        "the grant before an unread narrowing past the bound still holds: {answer}"
    );
}

/// §6.7, §6.4: the same on a line of several messages discarded for its size, the policy
/// Request past `max_batch_entries` (read only by its envelope as the bytes streamed past).
#[tokio::test]
async fn s6_7_a_policy_request_past_the_messages_of_a_discarded_line_grants_nothing() {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/note",
        "params": {"pad": "x".repeat(5000)}});
    let narrow = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}});
    let config = PeerConfig {
        max_batch_entries: 2,
        max_message_size: 4096,
        ..PeerConfig::default()
    };
    let line = format!("{note} {note} {narrow}");
    let (answer, wide) = refused_policy_line(config, &line).await;
    assert!(answer["id"].is_null(), "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "messages_per_line",
        "{answer}"
    );
    assert!(
        !wide,
        "the grant before an unread narrowing past the bound still holds: {answer}"
    );
}

/// §6.7, §6.4: the same for a batch the shared budget for partial messages refused part
/// read, its policy entry seen before the refusal.
#[tokio::test]
async fn s6_7_a_policy_request_in_a_batch_over_the_budget_grants_nothing() {
    use mcpl::transport::{MessageBudget, UNBUDGETED_BYTES};
    let budget = 4096;
    let narrow = json!({"jsonrpc": "2.0", "id": "n", "method": "featureSets/update",
        "params": {"effectiveCapabilities": []}});
    let pad = json!({"jsonrpc": "2.0", "method": "notifications/note",
        "params": {"pad": "x".repeat(UNBUDGETED_BYTES + budget + 1000)}});
    let config = PeerConfig {
        message_budget: Some(MessageBudget::new(budget)),
        ..PeerConfig::default()
    };
    let (answer, wide) = refused_policy(config, json!([narrow, pad])).await;
    assert!(answer["id"].is_null(), "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "message_budget",
        "{answer}"
    );
    assert!(
        !wide,
        "the grant before an unread narrowing in a batch still holds: {answer}"
    );
}
