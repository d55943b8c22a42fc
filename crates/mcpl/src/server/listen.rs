//! Serving a [`Server`] on a listener: the transport accept loop of
//! [`crate::transport::listen::serve`] (accept errors survived, transport handshakes off the
//! loop under a timeout), plus a bound on the MCP handshake of each connection.
//!
//! Reading (issue #20): a connection that has not completed MCP `initialize` within
//! [`ServeConfig::initialize_timeout`] is closed. Before `initialize` the session answers
//! nothing but `ping` (every other request is refused as premature), so a connection that
//! lingers there only holds a descriptor and memory; closing it fails closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::listen::{self, Listen, ListenConfig};
use crate::transport::Transport;

use super::Server;

/// How a listener is served ([`serve`]). `ServeConfig::default()` is a sensible start.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The accept loop's limits (handshake timeout, backoff, reports).
    pub listen: ListenConfig,
    /// Longest a connection may take from its transport handshake to a handled
    /// `initialize` request (10 s); a slower one is closed.
    pub initialize_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: ListenConfig::default(),
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
        }
    }
}

/// The default [`ServeConfig::initialize_timeout`]: 10 s.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `server` on every connection `listener` accepts, forever (drop the future to stop
/// accepting; connections already served go on). Each connection runs in its own task.
pub async fn serve<L: Listen + 'static>(server: Server, listener: Arc<L>, config: ServeConfig) {
    serve_each(move || server.clone(), listener, config).await
}

/// Like [`serve`], but every connection is served by its own [`Server`], made by `make`
/// when the connection arrives: for servers whose state belongs to one connection (its
/// manifest tracker among it) and must not be shared with the next.
pub async fn serve_each<L, F>(make: F, listener: Arc<L>, config: ServeConfig)
where
    L: Listen + 'static,
    F: Fn() -> Server + Send + Sync + 'static,
{
    let initialize_timeout = config.initialize_timeout;
    listen::serve(listener, config.listen, move |transport, addr| {
        serve_one(make(), transport, addr, initialize_timeout)
    })
    .await
}

async fn serve_one(server: Server, transport: Transport, addr: SocketAddr, init: Duration) {
    let session = server.start(transport);
    let mut state = session.grant_changes();
    let initialized = tokio::time::timeout(init, async {
        state.wait_for(|s| s.initialized).await.is_ok()
    })
    .await;
    drop(state);
    if initialized != Ok(true) {
        tracing::info!("{addr}: no initialize within {init:?}; closing");
        session.close();
    }
    let reason = session.closed().await;
    tracing::debug!("{addr}: connection ended: {reason}");
}
