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
//! Each frame the host refused or diagnosed carries marks (at most [`MAX_MARKS`]): the rule
//! and its § (see [`super::rules`]).

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
/// Most summaries one page holds.
pub const MAX_PAGE: usize = 500;
/// Characters of a frame's text shown in its summary.
pub const PREVIEW_CHARS: usize = 240;
/// How far back (in entries) a diagnostic or an error answer looks for the frame it is about.
const MARK_SEARCH: usize = 4096;
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
    /// The rules the host applied to it.
    pub marks: Vec<Mark>,
}

impl Entry {
    /// The summary the page lists: everything but the full text.
    pub fn summary(&self) -> Value {
        let preview: String = self.text.chars().take(PREVIEW_CHARS).collect();
        json!({
            "seq": self.seq, "time": self.time, "generation": self.generation,
            "dir": self.dir, "kind": self.kind, "method": self.method, "id": self.id,
            "bytes": self.bytes, "truncated": self.truncated, "marks": self.marks,
            "preview": preview,
        })
    }

    /// The whole entry, with its kept text.
    pub fn full(&self) -> Value {
        let mut v = self.summary();
        v["text"] = json!(self.text);
        v
    }

    fn mark(&mut self, mark: Mark) {
        if self.marks.len() < MAX_MARKS && !self.marks.contains(&mark) {
            self.marks.push(mark);
        }
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
    result: Option<IgnoredAny>,
    error: Option<ErrorHead>,
}

/// Most bytes of an id (or method) an entry keeps.
const MAX_ID: usize = 256;

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
/// (JSON-RPC 2.0 §5; `peer::Diagnostic::IntegralId`); anything else as written, so the
/// string `"2"` never answers the number `2`.
fn pair_key(id: &str) -> String {
    if id.contains(['.', 'e', 'E']) && !id.starts_with('"') {
        if let Ok(f) = id.parse::<f64>() {
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                #[allow(clippy::cast_possible_truncation)]
                return (f as i64).to_string();
            }
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
        self.text_bytes += e.text.len();
        self.entries.push_back(e);
        while self.entries.len() > MAX_ENTRIES || self.text_bytes > MAX_TEXT_BYTES {
            match self.entries.pop_front() {
                Some(old) => {
                    self.text_bytes -= old.text.len();
                    self.evicted += 1;
                }
                None => break,
            }
        }
        self.next_seq
    }

    /// Records one frame as the tap saw it and returns what was read from its head. An error
    /// response the host sent marks the request it answers with the Appendix A rule.
    pub fn record_frame(
        &mut self,
        generation: u64,
        dir: Dir,
        at: SystemTime,
        text: &str,
    ) -> FrameInfo {
        let trimmed = text.trim_start();
        let info = if trimmed.starts_with('[') {
            FrameInfo {
                kind: Some(Kind::Batch),
                ..FrameInfo::default()
            }
        } else {
            match serde_json::from_str::<Head>(text) {
                Ok(h) => {
                    let kind = match (&h.method, &h.id, &h.error, &h.result) {
                        (Some(_), Some(_), _, _) => Kind::Request,
                        (Some(_), None, _, _) => Kind::Notification,
                        (None, _, Some(_), _) => Kind::Error,
                        (None, _, None, _) => Kind::Response,
                    };
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
        let stray = self.pair(generation, dir, &info);
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
        });
        if stray {
            if let Some(e) = self.entries.back_mut() {
                e.mark(Mark {
                    rule: STRAY_RESPONSE.into(),
                    section: "JSON-RPC 2.0",
                    detail: "answers no request of the host on the wire: written before the \
                             request under its id, to an id never sent, or a second answer"
                        .into(),
                });
            }
        }
        if dir == Dir::Sent && info.kind == Some(Kind::Request) {
            if let Some(id) = &info.id {
                self.outstanding.insert(pair_key(id), seq);
                if self.outstanding.len() > MAX_OUTSTANDING {
                    let oldest = self.outstanding.iter().min_by_key(|(_, s)| **s);
                    if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                        self.outstanding.remove(&k);
                    }
                    self.forgot = true;
                }
            }
        }
        info
    }

    /// Pairs a frame with the requests of the host on the wire, in tap order, which is wire
    /// order (the peer taps a frame before its bytes reach the transport): whether it is a
    /// received response that answers none in flight, a stray. A request of the host is
    /// recorded once its entry is, past the frame that answers it. Not read: a batch (its
    /// entries are not parsed here) and a response under id `null`.
    fn pair(&mut self, generation: u64, dir: Dir, info: &FrameInfo) -> bool {
        if generation != self.outstanding_generation {
            self.outstanding.clear();
            self.outstanding_generation = generation;
            self.forgot = false;
        }
        match (dir, info.kind, &info.id) {
            (Dir::Received, Some(Kind::Response | Kind::Error), Some(id)) => {
                self.outstanding.remove(&pair_key(id)).is_none() && !self.forgot
            }
            _ => false,
        }
    }

    /// Records a diagnostic or a note of the host side; returns its seq.
    pub fn record_host(
        &mut self,
        generation: u64,
        kind: Kind,
        method: Option<String>,
        text: String,
        marks: Vec<Mark>,
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
        })
    }

    /// Marks the newest received request of connection `generation` with JSON-RPC id `id`
    /// (compact JSON).
    pub fn mark_request(&mut self, generation: u64, id: &str, mark: Mark) {
        self.mark_latest(
            |e| {
                e.generation == generation
                    && e.dir == Dir::Received
                    && e.kind == Kind::Request
                    && e.id.as_deref() == Some(id)
            },
            mark,
        );
    }

    /// Marks the received response of connection `generation` under `id` (compact JSON, as
    /// the peer reads it) that a diagnostic about a response is about. The diagnostic is
    /// handled after later frames may be logged, in both directions, so not simply the
    /// newest of its id: of the responses no response diagnostic marked yet, when `stray`
    /// (the library says it answered nothing) the oldest the log saw answer nothing on the
    /// wire, else the newest. The library handles frames in order, so an earlier stray
    /// unmarked is the one it is about; a response the library took that the wire shows
    /// as a stray (read while its request was in flight but not yet written) keeps both.
    pub fn mark_response(&mut self, generation: u64, id: &str, stray: bool, mark: Mark) -> bool {
        let key = pair_key(id);
        let candidates = || {
            self.entries.iter().rev().take(MARK_SEARCH).filter(|e| {
                e.generation == generation
                    && e.dir == Dir::Received
                    && matches!(e.kind, Kind::Response | Kind::Error)
                    && e.id.as_deref().map(pair_key).as_deref() == Some(key.as_str())
                    && !e.marks.iter().any(response_diagnosed)
            })
        };
        let strays = || candidates().filter(|e| e.marks.iter().any(|m| m.rule == STRAY_RESPONSE));
        let seq = match (stray, strays().next_back(), candidates().next()) {
            (true, Some(e), _) | (_, _, Some(e)) => e.seq,
            _ => return false,
        };
        self.mark_seq(seq, mark)
    }

    /// Marks the newest received frame (within the last few thousand entries) that `pred`
    /// picks; returns whether one was found.
    pub fn mark_latest(&mut self, pred: impl Fn(&Entry) -> bool, mark: Mark) -> bool {
        match self
            .entries
            .iter_mut()
            .rev()
            .take(MARK_SEARCH)
            .find(|e| e.dir == Dir::Received && pred(e))
        {
            Some(e) => {
                e.mark(mark);
                true
            }
            None => false,
        }
    }

    /// Marks the newest received frame `pred` picks that carries no mark of `mark`'s rule
    /// yet, else the newest it picks (within the last few thousand entries); returns
    /// whether one was found.
    pub fn mark_fresh(&mut self, pred: impl Fn(&Entry) -> bool, mark: Mark) -> bool {
        let mut newest = None;
        let mut fresh = None;
        let picked = self
            .entries
            .iter()
            .rev()
            .take(MARK_SEARCH)
            .filter(|e| e.dir == Dir::Received && pred(e));
        for e in picked {
            newest.get_or_insert(e.seq);
            if !e.marks.iter().any(|m| m.rule == mark.rule) {
                fresh = Some(e.seq);
                break;
            }
        }
        match fresh.or(newest) {
            Some(seq) => self.mark_seq(seq, mark),
            None => false,
        }
    }

    /// Marks the kept entry `seq`; returns whether it is kept.
    fn mark_seq(&mut self, seq: u64, mark: Mark) -> bool {
        let Some(first) = self.entries.front().map(|e| e.seq) else {
            return false;
        };
        let index = usize::try_from(seq.saturating_sub(first)).unwrap_or(usize::MAX);
        match self.entries.get_mut(index) {
            Some(e) => {
                e.mark(mark);
                true
            }
            None => false,
        }
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
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_its_bounds_and_cuts_huge_frames() {
        let mut log = Log::default();
        for i in 0..(MAX_ENTRIES + 50) {
            log.record_frame(
                1,
                Dir::Received,
                SystemTime::now(),
                &format!(r#"{{"jsonrpc":"2.0","method":"x/{i}"}}"#),
            );
        }
        assert_eq!(log.len(), MAX_ENTRIES);
        assert_eq!(log.evicted, 50);
        assert!(log.get(1).is_none());
        assert_eq!(
            log.get(log.last_seq()).and_then(|e| e.method.clone()),
            Some(format!("x/{}", MAX_ENTRIES + 49))
        );
        let huge = format!(
            r#"{{"jsonrpc":"2.0","method":"big","params":{{"s":"{}"}}}}"#,
            "é".repeat(MAX_KEPT_FRAME)
        );
        log.record_frame(1, Dir::Received, SystemTime::now(), &huge);
        let e = log.get(log.last_seq()).unwrap();
        assert!(e.truncated && e.text.len() <= MAX_KEPT_FRAME && e.bytes == huge.len());
        assert_eq!(e.method.as_deref(), Some("big"));
        assert_eq!(e.kind, Kind::Notification);
    }

    #[test]
    fn an_error_answer_marks_the_request_it_refuses() {
        let mut log = Log::default();
        let t = SystemTime::now();
        log.record_frame(
            1,
            Dir::Received,
            t,
            r#"{"jsonrpc":"2.0","id":"p1","method":"push/event","params":{}}"#,
        );
        log.record_frame(
            1,
            Dir::Sent,
            t,
            r#"{"jsonrpc":"2.0","id":"p1","error":{"code":-32002,"message":"Capability denied"}}"#,
        );
        let e = log.get(1).unwrap();
        assert_eq!(e.marks.len(), 1);
        assert_eq!(e.marks[0].rule, "capability_denied");
        let page = log.page(
            None,
            10,
            &Filter {
                marked: true,
                ..Filter::default()
            },
        );
        assert_eq!(page["entries"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn pages_go_back_from_before() {
        let mut log = Log::default();
        for i in 0..30 {
            log.record_frame(1, Dir::Sent, SystemTime::now(), &format!("junk {i}"));
        }
        let p = log.page(Some(11), 5, &Filter::default());
        let seqs: Vec<u64> = p["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
        assert_eq!(p["more"], json!(true));
    }

    /// Ids are kept as compact JSON, whatever the frame wrote; one that is no JSON-RPC id
    /// (an array, an object) as its text, cut, never built.
    #[test]
    fn ids_are_read_as_text() {
        let mut log = Log::default();
        let now = SystemTime::now();
        let info = log.record_frame(1, Dir::Received, now, r#"{"id": 7 ,"method":"m"}"#);
        assert_eq!(info.id.as_deref(), Some("7"));
        let info = log.record_frame(1, Dir::Received, now, r#"{"id":"a\u0062","method":"m"}"#);
        assert_eq!(info.id.as_deref(), Some(r#""ab""#));
        let huge = format!(
            r#"{{"id":[{}],"method":"m"}}"#,
            vec!["{}"; 100_000].join(",")
        );
        let info = log.record_frame(1, Dir::Received, now, &huge);
        assert_eq!(info.kind, Some(Kind::Request));
        let id = info.id.unwrap_or_default();
        assert!(id.starts_with("[{},{}") && id.len() <= MAX_ID, "{id}");
        let info = log.record_frame(1, Dir::Received, now, r#"{"id":null,"method":"m"}"#);
        assert_eq!((info.kind, info.id), (Some(Kind::Notification), None));
    }
}
