//! The busy answer to a message the shared budget for partial messages refused
//! ([`ErrorObject::over_message_budget`]), the peer's and a checker's one wording.

use super::{codes, ErrorObject};

impl ErrorObject {
    /// `-32000` (busy, [`codes::BUSY`]) for a message refused after `bytes` because the
    /// budget of `limit` bytes for buffered partial messages, which connections share, was
    /// exhausted (`transport::MessageBudget`, `peer::PeerConfig::message_budget`); `data: {
    /// limit, reason: "message_budget" }`; `batch`: the refused message was a batch. The one
    /// answer to such a refusal, the peer's and a checker's. Reading (JSON-RPC 2.0 §5.1):
    /// not `-32600`, since the message may be a valid Request, refused only for this side's
    /// shared resources at that moment, and may succeed later: a server error, as a busy
    /// side's is, not an invalid request (contrast a message over `max_message_size`, whose
    /// own length is the defect, `-32600`).
    pub fn over_message_budget(bytes: usize, limit: usize, batch: bool) -> Self {
        Self::over_message_budget_on_line(bytes, limit, batch, false)
    }

    /// [`ErrorObject::over_message_budget`] for a message on a line that held more than one
    /// (`several`): the line, MCP's stdio frame (one message per line), is what the budget
    /// refused, so the answer says so rather than blaming the message it goes to, which
    /// may be a small one read whole before the budget ran out. `several` false is
    /// [`ErrorObject::over_message_budget`], word for word.
    pub fn over_message_budget_on_line(
        bytes: usize,
        limit: usize,
        batch: bool,
        several: bool,
    ) -> Self {
        let what = if batch { "batch" } else { "request" };
        let refused = if several {
            format!(
                "the line holding the {what}, which held more than one message (one message \
                 per line), was refused after {bytes} bytes, unread"
            )
        } else {
            format!("the {what} was refused after {bytes} bytes, unread")
        };
        Self::new(
            codes::BUSY,
            format!(
                "Busy: the budget of {limit} bytes for buffered partial messages is \
                 exhausted; {refused}"
            ),
        )
        .with_data(serde_json::json!({ "limit": limit, "reason": "message_budget" }))
    }
}
