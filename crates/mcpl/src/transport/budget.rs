//! The process-wide budget for buffered partial messages (issue #20).
//!
//! [`crate::peer::PeerConfig::max_message_size`] bounds one message of one connection; it
//! does not bound many connections that each hold a message they never finish (16
//! connections × a 16 MiB line without its newline held 264 MiB). A [`MessageBudget`] is
//! shared by every connection given it: a transport that is assembling a message takes the
//! bytes beyond [`UNBUDGETED_BYTES`] from the budget as its buffer grows, and gives them back
//! once the message is complete (handed to the peer) or refused. When the budget cannot
//! cover the next growth, that message is refused and its buffer freed:
//!
//! - **Line transports** (stdio, TCP, child process, in-memory): the reader yields
//!   [`Frame::OverBudget`](super::Frame::OverBudget) at once and discards the rest of the
//!   line without buffering it; the connection survives. When what was read leaves a
//!   message of the line in doubt (no `id` read: a notification, or a request or response
//!   whose `id` comes later; an `id` the cut split; nothing but whitespace yet; on a line of
//!   several, messages past the cut unseen), the rest of the line is read into its envelope
//!   as it streams past (bounded, as for an oversized line) and the frame yielded at the
//!   line's end, so each request is answered under its id and each response of ours ends
//!   its request (JSON-RPC 2.0 §5), none failed as not kept. The peer handles it by the rule of
//!   every refused message, from what was read of it (the envelope scanner's reading: its
//!   envelope, wherever its id is, or its first [`super::DISCARDED_HEAD_BYTES`] when it is
//!   no object): a request is answered with one `-32000` error under the id it shows
//!   (`data: { limit, reason: "message_budget" }`), a response of ours fails its request at
//!   once; with a [`crate::peer::Diagnostic::OverBudget`].
//! - **WebSocket**: tungstenite assembles whole frames and messages itself, so the count is
//!   kept beneath it, on the bytes it reads: the frame headers are followed,
//!   and the payload bytes of the data message being assembled (its frames, control frames
//!   excluded) are what the budget covers. A refused message cannot be skipped (tungstenite
//!   has already taken its header), so after the same handling the connection ends (every
//!   payload byte read of a message that may be refused, a first frame over
//!   [`UNBUDGETED_BYTES`] or a fragmented one, is read unmasked by the same rule as a line's).
//!   tungstenite reads each frame into one buffer sized for the whole frame and keeps it
//!   for the connection's life (reused, grown for a larger frame, never shrunk), so the
//!   largest frame a connection has read stays taken from the budget until the connection
//!   ends; a fragmented message also counts its earlier frames twice (the kept buffer and
//!   tungstenite's copy). Without it, connections that each sent one large message held
//!   any multiple of the budget once their messages were complete.
//!   Reserving a whole [`super::ws::WS_HARD_LIMIT`] per connection instead would let four
//!   idle connections exhaust a 256 MiB budget, and a small `max_frame_size` would refuse
//!   every client that sends a large message as one frame, as clients do.
//!
//! Every connection may hold [`UNBUDGETED_BYTES`] of a partial message without the budget,
//! so small messages (an `initialize`, a `ping`) are read whatever the budget holds: a
//! connection that fills the budget delays nobody's small messages. Partial-message memory is
//! thus bounded by the budget plus [`UNBUDGETED_BYTES`] per connection (plus each transport's
//! fixed read buffer). Complete messages are bounded elsewhere (the incoming queue,
//! `max_in_flight_requests`).
//!
//! Reading (the spec is silent): the refusal is a `-32000`-class error, as for a busy
//! server (`max_in_flight_requests`), since the message itself may be valid and the same
//! message may succeed later. It is answered under the id read of it, `id: null`
//! when that id is none or cut (JSON-RPC 2.0 §5), and not at all when what was read shows
//! no `id` or no method (a notification, or nothing known), as `crate::peer`'s rule for
//! refused messages reads it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The default budget: 256 MiB, shared by every connection of the process that is not given
/// another ([`MessageBudget::process`]).
pub const DEFAULT_MESSAGE_BUDGET: usize = 256 * 1024 * 1024;

/// Bytes of a partial message each connection holds without taking them from the budget
/// (16 KiB).
pub const UNBUDGETED_BYTES: usize = 16 * 1024;

/// A budget of bytes for buffered partial messages, shared by the connections given it
/// (cheap to clone: clones share the budget). See the module docs.
#[derive(Clone)]
pub struct MessageBudget {
    inner: Arc<Inner>,
}

struct Inner {
    limit: usize,
    used: AtomicUsize,
}

impl std::fmt::Debug for MessageBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBudget")
            .field("limit", &self.limit())
            .field("used", &self.used())
            .finish()
    }
}

impl MessageBudget {
    /// A new budget of `limit` bytes, shared by the clones of what is returned.
    pub fn new(limit: usize) -> MessageBudget {
        MessageBudget {
            inner: Arc::new(Inner {
                limit,
                used: AtomicUsize::new(0),
            }),
        }
    }

    /// The process's default budget ([`DEFAULT_MESSAGE_BUDGET`]): every transport starts
    /// with it, so all connections of a process share it unless given another.
    pub fn process() -> MessageBudget {
        static PROCESS: OnceLock<MessageBudget> = OnceLock::new();
        PROCESS
            .get_or_init(|| MessageBudget::new(DEFAULT_MESSAGE_BUDGET))
            .clone()
    }

    /// The budget's size in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes currently taken by partial messages (never more than [`Self::limit`]).
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Acquire)
    }

    /// Takes `n` bytes if they fit; `false` (nothing taken) otherwise.
    fn try_take(&self, n: usize) -> bool {
        let limit = self.inner.limit;
        self.inner
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.inner.used.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Default for MessageBudget {
    /// The process's budget ([`MessageBudget::process`]).
    fn default() -> Self {
        MessageBudget::process()
    }
}

/// What one connection has taken from a budget for the message it is assembling; given back
/// when cleared or dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    budget: MessageBudget,
    held: usize,
}

impl Hold {
    pub(crate) fn new(budget: MessageBudget) -> Hold {
        Hold { budget, held: 0 }
    }

    /// Covers a partial message of `bytes` (its buffer's size): takes what it needs beyond
    /// [`UNBUDGETED_BYTES`] and what is already held. `false` when the budget cannot.
    pub(crate) fn cover(&mut self, bytes: usize) -> bool {
        let need = bytes.saturating_sub(UNBUDGETED_BYTES);
        if need <= self.held {
            return true;
        }
        if self.budget.try_take(need - self.held) {
            self.held = need;
            true
        } else {
            false
        }
    }

    /// Gives back what is held beyond what a buffer of `bytes` needs.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        let need = bytes.saturating_sub(UNBUDGETED_BYTES);
        if self.held > need {
            self.budget.give_back(self.held - need);
            self.held = need;
        }
    }

    /// Gives everything held back (the message is complete, or refused).
    pub(crate) fn clear(&mut self) {
        if self.held > 0 {
            self.budget.give_back(self.held);
            self.held = 0;
        }
    }

    /// Moves to another budget, giving back what was held in the old one (the next
    /// [`Self::cover`] takes from the new one).
    pub(crate) fn rebind(&mut self, budget: MessageBudget) {
        self.clear();
        self.budget = budget;
    }

    pub(crate) fn limit(&self) -> usize {
        self.budget.limit()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The error the WebSocket transport's metered stream fails a read with once the budget
/// cannot cover the message being read: carried inside an [`io::Error`] (find it with
/// [`over_budget`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the process-wide budget of {limit} bytes for buffered partial messages is exhausted; a message was refused after {bytes} bytes: raise the MessageBudget (ListenConfig::message_budget, PeerConfig::message_budget, mcpl serve --max-buffered-bytes) or send smaller messages")]
pub struct OverBudget {
    /// Bytes of the refused message read so far.
    pub bytes: usize,
    /// The budget's size.
    pub limit: usize,
}

/// The [`OverBudget`] inside an I/O error, if it is one.
pub fn over_budget(e: &io::Error) -> Option<&OverBudget> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<OverBudget>())
}

/// Where a [`Metered`] stream is in the byte stream it follows.
#[derive(Debug)]
enum Phase {
    /// The HTTP upgrade: bytes pass until the blank line that ends it; how many bytes of
    /// `\r\n\r\n` were just seen.
    Http(u8),
    /// A frame header: the bytes of it seen so far.
    Header { bytes: [u8; 14], len: u8 },
    /// A frame's payload: bytes still to come, whether the frame belongs to a data message,
    /// whether it ends that message.
    Payload {
        remaining: u64,
        data: bool,
        fin: bool,
        /// The frame's masking key (RFC 6455 §5.3), and the payload bytes read so far.
        mask: Option<[u8; 4]>,
        offset: u64,
    },
}

/// The meter of a [`Metered`] stream, shared with the transport's reader so the budget can
/// be rebound once the peer's configuration is known.
#[derive(Debug)]
pub(crate) struct Meter {
    phase: Phase,
    /// Bytes of the data message being assembled (its frames' headers and payloads).
    message: usize,
    /// Bytes of the data frame being read (its header and payload so far), the last part of
    /// `message`.
    frame: usize,
    /// The largest data frame read whole. tungstenite reads a frame into one buffer sized
    /// for all of it and keeps that buffer for the connection's life (it is reused, and
    /// grown for a larger frame, never shrunk), so this much stays held after the message
    /// is complete, until the connection ends.
    kept: usize,
    hold: Hold,
    /// Bytes the last write left unwritten: tungstenite writes its whole write buffer each
    /// time, so this is what it holds unsent (0 once a write took everything). The
    /// WebSocket reader bounds the pongs held in it ([`super::ws::MAX_UNSENT_PONG_BYTES`]).
    unsent: usize,
    /// What was read of the data message being assembled (its payload unmasked), as a line
    /// reader reads a line it refuses ([`super::envelope::Sighted`]: its envelope wherever
    /// its id is, its first bytes for what is no object), kept only for one the budget may
    /// refuse (a first frame over [`UNBUDGETED_BYTES`], or a fragmented message): on a
    /// refusal the peer reads in it which request it is or answers
    /// ([`Meter::take_refused_head`]). `None` otherwise, so small messages cost nothing;
    /// freed when the message ends.
    head: Option<Box<super::envelope::Sighted>>,
    /// The head of the message last refused, until taken.
    refused_head: Vec<u8>,
}

impl Meter {
    pub(crate) fn new(budget: MessageBudget) -> Meter {
        Meter {
            phase: Phase::Http(0),
            message: 0,
            frame: 0,
            kept: 0,
            hold: Hold::new(budget),
            unsent: 0,
            head: None,
            refused_head: Vec::new(),
        }
    }

    /// The first bytes of the message the budget last refused ([`Self::head`]), once.
    pub(crate) fn take_refused_head(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.refused_head)
    }

    /// Bytes the last write to the stream left unwritten (see the field).
    pub(crate) fn unsent(&self) -> usize {
        self.unsent
    }

    pub(crate) fn rebind(&mut self, budget: MessageBudget) {
        self.hold.rebind(budget);
    }

    /// What the connection's reader holds: its read buffer (the larger of the largest frame
    /// read whole and the frame being read) plus the earlier frames of the message being
    /// assembled (copied out of that buffer by tungstenite).
    fn held(&self) -> usize {
        let earlier = self.message.saturating_sub(self.frame);
        self.kept.max(self.frame).saturating_add(earlier)
    }

    /// Follows `bytes` just read; `Err` when the message being assembled can no longer be
    /// covered (what was held is given back).
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), OverBudget> {
        while let Some((&b, rest)) = bytes.split_first() {
            match &mut self.phase {
                Phase::Http(seen) => {
                    const END: &[u8; 4] = b"\r\n\r\n";
                    *seen = if b == END[usize::from(*seen)] {
                        *seen + 1
                    } else {
                        u8::from(b == b'\r')
                    };
                    if *seen == 4 {
                        self.phase = Phase::Header {
                            bytes: [0; 14],
                            len: 0,
                        };
                    }
                    bytes = rest;
                }
                Phase::Header { bytes: header, len } => {
                    if let Some(slot) = header.get_mut(usize::from(*len)) {
                        *slot = b;
                    }
                    *len += 1;
                    let seen = *len;
                    bytes = rest;
                    if let Some(phase) = header_done(header, seen) {
                        if let Phase::Payload {
                            data: true,
                            fin,
                            remaining,
                            ..
                        } = phase
                        {
                            self.message += usize::from(seen);
                            self.frame = usize::from(seen);
                            // Only a message the budget may refuse keeps its first bytes: a
                            // lone frame within the allowance never grows what is held.
                            let small = fin && remaining <= UNBUDGETED_BYTES as u64;
                            if self.head.is_none() && !small {
                                self.head = Some(Box::default());
                            }
                        }
                        self.phase = phase;
                        self.end_of_payload();
                    }
                }
                Phase::Payload {
                    remaining,
                    data,
                    mask,
                    offset,
                    ..
                } => {
                    let take = usize::try_from(*remaining)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len());
                    let is_data = *data;
                    if let (true, Some(head)) = (is_data, self.head.as_mut()) {
                        let payload = bytes.get(..take).unwrap_or_default();
                        sight(head, payload, *mask, *offset);
                    }
                    *remaining -= take as u64;
                    *offset += take as u64;
                    bytes = bytes.get(take..).unwrap_or_default();
                    if is_data {
                        self.message = self.message.saturating_add(take);
                        self.frame = self.frame.saturating_add(take);
                        // Checked before the message may end in this read: a message is
                        // refused by its size, however the reads split it.
                        if !self.hold.cover(self.held()) {
                            return Err(self.refuse());
                        }
                    }
                    self.end_of_payload();
                }
            }
        }
        if self.hold.cover(self.held()) {
            Ok(())
        } else {
            Err(self.refuse())
        }
    }

    /// Gives back what the refused message held (the connection then ends).
    fn refuse(&mut self) -> OverBudget {
        let refused = OverBudget {
            bytes: self.message,
            limit: self.hold.limit(),
        };
        self.hold.clear();
        self.kept = 0;
        self.frame = 0;
        // Read to its last byte when that was the last of a final data frame.
        let ended = matches!(
            self.phase,
            Phase::Payload {
                remaining: 0,
                data: true,
                fin: true,
                ..
            }
        );
        self.refused_head = self.head.take().map(|h| h.head(ended)).unwrap_or_default();
        refused
    }

    /// After a payload's last byte: the next header, and the end of a data message.
    fn end_of_payload(&mut self) {
        if let Phase::Payload {
            remaining: 0,
            data,
            fin,
            ..
        } = self.phase
        {
            if data {
                self.kept = self.kept.max(self.frame);
                self.frame = 0;
                if fin {
                    // Complete: the message goes to the peer; its read buffer stays.
                    self.message = 0;
                    self.head = None;
                    self.hold.shrink_to(self.kept);
                }
            }
            self.phase = Phase::Header {
                bytes: [0; 14],
                len: 0,
            };
        }
    }
}

/// Reads `payload` (bytes of a data frame from `offset` in it, masked with `mask` if any,
/// RFC 6455 §5.3) into `head`, unmasked a small piece at a time.
fn sight(head: &mut super::envelope::Sighted, payload: &[u8], mask: Option<[u8; 4]>, offset: u64) {
    let Some(key) = mask else {
        head.feed(payload);
        return;
    };
    let mut buf = [0u8; 512];
    let mut at = offset;
    for piece in payload.chunks(buf.len()) {
        let out = buf.get_mut(..piece.len()).unwrap_or_default();
        for ((o, b), i) in out.iter_mut().zip(piece).zip(at..) {
            *o = b ^ key[(i % 4) as usize];
        }
        head.feed(out);
        at += piece.len() as u64;
    }
}

/// The payload phase a complete frame header starts, or `None` while it is incomplete
/// (RFC 6455 §5.2: FIN and opcode, then mask bit and a 7-bit, 16-bit or 64-bit length, then
/// a 4-byte masking key when masked).
fn header_done(header: &[u8; 14], len: u8) -> Option<Phase> {
    if len < 2 {
        return None;
    }
    let (b0, b1) = (header[0], header[1]);
    let short = b1 & 0x7f;
    let extended = match short {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    if usize::from(len) < 2 + extended + mask {
        return None;
    }
    let length = match extended {
        0 => u64::from(short),
        n => header[2..2 + n]
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
    };
    let opcode = b0 & 0x0f;
    let key = 2 + extended;
    let mask = match header.get(key..key + mask) {
        Some(&[a, b, c, d]) => Some([a, b, c, d]),
        _ => None,
    };
    Some(Phase::Payload {
        remaining: length,
        // Control frames (opcodes 8 and up) may come between a message's frames.
        data: opcode < 8,
        fin: b0 & 0x80 != 0,
        mask,
        offset: 0,
    })
}

/// A byte stream whose reads are followed by a [`Meter`] (see the module docs): it fails a
/// read with [`OverBudget`] once the WebSocket message being read cannot be covered. After
/// every [`super::YIELD_AFTER`] bytes read it yields to the runtime once before its next
/// read: tungstenite assembles a whole message (up to 64 MiB) in one `next()`, and the
/// connection's task would otherwise keep its worker for a whole coop budget of reads per
/// poll (issue #20, as for the line reader).
pub(crate) struct Metered<S> {
    inner: S,
    meter: Arc<Mutex<Meter>>,
    /// Bytes read since the last yield.
    since_yield: usize,
    /// The yield owed before the next read, once started.
    yielding: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The meter's `unsent` as last told it (the meter is locked only when it changes, so a
    /// connection whose writes go through never locks it to write).
    unsent: usize,
}

impl<S> Metered<S> {
    pub(crate) fn new(inner: S, meter: Arc<Mutex<Meter>>) -> Metered<S> {
        Metered {
            inner,
            meter,
            since_yield: 0,
            yielding: None,
            unsent: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        if let Some(yielding) = this.yielding.as_mut() {
            if yielding.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.yielding = None;
        }
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled().get(before..).unwrap_or_default();
                this.since_yield += new.len();
                if this.since_yield >= super::YIELD_AFTER {
                    this.since_yield = 0;
                    this.yielding = Some(Box::pin(tokio::task::yield_now()));
                }
                let mut meter = this.meter.lock().unwrap_or_else(|e| e.into_inner());
                match meter.feed(new) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(refused) => Poll::Ready(Err(io::Error::other(refused))),
                }
            }
            other => other,
        }
    }
}

impl<S> Metered<S> {
    /// Tells the meter what a write of `len` bytes left unwritten (only when it changed).
    fn note_unsent(&mut self, len: usize, result: &Poll<io::Result<usize>>) {
        let unsent = match result {
            Poll::Ready(Ok(n)) => len.saturating_sub(*n),
            Poll::Pending => len,
            Poll::Ready(Err(_)) => self.unsent,
        };
        if unsent != self.unsent {
            self.unsent = unsent;
            self.meter.lock().unwrap_or_else(|e| e.into_inner()).unsent = unsent;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    /// Writes through, noting what the write left unwritten for the meter.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_unsent(buf.len(), &result);
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Noted as a plain write is: every write path tells the meter what it left.
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        let len = bufs.iter().fold(0usize, |n, b| n.saturating_add(b.len()));
        this.note_unsent(len, &result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(fin: bool, opcode: u8, payload_len: usize) -> Vec<u8> {
        let mut f = vec![u8::from(fin) << 7 | opcode];
        if payload_len < 126 {
            f.push(0x80 | payload_len as u8);
        } else {
            f.push(0x80 | 127);
            f.extend_from_slice(&(payload_len as u64).to_be_bytes());
        }
        f.extend_from_slice(&[0; 4]);
        f.extend(std::iter::repeat_n(b'x', payload_len));
        f
    }

    /// A source that is always ready: `bytes`, in reads of at most 2 KiB, then EOF.
    struct AlwaysReady(std::collections::VecDeque<u8>);

    impl AsyncRead for AlwaysReady {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.0.len().min(buf.remaining()).min(2048);
            let chunk: Vec<u8> = self.0.drain(..n).collect();
            buf.put_slice(&chunk);
            Poll::Ready(Ok(()))
        }
    }

    /// Issue #20: a WebSocket connection streaming a large frame shares its thread. While a
    /// 1 MiB frame is read through the meter from a source that never blocks, another task
    /// on the same single-threaded runtime runs at least once per `YIELD_AFTER` bytes
    /// (before, not at all until the source was drained).
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_frame_yields_to_other_tasks_while_it_is_read() {
        use tokio::io::AsyncReadExt;
        const PAYLOAD: usize = 1024 * 1024;
        let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        bytes.extend(frame(true, 1, PAYLOAD));
        let total = bytes.len();
        let meter = Arc::new(Mutex::new(Meter::new(MessageBudget::new(4 * PAYLOAD))));
        let mut stream = Metered::new(AlwaysReady(bytes.into()), meter);
        let ticker = crate::transport::tests::Ticker::start().await;
        let mut read = Vec::new();
        stream.read_to_end(&mut read).await.unwrap();
        let during = ticker.stop();
        assert_eq!(read.len(), total);
        assert!(
            during >= PAYLOAD / super::super::YIELD_AFTER - 1,
            "the other task ran {during} times while {total} bytes were read"
        );
    }

    #[test]
    fn holds_beyond_the_allowance_are_bounded_and_given_back() {
        let budget = MessageBudget::new(1000);
        let mut a = Hold::new(budget.clone());
        let mut b = Hold::new(budget.clone());
        assert!(a.cover(UNBUDGETED_BYTES));
        assert_eq!(budget.used(), 0);
        assert!(a.cover(UNBUDGETED_BYTES + 600));
        assert!(!b.cover(UNBUDGETED_BYTES + 600));
        assert_eq!(budget.used(), 600);
        drop(a);
        assert_eq!(budget.used(), 0);
        assert!(b.cover(UNBUDGETED_BYTES + 1000));
        b.clear();
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn the_meter_follows_fragmented_messages_across_control_frames() {
        let budget = MessageBudget::new(1 << 20);
        let mut m = Meter::new(budget.clone());
        m.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        // A text message in two fragments with a ping between them.
        let first = frame(false, 1, UNBUDGETED_BYTES);
        m.feed(&first).unwrap();
        m.feed(&frame(true, 9, 4)).unwrap();
        let second = frame(true, 0, 1000);
        // Fed a byte at a time: headers split anywhere. Held: the read buffer (the larger of
        // the first frame, which tungstenite keeps, and the one being read) plus the first
        // frame's copy in the message being assembled; a header counts once it is complete,
        // and the ping not at all.
        for (i, b) in second.iter().enumerate() {
            m.feed(std::slice::from_ref(b)).unwrap();
            if i + 1 < second.len() {
                // (The second frame stays smaller than the first, kept one.)
                let held = first.len().max(i + 1) + first.len();
                assert_eq!(
                    budget.used(),
                    held - UNBUDGETED_BYTES,
                    "after {} bytes",
                    i + 1
                );
            }
        }
        // The message is complete: given back, but for the read buffer tungstenite keeps
        // (its largest frame), until the connection ends.
        assert_eq!(budget.used(), first.len() - UNBUDGETED_BYTES);
        drop(m);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn the_meter_refuses_a_message_past_the_budget_and_gives_its_bytes_back() {
        let budget = MessageBudget::new(4096);
        let mut m = Meter::new(budget.clone());
        m.feed(b"HTTP/1.1 101 Switching Protocols\r\n\r\n").unwrap();
        let big = frame(true, 1, UNBUDGETED_BYTES + 8192);
        let (start, rest) = big.split_at(UNBUDGETED_BYTES + 2048);
        m.feed(start).unwrap();
        assert!(budget.used() > 0);
        let refused = m.feed(rest).unwrap_err();
        assert_eq!(refused.limit, 4096);
        assert_eq!(budget.used(), 0);
    }

    /// A message the budget refuses leaves what a line reader keeps of a line it refuses
    /// (`envelope::Sighted`), read from every payload byte read of it, unmasked with the
    /// frame's key: the summary of its envelope, its id wherever it is in what was read
    /// (before, only the first `DISCARDED_HEAD_BYTES` were kept, and an id after them was
    /// lost), or its first bytes when it is no object. Fed a byte at a time (the key and the
    /// payload split anywhere; the refusal comes before a last id is read) and in one read
    /// (the refusal comes after). A lone frame within the allowance keeps nothing.
    #[test]
    fn a_refused_message_leaves_its_unmasked_envelope() {
        let key = [0x11, 0x22, 0x33, 0x44];
        let masked = |payload: &[u8], fin: bool| {
            let mut f = vec![u8::from(fin) << 7 | 1, 0x80 | 127];
            f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
            f.extend_from_slice(&key);
            f.extend(payload.iter().zip(0..).map(|(b, i)| b ^ key[i % 4]));
            f
        };
        let pad = "x".repeat(UNBUDGETED_BYTES + 8192);
        let first = format!(r#"{{"jsonrpc":"2.0","id":42,"method":"m","params":"{pad}"}}"#);
        let last = format!(r#"{{"jsonrpc":"2.0","method":"m","params":"{pad}","id":43}}"#);
        let batch = format!(r#"[{{"jsonrpc":"2.0","method":"m","params":"{pad}","id":44}}]"#);
        let cases = [
            (
                first.as_bytes(),
                true,
                br#"{"jsonrpc":"2.0","id":42,"method":"m","#.to_vec(),
            ),
            (
                last.as_bytes(),
                true,
                br#"{"jsonrpc":"2.0","method":"m","#.to_vec(),
            ),
            (
                last.as_bytes(),
                false,
                br#"{"jsonrpc":"2.0","id":43,"method":"m"}"#.to_vec(),
            ),
            (
                batch.as_bytes(),
                false,
                batch.as_bytes()[..crate::transport::DISCARDED_HEAD_BYTES].to_vec(),
            ),
        ];
        for (text, bytewise, want) in cases {
            let mut m = Meter::new(MessageBudget::new(4096));
            m.feed(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            // A small message first: nothing kept for it.
            m.feed(&masked(br#"{"id":1}"#, true)).unwrap();
            assert!(m.head.is_none());
            let big = masked(text, true);
            let refused = match bytewise {
                true => big
                    .iter()
                    .find_map(|b| m.feed(std::slice::from_ref(b)).err()),
                false => m.feed(&big).err(),
            };
            assert!(refused.is_some());
            let head = m.take_refused_head();
            assert_eq!(
                String::from_utf8_lossy(&head),
                String::from_utf8_lossy(&want)
            );
            assert!(m.take_refused_head().is_empty(), "taken once");
        }
    }

    /// A writer that takes at most `0` bytes of each write (vectored ones included, through
    /// tokio's default: the first non-empty slice).
    struct TakesAtMost(usize);

    impl AsyncWrite for TakesAtMost {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len().min(self.0)))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// What a vectored write leaves unwritten is noted for the meter as a plain write's is
    /// (the WebSocket reader bounds the pongs held unsent by it, `ws::MAX_UNSENT_PONG_BYTES`).
    /// Before, a vectored write went through unnoted: the meter kept what the last plain
    /// write left, 0 here, however much was held.
    #[tokio::test]
    async fn a_vectored_write_notes_what_it_left_unsent() {
        use tokio::io::AsyncWriteExt;
        let meter = Arc::new(Mutex::new(Meter::new(MessageBudget::new(1 << 20))));
        let mut w = Metered::new(TakesAtMost(10), meter.clone());
        let (a, b) = ([1u8; 100], [2u8; 50]);
        let n = w
            .write_vectored(&[io::IoSlice::new(&a), io::IoSlice::new(&b)])
            .await
            .unwrap();
        assert_eq!(n, 10);
        assert_eq!(meter.lock().unwrap().unsent(), 140);
        // A write that takes everything leaves nothing unsent.
        w.inner.0 = 1000;
        let n = w.write_vectored(&[io::IoSlice::new(&a)]).await.unwrap();
        assert_eq!(n, 100);
        assert_eq!(meter.lock().unwrap().unsent(), 0);
    }
}
