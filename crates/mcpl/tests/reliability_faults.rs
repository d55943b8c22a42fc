//! Faults of the other side that the foundation tests (`tests/peer.rs`) do not cover: a peer
//! that stops reading while this side keeps sending (the writer queue stays bounded, nothing
//! is lost once it reads again), a flood of requests this side declines while the flooder
//! never reads the answers, a peer that stops writing mid-line or trickles a line byte by
//! byte (slowloris: the idle timeout closes it). Memory boundedness is asserted through
//! counts of completed sends, never RSS; with paused time, `timeout` is a deadlock check, not
//! a wall-clock wait. The child-killed-mid-request fault is `peer.rs`'s
//! `child_killed_mid_request_fails_the_request_promptly`.
#![cfg(feature = "runtime")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcpl::peer::{CloseReason, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

fn raw_peer(
    config: PeerConfig,
    buffer: usize,
) -> (
    Peer,
    mcpl::peer::Incoming,
    ReadHalf<DuplexStream>,
    WriteHalf<DuplexStream>,
) {
    let (a, b) = tokio::io::duplex(buffer);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let (peer, incoming) = Peer::new(Transport::lines(ar, aw, "fault"), config);
    (peer, incoming, br, bw)
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_bounds_the_writer_queue_and_loses_nothing() {
    const CAPACITY: usize = 8;
    /// The writer takes up to 64 frames (256 KiB) from the queue per write (`send_many`).
    const WRITER_BATCH: usize = 64;
    const SENDS: usize = 500;
    let config = PeerConfig {
        outgoing_capacity: CAPACITY,
        ..PeerConfig::default()
    };
    // A 64-byte pipe whose far end does not read (yet).
    let (peer, _incoming, read, _write) = raw_peer(config, 64);
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..SENDS {
        let (peer, done) = (peer.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            peer.notify_raw("bulk", Some(json!({"i": i, "pad": "p".repeat(1000)})))
                .await
                .unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Let everything run until every task is blocked.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let accepted = done.load(Ordering::SeqCst);
    // The queue holds CAPACITY frames and the writer one batch (partly in the pipe): senders
    // beyond that wait instead of buffering.
    assert!(
        accepted <= CAPACITY + WRITER_BATCH,
        "{accepted} sends completed against a stalled reader"
    );
    assert!(peer.close_reason().is_none(), "no write timeout configured");

    // The far end starts reading: every frame arrives exactly once.
    let mut lines = BufReader::new(read).lines();
    let mut seen = vec![0u32; SENDS];
    for _ in 0..SENDS {
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        seen[v["params"]["i"].as_u64().unwrap() as usize] += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(seen.iter().all(|n| *n == 1), "lost or duplicated: {seen:?}");
    assert_eq!(done.load(Ordering::SeqCst), SENDS);
}

/// A flooder sends requests this side declines (the dropped guard answers `-32601`, §6.6)
/// and never reads the answers: the answers must not pile up without bound, so the flood
/// itself must stall at the transport, and once the flooder reads, every request has
/// exactly one answer.
#[tokio::test(start_paused = true)]
async fn s6_6_declined_request_flood_without_reading_stalls_and_answers_each_once() {
    const FLOOD: usize = 2000;
    let config = PeerConfig {
        outgoing_capacity: 4,
        ..PeerConfig::default()
    };
    let (_peer, mut incoming, read, mut write) = raw_peer(config, 256);
    // The application drops every request (unknown method): the guard answers -32601.
    tokio::spawn(async move { while incoming.recv().await.is_some() {} });
    let mut flood = tokio::spawn(async move {
        for i in 0..FLOOD {
            let line = json!({"jsonrpc":"2.0","id":i,"method":"unknown/method"}).to_string();
            write.write_all(line.as_bytes()).await.unwrap();
            write.write_all(b"\n").await.unwrap();
        }
        write
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(60), &mut flood)
            .await
            .is_err(),
        "{FLOOD} declined requests were buffered without bound while nobody read the answers"
    );
    let mut lines = BufReader::new(read).lines();
    let mut seen = vec![0u32; FLOOD];
    for _ in 0..FLOOD {
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["code"], json!(-32601));
        seen[v["id"].as_u64().unwrap() as usize] += 1;
    }
    assert!(seen.iter().all(|n| *n == 1));
    flood.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_writing_mid_line_is_closed_by_the_idle_timeout() {
    let config = PeerConfig {
        idle_timeout: Some(Duration::from_secs(10)),
        ..PeerConfig::default()
    };
    let (peer, _incoming, _read, mut write) = raw_peer(config, 1024);
    let pending = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("ping", None).await })
    };
    write
        .write_all(br#"{"jsonrpc":"2.0","id":1,"result":"#)
        .await
        .unwrap();
    assert_eq!(
        peer.closed().await,
        CloseReason::IdleTimeout(Duration::from_secs(10))
    );
    assert_eq!(
        pending.await.unwrap(),
        Err(mcpl::peer::PeerError::Closed(CloseReason::IdleTimeout(
            Duration::from_secs(10)
        )))
    );
}

/// Slowloris: a line trickled one byte a second never completes a frame, so it does not
/// count as traffic; the idle timeout closes the connection and the trickle stops being read.
#[tokio::test(start_paused = true)]
async fn a_trickled_line_does_not_keep_the_connection_alive() {
    let config = PeerConfig {
        idle_timeout: Some(Duration::from_secs(10)),
        ..PeerConfig::default()
    };
    let (peer, _incoming, _read, mut write) = raw_peer(config, 1024);
    let written = Arc::new(AtomicUsize::new(0));
    let w = written.clone();
    let trickle = tokio::spawn(async move {
        loop {
            if write.write_all(b"x").await.is_err() {
                return;
            }
            w.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    assert_eq!(
        peer.closed().await,
        CloseReason::IdleTimeout(Duration::from_secs(10))
    );
    let n = written.load(Ordering::SeqCst);
    assert!((9..=11).contains(&n), "closed after {n} trickled bytes");
    trickle.abort();
}

/// Slowloris with a line that grows past the limit: the reader discards instead of
/// buffering, reports one `Oversized` at the newline, and the connection still works.
#[tokio::test]
async fn an_endless_line_is_discarded_not_buffered_and_the_connection_survives() {
    let config = PeerConfig {
        max_message_size: 1024,
        ..PeerConfig::default()
    };
    let (peer, mut incoming, read, mut write) = raw_peer(config, 4096);
    let mut diagnostics = peer.diagnostics();
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                let _ = r.respond(json!("pong")).await;
            }
        }
    });
    let chunk = vec![b'y'; 64 * 1024];
    for _ in 0..64 {
        write.write_all(&chunk).await.unwrap();
    }
    write
        .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(read).lines();
    let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(v, json!({"jsonrpc":"2.0","id":7,"result":"pong"}));
    assert_eq!(
        diagnostics.recv().await,
        Some(mcpl::peer::Diagnostic::Oversized {
            bytes: 64 * 64 * 1024,
            limit: 1024
        })
    );
}

/// §6.6: a client that writes its requests and then ends its stream (`echo req | mcpl serve`,
/// a TCP half-close) still gets every answer: EOF stops reading and ends `Incoming`, but
/// requests already delivered are answered before the connection closes.
#[tokio::test]
async fn s6_6_requests_delivered_before_eof_are_still_answered() {
    let (peer, mut incoming, read, mut write) = raw_peer(PeerConfig::default(), 4096);
    for i in 0..3 {
        let line = json!({"jsonrpc":"2.0","id":i,"method":"work"}).to_string();
        write.write_all(line.as_bytes()).await.unwrap();
        write.write_all(b"\n").await.unwrap();
    }
    write.shutdown().await.unwrap();
    // The application answers only after it has seen the end of the input.
    let mut held = Vec::new();
    while let Some(msg) = incoming.recv().await {
        if let IncomingMessage::Request(r) = msg {
            held.push(r);
        }
    }
    assert_eq!(held.len(), 3);
    for r in held {
        let id = r.id().clone();
        r.respond(json!({"done": id.to_value()})).await.unwrap();
    }
    let mut lines = BufReader::new(read).lines();
    let mut answered = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["result"]["done"], v["id"]);
        answered.push(v["id"].as_u64().unwrap());
    }
    assert_eq!(answered, vec![0, 1, 2]);
    assert_eq!(peer.closed().await, CloseReason::Eof);
}

/// The same, bounded: a request the application never answers does not keep a connection
/// whose input ended open forever (the drain lasts at most the write timeout, else 5 s), and this
/// side's own requests fail at once, since nobody can answer them any more.
#[tokio::test(start_paused = true)]
async fn after_eof_an_unanswered_request_does_not_hold_the_connection_open() {
    let (peer, mut incoming, _read, mut write) = raw_peer(PeerConfig::default(), 4096);
    write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"slow\"}\n")
        .await
        .unwrap();
    write.shutdown().await.unwrap();
    let Some(IncomingMessage::Request(held)) = incoming.recv().await else {
        panic!("expected the request")
    };
    assert!(incoming.recv().await.is_none());
    assert_eq!(
        peer.request_raw("late", None).await,
        Err(mcpl::peer::PeerError::Closed(CloseReason::Eof))
    );
    assert_eq!(peer.closed().await, CloseReason::Eof);
    drop(held);
}
