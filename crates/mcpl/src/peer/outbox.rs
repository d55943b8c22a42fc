//! A sender that never waits for the writer (issue #24): a session's driver reads the wire
//! and writes it from one task, so a write that waited for room in a full writer queue
//! would stop it reading too, and two such sides writing hard at each other would each
//! wait for the other to read. Through an [`Outbox`] a frame goes out at once when the
//! writer has room and is otherwise held, in order, until [`Outbox::flush`] (polled beside
//! the driver's other inputs) moves it into the writer's queue.
//!
//! What it holds is bounded by its owner, which stops taking work while
//! [`Outbox::len`] is high; answers are bounded besides by
//! [`PeerConfig::max_in_flight_requests`], as an answer held here is still owed (the reader
//! answers `busy` past the bound), and requests by [`PeerConfig::max_pending_requests`].

use super::*;

/// While this many frames, or [`HELD_STOP_CALLS_BYTES`], are held, a driver takes no more of
/// its application's calls (they wait in its bounded command queue): [`Outbox::takes_calls`].
pub(crate) const HELD_STOP_CALLS: usize = 256;
/// See [`HELD_STOP_CALLS`].
pub(crate) const HELD_STOP_CALLS_BYTES: usize = 4 << 20;

/// While this many frames are held, a driver reads nothing more from the wire either
/// ([`Outbox::reads`]): a safety net past what its bounds let it hold (calls
/// [`HELD_STOP_CALLS`], answers the in-flight bound, its own requests the pending bound).
/// Frames, not bytes: two drivers each holding a few large answers for the other must not
/// both stop reading.
pub(crate) const HELD_STOP_READING: usize = 1024;

/// While its own answers held reach this many bytes, the reader reads nothing more either
/// ([`Outbox::reads_replies`]). Unlike a driver's answers, bounded by the in-flight bound,
/// the reader answers junk, and its answers can be far larger than what they answer (an
/// echoed id, one error object per entry of a batch of tiny invalid ones): 1,024 of them
/// could hold gigabytes for a peer that never reads.
pub(crate) const HELD_STOP_READING_REPLIES_BYTES: usize = 16 << 20;

/// `owed` counting its answer `text` too, until it is queued
/// ([`PeerConfig::max_in_flight_bytes`]).
fn weighed(mut owed: Option<Owed>, text: &str) -> Option<Owed> {
    if let Some(o) = &mut owed {
        o.add(text.len());
    }
    owed
}

/// One held frame, with what it releases once queued.
struct Held {
    text: String,
    /// The response's owed count (released once it is queued, as a direct write would).
    owed: Option<Owed>,
}

/// The frames one sender could not queue yet, in order (module docs).
pub(crate) struct Outbox {
    shared: Arc<Shared>,
    held: VecDeque<Held>,
    /// The bytes of the frames held.
    bytes: usize,
    /// Frames taken so far ([`Outbox::sent`]).
    taken: u64,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// An [`Outbox`] for this connection: frames sent through it never wait.
    pub(crate) fn outbox(&self) -> Outbox {
        self.shared().outbox()
    }
}

impl Shared {
    /// An [`Outbox`] for this connection (the reader's own, or a driver's).
    pub(super) fn outbox(self: &Arc<Self>) -> Outbox {
        Outbox {
            shared: self.clone(),
            held: VecDeque::new(),
            bytes: 0,
            taken: 0,
        }
    }
}

impl Outbox {
    /// Whether its owner may take more of the application's calls ([`HELD_STOP_CALLS`]).
    pub(crate) fn takes_calls(&self) -> bool {
        self.held.len() < HELD_STOP_CALLS && self.bytes < HELD_STOP_CALLS_BYTES
    }

    /// Whether its owner may read more from the wire ([`HELD_STOP_READING`]).
    pub(crate) fn reads(&self) -> bool {
        self.held.len() < HELD_STOP_READING
    }

    /// Whether the reader, whose own answers these are, may read more from the wire
    /// ([`HELD_STOP_READING`], [`HELD_STOP_READING_REPLIES_BYTES`]).
    pub(super) fn reads_replies(&self) -> bool {
        self.reads() && self.bytes < HELD_STOP_READING_REPLIES_BYTES
    }

    /// Whether every frame sent through it is queued (or written).
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// How many frames it holds.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// How many frames it took so far and how many of them left it (queued, written, or
    /// dropped with the connection): a frame taken as number `n` (counting from 1) is
    /// queued ahead of anything sent directly through the peer once `left >= n`.
    pub(crate) fn sent(&self) -> (u64, u64) {
        (self.taken, self.taken - self.held.len() as u64)
    }

    /// Sends `text` behind the frames held, without waiting; `owed` is released once it
    /// is queued.
    fn push(&mut self, text: String, owed: Option<Owed>) -> Result<(), PeerError> {
        let shared = &self.shared;
        if let Some(reason) = shared.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        if !self.held.is_empty() {
            // Counted as queued, as a sender waiting for room is: nobody writes past it.
            lock(&shared.slot).queued += 1;
            self.taken += 1;
            self.hold(Held { text, owed });
            return Ok(());
        }
        let mut owed = owed;
        let Some(text) = shared.send_now(text, owed.as_mut())? else {
            self.taken += 1;
            return Ok(());
        };
        match shared.out.try_send(text) {
            Ok(()) => {
                self.taken += 1;
                Ok(())
            }
            Err(queue::TrySendError::Full(text)) => {
                self.taken += 1;
                self.hold(Held { text, owed });
                Ok(())
            }
            Err(queue::TrySendError::Closed(_)) => {
                let mut slot = lock(&shared.slot);
                slot.queued = slot.queued.saturating_sub(1);
                Err(shared.closed_error())
            }
        }
    }

    /// Waits until the writer's queue takes at least one held frame (returns at once when
    /// none is held). Cancel-safe. `Err` once the connection is closed: what was held is
    /// dropped.
    pub(crate) async fn flush(&mut self) -> Result<(), PeerError> {
        let shared = self.shared.clone();
        let bytes = &mut self.bytes;
        let moved = shared
            .out
            .send_from(&mut self.held, |h: Held| {
                *bytes = bytes.saturating_sub(h.text.len());
                drop(h.owed);
                h.text
            })
            .await;
        if moved.is_err() {
            self.drop_held();
            return Err(shared.closed_error());
        }
        Ok(())
    }

    /// Flushes everything held, bounded by the write timeout (or [`CLOSE_DRAIN_LIMIT`]) in
    /// all: for a driver that stops, so that answers it produced are not lost.
    pub(crate) async fn drain(&mut self) {
        let limit = self
            .shared
            .config
            .write_timeout
            .unwrap_or(CLOSE_DRAIN_LIMIT);
        let _ = tokio::time::timeout(limit, async {
            while !self.held.is_empty() {
                if self.flush().await.is_err() {
                    return;
                }
            }
        })
        .await;
        self.drop_held();
    }

    /// Moves everything held into the writer's queue now, past its capacity (bounded by
    /// what the owner let it hold: [`Self::reads_replies`]): for the reader at the other
    /// side's EOF, which tells the end at once and must not lose its own answers to a
    /// close that follows (the writer writes what is queued before it shuts down).
    pub(super) fn hand_over(&mut self) {
        let shared = self.shared.clone();
        let bytes = &mut self.bytes;
        let moved = shared.out.push_past_capacity(&mut self.held, |h: Held| {
            *bytes = bytes.saturating_sub(h.text.len());
            drop(h.owed);
            h.text
        });
        if moved.is_err() {
            self.drop_held();
        }
    }

    /// Sends request `method` (as [`Peer::send_request`]: its response comes through
    /// [`Incoming::recv_ordered`]) without waiting; its id.
    pub(crate) fn request(
        &mut self,
        method: &str,
        params: Option<Value>,
    ) -> Result<RequestId, PeerError> {
        let params = super::params_for_wire(method, params)?;
        let shared = self.shared.clone();
        let id = shared.register_in_order()?;
        shared.note_read_whole(method, &id);
        let text = wire::request_in(shared.frame_buffer(), &id, method, params.as_ref());
        if let Err(e) = self.push(text, None) {
            lock(&shared.in_order).remove(&id);
            return Err(e);
        }
        Ok(id)
    }

    /// Gives up on request `id` sent through this outbox ([`Self::request`]), as
    /// [`Peer::forget`] does: a response arriving later is a [`Diagnostic::LateResponse`],
    /// and the other side is told ([`PeerConfig::cancel_method`], MCP's
    /// `notifications/cancelled { requestId, reason }`) through this outbox, so the cancel
    /// is written after the request's own frame, which it may still hold (a detached write
    /// could overtake it). `false` if its response was already delivered (or it was never
    /// sent): nothing is written then.
    pub(crate) fn cancel(&mut self, id: &RequestId, reason: &str) -> bool {
        let shared = self.shared.clone();
        if !lock(&shared.in_order).remove(id) {
            return false;
        }
        shared.remember_abandoned(id.clone());
        if let Some(method) = shared.config.cancel_method {
            let params = super::shared::cancel_params(id, reason);
            if let Err(e) = self.notify(method, Some(params)) {
                tracing::debug!(error = %e, "cancel not written");
            }
        }
        true
    }

    /// Sends a frame as it is without waiting.
    pub(super) fn send(&mut self, text: String) -> Result<(), PeerError> {
        self.push(text, None)
    }

    /// Sends a notification without waiting.
    pub(crate) fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), PeerError> {
        let params = super::params_for_wire(method, params)?;
        self.push(wire::notification(method, params.as_ref()), None)
    }

    /// [`Self::notify`] with params already encoded: written as they are.
    pub(crate) fn notify_encoded(
        &mut self,
        method: &str,
        params: &crate::jsonrpc::Encoded,
    ) -> Result<(), PeerError> {
        let text = params.notification_in(self.shared.frame_buffer(), method);
        self.push(text, None)
    }

    /// Answers request `id` (whose guard was disarmed) without waiting.
    pub(crate) fn respond(
        &mut self,
        id: RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), PeerError> {
        let text = wire::response_in(self.shared.frame_buffer(), Some(&id), &outcome);
        self.push(text, None)
    }

    /// Answers `req` through its guard without waiting (as [`IncomingRequest::finish`]);
    /// it stays owed until its answer is queued.
    pub(crate) fn finish(
        &mut self,
        mut req: IncomingRequest,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), PeerError> {
        req.armed = false;
        let owed = req.owed.take();
        let text = match &req.batch {
            Some(batch) => {
                let (outcome, replaced) = crate::jsonrpc::outcome_to_send(outcome);
                if let Some(reason) = replaced {
                    tracing::warn!("answer in a batch replaced by -32603: {reason}");
                }
                let response = Message::Response(Response {
                    id: Some(req.request.id.clone()),
                    outcome,
                });
                // Weighed with its answer by the batch, and released with its array.
                return match batch.add(response.to_value(), owed) {
                    Some((text, owed)) => self.push(text, owed),
                    None => Ok(()),
                };
            }
            None => wire::response_in(self.shared.frame_buffer(), Some(&req.request.id), &outcome),
        };
        let owed = weighed(owed, &text);
        self.push(text, owed)
    }

    /// [`Self::finish`] with a result already encoded: written as it is (a batch's member
    /// is read back into the batch's array).
    pub(crate) fn finish_encoded(
        &mut self,
        mut req: IncomingRequest,
        result: crate::jsonrpc::Encoded,
    ) -> Result<(), PeerError> {
        if req.batch.is_some() {
            let outcome = result
                .to_value()
                .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}")));
            return self.finish(req, outcome);
        }
        req.armed = false;
        let owed = req.owed.take();
        let text = result.into_response(|| self.shared.frame_buffer(), &req.request.id);
        let owed = weighed(owed, &text);
        self.push(text, owed)
    }

    fn hold(&mut self, held: Held) {
        self.bytes += held.text.len();
        self.held.push_back(held);
    }

    fn drop_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let n = self.held.len();
        self.held.clear();
        self.bytes = 0;
        let mut slot = lock(&self.shared.slot);
        slot.queued = slot.queued.saturating_sub(n);
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.drop_held();
    }
}

impl Shared {
    /// Whether the answer `id` names is to be read whole ([`Shared::read_whole`]), taking
    /// the note: asked once, for the response read under it.
    pub(super) fn take_read_whole(&self, id: Option<&RequestId>) -> bool {
        let mut whole = lock(&self.read_whole);
        !whole.is_empty() && id.is_some_and(|id| whole.remove(id))
    }

    /// A fresh id registered for delivery in wire order ([`Peer::send_request`]), within
    /// [`PeerConfig::max_pending_requests`].
    pub(super) fn register_in_order(&self) -> Result<RequestId, PeerError> {
        if let Some(reason) = self.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        if self.read_eof.load(Ordering::SeqCst) {
            return Err(PeerError::Closed(CloseReason::Eof));
        }
        let id = RequestId::from(self.next_id.fetch_add(1, Ordering::Relaxed));
        let limit = self.config.max_pending_requests;
        let mut in_order = lock(&self.in_order);
        if in_order.len() + lock(&self.pending).len() >= limit {
            return Err(PeerError::TooManyPending { limit });
        }
        in_order.insert(id.clone());
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// Frames sent through an outbox never wait, keep their order, and all arrive once the
    /// other side reads.
    #[tokio::test(start_paused = true)]
    async fn nothing_waits_and_order_is_kept() {
        let (a, b) = tokio::io::duplex(64);
        let (ar, aw) = tokio::io::split(a);
        let config = PeerConfig {
            outgoing_capacity: 2,
            ..PeerConfig::default()
        };
        let (peer, _incoming) = Peer::new(Transport::lines(ar, aw, "outbox"), config);
        let mut out = peer.outbox();
        const N: usize = 300;
        for i in 0..N {
            out.notify("n", Some(serde_json::json!({ "i": i })))
                .unwrap();
        }
        assert!(!out.is_empty(), "a full writer holds the rest");
        assert!(!out.takes_calls(), "{N} held frames stop the calls");
        assert!(out.reads(), "but not the reading");
        let mut lines = BufReader::new(b).lines();
        let read = tokio::spawn(async move {
            for i in 0..N {
                let line = lines.next_line().await.unwrap().unwrap();
                let v: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(v["params"]["i"], i, "out of order");
            }
        });
        while !out.is_empty() {
            out.flush().await.unwrap();
        }
        read.await.unwrap();
    }

    /// An encoded result is one frame of JSON whatever the application's type held. A
    /// `RawValue` (valid JSON with its own whitespace: pretty-printed, read from a file)
    /// written as it is would split the response over several lines on a line transport: the
    /// request never answered, and a line of it read as a message of its own.
    #[tokio::test]
    async fn an_encoded_result_with_newlines_is_still_one_line() {
        use crate::jsonrpc::Encoded;
        use serde_json::value::RawValue;
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, mut bw) = tokio::io::split(b);
        let (peer, mut incoming) =
            Peer::new(Transport::lines(ar, aw, "outbox"), PeerConfig::default());
        let mut lines = BufReader::new(br).lines();
        use tokio::io::AsyncWriteExt;
        bw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"acme/get\"}\n")
            .await
            .unwrap();
        let Some(IncomingMessage::Request(req)) = incoming.recv().await else {
            panic!("the request arrives");
        };
        #[derive(serde::Serialize)]
        struct Doc {
            doc: Box<RawValue>,
        }
        let doc = RawValue::from_string(
            "[\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/injected\"}\n]".into(),
        )
        .unwrap();
        let encoded = Encoded::encode(&Doc { doc }).unwrap();
        let mut out = peer.outbox();
        out.finish_encoded(req, encoded.clone()).unwrap();
        while !out.is_empty() {
            out.flush().await.unwrap();
        }
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the response is one line of JSON ({e}): {line:?}"));
        assert_eq!(v["id"], 1);
        assert_eq!(
            v["result"]["doc"][0]["method"], "notifications/injected",
            "{line}"
        );
    }
}
