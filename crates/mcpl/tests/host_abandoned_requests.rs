//! A host request to the server whose caller gives up (its future dropped) is cancelled on
//! the wire with MCP's `notifications/cancelled { requestId, reason }` under the id it was
//! written with, and forgotten; a `channels/open` or `channels/close` given up never changes
//! the channels (§14.3, §14.5: only a confirmed answer does, and one read after the cancel is
//! a late response). A scripted server over a real transport reads the host's frames.
#![cfg(feature = "runtime")]

#[path = "support/raw.rs"]
mod raw;

use mcpl::host::{HostConfig, HostSession, HostStreams};
use mcpl::peer::{Peer, PeerConfig};
use raw::init_result;
use serde_json::{json, Value};

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "channels": { "register": true, "lifecycle": true, "incoming": true },
        "contextHooks": { "beforeInference": { "observe": true } },
        "featureSets": {
            "memory": { "description": "Memory", "uses": ["contextHooks.beforeInference.observe"] }
        }
    })
}

fn config() -> HostConfig {
    HostConfig {
        policy: [
            "tools",
            "channels.register",
            "channels.lifecycle",
            "channels.incoming",
            "contextHooks.beforeInference.observe",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        hook_timeout: std::time::Duration::from_secs(3600),
        ..HostConfig::default()
    }
}

/// The handshake and the initial policy exchange, answered by the raw side.
async fn connect(
    peer: Peer,
    incoming: mcpl::peer::Incoming,
    raw: &mut raw::Raw,
) -> (HostSession, HostStreams) {
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, config()));
    let init = raw.recv().await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest()))}))
        .await;
    let mut policy = raw.recv().await;
    if policy["method"] == "notifications/initialized" {
        policy = raw.recv().await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    connect.await.unwrap().unwrap()
}

/// The server sends request `id` `method` and reads the host's answer to it (what the
/// host wrote before it is returned first, in order).
async fn call(raw: &mut raw::Raw, id: u64, method: &str, params: Value) -> (Vec<Value>, Value) {
    raw.send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let mut before = Vec::new();
    loop {
        let frame = next(raw).await;
        if frame["id"] == id && frame.get("method").is_none() {
            return (before, frame);
        }
        before.push(frame);
    }
}

/// Whether the host accepted a `channels/incoming` message on `channel` (an answer the
/// server reads in wire order, after everything it sent before).
async fn incoming_accepted(raw: &mut raw::Raw, id: u64, channel: &str) -> bool {
    let m = json!({ "messages": [{ "channelId": channel, "messageId": "m", "content": "hi" }] });
    let (_, answer) = call(raw, id, "channels/incoming", m).await;
    answer["result"]["results"][0]["accepted"] == true
}

/// Sends `method` through the session from a task of its own, reads its frame, then drops
/// the caller's future (the task is aborted): the frame the host writes next is returned.
async fn give_up(
    s: &HostSession,
    raw: &mut raw::Raw,
    method: &str,
    params: Value,
) -> (Value, Value) {
    let s2 = s.clone();
    let m = method.to_owned();
    let task = tokio::spawn(async move { s2.request_raw(&m, params).await });
    let sent = raw.recv().await;
    assert_eq!(sent["method"], method, "{sent}");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    (sent, next(raw).await)
}

/// The host's next frame; a deadlock guard, never a synchronisation: the host writes it
/// without waiting for anything (a frame that never comes fails here, not by hanging).
async fn next(raw: &mut raw::Raw) -> Value {
    tokio::time::timeout(std::time::Duration::from_secs(30), raw.recv())
        .await
        .expect("the host wrote nothing more")
}

fn assert_cancels(cancel: &Value, sent: &Value) {
    assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
    assert!(cancel.get("id").is_none(), "a Notification: {cancel}");
    assert_eq!(
        cancel["params"]["requestId"], sent["id"],
        "{cancel} for {sent}"
    );
    // Given up, not expired (every timeout here is far off).
    assert_eq!(
        cancel["params"]["reason"], "the caller stopped waiting",
        "{cancel}"
    );
}

/// `channels/open` and `channels/close` go through the session's state machine (so their
/// confirmed answer changes the channels in wire order); a caller that dropped one left it
/// pending on the wire (no `notifications/cancelled`, where the bare `Peer` cancels a
/// dropped request), and its late answer still opened or closed the channel for nobody.
/// An open given up opens nothing; a close given up takes its channel out (fail closed).
#[tokio::test]
async fn s14_3_a_channel_open_or_close_given_up_is_cancelled_and_its_late_answer_changes_nothing() {
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, _streams) = connect(peer, incoming, &mut raw).await;
    let c1 = json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "bidirectional" }] });
    let (_, registered) = call(&mut raw, 500, "channels/register", c1).await;
    assert_eq!(
        registered["result"]["results"][0]["accepted"], true,
        "{registered}"
    );

    // An open given up: cancelled under its id; the server's late answer opens nothing.
    let (sent, cancel) = give_up(&s, &mut raw, "channels/open", json!({ "type": "chat" })).await;
    assert_cancels(&cancel, &sent);
    let opened =
        json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "bidirectional" } });
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": opened}))
        .await;
    assert!(
        !incoming_accepted(&mut raw, 501, "chat:1").await,
        "an unconfirmed open widened"
    );
    assert_eq!(s.channels(), ["c1"]);

    // A close given up: cancelled, and c1 taken out at once, fail closed (§14.5: the
    // server may have closed it; a removal only narrows); its late confirmation is no
    // answer to anything.
    let (sent, cancel) =
        give_up(&s, &mut raw, "channels/close", json!({ "channelId": "c1" })).await;
    assert_cancels(&cancel, &sent);
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": { "closed": true }}))
        .await;
    assert!(
        !incoming_accepted(&mut raw, 502, "c1").await,
        "a close given up left c1 usable"
    );
    assert!(s.channels().is_empty(), "{:?}", s.channels());

    // Confirmed ones still apply (the session is not stuck on the ones given up).
    let s2 = s.clone();
    let open = tokio::spawn(async move {
        s2.request_raw("channels/open", json!({ "type": "chat" }))
            .await
    });
    let sent = raw.recv().await;
    assert_eq!(sent["method"], "channels/open");
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": opened}))
        .await;
    open.await.unwrap().unwrap();
    assert!(incoming_accepted(&mut raw, 503, "chat:1").await);
}

/// Every other request the session sends for the application (`tools/call` here) is
/// cancelled when its caller gives up too, under the id it was written with.
#[tokio::test]
async fn a_plain_request_given_up_is_cancelled_on_the_wire() {
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, _streams) = connect(peer, incoming, &mut raw).await;
    let params = json!({ "name": "slow", "arguments": {} });
    let (sent, cancel) = give_up(&s, &mut raw, "tools/call", params).await;
    assert_cancels(&cancel, &sent);
}

/// A `context/beforeInference` hook (§10.1) whose fan-out (`host::before_inference`) was
/// dropped waited for its answer until `hook_timeout` (5 s by default), and was cancelled
/// only then, for nobody: it is cancelled at once, under the id it was written with.
#[tokio::test]
async fn s10_1_a_hook_whose_fan_out_was_dropped_is_cancelled_at_once() {
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, _streams) = connect(peer, incoming, &mut raw).await;
    let s2 = s.clone();
    let params = json!({ "inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                         "userMessage": "hi" });
    let task = tokio::spawn(async move { mcpl::host::before_inference(&[&s2], &params).await });
    let sent = next(&mut raw).await;
    assert_eq!(sent["method"], "context/beforeInference", "{sent}");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let cancel = next(&mut raw).await;
    assert_cancels(&cancel, &sent);
    // Its late answer is no answer to anything; the next hook goes out and is answered.
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": sent["id"], "result": { "contextInjections": [] }}),
    )
    .await;
    let s2 = s.clone();
    let params = json!({ "inferenceId": "j", "conversationId": "c", "turnIndex": 1,
                         "userMessage": "hi" });
    let hook = tokio::spawn(async move { mcpl::host::before_inference(&[&s2], &params).await });
    let sent = next(&mut raw).await;
    assert_eq!(sent["params"]["inferenceId"], "j", "{sent}");
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": sent["id"], "result": { "contextInjections": [] }}),
    )
    .await;
    let injections = hook.await.unwrap();
    assert!(injections.failures.is_empty(), "{injections:?}");
    assert_eq!(injections.consulted.len(), 1, "{injections:?}");
}

/// §6.7: a `set_policy` whose caller gives up after its Request went out is not cancelled,
/// unlike the requests above: its outcome is the session's (a widening activates on the
/// receipt; cancelling would leave what the server applied unknown), so the exchange runs to
/// its end and the receipt is read and applied whoever waits. Nothing is left on the wire
/// unread. (`refresh_manifest` likewise: its answer is reviewed, §17.5.)
#[tokio::test]
async fn s6_7_a_policy_change_given_up_runs_to_its_end_and_its_receipt_is_applied() {
    let (peer, incoming, mut raw) = raw::raw_peer(PeerConfig::default());
    let (s, _streams) = connect(peer, incoming, &mut raw).await;
    let c1 = json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "bidirectional" }] });
    let (_, registered) = call(&mut raw, 500, "channels/register", c1).await;
    assert_eq!(registered["result"]["results"][0]["accepted"], true);
    let full = config().policy;
    let narrow: Vec<String> = full
        .iter()
        .filter(|p| *p != "channels.incoming")
        .cloned()
        .collect();
    // A narrowing, waited for: c1's messages are refused after it.
    let s2 = s.clone();
    let narrowing = tokio::spawn(async move { s2.set_policy(narrow).await });
    let sent = next(&mut raw).await;
    assert_eq!(sent["method"], "featureSets/update", "{sent}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"accepted": true}}))
        .await;
    narrowing.await.unwrap().unwrap();
    assert!(!incoming_accepted(&mut raw, 501, "c1").await);
    // A widening whose caller gives up once its Request is out.
    let s2 = s.clone();
    let widening = tokio::spawn(async move { s2.set_policy(full).await });
    let sent = next(&mut raw).await;
    assert_eq!(sent["method"], "featureSets/update", "{sent}");
    widening.abort();
    assert!(widening.await.unwrap_err().is_cancelled());
    raw.send_json(json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"accepted": true}}))
        .await;
    let m = json!({ "messages": [{ "channelId": "c1", "messageId": "m", "content": "hi" }] });
    let (before, answer) = call(&mut raw, 502, "channels/incoming", m).await;
    assert!(before.is_empty(), "nothing cancelled: {before:?}");
    assert_eq!(
        answer["result"]["results"][0]["accepted"], true,
        "the receipt was applied: {answer}"
    );
    assert!(s
        .grant()
        .to_effective_capabilities()
        .contains(&"channels.incoming"));
}
