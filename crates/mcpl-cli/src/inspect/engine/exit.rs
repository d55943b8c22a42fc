//! A spawned server's exit closes its connection ([`Engine::close_at_exit`]).

use std::sync::Arc;

use mcpl::peer::Peer;
use tokio::sync::broadcast;

use super::{Engine, Phase};

impl Engine {
    /// A spawned server that exits can read no answer: its connection closes then, once
    /// what it wrote before is read (its output ended) and each request it sent has reached
    /// the user (or was answered), not at the end of the drain after its EOF, which waits
    /// for the user's answers ([`super::PENDING_TIMEOUT`]). The hand-over is bounded by the
    /// session's `--timeout`. Nothing for a dialled server.
    pub(super) fn close_at_exit(&self, generation: u64, peer: &Peer) {
        let Some(child) = self.state().child.clone() else {
            return;
        };
        let peer = peer.clone();
        let weak = Arc::downgrade(&self.inner);
        let mut changes = self.subscribe();
        let bound = self.inner.settings.timeout;
        tokio::spawn(async move {
            let _ = child.wait().await;
            let settled = async {
                loop {
                    let Some(inner) = weak.upgrade() else { return };
                    let (now, phase, waiting) = Engine { inner }.generation_and_phase(generation);
                    let read_all = matches!(phase, Phase::Ended | Phase::Closed);
                    if now != generation || (read_all && peer.requests_in_flight() <= waiting) {
                        return;
                    }
                    // Each change of the state (the end, a request parked) is a message.
                    if let Err(broadcast::error::RecvError::Closed) = changes.recv().await {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(bound, settled).await;
            peer.close();
        });
    }

    /// The current connection's generation and phase, and how many requests of connection
    /// `generation` wait for the user.
    fn generation_and_phase(&self, generation: u64) -> (u64, Phase, usize) {
        let st = self.state();
        let waiting = st
            .pending
            .values()
            .filter(|p| p.generation == generation)
            .count();
        (st.generation, st.phase, waiting)
    }
}
