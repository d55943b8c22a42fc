//! A bounded multi-producer, single-consumer queue that holds only what is queued (issue
//! #24: idle memory). `tokio::sync::mpsc` allocates a block of 32 slots and a 512-byte
//! channel header when it is created, whatever its capacity, so every idle connection paid
//! for its incoming and outgoing queues and a host session for its event and diagnostic
//! streams before a single message. This queue allocates on the first item it holds and
//! gives its room back once it has drained after a burst.
//!
//! The semantics used here are `mpsc`'s: at most `capacity` items are queued; a full queue
//! makes `Sender::try_send` fail and `Sender::send` wait; sending fails once the
//! receiver is closed or gone (a dropped receiver drops what it held); receiving ends with
//! `None` once every sender is gone and everything was received; [`Receiver::recv`] is
//! cancel-safe.
//!
//! The one receiver waits on an [`AtomicWaker`], not a `Notify`: a driver re-polls its
//! queues at every turn of its `select!`, and registering with a `Notify` takes its lock and
//! links a waiter each time (issue #24: ≈ 7% of a driver's CPU in the pipelined benches).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use super::shared::lock;

/// Above this many slots, a drained queue gives its room back (a burst's growth is not kept
/// by an idle connection).
const KEEP_SLOTS: usize = 16;

struct State<T> {
    items: VecDeque<T>,
    /// The weight of each item, in order, in a [`weighted`] queue (empty otherwise).
    weights: VecDeque<usize>,
    /// The sum of `weights`.
    weight: usize,
    senders: u32,
    /// The receiver is closed or dropped: nothing more is taken.
    rx_closed: bool,
    /// Senders waiting for room: each item taken wakes one of them (waking them all at
    /// every take made a burst of n waiting senders cost n² wake-ups).
    waiting: u32,
    /// Room taken ahead by [`Permit`]s not yet used or dropped, counted as items queued.
    /// The three counts are 32 bits: every idle connection holds five queues (issue #24's
    /// idle memory).
    reserved: u32,
}

struct Chan<T> {
    state: Mutex<State<T>>,
    /// The receiver's wake-up: one receiver, which looks again after registering, so a
    /// send between its look and its registration is not missed.
    ready: AtomicWaker,
    /// Senders waiting for room.
    room: Notify,
    capacity: usize,
    /// Items carry a weight ([`weighted`], [`capped`]).
    weighted: bool,
    /// Past this weight queued, no more is taken unless the queue is empty ([`capped`]).
    max_weight: usize,
    /// Weighs each item as it is queued ([`capped`]), whichever way it comes.
    weigh: Option<fn(&T) -> usize>,
}

impl<T> Chan<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        lock(&self.state)
    }

    /// Whether `st` has room for one more item: fewer than `capacity` (counting room held
    /// by [`Permit`]s), and less than `max_weight` queued unless it is empty.
    fn has_room(&self, st: &State<T>) -> bool {
        st.items.len() + (st.reserved as usize) < self.capacity
            && (st.items.is_empty() && st.reserved == 0 || st.weight < self.max_weight)
    }

    /// Puts `item` at the back of `st`; a weighted queue counts its weight (`weigh`'s, else
    /// `weight`). Every way into the queue goes through here.
    fn enqueue(&self, st: &mut State<T>, item: T, weight: usize) {
        let weight = self.weigh.map_or(weight, |w| w(&item));
        st.items.push_back(item);
        if self.weighted {
            st.weights.push_back(weight);
            st.weight = st.weight.saturating_add(weight);
        }
    }
}

/// The sending side of a queue; cloning it adds a sender.
pub(crate) struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// A sender that does not keep the queue open (the receiver still ends once every
/// [`Sender`] is gone); [`WeakSender::upgrade`] makes it a sender while the queue is open.
pub(crate) struct WeakSender<T> {
    chan: Weak<Chan<T>>,
}

/// The receiving side of an event, diagnostic or message queue: [`Receiver::recv`] waits
/// for the next item, [`Receiver::try_recv`] takes one if it is there.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

/// Why [`Receiver::try_recv`] returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing is queued now; more may come.
    #[error("nothing is queued yet")]
    Empty,
    /// Nothing is queued and every sender is gone: nothing more will come.
    #[error("the queue is closed and drained")]
    Disconnected,
}

/// Why [`Sender::try_send`] did not queue the item (handed back).
pub(crate) enum TrySendError<T> {
    /// The queue holds `capacity` items.
    Full(T),
    /// The receiver is closed or gone.
    Closed(T),
}

/// A queue that holds at most `capacity` (at least 1) items.
pub(crate) fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    new_channel(capacity, false)
}

/// [`channel`] whose items each carry a weight ([`Sender::try_send_weighted`]), summed over
/// what is queued until it is received ([`Sender::weight`]).
pub(crate) fn weighted<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    new_channel(capacity, true)
}

/// [`channel`] that also holds at most `max_weight` of what `weigh` says its items weigh
/// (one item more, whatever its weight, when it is empty): an item past it waits, or is
/// refused as when the queue is full.
pub(crate) fn capped<T>(
    capacity: usize,
    max_weight: usize,
    weigh: fn(&T) -> usize,
) -> (Sender<T>, Receiver<T>) {
    new_chan(capacity, true, max_weight, Some(weigh))
}

fn new_channel<T>(capacity: usize, weighted: bool) -> (Sender<T>, Receiver<T>) {
    new_chan(capacity, weighted, usize::MAX, None)
}

fn new_chan<T>(
    capacity: usize,
    weighted: bool,
    max_weight: usize,
    weigh: Option<fn(&T) -> usize>,
) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            items: VecDeque::new(),
            weights: VecDeque::new(),
            weight: 0,
            senders: 1,
            rx_closed: false,
            waiting: 0,
            reserved: 0,
        }),
        ready: AtomicWaker::new(),
        room: Notify::new(),
        capacity: capacity.max(1),
        weighted,
        max_weight,
        weigh,
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// Counts a sender among the waiting ones while it waits for room (cancelled included):
/// [`Sender::send`] and [`Sender::send_from`].
struct Waiting<'a, T>(&'a Chan<T>);

impl<T> Drop for Waiting<'_, T> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.waiting = st.waiting.saturating_sub(1);
    }
}

impl<T> Sender<T> {
    /// Queues `item` if there is room and no sender is waiting for it: room made while
    /// senders wait is theirs, in the order they began waiting (as tokio's `mpsc`), so a
    /// stream of `try_send`s never starves a waiting [`Sender::send`].
    pub(crate) fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        self.try_send_weighted(item, 0)
    }

    /// [`Sender::try_send`] of an item of weight `weight` (counted in [`Sender::weight`]
    /// until it is received, in a [`weighted`] queue).
    pub(crate) fn try_send_weighted(&self, item: T, weight: usize) -> Result<(), TrySendError<T>> {
        let queued = {
            let mut st = self.chan.state();
            if st.waiting > 0 && !st.rx_closed {
                Err(TrySendError::Full(item))
            } else {
                self.push(&mut st, item, weight)
            }
        };
        if queued.is_ok() {
            self.chan.ready.wake();
        }
        queued
    }

    /// Queues `item` into the locked state if there is room; the caller wakes the receiver.
    fn push(&self, st: &mut State<T>, item: T, weight: usize) -> Result<(), TrySendError<T>> {
        if st.rx_closed {
            return Err(TrySendError::Closed(item));
        }
        if !self.chan.has_room(st) {
            return Err(TrySendError::Full(item));
        }
        self.chan.enqueue(st, item, weight);
        Ok(())
    }

    /// Queues `item` now, ahead of senders waiting for room and past the capacity: for an
    /// item that only reminds the receiver of work it already holds (a frame written in
    /// part, [`super::Shared::send_now`]), which must never be refused while the room it
    /// would take is promised to a waiting sender. `Err` once the receiver is closed or gone.
    pub(crate) fn remind(&self, item: T) -> Result<(), T> {
        {
            let mut st = self.chan.state();
            if st.rx_closed {
                return Err(item);
            }
            self.chan.enqueue(&mut st, item, 0);
        }
        self.chan.ready.wake();
        Ok(())
    }

    /// The weight of what is queued and not yet received (0 in an unweighted queue).
    pub(crate) fn weight(&self) -> usize {
        self.chan.state().weight
    }

    /// Queues `item`, waiting for room; hands it back if the receiver is closed or gone.
    /// Cancel-safe: dropped while waiting, nothing was queued.
    pub(crate) async fn send(&self, item: T) -> Result<(), T> {
        self.send_while(item, || true).await.map(drop)
    }

    /// [`Self::send`] while `keep()` holds, asked before each attempt to queue: `Ok(false)`,
    /// nothing queued (the item dropped), once it no longer does while the item waits for
    /// room.
    pub(crate) async fn send_while(&self, item: T, keep: impl Fn() -> bool) -> Result<bool, T> {
        let mut item = item;
        // A first attempt queues behind senders already waiting (fairness, as
        // [`Sender::try_send`]); a woken one takes the room its wake-up was for.
        let mut woken = false;
        loop {
            let room = self.chan.room.notified();
            tokio::pin!(room);
            // Registered before looking, so room made in between is not missed.
            room.as_mut().enable();
            if !keep() {
                return Ok(false);
            }
            let waiting = {
                let mut st = self.chan.state();
                let attempt = if st.waiting > 0 && !woken && !st.rx_closed {
                    Err(TrySendError::Full(item))
                } else {
                    self.push(&mut st, item, 0)
                };
                match attempt {
                    Ok(()) => {
                        drop(st);
                        self.chan.ready.wake();
                        return Ok(true);
                    }
                    Err(TrySendError::Closed(back)) => return Err(back),
                    Err(TrySendError::Full(back)) => item = back,
                }
                st.waiting = st.waiting.saturating_add(1);
                Waiting(&self.chan)
            };
            room.await;
            drop(waiting);
            woken = true;
        }
    }

    /// Waits for room for one item and holds it ([`Permit`]): for a sender that must decide
    /// what to send (and take its place on the wire) only once it is sure to be queued
    /// without waiting (`host::HostSession`'s gate, §5.4). Waits behind senders already
    /// waiting, as [`Sender::send`]. `Err` once the receiver is closed or gone. Cancel-safe.
    pub(crate) async fn reserve(&self) -> Result<Permit<T>, ()> {
        let mut woken = false;
        loop {
            let room = self.chan.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let waiting = {
                let mut st = self.chan.state();
                if st.rx_closed {
                    return Err(());
                }
                if (st.waiting == 0 || woken) && self.chan.has_room(&st) {
                    st.reserved = st.reserved.saturating_add(1);
                    return Ok(Permit {
                        chan: self.chan.clone(),
                        used: false,
                    });
                }
                st.waiting = st.waiting.saturating_add(1);
                Waiting(&self.chan)
            };
            room.await;
            drop(waiting);
            woken = true;
        }
    }

    /// Moves items from the front of `held` into the queue (each through `into`) while
    /// there is room, first waiting for room, as [`Sender::send`] waits, if there is none:
    /// returns how many moved (0 only when `held` is empty), or `Err` once the receiver is
    /// closed or gone. Cancel-safe: an item is either queued or still in `held`, so a
    /// sender that must never wait keeps its backlog and polls this beside other work.
    pub(crate) async fn send_from<H>(
        &self,
        held: &mut VecDeque<H>,
        mut into: impl FnMut(H) -> T,
    ) -> Result<usize, ()> {
        let mut woken = false;
        loop {
            let room = self.chan.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let waiting = {
                let mut st = self.chan.state();
                if st.rx_closed {
                    return Err(());
                }
                let mut moved = 0;
                // Behind senders already waiting (fairness, as `send`) unless woken.
                if st.waiting == 0 || woken {
                    while self.chan.has_room(&st) {
                        let Some(h) = held.pop_front() else { break };
                        self.chan.enqueue(&mut st, into(h), 0);
                        moved += 1;
                    }
                }
                if moved > 0 || held.is_empty() {
                    drop(st);
                    if moved > 0 {
                        self.chan.ready.wake();
                    }
                    return Ok(moved);
                }
                st.waiting = st.waiting.saturating_add(1);
                Waiting(&self.chan)
            };
            room.await;
            drop(waiting);
            woken = true;
        }
    }

    /// Queues every item of `held` now (each through `into`), past the capacity and the
    /// weight cap: for a sender whose backlog is bounded by its own limits and must not be
    /// held back any longer (the reader's own answers at EOF, [`Outbox::hand_over`]). The
    /// queue holds them until received; later senders wait until it has room again.
    /// `Err` (with `held` untouched) once the receiver is closed or gone.
    ///
    /// [`Outbox::hand_over`]: super::Outbox::hand_over
    pub(crate) fn push_past_capacity<H>(
        &self,
        held: &mut VecDeque<H>,
        mut into: impl FnMut(H) -> T,
    ) -> Result<(), ()> {
        let mut st = self.chan.state();
        if st.rx_closed {
            return Err(());
        }
        if held.is_empty() {
            return Ok(());
        }
        while let Some(h) = held.pop_front() {
            self.chan.enqueue(&mut st, into(h), 0);
        }
        drop(st);
        self.chan.ready.wake();
        Ok(())
    }

    /// How many more items [`Sender::try_send`] would queue now (0 once the receiver is
    /// closed or gone, or while senders wait for room): a single producer that checks it
    /// first never has an item refused.
    pub(crate) fn room(&self) -> usize {
        let st = self.chan.state();
        if st.rx_closed || st.waiting > 0 {
            return 0;
        }
        self.chan
            .capacity
            .saturating_sub(st.items.len() + st.reserved as usize)
    }

    /// Whether the receiver is closed or gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.chan.state().rx_closed
    }

    /// A sender that does not keep the queue open.
    pub(crate) fn downgrade(&self) -> WeakSender<T> {
        WeakSender {
            chan: Arc::downgrade(&self.chan),
        }
    }
}

/// Room for one item held in a queue ([`Sender::reserve`]), counted as an item queued until
/// [`Permit::send`] uses it; dropped unused, the room goes to the next waiting sender. The
/// weight of the item is not known when the room is taken: [`Permit::send`] holds it to the
/// queue's weight as [`Sender::try_send`] does ([`capped`]: at most one item past the cap),
/// handing it back when the queue is over its weight.
pub(crate) struct Permit<T> {
    chan: Arc<Chan<T>>,
    used: bool,
}

impl<T> Permit<T> {
    /// Queues `item` in the room held; hands it back as [`TrySendError::Full`] while the
    /// queue is over its weight (the sender waits again), [`TrySendError::Closed`] once the
    /// receiver is closed or gone.
    pub(crate) fn send(mut self, item: T) -> Result<(), TrySendError<T>> {
        self.used = true;
        {
            let mut st = self.chan.state();
            st.reserved = st.reserved.saturating_sub(1);
            if st.rx_closed {
                return Err(TrySendError::Closed(item));
            }
            if !st.items.is_empty() && st.weight >= self.chan.max_weight {
                return Err(TrySendError::Full(item));
            }
            self.chan.enqueue(&mut st, item, 0);
        }
        self.chan.ready.wake();
        Ok(())
    }
}

impl<T> Drop for Permit<T> {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        let pass_on = {
            let mut st = self.chan.state();
            st.reserved = st.reserved.saturating_sub(1);
            st.waiting > 0
        };
        if pass_on {
            self.chan.room.notify_one();
        }
    }
}

impl<T> fmt::Debug for Permit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("used", &self.used).finish()
    }
}

impl<T> WeakSender<T> {
    /// A sender, while any other [`Sender`] keeps the queue open.
    pub(crate) fn upgrade(&self) -> Option<Sender<T>> {
        let chan = self.chan.upgrade()?;
        {
            let mut st = chan.state();
            if st.senders == 0 {
                return None;
            }
            st.senders = st.senders.saturating_add(1);
        }
        Some(Sender { chan })
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        let mut st = self.chan.state();
        st.senders = st.senders.saturating_add(1);
        drop(st);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut st = self.chan.state();
            st.senders = st.senders.saturating_sub(1);
            st.senders == 0
        };
        if last {
            self.chan.ready.wake();
        }
    }
}

/// What a receive found.
enum Next<T> {
    Item(T),
    Empty,
    Ended,
}

impl<T> Receiver<T> {
    fn take(&self) -> Next<T> {
        let (item, wake_sender) = {
            let mut st = self.chan.state();
            let wake_sender = st.waiting > 0;
            let Some(item) = st.items.pop_front() else {
                return if st.senders == 0 || st.rx_closed {
                    Next::Ended
                } else {
                    Next::Empty
                };
            };
            if let Some(w) = st.weights.pop_front() {
                st.weight = st.weight.saturating_sub(w);
            }
            if st.items.is_empty() && st.items.capacity() > KEEP_SLOTS {
                st.items.shrink_to_fit();
                st.weights.shrink_to_fit();
            }
            (item, wake_sender)
        };
        if wake_sender {
            // Room for one: one waiting sender (a woken sender that is cancelled instead
            // passes the wake-up on, as `Notify` does).
            self.chan.room.notify_one();
        }
        Next::Item(item)
    }

    /// The next item; `None` once every sender is gone (or the receiver was closed) and
    /// everything was received.
    /// Cancel-safe: dropped while waiting, nothing was taken.
    pub async fn recv(&mut self) -> Option<T> {
        // Only `&mut self` is kept across the wait, no item-sized value (it would size every
        // idle receiver's future; issue #24).
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next item: `Ready(None)` once every sender is gone (or the receiver was
    /// closed) and everything was received; `Pending` wakes `cx` when an item comes.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(done) = self.look() {
            return Poll::Ready(done);
        }
        self.chan.ready.register(cx.waker());
        // Again after registering: an item sent between the first look and the
        // registration woke no one.
        match self.look() {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }

    /// [`Self::take`] as a poll's outcome: `None` while the queue is empty and open.
    fn look(&self) -> Option<Option<T>> {
        match self.take() {
            Next::Item(item) => Some(Some(item)),
            Next::Ended => Some(None),
            Next::Empty => None,
        }
    }

    /// The next item if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        match self.take() {
            Next::Item(item) => Ok(item),
            Next::Empty => Err(TryRecvError::Empty),
            Next::Ended => Err(TryRecvError::Disconnected),
        }
    }

    /// Refuses further items; those already queued can still be received.
    pub(crate) fn close(&mut self) {
        self.chan.state().rx_closed = true;
        self.chan.room.notify_waiters();
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let held = {
            let mut st = self.chan.state();
            st.rx_closed = true;
            st.weights.clear();
            st.weight = 0;
            std::mem::take(&mut st.items)
        };
        self.chan.room.notify_waiters();
        // Dropped outside the lock: an item's own `Drop` may send (an unanswered request
        // answers itself).
        drop(held);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.chan.state();
        f.debug_struct("Receiver")
            .field("queued", &st.items.len())
            .field("capacity", &self.chan.capacity)
            .field("senders", &st.senders)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn nothing_is_allocated_until_an_item_is_queued_and_a_drained_burst_is_given_back() {
        let (tx, mut rx) = channel::<u64>(1_000);
        assert_eq!(rx.chan.state().items.capacity(), 0);
        for n in 0..100 {
            assert!(tx.try_send(n).is_ok());
        }
        assert!(rx.chan.state().items.capacity() >= 100);
        for n in 0..100 {
            assert_eq!(rx.try_recv(), Ok(n), "in order");
        }
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(rx.chan.state().items.capacity(), 0);
    }

    #[test]
    fn a_full_queue_refuses_try_send_and_a_waiting_send_goes_in_once_there_is_room() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(1);
            assert!(tx.try_send(1).is_ok());
            assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
            let tx2 = tx.clone();
            let waiting = tokio::spawn(async move { tx2.send(3).await });
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished(), "the queue is full");
            assert_eq!(rx.recv().await, Some(1));
            assert!(waiting.await.unwrap().is_ok());
            assert_eq!(rx.recv().await, Some(3));
        });
    }

    /// A capped queue takes items up to its weight, whichever way they come (`try_send`,
    /// `send_from`), then refuses as when full; one item heavier than the cap still goes
    /// into an empty queue, and taking items makes room again.
    #[test]
    fn a_capped_queue_holds_at_most_its_weight_and_one_item_when_empty() {
        runtime().block_on(async {
            let (tx, mut rx) = capped::<String>(100, 10, String::len);
            assert!(tx.try_send("x".repeat(6)).is_ok());
            assert!(
                tx.try_send("x".repeat(6)).is_ok(),
                "under the cap when it came"
            );
            assert!(matches!(
                tx.try_send("y".into()),
                Err(TrySendError::Full(_))
            ));
            let mut held: VecDeque<String> = ["a".to_string(), "b".to_string()].into();
            let moved = futures_util::FutureExt::now_or_never(tx.send_from(&mut held, |h| h));
            assert!(moved.is_none(), "send_from waits for room past the cap");
            assert_eq!(held.len(), 2);
            assert_eq!(rx.try_recv().map(|s| s.len()), Ok(6));
            assert_eq!(rx.try_recv().map(|s| s.len()), Ok(6));
            assert!(
                tx.try_send("z".repeat(50)).is_ok(),
                "one heavy item into an empty queue"
            );
            assert!(matches!(
                tx.try_send("y".into()),
                Err(TrySendError::Full(_))
            ));
            assert_eq!(tx.weight(), 50);
            assert_eq!(rx.try_recv().map(|s| s.len()), Ok(50));
            assert_eq!(tx.send_from(&mut held, |h| h).await, Ok(2));
            assert_eq!(tx.weight(), 2);
        });
    }

    /// Room made while a sender waits is the waiting sender's: a `try_send` (or a new `send`)
    /// arriving after each take never takes it first, so the waiting one is not starved.
    #[test]
    fn room_made_while_a_sender_waits_goes_to_that_sender_not_to_a_later_one() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(1);
            assert!(tx.try_send(0).is_ok());
            let tx2 = tx.clone();
            let waiting = tokio::spawn(async move { tx2.send(1).await.is_ok() });
            tokio::task::yield_now().await;
            assert_eq!(rx.chan.state().waiting, 1, "the send waits for room");
            assert_eq!(rx.try_recv(), Ok(0));
            // A barging try_send right after the take: refused, the room is the waiter's.
            assert!(matches!(tx.try_send(99), Err(TrySendError::Full(99))));
            let tx3 = tx.clone();
            let late = tokio::spawn(async move { tx3.send(2).await.is_ok() });
            assert!(waiting.await.unwrap(), "the waiting sender got in");
            assert_eq!(rx.recv().await, Some(1), "first come, first queued");
            assert!(late.await.unwrap());
            assert_eq!(rx.recv().await, Some(2));
            assert_eq!(rx.chan.state().waiting, 0);
        });
    }

    /// Room held by a permit counts as an item: `try_send` and a later `reserve` find the
    /// queue full; the permit's item goes in past the barging senders; a permit dropped
    /// unused hands its room to the sender waiting first, and a closed queue refuses both.
    #[test]
    fn a_permit_holds_room_for_its_item_and_dropped_unused_passes_it_on() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(2);
            assert!(tx.try_send(0).is_ok());
            let permit = tx.reserve().await.expect("room for one");
            assert!(
                matches!(tx.try_send(99), Err(TrySendError::Full(99))),
                "the held room is not free"
            );
            assert_eq!(tx.room(), 0);
            assert!(
                futures_util::FutureExt::now_or_never(tx.reserve()).is_none(),
                "a second permit waits"
            );
            assert!(permit.send(1).is_ok());
            assert_eq!(rx.try_recv(), Ok(0));
            assert_eq!(rx.try_recv(), Ok(1));

            // Full again, a sender waiting, then a permit waiting behind it.
            assert!(tx.try_send(2).is_ok());
            assert!(tx.try_send(3).is_ok());
            let tx2 = tx.clone();
            let first = tokio::spawn(async move { tx2.send(4).await.is_ok() });
            tokio::task::yield_now().await;
            let tx3 = tx.clone();
            let second = tokio::spawn(async move { tx3.reserve().await.map(drop).is_ok() });
            tokio::task::yield_now().await;
            assert_eq!(rx.chan.state().waiting, 2);
            assert_eq!(rx.try_recv(), Ok(2));
            assert!(
                first.await.unwrap(),
                "the sender waiting first got the room"
            );
            assert_eq!(rx.try_recv(), Ok(3));
            // The permit taken and dropped unused: its room is free again.
            assert!(second.await.unwrap());
            assert_eq!(rx.chan.state().reserved, 0);
            assert_eq!(tx.room(), 1);

            let permit = tx.reserve().await.expect("room");
            rx.close();
            assert!(
                matches!(permit.send(5), Err(TrySendError::Closed(5))),
                "a closed queue refuses the item"
            );
            assert!(tx.reserve().await.is_err());
        });
    }

    /// A permit dropped unused while a sender waits wakes that sender: the room is not lost.
    #[test]
    fn a_permit_dropped_unused_wakes_the_next_waiting_sender() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(1);
            let permit = tx.reserve().await.expect("room for one");
            let tx2 = tx.clone();
            let waiting = tokio::spawn(async move { tx2.send(7).await.is_ok() });
            tokio::task::yield_now().await;
            assert_eq!(rx.chan.state().waiting, 1, "the permit's room is taken");
            drop(permit);
            assert!(waiting.await.unwrap());
            assert_eq!(rx.recv().await, Some(7));
        });
    }

    /// Permits taken while a capped queue is under its weight do not let their items past it
    /// together: each is held to the weight when it is used, so at most one item goes past
    /// the cap (as with `try_send`), the rest handed back to wait again.
    #[test]
    fn permits_hold_their_items_to_the_weight_cap() {
        runtime().block_on(async {
            let (tx, mut rx) = capped::<String>(4, 10, String::len);
            let mut permits = Vec::new();
            for _ in 0..4 {
                permits.push(tx.reserve().await.expect("room under the cap"));
            }
            let mut queued = 0;
            for p in permits {
                match p.send("x".repeat(100)) {
                    Ok(()) => queued += 1,
                    Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Closed(_)) => panic!("open"),
                }
            }
            assert_eq!(queued, 1, "one heavy item past the cap, not four");
            assert_eq!(tx.weight(), 100);
            assert_eq!(rx.chan.state().reserved, 0);
            assert_eq!(rx.try_recv().map(|s| s.len()), Ok(100));
            let p = tx.reserve().await.expect("room again");
            assert!(p.send("y".repeat(100)).is_ok(), "an empty queue takes it");
        });
    }

    #[test]
    fn every_waiting_sender_gets_in_as_room_is_made_and_a_cancelled_one_is_no_longer_counted() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(1);
            assert!(tx.try_send(0).is_ok());
            let waiting: Vec<_> = (1..=3)
                .map(|n| {
                    let tx = tx.clone();
                    tokio::spawn(async move { tx.send(n).await.is_ok() })
                })
                .collect();
            let cancelled = {
                let tx = tx.clone();
                tokio::spawn(async move { tx.send(99).await.is_ok() })
            };
            tokio::task::yield_now().await;
            assert_eq!(rx.chan.state().waiting, 4);
            cancelled.abort();
            assert!(cancelled.await.is_err(), "cancelled while waiting");
            assert_eq!(rx.chan.state().waiting, 3);
            let mut got = Vec::new();
            for _ in 0..4 {
                got.push(rx.recv().await.unwrap());
            }
            got.sort_unstable();
            assert_eq!(got, vec![0, 1, 2, 3], "nothing of the cancelled sender");
            for w in waiting {
                assert!(w.await.unwrap());
            }
        });
    }

    #[test]
    fn receiving_ends_once_every_sender_is_gone_and_everything_was_received() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<u32>(4);
            let weak = tx.downgrade();
            let waiter = tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(x) = rx.recv().await {
                    seen.push(x);
                }
                seen
            });
            tokio::task::yield_now().await;
            assert!(weak.upgrade().is_some_and(|t| t.try_send(1).is_ok()));
            tokio::task::yield_now().await;
            assert!(tx.try_send(2).is_ok());
            drop(tx);
            assert!(weak.upgrade().is_none(), "a weak sender does not reopen it");
            assert_eq!(waiter.await.unwrap(), vec![1, 2]);
        });
    }

    #[test]
    fn a_closed_or_dropped_receiver_refuses_items_and_drops_what_it_held() {
        runtime().block_on(async {
            let (tx, mut rx) = channel::<Arc<()>>(1);
            let held = Arc::new(());
            assert!(tx.try_send(held.clone()).is_ok());
            let tx2 = tx.clone();
            let waiting = tokio::spawn(async move { tx2.send(Arc::new(())).await.is_err() });
            tokio::task::yield_now().await;
            rx.close();
            assert!(waiting.await.unwrap(), "a waiting send fails on close");
            assert!(matches!(
                tx.try_send(Arc::new(())),
                Err(TrySendError::Closed(_))
            ));
            assert!(tx.is_closed());
            assert_eq!(Arc::strong_count(&held), 2, "still queued after close");
            drop(rx);
            assert_eq!(Arc::strong_count(&held), 1, "dropped with the receiver");
        });
    }

    /// A send racing the receiver's registration is never lost. Ping-pong between a thread
    /// and a runtime task: each item is sent only once the previous one was received, so no
    /// later send could rescue a missed wake-up (the timeout turns it into a failure). Then
    /// four threads at once through a small queue (senders also wait for room): every item
    /// arrives, each sender's in its order.
    #[test]
    fn no_wake_up_is_lost_between_threads() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let within = std::time::Duration::from_secs(60);
        rt.block_on(async {
            const ROUNDS: u32 = 50_000;
            let (tx, mut rx) = channel::<u32>(1);
            let (back_tx, back_rx) = std::sync::mpsc::channel::<u32>();
            let pinger = std::thread::spawn(move || {
                for n in 0..ROUNDS {
                    assert!(tx.try_send(n).is_ok(), "the previous one was taken");
                    if back_rx.recv_timeout(within) != Ok(n) {
                        return false;
                    }
                }
                true
            });
            let pong = tokio::time::timeout(within, async {
                while let Some(n) = rx.recv().await {
                    let _ = back_tx.send(n);
                }
            });
            assert!(pong.await.is_ok(), "a wake-up was lost");
            assert!(pinger.join().unwrap(), "every item came back");
        });
        rt.block_on(async {
            const EACH: u32 = 5_000;
            let (tx, mut rx) = channel::<(u32, u32)>(3);
            for sender in 0..4u32 {
                let (tx, handle) = (tx.clone(), tokio::runtime::Handle::current());
                std::thread::spawn(move || {
                    for n in 0..EACH {
                        if let Err(TrySendError::Full(item)) = tx.try_send((sender, n)) {
                            handle.block_on(tx.send(item)).unwrap();
                        }
                    }
                });
            }
            drop(tx);
            let received = tokio::time::timeout(within, async {
                let mut next = [0u32; 4];
                while let Some((sender, n)) = rx.recv().await {
                    let slot = &mut next[sender as usize];
                    assert_eq!(n, *slot, "one sender's items in order");
                    *slot += 1;
                }
                next
            })
            .await
            .expect("a wake-up was lost");
            assert_eq!(received, [EACH; 4]);
        });
    }
}
