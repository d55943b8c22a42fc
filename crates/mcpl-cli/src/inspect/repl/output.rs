//! The REPL's stdout, written by a thread of its own so that a reader of stdout that stalls
//! (a pipe nobody reads) stalls only that thread, never the runtime that reads the server's
//! frames and answers its pings.
//!
//! Lines reach the writer thread through a queue of at most [`OUTPUT_LINES`] lines holding
//! at most [`OUTPUT_BYTES`] bytes between them (a line larger than that takes them all):
//! - a command's result waits for room (the next command is read only once it is queued),
//!   which holds up only the command loop;
//! - a waiting request's notice (`{"request": …}`, `* M waiting: answer HANDLE TEXT`) waits for
//!   room as a result does: the user needs it to answer (at most `engine::MAX_PENDING` wait
//!   at once), so it is never dropped;
//! - an event (a push, a channel message) that finds the queue full is dropped and counted, and the count is told as a lag of the live stream is told
//!   (`{"resync": {"missed": N}}` with `--json`, `* N events were not shown` without),
//!   before the next event or result that finds room, or at the end of the REPL.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::event_line;

/// Most lines queued for stdout at once; past it, events are dropped and counted.
pub const OUTPUT_LINES: usize = 256;

/// Most bytes of lines queued for stdout at once (16 MiB): a result waits for byte room as
/// for a line's, an event finding none is dropped and counted. Without it, 256 results of
/// up to 16 MiB each could be held.
pub const OUTPUT_BYTES: usize = 16 << 20;

/// A queued line and the bytes of [`OUTPUT_BYTES`] it holds until written.
struct Queued {
    line: String,
    _room: OwnedSemaphorePermit,
}

/// Where lines for stdout are queued; cheap to clone (the event printer holds one).
#[derive(Clone)]
pub struct Lines {
    tx: mpsc::Sender<Queued>,
    /// The bytes of [`OUTPUT_BYTES`] not held by a queued line.
    room: Arc<Semaphore>,
    /// Events not shown and not told yet (dropped here, or missed on the live stream).
    missed: Arc<AtomicU64>,
    json: bool,
}

impl Lines {
    /// The note telling that `n` events were not shown.
    fn note(&self, n: u64) -> String {
        let msg = json!({ "type": "resync", "missed": n });
        event_line(&msg, self.json).unwrap_or_default()
    }

    /// Counts `n` events that were not shown, to be told.
    pub fn lost(&self, n: u64) {
        self.missed.fetch_add(n, Ordering::SeqCst);
    }

    /// The byte room `line` takes: its length, at most all of [`OUTPUT_BYTES`] (the tests'
    /// smaller rooms fit every line they queue).
    fn weight(line: &str) -> u32 {
        u32::try_from(line.len().clamp(1, OUTPUT_BYTES)).unwrap_or(u32::MAX)
    }

    /// Byte room for `line` if there is some now.
    fn room_now(&self, line: &str) -> Option<OwnedSemaphorePermit> {
        self.room
            .clone()
            .try_acquire_many_owned(Self::weight(line))
            .ok()
    }

    /// Byte room for `line`, waiting for it.
    async fn room(&self, line: &str) -> Option<OwnedSemaphorePermit> {
        let weight = Self::weight(line);
        self.room.clone().acquire_many_owned(weight).await.ok()
    }

    /// Queues an event's line without waiting: past [`OUTPUT_LINES`] it is dropped and
    /// counted (a count not yet told goes first). False once stdout is gone.
    pub fn event(&self, line: String) -> bool {
        if self.missed.load(Ordering::SeqCst) > 0 {
            // The note's room is held before the count is taken, so no line queued by
            // another caller meanwhile goes ahead of a count taken before it.
            match self.tx.try_reserve() {
                Ok(permit) => match self.missed.swap(0, Ordering::SeqCst) {
                    0 => drop(permit),
                    n => {
                        let note = self.note(n);
                        match self.room_now(&note) {
                            Some(room) => permit.send(Queued {
                                line: note,
                                _room: room,
                            }),
                            None => {
                                self.lost(n + 1);
                                return true;
                            }
                        }
                    }
                },
                Err(TrySendError::Full(())) => {
                    self.lost(1);
                    return true;
                }
                Err(TrySendError::Closed(())) => return false,
            }
        }
        let Some(room) = self.room_now(&line) else {
            self.lost(1);
            return !self.tx.is_closed();
        };
        match self.tx.try_send(Queued { line, _room: room }) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.lost(1);
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Queues a result's line, waiting for room (a count of events not told goes first).
    /// False once stdout is gone.
    pub async fn result(&self, line: String) -> bool {
        if !self.tell().await {
            return false;
        }
        let Some(room) = self.room(&line).await else {
            return false;
        };
        self.tx.send(Queued { line, _room: room }).await.is_ok()
    }

    /// Queues the note of the events not shown and not told yet, if any, waiting for room.
    async fn tell(&self) -> bool {
        if self.missed.load(Ordering::SeqCst) == 0 {
            return true;
        }
        // Room first, then the count ([`Lines::event`]).
        let Ok(permit) = self.tx.reserve().await else {
            return false;
        };
        match self.missed.swap(0, Ordering::SeqCst) {
            0 => drop(permit),
            n => {
                let note = self.note(n);
                let Some(room) = self.room(&note).await else {
                    return false;
                };
                permit.send(Queued {
                    line: note,
                    _room: room,
                });
            }
        }
        true
    }
}

/// The REPL's stdout: the queue and its writer thread.
pub struct Output {
    lines: Lines,
    writer: std::thread::JoinHandle<bool>,
}

impl Output {
    /// Starts the writer thread.
    pub fn start(json: bool) -> Output {
        let (tx, mut rx) = mpsc::channel::<Queued>(OUTPUT_LINES);
        let writer = std::thread::spawn(move || {
            // Each line's byte room is given back once it is written (dropped with it).
            while let Some(Queued { line, _room }) = rx.blocking_recv() {
                if !print_line(&line) {
                    // Nobody reads any more (`mcpl inspect --repl | head`): every send fails
                    // from now on, so the REPL ends.
                    rx.close();
                    return false;
                }
            }
            true
        });
        Output {
            lines: Lines {
                tx,
                room: Arc::new(Semaphore::new(OUTPUT_BYTES)),
                missed: Arc::new(AtomicU64::new(0)),
                json,
            },
            writer,
        }
    }

    /// Where lines are queued.
    pub fn lines(&self) -> &Lines {
        &self.lines
    }

    /// Tells the events not shown, if any, and waits until every queued line is written
    /// (every other [`Lines`] must be dropped first); false when stdout failed.
    pub async fn finish(self) -> bool {
        let Output { lines, writer } = self;
        let told = lines.tell().await;
        drop(lines);
        let written = tokio::task::spawn_blocking(move || writer.join().unwrap_or(false))
            .await
            .unwrap_or(false);
        told && written
    }
}

/// Prints one line on stdout; false when stdout is gone (a closed pipe), reported once on
/// stderr. `println!` panicked there.
fn print_line(line: &str) -> bool {
    use std::io::Write;
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    // What the server wrote (names, descriptions, messages) is printed as text, never
    // acted on by the terminal (`term::visible`).
    match writeln!(out, "{}", crate::term::visible(line)).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            if !REPORTED.swap(true, Ordering::SeqCst) {
                crate::term::emit_err(&format!("mcpl inspect: cannot write the output: {e}\n"));
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer's end of the queue, as the lines it would print.
    struct Rx(mpsc::Receiver<Queued>);

    impl Rx {
        async fn recv(&mut self) -> Option<String> {
            self.0.recv().await.map(|q| q.line)
        }
    }

    fn lines(capacity: usize) -> (Lines, Rx) {
        with_bytes(capacity, OUTPUT_BYTES)
    }

    fn with_bytes(capacity: usize, bytes: usize) -> (Lines, Rx) {
        let (tx, rx) = mpsc::channel(capacity);
        let lines = Lines {
            tx,
            room: Arc::new(Semaphore::new(bytes)),
            missed: Arc::new(AtomicU64::new(0)),
            json: true,
        };
        (lines, Rx(rx))
    }

    /// The queue is bounded in bytes too ([`OUTPUT_BYTES`]): an event finding no byte room
    /// is dropped and counted; a result waits until a written line gives its room back.
    #[tokio::test]
    async fn the_queue_is_bounded_in_bytes() {
        // The note (23 bytes) and the result fit only once the first line is written.
        let (out, mut rx) = with_bytes(16, 40);
        let first = "x".repeat(30);
        assert!(out.event(first.clone()));
        // 30 of 40 bytes held: a 15-byte event finds no room, with lines to spare.
        assert!(out.event("e".repeat(15)));
        let waiting = {
            let out = out.clone();
            tokio::spawn(async move { out.result("r".repeat(9)).await })
        };
        assert_eq!(rx.recv().await, Some(first));
        // Its room given back, the note and then the result are queued.
        assert_eq!(
            rx.recv().await.as_deref(),
            Some(r#"{"resync":{"missed":1}}"#)
        );
        assert!(waiting.await.unwrap());
        assert_eq!(rx.recv().await, Some("r".repeat(9)));
    }

    /// Events past the queue's room are dropped, never waited for, and counted; the count
    /// is told before the next line that finds room, once, as `{"resync": {"missed": N}}`,
    /// with a lag of the live stream added in.
    #[tokio::test]
    async fn events_past_the_room_are_counted_and_told() {
        let (out, mut rx) = lines(2);
        for i in 0..5 {
            assert!(out.event(format!("e{i}")));
        }
        out.lost(4);
        assert_eq!(rx.recv().await.as_deref(), Some("e0"));
        assert_eq!(rx.recv().await.as_deref(), Some("e1"));
        assert!(out.event("e5".into()));
        assert_eq!(
            rx.recv().await.as_deref(),
            Some(r#"{"resync":{"missed":7}}"#)
        );
        assert_eq!(rx.recv().await.as_deref(), Some("e5"));
        // Room for the note but not the event: the event is counted for the next note.
        assert!(out.event("e6".into()));
        assert!(out.event("e7".into()));
        assert!(out.event("e8".into()));
        assert_eq!(rx.recv().await.as_deref(), Some("e6"));
        assert_eq!(rx.recv().await.as_deref(), Some("e7"));
        assert!(out.result("r".into()).await);
        assert_eq!(
            rx.recv().await.as_deref(),
            Some(r#"{"resync":{"missed":1}}"#)
        );
        assert_eq!(rx.recv().await.as_deref(), Some("r"));
        // Nothing more to tell.
        assert!(out.result("r2".into()).await);
        assert_eq!(rx.recv().await.as_deref(), Some("r2"));
        drop(rx);
        assert!(!out.event("gone".into()));
        assert!(!out.result("gone".into()).await);
    }
}
