//! A third party's own drivers for the sans-I/O state machines (`mcpl::session`), written
//! from the public API and its docs alone: a blocking host driver and a blocking server
//! driver, each one thread over one end of a `UnixStream::pair()`, with a reader thread
//! turning lines into inputs and `recv_timeout` until [`HostState::poll_timeout`] /
//! [`ServerState::poll_timeout`] as the only timer. No tokio, no sleeps: every wait is on
//! an output the other side must produce (bounded by a generous guard), or on a timeout the
//! machines themselves set.
//!
//! One session end to end over the wire: initialize, the initial policy and its grant, a
//! `push/event`, a `tools/call`, `context/beforeInference` answered and timed out (fail-open,
//! §10.6) with its late answer reported, a `model/info` the host's application never
//! answers in time (the server's request timeout), lifecycle turns ended by a terminal, by
//! the server's safety timeout (§10.5) and by the close, and the close itself.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use mcpl::capability::Capability;
use mcpl::jsonrpc::{ErrorObject, Message, RequestId};
use mcpl::lifecycle::{LifecycleConfig, TurnEvent, TurnOutcome};
use mcpl::session::{
    HostDiagnostic, HostEvent, HostOutput, HostRules, HostState, Mode, ServerOutput, ServerRules,
    ServerState, Terminal,
};
use serde_json::{json, Map, Value};

/// How long a test waits for an output before it calls the session hung.
const GUARD: Duration = Duration::from_secs(5);

/// One input of a driver loop: a line read, the end of the stream, or an application call.
enum Input<C> {
    Frame(String),
    Eof,
    Call(C),
}

/// Reads `stream` line by line into `tx` (a reader thread, as a blocking driver has one).
fn spawn_reader<C: Send + 'static>(stream: UnixStream, tx: Sender<Input<C>>) -> JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(Input::Frame(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(Input::Eof);
    })
}

/// The next input, or `None` once `poll_timeout`'s deadline passed first: the one timer of a
/// driver loop.
fn next_input<C>(rx: &Receiver<Input<C>>, deadline: Option<Instant>) -> Option<Input<C>> {
    match deadline {
        None => rx.recv().ok(),
        Some(at) => {
            let wait = at.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(i) => Some(i),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Input::Eof),
            }
        }
    }
}

fn write_line(w: &mut UnixStream, text: &str) -> bool {
    w.write_all(text.as_bytes()).is_ok() && w.write_all(b"\n").is_ok()
}

// ---------------------------------------------------------------------------------------
// The host driver.

enum HostCall {
    BeforeInference(Value, Sender<Option<u64>>),
    Request(String, Value, Duration, Sender<u64>),
    StartTurn(&'static str),
    EndTurn(&'static str),
    Answer(RequestId, Value),
    /// A line written as it is (a misbehaving host).
    Raw(&'static str),
    Close,
}

/// What the host driver reports to the test: every output but the frames it wrote, and the
/// state read once connected.
#[derive(Debug)]
enum HostSeen {
    Out(HostOutput),
    Up { mode: Mode, push_granted: bool },
}

/// A driver thread as the test sees it: the application calls it takes, the outputs it
/// reports, and the thread.
struct Driver<C, S> {
    /// `host` or `server`, for a hung test's message.
    side: &'static str,
    calls: Sender<Input<C>>,
    seen: Receiver<S>,
    thread: JoinHandle<()>,
}

impl<C, S: std::fmt::Debug> Driver<C, S> {
    fn call(&self, c: C) {
        if self.calls.send(Input::Call(c)).is_err() {
            panic!("the {} driver has stopped", self.side);
        }
    }

    /// The next reported output matching `f`, skipping (and returning) the others.
    fn until<T>(&self, mut f: impl FnMut(&S) -> Option<T>) -> (T, Vec<S>) {
        let mut skipped = Vec::new();
        loop {
            let s = self
                .seen
                .recv_timeout(GUARD)
                .unwrap_or_else(|e| panic!("{}: no output ({e}); so far {skipped:#?}", self.side));
            if let Some(t) = f(&s) {
                return (t, skipped);
            }
            skipped.push(s);
        }
    }
}

type HostDriver = Driver<HostCall, HostSeen>;

fn spawn_host(stream: UnixStream, rules: HostRules) -> HostDriver {
    let (tx, rx) = mpsc::channel();
    let (seen_tx, seen) = mpsc::channel();
    let reader = spawn_reader(stream.try_clone().expect("clone"), tx.clone());
    let thread = thread::spawn(move || {
        let mut w = stream;
        let now = Instant::now();
        let mut host = HostState::new(rules, now, SystemTime::now()).expect("policy parses");
        host.start(now);
        'run: loop {
            while let Some(out) = host.poll_output() {
                if let Some(text) = out.frame() {
                    if !write_line(&mut w, &text) {
                        break 'run;
                    }
                    continue;
                }
                let close = matches!(out, HostOutput::Close);
                let up = matches!(out, HostOutput::Connected(Ok(())));
                let _ = seen_tx.send(HostSeen::Out(out));
                if up {
                    let _ = seen_tx.send(HostSeen::Up {
                        mode: host.mode().clone(),
                        push_granted: host.grant().allows(Capability::PushEvents),
                    });
                }
                if close {
                    break 'run;
                }
            }
            let Some(input) = next_input(&rx, host.poll_timeout()) else {
                host.handle_timeout(Instant::now());
                continue;
            };
            let now = Instant::now();
            match input {
                // The text itself, so the answers that decide authority are read whole
                // (`HostState::handle_text`).
                Input::Frame(text) => {
                    if let Err(e) = host.handle_text(now, &text) {
                        panic!("the server wrote no message: {e}: {text}");
                    }
                }
                Input::Eof => {
                    // The server ended its output: a hook in flight fails open now (§10.1);
                    // nothing more can come, so this driver closes.
                    host.handle_eof(now);
                    break;
                }
                Input::Call(HostCall::BeforeInference(params, reply)) => {
                    let _ = reply.send(host.before_inference(now, params));
                }
                Input::Call(HostCall::Request(method, params, timeout, reply)) => {
                    let id = host
                        .request(now, &method, params, timeout)
                        .expect("request sent");
                    let _ = reply.send(id);
                }
                Input::Call(HostCall::StartTurn(id)) => {
                    host.start_turn(id, "conv", 0).expect("turn started");
                }
                Input::Call(HostCall::EndTurn(id)) => {
                    host.end_turn(id, Terminal::Completed, None)
                        .expect("turn ended");
                }
                Input::Call(HostCall::Answer(id, result)) => {
                    host.answer(id, Ok(result)).expect("a request to answer");
                }
                Input::Call(HostCall::Raw(line)) => {
                    if !write_line(&mut w, line) {
                        break;
                    }
                }
                Input::Call(HostCall::Close) => {
                    // Everything polled is written: close our end (the server reads EOF).
                    break;
                }
            }
        }
        // The connection is down: the machine is told, so what still waited ends (a hook
        // fails open) and nothing stays due.
        host.handle_close(Instant::now());
        while let Some(out) = host.poll_output() {
            if out.frame().is_none() {
                let _ = seen_tx.send(HostSeen::Out(out));
            }
        }
        assert_eq!(host.poll_timeout(), None, "nothing is due after close");
        let _ = w.shutdown(std::net::Shutdown::Both);
        drop(reader);
    });
    Driver {
        side: "host",
        calls: tx,
        seen,
        thread,
    }
}

// ---------------------------------------------------------------------------------------
// The server driver: a small application inside (it answers tools/call and hooks, pushes
// one event once ready, asks the host for model/info).

enum ServerCall {
    /// Answer the held hook now (after the host gave up on it).
    AnswerHeldHook,
    AskModelInfo,
}

#[derive(Debug)]
enum ServerSeen {
    Out(ServerOutput),
    Closed,
}

type ServerDriver = Driver<ServerCall, ServerSeen>;

fn hook_answer() -> Value {
    json!({ "featureSet": "ctx", "contextInjections": [
        { "namespace": "mem", "position": "afterUser", "content": "remembered" } ] })
}

fn spawn_server(stream: UnixStream, rules: ServerRules) -> ServerDriver {
    let (tx, rx) = mpsc::channel();
    let (seen_tx, seen) = mpsc::channel();
    let reader = spawn_reader(stream.try_clone().expect("clone"), tx.clone());
    let thread = thread::spawn(move || {
        let mut w = stream;
        let mut server = ServerState::new(rules);
        let mut held_hook: Option<RequestId> = None;
        let mut open = true;
        while open {
            let now = Instant::now();
            while let Some(out) = server.poll_output() {
                if let Some(text) = out.frame() {
                    // A closed stream: the rest is for nobody (the loop ends at the EOF).
                    let _ = write_line(&mut w, &text);
                    continue;
                }
                // The application.
                match &out {
                    ServerOutput::PolicyApplied { first: true, .. } => {
                        let push = json!({ "featureSet": "news", "eventId": "e1",
                            "timestamp": "2026-12-02T00:00:00Z",
                            "payload": { "content": [{ "type": "text", "text": "hello" }] } });
                        server.request(now, "push/event", push).expect("push sent");
                    }
                    ServerOutput::Request { id, method, params } => {
                        let answer = match method.as_str() {
                            "tools/call" => Ok(json!({ "content": [{ "type": "text",
                                "text": params.as_ref().and_then(|p| p.pointer("/arguments/text"))
                                    .and_then(Value::as_str).unwrap_or_default() }] })),
                            "context/beforeInference"
                                if params.as_ref().and_then(|p| p.get("inferenceId"))
                                    == Some(&json!("slow")) =>
                            {
                                held_hook = Some(id.clone());
                                let _ = seen_tx.send(ServerSeen::Out(out));
                                continue;
                            }
                            "context/beforeInference" => Ok(hook_answer()),
                            // Every request handed out is answered, one this application
                            // does not serve too: each holds a slot of `max_in_flight`.
                            other => Err(ErrorObject::method_not_found(other)),
                        };
                        server.answer(id.clone(), answer).expect("handed out");
                    }
                    _ => {}
                }
                let _ = seen_tx.send(ServerSeen::Out(out));
            }
            let Some(input) = next_input(&rx, server.poll_timeout()) else {
                server.handle_timeout(Instant::now());
                continue;
            };
            let now = Instant::now();
            match input {
                Input::Frame(text) => match Message::parse(&text) {
                    Ok(m) => server.handle_message(now, m),
                    // The machines take only messages: a line that is none is the driver's
                    // to answer (JSON-RPC 2.0 §5), under the id when one could be read, when
                    // it is owed one (never a response's or a notification's).
                    Err(e) => {
                        if let Some(answer) = e.owed_answer(&text) {
                            let answer = Message::Response(answer);
                            let _ = write_line(&mut w, &answer.to_json());
                        }
                    }
                },
                Input::Eof => {
                    // The host ended its output: what the server asked ends now, open turns
                    // end (§10.5), and what the host asked is still answered. This driver
                    // answers everything inline, so nothing is owed and it closes at once;
                    // one with handlers still running would write their answers first.
                    server.handle_eof(now);
                    server.handle_close(now);
                    open = false;
                }
                Input::Call(ServerCall::AnswerHeldHook) => {
                    let id = held_hook.take().expect("a hook held");
                    server
                        .answer(id, Ok(hook_answer()))
                        .expect("still handed out");
                }
                Input::Call(ServerCall::AskModelInfo) => {
                    server
                        .request(now, "model/info", json!({}))
                        .expect("model/info sent");
                }
            }
        }
        // What the close produced (open turns ended).
        while let Some(out) = server.poll_output() {
            let _ = seen_tx.send(ServerSeen::Out(out));
        }
        assert_eq!(server.poll_timeout(), None, "nothing due after the close");
        let _ = seen_tx.send(ServerSeen::Closed);
        drop(reader);
    });
    Driver {
        side: "server",
        calls: tx,
        seen,
        thread,
    }
}

fn server_rules() -> ServerRules {
    let mut mcp = Map::new();
    mcp.insert("tools".into(), json!({}));
    let manifest = json!({
        "version": "0.5",
        "pushEvents": {},
        "contextHooks": { "beforeInference": { "inject": { "afterUser": true } } },
        "inferenceLifecycle": {},
        "modelInfo": {},
        "featureSets": {
            "news": { "uses": ["pushEvents"] },
            "ctx": { "uses": ["contextHooks.beforeInference.inject.afterUser"] },
            "obs": { "uses": ["inferenceLifecycle", "modelInfo"] }
        }
    });
    let mut rules =
        ServerRules::new(json!({ "name": "custom", "version": "1" }), manifest).unwrap();
    rules.mcp_capabilities = mcp;
    rules.hook_feature_set = Some("ctx".into());
    rules.lifecycle = LifecycleConfig {
        safety_timeout: Duration::from_millis(300),
        ..LifecycleConfig::default()
    };
    rules.request_timeout = Some(Duration::from_millis(500));
    rules
}

fn host_rules() -> HostRules {
    let mut rules = HostRules::new([
        "tools",
        "pushEvents",
        "contextHooks.beforeInference.inject.afterUser",
        "inferenceLifecycle",
        "modelInfo",
    ]);
    rules.hook_timeout = Duration::from_millis(300);
    rules
}

#[test]
fn a_blocking_driver_pair_runs_a_whole_session_over_a_socket() {
    let started = Instant::now();
    let (h, s) = UnixStream::pair().expect("socket pair");
    let server = spawn_server(s, server_rules());
    let host = spawn_host(h, host_rules());

    // Initialize and the initial policy (§5.3): the host is up in MCPL with its grant, the
    // server applied its first policy.
    let ((mode, push_granted), _) = host.until(|s| match s {
        HostSeen::Up { mode, push_granted } => Some((mode.clone(), *push_granted)),
        HostSeen::Out(HostOutput::Connected(Err(e))) => panic!("not connected: {e}"),
        _ => None,
    });
    assert_eq!(mode, Mode::Mcpl);
    assert!(push_granted);
    let (grant, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::PolicyApplied { grant, first: true }) => Some(*grant),
        _ => None,
    });
    assert!(grant.allows(Capability::PushEvents));
    assert!(grant.allows(Capability::InferenceLifecycle));

    // The server's push (§9) is delivered, and the server reads the host's acceptance.
    let (event_id, _) = host.until(|s| match s {
        HostSeen::Out(HostOutput::Event(HostEvent::Push { event_id, .. })) => {
            Some(event_id.clone())
        }
        _ => None,
    });
    assert_eq!(event_id, "e1");
    let (accepted, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Response { outcome, .. }) => Some(outcome.clone()),
        _ => None,
    });
    assert_eq!(accepted.expect("answered")["accepted"], json!(true));

    // A tools/call from the host's application.
    let (tx, rx) = mpsc::channel();
    host.call(HostCall::Request(
        "tools/call".into(),
        json!({ "name": "echo", "arguments": { "text": "hi" } }),
        GUARD,
        tx,
    ));
    let call = rx.recv_timeout(GUARD).expect("an id");
    let (outcome, _) = host.until(|s| match s {
        HostSeen::Out(HostOutput::Response { id, outcome }) if *id == call => Some(outcome.clone()),
        _ => None,
    });
    assert_eq!(
        outcome.expect("a result")["content"][0]["text"],
        json!("hi")
    );

    // A hook answered (§10.1, §10.8): the injection is accepted at its position.
    let (tx, rx) = mpsc::channel();
    let params = json!({ "inferenceId": "i1", "conversationId": "conv", "turnIndex": 0,
                         "userMessage": "secret", "model": { "id": "m" } });
    host.call(HostCall::BeforeInference(params.clone(), tx.clone()));
    let hook = rx
        .recv_timeout(GUARD)
        .expect("reply")
        .expect("the hook applies");
    let (verdict, _) = host.until(|s| match s {
        HostSeen::Out(HostOutput::Hook { id, verdict }) if *id == hook => Some(verdict.clone()),
        _ => None,
    });
    assert_eq!(verdict.failure, None);
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(verdict.accepted[0].0, Capability::InjectAfterUser);
    // `observe` is not granted: the server was never handed the user's text (§10.1).
    let (handed, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Request { method, params, .. })
            if method == "context/beforeInference" =>
        {
            params.clone()
        }
        _ => None,
    });
    assert_eq!(handed["userMessage"], Value::Null);

    // A hook the server holds: the host's hook timeout ends it (fail-open, §10.6) through
    // poll_timeout / handle_timeout alone; the answer sent after it is reported, not used.
    let mut slow = params.clone();
    slow["inferenceId"] = json!("slow");
    host.call(HostCall::BeforeInference(slow, tx));
    let hook = rx
        .recv_timeout(GUARD)
        .expect("reply")
        .expect("the hook applies");
    let (verdict, _) = host.until(|s| match s {
        HostSeen::Out(HostOutput::Hook { id, verdict }) if *id == hook => Some(verdict.clone()),
        _ => None,
    });
    assert!(verdict.accepted.is_empty());
    assert!(
        verdict
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("fail-open")),
        "{verdict:?}"
    );
    server.call(ServerCall::AnswerHeldHook);
    host.until(|s| match s {
        HostSeen::Out(HostOutput::Diagnostic(HostDiagnostic::UnexpectedResponse { .. })) => {
            Some(())
        }
        _ => None,
    });

    // model/info (§12) the host's application holds past the server's request timeout: the
    // server gives it up; the host's late answer is reported there, not delivered.
    server.call(ServerCall::AskModelInfo);
    let (asked, _) = host.until(|s| match s {
        HostSeen::Out(HostOutput::Request { id, method, .. }) if method == "model/info" => {
            Some(id.clone())
        }
        _ => None,
    });
    server.until(|s| match s {
        ServerSeen::Out(ServerOutput::RequestTimedOut { .. }) => Some(()),
        _ => None,
    });
    host.call(HostCall::Answer(asked, json!({ "id": "m" })));
    server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Diagnostic(d)) if d.code() == "unexpected_response" => {
            Some(())
        }
        _ => None,
    });

    // Lines that are no message: the server's driver answers them (JSON-RPC 2.0 §5), and
    // the host reads answers to nothing it sent.
    host.call(HostCall::Raw("{not json"));
    host.call(HostCall::Raw(r#"{"jsonrpc":"2.0","id":77,"method":7}"#));
    for want in ["null", "77"] {
        host.until(|s| match s {
            HostSeen::Out(HostOutput::Diagnostic(HostDiagnostic::UnexpectedResponse { id }))
                if id == want =>
            {
                Some(())
            }
            _ => None,
        });
    }

    // Lifecycle turns (§10.5): one ended by its terminal, one by the server's safety
    // timeout, one open at the close.
    host.call(HostCall::StartTurn("t1"));
    host.call(HostCall::EndTurn("t1"));
    let (ended, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Turn(TurnEvent::Ended(e))) => Some(e.clone()),
        _ => None,
    });
    assert_eq!(ended.inference_id, "t1");
    assert!(matches!(ended.outcome, TurnOutcome::Completed { .. }));
    host.call(HostCall::StartTurn("t2"));
    let (ended, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Turn(TurnEvent::Ended(e))) => Some(e.clone()),
        _ => None,
    });
    assert_eq!(ended.inference_id, "t2");
    assert_eq!(ended.outcome, TurnOutcome::TimedOut);
    host.call(HostCall::StartTurn("t3"));
    server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Turn(TurnEvent::Started(t))) if t.inference_id == "t3" => {
            Some(())
        }
        _ => None,
    });

    // The close: the host closes its end; the server reads EOF, ends the open turn and
    // has nothing due.
    host.call(HostCall::Close);
    let (ended, _) = server.until(|s| match s {
        ServerSeen::Out(ServerOutput::Turn(TurnEvent::Ended(e))) => Some(e.clone()),
        _ => None,
    });
    assert_eq!(ended.inference_id, "t3");
    server.until(|s| matches!(s, ServerSeen::Closed).then_some(()));
    host.thread.join().expect("host driver ends cleanly");
    server.thread.join().expect("server driver ends cleanly");
    assert!(started.elapsed() < GUARD, "took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------
// Inputs a driver can give that the machines must take without panicking.

/// Moves every frame between the two machines until neither writes; the other outputs are
/// returned in order, each side's apart.
fn pump(now: Instant, host: &mut HostState, server: &mut ServerState) -> Vec<HostOutput> {
    let mut host_out = Vec::new();
    loop {
        let mut moved = false;
        while let Some(o) = host.poll_output() {
            match o.frame() {
                Some(text) => {
                    server.handle_message(now, Message::parse(&text).expect("valid"));
                    moved = true;
                }
                None => host_out.push(o),
            }
        }
        while let Some(o) = server.poll_output() {
            if let Some(text) = o.frame() {
                host.handle_message(now, Message::parse(&text).expect("valid"));
                moved = true;
            }
        }
        if !moved {
            return host_out;
        }
    }
}

/// The latest `Instant` this clock holds, or close to it: the `now` of a driver that reads
/// another clock, or tests "far in the future".
fn near_the_end_of(now: Instant) -> Instant {
    let mut step = Duration::from_secs(u64::MAX);
    let mut at = now;
    while step > Duration::from_secs(1) {
        if let Some(later) = at.checked_add(step) {
            at = later;
        }
        step /= 2;
    }
    at
}

/// "Time is passed in": any `Instant` the clock holds is a valid `now`. `HostState` dated
/// its grant records by adding the time since `new` to the wall clock it was given, with
/// `+`, which panics past what `SystemTime` holds: a `now` near the end of `Instant`
/// (reachable: `Instant` counts from boot, `SystemTime` from 1970) panicked in
/// `handle_timeout` and in `set_policy`.
#[test]
fn a_now_near_the_end_of_instant_does_not_panic() {
    let now = Instant::now();
    let end = near_the_end_of(now);
    let rules = || {
        let mut r = server_rules();
        r.hook_feature_set = None;
        r
    };
    // The initial policy Request times out at `end`.
    let mut host = HostState::new(host_rules(), now, SystemTime::now()).expect("parses");
    let mut server = ServerState::new(rules());
    host.start(now);
    let init = host
        .poll_output()
        .and_then(|o| o.frame())
        .expect("initialize");
    server.handle_message(now, Message::parse(&init).expect("valid"));
    let answer = server
        .poll_output()
        .and_then(|o| o.frame())
        .expect("answered");
    host.handle_message(now, Message::parse(&answer).expect("valid"));
    assert!(host.poll_timeout().is_some(), "the policy Request waits");
    host.handle_timeout(end);
    // §6.7: MCP-only on the unanswered policy, the reduction told, then connected.
    let outs = pump(end, &mut host, &mut server);
    assert!(
        outs.iter()
            .any(|o| matches!(o, HostOutput::Connected(Ok(())))),
        "{outs:?}"
    );
    // A policy change at `end`, and its receipt read then.
    let mut host = HostState::new(host_rules(), now, SystemTime::now()).expect("parses");
    let mut server = ServerState::new(rules());
    host.start(now);
    pump(now, &mut host, &mut server);
    assert!(host.is_ready());
    host.set_policy(end, vec!["tools".into()]).expect("sent");
    let outs = pump(end, &mut host, &mut server);
    assert!(
        outs.iter()
            .any(|o| matches!(o, HostOutput::PolicyChanged(_))),
        "{outs:?}"
    );
}

/// The call a driver must make first: a `HostState` writes nothing and waits on nothing
/// until [`HostState::start`] (§5.2: the host opens with `initialize`), so a loop that only
/// feeds, drains and sleeps until `poll_timeout` waits for ever, and so does the server.
#[test]
fn a_host_state_not_started_writes_nothing_and_waits_on_nothing() {
    let now = Instant::now();
    let mut host = HostState::new(host_rules(), now, SystemTime::now()).expect("parses");
    assert_eq!(host.poll_output(), None);
    assert_eq!(host.poll_timeout(), None);
    host.start(now);
    let first = host.poll_output().and_then(|o| o.frame()).expect("a frame");
    let Ok(Message::Request(r)) = Message::parse(&first) else {
        panic!("{first}")
    };
    assert_eq!(r.method, "initialize");
    assert!(host.poll_timeout().is_some(), "initialize_timeout runs");
}

/// `ServerOutput::Close` (a policy refused with `fallback: "close"`, §6.7) does not close the
/// machine: a turn open before it stays open, its safety timeout armed, until the driver
/// calls `handle_close`, which ends it (§10.5) and leaves nothing due.
#[test]
fn s6_7_server_close_output_leaves_the_closing_to_handle_close() {
    use mcpl::capability::{CapabilitySet, Grant};
    use mcpl::policy::Fallback;
    let now = Instant::now();
    let mut rules = server_rules();
    rules.required = Some((
        CapabilitySet::from_iter([Capability::PushEvents]),
        Fallback::Close,
    ));
    let mut host = HostState::new(host_rules(), now, SystemTime::now()).expect("parses");
    let mut server = ServerState::new(rules);
    host.start(now);
    pump(now, &mut host, &mut server);
    assert!(server.is_ready());
    host.start_turn("t", "conv", 0).expect("granted");
    pump(now, &mut host, &mut server);
    while server.poll_output().is_some() {}
    host.set_policy(now, vec!["inferenceLifecycle".into()])
        .expect("sent");
    let frame = host
        .poll_output()
        .and_then(|o| o.frame())
        .expect("the Request");
    server.handle_message(now, Message::parse(&frame).expect("valid"));
    let outs: Vec<ServerOutput> = std::iter::from_fn(|| server.poll_output()).collect();
    assert!(outs.contains(&ServerOutput::Close), "{outs:?}");
    assert_eq!(server.grant(), Grant::default(), "the policy is reset");
    assert!(server.poll_timeout().is_some(), "the turn is still open");
    server.handle_close(now);
    let outs: Vec<ServerOutput> = std::iter::from_fn(|| server.poll_output()).collect();
    assert!(
        matches!(&outs[..], [ServerOutput::Turn(TurnEvent::Ended(e))]
            if e.inference_id == "t" && e.outcome == TurnOutcome::TimedOut),
        "{outs:?}"
    );
    assert_eq!(server.poll_timeout(), None);
}
