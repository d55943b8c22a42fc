//! The state one connection's handles, reader and writer share.

use super::*;

/// A result as the reader hands it to a waiting caller: a `Value`, or (for a typed caller,
/// [`Waiter::text`]) the result's own text, read the fast way ([`crate::jsonrpc::parse_answer`])
/// and decoded by the caller straight into its type.
#[derive(Debug)]
pub(super) enum Answer {
    Value(Value),
    Text(String),
}

impl Answer {
    /// The result as a `Value`.
    pub(super) fn into_value(self) -> Result<Value, PeerError> {
        match self {
            Answer::Value(v) => Ok(v),
            Answer::Text(t) => serde_json::from_str(&t)
                .map_err(|e| PeerError::InvalidResponse(format!("the result does not read: {e}"))),
        }
    }

    /// The result decoded into `M`'s result type, from its text when it came as text (whose
    /// buffer then goes back to `shared`, [`Shared::spare_answer`]). A text that does not
    /// decode is decoded again from its `Value`, so the refusal is the `Value` way's, word
    /// for word (a text's error also names a line and column).
    pub(super) fn decode<M: Method>(self, shared: &Shared) -> Result<M::Result, PeerError> {
        let decoded = match self {
            Answer::Value(v) => serde_json::from_value(v),
            Answer::Text(t) => {
                // A `tools/call` result of the plain shape is read without the derive's
                // buffering (`read_tools_call_result`, issue #24).
                let mut plain: Option<M::Result> = None;
                let slot: &mut dyn std::any::Any = &mut plain;
                if let Some(slot) =
                    slot.downcast_mut::<Option<crate::protocol::handshake::ToolsCallResult>>()
                {
                    *slot = crate::jsonrpc::read_tools_call_result(&t);
                }
                let decoded = match plain {
                    Some(result) => Ok(result),
                    None => serde_json::from_str(&t).or_else(|_| {
                        serde_json::from_str::<Value>(&t).and_then(serde_json::from_value)
                    }),
                };
                shared.give_back_answer(t);
                decoded
            }
        };
        decoded.map_err(|e| PeerError::Decode {
            method: M::NAME.to_owned(),
            reason: e.to_string(),
        })
    }
}

/// A caller waiting for the answer to one of this side's requests.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<Result<Answer, PeerError>>,
    /// Whether the caller takes a result read the fast way as its text ([`Answer::Text`]).
    pub(super) text: bool,
}

impl Waiter {
    /// Gives the caller `outcome`.
    pub(super) fn send(self, outcome: Result<Answer, PeerError>) {
        let _ = self.tx.send(outcome);
    }
}

pub(super) struct Shared {
    pub(super) config: PeerConfig,
    /// Frames for the writer task. An empty string is not a frame but a reminder to finish
    /// a message the transport took only in part ([`TrySend::Partial`]).
    pub(super) out: queue::Sender<String>,
    /// The transport's writer while the writer task is not using it ([`Shared::send_now`]).
    pub(super) slot: Mutex<WriterSlot>,
    /// Messages delivered to [`Incoming`] and not yet received from it.
    pub(super) inbox: AtomicUsize,
    /// Senders waiting for room in the writer's queue ([`super::Peer::room`]): while any
    /// does, no frame is written directly ahead of them ([`Shared::send_now`]).
    pub(super) room_waiters: AtomicUsize,
    /// Keyed by the ids this side numbers its requests with ([`crate::own_keys`]).
    pub(super) pending: Mutex<HashMap<RequestId, Waiter, crate::own_keys::OwnKeys>>,
    pub(super) timed_out: Mutex<VecDeque<RequestId>>,
    pub(super) next_id: AtomicU64,
    /// The highest id of a request of ours whose frame was taken for the wire (0: none;
    /// `written`): an answer under a higher one is a stray.
    pub(super) written_ids: AtomicU64,
    /// Frames sent from `Drop` that wait in their own task: they found the queue full, or
    /// were produced inside this connection's own [`Tap`] ([`Shared::send_frame_detached`]).
    pub(super) detached: AtomicUsize,
    /// The runtime the connection's tasks run on (`Peer::new` is called inside it): a frame
    /// sent from `Drop` on a thread outside any runtime still gets its task there.
    pub(super) runtime: tokio::runtime::Handle,
    /// Signalled each time one of those frames has been queued.
    pub(super) detached_done: Notify,
    pub(super) closed: watch::Sender<Option<CloseReason>>,
    /// Set once `closed` holds a reason: the hot paths' check, without the watch's lock.
    pub(super) is_closed: std::sync::atomic::AtomicBool,
    /// Whether the reader hands out `inference/lifecycle` params decoded straight from their
    /// text ([`Incoming::recv_typed`]); only `server::Server`'s driver, which reads that way,
    /// sets it ([`Peer::read_lifecycle_typed`]).
    pub(super) typed_lifecycle: std::sync::atomic::AtomicBool,
    /// The same for a `tools/call` request's params ([`Peer::read_tools_call_typed`]).
    pub(super) typed_tools_call: std::sync::atomic::AtomicBool,
    /// Whether the policy Request (`featureSets/update`) is taken past
    /// [`PeerConfig::max_in_flight_requests`] ([`Peer::take_policy_past_busy`]).
    pub(super) policy_past_busy: std::sync::atomic::AtomicBool,
    /// Whether a caller ever waited for a result as text ([`Waiter::text`]): from then on the
    /// reader reads a result response the fast way when it can ([`Read::Answer`]).
    pub(super) typed_answers: std::sync::atomic::AtomicBool,
    /// The buffer the last result handed out as text was in, given back by its caller once
    /// decoded ([`Answer::decode`]), for the reader to copy the next one into (issue #24:
    /// one allocation per typed round trip). Empty when none is kept; at most
    /// [`SPARE_ANSWER_KEEP`] bytes.
    pub(super) spare_answer: Mutex<String>,
    /// The box the last `tools/call` params read into their type were handed out in, given
    /// back by the server once it took them ([`Peer::give_back_call`]; issue #24).
    pub(super) spare_call: Mutex<Option<Box<ToolsCallParams>>>,
    /// The reader task's wake-up at close ([`Shared::reader_stopped`]): it polls its stop at
    /// every wake, and a watch's `changed` took the watch's lock each time (issue #24).
    pub(super) reader_stop: futures_util::task::AtomicWaker,
    /// Created at the first diagnostic or the first [`Peer::diagnostics`] call; it holds
    /// only the diagnostics not yet read by every receiver ([`diag`]), so an idle
    /// connection holds no slots.
    pub(super) diagnostics: std::sync::OnceLock<diag::Sender>,
    /// The receiver made with the channel, for the first [`Peer::diagnostics`] call.
    pub(super) first_diagnostics: Mutex<Option<diag::Receiver>>,
    pub(super) last_activity: Mutex<Instant>,
    /// How many incoming requests are delivered but not yet answered (their responses are
    /// owed). At EOF the connection stays open for writing until this reaches zero.
    pub(super) owed: AtomicUsize,
    /// The bytes those owed requests weigh ([`Owed`], [`PeerConfig::max_in_flight_bytes`]).
    pub(super) owed_bytes: AtomicUsize,
    /// The length of the frame the reader is taking: each request read from it weighs that
    /// much. Written and read by the reader alone.
    pub(super) reading: AtomicUsize,
    /// Frames the reader took, discarded ones too ([`TapEvent::frame`] of the newest).
    /// Written by the reader only (a load and a store).
    pub(super) frames_read: AtomicU64,
    /// The entry of the batch frame being delivered ([`FrameOf::entry`]): its index + 1, 0
    /// for none (a frame that is no batch). Written by the reader only.
    pub(super) entry_now: std::sync::atomic::AtomicU32,
    /// Signalled when `owed` drops to zero after EOF (the only time anyone waits for it).
    pub(super) owed_settled: Notify,
    /// Set once the other side ended its stream: no response can arrive any more.
    pub(super) read_eof: std::sync::atomic::AtomicBool,
    /// Requests sent with [`Peer::send_request`]: their responses are delivered through
    /// [`Incoming::recv_ordered`] at their wire position instead of to a waiting caller.
    pub(super) in_order: Mutex<HashSet<RequestId>>,
    /// Those of them whose answer decides authority (`jsonrpc::doubled::answer_read_whole`:
    /// `initialize`, `mcpl/manifest`): the answer's whole text is read for a member named
    /// twice (§5.4, §17.2) before it is taken. A subset of `in_order`, so bounded as it is.
    pub(super) read_whole: Mutex<HashSet<RequestId>>,
    /// The other side's requests in flight, by [`super::serving::key`]: one more under any
    /// of them is refused (`jsonrpc::InvalidMessage::id_in_use`).
    pub(super) serving: Mutex<super::serving::Serving>,
    /// Those of them whose answer this side could not read and failed itself (the `-32603`
    /// delivered in its place is this side's, not the other side's), until asked
    /// ([`Peer::failed_here`]): the newest [`PeerConfig::max_pending_requests`] kept.
    pub(super) failed_here: Mutex<VecDeque<RequestId>>,
    /// `true` once the writer task has written what was queued and shut the transport down.
    pub(super) finished: watch::Sender<bool>,
    /// Set once a session owns the connection ([`Peer::owned_by_session`]): for a method
    /// sent through a public send method of [`Peer`] (`notification` when sent as one), the
    /// session method to send it with instead, `None` for one the peer may send. The crate's
    /// own send paths (`start_now`, `notify_now`, [`Outbox`]) do not ask it.
    pub(super) owner_gate: std::sync::OnceLock<OwnerGate>,
    /// Set once the owner answers a request its sender cancels at the cancel's place in
    /// wire order ([`Peer::answers_cancels`]): a cancel then frees its request's id.
    pub(super) answers_cancels: std::sync::atomic::AtomicBool,
}

/// See [`Shared::owner_gate`].
pub(crate) type OwnerGate = fn(method: &str, notification: bool) -> Option<&'static str>;

/// Where the transport's writer rests between writes. A sender that finds it here, with no
/// frame queued ahead, writes its frame itself if the transport takes it without waiting:
/// no writer-task wake-up on the common path. Frame order is kept because `queued` counts
/// every frame between "decided to queue" and "written", under the same lock.
pub(super) struct WriterSlot {
    /// `None` while the writer task writes, and for good once it has shut down.
    pub(super) writer: Option<Box<dyn FrameWriter>>,
    /// Frames (and reminders) committed to the queue and not yet written.
    pub(super) queued: usize,
    /// The last frame the sender wrote itself, emptied: the next frame is encoded into it
    /// instead of a new allocation (issue #24). Only small ones are kept
    /// ([`SPARE_KEEP`]), so an idle connection stays small.
    pub(super) spare: Vec<u8>,
    /// The frame at the head of the queue was already tapped: a sender tapped it before
    /// trying to write it itself, the transport did not take it, and the sender queued it
    /// into the empty queue. The writer task takes this with the writer and does not tap
    /// that frame again.
    pub(super) head_tapped: bool,
}

/// Largest capacity [`Shared::spare_answer`] keeps.
pub(super) const SPARE_ANSWER_KEEP: usize = 512;

/// Largest capacity [`WriterSlot::spare`] keeps.
const SPARE_KEEP: usize = 1024;

/// Undoes a `queued` count if the frame never reached the queue (the sender's future was
/// dropped while the queue was full, or the queue closed).
pub(super) struct QueuedFrame<'a> {
    pub(super) shared: &'a Shared,
    pub(super) armed: bool,
}

impl Drop for QueuedFrame<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut slot = lock(&self.shared.slot);
            slot.queued = slot.queued.saturating_sub(1);
        }
    }
}

/// One owed response (or several: the answers a batch holds, [`Owed::absorb`]): counted
/// while alive, with the bytes it weighs (its request's frame, then its answer's too),
/// released once the response is queued.
pub(super) struct Owed {
    shared: Arc<Shared>,
    /// The bytes counted in `Shared::owed_bytes`.
    weight: usize,
    /// The responses counted in `Shared::owed`.
    count: usize,
    /// Its request's id as held in `Shared::serving`, released with it.
    key: Option<super::serving::Held>,
    /// Those of the requests whose answers it took over ([`Owed::absorb`]: a batch's).
    /// Boxed, so an owed answer outside a batch holds one word for it.
    #[allow(clippy::box_collection)]
    keys: Option<Box<Vec<super::serving::Held>>>,
    /// Its ids were released already ([`Owed::release_ids`]): its answer's bytes went out.
    released: bool,
}

impl Owed {
    /// One owed response weighing `weight`, its request's id held in flight under `key`
    /// (taken in `Shared::serving` by the caller).
    pub(super) fn new(
        shared: &Arc<Shared>,
        weight: usize,
        key: Option<super::serving::Held>,
    ) -> Owed {
        shared.owed.fetch_add(1, Ordering::SeqCst);
        shared.owed_bytes.fetch_add(weight, Ordering::Relaxed);
        Owed {
            shared: shared.clone(),
            weight,
            count: 1,
            key,
            keys: None,
            released: false,
        }
    }

    /// What holds an id in flight and nothing else (`held`, taken by `Serving::take`), for
    /// an answer made by id ([`Peer::respond`] after [`IncomingRequest::into_id`]): released
    /// once that answer is queued. Counts no answer owed, as `into_id` stopped counting it.
    pub(super) fn holding(shared: &Arc<Shared>, held: super::serving::Held) -> Owed {
        Owed {
            shared: shared.clone(),
            weight: 0,
            count: 0,
            key: Some(held),
            keys: None,
            released: false,
        }
    }

    /// Takes out the id it holds in flight, to be held on past it (`into_id`).
    pub(super) fn take_key(&mut self) -> Option<super::serving::Held> {
        self.key.take()
    }

    /// Frees the ids it holds in flight now, before its answer's bytes are written
    /// ([`Shared::send_now`]): the other side may reuse an id as soon as it reads the
    /// answer (MCP base protocol), and a request under it read by the reader before this
    /// owed was dropped was refused as reusing an id in flight. Called under the writer's
    /// slot lock (`serving` is taken under it, never the other way round);
    /// [`Owed::retake_ids`] undoes it when the write did not take the frame.
    fn release_ids(&mut self) {
        if self.released || (self.key.is_none() && self.keys.is_none()) {
            return;
        }
        self.released = true;
        let mut serving = lock(&self.shared.serving);
        let more = self.keys.iter().flat_map(|k| k.iter());
        for held in self.key.iter().chain(more) {
            serving.release(*held);
        }
    }

    /// Holds its ids in flight again after [`Owed::release_ids`], its frame not written
    /// (queued instead): a later request under one of them is refused until it is. An id
    /// taken meanwhile (the other side reusing it before it could have read the answer) is
    /// left to that request.
    fn retake_ids(&mut self) {
        if !self.released {
            return;
        }
        self.released = false;
        let mut serving = lock(&self.shared.serving);
        let retake = |held: &mut super::serving::Held, serving: &mut super::serving::Serving| {
            serving.retake(held)
        };
        if let Some(held) = self.key.as_mut() {
            if !retake(held, &mut serving) {
                self.key = None;
            }
        }
        if let Some(keys) = self.keys.as_mut() {
            keys.retain_mut(|held| retake(held, &mut serving));
        }
    }

    /// Counts `bytes` more (its answer, made and not yet queued).
    pub(super) fn add(&mut self, bytes: usize) {
        self.shared.owed_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.weight = self.weight.saturating_add(bytes);
    }

    /// Takes over what `other` counts, released with this one: a batch's answers are queued
    /// together, as one array, so each stays owed until the last is made.
    pub(super) fn absorb(&mut self, mut other: Owed) {
        self.weight = self
            .weight
            .saturating_add(std::mem::take(&mut other.weight));
        self.count += std::mem::take(&mut other.count);
        if other.key.is_some() || other.keys.is_some() {
            let keys = self.keys.get_or_insert_with(Default::default);
            keys.extend(other.key.take());
            keys.extend(other.keys.take().into_iter().flat_map(|k| *k));
        }
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        if !self.released && (self.key.is_some() || self.keys.is_some()) {
            let mut serving = lock(&self.shared.serving);
            let more = self.keys.take().into_iter().flat_map(|k| *k);
            for held in self.key.take().into_iter().chain(more) {
                serving.release(held);
            }
        }
        if self.count == 0 {
            return;
        }
        self.shared
            .owed_bytes
            .fetch_sub(self.weight, Ordering::Relaxed);
        let before = self.shared.owed.fetch_sub(self.count, Ordering::SeqCst);
        // Paired with the EOF drain: it sets `read_eof` before reading `owed`, this reads
        // `read_eof` after writing `owed`, so one of the two sees the other.
        if before == self.count && self.shared.read_eof.load(Ordering::SeqCst) {
            self.shared.owed_settled.notify_waiters();
        }
    }
}

std::thread_local! {
    /// The connection ([`Shared::key`]) whose tap this thread is running, 0 for none.
    static TAPPING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Puts back the connection this thread was tapping before (a tap may send on another
/// connection, whose tap then runs inside it), also when the tap panics.
struct RestoreTapping(usize);

impl Drop for RestoreTapping {
    fn drop(&mut self) {
        TAPPING.set(self.0);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// The `-32603` this side delivers, in wire order, for a [`Peer::send_request`] whose
    /// answer it could not read (`reason`), noted as its own ([`Peer::failed_here`]).
    pub(super) fn failed_in_order(&self, id: &RequestId, reason: &str) -> Response {
        let mut failed = lock(&self.failed_here);
        if failed.len() >= self.config.max_pending_requests.max(1) {
            failed.pop_front();
        }
        failed.push_back(id.clone());
        Response {
            id: Some(id.clone()),
            outcome: Err(ErrorObject::internal(format!("invalid response: {reason}"))),
        }
    }

    pub(super) fn close(&self, reason: CloseReason) {
        let first = self.closed.send_if_modified(|state| {
            if state.is_none() {
                *state = Some(reason.clone());
                true
            } else {
                false
            }
        });
        self.is_closed.store(true, Ordering::Release);
        self.reader_stop.wake();
        if first {
            tracing::debug!("connection closed: {reason}");
        }
        let reason = self.close_reason().unwrap_or(reason);
        self.fail_pending(reason);
    }

    /// Ready once the connection is closed; only the reader task polls it (one waker).
    pub(super) fn reader_stopped(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.is_closed.load(Ordering::Acquire) {
            return std::task::Poll::Ready(());
        }
        self.reader_stop.register(cx.waker());
        // Again after registering: a close in between woke no one.
        if self.is_closed.load(Ordering::Acquire) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// Fails every request this side is waiting on.
    pub(super) fn fail_pending(&self, reason: CloseReason) {
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        for (_, waiter) in pending {
            waiter.send(Err(PeerError::Closed(reason.clone())));
        }
    }

    pub(super) fn close_reason(&self) -> Option<CloseReason> {
        // The flag is set after the reason, so an open connection costs one atomic load.
        if !self.is_closed.load(Ordering::Acquire) {
            return None;
        }
        self.closed.borrow().clone()
    }

    pub(super) fn diagnose(&self, d: Diagnostic) {
        tracing::warn!(target: "mcpl::peer", "{d}");
        self.diagnostic_sender().send(d);
    }

    /// [`Shared::diagnose`] from the reader, about the frame it is taking: the forwarder is
    /// told that frame's number and, in a batch, the entry's index ([`Shared::frames_read`],
    /// [`Shared::entry_now`], both the reader's), so a session can tie the diagnostic to it
    /// (`host::RaisedFor`).
    pub(super) fn diagnose_reading(&self, d: Diagnostic) {
        tracing::warn!(target: "mcpl::peer", "{d}");
        let frame = self.frames_read.load(Ordering::Relaxed);
        let entry = self.entry_now.load(Ordering::Relaxed).checked_sub(1);
        let at = entry.map(|e| usize::try_from(e).unwrap_or(usize::MAX));
        self.diagnostic_sender().send_at(d, Some((frame, at)));
    }

    /// The diagnostics channel, created on first use with a receiver kept for the first
    /// [`Peer::diagnostics`] call (which thereby sees every diagnostic since the start).
    pub(super) fn diagnostic_sender(&self) -> &diag::Sender {
        self.diagnostics.get_or_init(|| {
            let (tx, rx) = diag::channel(self.config.diagnostics_capacity);
            *lock(&self.first_diagnostics) = Some(rx);
            tx
        })
    }

    /// Records traffic for the idle timeout (nothing to record without one).
    pub(super) fn touch(&self) {
        if self.config.idle_timeout.is_some() {
            *lock(&self.last_activity) = Instant::now();
        }
    }

    /// The fast path of every send: with the writer at rest and nothing queued ahead, the
    /// frame is written right here if the transport takes it without waiting. Returns the
    /// frame back when it must be queued instead; a write error closes the connection.
    ///
    /// `owed`, the answer's own count, has its ids freed just before the bytes are written
    /// ([`Owed::release_ids`]), never after: the other side may reuse an id once it has
    /// read the answer.
    pub(super) fn send_now(
        &self,
        text: String,
        mut owed: Option<&mut Owed>,
    ) -> Result<Option<String>, PeerError> {
        if self.in_own_tap() {
            return Err(PeerError::SentFromTap);
        }
        // A burst is under way (requests in flight besides at most the sender's own, or
        // received messages still waiting to be handled, whose answers will follow): queue,
        // so the writer task puts many frames in one write. Writing each frame directly
        // would cost one write (a syscall on sockets) per frame.
        // Nor while senders wait for room: one made after them would overtake them.
        let quiet = self.inbox.load(Ordering::Relaxed) == 0
            && self.room_waiters.load(Ordering::Relaxed) == 0
            && lock(&self.pending).len() <= 1;
        let mut slot = lock(&self.slot);
        if !quiet || slot.queued > 0 {
            slot.queued += 1;
            return Ok(Some(text));
        }
        let Some(writer) = slot.writer.as_mut() else {
            slot.queued += 1;
            return Ok(Some(text));
        };
        // Tapped before its bytes can reach the other side, whose answer the reader taps
        // only once read: a transcript never shows an answer ahead of what it answers.
        // Tapped under the lock, so taps keep the order of the wire.
        self.tap(FrameDirection::Outbound, &text);
        if let Some(o) = owed.as_deref_mut() {
            o.release_ids();
        }
        self.note_written(&text);
        let written = writer.try_send_now(&text);
        if matches!(written, Ok(TrySend::NotTaken)) {
            if let Some(o) = owed {
                o.retake_ids();
            }
        }
        match written {
            Ok(taken @ (TrySend::Written | TrySend::Partial)) => {
                if taken == TrySend::Partial {
                    // The rest goes before anything else: the writer task is reminded while
                    // the lock still keeps every other sender behind it. Past senders waiting
                    // for room (`queue::Sender::remind`): a reminder refused for them left
                    // the rest unwritten until some later frame woke the writer.
                    slot.queued += 1;
                    if self.out.remind(String::new()).is_err() {
                        slot.queued -= 1;
                    }
                }
                if taken == TrySend::Written && text.capacity() <= SPARE_KEEP {
                    // Written and flushed: the transport holds none of it.
                    let mut spare = text.into_bytes();
                    spare.clear();
                    slot.spare = spare;
                }
                drop(slot);
                self.touch();
                Ok(None)
            }
            Ok(TrySend::NotTaken) => {
                slot.queued += 1;
                if self.config.tap.is_none() {
                    return Ok(Some(text));
                }
                // Tapped already: queued right here, under the lock, into the empty queue
                // (nothing was queued and the writer rests), so the writer task knows the
                // next frame it takes is this one and does not tap it twice. Past senders
                // waiting for room (`queue::Sender::remind`): handed back for them, it was
                // queued later and tapped again by the writer.
                match self.out.remind(text) {
                    Ok(()) => {
                        slot.head_tapped = true;
                        Ok(None)
                    }
                    Err(_) => {
                        slot.queued -= 1;
                        Err(self.closed_error())
                    }
                }
            }
            Err(e) => {
                drop(slot);
                let reason = CloseReason::Io(e.to_string());
                self.close(reason.clone());
                Err(PeerError::Closed(self.close_reason().unwrap_or(reason)))
            }
        }
    }

    /// A buffer holding a copy of `result`, for a caller that takes it as text: the one
    /// the last such caller gave back, if any.
    pub(super) fn answer_text(&self, result: &str) -> String {
        let mut text = std::mem::take(&mut *lock(&self.spare_answer));
        text.clear();
        text.push_str(result);
        text
    }

    /// `params` in a box: the one the server last gave back, if any.
    pub(super) fn boxed_call(&self, params: ToolsCallParams) -> Box<ToolsCallParams> {
        match lock(&self.spare_call).take() {
            Some(mut spare) => {
                *spare = params;
                spare
            }
            None => Box::new(params),
        }
    }

    /// Keeps `text`'s buffer for the next [`Self::answer_text`], when small.
    pub(super) fn give_back_answer(&self, text: String) {
        if text.capacity() <= SPARE_ANSWER_KEEP {
            *lock(&self.spare_answer) = text;
        }
    }

    /// An empty buffer to encode the next frame into: the last directly written frame's, if
    /// one was kept.
    pub(super) fn frame_buffer(&self) -> Vec<u8> {
        // Never waits: a sender inside the tap (refused later, [`Self::send_now`]) may find
        // the lock held by its own thread, and a fresh buffer costs only an allocation.
        match self.slot.try_lock() {
            Ok(mut slot) => std::mem::take(&mut slot.spare),
            Err(std::sync::TryLockError::Poisoned(p)) => std::mem::take(&mut p.into_inner().spare),
            Err(std::sync::TryLockError::WouldBlock) => Vec::new(),
        }
    }

    pub(super) fn tap(&self, direction: FrameDirection, text: &str) {
        if let Some(tap) = &self.config.tap {
            // While the tap runs, this thread's sends on this connection are refused
            // ([`Self::in_own_tap`]); a tap sending on another connection is that one's.
            let before = TAPPING.replace(self.key());
            let _restore = RestoreTapping(before);
            let inbound = matches!(direction, FrameDirection::Inbound);
            let frame = u64::from(inbound) * self.frames_read.load(Ordering::Relaxed);
            (tap.0)(TapEvent {
                direction,
                at: SystemTime::now(),
                text,
                frame,
            });
        }
    }

    /// This connection's identity for [`TAPPING`].
    fn key(&self) -> usize {
        self as *const Shared as usize
    }

    /// Whether this thread is running this connection's [`Tap`]: a send from there is
    /// refused ([`PeerError::SentFromTap`]), for the tap may run under the writer's lock
    /// (and, for a session's plain send, with the session's state held), which the send
    /// would wait for on the same thread for ever.
    pub(super) fn in_own_tap(&self) -> bool {
        TAPPING.get() == self.key()
    }

    /// Writes or queues `text` without waiting: `Ok(None)` when it took its place on the
    /// wire, `Ok(Some(text))` handed back, nothing taken, when the queue has no room.
    /// Into the room `room` holds ([`super::Peer::room`]), if any, a frame is handed back
    /// only while the queue is over its byte cap (written directly instead, the room goes to
    /// the next waiting sender).
    pub(super) fn try_send_frame(
        &self,
        text: String,
        room: Option<super::Room>,
    ) -> Result<Option<String>, PeerError> {
        Ok(self
            .queue_now_in(text, room, None)?
            .err()
            .map(|(text, _queued)| text))
    }

    /// [`Self::try_send_frame`], a frame handed back still counted as queued while its
    /// [`QueuedFrame`] lives.
    fn queue_now(&self, text: String) -> Result<Result<(), (String, QueuedFrame<'_>)>, PeerError> {
        self.queue_now_in(text, None, None)
    }

    /// [`Self::queue_now`] into the room `room` holds, if any; `owed`, an answer's count,
    /// as [`Self::send_now`] takes it.
    fn queue_now_in(
        &self,
        text: String,
        room: Option<super::Room>,
        owed: Option<&mut Owed>,
    ) -> Result<Result<(), (String, QueuedFrame<'_>)>, PeerError> {
        if let Some(reason) = self.close_reason() {
            return Err(PeerError::Closed(reason));
        }
        let Some(text) = self.send_now(text, owed)? else {
            return Ok(Ok(()));
        };
        let mut queued = QueuedFrame {
            shared: self,
            armed: true,
        };
        let sent = match room {
            Some(room) => room.0.send(text),
            None => self.out.try_send(text),
        };
        match sent {
            Ok(()) => {
                queued.armed = false;
                Ok(Ok(()))
            }
            Err(queue::TrySendError::Closed(_)) => Err(self.closed_error()),
            Err(queue::TrySendError::Full(text)) => Ok(Err((text, queued))),
        }
    }

    pub(super) async fn send_frame(&self, text: String) -> Result<(), PeerError> {
        self.send_frame_while(text, || true).await.map(drop)
    }

    /// [`Self::send_frame`] of a frame that must go only while `keep()` holds, asked
    /// whenever it waits for room: `Ok(false)`, the frame dropped unsent, once it no longer
    /// does (a request failed before it took its place on the wire, [`Peer::send_request`]).
    ///
    /// [`Peer::send_request`]: super::Peer::send_request
    pub(super) async fn send_frame_while(
        &self,
        text: String,
        keep: impl Fn() -> bool,
    ) -> Result<bool, PeerError> {
        // Written or queued at once: there is nothing to wait for.
        let (text, queued) = match self.queue_now(text)? {
            Ok(()) => return Ok(true),
            Err(full) => full,
        };
        let send = self.out.send_while(text, keep);
        self.wait_for_room(queued, send, |taken| *taken).await
    }

    /// [`Self::send_frame`] for an answer, which must not be lost: given up while it waits
    /// for room (its caller's future dropped: a timeout around it, a `select!`), the answer
    /// is sent from a task instead, as from `Drop` ([`Self::send_frame_detached`]), so the
    /// request it answers is still answered (JSON-RPC 2.0 §5). `owed`, if any, is released
    /// once it is queued. Written or queued at once, it costs what `send_frame` does.
    pub(super) async fn send_answer(
        self: &Arc<Self>,
        text: String,
        mut owed: Option<Owed>,
    ) -> Result<(), PeerError> {
        let (text, queued) = match self.queue_now_in(text, None, owed.as_mut())? {
            Ok(()) => return Ok(()),
            Err(full) => full,
        };
        // Held here until queued: dropped with the future, it goes on from a task.
        let mut held = HeldAnswer {
            shared: self,
            frames: VecDeque::from([text]),
            owed,
        };
        let send = self.out.send_from(&mut held.frames, |t| t);
        let sent = self.wait_for_room(queued, send, |_| true).await;
        // Queued, or the connection closed: nothing more to send.
        held.frames.clear();
        sent.map(drop)
    }

    /// The one wait of [`Self::send_frame_while`] and [`Self::send_answer`]: for `send` to
    /// put a frame [`Self::queue_now`] handed back (counted as queued while `queued` lives)
    /// in the full outgoing queue, given up at the close (a full queue in front of a stuck
    /// writer must not hold the sender past it). `taken` tells from what `send` gave
    /// whether the frame took its place; one that did not is no longer counted.
    async fn wait_for_room<T, E>(
        &self,
        mut queued: QueuedFrame<'_>,
        send: impl std::future::Future<Output = Result<T, E>>,
        taken: impl FnOnce(&T) -> bool,
    ) -> Result<T, PeerError> {
        let mut closed = self.closed.subscribe();
        let sent = tokio::select! {
            r = send => r.map_err(|_| self.closed_error()),
            _ = until_closed(&mut closed) => Err(self.closed_error()),
        };
        queued.armed = !sent.as_ref().is_ok_and(taken);
        sent
    }

    /// The error a send to a closed connection gets: [`PeerError::Closed`] with the close's
    /// reason ([`CloseReason::Dropped`] before one is set).
    pub(super) fn closed_error(&self) -> PeerError {
        PeerError::Closed(self.close_reason().unwrap_or(CloseReason::Dropped))
    }

    /// Sends without waiting (from `Drop`): directly if there is room, else from a task.
    /// `owed`, if any, is released only once the frame is queued.
    /// Such tasks are counted; the reader stops reading while `outgoing_capacity` of them
    /// wait ([`Shared::detached_backlog_clear`]), so a flood of requests answered from `Drop`
    /// (declined methods, §6.6) cannot pile up answers without bound.
    ///
    /// A frame produced inside this connection's own [`Tap`] (a request future or an
    /// `IncomingRequest` dropped there) cannot be written there ([`Self::in_own_tap`]): it
    /// is sent from a task too, which the runtime runs once the tap returns. Nothing is
    /// dropped but for a connection closed, where nothing more is written.
    pub(super) fn send_frame_detached(self: &Arc<Self>, text: String, owed: Option<Owed>) {
        if self.in_own_tap() {
            if self.close_reason().is_none() {
                self.detach(Detached::FromTap(text), owed);
            }
            return;
        }
        let mut owed = owed;
        let text = match self.send_now(text, owed.as_mut()) {
            Ok(Some(text)) => text,
            Ok(None) | Err(_) => return,
        };
        let mut queued = QueuedFrame {
            shared: self,
            armed: true,
        };
        match self.out.try_send(text) {
            Ok(()) => queued.armed = false,
            Err(queue::TrySendError::Full(text)) => {
                // The task owns the count from here.
                queued.armed = false;
                self.detach(Detached::Counted(text), owed);
            }
            Err(queue::TrySendError::Closed(_)) => {}
        }
    }

    /// Sends `frame` from a task of the connection's runtime, counted in `detached`; `owed`
    /// is released once it is queued (or the connection closed).
    fn detach(self: &Arc<Self>, frame: Detached, owed: Option<Owed>) {
        let shared = self.clone();
        self.detached.fetch_add(1, Ordering::AcqRel);
        self.runtime.spawn(async move {
            match frame {
                Detached::Counted(text) => {
                    if shared.out.send(text).await.is_err() {
                        let mut slot = lock(&shared.slot);
                        slot.queued = slot.queued.saturating_sub(1);
                    }
                }
                // Out of the tap now: the one way every frame goes (closed: nothing to do).
                Detached::FromTap(text) => drop(shared.send_frame(text).await),
            }
            shared.detached.fetch_sub(1, Ordering::AcqRel);
            shared.detached_done.notify_waiters();
            drop(owed);
        });
    }

    /// One delivered message left the inbox (received, or never enqueued). Saturating: the
    /// count is reset when [`Incoming`] is dropped.
    pub(super) fn inbox_taken(&self) {
        let _ = self
            .inbox
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// Waits until every owed response is queued (after EOF; `read_eof` is set first).
    pub(super) async fn owed_settled(&self) {
        loop {
            let notified = self.owed_settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.owed.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Waits until fewer than `outgoing_capacity` detached frames are waiting for the queue.
    pub(super) async fn detached_backlog_clear(&self) {
        let limit = self.config.outgoing_capacity.max(1);
        if self.detached.load(Ordering::Acquire) < limit {
            return;
        }
        loop {
            let notified = self.detached_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.detached.load(Ordering::Acquire) < limit {
                return;
            }
            notified.await;
        }
    }

    /// A request this side no longer awaits (timed out or cancelled): remember its id so a
    /// late response is recognised, and send the cancellation notification if configured.
    pub(super) fn abandon(self: &Arc<Self>, id: RequestId, reason: &str) {
        self.remember_abandoned(id.clone());
        if self.close_reason().is_some() {
            return;
        }
        if let Some(method) = self.config.cancel_method {
            let text = Message::Notification(Notification {
                method: method.to_owned(),
                params: Some(cancel_params(&id, reason)),
            })
            .to_json();
            self.send_frame_detached(text, None);
        }
    }

    pub(super) fn remember_abandoned(&self, id: RequestId) {
        let mut q = lock(&self.timed_out);
        if self.config.remembered_timeouts == 0 {
            return;
        }
        if q.len() >= self.config.remembered_timeouts {
            q.pop_front();
        }
        q.push_back(id);
    }
}

/// An answer [`Shared::send_answer`] holds while it waits for room: dropped still holding
/// it (the future given up), it is sent from a task ([`Shared::send_frame_detached`]).
struct HeldAnswer<'a> {
    shared: &'a Arc<Shared>,
    frames: VecDeque<String>,
    owed: Option<Owed>,
}

impl Drop for HeldAnswer<'_> {
    fn drop(&mut self) {
        let owed = self.owed.take();
        if let Some(text) = self.frames.pop_front() {
            self.shared.send_frame_detached(text, owed);
        }
    }
}

/// A frame [`Shared::send_frame_detached`] hands to a task.
enum Detached {
    /// Counted as queued already ([`Shared::send_now`] handed it back): it waits for room.
    Counted(String),
    /// Produced inside the connection's own tap, not counted: sent as any frame is.
    FromTap(String),
}

/// The params of the cancel sent for our request `id` given up (`PeerConfig::cancel_method`,
/// MCP's `notifications/cancelled`).
pub(super) fn cancel_params(id: &RequestId, reason: &str) -> Value {
    serde_json::json!({ "requestId": id.to_value(), "reason": reason })
}
