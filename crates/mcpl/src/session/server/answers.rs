//! Answers to the host requests a [`ServerState`] handed out ([`ServerOutput::Request`]):
//! a hook's is filtered (§10.8), an `initialize`'s made the session's (§3.2); any other is
//! written as the application gave it, encoded or not. Also the `initialize` the session
//! answers itself and the MCP `notifications/initialized` that acknowledges it.

use serde_json::Value;

use super::{Handed, ServerOutput, ServerState};
use crate::jsonrpc::Notification;
use crate::jsonrpc::{Encoded, ErrorObject, InFlightId, RequestId};
use crate::session::{SendRefusal, ServerDiagnostic, Transmission};

impl ServerState {
    /// The host's `notifications/cancelled` (MCP): a request handed out and not yet answered
    /// is answered `-32800` now and forgotten, as [`ServerOutput::Cancelled`] (a
    /// `channels/close` given up ends its channel here too, as at the host, and so does a
    /// `channels/open` already answered whose answer the host had not read,
    /// [`ChannelLedger::open_cancelled`](crate::session::server_channels::ChannelLedger::open_cancelled),
    /// and a `channels/close` answered lately other than `closed: true`,
    /// [`ChannelLedger::close_given_up`](crate::session::server_channels::ChannelLedger::close_given_up));
    /// any other (unknown, answered, or the `initialize` MCP forbids cancelling) is handed on
    /// as it is.
    pub(super) fn on_cancelled(&mut self, n: crate::jsonrpc::Notification) {
        // By its identity in flight (`jsonrpc::identity::Identity`): `requestId: 7.0` names request
        // `7`, which is answered under its own id.
        let id = crate::session::cancelled_request(n.params.as_ref())
            .map(InFlightId)
            .filter(|id| {
                self.handed
                    .get(id)
                    .is_some_and(|h| !matches!(h, Handed::Initialize { .. }))
            });
        match id.and_then(|id| self.handed.remove_entry(&id)) {
            Some((InFlightId(id), handed)) => {
                if let Handed::ChannelClose(channel) = handed {
                    // Reading (§14.5; MCP's cancellation), fail closed: a host that gives up
                    // its close drops the channel (the server may have closed it), so the
                    // server no longer holds it either.
                    self.generation += u64::from(self.channels.closed(&channel));
                }
                self.respond(id.clone(), Err(ErrorObject::request_cancelled()));
                self.out.push_back(ServerOutput::Cancelled {
                    id,
                    notification: n,
                });
            }
            None => {
                let answered = crate::session::cancelled_request(n.params.as_ref());
                let dropped = answered
                    .as_ref()
                    .and_then(|id| self.channels.open_cancelled(id));
                if let Some(channel_id) = dropped {
                    self.generation += 1;
                    let d = ServerDiagnostic::OpenedChannelDropped {
                        channel_id,
                        cancelled: true,
                    };
                    self.out.push_back(ServerOutput::Diagnostic(d));
                } else if answered.is_some_and(|id| self.channels.close_given_up(&id)) {
                    // A close answered other than `closed: true`, given up across its
                    // answer: the host dropped the channel (§14.5, fail closed).
                    self.generation += 1;
                }
                self.out.push_back(ServerOutput::Notification(n))
            }
        }
    }

    /// Answers a request handed out as [`ServerOutput::Request`]. A `context/beforeInference`
    /// answer is first made one the host accepts whole
    /// ([`rules::hook_answer_to_send`](crate::session::rules::hook_answer_to_send): the host's own
    /// judgement of each injection under the grant in force now, §10.8); what it drops is an
    /// `injection_dropped` diagnostic, and an answer that is no hook result is `-32603`.
    /// An answer without a `featureSet` claims the hook's own
    /// ([`ServerRules::hook_feature_set`](crate::session::ServerRules::hook_feature_set)). An `initialize` answer
    /// ([`ServerRules::initialize_by_application`](crate::session::ServerRules::initialize_by_application)) gets the manifest under
    /// `capabilities.experimental.mcpl`; one that is no object, or whose `capabilities` is
    /// none, is `-32603`.
    pub fn answer(
        &mut self,
        id: RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), SendRefusal> {
        let (id, handed) = self.take_handed(&id)?;
        self.answer_handed(id, handed, outcome);
        Ok(())
    }

    /// Request `id` as it was handed out (by its identity in flight, `jsonrpc::identity::Identity`),
    /// no longer waiting for its answer: its id as its request wrote it (what the answer
    /// echoes, JSON-RPC 2.0 §5), and how it was handed out.
    fn take_handed(&mut self, id: &RequestId) -> Result<(RequestId, Handed), SendRefusal> {
        self.handed
            .remove_entry(&InFlightId::of(id))
            .map(|(InFlightId(id), handed)| (id, handed))
            .ok_or_else(|| SendRefusal::UnknownRequest(id.to_value().to_string()))
    }

    fn answer_handed(
        &mut self,
        id: RequestId,
        handed: Handed,
        outcome: Result<Value, ErrorObject>,
    ) {
        let mut outcome = outcome;
        self.channel_lifecycle_answered(&id, &handed, &mut outcome);
        // A close that leaves its channel held: what the host drops if it gave the close
        // up before it read this answer (`ChannelLedger::close_given_up`).
        if let Handed::ChannelClose(c) = &handed {
            if self.channels.is_known(c) {
                self.channels.close_answered(id.clone(), c.clone());
            }
        }
        let outcome = match (handed, outcome) {
            (Handed::Hook, Ok(v)) => self.hook_answer(v),
            (Handed::Initialize { mcpl }, outcome) => self.initialize_answer(mcpl, outcome),
            (_, other) => other,
        };
        // An answer the host could not read goes as `-32603` (`jsonrpc::outcome_to_send`).
        let (outcome, replaced) = crate::jsonrpc::outcome_to_send(outcome);
        if let Some(error) = replaced {
            self.out.push_back(ServerOutput::Diagnostic(
                ServerDiagnostic::ResultUnencodable {
                    method: format!("request {}", id.to_value()),
                    error,
                },
            ));
        }
        self.respond(id, outcome);
    }

    /// The application's answer to the `initialize` handed out, made the session's by the
    /// one rule ([`application_initialize_result`](crate::session::server_initialize::application_initialize_result),
    /// as `server::Server` makes its MCP fallback's); a result makes the connection
    /// initialized, an error leaves it as it was (a later `initialize` is read afresh).
    fn initialize_answer(
        &mut self,
        mcpl: bool,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<Value, ErrorObject> {
        self.initializing = false;
        let mut diags = Vec::new();
        let result = outcome.and_then(|v| {
            crate::session::server_initialize::application_initialize_result(
                v,
                &self.rules.mcp_capabilities,
                self.rules.instructions.as_deref(),
                self.manifest.manifest(),
                &mut diags,
            )
        });
        self.out
            .extend(diags.into_iter().map(ServerOutput::Diagnostic));
        if let Ok(sent) = &result {
            self.generation += 1;
            self.initialized = true;
            self.mcpl = mcpl;
            self.advertised_as_sent(sent);
        }
        result
    }

    fn hook_answer(&mut self, v: Value) -> Result<Value, ErrorObject> {
        let mut r: crate::protocol::hooks::BeforeInferenceResult = serde_json::from_value(v)
            .map_err(|e| {
                ErrorObject::internal(format!("the hook's answer is no hook result: {e}"))
            })?;
        let statuses = self.policy.statuses();
        let diags = crate::session::server_hooks::filter_hook_answer(
            &mut r,
            self.rules.hook_feature_set.as_deref(),
            self.mcpl,
            self.policy.is_ready(),
            self.policy.grant(),
            self.policy.declarations(),
            &statuses,
        );
        self.out
            .extend(diags.into_iter().map(ServerOutput::Diagnostic));
        serde_json::to_value(r)
            .map_err(|e| ErrorObject::internal(format!("cannot encode the hook's answer: {e}")))
    }

    /// [`Self::answer`] with a result the application already encoded
    /// ([`Encoded::encode`]): written as it is ([`Transmission::Result`]), no
    /// `Value` in between. The answers a rule reads (a hook's, an `initialize`'s) are read
    /// back and go the way of [`Self::answer`]; one that is no JSON is `-32603`.
    pub fn answer_encoded(&mut self, id: RequestId, result: Encoded) -> Result<(), SendRefusal> {
        let (id, handed) = self.take_handed(&id)?;
        match handed {
            Handed::Plain => {
                self.out
                    .push_back(ServerOutput::Transmit(Transmission::Result { id, result }));
            }
            handed => {
                let outcome = result
                    .to_value()
                    .map_err(|e| ErrorObject::internal(format!("the answer is no JSON: {e}")));
                self.answer_handed(id, handed, outcome);
            }
        }
        Ok(())
    }

    /// MCP's `notifications/initialized`: it acknowledges the `initialize` answer, once,
    /// and is handed out ([`ServerOutput::Notification`]) when the application answered
    /// `initialize` (an MCP implementation of its own, as `server::Server` hands it to its
    /// fallback). Reading (MCP is silent on a stray one): one before that answer, or a
    /// second one, acknowledges nothing and changes nothing, and is reported
    /// (`ignored_notification`) rather than dropped unseen or handed on, with or without
    /// such an application.
    pub(super) fn on_initialized(&mut self, n: Notification) {
        if self.initialized && !self.initialized_told {
            self.acknowledged = true;
            self.initialized_told = true;
            if self.rules.initialize_by_application {
                self.out.push_back(ServerOutput::Notification(n));
            }
        } else {
            self.out.push_back(ServerOutput::Diagnostic(
                ServerDiagnostic::IgnoredNotification { method: n.method },
            ));
        }
    }

    /// A host request `method` read after `initialize` was answered and before
    /// `notifications/initialized`: reported once ([`ServerDiagnostic::RequestBeforeInitialized`]),
    /// then served as sent; `ping` is no defect (MCP allows it at any time), and a second
    /// `initialize` is answered `-32600` as it is.
    pub(super) fn before_initialized(&mut self, method: &str) {
        if method == "ping" || method == "initialize" {
            return;
        }
        self.acknowledged = true;
        self.out.push_back(ServerOutput::Diagnostic(
            ServerDiagnostic::RequestBeforeInitialized {
                method: method.to_owned(),
            },
        ));
    }

    pub(super) fn on_initialize(&mut self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let read = crate::session::server_initialize::read_initialize(self.initialized, params)?;
        self.generation += 1;
        let version = read.protocol_version;
        self.mcpl = read.mcpl;
        self.out
            .extend(read.diagnostic.map(ServerOutput::Diagnostic));
        self.initialized = true;
        let result = crate::session::server_initialize::initialize_result(
            version,
            &self.rules.mcp_capabilities,
            self.manifest.manifest(),
            self.rules.server_info.clone(),
            self.rules.instructions.as_deref(),
        );
        self.advertised_as_sent(&result);
        Ok(result)
    }

    /// Sets the grant's ceiling (§5.4) from the `initialize` result sent: the manifest in
    /// force, and `tools` as its MCP capabilities carry it.
    pub(super) fn advertised_as_sent(&mut self, result: &Value) {
        let tools = result
            .get("capabilities")
            .and_then(Value::as_object)
            .is_some_and(crate::session::server_initialize::declares_tools);
        let advertised = crate::session::server_manifest::advertisement(&self.manifest, tools);
        self.policy.set_advertised(advertised);
    }
}
