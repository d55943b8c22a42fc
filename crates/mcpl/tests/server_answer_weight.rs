//! A `Server` answer made as a value (an MCP fallback's, a hook's) and waiting for the
//! connection's driver (which takes no answers while its outbox is full, for a host that
//! reads nothing) counts against `PeerConfig::max_in_flight_bytes` by what it holds, not by
//! its text: an answer dense in small objects (`{"a":1}`: 7 bytes of text, a ~640-byte map
//! node) holds ~80 times its text.
//!
//! A counting global allocator measures the live heap: this binary holds a single test, so
//! nothing else allocates meanwhile. The host is a raw pipe (JSON lines).
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::server::{FallbackFuture, McpFallback, Server};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

#[path = "support/live_bytes.rs"]
mod live_bytes;

/// `{"a":1}` this many times: 16 KB as text, about 1.3 MB held as a value.
const OBJECTS: usize = 2_000;
/// A string of this many bytes beside them, so the answers' text fills the writer's queue
/// (`peer::OUTGOING_QUEUE_BYTES`, 8 MiB) and the driver stops taking answers: the rest wait
/// for it as values.
const PAD: usize = 200 * 1024;

/// Answers `dense` with 2,000 `{"a":1}` and [`PAD`] bytes once it has yielded (so the
/// answer waits for the driver like any handler's that awaited something).
struct Dense(Arc<AtomicUsize>);

impl McpFallback for Dense {
    fn initialize(&self, _id: &RequestId, _params: Value) -> FallbackFuture {
        Box::pin(async {
            Ok(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "serverInfo": {"name": "dense", "version": "0"}}))
        })
    }

    fn request(&self, _id: &RequestId, method: &str, _params: Option<Value>) -> FallbackFuture {
        if method != "dense" && method != "dense-error" {
            let e = ErrorObject::method_not_found(method);
            return Box::pin(async move { Err(e) });
        }
        let made = self.0.clone();
        let error = method == "dense-error";
        Box::pin(async move {
            tokio::task::yield_now().await;
            made.fetch_add(1, Ordering::SeqCst);
            let dense = json!({"objects": vec![json!({"a": 1}); OBJECTS], "pad": "x".repeat(PAD)});
            match error {
                // The same weight carried by an error's `data`.
                true => Err(ErrorObject::new(-32000, "dense").with_data(dense)),
                false => Ok(dense),
            }
        })
    }

    fn notification(&self, _method: &str, _params: Option<Value>) {}
}

async fn send(write: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>, v: Value) {
    let mut line = v.to_string();
    line.push('\n');
    write.write_all(line.as_bytes()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn answers_made_as_values_for_a_host_that_never_reads_count_what_they_hold() {
    // One test (the live heap is the process's), both shapes of answer in turn: a result,
    // and an error whose `data` holds the same.
    for method in ["dense", "dense-error"] {
        held_within_the_bound(method).await;
    }
}

async fn held_within_the_bound(method: &str) {
    let made = Arc::new(AtomicUsize::new(0));
    let server = {
        let made = made.clone();
        Server::builder("dense", "1.0.0")
            .mcp_fallback(move |_s| Arc::new(Dense(made.clone())) as Arc<dyn McpFallback>)
            .build()
            .unwrap()
    };
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let (hr, mut write) = tokio::io::split(host_end);
    let mut lines = tokio::io::BufReader::new(hr).lines();
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18",
                       "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                       "clientInfo": {"name": "pipe-host", "version": "0"}}}),
    )
    .await;
    loop {
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == json!(1) {
            assert!(v["result"].is_object(), "{v}");
            break;
        }
    }
    send(
        &mut write,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;

    let baseline = live_bytes::live();
    let calls = 128u64;
    for id in 0..calls {
        send(
            &mut write,
            json!({"jsonrpc": "2.0", "id": 10 + id, "method": method}),
        )
        .await;
        // Time is paused: the sleep ends only once every task is blocked (the host reads
        // nothing), so the server has done all it would with this call before the next.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let held = live_bytes::live() - baseline;
    let made = made.load(Ordering::SeqCst);
    eprintln!("{method}: {made} answers made: {held} bytes held");
    // The byte bound on answers waiting as values (32 MiB) and the one that crosses it,
    // plus text: the driver's outbox (it stops taking answers past 4 MiB, holds at most
    // 16 MiB), the writer's queue (8 MiB) and the pipe (64 KiB).
    assert!(
        held < 60 << 20,
        "{method}: {made} dense answers made for a host that reads nothing held {held} bytes"
    );
    assert!(made >= 1);
}
