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
use super::tally::Tally;
use super::{served, Bounds};
use crate::check::report::{Recorder, Report, Status};

/// Most invalid responses [`Run`] keeps the ids of.
const INVALID_KEPT: usize = 8;

/// Most ids of requests answered twice [`Run`] keeps to quote (the rest are counted).
const TWICE_KEPT: usize = 3;

/// The check the paired pings feed.
pub(super) const REQUESTS_INDEPENDENT: &str = "host.requests-independent";

pub(super) use super::reply::Reply;
pub(super) use calls::needs_of;
use handle::Deferred;

mod calls;
mod finish;
mod handle;

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
    pub(super) incoming: Incoming,
    /// The connection's diagnostics (bounded: [`super::peer_config`]), read for the report.
    diagnostics: Diagnostics,
    /// What they told of frames discarded since [`Run::discarded`] last said so: over the
    /// size limit, not valid JSON-RPC, lost uncounted.
    discards: (u64, u64, u64),
    /// Diagnostics the connection's bounded stream dropped before the run read them, over
    /// the whole run ([`Diagnostic::Dropped`]): a check judged from diagnostics had an
    /// incomplete view when this is not 0 ([`Run::view_lost`]).
    pub(super) diagnostics_lost: u64,
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
    /// Responses that answer no request of the checker's (JSON-RPC 2.0 §5), the first
    /// [`STRAY_KEPT`] said: under an id it never sent, or a result under id null
    /// (`host.responses-answer-requests`; a `-32700` error under id null is owed to the
    /// checker's junk line, judged by `host.survives-junk-line`'s tolerance, never here).
    stray: Tally<STRAY_KEPT>,
    rec: Recorder,
    /// Warnings recorded after a pass or a skip of the same check, which the recorder (the
    /// first verdict kept unless a fail follows) would drop: id and detail, the first per
    /// check, applied to the report once the run ends ([`Run::record`]).
    raised: Vec<(&'static str, String)>,
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
    /// A `featureSets/update` Notification carrying grant fields came since the last policy
    /// Request was answered: the host may hold a grant this server never applied (§6.7: the
    /// server takes only its `disabled` list), so a grant-dependent probe accepts either
    /// answer ([`super::judge::Meanwhile`]); the next receipt replaces both sides' grant.
    pub(super) grant_notified: bool,
    /// The host accepted `check:a` in its answer to the `channels/register` probe, so a
    /// `channels/incoming` naming it is one for a registered channel ([`super::channels`]).
    pub(super) channel_held: bool,
    /// The checker's descriptors the host accepted in that answer, listed when the host
    /// sends `channels/list` (§14.3: the channels known for this connection; the checker
    /// had answered `[]` whatever it had registered).
    pub(super) held_channels: Vec<Value>,
    /// The paired pings that settled nothing ([`Paired`]).
    pub(super) paired: Paired,
    /// The ping probe got no answer within its step (`host.ping-answered` failed so), so
    /// a later ping unanswered shows the same silence ([`super::probes`]).
    pub(super) ping_silent: bool,
    /// The host has answered a request of the checker's (a result, an error, or an answer
    /// the checker could not read): a pair it answers neither of is then a ping waiting
    /// behind a request, not a host that answers nothing ([`Paired::silent`]).
    pub(super) answered_any: bool,
    /// Responses to the checker's requests that a later receipt's hold read in wire order
    /// while a loop awaiting them was suspended ([`Run::hold_later_receipt`]), handed to
    /// that loop first ([`Run::ordered_until`]), each with the run as it stood when it came
    /// ([`Run::snapshot`]). Only responses to requests the peer still awaits are delivered
    /// so (a few: a probe and its ping), others being diagnostics.
    pub(super) stash: std::collections::VecDeque<(Ordered, Option<Snapshot>)>,
    /// The snapshot kept with the response [`Run::ordered_until`] last took from the stash.
    pub(super) popped_under: Option<Snapshot>,
    /// The run as it stood when the last call's answer came, where it may differ from now
    /// (a paired probe's answer before its ping's, one a hold read): the probe is judged so
    /// ([`Run::as_answered`]), so a grant change the host sent after its answer never
    /// reaches back to it (§6.7, wire order).
    pub(super) answered_under: Option<Snapshot>,
    /// While a later policy Request's receipt is held: the grant before it. An expansion
    /// takes effect at the host only once it has read the receipt (§6.7), so what the host
    /// sends meanwhile is judged under this grant too ([`Run::judge_hook`]).
    /// With it, the grant the host had sent before, as sent
    /// ([`ServerPolicyState::offered`]): what the host held before the change.
    /// While several are held (an expansion read during another's hold), the grants
    /// before each, each pair narrowed to what every one of them allows.
    pub(super) expanding: Option<(Grant, Grant)>,
    /// The later receipts held now, oldest first: the ping written ahead of each, the
    /// grants before it, and until when it is held ([`Run::hold_later_receipt`]).
    pub(super) holds: std::collections::VecDeque<(RequestId, (Grant, Grant), Instant)>,
    /// The most one later receipt is held: half a step, at most
    /// [`super::exchange::RECEIPT_HOLD_MAX`] (the run's bound keeps its margin).
    pub(super) hold_each: Duration,
    /// What is left of the time later receipts may be held, in all: [`MAX_HELD_RECEIPTS`]
    /// times [`Run::hold_each`].
    pub(super) hold_left: Duration,
    /// The fetch answers held within another hold now ([`Run::hold_fetch_answer`]), at
    /// most [`MAX_NESTED_FETCH_HOLDS`].
    pub(super) fetch_holds_nested: u32,
    /// While a widening Request's held probes and hold run ([`Run::probe_held_receipt`],
    /// from reading it until its receipt is written): the later policy Requests read
    /// meanwhile, oldest first, applied but not yet answered ([`Deferred`]), at most
    /// [`MAX_DEFERRED_RECEIPTS`]; `None` outside that window.
    pub(super) deferred: Option<std::collections::VecDeque<Deferred>>,
    /// While the held probes of a widening Request run ([`Run::probe_held_receipt`]): the
    /// grants before it (§6.7: what it adds is not in force until its receipt is read, so a
    /// hook or delivery sent meanwhile is judged under them too, [`Run::expanding`]).
    pub(super) opening: Option<(Grant, Grant)>,
    /// The grants before each expanding policy Request answered as an entry of a batch
    /// (JSON-RPC 2.0 §6) whose array is not written yet, with the batch's frame
    /// ([`mcpl::peer::Incoming::frame`]): its answer waits in the batch until the batch's
    /// last kept entry is answered ([`Run::deferred`]), so what it adds is not in force
    /// until then (§6.7). At most one per kept Request, so bounded as [`Run::deferred`] is.
    pub(super) batched: Vec<(u64, (Grant, Grant))>,
    /// The inference probe was sent (a skip of what it feeds names the cause only then).
    pub(super) inference_probed: bool,
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
    /// `inference/chunk`s the host sent for a request of the checker's that asked for no
    /// stream (§11.4: chunks only for a request with `stream: true`), and the `requestId` of
    /// the first, quoted (`host.chunks-only-when-streamed`; [`Run::judge_chunk`]).
    pub(super) chunks: usize,
    pub(super) first_chunk_for: Option<String>,
    /// An `inference/request` of the checker's that asked for no stream was answered with a
    /// result: the host ran an inference, so whether it streamed unasked is judged.
    pub(super) inference_answered: bool,
    /// The streamed inference probe, when the grant allowed one, and the chunks judged
    /// against it (`host.chunks-well-formed`, [`super::streamed`]).
    pub(super) stream: super::streamed::Streamed,
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
    /// What the `-32002` refusals among them named ([`super::refusal_data::RefusalData`]).
    pub(super) refusal_data: super::refusal_data::RefusalData,
    /// The `inference/lifecycle` signals the host sent, judged ([`super::lifecycle`]).
    pub(super) lifecycles: super::lifecycle::Lifecycles,
    /// The host's frames that are not JSON-RPC 2.0 ([`super::frames`]).
    pub(super) not_rpc: super::frames::NotRpc,
    /// What the host's messages showed as they arrived ([`super::seen`]).
    pub(super) seen: super::seen::Seen,
    /// What the host did after answers carrying unknown members ([`super::tolerance`]).
    pub(super) tolerance: super::tolerance::Tolerance,
    /// The manifest served and what the host did with its changes
    /// ([`super::manifest_change`]).
    pub(super) changes: super::manifest_change::Changes,
}

/// What the paired pings showed when they settled no verdict of
/// `host.requests-independent` ([`Run::call_paired`]), for the reason the report gives.
#[derive(Debug, Default)]
pub(super) struct Paired {
    /// Pairs whose request was answered before the ping behind it: nothing outstanding.
    pub(super) in_order: u64,
    /// The method of the first pair neither of whose requests was answered.
    pub(super) silent: Option<String>,
}

/// At most this many characters of a request id (host-chosen) are quoted in a detail.
const MAX_QUOTED_ID_CHARS: usize = 64;

/// How many responses answering no request of the checker's are described in
/// `host.responses-answer-requests`' detail (all are counted).
const STRAY_KEPT: usize = 3;

/// How many later receipts' worth of holding a run spends in all ([`Run::hold_left`]): each
/// expansion is held up to [`Run::hold_each`], so a host sending expansion after expansion
/// and leaving each ping unanswered holds the run up at most this many times over.
const MAX_HELD_RECEIPTS: u32 = 16;

/// How many fetch answers are held within another hold at once ([`Run::hold_fetch_answer`]):
/// each is a loop within the one before (a future on the heap), so a host sending fetch
/// after fetch while pings are outstanding nests a few, never without bound; past it the
/// answer is written at once. Each ends no later than the holds it runs within.
const MAX_NESTED_FETCH_HOLDS: u32 = 4;

/// How many later policy Requests are kept unanswered while a widening Request's held probes
/// run ([`Run::deferred`]): the connection's bound on the host's requests in flight (the
/// library's default, 128, [`mcpl::peer::PeerConfig::max_in_flight_requests`], set to this
/// by the checker's peer configuration). A kept Request counts in flight until answered, so
/// the library answers one past it `-32000` (busy) before the checker reads it: every policy
/// Request the checker reads while the probes run is kept, none is receipted early (r13 F1:
/// a receipt written past a smaller cap let a held probe's answer be judged early).
pub(super) const MAX_DEFERRED_RECEIPTS: usize = mcpl::peer::DEFAULT_MAX_IN_FLIGHT_REQUESTS;

impl Run {
    /// A run over a connected peer.
    pub(super) fn new(peer: Peer, incoming: Incoming, rec: Recorder, bounds: Bounds) -> Run {
        Run {
            diagnostics: peer.diagnostics(),
            discards: (0, 0, 0),
            diagnostics_lost: 0,
            invalid_answers: Vec::new(),
            unmatched: (0, None),
            twice: (0, Vec::new()),
            stray: Tally::default(),
            peer,
            incoming,
            rec,
            raised: Vec::new(),
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
            grant_notified: false,
            channel_held: false,
            held_channels: Vec::new(),
            paired: Paired::default(),
            ping_silent: false,
            inference_probed: false,
            stash: std::collections::VecDeque::new(),
            popped_under: None,
            answered_under: None,
            expanding: None,
            holds: std::collections::VecDeque::new(),
            hold_each: (bounds.step / 2).min(super::exchange::RECEIPT_HOLD_MAX),
            hold_left: (bounds.step / 2)
                .min(super::exchange::RECEIPT_HOLD_MAX)
                .saturating_mul(MAX_HELD_RECEIPTS),
            fetch_holds_nested: 0,
            deferred: None,
            opening: None,
            batched: Vec::new(),
            answered_any: false,
            closed: false,
            died_of_junk: false,
            hooks: 0,
            hooks_notified: 0,
            initialize_notified: false,
            notifications: 0,
            notifications_with_id: 0,
            first_notification_with_id: None,
            chunks: 0,
            first_chunk_for: None,
            inference_answered: false,
            stream: super::streamed::Streamed::default(),
            stage: "the connection",
            gone: None,
            unfinished: None,
            left: super::watched::Left::default(),
            repeats: super::watched::Repeats::default(),
            spreads: crate::check::spread::Spreads::default(),
            integral: super::watched::IntegralIds::default(),
            deliveries: super::delivered::Deliveries::default(),
            refusal_codes: super::judge::RefusalCodes::default(),
            refusal_data: super::refusal_data::RefusalData::default(),
            lifecycles: super::lifecycle::Lifecycles::default(),
            not_rpc: super::frames::NotRpc::default(),
            seen: super::seen::Seen::default(),
            tolerance: super::tolerance::Tolerance::default(),
            changes: super::manifest_change::Changes::default(),
        }
    }

    /// Records a verdict, its detail capped at [`DETAIL_LIMIT`] bytes. A check's verdict is
    /// the worst seen (fail over warn over pass), never merely the first: the recorder lets
    /// only a fail replace an earlier verdict, so a warning after a pass (a later policy
    /// Request whose grant warns, after the initial one passed) or after a skip is kept
    /// here ([`Run::raised`]) and applied by [`Run::apply_raised`].
    pub(super) fn record(&mut self, id: &str, status: Status, detail: impl Into<String>) {
        let detail = capped(detail.into(), DETAIL_LIMIT);
        let below = matches!(self.rec.status(id), Some(Status::Pass | Status::Skip));
        if status == Status::Warn && below {
            if let Some(def) = super::HOST_CATALOGUE.iter().find(|d| d.id == id) {
                if !self.raised.iter().any(|(i, _)| *i == def.id) {
                    self.raised.push((def.id, detail));
                }
                return;
            }
        }
        self.rec.record(id, status, detail);
    }

    /// The warnings [`Run::record`] kept, each replacing its check's pass or skip in
    /// `report` (a fail recorded since stands).
    fn apply_raised(raised: Vec<(&'static str, String)>, report: &mut Report) {
        for (id, detail) in raised {
            if let Some(c) = report.checks.iter_mut().find(|c| c.id == id) {
                if matches!(c.status, Status::Pass | Status::Skip) {
                    c.status = Status::Warn;
                    c.detail = detail;
                    c.follows_from = None;
                }
            }
        }
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
            // MCP: an id is not reused while in flight; the peer refused it.
            if let Some(id) = super::seen::refused_in_use(&d) {
                self.id_in_use(id);
            }
            let (oversized, other, lost) = &mut self.discards;
            match d {
                Diagnostic::Oversized { .. } => *oversized += 1,
                Diagnostic::Dropped { count } => {
                    *lost = lost.saturating_add(count);
                    self.diagnostics_lost = self.diagnostics_lost.saturating_add(count);
                }
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
                    self.stray
                        .note(|| crate::check::ids::stray_response(Some(&id), false));
                }
                // A result under id null answers nothing (an error there is the `-32700`
                // owed to the checker's junk line, read by the tolerance below).
                Diagnostic::UnknownResponse {
                    id: None,
                    error: None,
                } => {
                    self.stray
                        .note(|| crate::check::ids::stray_response(None, false));
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

    /// A verdict judged from the connection's diagnostics, read against what the bounded
    /// stream lost ([`Run::diagnostics_lost`]): unchanged when nothing was lost; else a pass
    /// warns (`what`, a finding of the check's, may have been among the lost, so the pass
    /// cannot be confirmed) and any other verdict says that its counts are a floor.
    pub(super) fn view_lost(&self, status: Status, detail: String, what: &str) -> (Status, String) {
        let lost = self.diagnostics_lost;
        if lost == 0 {
            return (status, detail);
        }
        let said = format!(
            "{lost} diagnostic(s) of the connection were lost before the checker read them \
             (its stream holds {}, the oldest dropped first)",
            super::DIAGNOSTICS_KEPT
        );
        match status {
            Status::Pass => (
                Status::Warn,
                format!(
                    "{detail}; but {said}: {what} among them would not be seen, so this could \
                     not be confirmed"
                ),
            ),
            other => (
                other,
                format!("{detail}; {said}, so the counts are a floor"),
            ),
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
}

/// What a probe's verdict reads of the run: the policy and whether a grant came by
/// Notification ([`Run::as_answered`]).
#[derive(Debug, Clone)]
pub(super) struct Snapshot {
    policy: ServerPolicyState,
    grant_notified: bool,
    /// [`Run::expanding`] then: the grants before the expansions whose receipts were held
    /// (read by [`Run::held_when_answered`], never swapped in).
    expanding: Option<(Grant, Grant)>,
    /// The policy messages counted since the last fetch's answer then (read by
    /// [`Run::told_when_answered`], never swapped in).
    told: u32,
}

impl Run {
    /// The run as it stands now, as a probe's verdict reads it.
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            policy: self.policy.clone(),
            grant_notified: self.grant_notified,
            expanding: self.expanding,
            told: self.changes.policy_messages_since_fetch(),
        }
    }

    /// Whether the host had sent a policy message since the last fetch's answer when the
    /// last call's answer came ([`Run::answered_under`]; as it stands now when none was
    /// kept): the wire position of the answer, not of the request (§6.7, §17.5).
    pub(super) fn told_when_answered(&self) -> bool {
        match &self.answered_under {
            Some(then) => then.told > 0,
            None => self.changes.policy_messages_since_fetch() > 0,
        }
    }

    /// [`Run::expanding`] as it stood when the last call's answer came
    /// ([`Run::answered_under`]; as it stands now when none was kept): an answer read while
    /// a later receipt was held came before the host could have read it (§6.7: tell →
    /// receipt → activate), so what the expansion granted did not cover it.
    pub(super) fn held_when_answered(&self) -> Option<(Grant, Grant)> {
        match &self.answered_under {
            Some(then) => then.expanding,
            None => self.expanding,
        }
    }

    /// `f` on the run as it stood when the last call's answer came ([`Run::answered_under`];
    /// as it stands now when none was kept): what the host sent after its answer is not
    /// read into the verdict (§6.7, wire order). The run is as it stands now again after;
    /// the copy stays until the next call, for each reading of that call's verdict.
    pub(super) fn as_answered<T>(&mut self, f: impl FnOnce(&Run) -> T) -> T {
        let Some(then) = self.answered_under.clone() else {
            return f(self);
        };
        let now = self.swap_in(then);
        let t = f(self);
        self.swap_in(now);
        t
    }

    /// Puts `s` in place, returning what stood there.
    fn swap_in(&mut self, s: Snapshot) -> Snapshot {
        Snapshot {
            policy: std::mem::replace(&mut self.policy, s.policy),
            grant_notified: std::mem::replace(&mut self.grant_notified, s.grant_notified),
            expanding: s.expanding,
            told: s.told,
        }
    }
}

/// A duration as the report writes it (`1.5 s`).
pub(super) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
