//! A text the JSON parser refused, read by its envelope ([`read_unparsed`]): whether it is
//! answered, and under which id, by the one rule ([`Unparsed::then`], [`Head::then`]) by
//! which both the async peer (`peer::text`) and a driver of the sans-I/O machines
//! ([`super::ParseError::owed_answer`]) answer it, so a text answered by one is answered,
//! under the same id, by the other, and one left unanswered by one is by the other
//! (JSON-RPC 2.0 §5).

use super::envelope::Envelope;
use super::head::{Head, Then};
use super::RequestId;

/// A single object's text the parser refused, read by its envelope
/// ([`read_unparsed`]), for the one rule ([`Unparsed::then`]).
#[derive(Debug)]
pub(crate) enum Unparsed {
    /// Nested past what the parser reads (serde_json's 128 levels), though it may be valid
    /// JSON: what its envelope, read whole past the nesting, shows. Answered (`-32600`,
    /// `reason: "nesting"`) by [`Head::then`] as any whole text refused unbuilt is.
    TooDeep(Head),
    /// A response (an outcome and no `method`): never answered; the request of the
    /// reader's own its id names fails now.
    Response(Head),
    /// Anything else: answered `-32700`, under the id of a request read before the
    /// parser's error without doubt (the rule of [`refused_request_id`]), else `id: null`.
    Request(Option<RequestId>),
}

/// Reads `text`, a single object's text (it begins with `{`) the parser refused with `e`,
/// by its envelope, read past the error as far as the envelope scanner reads and past any
/// nesting (what it shows as [`Head::read`] reads the envelope's summary).
pub(crate) fn read_unparsed(text: &str, e: &serde_json::Error) -> Unparsed {
    let (id, envelope) = read_refused(text.as_bytes(), e);
    let head = match envelope.summary(true) {
        Some(summary) => Head::read(&summary),
        None => Head::read_str(text),
    };
    if too_deep(e) {
        Unparsed::TooDeep(head)
    } else if head.is_response() {
        Unparsed::Response(head)
    } else {
        Unparsed::Request(id)
    }
}

impl Unparsed {
    /// What is done with it (`e` the parser's error): the one rule of the peer and of a
    /// driver. A response is never answered, save the text that followed its object on
    /// its line (`trailing characters`, which may be a request: `-32700`, `id: null`).
    pub(crate) fn then(&self, e: &serde_json::Error) -> Then {
        match self {
            Unparsed::TooDeep(head) => head.then(true, false),
            Unparsed::Response(head) => head.then(true, trailing_detail(&e.to_string())),
            Unparsed::Request(id) => Then::Answer(id.clone()),
        }
    }
}

/// What is done with `text`, which the parser refuses, by the one rule of the peer
/// ([`Unparsed::then`]), with whether it was refused for its depth; `None` for a text that
/// parses. A text that is no object (a batch, a scalar, junk) is answered under no id (the
/// caller skips what does not begin as a message, a junk line).
pub(crate) fn refusal(text: &str) -> Option<(Then, bool)> {
    let e = serde_json::from_str::<serde_json::Value>(text).err()?;
    let deep = too_deep(&e);
    if !super::message_start(text).starts_with('{') {
        return Some((Then::Answer(None), deep));
    }
    Some((read_unparsed(text, &e).then(&e), deep))
}

/// Reads `text`, which the parser refused with `e`, by its envelope: the id of the request
/// it showed before the parser's error, by the rule of [`refused_request_id`], and the
/// envelope fed the whole text (read past the error as far as the envelope scanner reads),
/// for the caller's own reading of what the text shows.
pub(crate) fn read_refused(text: &[u8], e: &serde_json::Error) -> (Option<RequestId>, Envelope) {
    let mut envelope = Envelope::new();
    let cut = error_offset(text, e);
    envelope.feed(text.get(..cut).unwrap_or(text));
    let before = envelope.sole_request_id().map(<[u8]>::to_vec);
    let ids_before = envelope.id_members();
    envelope.feed(text.get(cut..).unwrap_or_default());
    // Another `id` member past the error (the scanner reads on where only a value was
    // broken): which one the sender meant is not known.
    let id = before
        .filter(|_| envelope.id_members() == ids_before)
        .and_then(|written| id_written(&written));
    (id, envelope)
}

/// The id of a request whose `text` the JSON parser refuses, when it is not in doubt; `None`
/// for a text that parses, and for every text whose id is in doubt.
///
/// Reading of JSON-RPC 2.0 §5 (the id is Null only when there was an error in detecting
/// it): an id is detected when, before the byte the parser failed at, the object showed
/// `"jsonrpc": "2.0"`, a `method` member and exactly one top-level `id` member whose value
/// ended, a request id (a string of at most [`super::MAX_ID_BYTES`], or a number
/// [`RequestId::from_request_value`] takes: an integer within 64 bits, or one written with
/// a fraction or an exponent that [`super::request_id_number`] takes, `2.0`, `2.5`), and no
/// other top-level `id` member is named anywhere the envelope scanner reads past the error.
/// Anything less (an id cut by the error, two `id` members, a number no request id can be
/// such as `1e30`, a boolean, `null`, an object, an id over the length limit, no `jsonrpc`
/// or another version, no `method`, a batch) is in doubt: fail closed, as an id in doubt
/// could name another of the sender's requests. Member names are read unescaped
/// (`"i\u0064"` is `id`, and counts as one).
///
/// A text nested past the parser's depth (serde_json's 128 levels) may be valid JSON: the
/// parser's error says nothing of the rest, so its envelope is read whole, past the
/// nesting, as the peer reads it: a `method` and exactly one ended `id`, a request id as
/// above. No `"jsonrpc": "2.0"` is asked of it: that makes it an Invalid Request, answered
/// under its id as one that parses is, not an id in doubt. It is answered `-32600`
/// ([`super::ParseError::answer`]). A text that shows a response (an outcome and no
/// `method`) names no request. The one rule of the peer and a driver.
pub fn refused_request_id(text: &str) -> Option<RequestId> {
    match refusal(text)?.0 {
        Then::Answer(id) => id,
        Then::Fail { .. } | Then::AnswerUnlessOurs(_) | Then::Report => None,
    }
}

/// The id of a request whose text is no UTF-8 (RFC 8259 §8.1: it does not parse), told by
/// its envelope summary (`summary`, as `transport::FrameReader::discarded_head`
/// gives it) without doubt, by the rule of [`refused_request_id`]: `"jsonrpc": "2.0"`, a
/// `method`, exactly one `id`, ended, a request id. The bytes of another encoding hide none
/// of its members. The one rule of the peer (`peer::oversized`) and `mcpl check`.
pub fn not_text_request_id(summary: &[u8]) -> Option<RequestId> {
    // Read as it was written: a method's value may hold those bytes (an id holding them
    // reads as none, [`id_written`]).
    let mut envelope = Envelope::lenient(usize::MAX);
    envelope.feed(summary);
    id_written(envelope.sole_request_id()?)
}

/// The answer a frame that is no text is owed (RFC 8259 §8.1: JSON text is UTF-8, so it does
/// not parse; `reason` says why), by the async peer's rule, from what the transport kept of
/// it: whether it began as a message does (`{` or `[`,
/// `transport::FrameReader::not_text_began_as_json`) and its envelope `summary`
/// (`transport::FrameReader::discarded_head`). `-32700` (JSON-RPC 2.0 §5.1) under the id of
/// a request the summary tells without doubt ([`not_text_request_id`]), else `id: null`;
/// `None` for junk that does not begin as a message (reported only, as a junk line is) and
/// for a summary that shows a response (an outcome and no `method`, whole or cut short):
/// answering a response can loop. (The peer also fails, unanswered, a request of its own
/// that a summary read whole with no `method` names by its id; a caller that keeps no such
/// requests answers that one.) So `mcpl check` answers such a frame as the peer does.
pub fn not_text_answer(
    reason: &str,
    began_as_json: bool,
    summary: Option<&[u8]>,
) -> Option<super::Response> {
    let head = summary.map(Head::read);
    let id = summary.and_then(not_text_request_id);
    not_text_answer_read(reason, began_as_json, head.as_ref(), id)
}

/// [`not_text_answer`] from its summary read: `head` ([`Head::read`]) and `id`
/// ([`not_text_request_id`]). The peer's, which reads them once for its other uses.
pub(crate) fn not_text_answer_read(
    reason: &str,
    began_as_json: bool,
    head: Option<&Head>,
    id: Option<RequestId>,
) -> Option<super::Response> {
    if !began_as_json || head.is_some_and(Head::is_response) {
        return None;
    }
    Some(super::Response {
        id,
        outcome: Err(parse_refused(reason)),
    })
}

/// The `-32700` a text that does not parse is answered with (`Parse error: {detail}`, the
/// parser's or the transport's words): the one text of the peer and of a driver of the
/// sans-I/O machines ([`super::ParseError::answer`]).
pub(crate) fn parse_refused(detail: impl std::fmt::Display) -> super::ErrorObject {
    super::ErrorObject::parse_error(format!("Parse error: {detail}"))
}

/// The start of serde_json's message for a value nested past its recursion limit.
const RECURSION_LIMIT: &str = "recursion limit exceeded";

/// Whether `e` is serde_json's refusal of a value nested past its recursion limit (128
/// levels), not a syntax error: the text may be valid JSON, and its id readable. serde_json
/// tells it only by its message. The one reading of the peer, a driver
/// ([`super::ParseError::answer`]) and `mcpl check`.
pub fn too_deep(e: &serde_json::Error) -> bool {
    e.classify() == serde_json::error::Category::Syntax
        && e.to_string().starts_with(RECURSION_LIMIT)
}

/// Whether a [`super::ParseError::Json`]'s text (`detail`) is [`too_deep`]'s refusal.
pub(crate) fn too_deep_detail(detail: &str) -> bool {
    detail.starts_with(RECURSION_LIMIT)
}

/// Whether the parser's error (its text, `detail`) refused an object for the text after
/// it on its line (serde_json's `trailing characters`): the one test, with
/// [`super::several_values`], by which the peer and `mcpl check` read a line of several
/// messages.
pub fn trailing_detail(detail: &str) -> bool {
    detail.starts_with("trailing characters")
}

/// The `-32600` a request (or a batch, `batch`) nested past what the parser reads is
/// answered with, `data: { limit, reason: "nesting" }`: the one answer of the peer and of a
/// sans-I/O driver ([`super::ParseError::answer`]).
pub(crate) fn nesting_refused(batch: bool) -> super::ErrorObject {
    let what = if batch { "batch" } else { "request" };
    super::ErrorObject::invalid_request_because(format_args!(
        "the {what} nests arrays and objects deeper than {} levels, \
         which this peer cannot read: send them flatter",
        super::MAX_MEMBER_NESTING
    ))
    .with_data(serde_json::json!({
        "limit": super::MAX_MEMBER_NESTING, "reason": "nesting"
    }))
}

/// An id as written (an envelope's [`Envelope::sole_request_id`]), when it is one a taken
/// request is answered under: a string of at most [`super::MAX_ID_BYTES`] or a number
/// [`RequestId::from_request_value`] takes.
pub(crate) fn id_written(written: &[u8]) -> Option<RequestId> {
    let value = serde_json::from_slice::<serde_json::Value>(written).ok()?;
    match &value {
        serde_json::Value::String(s) if s.len() > super::MAX_ID_BYTES => None,
        v => RequestId::from_request_value(v),
    }
}

/// The byte offset in `text` strictly before which the parser read without error (`e`'s
/// line and column, which serde_json counts in bytes from 1; it may point one byte past
/// the byte it failed at, so that byte is left out too: fail closed).
fn error_offset(text: &[u8], e: &serde_json::Error) -> usize {
    let mut start = 0;
    for _ in 1..e.line() {
        match crate::bytes::find(b'\n', text.get(start..).unwrap_or_default()) {
            Some(i) => start += i + 1,
            None => return 0,
        }
    }
    start
        .saturating_add(e.column())
        .saturating_sub(1)
        .min(text.len())
}
