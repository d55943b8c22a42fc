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
    pub(super) hooks: HashMap<u64, (u64, Reply<Option<HookVerdict>>)>,
    /// The application's requests sent by the state machine ([`Cmd::Request`]), by its id.
    pub(super) requests_out: HashMap<u64, RequestCall>,
    pub(super) refreshes: Vec<(u64, RefreshReply)>,
    /// The change receipt the input being carried out handed out, if any.
    pub(super) receipt: Option<ChangeReceipt>,
    /// Requests given up whose answer the peer had already received: applied when read
    /// (`Driver::give_up`), at most one per request waiting.
    pub(super) answered_given_up: std::collections::HashSet<u64>,
    /// Barriers whose calls' frames the outbox still holds: each with the number of the
    /// last frame taken before it ([`Outbox::sent`]), in order.
    pub(super) barriers: VecDeque<(u64, Reply<()>)>,
    /// [`HostState::requests_ended_unanswered`] when the tables above were last swept.
    pub(super) ended_seen: u64,
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
