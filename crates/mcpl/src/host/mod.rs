//! The host session: policy exchange, enforcement, hook fan-out, lifecycle and manifest
//! review over a live connection.
//!
//! [`HostSession::connect`] runs the MCP handshake from the host side (`initialize`
//! advertising MCPL under `capabilities.experimental.mcpl`, §5.2; `notifications/initialized`)
//! and then the initial policy exchange (§5.3): a `featureSets/update` **Request** carrying
//! the effective grant, sent even when nothing is enabled or disabled. Until its receipt
//! arrives every privileged inbound method is rejected with `-32002`.
//!
//! The session is a thin async driver of the sans-I/O [`crate::session::HostState`], which
//! makes every protocol decision: one task per connection owns it and feeds it in wire
//! order (the server's messages and the answers to its requests, timer ticks, the
//! application's calls), and carries out what it decides (`driver.rs`). Nothing of the
//! session's state is shared between tasks: the getters read a snapshot the driver
//! publishes after each input, before it carries out that input's outputs, so an
//! application that saw an event sees the state after it. The application's own plain
//! requests and notifications ([`HostSession::request`] and friends) are gated by the
//! core outbound gate against that snapshot and go straight out through the [`Peer`]:
//! the state machine needs neither their frames nor their answers.
//!
//! What the application sees: a [`HostEvent`] stream (admitted push events and channel
//! messages, manifest change receipts, policy decisions) and a [`HostDiagnostic`] stream
//! (every defect of the server), both handed out by `connect` in [`HostStreams`].
//!
//! Readings where the spec leaves a choice (each failing closed):
//! - A server without `experimental.mcpl` is MCP-only (§3.3); its grant holds at most
//!   `tools`, and no policy Request is sent (there is no MCPL to configure).
//! - A `-32601`, any other error, a timeout, or an unusable (fatally malformed) receipt to the
//!   initial policy Request all end in a recorded MCP-only decision ([`Mode::McpOnly`]);
//!   MCP-only keeps `tools` only. After a timeout, an error or an unusable receipt the
//!   server may believe the grant it was told, so the reduction is told by a second Request
//!   (§6.7), bounded by [`HostConfig::policy_timeout`] like every policy Request; after a
//!   `-32601` or a refusal with `fallback: "mcp-only"` the server chose the outcome itself
//!   and nothing more is sent.
//! - A refusal with `fallback: "close"` closes the connection and `connect` fails with
//!   [`HostError::Refused`].
//! - A duplicate `push/event` (same `eventId`, §9.4) is answered `accepted: true` with
//!   `reason: "duplicate"` (the event was delivered once; a retry is acknowledged, not
//!   redelivered) and reported as [`HostDiagnostic::DuplicateEvent`].
//! - A `push/event` whose `eventId` is longer than [`HostConfig::max_event_id_bytes`] is
//!   refused with `-32602` (§9.4 sets no length; what deduplication remembers stays bounded),
//!   and a channel descriptor whose encoding exceeds [`HostConfig::max_descriptor_bytes`]
//!   is rejected item-wise as `invalid_descriptor` (§14.2 sets no size).
//! - A `push/event` the application's event queue cannot take is answered `accepted: false,
//!   reason: "host_busy"`, never blocking the connection.
//! - Channel descriptors are authorized individually (§14.5) against the grant and the
//!   host's channel patterns ([`HostConfig::channel_patterns`]); rejected descriptors carry
//!   `reason: "capability_denied"` or `"invalid_descriptor"`. `channels/incoming` results
//!   carry the Appendix A code of each rejection in an extra `code` member (`-32023` for a
//!   channel this connection never registered, `-32017` for one no longer permitted).
//! - The channels `channels/incoming` is validated against follow the host's own
//!   `channels/open` and `channels/close` (§14.3, §14.5): a confirmed close removes the
//!   channel and a confirmed open adds the channel its answer names (authorized at receipt
//!   under `channels.lifecycle`, of the `type` asked for, else `ChannelRejected`), applied in
//!   wire order: those two go through the driver, not straight through the peer. A failed,
//!   refused or late answer changes nothing, except that a close never answered in time (or
//!   given up unanswered) takes its channel out, fail closed ([`session::ChannelLifecycle`]).
//! - A method sent in a form §4.1 does not give it (`channels/register` or
//!   `channels/incoming` as a Notification) is not applied and is reported
//!   (`UnexpectedMethod`, [`crate::protocol::Kind::takes`]).
//! - The application's answer to an `inference/request` or `model/info` whose capability was
//!   revoked while it worked on it is not sent (§5.4: a message needing a denied capability
//!   is not delivered, judged where it is sent, as each `inference/chunk` is): the server is
//!   answered `-32002` naming the capability and [`HostDiagnostic::CapabilityDenied`] is
//!   reported.
//! - A server request the application's handler does not answer within
//!   [`HostConfig::answer_timeout`] (120 s by default) is answered `-32603` by the session
//!   (`data.reason: "answer_timeout"`), the handler stopped and
//!   [`HostDiagnostic::AnswerTimedOut`] reported (JSON-RPC 2.0: a request with an id gets a
//!   response; the spec sets no time).
//! - A lifecycle terminal of a turn whose `inferenceLifecycle` grant was revoked meanwhile is
//!   not sent (outbound gating wins) and reported; the server's safety timeout covers it.
//! - A refusal (`accepted: false`) to a later policy Request applies its `fallback` too;
//!   an unanswered or unusable later receipt leaves narrowing in force and never activates
//!   a widening ([`PolicyChange::not_activated`]).
//! - A manifest change that removes capabilities narrows host-side, then sends the policy
//!   Request; one that only adds never sends one (additions wait for [`HostSession::set_policy`]).
//!   `suspend_after_failures` consecutive unparseable manifests (at least 2) suspend MCPL.
//! - `channels/changed` removals of a channel this connection registered are always applied
//!   (a removal narrows), even once `channels.register` is no longer granted: the message is
//!   then answered item-wise, its additions and updates rejected as `capability_denied`
//!   rather than the whole message refused with `-32002`; an `updated` descriptor refused
//!   as `invalid_descriptor` or `capability_denied` removes the channel, its item saying
//!   `"removed": true` (§14.5: both sides agree on which channels exist). A `channels/changed` refused whole (`-32602`: past
//!   `max_channels_per_message` entries, or a list unreadable) still has its removals
//!   applied, named in the error's `data.removed`.
//! - MCP `notifications/*/list_changed` and `channels/changed` produce a `surface-changed`
//!   receipt on the same event stream (§17.7); with no manifest reviewed (MCP-only, §3.3),
//!   a `list_changed` is [`HostEvent::ListChanged`] naming the list to fetch again.
//!
//! The application answers server-initiated `inference/request` and `model/info` through
//! [`HostConfig::request_handler`] (streamed ones through [`HostConfig::stream_handler`] and
//! a [`ChunkSink`]); what no handler serves is neither advertised nor granted (§5.4,
//! [`HostDiagnostic::NotServed`]); [`before_inference`] fans a hook out over several
//! sessions; [`HostSession::start_turn`] returns a [`Turn`] guard for §10.5 lifecycle
//! emission and [`HostSession::outgoing_stream`] an [`OutgoingStream`] for §14.3;
//! [`HostSession::request`]/[`HostSession::notify`] are the gated outbound path; a
//! [`Supervisor`] keeps one server connected, re-dialling with a [`Backoff`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::manifest::ManifestFetch;

use serde_json::Value;

use crate::capability::{Capability, Grant, PatternError};
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::manifest::review::{ChangeReceipt, ManifestReview};
use crate::peer::{
    queue, CloseReason, IncomingMessage, IncomingRequest, Ordered, Peer, PeerConfig, PeerError,
};
use crate::policy::{self, Receipt};
use crate::protocol::Method;
use crate::session::rules;
pub use crate::session::Terminal;
use crate::session::{self, ChannelTable, HostState};
use crate::transport::Transport;

mod supervisor;
pub use supervisor::{Backoff, Supervisor, SupervisorEvent, EVENT_CAPACITY};

mod config;
mod driver;
mod exchange;
mod fanout;
mod outbound;
mod report;
mod snapshot;
mod turns;

pub use config::*;
use driver::{Cmd, Reply};
pub use fanout::*;
pub use report::*;
use snapshot::*;
pub use turns::*;

/// What the session's handles and its driver share: fixed at connect, or published by the
/// driver alone ([`Shared::publish`]).
struct Shared {
    config: Settings,
    /// The channel bounds and patterns of [`HostConfig`], read once.
    channel_limits: session::ChannelLimits,
    /// The server's label, set once `initialize` is answered; shared with the connection's
    /// diagnostics forwarder.
    label: Arc<std::sync::OnceLock<String>>,
    /// The state the getters read (see the module docs). Locked only to clone or replace
    /// the `Arc`, never across anything else: a getter never waits for a send.
    snapshot: Mutex<Arc<Snapshot>>,
    /// Held by a send gated against the published state while it puts its frame on the wire,
    /// and by the driver while it publishes (`Shared::snapshot_held`, `Shared::publish`).
    gate: Mutex<()>,
    /// Application calls queued for the driver and not yet carried out: while any is, a
    /// plain request or notification goes through the driver behind them
    /// ([`HostSession::behind_driver`]).
    queued: std::sync::atomic::AtomicUsize,
    /// Frames the driver carried out but still holds, not yet queued for the writer
    /// ([`crate::peer::Outbox`]): a plain send made now would be written ahead of them, so
    /// it goes behind them as behind a queued call ([`HostSession::behind_driver`]). Set
    /// before a call's count in `queued` is released.
    held: std::sync::atomic::AtomicUsize,
    /// Inputs the driver has carried out: a caller tells a driver stuck writing (to a
    /// server that stopped reading) from a busy one by it ([`HostSession::call_within`]).
    progress: std::sync::atomic::AtomicU64,
    /// Numbers the application's requests sent by the state machine ([`Cmd::Request`]), so
    /// one whose caller gave up can be named to the driver ([`Cmd::Forget`]).
    calls: std::sync::atomic::AtomicU64,
    /// A call was given up while the driver's queue was full ([`GiveUp`]): instead of a
    /// task per call waiting to queue its [`Cmd::Forget`] (one per turn piled up on a
    /// driver stuck writing), the driver is flagged, and at its next input it gives up
    /// every call whose caller is gone (bounded by the requests it holds).
    sweep: std::sync::atomic::AtomicBool,
    /// Diagnostics not delivered since the last one that was (the queue was full); shared
    /// with the connection's diagnostics forwarder ([`report_diag`]).
    /// A lock, not an atomic: the count and the diagnostic after it are queued in one step,
    /// so a diagnostic reported from the other side at the same time cannot slip in ahead
    /// of the count.
    diags_lost: Arc<Mutex<Lost>>,
}

/// Numbers one call of the application's that waits on a request of the state machine's
/// (a `channels/open` or `channels/close`, a hook) and, dropped before [`GiveUp::answered`]
/// (its caller stopped waiting, or gave up on a stuck driver), tells the driver
/// ([`Cmd::Forget`]): the request is cancelled on the wire and forgotten, as the bare
/// [`Peer`] does for a dropped request.
struct GiveUp<'a> {
    session: &'a HostSession,
    /// The call's number ([`Shared::calls`]).
    call: u64,
    armed: bool,
}

impl<'a> GiveUp<'a> {
    fn new(session: &'a HostSession) -> GiveUp<'a> {
        let call = session
            .inner
            .shared
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        GiveUp {
            session,
            call,
            armed: true,
        }
    }

    /// The driver answered the call: nothing is left to give up.
    fn answered(&mut self) {
        self.armed = false;
    }
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let shared = &self.session.inner.shared;
        shared
            .queued
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.session.inner.cmds.try_send(Cmd::Forget(self.call)) {
            Ok(()) => {}
            Err(e) => {
                shared
                    .queued
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                if matches!(e, queue::TrySendError::Full(_)) {
                    shared
                        .sweep
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }
}

/// What the session's handles and its driver read of [`HostConfig`] once connected: the
/// timeouts, the event bound and the handlers. The rest of the configuration went into the
/// state machine's [`session::HostRules`]; keeping the whole `HostConfig` as well held a
/// second copy of it (and of its policy strings) per connection (issue #24, idle memory).
struct Settings {
    initialize_timeout: Duration,
    policy_timeout: Duration,
    hook_timeout: Duration,
    manifest_timeout: Duration,
    max_event_bytes: usize,
    request_timeout: Option<Duration>,
    request_handler: Option<RequestHandler>,
    stream_handler: Option<StreamHandler>,
    diagnostic_tap: Option<DiagnosticTap>,
}

impl Settings {
    fn of(config: HostConfig) -> Settings {
        Settings {
            initialize_timeout: config.initialize_timeout,
            policy_timeout: config.policy_timeout,
            hook_timeout: config.hook_timeout,
            manifest_timeout: config.manifest_timeout,
            max_event_bytes: config.max_event_bytes,
            request_timeout: config.peer.request_timeout,
            request_handler: config.request_handler,
            stream_handler: config.stream_handler,
            diagnostic_tap: config.diagnostic_tap,
        }
    }
}

/// Diagnostics not delivered since the last one that was ([`report_diag`]), and whether
/// the session has reported its last ([`deliver_lost`]).
#[derive(Debug, Default)]
struct Lost {
    count: u64,
    /// The driver ended and its final count was taken: a later diagnostic is queued only
    /// if there is room, and not counted otherwise, as no later diagnostic would carry the
    /// count. (A task still waiting to deliver that count keeps the queue open, so the
    /// connection's forwarder can still upgrade its weak sender and report late.)
    ended: bool,
    /// The log's throttle for each kind of diagnostic reported so far ([`Lost::log`]).
    logged: Vec<(
        std::mem::Discriminant<HostDiagnostic>,
        crate::throttle::Throttle,
    )>,
}

impl Lost {
    /// Logs `d` of the session labelled `label`, at most once per
    /// [`crate::transport::listen::REPORT_INTERVAL`] for each kind of diagnostic, the next
    /// line counting those not shown. Every diagnostic still goes to the application's
    /// stream: only the log is throttled, since a server chooses how many it causes (one
    /// per message it sends), and a line per message wrote the host's log at the server's
    /// rate, holding up every session logging through a slow writer.
    /// Returns whether a line was written.
    fn log(&mut self, label: &std::sync::OnceLock<String>, d: &HostDiagnostic) -> bool {
        let kind = std::mem::discriminant(d);
        if !self.logged.iter().any(|(k, _)| *k == kind) {
            let interval = crate::transport::listen::REPORT_INTERVAL;
            self.logged
                .push((kind, crate::throttle::Throttle::new(interval)));
        }
        let Some((_, throttle)) = self.logged.iter_mut().find(|(k, _)| *k == kind) else {
            return false;
        };
        match throttle.line(|| format!("{d:?}")) {
            Some(line) => {
                tracing::warn!(server = ?label.get(), diagnostic = %line, "mcpl host diagnostic");
                true
            }
            None => false,
        }
    }
}

/// How much longer than the timeout of the exchange it waits on an application call waits
/// for the session's driver to carry out any input at all: a driver that carries out none
/// for that long is stuck writing to a server that stopped reading, and the call fails (a
/// hook counts as failed, fail-open §10); the driver, once free, drops it unstarted. A
/// driver that is only busy (other exchanges queued before the call) is waited for.
pub const DRIVER_GRACE: Duration = Duration::from_secs(1);

/// Awaits `fut` (a call's reply), giving up (`None`) only once the driver has carried out
/// no input for a whole `limit`: so at the earliest after `limit`, at the latest after
/// twice it.
async fn while_driver_moves<F: std::future::Future>(
    shared: &Shared,
    fut: F,
    limit: Duration,
) -> Option<F::Output> {
    use std::sync::atomic::Ordering::SeqCst;
    tokio::pin!(fut);
    let mut seen = shared.progress.load(SeqCst);
    loop {
        tokio::select! {
            out = &mut fut => return Some(out),
            () = tokio::time::sleep(limit) => {
                let now = shared.progress.load(SeqCst);
                if now == seen {
                    return None;
                }
                seen = now;
            }
        }
    }
}

struct Inner {
    peer: Peer,
    shared: Arc<Shared>,
    /// The application's calls, to the driver.
    cmds: queue::Sender<Cmd>,
}

/// One host ↔ server connection driven by the host rules of MCPL. Cheap to clone.
#[derive(Clone)]
pub struct HostSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HostSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSession")
            .field("label", &self.inner.shared.label.get())
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

/// Logs a diagnostic of the session labelled `label` (throttled per kind, [`Lost::log`]) and
/// queues it for the application.
/// The queue's capacity is the application's bound: one that finds it full is counted in
/// `lost`, and the count goes ahead of the next one that finds room
/// ([`HostDiagnostic::DiagnosticsDropped`]). The application's [`DiagnosticTap`], if any,
/// is told it first, with the received frame it was raised for (`tap`).
fn report_diag(
    label: &std::sync::OnceLock<String>,
    diags: &queue::Sender<HostDiagnostic>,
    lost: &Mutex<Lost>,
    tap: Option<(&DiagnosticTap, Option<RaisedFor>)>,
    d: HostDiagnostic,
) {
    // What the server chose is kept only in part (`session::DIAGNOSTIC_TEXT_BYTES`): each
    // diagnostic held, and logged, is bounded.
    let d = d.clipped();
    if let Some((tap, frame)) = tap {
        (tap.0)(&d, frame);
    }
    // Held across both sends (neither waits): the queue's order is the order taken here.
    let mut lost = lost.lock().unwrap_or_else(|e| e.into_inner());
    let logged = lost.log(label, &d);
    if lost.ended {
        // After the session's final count: delivered if there is room, but not counted
        // when there is none, as no later count would carry it; then it is logged even if
        // its kind's line was throttled, so it is never lost to both (what comes after the
        // end is bounded by what the connection still held).
        let line = (!logged).then(|| format!("{d:?}"));
        if diags.try_send(d).is_err() {
            if let Some(line) = line {
                tracing::warn!(
                    server = ?label.get(),
                    diagnostic = %line,
                    "mcpl host diagnostic (the diagnostics stream was full after the session ended)"
                );
            }
        }
        return;
    }
    if lost.count > 0 {
        let count = lost.count;
        if diags
            .try_send(HostDiagnostic::DiagnosticsDropped { count })
            .is_err()
        {
            lost.count += 1;
            return;
        }
        lost.count = 0;
    }
    if diags.try_send(d).is_err() {
        lost.count += 1;
    }
}

/// Delivers a count of dropped diagnostics that no later diagnostic carried
/// ([`report_diag`]), for a session that reports no more (its driver ended): at once if the
/// queue has room, else from a task that waits for the application to make room (it ends
/// when it has, or when the application drops its receiver), so ending the session never
/// waits on the application. A diagnostic reported after it (by the connection's forwarder,
/// for a frame the reader was still finishing) is queued if there is room, else only logged.
fn deliver_lost(diags: &queue::Sender<HostDiagnostic>, lost: &Mutex<Lost>) {
    let count = {
        let mut lost = lost.lock().unwrap_or_else(|e| e.into_inner());
        lost.ended = true;
        std::mem::take(&mut lost.count)
    };
    if count == 0 {
        return;
    }
    let d = HostDiagnostic::DiagnosticsDropped { count };
    if let Err(queue::TrySendError::Full(d)) = diags.try_send(d) {
        if tokio::runtime::Handle::try_current().is_ok() {
            let diags = diags.clone();
            tokio::spawn(async move {
                let _ = diags.send(d).await;
            });
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.peer.close();
    }
}

impl HostSession {
    /// Connects over `transport`: handshake, then the initial policy exchange (§5.3).
    pub async fn connect(
        transport: Transport,
        config: HostConfig,
    ) -> Result<(HostSession, HostStreams), HostError> {
        // Judged before the peer is built on `config.peer` (`prepare` judges it again, as
        // the peer's).
        let defects = config.defects();
        if !defects.is_empty() {
            return Err(HostError::InvalidConfig(defects));
        }
        let (peer, incoming) = Peer::new(transport, config.peer.clone());
        Self::connect_peer(peer, incoming, config).await
    }

    /// Like [`HostSession::connect`] over an existing peer and its incoming queue. The
    /// peer's own configuration is the one in force: it is what is judged (under
    /// `HostConfig.peer.…`) and read (its `request_timeout`), whatever `config.peer` holds.
    /// Once the configuration is accepted the connection's MCPL is the session's: every
    /// handle of `peer`, clones the caller kept included, refuses MCPL methods
    /// ([`Self::peer`]).
    pub async fn connect_peer(
        peer: Peer,
        incoming: crate::peer::Incoming,
        config: HostConfig,
    ) -> Result<(HostSession, HostStreams), HostError> {
        let (driver, session, streams, up_rx) = Self::prepare(peer, incoming, config)?;
        tokio::spawn(driver.run());
        match up_rx.await {
            Ok(Ok(())) => Ok((session, streams)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(driver::closed_error(&session.inner.peer)),
        }
    }

    /// The session over `peer` with its driver, not yet started, and the reply `connect`
    /// waits on: the configuration judged, nothing sent yet.
    #[allow(clippy::type_complexity)]
    fn prepare(
        peer: Peer,
        incoming: crate::peer::Incoming,
        config: HostConfig,
    ) -> Result<
        (
            Box<driver::Driver>,
            HostSession,
            HostStreams,
            tokio::sync::oneshot::Receiver<Result<(), HostError>>,
        ),
        HostError,
    > {
        // The host's own configuration must be usable before anything is sent, with the
        // peer's in force in place of `config.peer` (the peer may have been built with
        // another: `connect_peer`).
        let mut config = config;
        config.peer = peer.config().clone();
        let defects = config.defects();
        if !defects.is_empty() {
            return Err(HostError::InvalidConfig(defects));
        }
        let state = HostState::new(
            config.rules(),
            driver::clock_now(),
            std::time::SystemTime::now(),
        )
        .map_err(|e| match e {
            crate::session::RulesError::Policy(p) => HostError::Policy(p),
            // Not reached: `defects` above is this rule under the config's names.
            crate::session::RulesError::Invalid(d) => HostError::InvalidConfig(d),
        })?;
        let (etx, erx) = queue::weighted(config.event_capacity);
        // At least 2 (`HostConfig::defects`): a count of dropped diagnostics goes in beside
        // the diagnostic it precedes ([`report_diag`]).
        let (dtx, drx) = queue::channel(config.diagnostics_capacity);
        let (ctx, crx) = queue::channel(driver::COMMANDS_QUEUED);
        let shared = Arc::new(Shared {
            channel_limits: config.channel_limits(),
            config: Settings::of(config),
            label: Arc::new(std::sync::OnceLock::new()),
            snapshot: Mutex::new(Arc::new(Snapshot::of(&state))),
            gate: Mutex::new(()),
            queued: std::sync::atomic::AtomicUsize::new(0),
            held: std::sync::atomic::AtomicUsize::new(0),
            progress: std::sync::atomic::AtomicU64::new(0),
            calls: std::sync::atomic::AtomicU64::new(0),
            sweep: std::sync::atomic::AtomicBool::new(false),
            diags_lost: Arc::default(),
        });
        let streams = HostStreams {
            events: erx,
            diagnostics: drx,
        };

        // Connection diagnostics are forwarded from the start, as they are reported (no task
        // per session). The forwarder holds the queue weakly: the stream still ends when the
        // driver is gone.
        let label = shared.label.clone();
        let lost = shared.diags_lost.clone();
        let diags = dtx.downgrade();
        let tap = shared.config.diagnostic_tap.clone();
        // One the reader raised about a frame it was taking names it, as a session's does.
        peer.forward_diagnostics(move |d, at| {
            if let Some(diags) = diags.upgrade() {
                let d = HostDiagnostic::Connection(d);
                let raised = at.map(|(frame, entry)| RaisedFor { frame, entry });
                report_diag(&label, &diags, &lost, tap.as_ref().map(|t| (t, raised)), d);
            }
        });

        // From here MCPL on this connection is the session's, for every handle of the peer
        // (the caller of `connect_peer` may keep clones): §5.4, §6.
        peer.owned_by_session(outbound::peer_gate);

        let (up_tx, up_rx) = tokio::sync::oneshot::channel();
        let driver = Box::new(driver::Driver {
            state,
            out: peer.outbox(),
            peer: peer.clone(),
            incoming,
            cmds: crx,
            cmd_tx: ctx.downgrade(),
            shared: shared.clone(),
            events: etx,
            diags: dtx,
            connected: Some(up_tx),
            tasks: std::collections::HashMap::new(),
            on_wire: false,
        });
        let session = HostSession {
            inner: Arc::new(Inner {
                peer,
                shared,
                cmds: ctx,
            }),
        };
        Ok((driver, session, streams, up_rx))
    }

    /// The snapshot the driver published last (module docs).
    fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.shared.snapshot()
    }

    /// Queues an application call for the driver, counted until it is carried out:
    /// `Ok(false)` when the driver is gone; `Err` when the queue has no room, with the wait
    /// for it ([`HostSession::wait_for_room`]). Queued at once, no future holds the call
    /// (issue #24: the caller's future would hold it, and be copied with it).
    fn enqueue(&self, cmd: Cmd) -> Result<bool, Cmd> {
        let queued = &self.inner.shared.queued;
        queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // As `queue::Sender::send`'s first attempt: behind senders already waiting.
        match self.inner.cmds.try_send(cmd) {
            Ok(()) => Ok(true),
            Err(queue::TrySendError::Closed(_)) => {
                queued.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                Ok(false)
            }
            // Still counted: the wait takes the count over.
            Err(queue::TrySendError::Full(cmd)) => Err(cmd),
        }
    }

    /// Waits for room for `cmd`, already counted by [`HostSession::enqueue`]; `false` when
    /// the driver is gone. Boxed: only a full queue waits, and its state would size every
    /// call's future (issue #24).
    fn wait_for_room(
        &self,
        cmd: Cmd,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        /// Uncounts a call that was never queued, also when the caller stopped waiting.
        struct Counted<'a>(&'a std::sync::atomic::AtomicUsize, bool);
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
        // Held by the future from the start: one dropped before it is first polled uncounts too.
        let counted = Counted(&self.inner.shared.queued, false);
        Box::pin(async move {
            // The whole guard moves in (a closure would capture only the field it assigns).
            let mut counted = counted;
            counted.1 = self.inner.cmds.send(cmd).await.is_ok();
            counted.1
        })
    }

    /// [`HostSession::call`] for a call that waits on an exchange with the server: given up
    /// once the driver has carried out no input for that exchange's `timeout` plus
    /// [`DRIVER_GRACE`] (it is stuck writing to a server that stopped reading), with a
    /// [`PeerError::Timeout`] for `method` (id 0: nothing was sent); the driver, once free,
    /// drops the call unstarted (its caller is gone).
    async fn call_within<T>(
        &self,
        method: &str,
        timeout: Option<Duration>,
        make: impl FnOnce(Reply<T>) -> Cmd,
    ) -> Result<T, HostError> {
        // One call future, pinned here, whether or not it is bounded (issue #24: two would
        // each size the caller's future, and be copied with it).
        let call = self.call(make);
        tokio::pin!(call);
        let Some(timeout) = timeout else {
            return call.await;
        };
        let after = timeout + DRIVER_GRACE;
        match while_driver_moves(&self.inner.shared, call, after).await {
            Some(r) => r,
            None => Err(HostError::Peer(PeerError::Timeout {
                method: method.to_owned(),
                id: RequestId::from(0u64),
                after,
            })),
        }
    }

    /// [`HostSession::call`], given up like [`HostSession::call_within`] after the peer's
    /// `request_timeout` (as `method`'s timeout): bounded also for a server that stops
    /// reading while the driver holds too much to take calls. A call given up this way is
    /// not carried out when the driver reaches it, except a turn's or stream's end (§10.5,
    /// §14.3: owed either way) and an ontology's revocation (it only narrows, §16.5).
    /// Not an `async fn`: its future is [`HostSession::call_within`]'s, not one more layer
    /// holding `make` around it (issue #24: each layer sizes the caller's future).
    fn call_bounded<'a, T: 'a>(
        &'a self,
        method: &'a str,
        make: impl FnOnce(Reply<T>) -> Cmd + 'a,
    ) -> impl std::future::Future<Output = Result<T, HostError>> + 'a {
        let timeout = self.inner.shared.config.request_timeout;
        self.call_within(method, timeout, make)
    }

    /// Sends an application call to the driver and waits for its reply; a driver gone (the
    /// connection ended) is the close.
    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, HostError> {
        // From the peer's own tap, waiting for the driver could wait for this thread (the
        // driver publishes under the snapshot a tapped send holds): refused.
        if self.inner.peer.in_own_tap() {
            return Err(PeerError::SentFromTap.into());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let queued = match self.enqueue(make(tx)) {
            Ok(queued) => queued,
            Err(cmd) => self.wait_for_room(cmd).await,
        };
        if !queued {
            return Err(driver::closed_error(&self.inner.peer));
        }
        rx.await.map_err(|_| driver::closed_error(&self.inner.peer))
    }

    /// Sends a call whose end nobody awaits (a guard's drop): queued at once when there is
    /// room, else from a task once there is; lost only with the connection.
    fn call_detached(&self, cmd: Cmd) {
        let queued = &self.inner.shared.queued;
        queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.inner.cmds.try_send(cmd) {
            Ok(()) => {}
            Err(queue::TrySendError::Full(cmd))
                if tokio::runtime::Handle::try_current().is_ok() =>
            {
                let s = self.clone();
                tokio::spawn(async move {
                    if s.inner.cmds.send(cmd).await.is_err() {
                        s.inner
                            .shared
                            .queued
                            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
            Err(_) => {
                queued.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// Whether a plain request or notification must go through the driver to keep the
    /// application's calls in the order it made them: while a call queued for the driver
    /// before it has not been carried out (its frames queued), one sent straight through
    /// the peer could overtake it. The driver carries the call out after them, gated
    /// against the state in force then, as it does a call the queue had no room for.
    /// Before, such a call waited for a barrier through the driver and then went straight
    /// out: two trips through the driver where one does (a burst of calls beyond the
    /// queue's room paid both for each call).
    fn behind_driver(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let shared = &self.inner.shared;
        // `held` is set before a call's `queued` count is released: read after it.
        shared.queued.load(SeqCst) != 0 || shared.held.load(SeqCst) != 0
    }

    /// The session's mode.
    pub fn mode(&self) -> Mode {
        self.snapshot().mode.clone()
    }

    /// The server's label (`serverInfo.name`).
    pub fn label(&self) -> String {
        self.inner.shared.label.get().cloned().unwrap_or_default()
    }

    /// The grant currently in force (the only authority).
    pub fn grant(&self) -> Grant {
        self.snapshot().grant
    }

    /// Whether the initial policy exchange has completed (receipt or recorded decision).
    pub fn is_ready(&self) -> bool {
        self.snapshot().ready
    }

    /// Whether the server ended its output (EOF, a half-close; [`HostEvent::InputEnded`]):
    /// it sends nothing more, and the connection stays open only while the requests it made
    /// are still being answered.
    pub fn input_ended(&self) -> bool {
        self.snapshot().input_ended
    }

    /// The last usable receipt (testimony only).
    pub fn last_receipt(&self) -> Option<Receipt> {
        self.snapshot().last_receipt.as_deref().cloned()
    }

    /// The manifest currently in force and its recomputed revision.
    pub fn manifest(&self) -> Option<(Value, Option<String>)> {
        let snap = self.snapshot();
        snap.review
            .as_ref()
            .map(|r| (r.manifest_owned(), r.revision().map(str::to_owned)))
    }

    /// The last change receipt emitted (§17.6).
    pub fn last_change_receipt(&self) -> Option<ChangeReceipt> {
        let snap = self.snapshot();
        snap.review.as_ref().and_then(|r| r.last_receipt().cloned())
    }

    /// Accepts feature set `name`'s `tagOntology` as declared when the driver takes the call
    /// (§16.5), which may be a manifest change read after the application reviewed it
    /// (§17.5); a later change invalidates the acceptance. Returns its digest.
    #[deprecated(
        since = "0.1.0",
        note = "accepts whatever tagOntology is declared when the call is taken, which may not \
                be the one reviewed (§17.5); use `accept_reviewed_ontology(name, digest)`"
    )]
    pub async fn accept_ontology(
        &self,
        name: &str,
    ) -> Result<String, crate::manifest::review::ReviewError> {
        let name = name.to_owned();
        let missing = crate::manifest::review::ReviewError::NoOntology(name.clone());
        self.call_bounded("acceptOntology", |r| Cmd::AcceptOntology(name, r))
            .await
            .unwrap_or(Err(missing))
    }

    /// Accepts feature set `name`'s `tagOntology` (§16.5) if it is the one the application
    /// reviewed: accepted
    /// only while feature set `name` still declares the one whose digest
    /// ([`crate::manifest::digest::ontology_digest`]) is `reviewed`, judged where the driver
    /// takes the call, so a manifest change read meanwhile (§17.5) is never accepted in its
    /// place; otherwise [`HostError::OntologyChanged`] names the current one.
    pub async fn accept_reviewed_ontology(
        &self,
        name: &str,
        reviewed: &str,
    ) -> Result<String, HostError> {
        let (n, d) = (name.to_owned(), reviewed.to_owned());
        let r = self.call_bounded("acceptOntology", |r| Cmd::AcceptReviewed(n, d, r));
        r.await?.map_err(|current| HostError::OntologyChanged {
            name: name.to_owned(),
            current,
        })
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5): its `implies`
    /// edges stop applying to later messages. Returns the digest that was accepted, if any.
    /// A closed session is its error (nothing was revoked); so is a driver that did not
    /// take the call within `request_timeout`, though the revocation is still carried out
    /// when it does (it only narrows): either way never read as "nothing was accepted".
    pub async fn revoke_ontology(&self, name: &str) -> Result<Option<String>, HostError> {
        let name = name.to_owned();
        self.call_bounded("revokeOntology", |r| Cmd::RevokeOntology(name, r))
            .await
    }

    /// Sets the tag patterns the host's treatment rules reference, so a manifest change that
    /// drops a tag they name is reported as `ontology-reference-undeclared` (§17.6). A
    /// pattern that is malformed or can never match (§16.7) refuses the call whole with
    /// [`HostError::TagPatterns`], the patterns set before standing; a closed session is
    /// its error.
    pub async fn set_consumer_patterns<'a, I>(&self, patterns: I) -> Result<(), HostError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let patterns: Vec<String> = patterns.into_iter().map(str::to_owned).collect();
        self.call_bounded("setConsumerPatterns", |r| {
            Cmd::ConsumerPatterns(patterns, r)
        })
        .await?
    }

    /// The accepted ontology digest of feature set `name`, if any is standing.
    pub fn accepted_ontology(&self, name: &str) -> Option<String> {
        let snap = self.snapshot();
        snap.review
            .as_ref()
            .and_then(|r| r.accepted_ontology(name).map(str::to_owned))
    }

    /// The channels this connection has registered and the host accepted.
    pub fn channels(&self) -> Vec<String> {
        self.snapshot().channels.ids()
    }

    /// Each channel of [`Self::channels`] with the descriptor the host accepted and holds
    /// for it (§14.2, §14.5), in id order: what the host enforces, never a descriptor it
    /// refused (a duplicate, an invalid or unpermitted one).
    pub fn channel_descriptors(&self) -> Vec<(String, Value)> {
        let snap = self.snapshot();
        snap.channels
            .ids()
            .into_iter()
            .filter_map(|id| snap.channels.get(&id).cloned().map(|d| (id, d)))
            .collect()
    }

    /// The underlying peer: for MCP traffic outside MCPL's gating and the connection's
    /// lifecycle (`closed`, `close_reason`, `close`). What it sends is not seen by the
    /// session, so its send methods refuse every MCPL method (`channels/publish`,
    /// `featureSets/update` …) with [`PeerError::OwnedBySession`], naming the session
    /// method to use (§5.4, §6): [`Self::request_raw`], [`Self::notify_raw`] or a
    /// dedicated call, which gate it against the grant.
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// Fetches `mcpl/manifest` now (§17.4: a host MAY at any time) and reviews it; returns
    /// the change receipt its answer produced. It returns once the answer is applied: a
    /// reduction it prompted is then in flight (§6.7), told by the driver. Dropping the
    /// future does not cancel a fetch already sent: its answer is the session's (§17.5), so
    /// it is reviewed and applied whoever waits for it.
    pub async fn refresh_manifest(&self) -> Result<Option<ChangeReceipt>, HostError> {
        let timeout = self.inner.shared.config.manifest_timeout;
        self.call_within(ManifestFetch::NAME, Some(timeout), Cmd::Refresh)
            .await?
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.inner.peer.close();
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
