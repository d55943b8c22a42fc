//! Requests waiting for their answer, by id, with their deadlines indexed: the earliest
//! deadline and the requests due are found without a scan of every request (issue #24:
//! with 10,000 outstanding, a scan at each input made a session quadratic). The host's and
//! the server's state machines both keep their own requests here (`u64` ids), and the host
//! keeps the server's requests handed to its application here too (keyed by the server's
//! [`RequestId`](crate::jsonrpc::RequestId)).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// One request waiting: what it is for, and its deadline with the number that orders it.
#[derive(Debug)]
struct Waiting<V> {
    value: V,
    /// The order it was inserted in (a re-inserted or rescheduled id is numbered anew).
    number: u64,
    deadline: Option<Instant>,
}

/// Requests waiting for their answer, by id `K`, each with what it is for (`V`) and its
/// deadline (`None`: it waits until answered or the connection ends). Requests of the same
/// deadline come out in the order they were inserted.
#[derive(Debug)]
pub(crate) struct Pending<V, K = u64> {
    by_id: HashMap<K, Waiting<V>>,
    /// `(deadline, number)` of every request with a deadline, earliest first.
    deadlines: BTreeMap<(Instant, u64), K>,
    /// Numbers the insertions, so two requests of the same deadline both stay.
    numbered: u64,
}

impl<V, K> Default for Pending<V, K> {
    fn default() -> Self {
        Pending {
            by_id: HashMap::new(),
            deadlines: BTreeMap::new(),
            numbered: 0,
        }
    }
}

impl<V, K: Hash + Eq + Clone> Pending<V, K> {
    /// Waits for request `id`'s answer until `deadline` (replacing any request of that id).
    pub(crate) fn insert(&mut self, id: K, value: V, deadline: Option<Instant>) {
        self.numbered += 1;
        let number = self.numbered;
        if let Some(at) = deadline {
            self.deadlines.insert((at, number), id.clone());
        }
        let waiting = Waiting {
            value,
            number,
            deadline,
        };
        if let Some(old) = self.by_id.insert(id, waiting) {
            if let Some(at) = old.deadline {
                self.deadlines.remove(&(at, old.number));
            }
        }
    }

    pub(crate) fn get<Q: Borrow<K>>(&self, id: Q) -> Option<&V> {
        self.by_id.get(id.borrow()).map(|w| &w.value)
    }

    /// Request `id`'s entry with the key it was inserted under (which may be told from
    /// `id` while equal to it: `InFlightId` keeps the representation).
    pub(crate) fn get_key_value<Q: Borrow<K>>(&self, id: Q) -> Option<(&K, &V)> {
        self.by_id
            .get_key_value(id.borrow())
            .map(|(k, w)| (k, &w.value))
    }

    pub(crate) fn get_mut<Q: Borrow<K>>(&mut self, id: Q) -> Option<&mut V> {
        self.by_id.get_mut(id.borrow()).map(|w| &mut w.value)
    }

    pub(crate) fn contains<Q: Borrow<K>>(&self, id: Q) -> bool {
        self.by_id.contains_key(id.borrow())
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.by_id.values().map(|w| &w.value)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.by_id.values_mut().map(|w| &mut w.value)
    }

    /// Request `id`, no longer waiting.
    pub(crate) fn remove<Q: Borrow<K>>(&mut self, id: Q) -> Option<V> {
        let w = self.by_id.remove(id.borrow())?;
        if let Some(at) = w.deadline {
            self.deadlines.remove(&(at, w.number));
        }
        self.release_if_empty();
        Some(w.value)
    }

    /// Request `id`, no longer waiting, with the key it was inserted under (which may be
    /// told from `id` while equal to it: `jsonrpc::InFlightId` keeps the representation).
    pub(crate) fn remove_entry<Q: Borrow<K>>(&mut self, id: Q) -> Option<(K, V)> {
        let (key, w) = self.by_id.remove_entry(id.borrow())?;
        if let Some(at) = w.deadline {
            self.deadlines.remove(&(at, w.number));
        }
        self.release_if_empty();
        Some((key, w.value))
    }

    /// Frees the tables once nothing waits: an emptied `HashMap` keeps its buckets and an
    /// emptied `BTreeMap` its root node, which every idle connection would hold for the
    /// requests of its setup (issue #24's idle memory per connection).
    fn release_if_empty(&mut self) {
        if self.by_id.is_empty() {
            self.by_id = HashMap::new();
            self.deadlines = BTreeMap::new();
        }
    }

    /// Request `id`'s deadline moved to `deadline` (the work on it goes on); a request
    /// without a deadline keeps none, and `None` leaves the one it has.
    pub(crate) fn extend<Q: Borrow<K>>(&mut self, id: Q, deadline: Option<Instant>) {
        let Some(w) = self.by_id.get_mut(id.borrow()) else {
            return;
        };
        let (Some(old), Some(at)) = (w.deadline, deadline) else {
            return;
        };
        let Some(key) = self.deadlines.remove(&(old, w.number)) else {
            return;
        };
        self.numbered += 1;
        w.number = self.numbered;
        w.deadline = Some(at);
        self.deadlines.insert((at, w.number), key);
    }

    /// Forgets every request.
    pub(crate) fn clear(&mut self) {
        self.by_id = HashMap::new();
        self.deadlines = BTreeMap::new();
    }

    /// The earliest deadline of a request still waiting.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first_key_value().map(|((at, _), _)| *at)
    }

    /// Every request whose deadline is at or before `now`, no longer waiting, earliest
    /// deadline first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<(K, V)> {
        let mut due = Vec::new();
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let id = entry.remove();
            if let Some(w) = self.by_id.remove(&id) {
                due.push((id, w.value));
            }
        }
        self.release_if_empty();
        due
    }

    /// Every request, no longer waiting, in the order they were inserted (for ids numbered
    /// as they are sent, id order).
    pub(crate) fn take_all(&mut self) -> Vec<(K, V)> {
        self.deadlines.clear();
        let mut all: Vec<(u64, K, V)> = self
            .by_id
            .drain()
            .map(|(id, w)| (w.number, id, w.value))
            .collect();
        all.sort_unstable_by_key(|(number, _, _)| *number);
        self.release_if_empty();
        all.into_iter().map(|(_, id, v)| (id, v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Once nothing waits, no table is held (an idle connection's memory, issue #24).
    #[test]
    fn an_emptied_pending_holds_no_table() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        for id in 0..20 {
            p.insert(id, (), Some(t0));
        }
        assert!(p.by_id.capacity() > 0);
        for id in 0..19 {
            p.remove(id);
        }
        assert!(p.by_id.capacity() > 0, "one still waits");
        p.remove(19);
        assert_eq!(p.by_id.capacity(), 0);
        p.insert(1, (), Some(t0));
        assert_eq!(p.take_due(t0).len(), 1);
        assert_eq!(p.by_id.capacity(), 0);
        p.insert(2, (), None);
        assert_eq!(p.take_all().len(), 1);
        assert_eq!(p.by_id.capacity(), 0);
    }

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

    /// Keyed by anything hashable (the server's request ids): equal deadlines come out in
    /// insertion order, and a deadline moves only from one to another.
    #[test]
    fn equal_deadlines_keep_their_order_and_a_deadline_moves() {
        let t0 = Instant::now();
        let at = |s| Some(t0 + Duration::from_secs(s));
        let mut p: Pending<u8, String> = Pending::default();
        p.insert("b".into(), 2, at(10));
        p.insert("a".into(), 1, at(10));
        p.insert("n".into(), 0, None);
        p.extend("n".to_owned(), at(1));
        p.extend("b".to_owned(), None);
        assert_eq!(p.next_deadline(), at(10));
        p.extend("a".to_owned(), at(20));
        let due = p.take_due(t0 + Duration::from_secs(15));
        assert_eq!(due, vec![("b".to_owned(), 2)]);
        assert_eq!(p.next_deadline(), at(20));
        *p.get_mut("n".to_owned()).unwrap() = 9;
        p.clear();
        assert_eq!((p.len(), p.next_deadline()), (0, None));
    }
}
