//! A waiting request's place in the engine's list, freed when the library stops its
//! handler ([`Parked`]).

use std::sync::Weak;

use super::{Engine, Inner};

/// A waiting request's place in [`super::State::pending`], held by its handler: when the library
/// stops the handler before an answer (a server's `notifications/cancelled`, the session's
/// `answer_timeout`, the connection's end), the request was shown waiting and answerable
/// for up to [`super::PENDING_TIMEOUT`], a [`super::MAX_PENDING`] slot taken; now it leaves the list, noted
/// in the log. Answered or timed out, it is already gone and nothing is noted.
pub(super) struct Parked {
    pub(super) engine: Weak<Inner>,
    pub(super) id: u64,
    pub(super) method: String,
}

impl Drop for Parked {
    fn drop(&mut self) {
        let Some(inner) = self.engine.upgrade() else {
            return;
        };
        let e = Engine { inner };
        let Some(p) = e.state().pending.remove(&self.id) else {
            return;
        };
        e.note(format!(
            "connection {}: request {} ({}) no longer waits: the host stopped its handler \
             (cancelled by the server, answered by the session's deadline, or its connection \
             ended)",
            p.generation, self.id, self.method
        ));
        e.changed();
    }
}
