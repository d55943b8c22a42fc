//! What the session tells the application: its mode, events, diagnostics and errors.

use super::*;

pub use crate::session::{HostDiagnostic, HostEvent, McpList, McpOnlyReason, Mode, PolicyChange};

/// The application's side of a session: events and diagnostics, each a bounded queue
/// ([`HostConfig::event_capacity`], [`HostConfig::diagnostics_capacity`]) that holds memory
/// only for what is waiting in it.
#[derive(Debug)]
pub struct HostStreams {
    /// Admitted events, manifest receipts and mode changes.
    pub events: queue::Receiver<HostEvent>,
    /// Defects of the server and the connection.
    pub diagnostics: queue::Receiver<HostDiagnostic>,
}

/// Why a host operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The host's own policy patterns are malformed.
    #[error("HostConfig.policy is malformed: {0}; fix the pattern (an exact capability path, or `prefix.*`, §5.4)")]
    Policy(#[from] PatternError),
    /// The feature-set names to disable are not a valid `disabled` list (§5.3): too many,
    /// or one is not a feature-set name or pattern (§6.3). Nothing was sent.
    #[error("feature-set names not sent ({0}); give at most 1,024 in total, each a feature-set name or pattern such as `prefix.*` (§6.3)")]
    BadSelection(String),
    /// [`HostConfig`] holds values that cannot work ([`HostConfig::defects`]): each entry
    /// names the field, what it holds and what to write. Checked by
    /// [`HostSession::connect`] before anything is sent.
    #[error("HostConfig cannot work as given: {}", .0.join("; "))]
    InvalidConfig(Vec<String>),
    /// The connection failed.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// `initialize` returned something unreadable.
    #[error("the server's initialize result is unusable: {0}; the server must answer with a result carrying `capabilities` (MCP, §5.1)")]
    BadInitialize(String),
    /// The server's manifest carries more feature sets than
    /// [`HostConfig::max_feature_sets`]: refused before review. `connect` no longer fails
    /// with it: at `initialize` the server is served as plain MCP
    /// ([`McpOnlyReason::TooManyFeatureSets`], nothing reviewed, nothing granted); for an
    /// `mcpl/manifest` answer it is named in a [`HostDiagnostic::ManifestFetchFailed`] and
    /// only the manifest's removals are applied (§17.5 step 1).
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
    /// Refused locally: the method is not sent in this form (§4.1 gives it as `kind`, a
    /// Request-only `channels/open` sent by `notify`, say), which a server would not apply.
    #[error("{method} is sent only as a {kind:?} (§4.1), so a server would not apply it: use HostSession::request or notify accordingly")]
    WrongForm {
        /// The method.
        method: String,
        /// The form §4.1 gives it.
        kind: crate::protocol::Kind,
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
    /// Refused locally: the `inference/request` a [`ChunkSink`] was handed for did not ask
    /// for a stream (no `stream: true`, §11.4), so no `inference/chunk` may be sent for it;
    /// nothing was sent or counted. [`ChunkSink::is_streamed`] tells a handler beforehand.
    #[error(
        "the inference/request did not ask for a stream (no `stream: true`, §11.4), so no chunk can be sent on it; check ChunkSink::is_streamed() and return the whole text as the result"
    )]
    NotStreamed,
    /// Refused locally: tag patterns given to [`HostSession::set_consumer_patterns`] that
    /// are malformed or can never match (§16.7), each with why; none of the call's patterns
    /// was set, and the ones set before stand.
    #[error("tag patterns not set: {}; fix each (a tag with `*` globs, namespaced as `namespace:value`, §16.7) and set them again", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    TagPatterns(Vec<crate::tags::RuleError>),
    /// The turn's `completed` was sent without the `usage` given to [`Turn::complete`],
    /// which is not token usage (§10.5: an object of token counts, never message content):
    /// why. The turn ended.
    #[error("the turn's completed was sent without usage: {0}; give usage as an object of token counts such as {{\"inputTokens\": 10, \"outputTokens\": 5}}, never content (§10.5)")]
    UsageNotSent(String),
    /// Refused locally: this session already has an outgoing stream for the inference, open
    /// or ended; a second would restart its `index` and complete its channels twice (§14.3).
    #[error("an outgoing stream for inference {0:?} was already started on this connection (§14.3); keep using the first HostSession::outgoing_stream, or give the new inference its own id")]
    StreamExists(String),
    /// Refused locally: [`crate::session::ENDED_IDS_REMEMBERED`] lifecycle turns (§10.5) or
    /// outgoing streams (§14.3) are open on this session; a `Turn` or an `OutgoingStream`
    /// that is never ended or dropped keeps its slot.
    #[error("{limit} {what} are open on this connection, the limit; end or drop one (Turn::complete, OutgoingStream::finish) before starting another")]
    TooManyOpen {
        /// `"lifecycle turns"` or `"outgoing streams"`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
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
    /// Nothing accepted: feature set `name` no longer declares the `tagOntology` whose
    /// digest the application reviewed (a manifest change was read meanwhile, §17.5);
    /// `current` is the digest of the one it declares now, if any (§16.5).
    #[error("feature set {name:?} no longer declares the tagOntology you reviewed (a manifest change was read meanwhile, §17.5; current digest: {current:?}); review the current one (HostSession::manifest) and accept that digest")]
    OntologyChanged {
        /// The feature set.
        name: String,
        /// The digest of the `tagOntology` it declares now, if any.
        current: Option<String>,
    },
}

impl From<session::OutboundRefusal> for HostError {
    fn from(r: session::OutboundRefusal) -> HostError {
        use session::OutboundRefusal as R;
        match r {
            R::WrongDirection(m) => HostError::WrongDirection(m),
            R::NotGranted(c) => HostError::NotGranted(c),
            R::McpOnly(m) => HostError::McpOnly(m),
            R::ChannelNotPermitted(c) => HostError::ChannelNotPermitted(c),
            r @ R::InvalidParams(_) => HostError::Encode(r.to_string()),
            R::WrongForm { method, kind } => HostError::WrongForm { method, kind },
        }
    }
}

impl From<session::Completed> for HostError {
    fn from(c: session::Completed) -> HostError {
        HostError::ChannelCompleted {
            inference_id: c.inference_id,
            channel_id: c.channel_id,
        }
    }
}
