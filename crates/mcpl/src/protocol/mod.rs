//! Typed params and results for every MCPL 0.5 method (§4.1) and the MCP handshake pieces
//! MCPL rides on. Each method is a type implementing [`Method`].
//!
//! Conventions shared by every type here:
//! - members are `camelCase` on the wire; optional members are omitted when absent, never
//!   written as `null`, except where the spec writes `null` itself (`userMessage`, §10.1;
//!   `parent`, §8.3);
//! - every object keeps an `extra` map of unknown members, so that a message survives a
//!   round trip and peers tolerate fields they do not know (§8, compatibility note);
//! - enums whose unknown values are harmless to keep carry an `Other(String)`/`Unknown`
//!   variant; enums that decide something (a lifecycle phase) reject unknown values. Each
//!   enum documents its reading.
//!
//! **Removed surfaces are not typed.** `context/afterInference` (§10.5), `featureSets/changed`
//! (§6.7) and `scope/elevate` (§7) were removed in 0.5.0; they appear nowhere in
//! [`METHOD_NAMES`], and a receiver answers them exactly like any other unknown method
//! (JSON-RPC `-32601` for a request, a diagnostic for a notification).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::capability::Requirement;
use crate::jsonrpc::{parse_params, ErrorObject};

/// Defines a zero-sized method marker type and its [`Method`] impl in one line.
macro_rules! method {
    (
        $(#[$meta:meta])*
        $ty:ident, $name:literal, $kind:ident, $dir:ident, $params:ty, $result:ty
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $ty;
        impl $crate::protocol::Method for $ty {
            const NAME: &'static str = $name;
            const KIND: $crate::protocol::Kind = $crate::protocol::Kind::$kind;
            const DIRECTION: $crate::protocol::Direction = $crate::protocol::Direction::$dir;
            type Params = $params;
            type Result = $result;
        }
    };
}

pub mod channels;
pub mod content;
pub mod feature_sets;
pub mod handshake;
pub mod hooks;
pub mod inference;
pub mod lifecycle;
pub mod manifest;
pub mod model;
pub mod push;
pub mod state;

/// Unknown members of a wire object, kept verbatim so they survive a round trip.
pub type Extra = Map<String, Value>;

/// An object with no defined members (`params: {}` of `model/info`, `ping`, `channels/list`
/// …); anything the peer put in it is kept in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmptyObject {
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Lists every typed method once; the registry items below are generated from it.
macro_rules! registry {
    ($($m:ty),* $(,)?) => {
        /// Every method name this crate types, MCP handshake pieces included. A name not in
        /// this list — including the removed `context/afterInference`, `featureSets/changed`
        /// and `scope/elevate` — is an unknown method.
        pub const METHOD_NAMES: &[&str] = &[$(<$m as Method>::NAME),*];

        /// Wire name, form and direction of every typed method, in [`METHOD_NAMES`] order.
        pub const METHODS: &[MethodInfo] = &[$(MethodInfo {
            name: <$m as Method>::NAME,
            kind: <$m as Method>::KIND,
            direction: <$m as Method>::DIRECTION,
        }),*];

        /// The capability a message requires, judged from its raw `params` (absent params
        /// read as `{}`). An unknown method is `-32601`; params that do not parse as the
        /// method's type are `-32602` — a requirement is never guessed from bad input.
        pub fn requirement_of(
            method: &str,
            params: Option<Value>,
        ) -> Result<Requirement, ErrorObject> {
            $(
                if method == <$m as Method>::NAME {
                    let p: <$m as Method>::Params = parse_params(params)?;
                    return Ok(<$m as Method>::requirement(&p));
                }
            )*
            Err(ErrorObject::method_not_found(method))
        }
    };
}

registry!(
    handshake::Initialize,
    handshake::Initialized,
    handshake::Ping,
    handshake::ToolsList,
    handshake::ToolsCall,
    push::PushEvent,
    hooks::BeforeInference,
    lifecycle::InferenceLifecycle,
    inference::InferenceRequest,
    inference::InferenceChunk,
    model::ModelInfoRequest,
    feature_sets::FeatureSetsUpdate,
    state::StateRollback,
    channels::ChannelsRegister,
    channels::ChannelsChanged,
    channels::ChannelsList,
    channels::ChannelsOpen,
    channels::ChannelsClose,
    channels::ChannelsOutgoingChunk,
    channels::ChannelsOutgoingComplete,
    channels::ChannelsPublish,
    channels::ChannelsIncoming,
    channels::ChannelsAcknowledge,
    channels::ChannelsTyping,
    manifest::ManifestFetch,
    manifest::ManifestChanged,
);

/// A method's wire name, form and direction (§4.1), for dispatch without the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodInfo {
    /// Wire name.
    pub name: &'static str,
    /// Request, Notification or either.
    pub kind: Kind,
    /// Who sends it.
    pub direction: Direction,
}

/// The [`MethodInfo`] of a typed method, `None` for an unknown (or removed) one.
pub fn method_info(name: &str) -> Option<MethodInfo> {
    METHODS.iter().copied().find(|m| m.name == name)
}

/// Whether `name` is a method this crate types (see [`METHOD_NAMES`]).
pub fn is_known_method(name: &str) -> bool {
    method_info(name).is_some()
}

/// Serde helper for members whose `null` differs from their absence (`parent: null`, §8.3):
/// `None` = absent, `Some(None)` = `null`, `Some(Some(v))` = a value.
pub(crate) mod nullable {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }

    pub fn serialize<S, T>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        T: Serialize,
    {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }
}

/// Whether a method is sent as a Request, a Notification, or may be either (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Always carries an id and expects a response.
    Request,
    /// Never carries an id.
    Notification,
    /// Either form is valid (`featureSets/update`, `channels/changed`, `channels/publish`;
    /// also `channels/acknowledge` and `channels/typing`, whose form the spec leaves open).
    Either,
}

/// Who sends a method (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by the host to the server.
    HostToServer,
    /// Sent by the server to the host.
    ServerToHost,
    /// Sent by either side (`channels/list`, `ping`).
    Either,
}

/// A typed JSON-RPC method: its wire name, form, direction, params, result and capability.
pub trait Method {
    /// The wire name, e.g. `"push/event"`.
    const NAME: &'static str;
    /// Request, Notification or either.
    const KIND: Kind;
    /// Who sends it.
    const DIRECTION: Direction;
    /// The `params` type.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// The `result` type (`()`-like for notifications).
    type Result: Serialize + DeserializeOwned + Send + 'static;
    /// The capability the server's grant must hold for this message (§5.4, §14.1), judged
    /// from the params where the requirement depends on them. The table itself lives in one
    /// place, [`crate::policy::method_requirement`]; a method missing from it requires
    /// nothing only if it is one of the MCP handshake pieces listed there.
    fn requirement(params: &Self::Params) -> Requirement {
        let value = serde_json::to_value(params).ok();
        // Fail closed: a typed method the table does not know (impossible by the
        // `every_typed_method_is_in_the_policy_table` test) would require every path.
        crate::policy::method_requirement(Self::NAME, value.as_ref())
            .unwrap_or(Requirement::AllOf(&crate::capability::Capability::ALL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::Capability as C;
    use serde_json::json;

    fn params<M: Method>(v: serde_json::Value) -> M::Params {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn s4_1_kinds_and_directions() {
        assert_eq!(push::PushEvent::KIND, Kind::Request);
        assert_eq!(push::PushEvent::DIRECTION, Direction::ServerToHost);
        assert_eq!(feature_sets::FeatureSetsUpdate::KIND, Kind::Either);
        assert_eq!(channels::ChannelsChanged::KIND, Kind::Either);
        assert_eq!(channels::ChannelsPublish::KIND, Kind::Either);
        assert_eq!(lifecycle::InferenceLifecycle::KIND, Kind::Notification);
        assert_eq!(
            inference::InferenceChunk::DIRECTION,
            Direction::HostToServer
        );
        assert_eq!(channels::ChannelsList::DIRECTION, Direction::Either);
        assert_eq!(manifest::ManifestChanged::KIND, Kind::Notification);
    }

    #[test]
    fn s11_4_streaming_inference_requires_both_leaves() {
        let base = json!({"featureSet":"f","messages":[]});
        let p = params::<inference::InferenceRequest>(base.clone());
        assert_eq!(
            inference::InferenceRequest::requirement(&p),
            Requirement::One(C::InferenceRequest)
        );
        let mut s = base;
        s["stream"] = json!(true);
        let p = params::<inference::InferenceRequest>(s);
        assert_eq!(
            inference::InferenceRequest::requirement(&p),
            Requirement::AllOf(&[C::InferenceRequest, C::InferenceRequestStreaming])
        );
    }

    #[test]
    fn s14_1_channel_requirements_follow_the_table() {
        let e = EmptyObject::default();
        assert_eq!(
            channels::ChannelsList::requirement(&e),
            Requirement::One(C::ChannelsRegister)
        );
        let p = params::<channels::ChannelsClose>(json!({"channelId":"x"}));
        assert_eq!(
            channels::ChannelsClose::requirement(&p),
            Requirement::One(C::ChannelsLifecycle)
        );
        let p = params::<channels::ChannelsTyping>(json!({"channelId":"x"}));
        assert_eq!(
            channels::ChannelsTyping::requirement(&p),
            Requirement::One(C::ChannelsTyping)
        );
    }

    #[test]
    fn s5_4_other_requirements() {
        let p = params::<hooks::BeforeInference>(
            json!({"inferenceId":"i","conversationId":"c","turnIndex":0}),
        );
        assert_eq!(
            hooks::BeforeInference::requirement(&p),
            Requirement::AnyOf(&[
                C::Observe,
                C::InjectSystem,
                C::InjectBeforeUser,
                C::InjectAfterUser
            ])
        );
        let e = EmptyObject::default();
        assert_eq!(
            model::ModelInfoRequest::requirement(&e),
            Requirement::One(C::ModelInfo)
        );
        assert_eq!(handshake::Ping::requirement(&e), Requirement::None);
        assert_eq!(manifest::ManifestFetch::requirement(&e), Requirement::None);
        let u = feature_sets::UpdateParams::default();
        assert_eq!(
            feature_sets::FeatureSetsUpdate::requirement(&u),
            Requirement::None
        );
        let t = params::<handshake::ToolsCall>(json!({"name":"n"}));
        assert_eq!(
            handshake::ToolsCall::requirement(&t),
            Requirement::One(C::Tools)
        );
    }

    #[test]
    fn s6_6_requirement_of_raw_messages() {
        assert_eq!(
            requirement_of(
                "inference/request",
                Some(json!({"featureSet":"f","messages":[],"stream":true}))
            ),
            Ok(Requirement::AllOf(&[
                C::InferenceRequest,
                C::InferenceRequestStreaming
            ]))
        );
        // Absent params of a method whose params are all optional read as `{}`.
        assert_eq!(
            requirement_of("model/info", None),
            Ok(Requirement::One(C::ModelInfo))
        );
        assert_eq!(requirement_of("ping", None), Ok(Requirement::None));
        let e = requirement_of("scope/elevate", Some(json!({}))).unwrap_err();
        assert_eq!(e.code, crate::jsonrpc::codes::METHOD_NOT_FOUND);
        let e = requirement_of("push/event", Some(json!({"featureSet": 1}))).unwrap_err();
        assert_eq!(e.code, crate::jsonrpc::codes::INVALID_PARAMS);
    }

    #[test]
    fn s4_1_registry_is_consistent() {
        assert_eq!(METHODS.len(), METHOD_NAMES.len());
        let mut names: Vec<&str> = METHOD_NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METHOD_NAMES.len(), "duplicate method name");
        let info = method_info("channels/publish").unwrap();
        assert_eq!(
            (info.kind, info.direction),
            (Kind::Either, Direction::HostToServer)
        );
    }

    #[test]
    fn s6_7_removed_methods_are_unknown() {
        for removed in [
            "context/afterInference",
            "featureSets/changed",
            "scope/elevate",
        ] {
            assert!(!is_known_method(removed), "{removed}");
        }
        assert!(is_known_method("channels/acknowledge"));
    }

    #[test]
    fn every_typed_method_is_in_the_policy_table() {
        for name in METHOD_NAMES {
            assert!(
                crate::policy::method_requirement(name, None).is_some(),
                "{name} has no entry in policy::method_requirement"
            );
        }
    }
}
