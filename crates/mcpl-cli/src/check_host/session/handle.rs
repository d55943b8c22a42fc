//! What the host sends outside the awaited steps: answered as the library server answers
//! it, and judged (a notification-only method's form, §4.1; hooks, §5.3, §5.4, §10.1; a
//! grant change by Notification, §6.7).

use mcpl::peer::IncomingRequest;

use super::*;

/// A later policy Request read while a widening Request's held probes ran
/// ([`Run::deferred`]): applied when read (§6.7: a reduction is in force before its Request
/// is sent), answered once those probes and that Request's own hold end.
///
/// Reading (§6.7, r11): an expansion takes effect once its receipt is read, whichever
/// Request it answers, so a receipt of any later Request written while a held probe awaits
/// its answer would leave that answer unjudgeable (the host may have read it first). None
/// is written then: every answer a held probe gets was sent before any receipt granting
/// what it probes could have been read. A host waiting for a later receipt before it
/// answers lets the probe time out, which is silence, never a fail.
pub(in crate::check_host) struct Deferred {
    /// The Request, unanswered.
    req: IncomingRequest,
    /// Its answer, as the library server's rule gave it when it was read.
    answer: Result<Value, ErrorObject>,
    /// That answer is a receipt (the Request was accepted).
    receipt: bool,
    /// The grants before it ([`Run::hold_later_receipt`]'s `before`).
    before: (Grant, Grant),
    /// It expands the grant and was accepted: answered behind a ping round trip (one for
    /// all kept, [`Run::answer_deferred`]), and what it adds is not in force until then
    /// ([`Run::expanding`]).
    expands: bool,
    /// The frame of the batch it came in ([`mcpl::peer::Incoming::frame`]); `None` when it
    /// came alone. Its answer is written only with the batch's array ([`Run::batched`]).
    batch: Option<u64>,
}

impl Run {
    /// Handles what the host sends for `watch` (named `stage` in the report), then ends the
    /// connection.
    pub(in crate::check_host) async fn listen(&mut self, stage: &'static str) {
        self.stage = stage;
        let deadline = Instant::now() + self.bounds.watch;
        while let Some(m) = self.next_until(deadline).await {
            self.handle(m).await;
        }
        self.peer.close();
    }

    /// Notes a `featureSets/update` Notification (the library state applies what a
    /// Notification may carry: `disabled` only); `true` when it carried grant fields, which
    /// the library discards with a diagnostic (§6.7: only descriptive metadata may come as a
    /// Notification). A malformed one counts as carrying them.
    pub(in crate::check_host) fn policy_notification(&mut self, params: Option<&Value>) -> bool {
        match self
            .policy
            .apply(Form::Notification, params.unwrap_or(&Value::Null))
        {
            Ok(outcome) => outcome
                .diagnostics
                .iter()
                .any(|d| d.code == "notification_field_discarded"),
            Err(_) => true,
        }
    }

    /// Notes the form of a message of `method` the host sent (`id` for a Request): a
    /// notification-only method (§4.1, by the library's method table:
    /// [`crate::check::vocabulary::notification_only`]) carries no id.
    pub(in crate::check_host) fn note_form(&mut self, method: &str, id: Option<&RequestId>) {
        if !crate::check::vocabulary::notification_only(method) {
            return;
        }
        self.notifications = self.notifications.saturating_add(1);
        if let Some(id) = id {
            self.notifications_with_id = self.notifications_with_id.saturating_add(1);
            if self.first_notification_with_id.is_none() {
                let id: String = id.to_string().chars().take(MAX_QUOTED_ID_CHARS).collect();
                self.first_notification_with_id = Some(format!("{method} (id {id})"));
            }
        }
    }

    /// Answers (and judges) anything the host sends outside the awaited steps.
    pub(in crate::check_host) async fn handle(&mut self, m: IncomingMessage) {
        let (method, params) = match &m {
            IncomingMessage::Request(r) => {
                self.note_form(r.method(), Some(r.id()));
                (r.method(), r.request().params.as_ref())
            }
            IncomingMessage::Notification(n) => {
                self.note_form(&n.method, None);
                (n.method.as_str(), n.params.as_ref())
            }
        };
        self.judge_delivery(method, params);
        if method == InferenceLifecycle::NAME {
            self.judge_lifecycle(params);
        }
        if method == mcpl::protocol::inference::InferenceChunk::NAME {
            self.judge_chunk(params);
        }
        let req = match m {
            IncomingMessage::Request(r) => r,
            IncomingMessage::Notification(n) => {
                // §4.1: a hook is a Request (its answer carries the injections); one sent as
                // a Notification is still a hook, judged as one.
                if n.method == BeforeInference::NAME {
                    self.hooks_notified = self.hooks_notified.saturating_add(1);
                    self.judge_hook(n.params.as_ref());
                    return;
                }
                // MCP's initialize is a Request: one without an id is said where the wait
                // for it ends.
                if n.method == Initialize::NAME {
                    self.initialize_notified = true;
                    return;
                }
                // §6.7: a grant change goes by Request, at any point of the session.
                if n.method == FeatureSetsUpdate::NAME {
                    let (grant, statuses) = (*self.policy.grant(), self.policy.statuses());
                    let carried = self.policy_notification(n.params.as_ref());
                    let changed =
                        *self.policy.grant() != grant || self.policy.statuses() != statuses;
                    if carried || changed {
                        // §17.3, §17.5 step 4: read by the manifest-change probes.
                        self.policy_message_seen(
                            (changed, false, false),
                            "a featureSets/update Notification",
                        );
                    }
                    if carried {
                        self.grant_notified = true;
                        self.record(
                            "host.policy-is-request",
                            Status::Fail,
                            "a grant change came as a featureSets/update Notification (§6.7)",
                        );
                    }
                }
                return;
            }
        };
        // The batch it came in, if any: its answer is written with the batch's array.
        let batch = self.incoming.entry().map(|_| self.incoming.frame());
        let mut receipt = false;
        let mut fetched = None;
        // A later policy Request read while a held receipt's probes run: kept, answered
        // once they end (`Run::deferred`).
        let mut defer = None;
        // This Request's held probes ran: the Requests read meanwhile are answered once its
        // own receipt is written.
        let mut opened = false;
        let result = match req.method() {
            Ping::NAME => Ok(json!({})),
            // The library server's rule: `initialize` and `ping` at any time, nothing else
            // before `initialize` (`-32600`); a policy applied then had made the server ready
            // before it was initialized, and the report say no policy came.
            other if !self.initialized => {
                if other == FeatureSetsUpdate::NAME {
                    self.policy_before_initialize = true;
                }
                if other == BeforeInference::NAME {
                    // Refused, and judged: a hook this early is one before the receipt.
                    self.judge_hook(req.request().params.as_ref());
                }
                Err(mcpl::session::rules::before_initialize(other))
            }
            ToolsList::NAME => Ok(served::tools_list_result()),
            other if self.mcp_only && other != Initialize::NAME => {
                Err(ErrorObject::method_not_found(other))
            }
            // §17.4, as the manifest-change probes serve it ([`super::super::manifest_change`]).
            ManifestFetch::NAME => {
                let (answer, read) = self.fetch_requested();
                // Wire order (§5.4 with §17.5): what the host sent behind its fetch, before
                // it could read the answer, is judged against the advertisement it held
                // then. An answer changing the advertisement is written once a ping has
                // done a round trip, as a widening receipt is (§6.7): what comes before the
                // ping's answer is handled under the advertisement before it. The grant is
                // unchanged meanwhile, so the grants "before" are the ones in force.
                let changes = read.as_ref().is_some_and(|m| {
                    super::super::served::advertisement_of(m) != self.policy.advertised()
                });
                if changes {
                    let now = (*self.policy.grant(), *self.policy.offered());
                    self.hold_fetch_answer(now).await;
                }
                fetched = Some(read);
                Ok(answer)
            }
            ChannelsList::NAME => self.channels_list_answer(req.request().params.as_ref()),
            Initialize::NAME => Err(ErrorObject::invalid_request("already initialized")),
            // A later policy change: applied and answered by the library server's own rule
            // (`session::answer_policy_request`); its receipt puts a policy in force (a
            // host that sent none in time is late, not ignored).
            FeatureSetsUpdate::NAME => {
                let params = req.request().params.as_ref().unwrap_or(&Value::Null);
                // §5.4, §6.7: each Request replaces the grant, so each is judged.
                self.judge_policy_grant(params, "a later policy Request: ");
                let before = (*self.policy.grant(), *self.policy.offered());
                let statuses = self.policy.statuses();
                let answer = mcpl::session::answer_policy_request(&mut self.policy, None, params);
                receipt = answer.response.is_ok();
                // §17.3, §17.5 step 4: read by the manifest-change probes.
                let changed =
                    *self.policy.grant() != before.0 || self.policy.statuses() != statuses;
                // §6.7: a reduction takes effect at once (what it revokes is refused either
                // way), so only an expansion is held: what the host sent before it could
                // read the receipt is judged under the grant before it too.
                let grown =
                    |now: &Grant, was: &Grant| !now.capabilities().is_subset(was.capabilities());
                let expands = grown(self.policy.grant(), &before.0)
                    || grown(self.policy.offered(), &before.1);
                // §17.5 step 3: a Request only widening (nothing withdrawn, no set made
                // unavailable) is a policy decision of its own, not the change's receipt. The
                // first one after a fetched narrowing that leaves out what it withdrew tells
                // that narrowing, whatever it adds (r4 finding 2: the grant before it here is
                // the one the fetch already narrowed).
                // What the Request offered, as sent (§5.4, §6.7): one still granting the
                // withdrawn capability tells no narrowing, whatever the advertisement cut.
                let tells = receipt && self.tells_lost_at_fetch(self.policy.offered());
                let narrows = tells
                    || grown(&before.0, self.policy.grant())
                    || grown(&before.1, self.policy.offered())
                    || statuses
                        .iter()
                        .any(|(name, was)| was.is_available() && !self.policy.is_available(name));
                let widening = receipt && changed && !narrows;
                self.policy_message_seen((changed, widening, true), "a featureSets/update Request");
                if tells {
                    self.narrowing_told();
                }
                // Every one read while the window is open is kept: the library's bound on
                // requests in flight bounds them ([`MAX_DEFERRED_RECEIPTS`], r13 F1).
                if self.deferred.is_some() {
                    defer = Some((before, receipt && expands));
                } else {
                    // §6.7's order, probed before the receipt is written (the manifest-change
                    // phase's, `manifest_change::held`): a narrowing told is in force
                    // already, a widening not yet, so what it adds is not in force while
                    // the probes run either ([`Run::opening`]).
                    if receipt {
                        let outer = self.opening;
                        if expands {
                            self.opening = Some(before);
                            self.held_grants();
                        }
                        opened = self.probe_held_receipt(before.0, tells).await;
                        self.opening = outer;
                        self.held_grants();
                    }
                    if receipt && expands {
                        self.hold_later_receipt(before).await;
                    }
                    // A batch entry: its answer waits for the array, written once the
                    // batch's kept entries are answered (r13 F2).
                    if opened && receipt && expands {
                        self.keep_batched(batch, before);
                    }
                }
                answer.response
            }
            BeforeInference::NAME => {
                self.judge_hook(req.request().params.as_ref());
                Ok(json!({ "featureSet": "check.hints", "contextInjections": [] }))
            }
            other => Err(ErrorObject::method_not_found(other)),
        };
        if let (Some((before, expands)), Some(kept)) = (defer, self.deferred.as_mut()) {
            kept.push_back(Deferred {
                req,
                answer: result,
                receipt,
                before,
                expands,
                batch,
            });
            // What it adds is not in force until its receipt is read (§6.7).
            self.held_grants();
            return;
        }
        let tools = result.is_ok() && req.method() == ToolsList::NAME;
        if self.answer(req, result, receipt, fetched).await && tools {
            self.answered_unknown(ToolsList::NAME);
        }
        if opened {
            self.answer_deferred().await;
        }
    }

    /// Writes `result` answering `req` (`receipt`: a policy receipt, §6.7; `fetched`: the
    /// manifest a fetch answered with, [`Run::fetch_answered`]) and notes it written;
    /// `true` when it was.
    async fn answer(
        &mut self,
        req: IncomingRequest,
        result: Result<Value, ErrorObject>,
        receipt: bool,
        fetched: Option<Option<Value>>,
    ) -> bool {
        let written = match result {
            Ok(v) => req.respond(v).await,
            Err(e) => req.respond_error(e).await,
        };
        if self.after_write(written) {
            if let Some(read) = fetched {
                self.fetch_answered(read);
            }
            self.ready |= receipt;
            // The receipt replaces the grant on both sides (§6.7).
            self.grant_notified &= !receipt;
            return true;
        }
        false
    }

    /// Answers the later policy Requests kept while a widening Request's held probes ran
    /// ([`Run::deferred`]), in the order they were read, once that Request's receipt is
    /// written. The expansions among them share one hold, a ping round trip before the
    /// first receipt is written ([`Run::hold_later_receipt`], under the grants before each),
    /// so a host answering nothing until its receipts arrive costs the run one hold, not
    /// one per kept Request (r13 F5). A Request read during that hold is kept behind them
    /// and answered in the next round, so the receipts go out in the order their Requests
    /// came; each round's hold counts against [`Run::hold_left`].
    async fn answer_deferred(&mut self) {
        while let Some(kept) = self.deferred.as_ref().filter(|k| !k.is_empty()) {
            let round = kept.len();
            let before = kept
                .iter()
                .filter(|d| d.expands)
                .map(|d| d.before)
                .reduce(|a, b| {
                    (
                        a.0.intersect(b.0.capabilities()),
                        a.1.intersect(b.1.capabilities()),
                    )
                });
            if let Some(before) = before {
                // The kept ones stay kept meanwhile: what they add is not in force.
                self.hold_later_receipt(before).await;
            }
            for _ in 0..round {
                let Some(d) = self.deferred.as_mut().and_then(|kept| kept.pop_front()) else {
                    break;
                };
                let _ = self.answer(d.req, d.answer, d.receipt, None).await;
                if d.expands {
                    self.keep_batched(d.batch, d.before);
                }
                self.batch_written();
            }
        }
        self.deferred = None;
        self.batched.clear();
        self.held_grants();
    }

    /// Answers the kept policy Requests ([`Run::deferred`]) at once, without their holds,
    /// in the order they were read: the run reached its time bound, and every Request gets
    /// its answer before the connection closes (§6.7; r13 F3).
    pub(in crate::check_host) async fn answer_kept(&mut self) {
        while let Some(d) = self.deferred.as_mut().and_then(|kept| kept.pop_front()) {
            let _ = self.answer(d.req, d.answer, d.receipt, None).await;
        }
        self.deferred = None;
        self.batched.clear();
        self.held_grants();
    }

    /// Notes the grants `before` an expanding Request just answered as an entry of the
    /// batch of frame `batch` ([`Run::batched`]) while other entries of it are still kept:
    /// its answer is not written until they are answered (r13 F2).
    fn keep_batched(&mut self, batch: Option<u64>, before: (Grant, Grant)) {
        let Some(frame) = batch else {
            return;
        };
        let kept = self.deferred.iter().flatten();
        if kept.clone().any(|d| d.batch == Some(frame)) {
            self.batched.push((frame, before));
        }
        self.held_grants();
    }

    /// Drops from [`Run::batched`] the batches none of whose entries is kept any more: their
    /// arrays are written.
    fn batch_written(&mut self) {
        let kept: Vec<u64> = self
            .deferred
            .iter()
            .flatten()
            .filter_map(|d| d.batch)
            .collect();
        self.batched.retain(|(f, _)| kept.contains(f));
        self.held_grants();
    }

    /// §6.7 (an expansion takes effect only once the host has read its receipt; a reduction
    /// at once): before the receipt of a later policy Request that expands the grant goes
    /// out, a `ping` does a round trip, as before the initial receipt ([`Run::round_trip`]);
    /// what the host sent before its answer was sent before it could read the receipt, and
    /// is judged under `before`, the grant the Request replaces, as well as under the new
    /// one ([`Run::expanding`]). Responses to the checker's requests read meanwhile are
    /// kept, in order, for the loop awaiting them ([`Run::stash`]), each with the run as it
    /// stood when it came ([`Run::snapshot`]), so what the host sends after it (a grant
    /// change, handled at once) never reaches back to it (§6.7). An expansion read during
    /// a hold is held too, by the same loop ([`Run::holds`]): until its own ping is
    /// answered, what comes is judged under the grants before each expansion still held;
    /// the answer to a later ping ends the holds before it too (the host read their
    /// receipts first). Each is held up to [`Run::hold_each`], bounded in all by
    /// [`Run::hold_left`] (one read while a held receipt's probes or their Request's hold
    /// run is kept unanswered instead, and answered with the others kept behind one shared
    /// hold, [`Run::deferred`]).
    /// The answer to a `mcpl/manifest` that changes the advertisement is held so too
    /// ([`Run::hold_fetch_answer`]).
    pub(super) async fn hold_later_receipt(&mut self, before: (Grant, Grant)) {
        self.hold(before, false).await;
    }

    /// [`Run::hold_later_receipt`] for the answer to a `mcpl/manifest` that changes the
    /// advertisement, `before` being the grants in force (§17.5 with §5.4, wire order: what
    /// the host sent behind its fetch is judged against the advertisement it held then).
    /// Unlike a receipt, which is written at once when another hold is running (what came
    /// meanwhile is judged under the grants before each expansion, [`Run::expanding`]), this
    /// answer is held even then: a narrowing cannot be judged "under both" as an expansion
    /// is, so the answer waits for its own ping, a loop of its own handling what comes
    /// (the pings ahead of it included) and ending no later than the holds already running
    /// would. At most [`MAX_NESTED_FETCH_HOLDS`] such loops run within one another; past
    /// that the answer is written at once, as before.
    pub(super) async fn hold_fetch_answer(&mut self, before: (Grant, Grant)) {
        self.hold(before, true).await;
    }

    /// The hold of [`Run::hold_later_receipt`]; `own`: a loop of its own even while another
    /// hold runs ([`Run::hold_fetch_answer`]).
    async fn hold(&mut self, before: (Grant, Grant), own: bool) {
        if self.closed || self.hold_left.is_zero() {
            return;
        }
        let ping = match self.peer.send_request(Ping::NAME, None, |_| {}).await {
            Ok(id) => id,
            Err(e) => {
                let _ = self.reply(Err(e));
                return;
            }
        };
        let start = Instant::now();
        let mut until = start + self.hold_each.min(self.hold_left);
        let running = self.holds.iter().map(|(_, _, u)| *u).max();
        let nested = running.is_some();
        let own = own && self.fetch_holds_nested < MAX_NESTED_FETCH_HOLDS;
        if let (true, Some(latest)) = (own, running) {
            // A loop of its own ends no later than the holds already running would.
            until = until.min(latest);
        }
        self.holds.push_back((ping, before, until));
        self.held_grants();
        if nested && !own {
            return; // the hold already running awaits this ping too
        }
        if nested {
            self.fetch_holds_nested += 1;
        }
        loop {
            if self.closed {
                break;
            }
            let Some(until) = self.holds.iter().map(|(_, _, u)| *u).min() else {
                break;
            };
            match tokio::time::timeout_at(until, self.incoming.recv_ordered()).await {
                Ok(Some(Ordered::Response(r)))
                    if self.holds.iter().any(|(p, _, _)| r.id.as_ref() == Some(p)) =>
                {
                    self.answered_any = true;
                    // The pings ahead of it, unanswered yet, are no longer awaited.
                    while let Some((p, _, _)) = self.holds.pop_front() {
                        if r.id.as_ref() == Some(&p) {
                            break;
                        }
                        self.peer.forget(&p, "a later ping was answered first");
                    }
                    self.held_grants();
                }
                // Kept with the run as it stood when it came: the loop awaiting it judges it
                // so, whatever the host sends after it (§6.7, wire order).
                Ok(Some(o @ Ordered::Response(_))) => {
                    // Its wire position: a chunk read after it is late (§11.4).
                    if let Ordered::Response(r) = &o {
                        self.stream.response_came(r.id.as_ref());
                    }
                    let under = self.snapshot();
                    self.stash.push_back((o, Some(under)));
                }
                Ok(Some(Ordered::Message(m))) => {
                    let m = self.arrived(m);
                    Box::pin(self.handle(m)).await;
                }
                Ok(None) => {
                    self.on_closed();
                    break;
                }
                Err(_) => {
                    let now = Instant::now();
                    let (out, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.holds)
                        .into_iter()
                        .partition(|(_, _, u)| *u <= now);
                    self.holds = kept.into();
                    for (p, _, _) in out {
                        self.peer.forget(&p, "timed out");
                    }
                    self.held_grants();
                }
            }
        }
        for (p, _, _) in std::mem::take(&mut self.holds) {
            self.peer.forget(&p, "the connection ended");
        }
        self.held_grants();
        if nested {
            // The hold it ran within counts the time, its own included.
            self.fetch_holds_nested -= 1;
        } else {
            self.hold_left = self.hold_left.saturating_sub(start.elapsed());
        }
    }

    /// The answer to the host's `channels/list` (§14.3: the channels known for this
    /// connection, the checker's descriptors the host accepted). Reading of §14.1, whose
    /// table gates `channels/list` *in either direction* on `channels.register`: the host's
    /// own request is gated by the grant it gave too (a host asking a server for channels it
    /// did not let it register has no channels to ask about), so, failing closed, a request
    /// the grant in force does not allow, or one sent before the receipt (§5.3), is refused
    /// as the library server's admission refuses it (`-32002`, `data.capability`), and while
    /// a later receipt is held, one the grant before it does not allow too (§6.7). The
    /// finding is `host.deliveries-within-grant`'s ([`super::super::delivered`]), judged on
    /// every message; this is only the strict server's answer.
    fn channels_list_answer(&self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let method = ChannelsList::NAME;
        let receiver = mcpl::session::Receiver::Server;
        let admit =
            |grant: &Grant| mcpl::session::admit(receiver, method, params, self.ready, grant);
        admit(self.policy.grant()).map_err(|r| r.to_error(method))?;
        if let Some((before, _)) = &self.expanding {
            admit(before).map_err(|r| r.to_error(method))?;
        }
        Ok(json!({ "channels": self.held_channels }))
    }

    /// [`Run::expanding`] as [`Run::holds`], [`Run::deferred`], [`Run::batched`] and
    /// [`Run::opening`] leave it: the grants before every expansion still held, kept
    /// unanswered, answered in a batch not yet written or being probed, each narrowed to what all of
    /// them allow (a message must be allowed under each, as the host may have read none of
    /// their receipts); `None` when none is.
    fn held_grants(&mut self) {
        let kept = self.deferred.iter().flatten();
        let unwritten = kept.filter(|d| d.expands).map(|d| d.before);
        let held = self.holds.iter().map(|(_, b, _)| *b);
        let batched = self.batched.iter().map(|(_, b)| *b);
        let unwritten = unwritten.chain(batched).chain(self.opening);
        self.expanding = held.chain(unwritten).reduce(|a, b| {
            (
                a.0.intersect(b.0.capabilities()),
                a.1.intersect(b.1.capabilities()),
            )
        });
    }

    /// §5.3, §5.4 and §10.1: a hook comes only once ready and under a granted hook leaf,
    /// and carries the user message only when observe is granted; while a later receipt is
    /// held, under the grant before it too (§6.7, [`Run::expanding`]).
    pub(super) fn judge_hook(&mut self, params: Option<&Value>) {
        self.hooks = self.hooks.saturating_add(1);
        // §10.1's params, by the library's one rule (r1 round 3, F2: a hook of nulls and
        // wrong types passed every check). The first defective hook is named.
        let defects = mcpl::protocol::hooks::params_defects(params);
        if !defects.is_empty() {
            let d = format!(
                "context/beforeInference {}: {}",
                self.hooks,
                defects.join("; ")
            );
            self.record("host.hook-params-shape", Status::Fail, d);
        }
        // The library server's admission rule (readiness §5.3, the grant §5.4).
        let grant = *self.policy.grant();
        let method = BeforeInference::NAME;
        match mcpl::session::admit_at_server(method, params, true, self.ready, &grant) {
            Err(Refusal::NotReady(_)) => self.record(
                "host.hooks-after-ready",
                Status::Fail,
                "context/beforeInference before the policy receipt",
            ),
            Err(_) => self.record(
                "host.hooks-after-ready",
                Status::Fail,
                "context/beforeInference though no beforeInference leaf is granted (§5.4)",
            ),
            Ok(_) => {
                let before = self.expanding.map(|(b, _)| b);
                let early = before.is_some_and(|b| {
                    mcpl::session::admit_at_server(method, params, true, self.ready, &b).is_err()
                });
                if early {
                    self.record(
                        "host.hooks-after-ready",
                        Status::Fail,
                        "context/beforeInference under a hook leaf a later policy Request \
                         granted, sent before the host could have read its receipt (it came \
                         before the answer to a ping written ahead of the receipt; §6.7: an \
                         expansion takes effect only once the receipt is read)",
                    );
                }
            }
        }
        // The library host's redaction rule, under the grant in force (none before ready),
        // and while a later receipt is held under the grant before it too.
        let in_force = if self.policy.is_ready() {
            grant
        } else {
            Grant::none()
        };
        let before = self.expanding.map(|(b, _)| b);
        let unredacted_before =
            before.is_some_and(|b| mcpl::policy::unredacted_user_message(&b, params));
        if unredacted_before || mcpl::policy::unredacted_user_message(&in_force, params) {
            self.record(
                "host.user-message-redacted",
                Status::Fail,
                "userMessage sent though observe is not granted",
            );
        }
        // §10.1 with §8 (F7): without observe, text under a member §10.1 does not list may be
        // the user's (a history, a transcript); a warning ([`super::super::unlisted`]).
        let observe_before = before.map_or(true, |b| mcpl::policy::user_message_allowed(&b));
        if !(observe_before && mcpl::policy::user_message_allowed(&in_force)) {
            let names = super::super::unlisted::text_members(
                params,
                super::super::unlisted::HOOK_LISTED,
                &[],
            );
            if !names.is_empty() {
                let d = format!(
                    "context/beforeInference carried text under {}, outside §10.1's fields, \
                     though observe is not granted (the user's text is then absent, not merely \
                     discouraged; an unknown member is tolerated, §8, but text in one may be \
                     the user's: a warning)",
                    names.join(", ")
                );
                self.record("host.user-message-redacted", Status::Warn, d);
            }
        }
    }
}
