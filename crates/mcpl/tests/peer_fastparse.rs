//! Issue #8: the peer reads single-object frames with `Message::parse_object` and falls back
//! to the `Value` path for everything it declines. These wire tests pin that the fallback
//! keeps `Value`'s reading (a repeated member: the last one wins) and that what the fast path
//! accepts (escaped member names, unknown members) is served as before.
#![cfg(feature = "runtime")]

use std::hint::black_box;

use mcpl::jsonrpc::Message;
use mcpl::peer::{Incoming, IncomingMessage, PeerConfig};
use serde_json::{json, Value};

#[path = "support/alloc_count.rs"]
mod alloc_count;
use alloc_count::allocs;

#[path = "support/raw.rs"]
mod raw;
use raw::raw_peer;

/// Answers every request with its own method name and params.
fn spawn_echo_server(mut incoming: Incoming) {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(req) = msg {
                let r = req.request();
                let answer = json!({"method": r.method, "params": r.params});
                req.respond(answer).await.unwrap();
            }
        }
    });
}

/// A request naming its `id` twice takes the value path, which refuses it: which request it
/// is cannot be told (JSON-RPC 2.0 §4, §5; `jsonrpc::doubled::DOUBLED_ID`). Before, the last id won
/// and the request was served under `"two"`.
#[tokio::test]
async fn s4_1_a_repeated_id_takes_the_value_path_and_is_refused_under_null() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_echo_server(incoming);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"a","id":"two"}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null, "{reply}");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
}

#[tokio::test]
async fn s4_escaped_names_and_unknown_members_are_served_by_the_fast_path() {
    let (_peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    spawn_echo_server(incoming);
    raw.send(r#" {"x":[1e3,{"y":null}],"m\u0065thod":"p\u0069ng","jsonrpc":"2.0","id":-7,"params":[1.0]} "#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["result"], json!({"method":"ping","params":[1.0]}));
    assert_eq!(reply["id"].to_string(), "-7");
    // `-0` is the float `-0.0` to serde_json: the same value, answered under it (JSON-RPC
    // 2.0 §4 says SHOULD NOT of a fraction; `jsonrpc::request_id_number`).
    raw.send(r#"{"jsonrpc":"2.0","id":-0,"method":"ping"}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"].to_string(), "-0.0", "{reply}");
    assert!(reply.get("error").is_none(), "{reply}");
    // A whole value past 64 bits is no id.
    raw.send(r#"{"jsonrpc":"2.0","id":1e30,"method":"ping"}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], -32600);
    // Its message is true of what is taken (whole floats under 2^53 are) and says what is
    // refused; it said "must be an integer within 64 bits".
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("under 2^53") && message.contains("such as 1e30"),
        "{reply}"
    );
}

#[tokio::test]
async fn s4_a_response_with_a_repeated_result_settles_with_the_last_one() {
    let (peer, _incoming, mut raw) = raw_peer(PeerConfig::default());
    let p = peer.clone();
    let call = tokio::spawn(async move { p.request_raw("x", None).await });
    let req = raw.recv().await;
    let id = req["id"].to_string();
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":1,"result":{{"last":true}}}}"#
    ))
    .await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"last": true}));
}

/// Allocations made by `f` on this thread (a count, not a timing).
fn allocs_of<T>(f: impl FnOnce() -> T) -> u64 {
    let before = allocs();
    let out = black_box(f());
    let n = allocs() - before;
    drop(out);
    n
}

#[test]
fn s4_the_fast_path_skips_the_outer_object_allocations() {
    let text = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
    let fast = allocs_of(|| Message::parse_object(black_box(text)).unwrap());
    let slow = allocs_of(|| {
        let v: Value = serde_json::from_str(black_box(text)).unwrap();
        Message::from_value(v).unwrap()
    });
    // What the message owns: the method, the params map's node, its one key and one value.
    assert!(fast <= 4, "fast path made {fast} allocations");
    // The slow path also builds the outer map: its node, four key strings and "2.0".
    assert!(slow >= fast + 6, "fast {fast} vs slow {slow}");
}
