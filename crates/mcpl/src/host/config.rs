//! What a host connection is configured with, and the application handlers it calls.

use super::*;

/// The application's streaming answer to an `inference/request` with `stream: true`
/// (§11.4): called with the raw params and a [`ChunkSink`] for the `inference/chunk`
/// notifications; the final result it returns is sent after every chunk it sent.
pub type StreamHandler = Arc<dyn Fn(Value, ChunkSink) -> HandlerFuture + Send + Sync>;

/// Sends the `inference/chunk` notifications of one streaming `inference/request` (§11.4):
/// `requestId` is that request's id, `index` counts the chunks sent, from 0. One sender, in
/// order, and only until the final response: a chunk sent after it is refused. Each chunk
/// is an input to the session's state machine ([`crate::session::HostState::inference_chunk`]),
/// which counts it for the one a stream that got none is still owed ([`rules::owed_chunk`]).
/// A chunk that cannot go is refused to the handler ([`ChunkSink::send`]), never absorbed.
pub struct ChunkSink {
    pub(super) cmds: queue::Sender<Cmd>,
    pub(super) request_id: crate::jsonrpc::RequestId,
    /// The hand-out of the request it streams for (`driver::Driver::tasks`).
    pub(super) handout: u64,
    pub(super) sent: u64,
    /// Whether the request asked for a stream (`stream: true`, §11.4): a sink of one that
    /// did not (answered by a `stream_handler` alone) refuses every chunk.
    pub(super) streamed: bool,
}

impl std::fmt::Debug for ChunkSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSink")
            .field("request_id", &self.request_id)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl ChunkSink {
    /// Sends the next text delta; gated per chunk, so a grant narrowed mid-stream stops it.
    /// A delta that cannot go is refused, never absorbed, and not counted: for a request
    /// without `stream: true` (§11.4: chunks only when asked for) with
    /// [`HostError::NotStreamed`] ([`ChunkSink::is_streamed`] tells beforehand; its text
    /// belongs in the result); once the request's response went out (§11.4: no chunk
    /// follows it), or the request ended otherwise (cancelled, its deadline answered it),
    /// with [`HostError::StreamEnded`].
    pub async fn send(&mut self, delta: &str) -> Result<(), HostError> {
        if !self.streamed {
            return Err(HostError::NotStreamed);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cmd = Cmd::Chunk {
            id: self.request_id.clone(),
            handout: self.handout,
            delta: delta.to_owned(),
            reply: tx,
        };
        let closed = || HostError::Peer(PeerError::Closed(CloseReason::Dropped));
        if self.cmds.send(cmd).await.is_err() {
            return Err(closed());
        }
        rx.await.map_err(|_| closed())??;
        self.sent += 1;
        Ok(())
    }

    /// How many chunks were sent.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether the request asked for a stream (`stream: true`, §11.4): only then does
    /// [`ChunkSink::send`] send anything.
    pub fn is_streamed(&self) -> bool {
        self.streamed
    }
}

/// The default of [`HostConfig::max_event_bytes`]: 64 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// A future returned by an application request handler.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

/// The application's answer to server-initiated `inference/request` and `model/info`
/// (§11, §12): called with the method name and raw params, after the grant allowed it.
pub type RequestHandler = Arc<dyn Fn(&str, Value) -> HandlerFuture + Send + Sync>;

tokio::task_local! {
    /// The wire id of the server's request whose handler runs on this task
    /// ([`handled_request_id`]).
    static HANDLED: RequestId;
}

/// The wire id of the server's request (§11, §12; JSON-RPC 2.0 §4) whose handler
/// ([`HostConfig::request_handler`] or [`HostConfig::stream_handler`]) is running, when
/// called from inside it: the handler's call or the future it returned, on the task the
/// session runs it on (`None` in a task it spawns, and anywhere else). A handler's
/// arguments are the method and params only ([`RequestHandler`]'s signature is kept); an
/// application that shows a person which request waits (the inspector's `pending`) reads
/// the id the server sent here, as the server will see it answered.
pub fn handled_request_id() -> Option<RequestId> {
    HANDLED.try_with(Clone::clone).ok()
}

/// Runs a handler's future (`fut`, its call included) for the server's request `id`, with
/// `id` as [`handled_request_id`], catching a panic (the driver answers it `-32603`).
pub(super) async fn handling(
    id: RequestId,
    fut: impl Future<Output = Result<Value, ErrorObject>>,
) -> std::thread::Result<Result<Value, ErrorObject>> {
    use futures_util::FutureExt;
    HANDLED
        .scope(id, std::panic::AssertUnwindSafe(fut).catch_unwind())
        .await
}

/// A callback told every diagnostic of a [`HostSession`] as it is reported, before it is
/// queued on [`HostStreams::diagnostics`] (which it does not replace: a full queue drops
/// there, never here), with the received frame ([`crate::peer::TapEvent::frame`]; in a
/// batch, the entry too, [`RaisedFor`]) whose handling raised it. The session handles
/// received frames one at a time in wire order, so a diagnostic about a frame names that
/// frame, not a later one of the same method the reader already took.
///
/// `None` when no frame the session was handling raised it: a timer, a call of the
/// application, a handler's answer, and the `HostDiagnostic::Connection`s the peer raises
/// from its writer or the application's threads, or about a frame it does not name
/// (`JunkLine`, `ParseError`, `Busy`, `BatchTooLarge`, `Oversized` …). A message the
/// peer's reader refuses as no valid JSON-RPC while taking its frame
/// (`peer::Diagnostic::InvalidMessage`: a batch entry that is no object, say) names that
/// frame and entry.
///
/// Where it runs: a diagnostic of the session's own on the session's task; a connection
/// diagnostic where the peer raises it (its reader or writer task, or the thread of the
/// application's call), inside the peer's diagnostics channel's lock. So it must be quick,
/// must not wait on the session, and must neither send on that connection nor do anything
/// that raises a diagnostic on it (that would wait on the lock it is called under). A
/// connection diagnostic raised after the session's driver ended is not told.
#[derive(Clone)]
pub struct DiagnosticTap(pub(super) Arc<DiagnosticFn>);

/// What a [`DiagnosticTap`] calls: the diagnostic and the received frame it was raised for.
pub type DiagnosticFn = dyn Fn(&HostDiagnostic, Option<RaisedFor>) + Send + Sync;

/// The received frame a diagnostic was raised for ([`DiagnosticTap`]): its number
/// ([`crate::peer::TapEvent::frame`]) and, for an entry of a batch, the entry's index
/// (JSON-RPC 2.0 §6), since every entry of a batch shares the batch's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaisedFor {
    /// The frame's number on the connection.
    pub frame: u64,
    /// The index of the batch entry being handled ([`crate::peer::Incoming::entry`]);
    /// `None` for a frame that is no batch.
    pub entry: Option<usize>,
}

impl DiagnosticTap {
    /// Wraps a callback.
    pub fn new(f: impl Fn(&HostDiagnostic, Option<RaisedFor>) + Send + Sync + 'static) -> Self {
        DiagnosticTap(Arc::new(f))
    }
}

impl std::fmt::Debug for DiagnosticTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DiagnosticTap(..)")
    }
}

/// Configuration of one host connection.
#[derive(Clone)]
pub struct HostConfig {
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version` sent in `initialize`.
    pub client_version: String,
    /// MCP `protocolVersion` sent in `initialize`
    /// ([`MCP_PROTOCOL_VERSION`](crate::protocol::handshake::MCP_PROTOCOL_VERSION) by default).
    pub protocol_version: String,
    /// Host policy: capability patterns (§5.4 `*` matching); the grant is advertised ∩ these.
    /// An entry that is malformed or names no path ([`crate::capability::Grant::from_policy`]:
    /// `channels`, `contextHooks.*`, a typo) fails [`HostSession::connect`] with
    /// [`HostError::Policy`] saying what to write.
    pub policy: Vec<String>,
    /// `enabled` allowlist of feature-set names sent with the grant (`None` omits it).
    pub enabled: Option<Vec<String>>,
    /// `disabled` feature-set names sent with the grant.
    pub disabled: Vec<String>,
    /// Channel ids this host accepts registrations for (`*` as a trailing wildcard); `None`
    /// accepts any id the grant allows. Each entry is an exact id or a prefix followed by
    /// one `*` (an empty entry, or a `*` anywhere else, is refused: it would match only
    /// itself; [`HostConfig::defects`]).
    pub channel_patterns: Option<Vec<String>>,
    /// How long to wait for the `initialize` response.
    pub initialize_timeout: Duration,
    /// How long to wait for a `featureSets/update` receipt before deciding without it.
    pub policy_timeout: Duration,
    /// Per-hook timeout of `context/beforeInference` (§10.1); 5 s by default.
    pub hook_timeout: Duration,
    /// How long to wait for `mcpl/manifest`.
    pub manifest_timeout: Duration,
    /// §17.8 token bucket: burst size.
    pub manifest_fetch_burst: u32,
    /// §17.8 token bucket: tokens per second, finite and at least 0 (0: no refill, at most
    /// `manifest_fetch_burst` fetches on the connection).
    pub manifest_fetch_per_sec: f64,
    /// Consecutive unparseable manifests after which MCPL is suspended (at least 2, §17.5).
    pub suspend_after_failures: u32,
    /// Capacity of the event stream; a full stream refuses new push events. At least 1
    /// (0 would deliver nothing: refused, [`HostConfig::defects`]).
    pub event_capacity: usize,
    /// Most bytes of events the event stream holds for the application
    /// ([`HostEvent::weight`]: what a push's params or a channel message hold parsed, with
    /// its strings and tags; [`DEFAULT_MAX_EVENT_BYTES`], 64 MiB, by default). Past it a
    /// `push/event` is answered `accepted: false, reason: "host_busy"` and a
    /// `channels/incoming` message likewise, as when the stream is full; one event larger
    /// than this is still taken when the stream is empty. §9 sets no size: without it,
    /// `event_capacity` events of up to a whole message each waited for a slow
    /// application (1,024 × 16 MiB).
    pub max_event_bytes: usize,
    /// Capacity of the diagnostics stream; excess diagnostics are dropped and
    /// counted ([`HostDiagnostic::DiagnosticsDropped`]). At least 2 (a smaller value is
    /// refused, [`HostConfig::defects`]): the count needs a slot beside the diagnostic it
    /// precedes.
    pub diagnostics_capacity: usize,
    /// Remembered `eventId`s for §9.4 deduplication (oldest forgotten first). At least 1:
    /// 0 would remember none, which §9.4's SHOULD argues against, and was quietly read as 1
    /// (refused, [`HostConfig::defects`]).
    pub dedupe_window: usize,
    /// Longest `eventId` a `push/event` may carry, in UTF-8 bytes; a longer one is refused
    /// with `-32602` and `data: { limit, length }` (1,024 by default). §9.4 leaves the id's
    /// length open; this bounds what deduplication remembers to `dedupe_window` × this.
    /// At least 1: 0 would refuse every `push/event` (§9.2 requires an `eventId`).
    pub max_event_id_bytes: usize,
    /// Handler for `inference/request` and `model/info` (§11, §12). With `None`, `model/info`
    /// is not served, nor is `inference/request` unless a `stream_handler` is set: what is
    /// not served (`modelInfo`; `inferenceRequest` and its `streaming` leaf) is left out of
    /// what the host advertises and grants whatever `policy` says (§5.4), a policy entry
    /// naming only such capabilities reported ([`HostDiagnostic::NotServed`]).
    pub request_handler: Option<RequestHandler>,
    /// How long a handler (`request_handler`, `stream_handler`) may take to answer a
    /// server request: past it the server is answered `-32603` with
    /// `data: { reason: "answer_timeout", timeoutMs }`, the handler is stopped (at its next
    /// `.await`, as for a request the server cancels) and
    /// [`HostDiagnostic::AnswerTimedOut`] is reported. 120 s by default
    /// ([`crate::session::DEFAULT_ANSWER_TIMEOUT`]); `None` sets no deadline (a handler
    /// that never answers then holds the request, and its slot in `event_capacity`, until
    /// the server cancels it or the connection ends); `Some` is at least 1 ms.
    pub answer_timeout: Option<Duration>,
    /// Handler for `inference/request` with `stream: true` (§11.4), once the streaming leaf
    /// is granted; without one such a request goes to `request_handler`, and its final text
    /// is sent as a single chunk before the response. Without a `request_handler` it
    /// answers every `inference/request`: one without `stream: true` gets its final result
    /// and none of its chunks (its [`ChunkSink`] refuses them, [`HostError::NotStreamed`]).
    pub stream_handler: Option<StreamHandler>,
    /// Told every diagnostic with the received frame it was raised for ([`DiagnosticTap`]);
    /// none by default.
    pub diagnostic_tap: Option<DiagnosticTap>,
    /// Most descriptors one `channels/register` or `channels/changed` may carry (all lists
    /// counted together); a larger message is refused whole with `-32602` and
    /// `data: { limit, count }` (1,024 by default). At least 1: 0 would refuse every one
    /// that carries a descriptor, while the grant lets the server send it.
    pub max_channels_per_message: usize,
    /// Most messages one `channels/incoming` may carry; a larger batch is refused whole with
    /// `-32602` and `data: { limit, count }` (1,024 by default). At least 1: 0 would refuse
    /// every batch (not taking messages is said by leaving `channels.incoming` out of
    /// `policy`).
    pub max_incoming_per_batch: usize,
    /// Most `contextInjections` one `context/beforeInference` answer may carry (§10; 1,024
    /// by default). A larger answer is refused whole, before any entry is judged: a
    /// [`HostDiagnostic::HookFailed`] and a [`HookFailure`] naming the count and the limit,
    /// nothing accepted from that server for the round. §10 sets no number; this bounds
    /// what one answer makes the host build. At least 1: 0 would fail every answer that
    /// injects, blaming the server; a host that takes no injections leaves the
    /// `contextHooks.beforeInference.inject.*` leaves out of `policy` (§5.4).
    pub max_injections_per_hook: usize,
    /// Most feature sets (`featureSets` entries, §6.1) a server's manifest may carry,
    /// wherever the host reads one (1,024 by default,
    /// [`crate::manifest::DEFAULT_MAX_FEATURE_SETS`]); a larger one is refused before it is
    /// copied or reviewed. In the `initialize` result, the server is served as plain MCP
    /// ([`McpOnlyReason::TooManyFeatureSets`](crate::session::McpOnlyReason::TooManyFeatureSets),
    /// the `too_many_feature_sets` finding reported:
    /// nothing reviewed, nothing granted, fail closed, its MCP connection kept);
    /// in an `mcpl/manifest` answer, a [`HostDiagnostic::ManifestFetchFailed`] names the
    /// count and the limit and only the manifest's removals are applied (§17.5 step 1: it
    /// parses, so a capability or set it drops is revoked; of its sets only those in force
    /// are read, and nothing it adds is taken).
    /// `mcpl/manifestChanged` carries no manifest (§17.3), only the fetch it prompts.
    /// At least 1: 0 would refuse every MCPL server that declares a set, at connect.
    pub max_feature_sets: usize,
    /// Most channels one connection may hold registered at once (4,096 by default). A
    /// descriptor that would add a channel past it is rejected item-wise with reason
    /// `channel_limit` (§14.5 itemized results); updates and removals are unaffected.
    /// At least 1: 0 is not "no channels" (that is `channels.*` left out of `policy`, or
    /// `channel_patterns: Some(vec![])`), it would tell a server granted channels that it
    /// hit a limit.
    pub max_channels: usize,
    /// Largest encoded size of one channel descriptor (compact JSON, in bytes); a larger one
    /// is rejected item-wise with reason `invalid_descriptor` (§14.5 itemized results;
    /// 4,096 by default). §14.2 sets no size; this bounds what a connection's registered
    /// channels hold to `max_channels` × this. At least 1: 0 would reject every descriptor.
    pub max_descriptor_bytes: usize,
    /// Configuration of the underlying peer (used by [`HostSession::connect`]); judged
    /// with the rest ([`PeerConfig::defects`], under `HostConfig.peer.…`).
    pub peer: PeerConfig,
}

/// The defaults are the core's ([`crate::session::HostRules::new`],
/// [`crate::session::ChannelLimits`]'s `Default`), written once there.
impl Default for HostConfig {
    fn default() -> Self {
        let r = crate::session::HostRules::new(Vec::<String>::new());
        HostConfig {
            client_name: r.client_name,
            client_version: r.client_version,
            protocol_version: r.protocol_version,
            policy: r.policy,
            enabled: r.enabled,
            disabled: r.disabled,
            channel_patterns: r.channels.patterns,
            initialize_timeout: r.initialize_timeout,
            policy_timeout: r.policy_timeout,
            hook_timeout: r.hook_timeout,
            manifest_timeout: r.manifest_timeout,
            manifest_fetch_burst: r.manifest_fetch_burst,
            manifest_fetch_per_sec: r.manifest_fetch_per_sec,
            suspend_after_failures: r.suspend_after_failures,
            event_capacity: r.max_pending_outputs,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            diagnostics_capacity: 1024,
            dedupe_window: r.dedupe_window,
            max_event_id_bytes: r.max_event_id_bytes,
            request_handler: None,
            answer_timeout: r.answer_timeout,
            stream_handler: None,
            diagnostic_tap: None,
            max_channels_per_message: r.channels.max_per_message,
            max_incoming_per_batch: r.channels.max_incoming_per_batch,
            max_injections_per_hook: r.max_injections_per_hook,
            max_feature_sets: r.max_feature_sets,
            max_channels: r.channels.max_channels,
            max_descriptor_bytes: r.channels.max_descriptor_bytes,
            peer: PeerConfig::default(),
        }
    }
}

impl HostConfig {
    /// Every value of this configuration that cannot work, each naming its field, what it
    /// holds and what to write; empty when there is none. [`HostSession::connect`] refuses a
    /// configuration with any ([`HostError::InvalidConfig`]) before anything is sent.
    ///
    /// The rule is the core's ([`crate::session::HostRules::defects`], which
    /// [`crate::session::HostState::new`] applies: its readings are there), under this
    /// configuration's field names, the peer's ([`PeerConfig::defects`]) for `peer`, and
    /// for the fields that are this one's alone: `max_event_bytes` is at least 1 (0 would
    /// hold one event at a time) and `diagnostics_capacity` at least 2 (it was raised to 2
    /// unseen).
    pub fn defects(&self) -> Vec<String> {
        let mut out = self.rules().defects_named(&|field| {
            let own = match field {
                "max_pending_outputs" => "event_capacity",
                "channels.max_channels" => "max_channels",
                "channels.max_per_message" => "max_channels_per_message",
                "channels.max_incoming_per_batch" => "max_incoming_per_batch",
                "channels.max_descriptor_bytes" => "max_descriptor_bytes",
                "channels.patterns" => "channel_patterns",
                other => other,
            };
            format!("HostConfig.{own}")
        });
        out.extend(
            self.peer
                .defects_named(&|field| format!("HostConfig.peer.{field}")),
        );
        if self.diagnostics_capacity < 2 {
            out.push(format!(
                "HostConfig.diagnostics_capacity is {}: give at least 2 (a count of dropped \
                 diagnostics needs a slot beside the diagnostic it precedes; 1,024 by default)",
                self.diagnostics_capacity
            ));
        }
        if self.max_event_bytes == 0 {
            out.push(
                "HostConfig.max_event_bytes is 0: give at least 1 (nothing could ever pass; \
                 64 MiB by default)"
                    .to_owned(),
            );
        }
        out
    }

    /// The channel bounds and patterns of this configuration (§14.5).
    pub fn channel_limits(&self) -> crate::session::ChannelLimits {
        crate::session::ChannelLimits {
            patterns: self.channel_patterns.clone(),
            max_channels: self.max_channels,
            max_per_message: self.max_channels_per_message,
            max_incoming_per_batch: self.max_incoming_per_batch,
            max_descriptor_bytes: self.max_descriptor_bytes,
        }
    }

    /// The protocol-relevant part of this configuration, for a sans-I/O
    /// [`crate::session::HostState`] that decides as this session does.
    pub fn rules(&self) -> crate::session::HostRules {
        crate::session::HostRules {
            client_name: self.client_name.clone(),
            client_version: self.client_version.clone(),
            protocol_version: self.protocol_version.clone(),
            policy: self.policy.clone(),
            enabled: self.enabled.clone(),
            disabled: self.disabled.clone(),
            initialize_timeout: self.initialize_timeout,
            policy_timeout: self.policy_timeout,
            dedupe_window: self.dedupe_window,
            max_event_id_bytes: self.max_event_id_bytes,
            max_feature_sets: self.max_feature_sets,
            channels: self.channel_limits(),
            manifest_timeout: self.manifest_timeout,
            manifest_fetch_burst: self.manifest_fetch_burst,
            manifest_fetch_per_sec: self.manifest_fetch_per_sec,
            suspend_after_failures: self.suspend_after_failures,
            hook_timeout: self.hook_timeout,
            max_injections_per_hook: self.max_injections_per_hook,
            max_pending_outputs: self.event_capacity,
            answer_timeout: self.answer_timeout,
            unserved: self.unserved(),
        }
    }

    /// What no handler of this configuration answers (§11, §12), left out of every grant
    /// ([`crate::session::HostRules::unserved`]): each capability whose request finds no
    /// handler by [`handler_for`], the one rule the driver routes by. So `modelInfo`
    /// without a `request_handler`; `inferenceRequest` and `inferenceRequest.streaming`
    /// without it and without a `stream_handler` (which alone answers every
    /// `inference/request`, one without `stream: true` getting its final result and no
    /// chunk).
    fn unserved(&self) -> crate::capability::CapabilitySet {
        use crate::capability::{Capability as C, CapabilitySet};
        use crate::protocol::{inference::InferenceRequest, model::ModelInfoRequest};
        [
            (C::ModelInfo, ModelInfoRequest::NAME, false),
            (C::InferenceRequest, InferenceRequest::NAME, false),
            (C::InferenceRequestStreaming, InferenceRequest::NAME, true),
        ]
        .into_iter()
        .filter(|(_, method, streamed)| {
            let handlers = (&self.request_handler, &self.stream_handler);
            handler_for(handlers, method, *streamed).is_none()
        })
        .fold(CapabilitySet::EMPTY, |set, (c, _, _)| set.with(c))
    }
}

/// The handler of `handlers` (a `request_handler` and a `stream_handler`) that answers a
/// server's `method` request (`streamed`: an `inference/request` with `stream: true`,
/// §11.4): the stream handler for a streamed one, or for any `inference/request` when
/// there is no request handler; else the request handler. The one rule the driver routes
/// by and [`HostConfig::unserved`] reads what is served from.
pub(super) fn handler_for(
    (request, stream): (&Option<RequestHandler>, &Option<StreamHandler>),
    method: &str,
    streamed: bool,
) -> Option<Handler> {
    let inference = method == crate::protocol::inference::InferenceRequest::NAME;
    let to_stream = streamed || (inference && request.is_none());
    match (stream, request) {
        (Some(h), _) if to_stream => Some(Handler::Stream(h.clone())),
        (_, Some(h)) => Some(Handler::Request(h.clone())),
        _ => None,
    }
}

/// The handler a server's request goes to ([`handler_for`]).
pub(super) enum Handler {
    /// [`HostConfig::stream_handler`].
    Stream(StreamHandler),
    /// [`HostConfig::request_handler`].
    Request(RequestHandler),
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("client_name", &self.client_name)
            .field("policy", &self.policy)
            .field("policy_timeout", &self.policy_timeout)
            .field("hook_timeout", &self.hook_timeout)
            .finish_non_exhaustive()
    }
}
