//! What the bridge logs of the host's text is cut to a bounded length
//! (`mcpl::session::clip_text`, 1 KiB): a host chooses its method names and what rmcp's
//! errors quote, up to a whole message (16 MiB by default), and each was logged uncut.
//! One test in this binary: it installs the process's log subscriber.

mod support;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn what_the_bridge_logs_of_the_hosts_text_is_cut() {
    // The bridge's own lines (rmcp's are rmcp's).
    let (captured, bridged) = support::captured_bridge("mcpl_rmcp=debug");
    let support::Bridged {
        mut lines,
        writer: mut hw,
        session: _session,
    } = bridged;
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
    let text = captured.text();
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(text.contains("not handed to rmcp"), "{:.2000}", text);
    assert!(longest <= 4 * 1024, "a log line of {longest} bytes");
}
