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
//!
//! A response whose id is the integer id of a request the checker wrote, written with a
//! fraction or an exponent (`2.0`, `2e0`), alone or within a batch, is handed on under that
//! integer id and noted in [`IntegralIds`], as `mcpl check` reads it (its
//! `integral_id_read`): the library's peer refuses a numeric id that is not an integer, so
//! the answer read as silence.

use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use std::collections::VecDeque;

use mcpl::transport::{BoxFuture, Frame, FrameReader, FrameWriter, Transport, TrySend};
use serde_json::Value;

use super::tally::Tally;
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
    /// The bytes of a line over [`super::MAX_MESSAGE`] the reader had discarded when a read
    /// last waited, that line's end still to come ([`FrameReader::discarding`]).
    discarding: Option<usize>,
    /// The stream ended inside a line: that line, as [`describe_unfinished`] says it (the
    /// first time only).
    ended: Tally<1>,
}

impl Left {
    /// `it left N bytes of a line unfinished (no newline): "…"`, or `None`.
    pub(super) fn describe(&self) -> Option<String> {
        let seen = self.0.lock().ok()?;
        if let Some(bytes) = seen.discarding {
            return Some(describe_discarding(bytes));
        }
        let (len, quoted) = seen.held.as_ref()?;
        Some(describe_unfinished(*len, quoted))
    }

    /// The bytes of a line over the message limit the host was still sending when a read
    /// last waited (its end not yet read), or `None`.
    pub(super) fn discarding(&self) -> Option<usize> {
        self.0.lock().ok()?.discarding
    }

    /// When the host's stream ended inside a line: `it left N bytes of a line unfinished
    /// (no newline): "…"` (its length, its first
    /// [`crate::check::conn::UNFINISHED_QUOTE_BYTES`] quoted), else `None`.
    pub(super) fn ended(&self) -> Option<String> {
        self.0.lock().ok()?.ended.first().map(str::to_owned)
    }

    /// Notes the line the stream ended inside (the first time only).
    fn ended_inside(&self, said: impl FnOnce() -> String) {
        if let Ok(mut seen) = self.0.lock() {
            seen.ended.note(said);
        }
    }

    fn note(&self, line: Option<&[u8]>, discarding: Option<usize>) {
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        seen.discarding = discarding;
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
    /// The messages that repeated a member name.
    repeated: Tally<{ Repeats::KEPT }>,
    scanned: u64,
    /// Frames that began with a UTF-8 byte order mark, and the first one's message.
    marked: Tally<1>,
}

impl Repeats {
    /// How many are described in the report.
    pub(super) const KEPT: usize = 3;

    /// Scans one text frame: as the library's peer reads it, without the whitespace around
    /// it and a byte order mark before it (noted).
    fn scan(&self, text: &str) {
        let marked = text.trim_start().starts_with('\u{feff}');
        let (text, _) = mcpl::jsonrpc::message_read(text);
        let found = repeated::first_repeated(text);
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        seen.scanned = seen.scanned.saturating_add(1);
        let parse = || serde_json::from_str(text).unwrap_or(serde_json::Value::Null);
        if marked {
            seen.marked.note(|| repeated::message_name(&parse()));
        }
        let Some(found) = found else {
            return;
        };
        seen.repeated.note(|| repeated::describe(&found, &parse()));
    }

    /// `(frames scanned, None)` when none began with a byte order mark, else `(scanned,
    /// Some("N frame(s) began with …, the first: request \"initialize\" id 1"))`.
    pub(super) fn marks(&self) -> (u64, Option<String>) {
        let Ok(seen) = self.0.lock() else {
            return (0, None);
        };
        let said = match seen.marked.count() {
            0 => None,
            n => Some(format!(
                "{n} frame(s) began with a UTF-8 byte order mark (U+FEFF, which RFC 8259 §8.1 \
                 says a writer must not add; read past it, as the library's peer reads it, but \
                 a parser that does not ignore it cannot read them), the first: {}",
                seen.marked.first().unwrap_or("a message")
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
        let repeated = &seen.repeated;
        if repeated.count() == 0 {
            return (seen.scanned, None);
        }
        let first = repeated
            .cut()
            .map_or_else(String::new, |n| format!(", first {n} shown"));
        let said = format!(
            "{} message(s) repeated a member name{first}: {}",
            repeated.count(),
            repeated.joined()
        );
        (seen.scanned, Some(said))
    }
}

/// `transport` with its reader noting into the returned [`Left`], [`Repeats`] and
/// [`IntegralIds`], and its writer noting the ids of the checker's requests there.
pub(super) fn watched(transport: Transport) -> (Transport, Left, Repeats, IntegralIds) {
    let left = Left::default();
    let repeats = Repeats::default();
    let integral = IntegralIds::default();
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
        integral: integral.clone(),
    });
    let writer = Box::new(NotingWriter {
        inner: writer,
        integral: integral.clone(),
    });
    let transport = Transport {
        reader,
        writer,
        guard,
        description,
    };
    (transport, left, repeats, integral)
}

/// `it is sending a line over the checker's message limit: N bytes so far, …`: what a wait
/// ending says of a line the reader is discarding, its end still to come (§4: the spec sets
/// no size, so this is the checker's bound, said, not judged).
pub(super) fn describe_discarding(bytes: usize) -> String {
    format!(
        "it is sending a line over the checker's {}-byte message limit, {bytes} bytes of it \
         so far, discarded unread as they come (no newline yet)",
        super::MAX_MESSAGE
    )
}

/// The integer ids of the checker's requests (as runs of consecutive ids, the newest
/// [`IntegralIds::SENT_KEPT`] runs: [`SentIds`]), and the
/// host's responses that wrote one of them with a fraction or an exponent: how many, the
/// first [`Repeats::KEPT`] described (`id 2.0 for request 2`). Shared between the wrapped
/// reader, the wrapped writer and the run.
#[derive(Debug, Clone, Default)]
pub(super) struct IntegralIds(Arc<Mutex<IntegralSeen>>);

#[derive(Debug, Default)]
struct IntegralSeen {
    sent: SentIds,
    /// The responses that came as entries of a batch ([`crate::check::ids::batched_response`]).
    batched: Tally<{ Repeats::KEPT }>,
    /// The responses whose id was rewritten.
    rewritten: Tally<{ Repeats::KEPT }>,
    /// Frames read so far: the number of the last (the peer numbers every frame it takes,
    /// discarded ones too, from 1: `Incoming::frame`).
    frames: u64,
    /// The checker's requests answered, each with the number of the frame its first
    /// response came in, at most [`IntegralIds::SENT_KEPT`] ([`IntegralIds::answered_before`]).
    answered: std::collections::HashMap<i64, u64>,
    /// The last [`LINES_KEPT`] frames read that were lines of several messages answering a
    /// request of the checker's (the reader reads ahead of the run judging them), each
    /// with, for each `inference/chunk` on it naming a request answered on it, in order,
    /// whether it came after that answer ([`IntegralIds::answered_before`] takes them in
    /// turn; at most [`MAX_SEVERAL`] a line).
    late_on_line: VecDeque<(u64, VecDeque<bool>)>,
}

/// How many lines of several messages answering the checker's requests are remembered for
/// the order of their chunks ([`IntegralSeen::late_on_line`]); an older one's chunks are
/// judged as for a request still waiting (a warning).
const LINES_KEPT: usize = 64;

/// The most messages of one line of several read for their answers and chunks
/// ([`IntegralIds::frame_read`]); the peer's own bound on such a line is its
/// `max_batch_entries` (the rest it refuses unread, so none is delivered as a chunk).
const MAX_SEVERAL: usize = 1024;

/// The checker's request ids, as runs of consecutive integers, oldest first: the peer numbers
/// its requests 1, 2, 3 … (`mcpl::peer`), so every id a run sends is one run, remembered
/// whatever their count, and an old id answered late (JSON-RPC 2.0 §5) is still known as the
/// checker's. At most [`IntegralIds::SENT_KEPT`] runs are kept (16 bytes each), the oldest
/// dropped first: only ids that are no such run (none the peer writes) can be forgotten.
#[derive(Debug, Default)]
struct SentIds(VecDeque<(i64, i64)>);

impl SentIds {
    /// Notes `id`: extends the newest run when it follows it, else starts a run.
    fn note(&mut self, id: i64) {
        if let Some((first, last)) = self.0.back_mut() {
            if (*first..=*last).contains(&id) {
                return;
            }
            if last.checked_add(1) == Some(id) {
                *last = id;
                return;
            }
        }
        if self.0.len() >= IntegralIds::SENT_KEPT {
            self.0.pop_front();
        }
        self.0.push_back((id, id));
    }

    /// Whether `id` is in a run kept.
    fn contains(&self, id: &i64) -> bool {
        self.0
            .iter()
            .any(|(first, last)| (*first..=*last).contains(id))
    }

    /// How many runs are kept.
    #[cfg(test)]
    fn runs(&self) -> usize {
        self.0.len()
    }
}

impl IntegralIds {
    /// How many runs of consecutive request ids are remembered ([`SentIds`]): the peer's
    /// ids make one run, whatever the number of requests a host makes the checker send (a
    /// ping per expanding policy Request, §6.7).
    pub(super) const SENT_KEPT: usize = 1024;

    /// Whether `id` is one of the checker's request ids remembered ([`SentIds`]).
    pub(super) fn was_sent(&self, id: &mcpl::jsonrpc::RequestId) -> bool {
        let Some(id) = integer_named(&id.to_value()) else {
            return false;
        };
        self.0.lock().is_ok_and(|seen| seen.sent.contains(&id))
    }

    /// Whether the host answered the checker's request `id` before the chunk that names it,
    /// the peer's frame number `frame` (`Incoming::frame`): in an earlier frame, or earlier
    /// on the same line of several messages (the line's chunks naming a request answered on
    /// it, in order, [`IntegralSeen::late_on_line`]: this chunk the next of them). Wire
    /// order, whoever awaited that request (a call awaited through the peer's pending map is
    /// answered out of the ordered queue, so only the frames tell). A chunk naming it from
    /// there streams for a request already over (§11.4). False for an answer not remembered
    /// (past `SENT_KEPT` of them). Called once per chunk, in wire order.
    pub(super) fn answered_before(&self, id: &mcpl::jsonrpc::RequestId, frame: u64) -> bool {
        let Some(id) = integer_named(&id.to_value()) else {
            return false;
        };
        let Ok(mut seen) = self.0.lock() else {
            return false;
        };
        match seen.answered.get(&id).copied() {
            Some(at) if at < frame => true,
            Some(at) if at == frame => {
                let line = seen.late_on_line.iter_mut().find(|(at, _)| *at == frame);
                line.and_then(|(_, late)| late.pop_front()).unwrap_or(false)
            }
            _ => false,
        }
    }

    /// Numbers one frame read, and notes in it each answer to a request of the checker's: a
    /// single object with that request's id ([`integer_named`]) and no `method`, or each
    /// such object of a line of several messages (`mcpl::jsonrpc::several_values`, read as
    /// the peer reads them, each alone, in order), with, for that line, whether each
    /// `inference/chunk` naming a request answered on it comes after that answer
    /// ([`IntegralSeen::late_on_line`]). A batch's answers are not noted: a chunk naming
    /// one is judged as for a request still waiting. Bounded: a frame costlier than the peer
    /// would build is only counted, at most [`MAX_SEVERAL`] messages of a line are read.
    fn frame_read(&self, text: Option<&str>) {
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        seen.frames = seen.frames.saturating_add(1);
        let Some(text) = text else {
            return;
        };
        if mcpl::jsonrpc::parsed_cost(text) > super::MAX_PARSED_COST {
            return;
        }
        let (text, _) = mcpl::jsonrpc::message_read(text);
        if !text.starts_with('{') {
            return;
        }
        let ones: Vec<&str> = match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => vec![text],
            Err(_) => mcpl::jsonrpc::several_values(text, MAX_SEVERAL)
                .map(|several| {
                    several
                        .values
                        .into_iter()
                        .filter_map(|at| text.get(at))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let heads: Vec<Option<Head>> = ones
            .iter()
            .map(|one| serde_json::from_str::<Head>(one).ok())
            .collect();
        let at = seen.frames;
        // Each request of the checker's answered on this line, by its position on it.
        let mut here: Vec<(i64, usize)> = Vec::new();
        for (pos, head) in heads.iter().enumerate() {
            let Some(head) = head else {
                continue;
            };
            let (None, Some(id)) = (&head.method, head.id.as_ref().and_then(integer_named)) else {
                continue;
            };
            if !seen.sent.contains(&id) {
                continue;
            }
            let room = seen.answered.len() < Self::SENT_KEPT || seen.answered.contains_key(&id);
            if room && *seen.answered.entry(id).or_insert(at) == at {
                here.push((id, pos));
            }
        }
        if here.is_empty() || ones.len() < 2 {
            return;
        }
        let mut late = VecDeque::new();
        for (pos, one) in ones.iter().enumerate() {
            let Ok(ChunkHead {
                method: Some(method),
                params: Some(params),
            }) = serde_json::from_str::<ChunkHead>(one)
            else {
                continue;
            };
            let chunk = method
                == <mcpl::protocol::inference::InferenceChunk as mcpl::protocol::Method>::NAME;
            let Some(named) = params
                .request_id
                .as_ref()
                .and_then(integer_named)
                .filter(|_| chunk)
            else {
                continue;
            };
            if let Some((_, answer)) = here.iter().find(|(id, _)| *id == named) {
                late.push_back(pos > *answer);
            }
        }
        if seen.late_on_line.len() >= LINES_KEPT {
            seen.late_on_line.pop_front();
        }
        seen.late_on_line.push_back((at, late));
    }

    /// Notes the id of an outgoing frame that is a request with an integer id (once when the
    /// same text is offered again).
    fn sent(&self, text: &str) {
        let Ok(v) = serde_json::from_str::<Head>(text) else {
            return;
        };
        let (Some(_), Some(id)) = (v.method, v.id.as_ref().and_then(Value::as_i64)) else {
            return;
        };
        if let Ok(mut seen) = self.0.lock() {
            seen.sent.note(id);
        }
    }

    /// `text` with each response's id written as the integer it names ([`IntegralSeen::integral`]),
    /// whether `text` is one message or a JSON-RPC batch of them (JSON-RPC 2.0 §6, which the
    /// library's peer reads): `None` when no id was so rewritten, and the text is left as
    /// it came.
    fn read(&self, text: &str) -> Option<String> {
        // Costlier than the peer would build: left for it to refuse.
        if mcpl::jsonrpc::parsed_cost(text) > super::MAX_PARSED_COST {
            return None;
        }
        let (text, _) = mcpl::jsonrpc::message_read(text);
        if text.starts_with('[') {
            self.batched(text);
        }
        // Only a frame with a response whose id is a number but no integer is parsed whole.
        let odd = |h: &Head| {
            h.method.is_none()
                && matches!(&h.id, Some(Value::Number(n)) if !n.is_i64() && !n.is_u64())
        };
        let candidate = if text.starts_with('[') {
            serde_json::from_str::<Vec<Item>>(text)
                .is_ok_and(|items| items.iter().any(|i| matches!(i, Item::Head(h) if odd(h))))
        } else {
            serde_json::from_str::<Head>(text).is_ok_and(|head| odd(&head))
        };
        if !candidate {
            return None;
        }
        let mut v: Value = serde_json::from_str(text).ok()?;
        let mut seen = self.0.lock().ok()?;
        // Every item of a batch is read (none is skipped once one is rewritten).
        let mut rewritten = false;
        match &mut v {
            Value::Array(items) => {
                for item in items {
                    rewritten |= seen.integral(item);
                }
            }
            one => rewritten = seen.integral(one),
        }
        rewritten.then(|| v.to_string())
    }

    /// Notes each response among the entries of the batch `text` (the checker's peer sends
    /// every request alone, so each answers a request sent alone: JSON-RPC 2.0 §5,
    /// [`crate::check::ids::batched_response`]). Its cost was bounded by the caller.
    fn batched(&self, text: &str) {
        let Ok(items) = serde_json::from_str::<Vec<Value>>(text) else {
            return;
        };
        let Ok(mut seen) = self.0.lock() else {
            return;
        };
        for said in items.iter().filter_map(crate::check::ids::batched_response) {
            seen.batched.note(|| said);
        }
    }

    /// `None` when no response came in a batch, else `Some("N response(s) …: response id 2
    /// in a batch …")`, for `host.frames-valid`.
    pub(super) fn batched_summary(&self) -> Option<String> {
        let seen = self.0.lock().ok()?;
        let batched = &seen.batched;
        if batched.count() == 0 {
            return None;
        }
        Some(format!(
            "{} response(s) came inside a batch{}: {}",
            batched.count(),
            batched
                .cut()
                .map_or_else(String::new, |n| format!(", the first {n} shown")),
            batched.joined()
        ))
    }

    /// `None` when no response wrote an id so, else `Some("N response(s) …: id 2.0 for
    /// request 2; …")`.
    pub(super) fn summary(&self) -> Option<String> {
        let seen = self.0.lock().ok()?;
        let rewritten = &seen.rewritten;
        if rewritten.count() == 0 {
            return None;
        }
        Some(format!(
            "{} response(s) wrote the integer id of the checker's request with a fraction or \
             an exponent, the same value (JSON-RPC 2.0 §5) but not as the request wrote it: \
             read as the answers, yet a host matching ids as written, as the library's peer \
             does, never pairs them{}: {}",
            rewritten.count(),
            rewritten
                .cut()
                .map_or_else(String::new, |n| format!(", the first {n} shown")),
            rewritten.joined()
        ))
    }
}

impl IntegralSeen {
    /// Rewrites `message`'s id as the integer it names, when it is a response (no `method`)
    /// whose numeric id has a fraction or an exponent and is, as a value, the id of a
    /// request the checker wrote (JSON-RPC 2.0 §5: "the same as the value"); noted. Anything
    /// else (a true fraction, an id no request carried) is left to fail: `false`.
    fn integral(&mut self, message: &mut Value) -> bool {
        let Some((id, written)) = crate::check::conn::integral_response_id(message) else {
            return false;
        };
        if !self.sent.contains(&id) {
            return false;
        }
        let Some(obj) = message.as_object_mut() else {
            return false;
        };
        obj.insert("id".into(), Value::from(id));
        self.rewritten
            .note(|| format!("id {written} for request {id}"));
        true
    }
}

/// The checker's request id a JSON `id` (or `requestId`) value names: an integer as
/// written, or one written as a whole float (`3.0`, `3e0`: the same value, JSON-RPC 2.0 §5)
/// by the library's one reading ([`mcpl::jsonrpc::whole_float_integer`]), so the same id
/// reads the same wherever it is met (an answer noted, a chunk sorted); `None` otherwise.
fn integer_named(v: &Value) -> Option<i64> {
    let Value::Number(n) = v else {
        return None;
    };
    n.as_i64().or_else(|| mcpl::jsonrpc::whole_float_integer(n))
}

/// What [`IntegralIds`] reads of a frame (or of each item of a batch): its `id` and whether
/// it has a `method`.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

/// What [`IntegralIds::frame_read`] reads of each message of a line of several answering a
/// request of the checker's: its method and its `params.requestId`, for an
/// `inference/chunk` (§11.4) naming that request.
#[derive(serde::Deserialize)]
struct ChunkHead {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<ChunkParams>,
}

/// An `inference/chunk`'s `params`, as far as [`ChunkHead`] reads them.
#[derive(serde::Deserialize)]
struct ChunkParams {
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

/// An item of a batch: a [`Head`], or anything else (no object), which is never rewritten.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Item {
    Head(Head),
    Other(serde::de::IgnoredAny),
}

/// A writer that notes the ids of the checker's requests ([`IntegralIds::sent`]).
struct NotingWriter {
    inner: Box<dyn FrameWriter>,
    integral: IntegralIds,
}

impl FrameWriter for NotingWriter {
    fn send<'a>(&'a mut self, text: &'a str) -> BoxFuture<'a, io::Result<()>> {
        self.integral.sent(text);
        self.inner.send(text)
    }

    fn send_many<'a>(&'a mut self, texts: &'a [String]) -> BoxFuture<'a, io::Result<()>> {
        for text in texts {
            self.integral.sent(text);
        }
        self.inner.send_many(texts)
    }

    fn close(&mut self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.close()
    }

    fn try_send_now(&mut self, text: &str) -> io::Result<TrySend> {
        // Noted before it is written, so that the answer cannot come first; a text not
        // taken comes again through `send`, noted once ([`IntegralIds::sent`]).
        self.integral.sent(text);
        self.inner.try_send_now(text)
    }

    fn flush_pending(&mut self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush_pending()
    }
}

/// A reader that notes what its inner reader holds of a line each time it is polled.
struct Watched {
    inner: Box<dyn FrameReader>,
    left: Left,
    repeats: Repeats,
    integral: IntegralIds,
}

impl Watched {
    /// Notes what a frame read says: a repeated member name ([`Repeats::scan`]), the end of
    /// the stream inside a line ([`Left::ended`]: the last frame was that line, or the
    /// reader still holds it).
    fn read(&self, read: &io::Result<Option<Frame>>) {
        let ended_inside = self.inner.ended_mid_line();
        if let Ok(Some(frame)) = read {
            let text = match frame {
                Frame::Text(text) => Some(text.as_str()),
                _ => None,
            };
            self.integral.frame_read(text);
        }
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

impl Watched {
    /// A text frame whose id [`IntegralIds::read`] reads as a request's integer id, written
    /// with that id.
    fn rewrite(&self, read: &mut io::Result<Option<Frame>>) {
        if let Ok(Some(Frame::Text(text))) = read {
            if let Some(written) = self.integral.read(text) {
                *text = written;
            }
        }
    }
}

// A wrapper forwards every method, defaulted ones too: a default left in place would
// silently undo what the reader it wraps does (clippy names a method added later).
#[deny(clippy::missing_trait_methods)]
impl FrameReader for Watched {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        // Only a reader that polls in place can be looked into while it waits.
        Box::pin(async move {
            let mut read = self.inner.next_frame().await;
            self.read(&read);
            self.rewrite(&mut read);
            read
        })
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        let mut polled = self.inner.poll_next_frame(cx);
        match &mut polled {
            Some(Poll::Pending) => self
                .left
                .note(self.inner.unfinished(), self.inner.discarding()),
            Some(Poll::Ready(read)) => {
                self.left.note(None, None);
                self.read(read);
                self.rewrite(read);
            }
            None => self.left.note(None, None),
        }
        polled
    }

    crate::reader_forward::forward_reader_state!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: i64) -> String {
        serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }).to_string()
    }

    /// Wire order of answers: a request of the checker's answered in frame 2 was answered
    /// before frame 3, not before frame 2; a frame with a method, a batch, an id never sent
    /// answers nothing.
    #[test]
    fn an_answer_is_noted_at_its_frame() {
        let ids = IntegralIds::default();
        ids.sent(&request(3));
        ids.sent(&request(4));
        let three = mcpl::jsonrpc::RequestId::from(3_i64);
        let four = mcpl::jsonrpc::RequestId::from(4_i64);
        ids.frame_read(Some(r#"{"jsonrpc":"2.0","method":"m","id":3}"#));
        ids.frame_read(Some(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"x"}}"#,
        ));
        ids.frame_read(Some(r#"[{"jsonrpc":"2.0","id":4,"result":{}}]"#));
        ids.frame_read(None);
        ids.frame_read(Some(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#));
        assert!(!ids.answered_before(&three, 2));
        assert!(ids.answered_before(&three, 3));
        assert!(!ids.answered_before(&four, 9));
        assert!(!ids.answered_before(&mcpl::jsonrpc::RequestId::from(99_i64), 9));
    }

    /// r14 F5: an answer under the id written as a whole float (`3.0`) is noted as the
    /// answer to 3 (the library's one rule, as a chunk's `requestId` is read); on
    /// a line of several, the chunks naming a request answered on it are ordered by their
    /// place on it: one before the answer is not after it, one after it is.
    #[test]
    fn an_answer_in_any_form_or_place_is_ordered_with_its_chunks() {
        let ids = IntegralIds::default();
        for id in [3, 4] {
            ids.sent(&request(id));
        }
        let id = |v: serde_json::Value| mcpl::jsonrpc::RequestId::from_value(&v).unwrap();
        ids.frame_read(Some(r#"{"jsonrpc":"2.0","id":3.0,"result":{}}"#));
        assert!(ids.answered_before(&id(serde_json::json!(3)), 2));
        let chunk = r#"{"jsonrpc":"2.0","method":"inference/chunk","params":{"requestId":4,"index":0,"delta":"x"}}"#;
        let answer = r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"x"}}"#;
        ids.frame_read(Some(&format!("{chunk} {answer} {chunk}")));
        let four = id(serde_json::json!(4));
        // Frame 2: the chunk before the answer, then the one after it, in turn.
        assert!(!ids.answered_before(&four, 2));
        assert!(ids.answered_before(&four, 2));
        assert!(ids.answered_before(&four, 3));
    }

    /// JSON-RPC 2.0 §5 (a response carries its request's id): a host can make the checker
    /// send more than [`IntegralIds::SENT_KEPT`] requests (each expanding policy Request
    /// costs it a ping, §6.7), and an answer under the first id, coming after them, is still
    /// one to a request the checker sent, not a stray one.
    #[test]
    fn an_old_id_is_still_one_the_checker_sent_after_many_requests() {
        let ids = IntegralIds::default();
        let n = IntegralIds::SENT_KEPT as i64 * 4;
        for id in 1..=n {
            ids.sent(&request(id));
        }
        for id in [1, 2, n / 2, n] {
            assert!(
                ids.was_sent(&mcpl::jsonrpc::RequestId::from(id as u64)),
                "{id}"
            );
        }
        assert!(!ids.was_sent(&mcpl::jsonrpc::RequestId::from(n as u64 + 1)));
        assert!(!ids.was_sent(&mcpl::jsonrpc::RequestId::from(0u64)));
    }

    /// The bound holds whatever the ids: ids that are no run of consecutive integers keep at
    /// most [`IntegralIds::SENT_KEPT`] runs, the newest.
    #[test]
    fn scattered_ids_keep_at_most_the_bound_of_runs() {
        let ids = IntegralIds::default();
        let n = IntegralIds::SENT_KEPT as i64 * 2;
        for k in 1..=n {
            ids.sent(&request(k * 2));
        }
        let runs = ids.0.lock().unwrap().sent.runs();
        assert_eq!(runs, IntegralIds::SENT_KEPT);
        assert!(ids.was_sent(&mcpl::jsonrpc::RequestId::from((n * 2) as u64)));
        assert!(!ids.was_sent(&mcpl::jsonrpc::RequestId::from(2u64)));
        assert!(!ids.was_sent(&mcpl::jsonrpc::RequestId::from(3u64)));
    }
}
