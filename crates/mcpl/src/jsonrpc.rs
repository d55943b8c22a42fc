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

/// A request id: a JSON number or a JSON string. The two never compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id: an integer within 64 bits, kept exactly as received (`0` is valid).
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
/// JSON-RPC 2.0 §4 says numeric ids SHOULD NOT have fractions; such ids are refused.
fn exact_id(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64()
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
#[error("invalid JSON-RPC message: {reason}")]
pub struct InvalidMessage {
    /// The id, when one could be read, so the receiver can answer `-32600`.
    pub id: Option<RequestId>,
    /// What was wrong.
    pub reason: String,
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
            Some(Value::Null) => Some(None),
            Some(Value::Number(n)) if exact_id(&n) => Some(Some(RequestId::Number(n))),
            Some(Value::Number(_)) => return Err(invalid(
                None,
                "a numeric id must be an integer within 64 bits (it could not be echoed exactly)",
            )),
            Some(Value::String(s)) => Some(Some(RequestId::String(s))),
            Some(_) => return Err(invalid(None, "id must be a number, a string or null")),
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
            if let Some(p) = &params {
                if !(p.is_object() || p.is_array() || p.is_null()) {
                    return Err(invalid(known_id(), "params must be an object or an array"));
                }
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
            (None, None) => return Err(invalid(id, "response has neither result nor error")),
        };
        Ok(Message::Response(Response { id, outcome }))
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

/// A `"jsonrpc"` member that is exactly the string `"2.0"`; anything else is a (fallback) error.
struct Version2;

impl<'de> Deserialize<'de> for Version2 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Version2, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Version2;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the string \"2.0\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Version2, E> {
                if v == "2.0" {
                    Ok(Version2)
                } else {
                    Err(E::custom("jsonrpc is not \"2.0\""))
                }
            }
        }
        d.deserialize_str(V)
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
                            map.next_value::<Version2>()?;
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
    pub fn parse_object(text: &str) -> Option<Message> {
        let FastParts(parts) = serde_json::from_str(text).ok()?;
        parts.into_message().ok()
    }

    /// Parses one JSON text as a single message (the fast path first, then the slow one).
    pub fn parse(text: &str) -> Result<Message, ParseError> {
        if let Some(m) = Message::parse_object(text) {
            return Ok(m);
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
        Message::from_value(value).map_err(ParseError::Invalid)
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
    #[error("not JSON: {0}")]
    Json(String),
    /// JSON, but not a JSON-RPC 2.0 message (answered `-32600` when it carries an id).
    #[error(transparent)]
    Invalid(InvalidMessage),
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
/// params accept a missing member). Errors become `-32602`.
pub fn parse_params<P: DeserializeOwned>(params: Option<Value>) -> Result<P, ErrorObject> {
    params_of(params.as_ref())
}

/// [`parse_params`] reading borrowed params: decodes straight from the tree, without the
/// deep copy an owned decode needs.
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_type_names_follow_the_json_vocabulary() {
        let names: Vec<&str> = [
            json!(null),
            json!(true),
            json!(0),
            json!("s"),
            json!([]),
            json!({}),
        ]
        .iter()
        .map(json_type_name)
        .collect();
        assert_eq!(
            names,
            ["null", "boolean", "number", "string", "array", "object"]
        );
    }

    #[test]
    fn zero_is_a_valid_id_and_string_one_differs_from_number_one() {
        let m = Message::from_value(json!({"jsonrpc":"2.0","id":0,"method":"ping"})).unwrap();
        let Message::Request(r) = m else {
            panic!("not a request")
        };
        assert_eq!(r.id, RequestId::from(0i64));
        assert_ne!(RequestId::from("1"), RequestId::from(1i64));
    }

    #[test]
    fn absent_and_null_params_are_distinguished() {
        let a = Message::from_value(json!({"jsonrpc":"2.0","method":"x"})).unwrap();
        let b = Message::from_value(json!({"jsonrpc":"2.0","method":"x","params":null})).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.to_value(), json!({"jsonrpc":"2.0","method":"x"}));
        assert_eq!(
            b.to_value(),
            json!({"jsonrpc":"2.0","method":"x","params":null})
        );
    }

    #[test]
    fn error_data_round_trips() {
        let e = ErrorObject::capability_denied("pushEvents");
        let m = Message::Response(Response {
            id: Some(7i64.into()),
            outcome: Err(e.clone()),
        });
        let back = Message::parse(&m.to_json()).unwrap();
        let Message::Response(r) = back else { panic!() };
        assert_eq!(r.outcome, Err(e));
    }

    #[test]
    fn notification_params_decode_or_give_32602() {
        let n = Notification {
            method: "x".into(),
            params: Some(json!({"a": 1})),
        };
        let ok: std::collections::BTreeMap<String, i64> = n.params_as().unwrap();
        assert_eq!(ok["a"], 1);
        let err = n.params_as::<Vec<i64>>().unwrap_err();
        assert_eq!(err.code, codes::INVALID_PARAMS);
    }

    #[test]
    fn invalid_message_keeps_its_id() {
        let err = Message::from_value(json!({"jsonrpc":"1.0","id":"a","method":"x"})).unwrap_err();
        assert_eq!(err.id, Some(RequestId::from("a")));
    }

    /// The slow path exactly as `peer::handle_frame` runs it when the fast path declines.
    fn slow(text: &str) -> Result<Message, ParseError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
        Message::from_value(value).map_err(ParseError::Invalid)
    }

    /// Runs both paths and asserts the contract: a fast `Some(m)` means a slow `Ok(m)`, down to
    /// the printed text (`Number` equality alone would let `-0.0` pass for `0.0`).
    fn both(text: &str) -> (Option<Message>, Result<Message, ParseError>) {
        let fast = Message::parse_object(text);
        let slow = slow(text);
        if let Some(m) = &fast {
            assert_eq!(slow.as_ref(), Ok(m), "fast path accepted {text}");
            assert_eq!(
                slow.as_ref().map(Message::to_json),
                Ok(m.to_json()),
                "{text}"
            );
        }
        assert_eq!(
            Message::parse(text),
            slow,
            "parse differs from the slow path: {text}"
        );
        (fast, slow)
    }

    /// A text both paths accept, as the same message.
    fn fast_ok(text: &str) -> Message {
        let (fast, _) = both(text);
        fast.unwrap_or_else(|| panic!("fast path declined a valid message: {text}"))
    }

    /// A text the fast path declines; returns the slow path's verdict.
    fn declined(text: &str) -> Result<Message, ParseError> {
        let (fast, slow) = both(text);
        assert_eq!(fast, None, "fast path accepted {text}");
        slow
    }

    fn reason(r: Result<Message, ParseError>) -> String {
        match r {
            Err(ParseError::Invalid(e)) => e.reason,
            other => panic!("expected an invalid message, got {other:?}"),
        }
    }

    #[test]
    fn s4_fast_path_reads_every_ordinary_message_kind() {
        let req = fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[1,2]}}"#);
        assert!(matches!(req, Message::Request(_)));
        let note = fast_ok(r#"{"method":"notifications/x","jsonrpc":"2.0"}"#);
        assert!(matches!(
            note,
            Message::Notification(Notification { params: None, .. })
        ));
        let ok = fast_ok(r#" {"jsonrpc":"2.0","id":"a","result":{}} "#);
        assert!(matches!(
            ok,
            Message::Response(Response { outcome: Ok(_), .. })
        ));
        let err = fast_ok(
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32002,"message":"m","data":{"c":1}}}"#,
        );
        assert!(matches!(
            err,
            Message::Response(Response {
                outcome: Err(_),
                ..
            })
        ));
        // A response to a message whose id could not be read.
        let null_id = fast_ok(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#);
        assert!(matches!(
            null_id,
            Message::Response(Response { id: None, .. })
        ));
    }

    #[test]
    fn s4_fast_path_jsonrpc_must_be_exactly_the_string_2_0() {
        for text in [
            r#"{"id":1,"method":"x"}"#,
            r#"{"jsonrpc":2.0,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0 ","id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.00","id":1,"method":"x"}"#,
            r#"{"jsonrpc":null,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":["2.0"],"id":1,"method":"x"}"#,
        ] {
            assert_eq!(
                reason(declined(text)),
                "\"jsonrpc\" must be \"2.0\"",
                "{text}"
            );
        }
        // The same string spelled with an escape is the same string to both paths.
        fast_ok(r#"{"jsonrpc":"2\u002e0","id":1,"method":"x"}"#);
    }

    #[test]
    fn s4_1_fast_path_declines_a_null_or_non_string_method() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":["x"]}"#,
            r#"{"jsonrpc":"2.0","method":{}}"#,
        ] {
            assert_eq!(reason(declined(text)), "method must be a string", "{text}");
        }
    }

    #[test]
    fn s4_1_fast_path_declines_a_request_with_a_null_id() {
        let r = declined(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#);
        assert_eq!(reason(r), "a request id must not be null");
    }

    #[test]
    fn s4_1_fast_path_declines_ids_that_are_not_number_string_or_null() {
        for id in ["true", "false", "[]", "[1]", "{}", r#"{"a":1}"#] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            assert_eq!(
                reason(declined(&text)),
                "id must be a number, a string or null"
            );
        }
    }

    #[test]
    fn s4_1_fast_path_declines_params_that_are_not_object_array_or_null() {
        for params in ["1", "\"s\"", "true", "0.5"] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{params}}}"#);
            assert_eq!(
                reason(declined(&text)),
                "params must be an object or an array"
            );
        }
        fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#);
        fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#);
    }

    #[test]
    fn s4_fast_path_declines_both_or_neither_result_and_error() {
        let both_ = r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#;
        assert_eq!(
            reason(declined(both_)),
            "response has both result and error"
        );
        let neither = r#"{"jsonrpc":"2.0","id":1}"#;
        assert_eq!(
            reason(declined(neither)),
            "response has neither result nor error"
        );
        assert_eq!(
            reason(declined(r#"{"jsonrpc":"2.0","result":1}"#)),
            "message has neither method nor id"
        );
    }

    #[test]
    fn s4_fast_path_declines_a_malformed_error_object() {
        for error in [
            r#"{"message":"m"}"#,
            r#"{"code":1}"#,
            r#"{"code":"1","message":"m"}"#,
            r#"{"code":1.5,"message":"m"}"#,
            r#"{"code":1.0,"message":"m"}"#,
            r#"{"code":9223372036854775808,"message":"m"}"#,
            r#""boom""#,
            "null",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"error":{error}}}"#);
            assert!(
                reason(declined(&text)).starts_with("malformed error object"),
                "{text}"
            );
        }
        // Duplicates inside the error object are the slow path's (last one wins) on both.
        let m = fast_ok(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"code":2,"message":"m"}}"#);
        let Message::Response(Response {
            outcome: Err(e), ..
        }) = m
        else {
            panic!("not an error response")
        };
        assert_eq!(e.code, 2);
    }

    #[test]
    fn s4_fast_path_declines_duplicate_envelope_members() {
        // `Value` keeps the last duplicate; the fast path must not pick one of its own.
        let r = declined(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#).unwrap();
        let Message::Request(r) = r else {
            panic!("not a request")
        };
        assert_eq!(r.id, RequestId::from(2i64));
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"x","method":"y"}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"x"}"#,
            r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":1,"params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":null,"error":{"code":1,"message":"m"}}"#,
            // The same member spelled once plainly and once with an escape.
            r#"{"jsonrpc":"2.0","id":1,"method":"x","m\u0065thod":"y"}"#,
        ] {
            assert!(declined(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn s4_fast_path_ignores_unknown_members_like_the_slow_path() {
        let m = fast_ok(r#"{"jsonrpc":"2.0","x":[1,{"y":null}],"id":1,"x":2,"method":"m"}"#);
        let plain = fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#);
        assert_eq!(m, plain);
        // An unknown member is still read as a `Value`: what `Value` refuses, both refuse.
        for extra in ["1e400", r#""\ud800""#, "01", "[1,]"] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":{extra}}}"#);
            assert!(
                matches!(declined(&text), Err(ParseError::Json(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn s4_fast_path_numbers_match_the_slow_path_exactly() {
        // Integers within 64 bits are ids, kept digit for digit by both paths.
        for id in ["0", "18446744073709551615", "-9223372036854775808"] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            let m = fast_ok(&text);
            let Message::Request(r) = m else {
                panic!("not a request")
            };
            let Ok(Message::Request(s)) = slow(&text) else {
                panic!("slow path refused {text}")
            };
            let (RequestId::Number(a), RequestId::Number(b)) = (&r.id, &s.id) else {
                panic!("not a numeric id")
            };
            assert_eq!(a.to_string(), b.to_string(), "{id}");
            assert_eq!(
                (a.is_u64(), a.is_i64(), a.is_f64()),
                (b.is_u64(), b.is_i64(), b.is_f64())
            );
        }
        // Any other number would be held as a double and could not be echoed exactly: both
        // paths refuse it as an id, with the same reason.
        for id in [
            "-0",
            "1.0",
            "-0.0",
            "1e3",
            "1E+3",
            "0.1",
            "2.5e-8",
            "18446744073709551616",
            "-9223372036854775809",
            "1.7976931348623157e308",
            "5e-324",
            "0.30000000000000004",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            assert!(
                reason(declined(&text)).contains("integer within 64 bits"),
                "{id}"
            );
        }
        declined(r#"{"jsonrpc":"2.0","id":1e400,"method":"x"}"#).unwrap_err();
    }

    #[test]
    fn s4_fast_path_unescapes_method_id_and_member_names() {
        let m = fast_ok(
            r#"{"\u006asonrpc":"2.0","\u0069d":"a\"b\\c\u00e9\ud83d\ude00","m\u0065thod":"p\u0069ng"}"#,
        );
        let Message::Request(r) = m else {
            panic!("not a request")
        };
        assert_eq!(r.method, "ping");
        assert_eq!(r.id, RequestId::from("a\"b\\c\u{e9}\u{1f600}"));
        // A lone surrogate is not a string to either path.
        declined(r#"{"jsonrpc":"2.0","id":"\ud800","method":"x"}"#).unwrap_err();
        declined(r#"{"jsonrpc":"2.0","id":1,"method":"\udc00"}"#).unwrap_err();
    }

    #[test]
    fn s4_fast_path_declines_what_is_not_one_json_object() {
        for text in [
            "",
            "[]",
            r#"[{"jsonrpc":"2.0","method":"x"}]"#,
            "1",
            "\"x\"",
            "null",
            r#"{"jsonrpc":"2.0","method":"x"} junk"#,
            r#"{"jsonrpc":"2.0","method":"x"}{}"#,
            r#"{"jsonrpc":"2.0","method":"x",}"#,
            r#"{"jsonrpc":"2.0","method":"x""#,
        ] {
            declined(text).unwrap_err();
        }
        // Nesting deeper than serde_json's limit fails the same way on both paths.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}{}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        );
        assert!(matches!(declined(&deep), Err(ParseError::Json(_))));
        let ok_depth = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}{}}}"#,
            "[".repeat(120),
            "]".repeat(120)
        );
        fast_ok(&ok_depth);
    }

    mod equivalence {
        use super::*;
        use proptest::prelude::*;

        /// Member names: the envelope's, some spelled with escapes, and unknown ones.
        /// Each comes with the name it unescapes to.
        fn key() -> impl Strategy<Value = (&'static str, &'static str)> {
            prop::sample::select(vec![
                ("jsonrpc", "jsonrpc"),
                ("id", "id"),
                ("method", "method"),
                ("params", "params"),
                ("result", "result"),
                ("error", "error"),
                ("\\u0069d", "id"),
                ("m\\u0065thod", "method"),
                ("jsonrpc\\u0000", "jsonrpc\0"),
                ("extra", "extra"),
                ("Method", "Method"),
                ("", ""),
            ])
        }

        /// Member values, valid and invalid for each member, and some that are not JSON.
        fn value() -> impl Strategy<Value = String> {
            let fixed = prop::sample::select(vec![
                "null",
                "true",
                "false",
                "0",
                "-0",
                "1",
                "1.0",
                "-0.0",
                "1e3",
                "2.5E-3",
                "18446744073709551616",
                "-9223372036854775809",
                "1e400",
                "01",
                "\"2.0\"",
                "\"2\\u002e0\"",
                "\"2.0 \"",
                "\"1.0\"",
                "2.0",
                "\"ping\"",
                "\"p\\u0069ng\"",
                "\"a\\\"b\\\\n\\/\"",
                "\"\\ud83d\\ude00\"",
                "\"\\ud800\"",
                "\"\"",
                "[]",
                "[1,{\"a\":null}]",
                "[1,]",
                "{}",
                "{\"a\":1,\"a\":2}",
                "{\"code\":-32600,\"message\":\"m\"}",
                "{\"code\":1,\"message\":\"m\",\"data\":{\"k\":[1.5]}}",
                "{\"code\":1,\"message\":\"m\",\"data\":null}",
                "{\"code\":\"1\",\"message\":\"m\"}",
                "{\"code\":1.5,\"message\":\"m\"}",
                "{\"message\":\"m\"}",
                "{\"code\":1,\"message\":\"m\",\"x\":1e400}",
                "{\"code\":1,\"code\":2,\"message\":\"m\"}",
            ])
            .prop_map(str::to_owned);
            let number = any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| f.to_string());
            let int = any::<i64>().prop_map(|i| i.to_string());
            let string = "[a-z\\\\\"/]{0,6}"
                .prop_map(|s| serde_json::to_string(&s).unwrap_or_else(|_| "\"\"".to_owned()));
            prop_oneof![6 => fixed, 1 => number, 1 => int, 1 => string]
        }

        /// A whole text: members in random order, sometimes repeated, odd spacing, and
        /// sometimes trailing junk. Returns the text and whether an envelope member repeats.
        fn text() -> impl Strategy<Value = (String, bool)> {
            let member = (key(), value(), prop::sample::select(vec!["", " ", "\n\t"]));
            let preset = prop::collection::vec(
                prop_oneof![
                    Just(("jsonrpc", "jsonrpc")).prop_map(|k| (k, "\"2.0\"".to_owned())),
                    Just(("id", "id")).prop_map(|k| (k, "7".to_owned())),
                    Just(("method", "method")).prop_map(|k| (k, "\"m\"".to_owned())),
                    Just(("result", "result")).prop_map(|k| (k, "{}".to_owned())),
                ],
                0..4,
            );
            (
                prop::collection::vec(member, 0..6),
                preset,
                prop::sample::select(vec!["", " ", "\n", " x", "}", ","]),
            )
                .prop_flat_map(|(members, preset, tail)| {
                    let mut all: Vec<((&str, &str), String, &str)> = members;
                    all.extend(preset.into_iter().map(|(k, v)| (k, v, "")));
                    let n = all.len();
                    (Just(all), Just(n), Just(tail)).prop_flat_map(|(all, n, tail)| {
                        (
                            Just(all),
                            Just(tail),
                            Just(()).prop_perturb(move |_, mut rng| {
                                let mut order: Vec<usize> = (0..n).collect();
                                // Fisher-Yates with the test runner's rng.
                                for i in (1..order.len()).rev() {
                                    let j = (rng.next_u32() as usize) % (i + 1);
                                    order.swap(i, j);
                                }
                                order
                            }),
                        )
                    })
                })
                .prop_map(|(all, tail, order)| {
                    const ENVELOPE: [&str; 6] =
                        ["jsonrpc", "id", "method", "params", "result", "error"];
                    let mut seen: Vec<&str> = Vec::new();
                    let mut dup = false;
                    let mut body = Vec::new();
                    for i in order {
                        let ((raw, name), v, ws) = &all[i];
                        if ENVELOPE.contains(name) {
                            dup |= seen.contains(name);
                            seen.push(name);
                        }
                        body.push(format!("{ws}\"{raw}\"{ws}:{ws}{v}{ws}"));
                    }
                    (format!("{{{}}}{tail}", body.join(",")), dup)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]

            /// Issue #8 contract: fast `Some(m)` implies slow `Ok(m)`; the fast path declines
            /// exactly the texts the slow path refuses plus those with a repeated member.
            #[test]
            fn s4_fast_path_is_exactly_equivalent_to_the_value_path((text, dup) in text()) {
                let (fast, slow) = both(&text);
                prop_assert_eq!(fast.is_some(), slow.is_ok() && !dup, "{}", text);
            }
        }
    }
}
