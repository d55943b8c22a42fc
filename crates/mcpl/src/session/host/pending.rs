//! The host state machine's requests waiting for their answer ([`Pending`], deadlines
//! indexed), counting those that ended without one, and which of them are written: an
//! answer may name only those (JSON-RPC 2.0 §5, the async peer's `peer::written`).
//!
//! Reading: a request is written once its frame left the machine through its output
//! ([`super::HostState::poll_output`] returned its [`super::HostOutput::Transmit`]), the
//! only moment the machine knows of; what its driver does with the frame after that is the
//! driver's (as the peer counts a frame handed to its transport). One still queued there
//! was received by no server: an answer under its id (a guess, the ids being sequential)
//! is a stray, reported as a response to no request, and settles or fails nothing; the
//! real answer, read after the frame left, settles it. The host numbers its requests from
//! 1 up and outputs them in that order, so the highest id drained bounds the written ones.

use std::time::Instant;

use super::{HostOutput, Purpose};
use crate::jsonrpc::{Message, RequestId};
use crate::session::pending::Pending;
use crate::session::Transmission;

/// Our requests waiting for their answer, by id, with what each is for.
#[derive(Debug, Default)]
pub(super) struct PendingRequests {
    waiting: Pending<Purpose>,
    /// How many requests ended without their answer: expired, abandoned, or ended by the
    /// connection's end ([`super::HostState::requests_ended_unanswered`]).
    ended_unanswered: u64,
    /// The highest id of a request whose frame was written ([`Self::note_written`]; 0:
    /// none yet).
    written: u64,
}

impl PendingRequests {
    /// Waits for request `id`'s answer until `deadline`.
    pub(super) fn insert(&mut self, id: u64, purpose: Purpose, deadline: Option<Instant>) {
        self.waiting.insert(id, purpose, deadline);
    }

    pub(super) fn get(&self, id: u64) -> Option<&Purpose> {
        self.waiting.get(id)
    }

    /// Notes `o`, an output leaving the machine, as writing request `id` of ours when it is
    /// one's frame (module docs).
    pub(super) fn note_written(&mut self, o: &HostOutput) {
        if let HostOutput::Transmit(Transmission::Message(Message::Request(r))) = o {
            if let RequestId::Number(n) = &r.id {
                let id = n.as_u64().unwrap_or(0);
                self.written = self.written.max(id);
            }
        }
    }

    /// Whether request `id`'s frame was written (module docs).
    fn was_written(&self, id: u64) -> bool {
        id <= self.written
    }

    /// What request `id` is for, while it waits and its frame was written: what an answer
    /// the server sent may name (module docs).
    pub(super) fn answerable(&self, id: u64) -> Option<&Purpose> {
        self.waiting.get(id).filter(|_| self.was_written(id))
    }

    /// Whether `id` is one the host numbered a request with whose frame was written, since
    /// answered or not ([`crate::jsonrpc::head::numbered_by_us`] over the written ids): an
    /// object with an id and neither a method nor an outcome under it is a malformed answer
    /// of ours, never a request to answer; under any other id it is answered as any is.
    pub(super) fn numbered_and_written(&self, id: &RequestId) -> bool {
        crate::jsonrpc::head::numbered_by_us(id, self.written.saturating_add(1))
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.waiting.contains(id)
    }

    pub(super) fn purposes(&self) -> impl Iterator<Item = &Purpose> {
        self.waiting.values()
    }

    pub(super) fn purposes_mut(&mut self) -> impl Iterator<Item = &mut Purpose> {
        self.waiting.values_mut()
    }

    /// Request `id`, taken off the books as its answer arrived; `None`, the request left
    /// waiting, when its frame was not written (the answer is a stray, module docs).
    pub(super) fn answered(&mut self, id: u64) -> Option<Purpose> {
        if !self.was_written(id) {
            return None;
        }
        self.waiting.remove(id)
    }

    /// Request `id`, taken off the books without its answer (abandoned).
    pub(super) fn end(&mut self, id: u64) -> Option<Purpose> {
        let purpose = self.waiting.remove(id)?;
        self.ended_unanswered += 1;
        Some(purpose)
    }

    /// Every waiting request, in id order, taken off the books without its answer.
    pub(super) fn end_all(&mut self) -> Vec<(u64, Purpose)> {
        let ended = self.waiting.take_all();
        self.ended_unanswered += ended.len() as u64;
        ended
    }

    /// The requests whose deadline is at or before `now`, in id order, taken off the books
    /// without their answer.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<(u64, Purpose)> {
        let mut due = self.waiting.take_due(now);
        due.sort_unstable_by_key(|(id, _)| *id);
        self.ended_unanswered += due.len() as u64;
        due
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.next_deadline()
    }

    pub(super) fn ended_unanswered(&self) -> u64 {
        self.ended_unanswered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Only an end without an answer is counted: the driver sweeps its tables when the
    /// count moves ([`super::super::HostState::requests_ended_unanswered`]).
    #[test]
    fn unanswered_ends_are_counted_and_answers_are_not() {
        let t0 = Instant::now();
        let at = |s| Some(t0 + Duration::from_secs(s));
        // Every frame written (`note_written`'s part is `HostState`'s: `host_written`).
        let mut p = PendingRequests {
            written: u64::MAX,
            ..PendingRequests::default()
        };
        for (id, deadline) in [(3, at(10)), (1, at(10)), (2, None), (4, at(30))] {
            p.insert(id, Purpose::Hook, deadline);
        }
        assert!(p.answered(2).is_some());
        assert_eq!(p.ended_unanswered(), 0);
        let due: Vec<u64> = p
            .expire(t0 + Duration::from_secs(10))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(due, vec![1, 3], "in id order");
        assert_eq!(p.ended_unanswered(), 2);
        assert!(p.end(4).is_some() && p.end(4).is_none());
        assert_eq!(p.ended_unanswered(), 3);
        p.insert(5, Purpose::Hook, None);
        assert_eq!(p.end_all().len(), 1);
        assert_eq!(p.ended_unanswered(), 4);
    }
}
