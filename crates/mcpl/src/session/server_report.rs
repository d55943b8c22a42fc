//! What a server session reports: [`ServerDiagnostic`], one typed value per observation,
//! shared by the sans-I/O [`ServerState`](super::ServerState) and the async
//! `server::Server`, which re-exports it.

use crate::jsonrpc::{ErrorObject, RequestId};
use crate::lifecycle::LifecycleDiagnostic;
use crate::policy::{Form, PolicyDiagnostic};

use super::rules::DroppedInjections;
use super::Refusal;

/// Whose mistake a [`ServerDiagnostic`] reports: what decides how loudly it is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiagnosticKind {
    /// The server's own code or configuration did something the session had to refuse or
    /// repair, and only its author can fix it. `server::Server` always logs it through
    /// `tracing` at `warn` (the first time per connection for each distinct message;
    /// repeats at `debug`), with what to change, and counts it
    /// (`server::Session::author_mistakes`).
    AuthorMistake,
    /// The host sent something the spec does not allow, or that the session ignores (a
    /// malformed or ungranted message, a lifecycle defect, an unknown notification …):
    /// logged at `info`.
    PeerDefect,
    /// An observation that is nobody's mistake: the host speaks another MCPL version and is
    /// served as a plain MCP host (§3.2), or a lifecycle note that is no §10.5 defect
    /// (`lifecycle_terminal_after_timeout`, `lifecycle_open_turns_limit`). Logged at `info`.
    Notice,
}

/// A non-fatal observation of a server session: a refused send, a dropped injection, a host
/// defect …. [`Self::code`] is the stable machine code (each variant names its own),
/// [`Self::kind`] whose mistake it is, and `Display` (`code: detail`) says what happened
/// and, for an author mistake, what to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerDiagnostic {
    /// `send_refused`: a typed sender (`push_event`, `channels_*`, `inference_*`,
    /// `model_info`, `send_mcp_*`) refused before the wire: the grant lacks the capability
    /// (§5.4), the feature set is unknown, unavailable or does not declare it (§6.4, §6.5),
    /// the policy has not arrived (§5.3), the host is MCP-only (§3.2), or the content, tags
    /// or timestamp are malformed.
    SendRefused {
        /// The method not sent.
        method: String,
        /// The refusal's own code (`server::SendError::code`: `capability_denied`, …).
        reason: &'static str,
        /// The refusal's message.
        detail: String,
    },
    /// `send_refused_policy_changed`: a typed sender refused before the wire, as
    /// [`Self::SendRefused`], by the policy (not ready, capability denied, feature set
    /// unavailable: §5.3, §5.4, §6.4) after the host changed it between the call and the
    /// refusal (a `featureSets/update` applied while the call waited to be taken, §6.7).
    /// The caller could not have known: nobody's mistake, a [`DiagnosticKind::Notice`].
    SendRefusedPolicyChanged {
        /// The method not sent.
        method: String,
        /// The refusal's own code (`server::SendError::code`).
        reason: &'static str,
        /// The refusal's message.
        detail: String,
    },
    /// `send_refused_channels_changed`: a `channels/incoming` refused before the wire, as
    /// [`Self::SendRefused`], naming a channel this connection no longer holds (§14.5) after
    /// the channels it holds changed between the call and the refusal (the host's
    /// `channels/close` answered `closed: true`, a change's answer, a reduction taken while
    /// the call waited to be taken, §14.3, §6.7). The caller could not have known: nobody's
    /// mistake, a [`DiagnosticKind::Notice`].
    SendRefusedChannelsChanged {
        /// The method not sent.
        method: String,
        /// The channel it named that is no longer held.
        channel_id: String,
        /// The refusal's message.
        detail: String,
    },
    /// `injection_dropped`: a `context/beforeInference` answer injected under an undeclared
    /// or unavailable feature set, or at a position not granted or not in the set's `uses`
    /// (§5.4, §6.4, §10.8); the host would have refused it, so it was not sent.
    InjectionDropped {
        /// The hook's own feature set, when the session knows it.
        hook_set: Option<String>,
        /// What was dropped, and why.
        dropped: DroppedInjections,
    },
    /// `handler_panicked`: a handler panicked (a request is answered `-32603`).
    HandlerPanicked {
        /// The method it handled.
        method: String,
    },
    /// `result_unencodable`: a handler returned a result that does not serialize, or that
    /// nests past what the host reads ([`crate::jsonrpc::outcome_defect`]); answered
    /// `-32603`.
    ResultUnencodable {
        /// The method it handled (`request <id>` from [`super::ServerState::answer`], which
        /// keeps no method per request).
        method: String,
        /// The serializer's error.
        error: String,
    },
    /// `handler_failed`: a notification handler returned an error, which has no response to
    /// travel in.
    HandlerFailed {
        /// The notification.
        method: String,
        /// The error it returned.
        error: ErrorObject,
    },
    /// `unhandled_notification`: the host sent a notification the grant allows (so the
    /// server advertised its capability) and no handler is registered for it.
    UnhandledNotification {
        /// The notification.
        method: String,
    },
    /// `fallback_experimental_replaced`: the MCP fallback's `initialize` result had a
    /// `capabilities.experimental` that is no object; replaced by one holding the manifest.
    FallbackExperimentalReplaced,
    /// `fallback_mcpl_replaced`: the MCP fallback's `initialize` result carried
    /// `capabilities.experimental.mcpl`; replaced by the session's manifest.
    FallbackMcplReplaced,
    /// `policy_malformed`: a `featureSets/update` the policy state machine could not read
    /// (a Request is answered `-32602`; a Notification clears the grant, §6.7).
    PolicyMalformed {
        /// The form it came in.
        form: Form,
        /// What was wrong.
        error: String,
    },
    /// `notification_field_discarded` or `unknown_feature_set`: an observation of the policy
    /// state machine while applying an update (§6.7).
    Policy(PolicyDiagnostic),
    /// `grant_beyond_advertisement`: a policy Request granted paths this server does not
    /// advertise. §5.4 makes the grant the intersection of the advertisement and host
    /// policy, so the server narrows the grant in force to its own advertisement (fail
    /// closed): each such path behaves as never granted. A [`DiagnosticKind::PeerDefect`]
    /// when the host named a path exactly, a [`DiagnosticKind::Notice`] when only a `*`
    /// pattern reached past the advertisement (patterns resolve against the vocabulary).
    GrantBeyondAdvertisement {
        /// Unadvertised paths `effectiveCapabilities` named exactly.
        named: crate::capability::CapabilitySet,
        /// Unadvertised paths reached only by a `*` pattern.
        by_pattern: crate::capability::CapabilitySet,
    },
    /// `notification_denied`: a host notification the admission rule refuses (not ready,
    /// not granted, §5.3, §5.4); a notification has no response to carry the error.
    NotificationDenied {
        /// The notification.
        method: String,
        /// Why ([`admit_at_server`](super::admit_at_server)).
        refusal: Refusal,
    },
    /// `invalid_notification`: a host notification whose params do not parse.
    InvalidNotification {
        /// The notification.
        method: String,
        /// What was wrong.
        error: String,
    },
    /// `unknown_notification`: a notification no MCPL or MCP rule names, or
    /// `featureSets/update` on an MCP-only connection (§3.2; any other MCPL notification
    /// there is [`Self::NotificationDenied`] with [`Refusal::NotReceived`]).
    UnknownNotification {
        /// The notification.
        method: String,
        /// Whether it is `featureSets/update` on an MCP-only connection.
        mcp_only: bool,
    },
    /// `ignored_notification`: an MCP notification the session does not act on
    /// (`notifications/progress`, a `notifications/cancelled` naming no request in flight,
    /// a `notifications/initialized` before `initialize` was answered or a second one …).
    IgnoredNotification {
        /// The notification.
        method: String,
    },
    /// `grant_names_no_path`: a policy Request's `effectiveCapabilities` lists entries that
    /// name no capability path (§5.4, §6.2: a typo, a case variant, a bare parent such as
    /// `channels`, a pattern short of the paths' depth such as `contextHooks.*`), which grant
    /// nothing: told once per Request, so the host's mistake is not absorbed.
    GrantNamesNoPath {
        /// The first few such entries as written (each clipped), with what to write instead.
        entries: Vec<(String, String)>,
        /// How many there were.
        count: usize,
    },
    /// `request_before_initialized`: a request other than `ping` read after `initialize`
    /// was answered and before MCP's `notifications/initialized`, which the host MUST send
    /// first (MCP's lifecycle; MCPL's policy Request comes after initialization, §5.3).
    /// Reading (fail safe, as nothing it asks for depends on the notification): the request
    /// is served as sent; told once per connection, for the first one.
    RequestBeforeInitialized {
        /// The request's method.
        method: String,
    },
    /// `unexpected_notification`: a notification the server sends, not receives, or a method
    /// §4.1 gives only the Request form (`channels/open` …) sent as a Notification: not
    /// applied ([`crate::protocol::Kind::takes`]).
    UnexpectedNotification {
        /// The notification.
        method: String,
    },
    /// `unknown_channel`: a host notification naming a channel this connection never
    /// registered nor opened, or no longer holds (§14.3; a Request is answered `-32023`,
    /// §14.6): not handed on.
    UnknownChannel {
        /// The notification.
        method: String,
        /// The channel it names.
        channel_id: String,
    },
    /// `opened_channel_dropped`: the application's answer to the host's `channels/open` of
    /// this channel may have reached the host only after it revoked `channels.lifecycle`
    /// (§6.7), when it refuses the answer (judged at its receipt, §5.4), or after it gave the
    /// open up (`cancelled`: its `notifications/cancelled` named it), when it never applies
    /// the answer: the channel is no longer held as opened (fail closed: its methods are
    /// answered `-32023`, §14.6) until the host opens it again.
    OpenedChannelDropped {
        /// The channel.
        channel_id: String,
        /// Whether the host cancelled the open (else it revoked `channels.lifecycle`).
        cancelled: bool,
    },
    /// `open_answer_refused`: the application answered the host's `channels/open` with a
    /// channel the host refuses (§14.3; its reason: `invalid_descriptor`, no `channel` or
    /// not of §14.2's shape; `type_mismatch`, another type than asked: the author's mistake;
    /// `capability_denied`, `channels.lifecycle` revoked before the answer, §5.4: a notice).
    /// The answer went as written; the server does not hold the channel.
    OpenAnswerRefused {
        /// The id the answer's `channel` names (`""` for none).
        channel_id: String,
        /// The host's reason.
        reason: &'static str,
    },
    /// `unknown_inference_chunk`: an `inference/chunk` for a request that is not streaming.
    UnknownInferenceChunk {
        /// The request it names.
        request_id: RequestId,
    },
    /// `inference_chunks_dropped`: an `inference/chunk` (§11.4) that the streaming request's
    /// reader had no room for (it holds [`INFERENCE_CHUNKS_HELD`] unread) or no longer reads:
    /// dropped, not held without bound; the final response still carries the whole result.
    InferenceChunkDropped {
        /// The request it names.
        request_id: RequestId,
        /// `"full"`, `"closed"`, or `"cancelled"` (the server gave the request up, its caller
        /// gone: reported once per request).
        reason: &'static str,
    },
    /// `notification_dropped`: a host notification admitted (§5.4) for a handler while
    /// the connection already ran as many notification handlers as it may at once
    /// (`PeerConfig::max_in_flight_requests`, 128 by default): not handled, not held.
    /// A notification has no answer to carry a busy error, so this is how the bound shows.
    NotificationDropped {
        /// The notification.
        method: String,
        /// The number of notification handlers a connection runs at once.
        limit: usize,
    },
    /// `notification_dropped` too: a host notification admitted for a handler while the
    /// notification handlers running on the connection held `PeerConfig::max_in_flight_bytes`
    /// of notifications (each weighed by what its params hold parsed,
    /// `jsonrpc::held_bytes`): not handled, not held.
    NotificationDroppedBytes {
        /// The notification.
        method: String,
        /// What the handlers running held, in bytes, with this one.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// `inference_result_malformed`: the host's `inference/request` result breaks §11.3.
    InferenceResultMalformed {
        /// Each defect found.
        defects: Vec<String>,
    },
    /// `unexpected_response`: a response to no request this session has in flight.
    UnexpectedResponse {
        /// Its id, if it had one.
        id: Option<RequestId>,
    },
    /// `fractional_id`: a request read from text ([`ServerState::handle_frame`],
    /// [`ServerState::handle_text`]) whose id is a number written with a fraction or an
    /// exponent (`2.0`, `2.5`): JSON-RPC 2.0 §4 says an id SHOULD NOT have a fractional
    /// part, a SHOULD NOT, so it is taken and answered under the same value (§5,
    /// [`crate::jsonrpc::request_id_number`]) and reported for its form, once per request,
    /// as the async server's peer reports it (`connection`: `peer::Diagnostic::FractionalId`).
    /// A defect of the host.
    ///
    /// [`ServerState::handle_frame`]: super::ServerState::handle_frame
    /// [`ServerState::handle_text`]: super::ServerState::handle_text
    FractionalId {
        /// The id, as it is answered under.
        id: RequestId,
        /// The request's method.
        method: String,
    },
    /// `unreadable`: a frame's text, or part of it, that [`ServerState::handle_frame`]
    /// could not take as a message (junk, an invalid entry of a batch, an empty batch or one
    /// past the bound, several messages on one line), as the async peer reports it
    /// (`connection`). A defect of the host.
    ///
    /// [`ServerState::handle_frame`]: super::ServerState::handle_frame
    Unreadable {
        /// The id it showed, as JSON text, if one could be read.
        id: Option<String>,
        /// What was wrong.
        detail: String,
        /// Whether an error was written for it (a request is answered under its id, or
        /// `null`; a response is never answered, and fails the request of the server's own
        /// it names).
        answered: bool,
    },
    /// A defect of the host's `inference/lifecycle` stream (§10.5; the `lifecycle_*` codes).
    Lifecycle(LifecycleDiagnostic),
    /// `lifecycle_missing_members`: a `started` signal that leaves out members §10.5's table
    /// requires on it (`conversationId`, `turnIndex`;
    /// [`LifecycleParams::missing_members`](crate::protocol::lifecycle::LifecycleParams::missing_members),
    /// the rule `mcpl check-host` judges a host by). The turn is paired all the same: it
    /// correlates by its `inferenceId`.
    LifecycleMissingMembers {
        /// The signal's `inferenceId` (bounded where it is read,
        /// `LifecycleConfig::max_id_bytes`).
        inference_id: String,
        /// The members left out, in the table's order.
        members: Vec<&'static str>,
    },
    /// `connection`: what the connection's reader reported (a junk line, a message that is
    /// not JSON-RPC, a response to no request, a request past the in-flight bound …), as
    /// `HostDiagnostic::Connection` is at the host. A `Notice` when it is the server's own
    /// bound at work (`Busy`, `OverBudget`, `Dropped`, `UnhandledNotification`), else a
    /// defect of the host.
    #[cfg(feature = "runtime")]
    Connection(crate::peer::Diagnostic),
    /// `host_mcpl_version`: the host advertises another MCPL version and is served as a
    /// plain MCP host (§3.2).
    HostMcplVersion {
        /// The version it advertised.
        version: String,
    },
    /// `host_mcpl_version_alias`: the host writes MCPL 0.5's version another way than §5.2's
    /// `"0.5"` (one of `handshake::MCPL_VERSION_ALIASES`, the document's full version
    /// names): served as MCPL 0.5 (`handshake::host_mcpl`'s reading).
    HostMcplVersionAlias {
        /// The spelling it wrote.
        version: &'static str,
    },
    /// `host_mcpl_malformed`: the host's `capabilities.experimental.mcpl` is not the object
    /// with a `version` that §5.2 (mirroring the server's shape) gives it. One that is no
    /// object (`true`, `"0.5"` …) advertises no MCPL, so the host is served as a plain MCP
    /// host (§3.3), as without one; an object without `version` is served as MCPL 0.5
    /// (`handshake::HostMcpl::Unversioned`).
    HostMcplMalformed {
        /// What it wrote there: a JSON type (`boolean`, `string` …), or `object without a
        /// version`.
        found: &'static str,
        /// Whether the host is served as MCPL 0.5 anyway (an object without `version`).
        mcpl: bool,
    },
    /// `user_message_unredacted`: a `context/beforeInference` carried a `userMessage` though
    /// `observe` is not granted (§10.1, `policy::unredacted_user_message`); the message was
    /// withheld from the application.
    UserMessageUnredacted,
    /// `invalid_rules`: the [`super::ServerRules`] the state was built with cannot work
    /// ([`super::ServerRules::defects`]: a bound of 0, a timeout under 1 ms); the state runs
    /// with them as given, and this says why it refuses what it refuses. An author mistake,
    /// told first of all.
    InvalidRules {
        /// One line per field, naming it and what to give.
        defects: Vec<String>,
    },
    /// `input_ended`: the host ended its output (EOF, a half-close) while the connection
    /// is still writable: the server's own requests still waiting failed at once, and
    /// requests sent from now on are refused, as nothing can answer them; what the host is
    /// owed is still written (`ServerState::handle_eof`). Told once, and only for the
    /// host's end of output, not for a close.
    InputEnded,
    /// `request_unanswered`: a request the application sent through
    /// `ServerState::request` (`id`, the number it returned) ends without an answer, as
    /// nothing can answer it now: the host ended its output (`closed: false`, told after
    /// [`Self::InputEnded`]) or the connection closed (`closed: true`). One for each request
    /// still waiting then, so a sans-I/O driver fails each caller by its id; nobody's
    /// mistake. `server::Server` fails its callers itself and does not report it.
    RequestUnanswered {
        /// The id `ServerState::request` returned.
        id: u64,
        /// Whether the connection closed (`ServerState::handle_close`) rather than the
        /// host's output ended (`ServerState::handle_eof`).
        closed: bool,
    },
}

impl ServerDiagnostic {
    /// The diagnostic with every text the host chose cut by [`super::clip_text`] (a method
    /// name, a version, an error quoting its input …): the diagnostics waiting for the
    /// application are bounded in number, this bounds each one's size, which the host
    /// otherwise chose (up to a whole message). [`super::ServerState::poll_output`] and
    /// `server::Server` report every diagnostic so.
    pub fn clipped(mut self) -> ServerDiagnostic {
        use super::clip_text;
        use ServerDiagnostic as D;
        match &mut self {
            D::SendRefused { method, detail, .. }
            | D::SendRefusedPolicyChanged { method, detail, .. }
            | D::ResultUnencodable {
                method,
                error: detail,
            }
            | D::InvalidNotification {
                method,
                error: detail,
            } => {
                clip_text(method);
                clip_text(detail);
            }
            D::HandlerPanicked { method }
            | D::HandlerFailed { method, .. }
            | D::UnhandledNotification { method }
            | D::NotificationDenied { method, .. }
            | D::UnknownNotification { method, .. }
            | D::IgnoredNotification { method }
            | D::RequestBeforeInitialized { method }
            | D::UnexpectedNotification { method }
            | D::NotificationDropped { method, .. }
            | D::NotificationDroppedBytes { method, .. }
            | D::FractionalId { method, .. } => clip_text(method),
            D::PolicyMalformed { error, .. } => clip_text(error),
            D::Unreadable { id, detail, .. } => {
                id.iter_mut().for_each(clip_text);
                clip_text(detail);
            }
            D::OpenedChannelDropped { channel_id, .. } | D::OpenAnswerRefused { channel_id, .. } => {
                clip_text(channel_id)
            }
            D::UnknownChannel { method, channel_id } => {
                clip_text(method);
                clip_text(channel_id);
            }
            D::SendRefusedChannelsChanged {
                method,
                channel_id,
                detail,
            } => {
                clip_text(method);
                clip_text(channel_id);
                clip_text(detail);
            }
            D::Policy(p) => clip_text(&mut p.detail),
            D::HostMcplVersion { version } => clip_text(version),
            D::InferenceResultMalformed { defects } => defects.iter_mut().for_each(clip_text),
            #[cfg(feature = "runtime")]
            D::Connection(d) => d.clip(clip_text),
            // Bounded where they are read: ids (`jsonrpc::MAX_ID_BYTES`), lifecycle ids
            // (`LifecycleConfig::max_id_bytes`), the injections the server's own code made.
            D::InjectionDropped { .. }
            | D::FallbackExperimentalReplaced
            | D::FallbackMcplReplaced
            | D::UnknownInferenceChunk { .. }
            | D::InferenceChunkDropped { .. }
            | D::UnexpectedResponse { .. }
            | D::Lifecycle(_)
            | D::LifecycleMissingMembers { .. }
            | D::UserMessageUnredacted
            | D::GrantBeyondAdvertisement { .. }
            // Clipped where they are read (`policy_answer::names_no_path`).
            | D::GrantNamesNoPath { .. }
            // A JSON type's name, or one of the crate's own spellings.
            | D::HostMcplMalformed { .. }
            | D::HostMcplVersionAlias { .. }
            // The crate's own text about the author's rules.
            | D::InvalidRules { .. }
            | D::InputEnded
            | D::RequestUnanswered { .. } => {}
        }
        self
    }

    /// The stable machine code, e.g. `injection_dropped`, `lifecycle_second_terminal`.
    pub fn code(&self) -> &'static str {
        use ServerDiagnostic as D;
        match self {
            D::SendRefused { .. } => "send_refused",
            D::SendRefusedPolicyChanged { .. } => "send_refused_policy_changed",
            D::SendRefusedChannelsChanged { .. } => "send_refused_channels_changed",
            D::InjectionDropped { .. } => "injection_dropped",
            D::HandlerPanicked { .. } => "handler_panicked",
            D::ResultUnencodable { .. } => "result_unencodable",
            D::HandlerFailed { .. } => "handler_failed",
            D::UnhandledNotification { .. } => "unhandled_notification",
            D::FallbackExperimentalReplaced => "fallback_experimental_replaced",
            D::FallbackMcplReplaced => "fallback_mcpl_replaced",
            D::PolicyMalformed { .. } => "policy_malformed",
            D::Policy(d) => d.code,
            D::GrantBeyondAdvertisement { .. } => "grant_beyond_advertisement",
            D::GrantNamesNoPath { .. } => "grant_names_no_path",
            D::NotificationDenied { .. } => "notification_denied",
            D::InvalidNotification { .. } => "invalid_notification",
            D::UnknownNotification { .. } => "unknown_notification",
            D::IgnoredNotification { .. } => "ignored_notification",
            D::RequestBeforeInitialized { .. } => "request_before_initialized",
            D::UnexpectedNotification { .. } => "unexpected_notification",
            D::UnknownChannel { .. } => "unknown_channel",
            D::OpenedChannelDropped { .. } => "opened_channel_dropped",
            D::OpenAnswerRefused { .. } => "open_answer_refused",
            D::UnknownInferenceChunk { .. } => "unknown_inference_chunk",
            D::InferenceChunkDropped { .. } => "inference_chunks_dropped",
            D::NotificationDropped { .. } | D::NotificationDroppedBytes { .. } => {
                "notification_dropped"
            }
            D::InferenceResultMalformed { .. } => "inference_result_malformed",
            D::UnexpectedResponse { .. } => "unexpected_response",
            D::FractionalId { .. } => "fractional_id",
            D::Unreadable { .. } => "unreadable",
            D::Lifecycle(d) => d.code(),
            D::LifecycleMissingMembers { .. } => "lifecycle_missing_members",
            #[cfg(feature = "runtime")]
            D::Connection(_) => "connection",
            D::HostMcplVersion { .. } => "host_mcpl_version",
            D::HostMcplVersionAlias { .. } => "host_mcpl_version_alias",
            D::HostMcplMalformed { .. } => "host_mcpl_malformed",
            D::UserMessageUnredacted => "user_message_unredacted",
            D::InvalidRules { .. } => "invalid_rules",
            D::InputEnded => "input_ended",
            D::RequestUnanswered { .. } => "request_unanswered",
        }
    }

    /// Whose mistake it reports.
    pub fn kind(&self) -> DiagnosticKind {
        use ServerDiagnostic as D;
        match self {
            D::SendRefused { .. }
            | D::InjectionDropped { .. }
            | D::HandlerPanicked { .. }
            | D::ResultUnencodable { .. }
            | D::HandlerFailed { .. }
            | D::UnhandledNotification { .. }
            | D::FallbackExperimentalReplaced
            | D::FallbackMcplReplaced
            | D::InvalidRules { .. } => DiagnosticKind::AuthorMistake,
            D::OpenAnswerRefused { reason, .. } if *reason != "capability_denied" => {
                DiagnosticKind::AuthorMistake
            }
            // A revocation read before the answer was sent: nobody's mistake.
            D::OpenAnswerRefused { .. } => DiagnosticKind::Notice,
            // The server's own bound at work (or its reader gone): no defect of the host.
            D::HostMcplVersion { .. }
            | D::HostMcplVersionAlias { .. }
            | D::InferenceChunkDropped { .. }
            | D::NotificationDropped { .. }
            | D::NotificationDroppedBytes { .. }
            // A host may end its output while it still reads: no defect.
            | D::InputEnded
            // Nothing can answer it any more: the connection's end, no defect.
            | D::RequestUnanswered { .. }
            // A race of the two sides' orderings (§6.7), nobody's mistake.
            | D::OpenedChannelDropped { .. }
            | D::SendRefusedPolicyChanged { .. }
            // The host changed the connection's channels while the call waited (§14.3).
            | D::SendRefusedChannelsChanged { .. } => DiagnosticKind::Notice,
            // Only a `*` pattern reached past the advertisement: narrowed, no path named.
            D::GrantBeyondAdvertisement { named, .. } if named.is_empty() => {
                DiagnosticKind::Notice
            }
            // A terminal after the safety timeout, or the open-turns bound: the server's own
            // limits at work, no §10.5 defect of the host.
            D::Lifecycle(d) if !d.is_conformance_defect() => DiagnosticKind::Notice,
            #[cfg(feature = "runtime")]
            D::Connection(
                crate::peer::Diagnostic::Busy { .. }
                | crate::peer::Diagnostic::OverBudget { .. }
                | crate::peer::Diagnostic::Dropped { .. }
                | crate::peer::Diagnostic::UnhandledNotification { .. },
            ) => DiagnosticKind::Notice,
            _ => DiagnosticKind::PeerDefect,
        }
    }

    /// Whether it reports a mistake of the server's author ([`DiagnosticKind::AuthorMistake`]).
    pub fn is_author_mistake(&self) -> bool {
        self.kind() == DiagnosticKind::AuthorMistake
    }

    /// What happened and, for an author mistake, what to change (`Display` without the code).
    pub fn detail(&self) -> String {
        Detail(self).to_string()
    }
}

impl std::fmt::Display for ServerDiagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), Detail(self))
    }
}

/// How many `inference/chunk`s a streaming `inference/request` holds unread before later
/// ones are dropped and reported ([`ServerDiagnostic::InferenceChunkDropped`]).
pub const INFERENCE_CHUNKS_HELD: usize = 1024;

/// A diagnostic's detail, written without its code.
struct Detail<'a>(&'a ServerDiagnostic);

impl std::fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ServerDiagnostic as D;
        match self.0 {
            D::SendRefused { method, detail, .. } => write!(f, "{method} not sent: {detail}"),
            D::SendRefusedPolicyChanged { method, detail, .. } => write!(
                f,
                "{method} not sent: {detail} (the host changed its policy after the call was \
                 made: nobody's mistake)"
            ),
            D::SendRefusedChannelsChanged { method, detail, .. } => write!(
                f,
                "{method} not sent: {detail} (the connection's channels changed after the call \
                 was made, e.g. the host closed it: nobody's mistake)"
            ),
            D::InjectionDropped { hook_set, dropped } => injection_dropped(f, hook_set, dropped),
            D::HandlerPanicked { method } => write!(
                f,
                "the {method} handler panicked (a request is answered -32603); return an error \
                 from it instead"
            ),
            D::ResultUnencodable { method, error } => write!(
                f,
                "the {method} handler's result does not serialize to JSON ({error}); answered \
                 -32603: fix the result type's Serialize"
            ),
            D::HandlerFailed { method, error } => write!(
                f,
                "the {method} handler returned an error ({}: {}), which a notification cannot \
                 carry back to the host; handle it in the handler",
                error.code, error.message
            ),
            D::UnhandledNotification { method } => write!(
                f,
                "the host sent {method}, which the grant allows, and no handler is registered: \
                 register one with ServerBuilder::on_{} or leave its capability out of the \
                 feature sets' uses",
                method.replace('/', "_")
            ),
            D::FallbackExperimentalReplaced => f.write_str(
                "the MCP fallback's initialize result has a capabilities.experimental that is \
                 not an object; replaced by one holding the manifest: make the fallback leave \
                 it out",
            ),
            D::FallbackMcplReplaced => f.write_str(
                "the MCP fallback's initialize result carried capabilities.experimental.mcpl; \
                 replaced by the session's manifest: declare MCPL on the ServerBuilder only",
            ),
            D::PolicyMalformed {
                form: Form::Notification,
                error,
            } => write!(
                f,
                "malformed featureSets/update notification; grant cleared: {error}"
            ),
            D::PolicyMalformed { error, .. } => f.write_str(error),
            D::Policy(d) => std::fmt::Display::fmt(d, f),
            D::GrantBeyondAdvertisement { named, by_pattern } => {
                grant_beyond_advertisement(f, *named, *by_pattern)
            }
            D::NotificationDenied { method, refusal } => match refusal {
                Refusal::NotReceived => {
                    write!(
                        f,
                        "ignored {method}: not a method this server receives (unknown, sent the \
                         wrong way, or MCPL on an MCP-only connection, §3.2)"
                    )
                }
                Refusal::NotReady(d) => write!(
                    f,
                    "ignored {method}: it arrived before the policy Request (§5.3) and needs \
                     `{}`",
                    d.capability
                ),
                Refusal::Denied(d) => write!(
                    f,
                    "ignored {method}: `{}` is not granted (§5.4)",
                    d.capability
                ),
            },
            D::InvalidNotification { method, error } => write!(f, "{method}: {error}"),
            D::UnknownNotification {
                method,
                mcp_only: true,
            } => write!(f, "{method} on an MCP-only connection"),
            D::UnknownNotification { method, .. } | D::IgnoredNotification { method } => {
                write!(f, "ignored notification {method}")
            }
            D::UnexpectedNotification { method } => {
                write!(f, "{method} is not a host-to-server notification")
            }
            D::GrantNamesNoPath { entries, count } => {
                write!(
                    f,
                    "the policy Request's effectiveCapabilities lists {count} entr{} naming no \
                     capability path, which grant nothing (§5.4, §6.2): ",
                    if *count == 1 { "y" } else { "ies" }
                )?;
                for (i, (entry, hint)) in entries.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{entry:?} ({hint})")?;
                }
                match count.saturating_sub(entries.len()) {
                    0 => Ok(()),
                    more => write!(f, "; and {more} more"),
                }
            }
            D::RequestBeforeInitialized { method } => write!(
                f,
                "the host sent {method} after initialize was answered but before \
                 notifications/initialized, which MCP's lifecycle requires first; served as \
                 sent (told once per connection)"
            ),
            D::UnknownChannel { method, channel_id } => write!(
                f,
                "ignored {method}: channel {channel_id} was never registered or opened on this \
                 connection, or is no longer (§14.3, §14.6)"
            ),
            D::OpenedChannelDropped {
                channel_id,
                cancelled,
            } => {
                let why = if *cancelled {
                    "the host cancelled its channels/open before it read the answer, which \
                     it then never applies"
                } else {
                    "the host revoked channels.lifecycle and may have read the answer to its \
                     channels/open only after, when it refuses it (§5.4, §6.7)"
                };
                write!(
                    f,
                    "channel {channel_id} is no longer held as opened: {why}; its methods on \
                     the channel are answered -32023 until it opens it again"
                )
            }
            D::OpenAnswerRefused { channel_id, reason } => {
                let fix = match *reason {
                    "capability_denied" => {
                        "channels.lifecycle was revoked before the answer was sent (§5.4)"
                    }
                    "type_mismatch" => "answer a channel of the type the host asked for",
                    _ => "answer a `channel` descriptor of §14.2's shape",
                };
                write!(
                    f,
                    "the channels/open answer naming channel {channel_id:?} is one the host \
                     refuses ({reason}), so the server does not hold it either: {fix}"
                )
            }
            D::UnknownInferenceChunk { request_id } => write!(
                f,
                "inference/chunk for request {request_id} that is not streaming"
            ),
            D::InferenceChunkDropped {
                request_id,
                reason: "cancelled",
            } => write!(
                f,
                "inference/chunks of request {request_id} were dropped: the server had \
                 cancelled the request (its caller no longer waited; chunks the host sent \
                 before it read the cancel, reported once)"
            ),
            D::InferenceChunkDropped { request_id, reason } => write!(
                f,
                "an inference/chunk of request {request_id} was dropped: its stream is {reason} \
                 (read InferenceStream::next_chunk as chunks arrive; the final result is whole)"
            ),
            D::NotificationDropped { method, limit } => write!(
                f,
                "{method} was not handled: {limit} notification handlers already run on this \
                 connection (PeerConfig::max_in_flight_requests); make the handler return \
                 sooner, or raise the bound"
            ),
            D::NotificationDroppedBytes {
                method,
                bytes,
                limit,
            } => write!(
                f,
                "{method} was not handled: with it the notification handlers running on this \
                 connection would hold {bytes} bytes of notifications, past the limit of {limit} \
                 (PeerConfig::max_in_flight_bytes); make the handler return sooner, or raise the \
                 bound"
            ),
            D::InferenceResultMalformed { defects } => f.write_str(&defects.join("; ")),
            D::UnexpectedResponse { id: Some(id) } => {
                write!(f, "a response to request {id}, which is not in flight")
            }
            D::FractionalId { id, method } => write!(
                f,
                "took request {id} ({method}) and answered it under that id: JSON-RPC 2.0 §4 \
                 says a numeric id SHOULD NOT have a fractional part"
            ),
            D::UnexpectedResponse { id: None } => {
                f.write_str("an error response without an id, to no request in flight")
            }
            D::Unreadable {
                id,
                detail,
                answered,
            } => {
                let id = id
                    .as_deref()
                    .map_or(String::new(), |id| format!(" (id {id})"));
                let then = match answered {
                    true => "answered with an error",
                    false => "not answered",
                };
                write!(f, "a frame the server could not read{id}: {detail}; {then}")
            }
            D::Lifecycle(d) => write!(f, "{d}"),
            D::LifecycleMissingMembers {
                inference_id,
                members,
            } => write!(
                f,
                "started for inferenceId {inference_id:?} leaves out {}, which §10.5's table \
                 requires on started; the turn is paired by its inferenceId all the same",
                members.join(" and ")
            ),
            #[cfg(feature = "runtime")]
            D::Connection(d) => write!(f, "{d}"),
            D::HostMcplVersion { version } => write!(
                f,
                "the host advertises MCPL version {version}, not {}: serving it as a plain MCP \
                 host (§3.2): tools work ungated, and the server sends it no MCPL method (each \
                 MCPL send is refused as MCP-only)",
                crate::protocol::handshake::MCPL_VERSION
            ),
            D::HostMcplVersionAlias { version } => write!(
                f,
                "the host advertises MCPL version \"{version}\", a full name of version {v}: \
                 served as MCPL {v} (§5.2 writes it \"{v}\")",
                v = crate::protocol::handshake::MCPL_VERSION
            ),
            D::HostMcplMalformed { found, mcpl: true } => write!(
                f,
                "the host's capabilities.experimental.mcpl is an {found} (§5.2 gives it \
                 \"version\"): served as MCPL {v}, the only version this server speaks; the \
                 host should send {{\"version\": \"{v}\"}}",
                v = crate::protocol::handshake::MCPL_VERSION
            ),
            D::HostMcplMalformed { found, mcpl: false } => write!(
                f,
                "the host's capabilities.experimental.mcpl is a {found}, not an object with a \
                 version (§5.2): it advertises no MCPL, so the host is served as a plain MCP \
                 host (§3.3); the host must send {{\"version\": \"{}\"}} to speak MCPL",
                crate::protocol::handshake::MCPL_VERSION
            ),
            D::UserMessageUnredacted => f.write_str(
                "context/beforeInference carried userMessage though \
                 `contextHooks.beforeInference.observe` is not granted (§10.1); withheld from \
                 the hook",
            ),
            D::InvalidRules { defects } => write!(
                f,
                "the ServerRules cannot work as given: {}",
                defects.join("; ")
            ),
            D::InputEnded => f.write_str(
                "the host ended its output (EOF, a half-close): the server's requests still \
                 waiting failed, as nothing can answer them, and what the host is owed is \
                 still written",
            ),
            D::RequestUnanswered { id, closed } => write!(
                f,
                "the server's request {id} ends unanswered: {}, so nothing can answer it",
                if *closed {
                    "the connection closed"
                } else {
                    "the host ended its output"
                }
            ),
        }
    }
}

mod texts;
pub(crate) use texts::from_policy;
use texts::{grant_beyond_advertisement, injection_dropped};

#[cfg(test)]
mod tests;
