//! [`Server`] and what one connection shares between its driver, its [`Session`] handles
//! and its handler tasks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, watch};

use super::builder::Handlers;
use super::conn_state::StateSlot;
use super::driver::{Command, Driver};
use super::*;
use crate::capability::CapabilitySet;
use crate::lifecycle::{LifecycleConfig, TurnEvent};
use crate::manifest::{
    ConnectionId, ManifestChanged, ManifestSink, ManifestSnapshot, ManifestTracker,
};
use crate::peer::{queue, CloseReason, Peer, PeerConfig};
use crate::policy::Fallback;
use crate::protocol::channels::ChannelDescriptor;
use crate::protocol::handshake::Implementation;
use crate::protocol::inference::InferenceChunkParams;
use crate::session::SharedManifest;
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
    /// Whether `initialize` declares `capabilities.tools`.
    pub(super) declares_tools: bool,
    /// Whether it declares `tools.listChanged: true`: the tools may change at runtime and
    /// each change is told (`false` when the author stated `listChanged: false`).
    pub(super) tells_tool_changes: bool,
    /// Whether an [`McpFallback`](super::McpFallback)'s `initialize` result that names no
    /// `tools` gets `tools: {}` (the builder advertises `tools` and the author declared none).
    pub(super) fallback_adds_tools: bool,
    /// The last tracker snapshot a connection was given, with its manifest and declarations
    /// shared ([`SharedManifest`]): every connection serving that snapshot holds the same
    /// copy (one per snapshot, not per connection: an idle connection's memory, issue #20).
    pub(super) shared_manifest: std::sync::Mutex<Option<(Arc<ManifestSnapshot>, SharedManifest)>>,
}

impl ServerInner {
    /// `snapshot`'s manifest, shared with the connections given the same snapshot.
    pub(super) fn shared_manifest(&self, snapshot: &Arc<ManifestSnapshot>) -> SharedManifest {
        let mut cached = lock(&self.shared_manifest);
        if let Some((s, shared)) = cached.as_ref() {
            if Arc::ptr_eq(s, snapshot) {
                return shared.clone();
            }
        }
        let shared = SharedManifest::new(snapshot.manifest().clone());
        *cached = Some((snapshot.clone(), shared.clone()));
        shared
    }
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
        // Its driver reads `Incoming::recv_typed`, and answers the policy Request itself.
        peer.read_lifecycle_typed();
        peer.take_policy_past_busy();
        if self.inner.handlers.fallback.is_none() {
            // No fallback takes `tools/call` as a `Value` (`dispatch::on_request`).
            peer.read_tools_call_typed();
        }
        let (grant_tx, _) = watch::channel(GrantState::inert());
        let (commands, command_rx) = queue::channel(super::driver::COMMANDS_QUEUED);
        let conn = Arc::new(Conn {
            server: self.inner.clone(),
            peer: peer.clone(),
            commands,
            callers_gone: Arc::default(),
            manifest_changed: Mutex::new(None),
            grant_tx,
            channels: watch::Sender::new(Vec::new()),
            diag_tx: std::sync::OnceLock::new(),
            fallback: Mutex::new(None),
            user_state: StateSlot::new(),
            own_tracker: std::sync::OnceLock::new(),
            attached: Mutex::new(Attachment::default()),
            author_mistakes: AtomicU64::new(0),
            warned: Mutex::new(Some(Vec::new())),
            notification_slots: Arc::new(tokio::sync::Semaphore::new(
                self.inner.peer_config.max_in_flight_requests.max(1),
            )),
            notification_bytes: Arc::new(tokio::sync::Semaphore::new(notification_byte_limit(
                &self.inner.peer_config,
            ))),
            ready_run: Mutex::new(ReadyRunState::default()),
        });
        // The reader's diagnostics reach the session's stream from the start, as the host's
        // do (`HostDiagnostic::Connection`); the peer logs each already. Held weakly: the
        // peer must not keep its connection alive.
        let weak = Arc::downgrade(&conn);
        peer.forward_diagnostics(move |d, _| {
            if let Some(conn) = weak.upgrade() {
                conn.stream_diagnostic(ServerDiagnostic::Connection(d));
            }
        });
        let session = Session::of(conn.clone());
        if let Some(factory) = &self.inner.handlers.fallback {
            *lock(&conn.fallback) = Some(factory(session.clone()));
        }
        if self.inner.tells_tool_changes {
            super::tools::spawn_list_changed(&conn);
        }
        tokio::spawn(Driver::new(conn, incoming, command_rx).run());
        session
    }

    /// Serves one connection over `transport` until it ends and everything owed has been
    /// written ([`Peer::finished`]), and returns why it ended.
    ///
    /// Nothing needs subscribing to see the server author's mistakes: each one (a refused
    /// send, a dropped injection, a panicking handler …, see [`DiagnosticKind`]) is logged
    /// through `tracing` at `warn` as it happens, and a connection that had any ends with a
    /// `warn` line counting them; with no `tracing` subscriber installed at all, those lines
    /// go to stderr instead. To read the count, or every diagnostic, use
    /// [`Self::start`] with [`Session::author_mistakes`] and [`Session::diagnostics`].
    pub async fn serve(&self, transport: Transport) -> CloseReason {
        let session = self.start(transport);
        let reason = session.conn.peer.finished().await;
        let mistakes = session.author_mistakes();
        if mistakes > 0 {
            let server = self.inner.info.name.as_str();
            tracing::warn!(
                server,
                "connection ended ({reason}) after {mistakes} mistake(s) of the server's code \
                 were reported on it; the warnings before this say what to change"
            );
            unrouted_warning(format_args!(
                "{server}: connection ended ({reason}) after {mistakes} mistake(s) of the \
                 server's code were reported on it"
            ));
        }
        reason
    }
}

/// Writes an author-mistake warning to stderr when no `tracing` subscriber is in force
/// (none installed, globally or for this thread): `tracing` alone would drop it, and a
/// server author who installed none would never hear of the mistake. With any subscriber,
/// even one whose filter hides `warn`, `tracing` alone carries it. Stderr, never stdout,
/// which may carry the stdio transport.
fn unrouted_warning(line: std::fmt::Arguments<'_>) {
    let unrouted =
        tracing::dispatcher::get_default(|d| d.is::<tracing::subscriber::NoSubscriber>());
    if unrouted {
        // Not `eprintln!`, which panics when stderr is closed (a host that closed the
        // pipe): a warning that cannot be written is dropped, never a panic.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "mcpl: warning: {line} (no tracing subscriber is installed; install one to route \
             the library's diagnostics)"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------------------

/// The connection's place in its manifest tracker: attached (with the id), detached for
/// good (no more announcements: the connection ended or turned MCP-only, §3.2), or not yet.
#[derive(Debug, Default)]
pub(super) struct Attachment {
    pub(super) id: Option<ConnectionId>,
    pub(super) ended: bool,
}

pub(super) type StreamTx = mpsc::Sender<InferenceChunkParams>;

/// What one connection shares between its driver ([`Driver`]: the one task that owns the
/// session's state, `session::ServerState`), its [`Session`] handles and its handler tasks.
/// No session state is kept here: the application's calls reach the driver as
/// [`Command`]s, and what the sync getters read is a snapshot the driver publishes after
/// each input it handles (`grant_tx`, `channels`).
pub(super) struct Conn {
    pub(super) server: Arc<ServerInner>,
    pub(super) peer: Peer,
    /// The driver's inputs from the application and from handler tasks, bounded
    /// ([`COMMANDS_QUEUED`](super::driver::COMMANDS_QUEUED)): an application call waits for
    /// room, as a handler's answer does.
    pub(super) commands: queue::Sender<Command>,
    /// Marked when a caller of one of the server's own requests goes away unanswered
    /// ([`super::caller::Reply`]): the driver sweeps its requests in flight then, not at
    /// every wake.
    pub(super) callers_gone: Arc<super::caller::CallersGone>,
    /// The tracker's changes not yet taken by the driver, merged into one (§17.8: they are
    /// announced coalesced anyway), so the tracker's callback never waits and never drops;
    /// [`Command::ManifestChanged`] wakes the driver for it.
    pub(super) manifest_changed: Mutex<Option<ManifestChanged>>,
    /// The negotiated state, as the driver last published it.
    pub(super) grant_tx: watch::Sender<GrantState>,
    /// The channels the host accepted (§14.5), as the driver last published them.
    pub(super) channels: watch::Sender<Vec<ChannelDescriptor>>,
    /// Made at the first [`Session::diagnostics`] call (a broadcast allocates its 256 slots
    /// up front); before it, nobody could receive a diagnostic, and `tracing` still logs it.
    pub(super) diag_tx: std::sync::OnceLock<broadcast::Sender<ServerDiagnostic>>,
    /// The connection's [`McpFallback`], if the server has one; dropped when the connection
    /// ends (it holds a [`Session`], so keeping it would keep the connection alive).
    pub(super) fallback: Mutex<Option<Arc<dyn McpFallback>>>,
    /// The application's state for this connection ([`ServerBuilder::connection_state`]),
    /// made on first use, dropped when the driver ends.
    pub(super) user_state: StateSlot,
    /// This connection's own manifest tracker once [`Session::own_manifest`] has forked
    /// the server's; never set on a connection that does not ask.
    pub(super) own_tracker: std::sync::OnceLock<Arc<ManifestTracker>>,
    /// The connection's place in its tracker, changed by the driver (attach after
    /// `initialize`, detach) and by [`Session::own_manifest`] (the fork), so they cannot
    /// interleave: tracker bookkeeping, not session state.
    pub(super) attached: Mutex<Attachment>,
    /// How many [`DiagnosticKind::AuthorMistake`] diagnostics this connection reported.
    pub(super) author_mistakes: AtomicU64,
    /// Digests of the author mistakes already logged at `warn` (repeats go to `debug`);
    /// at most [`WARNED_BOUND`], after which one more `warn` says so and every new one goes
    /// to `debug` too (`None` once said): a mistake's text may be the host's choice (a
    /// feature set a call names), and it must not buy one `warn` line per message.
    pub(super) warned: Mutex<Option<Vec<u64>>>,
    /// The notification handlers that may run at once on this connection
    /// ([`PeerConfig::max_in_flight_requests`], 128 by default): each admitted host
    /// notification with a handler takes one for as long as its handler runs; one that finds
    /// none is not handled and is reported ([`ServerDiagnostic::NotificationDropped`]).
    /// A notification has no id and no answer, so the peer's in-flight bound never sees it:
    /// without this, a host flooding them at a slow handler grew one task each, unbounded.
    pub(super) notification_slots: Arc<tokio::sync::Semaphore>,
    /// The bytes of notifications those handlers may hold at once
    /// ([`PeerConfig::max_in_flight_bytes`]): each takes what its params hold parsed
    /// ([`crate::jsonrpc::held_bytes`], capped at the limit) for as long as its handler
    /// runs; one that finds too few is not handled and is reported
    /// ([`ServerDiagnostic::NotificationDroppedBytes`]).
    pub(super) notification_bytes: Arc<tokio::sync::Semaphore>,
    /// Whether the ready handlers ([`ServerBuilder::on_first_ready`],
    /// [`ServerBuilder::on_ready`]) run now, and whether a policy Request was accepted
    /// since `on_ready` last started: at most one run per connection, so a host flooding
    /// accepted `featureSets/update` Requests (each answered at once) no longer starts a
    /// task each while `on_ready` is slow.
    pub(super) ready_run: Mutex<ReadyRunState>,
}

/// See [`Conn::ready_run`].
#[derive(Debug, Default)]
pub(super) struct ReadyRunState {
    /// A run of the ready handlers is under way.
    pub(super) running: bool,
    /// A policy Request was accepted while it ran: `on_ready` runs once more.
    pub(super) again: bool,
}

/// How many distinct author-mistake messages a connection logs at `warn`.
const WARNED_BOUND: usize = 64;

/// How [`Conn::first_warning`] logs an author mistake.
enum Warning {
    /// At `warn`: not logged there on this connection yet.
    First,
    /// At `debug`, after one `warn` saying the connection's bound is reached.
    Bounded,
    /// At `debug`: logged at `warn` before, or past the bound.
    Repeat,
}

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
        let mut at = lock(&self.attached);
        if at.ended || at.id.is_some() {
            return;
        }
        at.id = Some(self.tracker().attach_snapshot(self.sink(), initialized));
    }

    /// Detaches the connection from its tracker for good: no more announcements.
    pub(super) fn detach(&self) {
        let mut at = lock(&self.attached);
        at.ended = true;
        if let Some(id) = at.id.take() {
            self.tracker().detach(id);
        }
    }

    /// The connection's own tracker, forked from the server's on the first call
    /// ([`Session::own_manifest`]): it starts from the server's installed snapshot (shared,
    /// not copied), and an attached connection moves to it with the baseline it was last
    /// told about, so the fork itself announces nothing.
    pub(super) fn own_manifest(self: &Arc<Self>) -> &Arc<ManifestTracker> {
        let mut at = lock(&self.attached);
        if let Some(own) = self.own_tracker.get() {
            return own;
        }
        let shared = &self.server.tracker;
        let id = at.id.take();
        let announced = id.and_then(|id| {
            let revision = shared.announced_revision(id);
            shared.detach(id);
            revision
        });
        let own = self.own_tracker.get_or_init(|| Arc::new(shared.fork()));
        if id.is_some() && !at.ended {
            // An unknown baseline ("") is told the current revision with every domain.
            at.id = Some(own.attach(self.sink(), announced.as_deref().unwrap_or("")));
        }
        own
    }

    fn sink(self: &Arc<Self>) -> Arc<dyn ManifestSink> {
        let weak: Weak<Conn> = Arc::downgrade(self);
        Arc::new(move |change: ManifestChanged| {
            if let Some(c) = weak.upgrade() {
                // The driver declares it and announces it, coalesced (§17.3, §17.8).
                let mut slot = lock(&c.manifest_changed);
                match slot.as_mut() {
                    Some(waiting) => {
                        waiting.revision = change.revision;
                        for d in change.domains {
                            if !waiting.domains.contains(&d) {
                                waiting.domains.push(d);
                            }
                        }
                    }
                    None => {
                        *slot = Some(change);
                        drop(slot);
                        // A wake-up; when the queue is full the driver is about to take
                        // commands anyway, and takes the slot with them.
                        let _ = c.commands.try_send(Command::ManifestChanged);
                    }
                }
            }
        })
    }

    /// Reports `d`: logged through `tracing` by its [`DiagnosticKind`] (an author mistake
    /// at `warn` and counted), and sent to every [`Session::diagnostics`] receiver.
    pub(super) fn diagnostic(&self, d: ServerDiagnostic) {
        let d = d.clipped();
        let server = self.server.info.name.as_str();
        let (kind, code, detail) = (d.kind(), d.code(), d.detail());
        match kind {
            DiagnosticKind::AuthorMistake => {
                self.author_mistakes.fetch_add(1, Ordering::Relaxed);
                match self.first_warning(code, &detail) {
                    Warning::First => {
                        tracing::warn!(server, code, "{detail}");
                        unrouted_warning(format_args!("{server}: {code}: {detail}"));
                    }
                    Warning::Bounded => {
                        let more = format!(
                            "more than {WARNED_BOUND} distinct author mistakes on this \
                             connection: the rest are logged at debug (each is counted, \
                             Session::author_mistakes, and sent to Session::diagnostics)"
                        );
                        tracing::warn!(server, "{more}");
                        unrouted_warning(format_args!("{server}: {more}"));
                        tracing::debug!(server, code, "{detail}");
                    }
                    Warning::Repeat => tracing::debug!(server, code, "{detail}"),
                }
            }
            DiagnosticKind::PeerDefect | DiagnosticKind::Notice => {
                tracing::info!(server, code, "{detail}")
            }
        }
        self.stream_diagnostic(d);
    }

    /// Puts `d` on the session's diagnostics stream (if anyone subscribed), not logged.
    pub(super) fn stream_diagnostic(&self, d: ServerDiagnostic) {
        if let Some(tx) = self.diag_tx.get() {
            let _ = tx.send(d.clipped());
        }
    }

    /// Whether this author mistake is logged at `warn` on this connection: the first time
    /// (remembered, within [`WARNED_BOUND`]), never again, and, once that many were, no new
    /// one either ([`Warning::Bounded`] the first time, to say so).
    fn first_warning(&self, code: &str, detail: &str) -> Warning {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (code, detail).hash(&mut h);
        let digest = h.finish();
        let mut slot = lock(&self.warned);
        let Some(warned) = slot.as_mut() else {
            return Warning::Repeat;
        };
        if warned.contains(&digest) {
            Warning::Repeat
        } else if warned.len() < WARNED_BOUND {
            warned.push(digest);
            Warning::First
        } else {
            *slot = None;
            Warning::Bounded
        }
    }

    pub(super) fn grant_state(&self) -> GrantState {
        self.grant_tx.borrow().clone()
    }

    pub(super) fn fallback(&self) -> Option<Arc<dyn McpFallback>> {
        lock(&self.fallback).clone()
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
}

/// [`Conn::notification_bytes`]' permits: [`PeerConfig::max_in_flight_bytes`], at least 1,
/// within what a semaphore and one acquisition (`u32`) hold.
pub(super) fn notification_byte_limit(config: &PeerConfig) -> usize {
    config.max_in_flight_bytes.clamp(1, u32::MAX as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::Capability;
    use crate::policy::FeatureSets;

    /// Connections given the same tracker snapshot share one manifest and one parse of its
    /// declarations (issue #20: an idle connection's memory); a new snapshot gets its own,
    /// with exactly its manifest and declarations (§17.10: each connection serves the
    /// snapshot it was attached with).
    #[test]
    fn connections_of_one_snapshot_share_its_manifest_and_a_new_snapshot_gets_its_own() {
        let server = Server::builder("shared", "1")
            .feature_set("alerts", "Alerts", &[Capability::PushEvents])
            .build()
            .unwrap();
        let inner = &server.inner;
        let first = inner.shared_manifest(&inner.tracker.snapshot());
        let again = inner.shared_manifest(&inner.tracker.snapshot());
        assert!(std::ptr::eq(first.manifest(), again.manifest()));
        assert!(Arc::ptr_eq(first.declarations(), again.declarations()));
        assert!(first.declarations().sets.contains_key("alerts"));

        let mut next = inner.tracker.snapshot().manifest().clone();
        next["featureSets"]["more"] =
            serde_json::json!({"description": "More", "uses": ["pushEvents"]});
        inner.tracker.set_manifest(next).unwrap();
        let snapshot = inner.tracker.snapshot();
        let changed = inner.shared_manifest(&snapshot);
        assert!(!std::ptr::eq(first.manifest(), changed.manifest()));
        assert_eq!(changed.manifest(), snapshot.manifest());
        assert_eq!(
            **changed.declarations(),
            FeatureSets::from_mcpl(snapshot.manifest()).0
        );
        assert!(changed.declarations().sets.contains_key("more"));
        // The first snapshot's holders keep theirs.
        assert!(!first.declarations().sets.contains_key("more"));
    }
}
