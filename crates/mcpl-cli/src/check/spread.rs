//! One message spread over several lines: a peer that pretty-prints its JSON. Line framing
//! (§4: JSON-RPC 2.0 as MCP carries it; MCP's stdio transport delimits messages by newlines,
//! and a message MUST NOT contain an embedded newline) makes each line a frame, so such a
//! message arrived as N frames of junk, reported as N unrelated "junk (not JSON)" lines, and
//! the answer it carried was waited out as silence.
//!
//! [`SpreadReader`] wraps a line-framed reader: a line that begins a JSON object or array
//! and ends before it does is held, with the lines after it, until the text is whole; then
//! the lines are handed on as one frame (so the run goes on with what the peer meant) and
//! the spread is noted in [`Spreads`] for the report, which fails it as a framing defect.
//! Bounded: at most [`MAX_SPREAD_LINES`] lines and [`MAX_SPREAD_BYTES`] bytes are held; past
//! either, or when the held text cannot become JSON (a raw newline inside a string, text
//! after its end), or a line that is a whole JSON-RPC message on its own arrives, the held
//! lines are handed on one by one as they came, as before (so are they when a read fails).
//! When the stream ends while lines are held, they are not handed on as junk: they are
//! quoted where the end is reported, by both checkers through [`ended_inside`], as the end
//! of a wait quotes them.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use mcpl::jsonrpc::{Message, RequestId};
use mcpl::transport::{BoxFuture, Frame, FrameReader};
use serde_json::Value;

/// The most lines one spread message is gathered from (beyond, its lines are junk).
pub const MAX_SPREAD_LINES: usize = 1_000;
/// The most bytes held while gathering one spread message (beyond, its lines are junk).
pub const MAX_SPREAD_BYTES: usize = 1024 * 1024;
/// Characters of a spread message quoted in the report (its newlines shown as `\n`).
const QUOTE_CHARS: usize = 120;
/// How many spread messages are described in the report; later ones are counted.
pub const KEPT: usize = 3;

/// The spread messages a reader saw, shared between it and the run.
#[derive(Debug, Clone, Default)]
pub struct Spreads(Arc<Mutex<SpreadsSeen>>);

#[derive(Debug, Default)]
struct SpreadsSeen {
    count: u64,
    kept: Vec<String>,
    /// The description of the last one joined, not yet taken by [`Spreads::take_fresh`].
    fresh: Option<String>,
    /// What is held now: lines, and the text's start.
    holding: Option<(usize, String)>,
    /// What was held when the stream ended: lines, and the text's start.
    ended: Option<(usize, String)>,
}

impl Spreads {
    fn lock(&self) -> Option<std::sync::MutexGuard<'_, SpreadsSeen>> {
        self.0.lock().ok()
    }

    fn note(&self, lines: usize, text: &str) {
        let said = format!(
            "{}; one message spread over {lines} lines: {:?}",
            content(text),
            quote(text)
        );
        if let Some(mut seen) = self.lock() {
            seen.count = seen.count.saturating_add(1);
            if seen.kept.len() < KEPT {
                seen.kept.push(said.clone());
            }
            seen.fresh = Some(said);
        }
    }

    fn hold(&self, holding: Option<(usize, String)>) {
        if let Some(mut seen) = self.lock() {
            seen.holding = holding;
        }
    }

    /// The description of the message just handed on whole, once (`None` when the last
    /// frame was not a spread one).
    pub fn take_fresh(&self) -> Option<String> {
        self.lock()?.fresh.take()
    }

    /// Notes what is held as what the stream ended inside (the first time only).
    fn end(&self) {
        if let Some(mut seen) = self.lock() {
            if seen.ended.is_none() {
                seen.ended = seen.holding.take();
            }
        }
    }

    /// How many spread messages were joined, and the first [`KEPT`] described.
    pub fn seen(&self) -> (u64, Vec<String>) {
        self.lock()
            .map(|s| (s.count, s.kept.clone()))
            .unwrap_or_default()
    }

    /// What is held now of a message begun over several lines and not ended, for the
    /// report of a wait that ends without it; `None` when nothing is held.
    pub fn holding(&self) -> Option<String> {
        let seen = self.lock()?;
        let (lines, start) = seen.holding.as_ref()?;
        Some(format!(
            "it began one message over {lines} line(s) (a message must be one line, §4) and \
             has not ended it: {:?}",
            quote(start)
        ))
    }
}

/// What the peer's stream ended inside, for the report of how it went away (both checkers,
/// §4): `a message spread over lines: it began one message over N line(s) … and ended its
/// stream before its end: "…"` when the lines of a message begun spread over several were
/// held at the end (said over `line`: the last of them is among them), else `a line: LINE`
/// when `line` (the line the stream ended inside, as the caller's reader quotes it) is some,
/// else `None`.
pub fn ended_inside(spreads: &Spreads, line: Option<String>) -> Option<String> {
    let held = spreads.lock().and_then(|seen| seen.ended.clone());
    match (held, line) {
        (Some((lines, start)), _) => Some(format!(
            "a message spread over lines: it began one message over {lines} line(s) (a \
             message must be one line, §4) and ended its stream before its end: {:?}",
            quote(&start)
        )),
        (None, Some(line)) => Some(format!("a line: {line}")),
        (None, None) => None,
    }
}

/// What a message spread over several lines holds, read whole (both checkers read it on, so
/// that the run goes on; the framing alone is the defect): whether it is otherwise a valid
/// JSON-RPC message, and which.
fn content(text: &str) -> String {
    let cost = mcpl::jsonrpc::parsed_cost(text);
    if cost > mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST {
        return format!("a text that would cost {cost} units parsed (not judged)");
    }
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return "no JSON the checker reads".to_owned();
    };
    if let Value::Array(items) = &v {
        return format!("a batch of {} item(s)", items.len());
    }
    let cut = |s: String| -> String { s.chars().take(64).collect() };
    let id = |id: Option<&RequestId>| cut(id.map_or("null".to_owned(), ToString::to_string));
    match Message::from_value(v) {
        Ok(Message::Response(r)) => {
            format!(
                "otherwise a valid JSON-RPC response (id {})",
                id(r.id.as_ref())
            )
        }
        Ok(Message::Request(r)) => format!(
            "otherwise a valid JSON-RPC request ({}, id {})",
            cut(r.method),
            id(Some(&r.id))
        ),
        Ok(Message::Notification(n)) => {
            format!(
                "otherwise a valid JSON-RPC notification ({})",
                cut(n.method)
            )
        }
        Err(e) => format!("not valid JSON-RPC either ({})", e.reason),
    }
}

/// The first [`QUOTE_CHARS`] characters of `text`, marked `…` when cut.
fn quote(text: &str) -> String {
    let mut q: String = text.chars().take(QUOTE_CHARS).collect();
    if q.len() < text.len() {
        q.push('…');
    }
    q
}

/// Where a held text stands, scanned line by line (strings and escapes followed, so a
/// bracket inside a string does not count).
#[derive(Debug, Default)]
struct Scan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The outermost value has closed.
    closed: bool,
    /// It cannot become one JSON text.
    broken: bool,
}

impl Scan {
    fn feed(&mut self, line: &str) {
        for c in line.chars() {
            if self.broken {
                return;
            }
            if self.closed {
                self.broken = !c.is_whitespace();
                continue;
            }
            if self.in_string {
                match (self.escaped, c) {
                    (true, _) => self.escaped = false,
                    (false, '\\') => self.escaped = true,
                    (false, '"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => self.in_string = true,
                '{' | '[' => self.depth = self.depth.saturating_add(1),
                '}' | ']' => match self.depth.checked_sub(1) {
                    Some(0) => {
                        self.depth = 0;
                        self.closed = true;
                    }
                    Some(d) => self.depth = d,
                    None => self.broken = true,
                },
                _ => {}
            }
        }
        // A raw newline inside a string is no JSON (RFC 8259 §7).
        if self.in_string {
            self.broken = true;
        }
    }
}

/// Whether `line` begins a JSON object or array that it does not end (scanned, not parsed:
/// every frame passes here, and a whole message closes its outermost bracket).
fn begins_spread(line: &str) -> bool {
    let (t, _) = mcpl::jsonrpc::message_lead(line);
    if !(t.starts_with('{') || t.starts_with('[')) {
        return false;
    }
    let mut scan = Scan::default();
    scan.feed(t);
    !scan.closed && !scan.broken
}

/// Whether `line` is a whole JSON-RPC message on its own (an object naming `jsonrpc`).
fn whole_message(line: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line.trim())
        .is_ok_and(|m| m.contains_key("jsonrpc"))
}

/// A line-framed reader that hands on a message spread over several lines as one frame
/// (see the module documentation), noting it in its [`Spreads`].
pub struct SpreadReader {
    inner: Box<dyn FrameReader>,
    /// The lines held, joined with `\n`, and how many.
    held: String,
    lines: usize,
    scan: Scan,
    /// Frames to hand on before reading again.
    out: VecDeque<Frame>,
    /// The inner reader ended, or failed (said once the held lines are handed on).
    ended: bool,
    failed: Option<io::Error>,
    spreads: Spreads,
}

impl SpreadReader {
    /// Wraps `inner`, noting spread messages in `spreads`.
    pub fn new(inner: Box<dyn FrameReader>, spreads: Spreads) -> SpreadReader {
        SpreadReader {
            inner,
            held: String::new(),
            lines: 0,
            scan: Scan::default(),
            out: VecDeque::new(),
            ended: false,
            failed: None,
            spreads,
        }
    }

    /// The held lines handed on one by one, as they came.
    fn release(&mut self) {
        if self.lines > 0 {
            let held = std::mem::take(&mut self.held);
            self.out
                .extend(held.split('\n').map(|l| Frame::Text(l.to_owned())));
        }
        self.lines = 0;
        self.scan = Scan::default();
        self.spreads.hold(None);
    }

    /// The stream ended: what is held is noted as what it ended inside ([`ended_inside`]),
    /// not handed on.
    fn end_held(&mut self) {
        if self.lines > 0 {
            self.spreads.end();
        }
        self.held = String::new();
        self.lines = 0;
        self.scan = Scan::default();
        self.spreads.hold(None);
    }

    fn start(&mut self, text: String) {
        self.scan = Scan::default();
        self.scan.feed(&text);
        self.held = text;
        self.lines = 1;
    }

    /// Takes one frame read from the inner reader into [`Self::out`] (or holds it).
    fn take(&mut self, frame: Frame) {
        let text = match frame {
            Frame::Text(text) => text,
            other => {
                // A frame that is no line of text: what is held is not joined.
                self.release();
                self.out.push_back(other);
                return;
            }
        };
        if self.lines == 0 {
            if begins_spread(&text) {
                self.start(text);
                self.spreads.hold(Some((1, quote(&self.held))));
            } else {
                self.out.push_back(Frame::Text(text));
            }
            return;
        }
        if whole_message(&text) {
            self.release();
            self.out.push_back(Frame::Text(text));
            return;
        }
        let bytes = self.held.len().saturating_add(text.len()).saturating_add(1);
        if self.lines >= MAX_SPREAD_LINES || bytes > MAX_SPREAD_BYTES {
            self.release();
            self.out.push_back(Frame::Text(text));
            return;
        }
        self.held.push('\n');
        self.held.push_str(&text);
        self.lines += 1;
        self.scan.feed(&text);
        if self.scan.broken {
            self.release();
        } else if self.scan.closed {
            if serde_json::from_str::<serde::de::IgnoredAny>(&self.held).is_ok() {
                let joined = std::mem::take(&mut self.held);
                self.spreads.note(self.lines, &joined);
                self.lines = 0;
                self.scan = Scan::default();
                self.spreads.hold(None);
                self.out.push_back(Frame::Text(joined));
            } else {
                self.release();
            }
        } else {
            self.spreads.hold(Some((self.lines, quote(&self.held))));
        }
    }
}

// A wrapper forwards every method, defaulted ones too: a default left in place would
// silently undo what the reader it wraps does (clippy names a method added later).
#[deny(clippy::missing_trait_methods)]
impl FrameReader for SpreadReader {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(async move {
            loop {
                if let Some(f) = self.out.pop_front() {
                    return Ok(Some(f));
                }
                if let Some(e) = self.failed.take() {
                    return Err(e);
                }
                if self.ended {
                    return Ok(None);
                }
                // Cancel-safe: the inner read is, and what it yields is taken at once.
                match self.inner.next_frame().await {
                    Ok(Some(frame)) => self.take(frame),
                    // The end: what is held is quoted where it is reported.
                    Ok(None) => {
                        self.end_held();
                        self.ended = true;
                    }
                    // A failed read: the held lines are handed on, as before.
                    Err(e) => {
                        self.release();
                        self.failed = Some(e);
                    }
                }
            }
        })
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        // As `next_frame`, from the same state: an inner reader that polls in place is polled
        // in place (so a wrapper can look into what it holds while it waits).
        loop {
            if let Some(f) = self.out.pop_front() {
                return Some(Poll::Ready(Ok(Some(f))));
            }
            if let Some(e) = self.failed.take() {
                return Some(Poll::Ready(Err(e)));
            }
            if self.ended {
                return Some(Poll::Ready(Ok(None)));
            }
            match self.inner.poll_next_frame(cx)? {
                Poll::Pending => return Some(Poll::Pending),
                Poll::Ready(Ok(Some(frame))) => self.take(frame),
                Poll::Ready(Ok(None)) => {
                    self.end_held();
                    self.ended = true;
                }
                Poll::Ready(Err(e)) => {
                    self.release();
                    self.failed = Some(e);
                }
            }
        }
    }

    crate::reader_forward::forward_reader_state!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(lines: &[&str]) -> Scan {
        let mut s = Scan::default();
        for l in lines {
            s.feed(l);
        }
        s
    }

    #[test]
    fn the_scan_follows_strings_and_escapes() {
        assert!(scan(&["{", r#"  "a": "}]\"{","#, r#"  "b": [1, {"c": 2}]"#, "}"]).closed);
        assert!(!scan(&["{", r#"  "a": 1,"#]).closed);
        assert!(
            scan(&["{", r#"  "a": "x"#]).broken,
            "a newline inside a string"
        );
        assert!(scan(&["{}", "x"]).broken, "text after the end");
    }

    #[test]
    fn only_an_unended_object_or_array_begins_a_spread() {
        assert!(begins_spread("{"));
        assert!(begins_spread(r#"{"jsonrpc": "2.0","#));
        assert!(begins_spread("["));
        assert!(!begins_spread("{}"));
        assert!(!begins_spread("hello"));
        assert!(!begins_spread("{]"), "a syntax error, not an unended text");
    }
}
