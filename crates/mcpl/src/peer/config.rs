//! Connection settings and the message tap.

use super::*;
use crate::config_rules::Named;

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
    /// For a received frame, its number on the connection: 1 for the first frame the reader
    /// took, +1 for each one after it, in wire order (a batch is one frame). A frame
    /// discarded unread (over [`PeerConfig::max_message_size`], over the partial-message
    /// budget, not text) takes its number too though it is never tapped, so the numbers
    /// match the wire and skip it here; what fails because of it (the request it answered)
    /// is told with its number ([`crate::peer::Incoming::frame`]). The frame a
    /// `host::HostSession` diagnostic was raised for is named by this number
    /// (`host::DiagnosticTap`). 0 for a sent frame.
    pub frame: u64,
}

/// A callback receiving every text frame in and out, e.g. to log a transcript. It runs where
/// each frame is read or written (the reader task, the writer task, or a sender writing its
/// own frame, under the connection's writer lock, and for a `host::HostSession`'s plain
/// sends while the session's published state is held), so it must be quick. A send on the
/// same connection from inside it (through the [`Peer`] or the session, on the thread
/// running it) is refused at once with [`PeerError::SentFromTap`], never left waiting for
/// the lock its own thread holds: to answer a frame, hand it to a task that sends. The
/// session's getters (`grant`, `channels`, `is_ready` …) may be called from it: they never
/// wait for a send. Anything else it waits for (a lock or channel of the application's that
/// a sender holds while sending) is the application's to avoid.
#[derive(Clone)]
pub struct Tap(pub(super) Arc<dyn Fn(TapEvent<'_>) + Send + Sync>);

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
    /// reading). `None` (default) waits forever. Once the connection is closed, what is
    /// still queued is written within this (else 5 s) in all, the transport's close included.
    pub write_timeout: Option<Duration>,
    /// After the other side ends its output (EOF), how long the responses this side still
    /// owes may take before the connection closes (a request answered by a person, as in
    /// `mcpl inspect`). `None` (default): the write timeout, else 5 s. A write failing still
    /// closes at once.
    pub eof_drain: Option<Duration>,
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
    /// Receives every frame in and out, each once, an outgoing one before its bytes reach
    /// the transport: a transcript never shows an answer ahead of what it answers.
    pub tap: Option<Tap>,
    /// Most entries accepted in one JSON-RPC batch (1024). A bigger batch is answered with
    /// one `-32600` error (`"id": null`, `data: { limit, count }`) and none of its entries
    /// is handled; its entries past the limit are only counted, never kept.
    pub max_batch_entries: usize,
    /// Most a message may cost once parsed, in [`crate::jsonrpc::parsed_cost`] units
    /// ([`crate::jsonrpc::DEFAULT_MAX_PARSED_COST`]: about 128 MiB at worst), counted from
    /// its text before anything is built (issue #20: a 16 MiB line of small objects parses
    /// into 1.4 GB). A request past it is answered `-32600` with its id and
    /// `data: { limit, count, reason: "parsed_cost" }` (a batch likewise, `id: null`), a
    /// response past it fails its
    /// request with [`PeerError::InvalidResponse`], anything else is only reported
    /// ([`Diagnostic::TooCostly`]); nothing of it is handled.
    pub max_parsed_cost: usize,
    /// Most incoming requests in flight at once (128): delivered to [`Incoming`] and not yet
    /// answered, their answers included until each is queued for writing. A request past it
    /// is not delivered: it is answered at once with [`crate::jsonrpc::codes::BUSY`] (`-32000`,
    /// `data: { limit }`) and a [`Diagnostic::Busy`]. Together with the bounded queues this
    /// bounds the work and the answers one connection can hold, whether its peer floods
    /// requests or stops reading. Requests taken over with [`IncomingRequest::into_id`] count
    /// until answered by id ([`Peer::respond`]), so an application that never answers them
    /// reaches the bound rather than piling them up. A [`crate::server::Server`] also runs at most this many notification
    /// handlers at once per connection; a notification past it is not handled and is
    /// reported (`ServerDiagnostic::NotificationDropped`).
    pub max_in_flight_requests: usize,
    /// Most bytes of incoming requests in flight at once ([`DEFAULT_MAX_IN_FLIGHT_BYTES`]):
    /// each request counts its frame's weight (its length; for a frame of
    /// [`WEIGH_PARSED_FROM`] bytes or more, what it is estimated to hold parsed,
    /// [`crate::jsonrpc::parsed_bytes`]; a batch entry, its share of its batch's) and, once
    /// its answer is made, the answer's too, until that answer is queued for writing. A
    /// request arriving while this much is in flight is answered at once with
    /// [`crate::jsonrpc::codes::BUSY`] (`-32000`, `data: { limit, bytes, reason:
    /// "in_flight_bytes" }`) and a [`Diagnostic::BusyBytes`], as past
    /// [`Self::max_in_flight_requests`]; one request is always taken when none is in
    /// flight. Beside the writer's own byte bound ([`OUTGOING_QUEUE_BYTES`]), it bounds in
    /// bytes what a peer that sends large requests (or requests with large answers) and
    /// never reads makes this side hold, where the count bounds alone let it hold
    /// 128 + 64 whole answers. A [`crate::server::Server`] handler's answer counts from
    /// the moment it is made, while it waits for the connection's driver too. An answer is
    /// known only once made: requests admitted before any of their answers exists (a burst
    /// arriving at once) run all the same, so the answers of the handlers already running
    /// when the bound is reached (at most [`Self::max_in_flight_requests`] of them) may
    /// still be held beyond it; no request arriving after is run until it is back under.
    pub max_in_flight_bytes: usize,
    /// The budget this connection's partial messages are taken from, shared with every
    /// connection given the same one (see [`crate::transport::budget`]). `None` (default)
    /// keeps the transport's: [`MessageBudget::process`](crate::transport::MessageBudget::process)
    /// (256 MiB for the whole process, [`crate::transport::DEFAULT_MESSAGE_BUDGET`]) unless
    /// the listener set another (`ListenConfig::message_budget`). Past it a partial message
    /// is refused, handled as every refused message is (a request answered `-32000` under
    /// the id its first bytes show, `data: { limit, reason: "message_budget" }`; a response
    /// fails its request at once) with a [`Diagnostic::OverBudget`], and discarded unread; the
    /// first [`crate::transport::UNBUDGETED_BYTES`] of each message are outside the budget.
    pub message_budget: Option<crate::transport::MessageBudget>,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            request_timeout: Some(crate::session::DEFAULT_REQUEST_TIMEOUT),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            incoming_capacity: 64,
            outgoing_capacity: 64,
            max_pending_requests: crate::session::DEFAULT_MAX_PENDING_REQUESTS,
            write_timeout: None,
            eof_drain: None,
            idle_timeout: None,
            diagnostics_capacity: 256,
            remembered_timeouts: 1024,
            cancel_method: Some(crate::session::CANCELLED),
            tap: None,
            max_batch_entries: DEFAULT_MAX_BATCH_ENTRIES,
            max_parsed_cost: crate::jsonrpc::DEFAULT_MAX_PARSED_COST,
            max_in_flight_requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            message_budget: None,
        }
    }
}

/// The default [`PeerConfig::max_in_flight_requests`].
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 128;

/// The default [`PeerConfig::max_in_flight_bytes`]: 32 MiB, two messages of the default
/// [`DEFAULT_MAX_MESSAGE_SIZE`].
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 32 << 20;

/// The most bytes of frames queued for the writer task and not yet taken by it (beside
/// [`PeerConfig::outgoing_capacity`] frames): past it a sender waits, or a driver's outbox
/// holds the frame, as when the queue is full; one frame larger than it still goes into an
/// empty queue. 8 MiB.
pub const OUTGOING_QUEUE_BYTES: usize = 8 << 20;

/// The most bytes of frames read and queued for the application and not yet received from
/// [`Incoming`](super::Incoming) (beside [`PeerConfig::incoming_capacity`] messages): past
/// it the reader stops reading until the application takes one, as when the queue is full;
/// one frame larger than it still goes into an empty queue. A message is weighed by its
/// frame (a batch entry by its share): its length, or for a frame of [`WEIGH_PARSED_FROM`]
/// bytes or more what it is estimated to hold parsed ([`crate::jsonrpc::parsed_bytes`]:
/// 16 KB of `{"a":1}` weigh 1.4 MB). 8 MiB.
pub const INCOMING_QUEUE_BYTES: usize = 8 << 20;

/// Frames of at least this many bytes (1 KiB) weigh what they are estimated to hold parsed
/// ([`crate::jsonrpc::parsed_bytes`]) in the incoming queue ([`INCOMING_QUEUE_BYTES`]) and
/// the requests in flight ([`PeerConfig::max_in_flight_bytes`]), not their length: a text
/// of small objects holds up to ~90 times its length parsed, so 64 queued notifications of
/// 16 KB held 87 MB under the 8 MiB bound, and 128 held requests 172 MB under the 32 MiB
/// one. A shorter frame (a typical request or answer) is not scanned and weighs its
/// length: holding at most ~90 KB parsed, such frames are bounded by the count bounds
/// (64 queued, 128 in flight: under 18 MB).
pub const WEIGH_PARSED_FROM: usize = 1024;

/// The default [`PeerConfig::max_batch_entries`].
pub const DEFAULT_MAX_BATCH_ENTRIES: usize = 1024;

/// How long one outgoing request waits for its response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestTimeout {
    /// [`PeerConfig::request_timeout`].
    #[default]
    Default,
    /// This long, whatever the connection's default.
    After(Duration),
    /// No timeout: the request waits until answered or the connection ends.
    Never,
}

/// How one outgoing request is sent ([`Peer::request_with`], [`Peer::request_raw_with`]).
/// `RequestOptions::default()` is the connection's default timeout and no observers.
#[derive(Default)]
pub struct RequestOptions<'a> {
    pub(super) timeout: RequestTimeout,
    pub(super) on_id: Option<OnId<'a>>,
}

impl fmt::Debug for RequestOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestOptions")
            .field("timeout", &self.timeout)
            .field("on_id", &self.on_id.is_some())
            .finish()
    }
}

impl<'a> RequestOptions<'a> {
    /// The connection's default timeout, no observers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits at most `timeout` for the response.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = RequestTimeout::After(timeout);
        self
    }

    /// Sets how long the request waits ([`RequestTimeout`]).
    pub fn wait(mut self, timeout: RequestTimeout) -> Self {
        self.timeout = timeout;
        self
    }

    /// Calls `on_id` with the id the request is sent under just before the frame goes out
    /// (e.g. to route `inference/chunk` notifications, which name the request by id, §11.4).
    /// Not called when the request fails before an id is assigned.
    pub fn on_id(mut self, on_id: impl FnOnce(&RequestId) + Send + 'a) -> Self {
        self.on_id = Some(Box::new(on_id));
        self
    }
}

impl PeerConfig {
    /// Every value of this configuration that cannot work, each naming its field
    /// (`PeerConfig.…`), what it holds and what to write; empty when there is none.
    /// `host::HostSession::connect` refuses a `HostConfig` whose `peer` has any (as
    /// `HostConfig.peer.…`).
    ///
    /// Readings (the spec sets none of these numbers):
    /// - A timeout given (`Some`) is at least 1 ms: a zero `request_timeout` fails every
    ///   request at once, a zero `write_timeout` closes the connection at its first write,
    ///   a zero `idle_timeout` at once. `None` is the way to say "no limit". `eof_drain`
    ///   may be 0: closing as soon as the other side ends its output is a choice.
    /// - `max_message_size` and `max_parsed_cost` are at least 1 (0 refuses every message);
    ///   `incoming_capacity`, `outgoing_capacity`, `diagnostics_capacity` and
    ///   `max_in_flight_requests` at least 1 (0 was raised to 1 unseen);
    ///   `max_pending_requests` at least 1 (0 fails every request of ours at once);
    ///   `remembered_timeouts` at least 1 (0 reports every late answer as one to nothing,
    ///   blaming the other side).
    /// - `max_batch_entries` may be 0 (every batch refused: a side may take none, as
    ///   MCP's later revisions dropped them) and `max_in_flight_bytes` 0 (one request at
    ///   a time, as documented).
    pub fn defects(&self) -> Vec<String> {
        self.defects_named(&|field| format!("PeerConfig.{field}"))
    }

    /// The rule of [`Self::defects`], each field named by `name` (a `HostConfig` names them
    /// `HostConfig.peer.…`).
    pub(crate) fn defects_named(&self, name: &dyn Fn(&'static str) -> String) -> Vec<String> {
        let mut out = Vec::new();
        let timeouts = [
            (
                "request_timeout",
                self.request_timeout,
                "every request would fail at once",
            ),
            (
                "write_timeout",
                self.write_timeout,
                "every write would close the connection",
            ),
            (
                "idle_timeout",
                self.idle_timeout,
                "the connection would close at once",
            ),
        ];
        for (field, timeout, why) in timeouts {
            crate::config_rules::optional_timeout(&mut out, &Named(name, field), timeout, why);
        }
        let never = "every message would be refused";
        let raised = "0 was raised to 1 unseen";
        let counts = [
            ("max_message_size", self.max_message_size, never),
            ("max_parsed_cost", self.max_parsed_cost, never),
            ("incoming_capacity", self.incoming_capacity, raised),
            ("outgoing_capacity", self.outgoing_capacity, raised),
            ("diagnostics_capacity", self.diagnostics_capacity, raised),
            (
                "max_in_flight_requests",
                self.max_in_flight_requests,
                raised,
            ),
            (
                "max_pending_requests",
                self.max_pending_requests,
                "every request would fail at once",
            ),
            (
                "remembered_timeouts",
                self.remembered_timeouts,
                "every late answer would be reported as an answer to nothing",
            ),
        ];
        for (field, value, why) in counts {
            crate::config_rules::count(&mut out, &Named(name, field), value, why);
        }
        out
    }
}
