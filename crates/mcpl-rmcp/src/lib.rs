//! Serve an [rmcp](https://docs.rs/rmcp) `ServerHandler` as an MCPL 0.5 server.
//!
//! Your rmcp server stays what it is — `#[tool_router]` tools with their schemars schemas,
//! resources, prompts, completion, logging, your `get_info` and `initialize` — and gains
//! MCPL from the [`mcpl`] library: the `experimental.mcpl` manifest merged into its
//! `initialize` result, the §5.3 policy exchange and gating, feature sets, pushes, hooks,
//! inference requests, channels, `mcpl/manifest` and manifest announcements, with exactly the
//! enforcement of [`mcpl::server::Server`] (it *is* that server). [`builder`] gives you the
//! library's [`ServerBuilder`] with your handler plugged in for every MCP method:
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//!
//! use mcpl_rmcp::prelude::*;
//! use rmcp::model::{CallToolResult, ContentBlock};
//! use rmcp::{tool, tool_handler, tool_router, ErrorData as McpError, ServerHandler};
//!
//! #[derive(Clone, Default)]
//! pub struct Counter {
//!     counter: Arc<Mutex<i32>>,
//! }
//!
//! #[tool_router]
//! impl Counter {
//!     #[tool(description = "Increment the counter by 1")]
//!     async fn increment(&self, Extension(mcpl): Extension<Session>) -> Result<CallToolResult, McpError> {
//!         let n = {
//!             let mut counter = self.counter.lock().unwrap();
//!             *counter += 1;
//!             *counter
//!         };
//!         if n == 3 {
//!             let event = PushEvent::text("counter", "The counter reached 3.");
//!             let _ = mcpl.push_event(event).await.inspect_err(|e| eprintln!("not pushed: {e}"));
//!         }
//!         Ok(CallToolResult::success(vec![ContentBlock::text(n.to_string())]))
//!     }
//!
//!     #[tool(description = "Get the current counter value")]
//!     async fn get_value(&self) -> Result<CallToolResult, McpError> {
//!         let n = *self.counter.lock().unwrap();
//!         Ok(CallToolResult::success(vec![ContentBlock::text(n.to_string())]))
//!     }
//! }
//!
//! #[tool_handler(name = "counter", version = "0.1.0")]
//! impl ServerHandler for Counter {}
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     // Diagnostics on stderr (stdout is the transport): warn and up, or what RUST_LOG says;
//!     // rmcp's lines quoting the host's messages only if it names rmcp (`log_filter`).
//!     let filter = mcpl_rmcp::log_filter(&std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()));
//!     tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
//!     let counter = Counter::default();
//!     let count = counter.counter.clone();
//!     let built = mcpl_rmcp::builder(counter)
//!         .feature_set("counter", "Counter events", &[Capability::PushEvents, Capability::InjectSystem])
//!         .on_before_inference("counter", move |_grant, _turn| {
//!             let text = format!("The counter is at {}.", count.lock().unwrap());
//!             let injection = ContextInjection::new("counter", Position::System, text);
//!             async move { Ok(BeforeInferenceResult::with_injections([injection])) }
//!         })
//!         .build();
//!     match built {
//!         Ok(server) => {
//!             server.serve(mcpl::transport::stdio::stdio()).await;
//!             std::process::ExitCode::SUCCESS
//!         }
//!         // Errors print with Display (what happened and what to change) and exit 1.
//!         Err(e) => {
//!             eprintln!("error: {e}");
//!             std::process::ExitCode::FAILURE
//!         }
//!     }
//! }
//! ```
//!
//! Against the same server on plain rmcp that is 33 lines added and 5 removed: the prelude
//! import, the `Extension` parameter, the push, and `main` installing a diagnostics
//! subscriber and building an MCPL server with a feature set and a hook instead of
//! `Counter::default().serve(stdio())`, printing a build error with `Display` and exiting 1.
//!
//! A tool reaches the MCPL side of its connection through rmcp's `Extension` extractor: every
//! request handed to rmcp carries the connection's [`Session`] in its extensions, so
//! `Extension(mcpl): Extension<mcpl::server::Session>` as a tool parameter gives the gated
//! senders ([`Session::push_event`], [`Session::inference_request`] …). A full example is
//! `examples/counter.rs`.
//!
//! # Why this shape
//!
//! The two shapes the libraries allow are MCPL handled inside rmcp's service (its
//! `on_custom_request` / `on_custom_notification` and `CustomRequest`s on its `Peer`), or
//! rmcp's handler driven from this library's server for the MCP methods. This crate does the
//! second: the [`mcpl::server::Server`] owns the wire, and everything that is not MCPL's goes
//! to a per-connection rmcp service over an in-process channel
//! ([`mcpl::server::ServerBuilder::mcp_fallback`]). The first shape cannot give the same
//! guarantees with rmcp 3.11:
//!
//! - rmcp runs every notification handler and every request handler as its own task, so a
//!   §6.7 narrowing `featureSets/update` Notification cannot be applied "before anything else
//!   is read", and a policy receipt written by one task can be overtaken on the wire by a
//!   push another task sends under the grant it announces (§5.3). The library's session reads
//!   in wire order, and whatever it sends under a widening goes out behind the receipt.
//! - rmcp's `Peer` sends any `CustomRequest` without a hook to check it, so nothing would
//!   stop a `push/event` before the receipt or outside the grant; here rmcp's own peer cannot
//!   send an MCPL method at all (the channel refuses it, see below) and MCPL goes only through
//!   the session's gated senders.
//! - The manifest must be merged into `initialize` with the tracker snapshot the connection
//!   is attached to (§17.10); rmcp builds that result from `get_info` with no per-connection
//!   hook for it.
//!
//! Everything rmcp does for MCP still happens in rmcp: its `initialize` (protocol version
//! negotiation, your `initialize` override, `get_info`), its tool router and schemas, its
//! errors, progress, cancellation of its handlers, logging, and its own requests to the host.
//!
//! # What goes where
//!
//! - **Host → server.** `initialize` goes to rmcp, and its result gets
//!   `capabilities.experimental.mcpl`. MCPL methods (`featureSets/update`, `mcpl/manifest`,
//!   `context/beforeInference`, `channels/*` …) are the session's. `tools/call` under an MCPL
//!   host is refused `-32002` until the policy grants `tools` (§5.3, §5.4), then goes to
//!   rmcp; from an MCP-only host it goes straight through (§3.2). Every other request and
//!   every non-MCPL notification goes to rmcp, in wire order. Each request goes to rmcp
//!   under an id of the bridge's own, never used twice on a connection (what a handler
//!   reads as `RequestContext::id`), and is answered to the host with its own id; a
//!   `notifications/cancelled` is handed to rmcp naming the request by that id, and only
//!   when it names a request rmcp is serving. So a host that reuses an id once its
//!   request was cancelled (rmcp does not stop a handler, it drops its answer, which may
//!   be on its way) gets the new request's answer, not the old one's. The bridge fires the
//!   handler's cancellation token (`RequestContext::ct`) itself, so a cancel is never lost
//!   to a full [`QUEUE`]: the notification then misses only the app's `on_cancelled` (with
//!   a warning).
//! - **rmcp → host.** Responses go back to the host. rmcp's notifications (`progress`,
//!   `message`, `…/list_changed`) and requests (`sampling/createMessage`, `roots/list`,
//!   `elicitation/create`, `ping`) go out through [`Session::send_mcp_notification`] /
//!   [`Session::send_mcp_request`], which refuse every MCPL method: an rmcp
//!   `CustomRequest("push/event")` fails in rmcp with that error instead of reaching the host.
//!   A `notifications/cancelled` rmcp sends for its own request cancels the library's request
//!   (which tells the host, with the id the host saw).
//!
//! # Bounds
//!
//! At most [`MAX_IN_FLIGHT`] host requests are with rmcp at once per connection (more are
//! answered `-32603` at once), each counted until rmcp's handler for it has ended: a request
//! the host cancelled is answered `-32800` at once and frees the library's in-flight slot,
//! but rmcp only tells its handler (`RequestContext::ct`) and does not stop it, so a
//! handler that ignores its token still counts here. When the connection ends, the rmcp
//! handlers still running are stopped (their futures dropped at the next `.await`), as the
//! library stops its own: nothing can be answered then.
//!
//! At most one rmcp service runs per connection. An `initialize` your handler never
//! answers is answered `-32603` once [`BridgeConfig::initialize_timeout`]
//! ([`INITIALIZE_TIMEOUT`], 30 s; set it with [`builder_with`], at least 1 ms) has passed,
//! or the connection's request timeout ([`mcpl::peer::PeerConfig::request_timeout`]) if that is
//! shorter; the bridge then stops the service serving it (your `initialize` future is
//! dropped), and a retry by the host starts a fresh one. The bridge's bound holds also
//! when the connection has no request timeout.
//!
//! At most [`MAX_NOTIFICATIONS_IN_FLIGHT`] rmcp notification handlers run at once per
//! connection (rmcp starts a task for each); past it a notification is dropped with a
//! warning. At most [`QUEUE`] messages wait to be read by rmcp (a full queue refuses a
//! request with `-32603` and drops a notification with a warning), and at most [`QUEUE`]
//! of the host's answers to rmcp's own requests, apart. rmcp's own requests to
//! the host are bounded by [`mcpl::peer::PeerConfig::max_pending_requests`]. The warnings
//! for dropped notifications are at most one line per
//! [`mcpl::transport::listen::REPORT_INTERVAL`] per reason, counting those not shown
//! ([`mcpl::throttle::Throttle`]). The first `notifications/initialized` of a service is
//! never dropped for either bound (a slot of the queue is kept for it): it is part of MCP's
//! lifecycle, and the app's `on_initialized` runs on it. A host's cancel does not depend on
//! the queue either (see above). The queue fills only while rmcp's service loop does not
//! read it, e.g. while it writes a log line to a blocked stderr.
//!
//! # Logs
//!
//! What the bridge logs of the host's text is cut to 1 KiB ([`mcpl::session::clip_text`]),
//! and its warnings for dropped notifications are throttled (above). rmcp's service loop
//! logs each host message it reads in full (every notification and a cancel's reason at
//! `info`, every error answer at `warn`), so a host flooding messages floods a log that
//! takes rmcp's lines at `warn` or `info`. The bridge cannot filter them (rmcp logs from
//! tasks it spawns itself, under the process's subscriber): build the subscriber's filter
//! with [`log_filter`], which adds [`RMCP_LOG_DIRECTIVE`] (`rmcp::service=error`) unless
//! the filter names rmcp itself, as the example above does.
//!
//! # What rmcp 3.11.0 cannot carry, and the workarounds
//!
//! - **The initialize-less lifecycle** (MCP 2026-07-28 `server/discover` and per-request
//!   protocol metadata, which rmcp serves): MCPL is negotiated in `initialize` (§5.1), so the
//!   session answers requests before `initialize` with `-32600`. Hosts on that lifecycle
//!   are served by plain rmcp (`handler.serve(transport)`), without MCPL.
//! - **Server → host requests on protocol 2026-07-28 or later**: rmcp refuses them itself
//!   (it asks for `InputRequiredResult` instead); unchanged here.
//! - **A cancelled request is answered.** rmcp drops the response of a request the host
//!   cancelled; the library answers every request it reads, so the host gets `-32800`
//!   for it (`ErrorObject::request_cancelled`, as the session answers one), which MCP
//!   lets a host ignore. rmcp tells the handler through its cancellation token and does not
//!   stop it, so a handler that ignores the token runs on: it counts against
//!   [`MAX_IN_FLIGHT`] until it ends (see Bounds).
//! - **A message rmcp's types cannot read at all** is answered `-32602` with its id and
//!   rmcp's reason (rmcp's own transports answer `-32600` with a `null` id). In 3.11 a known
//!   method whose params do not fit (`tools/call` with `"name": 5`) falls back to rmcp's
//!   custom-request path and is answered as plain rmcp answers it (`-32601`); but an
//!   `initialize` whose params rmcp cannot read is answered `-32602` with rmcp's reason at
//!   once, and no rmcp service starts for it.
//! - **A handler that panics** (a request's, `initialize`'s among them): rmcp's task for it
//!   dies and rmcp sends nothing; here it is answered `-32603` "the handler panicked", as
//!   the library answers for its own handlers, with a warning.
//! - **Request ids**: rmcp carries integer ids as `i64`; since rmcp gets ids of the
//!   bridge's own, every id the library reads (strings, integers up to `u64::MAX`) is served.
//! - **MCPL from rmcp's `Peer`**: not possible, by design (see above); use the [`Session`]
//!   from the `Extension`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::server::{FallbackFuture, McpFallback, Server, ServerBuilder, Session};
use rmcp::model::{ClientJsonRpcMessage, GetExtensions};
use rmcp::service::{
    serve_server, NotificationContext, RequestContext, RoleServer, Service, ServiceRole,
};
use rmcp::ServerHandler;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot, watch};

mod config;
mod link;
mod track;
pub use config::{BridgeConfig, BridgeConfigError, INITIALIZE_TIMEOUT, MIN_INITIALIZE_TIMEOUT};
pub use link::LinkError;
use link::{method_and_params, Link};
use track::{Cancel, DropLog, Dropped, Slot};

/// What a bridged server's code names most: the MCPL types for pushes, hooks and feature
/// sets, the [`Session`] and rmcp's `Extension` extractor that hands it to a tool.
pub mod prelude {
    pub use mcpl::capability::Capability;
    pub use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
    pub use mcpl::server::{PushEvent, Session};
    pub use rmcp::handler::server::tool::Extension;
}

/// Most host requests with rmcp at once, per connection: waiting for its answer, or
/// answered (cancelled) while rmcp's handler for them still runs.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Most rmcp notification handlers running at once, per connection: past it a host
/// notification is dropped (with a warning) when rmcp starts its handler.
pub const MAX_NOTIFICATIONS_IN_FLIGHT: usize = 1024;

/// Capacity of the queue of messages waiting to be read by rmcp's service, per connection;
/// the host's answers to rmcp's own requests have a queue of their own of this size.
pub const QUEUE: usize = 256;

/// The code a request the host cancelled is answered with (rmcp does not answer it):
/// [`mcpl::jsonrpc::codes::REQUEST_CANCELLED`], as the session answers one itself.
pub const REQUEST_CANCELLED: i64 = mcpl::jsonrpc::codes::REQUEST_CANCELLED;

/// The `-32603` message a request whose rmcp handler panicked is answered with, as the
/// library answers one of its own handlers'.
const PANICKED: &str = "the handler panicked";

/// The library's [`ServerBuilder`] for `handler`: named by its `get_info` (`serverInfo`;
/// `instructions` come from its `initialize`, per connection), with every MCP method served by a clone of `handler` per
/// connection ([`fallback`]). Add feature sets, hooks and the rest as for any MCPL server,
/// then `build()` and `serve(transport)`.
pub fn builder<H: ServerHandler + Clone>(handler: H) -> ServerBuilder {
    builder_of(handler, BridgeConfig::default())
}

/// [`builder`], with the bridge's own bounds set by `config`; refuses a `config` that
/// cannot work ([`BridgeConfig::check`]).
pub fn builder_with<H: ServerHandler + Clone>(
    handler: H,
    config: BridgeConfig,
) -> Result<ServerBuilder, BridgeConfigError> {
    config.check()?;
    Ok(builder_of(handler, config))
}

/// [`builder_with`] for a `config` known to work.
fn builder_of<H: ServerHandler + Clone>(handler: H, config: BridgeConfig) -> ServerBuilder {
    // Named by `get_info`; its instructions are left to the handler's own `initialize`,
    // which the fallback answers with per connection: set on the builder, they would win
    // over what the handler says to each host (`ServerBuilder::instructions`).
    let info = handler.get_info();
    Server::builder(info.server_info.name, info.server_info.version)
        .mcp_fallback(fallback_of(handler, config))
}

/// The `tracing` directive [`log_filter`] adds: rmcp's service loop logs each host message
/// it reads in full (every notification at `info`, a cancel's reason at `info`, every error
/// answer at `warn`, quoting what the host sent), so a host that floods a server logging
/// rmcp at `warn` or `info` floods its log. Its `error` lines carry no host text.
pub const RMCP_LOG_DIRECTIVE: &str = "rmcp::service=error";

/// `filter` (a `tracing_subscriber::EnvFilter` directive list, e.g. `RUST_LOG`'s) with
/// [`RMCP_LOG_DIRECTIVE`] added, unless a directive of `filter` names an rmcp target itself
/// (`rmcp=debug` asks for rmcp's lines) or the default level is `off` (adding the directive
/// would turn rmcp's `error` lines back on against it). The bridge cannot filter rmcp's
/// lines otherwise: rmcp logs from tasks it spawns itself, under the process's subscriber.
pub fn log_filter(filter: &str) -> String {
    let names_rmcp = filter.split(',').any(|directive| {
        // A directive is `target[span{field}]=level`, any part but one left out.
        let target = directive.trim().split(['[', '=']).next().unwrap_or("");
        target == "rmcp" || target.starts_with("rmcp::")
    });
    // The last bare level sets the default (a bare `off` silences every target).
    let levels = ["off", "error", "warn", "info", "debug", "trace"];
    let off = filter
        .split(',')
        .map(str::trim)
        .rfind(|d| levels.iter().any(|l| d.eq_ignore_ascii_case(l)))
        .is_some_and(|d| d.eq_ignore_ascii_case("off"));
    match (names_rmcp || off, filter.trim().is_empty()) {
        (true, _) => filter.to_owned(),
        (false, true) => RMCP_LOG_DIRECTIVE.to_owned(),
        (false, false) => format!("{filter},{RMCP_LOG_DIRECTIVE}"),
    }
}

/// The [`mcpl::server::ServerBuilder::mcp_fallback`] factory serving the MCP methods with
/// `handler`: each connection gets its own rmcp service over a clone of it (share state
/// between connections through `Arc`s in the handler, as with rmcp's own servers). For a
/// builder made some other way than [`builder`].
pub fn fallback<H: ServerHandler + Clone>(
    handler: H,
) -> impl Fn(Session) -> Arc<dyn McpFallback> + Send + Sync + 'static {
    fallback_of(handler, BridgeConfig::default())
}

/// [`fallback`], with the bridge's own bounds set by `config`; refuses a `config` that
/// cannot work ([`BridgeConfig::check`]).
pub fn fallback_with<H: ServerHandler + Clone>(
    handler: H,
    config: BridgeConfig,
) -> Result<impl Fn(Session) -> Arc<dyn McpFallback> + Send + Sync + 'static, BridgeConfigError> {
    config.check()?;
    Ok(fallback_of(handler, config))
}

/// [`fallback_with`] for a `config` known to work.
fn fallback_of<H: ServerHandler + Clone>(
    handler: H,
    config: BridgeConfig,
) -> impl Fn(Session) -> Arc<dyn McpFallback> + Send + Sync + 'static {
    move |session| {
        Arc::new(Bridge {
            handler: handler.clone(),
            config: config.clone(),
            shared: Arc::new(Shared {
                session,
                pending: Mutex::new(Pending::default()),
                live: Arc::new(AtomicUsize::new(0)),
                notifying: Arc::new(AtomicUsize::new(0)),
                drops: Arc::new(DropLog::default()),
            }),
            to_rmcp: Arc::new(Mutex::new(None)),
            ended: watch::channel(()).0,
            service: Mutex::new(None),
        })
    }
}

type Answer = Result<Value, ErrorObject>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the maps whole, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Host requests handed to rmcp and not yet answered (≤ [`MAX_IN_FLIGHT`]), each under an
/// id of the bridge's own there.
#[derive(Default)]
struct Pending {
    /// The last id given to rmcp (ids count up from 1 and are never reused).
    last: i64,
    /// By the id rmcp knows: the host's id, where its answer goes, and its handler's
    /// cancellation.
    by_rmcp: HashMap<rmcp::model::RequestId, (RequestId, oneshot::Sender<Answer>, Cancel)>,
    /// The id rmcp knows, by the host's.
    by_host: HashMap<RequestId, rmcp::model::RequestId>,
}

impl Pending {
    /// The waiting request rmcp knows as `rid`, no longer waiting.
    fn take(&mut self, rid: &rmcp::model::RequestId) -> Option<(oneshot::Sender<Answer>, Cancel)> {
        let (host, tx, cancel) = self.by_rmcp.remove(rid)?;
        self.by_host.remove(&host);
        Some((tx, cancel))
    }

    fn clear(&mut self) {
        self.by_rmcp.clear();
        self.by_host.clear();
    }
}

/// What the bridge and the rmcp side of one connection share.
struct Shared {
    session: Session,
    /// Host requests handed to rmcp.
    pending: Mutex<Pending>,
    /// Host requests rmcp works on (≤ [`MAX_IN_FLIGHT`]): their [`Slot`]s alive.
    live: Arc<AtomicUsize>,
    /// rmcp's notification handlers running (≤ [`MAX_NOTIFICATIONS_IN_FLIGHT`]).
    notifying: Arc<AtomicUsize>,
    /// The warnings for notifications dropped, throttled.
    drops: Arc<DropLog>,
}

/// One rmcp service's own requests to the host in flight, by its id for them: each service
/// has its own (each numbers its requests from 0, and a stopped one may end after the next
/// has started, when its `initialize` blocks its thread).
type Outgoing = Mutex<HashMap<rmcp::model::RequestId, tokio::task::AbortHandle>>;

/// The channel into one rmcp service, tagged with the `initialize` attempt that started it.
type Inlet = Arc<InletSlot>;

/// The inlet of the connection's current rmcp service, if one runs.
type InletSlot = Mutex<Option<(u64, mpsc::Sender<ClientJsonRpcMessage>)>>;

/// One connection's [`McpFallback`]: owns the only strong sender into its rmcp service, so
/// dropping it (the library does when the connection ends) ends the service, and the
/// sender of `ended`, so dropping it stops the rmcp handlers still running ([`Tracked`]).
struct Bridge<H> {
    handler: H,
    config: BridgeConfig,
    shared: Arc<Shared>,
    to_rmcp: Inlet,
    /// Never sent on: its receivers learn the connection ended when it is dropped.
    ended: watch::Sender<()>,
    /// The task running the newest rmcp service: stopped when the next `initialize` starts
    /// one, so at most one runs per connection.
    service: Mutex<Option<tokio::task::AbortHandle>>,
}

/// Stops an rmcp service whose `initialize` was given up (its future dropped unanswered:
/// the library's time limit, or the connection's end) unless disarmed, and forgets the
/// request at once: its host id is free again for a retry under it, where it waited for
/// the stopped service to end (which an `initialize` blocking its thread delays). Only
/// `initialize`'s: no cancel can race it (the driver reads nothing meanwhile), where a
/// cancelled request's future is dropped while its cancel is on its way to the bridge.
struct StopUnanswered {
    service: Option<tokio::task::AbortHandle>,
    shared: Arc<Shared>,
    rid: Option<rmcp::model::RequestId>,
}

impl StopUnanswered {
    /// The `initialize` was answered: nothing to stop or forget.
    fn disarm(mut self) {
        self.service = None;
    }
}

impl Drop for StopUnanswered {
    fn drop(&mut self) {
        if let Some(service) = self.service.take() {
            service.abort();
            if let Some(rid) = &self.rid {
                lock(&self.shared.pending).take(rid);
            }
        }
    }
}

/// What a service's task leaves when it ends or is stopped: the inlet (if still its own)
/// and the requests waiting for it (they get an error), and its own requests to the host
/// in flight (and no other service's).
struct ServiceEnd {
    inlet: Weak<InletSlot>,
    generation: u64,
    shared: Arc<Shared>,
    outgoing: Arc<Outgoing>,
}

impl Drop for ServiceEnd {
    fn drop(&mut self) {
        if let Some(inlet) = self.inlet.upgrade() {
            let mut inlet = lock(&inlet);
            if inlet.as_ref().is_some_and(|(g, _)| *g == self.generation) {
                *inlet = None;
                lock(&self.shared.pending).clear();
            }
        }
        for (_, task) in lock(&self.outgoing).drain() {
            task.abort();
        }
    }
}

/// `message` (a JSON-RPC object) read as rmcp reads it from a wire, carrying `session` in its
/// extensions.
fn client_message(
    message: Map<String, Value>,
    session: &Session,
) -> Result<ClientJsonRpcMessage, String> {
    let mut msg: ClientJsonRpcMessage =
        serde_json::from_value(Value::Object(message)).map_err(|e| e.to_string())?;
    match &mut msg {
        ClientJsonRpcMessage::Request(r) => {
            r.request.extensions_mut().insert(session.clone());
        }
        ClientJsonRpcMessage::Notification(n) => {
            n.notification.extensions_mut().insert(session.clone());
        }
        _ => {}
    }
    Ok(msg)
}

/// `text` as the bridge logs it: cut to [`mcpl::session::DIAGNOSTIC_TEXT_BYTES`] by
/// [`mcpl::session::clip_text`], as the sessions cut what they report, since the host
/// chooses it (a method name, what rmcp's errors quote of its messages) up to a whole
/// message.
fn clipped(text: impl std::fmt::Display) -> String {
    let mut s = text.to_string();
    mcpl::session::clip_text(&mut s);
    s
}

fn envelope(method: &str, params: Option<Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("method".into(), Value::from(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    m
}

/// `params`, if rmcp's types read them as `initialize`'s, as its service reads a message;
/// else why not (they would take the request for a custom one).
fn readable_initialize(params: Value) -> Result<Value, String> {
    use serde::Deserialize;
    let message = Value::Object(envelope("initialize", Some(params)));
    let read = rmcp::model::ClientRequest::deserialize(&message);
    let params = match message {
        Value::Object(mut m) => m.remove("params").unwrap_or_default(),
        other => other,
    };
    match read {
        Ok(rmcp::model::ClientRequest::InitializeRequest(_)) => Ok(params),
        Ok(_) => Err(rmcp::model::InitializeRequestParams::deserialize(&params)
            .err()
            .map_or_else(|| "they fit another request".to_owned(), |e| e.to_string())),
        Err(e) => Err(e.to_string()),
    }
}

fn ready(answer: Answer) -> FallbackFuture {
    Box::pin(std::future::ready(answer))
}

impl<H: ServerHandler + Clone> Bridge<H> {
    /// Hands one host request to rmcp now and returns the future of its answer.
    fn forward(&self, id: &RequestId, method: &str, params: Option<Value>) -> FallbackFuture {
        self.hand(id, method, params).1
    }

    /// [`Bridge::forward`], with the id rmcp knows the request by if it was handed.
    fn hand(
        &self,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
    ) -> (Option<rmcp::model::RequestId>, FallbackFuture) {
        let (tx, rx) = oneshot::channel();
        let cancel = Cancel::default();
        let (rid, slot) = {
            let mut pending = lock(&self.shared.pending);
            if pending.by_host.contains_key(id) {
                return (
                    None,
                    ready(Err(ErrorObject::invalid_request(format!(
                        "request id {} is already in flight",
                        clipped(id)
                    )))),
                );
            }
            if self.shared.live.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
                return (
                    None,
                    ready(Err(ErrorObject::internal(format!(
                        "{MAX_IN_FLIGHT} requests are already with the rmcp handler (one the host \
                     cancelled counts until its handler ends)"
                    )))),
                );
            }
            let Some(last) = pending.last.checked_add(1) else {
                return (
                    None,
                    ready(Err(ErrorObject::internal(
                        "this connection has used every request id rmcp can carry",
                    ))),
                );
            };
            pending.last = last;
            let rid = rmcp::model::RequestId::Number(last);
            pending.by_host.insert(id.clone(), rid.clone());
            pending
                .by_rmcp
                .insert(rid.clone(), (id.clone(), tx, cancel.clone()));
            (rid, Slot::taken(&self.shared.live))
        };
        let mut message = envelope(method, params);
        message.insert("id".into(), json!(rid));
        let sent = client_message(message, &self.shared.session)
            .map_err(|e| ErrorObject::invalid_params(format!("{method}: {e}")))
            .and_then(|mut msg| {
                if let ClientJsonRpcMessage::Request(r) = &mut msg {
                    r.request.extensions_mut().insert(slot);
                    r.request.extensions_mut().insert(cancel);
                }
                self.send(msg).map_err(ErrorObject::internal)
            });
        if let Err(e) = sent {
            lock(&self.shared.pending).take(&rid);
            return (None, ready(Err(e)));
        }
        let answer = Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(ErrorObject::internal(
                    "the rmcp service ended before answering",
                ))
            })
        });
        (Some(rid), answer)
    }

    /// Hands `msg` to rmcp now. The queue's last slot is kept for `notifications/initialized`
    /// ([`QUEUE`] + 1 slots), so a queue full of other messages does not drop it.
    fn send(&self, msg: ClientJsonRpcMessage) -> Result<(), String> {
        let inlet = lock(&self.to_rmcp);
        let Some((_, tx)) = inlet.as_ref() else {
            return Err("the rmcp service is not running".into());
        };
        let lifecycle = matches!(
            &msg,
            ClientJsonRpcMessage::Notification(n)
                if matches!(n.notification, rmcp::model::ClientNotification::InitializedNotification(_))
        );
        if !lifecycle && tx.capacity() <= 1 {
            return Err(format!(
                "{QUEUE} messages are already waiting for the rmcp service"
            ));
        }
        tx.try_send(msg).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                format!("{QUEUE} messages are already waiting for the rmcp service")
            }
            mpsc::error::TrySendError::Closed(_) => "the rmcp service has ended".into(),
        })
    }

    /// Starts this connection's rmcp service (one per `initialize` attempt: rmcp's handshake
    /// ends its service when it fails, and the host may try again), stopping the one before
    /// if it still runs (its `initialize` given up); returns the new one's task.
    fn start(&self) -> tokio::task::AbortHandle {
        let (tx, rx) = mpsc::channel(QUEUE + 1);
        let generation = {
            let mut inlet = lock(&self.to_rmcp);
            let generation = inlet.as_ref().map_or(0, |(g, _)| g + 1);
            *inlet = Some((generation, tx.clone()));
            generation
        };
        let (answer, answers) = mpsc::channel(QUEUE);
        let outgoing = Arc::new(Outgoing::default());
        let link = Link {
            rx,
            answers,
            answer,
            shared: self.shared.clone(),
            outgoing: outgoing.clone(),
        };
        drop(tx);
        let handler = self.handler.clone();
        let ended = self.ended.subscribe();
        let shared = self.shared.clone();
        let end = ServiceEnd {
            inlet: Arc::downgrade(&self.to_rmcp),
            generation,
            shared: shared.clone(),
            outgoing,
        };
        let task = tokio::spawn(async move {
            // Cleans up when the service ends, or when its task is stopped.
            let _end = end;
            let service = Tracked {
                handler,
                ended,
                notifying: shared.notifying.clone(),
                drops: shared.drops.clone(),
                initialized: AtomicBool::new(false),
            };
            match serve_server(service, link).await {
                Ok(running) => {
                    if let Err(e) = running.waiting().await {
                        tracing::warn!("the rmcp service failed: {}", clipped(e));
                    }
                }
                Err(e) => tracing::debug!("rmcp's initialize did not succeed: {}", clipped(e)),
            }
        })
        .abort_handle();
        if let Some(before) = lock(&self.service).replace(task.clone()) {
            before.abort();
        }
        task
    }
}

impl<H: ServerHandler + Clone> McpFallback for Bridge<H> {
    /// Reading (§5.1 says nothing of a handler that never answers): an `initialize` given
    /// up (the bridge's [`BridgeConfig::initialize_timeout`], or the library's request
    /// timeout if shorter) stops the service that was serving it, so a stuck rmcp
    /// `initialize` does not outlive its try; the host may try again.
    ///
    /// Params rmcp's types cannot read as `initialize`'s are answered `-32602` with rmcp's
    /// reason at once, and no service starts: rmcp would read the request as a custom one,
    /// answer it as an initialize-less request would be (`-32602` naming `_meta`, or
    /// `-32601`) and then wait for an `initialize`, or serve on a connection never
    /// initialized.
    fn initialize(&self, id: &RequestId, params: Value) -> FallbackFuture {
        let params = match readable_initialize(params) {
            Ok(params) => params,
            Err(why) => {
                return ready(Err(ErrorObject::invalid_params(format!(
                    "initialize: rmcp cannot read the params: {}",
                    clipped(why)
                ))))
            }
        };
        let service = self.start();
        let (rid, answer) = self.hand(id, "initialize", Some(params));
        let stop = StopUnanswered {
            service: Some(service),
            shared: self.shared.clone(),
            rid,
        };
        let limit = self.config.initialize_timeout;
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(out) => {
                    // Answered: the service goes on (or has ended by itself, refused).
                    stop.disarm();
                    out
                }
                // Given up: `stop` stops the service and forgets the request as it drops.
                Err(_) => Err(ErrorObject::internal(format!(
                    "the rmcp handler did not answer initialize within {limit:?}"
                ))),
            }
        })
    }

    fn request(&self, id: &RequestId, method: &str, params: Option<Value>) -> FallbackFuture {
        self.forward(id, method, params)
    }

    fn notification(&self, method: &str, mut params: Option<Value>) {
        if method == "notifications/cancelled" {
            // The host names its own id; rmcp knows the request by the bridge's.
            let host_id = params
                .as_ref()
                .and_then(|p| p.get("requestId"))
                .and_then(RequestId::from_request_value);
            let found = host_id.and_then(|id| {
                let mut pending = lock(&self.shared.pending);
                let rid = pending.by_host.get(&id)?.clone();
                Some((rid.clone(), pending.take(&rid)?))
            });
            let Some((rid, (tx, cancel))) = found else {
                // Nothing rmcp serves: answered, never sent, an MCPL request, `initialize`
                // or no id at all. Its ids are not the host's, so it is not told.
                tracing::debug!("a cancel naming no request of rmcp's is not handed to it");
                return;
            };
            // rmcp never answers a cancelled request; the session answers every request.
            let _ = tx.send(Err(ErrorObject::request_cancelled()));
            // The handler's token fires whether or not rmcp gets the notification below
            // (a full queue drops it, with a warning: only the app's `on_cancelled` misses it).
            cancel.fire();
            if let Some(Value::Object(p)) = params.as_mut() {
                p.insert("requestId".into(), json!(rid));
            }
        }
        match client_message(envelope(method, params), &self.shared.session) {
            Ok(msg) => {
                if let Err(e) = self.send(msg) {
                    self.shared.drops.warn(Dropped::NotHanded, || {
                        format!("{} not handed to rmcp: {}", clipped(method), clipped(e))
                    });
                }
            }
            Err(e) => self.shared.drops.warn(Dropped::Unreadable, || {
                format!(
                    "{} not handed to rmcp, which cannot read it: {}",
                    clipped(method),
                    clipped(e)
                )
            }),
        }
    }
}

/// The connection's handler as rmcp's service, holding each request's [`Slot`] until the
/// handler's future for it has ended (rmcp's tool router drops the `RequestContext`, and
/// the slot in its extensions, before a tool's own future runs), and stopping every
/// handler still running when the connection ends (`Bridge::ended`): nothing can be
/// answered then, and rmcp neither stops a handler nor outlives its own loop's drain.
/// Reading: as the library stops its own handlers then (the handler's future is dropped at
/// its next `.await`).
/// Notification handlers are bounded here too ([`MAX_NOTIFICATIONS_IN_FLIGHT`]): rmcp starts
/// one task per notification, without a bound.
struct Tracked<H> {
    handler: H,
    /// Changes (to an error) once the connection has ended.
    ended: watch::Receiver<()>,
    /// The connection's notification handlers running ([`Shared::notifying`]).
    notifying: Arc<AtomicUsize>,
    /// The warnings for notifications dropped ([`Shared::drops`]).
    drops: Arc<DropLog>,
    /// This service's first `notifications/initialized` has come (it runs past the bound).
    initialized: AtomicBool,
}

impl<H> Tracked<H> {
    /// `work`, or `stopped` once the connection has ended.
    async fn until_ended<T>(&self, work: impl Future<Output = T>, stopped: T) -> T {
        let mut ended = self.ended.clone();
        tokio::select! {
            out = work => out,
            // `Err` once the sender is dropped; nothing is ever sent.
            _ = ended.changed() => stopped,
        }
    }
}

impl<H: ServerHandler> Service<RoleServer> for Tracked<H> {
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, rmcp::ErrorData> {
        let _slot = context.extensions.get::<Slot>().cloned();
        let cancel = context.extensions.get::<Cancel>().cloned();
        if let Some(cancel) = &cancel {
            let ct = context.ct.clone();
            cancel.started(move || ct.cancel());
        }
        let work = <H as Service<RoleServer>>::handle_request(&self.handler, request, context);
        // rmcp sends nothing for a handler that panics (its task dies with it), so the
        // host's request would never be answered: answered `-32603` instead, as the
        // library answers for a handler of its own.
        let work = async move {
            use futures_util::FutureExt;
            std::panic::AssertUnwindSafe(work)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::warn!("an rmcp request handler panicked; answered -32603");
                    Err(rmcp::ErrorData::internal_error(PANICKED, None))
                })
        };
        let stopped = rmcp::ErrorData::internal_error("the connection ended", None);
        let out = self.until_ended(work, Err(stopped)).await;
        if let Some(cancel) = cancel {
            cancel.ended();
        }
        out
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        // MCP's lifecycle: the first `notifications/initialized` runs `on_initialized`
        // whatever else runs (one past the bound at most; a later one counts as any other).
        let lifecycle = matches!(
            notification,
            rmcp::model::ClientNotification::InitializedNotification(_)
        ) && !self.initialized.swap(true, Ordering::AcqRel);
        // Taken before the handler runs, given back when it ends (or is stopped).
        let slot = if lifecycle {
            Some(Slot::taken(&self.notifying))
        } else {
            Slot::within(&self.notifying, MAX_NOTIFICATIONS_IN_FLIGHT)
        };
        let Some(_slot) = slot else {
            self.drops.warn(Dropped::OverLimit, || {
                let method = method_and_params(&notification).map_or_else(|e| e.0, |(m, _)| m);
                format!(
                    "{} dropped: {MAX_NOTIFICATIONS_IN_FLIGHT} notification handlers are running",
                    clipped(method)
                )
            });
            return Ok(());
        };
        let work =
            <H as Service<RoleServer>>::handle_notification(&self.handler, notification, context);
        self.until_ended(work, Ok(())).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        <H as Service<RoleServer>>::get_info(&self.handler)
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        <H as Service<RoleServer>>::supported_protocol_versions(&self.handler)
    }
}
