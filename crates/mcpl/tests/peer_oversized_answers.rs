//! An answer over `PeerConfig::max_message_size`, on the wire. The line is discarded
//! unbuffered (its size is the point of the limit), but its first bytes say which request
//! it answers: that request fails at once, naming the size, rather than waiting for its
//! timeout (or for ever, without one) for an answer that already came.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::peer::{Diagnostic, Ordered, PeerConfig, PeerError};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// A deadlock guard, never a synchronisation.
const GUARD: Duration = Duration::from_secs(30);

fn config() -> PeerConfig {
    PeerConfig {
        max_message_size: 1024,
        // No deadline: a request whose answer was lost would wait for ever.
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// The answer to `request` (a line read from the peer), `bytes` of padding in its result.
fn big_answer(request: &str, bytes: usize) -> String {
    let v: Value = serde_json::from_str(request).unwrap();
    json!({"jsonrpc": "2.0", "id": v["id"], "result": {"pad": "x".repeat(bytes)}}).to_string()
}

#[tokio::test]
async fn an_answer_over_the_size_limit_fails_its_request_at_once() {
    let (peer, _incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("big", None).await })
    };
    let request = raw.recv_line().await;
    raw.send(&big_answer(&request, 5000)).await;
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    match outcome {
        Err(PeerError::InvalidResponse(why)) => {
            assert!(why.contains("1024"), "{why}");
        }
        other => panic!("expected the request to fail as an invalid response, got {other:?}"),
    }
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::Oversized { limit: 1024, .. })
    ));
    // The connection goes on; a small answer is still read.
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("small", None).await })
    };
    let request = raw.recv_line().await;
    raw.send(&big_answer(&request, 10)).await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"pad": "x".repeat(10)}));
}

/// The same for a request whose answer is delivered in wire order (`Peer::send_request`,
/// as the sessions send theirs): its failure takes the answer's place.
#[tokio::test]
async fn an_oversized_in_order_answer_is_delivered_as_a_failure_at_its_place() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let id = peer.send_request("big", None, |_| {}).await.unwrap();
    let request = raw.recv_line().await;
    raw.send(&big_answer(&request, 5000)).await;
    let got = tokio::time::timeout(GUARD, incoming.recv_ordered())
        .await
        .expect("the answer's place was lost (deadlock guard)");
    match got {
        Some(Ordered::Response(r)) => {
            assert_eq!(r.id, Some(id));
            let e = r.outcome.unwrap_err();
            assert!(e.message.contains("1024"), "{}", e.message);
        }
        other => panic!("expected the failed response, got {other:?}"),
    }
}

/// The failure the peer made for an answer it could not read is marked as its own
/// (`Peer::failed_here`), once; the other side's `-32603` in the very same words is not.
#[tokio::test]
async fn the_peers_own_failure_is_told_from_the_other_sides_same_words() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    let ours = peer.send_request("big", None, |_| {}).await.unwrap();
    let request = raw.recv_line().await;
    raw.send(&big_answer(&request, 5000)).await;
    let made = match tokio::time::timeout(GUARD, incoming.recv_ordered()).await {
        Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&ours) => r.outcome.unwrap_err(),
        other => panic!("expected the failed response, got {other:?}"),
    };
    let theirs = peer.send_request("same", None, |_| {}).await.unwrap();
    let request = raw.recv_line().await;
    let v: Value = serde_json::from_str(&request).unwrap();
    let copied = json!({"jsonrpc": "2.0", "id": v["id"],
                        "error": {"code": made.code, "message": made.message}});
    raw.send(&copied.to_string()).await;
    match tokio::time::timeout(GUARD, incoming.recv_ordered()).await {
        Ok(Some(Ordered::Response(r))) if r.id.as_ref() == Some(&theirs) => {
            assert_eq!(
                r.outcome.unwrap_err(),
                made,
                "the same error, word for word"
            );
        }
        other => panic!("expected the other side's error, got {other:?}"),
    }
    assert!(
        !peer.failed_here(&theirs),
        "the other side's error is its own"
    );
    assert!(peer.failed_here(&ours), "the peer's failure is marked");
    assert!(!peer.failed_here(&ours), "and told once");
}

/// Only a line that shows it is a response (an id, then `result` or `error`, and no method)
/// fails a request: the other side's request with the same id does not.
#[tokio::test]
async fn an_oversized_request_with_a_colliding_id_fails_nothing() {
    let (peer, _incoming, mut raw) = raw_peer(config());
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("small", None).await })
    };
    let request = raw.recv_line().await;
    let v: Value = serde_json::from_str(&request).unwrap();
    // The other side's own request, reusing the id, its method after its params.
    raw.send(&format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"params\":{{\"pad\":\"{}\"}},\"method\":\"x\"}}",
        v["id"],
        "x".repeat(5000)
    ))
    .await;
    raw.send(&big_answer(&request, 10)).await;
    assert_eq!(
        tokio::time::timeout(GUARD, call)
            .await
            .expect("deadlock guard")
            .unwrap()
            .unwrap(),
        json!({"pad": "x".repeat(10)})
    );
}

/// Over WebSocket too: an answer over the limit in a text frame fails its request at once.
#[tokio::test]
async fn over_websocket_an_oversized_answer_fails_its_request_at_once() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        mcpl::transport::ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, _incoming) = mcpl::peer::Peer::new(server.unwrap(), config());
    let (mut raw, _) = client.unwrap();
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("big", None).await })
    };
    let request = match raw.next().await.unwrap().unwrap() {
        WsMessage::Text(t) => t.as_str().to_owned(),
        other => panic!("expected the request, got {other:?}"),
    };
    raw.send(WsMessage::text(big_answer(&request, 5000)))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    assert!(
        matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("1024")),
        "{outcome:?}"
    );
}

/// Over WebSocket, an answer over the limit whose id comes after its result (past the first
/// `DISCARDED_HEAD_BYTES`) fails its request at once too: the whole message is in the
/// frame, and its envelope is read (`transport::envelope`). Before, only its first bytes
/// were, and the request waited for ever.
#[tokio::test]
async fn over_websocket_an_oversized_answer_with_its_id_last_fails_its_request_at_once() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        mcpl::transport::ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, _incoming) = mcpl::peer::Peer::new(server.unwrap(), config());
    let (mut raw, _) = client.unwrap();
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("big", None).await })
    };
    let request = match raw.next().await.unwrap().unwrap() {
        WsMessage::Text(t) => t.as_str().to_owned(),
        other => panic!("expected the request, got {other:?}"),
    };
    let v: Value = serde_json::from_str(&request).unwrap();
    let answer = format!(
        r#"{{"jsonrpc":"2.0","result":{{"pad":"{}"}},"id":{}}}"#,
        "x".repeat(5000),
        v["id"]
    );
    raw.send(WsMessage::text(answer)).await.unwrap();
    let outcome = tokio::time::timeout(GUARD, call)
        .await
        .expect("the request still waits for the answer that came (deadlock guard)")
        .unwrap();
    assert!(
        matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("1024")),
        "{outcome:?}"
    );
}

/// An answer refused for its size (over `max_message_size`, discarded unread) or for its
/// parsed cost (over `max_parsed_cost`, refused unbuilt) whose id echoes ours written as a
/// whole float (`3.0`, `3e0`: JSON-RPC 2.0 §5 asks for the same value, which it is) fails
/// its request at once, as one with the integer id does, and is reported for its form
/// (`Diagnostic::IntegralId`). Before, such an id was read as no id there, so the request
/// waited for its timeout, or for ever without one.
#[tokio::test(start_paused = true)]
async fn a_refused_answer_whose_id_is_a_whole_float_fails_its_request_at_once() {
    let config = PeerConfig {
        max_parsed_cost: 1_000,
        ..config()
    };
    let (peer, mut incoming, mut raw) = raw_peer(config);
    let mut diags = peer.diagnostics();
    // `{"a":1}` 100 times: 800 bytes of text (under the size limit), 2,200 cost units.
    let dense = format!("[{}]", vec![r#"{"a":1}"#; 100].join(","));
    let pad = "x".repeat(5000);
    let answers = [
        (".0", format!(r#""result":{{"pad":"{pad}"}}"#), "1024"),
        ("e0", format!(r#""result":{dense}"#), "1000"),
        (
            ".0",
            format!(r#""error":{{"code":1,"message":"m","data":{dense}}}"#),
            "1000",
        ),
    ];
    for (form, outcome, names) in answers {
        let call = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_raw("big", None).await })
        };
        let request: Value = serde_json::from_str(&raw.recv_line().await).unwrap();
        let id = request["id"].as_u64().unwrap();
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id}{form},{outcome}}}"#))
            .await;
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .expect("the request still waits for the answer that came (deadlock guard)")
            .unwrap();
        match outcome {
            Err(PeerError::InvalidResponse(why)) => assert!(why.contains(names), "{why}"),
            other => panic!("expected the request to fail as an invalid response, got {other:?}"),
        }
        let mut integral = false;
        while let Some(d) = diags.try_recv() {
            if let Diagnostic::IntegralId { id: got, written } = d {
                assert_eq!(got, mcpl::jsonrpc::RequestId::from(id));
                assert_eq!(written, format!("{id}.0"));
                integral = true;
            }
        }
        assert!(integral, "no IntegralId reported for {form}");
    }
    // Delivered in wire order too (`Peer::send_request`): its failure takes its place.
    let id = peer.send_request("big", None, |_| {}).await.unwrap();
    let request: Value = serde_json::from_str(&raw.recv_line().await).unwrap();
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{}.0,"result":{{"pad":"{pad}"}}}}"#,
        request["id"]
    ))
    .await;
    match tokio::time::timeout(GUARD, incoming.recv_ordered())
        .await
        .expect("the answer's place was lost (deadlock guard)")
    {
        Some(Ordered::Response(r)) => {
            assert_eq!(r.id, Some(id));
            assert!(r.outcome.is_err());
        }
        other => panic!("expected the failed response, got {other:?}"),
    }
    assert_eq!(peer.pending_requests(), 0);
}

/// Two requests of ours, `a` and `b`, in flight: their ids as the raw side read them.
async fn two_in_flight(
    peer: &mcpl::peer::Peer,
    raw: &mut raw::Raw,
) -> (
    tokio::task::JoinHandle<Result<Value, PeerError>>,
    tokio::task::JoinHandle<Result<Value, PeerError>>,
    Value,
    Value,
) {
    let a = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("a", None).await })
    };
    let ra: Value = raw.recv().await;
    let b = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("b", None).await })
    };
    let rb: Value = raw.recv().await;
    (a, b, ra["id"].clone(), rb["id"].clone())
}

/// MCP stdio framing is one message per line, and a held line of several whole messages is
/// read message by message (`jsonrpc::several_values`). A line of several over the size
/// limit is discarded unread, and refused message by message too: each answer of ours on
/// it fails its request at once, whichever of them is the large one, and a request after
/// the first is answered `-32600` under its id. Before, only the line's first message was
/// read of it: the request the second answered waited for ever (no deadline here), and a
/// request there got no answer.
#[tokio::test]
async fn every_answer_on_an_oversized_line_of_several_fails_its_request_at_once() {
    let pad = "x".repeat(5000);
    for large_first in [false, true] {
        let (peer, _incoming, mut raw) = raw_peer(config());
        let (a, b, ida, idb) = two_in_flight(&peer, &mut raw).await;
        let (small, large) = match large_first {
            false => (&ida, &idb),
            true => (&idb, &ida),
        };
        let small = format!(r#"{{"jsonrpc":"2.0","id":{small},"result":1}}"#);
        let large = format!(r#"{{"jsonrpc":"2.0","id":{large},"result":"{pad}"}}"#);
        let line = match large_first {
            false => format!("{small} {large}"),
            true => format!("{large}\t{small}"),
        };
        raw.send(&line).await;
        for call in [a, b] {
            let outcome = tokio::time::timeout(GUARD, call)
                .await
                .expect("a request still waits for the answer that came (deadlock guard)")
                .unwrap();
            assert!(
                matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("1024")),
                "large first {large_first}: {outcome:?}"
            );
        }
    }
    // A request after the first: answered under its id; the first's own answer too.
    let (_peer, _incoming, mut raw) = raw_peer(config());
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":"r1","method":"x","params":"{pad}"}} {{"jsonrpc":"2.0","id":"r2","method":"y"}}"#
    ))
    .await;
    for id in ["r1", "r2"] {
        let a = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("no answer");
        assert_eq!(
            (&a["id"], &a["error"]["code"]),
            (&json!(id), &json!(-32600)),
            "{a}"
        );
    }
}

/// Over WebSocket too: a text frame of several messages over the limit fails each request
/// of ours it answers at once.
#[tokio::test]
async fn over_websocket_every_answer_in_an_oversized_frame_of_several_fails_at_once() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        mcpl::transport::ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, _incoming) = mcpl::peer::Peer::new(server.unwrap(), config());
    let (mut raw, _) = client.unwrap();
    let mut calls = Vec::new();
    let mut ids = Vec::new();
    for method in ["a", "b"] {
        let peer = peer.clone();
        calls.push(tokio::spawn(
            async move { peer.request_raw(method, None).await },
        ));
        let request = match raw.next().await.unwrap().unwrap() {
            WsMessage::Text(t) => t.as_str().to_owned(),
            other => panic!("expected the request, got {other:?}"),
        };
        let v: Value = serde_json::from_str(&request).unwrap();
        ids.push(v["id"].clone());
    }
    let frame = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":"{}"}} {{"jsonrpc":"2.0","id":{},"result":1}}"#,
        ids[0],
        "x".repeat(5000),
        ids[1]
    );
    raw.send(WsMessage::text(frame)).await.unwrap();
    for call in calls {
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .expect("a request still waits for the answer that came (deadlock guard)")
            .unwrap();
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("1024")),
            "{outcome:?}"
        );
    }
}

/// Bounded as a line held is: past `PeerConfig::max_batch_entries` messages on a line
/// discarded for its size, the rest is refused with one `-32600` under a null id
/// (`messages_per_line`), each message before it answered under its id.
#[tokio::test]
async fn an_oversized_line_of_several_is_bounded_as_a_line_held() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_batch_entries: 2,
        ..config()
    });
    raw::answer_all(incoming);
    let pad = "x".repeat(2000);
    let line = (1..=4)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":"r{i}","method":"m","params":"{pad}"}}"#))
        .collect::<Vec<_>>()
        .join(" ");
    raw.send(&line).await;
    let got = tokio::time::timeout(GUARD, raw.before_sync())
        .await
        .expect("no answer to sync");
    assert_eq!(got.len(), 3, "{got:?}");
    for id in [json!("r1"), json!("r2"), Value::Null] {
        assert!(
            got.iter()
                .any(|a| a["id"] == id && a["error"]["code"] == -32600),
            "{id}: {got:?}"
        );
    }
    let past = got
        .iter()
        .find(|a| a["id"].is_null())
        .expect("the past-bound refusal");
    assert_eq!(
        past["error"]["data"]["reason"], "messages_per_line",
        "{past}"
    );
}

/// Past that bound, an answer of ours on the oversized line still fails its request at once.
#[tokio::test]
async fn an_answer_of_ours_past_the_bound_of_an_oversized_line_fails_at_once() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig {
        max_batch_entries: 2,
        ..config()
    });
    let (a, b, ida, idb) = two_in_flight(&peer, &mut raw).await;
    let pad = "x".repeat(2000);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":"r1","method":"m","params":"{pad}"}} {{"jsonrpc":"2.0","id":{ida},"result":1}} {{"jsonrpc":"2.0","id":{idb},"result":1}}"#
    ))
    .await;
    for call in [a, b] {
        let outcome = tokio::time::timeout(GUARD, call)
            .await
            .expect("a request still waits for the answer that came (deadlock guard)")
            .unwrap();
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("1024")),
            "{outcome:?}"
        );
    }
}

/// Past what the reader can keep of an oversized line of several (64 KiB of envelope
/// summaries), the requests not kept are still answered: one `-32600` under a null id
/// (`messages_not_kept`), the kept ones each under its own id. Before, they got nothing (a
/// review finding: long ids filled the summaries well within the message bound).
#[tokio::test]
async fn the_requests_of_an_oversized_line_past_what_was_kept_are_answered() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig {
        max_batch_entries: 1024,
        ..config()
    });
    raw::answer_all(incoming);
    let long_id = "i".repeat(1000);
    let line = (1..=200)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":"{i}{long_id}","method":"m"}}"#))
        .collect::<Vec<_>>()
        .join(" ");
    raw.send(&line).await;
    let got = tokio::time::timeout(GUARD, raw.before_sync())
        .await
        .expect("no answer to sync");
    let under_id = got.iter().filter(|a| a["id"].is_string()).count();
    assert!(
        under_id > 1 && under_id < 200,
        "{under_id}: some kept, not all"
    );
    let not_kept: Vec<&Value> = got.iter().filter(|a| a["id"].is_null()).collect();
    assert_eq!(not_kept.len(), 1, "{got:?}");
    assert_eq!(not_kept[0]["error"]["code"], -32600);
    assert_eq!(
        not_kept[0]["error"]["data"]["reason"], "messages_not_kept",
        "{}",
        not_kept[0]
    );
}

/// A discarded frame is a frame on the wire: it takes its number (`TapEvent::frame`), and
/// the failure of the request it answered, delivered in order, is told with that number
/// (`Incoming::frame`), not the number of the text frame before it.
#[tokio::test]
async fn the_failure_an_oversized_answer_delivers_names_its_own_frame() {
    use mcpl::peer::{FrameDirection, Tap, TapEvent};
    use std::sync::{Arc, Mutex};
    let numbers: Arc<Mutex<Vec<u64>>> = Arc::default();
    let seen = numbers.clone();
    let tap = Tap::new(move |ev: TapEvent<'_>| {
        if ev.direction == FrameDirection::Inbound {
            seen.lock().unwrap().push(ev.frame);
        }
    });
    let (peer, mut incoming, mut raw) = raw_peer(PeerConfig {
        tap: Some(tap),
        ..config()
    });
    let id = peer.send_request("big", None, |_| {}).await.unwrap();
    let request = raw.recv_line().await;
    // Frame 1: a notification; frame 2: the answer, over the limit; frame 3: another.
    let note = json!({"jsonrpc": "2.0", "method": "note"}).to_string();
    let text = format!("{note}\n{}\n{note}", big_answer(&request, 5000));
    raw.send(&text).await;
    assert!(matches!(
        next(&mut incoming).await,
        Some(Ordered::Message(_))
    ));
    assert_eq!(incoming.frame(), 1);
    match next(&mut incoming).await {
        Some(Ordered::Response(r)) => assert_eq!(r.id, Some(id.clone())),
        other => panic!("expected the request's failure, got {other:?}"),
    }
    assert_eq!(incoming.frame(), 2, "the failure names the discarded frame");
    assert!(matches!(
        next(&mut incoming).await,
        Some(Ordered::Message(_))
    ));
    assert_eq!(incoming.frame(), 3);
    // The tap sees the text frames only; their numbers skip the discarded one.
    assert_eq!(*numbers.lock().unwrap(), [1, 3]);
}

async fn next(incoming: &mut mcpl::peer::Incoming) -> Option<Ordered> {
    let fut = incoming.recv_ordered();
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("deadlock guard")
}
