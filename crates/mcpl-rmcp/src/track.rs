//! The bridge's hold on rmcp's work per request: a [`Slot`] in a connection's counts, and a
//! [`Cancel`] to fire a handler's cancellation token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::lock;

/// A place in one of a connection's counts of rmcp's work (`Shared::live`,
/// `Shared::notifying`), given back when the last clone is dropped. A request's rides in
/// its extensions and `Tracked` holds it while the handler's future for the request runs
/// (or it is dropped with a request never read); a notification's is taken by `Tracked`
/// for its handler's run.
#[derive(Clone)]
pub(crate) struct Slot {
    _count: Arc<SlotCount>,
}

impl Slot {
    /// A place in `live`, taken now.
    pub(crate) fn taken(live: &Arc<AtomicUsize>) -> Slot {
        live.fetch_add(1, Ordering::AcqRel);
        Slot {
            _count: Arc::new(SlotCount(live.clone())),
        }
    }

    /// A place in `live` if fewer than `limit` are taken.
    pub(crate) fn within(live: &Arc<AtomicUsize>, limit: usize) -> Option<Slot> {
        live.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()?;
        Some(Slot {
            _count: Arc::new(SlotCount(live.clone())),
        })
    }
}

/// A host request's way to its rmcp handler's cancellation token, which the bridge fires
/// itself when the host cancels the request: the `notifications/cancelled` handed to rmcp
/// may find [`crate::QUEUE`] full, and a cancel must not be lost with it (rmcp fires the token only
/// when it reads the notification). Rides in the request's extensions; `Tracked` hands it
/// the token when the handler starts.
#[derive(Clone, Default)]
pub(crate) struct Cancel(Arc<Mutex<CancelState>>);

/// Where a [`Cancel`] stands.
#[derive(Default)]
enum CancelState {
    /// Neither started nor cancelled.
    #[default]
    Waiting,
    /// Cancelled before its handler started: the token fires as it starts.
    Asked,
    /// The handler runs; this fires its token.
    Running(Box<dyn FnOnce() + Send>),
    /// Fired, or the handler ended.
    Done,
}

impl Cancel {
    /// The host cancelled the request: its handler's token fires now, or as it starts.
    pub(crate) fn fire(&self) {
        let mut state = lock(&self.0);
        match std::mem::replace(&mut *state, CancelState::Done) {
            CancelState::Waiting => *state = CancelState::Asked,
            CancelState::Running(fire) => {
                drop(state);
                fire();
            }
            CancelState::Asked | CancelState::Done => {}
        }
    }

    /// The handler starts; `fire` fires its token (now, if the host has cancelled already).
    pub(crate) fn started(&self, fire: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.0);
        match std::mem::replace(&mut *state, CancelState::Done) {
            CancelState::Waiting => *state = CancelState::Running(Box::new(fire)),
            CancelState::Asked => {
                drop(state);
                fire();
            }
            CancelState::Running(_) | CancelState::Done => {}
        }
    }

    /// The handler ended: nothing to fire any more.
    pub(crate) fn ended(&self) {
        *lock(&self.0) = CancelState::Done;
    }
}

/// One place in a count, given back on drop.
struct SlotCount(Arc<AtomicUsize>);

impl Drop for SlotCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
