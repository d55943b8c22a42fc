//! What the pump hands the driver ([`Event`]): a frame, or what it saw instead.

use mcpl::jsonrpc::{ErrorObject, RequestId};
use serde_json::Value;

/// What the pump saw.
#[derive(Debug)]
pub enum Event {
    /// A frame that parsed as JSON.
    Frame(Value),
    /// A text frame that is not JSON: its first [`super::JUNK_CHARS`] characters, for the report.
    Junk(String),
    /// A frame the transport discarded: an over-long line ([`mcpl::transport::Frame::Oversized`]) or one that
    /// is not text ([`mcpl::transport::Frame::NotText`]). The connection survives it.
    Invalid(String),
    /// A frame the checker did not read (over the message size or the budget for partial
    /// messages, or too costly to parse) whose envelope shows a response: the id it
    /// answers, and why it was not read.
    Unread { id: RequestId, why: String },
    /// The same for a frame whose envelope shows a request with an `id` member: answered
    /// `-32600` under that id, or under id null when it is no usable one (`None`: `null`, a
    /// fraction, an object; JSON-RPC 2.0 §5).
    Unanswerable { id: Option<RequestId>, why: String },
    /// A text that begins as a message (`{` or `[`) yet does not parse, or nests past the
    /// parser, and shows no response: said first as [`Event::Junk`] or [`Event::Invalid`],
    /// then this, answered as the library's peer answers it (JSON-RPC 2.0 §5.1), `error`
    /// under `id` (`None`: id null) ([`super::classify::refusal`]).
    Refused {
        id: Option<RequestId>,
        error: ErrorObject,
        /// The id of an object with an id and neither a `method` nor an outcome (JSON-RPC 2.0
        /// §4, §5; `mcpl::jsonrpc::Refusal::AnswerUnlessOurs`): when it is one of the
        /// checker's own requests, the text is that request's unusable answer, never
        /// answered back.
        unless_ours: Option<RequestId>,
    },
    /// A text beginning with a batch the parser refused only for what follows it on its
    /// line: said first as [`Event::Junk`], then this, each of the batch's requests answered
    /// `-32700` under its id in one array, as the library's peer answers it (JSON-RPC 2.0
    /// §5, §6; `mcpl::jsonrpc::ParseError::owed_answers`): the answers, in order.
    RefusedBatch(Vec<mcpl::jsonrpc::Response>),
    /// Some messages of a line discarded unread were not kept (past the bound on what the
    /// reader keeps of them, `mcpl::jsonrpc::envelope::batch::MAX_BATCH_SUMMARY_BYTES`):
    /// any request of the checker's may have been answered there, so the awaited one ends
    /// now as unread, as the library's peer fails every request of its own outstanding.
    UnreadSome { why: String },
    /// The messages that follow (each an event of its own) came on one line, `said` how
    /// many (MCP's stdio framing: one message per line): each is read alone, as the
    /// library's peer reads them (`mcpl::jsonrpc::several_values`).
    Several(String),
    /// End of stream, or a read or write error.
    Closed(String),
    /// The frame that follows (a [`Event::Frame`]) repeats a member name within one of its
    /// objects: what and where ([`crate::check::repeated::describe`]).
    Repeated(String),
    /// The frame that follows is a batch whose entry `entry` repeats a member name within
    /// one of its objects: the first such repeat in that entry, said as [`Event::Repeated`]
    /// says one (its path from `[entry]`). Said for each entry that has one (at most
    /// [`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`] entries are read), so an entry that decides
    /// authority is judged on its own whatever an earlier entry repeats.
    RepeatedInEntry { entry: usize, what: String },
    /// The frame that follows (a [`Event::Frame`]) was one message spread over several
    /// lines, joined ([`crate::check::spread`]): how many, and its start quoted.
    Spread(String),
    /// The frame that follows (a [`Event::Frame`]) began with a UTF-8 byte order mark
    /// (U+FEFF), read past (RFC 8259 §8.1: a writer must not add one, a parser may ignore
    /// it, and the library's peer does).
    ByteOrderMark,
}

/// How a reason begins when the checker discarded a frame unread for one of its own bounds
/// (its message size, its budget for partial messages, the parsed cost it reads), not for
/// anything the frame shows: §4 sets no size, so such a frame is not shown invalid, and
/// `transport.frames-valid` says it as the checker's bound ([`own_bound`], [`own_bound_reason`]).
pub const OWN_BOUND: &str = "over the checker's own bound (§4 sets none): ";

/// `why`, said as a frame discarded for the checker's own bound ([`OWN_BOUND`]).
pub fn own_bound(why: impl std::fmt::Display) -> String {
    format!("{OWN_BOUND}{why}")
}

/// The reason of a frame discarded for the checker's own bound ([`own_bound`]) without its
/// mark; `None` when `why` says no such frame.
pub fn own_bound_reason(why: &str) -> Option<&str> {
    why.strip_prefix(OWN_BOUND)
}

impl Event {
    /// The events of a message refused for the budget of partial messages (`bytes` read,
    /// `limit` the budget, `batch` whether it was a batch, by the library's reading) and of
    /// the other messages on its line (`several`: there were some; the line is then said to
    /// be what was refused, [`ErrorObject::over_message_budget_on_line`]), answered as the library's peer answers them: each request said as an invalid frame, then refused
    /// with [`ErrorObject::over_message_budget`] (`-32000`: the message may be valid and
    /// refused only for this side's resources, JSON-RPC 2.0 §5.1) where it would be
    /// `-32600`; every other event as it was.
    pub(super) fn over_budget(
        events: impl IntoIterator<Item = Event>,
        bytes: usize,
        limit: usize,
        batch: bool,
        several: bool,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            match event {
                Event::Unanswerable { id, why } => {
                    out.push(Event::Invalid(why));
                    out.push(Event::Refused {
                        id,
                        // The first event is the message itself; the others on its line
                        // are answered as a text that does not parse is (`peer::refused`).
                        error: ErrorObject::over_message_budget_on_line(
                            bytes,
                            limit,
                            batch && i == 0,
                            several,
                        ),
                        unless_ours: None,
                    });
                }
                other => out.push(other),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request refused for the budget is answered `-32000` under its id, as the peer
    /// answers it (one public rule); a response of the checker's stays unread.
    #[test]
    fn a_request_over_the_budget_is_refused_as_the_peer_refuses_it() {
        let id = RequestId::Number(7.into());
        let out = Event::over_budget(
            [
                Event::Unanswerable {
                    id: Some(id.clone()),
                    why: "over".into(),
                },
                Event::Unread {
                    id: id.clone(),
                    why: "rest".into(),
                },
            ],
            10,
            8,
            false,
            false,
        );
        let refused = out.iter().find_map(|e| match e {
            Event::Refused { id, error, .. } => Some((id.clone(), error.code)),
            _ => None,
        });
        assert_eq!(refused, Some((Some(id), -32000)));
        assert!(matches!(out.first(), Some(Event::Invalid(w)) if w == "over"));
        assert!(matches!(out.last(), Some(Event::Unread { .. })));
        assert_eq!(out.len(), 3);
    }

    /// A batch refused for the budget is said as a batch (the peer's `head.batch`), and only
    /// the refused message itself: another message on its line is said as a request, each
    /// told its line (of several) was refused.
    #[test]
    fn a_batch_over_the_budget_is_said_as_a_batch() {
        let out = Event::over_budget(
            [
                Event::Unanswerable {
                    id: None,
                    why: "over".into(),
                },
                Event::Unanswerable {
                    id: None,
                    why: "after".into(),
                },
            ],
            10,
            8,
            mcpl::jsonrpc::discarded_is_batch(b"  [{\"jsonrpc\":\"2.0\""),
            true,
        );
        let said: Vec<String> = out
            .iter()
            .filter_map(|e| match e {
                Event::Refused { error, .. } => Some(error.message.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(said.len(), 2);
        // A line of several: the line is what was refused, neither message blamed.
        assert!(said[0].contains("the line holding the batch"), "{said:?}");
        assert!(said[1].contains("the line holding the request"), "{said:?}");
        assert!(
            said.iter().all(|m| m.contains("more than one message")),
            "{said:?}"
        );
        assert!(!mcpl::jsonrpc::discarded_is_batch(b"{\"id\":1"));
    }
}
