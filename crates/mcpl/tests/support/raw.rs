//! The other end of a peer's transport, spoken to in raw lines: shared by the wire-level
//! peer tests so every byte is under test.
#![allow(dead_code)] // each test file uses a different part

use std::time::Duration;

use mcpl::peer::{Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

/// A deadlock guard for the raw side's waits, never a synchronisation: with the clock
/// paused it is reached only once every task waits, which is how a line never written shows.
pub const GUARD: Duration = Duration::from_secs(3600);

/// Answers every request `incoming` delivers with `"ok"` (the `sync` of [`Raw::before_sync`]
/// among them), from a task.
pub fn answer_all(mut incoming: Incoming) {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                let _ = r.respond("ok").await;
            }
        }
    });
}

/// The raw side: writes lines, reads lines as JSON.
pub struct Raw {
    pub lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    pub write: WriteHalf<DuplexStream>,
}

impl Raw {
    /// Writes one line.
    pub async fn send(&mut self, line: &str) {
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    /// Writes `bytes` and a newline, whatever they are (no UTF-8 needed).
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    /// Writes one JSON value as a line.
    pub async fn send_json(&mut self, v: Value) {
        self.send(&v.to_string()).await;
    }

    /// Reads the next line as JSON.
    pub async fn recv(&mut self) -> Value {
        serde_json::from_str(&self.recv_line().await).unwrap()
    }

    /// Sends a `sync` request (answered by [`answer_all`]) and returns every line the peer
    /// wrote before its answer, in order: what the lines sent before it were answered with.
    pub async fn before_sync(&mut self) -> Vec<Value> {
        self.send(r#"{"jsonrpc":"2.0","id":"sync","method":"sync"}"#)
            .await;
        let mut before = Vec::new();
        loop {
            let v = tokio::time::timeout(GUARD, self.recv())
                .await
                .expect("no answer to sync");
            if v["id"] == "sync" {
                return before;
            }
            before.push(v);
        }
    }

    /// Reads the next line as text, exactly as written.
    pub async fn recv_line(&mut self) -> String {
        self.lines
            .next_line()
            .await
            .unwrap()
            .expect("raw side saw EOF")
    }
}

/// A peer over an in-memory pipe of `buffer` bytes, and the raw side of that pipe.
pub fn raw_peer_with(config: PeerConfig, buffer: usize) -> (Peer, Incoming, Raw) {
    let (a, b) = tokio::io::duplex(buffer);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let (peer, incoming) = Peer::new(Transport::lines(ar, aw, "test"), config);
    let raw = Raw {
        lines: BufReader::new(br).lines(),
        write: bw,
    };
    (peer, incoming, raw)
}

/// [`raw_peer_with`] a 64 KiB pipe.
pub fn raw_peer(config: PeerConfig) -> (Peer, Incoming, Raw) {
    raw_peer_with(config, 64 * 1024)
}

/// A scripted server's `initialize` result: `tools`, and `experimental.mcpl` when a manifest
/// is given (§5.1).
pub fn init_result(manifest: Option<Value>) -> Value {
    let mut caps = json!({ "tools": {} });
    if let Some(m) = manifest {
        caps["experimental"] = json!({ "mcpl": m });
    }
    json!({ "protocolVersion": "2024-11-05", "capabilities": caps,
            "serverInfo": { "name": "scripted", "version": "1" } })
}
