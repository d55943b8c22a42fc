//! Over WebSocket, a message refused by the shared `MessageBudget` is read for its id as a
//! line transport reads one: by its envelope (`transport::envelope`), streamed from every
//! byte read of it, wherever the id is. Before, only its first `DISCARDED_HEAD_BYTES` were
//! kept: a request whose id came after them was never answered (its sender waited for its
//! own deadline), and our request whose answer put its id last failed only as the
//! connection closed, not for the refused answer. Over a real WebSocket (tungstenite's
//! client on an in-memory pipe), every message written by the test. Each message is
//! written whole into a pipe that holds it before the peer reads, so the peer reads it, id
//! included, before the budget refuses it (what a reader reads of a refused message is
//! what it can tell of it, as for a line).
#![cfg(feature = "runtime")]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mcpl::jsonrpc::codes;
use mcpl::peer::{Peer, PeerConfig, PeerError};
use mcpl::transport::{MessageBudget, UNBUDGETED_BYTES};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// A deadlock guard, never a synchronisation.
const GUARD: Duration = Duration::from_secs(3600);

/// The budget: a message past `UNBUDGETED_BYTES + BUDGET` cannot be covered.
const BUDGET: usize = 4096;

fn config() -> PeerConfig {
    PeerConfig {
        message_budget: Some(MessageBudget::new(BUDGET)),
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// Padding that takes a message past the budget (and nowhere near `max_message_size`).
fn pad() -> String {
    "x".repeat(UNBUDGETED_BYTES + BUDGET + 1000)
}

type Client = tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>;

/// A peer accepting a WebSocket, and the client at its other end.
async fn ws_pair() -> (Peer, mcpl::peer::Incoming, Client) {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        mcpl::transport::ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), config());
    (peer, incoming, client.unwrap().0)
}

/// The next text message from the peer, as JSON; `None` once the connection ended.
async fn next_text(client: &mut Client) -> Option<Value> {
    loop {
        match tokio::time::timeout(GUARD, client.next()).await.ok()?? {
            Ok(WsMessage::Text(t)) => return serde_json::from_str(t.as_str()).ok(),
            Ok(WsMessage::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// A request over the budget whose id comes after its `params` (past the first 2 KiB) is
/// answered `-32000` under that id, `data.reason: "message_budget"`.
#[tokio::test]
async fn a_request_over_the_budget_with_its_id_last_is_answered_under_it() {
    let (_peer, _incoming, mut client) = ws_pair().await;
    let request = format!(
        r#"{{"jsonrpc":"2.0","method":"m","params":{{"pad":"{}"}},"id":"late-id"}}"#,
        pad()
    );
    // The send may fail once the peer closes (1013) after its answer: what matters is read.
    let _ = client.send(WsMessage::text(request)).await;
    let answer = next_text(&mut client)
        .await
        .expect("the refused request was not answered before the connection ended");
    assert_eq!(answer["id"], "late-id", "{answer}");
    assert_eq!(answer["error"]["code"], codes::BUSY, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "message_budget",
        "{answer}"
    );
}

/// An answer of the other side over the budget whose id comes after its `result` fails
/// our request at once, naming the budget, not only as the connection closes.
#[tokio::test]
async fn an_answer_over_the_budget_with_its_id_last_fails_its_request_for_the_budget() {
    let (peer, _incoming, mut client) = ws_pair().await;
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("x", None).await })
    };
    let request = next_text(&mut client).await.expect("our request");
    let answer = format!(
        r#"{{"jsonrpc":"2.0","result":{{"pad":"{}"}},"id":{}}}"#,
        pad(),
        request["id"]
    );
    let _ = client.send(WsMessage::text(answer)).await;
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("deadlock guard")
        .unwrap();
    assert!(
        matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("message_budget")),
        "{outcome:?}"
    );
}
