//! How a [`ServerState`]'s connection ends: its deadlines ([`ServerState::poll_timeout`],
//! [`ServerState::handle_timeout`]), the host's end of output ([`ServerState::handle_eof`])
//! and the close ([`ServerState::handle_close`]).

use std::time::Instant;

use super::{ServerDiagnostic, ServerOutput, ServerState};
use crate::lifecycle::TurnEvent;

impl ServerState {
    /// The connection ended at `now`: every open turn ends (§10.5: no terminal can come
    /// now; [`LifecycleTracker::close_all`](crate::lifecycle::LifecycleTracker::close_all), as `server::Server` ends them) as
    /// [`ServerOutput::Turn`], and nothing in flight is tracked any longer. Each request
    /// the application sent through [`Self::request`] and still waiting ends unanswered,
    /// told by its id ([`ServerDiagnostic::RequestUnanswered`], `closed: true`), so its
    /// driver fails that caller. [`Self::handle_message`], [`Self::handle_timeout`] and
    /// [`Self::manifest_changed`] change nothing after it.
    pub fn handle_close(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        self.generation += 1;
        self.closed = true;
        for end in self.turns.close_all(now) {
            self.out
                .push_back(ServerOutput::Turn(TurnEvent::Ended(end)));
        }
        for id in self.pending.end_all() {
            self.out.push_back(ServerOutput::Diagnostic(
                ServerDiagnostic::RequestUnanswered { id, closed: true },
            ));
        }
        self.handed.clear();
        self.initializing = false;
        self.announce.clear();
        self.channels.forget_in_flight();
        self.inference = Default::default();
    }

    /// The host ended its output at `now` (EOF, a half-close): nothing more will be read,
    /// but the host may still read. The application is told once
    /// ([`ServerDiagnostic::InputEnded`]; [`Self::input_ended`] says it either way). Every
    /// request sent through [`Self::request`] and still waiting ends now, as nothing can
    /// answer it: a channel change among them settles unanswered (§14.5), a streaming
    /// `inference/request` takes no more chunks (§11.4), and each is told by its id after
    /// the `InputEnded` ([`ServerDiagnostic::RequestUnanswered`], `closed: false`), so its
    /// driver fails that caller.
    /// Every open turn ends (§10.5: no terminal can come now). The host's requests handed
    /// out are still answered ([`Self::answer`]), and notifications still sent, while a
    /// request is refused from then on ([`SendRefusal::InputEnded`](super::SendRefusal::InputEnded)). After
    /// [`Self::handle_close`], or a second time, it does nothing.
    pub fn handle_eof(&mut self, now: Instant) {
        if self.closed || self.input_ended {
            return;
        }
        self.input_ended = true;
        // The channels the host accepted may change (§14.5).
        self.generation += 1;
        self.out
            .push_back(ServerOutput::Diagnostic(ServerDiagnostic::InputEnded));
        for id in self.pending.end_all() {
            self.channels.gave_up(id);
            self.inference.ended(id);
            self.out.push_back(ServerOutput::Diagnostic(
                ServerDiagnostic::RequestUnanswered { id, closed: false },
            ));
        }
        for end in self.turns.close_all(now) {
            self.out
                .push_back(ServerOutput::Turn(TurnEvent::Ended(end)));
        }
    }

    /// The application no longer waits for request `id` ([`Self::request`]'s) before its
    /// answer came (its caller went away): forgotten as one past its deadline is (a channel
    /// change among them settles unanswered, §14.5; a streaming `inference/request` takes
    /// no more chunks, §11.4, those the host sent before it read the cancel reported once,
    /// `inference_chunks_dropped` `cancelled`), with no output. The driver tells the host (MCP
    /// `notifications/cancelled`); an answer read after it is no answer
    /// ([`ServerDiagnostic::UnexpectedResponse`] here; `server::Server`'s peer reports it
    /// as late). Whether it was waiting.
    pub fn abandon(&mut self, id: u64) -> bool {
        if self.closed || !self.pending.answered(id) {
            return false;
        }
        self.generation += 1;
        self.channels.gave_up(id);
        self.inference.abandoned(id);
        true
    }

    /// Whether the host ended its output ([`Self::handle_eof`]).
    pub fn input_ended(&self) -> bool {
        self.input_ended
    }

    /// When [`Self::handle_timeout`] is due next: the earliest of the open turns' safety
    /// timeouts and the deadlines of the requests sent through [`Self::request`]; `None`
    /// after [`Self::handle_close`], when nothing is due any more.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            // `handle_timeout` changes nothing now: a deadline would be due forever.
            return None;
        }
        match (self.turns.next_deadline(), self.pending.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// At `now`: gives up every request sent through [`Self::request`] whose deadline
    /// passed, earliest first, as [`ServerOutput::RequestTimedOut`] (a channel change among
    /// them settles unanswered, §14.5, and a streaming `inference/request` takes no more
    /// chunks, §11.4); then ends every turn whose safety timeout passed (§10.5), as
    /// [`ServerOutput::Turn`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        for id in self.pending.expire(now) {
            self.generation += 1;
            self.channels.gave_up(id);
            self.inference.ended(id);
            self.out.push_back(ServerOutput::RequestTimedOut { id });
        }
        for end in self.turns.expire(now) {
            self.out
                .push_back(ServerOutput::Turn(TurnEvent::Ended(end)));
        }
    }
}
