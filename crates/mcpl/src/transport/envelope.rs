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
#[derive(Debug, Default)]
pub(crate) struct Sighted {
    envelope: Envelope,
    first: Vec<u8>,
    /// A batch's responses ([`batch::BatchSighted`]).
    batch: batch::BatchSighted,
}

impl Sighted {
    /// What is kept of a message refused for its encoding: its envelope read leniently
    /// ([`Envelope::lenient`]).
    pub(crate) fn lenient(bad_at: usize) -> Sighted {
        Sighted {
            envelope: Envelope::lenient(bad_at),
            first: Vec::new(),
            batch: batch::BatchSighted::default(),
        }
    }

    /// Reads the next bytes of the message.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let room = super::DISCARDED_HEAD_BYTES.saturating_sub(self.first.len());
        self.first
            .extend_from_slice(bytes.get(..room).unwrap_or(bytes));
        self.envelope.feed(bytes);
        self.batch.feed(bytes);
    }

    /// What the peer reads of the message: its envelope's summary ([`Envelope::summary`],
    /// `ended` as there); for a batch, the summaries of the responses in it, as a JSON
    /// array ([`batch::BatchSighted::summary`]); else its first bytes.
    pub(crate) fn head(self, ended: bool) -> Vec<u8> {
        self.envelope
            .summary(ended)
            .or_else(|| self.batch.summary())
            .unwrap_or(self.first)
    }
}
