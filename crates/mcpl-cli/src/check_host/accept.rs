//! Which connection is the host (`--tcp`, `--ws`). A host speaks first: it connects and
//! sends its `initialize` (§4.1, MCP's lifecycle). So a connection is the host once its first
//! byte (`--tcp`) or its first WebSocket message (`--ws`, after the upgrade) arrives, and
//! until then it is only a candidate:
//!
//! - candidates wait side by side, so none holds up another: one that connects and stays
//!   silent (a health check, a client at the wrong port), or stalls its WebSocket upgrade,
//!   cannot keep the host out, as it did when each was waited on in turn;
//! - the wait for a first byte is bounded by the accept window, one `--timeout` from when
//!   the checker starts listening (the bound the run gives the connection,
//!   [`super::Bounds::wall`]); a connection silent through it is not the host, and a run in
//!   which no connection spoke ends "no host connected", saying how many stayed silent;
//! - at most [`MAX_CANDIDATES`] wait at once; past it, further connections wait in the
//!   system's listen backlog, unaccepted, until a candidate ends;
//! - what was not the host is said on stderr (the first of each kind at once; the silent
//!   ones once the host speaks) and counted in [`Seen`];
//! - a failed `accept` (the process out of descriptors, EMFILE; a connection aborted while
//!   queued) does not end the run: it is said on stderr (the first at once, all counted in
//!   [`Seen`]) and retried after [`ACCEPT_RETRY_FIRST`], doubling up to
//!   [`ACCEPT_RETRY_MAX`], and at once when a candidate ends (freeing its descriptor), until
//!   the accept window closes.

use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use mcpl::transport::{tcp, ws, BoxFuture, Frame, FrameReader, Transport};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::tally::Tally;
use crate::term::emit_err;

/// Connections that may wait at once for their first byte (the host among them).
pub(super) const MAX_CANDIDATES: usize = 64;

/// How long after a failed `accept` it is tried again (doubled after each further failure).
pub(super) const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(10);
/// The longest wait between two tries of a failing `accept`.
pub(super) const ACCEPT_RETRY_MAX: Duration = Duration::from_millis(500);

/// What connected and was not the host, by kind.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Connections that ended before sending anything.
    pub(super) ended: Tally<0>,
    /// `--ws`: connections whose WebSocket handshake failed.
    pub(super) failed_handshake: Tally<0>,
    /// Connections that sent nothing (and were still open) when the host spoke or the
    /// accept window closed.
    pub(super) silent: u64,
    /// `accept` calls that failed (each retried), and the last error.
    pub(super) accept_failed: Tally<1>,
}

impl Seen {
    /// The count said with "no host connected": empty when nothing else connected.
    pub(super) fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.ended.count() > 0 {
            parts.push(format!(
                "{} connection(s) ended before sending anything",
                self.ended.count()
            ));
        }
        if self.failed_handshake.count() > 0 {
            parts.push(format!(
                "{} connection(s) failed the WebSocket handshake",
                self.failed_handshake.count()
            ));
        }
        if self.silent > 0 {
            parts.push(format!(
                "{} connection(s) stayed open and sent nothing (a host speaks first)",
                self.silent
            ));
        }
        if let n @ 1.. = self.accept_failed.count() {
            parts.push(format!(
                "accept failed {n} time(s), the last: {}",
                self.accept_failed.latest().unwrap_or("unknown")
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    }
}

/// How a candidate turned out not to be the host.
enum NotHost {
    Ended,
    Handshake(ws::WsError),
}

/// The first connection over `listener` that speaks (`ws`: after a WebSocket upgrade), as
/// the module docs read it. Runs until one does: the caller bounds it (the accept window);
/// dropping it closes every candidate still waiting, and `seen` counts them as silent
/// then ([`Seen::silent`] is kept current while it runs).
pub(super) async fn first_to_speak(
    listener: TcpListener,
    websocket: bool,
    seen: &mut Seen,
) -> Result<Transport, String> {
    let mut candidates: JoinSet<Result<Transport, NotHost>> = JoinSet::new();
    // After a failed accept: when to try again, and the wait after the next failure.
    let mut retry_at: Option<Instant> = None;
    let mut backoff = ACCEPT_RETRY_FIRST;
    loop {
        seen.silent = candidates.len() as u64;
        tokio::select! {
            () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)),
                if retry_at.is_some() => retry_at = None,
            accepted = listener.accept(),
                if candidates.len() < MAX_CANDIDATES && retry_at.is_none() => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        backoff = ACCEPT_RETRY_FIRST;
                        stream
                    }
                    Err(e) => {
                        if seen.accept_failed.note_latest(e.to_string()) {
                            emit_err(&format!(
                                "mcpl check-host: accept failed ({e}); retrying until the \
                                 accept window closes\n"
                            ));
                        }
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(ACCEPT_RETRY_MAX);
                        continue;
                    }
                };
                if websocket {
                    candidates.spawn(first_message(stream));
                } else {
                    candidates.spawn(first_byte(stream));
                }
            }
            Some(done) = candidates.join_next() => match done {
                Ok(Ok(transport)) => {
                    seen.silent = candidates.len() as u64;
                    if seen.silent > 0 {
                        emit_err(&format!(
                            "mcpl check-host: {} other connection(s) had sent nothing when \
                             the host spoke (a host speaks first): closed, not the host\n",
                            seen.silent
                        ));
                    }
                    return Ok(transport);
                }
                Ok(Err(NotHost::Handshake(e))) => {
                    retry_at = None;
                    if seen.failed_handshake.note(String::new) {
                        emit_err(&format!(
                            "mcpl check-host: a connection failed its WebSocket handshake \
                             ({e}); still waiting for the host\n"
                        ));
                    }
                }
                // A candidate's task does not panic; one that did is no host either.
                Ok(Err(NotHost::Ended)) | Err(_) => {
                    // Its descriptor is free again: a failing accept is tried at once.
                    retry_at = None;
                    if seen.ended.note(String::new) {
                        emit_err(
                            "mcpl check-host: a connection ended before sending anything; \
                             still waiting for the host\n",
                        );
                    }
                }
            },
        }
    }
}

/// `--tcp`: the connection, once its first byte has come (peeked, left for the framing).
async fn first_byte(stream: tokio::net::TcpStream) -> Result<Transport, NotHost> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1..) => Ok(tcp::from_stream(stream)),
        _ => Err(NotHost::Ended),
    }
}

/// `--ws`: the connection, once upgraded and its first message has come (read with the
/// checker's message limit, and handed to the session first, [`FirstFrame`]).
async fn first_message(stream: tokio::net::TcpStream) -> Result<Transport, NotHost> {
    let mut transport = ws::accept(stream).await.map_err(NotHost::Handshake)?;
    transport.reader.set_max_message_size(super::MAX_MESSAGE);
    match transport.reader.next_frame().await {
        Ok(Some(first)) => {
            let Transport {
                reader,
                writer,
                guard,
                description,
            } = transport;
            let reader = Box::new(FirstFrame {
                first: Some(first),
                rest: reader,
            });
            Ok(Transport {
                reader,
                writer,
                guard,
                description,
            })
        }
        Ok(None) | Err(_) => Err(NotHost::Ended),
    }
}

/// A reader that yields `first` (already read) and then what `rest` reads.
struct FirstFrame {
    first: Option<Frame>,
    rest: Box<dyn FrameReader>,
}

// A wrapper forwards every method, defaulted ones too: a default left in place would
// silently undo what the reader it wraps does (clippy names a method added later).
#[deny(clippy::missing_trait_methods)]
impl FrameReader for FirstFrame {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        match self.first.take() {
            Some(first) => Box::pin(async move { Ok(Some(first)) }),
            None => self.rest.next_frame(),
        }
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        match self.first.take() {
            Some(first) => Some(Poll::Ready(Ok(Some(first)))),
            None => self.rest.poll_next_frame(cx),
        }
    }

    crate::reader_forward::forward_reader_state!(rest);
}
