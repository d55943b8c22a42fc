//! The reader task: frames in, responses settled, messages delivered (wire order).

use super::*;
use crate::jsonrpc::InvalidThen;

/// The reader's next frame: polled in place where the reader can
/// ([`FrameReader::poll_next_frame`]), else through its boxed `next_frame` future.
async fn next_frame(reader: &mut dyn FrameReader) -> std::io::Result<Option<Frame>> {
    let polled = std::future::poll_fn(|cx| match reader.poll_next_frame(cx) {
        Some(std::task::Poll::Ready(r)) => std::task::Poll::Ready(Some(r)),
        Some(std::task::Poll::Pending) => std::task::Poll::Pending,
        None => std::task::Poll::Ready(None),
    })
    .await;
    match polled {
        Some(r) => r,
        None => reader.next_frame().await,
    }
}

pub(super) async fn reader_task(
    shared: Arc<Shared>,
    mut reader: Box<dyn FrameReader>,
    inbound: queue::Sender<Item>,
) {
    let mut closed = shared.closed.subscribe();
    // Polled at every wake: an atomic look, not the watch's lock.
    let mut stop = std::future::poll_fn(|cx| shared.reader_stopped(cx));
    // The reader's own answers (`busy` past the in-flight bound, parse errors, refused
    // batches and messages over the budgets) never wait for the writer: a reader that
    // waited there stopped reading, and two peers each past the other's bound, each with a
    // full writer, waited on each other for good. Held in order beside the reading, which
    // stops only once far too many, or too many bytes, are held ([`Outbox::reads_replies`]).
    let mut replies = shared.outbox();
    'frames: loop {
        let frame = {
            // Kept across the flushes below: a read is never cancelled half way.
            let read = async {
                // Answers sent from `Drop` are bounded like any other send: stop reading.
                shared.detached_backlog_clear().await;
                next_frame(&mut *reader).await
            };
            tokio::pin!(read);
            loop {
                tokio::select! {
                    biased;
                    _ = &mut stop => break 'frames,
                    f = &mut read, if replies.reads_replies() => break f,
                    flushed = replies.flush(), if !replies.is_empty() => {
                        if flushed.is_err() {
                            break 'frames;
                        }
                    }
                }
            }
        };
        match frame {
            Ok(Some(frame)) => {
                shared.touch();
                let discarded = super::oversized::Discarded::of(&frame, &*reader);
                let mut spare = None;
                let handled = handle_frame(
                    &shared,
                    frame,
                    discarded,
                    &inbound,
                    &mut closed,
                    &mut spare,
                    &mut replies,
                );
                if !handled.await {
                    break;
                }
                if let Some(text) = spare {
                    reader.recycle(text);
                }
            }
            Ok(None) => {
                // The reader's own answers are queued before the end is told: an
                // application (a session's driver) that closes once it has seen the end
                // would otherwise drop what the reader still holds. Queued at once, past
                // the writer's capacity (they are bounded by `Outbox::reads_replies`), not
                // waited for: the end is an input as soon as it is read, whatever the other
                // side still has to read (a wait here held it back until the drain limit,
                // then dropped what was still held).
                replies.hand_over();
                // The other side sent everything it will send: our own requests can no
                // longer be answered, but the responses we owe are still written (bounded by
                // the write timeout or the drain limit) before the connection closes.
                shared.read_eof.store(true, Ordering::SeqCst);
                shared.fail_pending(CloseReason::Eof);
                // Nothing more will arrive: `Incoming` ends now, so an application that
                // answers once it has seen the end of the input is not cut off.
                drop(inbound);
                let drain = shared
                    .config
                    .eof_drain
                    .or(shared.config.write_timeout)
                    .unwrap_or(CLOSE_DRAIN_LIMIT);
                // Boxed: once per connection, and it would otherwise size the task for its
                // whole life (see `read_off_worker`).
                Box::pin(async {
                    tokio::select! {
                        _ = tokio::time::timeout(drain, shared.owed_settled()) => {}
                        _ = until_closed(&mut closed) => {}
                    }
                })
                .await;
                shared.close(CloseReason::Eof);
                break;
            }
            Err(e) => {
                shared.close(CloseReason::Io(e.to_string()));
                break;
            }
        }
    }
}

/// Closes the connection once no frame was read or written for `idle`. A task of its own,
/// so the deadline holds wherever the reader is blocked (waiting for a frame, or sending
/// replies to a side that does not read them); the reader stops at the close (its reads and
/// sends watch for it). Ends at the close, or at EOF (the drain has its own bound).
pub(super) async fn idle_watchdog(shared: Arc<Shared>, idle: Duration) {
    let mut closed = shared.closed.subscribe();
    loop {
        let deadline = *lock(&shared.last_activity) + idle;
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = until_closed(&mut closed) => return,
        }
        if shared.read_eof.load(Ordering::SeqCst) {
            return;
        }
        if *lock(&shared.last_activity) + idle <= Instant::now() {
            shared.close(CloseReason::IdleTimeout(idle));
            return;
        }
    }
}

pub(super) fn excerpt(text: &str) -> String {
    let mut end = text.len().min(80);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One dispatched item: a message for the application, or an immediate error reply.
pub(super) enum Parsed {
    Deliver(IncomingMessage),
    Lifecycle(Box<LifecycleParams>),
    /// The response to a [`Peer::send_request`], delivered in wire order.
    Settled(Response),
    Reply(Value),
    /// The reply refusing a policy Request before it was read (`refusing_policy`), and the
    /// owner told of it in wire order ([`Item::PolicyUnread`]).
    ReplyUnreadPolicy(Value, crate::policy::Form),
    /// The owner told of a policy message refused unread, in this form (a Request's reply in
    /// a batch's answer or written already; a Notification is never answered).
    PolicyUnread(crate::policy::Form),
    /// What follows is batch entry `n - 1` (`Shared::entry_now`, [`Incoming::entry`]):
    /// put before each entry of a batch that delivers something; delivers nothing itself.
    Entry(u32),
}

/// Whether `method` is the policy Request (§6.7) on a connection whose owner answers it
/// itself (`Peer::take_policy_past_busy`, `server::Server`'s): one refused before it is
/// read is told to that owner ([`Parsed::ReplyUnreadPolicy`]), since it may carry a
/// reduction the owner must respect all the same (§6.7, F6).
pub(super) fn refusing_policy(shared: &Shared, method: Option<&str>) -> bool {
    shared.policy_past_busy.load(Ordering::Relaxed)
        && method == Some(crate::protocol::feature_sets::FeatureSetsUpdate::NAME)
}

/// Handles one frame; returns `false` when the connection closed while delivering. The
/// frame's text, once read, is left in `spare` for the reader to reuse
/// ([`FrameReader::recycle`]). `discarded`: what the transport told of a frame it discarded.
///
/// Everything but the two rare waits (a large text read off the worker, a full incoming
/// queue) is done without awaiting ([`take_frame`]); those run in one boxed future
/// ([`Later::finish`]), so the reader task's future, which an idle connection keeps, holds
/// only a pointer to them (issue #24).
pub(super) async fn handle_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    discarded: super::oversized::Discarded,
    inbound: &queue::Sender<Item>,
    closed: &mut watch::Receiver<Option<CloseReason>>,
    spare: &mut Option<String>,
    replies: &mut Outbox,
) -> bool {
    let later = match take_frame(shared, frame, discarded, inbound, spare, replies) {
        Taken::Done(ok) => return ok,
        Taken::Later(later) => Box::pin(later.finish(shared, inbound, closed, replies)),
    };
    later.await
}

/// What [`take_frame`] and [`take_read`] did: all of it, or the part left to wait for.
pub(super) enum Taken {
    /// Handled; `false` when the connection closed meanwhile.
    Done(bool),
    Later(Later),
}

/// The rare part of handling a frame that waits.
pub(super) enum Later {
    /// A large text to read on the blocking pool ([`read_off_worker`]).
    OffWorker(String),
    /// An item (counted in the inbox already) the full incoming queue has no room for, and
    /// the batch's items after it, in the box [`take_read`] made ([`Full`]): waiting for
    /// room allocates nothing more.
    Room(Full),
    /// The same, for one of several messages on a line ([`take_pieces`]), and the
    /// messages after it, still to read.
    Pieces(Box<Pieces>),
}

/// What [`Later::Pieces`] holds (boxed: the rare path, kept out of the size of every
/// [`Taken`]).
pub(super) struct Pieces {
    pub(super) item: Item,
    pub(super) rest: std::vec::IntoIter<Parsed>,
    pub(super) pieces: std::vec::IntoIter<String>,
    /// What is delivered once every piece is taken (the failures of our requests answered
    /// past the line's bound, at the line's end).
    pub(super) after: Vec<Parsed>,
}

impl Later {
    async fn finish(
        mut self,
        shared: &Arc<Shared>,
        inbound: &queue::Sender<Item>,
        closed: &mut watch::Receiver<Option<CloseReason>>,
        replies: &mut Outbox,
    ) -> bool {
        loop {
            let (mut item, mut rest, pieces) = match self {
                Later::Room(full) => {
                    let (item, rest) = *full;
                    (item, rest, None)
                }
                Later::Pieces(p) => {
                    let Pieces {
                        item,
                        rest,
                        pieces,
                        after,
                    } = *p;
                    (item, rest, Some((pieces, after)))
                }
                Later::OffWorker(text) => {
                    let max_batch = shared.config.max_batch_entries;
                    let max_cost = shared.config.max_parsed_cost;
                    let read = match read_off_worker(shared, text, max_batch, max_cost).await {
                        Ok((read, weight)) => {
                            shared.reading.store(weight, Ordering::Relaxed);
                            read
                        }
                        Err(None) => return false,
                        // A runtime shutting down cancels it; reading is not expected to
                        // panic, but if it did the connection is closed rather than left
                        // looking open with nothing read.
                        Err(Some(e)) => {
                            shared.close(CloseReason::Io(format!("reading a message failed: {e}")));
                            return false;
                        }
                    };
                    if let Read::Several {
                        pieces,
                        refused_past,
                        ours_past,
                    } = read
                    {
                        match super::pieces::take_several(
                            shared,
                            pieces,
                            (refused_past, ours_past),
                            inbound,
                            replies,
                        ) {
                            Taken::Done(ok) => return ok,
                            Taken::Later(later) => {
                                self = later;
                                continue;
                            }
                        }
                    }
                    match take_read(shared, read, inbound, replies) {
                        Ok(ok) => return ok,
                        Err(full) => {
                            let (item, rest) = *full;
                            (item, rest, None)
                        }
                    }
                }
            };
            loop {
                if !deliver_when_room(shared, item, inbound, closed).await {
                    return false;
                }
                match deliver_all(shared, &mut rest, inbound, replies) {
                    Some(full) => item = full,
                    None => break,
                }
            }
            let Some((pieces, after)) = pieces else {
                return true;
            };
            match super::pieces::take_pieces(shared, pieces, after, inbound, replies) {
                Taken::Done(ok) => return ok,
                Taken::Later(later) => self = later,
            }
        }
    }
}

/// Delivers `items` in order while the incoming queue has room; the one it had none for.
fn deliver_all(
    shared: &Arc<Shared>,
    items: &mut std::vec::IntoIter<Parsed>,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Option<Item> {
    items.find_map(|p| deliver_now(shared, Some(p), inbound, replies).err())
}

/// Delivers what a message refused unread left to deliver (the failure of a request of ours
/// it answered, at its place), waiting only when the incoming queue is full.
pub(super) fn deliver_refused(
    shared: &Arc<Shared>,
    failed: Vec<Parsed>,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Taken {
    let mut failed = failed.into_iter();
    match deliver_all(shared, &mut failed, inbound, replies) {
        None => Taken::Done(true),
        Some(item) => Taken::Later(Later::Room(Box::new((item, failed)))),
    }
}

/// [`handle_frame`] up to its first wait.
fn take_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    discarded: super::oversized::Discarded,
    inbound: &queue::Sender<Item>,
    spare: &mut Option<String>,
    replies: &mut Outbox,
) -> Taken {
    // Every frame on the wire takes a number, a discarded one too (`TapEvent::frame`);
    // only this task writes it: a load and a store, no read-modify-write per frame.
    let number = shared.frames_read.load(Ordering::Relaxed).wrapping_add(1);
    shared.frames_read.store(number, Ordering::Relaxed);
    shared.entry_now.store(0, Ordering::Relaxed);
    let text = match frame {
        Frame::Text(t) => t,
        Frame::Oversized { bytes, limit } => {
            let mut discarded = discarded;
            let rest = std::mem::take(&mut discarded.rest);
            let mut failed = discarded.batch_failures(shared, || {
                format!(
                    "the batch holding it, of {bytes} bytes, exceeds the {limit}-byte limit \
                     (PeerConfig::max_message_size) and was discarded unread"
                )
            });
            failed.extend(discarded.oversized(shared, bytes, limit, replies));
            let broke = super::refused::Limit::Size { bytes, limit };
            let rest = super::oversized::Discarded::rest_over_bound(rest, shared, broke, replies);
            failed.extend(rest);
            return deliver_refused(shared, failed, inbound, replies);
        }
        Frame::OverBudget { bytes, limit } => {
            let failed = discarded.over_budget(shared, bytes, limit, replies);
            return deliver_refused(shared, failed, inbound, replies);
        }
        Frame::NotText { reason } => {
            let mut discarded = discarded;
            let rest = std::mem::take(&mut discarded.rest);
            let mut failed = discarded.batch_failures(shared, || {
                format!("the batch holding it was refused as no text: {reason}")
            });
            failed.extend(discarded.not_text(shared, reason.clone(), replies));
            let others = super::oversized::Discarded::rest_not_text(rest, shared, &reason, replies);
            failed.extend(others);
            return deliver_refused(shared, failed, inbound, replies);
        }
    };
    shared.tap(FrameDirection::Inbound, &text);
    let (trimmed, json_lead) = message_read(&text);
    // Blank: JSON whitespace and a byte order mark only (RFC 8259 §2); other whitespace
    // alone is junk, reported (`jsonrpc::message_lead`).
    if trimmed.is_empty() && json_lead {
        tracing::trace!("skipped a blank line");
        return Taken::Done(true);
    }
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        shared.diagnose(Diagnostic::JunkLine {
            excerpt: excerpt(if trimmed.is_empty() { &text } else { trimmed }),
        });
        return Taken::Done(true);
    }
    let max_batch = shared.config.max_batch_entries;
    let max_cost = shared.config.max_parsed_cost;
    if trimmed.len() >= PARSE_OFF_WORKER {
        // Issue #20: a large text takes milliseconds of CPU to read (a 2 MB list of 200,000
        // strings, tens of them), during which this worker polled no other connection:
        // under a flood of such messages a new connection's `initialize` waited hundreds
        // of milliseconds. The blocking pool reads it instead; this task waits for it, so
        // the connection's messages stay in order.
        // At most one such parse per core at once, for the whole process: the blocking pool
        // would otherwise run one per connection (up to its 512 threads), each holding its
        // parse's memory.
        return Taken::Later(Later::OffWorker(text));
    }
    let typed = TypedReads {
        lifecycle: shared.typed_lifecycle.load(Ordering::Relaxed),
        tools_call: shared.typed_tools_call.load(Ordering::Relaxed),
        answers: shared.typed_answers.load(Ordering::Relaxed),
    };
    let (read, weight) = read_text(shared, trimmed, json_lead, max_batch, max_cost, typed);
    shared.reading.store(weight, Ordering::Relaxed);
    // A result read the fast way is taken while its text is at hand.
    let read = match read {
        Read::Answer(id, result) => Read::Settled(super::settle::settle_answer(
            shared,
            id,
            trimmed.get(result).unwrap_or_default(),
        )),
        other => other,
    };
    if let Read::Several {
        pieces,
        refused_past,
        ours_past,
    } = read
    {
        *spare = Some(text);
        let past = (refused_past, ours_past);
        return super::pieces::take_several(shared, pieces, past, inbound, replies);
    }
    *spare = Some(text);
    match take_read(shared, read, inbound, replies) {
        Ok(ok) => Taken::Done(ok),
        Err(full) => Taken::Later(Later::Room(full)),
    }
}

/// An item the full incoming queue had no room for (counted in the inbox already), and
/// the batch's items after it; boxed, as the rare path it is.
pub(super) type Full = Box<(Item, std::vec::IntoIter<Parsed>)>;

/// Handles a read frame up to its first wait: `Err` when the incoming queue is full.
pub(super) fn take_read(
    shared: &Arc<Shared>,
    read: Read,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Result<bool, Full> {
    let max_cost = shared.config.max_parsed_cost;
    let item = match read {
        Read::Message(msg) => accept(shared, msg, None),
        Read::Lifecycle(params) => Some(Parsed::Lifecycle(params)),
        Read::Settled(item) => item,
        // Taken in `take_frame`, while the text is at hand (never read off the worker); were
        // one here, its caller would be failed rather than left waiting.
        Read::Answer(id, _) => fail_response(shared, &id, "its result's text was not kept"),
        Read::ToolsCall(id, params) => {
            let request = Request {
                id,
                method: ToolsCall::NAME.to_owned(),
                params: None,
            };
            let mut item = accept(shared, Message::Request(request), None);
            if let Some(Parsed::Deliver(IncomingMessage::Request(r))) = &mut item {
                r.tools_call = Some(shared.boxed_call(params));
            }
            item
        }
        Read::Top(parsed) => return take_top(shared, parsed, inbound, replies, &[]),
        Read::Doubled(top, doubled) => {
            return take_top(shared, Ok(top), inbound, replies, &doubled)
        }
        Read::TooCostly { cost, head } => super::refused::refuse(
            shared,
            Some(head),
            super::refused::Limit::Cost {
                cost,
                limit: max_cost,
            },
            replies,
        ),
        Read::TooDeep { head, error } => {
            let broke = super::refused::Limit::Nesting { error: &error };
            super::refused::refuse(shared, Some(head), broke, replies)
        }
        Read::Unparsed { head, error } => {
            let broke = super::refused::Limit::Unparsed { error: &error };
            super::refused::refuse(shared, Some(head), broke, replies)
        }
        Read::RefusedBatch {
            ours,
            reason,
            then,
            policy,
        } => {
            // The batch's own answer first (it never delivers anything), then each request
            // of ours it answered fails at its place.
            // What the answer left to deliver (the owner told of an unread policy, §6.7)
            // goes first even when the queue is full: queued ahead of the failures, never
            // dropped (it is counted in the inbox already).
            let answered = take_read(shared, *then, inbound, replies);
            let mut failed: Vec<Parsed> = policy.map(Parsed::PolicyUnread).into_iter().collect();
            failed.extend(fail_refused(shared, ours, &reason));
            return match answered {
                Err(full) => {
                    let (item, rest) = *full;
                    let rest: Vec<Parsed> = rest.chain(failed).collect();
                    Err(Box::new((item, rest.into_iter())))
                }
                Ok(ok) => {
                    let mut failed = failed.into_iter();
                    match deliver_all(shared, &mut failed, inbound, replies) {
                        Some(item) => Err(Box::new((item, failed))),
                        None => Ok(ok),
                    }
                }
            };
        }
        // Taken before (`take_several`): a piece is one complete value, never several.
        Read::Several { pieces, .. } => {
            tracing::warn!("{} messages on a line left unread", pieces.len());
            None
        }
        Read::UnparsedBatch { ids, error, policy } => {
            super::unparsed::answer_batch(shared, ids, &error, policy, replies)
        }
        Read::UnparsedPolicy { error, form } => {
            let answered = take_top(shared, Err(error), inbound, replies, &[]);
            let policy = crate::protocol::feature_sets::FeatureSetsUpdate::NAME;
            let told = refusing_policy(shared, Some(policy)).then_some(Parsed::PolicyUnread(form));
            return match deliver_now(shared, told, inbound, replies) {
                Ok(()) => answered,
                Err(item) => Err(Box::new((item, Vec::new().into_iter()))),
            };
        }
        Read::UnparsedRequest { id, error, policy } => {
            super::unparsed::answer_request(shared, id, &error, policy, replies)
        }
    };
    match deliver_now(shared, item, inbound, replies) {
        Ok(()) => Ok(true),
        Err(item) => Err(Box::new((item, Vec::new().into_iter()))),
    }
}

/// [`take_read`] of a frame read the slow way: a batch, or a value that is no valid message.
/// `doubled`: the request-shaped objects that name `id`, `method` or `params` more than
/// once (by index in a batch, 0 for a single one: [`super::text::Read::Doubled`]).
fn take_top(
    shared: &Arc<Shared>,
    parsed: Result<Top, serde_json::Error>,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
    doubled: &[(usize, crate::jsonrpc::doubled::Doubled)],
) -> Result<bool, Full> {
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            shared.diagnose(Diagnostic::ParseError {
                error: e.to_string(),
            });
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(crate::jsonrpc::unparsed::parse_refused(&e)),
            });
            let _ = replies.send(reply.to_json());
            return Ok(true);
        }
    };
    let mut items = Vec::new();
    match value {
        Top::Batch(BoundedBatch::Over { count }) => {
            let limit = shared.config.max_batch_entries;
            shared.diagnose(Diagnostic::BatchTooLarge { count, limit });
            let reply = Message::Response(Response {
                id: None,
                outcome: Err(ErrorObject::invalid_request_because(format_args!(
                    "batch of {count} entries exceeds the limit of {limit}"
                ))
                .with_data(serde_json::json!({ "limit": limit, "count": count }))),
            });
            let _ = replies.send(reply.to_json());
            return Ok(true);
        }
        Top::Batch(BoundedBatch::Within(entries)) => {
            if entries.is_empty() {
                shared.diagnose(Diagnostic::EmptyBatch);
                let reply = Message::Response(Response {
                    id: None,
                    outcome: Err(ErrorObject::invalid_request_because("empty batch")),
                });
                let _ = replies.send(reply.to_json());
                return Ok(true);
            }
            let collector = Arc::new(BatchCollector {
                state: Mutex::new(BatchState {
                    remaining: 0,
                    responses: Vec::new(),
                    owed: None,
                }),
            });
            // Each request of the batch weighs its share of the frame
            // (`PeerConfig::max_in_flight_bytes`).
            let share = shared.reading.load(Ordering::Relaxed) / entries.len();
            shared.reading.store(share.max(1), Ordering::Relaxed);
            let mut refused = Vec::new();
            // `doubled` is in entry order (`jsonrpc::doubled`): walked beside the entries,
            // not searched once per entry (linear in the batch, whatever the peer sends).
            let mut doubled = doubled.iter().peekable();
            for (i, entry) in entries.into_iter().enumerate() {
                let twice = doubled.next_if(|(at, _)| *at == i).map(|(_, d)| d.clone());
                // The entry being taken, for what the reader raises about it
                // (`Shared::diagnose_reading`); told again with what it delivers.
                shared
                    .entry_now
                    .store(u32::try_from(i + 1).unwrap_or(0), Ordering::Relaxed);
                if let Some(p) = classify(shared, entry, Some(&collector), twice) {
                    match p {
                        Parsed::Reply(v) => refused.push(v),
                        Parsed::ReplyUnreadPolicy(v, form) => {
                            refused.push(v);
                            items.push(Parsed::PolicyUnread(form));
                        }
                        // Its index, told with what it delivers (`Incoming::entry`).
                        other => {
                            items.extend([Parsed::Entry(u32::try_from(i + 1).unwrap_or(0)), other])
                        }
                    }
                }
            }
            let delivered_requests = items
                .iter()
                .filter(|p| matches!(p, Parsed::Deliver(IncomingMessage::Request(_))))
                .count();
            let ready = {
                let mut st = lock(&collector.state);
                st.remaining = delivered_requests;
                st.responses.extend(refused);
                // Nothing was delivered yet, so no guard can have answered before this.
                if st.remaining == 0 && !st.responses.is_empty() {
                    Some(Value::Array(std::mem::take(&mut st.responses)).to_string())
                } else {
                    None
                }
            };
            if let Some(text) = ready {
                let _ = replies.send(text);
            }
        }
        Top::Single(single) => {
            let twice = doubled.first().map(|(_, d)| d.clone());
            if let Some(p) = classify(shared, single, None, twice) {
                items.push(p);
            }
        }
    }
    let mut items = items.into_iter();
    match deliver_all(shared, &mut items, inbound, replies) {
        Some(item) => Err(Box::new((item, items))),
        None => Ok(true),
    }
}

/// Reads a large text on the blocking pool under a [`crate::transport::parse_permits`] permit; `Err(None)` if
/// the permits are gone, `Err(Some(_))` if the read did not finish. Awaited boxed, like every
/// rare path of [`handle_frame`]: the reader task's future is as large as its largest
/// state, and an idle connection keeps that task (issue #24).
async fn read_off_worker(
    shared: &Arc<Shared>,
    text: String,
    max_batch: usize,
    max_cost: usize,
) -> Result<(Read, usize), Option<tokio::task::JoinError>> {
    let Ok(_permit) = crate::transport::parse_permits().acquire().await else {
        return Err(None);
    };
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || {
        let (trimmed, json_lead) = message_read(&text);
        read_text(
            &shared,
            trimmed,
            json_lead,
            max_batch,
            max_cost,
            TypedReads::default(),
        )
    })
    .await
    .map_err(Some)
}

/// The message in a frame's text: without the whitespace around it, nor a UTF-8 byte
/// order mark (U+FEFF) before it, which RFC 8259 §8.1 lets a parser ignore and some
/// writers (Windows tools, at the start of a stream) put there. `str::trim` keeps the mark
/// (it is no whitespace), so the line was skipped as junk and a request in it, with its
/// id, never answered. The one reading `Message::parse` reads a text by too.
use crate::jsonrpc::message_read;

/// Texts of at least this many bytes (256 KiB) are read on the runtime's blocking pool
/// rather than on the worker running the connection (see `handle_frame`).
const PARSE_OFF_WORKER: usize = 256 * 1024;

/// Sends one reply or delivers one message if the incoming queue has room; the item back
/// (counted in the inbox already) when it is full, for [`deliver_when_room`], which callers
/// await boxed (see `read_off_worker`): only a pointer to that rare wait is then part of the
/// reader task's future, which an idle connection keeps.
// The item comes back by value: boxing it would cost an allocation per message for the
// rare full queue.
#[allow(clippy::result_large_err)]
fn deliver_now(
    shared: &Arc<Shared>,
    item: Option<Parsed>,
    inbound: &queue::Sender<Item>,
    replies: &mut Outbox,
) -> Result<(), Item> {
    let item = match item {
        None => return Ok(()),
        // Never waits for the writer (`reader_task`).
        Some(Parsed::Reply(v)) => {
            let _ = replies.send(v.to_string());
            return Ok(());
        }
        Some(Parsed::ReplyUnreadPolicy(v, form)) => {
            let _ = replies.send(v.to_string());
            Item::PolicyUnread(form)
        }
        Some(Parsed::PolicyUnread(form)) => Item::PolicyUnread(form),
        Some(Parsed::Entry(n)) => {
            shared.entry_now.store(n, Ordering::Relaxed);
            return Ok(());
        }
        // Weighed by the frame being taken (`Shared::reading`: a batch entry's share).
        // With the number of that frame (`Shared::frames_read`), which the consumer reads
        // back as the frame it handles (`Incoming::frame`).
        Some(Parsed::Deliver(msg)) => Item::Message(msg, FrameOf::now(shared)),
        Some(Parsed::Lifecycle(p)) => Item::Lifecycle(p, FrameOf::now(shared)),
        Some(Parsed::Settled(r)) => Item::Response(r, FrameOf::now(shared)),
    };
    if inbound.is_closed() {
        undeliverable(shared, item);
        return Ok(());
    }
    // Counted before it can be received, so `recv` never counts below zero.
    shared.inbox.fetch_add(1, Ordering::Relaxed);
    // Room in the queue: no need to watch for a close while waiting.
    match inbound.try_send(item) {
        Ok(()) => Ok(()),
        Err(queue::TrySendError::Closed(item)) => {
            shared.inbox_taken();
            undeliverable(shared, item);
            Ok(())
        }
        Err(queue::TrySendError::Full(item)) => Err(item),
    }
}

/// Waits for room in the incoming queue for `item` (counted in the inbox already); returns
/// `false` when the connection closed while waiting.
async fn deliver_when_room(
    shared: &Arc<Shared>,
    item: Item,
    inbound: &queue::Sender<Item>,
    closed: &mut watch::Receiver<Option<CloseReason>>,
) -> bool {
    tokio::select! {
        r = inbound.send(item) => {
            if let Err(item) = r {
                shared.inbox_taken();
                undeliverable(shared, item);
            }
            true
        }
        _ = until_closed(closed) => {
            shared.inbox_taken();
            false
        }
    }
}

/// Nobody receives incoming messages: a request's guard answers -32601 when dropped here.
pub(super) fn undeliverable(shared: &Shared, item: Item) {
    match &item {
        Item::Message(IncomingMessage::Notification(n), _) => {
            shared.diagnose(Diagnostic::UnhandledNotification {
                method: n.method.clone(),
            })
        }
        Item::Response(r, _) => shared.diagnose(Diagnostic::UnknownResponse {
            id: r.id.clone(),
            error: r.outcome.clone().err(),
        }),
        Item::Lifecycle(..) => shared.diagnose(Diagnostic::UnhandledNotification {
            method: crate::protocol::lifecycle::InferenceLifecycle::NAME.into(),
        }),
        Item::Message(IncomingMessage::Request(_), _) | Item::PolicyUnread(_) => {}
    }
    drop(item);
}

/// Classifies one JSON value: responses settle pending requests here; requests and
/// notifications are returned for delivery; invalid requests get a `-32600` reply.
///
/// `doubled`: the member the object names more than once, which `value` does not show (a
/// request-shaped one is an Invalid Request, `jsonrpc::doubled`).
pub(super) fn classify(
    shared: &Arc<Shared>,
    mut value: Value,
    batch: Option<&Arc<BatchCollector>>,
    doubled: Option<crate::jsonrpc::doubled::Doubled>,
) -> Option<Parsed> {
    // A request gone wrong is answered, with `"id": null` when no id can be read (JSON-RPC
    // 2.0 §5, whose own example is `{"jsonrpc":"2.0","method":1,"params":"bar"}`), alone or in
    // a batch alike; a response gone wrong never is (that could loop), nor a JSON object
    // with no `method` (a log line on stdout, say), which is reported instead.
    let shape = crate::jsonrpc::Shape::of(&value);
    // The policy message's form: a Notification when it names no `id` (§6.7).
    let policy = refusing_policy(shared, value.get("method").and_then(Value::as_str)).then(|| {
        match value.get("id") {
            Some(_) => crate::policy::Form::Request,
            None => crate::policy::Form::Notification,
        }
    });
    if !shape.request_like() {
        super::ids::integral_id(shared, &mut value);
    }
    let read = crate::jsonrpc::doubled::from_value_read(value, doubled);
    match read {
        Ok(msg) => accept(shared, msg, batch),
        Err(invalid) => {
            // The one rule (`jsonrpc::invalid_then`); an object with an id and neither a
            // method nor an outcome is answered unless it names a request of ours.
            let answered = match shape.then(&invalid) {
                InvalidThen::Answer(_) => true,
                InvalidThen::AnswerUnlessOurs(id) => !super::settle::answers_ours(shared, &id),
                _ => false,
            };
            if answered {
                return Some(super::refused::answered_invalid(shared, invalid, policy));
            }
            let InvalidMessage { id, reason } = invalid;
            // Nor does one fail a request not yet written (`fail_response` checks it).
            let settled = id
                .as_ref()
                .and_then(|id| fail_response(shared, id, &reason));
            shared.diagnose_reading(Diagnostic::InvalidMessage {
                id,
                reason,
                answered: false,
            });
            settled
        }
    }
}

pub(super) use super::refused::fail_refused;
pub(super) use super::settle::fail_response;

/// Takes one valid message, from either parse path: responses settle pending requests here;
/// requests and notifications are returned for delivery.
pub(super) fn accept(
    shared: &Arc<Shared>,
    msg: Message,
    batch: Option<&Arc<BatchCollector>>,
) -> Option<Parsed> {
    match msg {
        Message::Request(request) => {
            if request.id.is_fractional() {
                // JSON-RPC 2.0 §4's SHOULD NOT: taken, reported once for its form.
                shared.diagnose(Diagnostic::FractionalId {
                    id: request.id.clone(),
                    method: request.method.clone(),
                });
            }
            let limit = shared.config.max_in_flight_requests.max(1);
            // The ids in flight, locked once for the count and the take below: the requests
            // the application took with `into_id` and has not answered count as in flight
            // (`Serving::by_id`), so they are bounded too.
            let mut serving = lock(&shared.serving);
            // §6.7: the policy Request, answered by the session itself, is never busy.
            let owed = match shared.policy_past_busy.load(Ordering::Relaxed)
                && request.method == crate::protocol::feature_sets::FeatureSetsUpdate::NAME
            {
                true => 0,
                false => shared
                    .owed
                    .load(Ordering::SeqCst)
                    .saturating_add(serving.by_id()),
            };
            let bytes = shared.owed_bytes.load(Ordering::Relaxed);
            let byte_limit = shared.config.max_in_flight_bytes;
            if owed > 0 && owed < limit && bytes >= byte_limit {
                drop(serving);
                // The same, past the bytes in flight (one request is always taken).
                shared.diagnose(Diagnostic::BusyBytes {
                    id: request.id.clone(),
                    method: request.method.clone(),
                    bytes,
                    limit: byte_limit,
                });
                let reply = Message::Response(Response {
                    id: Some(request.id),
                    outcome: Err(ErrorObject::busy_bytes(bytes, byte_limit)),
                });
                return Some(Parsed::Reply(reply.to_value()));
            }
            if owed >= limit {
                drop(serving);
                // Past the bound nothing is built for it: one small error, written by the
                // reader, which waits (reads nothing more) while the writer is full.
                shared.diagnose(Diagnostic::Busy {
                    id: request.id.clone(),
                    method: request.method.clone(),
                    limit,
                });
                let reply = Message::Response(Response {
                    id: Some(request.id),
                    outcome: Err(ErrorObject::busy(limit)),
                });
                return Some(Parsed::Reply(reply.to_value()));
            }
            // MCP base protocol: an id is not reused while its request is in flight; the
            // later one is refused, never run (`serving`): the one rule, whoever owns the
            // connection (a `HostSession`'s, a `Server`'s, a plain peer's).
            let held = serving.take(super::serving::key(&request.id));
            drop(serving);
            let Some(held) = held else {
                let policy = refusing_policy(shared, Some(&request.method))
                    .then_some(crate::policy::Form::Request);
                let invalid = crate::jsonrpc::InvalidMessage::id_in_use(request.id);
                return Some(super::refused::answered_invalid(shared, invalid, policy));
            };
            let weight = shared.reading.load(Ordering::Relaxed);
            Some(Parsed::Deliver(IncomingMessage::Request(IncomingRequest {
                request,
                shared: shared.clone(),
                batch: batch.cloned(),
                armed: true,
                owed: Some(Owed::new(shared, weight, Some(held))),
                taken_method: None,
                tools_call: None,
            })))
        }
        Message::Notification(n) => {
            if n.method == CANCELLED && shared.answers_cancels.load(Ordering::Relaxed) {
                // Its sender gave the request up (MCP cancellation), and the owner answers
                // it `-32800` as it handles this cancel (`Peer::answers_cancels`): that answer
                // is its request's, so the id is free from here on in wire order. Without
                // such an owner the request stays in flight until answered (`serving`).
                let id = n.params.as_ref().and_then(|p| p.get("requestId"));
                if let Some(id) = id.and_then(RequestId::from_request_value) {
                    lock(&shared.serving).forget(super::serving::key(&id));
                }
            }
            Some(Parsed::Deliver(IncomingMessage::Notification(n)))
        }
        Message::Response(response) => super::settle::settle(shared, response),
    }
}

/// MCP's cancellation notification: the request it names is no longer in flight for its
/// sender (`serving`).
const CANCELLED: &str = crate::session::CANCELLED;
