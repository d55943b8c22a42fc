//! The probes, run once the policy is in force, has failed to come, or came malformed and
//! was refused (then judged as for a host that granted nothing, issue #19 item 1; §5.3). Each is one request bounded by the step
//! timeout (the inference by `--inference-timeout` when granted); the ones a host may answer
//! slowly carry the head-of-line ping ([`Run::call_paired`]).

use mcpl::capability::Capability;
use mcpl::jsonrpc::codes;
use mcpl::protocol::channels::{ChannelsIncoming, ChannelsList, ChannelsRegister};
use mcpl::protocol::handshake::Ping;
use mcpl::protocol::inference::InferenceRequest;
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::gated::Gated;
use super::judge::{
    duplicate_defects, excerpt, inference_result_defects, itemized_defects, unrefused_messages,
    Meanwhile,
};
use super::junk;
use super::refusal_data::REFUSAL_DATA;
use super::served::{
    descriptors, duplicate_descriptors, incoming, inference_request, inference_request_streamed,
    push, unregistered_incoming, DUPLICATE_ID, TYPO_SET, TYPO_USE, UNREGISTERED,
};
use super::session::{secs, Reply, Run};
use crate::check::report::Status;

/// The refusals §6.6 names for a use the grant does not allow.
const REFUSAL: [i64; 2] = [codes::CAPABILITY_DENIED, codes::FEATURE_SET_NOT_ENABLED];

/// The check judging the codes of those refusals (§6.6 MUST).
const REFUSAL_CODE: &str = "host.refusal-code";

impl Run {
    /// What the library host answers a feature-set-tagged probe under the policy this
    /// server holds (its grant, declarations and derived statuses): admission (§4.1, §5.3,
    /// §5.4, [`mcpl::session::admit_at_host`]), then the feature-set gate (§6.4 rule 2,
    /// §6.5, §6.6, [`mcpl::session::rules::gate_tagged_request`]). `Ok(true)`: admitted
    /// and carried; `Ok(false)`: admitted, refused by the gate; `Err`: not admitted.
    pub(super) fn host_rule(&self, method: &str, params: &Value) -> Result<bool, ()> {
        let grant = self.policy.grant();
        mcpl::session::admit_at_host(method, Some(params), self.ready, grant).map_err(|_| ())?;
        let statuses = self.policy.statuses();
        let mut diags = Vec::new();
        let gate = mcpl::session::rules::gate_tagged_request(
            &mut diags,
            method,
            Some(params),
            self.policy.declarations(),
            &statuses,
        );
        Ok(gate.is_ok())
    }

    /// Every probe, in order, then `host.refusal-code`'s verdict on what they were refused
    /// with (judged even when the host went away before the last of them).
    pub(super) async fn probes(&mut self) {
        // An id-null error read from here on may answer the junk line: not the host's word
        // on the answers carrying unknown members (`host.unknown-fields-tolerated`).
        self.tolerance_errors_closed();
        self.each_probe().await;
        match self.refusal_codes.verdict() {
            Some((status, detail)) => self.record(REFUSAL_CODE, status, detail),
            None if !self.closed => {
                let why = "neither the push/event nor the inference/request probe was refused \
                           with an error under a grant that does not allow it: no code to judge";
                self.record(REFUSAL_CODE, Status::Skip, why);
            }
            None => {}
        }
        match self.refusal_data.verdict() {
            Some((status, detail)) => self.record(REFUSAL_DATA, status, detail),
            None if !self.closed => {
                let why = "no request of the checker's was refused -32002: no data to judge";
                self.record(REFUSAL_DATA, Status::Skip, why);
            }
            None => {}
        }
    }

    /// Every probe, in order; stops early once the connection is gone.
    async fn each_probe(&mut self) {
        // Stops at the first probe the host is no longer there for.
        macro_rules! in_order {
            ($($probe:ident),*) => {$(
                if self.closed {
                    return;
                }
                self.$probe().await;
            )*};
        }
        in_order!(
            undeclared_push,
            answers_every_request,
            ping_answered,
            unknown_method,
            removed_method,
            incoming_unregistered,
            register,
            register_duplicate_and_list,
            changed_itemized,
            incoming_follows_grant,
            undeclared_use,
            invalid_uses,
            inference,
            junk_line,
            // §17: after every probe reading the manifest as initialized, before the push
            // (its removals and addition leave check.push and the hooks' leaf untouched).
            manifest_changes,
            // Last, so a host application sees its admitted push once every probe is
            // answered.
            push_follows_grant
        );
    }

    /// MCP's `ping`, which a server may send at any time: answered with an empty result.
    /// Reading (as `mcpl check`'s `rpc.ping-answered`): MCP's empty result is an object (its
    /// `_meta` and other members allowed); a result that is no object (`"pong"`) is an answer
    /// a server decoding it cannot read, and an error is an answer but no pong, so both
    /// warn; silence fails (§6.6). The pings paired with other probes are not judged here.
    async fn ping_answered(&mut self) {
        self.stage = "the ping probe";
        let id = "host.ping-answered";
        match self.call(Ping::NAME, json!({})).await {
            Reply::Result(v) if v.is_object() => {
                self.record(id, Status::Pass, "answered with a result")
            }
            Reply::Result(v) => {
                let d = format!(
                    "answered with the result {}, which is no object (MCP: an empty result, {{}})",
                    excerpt(&v)
                );
                self.record(id, Status::Warn, d)
            }
            Reply::Error(e) => self.record(
                id,
                Status::Warn,
                format!(
                    "answered error {} rather than a result (MCP: an empty result)",
                    e.code
                ),
            ),
            Reply::Closed => {}
            other => {
                self.ping_silent = matches!(other, Reply::Timeout { .. });
                self.record(id, Status::Fail, format!("ping got {}", other.describe()));
            }
        }
    }

    /// §6.6 (AUDIT-001 §2.1: a result carrying `accepted: false` instead of an error).
    /// `-32003` is §6.6's code for an unknown feature set (SHOULD); `-32002` is its code for
    /// a denied capability, and passes too when `pushEvents` is not in the grant in force
    /// (none before the receipt, §5.3), when the probe went or when it was answered, or
    /// after a grant change by Notification ([`super::judge::Meanwhile`]): admission comes
    /// before the feature set is looked at (§5.4), as `host.refusal-code` reads it.
    async fn undeclared_push(&mut self) {
        self.stage = "the push under an undeclared feature set";
        let id = "host.rejects-with-error";
        let pushes = |run: &Run| {
            run.ready && run.policy.allows(Capability::PushEvents) && !run.grant_notified
        };
        let sent = pushes(self);
        let reply = self
            .call(PushEvent::NAME, push("check.undeclared", "u1"))
            .await;
        let denied = !sent || !self.as_answered(pushes);
        match reply {
            Reply::Error(e) if e.code == codes::UNKNOWN_FEATURE_SET => {
                self.record(id, Status::Pass, "refused -32003")
            }
            Reply::Error(e) if e.code == codes::CAPABILITY_DENIED && denied => self.record(
                id,
                Status::Pass,
                "refused -32002: pushEvents is not in the grant in force (§6.6: the code for a \
                 denied capability, which admission checks before the feature set, §5.4)",
            ),
            Reply::Error(e) => self.record(
                id,
                Status::Warn,
                format!(
                    "refused with error {}; an unknown feature set SHOULD be -32003",
                    e.code
                ),
            ),
            Reply::Closed => {}
            other => self.record(
                id,
                Status::Fail,
                format!(
                    "push/event under an undeclared set got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §6.6: a request with an id always gets an answer (AUDIT-001 §4.2 item 5: model/info
    /// and channels/list hung).
    async fn answers_every_request(&mut self) {
        let id = "host.answers-every-request";
        let (mut silent, mut invalid, mut unread) = (Vec::new(), Vec::new(), Vec::new());
        let mut gated = Gated::default();
        for (method, stage, needs) in [
            (
                ModelInfoRequest::NAME,
                "the model/info probe",
                Capability::ModelInfo,
            ),
            (
                ChannelsList::NAME,
                "the channels/list probe",
                Capability::ChannelsRegister,
            ),
        ] {
            self.stage = stage;
            let sent = self.ready && self.policy.allows(needs);
            let reply = self.call_paired(method, json!({}), self.bounds.step).await;
            let (meanwhile, offered) = self.as_answered(|run| {
                let meanwhile = Meanwhile {
                    sent,
                    answered: run.ready && run.policy.allows(needs),
                    notified: run.grant_notified && run.ready,
                };
                (meanwhile, run.ready && run.policy.offered().allows(needs))
            });
            gated.judge(method, needs, meanwhile, offered, &reply);
            match reply {
                Reply::Timeout { note } => silent.push(format!("{method}{note}")),
                Reply::Invalid(why) => invalid.push(format!("{method} ({why})")),
                Reply::Unread(why) => unread.push(format!("{method} ({why})")),
                Reply::Closed => return,
                _ => {}
            }
        }
        if !gated.beyond.is_empty() {
            // §5.4: the one defect is the grant; the answer shows the host acted on it.
            let d = format!(
                "the host acted on a grant beyond the advertisement: {} (§5.4: \
                 effectiveCapabilities is the intersection of the server's advertisement and \
                 host policy, so a path never advertised is denied, and §12 asks for an error)",
                gated.beyond.join("; ")
            );
            self.record("host.grant-within-advertisement", Status::Fail, d);
        }
        let (status, detail) = gated.verdict();
        self.record("host.answers-follow-grant", status, detail);
        let mut defects = Vec::new();
        if !silent.is_empty() {
            defects.push(format!(
                "no answer within the timeout: {}",
                silent.join(", ")
            ));
        }
        if !invalid.is_empty() {
            let d = format!(
                "a response that is not valid JSON-RPC: {}",
                invalid.join(", ")
            );
            defects.push(d);
        }
        if !unread.is_empty() {
            let d = format!(
                "an answer the checker could not read: {}",
                unread.join(", ")
            );
            defects.push(d);
        }
        if defects.is_empty() {
            self.record(id, Status::Pass, "model/info and channels/list answered");
        } else {
            self.record(id, Status::Fail, defects.join("; "));
        }
    }

    /// §6.6: an unknown method is an error, never silence.
    async fn unknown_method(&mut self) {
        self.stage = "the unknown-method probe";
        let id = "host.unknown-method-errors";
        let method = "mcpl-check-host/no-such-method";
        match self.call_paired(method, json!({}), self.bounds.step).await {
            Reply::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                self.record(id, Status::Pass, "answered -32601")
            }
            Reply::Error(e) => self.record(
                id,
                Status::Warn,
                format!("answered error {} (-32601 expected)", e.code),
            ),
            Reply::Closed => {}
            other => self.record(
                id,
                Status::Fail,
                format!("unknown method got {}", other.describe()),
            ),
        }
    }

    /// §7, §6.6 (AUDIT-001 §3: `scope/elevate` approved, ungated): the method 0.5.0 removed
    /// is an unknown method now, answered with an error (`-32601`; any error refuses it),
    /// never a result, which would be an approval on a label the server chose. Sent with the
    /// 0.4 shape, the label claiming more than the payload does.
    async fn removed_method(&mut self) {
        self.stage = "the scope/elevate probe";
        let id = "host.removed-methods-refused";
        let method = "scope/elevate";
        let params = json!({ "featureSet": "check.push",
            "scope": { "label": "/project/**", "payload": { "path": "/etc/hosts" } },
            "reason": "mcpl check-host probe: to be refused" });
        match self.call_paired(method, params, self.bounds.step).await {
            Reply::Error(e) => {
                let d = if e.code == codes::METHOD_NOT_FOUND {
                    "scope/elevate refused -32601".to_owned()
                } else {
                    format!("scope/elevate refused with error {}", e.code)
                };
                self.record(id, Status::Pass, d);
            }
            Reply::Closed => {}
            Reply::Result(r) => self.record(
                id,
                Status::Fail,
                format!(
                    "scope/elevate (removed in 0.5.0, §7: an approval matched a label the \
                     server chose) was answered {} where an unknown method gets an error (§6.6)",
                    excerpt(&r)
                ),
            ),
            Reply::Timeout { note } => self.record(
                id,
                Status::Fail,
                format!("scope/elevate got no answer within the timeout{note} (§6.6: must error, not silence)"),
            ),
            other @ (Reply::Invalid(_) | Reply::Unread(_)) => self.record(
                id,
                Status::Fail,
                format!("scope/elevate got {}", other.describe()),
            ),
        }
    }

    /// §14.5: messages for channels never registered are refused, each of them: the probe
    /// sends two ([`unregistered_incoming`]) and judges every per-message result.
    async fn incoming_unregistered(&mut self) {
        self.stage = "the channels/incoming probe for a channel never registered";
        let id = "host.incoming-unregistered-refused";
        let params = unregistered_incoming();
        match self
            .call_paired(ChannelsIncoming::NAME, params, self.bounds.step)
            .await
        {
            Reply::Error(e) => {
                self.record(id, Status::Pass, format!("refused with error {}", e.code));
                self.unknown_channel_code(e.code);
            }
            Reply::Result(r) => match unrefused_messages(&r, UNREGISTERED.len()) {
                None => self.record(id, Status::Pass, "every message was refused in its result"),
                Some(why) => self.record(
                    id,
                    Status::Fail,
                    format!(
                        "messages for channels never registered were answered {} ({why})",
                        excerpt(&r)
                    ),
                ),
            },
            Reply::Closed => {}
            Reply::Timeout { note } => self.record(
                id,
                Status::Fail,
                format!("no response within the timeout{note} (§6.6: must error, not silence)"),
            ),
            other @ (Reply::Invalid(_) | Reply::Unread(_)) => self.record(
                id,
                Status::Fail,
                format!("channels/incoming got {}", other.describe()),
            ),
        }
        if !self.closed {
            let why = "channels/incoming for a channel never registered was not refused with an \
                       error: no code to judge";
            self.record_unset(&["host.unknown-channel-code"], Status::Skip, why);
        }
    }

    /// §14.6, §6.6 (AUDIT-001 §2.1: the channel codes were defined and never thrown): the
    /// error refusing `channels/incoming` for a channel never registered carries `-32023`,
    /// or `-32002` when the grant withholds `channels.incoming` (admission refuses first,
    /// §5.4); another code warns. Reading: §14.6 lists the code without a MUST, so a warning.
    fn unknown_channel_code(&mut self, code: i64) {
        let id = "host.unknown-channel-code";
        // After a grant change by Notification the host may hold channels.incoming no longer
        // ([`Meanwhile`]): its -32002 is then the denied capability's code.
        let granted = self.as_answered(|run| {
            run.policy.allows(Capability::ChannelsIncoming) && !run.grant_notified
        });
        match code {
            codes::UNKNOWN_CHANNEL => self.record(id, Status::Pass, "refused -32023"),
            codes::CAPABILITY_DENIED if !granted => self.record(
                id,
                Status::Pass,
                "refused -32002: channels.incoming is not granted",
            ),
            other => self.record(
                id,
                Status::Warn,
                format!(
                    "refused with error {other}; §14.6 names -32023 (unknown channel) for a \
                     channel never registered{}",
                    if granted {
                        ""
                    } else {
                        ", or -32002 as channels.incoming is not granted"
                    }
                ),
            ),
        }
    }

    /// §14.5 per-descriptor results; §5.4 / AUDIT-001 §2.3: channels gated by the grant.
    /// Granted, a result not one per descriptor fails and an error refusing the whole warns,
    /// as `host.changed-itemized` reads its probe (safe, but no itemized answer).
    async fn register(&mut self) {
        self.stage = "the channels/register probe";
        let id = "host.register-itemized";
        let sent = self.policy.allows(Capability::ChannelsRegister);
        let reply = self
            .call_paired(ChannelsRegister::NAME, descriptors(), self.bounds.step)
            .await;
        let meanwhile = self.as_answered(|run| Meanwhile {
            sent,
            answered: run.policy.allows(Capability::ChannelsRegister),
            notified: run.grant_notified && run.ready,
        });
        let note = meanwhile.note();
        match (meanwhile.expected(), reply) {
            (Some(true) | None, Reply::Result(r)) => {
                self.channel_held = super::channels::accepts(&r, "check:a");
                // What the checker lists when the host asks (§14.3): the descriptors the
                // host accepted.
                self.held_channels = super::served::accepted_descriptors(&r);
                let defects = itemized_defects(&r, &["check:a", "check:b"]);
                if defects.is_empty() {
                    self.record(id, Status::Pass, format!("one result per descriptor{note}"))
                } else {
                    let d = format!(
                        "results are not one per descriptor ({}): {}",
                        defects.join("; "),
                        excerpt(&r)
                    );
                    self.record(id, Status::Fail, format!("{d}{note}"))
                }
            }
            (Some(false), Reply::Result(r)) => self.record(
                id,
                Status::Fail,
                format!(
                    "channels.register is not granted, yet channels/register was answered \
                     {}{note}",
                    excerpt(&r)
                ),
            ),
            (Some(false) | None, Reply::Error(e)) => self.record(
                id,
                Status::Pass,
                format!(
                    "channels.register not granted, refused with error {}{note}",
                    e.code
                ),
            ),
            // One reading with `host.changed-itemized` (§14.5): a whole-request error under
            // a grant that allows the method widens nothing (the MUST is per-descriptor
            // authorization, which an acceptance breaks) and is an error object (§6.6), yet
            // it is no itemized answer ("the same shape applies to channels/register"): a
            // warning, where it had failed.
            (Some(true), Reply::Error(e)) => {
                let what = if e.code == mcpl::jsonrpc::codes::METHOD_NOT_FOUND {
                    "not implemented (-32601)".to_owned()
                } else {
                    format!("refused whole with error {}", e.code)
                };
                let d = format!(
                    "channels.register granted, yet channels/register was {what}: §14.5 asks one \
                     result per descriptor, so the server can tell which of its channels \
                     exist{note}"
                );
                self.record(id, Status::Warn, d)
            }
            (_, Reply::Closed) => {}
            (_, other) => self.record(
                id,
                Status::Fail,
                format!("channels/register got {}", other.describe()),
            ),
        }
    }

    /// §14.2, §14.5: a `channels/register` naming [`DUPLICATE_ID`] in two descriptors is
    /// refused with an error, or answered with one result per descriptor accepting at most
    /// one ([`duplicate_defects`]). Judged when the grant allowed `channels.register` both
    /// when the probe went and when it was answered (else a refusal shows only the grant).
    pub(super) async fn register_duplicate(&mut self) {
        self.stage = "the channels/register probe repeating a channel id";
        let id = "host.register-duplicate-id";
        let granted = |run: &Run| run.ready && run.policy.allows(Capability::ChannelsRegister);
        if !granted(self) {
            let why = "channels.register not granted: a refusal would not show what the host \
                       does with a repeated id";
            self.record(id, Status::Skip, why);
            return;
        }
        let reply = self
            .call_paired(
                ChannelsRegister::NAME,
                duplicate_descriptors(),
                self.bounds.step,
            )
            .await;
        // Under the grant in force when the host answered (`Run::as_answered`): a narrowing
        // it sent behind its answer does not reach back to it (§6.7, wire order).
        if !self.as_answered(granted) && !matches!(reply, Reply::Closed) {
            let why = "the host withdrew channels.register while the probe was outstanding: \
                       a refusal would not show what it does with a repeated id";
            self.record(id, Status::Skip, why);
            return;
        }
        match reply {
            Reply::Error(e) => {
                self.record(id, Status::Pass, format!("refused with error {}", e.code))
            }
            Reply::Result(r) => match duplicate_defects(&r, 2) {
                None => self.record(
                    id,
                    Status::Pass,
                    "at most one of the descriptors sharing an id accepted, one result each",
                ),
                Some(why) => self.record(
                    id,
                    Status::Fail,
                    format!(
                        "channels/register naming {DUPLICATE_ID} twice (§14.2: unique within \
                         the connection) was answered {} ({why})",
                        excerpt(&r)
                    ),
                ),
            },
            Reply::Closed => {}
            other => self.record(
                id,
                Status::Fail,
                format!(
                    "channels/register naming {DUPLICATE_ID} twice got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §14.5 receipt-time validation against the current grant.
    async fn incoming_follows_grant(&mut self) {
        self.stage = "the channels/incoming probe against the grant";
        let id = "host.incoming-follows-grant";
        if self.policy.allows(Capability::ChannelsIncoming) {
            let why = "channels.incoming granted: nothing to refuse";
            self.record(id, Status::Skip, why);
            // In this probe's place (one step either way), each message of a mixed batch.
            self.incoming_mixed().await;
            return;
        }
        let reply = self
            .call_paired(
                ChannelsIncoming::NAME,
                incoming("check:a"),
                self.bounds.step,
            )
            .await;
        let meanwhile = self.as_answered(|run| Meanwhile {
            sent: false,
            answered: run.policy.allows(Capability::ChannelsIncoming),
            notified: run.grant_notified && run.ready,
        });
        // check:a not registered: a -32023 refuses the channel, which a host ignoring the
        // grant refuses too, so the pass says it shows nothing of the grant rule.
        let unheld = if self.channel_held {
            ""
        } else {
            " (-32023: check:a was never registered, so a host that ignores channels.incoming \
             refuses it too; the grant rule is not shown)"
        };
        match (meanwhile.expected(), reply) {
            (_, Reply::Error(e)) => self.record(
                id,
                Status::Pass,
                format!(
                    "not granted, refused with error {}{}{}",
                    e.code,
                    meanwhile.note(),
                    if e.code == codes::UNKNOWN_CHANNEL {
                        unheld
                    } else {
                        ""
                    }
                ),
            ),
            (_, Reply::Closed) => {}
            (None, Reply::Result(_)) => {
                let d = format!("answered{}", meanwhile.note());
                self.record(id, Status::Pass, d);
            }
            (_, other) => self.record(
                id,
                Status::Fail,
                format!(
                    "channels.incoming is not granted, yet channels/incoming got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §6.4 rule 2: a push under `check.hints`, whose `uses` lacks `pushEvents`, while the
    /// grant allows pushes and leaves the set available, so only the declaration can refuse
    /// it; the refusal is an error object (§6.6).
    async fn undeclared_use(&mut self) {
        self.stage = "the push under a set that does not declare it";
        let id = "host.undeclared-use-refused";
        let params = push("check.hints", "d1");
        let available = self.policy.is_available("check.hints");
        if !available || self.host_rule(PushEvent::NAME, &params) != Ok(false) {
            let why = "pushEvents not granted or check.hints unavailable: a refusal would not \
                       show the declaration rule";
            self.record(id, Status::Skip, why);
            return;
        }
        match self.call(PushEvent::NAME, params).await {
            Reply::Error(e) => {
                self.record(id, Status::Pass, format!("refused with error {}", e.code))
            }
            Reply::Closed => {}
            other => self.record(
                id,
                Status::Fail,
                format!(
                    "push/event under check.hints, whose uses lacks pushEvents, got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §6.2, §6.4 rule 1 (AUDIT-001 §2.5: `uses` was never read as a closed vocabulary): a
    /// push under [`TYPO_SET`], whose `uses` holds [`TYPO_USE`] beside `pushEvents`, while
    /// the grant allows pushes, so only the invalid declaration can refuse it. The host MUST
    /// disable the set (`invalid_uses`) rather than guess; the refusal is an error object
    /// (§6.6), its code judged by `host.refusal-code`. Judged when the grant allowed pushes
    /// both when the probe went and when it was answered.
    async fn invalid_uses(&mut self) {
        self.stage = "the push under a set whose uses is invalid";
        let id = "host.invalid-uses-refused";
        let params = push(TYPO_SET, "t1");
        let pushes = |run: &Run| run.ready && run.policy.allows(Capability::PushEvents);
        if !pushes(self) {
            let why = "pushEvents not granted: a refusal would not show the uses rule";
            self.record(id, Status::Skip, why);
            return;
        }
        let reply = self
            .call_paired(PushEvent::NAME, params, self.bounds.step)
            .await;
        if !self.as_answered(pushes) && !matches!(reply, Reply::Closed) {
            let why = "the host withdrew pushEvents while the probe was outstanding: a refusal \
                       would not show the uses rule";
            self.record(id, Status::Skip, why);
            return;
        }
        let what = format!(
            "push/event under {TYPO_SET}, whose uses names {TYPO_USE:?} (not a §6.2 capability \
             path, so the set is invalid and disabled, invalid_uses, §6.4 rule 1, and the push \
             refused with an error, §6.6)"
        );
        match reply {
            Reply::Error(e) => {
                let needs = Capability::PushEvents;
                let what = format!("push/event under {TYPO_SET}");
                // §6.6: -32003 (unknown feature set) is documented here, the host having
                // discarded the invalid declaration (§6.4 rule 1).
                self.refusal_code(&what, needs, Some(false), &e, true);
                self.record(id, Status::Pass, format!("refused with error {}", e.code));
            }
            Reply::Closed => {}
            other => self.record(id, Status::Fail, format!("{what} got {}", other.describe())),
        }
    }

    /// §5.4 / §6.6: `inference/request` under `check.infer` is refused with an error object
    /// unless the grant allows it and leaves the set available; any result is judged against
    /// §11.3. A host that grants it runs one short inference, awaited `--inference-timeout`;
    /// a refusal needs no inference, so an ungranted one is awaited the step timeout.
    /// When the grant in force allows `inferenceRequest.streaming` (and
    /// [`super::served::STREAM_SET`], which declares it, is available), the one probe asks
    /// `stream: true` under that set, its chunks judged by `host.chunks-well-formed`
    /// ([`super::streamed`]); no second inference.
    async fn inference(&mut self) {
        self.stage = "the inference/request probe";
        let (id, shape) = (
            "host.inference-follows-grant",
            "host.inference-result-shape",
        );
        let streamed = inference_request_streamed();
        let params = if self.host_rule(InferenceRequest::NAME, &streamed) == Ok(true) {
            streamed
        } else {
            inference_request()
        };
        self.inference_probed = true;
        // The set the probe goes under, named in the verdicts (a short constant of ours).
        let set = params
            .get("featureSet")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let sent = self.host_rule(InferenceRequest::NAME, &params) == Ok(true);
        let bound = if sent {
            self.bounds.infer
        } else {
            self.bounds.step
        };
        let reply = self
            .call_paired(InferenceRequest::NAME, params.clone(), bound)
            .await;
        // §11.4: what the streamed probe's chunks are compared with (a no-op unstreamed).
        self.stream.replied(&reply);
        let meanwhile = self.as_answered(|run| Meanwhile {
            sent,
            answered: run.host_rule(InferenceRequest::NAME, &params) == Ok(true),
            notified: run.grant_notified && run.ready,
        });
        let allowed = meanwhile.expected() != Some(false);
        if let Reply::Error(e) = &reply {
            let needs = Capability::InferenceRequest;
            self.refusal_code(
                InferenceRequest::NAME,
                needs,
                meanwhile.expected(),
                e,
                false,
            );
        }
        let (status, detail, judged) = match (meanwhile.expected(), reply) {
            (_, Reply::Closed) => return,
            (None, Reply::Result(r)) => (Status::Pass, "answered".into(), Some(r)),
            (None, Reply::Error(e)) => (Status::Pass, format!("refused {}", e.code), None),
            (Some(true), Reply::Result(r)) => {
                (Status::Pass, "allowed, and answered".into(), Some(r))
            }
            (Some(true), Reply::Error(e)) if REFUSAL.contains(&e.code) => (
                Status::Fail,
                format!(
                    "the policy allows {set}, yet the request was refused {} (sent after the \
                     receipt was written; a host that activates a grant only some time after \
                     reading its receipt, §6.7, shows the same on the wire)",
                    e.code
                ),
                None,
            ),
            (Some(true), Reply::Error(e)) if e.code == codes::METHOD_NOT_FOUND => (
                Status::Warn,
                "inferenceRequest granted, yet inference/request is not implemented (-32601)"
                    .into(),
                None,
            ),
            (Some(true), Reply::Error(e)) => (
                Status::Pass,
                format!("allowed; the inference failed with error {}", e.code),
                None,
            ),
            (Some(false), Reply::Error(e)) if REFUSAL.contains(&e.code) => (
                Status::Pass,
                format!("not allowed by the policy, refused {}", e.code),
                None,
            ),
            (Some(false), Reply::Error(e)) => (
                Status::Warn,
                format!(
                    "not allowed, refused with error {} (-32002 or -32001 expected)",
                    e.code
                ),
                None,
            ),
            (Some(false), Reply::Result(r)) => (
                Status::Fail,
                format!(
                    "the policy does not allow {set}, yet the request was answered {}",
                    excerpt(&r)
                ),
                Some(r),
            ),
            (_, other) => (
                Status::Fail,
                format!("inference/request got {}", other.describe()),
                None,
            ),
        };
        self.record(id, status, format!("{detail}{}", meanwhile.note()));
        // A streamed probe's result is host.chunks-well-formed's, not an unstreamed one.
        if !self.stream.asked() {
            self.inference_answered |= judged.is_some();
        }
        let (status, detail) = match judged {
            None if allowed => (Status::Skip, "no result to judge".into()),
            None => (
                Status::Skip,
                "inferenceRequest not allowed and refused: no result to judge".into(),
            ),
            Some(r) => match inference_result_defects(&r) {
                (fail, _) if !fail.is_empty() => (Status::Fail, fail.join("; ")),
                (_, warn) if !warn.is_empty() => (Status::Warn, warn.join("; ")),
                _ => (Status::Pass, "content is the generated text".into()),
            },
        };
        self.record(shape, status, detail);
    }

    /// §4 (issue #19 item 3): one line that is not JSON, then a ping, which must still be
    /// answered (a `-32700` for the line is fine, ending the connection is not).
    async fn junk_line(&mut self) {
        self.stage = "the junk-line probe";
        let id = "host.survives-junk-line";
        if self
            .peer
            .notify_raw(junk::MARKER_METHOD, None)
            .await
            .is_err()
        {
            self.on_closed();
            return;
        }
        match self.call(Ping::NAME, json!({})).await {
            Reply::Closed => {
                self.died_of_junk = true;
                let how = self.gone().unwrap_or("the connection ended").to_owned();
                self.record(
                    id,
                    Status::Fail,
                    format!("after a line that is not JSON, {how}"),
                );
            }
            // The ping probe's ping went unanswered too: the same silence, judged there
            // (one defect, one finding), not a sign of what the junk line did.
            Reply::Timeout { .. } if self.ping_silent => {
                let why = "the ping after the line that is not JSON got no answer, nor had the \
                           ping probe's (host.ping-answered): the host answers no ping, so \
                           what the line did cannot be told";
                self.record(id, Status::Skip, why);
            }
            Reply::Timeout { note } => {
                let d = format!(
                    "after a line that is not JSON, a ping got no answer within {}{note}",
                    secs(self.bounds.step)
                );
                self.record(id, Status::Fail, d);
            }
            _ => self.record(
                id,
                Status::Pass,
                "a ping after a line that is not JSON was answered",
            ),
        }
    }

    /// §5.4: a push is accepted when the policy allows its set, refused with an error when
    /// not (§6.6: never a result carrying a failure flag); judged under the grant in force
    /// when the host answered ([`Meanwhile`]).
    async fn push_follows_grant(&mut self) {
        self.stage = "the push/event probe against the grant";
        let id = "host.push-follows-grant";
        let params = push("check.push", "p1");
        let sent = self.host_rule(PushEvent::NAME, &params) == Ok(true);
        let reply = self.call(PushEvent::NAME, params.clone()).await;
        let meanwhile = self.as_answered(|run| Meanwhile {
            sent,
            answered: run.host_rule(PushEvent::NAME, &params) == Ok(true),
            notified: run.grant_notified && run.ready,
        });
        if let Reply::Error(e) = &reply {
            let needs = Capability::PushEvents;
            self.refusal_code(
                "push/event under check.push",
                needs,
                meanwhile.expected(),
                e,
                false,
            );
        }
        let (status, detail) = match (meanwhile.expected(), reply) {
            (_, Reply::Closed) => return,
            // §9.3: a host may decline an event it may receive (rate limits, §9.4 dedupe).
            (Some(true), Reply::Result(r)) if r.get("accepted") == Some(&Value::Bool(false)) => (
                Status::Warn,
                format!("granted and available, but declined: {}", excerpt(&r)),
            ),
            (Some(true), Reply::Result(_)) => {
                (Status::Pass, "granted, and the push was accepted".into())
            }
            (Some(true), Reply::Error(e)) if REFUSAL.contains(&e.code) => (
                Status::Fail,
                format!(
                    "the policy allows check.push, yet the push was refused {}",
                    e.code
                ),
            ),
            (Some(true), Reply::Error(e)) => (
                Status::Warn,
                format!("granted, push refused with error {}", e.code),
            ),
            (Some(false), Reply::Error(e)) if REFUSAL.contains(&e.code) => (
                Status::Pass,
                format!("not allowed by the policy, refused {}", e.code),
            ),
            (_, Reply::Error(e)) if !REFUSAL.contains(&e.code) => (
                Status::Warn,
                format!(
                    "not allowed, refused with error {} (-32002 or -32001 expected)",
                    e.code
                ),
            ),
            (None, Reply::Error(e)) => (Status::Pass, format!("refused {}", e.code)),
            (None, Reply::Result(_)) => (Status::Pass, "the push was accepted".into()),
            (Some(false), Reply::Result(r)) => (
                Status::Fail,
                format!(
                    "the policy does not allow check.push, yet the push was answered {}",
                    excerpt(&r)
                ),
            ),
            (_, other) => (Status::Fail, format!("push/event got {}", other.describe())),
        };
        self.record(id, status, format!("{detail}{}", meanwhile.note()));
    }
}

impl Run {
    /// Notes the `code` refusing the `method` probe for `host.refusal-code`
    /// ([`super::judge::RefusalCodes`]), recorded once the probes are done; `undeclarable`:
    /// the probe's feature set is one the host may treat as not declared (§6.4 rule 1).
    fn refusal_code(
        &mut self,
        method: &str,
        needs: Capability,
        expected: Option<bool>,
        e: &mcpl::jsonrpc::ErrorObject,
        undeclarable: bool,
    ) {
        let claimed = self.host_advertised.contains(needs);
        self.refusal_codes.note(
            method,
            needs.as_str(),
            expected,
            e.code,
            (claimed, undeclarable),
        );
    }
}
