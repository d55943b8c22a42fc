//! The JSON-RPC 2.0 envelope MCPL rides on: ids, messages, error objects and the error
//! codes of JSON-RPC itself and of SPEC Appendix A.
//!
//! Messages are classified from a `serde_json::Value` by hand ([`Message::from_value`]) so
//! that every distinction the wire makes survives: `0` is a valid id, `"1"` and `1` are
//! different ids, and absent `params` differs from `"params": null`.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A request id: a JSON number or a JSON string. The two never compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id, kept exactly as received (`0` is valid).
    Number(serde_json::Number),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON value; only numbers and strings are ids.
    pub fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::Number(n) => Some(RequestId::Number(n.clone())),
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
        parse_params(self.params.clone())
    }
}

impl Notification {
    /// The params decoded as `P` (absent params read as `null`); `-32602` otherwise.
    pub fn params_as<P: DeserializeOwned>(&self) -> Result<P, ErrorObject> {
        parse_params(self.params.clone())
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

impl Message {
    /// Classifies one JSON value as a message, checking `"jsonrpc": "2.0"` and the shape of
    /// each member. Batches (arrays) are not messages; callers split them first.
    pub fn from_value(value: Value) -> Result<Message, InvalidMessage> {
        let Value::Object(mut obj) = value else {
            return Err(invalid(None, "message is not a JSON object"));
        };
        let id = match obj.remove("id") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(v) => match RequestId::from_value(&v) {
                Some(id) => Some(Some(id)),
                None => return Err(invalid(None, "id must be a number, a string or null")),
            },
        };
        let known_id = id.clone().flatten();
        match obj.get("jsonrpc") {
            Some(Value::String(v)) if v == "2.0" => {}
            _ => return Err(invalid(known_id, "\"jsonrpc\" must be \"2.0\"")),
        }
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else {
                return Err(invalid(known_id, "method must be a string"));
            };
            let params = obj.remove("params");
            if let Some(p) = &params {
                if !(p.is_object() || p.is_array() || p.is_null()) {
                    return Err(invalid(known_id, "params must be an object or an array"));
                }
            }
            return match id {
                None => Ok(Message::Notification(Notification { method, params })),
                Some(Some(id)) => Ok(Message::Request(Request { id, method, params })),
                Some(None) => Err(invalid(None, "a request id must not be null")),
            };
        }
        let result = obj.remove("result");
        let error = obj.remove("error");
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

    /// Parses one JSON text as a single message.
    pub fn parse(text: &str) -> Result<Message, ParseError> {
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
    let value = params.unwrap_or(Value::Null);
    serde_json::from_value(value.clone()).or_else(|e| {
        // A method whose params are all optional accepts absent/null params as `{}`.
        if value.is_null() {
            serde_json::from_value(Value::Object(Map::new()))
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
}
