//! The engine both front ends drive: one strict MCPL 0.5 host connection (the library's
//! [`HostSession`], so it enforces what a real host enforces), re-dialled on restart, with
//! the log, the events and the waiting server → host requests the dashboard and the REPL show.
//!
//! Concurrency: the session's own tasks feed the engine (the peer's tap for frames, its event
//! and diagnostics streams, the request handler); every operation of a front end runs on its
//! own task. A server → host request waiting for an answer is only an entry in
//! [`State::pending`] and a parked handler task (the session answers it from its own task), so
//! nothing else waits for it. Every list here has a bound (the `MAX_*` constants).

mod events;
mod exit;
mod open;
mod parked;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use mcpl::capability::Requirement;
use mcpl::host::{
    DiagnosticTap, HostConfig, HostDiagnostic, HostSession, RaisedFor, RequestHandler,
};
use mcpl::jsonrpc::{ErrorObject, InvalidMessage, Message, ParseError, RequestId, Response};
use mcpl::peer::{FrameDirection, PeerConfig, Tap, TapEvent};
use mcpl::protocol::push::timestamp_millis;
use mcpl::tags::TreatmentRules;
use mcpl::transport::child::ChildControl;
use open::open;
use parked::Parked;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, oneshot, watch};

use super::kept::{bound_bytes, push_bounded};
use super::log::{Dir, Kind, Log, Unit, MAX_KEPT_FRAME};
use super::rules::{self, About};
use crate::check::Target;

/// Most events (admitted pushes, channel messages, manifest changes, mode changes) kept.
pub const MAX_EVENTS: usize = 1000;
/// Most server → host requests waiting for an answer at once; more are answered `-32603`.
pub const MAX_PENDING: usize = 64;
/// Longest a server → host request waits for an answer before it is answered `-32603`; also
/// how long, after a server's EOF, its requests stay answerable (`PeerConfig::eof_drain`).
pub const PENDING_TIMEOUT: Duration = Duration::from_secs(600);
/// Most bytes of one kept event or answered request as JSON (in the lists, the live stream
/// and the state): past it, its biggest members (params, message, manifest, tags…) are each
/// replaced by `{"truncated": true, "bytes": N, "preview": …}` and it is marked
/// `"truncated": true`, so 1,000 events of 16 MiB each cannot take 16 GB.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// Most bytes of a waiting request's suggested answer (the echo of its last user message).
pub const MAX_SUGGESTED: usize = MAX_EVENT_BYTES / 4;
/// Most answered server → host requests, hook runs, streams and narrowings remembered (each).
pub const MAX_HISTORY: usize = 50;
/// Capacity of the live-update broadcast; a subscriber that falls further behind is told
/// to reload (`{"type":"resync"}`).
pub const UI_CAPACITY: usize = 256;

/// The consumer treatment rules the inspector evaluates events under (§16.7): what an
/// addressed message, an ambient one and anything else would get. First match wins; the
/// host default is `queue`. Producer suggestions are never applied (§16.5).
pub const TREATMENT_RULES: &str = r#"[
  {"tagsAny": ["chat:addressed"], "behavior": "immediate"},
  {"tagsAny": ["chat:ambient"], "behavior": "batch"}
]"#;
/// The host default behaviour when no treatment rule matches (§16.5).
pub const DEFAULT_BEHAVIOR: &str = "queue";

/// How server → host requests are answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoAnswer {
    /// They wait for an answer typed in the dashboard or the REPL (`answer`).
    Off,
    /// `inference/request` gets the text of its last user message back.
    Echo,
    /// `inference/request` gets this text.
    Text(String),
}

impl AutoAnswer {
    /// How the dashboard shows it: `"off"`, `"echo"` or `{"text": …}`.
    pub fn to_value(&self) -> Value {
        match self {
            AutoAnswer::Off => json!("off"),
            AutoAnswer::Echo => json!("echo"),
            AutoAnswer::Text(t) => json!({ "text": t }),
        }
    }
}

/// How far the connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Dialling or spawning, or `initialize` sent.
    #[serde(rename = "connecting")]
    Connecting,
    /// `notifications/initialized` sent.
    #[serde(rename = "initialized")]
    Initialized,
    /// The initial `featureSets/update` Request sent (§5.3).
    #[serde(rename = "policy sent")]
    PolicySent,
    /// The session is up (MCPL in force, or a recorded MCP-only decision).
    #[serde(rename = "ready")]
    Ready,
    /// The server ended its output (EOF): the connection stays open only while the
    /// requests it made are still answered.
    #[serde(rename = "server ended")]
    Ended,
    /// The connection ended or could not be made.
    #[serde(rename = "closed")]
    Closed,
}

/// What the engine was started with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the server is (as `mcpl check` reads TARGET).
    pub target: Target,
    /// How the target is shown.
    pub label: String,
    /// TLS roots for `wss://` (None: the bundled roots).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The arguments after `mcpl check --json` that check the same target.
    pub check_args: Vec<String>,
    /// The initial host policy patterns (§5.4).
    pub patterns: Vec<String>,
    /// How server → host requests are answered at start.
    pub auto_answer: AutoAnswer,
    /// Bound on each wait of the host (initialize, policy, hooks, requests).
    pub timeout: Duration,
}

/// A server → host request waiting for its answer.
pub struct Pending {
    /// The method.
    pub method: String,
    /// Its params, cut as an event's are past [`MAX_EVENT_BYTES`].
    pub params: Value,
    /// The answer echo would give (its last user message), at most [`MAX_SUGGESTED`] bytes.
    pub suggested: String,
    /// When it arrived.
    pub since: String,
    /// Which connection it came on.
    pub generation: u64,
    /// What it requires of the grant (§5.4), read from its whole params when it came.
    pub requirement: Option<Requirement>,
    /// Where the answer goes.
    pub answer: oneshot::Sender<Result<Value, ErrorObject>>,
    /// The id the server sent it under (JSON-RPC 2.0 §4), as the library tells its handler
    /// ([`mcpl::host::handled_request_id`]); the list's own number (its key) is the handle
    /// the REPL and dashboard answer by.
    pub wire_id: Option<RequestId>,
}

/// Everything the front ends show, besides the log.
pub struct State {
    /// The current connection's number (from 1).
    pub generation: u64,
    /// How far it got.
    pub phase: Phase,
    /// Why it closed, or the MCP-only decision.
    pub detail: Option<String>,
    /// The `initialize` params the host sent.
    pub host_init: Option<Value>,
    /// The `initialize` result the host runs under: the server's first answer to the
    /// `initialize` request, which settles it in the library's peer; a later answer under
    /// the same id is one to no request in flight, which the host drops
    /// ([`State::ignored_init`]).
    pub server_init: Option<Value>,
    /// Later answers to `initialize` (the host ignored them): how many, and the last one's
    /// result or error, cut as an event is past [`MAX_EVENT_BYTES`].
    pub ignored_init: Option<(u64, Value)>,
    /// The `initialize` request's id, as the log shows it and as the library reads it.
    init_id: Option<(String, RequestId)>,
    /// Whether the `initialize` request was answered (its first answer settles it, be it a
    /// result or an error).
    init_answered: bool,
    /// The host policy patterns in force.
    pub patterns: Vec<String>,
    /// The last policy change (apply), with its receipt.
    pub policy: Option<Value>,
    /// Notification-form narrowings sent.
    pub narrowings: VecDeque<Value>,
    /// Admitted events, newest last.
    pub events: VecDeque<Value>,
    next_event: u64,
    /// Waiting server → host requests by their local number.
    pub pending: BTreeMap<u64, Pending>,
    next_pending: u64,
    /// Answered server → host requests, newest last.
    pub answered: VecDeque<Value>,
    /// Manifest change receipts, newest last.
    pub manifest_changes: VecDeque<Value>,
    /// A channel message of the server was read and no frame was sent since: the next
    /// frame sent (its answer, when it is a request) tells the front ends the host's
    /// channel table may have changed.
    channels_unsettled: bool,
    /// Hook runs, newest last.
    pub hooks: VecDeque<Value>,
    /// Outgoing streams sent, newest last.
    pub streams: VecDeque<Value>,
    /// The last `tools/list` result.
    pub tools: Option<Value>,
    /// A background `tools/list` runs ([`Engine::relist_tools`]), and whether another
    /// change was announced meanwhile (one more then, however many there were).
    pub(super) relisting: (bool, bool),
    /// Whether a check is running.
    pub check_running: bool,
    /// The last check's outcome.
    pub check: Option<Value>,
    /// How server → host requests are answered now.
    pub auto_answer: AutoAnswer,
    /// The turn counter for hooks.
    pub turns: u64,
    child: Option<ChildControl>,
}

/// An answer to `initialize` as the library's peer reads it: its result, or what settles
/// the request as an error (the server's error, or why the response is invalid).
type InitAnswer = Result<Value, Value>;

/// Reads `text`, a frame with no method and an id, as the library's peer reads it
/// ([`Message::parse`], the one reading the peer shares): a valid response answers the
/// request of its id (the id's type included: `"1"` answers no request `1`), an invalid
/// one whose id can be read settles that request as an error (`invalid response: …`), and
/// anything else answers nothing. An id written as a whole float (`1.0`) is read as its
/// integer, as the peer reads the id of a request in flight.
fn init_answer(text: &str) -> Option<(RequestId, InitAnswer)> {
    let parsed = Message::parse(text).or_else(|e| {
        let mut v: Value = serde_json::from_str(text).map_err(|_| e.clone())?;
        let whole = v
            .get("id")
            .and_then(Value::as_number)
            .and_then(mcpl::jsonrpc::whole_float_integer);
        match whole {
            Some(i) => {
                v["id"] = json!(i);
                Message::from_value(v).map_err(ParseError::Invalid)
            }
            None => Err(e),
        }
    });
    match parsed {
        Ok(Message::Response(Response {
            id: Some(id),
            outcome,
        })) => Some((
            id,
            outcome.map_err(|e| json!({ "code": e.code, "message": e.message })),
        )),
        Err(ParseError::Invalid(InvalidMessage {
            id: Some(id),
            reason,
        })) => Some((id, Err(json!({ "invalidResponse": reason })))),
        _ => None,
    }
}

impl Pending {
    /// Why any answer to it goes out as the host's `-32002`, if it does: the grant in force
    /// no longer holds what it requires (revoked while it waited). The library judges it
    /// where the answer is sent (§5.4: a message needing a denied capability is not
    /// delivered), so a grant changing at that very moment may still differ.
    pub fn revoked(&self, session: Option<&HostSession>) -> Option<String> {
        let (req, s) = (self.requirement?, session?);
        let grant = s.grant();
        let missing = grant.check(req).err()?.capability;
        Some(format!(
            "the grant in force no longer holds {missing}: the host answers -32002 (§5.4) \
             whatever is given here"
        ))
    }
}

impl State {
    /// Takes `answer` under the `initialize` request's id: the first settles the request
    /// (its result is the server's; an error leaves none), a later one is counted as
    /// ignored, as the host ignores it.
    fn init_answered_by(&mut self, answer: InitAnswer) {
        if self.init_answered {
            self.ignore_init(answer);
        } else {
            self.init_answered = true;
            self.server_init = answer.ok();
        }
    }

    /// Counts a later answer to `initialize`, which the host ignored, keeping its result or
    /// error cut as an event is.
    fn ignore_init(&mut self, answer: InitAnswer) {
        let (Ok(answer) | Err(answer)) = answer;
        let mut kept = json!({ "answer": answer });
        bound_bytes(&mut kept, &["answer"]);
        let count = self.ignored_init.as_ref().map_or(0, |(n, _)| *n) + 1;
        self.ignored_init = Some((count, kept["answer"].take()));
    }

    /// [`State::detail`] as shown: once the server has ended its output, with how many of
    /// the current connection's requests wait for an answer now (counted when shown, not
    /// when the end was handled: a request the server sent just before its end is parked by
    /// its own task, which may run after the end is handled, and an answer given later
    /// lowers the count).
    pub fn shown_detail(&self) -> Option<String> {
        match (&self.phase, &self.detail) {
            (Phase::Ended, Some(d)) => {
                let waiting = self
                    .pending
                    .values()
                    .filter(|p| p.generation == self.generation)
                    .count();
                Some(format!("{d}; {waiting} of its requests wait for an answer"))
            }
            (_, d) => d.clone(),
        }
    }
}

/// The engine; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

/// The engine's shared parts.
pub struct Inner {
    /// What it was started with.
    pub settings: Settings,
    log: Mutex<Log>,
    state: Mutex<State>,
    session: Mutex<Option<HostSession>>,
    ui: broadcast::Sender<Value>,
    log_tick: watch::Sender<u64>,
    connect_lock: tokio::sync::Mutex<()>,
    rules: TreatmentRules,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The text of an `inference/request`'s last user message (the last message when none is
/// the user's), as echo answers it.
pub fn echo_text(params: &Value) -> String {
    let messages = params
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .or(messages.last());
    let Some(content) = last.and_then(|m| m.get("content")) else {
        return String::new();
    };
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The result answering `method` with `text` (§11.3 for `inference/request`, §12.2 for
/// `model/info`, where the text is the model id).
pub fn text_answer(method: &str, text: &str) -> Value {
    if method == "model/info" {
        json!({ "id": text, "vendor": "mcpl-inspect", "capabilities": [] })
    } else {
        json!({ "content": text, "model": "mcpl-inspect", "finishReason": "end_turn" })
    }
}

impl Engine {
    /// A new engine, not yet connected.
    pub fn new(settings: Settings) -> Engine {
        let rules = TreatmentRules::from_json(
            &serde_json::from_str(TREATMENT_RULES).unwrap_or_else(|_| json!([])),
        )
        .unwrap_or_default();
        let state = State {
            generation: 0,
            phase: Phase::Connecting,
            detail: None,
            host_init: None,
            server_init: None,
            ignored_init: None,
            init_id: None,
            init_answered: false,
            patterns: settings.patterns.clone(),
            policy: None,
            narrowings: VecDeque::new(),
            events: VecDeque::new(),
            next_event: 0,
            pending: BTreeMap::new(),
            next_pending: 0,
            answered: VecDeque::new(),
            manifest_changes: VecDeque::new(),
            channels_unsettled: false,
            hooks: VecDeque::new(),
            streams: VecDeque::new(),
            tools: None,
            relisting: (false, false),
            check_running: false,
            check: None,
            auto_answer: settings.auto_answer.clone(),
            turns: 0,
            child: None,
        };
        Engine {
            inner: Arc::new(Inner {
                settings,
                log: Mutex::new(Log::default()),
                state: Mutex::new(state),
                session: Mutex::new(None),
                ui: broadcast::channel(UI_CAPACITY).0,
                log_tick: watch::channel(0).0,
                connect_lock: tokio::sync::Mutex::new(()),
                rules,
            }),
        }
    }

    /// The state, locked (keep it short: the session's tasks take it too).
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// The log, locked (keep it short: the peer's tap takes it for every frame).
    pub fn log(&self) -> MutexGuard<'_, Log> {
        lock(&self.inner.log)
    }

    /// The current session, if one is up.
    pub fn session(&self) -> Option<HostSession> {
        lock(&self.inner.session).clone()
    }

    /// Live updates: `{"type":"event", "event": …}` for each admitted event and
    /// `{"type":"state"}` for any other change.
    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.inner.ui.subscribe()
    }

    /// The seq of the newest log entry, updated as frames come.
    pub fn log_ticks(&self) -> watch::Receiver<u64> {
        self.inner.log_tick.subscribe()
    }

    /// Tells the front ends something changed.
    pub fn changed(&self) {
        let _ = self.inner.ui.send(json!({ "type": "state" }));
    }

    /// Writes a note into the log.
    pub fn note(&self, text: String) {
        let generation = self.state().generation;
        let seq = self
            .log()
            .record_host(generation, Kind::Note, None, text, Vec::new(), None);
        self.inner.log_tick.send_replace(seq);
    }

    /// (Re)connects: ends the current connection (killing a spawned server), then dials or
    /// spawns the target and runs the handshake and initial policy through [`HostSession`].
    /// The log, the events and the hook history are kept.
    pub async fn connect(&self) -> Result<(), String> {
        let _g = self.inner.connect_lock.lock().await;
        if let Some(old) = lock(&self.inner.session).take() {
            old.close();
        }
        let (generation, patterns) = {
            let mut st = self.state();
            if let Some(child) = st.child.take() {
                child.kill();
            }
            st.generation += 1;
            st.phase = Phase::Connecting;
            st.detail = None;
            st.host_init = None;
            st.server_init = None;
            st.ignored_init = None;
            st.init_id = None;
            st.init_answered = false;
            st.policy = None;
            st.tools = None;
            st.channels_unsettled = false;
            // Dropping the answer senders ends the old connection's waiting handlers.
            st.pending.clear();
            (st.generation, st.patterns.clone())
        };
        self.note(format!(
            "connection {generation}: connecting to {}",
            self.inner.settings.label
        ));
        self.changed();
        let result = self.dial_and_start(generation, patterns).await;
        if let Err(e) = &result {
            {
                let mut st = self.state();
                if st.generation == generation {
                    st.phase = Phase::Closed;
                    st.detail = Some(e.clone());
                }
            }
            self.note(format!("connection {generation}: {e}"));
        }
        self.changed();
        result
    }

    async fn dial_and_start(&self, generation: u64, patterns: Vec<String>) -> Result<(), String> {
        let s = &self.inner.settings;
        let transport = open(&s.target, s.tls.clone(), s.timeout).await;
        let transport = match transport {
            Ok((t, child)) => {
                self.state().child = child;
                t
            }
            Err(e) => return Err(e),
        };
        let config = HostConfig {
            client_name: "mcpl-inspect".into(),
            policy: patterns,
            initialize_timeout: s.timeout,
            policy_timeout: s.timeout,
            hook_timeout: s.timeout,
            manifest_timeout: s.timeout,
            request_handler: Some(self.request_handler(generation)),
            diagnostic_tap: Some(self.diagnostic_tap(generation)),
            // A request waits for the user as long as PENDING_TIMEOUT says, not the
            // library's 120 s (which answered it -32603 while it was shown waiting).
            answer_timeout: Some(PENDING_TIMEOUT),
            peer: PeerConfig {
                request_timeout: Some(s.timeout),
                tap: Some(self.tap(generation)),
                // A server that ended its output may still read: a request it sent stays
                // answerable by the user for as long as it waits ([`PENDING_TIMEOUT`]),
                // not the library's 5 s; a spawned server's exit closes at once ([`pump`]).
                eof_drain: Some(PENDING_TIMEOUT),
                ..PeerConfig::default()
            },
            ..HostConfig::default()
        };
        let (session, streams) = HostSession::connect(transport, config)
            .await
            .map_err(|e| format!("the host session could not start: {e}"))?;
        let mode = format!("{:?}", session.mode());
        {
            let mut st = self.state();
            if st.generation != generation {
                session.close();
                return Err("superseded by a restart".into());
            }
            st.phase = Phase::Ready;
            st.detail = Some(mode.clone());
            st.policy = Some(json!({
                "initial": true,
                "receipt": session.last_receipt().map(|r| r.to_value()),
                "grant": session.grant().to_effective_capabilities(),
            }));
        }
        *lock(&self.inner.session) = Some(session.clone());
        self.note(format!("connection {generation}: ready ({mode})"));
        self.pump(generation, session, streams);
        // The Tools panel starts filled; a server without tools just shows the error.
        if let Err(e) = self.tools_list().await {
            self.note(format!("connection {generation}: tools/list: {e}"));
        }
        Ok(())
    }

    /// Feeds the session's events, diagnostics and end into the engine; closes the connection
    /// when a spawned server exits.
    fn pump(&self, generation: u64, session: HostSession, streams: mcpl::host::HostStreams) {
        let mcpl::host::HostStreams {
            mut events,
            mut diagnostics,
        } = streams;
        let weak = Arc::downgrade(&self.inner);
        let label = session.label();
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                Engine { inner }.on_event(generation, &label, ev);
            }
        });
        // Every diagnostic is logged by the session's diagnostic tap, with the frame it was
        // raised for ([`Engine::diagnostic_tap`]); the stream, which carries the same ones,
        // is drained so it never fills.
        tokio::spawn(async move { while diagnostics.recv().await.is_some() {} });
        let weak = Arc::downgrade(&self.inner);
        let peer = session.peer().clone();
        drop(session);
        self.close_at_exit(generation, &peer);
        tokio::spawn(async move {
            let reason = peer.closed().await;
            drop(peer);
            let Some(inner) = weak.upgrade() else { return };
            let e = Engine { inner };
            let unanswered = {
                let mut st = e.state();
                if st.generation != generation {
                    return;
                }
                st.phase = Phase::Closed;
                st.detail = Some(reason.to_string());
                // Its requests can no longer be answered (their handlers are stopped).
                let before = st.pending.len();
                st.pending.retain(|_, p| p.generation != generation);
                before - st.pending.len()
            };
            e.note(format!("connection {generation}: closed ({reason})"));
            if unanswered > 0 {
                e.note(format!(
                    "connection {generation}: {unanswered} request(s) of the server closed unanswered"
                ));
            }
            e.changed();
        });
    }

    fn tap(&self, generation: u64) -> Tap {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        Tap::new(move |ev: TapEvent<'_>| {
            if let Some(inner) = weak.upgrade() {
                Engine { inner }.on_frame(generation, ev);
            }
        })
    }

    /// One frame from the tap: logged, then read for the connection panel (handshake,
    /// phase). What a server's frame claims is shown only as the host took it: of the
    /// answers to `initialize`, the first, which settles the request in the library's peer
    /// (a later one answers no request in flight, and the host drops it: so it is shown,
    /// [`State::ignored_init`]); the channels from the host's own table
    /// ([`HostSession::channel_descriptors`]), never from `channels/register` or
    /// `channels/changed` frames, whose refused descriptors (a duplicate, an invalid or
    /// unpermitted one, §14.2, §14.5) were shown as if registered.
    fn on_frame(&self, generation: u64, ev: TapEvent<'_>) {
        let dir = match ev.direction {
            FrameDirection::Inbound => Dir::Received,
            FrameDirection::Outbound => Dir::Sent,
        };
        let (info, seq) = {
            let mut log = self.log();
            let frame = (dir == Dir::Received).then_some(ev.frame);
            let info = log.record_numbered(generation, dir, ev.at, ev.text, frame);
            (info, log.last_seq())
        };
        self.inner.log_tick.send_replace(seq);
        let method = info.method.as_deref();
        let notable = matches!(
            (dir, method),
            (Dir::Sent, _)
                | (
                    Dir::Received,
                    None | Some("channels/register" | "channels/changed")
                )
        );
        if !notable {
            return;
        }
        let id = info.id.clone();
        // A frame with no method under the `initialize` request's id (as the log shows
        // ids), or any before the request is seen, is read as the library's peer reads it
        // ([`init_answer`]), outside the state's lock. One over MAX_KEPT_FRAME is read too
        // (a manifest of many feature sets passes 256 KiB: the connection panel and the
        // grant preview showed no server at all), within the library's parsed-cost bound:
        // past it, it is not read, as the peer refuses it (settling the request it names
        // as an error).
        let mut answer = None;
        let mut unread = false;
        if dir == Dir::Received && method.is_none() && id.is_some() {
            let candidate = {
                let st = self.state();
                // Until answered, every one (the log's text of an id is not the peer's
                // reading: `1.0` is the id `1`); then those under the id's text, to count.
                // None before the request is tapped: the peer taps a frame before its
                // bytes reach the transport, so an answer tapped first was written before
                // the request was on the wire (a stray, marked so by the log).
                st.generation == generation
                    && st
                        .init_id
                        .as_ref()
                        .is_some_and(|(text, _)| !st.init_answered || Some(text) == id.as_ref())
            };
            if candidate {
                let affordable = ev.text.len() <= MAX_KEPT_FRAME
                    || mcpl::jsonrpc::parsed_cost(ev.text)
                        <= mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST;
                if affordable {
                    answer = init_answer(ev.text);
                }
                unread = !affordable;
            }
        }
        let mut st = self.state();
        if st.generation != generation {
            return;
        }
        let mut changed = true;
        match (dir, method) {
            (Dir::Sent, Some("initialize")) => {
                let request = match Message::parse(ev.text) {
                    Ok(Message::Request(r)) => Some(r),
                    _ => None,
                };
                st.host_init = request.as_ref().and_then(|r| r.params.clone());
                st.init_id = id.zip(request.map(|r| r.id));
            }
            (Dir::Sent, Some("notifications/initialized")) => st.phase = Phase::Initialized,
            (Dir::Sent, Some("featureSets/update")) => {
                st.channels_unsettled = false;
                if st.phase == Phase::Initialized {
                    st.phase = Phase::PolicySent;
                }
            }
            // Any other frame sent, after a channel message read: the host has taken the
            // message (it answers a request after applying it), so its table is shown anew.
            (Dir::Sent, _) => changed = std::mem::take(&mut st.channels_unsettled),
            (Dir::Received, None) => match (answer, &st.init_id) {
                (Some((aid, answer)), Some((_, rid))) if aid == *rid => {
                    st.init_answered_by(answer);
                }
                (None, Some((text, _))) if unread && id.as_ref() == Some(text) => {
                    st.init_answered_by(Err(json!({ "unread": "past the parsed-cost bound" })));
                }
                _ => changed = false,
            },
            (Dir::Received, Some(_)) => st.channels_unsettled = true,
            _ => changed = false,
        }
        drop(st);
        if changed {
            self.changed();
        }
    }

    /// The session's diagnostic tap: each diagnostic as it is reported, with the number of
    /// the received frame whose handling raised it ([`Engine::on_diagnostic`]).
    fn diagnostic_tap(&self, generation: u64) -> DiagnosticTap {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        DiagnosticTap::new(move |d: &HostDiagnostic, frame: Option<RaisedFor>| {
            if let Some(inner) = weak.upgrade() {
                Engine { inner }.on_diagnostic(generation, d, frame);
            }
        })
    }

    /// One diagnostic of the session: logged with its rule and §, and the frame it is
    /// about marked. `frame`, the peer's number of the received frame whose handling raised
    /// it and, in a batch, the entry's index, picks that frame (that entry) for a
    /// diagnostic that names only a method (a frame of the method read later, or another
    /// entry of the batch, is not it); without it (raised by no frame, or the frame is no
    /// longer kept) the newest frame of the method not yet marked for the rule is taken.
    fn on_diagnostic(&self, generation: u64, d: &HostDiagnostic, frame: Option<RaisedFor>) {
        let (mark, about) = rules::diagnostic(d);
        let method = match &about {
            About::Method(m) => Some(m.clone()),
            _ => None,
        };
        let seq = {
            let mut log = self.log();
            // Only this connection's frames, and only of the kind the diagnostic is about: a
            // server's request and a response to the host share no id space.
            // Of those, the newest the same rule has not marked yet: two diagnostics of one
            // rule handled after both their frames were logged mark both.
            // A frame, or an entry of a batch (JSON-RPC 2.0 §6): the mark then names it.
            let mark_latest = |log: &mut Log, pred: &dyn Fn(&Unit<'_>) -> bool| {
                log.mark_fresh(|u| u.generation == generation && pred(u), mark.clone())
            };
            let of_method = |u: &Unit<'_>, m: &str| {
                matches!(u.kind, Kind::Request | Kind::Notification) && u.method == Some(m)
            };
            // The frame it was raised for, when the session said and the log keeps it.
            // In a batch, the entry too: its entries share the batch's number.
            let raised_for = |u: &Unit<'_>| {
                frame.is_some_and(|f| u.frame == Some(f.frame) && u.entry == f.entry)
            };
            let marked = match &about {
                About::Method(m) => mark_latest(&mut log, &|u| raised_for(u) && of_method(u, m))
                    .or_else(|| mark_latest(&mut log, &|u| of_method(u, m))),
                About::MethodNaming { method: m, value } => {
                    let named = Value::String(value.clone()).to_string();
                    let naming = |u: &Unit<'_>| of_method(u, m) && u.text.contains(&named);
                    mark_latest(&mut log, &|u| raised_for(u) && naming(u))
                        .or_else(|| mark_latest(&mut log, &|u| raised_for(u) && of_method(u, m)))
                        .or_else(|| mark_latest(&mut log, &naming))
                        .or_else(|| mark_latest(&mut log, &|u| of_method(u, m)))
                }
                About::Id(id) => mark_latest(&mut log, &|u| u.id == Some(id.as_str())),
                About::Request(id) => mark_latest(&mut log, &|u| {
                    u.kind == Kind::Request && u.id == Some(id.as_str())
                }),
                About::Response { id, stray } => {
                    log.mark_response(generation, id, *stray, mark.clone())
                }
                About::Junk => mark_latest(&mut log, &|u| u.kind == Kind::Junk),
                About::Batch => log.mark_batch(generation, mark.clone()),
                // Named by no method or id (a batch entry that is no object), yet raised
                // for a frame (that entry) the session or the peer's reader names.
                About::Nothing if frame.is_some() => mark_latest(&mut log, &raised_for),
                About::Nothing => None,
            };
            let text = format!("{} {}: {}", mark.section, mark.rule, mark.detail);
            // Its entry names the frame it marked (`marked`), so the log says which one.
            log.record_host(
                generation,
                Kind::Diagnostic,
                method,
                text,
                vec![mark],
                marked,
            )
        };
        self.inner.log_tick.send_replace(seq);
    }

    fn request_handler(&self, generation: u64) -> RequestHandler {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move |method: &str, params: Value| {
            let weak = weak.clone();
            let method = method.to_owned();
            let wire_id = mcpl::host::handled_request_id();
            Box::pin(async move {
                match weak.upgrade() {
                    Some(inner) => {
                        Engine { inner }
                            .server_request(generation, method, params, wire_id)
                            .await
                    }
                    None => Err(ErrorObject::internal("the inspector has ended")),
                }
            })
        })
    }

    /// A server → host request the grant admitted (§11, §12), sent under `wire_id`:
    /// answered automatically, or parked until the dashboard or the REPL answers it (bounded
    /// in number and time).
    async fn server_request(
        &self,
        generation: u64,
        method: String,
        params: Value,
        wire_id: Option<RequestId>,
    ) -> Result<Value, ErrorObject> {
        let since = timestamp_millis(SystemTime::now());
        let (tx, rx) = oneshot::channel();
        let auto = {
            let st = self.state();
            match (&st.auto_answer, method.as_str()) {
                (AutoAnswer::Off, _) => None,
                (_, "model/info") => Some(text_answer(&method, "mcpl-inspect-echo")),
                (AutoAnswer::Echo, _) => Some(text_answer(&method, &echo_text(&params))),
                (AutoAnswer::Text(t), _) => Some(text_answer(&method, t)),
            }
        };
        if let Some(result) = auto {
            let mut record = json!({ "method": method, "params": params, "since": since,
                                 "answer": result, "by": "auto", "generation": generation,
                                 "wireId": wire_id });
            bound_bytes(&mut record, &["params", "answer"]);
            push_bounded(&mut self.state().answered, record, MAX_HISTORY);
            self.changed();
            return Ok(result);
        }
        // Kept as events are, within MAX_EVENT_BYTES (cut before the lock): the params and
        // the suggested answer of up to MAX_PENDING requests of 16 MiB each were held whole.
        let requirement = mcpl::protocol::method_requirement(&method, Some(&params));
        let mut suggested = echo_text(&params);
        if suggested.len() > MAX_SUGGESTED {
            let mut end = MAX_SUGGESTED;
            while !suggested.is_char_boundary(end) {
                end -= 1;
            }
            suggested.truncate(end);
        }
        let mut kept = json!({ "params": params, "suggested": suggested });
        bound_bytes(&mut kept, &["params"]);
        let params = kept.get_mut("params").map(Value::take).unwrap_or_default();
        let id = {
            let mut st = self.state();
            if st.pending.len() >= MAX_PENDING {
                return Err(ErrorObject::internal(format!(
                    "the inspector already has {MAX_PENDING} requests waiting for an answer"
                )));
            }
            st.next_pending += 1;
            let id = st.next_pending;
            st.pending.insert(
                id,
                Pending {
                    method: method.clone(),
                    params,
                    suggested,
                    since,
                    generation,
                    requirement,
                    answer: tx,
                    wire_id: wire_id.clone(),
                },
            );
            id
        };
        // Dropped with this future: the library stops a handler whose request is no longer
        // the host's to answer (the server cancelled it, the session's own deadline
        // answered it, the connection closed), and the request leaves the waiting list.
        let _parked = Parked {
            engine: Arc::downgrade(&self.inner),
            id,
            method: method.clone(),
        };
        let _ = self
            .inner
            .ui
            .send(json!({ "type": "request", "id": id, "method": method, "wireId": wire_id }));
        self.changed();
        let outcome = match tokio::time::timeout(PENDING_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(ErrorObject::internal("the connection was restarted")),
            Err(_) => {
                self.state().pending.remove(&id);
                self.changed();
                Err(ErrorObject::internal("no answer was given in time"))
            }
        };
        outcome
    }

    /// Answers waiting request `id` with `answer`.
    pub fn answer(&self, id: u64, answer: Result<Value, ErrorObject>) -> Result<Value, String> {
        let p = self
            .state()
            .pending
            .remove(&id)
            .ok_or_else(|| format!("no request {id} is waiting"))?;
        let shown = match &answer {
            Ok(v) => json!({ "result": v }),
            Err(e) => json!({ "error": { "code": e.code, "message": e.message } }),
        };
        let mut record = json!({ "id": id, "method": p.method, "params": p.params, "since": p.since,
                             "answer": shown, "by": "user", "generation": p.generation,
                             "wireId": p.wire_id });
        // What the wire carries, not what was typed: the host's refusal in its place.
        if let Some(why) = p.revoked(self.session().as_ref()) {
            record["typed"] = record["answer"].take();
            record["answer"] = json!({ "error": { "code": -32002, "message": why } });
            record["by"] = json!("host");
        }
        bound_bytes(&mut record, &["params", "answer", "typed"]);
        let delivered = p.answer.send(answer).is_ok();
        push_bounded(&mut self.state().answered, record.clone(), MAX_HISTORY);
        self.changed();
        if delivered {
            Ok(record)
        } else {
            Err(format!("request {id} is no longer waiting"))
        }
    }
}

#[cfg(test)]
mod tests;
