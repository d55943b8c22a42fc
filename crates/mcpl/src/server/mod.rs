//! The server session: the API a Rust MCPL server author writes against.
//!
//! Build a [`Server`] once with [`ServerBuilder`] (identity, feature sets, tools, handlers),
//! then run it over any [`Transport`](crate::transport::Transport) with [`Server::serve`] (or [`Server::start`] to keep a
//! [`Session`] handle). The session makes the spec's server obligations automatic:
//!
//! - **Handshake.** `initialize` is answered with the manifest under
//!   `capabilities.experimental.mcpl`, its `revision` taken from the server's
//!   [`ManifestTracker`](crate::manifest::ManifestTracker); the connection is attached to the tracker with exactly the snapshot
//!   it was sent, so nothing is announced right after `initialize` (§17.3, §17.10). `ping` is
//!   answered. A host that does not advertise `experimental.mcpl`, or advertises an MCPL
//!   version other than 0.5 (a `host_mcpl_version` diagnostic names it), or one that is no
//!   object (`host_mcpl_malformed`), gets a plain MCP
//!   server (§3.2): tools work, every MCPL method is unknown (`-32601`), every MCPL sender refuses.
//! - **Inert until the policy Request (§5.3).** Every capability-dependent behaviour is
//!   unavailable until a `featureSets/update` *Request* arrives; the grant then follows
//!   [`crate::policy::ServerPolicyState`]; the response is the degradation receipt derived
//!   from it (§6.7); a Notification only narrows; reductions apply before anything else is
//!   read. The application reads the state with [`Session::granted`],
//!   [`Session::feature_available`] and [`Session::grant_changes`] (a tokio `watch`).
//! - **Inbound gating (§5.4).** A host→server method whose capability is not granted is
//!   answered `-32002 { capability }` without calling the handler. Unknown methods, methods
//!   of the wrong direction and the removed surfaces (`context/afterInference`,
//!   `featureSets/changed`, `scope/elevate`) are answered `-32601`. Every request with an id
//!   gets exactly one response.
//! - **Senders that cannot violate the grant.** [`Session::push_event`],
//!   [`Session::channels_register`], [`Session::channels_changed`],
//!   [`Session::channels_incoming`], [`Session::inference_request`],
//!   [`Session::inference_stream`] and [`Session::model_info`] refuse locally, naming the
//!   missing capability ([`SendError`]), before anything reaches the wire; the ones that carry
//!   a `featureSet` (§6.5) also refuse an undeclared or unavailable set.
//! - **The author's mistakes are visible.** A refused send, a dropped injection, a panicking
//!   handler … is a [`ServerDiagnostic`] of kind [`DiagnosticKind::AuthorMistake`], logged
//!   through `tracing` at `warn` with what to change whether or not anyone listens on
//!   [`Session::diagnostics`] (host defects: `info`), and counted
//!   ([`Session::author_mistakes`]; [`Server::serve`] logs the count when a connection ends).
//! - **Lifecycle consumer (§10.5).** `inference/lifecycle` feeds a
//!   [`LifecycleTracker`](crate::lifecycle::LifecycleTracker): the application gets one
//!   turn-start and one turn-end callback per `inferenceId`, a safety timeout ends turns
//!   whose terminal never comes, and defects are reported as diagnostics.
//! - **Delivery is never a side effect of a lifecycle event (§14.5).** The handlers for
//!   `inference/lifecycle`, `channels/outgoing/chunk` and `channels/outgoing/complete` are
//!   plain synchronous callbacks that receive no [`Session`], so the API offers no path from
//!   them to a send. The `context/beforeInference` handler gets a read-only [`GrantState`],
//!   not a session, for the same reason and for §10.7 (hooks must not trigger inference).
//!
//! - **Handlers run concurrently, from their first `.await`.** A handler's future is first
//!   polled inside the connection's driver, so one that finishes without waiting is answered
//!   at once, with no task of its own; one that awaits goes on in its own task and holds up
//!   nothing after it. Work *before* its first `.await` runs in the driver: blocking there
//!   (a blocking call, long CPU work) holds up every message of that connection, `ping`
//!   included, so put such work in `tokio::task::spawn_blocking` and await it.
//! - **One server, per-connection state.** A [`Server`] is built once and shared by every
//!   connection (manifest tracker, handlers, tools); what belongs to one connection is its
//!   [`ServerBuilder::connection_state`], made on first use ([`Session::state`]) and dropped
//!   when it ends, and a connection whose manifest must change alone takes its own tracker
//!   ([`Session::own_manifest`]).
//! - **Another MCP implementation for the MCP methods.** [`ServerBuilder::mcp_fallback`]
//!   hands, per connection, everything that is not MCPL's to an [`McpFallback`] (the
//!   `mcpl-rmcp` crate plugs an rmcp `ServerHandler` in here): the MCP part of `initialize`
//!   (the session adds `capabilities.experimental.mcpl`), `tools/*` (after the §5.4 gate),
//!   `resources/*`, `prompts/*`, `completion/*`, `logging/*`, custom methods and MCP
//!   notifications. It sends to the host through [`Session::send_mcp_request`] and
//!   [`Session::send_mcp_notification`], which refuse every MCPL method, so every MCPL
//!   message still goes through the gated senders above.
//!
//! Readings where the spec is silent (each fails closed):
//! - A handler has no deadline of its own: a request runs until its handler answers, the
//!   host cancels it (MCP's `notifications/cancelled`: answered `-32800` at once, its slot
//!   freed, its handler stopped at its next `.await`, whatever the kind of handler) or the
//!   connection ends. §10.6 puts the hook timeout at the host; a host that gives requests up
//!   without cancelling them holds at most `PeerConfig::max_in_flight_requests` slots of its
//!   own connection, each request past them answered busy.
//! - Requests other than `initialize` and `ping` before `initialize` are answered `-32600`;
//!   senders used before `initialize` refuse with [`SendError::NotReady`].
//! - With [`ServerBuilder::require`], a policy Request whose grant lacks a required path is
//!   answered `accepted: false` with the configured `fallback` (§6.7); after `mcp-only` MCPL
//!   stays off for the rest of the connection (a later `featureSets/update` is `-32601`).
//! - A second `initialize` is answered `-32600`.
//! - A `state/rollback` naming a feature set reaches [`ServerBuilder::on_rollback`] only when
//!   the set declares `rollback: true` (§8.1) and is available now (§6.7: a reduction is
//!   respected at once): undeclared `-32003`, no rollback `-32602`, unavailable `-32001`.
//!   One naming no set is the handler's to judge.
//! - In MCP-only mode `tools/list` and `tools/call` are not gated (there is no MCPL grant;
//!   §3.2 says the server functions as a normal MCP server). With an MCPL host, `tools/call`
//!   needs `tools` (§5.4 table) and is refused before the policy Request.
//! - A request for a Notification-only method (e.g. `inference/lifecycle` with an id) is
//!   answered `-32600`.
//! - `channels/changed` is always sent as a Request: the host may require that form (§14.5)
//!   and it is always valid (§4.1), and it yields the itemized result.
//! - A host method naming a channel (`channels/publish`, `channels/close`,
//!   `channels/outgoing/chunk`, `channels/outgoing/complete`, `channels/acknowledge`,
//!   `channels/typing`) this connection does not hold reaches no handler (§14.3, §14.6): a
//!   Request is answered `-32023` by the session, a Notification is reported
//!   (`ServerDiagnostic::UnknownChannel`). A channel is held once the host accepted it in an
//!   itemized result (§14.5) or a `channels/open` handler answered with it, and until the
//!   server removes it (`channels/changed`) or a `channels/close` handler answers
//!   `closed: true`; a change still in flight counts as it proposes, since the host may hold
//!   an addition before its answer arrives.
//! - A `context/beforeInference` response whose feature set is undeclared or unavailable
//!   carries no injections (the receipt told the host that set is disabled); injections at a
//!   position whose inject leaf is not granted when the response is sent are dropped.
//! - A `push/event` with no caller-supplied `eventId` gets one derived from the digest of its
//!   `featureSet`, `payload`, `tags` and `origin` (not the timestamp), so a retry of the same
//!   event reuses it (§9.4); callers sending genuinely repeated events supply their own ids.
//! - Streaming `inference/chunk` notifications are routed to the stream by request id;
//!   chunks still queued when the final response arrives may be skipped (chunks are
//!   advisory; the response carries the full content, §11.4).
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::jsonrpc::ErrorObject;
use crate::protocol::hooks::{BeforeInferenceParams, BeforeInferenceResult};

mod build_checks;
mod builder;
mod caller;
mod conn;
mod conn_state;
mod dispatch;
mod driver;
mod errors;
mod fallback;
mod hooks;
pub mod listen;
mod notifications;
mod on;
mod push;
mod session;
mod state;
mod tools;

pub use crate::session::{DiagnosticKind, ServerDiagnostic};
pub use builder::ServerBuilder;
pub use conn::Server;
#[allow(deprecated)]
pub use errors::SessionDiagnostic;
pub use errors::{BuildError, SendError};
pub use fallback::{FallbackFuture, McpFallback};
pub use on::OnMethod;
pub use push::{utc_now_iso8601, PushEvent};
pub use session::{InferenceStream, Session};
pub use state::GrantState;
pub use tools::{ToolChangeError, ToolSpec, TOOLS_LIST_CHANGED};

/// What a handler returns: a result, or the JSON-RPC error object to answer with.
pub type HandlerResult<T> = Result<T, ErrorObject>;

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Handler<P, R> = Arc<dyn Fn(Session, P) -> BoxFut<HandlerResult<R>> + Send + Sync>;
type HookHandler = Arc<
    dyn Fn(GrantState, BeforeInferenceParams) -> BoxFut<HandlerResult<BeforeInferenceResult>>
        + Send
        + Sync,
>;
type Callback<T> = Arc<dyn Fn(&T) + Send + Sync>;
/// A callback that may reach its connection's state ([`ServerBuilder::connection_state`]).
type ConnCallback<T> = Arc<dyn Fn(&conn::Conn, &T) + Send + Sync>;
type ReadyHandler = Arc<dyn Fn(Session) -> BoxFut<()> + Send + Sync>;
type CustomHandler = Handler<Option<Value>, Value>;
type FallbackFactory = Arc<dyn Fn(Session) -> Arc<dyn McpFallback> + Send + Sync>;

fn erase<P, R, F, Fut>(f: F) -> Handler<P, R>
where
    F: Fn(Session, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult<R>> + Send + 'static,
{
    Arc::new(move |s, p| Box::pin(f(s, p)))
}

pub use crate::protocol::handshake::MCPL_VERSION;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state whole, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long the built-in lifecycle consumer waits for a terminal by default.
pub const DEFAULT_TURN_TIMEOUT: Duration = crate::lifecycle::DEFAULT_SAFETY_TIMEOUT;
