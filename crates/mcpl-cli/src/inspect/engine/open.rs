//! Reaching the target: a spawned command over its stdio, or an address dialled.

use std::sync::Arc;
use std::time::Duration;

use mcpl::transport::child::ChildControl;
use mcpl::transport::{endpoint, Transport};

use crate::check::Target;

/// Opens the target: spawns a command (its control kept, to kill it on restart) or dials an
/// address, bounded by `timeout`.
pub(super) async fn open(
    target: &Target,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<(Transport, Option<ChildControl>), String> {
    match target {
        Target::Command(argv) => {
            let (prog, args) = argv
                .split_first()
                .ok_or_else(|| "empty command".to_owned())?;
            let mut command = tokio::process::Command::new(prog);
            command.args(args);
            // The error names the program ("cannot start …"); its stderr shown printable.
            crate::server_stderr::spawn(&mut command)
                .map(|(t, c)| (t, Some(c)))
                .map_err(|e| e.to_string())
        }
        Target::Tcp(addr) => dial(&format!("tcp://{addr}"), None, timeout).await,
        Target::Ws(url) => dial(url, tls, timeout).await,
    }
}

async fn dial(
    address: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<(Transport, Option<ChildControl>), String> {
    match tokio::time::timeout(timeout, endpoint::connect(address, tls)).await {
        Ok(Ok(t)) => Ok((t, None)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("connecting to {address} timed out")),
    }
}
