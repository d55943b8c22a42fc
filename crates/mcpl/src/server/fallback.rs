//! [`McpFallback`]: another MCP implementation serving the MCP methods the builder does not know.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use super::conn::Conn;
use super::dispatch::{guarded, respond_value};
use super::*;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::peer::IncomingRequest;

/// The future an [`McpFallback`] answers a request with.
pub type FallbackFuture = Pin<Box<dyn Future<Output = HandlerResult<Value>> + Send>>;

/// Serves, for one connection, the MCP methods the [`ServerBuilder`] does not know: another
/// MCP implementation driven by the session (see [`ServerBuilder::mcp_fallback`]). The
/// session calls it in wire order from its dispatch loop, so an implementation that must
/// keep that order (a `notifications/cancelled` after the request it cancels) does the
/// ordering-relevant work before returning the future.
pub trait McpFallback: Send + Sync + 'static {
    /// The MCP `initialize` result for the host's `params` (`protocolVersion`,
    /// `capabilities`, `serverInfo`, `instructions`). The session sets
    /// `capabilities.experimental.mcpl` to the manifest (replacing any the result carries,
    /// with a diagnostic) and answers the host; an error is answered as it is.
    fn initialize(&self, id: &RequestId, params: Value) -> FallbackFuture;

    /// A host request that is not MCPL's: `tools/list`, `tools/call` (once the §5.4 gate
    /// let it through), `resources/*`, `prompts/*`, `completion/complete`,
    /// `logging/setLevel`, a custom method not registered with [`ServerBuilder::method`] …
    /// Never `initialize`, `ping`, an MCPL method or a removed surface.
    fn request(&self, id: &RequestId, method: &str, params: Option<Value>) -> FallbackFuture;

    /// A host notification that is not MCPL's (`notifications/initialized`,
    /// `notifications/cancelled`, `notifications/progress`, …).
    fn notification(&self, method: &str, params: Option<Value>);
}

/// Hands `req` to the fallback now (in wire order) and answers with what it returns.
pub(super) fn spawn_fallback(conn: &Arc<Conn>, req: IncomingRequest, f: Arc<dyn McpFallback>) {
    let r = req.request();
    let fut = f.request(&r.id, &r.method, r.params.clone());
    let conn = conn.clone();
    tokio::spawn(async move {
        let method = format!("MCP fallback's {}", req.method());
        let out = guarded(&conn, &method, fut).await;
        respond_value(req, out).await;
    });
}

/// The fallback's `initialize` result made the session's by the one rule
/// ([`crate::session::application_initialize_result`], as `ServerState` makes an
/// application's answer). Reading: the fallback gets the connection's request timeout to
/// answer (without one it is waited for).
pub(super) async fn fallback_initialize(
    conn: &Conn,
    f: Arc<dyn McpFallback>,
    id: &RequestId,
    params: Value,
    manifest: &Value,
) -> Result<Value, ErrorObject> {
    let fut = guarded(conn, "MCP fallback's initialize", f.initialize(id, params));
    let out = match conn.server.peer_config.request_timeout {
        Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| {
            ErrorObject::internal(format!(
                "the MCP fallback did not answer initialize within {t:?}"
            ))
        })?,
        None => fut.await,
    }?;
    let mut diags = Vec::new();
    let result = crate::session::application_initialize_result(
        out,
        &conn.server.mcp_capabilities,
        manifest,
        &mut diags,
    );
    for d in diags {
        conn.diagnostic(d);
    }
    result
}
