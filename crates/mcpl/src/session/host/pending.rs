//! Our requests waiting for their answer, indexed by deadline: the earliest deadline and the
//! requests due are found without a scan of every request (issue #24: with 10,000
//! outstanding, a scan at each input made the host quadratic).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use super::Purpose;

/// Our requests waiting for their answer, by id, with their deadlines (`None`: a timeout
/// past what `Instant` holds, so it waits until answered).
#[derive(Debug, Default)]
pub(super) struct PendingRequests {
    by_id: HashMap<u64, (Purpose, Option<Instant>)>,
    /// `(deadline, id)` of every request with a deadline.
    deadlines: BTreeSet<(Instant, u64)>,
    /// How many requests ended without their answer: expired, abandoned, or ended by the
    /// connection's end ([`super::HostState::requests_ended_unanswered`]).
    ended_unanswered: u64,
}

impl PendingRequests {
    /// Waits for request `id`'s answer until `deadline`.
    pub(super) fn insert(&mut self, id: u64, purpose: Purpose, deadline: Option<Instant>) {
        if let Some((_, Some(old))) = self.by_id.insert(id, (purpose, deadline)) {
            self.deadlines.remove(&(old, id));
        }
        if let Some(at) = deadline {
            self.deadlines.insert((at, id));
        }
    }

    pub(super) fn get(&self, id: u64) -> Option<&Purpose> {
        self.by_id.get(&id).map(|(p, _)| p)
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Every waiting request's purpose.
    pub(super) fn purposes(&self) -> impl Iterator<Item = &Purpose> {
        self.by_id.values().map(|(p, _)| p)
    }

    pub(super) fn purposes_mut(&mut self) -> impl Iterator<Item = &mut Purpose> {
        self.by_id.values_mut().map(|(p, _)| p)
    }

    /// Request `id`, taken off the books as its answer arrived.
    pub(super) fn answered(&mut self, id: u64) -> Option<Purpose> {
        let (purpose, deadline) = self.by_id.remove(&id)?;
        if let Some(at) = deadline {
            self.deadlines.remove(&(at, id));
        }
        Some(purpose)
    }

    /// Request `id`, taken off the books without its answer (expired or abandoned).
    pub(super) fn end(&mut self, id: u64) -> Option<Purpose> {
        let purpose = self.answered(id)?;
        self.ended_unanswered += 1;
        Some(purpose)
    }

    /// Every waiting request, in id order, taken off the books without its answer.
    pub(super) fn end_all(&mut self) -> Vec<(u64, Purpose)> {
        self.deadlines.clear();
        let mut ended: Vec<(u64, Purpose)> =
            self.by_id.drain().map(|(id, (p, _))| (id, p)).collect();
        ended.sort_unstable_by_key(|(id, _)| *id);
        self.ended_unanswered += ended.len() as u64;
        ended
    }

    /// The ids of the requests whose deadline is at or before `now`, in id order.
    pub(super) fn due(&self, now: Instant) -> Vec<u64> {
        let mut due: Vec<u64> = self
            .deadlines
            .range(..=(now, u64::MAX))
            .map(|(_, id)| *id)
            .collect();
        due.sort_unstable();
        due
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    pub(super) fn ended_unanswered(&self) -> u64 {
        self.ended_unanswered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn deadlines_follow_the_requests_and_unanswered_ends_are_counted() {
        let t0 = Instant::now();
        let at = |s| Some(t0 + Duration::from_secs(s));
        let mut p = PendingRequests::default();
        p.insert(3, Purpose::Hook, at(30));
        p.insert(1, Purpose::Hook, at(10));
        p.insert(2, Purpose::Hook, None);
        p.insert(4, Purpose::Hook, at(10));
        assert_eq!(p.next_deadline(), at(10));
        assert_eq!(p.due(t0 + Duration::from_secs(10)), vec![1, 4]);
        assert_eq!(p.due(t0), Vec::<u64>::new());
        // Answered: not counted, its deadline gone.
        assert!(p.answered(1).is_some());
        assert!(p.answered(1).is_none());
        assert_eq!(p.due(t0 + Duration::from_secs(10)), vec![4]);
        assert_eq!(p.ended_unanswered(), 0);
        // Ended without an answer: counted.
        assert!(p.end(4).is_some());
        assert!(p.end(4).is_none());
        assert_eq!(p.ended_unanswered(), 1);
        assert_eq!(p.next_deadline(), at(30));
        // A re-inserted id keeps only its new deadline.
        p.insert(3, Purpose::Hook, at(5));
        assert_eq!(p.next_deadline(), at(5));
        assert_eq!(p.due(t0 + Duration::from_secs(40)), vec![3]);
        let ended: Vec<u64> = p.end_all().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ended, vec![2, 3]);
        assert_eq!(p.ended_unanswered(), 3);
        assert_eq!(p.next_deadline(), None);
        assert!(!p.contains(2));
    }
}
