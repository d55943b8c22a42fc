//! [`ServerState::handle_frame`]: every message a frame's text holds, each handled as the
//! async peer and `server::Server` handle it, by the one reading both sans-I/O sides share
//! (`session::frames`): a single message, a JSON-RPC batch (JSON-RPC 2.0 §6), several
//! messages on one line, and a text that is no message, answered as the peer answers it and
//! reported, never `Err`.

use std::time::Instant;

use serde_json::Value;

use super::{ServerOutput, ServerState};
use crate::jsonrpc::head::{Head, IdSeen};
use crate::jsonrpc::{ErrorObject, InvalidMessage, Message, ParseError, RequestId, Response};
use crate::session::frames::{owed_frame, take_value, FrameSide};
use crate::session::{ServerDiagnostic, Transmission};

impl ServerState {
    /// Handles every message `text` (one frame's text, as read) holds, in order, as the
    /// async `server::Server` handles a frame: the one entry point a sans-I/O driver needs
    /// for what it reads. Never refuses the text: what is owed an answer gets it
    /// ([`ServerOutput::Transmit`]), what could not be taken is reported
    /// ([`ServerDiagnostic::Unreadable`]), and an answer to a request of the server's own
    /// ([`Self::request`]) that cannot be read fails that request at once
    /// ([`ServerOutput::Response`] with `-32603 invalid response: …`) rather than at its
    /// deadline, as the peer fails it.
    ///
    /// - A single message: as [`Self::handle_text`] takes it; an answer of the server's
    ///   own under its id written as a whole float (`7.0`) answers it (the peer's reading,
    ///   `jsonrpc::head::whole_float_id`).
    /// - A batch (JSON-RPC 2.0 §6) of at most `max_batch_entries` entries (the peer's
    ///   default is 1,024, `peer::DEFAULT_MAX_BATCH_ENTRIES`), read bounded: each entry in
    ///   order, as if it came alone. An entry that is no valid message is answered `-32600`
    ///   under its id when request-shaped (or `null`), else it fails the request of the
    ///   server's own it names (the one rule, [`crate::jsonrpc::invalid_then`]). The policy
    ///   Request (§6.7) in a batch is taken as the peer takes it: a valid one is applied
    ///   and answered like any request of the batch; one refused (invalid, or in a batch
    ///   refused whole) is refused unread ([`Self::handle_policy_unread_as`], §6.4 fail
    ///   closed), its answer saying it was not applied. A request under the id of one
    ///   taken earlier in the same batch, or of one still with the application, is refused
    ///   `-32600` (id in use, the peer's `peer::serving` rule), never run; the policy
    ///   Request so sent is refused unread alike. An empty batch, or one past the
    ///   bound, is answered with one `-32600` under `null` (one of responses only past the
    ///   bound is owed nothing; each request of the server's own it answers fails).
    /// - Several complete messages on one line (a framing defect: one message per line,
    ///   [`crate::jsonrpc::several_values`]): reported once, each read alone; past
    ///   `max_batch_entries` of them the rest is refused unread with one `-32600` under
    ///   `null` (the policy message there refused unread, an answer of the server's own
    ///   there failing its request).
    /// - Anything else: answered as the peer answers it
    ///   ([`crate::jsonrpc::ParseError::owed_answers`]); the policy message it shows
    ///   refused unread, as [`Self::handle_text`] refuses it.
    ///
    /// The answers to a batch: when every answer it is owed is written while it is read
    /// (refusals, and requests the machine answers itself: `ping`, the policy Request,
    /// `initialize` …), they go out as one array frame ([`Transmission::Batch`], an array
    /// even of one answer), as the async server writes them (JSON-RPC 2.0 §6, a
    /// SHOULD). When a request of the batch is handed to the application
    /// ([`ServerOutput::Request`]), each answer goes out as its own frame, in the order the
    /// machine gives it (the application's when it answers): every answer carries its
    /// request's id, so the host matches each all the same.
    pub fn handle_frame(&mut self, now: Instant, text: &str, max_batch_entries: usize) {
        crate::session::frames::take_frame(self, now, text, max_batch_entries);
    }

    /// The request of the server's own still waiting that `head` answers: a response (an
    /// outcome and no method) or an object read whole without a method (the peer's
    /// `names_ours`), its id exact or written as a whole float.
    fn own_shown(&self, head: &Head) -> Option<u64> {
        if head.method || !(head.outcome || head.whole) {
            return None;
        }
        match &head.id {
            IdSeen::Id(id) => self.own(id),
            IdSeen::Number(n) => {
                crate::jsonrpc::head::whole_float_id(n).and_then(|id| self.own(&id))
            }
            _ => None,
        }
    }

    /// The id of the request of the server's own waiting under `id`, if any.
    fn own(&self, id: &RequestId) -> Option<u64> {
        match id {
            RequestId::Number(n) => n.as_u64().filter(|k| self.pending.waits(*k)),
            RequestId::String(_) => None,
        }
    }

    /// Fails request `id` of the server's own as its answer could not be read: `-32603
    /// invalid response: …`, as the peer fails it (`server::Server` reads that failure as
    /// the request's answer).
    fn fail_own(&mut self, now: Instant, id: u64, why: &str) {
        let error = ErrorObject::internal(format!("invalid response: {why}"));
        self.handle_message(
            now,
            Message::Response(Response {
                id: Some(RequestId::from(id)),
                outcome: Err(error),
            }),
        );
    }

    /// Each request of the server's own the entries of a batch refused whole answer, failed
    /// now (the peer's `ours_in_batch`); only their ids are kept.
    fn fail_own_in_batch(&mut self, now: Instant, message: &str, why: &str) {
        let mut own = Vec::new();
        crate::jsonrpc::envelope::batch_entries(message.as_bytes(), |entry, ended| {
            let id = entry
                .summary(ended)
                .and_then(|summary| self.own_shown(&Head::read(&summary)));
            if let Some(id) = id.filter(|id| !own.contains(id)) {
                own.push(id);
            }
        });
        for id in own {
            self.fail_own(now, id, why);
        }
    }

    /// Gives `value`'s `id`, a number naming a request of the server's own waiting as a
    /// whole float (`7.0`), that request's integer id; `None` when it was left.
    fn whole_float_own(&self, value: &mut Value) -> Option<()> {
        let slot = value.as_object_mut()?.get_mut("id")?;
        let Value::Number(n) = slot else {
            return None;
        };
        let id = crate::jsonrpc::head::whole_float_id(n)?;
        self.own(&id)?;
        *slot = id.to_value();
        Some(())
    }
}

impl FrameSide for ServerState {
    fn frame_closed(&self) -> bool {
        self.closed
    }

    /// [`Self::handle_text`]'s reading, the policy refused unread left to
    /// [`FrameSide::take_refused`] (a text of several messages is not refused whole).
    fn take_single(&mut self, now: Instant, _text: &str, message: &str) -> Result<(), ParseError> {
        match Message::parse(message) {
            Ok(msg) => {
                crate::session::frames::report_fractional(self, &msg);
                self.handle_message(now, msg);
                Ok(())
            }
            Err(ParseError::Invalid(invalid)) => {
                let head = Head::read_str(message);
                let mut value = (!head.method && matches!(head.id, IdSeen::Number(_)))
                    .then(|| serde_json::from_str::<Value>(message).ok())
                    .flatten();
                match value.as_mut().and_then(|v| self.whole_float_own(v)) {
                    Some(()) => {
                        let refusal = value.and_then(|v| take_value(self, now, v, None, None));
                        if let Some(Response {
                            id,
                            outcome: Err(error),
                        }) = refusal
                        {
                            crate::session::frames::answer_refused(self, id, error);
                        }
                        Ok(())
                    }
                    None => Err(ParseError::Invalid(invalid)),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn prepare_entries(
        &mut self,
        message: &str,
        entries: &mut [Value],
    ) -> Vec<(usize, crate::jsonrpc::doubled::Doubled)> {
        for entry in entries.iter_mut() {
            if !crate::jsonrpc::Shape::of(entry).request_like() {
                self.whole_float_own(entry);
            }
        }
        // A request's member named twice (`jsonrpc::doubled`, the peer's reading).
        crate::jsonrpc::doubled::doubled_in_batch(message, entries, &[])
    }

    /// The policy message among the entries refused unread (told first, as the peer
    /// tells it), then each request of the server's own they answer failed.
    fn batch_refused(&mut self, now: Instant, message: &str, why: &str) {
        if let Some(form) = crate::jsonrpc::head::policy_in(message) {
            self.handle_policy_unread_as(form);
        }
        self.fail_own_in_batch(now, message, why);
    }

    fn rest_refused(&mut self, now: Instant, rest: &str, why: &str) {
        let mut policy = None;
        let mut own = Vec::new();
        crate::session::frames::each_rest_object(rest, |piece| {
            let head = Head::read_str(piece);
            policy = match (policy, head.policy_form()) {
                (Some(crate::policy::Form::Request), _) => policy,
                (_, Some(f)) => Some(f),
                (p, None) => p,
            };
            own.extend(self.own_shown(&head));
        });
        if let Some(form) = policy {
            self.handle_policy_unread_as(form);
        }
        for id in own {
            self.fail_own(now, id, why);
        }
    }

    fn take_refused(&mut self, now: Instant, text: &str, message: &str, e: ParseError, max: usize) {
        let detail = e.to_string();
        let head = Head::read_str(message);
        let own = self.own_shown(&head);
        // A late, malformed answer to one of the server's own: reported, never answered.
        let late = own.is_none()
            && !head.method
            && head.whole
            && matches!(&head.id, IdSeen::Id(id) if FrameSide::answers_ours(self, id));
        let id = match &e {
            ParseError::Invalid(i) => i.id.clone(),
            ParseError::Json(_) => e.answer_id(text),
        };
        let owed = e
            .owed_answers_as(text, max, true)
            .filter(|_| (own.is_none() && !late) || head.outcome);
        self.unreadable(id.as_ref(), detail.clone(), owed.is_some());
        if let Some(owed) = owed {
            self.write_frame(owed_frame(owed));
        }
        // §6.7, §6.4 fail closed: as `handle_text` refuses it.
        if let Some(form) = crate::jsonrpc::head::policy_in(message) {
            self.handle_policy_unread_as(form);
        }
        if let Some(id) = own {
            self.fail_own(now, id, &detail);
        }
        if head.batch {
            self.fail_own_in_batch(now, message, &format!("the batch holding it: {detail}"));
        }
    }

    fn take_message(&mut self, now: Instant, msg: Message) {
        self.handle_message(now, msg);
    }

    fn batch_owed(&mut self, taken: Option<usize>) {
        self.batch_owed = match (self.batch_owed, taken) {
            (_, None) => None,
            (None, Some(n)) => Some((self.handed.len(), n)),
            (Some((at_start, _)), Some(n)) => Some((at_start, n)),
        };
    }

    fn take_refused_busy(&mut self) -> bool {
        std::mem::take(&mut self.refused_busy)
    }

    /// A request of the server's own waits under `id`, or the server numbered one with it
    /// (JSON-RPC 2.0 §5; [`crate::jsonrpc::head::numbered_by_us`]).
    fn answers_ours(&self, id: &RequestId) -> bool {
        self.pending.numbered(id) || self.own(id).is_some()
    }

    fn fail_invalid(&mut self, now: Instant, invalid: InvalidMessage) {
        let InvalidMessage { id, reason } = invalid;
        self.unreadable(id.as_ref(), reason.clone(), false);
        if let Some(own) = id.as_ref().and_then(|id| self.own(id)) {
            self.fail_own(now, own, &reason);
        }
    }

    fn policy_unread(&mut self, form: crate::policy::Form) {
        self.handle_policy_unread_as(form);
    }

    fn answers_policy(&self) -> bool {
        true
    }

    fn fractional_id(&mut self, id: &RequestId, method: &str) {
        let d = ServerDiagnostic::FractionalId {
            id: id.clone(),
            method: method.to_owned(),
        };
        self.out.push_back(ServerOutput::Diagnostic(d));
    }

    fn unreadable(&mut self, id: Option<&RequestId>, detail: String, answered: bool) {
        let id = id.map(|id| id.to_value().to_string());
        self.out
            .push_back(ServerOutput::Diagnostic(ServerDiagnostic::Unreadable {
                id,
                detail,
                answered,
            }));
    }

    fn write_frame(&mut self, frame: Transmission) {
        self.out.push_back(ServerOutput::Transmit(frame));
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
                ServerOutput::Transmit(Transmission::Message(Message::Response(r))) => Some(r),
                _ => None,
            },
            |o| match o {
                ServerOutput::Transmit(Transmission::Message(Message::Response(r))) => Some(r),
                _ => None,
            },
            ServerOutput::Transmit,
        );
        self.out.extend(joined);
    }
}
