//! `mcpl serve`: run the reference MCPL server (`mcpl::reference`) on stdio, TCP or
//! WebSocket.

use std::process::ExitCode;
use std::sync::Arc;

use mcpl::reference;
use mcpl::server::listen::ServeConfig;
use mcpl::transport::listen::ListenConfig;
use mcpl::transport::{stdio, tcp, ws};

use crate::term::{emit_err, CliError};

/// Arguments of `mcpl serve`. Exactly one transport; stdio when none is given.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct ServeArgs {
    /// Serve one connection over stdin/stdout (newline-delimited JSON-RPC). The default.
    #[arg(long)]
    pub stdio: bool,
    /// Listen for newline-delimited JSON-RPC over TCP on ADDR (e.g. `127.0.0.1:7400`;
    /// port 0 picks a free port). The bound address is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub tcp: Option<String>,
    /// Listen for plaintext WebSocket (`ws://`) connections on ADDR. The bound address is
    /// printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<String>,
}

fn listen_error(kind: &str, addr: &str, e: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("serve: cannot listen on {kind} {addr}: {e}"))
        .with_hint("pick another address or port (port 0 lets the system choose)")
}

/// The accept loops' limits, with their reports printed on stderr.
fn serve_config() -> ServeConfig {
    ServeConfig {
        listen: ListenConfig {
            report: Some(Arc::new(|line: &str| {
                emit_err(&format!("mcpl serve: {line}\n"))
            })),
            ..ListenConfig::default()
        },
        ..ServeConfig::default()
    }
}

/// Runs `mcpl serve`. Stdio serves one connection and exits 0 when it ends; the listeners
/// run until interrupted (exit 2 only if listening fails). Accept errors (e.g. running out
/// of descriptors) are reported once per run and survived with a backoff; each connection's
/// WebSocket upgrade and MCP `initialize` run in its own task under a timeout (10 s each).
pub fn main(args: ServeArgs) -> Result<ExitCode, CliError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("serve: cannot start the runtime: {e}")))?;
    rt.block_on(async move {
        if let Some(addr) = &args.tcp {
            let listener = tcp::Listener::bind(addr.as_str())
                .await
                .map_err(|e| listen_error("tcp", addr, e))?;
            let local = listener
                .local_addr()
                .map_err(|e| listen_error("tcp", addr, e))?;
            emit_err(&format!("mcpl serve: listening on tcp://{local}\n"));
            // One shared server, so every connection sees the same manifest tracker.
            reference::serve_on(Arc::new(listener), serve_config()).await;
            Ok(ExitCode::SUCCESS)
        } else if let Some(addr) = &args.ws {
            let listener = ws::Listener::bind(addr.as_str(), None)
                .await
                .map_err(|e| listen_error("ws", addr, e))?;
            let local = listener
                .local_addr()
                .map_err(|e| listen_error("ws", addr, e))?;
            emit_err(&format!("mcpl serve: listening on ws://{local}\n"));
            reference::serve_on(Arc::new(listener), serve_config()).await;
            Ok(ExitCode::SUCCESS)
        } else {
            let reason = reference::serve(stdio::stdio()).await;
            emit_err(&format!("mcpl serve: connection ended: {reason}\n"));
            Ok(ExitCode::SUCCESS)
        }
    })
}
