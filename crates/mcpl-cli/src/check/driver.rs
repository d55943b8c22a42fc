//! The live run: a strict host that performs the handshake, sends policy, exercises the
//! server and judges everything it sends on its own. Every wait is bounded by the step
//! timeout, so an MCP-only, 0.4 or silent server still gets a complete report.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use mcpl::capability::{self, Capability, CapabilitySet, Grant, Requirement};
use mcpl::jsonrpc::{codes, ErrorObject, Message, RequestId};
use mcpl::policy::{self, FeatureSets, HostGrant};
use serde_json::{json, Value};

use super::conn::{Conn, Event};
use super::inspect;
use super::report::{Recorder, Status};

/// How a request of ours ended.
#[derive(Debug)]
enum Reply {
    Result(Value),
    Error(ErrorObject),
    Timeout,
    Closed(String),
}

impl Reply {
    fn describe(&self) -> String {
        match self {
            Reply::Result(_) => "a result".into(),
            Reply::Error(e) => format!("error {} {:?}", e.code, e.message),
            Reply::Timeout => "no response within the timeout".into(),
            Reply::Closed(why) => format!("no response: {why}"),
        }
    }
}

/// What handling one event came to.
enum Handled {
    /// The awaited response arrived.
    Awaited(Reply),
    /// Anything else; keep waiting.
    Continue,
    /// The connection ended.
    Closed,
}

/// Timing knobs of a run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Bound on every single wait.
    pub step: Duration,
    /// How long to keep listening for unsolicited messages after the last step.
    pub watch: Duration,
}

/// Host state of a run.
struct Session {
    conn: Conn,
    timing: Timing,
    next_id: i64,
    closed: Option<String>,
    /// A valid accepted receipt was received: privileged inbound methods are now judged
    /// against the grant (§5.3).
    ready: bool,
    /// The server answered the policy Request with a result: it has, by its own account,
    /// received its policy, so privileged messages from now on are not "before ready".
    receipt_seen: bool,
    grant: Grant,
    declared: BTreeSet<String>,
    available: BTreeSet<String>,
    decls: FeatureSets,
    /// Declaration mismatches seen (§6.4), as "set exercises paths".
    mismatches: Vec<String>,
    /// Feature-set-tagged uses seen (push events, hook results), for the §6.4 check.
    tagged_uses: usize,
    registered: BTreeSet<String>,
    junk: Vec<String>,
    /// While a batch is being handled: the answers to its requests, sent as one array.
    batch: Option<Vec<Value>>,
    /// Items of a batch that came after the awaited response: handled once the caller has
    /// applied that response ([`Session::settle`]), so they are judged in wire order.
    deferred: std::collections::VecDeque<Value>,
    /// The policy Request has been sent: from then on a privileged message is no longer
    /// the grant-carrying Notification's doing.
    policy_sent: bool,
    /// Ids of our requests that timed out: a late answer is lateness (already reported by
    /// the step that waited), not an invalid frame.
    timed_out: HashSet<RequestId>,
    invalid: Vec<String>,
    privileged_before_ready: Vec<String>,
    /// The grant-carrying `featureSets/update` Notification has been sent (§6.7 probe):
    /// privileged messages from then until the receipt are judged by that probe.
    grant_notified: bool,
    /// Privileged messages after that Notification and before the receipt.
    ready_by_notification: Vec<String>,
    /// Set when the receipt was a refusal or malformed: what it was, for the report. The
    /// server is then not operating under the policy (§5.3, §6.7), so nothing is granted.
    unaccepted: Option<&'static str>,
    /// Privileged messages after such a receipt.
    privileged_unaccepted: Vec<String>,
    /// Privileged messages judged after an accepted receipt (§5.4).
    privileged_after_ready: usize,
    /// Those outside the grant.
    outside_grant: Vec<String>,
    /// The manifest `mcpl/manifest` returned, for the unknown-member probe.
    fetched: Option<Value>,
    /// A `ping` was answered (result or error): it can show the server is still answering.
    ping_answered: bool,
    push_seen: usize,
    inference_seen: usize,
    descriptors_seen: usize,
    incoming_seen: usize,
    register_seen: usize,
    changed_seen: usize,
    /// The revision the last `mcpl/manifestChanged` announced, until it is checked.
    announced: Option<String>,
    /// Every domain any `mcpl/manifestChanged` announced (§17.3).
    announced_domains: BTreeSet<String>,
    /// The manifest presented at `initialize`, to derive what changed since.
    initial_manifest: Option<Value>,
    /// The grant sent in the initial policy, reused by the reduction probe.
    host_grant: Option<HostGrant>,
    /// Feature sets the reduction probe disabled (§6.7): unavailable from the moment the
    /// Request is sent (revocation takes effect first).
    reduced: BTreeSet<String>,
    /// The server answered the reduction: from here on, a use of a set in `reduced` breaks
    /// "servers MUST immediately respect a reduction" (§6.7). Before the answer, the server
    /// may not have read it yet; such a use is refused (`-32001`) but is not its failure.
    reduction_answered: bool,
    /// Feature-set-tagged messages judged after the reduction was answered.
    after_reduction: usize,
    /// Uses of a disabled set, or of a capability the reduction revoked, after the reduction
    /// was answered.
    reduction_violations: Vec<String>,
    /// The grant before the reduction probe narrowed it (set when the reduction is sent).
    pre_reduction_grant: Option<Grant>,
    /// The set the first hook injected under, for the narrowing-Notification probe.
    hook_set: Option<String>,
    /// Sets disabled by a `featureSets/update` Notification (§6.7 probe); every later
    /// Request keeps them disabled.
    notified_disabled: BTreeSet<String>,
    /// The server has answered a ping sent after that Notification: it has read it.
    narrowing_read: bool,
    /// Uses of a set disabled by that Notification once it was read.
    narrowing_violations: Vec<String>,
    /// Of those, how many were push events or inference requests, by the `declared` check
    /// id that would otherwise count them as conforming.
    reduction_hits: BTreeMap<&'static str, usize>,
    rec: Recorder,
}

/// Host capabilities the checker advertises (§5.2).
fn host_capabilities() -> Value {
    json!({
        "experimental": { "mcpl": {
            "version": "0.5",
            "pushEvents": true,
            "contextHooks": { "beforeInference": true },
            "inferenceLifecycle": true,
            "channels": { "register": true, "publish": true, "incoming": true },
            "featureSets": true
        }}
    })
}

/// The `ModelInfo` the checker presents (§10.1 `model`, §12.2).
fn checker_model() -> Value {
    json!({ "id": "mcpl-check", "vendor": "mcpl", "contextWindow": 8192, "capabilities": [] })
}

/// The checker's host policy: everything in the vocabulary except observe, so `userMessage:
/// null` handling and injection-without-observe are exercised (§10.1).
fn host_policy() -> Vec<&'static str> {
    Capability::ALL
        .into_iter()
        .filter(|c| *c != Capability::Observe)
        .map(Capability::as_str)
        .collect()
}

/// Runs every check against an open connection and returns the recorder.
pub fn run(conn: Conn, timing: Timing, rec: Recorder) -> Recorder {
    let mut s = Session {
        conn,
        timing,
        next_id: 0,
        closed: None,
        ready: false,
        receipt_seen: false,
        grant: Grant::default(),
        declared: BTreeSet::new(),
        available: BTreeSet::new(),
        decls: FeatureSets::default(),
        mismatches: Vec::new(),
        tagged_uses: 0,
        registered: BTreeSet::new(),
        junk: Vec::new(),
        batch: None,
        deferred: std::collections::VecDeque::new(),
        policy_sent: false,
        timed_out: HashSet::new(),
        invalid: Vec::new(),
        privileged_before_ready: Vec::new(),
        grant_notified: false,
        ready_by_notification: Vec::new(),
        unaccepted: None,
        privileged_unaccepted: Vec::new(),
        privileged_after_ready: 0,
        outside_grant: Vec::new(),
        fetched: None,
        ping_answered: false,
        push_seen: 0,
        inference_seen: 0,
        descriptors_seen: 0,
        incoming_seen: 0,
        register_seen: 0,
        changed_seen: 0,
        announced: None,
        announced_domains: BTreeSet::new(),
        initial_manifest: None,
        host_grant: None,
        reduced: BTreeSet::new(),
        reduction_answered: false,
        after_reduction: 0,
        reduction_violations: Vec::new(),
        reduction_hits: BTreeMap::new(),
        pre_reduction_grant: None,
        hook_set: None,
        notified_disabled: BTreeSet::new(),
        narrowing_read: false,
        narrowing_violations: Vec::new(),
        rec,
    };
    s.exercise();
    s.watch();
    s.narrowing_notification();
    s.reduction();
    s.contradiction();
    s.check_announced();
    s.conclude();
    s.rec
}

impl Session {
    fn exercise(&mut self) {
        // §4.1 / MCP: initialize, then notifications/initialized.
        let init = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": host_capabilities(),
                "clientInfo": { "name": "mcpl-check", "version": env!("CARGO_PKG_VERSION") }
            }),
        );
        let init = match init {
            Reply::Result(r) => {
                self.rec
                    .record("initialize.answered", Status::Pass, "initialize answered");
                r
            }
            other => {
                self.rec.record(
                    "initialize.answered",
                    Status::Fail,
                    format!("initialize got {}", other.describe()),
                );
                self.rec
                    .skip_rest("no initialize result: nothing further can be checked");
                return;
            }
        };
        let capabilities = init.get("capabilities").cloned().unwrap_or(Value::Null);
        let mcpl = capabilities
            .get("experimental")
            .and_then(|e| e.get("mcpl"))
            .cloned();
        let _ = self.notify("notifications/initialized", json!({}));
        let mcpl = match mcpl {
            Some(m @ Value::Object(_)) => {
                self.rec.record(
                    "initialize.mcpl-present",
                    Status::Pass,
                    "experimental.mcpl advertised",
                );
                m
            }
            Some(other) => {
                self.rec.record(
                    "initialize.mcpl-present",
                    Status::Fail,
                    format!("experimental.mcpl is not an object: {other}"),
                );
                self.finish_mcp_only();
                return;
            }
            None => {
                self.rec.record(
                    "initialize.mcpl-present",
                    Status::Fail,
                    "no capabilities.experimental.mcpl: an MCP-only server (§3.3)",
                );
                self.finish_mcp_only();
                return;
            }
        };
        self.judge_manifest(&mcpl);
        self.initial_manifest = Some(mcpl.clone());

        // §5.3: the initial policy Request, granting what is advertised except observe.
        let (sets, _) = FeatureSets::from_mcpl(&mcpl);
        self.declared = sets.sets.keys().cloned().collect();
        self.decls = sets.clone();
        let advertised = capability::advertised_from_capabilities(&capabilities).capabilities;
        let host_grant = match HostGrant::compute(advertised, host_policy()) {
            Ok(g) => g,
            Err(e) => {
                // The policy is ours and built from the vocabulary; this cannot be input.
                self.rec
                    .skip_rest(&format!("internal: host policy invalid: {e}"));
                return;
            }
        };
        self.quiet_windows(&host_grant);
        self.policy_sent = true;
        self.policy(&host_grant, &sets);
        self.settle();

        self.fetch_manifest(&mcpl);
        self.unknown_method();
        self.before_inference(&host_grant);
        self.channel_probes();
        self.unknown_member();
        self.rollback_unknown_checkpoint();
        self.close_unknown_channel();
        self.defensive_lifecycle();
        self.host_grant = Some(host_grant);
    }

    /// An MCP-only server: everything MCPL is skipped (§3.3), but what it sends on its own
    /// is still judged, and an unknown method must still get an error.
    fn finish_mcp_only(&mut self) {
        self.unknown_method();
        self.rec.skip_all(
            &[
                "initialize.version",
                "initialize.advertisement-shape",
                "manifest.feature-sets-shape",
                "manifest.uses-valid",
                "manifest.identifier-charset",
                "manifest.revision-matches-digest",
                "policy.request-answered",
                "policy.receipt-shape",
                "policy.refusal-names-fallback",
                "policy.no-invented-mode",
                "policy.no-privileged-unless-accepted",
                "manifest.fetch",
                "hooks.answers-without-observe",
                "hooks.injection-positions",
                "hooks.injection-shape",
                "channels.list-answered",
                "channels.unknown-channel-error",
                "policy.reduction-answered",
                "policy.reduction-respected",
                "policy.notification-narrowing-respected",
                "policy.notification-not-ready",
                "policy.contradiction-rejected",
                "grant.messages-within-grant",
                "hooks.feature-set-declared",
                "rpc.unknown-members-ignored",
                "state.rollback-unknown-checkpoint",
                "channels.close-unknown-error",
                "lifecycle.defensive",
            ],
            "server does not advertise MCPL (§3.3)",
        );
    }

    fn judge_manifest(&mut self, mcpl: &Value) {
        let (st, d) = inspect::version(mcpl);
        self.rec.record("initialize.version", st, d);
        let (st, d) = inspect::advertisement_shape(mcpl);
        self.rec.record("initialize.advertisement-shape", st, d);
        let (st, d) = inspect::feature_sets_shape(mcpl);
        self.rec.record("manifest.feature-sets-shape", st, d);
        let (st, d) = inspect::uses_valid(mcpl);
        self.rec.record("manifest.uses-valid", st, d);
        let (st, d) = inspect::identifier_charset(mcpl);
        self.rec.record("manifest.identifier-charset", st, d);
        let (st, d) = inspect::revision_matches(mcpl);
        self.rec.record("manifest.revision-matches-digest", st, d);
    }

    /// Before the policy Request (§5.3, §6.7): a quiet window in which nothing privileged may
    /// come (a fail-open server starts at once, AUDIT-001 §2.7), then the grant sent as a
    /// Notification, which must not make the server ready, and a second window. Each window
    /// opens with a `ping` round trip, so a server that answers in order has acted on
    /// everything before it, and lasts `--watch`.
    fn quiet_windows(&mut self, host_grant: &HostGrant) {
        self.window();
        if self.closed.is_some() {
            return;
        }
        self.grant_notified = true;
        let _ = self.notify("featureSets/update", host_grant.update_params(None, &[]));
        self.window();
    }

    /// A `ping` round trip (its answer is not judged), then listening for `--watch`.
    fn window(&mut self) {
        if let Reply::Result(_) | Reply::Error(_) = self.request("ping", json!({})) {
            self.ping_answered = true;
        }
        self.watch();
    }

    fn policy(&mut self, host_grant: &HostGrant, sets: &FeatureSets) {
        let params = host_grant.update_params(None, &[]);
        let reply = self.request("featureSets/update", params);
        let result = match reply {
            Reply::Result(r) => {
                self.receipt_seen = true;
                self.rec
                    .record("policy.request-answered", Status::Pass, "receipt received");
                r
            }
            Reply::Error(e) => {
                self.rec.record(
                    "policy.request-answered",
                    Status::Pass,
                    format!("answered with error {}", e.code),
                );
                self.rec.record(
                    "policy.receipt-shape",
                    Status::Fail,
                    format!(
                        "answered with error {} {:?}, not a degradation receipt",
                        e.code, e.message
                    ),
                );
                self.skip_receipt_rules("no receipt");
                return;
            }
            other => {
                self.rec.record(
                    "policy.request-answered",
                    Status::Fail,
                    format!("featureSets/update Request got {}", other.describe()),
                );
                self.rec
                    .record("policy.receipt-shape", Status::Skip, "no receipt to judge");
                self.skip_receipt_rules("no receipt to judge");
                return;
            }
        };
        let report = policy::parse_receipt(&result);
        let (shape, fallback, mode) = inspect::receipt_defects(&report);
        if shape.is_empty() {
            self.rec
                .record("policy.receipt-shape", Status::Pass, "well-formed receipt");
        } else {
            self.rec
                .record("policy.receipt-shape", Status::Fail, shape.join("; "));
        }
        match report.accepted {
            Some(false) if fallback.is_empty() => self.rec.record(
                "policy.refusal-names-fallback",
                Status::Pass,
                "refusal names its fallback",
            ),
            Some(false) => self.rec.record(
                "policy.refusal-names-fallback",
                Status::Fail,
                fallback.join("; "),
            ),
            _ => self.rec.record(
                "policy.refusal-names-fallback",
                Status::Skip,
                "policy was not refused",
            ),
        }
        let degraded = result
            .get("unavailableFeatures")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if report.accepted == Some(true) {
            if !mode.is_empty() {
                self.rec.record(
                    "policy.no-invented-mode",
                    Status::Fail,
                    format!("mode {} with nothing degraded", result["mode"]),
                );
            } else if degraded {
                self.rec.record(
                    "policy.no-invented-mode",
                    Status::Pass,
                    "features degraded; mode may be present",
                );
            } else {
                self.rec.record(
                    "policy.no-invented-mode",
                    Status::Pass,
                    "nothing degraded and mode omitted",
                );
            }
        } else {
            self.rec.record(
                "policy.no-invented-mode",
                Status::Skip,
                "no accepted receipt",
            );
        }
        if report.accepted != Some(true) || !shape.is_empty() {
            // §6.7: a refused policy is not operated under, and the strict host does not take
            // a malformed receipt as acceptance: not ready, nothing granted, nothing available.
            self.unaccepted = Some(if report.accepted == Some(false) {
                "a refusal receipt"
            } else {
                "a malformed receipt"
            });
        } else {
            // Ready (§5.3). Feature sets usable under the grant, for push/event replies.
            self.ready = true;
            self.grant = host_grant.effective;
            let statuses = policy::derive(sets, &self.grant, &policy::Selection::default());
            self.available = statuses
                .iter()
                .filter(|(_, st)| st.is_available())
                .map(|(n, _)| n.clone())
                .collect();
        }
    }

    fn skip_receipt_rules(&mut self, why: &str) {
        self.rec
            .record("policy.refusal-names-fallback", Status::Skip, why);
        self.rec
            .record("policy.no-invented-mode", Status::Skip, why);
    }

    fn fetch_manifest(&mut self, initial: &Value) {
        let supports = initial.get("revision").is_some();
        match self.request("mcpl/manifest", json!({})) {
            Reply::Result(m) if m.is_object() => {
                self.fetched = Some(m.clone());
                let (st, d) = inspect::revision_matches(&m);
                if st == Status::Fail {
                    self.rec.record(
                        "manifest.revision-matches-digest",
                        Status::Fail,
                        format!("fetched manifest: {d}"),
                    );
                }
                let same = same_manifest(&m, initial);
                if same || self.changed_seen > 0 {
                    self.rec
                        .record("manifest.fetch", Status::Pass, "complete manifest returned");
                } else {
                    self.rec.record(
                        "manifest.fetch",
                        Status::Fail,
                        "fetched manifest differs from initialize's with no mcpl/manifestChanged",
                    );
                }
            }
            Reply::Result(other) => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!("result is not the manifest object: {other}"),
            ),
            Reply::Error(e) if !supports => self.rec.record(
                "manifest.fetch",
                Status::Pass,
                format!(
                    "not supported (no revision); answered with error {}",
                    e.code
                ),
            ),
            Reply::Error(e) => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!(
                    "advertises a revision (§17) but mcpl/manifest failed: {} {:?}",
                    e.code, e.message
                ),
            ),
            other => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!(
                    "mcpl/manifest got {} (§6.6: must error, not silence)",
                    other.describe()
                ),
            ),
        }
    }

    /// §8: servers tolerate and ignore request members they do not know. `mcpl/manifest`
    /// with an extra params member must return the same manifest.
    fn unknown_member(&mut self) {
        let id = "rpc.unknown-members-ignored";
        let Some(before) = self.fetched.clone() else {
            self.rec
                .record(id, Status::Skip, "no manifest fetched to compare with");
            return;
        };
        let params = json!({ "xMcplCheckProbe": { "ignore": "me" } });
        match self.request("mcpl/manifest", params) {
            Reply::Result(m) => {
                let same = same_manifest(&m, &before);
                if same || self.changed_seen > 0 {
                    self.rec.record(
                        id,
                        Status::Pass,
                        "mcpl/manifest with an unknown params member answered as without it",
                    );
                } else {
                    self.rec.record(
                        id,
                        Status::Fail,
                        "mcpl/manifest with an unknown params member returned another manifest",
                    );
                }
            }
            r @ (Reply::Closed(_) | Reply::Timeout) => {
                self.no_answer(id, "mcpl/manifest with an unknown params member: ", r)
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "mcpl/manifest with an unknown params member got error {} {:?}",
                    e.code, e.message
                ),
            ),
        }
    }

    /// §8.5, §8.7: `state/rollback` to a checkpoint the server never issued is refused with
    /// `-32005`, asked of the first available feature set that declares `rollback: true`.
    fn rollback_unknown_checkpoint(&mut self) {
        let id = "state.rollback-unknown-checkpoint";
        if !self.ready || !self.grant.allows(Capability::Tools) {
            self.rec.record(id, Status::Skip, "tools not granted");
            return;
        }
        let set = self
            .decls
            .sets
            .iter()
            .find(|(name, d)| {
                self.available.contains(*name)
                    && d.extra.get("rollback") == Some(&Value::Bool(true))
            })
            .map(|(name, _)| name.clone());
        let Some(set) = set else {
            let why = "no available feature set declares rollback";
            self.rec.record(id, Status::Skip, why);
            return;
        };
        let checkpoint = "mcpl-check-no-such-checkpoint";
        let params = json!({ "featureSet": set, "checkpoint": checkpoint });
        match self.request("state/rollback", params) {
            Reply::Error(e) if e.code == codes::CHECKPOINT_NOT_FOUND => {
                self.rec
                    .record(id, Status::Pass, format!("{set}: answered {}", e.code))
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "{set}: answered {} {:?}; a checkpoint not found is -32005 (§8.7)",
                    e.code, e.message
                ),
            ),
            // §8.6's `success: false` is for a rollback that could not undo its effects.
            Reply::Result(r) if r.get("success") == Some(&Value::Bool(false)) => self.rec.record(
                id,
                Status::Warn,
                format!("{set}: answered success false, not -32005: {r}"),
            ),
            Reply::Result(r) => self.rec.record(
                id,
                Status::Fail,
                format!("{set}: rolled back to a checkpoint it never issued: {r}"),
            ),
            r @ (Reply::Closed(_) | Reply::Timeout) => self.no_answer(id, &format!("{set}: "), r),
        }
    }

    /// §14.3, §14.6: `channels/close` for a channel the server never registered is refused
    /// with `-32023` (AUDIT-001 §4.2 item 9: `-32004` instead).
    fn close_unknown_channel(&mut self) {
        let id = "channels.close-unknown-error";
        if !self.ready || !self.grant.allows(Capability::ChannelsLifecycle) {
            self.rec
                .record(id, Status::Skip, "channels.lifecycle not granted");
            return;
        }
        let params = json!({ "channelId": "mcpl-check:no-such-channel" });
        match self.request("channels/close", params) {
            Reply::Error(e) if e.code == codes::UNKNOWN_CHANNEL => {
                self.rec
                    .record(id, Status::Pass, format!("answered {}", e.code))
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "answered {} {:?}; an unknown channel is -32023 (§14.6)",
                    e.code, e.message
                ),
            ),
            // §14.6 gives -32023 for an unknown channel; a result (even `closed: false`)
            // leaves the host unable to tell an unknown channel from a closed one.
            Reply::Result(r) => self.rec.record(
                id,
                Status::Warn,
                format!("answered with a result, not -32023: {r}"),
            ),
            r @ (Reply::Closed(_) | Reply::Timeout) => self.no_answer(id, "", r),
        }
    }

    /// §10.5: lifecycle consumers are defensive. A terminal with no `started`, then a turn
    /// with two terminals, must leave the server answering (here: a `ping`).
    fn defensive_lifecycle(&mut self) {
        let id = "lifecycle.defensive";
        if !self.ready || !self.grant.allows(Capability::InferenceLifecycle) {
            self.rec
                .record(id, Status::Skip, "inferenceLifecycle not granted");
            return;
        }
        if !self.ping_answered {
            let why = "the server answered no ping: nothing to tell it is still answering";
            self.rec.record(id, Status::Skip, why);
            return;
        }
        let phase = |inference: &str, phase: &str| {
            json!({ "inferenceId": inference, "conversationId": "conv_mcpl_check",
                    "turnIndex": 0, "phase": phase })
        };
        for p in [
            phase("inf_mcpl_check_orphan", "completed"),
            phase("inf_mcpl_check_twice", "started"),
            phase("inf_mcpl_check_twice", "completed"),
            phase("inf_mcpl_check_twice", "aborted"),
        ] {
            if !self.notify("inference/lifecycle", p) {
                break;
            }
        }
        match self.request("ping", json!({})) {
            Reply::Result(_) | Reply::Error(_) => self.rec.record(
                id,
                Status::Pass,
                "still answering after an orphan terminal and a duplicate terminal",
            ),
            other => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "after an orphan terminal and a duplicate terminal, a ping got {}",
                    other.describe()
                ),
            ),
        }
    }

    fn unknown_method(&mut self) {
        let id = "rpc.unknown-method-errors";
        match self.request("mcpl-check/no-such-method", json!({})) {
            Reply::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                self.rec.record(id, Status::Pass, "answered -32601")
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Warn,
                format!("answered error {} rather than -32601", e.code),
            ),
            Reply::Result(_) => {
                self.rec
                    .record(id, Status::Fail, "answered an unknown method with a result")
            }
            other => self.rec.record(id, Status::Fail, other.describe()),
        }
    }

    /// Host→server channel requests a server must answer, never leave hanging (AUDIT-001
    /// §4.2 items 5 and 9): `channels/list` (§14.3), and `channels/publish` to a channel id
    /// the server never registered, which must be refused `-32023` (§14.6).
    fn channel_probes(&mut self) {
        let list = "channels.list-answered";
        let unknown = "channels.unknown-channel-error";
        if !self.ready {
            let why = "policy not established: no channel request is sent (§5.3)";
            self.rec.skip_all(&[list, unknown], why);
            return;
        }
        if !self.grant.allows(Capability::ChannelsRegister) {
            self.rec
                .record(list, Status::Skip, "channels.register not advertised");
        } else {
            match self.request("channels/list", json!({})) {
                Reply::Result(r) => match r.get("channels") {
                    Some(Value::Array(a)) => self.rec.record(
                        list,
                        Status::Pass,
                        format!("listed {} channel(s)", a.len()),
                    ),
                    _ => {
                        self.rec
                            .record(list, Status::Fail, "result has no channels array (§14.3)")
                    }
                },
                Reply::Error(e) => self.rec.record(
                    list,
                    Status::Warn,
                    format!(
                        "answered error {} although channels.register is advertised",
                        e.code
                    ),
                ),
                other => self.rec.record(list, Status::Fail, other.describe()),
            }
        }
        if !self.grant.allows(Capability::ChannelsPublish) {
            self.rec
                .record(unknown, Status::Skip, "channels.publish not advertised");
            return;
        }
        let params = json!({
            "conversationId": "conv_mcpl_check",
            "channelId": "mcpl-check:never-registered",
            "content": [ { "type": "text", "text": "mcpl check probe: not to be delivered" } ]
        });
        match self.request("channels/publish", params) {
            Reply::Error(e) if e.code == codes::UNKNOWN_CHANNEL => {
                self.rec.record(unknown, Status::Pass, "answered -32023")
            }
            Reply::Error(e) => self.rec.record(
                unknown,
                Status::Fail,
                format!(
                    "answered error {} rather than -32023 Unknown channel",
                    e.code
                ),
            ),
            Reply::Result(_) => self.rec.record(
                unknown,
                Status::Fail,
                "answered a publish to a channel it never registered with a result",
            ),
            other => self.rec.record(unknown, Status::Fail, other.describe()),
        }
    }

    fn before_inference(&mut self, host_grant: &HostGrant) {
        let hooks = [
            "hooks.answers-without-observe",
            "hooks.injection-positions",
            "hooks.injection-shape",
            "hooks.feature-set-declared",
        ];
        let [answered, positions, shape, hook_set] = hooks;
        let inject = [
            Capability::InjectSystem,
            Capability::InjectBeforeUser,
            Capability::InjectAfterUser,
        ];
        if !inject.iter().any(|c| host_grant.advertised.contains(*c)) {
            let why = "no injection position advertised";
            self.rec.skip_all(&hooks, why);
            return;
        }
        if !self.ready {
            let why = if self.receipt_seen {
                "no accepted, well-formed receipt: the host does not fan out hooks (§5.3, §6.7)"
            } else {
                "policy not established: the host must not fan out hooks (§5.3)"
            };
            self.rec.skip_all(&hooks, why);
            return;
        }
        if !policy::before_inference_applies(&self.grant) {
            let why = "injection not granted";
            self.rec.skip_all(&hooks, why);
            return;
        }
        let params = self.hook_params(0);
        let result = match self.request("context/beforeInference", params) {
            Reply::Result(r) => {
                self.rec.record(
                    answered,
                    Status::Pass,
                    "answered with userMessage null and observe denied",
                );
                r
            }
            other => {
                self.rec.record(
                    answered,
                    Status::Fail,
                    format!(
                        "beforeInference (userMessage null) got {}",
                        other.describe()
                    ),
                );
                let why = "no beforeInference result";
                self.rec.skip_all(&[positions, shape, hook_set], why);
                return;
            }
        };
        let defects = inspect::before_inference_defects(&result);
        if defects.is_empty() {
            self.rec
                .record(shape, Status::Pass, "well-formed beforeInference result");
        } else {
            self.rec.record(shape, Status::Fail, defects.join("; "));
        }
        // Authorized at response-receipt against the current grant (§5.4).
        let injections = match result.get("contextInjections") {
            None => {
                self.rec
                    .record(positions, Status::Pass, "no injections returned");
                self.rec
                    .record(hook_set, Status::Skip, "no injections returned");
                return;
            }
            Some(Value::Array(a)) => a.clone(),
            Some(other) => {
                self.rec.record(
                    positions,
                    Status::Fail,
                    format!("contextInjections is not an array: {other}"),
                );
                self.rec
                    .record(hook_set, Status::Skip, "no injection list to attribute");
                return;
            }
        };
        // §6.5: the response names the set its injections come under, and a host takes
        // them only from a declared set the grant leaves available.
        let named = result.get("featureSet").and_then(Value::as_str);
        match named {
            _ if injections.is_empty() => {
                self.rec
                    .record(hook_set, Status::Skip, "no injections returned")
            }
            // A missing featureSet is hooks.injection-shape's finding.
            None => self
                .rec
                .record(hook_set, Status::Skip, "no featureSet named"),
            Some(fs) if !self.declared.contains(fs) => self.rec.record(
                hook_set,
                Status::Fail,
                format!("injections under featureSet {fs:?}, which is not declared"),
            ),
            Some(fs) if !self.available.contains(fs) => self.rec.record(
                hook_set,
                Status::Fail,
                format!("injections under featureSet {fs:?}, which the grant leaves unavailable"),
            ),
            Some(fs) => {
                self.hook_set = Some(fs.to_owned());
                self.rec.record(
                    hook_set,
                    Status::Pass,
                    format!("injections under {fs:?}, declared and available"),
                )
            }
        }
        if let Some(fs) = result.get("featureSet").and_then(Value::as_str) {
            for inj in &injections {
                let leaf = inj
                    .get("position")
                    .and_then(Value::as_str)
                    .and_then(Capability::for_position);
                if let Some(leaf) = leaf {
                    self.note_use(fs.to_owned(), Requirement::One(leaf));
                }
            }
        }
        let mut bad = Vec::new();
        for (i, inj) in injections.iter().enumerate() {
            if let Err(e) = policy::authorize_injection(&self.grant, inj) {
                bad.push(format!("contextInjections[{i}]: {e}"));
            }
        }
        if bad.is_empty() {
            self.rec.record(
                positions,
                Status::Pass,
                format!(
                    "{} injection(s), all at granted positions",
                    injections.len()
                ),
            );
        } else {
            self.rec.record(positions, Status::Fail, bad.join("; "));
        }
    }

    /// §5.4: a policy naming one path both granted and denied is malformed and must be
    /// rejected (an error, and no change). Sent last, after every other probe.
    fn contradiction(&mut self) {
        let id = "policy.contradiction-rejected";
        if self.closed.is_some() || self.rec.has(id) {
            return;
        }
        let Some(host_grant) = self.host_grant.filter(|_| self.ready) else {
            self.rec
                .record(id, Status::Skip, "no accepted policy to contradict");
            return;
        };
        // The grant in force (after the reduction), with the same sets disabled: accepted by
        // mistake, it would change nothing else.
        let now = HostGrant {
            advertised: host_grant.advertised,
            effective: self.grant,
            denied: host_grant.advertised.difference(self.grant.capabilities()),
        };
        let disabled: Vec<String> = self
            .reduced
            .union(&self.notified_disabled)
            .cloned()
            .collect();
        let mut params = now.update_params(None, &disabled);
        let granted = self.grant.capabilities().sorted_paths();
        let path = granted.first().copied().unwrap_or("pushEvents");
        if granted.is_empty() {
            params["effectiveCapabilities"] = json!([path]);
        }
        params["deniedCapabilities"] = json!([path]);
        match self.request("featureSets/update", params) {
            Reply::Error(e) => self.rec.record(
                id,
                Status::Pass,
                format!(
                    "{path} both granted and denied: rejected with error {}",
                    e.code
                ),
            ),
            // A refusal receipt does not apply the policy either, but it answers a malformed
            // message as if it were a policy it chose not to take.
            Reply::Result(r) if r.get("accepted") == Some(&Value::Bool(false)) => {
                self.rec.record(
                    id,
                    Status::Warn,
                    format!(
                        "{path} both granted and denied: refused with a receipt, not rejected as malformed"
                    ),
                )
            }
            Reply::Result(r) => self.rec.record(
                id,
                Status::Fail,
                format!("{path} both granted and denied: answered as a policy: {r}"),
            ),
            r @ (Reply::Closed(_) | Reply::Timeout) => {
                self.no_answer(id, &format!("{path} both granted and denied: "), r)
            }
        }
    }

    /// The verdict on a probe that got no answer (`reply` is `Closed` or `Timeout`): a
    /// connection that ended skips; a timeout fails (§6.6: a request with an id is answered,
    /// with an error if nothing else). `what` prefixes the detail.
    fn no_answer(&mut self, id: &'static str, what: &str, reply: Reply) {
        match reply {
            Reply::Closed(why) => self.rec.record(
                id,
                Status::Skip,
                format!("connection ended before the answer: {why}"),
            ),
            _ => self.rec.record(
                id,
                Status::Fail,
                format!("{what}no response within the timeout (§6.6: must error, not silence)"),
            ),
        }
    }

    /// `context/beforeInference` params for turn `turn`, redacted for the grant (§10.1).
    fn hook_params(&self, turn: u64) -> Value {
        let mut params = json!({
            "inferenceId": format!("inf_mcpl_check_{}", turn + 1),
            "conversationId": "conv_mcpl_check",
            "turnIndex": turn,
            "userMessage": "this text must never reach a server denied observe",
            "model": checker_model()
        });
        policy::redact_before_inference(&self.grant, &mut params);
        params
    }

    /// §6.7: a server handed a narrowing as a Notification applies its `disabled` list all
    /// the same (AUDIT-001 §2.6: servers that drop every notification). The set the first
    /// hook injected under is disabled by Notification; after a `ping` round trip (the server
    /// has read it), the hook is asked again and must not inject under it.
    fn narrowing_notification(&mut self) {
        let id = "policy.notification-narrowing-respected";
        if self.closed.is_some() || self.rec.has(id) {
            return;
        }
        let Some(set) = self.hook_set.clone().filter(|s| self.available.contains(s)) else {
            let why = "no injection under an available set to disable";
            self.rec.record(id, Status::Skip, why);
            return;
        };
        // Refused from here on (revocation first); the later Requests keep it disabled.
        self.available.remove(&set);
        self.notified_disabled.insert(set.clone());
        if !self.notify("featureSets/update", json!({ "disabled": [set] })) {
            return;
        }
        if !matches!(
            self.request("ping", json!({})),
            Reply::Result(_) | Reply::Error(_)
        ) {
            let why = "no ping answer: no point from which the Notification was read";
            self.rec.record(id, Status::Skip, why);
            return;
        }
        self.narrowing_read = true;
        let params = self.hook_params(1);
        let asked = match self.request("context/beforeInference", params) {
            Reply::Result(r) => {
                let injected = r
                    .get("contextInjections")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                if injected > 0 && r.get("featureSet") == Some(&json!(set)) {
                    self.narrowing_violations.push(format!(
                        "beforeInference injected {injected} item(s) under featureSet {set:?}"
                    ));
                }
                true
            }
            _ => false,
        };
        if !self.narrowing_violations.is_empty() {
            let d = format!(
                "after {set:?} was disabled by Notification: {}",
                self.narrowing_violations.join("; ")
            );
            self.rec.record(id, Status::Fail, d);
        } else if asked {
            let d = format!("no injection under {set:?} once it was disabled by Notification");
            self.rec.record(id, Status::Pass, d);
        } else {
            let why = "the hook was not answered after the Notification";
            self.rec.record(id, Status::Skip, why);
        }
    }

    /// §6.7 reduction probe, after the watch: disables every available feature set and
    /// revokes `channels.register` and `channels.incoming` (taking effect here first, then
    /// sent as a Request), expects a receipt, then asks for injections again and keeps
    /// listening for the watch period. After the receipt, no injection, push or inference
    /// request may name a disabled set, and nothing may need a revoked capability
    /// (AUDIT-001 §2.1, §2.3, §2.7: servers that kept sending under disabled sets, and
    /// channels no feature set gates).
    fn reduction(&mut self) {
        let (answered, respected) = ("policy.reduction-answered", "policy.reduction-respected");
        if self.closed.is_some() || self.rec.has(answered) {
            return; // reported with the rest as skipped
        }
        let Some(host_grant) = self.host_grant.filter(|_| self.ready) else {
            let why = "no accepted policy to reduce";
            self.rec.skip_all(&[answered, respected], why);
            return;
        };
        let revoke: CapabilitySet = [Capability::ChannelsRegister, Capability::ChannelsIncoming]
            .into_iter()
            .collect();
        let revoked = self.grant.capabilities().intersection(revoke);
        if self.available.is_empty() && revoked == CapabilitySet::EMPTY {
            let why = "no feature set available to disable, no channel capability to revoke";
            self.rec.skip_all(&[answered, respected], why);
            return;
        }
        // Revocation first (§6.7): from here on the host refuses these sets with -32001 and
        // the revoked capabilities with -32002.
        self.reduced = std::mem::take(&mut self.available);
        let disabled: Vec<String> = self
            .reduced
            .union(&self.notified_disabled)
            .cloned()
            .collect();
        let kept = self.grant.capabilities().difference(revoke);
        let narrowed = HostGrant {
            advertised: host_grant.advertised,
            effective: self.grant.intersect(kept),
            denied: host_grant.advertised.difference(kept),
        };
        self.pre_reduction_grant = Some(self.grant);
        self.grant = narrowed.effective;
        let params = narrowed.update_params(None, &disabled);
        let mut parts = Vec::new();
        if !disabled.is_empty() {
            parts.push(format!("disabling {}", disabled.join(", ")));
        }
        if revoked != CapabilitySet::EMPTY {
            parts.push(format!("revoking {}", revoked.sorted_paths().join(", ")));
        }
        let what = parts.join(" and ");
        match self.request("featureSets/update", params) {
            Reply::Result(r) => {
                self.reduction_answered = true;
                let report = policy::parse_receipt(&r);
                let (mut defects, fallback, _) = inspect::receipt_defects(&report);
                if report.accepted == Some(false) {
                    defects.extend(fallback);
                }
                if defects.is_empty() {
                    let how = match report.accepted {
                        Some(false) => "refused, naming its fallback",
                        _ => "accepted",
                    };
                    self.rec
                        .record(answered, Status::Pass, format!("{what}: receipt {how}"));
                } else {
                    let d = format!("{what}: {}", defects.join("; "));
                    self.rec.record(answered, Status::Fail, d);
                }
            }
            Reply::Error(e) => {
                self.reduction_answered = true;
                let d = format!(
                    "{what}: answered with error {} {:?}, not a degradation receipt",
                    e.code, e.message
                );
                self.rec.record(answered, Status::Fail, d);
            }
            other => {
                let d = format!(
                    "{what}: featureSets/update Request got {}",
                    other.describe()
                );
                self.rec.record(answered, Status::Fail, d);
                let why = "the reduction was not answered: no point from which to judge";
                self.rec.record(respected, Status::Skip, why);
                return;
            }
        }
        // What came with the receipt, after it, is judged as after it.
        self.settle();
        if policy::before_inference_applies(&self.grant) {
            let params = self.hook_params(2);
            if let Reply::Result(r) = self.request("context/beforeInference", params) {
                self.after_reduction += 1;
                let injected = r
                    .get("contextInjections")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                // Only a set this reduction disabled is its concern; an unnamed or undeclared
                // set is the hooks checks' finding.
                let fs = r.get("featureSet").and_then(Value::as_str);
                if let Some(fs) = fs.filter(|f| injected > 0 && self.reduced.contains(*f)) {
                    self.reduction_violations.push(format!(
                        "beforeInference injected {injected} item(s) under featureSet {fs:?}"
                    ));
                }
            }
        }
        self.watch();
        if !self.reduction_violations.is_empty() {
            let d = format!(
                "after the reduction receipt: {}",
                self.reduction_violations.join("; ")
            );
            self.rec.record(respected, Status::Fail, d);
        } else if self.after_reduction > 0 {
            let d = format!(
                "{} answer(s) or message(s) after the receipt, none under a disabled set or a revoked capability",
                self.after_reduction
            );
            self.rec.record(respected, Status::Pass, d);
        } else if self.closed.is_none() {
            let why = "nothing feature-set-tagged after the reduction receipt";
            self.rec.record(respected, Status::Skip, why);
        }
    }

    /// Keeps listening for unsolicited messages for the watch period.
    /// §17.3 / §17.2: the revision a `mcpl/manifestChanged` announces is the digest of the
    /// manifest then served. Fetched once after the watch, for the last announcement.
    fn check_announced(&mut self) {
        let id = "manifest.changed-revision-matches";
        let domains_id = "manifest.changed-domains-match";
        if self.announced.is_none() {
            let why = if self.changed_seen == 0 {
                "server sent no mcpl/manifestChanged"
            } else {
                "no announced revision to compare"
            };
            self.rec.skip_all(&[id, domains_id], why);
            return;
        }
        if self.closed.is_some() {
            return; // reported with the rest as skipped
        }
        let reply = self.request("mcpl/manifest", json!({}));
        // Compared with the announcement standing when the manifest arrived (a newer one may
        // have come in while the fetch was waiting).
        let announced = self.announced.take().unwrap_or_default();
        match reply {
            Reply::Closed(why) => {
                let why = format!("connection ended before the fetch was answered: {why}");
                self.rec.skip_all(&[id, domains_id], &why);
            }
            Reply::Result(m) => {
                self.judge_domains(domains_id, &m);
                self.judge_revision(id, &announced, &m);
            }
            other => {
                let d = format!("mcpl/manifest after the announcement: {}", other.describe());
                self.rec
                    .record(domains_id, Status::Skip, "no manifest fetched to compare");
                self.rec.record(id, Status::Fail, d);
            }
        }
    }

    /// §17.3: the domains announced (over every announcement) cover every domain that
    /// differs between the manifest presented at `initialize` and the one served now;
    /// under-announcing fails, announcing a domain that did not change warns.
    fn judge_domains(&mut self, id: &'static str, served: &Value) {
        let Some(initial) = &self.initial_manifest else {
            return;
        };
        let changed: Vec<&str> = mcpl::manifest::changed_domains(initial, served)
            .into_iter()
            .map(|d| d.as_str())
            .collect();
        let missing: Vec<&str> = changed
            .iter()
            .copied()
            .filter(|d| !self.announced_domains.contains(*d))
            .collect();
        let extra: Vec<&str> = self
            .announced_domains
            .iter()
            .map(String::as_str)
            .filter(|d| !changed.contains(d))
            .collect();
        let announced = self
            .announced_domains
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if !missing.is_empty() {
            self.rec.record(
                id,
                Status::Fail,
                format!(
                    "{} changed but only [{announced}] was announced",
                    missing.join(", ")
                ),
            );
        } else if !extra.is_empty() {
            self.rec.record(
                id,
                Status::Warn,
                format!("announced {} but it did not change", extra.join(", ")),
            );
        } else {
            self.rec.record(
                id,
                Status::Pass,
                format!("announced [{announced}], exactly what changed"),
            );
        }
    }

    /// §17.3 / §17.2: the last announced revision is the digest of the manifest served.
    fn judge_revision(&mut self, id: &'static str, announced: &str, m: &Value) {
        match mcpl::manifest::revision(m) {
            Ok(digest) if digest == announced => {
                self.rec
                    .record(id, Status::Pass, "announced revision is the served digest")
            }
            Ok(digest) => self.rec.record(
                id,
                Status::Fail,
                format!("announced {announced} but the manifest served digests to {digest}"),
            ),
            Err(e) => self.rec.record(
                id,
                Status::Fail,
                format!("the manifest served after the announcement has no digest: {e}"),
            ),
        }
    }

    fn watch(&mut self) {
        self.settle();
        if self.closed.is_some() {
            return;
        }
        let deadline = Instant::now() + self.timing.watch;
        while let Some(ev) = self.conn.recv(deadline) {
            if let Handled::Closed = self.handle_event(ev, None) {
                break;
            }
        }
    }

    fn conclude(&mut self) {
        let frames = "transport.frames-valid";
        if self.junk.is_empty() && self.invalid.is_empty() {
            self.rec
                .record(frames, Status::Pass, "every frame was JSON-RPC 2.0");
        } else {
            let mut all: Vec<String> = self
                .junk
                .iter()
                .map(|j| format!("non-JSON line {:?}", truncate(j)))
                .collect();
            all.extend(self.invalid.iter().cloned());
            self.rec.record(frames, Status::Fail, all.join("; "));
        }
        let early = "policy.no-privileged-before-ready";
        if self.privileged_before_ready.is_empty() {
            if !self.rec.has(early) {
                self.rec.record(
                    early,
                    Status::Pass,
                    "no privileged message before the receipt",
                );
            }
        } else {
            self.rec.record(
                early,
                Status::Fail,
                format!(
                    "before the policy receipt: {}",
                    self.privileged_before_ready.join(", ")
                ),
            );
        }
        let unaccepted = "policy.no-privileged-unless-accepted";
        match self.unaccepted {
            Some(what) if !self.privileged_unaccepted.is_empty() => self.rec.record(
                unaccepted,
                Status::Fail,
                format!(
                    "after {what} (not operating under the policy, §6.7): {}",
                    self.privileged_unaccepted.join(", ")
                ),
            ),
            Some(what) => self.rec.record(
                unaccepted,
                Status::Pass,
                format!("nothing privileged after {what}"),
            ),
            None if !self.rec.has(unaccepted) => {
                let why = if self.ready {
                    "the policy was accepted"
                } else {
                    "no receipt to judge"
                };
                self.rec.record(unaccepted, Status::Skip, why);
            }
            None => {}
        }
        let notified = "policy.notification-not-ready";
        if !self.ready_by_notification.is_empty() {
            self.rec.record(
                notified,
                Status::Fail,
                format!(
                    "after a featureSets/update Notification and before the Request: {}",
                    self.ready_by_notification.join(", ")
                ),
            );
        } else if self.grant_notified && !self.rec.has(notified) {
            self.rec.record(
                notified,
                Status::Pass,
                "nothing privileged after the grant came as a Notification",
            );
        }
        let within = "grant.messages-within-grant";
        if !self.outside_grant.is_empty() {
            self.rec
                .record(within, Status::Fail, self.outside_grant.join("; "));
        } else if self.privileged_after_ready > 0 {
            self.rec.record(
                within,
                Status::Pass,
                format!(
                    "{} privileged message(s) after the receipt, all within the grant",
                    self.privileged_after_ready
                ),
            );
        } else if !self.rec.has(within) && self.closed.is_none() {
            let why = if self.ready {
                "no privileged message after the receipt"
            } else {
                "no accepted receipt: no grant to judge against"
            };
            self.rec.record(within, Status::Skip, why);
        }
        let decl = "featuresets.declaration-matches";
        if !self.mismatches.is_empty() {
            self.mismatches.dedup();
            self.rec
                .record(decl, Status::Warn, self.mismatches.join("; "));
        } else if self.tagged_uses > 0 {
            self.rec.record(
                decl,
                Status::Pass,
                format!("{} tagged use(s), all declared", self.tagged_uses),
            );
        } else {
            self.rec
                .record(decl, Status::Skip, "no feature-set-tagged use observed");
        }
        let none = |what: &str| format!("server sent no {what}");
        for (ids, seen, what) in [
            (&PUSH.ids()[..], self.push_seen, PUSH.method),
            (&INFERENCE.ids()[..], self.inference_seen, INFERENCE.method),
            (
                &["channels.descriptor-shape"][..],
                self.descriptors_seen,
                "channel descriptor",
            ),
            (
                &["channels.register-is-request"][..],
                self.register_seen,
                "channels/register",
            ),
            (
                &["channels.incoming-is-request", "channels.incoming-shape"][..],
                self.incoming_seen,
                "channels/incoming",
            ),
            (
                &["manifest.changed-shape"][..],
                self.changed_seen,
                "mcpl/manifestChanged",
            ),
        ] {
            for id in ids {
                if seen == 0 {
                    self.rec.record(id, Status::Skip, none(what));
                } else if !self.rec.has(id) {
                    let detail = match self.reduction_hits.get(id) {
                        Some(&hits) => format!(
                            "{} {what} message(s) conform; {hits} under a set disabled by the reduction (policy.reduction-respected)",
                            seen - hits
                        ),
                        None => format!("{seen} {what} message(s) conform"),
                    };
                    self.rec.record(id, Status::Pass, detail);
                }
            }
        }
        if let Some(why) = self.closed.clone() {
            self.rec
                .skip_rest(&format!("connection ended early: {why}"));
        }
    }

    // ----------------------------------------------------------------------------------
    // Wire
    // ----------------------------------------------------------------------------------

    fn notify(&mut self, method: &str, params: Value) -> bool {
        self.settle();
        let msg = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.send(&msg)
    }

    fn send(&mut self, msg: &Value) -> bool {
        if self.closed.is_some() {
            return false;
        }
        if let Err(e) = self.conn.send(msg) {
            self.closed = Some(format!("write failed: {e}"));
            return false;
        }
        true
    }

    /// Sends a request and waits (bounded) for its response, handling whatever else the
    /// server sends meanwhile.
    fn request(&mut self, method: &str, params: Value) -> Reply {
        self.settle();
        self.next_id += 1;
        let id = RequestId::Number(self.next_id.into());
        let msg =
            json!({ "jsonrpc": "2.0", "id": id.to_value(), "method": method, "params": params });
        if !self.send(&msg) {
            return Reply::Closed(self.closed.clone().unwrap_or_default());
        }
        let deadline = Instant::now() + self.timing.step;
        loop {
            let Some(ev) = self.conn.recv(deadline) else {
                self.timed_out.insert(id);
                return Reply::Timeout;
            };
            match self.handle_event(ev, Some(&id)) {
                Handled::Awaited(reply) => return reply,
                Handled::Continue => {}
                Handled::Closed => {
                    return Reply::Closed(self.closed.clone().unwrap_or_default());
                }
            }
        }
    }

    /// Judges and answers one event. A response to `awaiting` is handed back instead; a
    /// JSON-RPC batch is split, and the answers to its requests go back as one batch.
    fn handle_event(&mut self, ev: Event, awaiting: Option<&RequestId>) -> Handled {
        self.settle();
        let v = match ev {
            Event::Frame(v) => v,
            Event::Junk(line) => {
                self.junk.push(line);
                return Handled::Continue;
            }
            Event::Invalid(why) => {
                self.invalid.push(why);
                return Handled::Continue;
            }
            Event::Closed(why) => {
                self.closed = Some(why);
                return Handled::Closed;
            }
        };
        let Value::Array(items) = v else {
            return self.handle_value(v, awaiting);
        };
        if items.is_empty() {
            self.invalid.push("empty batch".into());
            self.answer_now(json!({ "jsonrpc": "2.0", "id": null,
                "error": ErrorObject::invalid_request("empty batch") }));
            return Handled::Continue;
        }
        self.batch = Some(Vec::new());
        let mut items = items.into_iter();
        while let Some(item) = items.next() {
            if let Handled::Awaited(r) = self.handle_value(item, awaiting) {
                // The rest was written after this response: judged once it is applied.
                self.deferred.extend(items);
                if self.deferred.is_empty() {
                    self.flush_batch();
                }
                return Handled::Awaited(r);
            }
        }
        self.flush_batch();
        Handled::Continue
    }

    /// Handles what a batch carried after an awaited response, now that the response has
    /// been applied, and sends the batch's answers.
    fn settle(&mut self) {
        while let Some(item) = self.deferred.pop_front() {
            let _ = self.handle_value(item, None);
        }
        self.flush_batch();
    }

    fn flush_batch(&mut self) {
        if let Some(answers) = self.batch.take() {
            if !answers.is_empty() {
                self.answer_now(Value::Array(answers));
            }
        }
    }

    fn handle_value(&mut self, v: Value, awaiting: Option<&RequestId>) -> Handled {
        match Message::from_value(v) {
            Err(e) => {
                self.invalid.push(e.reason.clone());
                if let Some(id) = e.id {
                    self.answer(&id, Err(ErrorObject::invalid_request(e.reason)));
                }
            }
            Ok(Message::Response(r)) if r.id.is_some() && r.id.as_ref() == awaiting => {
                return Handled::Awaited(match r.outcome {
                    Ok(v) => Reply::Result(v),
                    Err(e) => Reply::Error(e),
                });
            }
            Ok(Message::Response(r))
                if r.id.as_ref().is_some_and(|i| self.timed_out.contains(i)) =>
            {
                tracing::debug!("late response to timed-out request {:?}", r.id);
            }
            Ok(Message::Response(r)) => self.invalid.push(format!(
                "response to an id the checker never sent or already settled: {}",
                r.id.map_or("null".to_owned(), |i| i.to_string())
            )),
            Ok(Message::Notification(n)) => self.server_message(None, &n.method, n.params),
            Ok(Message::Request(r)) => self.server_message(Some(r.id), &r.method, r.params),
        }
        Handled::Continue
    }

    fn answer(&mut self, id: &RequestId, outcome: Result<Value, ErrorObject>) {
        let msg = match outcome {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id.to_value(), "result": result }),
            Err(e) => json!({ "jsonrpc": "2.0", "id": id.to_value(), "error": e }),
        };
        match &mut self.batch {
            Some(answers) => answers.push(msg),
            None => self.answer_now(msg),
        }
    }

    fn answer_now(&mut self, msg: Value) {
        self.send(&msg);
    }

    /// A message the server sent on its own: judged, and answered if it is a request.
    fn server_message(&mut self, id: Option<RequestId>, method: &str, params: Option<Value>) {
        let requirement = server_requirement(method, params.as_ref());
        if let Some(req) = requirement.filter(|r| *r != Requirement::None) {
            if self.receipt_seen {
                // §5.4: judged only under an accepted receipt; without one nothing is ready.
                if self.ready {
                    self.privileged_after_ready += 1;
                    if self.reduction_answered {
                        self.after_reduction += 1;
                    }
                    if self.grant.check(req).is_err() {
                        let needs = req.capabilities().sorted_paths().join(" / ");
                        let revoked = self
                            .pre_reduction_grant
                            .is_some_and(|g| g.check(req).is_ok());
                        if !revoked {
                            self.outside_grant
                                .push(format!("{method} needs {needs}, not granted"));
                        } else if self.reduction_answered {
                            self.reduction_violations
                                .push(format!("{method}, though the reduction revoked {needs}"));
                        }
                        // Revoked but not yet answered: the server may not have read the
                        // reduction; refused (-32002), not its failure.
                    }
                } else {
                    // §5.3, §6.7: a refused (or malformed) receipt leaves the server not
                    // operating under the policy; the host rejects this (-32002).
                    self.privileged_unaccepted.push(method.to_owned());
                }
            } else if self.grant_notified && !self.policy_sent {
                self.ready_by_notification.push(method.to_owned());
            } else {
                self.privileged_before_ready.push(method.to_owned());
            }
        }
        match method {
            "push/event" => self.judge_push(id.is_some(), params.as_ref()),
            "inference/request" => self.judge_inference(id.is_some(), params.as_ref()),
            "channels/register" => {
                self.register_seen += 1;
                if id.is_none() {
                    self.rec.record(
                        "channels.register-is-request",
                        Status::Fail,
                        "channels/register sent as a notification (§4.1: Request)",
                    );
                }
                let descs = params
                    .as_ref()
                    .and_then(|p| p.get("channels"))
                    .and_then(Value::as_array)
                    .cloned();
                match descs {
                    Some(d) => self.judge_descriptors(&d, "channels/register"),
                    None => {
                        self.descriptors_seen += 1;
                        self.rec.record(
                            "channels.descriptor-shape",
                            Status::Fail,
                            "channels/register params.channels is not an array",
                        );
                    }
                }
            }
            "channels/changed" => {
                for key in ["added", "updated"] {
                    if let Some(d) = params
                        .as_ref()
                        .and_then(|p| p.get(key))
                        .and_then(Value::as_array)
                        .cloned()
                    {
                        self.judge_descriptors(&d, "channels/changed");
                    }
                }
            }
            "channels/incoming" => {
                self.incoming_seen += 1;
                let defects = inspect::incoming_defects(params.as_ref());
                if !defects.is_empty() {
                    self.rec
                        .record("channels.incoming-shape", Status::Fail, defects.join("; "));
                }
                if id.is_none() {
                    self.rec.record(
                        "channels.incoming-is-request",
                        Status::Fail,
                        "channels/incoming sent as a notification (§4.1: Request; §14.3 results)",
                    );
                }
            }
            "mcpl/manifestChanged" => {
                self.changed_seen += 1;
                if let Some(r) = params
                    .as_ref()
                    .and_then(|p| p.get("revision"))
                    .and_then(Value::as_str)
                {
                    self.announced = Some(r.to_owned());
                }
                let domains = params
                    .as_ref()
                    .and_then(|p| p.get("domains"))
                    .and_then(Value::as_array);
                for d in domains.into_iter().flatten().filter_map(Value::as_str) {
                    self.announced_domains.insert(d.to_owned());
                }
                let d = inspect::manifest_changed_defects(params.as_ref());
                if !d.is_empty() {
                    self.rec
                        .record("manifest.changed-shape", Status::Fail, d.join("; "));
                }
            }
            _ => {}
        }
        let Some(id) = id else {
            if matches!(method, "channels/register" | "channels/changed") {
                // The Notification form changes the channel set as well (§14.3, §14.5): the
                // strict host applies it (grant permitting) and has nothing to answer.
                let _ = self.reply_to(method, params.as_ref(), requirement);
            }
            return;
        };
        let outcome = self.reply_to(method, params.as_ref(), requirement);
        self.answer(&id, outcome);
    }

    /// The strict host's answer to a server request.
    fn reply_to(
        &mut self,
        method: &str,
        params: Option<&Value>,
        requirement: Option<Requirement>,
    ) -> Result<Value, ErrorObject> {
        let Some(req) = requirement else {
            return match method {
                "ping" => Ok(json!({})),
                _ => Err(ErrorObject::method_not_found(method)),
            };
        };
        if req != Requirement::None {
            if !self.ready {
                let cap = req.capabilities().sorted_paths();
                let cap = cap.first().copied().unwrap_or("");
                return Err(ErrorObject::capability_denied(cap));
            }
            if let Err(d) = self.grant.check(req) {
                return Err(d.to_error());
            }
        }
        match method {
            "push/event" => {
                if !inspect::push_event_defects(params).is_empty() {
                    return Err(ErrorObject::invalid_params("push/event params malformed"));
                }
                self.feature_set_gate(method, params)
                    .map(|()| json!({ "accepted": true }))
            }
            "channels/register" | "channels/changed" => {
                let mut results = Vec::new();
                // Removals first (a removed channel delivers nothing more), as a host applies them.
                for id in params
                    .and_then(|p| p.get("removed"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|_| method == "channels/changed")
                {
                    if self.registered.remove(id) {
                        results.push(json!({ "id": id, "accepted": true }));
                    } else {
                        results.push(
                            json!({ "id": id, "accepted": false, "reason": "unknown_channel" }),
                        );
                    }
                }
                let keys: &[&str] = if method == "channels/register" {
                    &["channels"]
                } else {
                    &["added", "updated"]
                };
                for key in keys {
                    for d in params
                        .and_then(|p| p.get(*key))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let cid = d.get("id").and_then(Value::as_str).unwrap_or("");
                        if inspect::descriptor_defects(d).is_empty() {
                            self.registered.insert(cid.to_owned());
                            results.push(json!({ "id": cid, "accepted": true }));
                        } else {
                            results.push(json!({ "id": cid, "accepted": false, "reason": "invalid_descriptor" }));
                        }
                    }
                }
                Ok(json!({ "results": results }))
            }
            "channels/incoming" => {
                let results: Vec<Value> = params
                    .and_then(|p| p.get("messages"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let mid = m.get("messageId").cloned().unwrap_or(Value::Null);
                        let known = m
                            .get("channelId")
                            .and_then(Value::as_str)
                            .is_some_and(|c| self.registered.contains(c));
                        if known {
                            json!({ "messageId": mid, "accepted": true })
                        } else {
                            json!({ "messageId": mid, "accepted": false, "reason": "unknown_channel" })
                        }
                    })
                    .collect();
                Ok(json!({ "results": results }))
            }
            // §12.2: the model the checker's (pretend) inference would use.
            "model/info" => Ok(checker_model()),
            "inference/request" => {
                if !inspect::inference_request_defects(params).is_empty() {
                    return Err(ErrorObject::invalid_params(
                        "inference/request params malformed",
                    ));
                }
                // The checker performs no inference: a host without a model (§6.6).
                self.feature_set_gate(method, params)
                    .and(Err(ErrorObject::method_not_found(method)))
            }
            // `channels/list` and the rest are answered with an error rather than silence
            // (§6.6).
            _ => Err(ErrorObject::method_not_found(method)),
        }
    }

    /// The strict host's feature-set check of a tagged request (§6.5, §6.6): `-32003` for
    /// an undeclared set, `-32001` for one the grant leaves unavailable, and `-32002` for a
    /// use the set's `uses` does not declare (§6.4 rule 2: the host rejects that use).
    fn feature_set_gate(&self, method: &str, params: Option<&Value>) -> Result<(), ErrorObject> {
        let fs = params
            .and_then(|p| p.get("featureSet"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !self.declared.contains(fs) {
            return Err(ErrorObject::unknown_feature_set(fs));
        }
        if !self.available.contains(fs) {
            return Err(ErrorObject::feature_set_not_enabled(fs));
        }
        let required = policy::method_requirement(method, params);
        let missing = required.and_then(|r| policy::declaration_mismatch(&self.decls, fs, r));
        match missing.and_then(|m| m.sorted_paths().first().copied()) {
            Some(capability) => Err(ErrorObject::declaration_mismatch(capability, fs)),
            None => Ok(()),
        }
    }

    fn judge_push(&mut self, is_request: bool, params: Option<&Value>) {
        self.push_seen += 1;
        let defects = inspect::push_event_defects(params);
        self.judge_tagged(&PUSH, is_request, params, defects);
    }

    fn judge_inference(&mut self, is_request: bool, params: Option<&Value>) {
        self.inference_seen += 1;
        let defects = inspect::inference_request_defects(params);
        self.judge_tagged(&INFERENCE, is_request, params, defects);
    }

    /// Judges one feature-set-tagged server message: its form, its shape `defects`, and its
    /// feature set (declared; available once the grant is known), then notes the use.
    fn judge_tagged(
        &mut self,
        t: &Tagged,
        is_request: bool,
        params: Option<&Value>,
        defects: Vec<String>,
    ) {
        if !is_request {
            self.rec.record(
                t.is_request,
                Status::Fail,
                format!("{} sent as a notification (§4.1: Request)", t.method),
            );
        }
        if !defects.is_empty() {
            self.rec.record(t.shape, Status::Fail, defects.join("; "));
        }
        let Some(fs) = params
            .and_then(|p| p.get("featureSet"))
            .and_then(Value::as_str)
        else {
            return;
        };
        if !self.declared.contains(fs) {
            self.rec.record(
                t.declared,
                Status::Fail,
                format!("featureSet {fs:?} is not declared"),
            );
        } else if self.notified_disabled.contains(fs) {
            // Judged by the narrowing check, once the server has read the Notification.
            if self.narrowing_read {
                self.narrowing_violations
                    .push(format!("{} under featureSet {fs:?}", t.method));
            }
        } else if self.reduced.contains(fs) {
            // Judged by the reduction check, and only once the server has answered it.
            if self.reduction_answered {
                self.reduction_violations
                    .push(format!("{} under featureSet {fs:?}", t.method));
                *self.reduction_hits.entry(t.declared).or_default() += 1;
            }
        } else if self.receipt_seen && !self.available.contains(fs) {
            // After a refused or malformed receipt nothing is available (§6.7).
            let why = match self.unaccepted {
                Some(what) => format!("the policy is not in force after {what}"),
                None => "the grant leaves it unavailable".to_owned(),
            };
            self.rec.record(
                t.declared,
                Status::Fail,
                format!("featureSet {fs:?} is not available: {why}"),
            );
        }
        if let Some(required) = policy::method_requirement(t.method, params) {
            self.note_use(fs.to_owned(), required);
        }
    }

    /// Records a feature-set-tagged use for the §6.4 declaration-mismatch check.
    fn note_use(&mut self, feature_set: String, required: Requirement) {
        self.tagged_uses += 1;
        if let Some(missing) = policy::declaration_mismatch(&self.decls, &feature_set, required) {
            self.mismatches.push(format!(
                "{feature_set:?} exercises {} without declaring it (a host rejects that use, §6.4 rule 2)",
                missing.sorted_paths().join(", ")
            ));
        }
    }

    fn judge_descriptors(&mut self, descs: &[Value], via: &str) {
        for (i, d) in descs.iter().enumerate() {
            self.descriptors_seen += 1;
            let defects = inspect::descriptor_defects(d);
            if !defects.is_empty() {
                self.rec.record(
                    "channels.descriptor-shape",
                    Status::Fail,
                    format!("{via} channels[{i}]: {}", defects.join("; ")),
                );
            }
        }
    }
}

/// The check ids of one kind of feature-set-tagged server request.
struct Tagged {
    method: &'static str,
    is_request: &'static str,
    shape: &'static str,
    declared: &'static str,
}

impl Tagged {
    fn ids(&self) -> [&'static str; 3] {
        [self.is_request, self.shape, self.declared]
    }
}

const PUSH: Tagged = Tagged {
    method: "push/event",
    is_request: "push.event-is-request",
    shape: "push.event-shape",
    declared: "push.feature-set-declared",
};

const INFERENCE: Tagged = Tagged {
    method: "inference/request",
    is_request: "inference.request-is-request",
    shape: "inference.request-shape",
    declared: "inference.feature-set-declared",
};

/// The requirement of a method the server sent, or `None` for methods a server may not
/// send (host→server methods, unknown ones): those are answered -32601.
fn server_requirement(method: &str, params: Option<&Value>) -> Option<Requirement> {
    match policy::method_direction(method) {
        Some(policy::Direction::ServerToHost | policy::Direction::Either) => {
            policy::method_requirement(method, params)
        }
        _ => None,
    }
}

/// Whether two manifests are the same manifest (equal canonical forms, §17.2).
fn same_manifest(a: &Value, b: &Value) -> bool {
    mcpl::manifest::canonical_json(a).ok() == mcpl::manifest::canonical_json(b).ok()
}

fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}
