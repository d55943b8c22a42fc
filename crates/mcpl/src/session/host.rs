//! [`HostState`]: the host side of one connection as a state machine (§5.2, §5.3, §5.4,
//! §6.7, §9, §11.1). Inputs arrive in wire order, so every message is judged under exactly
//! the readiness and grant in force where it was read: no wire-position bookkeeping.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use super::channels::{ChannelLimits, ChannelTable};
use super::policy_state::{ChangePlan, ChangeRefused, Effects, HostPolicy};
use super::rules::{self, Dedupe, Diagnostics, PolicyAnswer, PushVerdict};
use super::InferenceIds;
use super::{admit_at_host, HostDiagnostic, HostEvent, McpOnlyReason, Mode, PolicyChange, Refusal};
use crate::capability::{Grant, PatternError};
use crate::jsonrpc::{codes, ErrorObject, Message, Notification, Request, RequestId, Response};
use crate::manifest::review::{FetchDecision, FetchLimiter, ManifestReview};
use crate::policy::{HostGrant, Receipt};

/// What a [`HostState`] is configured with: the protocol-relevant part of
/// `host::HostConfig` (whose defaults these are).
#[derive(Debug, Clone)]
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
    /// How many `push/event` ids dedupe remembers (§9.4).
    pub dedupe_window: usize,
    /// The longest `eventId` accepted, in bytes.
    pub max_event_id_bytes: usize,
    /// The most feature sets a manifest may declare (§6.1 sets no number).
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
    /// The most `contextInjections` one hook answer may carry.
    pub max_injections_per_hook: usize,
    /// The most events and application requests handed out and not yet drained by
    /// [`HostState::poll_output`]; past it a `push/event` is answered `host_busy` and a
    /// request `-32000` (default 1,024).
    pub max_pending_outputs: usize,
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
        }
    }
}

/// Why the handshake did not bring the connection up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectError {
    /// The `initialize` result is unusable.
    #[error("bad initialize result: {0}; the server must answer initialize with a capabilities object (MCP lifecycle)")]
    BadInitialize(String),
    /// The server answered `initialize` with an error.
    #[error("the server refused initialize: {} ({})", .0.message, .0.code)]
    Remote(ErrorObject),
    /// `initialize` was not answered within [`HostRules::initialize_timeout`].
    #[error("initialize was not answered in time: raise HostRules.initialize_timeout or check the server")]
    Timeout,
    /// The manifest declares more feature sets than [`HostRules::max_feature_sets`].
    #[error("the manifest declares {count} feature sets, over the limit of {limit}: raise HostRules.max_feature_sets if the server is trusted")]
    TooManyFeatureSets {
        /// Sets declared.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The host's own policy does not parse.
    #[error("{0}")]
    Policy(#[from] PatternError),
    /// The server refused the initial policy with `fallback: "close"` (§6.7).
    #[error(
        "the server refused the policy with fallback \"close\" (§6.7): the connection is closed"
    )]
    Refused,
}

/// Why an application call on a [`HostState`] was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    /// The connection is MCP-only: there is no MCPL policy to change (§3.2).
    #[error("the connection is MCP-only ({0}): there is no MCPL policy to change")]
    McpOnly(McpOnlyReason),
    /// The session is not ready yet, or another policy Request is in flight: wait for its
    /// [`HostOutput::PolicyChanged`] (or [`HostOutput::Connected`]) and call again.
    #[error("a policy exchange is in flight: call again after its outcome is polled")]
    PolicyInFlight,
    /// The new policy does not parse.
    #[error("{0}")]
    Policy(#[from] PatternError),
    /// A lifecycle turn could not be started or ended (§10.5): not granted, MCP-only, a
    /// turn for the id open or recently ended, or none open to end.
    #[error("lifecycle turn refused: {0}")]
    Turn(String),
    /// [`HostState::answer`] named a request that was not handed out or is already answered.
    #[error("no request {0} is waiting for an answer")]
    UnknownRequest(String),
}

/// What a [`HostState`] produced, drained in order by [`HostState::poll_output`].
#[derive(Debug, Clone, PartialEq)]
pub enum HostOutput {
    /// A message to write to the server, in this order.
    Transmit(Message),
    /// Something for the application (the same events `host::HostSession` streams).
    Event(HostEvent),
    /// A defect of the server (the same diagnostics `host::HostSession` streams).
    Diagnostic(HostDiagnostic),
    /// The handshake and initial policy exchange ended: `Ok` once ready (MCPL or MCP-only,
    /// see [`HostState::mode`]); `Err` when the connection must close.
    Connected(Result<(), ConnectError>),
    /// A server request the application answers with [`HostState::answer`]
    /// (`inference/request`, `model/info`; §11), already admitted.
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// An admitted message this state machine does not decide yet (channels §14, hooks'
    /// answers, `mcpl/manifestChanged` §17.5), with the grant it was judged under. A
    /// request among them must still be answered (through the driver's own path).
    Unhandled {
        /// The message.
        message: Message,
        /// The grant in force where it was read.
        judged: Grant,
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
    /// Close the connection (after writing what was transmitted before).
    Close,
}

/// What a request of ours is for.
#[derive(Debug, Clone)]
enum Purpose {
    Initialize,
    InitialPolicy(HostGrant),
    Change(ChangePlan),
    Hook,
    Fetch,
    Reduction,
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

/// The host side of one connection (module docs): feed it with
/// [`handle_message`](Self::handle_message), [`handle_timeout`](Self::handle_timeout) and
/// the application calls; drain [`poll_output`](Self::poll_output); sleep until
/// [`poll_timeout`](Self::poll_timeout).
#[derive(Debug)]
pub struct HostState {
    rules: HostRules,
    host_allows: Grant,
    origin: (Instant, SystemTime),
    phase: Phase,
    p: HostPolicy,
    limiter: FetchLimiter,
    /// The revision the latest `mcpl/manifestChanged` announced, for the next fetch.
    announced: Option<String>,
    label: String,
    channels: ChannelTable,
    /// Lifecycle turns (§10.5) open or recently ended, and each open one's
    /// `conversationId` and `turnIndex` for its terminal.
    turns: InferenceIds,
    open_turns: HashMap<String, (String, u64)>,
    dedupe: Dedupe,
    next_id: u64,
    pending: HashMap<u64, (Purpose, Instant)>,
    app_pending: HashSet<RequestId>,
    out: VecDeque<HostOutput>,
    /// Events and application requests in `out`.
    handed_out: usize,
}

impl HostState {
    /// A state machine for one connection; the host's own policy must parse. `now` and
    /// `wall` are the same moment on the monotonic and the wall clock (the wall clock dates
    /// the manifest review's grant records).
    pub fn new(
        rules: HostRules,
        now: Instant,
        wall: SystemTime,
    ) -> Result<HostState, PatternError> {
        let host_allows = Grant::from_patterns(rules.policy.iter().map(String::as_str))?;
        Ok(HostState {
            p: HostPolicy::new(rules.policy.clone()),
            limiter: FetchLimiter::new(rules.manifest_fetch_burst, rules.manifest_fetch_per_sec),
            announced: None,
            rules,
            host_allows,
            origin: (now, wall),
            phase: Phase::New,
            label: String::new(),
            channels: ChannelTable::default(),
            turns: InferenceIds::default(),
            open_turns: HashMap::new(),
            dedupe: Dedupe::default(),
            next_id: 1,
            pending: HashMap::new(),
            app_pending: HashSet::new(),
            out: VecDeque::new(),
            handed_out: 0,
        })
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

    /// The server's label (`serverInfo.name`; empty before `initialize` is answered).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The last usable receipt (testimony only).
    pub fn last_receipt(&self) -> Option<&Receipt> {
        self.p.last_receipt.as_ref()
    }

    /// The channels this connection registered and the host accepted (§14.5).
    pub fn channels(&self) -> &ChannelTable {
        &self.channels
    }

    /// The manifest review in force (MCPL connections, once `initialize` is answered).
    pub fn review(&self) -> Option<&ManifestReview> {
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
        let deadline = now + self.rules.initialize_timeout;
        self.send_request("initialize", params, Purpose::Initialize, deadline);
    }

    /// The next output, in order; `None` when there is nothing more until the next input.
    pub fn poll_output(&mut self) -> Option<HostOutput> {
        let o = self.out.pop_front()?;
        if matches!(o, HostOutput::Event(_) | HostOutput::Request { .. }) {
            self.handed_out = self.handed_out.saturating_sub(1);
        }
        Some(o)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due, if anything waits.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.values().map(|(_, at)| *at).min()
    }

    /// Expires every request of ours whose deadline is at or before `now`, in id order.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        for id in due {
            if let Some((purpose, _)) = self.pending.remove(&id) {
                self.on_answer(now, id, purpose, Answer::Timeout);
            }
        }
    }

    /// Handles one message received from the server, in wire order.
    pub fn handle_message(&mut self, now: Instant, msg: Message) {
        if self.phase == Phase::Closed {
            return;
        }
        match msg {
            Message::Request(r) => self.on_request(r),
            Message::Notification(n) => self.on_notification(now, n),
            Message::Response(r) => self.on_response(now, r),
        }
    }

    /// Starts a lifecycle turn (§10.5): sends `inference/lifecycle` `started`, gated as the
    /// server admits it (`inferenceLifecycle`). Refused while a turn for `inference_id` is
    /// open or among the last [`ENDED_IDS_REMEMBERED`](super::ENDED_IDS_REMEMBERED) ended ones,
    /// and past that many open turns.
    pub fn start_turn(
        &mut self,
        inference_id: &str,
        conversation_id: &str,
        turn_index: u64,
    ) -> Result<(), StateError> {
        if self.open_turns.len() >= super::ENDED_IDS_REMEMBERED {
            return Err(StateError::Turn(format!(
                "{} turns are open, the limit",
                self.open_turns.len()
            )));
        }
        let params = json!({ "inferenceId": inference_id, "conversationId": conversation_id,
                             "turnIndex": turn_index, "phase": "started" });
        self.gate_lifecycle(&params)?;
        if !self.turns.start(inference_id) {
            return Err(StateError::Turn(format!(
                "a turn for inference {inference_id:?} is open or recently ended"
            )));
        }
        self.open_turns.insert(
            inference_id.to_owned(),
            (conversation_id.to_owned(), turn_index),
        );
        self.notify("inference/lifecycle", params);
        Ok(())
    }

    /// Ends the open turn of `inference_id` with its one terminal (§10.5), `usage` attached
    /// when given. A terminal the grant no longer allows is not sent (outbound gating wins)
    /// and reported; the turn ends either way.
    pub fn end_turn(
        &mut self,
        inference_id: &str,
        terminal: super::Terminal,
        usage: Option<Value>,
    ) -> Result<(), StateError> {
        let Some((conversation_id, turn_index)) = self.open_turns.remove(inference_id) else {
            return Err(StateError::Turn(format!(
                "no turn for inference {inference_id:?} is open"
            )));
        };
        self.turns.end(inference_id);
        let mut params = json!({ "inferenceId": inference_id, "conversationId": conversation_id,
                                 "turnIndex": turn_index, "phase": terminal.as_str() });
        if let (Some(u), Some(o)) = (usage, params.as_object_mut()) {
            o.insert("usage".into(), u);
        }
        match self.gate_lifecycle(&params) {
            Ok(()) => self.notify("inference/lifecycle", params),
            Err(e) => self.diag(HostDiagnostic::LifecycleNotSent {
                inference_id: inference_id.to_owned(),
                detail: e.to_string(),
            }),
        }
        Ok(())
    }

    /// The server's admission rule applied before sending `inference/lifecycle` (§5.4).
    fn gate_lifecycle(&self, params: &Value) -> Result<(), StateError> {
        if let Mode::McpOnly(r) = &self.p.mode {
            return Err(StateError::McpOnly(r.clone()));
        }
        super::admit_outbound(
            super::Receiver::Server,
            "inference/lifecycle",
            Some(params),
            self.p.ready,
            &self.p.grant,
        )
        .map(|_| ())
        .map_err(|r| StateError::Turn(r.to_error("inference/lifecycle").message.into_owned()))
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.transmit(Message::Notification(Notification {
            method: method.to_owned(),
            params: Some(params),
        }));
    }

    /// Answers a request handed out as [`HostOutput::Request`].
    pub fn answer(
        &mut self,
        id: RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), StateError> {
        if !self.app_pending.remove(&id) {
            return Err(StateError::UnknownRequest(
                serde_json::to_string(&id).unwrap_or_default(),
            ));
        }
        self.transmit(Message::Response(Response {
            id: Some(id),
            outcome,
        }));
        Ok(())
    }

    /// Changes the host's policy (§6.7 orderings): a narrowing applies at once, before the
    /// Request is written; a widening activates only on an accepting receipt. The outcome
    /// comes out as [`HostOutput::PolicyChanged`].
    pub fn set_policy(&mut self, now: Instant, patterns: Vec<String>) -> Result<(), StateError> {
        if let Mode::McpOnly(r) = &self.p.mode {
            if self.p.ready {
                return Err(StateError::McpOnly(r.clone()));
            }
        }
        if self.phase != Phase::Up || self.policy_in_flight() {
            return Err(StateError::PolicyInFlight);
        }
        let wall = self.wall(now);
        let plan = self.p.begin_change(patterns, wall).map_err(|e| match e {
            ChangeRefused::McpOnly(r) => StateError::McpOnly(r),
            ChangeRefused::Policy(p) => StateError::Policy(p),
        })?;
        let params = plan
            .hg
            .update_params(self.rules.enabled.as_deref(), &self.rules.disabled);
        let deadline = now + self.rules.policy_timeout;
        self.send_request(
            "featureSets/update",
            params,
            Purpose::Change(plan),
            deadline,
        );
        Ok(())
    }

    fn policy_in_flight(&self) -> bool {
        self.pending.values().any(|(p, _)| {
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
        if !crate::policy::before_inference_applies(&self.p.grant) {
            return None;
        }
        crate::policy::redact_before_inference(&self.p.grant, &mut params);
        let id = self.next_id;
        let deadline = now + self.rules.hook_timeout;
        self.send_request("context/beforeInference", params, Purpose::Hook, deadline);
        Some(id)
    }

    fn wall(&self, now: Instant) -> SystemTime {
        self.origin.1 + now.saturating_duration_since(self.origin.0)
    }

    fn transmit(&mut self, m: Message) {
        self.out.push_back(HostOutput::Transmit(m));
    }

    fn diag(&mut self, d: HostDiagnostic) {
        self.out.push_back(HostOutput::Diagnostic(d));
    }

    fn report(&mut self, diags: Diagnostics) {
        for d in diags {
            self.diag(d);
        }
    }

    /// Hands an event or request to the application; `false` when too many wait.
    fn hand_out(&mut self, o: HostOutput) -> bool {
        if self.handed_out >= self.rules.max_pending_outputs.max(1) {
            return false;
        }
        self.handed_out += 1;
        self.out.push_back(o);
        true
    }

    fn send_request(&mut self, method: &str, params: Value, purpose: Purpose, deadline: Instant) {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, (purpose, deadline));
        self.transmit(Message::Request(Request {
            id: RequestId::from(id),
            method: method.to_owned(),
            params: Some(params),
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
            self.pending.clear();
            self.out.push_back(HostOutput::Close);
        }
    }

    // --- inbound ----------------------------------------------------------------------

    /// The admission of one inbound method (§5.3, §5.4); `channels/changed` once ready is
    /// judged item-wise even without `channels.register` (a removal only narrows; the
    /// reading of `host::HostSession`).
    fn admit(&mut self, method: &str, params: Option<&Value>) -> Result<Grant, ErrorObject> {
        match admit_at_host(method, params, self.p.ready, &self.p.grant) {
            Ok(_) => Ok(self.p.grant),
            Err(r) => {
                let method = method.to_owned();
                self.diag(match r {
                    Refusal::NotReceived => HostDiagnostic::UnexpectedMethod {
                        method: method.clone(),
                    },
                    Refusal::NotReady(_) => HostDiagnostic::PrivilegedBeforeReady {
                        method: method.clone(),
                    },
                    Refusal::Denied(d) => HostDiagnostic::CapabilityDenied {
                        method: method.clone(),
                        capability: d.capability,
                    },
                });
                Err(r.to_error(&method))
            }
        }
    }

    fn on_request(&mut self, r: Request) {
        let judged = match self.admit(&r.method, r.params.as_ref()) {
            Ok(g) => g,
            Err(e) => return self.respond(r.id, Err(e)),
        };
        match r.method.as_str() {
            "ping" => self.respond(r.id, Ok(json!({}))),
            "push/event" => {
                let answer = self.on_push(r.params.as_ref(), &judged);
                self.respond(r.id, answer);
            }
            "inference/request" | "model/info" => {
                if r.method == "inference/request" {
                    let mut diags = Vec::new();
                    let checked = rules::check_inference_feature_set(
                        &mut diags,
                        r.params.as_ref(),
                        &judged,
                        self.p.review.as_ref(),
                    );
                    self.report(diags);
                    if let Err(e) = checked {
                        return self.respond(r.id, Err(e));
                    }
                }
                if self.app_pending.contains(&r.id) {
                    let e = ErrorObject::invalid_request("a request with this id is in flight");
                    return self.respond(r.id, Err(e));
                }
                let handed = self.hand_out(HostOutput::Request {
                    id: r.id.clone(),
                    method: r.method.clone(),
                    params: r.params.clone(),
                });
                if handed {
                    self.app_pending.insert(r.id);
                } else {
                    let limit = self.rules.max_pending_outputs;
                    self.respond(r.id, Err(ErrorObject::busy(limit)));
                }
            }
            "channels/register" | "channels/changed" | "channels/incoming" | "channels/list" => {
                let answer = self.on_channels(&r.method, r.params.as_ref(), false, &judged);
                self.respond(r.id, answer);
            }
            _ => self.out.push_back(HostOutput::Unhandled {
                message: Message::Request(r),
                judged,
            }),
        }
    }

    /// The channel methods (§14.5), by [`ChannelTable`]; a Notification form applies too.
    fn on_channels(
        &mut self,
        method: &str,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let limits = &self.rules.channels;
        let answer = match method {
            "channels/register" => {
                self.channels
                    .register(&mut diags, params, notification, judged, limits)
            }
            "channels/changed" => {
                let r = self
                    .channels
                    .changed(&mut diags, params, notification, judged, limits);
                // §17.7: a channel change is a `surface-changed` receipt.
                let receipt = r
                    .is_ok()
                    .then(|| {
                        self.p
                            .review
                            .as_mut()
                            .and_then(|r| r.surface_changed("channels"))
                    })
                    .flatten();
                if let Some(receipt) = receipt {
                    self.hand_out(HostOutput::Event(HostEvent::ManifestChange(receipt)));
                }
                r
            }
            "channels/incoming" => {
                let mut events = Vec::new();
                let room = self
                    .rules
                    .max_pending_outputs
                    .max(1)
                    .saturating_sub(self.handed_out);
                let r = self.channels.incoming(
                    &mut diags,
                    params,
                    &self.p.grant,
                    &self.rules.channels,
                    self.p.review.as_ref(),
                    &self.label,
                    |e| {
                        if events.len() >= room {
                            return false;
                        }
                        events.push(e);
                        true
                    },
                );
                for e in events {
                    self.hand_out(HostOutput::Event(e));
                }
                r
            }
            _ => Ok(self.channels.list()),
        };
        self.report(diags);
        answer
    }

    fn on_push(&mut self, params: Option<&Value>, judged: &Grant) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let limits = rules::PushLimits {
            max_event_id_bytes: self.rules.max_event_id_bytes,
        };
        let verdict = rules::judge_push(
            &mut diags,
            params,
            judged,
            self.p.review.as_ref(),
            &self.dedupe,
            limits,
            &self.label,
        );
        self.report(diags);
        let (event, event_id) = match verdict? {
            PushVerdict::Deliver { event, event_id } => (event, event_id),
            PushVerdict::Duplicate => return Ok(rules::duplicate_answer()),
        };
        let delivered = self.hand_out(HostOutput::Event(event));
        if delivered {
            self.dedupe.remember(&event_id, self.rules.dedupe_window);
        }
        Ok(rules::push_answer(delivered))
    }

    fn on_notification(&mut self, now: Instant, n: Notification) {
        let method = n.method.as_str();
        if let Some(surface) = method
            .strip_prefix("notifications/")
            .and_then(|s| s.strip_suffix("/list_changed"))
        {
            // §17.7: an MCP list change is a `surface-changed` receipt.
            if let Some(r) = self
                .p
                .review
                .as_mut()
                .and_then(|r| r.surface_changed(surface))
            {
                self.hand_out(HostOutput::Event(HostEvent::ManifestChange(r)));
            }
            return;
        }
        if method == "mcpl/manifestChanged" {
            return self.on_manifest_changed(now, n.params.as_ref());
        }
        let params = n.params.clone();
        let Ok(judged) = self.admit(method, params.as_ref()) else {
            return;
        };
        if matches!(method, "channels/register" | "channels/changed") {
            // Applied as a Request would be; nothing to answer (§14.3, §14.5).
            let m = n.method.clone();
            let _ = self.on_channels(&m, n.params.as_ref(), true, &judged);
        } else {
            // Admitted but not a notification a host acts on: reported, never dropped.
            self.diag(HostDiagnostic::UnexpectedMethod {
                method: n.method.clone(),
            });
        }
    }

    /// `mcpl/manifestChanged` (§17.3): fetch now, fold into the fetch in flight, or drop
    /// over the rate limit (§17.8), reported.
    fn on_manifest_changed(&mut self, now: Instant, params: Option<&Value>) {
        if self.p.review.is_none() {
            return self.diag(HostDiagnostic::UnexpectedMethod {
                method: "mcpl/manifestChanged".into(),
            });
        }
        if let Some(r) = params
            .and_then(|p| p.get("revision"))
            .and_then(Value::as_str)
        {
            self.announced = Some(r.to_owned());
        }
        match self.limiter.on_notification(now) {
            FetchDecision::FetchNow => self.fetch(now),
            FetchDecision::Coalesced => {}
            FetchDecision::Dropped => {
                let total = self.limiter.dropped();
                self.diag(HostDiagnostic::ManifestFetchDropped {
                    dropped_total: total,
                })
            }
        }
    }

    fn fetch(&mut self, now: Instant) {
        let deadline = now + self.rules.manifest_timeout;
        self.send_request("mcpl/manifest", json!({}), Purpose::Fetch, deadline);
    }

    /// A fetched manifest (§17.5): bounded, reviewed, its receipt handed out; a revocation
    /// or a suspension is told by Request (§6.7); a coalesced announcement fetches again.
    fn on_fetched(&mut self, now: Instant, answer: Answer) {
        let announced = self.announced.take();
        match answer {
            Answer::Result(v) => {
                let count = crate::manifest::feature_set_count(&v);
                let limit = self.rules.max_feature_sets;
                if count > limit {
                    self.diag(HostDiagnostic::ManifestFetchFailed {
                        detail: format!(
                            "{}; it is refused and the manifest in force stands",
                            ConnectError::TooManyFeatureSets { count, limit }
                        ),
                    });
                } else {
                    let wall = self.wall(now);
                    let threshold = self.rules.suspend_after_failures;
                    let reviewed = self
                        .p
                        .review_fetched(&v, announced.as_deref(), wall, threshold);
                    if let Some(reviewed) = reviewed {
                        for d in reviewed.diagnostics() {
                            self.diag(d);
                        }
                        if let Some(r) = reviewed.outcome.receipt().cloned() {
                            self.hand_out(HostOutput::Event(HostEvent::ManifestChange(r)));
                        }
                        let tell = reviewed.tell_reduction();
                        self.effects(reviewed.effects);
                        if tell && self.phase == Phase::Up {
                            self.send_reduction(now);
                        }
                    }
                }
            }
            Answer::Error(e) => self.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("error {}: {}", e.code, e.message),
            }),
            Answer::Timeout => self.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("no answer within {:?}", self.rules.manifest_timeout),
            }),
        }
        let before = self.limiter.dropped();
        let again = self.limiter.on_fetch_complete(now);
        if self.limiter.dropped() > before {
            let total = self.limiter.dropped();
            self.diag(HostDiagnostic::ManifestFetchDropped {
                dropped_total: total,
            });
        }
        if again && self.phase == Phase::Up {
            self.fetch(now);
        }
    }

    fn send_reduction(&mut self, now: Instant) {
        let hg = self.p.reduction();
        let params = hg.update_params(self.rules.enabled.as_deref(), &self.rules.disabled);
        let deadline = now + self.rules.policy_timeout;
        self.send_request("featureSets/update", params, Purpose::Reduction, deadline);
    }

    fn on_response(&mut self, now: Instant, r: Response) {
        let key = match &r.id {
            Some(RequestId::Number(n)) => n.as_u64(),
            _ => None,
        };
        let Some((id, (purpose, _))) = key.and_then(|k| self.pending.remove(&k).map(|p| (k, p)))
        else {
            self.diag(HostDiagnostic::UnexpectedResponse {
                id: r
                    .id
                    .as_ref()
                    .map_or("null".into(), |id| id.to_value().to_string()),
            });
            return;
        };
        let answer = match r.outcome {
            Ok(v) => Answer::Result(v),
            Err(e) => Answer::Error(e),
        };
        self.on_answer(now, id, purpose, answer);
    }

    // --- our requests' answers ----------------------------------------------------------

    fn on_answer(&mut self, now: Instant, id: u64, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Fetch => self.on_fetched(now, answer),
            Purpose::Hook => {
                let answer = match answer {
                    Answer::Result(v) => Ok(v),
                    Answer::Error(e) => Err(format!("error {}: {}", e.code, e.message)),
                    Answer::Timeout => Err(format!(
                        "no answer within {:?} (fail-open)",
                        self.rules.hook_timeout
                    )),
                };
                let verdict = rules::judge_hook_answer(
                    answer,
                    &self.p.grant,
                    self.p.review.as_ref(),
                    self.rules.max_injections_per_hook,
                );
                let server = self.label.clone();
                if let Some(detail) = &verdict.failure {
                    self.diag(HostDiagnostic::HookFailed {
                        server: server.clone(),
                        detail: detail.clone(),
                    });
                }
                for (_, reason) in &verdict.rejected {
                    self.diag(HostDiagnostic::InjectionRejected {
                        server: server.clone(),
                        reason: reason.to_string(),
                    });
                }
                self.out.push_back(HostOutput::Hook { id, verdict });
            }
            Purpose::Initialize => self.on_initialized(now, answer),
            Purpose::InitialPolicy(hg) => self.on_initial_policy(now, hg, answer),
            Purpose::Change(plan) => {
                let receipt = self.receipt_of(&answer);
                let wall = self.wall(now);
                let (change, effects) = self.p.finish_change(plan, receipt, wall);
                self.out.push_back(HostOutput::PolicyChanged(change));
                self.effects(effects);
            }
            Purpose::Reduction => {
                let receipt = self.receipt_of(&answer);
                let wall = self.wall(now);
                let effects = self.p.after_reduction(receipt, wall);
                let closing = effects.close;
                self.effects(effects);
                if !closing && self.phase == Phase::Reducing {
                    self.connected(Ok(()));
                }
            }
        }
    }

    /// Hands out a mode change and closes when a decision says so.
    fn effects(&mut self, effects: Effects) {
        if let Some(mode) = effects.entered {
            self.hand_out(HostOutput::Event(HostEvent::ModeChanged(mode)));
        }
        if effects.close {
            self.phase = Phase::Closed;
            self.out.push_back(HostOutput::Close);
        }
    }

    /// The usable receipt an answer carries, its defects reported.
    fn receipt_of(&mut self, answer: &Answer) -> Option<Receipt> {
        match answer {
            Answer::Result(v) => self.read_receipt(v),
            Answer::Error(_) | Answer::Timeout => None,
        }
    }

    fn read_receipt(&mut self, v: &Value) -> Option<Receipt> {
        let mut diags = Vec::new();
        let receipt = self.p.read_receipt(&mut diags, v);
        self.report(diags);
        receipt
    }

    fn on_initialized(&mut self, now: Instant, answer: Answer) {
        let result = match answer {
            Answer::Result(v) => v,
            Answer::Error(e) => return self.connected(Err(ConnectError::Remote(e))),
            Answer::Timeout => return self.connected(Err(ConnectError::Timeout)),
        };
        let Some(caps) = result.get("capabilities").filter(|c| c.is_object()) else {
            let e = ConnectError::BadInitialize("no capabilities object".into());
            return self.connected(Err(e));
        };
        self.label = result
            .pointer("/serverInfo/name")
            .and_then(Value::as_str)
            .unwrap_or("server")
            .to_owned();
        let Some(manifest) = caps.pointer("/experimental/mcpl") else {
            // §3.3: MCP-only; the grant holds at most `tools` and is final.
            let caps = caps.clone();
            return match self.p.not_advertised(&caps) {
                Ok(()) => {
                    self.notify_initialized();
                    self.connected(Ok(()));
                }
                Err(e) => self.connected(Err(e.into())),
            };
        };
        let count = crate::manifest::feature_set_count(manifest);
        let limit = self.rules.max_feature_sets;
        if count > limit {
            return self.connected(Err(ConnectError::TooManyFeatureSets { count, limit }));
        }
        let wall = self.wall(now);
        let reviewed = ManifestReview::initial(
            manifest,
            Some(caps),
            self.rules.policy.iter().map(String::as_str),
            wall,
        );
        let (mut review, findings) = match reviewed {
            Ok(r) => r,
            Err(crate::manifest::review::ReviewError::Policy(p)) => {
                return self.connected(Err(p.into()))
            }
            Err(other) => {
                return self.connected(Err(ConnectError::BadInitialize(other.to_string())))
            }
        };
        for f in findings {
            self.diag(HostDiagnostic::ManifestFinding {
                code: f.code,
                path: f.path,
                message: f.message,
            });
        }
        let hg = match HostGrant::compute(
            review.advertised(),
            self.rules.policy.iter().map(String::as_str),
        ) {
            Ok(hg) => hg,
            Err(e) => return self.connected(Err(e.into())),
        };
        let params = hg.update_params(self.rules.enabled.as_deref(), &self.rules.disabled);
        // The host's own selection narrows derivation at once (it can never widen).
        if let Ok(up) = crate::policy::UpdateParams::parse(&params) {
            review.set_selection(crate::policy::Selection {
                enabled: up.enabled,
                disabled: up.disabled,
            });
        }
        self.p.review = Some(review);
        self.notify_initialized();
        // §5.3: the Request goes out even when nothing is enabled or disabled.
        self.phase = Phase::PolicyPending;
        let deadline = now + self.rules.policy_timeout;
        self.send_request(
            "featureSets/update",
            params,
            Purpose::InitialPolicy(hg),
            deadline,
        );
    }

    fn notify_initialized(&mut self) {
        self.transmit(Message::Notification(Notification {
            method: "notifications/initialized".into(),
            params: None,
        }));
    }

    fn on_initial_policy(&mut self, now: Instant, hg: HostGrant, answer: Answer) {
        let decision = match &answer {
            Answer::Result(v) => {
                let receipt = self.read_receipt(v);
                rules::initial_decision(PolicyAnswer::Receipt(receipt))
            }
            Answer::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                rules::initial_decision(PolicyAnswer::MethodNotFound)
            }
            Answer::Error(e) => {
                rules::initial_decision(PolicyAnswer::Failed(e.message.to_string()))
            }
            Answer::Timeout => rules::initial_decision(PolicyAnswer::Timeout),
        };
        let wall = self.wall(now);
        let Ok((told_wider, effects)) = self.p.decide_initial(&hg, decision, wall) else {
            return self.connected(Err(ConnectError::Refused));
        };
        self.effects(effects);
        // Fetches that failed during the exchange count too (§17.5).
        let suspended = self
            .p
            .suspend_if_due(self.rules.suspend_after_failures, wall);
        let told_wider = told_wider | suspended.entered.is_some();
        self.effects(suspended);
        if told_wider {
            // §6.7: the server may believe the grant it was told; tell the reduction.
            self.phase = Phase::Reducing;
            self.send_reduction(now);
        } else {
            self.connected(Ok(()));
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
