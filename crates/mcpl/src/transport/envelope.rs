//! The envelope of a message read as it streams past, in bounded memory
//! ([`Envelope`], defined with the JSON-RPC envelope in `jsonrpc`, where the sans-I/O
//! drivers reach it too), and what a line reader keeps of a message it refuses
//! (`Sighted`).

pub(crate) use crate::jsonrpc::envelope::batch_entries;
pub use crate::jsonrpc::envelope::{batch, Envelope, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// What a reader keeps of a message it refuses, read as its bytes stream past: the
/// envelope, and the first [`super::DISCARDED_HEAD_BYTES`] for a message that is no object
/// (a batch, junk). The one rule by which a transport that cannot keep the message tells
/// the peer what it showed ([`super::FrameReader::discarded_head`]).
#[derive(Debug)]
pub(crate) struct Sighted {
    envelope: Envelope,
    first: Vec<u8>,
    /// A batch's responses ([`batch::BatchSighted`]).
    batch: batch::BatchSighted,
    /// The messages after the first when the line holds several objects separated by
    /// whitespace ([`batch::BatchSighted::several`]).
    several: batch::BatchSighted,
}

/// The summaries of the messages after the first on a line refused unread
/// ([`Sighted::head_and_rest`]): each handled as if it had come alone, and whether some
/// found no room (`jsonrpc::envelope::batch::MAX_BATCH_SUMMARY_BYTES`).
#[derive(Debug, Default)]
pub(crate) struct Rest {
    /// Each message's envelope summary, in order.
    pub(crate) pieces: Vec<Vec<u8>>,
    /// Some were not kept.
    pub(crate) unkept: bool,
    /// A policy message (§6.7) among those not kept, in its stronger form.
    pub(crate) policy: Option<crate::policy::Form>,
}

impl Default for Sighted {
    fn default() -> Self {
        Sighted {
            envelope: Envelope::default(),
            first: Vec::new(),
            batch: batch::BatchSighted::default(),
            several: batch::BatchSighted::several(),
        }
    }
}

impl Sighted {
    /// What is kept of a message refused for its encoding: its envelope read leniently
    /// ([`Envelope::lenient`]).
    pub(crate) fn lenient(bad_at: usize) -> Sighted {
        Sighted {
            envelope: Envelope::lenient(bad_at),
            first: Vec::new(),
            batch: batch::BatchSighted::default(),
            several: batch::BatchSighted::several(),
        }
    }

    /// Reads the next bytes of the message.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let room = super::DISCARDED_HEAD_BYTES.saturating_sub(self.first.len());
        self.first
            .extend_from_slice(bytes.get(..room).unwrap_or(bytes));
        self.envelope.feed(bytes);
        self.batch.feed(bytes);
        self.several.feed(bytes);
    }

    /// Whether what was read so far of a message refused part read leaves some message of
    /// its line in doubt where the rest of the line would tell (r14 F1-F4), so a line reader
    /// holds the refusal to the line's end, reading the rest into this (bounded):
    /// nothing but what precedes a message was read ([`Envelope::before_message`]); the
    /// object's `id` is absent or cut, or it tells only a report, by the peer's one rule
    /// (`jsonrpc::head::discarded_in_doubt`: a request would be answered under `null` or
    /// not at all, a response of ours fail nothing); or, on a line of several, the read
    /// went past its first object and the rest is unseen
    /// ([`batch::BatchSighted::tail_unseen`]: its requests would be answered under `null`
    /// and every request of ours failed as not kept). A batch, junk, or a single object
    /// whose id was read whole tell enough already and are refused at once.
    pub(crate) fn in_doubt(&self) -> bool {
        self.envelope.before_message()
            || self.several.tail_unseen()
            || self
                .envelope
                .summary(false)
                .is_some_and(|summary| crate::jsonrpc::head::discarded_in_doubt(&summary))
    }

    /// What the peer reads of the message: its envelope's summary ([`Envelope::summary`],
    /// `ended` as there); for a batch, the summaries of the responses in it, as a JSON
    /// array ([`batch::BatchSighted::summary`]); else its first bytes.
    pub(crate) fn head(self, ended: bool) -> Vec<u8> {
        self.head_and_rest(ended).0
    }

    /// [`Sighted::head`], and the messages after the first on a line that holds several
    /// objects separated by whitespace ([`Rest`]; empty otherwise): MCP's stdio framing is
    /// one message per line, and the peer reads a line of several whole messages each as
    /// if alone (`jsonrpc::several_values`), so one refused unread is refused message by
    /// message too, each request answered under its id and each response of the peer's
    /// ending its request, none left to its deadline.
    pub(crate) fn head_and_rest(self, ended: bool) -> (Vec<u8>, Rest) {
        let (pieces, unkept, policy) = self.several.several_pieces(ended);
        let head = self
            .envelope
            .summary(ended)
            .or_else(|| self.batch.summary())
            .unwrap_or(self.first);
        (
            head,
            Rest {
                pieces,
                unkept,
                policy,
            },
        )
    }
}

/// What a reader keeps of a line it refused: [`Sighted::head_and_rest`], the rest as
/// `FrameReader::discarded_rest` gives it (the `"responses not kept"` mark last when some
/// found no room, after the mark of a policy message among those, `batch::policy_mark`).
pub(crate) fn kept(sighted: Sighted, ended: bool) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (head, rest) = sighted.head_and_rest(ended);
    let mut pieces = rest.pieces;
    if let Some(form) = rest.policy {
        pieces.push(batch::policy_mark(form).to_vec());
    }
    if rest.unkept {
        pieces.push(batch::UNKEPT.to_vec());
    }
    (head, pieces)
}
