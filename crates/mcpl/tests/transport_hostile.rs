//! Hostile peers against the transports, over real sockets and pipes, the bytes written by
//! hand: what each attack costs the library, and that it ends with a clear error rather than
//! unbounded memory or a hang. Waits are hang guards, never asserted timings.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::transport::{ws, Frame, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const GUARD: Duration = Duration::from_secs(30);

/// Dials `addr` with a small receive buffer (so that what the server writes and the client
/// never reads piles up at the server, not in the client's kernel) and completes a
/// WebSocket upgrade by hand, leaving the stream just after the server's `101` answer.
async fn raw_ws_client(addr: std::net::SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
              Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
              Sec-WebSocket-Version: 13\r\n\r\n",
        )
        .await
        .unwrap();
    // The answer, a byte at a time so nothing after it is taken.
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        stream.read_exact(&mut b).await.unwrap();
        answer.push(b[0]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 101"), "{answer:?}");
    stream
}

/// One masked client frame (RFC 6455 §5.2), the mask all zeroes so the payload goes as is.
fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![(u8::from(fin) << 7) | opcode];
    let len = payload.len();
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len <= usize::from(u16::MAX) {
        f.push(0x80 | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(len as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    f
}

/// Reads the server transport's frames until it ends; what ended it.
async fn read_to_end(mut transport: Transport) -> (Vec<Frame>, Result<(), String>) {
    let mut frames = Vec::new();
    loop {
        match transport.reader.next_frame().await {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, Ok(())),
            Err(e) => return (frames, Err(e.to_string())),
        }
    }
}

/// A client that sends pings and never reads: tungstenite queues a pong for each in its
/// write buffer, which no bound limited (`max_write_buffer_size` is unlimited by default), so
/// 16 MiB of pings held nearly as much in pongs, for as long as the client kept on. The
/// connection now ends once `ws::MAX_UNSENT_PONG_BYTES` of pongs wait unsent, with an error
/// that says why.
#[tokio::test]
async fn a_client_that_pings_and_never_reads_is_closed_with_a_clear_error() {
    let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (transport, _) = listener.accept().await.unwrap();
        read_to_end(transport).await
    });
    let mut client = raw_ws_client(addr).await;
    let ping = client_frame(true, 0x9, &[b'p'; 125]);
    let burst: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 512)
        .collect();
    let mut sent = 0usize;
    const CAP: usize = 16 * 1024 * 1024;
    while sent < CAP {
        match tokio::time::timeout(GUARD, client.write_all(&burst)).await {
            Ok(Ok(())) => sent += burst.len(),
            // The server closed the connection.
            Ok(Err(_)) => break,
            Err(_) => panic!("the server stopped reading without closing (hang guard)"),
        }
    }
    let (frames, end) = tokio::time::timeout(GUARD, server)
        .await
        .unwrap_or_else(|_| panic!("{sent} bytes of pings sent and the server still reads on"))
        .unwrap();
    assert!(frames.is_empty(), "{frames:?}");
    let why = end.expect_err("the connection should end with an error");
    assert!(why.contains("pong"), "{why}");
    assert!(sent < CAP, "all {sent} bytes of pings were taken");
}

/// The pong bound counts only pongs held unsent: a client that reads its pongs may ping far
/// past `ws::MAX_UNSENT_PONG_BYTES` in all and its connection goes on.
#[tokio::test]
async fn pongs_the_client_reads_never_count_against_the_bound() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;

    let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut transport, _) = listener.accept().await.unwrap();
        transport.reader.next_frame().await
    });
    let (mut client, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .unwrap();
    let pings = 4 * ws::MAX_UNSENT_PONG_BYTES / 125;
    for _ in 0..pings {
        client
            .send(WsMessage::Ping(vec![b'p'; 125].into()))
            .await
            .unwrap();
        match tokio::time::timeout(GUARD, client.next()).await.unwrap() {
            Some(Ok(WsMessage::Pong(p))) => assert_eq!(p.len(), 125),
            other => panic!("expected a pong, got {other:?}"),
        }
    }
    client.send(WsMessage::text("hello")).await.unwrap();
    let got = tokio::time::timeout(GUARD, server).await.unwrap().unwrap();
    assert_eq!(got.unwrap(), Some(Frame::Text("hello".to_owned())));
}

/// A server that accepts the TCP connection and never answers the upgrade: `ws::connect` (and
/// so `endpoint::connect` and a `host::Supervisor` dialling with it) waited for good. It now
/// gives up after `ws::CONNECT_TIMEOUT` with an error that says so. Paused clock: the wait is
/// the bound's, not the test's.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_the_upgrade_fails_the_dial_at_its_deadline() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (stream, _) = silent.accept().await.unwrap();
        // Read nothing, answer nothing; hold the connection open.
        std::future::pending::<()>().await;
        drop(stream);
    });
    let url = format!("ws://{addr}/");
    let dial = ws::connect(&url, None);
    let err = tokio::time::timeout(Duration::from_secs(3600), dial)
        .await
        .expect("the dial never gave up")
        .expect_err("nothing answered the upgrade");
    assert!(
        matches!(err, ws::WsError::ConnectTimeout(d) if d == ws::CONNECT_TIMEOUT),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade"), "{err}");
    held.abort();
}

/// Reads the server's frames after the upgrade until the connection ends; the close frame's
/// status code and reason, if one came (server frames are unmasked, RFC 6455 §5.1).
async fn close_frame_of(mut client: TcpStream) -> Option<(u16, String)> {
    let mut got = Vec::new();
    tokio::time::timeout(GUARD, client.read_to_end(&mut got))
        .await
        .expect("the server never closed the connection (hang guard)")
        .ok()?;
    let mut rest = got.as_slice();
    while let [b0, b1, tail @ ..] = rest {
        let len = usize::from(b1 & 0x7f);
        assert!(len < 126, "a control frame, or a short test frame");
        let (payload, after) = tail.split_at(len);
        if b0 & 0x0f == 0x8 {
            if payload.len() < 2 {
                return Some((0, String::new()));
            }
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            return Some((code, String::from_utf8_lossy(&payload[2..]).into_owned()));
        }
        rest = after;
    }
    None
}

/// RFC 6455 §7.1.7 and §7.4.1: an endpoint failing the connection should send a close frame
/// with the status code for why. A text message that is not UTF-8 (which §8.1 says fails the
/// connection), a frame over the size limit (here a header announcing 1 TiB, refused before
/// its payload) and a reserved opcode each ended the connection with a close frame carrying
/// no code at all, and the server's own reason was tungstenite's bare text ("UTF-8 encoding
/// error: …"). Now the close says 1007, 1009 and 1002 with a short reason, and the server's
/// reason says what the other side did.
#[tokio::test]
async fn a_broken_frame_ends_the_connection_with_the_rfc_6455_close_code() {
    use mcpl::peer::{CloseReason, Peer, PeerConfig};

    let mut huge = vec![0x81u8, 0x80 | 127];
    huge.extend_from_slice(&(1u64 << 40).to_be_bytes());
    huge.extend_from_slice(&[0; 4]);
    let cases: [(Vec<u8>, u16, &str); 3] = [
        (
            client_frame(true, 0x1, &[b'{', 0xff, 0xfe, b'}']),
            1007,
            "UTF-8",
        ),
        (huge, 1009, "too large"),
        (client_frame(true, 0x3, b"{}"), 1002, "protocol"),
    ];
    for (frame, code, says) in cases {
        let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (transport, _) = listener.accept().await.unwrap();
            let (peer, _incoming) = Peer::new(transport, PeerConfig::default());
            peer.closed().await
        });
        let mut client = raw_ws_client(addr).await;
        client.write_all(&frame).await.unwrap();
        let close = close_frame_of(client).await;
        let reason = tokio::time::timeout(GUARD, server).await.unwrap().unwrap();
        let CloseReason::Io(why) = &reason else {
            panic!("{code}: closed by {reason:?}")
        };
        assert!(why.contains(says), "{code}: {why}");
        let (got, text) = close.unwrap_or_else(|| panic!("{code}: no close frame"));
        assert_eq!(got, code, "{why} / {text:?}");
        assert!(text.contains(says), "{code}: {text:?}");
    }
}

/// tungstenite reads each frame into one buffer sized for the whole frame and keeps that
/// buffer for the connection's life: after an 8 MiB message, an idle connection still held
/// 8 MiB (measured with a counting allocator), while the budget had taken the message's
/// bytes back once it was complete. So connections that each sent one large message, one
/// after another, held any multiple of the budget. What a connection's reader keeps of its
/// largest frame now stays counted against the budget until the connection ends: with a
/// budget of 1 MiB, a second connection's 768 KiB message is refused while the first, idle
/// after its own, still holds its buffer, and taken once the first has gone.
#[tokio::test]
async fn what_the_websocket_reader_keeps_of_a_large_frame_stays_in_the_budget() {
    use futures_util::SinkExt;
    use mcpl::transport::MessageBudget;
    use tokio_tungstenite::tungstenite::Message as WsMessage;

    const BIG: usize = 768 * 1024;
    let budget = MessageBudget::new(1024 * 1024);
    let listener = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
    let url = format!("ws://{}/", listener.local_addr().unwrap());
    let message = format!("{{\"x\":\"{}\"}}", "a".repeat(BIG));
    let mut connections = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (client, accepted) = tokio::join!(
            tokio_tungstenite::connect_async(url.as_str()),
            listener.accept()
        );
        let (mut transport, _) = accepted.unwrap();
        transport.reader.set_message_budget(budget.clone());
        connections.push(transport);
        clients.push(client.unwrap().0);
    }
    // The first connection's message is taken whole; it then sits idle, holding its buffer.
    clients[0]
        .send(WsMessage::text(message.clone()))
        .await
        .unwrap();
    let first = tokio::time::timeout(GUARD, connections[0].reader.next_frame()).await;
    assert!(matches!(first, Ok(Ok(Some(Frame::Text(t)))) if t.len() == message.len()));
    assert!(
        budget.used() >= BIG - mcpl::transport::UNBUDGETED_BYTES,
        "{budget:?}"
    );
    // The second's is refused: the budget cannot cover both.
    clients[1]
        .send(WsMessage::text(message.clone()))
        .await
        .unwrap();
    let second = tokio::time::timeout(GUARD, connections[1].reader.next_frame()).await;
    assert!(
        matches!(second, Ok(Ok(Some(Frame::OverBudget { .. })))),
        "{second:?}"
    );
    // Once the first connection has gone, its buffer's bytes are back in the budget.
    drop(connections.remove(0));
    assert_eq!(budget.used(), 0, "{budget:?}");
}

/// A budget given to a child's reader (as `Peer::new` passes `PeerConfig::message_budget`)
/// applies to what the child writes: a line the budget cannot cover is refused, not kept
/// whole. Before, the child's reader ignored it and held the line on the process budget.
#[tokio::test]
async fn a_childs_reader_takes_the_budget_it_is_given() {
    use mcpl::transport::{child, MessageBudget};

    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", "head -c 200000 /dev/zero | tr '\\0' a; echo; sleep 5"]);
    let (mut transport, _control) = child::spawn(&mut cmd).unwrap();
    transport.reader.set_message_budget(MessageBudget::new(0));
    let frame = tokio::time::timeout(GUARD, transport.reader.next_frame()).await;
    assert!(
        matches!(frame, Ok(Ok(Some(Frame::OverBudget { .. })))),
        "{:?}",
        frame.map(|r| r.map(|f| f.map(|f| match f {
            Frame::Text(t) => format!("text of {} bytes", t.len()),
            other => format!("{other:?}"),
        })))
    );
}
