//! `mcpl serve`: run the reference MCPL server (`mcpl::reference`) on stdio, TCP or
//! WebSocket.

use std::process::ExitCode;
use std::sync::Arc;

use mcpl::reference;
use mcpl::server::listen::ServeConfig;
use mcpl::transport::listen::{
    ListenConfig, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
};
use mcpl::transport::{stdio, tcp, ws, MessageBudget};

use crate::term::{emit_err, CliError};

/// Arguments of `mcpl serve`. Exactly one transport; stdio when none is given.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve one connection over stdin/stdout (newline-delimited JSON-RPC). The default.
    #[arg(long, group = "transport")]
    pub stdio: bool,
    /// Listen for newline-delimited JSON-RPC over TCP on ADDR (e.g. `127.0.0.1:7400`;
    /// port 0 picks a free port). The bound address is printed on stderr.
    #[arg(long, value_name = "ADDR", group = "transport")]
    pub tcp: Option<String>,
    /// Listen for plaintext WebSocket (`ws://`) connections on ADDR. The bound address is
    /// printed on stderr.
    #[arg(long, value_name = "ADDR", group = "transport")]
    pub ws: Option<String>,
    /// Most bytes of partial (not yet complete) messages all connections may buffer
    /// together: a plain number of bytes or one with a KiB, MiB or GiB suffix. Past it, a
    /// growing message is refused with a -32000 error (under its id, read on a line
    /// wherever it comes, else null; a notification is never answered; data {limit,
    /// reason: "message_budget"}) and discarded (a WebSocket connection then ends, its id
    /// read from its first bytes only); the first 16 KiB
    /// of each message are outside the budget, so small messages always get through.
    #[arg(long, value_name = "BYTES", default_value = "256MiB", value_parser = parse_bytes)]
    pub max_buffered_bytes: usize,
    /// Most connections a TCP or WebSocket listener serves at once, handshakes included;
    /// one more is closed as soon as it is accepted, and reported on stderr.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = parse_count)]
    pub max_connections: usize,
    /// Most of those connections from one peer address (IPv6 counted by its /64 prefix);
    /// one more from that address is closed as soon as it is accepted, and reported on
    /// stderr.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
          value_parser = parse_count)]
    pub max_connections_per_address: usize,
}

/// Parses a connection limit: a whole number, at least 1.
fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// Parses `--max-buffered-bytes`: digits, optionally followed by `KiB`, `MiB` or `GiB`.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let scale: usize = match unit {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("unknown unit {other:?} (use KiB, MiB or GiB)")),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    n.checked_mul(scale)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{text:?} must be between 1 byte and {} bytes", usize::MAX))
}

fn listen_error(kind: &str, addr: &str, e: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("serve: cannot listen on {kind} {addr}: {e}"))
        .with_hint("pick another address or port (port 0 lets the system choose)")
}

/// A [`ServeConfig`] the library refused before accepting anything (exit 2).
fn refused(e: mcpl::server::listen::ServeConfigError) -> CliError {
    CliError::usage(format!("serve: {e}"))
}

/// The accept loops' limits (`--max-connections`, `--max-connections-per-address`), with
/// their reports printed on stderr; every connection's partial messages share one budget of
/// `--max-buffered-bytes`.
fn serve_config(args: &ServeArgs) -> ServeConfig {
    ServeConfig {
        listen: ListenConfig {
            report: Some(Arc::new(|line: &str| {
                emit_err(&format!("mcpl serve: {line}\n"))
            })),
            message_budget: Some(MessageBudget::new(args.max_buffered_bytes)),
            max_connections: args.max_connections,
            max_connections_per_address: args.max_connections_per_address,
            ..ListenConfig::default()
        },
        ..ServeConfig::default()
    }
}

/// What `mcpl serve` logs on stderr when `RUST_LOG` is unset or empty: `warn` and up, which
/// is where the library reports the server author's mistakes (a refused send, a dropped
/// injection, a failing handler …, `mcpl::server::DiagnosticKind::AuthorMistake`), once per
/// connection per message. Two targets are left out: `mcpl::peer`, whose diagnostics are
/// the *host's* defects, one per offending message (a junk flood would write one line per
/// line), and `mcpl::listen`, whose lines the accept loops already print, rate-limited,
/// through [`ListenConfig::report`].
pub const DEFAULT_LOG: &str = "warn,mcpl::peer=off,mcpl::listen=off";

/// Installs the stderr subscriber (stdout may be the stdio transport): `RUST_LOG` when set,
/// else [`DEFAULT_LOG`]. A `RUST_LOG` that does not parse is reported and the default used.
fn install_diagnostics() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            emit_err(&format!(
                "mcpl serve: RUST_LOG={spec:?} is not a tracing filter ({e}); using {DEFAULT_LOG:?}\n"
            ));
            EnvFilter::new(DEFAULT_LOG)
        }),
        _ => EnvFilter::new(DEFAULT_LOG),
    };
    // `try_init`: a subscriber already installed (none is, in the binary) is kept.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
}

/// Runs `mcpl serve`. Stdio serves one connection and exits 0 when it ends; the listeners
/// run until interrupted (exit 2 only if listening fails). Accept errors (e.g. running out
/// of descriptors) are reported once per run and survived with a backoff; each connection's
/// WebSocket upgrade and MCP `initialize` run in its own task under a timeout (10 s each).
/// The library's warnings go to stderr under [`DEFAULT_LOG`] (or `RUST_LOG`).
pub fn main(args: ServeArgs) -> Result<ExitCode, CliError> {
    install_diagnostics();
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
            reference::serve_on(Arc::new(listener), serve_config(&args))
                .await
                .map_err(refused)?;
            Ok(ExitCode::SUCCESS)
        } else if let Some(addr) = &args.ws {
            let listener = ws::Listener::bind(addr.as_str(), None)
                .await
                .map_err(|e| listen_error("ws", addr, e))?;
            let local = listener
                .local_addr()
                .map_err(|e| listen_error("ws", addr, e))?;
            emit_err(&format!("mcpl serve: listening on ws://{local}\n"));
            reference::serve_on(Arc::new(listener), serve_config(&args))
                .await
                .map_err(refused)?;
            Ok(ExitCode::SUCCESS)
        } else {
            let mut transport = stdio::stdio();
            transport
                .reader
                .set_message_budget(MessageBudget::new(args.max_buffered_bytes));
            let reason = reference::serve(transport).await;
            // Over stdio the host ends the session by closing our input (MCP's stdio
            // transport): that normal end is not told, so a host (or `mcpl check`, once per
            // session) sees nothing on stderr; any other end is.
            if !matches!(reason, mcpl::peer::CloseReason::Eof) {
                emit_err(&format!("mcpl serve: connection ended: {reason}\n"));
            }
            Ok(ExitCode::SUCCESS)
        }
    })
}
