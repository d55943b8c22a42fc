//! A message refused before it is built: over [`PeerConfig::max_message_size`], discarded
//! unread with only its first bytes kept ([`crate::transport::FrameReader::discarded_head`]),
//! past the shared budget for partial messages ([`PeerConfig::message_budget`]), refused
//! part read with its first bytes kept the same way, or over [`PeerConfig::max_parsed_cost`],
//! refused unbuilt (issue #20). One reading of what it shows ([`Head::read`]) and one rule
//! for what is done with it ([`refuse`]) serve the three limits, so a request is answered
//! under the id it has when taken, whichever it broke.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::reader::Parsed;
use super::*;

/// The `id` member of a refused message, as far as it was read.
#[derive(Debug, Default, PartialEq)]
enum IdSeen {
    /// No `id` member was read.
    #[default]
    Absent,
    /// An id as a taken message has it ([`RequestId::from_value`], at most
    /// [`crate::jsonrpc::MAX_ID_BYTES`] for a string).
    Id(RequestId),
    /// A number that is no integer id (`1.0`, `2.5`, `1e2`, an integer past 64 bits): no id
    /// for a request, as when taken; a response's is read against the requests outstanding
    /// ([`super::ids::outstanding_integral`]).
    Number(serde_json::Number),
    /// A value read whole that is no id (`null`, a boolean, an array, an object, a string
    /// over [`crate::jsonrpc::MAX_ID_BYTES`]).
    Unusable,
    /// A value not whole in what was read: cut by the end of a discarded message's head
    /// (a number whose last digit is the head's last byte included: `"id":12` may be the
    /// start of `"id":123`), a string or a literal cut inside. Unreadable.
    Cut,
}

/// What a refused message shows of itself, read member by member in order, up to its end or
/// to the first byte that cannot be read (a discarded message's head ends in the middle).
#[derive(Debug, Default)]
pub(super) struct Head {
    /// A JSON array: a batch.
    batch: bool,
    /// The last `id` member read (a member named twice counts as its last, as a parser
    /// keeps it).
    id: IdSeen,
    /// How many `id` members were read (named): more than one makes a request's id in
    /// doubt (`jsonrpc::doubled::DOUBLED_ID`).
    ids: usize,
    /// A `method` member was read, whatever its value: the message is request-shaped, as
    /// [`super::reader::classify`] reads one.
    method: bool,
    /// The method, if a string (at most 64 characters of it), for the diagnostic.
    method_name: Option<String>,
    /// A `result` or `error` member was read.
    outcome: bool,
    /// The object was read to its end: nothing of it is unknown.
    whole: bool,
    /// The bytes read hold a byte sequence that is no UTF-8 (not a character the cut
    /// split): the message is no text, as a small one would be refused.
    not_text: bool,
}

/// Bytes a JSON number can end with: one that is the last byte read may go on past it.
fn in_number(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
}

impl Head {
    /// Whether it shows a response: an outcome (`result` or `error`) and no method.
    pub(super) fn is_response(&self) -> bool {
        self.outcome && !self.method
    }

    /// The request of ours this message answers, if it is a response (an outcome and no
    /// method, or an object read whole without a method) whose id names one outstanding
    /// (a whole float read by [`super::ids::outstanding_integral`]), as [`refuse`] reads it.
    pub(super) fn names_ours(&self, shared: &Shared) -> Option<RequestId> {
        if self.method || !(self.outcome || self.whole) {
            return None;
        }
        let id = match &self.id {
            IdSeen::Id(id) => id.clone(),
            IdSeen::Number(n) => return super::ids::outstanding_integral(shared, n),
            IdSeen::Absent | IdSeen::Unusable | IdSeen::Cut => return None,
        };
        let outstanding =
            lock(&shared.pending).contains_key(&id) || lock(&shared.in_order).contains(&id);
        outstanding.then_some(id)
    }

    /// Reads the first bytes of a message discarded for its size: as far as they are UTF-8
    /// (the cut may fall inside a character), then as [`Head::read_str`].
    pub(super) fn read(head: &[u8]) -> Head {
        match std::str::from_utf8(head) {
            Ok(text) => Head::read_str(text),
            // A sequence no more bytes could complete: not a character split by the cut.
            Err(e) if e.error_len().is_some() => Head {
                not_text: true,
                ..Head::default()
            },
            Err(e) => Head::read_str(
                head.get(..e.valid_up_to())
                    .and_then(|valid| std::str::from_utf8(valid).ok())
                    .unwrap_or_default(),
            ),
        }
    }

    /// Reads `text`: a whole message (refused for its cost) or the first bytes of one
    /// (discarded for its size). What may come before a message is skipped as the reader
    /// skips it from a frame's text ([`super::reader::message_start`]). Member names are
    /// read unescaped (`"i\u0064"` is `id`); only top-level members count (an `id` inside
    /// `params`, or inside a string, is skipped). Reading: a number that runs to the end of
    /// `text` is not known to end there, so it is not read (JSON-RPC 2.0 §5: an id that
    /// cannot be read is none, and must not name another request).
    pub(super) fn read_str(text: &str) -> Head {
        let text = super::reader::message_start(text).as_bytes();
        let text = match text.iter().rposition(|&b| !in_number(b)) {
            Some(last) => text.get(..=last).unwrap_or(text),
            None => &[],
        };
        let mut head = Head::default();
        if text.first() == Some(&b'[') {
            head.batch = true;
            return head;
        }
        // Cut only after an ASCII byte, so still UTF-8; read as bytes all the same.
        let mut de = serde_json::Deserializer::from_slice(text);
        // What was read before an error (the end of a head) is kept in `head`.
        let read = Members(&mut head).deserialize(&mut de).is_ok();
        head.whole = read && de.end().is_ok();
        head
    }
}

/// Records each top-level member of a message into a [`Head`] as it is read.
struct Members<'a>(&'a mut Head);

impl<'de> Visitor<'de> for Members<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => {
                    self.0.ids = self.0.ids.saturating_add(1);
                    // Unreadable until its value is read whole.
                    self.0.id = IdSeen::Cut;
                    self.0.id = map.next_value::<Scalar>()?.id();
                }
                "method" => {
                    self.0.method = true;
                    self.0.method_name = None;
                    self.0.method_name = map.next_value::<Scalar>()?.text();
                }
                "result" | "error" => {
                    self.0.outcome = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Members<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// A member's value, read only if it is a number or a string; anything else is skipped
/// unbuilt, and a string too long to be an id is kept only as far as a diagnostic shows it.
enum Scalar {
    Int(RequestId),
    /// A string of at most [`crate::jsonrpc::MAX_ID_BYTES`].
    Text(String),
    /// A longer string: its first 64 characters.
    Long(String),
    /// A number that is no integer within 64 bits.
    Float(f64),
    Other,
}

impl Scalar {
    fn id(self) -> IdSeen {
        match self {
            Scalar::Int(id) => IdSeen::Id(id),
            Scalar::Text(s) => IdSeen::Id(RequestId::from(s)),
            Scalar::Float(f) => {
                serde_json::Number::from_f64(f).map_or(IdSeen::Unusable, IdSeen::Number)
            }
            Scalar::Long(_) | Scalar::Other => IdSeen::Unusable,
        }
    }

    fn text(self) -> Option<String> {
        match self {
            Scalar::Text(s) | Scalar::Long(s) => Some(s.chars().take(64).collect()),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
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
                Ok(if v.len() > crate::jsonrpc::MAX_ID_BYTES {
                    Scalar::Long(v.chars().take(64).collect())
                } else {
                    Scalar::Text(v.to_owned())
                })
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

/// The bound a refused message broke.
#[derive(Debug, Clone, Copy)]
pub(super) enum Limit<'a> {
    /// Over [`PeerConfig::max_message_size`]: `bytes` long, discarded unread.
    Size { bytes: usize, limit: usize },
    /// Over [`PeerConfig::max_parsed_cost`]: `cost` units, refused unbuilt.
    Cost { cost: usize, limit: usize },
    /// Past the shared budget for partial messages ([`PeerConfig::message_budget`]):
    /// refused after `bytes`, the rest discarded unread.
    Budget { bytes: usize, limit: usize },
    /// Nested past what the parser reads (serde_json's 128 levels; the sender's bound is
    /// [`crate::jsonrpc::MAX_MEMBER_NESTING`]), though it may be valid JSON: refused whole,
    /// reported as the parse error it is (`Diagnostic::ParseError`; `error` the parser's),
    /// or, for a response naming a request of ours, as an invalid message under its id.
    Nesting { error: &'a str },
    /// Refused by the parser for anything else (a number out of a float's range, a lone
    /// surrogate escape, a text cut short; `error` the parser's). Only a response is refused
    /// by this rule ([`super::text::Read::Unparsed`]); anything else keeps its `-32700`
    /// (JSON-RPC 2.0 §5.1), under a request's id read before the error without doubt
    /// ([`super::text::Read::UnparsedRequest`]), else `id: null`. Reported as [`Limit::Nesting`] is. A response whose
    /// object ended with more text after it on the line ("trailing characters") is also
    /// still answered `-32700`, `id: null`, for what followed it.
    Unparsed { error: &'a str },
}

impl Limit<'_> {
    /// The error a refused request or batch is answered with.
    fn answer(self, batch: bool) -> ErrorObject {
        let what = if batch { "batch" } else { "request" };
        match self {
            Limit::Size { bytes, limit } => ErrorObject::invalid_request(format!(
                "the {what} of {bytes} bytes exceeds the {limit}-byte limit and was discarded \
                 unread"
            ))
            .with_data(serde_json::json!({
                "limit": limit, "bytes": bytes, "reason": "max_message_size"
            })),
            Limit::Cost { cost, limit } => {
                ErrorObject::invalid_request(format!("Invalid Request: {}", self.why())).with_data(
                    serde_json::json!({
                        "limit": limit, "count": cost, "reason": "parsed_cost"
                    }),
                )
            }
            // A `-32000`-class error, as for a busy side: the message itself may be valid and
            // may succeed later (`transport::budget`).
            Limit::Budget { bytes, limit } => ErrorObject::new(
                crate::jsonrpc::codes::BUSY,
                format!(
                    "Busy: the budget of {limit} bytes for buffered partial messages is \
                     exhausted; the {what} was refused after {bytes} bytes, unread"
                ),
            )
            .with_data(serde_json::json!({ "limit": limit, "reason": "message_budget" })),
            // As a small text the parser refuses is answered (a response with text after
            // it on its line; `refuse`).
            Limit::Unparsed { error } => ErrorObject::parse_error(format!("Parse error: {error}")),
            Limit::Nesting { .. } => crate::jsonrpc::unparsed::nesting_refused(batch),
        }
    }

    /// Why a response of ours refused fails its request.
    fn why(self) -> String {
        match self {
            Limit::Size { bytes, limit } => format!(
                "the response of {bytes} bytes exceeds the {limit}-byte limit \
                 (PeerConfig::max_message_size) and was discarded unread"
            ),
            Limit::Cost { cost, limit } => format!(
                "the message would cost {cost} units parsed, over the limit of {limit} \
                 (PeerConfig::max_parsed_cost); send fewer or larger values"
            ),
            Limit::Budget { bytes, limit } => format!(
                "the response was refused after {bytes} bytes, unread: the budget of {limit} \
                 bytes for buffered partial messages is exhausted (message_budget; raise \
                 PeerConfig::message_budget or the MessageBudget it shares)"
            ),
            Limit::Unparsed { error } => format!("the response could not be parsed: {error}"),
            Limit::Nesting { .. } => format!(
                "the response nests arrays and objects deeper than {} levels, which this \
                 peer cannot read (jsonrpc::MAX_MEMBER_NESTING)",
                crate::jsonrpc::MAX_MEMBER_NESTING
            ),
        }
    }
}

/// Handles a message refused for `broke`, from what `head` shows of it (`None`: a transport
/// that keeps nothing of what it discards), and reports it (`Diagnostic::Oversized`,
/// `Diagnostic::TooCostly`, `Diagnostic::OverBudget`). The one rule for every limit, which
/// answers as a taken message is answered (JSON-RPC 2.0 §5, §6; readings where it is silent,
/// failing closed):
///
/// - A batch: one `-32600` error, `id: null`, as a batch over `max_batch_entries`.
/// - No text (a discarded message whose first bytes hold a sequence that is no UTF-8), or a
///   whole text refused for its cost that is no JSON object (or no JSON, its error before
///   any `method`, `result` or `error`): one error, `id: null`, as a small one gets its
///   `-32700`/`-32600` under no id.
/// - Request-shaped (a `method` member, whatever else): `-32600` under its id when it has
///   one a taken request would be answered under; `id: null` when its id is none (a fraction,
///   `1.0`, `null`, a string over `MAX_ID_BYTES`), cut (§5: an id that cannot be read
///   is answered `null`), or named more than once (`jsonrpc::doubled::DOUBLED_ID`). One with no `id` read whole is a notification: reported only. One
///   whose `id` may come after the cut of a discarded message is reported only too: nothing
///   tells it from a notification (§4.1: a notification is never answered), and a null id
///   would name no request to its sender anyway. (A line reader reads the whole envelope of
///   a line it discards for its size, `crate::transport::envelope`, so there the cut is
///   only that of a message the budget refused part read, or of a reader keeping less.)
/// - A response (an outcome and no method, or an object read whole without a method): the
///   request of ours its id names fails now ([`fail_response`]; a whole float read by
///   [`super::ids::outstanding_integral`]), never answered (answering a response could
///   loop). An id that is cut names no request. A `method` past the cut of a discarded
///   message is not known: such a message, which would be request-shaped, still fails the
///   request its id names, as only the side that request went to writes that id back.
/// - Anything else (a cut head showing neither a method nor an outcome): reported only.
///   Answering it under an id it shows could name the other side's own request, were it a
///   response.
///
/// The data of each answer names the limit (`reason`: `max_message_size`, `parsed_cost`,
/// `message_budget`), so the sender learns why rather than waiting for its own deadline.
/// The budget's refusal is `-32000` (busy: the same message may succeed later), the
/// others `-32600`.
pub(super) fn refuse(
    shared: &Shared,
    head: Option<Head>,
    broke: Limit,
    replies: &mut Outbox,
) -> Option<Parsed> {
    let head = head.unwrap_or_default();
    // What the diagnostic names, and what is done.
    let whole_text = matches!(
        broke,
        Limit::Cost { .. } | Limit::Nesting { .. } | Limit::Unparsed { .. }
    );
    let (id, then) = if head.batch || head.not_text {
        // No text is answered as a small one is, under no id (whatever the head showed).
        (None, Then::Answer)
    } else if whole_text && !head.whole && !head.method && !head.outcome {
        // A whole text refused for its cost that is no JSON object (or no JSON): a small
        // one is answered under no id, so is this.
        (None, Then::Answer)
    } else if head.method && head.ids > 1 {
        // Its `id` named more than once: which request it is cannot be told (as a message
        // taken is refused, `jsonrpc::doubled::DOUBLED_ID`).
        (None, Then::Answer)
    } else if head.method {
        match &head.id {
            IdSeen::Id(id) => (Some(id.clone()), Then::Answer),
            IdSeen::Absent => (None, Then::Report),
            IdSeen::Number(_) | IdSeen::Unusable | IdSeen::Cut => (None, Then::Answer),
        }
    } else if head.outcome || head.whole {
        let id = match &head.id {
            IdSeen::Id(id) => Some(id.clone()),
            IdSeen::Number(n) => super::ids::outstanding_integral(shared, n),
            IdSeen::Absent | IdSeen::Unusable | IdSeen::Cut => None,
        };
        (id, Then::Fail)
    } else {
        (None, Then::Report)
    };
    match broke {
        Limit::Size { bytes, limit } => shared.diagnose(Diagnostic::Oversized { bytes, limit }),
        Limit::Budget { bytes, limit } => shared.diagnose(Diagnostic::OverBudget { bytes, limit }),
        // A response that names a request of ours is reported as the invalid message it is,
        // under its id (as a response taken that is no valid one is: the report is how an
        // application tells the failure delivered at its place from an answer); anything
        // else as the parse error it is.
        Limit::Nesting { error } | Limit::Unparsed { error } => {
            shared.diagnose(match (&id, &then) {
                (Some(id), Then::Fail) => Diagnostic::InvalidMessage {
                    id: Some(id.clone()),
                    reason: broke.why(),
                    answered: false,
                },
                _ => Diagnostic::ParseError {
                    error: error.to_owned(),
                },
            })
        }
        Limit::Cost { cost, limit } => shared.diagnose(Diagnostic::TooCostly {
            id: id.clone(),
            method: head.method_name.clone(),
            cost,
            limit,
        }),
    }
    match then {
        Then::Answer => {
            let reply = Message::Response(Response {
                id,
                outcome: Err(broke.answer(head.batch)),
            });
            let _ = replies.send(reply.to_json());
            None
        }
        Then::Fail => {
            if let Limit::Unparsed { error } = broke {
                // The object ended and more followed on its line (another message after a
                // space or a lone `\r`): that may be a request, answered as a text that does
                // not parse is (JSON-RPC 2.0 §5.1), as before.
                if error.starts_with("trailing characters") {
                    let reply = Message::Response(Response {
                        id: None,
                        outcome: Err(broke.answer(false)),
                    });
                    let _ = replies.send(reply.to_json());
                }
            }
            let failed = id.and_then(|id| fail_response(shared, &id, &broke.why()))?;
            if let Parsed::Settled(r) = &failed {
                // It weighs what it holds in the incoming queue: not the frame it stands for
                // (unread, or refused unbuilt), nor the frame before it, whose weight
                // `Shared::reading` holds when a message is discarded unread.
                let message = r.outcome.as_ref().err().map_or(0, |e| e.message.len());
                let held = std::mem::size_of::<Response>() + message;
                shared.reading.store(held, Ordering::Relaxed);
            }
            Some(failed)
        }
        Then::Report => None,
    }
}

/// What [`refuse`] does with a refused message.
enum Then {
    Answer,
    Fail,
    Report,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Head {
        Head::read(text.as_bytes())
    }

    /// A cut head keeps what it read before the cut: an id, a method, an outcome (its value
    /// cut anywhere); whitespace and a byte order mark before it are skipped.
    #[test]
    fn a_cut_head_keeps_what_precedes_the_cut() {
        let h = read(r#"{"jsonrpc":"2.0","id":7,"result":{"pad":"xx"#);
        assert_eq!(h.id, IdSeen::Id(RequestId::from(7_i64)));
        assert!(h.outcome && !h.method && !h.whole);
        let h = read("\u{feff} {\"id\":\"a\",\"error\":{\"co");
        assert_eq!(h.id, IdSeen::Id("a".into()));
        let h = read(r#"{"method":"tools/call","id":"a","params":["#);
        assert_eq!(h.id, IdSeen::Id("a".into()));
        assert_eq!(h.method_name.as_deref(), Some("tools/call"));
        let one = serde_json::Number::from_f64(1.0).unwrap_or(0.into());
        assert_eq!(read(r#"{"id":1.0,"result":{"#).id, IdSeen::Number(one));
        assert!(read("[{\"id\":7,\"result\":1").batch);
        assert!(read(r#"{"id":7,"method":"m"}"#).whole);
        assert_eq!(read("").id, IdSeen::Absent);
    }

    /// An id not whole in what was read is cut, whatever its kind: a number running to the
    /// end of the text (`12` of `123`), a string cut inside.
    #[test]
    fn an_id_not_whole_in_the_head_is_cut() {
        for head in [
            r#"{"result":1,"id":12"#,
            r#"{"result":1,"id":-1"#,
            r#"{"result":1,"id":12."#,
            r#"{"result":1,"id":1.5"#,
            r#"{"result":1,"id":1e"#,
            r#"{"result":1,"id":1e1"#,
            r#"{"result":1,"id":"ab"#,
            r#"{"result":1,"id":tru"#,
            r#"{"result":1,"id":"#,
            r#"{"id":7,"result":1,"id":12"#,
        ] {
            assert_eq!(read(head).id, IdSeen::Cut, "{head}");
        }
        assert_eq!(
            read(r#"{"result":1,"id":12 "#).id,
            IdSeen::Id(RequestId::from(12_i64)),
            "whitespace ends it"
        );
        assert_eq!(
            read(r#"{"result":1,"id":12,"#).id,
            IdSeen::Id(RequestId::from(12_i64))
        );
    }

    /// An `id` named twice in a message reads as the taken message would: the last one
    /// counts (serde_json keeps the last duplicate), whatever kinds they are.
    #[test]
    fn an_id_named_twice_reads_as_its_last() {
        let two = serde_json::Number::from_f64(2.0).unwrap_or(0.into());
        assert_eq!(
            read(r#"{"id":"x","id":2.0,"result":1}"#).id,
            IdSeen::Number(two)
        );
        assert_eq!(
            read(r#"{"id":2.0,"id":null,"result":1}"#).id,
            IdSeen::Unusable
        );
        assert_eq!(
            read(r#"{"id":2.0,"id":3,"result":1}"#).id,
            IdSeen::Id(RequestId::from(3_u64))
        );
    }

    /// Only top-level members count, their names unescaped.
    #[test]
    fn only_top_level_members_count() {
        let h = read(r#"{"result":{"id":1,"method":"m"},"x":"\"id\":2"}"#);
        assert_eq!(h.id, IdSeen::Absent);
        assert!(!h.method && h.outcome && h.whole);
        let h = read(r#"{"i\u0064":3,"m\u0065thod":"m"}"#);
        assert_eq!(h.id, IdSeen::Id(RequestId::from(3_u64)));
        assert!(h.method);
        let long = format!(r#"{{"id":"{}","method":"m"}}"#, "x".repeat(1025));
        assert_eq!(read(&long).id, IdSeen::Unusable);
    }
}
