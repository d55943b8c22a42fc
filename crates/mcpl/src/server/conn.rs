//! [`Server`] and the per-connection state shared by the dispatcher and the senders.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, watch};

use super::builder::Handlers;
use super::conn_state::StateSlot;
use super::dispatch::run;
use super::*;
use crate::capability::CapabilitySet;
use crate::jsonrpc::RequestId;
use crate::lifecycle::{LifecycleConfig, LifecycleTracker, TurnEvent};
use crate::manifest::{
    ConnectionId, ManifestChanged, ManifestSink, ManifestSnapshot, ManifestTracker,
};
use crate::peer::{CloseReason, Peer, PeerConfig};
use crate::policy::{Fallback, FeatureSets, ServerPolicyState};
use crate::protocol::handshake::Implementation;
use crate::protocol::inference::InferenceChunkParams;
use crate::session::{AcceptedChannels, PendingAnnouncement, ReadyMoments};
use crate::transport::Transport;

pub(super) struct ServerInner {
    pub(super) info: Implementation,
    pub(super) instructions: Option<String>,
    pub(super) mcp_capabilities: Map<String, Value>,
    pub(super) tracker: Arc<ManifestTracker>,
    pub(super) handlers: Handlers,
    pub(super) lifecycle: LifecycleConfig,
    pub(super) peer_config: PeerConfig,
    pub(super) required: Option<(CapabilitySet, Fallback)>,
    /// The tools `tools/list` and `tools/call` read; changed at runtime by
    /// [`Server::add_tool`] and its siblings.
    pub(super) tools: super::tools::Tools,
    /// Whether `initialize` declares `capabilities.tools` (with `listChanged`).
    pub(super) declares_tools: bool,
}

/// A built server: cheap to clone, serves any number of connections, all sharing one
/// [`ManifestTracker`] (a connection may leave it for its own, [`Session::own_manifest`]),
/// one handler table and one tool registry; what belongs to one connection lives in its
/// [`ServerBuilder::connection_state`].
#[derive(Clone)]
pub struct Server {
    pub(super) inner: Arc<ServerInner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.info.name)
            .field("tracker", &self.inner.tracker)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts a builder (same as [`ServerBuilder::new`]).
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder::new(name, version)
    }

    /// The manifest tracker: change the manifest with typed operations through
    /// [`ManifestTracker::edit`] (a mistake, such as removing a set that is not declared, is
    /// an error and changes nothing), or with raw JSON through
    /// [`ManifestTracker::set_manifest`] / [`ManifestTracker::transaction`], and every
    /// attached connection is told with one `mcpl/manifestChanged` (§17.3).
    pub fn tracker(&self) -> &Arc<ManifestTracker> {
        &self.inner.tracker
    }

    /// Starts serving one connection over `transport` (must run inside a tokio runtime) and
    /// returns its [`Session`]; the session runs until the connection ends.
    pub fn start(&self, transport: Transport) -> Session {
        let (peer, incoming) = Peer::new(transport, self.inner.peer_config.clone());
        let (grant_tx, _) = watch::channel(GrantState::inert());
        let decls = FeatureSets::from_mcpl(self.inner.tracker.snapshot().manifest()).0;
        let conn = Arc::new(Conn {
            server: self.inner.clone(),
            peer: peer.clone(),
            state: Mutex::new(ConnState {
                phase: Phase::New,
                mcpl: false,
                policy: ServerPolicyState::new(decls),
                lifecycle: LifecycleTracker::new(self.inner.lifecycle),
                tracker_id: None,
                channels: AcceptedChannels::default(),
                held: None,
                ready: ReadyMoments::default(),
            }),
            grant_tx,
            diag_tx: std::sync::OnceLock::new(),
            announce: Mutex::new(PendingAnnouncement::default()),
            announce_wake: watch::Sender::new(()),
            streams: Mutex::new(HashMap::new()),
            channel_ops: tokio::sync::Mutex::new(()),
            fallback: Mutex::new(None),
            user_state: StateSlot::new(),
            own_tracker: std::sync::OnceLock::new(),
            attach: Mutex::new(()),
            author_mistakes: AtomicU64::new(0),
            warned: Mutex::new(Vec::new()),
        });
        spawn_announcer(&conn);
        let session = Session { conn: conn.clone() };
        if let Some(factory) = &self.inner.handlers.fallback {
            *lock(&conn.fallback) = Some(factory(session.clone()));
        }
        super::tools::spawn_list_changed(&conn);
        tokio::spawn(run(conn, incoming));
        session
    }

    /// Serves one connection over `transport` until it ends and everything owed has been
    /// written ([`Peer::finished`]), and returns why it ended.
    ///
    /// Nothing needs subscribing to see the server author's mistakes: each one (a refused
    /// send, a dropped injection, a panicking handler …, see [`DiagnosticKind`]) is logged
    /// through `tracing` at `warn` as it happens, and a connection that had any ends with a
    /// `warn` line counting them. To read the count, or every diagnostic, use
    /// [`Self::start`] with [`Session::author_mistakes`] and [`Session::diagnostics`].
    pub async fn serve(&self, transport: Transport) -> CloseReason {
        let session = self.start(transport);
        let reason = session.conn.peer.finished().await;
        let mistakes = session.author_mistakes();
        if mistakes > 0 {
            tracing::warn!(
                server = self.inner.info.name.as_str(),
                "connection ended ({reason}) after {mistakes} mistake(s) of the server's code \
                 were reported on it; the warnings before this say what to change"
            );
        }
        reason
    }
}

/// Sends the connection's pending `mcpl/manifestChanged` ([`Conn::announce`]) whenever one
/// is set, until the connection ends. Changes made while a send waits (a host that does not
/// read) are coalesced into the next one.
fn spawn_announcer(conn: &Arc<Conn>) {
    let mut wake = conn.announce_wake.subscribe();
    let peer = conn.peer.clone();
    let weak: Weak<Conn> = Arc::downgrade(conn);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = wake.changed() => if r.is_err() { return },
                _ = peer.closed() => return,
            }
            let Some(conn) = weak.upgrade() else { return };
            let change = lock(&conn.announce).take();
            drop(conn);
            let Some(change) = change else { continue };
            if let Err(e) = peer
                .notify_raw(ManifestChanged::METHOD, serde_json::to_value(&change).ok())
                .await
            {
                tracing::debug!("mcpl/manifestChanged not sent: {e}");
                return;
            }
        }
    });
}

// ---------------------------------------------------------------------------------------
// Connection state
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    New,
    Initialized,
}

pub(super) struct ConnState {
    pub(super) phase: Phase,
    pub(super) mcpl: bool,
    pub(super) policy: ServerPolicyState,
    pub(super) lifecycle: LifecycleTracker,
    pub(super) tracker_id: Option<ConnectionId>,
    /// The channels the host accepted from this connection's `channels/register` and
    /// `channels/changed` (§14.5 itemized results), by the core rule.
    pub(super) channels: AcceptedChannels,
    /// The state in force before a policy Request whose receipt is not yet on the wire:
    /// what is published meets it, so a narrowing reaches senders at once and a widening
    /// (readiness included) only once the receipt is written ahead of them (§5.3, §6.7).
    pub(super) held: Option<GrantState>,
    /// Whether the connection had its first ready moment ([`ServerBuilder::on_first_ready`]).
    pub(super) ready: ReadyMoments,
}

pub(super) type StreamTx = mpsc::Sender<InferenceChunkParams>;

pub(super) struct Conn {
    pub(super) server: Arc<ServerInner>,
    pub(super) peer: Peer,
    pub(super) state: Mutex<ConnState>,
    pub(super) grant_tx: watch::Sender<GrantState>,
    /// Made at the first [`Session::diagnostics`] call (a broadcast allocates its 256 slots
    /// up front); before it, nobody could receive a diagnostic, and `tracing` still logs it.
    pub(super) diag_tx: std::sync::OnceLock<broadcast::Sender<ServerDiagnostic>>,
    /// The `mcpl/manifestChanged` not yet handed to the peer, coalesced by the core rule
    /// ([`PendingAnnouncement`], §17.8).
    pub(super) announce: Mutex<PendingAnnouncement>,
    /// Wakes the connection's announcer task ([`spawn_announcer`]) after `announce` was set.
    pub(super) announce_wake: watch::Sender<()>,
    pub(super) streams: Mutex<HashMap<RequestId, StreamTx>>,
    /// Held across each `channels/register` / `channels/changed` exchange, so they go out
    /// one at a time and their results are applied in the order the host applied them. An
    /// unanswered change holds the next one until it is answered or times out
    /// (`PeerConfig::request_timeout`).
    pub(super) channel_ops: tokio::sync::Mutex<()>,
    /// The connection's [`McpFallback`], if the server has one; dropped when the connection
    /// ends (it holds a [`Session`], so keeping it would keep the connection alive).
    pub(super) fallback: Mutex<Option<Arc<dyn McpFallback>>>,
    /// The application's state for this connection ([`ServerBuilder::connection_state`]),
    /// made on first use, dropped by [`Conn::finish`].
    pub(super) user_state: StateSlot,
    /// This connection's own manifest tracker once [`Session::own_manifest`] has forked
    /// the server's; never set on a connection that does not ask.
    pub(super) own_tracker: std::sync::OnceLock<Arc<ManifestTracker>>,
    /// Held while the connection is attached to, moved between or detached from a tracker,
    /// so `initialize`'s attach and a fork cannot interleave.
    pub(super) attach: Mutex<()>,
    /// How many [`DiagnosticKind::AuthorMistake`] diagnostics this connection reported.
    pub(super) author_mistakes: AtomicU64,
    /// Digests of the author mistakes already logged at `warn` (repeats go to `debug`);
    /// at most [`WARNED_BOUND`], after which every new one is logged at `warn`.
    pub(super) warned: Mutex<Vec<u64>>,
}

/// How many distinct author-mistake messages a connection remembers having logged.
const WARNED_BOUND: usize = 64;

impl Conn {
    /// The tracker this connection's manifest comes from: its own after a fork
    /// ([`Session::own_manifest`]), else the server's.
    pub(super) fn tracker(&self) -> &Arc<ManifestTracker> {
        self.own_tracker.get().unwrap_or(&self.server.tracker)
    }

    /// The connection's state as `T` ([`StateSlot::get`]).
    pub(super) fn state<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.user_state
            .get(self.server.handlers.connection_state.as_ref())
    }

    /// Attaches the connection to its tracker with `initialized`, the snapshot its
    /// `initialize` carried, so nothing is re-announced (§17.10).
    pub(super) fn attach_manifest(self: &Arc<Self>, initialized: Arc<ManifestSnapshot>) {
        let _order = lock(&self.attach);
        let id = self.tracker().attach_snapshot(self.sink(), initialized);
        lock(&self.state).tracker_id = Some(id);
    }

    /// Detaches the connection from its tracker: no more announcements.
    pub(super) fn detach(&self) {
        let _order = lock(&self.attach);
        let id = lock(&self.state).tracker_id.take();
        if let Some(id) = id {
            self.tracker().detach(id);
        }
    }

    /// The connection's own tracker, forked from the server's on the first call
    /// ([`Session::own_manifest`]): it starts from the server's installed snapshot (shared,
    /// not copied), and an attached connection moves to it with the baseline it was last
    /// told about, so the fork itself announces nothing.
    pub(super) fn own_manifest(self: &Arc<Self>) -> &Arc<ManifestTracker> {
        let _order = lock(&self.attach);
        if let Some(own) = self.own_tracker.get() {
            return own;
        }
        let shared = &self.server.tracker;
        let id = lock(&self.state).tracker_id.take();
        let announced = id.and_then(|id| {
            let revision = shared.announced_revision(id);
            shared.detach(id);
            revision
        });
        let own = self.own_tracker.get_or_init(|| Arc::new(shared.fork()));
        if id.is_some() {
            // An unknown baseline ("") is told the current revision with every domain.
            let id = own.attach(self.sink(), announced.as_deref().unwrap_or(""));
            let mut st = lock(&self.state);
            if st.mcpl {
                st.tracker_id = Some(id);
            } else {
                // Turned MCP-only meanwhile (§6.7 refusal): no more announcements.
                drop(st);
                own.detach(id);
            }
        }
        own
    }

    fn sink(self: &Arc<Self>) -> Arc<dyn ManifestSink> {
        let weak: Weak<Conn> = Arc::downgrade(self);
        Arc::new(move |change: ManifestChanged| {
            if let Some(c) = weak.upgrade() {
                c.on_manifest_changed(change);
            }
        })
    }

    /// Reports `d`: logged through `tracing` by its [`DiagnosticKind`] (an author mistake
    /// at `warn` and counted), and sent to every [`Session::diagnostics`] receiver.
    pub(super) fn diagnostic(&self, d: ServerDiagnostic) {
        let server = self.server.info.name.as_str();
        let (kind, code, detail) = (d.kind(), d.code(), d.detail());
        match kind {
            DiagnosticKind::AuthorMistake => {
                self.author_mistakes.fetch_add(1, Ordering::Relaxed);
                if self.first_warning(code, &detail) {
                    tracing::warn!(server, code, "{detail}");
                } else {
                    tracing::debug!(server, code, "{detail}");
                }
            }
            DiagnosticKind::PeerDefect | DiagnosticKind::Notice => {
                tracing::info!(server, code, "{detail}")
            }
        }
        if let Some(tx) = self.diag_tx.get() {
            let _ = tx.send(d);
        }
    }

    /// Whether this author mistake has not been logged at `warn` on this connection yet
    /// (and remembers it, within [`WARNED_BOUND`]).
    fn first_warning(&self, code: &str, detail: &str) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (code, detail).hash(&mut h);
        let digest = h.finish();
        let mut warned = lock(&self.warned);
        if warned.contains(&digest) {
            return false;
        }
        if warned.len() < WARNED_BOUND {
            warned.push(digest);
        }
        true
    }

    pub(super) fn publish(&self, st: &ConnState) {
        let state = Self::state_of(st);
        let state = match &st.held {
            Some(held) => state.meet(held),
            None => state,
        };
        self.grant_tx.send_replace(state);
    }

    pub(super) fn state_of(st: &ConnState) -> GrantState {
        GrantState {
            initialized: st.phase != Phase::New,
            mcpl: st.mcpl,
            ready: st.policy.is_ready(),
            grant: *st.policy.grant(),
            feature_sets: st.policy.statuses(),
        }
    }

    pub(super) fn grant_state(&self) -> GrantState {
        self.grant_tx.borrow().clone()
    }

    pub(super) fn fallback(&self) -> Option<Arc<dyn McpFallback>> {
        lock(&self.fallback).clone()
    }

    /// A manifest change on the live connection, by the core rules
    /// ([`declare_changed`](crate::session::declare_changed) and
    /// [`PendingAnnouncement`], as `ServerState::manifest_changed` decides it).
    pub(super) fn on_manifest_changed(&self, change: ManifestChanged) {
        {
            let mut st = lock(&self.state);
            crate::session::declare_changed(&mut st.policy, self.tracker().snapshot().manifest());
            self.publish(&st);
        }
        lock(&self.announce).offer(change);
        self.announce_wake.send_replace(());
    }

    pub(super) fn deliver_turn(&self, ev: TurnEvent) {
        let h = &self.server.handlers;
        match ev {
            TurnEvent::Started(s) => {
                if let Some(f) = &h.turn_start {
                    f(self, &s)
                }
            }
            TurnEvent::Ended(e) => {
                if let Some(f) = &h.turn_end {
                    f(self, &e)
                }
            }
        }
    }

    pub(super) fn expire_turns(&self) {
        let now = tokio::time::Instant::now().into_std();
        let ends = lock(&self.state).lifecycle.expire(now);
        for e in ends {
            self.deliver_turn(TurnEvent::Ended(e));
        }
    }

    pub(super) fn next_deadline(&self) -> Option<tokio::time::Instant> {
        lock(&self.state)
            .lifecycle
            .next_deadline()
            .map(tokio::time::Instant::from_std)
    }

    pub(super) fn finish(&self) {
        let now = tokio::time::Instant::now().into_std();
        let ends = lock(&self.state).lifecycle.close_all(now);
        self.detach();
        drop(lock(&self.fallback).take());
        for e in ends {
            self.deliver_turn(TurnEvent::Ended(e));
        }
        lock(&self.streams).clear();
        // Last: the turn ends above may still read it.
        self.user_state.end();
    }
}
