//! The one reading of a frame's text for both sans-I/O sides
//! ([`HostState::handle_frame`](super::HostState::handle_frame) and
//! [`ServerState::handle_frame`](super::ServerState::handle_frame)), as the async peer reads
//! a frame (`peer::reader`, `peer::pieces`): a single message, a JSON-RPC batch (JSON-RPC
//! 2.0 §6) read bounded, several messages on one line, or a text that is no message. What
//! differs between the sides (which requests are theirs, what a response gone wrong fails,
//! the server's policy message refused unread, §6.7) is asked of the side through
//! [`FrameSide`]; the classification, the refusals and their answers are written here once.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use serde_json::{json, Value};

use crate::jsonrpc::batch::{parse_batch, BoundedBatch, Top};
use crate::jsonrpc::{
    ErrorObject, InFlightId, InvalidMessage, InvalidThen, Message, ParseError, RequestId, Response,
};
use crate::session::Transmission;

/// What a side does with the parts of a frame [`take_frame`] read.
pub(crate) trait FrameSide {
    /// Whether the machine is closed: nothing more of the frame is taken.
    fn frame_closed(&self) -> bool;

    /// A text that is no batch: taken as one message (the side's `handle_text`, and what it
    /// reads past it, such as an answer of its own under a whole-float id). `Err`: it is
    /// no single valid message, and nothing of it was taken.
    fn take_single(&mut self, now: Instant, text: &str, message: &str) -> Result<(), ParseError>;

    /// A batch's entries (within the bound, at least one; `message` the batch's text)
    /// made ready to be taken each as if it came alone ([`take_value`]): an answer of the
    /// side's own under its id written as a whole float given that id; what a `Value`
    /// does not show, a member named twice (`jsonrpc::doubled`), by entry index in order.
    fn prepare_entries(
        &mut self,
        message: &str,
        entries: &mut [Value],
    ) -> Vec<(usize, crate::jsonrpc::doubled::Doubled)>;

    /// A batch refused whole past the bound (reported, and answered when owed, already):
    /// what else the side owes it, read by each entry's envelope (`why` the reason).
    fn batch_refused(&mut self, now: Instant, message: &str, why: &str);

    /// The messages of a line past the bound of several (answered already): what else the
    /// side owes them, each read by its envelope (`why` the reason).
    fn rest_refused(&mut self, now: Instant, rest: &str, why: &str);

    /// A text that is no message: reported, answered as the peer answers it
    /// ([`ParseError::owed_answers`]; [`owed_responses`]), and what else the side owes it.
    fn take_refused(&mut self, now: Instant, text: &str, message: &str, e: ParseError, max: usize);

    /// Takes one valid message.
    fn take_message(&mut self, now: Instant, msg: Message);

    /// Whether the request last taken ([`Self::take_message`]) was answered busy (past the
    /// side's bound of requests in flight) rather than taken, cleared as read: its id is
    /// not in flight, as the async peer's reader answers such a request before taking its
    /// id (`peer::reader`) where that bound is the peer's own (the server's).
    fn take_refused_busy(&mut self) -> bool;

    /// While a batch is read (`Some`): how many of its requests were taken so far (not
    /// refused, not answered busy), from `Some(0)` as it begins; `None` once it was read.
    /// The async peer counts them all against its in-flight bound until the batch's array
    /// is queued (`peer::reader`), so a side whose bound is the peer's (the server's)
    /// counts them too. Nothing by default (the host's bound is not its peer's).
    fn batch_owed(&mut self, taken: Option<usize>) {
        let _ = taken;
    }

    /// Whether an object with an id and neither a method nor an outcome, under `id`, is an
    /// answer of the side's own rather than something to answer (JSON-RPC 2.0 §5).
    fn answers_ours(&self, id: &RequestId) -> bool;

    /// A response gone wrong: reported, never answered, the request of the side's own it
    /// names failed now.
    fn fail_invalid(&mut self, now: Instant, invalid: InvalidMessage);

    /// The policy message (§6.7) in this form was refused unread (its answer, if owed,
    /// written already): the server holds nothing until the next policy Request
    /// (`ServerState::handle_policy_unread_as`); nothing for the host.
    fn policy_unread(&mut self, form: crate::policy::Form);

    /// Whether the side answers the policy message itself (the server), so a refusal of it
    /// says it was not applied.
    fn answers_policy(&self) -> bool;

    /// Reports request `id` (`method`) taken under an id written with a fraction or an
    /// exponent ([`report_fractional`]).
    fn fractional_id(&mut self, id: &RequestId, method: &str);

    /// Reports what could not be taken as a message.
    fn unreadable(&mut self, id: Option<&RequestId>, detail: String, answered: bool);

    /// Writes one frame: a response, or the answers of a batch as one array (JSON-RPC 2.0
    /// §6).
    fn write_frame(&mut self, frame: Transmission);

    /// Where the side's outputs stand, before a batch is taken ([`Self::join_answers`]).
    fn output_mark(&self) -> usize;

    /// After a batch was taken from [`Self::output_mark`] `mark` on: the side's outputs
    /// since, with the entries' `refusals`, joined by [`join`].
    fn join_answers(&mut self, mark: usize, refusals: Vec<Response>, ids: &Ids<'_>);
}

/// The requests a batch's reading took ([`join`]), one per entry (never per id: a cancel
/// or a busy answer frees an id, so one id may be owed two answers in one batch), each by
/// its identity in flight ([`crate::jsonrpc::identity::Identity`]) with the place in the
/// side's outputs since the batch began at which it was taken: an answer written before
/// that place answers something else (a request of an earlier frame its cancel named).
pub(crate) struct Ids<'a> {
    pub(crate) owed: &'a [(InFlightId, usize)],
    /// The reading stopped before the batch's end (the side closed): the entries past it
    /// were never taken, so the batch is never complete.
    pub(crate) cut: bool,
}

/// What the reading of one batch keeps ([`take_value`]): the ids of its requests held
/// (taken and not freed: a later request under one is refused), and every request taken,
/// per entry, with where the side's outputs stood ([`FrameSide::output_mark`]) when it was
/// taken ([`Ids`]). Both at most the batch's entries (its bound).
#[derive(Default)]
pub(crate) struct BatchTaking {
    held: HashSet<InFlightId>,
    owed: Vec<(InFlightId, usize)>,
    /// Of `owed`, those not answered busy ([`FrameSide::batch_owed`]).
    counted: usize,
}

/// The outputs `tail` a side wrote while a batch was read, with the `refusals` of its
/// entries, its answers joined: when each request the batch's reading took (`ids`, per
/// entry) was answered (by the machine itself while the batch was read, busy included),
/// the refusals, then those answers (each the first answer under its id written after
/// its request was taken and answering no other of them) and those under `null`, go out
/// as one array frame
/// ([`Transmission::Batch`], JSON-RPC 2.0 §6: an array even of one) at the first answer's
/// place, as the async peer writes a batch's answers; when one waits for the application,
/// the refusals go first, each its own frame, and `tail` is left as it is. `answered`
/// shows an output that is a response frame as that response, `take` takes it, `frame`
/// makes an output of a frame. At most `tail` × the batch's entries steps (both bounded).
pub(crate) fn join<O>(
    tail: VecDeque<O>,
    refusals: Vec<Response>,
    ids: &Ids<'_>,
    answered: impl Fn(&O) -> Option<&Response>,
    take: impl Fn(O) -> Option<Response>,
    frame: impl Fn(Transmission) -> O,
) -> VecDeque<O> {
    // Which outputs of `tail` answer a request of this batch: walked in order, each
    // request open from its place on, an answer under its id closing the earliest open
    // one (an answer of an earlier frame's request, such as the `-32800` its cancel in
    // this batch wrote before a request reused the id, is none of the batch's: JSON-RPC
    // 2.0 §6 joins only the answers of the batch's own requests). A refusal answers its
    // own entry, in `refusals`.
    let mut open: Vec<&InFlightId> = Vec::new();
    let mut next = ids.owed.iter().peekable();
    let mut ours = Vec::with_capacity(tail.len());
    for (k, o) in tail.iter().enumerate() {
        while let Some((id, _)) = next.next_if(|(_, at)| *at <= k) {
            open.push(id);
        }
        let mine = answered(o).is_some_and(|r| match r.id.as_ref() {
            None => true,
            Some(id) => {
                let id = InFlightId::of(id);
                match open.iter().position(|o| **o == id) {
                    Some(at) => {
                        open.remove(at);
                        true
                    }
                    None => false,
                }
            }
        });
        ours.push(mine);
    }
    if ids.cut || !open.is_empty() || next.peek().is_some() {
        let mut out: VecDeque<O> = refusals
            .into_iter()
            .map(|r| frame(Transmission::Message(Message::Response(r))))
            .collect();
        out.extend(tail);
        return out;
    }
    let mut rest = VecDeque::with_capacity(tail.len() + 1);
    let mut answers = refusals;
    let mut at = None;
    for (o, mine) in tail.into_iter().zip(ours) {
        if !mine {
            rest.push_back(o);
            continue;
        }
        at.get_or_insert(rest.len());
        answers.extend(take(o));
    }
    if !answers.is_empty() {
        rest.insert(at.unwrap_or(0), frame(Transmission::Batch(answers)));
    }
    rest
}

/// Handles every message `text` (one frame's text, as read) holds, in order, for `side`:
/// the contract [`HostState::handle_frame`](super::HostState::handle_frame) documents.
pub(crate) fn take_frame<S: FrameSide>(side: &mut S, now: Instant, text: &str, max: usize) {
    if side.frame_closed() {
        return;
    }
    let (message, json_lead) = crate::jsonrpc::message_read(text);
    // A batch is read bounded here, never built whole first (`Message::parse` would, a
    // batch followed by more text included).
    let e = if json_lead && message.starts_with('[') {
        match parse_batch(message, max) {
            Ok(top) => return take_batch(side, now, message, top, max),
            Err(e) => ParseError::Json(e.to_string()),
        }
    } else {
        match side.take_single(now, text, message) {
            Ok(()) => return,
            Err(e) => e,
        }
    };
    if let ParseError::Json(detail) = &e {
        let several = (json_lead && crate::jsonrpc::trailing_detail(detail))
            .then(|| crate::jsonrpc::several_values(message, max))
            .flatten();
        if let Some(several) = several {
            return take_several(side, now, message, several, max);
        }
    }
    side.take_refused(now, text, message, e, max);
}

/// A batch read bounded ([`parse_batch`]).
fn take_batch<S: FrameSide>(side: &mut S, now: Instant, message: &str, top: Top, max: usize) {
    let entries = match top {
        Top::Single(_) => return,
        Top::Batch(BoundedBatch::Over { count }) => {
            let detail =
                format!("a batch of {count} entries, over the limit of {max}, refused unread");
            // One of responses only is owed nothing (answering responses could loop).
            let owed = !crate::jsonrpc::envelope::batch::responses_only(message.as_bytes());
            side.unreadable(None, detail.clone(), owed);
            if owed {
                let error = ErrorObject::invalid_request_because(format_args!(
                    "batch of {count} entries exceeds the limit of {max}"
                ))
                .with_data(json!({ "limit": max, "count": count }));
                answer_refused(side, None, error);
            }
            return side.batch_refused(now, message, &detail);
        }
        Top::Batch(BoundedBatch::Within(entries)) => entries,
    };
    if entries.is_empty() {
        side.unreadable(None, "an empty batch".into(), true);
        return answer_refused(
            side,
            None,
            ErrorObject::invalid_request_because("empty batch"),
        );
    }
    let mut entries = entries;
    let doubled = side.prepare_entries(message, &mut entries);
    let mut doubled = doubled.into_iter().peekable();
    let mark = side.output_mark();
    let mut refusals = Vec::new();
    // The requests taken so far in this batch ([`BatchTaking`]): a later request under
    // the id of one is refused, as the peer refuses it (`peer::serving`: an earlier entry
    // of the same batch is in flight while the later one is read), unless a cancel or a
    // busy answer between freed it ([`take_value`]).
    let mut taken = BatchTaking::default();
    let mut cut = false;
    side.batch_owed(Some(0));
    for (i, entry) in entries.into_iter().enumerate() {
        if side.frame_closed() {
            cut = true;
            // The refusals collected are still owed their answers (`join` writes them).
            break;
        }
        let twice = doubled.next_if(|(at, _)| *at == i).map(|(_, d)| d);
        refusals.extend(take_value(side, now, entry, twice, Some(&mut taken)));
    }
    side.batch_owed(None);
    let owed: Vec<(InFlightId, usize)> = taken
        .owed
        .into_iter()
        .map(|(id, at)| (id, at.saturating_sub(mark)))
        .collect();
    side.join_answers(mark, refusals, &Ids { owed: &owed, cut });
}

/// One entry of a batch (or a single message read as a value), by the one rule for a
/// value (the peer's `reader::classify`): a valid message taken; one that is not answered
/// `-32600` under its id when request-shaped (or `null`), else it fails the request of the
/// side's own it names ([`crate::jsonrpc::invalid_then`]). The policy message so refused on
/// a side that answers it is answered as not applied and refused unread (§6.7). Gives the
/// refusal to write (in a batch, the peer writes the refusals first, then the answers as
/// they come); the caller writes it. `taken`: in a batch, what its reading keeps
/// ([`BatchTaking`]): the ids of its requests held, by their identity in flight
/// ([`RequestId::identity`]), and each request taken with its place; a valid request under
/// one held is refused ([`refuse_id_in_use`]), never taken. A request the side answers
/// busy is not taken ([`FrameSide::take_refused_busy`]), and a `notifications/cancelled`
/// naming one frees it for the entries after it, as the async peer frees it for both
/// sides' owners (`peer::serving`, `Peer::answers_cancels`: the `Server` and the
/// `HostSession` answer a cancelled request as they handle the cancel, and a request they
/// answered at once was answered before it).
pub(crate) fn take_value<S: FrameSide>(
    side: &mut S,
    now: Instant,
    value: Value,
    doubled: Option<crate::jsonrpc::doubled::Doubled>,
    mut taken: Option<&mut BatchTaking>,
) -> Option<Response> {
    let shape = crate::jsonrpc::Shape::of(&value);
    let policy = (side.answers_policy()
        && value.get("method").and_then(Value::as_str) == Some(crate::jsonrpc::head::POLICY))
    .then(|| match value.get("id") {
        Some(_) => crate::policy::Form::Request,
        None => crate::policy::Form::Notification,
    });
    let read = crate::jsonrpc::doubled::from_value_read(value, doubled);
    if let Ok(msg) = &read {
        report_fractional(side, msg);
    }
    let invalid = match read {
        Ok(Message::Request(r))
            if taken
                .as_deref_mut()
                .is_some_and(|t| !t.held.insert(InFlightId::of(&r.id))) =>
        {
            return Some(refuse_id_in_use(side, &r));
        }
        Ok(msg) => {
            let Some(t) = taken else {
                side.take_message(now, msg);
                return None;
            };
            let request = match &msg {
                Message::Request(r) => Some(InFlightId::of(&r.id)),
                Message::Notification(n) if n.method == crate::session::CANCELLED => {
                    if let Some(id) = crate::session::cancelled_request(n.params.as_ref()) {
                        t.held.remove(&InFlightId(id));
                    }
                    None
                }
                _ => None,
            };
            side.take_refused_busy();
            if let Some(id) = &request {
                t.owed.push((id.clone(), side.output_mark()));
            }
            side.take_message(now, msg);
            if let Some(id) = request {
                if side.take_refused_busy() {
                    t.held.remove(&id);
                } else {
                    t.counted += 1;
                    side.batch_owed(Some(t.counted));
                }
            }
            return None;
        }
        Err(invalid) => invalid,
    };
    match shape.then(&invalid) {
        InvalidThen::AnswerUnlessOurs(id) if side.answers_ours(&id) => {
            side.fail_invalid(now, invalid);
            None
        }
        InvalidThen::Answer(_) | InvalidThen::AnswerUnlessOurs(_) => {
            Some(refuse(side, invalid, policy))
        }
        InvalidThen::Fail(_) => {
            side.fail_invalid(now, invalid);
            None
        }
    }
}

/// A request read from text (a frame's, a batch entry's) whose id is a number written with
/// a fraction or an exponent: reported for its form once, before its id is judged
/// (`in use`) or it is run, as the async peer reports it as it reads it
/// (`peer::Diagnostic::FractionalId`; JSON-RPC 2.0 §4's SHOULD NOT). Only on the paths
/// that read text: the async drivers hand their machines messages the peer read and
/// reported already.
pub(crate) fn report_fractional<S: FrameSide>(side: &mut S, msg: &Message) {
    if let Message::Request(r) = msg {
        if r.id.is_fractional() {
            side.fractional_id(&r.id, &r.method);
        }
    }
}

/// An invalid message answered `-32600` under its id (or `null`), reported as answered:
/// the refusal to write. `policy`: it is the policy message in that form, on a side that
/// answers it: the answer says it was not applied, and it is refused unread (§6.7, §6.4
/// fail closed), as the peer refuses it (`peer::refused::answered_invalid`).
pub(crate) fn refuse<S: FrameSide>(
    side: &mut S,
    invalid: InvalidMessage,
    policy: Option<crate::policy::Form>,
) -> Response {
    let mut error = invalid.answer_error();
    if policy.is_some() {
        error = crate::jsonrpc::head::policy_not_applied(error, true);
    }
    let InvalidMessage { id, reason } = invalid;
    side.unreadable(id.as_ref(), reason, true);
    if let Some(form) = policy {
        side.policy_unread(form);
    }
    Response {
        id,
        outcome: Err(error),
    }
}

/// Request `r` under an id in use (a request of the sender's still in flight, or taken
/// earlier in the same batch): refused, never run, as the peer refuses it
/// (`peer::serving`; [`InvalidMessage::id_in_use`]); the policy Request so sent on a side
/// that answers it is not applied and grants nothing until the next one
/// (`ServerState::handle_policy_unread_as`, §6.7, §6.4 fail closed). The refusal to write.
pub(crate) fn refuse_id_in_use<S: FrameSide>(
    side: &mut S,
    r: &crate::jsonrpc::Request,
) -> Response {
    let policy = (side.answers_policy() && r.method == crate::jsonrpc::head::POLICY)
        .then_some(crate::policy::Form::Request);
    refuse(side, InvalidMessage::id_in_use(r.id.clone()), policy)
}

/// Several messages on one line ([`crate::jsonrpc::several_values`]): reported once, each
/// read alone as its own frame's text; past the bound, the rest refused unread with one
/// `-32600` under `null`.
fn take_several<S: FrameSide>(
    side: &mut S,
    now: Instant,
    message: &str,
    several: crate::jsonrpc::Several,
    max: usize,
) {
    let count = several.values.len();
    let past = match several.refused_from {
        Some(_) => format!("; those past the first {} were refused unread", max.max(2)),
        None => String::new(),
    };
    let detail =
        format!("{count} messages on one line (one message per line){past}; each read alone");
    side.unreadable(None, detail, false);
    for range in several.values {
        if let Some(piece) = message.get(range) {
            // One complete value: a single message or a batch, never several again.
            take_frame(side, now, piece, max);
        }
    }
    let Some(rest) = several.refused_from.and_then(|from| message.get(from..)) else {
        return;
    };
    let limit = max.max(2);
    let error = ErrorObject::invalid_request_because(format_args!(
        "more than {limit} messages on one line (one message per line); those past the \
         first {limit} were refused unread"
    ))
    .with_data(json!({ "limit": limit, "reason": "messages_per_line" }));
    answer_refused(side, None, error);
    let why = format!(
        "the line holding it has more than {limit} messages; those past the first {limit} \
         were refused unread"
    );
    side.rest_refused(now, rest, &why);
}

/// Writes the answer to what was refused, under `id` (`None`: `null`), unless the side
/// closed.
pub(crate) fn answer_refused<S: FrameSide>(
    side: &mut S,
    id: Option<RequestId>,
    error: ErrorObject,
) {
    if side.frame_closed() {
        return;
    }
    side.write_frame(Transmission::Message(Message::Response(Response {
        id,
        outcome: Err(error),
    })));
}

/// The frame owed a text that is no message ([`ParseError::owed_answers`]): one response,
/// or a batch's answers as one array (as the peer writes them).
pub(crate) fn owed_frame(owed: crate::jsonrpc::OwedAnswer) -> Transmission {
    match owed {
        crate::jsonrpc::OwedAnswer::One(r) => Transmission::Message(Message::Response(r)),
        crate::jsonrpc::OwedAnswer::Batch(rs) => Transmission::Batch(rs),
    }
}

/// Each object of `rest` (what follows the bound of several messages on a line), read by
/// its envelope only ([`crate::jsonrpc::head::Head::read_str`]), in order.
pub(crate) fn each_rest_object(rest: &str, mut each: impl FnMut(&str)) {
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    let mut at = 0;
    while let Some(Ok(_)) = values.next() {
        let end = values.byte_offset();
        if let Some(piece) = rest.get(at..end) {
            each(piece);
        }
        at = end;
    }
}
