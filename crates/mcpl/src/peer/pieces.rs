//! Several messages read on one line (`jsonrpc::several_values`): reported once, then
//! each taken as its own frame's text would be, in order, waiting (boxed, as every rare
//! wait of the reader) only when the incoming queue is full.

use super::reader::{take_read, Later, Parsed, Pieces, Taken};
use super::text::{read_text, TypedReads};
use super::*;

/// Takes several messages read on one line ([`super::text::Read::Several`]): reported once, the rest
/// past the bound refused with one `-32600` under a null id, then each read as its own
/// frame's text would be ([`take_pieces`]).
pub(super) fn take_several(
    shared: &Arc<Shared>,
    pieces: Vec<String>,
    (refused_past, ours_past): (bool, super::text::Past),
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Taken {
    shared.diagnose(Diagnostic::SeveralOnALine {
        count: pieces.len(),
        refused_past,
    });
    let mut after = Vec::new();
    if refused_past {
        let limit = shared.config.max_batch_entries.max(2);
        let _ = replies.send(refused_past_reply(limit));
        // An answer of ours past the bound ends its request now (a waiting caller at
        // once; one sent in order at the line's end, after the messages read of it).
        let why = format!(
            "the line holding it has more than {limit} messages \
             (PeerConfig::max_batch_entries); those past the first {limit} were refused unread"
        );
        // The policy there (§6.7) told first, as for a batch refused whole.
        after.extend(ours_past.policy.map(Parsed::PolicyUnread));
        after.extend(super::reader::fail_refused(shared, ours_past.ours, &why));
    }
    take_pieces(shared, pieces.into_iter(), after, inbound, replies)
}

/// The one `-32600` under a null id for the messages of a line past the first `limit`,
/// refused unread (a line held, or one discarded for its size, `oversized`).
pub(super) fn refused_past_reply(limit: usize) -> String {
    let reply = Message::Response(Response {
        id: None,
        outcome: Err(ErrorObject::invalid_request_because(format_args!(
            "more than {limit} messages on one line (one message per line); those past \
             the first {limit} were refused unread"
        ))
        .with_data(serde_json::json!({ "limit": limit, "reason": "messages_per_line" }))),
    });
    reply.to_json()
}

/// The one answer to the messages of a line refused unread past what the reader could keep
/// of them (`MAX_BATCH_SUMMARY_BYTES` of summaries): their ids are not known, so they are
/// refused together under a null id (JSON-RPC 2.0 §5), as those past the message bound are
/// ([`refused_past_reply`]); a request among them is never left without an answer.
pub(super) fn not_kept_reply() -> String {
    let reply = Message::Response(Response {
        id: None,
        outcome: Err(ErrorObject::invalid_request_because(format_args!(
            "more messages on one line (one message per line) than could be kept of a line \
             refused unread; those past it were refused unread"
        ))
        .with_data(serde_json::json!({ "reason": "messages_not_kept" }))),
    });
    reply.to_json()
}

/// Reads and takes each of several messages of one line in order, as if each had come on
/// its own line (a piece is one complete value, read on this task whatever its size); the
/// rest for later when the incoming queue is full.
pub(super) fn take_pieces(
    shared: &Arc<Shared>,
    mut pieces: std::vec::IntoIter<String>,
    after: Vec<Parsed>,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Taken {
    let max_batch = shared.config.max_batch_entries;
    let max_cost = shared.config.max_parsed_cost;
    for piece in pieces.by_ref() {
        let typed = TypedReads::default();
        let (read, weight) = read_text(shared, &piece, true, max_batch, max_cost, typed);
        shared.reading.store(weight, Ordering::Relaxed);
        match take_read(shared, read, inbound, replies) {
            Ok(true) => {}
            Ok(false) => return Taken::Done(false),
            Err(full) => {
                let (item, rest) = *full;
                let later = Pieces {
                    item,
                    rest,
                    pieces,
                    after,
                };
                return Taken::Later(Later::Pieces(Box::new(later)));
            }
        }
    }
    if after.is_empty() {
        return Taken::Done(true);
    }
    super::reader::deliver_refused(shared, after, inbound, replies)
}
