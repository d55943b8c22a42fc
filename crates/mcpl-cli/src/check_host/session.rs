//! The session with the host: receiving under deadlines, the checker's requests and their
//! answers (with the head-of-line ping, `host.requests-independent`), what the host sends
//! meanwhile, and how its going away is told (issue #19 item 5).
//!
//! Every wait ends at a deadline ([`Run::next_until`]) or at the request's own timeout
//! ([`Run::settle`]), never at "a quiet moment", so a host that keeps talking cannot stretch
//! a phase (issue #20: one ping every 1.5 s under `--timeout 2` had kept the run alive).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use mcpl::capability::{CapabilitySet, Grant};
use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::peer::{
    CloseReason, Diagnostic, Diagnostics, Incoming, IncomingMessage, Ordered, Peer, PeerError,
    RequestOptions,
};
use mcpl::policy::{Form, ServerPolicyState};
use mcpl::protocol::channels::ChannelsList;
use mcpl::protocol::feature_sets::FeatureSetsUpdate;
use mcpl::protocol::handshake::{Initialize, Ping, ToolsList};
use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::lifecycle::InferenceLifecycle;
use mcpl::protocol::manifest::ManifestFetch;
use mcpl::protocol::Method;
use mcpl::session::Refusal;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::judge::{capped, DETAIL_LIMIT};
use super::{served, Bounds};
use crate::check::report::{Recorder, Report, Status};

/// Most invalid responses [`Run`] keeps the ids of.
const INVALID_KEPT: usize = 8;

/// Most ids of requests answered twice [`Run`] keeps to quote (the rest are counted).
const TWICE_KEPT: usize = 3;

/// The check the paired pings feed.
pub(super) const REQUESTS_INDEPENDENT: &str = "host.requests-independent";

pub(super) use super::reply::Reply;

/// An outgoing request on its way: owns a peer handle, so it outlives any borrow of the run.
pub(super) type Call = Pin<Box<dyn Future<Output = Result<Value, PeerError>> + Send>>;

/// Polls `call` once (which writes its frame, or queues it ahead of anything sent later) and
/// returns its outcome if that already settled it. A settled call is never polled again.
pub(super) async fn poll_once(call: &mut Call) -> Option<Result<Value, PeerError>> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match call.as_mut().poll(cx) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        })
    })
    .await
}

/// One run against one host: the recorder, the policy as this server holds it, and what is
/// known of the connection.
pub(super) struct Run {
    pub(super) peer: Peer,
    incoming: Incoming,
    /// The connection's diagnostics (bounded: [`super::peer_config`]), read for the report.
    diagnostics: Diagnostics,
    /// What they told of frames discarded since [`Run::discarded`] last said so: over the
    /// size limit, not valid JSON-RPC, lost uncounted.
    discards: (u64, u64, u64),
    /// Responses to the checker's requests that were not valid JSON-RPC, or too costly for
    /// it to read, by id, newest last (at most [`INVALID_KEPT`]): the peer reports them as
    /// diagnostics only when the request was sent with `send_request`.
    invalid_answers: Vec<(RequestId, Reply)>,
    /// Responses under an id the checker never sent since a timeout last named them, and
    /// the first one's id (§6.6 / JSON-RPC: a response carries its request's id).
    unmatched: (u64, Option<String>),
    /// Responses under the id of a request of the checker's already answered (not one it
    /// gave up on: the peer reports that one as late), and the first [`TWICE_KEPT`] ids
    /// (`host.responses-once`).
    twice: (u64, Vec<String>),
    rec: Recorder,
    pub(super) bounds: Bounds,
    started: Instant,
    /// The host's policy as this server holds it: the library's own server-side state
    /// machine (patterns, `enabled`/`disabled`, an absent grant granting nothing, §5.3).
    pub(super) policy: ServerPolicyState,
    /// What the host's own `experimental.mcpl` advertises (§5.2), `tools` aside.
    pub(super) host_advertised: CapabilitySet,
    /// `initialize` has been answered: requests other than `ping` are served from now on.
    pub(super) initialized: bool,
    /// The host advertised no MCPL: the server stays MCP-only (§3.2), every MCPL method
    /// answered `-32601` as the library server answers it.
    pub(super) mcp_only: bool,
    /// A `featureSets/update` Request came before `initialize` (refused `-32600`).
    pub(super) policy_before_initialize: bool,
    /// A receipt has been written: the host may treat the session as ready.
    pub(super) ready: bool,
    /// The connection has ended.
    pub(super) closed: bool,
    /// The connection ended in answer to the junk line (`host.survives-junk-line` failed).
    pub(super) died_of_junk: bool,
    hooks: usize,
    /// How many of those came as a Notification (§4.1: a Request).
    hooks_notified: usize,
    /// An `initialize` came as a Notification (without an id).
    pub(super) initialize_notified: bool,
    /// Messages of a notification-only method (§4.1) the host sent, in either form; how many
    /// came with an id, and the first of those (`host.notifications-have-no-id`).
    notifications: usize,
    notifications_with_id: usize,
    first_notification_with_id: Option<String>,
    /// What the run is doing, named in the report when the host goes away.
    pub(super) stage: &'static str,
    /// How and when the host went away, once it has.
    gone: Option<String>,
    /// Set when the run could not be completed (the report then says so, exit 2).
    pub(super) unfinished: Option<String>,
    /// What the host's reader holds of a line without its end ([`super::watched`]), said
    /// where a wait ends without the message.
    pub(super) left: super::watched::Left,
    /// The host's messages that repeat a member name, or begin with a byte order mark
    /// ([`super::watched::Repeats`]).
    pub(super) repeats: super::watched::Repeats,
    /// The host's messages spread over several lines, read whole ([`crate::check::spread`]).
    pub(super) spreads: crate::check::spread::Spreads,
    /// The host's responses that wrote a request's integer id with a fraction or an
    /// exponent, read as the answers ([`super::watched::IntegralIds`]).
    pub(super) integral: super::watched::IntegralIds,
    /// The MCPL messages the host delivered that need a capability, judged against the
    /// grant ([`super::delivered`]).
    pub(super) deliveries: super::delivered::Deliveries,
    /// The codes refusing the probes the grant does not allow ([`super::judge::RefusalCodes`]).
    pub(super) refusal_codes: super::judge::RefusalCodes,
    /// The `inference/lifecycle` signals the host sent, judged ([`super::lifecycle`]).
    pub(super) lifecycles: super::lifecycle::Lifecycles,
    /// The host's frames that are not JSON-RPC 2.0 ([`super::frames`]).
    pub(super) not_rpc: super::frames::NotRpc,
    /// What the host's messages showed as they arrived ([`super::seen`]).
    pub(super) seen: super::seen::Seen,
    /// What the host did after answers carrying unknown members ([`super::tolerance`]).
    pub(super) tolerance: super::tolerance::Tolerance,
}

/// At most this many characters of a request id (host-chosen) are quoted in a detail.
const MAX_QUOTED_ID_CHARS: usize = 64;

impl Run {
    /// A run over a connected peer.
    pub(super) fn new(peer: Peer, incoming: Incoming, rec: Recorder, bounds: Bounds) -> Run {
        Run {
            diagnostics: peer.diagnostics(),
            discards: (0, 0, 0),
            invalid_answers: Vec::new(),
            unmatched: (0, None),
            twice: (0, Vec::new()),
            peer,
            incoming,
            rec,
            bounds,
            started: Instant::now(),
            // The grant's ceiling is what the checker advertises, as the library server's
            // (§5.4, `ServerPolicyState::set_advertised`).
            policy: ServerPolicyState::new(
                mcpl::policy::FeatureSets::from_mcpl(&served::manifest()).0,
                served::served_advertisement(),
            ),
            host_advertised: CapabilitySet::EMPTY,
            initialized: false,
            mcp_only: false,
            policy_before_initialize: false,
            ready: false,
            closed: false,
            died_of_junk: false,
            hooks: 0,
            hooks_notified: 0,
            initialize_notified: false,
            notifications: 0,
            notifications_with_id: 0,
            first_notification_with_id: None,
            stage: "the connection",
            gone: None,
            unfinished: None,
            left: super::watched::Left::default(),
            repeats: super::watched::Repeats::default(),
            spreads: crate::check::spread::Spreads::default(),
            integral: super::watched::IntegralIds::default(),
            deliveries: super::delivered::Deliveries::default(),
            refusal_codes: super::judge::RefusalCodes::default(),
            lifecycles: super::lifecycle::Lifecycles::default(),
            not_rpc: super::frames::NotRpc::default(),
            seen: super::seen::Seen::default(),
            tolerance: super::tolerance::Tolerance::default(),
        }
    }

    /// Records a verdict, its detail capped at [`DETAIL_LIMIT`] bytes.
    pub(super) fn record(&mut self, id: &str, status: Status, detail: impl Into<String>) {
        self.rec
            .record(id, status, capped(detail.into(), DETAIL_LIMIT));
    }

    /// Records `status` for every check in `ids` that has no verdict yet.
    pub(super) fn record_unset(&mut self, ids: &[&str], status: Status, detail: &str) {
        for id in ids {
            if !self.rec.has(id) {
                self.record(id, status, detail);
            }
        }
    }

    /// Every check without a verdict skipped, for `why`.
    pub(super) fn skip_rest(&mut self, why: &str) {
        self.rec.skip_rest(&capped(why.to_owned(), DETAIL_LIMIT));
    }

    /// How and when the host went away (`None` while it is connected).
    pub(super) fn gone(&self) -> Option<&str> {
        self.gone.as_deref()
    }

    /// Notes that the connection has ended: how (EOF, reset, a write that timed out), when,
    /// and during which probe (issue #19 item 5). Only the first call counts. At the end of
    /// the host's input the connection has no close reason yet (the answers owed are still
    /// being written), so none reads as EOF.
    pub(super) fn on_closed(&mut self) {
        let reason = self.peer.close_reason();
        self.closed_for(reason);
    }

    /// [`Self::on_closed`] with the reason a failed request carried.
    fn closed_for(&mut self, reason: Option<CloseReason>) {
        self.closed = true;
        if self.gone.is_some() {
            return;
        }
        let how = match reason {
            // A line left half-written, or the lines of a message begun spread over several,
            // quoted as where a wait ends (§4).
            Some(CloseReason::Eof) | None => {
                match crate::check::spread::ended_inside(&self.spreads, self.left.ended()) {
                    Some(it) => format!("the host ended the connection (EOF) inside {it}"),
                    None => "the host ended the connection (EOF)".to_owned(),
                }
            }
            Some(CloseReason::Io(e)) => format!("the connection failed ({})", capped(e, 120)),
            Some(CloseReason::WriteTimeout(d)) => format!(
                "the host stopped reading (a write did not complete within {})",
                secs(d)
            ),
            Some(CloseReason::IdleTimeout(d)) => format!("no traffic for {}", secs(d)),
            Some(CloseReason::Local | CloseReason::Dropped) => "the connection ended".to_owned(),
        };
        self.gone = Some(format!(
            "{how} {} into the run, during {}",
            secs(self.started.elapsed()),
            self.stage
        ));
    }

    /// What the connection discarded of the host's frames so far (§4: lines that are not
    /// JSON-RPC, frames over [`super::MAX_MESSAGE`]), e.g. ` (discarded meanwhile: 1
    /// message over the 1048576-byte limit)`; empty when nothing was.
    pub(super) fn discarded(&mut self) -> String {
        self.read_diagnostics();
        let (oversized, other, lost) = std::mem::take(&mut self.discards);
        let mut parts = Vec::new();
        if oversized > 0 {
            parts.push(format!(
                "{oversized} message(s) over the {}-byte limit",
                super::MAX_MESSAGE
            ));
        }
        if other > 0 {
            parts.push(format!("{other} frame(s) that are not valid JSON-RPC"));
        }
        if lost > 0 {
            parts.push(format!("{lost} more not counted"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" (discarded meanwhile: {})", parts.join(", "))
        }
    }

    /// Reads the diagnostics that came so far: counts the frames discarded, keeps the ids of
    /// invalid responses.
    pub(super) fn read_diagnostics(&mut self) {
        while let Some(d) = self.diagnostics.try_recv() {
            self.not_rpc.note(&d);
            let (oversized, other, lost) = &mut self.discards;
            match d {
                Diagnostic::Oversized { .. } => *oversized += 1,
                Diagnostic::Dropped { count } => *lost = lost.saturating_add(count),
                Diagnostic::InvalidMessage {
                    id: Some(id),
                    reason,
                    answered: false,
                } => {
                    *other += 1;
                    self.keep_invalid(id, Reply::Invalid(capped(reason, 120)));
                }
                Diagnostic::TooCostly {
                    id: Some(id),
                    method: None,
                    cost,
                    limit,
                } => {
                    *other += 1;
                    let why = format!(
                        "the host's answer would cost {cost} units parsed, over the checker's \
                         budget of {limit} units, and was refused unread"
                    );
                    self.keep_invalid(id, Reply::Unread(why));
                }
                // The id of a request the peer no longer awaits and did not give up on: it
                // was answered already (JSON-RPC 2.0 §5: one Response per call).
                Diagnostic::UnknownResponse { id: Some(id), .. } if self.integral.was_sent(&id) => {
                    let (count, kept) = &mut self.twice;
                    *count = count.saturating_add(1);
                    if kept.len() < TWICE_KEPT {
                        kept.push(capped(id.to_string(), 60));
                    }
                }
                Diagnostic::UnknownResponse { id: Some(id), .. } => {
                    let (count, first) = &mut self.unmatched;
                    *count = count.saturating_add(1);
                    first.get_or_insert_with(|| capped(id.to_string(), 60));
                }
                Diagnostic::UnknownResponse {
                    id: None,
                    error: Some(e),
                } => self.tolerance.null_error(e.code, &e.message),
                Diagnostic::JunkLine { .. }
                | Diagnostic::ParseError { .. }
                | Diagnostic::NotText { .. }
                | Diagnostic::InvalidMessage { .. }
                | Diagnostic::EmptyBatch
                | Diagnostic::BatchTooLarge { .. }
                | Diagnostic::TooCostly { .. } => *other += 1,
                _ => {}
            }
        }
    }

    fn keep_invalid(&mut self, id: RequestId, reply: Reply) {
        if self.invalid_answers.len() >= INVALID_KEPT {
            self.invalid_answers.remove(0);
        }
        self.invalid_answers.push((id, reply));
    }

    /// What the response to `id` came to when it was not valid JSON-RPC or too costly to
    /// read, if one came so far (once).
    fn invalid_answer(&mut self, id: &RequestId) -> Option<Reply> {
        self.read_diagnostics();
        let i = self.invalid_answers.iter().position(|(i, _)| i == id)?;
        Some(self.invalid_answers.remove(i).1)
    }

    /// Whether a failed write means the connection is gone; notes it if so.
    fn after_write(&mut self, r: Result<(), PeerError>) -> bool {
        if r.is_err() && self.peer.close_reason().is_some() {
            self.on_closed();
        }
        r.is_ok()
    }

    /// The next message from the host before `deadline`; `None` on the deadline or when the
    /// connection ends.
    pub(super) async fn next_until(&mut self, deadline: Instant) -> Option<IncomingMessage> {
        if self.closed {
            return None;
        }
        match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
            Ok(Some(m)) => Some(self.arrived(m)),
            Ok(None) => {
                self.on_closed();
                None
            }
            Err(_) => None,
        }
    }

    /// A request on its way, bounded by `bound`.
    pub(super) fn start(&self, method: &str, params: Option<Value>, bound: Duration) -> Call {
        let (peer, method) = (self.peer.clone(), method.to_owned());
        Box::pin(async move {
            let options = RequestOptions::new().timeout(bound);
            peer.request_raw_with(&method, params, options).await
        })
    }

    /// Sends a request and waits for its answer (within the step timeout), handling what the
    /// host sends meanwhile in wire order: a policy Request the host sent before its answer
    /// is applied before the answer comes back (§5.4, §6.7).
    pub(super) async fn call(&mut self, method: &str, params: Value) -> Reply {
        self.call_within(method, params, self.bounds.step).await
    }

    /// [`Self::call`] with its own bound.
    pub(super) async fn call_within(
        &mut self,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Reply {
        if self.closed {
            return Reply::Closed;
        }
        let id = match self.peer.send_request(method, Some(params), |_| {}).await {
            Ok(id) => id,
            Err(e) => return self.reply(Err(e)),
        };
        let deadline = Instant::now() + bound;
        loop {
            if self.closed {
                return Reply::Closed;
            }
            match tokio::time::timeout_at(deadline, self.incoming.recv_ordered()).await {
                Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&id) => {
                    return self.ordered_reply(&id, r.outcome.map_err(PeerError::Remote));
                }
                // A late answer to a request that timed out before.
                Ok(Some(Ordered::Response(_))) => {}
                Ok(Some(Ordered::Message(m))) => {
                    let m = self.arrived(m);
                    self.handle(m).await;
                }
                Ok(None) => self.on_closed(),
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

    /// The reply of a settled call, noting a closed connection, and on a timeout the
    /// responses that came meanwhile under ids the checker never sent; a failure the peer
    /// made for an answer its bounds kept it from reading is [`Reply::Unread`]
    /// ([`Reply::unread`]).
    pub(super) fn reply(&mut self, r: Result<Value, PeerError>) -> Reply {
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
    fn ordered_reply(&mut self, id: &RequestId, outcome: Result<Value, PeerError>) -> Reply {
        let own = matches!(outcome, Err(PeerError::Remote(_))) && self.peer.failed_here(id);
        if let Some(reply) = self.invalid_answer(id) {
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
    pub(super) fn timeout(&mut self) -> Reply {
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
    pub(super) fn left_unfinished(&self) -> String {
        self.left
            .describe()
            .or_else(|| self.spreads.holding())
            .map(|l| format!("; {l}"))
            .unwrap_or_default()
    }

    /// Drives an outstanding request to its answer while handling incoming messages. The
    /// request comes first (`biased`), so a host flooding the checker cannot keep it from
    /// seeing its timeout.
    pub(super) async fn settle(&mut self, mut call: Call) -> Reply {
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
    fn settle_invalid(
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

    /// [`Self::call_within`], with a `ping` sent right behind the request (issue #19 item 2,
    /// `host.requests-independent`): the ping must be answered within the step timeout even
    /// while the request is outstanding. Read by wire order, not by timing: the ping's answer
    /// coming before the request's (or with the request never answered) shows the two
    /// independent; no answer to the ping within the timeout fails; the request answered
    /// first shows nothing either way.
    pub(super) async fn call_paired(
        &mut self,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Reply {
        if self.closed {
            return Reply::Closed;
        }
        // Both go out with `send_request`: their answers come through `recv_ordered` at their
        // wire position among the host's messages, so which came first is read off the wire.
        // A send that fails on a connection already gone notes it here, so the report names
        // this probe, and the probes after it are not run for nothing.
        let first_id = match self.peer.send_request(method, Some(params), |_| {}).await {
            Ok(id) => id,
            Err(e) => return self.reply(Err(e)),
        };
        let first_deadline = Instant::now() + bound;
        let ping_id = self.peer.send_request(Ping::NAME, None, |_| {}).await.ok();
        let ping_deadline = Instant::now() + self.bounds.step;
        let (mut answer, mut pong) = (None, ping_id.is_none().then_some(Reply::Closed));
        let mut ping_first = false;
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
            match tokio::time::timeout_at(deadline, self.incoming.recv_ordered()).await {
                Ok(Some(Ordered::Response(r))) => {
                    let outcome = r.outcome.map_err(PeerError::Remote);
                    if r.id.as_ref() == Some(&first_id) {
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
                        self.peer.forget(&first_id, "timed out");
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
        match pong {
            Some(Reply::Timeout { note }) => {
                let d = format!(
                    "a ping sent while {method} was outstanding got no answer within {}{note}",
                    secs(self.bounds.step)
                );
                self.record(REQUESTS_INDEPENDENT, Status::Fail, d);
            }
            Some(Reply::Result(_) | Reply::Error(_) | Reply::Invalid(_) | Reply::Unread(_))
                if ping_first =>
            {
                let d = format!("a ping was answered while {method} was still outstanding");
                self.record(REQUESTS_INDEPENDENT, Status::Pass, d);
            }
            _ => {}
        }
        answer.unwrap_or(Reply::Closed)
    }

    /// Handles what the host sends for `watch` (named `stage` in the report), then ends the
    /// connection.
    pub(super) async fn listen(&mut self, stage: &'static str) {
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
    pub(super) fn policy_notification(&mut self, params: Option<&Value>) -> bool {
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
    pub(super) fn note_form(&mut self, method: &str, id: Option<&RequestId>) {
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
    pub(super) async fn handle(&mut self, m: IncomingMessage) {
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
                if n.method == FeatureSetsUpdate::NAME
                    && self.policy_notification(n.params.as_ref())
                {
                    self.record(
                        "host.policy-is-request",
                        Status::Fail,
                        "a grant change came as a featureSets/update Notification (§6.7)",
                    );
                }
                return;
            }
        };
        let mut receipt = false;
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
            ManifestFetch::NAME => Ok(served::manifest()),
            ChannelsList::NAME => Ok(json!({ "channels": [] })),
            Initialize::NAME => Err(ErrorObject::invalid_request("already initialized")),
            // A later policy change: applied and answered by the library server's own rule
            // (`session::answer_policy_request`); its receipt puts a policy in force (a
            // host that sent none in time is late, not ignored).
            FeatureSetsUpdate::NAME => {
                let params = req.request().params.as_ref().unwrap_or(&Value::Null);
                // §5.4, §6.7: each Request replaces the grant, so each is judged.
                self.judge_policy_grant(params, "a later policy Request: ");
                let answer = mcpl::session::answer_policy_request(&mut self.policy, None, params);
                receipt = answer.response.is_ok();
                answer.response
            }
            BeforeInference::NAME => {
                self.judge_hook(req.request().params.as_ref());
                Ok(json!({ "featureSet": "check.hints", "contextInjections": [] }))
            }
            other => Err(ErrorObject::method_not_found(other)),
        };
        let tools = result.is_ok() && req.method() == ToolsList::NAME;
        let written = match result {
            Ok(v) => req.respond(v).await,
            Err(e) => req.respond_error(e).await,
        };
        if self.after_write(written) {
            self.ready |= receipt;
            if tools {
                self.answered_unknown(ToolsList::NAME);
            }
        }
    }

    /// §5.3, §5.4 and §10.1: a hook comes only once ready and under a granted hook leaf,
    /// and carries the user message only when observe is granted.
    fn judge_hook(&mut self, params: Option<&Value>) {
        self.hooks = self.hooks.saturating_add(1);
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
            Ok(_) => {}
        }
        // The library host's redaction rule, under the grant in force (none before ready).
        let in_force = if self.policy.is_ready() {
            grant
        } else {
            Grant::none()
        };
        if mcpl::policy::unredacted_user_message(&in_force, params) {
            self.record(
                "host.user-message-redacted",
                Status::Fail,
                "userMessage sent though observe is not granted",
            );
        }
    }

    /// Stops the run where it is: it reached its wall-time bound.
    pub(super) fn cut_off(&mut self, bound: Duration) {
        self.unfinished = Some(format!(
            "the run reached its time bound, {} after the host connected (the whole run is \
             bounded by {}), during {}",
            secs(bound),
            Bounds::FORMULA,
            self.stage
        ));
        self.peer.close();
    }

    /// The report: hooks judged by what arrived, the head-of-line check settled, every check
    /// not reached saying why.
    pub(super) fn finish(mut self, label: String) -> Report {
        let hook_ids = ["host.hooks-after-ready", "host.user-message-redacted"];
        let form = "host.hook-is-request";
        if self.hooks == 0 {
            let why = "the host sent no context/beforeInference during the run";
            self.record_unset(&hook_ids, Status::Skip, why);
            self.record_unset(&[form], Status::Skip, why);
        } else {
            let d = format!("{} context/beforeInference message(s) conform", self.hooks);
            self.record_unset(&hook_ids, Status::Pass, &d);
            if self.hooks_notified > 0 {
                let d = format!(
                    "{} of {} context/beforeInference sent as a Notification (§4.1: a Request, \
                     whose answer carries the injections: a Notification gets none)",
                    self.hooks_notified, self.hooks
                );
                self.record(form, Status::Fail, d);
            } else {
                let d = format!("{} context/beforeInference, each a Request", self.hooks);
                self.record(form, Status::Pass, d);
            }
        }
        let form = "host.notifications-have-no-id";
        if let Some(first) = &self.first_notification_with_id {
            let d = crate::check::vocabulary::notifications_with_id_detail(
                self.notifications_with_id,
                self.notifications,
                first,
            );
            self.record(form, Status::Fail, d);
        } else if self.notifications > 0 {
            let d = format!(
                "{} message(s) of a notification-only method, each without an id",
                self.notifications
            );
            self.record(form, Status::Pass, d);
        } else {
            let why = "the host sent no notification-only method (§4.1) during the run";
            self.record_unset(&[form], Status::Skip, why);
        }
        self.conclude_deliveries();
        self.conclude_lifecycles();
        // JSON-RPC 2.0 §5: one Response per call; judged on what came, however the run ended.
        self.read_diagnostics();
        self.conclude_frames(self.repeats.summary().0);
        self.conclude_seen();
        self.conclude_tolerance();
        let once = "host.responses-once";
        match &self.twice {
            (0, _) if self.repeats.summary().0 == 0 => {}
            (0, _) => {
                let d = "no request of the checker's was answered twice";
                self.record(once, Status::Pass, d);
            }
            (n, kept) => {
                let d = format!(
                    "{n} response(s) came under the id of a request already answered (JSON-RPC \
                     2.0 §5: one Response per call; the second is dropped unread, so whatever \
                     it said, an acceptance after a refusal, never counts): request id(s) {}",
                    kept.join(", ")
                );
                self.record(once, Status::Fail, d);
            }
        }
        if self.unfinished.is_none() && self.gone.is_none() {
            let why = "every request was answered before the ping sent right behind it: none \
                       was outstanding for another to wait behind";
            self.record_unset(&[REQUESTS_INDEPENDENT], Status::Skip, why);
        }
        // RFC 8259 §4 (SHOULD), I-JSON (RFC 7493 §2.3): judged on every message that came,
        // however the run ended.
        let unique = "host.member-names-unique";
        match self.repeats.summary() {
            (_, Some(said)) => self.record(unique, Status::Warn, said),
            (0, None) => {}
            (n, None) => {
                let d = format!("no object repeated a member name in {n} frame(s)");
                self.record(unique, Status::Pass, d);
            }
        }
        // §4: one message per line over line framing (MCP's stdio transport: no embedded
        // newline); judged on every message that came, however the run ended.
        let one_line = "host.messages-one-line";
        match self.spreads.seen() {
            (0, _) if self.repeats.summary().0 == 0 => {}
            (0, _) => {
                let d = "no message was spread over several lines";
                self.record(one_line, Status::Pass, d);
            }
            (n, kept) => {
                let d = format!(
                    "{n} message(s) spread over several lines, where a message must be one line \
                     (§4: JSON-RPC as MCP carries it, whose stdio transport delimits messages \
                     by newlines and forbids embedded ones; each was read whole, so the run \
                     went on){}: {}",
                    if n > kept.len() as u64 {
                        format!(", the first {} shown", kept.len())
                    } else {
                        String::new()
                    },
                    kept.join("; ")
                );
                self.record(one_line, Status::Fail, d);
            }
        }
        // JSON-RPC 2.0 §5: the same value, written otherwise; judged however the run ended.
        let ids = "host.response-ids-as-sent";
        match self.integral.summary() {
            Some(said) => self.record(ids, Status::Warn, said),
            None if self.repeats.summary().0 == 0 => {}
            None => {
                let d = "no response wrote a request's id with a fraction or an exponent";
                self.record(ids, Status::Pass, d);
            }
        }
        // RFC 8259 §8.1: a writer must not add a byte order mark (a parser may ignore it).
        let mark = "host.no-byte-order-mark";
        match self.repeats.marks() {
            (_, Some(said)) => self.record(mark, Status::Warn, said),
            (0, None) => {}
            (n, None) => {
                let d = format!("none of {n} frame(s) began with a byte order mark");
                self.record(mark, Status::Pass, d);
            }
        }
        match (&self.unfinished, &self.gone) {
            (Some(why), _) => {
                let why = format!("not reached: {why}");
                self.skip_rest(&why);
            }
            (None, Some(gone)) => {
                let why = format!("not reached: {gone}");
                self.skip_rest(&why);
            }
            (None, None) => {}
        }
        let mut report = self.rec.finish(label);
        report.error = self.unfinished.map(|e| capped(e, DETAIL_LIMIT));
        report
    }
}

/// A duration as the report writes it (`1.5 s`).
pub(super) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
