//! The server session: the API a Rust MCPL server author writes against.
//!
//! Build a [`Server`] once with [`ServerBuilder`] (identity, feature sets, tools, handlers),
//! then run it over any [`Transport`] with [`Server::serve`] (or [`Server::start`] to keep a
//! [`Session`] handle). The session makes the spec's server obligations automatic:
//!
//! - **Handshake.** `initialize` is answered with the manifest under
//!   `capabilities.experimental.mcpl`, its `revision` taken from the server's
//!   [`ManifestTracker`]; the connection is attached to the tracker with exactly the snapshot
//!   it was sent, so nothing is announced right after `initialize` (§17.3, §17.10). `ping` is
//!   answered. A host that does not advertise `experimental.mcpl` gets a plain MCP server
//!   (§3.2): tools work, every MCPL method is unknown (`-32601`), every MCPL sender refuses.
//! - **Inert until the policy Request (§5.3).** Every capability-dependent behaviour is
//!   unavailable until a `featureSets/update` *Request* arrives; the grant then follows
//!   [`crate::policy::ServerPolicyState`]; the response is the degradation receipt derived
//!   from it (§6.7); a Notification only narrows; reductions apply before anything else is
//!   read. The application reads the state with [`Session::granted`],
//!   [`Session::feature_available`] and [`Session::grant_changes`] (a tokio `watch`).
//! - **Inbound gating (§5.4).** A host→server method whose capability is not granted is
//!   answered `-32002 { capability }` without calling the handler. Unknown methods, methods
//!   of the wrong direction and the removed surfaces (`context/afterInference`,
//!   `featureSets/changed`, `scope/elevate`) are answered `-32601`. Every request with an id
//!   gets exactly one response.
//! - **Senders that cannot violate the grant.** [`Session::push_event`],
//!   [`Session::channels_register`], [`Session::channels_changed`],
//!   [`Session::channels_incoming`], [`Session::inference_request`],
//!   [`Session::inference_stream`] and [`Session::model_info`] refuse locally, naming the
//!   missing capability ([`SendError`]), before anything reaches the wire; the ones that carry
//!   a `featureSet` (§6.5) also refuse an undeclared or unavailable set.
//! - **Lifecycle consumer (§10.5).** `inference/lifecycle` feeds a
//!   [`LifecycleTracker`]: the application gets one
//!   turn-start and one turn-end callback per `inferenceId`, a safety timeout ends turns
//!   whose terminal never comes, and defects are reported as diagnostics.
//! - **Delivery is never a side effect of a lifecycle event (§14.5).** The handlers for
//!   `inference/lifecycle`, `channels/outgoing/chunk` and `channels/outgoing/complete` are
//!   plain synchronous callbacks that receive no [`Session`], so the API offers no path from
//!   them to a send. The `context/beforeInference` handler gets a read-only [`GrantState`],
//!   not a session, for the same reason and for §10.7 (hooks must not trigger inference).
//!
//! - **Another MCP implementation for the MCP methods.** [`ServerBuilder::mcp_fallback`]
//!   hands, per connection, everything that is not MCPL's to an [`McpFallback`] (the
//!   `mcpl-rmcp` crate plugs an rmcp `ServerHandler` in here): the MCP part of `initialize`
//!   (the session adds `capabilities.experimental.mcpl`), `tools/*` (after the §5.4 gate),
//!   `resources/*`, `prompts/*`, `completion/*`, `logging/*`, custom methods and MCP
//!   notifications. It sends to the host through [`Session::send_mcp_request`] and
//!   [`Session::send_mcp_notification`], which refuse every MCPL method, so every MCPL
//!   message still goes through the gated senders above.
//!
//! Readings where the spec is silent (each fails closed):
//! - Requests other than `initialize` and `ping` before `initialize` are answered `-32600`;
//!   senders used before `initialize` refuse with [`SendError::NotReady`].
//! - With [`ServerBuilder::require`], a policy Request whose grant lacks a required path is
//!   answered `accepted: false` with the configured `fallback` (§6.7); after `mcp-only` MCPL
//!   stays off for the rest of the connection (a later `featureSets/update` is `-32601`).
//! - A second `initialize` is answered `-32600`.
//! - In MCP-only mode `tools/list` and `tools/call` are not gated (there is no MCPL grant;
//!   §3.2 says the server functions as a normal MCP server). With an MCPL host, `tools/call`
//!   needs `tools` (§5.4 table) and is refused before the policy Request.
//! - A request for a Notification-only method (e.g. `inference/lifecycle` with an id) is
//!   answered `-32600`.
//! - `channels/changed` is always sent as a Request: the host may require that form (§14.5)
//!   and it is always valid (§4.1), and it yields the itemized result.
//! - A `context/beforeInference` response whose feature set is undeclared or unavailable
//!   carries no injections (the receipt told the host that set is disabled); injections at a
//!   position whose inject leaf is not granted when the response is sent are dropped.
//! - A `push/event` with no caller-supplied `eventId` gets one derived from the digest of its
//!   `featureSet`, `payload`, `tags` and `origin` (not the timestamp), so a retry of the same
//!   event reuses it (§9.4); callers sending genuinely repeated events supply their own ids.
//! - Streaming `inference/chunk` notifications are routed to the stream by request id;
//!   chunks still queued when the final response arrives may be skipped (chunks are
//!   advisory; the response carries the full content, §11.4).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::capability::{advertisement_to_value, Capability, CapabilitySet, Grant, Requirement};
use crate::jsonrpc::{ErrorObject, Notification, RequestId};
use crate::lifecycle::{LifecycleConfig, LifecycleTracker, TurnEnd, TurnEvent, TurnStart};
use crate::manifest::{ConnectionId, ManifestChanged, ManifestSnapshot, ManifestTracker};
use crate::peer::{CloseReason, IncomingMessage, IncomingRequest, Peer, PeerConfig, PeerError};
use crate::policy::{
    self, Fallback, FeatureSetDeclaration, FeatureSetStatus, FeatureSets, Form, Receipt,
    ServerPolicyState, UnavailableReason,
};
use crate::protocol::channels::{
    AcknowledgeParams, ChangedParams, ChannelDescriptor, CloseParams, CloseResult,
    IncomingMessage as ChannelMessage, IncomingParams, IncomingResult, ItemizedResult, ListResult,
    OpenParams, OpenResult, OutgoingChunkParams, OutgoingCompleteParams, PublishParams,
    PublishResult, RegisterParams, TypingParams,
};
use crate::protocol::content::{Content, ContentBlock};
use crate::protocol::handshake::{
    Capabilities, Experimental, Implementation, InitializeResult, Tool, ToolsCallParams,
    ToolsCallResult, ToolsListResult,
};
use crate::protocol::hooks::{BeforeInferenceParams, BeforeInferenceResult};
use crate::protocol::inference::{InferenceChunkParams, InferenceRequestParams, InferenceResult};
use crate::protocol::lifecycle::LifecycleParams;
use crate::protocol::manifest::Manifest;
use crate::protocol::model::ModelInfo;
use crate::protocol::push::{PushEventParams, PushEventResult, PushPayload};
use crate::protocol::state::{RollbackParams, RollbackResult};
use crate::protocol::{method_info, Direction, Kind};
use crate::transport::Transport;

pub mod listen;

/// What a handler returns: a result, or the JSON-RPC error object to answer with.
pub type HandlerResult<T> = Result<T, ErrorObject>;

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Handler<P, R> = Arc<dyn Fn(Session, P) -> BoxFut<HandlerResult<R>> + Send + Sync>;
type HookHandler = Arc<
    dyn Fn(GrantState, BeforeInferenceParams) -> BoxFut<HandlerResult<BeforeInferenceResult>>
        + Send
        + Sync,
>;
type Callback<T> = Arc<dyn Fn(&T) + Send + Sync>;
type ReadyHandler = Arc<dyn Fn(Session) -> BoxFut<()> + Send + Sync>;
type CustomHandler = Handler<Option<Value>, Value>;
type FallbackFactory = Arc<dyn Fn(Session) -> Arc<dyn McpFallback> + Send + Sync>;

/// The future an [`McpFallback`] answers a request with.
pub type FallbackFuture = Pin<Box<dyn Future<Output = HandlerResult<Value>> + Send>>;

/// Serves, for one connection, the MCP methods the [`ServerBuilder`] does not know: another
/// MCP implementation driven by the session (see [`ServerBuilder::mcp_fallback`]). The
/// session calls it in wire order from its dispatch loop, so an implementation that must
/// keep that order (a `notifications/cancelled` after the request it cancels) does the
/// ordering-relevant work before returning the future.
pub trait McpFallback: Send + Sync + 'static {
    /// The MCP `initialize` result for the host's `params` (`protocolVersion`,
    /// `capabilities`, `serverInfo`, `instructions`). The session sets
    /// `capabilities.experimental.mcpl` to the manifest (replacing any the result carries,
    /// with a diagnostic) and answers the host; an error is answered as it is.
    fn initialize(&self, id: &RequestId, params: Value) -> FallbackFuture;

    /// A host request that is not MCPL's: `tools/list`, `tools/call` (once the §5.4 gate
    /// let it through), `resources/*`, `prompts/*`, `completion/complete`,
    /// `logging/setLevel`, a custom method not registered with [`ServerBuilder::method`] …
    /// Never `initialize`, `ping`, an MCPL method or a removed surface.
    fn request(&self, id: &RequestId, method: &str, params: Option<Value>) -> FallbackFuture;

    /// A host notification that is not MCPL's (`notifications/initialized`,
    /// `notifications/cancelled`, `notifications/progress`, …).
    fn notification(&self, method: &str, params: Option<Value>);
}

fn erase<P, R, F, Fut>(f: F) -> Handler<P, R>
where
    F: Fn(Session, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult<R>> + Send + 'static,
{
    Arc::new(move |s, p| Box::pin(f(s, p)))
}

/// MCPL protocol version written into the manifest.
pub const MCPL_VERSION: &str = "0.5";

/// Why a [`ServerBuilder`] could not build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A feature set's `uses` is invalid (§6.2); the host would disable it anyway.
    #[error("feature set {name:?}: {reason}")]
    InvalidFeatureSet {
        /// The set.
        name: String,
        /// Why.
        reason: String,
    },
    /// A custom method name collides with an MCPL/MCP method or a removed surface.
    #[error("custom method {0:?} collides with a protocol method or a removed surface")]
    ReservedMethod(String),
    /// The manifest could not be digested (§17.2).
    #[error("manifest refused: {0}")]
    Manifest(String),
    /// Tools were registered with the builder and an [`McpFallback`] set: `tools/list` has
    /// one source, so the fallback's tools would hide the builder's or the other way round.
    #[error("tools registered with the builder and an MCP fallback: `tools/list` has one source; register the tools in one of them")]
    ToolsWithFallback,
}

/// Why a typed sender refused or failed. The refusals happen before anything is written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendError {
    /// The host did not advertise MCPL: this is an MCP-only connection (§3.2).
    #[error("MCPL is not active on this connection (the host did not advertise it, §3.2)")]
    McpOnly,
    /// No `featureSets/update` Request has been received yet (§5.3).
    #[error("not ready: no policy Request received yet (§5.3); {capability} is unavailable")]
    NotReady {
        /// The capability the send needs.
        capability: Capability,
    },
    /// The grant does not include the capability (§5.4).
    #[error("capability {capability} is not granted (§5.4)")]
    CapabilityDenied {
        /// The missing capability.
        capability: Capability,
    },
    /// The `featureSet` is not declared in the manifest (§6.5).
    #[error("feature set {0:?} is not declared")]
    UnknownFeatureSet(String),
    /// The `featureSet` is declared but unavailable (disabled, not selected, or denied).
    #[error("feature set {name:?} is not available ({reason})")]
    FeatureSetUnavailable {
        /// The set.
        name: String,
        /// `disabled`, `not_selected`, `capability_denied` or `invalid_uses`.
        reason: &'static str,
    },
    /// The `featureSet`'s `uses` does not declare a capability the send exercises: a host
    /// rejects that use (§6.4 rule 2), so it is refused before the wire.
    #[error("feature set {name:?} does not declare {capability} in its uses (§6.4)")]
    Undeclared {
        /// The set.
        name: String,
        /// The capability exercised.
        capability: Capability,
    },
    /// A tag the producer may not emit: un-namespaced, malformed, or in a reserved namespace
    /// outside the core vocabulary (§16.1, §16.2).
    #[error(transparent)]
    InvalidTag(#[from] crate::tags::TagError),
    /// Content that is not App. B.1 blocks (a typed block built with neither or both of its
    /// forms, say): a host rejects it, so it is refused before the wire. Names where.
    #[error("content is not App. B.1 content blocks: {0}")]
    InvalidContent(String),
    /// A caller-set `timestamp` that is not ISO 8601 (§9.2): a host rejects the event, so it
    /// is refused before the wire.
    #[error("timestamp {timestamp:?} is not ISO 8601 (§9.2): {defect}")]
    InvalidTimestamp {
        /// The timestamp as given.
        timestamp: String,
        /// What is wrong with it.
        defect: &'static str,
    },
    /// [`Session::send_mcp_request`] or [`Session::send_mcp_notification`] was given a method
    /// of MCPL (or of the MCP handshake MCPL rides on, or a removed surface): those go only
    /// through the typed, gated senders.
    #[error(
        "{0:?} is not a plain MCP method; MCPL messages go through the session's gated senders"
    )]
    NotMcp(String),
    /// The message went out and failed (closed, timeout, remote error …).
    #[error(transparent)]
    Peer(#[from] PeerError),
}

impl SendError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            SendError::McpOnly => "mcp_only",
            SendError::NotReady { .. } => "not_ready",
            SendError::CapabilityDenied { .. } => "capability_denied",
            SendError::UnknownFeatureSet(_) => "unknown_feature_set",
            SendError::FeatureSetUnavailable { .. } => "feature_set_unavailable",
            SendError::Undeclared { .. } => "declaration_mismatch",
            SendError::InvalidTag(_) => "invalid_tag",
            SendError::InvalidTimestamp { .. } => "invalid_timestamp",
            SendError::InvalidContent(_) => "invalid_content",
            SendError::NotMcp(_) => "not_mcp",
            SendError::Peer(_) => "peer",
        }
    }

    /// The capability this refusal names, if any.
    pub fn capability(&self) -> Option<Capability> {
        match self {
            SendError::NotReady { capability }
            | SendError::CapabilityDenied { capability }
            | SendError::Undeclared { capability, .. } => Some(*capability),
            _ => None,
        }
    }
}

/// A non-fatal observation of the session (a host defect, a dropped injection …), also
/// logged with `tracing`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDiagnostic {
    /// Stable code, e.g. `injection_dropped`, `lifecycle_second_terminal`.
    pub code: &'static str,
    /// Human-readable detail.
    pub detail: String,
}

/// The negotiated state of one connection as the application sees it: published on every
/// change through [`Session::grant_changes`].
#[derive(Debug, Clone, PartialEq)]
pub struct GrantState {
    /// `initialize` has been answered (before that, whether the host speaks MCPL is unknown).
    pub initialized: bool,
    /// The host advertised MCPL (false: MCP-only, §3.2, or not yet initialized).
    pub mcpl: bool,
    /// The policy Request has been applied (§5.3).
    pub ready: bool,
    /// The current grant (empty until ready).
    pub grant: Grant,
    /// Each declared feature set's derived status (§6.4).
    pub feature_sets: BTreeMap<String, FeatureSetStatus>,
}

impl GrantState {
    fn inert() -> Self {
        GrantState {
            initialized: false,
            mcpl: false,
            ready: false,
            grant: Grant::none(),
            feature_sets: BTreeMap::new(),
        }
    }

    /// Whether behaviour needing `c` may run now (MCPL active, ready, granted).
    pub fn granted(&self, c: Capability) -> bool {
        self.mcpl && self.ready && self.grant.allows(c)
    }

    /// What both states allow: readiness, grant and available feature sets only where both
    /// have them (a set `other` does not know is unavailable).
    fn meet(&self, other: &GrantState) -> GrantState {
        let feature_sets = self
            .feature_sets
            .iter()
            .map(|(name, status)| {
                let status = match (status, other.feature_sets.get(name)) {
                    (FeatureSetStatus::Available, Some(o)) => *o,
                    (FeatureSetStatus::Available, None) => FeatureSetStatus::Unavailable {
                        reason: UnavailableReason::CapabilityDenied,
                        missing: CapabilitySet::EMPTY,
                    },
                    (unavailable, _) => *unavailable,
                };
                (name.clone(), status)
            })
            .collect();
        GrantState {
            initialized: self.initialized && other.initialized,
            mcpl: self.mcpl && other.mcpl,
            ready: self.ready && other.ready,
            grant: self.grant.intersect(other.grant.capabilities()),
            feature_sets,
        }
    }

    /// Whether the named feature set is available now.
    pub fn feature_available(&self, name: &str) -> bool {
        self.mcpl
            && self.ready
            && self
                .feature_sets
                .get(name)
                .is_some_and(FeatureSetStatus::is_available)
    }

    fn check(&self, req: Requirement) -> Result<(), SendError> {
        if self.initialized && !self.mcpl {
            return Err(SendError::McpOnly);
        }
        let grant = if self.ready {
            self.grant
        } else {
            Grant::none()
        };
        match grant.check(req) {
            Ok(()) => Ok(()),
            Err(d) if !self.ready => Err(SendError::NotReady {
                capability: d.capability,
            }),
            Err(d) => Err(SendError::CapabilityDenied {
                capability: d.capability,
            }),
        }
    }

    fn check_feature_set(&self, name: &str) -> Result<(), SendError> {
        match self.feature_sets.get(name) {
            None => Err(SendError::UnknownFeatureSet(name.to_owned())),
            Some(FeatureSetStatus::Available) => Ok(()),
            Some(FeatureSetStatus::Unavailable { reason, .. }) => {
                Err(SendError::FeatureSetUnavailable {
                    name: name.to_owned(),
                    reason: reason.code(),
                })
            }
        }
    }
}

/// One `push/event` to send: [`Session::push_event`] stamps `featureSet`, `eventId` and
/// `timestamp`.
#[derive(Debug, Clone, PartialEq)]
pub struct PushEvent {
    /// The declaring feature set (must be available).
    pub feature_set: String,
    /// `payload.content`.
    pub content: Content,
    /// Caller-chosen `eventId`; `None` derives a stable one (see the module docs).
    pub event_id: Option<String>,
    /// `tags` (§16): descriptive claims.
    pub tags: Option<Vec<String>>,
    /// `origin`: provenance claims.
    pub origin: Option<Map<String, Value>>,
    /// `timestamp` (ISO 8601); `None` uses the current UTC time.
    pub timestamp: Option<String>,
}

impl PushEvent {
    /// A text event for `feature_set`.
    pub fn text(feature_set: impl Into<String>, text: impl Into<String>) -> Self {
        PushEvent {
            feature_set: feature_set.into(),
            content: Content::Blocks(vec![ContentBlock::text(text)]),
            event_id: None,
            tags: None,
            origin: None,
            timestamp: None,
        }
    }

    /// Sets the `eventId` (reuse it when retrying, §9.4).
    pub fn event_id(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }

    /// Sets the `tags`.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = Some(tags.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the `origin`.
    pub fn origin(mut self, origin: Map<String, Value>) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Sets the `timestamp`.
    pub fn timestamp(mut self, ts: impl Into<String>) -> Self {
        self.timestamp = Some(ts.into());
        self
    }

    /// The `eventId` this event is sent with: the caller's, or one derived
    /// deterministically from `featureSet`, `payload`, `tags` and `origin` (§9.4).
    pub fn stable_event_id(&self) -> String {
        if let Some(id) = &self.event_id {
            return id.clone();
        }
        let basis = json!({
            "featureSet": self.feature_set,
            "content": self.content,
            "tags": self.tags,
            "origin": self.origin,
        });
        let digest = crate::manifest::value_digest(&basis);
        let tail = digest.strip_prefix("sha256:").unwrap_or(&digest);
        format!("evt_{}", tail.chars().take(32).collect::<String>())
    }
}

/// The current UTC time as an RFC 3339 / ISO 8601 string (`YYYY-MM-DDTHH:MM:SSZ`), for
/// §9.2 push event timestamps; see [`crate::protocol::push::timestamp`].
pub fn utc_now_iso8601() -> String {
    crate::protocol::push::timestamp(SystemTime::now())
}

// ---------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------

struct ToolEntry {
    tool: Tool,
    handler: Handler<ToolsCallParams, ToolsCallResult>,
}

#[derive(Default)]
struct Handlers {
    tools: Vec<ToolEntry>,
    before_inference: Option<(Option<String>, HookHandler)>,
    turn_start: Option<Callback<TurnStart>>,
    turn_end: Option<Callback<TurnEnd>>,
    outgoing_chunk: Option<Callback<OutgoingChunkParams>>,
    outgoing_complete: Option<Callback<OutgoingCompleteParams>>,
    channels_open: Option<Handler<OpenParams, OpenResult>>,
    channels_close: Option<Handler<CloseParams, CloseResult>>,
    channels_publish: Option<Handler<PublishParams, PublishResult>>,
    channels_list: Option<Handler<(), ListResult>>,
    channels_acknowledge: Option<Handler<AcknowledgeParams, ()>>,
    channels_typing: Option<Handler<TypingParams, ()>>,
    rollback: Option<Handler<RollbackParams, RollbackResult>>,
    custom: HashMap<String, CustomHandler>,
    ready: Option<ReadyHandler>,
    fallback: Option<FallbackFactory>,
}

/// Builds a [`Server`]: identity, manifest (feature sets, advertisement, tag ontology), MCP
/// capabilities, and handlers. Every handler is optional; a method without one is answered
/// `-32601`.
pub struct ServerBuilder {
    info: Implementation,
    instructions: Option<String>,
    advertised: CapabilitySet,
    feature_sets: BTreeMap<String, FeatureSetDeclaration>,
    tag_ontologies: Vec<(String, Value)>,
    manifest_extra: Map<String, Value>,
    mcp_capabilities: Map<String, Value>,
    handlers: Handlers,
    lifecycle: LifecycleConfig,
    peer_config: PeerConfig,
    required: Option<(CapabilitySet, Fallback)>,
}

impl ServerBuilder {
    /// A builder for a server called `name` at `version` (MCP `serverInfo`).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        ServerBuilder {
            info: Implementation {
                name: name.into(),
                version: version.into(),
                extra: Map::new(),
            },
            instructions: None,
            advertised: CapabilitySet::EMPTY,
            feature_sets: BTreeMap::new(),
            tag_ontologies: Vec::new(),
            manifest_extra: Map::new(),
            mcp_capabilities: Map::new(),
            handlers: Handlers::default(),
            lifecycle: LifecycleConfig::default(),
            peer_config: PeerConfig::default(),
            required: None,
        }
    }

    /// Capabilities without which this server refuses the policy (§6.7): a policy Request
    /// whose grant lacks any of them is answered `accepted: false` with `fallback`, and the
    /// server does what it names — [`Fallback::McpOnly`] turns MCPL off for the connection
    /// (tools keep working, §3.2), [`Fallback::Close`] closes it after the answer. The
    /// refusal is testimony only; the host must not widen in response.
    pub fn require(mut self, capabilities: &[Capability], fallback: Fallback) -> Self {
        self.required = Some((capabilities.iter().copied().collect(), fallback));
        self
    }

    /// MCP `instructions`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Declares a feature set (§6.1) with its exact `uses`. Every path in `uses` is also
    /// advertised (§5.1), except `tools`, which is advertised by registering tools.
    pub fn feature_set(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        uses: &[Capability],
    ) -> Self {
        for c in uses {
            self.advertised.insert(*c);
        }
        self.feature_sets
            .insert(name.into(), FeatureSetDeclaration::new(description, uses));
        self
    }

    /// Declares a feature set from a full declaration (e.g. with a per-set `tagOntology`).
    pub fn feature_set_declaration(
        mut self,
        name: impl Into<String>,
        declaration: FeatureSetDeclaration,
    ) -> Self {
        if let Ok(uses) = declaration.validated_uses() {
            self.advertised = self.advertised.union(uses);
        }
        self.feature_sets.insert(name.into(), declaration);
        self
    }

    /// Advertises capabilities beyond those the feature sets use.
    pub fn advertise(mut self, capabilities: &[Capability]) -> Self {
        for c in capabilities {
            self.advertised.insert(*c);
        }
        self
    }

    /// The `tagOntology` of a declared feature set (§16.4: producers advertise the tags
    /// they emit on their feature-set declaration). Ignored for an undeclared set.
    pub fn tag_ontology(mut self, feature_set: impl Into<String>, ontology: Value) -> Self {
        self.tag_ontologies.push((feature_set.into(), ontology));
        self
    }

    /// Any other manifest member (vendor extension), kept verbatim.
    pub fn manifest_member(mut self, key: impl Into<String>, value: Value) -> Self {
        self.manifest_extra.insert(key.into(), value);
        self
    }

    /// An MCP capability passed through to `initialize` (e.g. `resources`, `prompts`).
    pub fn mcp_capability(mut self, key: impl Into<String>, value: Value) -> Self {
        self.mcp_capabilities.insert(key.into(), value);
        self
    }

    /// The safety timeout and memory of the built-in lifecycle consumer (§10.5).
    pub fn lifecycle_config(mut self, config: LifecycleConfig) -> Self {
        self.lifecycle = config;
        self
    }

    /// The connection limits and timeouts used by [`Server::start`].
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.peer_config = config;
        self
    }

    /// Registers an MCP tool (listed by `tools/list`, run by `tools/call`).
    pub fn tool<F, Fut>(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Session, ToolsCallParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ToolsCallResult>> + Send + 'static,
    {
        self.handlers.tools.push(ToolEntry {
            tool: Tool {
                name: name.into(),
                description: Some(description.into()),
                input_schema: Some(input_schema),
                extra: Map::new(),
            },
            handler: erase(handler),
        });
        self
    }

    /// Handles `context/beforeInference` (§10.1) for `feature_set` (stamped on the response
    /// when the handler leaves `featureSet` empty, §6.5). The handler gets a read-only
    /// [`GrantState`], never a [`Session`]: hooks must not send (§10.7, §14.5). Injections at
    /// positions not granted when the response goes out are dropped with a diagnostic.
    pub fn on_before_inference<F, Fut>(mut self, feature_set: impl Into<String>, handler: F) -> Self
    where
        F: Fn(GrantState, BeforeInferenceParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<BeforeInferenceResult>> + Send + 'static,
    {
        let h: HookHandler = Arc::new(move |g, p| Box::pin(handler(g, p)));
        self.handlers.before_inference = Some((Some(feature_set.into()), h));
        self
    }

    /// Called once per `inferenceId` when its turn starts (§10.5). A plain callback with no
    /// session: delivery is never a side effect of a lifecycle event (§14.5). Keep it quick.
    pub fn on_turn_start(mut self, f: impl Fn(&TurnStart) + Send + Sync + 'static) -> Self {
        self.handlers.turn_start = Some(Arc::new(f));
        self
    }

    /// Called at most once per `inferenceId` when its turn ends: terminal phase, safety
    /// timeout, or connection end (§10.5). No session, for the same reason as
    /// [`Self::on_turn_start`].
    pub fn on_turn_end(mut self, f: impl Fn(&TurnEnd) + Send + Sync + 'static) -> Self {
        self.handlers.turn_end = Some(Arc::new(f));
        self
    }

    /// Observes `channels/outgoing/chunk` (§14.3): advisory text, never delivered content.
    /// No session: delivery happens only via `channels/publish` (§14.5).
    pub fn on_outgoing_chunk(
        mut self,
        f: impl Fn(&OutgoingChunkParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.outgoing_chunk = Some(Arc::new(f));
        self
    }

    /// Observes `channels/outgoing/complete` (§14.3), e.g. to settle a rendered message.
    /// No session: it is not a delivery instruction (§14.5).
    pub fn on_outgoing_complete(
        mut self,
        f: impl Fn(&OutgoingCompleteParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.outgoing_complete = Some(Arc::new(f));
        self
    }

    /// Handles `channels/open` (needs `channels.lifecycle`).
    pub fn on_channels_open<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, OpenParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<OpenResult>> + Send + 'static,
    {
        self.handlers.channels_open = Some(erase(f));
        self
    }

    /// Handles `channels/close` (needs `channels.lifecycle`).
    pub fn on_channels_close<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, CloseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<CloseResult>> + Send + 'static,
    {
        self.handlers.channels_close = Some(erase(f));
        self
    }

    /// Handles `channels/publish` (needs `channels.publish`): the only delivery path (§14.5).
    /// For the Notification form the result is discarded.
    pub fn on_channels_publish<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, PublishParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<PublishResult>> + Send + 'static,
    {
        self.handlers.channels_publish = Some(erase(f));
        self
    }

    /// Handles an inbound `channels/list` (needs `channels.register`). Without a handler it
    /// is answered with the channels the host accepted ([`Session::channels`]).
    pub fn on_channels_list<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ListResult>> + Send + 'static,
    {
        self.handlers.channels_list = Some(Arc::new(move |s, ()| Box::pin(f(s))));
        self
    }

    /// Handles `channels/acknowledge` (needs `channels.acknowledge`).
    pub fn on_channels_acknowledge<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, AcknowledgeParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<()>> + Send + 'static,
    {
        self.handlers.channels_acknowledge = Some(erase(f));
        self
    }

    /// Handles `channels/typing` (needs `channels.typing`).
    pub fn on_channels_typing<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, TypingParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<()>> + Send + 'static,
    {
        self.handlers.channels_typing = Some(erase(f));
        self
    }

    /// Handles `state/rollback` (§8.5; needs `tools`).
    pub fn on_rollback<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, RollbackParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<RollbackResult>> + Send + 'static,
    {
        self.handlers.rollback = Some(erase(f));
        self
    }

    /// Called after every accepted policy Request, once its receipt has been written: the
    /// place to register channels or send a first event under the new grant.
    pub fn on_ready<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.handlers.ready = Some(Arc::new(move |s| Box::pin(f(s))));
        self
    }

    /// A custom (non-MCPL) request method, unprivileged. Names of protocol methods and of the
    /// removed surfaces are refused by [`Self::build`].
    pub fn method<F, Fut>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Session, Option<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<Value>> + Send + 'static,
    {
        self.handlers.custom.insert(name.into(), erase(f));
        self
    }

    /// Hands the MCP methods this builder does not know to another MCP implementation: `f`
    /// is called once per connection, with its [`Session`], before anything is read, and the
    /// [`McpFallback`] it returns serves that connection (see the module docs for what it
    /// gets). The session keeps everything MCPL: the manifest, the §5.3 policy exchange and
    /// gating, `tools/call` refused until `tools` is granted under an MCPL host, every MCPL
    /// method. Registering tools as well is refused by [`Self::build`]
    /// ([`BuildError::ToolsWithFallback`]).
    pub fn mcp_fallback<F>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Arc<dyn McpFallback> + Send + Sync + 'static,
    {
        self.handlers.fallback = Some(Arc::new(f));
        self
    }

    /// The manifest this builder describes (without `revision`).
    pub fn manifest(&self) -> Value {
        let mut m = Map::new();
        m.insert("version".into(), Value::from(MCPL_VERSION));
        if let Value::Object(tree) = advertisement_to_value(self.advertised) {
            m.extend(tree);
        }
        let mut sets = FeatureSets {
            sets: self.feature_sets.clone(),
        };
        for (name, o) in &self.tag_ontologies {
            if let Some(d) = sets.sets.get_mut(name) {
                d.extra.insert("tagOntology".into(), o.clone());
            }
        }
        m.insert("featureSets".into(), sets.to_value());
        for (k, v) in &self.manifest_extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }

    /// Validates and builds the server (and its [`ManifestTracker`]).
    pub fn build(self) -> Result<Server, BuildError> {
        for (name, d) in &self.feature_sets {
            if let Err(e) = d.validated_uses() {
                return Err(BuildError::InvalidFeatureSet {
                    name: name.clone(),
                    reason: e.to_string(),
                });
            }
        }
        for name in self.handlers.custom.keys() {
            if is_reserved(name) {
                return Err(BuildError::ReservedMethod(name.clone()));
            }
        }
        if self.handlers.fallback.is_some() && !self.handlers.tools.is_empty() {
            return Err(BuildError::ToolsWithFallback);
        }
        let tracker = ManifestTracker::new(self.manifest())
            .map_err(|e| BuildError::Manifest(e.to_string()))?;
        let mut mcp = self.mcp_capabilities;
        if !self.handlers.tools.is_empty() || self.advertised.contains(Capability::Tools) {
            mcp.entry("tools".to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        Ok(Server {
            inner: Arc::new(ServerInner {
                info: self.info,
                instructions: self.instructions,
                mcp_capabilities: mcp,
                tracker: Arc::new(tracker),
                handlers: self.handlers,
                lifecycle: self.lifecycle,
                peer_config: self.peer_config,
                required: self.required,
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

struct ServerInner {
    info: Implementation,
    instructions: Option<String>,
    mcp_capabilities: Map<String, Value>,
    tracker: Arc<ManifestTracker>,
    handlers: Handlers,
    lifecycle: LifecycleConfig,
    peer_config: PeerConfig,
    required: Option<(CapabilitySet, Fallback)>,
}

/// A built server: cheap to clone, serves any number of connections, all sharing one
/// [`ManifestTracker`].
#[derive(Clone)]
pub struct Server {
    inner: Arc<ServerInner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.info.name)
            .field("tracker", &self.inner.tracker)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts a builder (same as [`ServerBuilder::new`]).
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder::new(name, version)
    }

    /// The manifest tracker: change the manifest with
    /// [`ManifestTracker::set_manifest`] / [`ManifestTracker::transaction`] and every
    /// attached connection is told with one `mcpl/manifestChanged` (§17.3).
    pub fn tracker(&self) -> &Arc<ManifestTracker> {
        &self.inner.tracker
    }

    /// Starts serving one connection over `transport` (must run inside a tokio runtime) and
    /// returns its [`Session`]; the session runs until the connection ends.
    pub fn start(&self, transport: Transport) -> Session {
        let (peer, incoming) = Peer::new(transport, self.inner.peer_config.clone());
        let (grant_tx, _) = watch::channel(GrantState::inert());
        let (diag_tx, _) = broadcast::channel(256);
        let (announce_tx, mut announce_rx) = mpsc::unbounded_channel::<ManifestChanged>();
        let decls = FeatureSets::from_mcpl(self.inner.tracker.snapshot().manifest()).0;
        let conn = Arc::new(Conn {
            server: self.inner.clone(),
            peer: peer.clone(),
            state: Mutex::new(ConnState {
                phase: Phase::New,
                mcpl: false,
                policy: ServerPolicyState::new(decls),
                lifecycle: LifecycleTracker::new(self.inner.lifecycle),
                tracker_id: None,
                channels: BTreeMap::new(),
                held: None,
            }),
            grant_tx,
            diag_tx,
            announce_tx,
            streams: Mutex::new(HashMap::new()),
            channel_ops: tokio::sync::Mutex::new(()),
            fallback: Mutex::new(None),
        });
        let forward_peer = peer;
        tokio::spawn(async move {
            while let Some(change) = announce_rx.recv().await {
                if let Err(e) = forward_peer
                    .notify_raw(ManifestChanged::METHOD, serde_json::to_value(&change).ok())
                    .await
                {
                    tracing::debug!("mcpl/manifestChanged not sent: {e}");
                    break;
                }
            }
        });
        let session = Session { conn: conn.clone() };
        if let Some(factory) = &self.inner.handlers.fallback {
            *lock(&conn.fallback) = Some(factory(session.clone()));
        }
        tokio::spawn(run(conn, incoming));
        session
    }

    /// Serves one connection over `transport` until it ends and everything owed has been
    /// written ([`Peer::finished`]), and returns why it ended.
    pub async fn serve(&self, transport: Transport) -> CloseReason {
        self.start(transport).conn.peer.finished().await
    }
}

// ---------------------------------------------------------------------------------------
// Connection state
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    New,
    Initialized,
}

struct ConnState {
    phase: Phase,
    mcpl: bool,
    policy: ServerPolicyState,
    lifecycle: LifecycleTracker,
    tracker_id: Option<ConnectionId>,
    /// The channels the host accepted from this connection's `channels/register` and
    /// `channels/changed` (§14.5 itemized results), by id.
    channels: BTreeMap<String, ChannelDescriptor>,
    /// The state in force before a policy Request whose receipt is not yet on the wire:
    /// what is published meets it, so a narrowing reaches senders at once and a widening
    /// (readiness included) only once the receipt is written ahead of them (§5.3, §6.7).
    held: Option<GrantState>,
}

type StreamTx = mpsc::UnboundedSender<InferenceChunkParams>;

struct Conn {
    server: Arc<ServerInner>,
    peer: Peer,
    state: Mutex<ConnState>,
    grant_tx: watch::Sender<GrantState>,
    diag_tx: broadcast::Sender<SessionDiagnostic>,
    announce_tx: mpsc::UnboundedSender<ManifestChanged>,
    streams: Mutex<HashMap<RequestId, StreamTx>>,
    /// Held across each `channels/register` / `channels/changed` exchange, so they go out
    /// one at a time and their results are applied in the order the host applied them. An
    /// unanswered change holds the next one until it is answered or times out
    /// (`PeerConfig::request_timeout`).
    channel_ops: tokio::sync::Mutex<()>,
    /// The connection's [`McpFallback`], if the server has one; dropped when the connection
    /// ends (it holds a [`Session`], so keeping it would keep the connection alive).
    fallback: Mutex<Option<Arc<dyn McpFallback>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state whole, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    fn diagnostic(&self, code: &'static str, detail: impl Into<String>) {
        let detail = detail.into();
        tracing::warn!(code, "{detail}");
        let _ = self.diag_tx.send(SessionDiagnostic { code, detail });
    }

    fn publish(&self, st: &ConnState) {
        let state = Self::state_of(st);
        let state = match &st.held {
            Some(held) => state.meet(held),
            None => state,
        };
        self.grant_tx.send_replace(state);
    }

    fn state_of(st: &ConnState) -> GrantState {
        GrantState {
            initialized: st.phase != Phase::New,
            mcpl: st.mcpl,
            ready: st.policy.is_ready(),
            grant: *st.policy.grant(),
            feature_sets: st.policy.statuses(),
        }
    }

    fn grant_state(&self) -> GrantState {
        self.grant_tx.borrow().clone()
    }

    fn fallback(&self) -> Option<Arc<dyn McpFallback>> {
        lock(&self.fallback).clone()
    }

    /// Declares the changed manifest's feature sets on the live session. Reading: a set the
    /// change adds is derived like any other under the grant in force (and the host's
    /// `enabled` allowlist, when it sent one), so it may be available at once. The grant is
    /// the authority and a set only names granted capabilities it uses (§6.4), so no
    /// capability is widened (§17.5: additions never auto-grant); a host that has not yet
    /// fetched the change refuses a use of the new name (-32003), which fails closed.
    fn on_manifest_changed(&self, change: ManifestChanged) {
        let decls = FeatureSets::from_mcpl(self.server.tracker.snapshot().manifest()).0;
        {
            let mut st = lock(&self.state);
            st.policy.set_declarations(decls);
            self.publish(&st);
        }
        let _ = self.announce_tx.send(change);
    }

    fn deliver_turn(&self, ev: TurnEvent) {
        let h = &self.server.handlers;
        match ev {
            TurnEvent::Started(s) => {
                if let Some(f) = &h.turn_start {
                    f(&s)
                }
            }
            TurnEvent::Ended(e) => {
                if let Some(f) = &h.turn_end {
                    f(&e)
                }
            }
        }
    }

    fn expire_turns(&self) {
        let now = tokio::time::Instant::now().into_std();
        let ends = lock(&self.state).lifecycle.expire(now);
        for e in ends {
            self.deliver_turn(TurnEvent::Ended(e));
        }
    }

    fn next_deadline(&self) -> Option<tokio::time::Instant> {
        lock(&self.state)
            .lifecycle
            .next_deadline()
            .map(tokio::time::Instant::from_std)
    }

    fn finish(&self) {
        let now = tokio::time::Instant::now().into_std();
        let (ends, id) = {
            let mut st = lock(&self.state);
            (st.lifecycle.close_all(now), st.tracker_id.take())
        };
        if let Some(id) = id {
            self.server.tracker.detach(id);
        }
        drop(lock(&self.fallback).take());
        for e in ends {
            self.deliver_turn(TurnEvent::Ended(e));
        }
        lock(&self.streams).clear();
    }
}

async fn run(conn: Arc<Conn>, mut incoming: crate::peer::Incoming) {
    loop {
        let deadline = conn.next_deadline();
        let msg = tokio::select! {
            m = incoming.recv() => m,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            } => {
                conn.expire_turns();
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            IncomingMessage::Request(req) => on_request(&conn, req).await,
            IncomingMessage::Notification(n) => on_notification(&conn, n),
        }
    }
    conn.finish();
}

/// The surfaces removed from MCPL: answered `-32601`, never handed to a custom handler or an
/// [`McpFallback`].
const REMOVED: &[&str] = &[
    "context/afterInference",
    "featureSets/changed",
    "scope/elevate",
];

/// Whether `method` is MCPL's (or of the handshake MCPL rides on) or a removed surface: no
/// custom handler may take it, no fallback gets it, and the plain MCP senders refuse it.
fn is_reserved(method: &str) -> bool {
    method_info(method).is_some()
        || policy::method_requirement(method, None).is_some()
        || REMOVED.contains(&method)
}

/// Whether `method` is one of the MCP pieces handled regardless of MCPL.
fn is_mcp_method(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "notifications/initialized" | "ping" | "tools/list" | "tools/call"
    )
}

/// Decides whether an inbound MCPL method may run now: `Ok` or the error to answer.
fn gate(conn: &Conn, method: &str, params: Option<&Value>) -> Result<(), ErrorObject> {
    let Some(req) = policy::method_requirement(method, params) else {
        return Err(ErrorObject::method_not_found(method));
    };
    if let Some(info) = method_info(method) {
        if info.direction == Direction::ServerToHost {
            return Err(ErrorObject::method_not_found(method));
        }
    }
    let st = lock(&conn.state);
    if !st.mcpl {
        // MCP-only (§3.2): MCPL methods do not exist on this connection; the MCP methods
        // run ungated.
        if is_mcp_method(method) {
            return Ok(());
        }
        return Err(ErrorObject::method_not_found(method));
    }
    let grant = if st.policy.is_ready() {
        *st.policy.grant()
    } else {
        Grant::none()
    };
    grant.check(req).map_err(|d| d.to_error())
}

async fn respond<R: Serialize>(req: IncomingRequest, out: HandlerResult<R>) {
    let out = out.and_then(|r| {
        serde_json::to_value(r)
            .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}")))
    });
    if let Err(e) = req.finish(out).await {
        tracing::debug!("response not sent: {e}");
    }
}

fn spawn_handler<P, R>(conn: &Arc<Conn>, req: IncomingRequest, handler: Option<Handler<P, R>>)
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
{
    let Some(handler) = handler else {
        let m = req.method().to_owned();
        tokio::spawn(
            async move { respond::<()>(req, Err(ErrorObject::method_not_found(&m))).await },
        );
        return;
    };
    let params = match req.params::<P>() {
        Ok(p) => p,
        Err(e) => {
            tokio::spawn(async move { respond::<()>(req, Err(e)).await });
            return;
        }
    };
    let session = Session { conn: conn.clone() };
    tokio::spawn(async move {
        let out = guarded(handler(session, params)).await;
        respond(req, out).await;
    });
}

/// Runs a handler future; a panic becomes a `-32603` answer instead of a dropped request.
async fn guarded<R>(fut: BoxFut<HandlerResult<R>>) -> HandlerResult<R> {
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(out) => out,
        Err(_) => Err(ErrorObject::internal("the handler panicked")),
    }
}

/// Hands `req` to the fallback now (in wire order) and answers with what it returns.
fn spawn_fallback(req: IncomingRequest, f: Arc<dyn McpFallback>) {
    let r = req.request();
    let fut = f.request(&r.id, &r.method, r.params.clone());
    tokio::spawn(async move {
        let out = guarded(fut).await;
        respond(req, out).await;
    });
}

async fn on_request(conn: &Arc<Conn>, req: IncomingRequest) {
    let method = req.method().to_owned();
    let phase = lock(&conn.state).phase;
    match method.as_str() {
        "initialize" => return on_initialize(conn, req).await,
        "ping" => return respond(req, Ok(json!({}))).await,
        _ => {}
    }
    if phase == Phase::New {
        let e = ErrorObject::invalid_request(format!("{method} before initialize"));
        return respond::<()>(req, Err(e)).await;
    }
    if method_info(&method).is_some_and(|i| i.kind == Kind::Notification) {
        let e = ErrorObject::invalid_request(format!("{method} is a notification"));
        return respond::<()>(req, Err(e)).await;
    }
    let h = &conn.server.handlers;
    if policy::method_requirement(&method, None).is_none() {
        // Not a protocol method: a custom one, the fallback's, or unknown (removed surfaces
        // included, which no fallback gets).
        let handler = h.custom.get(&method).cloned();
        if handler.is_none() && !REMOVED.contains(&method.as_str()) {
            if let Some(f) = conn.fallback() {
                return spawn_fallback(req, f);
            }
        }
        return spawn_handler(conn, req, handler);
    }
    if let Err(e) = gate(conn, &method, req.request().params.as_ref()) {
        return respond::<()>(req, Err(e)).await;
    }
    if matches!(method.as_str(), "tools/list" | "tools/call") {
        // Gated above (§5.4); the fallback is the only source of tools when there is one.
        if let Some(f) = conn.fallback() {
            return spawn_fallback(req, f);
        }
    }
    match method.as_str() {
        "tools/list" => {
            let tools = h.tools.iter().map(|t| t.tool.clone()).collect();
            let result = ToolsListResult {
                tools,
                next_cursor: None,
                extra: Map::new(),
            };
            respond(req, Ok(result)).await
        }
        "tools/call" => {
            let name = req
                .request()
                .params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let handler = name.and_then(|n| {
                h.tools
                    .iter()
                    .find(|t| t.tool.name == n)
                    .map(|t| t.handler.clone())
            });
            if handler.is_none() {
                let e = ErrorObject::invalid_params("unknown tool");
                return respond::<()>(req, Err(e)).await;
            }
            spawn_handler(conn, req, handler)
        }
        "featureSets/update" => on_policy_request(conn, req).await,
        "mcpl/manifest" => {
            let m = conn.server.tracker.manifest_result();
            respond(req, Ok(m)).await
        }
        "context/beforeInference" => on_before_inference(conn, req),
        "state/rollback" => spawn_handler(conn, req, h.rollback.clone()),
        "channels/open" => spawn_handler(conn, req, h.channels_open.clone()),
        "channels/close" => spawn_handler(conn, req, h.channels_close.clone()),
        "channels/publish" => spawn_handler(conn, req, h.channels_publish.clone()),
        "channels/list" => {
            let Some(f) = h.channels_list.clone() else {
                // No handler: the channels the host accepted from this connection (§14.3).
                let channels = lock(&conn.state).channels.values().cloned().collect();
                let list = ListResult {
                    channels,
                    extra: Map::new(),
                };
                return respond(req, Ok(list)).await;
            };
            let g: Handler<crate::protocol::EmptyObject, ListResult> =
                Arc::new(move |s, _| f(s, ()));
            spawn_handler(conn, req, Some(g))
        }
        "channels/acknowledge" => {
            spawn_handler(conn, req, empty_result(h.channels_acknowledge.clone()))
        }
        "channels/typing" => spawn_handler(conn, req, empty_result(h.channels_typing.clone())),
        _ => respond::<()>(req, Err(ErrorObject::method_not_found(&method))).await,
    }
}

fn empty_result<P: Send + 'static>(h: Option<Handler<P, ()>>) -> Option<Handler<P, Value>> {
    h.map(|f| {
        let g: Handler<P, Value> = Arc::new(move |s, p| {
            let fut = f(s, p);
            Box::pin(async move { fut.await.map(|()| json!({})) })
        });
        g
    })
}

async fn on_initialize(conn: &Arc<Conn>, req: IncomingRequest) {
    if lock(&conn.state).phase != Phase::New {
        let e = ErrorObject::invalid_request("already initialized");
        return respond::<()>(req, Err(e)).await;
    }
    // Read leniently: only `protocolVersion` is required; the host speaks MCPL iff
    // `capabilities.experimental.mcpl` is an object (anything else is MCP-only, §3.2).
    let raw = req.request().params.clone().unwrap_or(Value::Null);
    let Some(protocol_version) = raw.get("protocolVersion").and_then(Value::as_str) else {
        let e = ErrorObject::invalid_params("initialize: protocolVersion must be a string");
        return respond::<()>(req, Err(e)).await;
    };
    let protocol_version = protocol_version.to_owned();
    let mcpl = raw
        .get("capabilities")
        .and_then(|c| c.get("experimental"))
        .and_then(|e| e.get("mcpl"))
        .is_some_and(Value::is_object);
    let snapshot: Arc<ManifestSnapshot> = conn.server.tracker.snapshot();
    let manifest = match snapshot.manifest() {
        Value::Object(m) => Manifest(m.clone()),
        _ => Manifest::default(),
    };
    let result = match conn.fallback() {
        Some(f) => match fallback_initialize(conn, f, req.id(), raw, manifest).await {
            Ok(result) => result,
            Err(e) => return respond::<()>(req, Err(e)).await,
        },
        None => {
            let mut extra = conn.server.mcp_capabilities.clone();
            let tools = extra.remove("tools");
            let result = InitializeResult {
                protocol_version,
                capabilities: Capabilities {
                    tools,
                    experimental: Some(Experimental {
                        mcpl: Some(manifest),
                        extra: Map::new(),
                    }),
                    extra,
                },
                server_info: Some(conn.server.info.clone()),
                instructions: conn.server.instructions.clone(),
                extra: Map::new(),
            };
            match serde_json::to_value(result) {
                Ok(v) => v,
                Err(e) => {
                    let e = ErrorObject::internal(format!("cannot encode result: {e}"));
                    return respond::<()>(req, Err(e)).await;
                }
            }
        }
    };
    {
        let mut st = lock(&conn.state);
        st.phase = Phase::Initialized;
        st.mcpl = mcpl;
        st.policy
            .set_declarations(FeatureSets::from_mcpl(snapshot.manifest()).0);
        conn.publish(&st);
    }
    respond(req, Ok(result)).await;
    if mcpl {
        // Attach with exactly the snapshot sent, so nothing is re-announced (§17.10).
        let weak: Weak<Conn> = Arc::downgrade(conn);
        let sink = move |change: ManifestChanged| {
            if let Some(c) = weak.upgrade() {
                c.on_manifest_changed(change);
            }
        };
        let id = conn
            .server
            .tracker
            .attach_snapshot(Arc::new(sink), snapshot);
        lock(&conn.state).tracker_id = Some(id);
    }
}

/// The fallback's `initialize` result with the manifest under
/// `capabilities.experimental.mcpl` and the builder's MCP capabilities where it has none.
/// Reading: the fallback gets the connection's request timeout to answer (without one it is
/// waited for); a result that is not an object, or whose `capabilities` is not one, is the
/// fallback's defect and answered `-32603`, leaving the connection uninitialized.
async fn fallback_initialize(
    conn: &Conn,
    f: Arc<dyn McpFallback>,
    id: &RequestId,
    params: Value,
    manifest: Manifest,
) -> Result<Value, ErrorObject> {
    let fut = guarded(f.initialize(id, params));
    let out = match conn.server.peer_config.request_timeout {
        Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| {
            ErrorObject::internal(format!(
                "the MCP fallback did not answer initialize within {t:?}"
            ))
        })?,
        None => fut.await,
    }?;
    let Value::Object(mut result) = out else {
        return Err(ErrorObject::internal(
            "the MCP fallback's initialize result is not an object",
        ));
    };
    let caps = result
        .entry("capabilities")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(caps) = caps else {
        return Err(ErrorObject::internal(
            "the MCP fallback's initialize result has a non-object `capabilities`",
        ));
    };
    for (k, v) in &conn.server.mcp_capabilities {
        caps.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let experimental = caps
        .entry("experimental")
        .or_insert_with(|| Value::Object(Map::new()));
    if !experimental.is_object() {
        conn.diagnostic(
            "fallback_experimental_replaced",
            "the MCP fallback's capabilities.experimental is not an object; replaced",
        );
        *experimental = Value::Object(Map::new());
    }
    if let Value::Object(experimental) = experimental {
        if experimental.contains_key("mcpl") {
            conn.diagnostic(
                "fallback_mcpl_replaced",
                "the MCP fallback's initialize result carried experimental.mcpl; replaced by the session's manifest",
            );
        }
        experimental.insert("mcpl".into(), Value::Object(manifest.0));
    }
    Ok(Value::Object(result))
}

/// `content` as the wire will carry it passes App. B.1 ([`content_defect`]): the typed
/// blocks have public fields, so a block can be built with neither or both media forms.
fn checked_content(content: &Content, at: &str) -> Result<(), SendError> {
    let v = serde_json::to_value(content).map_err(|e| SendError::InvalidContent(e.to_string()))?;
    match crate::protocol::content::content_defect(Some(&v), at, true) {
        Some(defect) => Err(SendError::InvalidContent(defect)),
        None => Ok(()),
    }
}

/// Every §11.2 message's content passes [`checked_content`].
fn inference_content(params: &InferenceRequestParams) -> Result<(), SendError> {
    for (i, m) in params.messages.iter().enumerate() {
        checked_content(&m.content, &format!("messages[{i}].content"))?;
    }
    Ok(())
}

/// A producer's tags as sent (§16.1): each one namespaced, well-formed and outside the
/// reserved namespaces unless core vocabulary; a set, so repeats are dropped (first kept).
fn producer_tags(tags: Option<Vec<String>>) -> Result<Option<Vec<String>>, SendError> {
    let Some(tags) = tags else { return Ok(None) };
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        crate::tags::Tag::parse_producer(&t)?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(Some(out))
}

/// Lifts [`ConnState::held`] when dropped (the receipt, or the error, has been written, or
/// the exchange was abandoned) and publishes the full state.
struct Release<'a>(&'a Conn);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.held = None;
        self.0.publish(&st);
    }
}

async fn on_policy_request(conn: &Arc<Conn>, req: IncomingRequest) {
    let params = req.request().params.clone().unwrap_or(Value::Null);
    let outcome = {
        let mut st = lock(&conn.state);
        st.held = Some(Conn::state_of(&st));
        let r = st.policy.apply(Form::Request, &params);
        conn.publish(&st);
        r
    };
    let release = Release(conn);
    match outcome {
        Err(e) => {
            conn.diagnostic("policy_malformed", e.to_string());
            respond::<()>(req, Err(e.to_error())).await
        }
        Ok(outcome) => {
            for d in &outcome.diagnostics {
                conn.diagnostic(d.code, d.detail.clone());
            }
            let receipt: Receipt = match outcome.receipt {
                Some(r) => r,
                None => lock(&conn.state).policy.receipt(),
            };
            let refusal = conn.server.required.and_then(|(required, fallback)| {
                let granted = lock(&conn.state).policy.grant().capabilities();
                let missing = required.difference(granted);
                (!missing.is_empty()).then_some((missing, fallback))
            });
            if let Some((missing, fallback)) = refusal {
                let refused = Receipt::refused(
                    fallback,
                    missing,
                    Some("required capabilities are not granted".into()),
                );
                {
                    // A refused policy is not operated under (§6.7): nothing is granted and
                    // the session is not ready, whatever it held before. With mcp-only, do
                    // what the receipt says: no MCPL on this connection from now on, so no
                    // more manifest announcements either (§17.10: nothing to fetch them).
                    let mut st = lock(&conn.state);
                    st.policy = ServerPolicyState::new(st.policy.declarations().clone());
                    if fallback == Fallback::McpOnly {
                        st.mcpl = false;
                        if let Some(id) = st.tracker_id.take() {
                            conn.server.tracker.detach(id);
                        }
                    }
                    conn.publish(&st);
                }
                respond(req, Ok(refused.to_value())).await;
                if fallback == Fallback::Close {
                    conn.peer.close();
                }
                return;
            }
            respond(req, Ok(receipt.to_value())).await;
            // The receipt is ahead of anything sent from now on: the widening may apply.
            drop(release);
            if let Some(ready) = conn.server.handlers.ready.clone() {
                let session = Session { conn: conn.clone() };
                tokio::spawn(ready(session));
            }
        }
    }
}

fn on_before_inference(conn: &Arc<Conn>, req: IncomingRequest) {
    let Some((default_set, handler)) = conn.server.handlers.before_inference.clone() else {
        let m = req.method().to_owned();
        tokio::spawn(
            async move { respond::<()>(req, Err(ErrorObject::method_not_found(&m))).await },
        );
        return;
    };
    let params: BeforeInferenceParams = match req.params() {
        Ok(p) => p,
        Err(e) => {
            tokio::spawn(async move { respond::<()>(req, Err(e)).await });
            return;
        }
    };
    let conn = conn.clone();
    tokio::spawn(async move {
        // The hook belongs to its feature set: while that set is unavailable (disabled, not
        // selected, its uses not granted) the server does not run it, so the turn's content
        // is not read under a set the receipt reported off (§6.7), and answers no injections.
        let state = conn.grant_state();
        if let Some(set) = default_set
            .as_deref()
            .filter(|s| !state.feature_available(s))
        {
            tracing::debug!(
                feature_set = set,
                "hook not run: its feature set is unavailable"
            );
            respond(req, Ok(BeforeInferenceResult::default())).await;
            return;
        }
        let out = guarded(handler(state, params)).await;
        let out = out.map(|r| filter_injections(&conn, r, default_set.as_deref()));
        respond(req, out).await;
    });
}

/// Drops injections the session must not send: all of them when the response's feature set
/// is undeclared or unavailable, and each one whose position is not granted *now* (§5.4,
/// §10.8 — the host authorizes at response-receipt, so the server checks as late as it can).
fn filter_injections(
    conn: &Conn,
    mut r: BeforeInferenceResult,
    default_set: Option<&str>,
) -> BeforeInferenceResult {
    if r.feature_set.is_none() {
        r.feature_set = default_set.map(str::to_owned);
    }
    let state = conn.grant_state();
    if r.context_injections.is_empty() {
        return r;
    }
    let set_ok = match &r.feature_set {
        Some(name) => state.check_feature_set(name),
        None => Err(SendError::UnknownFeatureSet(String::new())),
    };
    if let Err(e) = set_ok {
        conn.diagnostic(
            "injection_dropped",
            format!("dropped {} injection(s): {e}", r.context_injections.len()),
        );
        r.context_injections.clear();
        // Nothing is claimed under a set the session may not use.
        r.feature_set = None;
        return r;
    }
    let decls = lock(&conn.state).policy.declarations().clone();
    let name = r.feature_set.clone().unwrap_or_default();
    r.context_injections.retain(|inj| {
        let Some(c) = inj.position.capability().filter(|c| state.granted(*c)) else {
            conn.diagnostic(
                "injection_dropped",
                format!(
                    "dropped an injection at position {:?}: its inject leaf is not granted (§5.4)",
                    inj.position
                ),
            );
            return false;
        };
        // A host rejects a use the set's `uses` does not declare (§6.4 rule 2).
        if policy::declaration_mismatch(&decls, &name, Requirement::One(c)).is_some() {
            conn.diagnostic(
                "injection_dropped",
                format!(
                    "dropped an injection at position {:?}: feature set {name:?} does not declare {} (§6.4)",
                    inj.position,
                    c.as_str()
                ),
            );
            return false;
        }
        true
    });
    r
}

fn on_notification(conn: &Arc<Conn>, n: Notification) {
    let method = n.method.as_str();
    let fallback = conn.fallback();
    match method {
        "notifications/initialized" => {
            if let Some(f) = fallback {
                f.notification(method, n.params);
            }
            return;
        }
        "featureSets/update" => {
            if !lock(&conn.state).mcpl {
                conn.diagnostic(
                    "unknown_notification",
                    "featureSets/update on an MCP-only connection",
                );
                return;
            }
            let params = n.params.unwrap_or(Value::Null);
            let r = {
                let mut st = lock(&conn.state);
                let r = st.policy.apply(Form::Notification, &params);
                conn.publish(&st);
                r
            };
            match r {
                Ok(o) => {
                    for d in o.diagnostics {
                        conn.diagnostic(d.code, d.detail);
                    }
                }
                Err(e) => conn.diagnostic(
                    "policy_malformed",
                    format!("malformed featureSets/update notification; grant cleared: {e}"),
                ),
            }
            return;
        }
        _ => {}
    }
    if policy::method_requirement(method, None).is_none() {
        if let Some(f) = fallback.filter(|_| !REMOVED.contains(&method)) {
            return f.notification(method, n.params);
        }
        // Nothing received vanishes: MCP notifications this session does not act on
        // (`notifications/cancelled`, `…/message` …) are reported like unknown ones.
        let code = if method.starts_with("notifications/") {
            "ignored_notification"
        } else {
            "unknown_notification"
        };
        conn.diagnostic(code, format!("ignored notification {method}"));
        return;
    }
    if let Err(e) = gate(conn, method, n.params.as_ref()) {
        conn.diagnostic(
            "notification_denied",
            format!("ignored {method}: {}", e.message),
        );
        return;
    }
    let h = &conn.server.handlers;
    match method {
        "inference/lifecycle" => {
            let p: LifecycleParams = match crate::jsonrpc::parse_params(n.params) {
                Ok(p) => p,
                Err(e) => {
                    return conn
                        .diagnostic("invalid_notification", format!("{method}: {}", e.message))
                }
            };
            let now = tokio::time::Instant::now().into_std();
            let obs = lock(&conn.state).lifecycle.observe(&p, now);
            for d in &obs.diagnostics {
                conn.diagnostic(d.code(), d.to_string());
            }
            if let Some(ev) = obs.event {
                conn.deliver_turn(ev);
            }
        }
        "inference/chunk" => {
            let p: InferenceChunkParams = match crate::jsonrpc::parse_params(n.params) {
                Ok(p) => p,
                Err(e) => {
                    return conn
                        .diagnostic("invalid_notification", format!("{method}: {}", e.message))
                }
            };
            let tx = lock(&conn.streams).get(&p.request_id).cloned();
            match tx {
                Some(tx) => {
                    let _ = tx.send(p);
                }
                None => conn.diagnostic(
                    "unknown_inference_chunk",
                    format!(
                        "inference/chunk for request {} that is not streaming",
                        p.request_id
                    ),
                ),
            }
        }
        "channels/outgoing/chunk" => {
            match crate::jsonrpc::parse_params::<OutgoingChunkParams>(n.params) {
                Ok(p) => {
                    if let Some(f) = &h.outgoing_chunk {
                        f(&p)
                    }
                }
                Err(e) => {
                    conn.diagnostic("invalid_notification", format!("{method}: {}", e.message))
                }
            }
        }
        "channels/outgoing/complete" => {
            match crate::jsonrpc::parse_params::<OutgoingCompleteParams>(n.params) {
                Ok(p) => {
                    if let Some(f) = &h.outgoing_complete {
                        f(&p)
                    }
                }
                Err(e) => {
                    conn.diagnostic("invalid_notification", format!("{method}: {}", e.message))
                }
            }
        }
        "channels/publish" => {
            spawn_notification(conn, method, n.params, h.channels_publish.clone())
        }
        "channels/acknowledge" => {
            spawn_notification(conn, method, n.params, h.channels_acknowledge.clone())
        }
        "channels/typing" => spawn_notification(conn, method, n.params, h.channels_typing.clone()),
        _ => conn.diagnostic(
            "unexpected_notification",
            format!("{method} is not a host-to-server notification"),
        ),
    }
}

fn spawn_notification<P, R>(
    conn: &Arc<Conn>,
    method: &str,
    params: Option<Value>,
    handler: Option<Handler<P, R>>,
) where
    P: DeserializeOwned + Send + 'static,
    R: Send + 'static,
{
    let Some(handler) = handler else {
        conn.diagnostic("unhandled_notification", format!("no handler for {method}"));
        return;
    };
    let p: P = match crate::jsonrpc::parse_params(params) {
        Ok(p) => p,
        Err(e) => {
            return conn.diagnostic("invalid_notification", format!("{method}: {}", e.message))
        }
    };
    let session = Session { conn: conn.clone() };
    let method = method.to_owned();
    tokio::spawn(async move {
        if let Err(e) = handler(session, p).await {
            tracing::warn!("{method} handler failed: {}", e.message);
        }
    });
}

// ---------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------

/// One live connection, from the server's side: read the negotiated state, send what the
/// grant allows. Cheap to clone.
#[derive(Clone)]
pub struct Session {
    conn: Arc<Conn>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("state", &*self.conn.grant_tx.borrow())
            .finish_non_exhaustive()
    }
}

/// A streaming `inference/request` (§11.4): chunks as they arrive, then the final result.
#[derive(Debug)]
pub struct InferenceStream {
    chunks: mpsc::UnboundedReceiver<InferenceChunkParams>,
    result: Option<oneshot::Receiver<Result<InferenceResult, SendError>>>,
    done: Option<Result<InferenceResult, SendError>>,
    conn: Weak<Conn>,
    id: Arc<Mutex<Option<RequestId>>>,
}

impl InferenceStream {
    /// The next chunk; `None` once the final response has arrived (then call
    /// [`Self::finish`]).
    pub async fn next_chunk(&mut self) -> Option<InferenceChunkParams> {
        if self.done.is_some() {
            return self.chunks.try_recv().ok();
        }
        let rx = self.result.as_mut()?;
        tokio::select! {
            biased;
            c = self.chunks.recv() => c,
            r = rx => {
                self.result = None;
                self.done = Some(r.unwrap_or(Err(SendError::Peer(PeerError::Closed(CloseReason::Dropped)))));
                self.chunks.try_recv().ok()
            }
        }
    }

    /// The final `inference/request` result (skipping any unread chunks).
    pub async fn finish(mut self) -> Result<InferenceResult, SendError> {
        if let Some(done) = self.done.take() {
            return done;
        }
        match self.result.take() {
            Some(rx) => rx.await.unwrap_or(Err(SendError::Peer(PeerError::Closed(
                CloseReason::Dropped,
            )))),
            None => Err(SendError::Peer(PeerError::Closed(CloseReason::Dropped))),
        }
    }
}

impl Drop for InferenceStream {
    fn drop(&mut self) {
        if let (Some(conn), Some(id)) = (self.conn.upgrade(), lock(&self.id).take()) {
            lock(&conn.streams).remove(&id);
        }
    }
}

impl Session {
    /// The negotiated state now.
    pub fn grant_state(&self) -> GrantState {
        self.conn.grant_state()
    }

    /// Whether behaviour needing `c` may run now (MCPL active, policy received, granted).
    pub fn granted(&self, c: Capability) -> bool {
        self.conn.grant_tx.borrow().granted(c)
    }

    /// Whether the named feature set is available now.
    pub fn feature_available(&self, name: &str) -> bool {
        self.conn.grant_tx.borrow().feature_available(name)
    }

    /// Whether the host advertised MCPL (false: MCP-only, §3.2).
    pub fn is_mcpl(&self) -> bool {
        self.conn.grant_tx.borrow().mcpl
    }

    /// A `watch` receiver that sees every change of the negotiated state.
    pub fn grant_changes(&self) -> watch::Receiver<GrantState> {
        self.conn.grant_tx.subscribe()
    }

    /// The session's diagnostics from now on (host defects, dropped injections …).
    pub fn diagnostics(&self) -> broadcast::Receiver<SessionDiagnostic> {
        self.conn.diag_tx.subscribe()
    }

    /// The manifest tracker shared by the server's connections.
    pub fn tracker(&self) -> &Arc<ManifestTracker> {
        &self.conn.server.tracker
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.conn.peer.close();
    }

    /// Waits until the connection has ended.
    pub async fn closed(&self) -> CloseReason {
        self.conn.peer.closed().await
    }

    fn authorize(&self, req: Requirement, feature_set: Option<&str>) -> Result<(), SendError> {
        let state = self.grant_state();
        state.check(req)?;
        if let Some(name) = feature_set {
            state.check_feature_set(name)?;
            let decls = lock(&self.conn.state).policy.declarations().clone();
            let missing = policy::declaration_mismatch(&decls, name, req);
            if let Some(capability) = missing.and_then(|m| m.iter().next()) {
                self.conn.diagnostic(
                    "declaration_mismatch",
                    format!(
                        "feature set {name:?} exercises {} without declaring it in uses (§6.4)",
                        capability.as_str()
                    ),
                );
                return Err(SendError::Undeclared {
                    name: name.to_owned(),
                    capability,
                });
            }
        }
        Ok(())
    }

    async fn request<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, SendError> {
        let v = serde_json::to_value(params).map_err(|e| PeerError::Encode {
            method: method.to_owned(),
            reason: e.to_string(),
        })?;
        let out = self.conn.peer.request_raw(method, Some(v)).await?;
        serde_json::from_value(out).map_err(|e| {
            SendError::Peer(PeerError::Decode {
                method: method.to_owned(),
                reason: e.to_string(),
            })
        })
    }

    /// Sends a plain MCP request to the host (`sampling/createMessage`, `roots/list`,
    /// `elicitation/create`, `ping` …) and returns its result; for an [`McpFallback`]. MCP
    /// needs no MCPL grant, so this works on MCP-only connections and before the policy
    /// (§3.2); every MCPL method is refused ([`SendError::NotMcp`]), since those go only
    /// through the gated senders. The connection's request timeout applies.
    pub async fn send_mcp_request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, SendError> {
        if is_reserved(method) && method != "ping" {
            return Err(SendError::NotMcp(method.to_owned()));
        }
        Ok(self.conn.peer.request_raw(method, params).await?)
    }

    /// Sends a plain MCP notification to the host (`notifications/message`,
    /// `notifications/progress`, `notifications/tools/list_changed` …); MCPL methods are
    /// refused as by [`Self::send_mcp_request`].
    pub async fn send_mcp_notification(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), SendError> {
        if is_reserved(method) {
            return Err(SendError::NotMcp(method.to_owned()));
        }
        Ok(self.conn.peer.notify_raw(method, params).await?)
    }

    /// Sends `push/event` (§9): needs `pushEvents` and an available `featureSet`; stamps
    /// `eventId` ([`PushEvent::stable_event_id`]) and `timestamp`.
    pub async fn push_event(&self, event: PushEvent) -> Result<PushEventResult, SendError> {
        self.authorize(
            Requirement::One(Capability::PushEvents),
            Some(&event.feature_set),
        )?;
        checked_content(&event.content, "payload.content")?;
        if let Some(ts) = &event.timestamp {
            if let Some(defect) = crate::protocol::push::timestamp_defect(ts) {
                return Err(SendError::InvalidTimestamp {
                    timestamp: ts.clone(),
                    defect,
                });
            }
        }
        let params = PushEventParams {
            event_id: event.stable_event_id(),
            timestamp: event.timestamp.clone().unwrap_or_else(utc_now_iso8601),
            feature_set: event.feature_set,
            origin: event.origin,
            payload: PushPayload {
                // §9.2: `payload.content` is ContentBlock[]; the string form becomes a block.
                content: Content::Blocks(event.content.to_blocks()),
                extra: Map::new(),
            },
            tags: producer_tags(event.tags)?,
            extra: Map::new(),
        };
        self.request("push/event", &params).await
    }

    /// Sends `channels/register` (§14.3; needs `channels.register`); the host answers per
    /// descriptor (§14.5). Channel changes from one connection go out one at a time.
    pub async fn channels_register(
        &self,
        channels: Vec<ChannelDescriptor>,
    ) -> Result<ItemizedResult, SendError> {
        let _in_order = self.conn.channel_ops.lock().await;
        self.authorize(Requirement::One(Capability::ChannelsRegister), None)?;
        let params = RegisterParams {
            channels,
            extra: Map::new(),
        };
        let result: ItemizedResult = self.request("channels/register", &params).await?;
        self.track_channels(&result, &params.channels, &[], &[]);
        Ok(result)
    }

    /// The channels the host has accepted from this connection (by the itemized results of
    /// [`Self::channels_register`] and [`Self::channels_changed`]); what an inbound
    /// `channels/list` is answered with when no handler is set.
    pub fn channels(&self) -> Vec<ChannelDescriptor> {
        lock(&self.conn.state).channels.values().cloned().collect()
    }

    /// Applies an itemized result the way the host does (§14.5): `removed` ids are dropped,
    /// an accepted descriptor is held (the first one sent under its id), a rejected addition
    /// changes nothing, and a rejected update drops the channel.
    fn track_channels(
        &self,
        result: &ItemizedResult,
        added: &[ChannelDescriptor],
        updated: &[ChannelDescriptor],
        removed: &[String],
    ) {
        let mut st = lock(&self.conn.state);
        for id in removed {
            st.channels.remove(id);
        }
        for item in &result.results {
            let find = |ds: &[ChannelDescriptor]| ds.iter().find(|d| d.id == item.id).cloned();
            if item.accepted {
                // The host applies additions before updates: an id in both ends as updated.
                if let Some(d) = find(updated).or_else(|| find(added)) {
                    st.channels.insert(d.id.clone(), d);
                }
            } else if find(added).is_none() && find(updated).is_some() {
                st.channels.remove(&item.id);
            }
        }
    }

    /// Sends `channels/changed` in the Request form (§14.5; needs `channels.register`), after
    /// any earlier channel change of this connection has been answered.
    pub async fn channels_changed(
        &self,
        change: ChangedParams,
    ) -> Result<ItemizedResult, SendError> {
        let _in_order = self.conn.channel_ops.lock().await;
        self.authorize(Requirement::One(Capability::ChannelsRegister), None)?;
        let result: ItemizedResult = self.request("channels/changed", &change).await?;
        self.track_channels(
            &result,
            change.added.as_deref().unwrap_or(&[]),
            change.updated.as_deref().unwrap_or(&[]),
            change.removed.as_deref().unwrap_or(&[]),
        );
        Ok(result)
    }

    /// Sends `channels/incoming` (§14.3; needs `channels.incoming`).
    pub async fn channels_incoming(
        &self,
        messages: Vec<ChannelMessage>,
    ) -> Result<IncomingResult, SendError> {
        self.authorize(Requirement::One(Capability::ChannelsIncoming), None)?;
        let mut messages = messages;
        for (i, m) in messages.iter_mut().enumerate() {
            checked_content(&m.content, &format!("messages[{i}].content"))?;
            m.tags = producer_tags(m.tags.take())?;
        }
        let params = IncomingParams {
            messages,
            extra: Map::new(),
        };
        self.request("channels/incoming", &params).await
    }

    /// Sends a non-streaming `inference/request` (§11; needs `inferenceRequest` and an
    /// available `featureSet`). `stream` is forced off; use [`Self::inference_stream`].
    pub async fn inference_request(
        &self,
        mut params: InferenceRequestParams,
    ) -> Result<InferenceResult, SendError> {
        params.stream = None;
        self.authorize(
            Requirement::One(Capability::InferenceRequest),
            Some(&params.feature_set),
        )?;
        inference_content(&params)?;
        self.request("inference/request", &params).await
    }

    /// Sends a streaming `inference/request` (§11.4; needs `inferenceRequest` and
    /// `inferenceRequest.streaming`): chunks arrive on the returned stream.
    pub async fn inference_stream(
        &self,
        mut params: InferenceRequestParams,
    ) -> Result<InferenceStream, SendError> {
        params.stream = Some(true);
        self.authorize(policy::STREAMING_INFERENCE, Some(&params.feature_set))?;
        inference_content(&params)?;
        let value = serde_json::to_value(&params).map_err(|e| PeerError::Encode {
            method: "inference/request".into(),
            reason: e.to_string(),
        })?;
        let (chunk_tx, chunk_rx) = mpsc::unbounded_channel();
        let (res_tx, res_rx) = oneshot::channel();
        let (id_tx, id_rx) = oneshot::channel::<RequestId>();
        let id_slot = Arc::new(Mutex::new(None));
        let conn = self.conn.clone();
        let slot = id_slot.clone();
        tokio::spawn(async move {
            let streams_conn = conn.clone();
            let out = conn
                .peer
                .request_raw_with_id("inference/request", Some(value), move |id| {
                    lock(&streams_conn.streams).insert(id.clone(), chunk_tx);
                    *lock(&slot) = Some(id.clone());
                    let _ = id_tx.send(id.clone());
                })
                .await;
            let out = out.map_err(SendError::from).and_then(|v| {
                serde_json::from_value(v).map_err(|e| {
                    SendError::Peer(PeerError::Decode {
                        method: "inference/request".into(),
                        reason: e.to_string(),
                    })
                })
            });
            let _ = res_tx.send(out);
        });
        // Wait until the id is registered (or the request failed before one was assigned),
        // so no chunk can arrive unrouted.
        let _ = id_rx.await;
        Ok(InferenceStream {
            chunks: chunk_rx,
            result: Some(res_rx),
            done: None,
            conn: Arc::downgrade(&self.conn),
            id: id_slot,
        })
    }

    /// Sends `model/info` (§12; needs `modelInfo`).
    pub async fn model_info(&self) -> Result<ModelInfo, SendError> {
        self.authorize(Requirement::One(Capability::ModelInfo), None)?;
        self.request("model/info", &json!({})).await
    }
}

/// How long the built-in lifecycle consumer waits for a terminal by default.
pub const DEFAULT_TURN_TIMEOUT: Duration = crate::lifecycle::DEFAULT_SAFETY_TIMEOUT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s9_4_derived_event_id_ignores_timestamp_but_not_content() {
        let a = PushEvent::text("s", "one");
        assert_eq!(
            a.stable_event_id(),
            a.clone()
                .timestamp("2001-01-01T00:00:00Z")
                .stable_event_id()
        );
        assert_ne!(
            a.stable_event_id(),
            PushEvent::text("s", "two").stable_event_id()
        );
        assert_ne!(
            a.stable_event_id(),
            PushEvent::text("t", "one").stable_event_id()
        );
        assert_eq!(a.clone().event_id("mine").stable_event_id(), "mine");
        assert!(a.stable_event_id().starts_with("evt_"));
    }

    #[test]
    fn s5_3_inert_state_refuses_as_not_ready() {
        let g = GrantState::inert();
        assert!(!g.granted(Capability::PushEvents));
        assert_eq!(
            g.check(Requirement::One(Capability::PushEvents)),
            Err(SendError::NotReady {
                capability: Capability::PushEvents
            })
        );
    }
}
