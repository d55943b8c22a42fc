//! The bidirectional JSON-RPC connection both MCPL sessions run on.
//!
//! [`Peer::new`] takes a [`Transport`] and returns a cloneable [`Peer`] handle (send requests
//! and notifications, any number outstanding, each matched to its response by id) and an
//! [`Incoming`] receiver (the other side's requests and notifications). Both sides send
//! requests at once: a server's `push/event` may go out while the host's `tools/call` is open.
//! Each direction has its own id space; ids this side sends are integers counting from 1.
//!
//! Every incoming request carries a responder guard ([`IncomingRequest`]): answer it with
//! [`IncomingRequest::respond`] or [`IncomingRequest::respond_error`]; if it is dropped
//! unanswered it answers `-32601` itself (SPEC §6.6: a request with an id always gets an
//! answer). While the [`Incoming`] receiver is dropped, requests are answered `-32601` too.
//!
//! Defects of the other side (junk lines, oversized lines, invalid messages, late or unknown
//! responses) never end the connection: they are logged with `tracing` and reported on the
//! bounded [`Diagnostics`] stream ([`Peer::diagnostics`]).
//!
//! ```
//! use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let ((host, _host_in), (server, mut server_in)) = Peer::memory_pair(PeerConfig::default());
//! // The server answers `ping` and leaves every other method to the -32601 guard.
//! tokio::spawn(async move {
//!     while let Some(msg) = server_in.recv().await {
//!         if let IncomingMessage::Request(req) = msg {
//!             if req.method() == "ping" {
//!                 let _ = req.respond(json!({})).await;
//!             }
//!         }
//!     }
//! });
//! assert_eq!(host.request_raw("ping", None).await.unwrap(), json!({}));
//! let err = host.request_raw("nope", None).await.unwrap_err();
//! assert_eq!(err.remote().map(|e| e.code), Some(-32601));
//! # drop(server);
//! # }
//! ```
//!
//! Readings where the issue or JSON-RPC left a choice:
//! - A line that does not start with `{` or `[` (e.g. a server logging to stdout) gets a
//!   diagnostic and **no** reply; a line that starts like JSON but does not parse gets a
//!   diagnostic and a `-32700` reply with `"id": null`, as JSON-RPC 2.0 asks.
//! - JSON that is not a valid message is answered `-32600` only when it has both a readable
//!   id and a `method` member (a request gone wrong); without an id it is skipped with a
//!   diagnostic (like a non-`"2.0"` line). Inside a batch every invalid request-like entry
//!   (or non-object) is answered, with `"id": null` when no id is readable, as JSON-RPC 2.0
//!   asks. A malformed *response* is never answered (that could loop), but if its id matches
//!   a pending request, that request fails at once with [`PeerError::InvalidResponse`]
//!   instead of waiting for its timeout.
//! - A batch of more than [`PeerConfig::max_batch_entries`] entries is answered with one
//!   `-32600` error (`"id": null`, `data: { limit, count }`) and a
//!   [`Diagnostic::BatchTooLarge`]; none of its entries is handled (answering each would cost
//!   memory and a reply proportional to what the other side chose to send).
//! - Whitespace-only lines are skipped (logged at `trace`), not reported.
//! - Inbound backpressure: while the [`Incoming`] queue is full the reader stops reading, so
//!   responses to this side's own requests wait too. Drain `Incoming` (or use
//!   [`Incoming::serve`]) concurrently with awaiting requests.
//! - The idle timeout counts traffic in both directions: it runs out once no frame was read
//!   and none written in full for [`PeerConfig::idle_timeout`]. Its own timer keeps it, so it
//!   runs out wherever the connection is stuck: the reader waiting for a frame, or blocked
//!   sending replies (e.g. `-32700` to a flood of junk) to a side that never reads them
//!   (without a write timeout), or waiting for the application to make room in [`Incoming`].
//!   After EOF it no longer applies (the drain of owed responses has its own bound).
//! - Outgoing frames: a sender whose frame the transport takes without waiting, with nothing
//!   queued ahead of it, writes the frame itself (no writer-task wake-up); otherwise the frame
//!   waits in the bounded outgoing queue for the writer task. Each sender's frames keep their
//!   order either way, and the tap sees frames in wire order.
//! - EOF from the other side fails this side's pending requests at once (nobody can answer
//!   them), but the connection stays open for writing until every request already received
//!   is answered (bounded by the write timeout, else 5 s), so `printf '<request>\n' | server`
//!   still gets its response.
//! - A request this side stops waiting for (timeout, or its future dropped) is cancelled
//!   with MCP's `notifications/cancelled` `{ requestId, reason }` ([`PeerConfig::cancel_method`])
//!   and its id is remembered, so a response arriving afterwards is a
//!   [`Diagnostic::LateResponse`] rather than an unknown one.
//! - Dropping the last [`Peer`] handle closes the connection; holding only [`Incoming`] does
//!   not keep it open (handlers that need to send keep a `Peer` clone).
//! - On close, frames already queued (e.g. final responses) are still written, each within
//!   the write timeout (or 5 s without one), then the transport is shut down; for a child
//!   process that closes its stdin (see [`crate::transport::child`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch, Notify, Semaphore};
use tokio::time::Instant;

use crate::jsonrpc::{
    ErrorObject, InvalidMessage, Message, Notification, Request, RequestId, Response,
};
use crate::protocol::Method;
use crate::transport::{
    Frame, FrameReader, FrameWriter, Transport, TrySend, DEFAULT_MAX_MESSAGE_SIZE,
};

/// Whether a tapped frame was received or sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDirection {
    /// Received from the other side.
    Inbound,
    /// Sent to the other side.
    Outbound,
}

/// One frame seen by the message tap.
#[derive(Debug, Clone, Copy)]
pub struct TapEvent<'a> {
    /// Received or sent.
    pub direction: FrameDirection,
    /// When it was read or just before it was written.
    pub at: SystemTime,
    /// The frame text as on the wire (without the line terminator).
    pub text: &'a str,
}

/// A callback receiving every text frame in and out, e.g. to log a transcript. It runs on the
/// connection's reader or writer task, so it must be quick.
#[derive(Clone)]
pub struct Tap(Arc<dyn Fn(TapEvent<'_>) + Send + Sync>);

impl Tap {
    /// Wraps a callback.
    pub fn new(f: impl Fn(TapEvent<'_>) + Send + Sync + 'static) -> Tap {
        Tap(Arc::new(f))
    }
}

impl fmt::Debug for Tap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tap(..)")
    }
}

/// Limits and timeouts of a connection. `PeerConfig::default()` is a sensible start.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Default timeout of each outgoing request (30 s); `None` waits forever.
    pub request_timeout: Option<Duration>,
    /// Largest message accepted, in bytes (16 MiB).
    pub max_message_size: usize,
    /// Capacity of the incoming queue (64); when full, the transport is not read.
    pub incoming_capacity: usize,
    /// Capacity of the outgoing frame queue (64); when full, senders wait.
    pub outgoing_capacity: usize,
    /// Most outgoing requests awaiting a response at once (1024); more fail at once.
    pub max_pending_requests: usize,
    /// A write taking longer than this closes the connection (the other side stopped
    /// reading). `None` (default) waits forever.
    pub write_timeout: Option<Duration>,
    /// No traffic in either direction (no frame read, none written in full) for this long
    /// closes the connection, wherever the reader or writer is blocked. `None` (default)
    /// never does.
    pub idle_timeout: Option<Duration>,
    /// Capacity of the diagnostics stream (256); overflow is counted, not buffered.
    pub diagnostics_capacity: usize,
    /// How many recently timed-out or cancelled request ids are remembered to recognise late
    /// responses (1024).
    pub remembered_timeouts: usize,
    /// The notification sent when a request times out or its future is dropped, with params
    /// `{ requestId, reason }`: MCP's `notifications/cancelled` by default (MCP asks senders
    /// to cancel what they stop waiting for). `None` sends nothing.
    pub cancel_method: Option<&'static str>,
    /// Receives every frame in and out.
    pub tap: Option<Tap>,
    /// Most entries accepted in one JSON-RPC batch (1024). A bigger batch is answered with
    /// one `-32600` error (`"id": null`, `data: { limit, count }`) and none of its entries
    /// is handled; its entries past the limit are only counted, never kept.
    pub max_batch_entries: usize,
    /// Most incoming requests in flight at once (128): delivered to [`Incoming`] and not yet
    /// answered, their answers included until each is queued for writing. A request past it
    /// is not delivered: it is answered at once with [`crate::jsonrpc::codes::BUSY`] (`-32000`,
    /// `data: { limit }`) and a [`Diagnostic::Busy`]. Together with the bounded queues this
    /// bounds the work and the answers one connection can hold, whether its peer floods
    /// requests or stops reading. Requests taken over with [`IncomingRequest::into_id`] no
    /// longer count.
    pub max_in_flight_requests: usize,
    /// The budget this connection's partial messages are taken from, shared with every
    /// connection given the same one (see [`crate::transport::budget`]). `None` (default)
    /// keeps the transport's: [`MessageBudget::process`](crate::transport::MessageBudget::process)
    /// (256 MiB for the whole process, [`crate::transport::DEFAULT_MESSAGE_BUDGET`]) unless
    /// the listener set another (`ListenConfig::message_budget`). Past it a partial message
    /// is refused, answered `-32000` (`id: null`, `data: { limit, reason:
    /// "message_budget" }`) with a [`Diagnostic::OverBudget`], and discarded unread; the
    /// first [`crate::transport::UNBUDGETED_BYTES`] of each message are outside the budget.
    pub message_budget: Option<crate::transport::MessageBudget>,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            request_timeout: Some(Duration::from_secs(30)),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            incoming_capacity: 64,
            outgoing_capacity: 64,
            max_pending_requests: 1024,
            write_timeout: None,
            idle_timeout: None,
            diagnostics_capacity: 256,
            remembered_timeouts: 1024,
            cancel_method: Some("notifications/cancelled"),
            tap: None,
            max_batch_entries: DEFAULT_MAX_BATCH_ENTRIES,
            max_in_flight_requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            message_budget: None,
        }
    }
}

/// The default [`PeerConfig::max_in_flight_requests`].
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 128;

/// The default [`PeerConfig::max_batch_entries`].
pub const DEFAULT_MAX_BATCH_ENTRIES: usize = 1024;

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The other side ended the stream (EOF, WebSocket close, child exit).
    Eof,
    /// [`Peer::close`] was called.
    Local,
    /// Every [`Peer`] handle was dropped.
    Dropped,
    /// Reading or writing failed.
    Io(String),
    /// A write did not complete within [`PeerConfig::write_timeout`].
    WriteTimeout(Duration),
    /// No traffic within [`PeerConfig::idle_timeout`].
    IdleTimeout(Duration),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Eof => f.write_str("the other side ended the connection"),
            CloseReason::Local => f.write_str("closed locally"),
            CloseReason::Dropped => f.write_str("every peer handle was dropped"),
            CloseReason::Io(e) => write!(f, "I/O error: {e}"),
            CloseReason::WriteTimeout(d) => write!(f, "a write did not complete within {d:?}"),
            CloseReason::IdleTimeout(d) => write!(f, "no traffic for {d:?}"),
        }
    }
}

/// Why an outgoing request or notification failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeerError {
    /// The connection is closed (or closed while waiting).
    #[error("the connection is closed ({0}); reconnect to send more")]
    Closed(CloseReason),
    /// No response arrived in time; a late response is reported as a diagnostic.
    #[error("request {method} (id {id}) got no response within {after:?}; the peer may be stuck, or raise the timeout (PeerConfig::request_timeout or the call's own)")]
    Timeout {
        /// The method of the request.
        method: String,
        /// The id it was sent with.
        id: RequestId,
        /// The timeout in force.
        after: Duration,
    },
    /// The other side answered with an error object (kept verbatim, `data` included).
    #[error(transparent)]
    Remote(ErrorObject),
    /// [`PeerConfig::max_pending_requests`] requests are already awaiting responses.
    #[error("{limit} requests are already awaiting responses (PeerConfig::max_pending_requests); wait for some to finish, or raise the limit")]
    TooManyPending {
        /// The limit in force.
        limit: usize,
    },
    /// The params could not be serialised.
    #[error("the params of {method} cannot be encoded as JSON: {reason}")]
    Encode {
        /// The method.
        method: String,
        /// The serde error.
        reason: String,
    },
    /// The result did not match the method's result type.
    #[error("the result of {method} does not have the shape the method defines: {reason}; the peer answered outside the spec")]
    Decode {
        /// The method.
        method: String,
        /// The serde error.
        reason: String,
    },
    /// The other side answered with a response that is not valid JSON-RPC.
    #[error("the peer sent a response that is not valid JSON-RPC 2.0: {0}")]
    InvalidResponse(String),
}

impl PeerError {
    /// The remote error object, if the other side answered with one.
    pub fn remote(&self) -> Option<&ErrorObject> {
        match self {
            PeerError::Remote(e) => Some(e),
            _ => None,
        }
    }
}

/// A defect of the other side or of the connection, never fatal, reported on the
/// diagnostics stream and through `tracing`.
#[derive(Debug, Clone, PartialEq)]
pub enum Diagnostic {
    /// A line that is not JSON at all (e.g. log output); skipped without a reply.
    JunkLine {
        /// The start of the line.
        excerpt: String,
    },
    /// A frame that looked like JSON but did not parse; answered `-32700`.
    ParseError {
        /// The parser's message.
        error: String,
    },
    /// A frame larger than the limit, discarded.
    Oversized {
        /// Bytes discarded.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A frame that is not text (bad UTF-8, binary WebSocket frame), discarded.
    NotText {
        /// Why.
        reason: String,
    },
    /// JSON that is not a valid JSON-RPC 2.0 message; answered `-32600` if it was a request
    /// with an id.
    InvalidMessage {
        /// Its id, if one could be read.
        id: Option<RequestId>,
        /// What was wrong.
        reason: String,
        /// Whether a `-32600` reply was sent.
        answered: bool,
    },
    /// An empty JSON array (invalid batch); answered `-32600`.
    EmptyBatch,
    /// A batch of more entries than [`PeerConfig::max_batch_entries`]; answered with one
    /// `-32600` error, none of its entries handled.
    BatchTooLarge {
        /// How many entries it had.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A request arrived while [`PeerConfig::max_in_flight_requests`] were in flight; it was
    /// answered `-32000` ([`crate::jsonrpc::codes::BUSY`]) and not delivered.
    Busy {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// The limit.
        limit: usize,
    },
    /// A partial message refused because the shared
    /// [`MessageBudget`](crate::transport::MessageBudget) could not cover it
    /// ([`PeerConfig::message_budget`]); answered `-32000` with `id: null` and
    /// `data: { limit, reason: "message_budget" }`, the rest of it discarded unread (over
    /// WebSocket the connection then ends).
    OverBudget {
        /// Bytes of it read when it was refused.
        bytes: usize,
        /// The budget's size.
        limit: usize,
    },
    /// A response for a request that had already timed out or been cancelled; dropped.
    LateResponse {
        /// Its id.
        id: RequestId,
    },
    /// A response whose id matches no request this side sent; dropped.
    UnknownResponse {
        /// Its id (`None` for `"id": null`).
        id: Option<RequestId>,
        /// The error it carried, if it was an error response.
        error: Option<ErrorObject>,
    },
    /// A notification arrived while nobody was receiving incoming messages.
    UnhandledNotification {
        /// Its method.
        method: String,
    },
    /// This many diagnostics were lost because the stream's reader fell behind.
    Dropped {
        /// How many.
        count: u64,
    },
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Diagnostic::JunkLine { excerpt } => write!(f, "skipped a non-JSON line: {excerpt:?}"),
            Diagnostic::ParseError { error } => write!(f, "unparseable JSON: {error}"),
            Diagnostic::Oversized { bytes, limit } => {
                write!(f, "discarded a {bytes}-byte message (limit {limit})")
            }
            Diagnostic::NotText { reason } => write!(f, "discarded a frame: {reason}"),
            Diagnostic::InvalidMessage {
                id,
                reason,
                answered,
            } => {
                write!(f, "invalid message")?;
                if let Some(id) = id {
                    write!(f, " (id {id})")?;
                }
                write!(f, ": {reason}")?;
                if *answered {
                    write!(f, "; answered -32600")?;
                }
                Ok(())
            }
            Diagnostic::EmptyBatch => f.write_str("empty batch; answered -32600"),
            Diagnostic::BatchTooLarge { count, limit } => write!(
                f,
                "batch of {count} entries over the limit of {limit}; answered -32600, entries not handled"
            ),
            Diagnostic::Busy { id, method, limit } => write!(
                f,
                "request {id} ({method}) refused -32000: {limit} requests already in flight"
            ),
            Diagnostic::OverBudget { bytes, limit } => write!(
                f,
                "refused a partial message after {bytes} bytes: the {limit}-byte budget for \
                 buffered partial messages is exhausted; answered -32000"
            ),
            Diagnostic::LateResponse { id } => {
                write!(f, "dropped a late response to timed-out request {id}")
            }
            Diagnostic::UnknownResponse { id: Some(id), .. } => {
                write!(f, "dropped a response to unknown request {id}")
            }
            Diagnostic::UnknownResponse { id: None, error } => match error {
                Some(e) => write!(f, "the other side reported an error without id: {e}"),
                None => f.write_str("dropped a response with a null id"),
            },
            Diagnostic::UnhandledNotification { method } => {
                write!(f, "notification {method} arrived with nobody receiving")
            }
            Diagnostic::Dropped { count } => write!(f, "{count} diagnostics were dropped"),
        }
    }
}

/// The bounded stream of [`Diagnostic`]s of one connection. Falling behind loses the oldest
/// entries and yields one [`Diagnostic::Dropped`] with their count.
#[derive(Debug)]
pub struct Diagnostics {
    rx: broadcast::Receiver<Diagnostic>,
}

impl Diagnostics {
    /// The next diagnostic; `None` once the connection has ended and all were read.
    pub async fn recv(&mut self) -> Option<Diagnostic> {
        match self.rx.recv().await {
            Ok(d) => Some(d),
            Err(broadcast::error::RecvError::Lagged(count)) => Some(Diagnostic::Dropped { count }),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// A diagnostic if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Diagnostic> {
        match self.rx.try_recv() {
            Ok(d) => Some(d),
            Err(broadcast::error::TryRecvError::Lagged(count)) => {
                Some(Diagnostic::Dropped { count })
            }
            Err(_) => None,
        }
    }
}

type PendingSender = oneshot::Sender<Result<Value, PeerError>>;

struct Shared {
    config: PeerConfig,
    /// Frames for the writer task. An empty string is not a frame but a reminder to finish
    /// a message the transport took only in part ([`TrySend::Partial`]).
    out: mpsc::Sender<String>,
    /// The transport's writer while the writer task is not using it ([`Shared::send_now`]).
    slot: Mutex<WriterSlot>,
    /// Messages delivered to [`Incoming`] and not yet received from it.
    inbox: AtomicUsize,
    pending: Mutex<HashMap<RequestId, PendingSender>>,
    timed_out: Mutex<VecDeque<RequestId>>,
    next_id: AtomicU64,
    /// Frames sent from `Drop` that found the queue full and wait in their own task.
    detached: AtomicUsize,
    /// Signalled each time one of those frames has been queued.
    detached_done: Notify,
    closed: watch::Sender<Option<CloseReason>>,
    /// Set once `closed` holds a reason: the hot paths' check, without the watch's lock.
    is_closed: std::sync::atomic::AtomicBool,
    /// Created at the first diagnostic or the first [`Peer::diagnostics`] call, so an idle
    /// connection holds no slots (the channel allocates its capacity up front).
    diagnostics: std::sync::OnceLock<broadcast::Sender<Diagnostic>>,
    /// The receiver made with the channel, for the first [`Peer::diagnostics`] call.
    first_diagnostics: Mutex<Option<broadcast::Receiver<Diagnostic>>>,
    last_activity: Mutex<Instant>,
    /// How many incoming requests are delivered but not yet answered (their responses are
    /// owed). At EOF the connection stays open for writing until this reaches zero.
    owed: AtomicUsize,
    /// Signalled when `owed` drops to zero after EOF (the only time anyone waits for it).
    owed_settled: Notify,
    /// Set once the other side ended its stream: no response can arrive any more.
    read_eof: std::sync::atomic::AtomicBool,
    /// How many frames have been read so far: the wire position of the frame being handled.
    frames_read: AtomicU64,
    /// Requests whose response position is wanted ([`Peer::request_raw_marked`]).
    settle_marks: Mutex<HashMap<RequestId, Arc<AtomicU64>>>,
    /// `true` once the writer task has written what was queued and shut the transport down.
    finished: watch::Sender<bool>,
}

/// Where the transport's writer rests between writes. A sender that finds it here, with no
/// frame queued ahead, writes its frame itself if the transport takes it without waiting:
/// no writer-task wake-up on the common path. Frame order is kept because `queued` counts
/// every frame between "decided to queue" and "written", under the same lock.
struct WriterSlot {
    /// `None` while the writer task writes, and for good once it has shut down.
    writer: Option<Box<dyn FrameWriter>>,
    /// Frames (and reminders) committed to the queue and not yet written.
    queued: usize,
}

/// Undoes a `queued` count if the frame never reached the queue (the sender's future was
/// dropped while the queue was full, or the queue closed).
struct QueuedFrame<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for QueuedFrame<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut slot = lock(&self.shared.slot);
            slot.queued = slot.queued.saturating_sub(1);
        }
    }
}

/// One owed response: counted while alive, released once the response is queued.
struct Owed(Arc<Shared>);

impl Owed {
    fn new(shared: &Arc<Shared>) -> Owed {
        shared.owed.fetch_add(1, Ordering::SeqCst);
        Owed(shared.clone())
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        let before = self.0.owed.fetch_sub(1, Ordering::SeqCst);
        // Paired with the EOF drain: it sets `read_eof` before reading `owed`, this reads
        // `read_eof` after writing `owed`, so one of the two sees the other.
        if before == 1 && self.0.read_eof.load(Ordering::SeqCst) {
            self.0.owed_settled.notify_waiters();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn close(&self, reason: CloseReason) {
        let first = self.closed.send_if_modified(|state| {
            if state.is_none() {
                *state = Some(reason.clone());
                true
            } else {
                false
            }
        });
        self.is_closed.store(true, Ordering::Release);
        if first {
            tracing::debug!("connection closed: {reason}");
        }
        let reason = self.close_reason().unwrap_or(reason);
        self.fail_pending(reason);
    }

    /// Fails every request this side is waiting on.
    fn fail_pending(&self, reason: CloseReason) {
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(PeerError::Closed(reason.clone())));
        }
    }

    fn close_reason(&self) -> Option<CloseReason> {
        // The flag is set after the reason, so an open connection costs one atomic load.
        if !self.is_closed.load(Ordering::Acquire) {
            return None;
        }
        self.closed.borrow().clone()
    }

    fn diagnose(&self, d: Diagnostic) {
        tracing::warn!(target: "mcpl::peer", "{d}");
        let _ = self.diagnostic_sender().send(d);
    }

    /// The diagnostics channel, created on first use with a receiver kept for the first
    /// [`Peer::diagnostics`] call (which thereby sees every diagnostic since the start).
    fn diagnostic_sender(&self) -> &broadcast::Sender<Diagnostic> {
        self.diagnostics.get_or_init(|| {
            let (tx, rx) = broadcast::channel(self.config.diagnostics_capacity.max(1));
            *lock(&self.first_diagnostics) = Some(rx);
            tx
        })
    }

    /// Records traffic for the idle timeout (nothing to record without one).
    fn touch(&self) {
        if self.config.idle_timeout.is_some() {
            *lock(&self.last_activity) = Instant::now();
        }
    }

    /// The fast path of every send: with the writer at rest and nothing queued ahead, the
    /// frame is written right here if the transport takes it without waiting. Returns the
    /// frame back when it must be queued instead; a write error closes the connection.
    fn send_now(&self, text: String) -> Result<Option<String>, PeerError> {
        // A burst is under way (requests in flight besides at most the sender's own, or
        // received messages still waiting to be handled, whose answers will follow): queue,
        // so the writer task puts many frames in one write. Writing each frame directly
        // would cost one write (a syscall on sockets) per frame.
        let quiet = self.inbox.load(Ordering::Relaxed) == 0 && lock(&self.pending).len() <= 1;
        let mut slot = lock(&self.slot);
        if !quiet || slot.queued > 0 {
            slot.queued += 1;
            return Ok(Some(text));
        }
        let Some(writer) = slot.writer.as_mut() else {
            slot.queued += 1;
            return Ok(Some(text));
        };
        match writer.try_send_now(&text) {
            Ok(taken @ (TrySend::Written | TrySend::Partial)) => {
                if taken == TrySend::Partial {
                    // The rest goes before anything else: the writer task is reminded while
                    // the lock still keeps every other sender behind it (the queue is empty,
                    // so there is room).
                    slot.queued += 1;
                    if self.out.try_send(String::new()).is_err() {
                        slot.queued -= 1;
                    }
                }
                // Tapped under the lock, so taps keep the order of the wire.
                self.tap(FrameDirection::Outbound, &text);
                drop(slot);
                self.touch();
                Ok(None)
            }
            Ok(TrySend::NotTaken) => {
                slot.queued += 1;
                Ok(Some(text))
            }
            Err(e) => {
                drop(slot);
                let reason = CloseReason::Io(e.to_string());
                self.close(reason.clone());
                Err(PeerError::Closed(self.close_reason().unwrap_or(reason)))
            }
        }
    }

    fn tap(&self, direction: FrameDirection, text: &str) {
        if let Some(tap) = &self.config.tap {
            (tap.0)(TapEvent {
                direction,
                at: SystemTime::now(),
                text,
            });
        }
    }

    async fn send_frame(&self, text: String) -> Result<(), PeerError> {
        if let Some(reason) = self.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        let Some(text) = self.send_now(text)? else {
            return Ok(());
        };
        let mut queued = QueuedFrame {
            shared: self,
            armed: true,
        };
        // Room in the queue: no need to watch for a close while waiting.
        let text = match self.out.try_send(text) {
            Ok(()) => {
                queued.armed = false;
                return Ok(());
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(PeerError::Closed(
                    self.close_reason().unwrap_or(CloseReason::Dropped),
                ))
            }
            Err(mpsc::error::TrySendError::Full(text)) => text,
        };
        let mut closed = self.closed.subscribe();
        let closed_error =
            |s: &Self| PeerError::Closed(s.close_reason().unwrap_or(CloseReason::Dropped));
        // A full queue in front of a stuck writer must not hold the sender past a close.
        let sent = tokio::select! {
            r = self.out.send(text) => r.map_err(|_| closed_error(self)),
            _ = until_closed(&mut closed) => Err(closed_error(self)),
        };
        queued.armed = sent.is_err();
        sent
    }

    /// Sends without waiting (from `Drop`): directly if there is room, else from a task.
    /// `owed`, if any, is released only once the frame is queued.
    /// Such tasks are counted; the reader stops reading while `outgoing_capacity` of them
    /// wait ([`Shared::detached_backlog_clear`]), so a flood of requests answered from `Drop`
    /// (declined methods, §6.6) cannot pile up answers without bound.
    fn send_frame_detached(self: &Arc<Self>, text: String, owed: Option<Owed>) {
        let text = match self.send_now(text) {
            Ok(Some(text)) => text,
            Ok(None) | Err(_) => return,
        };
        let mut queued = QueuedFrame {
            shared: self,
            armed: true,
        };
        match self.out.try_send(text) {
            Ok(()) => queued.armed = false,
            Err(mpsc::error::TrySendError::Full(text)) => {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    // The task owns the count from here.
                    queued.armed = false;
                    let shared = self.clone();
                    self.detached.fetch_add(1, Ordering::AcqRel);
                    handle.spawn(async move {
                        if shared.out.send(text).await.is_err() {
                            let mut slot = lock(&shared.slot);
                            slot.queued = slot.queued.saturating_sub(1);
                        }
                        shared.detached.fetch_sub(1, Ordering::AcqRel);
                        shared.detached_done.notify_waiters();
                        drop(owed);
                    });
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// One delivered message left the inbox (received, or never enqueued). Saturating: the
    /// count is reset when [`Incoming`] is dropped.
    fn inbox_taken(&self) {
        let _ = self
            .inbox
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// Waits until every owed response is queued (after EOF; `read_eof` is set first).
    async fn owed_settled(&self) {
        loop {
            let notified = self.owed_settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.owed.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Waits until fewer than `outgoing_capacity` detached frames are waiting for the queue.
    async fn detached_backlog_clear(&self) {
        let limit = self.config.outgoing_capacity.max(1);
        if self.detached.load(Ordering::Acquire) < limit {
            return;
        }
        loop {
            let notified = self.detached_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.detached.load(Ordering::Acquire) < limit {
                return;
            }
            notified.await;
        }
    }

    /// A request this side no longer awaits (timed out or cancelled): remember its id so a
    /// late response is recognised, and send the cancellation notification if configured.
    fn abandon(self: &Arc<Self>, id: RequestId, reason: &str) {
        self.remember_abandoned(id.clone());
        if self.close_reason().is_some() {
            return;
        }
        if let Some(method) = self.config.cancel_method {
            let text = Message::Notification(Notification {
                method: method.to_owned(),
                params: Some(serde_json::json!({ "requestId": id.to_value(), "reason": reason })),
            })
            .to_json();
            self.send_frame_detached(text, None);
        }
    }

    fn remember_abandoned(&self, id: RequestId) {
        let mut q = lock(&self.timed_out);
        if self.config.remembered_timeouts == 0 {
            return;
        }
        if q.len() >= self.config.remembered_timeouts {
            q.pop_front();
        }
        q.push_back(id);
    }
}

/// Closes the connection when the last user-facing handle goes away.
struct HandleOwner {
    shared: Arc<Shared>,
}

impl Drop for HandleOwner {
    fn drop(&mut self) {
        self.shared.close(CloseReason::Dropped);
    }
}

/// A cloneable handle to one connection: sends requests and notifications, answers by id,
/// closes. Dropping the last handle closes the connection.
#[derive(Clone)]
pub struct Peer {
    owner: Arc<HandleOwner>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("closed", &self.owner.shared.close_reason())
            .finish_non_exhaustive()
    }
}

/// Removes a pending entry if the request future is dropped before its response arrives,
/// and tells the other side the request was cancelled.
struct PendingGuard<'a> {
    shared: &'a Arc<Shared>,
    id: Option<RequestId>,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            lock(&self.shared.settle_marks).remove(&id);
            if lock(&self.shared.pending).remove(&id).is_some() {
                self.shared.abandon(id, "the caller stopped waiting");
            }
        }
    }
}

fn encode_params<P: Serialize>(method: &str, params: &P) -> Result<Option<Value>, PeerError> {
    let v = serde_json::to_value(params).map_err(|e| PeerError::Encode {
        method: method.to_owned(),
        reason: e.to_string(),
    })?;
    // `()` and `None` params are sent without a `params` member.
    Ok(if v.is_null() { None } else { Some(v) })
}

impl Peer {
    /// Starts a connection over `transport`: spawns its reader and writer tasks (so it must be
    /// called inside a tokio runtime) and returns the handle and the incoming receiver.
    pub fn new(transport: Transport, config: PeerConfig) -> (Peer, Incoming) {
        let Transport {
            mut reader,
            writer,
            guard,
            description,
        } = transport;
        reader.set_max_message_size(config.max_message_size);
        if let Some(budget) = &config.message_budget {
            reader.set_message_budget(budget.clone());
        }
        let (out_tx, out_rx) = mpsc::channel(config.outgoing_capacity.max(1));
        let (in_tx, in_rx) = mpsc::channel(config.incoming_capacity.max(1));
        let (closed_tx, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            config,
            out: out_tx,
            slot: Mutex::new(WriterSlot {
                writer: Some(writer),
                queued: 0,
            }),
            inbox: AtomicUsize::new(0),
            pending: Mutex::new(HashMap::new()),
            timed_out: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(1),
            detached: AtomicUsize::new(0),
            detached_done: Notify::new(),
            closed: closed_tx,
            is_closed: std::sync::atomic::AtomicBool::new(false),
            diagnostics: std::sync::OnceLock::new(),
            first_diagnostics: Mutex::new(None),
            last_activity: Mutex::new(Instant::now()),
            owed: AtomicUsize::new(0),
            owed_settled: Notify::new(),
            read_eof: std::sync::atomic::AtomicBool::new(false),
            frames_read: AtomicU64::new(0),
            settle_marks: Mutex::new(HashMap::new()),
            finished: watch::channel(false).0,
        });
        tracing::debug!("connection opened over {description}");
        tokio::spawn(reader_task(shared.clone(), reader, in_tx));
        tokio::spawn(writer_task(shared.clone(), out_rx, guard));
        if let Some(idle) = shared.config.idle_timeout {
            tokio::spawn(idle_watchdog(shared.clone(), idle));
        }
        let peer = Peer {
            owner: Arc::new(HandleOwner {
                shared: shared.clone(),
            }),
        };
        (
            peer,
            Incoming {
                rx: in_rx,
                shared,
                last_seq: 0,
            },
        )
    }

    /// Two connected peers over an in-memory pipe (real framing), for tests.
    pub fn memory_pair(config: PeerConfig) -> ((Peer, Incoming), (Peer, Incoming)) {
        let (a, b) = crate::transport::memory::pair();
        (Peer::new(a, config.clone()), Peer::new(b, config))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// Sends a typed request and decodes its result, with the default timeout.
    pub async fn request<M: Method>(&self, params: &M::Params) -> Result<M::Result, PeerError> {
        let timeout = self.shared().config.request_timeout;
        self.request_typed::<M>(params, timeout).await
    }

    /// Sends a typed request with its own timeout.
    pub async fn request_timeout<M: Method>(
        &self,
        params: &M::Params,
        timeout: Duration,
    ) -> Result<M::Result, PeerError> {
        self.request_typed::<M>(params, Some(timeout)).await
    }

    async fn request_typed<M: Method>(
        &self,
        params: &M::Params,
        timeout: Option<Duration>,
    ) -> Result<M::Result, PeerError> {
        let params = encode_params(M::NAME, params)?;
        let value = self.call(M::NAME, params, timeout).await?;
        serde_json::from_value(value).map_err(|e| PeerError::Decode {
            method: M::NAME.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Sends a request by method name; `params: None` omits the member. Default timeout.
    pub async fn request_raw(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, PeerError> {
        let timeout = self.shared().config.request_timeout;
        self.call(method, params, timeout).await
    }

    /// Sends a request by method name with its own timeout.
    pub async fn request_raw_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, PeerError> {
        self.call(method, params, Some(timeout)).await
    }

    /// Sends a request by method name with the default timeout, calling `on_id` with the id
    /// it is sent under just before the frame goes out (e.g. to route `inference/chunk`
    /// notifications, which name the request by id, §11.4). `on_id` is not called when the
    /// request fails before an id is assigned.
    pub async fn request_raw_with_id(
        &self,
        method: &str,
        params: Option<Value>,
        on_id: impl FnOnce(&RequestId) + Send,
    ) -> Result<Value, PeerError> {
        let timeout = self.shared().config.request_timeout;
        self.call_observed(method, params, timeout, Some(Box::new(on_id)))
            .await
    }

    /// Sends a request like [`Peer::request_raw_timeout`] and, when its response is read,
    /// stores that frame's wire position ([`IncomingRequest::seq`] numbering) in `mark`
    /// before the next frame is read. A session uses it to order a response against the
    /// requests around it on the wire (e.g. a privileged request sent right after a policy
    /// receipt, §5.3). `mark` stays untouched when no response arrives.
    pub async fn request_raw_marked(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
        mark: Arc<AtomicU64>,
    ) -> Result<Value, PeerError> {
        let shared = self.shared().clone();
        let on_id = move |id: &RequestId| {
            lock(&shared.settle_marks).insert(id.clone(), mark);
        };
        self.call_observed(method, params, Some(timeout), Some(Box::new(on_id)))
            .await
    }

    async fn call(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Option<Duration>,
    ) -> Result<Value, PeerError> {
        self.call_observed(method, params, timeout, None).await
    }

    async fn call_observed(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Option<Duration>,
        on_id: Option<OnId<'_>>,
    ) -> Result<Value, PeerError> {
        let shared = self.shared();
        if let Some(reason) = shared.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        let id = RequestId::from(shared.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&shared.pending);
            let limit = shared.config.max_pending_requests;
            if pending.len() >= limit {
                return Err(PeerError::TooManyPending { limit });
            }
            pending.insert(id.clone(), tx);
        }
        let mut guard = PendingGuard {
            shared,
            id: Some(id.clone()),
        };
        // A close between the check above and the insert must not strand this entry.
        if let Some(reason) = shared.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        // Nor may the other side's EOF: it can no longer answer.
        if shared.read_eof.load(Ordering::SeqCst) {
            return Err(PeerError::Closed(CloseReason::Eof));
        }
        if let Some(f) = on_id {
            f(&id);
        }
        let text = wire::request(&id, method, params.as_ref());
        let exchange = async {
            shared.send_frame(text).await?;
            match rx.await {
                Ok(r) => r,
                Err(_) => Err(PeerError::Closed(
                    shared.close_reason().unwrap_or(CloseReason::Dropped),
                )),
            }
        };
        let result = match timeout {
            None => exchange.await,
            Some(after) => match tokio::time::timeout(after, exchange).await {
                Ok(r) => r,
                Err(_) => {
                    guard.id = None;
                    lock(&shared.pending).remove(&id);
                    // A late response must not mark a position for a request nobody awaits.
                    lock(&shared.settle_marks).remove(&id);
                    shared.abandon(id.clone(), &format!("timed out after {after:?}"));
                    return Err(PeerError::Timeout {
                        method: method.to_owned(),
                        id,
                        after,
                    });
                }
            },
        };
        guard.id = None;
        if result.is_err() {
            // Closed or answered in error before `settle` saw it: no mark outlives the call.
            lock(&shared.settle_marks).remove(&id);
        }
        result
    }

    /// Sends a typed notification.
    pub async fn notify<M: Method>(&self, params: &M::Params) -> Result<(), PeerError> {
        let params = encode_params(M::NAME, params)?;
        self.notify_raw(M::NAME, params).await
    }

    /// Sends a notification by method name; `params: None` omits the member.
    pub async fn notify_raw(&self, method: &str, params: Option<Value>) -> Result<(), PeerError> {
        let text = wire::notification(method, params.as_ref());
        self.shared().send_frame(text).await
    }

    /// Answers request `id` with a result. Prefer [`IncomingRequest::respond`], which also
    /// disarms the request's guard; use this after [`IncomingRequest::into_id`].
    pub async fn respond(&self, id: RequestId, result: Value) -> Result<(), PeerError> {
        self.send_response(Some(id), Ok(result)).await
    }

    /// Answers request `id` with an error object.
    pub async fn respond_error(&self, id: RequestId, error: ErrorObject) -> Result<(), PeerError> {
        self.send_response(Some(id), Err(error)).await
    }

    async fn send_response(
        &self,
        id: Option<RequestId>,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), PeerError> {
        let text = wire::response(id.as_ref(), &outcome);
        self.shared().send_frame(text).await
    }

    /// A stream of this connection's diagnostics. The first call gets every diagnostic since
    /// the connection started (up to the capacity); later calls see only newer ones.
    pub fn diagnostics(&self) -> Diagnostics {
        let shared = self.shared();
        let sender = shared.diagnostic_sender();
        let rx = lock(&shared.first_diagnostics)
            .take()
            .unwrap_or_else(|| sender.subscribe());
        Diagnostics { rx }
    }

    /// Closes the connection: pending requests fail with [`PeerError::Closed`], frames already
    /// queued are still written, then the transport is shut down.
    pub fn close(&self) {
        self.shared().close(CloseReason::Local);
    }

    /// Whether the connection has ended, and why.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared().close_reason()
    }

    /// Waits until the connection has ended and returns why.
    pub async fn closed(&self) -> CloseReason {
        wait_closed(self.shared()).await
    }

    /// Waits until the connection has ended *and* everything queued before the end has been
    /// written and the transport shut down (each frame bounded by the write timeout, or 5 s).
    /// A process that exits once its only connection ends awaits this, not [`Self::closed`],
    /// so the responses it owed are not cut off (e.g. on stdio after the host closes stdin).
    pub async fn finished(&self) -> CloseReason {
        let reason = self.closed().await;
        let mut done = self.shared().finished.subscribe();
        // Err: the writer task is gone, which also means nothing more will be written.
        let _ = done.wait_for(|d| *d).await;
        reason
    }

    /// How many incoming requests are in flight: delivered and not yet answered (see
    /// [`PeerConfig::max_in_flight_requests`]).
    pub fn requests_in_flight(&self) -> usize {
        self.shared().owed.load(Ordering::SeqCst)
    }

    /// How many outgoing requests await a response.
    pub fn pending_requests(&self) -> usize {
        lock(&self.shared().pending).len()
    }

    /// How many frames have been read from the transport so far: the wire position in
    /// which [`IncomingRequest::seq`] and [`Incoming::last_seq`] count.
    pub fn frames_read(&self) -> u64 {
        self.shared().frames_read.load(Ordering::SeqCst)
    }
}

/// Resolves once the connection is closed (without holding the watch's read guard).
async fn until_closed(rx: &mut watch::Receiver<Option<CloseReason>>) {
    let _ = rx.wait_for(|c| c.is_some()).await;
}

/// Observer of the id an outgoing request is sent under.
type OnId<'a> = Box<dyn FnOnce(&RequestId) + Send + 'a>;

async fn wait_closed(shared: &Shared) -> CloseReason {
    let mut rx = shared.closed.subscribe();
    let r = rx.wait_for(|c| c.is_some()).await;
    match r.as_deref() {
        Ok(Some(reason)) => reason.clone(),
        _ => CloseReason::Dropped,
    }
}

/// One message from the other side that this side must handle.
#[derive(Debug)]
pub enum IncomingMessage {
    /// A request: answer it through the [`IncomingRequest`].
    Request(IncomingRequest),
    /// A notification: no answer.
    Notification(Notification),
}

impl IncomingMessage {
    /// The method name.
    pub fn method(&self) -> &str {
        match self {
            IncomingMessage::Request(r) => r.method(),
            IncomingMessage::Notification(n) => &n.method,
        }
    }
}

/// Collects the responses to the requests of one incoming batch and sends them as one array.
struct BatchCollector {
    state: Mutex<BatchState>,
}

struct BatchState {
    remaining: usize,
    responses: Vec<Value>,
}

impl BatchCollector {
    /// Records one response; returns the array text once every request is answered.
    fn add(&self, response: Value) -> Option<String> {
        let mut st = lock(&self.state);
        st.responses.push(response);
        st.remaining = st.remaining.saturating_sub(1);
        if st.remaining == 0 {
            Some(Value::Array(std::mem::take(&mut st.responses)).to_string())
        } else {
            None
        }
    }
}

/// An incoming request with its responder guard: answer exactly once; if dropped unanswered
/// it answers `-32601` (SPEC §6.6), or `-32603` if dropped by a panicking handler.
pub struct IncomingRequest {
    request: Request,
    shared: Arc<Shared>,
    batch: Option<Arc<BatchCollector>>,
    armed: bool,
    owed: Option<Owed>,
    seq: u64,
}

impl fmt::Debug for IncomingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncomingRequest")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl IncomingRequest {
    /// The request as received.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The method name.
    pub fn method(&self) -> &str {
        &self.request.method
    }

    /// The request id.
    pub fn id(&self) -> &RequestId {
        &self.request.id
    }

    /// The wire position of the frame that carried this request: frames read on this
    /// connection are numbered from 1 (see [`Peer::request_raw_marked`]).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether this is a request for method `M`.
    pub fn is<M: Method>(&self) -> bool {
        self.request.method == M::NAME
    }

    /// The params decoded as `P` (absent params read as `null`); a `-32602` error otherwise.
    pub fn params<P: DeserializeOwned>(&self) -> Result<P, ErrorObject> {
        crate::jsonrpc::params_of(self.request.params.as_ref())
    }

    /// The params decoded as method `M`'s params.
    pub fn typed_params<M: Method>(&self) -> Result<M::Params, ErrorObject> {
        self.params::<M::Params>()
    }

    /// Answers with a result (serialised; a serialisation failure answers `-32603`).
    pub async fn respond(mut self, result: impl Serialize) -> Result<(), PeerError> {
        if self.batch.is_none() {
            // Straight to text, without building a `Value` of the result first.
            if let Some(text) = wire::result_response(&self.request.id, &result) {
                self.armed = false;
                return self.shared.send_frame(text).await;
            }
        }
        let outcome = serde_json::to_value(result)
            .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}")));
        self.finish(outcome).await
    }

    /// Answers with an error object.
    pub async fn respond_error(self, error: ErrorObject) -> Result<(), PeerError> {
        self.finish(Err(error)).await
    }

    /// Answers with a result or an error object.
    pub async fn finish(mut self, outcome: Result<Value, ErrorObject>) -> Result<(), PeerError> {
        self.armed = false;
        match &self.batch {
            Some(batch) => {
                let response = Message::Response(Response {
                    id: Some(self.request.id.clone()),
                    outcome,
                });
                match batch.add(response.to_value()) {
                    Some(text) => self.shared.send_frame(text).await,
                    None => Ok(()),
                }
            }
            None => {
                let text = wire::response(Some(&self.request.id), &outcome);
                self.shared.send_frame(text).await
            }
        }
    }

    /// Disarms the guard and returns the id, for answering later with [`Peer::respond`].
    /// A request that arrived in a batch is handed back instead: its answer must go through
    /// [`IncomingRequest::finish`] so that the batch's single response array is completed.
    pub fn into_id(mut self) -> Result<RequestId, IncomingRequest> {
        if self.batch.is_some() {
            return Err(self);
        }
        self.armed = false;
        // Answered later through `Peer::respond`: no longer tracked for the EOF drain.
        self.owed = None;
        Ok(self.request.id.clone())
    }
}

impl Drop for IncomingRequest {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        // Dropped while unwinding: the handler failed, it did not decline the method.
        let error = if std::thread::panicking() {
            ErrorObject::internal("the handler failed")
        } else {
            ErrorObject::method_not_found(&self.request.method)
        };
        tracing::debug!(
            "request {} ({}) dropped unanswered; answering {}",
            self.request.id,
            self.request.method,
            error.code
        );
        let response = Message::Response(Response {
            id: Some(self.request.id.clone()),
            outcome: Err(error),
        });
        let text = match &self.batch {
            Some(batch) => batch.add(response.to_value()),
            None => Some(response.to_json()),
        };
        if let Some(text) = text {
            self.shared.send_frame_detached(text, self.owed.take());
        }
    }
}

/// The other side's requests and notifications, in arrival order. `recv` is cancel-safe, so
/// it can sit in `tokio::select!`. Dropping it makes every later request answer `-32601`.
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::Receiver<Delivered>,
    shared: Arc<Shared>,
    last_seq: u64,
}

/// One message in the incoming queue, with the wire position of the frame that carried it.
/// Boxed: the queue allocates a block of slots up front for every connection, so its slot is
/// kept small (two words, not a whole message) for an idle connection's memory (issue #20).
struct Delivered {
    seq: u64,
    msg: Box<IncomingMessage>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Whatever was waiting is dropped with the queue: nothing is waiting any more.
        self.shared.inbox.store(0, Ordering::Relaxed);
    }
}

impl Incoming {
    /// The next message; `None` once the connection has ended and the queue is drained.
    pub async fn recv(&mut self) -> Option<IncomingMessage> {
        let d = self.rx.recv().await?;
        self.shared.inbox_taken();
        self.last_seq = d.seq;
        Some(*d.msg)
    }

    /// The wire position of the frame that carried the message [`Incoming::recv`] returned
    /// last (0 before the first): notifications have no [`IncomingRequest::seq`] of their
    /// own, so a consumer that orders them against responses reads it here.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Runs `handler` on every incoming message, at most `concurrency` at once (each in its
    /// own task), until the connection ends. No extra queue: when all slots are busy, the
    /// bounded incoming queue fills and the transport stops being read.
    pub async fn serve<F, Fut>(mut self, concurrency: usize, handler: F)
    where
        F: Fn(IncomingMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let handler = Arc::new(handler);
        while let Some(msg) = self.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                handler(msg).await;
                drop(permit);
            });
        }
    }

    /// Waits until the connection has ended and returns why.
    pub async fn closed(&self) -> CloseReason {
        wait_closed(&self.shared).await
    }
}

async fn reader_task(
    shared: Arc<Shared>,
    mut reader: Box<dyn FrameReader>,
    inbound: mpsc::Sender<Delivered>,
) {
    let mut closed = shared.closed.subscribe();
    // One close watch for the whole loop, not one per frame.
    let mut closed_loop = shared.closed.subscribe();
    let stop = until_closed(&mut closed_loop);
    tokio::pin!(stop);
    loop {
        let frame = tokio::select! {
            biased;
            _ = &mut stop => break,
            f = async {
                // Answers sent from `Drop` are bounded like any other send: stop reading.
                shared.detached_backlog_clear().await;
                reader.next_frame().await
            } => f,
        };
        match frame {
            Ok(Some(frame)) => {
                shared.touch();
                shared.frames_read.fetch_add(1, Ordering::SeqCst);
                if !handle_frame(&shared, frame, &inbound, &mut closed).await {
                    break;
                }
            }
            Ok(None) => {
                // The other side sent everything it will send: our own requests can no
                // longer be answered, but the responses we owe are still written (bounded by
                // the write timeout or the drain limit) before the connection closes.
                shared.read_eof.store(true, Ordering::SeqCst);
                shared.fail_pending(CloseReason::Eof);
                // Nothing more will arrive: `Incoming` ends now, so an application that
                // answers once it has seen the end of the input is not cut off.
                drop(inbound);
                let drain = shared.config.write_timeout.unwrap_or(CLOSE_DRAIN_LIMIT);
                tokio::select! {
                    _ = tokio::time::timeout(drain, shared.owed_settled()) => {}
                    _ = until_closed(&mut closed) => {}
                }
                shared.close(CloseReason::Eof);
                break;
            }
            Err(e) => {
                shared.close(CloseReason::Io(e.to_string()));
                break;
            }
        }
    }
}

/// Closes the connection once no frame was read or written for `idle`. A task of its own,
/// so the deadline holds wherever the reader is blocked (waiting for a frame, or sending
/// replies to a side that does not read them); the reader stops at the close (its reads and
/// sends watch for it). Ends at the close, or at EOF (the drain has its own bound).
async fn idle_watchdog(shared: Arc<Shared>, idle: Duration) {
    let mut closed = shared.closed.subscribe();
    loop {
        let deadline = *lock(&shared.last_activity) + idle;
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = until_closed(&mut closed) => return,
        }
        if shared.read_eof.load(Ordering::SeqCst) {
            return;
        }
        if *lock(&shared.last_activity) + idle <= Instant::now() {
            shared.close(CloseReason::IdleTimeout(idle));
            return;
        }
    }
}

fn excerpt(text: &str) -> String {
    let mut end = text.len().min(80);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One dispatched item: a message for the application, or an immediate error reply.
enum Parsed {
    Deliver(IncomingMessage),
    Reply(Value),
}

/// Handles one frame; returns `false` when the connection closed while delivering.
async fn handle_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    inbound: &mpsc::Sender<Delivered>,
    closed: &mut watch::Receiver<Option<CloseReason>>,
) -> bool {
    let text = match frame {
        Frame::Text(t) => t,
        Frame::Oversized { bytes, limit } => {
            shared.diagnose(Diagnostic::Oversized { bytes, limit });
            return true;
        }
        Frame::NotText { reason } => {
            shared.diagnose(Diagnostic::NotText { reason });
            return true;
        }
        Frame::OverBudget { bytes, limit } => {
            shared.diagnose(Diagnostic::OverBudget { bytes, limit });
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(ErrorObject::new(
                    crate::jsonrpc::codes::BUSY,
                    format!(
                        "Busy: the budget of {limit} bytes for buffered partial messages is \
                         exhausted; a message was refused after {bytes} bytes, unread"
                    ),
                )
                .with_data(serde_json::json!({ "limit": limit, "reason": "message_budget" }))),
            });
            let _ = shared.send_frame(reply.to_json()).await;
            return true;
        }
    };
    shared.tap(FrameDirection::Inbound, &text);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        tracing::trace!("skipped a blank line");
        return true;
    }
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        shared.diagnose(Diagnostic::JunkLine {
            excerpt: excerpt(trimmed),
        });
        return true;
    }
    // Issue #8: a single object is read straight into a `Message` when it is a valid one;
    // anything the fast path declines (batches, junk, invalid messages) takes the `Value`
    // path below, which owns every diagnostic and error reply.
    if trimmed.starts_with('{') {
        if let Some(msg) = Message::parse_object(trimmed) {
            let item = accept(shared, msg, None);
            return deliver(shared, item, inbound, closed).await;
        }
    }
    let parsed = if trimmed.starts_with('[') {
        parse_batch(trimmed, shared.config.max_batch_entries)
    } else {
        serde_json::from_str(trimmed).map(Top::Single)
    };
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            shared.diagnose(Diagnostic::ParseError {
                error: e.to_string(),
            });
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(ErrorObject::parse_error(format!("Parse error: {e}"))),
            });
            let _ = shared.send_frame(reply.to_json()).await;
            return true;
        }
    };
    let mut items = Vec::new();
    match value {
        Top::Batch(BoundedBatch::Over { count }) => {
            let limit = shared.config.max_batch_entries;
            shared.diagnose(Diagnostic::BatchTooLarge { count, limit });
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(ErrorObject::invalid_request(format!(
                    "Invalid Request: batch of {count} entries exceeds the limit of {limit}"
                ))
                .with_data(serde_json::json!({ "limit": limit, "count": count }))),
            });
            let _ = shared.send_frame(reply.to_json()).await;
            return true;
        }
        Top::Batch(BoundedBatch::Within(entries)) => {
            if entries.is_empty() {
                shared.diagnose(Diagnostic::EmptyBatch);
                let reply = Message::Response(Response {
                    id: None,
                    outcome: Err(ErrorObject::invalid_request("Invalid Request: empty batch")),
                });
                let _ = shared.send_frame(reply.to_json()).await;
                return true;
            }
            let collector = Arc::new(BatchCollector {
                state: Mutex::new(BatchState {
                    remaining: 0,
                    responses: Vec::new(),
                }),
            });
            let mut replies = Vec::new();
            for entry in entries {
                if let Some(p) = classify(shared, entry, Some(&collector)) {
                    match p {
                        Parsed::Reply(v) => replies.push(v),
                        other => items.push(other),
                    }
                }
            }
            let delivered_requests = items
                .iter()
                .filter(|p| matches!(p, Parsed::Deliver(IncomingMessage::Request(_))))
                .count();
            let ready = {
                let mut st = lock(&collector.state);
                st.remaining = delivered_requests;
                st.responses.extend(replies);
                // Nothing was delivered yet, so no guard can have answered before this.
                if st.remaining == 0 && !st.responses.is_empty() {
                    Some(Value::Array(std::mem::take(&mut st.responses)).to_string())
                } else {
                    None
                }
            };
            if let Some(text) = ready {
                let _ = shared.send_frame(text).await;
            }
        }
        Top::Single(single) => {
            if let Some(p) = classify(shared, single, None) {
                items.push(p);
            }
        }
    }
    for item in items {
        if !deliver(shared, Some(item), inbound, closed).await {
            return false;
        }
    }
    true
}

/// A frame's top-level JSON value: a batch (JSON array) or anything else.
enum Top {
    Batch(BoundedBatch),
    Single(Value),
}

/// A batch read with at most the limit's worth of entries kept.
enum BoundedBatch {
    /// Every entry (the limit was not exceeded).
    Within(Vec<Value>),
    /// More entries than the limit: only their count is known, nothing of them is kept, so
    /// the memory a huge batch of tiny entries can drive stays bounded by the limit.
    Over { count: usize },
}

/// Reads a whole frame that starts with `[` as a batch bounded to `limit` entries (entries
/// past it are syntax-checked and counted, not built); errors as `serde_json::from_str`.
fn parse_batch(text: &str, limit: usize) -> Result<Top, serde_json::Error> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

    struct Seed(usize);
    impl<'de> Visitor<'de> for Seed {
        type Value = BoundedBatch;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BoundedBatch, A::Error> {
            let mut entries = Vec::new();
            while entries.len() < self.0 {
                match seq.next_element::<Value>()? {
                    Some(v) => entries.push(v),
                    None => return Ok(BoundedBatch::Within(entries)),
                }
            }
            // At the limit: one more entry makes the batch too large.
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(BoundedBatch::Within(entries));
            }
            drop(entries);
            let mut count = self.0 + 1;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                count += 1;
            }
            Ok(BoundedBatch::Over { count })
        }
    }
    impl<'de> DeserializeSeed<'de> for Seed {
        type Value = BoundedBatch;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<BoundedBatch, D::Error> {
            d.deserialize_seq(self)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let batch = Seed(limit).deserialize(&mut de)?;
    de.end()?;
    Ok(Top::Batch(batch))
}

/// Sends one reply or delivers one message; returns `false` when the connection closed while
/// delivering.
async fn deliver(
    shared: &Arc<Shared>,
    item: Option<Parsed>,
    inbound: &mpsc::Sender<Delivered>,
    closed: &mut watch::Receiver<Option<CloseReason>>,
) -> bool {
    match item {
        None => {}
        Some(Parsed::Reply(v)) => {
            let _ = shared.send_frame(v.to_string()).await;
        }
        Some(Parsed::Deliver(msg)) => {
            if inbound.is_closed() {
                undeliverable(shared, msg);
                return true;
            }
            // Counted before it can be received, so `recv` never counts below zero.
            shared.inbox.fetch_add(1, Ordering::Relaxed);
            // The reader is still inside this frame's handling, so the count is its position.
            let seq = shared.frames_read.load(Ordering::SeqCst);
            // Room in the queue: no need to watch for a close while waiting.
            let d = match inbound.try_send(Delivered {
                seq,
                msg: Box::new(msg),
            }) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Closed(d)) => {
                    shared.inbox_taken();
                    undeliverable(shared, *d.msg);
                    return true;
                }
                Err(mpsc::error::TrySendError::Full(d)) => d,
            };
            tokio::select! {
                r = inbound.send(d) => {
                    if let Err(mpsc::error::SendError(d)) = r {
                        shared.inbox_taken();
                        undeliverable(shared, *d.msg);
                    }
                }
                _ = until_closed(closed) => {
                    shared.inbox_taken();
                    return false;
                }
            }
        }
    }
    true
}

/// Nobody receives incoming messages: a request's guard answers -32601 when dropped here.
fn undeliverable(shared: &Shared, msg: IncomingMessage) {
    if let IncomingMessage::Notification(n) = &msg {
        shared.diagnose(Diagnostic::UnhandledNotification {
            method: n.method.clone(),
        });
    }
    drop(msg);
}

/// Classifies one JSON value: responses settle pending requests here; requests and
/// notifications are returned for delivery; invalid requests get a `-32600` reply.
fn classify(
    shared: &Arc<Shared>,
    value: Value,
    batch: Option<&Arc<BatchCollector>>,
) -> Option<Parsed> {
    // A request gone wrong is answered, with `"id": null` when no id can be read (JSON-RPC
    // 2.0 §5, whose own example is `{"jsonrpc":"2.0","method":1,"params":"bar"}`), alone or in
    // a batch alike; a response gone wrong never is (that could loop), nor a JSON object
    // with no `method` (a log line on stdout, say), which is reported instead.
    let request_like = value.get("method").is_some() || !value.is_object();
    match Message::from_value(value) {
        Ok(msg) => accept(shared, msg, batch),
        Err(InvalidMessage { id, reason }) => {
            if request_like {
                shared.diagnose(Diagnostic::InvalidMessage {
                    id: id.clone(),
                    reason: reason.clone(),
                    answered: true,
                });
                let reply = Message::Response(Response {
                    id,
                    outcome: Err(ErrorObject::invalid_request(format!(
                        "Invalid Request: {reason}"
                    ))),
                });
                return Some(Parsed::Reply(reply.to_value()));
            }
            if let Some(id) = &id {
                if let Some(tx) = lock(&shared.pending).remove(id) {
                    let _ = tx.send(Err(PeerError::InvalidResponse(reason.clone())));
                }
            }
            shared.diagnose(Diagnostic::InvalidMessage {
                id,
                reason,
                answered: false,
            });
            None
        }
    }
}

/// Takes one valid message, from either parse path: responses settle pending requests here;
/// requests and notifications are returned for delivery.
fn accept(
    shared: &Arc<Shared>,
    msg: Message,
    batch: Option<&Arc<BatchCollector>>,
) -> Option<Parsed> {
    match msg {
        Message::Request(request) => {
            let limit = shared.config.max_in_flight_requests.max(1);
            if shared.owed.load(Ordering::SeqCst) >= limit {
                // Past the bound nothing is built for it: one small error, written by the
                // reader, which waits (reads nothing more) while the writer is full.
                shared.diagnose(Diagnostic::Busy {
                    id: request.id.clone(),
                    method: request.method.clone(),
                    limit,
                });
                let reply = Message::Response(Response {
                    id: Some(request.id),
                    outcome: Err(ErrorObject::busy(limit)),
                });
                return Some(Parsed::Reply(reply.to_value()));
            }
            Some(Parsed::Deliver(IncomingMessage::Request(IncomingRequest {
                request,
                shared: shared.clone(),
                batch: batch.cloned(),
                armed: true,
                owed: Some(Owed::new(shared)),
                seq: shared.frames_read.load(Ordering::SeqCst),
            })))
        }
        Message::Notification(n) => Some(Parsed::Deliver(IncomingMessage::Notification(n))),
        Message::Response(response) => {
            settle(shared, response);
            None
        }
    }
}

fn settle(shared: &Shared, response: Response) {
    let Some(id) = response.id else {
        shared.diagnose(Diagnostic::UnknownResponse {
            id: None,
            error: response.outcome.err(),
        });
        return;
    };
    let tx = lock(&shared.pending).remove(&id);
    let mark = lock(&shared.settle_marks).remove(&id);
    // Only a response someone still awaits marks its position (a late one is reported below).
    if let (Some(mark), Some(_)) = (mark, &tx) {
        mark.store(shared.frames_read.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    match tx {
        Some(tx) => {
            let _ = tx.send(response.outcome.map_err(PeerError::Remote));
        }
        None => {
            let late = lock(&shared.timed_out).contains(&id);
            if late {
                shared.diagnose(Diagnostic::LateResponse { id });
            } else {
                shared.diagnose(Diagnostic::UnknownResponse {
                    id: Some(id),
                    error: response.outcome.err(),
                });
            }
        }
    }
}

/// How long queued frames may still take to be written after the connection closed, when no
/// write timeout is configured.
const CLOSE_DRAIN_LIMIT: Duration = Duration::from_secs(5);

async fn writer_task(
    shared: Arc<Shared>,
    mut out: mpsc::Receiver<String>,
    guard: Option<Box<dyn std::any::Any + Send>>,
) {
    /// Marks the writer finished on every way out, a cancelled task included.
    struct Finished(Arc<Shared>);
    impl Drop for Finished {
        fn drop(&mut self) {
            self.0.finished.send_replace(true);
        }
    }
    // Declared first, so it is dropped last: after the writer and the guard.
    let _finished = Finished(shared.clone());
    let mut closed = shared.closed.subscribe();
    let write_timeout = shared.config.write_timeout;
    let mut batch: Vec<String> = Vec::new();
    loop {
        let text = tokio::select! {
            biased;
            t = out.recv() => match t {
                Some(t) => t,
                None => break,
            },
            _ = until_closed(&mut closed) => break,
        };
        // Frames already queued behind this one go out in the same write and flush (same
        // bytes, fewer syscalls and wake-ups), up to a bounded batch. Reminders (empty
        // strings) only ask for a partly written frame to be finished, which any write does.
        batch.clear();
        let mut taken = 1;
        let mut bytes = text.len();
        if !text.is_empty() {
            batch.push(text);
        }
        while taken < WRITE_BATCH_FRAMES && bytes < WRITE_BATCH_BYTES {
            match out.try_recv() {
                Ok(t) => {
                    taken += 1;
                    bytes += t.len();
                    if !t.is_empty() {
                        batch.push(t);
                    }
                }
                Err(_) => break,
            }
        }
        // Senders queue behind the batch while the writer is out of its slot.
        let Some(mut writer) = lock(&shared.slot).writer.take() else {
            break;
        };
        let result = {
            let write = write_batch(&shared, writer.as_mut(), &batch, write_timeout);
            tokio::pin!(write);
            tokio::select! {
                r = &mut write => r,
                // Closed mid-write: the frame in flight gets the drain allowance, no more.
                _ = until_closed(&mut closed) => {
                    let drain = write_timeout.unwrap_or(CLOSE_DRAIN_LIMIT);
                    match tokio::time::timeout(drain, &mut write).await {
                        Ok(r) => r,
                        Err(_) => Err(CloseReason::WriteTimeout(drain)),
                    }
                }
            }
        };
        if let Err(reason) = result {
            shared.close(reason);
            out.close();
            drop(writer);
            drop(guard);
            return;
        }
        let mut slot = lock(&shared.slot);
        slot.queued = slot.queued.saturating_sub(taken);
        slot.writer = Some(writer);
    }
    // Closed: no more writes from senders; write what was already queued (e.g. final
    // responses), then shut down.
    out.close();
    let writer = lock(&shared.slot).writer.take();
    let Some(mut writer) = writer else {
        drop(guard);
        return;
    };
    let drain = write_timeout.unwrap_or(CLOSE_DRAIN_LIMIT);
    while let Ok(text) = out.try_recv() {
        let batch: &[String] = if text.is_empty() {
            &[]
        } else {
            std::slice::from_ref(&text)
        };
        if write_batch(&shared, writer.as_mut(), batch, Some(drain))
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = tokio::time::timeout(drain, writer.close()).await;
    // The writer (e.g. a child's stdin) goes first, then whatever the transport kept alive.
    drop(writer);
    drop(guard);
}

/// Most frames written with one write and flush.
const WRITE_BATCH_FRAMES: usize = 64;
/// Stop adding frames to a batch once it holds this many bytes.
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// Writes queued frames together (the write timeout applies to the batch).
async fn write_batch(
    shared: &Shared,
    writer: &mut dyn FrameWriter,
    texts: &[String],
    timeout: Option<Duration>,
) -> Result<(), CloseReason> {
    if let [text] = texts {
        return write_one(shared, writer, text, timeout).await;
    }
    for text in texts {
        shared.tap(FrameDirection::Outbound, text);
    }
    // No frame: only the rest of a partly written one is owed.
    let write = if texts.is_empty() {
        writer.flush_pending()
    } else {
        writer.send_many(texts)
    };
    let result = match timeout {
        None => write.await,
        Some(d) => match tokio::time::timeout(d, write).await {
            Ok(r) => r,
            Err(_) => return Err(CloseReason::WriteTimeout(d)),
        },
    };
    shared.touch();
    result.map_err(|e| CloseReason::Io(e.to_string()))
}

async fn write_one(
    shared: &Shared,
    writer: &mut dyn FrameWriter,
    text: &str,
    timeout: Option<Duration>,
) -> Result<(), CloseReason> {
    shared.tap(FrameDirection::Outbound, text);
    let result = match timeout {
        None => writer.send(text).await,
        Some(d) => match tokio::time::timeout(d, writer.send(text)).await {
            Ok(r) => r,
            Err(_) => return Err(CloseReason::WriteTimeout(d)),
        },
    };
    shared.touch();
    result.map_err(|e| CloseReason::Io(e.to_string()))
}

/// Encoding of outgoing envelopes straight from borrowed parts: the same text as
/// [`Message::to_json`] (members in the same sorted order), without first deep-copying
/// params or result into a fresh `Value` tree.
mod wire {
    use super::*;

    /// Every envelope member, in the order `Message::to_json` writes them (sorted names).
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
        /// Outer `None`: no `id` member (notification); inner `None`: `"id": null`.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<Option<&'a RequestId>>,
        jsonrpc: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        method: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<&'a Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a Value>,
    }

    const EMPTY: Out<'static> = Out {
        error: None,
        id: None,
        jsonrpc: "2.0",
        method: None,
        params: None,
        result: None,
    };

    /// A request line.
    pub(super) fn request(id: &RequestId, method: &str, params: Option<&Value>) -> String {
        let out = Out {
            id: Some(Some(id)),
            method: Some(method),
            params,
            ..EMPTY
        };
        serde_json::to_string(&out).unwrap_or_else(|_| {
            Message::Request(Request {
                id: id.clone(),
                method: method.to_owned(),
                params: params.cloned(),
            })
            .to_json()
        })
    }

    /// A notification line.
    pub(super) fn notification(method: &str, params: Option<&Value>) -> String {
        let out = Out {
            method: Some(method),
            params,
            ..EMPTY
        };
        serde_json::to_string(&out).unwrap_or_else(|_| {
            Message::Notification(Notification {
                method: method.to_owned(),
                params: params.cloned(),
            })
            .to_json()
        })
    }

    /// A result response line serialised straight from `result`; `None` if it cannot be
    /// serialised (the caller then answers `-32603`).
    pub(super) fn result_response<T: Serialize + ?Sized>(
        id: &RequestId,
        result: &T,
    ) -> Option<String> {
        /// Members in the same (sorted) order as [`Out`].
        #[derive(Serialize)]
        struct ResultOut<'a, T: ?Sized> {
            id: &'a RequestId,
            jsonrpc: &'static str,
            result: &'a T,
        }
        serde_json::to_string(&ResultOut {
            id,
            jsonrpc: "2.0",
            result,
        })
        .ok()
    }

    /// A response line. The (rare) error object goes through `Value`, as in `to_json`, so
    /// its members keep the same order.
    pub(super) fn response(id: Option<&RequestId>, outcome: &Result<Value, ErrorObject>) -> String {
        let out = match outcome {
            Ok(result) => Out {
                id: Some(id),
                result: Some(result),
                ..EMPTY
            },
            Err(e) => Out {
                error: Some(serde_json::to_value(e).unwrap_or(Value::Null)),
                id: Some(id),
                ..EMPTY
            },
        };
        serde_json::to_string(&out).unwrap_or_else(|_| {
            Message::Response(Response {
                id: id.cloned(),
                outcome: outcome.clone(),
            })
            .to_json()
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use serde_json::json;

        /// The direct encoding is byte-identical to `Message::to_json` (JSON-RPC 2.0 §4, §5).
        #[test]
        fn jsonrpc_envelopes_match_message_to_json() {
            let params = [
                None,
                Some(Value::Null),
                Some(json!({"z": 1, "a": [1.5, "x", {"k": null}], "é\n": true})),
                Some(json!([1, 2])),
            ];
            let ids = [
                RequestId::from(0u64),
                RequestId::from(-7i64),
                RequestId::from("abc\"1"),
            ];
            for id in &ids {
                for p in &params {
                    let m = Message::Request(Request {
                        id: id.clone(),
                        method: "tools/call".into(),
                        params: p.clone(),
                    });
                    assert_eq!(request(id, "tools/call", p.as_ref()), m.to_json());
                }
                let outcomes = [
                    Ok(json!({"content": [{"type": "text", "text": "hi"}]})),
                    Ok(Value::Null),
                    Err(ErrorObject::method_not_found("x/y")),
                    Err(ErrorObject::internal("boom").with_data(json!({"b": 1, "a": 2}))),
                ];
                for o in &outcomes {
                    for rid in [Some(id), None] {
                        let m = Message::Response(Response {
                            id: rid.cloned(),
                            outcome: o.clone(),
                        });
                        assert_eq!(response(rid, o), m.to_json());
                    }
                    if let Ok(result) = o {
                        assert_eq!(
                            result_response(id, result).as_deref(),
                            Some(response(Some(id), o).as_str())
                        );
                    }
                }
            }
            for p in &params {
                let m = Message::Notification(Notification {
                    method: "push/event".into(),
                    params: p.clone(),
                });
                assert_eq!(notification("push/event", p.as_ref()), m.to_json());
            }
        }
    }
}
