//! The server's error and diagnostic types: why a build or a send failed.

use crate::capability::Capability;
use crate::peer::PeerError;
use crate::session::ServerDiagnostic;

/// Why a [`ServerBuilder`](super::ServerBuilder) could not build.
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
    /// A custom method name collides with an MCPL/MCP method or a removed surface, is one
    /// of JSON-RPC's reserved `rpc.` names (JSON-RPC 2.0 §4), or is blank (empty or
    /// whitespace only).
    #[error("custom method {0:?} is not a name a server may take (a protocol method, a surface 0.5 removed, JSON-RPC's reserved `rpc.` prefix, or blank); choose another name (a vendor prefix, e.g. `acme/…`)")]
    ReservedMethod(String),
    /// The manifest could not be digested (§17.2).
    #[error("the manifest the builder made is refused: {0}; fix the builder input it names")]
    Manifest(String),
    /// Tools were registered with the builder and an [`McpFallback`](super::McpFallback) set: `tools/list` has
    /// one source, so the fallback's tools would hide the builder's or the other way round.
    #[error("tools registered with the builder and an MCP fallback: `tools/list` has one source; register the tools in one of them")]
    ToolsWithFallback,
    /// A hook or tag ontology names a feature set the builder does not declare: the hook
    /// would never run (its set is never available, §6.4) and the ontology would never be
    /// advertised (§16.4).
    #[error("{}", undeclared_message(registration, name, declared))]
    UndeclaredFeatureSet {
        /// The builder method that named the set, e.g. `on_before_inference`.
        registration: &'static str,
        /// The name it was given.
        name: String,
        /// The feature sets the builder declares, closest to `name` first.
        declared: Vec<String>,
    },
    /// The same slot was registered twice (a second `on_before_inference`, a second tool or
    /// custom method with the same name, a feature set declared twice …): the later call
    /// would silently replace the earlier one.
    #[error("{slot} is registered twice and the second registration would silently replace the first; register it once (combine the two handlers into one)")]
    DuplicateRegistration {
        /// What was registered twice, e.g. `on_ready` or `tool "remind"`.
        slot: String,
    },
    /// A handler reads connection state of a type the builder does not register with
    /// [`ServerBuilder::connection_state`](super::ServerBuilder::connection_state) (none, or
    /// another type): it would never run.
    #[error("{registration} reads connection state of type {wanted}, but {}", match registered {
        Some(t) => format!("the registered connection_state is {t}"),
        None => "no connection_state is registered; register one with `connection_state`".to_owned(),
    })]
    ConnectionStateType {
        /// The builder method, e.g. `on_turn_start_with_state`.
        registration: &'static str,
        /// The type it reads.
        wanted: &'static str,
        /// The type `connection_state` registered, if any.
        registered: Option<&'static str>,
    },
    /// A handler for a host → server method whose capability the server does not advertise
    /// (`on_channels_open` without `channels.lifecycle`, `on_turn_end` without
    /// `inferenceLifecycle` …): a conforming host grants only what is advertised (§5.4), so
    /// the session answers the method `-32002` and the handler never runs.
    #[error("{registration} handles {method}, which needs `{needs}`, but the server does not advertise it: a host grants only what is advertised (§5.4), so the handler would never run; advertise it (a feature_set's uses, or advertise) or leave the handler out")]
    NotAdvertised {
        /// The builder method, e.g. `on_channels_open`.
        registration: &'static str,
        /// The method it handles, e.g. `channels/open`.
        method: &'static str,
        /// The capability path (or paths) the method needs, e.g. `channels.lifecycle`.
        needs: String,
    },
    /// A name the builder was given that names nothing: an empty or whitespace-only server
    /// name or version (MCP's `serverInfo` needs both, §5.1), `mcp_capability` key or
    /// `manifest_member` key. Blank tool and custom method names are [`Self::ToolSchema`] and
    /// [`Self::ReservedMethod`], as empty ones are.
    #[error("{}", crate::session::server_initialize::blank_message(what, given))]
    BlankName {
        /// Which name: `server name`, `server version`, `mcp_capability key` or
        /// `manifest_member key`.
        what: &'static str,
        /// The name as given.
        given: String,
    },
    /// The configuration given to [`ServerBuilder::peer_config`](super::ServerBuilder::peer_config)
    /// or [`ServerBuilder::lifecycle_config`](super::ServerBuilder::lifecycle_config) has
    /// values that cannot work (a zero `max_message_size` refuses every message, a
    /// `safety_timeout` under 1 ms ends every turn at once …): each defect, naming its field
    /// (`PeerConfig.…`, `LifecycleConfig.…`), by each config's own rule
    /// ([`PeerConfig::defects`](crate::peer::PeerConfig::defects),
    /// [`LifecycleConfig::defects`](crate::lifecycle::LifecycleConfig::defects)).
    #[error("the builder's configuration is refused: {}", .0.join("; "))]
    InvalidConfig(Vec<String>),
    /// A tool MCP cannot carry: an empty or whitespace-only name (no `tools/call` can name
    /// it), or an
    /// `inputSchema` that is not an object schema with `"type": "object"` (MCP's `Tool`),
    /// hand-written or generated from a typed tool's argument type.
    #[error("tool {name:?}: {reason}")]
    ToolSchema {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
}

fn undeclared_message(registration: &str, name: &str, declared: &[String]) -> String {
    let list = match declared {
        [] => "it declares none; declare one with `feature_set`".to_owned(),
        [closest, ..] => format!(
            "declared: {} (did you mean {closest:?}?)",
            declared
                .iter()
                .map(|d| format!("{d:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{registration} names feature set {name:?}, which the builder does not declare; {list}")
}

/// Why a typed sender refused or failed. The refusals happen before anything is written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendError {
    /// The host did not advertise MCPL 0.5 (no `experimental.mcpl`, or another version):
    /// this is an MCP-only connection (§3.2).
    #[error("MCPL is not active on this connection: the host did not advertise MCPL 0.5, so it is served as a plain MCP host (§3.2) and only MCP messages can be sent to it; check Session::is_mcpl() before an MCPL send")]
    McpOnly,
    /// No `featureSets/update` Request has been received yet (§5.3).
    #[error("`{capability}` is not available yet: the host has sent no policy Request (§5.3); send from ServerBuilder::on_ready, or once Session::granted(..) is true")]
    NotReady {
        /// The capability the send needs.
        capability: Capability,
    },
    /// The grant does not include the capability (§5.4).
    #[error("capability `{capability}` is not granted on this connection (§5.4): the host's policy withholds it, or no feature set's uses declares it; check Session::granted(..) before sending")]
    CapabilityDenied {
        /// The missing capability.
        capability: Capability,
    },
    /// The `featureSet` is not declared in the manifest (§6.5).
    #[error("feature set {0:?} is not declared in the manifest (§6.5): declare it with ServerBuilder::feature_set, or name a declared set")]
    UnknownFeatureSet(String),
    /// The `featureSet` is declared but unavailable (disabled, not selected, or denied).
    #[error("feature set {name:?} is not available on this connection ({reason}, §6.4): the host's grant leaves it off; check Session::feature_available(..) before sending")]
    FeatureSetUnavailable {
        /// The set.
        name: String,
        /// `disabled`, `not_selected`, `capability_denied` or `invalid_uses`.
        reason: &'static str,
    },
    /// The `featureSet`'s `uses` does not declare a capability the send exercises: a host
    /// rejects that use (§6.4 rule 2), so it is refused before the wire.
    #[error("feature set {name:?} does not declare `{capability}` in its uses, so a host rejects this use (§6.4 rule 2): add it to the set's uses")]
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
    #[error(
        "content is not App. B.1 content blocks: {0}; build it with ContentBlock's constructors"
    )]
    InvalidContent(String),
    /// A caller-set `timestamp` that is not ISO 8601 (§9.2, §14.3): a host rejects the event
    /// or message, so it is refused before the wire.
    #[error("timestamp {timestamp:?} is not ISO 8601 (§9.2, §14.3): {defect}; give YYYY-MM-DDTHH:MM:SSZ, or leave it unset to stamp the current time")]
    InvalidTimestamp {
        /// The timestamp as given.
        timestamp: String,
        /// What is wrong with it.
        defect: &'static str,
    },
    /// [`Session::send_mcp_request`](super::Session::send_mcp_request) or [`Session::send_mcp_notification`](super::Session::send_mcp_notification) was given a method
    /// of MCPL (or of the MCP handshake MCPL rides on, or a removed surface): those go only
    /// through the typed, gated senders.
    #[error("{0:?} is not a plain MCP method: send MCPL messages with the session's typed senders (Session::push_event, …), which check the grant")]
    NotMcp(String),
    /// A `channels/incoming` message names a channel this connection does not hold (never
    /// registered or opened, refused, or closed by the host): the host validates it against
    /// the channel actually registered and refuses it (§14.5, `-32023` §14.6), so nothing is
    /// sent.
    #[error("channel {0:?} is not held on this connection (§14.5): register it with Session::channels_register (the host must accept it) or wait for the host to open it; Session::channels lists the ones the host accepted")]
    UnknownChannel(String),
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
            SendError::UnknownChannel(_) => "unknown_channel",
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

/// The server's diagnostics under their earlier name: [`ServerDiagnostic`] (typed since
/// issue #24).
#[deprecated(note = "renamed ServerDiagnostic, a typed enum: read code(), kind(), detail()")]
pub type SessionDiagnostic = ServerDiagnostic;
