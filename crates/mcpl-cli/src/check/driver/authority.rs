//! Answers that decide authority, read whole: the answer to `initialize` and to
//! `mcpl/manifest` carries the manifest that decides what is granted, and one naming a
//! member twice anywhere in its text is refused whole, as the library host refuses it
//! ([`mcpl::jsonrpc::repeated::answer_read_whole`], the peer's `invalid response`): never read as its
//! last copy (§5.4, fail closed; I-JSON, RFC 7493 §2.3). The request then ends as one whose
//! answer could not be used ([`Reply::Invalid`]), and the check judging that answer fails
//! saying why. `transport.member-names-unique` still warns about the repeat itself, as for
//! any message.
//!
//! Reading for a batch: each entry is judged on its own, as the library reads a batch
//! (`jsonrpc::repeated::first_repeated_each`): the frame reader reports each entry's first
//! repeat with its path (`[2].result…` for the third entry,
//! [`crate::check::conn::Event::RepeatedInEntry`]), and the answer is refused only for a
//! repeat in the entry that answers, so a repeat elsewhere in the batch leaves the answer
//! read, and one in the answer is seen whatever an earlier entry repeats (it had been
//! missed behind an earlier repeat elsewhere: the reader reported one repeat a frame).

use super::*;

/// The check that warns about a member name repeated within an object of any frame (RFC
/// 8259 §4, I-JSON RFC 7493 §2.3).
pub(super) const MEMBER_NAMES_UNIQUE: &str = "transport.member-names-unique";

/// The repeats the frame reader reported, as they move from the report to the answer.
#[derive(Debug, Default)]
pub(super) struct Doubled {
    /// Reported for the frame that comes next ([`crate::check::conn::Event::Repeated`]
    /// arrives just before its frame).
    pending: Option<String>,
    /// Reported for the frame being handled.
    frame: Option<String>,
    /// Each batch entry's first repeat, reported for the frame that comes next.
    pending_entries: Vec<(usize, String)>,
    /// The same, for the frame being handled.
    frame_entries: Vec<(usize, String)>,
    /// Reported for the frame (or batch entry) that carried the awaited answer.
    answer: Option<String>,
}

impl Session {
    /// Warns under [`MEMBER_NAMES_UNIQUE`], listing the repeats the frame reader reported;
    /// records nothing when there were none. Called when the run ends, and when it ends at
    /// `initialize` (an answer refused for its repeat: the repeat is this check's finding,
    /// never skipped with the rest).
    pub(super) fn record_repeated(&mut self) {
        if !self.repeated.is_empty() {
            let what = self.repeated.listed("repeated a member name");
            self.rec.record(MEMBER_NAMES_UNIQUE, Status::Warn, what);
        }
    }

    /// The frame reader reported `what` (a member name repeated) for the frame that follows.
    pub(super) fn repeat_reported(&mut self, what: &str) {
        self.doubled.pending = Some(what.to_owned());
    }

    /// A frame begins: the repeat reported for it, if any, is its own now.
    pub(super) fn frame_begins(&mut self) {
        self.doubled.frame = self.doubled.pending.take();
        self.doubled.frame_entries = std::mem::take(&mut self.doubled.pending_entries);
    }

    /// The frame reader reported `what` as the first repeat in entry `entry` of the batch
    /// that follows.
    pub(super) fn entry_repeat_reported(&mut self, entry: usize, what: String) {
        self.doubled.pending_entries.push((entry, what));
    }

    /// The awaited answer came in the frame being handled, as its batch entry `entry`
    /// (`None` for a frame that is one message): a repeat the frame carries is the
    /// answer's when it lies there.
    pub(super) fn awaited_in(&mut self, entry: Option<usize>) {
        let frame = self.doubled.frame.take();
        let entries = std::mem::take(&mut self.doubled.frame_entries);
        self.doubled.answer = match entry {
            None => frame,
            Some(i) => entries
                .into_iter()
                .find(|(at, _)| *at == i)
                .map(|(_, what)| what)
                .or_else(|| frame.filter(|what| in_entry(what, i))),
        };
    }

    /// `reply`, the answer to our request `method`, unless it decides authority and its
    /// text names a member twice: then an invalid response saying so.
    pub(super) fn read_whole(&mut self, method: &str, reply: Reply) -> Reply {
        let repeat = self.doubled.answer.take();
        let (Some(what), true) = (repeat, mcpl::jsonrpc::repeated::answer_read_whole(method))
        else {
            return reply;
        };
        if !matches!(reply, Reply::Result(_) | Reply::Error(_)) {
            return reply;
        }
        let what = what.trim_end_matches(" (read as the last one)");
        Reply::Invalid(format!(
            "{what}: an answer that decides authority naming a member twice is refused whole, \
             never read as one of its copies, as a library host refuses it (§5.4: fail \
             closed; I-JSON, RFC 7493 §2.3)"
        ))
    }
}

/// Whether the repeat `what` (as [`crate::check::repeated::describe`] says it) lies in
/// entry `i` of a batch: its path starts with `[i]`.
fn in_entry(what: &str, i: usize) -> bool {
    let at = format!(" repeated in [{i}]");
    what.match_indices(&at).any(|(start, m)| {
        what.get(start + m.len()..)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with(' '))
    })
}

#[cfg(test)]
mod tests {
    use super::in_entry;

    #[test]
    fn a_repeat_is_placed_in_its_batch_entry() {
        let first = r#""mcpl" repeated in [0].result.capabilities.experimental of a batch"#;
        assert!(in_entry(first, 0));
        assert!(!in_entry(first, 1));
        let top = r#""id" repeated in [12] of a batch (read as the last one)"#;
        assert!(in_entry(top, 12));
        assert!(!in_entry(top, 1));
        let single = r#""mcpl" repeated in result.capabilities of response id 1"#;
        assert!(!in_entry(single, 0));
    }
}
