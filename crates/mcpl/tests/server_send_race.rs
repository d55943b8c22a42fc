//! A send the application made while the grant allowed it, refused because the host's
//! reduction (§6.7) was applied before the driver took it, is nobody's mistake: it is
//! reported as a notice, not as the author's mistake (`Session::author_mistakes`, a `warn`
//! line). A send the grant refused as the caller saw it still is the author's. Over a real
//! transport (JSON lines on a pipe); the clock is paused, so "every task has gone as far as
//! it can" is `tokio::time::sleep` returning, never a timing.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{DiagnosticKind, PushEvent, SendError, Server, ServerDiagnostic};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Bytes of each `big` answer: 60 of them back the connection up past where its driver
/// takes the application's calls (the outbox's bound), while it still reads.
const BIG: usize = 256 * 1024;

fn server() -> Server {
    Server::builder("race", "1.0.0")
        .feature_set("t", "Tools", &[Capability::Tools])
        .feature_set("e", "Events", &[Capability::PushEvents])
        .tool(
            "big",
            "A large answer",
            json!({"type": "object"}),
            |_s, _p| async { Ok(ToolsCallResult::text("x".repeat(BIG))) },
        )
        .build()
        .unwrap()
}

fn line(v: Value) -> Vec<u8> {
    format!("{v}\n").into_bytes()
}

fn settle() -> tokio::time::Sleep {
    tokio::time::sleep(std::time::Duration::from_millis(1))
}

#[tokio::test(start_paused = true)]
async fn a_send_refused_by_a_reduction_applied_after_the_call_is_a_notice() {
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server().start(mcpl::transport::Transport::lines(sr, sw, "host"));
    let mut diagnostics = session.diagnostics();
    let (host_read, mut host_write) = tokio::io::split(host_end);
    let mut lines = BufReader::new(host_read).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    let policy = json!({"jsonrpc": "2.0", "id": 1, "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools", "pushEvents"]}});
    for (id, frame) in [(0, init), (1, policy)] {
        host_write.write_all(&line(frame)).await.unwrap();
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(v["id"], id, "{v}");
        if id == 0 {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            host_write.write_all(&line(initialized)).await.unwrap();
        }
    }
    // The host calls `big` 60 times (15 MiB) and reads nothing: the driver takes no more calls.
    for id in 2..62 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "big", "arguments": {}}});
        host_write.write_all(&line(call)).await.unwrap();
    }
    settle().await;

    // The application pushes while the grant allows it; the call waits to be taken.
    assert!(session.granted(Capability::PushEvents) && session.feature_available("e"));
    let push = {
        let s = session.clone();
        tokio::spawn(async move { s.push_event(PushEvent::text("e", "hello")).await })
    };
    settle().await;
    assert!(
        !push.is_finished(),
        "the call is taken only once the host reads"
    );

    // The host disables the set (a Notification only narrows, §6.7); the driver still reads.
    let reduce = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["e"]}});
    host_write.write_all(&line(reduce)).await.unwrap();
    settle().await;
    assert!(!session.feature_available("e"), "the reduction is applied");

    // The host reads again: the call is taken, and refused by the policy now in force.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let refused = push.await.unwrap();
    assert!(
        matches!(&refused, Err(e) if !matches!(e, SendError::Peer(_))),
        "{refused:?}"
    );
    let said = loop {
        match diagnostics.recv().await.unwrap() {
            d if d.code().starts_with("send_refused") => break d,
            _ => {}
        }
    };
    assert_eq!(said.kind(), DiagnosticKind::Notice, "{said}");
    assert!(said.to_string().contains("push/event"), "{said}");
    assert_eq!(session.author_mistakes(), 0, "{said}");

    // Refused as the caller saw the policy: still the author's mistake.
    let again = session.push_event(PushEvent::text("e", "again")).await;
    assert!(again.is_err(), "{again:?}");
    let said = loop {
        match diagnostics.recv().await.unwrap() {
            d if d.code().starts_with("send_refused") => break d,
            _ => {}
        }
    };
    assert!(
        matches!(said, ServerDiagnostic::SendRefused { .. }),
        "{said:?}"
    );
    assert_eq!(said.kind(), DiagnosticKind::AuthorMistake);
    assert_eq!(session.author_mistakes(), 1);
    drop(host_write);
    drop(drain);
}

/// §14.3, §14.5: a `channels/incoming` the application made while its connection held the
/// channel, refused (`unknown_channel`) because the host's `channels/close` was answered and
/// taken before the call, is a race the caller could not win, as a reduction is (§6.7): a
/// notice, `send_refused_channels_changed`, not the author's mistake. A message for a
/// channel the caller's view already lacked still is the author's.
#[tokio::test(start_paused = true)]
async fn an_incoming_refused_by_a_close_taken_after_the_call_is_a_notice() {
    use mcpl::protocol::channels::{ChannelDescriptor, CloseResult, IncomingMessage};
    let server = Server::builder("race", "1.0.0")
        .feature_set("t", "Tools", &[Capability::Tools])
        .feature_set(
            "c",
            "Chat",
            &[
                Capability::ChannelsRegister,
                Capability::ChannelsIncoming,
                Capability::ChannelsLifecycle,
            ],
        )
        .tool(
            "big",
            "A large answer",
            json!({"type": "object"}),
            |_s, _p| async { Ok(ToolsCallResult::text("x".repeat(BIG))) },
        )
        // Pending at its first poll, so its answer reaches the driver as a command, behind
        // what waits to be taken (one that finishes at once is answered as it is read).
        .on_channels_close(|_s, _p| async {
            tokio::task::yield_now().await;
            Ok(CloseResult::new(true))
        })
        .build()
        .unwrap();
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = server.start(mcpl::transport::Transport::lines(sr, sw, "host"));
    let mut diagnostics = session.diagnostics();
    let (host_read, mut host_write) = tokio::io::split(host_end);
    let mut lines = BufReader::new(host_read).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    let policy = json!({"jsonrpc": "2.0", "id": 1, "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools", "channels.register",
            "channels.incoming", "channels.lifecycle"]}});
    for (id, frame) in [(0, init), (1, policy)] {
        host_write.write_all(&line(frame)).await.unwrap();
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(v["id"], id, "{v}");
        if id == 0 {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            host_write.write_all(&line(initialized)).await.unwrap();
        }
    }
    // The connection registers `lobby`; the host accepts it.
    let register = {
        let s = session.clone();
        tokio::spawn(async move {
            s.channels_register(vec![ChannelDescriptor::new("lobby", "chat")])
                .await
        })
    };
    let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(v["method"], "channels/register", "{v}");
    let accepted = json!({"jsonrpc": "2.0", "id": v["id"],
        "result": {"results": [{"id": "lobby", "accepted": true}]}});
    host_write.write_all(&line(accepted)).await.unwrap();
    register.await.unwrap().unwrap();
    assert_eq!(session.channels().len(), 1);

    // The host calls `big` 60 times (15 MiB) and reads nothing: the driver takes no more calls.
    for id in 2..62 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "big", "arguments": {}}});
        host_write.write_all(&line(call)).await.unwrap();
    }
    settle().await;
    // The host closes `lobby`; the handler's answer waits to be taken, so the connection
    // still holds it as the application sees it.
    let close = json!({"jsonrpc": "2.0", "id": 70, "method": "channels/close",
        "params": {"channelId": "lobby"}});
    host_write.write_all(&line(close)).await.unwrap();
    settle().await;
    assert_eq!(session.channels().len(), 1, "the close is not taken yet");

    // The application says something in `lobby`; the call waits behind the close's answer.
    let say = {
        let s = session.clone();
        tokio::spawn(async move {
            s.channels_incoming(vec![IncomingMessage::new("lobby", "m1", "hello")])
                .await
        })
    };
    settle().await;
    assert!(
        !say.is_finished(),
        "the call is taken only once the host reads"
    );

    // The host reads again: the close is taken, then the call, refused: `lobby` is gone.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let refused = say.await.unwrap();
    assert!(
        matches!(&refused, Err(SendError::UnknownChannel(c)) if c == "lobby"),
        "{refused:?}"
    );
    let said = loop {
        match diagnostics.recv().await.unwrap() {
            d if d.code().starts_with("send_refused") => break d,
            _ => {}
        }
    };
    assert_eq!(said.code(), "send_refused_channels_changed", "{said}");
    assert_eq!(said.kind(), DiagnosticKind::Notice, "{said}");
    assert!(said.to_string().contains("lobby"), "{said}");
    assert_eq!(session.author_mistakes(), 0, "{said}");

    // Refused as the caller saw the channels: still the author's mistake.
    assert!(session.channels().is_empty());
    let again = session
        .channels_incoming(vec![IncomingMessage::new("lobby", "m2", "again")])
        .await;
    assert!(
        matches!(again, Err(SendError::UnknownChannel(_))),
        "{again:?}"
    );
    let said = loop {
        match diagnostics.recv().await.unwrap() {
            d if d.code().starts_with("send_refused") => break d,
            _ => {}
        }
    };
    assert!(
        matches!(said, ServerDiagnostic::SendRefused { .. }),
        "{said:?}"
    );
    assert_eq!(said.kind(), DiagnosticKind::AuthorMistake);
    assert_eq!(session.author_mistakes(), 1);
    drop(host_write);
    drop(drain);
}

/// A tool that checks `e` and hands its `push/event` to a task (the reference server's
/// `schedule_event`), the task sending once `go` is notified: through a handle taken with
/// `Session::deferred` at the check, or through the handler's own.
fn spawning_server(deferred: bool, go: std::sync::Arc<tokio::sync::Notify>) -> Server {
    Server::builder("race", "1.0.0")
        .feature_set("t", "Tools", &[Capability::Tools])
        .feature_set("e", "Events", &[Capability::PushEvents])
        .tool(
            "later",
            "Pushes later",
            json!({"type": "object"}),
            move |session, _p| {
                let go = go.clone();
                async move {
                    if !session.feature_available("e") {
                        return Ok(ToolsCallResult::text("e is not available"));
                    }
                    let sender = if deferred {
                        session.deferred()
                    } else {
                        session
                    };
                    tokio::spawn(async move {
                        go.notified().await;
                        let _ = sender.push_event(PushEvent::text("e", "later")).await;
                    });
                    Ok(ToolsCallResult::text("scheduled"))
                }
            },
        )
        .build()
        .unwrap()
}

/// What the push `later` scheduled is reported as when the host disabled `e` (§6.7) after
/// the tool checked it and before its task sent.
async fn spawned_push_overtaken(deferred: bool) -> ServerDiagnostic {
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let (host_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let session = spawning_server(deferred, go.clone())
        .start(mcpl::transport::Transport::lines(sr, sw, "host"));
    let mut diagnostics = session.diagnostics();
    let (host_read, mut host_write) = tokio::io::split(host_end);
    let mut lines = BufReader::new(host_read).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    let policy = json!({"jsonrpc": "2.0", "id": 1, "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["tools", "pushEvents"]}});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "later", "arguments": {}}});
    for (id, frame) in [(0, init), (1, policy), (2, call)] {
        host_write.write_all(&line(frame)).await.unwrap();
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(v["id"], id, "{v}");
        if id == 0 {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            host_write.write_all(&line(initialized)).await.unwrap();
        }
        if id == 2 {
            assert_eq!(v["result"]["content"][0]["text"], "scheduled", "{v}");
        }
    }
    let reduce = json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"disabled": ["e"]}});
    host_write.write_all(&line(reduce)).await.unwrap();
    settle().await;
    assert!(!session.feature_available("e"), "the reduction is applied");
    go.notify_one();
    let said = loop {
        match diagnostics.recv().await.unwrap() {
            d if d.code().starts_with("send_refused") => break d,
            _ => {}
        }
    };
    assert!(said.to_string().contains("push/event"), "{said}");
    said
}

/// §6.7: a tool that checked the grant and spawned its send could not win a reduction
/// applied between its check and the spawned send; through `Session::deferred` taken at
/// the check, that refusal is a notice. Before, the handler had no way to say when its call
/// began, and the reference server's `schedule_event` met this as a `send_refused`, a
/// `warn` line in `mcpl serve`.
#[tokio::test(start_paused = true)]
async fn a_deferred_send_overtaken_by_a_reduction_is_a_notice() {
    let said = spawned_push_overtaken(true).await;
    assert_eq!(said.code(), "send_refused_policy_changed", "{said}");
    assert_eq!(said.kind(), DiagnosticKind::Notice, "{said}");
}

/// Through the handler's own handle, the send begins when it is made: the reduction was in
/// force before it, so the refusal stays the author's (the send should have checked again).
#[tokio::test(start_paused = true)]
async fn a_plain_send_after_a_reduction_stays_the_authors() {
    let said = spawned_push_overtaken(false).await;
    assert!(
        matches!(said, ServerDiagnostic::SendRefused { .. }),
        "{said:?}"
    );
    assert_eq!(said.kind(), DiagnosticKind::AuthorMistake);
}
