//! Transports: how JSON-RPC message texts travel. A [`Transport`] is a boxed [`FrameReader`]
//! plus a boxed [`FrameWriter`]; every line-based transport (stdio, TCP, child process,
//! in-memory pair) shares one newline-delimited framing ([`LineReader`], [`LineWriter`]), and
//! WebSocket maps text frames onto the same interface.
//!
//! Framing rules (newline-delimited JSON, as MCP's stdio transport): one message per line,
//! `\r\n` tolerated, a configurable maximum message size (default [`DEFAULT_MAX_MESSAGE_SIZE`]).
//! An oversized line is discarded up to the next newline without being buffered and reported
//! as [`Frame::Oversized`]; the connection survives.
//!
//! Partial messages of all connections together are bounded by a shared [`MessageBudget`]
//! (see [`budget`]): a line that would take the budget past its size is refused
//! ([`Frame::OverBudget`]) and discarded without being buffered.

use std::any::Any;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

pub mod budget;
pub mod child;
pub mod endpoint;
pub mod envelope;
pub mod listen;
pub mod memory;
pub mod stdio;
pub mod tcp;
pub mod ws;

pub use budget::{MessageBudget, DEFAULT_MESSAGE_BUDGET, UNBUDGETED_BYTES};

/// A boxed, sendable future, as returned by the transport traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The default maximum size of one message: 16 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// One unit read from a transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The text of one message (or of one batch), without its line terminator.
    Text(String),
    /// A message larger than the limit was discarded; `bytes` is its size as far as it was
    /// read (at least `limit + 1`).
    Oversized {
        /// How many bytes were discarded.
        bytes: usize,
        /// The limit in force.
        limit: usize,
    },
    /// A frame that is not text (invalid UTF-8 or a binary WebSocket frame), discarded.
    NotText {
        /// Why it was discarded.
        reason: String,
    },
    /// A partial message refused because the shared [`MessageBudget`] could not cover its
    /// growth: its buffer was freed and the rest of it is discarded without being buffered
    /// (over WebSocket, the connection then ends). Yielded at once, not at its end; but a
    /// line whose part read leaves a message of it in doubt (no `id` read, or one cut;
    /// nothing but whitespace; on a line of several, messages past the cut unseen) is
    /// yielded at its end, its envelope read from every byte as it streamed past (bounded),
    /// so each request is still answered under its id and each response of ours ends its
    /// request (JSON-RPC 2.0 §5).
    OverBudget {
        /// Bytes of it read when it was refused.
        bytes: usize,
        /// The budget's size.
        limit: usize,
    },
}

/// The reading half of a transport.
pub trait FrameReader: Send {
    /// The next frame; `Ok(None)` at end of stream. Must be cancel-safe: dropping the future
    /// before it completes loses no data.
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>>;
    /// Polls for the next frame without a future of its own, as [`FrameReader::next_frame`]
    /// would yield it; `None` if this reader does not poll this way (the default), and the
    /// caller then awaits `next_frame`. A reader that implements it must make progress
    /// across polls from its own state alone (as a cancel-safe `next_frame` does) and leave
    /// the task woken when a `Pending` poll can go on, so that the peer's reader needs no
    /// allocation per frame (issue #24).
    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        let _ = cx;
        None
    }
    /// Hands back the text of a frame this reader returned, once read, so that its buffer
    /// may hold the next frame instead of a new allocation per frame (issue #24). The default
    /// drops it.
    fn recycle(&mut self, text: String) {
        let _ = text;
    }
    /// Sets the maximum message size in bytes.
    fn set_max_message_size(&mut self, limit: usize);
    /// The bytes of a message this reader has begun and not yet ended, for a diagnostic
    /// when a wait ends (a peer that wrote part of a line and stalled): for line framing,
    /// the line read so far, with no newline after it. `None` when no line is begun, when
    /// the line begun is being discarded (oversized or refused by the budget: its bytes are
    /// not kept), and for a reader whose messages arrive whole (the default). Only what the
    /// reader holds already: no allocation, no read.
    fn unfinished(&self) -> Option<&[u8]> {
        None
    }
    /// How many bytes of a line over the message size bound this reader has discarded so
    /// far while that line's end is still to come (a peer still sending it), else `None`
    /// (no such line, or a reader whose messages arrive whole: the default). Only what the
    /// reader holds already: no allocation, no read; a reader wrapping another forwards it.
    fn discarding(&self) -> Option<usize> {
        None
    }
    /// Whether the stream ended in the middle of a line: the last frame this reader
    /// yielded before `Ok(None)` was that line, without its newline (the framing still
    /// takes it as a message). False for a reader whose messages arrive whole (the
    /// default).
    fn ended_mid_line(&self) -> bool {
        false
    }
    /// Whether the last [`Frame::NotText`] this reader yielded began as a JSON-RPC message
    /// does (`{` or `[`, after whitespace and a UTF-8 byte order mark): a message in the
    /// wrong encoding, which the peer answers `-32700` as it answers text that does not
    /// parse, rather than junk, which it only reports. False for a reader that does not tell
    /// (the default); a reader wrapping another forwards it, as [`Self::ended_mid_line`].
    fn not_text_began_as_json(&self) -> bool {
        false
    }
    /// What this reader kept of the message the last [`Frame::Oversized`] or
    /// [`Frame::OverBudget`] it yielded discarded, for the peer to read which request it is
    /// or answers: the summary of its envelope read from every byte the reader saw of it
    /// ([`envelope::Envelope::summary`], a JSON object text of at most about twice
    /// [`envelope::MAX_VALUE_BYTES`], read the same way), or its first bytes (at most
    /// [`DISCARDED_HEAD_BYTES`]) when it is no object; the readers here keep it by one rule
    /// (`envelope::Sighted`). After a [`Frame::NotText`], the summary of its envelope read
    /// past the bytes of another encoding ([`envelope::Envelope::lenient`]; the line
    /// reader keeps it, a step at a time as for an oversized line), so a response of the
    /// peer's side still ends its request. `None` for a reader that keeps nothing (the
    /// default). Only what the reader holds already; a reader wrapping another forwards it.
    fn discarded_head(&self) -> Option<&[u8]> {
        None
    }
    /// After a frame [`Self::discarded_head`] tells of, when it held several objects
    /// separated by whitespace (MCP's stdio framing is one message per line; the peer
    /// reads a held line of several each alone): the envelope summary of each object after
    /// the first, in order, as [`Self::discarded_head`] writes one, so each is handled as
    /// if it had come alone and been refused. When some found no room, the last entry is
    /// the JSON string `"responses not kept"`, after the string `"policy request not
    /// kept"` or `"policy notification not kept"` when a policy message (§6.7) was among
    /// those (each still read by its envelope). Empty for a reader that keeps none (the
    /// default); a reader wrapping another forwards it.
    fn discarded_rest(&self) -> &[Vec<u8>] {
        &[]
    }
    /// Sets the budget partial messages are taken from (every transport starts with
    /// [`MessageBudget::process`]). The default ignores it: a reader that buffers no
    /// partial messages has nothing to take.
    fn set_message_budget(&mut self, budget: MessageBudget) {
        let _ = budget;
    }
}

/// The writing half of a transport.
pub trait FrameWriter: Send {
    /// Sends one message text (which never contains a raw newline) and flushes it.
    fn send<'a>(&'a mut self, text: &'a str) -> BoxFuture<'a, io::Result<()>>;
    /// Sends several message texts in order, each its own message, and flushes once at the
    /// end. The default sends them one by one; byte-stream transports write them together.
    fn send_many<'a>(&'a mut self, texts: &'a [String]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            for text in texts {
                self.send(text).await?;
            }
            Ok(())
        })
    }
    /// Ends the stream in an orderly way (shutdown, close frame).
    fn close(&mut self) -> BoxFuture<'_, io::Result<()>>;
    /// Tries to hand one message to the transport without waiting (the peer's fast path:
    /// the sender writes its own frame instead of waking a writer task). The default
    /// declines, so the message goes through [`FrameWriter::send`] as usual.
    fn try_send_now(&mut self, text: &str) -> io::Result<TrySend> {
        let _ = text;
        Ok(TrySend::NotTaken)
    }
    /// Finishes a message that [`FrameWriter::try_send_now`] took only in part
    /// ([`TrySend::Partial`]): writes the rest and flushes. The default has nothing to do.
    fn flush_pending(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// What [`FrameWriter::try_send_now`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrySend {
    /// Written and flushed: nothing left to do.
    Written,
    /// Taken, but part of it (or its flush) still waits: [`FrameWriter::flush_pending`], or
    /// the next `send`, finishes it before anything else is written.
    Partial,
    /// Not taken at all (the transport would block, or does not write without waiting):
    /// send it the usual way.
    NotTaken,
}

/// A connection's two halves plus whatever must live as long as the connection (a child
/// process, a TLS session). Handed to [`crate::peer::Peer::new`].
pub struct Transport {
    /// The reading half.
    pub reader: Box<dyn FrameReader>,
    /// The writing half.
    pub writer: Box<dyn FrameWriter>,
    /// Kept alive until the connection ends, then dropped (e.g. kills a child process).
    pub guard: Option<Box<dyn Any + Send>>,
    /// A short human-readable description ("tcp 127.0.0.1:4000", "child sh").
    pub description: String,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A newline-delimited JSON transport over any byte reader and writer.
    pub fn lines<R, W>(reader: R, writer: W, description: impl Into<String>) -> Transport
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        Transport {
            reader: Box::new(LineReader::new(reader)),
            writer: Box::new(LineWriter::new(writer)),
            guard: None,
            description: description.into(),
        }
    }
}

/// Bytes one read of a line reader asks for. They are read into the polling thread's stack
/// and copied out at once: into the line being assembled, and whatever follows its newline
/// into the reader's `pending` buffer (so at most this much per connection). `pending` is
/// freed whenever a read finds nothing to read, so an idle connection holds no read buffer
/// (issue #24 counts every idle KiB; tokio's `BufReader` kept its whole buffer, zero-filled,
/// for the connection's life).
const READ_CHUNK: usize = 8 * 1024;

/// Bytes of one partial line a reader takes in (buffered, or skipped while discarding)
/// before it yields to the other tasks of its runtime. Without it, a connection streaming a
/// long line ran for a whole coop budget of reads per poll (or, over a source that never
/// blocks, to the line's end), and the runtime polled its I/O driver only every so many of
/// those polls: under 16 connections each sending 16 MiB, a new connection's `initialize`
/// waited for several such rounds (issue #20).
pub(crate) const YIELD_AFTER: usize = 64 * 1024;

/// The process-wide permits for reading large texts on the blocking pool: one per core
/// (`std::thread::available_parallelism`, at least 1). Shared by the peer (a large message
/// parsed) and the WebSocket reader (where a long message spanning lines ends), so at most
/// that many such reads run at once, whatever the number of connections.
pub(crate) fn parse_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        tokio::sync::Semaphore::new(n)
    })
}

/// The most bytes of an oversized line a [`LineReader`] keeps while it discards the rest
/// ([`FrameReader::discarded_head`]), for a line that is no JSON object (a batch, junk):
/// an object's envelope is read from every byte of it instead ([`envelope`]), in bounded
/// memory, wherever its `id` is.
pub const DISCARDED_HEAD_BYTES: usize = 2048;

/// The largest frame buffer a [`LineReader`] keeps for the next line
/// ([`FrameReader::recycle`]): what an idle connection may hold for it.
const RECYCLED_LINE_BYTES: usize = 512;

/// Newline-delimited framing over a byte stream, with a size limit that never buffers an
/// oversized line.
pub struct LineReader<R> {
    inner: R,
    /// Bytes read after the end of a line and not framed yet (`pending[pos..]`); empty,
    /// without capacity, while the connection is idle.
    pending: Vec<u8>,
    pos: usize,
    line: Vec<u8>,
    /// `Some(n)` while discarding an oversized line of which `n` bytes were seen.
    discarding: Option<usize>,
    /// Discarding the rest of a line refused by the budget (already reported).
    refused: bool,
    /// A line the budget refused whose part read leaves a message of it in doubt
    /// ([`envelope::Sighted::in_doubt`]: no `id` read or one cut, nothing but whitespace,
    /// or messages of a line of several past the cut unseen): its frame, yielded at the
    /// line's end, its rest read into its envelope (bounded) as it streams past, so an `id`
    /// (or `method`, or message) past the cut still names it.
    deferred: Option<Frame>,
    limit: usize,
    /// What `line`'s capacity takes from the shared budget.
    hold: budget::Hold,
    /// The stream ended in the middle of a line ([`FrameReader::ended_mid_line`]).
    ended_mid_line: bool,
    /// The last line that was not UTF-8 began as a message does
    /// ([`FrameReader::not_text_began_as_json`]).
    not_text_json: bool,
    /// The first bytes of the oversized line being (or last) discarded, or of the line the
    /// budget last refused, replaced by the summary of its envelope once that is known
    /// ([`FrameReader::discarded_head`]); freed when the next line begins.
    discard_head: Vec<u8>,
    /// The objects after the first on that line ([`FrameReader::discarded_rest`]).
    discard_rest: Vec<Vec<u8>>,
    /// What is read of the line being refused (its envelope, from every byte of it, and its
    /// first bytes: [`envelope::Sighted`]), until its frame is yielded.
    envelope: Option<Box<envelope::Sighted>>,
    /// What was buffered of a line when it was found oversized or refused by the budget
    /// (over [`SCAN_AT_ONCE`] bytes), read into its envelope [`YIELD_AFTER`] bytes a step
    /// before anything after it ([`LineReader::scan_step`]).
    backlog: Option<Box<Backlog>>,
}

/// Buffered bytes of a line refused (oversized, or past the budget) not yet read into its
/// envelope.
struct Backlog {
    /// The line as buffered, then the bytes of the read that crossed the bound (at most
    /// [`READ_CHUNK`]); `done` of them read.
    line: Vec<u8>,
    tail: Vec<u8>,
    done: usize,
    then: Then,
}

/// What a [`Backlog`] read to its end leads to.
enum Then {
    /// An oversized line, discarded: yielded once its newline was seen (`ended`).
    Oversized { ended: bool },
    /// A line the budget refused: yielded at once, its envelope's summary as the
    /// discarded head (`ended`: its newline was seen, the object may be whole); or, when
    /// what was read tells only a report and the line goes on, at its end
    /// ([`LineReader::deferred`]).
    OverBudget { frame: Frame, ended: bool },
    /// A line that is not UTF-8 ([`Frame::NotText`]): yielded once read, its envelope's
    /// summary, read leniently, as the discarded head.
    NotText { frame: Frame, bad_at: usize },
}

/// The most buffered bytes of an oversized line read into its envelope in the poll that
/// found it oversized; more are read [`YIELD_AFTER`] bytes a step, the reader yielding
/// between steps as while it buffers (issue #20: 16 MiB of dense numbers read at once held
/// the worker 237 ms in a debug build).
const SCAN_AT_ONCE: usize = YIELD_AFTER;

/// What one read of a [`LineReader`] gave.
enum Read {
    /// The byte reader ended.
    Eof,
    /// A frame was completed (bytes after it are kept in `pending`).
    Frame(Frame),
    /// This many bytes of a line still without its end were taken.
    Partial(usize),
}

impl<R: AsyncRead + Unpin + Send> LineReader<R> {
    /// Wraps a byte reader with the default limit.
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            pending: Vec::new(),
            pos: 0,
            line: Vec::new(),
            discarding: None,
            refused: false,
            deferred: None,
            limit: DEFAULT_MAX_MESSAGE_SIZE,
            hold: budget::Hold::new(MessageBudget::process()),
            ended_mid_line: false,
            not_text_json: false,
            discard_head: Vec::new(),
            discard_rest: Vec::new(),
            envelope: None,
            backlog: None,
        }
    }

    /// The byte reader, and the bytes read from it that no frame has taken yet: those of a
    /// line still without its end (unless it was being discarded, oversized or refused by
    /// the budget: those were never kept), then any read after the last frame.
    pub fn into_parts(mut self) -> (R, Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        let rest = pending.get(self.pos..).unwrap_or_default();
        // A line is assembled only from bytes no frame left in `pending`: at most one of
        // the two holds anything, and the line came first.
        let mut unframed = if self.discarding.is_none() && !self.refused && self.deferred.is_none()
        {
            std::mem::take(&mut self.line)
        } else {
            Vec::new()
        };
        unframed.extend_from_slice(rest);
        (self.inner, unframed)
    }

    /// The frame of a whole line; `None` while a line that is not UTF-8 is still to be
    /// read into its envelope ([`Self::scan_step`] yields it then).
    fn finish_line(&mut self) -> Option<Frame> {
        let mut bytes = std::mem::take(&mut self.line);
        // Complete: the message goes to the peer and leaves the budget.
        self.hold.clear();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        match String::from_utf8(bytes) {
            Ok(s) => Some(Frame::Text(s)),
            Err(e) => {
                self.not_text_json = begins_as_json(e.as_bytes());
                let frame = Frame::NotText {
                    reason: format!("line is not valid UTF-8: {}", e.utf8_error()),
                };
                // Its envelope says which request of ours it may answer, wherever its id
                // is: read as an oversized line's is, a step at a time past 64 KiB.
                let bad_at = e.utf8_error().valid_up_to();
                let then = Then::NotText { frame, bad_at };
                self.scan(e.into_bytes(), &[], then)
            }
        }
    }

    /// Reads the next frame. Cancel-safe: all progress lives in `self` (every read is
    /// taken apart within the poll that made it). Yields to the runtime after every 64 KiB
    /// of a line still without its end, so one long line never holds a worker thread.
    pub async fn read_frame(&mut self) -> io::Result<Option<Frame>> {
        if self.discarding.is_none() && self.discard_head.capacity() > 0 {
            // The last oversized line was yielded and looked at: a new line begins.
            self.discard_head = Vec::new();
            self.discard_rest = Vec::new();
        }
        let mut since_yield = 0usize;
        loop {
            let read = if let Some(step) = self.scan_step() {
                step
            } else if self.pos < self.pending.len() {
                let pending = std::mem::take(&mut self.pending);
                let (consumed, frame) = self.take(&pending[self.pos..]);
                self.pending = pending;
                self.pos += consumed;
                if self.pos >= self.pending.len() {
                    self.pending.clear();
                    self.pos = 0;
                }
                match frame {
                    Some(f) => Read::Frame(f),
                    None => Read::Partial(consumed),
                }
            } else {
                std::future::poll_fn(|cx| self.poll_read_chunk(cx)).await?
            };
            match read {
                Read::Frame(f) => return Ok(Some(f)),
                Read::Eof => {
                    if self.refused {
                        self.refused = false;
                        return Ok(None);
                    }
                    if let Some(frame) = self.deferred_end() {
                        // A final line without a terminator still counts as a message.
                        self.ended_mid_line = true;
                        return Ok(Some(frame));
                    }
                    if self.discarding.is_none() && self.line.is_empty() {
                        return Ok(None);
                    }
                    // A final line without a terminator still counts as a message.
                    self.ended_mid_line = true;
                    match self.end_of_line() {
                        Some(frame) => return Ok(Some(frame)),
                        // Its buffered part is read first (`scan_step`), then yielded.
                        None => continue,
                    }
                }
                Read::Partial(n) => {
                    since_yield += n;
                    if since_yield >= YIELD_AFTER {
                        since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    }

    /// One read of up to [`READ_CHUNK`] bytes into the stack, taken apart at once: what
    /// follows a completed frame goes to `pending`. Called only with `pending` drained,
    /// whose memory a read that must wait gives back.
    fn poll_read_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Read>> {
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut buf = ReadBuf::uninit(&mut chunk);
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Pending => {
                if self.pending.capacity() > 0 {
                    self.pending = Vec::new();
                }
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let got = buf.filled();
                if got.is_empty() {
                    return Poll::Ready(Ok(Read::Eof));
                }
                let (consumed, frame) = self.take(got);
                if consumed < got.len() {
                    self.pending
                        .extend_from_slice(got.get(consumed..).unwrap_or_default());
                    self.pos = 0;
                }
                Poll::Ready(Ok(match frame {
                    Some(f) => Read::Frame(f),
                    None => Read::Partial(consumed),
                }))
            }
        }
    }

    /// Takes `available` up to and including its first newline into the line being
    /// assembled (or the discard of an oversized or refused one). Returns the bytes taken
    /// and the frame they completed, if any.
    fn take(&mut self, available: &[u8]) -> (usize, Option<Frame>) {
        let newline = crate::bytes::find(b'\n', available);
        let take = newline.unwrap_or(available.len());
        let consumed = take + usize::from(newline.is_some());
        // The limit excludes the terminator; one `\r` before `\n` is tolerated on top,
        // so at most `limit + 1` bytes are ever buffered.
        if self.refused {
            // The rest of a line the budget refused: skipped, reported already.
        } else if self.deferred.is_some() {
            // The rest of a line the budget refused whose frame waits for its end: read
            // into its envelope only.
            if let Some(envelope) = self.envelope.as_mut() {
                envelope.feed(available.get(..take).unwrap_or_default());
            }
        } else if let Some(seen) = self.discarding.as_mut() {
            *seen += take;
            if let Some(envelope) = self.envelope.as_mut() {
                envelope.feed(available.get(..take).unwrap_or_default());
            }
        } else if self.line.len() + take > self.limit.saturating_add(1) {
            let part = available.get(..take).unwrap_or_default();
            self.discarding = Some(self.line.len() + take);
            // Read as it streams past from here: what is buffered (at most the limit), then
            // each piece discarded.
            let line = std::mem::take(&mut self.line);
            let then = Then::Oversized { ended: false };
            if let Some(frame) = self.scan(line, part, then) {
                return (consumed, Some(frame));
            }
        } else if !grow_line(&mut self.line, &mut self.hold, self.limit, take) {
            let frame = Frame::OverBudget {
                bytes: self.line.len() + take,
                limit: self.hold.limit(),
            };
            // What it shows of itself says which request it is, as for an oversized line:
            // its envelope as far as it was read (its rest is never seen: it is refused now).
            let part = available.get(..take).unwrap_or_default();
            self.refused = newline.is_none();
            let line = std::mem::take(&mut self.line);
            let ended = newline.is_some();
            return (
                consumed,
                self.scan(line, part, Then::OverBudget { frame, ended }),
            );
        } else {
            self.line
                .extend_from_slice(available.get(..take).unwrap_or_default());
        }
        if newline.is_none() {
            return (consumed, None);
        }
        if std::mem::take(&mut self.refused) {
            return (consumed, None);
        }
        if let Some(frame) = self.deferred_end() {
            return (consumed, Some(frame));
        }
        (consumed, self.end_of_line())
    }

    /// The frame of a line the budget refused, deferred to its end ([`Self::deferred`]),
    /// now that it ended: what its envelope read of every byte of it is kept.
    fn deferred_end(&mut self) -> Option<Frame> {
        let frame = self.deferred.take()?;
        if let Some(sighted) = self.envelope.take() {
            (self.discard_head, self.discard_rest) = envelope::kept(*sighted, true);
        }
        Some(frame)
    }

    /// The frame a line's end completes; `None` while the buffered part of an oversized
    /// line is still to be read into its envelope ([`Self::scan_step`] yields it then).
    fn end_of_line(&mut self) -> Option<Frame> {
        if let Some(backlog) = self.backlog.as_mut() {
            backlog.then = Then::Oversized { ended: true };
            return None;
        }
        if let Some(bytes) = self.discarding.take() {
            if let Some(sighted) = self.envelope.take() {
                (self.discard_head, self.discard_rest) = envelope::kept(*sighted, true);
            }
            return Some(Frame::Oversized {
                bytes,
                limit: self.limit,
            });
        }
        let len = self.line.len();
        if len > self.limit && !(len == self.limit + 1 && self.line.ends_with(b"\r")) {
            // Over the limit by its last byte (the one a `\r` may take): discarded as one
            // found oversized while it streamed, its envelope read the same way.
            self.discarding = Some(len);
            let line = std::mem::take(&mut self.line);
            return self.scan(line, &[], Then::Oversized { ended: true });
        }
        self.finish_line()
    }

    /// Begins reading `line` (the buffered part of a line refused) and `part` (what the
    /// read that refused it brought) into a new envelope, by [`Self::scan_step`]: all of it
    /// now when it is at most [`SCAN_AT_ONCE`] bytes (the frame it leads to, if any), else
    /// nothing yet, kept as the [`Backlog`] (its budget still held) for the reader's next
    /// steps.
    fn scan(&mut self, line: Vec<u8>, part: &[u8], then: Then) -> Option<Frame> {
        self.envelope = Some(Box::new(match then {
            Then::NotText { bad_at, .. } => envelope::Sighted::lenient(bad_at),
            _ => envelope::Sighted::default(),
        }));
        let small = line.len() + part.len() <= SCAN_AT_ONCE;
        self.backlog = Some(Box::new(Backlog {
            line,
            tail: part.to_vec(),
            done: 0,
            then,
        }));
        while small && self.backlog.is_some() {
            if let Some(Read::Frame(frame)) = self.scan_step() {
                return Some(frame);
            }
        }
        None
    }

    /// One step of reading the [`Backlog`] into the envelope: at most [`YIELD_AFTER`]
    /// bytes, counted by the caller towards its next yield; once all is read, the backlog
    /// and its budget are released and what it leads to is yielded ([`Then`]). `None` when
    /// there is no backlog.
    fn scan_step(&mut self) -> Option<Read> {
        let backlog = self.backlog.as_mut()?;
        let total = backlog.line.len() + backlog.tail.len();
        let from = backlog.done;
        let to = total.min(from.saturating_add(YIELD_AFTER));
        if let Some(envelope) = self.envelope.as_mut() {
            let split = backlog.line.len();
            let line = backlog.line.get(from.min(split)..to.min(split));
            let tail = backlog
                .tail
                .get(from.max(split) - split..to.max(split) - split);
            envelope.feed(line.unwrap_or_default());
            envelope.feed(tail.unwrap_or_default());
        }
        backlog.done = to;
        if to < total {
            return Some(Read::Partial(to - from));
        }
        let then = self.backlog.take().map(|b| b.then);
        self.hold.clear();
        let frame = match then {
            Some(Then::Oversized { ended: true }) => self.end_of_line(),
            // Its part read leaves a message of the line in doubt (no id, or one cut; only
            // whitespace; messages past the cut unseen): the rest of the line is read into
            // the envelope as it streams past, and the frame yielded at its end, so each
            // is answered under its id (JSON-RPC 2.0 §5).
            Some(Then::OverBudget {
                frame,
                ended: false,
            }) if self.envelope.as_ref().is_some_and(|s| s.in_doubt()) => {
                self.refused = false;
                self.deferred = Some(frame);
                None
            }
            Some(Then::OverBudget { frame, ended }) => {
                if let Some(sighted) = self.envelope.take() {
                    (self.discard_head, self.discard_rest) = envelope::kept(*sighted, ended);
                }
                Some(frame)
            }
            Some(Then::NotText { frame, .. }) => {
                if let Some(sighted) = self.envelope.take() {
                    (self.discard_head, self.discard_rest) = envelope::kept(*sighted, true);
                }
                Some(frame)
            }
            Some(Then::Oversized { ended: false }) | None => None,
        };
        Some(match frame {
            Some(frame) => Read::Frame(frame),
            None => Read::Partial(to - from),
        })
    }
}

impl<R: AsyncRead + Unpin + Send> FrameReader for LineReader<R> {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(self.read_frame())
    }

    /// Keeps a small frame's buffer (at most `RECYCLED_LINE_BYTES`, 512) as the next line's,
    /// when no line is being assembled; it stays within [`budget::UNBUDGETED_BYTES`].
    fn recycle(&mut self, text: String) {
        if self.line.capacity() == 0
            && self.discarding.is_none()
            && text.capacity() <= RECYCLED_LINE_BYTES
        {
            let mut line = text.into_bytes();
            line.clear();
            self.line = line;
        }
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        // `read_frame` keeps all its progress in `self` and waits only on the byte reader
        // (whose `poll_read` registers the waker) or `yield_now` (which wakes the task
        // itself), so a fresh future per poll, on the stack, reads exactly what one boxed
        // future polled to the end would.
        let fut = self.read_frame();
        let mut fut = std::pin::pin!(fut);
        Some(fut.as_mut().poll(cx))
    }

    fn set_max_message_size(&mut self, limit: usize) {
        self.limit = limit;
    }

    fn unfinished(&self) -> Option<&[u8]> {
        let begun = self.discarding.is_none()
            && !self.refused
            && self.deferred.is_none()
            && !self.line.is_empty();
        begun.then_some(self.line.as_slice())
    }

    fn discarding(&self) -> Option<usize> {
        self.discarding
    }

    fn ended_mid_line(&self) -> bool {
        self.ended_mid_line
    }

    fn not_text_began_as_json(&self) -> bool {
        self.not_text_json
    }

    fn discarded_head(&self) -> Option<&[u8]> {
        (self.discarding.is_none() && !self.discard_head.is_empty())
            .then_some(self.discard_head.as_slice())
    }

    fn discarded_rest(&self) -> &[Vec<u8>] {
        match self.discarding {
            None => &self.discard_rest,
            Some(_) => &[],
        }
    }

    fn set_message_budget(&mut self, budget: MessageBudget) {
        self.hold.rebind(budget);
        // What the line already holds is taken from the new budget at its next growth.
    }
}

/// Whether `bytes` begin as a JSON-RPC message or batch does: `{` or `[` after what the
/// peer reads past before a frame's text's message for its id (`jsonrpc::message_start`:
/// whitespace and a UTF-8 byte order mark), read in the UTF-8 the bytes begin with: one
/// reading, so a request in the wrong encoding is answered wherever the same request in
/// UTF-8 is answered (taken, or refused for what precedes it, `jsonrpc::message_lead`).
/// Such bytes are refused either way: reading past more than JSON whitespace takes nothing.
/// Only the leading bytes are read, up to the first past what precedes a message (the
/// byte readers' one reading, `jsonrpc::envelope::Lead`): a WebSocket binary frame of up to
/// 16 MiB costs its leading whitespace, not a UTF-8 check of the whole frame.
pub(crate) fn begins_as_json(bytes: &[u8]) -> bool {
    begins_as_json_from(bytes.iter().copied())
}

/// [`begins_as_json`] over bytes read one at a time, none past the one the message would
/// begin with.
fn begins_as_json_from(bytes: impl IntoIterator<Item = u8>) -> bool {
    let mut lead = crate::jsonrpc::envelope::Lead::default();
    bytes
        .into_iter()
        .find_map(|b| lead.step(b))
        .is_some_and(|b| b == b'{' || b == b'[')
}

/// Makes room for `more` bytes in `line`, its capacity covered by `hold` (grown by doubling,
/// up to `limit + 1`); `false` when the budget cannot cover it.
fn grow_line(line: &mut Vec<u8>, hold: &mut budget::Hold, limit: usize, more: usize) -> bool {
    let need = line.len() + more;
    if need <= line.capacity() {
        return true;
    }
    let target = need
        .max(line.capacity() * 2)
        .min(limit.saturating_add(1))
        .max(need);
    if !hold.cover(target) {
        return false;
    }
    line.reserve_exact(target - line.len());
    true
}

/// Newline-delimited framing for writing: each message followed by `\n`, then a flush.
pub struct LineWriter<W> {
    inner: W,
    /// Reused between writes; shrunk back after an unusually large message.
    buf: Vec<u8>,
    /// How much of `buf` is already written (non-zero only after a partial
    /// [`FrameWriter::try_send_now`]).
    written: usize,
    /// A flush is still owed for bytes already written.
    unflushed: bool,
}

/// Capacity the write buffer keeps between messages (more is released after a burst, so an
/// idle connection stays small).
const WRITE_BUFFER_KEEP: usize = 8 * 1024;

impl<W: AsyncWrite + Unpin + Send> LineWriter<W> {
    /// Wraps a byte writer.
    pub fn new(inner: W) -> Self {
        LineWriter {
            inner,
            buf: Vec::new(),
            written: 0,
            unflushed: false,
        }
    }

    /// Drops the already-written part of the buffer, keeping what a partial
    /// `try_send_now` left, before new lines are appended.
    fn compact(&mut self) {
        if self.written > 0 {
            self.buf.drain(..self.written);
            self.written = 0;
        }
    }

    /// Writes the buffered lines with one `write_all` and one flush.
    async fn write_buffer(&mut self) -> io::Result<()> {
        let result = self.inner.write_all(&self.buf[self.written..]).await;
        self.buf.clear();
        self.written = 0;
        if self.buf.capacity() > WRITE_BUFFER_KEEP {
            self.buf.shrink_to(WRITE_BUFFER_KEEP);
        }
        result?;
        self.inner.flush().await?;
        self.unflushed = false;
        Ok(())
    }
}

impl<W: AsyncWrite + Unpin + Send> FrameWriter for LineWriter<W> {
    fn send<'a>(&'a mut self, text: &'a str) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            self.compact();
            self.buf.extend_from_slice(text.as_bytes());
            self.buf.push(b'\n');
            self.write_buffer().await
        })
    }

    fn send_many<'a>(&'a mut self, texts: &'a [String]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            self.compact();
            for text in texts {
                self.buf.extend_from_slice(text.as_bytes());
                self.buf.push(b'\n');
            }
            self.write_buffer().await
        })
    }

    fn close(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            if self.written < self.buf.len() || self.unflushed {
                self.write_buffer().await?;
            }
            self.inner.shutdown().await
        })
    }

    /// Polls the byte writer once with a waker that is never woken: whatever it accepts
    /// right now is written; a `Pending` costs nothing because the writer task polls again
    /// with its own waker ([`FrameWriter::flush_pending`]).
    fn try_send_now(&mut self, text: &str) -> io::Result<TrySend> {
        if self.written < self.buf.len() || self.unflushed {
            // Something is still owed: the writer task finishes it first.
            return Ok(TrySend::NotTaken);
        }
        self.buf.clear();
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.push(b'\n');
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        while self.written < self.buf.len() {
            match Pin::new(&mut self.inner).poll_write(&mut cx, &self.buf[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote no bytes"));
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending if self.written == 0 => {
                    self.buf.clear();
                    return Ok(TrySend::NotTaken);
                }
                Poll::Pending => return Ok(TrySend::Partial),
            }
        }
        self.buf.clear();
        self.written = 0;
        if self.buf.capacity() > WRITE_BUFFER_KEEP {
            self.buf.shrink_to(WRITE_BUFFER_KEEP);
        }
        match Pin::new(&mut self.inner).poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => Ok(TrySend::Written),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => {
                self.unflushed = true;
                Ok(TrySend::Partial)
            }
        }
    }

    fn flush_pending(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            if self.written < self.buf.len() || self.unflushed {
                self.write_buffer().await?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
