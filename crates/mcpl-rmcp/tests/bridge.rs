//! The bridge over real TCP connections: an rmcp `#[tool_router]` server (`Probe`) served by
//! `mcpl_rmcp::builder`, against plain rmcp serving the very same handler.
//!
//! - For an MCP host (no `experimental.mcpl`) the bridged server answers what plain rmcp
//!   answers, byte for byte in meaning (tools, schemas, errors, unknown methods, progress,
//!   rmcp's own requests to the host), plus the manifest (§3.1, §3.2).
//! - rmcp's own client lists and calls its tools.
//! - Under an MCPL host (raw JSON, then the library's `HostSession`) nothing privileged runs
//!   before the policy Request (§5.3), and sends outside the grant are refused before the
//!   wire, whether through the session or through rmcp's own peer (§5.4).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostEvent, HostSession};
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{PushEvent, Session};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientResult, ContentBlock, CustomNotification,
    CustomRequest, InitializeRequestParams, InitializeResult, ProgressNotificationParam,
    RequestMetaObject, ServerNotification, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext};
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData as McpError, Peer, RoleServer,
    ServerHandler, ServiceExt,
};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Bound on every single wait, so a broken bridge fails instead of hanging the suite.
const WAIT: Duration = Duration::from_secs(10);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The left operand.
    a: i64,
    /// The right operand.
    b: i64,
}

/// The test server: plain rmcp, with two tools that reach for MCPL.
#[derive(Clone, Default)]
struct Probe {
    /// What a push attempted while rmcp answered `initialize` came to.
    push_at_initialize: Arc<Mutex<Option<String>>>,
}

fn outcome(r: Result<mcpl::protocol::push::PushEventResult, mcpl::server::SendError>) -> String {
    match r {
        Ok(r) => format!("accepted: {}", r.accepted),
        Err(e) => format!("refused: {}", e.code()),
    }
}

#[tool_router]
impl Probe {
    #[tool(description = "Add two numbers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> Result<CallToolResult, McpError> {
        Err(McpError::invalid_params(
            "fail always fails",
            Some(json!({"why": "test"})),
        ))
    }

    #[tool(description = "Report progress, then finish")]
    async fn progress(
        &self,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> Result<String, McpError> {
        if let Some(token) = meta.get_progress_token() {
            let p = ProgressNotificationParam::new(token, 1.0).with_total(2.0);
            peer.notify_progress(p)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        }
        Ok("done".into())
    }

    #[tool(description = "Ask the host something (a server-to-host request)")]
    async fn ask(&self, peer: Peer<RoleServer>) -> Result<String, McpError> {
        let req = CustomRequest::new("vendor/ask", Some(json!({"q": 1})));
        match peer.send_request(ServerRequest::CustomRequest(req)).await {
            Ok(ClientResult::CustomResult(r)) => Ok(r.0.to_string()),
            Ok(other) => Ok(format!("{other:?}")),
            Err(e) => Err(McpError::internal_error(e.to_string(), None)),
        }
    }

    #[tool(description = "Ask the host, giving up after a moment")]
    async fn ask_briefly(&self, peer: Peer<RoleServer>) -> Result<String, McpError> {
        let req = ServerRequest::CustomRequest(CustomRequest::new("vendor/slow", None));
        let options = PeerRequestOptions::with_timeout(Duration::from_millis(50));
        let sent = peer.send_request_with_option(req, options).await;
        let out = match sent {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        Ok(format!("answered: {}", out.is_ok()))
    }

    #[tool(description = "Wait until cancelled")]
    async fn wait(&self, ctx: RequestContext<RoleServer>) -> String {
        ctx.ct.cancelled().await;
        "cancelled".into()
    }

    #[tool(description = "Push an event through the MCPL session")]
    async fn push(&self, Extension(mcpl): Extension<Session>) -> String {
        outcome(mcpl.push_event(PushEvent::text("probe", "pushed")).await)
    }

    #[tool(description = "Try to send MCPL through rmcp's own peer")]
    async fn sneak(&self, peer: Peer<RoleServer>) -> String {
        let params = json!({"featureSet": "probe", "eventId": "e", "timestamp": "2026-01-01T00:00:00Z",
                            "payload": {"content": [{"type": "text", "text": "sneaked"}]}});
        let n = CustomNotification::new("push/event", Some(params.clone()));
        let r = CustomRequest::new("push/event", Some(params));
        let n = peer
            .send_notification(ServerNotification::CustomNotification(n))
            .await;
        let r = peer.send_request(ServerRequest::CustomRequest(r)).await;
        format!("notification ok: {}, request ok: {}", n.is_ok(), r.is_ok())
    }
}

#[tool_handler(name = "probe", version = "1.2.3", instructions = "A probe")]
impl ServerHandler for Probe {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if let Some(mcpl) = context.extensions.get::<Session>() {
            let r = mcpl.push_event(PushEvent::text("probe", "too early")).await;
            *self.push_at_initialize.lock().unwrap() = Some(outcome(r));
        }
        context.peer.set_peer_info(request.clone());
        // Instructions of this connection's own, which the bridge must pass on as they are.
        let mut result = self.negotiate_initialize(&request)?;
        result.instructions = Some(format!("A probe for {}", request.client_info.name));
        Ok(result)
    }
}

/// The bridged server: `probe` pushes and injects the time of day.
fn bridged(probe: Probe) -> mcpl::server::Server {
    mcpl_rmcp::builder(probe)
        .feature_set(
            "probe",
            "Probe events and context",
            &[Capability::PushEvents, Capability::InjectSystem],
        )
        .on_before_inference("probe", |_grant, _turn| async {
            let i = ContextInjection::new("probe", Position::System, "probe context");
            Ok(BeforeInferenceResult::with_injections([i]))
        })
        .build()
        .unwrap()
}

/// Serves `probe` bridged on a fresh TCP listener (one connection per accept).
async fn serve_bridged(probe: Probe) -> SocketAddr {
    let server = bridged(probe);
    let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((t, _)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move { server.serve(t).await });
        }
    });
    addr
}

/// Serves `probe` with plain rmcp on a fresh TCP listener.
async fn serve_plain(probe: Probe) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let probe = probe.clone();
            tokio::spawn(async move {
                if let Ok(running) = probe.serve(stream).await {
                    let _ = running.waiting().await;
                }
            });
        }
    });
    addr
}

/// A host that speaks raw JSON lines and answers the server's `vendor/ask` itself.
struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
    /// Everything the server sent that was not a response, with request ids blanked (the
    /// two servers number their own requests differently).
    unsolicited: Vec<Value>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let (read, write) = TcpStream::connect(addr).await.unwrap().into_split();
        Raw {
            lines: BufReader::new(read).lines(),
            write,
            unsolicited: Vec::new(),
        }
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next frame the server sends.
    async fn next_frame(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("the server sent it in time")
            .unwrap()
            .expect("the connection is open");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends request `id` and returns its response, handling what comes in between.
    async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let mut v = self.next_frame().await;
            if v.get("method").is_none() {
                if v["id"] == json!(id) {
                    return v;
                }
                panic!("a response to a request never sent: {v}");
            }
            if v["method"] == "vendor/ask" {
                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"answer": 42}});
                self.send(reply).await;
            }
            if let Some(rid) = v.get_mut("id") {
                *rid = Value::Null;
            }
            self.unsolicited.push(v);
        }
    }
}

/// The MCP conversation both servers get, as an MCP (not MCPL) host.
async fn mcp_conversation(addr: SocketAddr) -> (Vec<Value>, Vec<Value>) {
    let (mut h, init) = mcp_host(addr).await;
    let mut out = vec![init];
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let calls = [
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
        ),
        (
            "tools/call",
            json!({"name": "add", "arguments": {"a": "two"}}),
        ),
        ("tools/call", json!({"name": "nope", "arguments": {}})),
        ("tools/call", json!({"name": "fail", "arguments": {}})),
        (
            "tools/call",
            json!({"name": "progress", "arguments": {}, "_meta": {"progressToken": "p1"}}),
        ),
        ("tools/call", json!({"name": "ask", "arguments": {}})),
        ("resources/list", json!({})),
        ("prompts/list", json!({})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"},
                                        "argument": {"name": "a", "value": "b"}}),
        ),
        ("logging/setLevel", json!({"level": "info"})),
        ("vendor/unknown", json!({})),
        ("tools/call", json!({"name": 5})),
        ("ping", json!({})),
    ];
    for (i, (method, params)) in calls.into_iter().enumerate() {
        out.push(h.call(i as u64 + 2, method, params).await);
    }
    (out, h.unsolicited)
}

#[tokio::test]
async fn s3_2_an_mcp_host_gets_what_plain_rmcp_serves_plus_the_manifest() {
    let (plain, plain_unsolicited) = mcp_conversation(serve_plain(Probe::default()).await).await;
    let (mut bridged, bridged_unsolicited) =
        mcp_conversation(serve_bridged(Probe::default()).await).await;
    // The one difference: the manifest under capabilities.experimental (§3.1).
    let manifest = bridged[0]["result"]["capabilities"]["experimental"]
        .as_object_mut()
        .and_then(|e| e.remove("mcpl"))
        .expect("experimental.mcpl in the bridged initialize result");
    assert_eq!(manifest["version"], "0.5");
    assert!(manifest["featureSets"]["probe"].is_object());
    if bridged[0]["result"]["capabilities"]["experimental"] == json!({}) {
        if let Some(caps) = bridged[0]["result"]["capabilities"].as_object_mut() {
            caps.remove("experimental");
        }
    }
    // The handler's per-connection instructions, not its `get_info`'s.
    let instructions = plain[0]["result"]["instructions"].as_str().unwrap_or("");
    assert!(instructions.starts_with("A probe for "), "{instructions}");
    for (p, b) in plain.iter().zip(&bridged) {
        assert_eq!(p, b, "plain rmcp answered {p}, the bridge {b}");
    }
    assert_eq!(plain.len(), bridged.len());
    // The schema derived by schemars, the tool errors and the -32601 are rmcp's own.
    let add = plain[1]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "add")
        .unwrap();
    assert_eq!(add["inputSchema"]["properties"]["a"]["type"], "integer");
    assert_eq!(plain[2]["result"]["content"][0]["text"], "5");
    assert_eq!(
        plain[3]["result"]["isError"], true,
        "bad arguments: a tool error"
    );
    assert_eq!(plain[4]["error"]["code"], -32602, "an unknown tool");
    assert_eq!(plain[5]["error"]["message"], "fail always fails");
    assert_eq!(plain[7]["result"]["content"][0]["text"], "{\"answer\":42}");
    assert_eq!(plain[12]["error"]["code"], -32601);
    // A tools/call rmcp's types cannot read falls back to its custom-request path.
    assert_eq!(plain[13]["error"]["code"], -32601);
    // Progress and rmcp's own request reached the host the same way.
    assert_eq!(plain_unsolicited, bridged_unsolicited);
    let methods: Vec<&str> = plain_unsolicited
        .iter()
        .filter_map(|v| v["method"].as_str())
        .collect();
    assert_eq!(methods, ["notifications/progress", "vendor/ask"]);
}

#[tokio::test]
async fn an_rmcp_client_lists_and_calls_the_bridged_tools() {
    let addr = serve_bridged(Probe::default()).await;
    let client = ().serve(TcpStream::connect(addr).await.unwrap()).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "add",
            "ask",
            "ask_briefly",
            "fail",
            "progress",
            "push",
            "sneak",
            "wait"
        ]
    );
    let args = json!({"a": 20, "b": 22}).as_object().cloned().unwrap();
    let r = client
        .call_tool(CallToolRequestParams::new("add").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("42")]);
    // An MCP host has no MCPL: the session refuses the push (§3.2).
    let r = client
        .call_tool(CallToolRequestParams::new("push"))
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("refused: mcp_only")]);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn s5_3_tools_call_waits_for_the_policy_request_under_an_mcpl_host() {
    let mut h = Raw::connect(serve_bridged(Probe::default()).await).await;
    let init = h
        .call(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "raw", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "probe");
    let add = json!({"name": "add", "arguments": {"a": 1, "b": 1}});
    let before = h.call(2, "tools/call", add.clone()).await;
    assert_eq!(before["error"]["code"], -32002, "{before}");
    assert_eq!(before["error"]["data"]["capability"], "tools");
    // tools/list only describes (§5.4 table): answered by rmcp before the policy.
    let list = h.call(3, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array());
    let receipt = h
        .call(
            4,
            "featureSets/update",
            json!({"effectiveCapabilities": ["tools"]}),
        )
        .await;
    assert_eq!(receipt["result"]["accepted"], true);
    let after = h.call(5, "tools/call", add).await;
    assert_eq!(after["result"]["content"][0]["text"], "2");
    // MCPL methods are the session's, never rmcp's: the manifest is answered, a removed
    // surface is -32601 rather than rmcp's custom-request fallback.
    let m = h.call(6, "mcpl/manifest", json!({})).await;
    assert_eq!(m["result"]["version"], "0.5");
    let gone = h.call(7, "context/afterInference", json!({})).await;
    assert_eq!(gone["error"]["code"], -32601);
    assert!(h.unsolicited.is_empty(), "{:?}", h.unsolicited);
}

async fn mcpl_host(addr: SocketAddr, policy: &[&str]) -> (HostSession, mcpl::host::HostStreams) {
    let transport = mcpl::transport::tcp::connect(addr).await.unwrap();
    let config = HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        ..HostConfig::default()
    };
    HostSession::connect(transport, config).await.unwrap()
}

async fn call_text(host: &HostSession, tool: &str) -> String {
    let r = host
        .request_raw("tools/call", json!({"name": tool, "arguments": {}}))
        .await
        .unwrap();
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn s5_3_nothing_privileged_before_the_receipt_then_push_and_hook_work() {
    let probe = Probe::default();
    let seen = probe.push_at_initialize.clone();
    let addr = serve_bridged(probe).await;
    let (host, mut streams) = mcpl_host(
        addr,
        &[
            "tools",
            "pushEvents",
            "contextHooks.beforeInference.inject.system",
        ],
    )
    .await;
    // rmcp's initialize ran before any policy: the push was refused before the wire.
    assert_eq!(seen.lock().unwrap().as_deref(), Some("refused: not_ready"));
    assert!(host.is_ready());
    assert_eq!(call_text(&host, "push").await, "accepted: true");
    let event = tokio::time::timeout(WAIT, streams.events.recv())
        .await
        .unwrap()
        .unwrap();
    let HostEvent::Push { feature_set, .. } = event else {
        panic!("expected the push, got {event:?}");
    };
    assert_eq!(feature_set, "probe");
    let turn = json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                      "userMessage": null});
    let injections = mcpl::host::before_inference(&[&host], &turn).await;
    assert_eq!(injections.system.len(), 1, "{injections:?}");
    assert_eq!(injections.system[0].injection["content"], "probe context");
    assert!(injections.rejected.is_empty() && injections.failures.is_empty());
}

#[tokio::test]
async fn s5_4_sends_outside_the_grant_are_refused_before_the_wire() {
    let (host, mut streams) = mcpl_host(serve_bridged(Probe::default()).await, &["tools"]).await;
    assert!(host.is_ready());
    // pushEvents is not granted: the session refuses, the host sees nothing.
    assert_eq!(call_text(&host, "push").await, "refused: capability_denied");
    // rmcp's own peer cannot carry MCPL at all, granted or not.
    assert_eq!(
        call_text(&host, "sneak").await,
        "notification ok: false, request ok: false"
    );
    host.request_raw("ping", json!({})).await.unwrap();
    assert!(matches!(
        streams.events.try_recv(),
        Err(mcpl::peer::queue::TryRecvError::Empty)
    ));
    // The hook's feature set is unavailable without its inject leaf: nothing to fan out to.
    let turn = json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                      "userMessage": null});
    let injections = mcpl::host::before_inference(&[&host], &turn).await;
    assert!(injections.consulted.is_empty() && injections.system.is_empty());
    if let Ok(d) = streams.diagnostics.try_recv() {
        panic!("the host saw a defect: {d:?}");
    }
}

/// Reads frames until one matches `pick`, answering nothing.
async fn next_matching(h: &mut Raw, pick: impl Fn(&Value) -> bool) -> Value {
    loop {
        let v = h.next_frame().await;
        if pick(&v) {
            return v;
        }
    }
}

/// A raw MCP (not MCPL) host that has sent `initialize` (id 1), with its answer.
async fn mcp_host(addr: SocketAddr) -> (Raw, Value) {
    let mut h = Raw::connect(addr).await;
    let init = h
        .call(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}),
        )
        .await;
    (h, init)
}

#[tokio::test]
async fn a_cancelled_request_is_answered_and_rmcps_own_cancellation_reaches_the_host() {
    let (mut h, _) = mcp_host(serve_bridged(Probe::default()).await).await;
    // rmcp drops the answer of a request the host cancels; the session still answers it.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "wait", "arguments": {}}});
    h.send(call).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 2, "reason": "changed my mind"}});
    h.send(cancel).await;
    let answer = next_matching(&mut h, |v| v["id"] == 2).await;
    assert_eq!(
        answer["error"]["code"],
        mcpl_rmcp::REQUEST_CANCELLED,
        "{answer}"
    );
    // rmcp gives up its own request to the host: the host is told, with the id it saw.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "ask_briefly", "arguments": {}}});
    h.send(call).await;
    let asked = next_matching(&mut h, |v| v["method"] == "vendor/slow").await;
    let told = next_matching(&mut h, |v| v["method"] == "notifications/cancelled").await;
    assert_eq!(told["params"]["requestId"], asked["id"]);
    let answer = next_matching(&mut h, |v| v["id"] == 3).await;
    assert_eq!(answer["result"]["content"][0]["text"], "answered: false");
}
