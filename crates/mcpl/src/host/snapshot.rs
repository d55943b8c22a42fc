//! The state the session's getters and its direct send path read: published by the driver
//! alone, after each input and before that input's outputs are carried out.

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A snapshot held ([`Shared::snapshot_held`]); letting it go lets [`Shared::publish`] on.
pub(super) struct Held<'a> {
    _gate: std::sync::MutexGuard<'a, ()>,
    snap: Arc<Snapshot>,
}

impl std::ops::Deref for Held<'_> {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.snap
    }
}

impl Shared {
    /// The snapshot published last. Never waits for a send holding it
    /// ([`Self::snapshot_held`]): the published one is behind its own lock, taken only to
    /// clone it, so a getter called from a `Tap` reads it whatever thread holds what. While
    /// a snapshot is held it is the one published ([`Self::publish`] waits for the hold),
    /// so a `Tap` run by the session's own send reads the state that send was gated under.
    /// Before, one lock was both: a getter from the tap of the send holding it waited for
    /// ever on its own thread, and one from a tap run under the connection's writer lock on
    /// another thread waited for a hold that waited for that writer lock (both stopped).
    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        lock(&self.snapshot).clone()
    }

    /// The snapshot published last, held: [`Self::publish`] waits until it is let go. A
    /// send decided against it and put on the wire while it is held cannot follow a frame
    /// the driver sends after publishing the next one (`HostSession::gated_now`, §6.7).
    pub(super) fn snapshot_held(&self) -> Held<'_> {
        let gate = lock(&self.gate);
        let snap = self.snapshot();
        Held { _gate: gate, snap }
    }

    /// Publishes `st` when it differs from what was published. The review is shared, never
    /// copied here (the state machine copies it before changing one that is published, so
    /// a changed review is a different one); the channel table is copied when `channels`
    /// says a channel message was read.
    pub(super) fn publish(&self, st: &HostState, channels: bool) {
        // A send holding the published state is on the wire before the driver goes on, as
        // when the one lock was both (§6.7).
        let _gate = lock(&self.gate);
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
