//! Inbound requests: the read loop, gating (§5.4), `initialize` and the policy Request (§5.3).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::conn::{Conn, Phase};
use super::fallback::{fallback_initialize, spawn_fallback};
use super::hooks::on_before_inference;
use super::notifications::on_notification;
use super::*;
use crate::jsonrpc::ErrorObject;
use crate::manifest::ManifestSnapshot;
use crate::peer::{IncomingMessage, IncomingRequest};
use crate::policy::{Fallback, FeatureSets};
use crate::protocol::channels::{
    ChannelsAcknowledge, ChannelsClose, ChannelsList, ChannelsOpen, ChannelsPublish,
    ChannelsTyping, ListResult,
};
use crate::protocol::handshake::{
    ToolsCall, ToolsCallParams, ToolsCallResult, ToolsList, ToolsListResult,
};
use crate::protocol::hooks::BeforeInference;
use crate::protocol::manifest::ManifestFetch;
use crate::protocol::state::StateRollback;
use crate::protocol::{method_info, Method};
use crate::session::{route_host_request, RequestRoute};

pub(super) async fn run(conn: Arc<Conn>, mut incoming: crate::peer::Incoming) {
    loop {
        let deadline = conn.next_deadline();
        let msg = tokio::select! {
            m = incoming.recv() => m,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            } => {
                conn.expire_turns();
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            // Boxed: the loop's task is as large as its largest await, and an idle
            // connection's task should not carry the request handling (issue #20).
            IncomingMessage::Request(req) => {
                let route = route(&conn, &req);
                if let Err(req) = tools_call_now(&conn, req, &route) {
                    Box::pin(on_request(&conn, req, route)).await
                }
            }
            IncomingMessage::Notification(n) => on_notification(&conn, n),
        }
    }
    conn.finish();
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

pub(super) async fn respond<R: Serialize>(req: IncomingRequest, out: HandlerResult<R>) {
    let out = out.and_then(|r| {
        serde_json::to_value(r)
            .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}")))
    });
    respond_value(req, out).await;
}

/// [`respond`] for a result that is a `Value` already: written from it as it is, without
/// the deep copy `serde_json::to_value` would make of it (issue #24).
pub(super) async fn respond_value(req: IncomingRequest, out: HandlerResult<Value>) {
    if let Err(e) = req.finish(out).await {
        tracing::debug!("response not sent: {e}");
    }
}

/// Runs `fut` (a handler and its answer) as far as it goes without waiting, right here in
/// the read loop, and spawns it only if it has to wait (issue #24: a task per `tools/call`
/// was most of what a `Server` adds to a round trip). A handler that awaits anything slow (a
/// timer, I/O, a lock) is pending at its first poll and goes on in its own task, so it still
/// never holds up the messages after it (a `ping` behind a slow `tools/call` is answered at
/// once); a handler that finishes without waiting is answered before the next message is
/// read. The answer's write is part of what is polled: if it cannot go out at once (a host
/// that does not read), the rest goes on in a task too, so the reader keeps reading and the
/// peer's in-flight bound refuses the excess `-32000` instead of the reader stalling on a
/// full queue (`tests/reliability_outside.rs`). Polled under [`guarded`], so a panic at the
/// first poll is answered `-32603` too.
fn run_or_spawn(fut: impl std::future::Future<Output = ()> + Send + 'static) {
    use futures_util::FutureExt;
    let mut fut = Box::pin(fut);
    if fut.as_mut().now_or_never().is_none() {
        tokio::spawn(fut);
    }
}

pub(super) fn spawn_handler<P, R>(
    conn: &Arc<Conn>,
    mut req: IncomingRequest,
    handler: Option<Handler<P, R>>,
) where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
{
    let Some(handler) = handler else {
        let m = req.method().to_owned();
        run_or_spawn(
            async move { respond::<()>(req, Err(ErrorObject::method_not_found(&m))).await },
        );
        return;
    };
    // Taken, not copied: nothing reads the request's params after its handler has them.
    let params = match req.take_params::<P>() {
        Ok(p) => p,
        Err(e) => {
            run_or_spawn(async move { respond::<()>(req, Err(e)).await });
            return;
        }
    };
    let session = Session { conn: conn.clone() };
    let conn = conn.clone();
    run_or_spawn(async move {
        let out = guarded(&conn, req.method(), handler(session, params)).await;
        let out = out.and_then(|r| {
            serde_json::to_value(r).map_err(|e| {
                conn.diagnostic(ServerDiagnostic::ResultUnencodable {
                    method: req.method().to_owned(),
                    error: e.to_string(),
                });
                ErrorObject::internal(format!("cannot encode result: {e}"))
            })
        });
        respond_value(req, out).await;
    });
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

/// Where the one server rule (`session::server::route_host_request`, as `ServerState`
/// routes) sends `req` under this connection's state now.
fn route(conn: &Conn, req: &IncomingRequest) -> Result<RequestRoute, ErrorObject> {
    let st = lock(&conn.state);
    let params = req.request().params.as_ref();
    route_host_request(
        req.method(),
        params,
        st.phase != Phase::New,
        st.mcpl,
        &st.policy,
    )
}

/// The handler of the tool a `tools/call` names, if one is registered under that name.
fn tool_handler(
    conn: &Conn,
    req: &IncomingRequest,
) -> Option<Handler<ToolsCallParams, ToolsCallResult>> {
    let name = req.request().params.as_ref()?.get("name")?.as_str()?;
    conn.server.tools.handler(name)
}

/// A `tools/call` that [`on_request`] would hand to its tool's handler (admitted by the one
/// routing rule, no fallback, a known tool), handed to it here without the boxed
/// `on_request` future (issue #24). Anything else is handed back, untouched, for
/// `on_request` to decide in full; nothing here has a side effect before the handler runs.
fn tools_call_now(
    conn: &Arc<Conn>,
    req: IncomingRequest,
    route: &Result<RequestRoute, ErrorObject>,
) -> Result<(), IncomingRequest> {
    if req.method() != ToolsCall::NAME
        || *route != Ok(RequestRoute::Admitted)
        || conn.fallback().is_some()
    {
        return Err(req);
    }
    match tool_handler(conn, &req) {
        Some(handler) => {
            spawn_handler(conn, req, Some(handler));
            Ok(())
        }
        None => Err(req),
    }
}

/// Answers or hands on a host request `route` (from [`route`]) admitted or refused.
pub(super) async fn on_request(
    conn: &Arc<Conn>,
    req: IncomingRequest,
    route: Result<RequestRoute, ErrorObject>,
) {
    // A known method's name is static: no copy on the common path (issue #24).
    let method: std::borrow::Cow<'static, str> = match method_info(req.method()) {
        Some(info) => info.name.into(),
        None => req.method().to_owned().into(),
    };
    let h = &conn.server.handlers;
    match route {
        Err(e) => return respond::<()>(req, Err(e)).await,
        Ok(RequestRoute::Initialize) => return on_initialize(conn, req).await,
        Ok(RequestRoute::Ping) => return respond(req, Ok(json!({}))).await,
        Ok(RequestRoute::Policy) => return on_policy_request(conn, req).await,
        Ok(RequestRoute::Untyped) => {
            // Not a protocol method: a custom one, the fallback's, or unknown (removed
            // surfaces never get here: the routing rule answers them `-32601`).
            let handler = h.custom.get(&*method).cloned();
            if handler.is_none() {
                if let Some(f) = conn.fallback() {
                    return spawn_fallback(conn, req, f);
                }
            }
            return spawn_handler(conn, req, handler);
        }
        Ok(RequestRoute::Admitted) => {}
    }
    if matches!(&*method, ToolsList::NAME | ToolsCall::NAME) {
        // Gated above (§5.4); the fallback is the only source of tools when there is one.
        if let Some(f) = conn.fallback() {
            return spawn_fallback(conn, req, f);
        }
    }
    match &*method {
        ToolsList::NAME => {
            let tools = conn.server.tools.listed();
            let result = ToolsListResult {
                tools,
                next_cursor: None,
                extra: Map::new(),
            };
            respond(req, Ok(result)).await
        }
        ToolsCall::NAME => {
            let handler = tool_handler(conn, &req);
            if handler.is_none() {
                let e = ErrorObject::invalid_params("unknown tool");
                return respond::<()>(req, Err(e)).await;
            }
            spawn_handler(conn, req, handler)
        }
        ManifestFetch::NAME => {
            let m = conn.tracker().manifest_result();
            respond(req, Ok(m)).await
        }
        BeforeInference::NAME => on_before_inference(conn, req),
        StateRollback::NAME => spawn_handler(conn, req, h.rollback.clone()),
        ChannelsOpen::NAME => spawn_handler(conn, req, h.channels_open.clone()),
        ChannelsClose::NAME => spawn_handler(conn, req, h.channels_close.clone()),
        ChannelsPublish::NAME => spawn_handler(conn, req, h.channels_publish.clone()),
        ChannelsList::NAME => {
            let Some(f) = h.channels_list.clone() else {
                // No handler: the one rule (`AcceptedChannels::list_result`, as `ServerState`).
                let list = lock(&conn.state).channels.list_result();
                return respond(req, Ok(list)).await;
            };
            let g: Handler<crate::protocol::EmptyObject, ListResult> =
                Arc::new(move |s, _| f(s, ()));
            spawn_handler(conn, req, Some(g))
        }
        ChannelsAcknowledge::NAME => {
            spawn_handler(conn, req, empty_result(h.channels_acknowledge.clone()))
        }
        ChannelsTyping::NAME => spawn_handler(conn, req, empty_result(h.channels_typing.clone())),
        _ => respond::<()>(req, Err(ErrorObject::method_not_found(&method))).await,
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

pub(super) async fn on_initialize(conn: &Arc<Conn>, req: IncomingRequest) {
    // The one server rule (`session::server::read_initialize`, as `ServerState` reads it).
    let initialized = lock(&conn.state).phase != Phase::New;
    let read = match crate::session::read_initialize(initialized, req.request().params.as_ref()) {
        Ok(read) => read,
        Err(e) => return respond::<()>(req, Err(e)).await,
    };
    if let Some(d) = read.diagnostic {
        conn.diagnostic(d);
    }
    let (protocol_version, mcpl) = (read.protocol_version, read.mcpl);
    let raw = req.request().params.clone().unwrap_or(Value::Null);
    let snapshot: Arc<ManifestSnapshot> = conn.tracker().snapshot();
    let result = match conn.fallback() {
        Some(f) => match fallback_initialize(conn, f, req.id(), raw, snapshot.manifest()).await {
            Ok(result) => result,
            Err(e) => return respond::<()>(req, Err(e)).await,
        },
        // The one rule (`session::initialize_result`, as `ServerState` answers).
        None => match serde_json::to_value(&conn.server.info) {
            Ok(info) => crate::session::initialize_result(
                protocol_version,
                &conn.server.mcp_capabilities,
                snapshot.manifest(),
                info,
                conn.server.instructions.as_deref(),
            ),
            Err(e) => {
                let e = ErrorObject::internal(format!("cannot encode result: {e}"));
                return respond::<()>(req, Err(e)).await;
            }
        },
    };
    {
        let mut st = lock(&conn.state);
        st.phase = Phase::Initialized;
        st.mcpl = mcpl;
        st.policy
            .set_declarations(FeatureSets::from_mcpl(snapshot.manifest()).0);
        conn.publish(&st);
    }
    respond(req, Ok(result)).await;
    if mcpl {
        // Attach with exactly the snapshot sent, so nothing is re-announced (§17.10).
        conn.attach_manifest(snapshot);
    }
}

/// Lifts [`ConnState::held`] when dropped (the receipt, or the error, has been written, or
/// the exchange was abandoned) and publishes the full state.
struct Release<'a>(&'a Conn);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.held = None;
        self.0.publish(&st);
    }
}

pub(super) async fn on_policy_request(conn: &Arc<Conn>, req: IncomingRequest) {
    // Read in place: a copy of a hostile 2 MB list cost as much as parsing it (issue #20).
    let null = Value::Null;
    let answer = {
        let params = req.request().params.as_ref().unwrap_or(&null);
        let mut st = lock(&conn.state);
        st.held = Some(Conn::state_of(&st));
        let answer =
            crate::session::answer_policy_request(&mut st.policy, conn.server.required, params);
        if answer.refused == Some(Fallback::McpOnly) {
            // Do what the receipt says: no MCPL on this connection from now on, so no more
            // manifest announcements either (§17.10: nothing to fetch them).
            st.mcpl = false;
            if let Some(id) = st.tracker_id.take() {
                conn.tracker().detach(id);
            }
            // One not yet written is dropped too (§3.2), as `ServerState` drops it.
            lock(&conn.announce).clear();
        }
        conn.publish(&st);
        answer
    };
    let release = Release(conn);
    for d in &answer.diagnostics {
        conn.diagnostic(d.clone());
    }
    let refused = answer.refused;
    let accepted = answer.response.is_ok() && refused.is_none();
    respond(req, answer.response).await;
    if refused == Some(Fallback::Close) {
        conn.peer.close();
    }
    if !accepted {
        return;
    }
    // The receipt is ahead of anything sent from now on: the widening may apply.
    drop(release);
    let h = &conn.server.handlers;
    // The one rule (`session::ReadyMoments`, as `ServerState`'s `PolicyApplied::first`).
    let first_moment = lock(&conn.state).ready.accepted();
    let first = h.first_ready.clone().filter(|_| first_moment);
    let every = h.ready.clone();
    if first.is_some() || every.is_some() {
        let session = Session { conn: conn.clone() };
        tokio::spawn(async move {
            if let Some(first) = first {
                first(session.clone()).await;
            }
            if let Some(every) = every {
                every(session).await;
            }
        });
    }
}
