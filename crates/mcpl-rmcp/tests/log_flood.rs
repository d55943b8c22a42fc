//! A host flooding a bridged rmcp server with messages whose text rmcp's service loop logs
//! in full, one line each (target `rmcp::service`): every notification at `info`
//! ("received notification"), a cancel's `reason` at `info`, an error answer (here `-32601`
//! quoting the host's method name) at `warn`. The bridge cannot filter another crate's
//! lines (rmcp's loop logs from tasks it spawns itself, under the process's subscriber), so
//! it ships the directive that silences them, `mcpl_rmcp::RMCP_LOG_DIRECTIVE`, added by
//! `mcpl_rmcp::log_filter`; with the filter the example set up (`info` here) the log grew
//! with every message, as large as what the host sent. Under the shipped filter it stays
//! within a bound whatever the host sends.
//! One test here installs the process's log subscriber; the other needs none.

mod support;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn a_flood_of_messages_rmcp_logs_leaves_the_log_bounded() {
    let filter = mcpl_rmcp::log_filter("info");
    let (captured, bridged) = support::captured_bridge(&filter);
    let support::Bridged {
        mut lines,
        writer: mut hw,
        session: _session,
    } = bridged;
    let mut frames = vec![
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    let text = "t".repeat(4 * 1024);
    let flood = 100;
    for n in 0..flood {
        frames.push(json!({"jsonrpc": "2.0", "method": "notifications/vendor",
                           "params": {"text": text}}));
        frames.push(json!({"jsonrpc": "2.0", "id": n, "method": format!("vendor/{text}")}));
        frames.push(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": n, "reason": text}}),
        );
    }
    // rmcp reads its queue in order: once it answers this, it has read (and logged) the
    // notifications before it.
    frames.push(json!({"jsonrpc": "2.0", "id": "last", "method": "tools/list"}));
    let mut sent = 0;
    for f in frames {
        let mut line = f.to_string();
        line.push('\n');
        sent += line.len();
        hw.write_all(line.as_bytes()).await.unwrap();
    }
    // Every request is answered (the `vendor/…` ones `-32601`, or `-32800` when the cancel
    // came first); the last one last.
    let mut answered = 0;
    loop {
        let line = lines.next_line().await.unwrap().expect("open");
        let v: Value = serde_json::from_str(&line).unwrap();
        answered += 1;
        if v["id"] == "last" {
            break;
        }
    }
    assert_eq!(answered, flood + 2, "every request answered");
    let log = captured.text();
    assert!(
        log.len() <= 16 * 1024,
        "{} bytes logged for {sent} sent: {:.2000}",
        log.len(),
        log
    );
}

/// `log_filter` adds its directive unless the filter asks for rmcp's lines itself, and what
/// it makes is a filter `EnvFilter` reads.
#[test]
fn log_filter_keeps_a_filter_that_names_rmcp() {
    let d = mcpl_rmcp::RMCP_LOG_DIRECTIVE;
    for (given, made) in [
        ("warn", format!("warn,{d}")),
        ("", d.to_owned()),
        ("info,rmcpx=debug", format!("info,rmcpx=debug,{d}")),
        ("warn,rmcp=debug", "warn,rmcp=debug".to_owned()),
        ("rmcp", "rmcp".to_owned()),
        // A default of `off` stays off: the directive would turn rmcp's errors back on.
        ("off", "off".to_owned()),
        ("info,OFF", "info,OFF".to_owned()),
        ("off,warn", format!("off,warn,{d}")),
        (
            "warn,rmcp::service[serve_inner]=info",
            "warn,rmcp::service[serve_inner]=info".to_owned(),
        ),
    ] {
        let filter = mcpl_rmcp::log_filter(given);
        assert_eq!(filter, made, "{given:?}");
        assert!(
            tracing_subscriber::EnvFilter::try_new(&filter).is_ok(),
            "{filter}"
        );
    }
}
