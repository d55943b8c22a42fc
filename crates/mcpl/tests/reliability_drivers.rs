//! The async drivers (`Server`'s per-connection driver, `HostSession`'s) against a peer that
//! misbehaves on a real transport: raw JSON lines in, every bound checked by a count the
//! test can read (never a timing).
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcpl::capability::Capability;
use mcpl::peer::{Incoming, Peer, PeerConfig, DEFAULT_MAX_IN_FLIGHT_REQUESTS};
use mcpl::server::{Server, ServerBuilder, ServerDiagnostic, Session};
use mcpl::transport::memory;
use serde_json::json;
use tokio::sync::{broadcast, Notify};

/// Handlers alive now (called and not yet dropped), and a wake-up each time one ends.
#[derive(Default)]
struct Live {
    now: AtomicUsize,
    called: AtomicUsize,
    ended: Notify,
}

/// One handler's share of [`Live`]: counted from its call until its future is dropped.
struct Alive(Arc<Live>);

impl Alive {
    fn enter(live: &Arc<Live>) -> Alive {
        live.now.fetch_add(1, Ordering::SeqCst);
        live.called.fetch_add(1, Ordering::SeqCst);
        Alive(live.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

struct Host {
    peer: Peer,
    incoming: Incoming,
    session: Session,
}

impl Host {
    /// The server registers channel `c` and the host accepts it (§14.3, §14.5): the host's
    /// channel methods may name it (§14.6).
    async fn with_channel_c(mut self) -> Host {
        let session = self.session.clone();
        let c = mcpl::protocol::channels::ChannelDescriptor::new("c", "chat");
        let task = tokio::spawn(async move { session.channels_register(vec![c]).await });
        let Some(mcpl::peer::IncomingMessage::Request(req)) = self.incoming.recv().await else {
            panic!("expected channels/register")
        };
        req.respond(json!({"results": [{"id": "c", "accepted": true}]}))
            .await
            .unwrap();
        task.await.unwrap().unwrap();
        self
    }
}

/// `initialize` as an MCPL 0.5 host, then `notifications/initialized` (no policy yet).
async fn initialize(peer: &Peer) {
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                    "clientInfo": {"name": "hostile-host", "version": "0"}})),
    )
    .await
    .unwrap();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
}

/// A host over the in-memory transport, `initialize`d as an MCPL host and granted `caps`.
async fn connect(server: &Server, caps: &[&str]) -> Host {
    let (host_t, server_t) = memory::pair();
    let (peer, incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    initialize(&peer).await;
    let receipt = peer
        .request_raw(
            "featureSets/update",
            Some(json!({ "effectiveCapabilities": caps })),
        )
        .await
        .unwrap();
    assert_eq!(receipt["accepted"], true, "{receipt}");
    Host {
        peer,
        incoming,
        session,
    }
}

fn builder() -> ServerBuilder {
    Server::builder("drivers", "1.0.0").feature_set(
        "chat",
        "Chat channels",
        &[Capability::ChannelsTyping, Capability::ChannelsRegister],
    )
}

/// Every `code` diagnostic already delivered to `rx`.
fn drain(rx: &mut broadcast::Receiver<ServerDiagnostic>, code: &str) -> usize {
    let mut n = 0;
    loop {
        match rx.try_recv() {
            Ok(d) if d.code() == code => n += 1,
            Ok(_) => {}
            Err(broadcast::error::TryRecvError::Lagged(_)) => panic!("diagnostics lagged"),
            Err(_) => return n,
        }
    }
}

/// A host that floods `channels/typing` notifications at a handler that does not finish
/// (a slow connector) meets a bound: notifications have no in-flight bound of their own on
/// the wire (no id, no answer), so without one each became a task of its own, without limit.
/// Past the bound each is reported (`notification_dropped`), and once handlers end the
/// connection handles notifications again.
#[tokio::test]
async fn a_notification_flood_at_a_slow_handler_is_bounded_and_reported() {
    let live = Arc::new(Live::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let server = {
        let live = live.clone();
        let gate = gate.clone();
        builder()
            .on_channels_typing(move |_s, _p| {
                let alive = Alive::enter(&live);
                let gate = gate.clone();
                async move {
                    let _alive = alive;
                    let _ = gate.acquire().await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    let host = connect(&server, &["channels.typing", "channels.register"])
        .await
        .with_channel_c()
        .await;
    let mut diags = host.session.diagnostics();
    let bound = DEFAULT_MAX_IN_FLIGHT_REQUESTS;
    let sent = bound + 100;
    for _ in 0..sent {
        host.peer
            .notify_raw("channels/typing", Some(json!({"channelId": "c"})))
            .await
            .unwrap();
    }
    // Everything before the ping has been read and handed out once it is answered.
    host.peer.request_raw("ping", None).await.unwrap();
    assert_eq!(
        live.now.load(Ordering::SeqCst),
        bound,
        "handlers alive at once"
    );
    assert_eq!(drain(&mut diags, "notification_dropped"), sent - bound);

    // The handlers end: their slots are free again.
    gate.add_permits(sent);
    loop {
        let ended = live.ended.notified();
        if live.now.load(Ordering::SeqCst) == 0 {
            break;
        }
        ended.await;
    }
    let before = live.called.load(Ordering::SeqCst);
    host.peer
        .notify_raw("channels/typing", Some(json!({"channelId": "c"})))
        .await
        .unwrap();
    host.peer.request_raw("ping", None).await.unwrap();
    assert_eq!(live.called.load(Ordering::SeqCst), before + 1);
    assert_eq!(drain(&mut diags, "notification_dropped"), 0);
}

/// The notification handlers a slow handler keeps alive are bounded in the bytes of what
/// they were handed (`PeerConfig::max_in_flight_bytes`), not only in number: 60 `channels/
/// typing` of 1 MiB each had all 60 alive at once (60 MiB held); past the bytes each is
/// reported `notification_dropped`.
#[tokio::test]
async fn notification_handlers_alive_at_once_are_bounded_in_bytes() {
    const MIB: usize = 1024 * 1024;
    let live = Arc::new(Live::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let server = {
        let live = live.clone();
        let gate = gate.clone();
        builder()
            .on_channels_typing(move |_s, _p| {
                let alive = Alive::enter(&live);
                let gate = gate.clone();
                async move {
                    let _alive = alive;
                    let _ = gate.acquire().await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    let host = connect(&server, &["channels.typing", "channels.register"])
        .await
        .with_channel_c()
        .await;
    let mut diags = host.session.diagnostics();
    let sent = 60;
    let pad = "x".repeat(MIB);
    for _ in 0..sent {
        host.peer
            .notify_raw(
                "channels/typing",
                Some(json!({"channelId": "c", "pad": pad})),
            )
            .await
            .unwrap();
    }
    host.peer.request_raw("ping", None).await.unwrap();
    let alive = live.now.load(Ordering::SeqCst);
    let bound = mcpl::peer::DEFAULT_MAX_IN_FLIGHT_BYTES / MIB;
    assert!(
        alive >= 1 && alive <= bound,
        "{alive} handlers of 1 MiB alive at once (bound {bound} MiB)"
    );
    assert_eq!(drain(&mut diags, "notification_dropped"), sent - alive);
    gate.add_permits(sent);
}

/// A host that floods `featureSets/update` Requests (each accepted and answered at once)
/// at a server whose `on_ready` is slow (it awaits the host, or a connector) does not grow
/// one `on_ready` task per Request: at most one runs per connection, and the Requests
/// accepted while it runs are served by one more call after it, which sees the last grant
/// (§5.3: the grant in force is what `on_ready` reads).
#[tokio::test]
async fn a_policy_request_flood_at_a_slow_on_ready_runs_it_once_at_a_time() {
    let live = Arc::new(Live::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (saw_tx, mut saw) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let server = {
        let live = live.clone();
        let gate = gate.clone();
        Server::builder("drivers", "1.0.0")
            .feature_set("alerts", "Alerts", &[Capability::PushEvents])
            .on_ready(move |s| {
                let alive = Alive::enter(&live);
                let gate = gate.clone();
                let saw = saw_tx.clone();
                async move {
                    let _alive = alive;
                    let _ = gate.acquire().await.map(|p| p.forget());
                    let _ = saw.send(s.granted(Capability::PushEvents));
                }
            })
            .build()
            .unwrap()
    };
    let host = connect(&server, &[]).await;
    let requests = 300;
    for i in 0..requests {
        // The last one grants `pushEvents`.
        let grant = if i + 1 == requests {
            json!(["pushEvents"])
        } else {
            json!([])
        };
        let receipt = host
            .peer
            .request_raw(
                "featureSets/update",
                Some(json!({ "effectiveCapabilities": grant })),
            )
            .await
            .unwrap();
        assert_eq!(receipt["accepted"], true, "{receipt}");
    }
    host.peer.request_raw("ping", None).await.unwrap();
    assert_eq!(
        live.now.load(Ordering::SeqCst),
        1,
        "on_ready calls alive at once"
    );
    // Released one at a time: the first call (for the first Request, reading whatever
    // grant is in force when it gets there), then one more for every Request accepted while
    // it ran, which reads the last grant.
    gate.add_permits(1);
    assert!(saw.recv().await.is_some());
    gate.add_permits(1);
    assert_eq!(saw.recv().await, Some(true));
    loop {
        let ended = live.ended.notified();
        if live.now.load(Ordering::SeqCst) == 0 {
            break;
        }
        ended.await;
    }
    assert_eq!(live.called.load(Ordering::SeqCst), 2);
}

/// A host whose first line starts with a UTF-8 byte order mark (what some Windows tools
/// write at the start of a stream) is answered: RFC 8259 §8.1 lets a parser ignore the
/// mark, and without that the line was skipped as junk, so its `initialize` (a request
/// with an id) was never answered. Over real TCP; CRLF lines and blank lines beside it.
#[tokio::test]
async fn a_byte_order_mark_before_a_request_does_not_lose_the_request() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let server = builder().build().unwrap();
    let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(async move {
        let (transport, _) = listener.accept().await.unwrap();
        server.serve(transport).await
    });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bom", "version": "0"}}});
    let mut wire = b"\xef\xbb\xbf".to_vec();
    wire.extend_from_slice(format!("{initialize}\r\n").as_bytes());
    wire.extend_from_slice(b" \t\r\n");
    wire.extend_from_slice(b"\xef\xbb\xbf {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n");
    wire.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\r\n");
    write.write_all(&wire).await.unwrap();
    write.shutdown().await.unwrap();
    let mut ids = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        ids.push(v["id"].clone());
    }
    assert_eq!(ids, [json!(1), json!(2), json!(3)]);
    served.await.unwrap();
}

/// `on_first_ready` and `on_ready` that panic are the author's mistakes, reported as any
/// handler's (`handler_panicked`, naming which), not only tokio's task panic message; the
/// run goes on (`on_ready` after a panicking `on_first_ready`) and the next accepted policy
/// Request calls `on_ready` again.
#[tokio::test]
async fn panicking_ready_handlers_are_reported_and_the_next_request_runs_them_again() {
    let (calls_tx, mut calls) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let first_tx = calls_tx.clone();
    let server = Server::builder("drivers", "1.0.0")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .on_first_ready(move |_s| {
            let _ = first_tx.send("first");
            async move { panic!("on_first_ready fails") }
        })
        .on_ready(move |_s| {
            let _ = calls_tx.send("every");
            async move { panic!("on_ready fails") }
        })
        .build()
        .unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    let mut diags = session.diagnostics();
    initialize(&peer).await;
    let mut panicked = Vec::new();
    for round in 0..2 {
        let receipt = peer
            .request_raw(
                "featureSets/update",
                Some(json!({ "effectiveCapabilities": ["pushEvents"] })),
            )
            .await
            .unwrap();
        assert_eq!(receipt["accepted"], true, "{receipt}");
        // The first Request runs both handlers, the second `on_ready` alone.
        let reported = if round == 0 { 2 } else { 3 };
        while panicked.len() < reported {
            // A guard, not a synchronisation: without the report this waited for ever.
            let d = tokio::time::timeout(std::time::Duration::from_secs(10), diags.recv())
                .await
                .expect("the panic is reported")
                .unwrap();
            if let ServerDiagnostic::HandlerPanicked { method } = d {
                panicked.push(method);
            }
        }
    }
    assert_eq!(panicked, ["on_first_ready", "on_ready", "on_ready"]);
    let mut order = Vec::new();
    while let Ok(c) = calls.try_recv() {
        order.push(c);
    }
    assert_eq!(order, ["first", "every", "every"]);
}

/// MCP's `notifications/cancelled` for a `tools/call` still running: its handler stops (its
/// future is dropped at its `.await`), it is answered `-32800` at once (every request gets
/// an answer; the host ignores it) and its in-flight slot is free. Before, the cancel was
/// only reported (`ignored_notification`): a host that cancelled calls to a tool that never
/// returns found the connection answering every later request busy once the bound was
/// reached. A cancel of a request already answered, or of `initialize`, changes nothing.
#[tokio::test]
async fn a_cancelled_call_stops_its_handler_frees_its_slot_and_is_answered_cancelled() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let live = Arc::new(Live::default());
    let server = {
        let live = live.clone();
        builder()
            .tool(
                "hang",
                "Never returns",
                json!({"type": "object"}),
                move |_s, _p| {
                    let alive = Alive::enter(&live);
                    async move {
                        let _alive = alive;
                        std::future::pending::<()>().await;
                        unreachable!("pending never resolves")
                    }
                },
            )
            .tool("echo", "Echo", json!({"type": "object"}), |_s, _p| async {
                Ok(mcpl::protocol::handshake::ToolsCallResult::text("echo"))
            })
            .peer_config(PeerConfig {
                max_in_flight_requests: 2,
                ..PeerConfig::default()
            })
            .build()
            .unwrap()
    };
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (read, mut write) = tokio::io::split(host_end);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "test"));
    let mut lines = BufReader::new(read).lines();
    let mut answers = Vec::new();
    let send = |v: serde_json::Value| format!("{v}\n");
    // Every answer up to the one for `id`, kept.
    macro_rules! answer_to {
        ($id:expr) => {{
            loop {
                let line = lines.next_line().await.unwrap().expect("the server is up");
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                if v.get("method").is_none() {
                    answers.push(v.clone());
                    if v["id"] == json!($id) {
                        break v;
                    }
                }
            }
        }};
    }
    let call = |id: u64, tool: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": {}}})
    };
    write
        .write_all(
            send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "host", "version": "0"}}}))
            .as_bytes(),
        )
        .await
        .unwrap();
    answer_to!(1);
    for frame in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call(10, "hang"),
        call(11, "hang"),
        call(12, "echo"),
    ] {
        write.write_all(send(frame).as_bytes()).await.unwrap();
    }
    let busy = answer_to!(12);
    assert_eq!(
        busy["error"]["code"], -32000,
        "both slots are taken: {busy}"
    );
    for frame in [
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 10, "reason": "user stopped"}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 11}}),
        // Already answered, and `initialize`: nothing to cancel.
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 12}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 1}}),
    ] {
        write.write_all(send(frame).as_bytes()).await.unwrap();
    }
    // Both handlers were called, then stopped (their futures dropped): each end wakes the
    // test (the timeout is a guard: before, they ran for ever). The slots were freed in the
    // same step that stopped them.
    let stopped = async {
        loop {
            let ended = live.ended.notified();
            if live.called.load(Ordering::SeqCst) == 2 && live.now.load(Ordering::SeqCst) == 0 {
                break;
            }
            ended.await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), stopped)
        .await
        .expect("the cancelled handlers are stopped");
    for frame in [call(13, "echo"), call(14, "echo")] {
        write.write_all(send(frame).as_bytes()).await.unwrap();
    }
    let first = answer_to!(13);
    assert_eq!(first["result"]["content"][0]["text"], "echo", "{first}");
    let second = answer_to!(14);
    assert_eq!(second["result"]["content"][0]["text"], "echo", "{second}");
    let mut ids: Vec<u64> = answers.iter().filter_map(|a| a["id"].as_u64()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [1, 10, 11, 12, 13, 14],
        "each answered once: {answers:#?}"
    );
    for a in answers.iter().filter(|a| a["id"] == 10 || a["id"] == 11) {
        assert_eq!(
            a["error"]["code"],
            mcpl::jsonrpc::codes::REQUEST_CANCELLED,
            "{a}"
        );
    }
}

/// A tool call still running when the host goes away can no longer be answered: once the
/// connection has ended its handler is stopped (its future dropped at its next `.await`), as
/// a cancelled call's is. Before, it ran on for good: a host that called a tool that never
/// returns, went away and came back left one more task alive each time.
#[tokio::test(start_paused = true)]
async fn a_call_still_running_when_the_connection_ends_is_stopped() {
    let live = Arc::new(Live::default());
    let server = {
        let live = live.clone();
        builder()
            .tool(
                "hang",
                "Never returns",
                json!({"type": "object"}),
                move |_s, _p| {
                    let alive = Alive::enter(&live);
                    async move {
                        let _alive = alive;
                        std::future::pending::<()>().await;
                        unreachable!("pending never resolves")
                    }
                },
            )
            .build()
            .unwrap()
    };
    let host = connect(&server, &["tools"]).await;
    let peer = host.peer.clone();
    let _call = tokio::spawn(async move {
        peer.request_raw("tools/call", Some(json!({"name": "hang", "arguments": {}})))
            .await
    });
    // Every task runs until it blocks: the handler is running.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(live.now.load(Ordering::SeqCst), 1);
    host.peer.close();
    tokio::time::timeout(std::time::Duration::from_secs(3600), async {
        loop {
            let ended = live.ended.notified();
            if live.now.load(Ordering::SeqCst) == 0 {
                break;
            }
            ended.await;
        }
    })
    .await
    .expect("the handler still runs after the connection ended (deadlock guard)");
}

/// A host over a raw pipe (JSON lines), whose write half it can shut down (a half-close).
struct PipeHost {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl PipeHost {
    fn start(server: &Server) -> (PipeHost, Session) {
        use tokio::io::AsyncBufReadExt;
        let (host_end, server_end) = tokio::io::duplex(64 * 1024);
        let (sr, sw) = tokio::io::split(server_end);
        let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
        let (hr, hw) = tokio::io::split(host_end);
        let host = PipeHost {
            lines: tokio::io::BufReader::new(hr).lines(),
            write: hw,
        };
        (host, session)
    }

    async fn send(&mut self, v: serde_json::Value) {
        use tokio::io::AsyncWriteExt;
        let mut line = v.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next frame, or `None` at the server's EOF.
    async fn frame(&mut self) -> Option<serde_json::Value> {
        let line = self.lines.next_line().await.unwrap()?;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Frames until the response to `id` (`None` if the server's output ended first).
    async fn response(&mut self, id: u64) -> Option<serde_json::Value> {
        loop {
            let f = self.frame().await?;
            if f["id"] == json!(id) && f.get("method").is_none() {
                return Some(f);
            }
        }
    }

    /// `initialize` as an MCPL 0.5 host and a policy Request granting `caps`.
    async fn connect(&mut self, caps: &[&str]) {
        self.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18",
                       "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                       "clientInfo": {"name": "pipe-host", "version": "0"}}}))
            .await;
        self.response(1).await.expect("initialize answered");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        self.send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                         "params": {"effectiveCapabilities": caps}}),
        )
        .await;
        let receipt = self.response(2).await.expect("policy answered");
        assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    }
}

/// The host ends its output (a half-close: it still reads) while a tool call's handler
/// waits for the host's answer to the server's own `inference/request` (§11.3): nothing can
/// answer that request any more, so it fails at once, with the connection's end as its
/// error; the handler answers the call with it, and that answer is still written, as the
/// host still reads. The application is told (`input_ended`). Before, the request waited
/// until the connection closed (the reader's drain bound, the write timeout or 5 s), and
/// the call's handler was then stopped, its call never answered. Time is paused: the 5 s
/// drain passes at once, and the guard (an hour) only stops a hang.
#[tokio::test(start_paused = true)]
async fn at_the_hosts_half_close_the_servers_request_fails_at_once_and_the_call_is_answered() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .tool(
            "ask",
            "Asks the host's model",
            json!({"type": "object"}),
            |s, _p| async move {
                let params = serde_json::from_value(json!({
                    "featureSet": "digest",
                    "messages": [{"role": "user", "content": "summarise"}]
                }))
                .unwrap();
                let outcome = match s.inference_request(params).await {
                    Ok(_) => "answered".to_owned(),
                    Err(e) => format!("failed: {e}"),
                };
                Ok(mcpl::protocol::handshake::ToolsCallResult::text(outcome))
            },
        )
        .build()
        .unwrap();
    let (mut host, session) = PipeHost::start(&server);
    let mut diags = session.diagnostics();
    host.connect(&["tools", "inferenceRequest"]).await;
    host.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                     "params": {"name": "ask", "arguments": {}}}))
        .await;
    loop {
        let f = host.frame().await.expect("the server asks before it ends");
        if f["method"] == "inference/request" {
            break;
        }
        assert_ne!(f["id"], json!(3), "the call ended before it asked: {f}");
    }
    tokio::io::AsyncWriteExt::shutdown(&mut host.write)
        .await
        .unwrap();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(3600), host.response(3))
        .await
        .expect("the call is still unanswered (deadlock guard)")
        .expect("the call is answered before the server's output ends");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        text.starts_with("failed: ") && text.contains("the other side ended the connection"),
        "{answer}"
    );
    assert_eq!(drain(&mut diags, "input_ended"), 1);
}

/// `PeerConfig::max_in_flight_bytes` bounds the answers a host that never reads makes a
/// server hold, answers much larger than their requests included: 128 tiny `tools/call`s,
/// sent one after another, of a tool whose handler waits once and answers 1 MiB. A
/// handler's answer waiting for the driver to take it (which it does not while the host
/// reads nothing and the outbox is full) was not weighed, so every call was admitted and
/// 127 answers of 1 MiB were held; now it is weighed as it is made, and the calls after the
/// bound are answered `-32000` (`busy_bytes`) unrun. Every call gets a response once the
/// host reads. (Calls that all arrive before any answer is made are bounded by
/// `max_in_flight_requests` alone: RELIABILITY.md.)
#[tokio::test(start_paused = true)]
async fn answers_much_larger_than_their_requests_are_held_within_the_byte_bound() {
    let made = Arc::new(AtomicUsize::new(0));
    let server = {
        let made = made.clone();
        builder()
            .tool(
                "big",
                "Answers 1 MiB",
                json!({"type": "object"}),
                move |_s, _p| {
                    let made = made.clone();
                    async move {
                        tokio::task::yield_now().await;
                        made.fetch_add(1, Ordering::SeqCst);
                        Ok(mcpl::protocol::handshake::ToolsCallResult::text(
                            "x".repeat(1 << 20),
                        ))
                    }
                },
            )
            .build()
            .unwrap()
    };
    let (mut host, _session) = PipeHost::start(&server);
    host.connect(&["tools"]).await;
    let calls = 128u64;
    for id in 0..calls {
        host.send(
            json!({"jsonrpc": "2.0", "id": 10 + id, "method": "tools/call",
                         "params": {"name": "big", "arguments": {}}}),
        )
        .await;
        // Time is paused: the sleep ends only once every task is blocked (the host reads
        // nothing), so the server has done all it would with this call before the next.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let held = made.load(Ordering::SeqCst);
    // The byte bound (32 MiB), the writer's queue (8 MiB) and the one answer that crosses.
    assert!(
        held <= 42,
        "{held} answers of 1 MiB made for a host that reads nothing"
    );
    let (mut answered, mut busy) = (0, 0);
    while answered < calls {
        let f = host.frame().await.expect("every call is answered");
        if f.get("method").is_none() && f["id"].as_u64().is_some_and(|i| i >= 10) {
            answered += 1;
            if f["error"]["data"]["reason"] == "in_flight_bytes" {
                busy += 1;
            }
        }
    }
    assert_eq!(
        busy as usize + held,
        calls as usize,
        "each call ran or was refused"
    );
}

/// After the host's end of output, with nothing more owed to it, a request of the
/// application's fails at once while the connection's driver drains its outbox (full of
/// answers for a host that reads nothing): the driver refuses each call it is given while
/// it drains. Before, the call waited to be taken until the drain ended and the connection
/// closed (the write timeout, else 5 s, later).
#[tokio::test(start_paused = true)]
async fn after_the_hosts_half_close_a_call_fails_at_once_while_the_outbox_is_full() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .tool(
            "big",
            "Answers 1 MiB",
            json!({"type": "object"}),
            |_s, _p| async {
                tokio::task::yield_now().await;
                Ok(mcpl::protocol::handshake::ToolsCallResult::text(
                    "x".repeat(1 << 20),
                ))
            },
        )
        .build()
        .unwrap();
    let (mut host, session) = PipeHost::start(&server);
    host.connect(&["tools", "inferenceRequest"]).await;
    // More than the writer's queue (8 MiB) and the outbox's call bound (4 MiB) hold, within
    // the byte bound (32 MiB), so the reader answers none of them itself.
    flood_half_close_and_ask(&mut host, &session).await;
}

/// The same while a handler still runs after the host's end of output (so the driver does
/// not end yet): a call of the application's is taken and refused at once
/// (`SendRefusal::InputEnded`, no frame), though the outbox is full. Before, it waited to
/// be taken until the connection closed (the drain bound, 5 s later).
#[tokio::test(start_paused = true)]
async fn after_the_hosts_half_close_a_call_fails_at_once_while_a_handler_still_runs() {
    let server = builder()
        .feature_set("digest", "Summaries", &[Capability::InferenceRequest])
        .tool(
            "big",
            "Answers 1 MiB",
            json!({"type": "object"}),
            |_s, _p| async {
                tokio::task::yield_now().await;
                Ok(mcpl::protocol::handshake::ToolsCallResult::text(
                    "x".repeat(1 << 20),
                ))
            },
        )
        .tool(
            "hang",
            "Never returns",
            json!({"type": "object"}),
            |_s, _p| async {
                std::future::pending::<()>().await;
                unreachable!("pending never resolves")
            },
        )
        .build()
        .unwrap();
    let (mut host, session) = PipeHost::start(&server);
    host.connect(&["tools", "inferenceRequest"]).await;
    host.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                     "params": {"name": "hang", "arguments": {}}}))
        .await;
    flood_half_close_and_ask(&mut host, &session).await;
}

/// The end of the half-close tests: 16 `big` calls the host never reads the answers of, the
/// host's half-close once every task is blocked (paused time), then the server's own
/// `inference/request`, which must be refused `Closed(Eof)` while the connection is still
/// open (the host may still read).
async fn flood_half_close_and_ask(host: &mut PipeHost, session: &mcpl::server::Session) {
    for id in 0..16u64 {
        host.send(
            json!({"jsonrpc": "2.0", "id": 10 + id, "method": "tools/call",
                         "params": {"name": "big", "arguments": {}}}),
        )
        .await;
    }
    // Paused time: the sleep ends once every task is blocked on the host, which reads
    // nothing.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    tokio::io::AsyncWriteExt::shutdown(&mut host.write)
        .await
        .unwrap();
    let params = serde_json::from_value(json!({
        "featureSet": "digest",
        "messages": [{"role": "user", "content": "summarise"}]
    }))
    .unwrap();
    let e = session.inference_request(params).await.unwrap_err();
    assert_eq!(
        e,
        mcpl::server::SendError::Peer(mcpl::peer::PeerError::Closed(mcpl::peer::CloseReason::Eof))
    );
    use futures_util::FutureExt;
    assert!(
        session.closed().now_or_never().is_none(),
        "refused while the connection is still open (the host may still read)"
    );
}

/// The host's half-close is an input as soon as it is read, though the peer's reader still
/// holds its own `busy` answers (§5; `ServerState::handle_eof`) for a host that does not
/// read yet: the session is told the input ended while the host reads nothing, and every
/// `busy` answer is still written once it reads. Before, the reader held the end back until
/// it had queued those answers, so the end came only at the drain limit (5 s), and the
/// answers still held then were dropped.
#[tokio::test(start_paused = true)]
async fn the_hosts_half_close_is_seen_while_the_reader_holds_its_busy_answers() {
    const FLOOD: u64 = 256;
    let server = builder()
        .peer_config(PeerConfig {
            max_in_flight_requests: 1,
            outgoing_capacity: 1,
            ..PeerConfig::default()
        })
        .tool(
            "hang",
            "Never returns",
            json!({"type": "object"}),
            |_s, _p| async {
                std::future::pending::<()>().await;
                unreachable!("pending never resolves")
            },
        )
        .build()
        .unwrap();
    let (mut host, session) = PipeHost::start(&server);
    let mut diagnostics = session.diagnostics();
    host.connect(&["tools"]).await;
    // The one request in flight the bound allows, never answered.
    host.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                     "params": {"name": "hang", "arguments": {}}}))
        .await;
    // Each answered `busy` by the reader, under a 1,000-byte id: together far more than the
    // pipe (64 KiB) and the writer's queue (one frame) take while the host reads nothing.
    let pad = "p".repeat(990);
    for n in 0..FLOOD {
        host.send(json!({"jsonrpc": "2.0", "id": format!("{n}-{pad}"), "method": "ping"}))
            .await;
    }
    tokio::io::AsyncWriteExt::shutdown(&mut host.write)
        .await
        .unwrap();
    // Told while the host still reads nothing (paused time: this would also end at the
    // drain limit, which is why the answers are counted below).
    loop {
        match diagnostics.recv().await {
            Ok(ServerDiagnostic::InputEnded) => break,
            Ok(_) => {}
            Err(e) => panic!("no InputEnded: {e}"),
        }
    }
    let mut busy = 0;
    while let Some(f) = host.frame().await {
        if f["error"]["code"] == -32000 {
            busy += 1;
        }
    }
    assert_eq!(busy, FLOOD, "busy answers lost at the host's half-close");
}

/// An MCP fallback whose `initialize` answers once the session says the host's input ended.
struct AnswersAtTheEnd {
    diagnostics: std::sync::Mutex<Option<broadcast::Receiver<ServerDiagnostic>>>,
}

impl mcpl::server::McpFallback for AnswersAtTheEnd {
    fn initialize(
        &self,
        _id: &mcpl::jsonrpc::RequestId,
        params: serde_json::Value,
    ) -> mcpl::server::FallbackFuture {
        let rx = self.diagnostics.lock().unwrap().take();
        Box::pin(async move {
            let mut rx = rx.expect("initialize is handed out once");
            loop {
                match rx.recv().await {
                    Ok(ServerDiagnostic::InputEnded) => break,
                    Ok(_) => {}
                    Err(e) => panic!("no InputEnded: {e}"),
                }
            }
            Ok(
                json!({"protocolVersion": params["protocolVersion"], "capabilities": {},
                      "serverInfo": {"name": "inner", "version": "1"}}),
            )
        })
    }

    fn request(
        &self,
        _id: &mcpl::jsonrpc::RequestId,
        method: &str,
        _params: Option<serde_json::Value>,
    ) -> mcpl::server::FallbackFuture {
        let e = mcpl::jsonrpc::ErrorObject::method_not_found(method);
        Box::pin(async move { Err(e) })
    }

    fn notification(&self, _method: &str, _params: Option<serde_json::Value>) {}
}

/// The host's half-close is an input as soon as it is read while the MCP fallback's
/// `initialize` is pending (`ServerState::handle_eof`): the fallback, told the input ended,
/// answers, and the host still reads that answer. Before, the driver read nothing until
/// `initialize` was answered, the end included: the fallback waited for an end it was never
/// told of, and the connection closed at the drain limit with `initialize` unanswered.
#[tokio::test(start_paused = true)]
async fn the_hosts_half_close_is_seen_while_the_fallbacks_initialize_is_pending() {
    let server = builder()
        .mcp_fallback(|session| {
            Arc::new(AnswersAtTheEnd {
                diagnostics: std::sync::Mutex::new(Some(session.diagnostics())),
            })
        })
        .build()
        .unwrap();
    let (mut host, _session) = PipeHost::start(&server);
    host.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "pipe-host", "version": "0"}}}))
        .await;
    tokio::io::AsyncWriteExt::shutdown(&mut host.write)
        .await
        .unwrap();
    let answer = host.response(1).await.expect("initialize answered");
    assert_eq!(answer["result"]["serverInfo"]["name"], "inner", "{answer}");
}

/// An MCP fallback whose `initialize` never answers, counted alive until it is dropped.
struct NeverInitializes(Arc<Live>);

impl mcpl::server::McpFallback for NeverInitializes {
    fn initialize(
        &self,
        _id: &mcpl::jsonrpc::RequestId,
        _params: serde_json::Value,
    ) -> mcpl::server::FallbackFuture {
        let alive = Alive::enter(&self.0);
        Box::pin(async move {
            let _alive = alive;
            std::future::pending().await
        })
    }

    fn request(
        &self,
        _id: &mcpl::jsonrpc::RequestId,
        method: &str,
        _params: Option<serde_json::Value>,
    ) -> mcpl::server::FallbackFuture {
        let e = mcpl::jsonrpc::ErrorObject::method_not_found(method);
        Box::pin(async move { Err(e) })
    }

    fn notification(&self, _method: &str, _params: Option<serde_json::Value>) {}
}

/// A connection that ends while the MCP fallback's `initialize` is pending (no request
/// timeout) and a message read after it waits for it ends its driver: the fallback's
/// `initialize` is stopped. Here the host sends `initialize`, a `ping` (MCP allows one
/// before the answer) and its end of output; the connection closes at the drain limit.
/// Before, the driver waited for that `initialize` for good (it watched the close only
/// once it had read the end), and the fallback's future was never dropped.
#[tokio::test(start_paused = true)]
async fn a_connection_that_closes_while_the_fallbacks_initialize_is_pending_ends_its_driver() {
    let live = Arc::new(Live::default());
    let fallback_live = live.clone();
    let server = builder()
        .peer_config(PeerConfig {
            request_timeout: None,
            ..PeerConfig::default()
        })
        .mcp_fallback(move |_session| Arc::new(NeverInitializes(fallback_live.clone())))
        .build()
        .unwrap();
    let (mut host, session) = PipeHost::start(&server);
    host.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "pipe-host", "version": "0"}}}))
        .await;
    host.send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    tokio::io::AsyncWriteExt::shutdown(&mut host.write)
        .await
        .unwrap();
    session.closed().await;
    tokio::time::timeout(std::time::Duration::from_secs(3600), async {
        loop {
            let ended = live.ended.notified();
            if live.called.load(Ordering::SeqCst) == 1 && live.now.load(Ordering::SeqCst) == 0 {
                break;
            }
            ended.await;
        }
    })
    .await
    .expect("the fallback's initialize is still running after the connection closed");
}
