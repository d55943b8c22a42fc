//! The channels the host accepted from one server connection (§14.5 itemized results of
//! `channels/register` and Request-form `channels/changed`): what the server may go on using
//! and what an inbound `channels/list` is answered with (§14.3). Part of
//! [`ServerState`](super::ServerState), which `server::Server` drives.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::Deserialize;
use serde_json::Value;

use crate::jsonrpc::{ErrorObject, RequestId};
use crate::protocol::channels::{
    ChannelDescriptor, ChannelsChanged, ChannelsRegister, ItemizedResult, ListResult,
};
use crate::protocol::Method;

/// The most channels a server connection holds as opened by the application's answers to
/// the host's `channels/open` (§14.3), as the host's own `max_channels`: an open answered
/// past it goes to the host as `-32024` with `data: { channelId, limit }` and opens
/// nothing, so a host asking for ever more opens does not grow the state without end.
pub const MAX_OPENED_CHANNELS: usize = 4096;

/// The host's `channels/close` requests answered lately and not `closed: true` that a
/// `notifications/cancelled` crossing the answer still ends the channel of
/// ([`ChannelLedger::close_answered`]): the newest this many are kept.
pub(crate) const ANSWERED_CLOSES_KEPT: usize = 64;

/// The channels the host has accepted from this connection, by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct AcceptedChannels(BTreeMap<String, ChannelDescriptor>);

impl AcceptedChannels {
    /// The accepted channels, by id.
    #[cfg(test)]
    fn list(&self) -> Vec<ChannelDescriptor> {
        self.0.values().cloned().collect()
    }

    /// Applies an itemized `result` the way the host does (§14.5): `removed` ids are
    /// dropped, an accepted descriptor is held, a rejected addition changes nothing, and a
    /// rejected update drops the channel ([`effects`]).
    pub(crate) fn apply(&mut self, result: &ItemizedResult, change: &ChannelChange) {
        effects(&mut self.0, result, change);
    }

    /// Applies a `change` whose answer never came: reading (§14.5 is silent on a change the
    /// host never answers; fail closed), the host may have applied any part of it, so the
    /// channels it removed or updated are no longer counted as accepted and what it added
    /// is not accepted. The server claims no channel the host may not hold as it does.
    fn unanswered(&mut self, change: &ChannelChange) {
        for (id, entry) in &change.entries {
            if matches!(entry, Entry::Removed | Entry::Updated(_)) {
                self.0.remove(id);
            }
        }
    }
}

/// Where the effects of an itemized result go: the held channels themselves, or the
/// verdicts of one change in flight ([`InFlight::verdicts`]).
trait Effects {
    /// The host holds `d` (accepted).
    fn hold(&mut self, d: &ChannelDescriptor);
    /// The host no longer holds channel `id`.
    fn drop_id(&mut self, id: &str);
}

impl Effects for BTreeMap<String, ChannelDescriptor> {
    fn hold(&mut self, d: &ChannelDescriptor) {
        self.insert(d.id.clone(), d.clone());
    }
    fn drop_id(&mut self, id: &str) {
        self.remove(id);
    }
}

impl Effects for HashMap<String, bool> {
    fn hold(&mut self, d: &ChannelDescriptor) {
        self.insert(d.id.clone(), true);
    }
    fn drop_id(&mut self, id: &str) {
        self.insert(id.to_owned(), false);
    }
}

/// The effects of `change`'s itemized `result` as the host applies it (§14.5), into `to`:
/// `removed` ids are dropped, an accepted descriptor is held, a rejected addition changes
/// nothing, and a rejected update drops the channel.
///
/// Reading (§14.5 gives one entry per submitted descriptor, not their order): a result
/// with one entry per entry of the change, naming the same ids in the order the host
/// applies them (removals, additions, updates, as this crate's host answers), is read
/// entry by entry, so one id in two lists (removed and re-added, say) takes each of its
/// results. Any other result is read by id: the first descriptor sent under it, an
/// update before an addition. Linear either way (each list indexed by id once).
fn effects(to: &mut impl Effects, result: &ItemizedResult, change: &ChannelChange) {
    for id in &change.removed {
        to.drop_id(id);
    }
    let aligned = result.results.len() == change.entries.len()
        && result
            .results
            .iter()
            .zip(&change.entries)
            .all(|(r, (id, _))| r.id == *id);
    if aligned {
        for (r, (id, entry)) in result.results.iter().zip(&change.entries) {
            let held = match entry {
                Entry::Added(i) => i.and_then(|i| change.added.get(i)),
                Entry::Updated(i) => i.and_then(|i| change.updated.get(i)),
                Entry::Removed => None,
            };
            match (r.accepted, held) {
                (true, Some(d)) => to.hold(d),
                (false, _) if matches!(entry, Entry::Updated(_)) => to.drop_id(id),
                _ => {}
            }
        }
        return;
    }
    fn index(ds: &[ChannelDescriptor]) -> HashMap<&str, &ChannelDescriptor> {
        let mut by_id = HashMap::with_capacity(ds.len());
        for d in ds {
            by_id.entry(d.id.as_str()).or_insert(d);
        }
        by_id
    }
    let (added, updated) = (index(&change.added), index(&change.updated));
    for item in &result.results {
        let id = item.id.as_str();
        if item.accepted {
            // The host applies additions before updates: an id in both ends as updated.
            if let Some(d) = updated.get(id).or_else(|| added.get(id)) {
                to.hold(d);
            }
        } else if !added.contains_key(id) && updated.contains_key(id) {
            to.drop_id(id);
        }
    }
}

/// One channel change the server sent: what `channels/register` or `channels/changed`
/// proposed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChannelChange {
    /// Descriptors proposed as new (`channels/register`'s `channels`, or `added`).
    pub(crate) added: Vec<ChannelDescriptor>,
    /// Descriptors proposed as updates.
    pub(crate) updated: Vec<ChannelDescriptor>,
    /// Ids removed.
    pub(crate) removed: Vec<String>,
    /// Every entry as sent, in the order the host applies them (removals, additions,
    /// updates): its id (`""` when it has none) and what it is ([`AcceptedChannels::apply`]).
    entries: Vec<(String, Entry)>,
}

/// What one entry of a [`ChannelChange`] is: a removal, or an addition or update with the
/// index of its descriptor in `added` / `updated` (`None`: unreadable, the host rejects it).
#[derive(Debug, Clone, Copy)]
enum Entry {
    Removed,
    Added(Option<usize>),
    Updated(Option<usize>),
}

impl ChannelChange {
    /// The change a request of `method` with `params` proposes; `None` for another method,
    /// or for params that are no channel change (the host answers those `-32602`, so
    /// nothing is accepted). Read item by item, as the host judges them (§14.5): an entry
    /// the types cannot read (a descriptor without `type` …) is one the host rejects, and
    /// is left out without taking the rest of the change with it.
    fn of(method: &str, params: &Value) -> Option<ChannelChange> {
        let p = params.as_object()?;
        let list = |k: &str| {
            p.get(k)
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
        };
        let (adds, updates, removes) = match method {
            ChannelsRegister::NAME => {
                let channels = p.get("channels").and_then(Value::as_array)?;
                (channels.as_slice(), &[][..], &[][..])
            }
            ChannelsChanged::NAME => (list("added"), list("updated"), list("removed")),
            _ => return None,
        };
        let mut change = ChannelChange::default();
        for r in removes {
            let id = r.as_str().unwrap_or("").to_owned();
            if r.is_string() {
                change.removed.push(id.clone());
            }
            change.entries.push((id, Entry::Removed));
        }
        let id_of = |v: &Value| v.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
        for v in adds {
            let at = ChannelDescriptor::deserialize(v).ok().map(|d| {
                change.added.push(d);
                change.added.len() - 1
            });
            change.entries.push((id_of(v), Entry::Added(at)));
        }
        for v in updates {
            let at = ChannelDescriptor::deserialize(v).ok().map(|d| {
                change.updated.push(d);
                change.updated.len() - 1
            });
            change.entries.push((id_of(v), Entry::Updated(at)));
        }
        Some(change)
    }
}

/// A channel change in flight and, once settled, how.
#[derive(Debug)]
struct InFlight {
    id: u64,
    change: ChannelChange,
    answer: Option<Settled>,
    /// What it does to each id, as far as the server can tell now ([`ChannelLedger::is_known`]):
    /// `false` the channel is gone (a removal, from when it is sent; an answer read that
    /// drops it; an update given up unanswered), `true` an answer read accepts it. An
    /// addition or update not yet answered has no entry: it vouches for nothing new, and
    /// takes away nothing the host already holds until a refusal is read.
    verdicts: HashMap<String, bool>,
    /// The ids it adds or updates that the application closed after it was sent
    /// ([`ChannelLedger::closed`]): its answer no longer holds them, whatever it says.
    closed_since: HashSet<String>,
}

/// How a channel change in flight was settled.
#[derive(Debug)]
enum Settled {
    /// Answered: its itemized result (`None`: refused, or an answer that is no itemized
    /// result, so nothing was accepted).
    Answered(Option<ItemizedResult>),
    /// Given up unanswered ([`AcceptedChannels::unanswered`]).
    GaveUp,
}

/// The server's channel changes in flight, applied to [`AcceptedChannels`] in the order
/// they were sent. Reading (§14.5 is silent on overlapping changes): the host applies each
/// change in the order it reads them, so results are applied in send order whatever order
/// the responses come in; an answer waits for the answers to the changes sent before it.
/// `server::Server`'s senders get this order through the `ServerState` its driver runs.
///
/// Beside them, the channels the application opened (its successful answers to the host's
/// `channels/open`, §14.3), until its successful answer to a `channels/close` of the same
/// id. Bounded as the accepted channels are: by what the application itself registers and
/// opens, one entry per distinct id. An opened channel whose answer the host may have read
/// only after it revoked `channels.lifecycle` is dropped when the server reads the
/// revocation ([`ChannelLedger::lifecycle_revoked`], §5.4, §6.7).
#[derive(Debug, Default)]
pub(crate) struct ChannelLedger {
    accepted: AcceptedChannels,
    in_flight: VecDeque<InFlight>,
    /// The channels the application opened, by id, as its answers described them.
    opened: BTreeMap<String, ChannelDescriptor>,
    /// The opened channels whose answer the host may not have read yet, by id: the last
    /// request id the server had sent when the answer went out ([`Self::lifecycle_revoked`]),
    /// and the host's `channels/open` it answered ([`Self::open_cancelled`]). Bounded by
    /// `opened`, whose keys it keeps.
    unread_opens: HashMap<String, (u64, RequestId)>,
    /// The host's `channels/close` requests answered lately other than `closed: true`, and
    /// their channel ([`Self::close_answered`]): the newest [`ANSWERED_CLOSES_KEPT`].
    answered_closes: VecDeque<(RequestId, String)>,
    /// The last request id sent (ids rise from 1, `OwnRequests::sent`).
    last_sent: u64,
    /// The highest id of a request of the server's that the host answered: every answer
    /// the server wrote before sending it, the host had read.
    read_through: u64,
}

impl ChannelLedger {
    /// Request `id` of `method` with `params` was sent: tracked if it is a channel change
    /// (whether it was). A channel it removes is no longer one the application opened either.
    pub(crate) fn sent(&mut self, id: u64, method: &str, params: &Value) -> bool {
        self.last_sent = self.last_sent.max(id);
        let Some(change) = ChannelChange::of(method, params) else {
            return false;
        };
        let mut verdicts = HashMap::new();
        for (id, entry) in &change.entries {
            if let Entry::Removed = entry {
                self.opened.remove(id);
                self.unread_opens.remove(id);
                self.answered_closes.retain(|(_, c)| c != id);
                verdicts.insert(id.clone(), false);
            }
        }
        self.in_flight.push_back(InFlight {
            id,
            change,
            answer: None,
            verdicts,
            closed_since: HashSet::new(),
        });
        true
    }

    /// Whether channel `id` is this connection's, as a host → server method naming it must
    /// find it (§14.3, §14.6: `-32023` otherwise). Reading (§14 is silent; fail closed
    /// where the server cannot know the host holds the channel): a channel is known when
    /// the host accepted it in an itemized result (§14.5) or the application opened it,
    /// and not since removed or closed. A change in flight counts as far as the server can
    /// tell: an addition only once an answer accepting it is in (an update not yet answered
    /// leaves the channel as it was); a removal (from when it is sent) or an answer read
    /// that drops the channel ends it at once, whatever else is in flight (a refusal wins),
    /// though answers take effect on the accepted channels in send order: a hostile host
    /// answering out of order gains nothing. A change sent before the application closed
    /// the channel counts for it no more ([`Self::closed`]).
    pub(crate) fn is_known(&self, id: &str) -> bool {
        let (mut held, mut gone) = (false, false);
        let live = self
            .in_flight
            .iter()
            .filter(|e| !e.closed_since.contains(id));
        for verdict in live.filter_map(|e| e.verdicts.get(id)) {
            held |= *verdict;
            gone |= !*verdict;
        }
        self.known_given(id, (held, gone))
    }

    /// What the changes in flight say of each id they name, as [`Self::is_known`] reads
    /// them: whether an answer read accepts it, whether it is gone. One pass over them, so
    /// listing every channel stays linear in what the ledger holds.
    fn in_flight_view(&self) -> HashMap<&str, (bool, bool)> {
        let mut view: HashMap<&str, (bool, bool)> = HashMap::new();
        for e in &self.in_flight {
            for (id, verdict) in &e.verdicts {
                if !e.closed_since.contains(id) {
                    let v = view.entry(id.as_str()).or_default();
                    v.0 |= *verdict;
                    v.1 |= !*verdict;
                }
            }
        }
        view
    }

    /// [`Self::is_known`] under a [`Self::in_flight_view`].
    fn known_in(&self, view: &HashMap<&str, (bool, bool)>, id: &str) -> bool {
        self.known_given(id, view.get(id).copied().unwrap_or_default())
    }

    /// Whether channel `id` is known, given what the changes in flight say of it (whether an
    /// answer read accepts it, whether it is gone): a refusal wins.
    fn known_given(&self, id: &str, (held, gone): (bool, bool)) -> bool {
        !gone && (held || self.accepted.0.contains_key(id) || self.opened.contains_key(id))
    }

    /// The channels the host accepted that are known now ([`Self::is_known`]), by id: what
    /// `ServerState::channels` returns. A channel accepted in an answer that still waits
    /// for an earlier one is listed once that answer takes effect.
    pub(crate) fn held(&self) -> Vec<ChannelDescriptor> {
        let view = self.in_flight_view();
        let known = self
            .accepted
            .0
            .iter()
            .filter(|(id, _)| self.known_in(&view, id));
        known.map(|(_, d)| d.clone()).collect()
    }

    /// The application answered the host's `channels/open` `via` with `channel` (§14.3):
    /// held, unless [`MAX_OPENED_CHANNELS`] others are already (`Err` with the bound). A channel
    /// opened already keeps the descriptor its first answer gave it.
    pub(crate) fn opened(
        &mut self,
        channel: ChannelDescriptor,
        via: &RequestId,
    ) -> Result<(), usize> {
        let again = self.opened.contains_key(&channel.id);
        if !again && self.opened.len() >= MAX_OPENED_CHANNELS {
            return Err(MAX_OPENED_CHANNELS);
        }
        if again {
            // Opened again, it stays as the first answer left it, descriptor and all: a
            // host that held it keeps it whatever a second answer says (an open answer does
            // not rewrite what it holds, `ChannelTable::settle`; §14.2: one id, one channel).
            return Ok(());
        }
        let unread = (self.last_sent, via.clone());
        self.unread_opens.insert(channel.id.clone(), unread);
        self.opened.insert(channel.id.clone(), channel);
        Ok(())
    }

    /// The host named channel `id` in a method the server admitted (§14.3): a host names
    /// only a channel it holds, so it read the answer that opened it.
    pub(crate) fn named(&mut self, id: &str) {
        self.unread_opens.remove(id);
    }

    /// The grant in force no longer has `channels.lifecycle` (§6.7: the host revoked it
    /// before it wrote the policy Request the server just read). An open answer the host
    /// read after that is one it refused (§5.4, judged at its receipt); the server cannot
    /// tell when it read the ones it wrote before reading the Request. Reading (fail
    /// closed; the host narrows at once and writes its Request right after, §6.7, and reads
    /// the server's frames in order): the host had read an answer when it has since answered
    /// a request the server sent after it, or named its channel ([`Self::named`]); every
    /// other opened channel is no longer held. Returns those that are no longer known
    /// ([`Self::is_known`]), by id.
    pub(crate) fn lifecycle_revoked(&mut self) -> Vec<String> {
        let read_through = self.read_through;
        let mut dropped = Vec::new();
        self.unread_opens.retain(|id, (after, _)| {
            if *after < read_through {
                return false;
            }
            dropped.push(id.clone());
            false
        });
        for id in &dropped {
            self.opened.remove(id);
        }
        dropped.retain(|id| !self.is_known(id));
        dropped.sort();
        dropped
    }

    /// The `channels/list` answer of a server that keeps no list of its own: the known
    /// channels of the connection (§14.3, [`Self::is_known`]), the ones the host accepted
    /// (§14.5) and then the ones the application opened and did not also register, each
    /// once, by id.
    pub(crate) fn list_result(&self) -> ListResult {
        let mut channels = self.held();
        let view = self.in_flight_view();
        let opened = self.opened.iter();
        let only_opened = opened.filter(|(id, _)| !self.accepted.0.contains_key(*id));
        let known = only_opened.filter(|(id, _)| self.known_in(&view, id));
        channels.extend(known.map(|(_, d)| d.clone()));
        ListResult {
            channels,
            extra: Default::default(),
        }
    }

    /// The application answered the host's `channels/close` of channel `id` with
    /// `closed: true` (§14.3): it is gone, whether opened or registered, until the
    /// application opens or registers it again. Whether the accepted channels changed.
    ///
    /// A change sent before the close that adds or updates it is answered for a channel the
    /// host has since dropped (its close was answered `closed: true`): its answer, read
    /// before or after, no longer holds the channel (reading, §14.3 is silent; fail closed,
    /// in send order: a change sent after the close may hold it again).
    pub(crate) fn closed(&mut self, id: &str) -> bool {
        self.opened.remove(id);
        self.unread_opens.remove(id);
        // A cancel of a close answered before no longer ends it, if held again since.
        self.answered_closes.retain(|(_, c)| c != id);
        for e in &mut self.in_flight {
            let names = |ds: &[ChannelDescriptor]| ds.iter().any(|d| d.id == id);
            if names(&e.change.added) || names(&e.change.updated) {
                e.closed_since.insert(id.to_owned());
            }
        }
        self.accepted.0.remove(id).is_some()
    }

    /// Request `id` was answered with `outcome`: if it was a channel change, it and every
    /// settled change sent before it take effect, in send order. Either way the host had
    /// read every answer written before it ([`Self::lifecycle_revoked`]).
    pub(crate) fn answered(&mut self, id: u64, outcome: &Result<Value, ErrorObject>) {
        self.read_through = self.read_through.max(id);
        let result = outcome
            .as_ref()
            .ok()
            .and_then(|v| ItemizedResult::deserialize(v).ok());
        self.settle(id, Settled::Answered(result));
    }

    /// Request `id` was given up unanswered (its deadline passed): if it was a channel
    /// change, it settles as [`AcceptedChannels::unanswered`] says, in send order, so the
    /// changes sent after it no longer wait for it.
    pub(crate) fn gave_up(&mut self, id: u64) {
        self.settle(id, Settled::GaveUp);
    }

    fn settle(&mut self, id: u64, how: Settled) {
        let Some(entry) = self.in_flight.iter_mut().find(|e| e.id == id) else {
            return;
        };
        // What the answer says of each id it names counts at once (a refusal wins), though
        // the accepted channels take it in send order.
        match &how {
            Settled::Answered(Some(result)) => effects(&mut entry.verdicts, result, &entry.change),
            // Refused whole: the host applied nothing but the removals (as below).
            Settled::Answered(None) => {
                let removed: HashSet<&str> =
                    entry.change.removed.iter().map(String::as_str).collect();
                entry.verdicts.retain(|id, _| removed.contains(id.as_str()));
            }
            // As `AcceptedChannels::unanswered`: what it removed or updated is gone.
            Settled::GaveUp => {
                let InFlight {
                    change, verdicts, ..
                } = &mut *entry;
                for (id, e) in &change.entries {
                    if matches!(e, Entry::Removed | Entry::Updated(_)) {
                        verdicts.insert(id.clone(), false);
                    }
                }
            }
        }
        entry.answer = Some(how);
        while self.in_flight.front().is_some_and(|e| e.answer.is_some()) {
            let Some(done) = self.in_flight.pop_front() else {
                break;
            };
            match &done.answer {
                Some(Settled::Answered(Some(result))) => self.accepted.apply(result, &done.change),
                Some(Settled::GaveUp) => self.accepted.unanswered(&done.change),
                // Refused whole: nothing it proposes is held, and what it removes stays
                // removed (fail closed: the server no longer serves it, §14.3).
                Some(Settled::Answered(None)) => {
                    for id in &done.change.removed {
                        self.accepted.0.remove(id);
                    }
                }
                None => {}
            }
            for id in &done.closed_since {
                self.accepted.0.remove(id);
            }
        }
    }

    /// The host cancelled its request `request`, already answered (MCP's
    /// `notifications/cancelled`): when that was a `channels/open` whose answer opened a
    /// channel the host is not known to have read ([`Self::lifecycle_revoked`]), the host gave
    /// the open up before it read the answer, which it then never applies (a host cancels
    /// only what it has no answer to): the channel is no longer held (fail closed, §14.5).
    /// Returns it when that leaves it unknown ([`Self::is_known`]). `request` names the open
    /// by its identity in flight (`jsonrpc::Identity`: `7.0` names open `7`).
    pub(crate) fn open_cancelled(&mut self, request: &RequestId) -> Option<String> {
        let read_through = self.read_through;
        let id = self
            .unread_opens
            .iter()
            .find(|(_, (after, via))| via.same_in_flight(request) && *after >= read_through)
            .map(|(id, _)| id.clone())?;
        self.unread_opens.remove(&id);
        self.opened.remove(&id);
        (!self.is_known(&id)).then_some(id)
    }

    /// The application answered the host's `channels/close` `request` for `channel` other
    /// than `closed: true`, so the channel stays held; kept for [`Self::close_given_up`].
    pub(crate) fn close_answered(&mut self, request: RequestId, channel: String) {
        if self.answered_closes.len() >= ANSWERED_CLOSES_KEPT {
            self.answered_closes.pop_front();
        }
        self.answered_closes.push_back((request, channel));
    }

    /// The host cancelled its `channels/close` `request` after the application answered
    /// it. Reading (§14.5, MCP's cancellation; fail closed, as for a close cancelled before
    /// its answer): the host gave it up before it read the answer and dropped the channel,
    /// so the server no longer holds it either. Whether a held channel was dropped.
    /// `request` names the close by its identity in flight (`jsonrpc::Identity`).
    pub(crate) fn close_given_up(&mut self, request: &RequestId) -> bool {
        let Some(i) = self
            .answered_closes
            .iter()
            .position(|(r, _)| r.same_in_flight(request))
        else {
            return false;
        };
        let Some((_, channel)) = self.answered_closes.remove(i) else {
            return false;
        };
        let held = self.is_known(&channel);
        self.closed(&channel);
        held
    }

    /// The connection ended: no change in flight will be answered.
    pub(crate) fn forget_in_flight(&mut self) {
        self.in_flight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(id: &str, label: &str) -> ChannelDescriptor {
        ChannelDescriptor::new(id, "chat").with_label(label)
    }

    /// §14.5: a cancel of a close answered before ends the channel, once, and no longer
    /// once that channel was closed and opened again since (the host holds the new one).
    #[test]
    fn s14_5_a_late_cancel_of_a_close_ends_only_the_channel_its_answer_left() {
        let (r1, r2, r3) = (
            RequestId::String("r1".into()),
            RequestId::String("r2".into()),
            RequestId::String("r3".into()),
        );
        let mut ledger = ChannelLedger::default();
        ledger.opened(d("c", "one"), &r1).expect("room");
        ledger.close_answered(r2.clone(), "c".into());
        assert!(ledger.close_given_up(&r2));
        assert!(!ledger.is_known("c"));
        assert!(!ledger.close_given_up(&r2), "once");
        ledger.opened(d("c", "one"), &r1).expect("room");
        ledger.close_answered(r3.clone(), "c".into());
        ledger.closed("c");
        ledger.opened(d("c", "two"), &r1).expect("room");
        assert!(!ledger.close_given_up(&r3));
        assert!(ledger.is_known("c"), "opened again since");
    }

    fn results(items: &[(&str, bool)]) -> ItemizedResult {
        let results = items
            .iter()
            .map(|(id, ok)| json!({ "id": id, "accepted": ok }))
            .collect::<Vec<_>>();
        serde_json::from_value(json!({ "results": results })).expect("itemized")
    }

    /// §14.5: one id in two lists of one `channels/changed` (removed and re-added) is two
    /// results, in the order the host applied them (removals, additions, updates): a removal
    /// accepted and the re-addition refused (`capability_denied`, the host no longer grants
    /// `channels.register`, while a removal always applies) leaves the channel removed, as
    /// the host holds it. Found by the channels hunt: each result was matched by id alone,
    /// so the removal's `accepted` re-added the refused descriptor and the server held a
    /// channel the host did not.
    #[test]
    fn s14_5_a_refused_readdition_after_a_removal_is_not_held() {
        let mut held = AcceptedChannels::default();
        held.0.insert("a".into(), d("a", "old"));
        let change = ChannelChange::of(
            ChannelsChanged::NAME,
            &json!({ "removed": ["a"], "added": [d("a", "new")] }),
        )
        .expect("a change");
        let mut result = results(&[("a", true), ("a", false)]);
        result.results[1].reason = Some("capability_denied".into());
        held.apply(&result, &change);
        assert!(held.list().is_empty(), "{:?}", held.list());
    }

    /// §14.5 at the ledger, answers out of order: an addition in flight takes away no
    /// channel the host already holds (here opened), and vouches for none before an answer
    /// accepts it; an update in flight leaves its channel as it was, also once its change is
    /// refused whole (the host applied none of it), and a refusal of it read ends the
    /// channel at once, though an earlier change is still unanswered.
    #[test]
    fn s14_5_changes_in_flight_count_as_far_as_answered() {
        let mut ledger = ChannelLedger::default();
        let via = RequestId::from(1i64);
        ledger.opened(d("open", "opened"), &via).expect("room");
        ledger.accepted.0.insert("held".into(), d("held", "old"));
        let add = json!({ "channels": [d("open", "again"), d("new", "new")] });
        ledger.sent(1, ChannelsRegister::NAME, &add);
        let update = |label: &str| json!({ "updated": [d("held", label)] });
        ledger.sent(2, ChannelsChanged::NAME, &update("new"));
        ledger.sent(3, ChannelsChanged::NAME, &update("newer"));
        let known = |l: &ChannelLedger| ["open", "new", "held"].map(|id| l.is_known(id));
        assert_eq!(known(&ledger), [true, false, true]);
        ledger.answered(2, &Err(ErrorObject::internal("refused")));
        assert_eq!(known(&ledger), [true, false, true]);
        let refused = json!({ "results": [{ "id": "held", "accepted": false }] });
        ledger.answered(3, &Ok(refused));
        assert_eq!(known(&ledger), [true, false, false]);
        let accepted = json!({ "results": [{ "id": "new", "accepted": true }] });
        ledger.answered(1, &Ok(accepted));
        assert_eq!(known(&ledger), [true, true, false]);
    }

    /// §6.7's race at the ledger: an opened channel counts as read by the host once the host
    /// answered a request sent after its answer, not one sent before (the boundary), nor a
    /// later request's answer that never came; a revocation then drops only the unread ones,
    /// and a channel also registered stays known (not reported).
    #[test]
    fn s6_7_a_revocation_drops_the_opens_the_host_is_not_known_to_have_read() {
        let mut ledger = ChannelLedger::default();
        let via = |n: i64| RequestId::from(n);
        let push = json!({ "featureSet": "news" });
        ledger.sent(1, "push/event", &push);
        ledger.opened(d("read", "r"), &via(10)).expect("room");
        ledger.sent(2, "push/event", &push);
        ledger.answered(2, &Ok(json!({})));
        ledger.opened(d("unread", "u"), &via(12)).expect("room");
        ledger.opened(d("also-held", "a"), &via(11)).expect("room");
        let held = d("also-held", "a");
        ledger.accepted.0.insert(held.id.clone(), held);
        ledger.sent(3, "push/event", &push);
        ledger.answered(1, &Ok(json!({})));
        ledger.opened(d("named", "n"), &via(13)).expect("room");
        ledger.named("named");
        assert_eq!(ledger.lifecycle_revoked(), ["unread"]);
        let known = ["read", "also-held", "unread", "named"].map(|id| ledger.is_known(id));
        assert_eq!(known, [true, true, false, true]);
        assert!(ledger.unread_opens.is_empty(), "{:?}", ledger.unread_opens);
        assert_eq!(ledger.lifecycle_revoked(), Vec::<String>::new());
    }

    /// Fail closed on an unanswered change: the host rejects an update it cannot read and
    /// so drops the channel, so the server no longer counts it either.
    #[test]
    fn s14_5_an_unanswered_unreadable_update_drops_the_channel() {
        let mut held = AcceptedChannels::default();
        held.0.insert("a".into(), d("a", "old"));
        let change = ChannelChange::of(
            ChannelsChanged::NAME,
            &json!({ "updated": [{ "id": "a" }] }),
        )
        .expect("a change");
        held.unanswered(&change);
        assert!(held.list().is_empty(), "{:?}", held.list());
    }

    /// §14.5, as the host applies a change: removals drop; an accepted id takes its update
    /// if there is one, else the first addition under it; a rejected update drops the
    /// channel, a rejected addition changes nothing; an id no descriptor carries is skipped.
    /// Pins `apply`'s behaviour, which an index made linear (it was results × descriptors).
    #[test]
    fn s14_5_apply_follows_the_itemized_result() {
        let mut held = AcceptedChannels::default();
        for c in [d("c", "old c"), d("d", "old d"), d("e", "old e")] {
            held.0.insert(c.id.clone(), c);
        }
        let change = ChannelChange::of(
            ChannelsChanged::NAME,
            &json!({
                "added": [d("a", "first a"), d("a", "second a"), d("b", "added b")],
                "updated": [d("b", "updated b"), d("d", "new d"), d("e", "new e")],
                "removed": ["c"],
            }),
        )
        .expect("a change");
        let result = results(&[
            ("c", true),
            ("a", true),
            ("a", false),
            ("b", true),
            ("d", false),
            ("e", true),
            ("ghost", true),
        ]);
        held.apply(&result, &change);
        let got: Vec<(String, Option<String>)> =
            held.list().into_iter().map(|c| (c.id, c.label)).collect();
        let want = [("a", "first a"), ("b", "updated b"), ("e", "new e")]
            .map(|(i, l)| (i.to_owned(), Some(l.to_owned())));
        assert_eq!(got, want);
        // The same change answered entry by entry, as this crate's host answers it.
        let mut aligned = AcceptedChannels::default();
        for c in [d("c", "old c"), d("d", "old d"), d("e", "old e")] {
            aligned.0.insert(c.id.clone(), c);
        }
        let result = results(&[
            ("c", true),
            ("a", true),
            ("a", false),
            ("b", true),
            ("b", true),
            ("d", false),
            ("e", true),
        ]);
        aligned.apply(&result, &change);
        let got: Vec<(String, Option<String>)> = aligned
            .list()
            .into_iter()
            .map(|c| (c.id, c.label))
            .collect();
        assert_eq!(got, want);
    }
}
