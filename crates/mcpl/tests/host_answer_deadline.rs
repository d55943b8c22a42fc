//! JSON-RPC 2.0 §4: a request with an id gets a response. A server's `inference/request`
//! (or `model/info`) handed to an application handler that never answers was never
//! answered unless the server cancelled it, and held its slot (`event_capacity`) for the
//! life of the connection. Now, past `HostConfig::answer_timeout`, the host answers it
//! `-32603` with `data: { reason: "answer_timeout", timeoutMs }`, stops the handler and
//! reports `HostDiagnostic::AnswerTimedOut`. The server is raw lines over a real transport;
//! time is tokio's paused clock, which the runtime moves only when every task waits.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostSession, HostStreams};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

fn manifest() -> Value {
    json!({ "version": "0.5", "inferenceRequest": { "streaming": true }, "modelInfo": true,
            "featureSets": { "assist": { "description": "Assist",
                "uses": ["inferenceRequest", "inferenceRequest.streaming"] } } })
}

/// Long past any deadline here: a wait that would never end fails at it instead.
const NEVER: Duration = Duration::from_secs(24 * 3600);

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(NEVER, raw.recv())
        .await
        .expect("the host never answered")
}

/// A handler whose future never resolves; `stopped` fires when the host drops it.
fn never_answers(cfg: &mut HostConfig) -> tokio::sync::oneshot::Receiver<()> {
    struct Stopped(Option<tokio::sync::oneshot::Sender<()>>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(tx)));
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let guard = Stopped(slot.lock().unwrap().take());
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            unreachable!("never resolves")
        })
    }));
    rx
}

async fn connect(cfg: HostConfig) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest()))}))
        .await;
    assert_eq!(recv(&mut raw).await["method"], "notifications/initialized");
    let policy = recv(&mut raw).await;
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"],
                         "result": {"accepted": true}}))
        .await;
    let (s, streams) = connect.await.unwrap().expect("the host connects");
    (s, streams, raw)
}

fn config() -> HostConfig {
    HostConfig {
        policy: [
            "inferenceRequest",
            "inferenceRequest.streaming",
            "modelInfo",
        ]
        .map(String::from)
        .to_vec(),
        answer_timeout: Some(Duration::from_secs(40)),
        ..HostConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_never_answers_is_answered_for_at_the_deadline() {
    let mut cfg = config();
    let stopped = never_answers(&mut cfg);
    let (_s, mut streams, mut raw) = connect(cfg).await;
    let asked = tokio::time::Instant::now();
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 9, "method": "inference/request",
        "params": {"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}}),
    )
    .await;
    let answer = recv(&mut raw).await;
    assert!(
        asked.elapsed() >= Duration::from_secs(40),
        "answered before the deadline: {answer}"
    );
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_timeout",
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["timeoutMs"], 40_000, "{answer}");
    tokio::time::timeout(NEVER, stopped)
        .await
        .expect("the handler is stopped")
        .unwrap();
    let d = tokio::time::timeout(NEVER, streams.diagnostics.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&d, HostDiagnostic::AnswerTimedOut { method, id, after }
            if method == "inference/request" && id == "9" && *after == Duration::from_secs(40)),
        "{d:?}"
    );
    // The connection goes on: a `model/info` to the same handler is answered at its own
    // deadline, as the first was.
    raw.send_json(json!({"jsonrpc": "2.0", "id": 10, "method": "model/info", "params": {}}))
        .await;
    let answer = recv(&mut raw).await;
    assert_eq!(answer["id"], 10, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_timeout",
        "{answer}"
    );
}

/// A streamed `inference/request` (§11.4) whose handler streams a chunk and then never
/// answers gets the error after its chunk; `answer_timeout: None` is no deadline (the
/// server's cancel is then what ends it).
#[tokio::test(start_paused = true)]
async fn a_streamed_request_is_bounded_too_and_none_sets_no_deadline() {
    let mut cfg = config();
    cfg.stream_handler = Some(std::sync::Arc::new(
        |_p: Value, mut sink: mcpl::host::ChunkSink| {
            Box::pin(async move {
                sink.send("part").await.unwrap();
                std::future::pending::<()>().await;
                unreachable!("never resolves")
            })
        },
    ));
    let (_s, _streams, mut raw) = connect(cfg).await;
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 3, "method": "inference/request",
        "params": {"featureSet": "assist", "stream": true, "messages": []}}),
    )
    .await;
    let chunk = recv(&mut raw).await;
    assert_eq!(chunk["method"], "inference/chunk", "{chunk}");
    let answer = recv(&mut raw).await;
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_timeout",
        "{answer}"
    );

    let mut cfg = config();
    cfg.answer_timeout = None;
    let _stopped = never_answers(&mut cfg);
    let (_s, _streams, mut raw) = connect(cfg).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": 4, "method": "model/info", "params": {}}))
        .await;
    assert!(
        tokio::time::timeout(NEVER, raw.recv()).await.is_err(),
        "no deadline: nothing is sent until the server cancels"
    );
    raw.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 4}}),
    )
    .await;
    assert_eq!(recv(&mut raw).await["error"]["code"], -32800);
}

/// JSON-RPC 2.0 §4: once the application drops its last `HostSession` (and its streams), a
/// server's `model/info` is never left waiting on a live connection: the driver ends the
/// connection (the server reads EOF), answering first (`-32603`) a request it took before
/// it found its command queue closed. No line but that answer comes before the EOF.
#[tokio::test(start_paused = true)]
async fn a_request_after_the_application_left_is_answered_or_the_connection_ends() {
    let mut cfg = config();
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(async { Ok(json!({ "model": "m" })) })
    }));
    let (s, streams, mut raw) = connect(cfg).await;
    drop((s, streams));
    raw.send_json(json!({"jsonrpc": "2.0", "id": 11, "method": "model/info", "params": {}}))
        .await;
    loop {
        let line = tokio::time::timeout(NEVER, raw.lines.next_line())
            .await
            .expect("the connection stayed open with the request unanswered")
            .unwrap_or(None);
        let Some(line) = line else { break };
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], 11, "{v}");
        assert_eq!(v["error"]["code"], -32603, "{v}");
    }
}

/// §5.4, §11, §12: a host whose policy names `modelInfo` (and `inferenceRequest`) without
/// `HostConfig::request_handler` once told the server it may send them, then answered
/// `-32601` and reported `HostDiagnostic::NoHandler`. Now nothing unserved is granted: the
/// request is refused as not granted (`-32002`), and the policy entries naming only what
/// no handler serves are reported at connect (`HostDiagnostic::NotServed`,
/// `tests/host_unserved.rs`).
#[tokio::test(start_paused = true)]
async fn a_request_no_handler_serves_is_refused_as_not_granted() {
    let (_s, mut streams, mut raw) = connect(config()).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": 12, "method": "model/info", "params": {}}))
        .await;
    let answer = recv(&mut raw).await;
    assert_eq!(answer["id"], 12, "{answer}");
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    let mut diags = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        diags.push(d);
    }
    assert!(
        diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::NotServed { entries, .. }
            if entries.len() == 3)),
        "{diags:?}"
    );
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::NoHandler { .. })),
        "{diags:?}"
    );
}
