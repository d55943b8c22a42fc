//! The application's callers of the server's own requests (`Session::request`,
//! `Session::inference_stream`, …), and how the connection's driver learns that one went
//! away before its answer: each caller waits on a [`Reply`], which marks [`CallersGone`]
//! when dropped unanswered and wakes the driver. The driver then looks for the requests
//! whose reply is closed once per caller gone, not once per wake: before, every wake of
//! the driver (each message read, each command) polled every request in flight (up to
//! `PeerConfig::max_pending_requests`), as the host's driver avoids with its sweep flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::sync::{oneshot, Notify};

use super::SendError;

/// Set when a caller of the server's requests went away unanswered; the driver sweeps its
/// requests in flight when it takes it ([`Self::take`]).
#[derive(Debug, Default)]
pub(super) struct CallersGone {
    flag: AtomicBool,
    wake: Notify,
}

impl CallersGone {
    /// A caller went away: its receiver is dropped before this, so a sweep that takes the
    /// flag sees its reply closed.
    fn mark(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Whether a caller went away since the last take (and the flag cleared).
    pub(super) fn take(&self) -> bool {
        self.flag.swap(false, Ordering::SeqCst)
    }

    /// Ready once a caller went away since the last wake (a wake is kept while nobody
    /// waits, so none is lost between two waits).
    pub(super) async fn woken(&self) {
        self.wake.notified().await
    }
}

/// The answer a caller waits for (`None`: the driver ended without one). Dropped before it
/// came, it tells the driver ([`CallersGone`]).
#[derive(Debug)]
pub(super) struct Reply {
    /// `None` only while being dropped.
    rx: Option<oneshot::Receiver<Result<Value, SendError>>>,
    /// The answer (or the driver's end) was taken: nothing to tell on drop.
    done: bool,
    gone: Arc<CallersGone>,
}

impl Reply {
    /// Waits on `rx`, telling `gone` if dropped unanswered.
    pub(super) fn new(
        rx: oneshot::Receiver<Result<Value, SendError>>,
        gone: Arc<CallersGone>,
    ) -> Self {
        Reply {
            rx: Some(rx),
            done: false,
            gone,
        }
    }
}

impl Future for Reply {
    type Output = Option<Result<Value, SendError>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            return Poll::Ready(None);
        }
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(None);
        };
        let out = match Pin::new(rx).poll(cx) {
            Poll::Ready(out) => out.ok(),
            Poll::Pending => return Poll::Pending,
        };
        self.done = true;
        Poll::Ready(out)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        // The receiver first, so the driver that takes the mark sees the reply closed.
        drop(self.rx.take());
        if !self.done {
            self.gone.mark();
        }
    }
}
