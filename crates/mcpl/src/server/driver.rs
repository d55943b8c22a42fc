//! The connection's driver (issue #24): one task owns the connection's
//! [`ServerState`](crate::session::ServerState), feeds it every input in wire order (the
//! host's messages and the responses to the server's own requests, as
//! [`Incoming::recv_ordered`] reads them; the application's calls and the handlers'
//! answers, as [`Command`]s; its deadlines) and executes what it outputs: frames through
//! the [`Peer`](crate::peer::Peer), handlers, turn callbacks, diagnostics. Handlers run
//! concurrently as before (a slow one never holds up the messages after it), and their
//! answers re-enter the state machine as [`Command::Answer`]; one that finishes without
//! waiting is answered inline, before the next message is read.
//!
//! What the application reads without a call (`Session::granted`, `Session::channels` …)
//! is a snapshot the driver publishes after each input it handles.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, StreamTx};
use super::dispatch::Answer;
use super::*;
use crate::jsonrpc::{Message, Request, RequestId, Response};
use crate::manifest::ManifestSnapshot;
use crate::peer::{
    queue, Alarm, CloseReason, Incoming, IncomingMessage, IncomingRequest, Ordered, Outbox,
    PeerError, Typed,
};
use crate::protocol::handshake::Initialize;
use crate::protocol::Method;
use crate::session::{ServerOutput, ServerRules, ServerState, Transmission};

/// The most commands fed at once before the outputs run (and the wire is read again).
const COMMAND_BATCH: usize = 256;

/// The most commands queued for the driver; a sender (an application call, a handler's
/// answer) waits for room.
pub(super) const COMMANDS_QUEUED: usize = 256;

/// An input for the driver from outside the wire.
pub(super) enum Command {
    /// The application sends request `method` ([`ServerState::request`]'s gate decides);
    /// its outcome goes to `reply`. With `stream`, the `inference/chunk`s of a streaming
    /// `inference/request` go there (§11.4).
    Request {
        method: &'static str,
        params: Value,
        reply: oneshot::Sender<Result<Value, SendError>>,
        stream: Option<StreamTx>,
        /// Told once the request is sent (dropped unsent when it is refused).
        accepted: Option<oneshot::Sender<()>>,
    },
    /// The handler running as `task` answered host request `id`.
    Answer {
        id: RequestId,
        /// The task that ran it: an answer from one no longer serving `id` (the host
        /// cancelled the request, then reused its id) answers nothing.
        task: tokio::task::Id,
        outcome: Answer,
        /// Its bytes, counted in flight until the driver has taken it (the outbox weighs
        /// it from then on, until it is queued).
        weight: crate::peer::AnswerWeight,
    },
    /// The connection's tracker installed a change (§17.3): it waits, merged with any
    /// other not yet taken, in `Conn::manifest_changed`.
    ManifestChanged,
    /// Replied to once every frame the driver took before it has left its outbox: a
    /// frame sent straight through the peer after the reply is written after them
    /// (`Session::in_order`).
    Barrier(oneshot::Sender<()>),
}

/// A request of the application's in flight.
struct Waiting {
    method: &'static str,
    reply: oneshot::Sender<Result<Value, SendError>>,
    /// The id the peer sent it under, once sent.
    peer_id: Option<RequestId>,
}

/// The one task of a connection (module docs).
pub(super) struct Driver {
    conn: Arc<Conn>,
    state: ServerState,
    /// Every frame the driver sends goes through it, so a host that does not read never
    /// stops the driver reading ([`Outbox`]).
    out: Outbox,
    incoming: Incoming,
    commands: queue::Receiver<Command>,
    /// The host request being fed now: answered in place, or kept in `requests` once
    /// handed out.
    current: Option<IncomingRequest>,
    /// Host requests handed out and not yet answered: the guard each answer goes through.
    requests: HashMap<RequestId, IncomingRequest>,
    /// The tasks of the handlers of those that did not finish at once (the MCP fallback's
    /// `initialize` among them), to stop one the host cancels and to know an answer from
    /// one that no longer serves its id.
    tasks: HashMap<RequestId, tokio::task::AbortHandle>,
    /// The application's requests in flight, by the state's id.
    waiting: HashMap<u64, Waiting>,
    /// The state's id of each request by the id the peer sent it under.
    by_peer: HashMap<RequestId, u64>,
    /// Streaming `inference/request`s, by the state's id.
    streams: HashMap<u64, StreamTx>,
    /// The manifest snapshot the connection's `initialize` was answered with.
    initialized_with: Option<Arc<ManifestSnapshot>>,
    /// The state's generation last published.
    published: Option<u64>,
    /// The host's `initialize`, handed to the MCP fallback and not yet answered: nothing
    /// after it is fed until it is (the host waits for it too). One more item is read
    /// meanwhile (`parked`), so the host's end of output is an input as soon as it is read.
    initializing: Option<RequestId>,
    /// The message read while `initializing`, fed once `initialize` is answered; reading
    /// stops while it waits (one message at most), and the driver ends if the connection
    /// closes meanwhile (the fallback's `initialize` is then stopped). The host's end of
    /// output behind it is not read until then, and need not be: the state may learn of it
    /// only after the parked message (wire order), and the driver's end waits for the
    /// pending `initialize` (in `requests`) or the close either way, as when the end comes
    /// right behind `initialize`; the close comes within the peer's EOF drain.
    parked: Option<Typed>,
    /// Barriers waiting for the frames taken before them: each with the number of the last
    /// ([`Outbox::sent`]), in order.
    barriers: std::collections::VecDeque<(u64, oneshot::Sender<()>)>,
    /// The state asked to close ([`ServerOutput::Close`]: a policy refused with
    /// `fallback: "close"`, §6.7): nothing more is read, and the connection is closed once
    /// what the outbox holds (that receipt among it) has been queued for the writer.
    closing: bool,
}

impl Driver {
    /// Boxed: the task's future then holds a pointer to the driver, not the driver itself
    /// (twice, as the argument and as the local it is moved into).
    pub(super) fn new(
        conn: Arc<Conn>,
        incoming: Incoming,
        commands: queue::Receiver<Command>,
    ) -> Box<Driver> {
        let server = &conn.server;
        // The state answers a request the host cancels `-32800` as it handles the cancel
        // (`ServerOutput::Cancelled`): the peer frees its id there (`Peer::answers_cancels`).
        conn.peer.answers_cancels();
        let h = &server.handlers;
        let config = &server.peer_config;
        // The manifest is the server's shared one (`ServerState::with_manifest`), not a
        // copy in the rules; `ServerBuilder::build` checked the identity by
        // `ServerRules::new`'s rule.
        let mut rules = ServerRules::unchecked(
            serde_json::to_value(&server.info).unwrap_or(Value::Null),
            Value::Null,
        );
        rules.mcp_capabilities = server.mcp_capabilities.clone();
        rules.instructions = server.instructions.clone();
        rules.required = server.required;
        rules.lifecycle = server.lifecycle;
        rules.hook_feature_set = h.before_inference.as_ref().and_then(|(s, _)| s.clone());
        rules.channels_list_by_application = h.channels_list.is_some();
        rules.initialize_by_application = h.fallback.is_some();
        // Each handler reads its params into its type (`dispatch::spawn_handler`).
        rules.application_checks_params = true;
        rules.max_in_flight = config.max_in_flight_requests;
        rules.request_timeout = config.request_timeout;
        rules.max_pending = config.max_pending_requests;
        let state =
            ServerState::with_manifest(rules, server.shared_manifest(&server.tracker.snapshot()));
        Box::new(Driver {
            out: conn.peer.outbox(),
            conn,
            state,
            incoming,
            commands,
            current: None,
            requests: HashMap::new(),
            tasks: HashMap::new(),
            waiting: HashMap::new(),
            by_peer: HashMap::new(),
            streams: HashMap::new(),
            initialized_with: None,
            published: None,
            initializing: None,
            parked: None,
            barriers: std::collections::VecDeque::new(),
            closing: false,
        })
    }

    fn now() -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }

    /// Runs until the connection ends. Its idle future is what an idle connection costs, so
    /// the end (which awaits the last writes) is boxed apart.
    pub(super) async fn run(mut self: Box<Self>) {
        let mut read_all = false;
        let mut alarm = Alarm::new();
        loop {
            if self.initializing.is_none() {
                if let Some(m) = self.parked.take() {
                    self.received(m);
                    self.publish();
                }
            }
            let closed = self.conn.peer.close_reason().is_some();
            // A message parked behind the fallback's `initialize` when the connection
            // closed: nothing more is read, so the end is not waited for.
            let ended = (read_all && (self.requests.is_empty() || closed))
                || (self.parked.is_some() && closed);
            if ended || self.closing {
                break;
            }
            alarm.want(self.state.poll_timeout());
            // Frames held for a host that reads slowly stop the application's calls (and
            // handlers' answers), and far more of them reading too; writing never does.
            // After the host's end of output they are taken again: a request is refused
            // without a frame (`SendRefusal::InputEnded`), where it waited to be taken
            // until the close; the answers behind it are owed (bounded by the in-flight
            // bounds), the rest adds no frame or one coalesced announcement.
            let taking = self.out.takes_calls() || self.state.input_ended();
            let reading = self.out.reads();
            tokio::select! {
                biased;
                Some(c) = self.commands.recv(), if taking => {
                    // Every command already queued is fed before the outputs run, so the
                    // changes a blocked write held up are announced as one (§17.8).
                    self.command(c);
                    for _ in 0..COMMAND_BATCH {
                        match self.commands.try_recv() {
                            Ok(c) => self.command(c),
                            Err(_) => break,
                        }
                    }
                    // A change whose wake-up found the queue full.
                    self.take_manifest_change();
                    self.outputs();
                }
                m = self.incoming.recv_typed(), if reading && !read_all && self.parked.is_none() => match m {
                    // Behind the fallback's `initialize`: fed once it is answered.
                    Some(m) if self.initializing.is_some() => self.parked = Some(m),
                    Some(m) => self.received(m),
                    // The host sends no more; what it is owed is still answered (the
                    // handlers' answers come as commands), unless the connection closed.
                    None => {
                        read_all = true;
                        self.input_ended();
                    }
                },
                _ = self.out.flush(), if !self.out.is_empty() => {}
                _ = self.conn.peer.closed(), if read_all || self.parked.is_some() => {}
                () = alarm.fired(), if alarm.is_armed() => {
                    self.state.handle_timeout(Self::now());
                    self.outputs();
                }
                () = self.conn.callers_gone.woken(), if !self.waiting.is_empty() => {
                    self.sweep_callers_gone();
                }
            }
            self.publish();
            self.release_barriers();
        }
        Box::pin(self.finish()).await;
    }

    /// Replies to the barriers whose frames have all left the outbox.
    fn release_barriers(&mut self) {
        let (_, left) = self.out.sent();
        while self.barriers.front().is_some_and(|(n, _)| *n <= left) {
            if let Some((_, reply)) = self.barriers.pop_front() {
                let _ = reply.send(());
            }
        }
    }

    fn received(&mut self, m: Typed) {
        let now = Self::now();
        let m = match m {
            Typed::Ordered(m) => m,
            Typed::Lifecycle(params) => {
                self.state.handle_lifecycle(now, params);
                return self.outputs();
            }
            Typed::PolicyUnread(form) => {
                self.state.handle_policy_unread_as(form);
                return self.outputs();
            }
        };
        match m {
            Ordered::Message(IncomingMessage::Request(mut req)) => {
                let request = req.take_request();
                if request.method == Initialize::NAME {
                    self.before_initialize();
                }
                self.current = Some(req);
                self.state.handle_message(now, Message::Request(request));
            }
            Ordered::Message(IncomingMessage::Notification(n)) => {
                self.state.handle_message(now, Message::Notification(n))
            }
            Ordered::Response(r) => {
                let Some(id) = r.id.as_ref().and_then(|p| self.by_peer.remove(p)) else {
                    // `send_request` responses only: the peer knows no other.
                    return;
                };
                let r = Response {
                    id: Some(RequestId::from(id)),
                    outcome: r.outcome,
                };
                self.state.handle_message(now, Message::Response(r));
            }
        }
        self.outputs();
        // Answered in place, or handed out (then kept in `requests`).
        drop(self.current.take());
    }

    /// The wire's input ended. At the host's end of output (EOF, a half-close, not a close:
    /// one is told when the driver ends) the state is told, the application with it
    /// (`input_ended`), and its requests still waiting fail now, as nothing can answer
    /// them: a handler waiting on one answers its own call at once, where it waited for
    /// the close and was stopped unanswered.
    fn input_ended(&mut self) {
        if !matches!(self.conn.peer.close_reason(), None | Some(CloseReason::Eof)) {
            return;
        }
        self.state.handle_eof(Self::now());
        self.outputs();
        self.streams.clear();
        for (_, w) in self.waiting.drain() {
            if let Some(peer_id) = &w.peer_id {
                self.by_peer.remove(peer_id);
                self.conn
                    .peer
                    .forget(peer_id, "the host ended its output before it answered");
            }
            let _ = w
                .reply
                .send(Err(SendError::Peer(PeerError::Closed(CloseReason::Eof))));
        }
    }

    /// The manifest `initialize` is answered with is the tracker's now: the connection is
    /// attached with exactly that snapshot (§17.10).
    fn before_initialize(&mut self) {
        if self.initialized_with.is_some() {
            return;
        }
        let snapshot = self.conn.tracker().snapshot();
        let shared = self.conn.server.shared_manifest(&snapshot);
        self.state.set_manifest(shared);
        self.initialized_with = Some(snapshot);
    }

    /// Feeds one command to the state (its outputs run after).
    fn command(&mut self, c: Command) {
        match c {
            // Its caller gave up waiting for the driver to take it (`Session::send_command`):
            // never sent.
            Command::Request { reply, .. } if reply.is_closed() => {}
            Command::Request {
                method,
                params,
                reply,
                stream,
                accepted,
            } => match self.state.request(Self::now(), method, params) {
                Ok(id) => {
                    if let Some(tx) = accepted {
                        let _ = tx.send(());
                    }
                    if let Some(tx) = stream {
                        self.streams.insert(id, tx);
                    }
                    self.waiting.insert(
                        id,
                        Waiting {
                            method,
                            reply,
                            peer_id: None,
                        },
                    );
                }
                Err(refusal) => {
                    let _ = reply.send(Err(super::state::refused(method, refusal)));
                }
            },
            Command::Answer {
                id,
                task,
                outcome,
                weight,
            } => {
                // Dropped once the answer is fed (the outbox weighs what it holds).
                let _weight = weight;
                if self.tasks.get(&id).map(tokio::task::AbortHandle::id) != Some(task) {
                    // Its request was cancelled (and answered `-32800`) after the handler
                    // finished; the host may have reused the id for a request now in flight,
                    // which this answer is not for.
                    tracing::debug!("the answer of a cancelled request {id} is not sent");
                    return;
                }
                self.tasks.remove(&id);
                if self.initializing.as_ref() == Some(&id) {
                    self.initializing = None;
                }
                self.feed_answer(id, outcome);
            }
            Command::ManifestChanged => self.take_manifest_change(),
            Command::Barrier(reply) => {
                // The frames of the commands fed before it go into the outbox first.
                self.outputs();
                self.barriers.push_back((self.out.sent().0, reply));
            }
        }
    }

    /// Feeds the tracker's change waiting in `Conn::manifest_changed`, if any (§17.3).
    fn take_manifest_change(&mut self) {
        let change = lock(&self.conn.manifest_changed).take();
        if let Some(change) = change {
            let snapshot = self.conn.tracker().snapshot();
            let shared = self.conn.server.shared_manifest(&snapshot);
            self.state.manifest_changed(shared, change);
        }
    }

    /// Executes every output, in order.
    /// Frames go through the outbox: nothing here waits.
    fn outputs(&mut self) {
        while let Some(out) = self.state.poll_output() {
            match out {
                ServerOutput::Transmit(Transmission::Message(Message::Response(r))) => {
                    if let Some(id) = r.id {
                        self.respond(id, Answer::Value(r.outcome));
                    }
                }
                ServerOutput::Transmit(Transmission::Result { id, result }) => {
                    self.respond(id, Answer::Encoded(result))
                }
                // Written only by `ServerState::handle_frame`, which this driver never calls
                // (its peer reads the frames): each answer through its request all the same.
                ServerOutput::Transmit(Transmission::Batch(answers)) => {
                    for r in answers {
                        if let Some(id) = r.id {
                            self.respond(id, Answer::Value(r.outcome));
                        }
                    }
                }
                ServerOutput::Transmit(Transmission::Message(Message::Request(r))) => {
                    self.send_request(r)
                }
                ServerOutput::Transmit(Transmission::Message(Message::Notification(n))) => {
                    if let Err(e) = self.out.notify(&n.method, n.params) {
                        tracing::debug!("{} not sent: {e}", n.method);
                    }
                }
                ServerOutput::Transmit(Transmission::Notification { method, params }) => {
                    if let Err(e) = self.out.notify_encoded(method, &params) {
                        tracing::debug!("{method} not sent: {e}");
                    }
                }
                ServerOutput::Request { id, method, params } => self.hand_out(id, method, params),
                ServerOutput::Cancelled { id, notification } => self.cancelled(id, notification),
                ServerOutput::Notification(n) => {
                    super::notifications::on_notification(&self.conn, n)
                }
                ServerOutput::Turn(ev) => self.conn.deliver_turn(ev),
                ServerOutput::InferenceChunk { id, chunk } => self.chunk(id, chunk),
                ServerOutput::Response { id, outcome } => {
                    // What the caller reads next (`Session::channels` …) is already this.
                    self.publish();
                    self.streams.remove(&id);
                    if let Some(w) = self.waiting.remove(&id) {
                        let out = outcome.map_err(|e| SendError::Peer(PeerError::Remote(e)));
                        let _ = w.reply.send(out);
                    }
                }
                ServerOutput::RequestTimedOut { id } => self.timed_out(id),
                ServerOutput::PolicyApplied { first, .. } => self.ready(first),
                // Its caller is failed where the input ends or the connection closes
                // (`input_ended`, `finish`), as `waiting` says: nothing to publish.
                ServerOutput::Diagnostic(ServerDiagnostic::RequestUnanswered { .. }) => {}
                ServerOutput::Diagnostic(d) => self.conn.diagnostic(d),
                // Closed in `finish`, after what the outbox holds: closing now would drop it.
                ServerOutput::Close => self.closing = true,
            }
        }
    }

    /// Writes the answer to host request `id` through its guard.
    fn respond(&mut self, id: RequestId, outcome: Answer) {
        let req = match self.current.take() {
            // Decided while its own message was fed (`initialize`, `ping`, the policy
            // receipt, a refusal …): written before anything the state outputs after it.
            Some(req) if *req.id() == id => req,
            // A handler's answer, or the application's (its MCP fallback's) `initialize`
            // answer.
            other => {
                self.current = other;
                let Some(req) = self.requests.remove(&id) else {
                    tracing::debug!("an answer to {id} has no request waiting");
                    return;
                };
                req
            }
        };
        let initialize = req.method() == Initialize::NAME;
        self.answer(req, outcome);
        if initialize {
            self.after_initialize();
        }
    }

    /// Writes the answer to `req` through its guard (it stays in flight until the answer
    /// is queued: [`Outbox::finish`]).
    fn answer(&mut self, req: IncomingRequest, outcome: Answer) {
        let written = match outcome {
            Answer::Value(outcome) => self.out.finish(req, outcome),
            Answer::Encoded(result) => self.out.finish_encoded(req, result),
        };
        if let Err(e) = written {
            tracing::debug!("response not sent: {e}");
        }
    }

    /// Feeds a handler's answer to host request `id` to the state machine.
    fn feed_answer(&mut self, id: RequestId, outcome: Answer) {
        let fed = match outcome {
            Answer::Value(outcome) => self.state.answer(id, outcome),
            Answer::Encoded(result) => self.state.answer_encoded(id, result),
        };
        if let Err(e) = fed {
            tracing::debug!("answer not sent: {e}");
        }
    }

    /// Once `initialize` is answered on an MCPL connection, attach it to its tracker with
    /// the snapshot it was answered with, so nothing is re-announced (§17.10).
    fn after_initialize(&mut self) {
        if !self.state.mcpl() {
            return;
        }
        if let Some(snapshot) = self.initialized_with.clone() {
            self.conn.attach_manifest(snapshot);
        }
    }

    fn send_request(&mut self, r: Request) {
        let Some(id) = state_id(&r.id) else { return };
        let sent = self.out.request(&r.method, r.params);
        match sent {
            Ok(peer_id) => {
                // The peer numbers what it writes, `Session::send_mcp_request`s included:
                // the host names a stream by this id (§11.4).
                self.state.sent_as(id, peer_id.clone());
                if let Some(w) = self.waiting.get_mut(&id) {
                    w.peer_id = Some(peer_id.clone());
                }
                self.by_peer.insert(peer_id, id);
            }
            Err(e) => {
                // Given up here: the state gives it up at its deadline, unanswered.
                self.streams.remove(&id);
                if let Some(w) = self.waiting.remove(&id) {
                    let _ = w.reply.send(Err(SendError::Peer(e)));
                }
            }
        }
    }

    /// The caller of request `id` went away unanswered (its future dropped: a handler the
    /// host cancelled, a caller's own timeout): the host is told (MCP
    /// `notifications/cancelled`, after the request's own frame) and the request
    /// forgotten, so its answer, if one comes, is reported late by the peer
    /// ([`crate::peer::Diagnostic::LateResponse`]), as a timed-out one's is. Before, it
    /// stayed in flight until its deadline, the host was never told, and its answer went
    /// nowhere unreported.
    fn abandon(&mut self, id: u64) {
        let Some(w) = self.waiting.remove(&id) else {
            return;
        };
        self.streams.remove(&id);
        self.state.abandon(id);
        if let Some(peer_id) = &w.peer_id {
            self.by_peer.remove(peer_id);
            self.out
                .cancel(peer_id, "the server no longer waits for the answer");
        }
    }

    /// Abandons each request whose caller went away ([`Self::abandon`]), once told one did
    /// (`caller::CallersGone`): the requests in flight are looked at once per caller gone,
    /// never at a wake for anything else.
    fn sweep_callers_gone(&mut self) {
        if !self.conn.callers_gone.take() {
            return;
        }
        let gone: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.reply.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.abandon(id);
        }
        self.outputs();
    }

    fn timed_out(&mut self, id: u64) {
        self.streams.remove(&id);
        let Some(w) = self.waiting.remove(&id) else {
            return;
        };
        let after = self
            .conn
            .server
            .peer_config
            .request_timeout
            .unwrap_or_default();
        let peer_id = w.peer_id.unwrap_or_else(|| RequestId::from(id));
        self.by_peer.remove(&peer_id);
        self.conn
            .peer
            .forget(&peer_id, &format!("timed out after {after:?}"));
        let _ = w.reply.send(Err(SendError::Peer(PeerError::Timeout {
            method: w.method.to_owned(),
            id: peer_id,
            after,
        })));
    }

    fn chunk(&mut self, id: u64, chunk: crate::protocol::inference::InferenceChunkParams) {
        let Some(tx) = self.streams.get(&id) else {
            return;
        };
        let request_id = chunk.request_id.clone();
        // Bounded (§11.4 sets no number): a chunk its reader has no room for, or no longer
        // reads, is dropped and reported, never held without bound.
        let reason = match tx.try_send(chunk) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(_)) => Some("full"),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // The application dropped its `InferenceStream`: reported once, and the
                // rest of the stream's chunks go nowhere (its final result still comes).
                self.streams.remove(&id);
                Some("closed")
            }
        };
        if let Some(reason) = reason {
            self.conn
                .diagnostic(ServerDiagnostic::InferenceChunkDropped { request_id, reason });
        }
    }

    /// A policy Request was accepted and its receipt written (§5.3): the ready moments.
    fn ready(&mut self, first: bool) {
        let h = &self.conn.server.handlers;
        let first = h.first_ready.clone().filter(|_| first);
        let every = h.ready.clone();
        if first.is_none() && every.is_none() {
            return;
        }
        // What the handlers read (`Session::granted` …) is this grant, whichever worker
        // runs them first.
        self.publish();
        {
            let mut run = lock(&self.conn.ready_run);
            if run.running {
                // One run at a time (`Conn::ready_run`): the one running calls `on_ready`
                // once more when it ends, and that call reads this grant or a later one.
                run.again = true;
                return;
            }
            run.running = true;
        }
        let session = Session::of(self.conn.clone());
        tokio::spawn(async move {
            let mut run = ReadyRun {
                conn: session.conn.clone(),
                ended: false,
            };
            // A handler that panics is the author's mistake, reported as any handler's
            // (`HandlerPanicked`); the run goes on (the next handler, a call owed).
            let caught = |name: &'static str, fut: super::BoxFut<()>| {
                use futures_util::FutureExt;
                let conn = session.conn.clone();
                std::panic::AssertUnwindSafe(fut)
                    .catch_unwind()
                    .map(move |r| {
                        if r.is_err() {
                            conn.diagnostic(ServerDiagnostic::HandlerPanicked {
                                method: name.to_owned(),
                            });
                        }
                    })
            };
            if let Some(first) = first {
                caught("on_first_ready", first(session.clone())).await;
            }
            if let Some(every) = every {
                loop {
                    caught("on_ready", every(session.clone())).await;
                    if !run.again() {
                        break;
                    }
                }
            }
            run.end();
        });
    }

    /// A host request the state handed out: to its handler (or the fallback).
    fn hand_out(&mut self, id: RequestId, method: String, params: Option<Value>) {
        let mut typed = None;
        if let Some(mut req) = self.current.take() {
            if *req.id() == id {
                typed = req.take_tools_call();
                self.requests.insert(id.clone(), req);
            } else {
                self.current = Some(req);
            }
        }
        let initialize = method == Initialize::NAME;
        let params = match typed {
            Some(call) => super::dispatch::Params::ToolsCall(call),
            None => super::dispatch::Params::Value(params),
        };
        let handled = super::dispatch::on_request(&self.conn, id.clone(), &method, params);
        match handled {
            super::dispatch::Handled::Now(outcome) => self.feed_answer(id, outcome),
            super::dispatch::Handled::Later(task) => {
                if initialize {
                    self.initializing = Some(id.clone());
                }
                self.tasks.insert(id, task);
            }
        }
    }

    /// The host cancelled request `id` (MCP `notifications/cancelled`): the state answered
    /// it `-32800` (written through its guard just before, which freed its in-flight slot),
    /// so its handler's task is stopped at its next `.await`. The MCP fallback, if any, gets
    /// the notification, for a request of its own it keeps.
    fn cancelled(&mut self, id: RequestId, notification: crate::jsonrpc::Notification) {
        if let Some(task) = self.tasks.remove(&id) {
            task.abort();
        }
        if let Some(f) = self.conn.fallback() {
            f.notification(&notification.method, notification.params);
        }
    }

    /// Publishes what the sync getters read, when it changed.
    fn publish(&mut self) {
        let st = &self.state;
        if self.published == Some(st.generation()) {
            return;
        }
        self.published = Some(st.generation());
        let now = GrantState {
            initialized: st.is_initialized(),
            mcpl: st.mcpl(),
            ready: st.is_ready(),
            grant: st.grant(),
            feature_sets: st.feature_sets(),
        };
        self.conn.grant_tx.send_if_modified(|g| {
            let changed = *g != now;
            if changed {
                *g = now;
            }
            changed
        });
        let channels = st.channels();
        self.conn.channels.send_if_modified(|c| {
            let changed = *c != channels;
            if changed {
                *c = channels;
            }
            changed
        });
        if !st.mcpl() && st.is_initialized() {
            // Not an MCPL connection (§3.2, or turned MCP-only, §6.7): nothing to announce.
            self.conn.detach();
        }
    }

    async fn finish(mut self: Box<Self>) {
        // What it still held (the last answers) goes out first, within the write timeout.
        // Nothing more is sent meanwhile: the application's calls are refused at once
        // rather than left waiting to be taken until the drain ends (a host that ended
        // its output and reads nothing holds it for the whole drain limit).
        let reason = match (self.conn.peer.close_reason(), self.closing) {
            (Some(reason), _) => reason,
            (None, true) => CloseReason::Local,
            // The driver ends unclosed only once the host's input ended.
            (None, false) => CloseReason::Eof,
        };
        let mut barriers = Vec::new();
        {
            let Driver { out, commands, .. } = &mut *self;
            let drain = out.drain();
            tokio::pin!(drain);
            loop {
                tokio::select! {
                    biased;
                    () = &mut drain => break,
                    Some(c) = commands.recv() => match c {
                        Command::Request { reply, .. } => {
                            let _ = reply.send(Err(SendError::Peer(PeerError::Closed(reason.clone()))));
                        }
                        Command::Barrier(reply) => barriers.push(reply),
                        // No request waits for it (the driver ends with none), and no
                        // announcement goes out on an ending connection.
                        Command::Answer { .. } | Command::ManifestChanged => {}
                    },
                }
            }
        }
        // Every frame taken before them has left the outbox (written, or dropped with it).
        for reply in barriers {
            let _ = reply.send(());
        }
        if self.closing {
            // The writer writes what is queued before it shuts the transport down.
            self.conn.peer.close();
        }
        self.release_barriers();
        // The host's requests still with their handlers can no longer be answered: the
        // handlers stop at their next `.await`, as a cancelled request's do.
        for (_, task) in self.tasks.drain() {
            task.abort();
        }
        self.state.handle_close(Self::now());
        self.outputs();
        self.conn.detach();
        let reason = self
            .conn
            .peer
            .close_reason()
            .unwrap_or(CloseReason::Dropped);
        for (_, w) in self.waiting.drain() {
            let _ = w
                .reply
                .send(Err(SendError::Peer(PeerError::Closed(reason.clone()))));
        }
        self.streams.clear();
        drop(lock(&self.conn.fallback).take());
        // Last: the turn ends above may still read it.
        self.conn.user_state.end();
    }
}

/// The ready handlers' run of one connection, ended however it ends (a panicking handler
/// included): another may start.
struct ReadyRun {
    conn: Arc<Conn>,
    ended: bool,
}

impl ReadyRun {
    /// Whether policy Requests were accepted while `on_ready` ran (it runs once more);
    /// if not, the run ends, under the same lock the driver reads it with.
    fn again(&mut self) -> bool {
        let mut run = lock(&self.conn.ready_run);
        if std::mem::take(&mut run.again) {
            return true;
        }
        run.running = false;
        self.ended = true;
        false
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            *lock(&self.conn.ready_run) = super::conn::ReadyRunState::default();
        }
    }
}

impl Drop for ReadyRun {
    fn drop(&mut self) {
        self.end();
    }
}

/// The state's id of a request it transmitted.
fn state_id(id: &RequestId) -> Option<u64> {
    match id {
        RequestId::Number(n) => n.as_u64(),
        RequestId::String(_) => None,
    }
}
