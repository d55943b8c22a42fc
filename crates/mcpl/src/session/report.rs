//! What a host session tells the application: its mode, events, diagnostics and policy
//! changes. Shared by the sans-I/O [`HostState`](super::HostState) and the async
//! `host::HostSession`, which re-exports them.

use serde_json::Value;

use crate::capability::{Capability, CapabilitySet, Grant};
use crate::manifest::review::ChangeReceipt;
use crate::policy::Receipt;
use crate::tags::ExpandedTags;

/// Why the session runs without MCPL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The server's manifest names another MCPL version (its `version` as JSON text, e.g.
    /// `"0.4"`): a protocol this host does not speak, so it is served as plain MCP (§3.3;
    /// the reading is `protocol::handshake::mcpl_version`'s).
    OtherVersion(String),
    /// The server's manifest has no `version` (App. B.3's schema requires one, §5.1): it
    /// does not say it is MCPL 0.5, so it is served as plain MCP (§3.3), fail closed.
    Unversioned,
    /// The server's `experimental.mcpl` is no object (its value as JSON text, e.g. `null`,
    /// `true`, `[]`): no manifest can be read from it (§5.1 shows only an object), so it is
    /// served as plain MCP (§3.3), fail closed, its MCP connection kept.
    NotAnObject(String),
    /// The server's manifest declares more feature sets (`count`) than
    /// `HostRules::max_feature_sets` (`limit`): it is refused before it is copied or
    /// reviewed (§6.1 sets no number), so nothing of MCPL is granted and the server is
    /// served as plain MCP (§3.3), fail closed, its MCP connection kept.
    TooManyFeatureSets {
        /// How many sets the manifest declares.
        count: usize,
        /// The host's bound.
        limit: usize,
    },
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
            McpOnlyReason::OtherVersion(v) => write!(
                f,
                "the server speaks MCPL version {v}, not \"0.5\": served as plain MCP, §3.3"
            ),
            McpOnlyReason::Unversioned => f.write_str(
                "the server's manifest has no `version` (App. B.3 requires one): served as \
                 plain MCP, §3.3",
            ),
            McpOnlyReason::NotAnObject(v) => write!(
                f,
                "the server's experimental.mcpl is {v}, not an object (§5.1): served as plain \
                 MCP, §3.3"
            ),
            McpOnlyReason::TooManyFeatureSets { count, limit } => write!(
                f,
                "the server's manifest declares {count} feature sets, past this host's limit \
                 of {limit} (HostConfig.max_feature_sets): served as plain MCP, §3.3"
            ),
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

/// A defect of the server or of the connection. `host::HostSession` also logs them through
/// `tracing` (each kind at most once per `transport::listen::REPORT_INTERVAL`, the next line
/// counting those not shown; its stream carries every one); [`HostState`](super::HostState) logs none, it only outputs them
/// ([`HostOutput::Diagnostic`](super::HostOutput::Diagnostic)), so a driver of its own logs
/// them itself or they go unseen.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostDiagnostic {
    /// A privileged method arrived before the initial receipt (§5.3).
    PrivilegedBeforeReady {
        /// The method.
        method: String,
    },
    /// A method arrived whose capability is not granted, or the application answered a
    /// request handed out ([`HostOutput::Request`](super::HostOutput::Request)) after its
    /// capability was revoked: the server was answered `-32002` in its place (§5.4).
    CapabilityDenied {
        /// The method.
        method: String,
        /// The missing capability.
        capability: Capability,
    },
    /// A method the host does not receive: unknown, host → server, or in a form §4.1 does
    /// not give it (a Request-only method such as `channels/register` or `channels/incoming`
    /// sent as a Notification: not applied, `protocol::Kind::takes`); or a notification it
    /// receives and does not act on (an MCP `notifications/*/list_changed` is acted on:
    /// [`HostEvent::ListChanged`], or a receipt under MCPL, §17.7); or a `list_changed` or
    /// MCP notification for the application ([`HostEvent::Notification`]) sent before the
    /// server's `initialize` result (§5.3: nothing before the handshake).
    UnexpectedMethod {
        /// The method.
        method: String,
    },
    /// Params of a server message were malformed, or (`detail` says so) a server request
    /// reused the id of one still in flight; a request is answered with an error.
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
        /// Machine code from [`crate::policy::ReceiptDefect`].
        code: &'static str,
        /// Where.
        path: String,
    },
    /// A channel descriptor or message was rejected (itemized; §14.5), or the channel a
    /// confirmed `channels/open` named was not registered (`ChannelTable::settle`).
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
        /// The section that decides it, as `mcpl validate` gives it
        /// ([`crate::manifest::review::Finding::section`]), e.g. `§5.1`.
        section: &'static str,
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
    /// `mcpl/manifestChanged` over the rate limit, dropped (§17.8): told at the first drop,
    /// then at most once per 10 s while drops go on, and once more when a fetch starts
    /// again after drops not yet told, each time with the total.
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
    /// A `channels/outgoing/complete` owed by a dropped `host::OutgoingStream` could not be sent.
    OutgoingNotCompleted {
        /// The inference id.
        inference_id: String,
        /// The channel.
        channel_id: String,
        /// Why.
        detail: String,
    },
    /// A response whose id names no request of the session's written (a sans-I/O
    /// [`HostState`](super::HostState) reports it; the async session's peer reports it as
    /// a connection defect). For the state machine a request is written once its frame
    /// left through [`HostState::poll_output`](super::HostState::poll_output): an answer
    /// under the id of one still queued there (a guess: ids are sequential) answers nothing
    /// the server received (JSON-RPC 2.0 §5), and settles nothing.
    UnexpectedResponse {
        /// The id as JSON text (`null` when absent).
        id: String,
    },
    /// A response whose id was written with a fraction or an exponent (`7.0`, `7e0`) and
    /// is, as a value, the id of a request of the host's own written and still waiting:
    /// taken as that request's answer (JSON-RPC 2.0 §5 asks for the id as sent) and
    /// reported for its form. A sans-I/O [`HostState`](super::HostState) reports it; the
    /// async session's peer reports it as a connection defect (`peer::Diagnostic::IntegralId`).
    IntegralId {
        /// The request's id, the one it answered (as the state machine's calls return it).
        id: u64,
        /// The id as read (`7e0` reads `7.0`).
        written: String,
    },
    /// A request read from text ([`HostState::handle_frame`](super::HostState::handle_frame),
    /// [`HostState::handle_text`](super::HostState::handle_text)) whose id is a number
    /// written with a fraction or an exponent (`2.0`, `2.5`): JSON-RPC 2.0 §4 says an id
    /// SHOULD NOT have a fractional part, a SHOULD NOT, so it is taken and answered under
    /// the same value (§5, [`crate::jsonrpc::request_id_number`]) and reported for its
    /// form, once per request, as the async session's peer reports it
    /// (`peer::Diagnostic::FractionalId`, a connection defect).
    FractionalId {
        /// The id as JSON text, as it is answered under.
        id: String,
        /// The request's method.
        method: String,
    },
    /// What a frame handed to [`HostState::handle_frame`](super::HostState::handle_frame)
    /// held that could not be taken as a message (JSON-RPC 2.0 §5, §6): a text that is no
    /// JSON or no JSON-RPC 2.0 message, a batch entry that is none, an empty batch or one
    /// past its bound, or several messages on one line (each then read alone). What the
    /// async host reports as [`HostDiagnostic::Connection`] (the peer's diagnostics).
    Unreadable {
        /// The id it showed, as JSON text, if one could be read.
        id: Option<String>,
        /// What was wrong.
        detail: String,
        /// Whether an error was written for it (a request is answered under its id, or
        /// `null`; a response is never answered, and fails the request of the host's own
        /// it names).
        answered: bool,
    },
    /// An event the application's queue had no room for (`host::HostConfig::event_capacity`,
    /// [`HostRules::max_pending_outputs`](super::HostRules::max_pending_outputs)): a mode
    /// change or a manifest change receipt, not delivered. (A push or channel message that
    /// finds the queue full is answered `host_busy` instead.)
    EventDropped {
        /// Which event ([`HostEvent::name`]): `ModeChanged`, `ManifestChange`,
        /// `ListChanged`, `Notification` or `InputEnded`.
        event: &'static str,
    },
    /// The application's request handler panicked: the server's request was answered
    /// `-32603` (the application's mistake, not the server's).
    HandlerPanicked {
        /// The request's method.
        method: String,
    },
    /// The application did not answer a server's request handed to it (`inference/request`,
    /// `model/info`) within its deadline (`host::HostConfig::answer_timeout`,
    /// [`HostRules::answer_timeout`](super::HostRules::answer_timeout)): the request was
    /// answered `-32603` with `data.reason: "answer_timeout"` (the application's mistake,
    /// not the server's), and the application's work on it stopped.
    AnswerTimedOut {
        /// The request's method.
        method: String,
        /// The request's id as JSON text.
        id: String,
        /// The deadline that passed.
        after: std::time::Duration,
    },
    /// The application's handler answered a server's request after its deadline had
    /// already answered it ([`HostDiagnostic::AnswerTimedOut`]): the answer was ready but
    /// came too late, so it was dropped and never reached the server. Raise
    /// `host::HostConfig::answer_timeout`, or answer sooner. The state machine's rule
    /// ([`HostState::answer`](super::HostState::answer) of such a request reports it too).
    /// An answer given by id alone ([`HostState::answer`](super::HostState::answer)) after
    /// the server handed out a new request under the same id (JSON-RPC 2.0 lets it reuse an
    /// answered id) is the new request's, and one to it the server cancelled is not late;
    /// `host::HostSession`'s driver knows which hand-out an answer comes from, so the
    /// first request's answer is still reported there.
    LateAnswer {
        /// The request's method.
        method: String,
        /// The request's id as JSON text.
        id: String,
    },
    /// A server's request the grant admits (`inference/request`, `model/info`) found no
    /// handler to answer it: it was answered `-32601`. No longer reached through
    /// `host::HostConfig`: what no handler serves is neither advertised nor granted
    /// ([`HostRules::unserved`](super::HostRules::unserved)), so such a request is refused
    /// `-32002` and the policy's mistake reported as [`HostDiagnostic::NotServed`]; kept
    /// for callers that match it.
    NoHandler {
        /// The request's method.
        method: String,
        /// The request's id as JSON text.
        id: String,
    },
    /// Entries of the host's policy that grant nothing the application can serve: each
    /// names only capabilities it has no one to answer for (`modelInfo` with no
    /// `host::HostConfig::request_handler`; `inferenceRequest` and its `streaming` leaf
    /// with neither `request_handler` nor `stream_handler`; for a
    /// [`HostState`](super::HostState), [`HostRules::unserved`](super::HostRules::unserved)),
    /// which are therefore neither advertised in `initialize` nor granted (§5.4: absence is
    /// denial), so a server's request needing one is refused `-32002`. Reported when the
    /// policy is applied (at connect, or by `set_policy`), never a refusal to connect: set
    /// the handler, or take the entries out of the policy. An entry that grants something
    /// served as well (`*`) is not reported; its unserved paths are left out all the same.
    NotServed {
        /// The policy entries, as written.
        entries: Vec<String>,
        /// The capabilities they name and the application cannot serve, sorted.
        capabilities: Vec<&'static str>,
    },
    /// The application's answer to a server's request could not be sent as it was: an
    /// `inference/request` result is malformed (§11.3), or the answer nests past what a peer
    /// reads ([`crate::jsonrpc::outcome_defect`]). The request was answered `-32603` saying
    /// why (the application's mistake, not the server's).
    AnswerReplaced {
        /// The request's id as JSON text.
        id: String,
        /// Why the answer could not go out.
        reason: String,
    },
    /// Diagnostics the application's queue had no room for
    /// (`host::HostConfig::diagnostics_capacity`), each still logged through `tracing`:
    /// counted since the last one delivered, and delivered ahead of the next one that finds
    /// room (or, when none comes, as the session's last diagnostic once the queue has room),
    /// so a reader of the queue knows what it missed.
    DiagnosticsDropped {
        /// How many were not delivered.
        count: u64,
    },
    /// A connection-level defect from the peer (junk lines, late responses…).
    #[cfg(feature = "runtime")]
    Connection(crate::peer::Diagnostic),
}

/// The most bytes a diagnostic keeps of one text the server chose (a method name, an id, a
/// detail quoting what it sent): past it the text is cut at a character boundary and its
/// length said ([`clip_text`]). The diagnostics waiting for the application are bounded by
/// their number; this bounds each one's size, which a server otherwise chose (up to a whole
/// message).
pub const DIAGNOSTIC_TEXT_BYTES: usize = 1024;

/// Cuts a text longer than [`DIAGNOSTIC_TEXT_BYTES`] to that many bytes, its end replaced
/// by `… (N bytes)` naming its length (cut at a character boundary); a text within it is
/// left as it is, so clipping twice changes nothing.
pub fn clip_text(s: &mut String) {
    if s.len() <= DIAGNOSTIC_TEXT_BYTES {
        return;
    }
    let said = format!("… ({} bytes)", s.len());
    let mut cut = DIAGNOSTIC_TEXT_BYTES.saturating_sub(said.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(&said);
    s.shrink_to_fit();
}

impl HostDiagnostic {
    /// The diagnostic with every text the server chose cut by [`clip_text`]. The host's
    /// state machine and `host::HostSession` report every diagnostic so.
    pub fn clipped(mut self) -> HostDiagnostic {
        use HostDiagnostic as D;
        match &mut self {
            D::PrivilegedBeforeReady { method }
            | D::CapabilityDenied { method, .. }
            | D::UnexpectedMethod { method }
            | D::HandlerPanicked { method } => clip_text(method),
            D::BadParams { method, detail }
            | D::TagIssue {
                method,
                issue: detail,
            } => {
                clip_text(method);
                clip_text(detail);
            }
            D::DuplicateEvent { event_id } => clip_text(event_id),
            D::DeclarationMismatch {
                method,
                feature_set,
                ..
            } => {
                clip_text(method);
                clip_text(feature_set);
            }
            D::ReceiptDefect { path, .. } => clip_text(path),
            D::ChannelRejected { method, id, .. } => {
                clip_text(method);
                clip_text(id);
            }
            D::ManifestFinding { path, message, .. } => {
                clip_text(path);
                clip_text(message);
            }
            D::ManifestDefect { message, .. } => clip_text(message),
            D::ManifestFetchFailed { detail }
            | D::UnexpectedResponse { id: detail }
            | D::IntegralId {
                written: detail, ..
            } => clip_text(detail),
            D::Unreadable { id, detail, .. } => {
                id.iter_mut().for_each(clip_text);
                clip_text(detail);
            }
            D::HookFailed { server, detail }
            | D::InjectionRejected {
                server,
                reason: detail,
            }
            | D::AnswerReplaced {
                id: server,
                reason: detail,
            }
            | D::AnswerTimedOut {
                method: server,
                id: detail,
                ..
            }
            | D::LateAnswer {
                method: server,
                id: detail,
            }
            | D::FractionalId {
                method: server,
                id: detail,
            }
            | D::NoHandler {
                method: server,
                id: detail,
            } => {
                clip_text(server);
                clip_text(detail);
            }
            D::LifecycleNotSent {
                inference_id,
                detail,
            } => {
                clip_text(inference_id);
                clip_text(detail);
            }
            D::OutgoingNotCompleted {
                inference_id,
                channel_id,
                detail,
            } => {
                clip_text(inference_id);
                clip_text(channel_id);
                clip_text(detail);
            }
            #[cfg(feature = "runtime")]
            D::Connection(d) => d.clip(clip_text),
            // The application's own text, not the server's.
            D::NotServed { .. }
            | D::ManifestUnparseable { .. }
            | D::ManifestFetchDropped { .. }
            | D::EventDropped { .. }
            | D::DiagnosticsDropped { .. } => {}
        }
        self
    }
}

/// Something the application should act on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
    /// The server ended its output (EOF, a half-close) while the connection is up: it sends
    /// nothing more, and the host's own requests still waiting ended then. Its requests the
    /// application still answers are written all the same (the server may still read) until
    /// the connection closes.
    InputEnded,
    /// The server's list of `tools`, `resources` or `prompts` changed (MCP 2024-11-05's
    /// `notifications/{tools,resources,prompts}/list_changed`, §17.7 leaves them
    /// unchanged): re-list it. Handed out where no manifest is reviewed (an MCP-only server,
    /// §3.3, or an MCPL server served as plain MCP); on an MCPL connection the same news is
    /// the `surface-changed` [`HostEvent::ManifestChange`] receipt naming the list, the one
    /// account of what changed (§17.7), and no `ListChanged` besides. Only once the
    /// server's `initialize` result was handled (the connection then known to be served as
    /// plain MCP): one sent before it is reported as [`HostDiagnostic::UnexpectedMethod`]
    /// (§5.3: nothing before the handshake). One per message, as
    /// any event bounded by the application's queue (reported as
    /// [`HostDiagnostic::EventDropped`] when it has no room).
    ListChanged(McpList),
    /// A server's MCP notification the host does not act on itself but the application may
    /// need (MCP 2024-11-05, server to client): `notifications/message` (a log message),
    /// `notifications/progress` (progress of a request the application sent with a
    /// `progressToken`) and `notifications/resources/updated` (a resource it subscribed to).
    /// As the server sent it, unjudged (no MCPL capability governs them), once the server's
    /// `initialize` result was handled (one sent before it is reported as
    /// [`HostDiagnostic::UnexpectedMethod`], §5.3); bounded as every
    /// event, by number and by [`HostEvent::weight`] (reported as
    /// [`HostDiagnostic::EventDropped`] when the application's queue has no room).
    Notification {
        /// The method.
        method: String,
        /// Its params, as sent.
        params: Option<Value>,
    },
}

/// The MCP notifications a server sends for the application
/// ([`HostEvent::Notification`]): the server-to-client ones of MCP 2024-11-05 the host does
/// not act on itself (`list_changed` is [`HostEvent::ListChanged`], `cancelled` the
/// host's).
pub(crate) const MCP_NOTIFICATIONS_FOR_THE_APPLICATION: [&str; 3] = [
    "notifications/message",
    "notifications/progress",
    "notifications/resources/updated",
];

/// A list a server announces the change of with MCP's `notifications/*/list_changed`
/// ([`HostEvent::ListChanged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpList {
    /// `tools/list` (`notifications/tools/list_changed`).
    Tools,
    /// `resources/list` (`notifications/resources/list_changed`).
    Resources,
    /// `prompts/list` (`notifications/prompts/list_changed`).
    Prompts,
}

impl McpList {
    /// The list a server's notification `method` announces a change of, by the host's one
    /// table of them ([`crate::manifest::review::announced_surface`]); `None` for any other
    /// method.
    pub fn of_method(method: &str) -> Option<McpList> {
        match crate::manifest::review::announced_surface(method)? {
            "tools" => Some(McpList::Tools),
            "resources" => Some(McpList::Resources),
            "prompts" => Some(McpList::Prompts),
            _ => None,
        }
    }

    /// The list's name (`tools`, `resources`, `prompts`): the surface a `surface-changed`
    /// receipt names (§17.7).
    pub fn as_str(self) -> &'static str {
        match self {
            McpList::Tools => "tools",
            McpList::Resources => "resources",
            McpList::Prompts => "prompts",
        }
    }
}

impl HostEvent {
    /// What the event holds, in bytes, as the host bounds the events waiting for the
    /// application (`host::HostConfig::max_event_bytes`,
    /// [`HostState::set_event_bytes`](super::HostState::set_event_bytes)): the heap a
    /// push's params or a channel message holds once parsed (estimated from its shape:
    /// each value's slot, each string's bytes, a map node per six members, as
    /// [`crate::jsonrpc::parsed_bytes`] estimates from a text), its strings and tags, a
    /// change receipt's strings and impacts, and the event itself. Computed by walking what
    /// it holds (linear in its size).
    pub fn weight(&self) -> usize {
        let tags = |t: &ExpandedTags| t.iter().map(|t| t.as_str().len()).sum::<usize>();
        let held = match self {
            HostEvent::Push {
                params,
                feature_set,
                event_id,
                tags: t,
            } => crate::jsonrpc::held_bytes(params) + feature_set.len() + event_id.len() + tags(t),
            HostEvent::ChannelMessage {
                channel_id,
                message,
                tags: t,
            } => crate::jsonrpc::held_bytes(message) + channel_id.len() + tags(t),
            // Its strings (subjects may come from the manifest) and one impact each.
            HostEvent::ManifestChange(r) => {
                let revisions =
                    r.revision.len() + r.previous_revision.as_ref().map_or(0, String::len);
                let impacts: usize = r
                    .impacts
                    .iter()
                    .map(|i| i.subject.len() + std::mem::size_of_val(i))
                    .sum();
                revisions + impacts + r.domains.len()
            }
            HostEvent::Notification { method, params } => {
                method.len() + params.as_ref().map_or(0, crate::jsonrpc::held_bytes)
            }
            HostEvent::ModeChanged(_) | HostEvent::InputEnded | HostEvent::ListChanged(_) => 0,
        };
        held.saturating_add(std::mem::size_of::<HostEvent>())
    }

    /// The variant's name, for [`HostDiagnostic::EventDropped`].
    pub fn name(&self) -> &'static str {
        match self {
            HostEvent::Push { .. } => "Push",
            HostEvent::ChannelMessage { .. } => "ChannelMessage",
            HostEvent::ManifestChange(_) => "ManifestChange",
            HostEvent::ModeChanged(_) => "ModeChanged",
            HostEvent::InputEnded => "InputEnded",
            HostEvent::ListChanged(_) => "ListChanged",
            HostEvent::Notification { .. } => "Notification",
        }
    }
}

/// The result of a policy change: `host::HostSession::set_policy` and
/// [`HostState::set_policy`](super::HostState::set_policy).
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
