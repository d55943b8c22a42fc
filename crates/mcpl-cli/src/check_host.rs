//! `mcpl check-host`: the conformance checker for hosts. It is an MCPL server that a host
//! connects to (spawned over stdio, or over TCP / WebSocket), advertises a small manifest,
//! probes how the host treats what it sends, and reports check by check (ids and sections in
//! [`HOST_CATALOGUE`]). The report goes to stderr or `--report FILE`: in stdio mode stdout
//! belongs to the protocol.
//!
//! Exit codes as for `mcpl check`: 0 nothing failed, 1 a check failed, 2 the host never
//! connected or the arguments were unusable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mcpl::capability::{self, Capability, CapabilitySet};
use mcpl::jsonrpc::{codes, ErrorObject};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig, PeerError};
use mcpl::transport::{stdio, tcp, ws, Transport};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::check::report::{catalogue, catalogue_text_of, CheckDef, Recorder, Report, Status};
use crate::term::emit_err;

catalogue! {
    HOST_CATALOGUE, "Every check `mcpl check-host` performs, in report order.";
    "host.initialize-advertises-mcpl", "§5.2", "initialize carries experimental.mcpl with version \"0.5\"";
    "host.policy-is-request", "§5.3", "the initial featureSets/update is a Request, sent even when it grants nothing";
    "host.grant-within-advertisement", "§5.4", "effectiveCapabilities names only paths the server advertised";
    "host.grant-not-contradictory", "§5.4", "no path is both in effectiveCapabilities and deniedCapabilities";
    "host.refuses-before-ready", "§5.3", "a push/event sent before the receipt is refused with an error";
    "host.rejects-with-error", "§6.6", "a push/event under an undeclared feature set gets an error object (-32003)";
    "host.push-follows-grant", "§5.4", "push/event is accepted when pushEvents is granted, refused -32002 when not";
    "host.unknown-method-errors", "§6.6", "an unknown method gets an error (-32601), not silence";
    "host.incoming-unregistered-refused", "§14.5", "channels/incoming for a channel never registered is refused";
    "host.register-itemized", "§14.5", "channels/register is answered with one result per descriptor";
    "host.hooks-after-ready", "§5.3", "no context/beforeInference before the policy receipt";
    "host.user-message-redacted", "§10.1", "userMessage is null in beforeInference unless observe is granted";
}

/// Arguments of `mcpl check-host`.
#[derive(Debug, clap::Args)]
pub struct CheckHostArgs {
    /// List every check (id, section, what conforms) and exit.
    #[arg(long)]
    pub list: bool,
    /// Write the report as JSON: `{ target, checks: [{id, section, status, detail}], summary }`.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Wait for one host connection over TCP on ADDR instead of stdio (port 0 picks one;
    /// the bound address is printed on stderr).
    #[arg(long, value_name = "ADDR", conflicts_with = "ws")]
    pub tcp: Option<String>,
    /// Wait for one host connection over plaintext WebSocket on ADDR instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<String>,
    /// Bound on every single wait, in seconds (the host's initialize, its policy, each answer).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub timeout: f64,
    /// After the probes, keep the connection open this many seconds for what the host sends
    /// on its own (hooks when a user turn runs), then end it.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub watch: f64,
}

/// The manifest the checker serves: pushes, a beforeUser injection, and channels.
fn manifest() -> Value {
    let mut m = json!({
        "version": "0.5",
        "pushEvents": true,
        "contextHooks": { "beforeInference": { "inject": { "beforeUser": true } } },
        "channels": { "register": true, "incoming": true },
        "featureSets": {
            "check.push": { "description": "Probe push events", "uses": ["pushEvents"] },
            "check.hints": {
                "description": "Probe hooks",
                "uses": ["contextHooks.beforeInference.inject.beforeUser"]
            }
        }
    });
    let revision = mcpl::manifest::revision(&m).unwrap_or_default();
    m["revision"] = json!(revision);
    m
}

fn initialize_result() -> Value {
    json!({
        "protocolVersion": "2025-06-18",
        "capabilities": { "tools": {}, "experimental": { "mcpl": manifest() } },
        "serverInfo": { "name": "mcpl-check-host", "version": env!("CARGO_PKG_VERSION") }
    })
}

/// A `push/event` Request's params under `feature_set`.
fn push(feature_set: &str, event_id: &str) -> Value {
    json!({
        "featureSet": feature_set, "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": { "content": [ { "type": "text", "text": "mcpl check-host probe" } ] }
    })
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    if (0.0..=86_400.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{name} must be a number of seconds between 0 and 86400"
        ))
    }
}

/// Runs `mcpl check-host` and returns its exit code.
pub fn main(args: CheckHostArgs) -> ExitCode {
    if args.list {
        print!("{}", catalogue_text_of(HOST_CATALOGUE));
        return ExitCode::SUCCESS;
    }
    let label = match (&args.tcp, &args.ws) {
        (Some(a), _) => format!("tcp://{a}"),
        (_, Some(a)) => format!("ws://{a}"),
        _ => "stdio".to_owned(),
    };
    let report = match (
        seconds("timeout", args.timeout),
        seconds("watch", args.watch),
    ) {
        (Ok(step), Ok(watch)) if !step.is_zero() => run(&args, step, watch, label),
        (Err(e), _) | (_, Err(e)) => unreachable_report(label, e),
        _ => unreachable_report(label, "--timeout must be greater than 0".into()),
    };
    let text = if args.json {
        format!("{}\n", report.to_json())
    } else {
        report.to_text()
    };
    match &args.report {
        Some(path) => {
            if let Err(e) = std::fs::write(path, text) {
                emit_err(&format!(
                    "mcpl check-host: cannot write {}: {e}\n",
                    path.display()
                ));
                return ExitCode::from(2);
            }
        }
        None => emit_err(&text),
    }
    if let Some(e) = &report.error {
        emit_err(&format!("mcpl check-host: {e}\n"));
    }
    ExitCode::from(report.exit_code())
}

fn unreachable_report(target: String, error: String) -> Report {
    let mut rec = Recorder::with(HOST_CATALOGUE, "mcpl check-host", false);
    rec.skip_rest("the host never connected");
    let mut r = rec.finish(target);
    r.error = Some(error);
    r
}

fn run(args: &CheckHostArgs, step: Duration, watch: Duration, label: String) -> Report {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return unreachable_report(label, format!("cannot start the runtime: {e}")),
    };
    let report = rt.block_on(async move {
        let transport = match accept(args).await {
            Ok(t) => t,
            Err(e) => return unreachable_report(label, e),
        };
        let (peer, incoming) = Peer::new(transport, PeerConfig::default());
        let mut run = Run {
            peer,
            incoming,
            rec: Recorder::with(HOST_CATALOGUE, "mcpl check-host", false),
            step,
            ready: false,
            grant: CapabilitySet::EMPTY,
            closed: false,
            hooks: 0,
        };
        run.exercise(watch).await;
        run.finish(label)
    });
    // Stdin is read on a blocking thread that only returns once the host closes its end:
    // the run is over, so the runtime is not waited for.
    rt.shutdown_background();
    report
}

/// The one transport the host connects over.
async fn accept(args: &CheckHostArgs) -> Result<Transport, String> {
    if let Some(addr) = &args.tcp {
        let listener = tcp::Listener::bind(addr.as_str())
            .await
            .map_err(|e| format!("cannot listen on tcp {addr}: {e}"))?;
        if let Ok(local) = listener.local_addr() {
            emit_err(&format!("mcpl check-host: listening on tcp://{local}\n"));
        }
        let (t, _) = listener
            .accept()
            .await
            .map_err(|e| format!("accept failed: {e}"))?;
        Ok(t)
    } else if let Some(addr) = &args.ws {
        let listener = ws::Listener::bind(addr.as_str(), None)
            .await
            .map_err(|e| format!("cannot listen on ws {addr}: {e}"))?;
        if let Ok(local) = listener.local_addr() {
            emit_err(&format!("mcpl check-host: listening on ws://{local}\n"));
        }
        let (t, _) = listener
            .accept()
            .await
            .map_err(|e| format!("accept failed: {e}"))?;
        Ok(t)
    } else {
        Ok(stdio::stdio())
    }
}

/// What an awaited answer came to.
enum Reply {
    Result(Value),
    Error(ErrorObject),
    Timeout,
    Closed,
}

impl Reply {
    fn of(r: Result<Value, PeerError>) -> Reply {
        match r {
            Ok(v) => Reply::Result(v),
            Err(PeerError::Timeout { .. }) => Reply::Timeout,
            Err(e) => match e.remote() {
                Some(err) => Reply::Error(err.clone()),
                None => Reply::Closed,
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            Reply::Result(v) => format!("a result {v}"),
            Reply::Error(e) => format!("error {} {:?}", e.code, e.message),
            Reply::Timeout => "no response within the timeout".into(),
            Reply::Closed => "no response: the connection ended".into(),
        }
    }
}

/// What the host sent that the checker waited for.
enum Awaited {
    Request(IncomingRequest),
    Notification,
}

struct Run {
    peer: Peer,
    incoming: Incoming,
    rec: Recorder,
    step: Duration,
    /// The initial receipt has been written: the host may treat the session as ready.
    ready: bool,
    /// The grant the host's last policy Request named.
    grant: CapabilitySet,
    closed: bool,
    hooks: usize,
}

impl Run {
    async fn exercise(&mut self, watch: Duration) {
        let Some(Awaited::Request(init)) = self.wait_for("initialize").await else {
            self.rec
                .skip_rest("the host sent no initialize request: nothing could be checked");
            return;
        };
        let caps = init
            .request()
            .params
            .as_ref()
            .and_then(|p| p.get("capabilities"))
            .cloned()
            .unwrap_or(Value::Null);
        let mcpl = caps.get("experimental").and_then(|e| e.get("mcpl"));
        let advertises = match mcpl {
            Some(m) if m.get("version") == Some(&json!("0.5")) => {
                self.rec.record(
                    "host.initialize-advertises-mcpl",
                    Status::Pass,
                    "experimental.mcpl with version 0.5",
                );
                true
            }
            Some(m) if m.is_object() => {
                self.rec.record(
                    "host.initialize-advertises-mcpl",
                    Status::Fail,
                    format!("experimental.mcpl.version is {}, not \"0.5\"", m["version"]),
                );
                true
            }
            _ => {
                self.rec.record(
                    "host.initialize-advertises-mcpl",
                    Status::Skip,
                    "no experimental.mcpl: an MCP-only host (§3.2)",
                );
                false
            }
        };
        let _ = init.respond(initialize_result()).await;
        if !advertises {
            self.rec
                .skip_rest("an MCP-only host: the server stays MCP-only (§3.2)");
            return;
        }

        // §5.3: a push written before the receipt must be refused, whatever the host does
        // with its policy meanwhile. Polled once so the frame is queued ahead of the receipt.
        let peer = self.peer.clone();
        let mut early = Box::pin(peer.request_raw_timeout(
            "push/event",
            Some(push("check.push", "early")),
            self.step,
        ));
        std::future::poll_fn(|cx| {
            let _ = std::future::Future::poll(early.as_mut(), cx);
            std::task::Poll::Ready(())
        })
        .await;

        self.policy().await;
        let early = self.settle(early).await;
        match early {
            Reply::Error(e) => self.rec.record(
                "host.refuses-before-ready",
                Status::Pass,
                format!("refused with error {}", e.code),
            ),
            Reply::Closed => {}
            other => self.rec.record(
                "host.refuses-before-ready",
                Status::Fail,
                format!("push/event before the receipt got {}", other.describe()),
            ),
        }
        if !self.ready || self.closed {
            return;
        }
        self.probes().await;
        self.listen(watch).await;
    }

    /// Waits for the initial `featureSets/update`, judges it, and answers the Request with an
    /// accepting receipt.
    async fn policy(&mut self) {
        let mut notified = false;
        let req = loop {
            match self.wait_for("featureSets/update").await {
                Some(Awaited::Request(r)) => break r,
                Some(Awaited::Notification) => notified = true,
                None => {
                    let why = if notified {
                        "featureSets/update came only as a Notification, which cannot make the server ready (§6.7)"
                    } else {
                        "no featureSets/update Request: the server never becomes ready (§5.3)"
                    };
                    self.rec.record("host.policy-is-request", Status::Fail, why);
                    return;
                }
            }
        };
        if notified {
            self.rec.record(
                "host.policy-is-request",
                Status::Fail,
                "a featureSets/update Notification came before the Request (§6.7: grant changes go by Request)",
            );
        } else {
            self.rec.record(
                "host.policy-is-request",
                Status::Pass,
                "initial policy sent as a Request",
            );
        }
        let params = req.request().params.clone().unwrap_or(Value::Null);
        let list = |k: &str| -> Vec<String> {
            params
                .get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let effective = list("effectiveCapabilities");
        let denied = list("deniedCapabilities");
        let advertised =
            capability::advertised_from_capabilities(&initialize_result()["capabilities"])
                .capabilities;
        let mut outside = Vec::new();
        let mut grant = CapabilitySet::EMPTY;
        for path in &effective {
            match path.parse::<Capability>() {
                Ok(c) if advertised.contains(c) => grant.insert(c),
                _ => outside.push(path.clone()),
            }
        }
        if outside.is_empty() {
            self.rec.record(
                "host.grant-within-advertisement",
                Status::Pass,
                format!("grants {}", join_or_none(&grant.sorted_paths())),
            );
        } else {
            self.rec.record(
                "host.grant-within-advertisement",
                Status::Fail,
                format!("grants what was never advertised: {}", outside.join(", ")),
            );
        }
        let both: Vec<&String> = effective.iter().filter(|p| denied.contains(p)).collect();
        if both.is_empty() {
            self.rec.record(
                "host.grant-not-contradictory",
                Status::Pass,
                "no path both granted and denied",
            );
        } else {
            let both: Vec<&str> = both.iter().map(|s| s.as_str()).collect();
            self.rec.record(
                "host.grant-not-contradictory",
                Status::Fail,
                format!("both granted and denied: {}", both.join(", ")),
            );
        }
        self.grant = grant;
        if req.respond(json!({ "accepted": true })).await.is_ok() {
            self.ready = true;
        }
    }

    async fn probes(&mut self) {
        // §6.6 (AUDIT-001 §2.1: a result carrying `accepted: false` instead of an error).
        let id = "host.rejects-with-error";
        match self
            .call("push/event", push("check.undeclared", "u1"))
            .await
        {
            Reply::Error(e) if e.code == codes::UNKNOWN_FEATURE_SET => {
                self.rec.record(id, Status::Pass, "refused -32003")
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Warn,
                format!(
                    "refused with error {}; an unknown feature set SHOULD be -32003",
                    e.code
                ),
            ),
            Reply::Closed => {}
            other => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "push/event under an undeclared set got {}",
                    other.describe()
                ),
            ),
        }

        let id = "host.unknown-method-errors";
        match self.call("mcpl-check-host/no-such-method", json!({})).await {
            Reply::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                self.rec.record(id, Status::Pass, "answered -32601")
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Warn,
                format!("answered error {} (-32601 expected)", e.code),
            ),
            Reply::Closed => {}
            other => self.rec.record(
                id,
                Status::Fail,
                format!("unknown method got {}", other.describe()),
            ),
        }

        let id = "host.incoming-unregistered-refused";
        let incoming = json!({ "messages": [ {
            "channelId": "check:never-registered", "messageId": "m1",
            "content": [ { "type": "text", "text": "mcpl check-host probe" } ]
        } ] });
        match self.call("channels/incoming", incoming).await {
            Reply::Error(e) => {
                self.rec
                    .record(id, Status::Pass, format!("refused with error {}", e.code))
            }
            Reply::Result(r) => {
                let accepted = r
                    .get("results")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(|m| m.get("accepted"))
                    .and_then(Value::as_bool);
                match accepted {
                    Some(false) => {
                        self.rec
                            .record(id, Status::Pass, "the message was refused in its result")
                    }
                    _ => self.rec.record(
                        id,
                        Status::Fail,
                        format!("a message for a channel never registered was answered {r}"),
                    ),
                }
            }
            Reply::Closed => {}
            Reply::Timeout => self.rec.record(
                id,
                Status::Fail,
                "no response within the timeout (§6.6: must error, not silence)",
            ),
        }

        let id = "host.register-itemized";
        let granted = self.grant.contains(Capability::ChannelsRegister);
        let descriptors = json!({ "channels": [
            { "id": "check:a", "type": "check", "direction": "bidirectional" },
            { "id": "check:b", "type": "check", "direction": "inbound" }
        ] });
        match self.call("channels/register", descriptors).await {
            Reply::Result(r) => {
                let ids: Vec<&str> = r
                    .get("results")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|i| i.get("id").and_then(Value::as_str))
                            .collect()
                    })
                    .unwrap_or_default();
                if ids.contains(&"check:a") && ids.contains(&"check:b") {
                    self.rec
                        .record(id, Status::Pass, "one result per descriptor")
                } else {
                    self.rec.record(
                        id,
                        Status::Fail,
                        format!("results do not name each descriptor: {r}"),
                    )
                }
            }
            Reply::Error(e) if !granted && e.code == codes::CAPABILITY_DENIED => self.rec.record(
                id,
                Status::Skip,
                "channels.register not granted (refused -32002)",
            ),
            Reply::Error(e) if !granted => self.rec.record(
                id,
                Status::Warn,
                format!(
                    "not granted, refused with error {} (-32002 expected)",
                    e.code
                ),
            ),
            Reply::Closed => {}
            other => self.rec.record(
                id,
                Status::Fail,
                format!("channels/register got {}", other.describe()),
            ),
        }

        // Last, so a host application sees its admitted push once every probe is answered.
        let id = "host.push-follows-grant";
        let granted = self.grant.contains(Capability::PushEvents);
        match (
            granted,
            self.call("push/event", push("check.push", "p1")).await,
        ) {
            // §6.6: a refusal is an error object, never a result carrying a failure flag.
            (_, Reply::Result(r)) if r.get("accepted") == Some(&Value::Bool(false)) => {
                self.rec.record(
                    id,
                    Status::Fail,
                    format!("refused with a result carrying a failure flag (§6.6): {r}"),
                )
            }
            (true, Reply::Result(_)) => {
                self.rec
                    .record(id, Status::Pass, "granted, and the push was accepted")
            }
            (true, Reply::Error(e)) if e.code == codes::CAPABILITY_DENIED => self.rec.record(
                id,
                Status::Fail,
                "pushEvents was granted but the push was refused -32002",
            ),
            (true, Reply::Error(e)) => self.rec.record(
                id,
                Status::Warn,
                format!("pushEvents granted, push refused with error {}", e.code),
            ),
            (false, Reply::Error(e)) if e.code == codes::CAPABILITY_DENIED => {
                self.rec
                    .record(id, Status::Pass, "not granted, refused -32002")
            }
            (false, Reply::Error(e)) => self.rec.record(
                id,
                Status::Warn,
                format!(
                    "not granted, refused with error {} (-32002 expected)",
                    e.code
                ),
            ),
            (false, Reply::Result(r)) => self.rec.record(
                id,
                Status::Fail,
                format!("pushEvents was not granted but the push was answered {r}"),
            ),
            (_, Reply::Closed) => {}
            (_, other) => self.rec.record(
                id,
                Status::Fail,
                format!("push/event got {}", other.describe()),
            ),
        }
    }

    /// Handles what the host sends for `watch`, then ends the connection.
    async fn listen(&mut self, watch: Duration) {
        let deadline = Instant::now() + watch;
        while !self.closed {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Ok(Some(m)) => self.handle(m).await,
                Ok(None) => self.closed = true,
                Err(_) => break,
            }
        }
        self.peer.close();
    }

    fn finish(mut self, label: String) -> Report {
        if self.hooks == 0 {
            let why = "the host sent no context/beforeInference during the run";
            self.rec.skip_all(
                &["host.hooks-after-ready", "host.user-message-redacted"],
                why,
            );
        } else {
            for id in ["host.hooks-after-ready", "host.user-message-redacted"] {
                if !self.rec.has(id) {
                    let d = format!("{} beforeInference request(s) conform", self.hooks);
                    self.rec.record(id, Status::Pass, d);
                }
            }
        }
        if self.closed {
            self.rec
                .skip_rest("the host ended the connection before this was checked");
        }
        self.rec.finish(label)
    }

    /// Sends a request and waits for its answer, handling what the host sends meanwhile.
    async fn call(&mut self, method: &str, params: Value) -> Reply {
        let peer = self.peer.clone();
        let fut = Box::pin(peer.request_raw_timeout(method, Some(params), self.step));
        self.settle(fut).await
    }

    /// Drives an outstanding request to its answer while handling incoming messages.
    async fn settle<F>(&mut self, mut fut: std::pin::Pin<Box<F>>) -> Reply
    where
        F: std::future::Future<Output = Result<Value, PeerError>>,
    {
        loop {
            tokio::select! {
                r = fut.as_mut() => return Reply::of(r),
                m = self.incoming.recv(), if !self.closed => match m {
                    Some(m) => self.handle(m).await,
                    None => self.closed = true,
                },
            }
        }
    }

    /// Waits (bounded by the step timeout) for `method` from the host, handling everything
    /// else that comes first; `None` on timeout or when the connection ends.
    async fn wait_for(&mut self, method: &str) -> Option<Awaited> {
        let deadline = Instant::now() + self.step;
        while !self.closed {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Ok(Some(IncomingMessage::Request(r))) if r.method() == method => {
                    return Some(Awaited::Request(r))
                }
                Ok(Some(IncomingMessage::Notification(n))) if n.method == method => {
                    return Some(Awaited::Notification)
                }
                Ok(Some(m)) => self.handle(m).await,
                Ok(None) => self.closed = true,
                Err(_) => return None,
            }
        }
        None
    }

    /// Answers (and judges) anything the host sends outside the awaited steps.
    async fn handle(&mut self, m: IncomingMessage) {
        let IncomingMessage::Request(req) = m else {
            return; // notifications: nothing to answer
        };
        let result = match req.method() {
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": [] })),
            "mcpl/manifest" => Ok(manifest()),
            "channels/list" => Ok(json!({ "channels": [] })),
            // A later policy change: acknowledged; the grant is what it names.
            "featureSets/update" => {
                let params = req.request().params.clone().unwrap_or(Value::Null);
                if let Some(a) = params
                    .get("effectiveCapabilities")
                    .and_then(Value::as_array)
                {
                    self.grant = a
                        .iter()
                        .filter_map(Value::as_str)
                        .filter_map(|p| p.parse::<Capability>().ok())
                        .collect();
                }
                Ok(json!({ "accepted": true }))
            }
            "context/beforeInference" => {
                self.judge_hook(req.request().params.as_ref());
                Ok(json!({ "featureSet": "check.hints", "contextInjections": [] }))
            }
            other => Err(ErrorObject::method_not_found(other)),
        };
        let _ = match result {
            Ok(v) => req.respond(v).await,
            Err(e) => req.respond_error(e).await,
        };
    }

    /// §5.3 and §10.1: a hook comes only once ready, and carries the user message only when
    /// observe is granted.
    fn judge_hook(&mut self, params: Option<&Value>) {
        self.hooks += 1;
        if !self.ready {
            self.rec.record(
                "host.hooks-after-ready",
                Status::Fail,
                "context/beforeInference before the policy receipt",
            );
        }
        let user = params.and_then(|p| p.get("userMessage"));
        let observe = self.grant.contains(Capability::Observe);
        if !observe && user.is_some_and(|u| !u.is_null()) {
            self.rec.record(
                "host.user-message-redacted",
                Status::Fail,
                "userMessage sent though observe is not granted",
            );
        }
    }
}

fn join_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}
