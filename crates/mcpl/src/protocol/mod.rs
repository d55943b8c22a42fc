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

/// Defines a zero-sized method marker type and its [`Method`] impl: wire name, family (MCP or
/// MCPL), form, direction, params, result and the capability it requires. `requires:` is a
/// [`Requirement`] written with the variant names of [`Requirement`] and
/// [`Capability`](crate::capability::Capability) in scope; `refined_by:` names a
/// `fn(Option<&Value>) -> Requirement` for a method whose params change it.
macro_rules! method {
    (
        $(#[$meta:meta])*
        $ty:ident, $name:literal, $family:ident, $kind:ident, $dir:ident, $params:ty, $result:ty,
        requires: $req:expr $(, refined_by: $refine:path)?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $ty;
        impl $crate::protocol::Method for $ty {
            const NAME: &'static str = $name;
            const FAMILY: $crate::protocol::Family = $crate::protocol::Family::$family;
            const KIND: $crate::protocol::Kind = $crate::protocol::Kind::$kind;
            const DIRECTION: $crate::protocol::Direction = $crate::protocol::Direction::$dir;
            const REQUIREMENT: $crate::capability::Requirement = {
                #[allow(unused_imports)]
                use $crate::capability::{Capability::*, Requirement::*};
                $req
            };
            type Params = $params;
            type Result = $result;
            $(
                fn requirement_of_value(
                    params: Option<&::serde_json::Value>,
                ) -> $crate::capability::Requirement {
                    $refine(params)
                }

                fn requirement(params: &Self::Params) -> $crate::capability::Requirement {
                    let value = ::serde_json::to_value(params).ok();
                    $refine(value.as_ref())
                }
            )?
        }
    };
}

pub mod channels;
pub mod content;
pub mod feature_sets;
pub mod handshake;
pub mod hooks;
pub mod inference;
mod int;
pub mod lifecycle;
pub mod manifest;
pub mod model;
pub mod push;
pub mod state;
pub mod time;

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
        /// and `scope/elevate` ([`REMOVED_METHODS`]) — is an unknown method.
        pub const METHOD_NAMES: &[&str] = &[$(<$m as Method>::NAME),*];

        /// Wire name, family, form and direction of every typed method, in [`METHOD_NAMES`]
        /// order.
        pub const METHODS: &[MethodInfo] = &[$(MethodInfo {
            name: <$m as Method>::NAME,
            family: <$m as Method>::FAMILY,
            kind: <$m as Method>::KIND,
            direction: <$m as Method>::DIRECTION,
        }),*];

        /// The capability a message of the typed method `method` requires (§5.4, §14.1),
        /// judged from its raw `params` by the method's own
        /// [`Method::requirement_of_value`]; `None` for a method this crate does not type
        /// (an MCP method outside [`METHOD_NAMES`], a removed one, an unknown one).
        pub fn method_requirement(method: &str, params: Option<&Value>) -> Option<Requirement> {
            $(
                if method == <$m as Method>::NAME {
                    return Some(<$m as Method>::requirement_of_value(params));
                }
            )*
            None
        }

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

        /// Whether a typed caller may decode a result of type `R` straight from the result's
        /// text ([`crate::jsonrpc::parse_answer`]): only a typed method of this crate's result
        /// type, which reads from the text as from the `Value` parsed from it. Another type
        /// may not (a `Box<RawValue>` keeps the text's own spelling, a `u128` reads a number
        /// past `u64` that a `Value` holds as a float): it is decoded from the `Value`, as
        /// it always was.
        /// The capability a message of the typed method `method` requires (§5.4, §14.1),
        /// judged from its typed params by the method's own [`Method::requirement`]: the
        /// decision [`method_requirement`] takes from their `Value`. `None` when `method` is
        /// not one this crate types or `P` is not its params type (an application's own
        /// `Method` spelling the name): the sessions gate by name, so those take the `Value`
        /// way, never the requirement the other type states.
        #[cfg(feature = "runtime")]
        pub(crate) fn typed_requirement<P: 'static>(method: &str, params: &P) -> Option<Requirement> {
            let params: &dyn std::any::Any = params;
            $(
                if method == <$m as Method>::NAME {
                    return params
                        .downcast_ref::<<$m as Method>::Params>()
                        .map(<$m as Method>::requirement);
                }
            )*
            None
        }

        #[cfg(feature = "runtime")]
        pub(crate) fn result_reads_from_text<R: 'static>() -> bool {
            let r = std::any::TypeId::of::<R>();
            false $(|| r == std::any::TypeId::of::<<$m as Method>::Result>())*
        }

        /// Whether `params` parse as the typed method `method`'s params
        /// ([`crate::jsonrpc::params_of`], read in place): `-32602` where they do not, as a
        /// handler's typed params would refuse them. A method this crate does not type has
        /// no params type to hold them to: `Ok`.
        pub fn check_params(method: &str, params: Option<&Value>) -> Result<(), ErrorObject> {
            $(
                if method == <$m as Method>::NAME {
                    return crate::jsonrpc::params_of::<<$m as Method>::Params>(params).map(drop);
                }
            )*
            Ok(())
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

/// Member `key` of `obj` as the shape rules read an optional member: `None` when it is absent
/// **or `null`**. Reading (the spec gives `null` no meaning for any optional member): a peer
/// whose serializer writes `null` for "not set" (serde without `skip_serializing_if`, a
/// JavaScript `?? null`) means absent, and absent is what the receiver then acts on, so the
/// reading refuses nothing a peer meant and grants nothing (an absent optional member
/// confers nothing). Required members are never read through this.
pub fn given<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// The most defects one of this module's defect lists names (the `*_defects` functions):
/// past it a last entry counts the rest. A clear error needs the first few (§6.6); a message
/// with a defect in each of a million entries had each formatted, kept and joined into one
/// answer (3.6 MB answering 200 KB of `1,`).
pub const MAX_LISTED_DEFECTS: usize = 16;

/// The first [`MAX_LISTED_DEFECTS`] of `defects`, then, when there were more, one entry
/// `… and N more not listed`; the rest are only counted, each dropped as soon as it is made
/// (pass a lazy iterator).
pub fn listed_defects(defects: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut it = defects.into_iter();
    let mut out: Vec<String> = it.by_ref().take(MAX_LISTED_DEFECTS).collect();
    let more = it.count();
    if more > 0 {
        out.push(format!("… and {more} more not listed"));
    }
    out
}

/// The MCP methods (revision 2025-06-18, requests and notifications in either direction)
/// this crate does not type. With the typed ones of [`Family::Mcp`] they are MCP's whole
/// vocabulary ([`is_mcp_method`]); a session answers them like any method it does not
/// handle, and `mcpl check` does not count them as foreign.
pub const UNTYPED_MCP_METHODS: &[&str] = &[
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "sampling/createMessage",
    "roots/list",
    "elicitation/create",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/roots/list_changed",
];

/// The MCPL 0.4 surfaces 0.5.0 removed, each with the section that says so. They are not
/// typed: a receiver answers them like any unknown method, and a server lets no custom
/// handler or fallback take them.
pub const REMOVED_METHODS: &[(&str, &str)] = &[
    ("context/afterInference", "§10.5"),
    ("featureSets/changed", "§6.7"),
    ("scope/elevate", "§7"),
];

/// Which protocol a method belongs to: the MCP handshake pieces MCPL rides on, which run
/// on an MCP-only connection too (§3.2), MCPL's own (§4.1), or an application's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// An MCP method (`initialize`, `ping`, `tools/call` …).
    Mcp,
    /// An MCPL method: it exists only on a connection that negotiated MCPL (§3.2).
    Mcpl,
    /// Neither: a method an application defines for itself (a [`Method`] impl outside this
    /// crate). No typed method of this crate is one.
    Extension,
}

/// A method's wire name, family, form and direction (§4.1), for dispatch without the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodInfo {
    /// Wire name.
    pub name: &'static str,
    /// MCP or MCPL.
    pub family: Family,
    /// Request, Notification or either.
    pub kind: Kind,
    /// Who sends it.
    pub direction: Direction,
}

/// The [`MethodInfo`] of a typed method, `None` for an unknown (or removed) one.
pub fn method_info(name: &str) -> Option<MethodInfo> {
    METHODS.iter().copied().find(|m| m.name == name)
}

/// Whether `name`'s [`MethodInfo::direction`] is this crate's reading rather than the
/// spec's: §14.1 names `channels/acknowledge` and `channels/typing` and their capabilities,
/// but SPEC.md gives them no direction or form, and the registry reads them as Host →
/// Server. A checker reports one sent the other way without citing a rule §4.1 lacks.
pub fn direction_is_a_reading(name: &str) -> bool {
    name == channels::ChannelsAcknowledge::NAME || name == channels::ChannelsTyping::NAME
}

/// Whether `name` is a method this crate types (see [`METHOD_NAMES`]).
pub fn is_known_method(name: &str) -> bool {
    method_info(name).is_some()
}

/// Whether `name` is an MCP method: a typed one of [`Family::Mcp`] or one of
/// [`UNTYPED_MCP_METHODS`].
pub fn is_mcp_method(name: &str) -> bool {
    method_info(name).map_or_else(
        || UNTYPED_MCP_METHODS.contains(&name),
        |m| m.family == Family::Mcp,
    )
}

/// Whether `name` is a typed MCPL method ([`Family::Mcpl`]): one that does not exist on an
/// MCP-only connection (§3.2).
pub fn is_mcpl_method(name: &str) -> bool {
    method_info(name).is_some_and(|m| m.family == Family::Mcpl)
}

/// The section that removed `name` from MCPL, if it is one of [`REMOVED_METHODS`].
pub fn removed_in(name: &str) -> Option<&'static str> {
    REMOVED_METHODS
        .iter()
        .find(|(m, _)| *m == name)
        .map(|(_, section)| *section)
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

impl Kind {
    /// Whether a message of this kind is taken in the form it came in (`notification`: it
    /// carried no id). §4.1's table gives each method its form; the reading where a peer
    /// sends another one (AUDIT-001: `channels/incoming` and `channels/register` sent as
    /// Notifications) is to fail closed: a Request-only method sent as a Notification is
    /// not applied (it has no response to carry the per-item results §14.5 owes, and the
    /// spec gives no filtered Notification form but `channels/changed`'s), and a
    /// Notification-only one sent as a Request is answered `-32601`. The receiver reports
    /// what it does not apply. The one form rule of both sessions.
    pub fn takes(self, notification: bool) -> bool {
        match self {
            Kind::Either => true,
            Kind::Request => !notification,
            Kind::Notification => notification,
        }
    }
}

/// Whether `method` is taken in the form it came in ([`Kind::takes`]); a method this crate
/// does not type has no form to hold it to (its receiver decides).
pub fn takes_form(method: &str, notification: bool) -> bool {
    form_refused(method, notification).is_none()
}

/// The form §4.1 gives `method` when a message of it in this form (`notification`: no id)
/// is not taken ([`Kind::takes`]); `None` when it is, or when this crate does not type it.
/// The one rule a sender refuses to send by and a receiver refuses to apply by.
pub fn form_refused(method: &str, notification: bool) -> Option<Kind> {
    method_info(method)
        .map(|m| m.kind)
        .filter(|k| !k.takes(notification))
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

/// A typed JSON-RPC method: its wire name, family, form, direction, params, result and
/// capability — the one place these facts about a method are written.
pub trait Method {
    /// The wire name, e.g. `"push/event"`.
    const NAME: &'static str;
    /// MCP, MCPL, or (the default, for a method defined outside this crate) an extension.
    const FAMILY: Family = Family::Extension;
    /// Request, Notification or either.
    const KIND: Kind;
    /// Who sends it.
    const DIRECTION: Direction;
    /// The capability the server's grant must hold for a message of this method whose
    /// params leave every optional member out (§5.4, §14.1). Every typed method of this
    /// crate states its own; the default, none, is for an extension's method, which the
    /// sessions do not gate (they gate the typed methods, by name).
    const REQUIREMENT: Requirement = Requirement::None;
    /// The `params` type.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// The `result` type (`()`-like for notifications).
    type Result: Serialize + DeserializeOwned + Send + 'static;

    /// The capability a message requires, judged from its raw `params` (which may not parse
    /// as [`Self::Params`]): [`Self::REQUIREMENT`] unless the params change it, read
    /// fail-closed (`inference/request` with a `stream` that is not `false`/`null`).
    fn requirement_of_value(params: Option<&Value>) -> Requirement {
        let _ = params;
        Self::REQUIREMENT
    }

    /// The capability a message with these typed params requires; agrees with
    /// [`Self::requirement_of_value`] on the params' wire form.
    fn requirement(params: &Self::Params) -> Requirement {
        let _ = params;
        Self::REQUIREMENT
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

    /// The whole §5.4/§14.1 method table, pinned: every typed method's requirement with no
    /// params, its family, and nothing typed left out.
    #[test]
    fn s5_4_every_typed_method_has_its_requirement_and_family() {
        use Requirement as R;
        let table: &[(&str, Family, Requirement)] = &[
            ("initialize", Family::Mcp, R::None),
            ("notifications/initialized", Family::Mcp, R::None),
            ("ping", Family::Mcp, R::None),
            ("tools/list", Family::Mcp, R::None),
            ("tools/call", Family::Mcp, R::One(C::Tools)),
            ("push/event", Family::Mcpl, R::One(C::PushEvents)),
            (
                "context/beforeInference",
                Family::Mcpl,
                R::AnyOf(&[
                    C::Observe,
                    C::InjectSystem,
                    C::InjectBeforeUser,
                    C::InjectAfterUser,
                ]),
            ),
            (
                "inference/lifecycle",
                Family::Mcpl,
                R::One(C::InferenceLifecycle),
            ),
            (
                "inference/request",
                Family::Mcpl,
                R::One(C::InferenceRequest),
            ),
            (
                "inference/chunk",
                Family::Mcpl,
                R::AllOf(&[C::InferenceRequest, C::InferenceRequestStreaming]),
            ),
            ("model/info", Family::Mcpl, R::One(C::ModelInfo)),
            ("featureSets/update", Family::Mcpl, R::None),
            ("state/rollback", Family::Mcpl, R::One(C::Tools)),
            (
                "channels/register",
                Family::Mcpl,
                R::One(C::ChannelsRegister),
            ),
            (
                "channels/changed",
                Family::Mcpl,
                R::One(C::ChannelsRegister),
            ),
            ("channels/list", Family::Mcpl, R::One(C::ChannelsRegister)),
            ("channels/open", Family::Mcpl, R::One(C::ChannelsLifecycle)),
            ("channels/close", Family::Mcpl, R::One(C::ChannelsLifecycle)),
            (
                "channels/outgoing/chunk",
                Family::Mcpl,
                R::One(C::ChannelsStreaming),
            ),
            (
                "channels/outgoing/complete",
                Family::Mcpl,
                R::One(C::ChannelsStreaming),
            ),
            ("channels/publish", Family::Mcpl, R::One(C::ChannelsPublish)),
            (
                "channels/incoming",
                Family::Mcpl,
                R::One(C::ChannelsIncoming),
            ),
            (
                "channels/acknowledge",
                Family::Mcpl,
                R::One(C::ChannelsAcknowledge),
            ),
            ("channels/typing", Family::Mcpl, R::One(C::ChannelsTyping)),
            ("mcpl/manifest", Family::Mcpl, R::None),
            ("mcpl/manifestChanged", Family::Mcpl, R::None),
        ];
        assert_eq!(table.len(), METHOD_NAMES.len());
        for (name, family, req) in table {
            let info = method_info(name).unwrap();
            assert_eq!(info.family, *family, "{name}");
            assert_eq!(method_requirement(name, None), Some(*req), "{name}");
            assert_eq!(
                method_requirement(name, Some(&json!({}))),
                Some(*req),
                "{name}"
            );
        }
        for unknown in ["resources/list", "scope/elevate", "x/y", ""] {
            assert_eq!(method_requirement(unknown, None), None, "{unknown}");
        }
    }

    /// §11.4 read fail-closed on the raw message: any `stream` but `false`/`null` asks for
    /// streaming; the typed params (a boolean) agree.
    #[test]
    fn s11_4_streaming_reading_of_raw_and_typed_params() {
        let streaming = R_STREAMING;
        for (stream, want) in [
            (json!(null), Requirement::One(C::InferenceRequest)),
            (json!(false), Requirement::One(C::InferenceRequest)),
            (json!(true), streaming),
            (json!("yes"), streaming),
            (json!(0), streaming),
        ] {
            let p = json!({"featureSet":"f","messages":[],"stream": stream});
            assert_eq!(
                method_requirement("inference/request", Some(&p)),
                Some(want),
                "{stream}"
            );
            if let Ok(typed) = serde_json::from_value::<inference::InferenceRequestParams>(p) {
                assert_eq!(inference::InferenceRequest::requirement(&typed), want);
            }
        }
    }

    const R_STREAMING: Requirement =
        Requirement::AllOf(&[C::InferenceRequest, C::InferenceRequestStreaming]);

    /// MCP's vocabulary is the typed MCP methods and the untyped list, which overlap nowhere
    /// and contain no MCPL method; removed methods are neither typed nor MCP.
    #[test]
    fn s3_2_mcp_vocabulary_is_one_list() {
        for name in UNTYPED_MCP_METHODS {
            assert!(!is_known_method(name), "{name} is typed");
            assert!(is_mcp_method(name), "{name}");
        }
        for m in METHODS {
            assert_eq!(is_mcp_method(m.name), m.family == Family::Mcp, "{}", m.name);
            assert_eq!(
                is_mcpl_method(m.name),
                m.family == Family::Mcpl,
                "{}",
                m.name
            );
        }
        for (name, section) in REMOVED_METHODS {
            assert!(!is_known_method(name) && !is_mcp_method(name), "{name}");
            assert_eq!(removed_in(name), Some(*section));
        }
        assert_eq!(removed_in("push/event"), None);
        assert!(!is_mcp_method("push/event") && !is_mcp_method("x/y"));
    }
}
