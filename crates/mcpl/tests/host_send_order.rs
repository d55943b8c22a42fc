//! §5.4, §6.7: after the host sends a narrowing policy Request, nothing needing what it
//! revoked may follow it on the wire. The application's plain sends
//! (`HostSession::notify_raw` / `request_raw`) were gated against the state the driver had
//! published and then written by the caller's task: on a multi-thread runtime a narrowing
//! the driver applied and wrote between the two let a `channels/publish` needing the revoked
//! `channels.publish` reach the wire after the reduction Request. They are now gated and put
//! on the wire in one step, while the published state is held (or, when the peer's queue
//! has no room, by the driver). The server side here reads
//! raw lines, so what it checks is the exact wire order; the race needs two worker threads to
//! show, and many rounds (each publishing as fast as it can while the policy narrows) make it
//! reliable.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostError, HostSession};
use mcpl::peer::PeerConfig;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer_with, Raw};

fn manifest() -> Value {
    json!({ "version": "0.5", "channels": { "register": true, "publish": true } })
}

/// A session granted `channels.register` and `channels.publish` over a raw server side,
/// with outbound channel `c1` registered.
async fn connected() -> (HostSession, Raw) {
    connected_with(PeerConfig::default(), 1 << 16).await
}

/// [`connected`] with this peer configuration, over a pipe of `pipe` bytes.
async fn connected_with(config: PeerConfig, pipe: usize) -> (HostSession, Raw) {
    let (peer, incoming, mut raw) = raw_peer_with(config, pipe);
    let cfg = HostConfig {
        policy: vec!["channels.register".into(), "channels.publish".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
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
    let (session, streams) = connect.await.unwrap().unwrap();
    // The streams are not read here; dropping them changes nothing the test looks at.
    drop(streams);
    let register = json!({"jsonrpc": "2.0", "id": "r1", "method": "channels/register",
        "params": {"channels": [{"id": "c1", "type": "chat", "direction": "outbound"}]}});
    raw.send_json(register).await;
    let answer = raw.recv().await;
    assert_eq!(answer["result"]["results"][0]["accepted"], true, "{answer}");
    (session, raw)
}

fn publish() -> Value {
    publish_text("hi")
}

fn publish_text(text: &str) -> Value {
    json!({ "channelId": "c1", "content": [{ "type": "text", "text": text }] })
}

/// One round: a task publishes until the host refuses it locally while another narrows the
/// policy to drop `channels.publish`; the server reads every line up to a closing ping and
/// fails on a `channels/publish` written after the reduction Request.
async fn one_round() {
    let (s, mut raw) = connected().await;
    let p = s.clone();
    let publisher = tokio::spawn(async move {
        let mut sent = 0u64;
        loop {
            match p.notify_raw("channels/publish", publish()).await {
                Ok(()) => sent += 1,
                Err(e) => return (sent, e),
            }
        }
    });
    // The narrowing starts once the publisher is writing.
    let first = raw.recv().await;
    assert_eq!(first["method"], "channels/publish", "{first}");
    let n = s.clone();
    let narrow = tokio::spawn(async move { n.set_policy(vec!["channels.register".into()]).await });
    loop {
        let line = raw.recv().await;
        match line["method"].as_str() {
            Some("featureSets/update") => {
                raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"],
                                     "result": {"accepted": true}}))
                    .await;
                break;
            }
            Some("channels/publish") => {}
            _ => panic!("unexpected line {line}"),
        }
    }
    narrow.await.unwrap().unwrap();
    let (_, refused) = publisher.await.unwrap();
    assert_eq!(
        refused,
        HostError::NotGranted(Capability::ChannelsPublish),
        "{refused}"
    );
    // Everything the application sent before the closing ping is on the wire before it.
    let s2 = s.clone();
    let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
    let line = raw.recv().await;
    assert_ne!(
        line["method"], "channels/publish",
        "a channels/publish reached the wire after the reduction Request (§6.7)"
    );
    assert_eq!(line["method"], "ping", "{line}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    ping.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_nothing_needing_a_revoked_capability_follows_the_reduction_request() {
    for _ in 0..100 {
        one_round().await;
    }
}

/// A send the peer's queue has no room for (one frame of room, a pipe of 256 bytes, a
/// server reading behind) is gated and queued by the driver instead: every notification and
/// the request after them reach the wire, in the order the application made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_the_full_queue_cannot_take_goes_out_through_the_driver_in_order() {
    let config = PeerConfig {
        outgoing_capacity: 1,
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    const SENT: usize = 60;
    let sender = tokio::spawn(async move {
        for i in 0..SENT {
            s.notify_raw("channels/publish", publish_text(&i.to_string()))
                .await
                .unwrap();
        }
        s.request_raw("ping", json!({})).await
    });
    for i in 0..SENT {
        let line = raw.recv().await;
        assert_eq!(line["method"], "channels/publish", "{line}");
        assert_eq!(
            line["params"]["content"][0]["text"],
            i.to_string(),
            "{line}"
        );
    }
    let ping = raw.recv().await;
    assert_eq!(ping["method"], "ping", "{ping}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": ping["id"], "result": {"ok": true}}))
        .await;
    assert_eq!(sender.await.unwrap().unwrap(), json!({"ok": true}));
}

/// Sends waiting for room in the peer's queue (issue #24: they wait, then go straight out,
/// not through the driver) are gated when they take their place, not when they began to
/// wait (§5.4, §6.7): a burst of concurrent publishes past the queue's room with a narrowing
/// policy made meanwhile puts no `channels/publish` after the reduction Request, and every
/// publish either reached the wire before it or was refused locally as not granted. Nothing
/// is lost or sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_waiting_for_room_are_gated_when_they_go_out_not_when_they_began_to_wait() {
    const BURST: usize = 200;
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                s.notify_raw("channels/publish", publish_text(&i.to_string()))
                    .await
            })
        })
        .collect();
    // The narrowing starts once the burst is on the wire (the rest wait for room).
    let first = raw.recv().await;
    assert_eq!(first["method"], "channels/publish", "{first}");
    let n = s.clone();
    let narrow = tokio::spawn(async move { n.set_policy(vec!["channels.register".into()]).await });
    let mut seen = std::collections::HashSet::new();
    seen.insert(first["params"]["content"][0]["text"].to_string());
    loop {
        let line = raw.recv().await;
        match line["method"].as_str() {
            Some("featureSets/update") => {
                raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"],
                                     "result": {"accepted": true}}))
                    .await;
                break;
            }
            Some("channels/publish") => {
                let text = line["params"]["content"][0]["text"].to_string();
                assert!(seen.insert(text), "a publish written twice: {line}");
            }
            _ => panic!("unexpected line {line}"),
        }
    }
    narrow.await.unwrap().unwrap();
    let mut refused = 0;
    for b in burst {
        match b.await.unwrap() {
            Ok(()) => {}
            Err(HostError::NotGranted(Capability::ChannelsPublish)) => refused += 1,
            Err(e) => panic!("unexpected refusal {e}"),
        }
    }
    let s2 = s.clone();
    let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
    let line = raw.recv().await;
    assert_eq!(
        line["method"], "ping",
        "nothing of the burst follows the reduction Request (§6.7): {line}"
    );
    raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
        .await;
    ping.await.unwrap().unwrap();
    assert_eq!(
        seen.len() + refused,
        BURST,
        "every publish reached the wire once or was refused ({} sent, {refused} refused)",
        seen.len()
    );
}

/// A request waiting for room in a queue the server never drains (it stopped reading) is
/// given up within the request timeout, as one waiting for its answer is (the writer may
/// have taken the queued frames into its own buffer, making room for it: then it went out
/// and is cancelled on the wire when given up); the session's other calls go on once the
/// server reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_room_the_server_never_makes_times_out() {
    let config = PeerConfig {
        outgoing_capacity: 1,
        request_timeout: Some(std::time::Duration::from_millis(300)),
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    // Fill the pipe and the queue (one frame of room): the first publish is written in
    // part, the pipe full, and its rest held by the writer; the second fills the queue.
    let big = "x".repeat(400);
    for _ in 0..2 {
        s.notify_raw("channels/publish", publish_text(&big))
            .await
            .unwrap();
    }
    let waiting = s.request_raw("tools/list", json!({})).await;
    match waiting {
        Err(HostError::Peer(mcpl::peer::PeerError::Timeout { method, .. })) => {
            assert_eq!(method, "tools/list")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The server reads again: the fillers arrive, the given-up request never does.
    let mut publishes = 0;
    filler_then_ping(&s, &mut raw, &mut publishes).await;
    assert_eq!(publishes, 2);
}

/// Reads publishes until a ping the session sends after them, answering it; the given-up
/// request may be on the wire only with its cancel (before or after the ping).
async fn filler_then_ping(s: &HostSession, raw: &mut Raw, publishes: &mut usize) {
    let s2 = s.clone();
    let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
    let mut given_up = None;
    loop {
        let line = raw.recv().await;
        match line["method"].as_str() {
            Some("channels/publish") => *publishes += 1,
            Some("tools/list") if given_up.is_none() => given_up = Some(line["id"].clone()),
            Some("notifications/cancelled") if given_up.is_some() => {
                assert_eq!(
                    line["params"]["requestId"],
                    given_up.take().unwrap(),
                    "{line}"
                );
            }
            Some("ping") => {
                raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
                    .await;
                break;
            }
            _ => panic!("unexpected line {line}"),
        }
    }
    ping.await.unwrap().unwrap();
    if let Some(id) = given_up {
        // Cancelled from a task of the peer's (`Shared::abandon`): it may follow the ping.
        let line = raw.recv().await;
        assert_eq!(line["method"], "notifications/cancelled", "{line}");
        assert_eq!(line["params"]["requestId"], id, "{line}");
    }
}

/// A server that reads slowly but keeps reading is not given up on within the requests'
/// deadline: requests waiting for room behind a burst go out in order as the writer takes
/// frames, each answered, none given up before its timeout (counted from its call, the
/// wait for room included: the test below). Before, the wait was given up only once the
/// writer took nothing for a whole timeout, and a request's own timeout started again once
/// it was sent.
#[tokio::test(start_paused = true)]
async fn requests_waiting_for_room_behind_a_slow_reader_are_not_given_up() {
    const CALLS: usize = 20;
    let config = PeerConfig {
        outgoing_capacity: 1,
        request_timeout: Some(std::time::Duration::from_millis(3000)),
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    let pad = "p".repeat(300);
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let s = s.clone();
            let params = json!({ "cursor": format!("{i}-{pad}") });
            tokio::spawn(async move { s.request_raw("tools/list", params).await })
        })
        .collect();
    for _ in 0..CALLS {
        // One frame every 50 ms: the whole burst takes a third of the request timeout.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let line = tokio::time::timeout(raw::GUARD, raw.recv())
            .await
            .expect("a request of the burst never reached the wire (given up while waiting)");
        assert_eq!(line["method"], "tools/list", "{line}");
        raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {"tools": []}}))
            .await;
    }
    for c in calls {
        let got = tokio::time::timeout(raw::GUARD, c).await.expect("ended");
        assert_eq!(got.unwrap().expect("answered"), json!({"tools": []}));
    }
}

/// A request that waited for room in the peer's queue is bounded by one deadline from its
/// call, its request timeout, the wait included: the server makes room most of the way
/// through it, reads the request and never answers, and the call fails at its timeout from
/// the call, not a whole timeout after it went out (as a bare `Peer::request` is bounded).
/// Before, its own timeout started once it was sent: the call took up to twice its timeout.
/// Virtual time (paused): the instants are the runtime's, not a measure of speed.
#[tokio::test(start_paused = true)]
async fn a_request_that_waited_for_room_has_one_deadline_from_its_call() {
    use tokio::time::{Duration, Instant};
    let timeout = Duration::from_millis(400);
    let config = PeerConfig {
        outgoing_capacity: 1,
        request_timeout: Some(timeout),
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    let big = "x".repeat(400);
    for _ in 0..2 {
        s.notify_raw("channels/publish", publish_text(&big))
            .await
            .unwrap();
    }
    let called = Instant::now();
    let s2 = s.clone();
    let call = tokio::spawn(async move { s2.request_raw("tools/list", json!({})).await });
    // The server reads again three quarters into the timeout: the request goes out then,
    // and is never answered.
    tokio::time::sleep(timeout * 3 / 4).await;
    loop {
        let line = raw.recv().await;
        if line["method"] == "tools/list" {
            break;
        }
        assert_eq!(line["method"], "channels/publish", "{line}");
    }
    let got = call.await.unwrap();
    let took = called.elapsed();
    match got {
        Err(HostError::Peer(mcpl::peer::PeerError::Timeout { method, after, .. })) => {
            assert_eq!(method, "tools/list");
            assert_eq!(after, timeout);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took <= timeout,
        "the call took {took:?}, past its timeout of {timeout:?} from the call"
    );
}

/// A request timeout past what an instant can hold (`Duration::MAX`) waits as no timeout
/// does, the wait for room included: the call that waited for room is answered, never a
/// panic adding it to the call's instant.
#[tokio::test(start_paused = true)]
async fn a_request_with_the_longest_timeout_that_waited_for_room_is_answered() {
    let config = PeerConfig {
        outgoing_capacity: 1,
        request_timeout: Some(std::time::Duration::MAX),
        ..PeerConfig::default()
    };
    let (s, mut raw) = connected_with(config, 256).await;
    let big = "x".repeat(400);
    for _ in 0..2 {
        s.notify_raw("channels/publish", publish_text(&big))
            .await
            .unwrap();
    }
    let s2 = s.clone();
    let call = tokio::spawn(async move { s2.request_raw("tools/list", json!({})).await });
    loop {
        let line = raw.recv().await;
        if line["method"] == "tools/list" {
            raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {"tools": []}}))
                .await;
            break;
        }
        assert_eq!(line["method"], "channels/publish", "{line}");
    }
    assert_eq!(call.await.unwrap().unwrap(), json!({"tools": []}));
}
