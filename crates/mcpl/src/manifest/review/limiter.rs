//! The manifest fetch limiter (§17.8).

use super::*;

// Fetch limiter (§17.8)

/// What to do with one `mcpl/manifestChanged` (§17.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchDecision {
    /// Fetch now (a token was spent).
    FetchNow,
    /// A fetch is already pending: folded into one follow-up fetch after it completes.
    Coalesced,
    /// Over the limit: dropped; a conformance defect the host should surface.
    Dropped,
}

/// A per-connection token bucket bounding manifest fetches (§17.8). Notifications arriving
/// while a fetch is pending coalesce into one follow-up fetch; a notification (or follow-up)
/// finding no token is dropped and counted. Over any window of `t` seconds at most
/// `burst + refill_per_sec · t` fetches start. Time is passed in.
#[derive(Debug, Clone)]
pub struct FetchLimiter {
    pub(super) burst: f64,
    pub(super) refill_per_sec: f64,
    pub(super) tokens: f64,
    pub(super) last: Option<Instant>,
    pub(super) pending: bool,
    pub(super) follow_up: bool,
    pub(super) dropped: u64,
}

impl FetchLimiter {
    /// A full bucket of `burst` tokens (at least 1) refilled at `refill_per_sec` (negative
    /// or non-finite rates count as 0: no refill).
    pub fn new(burst: u32, refill_per_sec: f64) -> FetchLimiter {
        let burst = f64::from(burst.max(1));
        let refill = if refill_per_sec.is_finite() && refill_per_sec > 0.0 {
            refill_per_sec
        } else {
            0.0
        };
        FetchLimiter {
            burst,
            refill_per_sec: refill,
            tokens: burst,
            last: None,
            pending: false,
            follow_up: false,
            dropped: 0,
        }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.refill_per_sec).min(self.burst);
        }
        if self.last.map_or(true, |l| now > l) {
            self.last = Some(now);
        }
    }

    pub(super) fn try_start(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.pending = true;
            true
        } else {
            // Counted, not logged here: the host tells it as a `ManifestFetchDropped` per
            // window with the total, logged through its throttled diagnostics log (a `warn`
            // per drop was 20,000 lines for a flood of 20,000).
            self.dropped += 1;
            false
        }
    }

    /// Decides what to do with a `mcpl/manifestChanged` received at `now`.
    pub fn on_notification(&mut self, now: Instant) -> FetchDecision {
        self.refill(now);
        if self.pending {
            self.follow_up = true;
            return FetchDecision::Coalesced;
        }
        if self.try_start() {
            FetchDecision::FetchNow
        } else {
            FetchDecision::Dropped
        }
    }

    /// Records that the pending fetch finished at `now`. Returns true when a coalesced
    /// follow-up fetch should start now (a token was spent); a follow-up that finds no token
    /// is dropped and counted.
    pub fn on_fetch_complete(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.pending = false;
        if std::mem::take(&mut self.follow_up) {
            self.try_start()
        } else {
            false
        }
    }

    /// Whether a fetch is in flight.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// Notifications (or follow-ups) dropped over the limit so far: the defect count.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
