//! Capability paths (§5.4, §6.2, App. B.2): the closed vocabulary of 17 paths.
//!
//! [`Capability`] is the single source of truth for the vocabulary; the advertisement
//! tree, pattern matching and [`Grant`](crate::capability) logic are derived from it.

use std::fmt;
use std::str::FromStr;

/// One of the 17 capability paths of §6.2 / App. B.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `pushEvents` (§9).
    PushEvents,
    /// `tools` (MCP tools; advertised only by the outer MCP `capabilities.tools`).
    Tools,
    /// `modelInfo` (§12).
    ModelInfo,
    /// `inferenceRequest` (§11).
    InferenceRequest,
    /// `inferenceRequest.streaming` (§11.4).
    InferenceRequestStreaming,
    /// `inferenceLifecycle` (§10.5).
    InferenceLifecycle,
    /// `contextHooks.beforeInference.observe` (§10.1).
    Observe,
    /// `contextHooks.beforeInference.inject.system` (§10.2).
    InjectSystem,
    /// `contextHooks.beforeInference.inject.beforeUser` (§10.2).
    InjectBeforeUser,
    /// `contextHooks.beforeInference.inject.afterUser` (§10.2).
    InjectAfterUser,
    /// `channels.register` (§14.1).
    ChannelsRegister,
    /// `channels.lifecycle` (§14.1).
    ChannelsLifecycle,
    /// `channels.publish` (§14.1).
    ChannelsPublish,
    /// `channels.incoming` (§14.1).
    ChannelsIncoming,
    /// `channels.streaming` (§14.1).
    ChannelsStreaming,
    /// `channels.acknowledge` (§14.1).
    ChannelsAcknowledge,
    /// `channels.typing` (§14.1).
    ChannelsTyping,
}

impl Capability {
    /// Every path, in App. B.2 order.
    pub const ALL: [Capability; 17] = [
        Capability::PushEvents,
        Capability::Tools,
        Capability::ModelInfo,
        Capability::InferenceRequest,
        Capability::InferenceRequestStreaming,
        Capability::InferenceLifecycle,
        Capability::Observe,
        Capability::InjectSystem,
        Capability::InjectBeforeUser,
        Capability::InjectAfterUser,
        Capability::ChannelsRegister,
        Capability::ChannelsLifecycle,
        Capability::ChannelsPublish,
        Capability::ChannelsIncoming,
        Capability::ChannelsStreaming,
        Capability::ChannelsAcknowledge,
        Capability::ChannelsTyping,
    ];

    /// The dot-separated wire path.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::PushEvents => "pushEvents",
            Capability::Tools => "tools",
            Capability::ModelInfo => "modelInfo",
            Capability::InferenceRequest => "inferenceRequest",
            Capability::InferenceRequestStreaming => "inferenceRequest.streaming",
            Capability::InferenceLifecycle => "inferenceLifecycle",
            Capability::Observe => "contextHooks.beforeInference.observe",
            Capability::InjectSystem => "contextHooks.beforeInference.inject.system",
            Capability::InjectBeforeUser => "contextHooks.beforeInference.inject.beforeUser",
            Capability::InjectAfterUser => "contextHooks.beforeInference.inject.afterUser",
            Capability::ChannelsRegister => "channels.register",
            Capability::ChannelsLifecycle => "channels.lifecycle",
            Capability::ChannelsPublish => "channels.publish",
            Capability::ChannelsIncoming => "channels.incoming",
            Capability::ChannelsStreaming => "channels.streaming",
            Capability::ChannelsAcknowledge => "channels.acknowledge",
            Capability::ChannelsTyping => "channels.typing",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the 17 paths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unrecognised capability path {0:?}")]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_owned()))
    }
}

/// What a method requires of the grant (used by the method → capability table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Unprivileged: no capability needed (e.g. `ping`, `mcpl/manifest`).
    None,
    /// Exactly this path.
    One(Capability),
    /// Any one of these paths (e.g. `context/beforeInference`: observe or any inject leaf).
    AnyOf(&'static [Capability]),
    /// All of these paths (e.g. streaming `inference/request`).
    AllOf(&'static [Capability]),
}
