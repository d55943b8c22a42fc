//! Answers to this side's own requests taken off the books: a waiting caller gets its
//! answer, a [`Peer::send_request`]'s is returned for delivery in wire order, anything else
//! is reported ([`settle`]); and whether an id names one of them ([`is_ours`]).

use super::reader::Parsed;
use super::*;

/// Whether `id` names a request of this side's own still awaited (by a caller or in wire
/// order) or given up on after its deadline: a message under it is that request's answer,
/// never a request to answer ([`crate::jsonrpc::InvalidThen::AnswerUnlessOurs`]).
pub(super) fn is_ours(shared: &Shared, id: &RequestId) -> bool {
    let in_order = {
        let set = lock(&shared.in_order);
        !set.is_empty() && set.contains(id)
    };
    in_order || lock(&shared.pending).contains_key(id) || lock(&shared.timed_out).contains(id)
}

/// Whether a message under `id` that is neither a request nor a response (an id with no
/// `method` nor outcome, [`crate::jsonrpc::InvalidThen::AnswerUnlessOurs`]) is read as an
/// answer to a request of this side's own rather than answered: when `id` names one still
/// awaited ([`is_ours`]), and when it is an id this side numbered one of its requests with
/// and that request was already answered or given up. Reading (JSON-RPC 2.0 §5: a Response
/// carries the id of a request its sender received): such a message is a late, malformed
/// answer, reported and never answered, as a late response is
/// ([`Diagnostic::LateResponse`]); a `-32600` under that number could end a request of the
/// other side's own that shares it. This side numbers its requests from 1 up
/// (`Shared::next_id`), so the ids it used are the integers below the next. An id of a
/// request not yet written names none (`Shared::was_written`): such an object is answered
/// as any is.
pub(super) fn answers_ours(shared: &Shared, id: &RequestId) -> bool {
    if !shared.was_written(id) {
        return false;
    }
    let next = shared.next_id.load(Ordering::Relaxed);
    let issued = crate::jsonrpc::head::numbered_by_us(id, next);
    issued || is_ours(shared, id)
}

/// Who waits for the answer to one of this side's requests, taken off the books.
enum Waiting {
    /// A [`Peer::send_request`]'s: delivered in wire order.
    InOrder,
    /// A caller.
    Caller(Waiter),
    /// A request given up on after its deadline.
    Late,
    /// Nobody: this side sent no such request.
    Unknown,
}

/// Takes whoever waits for the answer to `id`.
fn take_waiting(shared: &Shared, id: &RequestId) -> Waiting {
    // An id of a request not yet written answers nothing sent (`Shared::was_written`).
    if !shared.was_written(id) {
        return Waiting::Unknown;
    }
    // Most connections never send one: an empty set is not hashed into.
    let in_order = {
        let mut set = lock(&shared.in_order);
        !set.is_empty() && set.remove(id)
    };
    if in_order {
        return Waiting::InOrder;
    }
    if let Some(waiter) = lock(&shared.pending).remove(id) {
        return Waiting::Caller(waiter);
    }
    if lock(&shared.timed_out).contains(id) {
        Waiting::Late
    } else {
        Waiting::Unknown
    }
}

/// Settles a response: a waiting caller gets it, a [`Peer::send_request`]'s is returned for
/// delivery in wire order, anything else is reported.
pub(super) fn settle(shared: &Shared, response: Response) -> Option<Parsed> {
    let Some(id) = response.id.clone() else {
        shared.diagnose(Diagnostic::UnknownResponse {
            id: None,
            error: response.outcome.err(),
        });
        return None;
    };
    match take_waiting(shared, &id) {
        Waiting::InOrder => return Some(Parsed::Settled(response)),
        Waiting::Caller(waiter) => waiter.send(
            response
                .outcome
                .map(Answer::Value)
                .map_err(PeerError::Remote),
        ),
        Waiting::Late => shared.diagnose(Diagnostic::LateResponse { id }),
        Waiting::Unknown => shared.diagnose(Diagnostic::UnknownResponse {
            id: Some(id),
            error: response.outcome.err(),
        }),
    }
    None
}

/// [`settle`] for a result response read the fast way ([`Read::Answer`]), `result` being
/// the result's text: a caller waiting for text gets that text, anyone else the `Value` read
/// from it, as [`settle`] would have given them.
pub(super) fn settle_answer(shared: &Shared, id: RequestId, result: &str) -> Option<Parsed> {
    let value = || {
        serde_json::from_str::<Value>(result).map_err(|e| format!("the result does not read: {e}"))
    };
    match take_waiting(shared, &id) {
        Waiting::InOrder => {
            return Some(Parsed::Settled(match value() {
                Ok(v) => Response {
                    id: Some(id),
                    outcome: Ok(v),
                },
                Err(reason) => shared.failed_in_order(&id, &reason),
            }));
        }
        Waiting::Caller(waiter) if waiter.text => {
            waiter.send(Ok(Answer::Text(shared.answer_text(result))))
        }
        Waiting::Caller(waiter) => waiter.send(
            value()
                .map(Answer::Value)
                .map_err(PeerError::InvalidResponse),
        ),
        Waiting::Late => shared.diagnose(Diagnostic::LateResponse { id }),
        Waiting::Unknown => shared.diagnose(Diagnostic::UnknownResponse {
            id: Some(id),
            error: None,
        }),
    }
    None
}

/// Fails the request of ours a malformed response answers (`reason`), at once rather than
/// at its deadline: a waiting caller gets [`PeerError::InvalidResponse`]; a
/// [`Peer::send_request`]'s is returned for delivery in wire order as an error (`-32603`
/// naming the defect), as its answer would have been. Never one not yet written
/// (`Shared::was_written`, JSON-RPC 2.0 §5): checked here, the one place every failing
/// path (a refused response, a batch refused whole, an invalid one taken) goes through.
pub(super) fn fail_response(shared: &Shared, id: &RequestId, reason: &str) -> Option<Parsed> {
    if !shared.was_written(id) {
        return None;
    }
    let in_order = {
        let mut set = lock(&shared.in_order);
        !set.is_empty() && set.remove(id)
    };
    if in_order {
        return Some(Parsed::Settled(shared.failed_in_order(id, reason)));
    }
    if let Some(waiter) = lock(&shared.pending).remove(id) {
        waiter.send(Err(PeerError::InvalidResponse(reason.to_owned())));
    }
    None
}
