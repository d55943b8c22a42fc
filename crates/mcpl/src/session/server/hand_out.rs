//! The host requests a [`ServerState`] hands to its application ([`ServerOutput::Request`]):
//! within the in-flight bound ([`ServerRules::max_in_flight`](crate::session::ServerRules::max_in_flight)),
//! each kept by its id's identity in flight until answered (`jsonrpc::identity::Identity`).

use serde_json::Value;

use super::{Handed, ServerOutput, ServerState};
use crate::jsonrpc::{ErrorObject, Request};
use crate::protocol::hooks::BeforeInference;
use crate::protocol::Method;
use crate::session::server_initialize::read_initialize;

impl ServerState {
    /// Reads the host's `initialize` by the one rule ([`read_initialize`]; one with the
    /// application already counts as a second) and hands it to the application.
    pub(super) fn hand_out_initialize(&mut self, r: Request) {
        let read = match read_initialize(self.initialized || self.initializing, r.params.as_ref()) {
            Ok(read) => read,
            Err(e) => return self.respond(r.id, Err(e)),
        };
        self.out
            .extend(read.diagnostic.map(ServerOutput::Diagnostic));
        let handed = Handed::Initialize { mcpl: read.mcpl };
        self.initializing = self.hand_out(r, handed);
    }

    /// Hands an admitted host request to the application, within the in-flight bound.
    pub(super) fn hand_out_request(&mut self, r: Request) {
        let handed = ServerState::handed_as(&r.method, r.params.as_ref());
        self.hand_out(r, handed);
    }

    /// Hands `r` out as `handed`, within the in-flight bound; whether it was. Its id is not
    /// in flight ([`Self::on_request`] refused it).
    fn hand_out(&mut self, r: Request, handed: Handed) -> bool {
        // An id in flight was refused before routing (`on_request`).
        // In a batch, as the async peer counts (`peer::reader`): every answer still owed,
        // those of the batch's earlier requests included (owed until its array is queued,
        // answered or cancelled already or not), none freed while it is read (§6.7: the
        // two servers grant the same).
        let in_flight = match self.batch_owed {
            Some((at_start, taken)) => at_start.saturating_add(taken),
            None => self.handed.len(),
        };
        if in_flight >= self.rules.max_in_flight {
            let e = ErrorObject::busy(self.rules.max_in_flight);
            self.refused_busy = true;
            self.respond(r.id, Err(e));
            false
        } else if let Some(empty) = self.hook_not_run(&r.method) {
            self.respond(r.id, Ok(empty));
            false
        } else {
            self.handed
                .insert(crate::jsonrpc::InFlightId::of(&r.id), handed);
            self.out.push_back(ServerOutput::Request {
                id: r.id,
                method: r.method,
                params: r.params,
            });
            true
        }
    }

    /// For a `context/beforeInference` whose hook's own set is not available now, the answer
    /// sent without handing it out ([`hook_not_run`](crate::session::server_hooks::hook_not_run)).
    fn hook_not_run(&self, method: &str) -> Option<Value> {
        if method != BeforeInference::NAME {
            return None;
        }
        let hook_set = self.rules.hook_feature_set.as_deref();
        let empty = crate::session::server_hooks::hook_not_run(hook_set, |s| {
            self.mcpl && self.policy.is_available(s)
        })?;
        serde_json::to_value(empty).ok()
    }
}
