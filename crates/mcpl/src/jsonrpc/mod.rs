//! The JSON-RPC 2.0 envelope MCPL rides on: ids, messages, error objects and the error
//! codes of JSON-RPC itself and of SPEC Appendix A.
//!
//! Messages are classified from a `serde_json::Value` by hand ([`Message::from_value`]) so
//! that every distinction the wire makes survives: `0` is a valid id, `"1"` and `1` are
//! different ids, and absent `params` differs from `"params": null`. [`Message::parse_object`]
//! is the same classification read straight from the text (issue #8): it accepts only what
//! `from_value` accepts, as the same message, and declines everything else.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A request id: a JSON number or a JSON string. The two never compare equal. Equality
/// here is `serde_json`'s, near the representation (`7` and `7.0` differ, though `0.0` and
/// `-0.0` do not); whether two ids are one request in flight is by their value
/// (`jsonrpc::identity::Identity`, the one rule of the peer and both sans-I/O machines).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id: an integer within 64 bits, kept exactly as received (`0` is valid);
    /// for a request received, also a number with a fraction or an exponent, held as a
    /// double and echoed as it ([`request_id_number`]).
    Number(serde_json::Number),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON value; only strings and integers within 64 bits are ids (a
    /// number this crate could not echo digit for digit is not one).
    pub fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::Number(n) if exact_id(n) => Some(RequestId::Number(n.clone())),
            Value::String(s) => Some(RequestId::String(s.clone())),
            _ => None,
        }
    }

    /// Reads the id of a request (or of what names one received, such as a cancellation's
    /// `requestId`): as [`RequestId::from_value`], and also a number that is no integer
    /// within 64 bits when [`request_id_number`] takes it (`2.0`, `2.5`, `-3.0`). Never
    /// for a response's id, which is read against the ids we sent
    /// ([`whole_float_integer`]).
    pub fn from_request_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::Number(n) if request_id_number(n) => Some(RequestId::Number(n.clone())),
            v => RequestId::from_value(v),
        }
    }

    /// Whether the id is a number written with a fraction or an exponent: one JSON-RPC 2.0
    /// §4 says SHOULD NOT be used, taken on a request ([`request_id_number`]) and reported
    /// for its form.
    pub fn is_fractional(&self) -> bool {
        matches!(self, RequestId::Number(n) if !exact_id(n))
    }

    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::Number(n.clone()),
            RequestId::String(s) => Value::String(s.clone()),
        }
    }
}

/// Whether a numeric id is kept exactly: an integer that fits `i64` or `u64`. Without
/// `arbitrary_precision` anything else is held as a double, so `18446744073709551617` would
/// be echoed as `1.8446744073709552e19`, and two distinct ids could become one. Reading:
/// JSON-RPC 2.0 §4 says numeric ids SHOULD NOT have fractions: such an id is refused where
/// an id is read exactly ([`RequestId::from_value`], a response's, which names a request of
/// ours), and taken on a request received when [`request_id_number`] takes it.
fn exact_id(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64()
}

/// The one rule for a numeric id of a request received (JSON-RPC 2.0 §4, §5). §4 allows a
/// Number and says it SHOULD NOT contain a fractional part: a SHOULD NOT, so such a request
/// is valid, taken, and answered under the same value (§5) — the number as parsed, a
/// double, which `serde_json` writes back as it reads (`2.0` as `2.0`, `2.5` as `2.5`; a
/// fraction finer than a double holds is answered as the double it rounds to, as a
/// JavaScript peer reads it). Refused, as before: a number no double holds (`1e400`,
/// refused by the parser) and a whole value of magnitude 2^53 or more written with a
/// fraction or an exponent (`9007199254740993.0`, `1e30`): a double there may stand for
/// several integers, so it could not be echoed as the same value (the bound
/// [`whole_float_integer`] reads responses by). The form is reported
/// ([`RequestId::is_fractional`]). A response's id is never read so: it names a request
/// of ours (§5), read exactly, or as the integer a whole float writes
/// ([`whole_float_integer`]).
pub fn request_id_number(n: &serde_json::Number) -> bool {
    exact_id(n)
        || whole_float_integer(n).is_some()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() != 0.0)
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n.into())
    }
}

impl From<u64> for RequestId {
    fn from(n: u64) -> Self {
        RequestId::Number(n.into())
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// JSON-RPC 2.0 error codes and the MCPL codes of SPEC Appendix A.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid Request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal JSON-RPC error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// App. A: the message used a disabled feature set; `data: { featureSet }`.
    pub const FEATURE_SET_NOT_ENABLED: i64 = -32001;
    /// App. A / §5.4: the method needs a capability outside the grant; `data: { capability }`.
    pub const CAPABILITY_DENIED: i64 = -32002;
    /// App. A: the message used an undeclared feature set.
    pub const UNKNOWN_FEATURE_SET: i64 = -32003;
    /// App. A / §8.6: rollback targeted a pruned or unknown checkpoint.
    pub const CHECKPOINT_NOT_FOUND: i64 = -32005;
    /// App. A / §14.6: lacking scope to publish or observe a channel.
    pub const CHANNEL_NOT_PERMITTED: i64 = -32017;
    /// App. A / §14.6: the channel id does not exist or is not registered.
    pub const UNKNOWN_CHANNEL: i64 = -32023;
    /// App. A / §14.6: the server could not open the requested channel.
    pub const CHANNEL_OPEN_FAILED: i64 = -32024;
    /// The receiver is busy: too much of the sender's work is already in flight
    /// ([`crate::peer::PeerConfig::max_in_flight_requests`]); `data: { limit }`. Not an
    /// Appendix A code: JSON-RPC 2.0 leaves -32000 to -32099 to implementations, Appendix A
    /// uses none at -32000, and this crate reads a request refused this way as "retry later".
    pub const BUSY: i64 = -32000;
    /// The requester cancelled the request (MCP `notifications/cancelled`); the answer it
    /// still gets, which it ignores. No JSON-RPC 2.0 code names it; this is the one LSP's
    /// `RequestCancelled` uses, and the `mcpl-rmcp` bridge's.
    pub const REQUEST_CANCELLED: i64 = -32800;
}

/// A JSON-RPC error object. `data` is kept verbatim in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct ErrorObject {
    /// The error code.
    pub code: i64,
    /// A short description.
    pub message: Cow<'static, str>,
    /// Extra structured information, omitted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and a message and no data.
    pub fn new(code: i64, message: impl Into<Cow<'static, str>>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32700`: the line was not JSON.
    pub fn parse_error(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(codes::PARSE_ERROR, detail)
    }

    /// `-32600`: the message is not a valid JSON-RPC 2.0 message.
    pub fn invalid_request(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(codes::INVALID_REQUEST, detail)
    }

    /// `-32600` worded as the peer and a sans-I/O driver word every one they answer:
    /// `Invalid Request: {reason}`.
    pub fn invalid_request_because(reason: impl std::fmt::Display) -> Self {
        Self::invalid_request(format!("Invalid Request: {reason}"))
    }

    /// `-32800` ([`codes::REQUEST_CANCELLED`]): the answer to a request its sender
    /// cancelled.
    pub fn request_cancelled() -> Self {
        Self::new(codes::REQUEST_CANCELLED, "the request was cancelled")
    }

    /// `-32601` for `method`, with `data: { method }`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
        .with_data(serde_json::json!({ "method": method }))
    }

    /// `-32602`: the params did not match the method.
    pub fn invalid_params(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(codes::INVALID_PARAMS, detail)
    }

    /// `-32000` ([`codes::BUSY`]) with `data: { limit }`: refused unprocessed because `limit`
    /// requests were already in flight.
    pub fn busy(limit: usize) -> Self {
        Self::new(
            codes::BUSY,
            format!("Busy: {limit} requests already in flight; retry later"),
        )
        .with_data(serde_json::json!({ "limit": limit }))
    }

    /// `-32000` (busy) for a request arriving while the requests in flight weigh `bytes`,
    /// past `limit` (`peer::PeerConfig::max_in_flight_bytes`); `data: { limit, bytes,
    /// reason: "in_flight_bytes" }`.
    pub fn busy_bytes(bytes: usize, limit: usize) -> Self {
        Self::new(
            codes::BUSY,
            format!("Busy: the requests in flight weigh {bytes} bytes, the limit is {limit}; retry later"),
        )
        .with_data(serde_json::json!({ "limit": limit, "bytes": bytes, "reason": "in_flight_bytes" }))
    }

    /// `-32602` for a list over its bound: `what` had `count` entries, more than `limit`;
    /// `data: { limit, count }`.
    pub fn too_many(what: &str, limit: usize, count: usize) -> Self {
        Self::invalid_params(format!(
            "{what}: {count} entries exceed the limit of {limit}"
        ))
        .with_data(serde_json::json!({ "limit": limit, "count": count }))
    }

    /// `-32603`: the handler failed.
    pub fn internal(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(codes::INTERNAL_ERROR, detail)
    }

    /// `-32001` (App. A, §6.6) with `data: { featureSet }`.
    pub fn feature_set_not_enabled(feature_set: &str) -> Self {
        Self::new(codes::FEATURE_SET_NOT_ENABLED, "Feature set not enabled")
            .with_data(serde_json::json!({ "featureSet": feature_set }))
    }

    /// `-32002` (App. A, §5.4) with `data: { capability }`.
    pub fn capability_denied(capability: &str) -> Self {
        Self::new(codes::CAPABILITY_DENIED, "Capability denied")
            .with_data(serde_json::json!({ "capability": capability }))
    }

    /// `-32002` for a use the exercising feature set did not declare (§6.4 rule 2), naming
    /// the capability and the set: `data: { capability, featureSet, reason:
    /// "declaration_mismatch" }`.
    pub fn declaration_mismatch(capability: &str, feature_set: &str) -> Self {
        Self::capability_denied(capability).with_data(serde_json::json!({
            "capability": capability,
            "featureSet": feature_set,
            "reason": "declaration_mismatch",
        }))
    }

    /// `-32003` (App. A, §6.6) with `data: { featureSet }`.
    pub fn unknown_feature_set(feature_set: &str) -> Self {
        Self::new(codes::UNKNOWN_FEATURE_SET, "Unknown feature set")
            .with_data(serde_json::json!({ "featureSet": feature_set }))
    }

    /// `-32005` (App. A, §8.6) with `data: { checkpoint }`.
    pub fn checkpoint_not_found(checkpoint: &str) -> Self {
        Self::new(codes::CHECKPOINT_NOT_FOUND, "Checkpoint not found")
            .with_data(serde_json::json!({ "checkpoint": checkpoint }))
    }

    /// `-32017` (App. A, §14.6) with `data: { channelId }`.
    pub fn channel_not_permitted(channel_id: &str) -> Self {
        Self::new(codes::CHANNEL_NOT_PERMITTED, "Channel not permitted")
            .with_data(serde_json::json!({ "channelId": channel_id }))
    }

    /// `-32023` (App. A, §14.6) with `data: { channelId }`.
    pub fn unknown_channel(channel_id: &str) -> Self {
        Self::new(codes::UNKNOWN_CHANNEL, "Unknown channel")
            .with_data(serde_json::json!({ "channelId": channel_id }))
    }

    /// `-32024` (App. A, §14.6) with `data: { channelId }`.
    pub fn channel_open_failed(channel_id: &str) -> Self {
        Self::new(codes::CHANNEL_OPEN_FAILED, "Channel open failed")
            .with_data(serde_json::json!({ "channelId": channel_id }))
    }
}

/// A request: carries an id and expects exactly one response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The id the response must echo.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// `None` when the member was absent; `Some(Value::Null)` when it was `null`.
    pub params: Option<Value>,
}

/// A notification: no id, no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// `None` when the member was absent; `Some(Value::Null)` when it was `null`.
    pub params: Option<Value>,
}

impl Request {
    /// The params decoded as `P` (absent params read as `null`); `-32602` otherwise.
    pub fn params_as<P: DeserializeOwned>(&self) -> Result<P, ErrorObject> {
        params_of(self.params.as_ref())
    }
}

impl Notification {
    /// The params decoded as `P` (absent params read as `null`); `-32602` otherwise.
    pub fn params_as<P: DeserializeOwned>(&self) -> Result<P, ErrorObject> {
        params_of(self.params.as_ref())
    }
}

/// A response: the id of the request and either a result or an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The id of the request answered. `None` only for errors about a message whose id
    /// could not be read (JSON-RPC sends `"id": null` then).
    pub id: Option<RequestId>,
    /// The outcome.
    pub outcome: Result<Value, ErrorObject>,
}

/// Any single JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response (result or error).
    Response(Response),
}

/// Why a JSON value is not a valid JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid JSON-RPC message: {reason}; the sender must send a JSON-RPC 2.0 object (\"jsonrpc\": \"2.0\" with a method, or an id with a result or an error)")]
pub struct InvalidMessage {
    /// The id, when one could be read, so the receiver can answer `-32600`.
    pub id: Option<RequestId>,
    /// What was wrong.
    pub reason: String,
}

impl InvalidMessage {
    /// The `-32600` error it is answered with (`Invalid Request: {reason}`): the one text of
    /// the peer and of a driver of the sans-I/O machines ([`ParseError::answer`]).
    pub fn answer_error(&self) -> ErrorObject {
        ErrorObject::invalid_request_because(&self.reason)
    }
}

fn invalid(id: Option<RequestId>, reason: impl Into<String>) -> InvalidMessage {
    InvalidMessage {
        id,
        reason: reason.into(),
    }
}

/// The envelope members [`Message::from_value`] looks at, taken out of one JSON object.
///
/// Both the slow path (a parsed `Value`) and the fast path ([`Message::parse_object`]) reduce
/// a text to these parts and hand them to one validating function ([`Parts::into_message`]), so
/// the two can only differ in how they read the members, never in what they accept.
#[derive(Default)]
struct Parts {
    /// Whether `"jsonrpc"` is present and exactly the string `"2.0"`.
    jsonrpc_2_0: bool,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Parts {
    /// Takes the envelope members out of `obj`; every other member is ignored.
    fn from_object(obj: &mut Map<String, Value>) -> Parts {
        Parts {
            jsonrpc_2_0: matches!(obj.get("jsonrpc"), Some(Value::String(v)) if v == "2.0"),
            id: obj.remove("id"),
            method: obj.remove("method"),
            params: obj.remove("params"),
            result: obj.remove("result"),
            error: obj.remove("error"),
        }
    }

    /// Validates the members and builds the message: the single body of both parse paths.
    fn into_message(self) -> Result<Message, InvalidMessage> {
        let Parts {
            jsonrpc_2_0,
            id,
            method,
            params,
            result,
            error,
        } = self;
        let id = match id {
            None => None,
            Some(v) => Some(read_id(v, method.is_some())?),
        };
        // Cloned only on the way to an error, so a valid message never copies its id.
        let known_id = || id.clone().flatten();
        if !jsonrpc_2_0 {
            return Err(invalid(known_id(), "\"jsonrpc\" must be \"2.0\""));
        }
        if let Some(method) = method {
            let Value::String(method) = method else {
                return Err(invalid(known_id(), "method must be a string"));
            };
            // Only the type: what was parsed from text is as deep as the reader allows
            // (a value built in memory is checked where it is sent, by `params_shape`).
            if params.as_ref().is_some_and(|p| params_type(p).is_err()) {
                return Err(invalid(known_id(), "params must be an object or an array"));
            }
            return match id {
                None => Ok(Message::Notification(Notification { method, params })),
                Some(Some(id)) => Ok(Message::Request(Request { id, method, params })),
                Some(None) => Err(invalid(None, "a request id must not be null")),
            };
        }
        let Some(id) = id else {
            return Err(invalid(None, "message has neither method nor id"));
        };
        let outcome = match (result, error) {
            (Some(r), None) => Ok(r),
            (None, Some(e)) => match serde_json::from_value::<ErrorObject>(e) {
                Ok(e) => Err(e),
                Err(err) => return Err(invalid(id, format!("malformed error object: {err}"))),
            },
            (Some(_), Some(_)) => return Err(invalid(id, "response has both result and error")),
            (None, None) => return Err(invalid(id, NO_METHOD_NOR_OUTCOME)),
        };
        Ok(Message::Response(Response { id, outcome }))
    }
}

/// Why a request's numeric id is refused: what [`request_id_number`] takes, and what it
/// does not (no double holds the value as one integer, so it could not be answered under
/// the same value, JSON-RPC 2.0 §5).
const REQUEST_ID_NUMBER_REFUSED: &str = "a request's numeric id must be an integer within 64 \
     bits, or written with a fraction or an exponent either not whole or a whole value under \
     2^53 (refused: an integer past 64 bits, and a whole value of 2^53 or more written with a \
     fraction or an exponent, such as 1e30, which could not be answered under the same value)";

/// The one rule for an envelope's `id` member as received: `null`, an integer within 64
/// bits, or a string of at most [`MAX_ID_BYTES`]; on a request (`request`: a `method` is
/// present) also a number [`request_id_number`] takes; anything else makes the message
/// invalid.
fn read_id(id: Value, request: bool) -> Result<Option<RequestId>, InvalidMessage> {
    match id {
        Value::Null => Ok(None),
        Value::Number(n) if exact_id(&n) => Ok(Some(RequestId::Number(n))),
        Value::Number(n) if request && request_id_number(&n) => Ok(Some(RequestId::Number(n))),
        Value::Number(_) if request => Err(invalid(None, REQUEST_ID_NUMBER_REFUSED)),
        Value::Number(_) => Err(invalid(
            None,
            "a response's numeric id must be an integer within 64 bits (it names a request \
             by the id it was sent under)",
        )),
        Value::String(s) if s.len() > MAX_ID_BYTES => Err(invalid(
            None,
            format!(
                "a string id may be at most {MAX_ID_BYTES} bytes; this one is {}",
                s.len()
            ),
        )),
        Value::String(s) => Ok(Some(RequestId::String(s))),
        _ => Err(invalid(None, "id must be a number, a string or null")),
    }
}

/// The fast path's reading of one JSON object into [`Parts`], straight from the text.
///
/// It fails (and the caller falls back to the slow path) on anything it is not sure reads
/// exactly like `serde_json::Value` would: a duplicated envelope member (a `Value` keeps the
/// last one), a `"jsonrpc"` that is not the string `"2.0"`, or any syntax error. Every member
/// value it keeps, and every unknown member it skips, is read as a `Value` by the same
/// deserializer, so numbers (`float_roundtrip`), escapes, depth and range limits are exactly
/// those of the slow path.
struct FastParts(Parts);

/// One member name of the envelope, after unescaping (so `"m\u0065thod"` is `method`).
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// A string member that is exactly `self.0` (after unescaping); anything else is an error,
/// which sends the fast readers' text the `Value` way.
struct ExactStr(&'static str);

/// A `"jsonrpc"` member that is exactly the string `"2.0"`.
const JSONRPC_2_0: ExactStr = ExactStr("2.0");

impl<'de> serde::de::DeserializeSeed<'de> for ExactStr {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for ExactStr {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the string {:?}", self.0)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        if v == self.0 {
            Ok(())
        } else {
            Err(E::custom(format_args!("not the string {:?}", self.0)))
        }
    }
}

impl<'de> Deserialize<'de> for FastParts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FastParts, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = FastParts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC 2.0 message object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FastParts, A::Error> {
                fn put<E: serde::de::Error>(slot: &mut Option<Value>, v: Value) -> Result<(), E> {
                    if slot.is_some() {
                        return Err(E::custom("duplicate envelope member"));
                    }
                    *slot = Some(v);
                    Ok(())
                }
                let mut p = Parts::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Jsonrpc => {
                            if p.jsonrpc_2_0 {
                                return Err(serde::de::Error::custom("duplicate envelope member"));
                            }
                            map.next_value_seed(JSONRPC_2_0)?;
                            p.jsonrpc_2_0 = true;
                        }
                        Key::Id => put(&mut p.id, map.next_value()?)?,
                        Key::Method => put(&mut p.method, map.next_value()?)?,
                        Key::Params => put(&mut p.params, map.next_value()?)?,
                        Key::Result => put(&mut p.result, map.next_value()?)?,
                        Key::Error => put(&mut p.error, map.next_value()?)?,
                        // Read as a `Value`, not skipped: skipping validates less (an
                        // out-of-range number like `1e400` is an error only for `Value`).
                        Key::Other => drop(map.next_value::<Value>()?),
                    }
                }
                Ok(FastParts(p))
            }
        }
        d.deserialize_map(V)
    }
}

impl Message {
    /// Classifies one JSON value as a message, checking `"jsonrpc": "2.0"` and the shape of
    /// each member. Batches (arrays) are not messages; callers split them first.
    pub fn from_value(value: Value) -> Result<Message, InvalidMessage> {
        let Value::Object(mut obj) = value else {
            return Err(invalid(None, "message is not a JSON object"));
        };
        Parts::from_object(&mut obj).into_message()
    }

    /// The fast path for one JSON text holding a single message object: reads the envelope
    /// straight from the text, without building the outer object as a `Value`.
    ///
    /// Returns `None` for anything but a well-formed, valid single message (not JSON, not an
    /// object, an invalid message, a duplicated envelope member): the caller then runs the
    /// slow path (`serde_json::from_str::<Value>` and [`Message::from_value`]) for its
    /// diagnostics. Whenever this returns `Some(m)`, the slow path returns `Ok(m)` for the
    /// same text (issue #8; pinned by the equivalence tests).
    ///
    /// A message deciding authority (the policy, `featureSets/update`) is declined too: the
    /// slow path reads its whole text for a member named twice (`jsonrpc::doubled`, §5.4).
    pub fn parse_object(text: &str) -> Option<Message> {
        let FastParts(parts) = serde_json::from_str(text).ok()?;
        let msg = parts.into_message().ok()?;
        (!doubled::decides_authority(msg.method())).then_some(msg)
    }

    /// Parses one JSON text as a single message (the fast path first, then the slow one),
    /// read past what precedes and follows it as the async peer reads a frame's text (JSON
    /// whitespace and one UTF-8 byte order mark before it, RFC 8259 §2, §8.1; JSON
    /// whitespace after it): one reading, so a driver of the sans-I/O machines takes what
    /// the peer takes. A message after other whitespace (a no-break space) is no JSON text:
    /// [`ParseError::Json`], owed what the peer answers ([`ParseError::owed_answer`]).
    pub fn parse(text: &str) -> Result<Message, ParseError> {
        let (text, json_lead) = message_read(text);
        if json_lead {
            if let Some(m) = Message::parse_object(text) {
                return Ok(m);
            }
        }
        // Refused for its lead before it is parsed, in the peer's order (`lead_refused`
        // reads it whole, as the peer does): a `Value` refuses more (nesting past the
        // parser, a number out of range, a lone surrogate), which would answer such a
        // request otherwise than the peer does (RFC 8259 §2; JSON-RPC 2.0 §5).
        if !json_lead && lead::lead_refused(text).is_some() {
            return Err(ParseError::Json(LEAD_REFUSED.to_owned()));
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
        if !json_lead {
            return Err(ParseError::Json(LEAD_REFUSED.to_owned()));
        }
        // What a `Value` loses: a request's member named twice (only a request-shaped
        // object, or an id with no method nor outcome, is read again).
        let asks = value.get("method").is_some() || Shape::of(&value).bare();
        // A message deciding authority is read whole (`doubled::decides_authority`).
        let doubled = asks.then(|| doubled::doubled_in(text, &value)).flatten();
        doubled::from_value_read(value, doubled).map_err(ParseError::Invalid)
    }

    /// The message as a JSON value, exactly as it goes on the wire.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("jsonrpc".into(), Value::String("2.0".into()));
        match self {
            Message::Request(r) => {
                obj.insert("id".into(), r.id.to_value());
                obj.insert("method".into(), Value::String(r.method.clone()));
                if let Some(p) = &r.params {
                    obj.insert("params".into(), p.clone());
                }
            }
            Message::Notification(n) => {
                obj.insert("method".into(), Value::String(n.method.clone()));
                if let Some(p) = &n.params {
                    obj.insert("params".into(), p.clone());
                }
            }
            Message::Response(r) => {
                obj.insert(
                    "id".into(),
                    r.id.as_ref().map_or(Value::Null, RequestId::to_value),
                );
                match &r.outcome {
                    Ok(v) => {
                        obj.insert("result".into(), v.clone());
                    }
                    Err(e) => {
                        obj.insert(
                            "error".into(),
                            serde_json::to_value(e).unwrap_or(Value::Null),
                        );
                    }
                }
            }
        }
        Value::Object(obj)
    }

    /// The message as one line of JSON text (no trailing newline).
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }

    /// The method name, for requests and notifications.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }
}

/// Why a text is not a message: not JSON at all, or JSON of the wrong shape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// The text is not JSON (answered `-32700` where an answer is possible).
    #[error("not JSON: {0}; the sender must send one JSON value per message (one line on stdio and TCP)")]
    Json(String),
    /// JSON, but not a JSON-RPC 2.0 message (answered `-32600` when it carries an id).
    #[error(transparent)]
    Invalid(InvalidMessage),
}

/// Why an object with an id and neither a `method` nor a `result` or an `error` is no
/// message: it is no Request object (JSON-RPC 2.0 §4) nor a Response object (§5).
const NO_METHOD_NOR_OUTCOME: &str = "a message with an id needs a \"method\" (a request) or a \
     \"result\" or an \"error\" (a response); this one has none of them";

/// Whether a message read as `value` that is no valid one is answered (`-32600`): one with
/// a `method` member, or no object at all (JSON-RPC 2.0 §5, whose own example answers
/// `{"jsonrpc":"2.0","method":1,"params":"bar"}` under a null id). A response gone wrong is
/// never answered (that could loop), nor an object with no `method` (a log line, say). The
/// one rule of the peer and [`ParseError::owed_answer`].
pub(crate) fn request_like(value: &Value) -> bool {
    value.get("method").is_some() || !value.is_object()
}

/// Deepest nesting of arrays and objects a message's `params`, `result` or error `data` may
/// have: the message around it is one level more, and serde_json (this crate's reader, and
/// rmcp's) reads no text nested past 127 levels. A peer answers such a request `-32700`
/// with `"id": null`, so it would wait for its timeout: this crate sends none, and reads
/// none from a `Value` either.
pub const MAX_MEMBER_NESTING: usize = 126;

/// Longest string `id` a message read may carry, in bytes. JSON-RPC 2.0 sets no length, but
/// a session keeps a request's id until it is answered, in several places (the request in
/// flight, its handler, its answer), so each of the in-flight requests a connection allows
/// could otherwise hold a whole message's worth. A request with a longer id is an Invalid
/// Request, answered `-32600` with `id: null` (§5: its id cannot be used); a response with
/// one answers no request of this crate's, whose ids are short.
pub const MAX_ID_BYTES: usize = 1024;

/// Whether `v` nests arrays and objects at most `limit` levels deep (a scalar is 0, `[]`
/// is 1). Stops descending past `limit`, so a value of any depth is read within `limit`
/// calls deep.
pub fn nests_within(v: &Value, limit: usize) -> bool {
    // Scalars are skipped where they are met: only containers cost a call.
    let within = |x: &Value| match x {
        Value::Array(_) | Value::Object(_) => nests_within(x, limit - 1),
        _ => true,
    };
    match v {
        Value::Array(a) => limit > 0 && a.iter().all(within),
        Value::Object(o) => limit > 0 && o.values().all(within),
        _ => true,
    }
}

/// Why a value cannot be a message's `params` member ([`params_shape`]); its `Display` is
/// the one text every send path refuses it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParamsDefect {
    /// A scalar, its JSON type named (JSON-RPC 2.0 §4.2: an object or an array).
    #[error("params must be a JSON object or array (JSON-RPC 2.0 §4.2), not a {0}")]
    Scalar(&'static str),
    /// Arrays and objects nested past [`MAX_MEMBER_NESTING`] levels.
    #[error("params nest arrays and objects deeper than {MAX_MEMBER_NESTING} levels, which this crate and serde_json-based peers cannot read: send them flatter")]
    TooDeep,
}

/// Whether `params` can be a message's `params` member (JSON-RPC 2.0 §4.2: a structured
/// value, an object or an array, nested at most [`MAX_MEMBER_NESTING`] levels; `null` is
/// read as given, as many peers send it). The one rule for what is sent (the peer's
/// senders and both sessions' outbound gates); what is read is held to its type part
/// ([`Message::from_value`], [`Message::parse`]), the parser having bounded the depth.
pub fn params_shape(params: &Value) -> Result<(), ParamsDefect> {
    params_type(params)?;
    if nests_within(params, MAX_MEMBER_NESTING) {
        Ok(())
    } else {
        Err(ParamsDefect::TooDeep)
    }
}

/// The type part of [`params_shape`]: an object, an array or `null`.
fn params_type(params: &Value) -> Result<(), ParamsDefect> {
    match params {
        Value::Object(_) | Value::Array(_) | Value::Null => Ok(()),
        other => Err(ParamsDefect::Scalar(json_type_name(other))),
    }
}

/// Why `outcome` cannot be sent as the answer to a request: a result or error `data` nested
/// past [`MAX_MEMBER_NESTING`] levels, which the peer could not read (so its request would
/// wait for its timeout). `None` when it can.
pub fn outcome_defect(outcome: &Result<Value, ErrorObject>) -> Option<String> {
    let what = match outcome {
        Ok(v) if !nests_within(v, MAX_MEMBER_NESTING) => "result",
        Err(ErrorObject { data: Some(d), .. }) if !nests_within(d, MAX_MEMBER_NESTING) => {
            "error data"
        }
        _ => return None,
    };
    Some(format!(
        "the {what} nests arrays and objects deeper than {MAX_MEMBER_NESTING} levels, which the peer cannot read"
    ))
}

/// The outcome to send as the answer to a request, and why it was replaced if it was: one
/// with an [`outcome_defect`] becomes `-32603` saying so, for the caller to report. The one
/// rule of every answer path (the peer's writer and both state machines').
pub fn outcome_to_send(
    outcome: Result<Value, ErrorObject>,
) -> (Result<Value, ErrorObject>, Option<String>) {
    match outcome_defect(&outcome) {
        None => (outcome, None),
        Some(reason) => (Err(answer_not_sent(&reason)), Some(reason)),
    }
}

/// The `-32603` sent instead of an answer with an [`outcome_defect`] (`reason`).
pub fn answer_not_sent(reason: &str) -> ErrorObject {
    ErrorObject::internal(format!("{reason}: not sent"))
}

/// The `params` member to send for `params`: `null` is sent as no member at all. JSON-RPC
/// 2.0 §4.2 allows an object, an array or no member, and stricter peers (schema-validating
/// SDKs) refuse `"params": null`, which this crate still reads as given. The one rule of
/// every send path (the peer's and both state machines').
pub fn params_to_send(params: Option<Value>) -> Option<Value> {
    params.filter(|p| !p.is_null())
}

/// The name of a JSON value's type (`null`, `boolean`, `number`, `string`, `array`,
/// `object`), for error messages and findings.
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Deserialises `params` into `P`, treating absent params as `null` (so `Option`/unit
/// params accept a missing member). Errors become `-32602`. Owned params are decoded by
/// moving their strings and members into `P`, not copying them (issue #24); the outcome and
/// the error text are those of [`params_of`].
pub fn parse_params<P: DeserializeOwned>(params: Option<Value>) -> Result<P, ErrorObject> {
    let value = params.unwrap_or(Value::Null);
    let null = value.is_null();
    P::deserialize(value).or_else(|e| {
        // A method whose params are all optional accepts absent/null params as `{}`.
        if null {
            P::deserialize(Value::Object(Map::new()))
                .map_err(|_| ErrorObject::invalid_params(format!("invalid params: {e}")))
        } else {
            Err(ErrorObject::invalid_params(format!("invalid params: {e}")))
        }
    })
}

/// [`parse_params`] reading borrowed params: decodes straight from the tree, copying only
/// what `P` keeps.
pub fn params_of<P: DeserializeOwned>(params: Option<&Value>) -> Result<P, ErrorObject> {
    let value = params.unwrap_or(&Value::Null);
    P::deserialize(value).or_else(|e| {
        // A method whose params are all optional accepts absent/null params as `{}`.
        if value.is_null() {
            P::deserialize(&Value::Object(Map::new()))
                .map_err(|_| ErrorObject::invalid_params(format!("invalid params: {e}")))
        } else {
            Err(ErrorObject::invalid_params(format!("invalid params: {e}")))
        }
    })
}

// Without the runtime only a batch-first text's requests are read (`owed_answers`).
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) mod batch;
mod budget;
mod cost;
pub(crate) mod doubled;
mod encoded;
pub(crate) mod head;
mod identity;
pub use identity::{Identity, InFlightId};
mod invalid;
pub use invalid::{invalid_then, InvalidThen, Shape};
mod lead;
mod owed;
pub use owed::OwedAnswer;
pub mod repeated;
mod several;
pub use head::{discarded_is_batch, discarded_refusal, refusal_of, whole_float_integer, Refusal};
pub use several::{several_values, trailing_detail, Several};
// The runtime's transports and peer read it whole; without them only the reading of a
// refused text's id (`unparsed`) is used.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) mod envelope;
#[cfg(feature = "runtime")]
mod hot;
pub(crate) mod unparsed;
pub(crate) use cost::held_bytes;
pub use cost::{
    may_exceed, parsed_bytes, parsed_cost, DEFAULT_MAX_PARSED_COST, OBJECT_COST, UNIT_BYTES,
};
pub use encoded::Encoded;
#[cfg(feature = "runtime")]
pub(crate) use hot::{parse_answer, parse_lifecycle, parse_tools_call, read_tools_call_result};
#[cfg(feature = "runtime")]
pub(crate) use lead::lead_refused;
pub(crate) use lead::{lead_refusal, message_start, message_text, LEAD_REFUSED};
pub use lead::{message_lead, message_read};
pub use unparsed::{not_text_answer, not_text_request_id, refused_request_id, too_deep};

#[cfg(test)]
mod tests;
