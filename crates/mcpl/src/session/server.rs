//! [`ServerState`]: the server side of one connection as a state machine (§5.2, §5.3,
//! §6.7): the `initialize` answer, the policy Request and its receipt
//! ([`ServerPolicyState::apply`]), the gate on what the host sends (requests and
//! notifications, [`admit_at_server`]) and on what the application sends, and the pairing
//! of the host's `inference/lifecycle` into turns with a safety timeout (§10.5,
//! [`LifecycleTracker`]). Inputs arrive in wire order; time is passed in: each frame's text
//! whole by [`ServerState::handle_frame`] (batches, JSON-RPC 2.0 §6; junk), as the peer.
//!
//! `server::Server` drives one per connection. Beside it, each by a rule of its own module:
//! manifest changes on a live connection and their coalesced announcements (`server_manifest`,
//! §17.3, §17.8), the channels the host accepted (`server_channels`, §14.5), the server's
//! own `inference/request`s, their results and chunks (`server_inference`, §11.3, §11.4),
//! the hook's set and answer (`server_hooks`, §6.7, §10.8), the ready moments
//! (`server_ready`, §5.3) and the `initialize` result (`server_initialize`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::server_inbound::{
    grant_in_force, host_notification, route_host_request, unredacted_hook, HostNotice,
    NotificationStep, RequestRoute,
};
use super::server_initialize::ServerRulesError;
use super::server_manifest::SharedManifest;
use super::server_pending::{DEFAULT_MAX_PENDING_REQUESTS, DEFAULT_REQUEST_TIMEOUT};
use super::{Receiver, Refusal, ServerDiagnostic, Transmission};
use crate::capability::{CapabilitySet, Grant, Requirement};
use crate::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId, Response};
use crate::lifecycle::{LifecycleConfig, LifecycleTracker, TurnEvent};
use crate::manifest::ManifestChanged;
use crate::policy::{self, Fallback, FeatureSetStatus, FeatureSets, ServerPolicyState, SetRefusal};
use crate::protocol::channels::ChannelsList;
use crate::protocol::hooks::BeforeInference;
use crate::protocol::inference::InferenceChunk;
use crate::protocol::manifest::ManifestFetch;
use crate::protocol::Method;

/// Answers to the host requests handed out.
mod answers;
/// The channels a host method may name (§14.3, §14.6).
mod channel_gate;
mod frames;
mod policy_answer;
mod rollback;
pub use policy_answer::{answer_policy_request, PolicyAnswer};
/// The connection's deadlines and its end.
mod ends;
mod hand_out;
use super::CANCELLED;

/// What a [`ServerState`] serves.
#[derive(Debug, Clone)]
pub struct ServerRules {
    /// `serverInfo` (`name`, `version`).
    pub server_info: Value,
    /// The MCPL manifest advertised under `capabilities.experimental.mcpl` (§5.1, §6.1).
    pub manifest: Value,
    /// MCP capabilities beside it (`tools`, `resources`, …). Under
    /// [`Self::initialize_by_application`] each one wins over the application's under the
    /// same name (`experimental` member by member) and is added where it names none.
    pub mcp_capabilities: Map<String, Value>,
    /// `instructions` for the `initialize` result (none by default); under
    /// [`Self::initialize_by_application`], set over the application's when `Some`.
    pub instructions: Option<String>,
    /// Capabilities without which the server refuses the policy, and the fallback it names
    /// (§6.7).
    pub required: Option<(CapabilitySet, Fallback)>,
    /// The §10.5 turn tracker's safety timeout and memory (`server::ServerBuilder`'s
    /// defaults: [`LifecycleConfig::default`]).
    pub lifecycle: LifecycleConfig,
    /// The feature set the application's `context/beforeInference` hook belongs to
    /// (`server::ServerBuilder::on_before_inference`'s): while it is unavailable the hook is
    /// answered empty without being handed out, and an answer naming no set claims it
    /// (§6.5, §6.7). `None` (the default): every hook request is handed out, and an answer
    /// must name its set.
    pub hook_feature_set: Option<String>,
    /// Whether `mcpl/manifest` (§17.4) is answered here with the manifest in force
    /// ([`Self::manifest`], as [`ServerState::manifest_changed`] changes it), as
    /// `server::Server` answers it from its tracker. `false` (the default) hands the fetch to
    /// the application.
    pub answers_manifest_fetch: bool,
    /// Whether the application answers `channels/list` itself (as a
    /// `server::ServerBuilder::on_channels_list` handler does): `false` (the default) answers
    /// it here with the connection's known channels (§14.3): [`ServerState::channels`], then
    /// those the application opened (its `channels/open` answers) and has not closed, less
    /// those the host may never have held (`opened_channel_dropped`: a `channels.lifecycle`
    /// revocation or a cancel crossing the answer, §6.7, §14.5), as `server::Server` does
    /// without one.
    pub channels_list_by_application: bool,
    /// Whether the application reads each request's typed params itself and answers `-32602`
    /// for params that are not its method's (as `server::Server`'s handlers do, after
    /// answering `-32601` for a method they have no handler for): `true` hands admitted
    /// requests out without reading their params here first (once, not twice), except a
    /// `context/beforeInference`, whose params the session reads itself (§10.1). `false`
    /// (the default) answers such params `-32602` before handing anything out.
    pub application_checks_params: bool,
    /// Whether the application answers `initialize` (an MCP implementation of its own, as
    /// `server::ServerBuilder::mcp_fallback`'s): `true` hands an `initialize` the session
    /// read (§5.1; a host's MCPL version, §3.2) out as [`ServerOutput::Request`], and makes
    /// its answer the session's ([`ServerState::answer`]: the manifest set under
    /// `capabilities.experimental.mcpl`, §17.1); only a result answered makes the
    /// connection initialized, and the host's `notifications/initialized` acknowledging it
    /// is handed out as a [`ServerOutput::Notification`] too (a stray one is reported). `false` (the default) answers it here.
    pub initialize_by_application: bool,
    /// The most host requests handed out as [`ServerOutput::Request`] and not yet answered;
    /// one past it is answered `-32000` with `data: { limit }` and not handed out (128 by
    /// default, as the peer's `max_in_flight_requests`). A request the session answers
    /// itself (`ping`, `initialize`, the policy Request, …) takes no slot: a narrowing
    /// policy applies at once however many slots are held (§6.7).
    pub max_in_flight: usize,
    /// How long a request sent with [`ServerState::request`] waits for its answer before it
    /// is given up ([`ServerOutput::RequestTimedOut`]); `None` waits until the connection
    /// ends. [`DEFAULT_REQUEST_TIMEOUT`] by default, as the peer's `request_timeout`.
    pub request_timeout: Option<Duration>,
    /// The most requests sent with [`ServerState::request`] and not yet answered or given
    /// up; one past it is refused ([`SendRefusal::TooManyPending`]).
    /// [`DEFAULT_MAX_PENDING_REQUESTS`] by default, as the peer's `max_pending_requests`.
    pub max_pending: usize,
}

impl ServerRules {
    /// Rules serving `manifest` as `server_info`, with no MCP capabilities, nothing
    /// required, and the defaults above. Refuses a `server_info` without a `name` and a
    /// `version` string, or with one blank ([`ServerRulesError`]), by the rule
    /// `server::ServerBuilder::build` applies (a field set afterwards is not checked again).
    pub fn new(server_info: Value, manifest: Value) -> Result<ServerRules, ServerRulesError> {
        super::server_initialize::check_server_info(&server_info)?;
        Ok(ServerRules::unchecked(server_info, manifest))
    }

    /// Mistakes in these rules, one line per field, empty when there are none: a bound of 0
    /// (`max_in_flight` answers every request busy, `max_pending` refuses every request of
    /// the server's), a `request_timeout` under 1 ms, and [`LifecycleConfig::defects`].
    /// [`ServerState::new`] reports them as [`ServerDiagnostic::InvalidRules`], its first
    /// output; `server::ServerBuilder::build` refuses its own as `BuildError::InvalidConfig`.
    pub fn defects(&self) -> Vec<String> {
        use crate::config_rules::{count, optional_timeout};
        let mut out = Vec::new();
        count(
            &mut out,
            &"ServerRules.max_in_flight",
            self.max_in_flight,
            "every host request would be answered busy",
        );
        count(
            &mut out,
            &"ServerRules.max_pending",
            self.max_pending,
            "every request of the server's would be refused",
        );
        optional_timeout(
            &mut out,
            &"ServerRules.request_timeout",
            self.request_timeout,
            "every request of the server's would be given up at once",
        );
        out.extend(self.lifecycle.defects());
        out
    }

    /// [`Self::new`] for a `server_info` the caller checked by the same rule.
    pub(crate) fn unchecked(server_info: Value, manifest: Value) -> ServerRules {
        ServerRules {
            server_info,
            manifest,
            mcp_capabilities: Map::new(),
            instructions: None,
            required: None,
            hook_feature_set: None,
            answers_manifest_fetch: false,
            channels_list_by_application: false,
            initialize_by_application: false,
            application_checks_params: false,
            lifecycle: LifecycleConfig::default(),
            max_in_flight: 128,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            max_pending: DEFAULT_MAX_PENDING_REQUESTS,
        }
    }
}

/// What a [`ServerState`] produced, drained in order by [`ServerState::poll_output`].
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOutput {
    /// A frame to write to the host, in this order (every frame the machine sends).
    Transmit(Transmission),
    /// An admitted host request for the application (`tools/call`, hooks, …): answer every
    /// one with [`ServerState::answer`] (or [`ServerState::answer_encoded`]), a method the
    /// application does not serve with `-32601` (`ErrorObject::method_not_found`): each
    /// unanswered one holds one of [`ServerRules::max_in_flight`]'s slots, and the host
    /// waits for it (JSON-RPC 2.0 §5).
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// An admitted host notification for the application (`inference/lifecycle` is
    /// decided here and comes out as [`ServerOutput::Turn`]).
    Notification(Notification),
    /// A turn boundary of the host's `inference/lifecycle` signal (§10.5), paired by the
    /// one tracker [`LifecycleTracker`]: at most one start and one end per inference, an
    /// open turn ended by the safety timeout ([`ServerState::handle_timeout`]).
    Turn(TurnEvent),
    /// An `inference/chunk` (§11.4) of a streaming `inference/request` the application sent
    /// through [`ServerState::request`] (`stream: true`), before its
    /// [`ServerOutput::Response`]. A chunk for no such request is an
    /// `unknown_inference_chunk` diagnostic instead.
    InferenceChunk {
        /// The id [`ServerState::request`] returned.
        id: u64,
        /// The chunk.
        chunk: crate::protocol::inference::InferenceChunkParams,
    },
    /// The answer to a request the application sent through [`ServerState::request`].
    Response {
        /// The id [`ServerState::request`] returned.
        id: u64,
        /// Its outcome.
        outcome: Result<Value, ErrorObject>,
    },
    /// The host cancelled a request handed out as [`ServerOutput::Request`] and not yet
    /// answered (MCP's `notifications/cancelled`, naming its `requestId`): the machine has
    /// answered it `-32800` ([`codes::REQUEST_CANCELLED`](crate::jsonrpc::codes), transmitted
    /// before this output: every request gets an answer, which the host ignores), so its
    /// work may stop and the application's answer is refused
    /// ([`SendRefusal::UnknownRequest`]) until the host reuses the id for a new request,
    /// which JSON-RPC 2.0 lets it do: from then on `answer(id, …)` answers the new one. A
    /// driver therefore drops whatever the cancelled request's work still produces rather
    /// than answering with it (`server::Server` numbers its hand-outs for this). `notification` is the host's, for an MCP
    /// implementation that keeps its own requests. A cancel naming a request not handed
    /// out, already answered or `initialize` (which MCP forbids cancelling) changes nothing
    /// and comes out as [`ServerOutput::Notification`].
    Cancelled {
        /// The request's id.
        id: RequestId,
        /// The host's `notifications/cancelled`.
        notification: Notification,
    },
    /// A request sent through [`ServerState::request`] got no answer within
    /// [`ServerRules::request_timeout`] ([`ServerState::handle_timeout`]): it is given up,
    /// and an answer arriving later is an `unexpected_response` diagnostic.
    RequestTimedOut {
        /// The id [`ServerState::request`] returned.
        id: u64,
    },
    /// A policy Request was accepted and its receipt transmitted (§5.3: the first makes the
    /// session ready): `server::Server`'s `on_ready` moment, and `on_first_ready`'s when
    /// `first`.
    PolicyApplied {
        /// The grant in force.
        grant: Grant,
        /// Whether this is the connection's first accepted policy Request.
        first: bool,
    },
    /// A defect of the host (`policy_malformed`, `unknown_feature_set`, …) or of the
    /// application's answer (`injection_dropped`), as `server::Server` reports it; or a
    /// notice, among them the end of each request sent through [`ServerState::request`]
    /// that nothing can answer any more ([`ServerDiagnostic::RequestUnanswered`], at
    /// [`ServerState::handle_eof`] and [`ServerState::handle_close`]), which a driver
    /// routes to that request's caller as it routes [`ServerOutput::RequestTimedOut`].
    Diagnostic(ServerDiagnostic),
    /// Close the connection (after writing what was transmitted before): a policy refused
    /// with `fallback: "close"` (§6.7). The machine does not close itself: it still reads
    /// what it is fed (under the reset policy, nothing granted) and its deadlines still run
    /// until the driver, once the connection is down, calls [`ServerState::handle_close`],
    /// which ends the open turns (§10.5) and everything in flight.
    Close,
}

impl ServerOutput {
    /// The line of JSON text to write for a [`ServerOutput::Transmit`]; `None` for every
    /// other output.
    pub fn frame(&self) -> Option<String> {
        match self {
            ServerOutput::Transmit(t) => Some(t.to_json()),
            _ => None,
        }
    }
}

/// Why [`ServerState::request`], [`ServerState::notify`] or [`ServerState::answer`] sent
/// nothing: the host would refuse it, or there was nothing to answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SendRefusal {
    /// The host is MCP-only (§3.2): no MCPL method is sent.
    #[error("the host does not speak MCPL 0.5 (§3.2): no MCPL method is sent")]
    McpOnly,
    /// The method, its readiness or its grant (the host's admission rule).
    #[error("{}", .0.to_error(.1).message)]
    Admission(Refusal, String),
    /// The named feature set (§6.4, §6.6).
    #[error("{}", .0.to_error(.1).message)]
    FeatureSet(SetRefusal, String),
    /// [`ServerState::answer`] named a request that was not handed out or is already
    /// answered: nothing is sent.
    #[error("no host request {0} is waiting for an answer")]
    UnknownRequest(String),
    /// The method has a path of its own that keeps the server's obligations for it
    /// ([`dedicated_to_host`]): nothing was sent.
    #[error("{method} cannot be sent raw: call {instead} instead, which keeps the server's obligations for it")]
    UseDedicated {
        /// The method.
        method: String,
        /// What to call instead.
        instead: &'static str,
    },
    /// [`ServerRules::max_pending`] requests already wait for the host's answer: nothing is
    /// sent.
    #[error("{limit} requests already wait for the host's answer")]
    TooManyPending {
        /// The bound.
        limit: usize,
    },
    /// The params are a scalar, which no message carries (JSON-RPC 2.0 §4.2), or nested
    /// too deep for the peer to read ([`crate::jsonrpc::params_shape`]): nothing is sent.
    #[error("{0}")]
    InvalidParams(crate::jsonrpc::ParamsDefect),
    /// The method is not sent in this form: §4.1 gives it as `kind` (a Request-only
    /// `channels/incoming` sent by [`ServerState::notify`], say), and the host would not
    /// apply it ([`crate::protocol::form_refused`]): nothing is sent.
    #[error(
        "{method} is sent only as a {kind:?} (§4.1); a host does not apply it in another form"
    )]
    WrongForm {
        /// The method.
        method: String,
        /// The form §4.1 gives it.
        kind: crate::protocol::Kind,
    },
    /// A `channels/incoming` message names this channel, which the connection does not hold
    /// (§14.5: the host validates it against the channel actually registered): nothing is
    /// sent.
    #[error("channel {0:?} is not held on this connection (§14.5): nothing is sent")]
    UnknownChannel(String),
    /// The connection ended ([`ServerState::handle_close`]): nothing is sent, and no
    /// outcome would ever come for a request.
    #[error("the connection is closed: nothing more is sent on it")]
    Closed,
    /// [`ServerState::request`] after the host ended its output
    /// ([`ServerState::handle_eof`]): nothing is sent, as nothing could answer it.
    /// Notifications and answers are still sent.
    #[error("the host ended its output: no answer to a request would come")]
    InputEnded,
}

/// One connection's state as the server's outbound gate ([`gate_to_host`]) reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendState<'a> {
    /// `initialize` has been answered (before that, whether the host speaks MCPL is unknown).
    pub(crate) initialized: bool,
    /// The host advertised MCPL 0.5 (§3.2).
    pub(crate) mcpl: bool,
    /// A policy Request has been applied (§5.3).
    pub(crate) ready: bool,
    /// The grant in force.
    pub(crate) grant: &'a Grant,
    /// The connection's feature-set declarations (§6.1).
    pub(crate) declarations: &'a FeatureSets,
    /// Each declared set's derived status (§6.4).
    pub(crate) statuses: &'a BTreeMap<String, FeatureSetStatus>,
}

/// The server's one outbound gate (§5.4: what the host would refuse is not sent), for the
/// typed senders of `server::Session` and for [`ServerState::request`]/[`ServerState::notify`]
/// alike: no MCPL method to an MCP-only host (§3.2); the host's admission rule for `method`
/// with `params` ([`admit_outbound`](super::admit_outbound): direction, readiness, grant);
/// and, when `params` name a `featureSet`, the host's feature-set gate
/// ([`policy::feature_set_gate`], §6.4 rule 2, §6.6) for what the method exercises. `Ok`
/// carries that requirement.
pub(crate) fn gate_to_host(
    method: &str,
    params: Option<&Value>,
    at: &SendState<'_>,
) -> Result<Requirement, SendRefusal> {
    if let Some(Err(kind)) = params.map(crate::jsonrpc::params_shape) {
        return Err(SendRefusal::InvalidParams(kind));
    }
    if at.initialized && !at.mcpl && crate::protocol::is_mcpl_method(method) {
        return Err(SendRefusal::McpOnly);
    }
    let req = super::admit_outbound(Receiver::Host, method, params, at.ready, at.grant)
        .map_err(|r| SendRefusal::Admission(r, method.to_owned()))?;
    let feature_set = params
        .and_then(|p| p.get("featureSet"))
        .and_then(Value::as_str);
    if let Some(fs) = feature_set {
        policy::feature_set_gate(at.declarations, at.statuses, fs, req)
            .map_err(|r| SendRefusal::FeatureSet(r, fs.to_owned()))?;
    }
    Ok(req)
}

/// The call to use instead of [`ServerState::notify`] for a notification to the host that
/// has a path of its own keeping the server's obligations for it, as
/// [`outbound::dedicated`](super::outbound::dedicated) names the host's: `channels/changed`
/// goes as a Request through [`ServerState::request`], whose itemized result keeps the
/// channels the host accepted (§14.5; the Notification form has no result, so the ledger
/// could not follow it), and `mcpl/manifestChanged` through
/// [`ServerState::manifest_changed`], which declares the changed sets on the session and
/// coalesces the announcements (§17.3, §17.8). `None`: no path of its own.
pub fn dedicated_to_host(method: &str) -> Option<&'static str> {
    use crate::protocol::channels::ChannelsChanged;
    match method {
        ChannelsChanged::NAME => Some("ServerState::request (the Request form)"),
        ManifestChanged::METHOD => Some("ServerState::manifest_changed"),
        _ => None,
    }
}

/// What the answer to a host request handed out is made before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Handed {
    /// Sent as the application answered.
    Plain,
    /// A `context/beforeInference`: filtered ([`ServerState::answer`]).
    Hook,
    /// The host's `initialize` ([`ServerRules::initialize_by_application`]), from a host
    /// that speaks MCPL 0.5 when `mcpl`.
    Initialize {
        /// Whether the host advertised MCPL 0.5 (§3.2).
        mcpl: bool,
    },
    /// A `channels/open` asking for this `type`: its result's channel is held
    /// ([`ServerState::channels`]' gate) if the host can hold it as asked.
    ChannelOpen(Option<String>),
    /// A `channels/close` of this channel: `closed: true` ends it.
    ChannelClose(String),
}

/// The server side of one connection (module docs).
#[derive(Debug)]
pub struct ServerState {
    /// The rules, but for their `manifest`, which is moved into `manifest`.
    rules: ServerRules,
    /// The manifest in force (`ServerRules::manifest` at first).
    manifest: SharedManifest,
    initialized: bool,
    /// MCP's `notifications/initialized` arrived after `initialize` was answered
    /// ([`Self::on_initialized`]), or a request came first and was reported
    /// ([`ServerDiagnostic::RequestBeforeInitialized`]): nothing more to tell either way.
    acknowledged: bool,
    /// The host's `notifications/initialized` arrived after `initialize` was answered.
    initialized_told: bool,
    mcpl: bool,
    policy: ServerPolicyState,
    /// The application's requests waiting for the host's answer, with their deadlines.
    pending: super::server_pending::OwnRequests,
    /// Host requests handed out and not answered yet, and what their answer is made.
    handed: HashMap<crate::jsonrpc::InFlightId, Handed>,
    /// An `initialize` is with the application ([`ServerRules::initialize_by_application`]).
    initializing: bool,
    /// The last host request taken was answered busy, never handed out (`frames::take_value`).
    refused_busy: bool,
    /// While a batch is read: the requests handed out when it began and the requests of
    /// its own taken so far ([`FrameSide::batch_owed`](super::frames::FrameSide::batch_owed)),
    /// what the in-flight bound counts then.
    batch_owed: Option<(usize, usize)>,
    turns: LifecycleTracker,
    out: VecDeque<ServerOutput>,
    /// The `mcpl/manifestChanged` still to write, coalesced (§17.8).
    announce: super::server_manifest::PendingAnnouncement,
    /// The application's channel changes and the channels the host accepted (§14.5).
    channels: super::server_channels::ChannelLedger,
    /// The application's `inference/request`s in flight (§11.3, §11.4).
    inference: super::server_inference::InferenceRequests,
    ready: super::server_ready::ReadyMoments,
    /// [`Self::handle_close`] was called.
    closed: bool,
    /// [`Self::handle_eof`] was called.
    input_ended: bool,
    /// [`Self::generation`].
    generation: u64,
}

impl ServerState {
    /// A state machine serving `rules`. Rules that cannot work ([`ServerRules::defects`])
    /// are served as given and told as its first output ([`ServerDiagnostic::InvalidRules`]).
    pub fn new(mut rules: ServerRules) -> ServerState {
        let manifest = std::mem::take(&mut rules.manifest);
        ServerState::with_manifest(rules, manifest)
    }

    /// A state machine serving `rules` with `manifest` in place of `rules.manifest` (which
    /// is not read): e.g. a [`SharedManifest`] the connections of one server share.
    pub fn with_manifest(rules: ServerRules, manifest: impl Into<SharedManifest>) -> ServerState {
        let manifest = manifest.into();
        // Before `initialize` no grant is taken; its answer sets the ceiling again from
        // what it carries (an MCP fallback's `tools` included).
        let tools = super::server_initialize::declares_tools(&rules.mcp_capabilities);
        let policy = ServerPolicyState::new(
            manifest.declarations().clone(),
            super::server_manifest::advertisement(&manifest, tools),
        );
        let turns = LifecycleTracker::new(rules.lifecycle);
        let defects = rules.defects();
        let out = if defects.is_empty() {
            VecDeque::new()
        } else {
            VecDeque::from([ServerOutput::Diagnostic(ServerDiagnostic::InvalidRules {
                defects,
            })])
        };
        ServerState {
            rules,
            manifest,
            initialized: false,
            acknowledged: false,
            initialized_told: false,
            mcpl: false,
            policy,
            pending: Default::default(),
            handed: HashMap::new(),
            initializing: false,
            refused_busy: false,
            batch_owed: None,
            turns,
            out,
            announce: Default::default(),
            channels: Default::default(),
            inference: Default::default(),
            ready: Default::default(),
            closed: false,
            input_ended: false,
            generation: 0,
        }
    }

    /// Whether the host speaks MCPL 0.5 (known once `initialize` is answered).
    pub fn mcpl(&self) -> bool {
        self.mcpl
    }

    /// The channels the host accepted from this connection (§14.5): each itemized result of a
    /// `channels/register` or Request-form `channels/changed` sent through [`Self::request`]
    /// applied in the order the changes were sent, less a channel the application since
    /// closed (its `closed: true` answer to the host's `channels/close`) and less one a change
    /// in flight names and no answer yet accepts (fail closed, §14.5). What `channels/list`
    /// answers with (§14.3), before the channels the application opened.
    pub fn channels(&self) -> Vec<crate::protocol::channels::ChannelDescriptor> {
        self.channels.held()
    }

    /// Whether `initialize` has been answered (before that, whether the host speaks MCPL is
    /// unknown).
    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// Each declared feature set's derived status now (§6.4).
    pub fn feature_sets(&self) -> BTreeMap<String, FeatureSetStatus> {
        self.policy.statuses()
    }

    /// The manifest `initialize` answers with and `mcpl/manifest` serves
    /// ([`ServerRules::answers_manifest_fetch`]), replaced before `initialize` without
    /// anything to announce (§17.10), as [`Self::manifest_changed`] replaces it before then.
    /// After `initialize` it changes nothing: a change on a live connection is
    /// [`Self::manifest_changed`]'s, which declares and announces it.
    /// A [`SharedManifest`] shares it with other connections.
    pub fn set_manifest(&mut self, manifest: impl Into<SharedManifest>) {
        if self.initialized || self.closed {
            return;
        }
        let manifest = manifest.into();
        self.generation += 1;
        super::server_manifest::declare_changed(&mut self.policy, &manifest);
        self.manifest = manifest;
    }

    /// A number that changes whenever what [`Self::is_initialized`], [`Self::mcpl`],
    /// [`Self::is_ready`], [`Self::grant`], [`Self::feature_sets`] or [`Self::channels`]
    /// return may have changed (it may change when they did not): a driver that publishes
    /// them reads them again only then.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a policy Request has been applied (§5.3).
    pub fn is_ready(&self) -> bool {
        self.policy.is_ready()
    }

    /// The grant in force (empty until ready).
    pub fn grant(&self) -> Grant {
        grant_in_force(&self.policy)
    }

    /// The next output, in order; a pending `mcpl/manifestChanged`
    /// ([`Self::manifest_changed`]) comes after everything queued before it was polled.
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        let next = self.out.pop_front().map(|o| match o {
            ServerOutput::Diagnostic(d) => ServerOutput::Diagnostic(d.clipped()),
            o => o,
        });
        next.or_else(|| {
            let change = self.announce.take()?;
            Some(ServerOutput::Transmit(Transmission::Message(
                super::server_manifest::announcement(&change),
            )))
        })
    }

    /// The application installed a new `manifest` (its tracker computed `change` for this
    /// connection, §17.3). Before `initialize` it is only what `initialize` will answer
    /// with (§17.10: nothing is announced for it). After it, the changed feature sets are
    /// declared on the session at once (§17.5) and, on an MCPL connection, `change` is
    /// announced, coalesced with any announcement not yet polled (§17.8); an MCP-only
    /// connection (§3.2) announces nothing. The grant only narrows: a path it stops
    /// advertising leaves the grant at once, and one it adds is granted only by a later
    /// policy Request (§17.5 step 3: additions never auto-grant).
    /// A [`SharedManifest`] shares it with other connections.
    pub fn manifest_changed(
        &mut self,
        manifest: impl Into<SharedManifest>,
        change: ManifestChanged,
    ) {
        if self.closed {
            return;
        }
        let manifest = manifest.into();
        self.generation += 1;
        super::server_manifest::declare_changed(&mut self.policy, &manifest);
        if self.initialized && self.mcpl {
            self.announce.offer(change);
        }
        self.manifest = manifest;
    }

    /// Handles one message received from the host at `now`, in wire order.
    pub fn handle_message(&mut self, now: Instant, msg: Message) {
        if self.closed {
            return;
        }
        match msg {
            Message::Request(r) => self.on_request(r),
            Message::Notification(n) => self.on_notification(now, n),
            Message::Response(r) => {
                // The channels the host accepted may change (§14.5).
                self.generation += 1;
                let id = match &r.id {
                    Some(RequestId::Number(n)) => n.as_u64(),
                    _ => None,
                };
                match id.filter(|id| self.pending.answered(*id)) {
                    Some(id) => {
                        self.channels.answered(id, &r.outcome);
                        let defect = self.inference.answered(id, &r.outcome);
                        self.out.extend(defect.map(ServerOutput::Diagnostic));
                        self.out.push_back(ServerOutput::Response {
                            id,
                            outcome: r.outcome,
                        })
                    }
                    None => self.out.push_back(ServerOutput::Diagnostic(
                        ServerDiagnostic::UnexpectedResponse { id: r.id },
                    )),
                }
            }
        }
    }

    /// Sends `method` at `now` to the host if the host would admit it now: its admission
    /// rule ([`admit`](super::admit) as the host applies it) and, when `params` name a
    /// `featureSet`, the feature-set gate (§6.6) — a message the host would refuse is not
    /// sent — and while fewer than [`ServerRules::max_pending`] requests wait. Returns the
    /// id its [`ServerOutput::Response`] will carry, or its
    /// [`ServerOutput::RequestTimedOut`] once [`ServerRules::request_timeout`] has passed.
    pub fn request(
        &mut self,
        now: Instant,
        method: &str,
        params: Value,
    ) -> Result<u64, SendRefusal> {
        if self.closed {
            return Err(SendRefusal::Closed);
        }
        if self.input_ended {
            return Err(SendRefusal::InputEnded);
        }
        self.gate_outbound(method, &params, false)?;
        self.incoming_channels_held(method, &params)?;
        let limit = self.rules.max_pending;
        if self.pending.len() >= limit {
            return Err(SendRefusal::TooManyPending { limit });
        }
        let id = self.pending.sent(now, self.rules.request_timeout);
        // A channel named by a change in flight is not known until answered (§14.5).
        self.generation += u64::from(self.channels.sent(id, method, &params));
        self.inference.sent(id, method, &params);
        self.out
            .push_back(ServerOutput::Transmit(Transmission::Message(
                Message::Request(Request {
                    id: RequestId::from(id),
                    method: method.to_owned(),
                    params: crate::jsonrpc::params_to_send(Some(params)),
                }),
            )));
        Ok(id)
    }

    /// Request `id` ([`Self::request`]'s) went out under the wire id `wire`, not `id`: a
    /// driver whose peer numbers the requests it writes (`server::Server`'s) says so, since
    /// the host names a streaming `inference/request` by the id it read (§11.4: the
    /// `requestId` of its `inference/chunk`s).
    #[cfg(feature = "runtime")]
    pub(crate) fn sent_as(&mut self, id: u64, wire: RequestId) {
        self.inference.sent_as(id, wire);
    }

    /// Sends notification `method` if the host would admit it now, by the same gate as
    /// [`Self::request`]. A method with a path of its own is refused and named
    /// ([`dedicated_to_host`], [`SendRefusal::UseDedicated`]).
    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), SendRefusal> {
        if self.closed {
            return Err(SendRefusal::Closed);
        }
        if let Some(instead) = dedicated_to_host(method) {
            return Err(SendRefusal::UseDedicated {
                method: method.to_owned(),
                instead,
            });
        }
        self.gate_outbound(method, &params, true)?;
        self.out
            .push_back(ServerOutput::Transmit(Transmission::Message(
                Message::Notification(Notification {
                    method: method.to_owned(),
                    params: crate::jsonrpc::params_to_send(Some(params)),
                }),
            )));
        Ok(())
    }

    /// [`gate_to_host`] under this state, then the form §4.1 gives `method` (`notification`:
    /// sent as one; [`crate::protocol::form_refused`], the host's rule too).
    fn gate_outbound(
        &self,
        method: &str,
        params: &Value,
        notification: bool,
    ) -> Result<(), SendRefusal> {
        let grant = self.grant();
        let statuses = self.policy.statuses();
        let at = SendState {
            initialized: self.initialized,
            mcpl: self.mcpl,
            ready: self.policy.is_ready(),
            grant: &grant,
            declarations: self.policy.declarations(),
            statuses: &statuses,
        };
        gate_to_host(method, Some(params), &at)?;
        match crate::protocol::form_refused(method, notification) {
            Some(kind) => Err(SendRefusal::WrongForm {
                method: method.to_owned(),
                kind,
            }),
            None => Ok(()),
        }
    }

    fn respond(&mut self, id: RequestId, outcome: Result<Value, ErrorObject>) {
        self.out
            .push_back(ServerOutput::Transmit(Transmission::Message(
                Message::Response(Response {
                    id: Some(id),
                    outcome,
                }),
            )));
    }

    fn on_request(&mut self, r: Request) {
        if !self.acknowledged && self.initialized {
            self.before_initialized(&r.method);
        }
        if self
            .handed
            .contains_key(&crate::jsonrpc::InFlightId::of(&r.id))
        {
            // JSON-RPC ids are unique among requests in flight: refused, whatever its method,
            // as the async `Server` refuses it (the policy Request so sent grants nothing).
            let refusal = crate::session::frames::refuse_id_in_use(self, &r);
            return self.respond(r.id, refusal.outcome);
        }
        let route = route_host_request(
            &r.method,
            r.params.as_ref(),
            self.initialized,
            self.mcpl,
            &self.policy,
        );
        match route {
            Ok(RequestRoute::Initialize) if self.rules.initialize_by_application => {
                self.hand_out_initialize(r)
            }
            Ok(RequestRoute::Initialize) => {
                let answer = self.on_initialize(r.params.as_ref());
                self.respond(r.id, answer)
            }
            Ok(RequestRoute::Ping) => self.respond(r.id, Ok(json!({}))),
            Ok(RequestRoute::Policy) => self.on_policy(r),
            Ok(RequestRoute::Admitted)
                if r.method == ManifestFetch::NAME && self.rules.answers_manifest_fetch =>
            {
                // §17.4: the manifest in force, as `initialize` would send it now.
                let manifest = self.manifest.manifest().clone();
                self.respond(r.id, Ok(manifest))
            }
            Ok(RequestRoute::Admitted)
                if r.method == ChannelsList::NAME && !self.rules.channels_list_by_application =>
            {
                let list = self.channels.list_result();
                let answer = serde_json::to_value(list).map_err(|e| {
                    ErrorObject::internal(format!("cannot encode the channel list: {e}"))
                });
                self.respond(r.id, answer)
            }
            Err(e) => self.respond(r.id, Err(e)),
            Ok(RequestRoute::Untyped | RequestRoute::Admitted) => {
                let checked =
                    !self.rules.application_checks_params || r.method == BeforeInference::NAME;
                if checked {
                    if let Err(e) = crate::protocol::check_params(&r.method, r.params.as_ref()) {
                        // Typed params that do not parse reach no handler, and are read no
                        // further (`server::Server`'s typed handlers refuse them alike).
                        return self.respond(r.id, Err(e));
                    }
                }
                if let Some(e) = self.rollback_refused(&r.method, r.params.as_ref()) {
                    return self.respond(r.id, Err(e));
                }
                if let Some(channel) = self.unknown_channel(&r.method, r.params.as_ref()) {
                    let e = ErrorObject::unknown_channel(channel);
                    return self.respond(r.id, Err(e));
                }
                let mut r = r;
                if r.method == BeforeInference::NAME {
                    let grant = self.grant();
                    if let Some(d) = unredacted_hook(&grant, r.params.as_ref()) {
                        if let Some(p) = r.params.as_mut() {
                            policy::redact_before_inference(&grant, p);
                        }
                        self.out.push_back(ServerOutput::Diagnostic(d));
                    }
                }
                self.hand_out_request(r)
            }
        }
    }

    /// The host's `inference/lifecycle` notification with these params, read straight into
    /// their type (`server::Server`'s reader, issue #24): handled as [`Self::handle_message`]
    /// handles it read as a `Value`.
    #[cfg(feature = "runtime")]
    pub(crate) fn handle_lifecycle(
        &mut self,
        now: Instant,
        params: Box<crate::protocol::lifecycle::LifecycleParams>,
    ) {
        if !self.closed {
            self.on_notification(now, HostNotice::Lifecycle(params));
        }
    }

    fn on_notification(&mut self, now: Instant, n: impl Into<HostNotice>) {
        let mut diags = Vec::new();
        let step = host_notification(
            self.mcpl,
            &mut self.policy,
            &mut self.turns,
            now,
            n.into(),
            &mut diags,
        );
        self.out
            .extend(diags.into_iter().map(ServerOutput::Diagnostic));
        match step {
            NotificationStep::Done => {}
            NotificationStep::PolicyApplied => self.generation += 1,
            NotificationStep::Turns(evicted, event) => {
                let evicted = evicted.map(TurnEvent::Ended);
                self.out
                    .extend(evicted.into_iter().chain(event).map(ServerOutput::Turn))
            }
            NotificationStep::Deliver(n) if n.method == "notifications/initialized" => {
                self.on_initialized(n)
            }
            NotificationStep::Deliver(n) if n.method == InferenceChunk::NAME => {
                match self.inference.chunk(n.params) {
                    Ok(Some((id, chunk))) => self
                        .out
                        .push_back(ServerOutput::InferenceChunk { id, chunk }),
                    // Of a stream given up, already reported once.
                    Ok(None) => {}
                    Err(d) => self.out.push_back(ServerOutput::Diagnostic(d)),
                }
            }
            NotificationStep::Deliver(n) => {
                match crate::protocol::check_params(&n.method, n.params.as_ref()) {
                    Ok(()) => match self.unknown_channel(&n.method, n.params.as_ref()) {
                        // No response to carry `-32023` (§14.6): reported.
                        Some(channel) => self.out.push_back(ServerOutput::Diagnostic(
                            ServerDiagnostic::UnknownChannel {
                                channel_id: channel.to_owned(),
                                method: n.method,
                            },
                        )),
                        None => self.out.push_back(ServerOutput::Notification(n)),
                    },
                    // No response to carry the error: reported (as `server::Server` does).
                    Err(e) => self.out.push_back(ServerOutput::Diagnostic(
                        ServerDiagnostic::InvalidNotification {
                            method: n.method,
                            error: e.message.into_owned(),
                        },
                    )),
                }
            }
            NotificationStep::Untyped(n) if n.method == CANCELLED => self.on_cancelled(n),
            NotificationStep::Untyped(n) => self.out.push_back(ServerOutput::Notification(n)),
        }
    }

    fn on_policy(&mut self, r: Request) {
        self.generation += 1;
        let params = r.params.unwrap_or(Value::Null);
        let answer = answer_policy_request(&mut self.policy, self.rules.required, &params);
        for d in answer.diagnostics {
            self.out.push_back(ServerOutput::Diagnostic(d));
        }
        let ok = answer.response.is_ok();
        self.respond(r.id, answer.response);
        self.after_policy();
        match answer.refused {
            Some(Fallback::Close) => self.out.push_back(ServerOutput::Close),
            Some(Fallback::McpOnly) => {
                self.mcpl = false;
                self.announce.clear();
            }
            None if ok => {
                // The receipt is ahead of anything the application sends from now on (§5.3).
                self.out.push_back(ServerOutput::PolicyApplied {
                    grant: *self.policy.grant(),
                    first: self.ready.accepted(),
                });
            }
            None => {}
        }
    }
}
