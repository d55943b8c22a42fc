//! Per-connection application state with one shared [`Server`]
//! ([`ServerBuilder::connection_state`], [`Session::state`]).
//!
//! A [`Server`] is built once and serves every connection: its manifest tracker, handlers
//! and tool registry are shared, so an idle connection costs only its own session (issue
//! #20: a whole `Server` per connection cost ≈ 34 KiB each). What belongs to one connection
//! goes in the state registered here: made on the connection's first [`Session::state`]
//! call (an idle connection never makes it), dropped when the connection ends.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

use super::lock;

/// Makes one connection's state ([`ServerBuilder::connection_state`]).
pub(super) type StateFactory = Arc<dyn Fn() -> Arc<dyn Any + Send + Sync> + Send + Sync>;

/// The registered state type and its factory.
#[derive(Clone)]
pub(super) struct StateSpec {
    pub(super) type_id: TypeId,
    pub(super) type_name: &'static str,
    pub(super) make: StateFactory,
}

impl StateSpec {
    pub(super) fn new<T, F>(make: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn() -> T + Send + Sync + 'static,
    {
        StateSpec {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
            make: Arc::new(move || Arc::new(make()) as Arc<dyn Any + Send + Sync>),
        }
    }
}

enum Slot {
    /// Not asked for yet (an idle connection stays here: nothing allocated).
    Unmade,
    Made(Arc<dyn Any + Send + Sync>),
    /// The connection ended; the state was dropped and is not made again.
    Ended,
}

/// One connection's state slot.
pub(super) struct StateSlot(Mutex<Slot>);

impl StateSlot {
    pub(super) fn new() -> Self {
        StateSlot(Mutex::new(Slot::Unmade))
    }

    /// The connection's state as `T`, made by `spec` on the first call; `None` when `spec`
    /// is absent or of another type, or the connection has ended. The factory runs under
    /// the slot's lock, so two first calls racing make it once.
    pub(super) fn get<T: Send + Sync + 'static>(&self, spec: Option<&StateSpec>) -> Option<Arc<T>> {
        let spec = spec.filter(|s| s.type_id == TypeId::of::<T>())?;
        let mut slot = lock(&self.0);
        let state = match &*slot {
            Slot::Made(state) => state.clone(),
            Slot::Ended => return None,
            Slot::Unmade => {
                let state = (spec.make)();
                *slot = Slot::Made(state.clone());
                state
            }
        };
        drop(slot);
        state.downcast::<T>().ok()
    }

    /// Drops the state (outside the lock: its `Drop` may do anything) and refuses to make it
    /// again.
    pub(super) fn end(&self) {
        let old = std::mem::replace(&mut *lock(&self.0), Slot::Ended);
        drop(old);
    }
}
