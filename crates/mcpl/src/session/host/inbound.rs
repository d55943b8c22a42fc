//! What [`HostState`] does with a message the server sends: admission (§5.3, §5.4), requests,
//! channels (§14), pushes (§9) and notifications, manifest change announcements (§17).

use super::*;

/// How often, at most, `mcpl/manifestChanged` announcements dropped over the §17.8 fetch
/// limit are told while they go on: one [`HostDiagnostic::ManifestFetchDropped`] per
/// 10 s, with the total, besides the first drop and the end of a run of drops (a fetch
/// starting again). The value of `transport::listen::REPORT_INTERVAL`, the log's.
pub(super) const FETCH_DROPS_TOLD_EVERY: Duration = Duration::from_secs(10);
use crate::protocol::channels::{
    ChannelsChanged, ChannelsIncoming, ChannelsList, ChannelsRegister,
};
use crate::protocol::feature_sets::FeatureSetsUpdate;
use crate::protocol::handshake::Ping;
use crate::protocol::inference::InferenceRequest;
use crate::protocol::manifest::{ManifestChanged, ManifestFetch};
use crate::protocol::model::ModelInfoRequest;
use crate::protocol::push::PushEvent;

/// The server → host channel methods the host's [`ChannelTable`] answers (§14.3), in either
/// form their `Method` takes ([`crate::protocol::takes_form`]).
fn is_channel_method(method: &str) -> bool {
    matches!(
        method,
        ChannelsRegister::NAME
            | ChannelsChanged::NAME
            | ChannelsIncoming::NAME
            | ChannelsList::NAME
    )
}

impl HostState {
    /// The admission of one inbound method (§5.3, §5.4); `channels/changed` once ready is
    /// judged item-wise even without `channels.register` (a removal only narrows; the
    /// reading of `host::HostSession`).
    pub(super) fn admit(
        &mut self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Grant, ErrorObject> {
        match admit_at_host(method, params, self.p.ready, &self.p.grant) {
            Ok(_) => Ok(self.p.grant),
            Err(r) => {
                let method = method.to_owned();
                self.diag(match r {
                    Refusal::NotReceived => HostDiagnostic::UnexpectedMethod {
                        method: method.clone(),
                    },
                    Refusal::NotReady(_) => HostDiagnostic::PrivilegedBeforeReady {
                        method: method.clone(),
                    },
                    Refusal::Denied(d) => HostDiagnostic::CapabilityDenied {
                        method: method.clone(),
                        capability: d.capability,
                    },
                });
                Err(r.to_error(&method))
            }
        }
    }

    pub(super) fn on_request(&mut self, now: Instant, r: Request) {
        if self
            .app_pending
            .contains(crate::jsonrpc::InFlightId::of(&r.id))
        {
            // The server's mistake (MCP: a sender does not reuse an id within the session;
            // the answers could not be told apart, JSON-RPC 2.0 §5): whatever its method,
            // refused and reported, never run, as the async host's peer refuses it first
            // (`peer::serving`, the one rule for every request, `session::frames`).
            let refusal = crate::session::frames::refuse_id_in_use(self, &r);
            return self.respond(r.id, refusal.outcome);
        }
        // §4.1, JSON-RPC 2.0 §5.1: a notification-only method sent with an id is answered
        // as the server answers one (the one rule), and reported: the server's mistake.
        if let Some(e) = crate::session::admission::notification_as_request(&r.method) {
            self.diag(HostDiagnostic::UnexpectedMethod {
                method: r.method.clone(),
            });
            return self.respond(r.id, Err(e));
        }
        let judged = match self.admit(&r.method, r.params.as_ref()) {
            Ok(g) => g,
            Err(e) => return self.respond(r.id, Err(e)),
        };
        match r.method.as_str() {
            Ping::NAME => self.respond(r.id, Ok(json!({}))),
            PushEvent::NAME => {
                let answer = self.on_push(r.params.as_ref(), &judged);
                self.respond(r.id, answer);
            }
            InferenceRequest::NAME | ModelInfoRequest::NAME => {
                if r.method == InferenceRequest::NAME {
                    let mut diags = Vec::new();
                    let checked = rules::check_inference_feature_set(
                        &mut diags,
                        r.params.as_ref(),
                        &judged,
                        self.p.review.as_deref(),
                    );
                    self.report(diags);
                    if let Err(e) = checked {
                        return self.respond(r.id, Err(e));
                    }
                }
                // Answers the application still owes count against the same bound as what
                // it has not drained: a slow application cannot be handed requests unbounded.
                let owed = self.app_pending.len() >= self.rules.max_pending_outputs.max(1);
                let handed = !owed
                    && self.hand_out(HostOutput::Request {
                        id: r.id.clone(),
                        method: r.method.clone(),
                        params: r.params.clone(),
                    });
                if handed {
                    let inference = r.method == InferenceRequest::NAME;
                    let requirement =
                        crate::protocol::method_requirement(&r.method, r.params.as_ref())
                            .unwrap_or(crate::capability::Requirement::None);
                    let method = if inference {
                        InferenceRequest::NAME
                    } else {
                        ModelInfoRequest::NAME
                    };
                    let streamed = inference && rules::is_streamed(r.params.as_ref());
                    let handout = self.late.hand_out();
                    let req = AppRequest::new(method, requirement, inference, streamed, handout);
                    // A deadline past what `Instant` holds is none.
                    let due = self.rules.answer_timeout.and_then(|t| now.checked_add(t));
                    // A new request under an id the deadline answered before: an answer
                    // under it is this one's from now on, never the earlier one's late
                    // answer (`LateAnswers`).
                    self.late.reused(&r.id);
                    self.app_pending
                        .insert(crate::jsonrpc::InFlightId(r.id), req, due);
                } else {
                    let limit = self.rules.max_pending_outputs;
                    self.respond(r.id, Err(ErrorObject::busy(limit)));
                }
            }
            m if is_channel_method(m) => {
                let answer = self.on_channels(&r.method, r.params.as_ref(), false, &judged);
                self.respond(r.id, answer);
            }
            // Admitted, but no request the host serves (a notification-only one was answered
            // above): refused as a method this side does not serve.
            _ => {
                let e = ErrorObject::method_not_found(&r.method);
                self.respond(r.id, Err(e));
            }
        }
    }

    /// The channel methods (§14.5), by [`ChannelTable`]; a Notification form applies too.
    pub(super) fn on_channels(
        &mut self,
        method: &str,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let limits = &self.rules.channels;
        let answer = match method {
            ChannelsRegister::NAME => {
                self.channels
                    .register(&mut diags, params, notification, judged, limits)
            }
            ChannelsChanged::NAME => {
                let before = self.channels.changes();
                let r = self
                    .channels
                    .changed(&mut diags, params, notification, judged, limits);
                // §17.7: a channel change is a `surface-changed` receipt; a message that
                // changed no channel is none.
                let receipt = (self.channels.changes() != before)
                    .then(|| {
                        self.p
                            .review_mut()
                            .and_then(|r| r.surface_changed("channels"))
                    })
                    .flatten();
                if let Some(receipt) = receipt {
                    self.hand_out_event(HostEvent::ManifestChange(receipt));
                }
                r
            }
            ChannelsIncoming::NAME => {
                let mut events = Vec::new();
                let room = self.event_room_left();
                // Weighed as `hand_out` weighs them (only under a weight limit).
                let (weighed, mut weight) = (self.event_bytes.1 != usize::MAX, 0usize);
                let fits = |pending: usize, w: usize| self.event_fits(pending, w);
                let r = self.channels.incoming(
                    &mut diags,
                    params,
                    &self.p.grant,
                    &self.rules.channels,
                    self.p.review.as_deref(),
                    &self.label,
                    |e| {
                        let w = if weighed { e.weight() } else { 0 };
                        // Each judged with the ones of the batch taken before it.
                        if events.len() >= room || !fits(weight, w) {
                            return false;
                        }
                        weight = weight.saturating_add(w);
                        events.push(e);
                        true
                    },
                );
                for e in events {
                    // Within the room and the weight counted above: never refused.
                    self.hand_out(HostOutput::Event(e));
                }
                r
            }
            _ => Ok(self.channels.list()),
        };
        self.report(diags);
        answer
    }

    pub(super) fn on_push(
        &mut self,
        params: Option<&Value>,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let limits = rules::PushLimits {
            max_event_id_bytes: self.rules.max_event_id_bytes,
        };
        let verdict = rules::judge_push(
            &mut diags,
            params,
            judged,
            self.p.review.as_deref(),
            &self.dedupe,
            limits,
            &self.label,
        );
        self.report(diags);
        let (event, event_id) = match verdict? {
            PushVerdict::Deliver { event, event_id } => (event, event_id),
            PushVerdict::Duplicate => return Ok(rules::duplicate_answer()),
        };
        let delivered = self.hand_out(HostOutput::Event(event));
        if delivered {
            self.dedupe.remember(&event_id, self.rules.dedupe_window);
        }
        Ok(rules::push_answer(delivered))
    }

    /// Whether the server's `initialize` answer was handled: from then on the connection
    /// is known to be MCPL (a reviewed manifest) or served as plain MCP (§3.3).
    fn initialize_answered(&self) -> bool {
        !matches!(self.phase, Phase::New | Phase::Initializing)
    }

    pub(super) fn on_notification(&mut self, now: Instant, n: Notification) {
        let method = n.method.as_str();
        let for_the_application = super::super::McpList::of_method(method).is_some()
            || super::super::report::MCP_NOTIFICATIONS_FOR_THE_APPLICATION.contains(&method);
        if for_the_application && !self.initialize_answered() {
            // Reading (§5.2, §5.3; MCP: initialization is the first interaction): nothing
            // before the server's `initialize` result is handed out. A `list_changed`
            // then could not be told a receipt (§17.7) from plain MCP's list change
            // (§3.3), so it is reported as a method the host does not take then, never
            // handed out under a guess; an MCP notification for the application likewise.
            return self.diag(HostDiagnostic::UnexpectedMethod {
                method: n.method.clone(),
            });
        }
        if let Some(list) = super::super::McpList::of_method(method) {
            // §17.7: an MCP list change is a `surface-changed` receipt, the one account of
            // what changed. Without a reviewed manifest to make one against once
            // `initialize` was answered (MCP-only, §3.3, or served as plain MCP) it is still
            // normal MCP: the application is told which list to fetch again
            // (`HostEvent::ListChanged`).
            let event = match self
                .p
                .review_mut()
                .and_then(|r| r.surface_changed(list.as_str()))
            {
                Some(r) => HostEvent::ManifestChange(r),
                None => HostEvent::ListChanged(list),
            };
            return self.hand_out_event(event);
        }
        if method == ManifestChanged::NAME {
            return self.on_manifest_changed(now, n.params.as_ref());
        }
        if method == crate::session::CANCELLED {
            return self.on_cancelled(n.params.as_ref());
        }
        if super::super::report::MCP_NOTIFICATIONS_FOR_THE_APPLICATION.contains(&method) {
            // Normal MCP the application may need (its logs, progress, subscriptions): no
            // MCPL capability governs them (§3.2), so they are handed out as sent.
            let (method, params) = (n.method, n.params);
            return self.hand_out_event(HostEvent::Notification { method, params });
        }
        // §4.1: a method in a form its table does not give it is not applied
        // (`protocol::Kind::takes`), reported as one the host does not receive so.
        if !crate::protocol::takes_form(method, true) {
            return self.diag(HostDiagnostic::UnexpectedMethod {
                method: n.method.clone(),
            });
        }
        let params = n.params.clone();
        let Ok(judged) = self.admit(method, params.as_ref()) else {
            return;
        };
        if is_channel_method(method) {
            // Applied as a Request would be, filtered item-wise and each rejection reported;
            // nothing to answer (§14.5).
            let m = n.method.clone();
            let _ = self.on_channels(&m, n.params.as_ref(), true, &judged);
        } else {
            // Admitted but not a notification a host acts on: reported, never dropped.
            self.diag(HostDiagnostic::UnexpectedMethod {
                method: n.method.clone(),
            });
        }
    }

    /// The server's `notifications/cancelled` (MCP): a request handed out and not yet
    /// answered is answered `-32800` now and forgotten ([`HostOutput::Cancelled`]); one
    /// naming nothing handed out is ignored, as MCP lets a receiver (it may have just been
    /// answered). One whose `requestId` (required by MCP) is missing or no request id
    /// names nothing the host could ever tell apart: the server's mistake, reported
    /// ([`HostDiagnostic::BadParams`]), never dropped unseen.
    fn on_cancelled(&mut self, params: Option<&Value>) {
        let Some(id) = super::super::cancelled_request(params) else {
            let found = params.and_then(|p| p.get("requestId"));
            let detail = match found {
                None => "no requestId: nothing was cancelled".to_owned(),
                Some(v) => format!(
                    "requestId is a JSON {}, not a request id (a string or a number a request \
                     id can be): nothing was cancelled",
                    crate::jsonrpc::json_type_name(v)
                ),
            };
            let method = crate::session::CANCELLED.into();
            return self.diag(HostDiagnostic::BadParams { method, detail });
        };
        // By its identity in flight (`jsonrpc::identity::Identity`): `requestId: 7.0` names request
        // `7`, answered under its own id.
        let Some((crate::jsonrpc::InFlightId(id), _)) = self
            .app_pending
            .remove_entry(crate::jsonrpc::InFlightId(id))
        else {
            return;
        };
        self.respond(id.clone(), Err(ErrorObject::request_cancelled()));
        self.out.push_back(HostOutput::Cancelled { id });
    }

    /// `mcpl/manifestChanged` (§17.3): fetch now, fold into the fetch in flight, or drop
    /// over the rate limit (§17.8), reported.
    pub(super) fn on_manifest_changed(&mut self, now: Instant, params: Option<&Value>) {
        if self.p.review.is_none() {
            return self.diag(HostDiagnostic::UnexpectedMethod {
                method: ManifestChanged::NAME.into(),
            });
        }
        // §17.3: a malformed announcement is reported; it is only a hint to fetch either way.
        let defects = crate::protocol::manifest::manifest_changed_defects(params);
        if !defects.is_empty() {
            let detail = defects.join("; ");
            let method = ManifestChanged::NAME.into();
            self.diag(HostDiagnostic::BadParams { method, detail });
        }
        // The latest announcement's revision, kept for the fetch only when of the digest's
        // shape (App. B.3): any other can never equal a digest, is reported above, and is
        // the server's bytes to keep no longer.
        self.announced = crate::protocol::manifest::announced_revision(params).map(str::to_owned);
        match self.limiter.on_notification(now) {
            FetchDecision::FetchNow => {
                self.tell_drops(now, true);
                self.fetch(now)
            }
            FetchDecision::Coalesced => {}
            FetchDecision::Dropped => self.tell_drops(now, false),
        }
    }

    /// Tells the drops of the fetch limiter not yet told, as one
    /// [`HostDiagnostic::ManifestFetchDropped`] carrying the total (§17.8): the first drop
    /// at once, later ones at most once per [`FETCH_DROPS_TOLD_EVERY`], and those still
    /// untold when a fetch starts again (`run_ended`: the run of drops is over). Before,
    /// each drop was a diagnostic of its own: 20,000 announcements past the limit filled
    /// the diagnostics queue, pushing every other report out.
    pub(super) fn tell_drops(&mut self, now: Instant, run_ended: bool) {
        let total = self.limiter.dropped();
        let (told, at) = self.drops_told;
        let due = run_ended
            || at.map_or(true, |t| {
                now.saturating_duration_since(t) >= FETCH_DROPS_TOLD_EVERY
            });
        if total == told || !due {
            return;
        }
        self.drops_told = (total, Some(now));
        self.diag(HostDiagnostic::ManifestFetchDropped {
            dropped_total: total,
        });
    }

    pub(super) fn fetch(&mut self, now: Instant) {
        let timeout = self.rules.manifest_timeout;
        self.send_request(
            ManifestFetch::NAME,
            json!({}),
            Purpose::Fetch,
            (now, timeout),
        );
    }

    /// A fetched manifest (§17.5): bounded, reviewed, its receipt handed out; a revocation
    /// or a suspension is told by Request (§6.7); a coalesced announcement fetches again.
    pub(super) fn on_fetched(&mut self, now: Instant, answer: Answer, announced: Option<String>) {
        match answer {
            Answer::Result(v) => {
                let count = crate::manifest::feature_set_count(&v);
                let limit = self.rules.max_feature_sets;
                let wall = self.wall(now);
                let threshold = self.rules.suspend_after_failures;
                let reviewed = if count > limit {
                    // §17.5 step 1: it parses, so its removals apply all the same; only the
                    // sets in force are read of it (`ManifestReview::on_fetched_past_bound`).
                    self.diag(HostDiagnostic::ManifestFetchFailed {
                        detail: format!(
                            "{}; only its removals were applied (§17.5)",
                            ConnectError::TooManyFeatureSets { count, limit }
                        ),
                    });
                    self.p.review_past_bound(&v, wall, threshold)
                } else if let Some(foreign) = foreign_version(&v) {
                    // §5.1, App. B.3: not a 0.5 manifest, so nothing it adds is taken; it
                    // parses, so its removals apply (§17.5 step 1), as past the bound.
                    let code = foreign.code();
                    let text = match foreign {
                        ForeignVersion::Missing => "missing".to_owned(),
                        ForeignVersion::Other(text) => text,
                    };
                    let message = format!(
                        "the fetched manifest's `version` is {text}; this host speaks MCPL \
                         \"0.5\": only its removals were applied (§17.5)"
                    );
                    let path = "version".into();
                    // The section `validate` gives a missing or other `version`.
                    self.diag(HostDiagnostic::ManifestFinding {
                        code,
                        section: "§5.1",
                        path,
                        message,
                    });
                    self.p.review_past_bound(&v, wall, threshold)
                } else {
                    self.p
                        .review_fetched(&v, announced.as_deref(), wall, threshold)
                };
                if let Some(reviewed) = reviewed {
                    for d in reviewed.diagnostics() {
                        self.diag(d);
                    }
                    if let Some(r) = reviewed.outcome.receipt().cloned() {
                        self.hand_out_event(HostEvent::ManifestChange(r));
                    }
                    let tell = reviewed.tell_reduction();
                    self.effects(reviewed.effects);
                    // §6.7: told by Request, also while an earlier reduction is in
                    // flight (it told a wider grant than the one now in force).
                    if tell && matches!(self.phase, Phase::Up | Phase::Reducing) {
                        self.send_reduction(now);
                    }
                }
            }
            Answer::Error(e) => self.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("error {}: {}", e.code, e.message),
            }),
            Answer::Timeout => self.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("no answer within {:?}", self.rules.manifest_timeout),
            }),
        }
    }

    /// After the answer to an announced fetch: the rate limiter (§17.8) frees its slot and
    /// fetches again when announcements were coalesced meanwhile.
    pub(super) fn after_announced_fetch(&mut self, now: Instant) {
        let again = self.limiter.on_fetch_complete(now);
        // A follow-up that found no token is one more drop; one that starts ends the run.
        self.tell_drops(now, again);
        // The limiter spent a token and counts this follow-up as in flight: it must go out
        // whatever the phase, or every later announcement is coalesced into nothing.
        if again && self.phase != Phase::Closed {
            self.fetch(now);
        }
    }

    pub(super) fn send_reduction(&mut self, now: Instant) {
        let hg = self.p.reduction();
        // A change in flight activates no more than this tells (§6.7, `ChangePlan::cap`).
        for purpose in self.pending.purposes_mut() {
            if let Purpose::Change(plan) = purpose {
                plan.cap(&hg.effective);
            }
        }
        let params = self.p.update_params(&hg);
        let timeout = self.rules.policy_timeout;
        self.send_request(
            FeatureSetsUpdate::NAME,
            params,
            Purpose::Reduction,
            (now, timeout),
        );
    }

    /// Settles the request of ours `r` answers, one waiting whose frame was written
    /// (`pending`'s reading, JSON-RPC 2.0 §5); anything else is reported
    /// ([`HostDiagnostic::UnexpectedResponse`]) and settles nothing.
    pub(super) fn on_response(&mut self, now: Instant, r: Response) {
        let key = match &r.id {
            Some(RequestId::Number(n)) => n.as_u64(),
            _ => None,
        };
        let Some((id, purpose)) = key.and_then(|k| self.pending.answered(k).map(|p| (k, p))) else {
            self.diag(HostDiagnostic::UnexpectedResponse {
                id: r
                    .id
                    .as_ref()
                    .map_or("null".into(), |id| id.to_value().to_string()),
            });
            return;
        };
        let answer = match r.outcome {
            Ok(v) => Answer::Result(v),
            Err(e) => Answer::Error(e),
        };
        self.on_answer(now, id, purpose, answer);
    }
}

/// How a server's manifest object fails to name MCPL 0.5 (`"0.5"` or an alias,
/// [`crate::protocol::handshake::mcpl_version`]): the host's one reading of a manifest's
/// version, for the one `initialize` answered with ([`HostState`]'s `other_version`,
/// `unversioned`) and for a fetched one (§17.5) alike.
pub(super) enum ForeignVersion {
    /// No `version` member (App. B.3 requires it): `missing_version`.
    Missing,
    /// Another version, as JSON text, clipped: `unsupported_version`.
    Other(String),
}

impl ForeignVersion {
    /// The manifest finding code it is reported under.
    fn code(&self) -> &'static str {
        match self {
            ForeignVersion::Missing => "missing_version",
            ForeignVersion::Other(_) => "unsupported_version",
        }
    }
}

/// How `manifest` fails to name MCPL 0.5 ([`ForeignVersion`]); `None` for a 0.5 manifest,
/// and for one that is no object (the review refuses it).
pub(super) fn foreign_version(manifest: &Value) -> Option<ForeignVersion> {
    use crate::protocol::handshake::HostMcpl;
    if !manifest.is_object() {
        return None;
    }
    let version = crate::protocol::handshake::mcpl_version(manifest);
    match &version {
        HostMcpl::Unversioned => Some(ForeignVersion::Missing),
        HostMcpl::Other(text) if !version.is_v05() => Some(ForeignVersion::Other(
            crate::manifest::digest::clipped(text),
        )),
        _ => None,
    }
}

impl HostState {
    /// Reads one frame's text as one message ([`Message::parse`], the peer's reading) and
    /// handles it ([`Self::handle_message`]), reading the answer to a request whose answer
    /// decides authority whole (the `initialize` result and a fetched manifest, §5.1,
    /// §17.2; `jsonrpc::doubled::answer_read_whole`'s methods): one naming a member twice
    /// anywhere in its text ([`crate::jsonrpc::repeated::first_repeated`]; I-JSON, RFC 7493
    /// §2.3) fails its request as unreadable, a `-32603` `invalid response: …` in its
    /// place (§5.4, fail closed: the handshake fails, a fetch is
    /// [`HostDiagnostic::ManifestFetchFailed`] and the grant is unchanged), as the async
    /// host fails it; the repeat is never read as its last copy. A `Message` parsed
    /// elsewhere no longer shows a repeat, so a driver feeds frames here rather than to
    /// `handle_message`. `Err`, nothing handled: the text is no single message (a batch is
    /// the driver's to split; its entries' texts come here one by one).
    /// [`Self::handle_frame`] takes every text instead: batches, several messages on a
    /// line, and what is no message (answered and reported as the async host does).
    pub fn handle_text(
        &mut self,
        now: Instant,
        text: &str,
    ) -> Result<(), crate::jsonrpc::ParseError> {
        let msg = Message::parse(text)?;
        crate::session::frames::report_fractional(self, &msg);
        let unreadable = match &msg {
            Message::Response(r) if self.answer_read_whole(r.id.as_ref()) => {
                crate::jsonrpc::repeated::first_repeated(text).map(|r| (r, msg.to_value()))
            }
            _ => None,
        };
        let Some((repeated, value)) = unreadable else {
            self.handle_message(now, msg);
            return Ok(());
        };
        let within = crate::jsonrpc::doubled::Doubled::Within(repeated);
        if let Err(invalid) = crate::jsonrpc::doubled::from_value_read(value, Some(within)) {
            let error = ErrorObject::internal(format!("invalid response: {}", invalid.reason));
            self.handle_message(
                now,
                Message::Response(Response {
                    id: invalid.id,
                    outcome: Err(error),
                }),
            );
        }
        Ok(())
    }

    /// Whether the answer under `id` answers a request of ours whose answer decides
    /// authority ([`Self::handle_text`]): the `initialize`, a manifest fetch.
    pub(super) fn answer_read_whole(&self, id: Option<&RequestId>) -> bool {
        let Some(RequestId::Number(n)) = id else {
            return false;
        };
        let purpose = n.as_u64().and_then(|k| self.pending.answerable(k));
        matches!(
            purpose,
            Some(Purpose::Initialize | Purpose::Fetch | Purpose::Refresh)
        )
    }
}
