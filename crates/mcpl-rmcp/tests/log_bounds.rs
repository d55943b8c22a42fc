//! What the bridge logs of the host's text is cut to a bounded length
//! (`mcpl::session::clip_text`, 1 KiB): a host chooses its method names and what rmcp's
//! errors quote, up to a whole message (16 MiB by default), and each was logged uncut.
//! One test in this binary: it installs the process's log subscriber.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Every log line written, in order.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Clone)]
struct Quiet;

impl rmcp::ServerHandler for Quiet {}

#[tokio::test]
async fn what_the_bridge_logs_of_the_hosts_text_is_cut() {
    let captured = Captured::default();
    let sink = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        // The bridge's own lines (rmcp's are rmcp's).
        .with_env_filter("mcpl_rmcp=debug")
        .init();
    let server = mcpl_rmcp::builder(Quiet).build().unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let (hr, mut hw) = tokio::io::split(host_end);
    let mut lines = BufReader::new(hr).lines();
    let send = |v: Value| {
        let mut line = v.to_string();
        line.push('\n');
        line
    };
    let long = "x".repeat(100_000);
    let frames = [
        // Before `initialize` rmcp does not run yet: a notification is not handed to it,
        // and the line says which.
        send(json!({"jsonrpc": "2.0", "method": format!("notifications/{long}")})),
        send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "raw", "version": "0"}}})),
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})),
    ];
    for f in frames {
        hw.write_all(f.as_bytes()).await.unwrap();
    }
    // The notifications are handed to the bridge, in order, before `ping` is answered.
    loop {
        let line = lines.next_line().await.unwrap().expect("open");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 2 {
            break;
        }
    }
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(text.contains("not handed to rmcp"), "{:.2000}", text);
    assert!(longest <= 4 * 1024, "a log line of {longest} bytes");
}
