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
