//! Requests of ours waiting for their answer, by id, with their deadlines indexed: the
//! earliest deadline and the requests due are found without a scan of every request
//! (issue #24: with 10,000 outstanding, a scan at each input made a session quadratic).
//! The host's and the server's state machines both keep theirs here.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Requests waiting for their answer, each with what it is for (`V`) and its deadline
/// (`None`: it waits until answered or the connection ends).
#[derive(Debug)]
pub(crate) struct Pending<V> {
    by_id: HashMap<u64, (V, Option<Instant>)>,
    /// `(deadline, id)` of every request with a deadline, earliest first.
    deadlines: BTreeSet<(Instant, u64)>,
}

impl<V> Default for Pending<V> {
    fn default() -> Self {
        Pending {
            by_id: HashMap::new(),
            deadlines: BTreeSet::new(),
        }
    }
}

impl<V> Pending<V> {
    /// Waits for request `id`'s answer until `deadline` (replacing any request of that id).
    pub(crate) fn insert(&mut self, id: u64, value: V, deadline: Option<Instant>) {
        if let Some((_, Some(old))) = self.by_id.insert(id, (value, deadline)) {
            self.deadlines.remove(&(old, id));
        }
        if let Some(at) = deadline {
            self.deadlines.insert((at, id));
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        self.by_id.get(&id).map(|(v, _)| v)
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.by_id.values().map(|(v, _)| v)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.by_id.values_mut().map(|(v, _)| v)
    }

    /// Request `id`, no longer waiting.
    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        let (value, deadline) = self.by_id.remove(&id)?;
        if let Some(at) = deadline {
            self.deadlines.remove(&(at, id));
        }
        Some(value)
    }

    /// The earliest deadline of a request still waiting.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Every request whose deadline is at or before `now`, no longer waiting, earliest
    /// deadline first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<(u64, V)> {
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some((value, _)) = self.by_id.remove(&id) {
                due.push((id, value));
            }
        }
        due
    }

    /// Every request, no longer waiting, in id order.
    pub(crate) fn take_all(&mut self) -> Vec<(u64, V)> {
        self.deadlines.clear();
        let mut all: Vec<(u64, V)> = self.by_id.drain().map(|(id, (v, _))| (id, v)).collect();
        all.sort_unstable_by_key(|(id, _)| *id);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn deadlines_follow_the_requests_in_and_out() {
        let t0 = Instant::now();
        let at = |s| Some(t0 + Duration::from_secs(s));
        let mut p = Pending::default();
        p.insert(3, 'c', at(30));
        p.insert(1, 'a', at(10));
        p.insert(2, 'b', None);
        p.insert(4, 'd', at(9));
        assert_eq!(p.next_deadline(), at(9));
        assert_eq!(p.remove(1), Some('a'));
        assert_eq!(p.remove(1), None);
        // A re-inserted id keeps only its new deadline.
        p.insert(3, 'C', at(5));
        assert_eq!(p.next_deadline(), at(5));
        assert!(p.take_due(t0).is_empty());
        assert_eq!(
            p.take_due(t0 + Duration::from_secs(40)),
            vec![(3, 'C'), (4, 'd')]
        );
        assert_eq!(p.next_deadline(), None);
        assert_eq!((p.len(), p.get(2), p.contains(3)), (1, Some(&'b'), false));
        p.insert(7, 'g', at(1));
        assert_eq!(p.take_all(), vec![(2, 'b'), (7, 'g')]);
        assert_eq!((p.len(), p.next_deadline()), (0, None));
    }
}
