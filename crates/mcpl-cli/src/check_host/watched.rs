//! What the host left unfinished (§4: one message per line). The peer owns the transport's
//! reader, so it is wrapped: each time a read of it waits, what the reader holds of a line
//! without its end ([`FrameReader::unfinished`]) is noted, its length and its first
//! [`crate::check::conn::UNFINISHED_QUOTE_BYTES`] (copied only when its length changed),
//! for the report of a wait that ends without the message ([`Left::describe`]); and when
//! the host's stream ends inside a line, that line, quoted the same way, for the report of
//! how the host went away ([`Left::ended`]).
//!
//! Each text frame is also scanned for a member name repeated within one of its objects
//! (RFC 8259 §4, I-JSON: [`crate::check::repeated`]), noted in [`Repeats`]: the peer reads
//! such a frame as `serde_json::Value` does (the last name wins) and says nothing, and its
//! hot path is not made to look. A frame beginning with a UTF-8 byte order mark, which the
//! peer reads past (RFC 8259 §8.1), is counted there too.

use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use mcpl::transport::{BoxFuture, Frame, FrameReader, MessageBudget, Transport};

use crate::check::conn::{describe_unfinished, unfinished_quote};
use crate::check::repeated;

/// A line without its end: its length, and its start as quoted.
type Held = Option<(usize, Vec<u8>)>;

/// The line the host's reader held without its end when a read last waited, and the one its
/// stream ended inside. Shared between the wrapped reader and the run.
#[derive(Debug, Clone, Default)]
pub(super) struct Left(Arc<Mutex<LeftSeen>>);

#[derive(Debug, Default)]
struct LeftSeen {
    held: Held,
    /// The stream ended inside a line: that line, as [`describe_unfinished`] says it.
    ended: Option<String>,
}

impl Left {
    /// `it left N bytes of a line unfinished (no newline): "…"`, or `None`.
    pub(super) fn describe(&self) -> Option<String> {
        let seen = self.0.lock().ok()?;
        let (len, quoted) = seen.held.as_ref()?;
        Some(describe_unfinished(*len, quoted))
    }

    /// When the host's stream ended inside a line: `it left N bytes of a line unfinished
    /// (no newline): "…"` (its length, its first
    /// [`crate::check::conn::UNFINISHED_QUOTE_BYTES`] quoted), else `None`.
    pub(super) fn ended(&self) -> Option<String> {
        self.0.lock().ok()?.ended.clone()
    }

    /// Notes the line the stream ended inside (the first time only).
    fn ended_inside(&self, said: impl FnOnce() -> String) {
        if let Ok(mut seen) = self.0.lock() {
            if seen.ended.is_none() {
                seen.ended = Some(said());
            }
        }
    }

    fn note(&self, line: Option<&[u8]>) {
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        let held = &mut seen.held;
        match (line, held.as_ref()) {
            (None, None) => {}
            (Some(l), Some((len, _))) if l.len() == *len => {}
            (Some(l), _) => *held = Some((l.len(), unfinished_quote(l).to_vec())),
            (None, Some(_)) => *held = None,
        }
    }
}

/// The messages of the host that repeat a member name: the first [`Repeats::KEPT`]
/// described ([`crate::check::repeated::describe`]), how many, and how many frames were
/// scanned; and those that began with a byte order mark ([`Repeats::marks`]). Shared
/// between the wrapped reader and the run.
#[derive(Debug, Clone, Default)]
pub(super) struct Repeats(Arc<Mutex<RepeatsSeen>>);

#[derive(Debug, Default)]
struct RepeatsSeen {
    kept: Vec<String>,
    count: u64,
    scanned: u64,
    /// Frames that began with a UTF-8 byte order mark, and the first one's message.
    marked: (u64, Option<String>),
}

impl Repeats {
    /// How many are described in the report.
    pub(super) const KEPT: usize = 3;

    /// Scans one text frame: as the library's peer reads it, without the whitespace around
    /// it and a byte order mark before it (noted).
    fn scan(&self, text: &str) {
        let trimmed = text.trim();
        let (text, marked) = match trimmed.strip_prefix('\u{feff}') {
            Some(rest) => (rest.trim_start(), true),
            None => (trimmed, false),
        };
        let found = repeated::first_repeated(text);
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        seen.scanned = seen.scanned.saturating_add(1);
        let parse = || serde_json::from_str(text).unwrap_or(serde_json::Value::Null);
        if marked {
            let (count, first) = &mut seen.marked;
            *count = count.saturating_add(1);
            if first.is_none() {
                *first = Some(repeated::message_name(&parse()));
            }
        }
        let Some(found) = found else {
            return;
        };
        seen.count = seen.count.saturating_add(1);
        if seen.kept.len() < Self::KEPT {
            seen.kept.push(repeated::describe(&found, &parse()));
        }
    }

    /// `(frames scanned, None)` when none began with a byte order mark, else `(scanned,
    /// Some("N frame(s) began with …, the first: request \"initialize\" id 1"))`.
    pub(super) fn marks(&self) -> (u64, Option<String>) {
        let Ok(seen) = self.0.lock() else {
            return (0, None);
        };
        let said = match &seen.marked {
            (0, _) => None,
            (n, first) => Some(format!(
                "{n} frame(s) began with a UTF-8 byte order mark (U+FEFF, which RFC 8259 §8.1 \
                 says a writer must not add; read past it, as the library's peer reads it, but \
                 a parser that does not ignore it cannot read them), the first: {}",
                first.as_deref().unwrap_or("a message")
            )),
        };
        (seen.scanned, said)
    }

    /// `(frames scanned, None)` when none repeated a name, else `(scanned, Some("N
    /// message(s) repeated a member name, first 3 shown: …"))`.
    pub(super) fn summary(&self) -> (u64, Option<String>) {
        let Ok(seen) = self.0.lock() else {
            return (0, None);
        };
        if seen.count == 0 {
            return (seen.scanned, None);
        }
        let first = if seen.count > seen.kept.len() as u64 {
            format!(", first {} shown", seen.kept.len())
        } else {
            String::new()
        };
        let said = format!(
            "{} message(s) repeated a member name{first}: {}",
            seen.count,
            seen.kept.join("; ")
        );
        (seen.scanned, Some(said))
    }
}

/// `transport` with its reader noting into the returned [`Left`] and [`Repeats`].
pub(super) fn watched(transport: Transport) -> (Transport, Left, Repeats) {
    let left = Left::default();
    let repeats = Repeats::default();
    let Transport {
        reader,
        writer,
        guard,
        description,
    } = transport;
    let reader = Box::new(Watched {
        inner: reader,
        left: left.clone(),
        repeats: repeats.clone(),
    });
    let transport = Transport {
        reader,
        writer,
        guard,
        description,
    };
    (transport, left, repeats)
}

/// A reader that notes what its inner reader holds of a line each time it is polled.
struct Watched {
    inner: Box<dyn FrameReader>,
    left: Left,
    repeats: Repeats,
}

impl Watched {
    /// Notes what a frame read says: a repeated member name ([`Repeats::scan`]), the end of
    /// the stream inside a line ([`Left::ended`]: the last frame was that line, or the
    /// reader still holds it).
    fn read(&self, read: &io::Result<Option<Frame>>) {
        let ended_inside = self.inner.ended_mid_line();
        match read {
            Ok(Some(Frame::Text(text))) => {
                if ended_inside {
                    self.left.ended_inside(|| {
                        describe_unfinished(text.len(), unfinished_quote(text.as_bytes()))
                    });
                }
                self.repeats.scan(text);
            }
            Ok(Some(_)) if ended_inside => self.left.ended_inside(|| {
                "it left its last line unfinished (no newline), discarded".to_owned()
            }),
            Ok(None) => {
                if let Some(line) = self.inner.unfinished() {
                    self.left
                        .ended_inside(|| describe_unfinished(line.len(), unfinished_quote(line)));
                }
            }
            _ => {}
        }
    }
}

impl FrameReader for Watched {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        // Only a reader that polls in place can be looked into while it waits.
        Box::pin(async move {
            let read = self.inner.next_frame().await;
            self.read(&read);
            read
        })
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        let polled = self.inner.poll_next_frame(cx);
        match &polled {
            Some(Poll::Pending) => self.left.note(self.inner.unfinished()),
            Some(Poll::Ready(read)) => {
                self.left.note(None);
                self.read(read);
            }
            None => self.left.note(None),
        }
        polled
    }

    fn recycle(&mut self, text: String) {
        self.inner.recycle(text);
    }

    fn set_max_message_size(&mut self, limit: usize) {
        self.inner.set_max_message_size(limit);
    }

    fn unfinished(&self) -> Option<&[u8]> {
        self.inner.unfinished()
    }

    fn ended_mid_line(&self) -> bool {
        self.inner.ended_mid_line()
    }

    fn set_message_budget(&mut self, budget: MessageBudget) {
        self.inner.set_message_budget(budget);
    }
}
