//! The driver: one task per connection owns the [`HostState`] and feeds it in wire order
//! (messages and the answers to its own requests from [`Incoming::recv_ordered`], timer
//! ticks from [`HostState::poll_timeout`], the application's calls from the command queue),
//! then carries out its outputs: frames through the [`Peer`], events and diagnostics into
//! the [`HostStreams`] queues, requests to the application's handlers (spawned, so a slow
//! handler never holds the connection; their answers come back as commands).
//!
//! Readings:
//! - The snapshot the getters read is published after each input, before that input's
//!   outputs are carried out: an application that saw an event sees the state after it.
//! - Nothing here waits on the application: events go into their bounded queue only as far
//!   as [`HostState::set_event_room`] said there was room (a `push/event` past it is
//!   answered `host_busy`, as before); a full diagnostics queue drops (counted).
//! - When the connection ends, every request of ours still waiting is expired at once
//!   (as if its deadline had passed): a policy change ends not activated, a hook fails
//!   open, a fetch fails; `connect` still waiting fails with the close reason.

use std::collections::HashMap;
use tokio::sync::oneshot;

use super::*;
use crate::jsonrpc::{Message, Request, Response};
use crate::manifest::review::ReviewError;
use crate::peer::{Alarm, Incoming, Outbox};
use crate::session::rules::HookVerdict;
use crate::session::{ConnectError, HostOutput, HostState, StateError, Transmission};

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
#[path = "driver_waiting.rs"]
mod waiting;
use waiting::{ended_of, Waiting};

/// A reply to the application.
pub(super) type Reply<T> = oneshot::Sender<T>;

/// The most application calls queued for the driver; a caller waits for room.
pub(super) const COMMANDS_QUEUED: usize = 256;

/// An application call, fed to the state machine in the order the driver takes it.
pub(super) enum Cmd {
    SetPolicy(Vec<String>, Reply<Result<PolicyChange, HostError>>),
    Disable(Vec<String>, Reply<Result<(), HostError>>),
    Refresh(RefreshReply),
    /// A hook's params, its number ([`Shared::calls`], named by a [`Cmd::Forget`]) and reply.
    Hook(Value, u64, Reply<Option<HookVerdict>>),
    StartTurn {
        inference_id: std::sync::Arc<str>,
        conversation_id: String,
        turn_index: u64,
        reply: Reply<Result<(), HostError>>,
    },
    EndTurn {
        inference_id: std::sync::Arc<str>,
        terminal: Terminal,
        usage: Option<Value>,
        reply: Option<Reply<Result<(), HostError>>>,
    },
    StartStream {
        inference_id: String,
        conversation_id: Option<String>,
        reply: Reply<Result<(), HostError>>,
    },
    StreamChunk {
        inference_id: String,
        channel_id: String,
        delta: String,
        reply: Reply<Result<(), HostError>>,
    },
    StreamComplete {
        inference_id: String,
        channel_id: String,
        reply: Reply<Result<(), HostError>>,
    },
    EndStream {
        inference_id: String,
        reply: Option<Reply<Result<(), HostError>>>,
    },
    Chunk {
        id: RequestId,
        /// The hand-out of `id` whose handler sends it ([`Driver::tasks`]).
        handout: u64,
        delta: String,
        reply: Reply<Result<(), HostError>>,
    },
    Answer {
        id: RequestId,
        /// The hand-out of `id` whose handler answers ([`Driver::tasks`]).
        handout: u64,
        outcome: Result<Value, ErrorObject>,
        /// The request's method.
        method: String,
        /// Whether the handler panicked (reported as [`HostDiagnostic::HandlerPanicked`]).
        panicked: bool,
    },
    /// A notification of the application's (method, params) the peer's queue had no room
    /// for: gated and queued in one step ([`HostState::notify`]).
    Notify(String, Value, Reply<Result<(), HostError>>),
    /// A request of the application's sent by the state machine ([`HostState::request`]):
    /// a `channels/open` or `channels/close`, whose confirmed answer changes the channels
    /// where it is read, in wire order (`session::ChannelLifecycle`), or one the peer's
    /// queue had no room for, gated and queued in one step.
    Request {
        method: String,
        params: Value,
        /// Its number ([`Shared::calls`]), which names it in a [`Cmd::Forget`].
        call: u64,
        reply: Reply<Result<Value, HostError>>,
    },
    /// The caller of [`Cmd::Request`] or [`Cmd::Hook`] `call` gave up (its future was
    /// dropped): the request is cancelled on the wire and forgotten
    /// ([`HostState::abandon_request`]), unless its answer was already received
    /// (`Driver::give_up`: then applied when read).
    Forget(u64),
    AcceptOntology(String, Reply<Result<String, ReviewError>>),
    /// A set's name and the digest of the `tagOntology` the application reviewed.
    AcceptReviewed(String, String, Reply<Result<String, Option<String>>>),
    RevokeOntology(String, Reply<Option<String>>),
    ConsumerPatterns(Vec<String>, Reply<Result<(), HostError>>),
}

/// The reply to [`HostSession::refresh_manifest`].
type RefreshReply = Reply<Result<Option<ChangeReceipt>, HostError>>;

/// A [`Cmd::Request`] waiting for its answer.
struct RequestCall {
    method: String,
    /// Its number ([`Cmd::Request`]).
    call: u64,
    reply: Reply<Result<Value, HostError>>,
    /// Its id on the wire, once written (what a timeout names).
    wire: Option<RequestId>,
}

/// A policy call waiting for the exchange in flight to end (§6.7: one at a time).
enum PolicyCall {
    Set(Vec<String>, Reply<Result<PolicyChange, HostError>>),
    Disable(Vec<String>, Reply<Result<(), HostError>>),
}

/// What the session hands the driver when it starts it.
pub(super) struct Driver {
    pub(super) state: HostState,
    pub(super) peer: Peer,
    /// Every frame the driver sends goes through it, so a server that does not read never
    /// stops the driver reading ([`Outbox`]).
    pub(super) out: Outbox,
    pub(super) incoming: Incoming,
    pub(super) cmds: queue::Receiver<Cmd>,
    /// Handed to the application's handler tasks, for their answers.
    pub(super) cmd_tx: queue::WeakSender<Cmd>,
    pub(super) shared: Arc<Shared>,
    pub(super) events: queue::Sender<HostEvent>,
    pub(super) diags: queue::Sender<HostDiagnostic>,
    pub(super) connected: Option<Reply<Result<(), HostError>>>,
    /// The tasks of the application's handlers of server requests, to stop one the server
    /// cancels, each with its hand-out's number: once a request is cancelled its id may be
    /// used again, and an answer or chunk its handler (or a task holding its
    /// [`ChunkSink`]) sends after that is the old hand-out's, never the new one's.
    /// The number is the state machine's ([`HostState::polled_handout`]), so a late
    /// answer is judged by hand-out ([`HostState::late_answer_of`]).
    pub(super) tasks: HashMap<RequestId, (u64, tokio::task::AbortHandle)>,
    /// Whether a received frame's message is being handled (the driver takes no other
    /// meanwhile): its [`Incoming`] frame and entry go with each diagnostic to the tap.
    pub(super) on_wire: bool,
}

pub(super) fn closed_error(peer: &Peer) -> HostError {
    HostError::Peer(PeerError::Closed(
        peer.close_reason().unwrap_or(CloseReason::Eof),
    ))
}

fn connect_error(e: ConnectError, timeout: Duration) -> HostError {
    match e {
        ConnectError::BadInitialize(s) => HostError::BadInitialize(s),
        ConnectError::Remote(e) => HostError::Peer(PeerError::Remote(e)),
        ConnectError::Timeout => HostError::Peer(PeerError::Timeout {
            method: "initialize".into(),
            id: RequestId::from(1u64),
            after: timeout,
        }),
        ConnectError::TooManyFeatureSets { count, limit } => {
            HostError::TooManyFeatureSets { count, limit }
        }
        ConnectError::Policy(p) => HostError::Policy(p),
        ConnectError::Refused => HostError::Refused("close"),
        ConnectError::Closed => HostError::Peer(PeerError::Closed(CloseReason::Eof)),
    }
}

/// The error a refused application call on the state machine is to the application.
fn state_error(e: StateError, peer: &Peer) -> HostError {
    match e {
        StateError::McpOnly(r) => HostError::McpOnly(r),
        StateError::Policy(p) => HostError::Policy(p),
        StateError::Selection(s) => HostError::BadSelection(s),
        StateError::NotSent(r) => r.into(),
        StateError::Completed(c) => c.into(),
        StateError::UseDedicated { method, instead } => HostError::UseDedicated { method, instead },
        StateError::TooManyOpen { what, limit } => HostError::TooManyOpen { what, limit },
        StateError::TagPatterns(e) => HostError::TagPatterns(e),
        StateError::UsageNotSent(why) => HostError::UsageNotSent(why),
        StateError::PolicyInFlight
        | StateError::NotConnected
        | StateError::UnknownRequest(_)
        | StateError::Turn(_)
        | StateError::Stream(_) => closed_error(peer),
    }
}

impl Driver {
    /// Runs until the connection ends (or every handle of the session is gone).
    /// Boxed: moved into its future, the driver would be held there twice.
    pub(super) async fn run(mut self: Box<Self>) {
        // The state answers a request of the server's it cancels `-32800` as it handles the
        // cancel (`HostState`'s `on_cancelled`): the peer frees its id there
        // (`Peer::answers_cancels`); every other request's id stays in flight until answered.
        self.peer.answers_cancels();
        let mut w = Waiting::default();
        self.state.start(clock_now());
        self.carry_out(&mut w, false);
        let mut alarm = Alarm::new();
        // The server sends no more: its requests the application's handlers still answer
        // are answered all the same (the peer keeps the connection open for them), unless
        // the connection closed.
        let mut read_all = false;
        loop {
            if read_all && (w.requests.is_empty() || self.closing()) {
                break;
            }
            alarm.want(self.state.poll_timeout());
            // Frames held for a server that reads slowly stop the application's calls, and
            // far more of them reading too (`Outbox::takes_calls`, `Outbox::reads`); writing
            // them never does.
            let taking = self.out.takes_calls();
            let reading = self.out.reads();
            let input = tokio::select! {
                biased;
                item = self.incoming.recv_ordered(), if reading && !read_all => match item {
                    Some(item) => Input::Wire(item),
                    None => {
                        read_all = true;
                        // The server's end of output; a close (ours, a failed write) is
                        // told by `HostState::handle_close` when the driver ends.
                        match self.peer.close_reason() {
                            None | Some(CloseReason::Eof) => Input::Eof,
                            Some(_) => continue,
                        }
                    }
                },
                flushed = self.out.flush(), if !self.out.is_empty() => {
                    if flushed.is_ok() {
                        self.moved();
                    }
                    self.frames_moved();
                    continue;
                }
                // Policy calls wait for the exchange in flight (§6.7); past COMMANDS_QUEUED of
                // them no more calls are taken until it ends (at the latest at
                // `policy_timeout`), so they are bounded like the queue they came from.
                cmd = self.cmds.recv(), if taking && w.queued.len() < COMMANDS_QUEUED => match cmd {
                    Some(cmd) => Input::Cmd(cmd),
                    None => break,
                },
                () = alarm.fired(), if alarm.is_armed() => Input::Tick,
                _ = self.peer.closed(), if read_all => continue,
            };
            self.take(&mut w, input, taking);
        }
        // Boxed: its future is larger than the loop's, and would size every idle
        // connection's task.
        Box::pin(self.shut_down(w)).await;
    }

    /// Carries out one input the loop took (`taking`: it could take the application's calls
    /// as it did), with its outputs: the loop's body, which a test drives in the exact
    /// order it chooses (`driver_tests`).
    fn take(&mut self, w: &mut Waiting, input: Input, taking: bool) {
        // Whatever changed the channels (the sweep giving a close up, a registration, a
        // confirmed open or close …), the snapshot's copy of them is renewed.
        let before = self.state.channels().changes();
        if self
            .shared
            .sweep
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.sweep_given_up(w);
        }
        self.state.set_event_room(self.events.room());
        let limit = self.shared.config.max_event_bytes;
        self.state.set_event_bytes(self.events.weight(), limit);
        let now = clock_now();
        let mut counted = false;
        // What is raised from here to the end of this input was raised for this frame.
        self.on_wire = matches!(input, Input::Wire(_));
        match input {
            Input::Wire(Ordered::Response(r)) => self.on_response(w, now, r),
            Input::Wire(Ordered::Message(IncomingMessage::Notification(n))) => {
                self.state.handle_message(now, Message::Notification(n));
            }
            Input::Wire(Ordered::Message(IncomingMessage::Request(req))) => {
                let r: Request = req.request().clone();
                w.current = Some(req);
                self.state.handle_message(now, Message::Request(r));
            }
            Input::Tick => self.state.handle_timeout(now),
            // The application is told, and what of ours waited ends now.
            Input::Eof => self.state.handle_eof(now),
            Input::Cmd(cmd) => {
                // What the session's handles queued (`HostSession::enqueue`); a handler's
                // answers and chunks are not counted.
                counted = !matches!(cmd, Cmd::Answer { .. } | Cmd::Chunk { .. });
                self.on_command(w, now, cmd);
            }
        }
        let channels = self.state.channels().changes() != before;
        self.carry_out(w, channels);
        self.on_wire = false;
        // Before the call's count is released (`HostSession::behind_driver` reads them so).
        self.frames_moved();
        if counted {
            self.shared
                .queued
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        // A driver that takes no calls (its writer backed up) moves only by writing.
        if taking || counted {
            self.moved();
        }
    }

    /// Publishes how many frames the outbox holds (`HostSession::behind_driver`).
    fn frames_moved(&mut self) {
        self.shared
            .held
            .store(self.out.len(), std::sync::atomic::Ordering::SeqCst);
    }

    /// Tells callers waiting on the driver that it moves ([`Shared::progress`]).
    fn moved(&self) {
        self.shared
            .progress
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The answer to one of our requests, under the state machine's id.
    fn on_response(&mut self, w: &mut Waiting, now: Instant, mut r: Response) {
        let mapped = r.id.as_ref().and_then(|id| w.by_peer.remove(id));
        // An answer received is a fact about the server (§14.3, §14.5: it opened or closed
        // the channel), applied whoever still waits for it: one whose caller gave up before
        // the driver read it was received before any cancel could go out (`give_up` finds
        // it answered), so the host's channels follow the server's. One read after the
        // cancel never comes here: the peer reports it late.
        if let Some(n) = mapped {
            if w.answered_given_up.remove(&n) || w.caller_gone(n) {
                tracing::info!(id = n, "an answer whose caller gave up is applied");
            }
        }
        match mapped {
            Some(n) => {
                w.by_state.remove(&n);
                r.id = Some(RequestId::from(n));
                self.state.handle_message(now, Message::Response(r));
            }
            None => self.diag(HostDiagnostic::UnexpectedResponse {
                id: r
                    .id
                    .as_ref()
                    .map_or("null".into(), |id| id.to_value().to_string()),
            }),
        }
    }

    /// Gives up every application request and hook whose caller is gone ([`Shared::sweep`]:
    /// its [`Cmd::Forget`] found the queue full).
    fn sweep_given_up(&mut self, w: &mut Waiting) {
        for id in w.callers_gone() {
            w.take_request(id);
            w.take_hook(id);
            self.give_up(w, id);
        }
    }

    /// Gives up application request or hook `id` of the state machine's whose caller is
    /// gone: cancelled on the wire under the peer's id, after its own frame
    /// ([`Outbox::cancel`]), and forgotten ([`HostState::abandon_request`]). One whose
    /// answer the peer already received (queued, not yet read) is not: nothing is
    /// cancelled, and the answer is applied when read (`on_response`), as the server
    /// acted on the request.
    fn give_up(&mut self, w: &mut Waiting, id: u64) {
        if !self.state.is_pending(id) {
            return;
        }
        if let Some(pid) = w.by_state.get(&id).cloned() {
            if !self.out.cancel(&pid, "the caller stopped waiting") {
                w.answered_given_up.insert(id);
                return;
            }
            w.by_state.remove(&id);
            w.by_peer.remove(&pid);
        }
        self.state.abandon_request(id);
    }

    /// One application call.
    fn on_command(&mut self, w: &mut Waiting, now: Instant, cmd: Cmd) {
        let peer = self.peer.clone();
        let err = |e| state_error(e, &peer);
        match cmd {
            Cmd::SetPolicy(p, reply) => w.queued.push_back(PolicyCall::Set(p, reply)),
            Cmd::Disable(sets, reply) => w.queued.push_back(PolicyCall::Disable(sets, reply)),
            // A caller that gave up (`DRIVER_GRACE`) starts no fetch.
            Cmd::Refresh(reply) if reply.is_closed() => {}
            Cmd::Refresh(reply) => match self.state.refresh_manifest(now) {
                Ok(id) => w.refreshes.push((id, reply)),
                Err(e) => {
                    let _ = reply.send(Err(err(e)));
                }
            },
            // A fan-out that stopped waiting (`DRIVER_GRACE`) gets no late hook.
            Cmd::Hook(_, _, reply) if reply.is_closed() => {}
            Cmd::Hook(params, call, reply) => match self.state.before_inference(now, params) {
                Some(id) => {
                    w.add_hook(id, call, reply);
                }
                None => {
                    let _ = reply.send(None);
                }
            },
            // A caller that gave up (`HostSession::call_bounded`: told nothing was sent)
            // starts nothing and sends no frame of a stream.
            Cmd::StartTurn { reply, .. }
            | Cmd::StartStream { reply, .. }
            | Cmd::StreamChunk { reply, .. }
            | Cmd::StreamComplete { reply, .. }
                if reply.is_closed() => {}
            Cmd::StartTurn {
                inference_id,
                conversation_id,
                turn_index,
                reply,
            } => {
                // Gated by the state (§5.4): a refusal is `NotSent`, as the gate's own.
                let id = std::sync::Arc::clone(&inference_id);
                let r = self
                    .state
                    .start_turn_owned(inference_id, conversation_id, turn_index)
                    .map_err(|e| match e {
                        StateError::Turn(_) => HostError::TurnExists(id.to_string()),
                        other => err(other),
                    });
                let _ = reply.send(r);
            }
            Cmd::EndTurn {
                inference_id,
                terminal,
                usage,
                reply,
            } => {
                // §10.5: a terminal whose caller stopped waiting before it was taken was
                // never queued, as far as the caller knows: the turn ends `aborted`.
                let terminal = match &reply {
                    Some(r) if r.is_closed() => Terminal::Aborted,
                    _ => terminal,
                };
                // Ended either way; a terminal the grant no longer allows is `NotSent`.
                let ended = self.state.end_turn(&inference_id, terminal, usage);
                if let Some(reply) = reply {
                    let _ = reply.send(ended.map_err(err));
                }
            }
            Cmd::StartStream {
                inference_id,
                conversation_id,
                reply,
            } => {
                let r = self
                    .state
                    .start_stream(&inference_id, conversation_id.as_deref())
                    .map_err(|e| match e {
                        StateError::Stream(_) => HostError::StreamExists(inference_id.clone()),
                        other => err(other),
                    });
                let _ = reply.send(r);
            }
            Cmd::StreamChunk {
                inference_id,
                channel_id,
                delta,
                reply,
            } => {
                let r = self.state.stream_chunk(&inference_id, &channel_id, &delta);
                let _ = reply.send(r.map_err(err));
            }
            Cmd::StreamComplete {
                inference_id,
                channel_id,
                reply,
            } => {
                let r = self.state.stream_complete(&inference_id, &channel_id);
                let _ = reply.send(r.map_err(err));
            }
            Cmd::EndStream {
                inference_id,
                reply,
            } => {
                let r = self.state.end_stream(&inference_id).map_err(err);
                if let Some(reply) = reply {
                    let _ = reply.send(r);
                }
            }
            // A chunk of a hand-out that ended (cancelled, its id perhaps handed out again).
            Cmd::Chunk {
                id, handout, reply, ..
            } if !self.is_current(&id, handout) => {
                let _ = reply.send(Err(HostError::StreamEnded));
            }
            Cmd::Chunk {
                id, delta, reply, ..
            } => {
                let r = self
                    .state
                    .inference_chunk(clock_now(), &id, &delta)
                    .map_err(|e| match e {
                        StateError::Stream(_) => HostError::StreamEnded,
                        other => err(other),
                    });
                let _ = reply.send(r);
            }
            Cmd::Answer {
                id,
                handout,
                outcome,
                method,
                panicked,
            } => {
                if panicked {
                    let method = method.clone();
                    self.diag(HostDiagnostic::HandlerPanicked { method });
                }
                if !self.is_current(&id, handout) {
                    // Its request was answered already (the id may be another request's
                    // now): by its deadline, which the application is told; or cancelled
                    // by the server, which asked for no answer.
                    // The state machine's rule, by hand-out (`HostState::late_answer_of`),
                    // which reports it; a panic is no answer: reported above, not as a late
                    // one. Under an id the server reused, the first request's answer is
                    // still late and the cancelled reuse's is not.
                    if !self.state.late_answer_of(&id, handout, !panicked) {
                        tracing::debug!(?id, "an answer to a cancelled request is dropped");
                    }
                    return;
                }
                self.tasks.remove(&id);
                if let Err(e) = self.state.answer(id, outcome) {
                    tracing::debug!(error = %e, "an application answer found no request");
                }
            }
            Cmd::Notify(_, _, reply) if reply.is_closed() => {}
            Cmd::Notify(method, params, reply) => {
                let _ = reply.send(self.state.notify(&method, params).map_err(err));
            }
            // A caller that gave up (`HostSession::call_bounded`) sends nothing.
            Cmd::Request { reply, .. } if reply.is_closed() => {}
            Cmd::Request {
                method,
                params,
                call,
                reply,
            } => {
                let timeout = self.shared.config.request_timeout.unwrap_or(Duration::MAX);
                match self.state.request(now, &method, params, timeout) {
                    Ok(id) => {
                        let call = RequestCall {
                            method,
                            call,
                            reply,
                            wire: None,
                        };
                        w.add_request(id, call);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(err(e)));
                    }
                }
            }
            Cmd::Forget(call) => {
                if let Some(id) = w.id_of_call(call) {
                    w.take_request(id);
                    w.take_hook(id);
                    self.give_up(w, id);
                }
            }
            // Given up by the caller (`call_bounded`'s timeout): an acceptance the caller was
            // told failed is never applied later (§16.5: it widens what tags imply).
            Cmd::AcceptOntology(_, reply) if reply.is_closed() => {}
            Cmd::AcceptReviewed(_, _, reply) if reply.is_closed() => {}
            Cmd::ConsumerPatterns(_, reply) if reply.is_closed() => {}
            Cmd::AcceptOntology(name, reply) => {
                let _ = reply.send(self.state.accept_current_ontology(&name));
            }
            Cmd::AcceptReviewed(name, digest, reply) => {
                let _ = reply.send(self.state.accept_reviewed_ontology(&name, &digest));
            }
            Cmd::RevokeOntology(name, reply) => {
                let _ = reply.send(self.state.revoke_ontology(&name));
            }
            Cmd::ConsumerPatterns(patterns, reply) => {
                let r = self
                    .state
                    .set_consumer_patterns(patterns.iter().map(String::as_str));
                let _ = reply.send(r.map_err(err));
            }
        }
    }

    /// Starts the policy calls waiting, in order, while none is in flight.
    fn start_policy_calls(&mut self, w: &mut Waiting, now: Instant) {
        while w.policy.is_none() {
            let Some(call) = w.queued.pop_front() else {
                return;
            };
            let abandoned = match &call {
                PolicyCall::Set(_, reply) => reply.is_closed(),
                PolicyCall::Disable(_, reply) => reply.is_closed(),
            };
            if abandoned {
                // Its caller gave up (`DRIVER_GRACE`): never started.
                continue;
            }
            let r = match &call {
                PolicyCall::Set(p, _) => self.state.set_policy(now, p.clone()),
                PolicyCall::Disable(sets, _) => self.state.disable_by_notification(sets),
            };
            match (r, call) {
                (Err(StateError::PolicyInFlight), call) if !self.closing() => {
                    w.queued.push_front(call);
                    return;
                }
                (Err(e), PolicyCall::Set(_, reply)) => {
                    let _ = reply.send(Err(state_error(e, &self.peer)));
                }
                (Err(e), PolicyCall::Disable(_, reply)) => {
                    let _ = reply.send(Err(state_error(e, &self.peer)));
                }
                (Ok(()), PolicyCall::Set(_, reply)) => w.policy = Some(reply),
                (Ok(()), PolicyCall::Disable(_, reply)) => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
    }

    fn closing(&self) -> bool {
        self.peer.close_reason().is_some()
    }

    /// Publishes the snapshot, then carries out every output of the input, in order, and
    /// of the policy calls that could start after it.
    fn carry_out(&mut self, w: &mut Waiting, channels: bool) {
        let mut channels = channels;
        loop {
            let now = clock_now();
            self.start_policy_calls(w, now);
            self.shared.publish(&self.state, channels);
            channels = false;
            // Requests the state machine gave up on are forgotten by the peer first (a late
            // answer is reported), before what their expiry made it send. Looked for only
            // when one ended unanswered (an answered one leaves with its answer).
            let ended = self.state.requests_ended_unanswered();
            let changed = ended != w.ended_seen;
            w.ended_seen = ended;
            let gone = ended_of(&self.state, changed, w.by_state.keys());
            for n in gone {
                // Given up with its answer queued, then expired before that was read: the
                // answer is now late, and nothing waits to apply it.
                w.answered_given_up.remove(&n);
                if let Some(pid) = w.by_state.remove(&n) {
                    w.by_peer.remove(&pid);
                    let why = match self.state.input_ended() {
                        true => "the server ended its output",
                        false => "no answer in time",
                    };
                    // Through the outbox: after the request's own frame, if still held.
                    self.out.cancel(&pid, why);
                }
            }
            w.receipt = None;
            let mut any = false;
            while let Some(o) = self.state.poll_output() {
                any = true;
                self.output(w, o);
            }
            // The application's requests the state machine forgot unanswered (the server
            // ended its output: nothing can answer them) end now, as closed.
            let moved = changed || self.state.requests_ended_unanswered() != ended;
            let forgotten = ended_of(&self.state, moved, w.request_ids());
            for n in forgotten {
                if let Some(call) = w.take_request(n) {
                    let _ = call.reply.send(Err(closed_error(&self.peer)));
                }
            }
            // A server request the state machine handed to the application waits for its
            // answer; one it answered was answered from `current`.
            if let Some(req) = w.current.take() {
                if !w.requests.contains_key(req.id()) {
                    w.requests.insert(req.id().clone(), req);
                }
            }
            // Refreshes whose fetch this input answered or expired end with its receipt.
            let mut i = 0;
            while i < w.refreshes.len() {
                if self.state.is_pending(w.refreshes[i].0) {
                    i += 1;
                } else {
                    let (_, reply) = w.refreshes.swap_remove(i);
                    let _ = reply.send(Ok(w.receipt.clone()));
                }
            }
            if !any || w.queued.is_empty() || w.policy.is_some() {
                return;
            }
        }
    }

    /// Carries out one output.
    fn output(&mut self, w: &mut Waiting, o: HostOutput) {
        match o {
            HostOutput::Transmit(Transmission::Message(m)) => self.transmit(w, m),
            HostOutput::Transmit(Transmission::Notification { method, params }) => {
                if let Err(e) = self.out.notify_encoded(method, &params) {
                    tracing::debug!(error = %e, method, "notification not written");
                }
            }
            // Written through the request's guard, as any answer (read back: the host's
            // machine encodes none of its answers today).
            HostOutput::Transmit(t @ Transmission::Result { .. }) => {
                self.transmit(w, t.to_message())
            }
            // Written only by `HostState::handle_frame`, which this driver never calls (its
            // peer reads the frames): each answer through its request's guard all the same.
            HostOutput::Transmit(Transmission::Batch(answers)) => {
                for r in answers {
                    self.transmit(w, Message::Response(r));
                }
            }
            HostOutput::Event(e) => {
                if let HostEvent::ManifestChange(r) = &e {
                    w.receipt = Some(r.clone());
                }
                if let HostEvent::ModeChanged(mode) = &e {
                    tracing::info!(server = ?self.shared.label.get(), ?mode, "MCPL disabled: MCP-only");
                }
                // Room was reported before the input: only a closed queue refuses.
                let weight = e.weight();
                let _ = self.events.try_send_weighted(e, weight);
            }
            HostOutput::Diagnostic(d) => self.diag(d),
            HostOutput::Connected(r) => {
                let _ = self.shared.label.set(self.state.label().to_owned());
                self.shared.publish(&self.state, true);
                let timeout = self.shared.config.initialize_timeout;
                let r = r.map_err(|e| connect_error(e, timeout));
                if let Some(reply) = self.connected.take() {
                    let _ = reply.send(r);
                }
            }
            HostOutput::Request { id, method, params } => self.hand_to_handler(id, method, params),
            HostOutput::PolicyChanged(c) => {
                if let Some(reply) = w.policy.take() {
                    let _ = reply.send(Ok(c));
                }
            }
            HostOutput::Hook { id, verdict } => {
                if let Some(reply) = w.take_hook(id) {
                    let _ = reply.send(Some(verdict));
                }
            }
            // The session's other requests go straight through the peer (`outbound.rs`).
            HostOutput::Response { id, outcome } => {
                if let Some(call) = w.take_request(id) {
                    let r = outcome.map_err(|e| HostError::Peer(PeerError::Remote(e)));
                    let _ = call.reply.send(r);
                }
            }
            HostOutput::RequestTimedOut { id } => {
                if let Some(call) = w.take_request(id) {
                    let after = self.shared.config.request_timeout.unwrap_or(Duration::MAX);
                    let _ = call.reply.send(Err(HostError::Peer(PeerError::Timeout {
                        method: call.method,
                        id: call.wire.unwrap_or_else(|| RequestId::from(id)),
                        after,
                    })));
                }
            }
            // Answered by the state machine (written just before): the handler stops at its
            // next `.await`.
            // Likewise when the handler did not answer in time (`HostConfig::answer_timeout`).
            HostOutput::Cancelled { id } => {
                if let Some((_, task)) = self.tasks.remove(&id) {
                    task.abort();
                }
            }
            HostOutput::AnswerTimedOut { id } => {
                if let Some((_, task)) = self.tasks.remove(&id) {
                    task.abort();
                }
            }
            HostOutput::Close => self.peer.close(),
        }
    }

    /// Sends a frame through the outbox: never waits.
    fn transmit(&mut self, w: &mut Waiting, m: Message) {
        match m {
            Message::Request(r) => {
                let RequestId::Number(n) = &r.id else { return };
                let Some(n) = n.as_u64() else { return };
                let sent = self.out.request(&r.method, r.params);
                match sent {
                    Ok(id) => {
                        if let Some(call) = w.request_mut(n) {
                            call.wire = Some(id.clone());
                        }
                        w.by_peer.insert(id.clone(), n);
                        w.by_state.insert(n, id);
                    }
                    // Not sent: answered as failed, in place, so nothing waits for it.
                    Err(e) => {
                        let failed = Response {
                            id: Some(RequestId::from(n)),
                            outcome: Err(ErrorObject::internal(e.to_string())),
                        };
                        self.state
                            .handle_message(clock_now(), Message::Response(failed));
                    }
                }
            }
            Message::Response(r) => {
                let Some(id) = r.id else { return };
                let current = w.current.take_if(|c| *c.id() == id);
                let sent = match current.or_else(|| w.requests.remove(&id)) {
                    Some(req) => self.out.finish(req, r.outcome),
                    None => self.out.respond(id, r.outcome),
                };
                if let Err(e) = sent {
                    tracing::debug!(error = %e, "answer not written");
                }
            }
            Message::Notification(n) => {
                if let Err(e) = self.out.notify(&n.method, n.params) {
                    tracing::debug!(error = %e, method = %n.method, "notification not written");
                }
            }
        }
    }

    /// An admitted `inference/request` or `model/info` (§11, §12) goes to the application's
    /// handler in a task of its own; its answer re-enters as [`Cmd::Answer`].
    ///
    /// With every command sender gone (no `HostSession` handle, no handler running) no
    /// handler's answer could come back: the request is answered `-32603` at once (JSON-RPC
    /// 2.0 §4), and the driver ends the connection when it next finds the queue closed.
    fn hand_to_handler(&mut self, id: RequestId, method: String, params: Option<Value>) {
        let Some(tx) = self.cmd_tx.upgrade() else {
            let gone = ErrorObject::internal(format!(
                "the host's application has ended its session: {method} cannot be answered"
            ));
            if let Err(e) = self.state.answer(id, Err(gone)) {
                tracing::debug!(error = %e, "a request to an ended session found no request");
            }
            return;
        };
        let cfg = &self.shared.config;
        let p = params.unwrap_or(Value::Null);
        // Taken from `poll_output` just now: this request's number.
        let handout = self.state.polled_handout();
        let streamed = method == crate::protocol::inference::InferenceRequest::NAME
            && rules::is_streamed(Some(&p));
        let handlers = (&cfg.request_handler, &cfg.stream_handler);
        match super::config::handler_for(handlers, &method, streamed) {
            Some(super::config::Handler::Stream(h)) => {
                let sink = ChunkSink {
                    cmds: tx.clone(),
                    request_id: id.clone(),
                    handout,
                    sent: 0,
                    streamed,
                };
                let answer = (tx, id.clone(), handout, method);
                let task = tokio::spawn(answer_with(answer, async move { h(p, sink).await }));
                self.tasks.insert(id, (handout, task.abort_handle()));
            }
            Some(super::config::Handler::Request(h)) => {
                let m = method.clone();
                let answer = (tx, id.clone(), handout, method);
                let task = tokio::spawn(answer_with(answer, async move { h(&m, p).await }));
                self.tasks.insert(id, (handout, task.abort_handle()));
            }
            // Not reached: what no handler serves is never granted (the state machine's
            // decision, `HostRules::unserved`, from the same rule, §5.4), so the request
            // was refused `-32002`. Kept fail-safe: answered, and reported as the
            // application's mistake.
            None => {
                let outcome = Err(ErrorObject::method_not_found(&method));
                let shown = serde_json::to_string(&id).unwrap_or_default();
                self.diag(HostDiagnostic::NoHandler { method, id: shown });
                let _ = self.state.answer(id, outcome);
            }
        }
    }

    /// Whether `handout` is the hand-out of `id` whose handler still owes its answer.
    fn is_current(&self, id: &RequestId, handout: u64) -> bool {
        self.tasks.get(id).is_some_and(|(n, _)| *n == handout)
    }

    fn diag(&self, d: HostDiagnostic) {
        let tap = self.shared.config.diagnostic_tap.as_ref();
        let (label, lost) = (&self.shared.label, &self.shared.diags_lost);
        let raised = (self.on_wire && self.incoming.frame() > 0).then(|| RaisedFor {
            frame: self.incoming.frame(),
            entry: self.incoming.entry(),
        });
        report_diag(label, &self.diags, lost, tap.map(|t| (t, raised)), d);
    }

    /// The connection ended: `connect` still waiting fails; the state machine is told
    /// ([`HostState::handle_close`]), so a hook still waiting gets its fail-open verdict, and
    /// every other caller still waiting gets the closed error when its reply is dropped
    /// (nothing more is written).
    async fn shut_down(mut self: Box<Self>, mut w: Waiting) {
        if let Some(reply) = self.connected.take() {
            let _ = reply.send(Err(closed_error(&self.peer)));
        }
        // What it still held (answers owed at EOF …) goes out first, within the write
        // timeout.
        self.out.drain().await;
        self.frames_moved();
        self.peer.close();
        // The server's requests still with the application's handlers can no longer be
        // answered: their handlers stop at their next `.await` (an application waiting to
        // answer sees its request gone), as a cancelled one's do.
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
        self.state.handle_close(clock_now());
        self.carry_out(&mut w, false);
        for (_, reply) in w.refreshes.drain(..) {
            let _ = reply.send(Ok(None));
        }
        // Nothing is lost silently: a count no later diagnostic will carry is delivered now.
        super::deliver_lost(&self.diags, &self.shared.diags_lost);
    }
}

/// Runs an application handler's future for hand-out `handout` of the server's request `id`
/// of `method` and hands its answer to the driver; a panic (in the call or in the future) is the answer `-32603`,
/// so the server's request is still answered and stops counting against
/// `max_pending_outputs`, and the driver reports it as the application's mistake
/// ([`HostDiagnostic::HandlerPanicked`]).
async fn answer_with(
    (tx, id, handout, method): (queue::Sender<Cmd>, RequestId, u64, String),
    fut: impl std::future::Future<Output = Result<Value, ErrorObject>>,
) {
    let (outcome, panicked) = match super::config::handling(id.clone(), fut).await {
        Ok(outcome) => (outcome, false),
        Err(_) => {
            let answer = ErrorObject::internal(format!("the host's handler for {method} panicked"));
            (Err(answer), true)
        }
    };
    let _ = tx
        .send(Cmd::Answer {
            id,
            handout,
            outcome,
            method,
            panicked,
        })
        .await;
}

/// One thing the driver takes, in the order it takes them.
enum Input {
    Wire(Ordered),
    Cmd(Cmd),
    Tick,
    /// The server ended its output (EOF).
    Eof,
}

/// The driver's clock: tokio's, so deadlines the state machine computes agree with the
/// timer that wakes the driver (and a runtime with paused time drives both).
pub(super) fn clock_now() -> Instant {
    tokio::time::Instant::now().into_std()
}
