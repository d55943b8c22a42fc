//! The channel behind [`Diagnostics`](super::Diagnostics): a bounded broadcast queue that
//! grows with what it holds (issue #24). `tokio::sync::broadcast` allocates all of its
//! slots up front (256 slots, ≈ 28 KiB per connection before a single diagnostic); this one
//! holds nothing until a diagnostic is sent and frees each entry once every receiver has
//! read it. The semantics are `broadcast`'s: every receiver sees every diagnostic sent after
//! it subscribed, at most `capacity` are kept, a receiver that fell further behind gets the
//! count of what it lost once (then the oldest kept), and receiving ends with `None` once the
//! sender is gone and everything was read.
//!
//! Beside its receivers, the channel can have one forwarder ([`Sender::forward`]): a function
//! called with each diagnostic as it is sent, in order, where a task reading a receiver
//! would cost a task per connection (a host session passes the connection's diagnostics on
//! to its own stream this way).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::errors::Diagnostic;
use super::shared::lock;

struct Entry {
    diagnostic: Diagnostic,
    /// Receivers that have not read it yet.
    unread: usize,
}

/// Called with each diagnostic as it is sent (under the channel's lock, so in send order;
/// it must not send to this channel), and the received frame whose reading raised it
/// ([`ReadingAt`]), when the reader raised it while taking one.
pub(super) type Forward = Box<dyn Fn(Diagnostic, Option<ReadingAt>) + Send + Sync>;

/// The received frame the reader was taking when it raised a diagnostic: its number
/// ([`super::TapEvent::frame`]) and, in a batch, the index of the entry (JSON-RPC 2.0 §6).
pub(crate) type ReadingAt = (u64, Option<usize>);

struct State {
    entries: VecDeque<Entry>,
    forward: Option<Forward>,
    /// Sequence number of `entries[0]`.
    first: u64,
    receivers: usize,
    closed: bool,
}

struct Chan {
    state: Mutex<State>,
    ready: Notify,
    capacity: usize,
}

/// The sending side; dropping it ends the stream for every receiver.
pub(super) struct Sender {
    chan: Arc<Chan>,
}

/// One receiver: its position in the stream.
pub(super) struct Receiver {
    chan: Arc<Chan>,
    next: u64,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("next", &self.next)
            .finish()
    }
}

/// A channel keeping at most `capacity` (at least 1) diagnostics, and its first receiver.
pub(super) fn channel(capacity: usize) -> (Sender, Receiver) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            entries: VecDeque::new(),
            forward: None,
            first: 0,
            receivers: 1,
            closed: false,
        }),
        ready: Notify::new(),
        capacity: capacity.max(1),
    });
    let rx = Receiver {
        chan: chan.clone(),
        next: 0,
    };
    (Sender { chan }, rx)
}

impl Sender {
    /// Sends `d` to every receiver; with none, it is dropped (as `broadcast::Sender::send`).
    pub(super) fn send(&self, d: Diagnostic) {
        self.send_at(d, None);
    }

    /// [`Sender::send`], the forwarder told the frame the reader was taking (`at`).
    pub(super) fn send_at(&self, d: Diagnostic, at: Option<ReadingAt>) {
        {
            let mut st = lock(&self.chan.state);
            if st.receivers == 0 {
                if let Some(f) = &st.forward {
                    f(d, at);
                }
                return;
            }
            if let Some(f) = &st.forward {
                f(d.clone(), at);
            }
            if st.entries.len() == self.chan.capacity {
                // The oldest is lost for whoever has not read it (`Dropped` counts it).
                st.entries.pop_front();
                st.first += 1;
            }
            let unread = st.receivers;
            st.entries.push_back(Entry {
                diagnostic: d,
                unread,
            });
        }
        self.chan.ready.notify_waiters();
    }

    /// A receiver of what is sent from now on.
    pub(super) fn subscribe(&self) -> Receiver {
        let mut st = lock(&self.chan.state);
        st.receivers += 1;
        let next = st.first + st.entries.len() as u64;
        Receiver {
            chan: self.chan.clone(),
            next,
        }
    }
}

impl Sender {
    /// Has `f` called with every diagnostic from now on, in send order, after those `first`
    /// (a receiver, typically the one made with the channel) has not read yet, which are
    /// passed to `f` here and no longer kept for it. Replaces an earlier forwarder.
    pub(super) fn forward(&self, f: Forward, mut first: Option<Receiver>) {
        let mut st = lock(&self.chan.state);
        if let Some(rx) = &mut first {
            // Read back from the queue: which frame raised each is no longer known.
            while let Next::Item(d) = take_next_locked(&mut st, &mut rx.next) {
                f(d, None);
            }
        }
        st.forward = Some(f);
        drop(st);
        // Dropped unlocked (its drop takes the lock): everything it could read was
        // forwarded, and what is sent from here on is too.
        drop(first);
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        lock(&self.chan.state).closed = true;
        self.chan.ready.notify_waiters();
    }
}

/// What a receive found.
enum Next {
    Item(Diagnostic),
    Empty,
    Closed,
}

/// What receiver position `next` of `chan` finds, moving past it.
fn take_next(chan: &Chan, next: &mut u64) -> Next {
    take_next_locked(&mut lock(&chan.state), next)
}

/// [`take_next`] with the channel's state already locked.
fn take_next_locked(st: &mut State, next: &mut u64) -> Next {
    if *next < st.first {
        let count = st.first - *next;
        *next = st.first;
        return Next::Item(Diagnostic::Dropped { count });
    }
    let Ok(i) = usize::try_from(*next - st.first) else {
        return Next::Empty;
    };
    let Some(entry) = st.entries.get_mut(i) else {
        return if st.closed { Next::Closed } else { Next::Empty };
    };
    entry.unread = entry.unread.saturating_sub(1);
    let d = entry.diagnostic.clone();
    *next += 1;
    trim(st);
    Next::Item(d)
}

impl Receiver {
    /// The next diagnostic (or the count of those lost), `None` once the sender is gone
    /// and everything was read.
    pub(super) async fn recv(&mut self) -> Option<Diagnostic> {
        loop {
            let notified = self.chan.ready.notified();
            tokio::pin!(notified);
            // Registered before looking, so a send in between is not missed.
            notified.as_mut().enable();
            match take_next(&self.chan, &mut self.next) {
                Next::Item(d) => return Some(d),
                Next::Closed => return None,
                Next::Empty => notified.await,
            }
        }
    }

    /// The next diagnostic if one is ready, without waiting.
    pub(super) fn try_recv(&mut self) -> Option<Diagnostic> {
        match take_next(&self.chan, &mut self.next) {
            Next::Item(d) => Some(d),
            Next::Empty | Next::Closed => None,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut st = lock(&self.chan.state);
        st.receivers = st.receivers.saturating_sub(1);
        let from = usize::try_from(self.next.saturating_sub(st.first)).unwrap_or(usize::MAX);
        for e in st.entries.iter_mut().skip(from) {
            e.unread = e.unread.saturating_sub(1);
        }
        trim(&mut st);
    }
}

/// Frees the entries every receiver has read (they are all at the front).
fn trim(st: &mut State) {
    while st.entries.front().is_some_and(|e| e.unread == 0) {
        st.entries.pop_front();
        st.first += 1;
    }
    if st.entries.is_empty() && st.entries.capacity() > 16 {
        st.entries.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u64) -> Diagnostic {
        Diagnostic::LateResponse {
            id: crate::jsonrpc::RequestId::Number(n.into()),
        }
    }

    fn id_of(d: Option<Diagnostic>) -> Option<String> {
        d.map(|d| d.to_string())
    }

    #[test]
    fn every_receiver_sees_what_was_sent_after_it_subscribed() {
        let (tx, mut first) = channel(4);
        tx.send(d(1));
        let mut later = tx.subscribe();
        tx.send(d(2));
        assert_eq!(id_of(first.try_recv()), id_of(Some(d(1))));
        assert_eq!(id_of(first.try_recv()), id_of(Some(d(2))));
        assert_eq!(id_of(later.try_recv()), id_of(Some(d(2))));
        assert!(first.try_recv().is_none() && later.try_recv().is_none());
    }

    #[test]
    fn a_receiver_that_fell_behind_gets_the_count_lost_then_the_oldest_kept() {
        let (tx, mut rx) = channel(2);
        for n in 1..=5 {
            tx.send(d(n));
        }
        assert!(matches!(
            rx.try_recv(),
            Some(Diagnostic::Dropped { count: 3 })
        ));
        assert_eq!(id_of(rx.try_recv()), id_of(Some(d(4))));
        assert_eq!(id_of(rx.try_recv()), id_of(Some(d(5))));
        assert!(rx.try_recv().is_none());
    }

    #[test]
    fn entries_are_freed_once_read_by_all_and_nothing_is_kept_without_receivers() {
        let (tx, mut a) = channel(8);
        let b = tx.subscribe();
        tx.send(d(1));
        assert!(a.try_recv().is_some());
        assert_eq!(lock(&tx.chan.state).entries.len(), 1, "b has not read it");
        drop(b);
        assert_eq!(lock(&tx.chan.state).entries.len(), 0);
        drop(a);
        tx.send(d(2));
        assert_eq!(lock(&tx.chan.state).entries.len(), 0);
    }

    #[test]
    fn a_forwarder_gets_what_the_first_receiver_had_not_read_then_every_later_one_in_order() {
        let (tx, mut first) = channel(8);
        tx.send(d(1));
        tx.send(d(2));
        assert_eq!(id_of(first.try_recv()), id_of(Some(d(1))));
        let mut other = tx.subscribe();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        tx.forward(
            Box::new(move |x, _| lock(&sink).push(x.to_string())),
            Some(first),
        );
        tx.send(d(3));
        assert_eq!(*lock(&seen), vec![d(2).to_string(), d(3).to_string()]);
        assert_eq!(
            id_of(other.try_recv()),
            id_of(Some(d(3))),
            "receivers still see it"
        );
        assert!(other.try_recv().is_none());
        drop(other);
        tx.send(d(4));
        assert_eq!(lock(&seen).len(), 3, "forwarded without any receiver");
        assert_eq!(lock(&tx.chan.state).entries.len(), 0, "and nothing kept");
    }

    #[test]
    fn receiving_ends_once_the_sender_is_gone_and_everything_was_read() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, mut rx) = channel(4);
            let waiter = tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(x) = rx.recv().await {
                    seen.push(x.to_string());
                }
                seen
            });
            tokio::task::yield_now().await;
            tx.send(d(1));
            tokio::task::yield_now().await;
            tx.send(d(2));
            drop(tx);
            let seen = waiter.await.unwrap();
            assert_eq!(seen, vec![d(1).to_string(), d(2).to_string()]);
        });
    }
}
