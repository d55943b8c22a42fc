//! Frames discarded by the transport that still carry what a peer needs to answer them or
//! to end a wait: a message in the wrong encoding that began as a message does
//! ([`FrameReader::not_text_began_as_json`]), and the first bytes of a message over the
//! size limit or refused by the budget for partial messages ([`FrameReader::discarded_head`]).

use super::reader::Parsed;
use super::refused::{names_ours, refuse, Head, Limit};
use super::*;

/// What the reader knows of a discarded frame, read from the transport as it was yielded.
#[derive(Debug, Default)]
pub(super) struct Discarded {
    /// A [`Frame::NotText`] that began as a message does: answered `-32700`.
    pub(super) began_as_json: bool,
    /// What the first bytes of a [`Frame::Oversized`] or [`Frame::OverBudget`] show, or
    /// the envelope of a [`Frame::NotText`] ([`Head::read`]); `None` from a reader that
    /// keeps none.
    pub(super) head: Option<Head>,
    /// The id of a [`Frame::NotText`] request, when its envelope tells it without doubt
    /// ([`crate::jsonrpc::not_text_request_id`]): its `-32700` goes under it.
    pub(super) id: Option<RequestId>,
    /// What the reader kept of a discarded batch: the summaries of its responses, a JSON
    /// array (`transport::envelope::batch`).
    pub(super) batch: Option<Vec<u8>>,
    /// The summaries of the objects after the first on a line of several the reader
    /// discarded ([`FrameReader::discarded_rest`]).
    pub(super) rest: Vec<Vec<u8>>,
}

impl Discarded {
    /// What `reader` tells of `frame`, which it just yielded.
    pub(super) fn of(frame: &Frame, reader: &dyn FrameReader) -> Discarded {
        match frame {
            Frame::NotText { .. } => Discarded {
                began_as_json: reader.not_text_began_as_json(),
                head: reader.discarded_head().map(Head::read),
                id: reader
                    .discarded_head()
                    .and_then(crate::jsonrpc::not_text_request_id),
                batch: batch_of(reader),
                rest: reader.discarded_rest().to_vec(),
            },
            Frame::Oversized { .. } | Frame::OverBudget { .. } => Discarded {
                began_as_json: false,
                head: reader.discarded_head().map(Head::read),
                id: None,
                batch: batch_of(reader),
                rest: reader.discarded_rest().to_vec(),
            },
            _ => Discarded::default(),
        }
    }
}

/// The summaries of a discarded batch's responses the reader kept, if it is one.
fn batch_of(reader: &dyn FrameReader) -> Option<Vec<u8>> {
    reader
        .discarded_head()
        .filter(|head| head.first() == Some(&b'['))
        .map(<[u8]>::to_vec)
}

impl Discarded {
    /// A message the budget for partial messages refused part read (its rest never seen),
    /// on a connection whose owner answers the policy itself, when what was read of it
    /// cannot tell it held no policy message (§6.7): a single object showing neither a
    /// `method` nor an outcome (its method may come past the cut), a batch not read to its
    /// end as responses only (an entry past the cut may be the policy), a line of several
    /// cut past its first message. Reading (§6.7: a reduction is respected whatever its
    /// carrier; §6.4 fail closed; the spec is silent on a message nobody could read): it
    /// may have been a narrowing, so it is told as a policy Notification refused unread
    /// (nothing is granted until the next policy Request is read). A message whose read
    /// part names another method, or shows a response, keeps the grant. Told only when
    /// nothing else told a policy of the frame (the caller's check).
    pub(super) fn unseen_policy(&self, shared: &Shared) -> Option<Parsed> {
        if !super::reader::refusing_policy(shared, Some(crate::jsonrpc::head::POLICY)) {
            return None;
        }
        let tells = match &self.head {
            None => false,
            Some(head) if head.batch => self
                .batch
                .as_deref()
                .is_some_and(crate::jsonrpc::envelope::batch::responses_only),
            Some(head) => head.method || head.outcome,
        };
        let rest_cut = self
            .rest
            .last()
            .is_some_and(|p| p == crate::jsonrpc::envelope::batch::UNKEPT);
        (!tells || rest_cut).then_some(Parsed::PolicyUnread(crate::policy::Form::Notification))
    }

    /// Fails each request of ours a response kept of a discarded batch answers (`why` the
    /// batch was refused), as for a batch refused whole after it was read
    /// ([`super::text`]'s `RefusedBatch`): what is left to deliver, at its place. Bounded by
    /// what the reader keeps (`transport::envelope::batch::MAX_BATCH_SUMMARY_BYTES`).
    ///
    /// When the reader could not keep every response of the batch (its summary begins
    /// with the `UNKEPT` mark), every other request of ours outstanding fails too: any of
    /// them may have been answered in what was not kept, and its answer was discarded
    /// either way. Reading (JSON-RPC 2.0 §6 is silent on a batch of responses that cannot
    /// be read; fail closed): a request ends, failed, rather than waiting for a deadline it
    /// may not have; one the other side answers later is then a late response, reported.
    pub(super) fn batch_failures(
        &self,
        shared: &Shared,
        why: impl FnOnce() -> String,
    ) -> Vec<Parsed> {
        let Some(batch) = &self.batch else {
            return Vec::new();
        };
        // A policy entry the reader kept (§6.7, §6.4 fail closed): the owner that answers
        // the policy itself is told first (the one reading, `jsonrpc::head::policy_in`).
        let policy = super::reader::refusing_policy(shared, Some(crate::jsonrpc::head::POLICY))
            .then(|| crate::jsonrpc::head::policy_in(&String::from_utf8_lossy(batch)))
            .flatten()
            .map(Parsed::PolicyUnread);
        let ours = super::text::ours_in_batch(shared, batch);
        let unkept = crate::jsonrpc::envelope::batch::unkept(batch);
        if ours.is_empty() && !unkept {
            return policy.into_iter().collect();
        }
        let why = why();
        let mut failed: Vec<Parsed> = policy.into_iter().collect();
        failed.extend(super::reader::fail_refused(shared, ours, &why));
        if unkept {
            failed.extend(fail_outstanding(shared, &why));
        }
        failed
    }

    /// Refuses each message after the first on a discarded line of several (`rest`,
    /// [`Discarded::rest`]) by the rule the first was refused by (`each`, given its
    /// envelope summary: [`refuse`] for a line over a bound, the not-text rule for one that
    /// is no text), each as if it had come alone: MCP's stdio framing is one message per
    /// line, and a held line of several whole messages is read message by message
    /// (`jsonrpc::several_values`), so one refused unread is too. A request whose id its
    /// envelope shows is answered under it, a response of ours fails its request now
    /// (returned for delivery at its place), each reported. Before, only the first was:
    /// a request of ours the second answered waited for its deadline (for ever without
    /// one), and a request there got no answer. When the reader could not keep every one
    /// (past `MAX_BATCH_SUMMARY_BYTES` of summaries), every request of ours outstanding
    /// fails too (`why`), as for a batch it could not keep whole, and the messages not kept
    /// are refused with one `-32600` under a null id. Bounded as a line held
    /// is ([`PeerConfig::max_batch_entries`] messages, the first included; reported once,
    /// `Diagnostic::SeveralOnALine`): past it the rest is refused with one `-32600` under
    /// a null id, as `peer::pieces` refuses it, an answer of ours there failing its
    /// request.
    pub(super) fn rest_refused(
        rest: Vec<Vec<u8>>,
        shared: &Shared,
        why: &str,
        replies: &mut Outbox,
        mut each: impl FnMut(&[u8], &mut Outbox) -> Option<Parsed>,
    ) -> Vec<Parsed> {
        let mut failed = Vec::new();
        if rest.is_empty() {
            return failed;
        }
        let plan = rest_refusals(&rest, shared.config.max_batch_entries);
        shared.diagnose(Diagnostic::SeveralOnALine {
            count: plan.count,
            refused_past: plan.refused_past,
        });
        let mut past = Vec::new();
        // The policy message (§6.7) past the bound: refused unread, told to an owner that
        // answers it itself (§6.4 fail closed) before the failures of ours there.
        let owner = super::reader::refusing_policy(shared, Some(crate::jsonrpc::head::POLICY));
        let mut policy = None;
        let mut told = false;
        for refusal in plan.each {
            match refusal {
                // Among the messages not kept (the mark comes after every piece kept): told
                // now, before the failures of ours they may hide.
                RestRefusal::PolicyNotKept(form) if owner => {
                    policy = Some(match policy {
                        Some(crate::policy::Form::Request) => crate::policy::Form::Request,
                        _ => form,
                    });
                    failed.extend(policy.map(Parsed::PolicyUnread));
                    told = true;
                }
                RestRefusal::PolicyNotKept(_) => {}
                RestRefusal::NotKept { answered } => {
                    failed.extend(fail_outstanding(shared, why));
                    // The requests among those not kept are answered too, once, under a
                    // null id (past the message bound, its own reply below says it).
                    if answered {
                        let _ = replies.send(super::pieces::not_kept_reply());
                    }
                }
                RestRefusal::Alone(piece) => failed.extend(each(piece, replies)),
                RestRefusal::PastTheBound(piece) => {
                    let head = Head::read(piece);
                    if owner && policy != Some(crate::policy::Form::Request) {
                        policy = head.policy_form().or(policy);
                    }
                    // Past the bound: refused unread, but an answer of ours there still
                    // ends its request (as on a line held, `text::ours_past_the_bound`).
                    if let Some(id) = names_ours(&head, shared) {
                        past.push(id);
                    }
                }
            }
        }
        if plan.refused_past {
            let _ = replies.send(super::pieces::refused_past_reply(plan.limit));
            failed.extend(policy.filter(|_| !told).map(Parsed::PolicyUnread));
            failed.extend(super::reader::fail_refused(shared, past, why));
        }
        failed
    }

    /// [`Discarded::rest_refused`] for a line over a bound (`broke`): each by [`refuse`].
    pub(super) fn rest_over_bound(
        rest: Vec<Vec<u8>>,
        shared: &Shared,
        broke: Limit,
        replies: &mut Outbox,
    ) -> Vec<Parsed> {
        Self::rest_refused(rest, shared, &broke.why(), replies, |piece, replies| {
            refuse(shared, Some(Head::read(piece)), broke, replies)
        })
    }

    /// [`Discarded::rest_refused`] for a line that is no text (`reason`): each by the rule
    /// the first is ([`Discarded::not_text`]), from its envelope: a request `-32700` under
    /// the id its envelope tells without doubt, a response of ours failing its request.
    pub(super) fn rest_not_text(
        rest: Vec<Vec<u8>>,
        shared: &Shared,
        reason: &str,
        replies: &mut Outbox,
    ) -> Vec<Parsed> {
        let why = format!("the response was refused as no text: {reason}");
        Self::rest_refused(rest, shared, &why, replies, |piece, replies| {
            let alone = Discarded {
                began_as_json: piece.first() == Some(&b'{'),
                head: Some(Head::read(piece)),
                id: crate::jsonrpc::not_text_request_id(piece),
                batch: None,
                rest: Vec::new(),
            };
            alone.not_text(shared, reason.to_owned(), replies)
        })
    }

    /// Handles a message over the size limit from its first bytes, by the rule every
    /// refused message is handled by ([`refuse`]): a request whose id they show is answered
    /// `-32600` under it, `data: { limit, bytes, reason: "max_message_size" }`; a response of
    /// ours among them fails its request now, not at its deadline (returned for delivery at
    /// its place, for one sent in order).
    pub(super) fn oversized(
        self,
        shared: &Shared,
        bytes: usize,
        limit: usize,
        replies: &mut Outbox,
    ) -> Option<Parsed> {
        refuse(shared, self.head, Limit::Size { bytes, limit }, replies)
    }

    /// Handles a message the shared budget for partial messages refused after `bytes`
    /// (`limit` the budget), from what the reader kept of it, by the same rule ([`refuse`]):
    /// a request whose id it shows is answered `-32000` under it, `data: { limit, reason:
    /// "message_budget" }`; a response of ours among them fails its request now; a batch's
    /// responses of ours and the other messages of its line as for a line over the size
    /// limit. On a line of several (MCP's stdio framing is one message per line) the line is
    /// what the budget refused: each of its messages is told so, none blamed
    /// ([`crate::jsonrpc::ErrorObject::over_message_budget_on_line`]). What is left to
    /// deliver, a policy the read part may hide told first ([`Discarded::unseen_policy`]).
    pub(super) fn over_budget(
        mut self,
        shared: &Shared,
        bytes: usize,
        limit: usize,
        replies: &mut Outbox,
    ) -> Vec<Parsed> {
        let unseen = self.unseen_policy(shared);
        let rest = std::mem::take(&mut self.rest);
        let mut failed = self.batch_failures(shared, || {
            format!(
                "the batch holding it was refused after {bytes} bytes, unread: the budget of \
                 {limit} bytes for buffered partial messages is exhausted"
            )
        });
        let broke = Limit::Budget {
            bytes,
            limit,
            several: !rest.is_empty(),
        };
        failed.extend(refuse(shared, self.head, broke, replies));
        failed.extend(Self::rest_over_bound(rest, shared, broke, replies));
        tell_unseen(&mut failed, unseen);
        failed
    }

    /// Reports a frame that is not text. RFC 8259 §8.1: JSON text is UTF-8, so a message
    /// that is not does not parse, and is answered as one that does not parse is (JSON-RPC
    /// 2.0 §5.1: `-32700`, `id: null`); junk that does not begin as a message is reported
    /// only, as a junk line is. A response whose envelope (read past the bytes of another
    /// encoding, which are never JSON's structural characters) names a request of ours
    /// fails that request now and is not answered, as a response that does not parse
    /// ([`super::refused`]): before, it was answered and our request waited for its
    /// deadline. Returned for delivery at its place, for one sent in order. A response
    /// naming no request of ours is reported only, never answered either (answering a
    /// response can loop; `refuse`'s rule, and `mcpl check`'s). A request's `-32700` goes
    /// under its id when its envelope tells it without doubt.
    pub(super) fn not_text(
        &self,
        shared: &Shared,
        reason: String,
        replies: &mut Outbox,
    ) -> Option<Parsed> {
        if let Some(id) = self.head.as_ref().and_then(|h| names_ours(h, shared)) {
            let why = format!("the response was refused as no text: {reason}");
            shared.diagnose(Diagnostic::NotText { reason });
            shared.diagnose(Diagnostic::InvalidMessage {
                id: Some(id.clone()),
                reason: why.clone(),
                answered: false,
            });
            let failed = super::reader::fail_response(shared, &id, &why);
            if failed.is_some() {
                // It weighs what it holds, not the frame it stands for.
                let held = std::mem::size_of::<Response>() + why.len();
                shared.reading.store(held, Ordering::Relaxed);
            }
            return failed;
        }
        // The one rule `mcpl check` answers by too (`jsonrpc::not_text_answer`): under its
        // id when its envelope, read past the bytes of another encoding (which hide none of
        // its members), tells it without doubt, as for a request that does not parse; else
        // under none; a response never.
        let answer = crate::jsonrpc::unparsed::not_text_answer_read(
            &reason,
            self.began_as_json,
            self.head.as_ref(),
            self.id.clone(),
        );
        if let Some(answer) = answer {
            let _ = replies.send(Message::Response(answer).to_json());
        }
        shared.diagnose(Diagnostic::NotText { reason });
        None
    }
}

/// What [`Discarded::unseen_policy`] found, told first of what a frame leaves to deliver
/// (`failed`), unless a policy of the frame was told already.
pub(super) fn tell_unseen(failed: &mut Vec<Parsed>, unseen: Option<Parsed>) {
    if !failed.iter().any(|p| matches!(p, Parsed::PolicyUnread(_))) {
        if let Some(unseen) = unseen {
            failed.insert(0, unseen);
        }
    }
}

/// Fails every request of ours outstanding (`why` the frame was refused): some of what the
/// reader could not keep of it may have answered any of them (`Discarded::batch_failures`).
fn fail_outstanding(shared: &Shared, why: &str) -> Vec<Parsed> {
    let rest = outstanding(shared);
    if rest.is_empty() {
        return Vec::new();
    }
    let why = format!(
        "{why}; its responses past the first {} bytes kept of it were not read, and this \
         request may have been answered there",
        crate::jsonrpc::envelope::batch::MAX_BATCH_SUMMARY_BYTES
    );
    super::reader::fail_refused(shared, rest, &why)
}

/// Every request of ours outstanding whose frame was written (`Shared::was_written`: one
/// still queued can have been answered nowhere): awaited, and sent in order (the two never
/// share an id: both draw from one counter, and each request is registered in one of them).
pub(super) fn outstanding(shared: &Shared) -> Vec<RequestId> {
    let mut ids: Vec<RequestId> = lock(&shared.pending)
        .keys()
        .filter(|id| shared.was_written(id))
        .cloned()
        .collect();
    ids.extend(
        lock(&shared.in_order)
            .iter()
            .filter(|id| shared.was_written(id))
            .cloned(),
    );
    ids
}

/// How the peer refuses each message after the first on a line its transport discarded
/// whole ([`crate::transport::FrameReader::discarded_rest`]), one piece at a time:
/// [`rest_refusals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestRefusal<'a> {
    /// A message within the bound on messages per line, refused as if it had come alone by
    /// the rule the line broke (its size, the budget, no text), from its envelope summary:
    /// a request answered under the id it shows (or none), an answer to a request of the
    /// reader's ending that request, a notification reported only.
    Alone(&'a [u8]),
    /// A message past the bound (`PeerConfig::max_batch_entries`, the first included):
    /// refused unread with the line's one `-32600` under a null id; an answer to a request
    /// of the reader's there still ends that request, and a policy message there (§6.7) is
    /// told to an owner that answers it itself. Its envelope summary.
    PastTheBound(&'a [u8]),
    /// Some messages were not kept (past `MAX_BATCH_SUMMARY_BYTES` of summaries): every
    /// request of the reader's outstanding fails (any may have been answered there), and,
    /// when `answered`, those not kept are answered once under a null id (past the bound,
    /// the bound's own answer says it).
    NotKept {
        /// Whether the messages not kept get their own `-32600` under a null id.
        answered: bool,
    },
    /// A policy message (§6.7) was among those not kept, in this form (the stronger one
    /// seen): an owner that answers the policy itself holds nothing until the next policy
    /// Request it reads (§6.4 fail closed). Never answered on its own.
    PolicyNotKept(crate::policy::Form),
}

/// What the peer does with the rest of a line its transport discarded whole
/// ([`rest_refusals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestRefusals<'a> {
    /// Each piece's refusal, in the order the peer carries them out.
    pub each: Vec<RestRefusal<'a>>,
    /// The messages of the line the peer counts, the first included, up to the bound
    /// (`Diagnostic::SeveralOnALine`'s `count`).
    pub count: usize,
    /// More messages than the bound: those past it are refused with one `-32600` under a
    /// null id (after every piece's refusal).
    pub refused_past: bool,
    /// The bound on messages per line applied (`max_batch_entries`, at least 2).
    pub limit: usize,
}

/// The one reading of how the peer refuses the messages after the first on a line its
/// transport discarded whole (`rest`, as [`crate::transport::FrameReader::discarded_rest`]
/// gives them; `max_batch_entries`, the peer's `PeerConfig::max_batch_entries`), so another
/// reader of the same line (`mcpl check`) answers it as the peer does: each message within
/// the bound alone, those past it refused together, the mark of messages not kept and of a
/// policy among them as they say. MCP's stdio framing is one message per line; a held line
/// of several whole messages is read message by message, so one refused unread is too.
pub fn rest_refusals(rest: &[Vec<u8>], max_batch_entries: usize) -> RestRefusals<'_> {
    use crate::jsonrpc::envelope::batch::{policy_not_kept, UNKEPT};
    let limit = max_batch_entries.max(2);
    // The mark of a policy among the messages not kept is no message.
    let marks = rest.iter().filter(|p| policy_not_kept(p).is_some()).count();
    let messages = rest.len() - marks;
    let refused_past = messages >= limit;
    let each = rest
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            if let Some(form) = policy_not_kept(piece) {
                RestRefusal::PolicyNotKept(form)
            } else if piece.as_slice() == UNKEPT {
                RestRefusal::NotKept {
                    answered: !refused_past,
                }
            } else if i + 1 < limit {
                RestRefusal::Alone(piece)
            } else {
                RestRefusal::PastTheBound(piece)
            }
        })
        .collect();
    RestRefusals {
        each,
        count: messages.min(limit - 1) + 1,
        refused_past,
        limit,
    }
}
