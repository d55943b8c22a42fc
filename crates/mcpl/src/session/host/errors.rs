//! Why [`HostState`] refused: its rules ([`RulesError`]), the handshake
//! ([`ConnectError`]) and an application call ([`StateError`]).

use super::*;

/// Why [`HostState::new`] refused its [`HostRules`]: nothing was started.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The host's own policy does not parse.
    #[error("{0}")]
    Policy(#[from] PatternError),
    /// Values that cannot work ([`HostRules::defects`]), each naming its field, what it
    /// holds and what to write.
    #[error("HostRules cannot work as given: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

/// Why the handshake did not bring the connection up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
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
    /// The manifest declares more feature sets than [`HostRules::max_feature_sets`]; no
    /// longer a connect failure (the server is served as plain MCP,
    /// [`McpOnlyReason::TooManyFeatureSets`]), its text names the bound in diagnostics.
    #[error("the manifest's {count} feature sets exceed the limit of {limit}, so it was not reviewed; raise HostRules.max_feature_sets if this server is trusted to declare that many")]
    TooManyFeatureSets {
        /// Sets declared.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The host's own policy does not parse.
    #[error("{0}")]
    Policy(#[from] PatternError),
    /// The connection closed before the handshake and initial policy exchange ended
    /// ([`HostState::handle_close`]).
    #[error("the connection closed before the handshake ended (§5.2, §5.3)")]
    Closed,
    /// The server refused the initial policy with `fallback: "close"` (§6.7).
    #[error(
        "the server refused the policy with fallback \"close\" (§6.7): the connection is closed"
    )]
    Refused,
}

/// Why an application call on a [`HostState`] was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
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
    /// The feature-set names to disable are not a valid `disabled` list (§5.3): too many, or
    /// not names or patterns. Nothing was sent or applied.
    #[error("feature-set names not sent ({0}); give at most 1,024 in total, each a feature-set name or pattern such as `prefix.*` (§6.3)")]
    Selection(String),
    /// A lifecycle turn could not be started or ended (§10.5): a turn for the id open or
    /// recently ended, or none open to end.
    #[error("lifecycle turn refused: {0}")]
    Turn(String),
    /// An outgoing stream (§14.3) could not be started or used: one for the inference is
    /// open or recently ended, or none is open.
    #[error("outgoing stream refused: {0}")]
    Stream(String),
    /// [`ENDED_IDS_REMEMBERED`](crate::session::ENDED_IDS_REMEMBERED) lifecycle turns (§10.5) or
    /// outgoing streams (§14.3) are open: end one before starting another.
    #[error("{limit} {what} are open, the limit: end one before starting another")]
    TooManyOpen {
        /// `"lifecycle turns"` or `"outgoing streams"`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The channel's `complete` was already sent for the inference (§14.3).
    #[error(transparent)]
    Completed(#[from] crate::session::Completed),
    /// The message may not be sent (§5.4, §14.1): nothing was sent.
    #[error("not sent: {0}")]
    NotSent(#[from] crate::session::OutboundRefusal),
    /// [`HostState::answer`] named a request that was not handed out or is already answered.
    #[error("no request {0} is waiting for an answer")]
    UnknownRequest(String),
    /// The method has an API of its own that keeps the host's obligations for it
    /// ([`crate::session::outbound::dedicated`]): nothing was sent.
    #[error("{method} cannot be sent raw: call {instead} instead, which keeps the host's obligations for it")]
    UseDedicated {
        /// The method.
        method: String,
        /// What to call instead.
        instead: &'static str,
    },
    /// Tag patterns given to [`HostState::set_consumer_patterns`] that are malformed or can
    /// never match (§16.7), each with why; none of the call's patterns was set.
    #[error("tag patterns not set: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    TagPatterns(Vec<crate::tags::RuleError>),
    /// The terminal was sent without the `usage` given ([`HostState::end_turn`]), which is
    /// not token usage (§10.5): why.
    #[error("the terminal was sent without usage: {0}; give usage as an object of token counts such as {{\"inputTokens\": 10, \"outputTokens\": 5}}, never content (§10.5)")]
    UsageNotSent(String),
    /// The connection is not up: wait for [`HostOutput::Connected`] (`Ok`), or it is closed.
    #[error("the connection is not up: wait for HostOutput::Connected, or connect again")]
    NotConnected,
}
