//! `HostConfig::diagnostic_tap` is told each diagnostic with the number of the received
//! frame whose handling raised it, the number the message tap gave that frame
//! (`TapEvent::frame`). A diagnostic that names only a method (no id) could not be tied to
//! its frame: the reader takes frames ahead of the session's handling, so when it was
//! delivered a later frame of the same method may already have been read. The server is
//! raw lines written in one write (read together); a `ping` orders the check, no sleeps.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::host::{DiagnosticTap, HostConfig, HostDiagnostic, HostSession, RaisedFor};
use mcpl::peer::{FrameDirection, PeerConfig, Tap, TapEvent};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

/// A frame the message tap saw: its number, direction and text.
type Tapped = (u64, FrameDirection, String);
/// A diagnostic the diagnostic tap was told, with its frame.
type Told = (HostDiagnostic, Option<RaisedFor>);

fn cancelled(params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params })
}

#[tokio::test]
async fn a_diagnostic_names_the_frame_it_was_raised_for() {
    // (frame, direction, text) of every frame the tap saw.
    let frames: Arc<Mutex<Vec<Tapped>>> = Arc::default();
    let seen = frames.clone();
    let tap = Tap::new(move |ev: TapEvent<'_>| {
        seen.lock()
            .unwrap()
            .push((ev.frame, ev.direction, ev.text.to_owned()));
    });
    let diags: Arc<Mutex<Vec<Told>>> = Arc::default();
    let told = diags.clone();
    let diagnostic_tap = DiagnosticTap::new(move |d: &HostDiagnostic, frame: Option<RaisedFor>| {
        told.lock().unwrap().push((d.clone(), frame));
    });
    let (peer, incoming, mut raw) = raw_peer(PeerConfig {
        tap: Some(tap),
        ..PeerConfig::default()
    });
    let cfg = HostConfig {
        policy: vec!["*".into()],
        diagnostic_tap: Some(diagnostic_tap),
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(None)}))
        .await;
    let (_s, mut streams) = connect.await.unwrap().expect("the host connects");
    // No requestId (defective), a well-formed one, then a batch whose one entry's requestId
    // is no request id (defective): one write, then a ping.
    let defective = cancelled(json!({}));
    let fine = cancelled(json!({ "requestId": 999 }));
    let batch = json!([cancelled(json!({ "requestId": true }))]);
    let ping = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"});
    let text = format!("{defective}\n{fine}\n{batch}\n{ping}");
    raw.send(&text).await;
    while recv(&mut raw).await["id"] != "p1" {}

    let frames = frames.lock().unwrap().clone();
    let number = |v: &Value| {
        let text = v.to_string();
        frames
            .iter()
            .find(|(_, dir, t)| *dir == FrameDirection::Inbound && *t == text)
            .map(|(n, _, _)| *n)
            .unwrap_or_else(|| panic!("{text} was tapped: {frames:?}"))
    };
    // Received frames are numbered from 1 in wire order, a batch as one; sent ones 0.
    let received: Vec<u64> = frames
        .iter()
        .filter(|(_, dir, _)| *dir == FrameDirection::Inbound)
        .map(|(n, _, _)| *n)
        .collect();
    assert_eq!(received, (1..=received.len() as u64).collect::<Vec<_>>());
    assert!(frames
        .iter()
        .filter(|(_, dir, _)| *dir == FrameDirection::Outbound)
        .all(|(n, _, _)| *n == 0));
    let (first, second) = (number(&defective), number(&batch));
    assert!(number(&fine) == first + 1 && second == first + 2);
    let bad: Vec<Option<RaisedFor>> = diags
        .lock()
        .unwrap()
        .iter()
        .filter(|(d, _)| matches!(d, HostDiagnostic::BadParams { method, .. } if method == "notifications/cancelled"))
        .map(|(_, frame)| *frame)
        .collect();
    // The batch's one entry is named by its index too.
    let at = |frame, entry| Some(RaisedFor { frame, entry });
    assert_eq!(bad, [at(first, None), at(second, Some(0))]);
    // The stream carries the same diagnostics.
    let mut streamed = 0;
    while let Ok(d) = streams.diagnostics.try_recv() {
        if matches!(d, HostDiagnostic::BadParams { .. }) {
            streamed += 1;
        }
    }
    assert_eq!(streamed, 2);
}

/// A batch entry the peer's reader refuses as no valid message (`"junk"`, `5`: not objects,
/// JSON-RPC 2.0 §6, answered `-32600` under id null) is told to the diagnostic tap with the
/// batch's number and the entry's index, as a diagnostic of the session's is: the reader
/// raises it while taking that frame. It was told with no frame (a connection diagnostic),
/// so nothing could mark the batch entry it was about (`mcpl inspect`'s log, r10 F4).
#[tokio::test]
async fn an_entry_the_reader_refuses_names_its_batch_and_index() {
    let frames: Arc<Mutex<Vec<Tapped>>> = Arc::default();
    let seen = frames.clone();
    let tap = Tap::new(move |ev: TapEvent<'_>| {
        seen.lock()
            .unwrap()
            .push((ev.frame, ev.direction, ev.text.to_owned()));
    });
    let diags: Arc<Mutex<Vec<Told>>> = Arc::default();
    let told = diags.clone();
    let diagnostic_tap = DiagnosticTap::new(move |d: &HostDiagnostic, frame: Option<RaisedFor>| {
        told.lock().unwrap().push((d.clone(), frame));
    });
    let (peer, incoming, mut raw) = raw_peer(PeerConfig {
        tap: Some(tap),
        ..PeerConfig::default()
    });
    let cfg = HostConfig {
        policy: vec!["*".into()],
        diagnostic_tap: Some(diagnostic_tap),
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(None)}))
        .await;
    let (_s, _streams) = connect.await.unwrap().expect("the host connects");
    let batch = json!(["junk", 5, {"jsonrpc": "2.0", "id": "p1", "method": "ping"}]);
    raw.send(&batch.to_string()).await;
    // The batch's answer: the two refusals and the ping's, one array.
    while !recv(&mut raw).await.is_array() {}
    let text = batch.to_string();
    let number = frames
        .lock()
        .unwrap()
        .iter()
        .find(|(_, dir, t)| *dir == FrameDirection::Inbound && *t == text)
        .map(|(n, _, _)| *n)
        .expect("the batch was tapped");
    let invalid: Vec<Option<RaisedFor>> = diags
        .lock()
        .unwrap()
        .iter()
        .filter(|(d, _)| {
            matches!(
                d,
                HostDiagnostic::Connection(mcpl::peer::Diagnostic::InvalidMessage { .. })
            )
        })
        .map(|(_, frame)| *frame)
        .collect();
    let at = |entry| {
        Some(RaisedFor {
            frame: number,
            entry: Some(entry),
        })
    };
    assert_eq!(invalid, [at(0), at(1)]);
}
