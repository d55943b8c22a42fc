//! [`HostState::handle_frame`]: every message a frame's text holds, each handled as the
//! async peer and host handle it (`peer::reader`, `peer::pieces`): a single message, a
//! JSON-RPC batch (JSON-RPC 2.0 §6), several messages on one line, and a text that is no
//! message, which is answered as the peer answers it and reported, never `Err`.

use super::*;
use crate::jsonrpc::head::{Head, IdSeen};
use crate::jsonrpc::{InvalidMessage, ParseError};
use crate::session::frames::take_value;

impl HostState {
    /// Handles every message `text` (one frame's text, as read) holds, in order, as the
    /// async host handles a frame: the one entry point a driver needs for what it reads.
    /// Never refuses the text: what is owed an answer gets it
    /// ([`HostOutput::Transmit`]), what could not be taken is reported
    /// ([`HostDiagnostic::Unreadable`]), and an answer to a request of ours that cannot be
    /// read fails that request at once ([`HostOutput::Response`] with `-32603 invalid
    /// response: …`, or the hook's, fetch's or policy's own failure) rather than at its
    /// deadline, as the peer fails it.
    ///
    /// - A single message: as [`Self::handle_text`] takes it (an answer deciding authority
    ///   read whole).
    /// - A batch (JSON-RPC 2.0 §6) of at most `max_batch_entries` entries (the peer's
    ///   default is 1,024, `peer::DEFAULT_MAX_BATCH_ENTRIES`), read bounded: each entry in
    ///   order, as if it came alone: a response settles its request, a request is answered
    ///   (or handed out, [`HostOutput::Request`]) under its id, a notification handled; an
    ///   entry that is no valid message is answered `-32600` under its id when
    ///   request-shaped (or `null`), else it fails the request of ours it names (the one
    ///   rule, [`crate::jsonrpc::invalid_then`]). A request under the id of one taken
    ///   earlier in the same batch, or of one the application still holds, is refused
    ///   `-32600` (id in use, the peer's `peer::serving` rule), never run. An empty batch, or one past the bound, is
    ///   answered with one `-32600` under `null` (one of responses only past the bound is
    ///   owed nothing; each request of ours it answers fails).
    /// - Several complete messages on one line (a framing defect: one message per line,
    ///   [`crate::jsonrpc::several_values`]): reported once, each read alone; past
    ///   `max_batch_entries` of them the rest is refused unread with one `-32600` under
    ///   `null`, and an answer of ours there fails its request.
    /// - Anything else: answered as the peer answers it
    ///   ([`crate::jsonrpc::ParseError::owed_answers`]).
    ///
    /// The answers to a batch (JSON-RPC 2.0 §6 asks them in one array once all are
    /// processed, a SHOULD): when every answer it is owed is written while it is read
    /// (refusals, and requests the machine answers itself, such as `ping`), they go out as
    /// one array frame ([`Transmission::Batch`], an array even of one answer), as the
    /// async host writes them. When a request of the batch is handed to the application
    /// ([`HostOutput::Request`]), each answer goes out as its own frame, in the order the
    /// machine gives it (the application's when it answers): holding the others until it
    /// answers would hold them up to [`HostRules::answer_timeout`], and every answer carries
    /// its request's id, so the server matches each all the same. The side-independent
    /// reading is `session::frames`, which [`ServerState::handle_frame`](crate::session::ServerState::handle_frame) shares.
    ///
    /// [`Self::handle_text`] is kept for drivers that split frames themselves.
    pub fn handle_frame(&mut self, now: Instant, text: &str, max_batch_entries: usize) {
        crate::session::frames::take_frame(self, now, text, max_batch_entries);
    }
}

impl crate::session::frames::FrameSide for HostState {
    fn frame_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    fn take_single(&mut self, now: Instant, text: &str, message: &str) -> Result<(), ParseError> {
        match self.handle_text(now, text) {
            // An answer of ours under its id written as a whole float (`7.0`): the peer's
            // reading (`peer::ids::integral_id`).
            Err(ParseError::Invalid(invalid)) => match self.whole_float_answer(message) {
                Some((value, integral)) => {
                    self.diag(integral);
                    self.take_answer_value(now, message, value);
                    Ok(())
                }
                None => Err(ParseError::Invalid(invalid)),
            },
            other => other,
        }
    }

    fn prepare_entries(
        &mut self,
        message: &str,
        entries: &mut [Value],
    ) -> Vec<(usize, crate::jsonrpc::doubled::Doubled)> {
        // An answer of ours under its id written as a whole float (`7.0`) answers it, as the
        // peer reads it (`peer::ids::integral_id`).
        for entry in entries.iter_mut() {
            if !crate::jsonrpc::Shape::of(entry).request_like() {
                if let Some(integral) = self.whole_float_id(entry) {
                    self.diag(integral);
                }
            }
        }
        // What a `Value` does not show: a request's member named twice, and any member
        // named twice in an answer deciding authority (`jsonrpc::doubled`, the peer's
        // reading), by entry index.
        let answers: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, v)| v.get("method").is_none())
            .filter(|(_, v)| {
                let id = v.get("id").and_then(RequestId::from_value);
                self.answer_read_whole(id.as_ref())
            })
            .map(|(i, _)| i)
            .collect();
        crate::jsonrpc::doubled::doubled_in_batch(message, entries, &answers)
    }

    fn batch_refused(&mut self, now: Instant, message: &str, why: &str) {
        self.fail_ours_in_batch(now, message, why);
    }

    /// An answer of ours among them ends its request now (the peer's
    /// `ours_past_the_bound`).
    fn rest_refused(&mut self, now: Instant, rest: &str, why: &str) {
        let mut heads = Vec::new();
        crate::session::frames::each_rest_object(rest, |piece| {
            if let Some(shown) = self.ours_shown_as(&Head::read_str(piece)) {
                heads.push(shown);
            }
        });
        for (key, integral) in heads {
            if let Some(integral) = integral {
                self.diag(integral);
            }
            self.fail_ours(now, key, why);
        }
    }

    /// A text that is no message: answered as the peer answers it
    /// ([`ParseError::owed_answers`]), reported, and the request of ours a response in it
    /// names failed now.
    fn take_refused(&mut self, now: Instant, text: &str, message: &str, e: ParseError, max: usize) {
        let detail = e.to_string();
        let head = Head::read_str(message);
        // A response of ours (an outcome and no method, or an object read whole with an id
        // and neither: `Then::AnswerUnlessOurs`), failed rather than answered.
        let ours = self.ours_shown_told(&head);
        // Or one of ours already answered or given up: a late, malformed answer, reported,
        // never answered (the peer's `answers_ours`).
        let late = ours.is_none()
            && !head.method
            && head.whole
            && matches!(&head.id, IdSeen::Id(id) if self.answers_ours(id));
        let id = match &e {
            ParseError::Invalid(i) => i.id.clone(),
            ParseError::Json(_) => e.answer_id(text),
        };
        let owed = e.owed_answers_as(text, max, false).filter(|_| {
            // Only what follows a response of ours on its line is still answered.
            (ours.is_none() && !late) || head.outcome
        });
        self.unreadable(id.as_ref(), detail.clone(), owed.is_some());
        if let Some(owed) = owed {
            self.write_frame(crate::session::frames::owed_frame(owed));
        }
        if let Some(key) = ours {
            self.fail_ours(now, key, &detail);
        }
        if head.batch {
            self.fail_ours_in_batch(now, message, &format!("the batch holding it: {detail}"));
        }
    }

    fn take_message(&mut self, now: Instant, msg: Message) {
        self.handle_message(now, msg);
    }

    /// Never: the host's bound on what it hands out (`HostRules::max_pending_outputs`) has
    /// no counterpart in the async host's peer, which has taken the request's id by the time
    /// its `HostState` answers it busy (the id is freed as that answer is queued, after the
    /// batch is read), so the id stays taken for the rest of its batch here too.
    fn take_refused_busy(&mut self) -> bool {
        false
    }

    fn answers_ours(&self, id: &RequestId) -> bool {
        HostState::answers_ours(self, id)
    }

    /// A response gone wrong: reported, never answered (answering a response could loop),
    /// the request of ours its id names failed now.
    fn fail_invalid(&mut self, now: Instant, invalid: InvalidMessage) {
        let InvalidMessage { id, reason } = invalid;
        self.unreadable(id.as_ref(), reason.clone(), false);
        if let Some(key) = id.as_ref().and_then(|id| self.ours(id)) {
            self.fail_ours(now, key, &reason);
        }
    }

    /// The host does not answer the policy message (§6.7 is the server's to answer).
    fn policy_unread(&mut self, _form: crate::policy::Form) {}

    fn answers_policy(&self) -> bool {
        false
    }

    /// Reports what could not be taken as a message.
    fn fractional_id(&mut self, id: &RequestId, method: &str) {
        self.diag(HostDiagnostic::FractionalId {
            id: id.to_value().to_string(),
            method: method.to_owned(),
        });
    }

    fn unreadable(&mut self, id: Option<&RequestId>, detail: String, answered: bool) {
        let id = id.map(|id| id.to_value().to_string());
        self.diag(HostDiagnostic::Unreadable {
            id,
            detail,
            answered,
        });
    }

    fn write_frame(&mut self, frame: Transmission) {
        self.out.push_back(HostOutput::Transmit(frame));
    }

    fn output_mark(&self) -> usize {
        self.out.len()
    }

    fn join_answers(
        &mut self,
        mark: usize,
        refusals: Vec<Response>,
        ids: &crate::session::frames::Ids<'_>,
    ) {
        let tail = self.out.split_off(mark.min(self.out.len()));
        let joined = crate::session::frames::join(
            tail,
            refusals,
            ids,
            |o| match o {
                HostOutput::Transmit(Transmission::Message(Message::Response(r))) => Some(r),
                _ => None,
            },
            |o| match o {
                HostOutput::Transmit(Transmission::Message(Message::Response(r))) => Some(r),
                _ => None,
            },
            HostOutput::Transmit,
        );
        self.out.extend(joined);
    }
}

impl HostState {
    /// Each request of ours the entries of a batch refused whole answer, failed now (the
    /// peer's `ours_in_batch`, by each entry's envelope as far as the batch reads).
    /// Only the ids of ours are kept (bounded by the requests waiting), never the entries.
    fn fail_ours_in_batch(&mut self, now: Instant, message: &str, why: &str) {
        let mut ours = Vec::new();
        let mut seen = std::collections::HashSet::new();
        crate::jsonrpc::envelope::batch_entries(message.as_bytes(), |entry, ended| {
            let shown = entry
                .summary(ended)
                .and_then(|summary| self.ours_shown_as(&Head::read(&summary)));
            if let Some(shown) = shown.filter(|(k, _)| seen.insert(*k)) {
                ours.push(shown);
            }
        });
        for (key, integral) in ours {
            if let Some(integral) = integral {
                self.diag(integral);
            }
            self.fail_ours(now, key, why);
        }
    }

    /// The request of ours still waiting that `head` answers: a response (an outcome and
    /// no method) or an object read whole without a method (the peer's `names_ours`), its
    /// id exact or written as a whole float ([`crate::jsonrpc::head::whole_float_id`]).
    fn ours_shown(&self, head: &Head) -> Option<u64> {
        if head.method || !(head.outcome || head.whole) {
            return None;
        }
        match &head.id {
            IdSeen::Id(id) => self.ours(id),
            IdSeen::Number(n) => {
                crate::jsonrpc::head::whole_float_id(n).and_then(|id| self.ours(&id))
            }
            _ => None,
        }
    }

    /// [`Self::ours_shown`], with the report of its id's form when written as a whole float
    /// ([`HostDiagnostic::IntegralId`], as the peer's `ids::outstanding_integral` reports it).
    fn ours_shown_as(&self, head: &Head) -> Option<(u64, Option<HostDiagnostic>)> {
        let key = self.ours_shown(head)?;
        let integral = match &head.id {
            IdSeen::Number(n) => Some(HostDiagnostic::IntegralId {
                id: key,
                written: n.to_string(),
            }),
            _ => None,
        };
        Some((key, integral))
    }

    /// [`Self::ours_shown_as`], its report output now.
    fn ours_shown_told(&mut self, head: &Head) -> Option<u64> {
        let (key, integral) = self.ours_shown_as(head)?;
        if let Some(integral) = integral {
            self.diag(integral);
        }
        Some(key)
    }

    /// Whether an object with an id and neither a method nor an outcome, under `id`, is read
    /// as an answer of ours rather than answered: a request of ours waits under it, or the
    /// host numbered one of its requests with it, since answered or given up (the peer's
    /// `answers_ours`, by [`crate::jsonrpc::head::numbered_by_us`]; JSON-RPC 2.0 §5: a
    /// `-32600` under that number could end a request of the server's own that shares it).
    /// Only a request whose frame was written counts: under the id of one still queued
    /// such an object is answered as any is (the peer's reading, `Shared::was_written`).
    fn answers_ours(&self, id: &RequestId) -> bool {
        self.pending.numbered_and_written(id) || self.ours(id).is_some()
    }

    /// Gives `value`'s `id`, a number naming a request of ours waiting as a whole float
    /// (`7.0`), that request's integer id (the peer's `ids::integral_id`, by
    /// [`crate::jsonrpc::head::whole_float_id`]); the report of the id's form
    /// ([`HostDiagnostic::IntegralId`]), or `None` when it was left.
    fn whole_float_id(&self, value: &mut Value) -> Option<HostDiagnostic> {
        let slot = value.as_object_mut()?.get_mut("id")?;
        let Value::Number(n) = slot else {
            return None;
        };
        let id = crate::jsonrpc::head::whole_float_id(n)?;
        let key = self.ours(&id)?;
        let written = n.to_string();
        *slot = id.to_value();
        Some(HostDiagnostic::IntegralId { id: key, written })
    }

    /// A single message `message` refused as invalid only for its id, a number naming a
    /// request of ours waiting as a whole float: its value, the id made that request's
    /// (read again only on this error path), and the report of the id's form. `None` for
    /// anything else.
    fn whole_float_answer(&self, message: &str) -> Option<(Value, HostDiagnostic)> {
        let head = Head::read_str(message);
        if head.method || !matches!(head.id, IdSeen::Number(_)) {
            return None;
        }
        let mut value: Value = serde_json::from_str(message).ok()?;
        let integral = self.whole_float_id(&mut value)?;
        Some((value, integral))
    }

    /// An answer of ours read from a single message's `value` (its id made exact), as
    /// [`Self::handle_text`] takes one: an answer deciding authority read for members
    /// named twice in `message`.
    fn take_answer_value(&mut self, now: Instant, message: &str, value: Value) {
        let id = value.get("id").and_then(RequestId::from_value);
        let doubled = self
            .answer_read_whole(id.as_ref())
            .then(|| crate::jsonrpc::repeated::first_repeated(message))
            .flatten()
            .map(crate::jsonrpc::doubled::Doubled::Within);
        if let Some(refusal) = take_value(self, now, value, doubled, None) {
            let Response { id, outcome } = refusal;
            if let Err(error) = outcome {
                crate::session::frames::answer_refused(self, id, error);
            }
        }
    }

    /// The key of the request of ours waiting under `id` whose frame was written, if any.
    fn ours(&self, id: &RequestId) -> Option<u64> {
        match id {
            RequestId::Number(n) => n.as_u64().filter(|k| self.pending.answerable(*k).is_some()),
            RequestId::String(_) => None,
        }
    }

    /// Fails request `key` of ours as its answer could not be read: `-32603 invalid
    /// response: …`, as the peer fails it and [`Self::handle_text`] fails an answer
    /// deciding authority named twice.
    fn fail_ours(&mut self, now: Instant, key: u64, why: &str) {
        let Some(purpose) = self.pending.answered(key) else {
            return;
        };
        let error = ErrorObject::internal(format!("invalid response: {why}"));
        self.on_answer(now, key, purpose, Answer::Error(error));
    }
}
