//! The other side's requests and notifications, and the guard that answers each request.

use super::*;

/// One message from the other side that this side must handle.
#[derive(Debug)]
pub enum IncomingMessage {
    /// A request: answer it through the [`IncomingRequest`].
    Request(IncomingRequest),
    /// A notification: no answer.
    Notification(Notification),
}

impl IncomingMessage {
    /// The method name.
    pub fn method(&self) -> &str {
        match self {
            IncomingMessage::Request(r) => r.method(),
            IncomingMessage::Notification(n) => &n.method,
        }
    }
}

/// Collects the responses to the requests of one incoming batch and sends them as one array.
pub(super) struct BatchCollector {
    pub(super) state: Mutex<BatchState>,
}

pub(super) struct BatchState {
    pub(super) remaining: usize,
    pub(super) responses: Vec<Value>,
    /// What the responses made so far still owe: they are queued only with the array.
    pub(super) owed: Option<Owed>,
}

/// A batch's complete array of responses, and what its answers owed until it is queued.
pub(super) type BatchAnswer = (String, Option<Owed>);

impl BatchCollector {
    /// Records one response and its request's `owed` (weighed with the response, and kept
    /// until the array is queued: the answers held for the batch's last request count
    /// against the in-flight bounds); returns the array text, with everything its answers
    /// owe, once every request is answered. A response is held as a value until then, so
    /// it weighs what it holds ([`crate::jsonrpc::held_bytes`]), not its text: one dense in
    /// small objects holds ~80 times its text.
    pub(super) fn add(&self, response: Value, owed: Option<Owed>) -> Option<BatchAnswer> {
        let mut owed = owed;
        if let Some(o) = &mut owed {
            o.add(crate::jsonrpc::held_bytes(&response));
        }
        let mut st = lock(&self.state);
        st.responses.push(response);
        match (&mut st.owed, owed) {
            (Some(all), Some(o)) => all.absorb(o),
            (all @ None, o) => *all = o,
            (Some(_), None) => {}
        }
        st.remaining = st.remaining.saturating_sub(1);
        if st.remaining == 0 {
            let text = Value::Array(std::mem::take(&mut st.responses)).to_string();
            Some((text, st.owed.take()))
        } else {
            None
        }
    }
}

/// An incoming request with its responder guard: answer exactly once; if dropped unanswered
/// it answers `-32601` (SPEC §6.6), or `-32603` if dropped by a panicking handler.
pub struct IncomingRequest {
    pub(super) request: Request,
    pub(super) shared: Arc<Shared>,
    pub(super) batch: Option<Arc<BatchCollector>>,
    pub(super) armed: bool,
    pub(super) owed: Option<Owed>,
    /// Where the method's static name is in [`crate::protocol::METHODS`] once
    /// [`Self::take_request`] moved the received one out (a method this crate types; an
    /// index, so the guard stays as small as it was); read by [`Self::method`] and the drop.
    pub(super) taken_method: Option<u8>,
    /// A `tools/call`'s params read straight into their type ([`Peer::read_tools_call_typed`]);
    /// `request.params` is then `None`.
    pub(super) tools_call: Option<Box<ToolsCallParams>>,
}

impl fmt::Debug for IncomingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncomingRequest")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl IncomingRequest {
    /// The request as received (a `Peer`'s user always gets it whole; only this crate's
    /// server driver has its params read into their type or taken out).
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The method name.
    pub fn method(&self) -> &str {
        self.taken_method
            .and_then(|i| crate::protocol::METHODS.get(usize::from(i)))
            .map_or(&self.request.method, |info| info.name)
    }

    /// The request id.
    pub fn id(&self) -> &RequestId {
        &self.request.id
    }

    /// Whether this is a request for method `M`.
    pub fn is<M: Method>(&self) -> bool {
        self.method() == M::NAME
    }

    /// The params decoded as `P` (absent params read as `null`); a `-32602` error otherwise.
    pub fn params<P: DeserializeOwned>(&self) -> Result<P, ErrorObject> {
        if let Some(typed) = &self.tools_call {
            let value = serde_json::to_value(typed).ok();
            return crate::jsonrpc::params_of(value.as_ref());
        }
        crate::jsonrpc::params_of(self.request.params.as_ref())
    }

    /// The params of a `tools/call` read straight into their type, taken out (`None` for
    /// any other request, or one read the `Value` way: its params are in the request).
    pub(crate) fn take_tools_call(&mut self) -> Option<Box<ToolsCallParams>> {
        self.tools_call.take()
    }

    /// The request as received, its params taken out (the guard keeps its id and method,
    /// which its answer and its drop need): for a session that decides it elsewhere and
    /// answers through this guard later. A method this crate types keeps its static name
    /// ([`Self::method`]) and hands the received one on, so the common path copies no name
    /// (issue #24).
    pub(crate) fn take_request(&mut self) -> Request {
        let known = crate::protocol::METHODS
            .iter()
            .position(|m| m.name == self.request.method)
            .and_then(|i| u8::try_from(i).ok());
        let method = match known {
            Some(i) if self.taken_method.is_none() => {
                self.taken_method = Some(i);
                std::mem::take(&mut self.request.method)
            }
            _ => self.method().to_owned(),
        };
        Request {
            id: self.request.id.clone(),
            method,
            params: self.request.params.take(),
        }
    }

    /// The params decoded as method `M`'s params.
    pub fn typed_params<M: Method>(&self) -> Result<M::Params, ErrorObject> {
        self.params::<M::Params>()
    }

    /// Answers with a result (serialised; a serialisation failure answers `-32603`).
    pub async fn respond(mut self, result: impl Serialize) -> Result<(), PeerError> {
        if self.batch.is_none() {
            // Straight to text, without building a `Value` of the result first, through
            // `Encoded`'s checks: a `RawValue` holding a newline, or a member named twice,
            // goes through `Value`, so the answer stays one line of one message.
            let id = &self.request.id;
            if let Ok(result) =
                crate::jsonrpc::Encoded::response_for(self.shared.frame_buffer(), id, &result)
            {
                self.armed = false;
                let text = result.into_response(|| self.shared.frame_buffer(), id);
                let owed = self.owed.take();
                return self.shared.send_answer(text, owed).await;
            }
        }
        let outcome = serde_json::to_value(result)
            .map_err(|e| ErrorObject::internal(format!("cannot encode result: {e}")));
        self.finish(outcome).await
    }

    /// Answers with an error object.
    pub async fn respond_error(self, error: ErrorObject) -> Result<(), PeerError> {
        self.finish(Err(error)).await
    }

    /// Answers with a result or an error object.
    pub async fn finish(mut self, outcome: Result<Value, ErrorObject>) -> Result<(), PeerError> {
        self.armed = false;
        match &self.batch {
            Some(batch) => {
                let (outcome, replaced) = crate::jsonrpc::outcome_to_send(outcome);
                if let Some(reason) = replaced {
                    tracing::warn!("answer in a batch replaced by -32603: {reason}");
                }
                let response = Message::Response(Response {
                    id: Some(self.request.id.clone()),
                    outcome,
                });
                match batch.add(response.to_value(), self.owed.take()) {
                    Some((text, owed)) => self.shared.send_answer(text, owed).await,
                    None => Ok(()),
                }
            }
            None => {
                let text =
                    wire::response_in(self.shared.frame_buffer(), Some(&self.request.id), &outcome);
                let owed = self.owed.take();
                self.shared.send_answer(text, owed).await
            }
        }
    }

    /// Disarms the guard and returns the id, for answering later with [`Peer::respond`]
    /// (or [`Peer::respond_error`]): the id stays in flight until that answer is queued, so
    /// a request reusing it meanwhile is refused `-32600`; an id never answered stays so
    /// for the connection's life. A request that arrived in a batch is handed back instead: its answer must go through
    /// [`IncomingRequest::finish`] so that the batch's single response array is completed.
    // The request comes back by value, as it always did (public API): boxing it would cost
    // every caller an allocation for the rare batch case.
    #[allow(clippy::result_large_err)]
    pub fn into_id(mut self) -> Result<RequestId, IncomingRequest> {
        if self.batch.is_some() {
            return Err(self);
        }
        self.armed = false;
        // Answered later through `Peer::respond`: no longer tracked for the EOF drain, but
        // its id stays in flight until that answer is queued (`serving`).
        if let Some(held) = self.owed.as_mut().and_then(Owed::take_key) {
            lock(&self.shared.serving).detach(held);
        }
        self.owed = None;
        Ok(self.request.id.clone())
    }
}

impl Drop for IncomingRequest {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        // Dropped while unwinding: the handler failed, it did not decline the method.
        let error = if std::thread::panicking() {
            ErrorObject::internal("the handler failed")
        } else {
            ErrorObject::method_not_found(self.method())
        };
        tracing::debug!(
            "request {} ({}) dropped unanswered; answering {}",
            self.request.id,
            self.method(),
            error.code
        );
        let response = Message::Response(Response {
            id: Some(self.request.id.clone()),
            outcome: Err(error),
        });
        let owed = self.owed.take();
        let answer = match &self.batch {
            Some(batch) => batch.add(response.to_value(), owed),
            None => Some((response.to_json(), owed)),
        };
        if let Some((text, owed)) = answer {
            self.shared.send_frame_detached(text, owed);
        }
    }
}

/// The other side's requests and notifications, in arrival order. `recv` is cancel-safe, so
/// it can sit in `tokio::select!`. Dropping it makes every later request answer `-32601`.
#[derive(Debug)]
pub struct Incoming {
    pub(super) rx: queue::Receiver<Item>,
    pub(super) shared: Arc<Shared>,
    /// The number of the frame the last item taken came from ([`Incoming::frame`]), and
    /// its entry's index + 1 in a batch (0: no batch entry, [`Incoming::entry`]).
    pub(super) frame: (u64, u32),
}

/// What the incoming queue carries: the other side's messages, and the responses to
/// [`Peer::send_request`] at their wire position. Not boxed: the queue holds nothing until
/// something is queued ([`queue`]), so an idle connection pays no slots for it. Each carries
/// the bytes of its frame (a batch entry its share), which [`INCOMING_QUEUE_BYTES`] bounds.
pub(super) enum Item {
    Message(IncomingMessage, FrameOf),
    Response(Response, FrameOf),
    /// An `inference/lifecycle` notification read into its type (only once
    /// [`Peer::read_lifecycle_typed`] asked for it).
    Lifecycle(Box<LifecycleParams>, FrameOf),
    /// A policy message refused before it was read (a Request's reply written; a
    /// Notification's only reported), in this form, told to an owner that answers the
    /// policy Request itself (`reader::refusing_policy`, §6.7).
    PolicyUnread(crate::policy::Form),
}

/// What an item holds of the frame it was read from.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameOf {
    /// Its frame's bytes (a batch entry's share).
    pub(super) bytes: usize,
    /// Its frame's number on the connection ([`super::TapEvent::frame`]).
    pub(super) frame: u64,
    /// For an entry of a batch, its index in the batch + 1; 0 otherwise.
    pub(super) entry: u32,
}

impl FrameOf {
    /// What a message the reader queues now holds of the frame it is taking: its weight
    /// (`Shared::reading`) and number (`Shared::frames_read`), both written by the reader.
    pub(super) fn now(shared: &Shared) -> FrameOf {
        FrameOf {
            bytes: shared.reading.load(Ordering::Relaxed),
            frame: shared.frames_read.load(Ordering::Relaxed),
            entry: shared.entry_now.load(Ordering::Relaxed),
        }
    }
}

impl Item {
    /// What the item weighs in the incoming queue: its frame's bytes.
    pub(super) fn bytes(&self) -> usize {
        self.taken().map_or(0, |t| t.bytes)
    }

    /// What it holds of its frame; none for a refusal told without a message.
    fn taken(&self) -> Option<FrameOf> {
        match self {
            Item::Message(_, t) | Item::Response(_, t) | Item::Lifecycle(_, t) => Some(*t),
            Item::PolicyUnread(_) => None,
        }
    }
}

/// What [`Incoming::recv_typed`] returns, in wire order.
pub(crate) enum Typed {
    /// What [`Incoming::recv_ordered`] returns.
    Ordered(Ordered),
    /// An `inference/lifecycle` notification's params (§10.5), read straight from its text.
    Lifecycle(Box<LifecycleParams>),
    /// A policy message refused before it was read, in this form (a Request already
    /// answered; [`Item::PolicyUnread`]).
    PolicyUnread(crate::policy::Form),
}

/// What [`Incoming::recv_ordered`] returns, in wire order.
#[derive(Debug)]
pub enum Ordered {
    /// A request or notification from the other side.
    Message(IncomingMessage),
    /// The response to a request sent with [`Peer::send_request`].
    Response(Response),
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Whatever was waiting is dropped with the queue: nothing is waiting any more.
        self.shared.inbox.store(0, Ordering::Relaxed);
    }
}

impl Incoming {
    /// The next message; `None` once the connection has ended and the queue is drained.
    pub async fn recv(&mut self) -> Option<IncomingMessage> {
        loop {
            match self.recv_ordered().await? {
                Ordered::Message(m) => return Some(m),
                // Only a consumer of `recv_ordered` sends with `send_request`: reported.
                Ordered::Response(r) => self.shared.diagnose(Diagnostic::UnknownResponse {
                    id: r.id,
                    error: r.outcome.err(),
                }),
            }
        }
    }

    /// The next message or [`Peer::send_request`] response, in wire order: a session that
    /// applies a response before the next message is handled (§5.3, §6.7) reads here. `None`
    /// once the connection has ended and the queue is drained.
    pub async fn recv_ordered(&mut self) -> Option<Ordered> {
        loop {
            return Some(match self.recv_typed().await? {
                Typed::Ordered(o) => o,
                // Read typed only for a driver that reads here, never here: as a notification
                // all the same, should one get here.
                Typed::Lifecycle(p) => {
                    Ordered::Message(IncomingMessage::Notification(Notification {
                        method: crate::protocol::lifecycle::InferenceLifecycle::NAME.into(),
                        params: serde_json::to_value(&*p).ok(),
                    }))
                }
                // Told only to a driver that reads typed; its refusal is already written.
                Typed::PolicyUnread(_) => continue,
            });
        }
    }

    /// [`Self::recv_ordered`], with an `inference/lifecycle` the reader read into its type
    /// ([`Peer::read_lifecycle_typed`]) as it is.
    pub(crate) async fn recv_typed(&mut self) -> Option<Typed> {
        let item = self.rx.recv().await?;
        self.shared.inbox_taken();
        if let Some(t) = item.taken() {
            self.frame = (t.frame, t.entry);
        }
        Some(match item {
            Item::Message(m, _) => Typed::Ordered(Ordered::Message(m)),
            Item::Response(r, _) => Typed::Ordered(Ordered::Response(r)),
            Item::Lifecycle(p, _) => Typed::Lifecycle(p),
            Item::PolicyUnread(form) => Typed::PolicyUnread(form),
        })
    }

    /// Runs `handler` on every incoming message, at most `concurrency` at once (each in its
    /// own task), until the connection ends. No extra queue: when all slots are busy, the
    /// bounded incoming queue fills and the transport stops being read.
    pub async fn serve<F, Fut>(mut self, concurrency: usize, handler: F)
    where
        F: Fn(IncomingMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let handler = Arc::new(handler);
        while let Some(msg) = self.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                handler(msg).await;
                drop(permit);
            });
        }
    }

    /// The number of the received frame ([`super::TapEvent::frame`]) the last message or
    /// response taken from here was read from (an entry of a batch: the batch's; the failure
    /// of a request whose answer was discarded unread: the discarded frame's); 0 before any. A consumer that handles what it takes in turn reads here which frame it handles.
    pub fn frame(&self) -> u64 {
        self.frame.0
    }

    /// For the last message or response taken from here, when it was an entry of a batch
    /// (JSON-RPC 2.0 §6), its index in that batch ([`Incoming::frame`] numbers the batch);
    /// `None` for a frame that is no batch, and for the failure of a request whose answer
    /// came in a batch discarded or refused unread (the entry was never read).
    pub fn entry(&self) -> Option<usize> {
        let n = self.frame.1.checked_sub(1)?;
        usize::try_from(n).ok()
    }

    /// Waits until the connection has ended and returns why.
    pub async fn closed(&self) -> CloseReason {
        wait_closed(&self.shared).await
    }
}
