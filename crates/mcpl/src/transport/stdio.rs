//! The current process's stdin and stdout as a newline-delimited transport (how an MCP
//! server launched by its host talks).

use super::Transport;

/// A transport reading stdin and writing stdout. Nothing else in the process may write to
/// stdout while it is in use (log to stderr instead).
pub fn stdio() -> Transport {
    Transport::lines(tokio::io::stdin(), tokio::io::stdout(), "stdio")
}
