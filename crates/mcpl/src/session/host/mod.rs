//! [`HostState`]: the host side of one connection as a state machine (§5.2, §5.3, §5.4,
//! §6.7, §9, §11.1). Inputs arrive in wire order, so every message is judged under exactly
//! the readiness and grant in force where it was read: no wire-position bookkeeping.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use super::channels::{ChannelLimits, ChannelTable};
use super::policy_state::{ChangePlan, ChangeRefused, DisableRefused, Effects, HostPolicy};
use super::rules::{self, Dedupe, Diagnostics, PolicyAnswer, PushVerdict};
use super::InferenceIds;
use super::{
    admit_at_host, HostDiagnostic, HostEvent, McpOnlyReason, Mode, PolicyChange, Refusal,
    Transmission,
};
use crate::capability::{Grant, PatternError, Requirement};
use crate::jsonrpc::{codes, ErrorObject, Message, Notification, Request, RequestId, Response};
use crate::manifest::review::{FetchDecision, FetchLimiter, ManifestReview};
use crate::policy::{HostGrant, Receipt};
use crate::protocol::channels::{ChannelsOutgoingChunk, ChannelsOutgoingComplete};
use crate::protocol::feature_sets::FeatureSetsUpdate;
use crate::protocol::handshake::Initialize;
use crate::protocol::hooks::BeforeInference;
use crate::protocol::inference::InferenceChunk;
use crate::protocol::manifest::ManifestFetch;
use crate::protocol::Method as _;

mod answers;
mod app_requests;
mod defects;
mod errors;
mod frames;
mod inbound;
mod pending;
mod served;
mod streams;
mod turns;

pub use app_requests::DEFAULT_ANSWER_TIMEOUT;
use app_requests::{AppRequest, AppRequests};
pub(crate) use defects::check_set_patterns;
pub use errors::{ConnectError, RulesError, StateError};

/// What a [`HostState`] is configured with: the protocol-relevant part of
/// `host::HostConfig` (whose defaults these are).
#[derive(Debug, Clone, PartialEq)]
pub struct HostRules {
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version` sent in `initialize`.
    pub client_version: String,
    /// MCP `protocolVersion` sent in `initialize`.
    pub protocol_version: String,
    /// The host's capability policy (patterns, §5.4).
    pub policy: Vec<String>,
    /// The `enabled` allowlist sent in policy Requests, if any (§6.7).
    pub enabled: Option<Vec<String>>,
    /// The `disabled` list sent in policy Requests (§6.7).
    pub disabled: Vec<String>,
    /// How long `initialize` may take.
    pub initialize_timeout: Duration,
    /// How long each policy Request may take.
    pub policy_timeout: Duration,
    /// How many `push/event` ids dedupe remembers (§9.4); at least 1, as every count here
    /// ([`HostRules::defects`] gives the reading for each).
    pub dedupe_window: usize,
    /// The longest `eventId` accepted, in bytes (at least 1: §9.2 requires one).
    pub max_event_id_bytes: usize,
    /// The most feature sets a manifest may declare (§6.1 sets no number; at least 1).
    pub max_feature_sets: usize,
    /// Channel bounds and patterns (§14.5).
    pub channels: ChannelLimits,
    /// How long an `mcpl/manifest` fetch may take (§17.4).
    pub manifest_timeout: Duration,
    /// §17.8 token bucket: burst size.
    pub manifest_fetch_burst: u32,
    /// §17.8 token bucket: tokens per second.
    pub manifest_fetch_per_sec: f64,
    /// Consecutive unparseable manifests after which MCPL is suspended (at least 2, §17.5).
    pub suspend_after_failures: u32,
    /// How long a `context/beforeInference` hook may take (fail-open after it, §10.1).
    pub hook_timeout: Duration,
    /// The most `contextInjections` one hook answer may carry (at least 1: taking none is
    /// said by the policy's inject leaves, §5.4).
    pub max_injections_per_hook: usize,
    /// The most events and application requests handed out and not yet drained by
    /// [`HostState::poll_output`], and separately the most application requests handed out
    /// and not yet answered ([`HostState::answer`]); past it a `push/event` is answered
    /// `host_busy` and a request `-32000` (default 1,024; at least 1).
    pub max_pending_outputs: usize,
    /// How long the application may take to answer a server request handed out as
    /// [`HostOutput::Request`]: past it the machine answers `-32603` itself
    /// (`data.reason: "answer_timeout"`), reports [`HostDiagnostic::AnswerTimedOut`] and
    /// hands out [`HostOutput::AnswerTimedOut`] (default [`DEFAULT_ANSWER_TIMEOUT`], 120 s;
    /// `None`: no deadline, an unanswered request waits until the server cancels it or the
    /// connection ends; `Some` at least 1 ms).
    pub answer_timeout: Option<Duration>,
    /// The capabilities the application has no one to answer for (§11, §12: `modelInfo`,
    /// `inferenceRequest`, `inferenceRequest.streaming`): taken out of `policy` and of
    /// every later [`HostState::set_policy`], so they are neither advertised nor granted
    /// (§5.4, absence is denial), and a policy entry naming only them is reported
    /// ([`HostDiagnostic::NotServed`]). Empty by default (an application driving the
    /// machine answers what it is handed); `host::HostConfig::rules` fills it from the
    /// handlers it is given.
    pub unserved: crate::capability::CapabilitySet,
}

impl HostRules {
    /// Rules with `policy` and the defaults of `host::HostConfig`.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(policy: I) -> HostRules {
        HostRules {
            client_name: "mcpl-host".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: crate::protocol::handshake::MCP_PROTOCOL_VERSION.into(),
            policy: policy.into_iter().map(Into::into).collect(),
            enabled: None,
            disabled: Vec::new(),
            initialize_timeout: Duration::from_secs(30),
            policy_timeout: Duration::from_secs(10),
            dedupe_window: 10_000,
            max_event_id_bytes: 1024,
            max_feature_sets: crate::manifest::DEFAULT_MAX_FEATURE_SETS,
            channels: ChannelLimits::default(),
            manifest_timeout: Duration::from_secs(10),
            manifest_fetch_burst: 3,
            manifest_fetch_per_sec: 0.2,
            suspend_after_failures: 3,
            hook_timeout: Duration::from_secs(5),
            max_injections_per_hook: 1024,
            max_pending_outputs: 1024,
            answer_timeout: Some(DEFAULT_ANSWER_TIMEOUT),
            unserved: crate::capability::CapabilitySet::EMPTY,
        }
    }
}

/// What a [`HostState`] produced, drained in order by [`HostState::poll_output`].
#[derive(Debug, Clone, PartialEq)]
pub enum HostOutput {
    /// A frame to write to the server, in this order (every frame the machine sends).
    Transmit(Transmission),
    /// Something for the application (the same events `host::HostSession` streams).
    Event(HostEvent),
    /// A defect of the server (the same diagnostics `host::HostSession` streams).
    Diagnostic(HostDiagnostic),
    /// The handshake and initial policy exchange ended: `Ok` once ready (MCPL or MCP-only,
    /// see [`HostState::mode`]); `Err` when the connection must close.
    Connected(Result<(), ConnectError>),
    /// A server request the application answers with [`HostState::answer`]
    /// (`inference/request`, `model/info`; §11), already admitted; unanswered past
    /// [`HostRules::answer_timeout`], the machine answers it ([`HostOutput::AnswerTimedOut`]).
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// A [`HostState::set_policy`] exchange ended.
    PolicyChanged(PolicyChange),
    /// The answer to a [`HostState::before_inference`] hook, judged under the grant current
    /// where it was read (§5.4), or its failure (fail-open, §10.1).
    Hook {
        /// The id `before_inference` returned.
        id: u64,
        /// The judged answer.
        verdict: rules::HookVerdict,
    },
    /// The answer to a [`HostState::request`]: the server's result or error.
    Response {
        /// The id [`HostState::request`] returned.
        id: u64,
        /// Its outcome.
        outcome: Result<Value, ErrorObject>,
    },
    /// The server cancelled a request handed out as [`HostOutput::Request`] and not yet
    /// answered (MCP's `notifications/cancelled`, naming its `requestId`): the machine has
    /// answered it `-32800` ([`codes::REQUEST_CANCELLED`](crate::jsonrpc::codes),
    /// transmitted before this output: every request gets an answer, which the server
    /// ignores), so the application's work on it may stop, and its answer is refused
    /// ([`StateError::UnknownRequest`]) until the server reuses the id for a new request,
    /// which JSON-RPC 2.0 lets it do: from then on `answer(id, …)` (and
    /// [`HostState::inference_chunk`]) serve the new one. A driver therefore drops whatever
    /// the cancelled request's work still produces (`host::HostSession` numbers its
    /// hand-outs for this). A cancel naming nothing handed out changes nothing
    /// (MCP lets a receiver ignore it: the request may have just been answered).
    Cancelled {
        /// The request's id.
        id: RequestId,
    },
    /// A [`HostState::request`] got no answer within its timeout; a later answer is reported
    /// as [`HostDiagnostic::UnexpectedResponse`].
    RequestTimedOut {
        /// The id [`HostState::request`] returned.
        id: u64,
    },
    /// The application did not answer a request handed out as [`HostOutput::Request`]
    /// within [`HostRules::answer_timeout`]: the machine has answered it `-32603` (written
    /// before this output) and reported [`HostDiagnostic::AnswerTimedOut`]; as after
    /// [`HostOutput::Cancelled`], the application's work on it may stop and its answer is
    /// refused until the server reuses the id.
    AnswerTimedOut {
        /// The request's id.
        id: RequestId,
    },
    /// Close the connection (after writing what was transmitted before).
    Close,
}

impl HostOutput {
    /// The line of JSON text to write for a [`HostOutput::Transmit`]; `None` for every
    /// other output.
    pub fn frame(&self) -> Option<String> {
        match self {
            HostOutput::Transmit(t) => Some(t.to_json()),
            _ => None,
        }
    }
}

/// What a request of ours is for.
#[derive(Debug, Clone)]
enum Purpose {
    Initialize,
    InitialPolicy(HostGrant),
    Change(ChangePlan),
    Hook,
    Fetch,
    /// A fetch the application asked for ([`HostState::refresh_manifest`]): reviewed like
    /// any, outside the announcement rate limit (§17.4: a host may fetch at any time).
    Refresh,
    Reduction,
    /// The application's own request ([`HostState::request`]); a `channels/open` or
    /// `channels/close` with what it asks for, applied to the channels on its confirmed
    /// answer ([`ChannelTable::settle`]), a close also when none comes in time
    /// ([`ChannelTable::unconfirmed`]).
    App(Option<super::ChannelLifecycle>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    New,
    Initializing,
    PolicyPending,
    /// Ready, but a reduction the server must be told is in flight before `Connected`.
    Reducing,
    Up,
    Closed,
}

/// The host side of one connection (module docs): call [`start`](Self::start) first (the
/// host opens the connection with `initialize`, §5.2: until then the machine writes
/// nothing and has no deadline, so a driver that only feeds and drains waits for ever, and
/// so does the server); then feed it with [`handle_message`](Self::handle_message),
/// [`handle_timeout`](Self::handle_timeout) and the application calls; drain
/// [`poll_output`](Self::poll_output); sleep until [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct HostState {
    /// The rules, less `policy`, `enabled` and `disabled`: those moved into `p` (one copy
    /// per connection, not two).
    rules: HostRules,
    host_allows: Grant,
    origin: (Instant, SystemTime),
    phase: Phase,
    p: HostPolicy,
    limiter: FetchLimiter,
    /// The fetch limiter's drops told so far, and when ([`inbound::FETCH_DROPS_TOLD_EVERY`]).
    drops_told: (u64, Option<Instant>),
    /// The revision the latest `mcpl/manifestChanged` announced, for the next fetch.
    announced: Option<String>,
    label: String,
    channels: ChannelTable,
    /// Lifecycle turns (§10.5) open or recently ended, and each open one's
    /// `conversationId` and `turnIndex` for its terminal.
    turns: InferenceIds,
    /// Keyed by the application's ids ([`crate::own_keys`]).
    open_turns: HashMap<std::sync::Arc<str>, (String, u64), crate::own_keys::OwnKeys>,
    /// Outgoing streams (§14.3) open or recently ended, and the open ones.
    streams: InferenceIds,
    open_streams: HashMap<String, super::Outgoing>,
    dedupe: Dedupe,
    next_id: u64,
    /// Our requests waiting for their answer, with their deadlines.
    pending: pending::PendingRequests,
    /// Server requests handed out to the application and not yet answered, with their
    /// deadlines ([`HostRules::answer_timeout`]).
    app_pending: AppRequests,
    /// Those the deadline answered, for the application's late answer.
    late: app_requests::LateAnswers,
    /// Tag patterns set before a manifest was reviewed, installed with the review (§17.6).
    early_patterns: Option<Box<[crate::tags::TagPattern]>>,
    out: VecDeque<HostOutput>,
    /// Events and application requests in `out`.
    handed_out: usize,
    /// Events in `out`.
    events_out: usize,
    /// How many more events the application can take ([`HostState::set_event_room`]).
    event_room: usize,
    /// The weight ([`HostEvent::weight`]) of the events the application's queue holds,
    /// and the most it may hold ([`HostState::set_event_bytes`]).
    event_bytes: (usize, usize),
    /// The weight of each event in `out`, in order, and their sum.
    event_weights: VecDeque<usize>,
    event_bytes_out: usize,
    /// The server ended its output ([`HostState::handle_eof`]).
    input_ended: bool,
}

impl HostState {
    /// A state machine for one connection; the host's own policy must parse
    /// ([`RulesError::Policy`]) and the rules must be usable ([`HostRules::defects`]:
    /// [`RulesError::Invalid`], the rule `host::HostSession::connect` applies to a
    /// `HostConfig`). `now` and `wall` are the same moment on the monotonic and the wall
    /// clock (the wall clock dates the manifest review's grant records).
    /// What [`HostRules::unserved`] names is taken out of the policy here; a policy entry
    /// naming only such paths is the first output ([`HostDiagnostic::NotServed`]).
    pub fn new(
        mut rules: HostRules,
        now: Instant,
        wall: SystemTime,
    ) -> Result<HostState, RulesError> {
        Grant::from_policy(rules.policy.iter().map(String::as_str))?;
        let defects = rules.defects();
        if !defects.is_empty() {
            return Err(RulesError::Invalid(defects));
        }
        let served = served::served(std::mem::take(&mut rules.policy), rules.unserved);
        let host_allows = Grant::from_policy(served.policy.iter().map(String::as_str))?;
        let mut state = HostState {
            p: HostPolicy::new(
                served.policy,
                rules.enabled.take(),
                std::mem::take(&mut rules.disabled),
            ),
            limiter: FetchLimiter::new(rules.manifest_fetch_burst, rules.manifest_fetch_per_sec),
            drops_told: (0, None),
            announced: None,
            rules,
            host_allows,
            origin: (now, wall),
            phase: Phase::New,
            label: String::new(),
            channels: ChannelTable::default(),
            turns: InferenceIds::default(),
            open_turns: HashMap::default(),
            streams: InferenceIds::default(),
            open_streams: HashMap::new(),
            dedupe: Dedupe::default(),
            next_id: 1,
            pending: pending::PendingRequests::default(),
            app_pending: AppRequests::default(),
            late: app_requests::LateAnswers::default(),
            early_patterns: None,
            out: VecDeque::new(),
            handed_out: 0,
            events_out: 0,
            event_room: usize::MAX,
            event_bytes: (0, usize::MAX),
            event_weights: VecDeque::new(),
            event_bytes_out: 0,
            input_ended: false,
        };
        if let Some(d) = served.mistake {
            state.diag(d);
        }
        Ok(state)
    }

    /// The session's mode.
    pub fn mode(&self) -> &Mode {
        &self.p.mode
    }

    /// Whether the initial policy exchange ended (receipt or recorded decision, §5.3).
    pub fn is_ready(&self) -> bool {
        self.p.ready
    }

    /// The grant in force: the only authority.
    pub fn grant(&self) -> Grant {
        self.p.grant
    }

    /// The server's label (`serverInfo.name`, cut to [`super::DIAGNOSTIC_TEXT_BYTES`] with
    /// its length said, [`super::clip_text`]; empty before `initialize` is answered).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The last usable receipt (testimony only).
    pub fn last_receipt(&self) -> Option<&Receipt> {
        self.p.last_receipt.as_deref()
    }

    /// The last usable receipt as shared (a driver publishes it without copying it, and
    /// tells a new one from the one it published by identity, not by comparing them).
    #[cfg(feature = "runtime")]
    pub(crate) fn last_receipt_shared(&self) -> Option<&std::sync::Arc<Receipt>> {
        self.p.last_receipt.as_ref()
    }

    /// The channels this connection registered and the host accepted (§14.5).
    pub fn channels(&self) -> &ChannelTable {
        &self.channels
    }

    /// The manifest review in force (MCPL connections, once `initialize` is answered).
    pub fn review(&self) -> Option<&ManifestReview> {
        self.p.review.as_deref()
    }

    /// The review in force as shared (a driver publishes it without copying it; the state
    /// machine copies it before its next change).
    #[cfg(feature = "runtime")]
    pub(crate) fn review_shared(&self) -> Option<&std::sync::Arc<ManifestReview>> {
        self.p.review.as_ref()
    }

    /// Starts the handshake: sends `initialize` (§5.2). Later calls do nothing.
    pub fn start(&mut self, now: Instant) {
        if self.phase != Phase::New {
            return;
        }
        self.phase = Phase::Initializing;
        let params = rules::initialize_params(
            &self.host_allows,
            &self.rules.protocol_version,
            &self.rules.client_name,
            &self.rules.client_version,
        );
        let timeout = self.rules.initialize_timeout;
        self.send_request(
            Initialize::NAME,
            params,
            Purpose::Initialize,
            (now, timeout),
        );
    }

    /// The next output, in order; `None` when there is nothing more until the next input.
    /// A request of ours is written once its frame is returned here: an answer read under
    /// the id of one still queued is a stray (JSON-RPC 2.0 §5), reported as
    /// [`HostDiagnostic::UnexpectedResponse`], which settles nothing.
    pub fn poll_output(&mut self) -> Option<HostOutput> {
        let o = self.out.pop_front()?;
        self.pending.note_written(&o);
        if matches!(o, HostOutput::Event(_) | HostOutput::Request { .. }) {
            self.handed_out = self.handed_out.saturating_sub(1);
            self.late.polled += u64::from(matches!(o, HostOutput::Request { .. }));
        }
        if matches!(o, HostOutput::Event(_)) {
            self.events_out = self.events_out.saturating_sub(1);
            let weight = self.event_weights.pop_front().unwrap_or(0);
            self.event_bytes_out = self.event_bytes_out.saturating_sub(weight);
        }
        Some(o)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due, if anything waits: a
    /// request of ours, or a server request the application has not answered
    /// ([`HostRules::answer_timeout`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (
            self.pending.next_deadline(),
            self.app_pending.next_deadline(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires every request of ours whose deadline is at or before `now`, in id order;
    /// then answers every server request the application has not answered by its deadline
    /// (earliest first, [`HostOutput::AnswerTimedOut`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        for (id, purpose) in self.pending.expire(now) {
            self.on_answer(now, id, purpose, Answer::Timeout);
        }
        self.expire_answers(now);
    }

    /// Tells how many more events the application's queue can take, before the next input:
    /// an event handed out past it is refused as one past [`HostRules::max_pending_outputs`]
    /// is (a `push/event` answered `host_busy`, a mode change reported as
    /// [`HostDiagnostic::EventDropped`]), so a driver that forwards events into a bounded
    /// queue never drops one the server was told was delivered. Unlimited until called.
    pub fn set_event_room(&mut self, room: usize) {
        self.event_room = room;
    }

    /// Tells, before the next input, the weight ([`HostEvent::weight`]) of the events the
    /// application's queue holds and the most it may hold: an event handed out past it is
    /// refused as one past [`Self::set_event_room`]'s room is, unless nothing is held or
    /// waiting to be drained (one event larger than `limit` still goes). So the events
    /// that wait for a slow application are bounded in bytes as well as in number (each
    /// may be as large as a whole message). Unlimited until called.
    pub fn set_event_bytes(&mut self, queued: usize, limit: usize) {
        self.event_bytes = (queued, limit);
    }

    /// Whether request `id` of ours (an id [`Self::before_inference`], [`Self::request`] or
    /// [`Self::refresh_manifest`] returned, or a [`HostOutput::Transmit`] request's) still
    /// waits for its answer: `false` once answered or expired by [`Self::handle_timeout`],
    /// so a driver knows which requests it may forget.
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending.contains(id)
    }

    /// How many of our requests ended without their answer so far (expired, abandoned, or
    /// ended by the connection's end): a driver keeping a table of its requests needs to
    /// look for ended ones ([`Self::is_pending`]) only when this changed, rather than at
    /// every input (issue #24: a scan per input made 10,000 outstanding requests
    /// quadratic). An answered request ends with its [`HostOutput::Response`] or
    /// [`HostOutput::Hook`] instead.
    pub fn requests_ended_unanswered(&self) -> u64 {
        self.pending.ended_unanswered()
    }

    /// Handles one message received from the server, in wire order.
    pub fn handle_message(&mut self, now: Instant, msg: Message) {
        if self.phase == Phase::Closed {
            return;
        }
        match msg {
            Message::Request(r) => self.on_request(now, r),
            Message::Notification(n) => self.on_notification(now, n),
            Message::Response(r) => self.on_response(now, r),
        }
    }

    /// The host's outbound gate ([`super::outbound::gate`], the one `HostSession` applies).
    fn gate(&self, method: &str, params: &Value) -> Result<(), super::OutboundRefusal> {
        self.gate_params(method, Some(params))
    }

    /// [`Self::gate`] for a message whose params the gate need not read (`None`).
    fn gate_params(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<(), super::OutboundRefusal> {
        super::outbound::gate(
            method,
            params,
            &self.p.mode,
            self.p.ready,
            &self.p.grant,
            &self.channels,
            &self.rules.channels,
        )
    }

    fn write_notification(&mut self, method: &str, params: Value) {
        self.transmit(Message::Notification(Notification {
            method: method.to_owned(),
            params: crate::jsonrpc::params_to_send(Some(params)),
        }));
    }

    /// Sends request `method` on the application's behalf once the connection is up, after
    /// the host's outbound gate ([`super::outbound::gate`]: direction, readiness and grant
    /// §5.4, no MCPL method when MCP-only §3.3, channel methods §14.1); a method with an API
    /// of its own is refused ([`super::outbound::dedicated`]), as `HostSession`'s generic path
    /// refuses it. Returns its id; the answer comes out as [`HostOutput::Response`], or
    /// [`HostOutput::RequestTimedOut`] once `timeout` has passed (a `timeout` past what
    /// `Instant` can hold, such as `Duration::MAX`, never passes).
    ///
    /// Reading (§5.4): the answer is handed out as it came, not judged against the grant at
    /// its receipt. §5.4 enforces at receipt only contribution-bearing responses (today the
    /// `context/beforeInference` injections, judged where read) and the spec names no MCP
    /// answer as one: a `tools/call` result answers a request the gate let out under the
    /// grant of its sending, and contributes nothing the server may place. The one answer
    /// that changes what the server may do, a `channels/open`'s channel, is authorized at
    /// receipt ([`ChannelTable::settle`]).
    pub fn request(
        &mut self,
        now: Instant,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<u64, StateError> {
        self.gate_app(method, &params, false)?;
        self.answerable()?;
        let id = self.next_id;
        let lifecycle = super::ChannelLifecycle::of(method, Some(&params));
        self.send_request(method, params, Purpose::App(lifecycle), (now, timeout));
        Ok(id)
    }

    /// Sends notification `method` on the application's behalf, by the same gate as
    /// [`Self::request`].
    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), StateError> {
        self.gate_app(method, &params, true)?;
        self.write_notification(method, params);
        Ok(())
    }

    /// The gate of the application's generic send paths, for a message sent as a
    /// Notification (`notification`) or a Request: [`Self::gate`], then its form (§4.1,
    /// [`super::outbound::gate_form`]).
    fn gate_app(&self, method: &str, params: &Value, notification: bool) -> Result<(), StateError> {
        use super::outbound::Dedicated;
        if let Some(d) = super::outbound::dedicated(method) {
            let instead = match d {
                Dedicated::Hook => "HostState::before_inference",
                Dedicated::Policy => "HostState::set_policy",
                Dedicated::Lifecycle => "HostState::start_turn",
                Dedicated::OutgoingStream => "HostState::start_stream",
                Dedicated::InferenceChunk => "HostState::inference_chunk",
            };
            return Err(StateError::UseDedicated {
                method: method.to_owned(),
                instead,
            });
        }
        if self.phase != Phase::Up {
            return Err(StateError::NotConnected);
        }
        self.gate(method, params)?;
        Ok(super::outbound::gate_form(method, notification)?)
    }

    /// Fetches `mcpl/manifest` now (§17.4: a host may fetch at any time, outside the
    /// announcement rate limit of §17.8) and reviews the answer where it is read, like an
    /// announced change (§17.5): its receipt, a revocation told by Request. Refused before
    /// the connection is up and on a connection served as plain MCP from `initialize` on
    /// (no manifest reviewed), with the [`McpOnlyReason`] the session recorded.
    /// Returns the fetch's id: its answer (or its timeout) is applied by the input that
    /// ends [`Self::is_pending`] for it.
    pub fn refresh_manifest(&mut self, now: Instant) -> Result<u64, StateError> {
        if self.phase != Phase::Up {
            return Err(StateError::NotConnected);
        }
        self.answerable()?;
        if self.p.review.is_none() {
            // Served as plain MCP from `initialize` on: refused for the reason recorded.
            let reason = match &self.p.mode {
                Mode::McpOnly(r) => r.clone(),
                Mode::Mcpl => McpOnlyReason::NotAdvertised,
            };
            return Err(StateError::McpOnly(reason));
        }
        let id = self.next_id;
        let timeout = self.rules.manifest_timeout;
        self.send_request(
            ManifestFetch::NAME,
            json!({}),
            Purpose::Refresh,
            (now, timeout),
        );
        Ok(id)
    }

    /// Accepts feature set `name`'s `tagOntology` as declared in the manifest in force
    /// (§16.5), by [`ManifestReview::accept_ontology`], which may be a manifest change read
    /// after the application reviewed it (§17.5); a later change invalidates the acceptance.
    /// Returns its digest.
    #[deprecated(
        since = "0.1.0",
        note = "accepts whatever tagOntology is in force, which may not be the one reviewed \
                (§17.5); use `accept_reviewed_ontology(name, digest)`"
    )]
    pub fn accept_ontology(
        &mut self,
        name: &str,
    ) -> Result<String, crate::manifest::review::ReviewError> {
        self.accept_current_ontology(name)
    }

    /// [`Self::accept_ontology`]'s rule, for the driver's deprecated call and
    /// [`Self::accept_reviewed_ontology`].
    pub(crate) fn accept_current_ontology(
        &mut self,
        name: &str,
    ) -> Result<String, crate::manifest::review::ReviewError> {
        match self.p.review_mut() {
            Some(r) => r.accept_ontology(name),
            None => Err(crate::manifest::review::ReviewError::NoOntology(
                name.to_owned(),
            )),
        }
    }

    /// The digest of feature set `name`'s `tagOntology` as the manifest in force declares
    /// it (§16.5, [`crate::manifest::digest::ontology_digest`]); `None` when it declares
    /// none the digest takes.
    pub fn ontology_digest(&self, name: &str) -> Option<String> {
        let m = self.review()?.manifest_owned();
        let o = m.get("featureSets")?.get(name)?.get("tagOntology")?;
        crate::manifest::digest::ontology_digest(o).ok()
    }

    /// Accepts feature set `name`'s `tagOntology` (§16.5) only while it still declares the
    /// one whose digest is `reviewed` (the one the application reviewed; a manifest
    /// change may have been read since, §17.5); otherwise nothing is accepted and the
    /// current digest ([`Self::ontology_digest`]) is the error.
    pub fn accept_reviewed_ontology(
        &mut self,
        name: &str,
        reviewed: &str,
    ) -> Result<String, Option<String>> {
        let current = self.ontology_digest(name);
        if current.as_deref() != Some(reviewed) {
            return Err(current);
        }
        self.accept_current_ontology(name).map_err(|_| current)
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5), by
    /// [`ManifestReview::revoke_ontology`]. Returns the digest that was accepted, if any.
    pub fn revoke_ontology(&mut self, name: &str) -> Option<String> {
        self.p.review_mut().and_then(|r| r.revoke_ontology(name))
    }

    /// Sets the tag patterns the host's treatment rules reference (§17.6,
    /// [`ManifestReview::set_consumer_patterns`]); set before a manifest is reviewed, they
    /// are kept and installed with the review.
    /// A pattern that is malformed or can never match (§16.7, [`crate::tags::TagPattern`])
    /// refuses the call whole ([`StateError::TagPatterns`], each named), the patterns set
    /// before standing: the application's mistake is reported, not dropped.
    pub fn set_consumer_patterns<'a, I>(&mut self, patterns: I) -> Result<(), StateError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let patterns = crate::tags::TagPattern::all(patterns).map_err(StateError::TagPatterns)?;
        match self.p.review_mut() {
            Some(r) => r.set_valid_patterns(patterns),
            None => self.early_patterns = Some(patterns.into_boxed_slice()),
        }
        Ok(())
    }

    /// Changes the host's policy (§6.7 orderings): a narrowing applies at once, before the
    /// Request is written; a widening activates only on an accepting receipt. The outcome
    /// comes out as [`HostOutput::PolicyChanged`]. What [`HostRules::unserved`] names is
    /// taken out of `patterns` as out of the configured policy; an entry naming only such
    /// paths is reported ([`HostDiagnostic::NotServed`]) once the Request is written.
    pub fn set_policy(&mut self, now: Instant, patterns: Vec<String>) -> Result<(), StateError> {
        self.open()?;
        self.answerable()?;
        if let Mode::McpOnly(r) = &self.p.mode {
            if self.p.ready {
                return Err(StateError::McpOnly(r.clone()));
            }
        }
        if self.phase != Phase::Up || self.policy_in_flight() {
            return Err(StateError::PolicyInFlight);
        }
        // The host's own patterns, held to the rule `new` holds the configured ones to,
        // less what the application cannot serve (`HostRules::unserved`).
        Grant::from_policy(patterns.iter().map(String::as_str)).map_err(StateError::Policy)?;
        let served = served::served(patterns, self.rules.unserved);
        let wall = self.wall(now);
        let plan = self
            .p
            .begin_change(served.policy, wall)
            .map_err(|e| match e {
                ChangeRefused::McpOnly(r) => StateError::McpOnly(r),
                ChangeRefused::Policy(p) => StateError::Policy(p),
            })?;
        let params = self.p.update_params(&plan.hg);
        let timeout = self.rules.policy_timeout;
        self.send_request(
            FeatureSetsUpdate::NAME,
            params,
            Purpose::Change(plan),
            (now, timeout),
        );
        if let Some(d) = served.mistake {
            self.diag(d);
        }
        Ok(())
    }

    /// Disables feature sets `sets` with a `featureSets/update` **Notification** carrying
    /// only `disabled` (§6.7: a reduction servers must respect; the carrier a tester sends to
    /// see whether they do): applied before the Notification is written, and repeated in
    /// every later policy Request's `disabled`, so no Request re-enables them. The grant is
    /// unchanged and nothing widens. Refused before the handshake has begun or after close
    /// ([`StateError::NotConnected`]), on an MCP-only connection, while a policy exchange is
    /// in flight (as [`Self::set_policy`]), and for a list past
    /// [`crate::policy::MAX_POLICY_LIST_ENTRIES`] in total or a name that is not a
    /// feature-set name or pattern ([`StateError::Selection`]): nothing is applied then.
    pub fn disable_by_notification(&mut self, sets: &[String]) -> Result<(), StateError> {
        if matches!(self.phase, Phase::New | Phase::Initializing | Phase::Closed) {
            return Err(StateError::NotConnected);
        }
        if let (Mode::McpOnly(r), true) = (&self.p.mode, self.p.ready) {
            return Err(StateError::McpOnly(r.clone()));
        }
        if self.phase != Phase::Up || self.policy_in_flight() {
            return Err(StateError::PolicyInFlight);
        }
        let params = self.p.disable_later(sets).map_err(|e| match e {
            DisableRefused::McpOnly(r) => StateError::McpOnly(r),
            DisableRefused::Selection(e) => StateError::Selection(e),
        })?;
        self.write_notification(FeatureSetsUpdate::NAME, params);
        Ok(())
    }

    fn policy_in_flight(&self) -> bool {
        self.pending.purposes().any(|p| {
            matches!(
                p,
                Purpose::InitialPolicy(_) | Purpose::Change(_) | Purpose::Reduction
            )
        })
    }

    /// Sends `context/beforeInference` (§10.1) with `params` when this connection is in
    /// MCPL, ready, and granted `observe` or an inject leaf; `userMessage` is redacted where
    /// `observe` is not granted. Returns the hook's id, whose answer comes out as
    /// [`HostOutput::Hook`]; `None` when the hook does not apply here.
    pub fn before_inference(&mut self, now: Instant, mut params: Value) -> Option<u64> {
        if self.p.mode != Mode::Mcpl || !self.p.ready || self.phase != Phase::Up {
            return None;
        }
        if self.input_ended {
            return None;
        }
        if !crate::policy::before_inference_applies(&self.p.grant) {
            return None;
        }
        crate::policy::redact_before_inference(&self.p.grant, &mut params);
        let id = self.next_id;
        let timeout = self.rules.hook_timeout;
        self.send_request(BeforeInference::NAME, params, Purpose::Hook, (now, timeout));
        Some(id)
    }

    /// `Err(NotConnected)` once closed: after [`HostOutput::Close`] or
    /// [`Self::handle_close`] nothing more is sent.
    fn open(&self) -> Result<(), StateError> {
        match self.phase {
            Phase::Closed => Err(StateError::NotConnected),
            _ => Ok(()),
        }
    }

    /// `Err(NotConnected)` once the server ended its output ([`Self::handle_eof`]): a
    /// request sent now could never be answered.
    fn answerable(&self) -> Result<(), StateError> {
        match self.input_ended {
            true => Err(StateError::NotConnected),
            false => Ok(()),
        }
    }

    /// The wall-clock moment of `now`, which dates the grant records (§17.10; testimony,
    /// never authority). Any `Instant` is a valid `now`: one whose moment is past what
    /// `SystemTime` holds (`Instant` counts from boot, `SystemTime` from 1970) is dated at
    /// the origin, where `+` panicked.
    fn wall(&self, now: Instant) -> SystemTime {
        let (origin, wall) = self.origin;
        wall.checked_add(now.saturating_duration_since(origin))
            .unwrap_or(wall)
    }

    fn transmit(&mut self, m: Message) {
        self.out
            .push_back(HostOutput::Transmit(Transmission::Message(m)));
    }

    /// Outputs a diagnostic, each text the server chose in it clipped
    /// ([`HostDiagnostic::clipped`]).
    fn diag(&mut self, d: HostDiagnostic) {
        self.out.push_back(HostOutput::Diagnostic(d.clipped()));
    }

    fn report(&mut self, diags: Diagnostics) {
        for d in diags {
            self.diag(d);
        }
    }

    /// Hands out an event that has no answer to carry a refusal (a mode change, a manifest
    /// change receipt): one the queue has no room for is reported, not lost silently.
    fn hand_out_event(&mut self, e: HostEvent) {
        let event = e.name();
        if !self.hand_out(HostOutput::Event(e)) {
            self.diag(HostDiagnostic::EventDropped { event });
        }
    }

    /// Hands an event or request to the application; `false` when too many wait, or an
    /// event would take the events waiting past their weight limit
    /// ([`Self::set_event_bytes`]).
    fn hand_out(&mut self, o: HostOutput) -> bool {
        let event = matches!(o, HostOutput::Event(_));
        if self.handed_out >= self.rules.max_pending_outputs.max(1)
            || (event && self.events_out >= self.event_room)
        {
            return false;
        }
        let weight = match &o {
            HostOutput::Event(e) if self.event_bytes.1 != usize::MAX => e.weight(),
            _ => 0,
        };
        if event && !self.event_fits(0, weight) {
            return false;
        }
        self.handed_out += 1;
        if event {
            self.events_out += 1;
            self.event_weights.push_back(weight);
            self.event_bytes_out = self.event_bytes_out.saturating_add(weight);
        }
        self.out.push_back(o);
        true
    }

    /// Whether one more event of `weight` keeps the events waiting, with `pending` more
    /// about to be handed out, within their limit ([`Self::set_event_bytes`]): always when
    /// none waits.
    pub(super) fn event_fits(&self, pending: usize, weight: usize) -> bool {
        let (queued, limit) = self.event_bytes;
        let used = queued
            .saturating_add(self.event_bytes_out)
            .saturating_add(pending);
        used == 0 || used.saturating_add(weight) <= limit
    }

    /// How many more events [`Self::hand_out`] may queue now: the bound on what is not yet
    /// drained, and the room the driver last reported in the application's queue.
    pub(super) fn event_room_left(&self) -> usize {
        let undrained = self
            .rules
            .max_pending_outputs
            .max(1)
            .saturating_sub(self.handed_out);
        undrained.min(self.event_room.saturating_sub(self.events_out))
    }

    /// Sends request `method` for `purpose`, sent at `now` and waiting at most `timeout`
    /// for its answer: a deadline past what `Instant` can hold is no deadline (it waits
    /// until answered), as the server's own requests read it (`server_pending`).
    fn send_request(
        &mut self,
        method: &str,
        params: Value,
        purpose: Purpose,
        (now, timeout): (Instant, Duration),
    ) {
        let id = self.next_id;
        self.next_id += 1;
        // The application's hook params (`before_inference`) may be anything: a scalar, or
        // params nested too deep to read, go nowhere (JSON-RPC 2.0 §4.2) and the request
        // fails at once, as a driver's refused write does (a hook then fails open, reported).
        if let Err(defect) = crate::jsonrpc::params_shape(&params) {
            let refused = ErrorObject::invalid_params(format!("{method} not sent: {defect}"));
            return self.on_answer(now, id, purpose, Answer::Error(refused));
        }
        self.pending.insert(id, purpose, now.checked_add(timeout));
        self.transmit(Message::Request(Request {
            id: RequestId::from(id),
            method: method.to_owned(),
            params: crate::jsonrpc::params_to_send(Some(params)),
        }));
    }

    fn respond(&mut self, id: RequestId, outcome: Result<Value, ErrorObject>) {
        self.transmit(Message::Response(Response {
            id: Some(id),
            outcome,
        }));
    }

    fn connected(&mut self, r: Result<(), ConnectError>) {
        self.phase = if r.is_ok() { Phase::Up } else { Phase::Closed };
        let close = r.is_err();
        self.out.push_back(HostOutput::Connected(r));
        if close {
            self.pending.end_all();
            self.out.push_back(HostOutput::Close);
        }
    }
}

/// How one of our requests ended.
#[derive(Debug)]
enum Answer {
    Result(Value),
    Error(ErrorObject),
    Timeout,
}
