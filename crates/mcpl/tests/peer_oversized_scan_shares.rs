//! Issue #20 class: a line over `PeerConfig::max_message_size` is refused from its envelope
//! (`transport::envelope`), read from every byte of it, the bytes buffered before the limit
//! was crossed (up to the limit, 16 MiB by default) included. That read must not hold the
//! worker: another connection on the same single-threaded runtime is answered while it
//! goes on. Before, the buffered part was read at once, in the poll that crossed the limit
//! (237 ms for 16 MiB in a debug build), and every other connection on the worker waited.
//!
//! Shown by the order of events on a `current_thread` runtime, not by timing: connection A's
//! byte source delivers the last piece of its line (which crosses the limit and ends the
//! line) and, at that moment, lets connection B's request be read. B's answer must be
//! written before A's reader asks its source for bytes again, which it does only once the
//! envelope was read and the line refused. The same over WebSocket, where the whole message
//! over the limit is at hand and read for its envelope (up to `ws::WS_HARD_LIMIT`, 64 MiB).
#![cfg(feature = "runtime")]

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use mcpl::transport::Transport;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A deadlock guard, never a synchronisation.
const GUARD: Duration = Duration::from_secs(3600);

/// A's limit: 2 MiB buffered and read at the crossing, 32 of the reader's 64 KiB steps.
const LIMIT: usize = 2 * 1024 * 1024;

/// What happened, in order.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// A's source handed out the last piece of its line.
    ALastPiece,
    /// A's reader asked its source for bytes after that piece.
    AReadAgain,
    /// B's answer was written.
    BAnswered,
    /// A's refusal (its `-32600` answer) was written.
    AAnswered,
}

#[derive(Default)]
struct Shared {
    events: Vec<Event>,
    /// Told at every event.
    noted: Arc<tokio::sync::Notify>,
    /// B's request may be read.
    b_open: bool,
    b_waker: Option<Waker>,
}

type Log = Arc<Mutex<Shared>>;

fn note(log: &Log, e: Event) {
    let mut s = log.lock().unwrap();
    s.events.push(e);
    s.noted.notify_one();
}

/// A's bytes: one request line (or a WebSocket upgrade and one message), its last 1000
/// bytes in one read; then nothing more, ever (pending). What A writes is dropped.
struct ASource {
    line: Vec<u8>,
    at: usize,
    /// No read crosses this offset (the end of a WebSocket upgrade request: tungstenite
    /// refuses bytes after it in the read that ends it).
    stop: usize,
    /// [`Event::AAnswered`] was noted.
    answered: bool,
    log: Log,
}

impl AsyncWrite for ASource {
    /// Notes [`Event::AAnswered`] at the first write once all of its bytes were read (over
    /// WebSocket, where the same stream carries A's writes: its refusal).
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.at == self.line.len() && !self.answered {
            self.answered = true;
            note(&self.log, Event::AAnswered);
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for ASource {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let len = self.line.len();
        if self.at >= len {
            note(&self.log, Event::AReadAgain);
            return Poll::Pending;
        }
        let last = len - 1000;
        let end = if self.at < self.stop {
            (self.at + buf.remaining()).min(self.stop)
        } else if self.at < last {
            (self.at + buf.remaining()).min(last)
        } else {
            len.min(self.at + buf.remaining())
        };
        let at = self.at;
        buf.put_slice(&self.line[at..end]);
        self.at = end;
        if end == len {
            note(&self.log, Event::ALastPiece);
            let mut s = self.log.lock().unwrap();
            s.b_open = true;
            if let Some(w) = s.b_waker.take() {
                w.wake();
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// B's bytes: one small request, once A's last piece was handed out; then pending.
struct BSource {
    sent: bool,
    log: Log,
}

impl AsyncRead for BSource {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut s = self.log.lock().unwrap();
        if !s.b_open || self.sent {
            s.b_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        drop(s);
        self.sent = true;
        buf.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"b\"}\n");
        Poll::Ready(Ok(()))
    }
}

/// A sink noting `event` at the first byte written.
struct Sink {
    event: Event,
    log: Log,
    noted: bool,
}

impl AsyncWrite for Sink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !self.noted && !buf.is_empty() {
            self.noted = true;
            let event = self.event.clone();
            note(&self.log, event);
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn sink(event: Event, log: &Log) -> Sink {
    Sink {
        event,
        log: log.clone(),
        noted: false,
    }
}

/// Answers every request delivered with `"ok"`.
fn answer_all(mut incoming: mcpl::peer::Incoming) {
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(r) = msg {
                let _ = r.respond("ok").await;
            }
        }
    });
}

/// A request `LIMIT + 500` bytes long, dense numbers (the costliest text to read) with
/// its id after them.
fn big_request() -> Vec<u8> {
    let (open, close) = (
        r#"{"jsonrpc":"2.0","method":"a","params":["#,
        r#"0],"id":7}"#,
    );
    let fill = LIMIT + 500 - open.len() - close.len();
    let params = format!("{}{}", "1,".repeat(fill / 2), " ".repeat(fill % 2));
    let text = format!("{open}{params}{close}").into_bytes();
    assert_eq!(text.len(), LIMIT + 500);
    text
}

/// B: a line peer whose one request can be read once A's last piece was handed out.
fn b_peer(log: &Log) -> Peer {
    let b_source = BSource {
        sent: false,
        log: log.clone(),
    };
    let (b, b_incoming) = Peer::new(
        Transport::lines(b_source, sink(Event::BAnswered, log), "b"),
        PeerConfig::default(),
    );
    answer_all(b_incoming);
    b
}

/// The events once each of `awaited` happened (the paused clock reaches the guard only if
/// one never does).
async fn events_once(log: &Log, awaited: &[Event]) -> Vec<Event> {
    let noted = log.lock().unwrap().noted.clone();
    let all = async {
        loop {
            {
                let s = log.lock().unwrap();
                if awaited.iter().all(|e| s.events.contains(e)) {
                    return s.events.clone();
                }
            }
            noted.notified().await;
        }
    };
    tokio::time::timeout(GUARD, all)
        .await
        .expect("an event never came (deadlock guard)")
}

/// Over WebSocket: the message over the limit is at hand whole, and read for its envelope
/// a step at a time too.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn over_websocket_another_connection_is_answered_while_an_oversized_messages_envelope_is_read(
) {
    let log: Log = Arc::default();
    let payload = big_request();
    let mut bytes = b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\n\r\n"
        .to_vec();
    let stop = bytes.len();
    // One final text frame, masked with the zero key (RFC 6455 §5.3: any key will do).
    bytes.extend_from_slice(&[0x81, 0x80 | 127]);
    bytes.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    bytes.extend_from_slice(&payload);
    let a_side = ASource {
        line: bytes,
        at: 0,
        stop,
        answered: false,
        log: log.clone(),
    };
    let transport = mcpl::transport::ws::accept(a_side).await.unwrap();
    let a_config = PeerConfig {
        max_message_size: LIMIT,
        request_timeout: None,
        ..PeerConfig::default()
    };
    let (a, a_incoming) = Peer::new(transport, a_config);
    answer_all(a_incoming);
    let b = b_peer(&log);
    // A's refusal is written once the envelope was read (it answers under the id found
    // there): B must be answered before it.
    let events = events_once(&log, &[Event::BAnswered, Event::AAnswered]).await;
    let at = |e: Event| events.iter().position(|x| *x == e).unwrap();
    assert!(
        at(Event::ALastPiece) < at(Event::BAnswered) && at(Event::BAnswered) < at(Event::AAnswered),
        "B was answered only once A's oversized message was read: {events:?}"
    );
    drop((a, b));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn another_connection_is_answered_while_an_oversized_lines_envelope_is_read() {
    let log: Log = Arc::default();
    // The limit is crossed in the last piece (the last 1000 bytes), which also ends the line.
    let mut line = big_request();
    line.push(b'\n');
    let a_config = PeerConfig {
        max_message_size: LIMIT,
        request_timeout: None,
        ..PeerConfig::default()
    };
    let a_source = ASource {
        line,
        at: 0,
        stop: 0,
        answered: false,
        log: log.clone(),
    };
    let (a, a_incoming) = Peer::new(
        Transport::lines(a_source, sink(Event::AAnswered, &log), "a"),
        a_config,
    );
    answer_all(a_incoming);
    let b = b_peer(&log);
    let awaited = [Event::AAnswered, Event::BAnswered, Event::AReadAgain];
    let events = events_once(&log, &awaited).await;
    let at = |e: Event| events.iter().position(|x| *x == e).unwrap();
    assert!(
        at(Event::ALastPiece) < at(Event::BAnswered)
            && at(Event::BAnswered) < at(Event::AReadAgain),
        "B was answered only once A's oversized line was read: {events:?}"
    );
    drop((a, b));
}
