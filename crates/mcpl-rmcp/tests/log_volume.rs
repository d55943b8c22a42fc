//! A flood of notifications the bridge drops makes a bounded number of log lines: at most
//! one per `mcpl::transport::listen::REPORT_INTERVAL` per reason, the next one counting those
//! not shown (`mcpl::throttle::Throttle`). Each made one line before, so a host sending
//! notifications before `initialize` wrote as many warnings as it sent notifications.
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
async fn dropped_notifications_log_a_bounded_number_of_lines() {
    let captured = Captured::default();
    let sink = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_env_filter("mcpl_rmcp=warn")
        .init();
    let server = mcpl_rmcp::builder(Quiet).build().unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let _session = server.start(mcpl::transport::Transport::lines(sr, sw, "pipe"));
    let (hr, mut hw) = tokio::io::split(host_end);
    let mut lines = BufReader::new(hr).lines();
    // Before `initialize` rmcp does not run: each of these is dropped.
    let flood = 500;
    let mut text = String::new();
    for n in 0..flood {
        text.push_str(
            &json!({"jsonrpc": "2.0", "method": format!("notifications/n{n}")}).to_string(),
        );
        text.push('\n');
    }
    text.push_str(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string());
    text.push('\n');
    hw.write_all(text.as_bytes()).await.unwrap();
    // The notifications are handed to the bridge, in order, before `ping` is answered.
    loop {
        let line = lines.next_line().await.unwrap().expect("open");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 1 {
            break;
        }
    }
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let said = text
        .lines()
        .filter(|l| l.contains("not handed to rmcp"))
        .count();
    assert!(
        (1..=2).contains(&said),
        "{said} lines for {flood} drops: {text:.2000}"
    );
}
