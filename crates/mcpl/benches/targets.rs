//! Issue #24's benchmark targets, each through the public host→server API (a
//! [`HostSession`] talking to a [`Server`]) and each against a floor measured in the same
//! run, in the same process, right before it:
//!
//! - in-memory sequential `tools/call` round trip / a bare duplex line echo (≤ 3×);
//! - loopback TCP round trip / a bare socket line echo (≤ 1.5×);
//! - 10,000 concurrent outstanding `tools/call`s on one in-memory connection (≤ 3 µs each);
//! - 100,000 `inference/lifecycle` notifications one way in memory (50,000 turns, each
//!   `started` + `completed`, §10.5) (≤ 1 µs each);
//! - resident memory per idle `HostSession` at 1,000 TCP connections (≤ 16 KiB; the server in
//!   a child process, this binary re-run with `--tcp-server`);
//! - full session setup over a child's stdio (spawn, `initialize`, policy Request + receipt,
//!   first `tools/call`; the child is this binary re-run with `--stdio-server`) / the same
//!   exchange between two bare JSON-lines programs (`--bare-stdio`) (≤ 1.3×);
//! - `host::before_inference` cost per server at 1, 10, 100 and 1,000 servers, at once and
//!   one at a time (flat: ≤ 1.25× of the cost at 1 server and of the cost at 100);
//! - allocations per in-memory round trip (≤ 12), counted, not timed.
//!
//! Run: `ulimit -n 4096 && cargo bench -p mcpl --bench targets` (quick mode, ≈ 1.5 min);
//! a filter (`-- round_trip`, `-- fan_out` …) runs some groups only; `-- idle` or
//! `-- setup` only those parts. Under `cargo test --benches` it runs a smoke version.
//! Untimed, for a profiler: `--setup-loop N session|bare` runs N setups over stdio.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::{BufRead, Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{record, report, Ratio};
use criterion::{Criterion, Throughput};
use futures_util::future::join_all;
use mcpl::capability::Capability;
use mcpl::host::{before_inference, HostConfig, HostSession, HostStreams};
use mcpl::peer::PeerConfig;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{Server, Session};
use mcpl::transport::{memory, tcp, Transport};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::runtime::Runtime;

/// Counts every allocation of the process (one relaxed add: the same small cost for floor
/// and subject); read around the allocation count only.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed (the heap part of the idle memory figure).
static LIVE: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Turns the bench server has seen end (its `on_turn_end` callback).
static TURNS_ENDED: AtomicU64 = AtomicU64::new(0);

fn tool_params() -> Value {
    json!({"name": "echo", "arguments": {"text": "hello"}})
}

fn peer_config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        max_pending_requests: 20_000,
        ..PeerConfig::default()
    }
}

/// What the host grants: everything the bench server's feature sets use.
fn host_config() -> HostConfig {
    HostConfig {
        policy: vec![
            "tools".into(),
            "inferenceLifecycle".into(),
            "contextHooks.beforeInference.observe".into(),
            "contextHooks.beforeInference.inject.system".into(),
        ],
        peer: peer_config(),
        ..HostConfig::default()
    }
}

/// The bench server: an `echo` tool answering "hello", a `beforeInference` hook injecting
/// one `system` block, and a turn-end counter.
fn bench_server() -> Server {
    Server::builder("bench", "1")
        .feature_set("bench.tools", "Echo", &[Capability::Tools])
        .feature_set(
            "bench.hook",
            "Inject",
            &[Capability::Observe, Capability::InjectSystem],
        )
        .feature_set(
            "bench.turns",
            "Count turns",
            &[Capability::InferenceLifecycle],
        )
        .tool("echo", "Echo", json!({"type": "object"}), |_s, _p| async {
            Ok(ToolsCallResult::text("hello"))
        })
        .on_before_inference("bench.hook", |_g, _p| async {
            Ok(BeforeInferenceResult::with_injections(Some(
                ContextInjection::new("bench", Position::System, "context"),
            )))
        })
        .on_turn_end(|_| {
            TURNS_ENDED.fetch_add(1, Ordering::Relaxed);
        })
        .peer_config(peer_config())
        .build()
        .expect("bench server builds")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A connected in-memory session pair; the server's [`Session`] and the host's streams are
/// kept alive with it.
struct Pair {
    host: HostSession,
    _streams: HostStreams,
    _server: Session,
}

async fn memory_pair(server: &Server) -> Pair {
    let (a, b) = memory::pair();
    let session = server.start(b);
    let (host, streams) = HostSession::connect(a, host_config())
        .await
        .expect("host connects");
    Pair {
        host,
        _streams: streams,
        _server: session,
    }
}

async fn tcp_pair() -> (Transport, Transport) {
    let listener = tcp::Listener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (client, accepted) = tokio::join!(tcp::connect(addr), listener.accept());
    (client.expect("connect"), accepted.expect("accept").0)
}

async fn tcp_session_pair(server: &Server) -> Pair {
    let (a, b) = tcp_pair().await;
    let session = server.start(b);
    let (host, streams) = HostSession::connect(a, host_config())
        .await
        .expect("host connects");
    Pair {
        host,
        _streams: streams,
        _server: session,
    }
}

async fn raw_tcp_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let (client, server) = (client.expect("connect"), accepted.expect("accept").0);
    client.set_nodelay(true).expect("nodelay");
    server.set_nodelay(true).expect("nodelay");
    (client, server)
}

fn line(v: Value) -> Vec<u8> {
    let mut l = serde_json::to_vec(&v).expect("json");
    l.push(b'\n');
    l
}

/// The lines a `tools/call` round trip puts on the wire.
fn request_line() -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": tool_params()}))
}

fn response_line() -> Vec<u8> {
    line(
        json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "hello"}]}}),
    )
}

/// The floor: reads a line, writes the canned response line; no JSON work at all.
fn spawn_raw_echo<R, W>(r: R, mut w: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, r);
        let resp = response_line();
        let mut l = Vec::with_capacity(256);
        loop {
            l.clear();
            match r.read_until(b'\n', &mut l).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if w.write_all(&resp).await.is_err() || w.flush().await.is_err() {
                break;
            }
        }
    });
}

/// The floor's client side: writes the request line, reads one line back.
struct RawClient {
    r: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    w: Box<dyn AsyncWrite + Unpin + Send>,
    req: Vec<u8>,
    line: Vec<u8>,
}

impl RawClient {
    async fn round_trip(&mut self) {
        self.w.write_all(&self.req).await.expect("write");
        self.w.flush().await.expect("flush");
        self.line.clear();
        self.r
            .read_until(b'\n', &mut self.line)
            .await
            .expect("read");
    }
}

async fn raw_client(transport: &str) -> RawClient {
    let (r, w): (
        Box<dyn AsyncRead + Unpin + Send>,
        Box<dyn AsyncWrite + Unpin + Send>,
    ) = if transport == "memory" {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (br, bw) = tokio::io::split(b);
        spawn_raw_echo(br, bw);
        let (ar, aw) = tokio::io::split(a);
        (Box::new(ar), Box::new(aw))
    } else {
        let (client, server) = raw_tcp_pair().await;
        let (sr, sw) = server.into_split();
        spawn_raw_echo(sr, sw);
        let (cr, cw) = client.into_split();
        (Box::new(cr), Box::new(cw))
    };
    RawClient {
        r: BufReader::with_capacity(64 * 1024, r),
        w,
        req: request_line(),
        line: Vec::with_capacity(256),
    }
}

/// Connections each round-trip bench cycles through, one round trip on each in turn (as
/// `benches/peer.rs`: one connection per side settled in one of two speeds per process).
const RT_CONNECTIONS: usize = 16;

/// Sequential `tools/call` round trips, `HostSession::request_raw` (and the typed
/// `HostSession::request::<ToolsCall>`) to a `Server`, against the bare line echo over the
/// same kind of pipe.
fn round_trips(c: &mut Criterion, rt: &Runtime, server: &Server, transport: &'static str) {
    let mut g = c.benchmark_group(format!("round_trip/{transport}"));
    g.throughput(Throughput::Elements(1));
    let base_key: &'static str = Box::leak(format!("rt/{transport}/raw").into_boxed_str());
    let sub_key: &'static str = Box::leak(format!("rt/{transport}/session").into_boxed_str());
    let typed_key: &'static str =
        Box::leak(format!("rt/{transport}/session_typed").into_boxed_str());
    let mut raw = Vec::new();
    let mut pairs = Vec::new();
    for _ in 0..RT_CONNECTIONS {
        raw.push(rt.block_on(raw_client(transport)));
        pairs.push(rt.block_on(async {
            if transport == "memory" {
                memory_pair(server).await
            } else {
                tcp_session_pair(server).await
            }
        }));
    }
    let params = tool_params();
    g.bench_function("raw_line_echo", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters {
                    raw[i as usize % RT_CONNECTIONS].round_trip().await;
                }
                record(base_key, iters, t.elapsed())
            })
        })
    });
    g.bench_function("host_session_tools_call", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters {
                    let host = &pairs[i as usize % RT_CONNECTIONS].host;
                    black_box(
                        host.request_raw("tools/call", params.clone())
                            .await
                            .expect("tools/call"),
                    );
                }
                record(sub_key, iters, t.elapsed())
            })
        })
    });
    // The typed call (issue #24: no `Value` tree for its params or its result).
    let typed: mcpl::protocol::handshake::ToolsCallParams =
        serde_json::from_value(tool_params()).expect("tools/call params");
    g.bench_function("host_session_tools_call_typed", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters {
                    let host = &pairs[i as usize % RT_CONNECTIONS].host;
                    black_box(
                        host.request::<mcpl::protocol::handshake::ToolsCall>(&typed)
                            .await
                            .expect("tools/call"),
                    );
                }
                record(typed_key, iters, t.elapsed())
            })
        })
    });
    g.finish();
}

const CONCURRENT: usize = 10_000;
const NOTIFICATIONS: u64 = 100_000;

/// 10,000 concurrent `tools/call`s on one in-memory connection, and 100,000 lifecycle
/// notifications one way; the floor is the bare one-way line throughput of the same pipe.
fn pipelined(c: &mut Criterion, rt: &Runtime, server: &Server) {
    let mut g = c.benchmark_group("pipelined/memory");
    g.sample_size(10);
    let pair = rt.block_on(memory_pair(server));
    let (mut raw_w, mut raw_done) = rt.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::channel::<()>(1);
        let (a, b) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut r = BufReader::with_capacity(64 * 1024, b);
            let mut l = Vec::with_capacity(256);
            let mut seen = 0u64;
            loop {
                l.clear();
                match r.read_until(b'\n', &mut l).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                seen += 1;
                if seen == NOTIFICATIONS {
                    seen = 0;
                    let _ = tx.send(()).await;
                }
            }
        });
        (BufWriter::with_capacity(64 * 1024, a), rx)
    });
    let lifecycle = line(
        json!({"jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
        "inferenceId": "i-0000000", "conversationId": "c", "turnIndex": 1, "phase": "started"}}),
    );
    let params = tool_params();
    let next_id = AtomicU64::new(0);

    g.throughput(Throughput::Elements(NOTIFICATIONS));
    g.bench_function("raw_lines_100k", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    for _ in 0..NOTIFICATIONS {
                        raw_w.write_all(&lifecycle).await.expect("write");
                    }
                    raw_w.flush().await.expect("flush");
                    raw_done.recv().await.expect("sink");
                }
                record("pipe/raw", iters * NOTIFICATIONS, t.elapsed())
            })
        })
    });
    g.bench_function("lifecycle_notifications_100k", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    let before = TURNS_ENDED.load(Ordering::Relaxed);
                    for _ in 0..NOTIFICATIONS / 2 {
                        let n = next_id.fetch_add(1, Ordering::Relaxed);
                        let id = format!("i-{n:07}");
                        let turn = pair.host.start_turn(&id, "c", n).await.expect("started");
                        turn.complete(None).await.expect("completed");
                    }
                    // The server reads in wire order: once a later request is answered,
                    // every notification before it has been handled.
                    pair.host
                        .request_raw("tools/call", params.clone())
                        .await
                        .expect("tools/call");
                    let ended = TURNS_ENDED.load(Ordering::Relaxed) - before;
                    assert_eq!(ended, NOTIFICATIONS / 2, "every turn ended on the server");
                }
                record("pipe/notify", iters * NOTIFICATIONS, t.elapsed())
            })
        })
    });
    g.throughput(Throughput::Elements(CONCURRENT as u64));
    g.bench_function("concurrent_10k_tools_calls", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    let calls = (0..CONCURRENT)
                        .map(|_| pair.host.request_raw("tools/call", params.clone()));
                    for r in join_all(calls).await {
                        black_box(r.expect("tools/call"));
                    }
                }
                record("pipe/concurrent", iters * CONCURRENT as u64, t.elapsed())
            })
        })
    });
    g.finish();
}

/// Servers of the largest fan-out.
const FAN_MAX: usize = 1_000;
const FAN_SIZES: [usize; 4] = [1, 10, 100, 1_000];

/// `host::before_inference` over the first N of 1,000 in-memory sessions: the cost per
/// server, at once and one session at a time (cycling through N of them).
fn fan_out(c: &mut Criterion, rt: &Runtime, server: &Server, max: usize) {
    let mut g = c.benchmark_group("fan_out");
    let pairs: Vec<Pair> = rt.block_on(async {
        let mut v = Vec::with_capacity(max);
        for _ in 0..max {
            v.push(memory_pair(server).await);
        }
        v
    });
    let all: Vec<&HostSession> = pairs.iter().map(|p| &p.host).collect();
    let params = json!({"inferenceId": "inf-1", "conversationId": "c1", "turnIndex": 3,
        "userMessage": "What is the weather?"});
    let check = rt.block_on(before_inference(&all, &params));
    assert_eq!(check.system.len(), max, "every server injected");
    for n in FAN_SIZES.into_iter().filter(|&n| n <= max) {
        let at_once: &'static str = Box::leak(format!("fan/once/{n}").into_boxed_str());
        let serial: &'static str = Box::leak(format!("fan/serial/{n}").into_boxed_str());
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("at_once_{n}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(before_inference(&all[..n], &params).await);
                    }
                    // Per server.
                    record(at_once, iters * n as u64, t.elapsed())
                })
            })
        });
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("one_at_a_time_of_{n}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for i in 0..iters {
                        let one = i as usize % n;
                        black_box(before_inference(&all[one..=one], &params).await);
                    }
                    record(serial, iters, t.elapsed())
                })
            })
        });
    }
    g.finish();
}

/// How many calls an allocation count makes: the positive number in environment variable
/// `name`, else 1,000.
fn count_from_env(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1_000)
}

/// Allocations `work` makes, per one of its `calls` (the counting allocator's tally).
async fn allocations_during(calls: u64, work: impl std::future::Future<Output = ()>) -> u64 {
    let before = ALLOCS.load(Ordering::Relaxed);
    work.await;
    (ALLOCS.load(Ordering::Relaxed) - before) / calls
}

/// Allocations per in-memory `tools/call` round trip, host and server together (the
/// caller's params built before counting, as `tests/peer_allocs.rs`). `MCPL_BENCH_ROUND_TRIPS`
/// sets how many are counted (1,000): under `valgrind --tool=callgrind`, the difference
/// between two counts of `--bench allocs` gives the instructions per round trip, a figure the
/// VM's two speeds do not move.
fn allocations(rt: &Runtime, server: &Server) -> u64 {
    let n = count_from_env("MCPL_BENCH_ROUND_TRIPS");
    rt.block_on(async {
        let pair = memory_pair(server).await;
        let params = tool_params();
        for _ in 0..100 {
            pair.host
                .request_raw("tools/call", params.clone())
                .await
                .expect("tools/call");
        }
        let inputs: Vec<Value> = (0..n).map(|_| params.clone()).collect();
        allocations_during(n, async {
            for p in inputs {
                black_box(
                    pair.host
                        .request_raw("tools/call", p)
                        .await
                        .expect("tools/call"),
                );
            }
        })
        .await
    })
}

/// Allocations per in-memory round trip through the typed call,
/// `HostSession::request::<ToolsCall>` (its params written and its result read with no
/// `Value` tree, issue #24), the params built before counting; `MCPL_BENCH_TYPED_ROUND_TRIPS`
/// (1,000) sets how many, apart from `MCPL_BENCH_ROUND_TRIPS` so that two counts under
/// callgrind give either call's instructions alone.
fn typed_allocations(rt: &Runtime, server: &Server) -> u64 {
    use mcpl::protocol::handshake::{ToolsCall, ToolsCallParams};
    let n = count_from_env("MCPL_BENCH_TYPED_ROUND_TRIPS");
    rt.block_on(async {
        let pair = memory_pair(server).await;
        let params: ToolsCallParams =
            serde_json::from_value(tool_params()).expect("tools/call params");
        for _ in 0..100 {
            pair.host
                .request::<ToolsCall>(&params)
                .await
                .expect("tools/call");
        }
        allocations_during(n, async {
            for _ in 0..n {
                black_box(
                    pair.host
                        .request::<ToolsCall>(&params)
                        .await
                        .expect("tools/call"),
                );
            }
        })
        .await
    })
}

/// Allocations per `tools/call` when `MCPL_BENCH_CONCURRENT` (1,000) are outstanding at once
/// on one in-memory connection (after one such burst as warm-up; params built before
/// counting); under callgrind, two counts give the instructions per concurrent call.
fn concurrent_allocations(rt: &Runtime, server: &Server) -> u64 {
    let n = count_from_env("MCPL_BENCH_CONCURRENT");
    rt.block_on(async {
        let pair = memory_pair(server).await;
        let params = tool_params();
        let burst = |inputs: Vec<Value>| {
            let calls = inputs
                .into_iter()
                .map(|p| pair.host.request_raw("tools/call", p));
            join_all(calls)
        };
        for r in burst((0..n).map(|_| params.clone()).collect()).await {
            black_box(r.expect("tools/call"));
        }
        let inputs: Vec<Value> = (0..n).map(|_| params.clone()).collect();
        allocations_during(n, async {
            for r in burst(inputs).await {
                black_box(r.expect("tools/call"));
            }
        })
        .await
    })
}

/// Allocations per `inference/lifecycle` notification (`start_turn` + `complete`, host and
/// server together), over `MCPL_BENCH_TURNS` turns (1,000) after 100 warm-up ones; under
/// callgrind, as `MCPL_BENCH_ROUND_TRIPS`, two counts give the instructions per turn.
fn lifecycle_allocations(rt: &Runtime, server: &Server) -> u64 {
    let n = count_from_env("MCPL_BENCH_TURNS");
    rt.block_on(async {
        let pair = memory_pair(server).await;
        let params = tool_params();
        let mut next = 0u64;
        let mut turns = |count: u64| {
            let ids: Vec<String> = (0..count)
                .map(|_| {
                    next += 1;
                    format!("a-{next:07}")
                })
                .collect();
            let host = &pair.host;
            let params = params.clone();
            async move {
                let before = TURNS_ENDED.load(Ordering::Relaxed);
                for (n, id) in ids.iter().enumerate() {
                    let turn = host.start_turn(id, "c", n as u64).await.expect("started");
                    turn.complete(None).await.expect("completed");
                }
                // In wire order: once this is answered, every turn was handled.
                host.request_raw("tools/call", params)
                    .await
                    .expect("tools/call");
                assert_eq!(TURNS_ENDED.load(Ordering::Relaxed) - before, count);
            }
        };
        turns(100).await;
        let counted = turns(n);
        allocations_during(2 * n, counted).await
    })
}

// ---- idle memory at 1,000 TCP connections -------------------------------------------

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn open_files_soft_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let l = limits.lines().find(|l| l.starts_with("Max open files"))?;
    l.split_whitespace().nth(3)?.parse().ok()
}

/// The `--tcp-server` child: the bench server on a loopback listener, one `serve` per
/// connection; prints its port, exits when its stdin closes.
fn tcp_server() {
    runtime().block_on(async {
        let listener = tcp::Listener::bind("127.0.0.1:0").await.expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().ok();
        std::thread::spawn(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        let server = bench_server();
        loop {
            let Ok((transport, _)) = listener.accept().await else {
                continue;
            };
            let server = server.clone();
            tokio::spawn(async move { server.serve(transport).await });
        }
    });
}

/// Resident memory per idle `HostSession`, measured in a fresh process (this binary re-run
/// with `--idle-host N`): in this one, the heap the other parts freed would be reused and
/// hide the growth.
fn idle_memory(n: usize, what: &str) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .args(["--idle-host", &n.to_string(), what])
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("per-connection-kib "))
        .and_then(|v| v.trim().parse().ok())
}

/// One idle connection of the `--idle-host` child (held only to keep it open).
#[allow(dead_code)]
enum Held {
    Session(HostSession, HostStreams),
    Peer(mcpl::peer::Peer, mcpl::peer::Incoming),
}

/// The `--idle-host N session|peer` child: the resident memory of this process per idle
/// `HostSession` (initialized, policy applied, one `tools/call` done), or per bare `Peer`
/// (one `ping` done: the floor the session is built on), `n` TCP connections to the server
/// child (`--tcp-server`).
fn idle_host(n: usize, bare_peer: bool) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let mut child = std::process::Command::new(exe)
        .arg("--tcp-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut port = String::new();
    std::io::BufReader::new(child.stdout.take()?)
        .read_line(&mut port)
        .ok()?;
    let addr = format!("127.0.0.1:{}", port.trim());
    let rt = runtime();
    let params = tool_params();
    let (before, after) = rt.block_on(async {
        let connect = || async {
            let t = tcp::connect(&addr).await.expect("connect");
            if bare_peer {
                let (peer, incoming) = mcpl::peer::Peer::new(t, peer_config());
                peer.request_raw("ping", None).await.expect("ping");
                return Held::Peer(peer, incoming);
            }
            let (host, streams) = HostSession::connect(t, host_config())
                .await
                .expect("host connects");
            host.request_raw("tools/call", params.clone())
                .await
                .expect("first tools/call");
            Held::Session(host, streams)
        };
        // Warm the runtime, the allocator and the code paths first.
        match connect().await {
            Held::Session(h, _) => h.close(),
            Held::Peer(p, _) => p.close(),
        }
        tokio::task::yield_now().await;
        let mut held = Vec::with_capacity(n);
        let before = rss_kib();
        let live_before = LIVE.load(Ordering::Relaxed);
        for _ in 0..n {
            held.push(connect().await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = rss_kib();
        let heap = LIVE.load(Ordering::Relaxed).saturating_sub(live_before);
        println!(
            "idle memory: of which heap in use {:.1} KiB per connection",
            heap as f64 / 1024.0 / n.max(1) as f64
        );
        drop(held);
        (before, after)
    });
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    let per = after.saturating_sub(before) as f64 / n.max(1) as f64;
    if bare_peer {
        println!(
            "idle memory: host RSS {before} KiB, with {n} idle bare Peers over TCP {after} KiB: \
             {per:.1} KiB per connection  (reported: the floor)"
        );
    } else {
        println!(
            "idle memory: host RSS {before} KiB, with {n} idle HostSessions over TCP {after} KiB: \
             {per:.1} KiB per connection  target <= 16 KiB  {}",
            if per <= 16.0 { "MET" } else { "MISSED" }
        );
    }
    Some(per)
}

// ---- session setup over a child's stdio ---------------------------------------------

/// The `--stdio-server` child: the bench server over its stdio.
fn stdio_server() {
    runtime().block_on(async {
        bench_server().serve(mcpl::transport::stdio::stdio()).await;
    });
}

/// What the bare JSON-lines server answers, by method (the same shapes the bench server
/// sends: its manifest with three feature sets, a receipt, a tool result).
fn bare_answer(method: &str) -> Value {
    match method {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {
            "tools": {}, "experimental": {"mcpl": {"version": "0.5",
            "contextHooks": {"beforeInference": {"observe": true, "inject": {"system": true}}},
            "inferenceLifecycle": true,
            "featureSets": {
                "bench.tools": {"description": "Echo", "uses": ["tools"]},
                "bench.hook": {"description": "Inject", "uses": [
                    "contextHooks.beforeInference.observe",
                    "contextHooks.beforeInference.inject.system"]},
                "bench.turns": {"description": "Count turns", "uses": ["inferenceLifecycle"]}}}}},
            "serverInfo": {"name": "bench", "version": "1"}}),
        "featureSets/update" => json!({"accepted": true, "applied": {
            "bench.tools": {"enabled": true}, "bench.hook": {"enabled": true},
            "bench.turns": {"enabled": true}}}),
        _ => json!({"content": [{"type": "text", "text": "hello"}]}),
    }
}

/// The `--bare-stdio` child: a bare JSON-lines program answering each request line (parsed
/// into a `Value`, as any JSON-lines program must) with [`bare_answer`].
fn bare_stdio() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut l = String::new();
    let mut input = stdin.lock();
    loop {
        l.clear();
        match input.read_line(&mut l) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(v) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        let (Some(id), Some(method)) = (v.get("id"), v.get("method").and_then(Value::as_str))
        else {
            continue;
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": bare_answer(method)});
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// The bare host: spawns `--bare-stdio`, sends the same exchange as a `HostSession`
/// (initialize, initialized, the policy Request, one `tools/call`), parses each answer,
/// closes stdin and waits for the exit.
async fn bare_setup(exe: &std::path::Path) {
    let mut child = tokio::process::Command::new(exe)
        .arg("--bare-stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut w = child.stdin.take().expect("stdin");
    let mut r = BufReader::new(child.stdout.take().expect("stdout"));
    let mut l = String::new();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
            "clientInfo": {"name": "mcpl", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "featureSets/update", "params": {
            "enabled": ["tools", "inferenceLifecycle", "contextHooks.beforeInference.observe",
                        "contextHooks.beforeInference.inject.system"]}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": tool_params()}),
    ];
    for msg in lines {
        let expects_answer = msg.get("id").is_some();
        w.write_all(&line(msg)).await.expect("write");
        w.flush().await.expect("flush");
        if expects_answer {
            l.clear();
            r.read_line(&mut l).await.expect("read");
            black_box(serde_json::from_str::<Value>(&l).expect("answer"));
        }
    }
    drop(w);
    child.wait().await.expect("exit");
}

/// The subject: spawns `--stdio-server`, connects a `HostSession` (handshake and policy
/// exchange with receipt, §5.3), makes the first `tools/call`, closes and waits for the exit.
async fn session_setup(exe: &std::path::Path) {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--stdio-server");
    let (transport, control) = mcpl::transport::child::spawn(&mut cmd).expect("spawn");
    let (host, _streams) = HostSession::connect(transport, host_config())
        .await
        .expect("host connects");
    assert!(host.is_ready(), "policy applied");
    black_box(
        host.request_raw("tools/call", tool_params())
            .await
            .expect("tools/call"),
    );
    host.close();
    control.wait().await.expect("exit");
}

fn setup(c: &mut Criterion, rt: &Runtime) {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut g = c.benchmark_group("setup/stdio");
    g.bench_function("bare_json_lines_programs", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    bare_setup(&exe).await;
                }
                record("setup/bare", iters, t.elapsed())
            })
        })
    });
    g.bench_function("host_session_and_server", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    session_setup(&exe).await;
                }
                record("setup/session", iters, t.elapsed())
            })
        })
    });
    g.finish();
}

/// Which parts run: each part, unless a part's name is among the arguments (criterion's
/// own filters still apply inside the timed parts).
fn runs(part: &str) -> bool {
    let parts = [
        "round_trip",
        "pipelined",
        "fan_out",
        "setup",
        "idle",
        "allocs",
    ];
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| parts.iter().any(|p| a.starts_with(p)))
        .collect();
    named.is_empty() || named.iter().any(|a| a.starts_with(part))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--tcp-server") {
        return tcp_server();
    }
    if args.iter().any(|a| a == "--stdio-server") {
        return stdio_server();
    }
    if args.iter().any(|a| a == "--bare-stdio") {
        return bare_stdio();
    }
    if let Some(i) = args.iter().position(|a| a == "--setup-loop") {
        // `--setup-loop N session|bare`: N setups over stdio one after another, untimed, for
        // a profiler (`perf stat`, callgrind) to count this side's work per setup; prints the
        // allocations per setup on this side.
        let n: u32 = args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(100);
        let bare = args.get(i + 2).is_some_and(|w| w == "bare");
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let per = runtime().block_on(allocations_during(u64::from(n.max(1)), async {
            for _ in 0..n {
                if bare {
                    bare_setup(&exe).await;
                } else {
                    session_setup(&exe).await;
                }
            }
        }));
        println!("allocations per setup (this side) {per}");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--idle-host") {
        let n = args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(20);
        let bare_peer = args.get(i + 2).is_some_and(|w| w == "peer");
        if let Some(per) = idle_host(n, bare_peer) {
            println!("per-connection-kib {per:.1}");
        }
        return;
    }
    let bench = common::bench_mode();
    let mut c = common::criterion();
    let rt = runtime();
    let server = bench_server();
    let mut idle = None;
    let mut allocs = None;
    if runs("round_trip") {
        round_trips(&mut c, &rt, &server, "memory");
        round_trips(&mut c, &rt, &server, "tcp");
    }
    if runs("pipelined") {
        pipelined(&mut c, &rt, &server);
    }
    if runs("fan_out") {
        fan_out(&mut c, &rt, &server, if bench { FAN_MAX } else { 10 });
    }
    if runs("setup") {
        setup(&mut c, &rt);
    }
    let mut typed_allocs = None;
    if runs("allocs") || runs("round_trip") {
        allocs = Some(allocations(&rt, &server));
        typed_allocs = Some(typed_allocations(&rt, &server));
    }
    let (mut lifecycle_allocs, mut concurrent_allocs) = (None, None);
    if runs("allocs") || runs("pipelined") {
        lifecycle_allocs = Some(lifecycle_allocations(&rt, &server));
        concurrent_allocs = Some(concurrent_allocations(&rt, &server));
    }
    if runs("idle") {
        let mut n: usize = if bench { 1_000 } else { 20 };
        if let Some(limit) = open_files_soft_limit() {
            let room = limit.saturating_sub(64) as usize;
            if room < n {
                println!("idle memory: open-files limit {limit} is too low for {n} connections; run `ulimit -n 4096` first. Using {room}.");
                n = room;
            }
        }
        idle_memory(n, "peer");
        idle = idle_memory(n, "session");
    }
    c.final_summary();
    report(
        "issue #24 targets",
        &[
            Ratio {
                name: "round trip, in-memory: HostSession+Server / raw duplex echo",
                subject: "rt/memory/session",
                baseline: "rt/memory/raw",
                target: Some(3.0),
            },
            Ratio {
                name: "round trip, in-memory, typed call: HostSession+Server / raw duplex echo",
                subject: "rt/memory/session_typed",
                baseline: "rt/memory/raw",
                target: Some(3.0),
            },
            Ratio {
                name: "round trip, loopback TCP: HostSession+Server / raw socket echo",
                subject: "rt/tcp/session",
                baseline: "rt/tcp/raw",
                target: Some(1.5),
            },
            Ratio {
                name: "10k concurrent tools/call, in-memory: per request / raw line",
                subject: "pipe/concurrent",
                baseline: "pipe/raw",
                target: None,
            },
            Ratio {
                name: "100k lifecycle notifications, in-memory: each / raw line",
                subject: "pipe/notify",
                baseline: "pipe/raw",
                target: None,
            },
            Ratio {
                name: "session setup over stdio: HostSession+Server / bare programs",
                subject: "setup/session",
                baseline: "setup/bare",
                target: Some(1.3),
            },
            Ratio {
                name: "fan-out at once, per server: 10 servers / 1",
                subject: "fan/once/10",
                baseline: "fan/once/1",
                target: Some(1.25),
            },
            Ratio {
                name: "fan-out at once, per server: 100 servers / 1",
                subject: "fan/once/100",
                baseline: "fan/once/1",
                target: Some(1.25),
            },
            Ratio {
                name: "fan-out at once, per server: 1,000 servers / 1",
                subject: "fan/once/1000",
                baseline: "fan/once/1",
                target: Some(1.25),
            },
            Ratio {
                name: "fan-out at once, per server: 1,000 servers / 100",
                subject: "fan/once/1000",
                baseline: "fan/once/100",
                target: Some(1.25),
            },
            Ratio {
                name: "one at a time, cycling 1,000 sessions / cycling 1",
                subject: "fan/serial/1000",
                baseline: "fan/serial/1",
                target: Some(1.25),
            },
            Ratio {
                name: "one at a time, cycling 1,000 sessions / cycling 100",
                subject: "fan/serial/1000",
                baseline: "fan/serial/100",
                target: Some(1.25),
            },
        ],
    );
    for (key, target) in [("pipe/concurrent", 3e-6), ("pipe/notify", 1e-6)] {
        if let Some(s) = common::median(key) {
            println!(
                "{key:<58} {:>10} each  target <= {}  {}",
                common::human(s),
                common::human(target),
                if s <= target { "MET" } else { "MISSED" }
            );
        }
    }
    if let Some(a) = allocs {
        println!(
            "allocations per in-memory round trip (HostSession+Server, both sides): {a}  target <= 12  {}",
            if a <= 12 { "MET" } else { "MISSED" }
        );
    }
    if let Some(a) = typed_allocs {
        println!(
            "allocations per in-memory round trip, typed call (HostSession::request::<ToolsCall>): {a}  target <= 12  {}",
            if a <= 12 { "MET" } else { "MISSED" }
        );
    }
    if let Some(a) = concurrent_allocs {
        let n = count_from_env("MCPL_BENCH_CONCURRENT");
        println!("allocations per tools/call with {n} outstanding (host and server together): {a}  (reported)");
    }
    if let Some(a) = lifecycle_allocs {
        println!(
            "allocations per lifecycle notification (host and server together): {a}  (reported)"
        );
    }
    if let Some(per) = idle {
        println!(
            "idle memory per HostSession at 1,000 TCP connections: {per:.1} KiB  target <= 16 KiB"
        );
    }
}
