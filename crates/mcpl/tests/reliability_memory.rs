//! Memory boundedness measured in allocations (not RSS): a counting global allocator tracks
//! live heap bytes. This binary holds a single test so nothing else allocates meanwhile.
//!
//! A slowloris line of 32 MiB without a newline, and then 32 MiB of oversized lines, against
//! a 64 KiB message limit: the live heap never grows by more than a small constant (the
//! line buffer up to the limit, the read buffer, the pipe), and the connection still answers.
#![cfg(feature = "runtime")]

use mcpl::peer::{Diagnostic, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[path = "support/live_bytes.rs"]
mod live_bytes;

const LIMIT: usize = 64 * 1024;
const FLOOD: usize = 32 * 1024 * 1024;
/// Allowed growth of the live heap while the flood streams through.
const BOUND: isize = 1024 * 1024;

#[test]
fn slowloris_and_oversized_floods_keep_the_live_heap_bounded() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, mut bw) = tokio::io::split(b);
        let config = PeerConfig {
            max_message_size: LIMIT,
            ..PeerConfig::default()
        };
        let (peer, mut incoming) = Peer::new(Transport::lines(ar, aw, "memory"), config);
        let mut diagnostics = peer.diagnostics();
        tokio::spawn(async move {
            while let Some(msg) = incoming.recv().await {
                if let IncomingMessage::Request(r) = msg {
                    let _ = r.respond(json!("pong")).await;
                }
            }
        });
        let mut lines = BufReader::new(br).lines();
        let chunk = vec![b'z'; 16 * 1024];

        // Warm up (first allocations of the runtime and the peer), then take the baseline.
        bw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        lines.next_line().await.unwrap().unwrap();
        let baseline = live_bytes::live();
        live_bytes::reset_peak(baseline);

        // One endless line, then one newline.
        for _ in 0..FLOOD / chunk.len() {
            bw.write_all(&chunk).await.unwrap();
        }
        bw.write_all(b"\n").await.unwrap();
        // Many lines each just over the limit.
        let mut line = vec![b'q'; LIMIT + 10];
        line.push(b'\n');
        for _ in 0..FLOOD / line.len() {
            bw.write_all(&line).await.unwrap();
        }
        bw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(v, json!({"jsonrpc":"2.0","id":1,"result":"pong"}));

        let growth = live_bytes::peak() - baseline;
        eprintln!(
            "peak live-heap growth over {} MiB of hostile input: {growth} bytes",
            (2 * FLOOD) >> 20
        );
        assert!(growth < BOUND, "live heap grew by {growth} bytes");

        // Each discarded line was reported; the diagnostics stream is bounded too (lagging
        // readers get one `Dropped` with the count).
        let mut oversized = 0u64;
        while let Some(d) = diagnostics.try_recv() {
            match d {
                Diagnostic::Oversized { .. } => oversized += 1,
                Diagnostic::Dropped { count } => oversized += count,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(oversized, 1 + (FLOOD / line.len()) as u64);
    });
}
