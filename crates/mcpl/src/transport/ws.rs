//! WebSocket transport (client and server, `ws://` and `wss://` with rustls/ring): one
//! JSON-RPC message per text frame; a text frame holding several newline-separated messages
//! is accepted and split. Pings are answered and close frames handled by tungstenite; a close
//! from the other side ends the stream like EOF.
//!
//! Readings:
//! - Binary frames are not JSON-RPC text: each is discarded with a diagnostic (and, when it
//!   begins as a message does, answered `-32700` by the peer, so its sender learns why).
//!   One that begins as a message does is read for its envelope first (leniently, 64 KiB a
//!   step, as a message over the limit), so an answer to a request of the reader's side
//!   in one fails that request at once rather than leaving it waiting.
//! - A message's JSON may span lines (pretty-printed: its newlines are whitespace, RFC 8259
//!   §2), as nothing in a WebSocket frame needs them escaped. A frame is split into the JSON
//!   values that parse from each message's start, over lines or not, and, where none does,
//!   into lines (`part_end`): a junk line costs only itself, whatever brackets it opens or
//!   closes (a lone `{` line and a lone `}` line around messages no longer make them one).
//! - Finding where a message spanning lines ends parses it, up to the whole frame: where
//!   that may read more than 64 KiB (`transport::YIELD_AFTER`; the value's strings and
//!   nesting run past it), it is done on the blocking pool, one such parse per core for
//!   the process, while the reader waits; shorter ones are read at once. Before, a frame
//!   of up to [`WS_HARD_LIMIT`] was parsed in one poll, and the worker's other
//!   connections waited.
//! - The peer's size limit applies to each message after a frame is split. A frame is split
//!   lazily: it is kept whole with an offset and its messages are handed out one at a time,
//!   so a frame of many small messages costs the frame plus one message, not a copy of each.
//! - tungstenite itself refuses any single message over [`WS_HARD_LIMIT`] (the connection
//!   then ends with an I/O error), so nothing larger is ever buffered. That limit stays fixed:
//!   it is set at the handshake, before [`crate::peer::PeerConfig::max_message_size`] reaches
//!   the transport, and the split halves cannot reconfigure it; nor could a refused message be
//!   skipped (tungstenite stops before its payload, so the stream cannot be resynchronised).
//!   A message between the peer's limit and this one is a [`Frame::Oversized`] diagnostic and
//!   the connection survives.
//! - Partial messages of all connections are bounded together by a shared
//!   [`MessageBudget`]: the bytes tungstenite reads are followed beneath it (frame headers,
//!   the payload of the data message being assembled), and a message the budget cannot
//!   cover fails tungstenite's read; it is reported as [`Frame::OverBudget`] (the peer
//!   answers `-32000`) and the connection then ends, since tungstenite cannot skip the rest
//!   of a frame it has started. See [`super::budget`] for why not a small frame size.
//! - Pings are answered by tungstenite, which keeps each pong in its write buffer until the
//!   other side reads it; that buffer has no bound of its own (`max_write_buffer_size` would
//!   also refuse our own large messages), so a peer that sends pings and never reads would
//!   grow it for as long as it kept on. The reader counts the pongs held unsent and ends the
//!   connection with an error once they pass [`MAX_UNSENT_PONG_BYTES`].
//! - A frame that breaks RFC 6455 (a text message that is not UTF-8, a frame or message
//!   over [`WS_HARD_LIMIT`], a reserved opcode…) fails the connection, as §7.1.7 and §8.1
//!   require: the reader's error says what the other side did, and the close frame the
//!   writer then sends carries the §7.4.1 status code (1007, 1009, 1002; 1008 after the pong
//!   bound below, 1013 after a budget refusal) with a short reason.
//! - A dial ([`connect`]) is bounded as a server's accept is: a server that takes the TCP
//!   connection and never answers the upgrade (or trickles its answer) fails it with
//!   [`WsError::ConnectTimeout`] after [`CONNECT_TIMEOUT`].
//! - `wss://` needs a rustls `ClientConfig`: no root store is bundled, so connecting without
//!   one fails closed with [`WsError::TlsConfigRequired`] rather than trusting anything.
//! - `mcpl://` URIs are resolved elsewhere (`crate::uri`, RFC-004); here they are refused.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::jsonrpc::envelope::value_extent;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as TungError, Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::budget::{over_budget, MessageBudget, Meter, Metered};
use super::listen::{Listen, DEFAULT_HANDSHAKE_TIMEOUT};
use super::{BoxFuture, Frame, FrameReader, FrameWriter, Transport, DEFAULT_MAX_MESSAGE_SIZE};

/// The largest WebSocket message tungstenite will assemble (64 MiB); see the module docs.
pub const WS_HARD_LIMIT: usize = 4 * DEFAULT_MAX_MESSAGE_SIZE;

/// The most pong bytes (each counted as its payload plus 6 bytes of header and mask) a
/// connection holds unsent for a peer that keeps pinging without reading them: 64 KiB,
/// about 500 pings of the largest payload (125 bytes) or 10,000 empty ones. One more ping
/// ends the connection with an I/O error that says so. The count starts again whenever a
/// write leaves nothing unsent.
pub const MAX_UNSENT_PONG_BYTES: usize = 64 * 1024;

/// Header and mask bytes counted per pong (a client's pongs are masked).
const PONG_OVERHEAD: usize = 6;

/// Why a WebSocket connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The URL is not a `ws://` or `wss://` URL.
    #[error("invalid WebSocket URL {url:?}: {reason}; give a ws://host:port/path or wss://… URL")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `wss://` was asked for without a rustls client configuration.
    #[error("wss:// needs a rustls ClientConfig (this function trusts no roots by itself); pass one, e.g. transport::endpoint::default_tls_config()")]
    TlsConfigRequired,
    /// The TLS handshake failed.
    #[error("TLS handshake failed: {0}; check that the server's certificate names the host and chains to a root the ClientConfig trusts")]
    Tls(io::Error),
    /// The WebSocket handshake failed (HTTP upgrade refused, bad response…).
    #[error("WebSocket handshake failed: {0}; check that the URL (host, port and path) serves WebSocket upgrades")]
    Handshake(String),
    /// Connecting or accepting failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The TLS and WebSocket handshakes of an accepted connection took longer than this.
    #[error("the TLS and WebSocket handshakes were not completed within {0:?}, so the connection was closed; for slow clients serve with transport::listen and a longer ListenConfig::handshake_timeout")]
    HandshakeTimeout(std::time::Duration),
    /// Dialling (TCP connect, TLS and WebSocket handshakes) took longer than this
    /// ([`connect`]: [`CONNECT_TIMEOUT`]; [`connect_within`]: the caller's).
    #[error("no WebSocket connection within {0:?}: the TCP connect, TLS handshake or HTTP upgrade was not completed, so the dial was given up; check that the address serves WebSocket upgrades, or dial with ws::connect_within and a longer bound")]
    ConnectTimeout(std::time::Duration),
}

/// How long [`connect`] waits for the whole dial (TCP connect, TLS handshake, HTTP upgrade)
/// before it gives up with [`WsError::ConnectTimeout`]: 10 s, as the server side's
/// [`DEFAULT_HANDSHAKE_TIMEOUT`]. A server that accepted the connection and never answered
/// the upgrade held the dial for good.
pub const CONNECT_TIMEOUT: std::time::Duration = DEFAULT_HANDSHAKE_TIMEOUT;

/// tungstenite's read buffer, allocated per connection and zero-filled on the first read
/// (its default, 128 KiB, made an idle WebSocket connection cost ~200 KiB; 4 KiB still put
/// WebSocket over 32 KiB per idle connection, issue #20). 2 KiB; larger messages are
/// assembled across reads.
const WS_READ_BUFFER: usize = 2 * 1024;
/// Outgoing bytes tungstenite collects before writing (default 128 KiB); the peer's writer
/// already batches frames, so a small buffer costs no extra writes.
const WS_WRITE_BUFFER: usize = 8 * 1024;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(WS_WRITE_BUFFER)
        .max_message_size(Some(WS_HARD_LIMIT))
        .max_frame_size(Some(WS_HARD_LIMIT))
}

fn handshake_error(e: TungError) -> WsError {
    match e {
        TungError::Io(e) => WsError::Io(e),
        other => WsError::Handshake(other.to_string()),
    }
}

/// Connects to a `ws://` or `wss://` URL. For `wss://`, `tls` is the rustls client
/// configuration (roots to trust, ALPN…); it is ignored for `ws://`. The whole dial is
/// bounded by [`CONNECT_TIMEOUT`] (then [`WsError::ConnectTimeout`]); see [`connect_within`]
/// for another bound.
pub async fn connect(
    url: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Transport, WsError> {
    connect_within(url, tls, CONNECT_TIMEOUT).await
}

/// [`connect`] with the dial (TCP connect, TLS handshake, HTTP upgrade) bounded by `timeout`
/// instead of [`CONNECT_TIMEOUT`].
pub async fn connect_within(
    url: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: std::time::Duration,
) -> Result<Transport, WsError> {
    tokio::time::timeout(timeout, dial(url, tls))
        .await
        .map_err(|_| WsError::ConnectTimeout(timeout))?
}

/// The dial of [`connect`], without its bound.
async fn dial(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Transport, WsError> {
    let parsed = url::Url::parse(url).map_err(|e| WsError::InvalidUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    let connector = match parsed.scheme() {
        "ws" => tokio_tungstenite::Connector::Plain,
        "wss" => match tls {
            Some(config) => tokio_tungstenite::Connector::Rustls(config),
            None => return Err(WsError::TlsConfigRequired),
        },
        "mcpl" => {
            return Err(WsError::InvalidUrl {
                url: url.to_owned(),
                reason: "mcpl:// URIs must be resolved to wss:// first (crate::uri)".into(),
            })
        }
        other => {
            return Err(WsError::InvalidUrl {
                url: url.to_owned(),
                reason: format!("scheme {other:?} is not ws or wss"),
            })
        }
    };
    let port = parsed.port_or_known_default().unwrap_or(80);
    let (tcp, server_name) = match parsed.host() {
        Some(url::Host::Domain(d)) => (
            TcpStream::connect((d, port)).await?,
            rustls::pki_types::ServerName::try_from(d.to_owned()).ok(),
        ),
        Some(url::Host::Ipv4(ip)) => (
            TcpStream::connect((ip, port)).await?,
            Some(rustls::pki_types::ServerName::IpAddress(ip.into())),
        ),
        Some(url::Host::Ipv6(ip)) => (
            TcpStream::connect((ip, port)).await?,
            Some(rustls::pki_types::ServerName::IpAddress(ip.into())),
        ),
        None => {
            return Err(WsError::InvalidUrl {
                url: url.to_owned(),
                reason: "no host".into(),
            })
        }
    };
    let _ = tcp.set_nodelay(true);
    let meter = new_meter();
    let transport = match connector {
        tokio_tungstenite::Connector::Rustls(config) => {
            let name = server_name.ok_or_else(|| WsError::InvalidUrl {
                url: url.to_owned(),
                reason: "the host is not a valid TLS server name".into(),
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(WsError::Tls)?;
            client(url, Metered::new(tls, meter.clone()), meter).await?
        }
        _ => client(url, Metered::new(tcp, meter.clone()), meter).await?,
    };
    Ok(transport)
}

/// The client side of the WebSocket handshake over an established (metered) stream.
async fn client<S>(url: &str, stream: Metered<S>, meter: SharedMeter) -> Result<Transport, WsError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (ws, _response) =
        tokio_tungstenite::client_async_with_config(url, stream, Some(ws_config()))
            .await
            .map_err(handshake_error)?;
    Ok(from_stream(ws, format!("websocket {url}"), meter))
}

/// The byte meter of a connection: counts what tungstenite reads against the budget (the
/// process's until the peer sets its own), shared with the connection's [`WsReader`].
type SharedMeter = Arc<Mutex<Meter>>;

fn new_meter() -> SharedMeter {
    Arc::new(Mutex::new(Meter::new(MessageBudget::process())))
}

/// Performs the server side of the WebSocket handshake on an accepted stream (plain TCP or a
/// TLS stream) and returns the transport.
pub async fn accept<S>(stream: S) -> Result<Transport, WsError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let meter = new_meter();
    let ws = tokio_tungstenite::accept_async_with_config(
        Metered::new(stream, meter.clone()),
        Some(ws_config()),
    )
    .await
    .map_err(handshake_error)?;
    Ok(from_stream(ws, "websocket (accepted)".to_owned(), meter))
}

/// A WebSocket server socket (`ws`, or `wss` when given a rustls `ServerConfig`) handing out
/// one transport per connection, one session after another.
pub struct Listener {
    tcp: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("tcp", &self.tcp)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Listener {
    /// Binds to `addr`; with `tls`, every connection is TLS first (`wss`).
    pub async fn bind(
        addr: impl ToSocketAddrs,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<Listener> {
        Ok(Listener {
            tcp: TcpListener::bind(addr).await?,
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Accepts the next connection and completes its TLS (if any) and WebSocket handshakes,
    /// within [`DEFAULT_HANDSHAKE_TIMEOUT`] (then [`WsError::HandshakeTimeout`]). A failed
    /// handshake is returned as an error; call again for the next connection.
    ///
    /// This serves one connection at a time: while a client stalls its upgrade, nobody else
    /// is accepted. A server accepts with [`super::listen::serve`], which runs each
    /// handshake in its own task.
    pub async fn accept(&self) -> Result<(Transport, SocketAddr), WsError> {
        let (tcp, addr) = self.tcp.accept().await?;
        let transport = tokio::time::timeout(
            DEFAULT_HANDSHAKE_TIMEOUT,
            handshake(tcp, self.tls.clone(), addr),
        )
        .await
        .map_err(|_| WsError::HandshakeTimeout(DEFAULT_HANDSHAKE_TIMEOUT))??;
        Ok((transport, addr))
    }
}

/// The server side of a connection's TLS (with `tls`) and WebSocket handshakes.
async fn handshake(
    tcp: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    addr: SocketAddr,
) -> Result<Transport, WsError> {
    let _ = tcp.set_nodelay(true);
    let mut transport = match tls {
        None => accept(tcp).await?,
        Some(acceptor) => {
            let tls = acceptor.accept(tcp).await.map_err(WsError::Tls)?;
            accept(tls).await?
        }
    };
    transport.description = format!("websocket from {addr}");
    Ok(transport)
}

/// The accept loop ([`super::listen::serve`]) accepts the TCP connection; the TLS and
/// WebSocket handshakes run in the connection's own task.
impl Listen for Listener {
    type Accepted = TcpStream;

    fn accept_raw(&self) -> BoxFuture<'_, io::Result<(TcpStream, SocketAddr)>> {
        Box::pin(self.tcp.accept())
    }

    fn handshake(
        &self,
        accepted: TcpStream,
        addr: SocketAddr,
    ) -> BoxFuture<'static, Result<Transport, String>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            handshake(accepted, tls, addr)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

fn from_stream<S>(
    stream: WebSocketStream<Metered<S>>,
    description: String,
    meter: SharedMeter,
) -> Transport
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sink, stream) = stream.split();
    let failed = FailedWith::default();
    Transport {
        reader: Box::new(WsReader {
            stream,
            split: None,
            limit: DEFAULT_MAX_MESSAGE_SIZE,
            meter,
            refused: None,
            pongs: 0,
            failed: failed.clone(),
            binary_json: false,
            oversized_head: Vec::new(),
            oversized_rest: Vec::new(),
            scan: None,
            long: None,
            found: None,
        }),
        writer: Box::new(WsWriter { sink, failed }),
        guard: None,
        description,
    }
}

/// The close frame the writer sends when the reader failed the connection (RFC 6455
/// §7.1.7): set by the reader, taken by [`WsWriter`]'s close.
type FailedWith = Arc<Mutex<Option<CloseFrame>>>;

/// Notes the close frame for a failed connection (the first reason stays).
fn fail_with(failed: &FailedWith, code: CloseCode, reason: &'static str) {
    let mut slot = failed.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        });
    }
}

/// What the other side did to make tungstenite fail the read, and the RFC 6455 §7.4.1
/// close code and reason for it.
fn broken_frame(e: &TungError) -> (String, CloseCode, &'static str) {
    match e {
        TungError::Utf8(detail) => (
            format!(
                "the other side sent a WebSocket text message that is not valid UTF-8 \
                 ({detail}); RFC 6455 §8.1 fails the connection (close code 1007)"
            ),
            CloseCode::Invalid,
            "invalid UTF-8 in a text message",
        ),
        TungError::Capacity(detail) => (
            format!(
                "the other side sent a WebSocket frame or message too large: {detail} \
                 (ws::WS_HARD_LIMIT is {WS_HARD_LIMIT} bytes); closing with code 1009"
            ),
            CloseCode::Size,
            "message too large",
        ),
        other => (
            format!(
                "the other side broke the WebSocket protocol: {other}; closing with code \
                 1002 (protocol error)"
            ),
            CloseCode::Protocol,
            "protocol error",
        ),
    }
}

/// Where the part at the start of `rest` (a frame's text from a message's start) ends,
/// exclusive; a newline there separates it from the next. A JSON value that parses from
/// here is one part, whichever lines it spans, up to the end of the line it ends on (what
/// follows it on that line makes the line junk, as it would be alone); anything else is one
/// line, so a junk line costs only itself, whatever brackets it opens or closes. Linear in
/// the frame: a parse that fails spends `budget` (the frame's length at first) by the bytes
/// it read, and once none is left the rest of the frame is split at every newline.
fn part_end(rest: &str, budget: &mut usize) -> usize {
    let bytes = rest.as_bytes();
    let line_end = match to_parse(bytes, *budget) {
        Ok(line_end) => line_end,
        Err(end) => return end,
    };
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => {
            let end = values.byte_offset();
            let tail = bytes.get(end..).unwrap_or_default();
            crate::bytes::find(b'\n', tail).map_or(rest.len(), |i| end + i)
        }
        Some(Err(e)) => {
            *budget = budget.saturating_sub(bytes_read(rest, &e));
            line_end
        }
        None => line_end,
    }
}

/// Whether [`part_end`] parses at the start of `bytes` (`Ok`, with the end of its first
/// line), or ends the part without a parse (`Err`, with the part's end): the last line, a
/// blank line or one before nothing but blanks, or no `budget` left. A blank or last line
/// is a part as it is, read by nothing here. The line is tested first: a blank one never
/// scans what follows it, so each run of whitespace is scanned by at most the one line
/// before it (linear, however many blank lines a frame holds).
fn to_parse(bytes: &[u8], budget: usize) -> Result<usize, usize> {
    let Some(line_end) = crate::bytes::find(b'\n', bytes) else {
        return Err(bytes.len());
    };
    let after = bytes.get(line_end + 1..).unwrap_or_default();
    let blank = |b: &[u8]| b.iter().all(u8::is_ascii_whitespace);
    if budget == 0 || blank(bytes.get(..line_end).unwrap_or_default()) || blank(after) {
        return Err(line_end);
    }
    Ok(line_end)
}

/// Whether [`part_end`] on `rest` may read more than [`super::YIELD_AFTER`] bytes (64 KiB)
/// at once: it parses there ([`to_parse`]) and the JSON value at `rest`'s start, followed
/// by its strings and nesting only ([`value_extent`], the envelope's one scanner), does not
/// end within that many bytes.
/// A parse stops where the value ends or earlier (at its first error), so anything else is
/// read in one bounded step; such a part is found on the blocking pool instead
/// ([`WsReader::part_off_worker`]).
fn long_part(rest: &str, budget: usize) -> bool {
    let bytes = rest.as_bytes();
    to_parse(bytes, budget).is_ok() && value_extent(bytes, super::YIELD_AFTER).is_none()
}

/// How many bytes of `text` a parse read before it failed with `e` (its line and column).
/// An error of no position (line 0) counts the whole text.
fn bytes_read(text: &str, e: &serde_json::Error) -> usize {
    let start = match e.line() {
        0 => return text.len(),
        1 => 0,
        line => crate::bytes::nth(b'\n', text.as_bytes(), line - 2).map_or(text.len(), |i| i + 1),
    };
    start.saturating_add(e.column()).min(text.len())
}

struct WsReader<S> {
    stream: SplitStream<WebSocketStream<Metered<S>>>,
    /// A text frame being handed out message by message, the offset of the next one, and
    /// the bytes failed parses may still read in it ([`part_end`]).
    split: Option<(Utf8Bytes, usize, usize)>,
    limit: usize,
    meter: SharedMeter,
    /// Set once a message was refused by the budget (the stream cannot be resynchronised) or
    /// too many pongs wait unsent: the next read ends the connection with this reason.
    refused: Option<String>,
    /// Pong bytes held unsent since a write last left nothing unsent.
    pongs: usize,
    /// Shared with the writer: the close frame for a connection this reader failed.
    failed: FailedWith,
    /// The last binary frame began as a JSON-RPC message does
    /// ([`FrameReader::not_text_began_as_json`]).
    binary_json: bool,
    /// The first bytes of the last message over the limit, or refused by the budget
    /// ([`FrameReader::discarded_head`]); freed at the next read.
    oversized_head: Vec<u8>,
    /// The objects after the first in it ([`FrameReader::discarded_rest`]); freed with it.
    oversized_rest: Vec<Vec<u8>>,
    /// A message over the limit in the frame being split, being read into its envelope
    /// [`super::YIELD_AFTER`] bytes a step ([`WsReader::scan_step`]).
    scan: Option<Box<Scan>>,
    /// The offset in the frame being split of a part whose end is to be found on the
    /// blocking pool ([`long_part`]), before [`WsReader::next_part`] goes on.
    long: Option<usize>,
    /// A part's end found there: its offset, its end (from the offset), and the budget
    /// [`part_end`] left.
    found: Option<(usize, usize, usize)>,
}

/// A message over the limit, the bytes `at..end` of the frame being split, read into what
/// is kept of it a step at a time, the reader yielding between steps (issue #20: up to
/// [`WS_HARD_LIMIT`] read at once held the worker).
struct Scan {
    sighted: super::envelope::Sighted,
    at: usize,
    end: usize,
    bytes: usize,
    /// A binary frame that began as a message does, read instead of the frame being
    /// split (leniently: it may be no UTF-8), with the reason its [`Frame::NotText`] gives.
    binary: Option<(tokio_tungstenite::tungstenite::Bytes, String)>,
}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> WsReader<S> {
    /// The next message of the frame being split (a JSON value, over lines or not, else a
    /// line: [`part_end`]; `\r\n` tolerated, blank parts skipped), checked against the
    /// limit; `None` once the frame is used up.
    fn next_part(&mut self) -> Option<Frame> {
        let found = self.found.take();
        let (text, offset, budget) = self.split.as_mut()?;
        let whole = text.as_str();
        while *offset < whole.len() {
            let rest = &whole[*offset..];
            let end = match found {
                Some((at, end, left)) if at == *offset => {
                    *budget = left;
                    end
                }
                // Found on the blocking pool first (issue #20: a parse of up to the whole
                // frame, `WS_HARD_LIMIT`, held the worker).
                _ if long_part(rest, *budget) => {
                    self.long = Some(*offset);
                    return None;
                }
                _ => part_end(rest, budget),
            };
            let (part, advance) = (&rest[..end], (end + 1).min(rest.len()));
            *offset += advance;
            let part = part.strip_suffix('\r').unwrap_or(part);
            // Blank as the peer reads a blank line: JSON whitespace and a byte order mark
            // only (`jsonrpc::message_lead`); other whitespace goes on, junk to report.
            if matches!(crate::jsonrpc::message_read(part), ("", true)) {
                continue;
            }
            if part.len() > self.limit {
                // The whole message is here: its envelope is read wherever its id is
                // (`super::envelope`), its first bytes for what is no object, a step at a
                // time; the frame is yielded once that is done.
                let at = *offset - advance;
                self.scan = Some(Box::new(Scan {
                    sighted: super::envelope::Sighted::default(),
                    at,
                    end: at + part.len(),
                    bytes: part.len(),
                    binary: None,
                }));
                return None;
            }
            return Some(Frame::Text(part.to_owned()));
        }
        self.split = None;
        None
    }

    /// Finds where the part at `offset` of the frame being split ends ([`part_end`]) on the
    /// blocking pool, under one of the process's [`super::parse_permits`], the reader
    /// waiting for it meanwhile; kept for [`WsReader::next_part`]. Cancelled, it is done
    /// again at the next read (nothing of it was kept).
    async fn part_off_worker(&mut self, offset: usize) -> io::Result<()> {
        let Some((text, _, budget)) = &self.split else {
            return Ok(());
        };
        let (text, budget) = (text.clone(), *budget);
        let permit = super::parse_permits()
            .acquire()
            .await
            .map_err(|e| io::Error::other(format!("reading a WebSocket message: {e}")))?;
        let (end, left) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut budget = budget;
            let rest = text.as_str().get(offset..).unwrap_or_default();
            (part_end(rest, &mut budget), budget)
        })
        .await
        .map_err(|e| io::Error::other(format!("reading a WebSocket message failed: {e}")))?;
        self.found = Some((offset, end, left));
        Ok(())
    }

    /// One step of reading the message over the limit ([`Scan`]): at most
    /// [`super::YIELD_AFTER`] bytes; its [`Frame::Oversized`] once all was read.
    fn scan_step(&mut self) -> Option<Frame> {
        let scan = self.scan.as_mut()?;
        let whole = match &scan.binary {
            Some((bytes, _)) => Some(bytes.as_ref()),
            None => self.split.as_ref().map(|(t, ..)| t.as_str().as_bytes()),
        };
        let to = scan.end.min(scan.at.saturating_add(super::YIELD_AFTER));
        let step = whole.and_then(|w| w.get(scan.at..to)).unwrap_or_default();
        scan.sighted.feed(step);
        scan.at = to;
        if to < scan.end {
            return None;
        }
        let scan = self.scan.take()?;
        (self.oversized_head, self.oversized_rest) = super::envelope::kept(scan.sighted, true);
        if let Some((_, reason)) = scan.binary {
            return Some(Frame::NotText { reason });
        }
        Some(Frame::Oversized {
            bytes: scan.bytes,
            limit: self.limit,
        })
    }

    /// Counts the pong tungstenite queued for a ping of `payload` bytes; the reason to end
    /// the connection once more than [`MAX_UNSENT_PONG_BYTES`] of pongs wait unsent.
    fn pong_held(&mut self, payload: usize) -> Option<String> {
        let unsent = self
            .meter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unsent();
        if unsent == 0 {
            // Everything queued before this pong was written.
            self.pongs = 0;
        }
        self.pongs = self.pongs.saturating_add(payload + PONG_OVERHEAD);
        (self.pongs > MAX_UNSENT_PONG_BYTES).then(|| {
            format!(
                "the other side keeps sending WebSocket pings without reading the pongs: \
                 {} bytes of pongs wait unsent, past the bound of {MAX_UNSENT_PONG_BYTES} \
                 (ws::MAX_UNSENT_PONG_BYTES); closing the connection",
                self.pongs
            )
        })
    }

    /// Cancel-safe: `StreamExt::next` keeps no state of its own, and the frame being split
    /// waits in `self.split`.
    async fn read(&mut self) -> io::Result<Option<Frame>> {
        if self.oversized_head.capacity() > 0 || !self.oversized_rest.is_empty() {
            self.oversized_rest = Vec::new();
            self.oversized_head = Vec::new();
        }
        if let Some(why) = &self.refused {
            return Err(io::Error::other(why.clone()));
        }
        loop {
            if self.scan.is_some() {
                match self.scan_step() {
                    Some(frame) => return Ok(Some(frame)),
                    None => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                }
            }
            if let Some(frame) = self.next_part() {
                return Ok(Some(frame));
            }
            if let Some(offset) = self.long.take() {
                self.part_off_worker(offset).await?;
                continue;
            }
            if self.scan.is_some() {
                continue;
            }
            match self.stream.next().await {
                None => return Ok(None),
                Some(Ok(WsMessage::Text(text))) => {
                    let budget = text.len();
                    self.split = Some((text, 0, budget));
                }
                Some(Ok(WsMessage::Binary(bytes))) => {
                    self.binary_json = super::begins_as_json(&bytes);
                    let reason = format!(
                        "binary WebSocket frame of {} bytes (JSON-RPC messages go in text \
                         frames)",
                        bytes.len()
                    );
                    if !self.binary_json {
                        return Ok(Some(Frame::NotText { reason }));
                    }
                    // Its envelope says which request of ours it may answer
                    // ([`FrameReader::discarded_head`]): read a step at a time, as a
                    // message over the limit is, then yielded.
                    let end = bytes.len();
                    self.scan = Some(Box::new(Scan {
                        // Refused whole: no request's id is told before its error.
                        sighted: super::envelope::Sighted::lenient(0),
                        at: 0,
                        end,
                        bytes: end,
                        binary: Some((bytes, reason)),
                    }));
                }
                Some(Ok(WsMessage::Close(_))) => return Ok(None),
                Some(Ok(WsMessage::Ping(payload))) => {
                    if let Some(why) = self.pong_held(payload.len()) {
                        fail_with(&self.failed, CloseCode::Policy, "pongs not read");
                        self.refused = Some(why.clone());
                        return Err(io::Error::other(why));
                    }
                }
                Some(Ok(WsMessage::Pong(_) | WsMessage::Frame(_))) => {}
                Some(Err(TungError::ConnectionClosed | TungError::AlreadyClosed)) => {
                    return Ok(None)
                }
                Some(Err(TungError::Io(e))) => {
                    if let Some(refused) = over_budget(&e) {
                        let frame = Frame::OverBudget {
                            bytes: refused.bytes,
                            limit: refused.limit,
                        };
                        // Its first bytes, for the peer to read which request it is.
                        self.oversized_head = self
                            .meter
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .take_refused_head();
                        fail_with(&self.failed, CloseCode::Again, "message budget exhausted");
                        self.refused = Some(e.to_string());
                        return Ok(Some(frame));
                    }
                    return Err(e);
                }
                Some(Err(e)) => {
                    let (why, code, reason) = broken_frame(&e);
                    fail_with(&self.failed, code, reason);
                    return Err(io::Error::other(why));
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> FrameReader for WsReader<S> {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(self.read())
    }

    fn set_max_message_size(&mut self, limit: usize) {
        self.limit = limit;
    }

    fn not_text_began_as_json(&self) -> bool {
        self.binary_json
    }

    fn discarded_head(&self) -> Option<&[u8]> {
        (!self.oversized_head.is_empty()).then_some(self.oversized_head.as_slice())
    }

    fn discarded_rest(&self) -> &[Vec<u8>] {
        &self.oversized_rest
    }

    fn set_message_budget(&mut self, budget: MessageBudget) {
        self.meter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rebind(budget);
    }
}

struct WsWriter<S> {
    sink: SplitSink<WebSocketStream<Metered<S>>, WsMessage>,
    /// The close frame to send when the reader failed the connection.
    failed: FailedWith,
}

fn write_error(e: TungError) -> io::Error {
    match e {
        TungError::Io(e) => e,
        other => io::Error::other(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> FrameWriter for WsWriter<S> {
    fn send<'a>(&'a mut self, text: &'a str) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            self.sink
                .send(WsMessage::text(text.to_owned()))
                .await
                .map_err(write_error)
        })
    }

    fn close(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(frame) = failed {
                // Queued as the close frame; `close` below then flushes it. A failure here
                // (the other side already gone) leaves `close` to say so.
                let _ = self.sink.feed(WsMessage::Close(Some(frame))).await;
            }
            match self.sink.close().await {
                Ok(()) | Err(TungError::ConnectionClosed | TungError::AlreadyClosed) => Ok(()),
                Err(e) => Err(write_error(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes_read, long_part, part_end, value_extent};

    /// A part whose value's structure runs past 64 KiB is found off the worker; any other
    /// parse reads no further than where that structure ends (plus the byte it peeks at).
    #[test]
    fn a_long_part_is_told_by_its_values_structure() {
        let pad = "x".repeat(70 * 1024);
        assert!(long_part(&format!("{{\"a\":\"{pad}\"}}\n1"), usize::MAX));
        assert!(long_part(
            &format!("[\n{}", "1,\n".repeat(30_000)),
            usize::MAX
        ));
        assert!(!long_part(&format!("{{\"a\":1}}\n{pad}"), usize::MAX));
        assert!(
            !long_part(&format!("\"{pad}"), usize::MAX),
            "no newline: no parse"
        );
        assert!(!long_part(&format!("[\n{pad}]"), 0), "no budget: no parse");
        for text in [
            "{\"a\":[}\n{\"b\":2}",
            "{\"a\":1e400}\n2",
            "[1,2\n,3] x\n4",
            "{\"a\":\"\\\"}\"\n}",
            "  7 8\n9",
            "{\"a\":\"\\ud800\"}\n1",
        ] {
            let extent = value_extent(text.as_bytes(), 1 << 16).unwrap_or(text.len());
            let read = match serde_json::Deserializer::from_str(text)
                .into_iter::<serde::de::IgnoredAny>()
                .next()
            {
                Some(Err(e)) => bytes_read(text, &e),
                _ => extent,
            };
            assert!(read <= extent + 1, "{text:?}: read {read}, extent {extent}");
        }
    }

    fn parts(frame: &str) -> Vec<&str> {
        let mut budget = frame.len();
        let mut out = Vec::new();
        let mut rest = frame;
        while !rest.is_empty() {
            let end = part_end(rest, &mut budget);
            out.push(&rest[..end]);
            rest = rest.get(end + 1..).unwrap_or_default();
        }
        out
    }

    #[test]
    fn values_over_lines_are_one_part_and_anything_else_a_line() {
        assert_eq!(
            parts("{\n{\"a\":1}\n[2]\n}"),
            ["{", "{\"a\":1}", "[2]", "}"]
        );
        assert_eq!(
            parts("{\n  \"a\": [\n 1\n ]\n}\n7"),
            ["{\n  \"a\": [\n 1\n ]\n}", "7"]
        );
        assert_eq!(parts("{\"a\":1} x\n[\n]"), ["{\"a\":1} x", "[\n]"]);
        assert_eq!(parts("\n\n[1]\n"), ["", "", "[1]"]);
    }

    /// A failed parse spends the budget by what it read: a `[` whose array runs to the end
    /// of the frame unclosed spends it all, and the rest is split at newlines unread, so no
    /// frame costs more than about twice its length to split.
    #[test]
    fn failed_parses_spend_the_budget_by_what_they_read() {
        let frame = format!("[\n{}", "1,\n".repeat(1000));
        let mut budget = frame.len();
        assert_eq!(part_end(&frame, &mut budget), 1);
        assert!(budget < 4, "{budget} left");
        let mut small = 10;
        assert_eq!(part_end("{\n{\"a\":1}\n}", &mut small), 1);
        assert!(
            small < 10 && small > 0,
            "`{{` then `{{` fails at once: {small}"
        );
    }

    /// A frame of blank lines (a hostile peer's cheapest input) splits in time linear in its
    /// length: each blank line is tested alone, never with all the whitespace after it. With
    /// the rest tested first this frame took hours; no timing is asserted, the split ends.
    #[test]
    fn a_frame_of_blank_lines_splits_line_by_line() {
        let n = 1 << 18;
        let frame = format!("{}x", "\n".repeat(n));
        let split = parts(&frame);
        assert_eq!(split.len(), n + 1);
        assert_eq!(split.last(), Some(&"x"));
        let spaced = format!("{}{{}}", " \n".repeat(n));
        assert_eq!(parts(&spaced).len(), n + 1);
    }
}
