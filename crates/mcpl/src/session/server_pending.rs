//! The requests a [`ServerState`](super::ServerState) sent and still waits on: bounded in
//! number and each given up at its deadline, so a host that never answers cannot make a
//! server connection hold more than [`ServerRules::max_pending`](super::ServerRules) of
//! them, nor hold any past [`ServerRules::request_timeout`](super::ServerRules) (the async
//! `server::Server`'s bounds: the peer's `max_pending_requests` and `request_timeout`,
//! with the same defaults).

use std::time::{Duration, Instant};

/// How long a request waits for its answer by default: the async sessions' (the peer's
/// `request_timeout`) and [`ServerRules::request_timeout`](super::ServerRules)'s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The most requests one side waits on at once by default: the peer's
/// `max_pending_requests` and [`ServerRules::max_pending`](super::ServerRules)'s.
pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 1024;

/// The server's own requests in flight, by the id [`ServerState::request`] returned, and
/// their deadlines in order.
///
/// [`ServerState::request`]: super::ServerState::request
#[derive(Debug, Default)]
pub(crate) struct OwnRequests {
    next_id: u64,
    /// The requests and their deadlines (`None`: waits until answered or the end).
    waiting: super::pending::Pending<()>,
}

impl OwnRequests {
    /// How many wait for an answer.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Records a request sent at `now` that waits at most `timeout`, and returns its id
    /// (ids start at 1 and are never reused).
    pub(crate) fn sent(&mut self, now: Instant, timeout: Option<Duration>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        // A deadline past what `Instant` can hold is no deadline.
        let deadline = timeout.and_then(|t| now.checked_add(t));
        self.waiting.insert(id, (), deadline);
        id
    }

    /// Whether request `id` waits for its answer.
    pub(crate) fn waits(&self, id: u64) -> bool {
        self.waiting.contains(id)
    }

    /// Whether `id` is one this side numbered a request with, since answered or not
    /// ([`crate::jsonrpc::head::numbered_by_us`]).
    pub(crate) fn numbered(&self, id: &crate::jsonrpc::RequestId) -> bool {
        crate::jsonrpc::head::numbered_by_us(id, self.next_id.saturating_add(1))
    }

    /// Request `id` was answered: whether it was waiting (it no longer is).
    pub(crate) fn answered(&mut self, id: u64) -> bool {
        self.waiting.remove(id).is_some()
    }

    /// The earliest deadline of a request still waiting.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.next_deadline()
    }

    /// Gives up every request whose deadline is at or before `now`, and returns their ids,
    /// earliest deadline first.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<u64> {
        self.waiting
            .take_due(now)
            .into_iter()
            .map(|(id, ())| id)
            .collect()
    }

    /// Ends every request still waiting (nothing can answer them), and returns their ids
    /// in the order they were sent.
    pub(crate) fn end_all(&mut self) -> Vec<u64> {
        self.waiting
            .take_all()
            .into_iter()
            .map(|(id, ())| id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_expire_at_their_deadline_in_deadline_order_and_only_once() {
        let t0 = Instant::now();
        let mut r = OwnRequests::default();
        let a = r.sent(t0, Some(Duration::from_secs(5)));
        let b = r.sent(t0, Some(Duration::from_secs(1)));
        let never = r.sent(t0, None);
        assert_eq!((a, b, never), (1, 2, 3));
        assert_eq!(r.next_deadline(), Some(t0 + Duration::from_secs(1)));
        assert!(r.expire(t0).is_empty());
        assert_eq!(r.expire(t0 + Duration::from_secs(5)), vec![b, a]);
        assert!(!r.answered(a), "given up: a late answer is no answer");
        assert_eq!(r.next_deadline(), None);
        assert_eq!(r.len(), 1);
        assert!(r.answered(never));
        assert_eq!(r.len(), 0);
    }
}
