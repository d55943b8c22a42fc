//! The checker's requests and their answers: bounded by the step timeout, what the host
//! sends meanwhile handled in wire order, an answer that is not valid JSON-RPC told from
//! silence, and the head-of-line ping (`host.requests-independent`, issue #19 item 2).

use super::*;

/// What `method` with `params` needs (its §6.2 requirement; empty when it needs nothing or
/// is not known).
pub(in crate::check_host) fn needs_of(method: &str, params: &Value) -> CapabilitySet {
    mcpl::protocol::method_requirement(method, Some(params))
        .map_or(CapabilitySet::EMPTY, |r| r.capabilities())
}

impl Run {
    /// A request on its way, bounded by `bound`.
    pub(in crate::check_host) fn start(
        &self,
        method: &str,
        params: Option<Value>,
        bound: Duration,
    ) -> Call {
        let (peer, method) = (self.peer.clone(), method.to_owned());
        Box::pin(async move {
            let options = RequestOptions::new().timeout(bound);
            peer.request_raw_with(&method, params, options).await
        })
    }

    /// Sends a request and waits for its answer (within the step timeout), handling what the
    /// host sends meanwhile in wire order: a policy Request the host sent before its answer
    /// is applied before the answer comes back (§5.4, §6.7).
    pub(in crate::check_host) async fn call(&mut self, method: &str, params: Value) -> Reply {
        self.call_within(method, params, self.bounds.step).await
    }

    /// [`Self::call`] with its own bound.
    pub(in crate::check_host) async fn call_within(
        &mut self,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Reply {
        if self.closed {
            return Reply::Closed;
        }
        let needs = needs_of(method, &params);
        self.answered_under = None;
        let id = match self.peer.send_request(method, Some(params), |_| {}).await {
            Ok(id) => id,
            Err(e) => return self.reply(Err(e)),
        };
        let reply = self.await_answer(&id, Instant::now() + bound).await;
        self.note_refusal_data(method, needs, &reply);
        reply
    }

    /// [`Self::call_within`] while the checker holds a response of its own unwritten (a
    /// policy Request's receipt, §6.7): the same wait, but safe to run from within
    /// [`Run::handle`] under an outer wait, as a hold is ([`Run::hold_later_receipt`]):
    /// responses to other requests read meanwhile are kept, in order and with the run as it
    /// stood when they came, for the loop awaiting them ([`Run::stash`]); its own answer is
    /// taken from the stash too, where a hold started within this wait keeps it (the answer
    /// to a `mcpl/manifest` read here, [`Run::hold_fetch_answer`]; a policy Request read
    /// here starts none: it is kept unanswered, [`Run::deferred`]). Callers run it only when no hold's loop is
    /// running ([`Run::holds`] empty), since that loop reads its ping's answer itself rather
    /// than from the stash.
    pub(in crate::check_host) async fn call_held(
        &mut self,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Reply {
        if self.closed {
            return Reply::Closed;
        }
        let needs = needs_of(method, &params);
        let id = match self.peer.send_request(method, Some(params), |_| {}).await {
            Ok(id) => id,
            Err(e) => return self.reply(Err(e)),
        };
        let until = Instant::now() + bound;
        loop {
            // A hold started within this wait (a fetch answer held) may have read the
            // answer first and kept it for its loop: it is still this probe's.
            if let Some(outcome) = self.take_stashed(&id) {
                let reply = self.ordered_reply(&id, outcome.map_err(PeerError::Remote));
                self.note_refusal_data(method, needs, &reply);
                return reply;
            }
            if self.closed {
                return Reply::Closed;
            }
            match tokio::time::timeout_at(until, self.incoming.recv_ordered()).await {
                Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&id) => {
                    self.stream.response_came(r.id.as_ref());
                    let reply = self.ordered_reply(&id, r.outcome.map_err(PeerError::Remote));
                    self.note_refusal_data(method, needs, &reply);
                    return reply;
                }
                Ok(Some(o @ Ordered::Response(_))) => {
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
                    return Reply::Closed;
                }
                Err(_) => {
                    self.peer.forget(&id, "timed out");
                    return match self.invalid_answer(&id) {
                        Some(reply) => reply,
                        None => self.timeout(),
                    };
                }
            }
        }
    }

    /// Takes the answer to `id` out of [`Run::stash`], where a hold's loop kept it (its wire
    /// position was noted there), leaving the rest in order; `None` when it is not there.
    fn take_stashed(&mut self, id: &RequestId) -> Option<Result<Value, ErrorObject>> {
        let at = self
            .stash
            .iter()
            .position(|(o, _)| matches!(o, Ordered::Response(r) if r.id.as_ref() == Some(id)))?;
        match self.stash.remove(at) {
            Some((Ordered::Response(r), _)) => Some(r.outcome),
            _ => None,
        }
    }

    /// Notes a `-32002` answering `method` (which needs `needs`) for `host.refusal-data`
    /// ([`super::super::refusal_data`], §6.6, §14.6).
    pub(in crate::check_host) fn note_refusal_data(
        &mut self,
        method: &str,
        needs: CapabilitySet,
        reply: &Reply,
    ) {
        if let Reply::Error(e) = reply {
            self.refusal_data.note(method, needs, e);
        }
    }

    /// [`Self::call_within`]'s wait for the answer to `id` before `deadline`, extended by
    /// the time spent meanwhile awaiting probes sent while a receipt was held
    /// ([`Run::held_waited`]): the host may answer nothing until its receipt (§6.7), so that
    /// wait is the checker's, not the host's (finding F3). Bounded: those waits are bounded
    /// by the manifest-change phase's budget.
    async fn await_answer(&mut self, id: &RequestId, deadline: Instant) -> Reply {
        let id = id.clone();
        let mut deadline = deadline;
        let mut held = self.held_waited();
        loop {
            if self.closed {
                return Reply::Closed;
            }
            match self.ordered_until(deadline).await {
                Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&id) => {
                    // Read by a hold: judged as the run stood when it came (§6.7).
                    self.answered_under = self.popped_under.take();
                    return self.ordered_reply(&id, r.outcome.map_err(PeerError::Remote));
                }
                // A late answer to a request that timed out before.
                Ok(Some(Ordered::Response(_))) => {}
                Ok(Some(Ordered::Message(m))) => {
                    let m = self.arrived(m);
                    self.handle(m).await;
                }
                Ok(None) => self.on_closed(),
                Err(_) if self.held_waited() > held => {
                    let now = self.held_waited();
                    deadline += now.saturating_sub(held);
                    held = now;
                }
                Err(_) => {
                    self.peer.forget(&id, "timed out");
                    return match self.invalid_answer(&id) {
                        Some(reply) => reply,
                        None => self.timeout(),
                    };
                }
            }
        }
    }

    /// The next message or response in wire order before `deadline`, a response a later
    /// receipt's hold read first ([`Run::stash`]) coming before anything new, the run as it
    /// stood when that one came kept in [`Run::popped_under`] (none for one read now).
    pub(in crate::check_host) async fn ordered_until(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Ordered>, tokio::time::error::Elapsed> {
        if let Some((o, under)) = self.stash.pop_front() {
            self.popped_under = under;
            return Ok(Some(o));
        }
        self.popped_under = None;
        let read = tokio::time::timeout_at(deadline, self.incoming.recv_ordered()).await;
        // Its wire position, whoever reads it (the streamed probe's own answer read after its
        // timeout included): a chunk read after it is late (§11.4). A response a hold read
        // first was noted there.
        if let Ok(Some(Ordered::Response(r))) = &read {
            self.stream.response_came(r.id.as_ref());
        }
        read
    }

    /// The reply of a settled call, noting a closed connection, and on a timeout the
    /// responses that came meanwhile under ids the checker never sent; a failure the peer
    /// made for an answer its bounds kept it from reading is [`Reply::Unread`]
    /// ([`Reply::unread`]).
    pub(in crate::check_host) fn reply(&mut self, r: Result<Value, PeerError>) -> Reply {
        let answered = matches!(
            &r,
            Ok(_) | Err(PeerError::Remote(_) | PeerError::InvalidResponse(_))
        );
        self.answered_any |= answered;
        if let Err(PeerError::Closed(reason)) = &r {
            self.closed_for(Some(reason.clone()));
        }
        // `InvalidResponse` is never the host's: the peer makes it itself.
        if let Err(PeerError::InvalidResponse(why)) = &r {
            if let Some(why) = Reply::unread(why) {
                return Reply::Unread(why);
            }
        }
        match Reply::of(r) {
            Reply::Timeout { .. } => self.timeout(),
            other => other,
        }
    }

    /// The reply of a request sent with `send_request`, as delivered at its wire position: a
    /// response that was not valid JSON-RPC, or could not be read, comes as a `-32603` error
    /// of the peer's own making, which the peer marks as its own (`Peer::failed_here`): it
    /// is [`Reply::Invalid`], or [`Reply::Unread`] when the peer's bounds kept it from
    /// reading the answer. Only that mark tells them apart: a host's `-32603`, whatever its
    /// words and `data`, stays [`Reply::Error`].
    pub(super) fn ordered_reply(
        &mut self,
        id: &RequestId,
        outcome: Result<Value, PeerError>,
    ) -> Reply {
        let own = matches!(outcome, Err(PeerError::Remote(_))) && self.peer.failed_here(id);
        if let Some(reply) = self.invalid_answer(id) {
            self.answered_any = true;
            return reply;
        }
        match outcome {
            Err(PeerError::Remote(e)) if own => {
                let why = e
                    .message
                    .strip_prefix("invalid response: ")
                    .unwrap_or(&e.message);
                match Reply::unread(why) {
                    Some(why) => Reply::Unread(why),
                    None => Reply::Invalid(capped(why.to_owned(), 200)),
                }
            }
            outcome => self.reply(outcome),
        }
    }

    /// [`Reply::Timeout`], naming the responses that came under ids the checker never sent
    /// since the last one did (they were dropped unreported: a host answering under the
    /// wrong id read as a silent one), and the frames the connection discarded meanwhile
    /// ([`Self::discarded`]: an answer it could not read read as no answer).
    pub(in crate::check_host) fn timeout(&mut self) -> Reply {
        self.read_diagnostics();
        let mut note = match std::mem::take(&mut self.unmatched) {
            (0, _) => String::new(),
            (n, first) => format!(
                " ({n} response(s) came meanwhile under an id the checker never sent, the first {})",
                first.unwrap_or_default()
            ),
        };
        // What came and could not be read is no silence: said where the wait ends.
        note.push_str(&self.discarded());
        note.push_str(&self.left_unfinished());
        Reply::Timeout { note }
    }

    /// `; it left N bytes of a line unfinished (no newline): "…"` when the host's reader
    /// holds a line without its end (§4), or `; it began one message over N line(s) … and
    /// has not ended it: "…"` when the lines of a message begun spread over several are
    /// held ([`crate::check::spread::Spreads::holding`]), else empty: said where a wait ends.
    pub(in crate::check_host) fn left_unfinished(&self) -> String {
        self.left
            .describe()
            .or_else(|| self.spreads.holding())
            .map(|l| format!("; {l}"))
            .unwrap_or_default()
    }

    /// Drives an outstanding request to its answer while handling incoming messages. The
    /// request comes first (`biased`), so a host flooding the checker cannot keep it from
    /// seeing its timeout.
    pub(in crate::check_host) async fn settle(&mut self, mut call: Call) -> Reply {
        loop {
            tokio::select! {
                biased;
                r = call.as_mut() => return self.reply(r),
                m = self.incoming.recv(), if !self.closed => match m {
                    Some(m) => {
                        let m = self.arrived(m);
                        self.handle(m).await;
                    }
                    None => self.on_closed(),
                },
            }
        }
    }

    /// Settles `first` (and the ping) as invalid when the peer reported its response as not
    /// valid JSON-RPC: such a response to a request sent with `send_request` is only a
    /// diagnostic, and had read as no answer at all.
    pub(super) fn settle_invalid(
        &mut self,
        first: &RequestId,
        ping: Option<&RequestId>,
        answer: &mut Option<Reply>,
        pong: &mut Option<Reply>,
    ) {
        if answer.is_none() {
            if let Some(reply) = self.invalid_answer(first) {
                self.peer.forget(first, "answered invalidly");
                *answer = Some(reply);
            }
        }
        if let (None, Some(ping)) = (&pong, ping) {
            if let Some(reply) = self.invalid_answer(ping) {
                self.peer.forget(ping, "answered invalidly");
                *pong = Some(reply);
            }
        }
    }

    /// Sends a `ping` and handles what the host sends up to its answer, or until `until`;
    /// `true` when the answer came. Every message before that answer was written before the
    /// host answered the ping, so before anything the checker writes once this returns
    /// (the policy receipt, [`super::super::exchange`]). No verdict on the ping itself; none
    /// is sent once `until` has passed.
    pub(in crate::check_host) async fn round_trip(&mut self, until: Instant) -> bool {
        if self.closed || Instant::now() >= until {
            return false;
        }
        let ping = match self.peer.send_request(Ping::NAME, None, |_| {}).await {
            Ok(id) => id,
            Err(e) => {
                let _ = self.reply(Err(e));
                return false;
            }
        };
        loop {
            if self.closed {
                return false;
            }
            match self.ordered_until(until).await {
                Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&ping) => {
                    self.answered_any = true;
                    return true;
                }
                // A late answer to a request given up on before.
                Ok(Some(Ordered::Response(_))) => {}
                Ok(Some(Ordered::Message(m))) => {
                    let m = self.arrived(m);
                    self.handle(m).await;
                }
                Ok(None) => self.on_closed(),
                Err(_) => {
                    // An answer that was not valid JSON-RPC is still the host's answer.
                    let answered = self.invalid_answer(&ping).is_some();
                    self.peer.forget(&ping, "timed out");
                    return answered;
                }
            }
        }
    }

    /// [`Self::call_within`], with a `ping` sent right behind the request (issue #19 item 2,
    /// `host.requests-independent`): the ping must be answered within the step timeout even
    /// while the request is outstanding. Read by wire order, not by timing: the ping's answer
    /// coming before the request's (or with the request never answered) shows the two
    /// independent; no answer to the ping within the timeout fails; the request answered
    /// first shows nothing either way.
    pub(in crate::check_host) async fn call_paired(
        &mut self,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Reply {
        if self.closed {
            return Reply::Closed;
        }
        let needs = needs_of(method, &params);
        self.answered_under = None;
        let reply = self.call_paired_sent(method, params, bound).await;
        self.note_refusal_data(method, needs, &reply);
        reply
    }

    /// Gives up on the streamed probe `id` at its deadline as [`Peer::forget`] would (the
    /// cancellation it sends, sent here), but still awaiting its answer in wire order: read
    /// late, by whatever loop reads next ([`Self::ordered_until`]), it marks the stream
    /// answered at its position, so a chunk after it is judged late (§11.4). Forgotten, it
    /// came as a diagnostic, out of wire order, and the chunks after it passed. One id,
    /// the peer's `in_order` set holds it until the run ends.
    ///
    /// [`Peer::forget`]: mcpl::peer::Peer::forget
    async fn give_up_streamed(&mut self, id: &RequestId) {
        let params = serde_json::json!({ "requestId": id.to_value(), "reason": "timed out" });
        // A failed send is the connection's, noted where the next read finds it closed.
        let _ = self
            .peer
            .notify_raw("notifications/cancelled", Some(params))
            .await;
    }

    /// [`Self::call_paired`] once its refusal data is noted.
    async fn call_paired_sent(&mut self, method: &str, params: Value, bound: Duration) -> Reply {
        // Both go out with `send_request`: their answers come through `recv_ordered` at their
        // wire position among the host's messages, so which came first is read off the wire.
        // A send that fails on a connection already gone notes it here, so the report names
        // this probe, and the probes after it are not run for nothing.
        let streamed = method == mcpl::protocol::inference::InferenceRequest::NAME
            && super::super::streamed::asks_stream(&params);
        let first_id = match self.peer.send_request(method, Some(params), |_| {}).await {
            Ok(id) => id,
            Err(e) => return self.reply(Err(e)),
        };
        if streamed {
            // §11.4: its chunks are judged against this id ([`super::super::streamed`]).
            self.stream.sent(first_id.clone());
        }
        let first_deadline = Instant::now() + bound;
        let ping_id = self.peer.send_request(Ping::NAME, None, |_| {}).await.ok();
        let ping_deadline = Instant::now() + self.bounds.step;
        let (mut answer, mut pong) = (None, ping_id.is_none().then_some(Reply::Closed));
        let mut ping_first = false;
        let mut under = None;
        while answer.is_none() || pong.is_none() {
            if self.closed {
                answer.get_or_insert(Reply::Closed);
                pong.get_or_insert(Reply::Closed);
                break;
            }
            let deadline = match (answer.is_none(), pong.is_none()) {
                (true, true) => first_deadline.min(ping_deadline),
                (true, false) => first_deadline,
                _ => ping_deadline,
            };
            match self.ordered_until(deadline).await {
                Ok(Some(Ordered::Response(r))) => {
                    let outcome = r.outcome.map_err(PeerError::Remote);
                    if r.id.as_ref() == Some(&first_id) {
                        // Its wire position was noted as it was read (§11.4,
                        // [`Self::ordered_until`]). What the host sends before the ping's answer is handled as it comes;
                        // the probe is judged as the run stood when its answer came (§6.7).
                        let now = self.popped_under.take();
                        under = Some(now.unwrap_or_else(|| self.snapshot()));
                        answer = Some(self.ordered_reply(&first_id, outcome));
                    } else if let Some(ping) = ping_id.as_ref().filter(|p| r.id.as_ref() == Some(p))
                    {
                        // An invalid answer to the request, reported meanwhile, may have come
                        // before this one or after: it counts as first, so no order is read
                        // from it.
                        self.settle_invalid(&first_id, None, &mut answer, &mut pong);
                        ping_first = answer.is_none();
                        pong = Some(self.ordered_reply(ping, outcome));
                    }
                }
                Ok(Some(Ordered::Message(m))) => {
                    let m = self.arrived(m);
                    self.handle(m).await;
                }
                Ok(None) => self.on_closed(),
                Err(_) => {
                    let now = Instant::now();
                    self.settle_invalid(&first_id, ping_id.as_ref(), &mut answer, &mut pong);
                    if answer.is_none() && now >= first_deadline {
                        if streamed {
                            self.give_up_streamed(&first_id).await;
                        } else {
                            self.peer.forget(&first_id, "timed out");
                        }
                        answer = Some(self.timeout());
                    }
                    if pong.is_none() && now >= ping_deadline {
                        if let Some(id) = &ping_id {
                            self.peer.forget(id, "timed out");
                        }
                        pong = Some(self.timeout());
                    }
                }
            }
        }
        match (pong, &answer) {
            // Neither answered, from a host that has answered no request of the checker's
            // yet: a host that answers nothing, not one whose ping waits behind a request
            // (one that answered others and now neither is blocked, and fails). The silence
            // is the probe's own finding (and `host.ping-answered`'s); failing here too
            // counted one defect twice. Said where the check is settled ([`Paired::silent`]).
            (Some(Reply::Timeout { .. }), Some(Reply::Timeout { .. })) if !self.answered_any => {
                self.paired.silent.get_or_insert_with(|| method.to_owned());
            }
            (Some(Reply::Timeout { note }), _) => {
                let d = format!(
                    "a ping sent while {method} was outstanding got no answer within {}{note}",
                    secs(self.bounds.step)
                );
                self.record(REQUESTS_INDEPENDENT, Status::Fail, d);
            }
            (
                Some(Reply::Result(_) | Reply::Error(_) | Reply::Invalid(_) | Reply::Unread(_)),
                _,
            ) if ping_first => {
                let d = format!("a ping was answered while {method} was still outstanding");
                self.record(REQUESTS_INDEPENDENT, Status::Pass, d);
            }
            (
                Some(Reply::Result(_) | Reply::Error(_) | Reply::Invalid(_) | Reply::Unread(_)),
                _,
            ) => {
                self.paired.in_order = self.paired.in_order.saturating_add(1);
            }
            _ => {}
        }
        self.answered_under = under;
        answer.unwrap_or(Reply::Closed)
    }
}
