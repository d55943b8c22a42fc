//! What a message refused before it is built shows of itself ([`Head`]), and the one rule
//! for what is done with it ([`Head::then`]): answered (under which id), failed as the
//! response it is, or reported only. The async peer refuses by it whatever the message broke
//! (its size, the budget for partial messages, its parsed cost, the parser's depth, the
//! parser), and a driver of the sans-I/O machines is owed an answer by it
//! ([`super::ParseError::owed_answer`]), so the two answer a text alike (JSON-RPC 2.0 §5).
//! Here, not in the runtime, so it builds without it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::RequestId;

/// The `id` member of a refused message, as far as it was read.
#[derive(Debug, Default, PartialEq)]
pub(crate) enum IdSeen {
    /// No `id` member was read.
    #[default]
    Absent,
    /// An id as a taken message has it ([`RequestId::from_value`], at most
    /// [`super::MAX_ID_BYTES`] for a string).
    Id(RequestId),
    /// A number that is no integer within 64 bits (`1.0`, `2.5`, `1e2`, an integer past 64
    /// bits): a request's id when [`super::request_id_number`] takes it, as when taken (else
    /// none); a response's is read against the requests outstanding (the peer's
    /// `ids::outstanding_integral`).
    Number(serde_json::Number),
    /// A value read whole that is no id (`null`, a boolean, an array, an object, a string
    /// over [`super::MAX_ID_BYTES`]).
    Unusable,
    /// A value not whole in what was read: cut by the end of a discarded message's head
    /// (a number whose last digit is the head's last byte included: `"id":12` may be the
    /// start of `"id":123`), a string or a literal cut inside. Unreadable.
    Cut,
}

/// JSON-RPC 2.0 §5: a response's id is "the same as the value of" its request's. The integer
/// a number written as a whole float (`7.0`, `7e0`) names, read as a double as a JavaScript
/// peer reads it: whole, and of magnitude under 2^53, where a double names one integer
/// (2^53 itself is also what `9007199254740993` rounds to, so it names two); `None` for an
/// integer written as one (read exactly elsewhere), a true fraction, or a larger value. The
/// one reading the async peer (`peer::ids::outstanding_integral`), [`crate::session::HostState`],
/// both checkers and the inspector apply, each then asking whether a request of its own
/// waits under it.
pub fn whole_float_integer(n: &serde_json::Number) -> Option<i64> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let whole = n
        .as_f64()
        .filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)?;
    #[allow(clippy::cast_possible_truncation)]
    Some(whole as i64)
}

/// [`whole_float_integer`] as the request id it names.
pub(crate) fn whole_float_id(n: &serde_json::Number) -> Option<RequestId> {
    whole_float_integer(n).map(RequestId::from)
}

/// Whether `id` is one a side that numbers its requests from 1 up, `next` being the next it
/// would use, gave one of its requests: an integer in `1..next`. The one reading by which
/// the async peer (`peer::settle::answers_ours`) and [`crate::session::HostState`] take an
/// object with an id and neither a method nor an outcome under such an id as a late,
/// malformed answer rather than a request to answer (JSON-RPC 2.0 §5).
pub(crate) fn numbered_by_us(id: &RequestId, next: u64) -> bool {
    match id {
        RequestId::Number(n) => n.as_u64().is_some_and(|n| n >= 1 && n < next),
        RequestId::String(_) => false,
    }
}

/// What a refused message shows of itself, read member by member in order, up to its end or
/// to the first byte that cannot be read (a discarded message's head ends in the middle).
#[derive(Debug, Default)]
pub(crate) struct Head {
    /// A JSON array: a batch.
    pub(crate) batch: bool,
    /// A batch of responses only, read to its end (`envelope::batch::responses_only`):
    /// owed nothing.
    pub(crate) responses_only: bool,
    /// The last `id` member read (a member named twice counts as its last, as a parser
    /// keeps it).
    pub(crate) id: IdSeen,
    /// How many `id` members were read (named): more than one makes a request's id in
    /// doubt (`jsonrpc::doubled::DOUBLED_ID`).
    pub(crate) ids: usize,
    /// A `method` member was read, whatever its value: the message is request-shaped, as
    /// the peer's `reader::classify` reads one.
    pub(crate) method: bool,
    /// The method, if a string (at most 64 characters of it), for the diagnostic.
    pub(crate) method_name: Option<String>,
    /// A `result` or `error` member was read.
    pub(crate) outcome: bool,
    /// The object was read to its end: nothing of it is unknown.
    pub(crate) whole: bool,
    /// The bytes read hold a byte sequence that is no UTF-8 (not a character the cut
    /// split): the message is no text, as a small one would be refused.
    pub(crate) not_text: bool,
}

/// Bytes a JSON number can end with: one that is the last byte read may go on past it.
fn in_number(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
}

impl Head {
    /// Whether it shows a response: an outcome (`result` or `error`) and no method.
    pub(crate) fn is_response(&self) -> bool {
        self.outcome && !self.method
    }

    /// Reads the first bytes of a message discarded for its size: as far as they are UTF-8
    /// (the cut may fall inside a character), then as [`Head::read_str`].
    pub(crate) fn read(head: &[u8]) -> Head {
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
    /// skips it from a frame's text ([`super::message_start`]). Member names are
    /// read unescaped (`"i\u0064"` is `id`); only top-level members count (an `id` inside
    /// `params`, or inside a string, is skipped). Reading: a number that runs to the end of
    /// `text` is not known to end there, so it is not read (JSON-RPC 2.0 §5: an id that
    /// cannot be read is none, and must not name another request).
    pub(crate) fn read_str(text: &str) -> Head {
        let text = super::message_start(text).as_bytes();
        let text = match text.iter().rposition(|&b| !in_number(b)) {
            Some(last) => text.get(..=last).unwrap_or(text),
            None => &[],
        };
        let mut head = Head::default();
        if text.first() == Some(&b'[') {
            head.batch = true;
            head.responses_only = super::envelope::batch::responses_only(text);
            return head;
        }
        // Cut only after an ASCII byte, so still UTF-8; read as bytes all the same.
        let mut de = serde_json::Deserializer::from_slice(text);
        // What was read before an error (the end of a head) is kept in `head`.
        let read = Members(&mut head).deserialize(&mut de).is_ok();
        head.whole = read && de.end().is_ok();
        if head.ids > 1 && !head.method && !head.outcome {
            // No request nor response naming `id` twice: which id it meant is in doubt, so
            // it names none, neither answered under nor failing one (as a value read whole
            // is, `doubled::from_value_read`; a response's is its last, as parsed).
            head.id = IdSeen::Unusable;
        }
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
    /// A string of at most [`super::MAX_ID_BYTES`].
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
                Ok(if v.len() > super::MAX_ID_BYTES {
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

/// What is done with a refused message ([`Head::then`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Then {
    /// Answered with an error, under this id (`None`: `id: null`).
    Answer(Option<RequestId>),
    /// A response: never answered (answering a response could loop); the request of the
    /// reader's own its id names fails now. `trailing`: more text followed its object on
    /// its line, which may be a request: that text is answered `-32700`, `id: null`, as a
    /// text that does not parse is (JSON-RPC 2.0 §5.1).
    Fail { trailing: bool },
    /// An object read whole with one id and neither a `method` nor an outcome: no Request
    /// (JSON-RPC 2.0 §4) nor Response object (§5). Failed as [`Then::Fail`] when the id
    /// names a request of the reader's own outstanding, else answered under it, as
    /// [`super::InvalidThen::AnswerUnlessOurs`] says (one rule for a value and a text).
    AnswerUnlessOurs(RequestId),
    /// Reported only.
    Report,
}

impl Head {
    /// The one rule for what is done with a refused message that shows this head
    /// (JSON-RPC 2.0 §5, §6; readings where it is silent, failing closed). `whole_text`:
    /// the head is of a whole text (refused for its cost, its depth, or by the parser), not
    /// the first bytes of one discarded. `trailing`: the parser refused an object for the
    /// text after it on its line.
    ///
    /// - A batch: answered under no id; but one of responses only, read to its end, is
    ///   [`Then::Fail`] (never answered, JSON-RPC 2.0 §5, §6: nothing is owed a response),
    ///   its entries ending the requests of the reader's own they name.
    /// - No text (bytes that are no UTF-8), or a whole text that shows no `method`, `result`
    ///   or `error` and is no object read whole (no JSON object, or no JSON, its error
    ///   before any of them): answered under no id, as a small one is.
    /// - Request-shaped (a `method` member, whatever else): answered under its id when it
    ///   has one a taken request is answered under; under no id when its id is none (a
    ///   fraction, `1.0`, `null`, a string over [`super::MAX_ID_BYTES`]), cut (§5: an id
    ///   that cannot be read is answered `null`), or named more than once
    ///   (`jsonrpc::doubled::DOUBLED_ID`). One with no `id` read is a notification (§4.1:
    ///   never answered): reported only, as is one whose `id` may come past the cut of a
    ///   discarded message (nothing tells it from a notification).
    /// - An object read whole with one usable id and neither a method nor an outcome:
    ///   [`Then::AnswerUnlessOurs`] (`jsonrpc::InvalidThen::AnswerUnlessOurs`).
    /// - A response (an outcome and no method, or an object read whole without a method):
    ///   [`Then::Fail`], never answered.
    /// - Anything else (a cut head showing neither a method nor an outcome): reported only;
    ///   answering it under an id it shows could name the other side's own request.
    pub(crate) fn then(&self, whole_text: bool, trailing: bool) -> Then {
        // No text, a whole text that is no object read whole and shows nothing of a
        // message, and a request whose `id` is named more than once: under no id.
        if self.batch && self.responses_only && !self.not_text {
            return Then::Fail { trailing };
        }
        let no_id = self.batch
            || self.not_text
            || (whole_text && !self.whole && !self.method && !self.outcome)
            || (self.method && self.ids > 1);
        if no_id {
            Then::Answer(None)
        } else if self.method {
            match &self.id {
                IdSeen::Id(id) => Then::Answer(Some(id.clone())),
                IdSeen::Absent => Then::Report,
                // JSON-RPC 2.0 §4/§5: the request is answered under the same value, as taken.
                IdSeen::Number(n) if super::request_id_number(n) => {
                    Then::Answer(Some(RequestId::Number(n.clone())))
                }
                IdSeen::Number(_) | IdSeen::Unusable | IdSeen::Cut => Then::Answer(None),
            }
        } else if self.outcome || self.whole {
            match &self.id {
                IdSeen::Id(id) if !self.outcome && self.ids == 1 => {
                    Then::AnswerUnlessOurs(id.clone())
                }
                _ => Then::Fail { trailing },
            }
        } else {
            Then::Report
        }
    }
}

/// What the async peer does with a message its transport discarded unread (over the size
/// limit, or refused part read by the budget for partial messages), by the one rule it
/// refuses every message by (`Head::then`): [`discarded_refusal`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// A request (a batch, bytes that are no UTF-8): answered with an error under this id
    /// (`None`: `id: null`, when its id is none, named twice or cut; JSON-RPC 2.0 §5).
    Answer(Option<RequestId>),
    /// A response: never answered (that could loop); the request of the reader's own its
    /// id names, when it reads as one, ends now.
    Response(Option<RequestId>),
    /// A notification (§4.1), or first bytes that show too little: reported only.
    Report,
    /// An object with an id and neither a `method` nor a `result` or an `error` (no Request
    /// nor Response object, §4, §5): the malformed answer to the reader's own request under
    /// that id when one is outstanding, else answered with an error under it
    /// ([`super::InvalidThen::AnswerUnlessOurs`]).
    AnswerUnlessOurs(RequestId),
}

/// What the async peer does with a message discarded unread, from what its transport kept
/// of it (`kept`: the envelope summary, or the first bytes of what is no object,
/// `transport::FrameReader::discarded_head`), so another reader (`mcpl check`) answers
/// such a message exactly as the peer does: [`refusal_of`] with `whole_text` false.
pub fn discarded_refusal(kept: &[u8]) -> Refusal {
    refusal_of(kept, false)
}

/// Whether what a transport kept of an object it refused part read (`kept`, its envelope
/// summary, the message cut) leaves the message it is in doubt where the rest of its line
/// would tell, by the one rule ([`discarded_refusal`]): reported only (no `id` read: a
/// notification, or a request whose id comes later; or neither a `method` nor an outcome),
/// or request- or response-shaped with its `id` absent or cut by the refusal (a request
/// answered under `null`, a response of the reader's own failing nothing, JSON-RPC 2.0
/// §5). A line reader then reads the rest of the line into the envelope (bounded) and
/// refuses it at the line's end (`transport::LineReader`). A batch, bytes that are no
/// UTF-8, an id read whole (or named twice) tell already.
// The line reader's (runtime) only.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) fn discarded_in_doubt(kept: &[u8]) -> bool {
    let head = Head::read(kept);
    if head.batch || head.not_text || head.ids > 1 {
        return false;
    }
    match head.then(false, false) {
        Then::Report => true,
        Then::Answer(None) | Then::Fail { .. } => {
            matches!(head.id, IdSeen::Absent | IdSeen::Cut)
        }
        Then::Answer(Some(_)) | Then::AnswerUnlessOurs(_) => false,
    }
}

/// Whether `kept`, what a side holds of a message it refused unread, is of a JSON-RPC batch
/// (an array): the one reading by which the peer's refusal says "the batch" where it would
/// say "the request" (e.g. [`super::ErrorObject::over_message_budget`]'s `batch`).
pub fn discarded_is_batch(kept: &[u8]) -> bool {
    Head::read(kept).batch
}

/// What the async peer does with a message it refused unread, by its one rule: `kept` is
/// what it holds of it, `whole_text` whether that is the whole text (a text refused for its
/// parsed cost: the peer reads it whole, so one that shows no `method` or outcome and is
/// no object read whole is answered under id null, JSON-RPC 2.0 §5) or only what a
/// transport kept of one it discarded (first bytes or envelope summary: showing too little
/// is reported only). A response's id is read as an id ([`RequestId`]'s reading; the peer
/// also reads a whole float against its own requests outstanding).
pub fn refusal_of(kept: &[u8], whole_text: bool) -> Refusal {
    let head = Head::read(kept);
    match head.then(whole_text, false) {
        Then::Answer(id) => Refusal::Answer(id),
        Then::Fail { .. } => Refusal::Response(match head.id {
            IdSeen::Id(id) => Some(id),
            IdSeen::Number(n) => serde_json::from_value(serde_json::Value::Number(n)).ok(),
            IdSeen::Absent | IdSeen::Unusable | IdSeen::Cut => None,
        }),
        Then::AnswerUnlessOurs(id) => Refusal::AnswerUnlessOurs(id),
        Then::Report => Refusal::Report,
    }
}

/// The policy message's method (§6.7): the one name every refusal reads a text against.
pub(crate) const POLICY: &str =
    <crate::protocol::feature_sets::FeatureSetsUpdate as crate::protocol::Method>::NAME;

/// `error`, refusing a policy Request (§6.7) unread for a bound, made to tell the host
/// the policy was not applied: its message says so, and its data (which names the bound,
/// `limit` and `reason`) names the method and `applied: false`, so a host does not wait
/// for a receipt, nor take the grant it asked for as in force. `owner`: the connection's
/// owner answers the policy Request itself (`server::Server`), and holds nothing until it
/// reads the next one (`ServerState::handle_policy_unread`).
pub(crate) fn policy_not_applied(
    mut error: crate::jsonrpc::ErrorObject,
    owner: bool,
) -> crate::jsonrpc::ErrorObject {
    let consequence = match owner {
        true => {
            "; the policy (featureSets/update) was not applied: nothing is granted until \
                 the next policy Request the server reads (§6.7)"
        }
        false => "; the policy (featureSets/update) was not applied",
    };
    error.message = format!("{}{consequence}", error.message).into();
    let mut data = match error.data.take() {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("method".into(), serde_json::Value::from(POLICY));
    data.insert("applied".into(), serde_json::Value::Bool(false));
    error.data = Some(serde_json::Value::Object(data));
    error
}

/// Whether `written`, a JSON string as written (its quotes and any escapes: an envelope's
/// `method` value), is the policy's method (§6.7) as a parser reads it: `"featureSets\/update"`
/// and `"featureSets\u002fupdate"` are, as a message taken with either is the policy.
/// Bounded by what is passed (an envelope keeps at most `envelope::MAX_VALUE_BYTES`).
pub(crate) fn is_policy_written(written: &[u8]) -> bool {
    if written == super::envelope::batch::POLICY_WRITTEN.as_bytes() {
        return true;
    }
    memchr::memchr(b'\\', written).is_some()
        && serde_json::from_slice::<Cow<'_, str>>(written).is_ok_and(|m| m == POLICY)
}

/// Whether `text` may name the policy's method anywhere: its bytes as written, or an escape
/// (`\`), without which the name has no other spelling (RFC 8259 §7). The one look before
/// a refused text is read for the policy ([`policy_in`]); one that fails it is not the
/// policy, nor holds it.
pub(crate) fn may_name_policy(text: &[u8]) -> bool {
    memchr::memmem::find(text, POLICY.as_bytes()).is_some() || memchr::memchr(b'\\', text).is_some()
}

// Read by the peer's refusals (`peer::refused`, `peer::text`, `peer::unparsed`) and by
// `ServerState::handle_text`.
impl Head {
    /// The form of the policy message (§6.7) this head shows as a single object: a
    /// Notification when no `id` member was read, else a Request (its id may be in doubt).
    /// `None` for another method, or a batch (whose entries [`policy_in`] reads).
    pub(crate) fn policy_form(&self) -> Option<crate::policy::Form> {
        use crate::policy::Form;
        (!self.batch && self.method_name.as_deref() == Some(POLICY)).then_some(match self.id {
            IdSeen::Absent => Form::Notification,
            _ => Form::Request,
        })
    }
}

/// The one reading of whether `text`, refused unread, shows the policy message (§6.7), and
/// in which form: a single object by its envelope ([`Head::policy_form`]); a batch by each
/// object entry's envelope (`envelope::batch_entries`, as far as the batch reads), a
/// Request before a Notification. The method is read unescaped, as a parser reads it
/// (`"featureSets\/update"` is the policy). Looked at only when the text may name the method
/// at all ([`may_name_policy`]: its name as written, or an escape), so another message costs
/// a scan of its bytes.
pub(crate) fn policy_in(text: &str) -> Option<crate::policy::Form> {
    use crate::policy::Form;
    if !may_name_policy(text.as_bytes()) {
        return None;
    }
    let head = Head::read_str(text);
    if !head.batch {
        return head.policy_form();
    }
    let mut form = None;
    super::envelope::batch_entries(text.as_bytes(), |entry, ended| {
        let seen = entry
            .summary(ended)
            .and_then(|summary| Head::read(&summary).policy_form());
        form = match (form, seen) {
            (Some(Form::Request), _) | (_, Some(Form::Request)) => Some(Form::Request),
            (Some(f), _) | (None, Some(f)) => Some(f),
            (None, None) => None,
        };
    });
    form
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Head {
        Head::read(text.as_bytes())
    }

    /// What a line reader holds to the line's end (r14 F2, F3): a cut object whose id is
    /// absent or cut, request- or response-shaped, or reported only; not one whose id was
    /// read whole, named twice, a batch, nor bytes that are no UTF-8.
    #[test]
    fn a_cut_object_is_in_doubt_until_its_id_is_read_whole() {
        for kept in [
            r#"{"jsonrpc":"2.0","method":"m","params":{"p":"x"#,
            r#"{"jsonrpc":"2.0","result":{"p":"x"#,
            r#"{"jsonrpc":"2.0","method":"m","id":12"#,
            r#"{"jsonrpc":"2.0","result":1,"id":12"#,
            r#"{"jsonrpc":"2.0","params":{"p":"x"#,
        ] {
            assert!(discarded_in_doubt(kept.as_bytes()), "{kept}");
        }
        for kept in [
            r#"{"jsonrpc":"2.0","id":12,"method":"m","params":{"p":"x"#,
            r#"{"jsonrpc":"2.0","id":12,"result":{"p":"x"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m","params":{"#,
            r#"[{"jsonrpc":"2.0","method":"m""#,
        ] {
            assert!(!discarded_in_doubt(kept.as_bytes()), "{kept}");
        }
        assert!(!discarded_in_doubt(&[0xff]));
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

    /// §6.7: the policy's method written with escapes is the policy, as a parser reads it;
    /// a text that may spell it at all is looked at (its name, or an escape).
    #[test]
    fn s6_7_the_policy_written_with_escapes_is_the_policy() {
        for written in [
            r#""featureSets/update""#,
            r#""featureSets\/update""#,
            r#""featureSets\u002fupdate""#,
            r#""\u0066eatureSets\u002Fupdate""#,
        ] {
            assert!(is_policy_written(written.as_bytes()), "{written}");
            assert!(may_name_policy(written.as_bytes()), "{written}");
        }
        for written in [
            r#""featureSets/updat""#,
            r#""featureSets\/updatE""#,
            "null",
            r#""x"#,
        ] {
            assert!(!is_policy_written(written.as_bytes()), "{written}");
        }
        assert!(!may_name_policy(br#"{"method":"tools/call"}"#));
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
