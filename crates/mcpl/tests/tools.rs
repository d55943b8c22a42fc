//! Typed tools and tools that change at runtime (issue #21), over TCP: a raw host writes and
//! reads JSON lines, so every frame the server sends is under test.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::{ToolsCallParams, ToolsCallResult};
use mcpl::server::{Server, ServerBuilder, Session, ToolChangeError, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

#[path = "support/tcp_host.rs"]
mod tcp_host;
use tcp_host::RawHost;

/// The arguments of the `remind` tool.
#[derive(Deserialize, JsonSchema)]
struct Remind {
    /// What to remind of.
    text: String,
    /// In how many seconds.
    seconds: u64,
}

async fn remind(_s: Session, args: Remind) -> Result<ToolsCallResult, mcpl::jsonrpc::ErrorObject> {
    Ok(ToolsCallResult::text(format!(
        "{} in {}s",
        args.text, args.seconds
    )))
}

fn typed_server() -> ServerBuilder {
    Server::builder("typed", "0")
        .feature_set("reminders", "Reminders", &[Capability::Tools])
        .typed_tool("remind", "Remind me of something", remind)
}

#[tokio::test]
async fn typed_tool_lists_its_generated_schema() {
    let server = typed_server().build().unwrap();
    let (mut host, _) = RawHost::connect(&server).await;
    let list = host.request("tools/list", json!({})).await;
    let tool = &list["result"]["tools"][0];
    assert_eq!(tool["name"], "remind");
    let schema = &tool["inputSchema"];
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["properties"]["text"]["type"], "string", "{schema}");
    assert_eq!(
        schema["properties"]["seconds"]["type"], "integer",
        "{schema}"
    );
    assert_eq!(
        schema["properties"]["text"]["description"], "What to remind of.",
        "{schema}"
    );
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["seconds", "text"]);
}

#[tokio::test]
async fn typed_tool_parses_its_arguments() {
    let server = typed_server().build().unwrap();
    let (mut host, _) = RawHost::connect(&server).await;
    let r = host
        .call("remind", json!({"text": "tea", "seconds": 5}))
        .await;
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": "tea in 5s"}]})
    );
}

#[tokio::test]
async fn typed_tool_arguments_that_do_not_fit_are_32602_naming_the_field() {
    let server = typed_server().build().unwrap();
    let (mut host, _) = RawHost::connect(&server).await;
    let r = host
        .call("remind", json!({"text": "tea", "seconds": "soon"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("`seconds`"), "{message}");
    assert_eq!(
        r["error"]["data"],
        json!({"tool": "remind", "path": "seconds"})
    );
    // A missing field is named too (serde's message), and absent arguments are `{}`.
    let r = host.call("remind", json!({"seconds": 1})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("`text`"),
        "{r}"
    );
    let r = host.request("tools/call", json!({"name": "remind"})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn a_typed_tool_whose_arguments_are_not_an_object_is_a_build_error() {
    let e = Server::builder("typed", "0")
        .typed_tool("bad", "Takes a bare string", |_s, _t: String| async move {
            Ok(ToolsCallResult::text("x"))
        })
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("\"bad\""), "{e}");
    assert!(e.to_string().contains("object"), "{e}");
}

async fn echo(
    _s: Session,
    _p: ToolsCallParams,
) -> Result<ToolsCallResult, mcpl::jsonrpc::ErrorObject> {
    Ok(ToolsCallResult::text("echo"))
}

fn runtime_server() -> Server {
    Server::builder("runtime", "0")
        .tool("echo", "Echo", json!({"type": "object"}), echo)
        .build()
        .unwrap()
}

#[tokio::test]
async fn initialize_declares_tools_list_changed() {
    let server = runtime_server();
    let (_host, init) = RawHost::connect(&server).await;
    assert_eq!(
        init["capabilities"]["tools"],
        json!({"listChanged": true}),
        "{init}"
    );
}

#[tokio::test]
async fn every_connected_host_is_told_and_lists_the_added_tool() {
    let server = runtime_server();
    let (mut a, _) = RawHost::connect(&server).await;
    let (mut b, _) = RawHost::connect(&server).await;
    // Both connections are past initialize (each got its answer), so both are told.
    server
        .add_tool(ToolSpec::typed("remind", "Remind me", remind))
        .unwrap();
    for host in [&mut a, &mut b] {
        assert_eq!(
            host.frame().await,
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        );
        assert_eq!(host.tool_names().await, ["echo", "remind"]);
        let r = host
            .call("remind", json!({"text": "tea", "seconds": 1}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "tea in 1s", "{r}");
    }
}

#[tokio::test]
async fn a_removed_tool_is_gone_and_calling_it_is_an_error() {
    let server = runtime_server();
    let (mut host, _) = RawHost::connect(&server).await;
    server.remove_tool("echo").unwrap();
    assert_eq!(
        host.frame().await["method"],
        "notifications/tools/list_changed"
    );
    assert!(host.tool_names().await.is_empty());
    let r = host.call("echo", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(server.tools().is_empty());
}

#[tokio::test]
async fn a_replaced_tool_runs_its_new_handler() {
    let server = runtime_server();
    let (mut host, _) = RawHost::connect(&server).await;
    let new_echo = ToolSpec::new(
        "echo",
        "Echo, louder",
        json!({"type": "object"}),
        |_s, _p| async { Ok(ToolsCallResult::text("ECHO")) },
    );
    server.replace_tool(new_echo).unwrap();
    assert_eq!(
        host.frame().await["method"],
        "notifications/tools/list_changed"
    );
    let list = host.request("tools/list", json!({})).await;
    assert_eq!(list["result"]["tools"][0]["description"], "Echo, louder");
    let r = host.call("echo", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "ECHO", "{r}");
}

#[test]
fn tool_changes_that_cannot_apply_are_refused() {
    let server = runtime_server();
    let dup = ToolSpec::new("echo", "Echo", json!({"type": "object"}), echo);
    assert_eq!(
        server.add_tool(dup),
        Err(ToolChangeError::Duplicate("echo".into()))
    );
    assert_eq!(
        server.remove_tool("nope"),
        Err(ToolChangeError::Unknown("nope".into()))
    );
    let ghost = ToolSpec::new("ghost", "", json!({"type": "object"}), echo);
    assert_eq!(
        server.replace_tool(ghost),
        Err(ToolChangeError::Unknown("ghost".into()))
    );
    let bare = ToolSpec::typed("bare", "", |_s, _t: String| async {
        Ok(ToolsCallResult::text("x"))
    });
    assert!(matches!(
        server.add_tool(bare),
        Err(ToolChangeError::Schema { .. })
    ));
    // A server that declares no tools capability has no host looking for tools.
    let toolless = Server::builder("none", "0").build().unwrap();
    let t = ToolSpec::new("t", "", json!({"type": "object"}), echo);
    assert_eq!(
        toolless.add_tool(t),
        Err(ToolChangeError::NoToolsCapability)
    );
    assert_eq!(server.tools().len(), 1);
}

/// MCP's `capabilities.tools.listChanged` states whether the server sends
/// `notifications/tools/list_changed`; a host that reads `false` has no reason to list the
/// tools again. An author's explicit `false` was replaced by `true` once tools were
/// registered. Now it is kept as stated and nothing is announced under it; a change to the
/// tools, which no host reading `false` would learn of, is refused
/// ([`ToolChangeError::ListChangedFalse`]) rather than made silently.
#[tokio::test]
async fn an_authors_list_changed_false_is_kept_and_the_tools_do_not_change_under_it() {
    let server = Server::builder("fixed", "0")
        .mcp_capability("tools", json!({"listChanged": false}))
        .tool("echo", "Echo", json!({"type": "object"}), echo)
        .build()
        .unwrap();
    let (mut host, init) = RawHost::connect(&server).await;
    assert_eq!(
        init["capabilities"]["tools"],
        json!({"listChanged": false}),
        "{init}"
    );
    let t = ToolSpec::new("more", "", json!({"type": "object"}), echo);
    assert_eq!(server.add_tool(t), Err(ToolChangeError::ListChangedFalse));
    let t = ToolSpec::new("echo", "Echo, louder", json!({"type": "object"}), echo);
    assert_eq!(
        server.replace_tool(t),
        Err(ToolChangeError::ListChangedFalse)
    );
    assert_eq!(
        server.remove_tool("echo"),
        Err(ToolChangeError::ListChangedFalse)
    );
    // Nothing changed and nothing was announced (no frame comes before the answer).
    assert_eq!(host.tool_names().await, ["echo"]);
    // `listChanged: true`, or left out, is the default: changes are told.
    let told = Server::builder("told", "0")
        .mcp_capability("tools", json!({"listChanged": true}))
        .tool("echo", "Echo", json!({"type": "object"}), echo)
        .build()
        .unwrap();
    let t = ToolSpec::new("more", "", json!({"type": "object"}), echo);
    told.add_tool(t).unwrap();
}

/// MCP's `capabilities.tools` is an object whose `listChanged` is a boolean: a `tools` that is
/// no object, or a `listChanged` that is no boolean, was replaced or overwritten by the
/// builder's own. Refused at build, naming what was given.
#[test]
fn a_tools_capability_mcp_cannot_read_is_a_build_error() {
    for (tools, needle) in [
        (json!(false), "not an object"),
        (json!(true), "not an object"),
        (json!({"listChanged": "no"}), "listChanged"),
    ] {
        let e = Server::builder("s", "0")
            .mcp_capability("tools", tools.clone())
            .tool("echo", "Echo", json!({"type": "object"}), echo)
            .build()
            .err()
            .unwrap_or_else(|| panic!("{tools} built"));
        assert!(matches!(e, mcpl::server::BuildError::Manifest(_)), "{e:?}");
        assert!(e.to_string().contains(needle), "{tools}: {e}");
    }
}
