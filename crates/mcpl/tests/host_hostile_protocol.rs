//! A hostile MCPL server against the host at the protocol level: real JSON over the
//! in-memory transport pair, the server scripted step by step. Each test names the class of
//! abuse it pins (an amplification of what the server sent into what the host holds or
//! reports) and the bound that now holds.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostError, HostSession, HostStreams, Mode};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, Peer, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::init_result;

/// The scripted server side of one connection.
struct Server {
    peer: Peer,
    incoming: Incoming,
}

impl Server {
    async fn next(&mut self) -> IncomingMessage {
        tokio::time::timeout(Duration::from_secs(10), self.incoming.recv())
            .await
            .expect("server waited too long for the host")
            .expect("connection ended")
    }

    async fn request(&mut self, method: &str) -> IncomingRequest {
        match self.next().await {
            IncomingMessage::Request(r) if r.method() == method => r,
            IncomingMessage::Request(r) => panic!("expected {method}, got request {}", r.method()),
            IncomingMessage::Notification(n) => {
                panic!("expected {method}, got notification {}", n.method)
            }
        }
    }
}

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "featureSets": {
            "alerts": { "description": "Alerts", "uses": ["pushEvents"] }
        }
    })
}

fn config(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        policy_timeout: Duration::from_secs(30),
        hook_timeout: Duration::from_secs(30),
        manifest_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    }
}

type Connecting = tokio::task::JoinHandle<Result<(HostSession, HostStreams), HostError>>;

/// Starts `connect` and answers `initialize` with `manifest`; returns once
/// `notifications/initialized` is read.
async fn start(cfg: HostConfig, manifest: Value) -> (Connecting, Server) {
    let ((hp, hin), (peer, incoming)) = Peer::memory_pair(PeerConfig::default());
    let mut server = Server { peer, incoming };
    let task = tokio::spawn(HostSession::connect_peer(hp, hin, cfg));
    let init = server.request("initialize").await;
    init.respond(init_result(Some(manifest))).await.unwrap();
    match server.next().await {
        IncomingMessage::Notification(n) if n.method == "notifications/initialized" => {}
        other => panic!("expected notifications/initialized, got {other:?}"),
    }
    (task, server)
}

/// Every diagnostic the session reported, counted once the session has ended: those
/// delivered, plus those the application's bounded queue had no room for (each
/// [`HostDiagnostic::DiagnosticsDropped`] carries how many). Returns the count and the ones
/// delivered.
async fn reported_until_end(
    s: HostSession,
    server: Server,
    mut streams: HostStreams,
) -> (u64, Vec<HostDiagnostic>) {
    s.close();
    drop(s);
    drop(server);
    let mut got = Vec::new();
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), streams.diagnostics.recv()).await {
            Ok(Some(HostDiagnostic::DiagnosticsDropped { count })) => total += count,
            Ok(Some(d)) => {
                total += 1;
                got.push(d);
            }
            Ok(None) => return (total, got),
            Err(_) => panic!("the diagnostics queue never ended"),
        }
    }
}

/// §6.7 receipts: a receipt whose `unavailableFeatures` holds countless malformed entries
/// (100,000 `1`s: 200 KB on the wire). Before, `parse_receipt` made one defect per entry
/// (three per empty object) and the host reported every one as a diagnostic, each logged:
/// 100,000 diagnostics and log lines from one answer, the defects all held at once (an
/// 8 MB answer made 4 million). Now the defects a receipt yields are listed as a refusal's
/// are (`protocol::MAX_LISTED_DEFECTS`, then one counting the rest), and a receipt naming
/// more entries than a host reads feature sets (`manifest::DEFAULT_MAX_FEATURE_SETS`) is
/// refused whole before its entries are read: unusable, so the host falls back to
/// MCP-only as for any unusable receipt (fail closed).
#[tokio::test]
async fn s6_7_a_receipt_with_countless_defects_is_reported_in_bounded_diagnostics() {
    let (task, mut server) = start(config(&["pushEvents"]), manifest()).await;
    let upd = server.request("featureSets/update").await;
    let entries: Vec<Value> = (0..100_000).map(|_| json!(1)).collect();
    upd.respond(json!({ "accepted": true, "unavailableFeatures": entries }))
        .await
        .unwrap();
    // An unusable receipt: MCP-only, and the reduction is told by a second Request.
    server
        .request("featureSets/update")
        .await
        .respond(json!({ "accepted": true }))
        .await
        .unwrap();
    let (s, streams) = task.await.unwrap().unwrap();
    assert!(matches!(s.mode(), Mode::McpOnly(_)), "{:?}", s.mode());
    let (total, got) = reported_until_end(s, server, streams).await;
    let defects = got
        .iter()
        .filter(|d| matches!(d, HostDiagnostic::ReceiptDefect { .. }))
        .count();
    assert!(defects >= 1, "the defect is reported: {got:?}");
    assert!(
        total <= 64,
        "one receipt made {total} diagnostics (first: {:?})",
        got.first()
    );
}

/// §17.5 step 1 validation: a manifest of countless members outside the vocabulary (each an
/// `unrecognised_member` finding) in `initialize` and in an `mcpl/manifest` answer. Before,
/// every finding was a diagnostic of its own (and a log line): 50,000 members of 10 bytes
/// made 50,000 diagnostics at `initialize` and as many again per fetch. Now a manifest's
/// findings are listed as a refusal's defects are, the rest counted in one more.
#[tokio::test]
async fn s17_5_a_manifest_with_countless_findings_is_reported_in_bounded_diagnostics() {
    let mut m = manifest();
    for i in 0..50_000 {
        m[format!("x{i}")] = json!(0);
    }
    let (task, mut server) = start(config(&["pushEvents"]), m.clone()).await;
    server
        .request("featureSets/update")
        .await
        .respond(json!({ "accepted": true }))
        .await
        .unwrap();
    let (s, streams) = task.await.unwrap().unwrap();
    assert_eq!(s.mode(), Mode::Mcpl);
    // The same manifest fetched again (unchanged: findings still reported), then one more
    // member (changed).
    for extra in [None, Some("y")] {
        let mut next = m.clone();
        if let Some(k) = extra {
            next[k] = json!(0);
        }
        let s2 = s.clone();
        let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
        server
            .request("mcpl/manifest")
            .await
            .respond(next)
            .await
            .unwrap();
        refresh.await.unwrap().unwrap();
    }
    let (total, got) = reported_until_end(s, server, streams).await;
    let findings = got
        .iter()
        .filter(|d| matches!(d, HostDiagnostic::ManifestFinding { .. }))
        .count();
    assert!(findings >= 3, "each review reports its findings: {got:?}");
    assert!(
        total <= 3 * 64,
        "three reviews made {total} diagnostics (first: {:?})",
        got.first()
    );
}

/// Counts the `mcpl host diagnostic` log lines of the thread it is the default subscriber of.
#[derive(Clone, Default)]
struct DiagnosticLines(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for DiagnosticLines {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" && format!("{v:?}").starts_with("mcpl host diagnostic") {
                    self.0 = true;
                }
            }
        }
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// A flood of messages each worth a diagnostic (here 1,000 notifications of a method the
/// host does not serve, 40 bytes each): every one still reaches the application's stream
/// (delivered or counted as dropped), but the log is not one line per message the server
/// chose to send. Before, each was logged (`warn`), so a server wrote the host's log at the
/// rate it sent (a 40-byte message, a 150-byte line), and a slow log writer held up every
/// session logging through it. Now each kind of diagnostic is logged at most once per
/// `transport::listen::REPORT_INTERVAL` per session, the next line counting those not
/// shown (`throttle::Throttle`).
#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_diagnostics_is_logged_in_bounded_lines_and_delivered_in_full() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let lines = DiagnosticLines::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let (task, mut server) = start(config(&["pushEvents"]), manifest()).await;
    server
        .request("featureSets/update")
        .await
        .respond(json!({ "accepted": true }))
        .await
        .unwrap();
    let (s, streams) = task.await.unwrap().unwrap();
    let before = lines.0.load(std::sync::atomic::Ordering::SeqCst);
    const FLOOD: u64 = 1000;
    for i in 0..FLOOD {
        server
            .peer
            .notify_raw("x/unknown", Some(json!({ "i": i })))
            .await
            .unwrap();
    }
    // Answered after the host handled every notification before it.
    server
        .peer
        .request_raw("ping", Some(json!({})))
        .await
        .unwrap();
    let logged = lines.0.load(std::sync::atomic::Ordering::SeqCst) - before;
    let (total, _) = reported_until_end(s, server, streams).await;
    assert!(
        total >= FLOOD,
        "every diagnostic reaches the stream: {total}"
    );
    assert!(
        logged <= 10,
        "{FLOOD} notifications made {logged} diagnostic log lines"
    );
}
