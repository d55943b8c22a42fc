//! Frames discarded by the transport that still carry what a peer needs to answer them or
//! to end a wait: a message in the wrong encoding that began as a message does
//! ([`FrameReader::not_text_began_as_json`]), and the first bytes of a message over the
//! size limit ([`FrameReader::discarded_head`]).

use super::reader::Parsed;
use super::*;

/// What the reader knows of a discarded frame, read from the transport as it was yielded.
#[derive(Debug, Default)]
pub(super) struct Discarded {
    /// A [`Frame::NotText`] that began as a message does: answered `-32700`.
    pub(super) began_as_json: bool,
    /// A [`Frame::Oversized`] whose first bytes show a response (an id, then `result` or
    /// `error`, and no `method`): the request of ours it answers.
    pub(super) answers: Option<RequestId>,
    /// Such a response whose id is a number that is not an integer (`1.0`): read against
    /// the requests outstanding when it is handled ([`super::ids::outstanding_integral`]).
    pub(super) answers_number: Option<serde_json::Number>,
    /// A [`Frame::Oversized`] whose first bytes show a request (an id and a `method`, no
    /// `result` or `error`): the id its error answer goes to.
    pub(super) request: Option<RequestId>,
}

impl Discarded {
    /// What `reader` tells of `frame`, which it just yielded.
    pub(super) fn of(frame: &Frame, reader: &dyn FrameReader) -> Discarded {
        match frame {
            Frame::NotText { .. } => Discarded {
                began_as_json: reader.not_text_began_as_json(),
                ..Discarded::default()
            },
            Frame::Oversized { .. } => {
                let head = reader.discarded_head().map(read_head).unwrap_or_default();
                Discarded {
                    began_as_json: false,
                    answers: head.answers,
                    answers_number: head.answers_number,
                    request: head.request,
                }
            }
            _ => Discarded::default(),
        }
    }
}

impl Discarded {
    /// Reports a message over the size limit; a response of ours among them fails its
    /// request now, not at its deadline (the failure to deliver, for one sent in order).
    /// A request whose id its first bytes show is answered `-32600` under that id, with
    /// `data: { limit, bytes, reason: "max_message_size" }`: a request with an id gets an
    /// answer (§6.6), and its sender learns why rather than waiting for its own deadline.
    /// Reading: JSON-RPC 2.0 has no code for a message too large to read; it is not a valid
    /// Request object this side can take, so `-32600`. One whose id comes after the cut (or
    /// a notification) cannot be answered and is reported only.
    pub(super) fn oversized(
        &self,
        shared: &Shared,
        bytes: usize,
        limit: usize,
        replies: &mut Outbox,
    ) -> Option<Parsed> {
        shared.diagnose(Diagnostic::Oversized { bytes, limit });
        if let Some(id) = &self.request {
            let error = ErrorObject::invalid_request(format!(
                "the request of {bytes} bytes exceeds the {limit}-byte limit and was discarded \
                 unread"
            ))
            .with_data(serde_json::json!({
                "limit": limit,
                "bytes": bytes,
                "reason": "max_message_size",
            }));
            let reply = Message::Response(Response {
                id: Some(id.clone()),
                outcome: Err(error),
            });
            let _ = replies.send(reply.to_json());
        }
        let reason = format!(
            "the response of {bytes} bytes exceeds the {limit}-byte limit \
             (PeerConfig::max_message_size) and was discarded unread"
        );
        let id = match (&self.answers, &self.answers_number) {
            (Some(id), _) => id.clone(),
            (None, Some(n)) => super::ids::outstanding_integral(shared, n)?,
            (None, None) => return None,
        };
        super::reader::fail_response(shared, &id, &reason)
    }

    /// Reports a frame that is not text. RFC 8259 §8.1: JSON text is UTF-8, so a message
    /// that is not does not parse, and is answered as one that does not parse is (JSON-RPC
    /// 2.0 §5.1: `-32700`, `id: null`); junk that does not begin as a message is reported
    /// only, as a junk line is.
    pub(super) fn not_text(&self, shared: &Shared, reason: String, replies: &mut Outbox) {
        if self.began_as_json {
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(ErrorObject::parse_error(format!("Parse error: {reason}"))),
            });
            let _ = replies.send(reply.to_json());
        }
        shared.diagnose(Diagnostic::NotText { reason });
    }
}

/// What the first bytes of a discarded message show of it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Head {
    /// A response: an `id` (a string or an integer, as [`RequestId::from_value`] reads it),
    /// a `result` or `error` member (its value may be cut), and no `method` before the cut.
    answers: Option<RequestId>,
    /// A response as `answers` shows one, whose id is a number that is not an integer
    /// (`1.0`): whether it names a request of ours is read when it is handled.
    answers_number: Option<serde_json::Number>,
    /// A request: an `id` and a `method`, and no `result` or `error` before the cut.
    request: Option<RequestId>,
}

/// Reads the first bytes `head` of a discarded message. Reading: an object that might be
/// the other side's request fails nothing of ours (the two sides' ids are unrelated), and
/// one showing both a `method` and an outcome is neither.
pub(super) fn read_head(head: &[u8]) -> Head {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Seen {
        id: Option<RequestId>,
        /// An id that is a number but no integer.
        number: Option<serde_json::Number>,
        method: bool,
        outcome: bool,
    }
    /// Records each member as it is read, so what precedes the cut is kept.
    struct Partial<'a>(&'a mut Seen);
    impl<'de> Visitor<'de> for Partial<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "method" => self.0.method = true,
                    "result" | "error" => self.0.outcome = true,
                    "id" => {
                        let id = map.next_value::<Value>()?;
                        self.0.number = match &id {
                            Value::Number(n) if !n.is_i64() && !n.is_u64() => Some(n.clone()),
                            _ => None,
                        };
                        self.0.id = RequestId::from_value(&id).filter(|id| match id {
                            RequestId::String(s) => s.len() <= crate::jsonrpc::MAX_ID_BYTES,
                            RequestId::Number(_) => true,
                        });
                        continue;
                    }
                    _ => {}
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    impl<'de> DeserializeSeed<'de> for Partial<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    let Some(head) = head
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .and_then(|start| head.get(start..))
    else {
        return Head::default();
    };
    let head = head
        .strip_prefix(b"\xef\xbb\xbf".as_slice())
        .unwrap_or(head);
    let mut seen = Seen::default();
    // The head is cut, so the read ends in an error: what was read before it is kept.
    let _ = Partial(&mut seen).deserialize(&mut serde_json::Deserializer::from_slice(head));
    match seen {
        Seen {
            id: Some(id),
            method: false,
            outcome: true,
            ..
        } => Head {
            answers: Some(id),
            ..Head::default()
        },
        Seen {
            id: None,
            number: Some(n),
            method: false,
            outcome: true,
        } => Head {
            answers_number: Some(n),
            ..Head::default()
        },
        Seen {
            id: Some(id),
            method: true,
            outcome: false,
            ..
        } => Head {
            request: Some(id),
            ..Head::default()
        },
        _ => Head::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a head showing a response names a request: an id, an outcome member (its value
    /// cut anywhere), no method; whitespace and a byte order mark before it are skipped.
    #[test]
    fn a_cut_head_names_the_request_only_when_it_shows_a_response() {
        let id = |head: &str| read_head(head.as_bytes()).answers;
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"result":{"pad":"xx"#),
            Some(RequestId::from(7_i64))
        );
        assert_eq!(
            id("\u{feff} {\"id\":\"a\",\"error\":{\"co"),
            Some("a".into())
        );
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","result":{"pad":"xx"#),
            None,
            "no id yet"
        );
        assert_eq!(id(r#"{"id":7,"params":{"pad":"xx"#), None, "no outcome yet");
        assert_eq!(id(r#"{"id":7,"method":"m","result":1"#), None, "a method");
        assert_eq!(id(r#"{"id":1.5,"result":{"#), None, "not an id");
        let number = |head: &str| read_head(head.as_bytes()).answers_number;
        assert_eq!(
            number(r#"{"id":1.0,"result":{"#).map(|n| n.to_string()),
            Some("1.0".into()),
            "read against the requests outstanding"
        );
        assert_eq!(number(r#"{"id":1.0,"method":"m","result":{"#), None);
        assert_eq!(id(r#"{"id":"abc"#), None, "the id itself cut");
        assert_eq!(id("[{\"id\":7,\"result\":1"), None, "a batch");
        assert_eq!(id(""), None);
    }

    /// A head showing an id and a method, and no outcome, is a request to answer; one whose
    /// id is not in the head (or is cut) is not.
    #[test]
    fn a_cut_head_names_a_request_to_answer_only_with_its_id_and_method() {
        let req = |head: &str| read_head(head.as_bytes()).request;
        assert_eq!(
            req(r#"{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"x":"yy"#),
            Some(RequestId::from(7_i64))
        );
        assert_eq!(
            req(r#"{"method":"m","id":"a","params":["#),
            Some("a".into())
        );
        assert_eq!(
            req(r#"{"method":"m","params":{"x":"yy"#),
            None,
            "id after the cut"
        );
        assert_eq!(req(r#"{"id":7,"params":{"x":"yy"#), None, "no method yet");
        assert_eq!(
            req(r#"{"id":7,"method":"m","result":1"#),
            None,
            "an outcome too"
        );
        assert_eq!(req(r#"{"method":"m","id":"ab"#), None, "the id itself cut");
    }
}
