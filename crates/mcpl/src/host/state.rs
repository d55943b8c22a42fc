//! The session's state. It changes only from the dispatch loop, in wire order (a policy
//! receipt is applied where it is read, [`HostSession::exchange`]), or by a narrowing the
//! application asks for, so a message is judged under the state in force where it was read
//! (§5.3, §6.7) with no wire-position bookkeeping.

use super::*;

pub(super) struct State {
    /// Mode, readiness, grant, policy, manifest review and last receipt: the policy
    /// lifecycle shared with the sans-I/O `HostState` (`session::HostPolicy`), changed only
    /// through its methods; reached through `Deref`.
    pub(super) core: HostPolicy,
    /// §9.4 dedupe.
    pub(super) seen_events: rules::Dedupe,
    pub(super) channels: ChannelTable,
    pub(super) limiter: FetchLimiter,
    pub(super) announced: Option<String>,
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

impl std::ops::Deref for State {
    type Target = HostPolicy;
    fn deref(&self) -> &HostPolicy {
        &self.core
    }
}

impl std::ops::DerefMut for State {
    fn deref_mut(&mut self) -> &mut HostPolicy {
        &mut self.core
    }
}
