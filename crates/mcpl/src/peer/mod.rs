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
//!   diagnostic and a `-32700` reply with `"id": null`, as JSON-RPC 2.0 asks, unless it
//!   showed a request's id without doubt before the parser's error (`"jsonrpc": "2.0"`, a
//!   `method` and exactly one `id`, a request id, its value ended: a string, or a number a
//!   request's id can be, `jsonrpc::request_id_number`): then the `-32700` goes under that
//!   id (§5: Null only when the id could not be detected). A batch the parser refuses only
//!   for what follows it on its line (another message with nothing between, junk) has
//!   each of its requests answered so, under its id, in one array (§6); several messages
//!   separated by whitespace are each read as their own line.
//! - JSON that is not a valid message is answered `-32600` only when it has both a readable
//!   id and a `method` member (a request gone wrong); without an id it is skipped with a
//!   diagnostic (like a non-`"2.0"` line). Inside a batch every invalid request-like entry
//!   (or non-object) is answered, with `"id": null` when no id is readable, as JSON-RPC 2.0
//!   asks. A malformed *response* is never answered (that could loop), but if its id matches
//!   a pending request, that request fails at once with [`PeerError::InvalidResponse`]
//!   instead of waiting for its timeout; one sent with [`Peer::send_request`] gets it at its
//!   wire position through [`Incoming::recv_ordered`], as a `-32603` error naming the defect.
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
//! - A connection a `host::HostSession` owns (from `connect`, or `connect_peer`, whose
//!   caller may keep clones) is the session's for MCPL (§5.4, §6): the public send methods
//!   of every handle ([`Peer::request`], [`Peer::request_raw`], [`Peer::notify`],
//!   [`Peer::notify_raw`], [`Peer::send_request`] and their `_with` forms) refuse an MCPL
//!   method ([`crate::protocol::is_mcpl_method`]) with [`PeerError::OwnedBySession`],
//!   naming the session method that gates it; MCP and extension methods still pass.
//! - Dropping the last [`Peer`] handle closes the connection; holding only [`Incoming`] does
//!   not keep it open (handlers that need to send keep a `Peer` clone).
//! - On close, frames already queued (e.g. final responses) are still written, each within
//!   the write timeout (or 5 s without one), then the transport is shut down; for a child
//!   process that closes its stdin (see [`crate::transport::child`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio::time::Instant;

use crate::jsonrpc::{
    ErrorObject, InvalidMessage, Message, Notification, Request, RequestId, Response,
};
use crate::protocol::handshake::{ToolsCall, ToolsCallParams};
use crate::protocol::lifecycle::LifecycleParams;
use crate::protocol::Method;
use crate::transport::{
    Frame, FrameReader, FrameWriter, Transport, TrySend, DEFAULT_MAX_MESSAGE_SIZE,
};

mod alarm;
mod batch;
mod config;
mod diag;
mod errors;
mod ids;
mod incoming;
mod outbox;
mod oversized;
mod owner;
mod pieces;
#[cfg(test)]
mod policy_unread_tests;
pub mod queue;
mod reader;
mod refused;
mod serving;
mod settle;
mod shared;
mod text;
mod unparsed;
mod wire;
mod writer;
mod written;

pub(crate) use alarm::Alarm;
use batch::*;
pub use config::*;
pub use errors::*;
pub use incoming::*;
pub(crate) use outbox::Outbox;
pub use oversized::{rest_refusals, RestRefusal, RestRefusals};
pub(crate) use owner::AnswerWeight;
use reader::*;
use shared::*;
use text::*;
use writer::*;

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

/// A request registered and on its way ([`Peer::start_now`]), waiting for its answer.
/// Dropped before that, it is given up: its entry removed and, if its frame was sent, the
/// other side told the request was cancelled.
pub(crate) struct Started {
    shared: Arc<Shared>,
    id: RequestId,
    rx: oneshot::Receiver<Result<Answer, PeerError>>,
    timeout: Option<Duration>,
    /// The frame, while the queue had no room for it.
    unsent: Option<String>,
    /// Whether its frame took its place on the wire (written or queued): only then is the
    /// other side told when it is given up (a request it never saw needs no cancellation).
    on_wire: bool,
    /// Whether dropping it gives the request up.
    armed: bool,
}

impl Started {
    /// The started request when its frame took its place on the wire; else it is
    /// forgotten, never having been sent, and `None`.
    fn sent(mut self) -> Option<Started> {
        if self.unsent.is_none() {
            return Some(self);
        }
        self.armed = false;
        lock(&self.shared.pending).remove(&self.id);
        None
    }

    /// Sends the frame if it is still to go, then waits for the answer within the
    /// request's timeout (`method` names it in a timeout): counted from now, or, with
    /// `since`, from that instant (a call that waited for room before it started,
    /// [`Peer::room`]: one deadline from the call, never its timeout again once sent).
    async fn answer(mut self, method: &str, since: Option<Instant>) -> Result<Answer, PeerError> {
        let shared = self.shared.clone();
        let unsent = self.unsent.take();
        let (rx, on_wire) = (&mut self.rx, &mut self.on_wire);
        let exchange = async {
            if let Some(line) = unsent {
                // Ended before its frame took its place on the wire (failed by a batch that
                // failed every request outstanding, a close): it is not sent, so the other
                // side never runs a request its caller was told failed. Boxed: the wait for
                // room is rare, and its future would size every request's (issue #24: ten
                // thousand calls outstanding).
                let ended = Box::pin(async {
                    tokio::select! {
                        biased;
                        ended = &mut *rx => Some(match ended {
                            Ok(r) => r,
                            Err(_) => Err(shared.closed_error()),
                        }),
                        sent = shared.send_frame(line) => sent.err().map(Err),
                    }
                })
                .await;
                if let Some(r) = ended {
                    return r;
                }
                *on_wire = true;
            }
            match rx.await {
                Ok(r) => r,
                Err(_) => Err(shared.closed_error()),
            }
        };
        // A timeout past what an instant can hold waits as `None` does.
        let limit = self.timeout.and_then(|after| {
            Some((
                since.unwrap_or_else(Instant::now).checked_add(after)?,
                after,
            ))
        });
        let result = match limit {
            None => exchange.await,
            Some((at, after)) => match tokio::time::timeout_at(at, exchange).await {
                Ok(r) => r,
                Err(_) => {
                    self.armed = false;
                    lock(&shared.pending).remove(&self.id);
                    if self.on_wire {
                        shared.abandon(self.id.clone(), &format!("timed out after {after:?}"));
                    }
                    return Err(PeerError::Timeout {
                        method: method.to_owned(),
                        id: self.id.clone(),
                        after,
                    });
                }
            },
        };
        self.armed = false;
        result
    }

    /// [`Self::answer`] as a `Value` (`since`: the call's start, when it waited for room).
    pub(crate) async fn value(
        self,
        method: &str,
        since: Option<Instant>,
    ) -> Result<Value, PeerError> {
        self.answer(method, since).await?.into_value()
    }

    /// [`Self::answer`] decoded into `M`'s result (`since` as for [`Self::value`]).
    pub(crate) async fn typed<M: Method>(
        self,
        since: Option<Instant>,
    ) -> Result<M::Result, PeerError> {
        let shared = self.shared.clone();
        self.answer(M::NAME, since).await?.decode::<M>(&shared)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.armed && lock(&self.shared.pending).remove(&self.id).is_some() && self.on_wire {
            self.shared
                .abandon(self.id.clone(), "the caller stopped waiting");
        }
    }
}

/// Room for one frame held in the writer's queue ([`Peer::room`]); dropped unused, it goes
/// to the next sender waiting for room.
#[derive(Debug)]
pub(crate) struct Room(queue::Permit<String>);

/// The params member to write for `params`, checked before anything is sent or registered
/// (JSON-RPC 2.0 §4.2): a scalar, or params nested too deep to read, are refused
/// ([`crate::jsonrpc::params_shape`], the rule the reader applies to what it receives),
/// `null` goes as no member
/// ([`crate::jsonrpc::params_to_send`]).
pub(crate) fn params_for_wire(
    method: &str,
    params: Option<Value>,
) -> Result<Option<Value>, PeerError> {
    if let Some(Err(kind)) = params.as_ref().map(crate::jsonrpc::params_shape) {
        return Err(PeerError::Encode {
            method: method.to_owned(),
            reason: kind.to_string(),
        });
    }
    Ok(crate::jsonrpc::params_to_send(params))
}

/// [`params_for_wire`] of borrowed params: the member to write, `None` for `null`.
fn params_by_ref<'a>(method: &str, params: &'a Value) -> Result<Option<&'a Value>, PeerError> {
    if let Err(kind) = crate::jsonrpc::params_shape(params) {
        return Err(PeerError::Encode {
            method: method.to_owned(),
            reason: kind.to_string(),
        });
    }
    Ok(Some(params).filter(|p| !p.is_null()))
}

/// `M`'s result decoded from the `value` it was answered with; [`PeerError::Decode`] if it
/// does not fit.
pub(crate) fn decode_result<M: Method>(value: Value) -> Result<M::Result, PeerError> {
    serde_json::from_value(value).map_err(|e| PeerError::Decode {
        method: M::NAME.to_owned(),
        reason: e.to_string(),
    })
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
        let (out_tx, out_rx) =
            queue::capped(config.outgoing_capacity, OUTGOING_QUEUE_BYTES, String::len);
        let (in_tx, in_rx) =
            queue::capped(config.incoming_capacity, INCOMING_QUEUE_BYTES, Item::bytes);
        let (closed_tx, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            config,
            out: out_tx,
            slot: Mutex::new(WriterSlot {
                writer: Some(writer),
                queued: 0,
                spare: Vec::new(),
                head_tapped: false,
            }),
            inbox: AtomicUsize::new(0),
            room_waiters: AtomicUsize::new(0),
            pending: Mutex::new(HashMap::default()),
            timed_out: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(1),
            written_ids: AtomicU64::new(0),
            detached: AtomicUsize::new(0),
            detached_done: Notify::new(),
            runtime: tokio::runtime::Handle::current(),
            closed: closed_tx,
            is_closed: std::sync::atomic::AtomicBool::new(false),
            typed_lifecycle: std::sync::atomic::AtomicBool::new(false),
            typed_tools_call: std::sync::atomic::AtomicBool::new(false),
            typed_answers: std::sync::atomic::AtomicBool::new(false),
            policy_past_busy: std::sync::atomic::AtomicBool::new(false),
            spare_answer: Mutex::new(String::new()),
            spare_call: Mutex::new(None),
            reader_stop: futures_util::task::AtomicWaker::new(),
            diagnostics: std::sync::OnceLock::new(),
            first_diagnostics: Mutex::new(None),
            last_activity: Mutex::new(Instant::now()),
            owed: AtomicUsize::new(0),
            owed_bytes: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            frames_read: AtomicU64::new(0),
            entry_now: std::sync::atomic::AtomicU32::new(0),
            owed_settled: Notify::new(),
            read_eof: std::sync::atomic::AtomicBool::new(false),
            in_order: Mutex::new(HashSet::new()),
            read_whole: Mutex::new(HashSet::new()),
            serving: Mutex::new(serving::Serving::default()),
            failed_here: Mutex::new(VecDeque::new()),
            finished: watch::channel(false).0,
            owner_gate: std::sync::OnceLock::new(),
            answers_cancels: std::sync::atomic::AtomicBool::new(false),
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
        let incoming = Incoming {
            rx: in_rx,
            shared,
            frame: (0, 0),
        };
        (peer, incoming)
    }

    /// Two connected peers over an in-memory pipe (real framing), for tests.
    pub fn memory_pair(config: PeerConfig) -> ((Peer, Incoming), (Peer, Incoming)) {
        let (a, b) = crate::transport::memory::pair();
        (Peer::new(a, config.clone()), Peer::new(b, config))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// The configuration this peer was built with (what is in force).
    pub(crate) fn config(&self) -> &PeerConfig {
        &self.shared().config
    }

    /// Sends a typed request and decodes its result, with the default timeout.
    pub async fn request<M: Method>(&self, params: &M::Params) -> Result<M::Result, PeerError> {
        self.request_with::<M>(params, RequestOptions::default())
            .await
    }

    /// Sends a typed request under `options` (timeout, id observer) and decodes its result.
    pub async fn request_with<M: Method>(
        &self,
        params: &M::Params,
        options: RequestOptions<'_>,
    ) -> Result<M::Result, PeerError> {
        self.public_send(M::NAME, false)?;
        // Issue #24: the params are encoded straight from their type into the line, and the
        // result decoded straight from its text where the reader can hand it so
        // ([`crate::jsonrpc::parse_answer`]): no `Value` tree either way.
        let line = |buf, id: &RequestId| typed_line::<M>(buf, id, params);
        let text = crate::protocol::result_reads_from_text::<M::Result>();
        let answer = self.call(M::NAME, line, text, options).await?;
        answer.decode::<M>(self.shared())
    }

    /// Sends a request by method name; `params: None` (or `null`) omits the member, and a
    /// scalar is refused before anything is sent ([`crate::jsonrpc::params_shape`], JSON-RPC
    /// 2.0 §4.2). Default timeout.
    pub async fn request_raw(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, PeerError> {
        self.request_raw_with(method, params, RequestOptions::default())
            .await
    }

    /// Sends a request by method name under `options`: the one call every other request
    /// method of [`Peer`] goes through.
    pub async fn request_raw_with(
        &self,
        method: &str,
        params: Option<Value>,
        options: RequestOptions<'_>,
    ) -> Result<Value, PeerError> {
        self.public_send(method, false)?;
        let params = params_for_wire(method, params)?;
        let line = |buf, id: &RequestId| Ok(wire::request_in(buf, id, method, params.as_ref()));
        let answer = self.call(method, line, false, options).await?;
        answer.into_value()
    }

    /// Sends one request, its line written by `line` into a spare frame buffer under the id
    /// it is given (an `Err` sends nothing), and waits for its answer under `options`;
    /// `text`: the caller takes a result read the fast way as its text.
    async fn call(
        &self,
        method: &str,
        line: impl FnOnce(Vec<u8>, &RequestId) -> Result<String, PeerError>,
        text: bool,
        options: RequestOptions<'_>,
    ) -> Result<Answer, PeerError> {
        let on_id = options.on_id;
        let started = self.start(method, line, text, options.timeout, on_id)?;
        started.answer(method, None).await
    }

    /// [`Self::call`] up to its first wait: the request registered and its frame written or
    /// queued, or (`Started::unsent`) handed back when the queue has no room.
    fn start(
        &self,
        method: &str,
        line: impl FnOnce(Vec<u8>, &RequestId) -> Result<String, PeerError>,
        text: bool,
        timeout: RequestTimeout,
        on_id: Option<OnId<'_>>,
    ) -> Result<Started, PeerError> {
        self.start_in(method, line, text, timeout, on_id, None)
    }

    /// [`Self::start`], its frame queued into the room `room` holds, if any (handed back
    /// then only while the queue is over its byte cap).
    fn start_in(
        &self,
        method: &str,
        line: impl FnOnce(Vec<u8>, &RequestId) -> Result<String, PeerError>,
        text: bool,
        timeout: RequestTimeout,
        on_id: Option<OnId<'_>>,
        room: Option<Room>,
    ) -> Result<Started, PeerError> {
        let timeout = match timeout {
            RequestTimeout::Default => self.shared().config.request_timeout,
            RequestTimeout::After(d) => Some(d),
            RequestTimeout::Never => None,
        };
        let shared = self.shared();
        if let Some(reason) = shared.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        // Refused before anything is registered (the frame's send would refuse it too).
        if shared.in_own_tap() {
            return Err(PeerError::SentFromTap);
        }
        let id = RequestId::from(shared.next_id.fetch_add(1, Ordering::Relaxed));
        let line = line(shared.frame_buffer(), &id)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&shared.pending);
            let limit = shared.config.max_pending_requests;
            if pending.len() >= limit {
                return Err(PeerError::TooManyPending { limit });
            }
            pending.insert(id.clone(), Waiter { tx, text });
        }
        if text && !shared.typed_answers.load(Ordering::Relaxed) {
            shared.typed_answers.store(true, Ordering::Relaxed);
        }
        let mut started = Started {
            shared: shared.clone(),
            id,
            rx,
            timeout,
            unsent: None,
            on_wire: false,
            armed: true,
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
            f(&started.id);
        }
        // An answer deciding authority is read whole by the one rule, whichever way its
        // request went (noted before its frame can be answered).
        shared.note_read_whole(method, &started.id);
        started.unsent = shared.try_send_frame(line, room)?;
        started.on_wire = started.unsent.is_none();
        Ok(started)
    }

    /// Starts a request whose frame must take its place on the wire now, never after a
    /// wait: `Ok(None)`, nothing registered or sent, when the queue has no room (the
    /// caller sends it another way). For a caller that decides whether to send under a lock
    /// the frame must be queued under (`host::HostSession`'s gate, §6.7).
    ///
    /// With `room` ([`Self::room`]) the frame goes into the room it holds: `Ok(None)` then
    /// only while the queue is over its byte cap (the caller waits for room again).
    pub(crate) fn start_now(
        &self,
        method: &str,
        params: &Value,
        room: Option<Room>,
    ) -> Result<Option<Started>, PeerError> {
        let params = params_by_ref(method, params)?;
        let line = |buf, id: &RequestId| Ok(wire::request_in(buf, id, method, params));
        let started = self.start_in(method, line, false, RequestTimeout::Default, None, room)?;
        Ok(started.sent())
    }

    /// [`Self::start_now`] of a typed request, as [`Self::request`] writes it.
    pub(crate) fn start_typed_now<M: Method>(
        &self,
        params: &M::Params,
        room: Option<Room>,
    ) -> Result<Option<Started>, PeerError> {
        let line = |buf, id: &RequestId| typed_line::<M>(buf, id, params);
        let text = crate::protocol::result_reads_from_text::<M::Result>();
        let started = self.start_in(M::NAME, line, text, RequestTimeout::Default, None, room)?;
        Ok(started.sent())
    }

    /// Sends a notification now, never after a wait: `Ok(false)`, nothing sent, when the
    /// queue has no room and `room` holds none (as [`Self::start_now`]).
    pub(crate) fn notify_now(
        &self,
        method: &str,
        params: &Value,
        room: Option<Room>,
    ) -> Result<bool, PeerError> {
        let params = params_by_ref(method, params)?;
        let text = wire::notification(method, params);
        Ok(self.shared().try_send_frame(text, room)?.is_none())
    }

    /// Waits for room for one frame in the writer's queue and holds it (issue #24): a
    /// sender that must decide what to send when it takes its place on the wire
    /// ([`Self::start_now`]) and found no room waits here, behind senders already waiting,
    /// then decides again; while it waits, nothing is written directly ahead of it
    /// ([`Shared::send_now`]). `Err` once the connection is closed, or
    /// [`PeerError::Timeout`] (for `method`, id 0: nothing was sent) at `deadline`: the
    /// instant a request's caller called and its timeout (one deadline from the call, the
    /// wait for room included: the request, once sent, waits for its answer only what is
    /// left of it, [`Started::value`]). Cancel-safe.
    pub(crate) async fn room(
        &self,
        method: &str,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Room, PeerError> {
        /// Counts a sender among those waiting for room while it waits.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let shared = self.shared();
        shared.room_waiters.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&shared.room_waiters);
        let mut closed = shared.closed.subscribe();
        let reserve = shared.out.reserve();
        let wait = async {
            tokio::select! {
                r = reserve => r.map(Room).map_err(|()| shared.closed_error()),
                _ = until_closed(&mut closed) => Err(shared.closed_error()),
            }
        };
        // A deadline past what an instant can hold is none.
        let Some((at, after)) =
            deadline.and_then(|(since, after)| Some((since.checked_add(after)?, after)))
        else {
            return wait.await;
        };
        tokio::time::timeout_at(at, wait).await.unwrap_or_else(|_| {
            Err(PeerError::Timeout {
                method: method.to_owned(),
                id: RequestId::from(0u64),
                after,
            })
        })
    }

    /// Sends a typed notification.
    pub async fn notify<M: Method>(&self, params: &M::Params) -> Result<(), PeerError> {
        let params = encode_params(M::NAME, params)?;
        self.notify_raw(M::NAME, params).await
    }

    /// Sends a notification by method name; `params` as [`Self::request_raw`] takes them.
    pub async fn notify_raw(&self, method: &str, params: Option<Value>) -> Result<(), PeerError> {
        self.public_send(method, true)?;
        let params = params_for_wire(method, params)?;
        let text = wire::notification(method, params.as_ref());
        self.shared().send_frame(text).await
    }

    /// Answers request `id`, taken with [`IncomingRequest::into_id`], with a result (use
    /// [`IncomingRequest::respond`] while the guard is at hand). Refused, nothing sent, with
    /// [`PeerError::NotOwed`] for an id not so taken and still unanswered (never received,
    /// answered already, still held by its guard), and with
    /// [`PeerError::AnswerOwnedBySession`] on a connection a `host::HostSession` owns,
    /// which answers its requests itself.
    pub async fn respond(&self, id: RequestId, result: Value) -> Result<(), PeerError> {
        self.public_answer(&id)?;
        self.send_response(id, Ok(result)).await
    }

    /// Answers request `id` with an error object; refused as [`Self::respond`] is.
    pub async fn respond_error(&self, id: RequestId, error: ErrorObject) -> Result<(), PeerError> {
        self.public_answer(&id)?;
        self.send_response(id, Err(error)).await
    }

    async fn send_response(
        &self,
        id: RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), PeerError> {
        let shared = self.shared();
        // Only a request handed over by `into_id` and not yet answered is answered by id
        // (JSON-RPC 2.0 §5: one response per request received): the lookup is in what the
        // reader keeps of the ids in flight (`serving`), taken out here, so a second answer
        // finds nothing. Its id stays in flight until this answer is queued, as a guard's
        // answer frees its id then.
        let Some(held) = lock(&shared.serving).take_detached(serving::key(&id)) else {
            return Err(PeerError::NotOwed { id: id.to_string() });
        };
        let text = wire::response_in(shared.frame_buffer(), Some(&id), &outcome);
        shared
            .send_answer(text, Some(Owed::holding(shared, held)))
            .await
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

    /// Has `f` called with each of the connection's diagnostics as it is reported, in order,
    /// starting with those the first [`Peer::diagnostics`] receiver would have seen (that
    /// receiver is then no longer handed out): a session passes them on without a task of
    /// its own. `f` runs where the diagnostic is reported, under the diagnostics channel's
    /// lock, so it must only queue or log (never call back into this peer). Replaces an
    /// earlier forwarder.
    pub(crate) fn forward_diagnostics(
        &self,
        f: impl Fn(Diagnostic, Option<diag::ReadingAt>) + Send + Sync + 'static,
    ) {
        let shared = self.shared();
        let sender = shared.diagnostic_sender();
        let first = lock(&shared.first_diagnostics).take();
        sender.forward(Box::new(f), first);
    }

    /// Closes the connection: pending requests fail with [`PeerError::Closed`], frames already
    /// queued are still written, then the transport is shut down.
    pub fn close(&self) {
        self.shared().close(CloseReason::Local);
    }

    /// From now on, an `inference/lifecycle` notification the reader can read straight into
    /// its type is handed out so ([`Incoming::recv_typed`], issue #24): for a driver that
    /// reads there (`server::Server`'s).
    pub(crate) fn read_lifecycle_typed(&self) {
        self.shared().typed_lifecycle.store(true, Ordering::Relaxed);
    }

    /// From now on, a `tools/call` request the reader can read straight into its type
    /// carries its params so ([`IncomingRequest::take_tools_call`], issue #24), not as a
    /// `Value`: for a driver that takes them there (`server::Server`'s, without a fallback).
    pub(crate) fn read_tools_call_typed(&self) {
        self.shared()
            .typed_tools_call
            .store(true, Ordering::Relaxed);
    }

    /// From now on, a `featureSets/update` request is taken even when
    /// [`PeerConfig::max_in_flight_requests`] requests are in flight (§6.7: a server MUST
    /// respect a reduction at once): for a driver that answers it itself, without a handler
    /// slot (`server::Server`'s). The incoming queue still bounds how many wait to be read.
    pub(crate) fn take_policy_past_busy(&self) {
        self.shared()
            .policy_past_busy
            .store(true, Ordering::Relaxed);
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

    /// How many incoming requests are in flight: delivered and not yet answered, a batch's
    /// until its array of answers is queued (see [`PeerConfig::max_in_flight_requests`]).
    /// Those taken with [`IncomingRequest::into_id`] count until answered by id.
    pub fn requests_in_flight(&self) -> usize {
        let shared = self.shared();
        let by_id = lock(&shared.serving).by_id();
        shared.owed.load(Ordering::SeqCst).saturating_add(by_id)
    }

    /// How many outgoing requests await a response.
    pub fn pending_requests(&self) -> usize {
        lock(&self.shared().pending).len()
    }

    /// Sends a request whose response is not awaited here but delivered, at its wire
    /// position among the other side's messages, by [`Incoming::recv_ordered`] (as
    /// [`Ordered::Response`]). A session that must apply an answer before it handles what
    /// was read after it (a policy receipt, §5.3, §6.7) sends with this. `on_id` runs with
    /// the id before the frame goes out. Counts against
    /// [`PeerConfig::max_pending_requests`]; give up on one with [`Peer::forget`]. One
    /// failed by this side while its frame waits for room (its failure delivered in order)
    /// is not sent: its id is returned, the frame dropped.
    pub async fn send_request(
        &self,
        method: &str,
        params: Option<Value>,
        on_id: impl FnOnce(&RequestId),
    ) -> Result<RequestId, PeerError> {
        self.public_send(method, false)?;
        let params = params_for_wire(method, params)?;
        let shared = self.shared();
        if shared.in_own_tap() {
            return Err(PeerError::SentFromTap);
        }
        let id = shared.register_in_order()?;
        shared.note_read_whole(method, &id);
        // Until its frame is queued, the request is not sent: given up (this future dropped)
        // or refused, it is no longer registered (nothing to forget, nothing to cancel).
        let mut unsent = UnsentInOrder {
            shared,
            id: Some(&id),
        };
        on_id(&id);
        let text = wire::request_in(self.shared().frame_buffer(), &id, method, params.as_ref());
        // Failed while its frame waits for room (a discarded batch failing every request
        // outstanding, whose failure was delivered in order): not sent afterwards, so the
        // other side never runs a request reported failed; its id stands, as that failure
        // names it.
        let in_order = || lock(&shared.in_order).contains(&id);
        shared.send_frame_while(text, in_order).await?;
        unsent.id = None;
        drop(unsent);
        Ok(id)
    }

    /// Whether the error delivered for `id`, a request sent with [`Peer::send_request`],
    /// was made by this side because it could not read the answer (over a limit, not valid
    /// JSON-RPC: a `-32603` worded `invalid response: …`), rather than sent by the other
    /// side, which may send the same words. `true` once per such id; of those not yet asked
    /// about, the newest [`PeerConfig::max_pending_requests`] are remembered.
    pub fn failed_here(&self, id: &RequestId) -> bool {
        let mut failed = lock(&self.shared().failed_here);
        match failed.iter().rposition(|f| f == id) {
            Some(i) => failed.remove(i).is_some(),
            None => false,
        }
    }

    /// Gives up on a request sent with [`Peer::send_request`] (its deadline passed): a
    /// response arriving later is reported as [`Diagnostic::LateResponse`], never
    /// delivered. `false` if its response was already delivered (or it was never sent).
    pub fn forget(&self, id: &RequestId, reason: &str) -> bool {
        let shared = self.shared();
        if !lock(&shared.in_order).remove(id) {
            return false;
        }
        shared.abandon(id.clone(), reason);
        true
    }
}

/// A request of [`Peer::send_request`] registered and not yet queued: dropped so, its id
/// is no longer registered.
struct UnsentInOrder<'a> {
    shared: &'a Shared,
    id: Option<&'a RequestId>,
}

impl Drop for UnsentInOrder<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&self.shared.in_order).remove(id);
        }
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

/// The line of a typed request `M` under `id`, its `params` encoded straight from their
/// type into `buf` (issue #24): the one writer of [`Peer::request_with`] and
/// `Peer::start_typed_now`, an encoding failure reported as [`PeerError::Encode`].
fn typed_line<M: Method>(
    buf: Vec<u8>,
    id: &RequestId,
    params: &M::Params,
) -> Result<String, PeerError> {
    crate::jsonrpc::Encoded::typed_request_in(buf, id, M::NAME, params).map_err(|reason| {
        PeerError::Encode {
            method: M::NAME.to_owned(),
            reason,
        }
    })
}
