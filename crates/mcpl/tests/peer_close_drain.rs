//! The drain after a close: what is queued is still written, within one allowance (the
//! write timeout, else 5 s) for the whole drain. Each batch of frames got a fresh
//! allowance, so a side reading just fast enough to finish each batch in time kept the
//! closed connection writing for as long as it had frames queued (64 frames, 8 MiB, and the
//! reader's own answers past those). Paused time: the other side reads on a tick of the
//! paused clock, deterministically.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::PeerConfig;
use serde_json::json;
use tokio::io::AsyncReadExt;

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer_with;

/// `PeerConfig::write_timeout` unset: the close drain's allowance.
const DRAIN: Duration = Duration::from_secs(5);

#[tokio::test(start_paused = true)]
async fn the_drain_after_a_close_has_one_deadline_however_the_frames_trickle_out() {
    let (peer, _incoming, raw) = raw_peer_with(PeerConfig::default(), 128 * 1024);
    let raw::Raw { lines, write } = raw;
    let mut reader = lines.into_inner();
    // Five frames of 300 KiB: past `WRITE_BATCH_BYTES` (256 KiB), each one batch.
    const FRAMES: usize = 5;
    let pad = "x".repeat(300 * 1024);
    for _ in 0..FRAMES {
        peer.notify_raw("big", Some(json!({ "pad": pad })))
            .await
            .unwrap();
    }
    let closed_at = tokio::time::Instant::now();
    peer.close();
    let p = peer.clone();
    let finished = tokio::spawn(async move {
        p.finished().await;
        tokio::time::Instant::now()
    });
    // 100 KiB a second: each frame takes 3 s, within a fresh allowance of 5 s every time.
    let mut buf = vec![0u8; 100 * 1024];
    let mut newlines = 0;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = reader.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        newlines += buf[..n].iter().filter(|b| **b == b'\n').count();
    }
    let finished_at = finished.await.unwrap();
    drop(write);
    let took = finished_at - closed_at;
    assert!(
        took <= DRAIN,
        "the drain took {took:?} of virtual time, past its {DRAIN:?}"
    );
    assert!(newlines < FRAMES, "all {newlines} frames were drained");
}
