//! A differential test of the async `host::HostSession` against the sans-I/O
//! `session::HostState` (issue #24): one generated server script, played to both, and what
//! each host does compared after every step.
//!
//! The server side is raw JSON lines. `HostSession` gets them over an in-memory pipe;
//! `HostState` gets the same lines through `Message::parse` and `handle_message`. The script
//! waits for the host's answer to each of its requests (a notification is followed by a
//! `ping`, whose answer says the dispatch loop has handled everything before it), so both
//! hosts see one order. Each case runs on a current-thread runtime, where a task the
//! dispatch loop wakes (a manifest fetch, a hook fan-out, a policy change) runs before the
//! script reads the answer the loop writes next. The host's own requests (`initialize`, policy Requests, manifest
//! fetches, hooks) are answered by the script, matched by method; their ids are each side's
//! own and never compared.
//!
//! Compared per step: the answer to the server's request (its result, or its error code),
//! the frames the host sent on its own (method and params, per round of answering), the
//! events (kind and key fields), the diagnostics (variant and key fields, never the wording
//! of a detail), the outcome of the application call of the step, `mode()`, `grant()`,
//! `is_ready()` and whether the connection was closed. Not compared (see `unordered`): the
//! order of the frames within one round after the handshake and of one step's diagnostics;
//! after a failed connect, anything but its outcome and frames (the session, with its
//! streams, is never handed out).
//!
//! No wall-clock timeouts decide anything: no request of either side is left unanswered,
//! and `HostState` is fed one fixed `now` (the §17.8 fetch bucket refills 0.2 tokens per
//! second, far slower than one case runs). A `GUARD` timeout only stops a side that would
//! wait forever for a frame the other side sent: the comparison then fails. Left out of the
//! generator: junk and unparseable lines (the peer's business, before any `Message` exists),
//! `inference/request` with `stream: true` (its chunks are the driver's, not `HostState`'s),
//! and silent/unanswered requests (timeouts).
//!
//! Three divergences it found are fixed and their inputs generated: two
//! `mcpl/manifestChanged` in a row (the follow-up fetch held behind a reduction, §17.8), a
//! fetched manifest read right behind a hook's answer (§5.4, §17.5) and enough unusable
//! fetches during the initial exchange to suspend MCPL (§17.5); each has a deterministic
//! test in `host_session.rs`.
#![cfg(feature = "runtime")]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mcpl::host::{
    before_inference, HostConfig, HostDiagnostic, HostError, HostEvent, HostSession, HostStreams,
    Injections, Mode, PolicyChange,
};
use mcpl::jsonrpc::Message;
use mcpl::peer::PeerConfig;
use mcpl::session::{ConnectError, HostOutput, HostState, StateError};
use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, Raw};

/// How long one side may wait for a frame the other side's run says is coming. Only a
/// failing comparison ever waits this long.
const GUARD: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// The script
// ---------------------------------------------------------------------------------------

/// The answer to one of the host's requests: a result, or an error with this code.
type Answer = Result<Value, i64>;

#[derive(Debug, Clone)]
enum Step {
    /// A server request (its id is `s<step>`; `null` params are left out).
    Request(String, Value),
    /// A server notification (`null` params are left out).
    Notify(String, Value),
    /// `mcpl/manifestChanged`, every `mcpl/manifest` fetch it prompts answered so; with
    /// `push/event` params, that push is written right behind the fetch answer.
    ManifestChanged(Answer, Option<Value>, bool),
    /// A response to no request of the host's (an error response when the id is `null`).
    Stray(Value),
    /// The application changes the policy; the Request is answered so; with `push/event`
    /// params, that push is written right behind the receipt.
    SetPolicy(Vec<String>, Answer, Option<Value>),
    /// The application runs a `context/beforeInference` hook, answered so; with a fetch
    /// answer, an `mcpl/manifestChanged` goes first and its fetch is answered right behind
    /// the hook's answer.
    Hook(Answer, Option<Answer>),
}

#[derive(Debug, Clone)]
struct Script {
    policy: Vec<String>,
    init: Answer,
    initial_policy: Answer,
    /// A `push/event` written right behind the answer to the initial policy Request.
    initial_behind: Option<Value>,
    /// Server messages written after `initialize` is answered and before the initial policy
    /// Request is (no application calls).
    early: Vec<Step>,
    steps: Vec<Step>,
}

/// What the script answers the host's requests with in one step. A request it was given no
/// answer for gets `{"accepted": true}`: the acceptance of a reduction told (§6.7), or a
/// fetched manifest that declares nothing.
#[derive(Default)]
struct Answers {
    init: Option<Answer>,
    policy: VecDeque<Answer>,
    fetch: Option<Answer>,
    hook: Option<Answer>,
    /// A server request written right behind the first answers the script gives, before
    /// anything else (its answer ends that round instead of a ping's).
    behind: Option<Value>,
}

fn behind_push(n: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": format!("{n}b"), "method": "push/event", "params": params })
}

impl Answers {
    fn answer(&mut self, method: &str) -> Answer {
        let given = match method {
            "initialize" => self.init.clone(),
            "featureSets/update" => self.policy.pop_front(),
            "mcpl/manifest" => self.fetch.clone(),
            "context/beforeInference" => self.hook.clone(),
            _ => Some(Err(-32601)),
        };
        given.unwrap_or_else(|| Ok(json!({ "accepted": true })))
    }
}

fn response(id: &Value, a: &Answer) -> Value {
    match a {
        Ok(v) => json!({ "jsonrpc": "2.0", "id": id, "result": v }),
        Err(code) => json!({ "jsonrpc": "2.0", "id": id,
                              "error": { "code": code, "message": "scripted error" } }),
    }
}

/// What the application answers `inference/request` and `model/info` with: a malformed
/// §11.3 result when the first message asks for one.
fn app_answer(method: &str, params: Option<&Value>) -> Value {
    let malformed =
        params.and_then(|p| p.pointer("/messages/0/content")) == Some(&json!("malformed"));
    match method {
        "inference/request" if malformed => json!({ "content": 5 }),
        "inference/request" => json!({ "content": "ok", "finishReason": "end_turn" }),
        _ => json!({ "model": "test-model" }),
    }
}

fn hook_params() -> Value {
    json!({ "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0, "userMessage": "hello" })
}

// ---------------------------------------------------------------------------------------
// What is compared
// ---------------------------------------------------------------------------------------

/// One step as one host handled it.
#[derive(Debug, Clone, PartialEq, Default)]
struct Rec {
    step: String,
    /// The answer to the step's server request: its result, or `error <code>`.
    reply: Option<String>,
    /// The answer to the request written right behind the script's answers.
    behind: Option<String>,
    /// The frames the host sent on its own, per round (a round ends at a sync answer).
    rounds: Vec<Vec<String>>,
    events: Vec<String>,
    diags: Vec<String>,
    /// The outcome of the step's application call (or of the connect).
    app: Option<String>,
    mode: String,
    grant: String,
    ready: bool,
    closed: bool,
}

fn norm_reply(v: &Value) -> String {
    match v.get("error") {
        Some(e) => format!("error {}", e["code"]),
        None => v["result"].to_string(),
    }
}

/// A frame the host sent on its own: method and params, without the id.
fn norm_frame(v: &Value) -> String {
    match v.get("method") {
        Some(m) => format!(
            "{}{} {}",
            if v.get("id").is_some() {
                "request "
            } else {
                "notify "
            },
            m.as_str().unwrap_or("?"),
            v.get("params").unwrap_or(&Value::Null)
        ),
        None => format!("response {v}"),
    }
}

fn norm_mode(m: &Mode) -> String {
    match m {
        Mode::Mcpl => "Mcpl".into(),
        Mode::McpOnly(mcpl::host::McpOnlyReason::PolicyFailed(_)) => "McpOnly(PolicyFailed)".into(),
        Mode::McpOnly(r) => format!("McpOnly({r:?})"),
    }
}

fn norm_event(e: &HostEvent) -> String {
    match e {
        HostEvent::Push {
            feature_set,
            event_id,
            ..
        } => format!("push {feature_set} {event_id}"),
        HostEvent::ChannelMessage {
            channel_id,
            message,
            ..
        } => format!("channel {channel_id} {message}"),
        HostEvent::ManifestChange(r) => format!("manifest {r:?}"),
        HostEvent::ModeChanged(m) => format!("mode {}", norm_mode(m)),
        HostEvent::InputEnded => "input ended".into(),
        other => format!("{other:?}"),
    }
}

/// The variant and the key fields; a detail's wording is not compared.
fn norm_diag(d: &HostDiagnostic) -> String {
    use mcpl::peer::Diagnostic as P;
    match d {
        HostDiagnostic::UnexpectedResponse { id } => format!("UnexpectedResponse {id}"),
        HostDiagnostic::Connection(P::UnknownResponse { id, .. }) => format!(
            "UnexpectedResponse {}",
            id.as_ref()
                .map_or("null".into(), |i| i.to_value().to_string())
        ),
        HostDiagnostic::UnexpectedMethod { method } => format!("UnexpectedMethod {method}"),
        HostDiagnostic::PrivilegedBeforeReady { method } => {
            format!("PrivilegedBeforeReady {method}")
        }
        HostDiagnostic::CapabilityDenied { method, capability } => {
            format!("CapabilityDenied {method} {capability:?}")
        }
        HostDiagnostic::BadParams { method, .. } => format!("BadParams {method}"),
        HostDiagnostic::ManifestFinding { code, path, .. } => {
            format!("ManifestFinding {code:?} {path}")
        }
        other => {
            let s = format!("{other:?}");
            let end = s.find([' ', '(', '{']).unwrap_or(s.len());
            s[..end].to_owned()
        }
    }
}

fn norm_change(c: &PolicyChange) -> String {
    format!(
        "changed narrowed={:?} activated={:?} not_activated={:?} receipt={:?} grant={:?}",
        c.narrowed, c.activated, c.not_activated, c.receipt, c.grant
    )
}

fn norm_connect_session(r: &Result<(), HostError>) -> String {
    match r {
        Ok(()) => "connected".into(),
        Err(HostError::Peer(mcpl::peer::PeerError::Remote(e))) => {
            format!("connect failed: remote {}", e.code)
        }
        Err(HostError::Refused(_)) => "connect failed: refused".into(),
        Err(HostError::BadInitialize(_)) => "connect failed: bad initialize".into(),
        Err(HostError::TooManyFeatureSets { .. }) => "connect failed: too many sets".into(),
        Err(e) => format!("connect failed: {e:?}"),
    }
}

fn norm_connect_state(r: &Result<(), ConnectError>) -> String {
    match r {
        Ok(()) => "connected".into(),
        Err(ConnectError::Remote(e)) => format!("connect failed: remote {}", e.code),
        Err(ConnectError::Refused) => "connect failed: refused".into(),
        Err(ConnectError::BadInitialize(_)) => "connect failed: bad initialize".into(),
        Err(ConnectError::TooManyFeatureSets { .. }) => "connect failed: too many sets".into(),
        Err(e) => format!("connect failed: {e:?}"),
    }
}

fn norm_set_policy_err(e: String) -> String {
    format!("set_policy refused: {e}")
}

/// A hook's outcome: the accepted injections by position, how many were rejected, whether
/// it failed (`not consulted` when the hook does not apply to the connection).
fn norm_hook(
    system: &[&Value],
    before: &[&Value],
    after: &[&Value],
    rejected: usize,
    failed: bool,
) -> String {
    format!("hook system={system:?} before={before:?} after={after:?} rejected={rejected} failed={failed}")
}

fn norm_injections(i: &Injections) -> String {
    if i.consulted.is_empty() {
        return "hook not consulted".into();
    }
    fn v(a: &[mcpl::host::AcceptedInjection]) -> Vec<&Value> {
        a.iter().map(|x| &x.injection).collect()
    }
    norm_hook(
        &v(&i.system),
        &v(&i.before_user),
        &v(&i.after_user),
        i.rejected.len(),
        !i.failures.is_empty(),
    )
}

fn norm_verdict(v: &mcpl::session::rules::HookVerdict) -> String {
    use mcpl::capability::Capability as C;
    let by = |c: C| {
        v.accepted
            .iter()
            .filter(|(k, _)| *k == c)
            .map(|(_, i)| i)
            .collect::<Vec<_>>()
    };
    let after: Vec<&Value> = v
        .accepted
        .iter()
        .filter(|(k, _)| !matches!(k, C::InjectSystem | C::InjectBeforeUser))
        .map(|(_, i)| i)
        .collect();
    norm_hook(
        &by(C::InjectSystem),
        &by(C::InjectBeforeUser),
        &after,
        v.rejected.len(),
        v.failure.is_some(),
    )
}

// ---------------------------------------------------------------------------------------
// The two hosts
// ---------------------------------------------------------------------------------------

struct StateSide {
    st: HostState,
    now: Instant,
    frames: VecDeque<Value>,
    events: Vec<String>,
    diags: Vec<String>,
    app: Option<String>,
    closed: bool,
}

impl StateSide {
    /// Drains the outputs; answers the application requests as the session's handler does.
    fn collect(&mut self) {
        while let Some(o) = self.st.poll_output() {
            match o {
                HostOutput::Transmit(_) => self.frames.push_back(
                    serde_json::from_str(&o.frame().expect("a frame")).expect("valid JSON"),
                ),
                HostOutput::Event(e) => self.events.push(norm_event(&e)),
                HostOutput::Diagnostic(d) => self.diags.push(norm_diag(&d)),
                HostOutput::Connected(r) => self.app = Some(norm_connect_state(&r)),
                HostOutput::Request { id, method, params } => {
                    self.st
                        .answer(id, Ok(app_answer(&method, params.as_ref())))
                        .expect("a handed-out request is answerable");
                }
                HostOutput::PolicyChanged(c) => self.app = Some(norm_change(&c)),
                HostOutput::Hook { verdict, .. } => self.app = Some(norm_verdict(&verdict)),
                HostOutput::Close => self.closed = true,
                // The script makes no application request of its own (`HostState::request`):
                // an answer to one would be a difference the comparison must show.
                // Nor is a cancel or an answer's deadline possible: every request is answered
                // as it is handed out.
                other @ (HostOutput::Response { .. }
                | HostOutput::RequestTimedOut { .. }
                | HostOutput::Cancelled { .. }
                | HostOutput::AnswerTimedOut { .. }) => {
                    self.diags.push(format!("UNEXPECTED {other:?}"))
                }
            }
        }
    }
}

struct SessionSide {
    raw: Raw,
    connect: Option<JoinHandle<Result<(HostSession, HostStreams), HostError>>>,
    session: Option<HostSession>,
    streams: Option<HostStreams>,
    call: Option<JoinHandle<String>>,
    /// Set when the pipe ended.
    eof: bool,
}

impl SessionSide {
    async fn next_frame(&mut self) -> Option<Value> {
        if self.eof {
            return None;
        }
        match tokio::time::timeout(GUARD, self.raw.lines.next_line()).await {
            Ok(Ok(Some(line))) => Some(serde_json::from_str(&line).expect("host writes JSON")),
            Ok(_) => {
                self.eof = true;
                None
            }
            Err(_) => None,
        }
    }
}

enum Side {
    State(Box<StateSide>),
    Session(Box<SessionSide>),
}

impl Side {
    async fn write(&mut self, v: Value) {
        match self {
            Side::State(s) => {
                let msg = Message::parse(&v.to_string()).expect("the script writes JSON-RPC");
                s.st.handle_message(s.now, msg);
                s.collect();
            }
            Side::Session(s) => {
                use tokio::io::AsyncWriteExt;
                let line = format!("{v}\n");
                // A closed host may have dropped its end: the comparison shows it.
                let _ = s.raw.write.write_all(line.as_bytes()).await;
            }
        }
    }

    /// The frames up to `sync`'s answer (or, without one, `expect` frames): that answer, if
    /// it came, and the host's frames other than it. The session side waits for `expect`
    /// frames besides the answer (the count the state side produced).
    async fn round(&mut self, sync: Option<&Value>, expect: usize) -> (Option<Value>, Vec<Value>) {
        let is_sync =
            |f: &Value| f.get("method").is_none() && sync.is_some_and(|id| f.get("id") == Some(id));
        match self {
            Side::State(s) => {
                s.collect();
                let mut answer = None;
                let mut others = Vec::new();
                for f in s.frames.drain(..) {
                    if answer.is_none() && is_sync(&f) {
                        answer = Some(f);
                    } else {
                        others.push(f);
                    }
                }
                (answer, others)
            }
            Side::Session(s) => {
                let mut answer = None;
                let mut others = Vec::new();
                while (sync.is_some() && answer.is_none()) || others.len() < expect {
                    let Some(f) = s.next_frame().await else {
                        break;
                    };
                    if answer.is_none() && is_sync(&f) {
                        answer = Some(f);
                    } else {
                        others.push(f);
                    }
                }
                (answer, others)
            }
        }
    }

    fn closed(&self) -> bool {
        match self {
            Side::State(s) => s.closed,
            Side::Session(s) => {
                s.eof
                    || s.session
                        .as_ref()
                        .is_some_and(|x| x.peer().close_reason().is_some())
            }
        }
    }

    fn set_policy(&mut self, patterns: Vec<String>) {
        match self {
            Side::State(s) => {
                if let Err(e) = s.st.set_policy(s.now, patterns) {
                    let e = match e {
                        StateError::McpOnly(_) => "McpOnly".into(),
                        StateError::Policy(_) => "Policy".into(),
                        other => format!("{other:?}"),
                    };
                    s.app = Some(norm_set_policy_err(e));
                }
                s.collect();
            }
            Side::Session(s) => {
                let Some(session) = s.session.clone() else {
                    return;
                };
                s.call = Some(tokio::spawn(async move {
                    match session.set_policy(patterns).await {
                        Ok(c) => norm_change(&c),
                        Err(HostError::McpOnly(_)) => norm_set_policy_err("McpOnly".into()),
                        Err(HostError::Policy(_)) => norm_set_policy_err("Policy".into()),
                        Err(e) => norm_set_policy_err(format!("{e:?}")),
                    }
                }));
            }
        }
    }

    fn hook(&mut self) {
        match self {
            Side::State(s) => {
                if s.st.before_inference(s.now, hook_params()).is_none() {
                    s.app = Some("hook not consulted".into());
                }
                s.collect();
            }
            Side::Session(s) => {
                let Some(session) = s.session.clone() else {
                    return;
                };
                s.call = Some(tokio::spawn(async move {
                    norm_injections(&before_inference(&[&session], &hook_params()).await)
                }));
            }
        }
    }

    /// The step's application outcome, events and diagnostics, and the state after it.
    async fn finish(&mut self, rec: &mut Rec) {
        match self {
            Side::State(s) => {
                s.collect();
                rec.app = s.app.take().or(rec.app.take());
                rec.events = std::mem::take(&mut s.events);
                rec.diags = std::mem::take(&mut s.diags);
                rec.mode = norm_mode(s.st.mode());
                rec.grant = format!("{:?}", s.st.grant());
                rec.ready = s.st.is_ready();
            }
            Side::Session(s) => {
                if let Some(h) = s.connect.take() {
                    let r = match tokio::time::timeout(GUARD, h).await {
                        Ok(joined) => joined.expect("connect does not panic"),
                        Err(_) => Err(HostError::BadInitialize("connect never ended".into())),
                    };
                    let r = r.map(|(session, streams)| {
                        s.session = Some(session);
                        s.streams = Some(streams);
                    });
                    rec.app = Some(norm_connect_session(&r));
                }
                if let Some(h) = s.call.take() {
                    rec.app = Some(match tokio::time::timeout(GUARD, h).await {
                        Ok(joined) => joined.expect("the call does not panic"),
                        Err(_) => "the call never ended".into(),
                    });
                }
                if let Some(st) = s.streams.as_mut() {
                    while let Ok(e) = st.events.try_recv() {
                        rec.events.push(norm_event(&e));
                    }
                    while let Ok(d) = st.diagnostics.try_recv() {
                        rec.diags.push(norm_diag(&d));
                    }
                }
                match &s.session {
                    Some(x) => {
                        rec.mode = norm_mode(&x.mode());
                        rec.grant = format!("{:?}", x.grant());
                        rec.ready = x.is_ready();
                    }
                    None => {
                        // Never connected: as a state machine that never came up.
                        rec.mode = norm_mode(&Mode::Mcpl);
                        rec.grant = format!("{:?}", mcpl::capability::Grant::none());
                    }
                }
            }
        }
        rec.closed = self.closed();
    }
}

/// Answers the host's requests among `frames` and pings until a round brings none; records
/// every round. `sync` is the id whose answer ends the first round, `behind_id` the id of a
/// request written right behind the script's answers (its answer is recorded), `expected`
/// the state side's record of the step (for the session side).
async fn settle(
    side: &mut Side,
    answers: &mut Answers,
    mut sync: Option<Value>,
    mut behind_id: Option<Value>,
    expected: Option<&Rec>,
    rec: &mut Rec,
    pings: &mut u64,
) {
    let mut round = 0;
    loop {
        let expect = expected
            .and_then(|e| e.rounds.get(round).map(Vec::len))
            .unwrap_or(0);
        let (answer, frames) = side.round(sync.as_ref(), expect).await;
        if round == 0 && rec.step.contains("Request(") {
            rec.reply = answer.as_ref().map(norm_reply);
        }
        if sync.is_some() && sync == behind_id {
            rec.behind = answer.as_ref().map(norm_reply);
        }
        rec.rounds.push(frames.iter().map(norm_frame).collect());
        let mut requests: Vec<&Value> = frames
            .iter()
            .filter(|f| f.get("method").is_some() && f.get("id").is_some())
            .collect();
        // One order on both sides whatever order the host wrote them in: a hook's answer first.
        requests.sort_by_key(|r| r["method"] != "context/beforeInference");
        if requests.is_empty() {
            return;
        }
        for r in requests {
            let a = answers.answer(r["method"].as_str().unwrap_or(""));
            side.write(response(&r["id"], &a)).await;
        }
        round += 1;
        let again = match (&*side, expected) {
            (_, Some(e)) => e.rounds.len() > round,
            (s, None) => !s.closed(),
        };
        if !again {
            return;
        }
        sync = Some(match answers.behind.take() {
            Some(frame) => {
                let id = frame["id"].clone();
                behind_id = Some(id.clone());
                side.write(frame).await;
                id
            }
            None => ping(side, pings).await,
        });
    }
}

async fn ping(side: &mut Side, pings: &mut u64) -> Value {
    *pings += 1;
    let id = json!(format!("p{pings}"));
    side.write(json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }))
        .await;
    id
}

/// Writes what starts `step` (`n` names its request id); returns the id whose answer ends
/// the step's first round.
async fn trigger(
    side: &mut Side,
    step: &Step,
    n: &str,
    answers: &mut Answers,
    pings: &mut u64,
) -> Value {
    match step {
        Step::Request(method, params) => {
            let id = json!(n);
            let mut m = json!({ "jsonrpc": "2.0", "id": id, "method": method });
            if !params.is_null() {
                m["params"] = params.clone();
            }
            side.write(m).await;
            id
        }
        Step::Notify(method, params) => {
            let mut m = json!({ "jsonrpc": "2.0", "method": method });
            if !params.is_null() {
                m["params"] = params.clone();
            }
            side.write(m).await;
            ping(side, pings).await
        }
        Step::ManifestChanged(fetch, behind, twice) => {
            answers.fetch = Some(fetch.clone());
            answers.behind = behind.clone().map(|p| behind_push(n, p));
            // Twice in a row: the second is folded into the fetch in flight (§17.8).
            for _ in 0..if *twice { 2 } else { 1 } {
                side.write(json!({ "jsonrpc": "2.0", "method": "mcpl/manifestChanged",
                                   "params": { "revision": "r2" } }))
                    .await;
            }
            ping(side, pings).await
        }
        Step::Stray(id) => {
            let m = if id.is_null() {
                json!({ "jsonrpc": "2.0", "id": null,
                        "error": { "code": -32600, "message": "scripted" } })
            } else {
                json!({ "jsonrpc": "2.0", "id": id, "result": {} })
            };
            side.write(m).await;
            ping(side, pings).await
        }
        Step::SetPolicy(patterns, answer, behind) => {
            answers.policy.push_back(answer.clone());
            answers.behind = behind.clone().map(|p| behind_push(n, p));
            side.set_policy(patterns.clone());
            ping(side, pings).await
        }
        Step::Hook(answer, change) => {
            answers.hook = Some(answer.clone());
            if let Some(fetch) = change {
                answers.fetch = Some(fetch.clone());
                side.write(json!({ "jsonrpc": "2.0", "method": "mcpl/manifestChanged",
                                   "params": { "revision": "r2" } }))
                    .await;
            }
            side.hook();
            ping(side, pings).await
        }
    }
}

/// One step of the script, played until the host has nothing more to ask (`n` names the
/// step's request ids, `expected` is the state side's record of it).
async fn run_step(
    side: &mut Side,
    step: &Step,
    n: &str,
    label: String,
    expected: Option<&Rec>,
    pings: &mut u64,
) -> Rec {
    let mut rec = Rec {
        step: label,
        ..Rec::default()
    };
    let mut answers = Answers::default();
    let sync = trigger(side, step, n, &mut answers, pings).await;
    settle(
        side,
        &mut answers,
        Some(sync),
        None,
        expected,
        &mut rec,
        pings,
    )
    .await;
    rec
}

fn requests(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f.get("method").is_some() && f.get("id").is_some())
        .cloned()
        .collect()
}

/// Plays `script` to one host; the session side follows the state side's `expected` record
/// (how many frames each round brings, which steps ran).
async fn play(mut side: Side, script: &Script, expected: Option<&[Rec]>) -> Vec<Rec> {
    let mut recs = Vec::new();
    let mut pings = 0;
    let exp = |i: usize| expected.and_then(|e| e.get(i));
    // The handshake: `initialize` answered, the frames that follows (the initial policy
    // Request of an MCPL server, left unanswered for now).
    let mut answers = Answers {
        init: Some(script.init.clone()),
        ..Answers::default()
    };
    let mut hs = Rec {
        step: "handshake".into(),
        ..Rec::default()
    };
    let first = exp(0).map_or(1, |e| e.rounds.first().map_or(0, Vec::len));
    let (_, f0) = side.round(None, first).await;
    hs.rounds.push(f0.iter().map(norm_frame).collect());
    for r in requests(&f0) {
        let a = answers.answer(r["method"].as_str().unwrap_or(""));
        side.write(response(&r["id"], &a)).await;
    }
    let more = match exp(0) {
        Some(e) => e.rounds.len() > 1,
        None => !side.closed(),
    };
    let mut deferred = Vec::new();
    if more {
        let sync = ping(&mut side, &mut pings).await;
        let expect = exp(0).and_then(|e| e.rounds.get(1)).map_or(0, Vec::len);
        let (_, f1) = side.round(Some(&sync), expect).await;
        hs.rounds.push(f1.iter().map(norm_frame).collect());
        deferred = requests(&f1);
    }
    recs.push(hs);
    // Server messages before the initial policy Request is answered (§5.3).
    for (i, step) in script.early.iter().enumerate() {
        let label = format!("early {step:?}");
        let run = match expected {
            Some(e) => e.get(recs.len()).is_some_and(|r| r.step == label),
            None => !side.closed(),
        };
        if !run {
            continue;
        }
        let e = exp(recs.len());
        let rec = run_step(&mut side, step, &format!("e{i}"), label, e, &mut pings).await;
        recs.push(rec);
    }
    // The initial policy exchange and any reduction told; the connect's outcome.
    let mut answers = Answers {
        policy: VecDeque::from([script.initial_policy.clone()]),
        ..Answers::default()
    };
    let mut rec = Rec {
        step: "connect".into(),
        ..Rec::default()
    };
    for r in &deferred {
        let a = answers.answer(r["method"].as_str().unwrap_or(""));
        side.write(response(&r["id"], &a)).await;
    }
    let e = exp(recs.len());
    let go = match e {
        Some(e) => !e.rounds.is_empty(),
        None => !side.closed(),
    };
    if go {
        // §5.3: a push written right behind the receipt is read after it.
        let (sync, behind) = match &script.initial_behind {
            Some(p) => {
                let frame = behind_push("i", p.clone());
                let id = frame["id"].clone();
                side.write(frame).await;
                (id.clone(), Some(id))
            }
            None => (ping(&mut side, &mut pings).await, None),
        };
        settle(
            &mut side,
            &mut answers,
            Some(sync),
            behind,
            e,
            &mut rec,
            &mut pings,
        )
        .await;
    }
    side.finish(&mut rec).await;
    let up = rec.app.as_deref() == Some("connected");
    if !up {
        // A session that failed to connect does not exist, nor do its streams (what it
        // reported is only logged): nothing more to observe.
        (rec.mode, rec.grant, rec.ready, rec.closed) = ("-".into(), "-".into(), false, true);
        (rec.events, rec.diags) = (Vec::new(), Vec::new());
    }
    recs.push(rec);
    if !up {
        return recs;
    }
    for (i, step) in script.steps.iter().enumerate() {
        if side.closed() || expected.is_some_and(|e| e.len() <= recs.len()) {
            break;
        }
        let label = format!("{step:?}");
        let e = exp(recs.len());
        let mut rec = run_step(&mut side, step, &format!("s{i}"), label, e, &mut pings).await;
        side.finish(&mut rec).await;
        recs.push(rec);
    }
    recs
}

fn config(policy: &[String]) -> HostConfig {
    HostConfig {
        policy: policy.to_vec(),
        request_handler: Some(Arc::new(|method: &str, params: Value| {
            let answer = app_answer(method, Some(&params));
            Box::pin(async move { Ok(answer) })
        })),
        // Bounds small enough for a short script to cross (the same on both sides).
        dedupe_window: 2,
        max_feature_sets: 4,
        max_channels: 1,
        suspend_after_failures: 2,
        manifest_fetch_burst: 2,
        ..HostConfig::default()
    }
}

async fn run_both(script: &Script) -> (Vec<Rec>, Vec<Rec>) {
    let cfg = config(&script.policy);
    let now = Instant::now();
    let st = HostState::new(cfg.rules(), now, SystemTime::now()).expect("the policy parses");
    let mut state = StateSide {
        st,
        now,
        frames: VecDeque::new(),
        events: Vec::new(),
        diags: Vec::new(),
        app: None,
        closed: false,
    };
    state.st.start(now);
    let by_state = play(Side::State(Box::new(state)), script, None).await;

    let (peer, incoming, raw) = raw::raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let session = SessionSide {
        raw,
        connect: Some(connect),
        session: None,
        streams: None,
        call: None,
        eof: false,
    };
    let by_session = play(Side::Session(Box::new(session)), script, Some(&by_state)).await;
    (by_state, by_session)
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

/// A manifest declaring a subset of the capabilities and feature sets (a set may use a
/// capability the manifest does not declare: a finding).
fn manifest(bits: u8, sets: u8) -> Value {
    let mut m = json!({ "version": "0.5" });
    if bits & 1 != 0 {
        m["pushEvents"] = json!(true);
    }
    if bits & 2 != 0 {
        m["inferenceRequest"] = json!(true);
    }
    if bits & 4 != 0 {
        m["contextHooks"] = json!({ "beforeInference": {
            "observe": true, "inject": { "system": true, "beforeUser": true } } });
    }
    if bits & 8 != 0 {
        m["channels"] = json!({ "register": true, "incoming": true });
    }
    if bits & 16 != 0 {
        m["modelInfo"] = json!(true);
    }
    let all = [
        (
            "alerts",
            json!({ "description": "Alerts", "uses": ["pushEvents"] }),
        ),
        (
            "assist",
            json!({ "description": "Assist", "uses": ["inferenceRequest"] }),
        ),
        (
            "memory",
            json!({ "description": "Memory", "uses": ["contextHooks.beforeInference.observe",
                     "contextHooks.beforeInference.inject.beforeUser"] }),
        ),
        (
            "chat",
            json!({ "description": "Chat", "uses": ["channels.register", "channels.incoming"] }),
        ),
        // A fifth set: past `config`'s bound of four.
        (
            "extra",
            json!({ "description": "Extra", "uses": ["pushEvents"] }),
        ),
    ];
    let mut fs = serde_json::Map::new();
    for (i, (name, decl)) in all.iter().enumerate() {
        if sets & (1 << i) != 0 {
            fs.insert((*name).into(), decl.clone());
        }
    }
    m["featureSets"] = Value::Object(fs);
    m
}

/// Everything declared more often than not, so that most scripts exercise a wide grant.
fn manifest_bits() -> impl Strategy<Value = (u8, u8)> {
    (
        prop_oneof![2 => Just(0xff), 1 => any::<u8>()],
        prop_oneof![2 => Just(0x0f), 1 => any::<u8>()],
    )
}

fn init_answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        6 => manifest_bits().prop_map(|(b, s)| Ok(init_result(Some(manifest(b, s))))),
        1 => Just(Ok(init_result(None))),
        // Malformed: no capabilities object, an MCPL member that is not an object, a
        // legacy feature-set array, an error.
        1 => prop_oneof![
            Just(Ok(json!({ "protocolVersion": "2024-11-05" }))),
            Just(Ok(init_result(Some(json!(5))))),
            Just(Ok(init_result(Some(json!({ "version": "0.5", "pushEvents": true,
                                             "featureSets": ["alerts"] }))))),
            Just(Err(-32603)),
        ],
    ]
}

fn policy_answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        10 => Just(Ok(json!({ "accepted": true }))),
        1 => Just(Ok(json!({ "accepted": true,
                             "unavailableFeatures": [{ "featureSet": "alerts" }] }))),
        1 => Just(Ok(json!({ "accepted": false, "fallback": "mcp-only", "reason": "no" }))),
        1 => Just(Ok(json!({ "accepted": false, "fallback": "close", "reason": "no" }))),
        1 => Just(Err(-32601)),
        1 => Just(Err(-32603)),
        1 => prop_oneof![
            Just(Ok(json!({ "accepted": "yes" }))),
            Just(Ok(json!([]))),
            Just(Ok(json!({ "accepted": false }))),
        ],
    ]
}

fn host_policy() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        // §5.4: a `*` matches one segment.
        4 => Just(vec!["*", "*.*", "*.*.*", "*.*.*.*"]),
        1 => Just(vec!["pushEvents"]),
        1 => Just(vec!["pushEvents", "channels.*"]),
        1 => Just(vec!["contextHooks.*.*", "contextHooks.*.*.*", "inferenceRequest", "modelInfo"]),
        1 => Just(vec![]),
    ]
    .prop_map(|v| v.into_iter().map(String::from).collect())
}

fn push_params() -> impl Strategy<Value = Value> {
    let event = |fs: &str, id: String| {
        json!({ "featureSet": fs, "eventId": id, "timestamp": "2026-01-01T00:00:00Z",
                "payload": { "content": [{ "type": "text", "text": "hi" }] } })
    };
    prop_oneof![
        4 => (0u8..4).prop_map(move |i| event("alerts", format!("e{i}"))),
        1 => Just(event("ghost", "g1".into())),
        1 => Just(json!({ "featureSet": 5 })),
        1 => Just(event("alerts", "x".repeat(1100))),
    ]
}

/// Sometimes a fetched manifest read right behind a hook's answer: the verdict is judged
/// under the manifest in force where the answer is read (§5.4, §17.5).
fn change_behind_hook() -> impl Strategy<Value = Option<Answer>> {
    prop::option::of(fetch_answer())
}

/// Sometimes a `push/event` to write right behind an answer of the script's.
fn behind() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(push_params())
}

/// The answer to an `mcpl/manifest` fetch: a manifest (revoking or widening against the one
/// in force), an unparseable one, an error.
fn fetch_answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        manifest_bits().prop_map(|(b, s)| Ok(manifest(b, s))),
        Just(Ok(json!({ "version": "0.5", "featureSets": 5 }))),
        Just(Ok(json!("not a manifest"))),
        Just(Err(-32603)),
    ]
}

fn descriptor() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(json!({ "id": "discord:acme/general", "type": "discord",
                          "direction": "bidirectional" })),
        1 => Just(json!({ "id": "discord:acme/other", "type": "discord",
                          "direction": "inbound" })),
        1 => Just(json!({ "id": "", "type": "discord", "direction": "bidirectional" })),
        1 => Just(json!({ "id": "discord:acme/x", "direction": "inbound" })),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let req = |m: &str, p: Value| Step::Request(m.into(), p);
    prop_oneof![
        6 => push_params().prop_map(move |p| Step::Request("push/event".into(), p)),
        2 => prop_oneof![
            Just(req("inference/request", json!({ "featureSet": "assist",
                "messages": [{ "role": "user", "content": "hi" }] }))),
            Just(req("inference/request", json!({ "featureSet": "ghost",
                "messages": [{ "role": "user", "content": "hi" }] }))),
            Just(req("model/info", json!({}))),
            Just(req("inference/request", json!({ "featureSet": "assist",
                "messages": [{ "role": "user", "content": "malformed" }] }))),
        ],
        3 => (descriptor(), any::<bool>()).prop_map(|(d, notify)| {
            let p = json!({ "channels": [d] });
            if notify { Step::Notify("channels/register".into(), p) }
            else { Step::Request("channels/register".into(), p) }
        }),
        1 => prop_oneof![
            Just(req("channels/changed", json!({ "removed": ["discord:acme/general"] }))),
            Just(req("channels/changed", json!({ "updated": [{ "id": "discord:acme/general",
                "type": "discord", "direction": "inbound" }] }))),
            Just(Step::Notify("channels/changed".into(),
                json!({ "added": [{ "id": "", "type": "x", "direction": "inbound" }] }))),
            Just(req("channels/list", json!({}))),
            Just(Step::Notify("channels/register".into(), json!({ "channels": 5 }))),
            Just(Step::Notify("channels/changed".into(), json!({ "removed": 5 }))),
            Just(Step::Notify("channels/changed".into(),
                json!({ "removed": ["discord:acme/general"] }))),
        ],
        2 => prop_oneof![
            Just(req("channels/incoming", json!({ "messages": [{
                "channelId": "discord:acme/general", "messageId": "m1", "content": "hi" }] }))),
            Just(req("channels/incoming", json!({ "messages": [{
                "channelId": "discord:acme/nowhere", "messageId": "m2", "content": "hi" }] }))),
        ],
        2 => (fetch_answer(), behind(), any::<bool>())
            .prop_map(|(a, b, twice)| Step::ManifestChanged(a, b, twice)),
        2 => prop_oneof![
            Just(req("foo/bar", json!({}))),
            Just(Step::Notify("foo/bar".into(), json!({}))),
            Just(req("context/beforeInference", json!({}))),
            Just(req("featureSets/update", json!({}))),
            Just(Step::Notify("inference/lifecycle".into(), json!({}))),
            Just(Step::Notify("notifications/tools/list_changed".into(), json!({}))),
            Just(Step::Notify("notifications/progress".into(), json!({}))),
            Just(req("ping", json!({}))),
            push_params().prop_map(|p| Step::Notify("push/event".into(), p)),
            Just(req("push/event", Value::Null)),
            Just(req("channels/register", Value::Null)),
            Just(req("inference/request", Value::Null)),
            Just(Step::Notify("channels/register".into(), Value::Null)),
            Just(Step::Notify("mcpl/manifestChanged".into(), Value::Null)),
            Just(req("initialize", json!({}))),
            Just(Step::Notify("notifications/initialized".into(), Value::Null)),
            // A method in the form it does not have.
            Just(req("mcpl/manifestChanged", json!({}))),
            Just(req("notifications/tools/list_changed", json!({}))),
            Just(req("inference/lifecycle", json!({}))),
            Just(Step::Notify("ping".into(), Value::Null)),
            Just(Step::Notify("channels/incoming".into(), json!({ "messages": [] }))),
            Just(Step::Notify("inference/request".into(), json!({}))),
            Just(Step::Notify("channels/list".into(), Value::Null)),
        ],
        1 => prop_oneof![Just(json!(999)), Just(json!("zz")), Just(Value::Null), Just(json!(1)),
                         Just(json!(2)), Just(json!(3))]
            .prop_map(Step::Stray),
        2 => (
            prop_oneof![4 => host_policy(), 1 => Just(vec!["push*".to_string()])],
            policy_answer(),
            behind(),
        )
            .prop_map(|(p, a, b)| Step::SetPolicy(p, a, b)),
        3 => (prop_oneof![
            Just(Ok(json!({ "featureSet": "memory", "contextInjections": [
                { "namespace": "m", "position": "beforeUser", "content": "ctx" },
                { "namespace": "m", "position": "system", "content": "sys" }] }))),
            Just(Ok(json!({ "contextInjections": 5 }))),
            Just(Ok(json!({ "featureSet": "ghost", "contextInjections": [
                { "namespace": "m", "position": "afterUser", "content": "late" },
                { "namespace": "m", "position": "sideways", "content": "?" }] }))),
            Just(Ok(json!([]))),
            Just(Err(-32603)),
        ], change_behind_hook())
            .prop_map(|(a, c)| Step::Hook(a, c)),
    ]
}

/// The steps that may come before the initial receipt: no application calls. Fetches that
/// fail here count towards suspension, which applies where the receipt is read (§17.5).
fn early_steps(steps: Vec<Step>) -> Vec<Step> {
    steps
        .into_iter()
        .filter(|s| {
            matches!(
                s,
                Step::ManifestChanged(..) | Step::Request(..) | Step::Notify(..) | Step::Stray(_)
            )
        })
        .collect()
}

fn script() -> impl Strategy<Value = Script> {
    (
        host_policy(),
        init_answer(),
        (policy_answer(), behind()),
        prop::collection::vec(step(), 0..3),
        prop::collection::vec(step(), 0..16),
    )
        .prop_map(
            |(policy, init, (initial_policy, initial_behind), early, steps)| Script {
                policy,
                init,
                initial_policy,
                initial_behind,
                early: early_steps(early),
                steps,
            },
        )
}

/// `rec` without the order the async session cannot fix: of the frames in one round after
/// the handshake (each of its own tasks, an application call's among them, writes its own),
/// and of the diagnostics of one step (a hook's verdict is reported when the fan-out
/// resumes, after the dispatch loop went on). What each frame and diagnostic is, and how
/// many, is still compared, as is the order of the events.
fn unordered(rec: &Rec) -> Rec {
    let mut r = rec.clone();
    if r.step != "handshake" {
        for round in &mut r.rounds {
            round.sort();
        }
    }
    r.diags.sort();
    r
}

fn compare(script: &Script) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (by_state, by_session) = rt.block_on(run_both(script));
    for (i, (a, b)) in by_state.iter().zip(&by_session).enumerate() {
        prop_assert_eq!(
            unordered(a),
            unordered(b),
            "step {} differs (left HostState, right HostSession)",
            i
        );
    }
    prop_assert_eq!(by_state.len(), by_session.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Issue #24: the same server script, the same host behaviour.
    #[test]
    fn host_session_and_host_state_agree(script in script()) {
        compare(&script)?;
    }
}
