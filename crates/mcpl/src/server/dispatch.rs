//! Host requests the session handed out (`session::ServerState`'s
//! `ServerOutput::Request`, after its routing, gating §5.4 and `initialize`/policy
//! handling §5.3): to their handler, the tool registry or the MCP fallback. A handler that
//! finishes without waiting is answered inline ([`Handled::Now`]); one that waits goes on in
//! its own task and its answer re-enters the driver as a `Command::Answer`.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::conn::Conn;
use super::driver::Command;
use super::fallback::{fallback_initialize, spawn_fallback};
use super::hooks::on_before_inference;
use super::*;
use crate::jsonrpc::{Encoded, ErrorObject, RequestId};
use crate::protocol::channels::{
    ChannelsAcknowledge, ChannelsClose, ChannelsList, ChannelsOpen, ChannelsPublish,
    ChannelsTyping, ListResult,
};
use crate::protocol::handshake::{
    Initialize, ToolsCall, ToolsCallParams, ToolsCallResult, ToolsList, ToolsListResult,
};
use crate::protocol::hooks::BeforeInference;
use crate::protocol::manifest::ManifestFetch;
use crate::protocol::state::StateRollback;
use crate::protocol::{method_info, Method};

/// How a handed-out request was taken.
pub(super) enum Handled {
    /// Answered without waiting: the driver feeds the answer at once.
    Now(Answer),
    /// Goes on in a task of its own, which sends its answer to the driver; the handle stops
    /// it when the host cancels the request.
    Later(tokio::task::AbortHandle),
}

impl Handled {
    /// Answered now with `outcome`.
    pub(super) fn now(outcome: HandlerResult<Value>) -> Handled {
        Handled::Now(Answer::Value(outcome))
    }
}

/// A handler's answer, in the form the state machine takes it.
pub(super) enum Answer {
    /// As a `Value`: a hook's and an `initialize`'s (rules read them,
    /// `ServerState::answer`), the MCP fallback's, errors, and what is built as one.
    Value(HandlerResult<Value>),
    /// A typed handler's result, encoded straight from its type
    /// (`ServerState::answer_encoded`; issue #24: no `Value` tree in between).
    Encoded(Encoded),
}

impl Answer {
    /// What the answer holds while it waits for the driver: the encoded text's bytes, or
    /// what a `Value` holds ([`crate::jsonrpc::held_bytes`]; its text is no measure, one
    /// dense in small objects holding ~80 times it).
    fn len(&self) -> usize {
        match self {
            Answer::Encoded(e) => e.get().len(),
            Answer::Value(Ok(v)) => crate::jsonrpc::held_bytes(v),
            // An error's `data` is a value like any result.
            Answer::Value(Err(e)) => {
                e.message.len() + e.data.as_ref().map_or(0, crate::jsonrpc::held_bytes)
            }
        }
    }
}

/// Whether `method` is a surface removed from MCPL ([`crate::protocol::REMOVED_METHODS`]):
/// answered `-32601`, never handed to a custom handler or an [`McpFallback`].
pub(super) fn is_removed(method: &str) -> bool {
    crate::protocol::removed_in(method).is_some()
}

/// Whether `method` is MCPL's (or of the handshake MCPL rides on) or a removed surface: no
/// custom handler may take it, no fallback gets it, and the plain MCP senders refuse it.
pub(super) fn is_reserved(method: &str) -> bool {
    method_info(method).is_some() || is_removed(method)
}

/// Runs a handler's future `fut` (for `method`) as far as it goes without waiting, right
/// here in the driver (issue #24: a task per `tools/call` was most of what a `Server` adds to
/// a round trip): one that finishes is answered inline ([`Handled::Now`]). One that awaits
/// anything slow (a timer, I/O, a lock) is pending at its first poll and goes on in its own
/// task, so it never holds up the messages after it (a `ping` behind a slow `tools/call` is
/// answered at once); its answer comes back to the driver as a [`Command::Answer`]. A panic
/// is answered `-32603` and reported ([`guarded`]); a result that does not serialize is
/// answered `-32603` and reported. With `encode` the result is encoded straight from its
/// type ([`Answer::Encoded`]), else made a `Value` (a rule reads it, or it is one).
pub(super) fn run_handler<R: Serialize + Send + 'static>(
    conn: &Arc<Conn>,
    id: RequestId,
    method: std::borrow::Cow<'static, str>,
    mut fut: BoxFut<HandlerResult<R>>,
    encode: bool,
) -> Handled {
    use futures_util::FutureExt;
    let first =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().now_or_never()));
    match first {
        Ok(Some(out)) => Handled::Now(answer(conn, &id, &method, out, encode)),
        Err(_) => {
            conn.diagnostic(ServerDiagnostic::HandlerPanicked {
                method: method.into_owned(),
            });
            Handled::now(Err(ErrorObject::internal(PANICKED)))
        }
        Ok(None) => {
            let conn = conn.clone();
            let task = tokio::spawn(async move {
                let out = guarded(&conn, &method, fut).await;
                let outcome = answer(&conn, &id, &method, out, encode);
                // Counted among the bytes in flight while it waits for the driver to take
                // it: a request arriving meanwhile is weighed against it
                // (`PeerConfig::max_in_flight_bytes`), as against an answer the driver holds.
                let weight = conn.peer.weigh_answer(outcome.len());
                let task = tokio::task::id();
                let _ = conn
                    .commands
                    .send(Command::Answer {
                        id,
                        task,
                        outcome,
                        weight,
                    })
                    .await;
            });
            Handled::Later(task.abort_handle())
        }
    }
}

/// A handler's result as the JSON it is answered with: encoded text with `encode`, else a
/// `Value`.
fn answer<R: Serialize>(
    conn: &Conn,
    id: &RequestId,
    method: &str,
    out: HandlerResult<R>,
    encode: bool,
) -> Answer {
    let unencodable = |e: &dyn std::fmt::Display| {
        conn.diagnostic(ServerDiagnostic::ResultUnencodable {
            method: method.to_owned(),
            error: e.to_string(),
        });
        ErrorObject::internal(format!("cannot encode result: {e}"))
    };
    match out {
        // Framed as the response line answering `id`, which is then written as it is.
        Ok(r) if encode => match Encoded::response_for(conn.peer.frame_buffer(), id, &r) {
            Ok(result) => Answer::Encoded(result),
            Err(e) => Answer::Value(Err(unencodable(&e))),
        },
        out => {
            let outcome = out.and_then(|r| serde_json::to_value(r).map_err(|e| unencodable(&e)));
            // A result nested past what the host reads is not sent (`Encoded::encode`'s
            // rule, for the `Value` way).
            match crate::jsonrpc::outcome_to_send(outcome) {
                (outcome, None) => Answer::Value(outcome),
                (_, Some(reason)) => Answer::Value(Err(unencodable(&reason))),
            }
        }
    }
}

/// Hands request `id` of `method` with `params` to `handler` (`-32601` without one, `-32602`
/// for params that are not `P`).
pub(super) fn spawn_handler<P, R>(
    conn: &Arc<Conn>,
    id: RequestId,
    method: &str,
    params: Option<Value>,
    handler: Option<Handler<P, R>>,
) -> Handled
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
{
    let Some(handler) = handler else {
        return Handled::now(Err(ErrorObject::method_not_found(method)));
    };
    match crate::jsonrpc::parse_params::<P>(params) {
        Ok(params) => run_parsed(conn, id, method, params, handler),
        Err(e) => Handled::now(Err(e)),
    }
}

/// Hands request `id` of `method`, its params already parsed, to `handler`.
fn run_parsed<P, R>(
    conn: &Arc<Conn>,
    id: RequestId,
    method: &str,
    params: P,
    handler: Handler<P, R>,
) -> Handled
where
    P: Send + 'static,
    R: Serialize + Send + 'static,
{
    let session = Session::of(conn.clone());
    // Every request it takes is answered as the application gave it: encoded.
    run_handler(
        conn,
        id,
        static_name(method),
        handler(session, params),
        true,
    )
}

/// `method`'s name: a known method's is static, so no copy on the common path (issue #24).
pub(super) fn static_name(method: &str) -> std::borrow::Cow<'static, str> {
    match method_info(method) {
        Some(info) => info.name.into(),
        None => method.to_owned().into(),
    }
}

/// The `-32603` message a panicking handler is answered with.
pub(super) const PANICKED: &str = "the handler panicked";

/// Runs the `method` handler's future; a panic becomes a `-32603` answer instead of a
/// dropped request, and is reported as the author's mistake.
pub(super) async fn guarded<R>(
    conn: &Conn,
    method: &str,
    fut: BoxFut<HandlerResult<R>>,
) -> HandlerResult<R> {
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(out) => out,
        Err(_) => {
            conn.diagnostic(ServerDiagnostic::HandlerPanicked {
                method: method.to_string(),
            });
            Err(ErrorObject::internal(PANICKED))
        }
    }
}

/// A handed-out request's params: as a `Value`, or a `tools/call`'s read straight into their
/// type by the reader (`Peer::read_tools_call_typed`, issue #24).
pub(super) enum Params {
    Value(Option<Value>),
    ToolsCall(Box<ToolsCallParams>),
}

/// Takes a request the session handed out (`initialize` with a fallback, a typed method it
/// admitted, or one this crate does not type).
pub(super) fn on_request(conn: &Arc<Conn>, id: RequestId, method: &str, params: Params) -> Handled {
    let params = match params {
        Params::ToolsCall(call) if method == ToolsCall::NAME && conn.fallback().is_none() => {
            return on_tools_call(conn, id, conn.peer.give_back_call(call));
        }
        // Not reached (typed reads are off with a fallback): the `Value` the params read
        // into, members the type omits when absent left out.
        Params::ToolsCall(call) => serde_json::to_value(*call).ok(),
        Params::Value(params) => params,
    };
    let h = &conn.server.handlers;
    if method == Initialize::NAME {
        // Handed out only to a connection with a fallback; the driver feeds nothing more
        // until it answers (as the host waits for it), though it sees the host's end.
        let Some(f) = conn.fallback() else {
            return Handled::now(Err(ErrorObject::method_not_found(method)));
        };
        return fallback_initialize(conn, f, id, params.unwrap_or(Value::Null));
    }
    if method_info(method).is_none() {
        // Not a protocol method: a custom one, the fallback's, or unknown (removed surfaces
        // never get here: the routing rule answers them `-32601`).
        let handler = h.custom.get(method).cloned();
        if handler.is_none() {
            if let Some(f) = conn.fallback() {
                return spawn_fallback(conn, id, method, params, f);
            }
        }
        return spawn_handler(conn, id, method, params, handler);
    }
    if matches!(method, ToolsList::NAME | ToolsCall::NAME) {
        // Gated (§5.4); the fallback is the only source of tools when there is one.
        if let Some(f) = conn.fallback() {
            return spawn_fallback(conn, id, method, params, f);
        }
    }
    match method {
        ToolsList::NAME => {
            let result = ToolsListResult {
                tools: conn.server.tools.listed(),
                next_cursor: None,
                extra: Map::new(),
            };
            Handled::now(
                serde_json::to_value(result)
                    .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}"))),
            )
        }
        ToolsCall::NAME => {
            let handler: Option<Handler<ToolsCallParams, ToolsCallResult>> = params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .and_then(|name| conn.server.tools.handler(name));
            if handler.is_none() {
                return Handled::now(Err(ErrorObject::invalid_params("unknown tool")));
            }
            spawn_handler(conn, id, method, params, handler)
        }
        ManifestFetch::NAME => Handled::now(Ok(conn.tracker().manifest_result())),
        BeforeInference::NAME => on_before_inference(conn, id, params),
        StateRollback::NAME => spawn_handler(conn, id, method, params, h.rollback.clone()),
        ChannelsOpen::NAME => spawn_handler(conn, id, method, params, h.channels_open.clone()),
        ChannelsClose::NAME => spawn_handler(conn, id, method, params, h.channels_close.clone()),
        ChannelsPublish::NAME => {
            spawn_handler(conn, id, method, params, h.channels_publish.clone())
        }
        ChannelsList::NAME => {
            // Handed out only when a handler is registered (else the session answers with
            // the channels the host accepted).
            let g = h.channels_list.clone().map(|f| {
                let g: Handler<crate::protocol::EmptyObject, ListResult> =
                    Arc::new(move |s, _| f(s, ()));
                g
            });
            spawn_handler(conn, id, method, params, g)
        }
        ChannelsAcknowledge::NAME => spawn_handler(
            conn,
            id,
            method,
            params,
            empty_result(h.channels_acknowledge.clone()),
        ),
        ChannelsTyping::NAME => spawn_handler(
            conn,
            id,
            method,
            params,
            empty_result(h.channels_typing.clone()),
        ),
        _ => Handled::now(Err(ErrorObject::method_not_found(method))),
    }
}

/// A `tools/call` whose params are read: to the named tool's handler (`-32602` for a tool
/// this server does not have, as the `Value` way answers it).
fn on_tools_call(conn: &Arc<Conn>, id: RequestId, call: ToolsCallParams) -> Handled {
    match conn.server.tools.handler(&call.name) {
        Some(handler) => run_parsed(conn, id, ToolsCall::NAME, call, handler),
        None => Handled::now(Err(ErrorObject::invalid_params("unknown tool"))),
    }
}

pub(super) fn empty_result<P: Send + 'static>(
    h: Option<Handler<P, ()>>,
) -> Option<Handler<P, Value>> {
    h.map(|f| {
        let g: Handler<P, Value> = Arc::new(move |s, p| {
            let fut = f(s, p);
            Box::pin(async move { fut.await.map(|()| json!({})) })
        });
        g
    })
}
