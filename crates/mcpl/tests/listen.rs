//! The accept loops of `transport::listen` and `server::listen` (issue #20): a transport
//! handshake that never completes, and a connection that never sends MCP `initialize`, are
//! each closed by their timeout, while other connections are served. Loopback only; waits
//! are hang guards, never asserted timings.
#![cfg(feature = "runtime")]

use std::sync::Arc;
use std::time::Duration;

use mcpl::server::listen::ServeConfig;
use mcpl::transport::listen::{self, ListenConfig};
use mcpl::transport::{tcp, ws};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const GUARD: Duration = Duration::from_secs(20);

/// Reads until EOF, returning what was read (the connection was closed by the server).
async fn read_to_eof(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut got))
        .await
        .expect("the server never closed the connection (hang guard)")
        .expect("read");
    got
}

#[tokio::test]
async fn a_stalled_websocket_upgrade_is_dropped_at_the_handshake_timeout() {
    let listener = Arc::new(ws::Listener::bind("127.0.0.1:0", None).await.unwrap());
    let addr = listener.local_addr().unwrap();
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    let config = ListenConfig {
        handshake_timeout: Duration::from_millis(100),
        report: Some(Arc::new(|_: &str| {})),
        ..ListenConfig::default()
    };
    tokio::spawn(listen::serve(listener, config, move |t, _| {
        let served_tx = served_tx.clone();
        async move {
            let _ = served_tx.send(t.description);
        }
    }));
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A client that completes its upgrade meanwhile is served.
    let _client = ws::connect(&format!("ws://{addr}"), None).await.unwrap();
    let first = tokio::time::timeout(GUARD, served.recv()).await.unwrap();
    assert!(first.is_some_and(|d| d.starts_with("websocket from")));
    // The stalled one is closed without an answer, and never handed out.
    assert_eq!(read_to_eof(&mut stalled).await, b"");
    assert!(served.try_recv().is_err());
}

/// A self-signed certificate for `localhost`: the `wss` listener's and the trusting client's
/// rustls configurations.
fn tls_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// Issue #20, "run every handshake (TLS, …) off the accept loop under a timeout": a client
/// that opens a `wss` connection and never finishes its TLS handshake (a few bytes of a
/// ClientHello) blocks no other client, and is closed at the handshake timeout without being
/// handed out.
#[tokio::test]
async fn a_stalled_tls_handshake_is_dropped_at_the_handshake_timeout() {
    let (server_tls, client_tls) = tls_configs();
    let listener = Arc::new(
        ws::Listener::bind("127.0.0.1:0", Some(server_tls))
            .await
            .unwrap(),
    );
    let addr = listener.local_addr().unwrap();
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    let config = ListenConfig {
        handshake_timeout: Duration::from_millis(200),
        report: Some(Arc::new(|_: &str| {})),
        ..ListenConfig::default()
    };
    tokio::spawn(listen::serve(listener, config, move |t, _| {
        let served_tx = served_tx.clone();
        async move {
            let _ = served_tx.send(t.description);
        }
    }));
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    // The start of a TLS record header (handshake, TLS 1.0 record version): never finished.
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    // A client that completes TLS and its upgrade meanwhile is served.
    let url = format!("wss://localhost:{}/", addr.port());
    let _client = tokio::time::timeout(GUARD, ws::connect(&url, Some(client_tls)))
        .await
        .expect("the wss client was blocked (hang guard)")
        .unwrap();
    let first = tokio::time::timeout(GUARD, served.recv()).await.unwrap();
    assert!(first.is_some_and(|d| d.starts_with("websocket from")));
    // The stalled one is closed without an answer, and never handed out.
    assert_eq!(read_to_eof(&mut stalled).await, b"");
    assert!(served.try_recv().is_err());
}

fn request(id: u64, method: &str, params: Value) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    )
}

#[tokio::test]
async fn a_connection_that_never_initializes_is_closed_and_one_that_does_is_served() {
    let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
    let addr = listener.local_addr().unwrap();
    let config = ServeConfig {
        initialize_timeout: Duration::from_millis(100),
        ..ServeConfig::default()
    };
    tokio::spawn(mcpl::reference::serve_on(listener, config));

    // Pings are answered before initialize, but do not keep the connection open.
    let mut lingering = TcpStream::connect(addr).await.unwrap();
    lingering
        .write_all(request(1, "ping", json!({})).as_bytes())
        .await
        .unwrap();
    let got = read_to_eof(&mut lingering).await;
    let text = String::from_utf8(got).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("\"result\":{}"), "{text}");

    // A connection that initializes is answered and can go on past the deadline's start.
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "listen", "version": "0"}});
    w.write_all(request(1, "initialize", init).as_bytes())
        .await
        .unwrap();
    let answer = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 1);
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
}

/// At most `ListenConfig::max_connections` connections are served at once: each holds its
/// place until it ends, and one past the limit waits in the kernel's backlog (the loop says
/// so, once) until a place frees, then is served. Before, nothing but descriptors bounded
/// the idle connections a server held.
#[tokio::test]
async fn connections_past_the_limit_wait_until_one_ends() {
    let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
    let addr = listener.local_addr().unwrap();
    let (report_tx, mut reports) = tokio::sync::mpsc::unbounded_channel::<String>();
    let config = ListenConfig {
        max_connections: 2,
        report: Some(Arc::new(move |l: &str| {
            let _ = report_tx.send(l.to_owned());
        })),
        ..ListenConfig::default()
    };
    // Each served connection lasts until the test ends it.
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(listen::serve(listener, config, move |_t, peer| {
        let served_tx = served_tx.clone();
        async move {
            let (end_tx, end) = tokio::sync::oneshot::channel::<()>();
            let _ = served_tx.send((peer, end_tx));
            let _ = end.await;
        }
    }));
    let mut clients = Vec::new();
    let mut open = Vec::new();
    for _ in 0..2 {
        clients.push(TcpStream::connect(addr).await.unwrap());
        let s = tokio::time::timeout(GUARD, served.recv())
            .await
            .unwrap()
            .unwrap();
        open.push(s);
    }
    // At the limit: said once, and the third dial is not served.
    let said = tokio::time::timeout(GUARD, reports.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(said.contains("2 connections are open, the limit"), "{said}");
    let third = TcpStream::connect(addr).await.unwrap();
    let third_addr = third.local_addr().unwrap();
    clients.push(third);
    assert!(
        served.try_recv().is_err(),
        "nothing is served past the limit"
    );
    // One ends: the third is served.
    let (_, end) = open.remove(0);
    let _ = end.send(());
    let (peer, _end) = tokio::time::timeout(GUARD, served.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(peer, third_addr);
}

/// A client socket to `addr` from source address `from` (any loopback address on Linux).
async fn dial_from(from: &str, addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// At most `ListenConfig::max_connections_per_address` connections from one peer address
/// are served at once: one more from it is closed at once, unserved, and the loop says so,
/// while another address is still served; once one of the first ends, the address is
/// served again. Before, one address could take every place (`max_connections`).
#[tokio::test]
async fn one_address_holds_at_most_its_own_limit_of_connections() {
    let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
    let addr = listener.local_addr().unwrap();
    let (report_tx, mut reports) = tokio::sync::mpsc::unbounded_channel::<String>();
    let config = ListenConfig {
        max_connections_per_address: 2,
        report: Some(Arc::new(move |l: &str| {
            let _ = report_tx.send(l.to_owned());
        })),
        ..ListenConfig::default()
    };
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(listen::serve(listener, config, move |t, peer| {
        let served_tx = served_tx.clone();
        async move {
            // Held until the test ends the connection (the client then reads its end).
            let _t = t;
            let (end_tx, end) = tokio::sync::oneshot::channel::<()>();
            let _ = served_tx.send((peer, end_tx));
            let _ = end.await;
        }
    }));
    async fn next_served<T>(served: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
        tokio::time::timeout(GUARD, served.recv())
            .await
            .expect("a connection was not served (hang guard)")
            .unwrap()
    }
    let mut clients = Vec::new();
    let mut open = Vec::new();
    for _ in 0..2 {
        clients.push(dial_from("127.0.0.1", addr).await);
        open.push(next_served(&mut served).await);
    }
    // A third from the same address is closed unserved, and said.
    let mut third = dial_from("127.0.0.1", addr).await;
    assert_eq!(read_to_eof(&mut third).await, b"");
    let said = tokio::time::timeout(GUARD, reports.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        said.contains("2 connections from 127.0.0.1 are open")
            && said.contains("max_connections_per_address"),
        "{said}"
    );
    // Another address is served meanwhile.
    clients.push(dial_from("127.0.0.2", addr).await);
    let (peer, _end2) = next_served(&mut served).await;
    assert_eq!(peer.ip().to_string(), "127.0.0.2");
    // One of the first ends: the address is served again.
    let (_, end) = open.remove(0);
    let _ = end.send(());
    assert_eq!(read_to_eof(&mut clients[0]).await, b"");
    let fourth = dial_from("127.0.0.1", addr).await;
    let fourth_addr = fourth.local_addr().unwrap();
    clients.push(fourth);
    let (peer, _end4) = next_served(&mut served).await;
    assert_eq!(peer, fourth_addr);
}

/// Slowloris from one address: it opens as many connections as the loop runs handshakes at
/// once (`ListenConfig::max_handshakes`, 256) and stalls each upgrade. Before, those took
/// every handshake slot, so the loop accepted nobody else until they timed out, and an
/// attacker renewing them held the server for good (one address may hold 1,000
/// connections). Now one address runs at most `max_handshakes_per_address` handshakes at
/// once; its others wait for its turn holding no slot, and a client from another address is
/// served while the stalled ones still wait. Defaults throughout except a handshake timeout
/// longer than the test.
#[tokio::test]
async fn one_address_stalling_upgrades_cannot_take_every_handshake_slot() {
    let listener = Arc::new(ws::Listener::bind("127.0.0.1:0", None).await.unwrap());
    let addr = listener.local_addr().unwrap();
    let (report_tx, mut reports) = tokio::sync::mpsc::unbounded_channel::<String>();
    let config = ListenConfig {
        handshake_timeout: Duration::from_secs(3600),
        report: Some(Arc::new(move |l: &str| {
            let _ = report_tx.send(l.to_owned());
        })),
        ..ListenConfig::default()
    };
    let slots = config.max_handshakes;
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(listen::serve(listener, config, move |t, peer| {
        let served_tx = served_tx.clone();
        async move {
            let _ = served_tx.send((peer, t));
        }
    }));
    let mut stalled = Vec::new();
    for _ in 0..slots {
        let mut s = dial_from("127.0.0.1", addr).await;
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    let stream = dial_from("127.0.0.2", addr).await;
    let client = tokio::spawn(tokio_tungstenite::client_async(
        format!("ws://{addr}/"),
        stream,
    ));
    let (peer, _transport) = tokio::time::timeout(GUARD, served.recv())
        .await
        .expect("a client from another address was not served while one address stalled")
        .unwrap();
    assert_eq!(peer.ip().to_string(), "127.0.0.2");
    let _client = tokio::time::timeout(GUARD, client)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The stalled ones wait: none was refused or closed.
    assert!(reports.try_recv().is_err());
    for s in &mut stalled {
        let mut byte = [0u8; 1];
        assert!(matches!(
            s.try_read(&mut byte),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        ));
    }
}

/// `ServeConfig::initialize_timeout` under 1 ms closed every connection before its
/// `initialize` could be read, and `serve` ran on, accepting connections it could never
/// serve. It is refused before anything is accepted: `serve`, `serve_each` and
/// `reference::serve_on` return `ServeConfigError` naming the field (the hang guard fires
/// only if one of them starts serving). 1 ms and the default still serve.
#[tokio::test]
async fn a_serve_config_that_cannot_work_is_refused_before_anything_is_accepted() {
    use mcpl::server::listen::{serve, serve_each, ServeConfigError};
    for timeout in [Duration::ZERO, Duration::from_micros(999)] {
        let config = ServeConfig {
            initialize_timeout: timeout,
            ..ServeConfig::default()
        };
        let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
        let server = mcpl::reference::server();
        let runs: Vec<Result<(), ServeConfigError>> = vec![
            tokio::time::timeout(
                GUARD,
                serve(server.clone(), listener.clone(), config.clone()),
            )
            .await
            .expect("serve started serving (hang guard)"),
            tokio::time::timeout(
                GUARD,
                serve_each(move || server.clone(), listener.clone(), config.clone()),
            )
            .await
            .expect("serve_each started serving (hang guard)"),
            tokio::time::timeout(
                GUARD,
                mcpl::reference::serve_on(listener.clone(), config.clone()),
            )
            .await
            .expect("serve_on started serving (hang guard)"),
        ];
        for refused in runs {
            let Err(e) = refused else {
                panic!("{timeout:?}: served")
            };
            assert_eq!(e.defects, config.defects(), "{timeout:?}");
            assert_eq!(e.defects.len(), 1, "{e}");
            let message = e.to_string();
            assert!(
                message.contains("ServeConfig.initialize_timeout") && message.contains("1 ms"),
                "{message}"
            );
        }
    }
    assert!(ServeConfig::default().defects().is_empty());
    let at_least = ServeConfig {
        initialize_timeout: Duration::from_millis(1),
        ..ServeConfig::default()
    };
    assert!(at_least.defects().is_empty());
}

/// The listener's own values are judged with the rest of a `ServeConfig`: a handshake
/// timeout under 1 ms (nearly every TLS or WebSocket handshake dropped) and a count of 0
/// (nothing admitted, raised to 1 unsaid before) are refused before anything is accepted,
/// each naming its field; the defaults pass.
#[tokio::test]
async fn a_listen_config_that_cannot_work_is_refused_by_serve() {
    use mcpl::server::listen::serve;
    assert!(ListenConfig::default().defects().is_empty());
    let config = ServeConfig {
        listen: ListenConfig {
            handshake_timeout: Duration::ZERO,
            max_connections: 0,
            ..ListenConfig::default()
        },
        ..ServeConfig::default()
    };
    let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
    let run = tokio::time::timeout(
        GUARD,
        serve(mcpl::reference::server(), listener, config.clone()),
    )
    .await
    .expect("serve started serving (hang guard)");
    let Err(e) = run else { panic!("served") };
    assert_eq!(e.defects, config.defects());
    let message = e.to_string();
    for field in [
        "ServeConfig.listen.handshake_timeout",
        "ServeConfig.listen.max_connections",
    ] {
        assert!(message.contains(field), "{field}: {message}");
    }
    assert_eq!(e.defects.len(), 2, "{message}");
}

/// A connection that never sends `initialize` holds its place only until
/// `ServeConfig::initialize_timeout` (the default, 10 s): at `max_connections: 1` a silent
/// first connection is closed at its deadline (on the paused clock, not before), which
/// frees the place for a second one waiting in the backlog; the close is reported through
/// `ListenConfig::report` (before, only a `tracing` line said it, so a caller watching the
/// loop's reports never learnt why its connections ended); the second one initializes and
/// is not closed when its own deadline passes.
#[tokio::test(start_paused = true)]
async fn a_silent_connection_frees_its_place_at_the_initialize_deadline_and_is_reported() {
    use mcpl::server::listen::DEFAULT_INITIALIZE_TIMEOUT;
    let listener = Arc::new(tcp::Listener::bind("127.0.0.1:0").await.unwrap());
    let addr = listener.local_addr().unwrap();
    let (report_tx, mut reports) = tokio::sync::mpsc::unbounded_channel::<String>();
    let config = ServeConfig {
        listen: ListenConfig {
            max_connections: 1,
            report: Some(Arc::new(move |l: &str| {
                let _ = report_tx.send(l.to_owned());
            })),
            ..ListenConfig::default()
        },
        ..ServeConfig::default()
    };
    let start = tokio::time::Instant::now();
    tokio::spawn(mcpl::reference::serve_on(listener, config));

    let mut silent = TcpStream::connect(addr).await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    // The second one waits in the backlog, its initialize already sent.
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "listen", "version": "0"}});
    w.write_all(request(1, "initialize", init).as_bytes())
        .await
        .unwrap();

    assert_eq!(read_to_eof(&mut silent).await, b"");
    assert!(
        start.elapsed() >= DEFAULT_INITIALIZE_TIMEOUT,
        "closed before its deadline: {:?}",
        start.elapsed()
    );
    let answer = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the waiting connection was not served once the silent one closed")
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");

    // Said through the loop's reporter, naming the connection and the limit.
    let said = loop {
        let line = tokio::time::timeout(GUARD, reports.recv())
            .await
            .expect("the close was not reported (hang guard)")
            .unwrap();
        if line.contains("initialize") {
            break line;
        }
    };
    assert!(
        said.contains(&silent_addr.to_string()) && said.contains("initialize_timeout"),
        "{said}"
    );

    // The initialized one outlives its own deadline: a ping is still answered.
    tokio::time::sleep(DEFAULT_INITIALIZE_TIMEOUT * 2).await;
    w.write_all(request(2, "ping", json!({})).as_bytes())
        .await
        .unwrap();
    let pong = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .expect("the initialized connection was closed");
    let pong: Value = serde_json::from_str(&pong).unwrap();
    assert_eq!(pong["id"], 2, "{pong}");
    let more: Vec<String> = std::iter::from_fn(|| reports.try_recv().ok()).collect();
    assert!(
        more.iter().all(|l| !l.contains("initialize")),
        "only the silent one is reported: {more:?}"
    );
}
