//! A hostile or merely odd MCP host against the bridge, over real TCP: cancellations of
//! every kind, reused and unusual request ids, requests around the half-close. Every
//! request gets exactly one answer, and it is its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};

/// Bound on every single wait, so a broken bridge fails instead of hanging the suite.
const WAIT: Duration = Duration::from_secs(10);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GateArgs {
    /// Returned as the tool's text once the gate lets the call through.
    tag: String,
}

/// Tools whose calls finish when the test says so, and not when they are cancelled.
#[derive(Clone)]
struct Gated {
    /// One permit per call let through, in the order the calls entered.
    gate: Arc<Semaphore>,
    /// How many `gate` calls have entered.
    entered: Arc<watch::Sender<usize>>,
    /// How many `gate` calls have returned.
    returned: Arc<watch::Sender<usize>>,
    /// How many `gate` calls have ended, returned or dropped unfinished.
    ended: Arc<watch::Sender<usize>>,
    /// How many `notifications/roots/list_changed` handlers have started (none ends).
    notified: Arc<watch::Sender<usize>>,
    /// How many times `on_initialized` has run.
    initialized: Arc<watch::Sender<usize>>,
    /// How many `initialize`s that never answer (a host named `hang`) have entered.
    hung: Arc<watch::Sender<usize>>,
    /// How many of those have been dropped unfinished.
    hung_ended: Arc<watch::Sender<usize>>,
    /// Holds an `initialize` from a host named `block` on its thread until set.
    blocking: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

/// Counts a `gate` call as ended when dropped.
struct Ends(Arc<watch::Sender<usize>>);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.send_modify(|e| *e += 1);
    }
}

impl Gated {
    fn new() -> Gated {
        Gated {
            gate: Arc::new(Semaphore::new(0)),
            entered: Arc::new(watch::channel(0).0),
            returned: Arc::new(watch::channel(0).0),
            ended: Arc::new(watch::channel(0).0),
            notified: Arc::new(watch::channel(0).0),
            initialized: Arc::new(watch::channel(0).0),
            hung: Arc::new(watch::channel(0).0),
            hung_ended: Arc::new(watch::channel(0).0),
            blocking: Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new())),
        }
    }

    /// Waits until `n` `gate` calls have entered.
    async fn until_entered(&self, n: usize) {
        until(&self.entered, n).await
    }

    /// Lets one more `gate` call through and waits until it returned.
    async fn release_one(&self) {
        let n = *self.returned.borrow() + 1;
        self.gate.add_permits(1);
        until(&self.returned, n).await
    }
}

async fn until(counter: &watch::Sender<usize>, n: usize) {
    let mut rx = counter.subscribe();
    tokio::time::timeout(WAIT, rx.wait_for(|e| *e >= n))
        .await
        .expect("the calls got there in time")
        .unwrap();
}

#[tool_router]
impl Gated {
    #[tool(description = "Wait for the gate (ignoring cancellation), then return the tag")]
    async fn gate(&self, Parameters(GateArgs { tag }): Parameters<GateArgs>) -> String {
        self.entered.send_modify(|e| *e += 1);
        let _ends = Ends(self.ended.clone());
        match self.gate.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return "closed".into(),
        }
        self.returned.send_modify(|e| *e += 1);
        tag
    }

    #[tool(description = "Ask the host (a server-to-host request), return what came back")]
    async fn ask(
        &self,
        Parameters(GateArgs { tag }): Parameters<GateArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> String {
        use rmcp::model::{ClientResult, CustomRequest, ServerRequest};
        let req = CustomRequest::new("vendor/ask", Some(json!({"tag": tag})));
        match peer.send_request(ServerRequest::CustomRequest(req)).await {
            Ok(ClientResult::CustomResult(r)) => format!("result {}", r.0),
            Ok(other) => format!("other {other:?}"),
            Err(rmcp::ServiceError::McpError(e)) => format!("error {} {}", e.code.0, e.message),
            Err(e) => format!("failed {e}"),
        }
    }

    #[tool(description = "Wait until cancelled (through rmcp's token), then count it")]
    async fn wait(&self, ctx: rmcp::service::RequestContext<rmcp::RoleServer>) -> String {
        self.entered.send_modify(|e| *e += 1);
        ctx.ct.cancelled().await;
        self.ended.send_modify(|e| *e += 1);
        "cancelled".into()
    }

    #[tool(description = "Panic")]
    fn boom(&self) -> String {
        panic!("boom (a test's tool panicking on purpose)")
    }

    #[tool(description = "Return the tag at once")]
    fn echo(&self, Parameters(GateArgs { tag }): Parameters<GateArgs>) -> String {
        tag
    }
}

#[tool_handler(name = "gated", version = "1")]
impl ServerHandler for Gated {
    /// Refuses a host that calls itself `refused`, never answers one that calls itself
    /// `hang`.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, rmcp::ErrorData> {
        if request.client_info.name == "refused" {
            return Err(rmcp::ErrorData::invalid_params("refused", None));
        }
        if request.client_info.name == "boom" {
            panic!("boom (a test's initialize panicking on purpose)");
        }
        if request.client_info.name == "block" {
            // Blocking work on the runtime's thread, as a synchronous client would do (the
            // worker's other tasks are handed off meanwhile).
            self.hung.send_modify(|n| *n += 1);
            tokio::task::block_in_place(|| {
                let (released, changed) = &*self.blocking;
                let mut released = released.lock().unwrap();
                while !*released {
                    released = changed.wait(released).unwrap();
                }
            });
        }
        if request.client_info.name == "hang" {
            self.hung.send_modify(|n| *n += 1);
            let _ends = Ends(self.hung_ended.clone());
            std::future::pending::<()>().await;
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, _context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        self.initialized.send_modify(|n| *n += 1);
    }

    /// Never finishes.
    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleServer>,
    ) {
        self.notified.send_modify(|n| *n += 1);
        std::future::pending::<()>().await
    }
}

/// Serves `handler` bridged on a fresh TCP listener.
async fn serve(handler: Gated) -> SocketAddr {
    let server = mcpl_rmcp::builder(handler).build().unwrap();
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

/// A host writing raw JSON lines.
struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl Raw {
    /// Connected, nothing sent (small frames go out at once: no Nagle delay).
    async fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (read, write) = stream.into_split();
        Raw {
            lines: BufReader::new(read).lines(),
            write,
        }
    }

    /// Connected and initialized as an MCP host (id `"init"`).
    async fn mcp(addr: SocketAddr) -> Raw {
        let mut h = Raw::connect(addr).await;
        h.send(
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .await;
        let init = h.next_frame().await;
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        h
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn next_frame(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("the server sent it in time")
            .unwrap()
            .expect("the connection is open");
        serde_json::from_str(&line).unwrap()
    }

    /// The next response (frames without a method), skipping anything else.
    async fn next_response(&mut self) -> Value {
        loop {
            let v = self.next_frame().await;
            if v.get("method").is_none() {
                return v;
            }
        }
    }

    async fn call_tool(&mut self, id: Value, tool: &str, tag: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": tool, "arguments": {"tag": tag}}}))
            .await;
    }

    async fn cancel(&mut self, id: Value) {
        self.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": id}}),
        )
        .await;
    }
}

fn text(v: &Value) -> &str {
    v["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// The host cancels a call whose tool goes on (rmcp does not stop a handler, it drops its
/// answer), then reuses the id for a new call while the old one still runs. The old
/// call's answer is not the new call's: the new call is answered with its own result.
#[tokio::test]
async fn a_reused_id_after_a_cancel_gets_its_own_answer() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    h.call_tool(json!(7), "gate", "old").await;
    gated.until_entered(1).await;
    h.cancel(json!(7)).await;
    let cancelled = h.next_response().await;
    assert_eq!(cancelled["id"], 7);
    assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    h.call_tool(json!(7), "gate", "new").await;
    gated.until_entered(2).await;
    // The old call finishes first (the semaphore is fair), then the new one.
    gated.release_one().await;
    gated.release_one().await;
    let answer = h.next_response().await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(text(&answer), "new", "{answer}");
}

/// Every id the library reads is served and answered as it was sent, whatever rmcp can
/// carry (integer ids are `i64` there): a long string, the empty string, `u64::MAX`,
/// `i64::MIN`, `0`; and a cancel names such a call as the host sent it.
#[tokio::test]
async fn every_id_is_answered_as_sent_and_cancelled_by_it() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    let ids = [
        json!("i".repeat(mcpl::jsonrpc::MAX_ID_BYTES)),
        json!(""),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0),
    ];
    for (n, id) in ids.iter().enumerate() {
        h.call_tool(id.clone(), "echo", &n.to_string()).await;
        let answer = h.next_response().await;
        assert!(answer["id"] == *id, "answered under another id");
        assert_eq!(text(&answer), n.to_string(), "{:.300}", answer.to_string());
    }
    // A fractional id (JSON-RPC 2.0 §4: a SHOULD NOT, still an id) is cancelled by it as
    // any other: the bridge read the cancel's `requestId` by the integer rule and dropped it.
    for (k, id) in [json!(u64::MAX), json!(2.5)].into_iter().enumerate() {
        h.call_tool(id.clone(), "gate", "held").await;
        gated.until_entered(k + 1).await;
        h.cancel(id.clone()).await;
        let cancelled = h.next_response().await;
        assert_eq!(cancelled["id"], id);
        assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
        // The id is free again, and served.
        h.call_tool(id.clone(), "echo", "again").await;
        let answer = h.next_response().await;
        assert_eq!((&answer["id"], text(&answer)), (&id, "again"), "{answer}");
    }
}

/// A request id written with a fraction or an exponent (`1.0`, `-0`, `1e2`, `-0.0`): JSON-RPC
/// 2.0 §4 says SHOULD NOT, so the request is valid, reaches rmcp and is answered under the
/// same value (§5). A whole value past 2^53 so written (`1e30`) could stand for several
/// integers: answered `-32600` under `null`, once, never reaching rmcp; the connection goes
/// on.
#[tokio::test]
async fn numeric_ids_that_are_no_integers_are_answered_under_the_same_value() {
    let mut h = Raw::mcp(serve(Gated::new()).await).await;
    for raw in ["1.0", "-0", "1e2", "-0.0", "1e30", "100"] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{raw},"method":"tools/call","params":{{"name":"echo","arguments":{{"tag":"{raw}"}}}}}}"#
        );
        h.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let answer = h.next_response().await;
        if raw == "1e30" {
            assert_eq!(answer["id"], Value::Null, "{raw}: {answer}");
            assert_eq!(answer["error"]["code"], -32600, "{raw}: {answer}");
        } else {
            let same: Value = serde_json::from_str(raw).unwrap();
            assert_eq!((&answer["id"], text(&answer)), (&same, raw), "{answer}");
        }
    }
}

/// Serves `handler` bridged, with a feature set whose `beforeInference` hook never answers.
async fn serve_with_stuck_hook(handler: Gated) -> SocketAddr {
    let server = mcpl_rmcp::builder(handler)
        .feature_set(
            "gated",
            "A hook that never answers",
            &[mcpl::capability::Capability::InjectSystem],
        )
        .on_before_inference("gated", |_grant, _turn| async {
            std::future::pending::<()>().await;
            Ok(mcpl::protocol::hooks::BeforeInferenceResult::default())
        })
        .build()
        .unwrap();
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

/// MCP `notifications/cancelled` in every odd form, under an MCPL host: for `initialize`
/// (answered), for ids never sent, with a `requestId` that is no id or missing, repeated
/// for one call, for an MCPL request the session serves (a hook), and for requests already
/// answered. Each request is answered exactly once (a cancelled one `-32800`), a cancelled
/// call's late answer never reaches the host, and the connection goes on serving.
#[tokio::test]
async fn cancels_of_every_kind_leave_one_answer_per_request() {
    let gated = Gated::new();
    let addr = serve_with_stuck_hook(gated.clone()).await;
    let mut h = Raw::connect(addr).await;
    h.send(
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18",
                             "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                             "clientInfo": {"name": "raw", "version": "0"}}}),
    )
    .await;
    let init = h.next_response().await;
    assert_eq!(init["id"], "init", "{init}");
    assert!(init["result"]["capabilities"]["experimental"]["mcpl"].is_object());
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    for id in [
        json!("init"),
        json!(99),
        json!({"a": 1}),
        Value::Null,
        json!(1.5),
        json!(true),
    ] {
        h.cancel(id).await;
    }
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled"}))
        .await;
    h.send(
        json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
                  "params": {"effectiveCapabilities":
                             ["tools", "contextHooks.beforeInference.inject.system"]}}),
    )
    .await;
    let receipt = h.next_response().await;
    assert_eq!(receipt["id"], "p", "{receipt}");
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    h.call_tool(json!(1), "gate", "late").await;
    gated.until_entered(1).await;
    for _ in 0..3 {
        h.cancel(json!(1)).await;
    }
    h.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "context/beforeInference",
                  "params": {"featureSet": "gated", "inferenceId": "i1",
                             "conversationId": "c", "turnIndex": 0, "userMessage": null}}),
    )
    .await;
    h.cancel(json!(2)).await;
    h.cancel(json!(2)).await;
    h.cancel(json!(1)).await;
    h.call_tool(json!(3), "echo", "served").await;
    let mut answers = Vec::new();
    let answer = |a: Value| {
        (
            a["id"].clone(),
            a["error"]["code"].clone(),
            text(&a).to_owned(),
        )
    };
    for _ in 0..3 {
        answers.push(answer(h.next_response().await));
    }
    // The cancelled call's tool finishes now; rmcp's answer for it goes nowhere.
    gated.release_one().await;
    h.call_tool(json!(4), "echo", "still served").await;
    answers.push(answer(h.next_response().await));
    let cancelled = json!(mcpl_rmcp::REQUEST_CANCELLED);
    assert_eq!(
        answers,
        [
            (json!(1), cancelled.clone(), String::new()),
            (json!(2), cancelled, String::new()),
            (json!(3), Value::Null, "served".to_owned()),
            (json!(4), Value::Null, "still served".to_owned()),
        ]
    );
    // Nothing else was owed: the next frame is the answer to the next request.
    h.send(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}))
        .await;
    let pong = h.next_response().await;
    assert_eq!(pong["id"], 5, "{pong}");
}

/// §5.1 lifecycle around rmcp's `initialize`: one the handler refuses is answered with its
/// error and the connection stays uninitialized (rmcp's service ends), so the host may try
/// again and a fresh rmcp service answers; a second `initialize` after that is the
/// session's `-32600`; calls are served.
#[tokio::test]
async fn a_refused_initialize_may_be_retried_and_a_second_is_refused() {
    let addr = serve(Gated::new()).await;
    let mut h = Raw::connect(addr).await;
    let init = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    h.send(init(1, "refused")).await;
    let first = h.next_response().await;
    assert_eq!(first["id"], 1);
    assert_eq!(
        (&first["error"]["code"], &first["error"]["message"]),
        (&json!(-32602), &json!("refused")),
        "{first}"
    );
    h.call_tool(json!(9), "echo", "too early").await;
    let early = h.next_response().await;
    assert_eq!(early["error"]["code"], -32600, "{early}");
    h.send(init(2, "raw")).await;
    let second = h.next_response().await;
    assert_eq!(second["result"]["serverInfo"]["name"], "gated", "{second}");
    h.send(init(3, "raw")).await;
    let third = h.next_response().await;
    assert_eq!(third["error"]["code"], -32600, "{third}");
    h.call_tool(json!(4), "echo", "after").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(4), "after"), "{call}");
}

/// The host ends its output (a half-close) with calls still with rmcp: each is answered
/// once, after the EOF, and then the server ends the connection.
#[tokio::test]
async fn calls_in_flight_at_the_hosts_half_close_are_answered() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    h.call_tool(json!(1), "gate", "one").await;
    h.call_tool(json!(2), "gate", "two").await;
    gated.until_entered(2).await;
    h.call_tool(json!(3), "echo", "three").await;
    h.write.shutdown().await.unwrap();
    let three = h.next_response().await;
    assert_eq!(
        (&three["id"], text(&three)),
        (&json!(3), "three"),
        "{three}"
    );
    gated.release_one().await;
    gated.release_one().await;
    let mut rest = Vec::new();
    for _ in 0..2 {
        let a = h.next_response().await;
        rest.push((a["id"].clone(), text(&a).to_owned()));
    }
    rest.sort_by_key(|(id, _)| id.as_i64());
    assert_eq!(
        rest,
        [(json!(1), "one".to_owned()), (json!(2), "two".to_owned())]
    );
    let end = tokio::time::timeout(WAIT, h.lines.next_line()).await;
    assert!(matches!(end, Ok(Ok(None))), "the server closed: {end:?}");
}

/// Answers to rmcp's own requests (§4.1, JSON-RPC): one under an id the server never
/// used, an error, the same answer twice. rmcp gets the host's error as its error and each
/// answer reaches only the request it names; the stray and the repeated answer are not
/// taken for a later request, nor for any of the host's.
#[tokio::test]
async fn odd_answers_to_rmcps_requests_reach_only_the_request_they_name() {
    let mut h = Raw::mcp(serve(Gated::new()).await).await;
    h.call_tool(json!(1), "ask", "first").await;
    let asked = h.next_frame().await;
    assert_eq!(asked["method"], "vendor/ask", "{asked}");
    assert_eq!(asked["params"]["tag"], "first");
    let x = asked["id"].clone();
    h.send(json!({"jsonrpc": "2.0", "id": "never-sent", "result": {"stray": true}}))
        .await;
    let unused = x.as_u64().map_or(json!(7), |n| json!(n + 1000));
    h.send(json!({"jsonrpc": "2.0", "id": unused, "result": {"unused id": true}}))
        .await;
    h.send(json!({"jsonrpc": "2.0", "id": x, "error": {"code": -32001, "message": "no"}}))
        .await;
    let first = h.next_response().await;
    assert_eq!(first["id"], 1, "{first}");
    assert_eq!(text(&first), "error -32001 no", "{first}");
    // The same answer again, then a result for it: the request is gone.
    h.send(json!({"jsonrpc": "2.0", "id": x, "error": {"code": -32001, "message": "no"}}))
        .await;
    h.send(json!({"jsonrpc": "2.0", "id": x, "result": {"late": true}}))
        .await;
    h.call_tool(json!(2), "ask", "second").await;
    let asked = h.next_frame().await;
    assert_eq!(asked["params"]["tag"], "second", "{asked}");
    assert_ne!(asked["id"], x, "rmcp's ids are not reused");
    h.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"n": 2}}))
        .await;
    let second = h.next_response().await;
    assert_eq!(second["id"], 2, "{second}");
    assert_eq!(text(&second), r#"result {"n":2}"#, "{second}");
}

/// Big and deep requests for rmcp: `arguments` nested as deep as the library reads
/// (serde_json's 128 levels for the whole message), a 4 MiB `_meta` member, a 1 MiB
/// method name. Each is answered once with its own id, nothing panics, and the connection
/// goes on.
#[tokio::test]
async fn deep_and_big_requests_are_answered_once() {
    let mut h = Raw::mcp(serve(Gated::new()).await).await;
    // message → params → arguments → deep: 4 levels, then 120 more.
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!([deep]);
    }
    h.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "echo", "arguments": {"tag": "deep", "deep": deep}}}))
        .await;
    let a = h.next_response().await;
    assert_eq!(
        (&a["id"], text(&a)),
        (&json!(1), "deep"),
        "{:.300}",
        a.to_string()
    );
    let meta = "m".repeat(4 << 20);
    h.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "echo", "arguments": {"tag": "meta"},
                             "_meta": {"progressToken": "p", "big": meta}}}))
        .await;
    let a = h.next_response().await;
    assert_eq!(
        (&a["id"], text(&a)),
        (&json!(2), "meta"),
        "{:.300}",
        a.to_string()
    );
    h.send(json!({"jsonrpc": "2.0", "id": 3, "method": "x".repeat(1 << 20), "params": {}}))
        .await;
    let a = h.next_response().await;
    assert_eq!(a["id"], 3, "{:.300}", a.to_string());
    assert_eq!(a["error"]["code"], -32601, "{:.300}", a.to_string());
    h.call_tool(json!(4), "echo", "after").await;
    let a = h.next_response().await;
    assert_eq!((&a["id"], text(&a)), (&json!(4), "after"), "{a}");
}

/// A host that calls a tool that never returns and ignores its cancellation token, then
/// cancels, again and again: each cancel is answered `-32800` at once and frees the
/// library's in-flight slot, but rmcp only tells its handler (it does not stop it). The
/// handlers still running are bounded: past `MAX_IN_FLIGHT` of them a call is refused at
/// once and never reaches rmcp.
#[tokio::test]
async fn handlers_that_outlive_their_cancel_are_bounded() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    let mut refused = 0;
    for i in 0..mcpl_rmcp::MAX_IN_FLIGHT + 50 {
        let id = json!(i);
        h.call_tool(id.clone(), "gate", "stuck").await;
        // A ping is answered in place: behind a refusal, or first when the call is waiting.
        h.send(json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}))
            .await;
        let first = h.next_response().await;
        if first["id"] == id {
            assert_eq!(first["error"]["code"], -32603, "{first}");
            refused += 1;
            let pong = h.next_response().await;
            assert_eq!(pong["id"], "ping", "{pong}");
            continue;
        }
        assert_eq!(first["id"], "ping", "{first}");
        h.cancel(id.clone()).await;
        let cancelled = h.next_response().await;
        assert_eq!(cancelled["id"], id, "{cancelled}");
        assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    }
    assert_eq!(refused, 50);
    gated.until_entered(mcpl_rmcp::MAX_IN_FLIGHT).await;
    // The ones let through did reach rmcp, and no more.
    assert_eq!(*gated.entered.borrow(), mcpl_rmcp::MAX_IN_FLIGHT);
    // Once their handlers end, their places are free again.
    gated.gate.add_permits(mcpl_rmcp::MAX_IN_FLIGHT);
    until(&gated.returned, mcpl_rmcp::MAX_IN_FLIGHT).await;
    h.call_tool(json!("after"), "echo", "served").await;
    let a = h.next_response().await;
    assert_eq!((&a["id"], text(&a)), (&json!("after"), "served"), "{a}");
}

/// A host calls a tool that never returns (and ignores its cancellation token), and the
/// connection ends (here the server closes it; a host that goes away ends it after the
/// peer's drain limit): nobody can be answered any more, so the handler is stopped, as the
/// library stops its own handlers when their connection ends. It ran on for good before,
/// one more task alive per such call.
#[tokio::test]
async fn handlers_still_running_when_the_connection_ends_are_stopped() {
    let gated = Gated::new();
    let server = mcpl_rmcp::builder(gated.clone()).build().unwrap();
    let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = tokio::spawn(async move {
        let (t, _) = listener.accept().await.unwrap();
        server.start(t)
    });
    let mut h = Raw::mcp(addr).await;
    let session = accepted.await.unwrap();
    h.call_tool(json!(1), "gate", "never").await;
    h.call_tool(json!(2), "gate", "never").await;
    gated.until_entered(2).await;
    session.close();
    until(&gated.ended, 2).await;
    assert_eq!(*gated.returned.borrow(), 0, "stopped, not finished");
}

/// A host floods a notification whose rmcp handler never finishes
/// (`notifications/roots/list_changed` here): rmcp runs each as a task of its own, so they
/// piled up without bound; at most `MAX_NOTIFICATIONS_IN_FLIGHT` run at once, and past it
/// one is dropped (with a warning), as the library drops its own handlers' past its bound.
#[tokio::test]
async fn notification_handlers_that_never_finish_are_bounded() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    let bound = mcpl_rmcp::MAX_NOTIFICATIONS_IN_FLIGHT;
    // In rounds, each closed by a call: rmcp has read (and started) the round's
    // notifications before it answers the call behind them, so none is lost to a full queue.
    let rounds = bound / 100 + 2;
    for round in 0..rounds {
        for _ in 0..100 {
            h.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}))
                .await;
        }
        h.call_tool(json!(round), "echo", "read").await;
        let a = h.next_response().await;
        assert_eq!((&a["id"], text(&a)), (&json!(round), "read"), "{a}");
    }
    assert_eq!(*gated.notified.borrow(), bound);
}

/// The host's cancel reaches rmcp's handler under the id rmcp knows the request by: its
/// cancellation token fires (whatever id the host used, a string here).
#[tokio::test]
async fn a_cancel_reaches_the_handlers_token() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    let id = json!("the host's own id");
    h.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                  "params": {"name": "wait", "arguments": {}}}))
        .await;
    gated.until_entered(1).await;
    h.cancel(id.clone()).await;
    let cancelled = h.next_response().await;
    assert_eq!(cancelled["id"], id);
    assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    until(&gated.ended, 1).await;
}

/// A host that floods never-finishing notifications between `initialize` and
/// `notifications/initialized` (MCP's lifecycle: the host's `initialized` follows the
/// answer to `initialize`): past `MAX_NOTIFICATIONS_IN_FLIGHT` handlers the bridge dropped
/// `notifications/initialized` too, so the app's `on_initialized` never ran. It is part of
/// the lifecycle, so its first one is never dropped for the bound (a second counts as any
/// notification does).
#[tokio::test]
async fn initialized_is_not_dropped_under_a_notification_flood() {
    let gated = Gated::new();
    let mut h = Raw::connect(serve(gated.clone()).await).await;
    h.send(
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "raw", "version": "0"}}}),
    )
    .await;
    let init = h.next_frame().await;
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let bound = mcpl_rmcp::MAX_NOTIFICATIONS_IN_FLIGHT;
    // In rounds, each closed by a call, as in the test above: none lost to a full queue.
    for round in 0..bound / 100 + 2 {
        for _ in 0..100 {
            h.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}))
                .await;
        }
        h.call_tool(json!(round), "echo", "read").await;
        let a = h.next_response().await;
        assert_eq!((&a["id"], text(&a)), (&json!(round), "read"), "{a}");
    }
    assert_eq!(*gated.notified.borrow(), bound);
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    until(&gated.initialized, 1).await;
}

/// An rmcp `initialize` that never answers: the library answers it `-32603` once the
/// connection's request timeout has passed (`PeerConfig::request_timeout`, the fallback's
/// limit for `initialize`), and the host may try again (§5.1: the connection is not
/// initialized). Each try started an rmcp service of its own and the stuck one stayed,
/// its `initialize` handler pending, until the connection ended: one more per retry. The
/// stuck service is stopped once its `initialize` is given up, so at most one rmcp service
/// runs per connection, and a retry is answered by a fresh one.
#[tokio::test]
async fn a_hung_initialize_is_stopped_once_given_up_and_a_retry_is_answered() {
    let gated = Gated::new();
    let config = mcpl::peer::PeerConfig {
        // Only how soon the library gives up on the hung `initialize`; nothing races it.
        request_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let server = mcpl_rmcp::builder(gated.clone())
        .peer_config(config)
        .build()
        .unwrap();
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
    let mut h = Raw::connect(addr).await;
    let init = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    for n in 1..=2 {
        h.send(init(n, "hang")).await;
        let given_up = h.next_response().await;
        assert_eq!(given_up["id"], n, "{given_up}");
        assert_eq!(given_up["error"]["code"], -32603, "{given_up}");
        assert_eq!(*gated.hung.borrow(), n as usize);
        // The stuck handler (and its service) is stopped, not left to the connection's end.
        until(&gated.hung_ended, n as usize).await;
    }
    // Under an id already used (free again once answered, JSON-RPC 2.0).
    h.send(init(2, "raw")).await;
    let answered = h.next_response().await;
    assert_eq!(
        answered["result"]["serverInfo"]["name"], "gated",
        "{answered}"
    );
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    until(&gated.initialized, 1).await;
    h.call_tool(json!(1), "echo", "served").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(1), "served"), "{call}");
}

/// The same hung rmcp `initialize` on a server whose connections have no request timeout
/// (`PeerConfig::request_timeout: None`): the library waits for the fallback without a
/// limit, so the host's `initialize` was never answered and the stuck service held on
/// until the connection closed. The bridge bounds `initialize` itself
/// (`BridgeConfig::initialize_timeout`, `mcpl_rmcp::INITIALIZE_TIMEOUT` by default): the
/// host is answered `-32603`, the stuck service is stopped, and a retry is served.
#[tokio::test]
async fn a_hung_initialize_is_bounded_without_a_request_timeout() {
    let gated = Gated::new();
    let config = mcpl::peer::PeerConfig {
        request_timeout: None,
        ..Default::default()
    };
    // Only how soon the bridge gives up on the hung `initialize`; nothing races it.
    let bridge = mcpl_rmcp::BridgeConfig::default().initialize_timeout(Duration::from_millis(100));
    let server = mcpl_rmcp::builder_with(gated.clone(), bridge)
        .unwrap()
        .peer_config(config)
        .build()
        .unwrap();
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
    let mut h = Raw::connect(addr).await;
    let init = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    for n in 1..=2 {
        h.send(init(n, "hang")).await;
        let given_up = h.next_response().await;
        assert_eq!(given_up["id"], n, "{given_up}");
        assert_eq!(given_up["error"]["code"], -32603, "{given_up}");
        until(&gated.hung_ended, n as usize).await;
    }
    h.send(init(3, "raw")).await;
    let answered = h.next_response().await;
    assert_eq!(
        answered["result"]["serverInfo"]["name"], "gated",
        "{answered}"
    );
    h.call_tool(json!(1), "echo", "served").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(1), "served"), "{call}");
}

/// rmcp handlers that panic, as an author's bug does: rmcp runs a request's handler as a
/// task of its own and sends nothing when it panics, so the host's request was never
/// answered. Every request gets an answer: `-32603` (as the library answers for its own
/// handlers, "the handler panicked"), for a tool call and for `initialize` (which the host
/// may then retry), and the connection goes on.
#[tokio::test]
async fn a_panicking_handler_is_answered_and_the_connection_goes_on() {
    let mut h = Raw::connect(serve(Gated::new()).await).await;
    let init = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    h.send(init(1, "boom")).await;
    let first = h.next_response().await;
    assert_eq!(first["id"], 1, "{first}");
    assert_eq!(first["error"]["code"], -32603, "{first}");
    h.send(init(2, "raw")).await;
    let second = h.next_response().await;
    assert_eq!(second["result"]["serverInfo"]["name"], "gated", "{second}");
    h.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                  "params": {"name": "boom", "arguments": {}}}))
        .await;
    let boom = h.next_response().await;
    assert_eq!(boom["id"], 3, "{boom}");
    assert_eq!(boom["error"]["code"], -32603, "{boom}");
    assert_eq!(boom["error"]["message"], "the handler panicked", "{boom}");
    h.call_tool(json!(4), "echo", "after").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(4), "after"), "{call}");
}

/// An rmcp `initialize` that blocks its thread past the library's time limit (`-32603`):
/// the bridge's service cannot be stopped mid-poll, and the request entry it kept under the
/// host's id stayed until then (then for good, the service's cleanup finding a newer one in
/// place), so the host's retry under the same id (free again, JSON-RPC 2.0) was refused
/// `-32600` "already in flight". A given-up `initialize` frees its id at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_given_up_initialize_frees_its_id_at_once() {
    let gated = Gated::new();
    let config = mcpl::peer::PeerConfig {
        // Only how soon the library gives up on the blocked `initialize`; nothing races it.
        request_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let server = mcpl_rmcp::builder(gated.clone())
        .peer_config(config)
        .build()
        .unwrap();
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
    let mut h = Raw::connect(addr).await;
    let init = |name: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    h.send(init("block")).await;
    let given_up = h.next_response().await;
    assert_eq!(given_up["error"]["code"], -32603, "{given_up}");
    assert_eq!(*gated.hung.borrow(), 1);
    h.send(init("raw")).await;
    let retry = h.next_response().await;
    let (released, changed) = &*gated.blocking;
    *released.lock().unwrap() = true;
    changed.notify_all();
    assert_eq!(retry["id"], 1, "{retry}");
    assert_eq!(retry["result"]["serverInfo"]["name"], "gated", "{retry}");
    h.call_tool(json!(1), "echo", "served").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(1), "served"), "{call}");
}

/// JSON-RPC batches through the bridge: calls for rmcp, a notification for it and a cancel
/// of a call in the same batch. The batch is answered as one array with one answer per
/// request, each its own (the cancelled call `-32800`, its tool's token fired), and the
/// connection goes on.
#[tokio::test]
async fn a_batch_of_calls_and_a_cancel_is_answered_as_one_array() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    h.send(json!([
        {"jsonrpc": "2.0", "id": "b1", "method": "tools/call",
         "params": {"name": "echo", "arguments": {"tag": "one"}}},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": "b2", "method": "tools/call",
         "params": {"name": "wait", "arguments": {}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "b2"}},
        {"jsonrpc": "2.0", "id": "b3", "method": "tools/list"}
    ]))
    .await;
    let batch = h.next_response().await;
    let answers = batch.as_array().expect("one array for the batch");
    let mut got: Vec<(Value, Value, String)> = answers
        .iter()
        .map(|a| {
            (
                a["id"].clone(),
                a["error"]["code"].clone(),
                text(a).to_owned(),
            )
        })
        .collect();
    got.sort_by_key(|(id, _, _)| id.to_string());
    assert_eq!(got.len(), 3, "{batch}");
    assert_eq!(
        got[0],
        (json!("b1"), Value::Null, "one".to_owned()),
        "{batch}"
    );
    assert_eq!(
        (&got[1].0, &got[1].1),
        (&json!("b2"), &json!(mcpl_rmcp::REQUEST_CANCELLED)),
        "{batch}"
    );
    assert_eq!(
        (&got[2].0, &got[2].1),
        (&json!("b3"), &Value::Null),
        "{batch}"
    );
    until(&gated.ended, 1).await;
    h.call_tool(json!("after"), "echo", "served").await;
    let a = h.next_response().await;
    assert_eq!((&a["id"], text(&a)), (&json!("after"), "served"), "{a}");
}

/// An `initialize` whose params the library reads (its `protocolVersion` is a string) but
/// rmcp's `InitializeRequestParams` cannot (here `clientInfo.name` a number): rmcp's types
/// read it as a custom request, so its handshake answered `-32602` about missing
/// initialize-less `_meta` (no word of what was wrong) and went on waiting for an
/// `initialize`; with that `_meta` present it served the request in the initialize-less
/// lifecycle, answered `-32601` "initialize", and left that service running on a
/// connection never initialized. Both are answered `-32602` at once with rmcp's reason, and
/// no service is started; a good `initialize` after them is served.
#[tokio::test]
async fn an_initialize_rmcp_cannot_read_is_answered_32602_with_its_reason() {
    let addr = serve(Gated::new()).await;
    let mut h = Raw::connect(addr).await;
    let bad = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": 5, "version": "0"}});
    let mut with_meta = bad.clone();
    with_meta["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                "io.modelcontextprotocol/clientCapabilities": {}});
    for (n, params) in [bad, with_meta].into_iter().enumerate() {
        h.send(json!({"jsonrpc": "2.0", "id": n, "method": "initialize", "params": params}))
            .await;
        let refused = h.next_response().await;
        assert_eq!(refused["id"], n, "{refused}");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("invalid type: integer `5`, expected a string"),
            "{refused}"
        );
    }
    h.send(
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "raw", "version": "0"}}}),
    )
    .await;
    let init = h.next_response().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "gated", "{init}");
    h.call_tool(json!(1), "echo", "served").await;
    let call = h.next_response().await;
    assert_eq!((&call["id"], text(&call)), (&json!(1), "served"), "{call}");
}

/// An rmcp `initialize` that blocks its thread past the library's time limit, then a retry
/// served by a fresh service and a tool asking the host (a server-to-host request) while
/// the stopped service's task still waits to be dropped (it cannot be while its thread is
/// blocked). When it ended, its cleanup stopped every rmcp request to the host in flight
/// on the connection, the new service's among them (the map was the connection's, and
/// each service numbers its requests from 0): the host's answer went nowhere and the call
/// was never answered. A service's end stops only its own requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_service_ending_late_leaves_the_new_ones_requests_alone() {
    let gated = Gated::new();
    let config = mcpl::peer::PeerConfig {
        // Only how soon the library gives up on the blocked `initialize`; nothing races it.
        request_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let server = mcpl_rmcp::builder(gated.clone())
        .peer_config(config)
        .build()
        .unwrap();
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
    let mut h = Raw::connect(addr).await;
    let init = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": name, "version": "0"}}})
    };
    h.send(init(1, "block")).await;
    let given_up = h.next_response().await;
    assert_eq!(given_up["error"]["code"], -32603, "{given_up}");
    h.send(init(2, "raw")).await;
    let init = h.next_response().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "gated", "{init}");
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    h.call_tool(json!(3), "ask", "late").await;
    let asked = h.next_frame().await;
    assert_eq!(asked["method"], "vendor/ask", "{asked}");
    // Every service holds a clone of the handler: the stopped one's goes when it ends.
    let held = Arc::strong_count(&gated.blocking);
    let (released, changed) = &*gated.blocking;
    *released.lock().unwrap() = true;
    changed.notify_all();
    tokio::time::timeout(WAIT, async {
        while Arc::strong_count(&gated.blocking) >= held {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the stopped service ended");
    h.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"n": 3}}))
        .await;
    let call = h.next_response().await;
    assert_eq!(call["id"], 3, "{call}");
    assert_eq!(text(&call), r#"result {"n":3}"#, "{call}");
}

/// `1` and `"1"` are different ids (JSON-RPC 2.0): both in flight at once, each is served
/// under an id of the bridge's own, a cancel naming `"1"` cancels only the string one, and
/// the number one is answered with its own result.
#[tokio::test]
async fn a_number_id_and_the_same_digits_as_a_string_are_two_requests() {
    let gated = Gated::new();
    let mut h = Raw::mcp(serve(gated.clone()).await).await;
    h.call_tool(json!(1), "gate", "number").await;
    h.call_tool(json!("1"), "gate", "string").await;
    gated.until_entered(2).await;
    h.cancel(json!("1")).await;
    let cancelled = h.next_response().await;
    assert_eq!(cancelled["id"], "1", "{cancelled}");
    assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    // The number one entered first and is let through first.
    gated.release_one().await;
    let answer = h.next_response().await;
    assert_eq!(
        (&answer["id"], text(&answer)),
        (&json!(1), "number"),
        "{answer}"
    );
    gated.release_one().await;
    h.call_tool(json!("1"), "echo", "again").await;
    let again = h.next_response().await;
    assert_eq!(
        (&again["id"], text(&again)),
        (&json!("1"), "again"),
        "{again}"
    );
}
