//! The driver's tables of what waits on its [`HostState`]: our requests by both ids, the
//! server's requests handed out, the application's calls waiting for an answer.

use std::collections::{HashMap, VecDeque};

use super::*;

/// The driver's bookkeeping of what waits on the state machine.
#[derive(Default)]
pub(super) struct Waiting {
    /// Our requests: the peer's id → the state machine's, and back.
    pub(super) by_peer: HashMap<RequestId, u64>,
    pub(super) by_state: HashMap<u64, RequestId>,
    /// Server requests handed to the application and not yet answered, by id.
    pub(super) requests: HashMap<RequestId, IncomingRequest>,
    /// The server request the input being carried out read (a duplicate id is answered
    /// from here, never in place of the one waiting under it).
    pub(super) current: Option<IncomingRequest>,
    pub(super) policy: Option<Reply<Result<PolicyChange, HostError>>>,
    /// Policy calls waiting for the one in flight; at most [`COMMANDS_QUEUED`] (the driver
    /// takes no more calls past that).
    pub(super) queued: VecDeque<PolicyCall>,
    /// Hooks waiting for their answer, each with its call's number ([`Cmd::Hook`]).
    /// Changed only through [`Self::add_hook`] and [`Self::take_hook`] (private: the index).
    hooks: HashMap<u64, (u64, Reply<Option<HookVerdict>>)>,
    /// The application's requests sent by the state machine ([`Cmd::Request`]), by its id.
    /// Changed only through [`Self::add_request`] and [`Self::take_request`].
    requests_out: HashMap<u64, RequestCall>,
    /// The state machine's id of each of those by its call's number: what a
    /// [`Cmd::Forget`] names, found without a scan (10,000 callers giving up at once were
    /// quadratic).
    by_call: HashMap<u64, u64>,
    pub(super) refreshes: Vec<(u64, RefreshReply)>,
    /// The change receipt the input being carried out handed out, if any.
    pub(super) receipt: Option<ChangeReceipt>,
    /// Requests given up whose answer the peer had already received: applied when read
    /// (`Driver::give_up`), at most one per request waiting.
    pub(super) answered_given_up: std::collections::HashSet<u64>,
    /// [`HostState::requests_ended_unanswered`] when the tables above were last swept.
    pub(super) ended_seen: u64,
}

impl Waiting {
    pub(super) fn add_request(&mut self, id: u64, call: RequestCall) {
        self.by_call.insert(call.call, id);
        self.requests_out.insert(id, call);
    }

    pub(super) fn take_request(&mut self, id: u64) -> Option<RequestCall> {
        let call = self.requests_out.remove(&id)?;
        self.by_call.remove(&call.call);
        Some(call)
    }

    pub(super) fn add_hook(&mut self, id: u64, call: u64, reply: Reply<Option<HookVerdict>>) {
        self.by_call.insert(call, id);
        self.hooks.insert(id, (call, reply));
    }

    pub(super) fn take_hook(&mut self, id: u64) -> Option<Reply<Option<HookVerdict>>> {
        let (call, reply) = self.hooks.remove(&id)?;
        self.by_call.remove(&call);
        Some(reply)
    }

    /// The application's requests waiting, by the state machine's id.
    pub(super) fn request_ids(&self) -> impl Iterator<Item = &u64> {
        self.requests_out.keys()
    }

    pub(super) fn request_mut(&mut self, id: u64) -> Option<&mut RequestCall> {
        self.requests_out.get_mut(&id)
    }

    /// Whether the caller of request or hook `id` stopped waiting.
    pub(super) fn caller_gone(&self, id: u64) -> bool {
        self.requests_out
            .get(&id)
            .is_some_and(|c| c.reply.is_closed())
            || self.hooks.get(&id).is_some_and(|(_, r)| r.is_closed())
    }

    /// The requests and hooks whose caller stopped waiting.
    pub(super) fn callers_gone(&self) -> Vec<u64> {
        let ids = self.requests_out.keys().chain(self.hooks.keys());
        ids.copied().filter(|id| self.caller_gone(*id)).collect()
    }

    /// The state machine's id of the request or hook of call number `call`, if it waits.
    pub(super) fn id_of_call(&self, call: u64) -> Option<u64> {
        self.by_call.get(&call).copied()
    }
}

/// Which of `ids` (the state machine's request ids) no longer wait for an answer; none
/// looked at unless `look` (one ended unanswered since the last look).
pub(super) fn ended_of<'a>(
    state: &HostState,
    look: bool,
    ids: impl Iterator<Item = &'a u64>,
) -> Vec<u64> {
    match look {
        true => ids.copied().filter(|n| !state.is_pending(*n)).collect(),
        false => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Cmd::Forget` names a call by its number: the index follows every way a request or
    /// a hook enters and leaves the tables, so a number never names another call's id.
    #[test]
    fn a_call_number_names_its_waiting_request_or_hook_only_while_it_waits() {
        let mut w = Waiting::default();
        let (reply, _rx) = oneshot::channel();
        let call = |call, reply| RequestCall {
            method: "tools/call".into(),
            call,
            reply,
            wire: None,
        };
        w.add_request(10, call(1, reply));
        let (hook, _hook_rx) = oneshot::channel();
        w.add_hook(11, 2, hook);
        assert_eq!((w.id_of_call(1), w.id_of_call(2)), (Some(10), Some(11)));
        assert!(w.take_hook(10).is_none(), "a request's id is no hook's");
        assert!(w.take_request(10).is_some());
        assert_eq!(w.id_of_call(1), None);
        assert!(w.take_request(10).is_none());
        assert!(w.take_hook(11).is_some());
        assert_eq!(w.id_of_call(2), None);
        assert!(w.by_call.is_empty() && w.requests_out.is_empty() && w.hooks.is_empty());
    }
}
