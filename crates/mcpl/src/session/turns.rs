//! Lifecycle turns (§10.5) over plain data: which inference ids have a turn (or an
//! outgoing stream, §14.3) open or recently ended, and the terminal phases.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use crate::own_keys::OwnKeys;

/// How a turn ended (§10.5 terminal phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// `completed`.
    Completed,
    /// `aborted`.
    Aborted,
    /// `failed`.
    Failed,
}

impl Terminal {
    /// The wire value of the phase.
    pub fn as_str(self) -> &'static str {
        match self {
            Terminal::Completed => "completed",
            Terminal::Aborted => "aborted",
            Terminal::Failed => "failed",
        }
    }
}

/// How many ended outgoing streams (and, separately, ended lifecycle turns) a session
/// remembers, to refuse restarting one.
pub const ENDED_IDS_REMEMBERED: usize = 4096;

/// The inference ids a session's outgoing streams, or its lifecycle turns, were started for.
/// Streams (§14.3): `index` is one counter per `inferenceId`, and each channel gets one
/// `complete`; a second stream for the same inference would restart the index at 0 and
/// complete its channels again. Turns (§10.5): one terminal per `started`; a second turn for
/// the same inference would send a second `started` and a second terminal. Either is refused
/// while the first is open and for the last [`ENDED_IDS_REMEMBERED`] ended ones.
/// Each id is held once (`Arc<str>`), shared by the sets it is in and by the caller's
/// open-turn map ([`Self::claim`]). The ids are the host application's, never the peer's:
/// the sets hash with [`OwnKeys`].
#[derive(Debug, Default)]
pub(crate) struct InferenceIds {
    pub(crate) live: HashSet<Arc<str>, OwnKeys>,
    pub(crate) ended: HashSet<Arc<str>, OwnKeys>,
    pub(crate) ended_order: VecDeque<Arc<str>>,
}

impl InferenceIds {
    /// Whether `inference_id` is open or remembered as ended (a new one for it is refused).
    pub(crate) fn knows(&self, inference_id: &str) -> bool {
        self.live.contains(inference_id) || self.ended.contains(inference_id)
    }

    /// Claims `inference_id` for a new stream; `false` if it is open or remembered as ended.
    pub(crate) fn start(&mut self, inference_id: &str) -> bool {
        !self.knows(inference_id) && self.claim(Arc::from(inference_id))
    }

    /// [`Self::start`] for an id the caller already holds as an `Arc<str>` (kept, not copied).
    pub(crate) fn claim(&mut self, inference_id: Arc<str>) -> bool {
        if self.knows(&inference_id) {
            return false;
        }
        self.live.insert(inference_id);
        true
    }

    /// Moves `inference_id` from open to ended, forgetting the oldest ended id past the bound.
    pub(crate) fn end(&mut self, inference_id: &str) {
        // The open id's own string moves on, shared by the set and the order.
        let Some(id) = self.live.take(inference_id) else {
            return;
        };
        self.ended.insert(id.clone());
        self.ended_order.push_back(id);
        while self.ended_order.len() > ENDED_IDS_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}
