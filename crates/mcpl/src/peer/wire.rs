//! Encoding of outgoing envelopes straight from borrowed parts: the same text as
//! [`Message::to_json`] (members in the same sorted order), without first deep-copying
//! params or result into a fresh `Value` tree.

use super::*;

/// Every envelope member, in the order `Message::to_json` writes them (sorted names).
#[derive(Serialize)]
pub(super) struct Out<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<Value>,
    /// Outer `None`: no `id` member (notification); inner `None`: `"id": null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) id: Option<Option<&'a RequestId>>,
    pub(super) jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) params: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<&'a Value>,
}

pub(super) const EMPTY: Out<'static> = Out {
    error: None,
    id: None,
    jsonrpc: "2.0",
    method: None,
    params: None,
    result: None,
};

/// Encodes `value` into `buf` (emptied first; given the capacity `serde_json::to_string`
/// starts with if it has none), as `serde_json::to_string` would.
fn encode<T: Serialize + ?Sized>(mut buf: Vec<u8>, value: &T) -> Option<String> {
    buf.clear();
    if buf.capacity() == 0 {
        buf.reserve(128);
    }
    serde_json::to_writer(&mut buf, value).ok()?;
    String::from_utf8(buf).ok()
}

/// A request line.
#[cfg(test)]
pub(super) fn request(id: &RequestId, method: &str, params: Option<&Value>) -> String {
    request_in(Vec::new(), id, method, params)
}

/// A request line, encoded into `buf` (a spare frame buffer, [`Shared::frame_buffer`]).
pub(super) fn request_in(
    buf: Vec<u8>,
    id: &RequestId,
    method: &str,
    params: Option<&Value>,
) -> String {
    let out = Out {
        id: Some(Some(id)),
        method: Some(method),
        params,
        ..EMPTY
    };
    encode(buf, &out).unwrap_or_else(|| {
        Message::Request(Request {
            id: id.clone(),
            method: method.to_owned(),
            params: params.cloned(),
        })
        .to_json()
    })
}

/// A notification line.
pub(super) fn notification(method: &str, params: Option<&Value>) -> String {
    let out = Out {
        method: Some(method),
        params,
        ..EMPTY
    };
    serde_json::to_string(&out).unwrap_or_else(|_| {
        Message::Notification(Notification {
            method: method.to_owned(),
            params: params.cloned(),
        })
        .to_json()
    })
}

/// A response line. The (rare) error object goes through `Value`, as in `to_json`, so
/// its members keep the same order.
#[cfg(test)]
pub(super) fn response(id: Option<&RequestId>, outcome: &Result<Value, ErrorObject>) -> String {
    response_in(Vec::new(), id, outcome)
}

/// [`response`], encoded into `buf`.
pub(super) fn response_in(
    buf: Vec<u8>,
    id: Option<&RequestId>,
    outcome: &Result<Value, ErrorObject>,
) -> String {
    if let Some(reason) = crate::jsonrpc::outcome_defect(outcome) {
        // Not sent as it is: the peer could not read it (`jsonrpc::outcome_to_send`).
        tracing::warn!(?id, "answer replaced by -32603: {reason}");
        let replaced = Err(crate::jsonrpc::answer_not_sent(&reason));
        return response_in(buf, id, &replaced);
    }
    let out = match outcome {
        Ok(result) => Out {
            id: Some(id),
            result: Some(result),
            ..EMPTY
        },
        Err(e) => Out {
            error: Some(serde_json::to_value(e).unwrap_or(Value::Null)),
            id: Some(id),
            ..EMPTY
        },
    };
    encode(buf, &out).unwrap_or_else(|| {
        Message::Response(Response {
            id: id.cloned(),
            outcome: outcome.clone(),
        })
        .to_json()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The direct encoding is byte-identical to `Message::to_json` (JSON-RPC 2.0 §4, §5).
    #[test]
    fn jsonrpc_envelopes_match_message_to_json() {
        let params = [
            None,
            Some(Value::Null),
            Some(json!({"z": 1, "a": [1.5, "x", {"k": null}], "é\n": true})),
            Some(json!([1, 2])),
        ];
        let ids = [
            RequestId::from(0u64),
            RequestId::from(-7i64),
            RequestId::from("abc\"1"),
        ];
        for id in &ids {
            for p in &params {
                let m = Message::Request(Request {
                    id: id.clone(),
                    method: "tools/call".into(),
                    params: p.clone(),
                });
                assert_eq!(request(id, "tools/call", p.as_ref()), m.to_json());
            }
            let outcomes = [
                Ok(json!({"content": [{"type": "text", "text": "hi"}]})),
                Ok(Value::Null),
                Err(ErrorObject::method_not_found("x/y")),
                Err(ErrorObject::internal("boom").with_data(json!({"b": 1, "a": 2}))),
            ];
            for o in &outcomes {
                for rid in [Some(id), None] {
                    let m = Message::Response(Response {
                        id: rid.cloned(),
                        outcome: o.clone(),
                    });
                    assert_eq!(response(rid, o), m.to_json());
                }
                if let Ok(result) = o {
                    // An encoded result is written as it is (`Outbox::finish_encoded`,
                    // `IncomingRequest::respond`).
                    let encoded = crate::jsonrpc::Encoded::encode(result).unwrap();
                    assert_eq!(encoded.response(id), response(Some(id), o));
                }
            }
        }
        for p in &params {
            let m = Message::Notification(Notification {
                method: "push/event".into(),
                params: p.clone(),
            });
            assert_eq!(notification("push/event", p.as_ref()), m.to_json());
            if let Some(p) = p {
                // Encoded params are written as they are (`Outbox::notify_encoded`).
                let encoded = crate::jsonrpc::Encoded::encode(p).unwrap();
                assert_eq!(encoded.notification("push/event"), m.to_json());
            }
        }
    }

    /// A typed result whose flattened `extra` names one of its own members (`isError`) is
    /// one object with unique member names, as the `Value` path wrote it (the `extra`
    /// member wins there): a typed reader (serde derive, rmcp) refuses duplicates (RFC 8259
    /// §4: names SHOULD be unique).
    #[test]
    fn an_encoded_typed_result_has_unique_member_names() {
        use crate::protocol::handshake::ToolsCallResult;
        let mut r = ToolsCallResult::new(["hi"]);
        r.is_error = Some(false);
        r.extra.insert("isError".into(), json!(true));
        let id = RequestId::from(1u64);
        let via_value = response(Some(&id), &Ok(serde_json::to_value(&r).unwrap()));
        let line = crate::jsonrpc::Encoded::encode(&r).unwrap().response(&id);
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Envelope {
            result: ToolsCallResult,
        }
        assert!(
            serde_json::from_str::<Envelope>(&via_value).is_ok(),
            "the Value path's answer reads: {via_value}"
        );
        if let Err(e) = serde_json::from_str::<Envelope>(&line) {
            panic!("a typed reader refuses the encoded answer ({e}): {line}");
        }
        assert_eq!(line, via_value);
    }
}
