//! Issue #24: a `Server` encodes a typed handler's result already framed as the response
//! line of its request's integer id (`Encoded::response_for`), and writes that line as it is
//! when it answers that id. These wire tests pin that the host cannot tell: every answer is,
//! byte for byte, the line the unframed result makes for its own id (`Encoded::response`),
//! for integer ids at both ends of 64 bits, negative ones, string ones, answers that come
//! later and out of order while others are answered at once, and answers inside a batch
//! (JSON-RPC 2.0 §5, §6).
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::{Encoded, RequestId};
use mcpl::protocol::handshake::{ToolsCallParams, ToolsCallResult};
use mcpl::server::{Server, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use tokio::sync::watch;

/// The `text` argument of `p`.
fn text_of(p: &ToolsCallParams) -> String {
    p.arguments
        .as_ref()
        .and_then(|a| a.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A server whose `echo` answers its `text` argument at once, and whose `wait` answers it
/// once `gate` reaches its `n` argument (pending until then, so it is answered later, from
/// its own task).
fn server(gate: watch::Receiver<u64>) -> Server {
    Server::builder("framed", "1")
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s: Session, p: ToolsCallParams| async move { Ok(ToolsCallResult::text(text_of(&p))) },
        )
        .tool(
            "wait",
            "Wait",
            json!({"type": "object"}),
            move |_s: Session, p: ToolsCallParams| {
                let mut gate = gate.clone();
                async move {
                    let n = p
                        .arguments
                        .as_ref()
                        .and_then(|a| a.get("n"))
                        .and_then(Value::as_u64)
                        .unwrap_or_default();
                    let _ = gate.wait_for(|g| *g >= n).await;
                    Ok(ToolsCallResult::text(text_of(&p)))
                }
            },
        )
        .build()
        .expect("server builds")
}

struct RawHost {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
}

impl RawHost {
    async fn send(&mut self, line: &str) {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
    }

    async fn recv_line(&mut self) -> String {
        self.lines.next_line().await.expect("read").expect("line")
    }
}

/// An MCP host (no MCPL, so `tools/call` is not gated) connected to [`server`].
async fn connect(gate: watch::Receiver<u64>) -> (RawHost, Session) {
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server(gate).start(mcpl::transport::Transport::lines(sr, sw, "test pipe"));
    let (r, w) = tokio::io::split(host_end);
    let mut host = RawHost {
        lines: BufReader::new(r).lines(),
        write: w,
    };
    host.send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    )
    .await;
    let init: Value = serde_json::from_str(&host.recv_line().await).expect("JSON");
    assert!(init.get("result").is_some(), "{init}");
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    (host, session)
}

/// A `tools/call` of `tool` with `id`, `text` and `n`: in this crate's host's member order
/// (read straight into its type) when `ours`, else in another (read the `Value` way).
fn call(ours: bool, id: &RequestId, tool: &str, text: &str, n: u64) -> String {
    let id = serde_json::to_string(id).expect("id encodes");
    let params = json!({"name": tool, "arguments": {"text": text, "n": n}});
    if ours {
        format!(r#"{{"id":{id},"jsonrpc":"2.0","method":"tools/call","params":{params}}}"#)
    } else {
        format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{params},"id":{id}}}"#)
    }
}

/// The line answering `id` with a one-text-block result, as the unframed result makes it.
fn expected(id: &RequestId, text: &str) -> String {
    Encoded::encode(&ToolsCallResult::text(text))
        .expect("encodes")
        .response(id)
}

fn ids() -> Vec<RequestId> {
    let mut ids: Vec<RequestId> = [0u64, 1, 7, 1 << 53, (1 << 53) + 1, u64::MAX]
        .into_iter()
        .map(RequestId::from)
        .collect();
    ids.extend([-1i64, -7, i64::MIN].into_iter().map(RequestId::from));
    ids.extend(
        ["7", "", "-0", "é\"\\\n", "18446744073709551615"]
            .into_iter()
            .map(|s| RequestId::String(s.into())),
    );
    ids
}

/// JSON-RPC 2.0 §5: each answer echoes its own id; framed ahead, it is still the line the
/// unframed result makes for that id, word for word, whichever way its call was read.
#[tokio::test]
async fn an_answer_framed_ahead_is_its_own_ids_line_word_for_word() {
    let (_tx, gate) = watch::channel(0);
    let (mut host, _session) = connect(gate).await;
    for (i, id) in ids().iter().enumerate() {
        for ours in [true, false] {
            let text = format!("t{i}{ours} é\n\"");
            host.send(&call(ours, id, "echo", &text, 0)).await;
            assert_eq!(host.recv_line().await, expected(id, &text), "{id:?}");
        }
    }
    // Ids written other than as an integer's shortest form (`-0`, a fraction, an
    // exponent): whatever the server makes of each, a call read straight into its type
    // (the prefix test lets `-0` through) is answered as the same call read the `Value` way.
    for raw in ["-0", "-00", "1.0", "1e0", "-0.0", "-1E0"] {
        let params = r#"{"arguments":{"text":"r"},"name":"echo"}"#;
        host.send(&format!(
            r#"{{"id":{raw},"jsonrpc":"2.0","method":"tools/call","params":{params}}}"#
        ))
        .await;
        let ours = host.recv_line().await;
        host.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{params},"id":{raw}}}"#
        ))
        .await;
        let other = host.recv_line().await;
        let (mut a, mut b): (Value, Value) = (
            serde_json::from_str(&ours).expect("JSON"),
            serde_json::from_str(&other).expect("JSON"),
        );
        if a["error"]["code"] == json!(-32700) {
            // Its message names the column, which the member order moves.
            (a["error"]["message"], b["error"]["message"]) = (Value::Null, Value::Null);
        }
        assert_eq!(a, b, "id {raw}: {ours} / {other}");
        if a.get("result").is_some() {
            assert_eq!(ours, other, "id {raw}");
        }
    }
}

/// Answers that come later, from their own tasks, in the reverse of their calls' order,
/// while other calls are answered at once meanwhile: each is its own id's line, with its
/// own result, word for word (no frame buffer shared between answers in flight).
#[tokio::test]
async fn many_answers_framed_in_flight_at_once_each_answer_their_own_id() {
    let (tx, gate) = watch::channel(0);
    let (mut host, _session) = connect(gate).await;
    let ids = ids();
    let waits = ids.len() as u64;
    // Every id waits, `n` from the highest down: the last sent is released first.
    for (i, id) in ids.iter().enumerate() {
        let n = waits - i as u64;
        host.send(&call(i % 2 == 0, id, "wait", &format!("w{i}"), n))
            .await;
    }
    // Answered at once while those wait (ids not in flight).
    for i in 0..4u64 {
        let id = RequestId::from(1000 + i);
        let text = "x".repeat(300 * i as usize);
        host.send(&call(i % 2 == 0, &id, "echo", &text, 0)).await;
        assert_eq!(host.recv_line().await, expected(&id, &text));
    }
    for n in 1..=waits {
        tx.send_replace(n);
        let i = (waits - n) as usize;
        assert_eq!(
            host.recv_line().await,
            expected(&ids[i], &format!("w{i}")),
            "released {n}"
        );
    }
}

/// JSON-RPC 2.0 §6: answers inside a batch (one at once, one later) are the batch's
/// members, each with its own id and result; the calls after it are framed as before.
#[tokio::test]
async fn answers_framed_ahead_in_a_batch_are_its_members() {
    let (tx, gate) = watch::channel(0);
    let (mut host, _session) = connect(gate).await;
    let (a, b, c) = (
        RequestId::from(5u64),
        RequestId::String("5".into()),
        RequestId::from(-5i64),
    );
    host.send(&format!(
        "[{},{},{}]",
        call(true, &a, "echo", "a", 0),
        call(true, &b, "echo", "b", 0),
        call(false, &c, "wait", "c", 1)
    ))
    .await;
    tx.send_replace(1);
    let batch: Value = serde_json::from_str(&host.recv_line().await).expect("JSON");
    let mut members = batch.as_array().expect("an array").clone();
    members.sort_by_key(|m| m["id"].to_string());
    let mut want: Vec<Value> = [(&a, "a"), (&b, "b"), (&c, "c")]
        .into_iter()
        .map(|(id, text)| serde_json::from_str(&expected(id, text)).expect("JSON"))
        .collect();
    want.sort_by_key(|m| m["id"].to_string());
    assert_eq!(members, want);
    for id in [a, b, c] {
        host.send(&call(true, &id, "echo", "after", 0)).await;
        assert_eq!(host.recv_line().await, expected(&id, "after"));
    }
}

/// A handler that finishes as the host cancels its request (MCP cancellation), or after,
/// its id then used again: whichever came first, the first line for that id is the finished
/// answer or the cancellation's `-32800`, and the new request's answer is its own, word for
/// word (an answer framed for the same id is never written for the new request). On a
/// runtime of two threads, so the handler's end and the cancellation race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_framed_for_a_cancelled_request_is_not_the_answer_of_its_ids_next_request() {
    let (tx, gate) = watch::channel(0);
    let (mut host, _session) = connect(gate).await;
    for round in 0..48u64 {
        let id = RequestId::from(20 + round % 4);
        let id_text = serde_json::to_string(&id).expect("id encodes");
        let cancel = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id_text}}}}}"#
        );
        host.send(&call(round % 2 == 0, &id, "wait", "late", round + 1))
            .await;
        // Released before the cancellation, or after it.
        let release_first = round % 3 != 0;
        if release_first {
            tx.send_replace(round + 1);
        }
        host.send(&cancel).await;
        host.send(&call(round % 2 == 1, &id, "echo", "new", 0))
            .await;
        if !release_first {
            tx.send_replace(round + 1);
        }
        let first = host.recv_line().await;
        let v: Value = serde_json::from_str(&first).expect("JSON");
        // (Sent before the release, the cancellation may still be read after the handler
        // finished: either line may come first in both orders.)
        if first != expected(&id, "late") {
            assert_eq!(v["error"]["code"], json!(-32800), "{first}");
            assert_eq!(v["id"], serde_json::to_value(&id).expect("id"), "{first}");
        }
        assert_eq!(
            host.recv_line().await,
            expected(&id, "new"),
            "round {round}"
        );
    }
}

/// End to end over a line transport on two threads: a `HostSession`'s typed `tools/call`s,
/// many at once, to a `Server` answering some at once and some later, some results plain
/// (read by the host without the derive) and some not (`isError`, a member the fast
/// reader leaves to the derive, text past the reused buffer's bound). Every caller gets
/// its own result, as the `Value` way reads the server's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_sessions_typed_calls_at_once_each_get_their_own_result() {
    use mcpl::capability::Capability;
    use mcpl::host::{HostConfig, HostSession};
    use mcpl::protocol::handshake::ToolsCall;

    /// The result `echo2` answers `text` with: shaped by `text`'s length.
    fn shaped(text: &str) -> ToolsCallResult {
        let mut r = ToolsCallResult::text(text);
        match text.len() % 3 {
            0 => r.is_error = Some(text.len() % 2 == 0),
            1 => {
                r.extra
                    .insert("structuredContent".into(), json!({"n": text.len()}));
            }
            _ => {}
        }
        r
    }
    let (tx, gate) = watch::channel(0);
    let server = Server::builder("framed", "1")
        .feature_set("tools", "Tools", &[Capability::Tools])
        .tool(
            "echo2",
            "Echo",
            json!({"type": "object"}),
            move |_s: Session, p: ToolsCallParams| {
                let mut gate = gate.clone();
                async move {
                    let text = text_of(&p);
                    if text.len() % 2 == 1 {
                        let _ = gate.wait_for(|g| *g >= 1).await;
                    }
                    Ok(shaped(&text))
                }
            },
        )
        .build()
        .expect("server builds");
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "server end"));
    let (hr, hw) = tokio::io::split(host_end);
    let config = HostConfig {
        policy: vec!["tools".into()],
        ..HostConfig::default()
    };
    let (host, _streams) = HostSession::connect(
        mcpl::transport::Transport::lines(hr, hw, "host end"),
        config,
    )
    .await
    .expect("connects");
    let mut calls = tokio::task::JoinSet::new();
    let texts: Vec<String> = (0..40usize)
        .map(|i| format!("{i}:{}", "é\"\n".repeat(i * 7)))
        .collect();
    for text in texts {
        let host = host.clone();
        calls.spawn(async move {
            let mut arguments = serde_json::Map::new();
            arguments.insert("text".into(), json!(text));
            let params = ToolsCallParams::new("echo2").with_arguments(arguments);
            (text, host.request::<ToolsCall>(&params).await)
        });
    }
    // The even-length ones answer at once; the rest once released.
    tx.send_replace(1);
    while let Some(done) = calls.join_next().await {
        let (text, result) = done.expect("the call's task");
        let wire = serde_json::to_value(shaped(&text)).expect("encodes");
        let expected: ToolsCallResult = serde_json::from_value(wire).expect("decodes");
        assert_eq!(result.expect("answered"), expected, "{text:?}");
    }
}
