//! Issue #24: a `Server` reads a `tools/call` written as this crate's host writes it (members
//! sorted, an integer id) straight into `ToolsCallParams`, and every other line the `Value`
//! way. These wire tests send each call both ways and pin that the host cannot tell: the
//! handler sees the same params and the answer is the same, for good calls and bad ones.
#![cfg(feature = "runtime")]

use mcpl::protocol::handshake::{ToolsCallParams, ToolsCallResult};
use mcpl::server::{Server, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Count {
    #[allow(dead_code)]
    n: u32,
}

/// A server whose `echo` tool answers with the params it was handed, as JSON text.
fn server() -> Server {
    Server::builder("fast", "1")
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s: Session, p: ToolsCallParams| async move {
                let seen = serde_json::to_string(&p).expect("params encode");
                Ok(ToolsCallResult::text(seen))
            },
        )
        .typed_tool("count", "Count", |_s: Session, _c: Count| async {
            Ok(ToolsCallResult::text("counted"))
        })
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

    async fn recv(&mut self) -> Value {
        let line = self.lines.next_line().await.expect("read").expect("line");
        serde_json::from_str(&line).expect("the server writes JSON")
    }
}

/// An MCP host (no MCPL, so `tools/call` is not gated) connected to [`server`].
async fn connect() -> (RawHost, Session) {
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server().start(mcpl::transport::Transport::lines(sr, sw, "test pipe"));
    let (r, w) = tokio::io::split(host_end);
    let mut host = RawHost {
        lines: BufReader::new(r).lines(),
        write: w,
    };
    host.send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    )
    .await;
    let init = host.recv().await;
    assert!(init.get("result").is_some(), "{init}");
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    (host, session)
}

#[tokio::test]
async fn a_tools_call_read_fast_is_answered_as_the_same_call_read_the_value_way() {
    let (mut host, _session) = connect().await;
    let params = [
        r#"{"arguments":{"text":"hi","n":[1.0,2e3,{"x":null}]},"name":"echo"}"#,
        r#"{"name":"echo"}"#,
        r#"{"arguments":null,"name":"e\u0063ho","state":null}"#,
        r#"{"checkpoint":"c-1","name":"echo","state":{"k":[true]}}"#,
        r#"{"_meta":{"progressToken":1},"name":"echo"}"#,
        r#"{"name":"nope"}"#,
        r#"{"arguments":[1],"name":"echo"}"#,
        r#"{"name":7}"#,
        r#"{"arguments":{"n":"x"},"name":"count"}"#,
        r#"{"arguments":{"n":3},"name":"count"}"#,
        r#"{"name":"echo","name":"count","arguments":{"n":3}}"#,
        // serde_json's raw-value marker as a member name, plain and escaped: the `Value`
        // way reads the object as the marker's string parsed as JSON (review of `70e1ed8`).
        r#"{"arguments":{"$serde_json::private::RawValue":"{\"text\":\"hi\"}"},"name":"echo"}"#,
        r#"{"arguments":{"$serde_json::private::RawValue":"[1]"},"name":"count"}"#,
        r#"{"name":"echo","state":{"b":1,"$serde_json::private::RawValue":"[2]"}}"#,
        r#"{"arguments":{"x":{"b":1,"$serde_json::private::RawValue":"[2]"}},"name":"echo"}"#,
        r#"{"arguments":{"\u0024serde_json::private::Raw\u0056alue":"{}","b":2},"name":"echo"}"#,
    ];
    let mut id = 0;
    for p in params {
        let mut answers = Vec::new();
        // This crate's host's member order (read fast where it can be), then another
        // host's (read the `Value` way).
        for form in [
            format!(r#"{{"id":{{id}},"jsonrpc":"2.0","method":"tools/call","params":{p}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{p},"id":{{id}}}}"#),
        ] {
            id += 1;
            host.send(&form.replace("{id}", &id.to_string())).await;
            let mut answer = host.recv().await;
            // `null` for a line the `Value` way cannot read as a message (a raw-value
            // marker whose string is no JSON).
            assert!(
                answer["id"] == json!(id) || answer["id"].is_null(),
                "{answer}"
            );
            answer["id"] = Value::Null;
            if answer["error"]["code"] == json!(-32700) {
                // Its message names the column, which the member order moves.
                answer["error"]["message"] = Value::Null;
            }
            answers.push(answer);
        }
        assert_eq!(answers[0], answers[1], "params {p}");
    }
}

/// How a script's `tools/call` lines are written: as this crate's host writes them (read
/// fast) or with the members in another order (read the `Value` way).
#[derive(Clone, Copy, Debug)]
enum Order {
    Ours,
    Other,
}

/// A `tools/call` line with `id` and `params` (JSON text) in `order`.
fn call(order: Order, id: i64, params: &str) -> String {
    match order {
        Order::Ours => {
            format!(r#"{{"id":{id},"jsonrpc":"2.0","method":"tools/call","params":{params}}}"#)
        }
        Order::Other => {
            format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{params},"id":{id}}}"#)
        }
    }
}

/// A server with `echo`, `count` (typed) and `wait` (never finishes by itself), at most two
/// requests in flight, for an MCPL host.
fn hostile_server() -> Server {
    Server::builder("fast", "1")
        .feature_set("work", "Work", &[mcpl::capability::Capability::Tools])
        .peer_config(mcpl::peer::PeerConfig {
            max_in_flight_requests: 2,
            ..Default::default()
        })
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s: Session, p: ToolsCallParams| async move {
                Ok(ToolsCallResult::text(
                    serde_json::to_string(&p).expect("params encode"),
                ))
            },
        )
        .tool(
            "wait",
            "Wait",
            json!({"type": "object"}),
            |_s: Session, _p: ToolsCallParams| std::future::pending(),
        )
        .typed_tool("count", "Count", |_s: Session, _c: Count| async {
            Ok(ToolsCallResult::text("counted"))
        })
        .build()
        .expect("server builds")
}

/// What the server answers, in order, to one hostile MCPL host's script whose `tools/call`
/// lines are written in `order`: before `initialize`, before the policy (§5.3), under a
/// policy without `tools` (§5.4), a duplicate in-flight id, a cancellation (and the id used
/// again), a burst past the in-flight bound, arguments a typed tool refuses, a tool removed
/// at runtime, a policy revoking `tools`, a batch, and a call as the last line before EOF.
async fn hostile_script(order: Order) -> Vec<Value> {
    let server = hostile_server();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "test pipe"));
    let (r, w) = tokio::io::split(host_end);
    let mut host = RawHost {
        lines: BufReader::new(r).lines(),
        write: w,
    };
    let policy = |id: i64, grant: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"featureSets/update","params":{{"effectiveCapabilities":{grant}}}}}"#
        )
    };
    let cancel = |id: i64| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        )
    };
    let echo = r#"{"arguments":{"a":[1,{"b":null}]},"name":"echo"}"#;
    let wait = r#"{"name":"wait"}"#;
    // Each step: the lines sent, then how many lines the server answers with.
    let steps: Vec<(Vec<String>, usize)> = vec![
        (vec![call(order, 1, echo)], 1),
        (
            vec![
                r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},"clientInfo":{"name":"raw","version":"1"}}}"#.to_owned(),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
                call(order, 3, echo),
            ],
            2,
        ),
        (vec![policy(4, "[]"), call(order, 5, echo)], 2),
        (vec![policy(6, r#"["tools"]"#), call(order, 7, echo)], 2),
        (vec![call(order, 8, wait), call(order, 8, echo)], 1),
        (vec![cancel(8), call(order, 8, echo)], 2),
        (
            vec![
                call(order, 9, wait),
                call(order, 10, wait),
                call(order, 11, echo),
            ],
            1,
        ),
        (vec![cancel(9), cancel(10)], 2),
        (
            vec![
                call(order, 12, r#"{"arguments":{"n":"x"},"name":"count"}"#),
                call(order, 13, r#"{"arguments":{"n":3},"name":"count"}"#),
            ],
            2,
        ),
        (vec![format!("[{},{}]", call(order, 14, echo), cancel(99))], 1),
    ];
    let mut seen = Vec::new();
    for (lines, answers) in steps {
        for line in lines {
            host.send(&line).await;
        }
        for _ in 0..answers {
            seen.push(host.recv().await);
        }
    }
    server.remove_tool("echo").expect("tools change");
    host.send(&call(order, 15, echo)).await;
    // The answer and the announcement of the change, in either order.
    let mut two = [host.recv().await, host.recv().await];
    two.sort_by_key(|v| v.get("method").is_some());
    seen.extend(two);
    host.send(&policy(16, r#"["contextHooks.beforeInference.observe"]"#))
        .await;
    host.send(&call(order, 17, r#"{"name":"count","arguments":{"n":1}}"#))
        .await;
    seen.push(host.recv().await);
    seen.push(host.recv().await);
    // (At most two requests unanswered at a time, so the bound refuses only where meant.)
    host.send(&policy(18, r#"["tools"]"#)).await;
    seen.push(host.recv().await);
    // The last line, without its newline, then the end of input.
    let last = call(order, 19, r#"{"name":"count","arguments":{"n":1}}"#);
    host.write.write_all(last.as_bytes()).await.expect("write");
    host.write.shutdown().await.expect("shutdown");
    while let Ok(Some(line)) = host.lines.next_line().await {
        seen.push(serde_json::from_str(&line).expect("the server writes JSON"));
    }
    seen
}

/// A hostile host's `tools/call`s, read fast or the `Value` way, are answered alike at every
/// step: gating (§5.3, §5.4), ids in flight, cancellation, the in-flight bound, typed
/// arguments, runtime tool changes, batches and the end of input.
#[tokio::test]
async fn a_hostile_hosts_tools_calls_are_answered_alike_in_either_member_order() {
    let ours = hostile_script(Order::Ours).await;
    let other = hostile_script(Order::Other).await;
    assert_eq!(ours, other);
    // The script reached what it means to: the policy gates, the duplicate and the burst
    // are refused, the cancelled id is reused, the removed tool is unknown.
    let codes: Vec<Value> = ours.iter().map(|v| v["error"]["code"].clone()).collect();
    let text = serde_json::to_string(&ours).expect("encode");
    assert!(codes.contains(&json!(-32002)), "{text}");
    assert!(codes.contains(&json!(-32800)), "{text}");
    assert!(codes.contains(&json!(-32602)), "{text}");
    assert_eq!(ours.len(), 22, "{text}");
    assert_eq!(
        ours[21]["result"]["content"][0]["text"], "counted",
        "{text}"
    );
}
