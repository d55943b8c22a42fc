//! A flood of notifications the bridge drops makes a bounded number of log lines: at most
//! one per `mcpl::transport::listen::REPORT_INTERVAL` per reason, the next one counting those
//! not shown (`mcpl::throttle::Throttle`). Each made one line before, so a host sending
//! notifications before `initialize` wrote as many warnings as it sent notifications.
//! One test in this binary: it installs the process's log subscriber.

mod support;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn dropped_notifications_log_a_bounded_number_of_lines() {
    let (captured, bridged) = support::captured_bridge("mcpl_rmcp=warn");
    let support::Bridged {
        mut lines,
        writer: mut hw,
        session: _session,
    } = bridged;
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
    let text = captured.text();
    let said = text
        .lines()
        .filter(|l| l.contains("not handed to rmcp"))
        .count();
    assert!(
        (1..=2).contains(&said),
        "{said} lines for {flood} drops: {text:.2000}"
    );
}
