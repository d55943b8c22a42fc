//! The policy exchange and its §5.3/§6.7 probes: the quiet windows before the policy, the
//! initial Request and its receipt, the narrowing Notification, the reduction and the
//! contradictory policy.

use mcpl::capability::{Capability, CapabilitySet, Pattern};
use mcpl::policy::{self, FeatureSets, HostGrant};
use mcpl::protocol::feature_sets::FeatureSetsUpdate;
use mcpl::protocol::handshake::Ping;
use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::*;
use crate::check::inspect;
use crate::check::report::Status;

impl Session {
    /// Before the policy Request (§5.3, §6.7): a quiet window in which nothing privileged may
    /// come (a fail-open server starts at once, AUDIT-001 §2.7), then the grant sent as a
    /// Notification, which must not make the server ready, and a second window. Each window
    /// opens with a `ping` round trip, so a server that answers in order has acted on
    /// everything before it, and lasts `--watch`.
    pub(super) fn quiet_windows(&mut self, host_grant: &HostGrant) {
        self.window();
        if self.closed.is_some() {
            return;
        }
        self.grant_notified = true;
        let _ = self.notify(FeatureSetsUpdate::NAME, host_grant.update_params(None, &[]));
        self.window();
    }

    /// A `ping` round trip (its answer is not judged), then listening for `--watch`, then,
    /// when the first was answered, a second round trip: a server that answers in order has
    /// written whatever it sent on its own after the first `ping` before it answers the
    /// second, so that traffic is judged here whatever `--watch` is (and however loaded the
    /// machine).
    pub(super) fn window(&mut self) {
        if let Reply::Result(_) | Reply::Error(_) = self.unjudged_request(Ping::NAME, json!({})) {
            self.ping_answered = true;
            self.watch();
            let _ = self.unjudged_request(Ping::NAME, json!({}));
        } else {
            self.watch();
        }
    }

    /// The initial policy Request (§5.3) granting `host_grant` with `disabled` sets, and the
    /// verdicts on its receipt (§6.7), cross-checked against the host's own derivation
    /// (§6.4). An accepted, well-formed receipt makes the session ready.
    pub(super) fn policy(
        &mut self,
        host_grant: &HostGrant,
        sets: &FeatureSets,
        disabled: &[String],
    ) {
        let params = self.policy_params(host_grant, disabled);
        self.policy_as(host_grant, sets, params);
    }

    /// [`Self::policy`] with its params as given: `host_grant` spelt another way, or with
    /// another selection (a narrowed session's [`super::sessions::Form`]); the derivation
    /// the receipt is judged against is read from them.
    pub(super) fn policy_as(&mut self, host_grant: &HostGrant, sets: &FeatureSets, params: Value) {
        // A narrowed session may send a second one, narrowing the first (`Form::Absent`):
        // a reduction, whose answer is `policy.reduction-answered`'s.
        let (what, answered) = if self.ready {
            ("the narrowing policy", "policy.reduction-answered")
        } else {
            ("the initial policy", "policy.request-answered")
        };
        let statuses = derivation(sets, &params);
        self.sent_policy = Some(params.clone());
        let reply = self.request(FeatureSetsUpdate::NAME, params);
        let result = match reply {
            Reply::Result(r) => {
                self.receipt_seen = true;
                self.rec.record(answered, Status::Pass, "receipt received");
                r
            }
            Reply::Error(e) => {
                // The initial policy answered with an error is answered (its receipt shape
                // fails); a reduction is answered with a receipt or not at all, as
                // `reduction` judges it.
                let status = if answered == "policy.reduction-answered" {
                    Status::Fail
                } else {
                    Status::Pass
                };
                self.rec
                    .record(answered, status, format!("answered with error {}", e.code));
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
                    answered,
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
        // The library host's decision on the initial answer (§5.3, §6.7).
        let answer = mcpl::session::rules::PolicyAnswer::Receipt(report.receipt.clone());
        let decision = mcpl::session::rules::initial_decision(answer);
        if !matches!(decision, mcpl::session::rules::InitialDecision::Mcpl(_)) {
            // §6.7: a refused policy is not operated under, and the strict host does not take
            // a malformed receipt as acceptance: not ready, nothing granted, nothing available.
            let why = "no accepted, well-formed receipt";
            self.rec
                .record("policy.receipt-matches-derivation", Status::Skip, why);
            self.unaccepted = Some(if report.accepted == Some(false) {
                "a refusal receipt"
            } else {
                "a malformed receipt"
            });
        } else {
            // Ready (§5.3). Feature sets usable under the grant, for push/event replies.
            self.ready = true;
            self.grant = host_grant.effective;
            self.judge_receipt(&report, &statuses, what);
            self.statuses = statuses;
        }
    }

    /// `policy.receipt-matches-derivation` (§6.4, §6.7) for an accepted receipt of the
    /// policy `what`, against the host's derivation `statuses` for it.
    pub(super) fn judge_receipt(
        &mut self,
        report: &policy::ReceiptReport,
        statuses: &BTreeMap<String, policy::FeatureSetStatus>,
        what: &str,
    ) {
        let id = "policy.receipt-matches-derivation";
        match &report.receipt {
            Some(receipt @ policy::Receipt::Accepted { .. }) => {
                let (st, d) = inspect::receipt_against_derivation(receipt, statuses, &self.grant);
                self.rec.record(id, st, format!("{what}: {d}"));
            }
            _ => self
                .rec
                .record(id, Status::Skip, "no accepted, well-formed receipt"),
        }
    }

    pub(super) fn skip_receipt_rules(&mut self, why: &str) {
        self.rec
            .record("policy.refusal-names-fallback", Status::Skip, why);
        self.rec
            .record("policy.no-invented-mode", Status::Skip, why);
        self.rec
            .record("policy.receipt-matches-derivation", Status::Skip, why);
    }

    /// §5.4: a policy naming one path both granted and denied is malformed and must be
    /// rejected (an error, and no change). Sent last, after every other probe.
    pub(super) fn contradiction(&mut self) {
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
        let mut params = self.policy_in_force(host_grant, false);
        let granted = self.grant.capabilities().sorted_paths();
        let path = granted.first().copied().unwrap_or("pushEvents");
        if granted.is_empty() {
            params["effectiveCapabilities"] = json!([path]);
        }
        params["deniedCapabilities"] = json!([path]);
        match self.request(FeatureSetsUpdate::NAME, params) {
            Reply::Error(e) => {
                let first = format!(
                    "{path} both granted and denied: rejected with error {}",
                    e.code
                );
                self.pattern_contradiction(id, host_grant, first);
            }
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
            r @ (Reply::Closed(_) | Reply::Timeout { .. } | Reply::Invalid(_) | Reply::Unread(_)) => {
                self.no_answer(id, &format!("{path} both granted and denied: "), r)
            }
        }
    }

    /// The second form of `policy.contradiction-rejected` (§5.4), once the first (one path
    /// written in both lists, `first` its verdict) was rejected: matching is over full paths
    /// with `*` wildcards, so a pattern granting a path that `deniedCapabilities` names makes
    /// the policy just as malformed. A granted path is replaced in `effectiveCapabilities` by
    /// its parent's `*` (`channels.publish` → `channels.*`, `pushEvents` → `*`) and denied;
    /// only a pattern whose paths are all granted now is used, so the policy, taken by
    /// mistake, would change nothing. Without one, `first` stands alone.
    fn pattern_contradiction(&mut self, id: &'static str, host_grant: HostGrant, first: String) {
        let granted = self.grant.capabilities();
        let found = granted.iter().find_map(|c| {
            let path = c.as_str();
            let pattern = match path.rsplit_once('.') {
                Some((parent, _)) => format!("{parent}.*"),
                None => "*".to_owned(),
            };
            let reaches = Pattern::parse(&pattern).ok()?.resolved();
            reaches
                .difference(granted)
                .is_empty()
                .then_some((path, pattern))
        });
        let Some((path, pattern)) = found else {
            self.rec.record(id, Status::Pass, first);
            return;
        };
        let mut params = self.policy_in_force(host_grant, false);
        let effective: Vec<&str> = granted
            .sorted_paths()
            .into_iter()
            .filter(|p| *p != path)
            .chain([pattern.as_str()])
            .collect();
        params["effectiveCapabilities"] = json!(effective);
        params["deniedCapabilities"] = json!([path]);
        let what = format!("{pattern} granted and {path} denied");
        match self.request(FeatureSetsUpdate::NAME, params) {
            Reply::Error(e) => self.rec.record(
                id,
                Status::Pass,
                format!("{first}; {what}: rejected with error {}", e.code),
            ),
            Reply::Result(r) if r.get("accepted") == Some(&Value::Bool(false)) => self.rec.record(
                id,
                Status::Warn,
                format!("{first}; {what}: refused with a receipt, not rejected as malformed"),
            ),
            Reply::Result(r) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "{first}, yet {what} was answered as a policy: {r} (§5.4: matching is over \
                     full paths with `*` wildcards, so {path} is both granted and denied)"
                ),
            ),
            r @ (Reply::Closed(_)
            | Reply::Timeout { .. }
            | Reply::Invalid(_)
            | Reply::Unread(_)) => self.no_answer(id, &format!("{first}; {what}: "), r),
        }
    }

    /// §6.7: a server handed a narrowing as a Notification applies its `disabled` list all
    /// the same (AUDIT-001 §2.6: servers that drop every notification). The set the first
    /// hook injected under is disabled by Notification; after a `ping` round trip (the server
    /// has read it), the hook is asked again and must not inject under it. With no hook set,
    /// the first available set a push or inference request named is disabled instead, and a
    /// window (another `ping` round trip, then `--watch`) gives the server's own traffic a
    /// point after it: nothing more may come under that set.
    pub(super) fn narrowing_notification(&mut self) {
        let id = "policy.notification-narrowing-respected";
        if self.closed.is_some() || self.rec.has(id) {
            return;
        }
        let hook = self.hook_set.clone().filter(|s| self.available(s));
        let traffic = self.used_sets.iter().find(|s| self.available(s)).cloned();
        let Some(set) = hook.clone().or(traffic) else {
            let why = "no injection, push or inference request under an available set to disable";
            self.rec.record(id, Status::Skip, why);
            return;
        };
        // Refused from here on (revocation first); the later Requests keep it disabled.
        self.disable(&set);
        self.notified_disabled.insert(set.clone());
        if !self.notify(FeatureSetsUpdate::NAME, json!({ "disabled": [set] })) {
            return;
        }
        if !matches!(
            self.unjudged_request(Ping::NAME, json!({})),
            Reply::Result(_) | Reply::Error(_)
        ) {
            let why = "no ping answer: no point from which the Notification was read";
            self.rec.record(id, Status::Skip, why);
            return;
        }
        self.narrowing_read = true;
        let asked = if hook.is_some() {
            let params = self.hook_params(1);
            // An injection under `set` is this check's finding, said as the answer is read
            // ([`Session::judge_hook_answer`]).
            match self.request(BeforeInference::NAME, params.clone()) {
                Reply::Result(_) => true,
                other => {
                    self.later_hook_answered(&params, other);
                    false
                }
            }
        } else {
            self.window();
            self.after_narrowing > 0
        };
        if !self.narrowing_violations.is_empty() {
            let d = format!(
                "after {set:?} was disabled by Notification: {}",
                self.narrowing_violations.join("; ")
            );
            self.rec.record(id, Status::Fail, d);
        } else if hook.is_none() && asked {
            let d = format!(
                "{} tagged message(s) after {set:?} was disabled by Notification, none under it",
                self.after_narrowing
            );
            self.rec.record(id, Status::Pass, d);
        } else if asked {
            let d = format!("no injection under {set:?} once it was disabled by Notification");
            self.rec.record(id, Status::Pass, d);
        } else if hook.is_some() {
            let why = "the hook got no result after the Notification (one left unanswered fails \
                       hooks.answers-without-observe)";
            self.rec.record(id, Status::Skip, why);
        } else {
            let why = format!(
                "{set:?} disabled by Notification, but nothing feature-set-tagged came after it to judge"
            );
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
    pub(super) fn reduction(&mut self) {
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
        if self.available_sets().is_empty() && revoked == CapabilitySet::EMPTY {
            let why = "no feature set available to disable, no channel capability to revoke";
            self.rec.skip_all(&[answered, respected], why);
            return;
        }
        // Revocation first (§6.7): from here on the host refuses these sets with -32001 and
        // the revoked capabilities with -32002.
        self.reduced = self.available_sets();
        for set in self.reduced.clone() {
            self.disable(&set);
        }
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
        let params = self.policy_params(&narrowed, &disabled);
        let mut parts = Vec::new();
        if !disabled.is_empty() {
            parts.push(format!("disabling {}", disabled.join(", ")));
        }
        if revoked != CapabilitySet::EMPTY {
            parts.push(format!("revoking {}", revoked.sorted_paths().join(", ")));
        }
        let what = parts.join(" and ");
        let statuses = derivation(&self.decls, &params);
        match self.request(FeatureSetsUpdate::NAME, params) {
            Reply::Result(r) => {
                self.reduction_answered = true;
                let report = policy::parse_receipt(&r);
                if report.accepted == Some(true) {
                    self.judge_receipt(&report, &statuses, "the reduction");
                }
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
            let reply = self.request(BeforeInference::NAME, params.clone());
            // A set the reduction keeps disabled is its concern, and so is a featureSet that
            // names none (one rule with pushes and inference requests), said as the answer
            // is read ([`Session::judge_hook_answer`]); a missing or undeclared one is the
            // hooks checks' finding.
            if let Reply::Result(_) = reply {
                self.after_reduction += 1;
            } else {
                self.later_hook_answered(&params, reply);
            }
        }
        // A window that opens with a ping round trip: what a server sends on its own (its
        // timers, its keep-alive) is given a point after the receipt, as before the policy.
        self.window();
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
}

/// The host's own §6.4 derivation for the policy `params` it sends: each declared set's
/// status under the grant and selection those params carry, read back with the library's
/// parser so that `disabled` means what a server reading it takes it to mean. Params that
/// do not parse (they are the checker's own, so this cannot happen) leave every set
/// unavailable: fail closed.
pub(super) fn derivation(
    sets: &FeatureSets,
    params: &Value,
) -> BTreeMap<String, policy::FeatureSetStatus> {
    match policy::UpdateParams::parse(params) {
        Ok(p) => policy::derive(
            sets,
            &p.effective.unwrap_or_default(),
            &policy::Selection {
                enabled: p.enabled,
                disabled: p.disabled,
            },
        ),
        Err(_) => sets
            .sets
            .keys()
            .map(|n| {
                let st = policy::FeatureSetStatus::Unavailable {
                    reason: policy::UnavailableReason::Disabled,
                    missing: CapabilitySet::EMPTY,
                };
                (n.clone(), st)
            })
            .collect(),
    }
}
