//! Findings of an outside attack on the host (a Python server speaking raw JSON lines),
//! each shown on the wire: a raw server writes every byte the host reads (§6.7, §14.5,
//! §16.1, §17.8).
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostSession, HostStreams};
use mcpl::peer::PeerConfig;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

fn config(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        policy_timeout: Duration::from_secs(30),
        hook_timeout: Duration::from_secs(30),
        manifest_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    }
}

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "channels": { "register": true, "incoming": true, "publish": true },
        "featureSets": {
            "alerts": { "description": "Alerts", "uses": ["pushEvents"] }
        }
    })
}

/// The host's next line, as JSON.
async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host said nothing")
}

/// Connects a host with `cfg` to the raw server, answering `initialize` with `m` and the
/// policy Request with `receipt`.
async fn connected_with(
    cfg: HostConfig,
    m: Value,
    receipt: Value,
) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": receipt}))
        .await;
    if receipt != json!({"accepted": true}) {
        // An unusable receipt: the host tells the server it grants nothing (§6.7), and
        // connects once that is answered.
        let told = recv(&mut raw).await;
        assert_eq!(told["method"], "featureSets/update", "{told}");
        assert_eq!(told["params"]["effectiveCapabilities"], json!([]), "{told}");
        raw.send_json(json!({"jsonrpc": "2.0", "id": told["id"], "result": {"accepted": true}}))
            .await;
    }
    let (s, streams) = connect.await.unwrap().unwrap();
    (s, streams, raw)
}

async fn connected(cfg: HostConfig, m: Value) -> (HostSession, HostStreams, Raw) {
    connected_with(cfg, m, json!({"accepted": true})).await
}

/// Sends a request with `id` and returns the host's answer to it (the next line).
async fn call(raw: &mut Raw, id: Value, method: &str, params: Value) -> Value {
    raw.send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let a = recv(raw).await;
    assert_eq!(a["id"], id, "{a}");
    a
}

fn drain(streams: &mut HostStreams) -> Vec<HostDiagnostic> {
    let mut v = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        v.push(d);
    }
    v
}

/// §14.5 (F5): an update refused as `invalid_descriptor` drops the channel; the itemized
/// result says so (`"removed": true`), so the server can tell its channel is gone. Before,
/// the item was the one a refusal keeping the channel gives (`duplicate_descriptor` here,
/// `channel_limit`): the two sides disagreed on which channels exist.
#[tokio::test]
async fn s14_5_an_update_refused_and_dropped_says_removed_in_its_item() {
    let (s, _streams, mut raw) = connected(config(&["channels.register"]), manifest()).await;
    let d = |id: &str, dir: &str| json!({ "id": id, "type": "k", "direction": dir });
    let a = call(
        &mut raw,
        json!(1),
        "channels/register",
        json!({ "channels": [d("c:1", "outbound"), d("c:2", "outbound")] }),
    )
    .await;
    assert_eq!(a["result"]["results"][1]["accepted"], true, "{a}");
    let a = call(
        &mut raw,
        json!(2),
        "channels/changed",
        json!({ "updated": [d("c:1", "sideways"), d("c:2", "inbound"), d("c:2", "bidirectional")] }),
    )
    .await;
    assert_eq!(
        a["result"]["results"],
        json!([
            { "id": "c:1", "accepted": false, "reason": "invalid_descriptor", "removed": true },
            { "id": "c:2", "accepted": true },
            { "id": "c:2", "accepted": false, "reason": "duplicate_descriptor" },
        ]),
        "{a}"
    );
    assert_eq!(s.channels(), ["c:2"]);
}

/// §16.1 (F9): a push's tag issues are reported in words, naming the entry and what is
/// wrong with it; before, each was the debug form of the issue
/// (`TagIssue { index: Some(2), error: NotNamespaced("mention") }`).
#[tokio::test]
async fn s16_1_tag_issues_are_reported_in_words() {
    let (_s, mut streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    let push = json!({ "featureSet": "alerts", "eventId": "e1",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": { "content": [{ "type": "text", "text": "hi" }] },
        "tags": ["ok:a", 1, "mention"] });
    let a = call(&mut raw, json!(1), "push/event", push).await;
    assert_eq!(a["result"]["accepted"], true, "{a}");
    let issues: Vec<String> = drain(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::TagIssue { issue, .. } => Some(issue),
            _ => None,
        })
        .collect();
    assert_eq!(issues.len(), 2, "{issues:?}");
    assert!(
        issues[0].starts_with("tags[1]: a tag is not a string"),
        "{issues:?}"
    );
    assert!(
        issues[1].starts_with("tags[2]: tag \"mention\" is not namespaced: write it as"),
        "{issues:?}"
    );
}

/// §6.7 (F9): a receipt that is no object (`"result": null`) is reported naming the whole
/// result and its type; before, its path was empty ("receipt defect at ").
#[tokio::test]
async fn s6_7_a_null_receipt_is_reported_naming_the_whole_result() {
    let (_s, mut streams, _raw) =
        connected_with(config(&["pushEvents"]), manifest(), Value::Null).await;
    let paths: Vec<(&str, String)> = drain(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::ReceiptDefect { code, path } => Some((code, path)),
            _ => None,
        })
        .collect();
    assert_eq!(
        paths,
        [("not_object", "(the whole result, a JSON null)".to_owned())]
    );
}

/// §17.8 (F8): 20,000 `mcpl/manifestChanged` past the fetch limit are told in a bounded
/// number of `ManifestFetchDropped` diagnostics (one per window, carrying the total), not
/// one each: before, they filled the diagnostics queue (`DiagnosticsDropped`), pushing
/// every other report out.
#[tokio::test]
async fn s17_8_a_flood_of_dropped_announcements_is_told_in_few_diagnostics() {
    let mut cfg = config(&["pushEvents"]);
    cfg.manifest_fetch_burst = 1;
    cfg.manifest_fetch_per_sec = 0.0;
    let (_s, mut streams, mut raw) = connected(cfg, manifest()).await;
    let changed = json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}});
    raw.send_json(changed.clone()).await;
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest", "{fetch}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": manifest()}))
        .await;
    let line = changed.to_string();
    for _ in 0..20_000 {
        raw.send(&line).await;
    }
    // Answered once every announcement before it was handled.
    let a = call(&mut raw, json!("sync"), "ping", json!({})).await;
    assert!(a.get("result").is_some(), "{a}");
    let diags = drain(&mut streams);
    let told: Vec<u64> = diags
        .iter()
        .filter_map(|d| match d {
            HostDiagnostic::ManifestFetchDropped { dropped_total } => Some(*dropped_total),
            _ => None,
        })
        .collect();
    // The first drop at once; one more per 10 s window the flood lasts.
    assert!(!told.is_empty() && told.len() <= 3, "{told:?}");
    assert_eq!(told[0], 1, "{told:?}");
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::DiagnosticsDropped { .. })),
        "{} diagnostics",
        diags.len()
    );
}

/// Counts the log events of the thread it is the default subscriber of whose message
/// names the §17.8 fetch limit.
#[derive(Clone, Default)]
struct FetchLimitLines(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FetchLimitLines {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                let text = format!("{v:?}");
                if text.contains("fetch limit") || text.contains("ManifestFetchDropped") {
                    self.0 = true;
                }
                let _ = f;
            }
        }
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// §17.8 (F8): the same flood is logged in a bounded number of lines too. Before, the
/// fetch limiter logged a `warn` of its own for each drop (20,000 lines), beside the
/// host's diagnostics, whose log is throttled per kind.
#[tokio::test(flavor = "current_thread")]
async fn s17_8_a_flood_of_dropped_announcements_is_logged_in_few_lines() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let lines = FetchLimitLines::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let mut cfg = config(&["pushEvents"]);
    cfg.manifest_fetch_burst = 1;
    cfg.manifest_fetch_per_sec = 0.0;
    let (_s, _streams, mut raw) = connected(cfg, manifest()).await;
    let changed = json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}});
    raw.send_json(changed.clone()).await;
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest", "{fetch}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": manifest()}))
        .await;
    let line = changed.to_string();
    for _ in 0..20_000 {
        raw.send(&line).await;
    }
    let a = call(&mut raw, json!("sync"), "ping", json!({})).await;
    assert!(a.get("result").is_some(), "{a}");
    let logged = lines.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(logged <= 10, "20,000 drops made {logged} log lines");
}
