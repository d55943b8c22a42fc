#![cfg(feature = "runtime")]
use mcpl::peer::PeerConfig;
use serde_json::Value;
#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer};

#[tokio::test(start_paused = true)]
async fn probe_notifications() {
    let lines = vec![
        r#"{"jsonrpc":"2.0","method":"x","params":5}"#,
        r#"{"jsonrpc":"1.0","method":"x"}"#,
        r#"{"method":"x"}"#,
        r#"{"jsonrpc":"2.0","method":"x","extra":1}"#,
        r#"{"jsonrpc":"2.0","method":"x","params":{},"params":[]}"#,
        r#"{"jsonrpc":"2.0","method":"x","method":"y"}"#,
        r#"[{"jsonrpc":"2.0","method":"x","params":5}]"#,
        r#"[{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","method":"x","params":5}]"#,
        r#"{"jsonrpc":"2.0","method":"x","id":null}"#,
        r#"{"jsonrpc":"2.0","method":"x","id":true}"#,
        r#"{"jsonrpc":"2.0","result":1}"#,
        r#"{"jsonrpc":"2.0","error":{"code":1,"message":"m"},"id":null}"#,
        r#"{"jsonrpc":"2.0","result":1,"id":77,"method":"x"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"zz"}}"#,
        "{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\r",
        "{\"jsonrpc\":\"2.0\",\"method\":\"x\"} {\"jsonrpc\":\"2.0\",\"method\":\"y\",\"params\":5}",
        "\u{feff}\u{feff}{\"jsonrpc\":\"2.0\",\"method\":\"x\"}",
        "\u{feff}\u{feff}{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"x\"}",
    ];
    for line in lines {
        let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
            request_timeout: None,
            ..PeerConfig::default()
        });
        answer_all(incoming);
        raw.send(line).await;
        let got: Vec<Value> = raw.before_sync().await;
        eprintln!("{line} => {}", serde_json::to_string(&got).unwrap());
    }
}
