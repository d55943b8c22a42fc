//! What a peer holds of the other side's messages is bounded by what they hold parsed, not
//! only by their text: the incoming queue (`peer::INCOMING_QUEUE_BYTES`) and the requests in
//! flight (`PeerConfig::max_in_flight_bytes`) weigh each message by its parsed estimate
//! (`jsonrpc::parsed_bytes`). A message of small objects holds ~90 times its text once
//! parsed (`{"a":1}`: 7 bytes of text, a map node of ~640 bytes), so the text-weighed bounds
//! let a connection hold 64 queued notifications of 16 KB (90 MB) or 128 held requests
//! (180 MB) while the byte bounds (8 MiB, 32 MiB) read as met.
//!
//! A counting global allocator measures the live heap: this binary holds a single test, so
//! nothing else allocates meanwhile.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{IncomingMessage, PeerConfig};
use serde_json::{json, Value};

#[path = "support/live_bytes.rs"]
mod live_bytes;
#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// `{"a":1}` this many times: 16 KB of text, about 1.4 MB parsed.
const OBJECTS: usize = 2_000;

fn dense(method: &str, id: Option<usize>) -> String {
    let params = format!("[{}]", vec![r#"{"a":1}"#; OBJECTS].join(","));
    match id {
        Some(id) => {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
        }
        None => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#),
    }
}

#[test]
fn dense_messages_are_held_within_the_byte_bounds_by_their_parsed_weight() {
    // Paused time: the application's `sleep` below ends only once every other task waits
    // (the runtime advances a paused clock only when idle), so it marks the moment the peer
    // stopped reading, not a duration.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let (_peer, mut incoming, raw) = raw_peer(PeerConfig::default());
        let raw::Raw {
            mut lines,
            mut write,
        } = raw;
        let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let app = tokio::spawn(async move {
            // Warm-up ping.
            if let Some(IncomingMessage::Request(r)) = incoming.recv().await {
                r.respond(json!("pong")).await.unwrap();
            }
            // Phase 1: notifications the application does not read until the peer stops.
            let _ = go_rx.await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = held_tx.send(0);
            let mut notes = 0;
            while notes < 80 {
                match incoming.recv().await {
                    Some(IncomingMessage::Notification(_)) => notes += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            let _ = held_tx.send(notes);
            // Phase 2: requests taken and held unanswered, until the `done` notification.
            let mut held = Vec::new();
            while let Some(msg) = incoming.recv().await {
                match msg {
                    IncomingMessage::Request(r) => held.push(r),
                    IncomingMessage::Notification(_) => break,
                }
            }
            let _ = held_tx.send(held.len());
            drop(held);
            incoming
        });

        use tokio::io::AsyncWriteExt;
        write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let pong: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(pong["result"], json!("pong"));
        let baseline = live_bytes::live();
        live_bytes::reset_peak(baseline);

        // Phase 1: 80 notifications of 16 KB; the queue takes 64 by count, 8 MiB by bytes.
        let _ = go_tx.send(());
        let note = format!("{}\n", dense("note", None));
        let writer = tokio::spawn(async move {
            for _ in 0..80 {
                write.write_all(note.as_bytes()).await.unwrap();
            }
            write
        });
        assert_eq!(held_rx.recv().await, Some(0));
        let queued_peak = live_bytes::peak() - baseline;
        assert_eq!(held_rx.recv().await, Some(80));
        let mut write = writer.await.unwrap();

        // Phase 2: 200 requests of 16 KB the application holds, then `done`; the answers
        // (busy past the bound, then an error for each held one dropped) are read as they come.
        let answers = tokio::spawn(async move {
            let mut n = 0;
            while n < 200 {
                let line = lines.next_line().await.unwrap().unwrap();
                let v: Value = serde_json::from_str(&line).unwrap();
                assert!(v["error"].is_object(), "{line}");
                n += 1;
            }
        });
        live_bytes::reset_peak(live_bytes::live());
        let before = live_bytes::live();
        for id in 1..=200 {
            let line = format!("{}\n", dense("hold", Some(id)));
            write.write_all(line.as_bytes()).await.unwrap();
        }
        write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"done\"}\n")
            .await
            .unwrap();
        let held = held_rx.recv().await.unwrap();
        let held_peak = live_bytes::peak() - before;
        answers.await.unwrap();
        let _incoming = app.await.unwrap();

        eprintln!(
            "queued notifications: peak growth {queued_peak} bytes; \
             {held} requests held: peak growth {held_peak} bytes"
        );
        // The queue's 8 MiB, plus the message the reader waits to queue and the pipe.
        assert!(
            queued_peak < 16 << 20,
            "queued notifications grew the heap by {queued_peak} bytes"
        );
        // `max_in_flight_bytes` (32 MiB), plus the message being read and the pipe.
        assert!(
            held_peak < 40 << 20,
            "{held} held requests grew the heap by {held_peak} bytes"
        );
        assert!(held >= 1);
    });
}
