//! JSON-RPC 2.0 batches against the bounds on work in flight (`PeerConfig::
//! max_in_flight_requests`, `max_in_flight_bytes`), on the wire: a batch's answers are sent
//! together, as one array, once its last request is answered (JSON-RPC 2.0 §6), so the
//! answers made before then are held; they stay owed, and count, until the array is queued.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::jsonrpc::codes;
use mcpl::peer::{IncomingMessage, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// A deadlock guard, never a synchronisation: every wait below is on an event.
const GUARD: Duration = Duration::from_secs(30);

/// A host sends batches of one request the server holds (a slow tool) and four whose answers
/// are made at once: each batch's array waits for its slow request, holding the four answers.
/// Those answers are owed until the array is queued, so they weigh against
/// `max_in_flight_bytes` (64 KiB here): a batch sent once that much is held is refused busy.
/// Before, an answer left the count as soon as it joined its batch's array, so every batch
/// was taken, and the answers held grew with the number of batches (20 of them held 160 KiB
/// of answers against the 64 KiB bound, and a server's answers can be far larger than the
/// requests: each batch costs one slow request of the in-flight bound).
#[tokio::test]
async fn answers_held_for_a_batchs_slowest_request_count_against_the_in_flight_bytes() {
    const BOUND: usize = 64 * 1024;
    const BATCHES: usize = 20;
    let config = PeerConfig {
        max_in_flight_bytes: BOUND,
        ..PeerConfig::default()
    };
    let (_peer, mut incoming, mut raw) = raw_peer(config);
    // Holds `hold` requests, answers `echo` at once with a 2 KiB result, and says so.
    let (answered_tx, mut answered) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                if r.method() == "hold" {
                    held.push(r);
                } else {
                    r.respond(json!({"pad": "y".repeat(2048)})).await.unwrap();
                    let _ = answered_tx.send(());
                }
            }
        }
    });
    let mut refused_at = None;
    for b in 0..BATCHES {
        let mut batch = vec![json!({"jsonrpc": "2.0", "id": format!("h{b}"), "method": "hold"})];
        batch.extend(
            (0..4).map(|i| json!({"jsonrpc": "2.0", "id": format!("e{b}.{i}"), "method": "echo"})),
        );
        raw.send_json(Value::Array(batch)).await;
        // Either the four answers are made (and held), or the batch is answered at once.
        let mut made = 0;
        while made < 4 {
            tokio::select! {
                a = answered.recv() => {
                    a.expect("the handler ended");
                    made += 1;
                }
                line = raw.recv_line() => {
                    let v: Value = serde_json::from_str(&line).unwrap();
                    let entries = v.as_array().unwrap_or_else(|| panic!("not a batch answer: {v}"));
                    assert!(
                        entries.iter().all(|e| e["error"]["code"] == json!(codes::BUSY)
                            && e["error"]["data"]["reason"] == json!("in_flight_bytes")),
                        "only busy refusals answer a batch at once: {v}"
                    );
                    assert_eq!(entries.len(), 5, "{v}");
                    refused_at = Some(b);
                    break;
                }
                _ = tokio::time::sleep(GUARD) => panic!("batch {b}: nothing happened (deadlock guard)"),
            }
        }
        if refused_at.is_some() {
            break;
        }
    }
    let Some(b) = refused_at else {
        panic!("{BATCHES} batches taken: their held answers escaped the {BOUND}-byte bound");
    };
    // 4 answers of 2 KiB held per batch taken: refused once the bound is reached.
    assert!(b * 4 * 2048 <= 2 * BOUND, "refused only at batch {b}");
}
