//! At most one log line per interval for one recurring reason, with a count of the lines
//! not shown: a peer that repeats what is logged (a flood of bad connections, of dropped
//! notifications) makes a bounded number of lines, not one per repeat.

use std::time::{Duration, Instant};

/// Lets one line through per `interval` and counts the rest, said with the next line let
/// through as ` (and N more not shown)`.
#[derive(Debug, Clone)]
pub struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// A throttle letting one line through per `interval` (the first at once).
    pub const fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// The line `line` makes, to be said now, with the count of those held back since the
    /// last one said; `None` (the line counted, never built) within `interval` of it.
    pub fn line(&mut self, line: impl FnOnce() -> String) -> Option<String> {
        self.line_at(Instant::now(), line)
    }

    /// [`Self::line`] at `now` (a caller on another clock, a paused runtime's, gives its own).
    pub fn line_at(&mut self, now: Instant, line: impl FnOnce() -> String) -> Option<String> {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < self.interval)
        {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        let line = line();
        Some(match std::mem::take(&mut self.suppressed) {
            0 => line,
            more => format!("{line} (and {more} more not shown)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the interval one line is said and the rest counted; after it the next line
    /// says how many were held back.
    #[test]
    fn one_line_per_interval_then_the_count() {
        let mut t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.line(|| "a".into()).as_deref(), Some("a"));
        assert_eq!(t.line(|| unreachable!()), None);
        assert_eq!(t.line(|| unreachable!()), None);
        t.last = t
            .last
            .and_then(|l| l.checked_sub(Duration::from_secs(3601)));
        assert_eq!(
            t.line(|| "b".into()).as_deref(),
            Some("b (and 2 more not shown)")
        );
        let mut open = Throttle::new(Duration::ZERO);
        assert_eq!(open.line(|| "c".into()).as_deref(), Some("c"));
        assert_eq!(open.line(|| "d".into()).as_deref(), Some("d"));
    }
}
