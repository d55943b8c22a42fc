//! The server's requests handed to the application ([`HostOutput::Request`]) and not yet
//! answered, each with its deadline ([`HostRules::answer_timeout`]) indexed, so the earliest
//! and the ones due are found without a scan: kept in [`crate::session::pending`], as ours
//! are.
//!
//! Reading (JSON-RPC 2.0 §4: a request with an id gets a response; MCPL §11 and §12 set no
//! time for the host's): an application that never answers must not leave the server's
//! request unanswered and its slot ([`HostRules::max_pending_outputs`]) taken for the life
//! of the connection, so past the deadline the machine answers it itself, `-32603` with
//! `data: { reason: "answer_timeout", timeoutMs }`, reports
//! [`HostDiagnostic::AnswerTimedOut`] (the application's mistake, not the server's) and
//! hands out [`HostOutput::AnswerTimedOut`] for the driver to stop the work. A streamed
//! `inference/request` (§11.4) counts from its hand-out, and each chunk the application
//! sends starts the count again: the deadline bounds silence, not the length of a
//! generation (a stream longer than the timeout is not cut while chunks flow).
//! The application's side lives here as well: [`HostState::answer`] and
//! [`HostState::inference_chunk`].

use super::*;
use crate::jsonrpc::InFlightId;

/// How long the application may take to answer a server request by default
/// ([`HostRules::answer_timeout`]): 120 s, long enough for a long generation, past the
/// 30 s a server of this crate waits by default ([`crate::session::DEFAULT_REQUEST_TIMEOUT`]).
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// A server request handed out to the application ([`HostOutput::Request`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct AppRequest {
    /// The method (`inference/request` or `model/info`).
    pub(super) method: &'static str,
    /// What its admission required (§5.4): its answer is delivered only while the grant in
    /// force still satisfies it ([`HostState::answer`]).
    pub(super) requirement: Requirement,
    /// An `inference/request`: its result is checked before it is sent (§11.3).
    pub(super) inference: bool,
    /// With `stream: true` (§11.4): chunks may go out before the answer.
    pub(super) streamed: bool,
    /// Chunks sent so far.
    pub(super) chunks: u64,
    /// Its hand-out's number ([`LateAnswers`]).
    pub(super) handout: u64,
}

impl AppRequest {
    /// A request handed out now.
    pub(super) fn new(
        method: &'static str,
        requirement: Requirement,
        inference: bool,
        streamed: bool,
        handout: u64,
    ) -> AppRequest {
        AppRequest {
            method,
            requirement,
            inference,
            streamed,
            chunks: 0,
            handout,
        }
    }
}

/// How many requests the deadline answered the machine remembers, to tell the
/// application's late answer ([`HostDiagnostic::LateAnswer`]) from one to a request the
/// server cancelled: the oldest is forgotten past it, so a late answer is reported unless 64
/// other deadlines fired before it came (then it is refused unreported, as one to a
/// cancelled request is). The bound of [`LateAnswers`]: at most this many entries, each an
/// id, a number and a method name.
pub(crate) const LATE_ANSWERS_WATCHED: usize = 64;

/// One request the deadline answered.
#[derive(Debug)]
struct Late {
    id: RequestId,
    /// Its hand-out ([`LateAnswers::polled`]).
    handout: u64,
    method: &'static str,
    /// The server handed out a new request under `id` since: an answer by the id alone is
    /// the new one's ([`LateAnswers::reused`]).
    superseded: bool,
}

/// The hand-outs of the server's requests ([`HostOutput::Request`]), numbered from 1 in
/// the order they are handed out, and the ones the deadline answered, newest last, at most
/// [`LATE_ANSWERS_WATCHED`].
///
/// Reading (JSON-RPC 2.0 lets the server reuse an id once it is answered): an answer
/// given by id alone ([`HostState::answer`], [`HostState::late_answer`]) under an id the
/// server handed out again is the new request's: one given while it waits answers it, and
/// one after it ended (answered, or cancelled by the server, which asked for no answer) is
/// not late. A driver that knows which hand-out an answer comes from
/// ([`HostState::polled_handout`] when it took the request) asks by hand-out
/// ([`HostState::late_answer_of`]): the first request's answer after a reuse of its id is
/// then late, reported, and the cancelled reuse's is not. A request the deadline answered
/// is remembered until its late answer is reported or [`LATE_ANSWERS_WATCHED`] later ones
/// push it out, a reuse of its id marking it rather than forgetting it.
#[derive(Debug, Default)]
pub(super) struct LateAnswers {
    watched: std::collections::VecDeque<Late>,
    /// Requests handed out so far (the last one's number).
    made: u64,
    /// Requests taken by [`HostState::poll_output`] so far (the last one's number: the
    /// outputs leave in the order they were made).
    pub(super) polled: u64,
}

impl LateAnswers {
    /// The number of a request handed out now.
    pub(super) fn hand_out(&mut self) -> u64 {
        self.made += 1;
        self.made
    }

    fn timed_out(&mut self, id: RequestId, handout: u64, method: &'static str) {
        if self.watched.len() == LATE_ANSWERS_WATCHED {
            self.watched.pop_front();
        }
        let late = Late {
            id,
            handout,
            method,
            superseded: false,
        };
        self.watched.push_back(late);
    }

    /// The server handed out a new request under `id`: the ones under it the deadline
    /// answered before are no longer found by the id alone, so an answer under `id` is the
    /// new request's; by hand-out they still are.
    pub(super) fn reused(&mut self, id: &RequestId) {
        for late in self.watched.iter_mut().filter(|l| l.id.same_in_flight(id)) {
            late.superseded = true;
        }
    }

    /// The method of the request the deadline answered that `handout` names (or, `None`,
    /// the last one under `id`, unless the id was reused since), forgotten now.
    fn take(&mut self, id: &RequestId, handout: Option<u64>) -> Option<&'static str> {
        let at = self.watched.iter().position(|l| match handout {
            Some(h) => l.handout == h && l.id.same_in_flight(id),
            None => l.id.same_in_flight(id) && !l.superseded,
        })?;
        self.watched.remove(at).map(|l| l.method)
    }
}

/// The requests handed out and not yet answered, by the server's id (by its identity in
/// flight, `jsonrpc::identity::Identity`, keeping the id as the request wrote it, which its answer
/// echoes), with their deadlines: the one structure every waiting request of the host
/// lives in ([`crate::session::pending::Pending`]).
pub(super) type AppRequests = crate::session::pending::Pending<AppRequest, InFlightId>;

impl HostState {
    /// Answers a request handed out as [`HostOutput::Request`]. An answer is a message the
    /// request's capability governs (§5.4: the host MUST NOT deliver a message requiring a
    /// denied capability), judged where it is sent, as each `inference/chunk` is: when the
    /// grant in force no longer satisfies what the request's admission required (revoked
    /// meanwhile, §6.7: a reduction takes effect first), the server is answered `-32002`
    /// naming the capability in its place and [`HostDiagnostic::CapabilityDenied`] is
    /// reported; what the application answered is not sent.
    ///
    /// Answers go by id, and the server may reuse an id once it is answered (JSON-RPC 2.0):
    /// an answer under an id handed out again answers the request waiting under it; one
    /// under an id no longer waiting is refused ([`StateError::UnknownRequest`]) and
    /// reported late ([`HostDiagnostic::LateAnswer`]) only when the deadline answered the
    /// request the server handed out last under it, never when the server cancelled that
    /// one (an earlier request's deadline under the id does not make it late).
    pub fn answer(
        &mut self,
        id: RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), StateError> {
        self.open()?;
        let Some((InFlightId(id), req)) = self.app_pending.remove_entry(InFlightId::of(&id)) else {
            self.late_answer(&id, true);
            return Err(StateError::UnknownRequest(
                serde_json::to_string(&id).unwrap_or_default(),
            ));
        };
        let mut malformed = None;
        let outcome = match (self.p.grant.check(req.requirement), outcome) {
            (Err(denied), _) => {
                self.diag(HostDiagnostic::CapabilityDenied {
                    method: req.method.to_owned(),
                    capability: denied.capability,
                });
                Err(denied.to_error())
            }
            (Ok(()), Ok(v)) if req.inference => {
                rules::checked_inference_result(v).inspect_err(|e| {
                    malformed = Some(e.message.to_string());
                })
            }
            (Ok(()), other) => other,
        };
        // An answer the server could not read goes as `-32603` (`jsonrpc::outcome_to_send`).
        let (outcome, too_deep) = crate::jsonrpc::outcome_to_send(outcome);
        if let Some(reason) = malformed.or(too_deep) {
            self.diag(HostDiagnostic::AnswerReplaced {
                id: serde_json::to_string(&id).unwrap_or_default(),
                reason,
            });
        }
        if let (true, Ok(result)) = (req.streamed, &outcome) {
            if let Some(text) = rules::owed_chunk(req.chunks, result) {
                let params = rules::chunk_params(&id, 0, &text);
                // Gated like every chunk: a grant narrowed meanwhile sends none.
                if self.gate(InferenceChunk::NAME, &params).is_ok() {
                    self.write_notification(InferenceChunk::NAME, params);
                }
            }
        }
        self.transmit(Message::Response(Response {
            id: Some(id),
            outcome,
        }));
        Ok(())
    }

    /// Sends the next `inference/chunk` (§11.4) of a streamed `inference/request` handed out
    /// and not yet answered; gated per chunk (`inference.streaming`, §5.4), so a grant
    /// narrowed mid-stream stops it. The answer ([`Self::answer`]) follows the chunks.
    /// `now` restarts the request's answer deadline ([`HostRules::answer_timeout`]).
    pub fn inference_chunk(
        &mut self,
        now: Instant,
        id: &RequestId,
        delta: &str,
    ) -> Result<(), StateError> {
        self.open()?;
        // The chunk names the request as it was written, as its answer echoes it
        // ([`Self::answer`]): `7.0` stays `7.0` whichever spelling the application used.
        let (key, index) = match self.app_pending.get_key_value(InFlightId::of(id)) {
            Some((key, r)) if r.streamed => (key.clone(), r.chunks),
            _ => {
                return Err(StateError::Stream(format!(
                    "no streamed inference/request {} is waiting for its answer",
                    serde_json::to_string(id).unwrap_or_default()
                )))
            }
        };
        let params = rules::chunk_params(&key.0, index, delta);
        self.gate(InferenceChunk::NAME, &params)?;
        if let Some(r) = self.app_pending.get_mut(&key) {
            r.chunks = index + 1;
        }
        // The work goes on: its answer's deadline counts from this chunk (module docs).
        let due = self.rules.answer_timeout.and_then(|t| now.checked_add(t));
        self.app_pending.extend(&key, due);
        self.write_notification(InferenceChunk::NAME, params);
        Ok(())
    }

    /// The application answered `id` after its deadline answered it: reported
    /// ([`HostDiagnostic::LateAnswer`]) when `report`, and `true`; `false` (nothing
    /// reported) when no request under `id` was answered by its deadline since the server
    /// last handed one out under it (one the server cancelled asked for no answer, even
    /// under an id an earlier request's deadline answered). Each request the deadline
    /// answered is late once ([`LateAnswers`]). [`Self::answer`] applies it to an id no
    /// longer waiting; a driver that knows which hand-out the answer comes from asks
    /// [`Self::late_answer_of`] instead, `report: false` for an answer that is no answer
    /// (a handler's panic, reported as such).
    pub(crate) fn late_answer(&mut self, id: &RequestId, report: bool) -> bool {
        self.late_answer_by(id, None, report)
    }

    /// [`Self::late_answer`] for an answer from hand-out `handout` of `id` (its number,
    /// [`Self::polled_handout`] when the driver took the request): late when the deadline
    /// answered that request, even after the server handed out another under its id
    /// ([`LateAnswers`]).
    // Used by `host::HostSession`'s driver.
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    pub(crate) fn late_answer_of(&mut self, id: &RequestId, handout: u64, report: bool) -> bool {
        self.late_answer_by(id, Some(handout), report)
    }

    /// The number of the last request [`Self::poll_output`] gave out
    /// ([`HostOutput::Request`], numbered from 1 in order; 0 before the first).
    // Used by `host::HostSession`'s driver.
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    pub(crate) fn polled_handout(&self) -> u64 {
        self.late.polled
    }

    fn late_answer_by(&mut self, id: &RequestId, handout: Option<u64>, report: bool) -> bool {
        let Some(method) = self.late.take(id, handout) else {
            return false;
        };
        if report {
            let id = serde_json::to_string(id).unwrap_or_default();
            let method = method.to_owned();
            self.diag(HostDiagnostic::LateAnswer { method, id });
        }
        true
    }

    /// Answers every request handed out whose deadline is at or before `now` (module docs).
    pub(super) fn expire_answers(&mut self, now: Instant) {
        let Some(after) = self.rules.answer_timeout else {
            return;
        };
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        for (InFlightId(id), req) in self.app_pending.take_due(now) {
            let e = ErrorObject::internal(format!(
                "the host's application did not answer {} within {after:?}",
                req.method
            ))
            .with_data(json!({ "reason": "answer_timeout", "timeoutMs": ms }));
            self.respond(id.clone(), Err(e));
            self.diag(HostDiagnostic::AnswerTimedOut {
                method: req.method.to_owned(),
                id: serde_json::to_string(&id).unwrap_or_default(),
                after,
            });
            self.late.timed_out(id.clone(), req.handout, req.method);
            self.out.push_back(HostOutput::AnswerTimedOut { id });
        }
    }
}
