//! [`McpFallback`]: another MCP implementation serving the MCP methods the builder does not know.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use super::conn::Conn;
use super::dispatch::{run_handler, Handled};
use super::*;
use crate::jsonrpc::{ErrorObject, RequestId};

/// The future an [`McpFallback`] answers a request with.
pub type FallbackFuture = Pin<Box<dyn Future<Output = HandlerResult<Value>> + Send>>;

/// Serves, for one connection, the MCP methods the [`ServerBuilder`] does not know: another
/// MCP implementation driven by the session (see [`ServerBuilder::mcp_fallback`]). The
/// connection's driver calls it in wire order, from the one task that reads the connection,
/// so an implementation that must keep that order (a `notifications/cancelled` after the
/// request it cancels) does the ordering-relevant work before returning the future.
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

/// Hands request `id` to the fallback now (in wire order) and answers with what it returns.
pub(super) fn spawn_fallback(
    conn: &Arc<Conn>,
    id: RequestId,
    method: &str,
    params: Option<Value>,
    f: Arc<dyn McpFallback>,
) -> Handled {
    let fut = f.request(&id, method, params);
    // Already a `Value`: written as one.
    run_handler(
        conn,
        id,
        format!("MCP fallback's {method}").into(),
        fut,
        false,
    )
}

/// Hands the host's `initialize` to the fallback like any handler (a fallback that waits,
/// e.g. on the session's own senders, never holds up the driver); the driver feeds nothing
/// read after it until it is answered, but the host's end of output is told at once
/// (`ServerDiagnostic::InputEnded`). The session makes the answer its own
/// (`session::application_initialize_result`, the manifest set under
/// `capabilities.experimental.mcpl`, the author's `mcp_capability`s set over its own). A
/// result naming no `tools` gets `tools: {}` when the builder advertises `tools` and the
/// author declared none. Reading: the fallback gets the connection's request timeout to
/// answer (without one it is waited for).
pub(super) fn fallback_initialize(
    conn: &Arc<Conn>,
    f: Arc<dyn McpFallback>,
    id: RequestId,
    params: Value,
) -> Handled {
    let fut = f.initialize(&id, params);
    let timeout = conn.server.peer_config.request_timeout;
    let adds_tools = conn.server.fallback_adds_tools;
    let fut: super::BoxFut<HandlerResult<Value>> = Box::pin(async move {
        let mut outcome = match timeout {
            Some(t) => tokio::time::timeout(t, fut).await.unwrap_or_else(|_| {
                Err(ErrorObject::internal(format!(
                    "the MCP fallback did not answer initialize within {t:?}"
                )))
            }),
            None => fut.await,
        };
        if adds_tools {
            if let Ok(Value::Object(result)) = &mut outcome {
                let caps = result
                    .entry("capabilities")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
                if let Value::Object(caps) = caps {
                    caps.entry("tools")
                        .or_insert_with(|| Value::Object(serde_json::Map::new()));
                }
            }
        }
        outcome
    });
    run_handler(conn, id, "MCP fallback's initialize".into(), fut, false)
}
