//! The host session: policy exchange, enforcement, hook fan-out, lifecycle and manifest
//! review over a live connection.
//!
//! [`HostSession::connect`] runs the MCP handshake from the host side (`initialize`
//! advertising MCPL under `capabilities.experimental.mcpl`, §5.2; `notifications/initialized`)
//! and then the initial policy exchange (§5.3): a `featureSets/update` **Request** carrying
//! the effective grant, sent even when nothing is enabled or disabled. Until its receipt
//! arrives every privileged inbound method is rejected with `-32002`.
//!
//! The session is the runtime driver of the pure core: the grant comes from
//! [`HostGrant::compute`], inbound methods are checked through
//! [`policy::method_requirement`], injections through [`policy::authorize_injection`],
//! receipts through [`policy::parse_receipt`], fetched manifests through
//! [`ManifestReview`] and the fetch rate through [`FetchLimiter`].
//!
//! What the application sees: a [`HostEvent`] stream (admitted push events and channel
//! messages, manifest change receipts, policy decisions) and a [`HostDiagnostic`] stream
//! (every defect of the server), both handed out by `connect` in [`HostStreams`].
//!
//! Readings where the spec leaves a choice (each failing closed):
//! - A server without `experimental.mcpl` is MCP-only (§3.3); its grant holds at most
//!   `tools`, and no policy Request is sent (there is no MCPL to configure).
//! - A `-32601`, any other error, a timeout, or an unusable (fatally malformed) receipt to the
//!   initial policy Request all end in a recorded MCP-only decision ([`Mode::McpOnly`]);
//!   MCP-only keeps `tools` only. After a timeout, an error or an unusable receipt the
//!   server may believe the grant it was told, so the reduction is told by a second Request
//!   (§6.7), bounded by [`HostConfig::policy_timeout`] like every policy Request; after a
//!   `-32601` or a refusal with `fallback: "mcp-only"` the server chose the outcome itself
//!   and nothing more is sent.
//! - A refusal with `fallback: "close"` closes the connection and `connect` fails with
//!   [`HostError::Refused`].
//! - A duplicate `push/event` (same `eventId`, §9.4) is answered `accepted: true` with
//!   `reason: "duplicate"` (the event was delivered once; a retry is acknowledged, not
//!   redelivered) and reported as [`HostDiagnostic::DuplicateEvent`].
//! - A `push/event` whose `eventId` is longer than [`HostConfig::max_event_id_bytes`] is
//!   refused with `-32602` (§9.4 sets no length; what deduplication remembers stays bounded),
//!   and a channel descriptor whose encoding exceeds [`HostConfig::max_descriptor_bytes`]
//!   is rejected item-wise as `invalid_descriptor` (§14.2 sets no size).
//! - A `push/event` the application's event queue cannot take is answered `accepted: false,
//!   reason: "host_busy"`, never blocking the connection.
//! - Channel descriptors are authorized individually (§14.5) against the grant and the
//!   host's channel patterns ([`HostConfig::channel_patterns`]); rejected descriptors carry
//!   `reason: "capability_denied"` or `"invalid_descriptor"`. `channels/incoming` results
//!   carry the Appendix A code of each rejection in an extra `code` member (`-32023` for a
//!   channel this connection never registered, `-32017` for one no longer permitted).
//! - A lifecycle terminal of a turn whose `inferenceLifecycle` grant was revoked meanwhile is
//!   not sent (outbound gating wins) and reported; the server's safety timeout covers it.
//! - A refusal (`accepted: false`) to a later policy Request applies its `fallback` too;
//!   an unanswered or unusable later receipt leaves narrowing in force and never activates
//!   a widening ([`PolicyChange::not_activated`]).
//! - A manifest change that removes capabilities narrows host-side, then sends the policy
//!   Request; one that only adds never sends one (additions wait for [`HostSession::set_policy`]).
//!   `suspend_after_failures` consecutive unparseable manifests (at least 2) suspend MCPL.
//! - `channels/changed` removals of a channel this connection registered are always applied
//!   (a removal narrows), even once `channels.register` is no longer granted: the message is
//!   then answered item-wise, its additions and updates rejected as `capability_denied`
//!   rather than the whole message refused with `-32002`; an `updated` descriptor no longer
//!   permitted removes the channel.
//! - MCP `notifications/*/list_changed` and `channels/changed` produce a `surface-changed`
//!   receipt on the same event stream (§17.7).
//!
//! The application answers server-initiated `inference/request` and `model/info` through
//! [`HostConfig::request_handler`] (streamed ones through [`HostConfig::stream_handler`] and
//! a [`ChunkSink`]); [`before_inference`] fans a hook out over several
//! sessions; [`HostSession::start_turn`] returns a [`Turn`] guard for §10.5 lifecycle
//! emission and [`HostSession::outgoing_stream`] an [`OutgoingStream`] for §14.3;
//! [`HostSession::request`]/[`HostSession::notify`] are the gated outbound path; a
//! [`Supervisor`] keeps one server connected, re-dialling with a [`Backoff`].

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::capability::{
    self, Capability, CapabilitySet, Denied, Grant, PatternError, Requirement,
};
use crate::jsonrpc::{codes, ErrorObject, Notification};
use crate::manifest::review::{
    ChangeReceipt, FetchDecision, FetchLimiter, FetchResult, ManifestReview,
};
use crate::peer::{IncomingMessage, IncomingRequest, Peer, PeerConfig, PeerError, RequestOptions};
use crate::policy::{self, Fallback, HostGrant, Receipt, SetRefusal};
use crate::protocol::{Direction, Method};
use crate::tags::{AdmittedEvent, ExpandedTags, OntologyAcceptance, TagIssue, TagOntology, TagSet};
use crate::transport::Transport;

mod supervisor;
pub use supervisor::{Backoff, Supervisor, SupervisorEvent, EVENT_CAPACITY};

/// The application's streaming answer to an `inference/request` with `stream: true`
/// (§11.4): called with the raw params and a [`ChunkSink`] for the `inference/chunk`
/// notifications; the final result it returns is sent after every chunk it sent.
pub type StreamHandler = Arc<dyn Fn(Value, ChunkSink) -> HandlerFuture + Send + Sync>;

/// Sends the `inference/chunk` notifications of one streaming `inference/request` (§11.4):
/// `requestId` is that request's id, `index` counts the chunks sent, from 0. One sender, in
/// order, and only until the final response: a chunk sent after it is refused.
#[derive(Debug)]
pub struct ChunkSink {
    session: HostSession,
    request_id: crate::jsonrpc::RequestId,
    next: u64,
    ended: Arc<AtomicBool>,
}

impl ChunkSink {
    /// Sends the next text delta; gated per chunk, so a grant narrowed mid-stream stops it.
    pub async fn send(&mut self, delta: &str) -> Result<(), HostError> {
        if self.ended.load(Ordering::SeqCst) {
            return Err(HostError::StreamEnded);
        }
        let params = json!({ "requestId": self.request_id.to_value(), "index": self.next,
                             "delta": delta });
        self.session.notify_gated("inference/chunk", params).await?;
        self.next += 1;
        Ok(())
    }

    /// How many chunks were sent.
    pub fn sent(&self) -> u64 {
        self.next
    }
}

/// The generated text of an `inference/request` result (§11.3 `content`: a string, or
/// content blocks whose text blocks are joined); `None` when there is none.
fn result_text(result: &Value) -> Option<String> {
    let text = match result.get("content")? {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// A future returned by an application request handler.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

/// The application's answer to server-initiated `inference/request` and `model/info`
/// (§11, §12): called with the method name and raw params, after the grant allowed it.
pub type RequestHandler = Arc<dyn Fn(&str, Value) -> HandlerFuture + Send + Sync>;

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
    pub policy: Vec<String>,
    /// `enabled` allowlist of feature-set names sent with the grant (`None` omits it).
    pub enabled: Option<Vec<String>>,
    /// `disabled` feature-set names sent with the grant.
    pub disabled: Vec<String>,
    /// Channel ids this host accepts registrations for (`*` as a trailing wildcard); `None`
    /// accepts any id the grant allows.
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
    /// §17.8 token bucket: tokens per second.
    pub manifest_fetch_per_sec: f64,
    /// Consecutive unparseable manifests after which MCPL is suspended (at least 2, §17.5).
    pub suspend_after_failures: u32,
    /// Capacity of the event stream; a full stream refuses new push events.
    pub event_capacity: usize,
    /// Capacity of the diagnostics stream; excess diagnostics are dropped (still logged).
    pub diagnostics_capacity: usize,
    /// Remembered `eventId`s for §9.4 deduplication (oldest forgotten first).
    pub dedupe_window: usize,
    /// Longest `eventId` a `push/event` may carry, in UTF-8 bytes; a longer one is refused
    /// with `-32602` and `data: { limit, length }` (1,024 by default). §9.4 leaves the id's
    /// length open; this bounds what deduplication remembers to `dedupe_window` × this.
    pub max_event_id_bytes: usize,
    /// Handler for `inference/request` and `model/info`; `None` answers `-32601`.
    pub request_handler: Option<RequestHandler>,
    /// Handler for `inference/request` with `stream: true` (§11.4), once the streaming leaf
    /// is granted; without one such a request goes to `request_handler`, and its final text
    /// is sent as a single chunk before the response.
    pub stream_handler: Option<StreamHandler>,
    /// Most descriptors one `channels/register` or `channels/changed` may carry (all lists
    /// counted together); a larger message is refused whole with `-32602` and
    /// `data: { limit, count }` (1,024 by default).
    pub max_channels_per_message: usize,
    /// Most messages one `channels/incoming` may carry; a larger batch is refused whole with
    /// `-32602` and `data: { limit, count }` (1,024 by default).
    pub max_incoming_per_batch: usize,
    /// Most `contextInjections` one `context/beforeInference` answer may carry (§10; 1,024
    /// by default). A larger answer is refused whole, before any entry is judged: a
    /// [`HostDiagnostic::HookFailed`] and a [`HookFailure`] naming the count and the limit,
    /// nothing accepted from that server for the round. §10 sets no number; this bounds
    /// what one answer makes the host build.
    pub max_injections_per_hook: usize,
    /// Most feature sets (`featureSets` entries, §6.1) a server's manifest may carry,
    /// wherever the host reads one (1,024 by default,
    /// [`crate::manifest::DEFAULT_MAX_FEATURE_SETS`]); a larger one is refused before it is
    /// copied or reviewed. In the `initialize` result, [`HostSession::connect`] fails with
    /// [`HostError::TooManyFeatureSets`] (nothing reviewed, nothing granted: fail closed);
    /// in an `mcpl/manifest` answer, a [`HostDiagnostic::ManifestFetchFailed`] names the
    /// count and the limit and the manifest in force stands, as for a failed fetch (§17.5).
    /// `mcpl/manifestChanged` carries no manifest (§17.3), only the fetch it prompts.
    pub max_feature_sets: usize,
    /// Most channels one connection may hold registered at once (4,096 by default). A
    /// descriptor that would add a channel past it is rejected item-wise with reason
    /// `channel_limit` (§14.5 itemized results); updates and removals are unaffected.
    pub max_channels: usize,
    /// Largest encoded size of one channel descriptor (compact JSON, in bytes); a larger one
    /// is rejected item-wise with reason `invalid_descriptor` (§14.5 itemized results;
    /// 4,096 by default). §14.2 sets no size; this bounds what a connection's registered
    /// channels hold to `max_channels` × this.
    pub max_descriptor_bytes: usize,
    /// Configuration of the underlying peer (used by [`HostSession::connect`]).
    pub peer: PeerConfig,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            client_name: "mcpl-host".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: crate::protocol::handshake::MCP_PROTOCOL_VERSION.into(),
            policy: Vec::new(),
            enabled: None,
            disabled: Vec::new(),
            channel_patterns: None,
            initialize_timeout: Duration::from_secs(30),
            policy_timeout: Duration::from_secs(10),
            hook_timeout: Duration::from_secs(5),
            manifest_timeout: Duration::from_secs(10),
            manifest_fetch_burst: 3,
            manifest_fetch_per_sec: 0.2,
            suspend_after_failures: 3,
            event_capacity: 1024,
            diagnostics_capacity: 1024,
            dedupe_window: 10_000,
            max_event_id_bytes: 1024,
            request_handler: None,
            stream_handler: None,
            max_channels_per_message: 1024,
            max_incoming_per_batch: 1024,
            max_injections_per_hook: 1024,
            max_feature_sets: crate::manifest::DEFAULT_MAX_FEATURE_SETS,
            max_channels: 4096,
            max_descriptor_bytes: 4096,
            peer: PeerConfig::default(),
        }
    }
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

/// Why the session runs without MCPL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpOnlyReason {
    /// The server did not advertise `experimental.mcpl` (§3.3).
    NotAdvertised,
    /// The server answered the policy Request with `-32601`: a 0.4-era server.
    PolicyMethodNotFound,
    /// The policy Request was not answered in time.
    PolicyTimeout,
    /// The policy Request failed otherwise (another error, an unusable receipt).
    PolicyFailed(String),
    /// The server refused with `fallback: "mcp-only"` (§6.7).
    Refused,
    /// Repeated unparseable manifests (§17.5).
    Suspended,
}

impl std::fmt::Display for McpOnlyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpOnlyReason::NotAdvertised => {
                f.write_str("the server does not advertise experimental.mcpl, §3.3")
            }
            McpOnlyReason::PolicyMethodNotFound => f.write_str(
                "the server answered the policy Request with -32601: it predates MCPL 0.5",
            ),
            McpOnlyReason::PolicyTimeout => f.write_str(
                "the policy Request was not answered in time: raise HostConfig.policy_timeout",
            ),
            McpOnlyReason::PolicyFailed(why) => write!(f, "the policy Request failed: {why}"),
            McpOnlyReason::Refused => {
                f.write_str("the server refused the policy with fallback \"mcp-only\", §6.7")
            }
            McpOnlyReason::Suspended => {
                f.write_str("MCPL was suspended after repeated unparseable manifests, §17.5")
            }
        }
    }
}

/// The session's mode: a recorded decision, never an accident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// MCPL is active under the current grant.
    Mcpl,
    /// MCPL is disabled; MCP tools/resources/prompts remain (§3.2).
    McpOnly(McpOnlyReason),
}

/// A defect of the server or of the connection, also logged through `tracing`.
#[derive(Debug, Clone, PartialEq)]
pub enum HostDiagnostic {
    /// A privileged method arrived before the initial receipt (§5.3).
    PrivilegedBeforeReady {
        /// The method.
        method: String,
    },
    /// A method arrived whose capability is not granted.
    CapabilityDenied {
        /// The method.
        method: String,
        /// The missing capability.
        capability: Capability,
    },
    /// A method the host does not receive (unknown or host → server).
    UnexpectedMethod {
        /// The method.
        method: String,
    },
    /// Params of a server message were malformed.
    BadParams {
        /// The method.
        method: String,
        /// What was wrong.
        detail: String,
    },
    /// A `push/event` repeated an `eventId` (§9.4) and was not redelivered.
    DuplicateEvent {
        /// The repeated id.
        event_id: String,
    },
    /// A feature set's `uses` does not declare the capability it exercised (§6.4).
    DeclarationMismatch {
        /// The method.
        method: String,
        /// The feature set.
        feature_set: String,
        /// Paths missing from `uses`.
        missing: Vec<&'static str>,
    },
    /// A tag on an admitted message was malformed and ignored (§16).
    TagIssue {
        /// The method.
        method: String,
        /// The issue.
        issue: String,
    },
    /// A receipt shape defect (§6.7).
    ReceiptDefect {
        /// Machine code from [`policy::ReceiptDefect`].
        code: &'static str,
        /// Where.
        path: String,
    },
    /// A channel descriptor or message was rejected (itemized; §14.5).
    ChannelRejected {
        /// The method.
        method: String,
        /// Channel (or message) id.
        id: String,
        /// Reason code.
        reason: &'static str,
        /// Whether it came as a Notification and was filtered silently on the wire.
        filtered_notification: bool,
    },
    /// A manifest validation finding (§17.5 step 1).
    ManifestFinding {
        /// Finding code.
        code: &'static str,
        /// Dotted path.
        path: String,
        /// Message.
        message: String,
    },
    /// A manifest conformance defect (digest mismatch, §17.2).
    ManifestDefect {
        /// Code.
        code: &'static str,
        /// Message.
        message: String,
    },
    /// A fetched manifest did not parse; the previous one stands (§17.5).
    ManifestUnparseable {
        /// Code.
        code: &'static str,
        /// Consecutive failures so far.
        consecutive_failures: u32,
    },
    /// `mcpl/manifestChanged` over the rate limit, dropped (§17.8).
    ManifestFetchDropped {
        /// Total dropped on this connection.
        dropped_total: u64,
    },
    /// `mcpl/manifest` failed.
    ManifestFetchFailed {
        /// Why.
        detail: String,
    },
    /// A `context/beforeInference` call failed or timed out (fail-open).
    HookFailed {
        /// Server label.
        server: String,
        /// Why.
        detail: String,
    },
    /// An injection was rejected by its position (§5.4).
    InjectionRejected {
        /// Server label.
        server: String,
        /// Why.
        reason: String,
    },
    /// A lifecycle terminal could not be sent.
    LifecycleNotSent {
        /// The inference id.
        inference_id: String,
        /// Why.
        detail: String,
    },
    /// A `channels/outgoing/complete` owed by a dropped [`OutgoingStream`] could not be sent.
    OutgoingNotCompleted {
        /// The inference id.
        inference_id: String,
        /// The channel.
        channel_id: String,
        /// Why.
        detail: String,
    },
    /// A connection-level defect from the peer (junk lines, late responses…).
    Connection(crate::peer::Diagnostic),
}

/// Something the application should act on.
#[derive(Debug, Clone, PartialEq)]
pub enum HostEvent {
    /// An admitted `push/event` (§9) with its closure-expanded tags (§16.3).
    Push {
        /// The raw params.
        params: Value,
        /// `featureSet`.
        feature_set: String,
        /// `eventId`.
        event_id: String,
        /// Expanded tags.
        tags: ExpandedTags,
    },
    /// An admitted `channels/incoming` message (§14.4) with its expanded tags.
    ChannelMessage {
        /// The registered channel id.
        channel_id: String,
        /// The raw message object.
        message: Value,
        /// Expanded tags.
        tags: ExpandedTags,
    },
    /// One receipt per manifest change (§17.6).
    ManifestChange(ChangeReceipt),
    /// The mode changed (e.g. to MCP-only), a recorded decision.
    ModeChanged(Mode),
}

/// The application's side of a session: events and diagnostics.
#[derive(Debug)]
pub struct HostStreams {
    /// Admitted events, manifest receipts and mode changes.
    pub events: mpsc::Receiver<HostEvent>,
    /// Defects of the server and the connection.
    pub diagnostics: mpsc::Receiver<HostDiagnostic>,
}

/// Refuses a peer-supplied manifest with more feature sets than `limit`
/// ([`HostConfig::max_feature_sets`]), counted without building anything: the same bound
/// wherever the host reads a manifest (the `initialize` result, an `mcpl/manifest` answer).
fn within_feature_set_bound(manifest: &Value, limit: usize) -> Result<(), HostError> {
    let count = crate::manifest::feature_set_count(manifest);
    if count > limit {
        return Err(HostError::TooManyFeatureSets { count, limit });
    }
    Ok(())
}

/// Why a host operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    /// The host's own policy patterns are malformed.
    #[error("HostConfig.policy is malformed: {0}; fix the pattern (an exact capability path, or `prefix.*`, §5.4)")]
    Policy(#[from] PatternError),
    /// The feature-set names to disable are not a valid `disabled` list (§5.3): too many,
    /// or not strings.
    #[error("feature-set names not sent ({0}); give at most 1,024 names or `prefix.*` patterns in total")]
    BadSelection(String),
    /// The connection failed.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// `initialize` returned something unreadable.
    #[error("the server's initialize result is unusable: {0}; the server must answer with a result carrying `capabilities` (MCP, §5.1)")]
    BadInitialize(String),
    /// The server's manifest carries more feature sets than
    /// [`HostConfig::max_feature_sets`]: refused before review. At `initialize` the
    /// connection is not set up (nothing was reviewed, nothing granted); for an
    /// `mcpl/manifest` answer it is reported as [`HostDiagnostic::ManifestFetchFailed`] and
    /// the manifest in force stands (§17.5).
    #[error("the manifest's {count} feature sets exceed the limit of {limit}, so it was not reviewed; raise HostConfig::max_feature_sets if this server is trusted to declare that many")]
    TooManyFeatureSets {
        /// How many `featureSets` entries the manifest carries.
        count: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The server refused the policy with `fallback: "close"`; the connection was closed.
    #[error("the server refused the policy with fallback {0:?} and the connection was closed (§6.7): grant what its manifest requires (see HostSession::manifest), or connect without MCPL")]
    Refused(&'static str),
    /// Refused locally: the server lacks the capability (outbound gating).
    #[error("capability `{0}` is not granted to this server (§5.4): add it to HostConfig.policy, and check that the server advertises it (HostSession::grant shows what is in force)")]
    NotGranted(Capability),
    /// Refused locally: the method is not sent by a host, or not known.
    #[error("{0} is not a method a host sends to a server (§4.1): check the method name and its direction")]
    WrongDirection(String),
    /// The operation needs MCPL, which is not active on this connection.
    #[error("MCPL is not active on this connection ({0}), so only MCP requests can be sent; check HostSession::mode() first")]
    McpOnly(McpOnlyReason),
    /// The params could not be encoded.
    #[error("the params cannot be encoded as JSON: {0}; pass a JSON object")]
    Encode(String),
    /// Refused locally: the method carries host-side obligations that only its dedicated
    /// API keeps (redaction and per-injection judgement, grant bookkeeping, exactly one
    /// terminal phase).
    #[error("{method} cannot be sent raw: call {instead} instead, which keeps the host's obligations for it")]
    UseDedicated {
        /// The method.
        method: String,
        /// What to call instead.
        instead: &'static str,
    },
    /// Refused locally: the channel is not one this server registered, or the host's
    /// channel patterns do not permit it (§14.1, §14.5: channel methods are keyed on the
    /// channel id).
    #[error("channel {0:?} is not one this server registered, or HostConfig.channel_patterns do not permit it (§14.5): use an id from HostSession::channels()")]
    ChannelNotPermitted(String),
    /// The streaming request was already answered: no chunk may follow its response (§11.4).
    #[error(
        "the streamed request was already answered, so nothing more can be streamed on it (§11.4); send every chunk before the stream handler returns its response"
    )]
    StreamEnded,
    /// Refused locally: this session already has an outgoing stream for the inference, open
    /// or ended; a second would restart its `index` and complete its channels twice (§14.3).
    #[error("an outgoing stream for inference {0:?} was already started on this connection (§14.3); keep using the first HostSession::outgoing_stream, or give the new inference its own id")]
    StreamExists(String),
    /// Refused locally: this session already has a lifecycle turn for the inference, open or
    /// ended; a second would send a second `started` and a second terminal for the same
    /// `inferenceId` (§10.5).
    #[error("a lifecycle turn for inference {0:?} was already started on this connection (§10.5); end it through the first HostSession::start_turn's turn, or give the new inference its own id")]
    TurnExists(String),
    /// Refused locally: this channel's `channels/outgoing/complete` was already sent for the
    /// inference, so nothing more may be streamed or completed on it (§14.3: one `complete`
    /// per `(inferenceId, channelId)`, carrying the channel's whole text).
    #[error("channel {channel_id:?} was already completed for inference {inference_id:?}, and §14.3 allows one complete per channel carrying its whole text; send all of it in that one complete")]
    ChannelCompleted {
        /// The inference.
        inference_id: String,
        /// The channel that was completed.
        channel_id: String,
    },
}

/// The result of [`HostSession::set_policy`].
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyChange {
    /// Capabilities removed host-side before the Request went out.
    pub narrowed: CapabilitySet,
    /// Capabilities activated after an accepting receipt.
    pub activated: CapabilitySet,
    /// Capabilities that would widen the grant but did not activate (no accepting receipt).
    pub not_activated: CapabilitySet,
    /// The parsed receipt, when one arrived and was usable.
    pub receipt: Option<Receipt>,
    /// The grant now in force.
    pub grant: Grant,
}

struct State {
    mode: Mode,
    ready: bool,
    grant: Grant,
    policy: Vec<String>,
    review: Option<ManifestReview>,
    last_receipt: Option<Receipt>,
    /// §9.4 dedupe: each remembered id is stored once, shared by the set and the order.
    seen_events: HashSet<Arc<str>>,
    seen_order: VecDeque<Arc<str>>,
    channels: BTreeMap<String, Value>,
    limiter: FetchLimiter,
    announced: Option<String>,
    /// The states recent widenings replaced, for messages read before them.
    before: Widenings,
    /// For each hook request in flight, the wire position when it was sent: its response
    /// comes later, so widening records after it are kept until it is judged.
    hook_pins: Vec<u64>,
    /// Inference ids with an outgoing stream (§14.3) open or recently ended.
    streams: InferenceIds,
    /// Inference ids with a lifecycle turn (§10.5) open or recently ended.
    turns: InferenceIds,
    /// Feature sets disabled later by [`HostSession::disable_by_notification`], sent again in
    /// every later policy Request's `disabled` so a Request never re-enables them.
    disabled_later: Vec<String>,
}

/// How many ended outgoing streams (and, separately, ended lifecycle turns) a session
/// remembers, to refuse restarting one.
const ENDED_IDS_REMEMBERED: usize = 4096;

/// The inference ids a session's outgoing streams, or its lifecycle turns, were started for.
/// Streams (§14.3): `index` is one counter per `inferenceId`, and each channel gets one
/// `complete`; a second stream for the same inference would restart the index at 0 and
/// complete its channels again. Turns (§10.5): one terminal per `started`; a second turn for
/// the same inference would send a second `started` and a second terminal. Either is refused
/// while the first is open and for the last [`ENDED_IDS_REMEMBERED`] ended ones.
#[derive(Debug, Default)]
struct InferenceIds {
    live: HashSet<String>,
    ended: HashSet<String>,
    ended_order: VecDeque<String>,
}

impl InferenceIds {
    /// Claims `inference_id` for a new stream; `false` if it is open or remembered as ended.
    fn start(&mut self, inference_id: &str) -> bool {
        if self.live.contains(inference_id) || self.ended.contains(inference_id) {
            return false;
        }
        self.live.insert(inference_id.to_owned());
        true
    }

    /// Gives up a claim that emitted nothing (its first frame was never queued): the id may
    /// be started again.
    fn release(&mut self, inference_id: &str) {
        self.live.remove(inference_id);
    }

    /// Moves `inference_id` from open to ended, forgetting the oldest ended id past the bound.
    fn end(&mut self, inference_id: &str) {
        if !self.live.remove(inference_id) {
            return;
        }
        self.ended.insert(inference_id.to_owned());
        self.ended_order.push_back(inference_id.to_owned());
        while self.ended_order.len() > ENDED_IDS_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

impl State {
    /// Puts `ready` and `grant` in force for messages read at wire position `boundary` or
    /// later; a message read earlier keeps being judged under the previous state too.
    fn set_in_force(&mut self, boundary: u64, ready: bool, grant: Grant) {
        self.before
            .record(boundary, (self.ready, self.grant), (ready, grant));
        self.ready = ready;
        self.grant = grant;
    }

    /// Narrows the grant (never widens it, so nothing needs recording).
    fn narrow_to(&mut self, grant: Grant) {
        self.grant = self.grant.intersect(grant.capabilities());
    }

    /// The readiness and grant a message read at wire position `seq` is judged under.
    fn in_force_for(&self, seq: u64) -> (bool, Grant) {
        self.before.judge(seq, (self.ready, self.grant))
    }
}

/// The readiness and grant a widening (the session becoming ready, or the grant gaining a
/// path) replaced, and the wire position from which the widening counts.
#[derive(Debug, Clone, Copy)]
struct Before {
    boundary: u64,
    ready: bool,
    grant: Grant,
}

/// Whether `v`'s compact JSON encoding takes at most `limit` bytes; encoding stops as soon as
/// it goes over, so an oversized value is never encoded whole.
fn encoded_within(v: &Value, limit: usize) -> bool {
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(buf.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Budget(limit), v).is_ok()
}

/// A registered descriptor's `direction` (§14.2), read by the protocol type so the host and
/// the types agree on what each direction claims; `None` when absent or not a string.
fn direction_of(descriptor: &Value) -> Option<crate::protocol::channels::ChannelDirection> {
    descriptor
        .get("direction")
        .filter(|v| v.is_string())
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Keeps widening records for a hook in flight (see [`State::hook_pins`]) until dropped.
struct HookPin(Arc<Inner>, u64);

impl HookPin {
    fn new(s: &HostSession) -> HookPin {
        let at = s.inner.peer.frames_read();
        s.inner.state().hook_pins.push(at);
        HookPin(s.inner.clone(), at)
    }
}

impl Drop for HookPin {
    fn drop(&mut self) {
        let mut st = self.0.state();
        if let Some(i) = st.hook_pins.iter().position(|p| *p == self.1) {
            st.hook_pins.swap_remove(i);
        }
    }
}

/// How many [`Before`] records a session keeps. Past it the two oldest merge into the
/// stricter of both, which can only deny more (fail closed), never admit more.
const BEFORE_LIMIT: usize = 32;

/// Wire order for widenings (§5.3, §6.7): a message read before a receipt, or before a
/// change the host made on its own, is judged under the state that change replaced as well
/// as under the current one, however late it is handled. A narrowing needs no record: the
/// current state already holds it for every message. Oldest record first.
#[derive(Debug, Default)]
struct Widenings(VecDeque<Before>);

impl Widenings {
    /// Records the change from `old` to `new` (readiness, grant) at `boundary`, if it widens.
    fn record(&mut self, boundary: u64, old: (bool, Grant), new: (bool, Grant)) {
        let widens = (new.0 && !old.0)
            || !new
                .1
                .capabilities()
                .difference(old.1.capabilities())
                .is_empty();
        if !widens {
            return;
        }
        if self.0.len() >= BEFORE_LIMIT {
            if let (Some(a), Some(b)) = (self.0.pop_front(), self.0.pop_front()) {
                self.0.push_front(Before {
                    boundary: b.boundary,
                    ready: a.ready && b.ready,
                    grant: a.grant.intersect(b.grant.capabilities()),
                });
            }
        }
        self.0.push_back(Before {
            boundary,
            ready: old.0,
            grant: old.1,
        });
    }

    /// `current`, intersected with every state a widening later on the wire than `seq`
    /// replaced.
    fn judge(&self, seq: u64, current: (bool, Grant)) -> (bool, Grant) {
        self.0
            .iter()
            .filter(|b| b.boundary > seq)
            .fold(current, |(ready, grant), b| {
                (ready && b.ready, grant.intersect(b.grant.capabilities()))
            })
    }

    /// Messages are handled in wire order: once the one at `seq` is reached, no later
    /// message can be read before a boundary at or below it.
    fn reached(&mut self, seq: u64) {
        while self.0.front().is_some_and(|b| b.boundary <= seq) {
            self.0.pop_front();
        }
    }
}

struct Inner {
    peer: Peer,
    label: std::sync::OnceLock<String>,
    config: HostConfig,
    state: Mutex<State>,
    events: mpsc::Sender<HostEvent>,
    diags: mpsc::Sender<HostDiagnostic>,
    policy_lock: tokio::sync::Mutex<()>,
    mcpl_advertised: AtomicBool,
    /// Wire position of the latest policy receipt read (0: none yet), stored by the peer as
    /// the frame is read ([`RequestOptions::mark_position`]).
    policy_read: Arc<std::sync::atomic::AtomicU64>,
    /// Wire position of the latest policy receipt whose consequences are in force.
    policy_applied: tokio::sync::watch::Sender<u64>,
}

/// Marks the policy receipts read so far as applied when a policy exchange ends (declared
/// after the policy lock guard, so it runs while the lock is still held).
struct PolicyApplied<'a>(&'a Inner);

impl Drop for PolicyApplied<'_> {
    fn drop(&mut self) {
        let read = self.0.policy_read.load(Ordering::SeqCst);
        self.0.policy_applied.send_if_modified(|a| {
            let changed = *a < read;
            *a = (*a).max(read);
            changed
        });
    }
}

/// One host ↔ server connection driven by the host rules of MCPL. Cheap to clone.
#[derive(Clone)]
pub struct HostSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HostSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSession")
            .field("label", &self.inner.label.get())
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn diag(&self, d: HostDiagnostic) {
        tracing::warn!(server = ?self.label.get(), diagnostic = ?d, "mcpl host diagnostic");
        let _ = self.diags.try_send(d);
    }

    fn event(&self, e: HostEvent) -> bool {
        self.events.try_send(e).is_ok()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.peer.close();
    }
}

/// The capability a requirement is reported under when nothing is granted.
fn denied_of(grant: &Grant, req: Requirement) -> Option<Denied> {
    grant.check(req).err()
}

impl HostSession {
    /// Connects over `transport`: handshake, then the initial policy exchange (§5.3).
    pub async fn connect(
        transport: Transport,
        config: HostConfig,
    ) -> Result<(HostSession, HostStreams), HostError> {
        let (peer, incoming) = Peer::new(transport, config.peer.clone());
        Self::connect_peer(peer, incoming, config).await
    }

    /// Like [`HostSession::connect`] over an existing peer and its incoming queue.
    pub async fn connect_peer(
        peer: Peer,
        incoming: crate::peer::Incoming,
        config: HostConfig,
    ) -> Result<(HostSession, HostStreams), HostError> {
        // The host's own policy must parse before anything is sent.
        let host_allows = Grant::from_patterns(config.policy.iter().map(String::as_str))?;
        let (etx, erx) = mpsc::channel(config.event_capacity.max(1));
        let (dtx, drx) = mpsc::channel(config.diagnostics_capacity.max(1));
        let inner = Arc::new(Inner {
            peer: peer.clone(),
            label: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                mode: Mode::McpOnly(McpOnlyReason::NotAdvertised),
                ready: false,
                grant: Grant::none(),
                policy: config.policy.clone(),
                review: None,
                last_receipt: None,
                seen_events: HashSet::new(),
                seen_order: VecDeque::new(),
                streams: InferenceIds::default(),
                turns: InferenceIds::default(),
                channels: BTreeMap::new(),
                limiter: FetchLimiter::new(
                    config.manifest_fetch_burst,
                    config.manifest_fetch_per_sec,
                ),
                announced: None,
                before: Widenings::default(),
                hook_pins: Vec::new(),
                disabled_later: Vec::new(),
            }),
            config,
            events: etx,
            diags: dtx,
            policy_lock: tokio::sync::Mutex::new(()),
            policy_read: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            policy_applied: tokio::sync::watch::channel(0).0,
            mcpl_advertised: AtomicBool::new(false),
        });
        let streams = HostStreams {
            events: erx,
            diagnostics: drx,
        };

        // Connection diagnostics are forwarded from the start.
        let mut pd = peer.diagnostics();
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            while let Some(d) = pd.recv().await {
                match weak.upgrade() {
                    Some(i) => i.diag(HostDiagnostic::Connection(d)),
                    None => break,
                }
            }
        });

        // The dispatch loop runs from the start: anything privileged before the receipt is
        // rejected with -32002 by the readiness check (§5.3).
        let session = HostSession { inner };
        let weak = Arc::downgrade(&session.inner);
        tokio::spawn(Self::run_incoming(weak, incoming));

        let cfg = &session.inner.config;
        let mut mcpl_adv = capability::advertisement_to_value(host_allows.capabilities());
        if let Some(o) = mcpl_adv.as_object_mut() {
            o.insert("version".into(), json!("0.5"));
            o.insert("featureSets".into(), json!(true));
        }
        let init = json!({
            "protocolVersion": cfg.protocol_version,
            "capabilities": { "experimental": { "mcpl": mcpl_adv } },
            "clientInfo": { "name": cfg.client_name, "version": cfg.client_version },
        });
        let result = peer
            .request_raw_with(
                "initialize",
                Some(init),
                RequestOptions::new().timeout(cfg.initialize_timeout),
            )
            .await?;
        let caps = result
            .get("capabilities")
            .filter(|c| c.is_object())
            .ok_or_else(|| HostError::BadInitialize("no capabilities object".into()))?;
        let label = result
            .pointer("/serverInfo/name")
            .and_then(Value::as_str)
            .unwrap_or("server")
            .to_owned();
        let _ = session.inner.label.set(label);
        // Counted before the manifest is copied or reviewed (§6.1 sets no number).
        if let Some(m) = caps.pointer("/experimental/mcpl") {
            within_feature_set_bound(m, cfg.max_feature_sets)?;
        }
        let manifest = caps.pointer("/experimental/mcpl").cloned();
        let now = SystemTime::now();

        match manifest {
            None => {
                // §3.3: MCP-only. Grant at most `tools`.
                let mut adv = CapabilitySet::EMPTY;
                if matches!(
                    caps.get("tools"),
                    Some(Value::Object(_)) | Some(Value::Bool(true))
                ) {
                    adv.insert(Capability::Tools);
                }
                let hg = HostGrant::compute(adv, cfg.policy.iter().map(String::as_str))?;
                {
                    let now = session.next_position();
                    let mut st = session.inner.state();
                    // No MCPL to configure: the (tools-only) grant is final.
                    st.set_in_force(now, true, hg.effective);
                    st.mode = Mode::McpOnly(McpOnlyReason::NotAdvertised);
                }
                peer.notify_raw("notifications/initialized", None).await?;
                Ok((session, streams))
            }
            Some(manifest) => {
                session.inner.mcpl_advertised.store(true, Ordering::SeqCst);
                let (review, findings) = ManifestReview::initial(
                    &manifest,
                    Some(caps),
                    cfg.policy.iter().map(String::as_str),
                    now,
                )
                .map_err(|e| match e {
                    crate::manifest::review::ReviewError::Policy(p) => HostError::Policy(p),
                    other => HostError::BadInitialize(other.to_string()),
                })?;
                for f in findings {
                    session.inner.diag(HostDiagnostic::ManifestFinding {
                        code: f.code,
                        path: f.path,
                        message: f.message,
                    });
                }
                let hg =
                    HostGrant::compute(review.advertised(), cfg.policy.iter().map(String::as_str))?;
                session.inner.state().review = Some(review);
                peer.notify_raw("notifications/initialized", None).await?;
                let told_wider = session.initial_policy(hg).await?;
                // Fetches that failed during the exchange count too (§17.5): suspension
                // waits for MCPL to be in force, so it is checked once it is.
                if told_wider | session.suspend_if_due() {
                    // The server was told a wider grant than the one now in force (a
                    // revocation, a suspension or a fallback the server did not name landed
                    // during the exchange): told again (§6.7), bounded by the policy timeout.
                    session.tell_reduction().await;
                }
                Ok((session, streams))
            }
        }
    }

    /// The initial exchange (§5.3): Request even with an empty grant; decide on the receipt.
    /// `Ok(true)` when the grant applied is narrower than the one the Request told and the
    /// server cannot know it: a manifest revocation landed meanwhile, or the host fell back
    /// to MCP-only on its own (no answer in time, an error, an unusable receipt). The caller
    /// then tells the reduction once the policy lock is free (§6.7: any change to the grant
    /// goes by Request). A fallback the server chose itself is not told again: a `-32601`
    /// server has no MCPL to configure, and a refusal named `mcp-only` as its consequence.
    async fn initial_policy(&self, hg: HostGrant) -> Result<bool, HostError> {
        let _g = self.inner.policy_lock.lock().await;
        let _applied = PolicyApplied(&self.inner);
        let cfg = &self.inner.config;
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        // The host's own selection narrows derivation at once (it can never widen).
        if let Ok(up) = policy::UpdateParams::parse(&params) {
            if let Some(r) = self.inner.state().review.as_mut() {
                r.set_selection(policy::Selection {
                    enabled: up.enabled,
                    disabled: up.disabled,
                });
            }
        }
        let answer = self.policy_request(params).await;
        let decision = match answer {
            Ok(v) => match self.read_receipt(&v) {
                Some(Receipt::Refused {
                    fallback: Fallback::Close,
                    ..
                }) => {
                    self.inner.peer.close();
                    return Err(HostError::Refused("close"));
                }
                Some(Receipt::Refused { .. }) => Err(McpOnlyReason::Refused),
                Some(r @ Receipt::Accepted { .. }) => Ok(r),
                None => Err(McpOnlyReason::PolicyFailed("unusable receipt".into())),
            },
            Err(PeerError::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                Err(McpOnlyReason::PolicyMethodNotFound)
            }
            Err(PeerError::Timeout { .. }) => Err(McpOnlyReason::PolicyTimeout),
            Err(PeerError::Closed(c)) => return Err(HostError::Peer(PeerError::Closed(c))),
            Err(e) => Err(McpOnlyReason::PolicyFailed(e.to_string())),
        };
        let told_wider = match decision {
            Ok(receipt) => {
                // Only what is read after the receipt is judged as ready (§5.3); a batch
                // carrying the receipt counts as before it (fail closed).
                let boundary = self.receipt_boundary();
                let mut st = self.inner.state();
                // A manifest revocation that landed during the exchange stays applied.
                let adv = st
                    .review
                    .as_ref()
                    .map_or(CapabilitySet::EMPTY, |r| r.advertised());
                let applied = hg.effective.intersect(adv);
                st.set_in_force(boundary, true, applied);
                st.mode = Mode::Mcpl;
                st.last_receipt = Some(receipt);
                let g = st.grant;
                if let Some(r) = st.review.as_mut() {
                    r.set_grant(g, SystemTime::now(), "initial-policy");
                }
                applied != hg.effective
            }
            Err(reason) => {
                let server_named_it = matches!(
                    reason,
                    McpOnlyReason::PolicyMethodNotFound | McpOnlyReason::Refused
                );
                self.enter_mcp_only(reason);
                !server_named_it && self.grant() != hg.effective
            }
        };
        Ok(told_wider)
    }

    /// Parses a receipt, reporting every defect; `None` when unusable.
    fn read_receipt(&self, v: &Value) -> Option<Receipt> {
        let report = policy::parse_receipt(v);
        for d in report.defects {
            self.inner.diag(HostDiagnostic::ReceiptDefect {
                code: d.code,
                path: d.path,
            });
        }
        if let Some(r) = &report.receipt {
            self.inner.state().last_receipt = Some(r.clone());
        }
        report.receipt
    }

    fn enter_mcp_only(&self, reason: McpOnlyReason) {
        tracing::info!(server = ?self.inner.label.get(), ?reason, "MCPL disabled: MCP-only");
        let mode = Mode::McpOnly(reason);
        {
            let now = self.next_position();
            let mut st = self.inner.state();
            let mut grant = st
                .grant
                .intersect(CapabilitySet::EMPTY.with(Capability::Tools));
            // `tools` is kept only if the server advertised it and policy allowed it.
            if let Some(r) = st.review.as_ref() {
                let adv = r
                    .advertised()
                    .intersection(CapabilitySet::EMPTY.with(Capability::Tools));
                if let Ok(hg) = HostGrant::compute(adv, st.policy.iter().map(String::as_str)) {
                    grant = hg.effective;
                }
            }
            // Once a grant was in force, falling back can only keep part of it: a refused
            // expansion that named `tools` must not activate it (§6.7: a receipt never
            // widens).
            if st.ready {
                grant = grant.intersect(st.grant.capabilities());
            }
            st.set_in_force(now, true, grant);
            st.mode = mode.clone();
            // The review judges later manifest changes against the grant in force (§17.6): a
            // capability MCP-only never held is not reported as revoked.
            if let Some(r) = st.review.as_mut() {
                r.set_grant(grant, SystemTime::now(), "mcp-only");
            }
        }
        self.inner.event(HostEvent::ModeChanged(mode));
    }

    /// The session's mode.
    pub fn mode(&self) -> Mode {
        self.inner.state().mode.clone()
    }

    /// The server's label (`serverInfo.name`).
    pub fn label(&self) -> String {
        self.inner.label.get().cloned().unwrap_or_default()
    }

    /// The grant currently in force (the only authority).
    pub fn grant(&self) -> Grant {
        self.inner.state().grant
    }

    /// Whether the initial policy exchange has completed (receipt or recorded decision).
    pub fn is_ready(&self) -> bool {
        self.inner.state().ready
    }

    /// The last usable receipt (testimony only).
    pub fn last_receipt(&self) -> Option<Receipt> {
        self.inner.state().last_receipt.clone()
    }

    /// The manifest currently in force and its recomputed revision.
    pub fn manifest(&self) -> Option<(Value, Option<String>)> {
        let st = self.inner.state();
        st.review
            .as_ref()
            .map(|r| (r.manifest().clone(), r.revision().map(str::to_owned)))
    }

    /// The last change receipt emitted (§17.6).
    pub fn last_change_receipt(&self) -> Option<ChangeReceipt> {
        let st = self.inner.state();
        st.review.as_ref().and_then(|r| r.last_receipt().cloned())
    }

    /// Accepts feature set `name`'s `tagOntology` as currently declared (§16.5); a later
    /// manifest change to it invalidates the acceptance (§17.5). Returns its digest.
    pub fn accept_ontology(
        &self,
        name: &str,
    ) -> Result<String, crate::manifest::review::ReviewError> {
        let mut st = self.inner.state();
        match st.review.as_mut() {
            Some(r) => r.accept_ontology(name),
            None => Err(crate::manifest::review::ReviewError::NoOntology(
                name.to_owned(),
            )),
        }
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5): its `implies`
    /// edges stop applying to later messages. Returns the digest that was accepted, if any.
    pub fn revoke_ontology(&self, name: &str) -> Option<String> {
        self.inner
            .state()
            .review
            .as_mut()
            .and_then(|r| r.revoke_ontology(name))
    }

    /// Sets the tag patterns the host's treatment rules reference, so a manifest change that
    /// drops a tag they name is reported as `ontology-reference-undeclared` (§17.6).
    pub fn set_consumer_patterns<'a, I>(&self, patterns: I)
    where
        I: IntoIterator<Item = &'a str>,
    {
        if let Some(r) = self.inner.state().review.as_mut() {
            r.set_consumer_patterns(patterns);
        }
    }

    /// The accepted ontology digest of feature set `name`, if any is standing.
    pub fn accepted_ontology(&self, name: &str) -> Option<String> {
        let st = self.inner.state();
        st.review
            .as_ref()
            .and_then(|r| r.accepted_ontology(name).map(str::to_owned))
    }

    /// The channels this connection has registered and the host accepted.
    pub fn channels(&self) -> Vec<String> {
        self.inner.state().channels.keys().cloned().collect()
    }

    /// The underlying peer (for MCP traffic outside MCPL's gating).
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// Changes host policy (§6.7 orderings): a narrowing applies host-side at once, then the
    /// Request goes out; a widening activates only after an accepting receipt.
    pub async fn set_policy(&self, patterns: Vec<String>) -> Result<PolicyChange, HostError> {
        let _g = self.inner.policy_lock.lock().await;
        let _applied = PolicyApplied(&self.inner);
        let (hg, old) = {
            let mut st = self.inner.state();
            if let Mode::McpOnly(r) = &st.mode {
                return Err(HostError::McpOnly(r.clone()));
            }
            let advertised = st
                .review
                .as_ref()
                .map(|r| r.advertised())
                .unwrap_or(CapabilitySet::EMPTY);
            let hg = HostGrant::compute(advertised, patterns.iter().map(String::as_str))?;
            let old = st.grant;
            // Narrowing first, atomically (§6.7).
            let kept = old.intersect(hg.effective.capabilities());
            st.narrow_to(kept);
            st.policy = patterns.clone();
            if let Some(r) = st.review.as_mut() {
                r.set_grant(kept, SystemTime::now(), "policy-narrowing");
            }
            (hg, old)
        };
        let narrowed = old.capabilities().difference(hg.effective.capabilities());
        let widening = hg.effective.capabilities().difference(old.capabilities());
        let cfg = &self.inner.config;
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        let answer = self.policy_request(params).await;
        let receipt = match answer {
            Ok(v) => self.read_receipt(&v),
            Err(e) => {
                tracing::warn!(server = ?self.inner.label.get(), error = %e, "policy Request unanswered");
                None
            }
        };
        let mut activated = CapabilitySet::EMPTY;
        match &receipt {
            // MCPL was left (suspended) while the Request was in flight: a receipt widens
            // nothing on an MCP-only connection.
            Some(Receipt::Accepted { .. }) if self.mode() != Mode::Mcpl => {}
            Some(Receipt::Accepted { .. }) => {
                // The widening counts from just after the receipt's frame (§6.7): a batch
                // carrying the receipt counts as before it (fail closed).
                let boundary = self.receipt_boundary();
                let mut st = self.inner.state();
                // Re-intersect with whatever happened meanwhile (a manifest revocation).
                let adv = st
                    .review
                    .as_ref()
                    .map(|r| r.advertised())
                    .unwrap_or(CapabilitySet::EMPTY);
                let g = hg.effective.intersect(adv);
                activated = g.capabilities().difference(st.grant.capabilities());
                let ready = st.ready;
                st.set_in_force(boundary, ready, g);
                if let Some(r) = st.review.as_mut() {
                    r.set_grant(g, SystemTime::now(), "policy-receipt");
                }
            }
            Some(Receipt::Refused {
                fallback: Fallback::Close,
                ..
            }) => {
                self.enter_mcp_only(McpOnlyReason::Refused);
                self.inner.peer.close();
            }
            Some(Receipt::Refused { .. }) => self.enter_mcp_only(McpOnlyReason::Refused),
            None => {}
        }
        let grant = self.grant();
        Ok(PolicyChange {
            narrowed,
            activated,
            not_activated: widening.difference(activated),
            receipt,
            grant,
        })
    }

    /// The `disabled` list of a policy Request: the configured one, then the sets
    /// [`Self::disable_by_notification`] disabled since.
    fn disabled_list(&self) -> Vec<String> {
        let later = self.inner.state().disabled_later.clone();
        let mut all = self.inner.config.disabled.clone();
        all.extend(
            later
                .into_iter()
                .filter(|s| !self.inner.config.disabled.contains(s)),
        );
        all
    }

    /// Disables feature sets `sets` with a `featureSets/update` **Notification** carrying only
    /// `disabled` — the non-conforming carrier §6.7 still makes servers respect as a
    /// reduction, which a tester (such as `mcpl inspect`) sends to see whether they do.
    /// A reduction applies first (§6.7): the host stops accepting the sets' uses before the
    /// Notification is written, and every later policy Request repeats them in `disabled`.
    /// The grant is unchanged and nothing widens. Errors: MCP-only, a name list past
    /// [`policy::MAX_POLICY_LIST_ENTRIES`] in total, or a name that is not a feature-set
    /// name or pattern.
    pub async fn disable_by_notification(&self, sets: &[String]) -> Result<(), HostError> {
        let _g = self.inner.policy_lock.lock().await;
        let params = json!({ "disabled": sets });
        {
            let mut st = self.inner.state();
            if let Mode::McpOnly(r) = &st.mode {
                return Err(HostError::McpOnly(r.clone()));
            }
            let mut later = st.disabled_later.clone();
            later.extend(
                sets.iter()
                    .filter(|s| !st.disabled_later.contains(s))
                    .cloned(),
            );
            let all = json!({ "disabled": later });
            let up = policy::UpdateParams::parse(&all)
                .map_err(|e| HostError::BadSelection(e.to_string()))?;
            if let Some(r) = st.review.as_mut() {
                let mut selection = r.selection().clone();
                selection.disabled.extend(up.disabled);
                r.set_selection(selection);
            }
            st.disabled_later = later;
        }
        Ok(self
            .inner
            .peer
            .notify_raw("featureSets/update", Some(params))
            .await?)
    }

    /// The gate of the public send paths: methods with a dedicated API are refused here
    /// (the generic path would skip their obligations), then [`Self::gate`].
    fn gate_public(&self, method: &str, params: Option<&Value>) -> Result<(), HostError> {
        let instead = match method {
            "context/beforeInference" => Some("host::before_inference"),
            "featureSets/update" => Some("HostSession::set_policy"),
            "inference/lifecycle" => Some("HostSession::start_turn"),
            "channels/outgoing/chunk" | "channels/outgoing/complete" => {
                Some("HostSession::outgoing_stream")
            }
            _ => None,
        };
        if let Some(instead) = instead {
            return Err(HostError::UseDedicated {
                method: method.to_owned(),
                instead,
            });
        }
        self.gate(method, params)
    }

    /// Checks outbound gating for `method` with `params` (direction, grant, and for channel
    /// methods the channel id), locally.
    fn gate(&self, method: &str, params: Option<&Value>) -> Result<(), HostError> {
        match policy::method_direction(method) {
            Some(Direction::HostToServer) | Some(Direction::Either) => {}
            _ => return Err(HostError::WrongDirection(method.to_owned())),
        }
        let req = policy::method_requirement(method, params).unwrap_or(Requirement::None);
        let st = self.inner.state();
        if req != Requirement::None {
            if !st.ready {
                if let Some(d) = denied_of(&Grant::none(), req) {
                    return Err(HostError::NotGranted(d.capability));
                }
            }
            if let Some(d) = denied_of(&st.grant, req) {
                return Err(HostError::NotGranted(d.capability));
            }
        }
        if crate::protocol::is_mcpl_method(method) {
            if let Mode::McpOnly(r) = &st.mode {
                return Err(HostError::McpOnly(r.clone()));
            }
        }
        // §14.1 / §14.3: what goes to a channel goes to the server that registered it, and
        // only where the host's patterns allow.
        let keyed = matches!(
            method,
            "channels/publish"
                | "channels/outgoing/chunk"
                | "channels/outgoing/complete"
                | "channels/acknowledge"
                | "channels/typing"
        );
        if keyed {
            let id = params
                .and_then(|p| p.get("channelId"))
                .and_then(Value::as_str)
                .unwrap_or("");
            // Publishing and streaming need a channel that claims outbound ability; an
            // acknowledgement answers an inbound message (§14.2; no direction claims neither).
            let inbound = method == "channels/acknowledge";
            let direction_ok = st.channels.get(id).and_then(direction_of).is_some_and(|d| {
                if inbound {
                    d.is_inbound()
                } else {
                    d.is_outbound()
                }
            });
            drop(st);
            if !direction_ok || !self.channel_permitted(id) {
                return Err(HostError::ChannelNotPermitted(id.to_owned()));
            }
        }
        Ok(())
    }

    /// Sends a typed request after outbound gating (refused locally if not granted).
    pub async fn request<M: Method>(&self, params: &M::Params) -> Result<M::Result, HostError> {
        let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
        self.gate_public(M::NAME, Some(&v))?;
        Ok(self.inner.peer.request::<M>(params).await?)
    }

    /// Sends a typed notification after outbound gating (refused locally if not granted):
    /// `channels/outgoing/*` needs `channels.streaming`, `inference/lifecycle` needs
    /// `inferenceLifecycle`, and so on through the method table.
    pub async fn notify<M: Method>(&self, params: &M::Params) -> Result<(), HostError> {
        let v = serde_json::to_value(params).map_err(|e| HostError::Encode(e.to_string()))?;
        self.gate_public(M::NAME, Some(&v))?;
        Ok(self.inner.peer.notify::<M>(params).await?)
    }

    /// Sends a raw request after outbound gating.
    pub async fn request_raw(&self, method: &str, params: Value) -> Result<Value, HostError> {
        self.gate_public(method, Some(&params))?;
        Ok(self.inner.peer.request_raw(method, Some(params)).await?)
    }

    /// Sends a raw notification after outbound gating.
    pub async fn notify_raw(&self, method: &str, params: Value) -> Result<(), HostError> {
        self.gate_public(method, Some(&params))?;
        Ok(self.inner.peer.notify_raw(method, Some(params)).await?)
    }

    /// [`Self::notify_raw`] for the session's own dedicated APIs (the lifecycle emitter).
    async fn notify_gated(&self, method: &str, params: Value) -> Result<(), HostError> {
        self.gate(method, Some(&params))?;
        Ok(self.inner.peer.notify_raw(method, Some(params)).await?)
    }

    /// Fetches `mcpl/manifest` now (§17.4: a host MAY at any time) and reviews it.
    pub async fn refresh_manifest(&self) -> Result<Option<ChangeReceipt>, HostError> {
        if !self.inner.mcpl_advertised.load(Ordering::SeqCst) {
            return Err(HostError::McpOnly(McpOnlyReason::NotAdvertised));
        }
        Ok(self.fetch_and_review(None).await)
    }

    /// Starts a turn: sends `inference/lifecycle` `started` (gated on `inferenceLifecycle`)
    /// and returns a guard that sends exactly one terminal (§10.5): `completed`, `failed`,
    /// or `aborted` when dropped unfinished. An `inference_id` whose turn is open, or among
    /// the recently ended ones, is [`HostError::TurnExists`] and sends nothing.
    pub async fn start_turn(
        &self,
        inference_id: &str,
        conversation_id: &str,
        turn_index: u64,
    ) -> Result<Turn, HostError> {
        let params = json!({
            "inferenceId": inference_id,
            "conversationId": conversation_id,
            "turnIndex": turn_index,
            "phase": "started",
        });
        if !self.inner.state().turns.start(inference_id) {
            return Err(HostError::TurnExists(inference_id.to_owned()));
        }
        // Released if `started` is never queued (refused, or this future cancelled).
        let mut claim = TurnClaim {
            inner: &self.inner,
            inference_id,
            armed: true,
        };
        self.notify_gated("inference/lifecycle", params).await?;
        claim.armed = false;
        Ok(Turn {
            session: self.clone(),
            owed: true,
            inference_id: inference_id.to_owned(),
            conversation_id: conversation_id.to_owned(),
            turn_index,
        })
    }

    // -----------------------------------------------------------------------------------
    // Inbound
    // -----------------------------------------------------------------------------------

    /// The dispatch loop. It holds the session weakly: dropping the last [`HostSession`]
    /// closes the connection instead of leaking it.
    async fn run_incoming(inner: std::sync::Weak<Inner>, mut incoming: crate::peer::Incoming) {
        while let Some(msg) = incoming.recv().await {
            let Some(inner) = inner.upgrade() else {
                break;
            };
            let s = HostSession { inner };
            let seq = incoming.last_seq();
            {
                let mut st = s.inner.state();
                let keep_from = st.hook_pins.iter().copied().min().unwrap_or(u64::MAX);
                st.before.reached(seq.min(keep_from));
            }
            s.settle_policy_before(seq).await;
            match msg {
                IncomingMessage::Request(req) => s.on_request(req).await,
                IncomingMessage::Notification(n) => s.on_notification(n, seq),
            }
        }
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.inner.peer.close();
    }

    /// The wire position of the next frame to be read: a change made now, not carried by a
    /// receipt, counts from there.
    fn next_position(&self) -> u64 {
        self.inner.peer.frames_read() + 1
    }

    /// Sends `featureSets/update` as a Request (§6.7); the peer marks the wire position of
    /// its receipt for [`Self::settle_policy_before`].
    async fn policy_request(&self, params: Value) -> Result<Value, PeerError> {
        let inner = &self.inner;
        let mark = inner.policy_read.clone();
        let timeout = inner.config.policy_timeout;
        inner
            .peer
            .request_raw_with(
                "featureSets/update",
                Some(params),
                RequestOptions::new().timeout(timeout).mark_position(mark),
            )
            .await
    }

    /// Wire order (§5.3, §6.7): a message read after a policy receipt is judged under that
    /// receipt's consequences, so wait (bounded by the policy timeout) until the policy
    /// exchange that read it has applied them. A message read before the receipt is judged
    /// under the state it arrived in as well ([`Widenings`]): privileged before ready is
    /// still rejected, however late it is handled.
    async fn settle_policy_before(&self, seq: u64) {
        let read = self.inner.policy_read.load(Ordering::SeqCst);
        if read == 0 || read >= seq {
            return;
        }
        let mut applied = self.inner.policy_applied.subscribe();
        let wait = applied.wait_for(|a| *a >= read);
        let _ = tokio::time::timeout(self.inner.config.policy_timeout, wait).await;
    }

    /// The readiness and grant check of one inbound method (§5.3, §5.4). `seq` is the
    /// message's wire position: a widening that came later on the wire does not apply to it,
    /// however late it is handled. `Ok` carries the grant the message is judged under (for
    /// its feature-set check); `Err` the `-32002` error to answer.
    fn admit(&self, method: &str, params: Option<&Value>, seq: u64) -> Result<Grant, ErrorObject> {
        let (ready, grant) = self.inner.state().in_force_for(seq);
        let req = policy::method_requirement(method, params).unwrap_or(Requirement::None);
        if req == Requirement::None {
            return Ok(grant);
        }
        if !ready {
            self.inner.diag(HostDiagnostic::PrivilegedBeforeReady {
                method: method.to_owned(),
            });
            let d = denied_of(&Grant::none(), req);
            return Err(d.map(|d| d.to_error()).unwrap_or_else(|| {
                ErrorObject::new(codes::CAPABILITY_DENIED, "Capability denied")
            }));
        }
        match denied_of(&grant, req) {
            None => Ok(grant),
            Some(d) => {
                self.inner.diag(HostDiagnostic::CapabilityDenied {
                    method: method.to_owned(),
                    capability: d.capability,
                });
                Err(d.to_error())
            }
        }
    }

    /// The admission of `channels/changed`. Before the session is ready it is refused like
    /// any privileged method (§5.3; nothing can be registered yet). Once ready, a grant
    /// lacking `channels.register` does not refuse it whole: a removal only narrows, so its
    /// `removed` entries still apply (§14.5, §6.7: reductions are respected whatever the
    /// carrier), while the judged grant, which lacks `channels.register`, rejects every
    /// addition and update item-wise as `capability_denied` (a Notification's are filtered
    /// with a diagnostic). Reading chosen where the spec is silent: removal wins over the
    /// whole-method refusal, never an addition.
    fn admit_changed(&self, params: Option<&Value>, seq: u64) -> Result<Grant, ErrorObject> {
        let (ready, grant) = self.inner.state().in_force_for(seq);
        if ready && !grant.allows(Capability::ChannelsRegister) {
            return Ok(grant);
        }
        self.admit("channels/changed", params, seq)
    }

    fn inbound_direction_ok(method: &str) -> bool {
        matches!(
            policy::method_direction(method),
            Some(Direction::ServerToHost) | Some(Direction::Either)
        )
    }

    async fn on_request(&self, req: IncomingRequest) {
        let method = req.method().to_owned();
        let params = req.request().params.clone();
        if !Self::inbound_direction_ok(&method) {
            self.inner.diag(HostDiagnostic::UnexpectedMethod {
                method: method.clone(),
            });
            let _ = req
                .respond_error(ErrorObject::method_not_found(&method))
                .await;
            return;
        }
        let admitted = if method == "channels/changed" {
            self.admit_changed(params.as_ref(), req.seq())
        } else {
            self.admit(&method, params.as_ref(), req.seq())
        };
        let judged = match admitted {
            Ok(g) => g,
            Err(e) => {
                let _ = req.respond_error(e).await;
                return;
            }
        };
        let outcome = match method.as_str() {
            "ping" => Ok(json!({})),
            "push/event" => self.on_push(params.as_ref(), &judged),
            "channels/register" => self
                .on_register(params.as_ref(), false, &judged)
                .map(Some)
                .and_then(|r| r.ok_or_else(|| ErrorObject::internal("no result"))),
            "channels/changed" => self
                .on_changed(params.as_ref(), false, &judged)
                .and_then(|r| r.ok_or_else(|| ErrorObject::internal("no result"))),
            "channels/incoming" => self.on_incoming(params.as_ref()),
            "channels/list" => Ok(json!({
                "channels": self.inner.state().channels.values().cloned().collect::<Vec<_>>()
            })),
            "inference/request" | "model/info" => {
                if method == "inference/request" {
                    if let Err(e) = self.check_request_feature_set(params.as_ref(), &judged) {
                        let _ = req.respond_error(e).await;
                        return;
                    }
                }
                let streaming = method == "inference/request"
                    && params
                        .as_ref()
                        .and_then(|p| p.get("stream"))
                        .and_then(Value::as_bool)
                        == Some(true);
                if let (true, Some(h)) = (streaming, self.inner.config.stream_handler.clone()) {
                    // admit() required the streaming leaf for `stream: true` (§11.4).
                    let ended = Arc::new(AtomicBool::new(false));
                    let sink = ChunkSink {
                        session: self.clone(),
                        request_id: req.id().clone(),
                        next: 0,
                        ended: ended.clone(),
                    };
                    let p = params.unwrap_or(Value::Null);
                    tokio::spawn(async move {
                        let r = h(p, sink).await;
                        ended.store(true, Ordering::SeqCst);
                        let _ = req.finish(r).await;
                    });
                    return;
                }
                match self.inner.config.request_handler.clone() {
                    None => Err(ErrorObject::method_not_found(&method)),
                    Some(h) => {
                        // Answered from its own task so the connection keeps flowing.
                        let p = params.unwrap_or(Value::Null);
                        // §11.4 without a stream handler: the final text goes out as one
                        // chunk before the response, so a streamed request still gets its
                        // chunks.
                        let mut sink = streaming.then(|| ChunkSink {
                            session: self.clone(),
                            request_id: req.id().clone(),
                            next: 0,
                            ended: Arc::new(AtomicBool::new(false)),
                        });
                        tokio::spawn(async move {
                            let r = h(&method, p).await;
                            if let (Some(sink), Ok(result)) = (sink.as_mut(), &r) {
                                if let Some(text) = result_text(result) {
                                    if let Err(e) = sink.send(&text).await {
                                        tracing::debug!(error = %e, "single chunk not sent");
                                    }
                                }
                            }
                            let _ = req.finish(r).await;
                        });
                        return;
                    }
                }
            }
            _ => Err(ErrorObject::method_not_found(&method)),
        };
        let _ = req.finish(outcome).await;
    }

    fn on_notification(&self, n: Notification, seq: u64) {
        let method = n.method.clone();
        match method.as_str() {
            "mcpl/manifestChanged" => self.on_manifest_changed(n.params.as_ref()),
            "channels/changed" => {
                let judged = match self.admit_changed(n.params.as_ref(), seq) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "notification refused");
                        return;
                    }
                };
                if let Err(e) = self.on_changed(n.params.as_ref(), true, &judged) {
                    self.inner.diag(HostDiagnostic::BadParams {
                        method,
                        detail: e.message.into_owned(),
                    });
                }
            }
            "channels/register" => {
                let judged = match self.admit(&method, n.params.as_ref(), seq) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "notification refused");
                        return;
                    }
                };
                if let Err(e) = self.on_register(n.params.as_ref(), true, &judged) {
                    self.inner.diag(HostDiagnostic::BadParams {
                        method,
                        detail: e.message.into_owned(),
                    });
                }
            }
            m if m.starts_with("notifications/") => {
                if let Some(surface) = m
                    .strip_prefix("notifications/")
                    .and_then(|s| s.strip_suffix("/list_changed"))
                {
                    let r = self
                        .inner
                        .state()
                        .review
                        .as_mut()
                        .and_then(|r| r.surface_changed(surface));
                    if let Some(r) = r {
                        self.inner.event(HostEvent::ManifestChange(r));
                    }
                } else {
                    // An MCP notification the host session does not act on: reported, not
                    // silently dropped.
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                }
            }
            _ => {
                if !Self::inbound_direction_ok(&method) {
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                } else if let Err(e) = self.admit(&method, n.params.as_ref(), seq) {
                    tracing::debug!(error = %e.message, "notification refused");
                } else {
                    self.inner.diag(HostDiagnostic::UnexpectedMethod { method });
                }
            }
        }
    }

    /// Refuses a message carrying more items than `limit` (a documented, configurable bound).
    fn over_limit(
        &self,
        method: &str,
        what: &str,
        count: usize,
        limit: usize,
    ) -> Option<ErrorObject> {
        (count > limit).then(|| {
            self.bad(
                method,
                &format!("{count} {what} exceed the limit of {limit} per message"),
            )
            .with_data(json!({ "limit": limit, "count": count }))
        })
    }

    fn bad(&self, method: &str, detail: &str) -> ErrorObject {
        self.inner.diag(HostDiagnostic::BadParams {
            method: method.to_owned(),
            detail: detail.to_owned(),
        });
        ErrorObject::invalid_params(detail.to_owned())
    }

    fn expand_tags(
        &self,
        method: &str,
        tags: Option<&Value>,
        ev: AdmittedEvent<'_>,
    ) -> ExpandedTags {
        let (set, issues): (TagSet, Vec<TagIssue>) = TagSet::from_json(tags);
        for i in issues {
            self.inner.diag(HostDiagnostic::TagIssue {
                method: method.to_owned(),
                issue: format!("{i:?}"),
            });
        }
        // Producer `implies` edges apply only under a standing acceptance bound to the
        // ontology's current digest (§16.3, §16.5).
        let ontology = ev
            .feature_set
            .and_then(|fs| self.current_accepted_ontology(fs));
        match &ontology {
            Some((onto, digest)) => {
                let fs = ev.feature_set.unwrap_or_default();
                match OntologyAcceptance::accept(ev.source, fs, digest.as_str())
                    .bind(onto, ev.source, fs, digest)
                {
                    Ok(accepted) => set.expand(&ev, &[accepted]),
                    Err(_) => set.expand(&ev, &[]),
                }
            }
            None => set.expand(&ev, &[]),
        }
    }

    /// The tag ontology of `feature_set` in the manifest in force, when its acceptance is
    /// standing (the accepted digest equals the current one), with that digest.
    fn current_accepted_ontology(&self, feature_set: &str) -> Option<(TagOntology, String)> {
        let st = self.inner.state();
        let review = st.review.as_ref()?;
        let accepted = review.accepted_ontology(feature_set)?;
        let value = review
            .manifest()
            .get("featureSets")?
            .get(feature_set)?
            .get("tagOntology")?;
        let current = crate::manifest::ontology_digest(value).ok()?;
        if current != accepted {
            return None;
        }
        let (onto, _issues) = TagOntology::parse(value).ok()?;
        Some((onto, current))
    }

    /// `push/event` (§9): required members, feature set, dedupe, delivery. Its feature set judged under `judged`, the grant the message is
    /// judged under (see [`Self::admit`]).
    fn on_push(&self, params: Option<&Value>, judged: &Grant) -> Result<Value, ErrorObject> {
        const M: &str = "push/event";
        // §9.2 (timestamp ISO 8601, payload.content ContentBlock[] of App. B.1, origin an
        // object), by the rule `mcpl check` reports.
        let defects = crate::protocol::push::push_event_defects(params);
        if !defects.is_empty() {
            return Err(self.bad(M, &defects.join("; ")));
        }
        let p = params
            .and_then(Value::as_object)
            .ok_or_else(|| self.bad(M, "params is not an object"))?;
        let s = |k: &str| p.get(k).and_then(Value::as_str);
        let fs = s("featureSet").ok_or_else(|| self.bad(M, "featureSet is required"))?;
        let event_id = s("eventId").ok_or_else(|| self.bad(M, "eventId is required"))?;
        // §9.4 dedupe remembers ids: their length is bounded before anything is stored.
        let id_limit = self.inner.config.max_event_id_bytes;
        if event_id.len() > id_limit {
            let detail = format!(
                "eventId of {} bytes exceeds the limit of {id_limit}",
                event_id.len()
            );
            return Err(self
                .bad(M, &detail)
                .with_data(json!({ "limit": id_limit, "length": event_id.len() })));
        }
        {
            let st = self.inner.state();
            let Some(review) = st.review.as_ref() else {
                return Err(ErrorObject::unknown_feature_set(fs));
            };
            let statuses = review.statuses_under(judged);
            let required = Requirement::One(Capability::PushEvents);
            if let Err(r) = policy::feature_set_gate(review.declarations(), &statuses, fs, required)
            {
                drop(st);
                return Err(self.set_refused(M, fs, r));
            }
            if st.seen_events.contains(event_id) {
                drop(st);
                self.inner.diag(HostDiagnostic::DuplicateEvent {
                    event_id: event_id.to_owned(),
                });
                return Ok(json!({ "accepted": true, "reason": "duplicate" }));
            }
        }
        let label = self.label();
        let tags = self.expand_tags(
            M,
            p.get("tags"),
            AdmittedEvent {
                source: &label,
                feature_set: Some(fs),
                channel: None,
            },
        );
        let delivered = self.inner.event(HostEvent::Push {
            params: Value::Object(p.clone()),
            feature_set: fs.to_owned(),
            event_id: event_id.to_owned(),
            tags,
        });
        if !delivered {
            return Ok(json!({ "accepted": false, "reason": "host_busy" }));
        }
        let mut st = self.inner.state();
        let id: Arc<str> = Arc::from(event_id);
        st.seen_events.insert(id.clone());
        st.seen_order.push_back(id);
        while st.seen_order.len() > self.inner.config.dedupe_window.max(1) {
            if let Some(old) = st.seen_order.pop_front() {
                st.seen_events.remove(&old);
            }
        }
        Ok(json!({ "accepted": true }))
    }

    /// `inference/request` names its `featureSet` (§11.1): undeclared `-32003`, unavailable
    /// `-32001` — after the grant allowed the method, so it can only narrow.
    fn check_request_feature_set(
        &self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<(), ErrorObject> {
        const M: &str = "inference/request";
        // §11.2, by the rule `mcpl check` reports.
        let defects = crate::protocol::inference::request_defects(params);
        if !defects.is_empty() {
            return Err(self.bad(M, &defects.join("; ")));
        }
        let fs = params
            .and_then(|p| p.get("featureSet"))
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad(M, "featureSet is required"))?;
        let gate = {
            let st = self.inner.state();
            let Some(r) = st.review.as_ref() else {
                return Err(ErrorObject::unknown_feature_set(fs));
            };
            let req = policy::method_requirement(M, params).unwrap_or(Requirement::None);
            policy::feature_set_gate(r.declarations(), &r.statuses_under(judged), fs, req)
        };
        gate.map_err(|r| self.set_refused(M, fs, r))
    }

    /// The error for a use [`policy::feature_set_gate`] refused (§6.6); §6.4 rule 2: a use
    /// the exercising set did not declare is also a declaration-mismatch diagnostic, and its
    /// `-32002` names the capability exercised and the set that failed to declare it.
    fn set_refused(&self, method: &str, feature_set: &str, refusal: SetRefusal) -> ErrorObject {
        if let SetRefusal::Undeclared(missing) = refusal {
            self.inner.diag(HostDiagnostic::DeclarationMismatch {
                method: method.to_owned(),
                feature_set: feature_set.to_owned(),
                missing: missing.sorted_paths(),
            });
        }
        refusal.to_error(feature_set)
    }

    /// Whether the host's channel patterns permit `id`.
    fn channel_permitted(&self, id: &str) -> bool {
        match &self.inner.config.channel_patterns {
            None => true,
            Some(pats) => pats.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => p == id,
            }),
        }
    }

    /// Authorizes one descriptor (§14.5) under `judged`, the grant its message is judged
    /// under (see [`Self::admit`]); `Ok(id)` or `(id, reason)`.
    fn authorize_descriptor(
        &self,
        d: &Value,
        judged: &Grant,
    ) -> Result<String, (String, &'static str)> {
        let id = d.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
        // §14.2, by the rule `mcpl check` applies too.
        if !crate::protocol::channels::descriptor_defects(d).is_empty()
            || !encoded_within(d, self.inner.config.max_descriptor_bytes)
        {
            return Err((id, "invalid_descriptor"));
        }
        if !judged.allows(Capability::ChannelsRegister) || !self.channel_permitted(&id) {
            return Err((id, "capability_denied"));
        }
        Ok(id)
    }

    fn itemize(
        &self,
        method: &str,
        descriptors: &[Value],
        notification: bool,
        judged: &Grant,
        results: &mut Vec<Value>,
    ) {
        let mut seen = HashSet::new();
        for d in descriptors {
            match self.authorize_descriptor(d, judged) {
                Ok(id) if seen.insert(id.clone()) => {
                    let mut st = self.inner.state();
                    let adds = !st.channels.contains_key(&id);
                    if adds && st.channels.len() >= self.inner.config.max_channels {
                        drop(st);
                        self.reject_item(method, id, "channel_limit", notification, results);
                        continue;
                    }
                    st.channels.insert(id.clone(), d.clone());
                    drop(st);
                    results.push(json!({ "id": id, "accepted": true }));
                }
                Ok(id) => {
                    self.reject_item(method, id, "duplicate_descriptor", notification, results)
                }
                Err((id, reason)) => self.reject_item(method, id, reason, notification, results),
            }
        }
    }

    fn reject_item(
        &self,
        method: &str,
        id: String,
        reason: &'static str,
        notification: bool,
        results: &mut Vec<Value>,
    ) {
        self.inner.diag(HostDiagnostic::ChannelRejected {
            method: method.to_owned(),
            id: id.clone(),
            reason,
            filtered_notification: notification,
        });
        results.push(json!({ "id": id, "accepted": false, "reason": reason }));
    }

    fn on_register(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        const M: &str = "channels/register";
        let ds = params
            .and_then(|p| p.get("channels"))
            .and_then(Value::as_array)
            .ok_or_else(|| self.bad(M, "channels must be an array"))?;
        let limit = self.inner.config.max_channels_per_message;
        if let Some(e) = self.over_limit(M, "channel descriptors", ds.len(), limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        self.itemize(M, ds, notification, judged, &mut results);
        Ok(json!({ "results": results }))
    }

    /// `channels/changed` (§14.5), item by item under `judged`: removals of channels this
    /// connection registered always apply; additions and updates need `channels.register`
    /// in `judged` (an update no longer permitted removes the channel).
    fn on_changed(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Option<Value>, ErrorObject> {
        const M: &str = "channels/changed";
        let p = params
            .and_then(Value::as_object)
            .ok_or_else(|| self.bad(M, "params must be an object"))?;
        let arr = |k: &str| -> Result<Vec<Value>, ErrorObject> {
            match p.get(k) {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err(self.bad(M, &format!("{k} must be an array"))),
            }
        };
        let (added, updated, removed) = (arr("added")?, arr("updated")?, arr("removed")?);
        let count = added.len() + updated.len() + removed.len();
        let limit = self.inner.config.max_channels_per_message;
        if let Some(e) = self.over_limit(M, "channel entries", count, limit) {
            return Err(e);
        }
        let mut results = Vec::new();
        for r in removed {
            let id = r.as_str().unwrap_or("").to_owned();
            // A removal narrows: always applied when the channel is ours.
            if self.inner.state().channels.remove(&id).is_some() {
                results.push(json!({ "id": id, "accepted": true }));
            } else {
                self.reject_item(M, id, "unknown_channel", notification, &mut results);
            }
        }
        self.itemize(M, &added, notification, judged, &mut results);
        for u in &updated {
            let id = u.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            if !self.inner.state().channels.contains_key(&id) {
                self.reject_item(M, id, "unknown_channel", notification, &mut results);
                continue;
            }
            match self.authorize_descriptor(u, judged) {
                Ok(id) => {
                    self.inner.state().channels.insert(id.clone(), u.clone());
                    results.push(json!({ "id": id, "accepted": true }));
                }
                Err((id, reason)) => {
                    // An update that is no longer permitted removes the channel.
                    self.inner.state().channels.remove(&id);
                    self.reject_item(M, id, reason, notification, &mut results);
                }
            }
        }
        let receipt = self
            .inner
            .state()
            .review
            .as_mut()
            .and_then(|r| r.surface_changed("channels"));
        if let Some(r) = receipt {
            self.inner.event(HostEvent::ManifestChange(r));
        }
        Ok(Some(json!({ "results": results })))
    }

    /// `channels/incoming` (§14.5): each message validated at receipt against the current
    /// grant and the channel this connection actually registered.
    fn on_incoming(&self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        const M: &str = "channels/incoming";
        let msgs = params
            .and_then(|p| p.get("messages"))
            .and_then(Value::as_array)
            .ok_or_else(|| self.bad(M, "messages must be an array"))?;
        let limit = self.inner.config.max_incoming_per_batch;
        if let Some(e) = self.over_limit(M, "messages", msgs.len(), limit) {
            return Err(e);
        }
        let label = self.label();
        let mut results = Vec::new();
        for m in msgs {
            let mid = m
                .get("messageId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let cid = m.get("channelId").and_then(Value::as_str).unwrap_or("");
            let (registered, inbound_ok, granted) = {
                let st = self.inner.state();
                let desc = st.channels.get(cid);
                // Only a channel that claims to deliver messages may (§14.2); a descriptor
                // without a direction claims neither (fail closed).
                let inbound_ok = desc.and_then(direction_of).is_some_and(|d| d.is_inbound());
                (
                    desc.is_some(),
                    inbound_ok,
                    st.grant.allows(Capability::ChannelsIncoming),
                )
            };
            // §14.3, by the rule `mcpl check` reports (content: the string form or App. B.1
            // blocks, as the typed message reads it).
            let malformed =
                !crate::protocol::channels::incoming_message_defects(m, "message").is_empty();
            let rejection = if malformed {
                Some(("invalid_message", codes::INVALID_PARAMS))
            } else if !registered {
                Some(("unknown_channel", codes::UNKNOWN_CHANNEL))
            } else if !granted || !inbound_ok || !self.channel_permitted(cid) {
                Some(("channel_not_permitted", codes::CHANNEL_NOT_PERMITTED))
            } else {
                None
            };
            if let Some((reason, code)) = rejection {
                self.inner.diag(HostDiagnostic::ChannelRejected {
                    method: M.into(),
                    id: mid.clone(),
                    reason,
                    filtered_notification: false,
                });
                results.push(json!({
                    "messageId": mid, "accepted": false, "reason": reason, "code": code
                }));
                continue;
            }
            let tags = self.expand_tags(
                M,
                m.get("tags"),
                AdmittedEvent {
                    source: &label,
                    feature_set: None,
                    channel: Some(cid),
                },
            );
            if self.inner.event(HostEvent::ChannelMessage {
                channel_id: cid.to_owned(),
                message: m.clone(),
                tags,
            }) {
                results.push(json!({ "messageId": mid, "accepted": true }));
            } else {
                results.push(json!({ "messageId": mid, "accepted": false, "reason": "host_busy" }));
            }
        }
        Ok(json!({ "results": results }))
    }

    // -----------------------------------------------------------------------------------
    // Manifest review (§17.5–§17.8)
    // -----------------------------------------------------------------------------------

    fn on_manifest_changed(&self, params: Option<&Value>) {
        if !self.inner.mcpl_advertised.load(Ordering::SeqCst) {
            self.inner.diag(HostDiagnostic::UnexpectedMethod {
                method: "mcpl/manifestChanged".into(),
            });
            return;
        }
        let announced = params
            .and_then(|p| p.get("revision"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let decision = {
            let mut st = self.inner.state();
            if announced.is_some() {
                st.announced = announced;
            }
            let d = st.limiter.on_notification(Instant::now());
            (d, st.limiter.dropped())
        };
        match decision {
            (FetchDecision::FetchNow, _) => {
                let s = self.clone();
                tokio::spawn(async move { s.fetch_loop().await });
            }
            (FetchDecision::Coalesced, _) => {}
            (FetchDecision::Dropped, total) => {
                self.inner.diag(HostDiagnostic::ManifestFetchDropped {
                    dropped_total: total,
                })
            }
        }
    }

    async fn fetch_loop(&self) {
        loop {
            let announced = self.inner.state().announced.take();
            self.fetch_and_review(announced).await;
            let (again, dropped) = {
                let mut st = self.inner.state();
                let before = st.limiter.dropped();
                let again = st.limiter.on_fetch_complete(Instant::now());
                (
                    again,
                    (st.limiter.dropped() > before).then(|| st.limiter.dropped()),
                )
            };
            if let Some(total) = dropped {
                self.inner.diag(HostDiagnostic::ManifestFetchDropped {
                    dropped_total: total,
                });
            }
            if !again {
                break;
            }
        }
    }

    /// One `mcpl/manifest` fetch and its review; returns the change receipt, if any.
    async fn fetch_and_review(&self, announced: Option<String>) -> Option<ChangeReceipt> {
        let r = self
            .inner
            .peer
            .request_raw_with(
                "mcpl/manifest",
                Some(json!({})),
                RequestOptions::new().timeout(self.inner.config.manifest_timeout),
            )
            .await;
        let fetched = match r {
            Ok(v) => v,
            Err(e) => {
                self.inner.diag(HostDiagnostic::ManifestFetchFailed {
                    detail: e.to_string(),
                });
                return None;
            }
        };
        let limit = self.inner.config.max_feature_sets;
        if let Err(e) = within_feature_set_bound(&fetched, limit) {
            self.inner.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("{e}; it is refused and the manifest in force stands"),
            });
            return None;
        }
        let (outcome, narrowed) = {
            let mut st = self.inner.state();
            let review = st.review.as_mut()?;
            let outcome = review.on_fetched(&fetched, announced.as_deref(), SystemTime::now());
            let adv = review.advertised();
            // Removals revoke host-side first (§17.5 step 3, §6.7).
            let kept = st.grant.intersect(adv);
            let narrowed = (kept != st.grant).then_some(kept);
            if let Some(k) = narrowed {
                st.narrow_to(k);
                if let Some(r) = st.review.as_mut() {
                    r.set_grant(k, SystemTime::now(), "manifest-revocation");
                }
            }
            (outcome, narrowed.is_some())
        };
        for f in &outcome.findings {
            self.inner.diag(HostDiagnostic::ManifestFinding {
                code: f.code,
                path: f.path.clone(),
                message: f.message.clone(),
            });
        }
        for f in &outcome.defects {
            self.inner.diag(HostDiagnostic::ManifestDefect {
                code: f.code,
                message: f.message.clone(),
            });
        }
        if let FetchResult::PreviousStands {
            code,
            consecutive_failures,
        } = outcome.result
        {
            self.inner.diag(HostDiagnostic::ManifestUnparseable {
                code,
                consecutive_failures,
            });
            if self.suspend_if_due() {
                // The grant shrank: the server is told by Request like any reduction (§6.7).
                self.tell_reduction().await;
            }
        }
        let receipt = outcome.receipt().cloned();
        if let Some(r) = &receipt {
            self.inner.event(HostEvent::ManifestChange(r.clone()));
        }
        if narrowed && self.mode() == Mode::Mcpl {
            self.tell_reduction().await;
        }
        receipt
    }

    /// Suspends MCPL (§17.5) when it is active and enough consecutive fetches were
    /// unusable; `true` when it did (the caller then tells the reduction).
    fn suspend_if_due(&self) -> bool {
        let due = {
            let st = self.inner.state();
            let threshold = self.inner.config.suspend_after_failures;
            st.mode == Mode::Mcpl && st.review.as_ref().is_some_and(|r| r.may_suspend(threshold))
        };
        if due {
            self.enter_mcp_only(McpOnlyReason::Suspended);
        }
        due
    }

    /// The wire position a receipt's consequences count from: the frame after it, so a
    /// batch carrying the receipt counts as before it (fail closed).
    fn receipt_boundary(&self) -> u64 {
        self.inner.policy_read.load(Ordering::SeqCst) + 1
    }

    /// Sends the Request for a reduction already applied host-side (§6.7), telling the grant
    /// in force once no other exchange is in flight: the receipt is testimony, never a
    /// widening; a refusal falls back as it says.
    async fn tell_reduction(&self) {
        let _g = self.inner.policy_lock.lock().await;
        let _applied = PolicyApplied(&self.inner);
        let (adv, kept) = {
            let st = self.inner.state();
            let adv = st
                .review
                .as_ref()
                .map_or(CapabilitySet::EMPTY, |r| r.advertised());
            (adv, st.grant)
        };
        let hg = HostGrant {
            advertised: adv,
            effective: kept,
            denied: adv.difference(kept.capabilities()),
        };
        let cfg = &self.inner.config;
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        match self.policy_request(params).await {
            Ok(v) => {
                if let Some(Receipt::Refused { fallback, .. }) = self.read_receipt(&v) {
                    if self.mode() == Mode::Mcpl {
                        self.enter_mcp_only(McpOnlyReason::Refused);
                    }
                    if fallback == Fallback::Close {
                        self.inner.peer.close();
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "reduction Request unanswered"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Lifecycle emitter (§10.5)
// ---------------------------------------------------------------------------------------

/// How a turn ended (§10.5 terminal phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// `completed`.
    Completed,
    /// `aborted`.
    Aborted,
    /// `failed`.
    Failed,
}

impl Terminal {
    fn as_str(self) -> &'static str {
        match self {
            Terminal::Completed => "completed",
            Terminal::Aborted => "aborted",
            Terminal::Failed => "failed",
        }
    }
}

/// A started turn (§10.5): exactly one terminal per `started` on every exit path the host
/// controls. Finish it with [`Turn::complete`], [`Turn::fail`] or [`Turn::abort`]; dropping it
/// unfinished sends `aborted` (from a spawned task, when a tokio runtime is running).
#[derive(Debug)]
#[must_use = "dropping a turn sends `aborted`"]
pub struct Turn {
    session: HostSession,
    /// Whether the terminal is still owed: true until a terminal frame is queued (or refused
    /// and reported), so a finish whose future is dropped mid-send still ends the turn from
    /// `Drop` (§10.5: every exit path the host controls).
    owed: bool,
    inference_id: String,
    conversation_id: String,
    turn_index: u64,
}

impl Turn {
    /// The inference id.
    pub fn inference_id(&self) -> &str {
        &self.inference_id
    }

    fn params(&self, t: Terminal, usage: Option<Value>) -> Value {
        let mut p = json!({
            "inferenceId": self.inference_id,
            "conversationId": self.conversation_id,
            "turnIndex": self.turn_index,
            "phase": t.as_str(),
        });
        if let (Some(u), Some(o)) = (usage, p.as_object_mut()) {
            o.insert("usage".into(), u);
        }
        p
    }

    /// Sends terminal `t`. The turn stays owed while the frame waits for room in the
    /// outgoing queue: if this future is cancelled (a timeout, a `select!`), nothing was
    /// queued and `Drop` sends `aborted` instead, so exactly one terminal is still attempted
    /// (§10.5). Once the frame is queued, or refused and reported, nothing more is owed.
    async fn finish(mut self, t: Terminal, usage: Option<Value>) -> Result<(), HostError> {
        if !self.owed {
            return Ok(());
        }
        let params = self.params(t, usage);
        let r = self
            .session
            .notify_gated("inference/lifecycle", params)
            .await;
        self.owed = false;
        if let Err(e) = &r {
            self.session.inner.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: self.inference_id.clone(),
                detail: e.to_string(),
            });
        }
        r
    }

    /// Sends `completed`, with `usage` (`{inputTokens, outputTokens}`) when given.
    pub async fn complete(self, usage: Option<Value>) -> Result<(), HostError> {
        self.finish(Terminal::Completed, usage).await
    }

    /// Sends `failed`.
    pub async fn fail(self) -> Result<(), HostError> {
        self.finish(Terminal::Failed, None).await
    }

    /// Sends `aborted`.
    pub async fn abort(self) -> Result<(), HostError> {
        self.finish(Terminal::Aborted, None).await
    }
}

/// A turn's claim on its inference id while `started` is being sent (see
/// [`HostSession::start_turn`]).
struct TurnClaim<'a> {
    inner: &'a Inner,
    inference_id: &'a str,
    armed: bool,
}

impl Drop for TurnClaim<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.state().turns.release(self.inference_id);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.session.inner.state().turns.end(&self.inference_id);
        if !std::mem::replace(&mut self.owed, false) {
            return;
        }
        let s = self.session.clone();
        let params = self.params(Terminal::Aborted, None);
        let id = self.inference_id.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    if let Err(e) = s.notify_gated("inference/lifecycle", params).await {
                        s.inner.diag(HostDiagnostic::LifecycleNotSent {
                            inference_id: id,
                            detail: e.to_string(),
                        });
                    }
                });
            }
            Err(_) => s.inner.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: id,
                detail: "no runtime to send `aborted` from".into(),
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Outgoing channel streams (§14.3)
// ---------------------------------------------------------------------------------------

/// Emits one inference's `channels/outgoing/chunk` and `channels/outgoing/complete` to one
/// server (§14.3): `index` is one counter across all channels of the inference, each channel
/// that received chunks gets exactly one `complete` carrying its whole text, on every exit
/// path — [`OutgoingStream::finish`], or dropping the stream (sent from a spawned task).
/// Every send is gated like any channel method: `channels.streaming` granted, and a channel
/// this server registered as outbound and the host's patterns permit. The text passed in is
/// what the host's delivery path would deliver (moderated: §14.3 fail closed).
#[derive(Debug)]
#[must_use = "dropping the stream completes its open channels"]
pub struct OutgoingStream {
    session: HostSession,
    inference_id: String,
    conversation_id: Option<String>,
    next: u64,
    open: BTreeMap<String, String>,
    /// Channels whose `complete` was sent: closed for the rest of the inference (§14.3).
    /// Bounded by the channels this server may hold registered ([`HostConfig::max_channels`]),
    /// since only those pass the gate.
    completed: HashSet<String>,
}

impl OutgoingStream {
    /// [`HostError::ChannelCompleted`] when `channel_id` was already completed.
    fn check_not_completed(&self, channel_id: &str) -> Result<(), HostError> {
        if self.completed.contains(channel_id) {
            return Err(HostError::ChannelCompleted {
                inference_id: self.inference_id.clone(),
                channel_id: channel_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Sends the next delta for `channel_id`. A channel already completed is refused with
    /// [`HostError::ChannelCompleted`] and nothing is sent: a reopened channel would get a
    /// second `complete` carrying only its later text (§14.3).
    pub async fn chunk(&mut self, channel_id: &str, delta: &str) -> Result<(), HostError> {
        self.check_not_completed(channel_id)?;
        let mut params = json!({ "inferenceId": self.inference_id, "channelId": channel_id,
                                 "index": self.next, "delta": delta });
        if let Some(c) = &self.conversation_id {
            params["conversationId"] = json!(c);
        }
        self.session
            .notify_gated("channels/outgoing/chunk", params)
            .await?;
        self.next += 1;
        self.open
            .entry(channel_id.to_owned())
            .or_default()
            .push_str(delta);
        Ok(())
    }

    /// Sends `complete` for `channel_id` with the whole text it streamed; a channel that got
    /// no chunk gets nothing (§14.3: one per channel that received chunks), and one already
    /// completed is refused with [`HostError::ChannelCompleted`].
    pub async fn complete(&mut self, channel_id: &str) -> Result<(), HostError> {
        self.check_not_completed(channel_id)?;
        let Some(text) = self.open.get(channel_id) else {
            return Ok(());
        };
        let params = complete_params(
            &self.inference_id,
            self.conversation_id.as_deref(),
            channel_id,
            text,
        );
        // Still owed (and completed on drop) until it is sent.
        self.session
            .notify_gated("channels/outgoing/complete", params)
            .await?;
        self.open.remove(channel_id);
        self.completed.insert(channel_id.to_owned());
        Ok(())
    }

    /// Completes every channel still open; the first failure is returned after all tried.
    pub async fn finish(mut self) -> Result<(), HostError> {
        let mut first = Ok(());
        let open: Vec<String> = self.open.keys().cloned().collect();
        for ch in open {
            if let Err(e) = self.complete(&ch).await {
                first = first.and(Err(e));
            }
        }
        first
    }
}

fn complete_params(
    inference_id: &str,
    conversation_id: Option<&str>,
    channel_id: &str,
    text: &str,
) -> Value {
    let mut params = json!({ "inferenceId": inference_id, "channelId": channel_id,
                             "content": [{ "type": "text", "text": text }] });
    if let Some(c) = conversation_id {
        params["conversationId"] = json!(c);
    }
    params
}

impl Drop for OutgoingStream {
    fn drop(&mut self) {
        lock(&self.session.inner.state)
            .streams
            .end(&self.inference_id);
        if self.open.is_empty() {
            return;
        }
        let open = std::mem::take(&mut self.open);
        let s = self.session.clone();
        let (inference, conversation) = (self.inference_id.clone(), self.conversation_id.clone());
        let Ok(h) = tokio::runtime::Handle::try_current() else {
            for channel_id in open.into_keys() {
                s.inner.diag(HostDiagnostic::OutgoingNotCompleted {
                    inference_id: inference.clone(),
                    channel_id,
                    detail: "no runtime to send `complete` from".into(),
                });
            }
            return;
        };
        h.spawn(async move {
            for (channel_id, text) in open {
                let params =
                    complete_params(&inference, conversation.as_deref(), &channel_id, &text);
                if let Err(e) = s.notify_gated("channels/outgoing/complete", params).await {
                    s.inner.diag(HostDiagnostic::OutgoingNotCompleted {
                        inference_id: inference.clone(),
                        channel_id,
                        detail: e.to_string(),
                    });
                }
            }
        });
    }
}

impl HostSession {
    /// Starts the outgoing stream of inference `inference_id` to this server (§14.3). One
    /// stream per inference and server, carrying all its channels: a second one for the same
    /// inference, while the first is open or after it ended, is [`HostError::StreamExists`].
    pub fn outgoing_stream(
        &self,
        inference_id: &str,
        conversation_id: Option<&str>,
    ) -> Result<OutgoingStream, HostError> {
        if !lock(&self.inner.state).streams.start(inference_id) {
            return Err(HostError::StreamExists(inference_id.to_owned()));
        }
        Ok(OutgoingStream {
            session: self.clone(),
            inference_id: inference_id.to_owned(),
            conversation_id: conversation_id.map(str::to_owned),
            next: 0,
            open: BTreeMap::new(),
            completed: HashSet::new(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// context/beforeInference fan-out (§10)
// ---------------------------------------------------------------------------------------

/// One accepted injection.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedInjection {
    /// The server's label.
    pub server: String,
    /// The injection object as received (its `featureSet`/`namespace` are testimony).
    pub injection: Value,
}

/// One rejected injection and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedInjection {
    /// The server's label.
    pub server: String,
    /// The injection object as received.
    pub injection: Value,
    /// Why it was refused.
    pub reason: policy::InjectionDenied,
}

/// A hook that contributed nothing (fail-open).
#[derive(Debug, Clone, PartialEq)]
pub struct HookFailure {
    /// The server's label.
    pub server: String,
    /// Why (timeout, error, bad result).
    pub detail: String,
}

/// The fan-out result, grouped by position (§10.4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Injections {
    /// `system` injections.
    pub system: Vec<AcceptedInjection>,
    /// `beforeUser` injections.
    pub before_user: Vec<AcceptedInjection>,
    /// `afterUser` injections.
    pub after_user: Vec<AcceptedInjection>,
    /// Every rejected injection.
    pub rejected: Vec<RejectedInjection>,
    /// Hooks that failed or timed out (fail-open).
    pub failures: Vec<HookFailure>,
    /// Servers the hook was sent to.
    pub consulted: Vec<String>,
}

/// Sends `context/beforeInference` (§10.1) to every session granted observe or any inject
/// leaf, concurrently, each with its own timeout, fail-open. `userMessage` is `null` where
/// `observe` is not granted. Each returned injection is authorized by its `position` against
/// that session's grant **current when the response is received** (§5.4); the claimed
/// `featureSet` and `namespace` never enter the decision.
pub async fn before_inference(sessions: &[&HostSession], params: &Value) -> Injections {
    let calls = sessions.iter().filter_map(|s| {
        let grant = {
            let st = s.inner.state();
            if st.mode != Mode::Mcpl || !st.ready {
                return None;
            }
            st.grant
        };
        if !policy::before_inference_applies(&grant) {
            return None;
        }
        let mut p = params.clone();
        policy::redact_before_inference(&grant, &mut p);
        let s = (*s).clone();
        Some(async move {
            let pin = HookPin::new(&s);
            let mark = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let r = s
                .inner
                .peer
                .request_raw_with(
                    "context/beforeInference",
                    Some(p),
                    RequestOptions::new()
                        .timeout(s.inner.config.hook_timeout)
                        .mark_position(mark.clone()),
                )
                .await;
            // The grant current at response receipt (§5.4): judged at the response's wire
            // position, so a widening read after it does not apply, however soon it lands.
            let at = mark.load(Ordering::SeqCst);
            // A policy receipt read before the response is applied first (a refusal's
            // fallback included), as for inbound messages.
            s.settle_policy_before(at).await;
            let grant = s.inner.state().in_force_for(at).1;
            drop(pin);
            (s, r, grant)
        })
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut out = Injections::default();
    for (s, r, grant) in answers {
        let server = s.label();
        out.consulted.push(server.clone());
        let fail = |out: &mut Injections, detail: String| {
            s.inner.diag(HostDiagnostic::HookFailed {
                server: server.clone(),
                detail: detail.clone(),
            });
            out.failures.push(HookFailure {
                server: server.clone(),
                detail,
            });
        };
        let v = match r {
            Ok(v) => v,
            Err(e) => {
                fail(&mut out, e.to_string());
                continue;
            }
        };
        let mut v = v;
        let limit = s.inner.config.max_injections_per_hook;
        let items = match v.get_mut("contextInjections") {
            None => Vec::new(),
            Some(Value::Array(a)) if a.len() > limit => {
                fail(
                    &mut out,
                    format!(
                        "{} contextInjections exceed the limit of {limit}; the answer is refused",
                        a.len()
                    ),
                );
                continue;
            }
            Some(Value::Array(a)) => std::mem::take(a),
            Some(_) => {
                fail(&mut out, "contextInjections is not an array".into());
                continue;
            }
        };
        let feature_set = v.get("featureSet").and_then(Value::as_str);
        // Judged under one look at the review (no await while it is held).
        let judged: Vec<_> = {
            let st = s.inner.state();
            let none = (policy::FeatureSets::default(), BTreeMap::new());
            let (decls, statuses) = match st.review.as_ref() {
                Some(r) => (r.declarations(), r.statuses_under(&grant)),
                None => (&none.0, std::borrow::Cow::Borrowed(&none.1)),
            };
            items
                .into_iter()
                .map(|inj| {
                    let r = policy::judge_injection(&grant, decls, &statuses, feature_set, &inj);
                    (inj, r)
                })
                .collect()
        };
        for (inj, verdict) in judged {
            match verdict {
                Ok(c) => {
                    let a = AcceptedInjection {
                        server: server.clone(),
                        injection: inj,
                    };
                    match c {
                        Capability::InjectSystem => out.system.push(a),
                        Capability::InjectBeforeUser => out.before_user.push(a),
                        _ => out.after_user.push(a),
                    }
                }
                Err(reason) => {
                    s.inner.diag(HostDiagnostic::InjectionRejected {
                        server: server.clone(),
                        reason: reason.to_string(),
                    });
                    out.rejected.push(RejectedInjection {
                        server: server.clone(),
                        injection: inj,
                        reason,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(caps: &[Capability]) -> Grant {
        Grant::from_set(caps.iter().fold(CapabilitySet::EMPTY, |s, c| s.with(*c)))
    }

    /// §5.3: a privileged message read before the receipt that made the session ready is
    /// judged not ready, however late it is handled; one read after it is judged ready.
    #[test]
    fn s5_3_readiness_counts_from_the_receipt() {
        let mut w = Widenings::default();
        let push = g(&[Capability::PushEvents]);
        w.record(10, (false, Grant::none()), (true, push));
        assert_eq!(w.judge(9, (true, push)), (false, Grant::none()));
        assert_eq!(w.judge(10, (true, push)), (true, push));
        assert_eq!(w.judge(11, (true, push)), (true, push));
    }

    /// §6.7: a widening applies from its receipt on; a narrowing needs no record because
    /// it applies to every message at once.
    #[test]
    fn s6_7_widening_counts_from_the_receipt_and_narrowing_at_once() {
        let mut w = Widenings::default();
        let tools = g(&[Capability::Tools]);
        let both = g(&[Capability::Tools, Capability::PushEvents]);
        w.record(5, (true, tools), (true, both));
        assert_eq!(w.judge(4, (true, both)), (true, tools));
        assert_eq!(w.judge(5, (true, both)), (true, both));
        // A narrowing records nothing: the earlier message still sees the older state.
        w.record(8, (true, both), (true, tools));
        assert_eq!(w.0.len(), 1);
        assert_eq!(w.judge(4, (true, tools)), (true, tools));
        assert_eq!(w.judge(7, (true, Grant::none())), (true, Grant::none()));
    }

    #[test]
    fn records_are_dropped_once_handling_passes_them() {
        let mut w = Widenings::default();
        let push = g(&[Capability::PushEvents]);
        w.record(3, (false, Grant::none()), (true, Grant::none()));
        w.record(7, (true, Grant::none()), (true, push));
        w.reached(2);
        assert_eq!(w.0.len(), 2);
        w.reached(3);
        assert_eq!(w.0.len(), 1);
        w.reached(7);
        assert!(w.0.is_empty());
    }

    /// Past the limit the two oldest records merge into the stricter of both: a message
    /// between their boundaries is judged more strictly than before, never less.
    #[test]
    fn merged_records_only_ever_deny_more() {
        let mut w = Widenings::default();
        let push = g(&[Capability::PushEvents]);
        let tools = g(&[Capability::Tools]);
        w.record(1, (false, Grant::none()), (true, push));
        for i in 0..BEFORE_LIMIT as u64 {
            let (old, new) = if i % 2 == 0 {
                (push, tools)
            } else {
                (tools, push)
            };
            w.record(2 + i, (true, old), (true, new));
        }
        assert_eq!(w.0.len(), BEFORE_LIMIT);
        // Read before everything: not ready and nothing granted, as without the merge.
        assert_eq!(w.judge(0, (true, push)), (false, Grant::none()));
        // Read between the first two boundaries: now also judged not ready (stricter).
        assert!(!w.judge(1, (true, push)).0);
        // Read after every boundary: the current state.
        assert_eq!(w.judge(1000, (true, push)), (true, push));
    }
}
