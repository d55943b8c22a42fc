//! A `ChunkSink` used where no chunk can go is the application's mistake, reported to it
//! (§11.4: chunks only for an `inference/request` with `stream: true`, and only before its
//! response). Its `send` on a request that asked for no stream returned `Ok` and counted
//! the delta, though nothing was sent: the text was absorbed. Now it is refused with
//! `HostError::NotStreamed`, `sent()` stays where it was, and `ChunkSink::is_streamed`
//! tells a handler beforehand. After the response, a streamed request's sink is refused
//! with `HostError::StreamEnded`.
//! The server is raw lines; each check waits for the host's answer, no sleeps.
#![cfg(feature = "runtime")]

use std::sync::Arc;
use std::time::Duration;

use mcpl::host::{ChunkSink, HostConfig, HostError, HostSession, HostStreams, StreamHandler};
use serde_json::{json, Value};
use tokio::sync::mpsc;

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "inferenceRequest": { "streaming": true },
        "featureSets": { "mem": { "uses": ["inferenceRequest", "inferenceRequest.streaming"] } }
    })
}

/// A session over a raw server advertising [`manifest`], its policy Request accepted.
async fn connected(cfg: HostConfig) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize", "{init}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest()))}))
        .await;
    let mut update = recv(&mut raw).await;
    if update["method"] == "notifications/initialized" {
        update = recv(&mut raw).await;
    }
    assert_eq!(update["method"], "featureSets/update", "{update}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": update["id"],
                         "result": {"accepted": true}}))
        .await;
    let (s, streams) = connect.await.unwrap().expect("the host connects");
    (s, streams, raw)
}

fn inference(id: u64, stream: bool) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "inference/request",
           "params": {"featureSet": "mem", "stream": stream,
                      "messages": [{"role": "user", "content": "hi"}]}})
}

/// What a handler saw: `is_streamed`, what `send` returned, then `sent()`.
type Seen = (bool, Result<(), HostError>, u64);

/// A stream handler answering every `inference/request` (no request handler) that tries one
/// chunk, reports what `send` returned with `is_streamed` and `sent()`, answers, and hands its
/// sink out for use after the answer.
fn config() -> (
    HostConfig,
    mpsc::UnboundedReceiver<Seen>,
    mpsc::UnboundedReceiver<ChunkSink>,
) {
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let (sinks_tx, sinks) = mpsc::unbounded_channel();
    let stream: StreamHandler = Arc::new(move |_p: Value, mut sink: ChunkSink| {
        let (seen_tx, sinks_tx) = (seen_tx.clone(), sinks_tx.clone());
        Box::pin(async move {
            let r = sink.send("par").await;
            let _ = seen_tx.send((sink.is_streamed(), r, sink.sent()));
            let _ = sinks_tx.send(sink);
            Ok(json!({"content": "partial", "model": "m", "finishReason": "end_turn"}))
        })
    });
    let cfg = HostConfig {
        policy: vec![
            "inferenceRequest".into(),
            "inferenceRequest.streaming".into(),
        ],
        stream_handler: Some(stream),
        ..HostConfig::default()
    };
    (cfg, seen, sinks)
}

/// §11.4: a request without `stream: true` gets no chunk; a `send` on its sink is refused
/// (`NotStreamed`), not counted, before and after its answer, and the answer still goes.
#[tokio::test]
async fn s11_4_a_chunk_for_a_request_that_asked_for_no_stream_is_refused() {
    let (cfg, mut seen, mut sinks) = config();
    let (_s, _streams, mut raw) = connected(cfg).await;
    raw.send_json(inference(1, false)).await;
    let answer = recv(&mut raw).await;
    assert_eq!(
        answer["id"], 1,
        "no chunk for a request that asked for none: {answer}"
    );
    assert_eq!(answer["result"]["content"], "partial", "{answer}");
    let (streamed, r, sent) = seen.recv().await.unwrap();
    assert!(!streamed);
    assert_eq!(r, Err(HostError::NotStreamed));
    assert_eq!(sent, 0, "a chunk that went nowhere was counted");
    let mut sink = sinks.recv().await.unwrap();
    assert_eq!(sink.send("late").await, Err(HostError::NotStreamed));
    assert_eq!(sink.sent(), 0);
    let says = HostError::NotStreamed.to_string();
    assert!(
        says.contains("§11.4") && says.contains("is_streamed"),
        "{says}"
    );
}

/// §11.4: a streamed request's sink sends until the response, and is refused after it
/// (`StreamEnded`): nothing follows the response on the wire.
#[tokio::test]
async fn s11_4_a_chunk_after_the_response_is_refused() {
    let (cfg, mut seen, mut sinks) = config();
    let (_s, _streams, mut raw) = connected(cfg).await;
    raw.send_json(inference(2, true)).await;
    let chunk = recv(&mut raw).await;
    assert_eq!(chunk["method"], "inference/chunk", "{chunk}");
    assert_eq!(chunk["params"]["delta"], "par", "{chunk}");
    let answer = recv(&mut raw).await;
    assert_eq!(answer["id"], 2, "{answer}");
    let (streamed, r, sent) = seen.recv().await.unwrap();
    assert!(streamed);
    assert_eq!(r, Ok(()));
    assert_eq!(sent, 1);
    let mut sink = sinks.recv().await.unwrap();
    assert_eq!(sink.send("late").await, Err(HostError::StreamEnded));
    assert_eq!(sink.sent(), 1);
}
