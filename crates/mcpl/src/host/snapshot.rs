//! The state the session's getters and its direct send path read: published by the driver
//! alone, after each input and before that input's outputs are carried out.

use std::cell::RefCell;

use super::*;

/// One published view of the [`HostState`].
#[derive(Debug)]
pub(super) struct Snapshot {
    pub(super) mode: Mode,
    pub(super) ready: bool,
    pub(super) grant: Grant,
    /// Shared with the state machine; a new receipt is a different one (compared by
    /// identity: by value, a receipt of megabytes was compared after every input).
    pub(super) last_receipt: Option<Arc<Receipt>>,
    /// Shared with the state machine until it changes the review (copy on write).
    pub(super) review: Option<Arc<ManifestReview>>,
    /// Shared between snapshots until a channel message changes it.
    pub(super) channels: Arc<ChannelTable>,
    pub(super) input_ended: bool,
}

impl Snapshot {
    pub(super) fn of(st: &HostState) -> Snapshot {
        Snapshot {
            mode: st.mode().clone(),
            ready: st.is_ready(),
            grant: st.grant(),
            last_receipt: st.last_receipt_shared().cloned(),
            review: st.review_shared().cloned(),
            channels: Arc::new(st.channels().clone()),
            input_ended: st.input_ended(),
        }
    }
}

/// Whether two receipts are the same one (identity; the state machine makes a new one for
/// each receipt it reads).
fn same_receipt(a: Option<&Arc<Receipt>>, b: Option<&Arc<Receipt>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

fn lock(m: &Mutex<Arc<Snapshot>>) -> std::sync::MutexGuard<'_, Arc<Snapshot>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The snapshots this thread holds ([`Shared::snapshot_held`]), by session (the address
    /// of its [`Shared`]): at most one per session, a few in all.
    static HELD: RefCell<Vec<(usize, Arc<Snapshot>)>> = const { RefCell::new(Vec::new()) };
}

/// A snapshot held ([`Shared::snapshot_held`]); letting it go lets [`Shared::publish`] on.
pub(super) struct Held<'a> {
    guard: std::sync::MutexGuard<'a, Arc<Snapshot>>,
    key: usize,
}

impl std::ops::Deref for Held<'_> {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let key = self.key;
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|(k, _)| *k == key) {
                h.swap_remove(i);
            }
        });
    }
}

impl Shared {
    /// This session's key in [`HELD`].
    fn key(&self) -> usize {
        self as *const Shared as usize
    }

    /// The snapshot published last. On a thread holding it ([`Self::snapshot_held`]: a
    /// `Tap` run by the session's own send, which the peer taps inline) it is the one held,
    /// read without waiting: the lock is not reentrant, and waiting for it there waited for
    /// ever (a getter called from the tap hung the send and its thread). It is the state the
    /// send in progress was decided under, and the one in force until it is let go.
    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        let key = self.key();
        let held = HELD
            .try_with(|h| {
                h.borrow()
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == key)
                    .map(|(_, s)| s.clone())
            })
            .ok()
            .flatten();
        held.unwrap_or_else(|| lock(&self.snapshot).clone())
    }

    /// The snapshot published last, held: [`Self::publish`] waits until it is let go. A
    /// send decided against it and put on the wire while it is held cannot follow a frame
    /// the driver sends after publishing the next one (`HostSession::gated_now`, §6.7).
    /// While held, this thread's [`Self::snapshot`] reads it without the lock.
    pub(super) fn snapshot_held(&self) -> Held<'_> {
        let guard = lock(&self.snapshot);
        let key = self.key();
        let _ = HELD.try_with(|h| h.borrow_mut().push((key, guard.clone())));
        Held { guard, key }
    }

    /// Publishes `st` when it differs from what was published. The review is shared, never
    /// copied here (the state machine copies it before changing one that is published, so
    /// a changed review is a different one); the channel table is copied when `channels`
    /// says a channel message was read.
    pub(super) fn publish(&self, st: &HostState, channels: bool) {
        let cur = self.snapshot();
        let same_review = match (&cur.review, st.review_shared()) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let unchanged = same_review
            && !channels
            && cur.mode == *st.mode()
            && cur.ready == st.is_ready()
            && cur.grant == st.grant()
            && same_receipt(cur.last_receipt.as_ref(), st.last_receipt_shared())
            && cur.input_ended == st.input_ended();
        if unchanged {
            return;
        }
        let next = Snapshot {
            mode: st.mode().clone(),
            ready: st.is_ready(),
            grant: st.grant(),
            last_receipt: st.last_receipt_shared().cloned(),
            review: st.review_shared().cloned(),
            channels: if channels {
                Arc::new(st.channels().clone())
            } else {
                cur.channels.clone()
            },
            input_ended: st.input_ended(),
        };
        *lock(&self.snapshot) = Arc::new(next);
    }
}
