//! The ids of the other side's requests in flight (delivered, their answers not yet
//! queued), so a request under one of them is refused, never run: the MCP base protocol
//! forbids a requestor to reuse an id within the session, and two requests in flight under
//! one id could not be told apart by their answers (JSON-RPC 2.0 §5: a response carries the
//! id of the request it answers). Reading, failing closed: the first request under an id
//! runs and is answered as usual, a later one while it is in flight (an earlier entry of
//! the same batch included) is answered `-32600` (`jsonrpc::InvalidMessage::id_in_use`).
//! Every request the peer delivers is taken here, whoever owns the connection (a
//! `HostSession`'s and a `Server`'s too): the one rule.
//!
//! How long a request is in flight, read to fail closed: from its delivery until its answer
//! is queued for writing, or its guard is dropped without one (which answers it `-32601`
//! or `-32603`). MCP's `notifications/cancelled` does not end it: cancellation is advisory
//! (MCP: a receiver may have answered already, or answer still), and JSON-RPC 2.0 §4 has
//! every request answered, so an application that ignores a cancel still owes, and writes,
//! the one answer under that id; a request reusing it meanwhile is refused. The exception
//! is a connection whose owner answers a cancelled request `-32800` as it handles the
//! cancel, in wire order (`Peer::answers_cancels`: the `Server`, the `HostSession`): there
//! the cancel stands for that answer, so its id is free from the cancel on ([`Serving::forget`])
//! and the sender may reuse it at once; the cancelled request's own answer, if its work
//! still ends in one, is the owner's to drop (`server::Server` does). Those owners answer
//! `-32800` only for the requests they hand out (the `Server`'s handlers'; the
//! `HostSession`'s `inference/request` and `model/info`), and a cancel of another request
//! of theirs (a `ping`, a `push/event`) frees its id as well; that is no gap: such a request
//! is answered as the owner handles it, in wire order, so its one answer was queued before
//! the owner handles the cancel, and so before anything it does for a request reusing the
//! id. (The `Server`'s `initialize`, handed to its MCP fallback, is answered before the
//! owner handles anything behind it.) So no request runs beside another under one id, and under a
//! reused id the owner writes the cancelled request's one answer first
//! (`tests/server_cancel_reuse.rs`). What this does not order: a reuse the reader refuses
//! itself (busy, over a bound, not parsed) is answered as it is read, which may be before
//! the owner's `-32800` for the request it cancelled; the sender reused an id MCP forbids
//! it to reuse, and MCP has it ignore any answer to a request it cancelled.
//!
//! Held as keyed 48-bit hashes of the ids ([`key`]) beside a 16-bit generation, in one
//! word, so taking a request copies nothing and allocates nothing while at most one is in
//! flight (the plain request/response case), and an answer owed holds 16 bytes more (its
//! key, and a word for a batch's keys); the
//! map for more is bounded by what is in flight (`PeerConfig::max_in_flight_requests`,
//! which counts the ids the application took with `IncomingRequest::into_id` and has not
//! answered yet, [`Serving::by_id`]), and freed once they are answered. Two distinct ids in flight at once sharing a key (a
//! chance of 2^-48 per pair, under a key no sender can aim at) would refuse the later one.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::num::NonZeroU64;

use crate::jsonrpc::RequestId;

/// The low bits of a [`Held`] that hold the generation.
const GENERATION: u64 = 0xFFFF;

/// The key an id is held under: a hash keyed once per process of the id's identity in
/// flight ([`RequestId::identity`]: `7`, `7.0` and `7e0` one key, `0` and `-0.0` one,
/// `"7"` another; not `RequestId`'s own `Hash`, which keeps the representation, and under
/// which the integers `-1` and `18446744073709551615` write the same bytes: a `HashSet`
/// tells them apart by equality, a key alone would not), its low 16 bits clear and never
/// zero.
pub(super) fn key(id: &RequestId) -> u64 {
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let hash = STATE
        .get_or_init(std::collections::hash_map::RandomState::new)
        .hash_one(id.identity());
    (hash & !GENERATION).max(GENERATION + 1)
}

/// What an owed answer holds in [`Serving`]: its key and the generation it was taken in.
pub(super) type Held = NonZeroU64;

/// The keys of the other side's requests in flight, each with the generation it was taken
/// in, so a request given up on by its sender ([`Serving::forget`]) releases nothing when
/// its guard ends later: the key may be another request's by then.
#[derive(Debug, Default)]
pub(super) struct Serving {
    /// The first one (no allocation for a lone request).
    one: Option<Held>,
    /// The others by key, while more than one is in flight. Boxed: every connection holds
    /// a `Serving`, most never more than one request at once (issue #24).
    #[allow(clippy::box_collection)]
    more: Option<Box<HashMap<u64, Held>>>,
    /// The generation the next taken key gets (its low 16 bits).
    next: u64,
    /// Those of them whose guard handed them on to be answered by id
    /// (`IncomingRequest::into_id`), by key: still in flight until that answer is queued
    /// (`Peer::respond`). Boxed and `None` until one is.
    #[allow(clippy::box_collection)]
    detached: Option<Box<HashMap<u64, Held>>>,
}

impl Serving {
    /// Takes `key` ([`key`]) as in flight: what to release it with, or `None` (nothing
    /// changed) when it already is.
    pub(super) fn take(&mut self, key: u64) -> Option<Held> {
        if self.one.is_some_and(|h| h.get() & !GENERATION == key) || self.more_has(key).is_some() {
            return None;
        }
        let held = NonZeroU64::new(key | (self.next & GENERATION))?;
        self.next = self.next.wrapping_add(1);
        if self.one.is_none() {
            self.one = Some(held);
        } else {
            self.more
                .get_or_insert_with(Default::default)
                .insert(key, held);
        }
        Some(held)
    }

    /// Releases what [`Serving::take`] gave (its request is answered); nothing if the key
    /// was forgotten since, and perhaps taken again.
    pub(super) fn release(&mut self, held: Held) {
        if self.one == Some(held) {
            self.one = None;
        } else if self.more_has(held.get() & !GENERATION) == Some(held) {
            self.forget(held.get() & !GENERATION);
        }
    }

    /// Holds `held`'s key again after it was released for its answer's write, which did
    /// not take the frame (`Owed::retake_ids`), updating `held` to the new hold: `false`
    /// when the key was taken meanwhile by another request (it keeps it).
    pub(super) fn retake(&mut self, held: &mut Held) -> bool {
        match self.take(held.get() & !GENERATION) {
            Some(new) => {
                *held = new;
                true
            }
            None => false,
        }
    }

    /// Forgets `key` whatever its generation: its sender cancelled its request (MCP's
    /// `notifications/cancelled`) on a connection whose owner answers it `-32800` as it
    /// handles the cancel (module docs), so it is no longer in flight for that side.
    pub(super) fn forget(&mut self, key: u64) {
        if self.one.is_some_and(|h| h.get() & !GENERATION == key) {
            self.one = None;
        } else if let Some(more) = &mut self.more {
            more.remove(&key);
            if more.is_empty() {
                // An emptied map would keep its table: dropped, so an idle connection holds
                // none (#24).
                self.more = None;
            }
        }
    }

    /// Holds `held` (taken, not released) on past its guard, until an answer by id takes
    /// it ([`Serving::take_detached`]).
    pub(super) fn detach(&mut self, held: Held) {
        self.detached
            .get_or_insert_with(Default::default)
            .insert(held.get() & !GENERATION, held);
    }

    /// What an answer by id under `key` releases once queued: the request handed on under
    /// it ([`Serving::detach`]), if one is.
    pub(super) fn take_detached(&mut self, key: u64) -> Option<Held> {
        let detached = self.detached.as_mut()?;
        let held = detached.remove(&key);
        if detached.is_empty() {
            self.detached = None;
        }
        held
    }

    /// How many requests are handed on to be answered by id and not yet answered
    /// ([`Serving::detach`]): they count against `PeerConfig::max_in_flight_requests`, as
    /// the owed answers do, so the application's unanswered ones are bounded too.
    pub(super) fn by_id(&self) -> usize {
        self.detached.as_ref().map_or(0, |d| d.len())
    }

    /// What `key` is held as among the others in flight, if it is there.
    fn more_has(&self, key: u64) -> Option<Held> {
        self.more.as_ref().and_then(|m| m.get(&key).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id is in flight until released, whichever slot holds it; an emptied map is
    /// freed; a forgotten key taken again is not released by the first guard's end.
    #[test]
    fn an_id_is_refused_while_in_flight_only() {
        let k = |i: u64| key(&RequestId::from(i));
        let mut s = Serving::default();
        let one = s.take(k(1)).expect("free");
        assert_eq!(s.take(k(1)), None);
        let two = s.take(k(2)).expect("free");
        let three = s.take(k(3)).expect("free");
        assert_eq!(s.take(k(2)), None);
        s.release(one);
        assert_eq!(s.take(k(3)), None);
        let again = s.take(k(1)).expect("released");
        assert_eq!(s.take(k(1)), None);
        s.release(two);
        s.release(three);
        s.release(again);
        assert!(s.more.is_none());
        assert!(s.one.is_none());
        let first = s.take(k(5)).expect("free");
        s.forget(k(5));
        let second = s.take(k(5)).expect("forgotten");
        s.release(first);
        assert_eq!(s.take(k(5)), None);
        s.release(second);
        assert!(s.take(k(5)).is_some());
        // Handed on to be answered by id: in flight until that answer takes it.
        let by_id = s.take(k(6)).expect("free");
        s.detach(by_id);
        assert_eq!(s.take(k(6)), None);
        assert_eq!(s.take_detached(k(7)), None);
        let taken = s.take_detached(k(6)).expect("detached");
        assert!(s.detached.is_none());
        s.release(taken);
        assert!(s.take(k(6)).is_some());
        assert_ne!(key(&RequestId::from(7_i64)), key(&RequestId::from("7")));
        // `serde_json::Number`'s own hash writes both as the same eight bytes.
        assert_ne!(
            key(&RequestId::from(-1_i64)),
            key(&RequestId::from(u64::MAX))
        );
        assert_eq!(key(&RequestId::from(7_i64)), key(&RequestId::from(7_u64)));
    }
}
