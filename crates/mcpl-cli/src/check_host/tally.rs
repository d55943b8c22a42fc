//! [`Tally`]: how many times one kind of thing was seen, with at most `KEPT` of them
//! described, the one shape behind every bounded "count + kept samples" of the run (the
//! lifecycle defects, the repeated member names, the rewritten ids, the line a stream ended
//! inside, the connections that were not the host).

/// How many times one kind of thing was seen (saturating), and at most `KEPT` descriptions
/// of them: the first ones ([`Tally::note`]) or the latest ([`Tally::note_latest`]).
#[derive(Debug, Default, Clone)]
pub(super) struct Tally<const KEPT: usize> {
    count: u64,
    kept: Vec<String>,
}

impl<const KEPT: usize> Tally<KEPT> {
    /// Counts one more, described by `said` (called only while fewer than `KEPT` are kept);
    /// `true` when it is the first.
    pub(super) fn note(&mut self, said: impl FnOnce() -> String) -> bool {
        self.count = self.count.saturating_add(1);
        if self.kept.len() < KEPT {
            self.kept.push(said());
        }
        self.count == 1
    }

    /// Counts one more, described by `said`, which replaces the oldest kept once `KEPT` are;
    /// `true` when it is the first.
    pub(super) fn note_latest(&mut self, said: String) -> bool {
        self.count = self.count.saturating_add(1);
        if KEPT > 0 {
            if self.kept.len() >= KEPT {
                self.kept.remove(0);
            }
            self.kept.push(said);
        }
        self.count == 1
    }

    /// How many were counted.
    pub(super) fn count(&self) -> u64 {
        self.count
    }

    /// The first description kept, if any.
    pub(super) fn first(&self) -> Option<&str> {
        self.kept.first().map(String::as_str)
    }

    /// The latest description kept, if any.
    pub(super) fn latest(&self) -> Option<&str> {
        self.kept.last().map(String::as_str)
    }

    /// How many are kept when fewer than were counted (`None`: every one counted is kept).
    pub(super) fn cut(&self) -> Option<usize> {
        (self.count > self.kept.len() as u64).then_some(self.kept.len())
    }

    /// The kept descriptions joined with `; `.
    pub(super) fn joined(&self) -> String {
        self.kept.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `KEPT` are kept and every one counted; `note_latest` keeps the newest.
    #[test]
    fn keeps_a_bounded_sample_and_counts_all() {
        let mut t = Tally::<2>::default();
        assert!(t.note(|| "a".into()));
        assert!(!t.note(|| "b".into()));
        assert!(!t.note(|| unreachable!("not described once KEPT are kept")));
        assert_eq!((t.count(), t.cut()), (3, Some(2)));
        assert_eq!(t.joined(), "a; b");
        let mut t = Tally::<1>::default();
        assert!(t.note_latest("x".into()));
        assert!(!t.note_latest("y".into()));
        assert_eq!(
            (t.count(), t.latest(), t.first(), t.cut()),
            (2, Some("y"), Some("y"), Some(1))
        );
        let mut t = Tally::<0>::default();
        t.note_latest("z".into());
        t.note(|| "w".into());
        assert_eq!(
            (t.count(), t.joined(), t.cut()),
            (2, String::new(), Some(0))
        );
    }
}
