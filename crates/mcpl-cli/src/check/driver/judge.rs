//! Judgements over what the server sent on its own (push events, inference requests,
//! channel messages, manifest announcements) and the verdicts recorded when a session ends.

use mcpl::capability::Requirement;
use mcpl::policy;
use mcpl::protocol::channels::{ChannelsIncoming, ChannelsRegister};
use mcpl::protocol::inference::InferenceRequest;
use mcpl::protocol::manifest::{ManifestChanged, ManifestFetch};
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};
use std::collections::HashMap;

use super::*;
use crate::check::inspect;
use crate::check::report::Status;

impl Session {
    /// §17.5: a manifest served after `initialize` (`what` names how: by `mcpl/manifest`, or
    /// after `mcpl/manifestChanged`) is validated exactly as the one `initialize` carried, by
    /// the same `manifest.*` rules ([`Session::judge_manifest`]); the `initialize.*` checks
    /// stay about `initialize`. Called for one that differs from the initial manifest (an
    /// equal one was judged already); past the feature-set bound the sets are counted, not
    /// built, as there. Only a failure or a warning is recorded, naming `what`: the initial
    /// verdicts stand otherwise.
    pub(super) fn judge_served_manifest(&mut self, served: &Value, what: &str) {
        let mut found = Vec::new();
        let (count, within) = inspect::fetched_feature_set_count(served);
        found.push(("manifest.feature-set-count", count));
        if within {
            let (sets, findings) = FeatureSets::from_mcpl(served);
            found.extend([
                (
                    "manifest.feature-sets-shape",
                    inspect::feature_sets_shape(served, &sets, &findings),
                ),
                ("manifest.uses-valid", inspect::uses_valid(&sets, &findings)),
                (
                    "manifest.identifier-charset",
                    inspect::identifier_charset(served),
                ),
                ("manifest.tag-facets", inspect::tag_facets(served)),
                ("manifest.tag-ontology", inspect::tag_ontology(served)),
            ]);
        }
        for (id, (st, d)) in found {
            if matches!(st, Status::Fail | Status::Warn) {
                self.rec.record_worse(id, st, format!("{what}: {d}"));
            }
        }
    }

    /// §17.3 / §17.2: the revision a `mcpl/manifestChanged` announces is the digest of the
    /// manifest then served. Fetched once after the watch, for the last announcement.
    pub(super) fn check_announced(&mut self) {
        let id = "manifest.changed-revision-matches";
        let domains_id = "manifest.changed-domains-match";
        if self.announced.is_none() {
            let why = if self.changed_seen == 0 {
                format!(
                    "server sent no mcpl/manifestChanged{}",
                    self.runner.scenario().hint()
                )
            } else {
                "no announced revision of the digest's shape to compare (see \
                 manifest.changed-shape)"
                    .to_owned()
            };
            self.rec.skip_all(&[id, domains_id], &why);
            return;
        }
        if self.closed.is_some() {
            return; // reported with the rest as skipped
        }
        let reply = self.request(ManifestFetch::NAME, json!({}));
        // Compared with the announcement standing when the manifest arrived (a newer one may
        // have come in while the fetch was waiting).
        let announced = self.announced.take().unwrap_or_default();
        match reply {
            Reply::Closed(why) => {
                let why = format!("connection ended before the fetch was answered: {why}");
                self.rec.skip_all(&[id, domains_id], &why);
            }
            Reply::Result(m) => {
                self.take_fetched(&m);
                self.judge_domains(domains_id, &m);
                self.judge_revision(id, &announced, &m);
                let what = "the manifest mcpl/manifest served after mcpl/manifestChanged";
                if !self
                    .initial_manifest
                    .as_ref()
                    .is_some_and(|initial| same_manifest(initial, &m))
                {
                    self.judge_served_manifest(&m, what);
                }
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
    /// under-announcing fails, announcing a domain that did not change warns. The warning
    /// needs a single announcement: after several, a domain may have changed and changed
    /// back (a set added, then removed: §17.1 lets the revision return to an earlier one),
    /// which the two manifests the checker holds cannot tell from one announced in vain.
    pub(super) fn judge_domains(&mut self, id: &'static str, served: &Value) {
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
            .copied()
            .filter(|d| !changed.contains(d))
            .collect();
        let announced = self
            .announced_domains
            .iter()
            .copied()
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
        } else if !extra.is_empty() && self.changed_seen <= 1 {
            self.rec.record(
                id,
                Status::Warn,
                format!("announced {} but it did not change", extra.join(", ")),
            );
        } else if extra.is_empty() {
            self.rec.record(
                id,
                Status::Pass,
                format!("announced [{announced}], exactly what changed"),
            );
        } else {
            let d = format!(
                "announced [{announced}] over {} announcements, covering every domain that \
                 differs since initialize ({}; {} may have changed and changed back between \
                 them)",
                self.changed_seen,
                if changed.is_empty() {
                    "none".to_owned()
                } else {
                    changed.join(", ")
                },
                extra.join(", ")
            );
            self.rec.record(id, Status::Pass, d);
        }
    }

    /// §17.3 / §17.2: the last announced revision is the digest of the manifest served.
    pub(super) fn judge_revision(&mut self, id: &'static str, announced: &str, m: &Value) {
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

    /// `hooks.no-inference-in-hook` (§10.7), from what each judged hook came to
    /// ([`super::hook_path`]). Only a hook sent right after an answered `ping` is judged:
    /// what the server wrote on its own before reading the hook (its traffic on a receipt)
    /// has then arrived before the `ping` answer, and is not held as the hook's.
    pub(super) fn judge_hook_path(&mut self) {
        let (status, detail) = match self.hook_path.verdict() {
            (Some(true), d) => (Status::Pass, d),
            (Some(false), d) => (Status::Fail, d),
            (None, why) => (Status::Skip, why),
        };
        self.rec
            .record("hooks.no-inference-in-hook", status, detail);
    }

    /// Notes a frame discarded or refused unread (`why`): one over the checker's own bound
    /// ([`crate::check::conn::own_bound_reason`], kept without its mark) apart from the
    /// invalid ones, so that
    /// `transport.frames-valid` names the bound rather than call the frame invalid.
    pub(super) fn discarded(&mut self, why: impl AsRef<str>) {
        if let Some(why) = crate::check::conn::own_bound_reason(why.as_ref()) {
            self.own_bounds.push(why);
        } else {
            self.invalid.push(why);
        }
    }

    /// The verdicts recorded when a session ends. The first session also settles what it
    /// never saw as skipped; a narrowed session records only what it has evidence for.
    pub(super) fn conclude(&mut self) {
        self.judge_hook_path();
        let first = self.narrowed.is_none();
        let frames = "transport.frames-valid";
        // RFC 8259 §8.1: a writer must not add a byte order mark, a parser may ignore it (the
        // library's peer does): a warning, unless something failed.
        let marked = (self.marked > 0).then(|| {
            format!(
                "{} frame(s) began with a UTF-8 byte order mark (U+FEFF, which RFC 8259 §8.1 \
                 says a writer must not add), read past it as the library's peer reads it",
                self.marked
            )
        });
        // JSON-RPC 2.0 §5: the same value, written otherwise (see `integral_id_read`).
        let integral = (!self.integral_ids.is_empty()).then(|| {
            format!(
                "{} and read as the integer id it equals: the same value, as JSON-RPC 2.0 §5 \
                 asks, but the request's id had no fraction, and a host that matches ids as \
                 written would never pair the answer with its request",
                self.integral_ids
                    .listed("answered an integer request id written with a fraction or exponent")
            )
        });
        // JSON-RPC 2.0 §4: a request's id SHOULD NOT have a fraction; taken, answered under
        // the same value (§5, `mcpl::jsonrpc::request_id_number`).
        let fractional = (!self.fractional_ids.is_empty()).then(|| {
            format!(
                "{}, which JSON-RPC 2.0 §4 says SHOULD NOT be used: taken, and answered under \
                 the same value (§5)",
                self.fractional_ids.listed(
                    "were requests with a numeric id written with a fraction or an exponent"
                )
            )
        });
        let marked = [marked, integral, fractional]
            .into_iter()
            .flatten()
            .reduce(|a, b| format!("{a}; {b}"));
        if self.junk.is_empty()
            && self.invalid.is_empty()
            && self.spread.is_empty()
            && self.own_bounds.is_empty()
        {
            match marked {
                Some(said) => self.rec.record(frames, Status::Warn, said),
                None => self
                    .rec
                    .record(frames, Status::Pass, "every frame was JSON-RPC 2.0"),
            }
        } else {
            let mut all = Vec::new();
            if !self.spread.is_empty() {
                all.push(format!(
                    "{} message(s) spread over several lines, where a message must be one line \
                     (§4: JSON-RPC as MCP carries it, whose stdio transport delimits messages \
                     by newlines and forbids embedded ones; each was read whole, so the run \
                     went on){}: {}",
                    self.spread.count,
                    if self.spread.count > self.spread.shown.len() as u64 {
                        format!(", the first {} shown", self.spread.shown.len())
                    } else {
                        String::new()
                    },
                    self.spread.shown.join("; ")
                ));
            }
            if !self.junk.is_empty() {
                all.push(self.junk.summary("junk (not JSON)"));
            }
            if !self.invalid.is_empty() {
                all.push(self.invalid.summary("invalid JSON-RPC"));
            }
            // §4 sets no size: such a frame is not shown invalid, but the checker could not
            // read it, so it cannot pass it (fails closed), saying why.
            if !self.own_bounds.is_empty() {
                all.push(self.own_bounds.listed(
                    "over the checker's own bounds (not the spec's: §4 sets no size), which it \
                     could not read, so unjudged and failed closed",
                ));
            }
            all.extend(marked);
            self.rec.record(frames, Status::Fail, all.join("; "));
        }
        // RFC 8259 §4 (SHOULD), I-JSON (RFC 7493 §2.3, what the §17.2 digest reads): a
        // warning, as every reader here reads such a frame (the last name wins).
        if self.repeated.is_empty() {
            self.rec.record(
                authority::MEMBER_NAMES_UNIQUE,
                Status::Pass,
                "no object repeated a member name",
            );
        } else {
            self.record_repeated();
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
            None if first && !self.rec.has(unaccepted) => {
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
        if !self.ready_by_notification.is_empty() && self.privileged_before_notification {
            // One defect, not two: a server that sent privileged messages before the grant
            // Notification went out (`policy.no-privileged-before-ready`) would send them
            // after it whatever it made of it, so those say nothing of the Notification.
            if !self.rec.has(notified) {
                self.rec.record(
                    notified,
                    Status::Skip,
                    format!(
                        "cannot tell: privileged messages came before the grant Notification \
                         too (policy.no-privileged-before-ready), so those after it say \
                         nothing of how the server read it: {}",
                        self.ready_by_notification.join(", ")
                    ),
                );
            }
        } else if !self.ready_by_notification.is_empty() {
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
        if !first {
            // Judged by the narrowed checks, or recorded as it was seen.
        } else if !self.outside_grant.is_empty() {
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
            self.rec
                .record(decl, Status::Warn, self.mismatches.join("; "));
        } else if self.tagged_uses > 0 {
            self.rec.record(
                decl,
                Status::Pass,
                format!("{} tagged use(s), all declared", self.tagged_uses),
            );
        } else if first {
            self.rec
                .record(decl, Status::Skip, "no feature-set-tagged use observed");
        }
        let form = "rpc.notifications-have-no-id";
        if let Some(first) = &self.first_notification_with_id {
            let d = crate::check::vocabulary::notifications_with_id_detail(
                self.notifications_with_id,
                self.notifications_seen,
                first,
            );
            self.rec.record(form, Status::Fail, d);
        }
        let hint = self.runner.scenario().hint();
        let none = |what: &str| format!("server sent no {what}{hint}");
        for (ids, seen, what) in [
            (&PUSH.ids()[..], self.push_seen, PUSH.method),
            (&INFERENCE.ids()[..], self.inference_seen, INFERENCE.method),
            (
                &["channels.descriptor-shape", "channels.ids-unique"][..],
                self.descriptors_seen,
                "channel descriptor",
            ),
            (
                &["channels.register-is-request"][..],
                self.register_seen,
                ChannelsRegister::NAME,
            ),
            (
                &[
                    "channels.incoming-is-request",
                    "channels.incoming-shape",
                    "channels.incoming-registered",
                ][..],
                self.incoming_seen,
                ChannelsIncoming::NAME,
            ),
            (
                &["tags.ambient-not-addressed"][..],
                self.push_seen + self.incoming_seen,
                "push/event or channels/incoming",
            ),
            (
                &["manifest.changed-shape", "manifest.changed-is-notification"][..],
                self.changed_seen,
                ManifestChanged::NAME,
            ),
            (
                &[form][..],
                self.notifications_seen,
                "notification-only method besides mcpl/manifestChanged",
            ),
        ] {
            for id in ids {
                if seen == 0 {
                    if first {
                        self.rec.record(id, Status::Skip, none(what));
                    }
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
        let vocabulary = "rpc.methods-in-vocabulary";
        match self.foreign.describe() {
            Some(d) => self.rec.record(vocabulary, Status::Warn, d),
            None => self.rec.record(
                vocabulary,
                Status::Pass,
                "every method the server sent is MCP or MCPL 0.5",
            ),
        }
        match self.request_ids.verdict("server") {
            Some((status, d)) => self.rec.record("rpc.request-ids-unique", status, d),
            None if first => {
                let d = "the server sent no request";
                self.rec.record("rpc.request-ids-unique", Status::Skip, d);
            }
            None => {}
        }
        let in_flight = "rpc.in-flight-ids-unique";
        match self.in_flight.verdict("server") {
            Some((status, d)) => self.rec.record(in_flight, status, d),
            None if first => {
                let d = "the server sent no request";
                self.rec.record(in_flight, Status::Skip, d);
            }
            None => {}
        }
        if first && !self.rec.has(super::in_force::REVOCATION_ANSWERED) {
            let d = "no manifest mcpl/manifest served once ready removed what the grant held";
            self.rec
                .record(super::in_force::REVOCATION_ANSWERED, Status::Skip, d);
        }
        // §6.7: what came under the set disabled by Notification after that probe's verdict
        // (and before the reduction was answered, which then judges it) is still its finding.
        if !self.narrowing_violations.is_empty() {
            let d = format!(
                "after a set was disabled by Notification: {}",
                self.narrowing_violations.join("; ")
            );
            let id = "policy.notification-narrowing-respected";
            self.rec.record(id, Status::Fail, d);
        }
        // JSON-RPC 2.0 §5: a response answers a request, once (a late answer to a request
        // the checker stopped waiting for is lateness, already reported where it waited).
        let responses = "rpc.responses-answer-requests";
        if self.stray.is_empty() {
            let d = "every response the server sent answered a request of the checker's, once";
            self.rec.record(responses, Status::Pass, d);
        } else {
            let what = self.stray.listed(
                "answered no request of the checker's (JSON-RPC 2.0 §5: a response answers \
                 one request, once)",
            );
            self.rec.record(responses, Status::Fail, what);
        }
        let direction = "rpc.methods-direction";
        let against_reading = self.foreign.describe_against_reading("server");
        match (self.foreign.describe_wrong_way("server"), against_reading) {
            (Some(d), Some(r)) => self
                .rec
                .record(direction, Status::Fail, format!("{d}; {r}")),
            (Some(d), None) => self.rec.record(direction, Status::Fail, d),
            (None, Some(r)) => self.rec.record(direction, Status::Warn, r),
            (None, None) => self.rec.record(
                direction,
                Status::Pass,
                "every typed method the server sent is one §4.1 has a server send",
            ),
        }
        self.conclude_narrowed();
        if let Some(why) = self.closed.clone().filter(|_| first) {
            self.rec
                .skip_rest(&format!("connection ended early: {why}"));
        }
    }

    /// Judges a `push/event`; `denied`: the grant in force withholds `pushEvents`, already
    /// a finding of its own.
    pub(super) fn judge_push(&mut self, is_request: bool, params: Option<&Value>, denied: bool) {
        self.push_seen += 1;
        self.judge_ambient(PushEvent::NAME, params.and_then(|p| p.get("tags")));
        let defects = inspect::push_event_defects(params);
        self.judge_tagged(&PUSH, is_request, params, defects, denied);
    }

    /// `tags.ambient-not-addressed` (§16.3, SHOULD NOT: a warning): `tags`, of a
    /// `method` message, carry `chat:ambient` beside a tag implying `chat:addressed`
    /// (the library's [`mcpl::tags::ambient_beside_addressed`]).
    pub(super) fn judge_ambient(&mut self, method: &str, tags: Option<&Value>) {
        let Some(tags) = tags.and_then(Value::as_array) else {
            return;
        };
        if mcpl::tags::ambient_beside_addressed(tags) {
            self.rec.record(
                "tags.ambient-not-addressed",
                Status::Warn,
                format!(
                    "a {method} carries chat:ambient beside a tag implying chat:addressed \
                     (§16.3: producers SHOULD NOT; the host drops chat:ambient)"
                ),
            );
        }
    }

    /// Judges an `inference/request`; `denied` as for [`Session::judge_push`].
    pub(super) fn judge_inference(
        &mut self,
        is_request: bool,
        params: Option<&Value>,
        denied: bool,
    ) {
        self.inference_seen += 1;
        let defects = inspect::inference_request_defects(params);
        let advisories = mcpl::protocol::inference::request_advisories(params);
        self.judge_tagged(&INFERENCE, is_request, params, defects, denied);
        if !advisories.is_empty() {
            self.rec
                .record(INFERENCE.shape, Status::Warn, advisories.join("; "));
        }
    }

    /// Judges one feature-set-tagged server message: its form, its shape `defects`, and its
    /// feature set (declared; available once the grant is known), then notes the use.
    ///
    /// Reading (§6.5: a server-initiated message names its feature set; §6.7): a `featureSet`
    /// that is present but not a string names no feature set, so the message is outside
    /// every grant: once the reduction is answered it counts against
    /// `policy.reduction-respected`, as a message under a set the reduction disabled does.
    /// Its shape is `t.shape`'s finding (as for a hook answer's, `hooks.injection-shape`);
    /// `t.declared` judges names. One without `featureSet` is the shape check's alone.
    pub(super) fn judge_tagged(
        &mut self,
        t: &Tagged,
        is_request: bool,
        params: Option<&Value>,
        defects: Vec<String>,
        denied: bool,
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
        let Some(tag) = params.and_then(|p| p.get("featureSet")) else {
            return;
        };
        let Some(fs) = tag.as_str() else {
            // The narrowing's evidence counts named sets only, and the declared check's
            // detail counts names under a disabled set, not this.
            self.unnamed_after_reduction(t.method, tag);
            return;
        };
        if self.narrowing_read && self.pre_reduction_grant.is_none() {
            self.after_narrowing += 1;
        }
        if !self.declared(fs) {
            self.rec.record(
                t.declared,
                Status::Fail,
                format!(
                    "featureSet {fs:?} is not declared{}",
                    self.withdrawn_note(CapabilitySet::EMPTY, Some(fs))
                ),
            );
        } else if self.reduction_answered
            && (self.reduced.contains(fs) || self.notified_disabled.contains(fs))
        {
            // Judged by the reduction check once the server has answered it, for every set
            // it keeps disabled: the one disabled by Notification too, whose own check was
            // settled before (a message under it after the reduction went unjudged).
            self.reduction_violations
                .push(format!("{} under featureSet {fs:?}", t.method));
            *self.reduction_hits.entry(t.declared).or_default() += 1;
        } else if self.notified_disabled.contains(fs) {
            // Judged by the narrowing check, once the server has read the Notification.
            if self.narrowing_read {
                self.narrowing_violations
                    .push(format!("{} under featureSet {fs:?}", t.method));
            }
        } else if self.reduced.contains(fs) {
            // Disabled by the reduction, not yet answered: refused, not the server's failure.
        } else if self.narrowed.is_some() && self.ready && !self.available(fs) {
            // A narrowed session: judged against its grant, unless the capability the
            // message needs was already withheld (that is the finding).
            if !denied {
                let detail = format!("{} under featureSet {fs:?}", t.method);
                self.unavailable_use(fs, t.declared, detail);
            }
        } else if self.receipt_seen && !self.available(fs) {
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

    /// The one rule for a server message (a push, an inference request, a hook answer that
    /// injects) whose `featureSet` `tag` is present but no string: it names no feature set,
    /// so none the reduction left enabled (§6.5, §6.7), and once the reduction is answered
    /// it counts against `policy.reduction-respected`, `what` naming the message.
    pub(super) fn unnamed_after_reduction(&mut self, what: &str, tag: &Value) {
        if self.reduction_answered {
            let kind = mcpl::jsonrpc::json_type_name(tag);
            self.reduction_violations.push(format!(
                "{what} under a featureSet of type {kind}, which names no feature set"
            ));
        }
    }

    /// Records a feature-set-tagged use for the §6.4 declaration-mismatch check.
    pub(super) fn note_use(&mut self, feature_set: String, required: Requirement) {
        self.tagged_uses += 1;
        // Only a declared set: an undeclared one cannot be disabled, and its name is the
        // server's to make as long as a message.
        if self.used_sets.len() < MAX_USED_SETS && self.decls.sets.contains_key(&feature_set) {
            self.used_sets.insert(feature_set.clone());
        }
        if let Some(missing) = policy::declaration_mismatch(&self.decls, &feature_set, required) {
            self.mismatches.push_unrepeated(format!(
                "{feature_set:?} exercises {} without declaring it (a host rejects that use, §6.4 rule 2)",
                missing.sorted_paths().join(", ")
            ));
        }
    }

    pub(super) fn judge_descriptors(&mut self, descs: &[Value], via: &str) {
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

impl Session {
    /// Judges `channels.ids-unique` over the descriptor arrays of one message (`(member,
    /// descriptors)`: `channels` of a `channels/register`; `added` and `updated` of one
    /// `channels/changed`). §14.2 makes a descriptor's `id` unique within the connection and
    /// §14.5's per-descriptor results key on it, so one message naming an id in two
    /// descriptors leaves the host's per-item answer ambiguous. A descriptor without a string
    /// `id` is `channels.descriptor-shape`'s finding, not this one's. The set held lives as
    /// long as the message, which the frame limit bounds.
    pub(super) fn judge_ids_unique(&mut self, arrays: &[(&str, &[Value])], via: &str) {
        let mut first: HashMap<&str, (&str, usize)> = HashMap::new();
        for (member, descs) in arrays {
            for (i, d) in descs.iter().enumerate() {
                let Some(id) = d.get("id").and_then(Value::as_str) else {
                    continue;
                };
                if let Some((m, j)) = first.get(id) {
                    let shown: String = id.chars().take(ID_SHOWN).collect();
                    let cut = if shown.len() < id.len() { "…" } else { "" };
                    self.rec.record(
                        "channels.ids-unique",
                        Status::Fail,
                        format!(
                            "{via} names channel id {shown:?}{cut} twice ({m}[{j}] and \
                             {member}[{i}]; §14.2: unique within the connection)"
                        ),
                    );
                    return;
                }
                first.insert(id, (member, i));
            }
        }
    }
}

/// The characters of a repeated channel id quoted in `channels.ids-unique`'s detail.
pub(super) const ID_SHOWN: usize = 80;

/// The check ids of one kind of feature-set-tagged server request.
pub(super) struct Tagged {
    pub(super) method: &'static str,
    pub(super) is_request: &'static str,
    pub(super) shape: &'static str,
    pub(super) declared: &'static str,
}

impl Tagged {
    pub(super) fn ids(&self) -> [&'static str; 3] {
        [self.is_request, self.shape, self.declared]
    }
}

pub(super) const PUSH: Tagged = Tagged {
    method: PushEvent::NAME,
    is_request: "push.event-is-request",
    shape: "push.event-shape",
    declared: "push.feature-set-declared",
};

pub(super) const INFERENCE: Tagged = Tagged {
    method: InferenceRequest::NAME,
    is_request: "inference.request-is-request",
    shape: "inference.request-shape",
    declared: "inference.feature-set-declared",
};
