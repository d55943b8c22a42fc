//! The session's state and its wire-order bookkeeping (§5.3, §6.7: a message is judged
//! under the state in force where it was read).

use super::*;

pub(super) struct State {
    pub(super) mode: Mode,
    pub(super) ready: bool,
    pub(super) grant: Grant,
    pub(super) policy: Vec<String>,
    pub(super) review: Option<ManifestReview>,
    pub(super) last_receipt: Option<Receipt>,
    /// §9.4 dedupe.
    pub(super) seen_events: rules::Dedupe,
    pub(super) channels: BTreeMap<String, Value>,
    pub(super) limiter: FetchLimiter,
    pub(super) announced: Option<String>,
    /// The states recent widenings replaced, for messages read before them.
    pub(super) before: Widenings,
    /// For each hook request in flight, the wire position when it was sent: its response
    /// comes later, so widening records after it are kept until it is judged.
    pub(super) hook_pins: Vec<u64>,
    /// Inference ids with an outgoing stream (§14.3) open or recently ended.
    pub(super) streams: InferenceIds,
    /// Inference ids with a lifecycle turn (§10.5) open or recently ended.
    pub(super) turns: InferenceIds,
    /// Feature sets disabled later by [`HostSession::disable_by_notification`], sent again in
    /// every later policy Request's `disabled` so a Request never re-enables them.
    pub(super) disabled_later: Vec<String>,
}

/// How many ended outgoing streams (and, separately, ended lifecycle turns) a session
/// remembers, to refuse restarting one.
pub(super) const ENDED_IDS_REMEMBERED: usize = 4096;

/// The inference ids a session's outgoing streams, or its lifecycle turns, were started for.
/// Streams (§14.3): `index` is one counter per `inferenceId`, and each channel gets one
/// `complete`; a second stream for the same inference would restart the index at 0 and
/// complete its channels again. Turns (§10.5): one terminal per `started`; a second turn for
/// the same inference would send a second `started` and a second terminal. Either is refused
/// while the first is open and for the last [`ENDED_IDS_REMEMBERED`] ended ones.
#[derive(Debug, Default)]
pub(super) struct InferenceIds {
    pub(super) live: HashSet<String>,
    pub(super) ended: HashSet<String>,
    pub(super) ended_order: VecDeque<String>,
}

impl InferenceIds {
    /// Claims `inference_id` for a new stream; `false` if it is open or remembered as ended.
    pub(super) fn start(&mut self, inference_id: &str) -> bool {
        if self.live.contains(inference_id) || self.ended.contains(inference_id) {
            return false;
        }
        self.live.insert(inference_id.to_owned());
        true
    }

    /// Gives up a claim that emitted nothing (its first frame was never queued): the id may
    /// be started again.
    pub(super) fn release(&mut self, inference_id: &str) {
        self.live.remove(inference_id);
    }

    /// Moves `inference_id` from open to ended, forgetting the oldest ended id past the bound.
    pub(super) fn end(&mut self, inference_id: &str) {
        if !self.live.remove(inference_id) {
            return;
        }
        self.ended.insert(inference_id.to_owned());
        self.ended_order.push_back(inference_id.to_owned());
        while self.ended_order.len() > ENDED_IDS_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

impl State {
    /// Puts `ready` and `grant` in force for messages read at wire position `boundary` or
    /// later; a message read earlier keeps being judged under the previous state too.
    pub(super) fn set_in_force(&mut self, boundary: u64, ready: bool, grant: Grant) {
        self.before
            .record(boundary, (self.ready, self.grant), (ready, grant));
        self.ready = ready;
        self.grant = grant;
    }

    /// Narrows the grant (never widens it, so nothing needs recording).
    pub(super) fn narrow_to(&mut self, grant: Grant) {
        self.grant = self.grant.intersect(grant.capabilities());
    }

    /// The readiness and grant a message read at wire position `seq` is judged under.
    pub(super) fn in_force_for(&self, seq: u64) -> (bool, Grant) {
        self.before.judge(seq, (self.ready, self.grant))
    }
}

/// The readiness and grant a widening (the session becoming ready, or the grant gaining a
/// path) replaced, and the wire position from which the widening counts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Before {
    pub(super) boundary: u64,
    pub(super) ready: bool,
    pub(super) grant: Grant,
}

/// Keeps widening records for a hook in flight (see [`State::hook_pins`]) until dropped.
pub(super) struct HookPin(pub(super) Arc<Inner>, pub(super) u64);

impl HookPin {
    pub(super) fn new(s: &HostSession) -> HookPin {
        let at = s.inner.peer.frames_read();
        s.inner.state().hook_pins.push(at);
        HookPin(s.inner.clone(), at)
    }
}

impl Drop for HookPin {
    fn drop(&mut self) {
        let mut st = self.0.state();
        if let Some(i) = st.hook_pins.iter().position(|p| *p == self.1) {
            st.hook_pins.swap_remove(i);
        }
    }
}

/// How many [`Before`] records a session keeps. Past it the two oldest merge into the
/// stricter of both, which can only deny more (fail closed), never admit more.
pub(super) const BEFORE_LIMIT: usize = 32;

/// Wire order for widenings (§5.3, §6.7): a message read before a receipt, or before a
/// change the host made on its own, is judged under the state that change replaced as well
/// as under the current one, however late it is handled. A narrowing needs no record: the
/// current state already holds it for every message. Oldest record first.
#[derive(Debug, Default)]
pub(super) struct Widenings(pub(super) VecDeque<Before>);

impl Widenings {
    /// Records the change from `old` to `new` (readiness, grant) at `boundary`, if it widens.
    pub(super) fn record(&mut self, boundary: u64, old: (bool, Grant), new: (bool, Grant)) {
        let widens = (new.0 && !old.0)
            || !new
                .1
                .capabilities()
                .difference(old.1.capabilities())
                .is_empty();
        if !widens {
            return;
        }
        if self.0.len() >= BEFORE_LIMIT {
            if let (Some(a), Some(b)) = (self.0.pop_front(), self.0.pop_front()) {
                self.0.push_front(Before {
                    boundary: b.boundary,
                    ready: a.ready && b.ready,
                    grant: a.grant.intersect(b.grant.capabilities()),
                });
            }
        }
        self.0.push_back(Before {
            boundary,
            ready: old.0,
            grant: old.1,
        });
    }

    /// `current`, intersected with every state a widening later on the wire than `seq`
    /// replaced.
    pub(super) fn judge(&self, seq: u64, current: (bool, Grant)) -> (bool, Grant) {
        self.0
            .iter()
            .filter(|b| b.boundary > seq)
            .fold(current, |(ready, grant), b| {
                (ready && b.ready, grant.intersect(b.grant.capabilities()))
            })
    }

    /// Messages are handled in wire order: once the one at `seq` is reached, no later
    /// message can be read before a boundary at or below it.
    pub(super) fn reached(&mut self, seq: u64) {
        while self.0.front().is_some_and(|b| b.boundary <= seq) {
            self.0.pop_front();
        }
    }
}

/// Marks the policy receipts read so far as applied when a policy exchange ends (declared
/// after the policy lock guard, so it runs while the lock is still held).
pub(super) struct PolicyApplied<'a>(pub(super) &'a Inner);

impl Drop for PolicyApplied<'_> {
    fn drop(&mut self) {
        let read = self.0.policy_read.load(Ordering::SeqCst);
        self.0.policy_applied.send_if_modified(|a| {
            let changed = *a < read;
            *a = (*a).max(read);
            changed
        });
    }
}
