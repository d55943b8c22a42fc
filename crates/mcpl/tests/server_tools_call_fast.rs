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
