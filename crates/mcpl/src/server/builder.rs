//! [`ServerBuilder`]: identity, manifest, tools and handlers.

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::conn::ServerInner;
use super::conn_state::StateSpec;
use super::tools::ToolSpec;
use super::*;
use crate::capability::{advertisement_to_value, Capability, CapabilitySet};
use crate::lifecycle::{LifecycleConfig, TurnEnd, TurnStart};
use crate::manifest::ManifestTracker;
use crate::peer::PeerConfig;
use crate::policy::{Fallback, FeatureSetDeclaration, FeatureSets};
use crate::protocol::channels::{
    AcknowledgeParams, CloseParams, CloseResult, ListResult, OpenParams, OpenResult,
    OutgoingChunkParams, OutgoingCompleteParams, PublishParams, PublishResult, TypingParams,
};
use crate::protocol::handshake::{Implementation, ToolsCallParams, ToolsCallResult};
use crate::protocol::hooks::{BeforeInferenceParams, BeforeInferenceResult};
use crate::protocol::state::{RollbackParams, RollbackResult};

#[derive(Default)]
pub(super) struct Handlers {
    pub(super) tools: Vec<ToolSpec>,
    pub(super) before_inference: Option<(Option<String>, HookHandler)>,
    pub(super) turn_start: Option<ConnCallback<TurnStart>>,
    pub(super) turn_end: Option<ConnCallback<TurnEnd>>,
    pub(super) outgoing_chunk: Option<Callback<OutgoingChunkParams>>,
    pub(super) outgoing_complete: Option<Callback<OutgoingCompleteParams>>,
    pub(super) channels_open: Option<Handler<OpenParams, OpenResult>>,
    pub(super) channels_close: Option<Handler<CloseParams, CloseResult>>,
    pub(super) channels_publish: Option<Handler<PublishParams, PublishResult>>,
    pub(super) channels_list: Option<Handler<(), ListResult>>,
    pub(super) channels_acknowledge: Option<Handler<AcknowledgeParams, ()>>,
    pub(super) channels_typing: Option<Handler<TypingParams, ()>>,
    pub(super) rollback: Option<Handler<RollbackParams, RollbackResult>>,
    pub(super) custom: HashMap<String, CustomHandler>,
    pub(super) ready: Option<ReadyHandler>,
    pub(super) first_ready: Option<ReadyHandler>,
    pub(super) fallback: Option<FallbackFactory>,
    pub(super) connection_state: Option<StateSpec>,
}

/// Builds a [`Server`]: identity, manifest (feature sets, advertisement, tag ontology), MCP
/// capabilities, and handlers. Every handler is optional; a method without one is answered
/// `-32601`.
pub struct ServerBuilder {
    pub(super) info: Implementation,
    pub(super) instructions: Option<String>,
    pub(super) advertised: CapabilitySet,
    pub(super) feature_sets: BTreeMap<String, FeatureSetDeclaration>,
    pub(super) tag_ontologies: Vec<(String, Value)>,
    pub(super) manifest_extra: Map<String, Value>,
    pub(super) mcp_capabilities: Map<String, Value>,
    pub(super) handlers: Handlers,
    pub(super) lifecycle: LifecycleConfig,
    pub(super) peer_config: PeerConfig,
    pub(super) required: Option<(CapabilitySet, Fallback)>,
    /// Slots registered a second time, in call order: [`Self::build`] refuses the first
    /// ([`BuildError::DuplicateRegistration`]) instead of letting the later call silently
    /// replace the earlier one.
    pub(super) duplicates: Vec<String>,
    /// The registrations that read the connection state, with the type each reads:
    /// [`Self::build`] refuses one whose type is not the one [`Self::connection_state`]
    /// registers ([`BuildError::ConnectionStateType`]).
    pub(super) state_users: Vec<(&'static str, TypeId, &'static str)>,
}

/// Fills a single-handler slot, recording `slot` when it was already filled.
fn fill<T>(place: &mut Option<T>, value: T, duplicates: &mut Vec<String>, slot: &str) {
    if place.replace(value).is_some() {
        duplicates.push(slot.to_owned());
    }
}

impl ServerBuilder {
    /// Puts `value` in the handler slot `slot` picks, remembering a second registration.
    pub(super) fn fill_slot<T>(
        &mut self,
        slot: impl FnOnce(&mut Handlers) -> &mut Option<T>,
        value: T,
        name: &str,
    ) {
        fill(slot(&mut self.handlers), value, &mut self.duplicates, name);
    }

    /// A builder for a server called `name` at `version` (MCP `serverInfo`). [`Self::build`]
    /// refuses either one blank, empty or whitespace only ([`BuildError::BlankName`]).
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
            duplicates: Vec::new(),
            state_users: Vec::new(),
        }
    }

    /// Capabilities without which this server refuses the policy (§6.7): a policy Request
    /// whose grant lacks any of them is answered `accepted: false` with `fallback`, and the
    /// server does what it names — [`Fallback::McpOnly`] turns MCPL off for the connection
    /// (tools keep working, §3.2), [`Fallback::Close`] closes it after the answer. The
    /// refusal is testimony only; the host must not widen in response. [`Self::build`]
    /// refuses a required path the server does not advertise ([`BuildError::Manifest`]): no
    /// host can grant it (§5.4), so every connection would refuse its policy.
    pub fn require(mut self, capabilities: &[Capability], fallback: Fallback) -> Self {
        self.required = Some((capabilities.iter().copied().collect(), fallback));
        self
    }

    /// MCP `instructions`; with an [`Self::mcp_fallback`] they win over the fallback's.
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
        self.declare(name.into(), FeatureSetDeclaration::new(description, uses));
        self
    }

    fn declare(&mut self, name: String, declaration: FeatureSetDeclaration) {
        if self.feature_sets.contains_key(&name) {
            self.duplicates.push(format!("feature set {name:?}"));
        }
        self.feature_sets.insert(name, declaration);
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
        self.declare(name.into(), declaration);
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
    /// they emit on their feature-set declaration). [`Self::build`] refuses one for a set
    /// the builder does not declare ([`BuildError::UndeclaredFeatureSet`]), a second one
    /// for the same set ([`BuildError::DuplicateRegistration`]), and one a host would read
    /// only in part ([`BuildError::Manifest`] naming the part: not an object, a `coreTags`
    /// entry outside §16.2, a reserved namespace, …), as it does an ontology a
    /// [`Self::feature_set_declaration`] carries.
    pub fn tag_ontology(mut self, feature_set: impl Into<String>, ontology: Value) -> Self {
        let feature_set = feature_set.into();
        if self.tag_ontologies.iter().any(|(n, _)| *n == feature_set) {
            self.duplicates
                .push(format!("tag_ontology for feature set {feature_set:?}"));
        }
        self.tag_ontologies.push((feature_set, ontology));
        self
    }

    /// Any other manifest member (vendor extension), kept verbatim. [`Self::build`] refuses
    /// a second one under the same name ([`BuildError::DuplicateRegistration`]) and one named
    /// like a member the builder writes itself (`version`, `revision`, `featureSets`, `tools`
    /// or a §5.1 capability; [`BuildError::Manifest`] names the call to use instead), and a
    /// blank key ([`BuildError::BlankName`]).
    pub fn manifest_member(mut self, key: impl Into<String>, value: Value) -> Self {
        let key = key.into();
        if self.manifest_extra.insert(key.clone(), value).is_some() {
            self.duplicates.push(format!("manifest_member {key:?}"));
        }
        self
    }

    /// An MCP capability passed through to `initialize` (e.g. `resources`, `prompts`).
    /// [`Self::build`] refuses a second one under the same name
    /// ([`BuildError::DuplicateRegistration`]) and a blank key ([`BuildError::BlankName`]).
    /// An `experimental` object is sent with the
    /// session's `mcpl` member added; one that is not an object or names `mcpl` is refused
    /// ([`BuildError::Manifest`]), as is a `tools`, `resources`, `prompts`, `logging` or
    /// `completions` that is no object, or whose `listChanged` or `subscribe` is no boolean.
    /// `tools` is declared for registered tools with `listChanged: true` (changes at runtime
    /// are told); an explicit `"listChanged": false` here is kept, and then the tools do not
    /// change at runtime ([`ToolChangeError::ListChangedFalse`](super::ToolChangeError)).
    /// With an [`Self::mcp_fallback`] the capability declared here wins over the one the
    /// fallback's `initialize` names the same (an `experimental` member by member): it is
    /// the author's explicit statement of what the server declares.
    pub fn mcp_capability(mut self, key: impl Into<String>, value: Value) -> Self {
        let key = key.into();
        if self.mcp_capabilities.insert(key.clone(), value).is_some() {
            self.duplicates.push(format!("mcp_capability {key:?}"));
        }
        self
    }

    /// The safety timeout and memory of the built-in lifecycle consumer (§10.5);
    /// [`Self::build`] refuses values that cannot work ([`LifecycleConfig::defects`]).
    pub fn lifecycle_config(mut self, config: LifecycleConfig) -> Self {
        self.lifecycle = config;
        self
    }

    /// The connection limits and timeouts used by [`Server::start`]; [`Self::build`] refuses
    /// values that cannot work ([`PeerConfig::defects`]).
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.peer_config = config;
        self
    }

    /// Registers an MCP tool (listed by `tools/list`, run by `tools/call`). A second tool
    /// with the same name is refused by [`Self::build`] ([`BuildError::DuplicateRegistration`]),
    /// and so are a blank (empty or whitespace-only) name and an `input_schema` that is not an object schema with
    /// `"type": "object"` ([`BuildError::ToolSchema`]; `json!({"type": "object"})` for none).
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
        self.handlers
            .tools
            .push(ToolSpec::new(name, description, input_schema, handler));
        self
    }

    /// Registers a typed MCP tool ([`ToolSpec::typed`]): its `inputSchema` is generated from
    /// the argument type `T` (`serde::Deserialize + schemars::JsonSchema`, a struct) and
    /// `handler` gets the parsed arguments; arguments that do not fit are answered `-32602`
    /// naming the field, without calling it. A `T` that is not an object is refused by
    /// [`Self::build`] ([`BuildError::ToolSchema`]).
    pub fn typed_tool<T, F, Fut>(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
        F: Fn(Session, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ToolsCallResult>> + Send + 'static,
    {
        self.handlers
            .tools
            .push(ToolSpec::typed(name, description, handler));
        self
    }

    /// Handles `context/beforeInference` (§10.1) for `feature_set` (stamped on the response
    /// when the handler leaves `featureSet` empty, §6.5). The handler gets a read-only
    /// [`GrantState`], never a [`Session`]: hooks must not send (§10.7, §14.5). Injections at
    /// positions not granted when the response goes out are dropped with a diagnostic.
    ///
    /// A server has one such hook: [`Self::build`] refuses `feature_set` when the builder
    /// does not declare it ([`BuildError::UndeclaredFeatureSet`], closest declared name
    /// first) or its `uses` names no `contextHooks.beforeInference` path
    /// ([`BuildError::InvalidFeatureSet`]: the host would reject what the hook injects,
    /// §6.4 rule 2), and a second `on_before_inference` ([`BuildError::DuplicateRegistration`]).
    pub fn on_before_inference<F, Fut>(mut self, feature_set: impl Into<String>, handler: F) -> Self
    where
        F: Fn(GrantState, BeforeInferenceParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<BeforeInferenceResult>> + Send + 'static,
    {
        let h: HookHandler = Arc::new(move |g, p| Box::pin(handler(g, p)));
        let value = (Some(feature_set.into()), h);
        fill(
            &mut self.handlers.before_inference,
            value,
            &mut self.duplicates,
            "on_before_inference",
        );
        self
    }

    /// Called once per `inferenceId` when its turn starts (§10.5). A plain callback with no
    /// session: delivery is never a side effect of a lifecycle event (§14.5). Keep it quick.
    pub fn on_turn_start(mut self, f: impl Fn(&TurnStart) + Send + Sync + 'static) -> Self {
        fill(
            &mut self.handlers.turn_start,
            Arc::new(move |_: &super::conn::Conn, t: &TurnStart| f(t)),
            &mut self.duplicates,
            "on_turn_start",
        );
        self
    }

    /// [`Self::on_turn_start`] with the connection's state ([`Self::connection_state`],
    /// made on first use): e.g. to count one connection's turns. It fills the same slot as
    /// `on_turn_start`; [`Self::build`] refuses it when `S` is not the registered state type
    /// ([`BuildError::ConnectionStateType`]).
    pub fn on_turn_start_with_state<S: Send + Sync + 'static>(
        mut self,
        f: impl Fn(&S, &TurnStart) + Send + Sync + 'static,
    ) -> Self {
        self.uses_state::<S>("on_turn_start_with_state");
        fill(
            &mut self.handlers.turn_start,
            Arc::new(move |c: &super::conn::Conn, t: &TurnStart| {
                // `None` only once the connection has ended, after its last turn end.
                if let Some(s) = c.state::<S>() {
                    f(&s, t)
                }
            }),
            &mut self.duplicates,
            "on_turn_start",
        );
        self
    }

    /// Called at most once per `inferenceId` when its turn ends: terminal phase, safety
    /// timeout, or connection end (§10.5). No session, for the same reason as
    /// [`Self::on_turn_start`].
    pub fn on_turn_end(mut self, f: impl Fn(&TurnEnd) + Send + Sync + 'static) -> Self {
        fill(
            &mut self.handlers.turn_end,
            Arc::new(move |_: &super::conn::Conn, t: &TurnEnd| f(t)),
            &mut self.duplicates,
            "on_turn_end",
        );
        self
    }

    /// [`Self::on_turn_end`] with the connection's state, as
    /// [`Self::on_turn_start_with_state`]; the turns a closing connection ends are delivered
    /// before its state is dropped.
    pub fn on_turn_end_with_state<S: Send + Sync + 'static>(
        mut self,
        f: impl Fn(&S, &TurnEnd) + Send + Sync + 'static,
    ) -> Self {
        self.uses_state::<S>("on_turn_end_with_state");
        fill(
            &mut self.handlers.turn_end,
            Arc::new(move |c: &super::conn::Conn, t: &TurnEnd| {
                if let Some(s) = c.state::<S>() {
                    f(&s, t)
                }
            }),
            &mut self.duplicates,
            "on_turn_end",
        );
        self
    }

    /// Per-connection state with one shared server: `make` builds a connection's `T` on its
    /// first [`Session::state`] call (an idle connection never pays for it), and the state is
    /// dropped when the connection ends. The manifest tracker, handlers and tools stay shared
    /// by every connection, so a server whose state belongs to one connection needs no
    /// [`Server`] per connection ([`crate::server::listen::serve_each`]). Use interior
    /// mutability (`Mutex`, atomics) in `T` for state the handlers change. One state type
    /// per server (a second registration is [`BuildError::DuplicateRegistration`]); keep
    /// several values in one struct.
    pub fn connection_state<T, F>(mut self, make: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn() -> T + Send + Sync + 'static,
    {
        fill(
            &mut self.handlers.connection_state,
            StateSpec::new(make),
            &mut self.duplicates,
            "connection_state",
        );
        self
    }

    fn uses_state<S: 'static>(&mut self, registration: &'static str) {
        self.state_users
            .push((registration, TypeId::of::<S>(), std::any::type_name::<S>()));
    }

    /// Observes `channels/outgoing/chunk` (§14.3): advisory text, never delivered content.
    /// No session: delivery happens only via `channels/publish` (§14.5). A server granted
    /// `channels.streaming` with neither this nor [`Self::on_outgoing_complete`] has each
    /// stream notification reported (`unhandled_notification`).
    pub fn on_outgoing_chunk(
        mut self,
        f: impl Fn(&OutgoingChunkParams) + Send + Sync + 'static,
    ) -> Self {
        fill(
            &mut self.handlers.outgoing_chunk,
            Arc::new(f),
            &mut self.duplicates,
            "on_outgoing_chunk",
        );
        self
    }

    /// Observes `channels/outgoing/complete` (§14.3), e.g. to settle a rendered message.
    /// No session: it is not a delivery instruction (§14.5).
    pub fn on_outgoing_complete(
        mut self,
        f: impl Fn(&OutgoingCompleteParams) + Send + Sync + 'static,
    ) -> Self {
        fill(
            &mut self.handlers.outgoing_complete,
            Arc::new(f),
            &mut self.duplicates,
            "on_outgoing_complete",
        );
        self
    }

    /// Handles `channels/open` (needs `channels.lifecycle`).
    pub fn on_channels_open<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, OpenParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<OpenResult>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_open,
            erase(f),
            &mut self.duplicates,
            "on_channels_open",
        );
        self
    }

    /// Handles `channels/close` (needs `channels.lifecycle`).
    pub fn on_channels_close<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, CloseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<CloseResult>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_close,
            erase(f),
            &mut self.duplicates,
            "on_channels_close",
        );
        self
    }

    /// Handles `channels/publish` (needs `channels.publish`): the only delivery path (§14.5).
    /// For the Notification form the result is discarded.
    pub fn on_channels_publish<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, PublishParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<PublishResult>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_publish,
            erase(f),
            &mut self.duplicates,
            "on_channels_publish",
        );
        self
    }

    /// Handles an inbound `channels/list` (needs `channels.register`). Without a handler it
    /// is answered with the connection's known channels (§14.3): the ones the host accepted
    /// ([`Session::channels`]), then the ones `on_channels_open` opened and none closed.
    pub fn on_channels_list<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ListResult>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_list,
            Arc::new(move |s, ()| Box::pin(f(s))),
            &mut self.duplicates,
            "on_channels_list",
        );
        self
    }

    /// Handles `channels/acknowledge` (needs `channels.acknowledge`).
    pub fn on_channels_acknowledge<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, AcknowledgeParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<()>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_acknowledge,
            erase(f),
            &mut self.duplicates,
            "on_channels_acknowledge",
        );
        self
    }

    /// Handles `channels/typing` (needs `channels.typing`).
    pub fn on_channels_typing<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, TypingParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<()>> + Send + 'static,
    {
        fill(
            &mut self.handlers.channels_typing,
            erase(f),
            &mut self.duplicates,
            "on_channels_typing",
        );
        self
    }

    /// Handles `state/rollback` (§8.5; needs `tools`).
    pub fn on_rollback<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session, RollbackParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<RollbackResult>> + Send + 'static,
    {
        fill(
            &mut self.handlers.rollback,
            erase(f),
            &mut self.duplicates,
            "on_rollback",
        );
        self
    }

    /// Called after **every** accepted policy Request of a connection (§5.3, §6.7), once its
    /// receipt has been written: the first one, which makes the session ready, and each
    /// later `featureSets/update` Request the server accepts (a host re-granting, widening
    /// or narrowing). Not called for a Notification (it only narrows), for a policy refused
    /// under [`Self::require`], or on an MCP-only connection (no policy exchange, §3.2).
    /// It runs in a task of its own with the connection's [`Session`]; it is the place to
    /// (re)register channels or send a first event under the grant now in force — read it
    /// with [`Session::granted`], as a later call may see a narrower grant. For work to do
    /// once per connection, use [`Self::on_first_ready`].
    ///
    /// Calls on one connection never overlap: Requests accepted while it runs are served
    /// by **one** more call once it returns (it reads the grant in force then, the last
    /// one's or later), so a host flooding policy Requests at a slow handler holds one
    /// task, not one per Request.
    pub fn on_ready<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        fill(
            &mut self.handlers.ready,
            Arc::new(move |s| Box::pin(f(s))),
            &mut self.duplicates,
            "on_ready",
        );
        self
    }

    /// Called once per connection, after its **first** accepted policy Request (when the
    /// session becomes ready, §5.3), once the receipt has been written; never again on that
    /// connection, whatever later Requests grant. On that first Request it runs to
    /// completion before [`Self::on_ready`], in the same task. A connection whose policy is
    /// never accepted never calls it.
    pub fn on_first_ready<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Session) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        fill(
            &mut self.handlers.first_ready,
            Arc::new(move |s| Box::pin(f(s))),
            &mut self.duplicates,
            "on_first_ready",
        );
        self
    }

    /// A custom (non-MCPL) request method, unprivileged; also how a server without an
    /// [`Self::mcp_fallback`] serves an MCP capability it declares with
    /// [`Self::mcp_capability`] (`resources/list`, `prompts/get` …). Without a fallback,
    /// [`Self::build`] refuses a declared MCP capability whose methods have no handler, a
    /// handler for an MCP method whose capability is not declared (a host never calls it),
    /// and one for a method MCP sends only to clients (`sampling/createMessage` …), each
    /// with [`BuildError::Manifest`]. Names of protocol methods and of the
    /// removed surfaces, JSON-RPC's reserved `rpc.` names and a blank name are refused by
    /// [`Self::build`] ([`BuildError::ReservedMethod`]).
    pub fn method<F, Fut>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Session, Option<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<Value>> + Send + 'static,
    {
        let name = name.into();
        if self
            .handlers
            .custom
            .insert(name.clone(), erase(f))
            .is_some()
        {
            self.duplicates.push(format!("method {name:?}"));
        }
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
        fill(
            &mut self.handlers.fallback,
            Arc::new(f),
            &mut self.duplicates,
            "mcp_fallback",
        );
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
    ///
    /// Refuses the mistakes that would otherwise fail silently at run time: a hook or tag
    /// ontology bound to a feature set the builder does not declare
    /// ([`BuildError::UndeclaredFeatureSet`]: it would never run, or never be advertised),
    /// a slot registered twice ([`BuildError::DuplicateRegistration`]: the second would
    /// replace the first; a manifest member, an MCP capability or a set's tag ontology given
    /// twice included), and a `manifest_member` named like a member the builder writes
    /// ([`BuildError::Manifest`]: it would be dropped, or advertise behind the builder's
    /// back), and a handler of a method whose capability the server does not advertise
    /// ([`BuildError::NotAdvertised`]: a conforming host never grants it, §5.4), and a
    /// `peer_config` or `lifecycle_config` with values that cannot work
    /// ([`BuildError::InvalidConfig`], by [`PeerConfig::defects`] and
    /// [`LifecycleConfig::defects`]: a zero `max_message_size` would refuse every message).
    /// Setters of configuration (`instructions`, `require`, `lifecycle_config`,
    /// `peer_config`) keep their last value.
    pub fn build(self) -> Result<Server, BuildError> {
        self.check()?;
        let mut tracker = ManifestTracker::new(self.manifest())
            .map_err(|e| BuildError::Manifest(e.to_string()))?;
        if let Some((Some(set), _)) = &self.handlers.before_inference {
            tracker.bind_feature_set(set.clone(), "on_before_inference");
        }
        let mut mcp = self.mcp_capabilities;
        let derives_tools =
            !self.handlers.tools.is_empty() || self.advertised.contains(Capability::Tools);
        // With a fallback, `mcp` is only what the author declared, which wins over the
        // fallback's `initialize`; the `tools` derived here is added only where the
        // fallback names none (`fallback::fallback_initialize`).
        let fallback_adds_tools =
            derives_tools && self.handlers.fallback.is_some() && !mcp.contains_key("tools");
        if derives_tools && self.handlers.fallback.is_none() {
            mcp.entry("tools".to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        let mut handlers = self.handlers;
        let declares_tools = handlers.fallback.is_none() && mcp.contains_key("tools");
        // MCP's `tools.listChanged` says whether `notifications/tools/list_changed` is sent;
        // a host reading `false` has no reason to list again. The author's `false` is kept
        // (never overridden) and nothing is announced under it; the tools then do not change
        // at runtime (`ToolChangeError::ListChangedFalse`). Unset, the tools may change
        // (`Server::add_tool` …) and each change is told, so `true` is declared.
        let stated = mcp
            .get("tools")
            .and_then(|t| t.get("listChanged"))
            .and_then(Value::as_bool);
        let tells_tool_changes = declares_tools && stated != Some(false);
        if tells_tool_changes {
            if let Some(Value::Object(tools)) = mcp.get_mut("tools") {
                tools.insert("listChanged".into(), Value::Bool(true));
            }
        }
        let tools = super::tools::Tools::new(std::mem::take(&mut handlers.tools));
        Ok(Server {
            inner: Arc::new(ServerInner {
                info: self.info,
                instructions: self.instructions,
                mcp_capabilities: mcp,
                tracker: Arc::new(tracker),
                handlers,
                lifecycle: self.lifecycle,
                peer_config: self.peer_config,
                required: self.required,
                tools,
                declares_tools,
                tells_tool_changes,
                fallback_adds_tools,
                shared_manifest: std::sync::Mutex::new(None),
            }),
        })
    }
}
