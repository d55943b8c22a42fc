//! Issue "Performance" item 5: one host process holding 1,000 concurrent loopback TCP
//! connections to servers (in a child process: this binary re-run with `--scale-server`).
//! Reports resident memory per idle connection (VmRSS from /proc/self/status, host side
//! only) and the p50/p99 latency of a request while all 1,000 connections are sending.
//!
//!
//! Issue #20: the idle memory of the reference server (`mcpl serve`'s
//! `reference::serve_on`, in a child process: `--idle-server tcp|ws`) per idle connection
//! at 2,000 connections over TCP and over WebSocket (each connection initialized, then left
//! idle), and what is left once they have all closed, as a ratio to the RSS before them
//! (both measured after the serve loop's memory release, `ServeConfig::release_memory`).
//! Target: <= 32 KiB per connection, and the memory returned after they close.
//!
//! Run (the host needs one descriptor per connection, plus a few):
//! `ulimit -n 4096 && cargo bench -p mcpl --bench scale` (both parts), `… -- idle` (the
//! idle-memory part only) or `… -- host` (the 1,000-connection host part only).
//! `MCPL_BENCH_NO_RELEASE=1` serves with `release_memory` off, for comparison.
//! Under `cargo test --benches` (no `--bench` flag) it runs a 20-connection smoke version.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcpl::peer::{Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::tcp;
use serde_json::json;

fn rss_kib() -> u64 {
    rss_kib_of(std::process::id())
}

fn open_files_soft_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The server process: accepts connections forever, answers every request; exits when its
/// stdin closes (the host went away).
fn serve() {
    let rt = runtime();
    rt.block_on(async {
        let listener = tcp::Listener::bind("127.0.0.1:0").await.expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().ok();
        std::thread::spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            std::process::exit(0);
        });
        let result = json!({"content": [{"type": "text", "text": "hello"}]});
        loop {
            let Ok((transport, _)) = listener.accept().await else {
                continue;
            };
            let (peer, mut incoming) = Peer::new(transport, PeerConfig::default());
            let result = result.clone();
            tokio::spawn(async move {
                let _keep = peer;
                while let Some(msg) = incoming.recv().await {
                    if let IncomingMessage::Request(req) = msg {
                        let _ = req.respond(&result).await;
                    }
                }
            });
        }
    });
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn rss_kib_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The reference server on a listener, as `mcpl serve --tcp/--ws` runs it (multi-thread
/// runtime); exits when stdin closes.
fn idle_server(kind: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        std::thread::spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            std::process::exit(0);
        });
        let config = mcpl::server::listen::ServeConfig {
            release_memory: std::env::var_os("MCPL_BENCH_NO_RELEASE").is_none(),
            // Every connection of the bench comes from 127.0.0.1.
            listen: mcpl::transport::listen::ListenConfig {
                max_connections_per_address: usize::MAX,
                ..Default::default()
            },
            ..Default::default()
        };
        if kind == "ws" {
            let l = mcpl::transport::ws::Listener::bind("127.0.0.1:0", None)
                .await
                .expect("bind");
            println!("{}", l.local_addr().expect("addr").port());
            std::io::stdout().flush().ok();
            mcpl::reference::serve_on(std::sync::Arc::new(l), config)
                .await
                .expect("the ServeConfig serves");
        } else {
            let l = tcp::Listener::bind("127.0.0.1:0").await.expect("bind");
            println!("{}", l.local_addr().expect("addr").port());
            std::io::stdout().flush().ok();
            mcpl::reference::serve_on(std::sync::Arc::new(l), config)
                .await
                .expect("the ServeConfig serves");
        }
    });
}

/// This bench binary re-run with `args` as a server process, and the port it printed first.
fn server_process(args: &[&str]) -> (std::process::Child, String) {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the server process");
    let mut port = String::new();
    BufReader::new(child.stdout.take().expect("child stdout"))
        .read_line(&mut port)
        .expect("read the port");
    (child, port.trim().to_owned())
}

/// Opens `n` initialized idle connections to a reference server over `kind` and reports the
/// server's resident memory per connection, and after they all closed.
fn idle_memory(kind: &str, n: usize) {
    let (mut child, port) = server_process(&["--idle-server", kind]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "scale", "version": "0"}}})
    .to_string();
    let rt = runtime();
    let (before, idle, after) = rt.block_on(async {
        let open = || async {
            let mut t = if kind == "ws" {
                mcpl::transport::ws::connect(&format!("ws://127.0.0.1:{port}"), None)
                    .await
                    .expect("connect")
            } else {
                tcp::connect(format!("127.0.0.1:{port}"))
                    .await
                    .expect("connect")
            };
            t.writer.send(&init).await.expect("send");
            t.reader.next_frame().await.expect("answer");
            t
        };
        drop(open().await);
        // Past the release that follows the warm-up connection's end, as after the others.
        let settle = mcpl::server::listen::RELEASE_DELAY + Duration::from_secs(1);
        tokio::time::sleep(settle).await;
        let before = rss_kib_of(child.id());
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(open().await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = rss_kib_of(child.id());
        drop(held);
        tokio::time::sleep(settle + Duration::from_secs(1)).await;
        (before, idle, rss_kib_of(child.id()))
    });
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    let per = idle.saturating_sub(before) as f64 / n.max(1) as f64;
    let ratio = after as f64 / before.max(1) as f64;
    let held = idle.saturating_sub(before) as f64;
    let kept = after.saturating_sub(before) as f64;
    println!(
        "idle {kind}: server RSS {before} KiB, with {n} idle connections {idle} KiB: {per:.1} KiB per connection  target <= 32 KiB  {}",
        if per <= 32.0 { "MET" } else { "MISSED" },
    );
    println!(
        "idle {kind}: after they closed {after} KiB = {ratio:.2}x the RSS before them ({:.0}% of what they held is still resident)",
        100.0 * kept / held.max(1.0),
    );
}

/// Which parts run: every part, unless a filter (`idle`, `host`) names some.
fn runs(part: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "idle" || a == "host")
        .collect();
    filters.is_empty() || filters.iter().any(|f| f == part)
}

fn main() {
    if std::env::args().any(|a| a == "--scale-server") {
        serve();
        return;
    }
    if let Some(i) = std::env::args().position(|a| a == "--idle-server") {
        idle_server(&std::env::args().nth(i + 1).unwrap_or_default());
        return;
    }
    let bench = common::bench_mode();
    let idle_n = if bench { 2000 } else { 20 };
    let idle_n = match open_files_soft_limit() {
        Some(limit) if (limit as usize) < idle_n + 64 => {
            println!("scale: open-files limit {limit} is too low for {idle_n} idle connections; run `ulimit -n 4096` first.");
            (limit as usize).saturating_sub(64)
        }
        _ => idle_n,
    };
    if runs("idle") {
        idle_memory("tcp", idle_n);
        idle_memory("ws", idle_n);
    }
    if !runs("host") {
        return;
    }
    let mut n: usize = if bench { 1000 } else { 20 };
    let load_for = if bench {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(200)
    };
    if let Some(limit) = open_files_soft_limit() {
        let room = limit.saturating_sub(64) as usize;
        if room < n {
            println!("scale: open-files limit {limit} is too low for {n} connections; run `ulimit -n 4096` first. Using {room}.");
            n = room;
        }
    }

    let (mut child, port) = server_process(&["--scale-server"]);
    let addr = format!("127.0.0.1:{port}");

    let rt = runtime();
    let params = json!({"name": "echo", "arguments": {"text": "hello"}});
    let (rss0, rss1, mut latencies, wall) = rt.block_on(async {
        // Warm the runtime, the allocator and the code paths with one connection first.
        {
            let (p, _i) = Peer::new(
                tcp::connect(&addr).await.expect("connect"),
                PeerConfig::default(),
            );
            p.request_raw("tools/call", Some(params.clone()))
                .await
                .expect("warm-up request");
            p.close();
        }
        tokio::task::yield_now().await;
        let rss0 = rss_kib();
        let mut peers: Vec<(Peer, Incoming)> = Vec::with_capacity(n);
        for _ in 0..n {
            let t = tcp::connect(&addr).await.expect("connect");
            peers.push(Peer::new(t, PeerConfig::default()));
        }
        // One exchange each, so every connection has done its first read and write.
        let pings = peers
            .iter()
            .map(|(p, _)| p.request_raw("tools/call", Some(params.clone())));
        for r in futures_util::future::join_all(pings).await {
            r.expect("first request");
        }
        let rss1 = rss_kib();

        // Every connection sends requests back to back for `load_for`.
        let deadline = Instant::now() + load_for;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (p, _) in &peers {
            let p = p.clone();
            let params = params.clone();
            tasks.spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    if p.request_raw("tools/call", Some(params.clone()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    lat.push(t.elapsed());
                }
                lat
            });
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r.unwrap_or_default());
        }
        let wall = started.elapsed();
        drop(peers);
        (rss0, rss1, all, wall)
    });
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();

    latencies.sort_unstable();
    let per_conn = (rss1.saturating_sub(rss0)) as f64 / n.max(1) as f64;
    println!("\n== scale: {n} loopback TCP connections, one host process ==");
    println!("{}", common::machine());
    println!(
        "RSS before {rss0} KiB, after {n} idle connections {rss1} KiB: {per_conn:.1} KiB per idle connection  target <= 64 KiB  {}",
        if per_conn <= 64.0 { "MET" } else { "MISSED" }
    );
    println!(
        "{} requests in {:.2} s while all {n} send ({:.0} req/s): p50 {}  p99 {}  max {}",
        latencies.len(),
        wall.as_secs_f64(),
        latencies.len() as f64 / wall.as_secs_f64(),
        common::human(percentile(&latencies, 0.50).as_secs_f64()),
        common::human(percentile(&latencies, 0.99).as_secs_f64()),
        common::human(latencies.last().copied().unwrap_or_default().as_secs_f64()),
    );
}
