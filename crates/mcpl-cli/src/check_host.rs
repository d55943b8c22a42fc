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

use mcpl::capability::{self, Capability, CapabilitySet, Pattern};
use mcpl::jsonrpc::{codes, ErrorObject};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig, PeerError};
use mcpl::policy::{self, FeatureSets, Form, PolicyError, ServerPolicyState};
use mcpl::transport::{stdio, tcp, ws, Transport};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::check::report::{catalogue, catalogue_text_of, CheckDef, Recorder, Report, Status};
use crate::check::seconds;
use crate::term::emit_err;

catalogue! {
    HOST_CATALOGUE, "Every check `mcpl check-host` performs, in report order.";
    "host.initialize-advertises-mcpl", "§5.2", "initialize carries experimental.mcpl with version \"0.5\"";
    "host.policy-is-request", "§5.3", "the initial featureSets/update is a Request, sent even when it grants nothing";
    "host.grant-within-advertisement", "§5.4", "effectiveCapabilities names only paths the server advertised";
    "host.grant-not-contradictory", "§5.4", "no path is both in effectiveCapabilities and deniedCapabilities";
    "host.refuses-before-ready", "§5.3", "a push/event sent before the receipt is refused with an error";
    "host.rejects-with-error", "§6.6", "a push/event under an undeclared feature set gets an error object (-32003)";
    "host.push-follows-grant", "§5.4", "push/event is accepted when its set is allowed, refused with an error when not";
    "host.answers-every-request", "§6.6", "model/info and channels/list get an answer, never silence";
    "host.unknown-method-errors", "§6.6", "an unknown method gets an error (-32601), not silence";
    "host.incoming-unregistered-refused", "§14.5", "channels/incoming for a channel never registered is refused";
    "host.register-itemized", "§14.5", "channels/register is refused unless granted, and answered with one result per descriptor";
    "host.incoming-follows-grant", "§14.5", "channels/incoming is refused when channels.incoming is not granted";
    "host.hooks-after-ready", "§5.3", "context/beforeInference only after the receipt, under a granted hook leaf";
    "host.user-message-redacted", "§10.1", "userMessage is null in beforeInference unless observe is granted";
    "host.grant-within-own-advertisement", "§5.2", "the grant names only paths the host itself advertises supporting (a warning)";
    "host.undeclared-use-refused", "§6.4", "a use the exercising feature set does not declare is refused with an error";
    "host.inference-follows-grant", "§5.4", "inference/request is refused with an error unless its set is allowed, and answered when it is";
    "host.inference-result-shape", "§11.3", "an inference/request result carries the generated content as a string";
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
    /// Bound on the answer to the `inference/request` probe, in seconds: a host that grants
    /// it runs a real (one short message) inference.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub inference_timeout: f64,
}

/// The manifest the checker serves: pushes, a beforeUser injection, and channels.
fn manifest() -> Value {
    let mut m = json!({
        "version": "0.5",
        "pushEvents": true,
        "inferenceRequest": true,
        "contextHooks": { "beforeInference": { "inject": { "beforeUser": true } } },
        "channels": { "register": true, "incoming": true },
        "featureSets": {
            "check.push": { "description": "Probe push events", "uses": ["pushEvents"] },
            "check.infer": {
                "description": "Probe server-initiated inference",
                "uses": ["inferenceRequest"]
            },
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

/// The paths this checker's own `initialize` advertises (§5.1).
fn served_advertisement() -> CapabilitySet {
    capability::advertised_from_capabilities(&initialize_result()["capabilities"]).capabilities
}

fn initialize_result() -> Value {
    json!({
        "protocolVersion": mcpl::protocol::handshake::MCP_PROTOCOL_VERSION,
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

/// The `inference/request` probe's params: one short message under `check.infer` (§11.2).
fn inference_request() -> Value {
    json!({
        "featureSet": "check.infer",
        "messages": [ { "role": "user", "content": "mcpl check-host probe: reply with OK." } ],
        "preferences": { "maxTokens": 16 }
    })
}

/// Defects of an `inference/request` result against §11.3: `content` the generated text as
/// a string (a content-block array only warns: the library host's reading accepts it, the
/// table says string); `model` a string, `finishReason` one of App. B.4's and `usage` an
/// object, each when present. Reading: the table marks nothing optional or required; without
/// `content` there is no inference to return, so only it is required. `(fails, warnings)`.
fn inference_result_defects(r: &Value) -> (Vec<String>, Vec<String>) {
    let (mut fail, mut warn) = (Vec::new(), Vec::new());
    let Some(o) = r.as_object() else {
        fail.push("the result is not an object".into());
        return (fail, warn);
    };
    match o.get("content") {
        Some(Value::String(_)) => {}
        Some(c @ Value::Array(_)) => {
            match mcpl::protocol::content::content_defect(Some(c), "content", false) {
                Some(d) => fail.push(d),
                None => warn.push("content is content blocks; §11.3 gives a string".into()),
            }
        }
        Some(_) => fail.push("content is not a string".into()),
        None => fail.push("content missing".into()),
    }
    if o.get("model").is_some_and(|m| !m.is_string()) {
        fail.push("model is not a string".into());
    }
    match o.get("finishReason") {
        None => {}
        Some(Value::String(f))
            if ["end_turn", "max_tokens", "stop_sequence"].contains(&f.as_str()) => {}
        Some(f) => warn.push(format!("finishReason {f} is not one of App. B.4's")),
    }
    if o.get("usage").is_some_and(|u| !u.is_object()) {
        fail.push("usage is not an object".into());
    }
    (fail, warn)
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
        seconds("inference-timeout", args.inference_timeout),
    ) {
        (Ok(step), Ok(watch), Ok(infer)) if !step.is_zero() && !infer.is_zero() => {
            run(&args, Bounds { step, watch, infer }, label)
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => unreachable_report(label, e),
        _ => unreachable_report(
            label,
            "--timeout and --inference-timeout must be greater than 0".into(),
        ),
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

/// How long the run waits: each step, the listening after the probes, the inference probe.
#[derive(Clone, Copy)]
struct Bounds {
    step: Duration,
    watch: Duration,
    infer: Duration,
}

fn run(args: &CheckHostArgs, bounds: Bounds, label: String) -> Report {
    let Bounds { step, watch, infer } = bounds;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return unreachable_report(label, format!("cannot start the runtime: {e}")),
    };
    let report = rt.block_on(async move {
        let transport = match tokio::time::timeout(step, accept(args)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return unreachable_report(label, e),
            Err(_) => {
                return unreachable_report(label, format!("no host connected within {step:?}"))
            }
        };
        // A host that stops reading cannot stall the run: writes are bounded too.
        let config = PeerConfig {
            write_timeout: Some(step),
            ..PeerConfig::default()
        };
        let (peer, incoming) = Peer::new(transport, config);
        let declarations = FeatureSets::from_mcpl(&manifest()).0;
        let mut run = Run {
            peer,
            incoming,
            rec: Recorder::with(HOST_CATALOGUE, "mcpl check-host", false),
            step,
            infer,
            policy: ServerPolicyState::new(declarations),
            host_advertised: CapabilitySet::EMPTY,
            ready: false,
            closed: false,
            hooks: 0,
            unfinished: None,
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

struct Run {
    peer: Peer,
    incoming: Incoming,
    rec: Recorder,
    step: Duration,
    /// Bound on the inference probe's answer.
    infer: Duration,
    /// The host's policy as this server holds it: the library's own server-side state
    /// machine (patterns, `enabled`/`disabled`, an absent grant granting nothing, §5.3).
    policy: ServerPolicyState,
    /// What the host's own `experimental.mcpl` advertises (§5.2), `tools` aside.
    host_advertised: CapabilitySet,
    /// The initial receipt has been written: the host may treat the session as ready.
    ready: bool,
    closed: bool,
    hooks: usize,
    /// Set when the run could not be completed (the report then says so, exit 2).
    unfinished: Option<String>,
}

impl Run {
    async fn exercise(&mut self, watch: Duration) {
        let init = loop {
            match self.next().await {
                Some(IncomingMessage::Request(r)) if r.method() == "initialize" => break r,
                Some(m) => self.handle(m).await,
                None => {
                    self.unfinished = Some("the host sent no initialize request".into());
                    return;
                }
            }
        };
        let caps = init
            .request()
            .params
            .as_ref()
            .and_then(|p| p.get("capabilities"))
            .cloned()
            .unwrap_or(Value::Null);
        let mcpl = caps.get("experimental").and_then(|e| e.get("mcpl"));
        self.host_advertised = mcpl.map_or(CapabilitySet::EMPTY, |m| {
            capability::advertised(m).capabilities
        });
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

        // Up to `notifications/initialized` (MCP: no server request before it) or the policy
        // Request, whichever comes first.
        let mut notified = false;
        let mut request = None;
        while let Some(m) = self.next().await {
            match m {
                IncomingMessage::Notification(n) if n.method == "notifications/initialized" => {
                    break
                }
                IncomingMessage::Notification(n) if n.method == "featureSets/update" => {
                    notified |= self.policy_notification(n.params.as_ref());
                }
                IncomingMessage::Request(r) if r.method() == "featureSets/update" => {
                    request = Some(r);
                    break;
                }
                m => self.handle(m).await,
            }
        }

        // §5.3: a push written before the receipt must be refused, whatever the host does
        // with its policy meanwhile. Polled once, so the frame is written (or queued ahead
        // of the receipt) before anything else goes out.
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

        let request = match request {
            Some(r) => Some(r),
            None => self.policy_request(&mut notified).await,
        };
        match request {
            Some(req) => self.policy(req, notified).await,
            None => {
                let why = if notified {
                    "the grant came only as a Notification, which cannot make the server ready (§6.7)"
                } else {
                    "no featureSets/update Request: the server never becomes ready (§5.3)"
                };
                self.rec.record("host.policy-is-request", Status::Fail, why);
            }
        }
        match self.settle(early).await {
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
            if self.closed {
                self.unfinished =
                    Some("the host ended the connection before the probes were done".into());
            }
            return;
        }
        self.probes().await;
        if self.closed {
            self.unfinished =
                Some("the host ended the connection before the probes were done".into());
            return;
        }
        self.listen(watch).await;
    }

    /// Notes a `featureSets/update` Notification (the library state applies what a
    /// Notification may carry: `disabled` only); `true` when it carried grant fields, which
    /// the library discards with a diagnostic (§6.7: only descriptive metadata may come as a
    /// Notification). A malformed one counts as carrying them.
    fn policy_notification(&mut self, params: Option<&Value>) -> bool {
        match self
            .policy
            .apply(Form::Notification, params.unwrap_or(&Value::Null))
        {
            Ok(outcome) => outcome
                .diagnostics
                .iter()
                .any(|d| d.code == "notification_field_discarded"),
            Err(_) => true,
        }
    }

    /// Waits (bounded by the step timeout) for the policy Request, noting Notifications.
    async fn policy_request(&mut self, notified: &mut bool) -> Option<IncomingRequest> {
        while let Some(m) = self.next().await {
            match m {
                IncomingMessage::Request(r) if r.method() == "featureSets/update" => {
                    return Some(r)
                }
                IncomingMessage::Notification(n) if n.method == "featureSets/update" => {
                    *notified |= self.policy_notification(n.params.as_ref());
                }
                m => self.handle(m).await,
            }
        }
        None
    }

    /// Judges the initial policy Request and answers it: the library's receipt for a
    /// well-formed one, `-32602` for a malformed one (§5.4: a path both granted and denied
    /// is rejected; the server then never becomes ready).
    async fn policy(&mut self, req: IncomingRequest, notified: bool) {
        if notified {
            self.rec.record(
                "host.policy-is-request",
                Status::Fail,
                "the grant came first as a Notification (§6.7: grant changes go by Request)",
            );
        } else {
            self.rec.record(
                "host.policy-is-request",
                Status::Pass,
                "initial policy sent as a Request",
            );
        }
        let params = req.request().params.clone().unwrap_or(Value::Null);
        self.judge_grant_paths(&params);
        self.judge_own_advertisement(&params);
        match self.policy.apply(Form::Request, &params) {
            Ok(outcome) => {
                self.rec.record(
                    "host.grant-not-contradictory",
                    Status::Pass,
                    "no path both granted and denied",
                );
                let receipt = outcome
                    .receipt
                    .map_or_else(|| json!({ "accepted": true }), |r| r.to_value());
                if req.respond(receipt).await.is_ok() {
                    self.ready = true;
                }
            }
            Err(e) => {
                let (id, why) = match &e {
                    PolicyError::GrantedAndDenied { path } => (
                        "host.grant-not-contradictory",
                        format!("{path} is both granted and denied"),
                    ),
                    other => (
                        "host.grant-within-advertisement",
                        format!("malformed: {other}"),
                    ),
                };
                self.rec.record(id, Status::Fail, why);
                let _ = req.respond_error(e.to_error()).await;
                self.rec
                    .skip_rest("the policy was malformed: the server never became ready");
            }
        }
    }

    /// §5.4: `effectiveCapabilities` is the intersection of the advertisement and the
    /// host's policy. A literal path the server never advertised fails; a `*` pattern that
    /// reaches beyond the advertisement warns (the server intersects anyway).
    fn judge_grant_paths(&mut self, params: &Value) {
        let id = "host.grant-within-advertisement";
        let advertised = served_advertisement();
        let entries: Vec<&str> = params
            .get("effectiveCapabilities")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let (mut outside, mut wide) = (Vec::new(), Vec::new());
        for e in &entries {
            if e.contains('*') {
                let reach = Pattern::parse(e).map(|p| p.resolved()).unwrap_or_default();
                if reach.difference(advertised) != CapabilitySet::EMPTY {
                    wide.push(*e);
                }
            } else if e
                .parse::<Capability>()
                .is_ok_and(|c| !advertised.contains(c))
            {
                outside.push(*e);
            }
        }
        if !outside.is_empty() {
            let d = format!("grants what was never advertised: {}", outside.join(", "));
            self.rec.record(id, Status::Fail, d);
        } else if !wide.is_empty() {
            let d = format!("patterns reach past the advertisement: {}", wide.join(", "));
            self.rec.record(id, Status::Warn, d);
        } else {
            let d = format!("grants {}", join_or_none(&entries));
            self.rec.record(id, Status::Pass, d);
        }
    }

    /// §5.2: the host advertises its MCPL support, mirroring the server's shape; a grant of
    /// a path it does not claim to support is the under-advertising AUDIT-001 §2.5 and §4.2
    /// item 10 found. No sentence of the spec makes it a MUST, so it warns. Patterns count
    /// for what they reach within the server's advertisement; `tools` is MCP's, not here.
    fn judge_own_advertisement(&mut self, params: &Value) {
        let id = "host.grant-within-own-advertisement";
        let server = served_advertisement();
        let mut granted = CapabilitySet::EMPTY;
        for e in params
            .get("effectiveCapabilities")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if let Ok(p) = Pattern::parse(e) {
                for c in p.resolved().iter() {
                    if !e.contains('*') || server.contains(c) {
                        granted.insert(c);
                    }
                }
            }
        }
        granted.remove(Capability::Tools);
        let unclaimed = granted.difference(self.host_advertised);
        if unclaimed == CapabilitySet::EMPTY {
            let d = "every granted path is one the host advertises";
            self.rec.record(id, Status::Pass, d);
        } else {
            let d = format!(
                "grants what its own experimental.mcpl does not claim to support: {}",
                unclaimed.sorted_paths().join(", ")
            );
            self.rec.record(id, Status::Warn, d);
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

        // §6.6: a request with an id always gets an answer (AUDIT-001 §4.2 item 5: model/info
        // and channels/list hung).
        let id = "host.answers-every-request";
        let mut silent = Vec::new();
        for method in ["model/info", "channels/list"] {
            match self.call(method, json!({})).await {
                Reply::Timeout => silent.push(method),
                Reply::Closed => return,
                _ => {}
            }
        }
        if silent.is_empty() {
            self.rec
                .record(id, Status::Pass, "model/info and channels/list answered");
        } else {
            let d = format!("no answer within the timeout: {}", silent.join(", "));
            self.rec.record(id, Status::Fail, d);
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
        match self
            .call("channels/incoming", incoming("check:never-registered"))
            .await
        {
            Reply::Error(e) => {
                self.rec
                    .record(id, Status::Pass, format!("refused with error {}", e.code))
            }
            Reply::Result(r) => match first_accepted(&r) {
                Some(false) => {
                    self.rec
                        .record(id, Status::Pass, "the message was refused in its result")
                }
                _ => self.rec.record(
                    id,
                    Status::Fail,
                    format!("a message for a channel never registered was answered {r}"),
                ),
            },
            Reply::Closed => {}
            Reply::Timeout => self.rec.record(
                id,
                Status::Fail,
                "no response within the timeout (§6.6: must error, not silence)",
            ),
        }

        // §14.5 per-descriptor results; §5.4 / AUDIT-001 §2.3: channels gated by the grant.
        let id = "host.register-itemized";
        let granted = self.policy.allows(Capability::ChannelsRegister);
        let descriptors = json!({ "channels": [
            { "id": "check:a", "type": "check", "direction": "bidirectional" },
            { "id": "check:b", "type": "check", "direction": "inbound" }
        ] });
        match (granted, self.call("channels/register", descriptors).await) {
            (true, Reply::Result(r)) => {
                let items: Vec<&Value> = r
                    .get("results")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default();
                let judged = |cid: &str| {
                    items.iter().any(|i| {
                        i.get("id") == Some(&json!(cid))
                            && i.get("accepted").is_some_and(Value::is_boolean)
                    })
                };
                if judged("check:a") && judged("check:b") {
                    self.rec
                        .record(id, Status::Pass, "one result per descriptor")
                } else {
                    let d = format!("results do not judge each descriptor: {r}");
                    self.rec.record(id, Status::Fail, d)
                }
            }
            (false, Reply::Result(r)) => self.rec.record(
                id,
                Status::Fail,
                format!("channels.register is not granted, yet channels/register was answered {r}"),
            ),
            (false, Reply::Error(e)) => self.rec.record(
                id,
                Status::Skip,
                format!(
                    "channels.register not granted (refused with error {})",
                    e.code
                ),
            ),
            (_, Reply::Closed) => {}
            (_, other) => self.rec.record(
                id,
                Status::Fail,
                format!("channels/register got {}", other.describe()),
            ),
        }

        // §14.5 receipt-time validation against the current grant.
        let id = "host.incoming-follows-grant";
        if self.policy.allows(Capability::ChannelsIncoming) {
            let why = "channels.incoming granted: nothing to refuse";
            self.rec.record(id, Status::Skip, why);
        } else {
            match self.call("channels/incoming", incoming("check:a")).await {
                Reply::Error(e) => self.rec.record(
                    id,
                    Status::Pass,
                    format!("not granted, refused with error {}", e.code),
                ),
                Reply::Closed => {}
                other => self.rec.record(
                    id,
                    Status::Fail,
                    format!(
                        "channels.incoming is not granted, yet channels/incoming got {}",
                        other.describe()
                    ),
                ),
            }
        }

        self.undeclared_use().await;
        self.inference().await;

        // Last, so a host application sees its admitted push once every probe is answered.
        let id = "host.push-follows-grant";
        let expected =
            self.policy.allows(Capability::PushEvents) && self.policy.is_available("check.push");
        let refusal = [codes::CAPABILITY_DENIED, codes::FEATURE_SET_NOT_ENABLED];
        match (
            expected,
            self.call("push/event", push("check.push", "p1")).await,
        ) {
            // §9.3: a host may decline an event it may receive (rate limits, §9.4 dedupe).
            (true, Reply::Result(r)) if r.get("accepted") == Some(&Value::Bool(false)) => {
                self.rec.record(
                    id,
                    Status::Warn,
                    format!("granted and available, but declined: {r}"),
                )
            }
            (true, Reply::Result(_)) => {
                self.rec
                    .record(id, Status::Pass, "granted, and the push was accepted")
            }
            (true, Reply::Error(e)) if refusal.contains(&e.code) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "the policy allows check.push, yet the push was refused {}",
                    e.code
                ),
            ),
            (true, Reply::Error(e)) => self.rec.record(
                id,
                Status::Warn,
                format!("granted, push refused with error {}", e.code),
            ),
            (false, Reply::Error(e)) if refusal.contains(&e.code) => self.rec.record(
                id,
                Status::Pass,
                format!("not allowed by the policy, refused {}", e.code),
            ),
            (false, Reply::Error(e)) => self.rec.record(
                id,
                Status::Warn,
                format!(
                    "not allowed, refused with error {} (-32002 or -32001 expected)",
                    e.code
                ),
            ),
            // §6.6: a refusal is an error object, never a result carrying a failure flag.
            (false, Reply::Result(r)) => self.rec.record(
                id,
                Status::Fail,
                format!("the policy does not allow check.push, yet the push was answered {r}"),
            ),
            (_, Reply::Closed) => {}
            (_, other) => self.rec.record(
                id,
                Status::Fail,
                format!("push/event got {}", other.describe()),
            ),
        }
    }

    /// §6.4 rule 2: a push under `check.hints`, whose `uses` lacks `pushEvents`, while the
    /// grant allows pushes and leaves the set available, so only the declaration can refuse
    /// it; the refusal is an error object (§6.6).
    async fn undeclared_use(&mut self) {
        let id = "host.undeclared-use-refused";
        if !self.policy.allows(Capability::PushEvents) || !self.policy.is_available("check.hints") {
            let why = "pushEvents not granted or check.hints unavailable: a refusal would not \
                       show the declaration rule";
            self.rec.record(id, Status::Skip, why);
            return;
        }
        match self.call("push/event", push("check.hints", "d1")).await {
            Reply::Error(e) => {
                let d = format!("refused with error {}", e.code);
                self.rec.record(id, Status::Pass, d)
            }
            Reply::Closed => {}
            other => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "push/event under check.hints, whose uses lacks pushEvents, got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §5.4 / §6.6: `inference/request` under `check.infer` is refused with an error object
    /// unless the grant allows it and leaves the set available; when it does, the answer is
    /// judged against §11.3. A host that grants it runs one short inference.
    async fn inference(&mut self) {
        let (id, shape) = (
            "host.inference-follows-grant",
            "host.inference-result-shape",
        );
        let allowed = self.policy.allows(Capability::InferenceRequest)
            && self.policy.is_available("check.infer");
        let refusal = [codes::CAPABILITY_DENIED, codes::FEATURE_SET_NOT_ENABLED];
        let reply = self
            .call_within("inference/request", inference_request(), self.infer)
            .await;
        let (status, detail, judged) = match (allowed, reply) {
            (_, Reply::Closed) => return,
            (true, Reply::Result(r)) => (Status::Pass, "allowed, and answered".into(), Some(r)),
            (true, Reply::Error(e)) if refusal.contains(&e.code) => (
                Status::Fail,
                format!(
                    "the policy allows check.infer, yet the request was refused {}",
                    e.code
                ),
                None,
            ),
            (true, Reply::Error(e)) if e.code == codes::METHOD_NOT_FOUND => (
                Status::Warn,
                "inferenceRequest granted, yet inference/request is not implemented (-32601)"
                    .into(),
                None,
            ),
            (true, Reply::Error(e)) => (
                Status::Pass,
                format!("allowed; the inference failed with error {}", e.code),
                None,
            ),
            (false, Reply::Error(e)) if refusal.contains(&e.code) => (
                Status::Pass,
                format!("not allowed by the policy, refused {}", e.code),
                None,
            ),
            (false, Reply::Error(e)) => (
                Status::Warn,
                format!(
                    "not allowed, refused with error {} (-32002 or -32001 expected)",
                    e.code
                ),
                None,
            ),
            (false, Reply::Result(r)) => (
                Status::Fail,
                format!("the policy does not allow check.infer, yet the request was answered {r}"),
                None,
            ),
            (_, other) => (
                Status::Fail,
                format!("inference/request got {}", other.describe()),
                None,
            ),
        };
        self.rec.record(id, status, detail);
        let (status, detail) = match judged {
            None if allowed => (Status::Skip, "no result to judge".into()),
            None => (
                Status::Skip,
                "inferenceRequest not allowed: no result to judge".into(),
            ),
            Some(r) => match inference_result_defects(&r) {
                (fail, _) if !fail.is_empty() => (Status::Fail, fail.join("; ")),
                (_, warn) if !warn.is_empty() => (Status::Warn, warn.join("; ")),
                _ => (Status::Pass, "content is the generated text".into()),
            },
        };
        self.rec.record(shape, status, detail);
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
        let hook_ids = ["host.hooks-after-ready", "host.user-message-redacted"];
        if self.hooks == 0 {
            let why = "the host sent no context/beforeInference during the run";
            self.rec.skip_all(&hook_ids, why);
        } else {
            for id in hook_ids {
                if !self.rec.has(id) {
                    let d = format!("{} beforeInference request(s) conform", self.hooks);
                    self.rec.record(id, Status::Pass, d);
                }
            }
        }
        if let Some(why) = &self.unfinished {
            self.rec.skip_rest(why);
        }
        let mut report = self.rec.finish(label);
        report.error = self.unfinished;
        report
    }

    /// The next message from the host within the step timeout; `None` on timeout or when
    /// the connection ends.
    async fn next(&mut self) -> Option<IncomingMessage> {
        if self.closed {
            return None;
        }
        match tokio::time::timeout(self.step, self.incoming.recv()).await {
            Ok(Some(m)) => Some(m),
            Ok(None) => {
                self.closed = true;
                None
            }
            Err(_) => None,
        }
    }

    /// Sends a request and waits for its answer, handling what the host sends meanwhile.
    async fn call(&mut self, method: &str, params: Value) -> Reply {
        self.call_within(method, params, self.step).await
    }

    /// [`Self::call`] with its own bound.
    async fn call_within(&mut self, method: &str, params: Value, bound: Duration) -> Reply {
        let peer = self.peer.clone();
        let fut = Box::pin(peer.request_raw_timeout(method, Some(params), bound));
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

    /// Answers (and judges) anything the host sends outside the awaited steps.
    async fn handle(&mut self, m: IncomingMessage) {
        let req = match m {
            IncomingMessage::Request(r) => r,
            IncomingMessage::Notification(n) => {
                // §6.7: a grant change goes by Request, at any point of the session.
                if n.method == "featureSets/update" && self.policy_notification(n.params.as_ref()) {
                    self.rec.record(
                        "host.policy-is-request",
                        Status::Fail,
                        "a grant change came as a featureSets/update Notification (§6.7)",
                    );
                }
                return;
            }
        };
        let result = match req.method() {
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": [] })),
            "mcpl/manifest" => Ok(manifest()),
            "channels/list" => Ok(json!({ "channels": [] })),
            // A later policy change: applied and answered as the library server does.
            "featureSets/update" => {
                let params = req.request().params.clone().unwrap_or(Value::Null);
                match self.policy.apply(Form::Request, &params) {
                    Ok(o) => Ok(o
                        .receipt
                        .map_or_else(|| json!({ "accepted": true }), |r| r.to_value())),
                    Err(e) => Err(e.to_error()),
                }
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

    /// §5.3, §5.4 and §10.1: a hook comes only once ready and under a granted hook leaf,
    /// and carries the user message only when observe is granted.
    fn judge_hook(&mut self, params: Option<&Value>) {
        self.hooks += 1;
        if !self.ready {
            self.rec.record(
                "host.hooks-after-ready",
                Status::Fail,
                "context/beforeInference before the policy receipt",
            );
        } else if !policy::before_inference_applies(self.policy.grant()) {
            self.rec.record(
                "host.hooks-after-ready",
                Status::Fail,
                "context/beforeInference though no beforeInference leaf is granted (§5.4)",
            );
        }
        let user = params.and_then(|p| p.get("userMessage"));
        if !self.policy.allows(Capability::Observe) && user.is_some_and(|u| !u.is_null()) {
            self.rec.record(
                "host.user-message-redacted",
                Status::Fail,
                "userMessage sent though observe is not granted",
            );
        }
    }
}

/// `channels/incoming` params with one message for `channel`.
fn incoming(channel: &str) -> Value {
    json!({ "messages": [ {
        "channelId": channel, "messageId": "m1",
        "content": [ { "type": "text", "text": "mcpl check-host probe" } ]
    } ] })
}

/// `accepted` of the first per-message result.
fn first_accepted(r: &Value) -> Option<bool> {
    r.get("results")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|m| m.get("accepted"))
        .and_then(Value::as_bool)
}

fn join_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §11.3 / App. B.4: content is required and a string; blocks only warn; the other
    /// members are judged when present.
    #[test]
    fn s11_3_inference_result_defects() {
        let ok = json!({ "content": "OK", "model": "m", "finishReason": "max_tokens",
                         "usage": { "inputTokens": 1, "outputTokens": 1 } });
        assert_eq!(inference_result_defects(&ok), (vec![], vec![]));
        assert_eq!(
            inference_result_defects(&json!({ "content": "OK" })),
            (vec![], vec![])
        );
        let blocks = json!({ "content": [ { "type": "text", "text": "OK" } ] });
        let (fail, warn) = inference_result_defects(&blocks);
        assert!(fail.is_empty() && warn.len() == 1, "{warn:?}");
        let bad = json!({ "content": [ { "type": "video" } ], "model": 3,
                          "finishReason": "tired", "usage": [] });
        let (fail, warn) = inference_result_defects(&bad);
        assert_eq!(fail.len(), 3, "{fail:?}");
        assert!(fail[0].starts_with("content[0] type \"video\""), "{fail:?}");
        assert_eq!(warn, ["finishReason \"tired\" is not one of App. B.4's"]);
        let (fail, _) = inference_result_defects(&json!({}));
        assert_eq!(fail, ["content missing"]);
        let (fail, _) = inference_result_defects(&json!("OK"));
        assert_eq!(fail, ["the result is not an object"]);
    }
}
