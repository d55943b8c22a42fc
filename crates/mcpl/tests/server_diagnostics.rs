//! Issue #21: the mistakes of a server's author reach a plain `Server::serve()` user. A host
//! speaks raw JSON lines to a served server, nobody subscribes to `Session::diagnostics`,
//! and a capturing `tracing` subscriber must still see a `warn` event saying what happened
//! and what to change; host defects stay below `warn`.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{DiagnosticKind, PushEvent, Server, ServerBuilder, Session};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// One captured event: its level and its message with every other field appended.
#[derive(Debug, Clone)]
struct Captured {
    level: tracing::Level,
    text: String,
}

/// A layer that keeps every event it sees.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut text = String::new();
        event.record(&mut Text(&mut text));
        let level = *event.metadata().level();
        self.0.lock().unwrap().push(Captured { level, text });
    }
}

impl Capture {
    /// Installs the layer for this thread (the tests run on a current-thread runtime, so
    /// every task of the server logs here).
    fn install() -> (Self, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        (capture, tracing::subscriber::set_default(subscriber))
    }

    fn at(&self, level: tracing::Level) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| e.level == level)
            .map(|e| e.text.clone())
            .collect()
    }
}

/// The host's end: raw JSON lines over an in-memory pipe.
struct RawHost {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    next_id: u64,
}

impl RawHost {
    /// Serves `server` with plain `serve()` on one end of a pipe; returns the other end
    /// and the task that ends when the connection has.
    fn serve(server: &Server) -> (Self, tokio::task::JoinHandle<()>) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let server = server.clone();
        let task = tokio::spawn(async move {
            server.serve(Transport::lines(br, bw, "test")).await;
        });
        let host = RawHost {
            lines: BufReader::new(ar).lines(),
            write: aw,
            next_id: 0,
        };
        (host, task)
    }

    /// Starts `server` on one end of a pipe (`Server::start`, so the test can subscribe to
    /// the session's diagnostics before anything arrives); returns the other end.
    fn start(server: &Server) -> (Self, Session) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let session = server.start(Transport::lines(br, bw, "test"));
        let host = RawHost {
            lines: BufReader::new(ar).lines(),
            write: aw,
            next_id: 0,
        };
        (host, session)
    }

    async fn send(&mut self, v: Value) {
        let line = format!("{v}\n");
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next message the server writes that `wanted` picks (skipping the others).
    async fn next_where(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .unwrap()
                .expect("server hung up");
            let v: Value = serde_json::from_str(&line).unwrap();
            if wanted(&v) {
                return v;
            }
        }
    }

    /// The next response the server writes (skipping its own requests and notifications).
    async fn next_answer(&mut self) -> Value {
        self.next_where(|v| v.get("method").is_none()).await
    }

    /// The next request the server writes (skipping its notifications and responses).
    async fn next_request(&mut self) -> Value {
        self.next_where(|v| v.get("method").is_some() && v.get("id").is_some())
            .await
    }

    /// `initialize`, as an MCPL 0.5 host when `mcpl`, else as a plain MCP host; then
    /// `notifications/initialized` (no policy).
    async fn initialize(&mut self, mcpl: bool) {
        let caps = if mcpl {
            json!({"experimental": {"mcpl": {"version": "0.5"}}})
        } else {
            json!({})
        };
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": caps,
                       "clientInfo": {"name": "raw-host", "version": "0"}}),
            )
            .await;
        assert!(init["result"].is_object(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
    }

    /// Sends a request and returns its response (skipping anything sent in between).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let v = self.next_answer().await;
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// `initialize` as an MCPL 0.5 host, then the policy Request granting `grant`.
    async fn ready(&mut self, grant: &[&str]) {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18",
                       "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                       "clientInfo": {"name": "raw-host", "version": "0"}}),
            )
            .await;
        assert!(init["result"]["capabilities"]["experimental"]["mcpl"].is_object());
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        let receipt = self
            .request(
                "featureSets/update",
                json!({"effectiveCapabilities": grant}),
            )
            .await;
        assert!(receipt["result"].is_object(), "{receipt}");
    }

    /// Ends the connection and waits for `serve()` to return.
    async fn hang_up(self, task: tokio::task::JoinHandle<()>) {
        drop(self);
        task.await.unwrap();
    }
}

/// A server whose hook (for `notes.context`, which uses only `inject.system`) injects at
/// `beforeUser`, a position the host does not grant.
fn injecting_server() -> Server {
    Server::builder("notes", "1.0.0")
        .feature_set(
            "notes.context",
            "Notes before inference",
            &[Capability::InjectSystem],
        )
        .on_before_inference("notes.context", |_grant, _turn| async move {
            let injection = ContextInjection::new("notes", Position::BeforeUser, "a note");
            Ok(BeforeInferenceResult::with_injections([injection]))
        })
        .build()
        .unwrap()
}

fn pushing_server() -> ServerBuilder {
    Server::builder("pinger", "1.0.0")
        .feature_set("pings", "Pings", &[Capability::PushEvents])
        .tool(
            "ping_me",
            "Push a ping",
            json!({"type": "object"}),
            |s: Session, _p| async move {
                // The author forgot to check `s.granted(Capability::PushEvents)`.
                let pushed = s.push_event(PushEvent::text("pings", "ping")).await.is_ok();
                Ok(ToolsCallResult::text(format!("pushed: {pushed}")))
            },
        )
}

/// §5.4, §10.8: the dropped injection is a `warn` naming the feature set, the position and
/// the capability, with what to change — with nobody subscribed to the diagnostics.
#[tokio::test]
async fn s10_8_injection_at_an_ungranted_position_is_a_warning_under_plain_serve() {
    let (capture, _guard) = Capture::install();
    let (mut host, task) = RawHost::serve(&injecting_server());
    host.ready(&["contextHooks.beforeInference.inject.system"])
        .await;
    let answer = host
        .request(
            "context/beforeInference",
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                   "userMessage": null}),
        )
        .await;
    assert_eq!(
        answer["result"],
        json!({"featureSet": "notes.context", "contextInjections": []})
    );
    host.hang_up(task).await;
    let warnings = capture.at(tracing::Level::WARN);
    let dropped: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("code=injection_dropped"))
        .collect();
    assert_eq!(dropped.len(), 1, "{warnings:#?}");
    let w = dropped[0];
    for needle in [
        "\"notes.context\"",
        "position beforeUser",
        "`contextHooks.beforeInference.inject.beforeUser` is not granted",
        "declare it in the set's uses",
        "server=notes",
    ] {
        assert!(w.contains(needle), "{needle:?} not in {w}");
    }
    // The connection's end sums the mistakes up.
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("after 1 mistake(s) of the server's code")),
        "{warnings:#?}"
    );
}

/// §5.4: a push the grant does not allow is refused before the wire, and the refusal is a
/// `warn` naming the method, the capability and the remedy.
#[tokio::test]
async fn s5_4_refused_push_is_a_warning_under_plain_serve() {
    let (capture, _guard) = Capture::install();
    let (mut host, task) = RawHost::serve(&pushing_server().build().unwrap());
    host.ready(&["tools"]).await;
    let r = host
        .request("tools/call", json!({"name": "ping_me", "arguments": {}}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "pushed: false", "{r}");
    host.hang_up(task).await;
    let warnings = capture.at(tracing::Level::WARN);
    let refused: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("code=send_refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{warnings:#?}");
    for needle in [
        "push/event not sent",
        "capability `pushEvents` is not granted",
        "check Session::granted",
    ] {
        assert!(
            refused[0].contains(needle),
            "{needle:?} not in {}",
            refused[0]
        );
    }
}

/// Repeats of one mistake are counted and sent to subscribers, but logged at `warn` once
/// per connection; a host defect is a `PeerDefect`, logged below `warn`.
#[tokio::test]
async fn repeated_mistakes_warn_once_and_host_defects_stay_below_warn() {
    let (capture, _guard) = Capture::install();
    let server = pushing_server().build().unwrap();
    let (mut host, session) = RawHost::start(&server);
    let mut diags = session.diagnostics();
    host.ready(&["tools"]).await;
    for _ in 0..3 {
        host.request("tools/call", json!({"name": "ping_me", "arguments": {}}))
            .await;
    }
    // A host defect: a notification nobody defined.
    host.send(json!({"jsonrpc": "2.0", "method": "no/such"}))
        .await;
    host.request("ping", json!({})).await;
    assert_eq!(session.author_mistakes(), 3);
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let d = diags.recv().await.unwrap();
        kinds.push((d.code(), d.kind(), d.is_author_mistake()));
    }
    let refused = ("send_refused", DiagnosticKind::AuthorMistake, true);
    assert_eq!(
        kinds,
        [
            refused,
            refused,
            refused,
            ("unknown_notification", DiagnosticKind::PeerDefect, false)
        ]
    );
    let warnings = capture.at(tracing::Level::WARN);
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("code=send_refused"))
            .count(),
        1,
        "{warnings:#?}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("no/such")),
        "{warnings:#?}"
    );
    assert!(capture
        .at(tracing::Level::INFO)
        .iter()
        .any(|i| i.contains("code=unknown_notification")));
}

/// An author mistake whose text the host chooses (here a refused push to the feature set a
/// tool call names) is a new message each time: past the distinct messages a connection
/// remembers (64), each was logged at `warn` again, so a host could write one `warn` line
/// per call for as long as it liked (`mcpl serve` shows `warn` by default). Now the `warn`
/// lines of one connection are bounded: past the bound one more says the rest go to `debug`;
/// every mistake is still counted and sent to subscribers.
#[tokio::test]
async fn the_warnings_of_one_connection_are_bounded_whatever_the_host_makes_them_say() {
    const CALLS: usize = 150;
    let (capture, _guard) = Capture::install();
    let server = Server::builder("pinger", "1.0.0")
        .feature_set("pings", "Pings", &[Capability::PushEvents])
        .tool(
            "push_to",
            "Push to the set the host names",
            json!({"type": "object"}),
            |s: Session, p| async move {
                let set = p
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("set"))
                    .and_then(Value::as_str)
                    .unwrap_or("none")
                    .to_owned();
                let pushed = s.push_event(PushEvent::text(set, "ping")).await.is_ok();
                Ok(ToolsCallResult::text(format!("pushed: {pushed}")))
            },
        )
        .build()
        .unwrap();
    let (mut host, session) = RawHost::start(&server);
    host.ready(&["tools", "pushEvents"]).await;
    for i in 0..CALLS {
        host.request(
            "tools/call",
            json!({"name": "push_to", "arguments": {"set": format!("set{i}")}}),
        )
        .await;
    }
    assert_eq!(session.author_mistakes(), CALLS as u64);
    let warnings = capture.at(tracing::Level::WARN);
    let refused = warnings
        .iter()
        .filter(|w| w.contains("code=send_refused"))
        .count();
    assert!(refused <= 64, "{refused} warn lines for {CALLS} mistakes");
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("logged at debug"))
            .count(),
        1,
        "{warnings:#?}"
    );
}

/// Issue #24 item 5: the server's diagnostics are typed values, and `Server` and the
/// sans-I/O `ServerState` report the same value for the same host defect: a notification
/// the grant does not allow (§5.4), a malformed `featureSets/update` Notification (§6.7),
/// and notifications no rule names.
#[tokio::test]
async fn host_defects_are_typed_values_the_sans_io_server_reports_alike() {
    use mcpl::policy::Form;
    use mcpl::server::ServerDiagnostic as D;
    use mcpl::session::{Refusal, ServerOutput, ServerRules, ServerState};

    let lifecycle = json!({"jsonrpc": "2.0", "method": "inference/lifecycle",
        "params": {"inferenceId": "i1", "phase": "started"}});
    let malformed = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"effectiveCapabilities": 5}});
    let defects = [lifecycle, malformed];

    // Over the wire, to a `Server` (captured as the tests above: one callsite, one
    // subscriber per test thread).
    let (capture, _guard) = Capture::install();
    let server = pushing_server().build().unwrap();
    let (mut host, session) = RawHost::start(&server);
    let mut diags = session.diagnostics();
    host.ready(&["tools"]).await;
    host.send(json!({"jsonrpc": "2.0", "method": "no/such"}))
        .await;
    host.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1}}),
    )
    .await;
    for d in &defects {
        host.send(d.clone()).await;
    }
    host.request("ping", json!({})).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(diags.recv().await.unwrap());
    }
    assert_eq!(
        seen[..2],
        [
            D::UnknownNotification {
                method: "no/such".into(),
                mcp_only: false
            },
            D::IgnoredNotification {
                method: "notifications/cancelled".into()
            },
        ]
    );
    assert!(
        matches!(&seen[2], D::NotificationDenied { method, refusal: Refusal::Denied(d) }
            if method == "inference/lifecycle" && d.capability == Capability::InferenceLifecycle),
        "{:?}",
        seen[2]
    );
    assert!(
        matches!(
            &seen[3],
            D::PolicyMalformed {
                form: Form::Notification,
                ..
            }
        ),
        "{:?}",
        seen[3]
    );
    assert_eq!(seen[3].kind(), DiagnosticKind::PeerDefect);
    assert_eq!(
        seen[2].to_string(),
        "notification_denied: ignored inference/lifecycle: `inferenceLifecycle` is not \
         granted (§5.4)"
    );
    assert!(
        seen[3].to_string().starts_with("policy_malformed: "),
        "{}",
        seen[3]
    );
    let infos = capture.at(tracing::Level::INFO);
    assert!(
        infos.iter().any(|i| i.contains("code=policy_malformed")),
        "{infos:#?}"
    );

    // The same inputs, in the same order, to the state machine.
    let mut rules = ServerRules::new(
        json!({"name": "pinger", "version": "1.0.0"}),
        json!({"version": "0.5", "featureSets": {"pings": {"uses": ["pushEvents"]}}}),
    )
    .unwrap();
    // As the `Server`'s (it has a tool): `tools` advertised, so granting it is no defect.
    rules.mcp_capabilities.insert("tools".into(), json!({}));
    let mut state = ServerState::new(rules);
    let now = std::time::Instant::now();
    let feed = |state: &mut ServerState, v: Value| {
        state.handle_message(now, mcpl::jsonrpc::Message::parse(&v.to_string()).unwrap());
    };
    feed(
        &mut state,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18",
                "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                "clientInfo": {"name": "raw-host", "version": "0"}}}),
    );
    // As the host above: a request before it is a defect of its own.
    feed(
        &mut state,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    feed(
        &mut state,
        json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
            "params": {"effectiveCapabilities": ["tools"]}}),
    );
    for d in &defects {
        feed(&mut state, d.clone());
    }
    let from_state: Vec<D> = std::iter::from_fn(|| state.poll_output())
        .filter_map(|o| match o {
            ServerOutput::Diagnostic(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(from_state, seen[2..]);
}

/// §4.1 (JSON-RPC forms), §5.3, §5.4: where a host request goes is one rule, so `Server`
/// and `ServerState` answer the same requests alike: a notification method sent with an id
/// is `-32601` (JSON-RPC 2.0 §4, §5.1: a valid Request object for a method not available
/// as a request; `-32600` before, which names a malformed Request object), whichever
/// direction it has (`mcpl/manifestChanged` is the server's), a request before
/// `initialize` is `-32600`, an ungranted one is `-32002`, a method of the other direction
/// is `-32601`.
#[tokio::test]
async fn misrouted_requests_are_answered_alike_by_server_and_server_state() {
    use mcpl::session::{ServerOutput, ServerRules, ServerState};

    let early = json!({"jsonrpc": "2.0", "id": 90, "method": "tools/list"});
    let misrouted = [
        json!({"jsonrpc": "2.0", "id": 91, "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 92, "method": "inference/lifecycle",
            "params": {"inferenceId": "i1", "phase": "started"}}),
        json!({"jsonrpc": "2.0", "id": 93, "method": "context/beforeInference",
            "params": {"featureSet": "pings", "inferenceId": "i1", "conversationId": "c",
                "turnIndex": 0, "userMessage": "hi"}}),
        json!({"jsonrpc": "2.0", "id": 95, "method": "mcpl/manifestChanged",
            "params": {"revision": "r1", "changed": ["tools"]}}),
        json!({"jsonrpc": "2.0", "id": 94, "method": "push/event",
            "params": {"featureSet": "pings", "eventId": "e", "timestamp": "2026-01-01T00:00:00Z",
                "payload": {"content": [{"type": "text", "text": "x"}]}}}),
    ];
    let errors = |answers: &[Value]| -> Vec<(Value, i64, String)> {
        answers
            .iter()
            .map(|a| {
                let e = &a["error"];
                (
                    a["id"].clone(),
                    e["code"].as_i64().unwrap_or(0),
                    e["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };

    // Over the wire, to a `Server`.
    let server = pushing_server().build().unwrap();
    let (mut host, _session) = RawHost::start(&server);
    host.send(early.clone()).await;
    let mut wire = vec![host.next_answer().await];
    host.ready(&["tools"]).await;
    for m in &misrouted {
        host.send(m.clone()).await;
        wire.push(host.next_answer().await);
    }

    // The same requests to the state machine.
    let mut rules = ServerRules::new(
        json!({"name": "pinger", "version": "1.0.0"}),
        json!({"version": "0.5", "featureSets": {"pings": {"uses": ["pushEvents"]}}}),
    )
    .unwrap();
    // As the `Server`'s (it has a tool): `tools` advertised, so granting it is no defect.
    rules.mcp_capabilities.insert("tools".into(), json!({}));
    let mut state = ServerState::new(rules);
    let now = std::time::Instant::now();
    let mut feed = |v: &Value| -> Vec<Value> {
        state.handle_message(now, mcpl::jsonrpc::Message::parse(&v.to_string()).unwrap());
        std::iter::from_fn(|| state.poll_output())
            .filter_map(|o| match o {
                ServerOutput::Transmit(m) => serde_json::from_str(&m.to_json()).ok(),
                _ => None,
            })
            .collect()
    };
    let mut sans_io = feed(&early);
    feed(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
            "clientInfo": {"name": "raw-host", "version": "0"}}}));
    feed(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools"]}}),
    );
    for m in &misrouted {
        sans_io.extend(feed(m));
    }

    let wire = errors(&wire);
    let codes: Vec<i64> = wire.iter().map(|e| e.1).collect();
    assert_eq!(
        codes,
        [-32600, -32601, -32601, -32002, -32601, -32601],
        "{wire:?}"
    );
    for (id, _, message) in &wire[1..3] {
        assert!(message.contains("is a notification"), "{id}: {message}");
    }
    assert!(wire[4].2.contains("is a notification"), "{wire:?}");
    assert_eq!(wire, errors(&sans_io));
}

/// §3.2, §5.3, §5.4, §6.4 rule 2, §6.6: what the server may send is one gate, so a typed
/// `Session` sender and the sans-I/O `ServerState` refuse (or send) the same message alike,
/// in every state: MCP-only, not ready, and ready with a grant that allows some sends and
/// refuses others by capability or by feature set.
#[tokio::test]
async fn s5_4_sends_are_refused_alike_by_server_and_server_state() {
    use mcpl::protocol::channels::ChannelDescriptor;
    use mcpl::protocol::inference::{InferenceMessage, InferenceRequestParams};
    use mcpl::server::SendError;
    use mcpl::session::{Refusal, SendRefusal, ServerOutput, ServerRules, ServerState};

    // The refusals are `warn`ings: captured on this thread, as the tests above (one
    // callsite, one subscriber per test thread).
    let (_capture, _guard) = Capture::install();
    let server = Server::builder("sender", "1.0.0")
        .feature_set("pings", "Pings", &[Capability::PushEvents])
        .feature_set("asks", "Asks", &[Capability::InferenceRequest])
        .feature_set("lists", "Lists", &[Capability::ChannelsRegister])
        .build()
        .unwrap();
    let grant = ["pushEvents", "inferenceRequest"];
    let push = |fs: &str| PushEvent::text(fs, "ping");
    let ask = |stream: bool| {
        let mut p = InferenceRequestParams::new("asks", [InferenceMessage::user("hi")]);
        p.stream = Some(stream);
        p
    };
    let channel = || ChannelDescriptor::new("c", "chat");
    // What a `Server` sender returned: `sent` when the message reached the wire (the host
    // then refused it), else the refusal's code and the capability it names.
    let said = |r: Result<(), SendError>| -> String {
        match r {
            Ok(()) | Err(SendError::Peer(_)) => "sent".into(),
            Err(
                SendError::NotReady { capability } | SendError::CapabilityDenied { capability },
            ) => {
                let e = r.unwrap_err();
                format!("{} {capability}", e.code())
            }
            Err(e) => e.code().into(),
        }
    };
    // The same for `ServerState::request`.
    let decided = |r: Result<u64, SendRefusal>| -> String {
        match r {
            Ok(_) => "sent".into(),
            Err(SendRefusal::McpOnly) => "mcp_only".into(),
            Err(SendRefusal::Admission(Refusal::NotReady(d), _)) => {
                format!("not_ready {}", d.capability)
            }
            Err(SendRefusal::Admission(Refusal::Denied(d), _)) => {
                format!("capability_denied {}", d.capability)
            }
            Err(SendRefusal::FeatureSet(refusal, _)) => match refusal {
                mcpl::policy::SetRefusal::Unknown => "unknown_feature_set".into(),
                mcpl::policy::SetRefusal::Unavailable(_) => "feature_set_unavailable".into(),
                mcpl::policy::SetRefusal::Undeclared(_) => "declaration_mismatch".into(),
            },
            Err(other) => format!("{other:?}"),
        }
    };

    // Over the wire, to a `Server`: ready with `grant`.
    let mut over_wire = Vec::new();
    let (mut host, session) = RawHost::start(&server);
    host.ready(&grant).await;
    let (sent, ()) = tokio::join!(session.push_event(push("pings")), async {
        let r = host.next_request().await;
        assert_eq!(r["method"], "push/event");
        host.send(json!({"jsonrpc": "2.0", "id": r["id"],
            "error": {"code": -32000, "message": "the test host declines"}}))
            .await;
    });
    over_wire.push(said(sent.map(|_| ())));
    for fs in ["nope", "lists", "asks"] {
        over_wire.push(said(session.push_event(push(fs)).await.map(|_| ())));
    }
    over_wire.push(said(session.inference_stream(ask(true)).await.map(|_| ())));
    over_wire.push(said(
        session.channels_register(vec![channel()]).await.map(|_| ()),
    ));
    // Initialized, no policy yet; and MCP-only.
    for mcpl in [true, false] {
        let (mut host, session) = RawHost::start(&server);
        host.initialize(mcpl).await;
        host.request("ping", json!({})).await;
        over_wire.push(said(session.push_event(push("pings")).await.map(|_| ())));
    }

    // The same sends to the state machine, in the same states.
    let rules = ServerRules::new(
        json!({"name": "sender", "version": "1.0.0"}),
        server.tracker().snapshot().manifest().clone(),
    )
    .unwrap();
    let now = std::time::Instant::now();
    let start = |mcpl: bool, grant: Option<&[&str]>| {
        let mut state = ServerState::new(rules.clone());
        let caps = if mcpl {
            json!({"experimental": {"mcpl": {"version": "0.5"}}})
        } else {
            json!({})
        };
        let mut feed = |v: Value| {
            state.handle_message(now, mcpl::jsonrpc::Message::parse(&v.to_string()).unwrap());
        };
        feed(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": caps,
                "clientInfo": {"name": "raw-host", "version": "0"}}}));
        feed(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        if let Some(grant) = grant {
            feed(
                json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                "params": {"effectiveCapabilities": grant}}),
            );
        }
        while let Some(o) = state.poll_output() {
            assert!(!matches!(o, ServerOutput::Diagnostic(_)), "{o:?}");
        }
        state
    };
    let push_params = |fs: &str| {
        json!({"featureSet": fs, "eventId": "e1", "timestamp": "2026-01-01T00:00:00Z",
            "payload": {"content": [{"type": "text", "text": "ping"}]}})
    };
    let mut sans_io = Vec::new();
    let mut state = start(true, Some(&grant));
    for fs in ["pings", "nope", "lists", "asks"] {
        sans_io.push(decided(state.request(now, "push/event", push_params(fs))));
    }
    let streamed = serde_json::to_value(ask(true)).unwrap();
    sans_io.push(decided(state.request(now, "inference/request", streamed)));
    let register = json!({"channels": [{"id": "c", "type": "chat"}]});
    sans_io.push(decided(state.request(now, "channels/register", register)));
    for mcpl in [true, false] {
        let mut state = start(mcpl, None);
        sans_io.push(decided(state.request(
            now,
            "push/event",
            push_params("pings"),
        )));
    }

    assert_eq!(
        over_wire,
        [
            "sent",
            "unknown_feature_set",
            "feature_set_unavailable",
            "declaration_mismatch",
            "capability_denied inferenceRequest.streaming",
            "capability_denied channels.register",
            "not_ready pushEvents",
            "mcp_only",
        ]
    );
    assert_eq!(over_wire, sans_io);
}

/// §10.1: a `context/beforeInference` carrying `userMessage` though `observe` is not granted
/// is a host defect (`policy::unredacted_user_message`, the rule the library host redacts
/// by and `mcpl check-host` fails by): `Server` and `ServerState` report it alike and hand
/// the hook the turn without it.
#[tokio::test]
async fn s10_1_an_unredacted_user_message_is_reported_and_withheld_alike() {
    use mcpl::server::ServerDiagnostic as D;
    use mcpl::session::{ServerOutput, ServerRules, ServerState};

    let turn = |user: Value| json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0, "userMessage": user});
    let grant = ["contextHooks.beforeInference.inject.system"];

    // Over the wire, to a `Server` whose hook records the user message it was given.
    let (_capture, _guard) = Capture::install();
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = seen.clone();
    let server = Server::builder("notes", "1.0.0")
        .feature_set("notes.context", "Notes", &[Capability::InjectSystem])
        .on_before_inference("notes.context", move |_grant, turn| {
            record.lock().unwrap().push(turn.user_message.clone());
            async move { Ok(BeforeInferenceResult::default()) }
        })
        .build()
        .unwrap();
    let (mut host, session) = RawHost::start(&server);
    let mut diags = session.diagnostics();
    host.ready(&grant).await;
    for user in [json!(null), json!("secret")] {
        let answer = host.request("context/beforeInference", turn(user)).await;
        assert!(answer["result"].is_object(), "{answer}");
    }
    assert_eq!(*seen.lock().unwrap(), [None, None]);
    assert_eq!(diags.recv().await.unwrap(), D::UserMessageUnredacted);
    assert!(diags.try_recv().is_err());

    // The same turns to the state machine.
    let mut state = ServerState::new(
        ServerRules::new(
            json!({"name": "notes", "version": "1.0.0"}),
            server.tracker().snapshot().manifest().clone(),
        )
        .unwrap(),
    );
    let now = std::time::Instant::now();
    let mut feed = |v: Value| -> Vec<ServerOutput> {
        state.handle_message(now, mcpl::jsonrpc::Message::parse(&v.to_string()).unwrap());
        std::iter::from_fn(|| state.poll_output()).collect()
    };
    feed(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
            "clientInfo": {"name": "raw-host", "version": "0"}}}));
    feed(
        json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
        "params": {"effectiveCapabilities": grant}}),
    );
    let mut handed = Vec::new();
    let mut reported = Vec::new();
    for (id, user) in [(3, json!(null)), (4, json!("secret"))] {
        let out = feed(
            json!({"jsonrpc": "2.0", "id": id, "method": "context/beforeInference",
            "params": turn(user)}),
        );
        for o in out {
            match o {
                ServerOutput::Request { params, .. } => {
                    handed.push(params.and_then(|p| p["userMessage"].as_str().map(str::to_owned)))
                }
                ServerOutput::Diagnostic(d) => reported.push(d),
                _ => {}
            }
        }
    }
    assert_eq!(handed, [None, None]);
    assert_eq!(reported, [D::UserMessageUnredacted]);
}

/// A tool whose result nests past what the host reads (`jsonrpc::MAX_MEMBER_NESTING`) is
/// answered `-32603` saying so, where the host read nothing and waited for its timeout, and
/// the author is told under plain `serve()` (`result_unencodable`, naming the method). The
/// next call on the connection is answered as usual.
#[tokio::test]
async fn a_tool_result_nested_past_what_the_host_reads_is_answered_32603_and_warned() {
    let (capture, _guard) = Capture::install();
    let deep = (0..mcpl::jsonrpc::MAX_MEMBER_NESTING).fold(json!([]), |v, _| json!([v]));
    let server = Server::builder("deep", "1")
        .tool(
            "deep",
            "Too deep",
            json!({"type": "object"}),
            move |_s, _p| {
                let mut r = ToolsCallResult::text("deep");
                r.extra.insert("deep".into(), deep.clone());
                async move { Ok(r) }
            },
        )
        .tool("ok", "Fine", json!({"type": "object"}), |_s, _p| async {
            Ok(ToolsCallResult::text("fine"))
        })
        .build()
        .unwrap();
    let (mut host, task) = RawHost::serve(&server);
    host.initialize(false).await;
    let answer = host
        .request("tools/call", json!({"name": "deep", "arguments": {}}))
        .await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("deeper than 126 levels"), "{message}");
    let fine = host
        .request("tools/call", json!({"name": "ok", "arguments": {}}))
        .await;
    assert_eq!(fine["result"]["content"][0]["text"], "fine", "{fine}");
    host.hang_up(task).await;
    let warnings = capture.at(tracing::Level::WARN);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("code=result_unencodable")
                && w.contains("tools/call")
                && w.contains("deeper than 126 levels")),
        "{warnings:#?}"
    );
}

/// What the connection's reader reports (a junk line, a message that is no JSON-RPC, a
/// response to no request) reaches the session's diagnostics stream as
/// `ServerDiagnostic::Connection`, a defect of the host, as `HostDiagnostic::Connection`
/// does at the host: a `Server` application could not see them before (only `tracing`).
#[tokio::test]
async fn connection_defects_reach_the_session_diagnostics() {
    use mcpl::peer::Diagnostic as P;
    use mcpl::server::ServerDiagnostic as D;
    let server = pushing_server().build().unwrap();
    let (mut host, session) = RawHost::start(&server);
    let mut diags = session.diagnostics();
    host.ready(&["tools"]).await;
    host.write.write_all(b"not json at all\n").await.unwrap();
    host.send(json!({"jsonrpc": "1.0", "id": 41, "method": "ping"}))
        .await;
    host.send(json!({"jsonrpc": "2.0", "id": 77, "result": {}}))
        .await;
    host.request("ping", json!({})).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let d = diags.recv().await.unwrap();
        assert_eq!(d.code(), "connection", "{d:?}");
        assert_eq!(d.kind(), DiagnosticKind::PeerDefect, "{d:?}");
        let D::Connection(c) = d else {
            unreachable!("code connection")
        };
        seen.push(c);
    }
    assert!(matches!(&seen[0], P::JunkLine { excerpt } if excerpt.contains("not json")));
    assert!(
        matches!(&seen[1], P::InvalidMessage { answered: true, .. }),
        "{:?}",
        seen[1]
    );
    assert!(
        matches!(&seen[2], P::UnknownResponse { .. }),
        "{:?}",
        seen[2]
    );
}
