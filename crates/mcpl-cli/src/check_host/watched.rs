//! What the host left unfinished (§4: one message per line). The peer owns the transport's
//! reader, so it is wrapped: each time a read of it waits, what the reader holds of a line
//! without its end ([`FrameReader::unfinished`]) is noted, its length and its first
//! [`crate::check::conn::UNFINISHED_QUOTE_BYTES`] (copied only when its length changed),
//! for the report of a wait that ends without the message ([`Left::describe`]).

use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use mcpl::transport::{BoxFuture, Frame, FrameReader, MessageBudget, Transport};

use crate::check::conn::{describe_unfinished, unfinished_quote};

/// A line without its end: its length, and its start as quoted.
type Held = Option<(usize, Vec<u8>)>;

/// The line the host's reader held without its end when a read last waited. Shared between
/// the wrapped reader and the run.
#[derive(Debug, Clone, Default)]
pub(super) struct Left(Arc<Mutex<Held>>);

impl Left {
    /// `it left N bytes of a line unfinished (no newline): "…"`, or `None`.
    pub(super) fn describe(&self) -> Option<String> {
        let held = self.0.lock().ok()?;
        let (len, quoted) = held.as_ref()?;
        Some(describe_unfinished(*len, quoted))
    }

    fn note(&self, line: Option<&[u8]>) {
        let Ok(mut held) = self.0.lock() else {
            return;
        };
        match (line, held.as_ref()) {
            (None, None) => {}
            (Some(l), Some((len, _))) if l.len() == *len => {}
            (Some(l), _) => *held = Some((l.len(), unfinished_quote(l).to_vec())),
            (None, Some(_)) => *held = None,
        }
    }
}

/// `transport` with its reader noting into the returned [`Left`].
pub(super) fn watched(transport: Transport) -> (Transport, Left) {
    let left = Left::default();
    let Transport {
        reader,
        writer,
        guard,
        description,
    } = transport;
    let reader = Box::new(Watched {
        inner: reader,
        left: left.clone(),
    });
    let transport = Transport {
        reader,
        writer,
        guard,
        description,
    };
    (transport, left)
}

/// A reader that notes what its inner reader holds of a line each time it is polled.
struct Watched {
    inner: Box<dyn FrameReader>,
    left: Left,
}

impl FrameReader for Watched {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        // Only a reader that polls in place can be looked into while it waits.
        self.inner.next_frame()
    }

    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        let polled = self.inner.poll_next_frame(cx);
        if matches!(polled, Some(Poll::Pending)) {
            self.left.note(self.inner.unfinished());
        } else {
            self.left.note(None);
        }
        polled
    }

    fn recycle(&mut self, text: String) {
        self.inner.recycle(text);
    }

    fn set_max_message_size(&mut self, limit: usize) {
        self.inner.set_max_message_size(limit);
    }

    fn unfinished(&self) -> Option<&[u8]> {
        self.inner.unfinished()
    }

    fn ended_mid_line(&self) -> bool {
        self.inner.ended_mid_line()
    }

    fn set_message_budget(&mut self, budget: MessageBudget) {
        self.inner.set_message_budget(budget);
    }
}
