//! The host session: policy exchange, enforcement, hook fan-out, lifecycle and manifest
//! review over a live connection.
//!
//! [`HostSession::connect`] runs the MCP handshake from the host side (`initialize`
//! advertising MCPL under `capabilities.experimental.mcpl`, §5.2; `notifications/initialized`)
//! and then the initial policy exchange (§5.3): a `featureSets/update` **Request** carrying
//! the effective grant, sent even when nothing is enabled or disabled. Until its receipt
//! arrives every privileged inbound method is rejected with `-32002`.
//!
//! The session is the runtime driver of the pure core: the grant comes from
//! [`HostGrant::compute`], inbound methods are admitted by [`crate::session::admit`] (the
//! same rule [`crate::session::HostState`] and the checkers use), `push/event`,
//! `inference/request` and the initial policy decision by [`crate::session::rules`],
//! injections through [`policy::authorize_injection`], fetched manifests through
//! [`ManifestReview`] and the fetch rate through [`FetchLimiter`]. (Issue #24 moves the
//! rest of its decisions into `HostState`; channels, hooks, turns and manifest re-fetch are
//! still decided here.)
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
//!   rather than the whole message refused with `-32002`; an `updated` descriptor no longer
//!   permitted removes the channel.
//! - MCP `notifications/*/list_changed` and `channels/changed` produce a `surface-changed`
//!   receipt on the same event stream (§17.7).
//!
//! The application answers server-initiated `inference/request` and `model/info` through
//! [`HostConfig::request_handler`] (streamed ones through [`HostConfig::stream_handler`] and
//! a [`ChunkSink`]); [`before_inference`] fans a hook out over several
//! sessions; [`HostSession::start_turn`] returns a [`Turn`] guard for §10.5 lifecycle
//! emission and [`HostSession::outgoing_stream`] an [`OutgoingStream`] for §14.3;
//! [`HostSession::request`]/[`HostSession::notify`] are the gated outbound path; a
//! [`Supervisor`] keeps one server connected, re-dialling with a [`Backoff`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::capability::{Capability, Grant, PatternError};
use crate::jsonrpc::RequestId;
use crate::jsonrpc::{codes, ErrorObject, Notification};
use crate::manifest::review::{ChangeReceipt, FetchDecision, FetchLimiter, ManifestReview};
use crate::peer::{
    queue, CloseReason, IncomingMessage, IncomingRequest, Ordered, Peer, PeerConfig, PeerError,
    RequestOptions,
};
use crate::policy::{self, HostGrant, Receipt};
use crate::protocol::Method;
use crate::session::channels::{ChannelLimits, ChannelTable};
use crate::session::policy_state::{ChangeRefused, DisableRefused, Effects, HostPolicy};
use crate::session::rules::PolicyAnswer;
use crate::session::rules::PushVerdict;
pub use crate::session::Terminal;
use crate::session::{self, rules, InferenceIds, Receiver, Refusal};
use crate::transport::Transport;

mod supervisor;
pub use supervisor::{Backoff, Supervisor, SupervisorEvent, EVENT_CAPACITY};

mod channels;
mod config;
mod exchange;
mod fanout;
mod inbound;
mod outbound;
mod report;
mod review;
mod state;
mod turns;

pub use config::*;
pub use fanout::*;
pub use report::*;
use state::*;
pub use turns::*;

struct Inner {
    peer: Peer,
    /// The server's label; shared with the connection's diagnostics forwarder.
    label: Arc<std::sync::OnceLock<String>>,
    config: HostConfig,
    state: Mutex<State>,
    events: queue::Sender<HostEvent>,
    diags: queue::Sender<HostDiagnostic>,
    policy_lock: tokio::sync::Mutex<()>,
    mcpl_advertised: AtomicBool,
    /// The channel bounds and patterns of [`HostConfig`], read once.
    channel_limits: ChannelLimits,
    /// The session's own requests whose answers the dispatch loop applies where they are
    /// read ([`HostSession::exchange`]), by request id.
    waiters: Mutex<HashMap<RequestId, Waiter>>,
}

/// Applies the answer to one of the session's requests (see [`HostSession::exchange`]).
type Waiter = Box<dyn FnOnce(&HostSession, Result<Value, PeerError>) + Send>;

/// One host ↔ server connection driven by the host rules of MCPL. Cheap to clone.
#[derive(Clone)]
pub struct HostSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HostSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSession")
            .field("label", &self.inner.label.get())
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Logs a diagnostic of the session labelled `label` and queues it for the application
/// (dropped if the queue is full: its capacity is the application's bound).
fn report_diag(
    label: &std::sync::OnceLock<String>,
    diags: &queue::Sender<HostDiagnostic>,
    d: HostDiagnostic,
) {
    tracing::warn!(server = ?label.get(), diagnostic = ?d, "mcpl host diagnostic");
    let _ = diags.try_send(d);
}

impl Inner {
    fn diag(&self, d: HostDiagnostic) {
        report_diag(&self.label, &self.diags, d);
    }

    fn event(&self, e: HostEvent) -> bool {
        self.events.try_send(e).is_ok()
    }

    /// Delivers an event that has no answer to carry a refusal (a mode change, a manifest
    /// change receipt): one the queue has no room for is reported, not lost silently.
    fn event_or_report(&self, e: HostEvent) {
        let event = e.name();
        if !self.event(e) {
            self.diag(HostDiagnostic::EventDropped { event });
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
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
        let (peer, incoming) = Peer::new(transport, config.peer.clone());
        Self::connect_peer(peer, incoming, config).await
    }

    /// Like [`HostSession::connect`] over an existing peer and its incoming queue.
    pub async fn connect_peer(
        peer: Peer,
        incoming: crate::peer::Incoming,
        config: HostConfig,
    ) -> Result<(HostSession, HostStreams), HostError> {
        // The host's own policy must parse before anything is sent.
        let host_allows = Grant::from_patterns(config.policy.iter().map(String::as_str))?;
        let (etx, erx) = queue::channel(config.event_capacity);
        let (dtx, drx) = queue::channel(config.diagnostics_capacity);
        let channel_limits = config.channel_limits();
        let inner = Arc::new(Inner {
            peer: peer.clone(),
            label: Arc::new(std::sync::OnceLock::new()),
            state: Mutex::new(State {
                core: HostPolicy::new(
                    config.policy.clone(),
                    config.enabled.clone(),
                    config.disabled.clone(),
                ),
                seen_events: rules::Dedupe::default(),
                streams: InferenceIds::default(),
                turns: InferenceIds::default(),
                channels: ChannelTable::default(),
                limiter: FetchLimiter::new(
                    config.manifest_fetch_burst,
                    config.manifest_fetch_per_sec,
                ),
                announced: None,
            }),
            config,
            events: etx,
            diags: dtx,
            policy_lock: tokio::sync::Mutex::new(()),
            waiters: Mutex::new(HashMap::new()),
            channel_limits,
            mcpl_advertised: AtomicBool::new(false),
        });
        let streams = HostStreams {
            events: erx,
            diagnostics: drx,
        };

        // Connection diagnostics are forwarded from the start, as they are reported (no task
        // per session). The forwarder holds the queue weakly: the stream still ends when the
        // session is gone.
        let label = inner.label.clone();
        let diags = inner.diags.downgrade();
        peer.forward_diagnostics(move |d| {
            if let Some(diags) = diags.upgrade() {
                report_diag(&label, &diags, HostDiagnostic::Connection(d));
            }
        });

        // The dispatch loop runs from the start: anything privileged before the receipt is
        // rejected with -32002 by the readiness check (§5.3).
        let session = HostSession { inner };
        let weak = Arc::downgrade(&session.inner);
        tokio::spawn(Self::run_incoming(weak, incoming));

        let cfg = &session.inner.config;
        let init = rules::initialize_params(
            &host_allows,
            &cfg.protocol_version,
            &cfg.client_name,
            &cfg.client_version,
        );
        let result = peer
            .request_raw_with(
                "initialize",
                Some(init),
                RequestOptions::new().timeout(cfg.initialize_timeout),
            )
            .await?;
        let caps = result
            .get("capabilities")
            .filter(|c| c.is_object())
            .ok_or_else(|| HostError::BadInitialize("no capabilities object".into()))?;
        let label = result
            .pointer("/serverInfo/name")
            .and_then(Value::as_str)
            .unwrap_or("server")
            .to_owned();
        let _ = session.inner.label.set(label);
        // Counted before the manifest is copied or reviewed (§6.1 sets no number).
        if let Some(m) = caps.pointer("/experimental/mcpl") {
            within_feature_set_bound(m, cfg.max_feature_sets)?;
        }
        let manifest = caps.pointer("/experimental/mcpl").cloned();
        let now = SystemTime::now();

        match manifest {
            None => {
                // §3.3: MCP-only. Grant at most `tools`; no MCPL to configure, so it is final.
                session.inner.state().not_advertised(caps)?;
                peer.notify_raw("notifications/initialized", None).await?;
                Ok((session, streams))
            }
            Some(manifest) => {
                session.inner.mcpl_advertised.store(true, Ordering::SeqCst);
                let (review, findings) = ManifestReview::initial(
                    &manifest,
                    Some(caps),
                    cfg.policy.iter().map(String::as_str),
                    now,
                )
                .map_err(|e| match e {
                    crate::manifest::review::ReviewError::Policy(p) => HostError::Policy(p),
                    other => HostError::BadInitialize(other.to_string()),
                })?;
                for f in findings {
                    session.inner.diag(HostDiagnostic::ManifestFinding {
                        code: f.code,
                        path: f.path,
                        message: f.message,
                    });
                }
                let hg =
                    HostGrant::compute(review.advertised(), cfg.policy.iter().map(String::as_str))?;
                session.inner.state().review = Some(review);
                peer.notify_raw("notifications/initialized", None).await?;
                // `true` also when MCPL was suspended as the receipt applied (§17.5).
                let told_wider = session.initial_policy(hg).await?;
                if told_wider {
                    // The server was told a wider grant than the one now in force (a
                    // revocation, a suspension or a fallback the server did not name landed
                    // during the exchange): told again (§6.7), bounded by the policy timeout.
                    session.tell_reduction().await;
                }
                Ok((session, streams))
            }
        }
    }

    /// The session's mode.
    pub fn mode(&self) -> Mode {
        self.inner.state().mode.clone()
    }

    /// The server's label (`serverInfo.name`).
    pub fn label(&self) -> String {
        self.inner.label.get().cloned().unwrap_or_default()
    }

    /// The grant currently in force (the only authority).
    pub fn grant(&self) -> Grant {
        self.inner.state().grant
    }

    /// Whether the initial policy exchange has completed (receipt or recorded decision).
    pub fn is_ready(&self) -> bool {
        self.inner.state().ready
    }

    /// The last usable receipt (testimony only).
    pub fn last_receipt(&self) -> Option<Receipt> {
        self.inner.state().last_receipt.clone()
    }

    /// The manifest currently in force and its recomputed revision.
    pub fn manifest(&self) -> Option<(Value, Option<String>)> {
        let st = self.inner.state();
        st.review
            .as_ref()
            .map(|r| (r.manifest().clone(), r.revision().map(str::to_owned)))
    }

    /// The last change receipt emitted (§17.6).
    pub fn last_change_receipt(&self) -> Option<ChangeReceipt> {
        let st = self.inner.state();
        st.review.as_ref().and_then(|r| r.last_receipt().cloned())
    }

    /// Accepts feature set `name`'s `tagOntology` as currently declared (§16.5); a later
    /// manifest change to it invalidates the acceptance (§17.5). Returns its digest.
    pub fn accept_ontology(
        &self,
        name: &str,
    ) -> Result<String, crate::manifest::review::ReviewError> {
        let mut st = self.inner.state();
        match st.review.as_mut() {
            Some(r) => r.accept_ontology(name),
            None => Err(crate::manifest::review::ReviewError::NoOntology(
                name.to_owned(),
            )),
        }
    }

    /// Withdraws the acceptance of feature set `name`'s `tagOntology` (§16.5): its `implies`
    /// edges stop applying to later messages. Returns the digest that was accepted, if any.
    pub fn revoke_ontology(&self, name: &str) -> Option<String> {
        self.inner
            .state()
            .review
            .as_mut()
            .and_then(|r| r.revoke_ontology(name))
    }

    /// Sets the tag patterns the host's treatment rules reference, so a manifest change that
    /// drops a tag they name is reported as `ontology-reference-undeclared` (§17.6).
    pub fn set_consumer_patterns<'a, I>(&self, patterns: I)
    where
        I: IntoIterator<Item = &'a str>,
    {
        if let Some(r) = self.inner.state().review.as_mut() {
            r.set_consumer_patterns(patterns);
        }
    }

    /// The accepted ontology digest of feature set `name`, if any is standing.
    pub fn accepted_ontology(&self, name: &str) -> Option<String> {
        let st = self.inner.state();
        st.review
            .as_ref()
            .and_then(|r| r.accepted_ontology(name).map(str::to_owned))
    }

    /// The channels this connection has registered and the host accepted.
    pub fn channels(&self) -> Vec<String> {
        self.inner.state().channels.ids()
    }

    /// The underlying peer (for MCP traffic outside MCPL's gating).
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// The dispatch loop: every message and every answer to the session's own in-order
    /// requests, in wire order, one at a time (§5.3, §6.7). It holds the session weakly:
    /// dropping the last [`HostSession`] closes the connection instead of leaking it. When
    /// the connection ends, answers still awaited are failed as closed.
    async fn run_incoming(inner: std::sync::Weak<Inner>, mut incoming: crate::peer::Incoming) {
        while let Some(item) = incoming.recv_ordered().await {
            let Some(inner) = inner.upgrade() else {
                break;
            };
            let s = HostSession { inner };
            match item {
                Ordered::Response(r) => s.on_answer(r),
                // Boxed: the loop's task lives as long as the session, and its future is as
                // large as its largest state; a request to the host is rare next to the
                // idle time (issue #24: ≈ 1.7 KiB per idle session).
                Ordered::Message(IncomingMessage::Request(req)) => {
                    Box::pin(s.on_request(req)).await
                }
                Ordered::Message(IncomingMessage::Notification(n)) => s.on_notification(n),
            }
        }
        if let Some(inner) = inner.upgrade() {
            let s = HostSession { inner };
            let reason = s.inner.peer.close_reason().unwrap_or(CloseReason::Eof);
            let waiting: Vec<Waiter> = lock_waiters(&s.inner.waiters)
                .drain()
                .map(|(_, w)| w)
                .collect();
            for w in waiting {
                w(&s, Err(PeerError::Closed(reason.clone())));
            }
        }
    }

    /// The answer to one of the session's in-order requests, applied here, before the next
    /// message is handled.
    fn on_answer(&self, r: crate::jsonrpc::Response) {
        let Some(id) = r.id else {
            return self
                .inner
                .diag(HostDiagnostic::UnexpectedResponse { id: "null".into() });
        };
        let waiter = lock_waiters(&self.inner.waiters).remove(&id);
        match waiter {
            Some(w) => w(self, r.outcome.map_err(PeerError::Remote)),
            // Its deadline passed while the answer was queued: late, as the peer reports it.
            None => self.inner.diag(HostDiagnostic::Connection(
                crate::peer::Diagnostic::LateResponse { id },
            )),
        }
    }

    /// Sends `method` and has `apply` decide its answer where it is read: the dispatch loop
    /// calls it before it handles the next message, so what the answer changes (a receipt's
    /// grant, §5.3, §6.7) is in force for every later message, and a hook answer is judged
    /// under the grant current at its receipt (§5.4). Without an answer within `timeout`,
    /// `apply` gets the timeout (or the close) instead. Returns what `apply` returned; `Err`
    /// only when the session went away first.
    pub(super) async fn exchange<R: Send + 'static>(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        apply: impl FnOnce(&HostSession, Result<Value, PeerError>) -> R + Send + 'static,
    ) -> Result<R, PeerError> {
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let mut slot: Option<Waiter> = Some(Box::new(move |s, answer| {
            let _ = tx.send(apply(s, answer));
        }));
        let mut sent_as = None;
        let waiters = &self.inner.waiters;
        let sent = self
            .inner
            .peer
            .send_request(method, Some(params), |id| {
                if let Some(w) = slot.take() {
                    lock_waiters(waiters).insert(id.clone(), w);
                }
                sent_as = Some(id.clone());
            })
            .await;
        let id = match sent {
            Ok(id) => id,
            Err(e) => {
                let w = slot
                    .take()
                    .or_else(|| sent_as.and_then(|id| lock_waiters(waiters).remove(&id)));
                if let Some(w) = w {
                    w(self, Err(e));
                }
                return rx
                    .await
                    .map_err(|_| PeerError::Closed(CloseReason::Dropped));
            }
        };
        if let Ok(r) = tokio::time::timeout(timeout, &mut rx).await {
            return r.map_err(|_| PeerError::Closed(CloseReason::Dropped));
        }
        let w = lock_waiters(waiters).remove(&id);
        if let Some(w) = w {
            let reason = format!("timed out after {timeout:?}");
            self.inner.peer.forget(&id, &reason);
            let err = match self.inner.peer.close_reason() {
                Some(c) => PeerError::Closed(c),
                None => PeerError::Timeout {
                    method: method.to_owned(),
                    id: id.clone(),
                    after: timeout,
                },
            };
            w(self, Err(err));
        }
        rx.await
            .map_err(|_| PeerError::Closed(CloseReason::Dropped))
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.inner.peer.close();
    }
}

fn lock_waiters(
    m: &Mutex<HashMap<RequestId, Waiter>>,
) -> MutexGuard<'_, HashMap<RequestId, Waiter>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
