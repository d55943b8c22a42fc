//! A handler that never returns, of every kind a host request reaches (a tool, the
//! `context/beforeInference` hook, the channel handlers, `state/rollback`, a custom method, the
//! MCP fallback): the host's cancel is what ends it (MCP cancellation; §10.6 puts the hook's
//! timeout at the host, which then gives the request up). The server has no handler deadline
//! of its own: a request the host has not given up may legitimately run for as long as its
//! work takes, and a host that gives up without cancelling holds at most
//! `PeerConfig::max_in_flight_requests` slots of its own connection (each past it answered
//! busy, never delivered). Each case shows, over a real transport (JSON lines on a pipe):
//! the hung request holds its slot (a `ping` behind it is answered busy, `max_in_flight` 1),
//! the cancel is answered `-32800` under the request's id, the handler's future is dropped
//! (counted), and the slot is free again (the next `ping` is answered).
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcpl::capability::Capability;
use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::peer::PeerConfig;
use mcpl::server::{FallbackFuture, HandlerResult, McpFallback, Server, ServerBuilder, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

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

/// A future that never resolves, counted in `live` from the call.
fn hang<T: Send + 'static>(
    live: &Arc<Live>,
) -> impl std::future::Future<Output = HandlerResult<T>> + Send + 'static {
    let alive = Alive::enter(live);
    async move {
        let _alive = alive;
        std::future::pending::<HandlerResult<T>>().await
    }
}

/// A host writing raw JSON lines and reading the server's.
struct RawHost {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    session: Session,
}

impl RawHost {
    fn start(server: &Server) -> RawHost {
        let (host_end, server_end) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(host_end);
        let (sr, sw) = tokio::io::split(server_end);
        let session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
        RawHost {
            lines: BufReader::new(read).lines(),
            write,
            session,
        }
    }

    async fn send(&mut self, v: Value) {
        self.write
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The next line from the server.
    async fn recv(&mut self) -> Value {
        let line = self
            .lines
            .next_line()
            .await
            .unwrap()
            .expect("the server is up");
        serde_json::from_str(&line).unwrap()
    }

    /// The answer to request `id`; no other answer or request comes first.
    async fn answer_to(&mut self, id: Value) -> Value {
        let v = self.recv().await;
        assert_eq!(v["id"], id, "expected the answer to {id}: {v}");
        assert!(v.get("method").is_none(), "{v}");
        v
    }

    /// `initialize` as an MCPL 0.5 host, `notifications/initialized`, the policy Request
    /// granting `caps`.
    async fn ready(&mut self, caps: &[&str]) {
        self.send(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18",
                       "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                       "clientInfo": {"name": "host", "version": "0"}}}))
            .await;
        self.answer_to(json!("i")).await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        self.send(
            json!({"jsonrpc": "2.0", "id": "p", "method": "featureSets/update",
            "params": {"effectiveCapabilities": caps}}),
        )
        .await;
        let receipt = self.answer_to(json!("p")).await;
        assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    }

    /// The server registers channel `c` and the host accepts it (§14.3, §14.5).
    async fn with_channel_c(&mut self) {
        let session = self.session.clone();
        let c = mcpl::protocol::channels::ChannelDescriptor::new("c", "chat");
        let task = tokio::spawn(async move { session.channels_register(vec![c]).await });
        let req = self.recv().await;
        assert_eq!(req["method"], "channels/register", "{req}");
        self.send(json!({"jsonrpc": "2.0", "id": req["id"],
            "result": {"results": [{"id": "c", "accepted": true}]}}))
            .await;
        task.await.unwrap().unwrap();
    }
}

/// An MCP fallback whose requests never return (its `initialize` answers).
struct HangingFallback(Arc<Live>);

impl McpFallback for HangingFallback {
    fn initialize(&self, _id: &RequestId, _params: Value) -> FallbackFuture {
        Box::pin(async {
            Ok(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "serverInfo": {"name": "fallback", "version": "0"}}))
        })
    }

    fn request(&self, _id: &RequestId, _method: &str, _params: Option<Value>) -> FallbackFuture {
        Box::pin(hang::<Value>(&self.0))
    }

    fn notification(&self, _method: &str, _params: Option<Value>) {}
}

fn builder() -> ServerBuilder {
    Server::builder("hung", "1.0.0").peer_config(PeerConfig {
        max_in_flight_requests: 1,
        ..PeerConfig::default()
    })
}

/// One kind of handler: the server with a hung one, the grant its request needs, whether
/// it names channel `c`, the request's method and params.
struct Case {
    name: &'static str,
    server: Server,
    caps: &'static [&'static str],
    channel: bool,
    method: &'static str,
    params: Value,
}

fn cases(live: &Arc<Live>) -> Vec<Case> {
    let l = live.clone();
    let tool = builder()
        .feature_set("t", "Tools", &[Capability::Tools])
        .tool(
            "hang",
            "Never returns",
            json!({"type": "object"}),
            move |_s, _p| hang(&l),
        )
        .build()
        .unwrap();
    let l = live.clone();
    let hook = builder()
        .feature_set("h", "Hints", &[Capability::InjectBeforeUser])
        .on_before_inference("h", move |_g, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let open = builder()
        .feature_set("c", "Chat", &[Capability::ChannelsLifecycle])
        .on_channels_open(move |_s, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let close = builder()
        .feature_set(
            "c",
            "Chat",
            &[Capability::ChannelsLifecycle, Capability::ChannelsRegister],
        )
        .on_channels_open(|_s, _p| async { Err(ErrorObject::internal("unused")) })
        .on_channels_close(move |_s, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let publish = builder()
        .feature_set(
            "c",
            "Chat",
            &[Capability::ChannelsPublish, Capability::ChannelsRegister],
        )
        .on_channels_publish(move |_s, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let rollback = builder()
        .feature_set_declaration(
            "n",
            serde_json::from_value(json!({"description": "Notes", "uses": ["tools"],
                                          "rollback": true}))
            .unwrap(),
        )
        .on_rollback(move |_s, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let custom = builder()
        .method("x/hang", move |_s, _p| hang(&l))
        .build()
        .unwrap();
    let l = live.clone();
    let fallback = builder()
        .mcp_fallback(move |_s| Arc::new(HangingFallback(l.clone())))
        .build()
        .unwrap();
    vec![
        Case {
            name: "tool",
            server: tool,
            caps: &["tools"],
            channel: false,
            method: "tools/call",
            params: json!({"name": "hang", "arguments": {}}),
        },
        Case {
            name: "hook",
            server: hook,
            caps: &["contextHooks.beforeInference.inject.beforeUser"],
            channel: false,
            method: "context/beforeInference",
            params: json!({"inferenceId": "i1", "conversationId": "c1", "turnIndex": 0}),
        },
        Case {
            name: "channels/open",
            server: open,
            caps: &["channels.lifecycle"],
            channel: false,
            method: "channels/open",
            params: json!({"type": "chat"}),
        },
        Case {
            name: "channels/close",
            server: close,
            caps: &["channels.lifecycle", "channels.register"],
            channel: true,
            method: "channels/close",
            params: json!({"channelId": "c"}),
        },
        Case {
            name: "channels/publish",
            server: publish,
            caps: &["channels.publish", "channels.register"],
            channel: true,
            method: "channels/publish",
            params: json!({"channelId": "c", "content": "hi"}),
        },
        Case {
            name: "state/rollback",
            server: rollback,
            caps: &["tools"],
            channel: false,
            method: "state/rollback",
            params: json!({"featureSet": "n", "checkpoint": "k1"}),
        },
        Case {
            name: "custom method",
            server: custom,
            caps: &[],
            channel: false,
            method: "x/hang",
            params: json!({}),
        },
        Case {
            name: "MCP fallback",
            server: fallback,
            caps: &[],
            channel: false,
            method: "x/hang",
            params: json!({}),
        },
    ]
}

/// Waits until no counted handler is alive (the timeout is a guard: a hung one is a failure).
async fn all_stopped(live: &Live, case: &str) {
    let stopped = async {
        loop {
            let ended = live.ended.notified();
            if live.now.load(Ordering::SeqCst) == 0 {
                break;
            }
            ended.await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(3600), stopped)
        .await
        .unwrap_or_else(|_| panic!("{case}: the cancelled handler still runs"));
}

#[tokio::test(start_paused = true)]
async fn a_cancel_ends_a_hung_handler_of_every_kind_and_frees_its_slot() {
    let live = Arc::new(Live::default());
    for case in cases(&live) {
        let name = case.name;
        let called = live.called.load(Ordering::SeqCst);
        let mut host = RawHost::start(&case.server);
        host.ready(case.caps).await;
        if case.channel {
            host.with_channel_c().await;
        }
        host.send(json!({"jsonrpc": "2.0", "id": 10, "method": case.method,
                         "params": case.params}))
            .await;
        host.send(json!({"jsonrpc": "2.0", "id": 11, "method": "ping"}))
            .await;
        let busy = host.answer_to(json!(11)).await;
        assert_eq!(
            busy["error"]["code"], -32000,
            "{name}: the hung request holds the one slot: {busy}"
        );
        assert_eq!(
            live.called.load(Ordering::SeqCst),
            called + 1,
            "{name}: its handler runs"
        );
        host.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 10, "reason": "gave up"}}),
        )
        .await;
        let cancelled = host.answer_to(json!(10)).await;
        assert_eq!(
            cancelled["error"]["code"],
            mcpl::jsonrpc::codes::REQUEST_CANCELLED,
            "{name}: {cancelled}"
        );
        all_stopped(&live, name).await;
        host.send(json!({"jsonrpc": "2.0", "id": 12, "method": "ping"}))
            .await;
        let pong = host.answer_to(json!(12)).await;
        assert_eq!(
            pong["result"],
            json!({}),
            "{name}: the slot is free: {pong}"
        );
    }
}

/// A host that sends far more slow `tools/call`s than the server runs at once (and reads its
/// answers): at most `max_in_flight_requests` handlers are alive, every call past them is
/// answered busy (`-32000`) without reaching the tool, so what the connection holds does not
/// grow with the number of calls.
#[tokio::test(start_paused = true)]
async fn slow_calls_past_the_in_flight_bound_are_answered_busy_unrun() {
    const CALLS: u64 = 5_000;
    let live = Arc::new(Live::default());
    let l = live.clone();
    let server = Server::builder("hung", "1.0.0")
        .feature_set("t", "Tools", &[Capability::Tools])
        .tool(
            "hang",
            "Never returns",
            json!({"type": "object"}),
            move |_s, _p| hang(&l),
        )
        .build()
        .unwrap();
    let mut host = RawHost::start(&server);
    host.ready(&["tools"]).await;
    let bound = mcpl::peer::DEFAULT_MAX_IN_FLIGHT_REQUESTS;
    let (mut write, mut lines) = (host.write, host.lines);
    let writer = tokio::spawn(async move {
        for id in 0..CALLS {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": "hang", "arguments": {}}});
            write
                .write_all(format!("{call}\n").as_bytes())
                .await
                .unwrap();
        }
        write
    });
    let mut busy = 0;
    while busy < CALLS - bound as u64 {
        let line = lines.next_line().await.unwrap().expect("the server is up");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["code"], -32000, "only busy answers: {v}");
        busy += 1;
        assert!(live.now.load(Ordering::SeqCst) <= bound);
    }
    let _write = writer.await.unwrap();
    assert_eq!(live.now.load(Ordering::SeqCst), bound);
    assert_eq!(live.called.load(Ordering::SeqCst), bound);
}
