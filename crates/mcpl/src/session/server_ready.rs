//! The moments a server application is told the session became ready (§5.3): after every
//! accepted policy Request's receipt (`ServerBuilder::on_ready`), and the first of them on a
//! connection (`on_first_ready`). Part of [`ServerState`](super::ServerState), which
//! `server::Server` drives.

/// Whether a connection has had its first ready moment.
#[derive(Debug, Default)]
pub(crate) struct ReadyMoments {
    told: bool,
}

impl ReadyMoments {
    /// A policy Request was accepted and its receipt written: returns whether this is the
    /// connection's first ready moment. Reading (§5.3 names only the first Request as the
    /// one that makes the session ready): a refused Request (§6.7) is no ready moment, and
    /// the first accepted one after a refusal is still the first.
    pub(crate) fn accepted(&mut self) -> bool {
        !std::mem::replace(&mut self.told, true)
    }
}
