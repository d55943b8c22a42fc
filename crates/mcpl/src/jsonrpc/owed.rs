//! What a driver of the sans-I/O machines owes a text [`Message::parse`] refused: the
//! answers the async peer writes for it, by the one rule (`peer`'s reader refuses by it
//! too): [`ParseError::owed_answers`], and the older [`ParseError::owed_answer`].

use serde_json::Value;

use super::{
    head, invalid_then, lead_refusal, message_start, message_text, unparsed, InvalidThen, Message,
    ParseError, RequestId, Response,
};

/// What a driver writes for a text [`Message::parse`] refused ([`ParseError::owed_answers`]):
/// one response, or the answers of a batch's requests in one array (JSON-RPC 2.0 §6).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OwedAnswer {
    /// One response object.
    One(Response),
    /// Each request of the batch the text begins with answered under its id, in order, in
    /// one array: a batch the parser refused only for what follows it on its line.
    Batch(Vec<Response>),
}

impl OwedAnswer {
    /// The answer as one JSON value: an object, or an array of them.
    pub fn to_value(&self) -> Value {
        match self {
            OwedAnswer::One(r) => Message::Response(r.clone()).to_value(),
            OwedAnswer::Batch(rs) => Value::Array(
                rs.iter()
                    .map(|r| Message::Response(r.clone()).to_value())
                    .collect(),
            ),
        }
    }

    /// The answer as one line of JSON text (no trailing newline).
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }
}

impl ParseError {
    /// What a driver writes for `text`, which [`Message::parse`] refused with this error,
    /// by the async peer's rule, so it answers a text exactly as the peer does: for a text
    /// that begins with a batch the parser refused only for what follows it (`trailing
    /// characters`: junk, a message with nothing between, a message cut short; several
    /// messages separated by whitespace are each read alone first, [`super::several_values`]),
    /// each request of that batch (within `max_batch_entries` entries, its id read without
    /// doubt) answered `-32700` under its id in one array ([`OwedAnswer::Batch`]), as the
    /// peer answers it (JSON-RPC 2.0 §5, §6); else what [`Self::owed_answer`] gives.
    /// `max_batch_entries`: the driver's bound on a batch (the peer's is
    /// `PeerConfig::max_batch_entries`). A server's driver that feeds its frames to
    /// `ServerState::handle_text` has the policy message (§6.7) among such a text treated
    /// as refused unread by the state itself; one that parses them elsewhere does it
    /// (`ServerState::handle_policy_unread_as`).
    pub fn owed_answers(&self, text: &str, max_batch_entries: usize) -> Option<OwedAnswer> {
        if let ParseError::Json(detail) = self {
            let text = message_text(text);
            if text.starts_with('[') && unparsed::trailing_detail(detail) {
                let ids = super::batch::batch_requests_before(text, max_batch_entries).requests;
                if !ids.is_empty() {
                    let answers = ids
                        .into_iter()
                        .map(|(id, _)| Response {
                            id: Some(id),
                            outcome: Err(unparsed::parse_refused(detail)),
                        })
                        .collect();
                    return Some(OwedAnswer::Batch(answers));
                }
            }
        }
        self.owed_answer(text).map(OwedAnswer::One)
    }

    /// [`Self::owed_answers`] with the policy Request (§6.7) among what is answered
    /// refused as the async peer refuses it (`peer::unparsed`, `peer::refused`): a
    /// request the parser refused, its id read without doubt, alone or in a batch, is
    /// answered as not applied ([`head::policy_not_applied`]); an invalid one too when
    /// `owner` (the side answers the policy itself: the server). `owner` also words the
    /// consequence (nothing is granted until the next policy Request). The one reading
    /// [`crate::session`]'s `handle_frame`s answer a refused text by.
    pub(crate) fn owed_answers_as(
        &self,
        text: &str,
        max_batch_entries: usize,
        owner: bool,
    ) -> Option<OwedAnswer> {
        let refused = |error| head::policy_not_applied(error, owner);
        if let ParseError::Json(detail) = self {
            let trimmed = message_text(text);
            if trimmed.starts_with('[') && unparsed::trailing_detail(detail) {
                let ids = super::batch::batch_requests_before(trimmed, max_batch_entries).requests;
                if !ids.is_empty() {
                    let answers = ids
                        .into_iter()
                        .map(|(id, policy)| {
                            let error = unparsed::parse_refused(detail);
                            Response {
                                id: Some(id),
                                outcome: Err(if policy { refused(error) } else { error }),
                            }
                        })
                        .collect();
                    return Some(OwedAnswer::Batch(answers));
                }
            }
        }
        let mut owed = self.owed_answer(text)?;
        let policy = match self {
            ParseError::Json(_) => owed.id.is_some(),
            ParseError::Invalid(_) => owner,
        } && {
            let head = head::Head::read_str(message_text(text));
            match self {
                ParseError::Json(_) => head.policy_form() == Some(crate::policy::Form::Request),
                ParseError::Invalid(_) => head.policy_form().is_some(),
            }
        };
        if policy {
            if let Err(error) = owed.outcome {
                owed.outcome = Err(refused(error));
            }
        }
        Some(OwedAnswer::One(owed))
    }

    /// The id a driver answers this error under, `text` being the text [`Message::parse`]
    /// refused with it (JSON-RPC 2.0 §5): for [`ParseError::Invalid`], the id it carries;
    /// for [`ParseError::Json`], the id of a request the text showed before the parser's
    /// error without doubt ([`super::refused_request_id`], the rule the async peer answers by);
    /// `None` (a null id) otherwise.
    pub fn answer_id(&self, text: &str) -> Option<RequestId> {
        match self {
            ParseError::Json(_) => match lead_refusal(text)
                .or_else(|| unparsed::refusal(message_text(text)).map(|(then, _)| then))
            {
                Some(head::Then::Answer(id)) => id,
                Some(head::Then::AnswerUnlessOurs(id)) => Some(id),
                _ => None,
            },
            ParseError::Invalid(i) => i.id.clone(),
        }
    }

    /// [`Self::answer`] when `text` is owed one, by the async peer's rule, save for a text
    /// that begins with a batch the parser refused only for what follows it, which this
    /// answers with one `-32700` under a null id where the peer answers each of the batch's
    /// requests under its id: a driver writes [`Self::owed_answers`], which gives those.
    /// Otherwise (one rule, in `jsonrpc`: the peer refuses by it too) a driver that writes
    /// what this gives answers a text exactly when the peer does: `None` for a text that does not begin as
    /// a message does (`{` or `[`, past whitespace and a byte order mark: a junk line, a
    /// scalar, a blank line), for a text that shows a response (an outcome and no
    /// `method`; answering a response can loop, JSON-RPC 2.0 §5) save the text after its
    /// object on its line (which may be a request: `-32700`, `id: null`), for an object
    /// nested past the parser read whole with no `method` (read as the peer reads one, a
    /// response) or with a `method` and no `id` (a notification, §4.1), and for an invalid
    /// message that is an object with no `method` ([`invalid_then`]), save one with an id
    /// and neither a `result` nor an `error`, which is owed `-32600` under that id unless it
    /// names a request of the driver's own ([`InvalidThen::AnswerUnlessOurs`]). Given a text this error did not come
    /// from (one that parses), a response or a notification is owed nothing, anything else
    /// `-32700` (failing closed). A text that is several whole messages on one line is a
    /// `-32700` here like any text with more after its first value, so a driver that only
    /// writes this still answers the first request on it; the peer instead reads each
    /// message alone, and a driver does the same by asking [`super::several_values`] first (and
    /// then not writing this for the line). A driver writes this, not [`Self::answer`],
    /// which gives an answer for every text
    /// (better, [`Self::owed_answers`]).
    pub fn owed_answer(&self, text: &str) -> Option<Response> {
        let start = message_start(text);
        if !(start.starts_with('{') || start.starts_with('[')) {
            return None;
        }
        let owed = match self {
            ParseError::Json(_) => match lead_refusal(text)
                .map(|then| (then, false))
                .or_else(|| unparsed::refusal(message_text(text)))
            {
                Some((then, _)) => matches!(
                    then,
                    head::Then::Answer(_)
                        | head::Then::AnswerUnlessOurs(_)
                        | head::Then::Fail { trailing: true }
                ),
                // Not the text this error came from (it parses, after JSON whitespace
                // only): a response or a notification is never answered (JSON-RPC 2.0 §5,
                // §4.1); anything else is, `-32700`, failing closed.
                None => {
                    let head = head::Head::read_str(message_text(text));
                    !(head.is_response() || (head.method && head.ids == 0))
                }
            },
            // A driver with a request of its own outstanding under an `AnswerUnlessOurs` id
            // fails that request instead, as the peer does.
            ParseError::Invalid(i) => match serde_json::from_str::<Value>(message_text(text)) {
                Ok(v) => !matches!(invalid_then(&v, i), InvalidThen::Fail(_)),
                Err(_) => true,
            },
        };
        owed.then(|| self.answer(text))
    }

    /// The response for a `text` [`Message::parse`] refused with this error, were it
    /// answered: `-32700` for [`ParseError::Json`], `-32600` for [`ParseError::Invalid`] and
    /// for an object nested past what the parser reads (`data: { limit, reason: "nesting"
    /// }`, as the peer answers it; a batch nested so is `-32700`, as the peer answers it
    /// too), under [`ParseError::answer_id`], else a null id. Whether it is owed at all is
    /// [`Self::owed_answer`]'s to say (the peer answers no notification nested past the
    /// parser, nor a response): a driver writes that.
    pub fn answer(&self, text: &str) -> Response {
        let error = match self {
            // A batch nested so is one `-32700`, as the peer answers it.
            ParseError::Json(detail)
                if unparsed::too_deep_detail(detail) && message_start(text).starts_with('{') =>
            {
                unparsed::nesting_refused(false)
            }
            ParseError::Json(detail) => unparsed::parse_refused(detail),
            ParseError::Invalid(i) => i.answer_error(),
        };
        Response {
            id: self.answer_id(text),
            outcome: Err(error),
        }
    }
}
