//! A frame's text read into what the reader takes (issue #8, issue #20): a valid single
//! message straight from the text (an `inference/lifecycle` notification into its type),
//! the top-level value for the slow path ([`parse_batch`]), or a text refused unbuilt for
//! its parsed cost, with what it weighs ([`WEIGH_PARSED_FROM`]).

use super::*;

/// Which hot messages a frame's text is read straight into their types (issue #24); each
/// only for a driver that takes them so.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TypedReads {
    /// `inference/lifecycle` notifications ([`Read::Lifecycle`]).
    pub(super) lifecycle: bool,
    /// `tools/call` requests ([`Read::ToolsCall`]).
    pub(super) tools_call: bool,
}

/// A frame's text read: a valid single message, the top-level value for the slow path, or
/// a text refused unbuilt for its parsed cost.
pub(super) enum Read {
    Message(Message),
    /// An `inference/lifecycle` notification, its params read straight into their type.
    Lifecycle(Box<LifecycleParams>),
    /// A `tools/call` request, its params read straight into their type.
    ToolsCall(RequestId, Box<ToolsCallParams>),
    Top(Result<Top, serde_json::Error>),
    TooCostly {
        cost: usize,
        head: Head,
    },
}

/// The `id` and `method` of a message refused unbuilt, read without building anything else
/// (every other member, and an id that is not a string or integer, is skipped unparsed).
#[derive(Debug, Default)]
pub(super) struct Head {
    id: Option<RequestId>,
    /// The message has an `id` member, usable or not (`null`, a fraction …): with a
    /// `method` it is an Invalid Request, answered with `id: null`, not a notification.
    id_present: bool,
    /// An id that is a number but no integer (`1.0`): a response's is read against the
    /// requests outstanding ([`super::ids::outstanding_integral`]).
    number: Option<serde_json::Number>,
    method: Option<String>,
    /// The text is a batch (a JSON array): answered with one `id: null` error, as a batch
    /// over `max_batch_entries` is.
    batch: bool,
}

impl<'de> serde::Deserialize<'de> for Head {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Head;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
                let mut head = Head::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "id" => {
                            head.id_present = true;
                            // A member named twice: the last one counts, as when built.
                            match map.next_value::<Scalar>()? {
                                Scalar::Float(f) => {
                                    head.id = None;
                                    head.number = serde_json::Number::from_f64(f);
                                }
                                other => {
                                    head.number = None;
                                    head.id = other.id();
                                }
                            }
                        }
                        "method" => head.method = map.next_value::<Scalar>()?.text(),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(head)
            }
        }
        d.deserialize_map(V)
    }
}

/// A member read only if it is a string or an integer; anything else is skipped unbuilt.
enum Scalar {
    Int(RequestId),
    Text(String),
    /// A number that is no integer, kept for [`Head::number`].
    Float(f64),
    Other,
}

impl Scalar {
    fn id(self) -> Option<RequestId> {
        match self {
            Scalar::Int(id) => Some(id),
            // Unusable past the bound, as `Message::parse` reads it (`jsonrpc::MAX_ID_BYTES`).
            Scalar::Text(s) if s.len() > crate::jsonrpc::MAX_ID_BYTES => None,
            Scalar::Text(s) => Some(RequestId::from(s)),
            Scalar::Float(_) | Scalar::Other => None,
        }
    }

    fn text(self) -> Option<String> {
        match self {
            Scalar::Text(s) => Some(s.chars().take(64).collect()),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(RequestId::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(RequestId::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// Refuses a message whose parsed cost is over [`PeerConfig::max_parsed_cost`], unbuilt
/// (issue #20): a request is answered `-32600` under its id, a batch `-32600` with
/// `id: null`, a response fails the request it answers ([`fail_response`]: the in-order
/// failure returned for delivery), anything else is reported only. Reading chosen: the error is the batch
/// limit's (`-32600` with `data: { limit, count }`), the message being too large to take.
pub(super) fn too_costly(
    shared: &Arc<Shared>,
    cost: usize,
    limit: usize,
    head: Head,
    replies: &mut Outbox,
) -> Option<Parsed> {
    let Head {
        id,
        id_present,
        number,
        method,
        batch,
    } = head;
    // A response whose id writes one of ours as a whole float fails that request, as one
    // built would answer it (`ids::integral_id`).
    let id = match (id, &number) {
        (None, Some(n)) if method.is_none() => super::ids::outstanding_integral(shared, n),
        (id, _) => id,
    };
    shared.diagnose(Diagnostic::TooCostly {
        id: id.clone(),
        method: method.clone(),
        cost,
        limit,
    });
    let reason = format!(
        "the message would cost {cost} units parsed, over the limit of {limit} \
         (PeerConfig::max_parsed_cost); send fewer or larger values"
    );
    match (id, method.is_some()) {
        (Some(id), false) => fail_response(shared, &id, &reason),
        // A notification, or an object with neither id nor method (a log line, say): reported
        // only, as an invalid one is (answering what is not a request could loop).
        (None, true) if !id_present => None,
        (None, false) if !batch => None,
        (id, _) => {
            // A request (its id answered; `id: null` for one it has but cannot be read, as
            // an Invalid Request is, JSON-RPC 2.0 §5), or a batch (answered `id: null`).
            let reply = Message::Response(Response {
                id,
                outcome: Err(
                    ErrorObject::invalid_request(format!("Invalid Request: {reason}")).with_data(
                        serde_json::json!({
                            "limit": limit, "count": cost, "reason": "parsed_cost"
                        }),
                    ),
                ),
            });
            let _ = replies.send(reply.to_json());
            None
        }
    }
}

/// Reads one trimmed frame text that starts with `{` or `[`. Issue #8: a single object is
/// read straight into a `Message` when it is a valid one; anything the fast path declines
/// (batches, junk, invalid messages) takes the `Value` path, which owns every diagnostic
/// and error reply. A batch keeps at most `max_batch` entries. `typed`: the hot
/// messages read into their types where they can be ([`TypedReads`]). Also
/// returns what the message weighs ([`WEIGH_PARSED_FROM`]): a text refused unbuilt, its
/// length.
pub(super) fn read_text(
    trimmed: &str,
    max_batch: usize,
    max_cost: usize,
    typed: TypedReads,
) -> (Read, usize) {
    let mut weight = trimmed.len();
    if weight >= WEIGH_PARSED_FROM || crate::jsonrpc::may_exceed(trimmed, max_cost) {
        let cost = crate::jsonrpc::parsed_cost(trimmed);
        if cost <= max_cost {
            weight = crate::jsonrpc::parsed_bytes(trimmed.len(), cost);
        } else {
            let head = if trimmed.starts_with('{') {
                serde_json::from_str::<Head>(trimmed).unwrap_or_default()
            } else {
                Head {
                    batch: true,
                    ..Head::default()
                }
            };
            return (Read::TooCostly { cost, head }, weight);
        }
    }
    if let Some(params) = typed
        .lifecycle
        .then(|| crate::jsonrpc::parse_lifecycle(trimmed))
        .flatten()
    {
        return (Read::Lifecycle(Box::new(params)), weight);
    }
    if let Some((id, params)) = typed
        .tools_call
        .then(|| crate::jsonrpc::parse_tools_call(trimmed))
        .flatten()
    {
        return (Read::ToolsCall(id, Box::new(params)), weight);
    }
    if trimmed.starts_with('{') {
        if let Some(msg) = Message::parse_object(trimmed) {
            return (Read::Message(msg), weight);
        }
    }
    let top = if trimmed.starts_with('[') {
        parse_batch(trimmed, max_batch)
    } else {
        serde_json::from_str(trimmed).map(Top::Single)
    };
    (Read::Top(top), weight)
}

#[cfg(test)]
mod tests {
    use super::Head;
    use crate::jsonrpc::RequestId;

    /// An `id` named twice in a message refused unbuilt reads as the built message would:
    /// the last one counts (serde_json keeps the last duplicate), whatever kinds they are.
    #[test]
    fn an_id_named_twice_reads_as_its_last() {
        let h: Head = serde_json::from_str(r#"{"id":"x","id":2.0,"result":1}"#).unwrap();
        assert_eq!(
            (h.id, h.number.map(|n| n.to_string())),
            (None, Some("2.0".into()))
        );
        let h: Head = serde_json::from_str(r#"{"id":2.0,"id":null,"result":1}"#).unwrap();
        assert_eq!((h.id, h.number), (None, None));
        let h: Head = serde_json::from_str(r#"{"id":2.0,"id":3,"result":1}"#).unwrap();
        assert_eq!((h.id, h.number), (Some(RequestId::from(3u64)), None));
    }
}
