//! `host.chunks-well-formed` (§11.4): the streamed inference probe and the chunks it gets.
//!
//! When the grant in force allows `inferenceRequest.streaming` (and the session is ready,
//! with [`super::served::STREAM_SET`] available), the one inference probe asks `stream: true`
//! under that set ([`super::served::inference_request_streamed`]); otherwise it asks for
//! none, as before. No second inference is run: the run's bound stays what `--help` says.
//! Every `inference/chunk` the host sends is sorted by its `requestId`:
//!
//! - the streamed probe's id: judged here, each chunk in wire order;
//! - another request of the checker's (one that asked for no stream: the unstreamed probe,
//!   the early one, a ping): `host.chunks-only-when-streamed`'s (a warning), as before,
//!   while that request waits for its answer; once the host answered it (a result, or an
//!   error: refused), judged here, a fail;
//! - an id the checker never sent, or none: judged here, a fail.
//!
//! Readings (§11.4 is an example and two sentences, no MUST; where it is silent this reads
//! it fail closed, as the library host's `ChunkSink` already sends it):
//!
//! - **form**: `requestId` is the streamed request's id, `index` a non-negative integer
//!   increasing from chunk to chunk, `delta` a string, every chunk before the response and
//!   none after it (§11.4: the host sends chunks *before* the final response, and chunks
//!   *are followed by* it; a chunk after it belongs to a request already settled). Each
//!   defect fails: a server reassembling the stream by `index` and attributing it by
//!   `requestId` cannot do either with such a chunk (an index repeated or going back loses
//!   the order). A chunk sent as a Request (with an id) is also
//!   `host.notifications-have-no-id`'s, judged there once; its params are judged here. A
//!   response read at any point of the run, the probe's own after its timeout included,
//!   marks the stream answered at its wire position.
//! - **an index gap, or a first index other than 0**, warns: §11.4 sets no MUST on `index`
//!   (its example starts at 0), and §14.3's chunk index is monotonic with gaps by design;
//!   the order is kept, so nothing is lost, but a server counting from 0 would wait for
//!   the missing pieces.
//! - **an integral number written with a fraction or an exponent** (`index: 0.0`,
//!   `requestId: 29.0`) is read as the integer it is and warns: the reading
//!   `host.response-ids-as-sent` makes of a response id `2.0`
//!   ([`crate::check::conn::integral_number`], one rule; JSON-RPC 2.0 §5: the same value).
//! - **a chunk for an id the checker never sent** (or with no id in `requestId`) is a chunk
//!   of no request: it fails, as a response under an id never sent fails
//!   `host.responses-answer-requests` (JSON-RPC 2.0 §5). It is no chunk for a request that
//!   asked for no stream, so `host.chunks-only-when-streamed` does not count it too.
//! - **a chunk for a request of the checker's the host had already answered** (read after
//!   that request's response, wire order; a refusal is an answer) fails, as a chunk after
//!   the streamed probe's response does: §11.4 has the host send chunks *before* the final
//!   response, so such a chunk streams for a request that is over (refused: none was run),
//!   and a server can attribute it to nothing. Not a MUST in §11.4's words; read fail
//!   closed, as the probe's late chunk is. Wire order is the frames' numbers: the
//!   checker's reader notes the frame each of its requests was answered in
//!   (`watched::IntegralIds::answered_before`), every request's, however it was awaited,
//!   its id read by the library's one rule (`3.0` names 3), and on a line of several
//!   messages the places of the answer and the chunks on it.
//!   Bounded as the ids sent are (`IntegralIds::SENT_KEPT` answers remembered); a chunk for
//!   one past them is judged as for a request still waiting (a warning).
//! - **no chunk** before a result whose content is non-empty text warns: §11.4 says the host
//!   sends chunks when `stream: true`, but states no MUST, and the result still carries the
//!   whole text. (The library host sends the text as one chunk in that case,
//!   `session::rules::owed_chunk`.) Empty content has nothing to stream: no warning.
//! - **the deltas joined differing from the result's `content`** (a string, or its text
//!   blocks joined as the library reads them) warns, not fails. "Followed by the full
//!   response" makes the response the whole answer and the chunks its pieces, so a
//!   difference is a defect a server rendering the stream would show; but §11.4 states no
//!   reconstruction rule (§14.3 states one for channel chunks, and adds the complete text to
//!   reconcile them: where the spec wants deltas to rebuild a text it says so), and the
//!   response, which the server reads as authoritative, loses nothing. Fail closed here
//!   means never passing it: it warns.
//! - an error answering the streamed probe: the chunks before it are judged for form; with
//!   none, nothing is judged (skipped). So too a result whose `content` is no text with no
//!   chunk before it: nothing was streamed, and the result's shape is
//!   `host.inference-result-shape`'s.
//!
//! Bounded: the deltas are joined up to [`JOINED_KEPT`] bytes, the rest counted in length
//! only (content longer than that is compared by its first [`JOINED_KEPT`] bytes and its
//! length, and the verdict says so); [`KEPT`] defects are described, the rest counted.

use mcpl::jsonrpc::{json_type_name, RequestId};
use serde_json::Value;

use super::judge::{capped, excerpt};
use super::session::{Reply, Run};
use super::tally::Tally;
use crate::check::report::Status;

/// The check on the chunks of the streamed probe.
pub(super) const WELL_FORMED: &str = "host.chunks-well-formed";

/// Bytes of the joined deltas kept to compare with the result's `content`.
pub(super) const JOINED_KEPT: usize = 64 * 1024;

/// Described defects kept; later ones are counted.
const KEPT: usize = 3;

/// Bytes of one described defect.
const DESCRIBED_BYTES: usize = 160;

/// What the probe's answer was, as the verdict reads it.
#[derive(Debug, Default)]
enum Answer {
    /// No answer yet (or none came: a timeout, the connection gone).
    #[default]
    None,
    /// A result: its content as text (`None` when it is no text: the result's shape is
    /// `host.inference-result-shape`'s).
    Result(Option<String>),
    /// An error, by code.
    Error(i64),
}

/// The streamed probe and the chunks the host sent for it (or for no request at all).
#[derive(Debug, Default)]
pub(super) struct Streamed {
    /// Chunks naming a request of the checker's already answered (fails).
    after_answer: Tally<KEPT>,
    /// The streamed probe's id, once it was sent with `stream: true`.
    probe: Option<RequestId>,
    /// Its response came (wire order): a chunk for it from now on is late.
    answered: bool,
    answer: Answer,
    /// Chunks for the probe (any form).
    chunks: u64,
    /// The first index read, and the last one read in order.
    first_index: Option<u64>,
    last_index: Option<u64>,
    /// The string deltas joined, the first [`JOINED_KEPT`] bytes, and their length in all.
    joined: String,
    joined_len: u64,
    /// Defects of the probe's chunks (fails).
    defects: Tally<KEPT>,
    /// Chunks naming no request of the checker's (fails).
    stray: Tally<KEPT>,
    /// Readings that warn: an index gap, an integral number written with a fraction.
    readings: Tally<KEPT>,
    /// Which of the two kinds were read (each says its reason once).
    gap_read: bool,
    float_read: bool,
}

/// Whether `params` (an `inference/request`'s) ask for a stream (`stream: true`, §11.2).
pub(super) fn asks_stream(params: &Value) -> bool {
    params.get("stream") == Some(&Value::Bool(true))
}

/// The text of an `inference/request` result's `content`: a string, or its text blocks
/// joined (as `session::rules::owed_chunk` reads it); `None` when it is neither.
fn content_text(result: &Value) -> Option<String> {
    match result.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

/// A chunk's `index` read as a non-negative integer, with how it was written when it was
/// written with a fraction or an exponent ([`crate::check::conn::integral_number`]); `None`
/// when it is no such integer.
fn index_of(v: &Value) -> Option<(u64, Option<String>)> {
    let Value::Number(n) = v else {
        return None;
    };
    if let Some(i) = n.as_u64() {
        return Some((i, None));
    }
    let (i, written) = crate::check::conn::integral_number(n)?;
    Some((u64::try_from(i).ok()?, Some(written)))
}

impl Streamed {
    /// The streamed probe went out under `id`.
    pub(super) fn sent(&mut self, id: RequestId) {
        self.probe = Some(id);
    }

    /// Whether the inference probe asked for a stream.
    pub(super) fn asked(&self) -> bool {
        self.probe.is_some()
    }

    /// The response to `id` came, at its wire position: if it answers the streamed probe,
    /// every chunk for it from now on is late.
    pub(super) fn response_came(&mut self, id: Option<&RequestId>) {
        if id.is_some() && id == self.probe.as_ref() {
            self.answered = true;
        }
    }

    /// Notes a chunk whose `requestId` (`said`, quoted) names a request of the checker's
    /// the host had already answered.
    pub(super) fn after_answer(&mut self, said: String) {
        self.after_answer.note(|| capped(said, DESCRIBED_BYTES));
    }

    /// What the streamed probe was answered with (once the probe settled).
    pub(super) fn replied(&mut self, reply: &Reply) {
        if self.probe.is_none() {
            return;
        }
        self.answer = match reply {
            Reply::Result(r) => Answer::Result(content_text(r)),
            Reply::Error(e) => Answer::Error(e.code),
            _ => Answer::None,
        };
    }

    /// Whether `request_id` (a chunk's) names the streamed probe.
    pub(super) fn is_probe(&self, request_id: Option<&RequestId>) -> bool {
        request_id.is_some() && request_id == self.probe.as_ref()
    }

    /// Notes one defect of the probe's chunks.
    fn defect(&mut self, said: String) {
        self.defects.note(|| capped(said, DESCRIBED_BYTES));
    }

    /// Notes one reading that warns.
    fn reading(&mut self, said: String) {
        self.readings.note(|| capped(said, DESCRIBED_BYTES));
    }

    /// Judges one chunk for the streamed probe (`params`, as sent), in wire order;
    /// `id_written` is its `requestId` as written when it named the probe's id with a
    /// fraction or an exponent ([`Run::judge_chunk`]).
    pub(super) fn chunk(&mut self, params: Option<&Value>, id_written: Option<String>) {
        self.chunks = self.chunks.saturating_add(1);
        let n = self.chunks;
        if self.answered {
            self.defect(format!(
                "chunk {n} came after the response (§11.4: chunks come before it)"
            ));
        }
        if let Some(written) = id_written {
            let probe = self.probe.as_ref().map(ToString::to_string);
            self.float_read = true;
            self.reading(format!(
                "chunk {n}'s requestId {written} read as {}",
                probe.unwrap_or_default()
            ));
        }
        match params.and_then(|p| p.get("index")) {
            Some(v) => match index_of(v) {
                Some((i, written)) => {
                    if let Some(written) = written {
                        self.float_read = true;
                        self.reading(format!("chunk {n}'s index {written} read as {i}"));
                    }
                    self.index(n, i);
                }
                None => self.defect(format!(
                    "chunk {n}'s index {} is no non-negative integer",
                    excerpt(v)
                )),
            },
            None => self.defect(format!("chunk {n} has no index")),
        }
        match params.and_then(|p| p.get("delta")) {
            Some(Value::String(d)) => {
                self.joined_len = self.joined_len.saturating_add(d.len() as u64);
                let room = JOINED_KEPT.saturating_sub(self.joined.len());
                let mut end = room.min(d.len());
                while !d.is_char_boundary(end) {
                    end -= 1;
                }
                self.joined.push_str(d.get(..end).unwrap_or_default());
            }
            Some(v) => self.defect(format!(
                "chunk {n}'s delta is a JSON {}, not a string",
                json_type_name(v)
            )),
            None => self.defect(format!("chunk {n} has no delta")),
        }
    }

    /// Judges chunk `n`'s index `i` against the one expected next: a gap warns, a repeat or
    /// an index going back fails.
    fn index(&mut self, n: u64, i: u64) {
        let next = match self.last_index {
            Some(last) if i <= last => {
                let next = last.saturating_add(1);
                self.defect(format!(
                    "chunk {n} has index {i} again, or out of order ({next} was next)"
                ));
                return;
            }
            Some(last) => last.saturating_add(1),
            None => 0,
        };
        if i > next {
            self.gap_read = true;
            self.reading(format!("chunk {n} has index {i}, {next} was next: a gap"));
        }
        self.first_index.get_or_insert(i);
        self.last_index = Some(i);
    }

    /// Notes a chunk whose `requestId` (`said`, quoted) names no request of the checker's.
    pub(super) fn stray(&mut self, said: String) {
        self.stray.note(|| capped(said, DESCRIBED_BYTES));
    }

    /// The verdict, or `None` when there is nothing to judge (no stream asked, no chunk of
    /// no request's): the caller says why.
    pub(super) fn verdict(&self) -> Option<(Status, String)> {
        let mut fails = Vec::new();
        if self.stray.count() > 0 {
            fails.push(format!(
                "{} inference/chunk(s) named no request of the checker's in requestId ({}{}; \
                 §11.4: requestId is the streaming request's id)",
                self.stray.count(),
                self.stray.joined(),
                if self.stray.cut().is_some() {
                    ", …"
                } else {
                    ""
                }
            ));
        }
        if self.after_answer.count() > 0 {
            fails.push(format!(
                "{} inference/chunk(s) named a request of the checker's the host had already \
                 answered ({}{}; §11.4: chunks come before the final response; a request \
                 answered, or refused, streams nothing more)",
                self.after_answer.count(),
                self.after_answer.joined(),
                if self.after_answer.cut().is_some() {
                    ", …"
                } else {
                    ""
                }
            ));
        }
        if self.defects.count() > 0 {
            fails.push(format!(
                "{} defect(s) in the {} chunk(s) of the streamed inference/request: {}{}",
                self.defects.count(),
                self.chunks,
                self.defects.joined(),
                if self.defects.cut().is_some() {
                    "; …"
                } else {
                    ""
                }
            ));
        }
        if !fails.is_empty() {
            if let Some(read) = self.readings_said() {
                fails.push(read);
            }
            return Some((Status::Fail, fails.join("; ")));
        }
        let (status, detail) = self.judged()?;
        Some(match self.readings_said() {
            Some(read) if status == Status::Pass => (Status::Warn, format!("{detail}; {read}")),
            Some(read) => (status, format!("{detail}; {read}")),
            None => (status, detail),
        })
    }

    /// The readings that warn, said (`None` when there are none).
    fn readings_said(&self) -> Option<String> {
        if self.readings.count() == 0 {
            return None;
        }
        let mut why = Vec::new();
        if self.gap_read {
            why.push(
                "§11.4 sets no MUST on index and §14.3's chunk index is monotonic with gaps: \
                 the order is kept, yet a server counting from 0 waits for the missing pieces",
            );
        }
        if self.float_read {
            why.push(
                "an integer written with a fraction or an exponent is the same value, read as \
                 host.response-ids-as-sent reads a response id 2.0 (JSON-RPC 2.0 §5), yet \
                 not as the checker wrote it",
            );
        }
        Some(format!(
            "{} reading(s) warn: {}{} ({})",
            self.readings.count(),
            self.readings.joined(),
            if self.readings.cut().is_some() {
                "; …"
            } else {
                ""
            },
            why.join("; ")
        ))
    }

    /// How the chunks' indexes ran, when no defect was noted: `indexes 0 to 3 in order`,
    /// or `indexes 1 to 4, increasing` (a gap or a start past 0, warned).
    fn order(&self) -> String {
        let (first, last) = (
            self.first_index.unwrap_or_default(),
            self.last_index.unwrap_or_default(),
        );
        if first == 0 && last == self.chunks.saturating_sub(1) {
            format!("indexes 0 to {last} in order")
        } else {
            format!("indexes {first} to {last}, increasing")
        }
    }

    /// The verdict when no chunk fails, before the readings that warn.
    fn judged(&self) -> Option<(Status, String)> {
        self.probe.as_ref()?;
        let n = self.chunks;
        let late = if self.answered {
            "all before the response, which came after the probe's timeout (the probe's own \
             check says so)"
        } else {
            "no response came (the probe's own check says so)"
        };
        Some(match &self.answer {
            Answer::Result(Some(content)) if n == 0 && !content.is_empty() => (
                Status::Warn,
                "the inference/request asked stream: true (inferenceRequest.streaming granted), \
                 yet its result came with no inference/chunk before it (§11.4: the host sends \
                 chunks before the final response; a warning, no MUST)"
                    .to_owned(),
            ),
            Answer::Result(Some(_)) if n == 0 => (
                Status::Pass,
                "no chunk before a result with empty content: nothing to stream".to_owned(),
            ),
            Answer::Result(Some(content)) => self.compared(content),
            Answer::Result(None) if n == 0 => (
                Status::Skip,
                "the streamed inference/request's result has no text content and no chunk came \
                 before it: nothing to judge (host.inference-result-shape judges the result)"
                    .to_owned(),
            ),
            Answer::Result(None) => (
                Status::Pass,
                format!(
                    "{n} chunk(s), {}, each a string delta, all before the response (its \
                     content is no text: not compared, host.inference-result-shape judges it)",
                    self.order()
                ),
            ),
            Answer::Error(code) if n == 0 => (
                Status::Skip,
                format!("the streamed inference/request was answered with error {code} and no chunk: nothing to judge"),
            ),
            Answer::Error(code) => (
                Status::Pass,
                format!(
                    "{n} well-formed chunk(s), {}, before the error {code} answering the request",
                    self.order()
                ),
            ),
            Answer::None if n == 0 => (
                Status::Skip,
                "the streamed inference/request got no answer and no chunk: nothing to judge"
                    .to_owned(),
            ),
            Answer::None => (
                Status::Pass,
                format!("{n} well-formed chunk(s), {}; {late}", self.order()),
            ),
        })
    }

    /// The verdict of `n > 0` well-formed chunks before a result whose content is `content`.
    fn compared(&self, content: &str) -> (Status, String) {
        let n = self.chunks;
        let kept = &self.joined;
        let same_len = self.joined_len == content.len() as u64;
        let prefix = content
            .get(..kept.len())
            .is_some_and(|head| head == kept.as_str());
        let whole = self.joined_len <= JOINED_KEPT as u64;
        let base = format!(
            "{n} chunk(s), {}, each a string delta, all before the response",
            self.order()
        );
        if same_len && prefix {
            let how = if whole {
                "their deltas joined are the result's content".to_owned()
            } else {
                format!(
                    "their deltas joined match the result's content in length and in the first \
                     {JOINED_KEPT} bytes (the rest not kept)"
                )
            };
            return (Status::Pass, format!("{base}; {how}"));
        }
        (
            Status::Warn,
            format!(
                "{base}, but their deltas joined ({} bytes, {}) are not the result's content \
                 ({} bytes, {}) (§11.4: chunks are followed by the full response, whose text \
                 they are; a warning, no MUST states it)",
                self.joined_len,
                excerpt(&Value::String(kept.chars().take(40).collect())),
                content.len(),
                excerpt(&Value::String(content.chars().take(40).collect())),
            ),
        )
    }
}

impl Run {
    /// Sorts one `inference/chunk` (`params` as sent) by its `requestId`: the streamed
    /// probe's judged here, another request's of the checker's counted for
    /// `host.chunks-only-when-streamed` (a defect here once the host answered it), one
    /// naming no request of the checker's a defect.
    ///
    /// A `requestId` naming an integer with a fraction or an exponent (`29.0`) is read as that
    /// integer ([`crate::check::conn::integral_number`], as `host.response-ids-as-sent`
    /// reads a response id), a reading the probe's verdict warns of.
    pub(super) fn judge_chunk(&mut self, params: Option<&Value>) {
        let raw = params.and_then(|p| p.get("requestId"));
        let mut written = None;
        let id = raw.and_then(|v| match v {
            Value::Number(n) => RequestId::from_value(v).or_else(|| {
                let (i, as_written) = crate::check::conn::integral_number(n)?;
                written = Some(as_written);
                Some(RequestId::from(i))
            }),
            _ => RequestId::from_value(v),
        });
        if self.stream.is_probe(id.as_ref()) {
            self.stream.chunk(params, written);
        } else if id
            .as_ref()
            .is_some_and(|id| self.integral.answered_before(id, self.incoming.frame()))
        {
            // A request of the checker's the host answered already, in a frame before this
            // chunk's (refused, or with a result): it streams nothing more (§11.4, read
            // fail closed).
            let said = raw.map_or_else(String::new, |v| format!("requestId {}", excerpt(v)));
            self.stream.after_answer(said);
        } else if id.as_ref().is_some_and(|id| self.integral.was_sent(id)) {
            self.chunks = self.chunks.saturating_add(1);
            if self.first_chunk_for.is_none() {
                self.first_chunk_for = raw.map(excerpt);
            }
        } else {
            let said = raw.map_or_else(
                || "no requestId".to_owned(),
                |v| format!("requestId {}", excerpt(v)),
            );
            self.stream.stray(said);
        }
    }

    /// Records `host.chunks-well-formed` once the run is over (a late chunk counts however
    /// late it came).
    pub(super) fn conclude_stream(&mut self) {
        match self.stream.verdict() {
            Some((status, detail)) => self.record(WELL_FORMED, status, detail),
            None if self.inference_probed => {
                let why = "the inference probe asked for no stream (inferenceRequest.streaming \
                           not granted in force, or check.stream not available), and no \
                           inference/chunk named a request the checker never sent";
                self.record_unset(&[WELL_FORMED], Status::Skip, why);
            }
            // The probe was never sent: "not reached", said at the end.
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn probe() -> Streamed {
        let mut s = Streamed::default();
        s.sent(RequestId::from_value(&json!(7)).unwrap_or(RequestId::String("7".into())));
        s
    }

    fn chunk(s: &mut Streamed, index: Value, delta: Value) {
        s.chunk(
            Some(&json!({ "requestId": 7, "index": index, "delta": delta })),
            None,
        );
    }

    fn result(s: &mut Streamed, content: &str) {
        s.response_came(RequestId::from_value(&json!(7)).as_ref());
        s.replied(&Reply::Result(json!({ "content": content })));
    }

    /// §11.4: chunks 0, 1 joining to the content, then the response: passes.
    #[test]
    fn s11_4_a_correct_stream_passes() {
        let mut s = probe();
        chunk(&mut s, json!(0), json!("O"));
        chunk(&mut s, json!(1), json!("K"));
        result(&mut s, "OK");
        let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Pass, "{d}");
        assert!(d.contains("joined are the result's content"), "{d}");
    }

    /// Chunks as `(index, delta)`, whether they follow the response, and the defect named.
    type Case<'a> = (&'a [(Value, Value)], bool, &'a str);

    /// §11.4 read fail closed: an index going back, a repeat, a non-string delta, a chunk
    /// after the response each fail, named.
    #[test]
    fn s11_4_each_form_defect_fails() {
        let cases: [Case; 5] = [
            (
                &[(json!(3), json!("a")), (json!(2), json!("b"))],
                false,
                "index 2 again, or out of order (4 was next)",
            ),
            (
                &[(json!(u64::MAX), json!("a")), (json!(u64::MAX), json!("b"))],
                false,
                "again",
            ),
            (
                &[(json!(0), json!("a")), (json!(0), json!("b"))],
                false,
                "again",
            ),
            (&[(json!(0), json!(5))], false, "not a string"),
            (&[(json!(0), json!("OK"))], true, "after the response"),
        ];
        for (chunks, late, said) in cases {
            let mut s = probe();
            if late {
                result(&mut s, "OK");
            }
            for (i, d) in chunks {
                chunk(&mut s, i.clone(), d.clone());
            }
            if !late {
                result(&mut s, "ab");
            }
            let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
            assert_eq!(status, Status::Fail, "{said}: {d}");
            assert!(d.contains(said), "{said}: {d}");
        }
    }

    /// The readings that warn: no chunk before non-empty content; deltas differing from it.
    /// Empty content with no chunk passes.
    #[test]
    fn s11_4_no_chunk_or_a_different_text_warns() {
        let mut s = probe();
        result(&mut s, "OK");
        assert_eq!(s.verdict().map(|v| v.0), Some(Status::Warn));
        let mut s = probe();
        result(&mut s, "");
        assert_eq!(s.verdict().map(|v| v.0), Some(Status::Pass));
        let mut s = probe();
        chunk(&mut s, json!(0), json!("NO"));
        result(&mut s, "OK");
        let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Warn, "{d}");
        assert!(d.contains("not the result's content"), "{d}");
    }

    /// §11.4 sets no MUST on `index` and §14.3's chunk index allows gaps: a gap, a first
    /// index past 0, an index written `1.0` each warn, named, the order described as it ran.
    #[test]
    fn s11_4_a_gap_a_late_start_or_an_integral_float_warns() {
        let cases: [(&[Value], &str, &str); 3] = [
            (
                &[json!(0), json!(2)],
                "chunk 2 has index 2, 1 was next: a gap",
                "0 to 2,",
            ),
            (
                &[json!(1), json!(2)],
                "chunk 1 has index 1, 0 was next: a gap",
                "1 to 2,",
            ),
            (
                &[json!(0), json!(1.0)],
                "chunk 2's index 1.0 read as 1",
                "0 to 1 in order",
            ),
        ];
        for (indexes, said, order) in cases {
            let mut s = probe();
            for (i, d) in indexes.iter().zip(["a", "b"]) {
                chunk(&mut s, i.clone(), json!(d));
            }
            result(&mut s, "ab");
            let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
            assert_eq!(status, Status::Warn, "{said}: {d}");
            assert!(d.contains(said) && d.contains(order), "{said}: {d}");
            assert!(d.contains("joined are the result's content"), "{said}: {d}");
        }
        // A true fraction, or a negative index, is no index.
        for bad in [json!(0.5), json!(-1.0)] {
            let mut s = probe();
            chunk(&mut s, bad, json!("ab"));
            result(&mut s, "ab");
            assert_eq!(s.verdict().map(|v| v.0), Some(Status::Fail));
        }
    }

    /// Chunks before a response read only after the probe's timeout: well formed, and the
    /// verdict says the response came (late), not that none came; with none read, it says so.
    #[test]
    fn s11_4_chunks_before_a_late_response_say_it_came() {
        for late in [true, false] {
            let mut s = probe();
            chunk(&mut s, json!(0), json!("OK"));
            if late {
                s.response_came(RequestId::from_value(&json!(7)).as_ref());
            }
            s.replied(&Reply::Timeout {
                note: String::new(),
            });
            let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
            assert_eq!(status, Status::Pass, "{d}");
            assert_eq!(d.contains("came after the probe's timeout"), late, "{d}");
            assert_eq!(d.contains("no response came"), !late, "{d}");
        }
    }

    /// A chunk naming no request of the checker's fails, even with no stream asked.
    #[test]
    fn a_chunk_of_no_request_fails_with_no_stream_asked() {
        let mut s = Streamed::default();
        assert!(s.verdict().is_none());
        s.stray("requestId 999".into());
        let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Fail, "{d}");
        assert!(d.contains("999"), "{d}");
    }

    /// §11.4 read fail closed: a chunk naming a request of the checker's that asked for no
    /// stream, read after the host had answered that request (refused it, or gave a result),
    /// fails: the request is settled, chunks come before the final response. One read before
    /// its answer stays `host.chunks-only-when-streamed`'s (not judged here; the order is
    /// `watched`'s, tested there and over the wire).
    #[test]
    fn s11_4_a_chunk_for_a_request_already_answered_fails() {
        let mut s = Streamed::default();
        assert!(s.verdict().is_none());
        s.after_answer("requestId 3".into());
        let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Fail, "{d}");
        assert!(
            d.contains("requestId 3") && d.contains("already answered"),
            "{d}"
        );
    }

    /// The joined deltas are kept up to [`JOINED_KEPT`] bytes; longer equal text still
    /// passes, compared by length and prefix.
    #[test]
    fn the_joined_deltas_are_bounded() {
        let mut s = probe();
        let piece = "é".repeat(JOINED_KEPT / 3);
        let mut all = String::new();
        for i in 0..4 {
            chunk(&mut s, json!(i), json!(piece));
            all.push_str(&piece);
        }
        assert!(s.joined.len() <= JOINED_KEPT);
        result(&mut s, &all);
        let (status, d) = s.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Pass, "{d}");
        assert!(d.contains("first"), "{d}");
    }
}
