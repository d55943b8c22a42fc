//! The bridge while rmcp's service loop does not read its queue: here a log writer that
//! blocks (as a full stderr pipe does) on the line rmcp's loop writes for one marked
//! notification, so the loop stands still inside that line while the host goes on. The
//! bridge's queue (`mcpl_rmcp::QUEUE`) then fills deterministically, and what must not be
//! lost with it is not: a host's `notifications/cancelled` still reaches the handler's
//! token, and a service's first `notifications/initialized` still runs `on_initialized`.
//! The tests in this binary share the process's log subscriber (installed once); each
//! stalls on its own marker. The server runs on a runtime of its own, so the worker blocked
//! in the log line is never one the host's side (and its time limits) needs.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Bound on every single wait, so a broken bridge fails instead of hanging the suite.
const WAIT: Duration = Duration::from_secs(10);

/// Where one marked log line stands.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Stage {
    /// Not written yet: the first line carrying the marker blocks.
    Armed,
    /// A thread is blocked writing it.
    Blocked,
    /// Let go; lines with the marker pass.
    Released,
}

/// One marker's stall: the writer blocks on `stage` until the test releases it.
struct Stall {
    marker: String,
    stage: Mutex<Stage>,
    changed: Condvar,
    /// The same stage, for the async test to wait on.
    seen: watch::Sender<Stage>,
}

impl Stall {
    /// Waits (async) until a thread is blocked on this stall's line.
    async fn until_blocked(&self) {
        let mut rx = self.seen.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|s| *s == Stage::Blocked))
            .await
            .expect("rmcp's loop wrote the marked line in time")
            .unwrap();
    }

    /// Lets the blocked writer go.
    fn release(&self) {
        *self.stage.lock().unwrap() = Stage::Released;
        self.changed.notify_all();
        self.seen.send_replace(Stage::Released);
    }
}

/// The test's hold on a [`Stall`]: released when dropped (a failed test blocks nothing).
struct Armed(Arc<Stall>);

impl std::ops::Deref for Armed {
    type Target = Stall;
    fn deref(&self) -> &Stall {
        &self.0
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        *self.0.stage.lock().unwrap_or_else(|e| e.into_inner()) = Stage::Released;
        self.0.changed.notify_all();
    }
}

/// The armed stalls, shared with the writer.
fn stalls() -> &'static Mutex<Vec<Arc<Stall>>> {
    static STALLS: OnceLock<Mutex<Vec<Arc<Stall>>>> = OnceLock::new();
    STALLS.get_or_init(|| {
        tracing_subscriber::fmt()
            .with_writer(|| Blocking)
            .with_ansi(false)
            // rmcp's loop logs every notification it reads at info.
            .with_env_filter("rmcp=info,mcpl_rmcp=warn")
            .init();
        Mutex::new(Vec::new())
    })
}

/// A stall on the first log line that carries `marker`.
fn stall_on(marker: &str) -> Armed {
    let stall = Arc::new(Stall {
        marker: marker.to_owned(),
        stage: Mutex::new(Stage::Armed),
        changed: Condvar::new(),
        seen: watch::channel(Stage::Armed).0,
    });
    stalls().lock().unwrap().push(stall.clone());
    Armed(stall)
}

/// A log writer that drops what it is given, but blocks on an armed marker's first line.
struct Blocking;

impl Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf);
        let hit = stalls()
            .lock()
            .unwrap()
            .iter()
            .find(|s| line.contains(&s.marker))
            .cloned();
        if let Some(stall) = hit {
            let armed = {
                let mut stage = stall.stage.lock().unwrap();
                let armed = *stage == Stage::Armed;
                if armed {
                    *stage = Stage::Blocked;
                }
                armed
            };
            if armed {
                stall.seen.send_replace(Stage::Blocked);
                // The worker's queued tasks go on elsewhere meanwhile (its core is handed
                // off), so only the task writing this line stands still.
                tokio::task::block_in_place(|| {
                    let mut stage = stall.stage.lock().unwrap();
                    while *stage == Stage::Blocked {
                        stage = stall.changed.wait(stage).unwrap();
                    }
                });
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tool that waits for its cancellation token, and counts.
#[derive(Clone)]
struct Waiter {
    /// How many `wait` calls have entered.
    entered: Arc<watch::Sender<usize>>,
    /// How many `wait` calls saw their token fire.
    cancelled: Arc<watch::Sender<usize>>,
    /// How many times `on_initialized` has run.
    initialized: Arc<watch::Sender<usize>>,
}

impl Waiter {
    fn new() -> Waiter {
        Waiter {
            entered: Arc::new(watch::channel(0).0),
            cancelled: Arc::new(watch::channel(0).0),
            initialized: Arc::new(watch::channel(0).0),
        }
    }
}

async fn until(counter: &watch::Sender<usize>, n: usize) {
    let mut rx = counter.subscribe();
    tokio::time::timeout(WAIT, rx.wait_for(|e| *e >= n))
        .await
        .expect("it happened in time")
        .unwrap();
}

#[tool_router]
impl Waiter {
    #[tool(description = "Wait until cancelled (through rmcp's token), then count it")]
    async fn wait(&self, ctx: rmcp::service::RequestContext<rmcp::RoleServer>) -> String {
        self.entered.send_modify(|e| *e += 1);
        ctx.ct.cancelled().await;
        self.cancelled.send_modify(|e| *e += 1);
        "cancelled".into()
    }

    #[tool(description = "Ask the host (a server-to-host request), return what came back")]
    async fn ask(&self, peer: rmcp::Peer<rmcp::RoleServer>) -> String {
        use rmcp::model::{ClientResult, CustomRequest, ServerRequest};
        let req = CustomRequest::new("vendor/ask", None);
        match peer.send_request(ServerRequest::CustomRequest(req)).await {
            Ok(ClientResult::CustomResult(r)) => format!("result {}", r.0),
            Ok(other) => format!("other {other:?}"),
            Err(e) => format!("failed {e}"),
        }
    }
}

#[tool_handler(name = "waiter", version = "1")]
impl ServerHandler for Waiter {
    async fn on_initialized(&self, _context: rmcp::service::NotificationContext<rmcp::RoleServer>) {
        self.initialized.send_modify(|n| *n += 1);
    }
}

/// A bridged server on a runtime of its own (dropped without waiting for its workers).
struct Served {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Serves `handler` bridged on a fresh TCP listener, on a runtime of its own.
async fn serve(handler: Waiter) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let server = mcpl_rmcp::builder(handler).build().unwrap();
    let (bound, addr) = tokio::sync::oneshot::channel();
    runtime.spawn(async move {
        let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
            .await
            .unwrap();
        let _ = bound.send(listener.local_addr().unwrap());
        while let Ok((t, _)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move { server.serve(t).await });
        }
    });
    Served {
        addr: addr.await.unwrap(),
        runtime: Some(runtime),
    }
}

/// A host writing raw JSON lines.
struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (read, write) = stream.into_split();
        Raw {
            lines: BufReader::new(read).lines(),
            write,
        }
    }

    /// Sends `initialize` (an MCP host) and reads its answer.
    async fn initialize(&mut self) {
        self.send(
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .await;
        let init = self.next_response().await;
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        tokio::time::timeout(WAIT, self.write.write_all(line.as_bytes()))
            .await
            .expect("the server read it in time")
            .unwrap();
    }

    /// Many notifications in one write.
    async fn notify_many(&mut self, method: &str, n: usize) {
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(&json!({"jsonrpc": "2.0", "method": method}).to_string());
            text.push('\n');
        }
        tokio::time::timeout(WAIT, self.write.write_all(text.as_bytes()))
            .await
            .expect("the server read it in time")
            .unwrap();
    }

    /// The next response (frames without a method), skipping anything else.
    async fn next_response(&mut self) -> Value {
        loop {
            let line = tokio::time::timeout(WAIT, self.lines.next_line())
                .await
                .expect("the server sent it in time")
                .unwrap()
                .expect("the connection is open");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("method").is_none() {
                return v;
            }
        }
    }

    /// A `ping` answered: the session answers it itself, in wire order, so everything
    /// sent before it has been handed to the bridge (or refused) by then.
    async fn sync(&mut self, id: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
        let pong = self.next_response().await;
        assert_eq!(pong["id"], id, "{pong}");
    }
}

/// The host cancels a call while rmcp's loop stands still with the bridge's queue full
/// (`QUEUE` notifications waiting): the `notifications/cancelled` found no room and was
/// dropped, so the handler's token never fired (rmcp does not stop a handler; it ran on,
/// counted against `MAX_IN_FLIGHT`, until it ended by itself, here never). The cancel
/// reaches the token whatever the queue holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_reaches_the_handler_while_the_queue_is_full() {
    let waiter = Waiter::new();
    let served = serve(waiter.clone()).await;
    let mut h = Raw::connect(served.addr).await;
    h.initialize().await;
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    h.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "wait", "arguments": {}}}))
        .await;
    until(&waiter.entered, 1).await;
    let stall = stall_on("notifications/stall-cancel");
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/stall-cancel"}))
        .await;
    stall.until_blocked().await;
    // rmcp reads nothing now: these fill its queue, and more.
    h.notify_many("notifications/filler", mcpl_rmcp::QUEUE + 10)
        .await;
    h.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 1}}),
    )
    .await;
    let cancelled = h.next_response().await;
    assert_eq!(cancelled["id"], 1, "{cancelled}");
    assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    h.sync("after the cancel").await;
    stall.release();
    until(&waiter.cancelled, 1).await;
}

/// A flood of notifications between the answer to `initialize` and
/// `notifications/initialized`, while rmcp's loop stands still, fills the bridge's queue:
/// the `notifications/initialized` behind it still gets in (a slot is kept for it), so the
/// app's `on_initialized` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn initialized_gets_in_behind_a_full_queue() {
    let waiter = Waiter::new();
    let served = serve(waiter.clone()).await;
    let mut h = Raw::connect(served.addr).await;
    h.initialize().await;
    let stall = stall_on("notifications/stall-initialized");
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/stall-initialized"}))
        .await;
    stall.until_blocked().await;
    h.notify_many("notifications/filler", mcpl_rmcp::QUEUE + 10)
        .await;
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    h.sync("after initialized").await;
    stall.release();
    until(&waiter.initialized, 1).await;
}

/// The host cancels a call rmcp has not read yet (it waits in the queue behind a stalled
/// loop) when the queue has no room left for the cancel: the handler's token fires as the
/// handler starts, so the handler sees itself cancelled from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_before_the_handler_starts_fires_as_it_starts() {
    let waiter = Waiter::new();
    let served = serve(waiter.clone()).await;
    let mut h = Raw::connect(served.addr).await;
    h.initialize().await;
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let stall = stall_on("notifications/stall-unread");
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/stall-unread"}))
        .await;
    stall.until_blocked().await;
    h.send(
        json!({"jsonrpc": "2.0", "id": "unread", "method": "tools/call",
                  "params": {"name": "wait", "arguments": {}}}),
    )
    .await;
    h.notify_many("notifications/filler", mcpl_rmcp::QUEUE + 10)
        .await;
    h.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": "unread"}}),
    )
    .await;
    let cancelled = h.next_response().await;
    assert_eq!(cancelled["id"], "unread", "{cancelled}");
    assert_eq!(cancelled["error"]["code"], mcpl_rmcp::REQUEST_CANCELLED);
    h.sync("after the cancel").await;
    assert_eq!(
        *waiter.entered.borrow(),
        0,
        "rmcp has not read the call yet"
    );
    stall.release();
    until(&waiter.cancelled, 1).await;
}

/// An answer to rmcp's own request to the host (here before `notifications/initialized`,
/// to a tool the host called first) while rmcp's loop stands still with the queue full but
/// for the slot kept for `notifications/initialized`: the answer took that slot (it waited
/// for room in the same queue), so the host's `notifications/initialized` behind it was
/// dropped and `on_initialized` never ran. Answers to rmcp's requests have a way in of
/// their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_to_rmcp_does_not_take_initializeds_slot() {
    let waiter = Waiter::new();
    let served = serve(waiter.clone()).await;
    let mut h = Raw::connect(served.addr).await;
    h.initialize().await;
    h.send(
        json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
                  "params": {"name": "ask", "arguments": {}}}),
    )
    .await;
    let asked = loop {
        let line = tokio::time::timeout(WAIT, h.lines.next_line())
            .await
            .expect("rmcp asked in time")
            .unwrap()
            .expect("the connection is open");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["method"] == "vendor/ask" {
            break v;
        }
    };
    let stall = stall_on("notifications/stall-answer");
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/stall-answer"}))
        .await;
    stall.until_blocked().await;
    h.notify_many("notifications/filler", mcpl_rmcp::QUEUE + 10)
        .await;
    h.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"n": 1}}))
        .await;
    // The answer is on its way to rmcp, by a task of the bridge's own; it may or may not
    // have got there before `notifications/initialized` (before the fix it had taken the
    // kept slot by then in 2 to 3 runs in 10), and either way nothing may be dropped.
    for n in 0..3 {
        h.sync(&format!("after the answer {n}")).await;
    }
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    h.sync("after initialized").await;
    stall.release();
    until(&waiter.initialized, 1).await;
    let call = h.next_response().await;
    assert_eq!(call["id"], "ask", "{call}");
    assert_eq!(
        call["result"]["content"][0]["text"], r#"result {"n":1}"#,
        "{call}"
    );
}
