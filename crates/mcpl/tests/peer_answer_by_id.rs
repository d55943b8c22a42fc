//! Answers by id ([`Peer::respond`], [`Peer::respond_error`]) name a request received and
//! still owed, taken with `IncomingRequest::into_id`; a mistaken id is refused, nothing
//! written (JSON-RPC 2.0 §5: a response answers a request made, once). The requests taken
//! so stay counted against `PeerConfig::max_in_flight_requests` until answered. Over a real
//! line transport (an in-memory pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest, PeerConfig, PeerError};
use serde_json::json;

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, GUARD};

fn config(max_in_flight_requests: usize) -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        max_in_flight_requests,
        ..PeerConfig::default()
    }
}

async fn next_request(incoming: &mut Incoming) -> IncomingRequest {
    match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    }
}

/// An id never received, one already answered, and one its guard still holds (the guard
/// answers it: an answer by id too would be a second) are refused with
/// [`PeerError::NotOwed`], and nothing goes on the wire for them. Before, each went out: an
/// answer to a request never made, and a second answer under 7.
#[tokio::test(start_paused = true)]
async fn an_answer_by_id_to_a_request_not_owed_is_refused() {
    let (peer, mut incoming, mut raw) = raw_peer(config(128));
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"a"}"#).await;
    let id = next_request(&mut incoming).await.into_id().expect("alone");
    raw.send(r#"{"jsonrpc":"2.0","id":8,"method":"b"}"#).await;
    let guarded = next_request(&mut incoming).await;

    let never = peer.respond(RequestId::from(99_u64), json!("x")).await;
    assert!(matches!(never, Err(PeerError::NotOwed { .. })), "{never:?}");
    let held = peer.respond(RequestId::from(8_u64), json!("x")).await;
    assert!(matches!(held, Err(PeerError::NotOwed { .. })), "{held:?}");
    let by_string = peer
        .respond_error(RequestId::from("7"), ErrorObject::internal("x"))
        .await;
    assert!(
        matches!(by_string, Err(PeerError::NotOwed { .. })),
        "{by_string:?}"
    );

    peer.respond(id.clone(), json!("a")).await.unwrap();
    let again = peer.respond(id.clone(), json!("again")).await;
    match &again {
        Err(e @ PeerError::NotOwed { id: named }) => {
            assert_eq!(named, "7");
            let text = e.to_string();
            assert!(text.contains("into_id"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    guarded.respond("b").await.unwrap();
    answer_all(incoming);
    let written = raw.before_sync().await;
    assert_eq!(
        written,
        vec![
            json!({"jsonrpc":"2.0","id":7,"result":"a"}),
            json!({"jsonrpc":"2.0","id":8,"result":"b"}),
        ]
    );
}

/// Requests taken with `into_id` and not yet answered count against
/// `max_in_flight_requests`: past it the next request is answered busy (`-32000`), and
/// once one is answered by id a request is taken again. Before, `into_id` stopped counting
/// them, so an application that never answers let the other side pile them up without
/// bound.
#[tokio::test(start_paused = true)]
async fn requests_taken_by_id_count_against_the_in_flight_bound() {
    let (peer, mut incoming, mut raw) = raw_peer(config(2));
    let mut ids = Vec::new();
    for n in 1..=2_u64 {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"a"}}"#))
            .await;
        ids.push(next_request(&mut incoming).await.into_id().expect("alone"));
    }
    assert_eq!(peer.requests_in_flight(), 2);
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"a"}"#).await;
    let busy = tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("no answer to the request past the bound");
    assert_eq!(
        (
            &busy["id"],
            &busy["error"]["code"],
            &busy["error"]["data"]["limit"]
        ),
        (&json!(3), &json!(-32000), &json!(2)),
        "{busy}"
    );
    peer.respond(ids.remove(0), json!("one")).await.unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":1,"result":"one"})
    );
    assert_eq!(peer.requests_in_flight(), 1);
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"a"}"#).await;
    let taken = next_request(&mut incoming).await;
    assert_eq!(taken.id(), &RequestId::from(4_u64));
    taken.respond("four").await.unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":4,"result":"four"})
    );
}
