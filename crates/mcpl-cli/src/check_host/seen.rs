//! What every message from the host shows as it arrives ([`Run::arrived`]), judged once the
//! run ends ([`Run::conclude_seen`]):
//!
//! - `host.request-ids-unique`: MCP, over which §4 carries MCPL, says a request id MUST NOT
//!   have been used before by the requestor within the session ([`crate::check::ids`], as
//!   `mcpl check` judges a server; a warning).
//! - `host.in-flight-ids-unique`: a request under the id of one of the host's requests the
//!   checker has not answered yet ([`crate::check::ids::InFlightIds`]). The checker's peer
//!   refuses it (`-32600`, the library's rule) and says so as a diagnostic, so it is counted
//!   from there ([`Run::id_in_use`]); a fail. The diagnostics stream is bounded: when it
//!   dropped some, a pass warns, as a refusal may have been among them ([`Run::view_lost`]).
//!   Reading: an incomplete view cannot confirm the rule held.
//! - `host.initialized-sent`: MCP's lifecycle has the client send
//!   `notifications/initialized` after a successful `initialize` (a MUST). Reading: judged
//!   whenever the host sent `initialize` (the checker answers it with a result), on whether
//!   the notification came at all during the run, its order left to the other checks; a
//!   host that sent no `initialize` is not judged here (its run ends there, said once).

use mcpl::jsonrpc::RequestId;
use mcpl::peer::{Diagnostic, IncomingMessage};
use mcpl::protocol::handshake::{Initialize, Initialized};
use mcpl::protocol::Method;

use super::session::Run;
use crate::check::ids::{InFlightIds, RequestIds};
use crate::check::report::Status;

/// `host.initialized-sent`.
const INITIALIZED_SENT: &str = "host.initialized-sent";

/// What the host's messages showed as they arrived.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The ids of the host's requests.
    request_ids: RequestIds,
    /// The host's requests that came under the id of one still in flight.
    in_flight: InFlightIds,
    /// The host sent `initialize` (as a Request).
    initialize: bool,
    /// How many `notifications/initialized` the host sent (with or without an id).
    initialized: u64,
}

impl Seen {
    fn note(&mut self, method: &str, id: Option<&RequestId>) {
        if let Some(id) = id {
            self.request_ids.note(id);
            self.in_flight.counted();
            self.initialize |= method == Initialize::NAME;
        }
        if method == Initialized::NAME {
            self.initialized = self.initialized.saturating_add(1);
        }
    }
}

/// The id of the host's request `d` reports refused because a request under that id is in
/// flight still (the peer's `-32600`, [`mcpl::jsonrpc::InvalidMessage::id_in_use`]), else
/// `None`: the one reading of that diagnostic.
pub(super) fn refused_in_use(d: &Diagnostic) -> Option<&RequestId> {
    match d {
        Diagnostic::InvalidMessage {
            id: Some(id),
            reason,
            answered: true,
        } if *reason == mcpl::jsonrpc::InvalidMessage::id_in_use(id.clone()).reason => Some(id),
        _ => None,
    }
}

impl Run {
    /// `m`, as it arrived, noted in [`Seen`]: every message from the host passes here once,
    /// whoever then handles it.
    pub(super) fn arrived(&mut self, m: IncomingMessage) -> IncomingMessage {
        match &m {
            IncomingMessage::Request(r) => self.seen.note(r.method(), Some(r.id())),
            IncomingMessage::Notification(n) => self.seen.note(&n.method, None),
        }
        m
    }

    /// A request of the host's under `id` that the peer refused, a request under `id` being
    /// in flight still (its diagnostic).
    pub(super) fn id_in_use(&mut self, id: &RequestId) {
        self.seen.in_flight.reused(id);
    }

    /// Records the checks [`Seen`] judges, from what came during the run.
    pub(super) fn conclude_seen(&mut self) {
        if let Some((status, d)) = self.seen.request_ids.verdict("host") {
            self.record("host.request-ids-unique", status, d);
        }
        // Counted from the peer's refusals, told as diagnostics: a bounded stream.
        if let Some((status, d)) = self.seen.in_flight.verdict("host") {
            let what = "a request refused for an id in flight";
            let (status, d) = self.view_lost(status, d, what);
            self.record("host.in-flight-ids-unique", status, d);
        }
        match (self.seen.initialize, self.seen.initialized) {
            (false, _) => {}
            (true, 0) => self.record(
                INITIALIZED_SENT,
                Status::Fail,
                "the host sent initialize and never notifications/initialized (MCP: after a \
                 successful initialize the client MUST send it)",
            ),
            (true, n) => {
                let d = format!("notifications/initialized sent ({n} time(s))");
                self.record(INITIALIZED_SENT, Status::Pass, d);
            }
        }
    }
}
