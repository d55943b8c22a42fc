//! `rpc.request-ids-unique` (`mcpl check`) and `host.request-ids-unique` (`mcpl check-host`):
//! MCP, over which §4 carries MCPL, says "the request ID MUST NOT have been previously used
//! by the requestor within the same session". The ids of the requests the other side sends
//! on one connection are remembered, to tell one sent again.
//!
//! Reading: JSON-RPC 2.0 itself asks only that a response carry its request's id, so an id
//! used again once its first request was answered is MCP's rule broken, not a reply the
//! receiver cannot place: the check warns. Bounded: at most [`MAX_IDS_KEPT`] ids, each at most
//! [`MAX_ID_TEXT`] bytes as written (a longer one is not remembered); past the bound further
//! ids are not remembered, so their reuse goes unseen.
//!
//! `rpc.in-flight-ids-unique` and `host.in-flight-ids-unique` ([`InFlightIds`]) fail the
//! stricter case: a request under the id of one still unanswered.
//!
//! "The same id" is the library's one identity ([`mcpl::jsonrpc::InFlightId`]), by which its
//! peer and both sans-I/O machines refuse a reuse: a number by its value (`5`, `5.0` and
//! `5e0` one id; `0` and `-0.0` one), a string by its exact text (`"5"` no number).

use std::collections::{BTreeMap, HashMap, HashSet};

use mcpl::jsonrpc::{InFlightId, RequestId};

use crate::check::report::Status;

/// Most request ids remembered per connection.
pub(crate) const MAX_IDS_KEPT: usize = 4096;

/// Longest id remembered, in bytes of its JSON text.
pub(crate) const MAX_ID_TEXT: usize = 256;

/// Characters of the first reused id quoted in the detail.
const QUOTED_CHARS: usize = 64;

/// How a response that answers no request awaited is said, by the one reading of both
/// checkers (`rpc.responses-answer-requests`, `host.responses-answer-requests`; JSON-RPC 2.0
/// §5: a response answers one request of the receiver's, once): under the id of a request
/// the checker sent (`sent`), a second response to it, already answered; under any other
/// id, a response under an id the checker never sent; under id null, a response to no
/// request, the checker's requests being valid (`mcpl check-host` sends one junk line on
/// purpose and reads the `-32700` under id null it is owed elsewhere, never here). At most
/// [`QUOTED_CHARS`] characters of the id are quoted.
pub(crate) fn stray_response(id: Option<&RequestId>, sent: bool) -> String {
    match id {
        Some(id) => {
            let quoted: String = id.to_string().chars().take(QUOTED_CHARS).collect();
            if sent {
                format!("a second response to request {quoted}, already answered")
            } else {
                format!("a response under id {quoted}, which the checker never sent")
            }
        }
        None => "a response under id null, to no request the checker sent (each of its \
                 requests is valid)"
            .to_owned(),
    }
}

/// How an entry of a batch (a JSON array frame) that is a response is said, by the one
/// reading of both checkers (`transport.frames-valid`, `host.frames-valid`), `None` for an
/// entry that is no response (an object with no `method` and a `result` or an `error`).
/// Neither checker ever sends a batch, so every request it is answered for went alone, and
/// JSON-RPC 2.0 §5 says a request is answered with a Response expressed as a single JSON
/// Object; an array answers a batch only (§6). A MUST broken: the checkers fail it, yet read
/// the response as its answer, as the library's peer reads a batch of responses. At most
/// [`QUOTED_CHARS`] characters of the id are quoted.
pub(crate) fn batched_response(entry: &serde_json::Value) -> Option<String> {
    let response = entry.get("method").is_none()
        && (entry.get("result").is_some() || entry.get("error").is_some());
    if !response {
        return None;
    }
    let id: String = match entry.get("id") {
        Some(id) => id.to_string().chars().take(QUOTED_CHARS).collect(),
        None => "absent".to_owned(),
    };
    Some(format!(
        "response id {id} in a batch (an array) to a request sent alone: JSON-RPC 2.0 §5 \
         answers one with a single Response object"
    ))
}

/// The request ids one connection's other side used, and those it used again.
#[derive(Debug, Default)]
pub(crate) struct RequestIds {
    seen: HashSet<InFlightId>,
    requests: u64,
    reused: u64,
    first: Option<String>,
}

impl RequestIds {
    /// Notes one request the other side sent under `id`.
    pub(crate) fn note(&mut self, id: &RequestId) {
        self.requests = self.requests.saturating_add(1);
        let text = id.to_string();
        if text.len() > MAX_ID_TEXT {
            return;
        }
        let kept = InFlightId::of(id);
        if self.seen.contains(&kept) {
            self.reused = self.reused.saturating_add(1);
            if self.first.is_none() {
                self.first = Some(text.chars().take(QUOTED_CHARS).collect());
            }
        } else if self.seen.len() < MAX_IDS_KEPT {
            self.seen.insert(kept);
        }
    }

    /// The verdict on the connection, `who` being the other side (`server`, `host`): `None`
    /// when it sent no request.
    pub(crate) fn verdict(&self, who: &str) -> Option<(Status, String)> {
        match (&self.first, self.requests) {
            (_, 0) => None,
            (Some(first), n) => Some((
                Status::Warn,
                format!(
                    "{} of {n} request(s) reused an id the {who} had sent before in the session \
                     (MCP: a request id MUST NOT have been previously used within the same \
                     session), the first {first}",
                    self.reused
                ),
            )),
            (None, n) => Some((
                Status::Pass,
                format!("{n} request(s), each under its own id"),
            )),
        }
    }
}

/// `rpc.in-flight-ids-unique` (`mcpl check`) and `host.in-flight-ids-unique`
/// (`mcpl check-host`): the ids of the other side's requests the checker has not answered
/// yet, and the requests that came under one of them.
///
/// Reading: MCP's base protocol has ids unique per session, and JSON-RPC 2.0 §5 pairs a
/// response with its request by id alone, so two requests in flight under one id cannot both
/// be answered where the sender can tell the answers apart; unlike a reuse after the answer
/// (`*.request-ids-unique`, a warning) it fails. "In flight" is as the server could know
/// it (JSON-RPC 2.0 §4, MCPL §5): a request is in flight until its answer is written, so one
/// whose bytes arrived before the checker's answer to the earlier request under its id was
/// written is a reuse in flight, however soon after it the checker read it (two requests
/// written back to back, read one by one, the first answered in between: F8); one sent
/// after the answer reached the server is not (a batch gathered, an answer held on purpose,
/// are in flight until theirs are written). Bounded as [`RequestIds`]: at most
/// [`MAX_IDS_KEPT`] open ids and as many answered ids whose answer was not yet written,
/// each at most [`MAX_ID_TEXT`] bytes.
#[derive(Debug, Default)]
pub(crate) struct InFlightIds {
    open: HashSet<InFlightId>,
    /// Ids answered by the checker, with the number of the frame that answered them
    /// (`mcpl check`'s [`crate::check::conn::Conn::sent_frames`]), until a request arrives
    /// that the server sent after reading that frame.
    answering: HashMap<InFlightId, u64>,
    /// The same answered ids ordered by their frame, so each request drops the answers
    /// written before it in time proportional to what it drops (no scan of the rest).
    by_frame: BTreeMap<u64, Vec<InFlightId>>,
    requests: u64,
    reused: u64,
    first: Option<String>,
}

impl InFlightIds {
    /// Notes one request under `id`, now in flight, which arrived when the checker had
    /// written `written` frames; `true` (and counted) when a request under `id` was
    /// already in flight: not answered, or answered by a frame numbered past `written`
    /// (the server had not read that answer when it sent this request).
    pub(crate) fn opened(&mut self, id: &RequestId, written: u64) -> bool {
        while let Some((frame, _)) = self.by_frame.first_key_value() {
            if *frame > written {
                break;
            }
            for gone in self
                .by_frame
                .pop_first()
                .map(|(_, g)| g)
                .unwrap_or_default()
            {
                self.answering.remove(&gone);
            }
        }
        let kept = InFlightId::of(id);
        if self.open.contains(&kept) || self.answering.contains_key(&kept) {
            self.reused(id);
            return true;
        }
        self.requests = self.requests.saturating_add(1);
        if id.to_string().len() <= MAX_ID_TEXT && self.open.len() < MAX_IDS_KEPT {
            self.open.insert(kept);
        }
        false
    }

    /// Notes one request that is not tracked (its sender's library tracks it), counted only.
    pub(crate) fn counted(&mut self) {
        self.requests = self.requests.saturating_add(1);
    }

    /// The request under `id` was answered by the checker's frame numbered `frame`: in
    /// flight until a request arrives that the server sent after that frame was written
    /// ([`InFlightIds::opened`]).
    pub(crate) fn answered(&mut self, id: &RequestId, frame: u64) {
        let kept = InFlightId::of(id);
        if self.open.remove(&kept) && self.answering.len() < MAX_IDS_KEPT {
            self.by_frame.entry(frame).or_default().push(kept.clone());
            self.answering.insert(kept, frame);
        }
    }

    /// Counts one request that came under `id` while a request under `id` was in flight.
    pub(crate) fn reused(&mut self, id: &RequestId) {
        self.requests = self.requests.saturating_add(1);
        self.reused = self.reused.saturating_add(1);
        if self.first.is_none() {
            self.first = Some(id.to_string().chars().take(QUOTED_CHARS).collect());
        }
    }

    /// The verdict on the connection, `who` being the other side: `None` when it sent no
    /// request.
    pub(crate) fn verdict(&self, who: &str) -> Option<(Status, String)> {
        match (&self.first, self.requests) {
            (_, 0) => None,
            (Some(first), n) => Some((
                Status::Fail,
                format!(
                    "{} of {n} request(s) came under the id of a request the {who} sent \
                     earlier that the checker had not answered yet (MCP: an id is never reused \
                     while in flight; JSON-RPC 2.0 §5 pairs an answer by id alone), the \
                     first {first}; refused -32600",
                    self.reused
                ),
            )),
            (None, n) => Some((
                Status::Pass,
                format!("{n} request(s), none under the id of one still unanswered"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reuse warns, quoting the first reused id; distinct ids pass; ids past the bound and
    /// longer than it are not remembered.
    #[test]
    fn a_reused_request_id_is_told_within_the_bound() {
        let mut ids = RequestIds::default();
        assert_eq!(ids.verdict("server"), None);
        ids.note(&RequestId::Number(1.into()));
        ids.note(&RequestId::String("1".into()));
        assert_eq!(ids.verdict("server").map(|v| v.0), Some(Status::Pass));
        ids.note(&RequestId::String("1".into()));
        let (status, d) = ids
            .verdict("server")
            .unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Warn);
        assert!(
            d.starts_with("1 of 3 request(s)") && d.contains("\"1\""),
            "{d}"
        );
        let mut ids = RequestIds::default();
        let long = RequestId::String("x".repeat(MAX_ID_TEXT));
        ids.note(&long);
        ids.note(&long);
        for i in 0..(MAX_IDS_KEPT as i64 + 10) {
            ids.note(&RequestId::Number(i.into()));
        }
        assert_eq!(ids.seen.len(), MAX_IDS_KEPT);
        assert_eq!(ids.verdict("server").map(|v| v.0), Some(Status::Pass));
    }

    /// One id is the library's identity: `7` then `7.0` is a reuse (a warning here, a fail
    /// in flight); `"7"` after `7` is not.
    #[test]
    fn an_id_is_one_by_its_value_not_its_text() {
        let id =
            |t: &str| RequestId::from_request_value(&serde_json::from_str(t).unwrap()).unwrap();
        let mut ids = RequestIds::default();
        ids.note(&id("7"));
        ids.note(&id("\"7\""));
        assert_eq!(ids.verdict("host").map(|v| v.0), Some(Status::Pass));
        ids.note(&id("7.0"));
        assert_eq!(ids.verdict("host").map(|v| v.0), Some(Status::Warn));
        let mut ids = InFlightIds::default();
        assert!(!ids.opened(&id("0"), 0));
        assert!(ids.opened(&id("-0.0"), 0));
        assert!(!ids.opened(&id("\"0\""), 0));
        ids.answered(&id("0"), 1);
        assert!(ids.opened(&id("0e0"), 0), "its answer not yet written");
        assert!(!ids.opened(&id("0.0"), 1), "its answer written");
    }

    /// An id reused once its request was answered is no in-flight reuse; one reused while
    /// its request is open fails, quoting it; the open set stays within its bound.
    #[test]
    fn an_id_reused_in_flight_fails_and_one_reused_after_its_answer_does_not() {
        let mut ids = InFlightIds::default();
        assert_eq!(ids.verdict("server"), None);
        let p = RequestId::String("p".into());
        assert!(!ids.opened(&p, 0));
        ids.answered(&p, 1);
        assert!(!ids.opened(&p, 1), "sent once the answer was written");
        assert_eq!(ids.verdict("server").map(|v| v.0), Some(Status::Pass));
        assert!(ids.opened(&p, 1));
        let (status, d) = ids
            .verdict("server")
            .unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Fail);
        assert!(
            d.starts_with("1 of 3 request(s)") && d.contains("\"p\""),
            "{d}"
        );
        for i in 0..(MAX_IDS_KEPT as i64 + 10) {
            ids.opened(&RequestId::Number(i.into()), 1);
        }
        assert_eq!(ids.open.len(), MAX_IDS_KEPT);
    }

    /// F8: a request whose bytes arrived before the answer to the earlier one under its id
    /// was written (frame 3, 2 written) is a reuse in flight, though that answer was sent
    /// before it was read; once frame 3 is written, the id is free.
    #[test]
    fn an_id_reused_before_its_answer_was_written_is_in_flight() {
        let mut ids = InFlightIds::default();
        let r = RequestId::String("r".into());
        assert!(!ids.opened(&r, 2));
        ids.answered(&r, 3);
        assert!(ids.opened(&r, 2), "arrived before frame 3 was written");
        assert_eq!(ids.verdict("server").map(|v| v.0), Some(Status::Fail));
        let q = RequestId::String("q".into());
        assert!(!ids.opened(&q, 3));
        ids.answered(&q, 4);
        assert!(!ids.opened(&q, 4), "arrived after frame 4 was written");
        assert!(ids.answering.is_empty(), "{:?}", ids.answering);
    }

    /// Answers written in any frame order are each dropped once a request arrives after
    /// their frame, and only then: the ordered index and the map stay one set.
    #[test]
    fn answered_ids_leave_in_frame_order_whatever_order_they_came_in() {
        let mut ids = InFlightIds::default();
        let (a, b, x) = (
            RequestId::String("a".into()),
            RequestId::String("b".into()),
            RequestId::String("x".into()),
        );
        assert!(!ids.opened(&a, 0) && !ids.opened(&b, 0));
        ids.answered(&a, 5);
        ids.answered(&b, 3);
        assert!(!ids.opened(&x, 3));
        assert!(!ids.opened(&b, 3), "frame 3 was written: b is free");
        assert!(ids.opened(&a, 4), "frame 5 was not written: a is in flight");
        assert_eq!(ids.answering.len(), 1);
        assert_eq!(ids.by_frame.len(), 1);
        assert!(!ids.opened(&RequestId::String("y".into()), 5));
        assert!(ids.answering.is_empty() && ids.by_frame.is_empty());
    }
}
