//! What is done with a JSON value that is no valid message ([`InvalidThen`]): the one rule
//! of the peer, of [`super::ParseError::owed_answer`] and of `mcpl check` for a value read
//! whole, beside [`super::refusal_of`] for a text refused before it is built.

use serde_json::Value;

use super::{request_like, InvalidMessage, RequestId};

/// What is done with a JSON value that is no valid message ([`super::Message::from_value`] refused
/// it with an [`InvalidMessage`]): [`invalid_then`], the one rule of the peer, of
/// [`super::ParseError::owed_answer`] and of `mcpl check`, beside the rule for a text refused
/// before it is built ([`super::refusal_of`]), which reads it alike.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InvalidThen {
    /// Request-shaped (a `method` member, whatever else), or no object (a batch entry
    /// such as `1`): answered `-32600` under this id (`None`: `"id": null`, JSON-RPC 2.0 §5).
    Answer(Option<RequestId>),
    /// An object with an id and neither a `method` nor a `result` or an `error`: no Request
    /// object (§4) nor Response object (§5). When the id names a request of the reader's
    /// own still outstanding, it is that request's malformed answer: the request fails and
    /// nothing is answered. Otherwise it is answered `-32600` under this id (an error
    /// response, which is never answered back, so this cannot loop).
    AnswerUnlessOurs(RequestId),
    /// A response gone wrong (an outcome and no `method`), or an object with neither a
    /// `method` nor a usable id: never answered (answering a response could loop); the
    /// reader's own request under this id, if there is one outstanding, fails.
    Fail(Option<RequestId>),
}

/// What is done with `value`, which [`super::Message::from_value`] refused with `invalid` (the one
/// rule: see [`InvalidThen`]). Read off the refusal path only, so a valid message costs
/// nothing here.
pub fn invalid_then(value: &Value, invalid: &InvalidMessage) -> InvalidThen {
    Shape::of(value).then(invalid)
}

/// What [`invalid_then`] reads of a value, taken before the value is consumed by
/// [`super::Message::from_value`] (a reader that reads a value once, as the peer and `mcpl check`
/// do, need not copy it).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    request_like: bool,
    /// An object with an `id` and no `method`, `result` or `error`.
    bare: bool,
}

impl Shape {
    /// Reads `value`'s shape.
    pub fn of(value: &Value) -> Shape {
        let request_like = request_like(value);
        let bare = !request_like
            && value.as_object().is_some_and(|o| {
                o.contains_key("id") && !o.contains_key("result") && !o.contains_key("error")
            });
        Shape { request_like, bare }
    }

    /// Whether the value has a `method` member, or is no object (a batch entry such as `1`).
    pub fn request_like(self) -> bool {
        self.request_like
    }

    /// Whether the value is an object with an `id` and no `method`, `result` or `error`
    /// ([`InvalidThen::AnswerUnlessOurs`] when its id is usable).
    pub fn bare(self) -> bool {
        self.bare
    }

    /// [`invalid_then`] of the value read.
    pub fn then(self, invalid: &InvalidMessage) -> InvalidThen {
        match (&invalid.id, self) {
            (
                id,
                Shape {
                    request_like: true, ..
                },
            ) => InvalidThen::Answer(id.clone()),
            (Some(id), Shape { bare: true, .. }) => InvalidThen::AnswerUnlessOurs(id.clone()),
            (id, _) => InvalidThen::Fail(id.clone()),
        }
    }
}

impl InvalidMessage {
    /// A request under `id` while an earlier request of its sender under the same id is
    /// still in flight (the MCP base protocol forbids reusing an id within the session; the
    /// answers could not be told apart, JSON-RPC 2.0 §5): refused `-32600` under that id,
    /// never run, the first one answered as usual.
    pub fn id_in_use(id: RequestId) -> InvalidMessage {
        super::invalid(
            Some(id),
            "the id is in use by a request of yours still in flight; a request id must not \
             be reused",
        )
    }
}
