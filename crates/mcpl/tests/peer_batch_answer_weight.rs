//! A batch's answers are held, as values, until its last request is answered (JSON-RPC 2.0
//! §6: they are written together); meanwhile they count against
//! `PeerConfig::max_in_flight_bytes`, weighed by what they hold parsed, not by their text.
//! An answer dense in small objects (`{"a":1}`: 7 bytes of text, a ~640-byte map node)
//! holds ~80 times its text, so weighed by its text a peer sending batches of one request
//! the application holds and one it answers densely had the connection hold several times
//! the bound.
//!
//! A counting global allocator measures the live heap: this binary holds a single test, so
//! nothing else allocates meanwhile. Over an in-memory line transport, every byte written by
//! the test.
#![cfg(feature = "runtime")]

use mcpl::peer::{IncomingMessage, PeerConfig};
use serde_json::{json, Value};

#[path = "support/live_bytes.rs"]
mod live_bytes;
#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// `{"a":1}` this many times: 16 KB as text, about 1.3 MB held as a value.
const OBJECTS: usize = 2_000;

#[tokio::test]
async fn answers_held_for_a_batch_count_what_they_hold_parsed() {
    let (_peer, mut incoming, raw) = raw_peer(PeerConfig::default());
    let raw::Raw {
        mut lines,
        mut write,
    } = raw;
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel::<isize>();
    // One event per batch: its dense request answered (the batch taken), or a line on the
    // wire (the batch refused busy, answered at once). The next batch is sent only then, so
    // each is admitted against every answer made before it.
    let (event_tx, mut events) = tokio::sync::mpsc::unbounded_channel::<()>();
    let baseline = live_bytes::live();
    let answered = event_tx.clone();
    let app = tokio::spawn(async move {
        let dense = Value::Array(vec![json!({"a": 1}); OBJECTS]);
        let mut held = Vec::new();
        while let Some(msg) = incoming.recv().await {
            match msg {
                IncomingMessage::Request(r) if r.method() == "hold" => held.push(r),
                IncomingMessage::Request(r) => {
                    r.respond(dense.clone()).await.unwrap();
                    let _ = answered.send(());
                }
                // `done`: every batch before it was delivered or refused.
                IncomingMessage::Notification(_) => break,
            }
        }
        let _ = held_tx.send(live_bytes::live());
        let n = held.len();
        drop(held);
        n
    });
    // The answers (busy past the bound, then each held batch's once its hold is dropped),
    // read as they come.
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while let Ok(Some(line)) = lines.next_line().await {
            let _: Value = serde_json::from_str(&line).unwrap();
            let _ = event_tx.send(());
            n += 1;
        }
        n
    });
    use tokio::io::AsyncWriteExt;
    let batches = 60;
    for i in 0..batches {
        let line = format!(
            "[{{\"jsonrpc\":\"2.0\",\"id\":\"h{i}\",\"method\":\"hold\"}},\
             {{\"jsonrpc\":\"2.0\",\"id\":\"d{i}\",\"method\":\"dense\"}}]\n"
        );
        write.write_all(line.as_bytes()).await.unwrap();
        events.recv().await.unwrap();
    }
    write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"done\"}\n")
        .await
        .unwrap();
    let live = held_rx.recv().await.unwrap();
    let held = live - baseline;
    let holds = app.await.unwrap();
    drop(write);
    eprintln!("{holds} batches held: {held} bytes");
    // `max_in_flight_bytes` (32 MiB), plus one answer past it and the pipe.
    assert!(
        held < 40 << 20,
        "{holds} batches held {held} bytes past the 32 MiB bound"
    );
    assert!(holds >= 1);
    drop(reader);
}
