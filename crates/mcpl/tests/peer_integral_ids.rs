//! A response that echoes one of our integer ids written with a fraction or an exponent
//! (`1.0`, `2e0`): JSON-RPC 2.0 §5 asks for "the same as the value of the id member in the
//! Request Object", which `1.0` is as a value. The peer reads ids exactly (a non-integer
//! numeric id is no id), so such an answer was unreadable and its request waited for its
//! timeout, or for ever without one. It is now taken as the answer to the outstanding
//! request whose integer id it names, and reported for its form
//! (`Diagnostic::IntegralId`), as both checkers read it (`integral_id_read`). Over a real
//! line transport (an in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::jsonrpc::RequestId;
use mcpl::peer::{Diagnostic, Ordered, PeerConfig, RequestOptions, RequestTimeout};
use serde_json::json;

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// A deadlock guard, never a synchronisation: the paused clock reaches it only once every
/// task waits, which is how the bug showed (the request waiting for an answer it had).
const GUARD: Duration = Duration::from_secs(3600);

fn never() -> RequestOptions<'static> {
    RequestOptions::new().wait(RequestTimeout::Never)
}

#[tokio::test(start_paused = true)]
async fn a_response_echoing_our_integer_id_as_a_whole_float_answers_the_request() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let p = peer.clone();
            tokio::spawn(async move { p.request_raw_with("ping", None, never()).await })
        })
        .collect();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(raw.recv().await["id"].as_u64().unwrap());
    }
    ids.sort_unstable();
    let [a, b, c] = ids[..] else {
        panic!("{ids:?}")
    };
    raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{a}.0,"result":"one"}}"#))
        .await;
    raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{b}e0,"result":"two"}}"#))
        .await;
    // Within a batch too, and an error answer alike.
    raw.send(&format!(
        r#"[{{"jsonrpc":"2.0","id":{c}.0,"error":{{"code":-1,"message":"no"}}}}]"#
    ))
    .await;
    let mut results = Vec::new();
    for call in calls {
        let r = tokio::time::timeout(GUARD, call)
            .await
            .expect("the request waited for an answer it had")
            .unwrap();
        results.push(r.map_err(|e| e.to_string()));
    }
    let (oks, errs): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let mut oks: Vec<String> = oks.into_iter().flatten().map(|v| v.to_string()).collect();
    oks.sort();
    assert_eq!(oks, vec![r#""one""#, r#""two""#]);
    let errs: Vec<String> = errs.into_iter().filter_map(Result::err).collect();
    assert!(errs.len() == 1 && errs[0].contains("no"), "{errs:?}");
    let mut seen = Vec::new();
    for _ in 0..3 {
        match diags.recv().await {
            Some(Diagnostic::IntegralId { id, written }) => seen.push((id, written)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            (RequestId::from(a), format!("{a}.0")),
            (RequestId::from(b), format!("{b}.0")),
            (RequestId::from(c), format!("{c}.0")),
        ]
    );
    assert_eq!(peer.pending_requests(), 0);
}

/// `Peer::send_request`'s answer, delivered in wire order, is read the same way.
#[tokio::test(start_paused = true)]
async fn an_in_order_request_is_answered_by_its_id_as_a_whole_float() {
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig::default());
    let id = peer.send_request("slow", None, |_| {}).await.unwrap();
    let sent = raw.recv().await;
    assert_eq!(sent["id"], id.to_value());
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{}.0,"result":{{}}}}"#,
        sent["id"]
    ))
    .await;
    match tokio::time::timeout(GUARD, incoming.recv_ordered()).await {
        Ok(Some(Ordered::Response(r))) => {
            assert_eq!(r.id, Some(id));
            assert_eq!(r.outcome.unwrap(), json!({}));
        }
        other => panic!("expected the response, got {other:?}"),
    }
}

/// Only a whole value naming an outstanding request is read so: a true fraction, or a
/// whole float naming no request of ours, stays an invalid message, and the request it does
/// not answer still waits.
#[tokio::test(start_paused = true)]
async fn a_fraction_or_an_id_of_no_request_stays_invalid() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw_with("ping", None, never()).await });
    let id = raw.recv().await["id"].as_u64().unwrap();
    raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id}.5,"result":1}}"#))
        .await;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{}.0,"result":2}}"#,
        id + 100
    ))
    .await;
    for _ in 0..2 {
        match diags.recv().await {
            Some(Diagnostic::InvalidMessage {
                answered: false, ..
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(peer.pending_requests(), 1);
    raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":3}}"#))
        .await;
    assert_eq!(call.await.unwrap().unwrap(), json!(3));
}
