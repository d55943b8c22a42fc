//! What the log tests share (`log_volume.rs`, `log_bounds.rs`, `log_flood.rs`): the
//! process's log subscriber writing into memory, and a bridged server over an in-memory
//! pipe whose host end the test writes raw lines to. Each such test binary holds one test
//! that installs it, since the subscriber is the process's.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};

/// Every log line written, in order.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// What was written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An rmcp service with nothing of its own.
#[derive(Clone)]
pub struct Quiet;

impl rmcp::ServerHandler for Quiet {}

/// The host's end of a bridged [`Quiet`] server: the lines the server writes, the writer
/// the test's raw lines go to, and the session kept alive while they are used.
pub struct Bridged {
    /// The lines the server writes.
    pub lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// Where the test writes the host's raw lines.
    pub writer: WriteHalf<DuplexStream>,
    /// The server's session, kept alive while the test runs.
    pub session: mcpl::server::Session,
}

/// Installs the process's log subscriber under `filter`, writing into the returned
/// [`Captured`], and starts a bridged [`Quiet`] server over a 64 KiB in-memory pipe.
pub fn captured_bridge(filter: &str) -> (Captured, Bridged) {
    let captured = Captured::default();
    let sink = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_env_filter(filter)
        .init();
    let server = mcpl_rmcp::builder(Quiet).build().unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let (hr, writer) = tokio::io::split(host_end);
    let lines = BufReader::new(hr).lines();
    (
        captured,
        Bridged {
            lines,
            writer,
            session,
        },
    )
}
