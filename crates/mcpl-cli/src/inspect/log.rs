//! The inspector's log: every frame both ways (as the peer's tap saw it, in wire order), the
//! host's own diagnostics, and notes of the inspector (restarts, connection ends).
//!
//! Bounded by construction, so a server flooding notifications or sending a huge frame
//! leaves the dashboard responsive:
//! - at most [`MAX_ENTRIES`] entries and [`MAX_TEXT_BYTES`] bytes of kept frame text (the
//!   oldest entries go first, counted in `evicted`);
//! - a frame's text is kept up to [`MAX_KEPT_FRAME`] bytes; a longer one is cut (its full
//!   size is recorded and it is marked `truncated`), and only its head (`method`, `id`,
//!   `error`) is read from it;
//! - the page reads it in pages of at most [`MAX_PAGE`] summaries; a summary carries a
//!   preview of at most [`PREVIEW_CHARS`] characters, the full kept text is one request per
//!   entry.
//!
//! Each frame the host refused or diagnosed carries marks (at most [`MAX_MARKS`]; a batch,
//! whose marks each name the entry they are about, [`MAX_BATCH_MARKS`]): the rule and its §
//! (see [`super::rules`]). Marks count against the byte bound with the text they hold.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use mcpl::protocol::push::timestamp_millis;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::rules::{self, Mark};

/// Most entries the log keeps.
pub const MAX_ENTRIES: usize = 10_000;
/// Most bytes of frame text the log keeps, over all entries.
pub const MAX_TEXT_BYTES: usize = 32 * 1024 * 1024;
/// Most bytes of one frame's text the log keeps.
pub const MAX_KEPT_FRAME: usize = 256 * 1024;
/// Most marks one entry carries (later ones are dropped).
pub const MAX_MARKS: usize = 8;
/// Most marks a batch frame carries, over its entries (later ones are dropped).
pub const MAX_BATCH_MARKS: usize = 64;
/// Most summaries one page holds.
pub const MAX_PAGE: usize = 500;
/// Characters of a frame's text shown in its summary.
pub const PREVIEW_CHARS: usize = 240;
/// How far back (in entries) a diagnostic or an error answer looks for the frame it is about.
const MARK_SEARCH: usize = 4096;
/// How many received frames and batch entries, newest first, a diagnostic or an error
/// answer looks at within [`MARK_SEARCH`] (batches of 1,024 entries would make it millions).
const MARK_SEARCH_UNITS: usize = 4 * MARK_SEARCH;
/// Most requests of the host the log remembers as unanswered, to tell a response that
/// answers one from a stray (past it the oldest is forgotten, and no response of that
/// connection is called a stray any more: one may answer a forgotten request).
pub const MAX_OUTSTANDING: usize = 4096;
/// The rule a response that answers no request on the wire is marked with.
pub const STRAY_RESPONSE: &str = "stray_response";

/// Who an entry is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// A frame the host sent.
    Sent,
    /// A frame the host received.
    Received,
    /// A diagnostic of the host or a note of the inspector.
    Host,
}

impl Dir {
    /// Reads `sent`, `received` or `host`.
    pub fn parse(s: &str) -> Option<Dir> {
        match s {
            "sent" => Some(Dir::Sent),
            "received" => Some(Dir::Received),
            "host" => Some(Dir::Host),
            _ => None,
        }
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A JSON-RPC request.
    Request,
    /// A JSON-RPC notification.
    Notification,
    /// A successful response.
    Response,
    /// An error response.
    Error,
    /// A JSON-RPC batch (an array).
    Batch,
    /// Text that is not a JSON-RPC message (not JSON, or cut before its head could be read).
    Junk,
    /// A diagnostic of the host session or the connection.
    Diagnostic,
    /// A note of the inspector (connected, restarted, closed).
    Note,
}

/// One log entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Position in the log, from 1, never reused.
    pub seq: u64,
    /// When it was read, written or noted (RFC 3339 with milliseconds).
    pub time: String,
    /// Which connection (1 for the first, +1 per restart).
    pub generation: u64,
    /// Who it is from.
    pub dir: Dir,
    /// What it is.
    pub kind: Kind,
    /// The JSON-RPC method, when it names one.
    pub method: Option<String>,
    /// The JSON-RPC id, as compact JSON, when it has one.
    pub id: Option<String>,
    /// Its full size in bytes.
    pub bytes: usize,
    /// The kept text (a frame, cut at [`MAX_KEPT_FRAME`]; for a diagnostic, its detail).
    pub text: String,
    /// Whether `text` was cut.
    pub truncated: bool,
    /// The rules the host applied to it (on a batch, each naming the entry it is about).
    pub marks: Vec<Mark>,
    /// A batch's entries as their heads read, the first [`MAX_PARTS`] of them, in order;
    /// empty for any other frame.
    pub parts: Vec<Part>,
    /// For a diagnostic, the frame its mark was put on ([`Marked`]); `None` when it marked
    /// none (no frame is its subject, the frame was not found or no longer kept, or it
    /// already carried its most marks, [`MAX_MARKS`], and this one was dropped).
    pub marked: Option<Marked>,
    /// For a received frame, the number the library's peer gave it on its connection
    /// ([`mcpl::peer::TapEvent::frame`]), which names it in a diagnostic
    /// ([`mcpl::host::DiagnosticTap`]).
    pub frame: Option<u64>,
}

/// Where a mark went: the frame's seq, and on a batch the index of the entry it names.
pub type Marked = (u64, Option<usize>);

/// One entry of a batch frame (JSON-RPC 2.0 §6), as its head reads.
#[derive(Debug, Clone)]
pub struct Part {
    /// What it is (a request, a notification, a response, an error; junk when its head
    /// cannot be read).
    pub kind: Kind,
    /// The JSON-RPC method, when it names one (cut at 256 bytes).
    pub method: Option<String>,
    /// The JSON-RPC id as compact JSON (cut at 256 bytes), when it has one.
    pub id: Option<String>,
    /// Where its text lies in the frame's text (byte offsets; past the kept text when the
    /// frame was cut).
    span: (usize, usize),
}

/// What a mark is put on: a frame, or one entry of a batch frame.
#[derive(Debug, Clone, Copy)]
pub struct Unit<'a> {
    /// The connection of its frame.
    pub generation: u64,
    /// Who its frame is from.
    pub dir: Dir,
    /// What it is.
    pub kind: Kind,
    /// Its method.
    pub method: Option<&'a str>,
    /// Its id (compact JSON).
    pub id: Option<&'a str>,
    /// Its kept text (an entry's, within the frame's kept text).
    pub text: &'a str,
    /// Its index in the batch, for an entry of one.
    pub entry: Option<usize>,
    /// The peer's number of its frame ([`Entry::frame`]).
    pub frame: Option<u64>,
    /// The marks already on it.
    marks: &'a [Mark],
}

impl Unit<'_> {
    /// Whether a mark of `rule` is on it already.
    fn marked(&self, rule: &str) -> bool {
        self.marks
            .iter()
            .any(|m| m.rule == rule && m.entry == self.entry)
    }

    /// Whether any mark on it passes `pred`.
    fn any_mark(&self, pred: impl Fn(&Mark) -> bool) -> bool {
        self.marks.iter().any(|m| m.entry == self.entry && pred(m))
    }
}

impl Entry {
    /// The summary the page lists: everything but the full text. A diagnostic's also says
    /// which frame it marked, `"marked": {"seq": N}` (with `"entry": I` on a batch entry), or
    /// `"marked": null` when it marked none; other entries have no `marked`.
    pub fn summary(&self) -> Value {
        let preview: String = self.text.chars().take(PREVIEW_CHARS).collect();
        let mut v = json!({
            "seq": self.seq, "time": self.time, "generation": self.generation,
            "dir": self.dir, "kind": self.kind, "method": self.method, "id": self.id,
            "bytes": self.bytes, "truncated": self.truncated, "marks": self.marks,
            "preview": preview,
        });
        if self.kind == Kind::Diagnostic {
            v["marked"] = match self.marked {
                Some((seq, None)) => json!({ "seq": seq }),
                Some((seq, Some(entry))) => json!({ "seq": seq, "entry": entry }),
                None => Value::Null,
            };
        }
        v
    }

    /// The whole entry, with its kept text.
    pub fn full(&self) -> Value {
        let mut v = self.summary();
        v["text"] = json!(self.text);
        v
    }

    /// Adds `mark` unless it is there or the entry has its most; returns what it added
    /// against the log's byte bound, `None` when it was dropped for the bound.
    fn mark(&mut self, mark: Mark) -> Option<usize> {
        let most = if self.parts.is_empty() {
            MAX_MARKS
        } else {
            MAX_BATCH_MARKS
        };
        if self.marks.contains(&mark) {
            return Some(0);
        }
        if self.marks.len() >= most {
            return None;
        }
        let cost = mark_cost(&mark);
        self.marks.push(mark);
        Some(cost)
    }

    /// What marks are put on, oldest first: the frame itself, or, for a batch whose entries
    /// were read, each entry.
    pub fn units(&self) -> impl DoubleEndedIterator<Item = Unit<'_>> {
        let unit = move |kind, method, id, text, entry: Option<usize>| Unit::<'_> {
            generation: self.generation,
            dir: self.dir,
            kind,
            method,
            id,
            text,
            entry,
            frame: self.frame,
            marks: &self.marks,
        };
        let whole = self.parts.is_empty().then(|| {
            unit(
                self.kind,
                self.method.as_deref(),
                self.id.as_deref(),
                self.text.as_str(),
                None,
            )
        });
        let parts = self.parts.iter().enumerate().map(move |(i, p)| {
            let (start, end) = p.span;
            let end = end.min(self.text.len());
            let text = self.text.get(start.min(end)..end).unwrap_or("");
            unit(p.kind, p.method.as_deref(), p.id.as_deref(), text, Some(i))
        });
        whole.into_iter().chain(parts)
    }

    /// What it holds against the log's byte bound: its kept text, its marks and its batch
    /// entries' heads.
    fn cost(&self) -> usize {
        self.text.len()
            + self.marks.iter().map(mark_cost).sum::<usize>()
            + self
                .parts
                .iter()
                .map(|p| {
                    std::mem::size_of::<Part>()
                        + p.method.as_ref().map_or(0, String::len)
                        + p.id.as_ref().map_or(0, String::len)
                })
                .sum::<usize>()
    }
}

/// The head of a frame: what the log reads from it, whatever its size. The tap hands the
/// log every frame before the peer's bound on what a message costs parsed applies, so the id
/// is taken as its text, never built: an id that is an array of a million objects would
/// cost about 90 times its text as a JSON value.
#[derive(Deserialize)]
struct Head<'a> {
    method: Option<String>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    error: Option<ErrorHead>,
}

/// Most bytes of an id (or method) an entry keeps.
const MAX_ID: usize = 256;

/// Most entries of one batch frame whose heads the log reads (the library's peer refuses
/// a longer batch whole, `DEFAULT_MAX_BATCH_ENTRIES`); the rest are skipped unread.
pub const MAX_PARTS: usize = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;

/// The entries of a batch as raw text, the first [`MAX_PARTS`] kept, the rest skipped.
struct RawParts<'a>(Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for RawParts<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawParts<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON array")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawParts<'de>, A::Error> {
                let mut kept = Vec::new();
                loop {
                    if kept.len() < MAX_PARTS {
                        match seq.next_element::<&'de RawValue>()? {
                            Some(raw) => kept.push(raw),
                            None => break,
                        }
                    } else if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                }
                Ok(RawParts(kept))
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// A head's kind: a request has a method and an id, a notification a method only, else
/// a response (an error one when it has `error`).
fn head_kind(h: &Head<'_>) -> Kind {
    match (&h.method, &h.id, &h.error) {
        (Some(_), Some(_), _) => Kind::Request,
        (Some(_), None, _) => Kind::Notification,
        (None, _, Some(_)) => Kind::Error,
        (None, _, None) => Kind::Response,
    }
}

/// Reads the entries of batch frame `text`: each one's head, and the error (code, message)
/// of each error response. Empty when `text` is no JSON array (it is then junk to the peer).
fn read_parts(text: &str) -> Vec<(Part, Option<(i64, String)>)> {
    let Ok(RawParts(raws)) = serde_json::from_str::<RawParts<'_>>(text) else {
        return Vec::new();
    };
    let base = text.as_ptr() as usize;
    raws.into_iter()
        .map(|raw| {
            let start = (raw.get().as_ptr() as usize).saturating_sub(base);
            let span = (start, start + raw.get().len());
            match serde_json::from_str::<Head<'_>>(raw.get()) {
                Ok(h) => {
                    let kind = head_kind(&h);
                    let error = h
                        .error
                        .as_ref()
                        .map(|e| (e.code.unwrap_or(0), e.message.clone().unwrap_or_default()));
                    let part = Part {
                        kind,
                        method: h.method.as_deref().map(|m| cut(m, MAX_ID).to_owned()),
                        id: h.id.map(id_text),
                        span,
                    };
                    (part, error)
                }
                Err(_) => (
                    Part {
                        kind: Kind::Junk,
                        method: None,
                        id: None,
                        span,
                    },
                    None,
                ),
            }
        })
        .collect()
}

/// An id as compact JSON, at most [`MAX_ID`] bytes: a string or a number as JSON writes it,
/// anything else (no JSON-RPC id, never parsed) as its text.
fn id_text(raw: &RawValue) -> String {
    let text = raw.get();
    if text.starts_with(['[', '{']) {
        return cut(text, MAX_ID).to_owned();
    }
    let compact =
        serde_json::from_str::<Value>(text).map_or_else(|_| text.to_owned(), |v| v.to_string());
    cut(&compact, MAX_ID).to_owned()
}

#[derive(Deserialize)]
struct ErrorHead {
    code: Option<i64>,
    message: Option<String>,
}

/// What [`Log::record_frame`] read from a frame.
#[derive(Debug, Clone, Default)]
pub struct FrameInfo {
    /// The kind.
    pub kind: Option<Kind>,
    /// The method, if any.
    pub method: Option<String>,
    /// The id as compact JSON (cut at 256 bytes), if any.
    pub id: Option<String>,
}

/// Which entries a page lists.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only entries whose method contains this text.
    pub method: Option<String>,
    /// Only entries from this direction.
    pub dir: Option<Dir>,
    /// Only entries carrying a mark.
    pub marked: bool,
}

impl Filter {
    fn keeps(&self, e: &Entry) -> bool {
        let method_ok = match &self.method {
            None => true,
            Some(m) if m.is_empty() => true,
            Some(m) => e
                .method
                .as_deref()
                .is_some_and(|em| em.contains(m.as_str())),
        };
        method_ok && self.dir.map_or(true, |d| d == e.dir) && (!self.marked || !e.marks.is_empty())
    }
}

/// The bounded log.
#[derive(Debug, Default)]
pub struct Log {
    entries: VecDeque<Entry>,
    next_seq: u64,
    text_bytes: usize,
    evicted: u64,
    /// The requests the host sent on the newest connection and no response answered yet,
    /// by id as the peer reads it ([`pair_key`]), with their seq.
    outstanding: HashMap<String, u64>,
    /// The connection `outstanding` is of.
    outstanding_generation: u64,
    /// Whether a request was forgotten past [`MAX_OUTSTANDING`] on that connection.
    forgot: bool,
}

/// An id's text as the library's peer matches a response to a request: a number written
/// with a fraction or an exponent that is a whole number (`2.0`, `2e0`) is that integer
/// (JSON-RPC 2.0 §5; [`mcpl::jsonrpc::whole_float_integer`], the peer's one reading); anything else as written, so the
/// string `"2"` never answers the number `2`.
fn pair_key(id: &str) -> String {
    if id.contains(['.', 'e', 'E']) && !id.starts_with('"') {
        if let Some(i) = serde_json::from_str::<serde_json::Number>(id)
            .ok()
            .as_ref()
            .and_then(mcpl::jsonrpc::whole_float_integer)
        {
            return i.to_string();
        }
    }
    id.to_owned()
}

/// Whether `m` is a mark of a diagnostic about a response.
fn response_diagnosed(m: &Mark) -> bool {
    matches!(
        m.rule.as_str(),
        "unknown_response" | "late_response" | "integral_id" | "unexpected_response"
    )
}

/// What a mark holds against the log's byte bound.
fn mark_cost(m: &Mark) -> usize {
    std::mem::size_of::<Mark>() + m.rule.len() + m.detail.len()
}

/// Cuts `text` to at most `limit` bytes on a character boundary.
fn cut(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Log {
    /// The seq of the newest entry (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.next_seq
    }

    /// How many entries are kept now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn push(&mut self, mut e: Entry) -> u64 {
        self.next_seq += 1;
        e.seq = self.next_seq;
        self.text_bytes += e.cost();
        self.entries.push_back(e);
        self.evict();
        self.next_seq
    }

    /// Drops the oldest entries until the log is within its bounds.
    fn evict(&mut self) {
        while self.entries.len() > MAX_ENTRIES || self.text_bytes > MAX_TEXT_BYTES {
            match self.entries.pop_front() {
                Some(old) => {
                    self.text_bytes -= old.cost();
                    self.evicted += 1;
                }
                None => break,
            }
        }
    }

    /// Records one frame as the tap saw it and returns what was read from its head. An error
    /// response the host sent marks the request it answers with the Appendix A rule; one
    /// inside a batch the host sent too, and a request inside a batch it received is marked
    /// as an entry of that batch.
    #[cfg(test)]
    pub fn record_frame(
        &mut self,
        generation: u64,
        dir: Dir,
        at: SystemTime,
        text: &str,
    ) -> FrameInfo {
        self.record_numbered(generation, dir, at, text, None)
    }

    /// [`Log::record_frame`] of a frame the peer numbered `frame` ([`Entry::frame`]).
    pub fn record_numbered(
        &mut self,
        generation: u64,
        dir: Dir,
        at: SystemTime,
        text: &str,
        frame: Option<u64>,
    ) -> FrameInfo {
        let trimmed = text.trim_start();
        let mut parts = Vec::new();
        let info = if trimmed.starts_with('[') {
            for (part, error) in read_parts(text) {
                if let (Dir::Sent, Some((code, message)), Some(id)) = (dir, &error, &part.id) {
                    self.mark_request(generation, id, rules::error_mark(*code, message));
                }
                parts.push(part);
            }
            FrameInfo {
                kind: Some(Kind::Batch),
                ..FrameInfo::default()
            }
        } else {
            match serde_json::from_str::<Head>(text) {
                Ok(h) => {
                    let kind = head_kind(&h);
                    if let (Dir::Sent, Kind::Error, Some(id), Some(err)) =
                        (dir, kind, &h.id, &h.error)
                    {
                        let mark = rules::error_mark(
                            err.code.unwrap_or(0),
                            err.message.as_deref().unwrap_or(""),
                        );
                        self.mark_request(generation, &id_text(id), mark);
                    }
                    FrameInfo {
                        kind: Some(kind),
                        method: h.method,
                        id: h.id.map(id_text),
                    }
                }
                Err(_) => FrameInfo {
                    kind: Some(Kind::Junk),
                    ..FrameInfo::default()
                },
            }
        };
        self.pair_generation(generation);
        let units: Vec<(Kind, Option<&str>, Option<usize>)> = if parts.is_empty() {
            vec![(info.kind.unwrap_or(Kind::Junk), info.id.as_deref(), None)]
        } else {
            parts
                .iter()
                .enumerate()
                .map(|(i, p)| (p.kind, p.id.as_deref(), Some(i)))
                .collect()
        };
        let strays: Vec<Option<usize>> = units
            .iter()
            .filter(|(kind, id, _)| self.pair(dir, *kind, *id))
            .map(|(_, _, entry)| *entry)
            .collect();
        let requests: Vec<String> = units
            .iter()
            .filter(|(kind, _, _)| dir == Dir::Sent && *kind == Kind::Request)
            .filter_map(|(_, id, _)| id.map(str::to_owned))
            .collect();
        let kept = cut(text, MAX_KEPT_FRAME);
        let seq = self.push(Entry {
            seq: 0,
            time: timestamp_millis(at),
            generation,
            dir,
            kind: info.kind.unwrap_or(Kind::Junk),
            method: info.method.as_ref().map(|m| cut(m, MAX_ID).to_owned()),
            id: info.id.clone(),
            bytes: text.len(),
            text: kept.to_owned(),
            truncated: kept.len() < text.len(),
            marks: Vec::new(),
            parts,
            marked: None,
            frame,
        });
        if let Some(e) = self.entries.back_mut() {
            for entry in strays {
                self.text_bytes += e
                    .mark(Mark {
                        rule: STRAY_RESPONSE.into(),
                        section: "JSON-RPC 2.0",
                        detail: "answers no request of the host on the wire: written before the \
                             request under its id, to an id never sent, or a second answer"
                            .into(),
                        entry,
                    })
                    .unwrap_or(0);
            }
        }
        self.evict();
        for id in requests {
            self.outstanding.insert(pair_key(&id), seq);
            if self.outstanding.len() > MAX_OUTSTANDING {
                let oldest = self.outstanding.iter().min_by_key(|(_, s)| **s);
                if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                    self.outstanding.remove(&k);
                }
                self.forgot = true;
            }
        }
        info
    }

    /// Starts pairing anew for a new connection.
    fn pair_generation(&mut self, generation: u64) {
        if generation != self.outstanding_generation {
            self.outstanding.clear();
            self.outstanding_generation = generation;
            self.forgot = false;
        }
    }

    /// Pairs a frame (or an entry of a batch) with the requests of the host on the wire, in
    /// tap order, which is wire order (the peer taps a frame before its bytes reach the
    /// transport): whether it is a received response that answers none in flight, a stray.
    /// A request of the host is recorded once its entry is, past the frame that answers it.
    /// Not read: a response under id `null`.
    fn pair(&mut self, dir: Dir, kind: Kind, id: Option<&str>) -> bool {
        match (dir, kind, id) {
            (Dir::Received, Kind::Response | Kind::Error, Some(id)) => {
                self.outstanding.remove(&pair_key(id)).is_none() && !self.forgot
            }
            _ => false,
        }
    }

    /// Records a diagnostic or a note of the host side, with the frame a diagnostic marked
    /// (`marked`); returns its seq.
    pub fn record_host(
        &mut self,
        generation: u64,
        kind: Kind,
        method: Option<String>,
        text: String,
        marks: Vec<Mark>,
        marked: Option<Marked>,
    ) -> u64 {
        let text = cut(&text, MAX_KEPT_FRAME).to_owned();
        self.push(Entry {
            seq: 0,
            time: timestamp_millis(SystemTime::now()),
            generation,
            dir: Dir::Host,
            kind,
            method,
            id: None,
            bytes: text.len(),
            text,
            truncated: false,
            marks,
            parts: Vec::new(),
            marked,
            frame: None,
        })
    }

    /// Marks the newest received request of connection `generation` with JSON-RPC id `id`
    /// (compact JSON), a frame or an entry of a batch.
    pub fn mark_request(&mut self, generation: u64, id: &str, mark: Mark) {
        self.mark_latest(
            |u| {
                u.generation == generation
                    && u.dir == Dir::Received
                    && u.kind == Kind::Request
                    && u.id == Some(id)
            },
            mark,
        );
    }

    /// Marks the received response of connection `generation` under `id` (compact JSON, as
    /// the peer reads it) that a diagnostic about a response is about, a frame or an entry
    /// of a batch. The diagnostic is handled after later frames may be logged, in both
    /// directions, so not simply the newest of its id: of the responses no response
    /// diagnostic marked yet, when `stray` (the library says it answered nothing) the
    /// oldest the log saw answer nothing on the wire, else the newest. The library handles
    /// frames in order, so an earlier stray unmarked is the one it is about; a response the
    /// library took that the wire shows as a stray (read while its request was in flight
    /// but not yet written) keeps both.
    pub fn mark_response(
        &mut self,
        generation: u64,
        id: &str,
        stray: bool,
        mark: Mark,
    ) -> Option<Marked> {
        let key = pair_key(id);
        let mut newest = None;
        let mut oldest_stray = None;
        for (seq, u) in self.recent_units() {
            let candidate = u.generation == generation
                && matches!(u.kind, Kind::Response | Kind::Error)
                && u.id.map(pair_key).as_deref() == Some(key.as_str())
                && !u.any_mark(response_diagnosed);
            if !candidate {
                continue;
            }
            newest.get_or_insert((seq, u.entry));
            if u.marked(STRAY_RESPONSE) {
                oldest_stray = Some((seq, u.entry));
            }
        }
        let picked = match (stray, oldest_stray, newest) {
            (true, Some(p), _) | (_, _, Some(p)) => p,
            _ => return None,
        };
        self.mark_seq(picked, mark)
    }

    /// Marks the newest received frame or batch entry (within the last few thousand
    /// entries) that `pred` picks; returns where, if one was found.
    pub fn mark_latest(&mut self, pred: impl Fn(&Unit<'_>) -> bool, mark: Mark) -> Option<Marked> {
        let found = self
            .recent_units()
            .find(|(_, u)| pred(u))
            .map(|(seq, u)| (seq, u.entry));
        self.mark_seq(found?, mark)
    }

    /// Marks the newest received frame or batch entry `pred` picks that carries no mark of
    /// `mark`'s rule yet, else the newest it picks (within the last few thousand entries);
    /// returns where, if one was found.
    pub fn mark_fresh(&mut self, pred: impl Fn(&Unit<'_>) -> bool, mark: Mark) -> Option<Marked> {
        let mut newest = None;
        let mut fresh = None;
        for (seq, u) in self.recent_units().filter(|(_, u)| pred(u)) {
            newest.get_or_insert((seq, u.entry));
            if !u.marked(&mark.rule) {
                fresh = Some((seq, u.entry));
                break;
            }
        }
        self.mark_seq(fresh.or(newest)?, mark)
    }

    /// The received frames and batch entries a mark may go on, newest first, with their
    /// entry's seq: within the last [`MARK_SEARCH`] entries, at most [`MARK_SEARCH_UNITS`].
    fn recent_units(&self) -> impl Iterator<Item = (u64, Unit<'_>)> {
        self.entries
            .iter()
            .rev()
            .take(MARK_SEARCH)
            .filter(|e| e.dir == Dir::Received)
            .flat_map(|e| e.units().rev().map(move |u| (e.seq, u)))
            .take(MARK_SEARCH_UNITS)
    }

    /// Marks the newest received batch frame of connection `generation`, as a whole;
    /// returns where, if one was found.
    pub fn mark_batch(&mut self, generation: u64, mark: Mark) -> Option<Marked> {
        let found = self
            .entries
            .iter()
            .rev()
            .take(MARK_SEARCH)
            .find(|e| e.generation == generation && e.dir == Dir::Received && e.kind == Kind::Batch)
            .map(|e| e.seq);
        self.mark_seq((found?, None), mark)
    }

    /// Marks the kept entry `seq` (on a batch, its entry `entry`); returns where, if it is
    /// kept.
    fn mark_seq(&mut self, (seq, entry): Marked, mut mark: Mark) -> Option<Marked> {
        mark.entry = entry;
        let first = self.entries.front().map(|e| e.seq)?;
        let index = usize::try_from(seq.saturating_sub(first)).unwrap_or(usize::MAX);
        let e = self.entries.get_mut(index)?;
        // Dropped at the entry's bound: it marked nothing (`Entry::marked`).
        let added = e.mark(mark);
        self.text_bytes += added.unwrap_or(0);
        self.evict();
        added?;
        self.get(seq).map(|_| (seq, entry))
    }

    /// The entry `seq`, if it is still kept.
    pub fn get(&self, seq: u64) -> Option<&Entry> {
        let first = self.entries.front()?.seq;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.entries.get(index)
    }

    /// A page of summaries: up to `limit` (at most [`MAX_PAGE`]) entries the filter keeps,
    /// older than `before` (newest when `None`), in log order.
    pub fn page(&self, before: Option<u64>, limit: usize, filter: &Filter) -> Value {
        let limit = limit.clamp(1, MAX_PAGE);
        let mut picked: Vec<&Entry> = Vec::with_capacity(limit);
        let mut more = false;
        for e in self
            .entries
            .iter()
            .rev()
            .filter(|e| before.map_or(true, |b| e.seq < b))
        {
            if !filter.keeps(e) {
                continue;
            }
            if picked.len() == limit {
                more = true;
                break;
            }
            picked.push(e);
        }
        picked.reverse();
        json!({
            "entries": picked.iter().map(|e| e.summary()).collect::<Vec<_>>(),
            "more": more,
            "kept": self.entries.len(),
            "evicted": self.evicted,
            "lastSeq": self.next_seq,
            "bounds": {
                "entries": MAX_ENTRIES, "textBytes": MAX_TEXT_BYTES,
                "frameBytes": MAX_KEPT_FRAME, "page": MAX_PAGE,
            },
        })
    }

    /// A copy of the kept frames (diagnostics and notes are not frames), to export without
    /// holding the log: copying is quick, rendering them as JSON is not.
    pub fn frames(&self) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|e| e.dir != Dir::Host)
            .cloned()
            .collect()
    }
}

/// `frames` as JSON Lines in the `mcpl check --transcript` format (`direction`
/// `sent`/`received`, `time`, `message`; text that is not JSON as a JSON string), with
/// `truncated`/`bytes` on a cut frame and `marks` on a marked one. Diagnostics and notes
/// are not frames and are left out.
pub fn export_jsonl(frames: &[Entry]) -> String {
    let mut out = String::new();
    for e in frames {
        let direction = match e.dir {
            Dir::Sent => "sent",
            Dir::Received => "received",
            Dir::Host => continue,
        };
        let message = if e.truncated {
            Value::String(e.text.clone())
        } else {
            serde_json::from_str(&e.text).unwrap_or_else(|_| Value::String(e.text.clone()))
        };
        let mut line = json!({ "direction": direction, "time": e.time, "message": message });
        if e.truncated {
            line["truncated"] = json!(true);
            line["bytes"] = json!(e.bytes);
        }
        if !e.marks.is_empty() {
            line["marks"] = json!(e.marks);
        }
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
