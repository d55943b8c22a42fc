//! A policy Notification (`featureSets/update` with no `id`) the server's peer refuses
//! before the server's state can read it: over `PeerConfig::max_message_size`, over
//! `PeerConfig::max_parsed_cost`, or refused by the parser for what follows it on its line.
//! Over a real transport (JSON lines on a pipe), the host side written by hand.
//!
//! Reading (§6.7: a narrowing Notification is applied at once, whatever its carrier; §6.4:
//! the derivation fails closed): the server cannot see what an unread Notification asked,
//! so it may be a narrowing, and nothing is granted until the next policy Request is read,
//! as for a policy Request refused unread (`server_policy_bounds.rs`). A Notification is
//! never answered (JSON-RPC 2.0 §4.1), so the server's user is told by a diagnostic
//! (`policy_malformed`, form Notification). Before, the refusal was only reported by the
//! peer and the wide grant held: a capability the Notification may have withdrawn was
//! still used.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::peer::PeerConfig;
use mcpl::policy::Form;

use mcpl::server::{PushEvent, Server};
use mcpl::session::ServerDiagnostic;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const GUARD: Duration = Duration::from_secs(20);

type Lines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;
type Write = tokio::io::WriteHalf<tokio::io::DuplexStream>;

async fn send_line(w: &mut Write, line: &str) {
    w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
}

async fn recv(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the server said nothing")
        .unwrap()
        .expect("the server is up");
    serde_json::from_str(&line).unwrap()
}

/// Grants `pushEvents` and `tools`, writes `narrow` (a policy Notification the peer refuses
/// unread), then has the server push an event: what the host saw of the push (`None`:
/// the push was refused before anything was written), whether the server still counts
/// `pushEvents` granted, and the server's diagnostics from the narrowing on.
async fn push_after(config: PeerConfig, narrow: &str) -> (Option<Value>, bool, Vec<String>) {
    let server = Server::builder("unread", "1.0.0")
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
    let mut diagnostics = session.diagnostics();
    let mut lines = BufReader::new(read).lines();
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl":
                       {"version": "0.5", "pushEvents": true}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    send_line(&mut write, &init.to_string()).await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send_line(&mut write, &initialized.to_string()).await;
    let policy = json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents", "tools"]}});
    send_line(&mut write, &policy.to_string()).await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    assert!(session.granted(Capability::PushEvents));
    send_line(&mut write, narrow).await;
    // Nothing answers a Notification: a ping behind it, answered, says it was taken. A
    // line the parser refuses is answered `-32700` under a null id (JSON-RPC 2.0 §5.1), one
    // refused at the envelope `-32600`.
    let ping = json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"});
    send_line(&mut write, &ping.to_string()).await;
    let mut answer = recv(&mut lines).await;
    if let Value::Array(answers) = &answer {
        // A batch's requests refused with it, each `-32700` under its id.
        assert!(
            answers.iter().all(|a| a["error"]["code"] == -32700),
            "{answer}"
        );
        answer = recv(&mut lines).await;
    } else if answer["id"].is_null() {
        let code = answer["error"]["code"].as_i64();
        assert!(matches!(code, Some(-32700 | -32600)), "{answer}");
        answer = recv(&mut lines).await;
    }
    assert_eq!(answer["id"], "sync", "{answer}");
    let granted = session.granted(Capability::PushEvents);
    let push = session.push_event(PushEvent::text("alerts", "after the narrowing"));
    let seen = tokio::select! {
        r = push => {
            assert!(r.is_err(), "the push succeeded: {r:?}");
            None
        }
        v = recv(&mut lines) => Some(v),
    };
    let mut said = Vec::new();
    while let Ok(d) = diagnostics.try_recv() {
        if let ServerDiagnostic::PolicyMalformed {
            form: Form::Notification,
            error,
        } = d
        {
            said.push(error);
        }
    }
    (seen, granted, said)
}

fn assert_fails_closed((seen, granted, said): (Option<Value>, bool, Vec<String>), what: &str) {
    assert!(
        seen.is_none(),
        "{what}: the event went out under the grant an unread narrowing may have withdrawn: \
         {seen:?}"
    );
    assert!(
        !granted,
        "{what}: the grant before the narrowing still holds"
    );
    assert_eq!(said.len(), 1, "{what}: the user is told once: {said:?}");
    assert!(said[0].contains("§6.7"), "{what}: {said:?}");
}

/// §6.7, §6.4: a policy Notification over `max_message_size`, discarded unread, drops the
/// grant: the server's next push is refused, and its user told why.
#[tokio::test]
async fn s6_7_a_policy_notification_over_the_size_bound_grants_nothing() {
    let config = PeerConfig {
        max_message_size: 4096,
        ..PeerConfig::default()
    };
    let narrow = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"], "pad": "x".repeat(8192)}});
    assert_fails_closed(push_after(config, &narrow.to_string()).await, "oversized");
}

/// §6.7, §6.4: the same for one over `max_parsed_cost`, refused unbuilt.
#[tokio::test]
async fn s6_7_a_policy_notification_over_the_parse_cost_grants_nothing() {
    let config = PeerConfig {
        max_parsed_cost: 2000,
        ..PeerConfig::default()
    };
    let many: Vec<Value> = (0..2000).map(|_| json!({})).collect();
    let narrow = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"], "pad": many}});
    assert_fails_closed(push_after(config, &narrow.to_string()).await, "too costly");
}

/// §6.7, §6.4: the same for one the parser refuses (junk after it on its line; a text cut
/// short).
#[tokio::test]
async fn s6_7_a_policy_notification_refused_by_the_parser_grants_nothing() {
    let narrow =
        r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["alerts"]}}"#;
    let cut = &narrow[..narrow.len() - 3];
    for line in [format!("{narrow} x"), cut.to_owned()] {
        let got = push_after(PeerConfig::default(), &line).await;
        assert_fails_closed(got, &line);
    }
}

/// The same Notification read: its narrowing is applied (the feature set disabled), not a
/// grant of nothing: the test above fails for the refusal, not for the narrowing.
#[tokio::test]
async fn s6_7_a_policy_notification_read_is_applied_as_it_says() {
    let narrow =
        r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["alerts"]}}"#;
    let (seen, granted, said) = push_after(PeerConfig::default(), narrow).await;
    assert!(granted, "a read narrowing of a feature set keeps the grant");
    assert!(said.is_empty(), "{said:?}");
    assert!(
        seen.is_none(),
        "the disabled feature set's event went out: {seen:?}"
    );
}

/// §6.7, §6.4: a policy Notification refused at the envelope (`"jsonrpc": "1.0"`) is
/// answered `-32600` under a null id (JSON-RPC 2.0 §5) and grants nothing as well; the
/// server's user is told of a Notification, not of a Request (readiness is kept: only a
/// Request sets it).
#[tokio::test]
async fn s6_7_a_policy_notification_refused_at_the_envelope_grants_nothing() {
    let narrow =
        r#"{"jsonrpc":"1.0","method":"featureSets/update","params":{"disabled":["alerts"]}}"#;
    assert_fails_closed(push_after(PeerConfig::default(), narrow).await, "envelope");
}

/// §6.7, §6.4: the same for one that is an entry of a batch the parser refuses for what
/// follows it on its line (its requests answered `-32700` under their ids).
#[tokio::test]
async fn s6_7_a_policy_notification_in_a_batch_refused_by_the_parser_grants_nothing() {
    let narrow =
        r#"[{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["alerts"]}}] x"#;
    assert_fails_closed(push_after(PeerConfig::default(), narrow).await, "batch");
}
