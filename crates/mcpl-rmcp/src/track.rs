//! The bridge's hold on rmcp's work per request: a [`Slot`] in a connection's counts, a
//! [`Cancel`] to fire a handler's cancellation token; and the [`DropLog`] of what it drops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcpl::throttle::Throttle;

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

/// Why a notification of the host's was dropped; each reason's warnings are throttled on
/// their own.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dropped {
    /// [`crate::MAX_NOTIFICATIONS_IN_FLIGHT`] handlers were running.
    OverLimit,
    /// No rmcp service ran (before `initialize`, or after it ended), or [`crate::QUEUE`] was full.
    NotHanded,
    /// rmcp's types could not read it.
    Unreadable,
}

/// The warnings for dropped notifications: at most one line per
/// [`mcpl::transport::listen::REPORT_INTERVAL`] per [`Dropped`] reason, the next one
/// counting those not shown, so a flood makes a bounded number of lines.
#[derive(Debug)]
pub(crate) struct DropLog(Mutex<[Throttle; 3]>);

impl Default for DropLog {
    fn default() -> Self {
        DropLog(Mutex::new(std::array::from_fn(|_| {
            Throttle::new(mcpl::transport::listen::REPORT_INTERVAL)
        })))
    }
}

impl DropLog {
    /// Warns `line` for `why`, unless one was said for it within the interval (counted).
    pub(crate) fn warn(&self, why: Dropped, line: impl FnOnce() -> String) {
        let said = lock(&self.0)
            .get_mut(why as usize)
            .and_then(|t| t.line(line));
        if let Some(line) = said {
            tracing::warn!("{line}");
        }
    }
}
