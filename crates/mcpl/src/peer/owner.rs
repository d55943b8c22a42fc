//! What a session owning a connection sets on its peer and asks of it: the owner's gate
//! on the public send and answer paths, answers to cancels, the weight of answers made
//! outside the peer, and the buffers a session reuses.

use super::*;

/// The bytes of an answer made outside the peer (a handler's, on its way to the driver that
/// sends it), counted among the bytes in flight ([`PeerConfig::max_in_flight_bytes`]) until
/// dropped: a request arriving meanwhile is weighed against them.
pub(crate) struct AnswerWeight(Arc<Shared>, usize);

impl Drop for AnswerWeight {
    fn drop(&mut self) {
        self.0.owed_bytes.fetch_sub(self.1, Ordering::Relaxed);
    }
}

impl Peer {
    /// Marks the connection as owned by a session whose `gate` decides which methods the
    /// public send methods of every handle (clones made before included) refuse, with
    /// [`PeerError::OwnedBySession`] naming the session method to use ([`OwnerGate`]). Set
    /// once; a second owner's gate is ignored.
    pub(crate) fn owned_by_session(&self, gate: OwnerGate) {
        let _ = self.shared().owner_gate.set(gate);
    }

    /// Marks the connection as owned by a session that answers a request of the other
    /// side's its sender cancels (MCP `notifications/cancelled`) with `-32800` when it
    /// handles the cancel, in wire order (`server::Server`, `host::HostSession`): the cancel
    /// is then that request's answer, so it frees the request's id for its sender at once
    /// (`serving`), and a request reusing the id right after the cancel is taken. Without
    /// it the id stays in flight until the request's own answer is written.
    pub(crate) fn answers_cancels(&self) {
        self.shared().answers_cancels.store(true, Ordering::Relaxed);
    }

    /// Whether this thread is running this connection's tap ([`PeerError::SentFromTap`]):
    /// a session refuses its own sends there before taking its locks.
    pub(crate) fn in_own_tap(&self) -> bool {
        self.shared().in_own_tap()
    }

    /// The public send paths' check ([`Self::owned_by_session`]): `Err` when the session
    /// owning this connection sends `method` itself.
    pub(super) fn public_send(&self, method: &str, notification: bool) -> Result<(), PeerError> {
        match self
            .shared()
            .owner_gate
            .get()
            .and_then(|g| g(method, notification))
        {
            Some(instead) => Err(PeerError::OwnedBySession {
                method: method.to_owned(),
                instead,
            }),
            None => Ok(()),
        }
    }

    /// The public answer-by-id paths' check ([`Self::owned_by_session`]): a session owning
    /// the connection answers every request it is sent through its own paths, so an answer
    /// by id through a handle is refused.
    pub(super) fn public_answer(&self, id: &RequestId) -> Result<(), PeerError> {
        match self.shared().owner_gate.get() {
            Some(_) => Err(PeerError::AnswerOwnedBySession { id: id.to_string() }),
            None => Ok(()),
        }
    }

    /// Counts an answer of `bytes` made and not yet sent among the bytes in flight, until
    /// the guard is dropped ([`AnswerWeight`]).
    pub(crate) fn weigh_answer(&self, bytes: usize) -> AnswerWeight {
        let shared = self.shared();
        shared.owed_bytes.fetch_add(bytes, Ordering::Relaxed);
        AnswerWeight(shared.clone(), bytes)
    }

    /// Takes the params out of `call` (a `tools/call`'s, read into their type by this peer's
    /// reader) and keeps the box for the next such request's.
    pub(crate) fn give_back_call(&self, mut call: Box<ToolsCallParams>) -> ToolsCallParams {
        let params = std::mem::replace(&mut *call, ToolsCallParams::new(String::new()));
        *lock(&self.shared().spare_call) = Some(call);
        params
    }

    /// An empty buffer to encode an answer's line into (the last directly written frame's,
    /// when one was kept): a session answering through this peer reuses it.
    pub(crate) fn frame_buffer(&self) -> Vec<u8> {
        self.shared().frame_buffer()
    }
}
