//! The answer to an `initialize` or an `mcpl/manifest` sent through a plain [`Peer`]
//! (`request`, `request_raw`: not a session's `send_request`) decides authority as much as
//! the session's (§5.1, §17.2: the manifest the host grants from), so it is read by the one
//! rule: a member named twice anywhere in its text (I-JSON, RFC 7493 §2.3) fails the
//! request as unreadable (`PeerError::InvalidResponse`, §5.4 fail closed), never read as
//! its last copy. Over a real line transport (an in-memory pipe), every byte of the other
//! side's written by the test.
#![cfg(feature = "runtime")]

use mcpl::peer::{Peer, PeerConfig, PeerError};
use mcpl::protocol::handshake::{Initialize, InitializeParams};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw, GUARD};

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

const NARROW: &str = r#"{"version":"0.5","featureSets":{}}"#;
const WIDE: &str = r#"{"version":"0.5","pushEvents":true,"featureSets":{"a":{"description":"A","uses":["pushEvents"]}}}"#;

/// An `initialize` result under `id` whose `experimental` names `mcpl` twice (or once).
fn init_answer(id: &Value, twice: bool) -> String {
    let experimental = match twice {
        true => format!(r#"{{"mcpl":{NARROW},"mcpl":{WIDE}}}"#),
        false => format!(r#"{{"mcpl":{WIDE}}}"#),
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2024-11-05","capabilities":{{"tools":{{}},"experimental":{experimental}}},"serverInfo":{{"name":"s","version":"1"}}}}}}"#
    )
}

/// An `mcpl/manifest` result under `id` whose manifest names `pushEvents` twice (or once).
fn manifest_answer(id: &Value, twice: bool) -> String {
    let doubled = match twice {
        true => r#""pushEvents":false,"#,
        false => "",
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"version":"0.5",{doubled}"pushEvents":true,"featureSets":{{}}}}}}"#
    )
}

/// Sends `method` through `send`, answers it from the raw side with `answer(id)`, and
/// returns what the caller got.
async fn exchange<F, T>(
    raw: &mut Raw,
    send: F,
    answer: impl Fn(&Value) -> String,
) -> Result<T, PeerError>
where
    F: std::future::Future<Output = Result<T, PeerError>>,
{
    tokio::pin!(send);
    let request = tokio::select! {
        r = raw.recv() => r,
        _ = &mut send => panic!("ended before it was answered"),
    };
    raw.send(&answer(&request["id"])).await;
    tokio::time::timeout(GUARD, send).await.expect("no outcome")
}

fn init_params() -> Value {
    json!({"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"h","version":"1"}})
}

fn assert_unreadable<T: std::fmt::Debug>(got: Result<T, PeerError>, name: &str) {
    match got {
        Err(PeerError::InvalidResponse(reason)) => {
            assert!(reason.contains(name), "{reason}");
            assert!(reason.contains("more than once"), "{reason}");
        }
        other => panic!("an answer naming {name:?} twice was read: {other:?}"),
    }
}

/// §5.4, §5.1: `initialize` through `Peer::request_raw` and the typed `Peer::request`.
#[tokio::test(start_paused = true)]
async fn an_initialize_answer_naming_a_member_twice_fails_through_a_plain_peer() {
    let (peer, _incoming, mut raw) = raw_peer(config());
    let p: &Peer = &peer;
    let got = exchange(
        &mut raw,
        p.request_raw("initialize", Some(init_params())),
        |id| init_answer(id, true),
    )
    .await;
    assert_unreadable(got, "mcpl");
    let params: InitializeParams = serde_json::from_value(init_params()).unwrap();
    let got = exchange(&mut raw, p.request::<Initialize>(&params), |id| {
        init_answer(id, true)
    })
    .await;
    assert_unreadable(got, "mcpl");
    // The same answer written once is read.
    let got = exchange(
        &mut raw,
        p.request_raw("initialize", Some(init_params())),
        |id| init_answer(id, false),
    )
    .await;
    assert_eq!(
        got.expect("read")["capabilities"]["experimental"]["mcpl"]["pushEvents"],
        true
    );
}

/// §17.2: `mcpl/manifest` through `Peer::request_raw`.
#[tokio::test(start_paused = true)]
async fn a_manifest_answer_naming_a_member_twice_fails_through_a_plain_peer() {
    let (peer, _incoming, mut raw) = raw_peer(config());
    let got = exchange(&mut raw, peer.request_raw("mcpl/manifest", None), |id| {
        manifest_answer(id, true)
    })
    .await;
    assert_unreadable(got, "pushEvents");
    let got = exchange(&mut raw, peer.request_raw("mcpl/manifest", None), |id| {
        manifest_answer(id, false)
    })
    .await;
    assert_eq!(got.expect("read")["pushEvents"], true);
}

/// The note of an answer to read whole is kept whichever way its request went: a plain
/// `initialize` awaiting its answer while an `mcpl/manifest` is sent in order
/// (`Peer::send_request`, a session's way) is still read by the one rule (before, noting
/// the second dropped the first's note, and its doubled answer was read as its last copy).
#[tokio::test(start_paused = true)]
async fn a_note_of_one_way_survives_a_send_of_the_other() {
    let (peer, _incoming, mut raw) = raw_peer(config());
    let p = peer.clone();
    let init = tokio::spawn(async move { p.request_raw("initialize", Some(init_params())).await });
    let first = raw.recv().await;
    assert_eq!(first["method"], "initialize", "{first}");
    peer.send_request("mcpl/manifest", None, |_| {})
        .await
        .expect("sent");
    let second = raw.recv().await;
    assert_eq!(second["method"], "mcpl/manifest", "{second}");
    raw.send(&init_answer(&first["id"], true)).await;
    let got = tokio::time::timeout(GUARD, init)
        .await
        .expect("no outcome")
        .expect("joined");
    assert_unreadable(got, "mcpl");
}
