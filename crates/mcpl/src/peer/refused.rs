//! A message refused before it is built: over [`PeerConfig::max_message_size`], discarded
//! unread with only its first bytes kept ([`crate::transport::FrameReader::discarded_head`]),
//! past the shared budget for partial messages ([`PeerConfig::message_budget`]), refused
//! part read with its first bytes kept the same way, or over [`PeerConfig::max_parsed_cost`],
//! refused unbuilt (issue #20). One reading of what it shows ([`Head::read`]) and one rule
//! for what is done with it ([`Head::then`], in `jsonrpc`, which a driver of the sans-I/O
//! machines is owed its answers by too) serve every limit, so a request is answered under
//! the id it has when taken, whichever it broke; [`refuse`] carries it out.

use super::reader::Parsed;
use super::*;
pub(super) use crate::jsonrpc::head::Head;
use crate::jsonrpc::head::{IdSeen, Then};

/// The request of ours a refused message answers, if it is a response (an outcome and no
/// method, or an object read whole without a method) whose id names one outstanding (a
/// whole float read by [`super::ids::outstanding_integral`]), as [`refuse`] reads it.
pub(super) fn names_ours(head: &Head, shared: &Shared) -> Option<RequestId> {
    if head.method || !(head.outcome || head.whole) {
        return None;
    }
    let id = match &head.id {
        IdSeen::Id(id) => id.clone(),
        IdSeen::Number(n) => return super::ids::outstanding_integral(shared, n),
        IdSeen::Absent | IdSeen::Unusable | IdSeen::Cut => return None,
    };
    let outstanding =
        lock(&shared.pending).contains_key(&id) || lock(&shared.in_order).contains(&id);
    // Not a request not yet written: that answers nothing sent (`Shared::was_written`).
    (outstanding && shared.was_written(&id)).then_some(id)
}

/// The bound a refused message broke.
#[derive(Debug, Clone, Copy)]
pub(super) enum Limit<'a> {
    /// Over [`PeerConfig::max_message_size`]: `bytes` long, discarded unread.
    Size { bytes: usize, limit: usize },
    /// Over [`PeerConfig::max_parsed_cost`]: `cost` units, refused unbuilt.
    Cost { cost: usize, limit: usize },
    /// Past the shared budget for partial messages ([`PeerConfig::message_budget`]):
    /// refused after `bytes`, the rest discarded unread. `several`: its line held more than
    /// one message (MCP's stdio framing is one per line), so the line is what was refused,
    /// each of its messages told so rather than blamed.
    Budget {
        bytes: usize,
        limit: usize,
        several: bool,
    },
    /// Nested past what the parser reads (serde_json's 128 levels; the sender's bound is
    /// [`crate::jsonrpc::MAX_MEMBER_NESTING`]), though it may be valid JSON: refused whole,
    /// reported as the parse error it is (`Diagnostic::ParseError`; `error` the parser's),
    /// or, for a response naming a request of ours, as an invalid message under its id.
    Nesting { error: &'a str },
    /// Refused by the parser for anything else (a number out of a float's range, a lone
    /// surrogate escape, a text cut short; `error` the parser's). Only a response is refused
    /// by this rule ([`super::text::Read::Unparsed`]), and a text that is JSON after more
    /// than JSON whitespace and a byte order mark, read whole; anything else keeps its
    /// `-32700` (JSON-RPC 2.0 §5.1), under a request's id read before the error without
    /// doubt ([`super::text::Read::UnparsedRequest`]), else `id: null`. Reported as
    /// [`Limit::Nesting`] is. A response whose
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
            Limit::Cost { cost, limit } => ErrorObject::invalid_request_because(self.why())
                .with_data(serde_json::json!({
                    "limit": limit, "count": cost, "reason": "parsed_cost"
                })),
            // A `-32000`-class error, as for a busy side: the message itself may be valid and
            // may succeed later (`transport::budget`); the one public answer.
            Limit::Budget {
                bytes,
                limit,
                several,
            } => ErrorObject::over_message_budget_on_line(bytes, limit, batch, several),
            // As a small text the parser refuses is answered (a response with text after
            // it on its line; `refuse`).
            Limit::Unparsed { error } => crate::jsonrpc::unparsed::parse_refused(error),
            Limit::Nesting { .. } => crate::jsonrpc::unparsed::nesting_refused(batch),
        }
    }

    /// Why a response of ours refused fails its request.
    pub(super) fn why(self) -> String {
        match self {
            Limit::Size { bytes, limit } => format!(
                "the response of {bytes} bytes exceeds the {limit}-byte limit \
                 (PeerConfig::max_message_size) and was discarded unread"
            ),
            Limit::Cost { cost, limit } => format!(
                "the message would cost {cost} units parsed, over the limit of {limit} \
                 (PeerConfig::max_parsed_cost); send fewer or larger values"
            ),
            Limit::Budget {
                bytes,
                limit,
                several,
            } => format!(
                "the response was refused after {bytes} bytes, unread: the budget of {limit} \
                 bytes for buffered partial messages is exhausted (message_budget; raise \
                 PeerConfig::message_budget or the MessageBudget it shares){}",
                if several {
                    "; its line held more than one message (one message per line), refused \
                     together"
                } else {
                    ""
                }
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
/// `Diagnostic::TooCostly`, `Diagnostic::OverBudget`, `Diagnostic::ParseError`), by the one
/// rule ([`Head::then`]): answered under the id it names (or none), a response of ours
/// failed now ([`fail_response`]; a whole float read by
/// [`super::ids::outstanding_integral`]; an id that is cut names no request), or reported
/// only. A `method` past the cut of a discarded message is not known: such a message, which
/// would be request-shaped, still fails the request its id names, as only the side that
/// request went to writes that id back. (A line reader reads the whole envelope of a line
/// it discards for its size, `crate::transport::envelope`, so there the cut is only that of
/// a message the budget refused part read, or of a reader keeping less.)
///
/// The data of each answer names the limit (`reason`: `max_message_size`, `parsed_cost`,
/// `message_budget`, `nesting`), so the sender learns why rather than waiting for its own
/// deadline. The budget's refusal is `-32000` (busy: the same message may succeed later),
/// a text the parser refused `-32700`, the others `-32600`.
pub(super) fn refuse(
    shared: &Shared,
    head: Option<Head>,
    broke: Limit,
    replies: &mut Outbox,
) -> Option<Parsed> {
    let head = head.unwrap_or_default();
    let whole_text = matches!(
        broke,
        Limit::Cost { .. } | Limit::Nesting { .. } | Limit::Unparsed { .. }
    );
    let trailing = matches!(broke, Limit::Unparsed { error } if crate::jsonrpc::unparsed::trailing_detail(error));
    // An object with an id and neither a method nor an outcome: answered unless it names
    // a request of ours, which it then fails (`Then::AnswerUnlessOurs`, the one rule).
    let then = match head.then(whole_text, trailing) {
        Then::AnswerUnlessOurs(id) if super::settle::answers_ours(shared, &id) => {
            Then::Fail { trailing }
        }
        Then::AnswerUnlessOurs(id) => Then::Answer(Some(id)),
        then => then,
    };
    // What the diagnostic names: the id answered under, or the request of ours failed.
    let id = match &then {
        Then::Answer(id) => id.clone(),
        // Not one of a request not yet written (`Shared::was_written`): it fails nothing,
        // and is reported as the parse error it is.
        Then::Fail { .. } => match &head.id {
            IdSeen::Id(id) => Some(id.clone()).filter(|id| shared.was_written(id)),
            IdSeen::Number(n) => super::ids::outstanding_integral(shared, n),
            IdSeen::Absent | IdSeen::Unusable | IdSeen::Cut => None,
        },
        Then::Report | Then::AnswerUnlessOurs(_) => None,
    };
    match broke {
        Limit::Size { bytes, limit } => shared.diagnose(Diagnostic::Oversized { bytes, limit }),
        Limit::Budget { bytes, limit, .. } => {
            shared.diagnose(Diagnostic::OverBudget { bytes, limit })
        }
        // A response that names a request of ours is reported as the invalid message it is,
        // under its id (as a response taken that is no valid one is: the report is how an
        // application tells the failure delivered at its place from an answer); anything
        // else as the parse error it is.
        Limit::Nesting { error } | Limit::Unparsed { error } => {
            shared.diagnose(match (&id, &then) {
                (Some(id), Then::Fail { .. }) => Diagnostic::InvalidMessage {
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
        Then::Answer(_) => {
            let policy = head.policy_form().is_some();
            let mut error = broke.answer(head.batch);
            // The policy Request (§6.7) refused unread: it may carry a reduction nobody
            // read, so an owner that answers it itself holds nothing until the next one it
            // reads, told in wire order (`Item::PolicyUnread`); the answer says so.
            let owner = policy && super::reader::refusing_policy(shared, Some(POLICY));
            if policy {
                error = policy_not_applied(error, owner);
            }
            let reply = Message::Response(Response {
                id,
                outcome: Err(error),
            });
            let _ = replies.send(reply.to_json());
            owner.then_some(Parsed::PolicyUnread(crate::policy::Form::Request))
        }
        Then::Fail { trailing } => {
            if trailing {
                // The object ended and more followed on its line (another message after a
                // space or a lone `\r`): that may be a request, answered as a text that does
                // not parse is (JSON-RPC 2.0 §5.1).
                let reply = Message::Response(Response {
                    id: None,
                    outcome: Err(broke.answer(false)),
                });
                let _ = replies.send(reply.to_json());
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
        // A policy Notification (§6.7; no `id` read) refused unread: never answered (JSON-RPC
        // 2.0 §4.1), but it may be a narrowing nobody read, so an owner that answers the
        // policy itself holds nothing until it reads the next policy Request, told in wire
        // order (`ServerState::handle_policy_unread_as`). Known only when its `method` was
        // read (a line transport reads a discarded line's whole envelope).
        Then::Report => {
            let policy = head.policy_form().is_some();
            (policy && super::reader::refusing_policy(shared, Some(POLICY)))
                .then_some(Parsed::PolicyUnread(crate::policy::Form::Notification))
        }
        Then::AnswerUnlessOurs(_) => None,
    }
}

/// The policy Request's method (§6.7), as every refusal reads it.
use crate::jsonrpc::head::POLICY;

pub(super) use crate::jsonrpc::head::policy_not_applied;

/// An invalid message answered `-32600` under its id (JSON-RPC 2.0 §5), reported as
/// answered: the reply to write. `policy`: it is the policy message, in that form, on a
/// connection whose owner answers the policy itself ([`super::reader::refusing_policy`]), refused unread:
/// the answer says it was not applied and the owner is told ([`Parsed::ReplyUnreadPolicy`],
/// §6.7).
pub(super) fn answered_invalid(
    shared: &Shared,
    invalid: InvalidMessage,
    policy: Option<crate::policy::Form>,
) -> Parsed {
    shared.diagnose_reading(Diagnostic::InvalidMessage {
        id: invalid.id.clone(),
        reason: invalid.reason.clone(),
        answered: true,
    });
    let mut error = invalid.answer_error();
    if policy.is_some() {
        error = policy_not_applied(error, true);
    }
    let reply = Message::Response(Response {
        outcome: Err(error),
        id: invalid.id,
    });
    match policy {
        Some(form) => Parsed::ReplyUnreadPolicy(reply.to_value(), form),
        None => Parsed::Reply(reply.to_value()),
    }
}

/// Fails each request of ours (`ours`) a batch refused whole answered (`reason`), reported
/// as the invalid response it was: what is left to deliver (the failures of requests sent
/// in order), each weighing what it holds, not the batch it stood in.
pub(super) fn fail_refused(shared: &Shared, ours: Vec<RequestId>, reason: &str) -> Vec<Parsed> {
    let mut failed = Vec::new();
    for id in ours {
        shared.diagnose(Diagnostic::InvalidMessage {
            id: Some(id.clone()),
            reason: reason.to_owned(),
            answered: false,
        });
        failed.extend(super::settle::fail_response(shared, &id, reason));
    }
    if !failed.is_empty() {
        // As `fail_response` words it: "invalid response: {reason}".
        let held = std::mem::size_of::<Response>() + "invalid response: ".len() + reason.len();
        shared.reading.store(held, Ordering::Relaxed);
    }
    failed
}
