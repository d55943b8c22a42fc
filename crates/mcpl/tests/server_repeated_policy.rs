//! A `featureSets/update` that names a member twice anywhere in its text, against a
//! `Server`, over a real pipe (raw JSON lines, every byte written by the test).
//!
//! serde_json keeps the last of repeated names, so before, `"effectiveCapabilities":[]`
//! then `"effectiveCapabilities":["tools"]` granted `tools`, and `"disabled":["work"],
//! "disabled":[]` disabled nothing, silently, while a validator in between reading the first
//! saw another policy. §5.4: a policy whose meaning is in doubt is malformed, fail closed;
//! I-JSON (RFC 7493 §2.3) forbids the repeat, as `mcpl validate` does for manifests. The
//! message is refused as an Invalid Request (`-32600` under its id; reported either way) and
//! never handled, as one naming `params` twice is (`jsonrpc::doubled`). The hot path
//! (`tools/call`) is not scanned: a repeat in its arguments is read as its last, as before.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::jsonrpc::{Message, ParseError};
use mcpl::protocol::handshake::{ToolsCallParams, ToolsCallResult};
use mcpl::server::{Server, ServerDiagnostic, Session};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use tokio::sync::broadcast;

/// The host's end of a pipe to a started server, and the session's diagnostics.
struct RawHost {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    diagnostics: broadcast::Receiver<ServerDiagnostic>,
    _session: Session,
}

impl RawHost {
    /// A server with one feature set `work` (`tools`) and a tool `echo` answering the
    /// arguments' `say` member, started; `initialize` and `notifications/initialized` sent.
    async fn start() -> RawHost {
        let server = Server::builder("repeated", "1")
            .feature_set("work", "Work", &[Capability::Tools])
            .tool(
                "echo",
                "Echo",
                json!({"type": "object"}),
                |_s: Session, p: ToolsCallParams| async move {
                    let args = p.arguments.unwrap_or_default();
                    let say = args.get("say").and_then(Value::as_str).unwrap_or("?");
                    let say = say.to_owned();
                    Ok(ToolsCallResult::text(say))
                },
            )
            .build()
            .expect("server builds");
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let session = server.start(Transport::lines(br, bw, "test"));
        let mut host = RawHost {
            lines: BufReader::new(ar).lines(),
            write: aw,
            diagnostics: session.diagnostics(),
            _session: session,
        };
        host.send(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},"clientInfo":{"name":"raw","version":"1"}}}"#,
        )
        .await;
        host.recv().await;
        host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        host
    }

    async fn send(&mut self, line: &str) {
        let line = format!("{line}\n");
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    async fn recv(&mut self) -> Value {
        let line = self.lines.next_line().await.expect("read").expect("a line");
        serde_json::from_str(&line).expect("the server writes JSON")
    }

    /// `tools/call echo` as request `id`: its answer.
    async fn echo(&mut self, id: u64) -> Value {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"say":"hi"}}}}}}"#
        ))
        .await;
        self.recv().await
    }

    /// The reasons of the invalid messages the connection reported so far.
    fn invalid_reasons(&mut self) -> Vec<String> {
        let mut reasons = Vec::new();
        while let Ok(d) = self.diagnostics.try_recv() {
            if let ServerDiagnostic::Connection(mcpl::peer::Diagnostic::InvalidMessage {
                reason,
                ..
            }) = d
            {
                reasons.push(reason);
            }
        }
        reasons
    }
}

/// §5.4: the initial policy Request naming `effectiveCapabilities` twice (the wide list
/// last) is refused `-32600` under its id, reported, and grants nothing: the server is not
/// made ready by it. A driver of the sans-I/O machines reads it the same way
/// (`Message::parse`). The same policy written once is taken.
#[tokio::test]
async fn s5_4_a_policy_request_naming_a_member_twice_is_refused_and_grants_nothing() {
    let doubled = r#"{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{"effectiveCapabilities":[],"effectiveCapabilities":["tools"]}}"#;
    let mut host = RawHost::start().await;
    host.send(doubled).await;
    let answer = host.recv().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let said = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("effectiveCapabilities"), "{answer}");
    // Nothing granted: `tools/call` is refused, not run.
    let call = host.echo(2).await;
    assert!(call["error"].is_object(), "{call}");
    let reasons = host.invalid_reasons();
    assert!(
        reasons.iter().any(|r| r.contains("effectiveCapabilities")),
        "{reasons:?}"
    );
    let Err(ParseError::Invalid(e)) = Message::parse(doubled) else {
        panic!("Message::parse took {doubled}");
    };
    assert_eq!(e.id, Some(1_u64.into()));

    // The escaped spelling of the same name is the same name.
    let escaped = r#"{"jsonrpc":"2.0","id":3,"method":"featureSets/update","params":{"effectiveCapabilities":[],"effective\u0043apabilities":["tools"]}}"#;
    host.send(escaped).await;
    let answer = host.recv().await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");

    // Written once, the same request is the policy.
    host.send(r#"{"jsonrpc":"2.0","id":4,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
        .await;
    let answer = host.recv().await;
    assert_eq!(answer["result"]["accepted"], true, "{answer}");
    let call = host.echo(5).await;
    assert_eq!(call["result"]["content"][0]["text"], "hi", "{call}");

    // §6.7: refused once a grant is in force, it may have been a reduction: the server
    // holds nothing from it on (a policy the server could not read, as one with unreadable
    // params), never the grant before it.
    host.send(r#"{"jsonrpc":"2.0","id":6,"method":"featureSets/update","params":{"effectiveCapabilities":[],"effectiveCapabilities":["tools"]}}"#)
        .await;
    let answer = host.recv().await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let call = host.echo(7).await;
    assert_eq!(
        call["error"]["code"], -32002,
        "tools no longer granted: {call}"
    );
}

/// §6.7: a policy Notification naming `disabled` twice (the empty list last) is refused
/// (`-32600` under a null id, as a notification naming `params` twice is) and reported,
/// never applied as its last copy would be read; the same in a batch entry, whose request
/// form is answered `-32600` under its id beside the other entries' answers.
#[tokio::test]
async fn s6_7_a_policy_notification_or_batch_entry_naming_a_member_twice_is_refused() {
    let mut host = RawHost::start().await;
    host.send(r#"{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
        .await;
    let answer = host.recv().await;
    assert_eq!(answer["result"]["accepted"], true, "{answer}");
    host.invalid_reasons();

    let notification = r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["work"],"disabled":[]}}"#;
    host.send(notification).await;
    // Answered `-32600` under a null id, as any message with a method gone wrong is
    // (JSON-RPC 2.0 §5, `jsonrpc::invalid_then`), then the call after it.
    let refused = host.recv().await;
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let call = host.echo(2).await;
    assert_eq!(call["id"], 2, "{call}");
    let reasons = host.invalid_reasons();
    assert!(
        reasons.iter().any(|r| r.contains("disabled")),
        "{reasons:?}"
    );
    assert!(
        Message::parse(notification).is_err(),
        "Message::parse took {notification}"
    );

    // Deeper inside the params, in a batch beside a plain request.
    host.send(r#"[{"jsonrpc":"2.0","id":3,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"],"enabled":["work"],"x":{"k":1,"k":2}}},{"jsonrpc":"2.0","id":4,"method":"ping"}]"#)
        .await;
    let batch = host.recv().await;
    let entries = batch
        .as_array()
        .unwrap_or_else(|| panic!("a batch answer: {batch}"));
    let refused = entries
        .iter()
        .find(|e| e["id"] == 3)
        .expect("id 3 answered");
    assert_eq!(refused["error"]["code"], -32600, "{batch}");
    let pinged = entries
        .iter()
        .find(|e| e["id"] == 4)
        .expect("id 4 answered");
    assert!(pinged["result"].is_object(), "{batch}");
}

/// The hot path is not scanned: a `tools/call` naming a member of its arguments twice is
/// run with the last, as serde_json reads it (no policy is decided by it).
#[tokio::test]
async fn a_tools_call_naming_an_argument_twice_is_run_as_read() {
    let mut host = RawHost::start().await;
    host.send(r#"{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
        .await;
    host.recv().await;
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"say":"first","say":"last"}}}"#)
        .await;
    let call = host.recv().await;
    assert_eq!(call["result"]["content"][0]["text"], "last", "{call}");
}
