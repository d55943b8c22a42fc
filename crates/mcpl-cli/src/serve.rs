//! `mcpl serve`: run the reference MCPL server on stdio, TCP or WebSocket.

use std::process::ExitCode;

use crate::term::CliError;

/// Arguments of `mcpl serve`. Exactly one transport; stdio when none is given.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct ServeArgs {
    /// Serve one connection over stdin/stdout (newline-delimited JSON-RPC). The default.
    #[arg(long)]
    pub stdio: bool,
    /// Listen for newline-delimited JSON-RPC over TCP on ADDR (e.g. `127.0.0.1:7400`).
    #[arg(long, value_name = "ADDR")]
    pub tcp: Option<String>,
    /// Listen for WebSocket connections on ADDR (e.g. `127.0.0.1:7401`).
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<String>,
}

/// Runs `mcpl serve`.
pub fn main(_args: ServeArgs) -> Result<ExitCode, CliError> {
    Err(
        CliError::usage("mcpl serve: the reference server is not available in this build")
            .with_hint("this build predates `mcpl::reference`; use a newer mcpl"),
    )
}
