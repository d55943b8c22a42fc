//! A policy message (`featureSets/update`, §6.7) the server's peer refuses unread, written
//! so that a reading of its bytes could miss it: its method written with JSON escapes
//! (`"featureSets\/update"`, `"featureSets\u002fupdate"`, which a parser reads as the
//! policy), or an entry of a discarded batch past what the reader keeps of its entries
//! (`MAX_BATCH_SUMMARY_BYTES`), or over WebSocket with its `method` after megabytes of
//! `params`. Over real transports (JSON lines on a pipe; a WebSocket on a pipe), the host
//! side written by hand.
//!
//! Reading (§6.7: reductions must be respected whatever the carrier; §6.4: fail closed):
//! whatever form the policy is written in, and wherever it is in what was refused, the
//! server cannot see what it asked, so nothing is granted until the next policy Request it
//! reads. Before, each of these left the grant before it standing.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::peer::PeerConfig;
use mcpl::server::Server;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A deadlock guard, never a synchronisation.
const GUARD: Duration = Duration::from_secs(60);

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

fn server(config: PeerConfig) -> Server {
    Server::builder("hidden", "1.0.0")
        .feature_set(
            "alerts",
            "Alerts",
            &[Capability::PushEvents, Capability::Tools],
        )
        .peer_config(config)
        .build()
        .unwrap()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl":
                       {"version": "0.5", "pushEvents": true}}},
                   "clientInfo": {"name": "host", "version": "0"}}})
}

fn wide() -> Value {
    json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents", "tools"]}})
}

/// Grants `pushEvents` over JSON lines, writes `line` (refused unread by the peer), then a
/// ping: the answers before the ping's, and whether `pushEvents` is still granted once the
/// ping was answered (every message before it was taken).
async fn granted_after(config: PeerConfig, line: &str) -> (Vec<Value>, bool) {
    let (host_end, server_end) = tokio::io::duplex(1024 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server(config).start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut lines = BufReader::new(read).lines();
    send_line(&mut write, &initialize().to_string()).await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send_line(&mut write, &initialized.to_string()).await;
    send_line(&mut write, &wide().to_string()).await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    assert!(session.granted(Capability::PushEvents));
    send_line(&mut write, line).await;
    let ping = json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"});
    send_line(&mut write, &ping.to_string()).await;
    let mut before = Vec::new();
    loop {
        let answer = recv(&mut lines).await;
        if answer["id"] == "sync" {
            break;
        }
        before.push(answer);
    }
    (before, session.granted(Capability::PushEvents))
}

/// The two escaped spellings of the policy's method (each read by a parser as the policy).
const ESCAPED: [&str; 2] = [r#""featureSets\/update""#, r#""featureSets\u002fupdate""#];

/// `v` written with its policy method spelled `escaped`.
fn spelled(v: &Value, escaped: &str) -> String {
    let text = v.to_string();
    assert!(text.contains("\"featureSets/update\""), "{text}");
    text.replace("\"featureSets/update\"", escaped)
}

/// §6.7, §6.4: a narrowing policy message whose method is written with JSON escapes,
/// refused unread for any reason the peer refuses one (its size, its parsed cost, the
/// parser, a batch's entries, a line of several past the bound, the budget), grants
/// nothing, in either form. Before, a refusal that looked for the method's bytes as
/// written (`policy_in`'s search, a discarded batch's entry reading) did not see it: the
/// grant before it stood.
#[tokio::test]
async fn s6_7_a_refused_policy_with_an_escaped_method_grants_nothing() {
    use mcpl::transport::{MessageBudget, UNBUDGETED_BYTES};
    let request = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": []}});
    let note = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"]}});
    let many: Vec<Value> = (0..2000).map(|_| json!({})).collect();
    let pad = "x".repeat(8192);
    let other = json!({"jsonrpc": "2.0", "method": "notifications/note"});
    let small = |max_message_size| PeerConfig {
        max_message_size,
        ..PeerConfig::default()
    };
    let cheap = PeerConfig {
        max_parsed_cost: 2000,
        ..PeerConfig::default()
    };
    let two = PeerConfig {
        max_batch_entries: 2,
        ..PeerConfig::default()
    };
    let budget = 4096;
    let budgeted = PeerConfig {
        message_budget: Some(MessageBudget::new(budget)),
        ..PeerConfig::default()
    };
    let over_budget = json!({"jsonrpc": "2.0", "method": "notifications/note",
        "params": {"pad": "x".repeat(UNBUDGETED_BYTES + budget + 1000)}});
    let mut standing = Vec::new();
    for form in [&request, &note] {
        let mut padded = form.clone();
        padded["params"]["pad"] = json!(pad);
        let mut costly = form.clone();
        costly["params"]["pad"] = json!(many);
        for escaped in ESCAPED {
            let it = spelled(form, escaped);
            let cases: Vec<(&str, PeerConfig, String)> = vec![
                ("over the size", small(4096), spelled(&padded, escaped)),
                ("over the cost", cheap.clone(), spelled(&costly, escaped)),
                ("the parser", PeerConfig::default(), format!("{it} x")),
                (
                    "a batch over the cost",
                    cheap.clone(),
                    format!("[{}]", spelled(&costly, escaped)),
                ),
                (
                    "a batch over the entries",
                    two.clone(),
                    format!("[{other},{other},{it}]"),
                ),
                (
                    "a batch the parser refused",
                    PeerConfig::default(),
                    format!("[{it}] x"),
                ),
                (
                    "a batch over the size",
                    small(4096),
                    format!("[{}]", spelled(&padded, escaped)),
                ),
                (
                    "past the messages of a line",
                    two.clone(),
                    format!("{other} {other} {it}"),
                ),
                (
                    "a batch over the budget",
                    budgeted.clone(),
                    format!("[{it},{over_budget}]"),
                ),
            ];
            for (what, config, line) in cases {
                let (_, granted) = granted_after(config, &line).await;
                if granted {
                    standing.push(format!("{what}, {escaped}, id {}", form["id"]));
                }
            }
        }
    }
    assert!(
        standing.is_empty(),
        "the grant before an unread policy still holds: {standing:#?}"
    );
}

/// The same lines with the method written plainly are the control: each grants nothing
/// (the test above fails for the spelling, not for the case).
#[tokio::test]
async fn s6_7_the_same_refusals_spelled_plainly_grant_nothing() {
    let note = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"]}});
    let other = json!({"jsonrpc": "2.0", "method": "notifications/note"});
    let two = PeerConfig {
        max_batch_entries: 2,
        ..PeerConfig::default()
    };
    for (config, line) in [
        (PeerConfig::default(), format!("{note} x")),
        (two, format!("[{other},{other},{note}]")),
    ] {
        let (answers, granted) = granted_after(config, &line).await;
        assert!(!granted, "{line}: {answers:?}");
    }
}

/// A response to nobody's request, its summary as a discarded batch's reader keeps it
/// about 40 bytes: 2,000 of them pass the 64 KiB kept of a batch's entries.
fn responses(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| json!({"jsonrpc": "2.0", "id": 100_000 + i, "result": {}}).to_string())
        .collect()
}

/// §6.7, §6.4: a policy entry of a batch discarded for its size, past the 64 KiB of entry
/// summaries its reader keeps (`MAX_BATCH_SUMMARY_BYTES`), grants nothing, in either
/// form: the reader sees every entry as it streams past, and a policy among those it could
/// not keep is still told. Before, it was dropped with them, and the grant stood.
#[tokio::test]
async fn s6_7_a_policy_entry_past_the_kept_summaries_of_a_discarded_batch_grants_nothing() {
    let request = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": []}});
    let note = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"]}});
    let config = PeerConfig {
        max_message_size: 64 * 1024,
        ..PeerConfig::default()
    };
    for form in [request, note] {
        let mut entries = responses(2000);
        entries.push(form.to_string());
        let line = format!("[{}]", entries.join(","));
        let (answers, granted) = granted_after(config.clone(), &line).await;
        assert!(
            !granted,
            "the grant before an unread policy past the kept summaries still holds: \
             {answers:?}"
        );
    }
}

/// §6.7, §6.4: the same for a policy message on a line of several messages past the 64 KiB
/// of summaries kept of them: the line discarded for its size (its messages read by their
/// envelopes as they stream past), or held and read past `max_batch_entries`. Before, the
/// reader stopped reading at the room's end (a discarded line), or looked for the method's
/// bytes as written (a held line): past them, a policy was not told, or its escaped
/// spelling was not.
#[tokio::test]
async fn s6_7_a_policy_past_the_kept_summaries_of_a_line_of_several_grants_nothing() {
    let request = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": []}});
    let note = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"]}});
    let discarded = PeerConfig {
        max_message_size: 64 * 1024,
        max_batch_entries: 4000,
        ..PeerConfig::default()
    };
    let held = PeerConfig {
        max_batch_entries: 2,
        ..PeerConfig::default()
    };
    let mut standing = Vec::new();
    for form in [request, note] {
        for (what, config) in [("discarded", &discarded), ("held", &held)] {
            for escaped in ESCAPED {
                let mut messages = responses(2000);
                messages.push(spelled(&form, escaped));
                let line = messages.join(" ");
                let (_, granted) = granted_after(config.clone(), &line).await;
                if granted {
                    standing.push(format!("{what}, {escaped}, id {}", form["id"]));
                }
            }
        }
    }
    assert!(
        standing.is_empty(),
        "the grant before an unread policy still holds: {standing:#?}"
    );
}

/// The same batch without the policy keeps the grant: dropping it takes the policy, not
/// the batch's size.
#[tokio::test]
async fn a_discarded_batch_past_the_kept_summaries_without_the_policy_keeps_the_grant() {
    let config = PeerConfig {
        max_message_size: 64 * 1024,
        ..PeerConfig::default()
    };
    let line = format!("[{}]", responses(2001).join(","));
    let (answers, granted) = granted_after(config, &line).await;
    assert!(granted, "{answers:?}");
}

type Client = tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>;

/// The next text message from the server, as JSON.
async fn next_text(client: &mut Client) -> Value {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    loop {
        let message = tokio::time::timeout(GUARD, client.next())
            .await
            .expect("the server said nothing")
            .expect("the server is up")
            .expect("a WebSocket message");
        if let WsMessage::Text(t) = message {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// [`granted_after`] over a WebSocket: `message` sent as one text frame.
async fn granted_after_ws(config: PeerConfig, message: String) -> (Vec<Value>, bool) {
    let frame = tokio_tungstenite::tungstenite::Message::text(message);
    granted_after_frame(config, frame).await
}

/// [`granted_after_ws`] of any WebSocket frame.
async fn granted_after_frame(
    config: PeerConfig,
    frame: tokio_tungstenite::tungstenite::Message,
) -> (Vec<Value>, bool) {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let (server_io, client_io) = tokio::io::duplex(1024 * 1024);
    let (transport, client) = tokio::join!(
        mcpl::transport::ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let session = server(config).start(transport.unwrap());
    let mut client = client.unwrap().0;
    let text = |v: Value| WsMessage::text(v.to_string());
    client.send(text(initialize())).await.unwrap();
    assert_eq!(next_text(&mut client).await["id"], "i");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client.send(text(initialized)).await.unwrap();
    client.send(text(wide())).await.unwrap();
    assert_eq!(next_text(&mut client).await["result"]["accepted"], true);
    client.send(frame).await.unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"});
    client.send(text(ping)).await.unwrap();
    let mut before = Vec::new();
    loop {
        let answer = next_text(&mut client).await;
        if answer["id"] == "sync" {
            break;
        }
        before.push(answer);
    }
    (before, session.granted(Capability::PushEvents))
}

/// §6.7, §6.4: over WebSocket, a policy message over `max_message_size` whose `method` comes
/// after megabytes of `params` (far past the first bytes a reader keeps of what is no
/// object, `DISCARDED_HEAD_BYTES`) grants nothing, in either form and spelling, alone or
/// in a batch: the frame's message is read by its envelope from every byte of it.
#[tokio::test]
async fn s6_7_over_websocket_a_policy_with_its_method_last_grants_nothing() {
    let config = PeerConfig {
        max_message_size: 4096,
        ..PeerConfig::default()
    };
    let pad = "x".repeat(64 * 1024);
    let mut standing = Vec::new();
    for id in [r#""id":"narrow","#, ""] {
        for method in [r#""featureSets/update""#, ESCAPED[0], ESCAPED[1]] {
            let message = format!(
                r#"{{"jsonrpc":"2.0",{id}"params":{{"disabled":["alerts"],"pad":"{pad}"}},"method":{method}}}"#
            );
            for text in [message.clone(), format!("[{message}]")] {
                let (answers, granted) = granted_after_ws(config.clone(), text).await;
                if granted {
                    standing.push(format!("{id} {method}: {answers:?}"));
                }
            }
        }
    }
    assert!(
        standing.is_empty(),
        "the grant before an unread policy still holds: {standing:#?}"
    );
}

/// Grants `pushEvents` over JSON lines, writes `first` (the start of a line, past the
/// budget for partial messages), waits for the server to report the line refused when
/// `cut` (a line whose part read tells the refusal: yielded at once), then the line's
/// `rest` and a ping: whether `pushEvents` is still granted once the ping was answered.
/// What followed the cut was then never seen by the reader. Without `cut` (a single object
/// whose part read shows no `id`: reported only were it yielded then), the line reader
/// reads the rest into its envelope and refuses it at its end.
async fn granted_after_cut(config: PeerConfig, first: &str, rest: &str, cut: bool) -> bool {
    use mcpl::session::ServerDiagnostic;
    let (host_end, server_end) = tokio::io::duplex(1024 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server(config).start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let mut diagnostics = session.diagnostics();
    let mut lines = BufReader::new(read).lines();
    send_line(&mut write, &initialize().to_string()).await;
    assert_eq!(recv(&mut lines).await["id"], "i");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send_line(&mut write, &initialized.to_string()).await;
    send_line(&mut write, &wide().to_string()).await;
    assert_eq!(recv(&mut lines).await["result"]["accepted"], true);
    assert!(session.granted(Capability::PushEvents));
    write.write_all(first.as_bytes()).await.unwrap();
    if cut {
        loop {
            let d = tokio::time::timeout(GUARD, diagnostics.recv())
                .await
                .expect("the refusal was not reported")
                .unwrap();
            if let ServerDiagnostic::Connection(mcpl::peer::Diagnostic::OverBudget { .. }) = d {
                break;
            }
        }
    }
    send_line(&mut write, rest).await;
    let ping = json!({"jsonrpc": "2.0", "id": "sync", "method": "ping"});
    send_line(&mut write, &ping.to_string()).await;
    while recv(&mut lines).await["id"] != "sync" {}
    session.granted(Capability::PushEvents)
}

/// §6.7, §6.4: a line the shared budget for partial messages refused part read, whose read
/// part cannot tell it held no policy (a batch cut before its end), grants nothing: it may
/// have been a narrowing nobody read. A single object showing no `method` nor `id` before
/// the cut is read to its end by its envelope (its method comes after: the policy, seen),
/// and grants nothing either. One naming another method keeps the grant (the control).
/// Before, the first two were reported only, and the grant stood.
#[tokio::test]
async fn s6_7_a_line_refused_part_read_that_may_hide_the_policy_grants_nothing() {
    use mcpl::transport::{MessageBudget, UNBUDGETED_BYTES};
    let budget = 4096;
    let config = PeerConfig {
        message_budget: Some(MessageBudget::new(budget)),
        ..PeerConfig::default()
    };
    let pad = "x".repeat(UNBUDGETED_BYTES + budget + 1000);
    let answer = json!({"jsonrpc": "2.0", "id": 5, "result": {}});
    let late = format!(r#"{{"jsonrpc":"2.0","params":{{"disabled":["alerts"],"pad":"{pad}"#);
    let rest = r#""},"method":"featureSets/update"}"#;
    let batch = format!("[{answer},{late}");
    for (first, rest, cut) in [
        (late.clone(), rest.to_owned(), false),
        (batch, format!("{rest}]"), true),
    ] {
        let granted = granted_after_cut(config.clone(), &first, &rest, cut).await;
        assert!(!granted, "{}", &first[..40]);
    }
    let note =
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/note","params":{{"pad":"{pad}"#);
    let granted = granted_after_cut(config, &note, r#""}}"#, false).await;
    assert!(
        granted,
        "a refused message naming another method keeps the grant"
    );
}

/// §6.7, §6.4: a batch that is no text (a WebSocket binary frame, RFC 8259 §8.1) holding the
/// policy, in either form and spelling, grants nothing: the frame's envelope is read
/// leniently, each entry's too (`Discarded::batch_failures`), and it is answered `-32700`
/// under a null id as a text that does not parse. A binary batch naming another method
/// keeps the grant (the control).
#[tokio::test]
async fn s6_7_a_binary_batch_holding_the_policy_grants_nothing() {
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let request = json!({"jsonrpc": "2.0", "id": "narrow", "method": "featureSets/update",
        "params": {"effectiveCapabilities": []}});
    let note = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["alerts"]}});
    let mut standing = Vec::new();
    for form in [&request, &note] {
        for escaped in [r#""featureSets/update""#, ESCAPED[0], ESCAPED[1]] {
            let batch = format!("[{}]", spelled(form, escaped));
            let frame = WsMessage::binary(batch.into_bytes());
            let (answers, granted) = granted_after_frame(PeerConfig::default(), frame).await;
            if granted {
                standing.push(format!("{escaped}, id {}: {answers:?}", form["id"]));
            }
            assert!(
                answers
                    .iter()
                    .any(|a| a["id"].is_null() && a["error"]["code"] == -32700),
                "{answers:?}"
            );
        }
    }
    assert!(
        standing.is_empty(),
        "the grant before an unread policy still holds: {standing:#?}"
    );
    let other = json!([{"jsonrpc": "2.0", "method": "notifications/note"}]).to_string();
    let frame = WsMessage::binary(other.into_bytes());
    let (answers, granted) = granted_after_frame(PeerConfig::default(), frame).await;
    assert!(granted, "{answers:?}");
}

/// §6.7, §6.4: a batch the parser refused with nothing of it read (cut inside its first
/// entry, no request read whole before the error: `batch_requests_before` finds none)
/// whose entry shows the policy grants nothing: read by each entry's envelope as far as
/// the batch reads (`jsonrpc::head::policy_in`). Answered `-32700` under a null id. One
/// cut the same way naming another method keeps the grant (the control).
#[tokio::test]
async fn s6_7_an_unparsed_batch_with_nothing_read_holding_the_policy_grants_nothing() {
    let mut standing = Vec::new();
    for id in [r#""id":"narrow","#, ""] {
        for method in [r#""featureSets/update""#, ESCAPED[0], ESCAPED[1]] {
            for cut in [
                format!(r#"[{{"jsonrpc":"2.0",{id}"method":{method},"params":{{"disabled":["#),
                format!(r#"[{{"jsonrpc":"2.0",{id}"method":{method},"params":{{}}}},"#),
            ] {
                let (answers, granted) = granted_after(PeerConfig::default(), &cut).await;
                assert!(
                    answers
                        .iter()
                        .any(|a| a["id"].is_null() && a["error"]["code"] == -32700),
                    "{cut}: {answers:?}"
                );
                if granted {
                    standing.push(cut);
                }
            }
        }
    }
    assert!(
        standing.is_empty(),
        "the grant before an unread policy still holds: {standing:#?}"
    );
    let other = r#"[{"jsonrpc":"2.0","method":"notifications/note","params":{"a":["#;
    let (answers, granted) = granted_after(PeerConfig::default(), other).await;
    assert!(granted, "{answers:?}");
}

/// §6.7, §6.4: a policy Request naming `id` twice, in a batch the parser refused for what
/// follows it whose other request was read (answered `-32700` under its id), grants
/// nothing: its id is in doubt, so it is answered under none, but it is the policy all the
/// same; so is one whose id is none (`null`) or an earlier entry's. Before, such an entry
/// was skipped whole, the policy with it.
#[tokio::test]
async fn s6_7_a_policy_with_its_id_in_doubt_in_a_batch_refused_by_the_parser_grants_nothing() {
    for id in [r#""id":1,"id":2"#, r#""id":null"#, r#""id":3"#] {
        let line = format!(
            r#"[{{"jsonrpc":"2.0","id":3,"method":"ping"}},{{"jsonrpc":"2.0",{id},"method":"featureSets/update","params":{{"effectiveCapabilities":[]}}}}] x"#
        );
        let (answers, granted) = granted_after(PeerConfig::default(), &line).await;
        assert!(!granted, "{id}: {answers:?}");
    }
}
