//! [`ServerState`]: the server side of one connection as a state machine (§5.2, §5.3,
//! §6.7): the `initialize` answer, the policy Request and its receipt
//! ([`ServerPolicyState::apply`]), the gate on what the host sends and on what the
//! application sends. Inputs arrive in wire order.

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Map, Value};

use super::{admit, admit_at_server, Receiver, Refusal};
use crate::capability::{CapabilitySet, Grant};
use crate::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId, Response};
use crate::policy::{self, Fallback, FeatureSets, Form, Receipt, ServerPolicyState, SetRefusal};
use crate::protocol::handshake;

/// What a [`ServerState`] serves.
#[derive(Debug, Clone)]
pub struct ServerRules {
    /// `serverInfo` (`name`, `version`).
    pub server_info: Value,
    /// The MCPL manifest advertised under `capabilities.experimental.mcpl` (§5.1, §6.1).
    pub manifest: Value,
    /// MCP capabilities beside it (`tools`, `resources`, …).
    pub mcp_capabilities: Map<String, Value>,
    /// Capabilities without which the server refuses the policy, and the fallback it names
    /// (§6.7).
    pub required: Option<(CapabilitySet, Fallback)>,
}

/// What a [`ServerState`] produced, drained in order by [`ServerState::poll_output`].
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOutput {
    /// A message to write to the host, in this order.
    Transmit(Message),
    /// An admitted host request for the application (`tools/call`, hooks, …): answer with
    /// [`ServerState::answer`].
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// An admitted host notification for the application.
    Notification(Notification),
    /// The answer to a request the application sent through [`ServerState::request`].
    Response {
        /// The id [`ServerState::request`] returned.
        id: u64,
        /// Its outcome.
        outcome: Result<Value, ErrorObject>,
    },
    /// A policy Request was applied (§5.3: the first makes the session ready).
    PolicyApplied {
        /// The grant in force.
        grant: Grant,
    },
    /// A defect of the host (`policy_malformed`, `unknown_feature_set`, …).
    Diagnostic {
        /// Machine code.
        code: &'static str,
        /// Detail.
        detail: String,
    },
    /// Close the connection (after writing what was transmitted before).
    Close,
}

/// Why [`ServerState::request`] refused to send: the host would refuse it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendRefusal {
    /// The host is MCP-only (§3.2): no MCPL method is sent.
    #[error("the host does not speak MCPL 0.5 (§3.2): no MCPL method is sent")]
    McpOnly,
    /// The method, its readiness or its grant (the host's admission rule).
    #[error("{}", .0.to_error(.1).message)]
    Admission(Refusal, String),
    /// The named feature set (§6.4, §6.6).
    #[error("{}", .0.to_error(.1).message)]
    FeatureSet(SetRefusal, String),
}

/// How a server answers one policy Request ([`answer_policy_request`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyAnswer {
    /// The response: the receipt (accepting or refusing), or `-32602` for malformed params.
    pub response: Result<Value, ErrorObject>,
    /// Defects of the host to report (`policy_malformed`, `unknown_feature_set`, …).
    pub diagnostics: Vec<(&'static str, String)>,
    /// `Some` when the policy was refused for lacking `required` capabilities: the state was
    /// reset (not ready, nothing granted) and the caller does what the fallback says
    /// (`mcp-only`: no MCPL on this connection; `close`: close after the receipt).
    pub refused: Option<Fallback>,
}

/// Applies one `featureSets/update` Request (§5.3, §6.7) to `policy` and decides the answer:
/// the server session and [`ServerState`] both answer through it. Capabilities in
/// `required` that the grant lacks refuse the policy with their fallback; a refused policy
/// is not operated under, so the state becomes not ready with nothing granted.
pub fn answer_policy_request(
    policy: &mut ServerPolicyState,
    required: Option<(CapabilitySet, Fallback)>,
    params: &Value,
) -> PolicyAnswer {
    let outcome = match policy.apply(Form::Request, params) {
        Ok(o) => o,
        Err(e) => {
            return PolicyAnswer {
                response: Err(e.to_error()),
                diagnostics: vec![("policy_malformed", e.to_string())],
                refused: None,
            }
        }
    };
    let diagnostics = outcome
        .diagnostics
        .into_iter()
        .map(|d| (d.code, d.detail))
        .collect();
    if let Some((required, fallback)) = required {
        let missing = required.difference(policy.grant().capabilities());
        if !missing.is_empty() {
            let refused = Receipt::refused(
                fallback,
                missing,
                Some("required capabilities are not granted".into()),
            );
            *policy = ServerPolicyState::new(policy.declarations().clone());
            return PolicyAnswer {
                response: Ok(refused.to_value()),
                diagnostics,
                refused: Some(fallback),
            };
        }
    }
    let receipt = outcome.receipt.unwrap_or_else(|| policy.receipt());
    PolicyAnswer {
        response: Ok(receipt.to_value()),
        diagnostics,
        refused: None,
    }
}

/// The server side of one connection (module docs).
#[derive(Debug)]
pub struct ServerState {
    rules: ServerRules,
    initialized: bool,
    mcpl: bool,
    policy: ServerPolicyState,
    next_id: u64,
    pending: HashMap<u64, ()>,
    out: VecDeque<ServerOutput>,
}

impl ServerState {
    /// A state machine serving `rules`.
    pub fn new(rules: ServerRules) -> ServerState {
        let decls = FeatureSets::from_mcpl(&rules.manifest).0;
        ServerState {
            rules,
            initialized: false,
            mcpl: false,
            policy: ServerPolicyState::new(decls),
            next_id: 1,
            pending: HashMap::new(),
            out: VecDeque::new(),
        }
    }

    /// Whether the host speaks MCPL 0.5 (known once `initialize` is answered).
    pub fn mcpl(&self) -> bool {
        self.mcpl
    }

    /// Whether a policy Request has been applied (§5.3).
    pub fn is_ready(&self) -> bool {
        self.policy.is_ready()
    }

    /// The grant in force (empty until ready).
    pub fn grant(&self) -> Grant {
        if self.policy.is_ready() {
            *self.policy.grant()
        } else {
            Grant::none()
        }
    }

    /// The next output, in order.
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        self.out.pop_front()
    }

    /// Handles one message received from the host, in wire order.
    pub fn handle_message(&mut self, msg: Message) {
        match msg {
            Message::Request(r) => self.on_request(r),
            Message::Notification(n) => self.on_notification(n),
            Message::Response(r) => {
                let id = match &r.id {
                    Some(RequestId::Number(n)) => n.as_u64(),
                    _ => None,
                };
                match id.filter(|id| self.pending.remove(id).is_some()) {
                    Some(id) => self.out.push_back(ServerOutput::Response {
                        id,
                        outcome: r.outcome,
                    }),
                    None => self.out.push_back(ServerOutput::Diagnostic {
                        code: "unexpected_response",
                        detail: format!("{:?}", r.id),
                    }),
                }
            }
        }
    }

    /// Answers a request handed out as [`ServerOutput::Request`].
    pub fn answer(&mut self, id: RequestId, outcome: Result<Value, ErrorObject>) {
        self.respond(id, outcome);
    }

    /// Sends `method` to the host if the host would admit it now: its admission rule
    /// ([`admit`] as the host applies it) and, when `params` name a `featureSet`, the
    /// feature-set gate (§6.6) — a message the host would refuse is not sent. Returns the
    /// id its [`ServerOutput::Response`] will carry.
    pub fn request(&mut self, method: &str, params: Value) -> Result<u64, SendRefusal> {
        if self.initialized && !self.mcpl && crate::protocol::is_mcpl_method(method) {
            return Err(SendRefusal::McpOnly);
        }
        let req = admit(
            Receiver::Host,
            method,
            Some(&params),
            self.policy.is_ready(),
            &self.grant(),
        )
        .map_err(|r| SendRefusal::Admission(r, method.to_owned()))?;
        if let Some(fs) = params.get("featureSet").and_then(Value::as_str) {
            let statuses = self.policy.statuses();
            let decls = self.policy.declarations();
            policy::feature_set_gate(decls, &statuses, fs, req)
                .map_err(|r| SendRefusal::FeatureSet(r, fs.to_owned()))?;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, ());
        self.out
            .push_back(ServerOutput::Transmit(Message::Request(Request {
                id: RequestId::from(id),
                method: method.to_owned(),
                params: Some(params),
            })));
        Ok(id)
    }

    fn respond(&mut self, id: RequestId, outcome: Result<Value, ErrorObject>) {
        self.out
            .push_back(ServerOutput::Transmit(Message::Response(Response {
                id: Some(id),
                outcome,
            })));
    }

    fn on_request(&mut self, r: Request) {
        match r.method.as_str() {
            "initialize" => {
                let answer = self.on_initialize(r.params.as_ref());
                self.respond(r.id, answer)
            }
            "ping" => self.respond(r.id, Ok(json!({}))),
            m if !self.initialized => {
                // Nothing but `initialize` and `ping` before `initialize` (as `server::Server`).
                let e = ErrorObject::invalid_request(format!("{m} before initialize"));
                self.respond(r.id, Err(e))
            }
            "featureSets/update" if self.mcpl => self.on_policy(r),
            m => {
                let admitted = admit_at_server(
                    m,
                    r.params.as_ref(),
                    self.mcpl,
                    self.policy.is_ready(),
                    &self.grant(),
                );
                match admitted {
                    Err(refusal) => {
                        let e = refusal.to_error(m);
                        self.respond(r.id, Err(e))
                    }
                    Ok(_) => self.out.push_back(ServerOutput::Request {
                        id: r.id,
                        method: r.method,
                        params: r.params,
                    }),
                }
            }
        }
    }

    fn on_notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "notifications/initialized" => {}
            "featureSets/update" if self.mcpl => {
                let params = n.params.unwrap_or(Value::Null);
                match self.policy.apply(Form::Notification, &params) {
                    Ok(o) => {
                        for d in o.diagnostics {
                            self.out.push_back(ServerOutput::Diagnostic {
                                code: d.code,
                                detail: d.detail,
                            });
                        }
                    }
                    Err(e) => self.out.push_back(ServerOutput::Diagnostic {
                        code: "policy_malformed",
                        detail: e.to_string(),
                    }),
                }
            }
            _ => self.out.push_back(ServerOutput::Notification(n)),
        }
    }

    fn on_initialize(&mut self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        if self.initialized {
            return Err(ErrorObject::invalid_request("already initialized"));
        }
        let Some(version) = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str)
        else {
            return Err(ErrorObject::invalid_params(
                "initialize: protocolVersion must be a string",
            ));
        };
        // §3.2: a host advertising another MCPL version is served as plain MCP.
        let null = Value::Null;
        let read = handshake::host_mcpl(params.unwrap_or(&null));
        self.mcpl = read == handshake::HostMcpl::V05;
        if let handshake::HostMcpl::Other(v) = read {
            self.out.push_back(ServerOutput::Diagnostic {
                code: "host_mcpl_version",
                detail: v,
            });
        }
        self.initialized = true;
        let mut caps = self.rules.mcp_capabilities.clone();
        caps.insert(
            "experimental".into(),
            json!({ "mcpl": self.rules.manifest.clone() }),
        );
        Ok(json!({
            "protocolVersion": version,
            "capabilities": caps,
            "serverInfo": self.rules.server_info.clone(),
        }))
    }

    fn on_policy(&mut self, r: Request) {
        let params = r.params.unwrap_or(Value::Null);
        let answer = answer_policy_request(&mut self.policy, self.rules.required, &params);
        for (code, detail) in answer.diagnostics {
            self.out
                .push_back(ServerOutput::Diagnostic { code, detail });
        }
        let ok = answer.response.is_ok();
        self.respond(r.id, answer.response);
        match answer.refused {
            Some(Fallback::Close) => self.out.push_back(ServerOutput::Close),
            Some(Fallback::McpOnly) => self.mcpl = false,
            None if ok => {
                // The receipt is ahead of anything the application sends from now on (§5.3).
                self.out.push_back(ServerOutput::PolicyApplied {
                    grant: *self.policy.grant(),
                });
            }
            None => {}
        }
    }
}
