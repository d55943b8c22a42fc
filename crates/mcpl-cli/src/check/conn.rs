//! The checker's own connection: any target (a child's stdio, `tcp://`, `ws://`, `wss://`,
//! `mcpl://`) is opened as a library [`Transport`] and pumped on a private tokio runtime
//! thread into a channel, so every wait of the checker is a bounded `recv_timeout`. An
//! optional JSON Lines transcript records every frame.
//!
//! This is deliberately not `mcpl::peer`: the checker reads raw [`Frame`]s, because it must
//! see what a well-behaved peer would answer or hide for it (junk lines, notifications posing
//! as requests, responses to ids it never sent, batches, over-long lines).
//!
//! A spawned target runs in its own process group, and the whole group is ended when its
//! connection ends ([`end_group`]): a server's forked children, even ones holding its stdout
//! and ignoring SIGTERM, do not outlive the check (issue #20).
//!
//! Bounded whatever the server sends (issue #20): one frame is at most the library's
//! [`mcpl::transport::DEFAULT_MAX_MESSAGE_SIZE`] (16 MiB; a longer one is discarded and
//! reported); a frame that would cost more than [`mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST`]
//! parsed is discarded unbuilt and reported; a non-JSON frame is kept as its first
//! [`JUNK_CHARS`] characters; frames received and not yet judged hold at most
//! [`QUEUED_BYTES`] per connection, counting each as its text plus [`UNIT_BYTES`] per
//! parsed-cost unit, and every event (junk and discarded frames too) its queue slot,
//! [`EVENT_BYTES`] (past it the pump stops reading, so the server's writes block), and so
//! do the checker's own frames the server has not read yet, [`UNSENT_BYTES`]; the
//! transcript holds at most
//! [`TRANSCRIPT_BYTES`] and records the first [`TRANSCRIPT_JUNK`] non-JSON frames, counting
//! what it leaves out in a last `{"direction": "note", "omitted": {frames, junk}}` line.
//!
//! A line the server began and did not end (§4: one message per line) is said, never
//! dropped in silence: [`Conn::unfinished`] quotes the one it is writing when a wait ends,
//! and an end of stream inside a line says so in its [`Event::Closed`] reason, both quoting
//! at most [`UNFINISHED_QUOTE_BYTES`] of it.
//!
//! A frame that parsed is scanned once more for a member name repeated within one of its
//! objects ([`super::repeated`]): what parsing it into a `Value` kept silent (the last name
//! wins) arrives as an [`Event::Repeated`] just before the frame.

mod classify;
mod event;
mod past;
mod process;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use super::spread::{SpreadReader, Spreads};
use super::stderr::Tail;
use classify::{
    discard, discard_answer, not_text_refusal, on_the_line, received, rest_answers, text_events,
};
pub(crate) use event::own_bound_reason;
pub use event::Event;
use mcpl::protocol::push::timestamp_millis;
use mcpl::transport::child::ChildControl;
use mcpl::transport::{endpoint, Frame, FrameReader, Transport};
use process::end_group;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Bytes of received frames queued for the checker to judge, per connection: text and
/// parsed values (estimated at [`UNIT_BYTES`] per [`mcpl::jsonrpc::parsed_cost`] unit).
pub const QUEUED_BYTES: usize = 32 * 1024 * 1024;
/// Bytes of the checker's own frames (its answers, above all) queued for a server that has
/// not read them, per connection: past it the pump stops reading, so a server that writes
/// without reading (its writes then block) cannot make the checker queue answers without
/// bound; one whose requests the checker answers at length (an unknown feature set's name
/// is echoed in the error's `data`) had it queue 8 MiB per push.
pub const UNSENT_BYTES: usize = 32 * 1024 * 1024;
/// The bytes one parsed-cost unit is counted as in [`QUEUED_BYTES`] (a `serde_json::Value`
/// is 32 bytes; an object counts 20 units, about its map node).
pub const UNIT_BYTES: usize = 32;
/// The most bytes written to a transcript (every session together); frames past it are
/// counted, not written.
pub const TRANSCRIPT_BYTES: u64 = 64 * 1024 * 1024;
/// Non-JSON frames recorded in the transcript; later ones are counted.
pub const TRANSCRIPT_JUNK: u64 = 100;
/// Characters of a non-JSON frame kept for the report.
pub const JUNK_CHARS: usize = 200;
/// Bytes of a line left unfinished quoted in the report (its length is said whole).
pub const UNFINISHED_QUOTE_BYTES: usize = 160;
/// How long [`Conn::unfinished`] waits for the pump to look (it answers between two reads;
/// it is late only while its runtime thread is starved).
pub const UNFINISHED_WAIT: Duration = Duration::from_secs(1);
/// What one queued event costs in [`QUEUED_BYTES`] besides its text and parsed values: its
/// slot in the queue and the allocator's share of its text (issue #20). A flood of
/// two-byte lines that are not UTF-8 had been counted as nothing, so the queue grew without
/// bound while the checker was slower than the server.
pub const EVENT_BYTES: usize = std::mem::size_of::<(Event, usize)>() + 32;

/// A JSON Lines transcript: `{direction, time, session, message}` per frame, one file for
/// every session of a run. Bounded: [`TRANSCRIPT_BYTES`] in all and [`TRANSCRIPT_JUNK`]
/// non-JSON frames; what is left out is counted in a last line
/// `{"direction": "note", "omitted": {frames, junk}}`.
#[derive(Debug, Clone)]
pub struct Transcript {
    out: Arc<Mutex<TranscriptFile>>,
    /// The session whose frames this handle records (1 for the first).
    session: usize,
}

/// The transcript's file and what its bounds left out.
#[derive(Debug)]
struct TranscriptFile {
    w: BufWriter<File>,
    written: u64,
    junk: u64,
    /// Frames not written because [`TRANSCRIPT_BYTES`] was spent.
    omitted_frames: u64,
    /// Non-JSON frames not written past [`TRANSCRIPT_JUNK`].
    omitted_junk: u64,
    failed: bool,
}

impl Drop for TranscriptFile {
    fn drop(&mut self) {
        if self.omitted_frames > 0 || self.omitted_junk > 0 {
            let note = json!({ "direction": "note", "omitted": {
                "frames": self.omitted_frames, "junk": self.omitted_junk } });
            let _ = writeln!(self.w, "{note}");
        }
        let _ = self.w.flush();
    }
}

impl Transcript {
    /// Creates (truncates) `path`; frames are recorded as the first session's.
    pub fn create(path: &std::path::Path) -> io::Result<Transcript> {
        let file = TranscriptFile {
            w: BufWriter::new(File::create(path)?),
            written: 0,
            junk: 0,
            omitted_frames: 0,
            omitted_junk: 0,
            failed: false,
        };
        Ok(Transcript {
            out: Arc::new(Mutex::new(file)),
            session: 1,
        })
    }

    /// Records a received non-JSON frame (as a JSON string), unless [`TRANSCRIPT_JUNK`]
    /// were recorded already.
    fn write_junk(&self, text: &str) {
        if let Ok(mut f) = self.out.lock() {
            f.junk += 1;
            if f.junk > TRANSCRIPT_JUNK {
                f.omitted_junk += 1;
                return;
            }
        }
        self.write("received", Value::String(text.to_owned()));
    }

    /// The same file, recording frames as session `session`'s.
    pub fn for_session(&self, session: usize) -> Transcript {
        Transcript {
            out: self.out.clone(),
            session,
        }
    }

    /// Appends one frame; `direction` is `sent` or `received`. Write errors are reported
    /// once on stderr rather than aborting the run.
    fn write(&self, direction: &str, message: Value) {
        self.write_line(
            json!({ "direction": direction, "time": timestamp_millis(SystemTime::now()),
                    "session": self.session, "message": message }),
        );
    }

    /// Records a received frame the transport discarded: `message` is `null` and
    /// `discarded` says why (there is no text to record).
    fn write_discarded(&self, why: &str) {
        self.write_line(
            json!({ "direction": "received", "time": timestamp_millis(SystemTime::now()),
            "session": self.session, "message": null, "discarded": why }),
        );
    }

    fn write_line(&self, line: Value) {
        let Ok(mut f) = self.out.lock() else {
            return;
        };
        let text = line.to_string();
        let cost = text.len() as u64 + 1;
        if f.failed || f.written + cost > TRANSCRIPT_BYTES {
            f.omitted_frames += 1;
            return;
        }
        f.written += cost;
        if writeln!(f.w, "{text}").and_then(|()| f.w.flush()).is_err() {
            f.failed = true;
            crate::term::emit_err("mcpl check: cannot write the transcript\n");
        }
    }
}

/// What to open.
#[derive(Debug, Clone)]
pub enum Dial {
    /// Spawn this command line and talk over its stdin/stdout (stderr passes through, its
    /// last lines kept: [`Conn::exited`]).
    Command(Vec<String>),
    /// An address [`endpoint::connect`] understands (`tcp://…`, `ws://…`, `wss://…`,
    /// `mcpl://…`); `tls` overrides the bundled roots for `wss:`.
    Endpoint {
        /// The address.
        address: String,
        /// Roots to trust for `wss:` instead of the bundled ones.
        tls: Option<Arc<rustls::ClientConfig>>,
    },
}

/// When an event arrived: the instant, and how many of the checker's frames the pump had
/// written by then ([`Conn::written_before`]).
type Stamp = (Instant, u64);

/// One event from the pump: what arrived, the bytes it holds of the queue bound, and when.
type Arrival = (Event, usize, Stamp);

/// The [`Stamp`] of an event arriving now, `written` frames of the checker's written.
fn stamp(written: &AtomicU64) -> Stamp {
    (Instant::now(), written.load(Ordering::SeqCst))
}

/// A live connection to the server under test.
pub struct Conn {
    /// Messages for the pump to write; dropped first to end the pump.
    out: Option<UnboundedSender<String>>,
    /// Asks the pump what the reader holds of a line without its end ([`Conn::unfinished`]).
    asks: UnboundedSender<mpsc::Sender<Option<String>>>,
    /// Dropped with `out`: the pump then writes what is still queued within its bound and
    /// gives up on a server that does not read it.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    rx: Receiver<Arrival>,
    /// An event that arrived after the deadline of the `recv` that took it: the next `recv`
    /// returns it first.
    held: std::cell::RefCell<Option<Arrival>>,
    /// Bytes of the frames in `rx` ([`QUEUED_BYTES`]).
    queued: Arc<AtomicUsize>,
    /// Bytes of the frames sent and not yet written ([`UNSENT_BYTES`]).
    unsent: Arc<AtomicUsize>,
    /// The checker's frames sent (queued for the pump), the last one's number.
    sent: u64,
    /// How many of the checker's frames were written when the event [`Conn::recv`] last
    /// returned arrived.
    written_before: std::cell::Cell<u64>,
    pump: Option<JoinHandle<()>>,
    transcript: Option<Transcript>,
    /// A spawned server's exit (`exit status: 3`), sent once it has exited.
    exit: Option<Receiver<String>>,
    /// A spawned server's last stderr lines.
    stderr: Tail,
    /// What [`Conn::exited`] found, once it found it.
    exited: Option<String>,
    /// The connection's time bound: past it, it reads as ended.
    bound: Option<(Instant, Duration)>,
}

impl Conn {
    /// Passes a spawned server's stderr through from now on, with what it wrote so far
    /// (held until `initialize` is answered, [`super::stderr`]).
    pub fn release_stderr(&self) {
        self.stderr.release();
    }

    /// Opens `dial`; connecting (not spawning) is bounded by `timeout`, which also bounds
    /// the orderly close when the connection is dropped.
    pub fn open(dial: Dial, timeout: Duration, transcript: Option<Transcript>) -> io::Result<Conn> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        let (events, rx) = mpsc::channel();
        let (out, out_rx) = unbounded_channel::<String>();
        let (asks, asks_rx) = unbounded_channel();
        let tr = transcript.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let unsent = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(AtomicU64::new(0));
        // The checker's frames the pump has written, counted as each write returns.
        let counts = (queued.clone(), unsent.clone(), written);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<String>();
        let stderr = Tail::default();
        let tail = stderr.clone();
        let pump = thread::spawn(move || {
            runtime.block_on(async move {
                let opened = match open(dial, timeout, exit_tx, tail).await {
                    Ok(opened) => opened,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let ends = (timeout, stopped);
                pump(opened, events, (out_rx, asks_rx), tr, ends, counts).await;
            });
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Conn {
                out: Some(out),
                asks,
                stop: Some(stop),
                rx,
                held: std::cell::RefCell::new(None),
                queued,
                unsent,
                sent: 0,
                written_before: std::cell::Cell::new(0),
                pump: Some(pump),
                transcript,
                exit: Some(exit_rx),
                stderr,
                exited: None,
                bound: None,
            }),
            Ok(Err(e)) => {
                let _ = pump.join();
                Err(e)
            }
            Err(_) => {
                let _ = pump.join();
                Err(io::Error::other("connection thread ended"))
            }
        }
    }

    /// Sends one message as one frame (queued for the pump; a write failure arrives later
    /// as [`Event::Closed`]).
    pub fn send(&mut self, message: &Value) -> io::Result<()> {
        if let Some(t) = &self.transcript {
            t.write("sent", message.clone());
        }
        let text = message.to_string();
        let len = text.len();
        self.unsent.fetch_add(len, Ordering::Relaxed);
        let sent = self.out.as_ref().and_then(|out| out.send(text).ok());
        if sent.is_none() {
            self.unsent.fetch_sub(len, Ordering::Relaxed);
        } else {
            self.sent = self.sent.saturating_add(1);
        }
        sent.ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "connection closed"))
    }

    /// The number of the last frame [`Conn::send`] queued (1 for the first; 0 before any).
    pub fn sent_frames(&self) -> u64 {
        self.sent
    }

    /// How many of the checker's frames (numbered as [`Conn::sent_frames`] numbers them)
    /// the pump had written to the server when the event [`Conn::recv`] last returned
    /// arrived: a frame numbered past it had not reached the server when the server's
    /// bytes did, so the server had not read it.
    pub fn written_before(&self) -> u64 {
        self.written_before.get()
    }

    /// What the server has written of a line without its end yet, when it has (a start of
    /// an answer, then a stall): its length and its first [`UNFINISHED_QUOTE_BYTES`],
    /// quoted, for the report of a wait that ended. `None` when no line is begun, when the
    /// one begun is being discarded (oversized), over a transport whose messages arrive
    /// whole (WebSocket), or when the pump does not answer within [`UNFINISHED_WAIT`].
    pub fn unfinished(&self) -> Option<String> {
        let (tx, rx) = mpsc::channel();
        self.asks.send(tx).ok()?;
        rx.recv_timeout(UNFINISHED_WAIT).ok().flatten()
    }

    /// From now on, the connection reads as ended once `bound` has passed: however the
    /// server trickles its messages, a session ends.
    pub fn set_time_bound(&mut self, bound: Duration) {
        self.bound = Some((Instant::now() + bound, bound));
    }

    /// The next event, or `None` when `deadline` passes first. Past the time bound
    /// ([`Conn::set_time_bound`]) the connection reads as ended. An event that arrived after
    /// `deadline` is held for the next call and `None` returned: however fast a server
    /// writes (and however far the judging lags behind), a step's deadline ends the step
    /// once what arrived before it is judged.
    pub fn recv(&self, deadline: Instant) -> Option<Event> {
        let deadline = match self.bound {
            Some((end, bound)) if Instant::now() >= end => {
                return Some(Event::Closed(format!(
                    "the session's time bound ({:.0} s) was reached",
                    bound.as_secs_f64()
                )))
            }
            Some((end, _)) => deadline.min(end),
            None => deadline,
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        let held = self.held.borrow_mut().take();
        match held.map_or_else(|| self.rx.recv_timeout(wait), Ok) {
            Ok((e, cost, (at, written))) if at > deadline => {
                *self.held.borrow_mut() = Some((e, cost, (at, written)));
                None
            }
            Ok((e, cost, (_, written))) => {
                self.queued.fetch_sub(cost, Ordering::Relaxed);
                self.written_before.set(written);
                Some(e)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Event::Closed("connection closed".into())),
        }
    }
}

impl Conn {
    /// When the target is a spawned server that has exited (waiting at most `wait` for the
    /// exit to be seen): its exit status and the last lines of its stderr, for the report.
    /// `None` for an address, or a server still running.
    pub fn exited(&mut self, wait: Duration) -> Option<String> {
        if self.exited.is_none() {
            let status = self.exit.as_ref()?.recv_timeout(wait).ok()?;
            let (lines, total) = self.stderr.lines();
            // Quoted here once: what was held is not also written out (issue #18 item 7).
            self.stderr.discard();
            self.exited = Some(if lines.is_empty() {
                format!("{status}; it wrote nothing to stderr")
            } else if total > lines.len() {
                format!(
                    "{status}; the last {} of its {total} stderr lines:\n    {}",
                    lines.len(),
                    lines.join("\n    ")
                )
            } else {
                format!("{status}; its stderr:\n    {}", lines.join("\n    "))
            });
        }
        self.exited.clone()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the pump: it closes the transport and kills a child (the run is over: a
        // server that would not exit on its own must not outlive it).
        self.out = None;
        self.stop = None;
        if let Some(pump) = self.pump.take() {
            let _ = pump.join();
        }
        // Whatever is still held was never quoted: it is written out, not lost.
        self.stderr.release();
    }
}

/// An opened transport, with the child's control when it is a process.
struct Opened {
    transport: Transport,
    child: Option<ChildControl>,
    /// Line framing: blank lines between messages are skipped (as JSON Lines readers do);
    /// an empty WebSocket message is junk.
    skip_blank: bool,
    /// A spawned server's monitor: reports its exit once its stderr has ended.
    monitor: Option<tokio::task::JoinHandle<()>>,
}

/// How long a server's stderr may stay open after it exited (a grandchild holding it)
/// before its exit is reported without the rest.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// How long the server's output is still read after a write to it failed (it closed its
/// input, or exited) before the failed write is reported as the end: what it wrote before
/// it ended is quoted, not lost.
const READ_AFTER_FAILED_WRITE: Duration = Duration::from_secs(1);

async fn open(
    dial: Dial,
    timeout: Duration,
    exit: mpsc::Sender<String>,
    tail: Tail,
) -> io::Result<Opened> {
    match dial {
        Dial::Command(argv) => {
            let (prog, args) = argv
                .split_first()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
            let mut command = tokio::process::Command::new(prog);
            command.args(args);
            // Its own process group (pgid = its pid), so that `end_group` reaches every
            // process it forks.
            #[cfg(unix)]
            command.process_group(0);
            let (transport, control, stderr) =
                mcpl::transport::child::spawn_with_stderr(&mut command)?;
            let copy = tokio::spawn(super::stderr::pass_through(stderr, tail));
            let child = control.clone();
            let monitor = tokio::spawn(async move {
                let status = child.wait().await;
                let _ = tokio::time::timeout(STDERR_GRACE, copy).await;
                let status = match status {
                    Ok(s) => format!("it exited ({s})"),
                    Err(e) => format!("its exit status is unknown ({e})"),
                };
                let _ = exit.send(status);
            });
            Ok(Opened {
                transport,
                child: Some(control),
                skip_blank: true,
                monitor: Some(monitor),
            })
        }
        Dial::Endpoint { address, tls } => {
            let skip_blank = address.starts_with("tcp://");
            match tokio::time::timeout(timeout, endpoint::connect(&address, tls)).await {
                Ok(Ok(transport)) => Ok(Opened {
                    transport,
                    child: None,
                    skip_blank,
                    monitor: None,
                }),
                Ok(Err(e)) => Err(io::Error::other(e.to_string())),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {address} timed out"),
                )),
            }
        }
    }
}

/// Moves frames both ways until the [`Conn`] is dropped (`stopped` resolves) or a write
/// fails; then writes what is still queued and closes the transport, both within `bound`
/// (a server that does not read had held a blocked write, and the checker, for ever), and
/// ends a child's process group ([`end_group`]).
async fn pump(
    opened: Opened,
    events: mpsc::Sender<Arrival>,
    (mut out, mut asks): (UnboundedReceiver<String>, UnboundedReceiver<Ask>),
    transcript: Option<Transcript>,
    (bound, stopped): (Duration, tokio::sync::oneshot::Receiver<()>),
    (queued, unsent, written): (Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicU64>),
) {
    let Opened {
        transport,
        child,
        skip_blank,
        monitor,
    } = opened;
    let Transport {
        reader,
        mut writer,
        guard,
        ..
    } = transport;
    // Line framing: a message spread over several lines is joined, and said
    // ([`super::spread`]); a WebSocket message is whole already.
    let spreads = Spreads::default();
    let mut reader: Box<dyn FrameReader> = if skip_blank {
        Box::new(SpreadReader::new(reader, spreads.clone()))
    } else {
        reader
    };
    let unfinished_now = |reader: &dyn FrameReader| {
        reader
            .unfinished()
            .map(unfinished_line)
            .or_else(|| spreads.holding())
    };
    // Told once the read side has sent its last event.
    let (read_ended, mut read_ended_rx) = tokio::sync::oneshot::channel::<()>();
    let read = async {
        // The last line, when the stream ended inside it ([`FrameReader::ended_mid_line`]).
        let mut ended_inside: Option<String> = None;
        loop {
            // Backpressure: the server's frames wait in its pipe or socket, not here, also
            // while it does not read what the checker wrote (its answers among them).
            while queued.load(Ordering::Relaxed) > QUEUED_BYTES
                || unsent.load(Ordering::Relaxed) > UNSENT_BYTES
            {
                let asked = tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(1)) => None,
                    Some(ask) = asks.recv() => Some(ask),
                };
                if let Some(ask) = asked {
                    let _ = ask.send(unfinished_now(&*reader));
                }
            }
            // Between two reads (a read is cancel-safe), the checker may ask what the reader
            // holds of a line without its end.
            let next = tokio::select! {
                biased;
                Some(ask) = asks.recv() => Err(ask),
                read = reader.next_frame() => Ok(read),
            };
            let next = match next {
                Ok(read) => read,
                Err(ask) => {
                    let _ = ask.send(unfinished_now(&*reader));
                    continue;
                }
            };
            if reader.ended_mid_line() && ended_inside.is_none() {
                ended_inside = Some(match &next {
                    Ok(Some(Frame::Text(text))) => unfinished_line(text.as_bytes()),
                    _ => "it left its last line unfinished (no newline), discarded".to_owned(),
                });
            }
            // Said before the frame it is about (a message spread over lines, joined).
            let spread = spreads.take_fresh().map(Event::Spread);
            // The event and what it holds, counted against [`QUEUED_BYTES`].
            // Said after the frame's event: the answers the other messages of a line the
            // transport discarded are owed ([`classify::rest_answers`]).
            let mut after: Vec<Event> = Vec::new();
            let (event, cost) = match next {
                Ok(Some(Frame::Text(text))) => {
                    // Read as the library's peer reads it (one reading): past JSON
                    // whitespace and a UTF-8 byte order mark (RFC 8259 §8.1 lets a parser
                    // ignore it; said, [`Event::ByteOrderMark`]).
                    let raw = &text;
                    let read = received(raw);
                    if skip_blank && read.blank() {
                        continue;
                    }
                    let mut texts = text_events(raw, &read, spread, transcript.as_ref());
                    let Some(last) = texts.pop() else {
                        continue;
                    };
                    for (note, cost) in texts {
                        queued.fetch_add(cost, Ordering::Relaxed);
                        if events.send((note, cost, stamp(&written))).is_err() {
                            break;
                        }
                    }
                    last
                }
                Ok(Some(Frame::Oversized { bytes, limit })) => {
                    let why = on_the_line(
                        event::own_bound(format_args!(
                            "a message of {bytes} bytes exceeds the {limit}-byte limit \
                             (discarded)"
                        )),
                        reader.discarded_rest(),
                    );
                    after = rest_answers(&why, reader.discarded_rest(), None);
                    discard_answer(why, reader.discarded_head(), false, transcript.as_ref())
                }
                Ok(Some(Frame::OverBudget { bytes, limit })) => {
                    let why = on_the_line(
                        event::own_bound(format_args!(
                            "a message refused after {bytes} bytes: the {limit}-byte budget \
                             for buffered partial messages is exhausted (discarded)"
                        )),
                        reader.discarded_rest(),
                    );
                    let rest = rest_answers(&why, reader.discarded_rest(), None);
                    let several = !reader.discarded_rest().is_empty();
                    let batch = reader
                        .discarded_head()
                        .is_some_and(mcpl::jsonrpc::discarded_is_batch);
                    let (head, _) =
                        discard_answer(why, reader.discarded_head(), false, transcript.as_ref());
                    let mut all = Event::over_budget(
                        std::iter::once(head).chain(rest),
                        bytes,
                        limit,
                        batch,
                        several,
                    )
                    .into_iter();
                    let Some(first) = all.next() else {
                        continue;
                    };
                    after = all.collect();
                    let cost = first.held_bytes();
                    (first, cost)
                }
                Ok(Some(Frame::NotText { reason })) => {
                    // A message in another encoding is answered as one that does not parse.
                    let began = reader.not_text_began_as_json();
                    let head = reader.discarded_head();
                    let why = on_the_line(
                        format!("a frame that is not text: {reason}"),
                        reader.discarded_rest(),
                    );
                    if let Some(refused) = not_text_refusal(&reason, began, head) {
                        let cost = refused.held_bytes();
                        queued.fetch_add(cost, Ordering::Relaxed);
                        if events.send((refused, cost, stamp(&written))).is_err() {
                            break;
                        }
                    }
                    // A response to a request of the checker's ends that wait now, unread,
                    // as the library's peer fails its request (`Discarded::not_text`).
                    if let Some(mcpl::jsonrpc::Refusal::Response(Some(id))) =
                        head.map(|h| mcpl::jsonrpc::refusal_of(h, false))
                    {
                        after.push(Event::Unread {
                            id,
                            why: why.clone(),
                        });
                    }
                    after.extend(rest_answers(&why, reader.discarded_rest(), Some(&reason)));
                    discard(why, transcript.as_ref())
                }
                Ok(None) => {
                    // Inside a line: the last frame was that line, or (a child's pipe held
                    // past its exit) the reader still holds it.
                    let inside = ended_inside
                        .take()
                        .or_else(|| reader.unfinished().map(unfinished_line));
                    // Or the lines of a message begun spread over several ([`super::spread`]).
                    let why = match super::spread::ended_inside(&spreads, inside) {
                        Some(it) => format!("end of stream inside {it}"),
                        None => "end of stream".to_owned(),
                    };
                    (Event::Closed(why), 0)
                }
                Err(e) => (Event::Closed(format!("read error: {e}")), 0),
            };
            let closed = matches!(event, Event::Closed(_));
            queued.fetch_add(cost, Ordering::Relaxed);
            if events.send((event, cost, stamp(&written))).is_err() || closed {
                break;
            }
            for event in after {
                let cost = event.held_bytes();
                queued.fetch_add(cost, Ordering::Relaxed);
                if events.send((event, cost, stamp(&written))).is_err() {
                    break;
                }
            }
        }
        // Nothing more is read: an ask from now on is refused at once, and one already
        // queued is answered, rather than left to wait out [`UNFINISHED_WAIT`].
        asks.close();
        while let Ok(ask) = asks.try_recv() {
            let _ = ask.send(None);
        }
        let _ = read_ended.send(());
        // The writer may still be in use; the pump ends when the writer side does.
        std::future::pending::<()>().await;
    };
    let close_by = {
        // The error of a failed write, if one failed.
        let write = async {
            while let Some(text) = out.recv().await {
                let sent = writer.send(&text).await;
                unsent.fetch_sub(text.len(), Ordering::Relaxed);
                // Counted as soon as the write returns, before any read of what the
                // server wrote after reading it (one thread: nothing runs in between).
                written.fetch_add(1, Ordering::SeqCst);
                if let Err(e) = sent {
                    return Some(e.to_string());
                }
            }
            None
        };
        tokio::pin!(write);
        tokio::pin!(read);
        tokio::select! {
            () = &mut read => tokio::time::Instant::now() + bound,
            failed = &mut write => {
                if let Some(e) = failed {
                    // A server that closed its input (it exited, say) may have written
                    // more before it did (a usage text, a half line): read on to the end
                    // of its output, within [`READ_AFTER_FAILED_WRITE`], so that the
                    // report quotes it; the failed write is the reason only if that end
                    // does not come.
                    let ended = tokio::time::timeout(READ_AFTER_FAILED_WRITE, async {
                        tokio::select! {
                            () = &mut read => {}
                            _ = &mut read_ended_rx => {}
                        }
                    })
                    .await
                    .is_ok();
                    if !ended {
                        let _ = events.send((
                            Event::Closed(format!("write failed: {e}")),
                            0,
                            stamp(&written),
                        ));
                    }
                }
                tokio::time::Instant::now() + bound
            }
            _ = stopped => {
                // What the checker queued last goes out if the server reads it in time.
                let by = tokio::time::Instant::now() + bound;
                let _ = tokio::time::timeout_at(by, &mut write).await;
                by
            }
        }
    };
    let _ = tokio::time::timeout_at(close_by, writer.close()).await;
    // A pipe's `close` closes nothing: the child's stdin is closed when its writer is
    // dropped, so it is dropped here, before [`end_group`]'s [`EXIT_GRACE`]. Dropped after
    // it, a stdio server never saw the end of its input (its usual signal to exit) and was
    // sent SIGTERM every time, the grace waited out in full on every session.
    drop(writer);
    if let Some(child) = child {
        end_group(&child, bound).await;
    }
    if let Some(monitor) = monitor {
        let _ = tokio::time::timeout(bound, monitor).await;
    }
    drop((reader, guard));
}

/// A request from [`Conn::unfinished`]: where the pump sends its answer.
type Ask = mpsc::Sender<Option<String>>;

/// How the report says a line was left without its end: its length, and its first
/// [`UNFINISHED_QUOTE_BYTES`] quoted (bytes that are not UTF-8 replaced).
fn unfinished_line(line: &[u8]) -> String {
    describe_unfinished(line.len(), unfinished_quote(line))
}

/// The integer a response's `id` names when it is written with a fraction or an exponent
/// (`2.0`, `2e0`) and is, as a value, an integer (JSON-RPC 2.0 §5 asks for the same value),
/// with the id as written; `None` for a request or notification (a `method`), an integer or
/// non-numeric id, a true fraction, or a value of 2^53 or more (a double there names a
/// range, not one id). Both checkers read such answers by this one rule, each against its own requests.
pub(crate) fn integral_response_id(message: &Value) -> Option<(i64, String)> {
    if message.get("method").is_some() {
        return None;
    }
    let Some(Value::Number(n)) = message.get("id") else {
        return None;
    };
    integral_number(n)
}

/// [`integral_response_id`]'s rule for one number: the integer `n` names when written with a
/// fraction or an exponent, by the library's one reading ([`mcpl::jsonrpc::whole_float_integer`]:
/// magnitude under 2^53), with `n` as written. `mcpl check-host` reads an
/// `inference/chunk`'s `requestId` and `index` by it too (§11.4).
pub(crate) fn integral_number(n: &serde_json::Number) -> Option<(i64, String)> {
    mcpl::jsonrpc::whole_float_integer(n).map(|i| (i, n.to_string()))
}

/// The part of a line left without its end that the report quotes: its first
/// [`UNFINISHED_QUOTE_BYTES`].
pub(crate) fn unfinished_quote(line: &[u8]) -> &[u8] {
    line.get(..UNFINISHED_QUOTE_BYTES).unwrap_or(line)
}

/// [`unfinished_line`] of a line of `len` bytes of which `quoted` (its start, from
/// [`unfinished_quote`]) was kept.
pub(crate) fn describe_unfinished(len: usize, quoted: &[u8]) -> String {
    let quote = format!("{:?}", String::from_utf8_lossy(quoted));
    if quoted.len() < len {
        format!(
            "it left {len} bytes of a line unfinished (no newline), the first {}: {quote}…",
            quoted.len()
        )
    } else {
        format!("it left {len} bytes of a line unfinished (no newline): {quote}")
    }
}

/// How long a spawned target may take to exit on its own once its stdin is closed (the
/// usual end of a stdio server), before its process group is sent SIGTERM.
pub const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long the process group has between SIGTERM and SIGKILL, and again after SIGKILL for
/// the kernel to reap it.
pub const TERM_GRACE: Duration = Duration::from_secs(1);

/// A rustls client configuration trusting the PEM certificates in `ca_file` (ring provider).
pub fn tls_config(ca_file: &std::path::Path) -> io::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| io::Error::other(format!("{}: {e}", ca_file.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| io::Error::other(format!("{}: {e}", ca_file.display())))?;
        // A single unusable certificate in a system bundle is skipped, not fatal.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(io::Error::other(format!(
            "{}: no usable CA certificates",
            ca_file.display()
        )));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io::Error::other(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// JSON-RPC 2.0 §5: the one reading both checkers apply to a response id written with
    /// a fraction or an exponent.
    #[test]
    fn integral_response_ids_are_whole_values_within_2_53() {
        let id = |v: Value| integral_response_id(&v);
        assert_eq!(id(json!({"id": 2.0})), Some((2, "2.0".to_owned())));
        assert_eq!(id(json!({"id": 2e0})).map(|p| p.0), Some(2));
        assert_eq!(id(json!({"id": -7.0})).map(|p| p.0), Some(-7));
        assert_eq!(id(json!({"id": 2})), None, "an integer is read as it is");
        assert_eq!(id(json!({"id": 2.5})), None);
        assert_eq!(id(json!({"id": 18014398509481984.0})), None, "past 2^53");
        assert_eq!(id(json!({"id": "2.0"})), None);
        assert_eq!(id(json!({"id": 2.0, "method": "ping"})), None, "a request");
        assert_eq!(
            id(json!([{"id": 2.0}])),
            None,
            "a batch is read item by item"
        );
    }

    /// Once the stream has ended, asking what is unfinished is answered at once: the pump
    /// reads no more, and an ask had waited its whole [`UNFINISHED_WAIT`] unanswered.
    #[test]
    fn asking_what_is_unfinished_after_the_end_does_not_wait() {
        let dial = Dial::Command(vec!["sh".into(), "-c".into(), "exit 0".into()]);
        let conn = Conn::open(dial, Duration::from_secs(5), None).unwrap();
        let got = conn.recv(Instant::now() + Duration::from_secs(30));
        assert!(matches!(got, Some(Event::Closed(_))), "{got:?}");
        let asked = Instant::now();
        assert_eq!(conn.unfinished(), None);
        assert!(asked.elapsed() < UNFINISHED_WAIT, "{:?}", asked.elapsed());
    }

    /// A step's deadline holds however much is queued: an event that arrived after the
    /// deadline of the `recv` that finds it is not returned by that call (which times out)
    /// but by the next, first and unchanged. It was returned at once: a server writing
    /// faster than the checker judged kept every step waiting until the session's bound.
    #[test]
    fn an_event_that_arrived_after_the_deadline_ends_the_wait_and_is_kept() {
        let script = "printf '[1]\\n[2]\\n'; exec sleep 60";
        let dial = Dial::Command(vec!["sh".into(), "-c".into(), script.into()]);
        let before = Instant::now();
        let conn = Conn::open(dial, Duration::from_secs(5), None).unwrap();
        // A guard against a pump that never queues the lines (the test then fails).
        let guard = Instant::now() + Duration::from_secs(30);
        while conn.queued.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < guard, "nothing was queued");
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            conn.recv(before).is_none(),
            "both lines arrived after the deadline"
        );
        let later = Instant::now() + Duration::from_secs(5);
        for n in [1, 2] {
            let got = conn.recv(later);
            assert!(
                matches!(&got, Some(Event::Frame(v)) if *v == serde_json::json!([n])),
                "{got:?}"
            );
        }
    }

    /// Issue #20: a server writing lines that are not UTF-8 (each discarded by the
    /// transport, its event carrying only a reason) fills the queue of frames not yet judged
    /// up to [`QUEUED_BYTES`] and no further, while nobody judges them. Those events had
    /// been counted as costing nothing, so the pump read on without bound.
    #[test]
    fn discarded_frames_count_against_the_queue_bound() {
        let script = "yes \"$(printf '\\377')\" | head -n 2000000; exec sleep 60";
        let dial = Dial::Command(vec!["sh".into(), "-c".into(), script.into()]);
        let conn = Conn::open(dial, Duration::from_secs(5), None).unwrap();
        // A guard against a pump that never fills the queue (the test then fails).
        let guard = Instant::now() + Duration::from_secs(30);
        while conn.queued.load(Ordering::Relaxed) <= QUEUED_BYTES {
            assert!(
                Instant::now() < guard,
                "the queue holds {} bytes of discarded frames",
                conn.queued.load(Ordering::Relaxed)
            );
            thread::sleep(Duration::from_millis(10));
        }
        // Full: what is held is counted, and the first event is the discarded line.
        let first = conn.recv(Instant::now() + Duration::from_secs(5));
        assert!(
            matches!(&first, Some(Event::Invalid(why)) if why.contains("not valid UTF-8")),
            "{first:?}"
        );
    }
}
