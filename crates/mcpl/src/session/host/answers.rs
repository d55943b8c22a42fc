//! What [`HostState`] does with the answers to its own requests: the handshake, the policy
//! exchange and its receipts (§5.3, §6.7), hook answers (§10) and manifest fetches (§17).

use super::*;
use crate::protocol::feature_sets::FeatureSetsUpdate;
use crate::protocol::handshake::Initialized;

impl HostState {
    /// Gives up on request `id` of the application's ([`Self::request`], or a hook,
    /// [`Self::before_inference`]) whose caller stopped waiting: it is forgotten at once and
    /// comes out as nothing (no [`HostOutput::Response`] or [`HostOutput::Hook`]), so its
    /// answer, if one comes, is [`HostDiagnostic::UnexpectedResponse`] (a late response), a
    /// hook's is not judged, and a
    /// `channels/open` given up adds no channel (§14.3, §14.5: only a confirmed answer read
    /// while it waits does; nothing widens on an unconfirmed open), while a `channels/close`
    /// given up takes its channel out, fail closed ([`ChannelTable::unconfirmed`]). The machine writes nothing for it: the driver tells the server
    /// with MCP's `notifications/cancelled { requestId, reason }` under the id it wrote, as
    /// it does for a request of ours that expired ([`HostOutput::RequestTimedOut`]).
    /// Reading (§14.3, §14.5; MCP's cancellation): an answer already received when the
    /// caller gives up is a fact about the server, so a driver feeds it
    /// ([`Self::handle_message`]) rather than give the request up (`host::HostSession`'s
    /// does), and then this is `false`: only an answer received after the cancel went out
    /// is a late one, never applied.
    /// `false` when `id` is no such request still waiting (answered, expired, or one of the
    /// machine's own: a policy exchange or manifest fetch, whose outcome the session needs
    /// whoever waits for it).
    pub fn abandon_request(&mut self, id: u64) -> bool {
        match self.pending.get(id) {
            Some(Purpose::App(op)) => {
                if let Some(op) = op.clone() {
                    self.channels.unconfirmed(&op);
                }
            }
            Some(Purpose::Hook) => {}
            _ => return false,
        }
        self.pending.end(id);
        true
    }

    /// The connection ended at `now` (the transport closed, or the driver closed it after
    /// [`HostOutput::Close`]): nothing more is read or sent. Every request of ours still
    /// waiting ends now, in id order, without a diagnostic (the server is not known to be at
    /// fault): a `context/beforeInference` hook as [`HostOutput::Hook`] with a failed
    /// verdict (fail-open, §10.1), and a handshake or initial policy exchange still under
    /// way (§5.2, §5.3) as [`HostOutput::Connected`] with [`ConnectError::Closed`]. The
    /// application's requests, a policy change, manifest fetches, the server's requests
    /// handed out, open turns and open streams are forgotten: the driver tells its callers
    /// the connection closed, as [`super::super::ServerState::handle_close`] leaves it to
    /// the server's. Afterwards [`Self::poll_timeout`] is `None`, inputs change nothing and
    /// every call that would send is refused ([`StateError::NotConnected`]). Outputs queued
    /// before stay queued. Later calls do nothing.
    pub fn handle_close(&mut self, _now: Instant) {
        let connecting = matches!(
            self.phase,
            Phase::Initializing | Phase::PolicyPending | Phase::Reducing
        );
        self.phase = Phase::Closed;
        let ended = self.pending.end_all();
        for (id, purpose) in ended {
            if let Purpose::Hook = purpose {
                let why = "the connection closed before the server answered (fail-open)";
                self.unanswered_hook(id, why);
            }
        }
        if connecting {
            self.out
                .push_back(HostOutput::Connected(Err(ConnectError::Closed)));
        }
        self.app_pending.clear();
        self.open_turns.clear();
        self.open_streams.clear();
    }

    /// The server ended its output at `now` (EOF, a half-close): nothing more will be read,
    /// but the server may still read. Once the connection is up, the application is told
    /// ([`HostEvent::InputEnded`], reported as [`HostDiagnostic::EventDropped`] if its queue
    /// has no room; [`Self::input_ended`] says it either way), and every request of ours
    /// still waiting ends now, in id order, as nothing can answer it: a
    /// `context/beforeInference` hook as [`HostOutput::Hook`] with a failed verdict
    /// (fail-open, §10.1), a policy change as [`HostOutput::PolicyChanged`] with nothing
    /// activated (§6.7, as when unanswered); the application's requests and manifest
    /// fetches are forgotten, as [`Self::handle_close`] forgets them. The server's requests
    /// handed out are still answered ([`Self::answer`], [`Self::inference_chunk`]) and
    /// notifications still sent, while calls that would need an answer are refused
    /// ([`StateError::NotConnected`]; [`Self::before_inference`] is `None`). Before the
    /// connection is up it ends the connect as [`Self::handle_close`] does, with
    /// [`ConnectError::Closed`], and asks for the close ([`HostOutput::Close`]). Later
    /// calls do nothing.
    pub fn handle_eof(&mut self, now: Instant) {
        if self.input_ended || self.phase == Phase::Closed {
            return;
        }
        self.input_ended = true;
        if self.phase != Phase::Up {
            return self.connected(Err(ConnectError::Closed));
        }
        self.hand_out_event(HostEvent::InputEnded);
        let ended = self.pending.end_all();
        for (id, purpose) in ended {
            match purpose {
                Purpose::Hook => {
                    let why = "the server ended its output before it answered (fail-open)";
                    self.unanswered_hook(id, why);
                }
                Purpose::Change(plan) => {
                    self.on_answer(now, id, Purpose::Change(plan), Answer::Timeout)
                }
                _ => {}
            }
        }
    }

    /// Whether the server ended its output ([`Self::handle_eof`]).
    pub fn input_ended(&self) -> bool {
        self.input_ended
    }

    pub(super) fn on_answer(&mut self, now: Instant, id: u64, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Fetch => {
                let announced = self.announced.take();
                self.on_fetched(now, answer, announced);
                self.after_announced_fetch(now);
            }
            Purpose::Refresh => self.on_fetched(now, answer, None),
            Purpose::App(lifecycle) => {
                let out = match answer {
                    Answer::Result(v) => {
                        // Applied before the answer is handed out: an application that saw
                        // it sees the channels after it, and so does the next message read.
                        if let Some(op) = lifecycle {
                            let mut diags = Vec::new();
                            let (grant, limits) = (&self.p.grant, &self.rules.channels);
                            self.channels.settle(&mut diags, &op, &v, grant, limits);
                            self.report(diags);
                        }
                        HostOutput::Response { id, outcome: Ok(v) }
                    }
                    Answer::Error(e) => HostOutput::Response {
                        id,
                        outcome: Err(e),
                    },
                    Answer::Timeout => {
                        if let Some(op) = lifecycle {
                            self.channels.unconfirmed(&op);
                        }
                        HostOutput::RequestTimedOut { id }
                    }
                };
                self.out.push_back(out);
            }
            Purpose::Hook => {
                let answer = match answer {
                    Answer::Result(v) => Ok(v),
                    Answer::Error(e) => Err(format!("error {}: {}", e.code, e.message)),
                    Answer::Timeout => Err(format!(
                        "no answer within {:?} (fail-open)",
                        self.rules.hook_timeout
                    )),
                };
                let verdict = self.judge_hook(answer);
                let server = self.label.clone();
                if let Some(detail) = &verdict.failure {
                    self.diag(HostDiagnostic::HookFailed {
                        server: server.clone(),
                        detail: detail.clone(),
                    });
                }
                for (_, reason) in &verdict.rejected {
                    self.diag(HostDiagnostic::InjectionRejected {
                        server: server.clone(),
                        reason: reason.to_string(),
                    });
                }
                self.out.push_back(HostOutput::Hook { id, verdict });
            }
            Purpose::Initialize => self.on_initialized(now, answer),
            Purpose::InitialPolicy(hg) => self.on_initial_policy(now, hg, answer),
            Purpose::Change(plan) => {
                let receipt = self.receipt_of(&answer);
                let wall = self.wall(now);
                let (change, effects) = self.p.finish_change(plan, receipt, wall);
                self.out.push_back(HostOutput::PolicyChanged(change));
                self.effects(effects);
            }
            Purpose::Reduction => {
                let receipt = self.receipt_of(&answer);
                let wall = self.wall(now);
                let effects = self.p.after_reduction(receipt, wall);
                let closing = effects.close;
                self.effects(effects);
                let another = self
                    .pending
                    .purposes()
                    .any(|p| matches!(p, Purpose::Reduction));
                if !closing && self.phase == Phase::Reducing && !another {
                    self.connected(Ok(()));
                }
            }
        }
    }

    /// A hook answer (or why there is none) judged under the grant and the review in force
    /// where it is read (§5.4, §10.1): the one judging of every hook's end.
    fn judge_hook(&self, answer: Result<Value, String>) -> rules::HookVerdict {
        rules::judge_hook_answer(
            answer,
            &self.p.grant,
            self.p.review.as_deref(),
            self.rules.max_injections_per_hook,
        )
    }

    /// Hook `id` ended without an answer as the connection or its input ended (`why`):
    /// its failed verdict (fail-open, §10.1), no diagnostic (the server is not known to be
    /// at fault).
    fn unanswered_hook(&mut self, id: u64, why: &str) {
        let verdict = self.judge_hook(Err(why.to_owned()));
        self.out.push_back(HostOutput::Hook { id, verdict });
    }

    /// Hands out a mode change and closes when a decision says so.
    pub(super) fn effects(&mut self, effects: Effects) {
        if let Some(mode) = effects.entered {
            self.hand_out_event(HostEvent::ModeChanged(mode));
        }
        if effects.close {
            self.phase = Phase::Closed;
            self.out.push_back(HostOutput::Close);
        }
    }

    /// The usable receipt an answer carries, its defects reported.
    pub(super) fn receipt_of(&mut self, answer: &Answer) -> Option<Receipt> {
        match answer {
            Answer::Result(v) => self.read_receipt(v),
            Answer::Error(_) | Answer::Timeout => None,
        }
    }

    pub(super) fn read_receipt(&mut self, v: &Value) -> Option<Receipt> {
        let mut diags = Vec::new();
        let limit = self.rules.max_feature_sets;
        let receipt = self.p.read_receipt(&mut diags, v, limit);
        self.report(diags);
        receipt
    }

    pub(super) fn on_initialized(&mut self, now: Instant, answer: Answer) {
        let result = match answer {
            Answer::Result(v) => v,
            Answer::Error(e) => return self.connected(Err(ConnectError::Remote(e))),
            Answer::Timeout => return self.connected(Err(ConnectError::Timeout)),
        };
        let Some(caps) = result.get("capabilities").filter(|c| c.is_object()) else {
            let e = ConnectError::BadInitialize("no capabilities object".into());
            return self.connected(Err(e));
        };
        // Text the server chose, kept for the connection and the `source` of every tag
        // expansion (copied per event under an accepted ontology, §16.5): kept cut to
        // `DIAGNOSTIC_TEXT_BYTES`, its length said, as every other such text.
        self.label = result
            .pointer("/serverInfo/name")
            .and_then(Value::as_str)
            .unwrap_or("server")
            .to_owned();
        crate::session::clip_text(&mut self.label);
        let Some(manifest) = caps.pointer("/experimental/mcpl") else {
            // §3.3: MCP-only; the grant holds at most `tools` and is final.
            self.experimental_not_object(caps);
            return self.serve_as_mcp(caps, McpOnlyReason::NotAdvertised);
        };
        // §5.1 (the spec defines no negotiation): a manifest naming another MCPL version is
        // another protocol, so the server is served as plain MCP, fail closed (§3.3): no
        // policy Request, no MCPL method sent or admitted. The rule is the server's own
        // ([`handshake::mcpl_version`]): `"0.5"` and its aliases are MCPL 0.5.
        //
        // A manifest object without `version` names none (App. B.3's schema requires it):
        // unlike the server, which serves a host's unversioned advertisement as 0.5
        // (`handshake::host_mcpl`), the host fails closed here too and serves it as plain
        // MCP ([`McpOnlyReason::Unversioned`]), with the `missing_version` finding.
        //
        // A member that is no object (`null`, `true`, `1`, `[]`) carries no manifest (§5.1
        // shows only an object). The server is still a valid MCP server, so only MCPL is
        // refused (§3.3, fail closed): served as plain MCP ([`McpOnlyReason::NotAnObject`]),
        // with the `manifest_not_object` finding. `null` is reported too rather than read as
        // absence: the server wrote the member, and what it meant by it is not knowable.
        if !manifest.is_object() {
            return self.not_an_object(caps, manifest);
        }
        match super::inbound::foreign_version(manifest) {
            Some(super::inbound::ForeignVersion::Missing) => return self.unversioned(caps),
            Some(super::inbound::ForeignVersion::Other(text)) => {
                return self.other_version(caps, text)
            }
            None => {}
        }
        let count = crate::manifest::feature_set_count(manifest);
        let limit = self.rules.max_feature_sets;
        if count > limit {
            return self.too_many_feature_sets(caps, count, limit);
        }
        let wall = self.wall(now);
        let reviewed = ManifestReview::initial(
            manifest,
            Some(caps),
            self.p.policy.iter().map(String::as_str),
            wall,
        );
        let (mut review, findings) = match reviewed {
            Ok(r) => r,
            Err(crate::manifest::review::ReviewError::Policy(p)) => {
                return self.connected(Err(p.into()))
            }
            Err(other) => {
                return self.connected(Err(ConnectError::BadInitialize(other.to_string())))
            }
        };
        for d in crate::session::policy_state::finding_diagnostics(&findings) {
            self.diag(d);
        }
        let hg = match HostGrant::compute(
            review.advertised(),
            self.p.policy.iter().map(String::as_str),
        ) {
            Ok(hg) => hg,
            Err(e) => return self.connected(Err(e.into())),
        };
        if let Some(early) = self.early_patterns.take() {
            review.set_valid_patterns(early.into_vec());
        }
        self.p.review = Some(std::sync::Arc::new(review));
        let params = self.p.initial_params(&hg);
        self.notify_initialized();
        // §5.3: the Request goes out even when nothing is enabled or disabled.
        self.phase = Phase::PolicyPending;
        let timeout = self.rules.policy_timeout;
        self.send_request(
            FeatureSetsUpdate::NAME,
            params,
            Purpose::InitialPolicy(hg),
            (now, timeout),
        );
    }

    /// A server whose manifest names MCPL version `text` (JSON text, clipped), not 0.5: reported as
    /// the `unsupported_version` finding a review gives it, and served as plain MCP
    /// ([`McpOnlyReason::OtherVersion`]).
    fn other_version(&mut self, caps: &Value, text: String) {
        let message = format!(
            "`version` is {text}; this host speaks MCPL \"0.5\": the server is served as \
             plain MCP (§3.3)"
        );
        let reason = McpOnlyReason::OtherVersion(text);
        self.served_as_mcp(
            caps,
            reason,
            ("unsupported_version", "§5.1", "version"),
            message,
        );
    }

    /// A server whose manifest has no `version`: reported as the `missing_version` finding
    /// a review gives it, and served as plain MCP ([`McpOnlyReason::Unversioned`]).
    fn unversioned(&mut self, caps: &Value) {
        let message = "the manifest has no `version` (App. B.3 requires one; add \
                       \"version\": \"0.5\"): the server is served as plain MCP (§3.3)";
        let reason = McpOnlyReason::Unversioned;
        self.served_as_mcp(
            caps,
            reason,
            ("missing_version", "§5.1", "version"),
            message.into(),
        );
    }

    /// A server whose manifest declares more feature sets than
    /// [`HostRules::max_feature_sets`]: refused before it is copied or reviewed (§6.1 sets no
    /// number), reported as the `too_many_feature_sets` finding, and served as plain MCP
    /// ([`McpOnlyReason::TooManyFeatureSets`]): a valid MCP server keeps its MCP connection,
    /// and nothing of MCPL is granted (fail closed, §3.3). Before, `connect` failed whole.
    fn too_many_feature_sets(&mut self, caps: &Value, count: usize, limit: usize) {
        let message = format!(
            "{}; nothing of it was reviewed: the server is served as plain MCP (§3.3)",
            ConnectError::TooManyFeatureSets { count, limit }
        );
        let reason = McpOnlyReason::TooManyFeatureSets { count, limit };
        self.served_as_mcp(
            caps,
            reason,
            ("too_many_feature_sets", "§6.1", "featureSets"),
            message,
        );
    }

    /// A server whose `experimental.mcpl` is no object: reported as the `manifest_not_object`
    /// finding a review gives a fetched one (at the manifest's root, path `""`), and served
    /// as plain MCP ([`McpOnlyReason::NotAnObject`]).
    fn not_an_object(&mut self, caps: &Value, manifest: &Value) {
        let text = crate::manifest::digest::clipped(&manifest.to_string());
        let kind = crate::jsonrpc::json_type_name(manifest);
        let message = format!(
            "the manifest is a JSON {kind}; experimental.mcpl must be an object (§5.1): the \
             server is served as plain MCP (§3.3)"
        );
        let reason = McpOnlyReason::NotAnObject(text);
        self.served_as_mcp(caps, reason, ("manifest_not_object", "§5.1", ""), message);
    }

    /// A server whose `capabilities.experimental` is there and no object (MCP gives it as an
    /// object of experimental capabilities; §5.1 puts `mcpl` in it) advertises nothing, and
    /// is still served as plain MCP ([`McpOnlyReason::NotAdvertised`]); the defect is
    /// reported as the `experimental_not_object` finding, not read as silence. Reading
    /// (`protocol::given`): `null` is absence, as a serializer writing it for "not set"
    /// means, so it is not reported.
    fn experimental_not_object(&mut self, caps: &Value) {
        let Some(found) = caps
            .get("experimental")
            .filter(|x| !x.is_null() && !x.is_object())
        else {
            return;
        };
        let kind = crate::jsonrpc::json_type_name(found);
        let message = format!(
            "capabilities.experimental is a JSON {kind}, not an object (MCP; §5.1 advertises \
             MCPL in it as experimental.mcpl): no MCPL is advertised, the server is served as \
             plain MCP (§3.3)"
        );
        self.diag(HostDiagnostic::ManifestFinding {
            code: "experimental_not_object",
            section: "§5.1",
            path: "capabilities.experimental".into(),
            message,
        });
    }

    /// Serves the server as plain MCP for `reason`, reporting finding `code` at `path`.
    fn served_as_mcp(
        &mut self,
        caps: &Value,
        reason: McpOnlyReason,
        (code, section, path): (&'static str, &'static str, &str),
        message: String,
    ) {
        self.diag(HostDiagnostic::ManifestFinding {
            code,
            section,
            path: path.into(),
            message,
        });
        self.serve_as_mcp(caps, reason);
    }

    /// Serves the server as plain MCP for `reason` from its `initialize` on (§3.3): the
    /// grant at most `tools` and final, `notifications/initialized` sent, connected. The
    /// one path of every server so served, advertising MCPL or not.
    fn serve_as_mcp(&mut self, caps: &Value, reason: McpOnlyReason) {
        match self.p.mcp_only(caps, reason) {
            Ok(()) => {
                self.notify_initialized();
                self.connected(Ok(()));
            }
            Err(e) => self.connected(Err(e.into())),
        }
    }

    pub(super) fn notify_initialized(&mut self) {
        self.transmit(Message::Notification(Notification {
            method: Initialized::NAME.into(),
            params: None,
        }));
    }

    pub(super) fn on_initial_policy(&mut self, now: Instant, hg: HostGrant, answer: Answer) {
        let decision = match &answer {
            Answer::Result(v) => {
                let receipt = self.read_receipt(v);
                rules::initial_decision(PolicyAnswer::Receipt(receipt))
            }
            Answer::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                rules::initial_decision(PolicyAnswer::MethodNotFound)
            }
            Answer::Error(e) => {
                rules::initial_decision(PolicyAnswer::Failed(e.message.to_string()))
            }
            Answer::Timeout => rules::initial_decision(PolicyAnswer::Timeout),
        };
        let wall = self.wall(now);
        let Ok((told_wider, effects)) = self.p.decide_initial(&hg, decision, wall) else {
            return self.connected(Err(ConnectError::Refused));
        };
        self.effects(effects);
        // Fetches that failed during the exchange count too (§17.5).
        let suspended = self
            .p
            .suspend_if_due(self.rules.suspend_after_failures, wall);
        let told_wider = told_wider | suspended.entered.is_some();
        self.effects(suspended);
        if told_wider {
            // §6.7: the server may believe the grant it was told; tell the reduction.
            self.phase = Phase::Reducing;
            self.send_reduction(now);
        } else {
            self.connected(Ok(()));
        }
    }
}
