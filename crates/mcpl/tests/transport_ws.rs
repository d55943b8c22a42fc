//! WebSocket transport over real sockets: ws and wss (rustls/ring, self-signed certificate
//! generated per test), multi-message frames, binary/ping/close handling.
#![cfg(feature = "runtime")]

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mcpl::peer::{CloseReason, Diagnostic, Incoming, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::ws::{self, WsError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

#[path = "support/alloc_count.rs"]
mod alloc_count;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A self-signed certificate for `localhost`, and server and client configs built on it.
fn tls_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// Answers `echo` with its params, and `ask` by asking the other side `whoami` first.
fn serve(peer: Peer, mut incoming: Incoming) -> tokio::task::JoinHandle<Peer> {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                match r.method() {
                    "echo" => {
                        let p = r.request().params.clone().unwrap_or(Value::Null);
                        r.respond(p).await.unwrap();
                    }
                    "ask" => {
                        let who = peer.request_raw("whoami", None).await.unwrap();
                        r.respond(json!({"asked": who})).await.unwrap();
                    }
                    "whoami" => r.respond(json!("client")).await.unwrap(),
                    _ => {}
                }
            }
        }
        peer
    })
}

/// One exchange in each direction, with a request nested inside another.
async fn exchange(client: &Peer) {
    assert_eq!(
        client
            .request_raw("echo", Some(json!({"n": [1, 2.5, "three"]})))
            .await
            .unwrap(),
        json!({"n": [1, 2.5, "three"]})
    );
    assert_eq!(
        client.request_raw("ask", None).await.unwrap(),
        json!({"asked": "client"})
    );
    let missing = client.request_raw("nope", None).await.unwrap_err();
    assert_eq!(missing.remote().map(|e| e.code), Some(-32601));
}

#[tokio::test]
async fn ws_exchange_in_both_directions() {
    let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (t, _) = listener.accept().await.unwrap();
        let (peer, incoming) = Peer::new(t, PeerConfig::default());
        let peer = serve(peer, incoming).await.unwrap();
        peer.close_reason()
    });
    let t = ws::connect(&format!("ws://127.0.0.1:{port}/mcpl"), None)
        .await
        .unwrap();
    let (client, incoming) = Peer::new(t, PeerConfig::default());
    let _client_side = serve(client.clone(), incoming);
    exchange(&client).await;
    client.close();
    // The close frame ends the server's stream like EOF.
    assert_eq!(server.await.unwrap(), Some(CloseReason::Eof));
}

#[tokio::test]
async fn wss_exchange_with_a_self_signed_certificate() {
    let (server_tls, client_tls) = tls_configs();
    let listener = ws::Listener::bind("127.0.0.1:0", Some(server_tls))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        // The first connection (untrusting client) fails its handshake; serve the next.
        loop {
            match listener.accept().await {
                Ok((t, _)) => {
                    let (peer, incoming) = Peer::new(t, PeerConfig::default());
                    serve(peer, incoming).await.unwrap();
                    return;
                }
                Err(_) => continue,
            }
        }
    });
    let url = format!("wss://localhost:{port}/");

    // Without a client config: refused before any connection is made.
    assert!(matches!(
        ws::connect(&url, None).await,
        Err(WsError::TlsConfigRequired)
    ));
    // With a config that does not trust the certificate: the handshake fails.
    let empty = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    assert!(ws::connect(&url, Some(Arc::new(empty))).await.is_err());

    let t = ws::connect(&url, Some(client_tls)).await.unwrap();
    let (client, incoming) = Peer::new(t, PeerConfig::default());
    let _client_side = serve(client.clone(), incoming);
    exchange(&client).await;
}

#[tokio::test]
async fn non_websocket_urls_are_refused() {
    for url in ["mcpl://example.com/x", "http://example.com/", "not a url"] {
        assert!(
            matches!(
                ws::connect(url, None).await,
                Err(WsError::InvalidUrl { .. })
            ),
            "{url}"
        );
    }
}

/// The next text frame as JSON, skipping pongs (whose payload must be the test's `hb`).
async fn next_text<S>(raw: &mut tokio_tungstenite::WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match raw.next().await.unwrap().unwrap() {
            WsMessage::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            WsMessage::Pong(p) => assert_eq!(&p[..], b"hb"),
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_frame_with_several_messages_binary_frames_and_pings() {
    let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (t, _) = listener.accept().await.unwrap();
        let config = PeerConfig {
            max_message_size: 200,
            ..PeerConfig::default()
        };
        let (peer, incoming) = Peer::new(t, config);
        let diags = peer.diagnostics();
        (serve(peer, incoming), diags)
    });
    let (mut raw, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}"))
        .await
        .unwrap();
    let (server_task, mut diags) = server.await.unwrap();

    // One text frame, three messages (one after \r\n, one notification, one oversized).
    let frame = format!(
        "{}\r\n{}\n{}\n{}",
        json!({"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}),
        json!({"jsonrpc":"2.0","method":"note"}),
        json!({"jsonrpc":"2.0","id":2,"method":"echo","params":["x".repeat(300)]}),
        json!({"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}),
    );
    raw.send(WsMessage::text(frame)).await.unwrap();
    // The reader answers the oversized one itself, the handler the others: in any order.
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next_text(&mut raw).await);
    }
    got.sort_by_key(|v| v["id"].as_i64());
    let [a, over, b] = <[Value; 3]>::try_from(got).unwrap();
    assert_eq!(a, json!({"jsonrpc":"2.0","id":1,"result":[1]}));
    // The oversized one's id is in its first bytes: it is answered -32600, saying why.
    assert_eq!(over["id"], json!(2), "{over}");
    assert_eq!(over["error"]["code"], json!(-32600), "{over}");
    assert_eq!(
        over["error"]["data"]["reason"],
        json!("max_message_size"),
        "{over}"
    );
    assert_eq!(b, json!({"jsonrpc":"2.0","id":3,"result":[3]}));
    match diags.recv().await {
        Some(Diagnostic::Oversized { limit: 200, bytes }) => assert!(bytes > 300),
        other => panic!("expected an oversize diagnostic, got {other:?}"),
    }

    // A binary frame is discarded with a diagnostic; a ping is answered; the link survives.
    raw.send(WsMessage::binary(vec![1u8, 2, 3])).await.unwrap();
    raw.send(WsMessage::Ping(b"hb".to_vec().into()))
        .await
        .unwrap();
    raw.send(WsMessage::text(
        json!({"jsonrpc":"2.0","id":4,"method":"echo","params":[4]}).to_string(),
    ))
    .await
    .unwrap();
    let mut saw_pong = false;
    loop {
        match raw.next().await.unwrap().unwrap() {
            WsMessage::Pong(p) => {
                assert_eq!(&p[..], b"hb");
                saw_pong = true;
            }
            WsMessage::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                assert_eq!(v, json!({"jsonrpc":"2.0","id":4,"result":[4]}));
                break;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    assert!(
        saw_pong,
        "the ping was not answered before the next response"
    );
    assert!(matches!(
        diags.recv().await,
        Some(Diagnostic::NotText { .. })
    ));

    // A close frame from the client ends the server's connection.
    raw.close(None).await.unwrap();
    let peer = server_task.await.unwrap();
    assert_eq!(peer.closed().await, CloseReason::Eof);
}

/// A text frame of many messages is handed out one message at a time, in order: taking the
/// first costs a handful of allocations, not one per message of the frame (an allocation
/// count on this thread, not a timing).
#[tokio::test]
async fn a_frame_with_many_messages_is_split_lazily_in_order() {
    use mcpl::transport::Frame;

    let (server_io, client_io) = tokio::io::duplex(4 * 1024 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let mut transport = server.unwrap();
    let (mut raw, _) = client.unwrap();
    transport.reader.set_max_message_size(100);

    const N: usize = 20_000;
    let mut frame = String::new();
    for i in 0..N {
        frame.push_str(&format!("{{\"n\":{i}}}\r\n\n"));
    }
    frame.push_str(&"x".repeat(150));
    frame.push_str("\n   \n{\"last\":true}");
    raw.send(WsMessage::text(frame)).await.unwrap();
    raw.send(WsMessage::text("{\"next\":1}")).await.unwrap();

    let before = alloc_count::allocs();
    let first = transport.reader.next_frame().await.unwrap();
    let spent = alloc_count::allocs() - before;
    assert_eq!(first, Some(Frame::Text("{\"n\":0}".into())));
    assert!(
        spent < 1000,
        "{spent} allocations to take the first of {N} messages"
    );

    for i in 1..N {
        let f = transport.reader.next_frame().await.unwrap();
        assert_eq!(f, Some(Frame::Text(format!("{{\"n\":{i}}}"))));
    }
    assert_eq!(
        transport.reader.next_frame().await.unwrap(),
        Some(Frame::Oversized {
            bytes: 150,
            limit: 100
        })
    );
    assert_eq!(
        transport.reader.next_frame().await.unwrap(),
        Some(Frame::Text("{\"last\":true}".into()))
    );
    assert_eq!(
        transport.reader.next_frame().await.unwrap(),
        Some(Frame::Text("{\"next\":1}".into()))
    );
}

/// A message spanning lines in a frame, long enough that finding where it ends reads more
/// than [`mcpl::transport`]'s 64 KiB step, is read off the worker: the reader waits for it,
/// so the other tasks of its runtime run meanwhile (here a one-thread runtime, and a task
/// that only notes it ran). Before, up to the whole frame (`ws::WS_HARD_LIMIT`, 64 MiB) was
/// parsed in one poll of the reader, and every other connection on its worker waited.
#[tokio::test]
async fn a_long_message_spanning_lines_is_read_without_holding_the_worker() {
    use mcpl::transport::Frame;
    use std::sync::atomic::{AtomicBool, Ordering};

    let (server_io, client_io) = tokio::io::duplex(4 * 1024 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let mut transport = server.unwrap();
    let (mut raw, _) = client.unwrap();
    transport.reader.set_max_message_size(8 * 1024 * 1024);
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\n\"method\":\"n\",\n\"params\":[{}0]}}",
        "1,".repeat(600_000)
    );
    raw.send(WsMessage::text(format!(
        "{{\"first\":1}}\n{big}\n{{\"last\":1}}"
    )))
    .await
    .unwrap();
    let first = transport.reader.next_frame().await.unwrap();
    assert_eq!(first, Some(Frame::Text("{\"first\":1}".into())));

    let ran = Arc::new(AtomicBool::new(false));
    let noted = ran.clone();
    tokio::spawn(async move { noted.store(true, Ordering::SeqCst) });
    let second = transport.reader.next_frame().await.unwrap();
    assert!(
        ran.load(Ordering::SeqCst),
        "the reader held the worker while it read the long message"
    );
    assert_eq!(second, Some(Frame::Text(big)));
    assert_eq!(
        transport.reader.next_frame().await.unwrap(),
        Some(Frame::Text("{\"last\":1}".into()))
    );
}

/// One JSON-RPC message per text frame: a message whose JSON spans lines (pretty-printed,
/// its newlines whitespace, RFC 8259 §2) is one message, not one per line. Before, the frame
/// was split at every newline: the request became a `-32700` (`{` alone) and junk lines, and
/// was never answered. Several messages in one frame, each balanced, are still split at the
/// newlines between them, pretty-printed or not.
#[tokio::test]
async fn a_pretty_printed_message_in_one_text_frame_is_one_message() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), PeerConfig::default());
    let mut diags = peer.diagnostics();
    let _served = serve(peer, incoming);
    let (mut raw, _) = client.unwrap();

    let request = |id: u64| {
        serde_json::to_string_pretty(&json!({
            "jsonrpc": "2.0", "id": id, "method": "echo",
            "params": {"text": "line one\nline two", "list": [1, {"deep": ["{", "}"]}]}
        }))
        .unwrap()
    };
    let echoed = json!({"text": "line one\nline two", "list": [1, {"deep": ["{", "}"]}]});
    raw.send(WsMessage::text(request(1))).await.unwrap();
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": echoed})
    );
    // Two pretty-printed messages and a compact one in one frame, `\r\n` between them.
    let frame = format!(
        "{}\r\n{}\n{}",
        request(2),
        request(3),
        json!({"jsonrpc": "2.0", "id": 4, "method": "echo", "params": [4]})
    );
    raw.send(WsMessage::text(frame)).await.unwrap();
    for id in [2, 3] {
        assert_eq!(
            next_text(&mut raw).await,
            json!({"jsonrpc": "2.0", "id": id, "result": echoed})
        );
    }
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 4, "result": [4]})
    );
    assert!(
        diags.try_recv().is_none(),
        "nothing was discarded or refused"
    );
}

/// A frame's line of whitespace JSON does not have (a no-break space; RFC 8259 §2) is junk,
/// reported as the line reader reports it (`jsonrpc::message_lead`); a line of JSON
/// whitespace is blank. Before, the WebSocket reader skipped both (`str::trim`).
#[tokio::test]
async fn a_frame_line_of_unicode_whitespace_is_junk_not_blank() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), PeerConfig::default());
    let mut diags = peer.diagnostics();
    let _served = serve(peer, incoming);
    let (mut raw, _) = client.unwrap();
    let frame = format!(
        "\u{a0}\n \t\n{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [1]})
    );
    raw.send(WsMessage::text(frame)).await.unwrap();
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": [1]})
    );
    assert_eq!(
        diags.try_recv(),
        Some(Diagnostic::JunkLine {
            excerpt: "\u{a0}".into()
        })
    );
    assert_eq!(diags.try_recv(), None);
}

/// A frame whose lines do not balance as JSON (a junk line with an open bracket) is still
/// read line by line, as before: the junk costs its own line, not the messages after it.
#[tokio::test]
async fn an_unbalanced_line_in_a_frame_costs_only_itself() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), PeerConfig::default());
    let _served = serve(peer, incoming);
    let (mut raw, _) = client.unwrap();
    let frame = format!(
        "{{ oops [\n{}\n\"half\n{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [1]}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": [2]})
    );
    raw.send(WsMessage::text(frame)).await.unwrap();
    // The `{ oops [` line is answered -32700 (it looks like JSON), the others are served.
    let first = next_text(&mut raw).await;
    assert_eq!(first["error"]["code"], json!(-32700), "{first}");
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": [1]})
    );
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 2, "result": [2]})
    );
}

/// Junk lines that balance each other around messages (a lone `{` line, messages, a lone
/// `}` line) do not make the frame one message: each line or pretty-printed message that is
/// JSON is handled, and each junk line costs only itself (`-32700` when it looks like JSON, a
/// `JunkLine` diagnostic otherwise). Before, the frame's brackets balanced, so it was split
/// only outside brackets: the whole frame was one part, one `-32700`, and the requests in it
/// were never answered.
#[tokio::test]
async fn junk_lines_that_balance_each_other_do_not_swallow_the_messages_between_them() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), PeerConfig::default());
    let mut diags = peer.diagnostics();
    let _served = serve(peer, incoming);
    let (mut raw, _) = client.unwrap();
    let echo = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "echo", "params": [id]});
    let pretty = serde_json::to_string_pretty(&echo(3)).unwrap();
    // The reader's own answers and the application's may interleave: each frame's answers
    // are compared as a set, its diagnostics (the reader's, in order) as a list.
    let frames = [
        (
            format!("{{\n{}\n{}\n}}", echo(1), echo(2)),
            vec![1, 2],
            vec!["parse_error", "}"],
        ),
        (
            format!("}}\n{pretty}\n["),
            vec![3],
            vec!["}", "parse_error"],
        ),
    ];
    for (frame, ids, expected) in frames {
        raw.send(WsMessage::text(frame)).await.unwrap();
        let mut answered = Vec::new();
        let mut refused = 0;
        for _ in 0..ids.len() + 1 {
            // A deadlock guard, never a synchronisation: a swallowed request is never answered.
            let v = tokio::time::timeout(Duration::from_secs(10), next_text(&mut raw))
                .await
                .expect("a message of the frame was not answered");
            if v["error"]["code"] == json!(-32700) {
                refused += 1;
            } else {
                assert_eq!(v["result"], json!([v["id"]]), "{v}");
                answered.push(v["id"].as_u64().unwrap());
            }
        }
        answered.sort_unstable();
        assert_eq!((answered, refused), (ids, 1));
        let mut seen = Vec::new();
        for _ in 0..expected.len() {
            seen.push(match diags.recv().await {
                Some(Diagnostic::ParseError { .. }) => "parse_error".to_owned(),
                Some(Diagnostic::JunkLine { excerpt }) => excerpt,
                other => panic!("unexpected {other:?}"),
            });
        }
        assert_eq!(seen, expected);
    }
}

/// A request sent in a binary frame is not read (JSON-RPC over WebSocket is text), but it is
/// answered `-32700` with a null id saying so, as a request that does not parse is, rather
/// than left to its sender's timeout; a binary frame that is not JSON-like is reported only.
#[tokio::test]
async fn a_request_in_a_binary_frame_is_answered_32700() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let (peer, incoming) = Peer::new(server.unwrap(), PeerConfig::default());
    let mut diags = peer.diagnostics();
    let _served = serve(peer, incoming);
    let (mut raw, _) = client.unwrap();
    raw.send(WsMessage::binary(vec![0u8, 1, 2])).await.unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [1]});
    raw.send(WsMessage::binary(request.to_string().into_bytes()))
        .await
        .unwrap();
    let refused = tokio::time::timeout(std::time::Duration::from_secs(30), next_text(&mut raw))
        .await
        .expect("the request in a binary frame was not answered (deadlock guard)");
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(refused["error"]["code"], json!(-32700), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("text frames"),
        "{refused}"
    );
    raw.send(WsMessage::text(request.to_string()))
        .await
        .unwrap();
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": [1]})
    );
    for _ in 0..2 {
        assert!(matches!(
            diags.recv().await,
            Some(Diagnostic::NotText { .. })
        ));
    }
}

/// An answer to a request of ours sent in a binary frame is not read (JSON-RPC over
/// WebSocket is text), but it fails that request at once, naming why, and is not answered
/// (JSON-RPC 2.0 §5: a response is never answered), wherever its id is; one past 64 KiB is
/// read for it a step at a time. Before, it was answered `-32700` and our request waited
/// for its deadline, for ever without one.
#[tokio::test]
async fn an_answer_of_ours_in_a_binary_frame_fails_its_request_at_once() {
    use mcpl::peer::{PeerError, RequestOptions, RequestTimeout};

    let (server_io, client_io) = tokio::io::duplex(1024 * 1024);
    let (server, client) = tokio::join!(
        ws::accept(server_io),
        tokio_tungstenite::client_async("ws://localhost/", client_io)
    );
    let config = PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    };
    let (peer, incoming) = Peer::new(server.unwrap(), config);
    let _served = serve(peer.clone(), incoming);
    let (mut raw, _) = client.unwrap();
    let pad = "x".repeat(100 * 1024);
    for form in [
        r#"{"jsonrpc":"2.0","id":{id},"result":1}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","result":"{pad}","id":{{id}}}}"#),
    ] {
        let p = peer.clone();
        let never = RequestOptions::new().wait(RequestTimeout::Never);
        let call = tokio::spawn(async move { p.request_raw_with("x", None, never).await });
        let request = next_text(&mut raw).await;
        let answer = form.replace("{id}", &request["id"].to_string());
        raw.send(WsMessage::binary(answer.into_bytes()))
            .await
            .unwrap();
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), call)
            .await
            .expect("the request still waits (deadlock guard)")
            .unwrap();
        assert!(
            matches!(&outcome, Err(PeerError::InvalidResponse(why)) if why.contains("binary")),
            "{outcome:?}"
        );
    }
    // Nothing was answered: the next thing the peer writes answers this.
    raw.send(WsMessage::text(
        json!({"jsonrpc": "2.0", "id": "e", "method": "echo", "params": [1]}).to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(
        next_text(&mut raw).await,
        json!({"jsonrpc": "2.0", "id": "e", "result": [1]})
    );
    assert_eq!(peer.pending_requests(), 0);
}
