//! What the reference server (`mcpl serve`) logs at `warn`, the level `mcpl serve` shows by
//! default, when the host is the one failing: a host must not buy a `warn` line per message.
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};

use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use serde_json::json;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Counts the `warn` events it sees.
#[derive(Clone, Default)]
struct Warns(Arc<Mutex<usize>>);

impl<S: tracing::Subscriber> Layer<S> for Warns {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            *self.0.lock().unwrap() += 1;
        }
    }
}

/// A host that refuses the server's `channels/register` and `push/event` after each of its
/// policy Requests (§5.3: it may; the receipt was accepted): the reference server's
/// `on_ready` fails to register and to greet each time. That is the host's answer, not the
/// author's mistake: logged below `warn`, as a refused scheduled push already was. Before,
/// two `warn` lines per policy Request.
#[tokio::test(flavor = "current_thread")]
async fn a_host_refusing_the_ready_sends_writes_no_warning_per_policy_request() {
    const ROUNDS: usize = 5;
    let warns = Warns::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warns.clone()));
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let _server = tokio::spawn(mcpl::reference::serve(server_t));
    let (peer, mut incoming) = Peer::new(host_t, PeerConfig::default());
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
    )
    .await
    .unwrap();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    for _ in 0..ROUNDS {
        let receipt = peer
            .request_raw(
                "featureSets/update",
                Some(json!({"effectiveCapabilities":
                    ["pushEvents", "channels.register", "channels.publish", "channels.incoming"]})),
            )
            .await
            .unwrap();
        assert_eq!(receipt["accepted"], true, "{receipt}");
        for method in ["channels/register", "push/event"] {
            let Some(IncomingMessage::Request(r)) = incoming.recv().await else {
                panic!("expected {method}")
            };
            assert_eq!(r.method(), method);
            r.respond_error(mcpl::jsonrpc::ErrorObject::internal("refused by the host"))
                .await
                .unwrap();
        }
    }
    // Every answer above was read (a ping after them is answered after them).
    peer.request_raw("ping", None).await.unwrap();
    assert_eq!(*warns.0.lock().unwrap(), 0, "warn lines");
}

/// A host calling `ask` without granting `inferenceRequest` (or `model` without `modelInfo`)
/// is refused by the tool, an `isError` result naming why, not by the session's gate after
/// the tool tried to send: that refusal is the server author's mistake, a `warn` line the
/// host could trigger on every connection. Before, `ask` sent and was refused so.
#[tokio::test(flavor = "current_thread")]
async fn tools_of_an_unavailable_set_refuse_without_a_warning() {
    let warns = Warns::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warns.clone()));
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let _server = tokio::spawn(mcpl::reference::serve(server_t));
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    peer.request_raw(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}})),
    )
    .await
    .unwrap();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    peer.request_raw(
        "featureSets/update",
        Some(json!({"effectiveCapabilities": ["tools"]})),
    )
    .await
    .unwrap();
    for (tool, args) in [("ask", json!({"text": "hi"})), ("model", json!({}))] {
        let r = peer
            .request_raw("tools/call", Some(json!({"name": tool, "arguments": args})))
            .await
            .unwrap();
        assert_eq!(r["isError"], true, "{tool}: {r}");
    }
    assert_eq!(*warns.0.lock().unwrap(), 0, "warn lines");
}
