//! A frame's text read into what the reader takes (issue #8, issue #20): a valid single
//! message straight from the text (an `inference/lifecycle` notification into its type),
//! the top-level value for the slow path ([`parse_batch`]), or a text refused unbuilt for
//! its parsed cost, with what it weighs ([`WEIGH_PARSED_FROM`]).

use super::refused::Head;
use super::*;
use crate::jsonrpc::doubled::Doubled;

/// Which hot messages a frame's text is read straight into their types (issue #24); each
/// only for a driver that takes them so.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TypedReads {
    /// `inference/lifecycle` notifications ([`Read::Lifecycle`]).
    pub(super) lifecycle: bool,
    /// `tools/call` requests ([`Read::ToolsCall`]).
    pub(super) tools_call: bool,
    /// Result responses, their result kept as text ([`Read::Answer`]).
    pub(super) answers: bool,
}

/// A frame's text read: a valid single message, the top-level value for the slow path, or
/// a text refused unbuilt for its parsed cost.
pub(super) enum Read {
    Message(Message),
    /// An `inference/lifecycle` notification, its params read straight into their type.
    Lifecycle(Box<LifecycleParams>),
    /// A `tools/call` request, its params read straight into their type.
    ToolsCall(RequestId, ToolsCallParams),
    /// A result response, checked; the result is the text's bytes in the range.
    Answer(RequestId, std::ops::Range<usize>),
    /// A [`Read::Answer`] taken ([`settle_answer`]): what is left to deliver, if anything.
    Settled(Option<Parsed>),
    Top(Result<Top, serde_json::Error>),
    /// [`Read::Top`] with the request-shaped objects (by their index in a batch; 0 for a
    /// single one) that name `id`, `method` or `params` more than once, and which
    /// (`jsonrpc::doubled`): each refused as an Invalid Request.
    Doubled(Top, Vec<(usize, Doubled)>),
    TooCostly {
        cost: usize,
        head: Head,
    },
    /// A single object nested past what the parser reads (serde_json's recursion limit),
    /// though it may be valid JSON: refused by the one rule from its envelope
    /// ([`crate::transport::envelope`], read past the nesting), `error` the parser's.
    TooDeep {
        head: Head,
        error: String,
    },
    /// A single object the parser refuses for anything else (a number out of a float's
    /// range, a lone surrogate escape, a text cut short) whose envelope shows a response (an
    /// outcome, no method): refused by the one rule, which fails the request of ours its id
    /// names and answers nothing; `error` the parser's. Also any text that is JSON after
    /// more than JSON whitespace and a byte order mark (`jsonrpc::message_lead`), read
    /// whole (`error`: `jsonrpc::LEAD_REFUSED`): a request answered `-32700` under its id.
    Unparsed {
        head: Head,
        error: String,
    },
    /// A single object the parser refuses that shows, before the parser's error, a request
    /// whose id is not in doubt
    /// ([`crate::jsonrpc::refused_request_id`]): answered `-32700` under that id,
    /// so its sender can tell which request failed; `error` the parser's; `policy`: its
    /// envelope names the policy Request (§6.7), refused unread ([`is_policy`]).
    UnparsedRequest {
        id: RequestId,
        error: String,
        policy: bool,
    },
    /// A single object the parser refuses that shows the policy message (§6.7) and no
    /// request id read without doubt: answered as [`Read::Top`]'s error is (`-32700`,
    /// `id: null`; a Notification's text too, as a text that does not parse), and an owner
    /// that answers the policy itself is told it was refused unread, in `form`.
    UnparsedPolicy {
        error: serde_json::Error,
        form: crate::policy::Form,
    },
    /// A batch refused whole (it does not parse, holds more entries than
    /// [`PeerConfig::max_batch_entries`], or costs too much parsed) whose entries answer
    /// requests of ours (`ours`, [`ours_in_batch`]): each fails at once (`reason`), then
    /// `then` is handled as before (one error answered under no id).
    RefusedBatch {
        ours: Vec<RequestId>,
        reason: String,
        then: Box<Read>,
        /// The batch names the policy message (§6.7), in this form
        /// (`jsonrpc::head::policy_in`), refused unread with it: an owner that answers
        /// the policy itself is told after the batch's answer, before the failures.
        policy: Option<crate::policy::Form>,
    },
    /// A batch the parser refuses only for what follows it on its line (`trailing
    /// characters`: another message with nothing between, junk, a message cut short),
    /// whose requests (`ids`, each read whole before the error, `jsonrpc::batch::batch_requests_before`)
    /// are answered `-32700` under their ids in one array, as a single object so refused
    /// has its request answered under the id it showed ([`Read::UnparsedRequest`], the one
    /// rule); `error` the parser's. Each id with whether its entry is the policy Request
    /// (§6.7), refused unread.
    UnparsedBatch {
        ids: Vec<(RequestId, bool)>,
        error: String,
        /// An entry is the policy message (§6.7) not among `ids` (a Notification, or a
        /// Request whose id is in doubt or none), refused unread with the line, in this form.
        policy: Option<crate::policy::Form>,
    },
    /// Several complete messages on one frame's line (`jsonrpc::several_values`), each
    /// read as its own frame's text; `refused_past`: more followed past the bound, and
    /// `ours_past` what was seen there ([`ours_past_the_bound`]).
    Several {
        pieces: Vec<String>,
        refused_past: bool,
        ours_past: Past,
    },
}

/// Reads one trimmed frame text that starts with `{` or `[`. Issue #8: a single object is
/// read straight into a `Message` when it is a valid one; anything the fast path declines
/// (batches, junk, invalid messages) takes the `Value` path, which owns every diagnostic
/// and error reply. A batch keeps at most `max_batch` entries. `typed`: the hot
/// messages read into their types where they can be ([`TypedReads`]). Also
/// returns what the message weighs ([`WEIGH_PARSED_FROM`]): a text refused unbuilt, its
/// length (the failure of ours it is delivered as weighs what it holds instead,
/// [`super::refused::refuse`]).
pub(super) fn read_text(
    shared: &Shared,
    trimmed: &str,
    json_lead: bool,
    max_batch: usize,
    max_cost: usize,
    typed: TypedReads,
) -> (Read, usize) {
    let mut weight = trimmed.len();
    if weight >= WEIGH_PARSED_FROM || crate::jsonrpc::may_exceed(trimmed, max_cost) {
        let cost = crate::jsonrpc::parsed_cost(trimmed);
        if cost <= max_cost {
            weight = crate::jsonrpc::parsed_bytes(trimmed.len(), cost);
        } else {
            let head = Head::read_str(trimmed);
            let read = Read::TooCostly { cost, head };
            let reason = || {
                format!(
                    "the batch holding it would cost {cost} units parsed, over the limit of \
                     {max_cost} (PeerConfig::max_parsed_cost), and was refused unread"
                )
            };
            return (refused_batch(shared, trimmed, reason, read, true), weight);
        }
    }
    if !json_lead {
        // More than JSON whitespace and a byte order mark before it: no JSON text (RFC
        // 8259 §2), refused by the one rule (`jsonrpc::message_lead`); one that does not
        // parse after it is refused by the parser's error below, as any text is.
        // A batch so refused ends each request of ours it answers, as any batch refused
        // whole does (JSON-RPC 2.0 §6).
        if let Some(head) = crate::jsonrpc::lead_refused(trimmed) {
            let lead = crate::jsonrpc::LEAD_REFUSED;
            let reason = || format!("the batch holding it was refused: {lead}");
            let read = Read::Unparsed {
                head,
                error: lead.to_owned(),
            };
            return (refused_batch(shared, trimmed, reason, read, true), weight);
        }
    }
    if let Some(params) = typed
        .lifecycle
        .then(|| crate::jsonrpc::parse_lifecycle(trimmed))
        .flatten()
    {
        return (Read::Lifecycle(Box::new(params)), weight);
    }
    if let Some((id, params)) = typed
        .tools_call
        .then(|| crate::jsonrpc::parse_tools_call(trimmed))
        .flatten()
    {
        return (Read::ToolsCall(id, params), weight);
    }
    if typed.answers {
        if let Some((id, result)) = crate::jsonrpc::parse_answer(trimmed) {
            // Unless it answers a request whose answer is read whole: the way below.
            if !shared.read_whole_noted(&id) {
                return (Read::Answer(id, result), weight);
            }
        }
    }
    if trimmed.starts_with('{') {
        if let Some(msg) = Message::parse_object(trimmed) {
            // The answer to a request whose answer decides authority, read whole.
            if let Message::Response(r) = &msg {
                let repeated = shared
                    .take_read_whole(r.id.as_ref())
                    .then(|| crate::jsonrpc::repeated::first_repeated(trimmed))
                    .flatten();
                if let Some(repeated) = repeated {
                    let doubled = vec![(0, Doubled::Within(repeated))];
                    return (Read::Doubled(Top::Single(msg.to_value()), doubled), weight);
                }
            }
            return (Read::Message(msg), weight);
        }
    }
    let top = if trimmed.starts_with('[') {
        parse_batch(trimmed, max_batch)
    } else {
        serde_json::from_str(trimmed).map(Top::Single)
    };
    if let Err(e) = &top {
        // Several messages on the line: each read alone (the slow path only).
        let several = crate::jsonrpc::unparsed::trailing_detail(&e.to_string())
            .then(|| crate::jsonrpc::several_values(trimmed, max_batch))
            .flatten();
        if let Some(several) = several {
            let pieces = several
                .values
                .into_iter()
                .filter_map(|r| trimmed.get(r).map(str::to_owned))
                .collect();
            let refused_past = several.refused_from.is_some();
            let ours_past = several
                .refused_from
                .and_then(|from| trimmed.get(from..))
                .map(|past| ours_past_the_bound(shared, past.as_bytes()))
                .unwrap_or_default();
            return (
                Read::Several {
                    pieces,
                    refused_past,
                    ours_past,
                },
                weight,
            );
        }
    }
    match top {
        Err(e) if trimmed.starts_with('{') => (refused(trimmed, e), weight),
        Err(e) => {
            let why = e.to_string();
            let first = match crate::jsonrpc::unparsed::trailing_detail(&why) {
                true => crate::jsonrpc::batch::batch_requests_before(trimmed, max_batch),
                false => Default::default(),
            };
            // A policy message refused unread with its line not among the requests answered
            // (§6.7): a Request whose id is in doubt or none, or a Notification.
            let policy = match (first.policy_in_doubt, first.policy_notification) {
                (true, _) => Some(crate::policy::Form::Request),
                (false, true) => Some(crate::policy::Form::Notification),
                (false, false) => None,
            };
            let then = match (first.requests.is_empty(), policy) {
                (true, None) => Read::Top(Err(e)),
                (true, Some(form)) => Read::UnparsedPolicy { error: e, form },
                (false, _) => Read::UnparsedBatch {
                    ids: first.requests,
                    error: why.clone(),
                    policy,
                },
            };
            let reason = move || format!("the batch holding it could not be parsed: {why}");
            // Unless its requests or the policy Notification were read before the error
            // (told as they are answered).
            let look = matches!(then, Read::Top(Err(_)));
            let read = refused_batch(shared, trimmed, reason, then, look);
            (read, weight)
        }
        Ok(Top::Batch(BoundedBatch::Over { count })) => {
            let reason = || {
                format!(
                    "the batch holding it has {count} entries, over the limit of {max_batch} \
                     (PeerConfig::max_batch_entries), and was refused unread"
                )
            };
            let read = match crate::jsonrpc::envelope::batch::responses_only(trimmed.as_bytes()) {
                // Responses only: reported, owed nothing (JSON-RPC 2.0 §5, §6; the one
                // reading, `Head::then`), each of ours it answers failed.
                true => {
                    let limit = max_batch;
                    shared.diagnose(Diagnostic::BatchTooLarge { count, limit });
                    Read::Settled(None)
                }
                false => Read::Top(Ok(Top::Batch(BoundedBatch::Over { count }))),
            };
            (refused_batch(shared, trimmed, reason, read, true), weight)
        }
        Ok(top) => match doubled_members(shared, trimmed, &top) {
            doubled if doubled.is_empty() => (Read::Top(Ok(top)), weight),
            doubled => (Read::Doubled(top, doubled), weight),
        },
    }
}

/// The request-shaped objects of `top` (read from `trimmed`) that name `id`, `method` or
/// `params` more than once, which a `Value` does not show (`jsonrpc::doubled`), and those
/// deciding authority that name any member twice (the policy; the answer to a request of
/// ours noted in [`Shared::read_whole`]): 0 for a single one, their indices for a batch's
/// entries. The text is read again only when an object has a `method` member or answers
/// such a request.
fn doubled_members(shared: &Shared, trimmed: &str, top: &Top) -> Vec<(usize, Doubled)> {
    let request =
        |v: &serde_json::Value| v.get("method").is_some() || crate::jsonrpc::Shape::of(v).bare();
    // Each lock taken alone: `take_read_whole` locks the note itself.
    let noted = || !lock(&shared.read_whole).is_empty();
    let answer_read_whole = |v: &serde_json::Value| {
        let id = || v.get("id").and_then(RequestId::from_value);
        !request(v) && noted() && shared.take_read_whole(id().as_ref())
    };
    match top {
        Top::Single(v) if request(v) => crate::jsonrpc::doubled::doubled_in(trimmed, v)
            .map(|d| vec![(0, d)])
            .unwrap_or_default(),
        Top::Single(v) if answer_read_whole(v) => crate::jsonrpc::repeated::first_repeated(trimmed)
            .map(|r| vec![(0, Doubled::Within(r))])
            .unwrap_or_default(),
        Top::Batch(BoundedBatch::Within(entries)) => {
            let answers: Vec<usize> = match noted() {
                false => Vec::new(),
                true => (0..entries.len())
                    .filter(|&i| entries.get(i).is_some_and(answer_read_whole))
                    .collect(),
            };
            if !answers.is_empty() || entries.iter().any(request) {
                crate::jsonrpc::doubled::doubled_in_batch(trimmed, entries, &answers)
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

/// `read` of a text refused whole, as [`Read::RefusedBatch`] when it is a batch some of
/// whose entries answer requests of ours ([`ours_in_batch`]), failed for `reason`, or
/// (`look`) one that names the policy message (§6.7), on a connection whose owner answers
/// the policy itself. Reading (§6.7, §6.4 fail closed): a batch refused unread for a bound
/// may hide a narrowing as a single message so refused may, so it is told the same way
/// (`jsonrpc::head::policy_in`, the one reading: each object entry's envelope, as far as
/// the batch reads).
fn refused_batch(
    shared: &Shared,
    trimmed: &str,
    reason: impl FnOnce() -> String,
    read: Read,
    look: bool,
) -> Read {
    if !trimmed.starts_with('[') {
        return read;
    }
    let ours = ours_in_batch(shared, trimmed.as_bytes());
    let policy = (look && super::reader::refusing_policy(shared, Some(POLICY)))
        .then(|| crate::jsonrpc::head::policy_in(trimmed))
        .flatten();
    if ours.is_empty() && policy.is_none() {
        return read;
    }
    Read::RefusedBatch {
        ours,
        reason: reason(),
        then: Box::new(read),
        policy,
    }
}

/// The policy message's method (§6.7), as every refusal reads it.
use crate::jsonrpc::head::POLICY;

/// What a line held past the messages read of it, refused unread ([`ours_past_the_bound`]).
#[derive(Default)]
pub(super) struct Past {
    /// The requests of ours answered there, each once, in order.
    pub(super) ours: Vec<RequestId>,
    /// The policy message (§6.7) there, in this form, on a connection whose owner answers
    /// the policy itself: told at the line's end, before the failures of ours.
    pub(super) policy: Option<crate::policy::Form>,
}

/// What a line holds past the messages read of it (`past`, the text from the first message
/// past `PeerConfig::max_batch_entries`): the requests of ours answered there, each once,
/// in order: a message there is refused unread, but an answer to a request of ours among
/// them ends that request now, failed, as one in a batch refused whole does
/// ([`ours_in_batch`]), rather than leaving it to its deadline. Read by the envelope of
/// each object (`envelope::BatchSighted::several_all`, within `MAX_BATCH_SUMMARY_BYTES` of
/// summaries; past them every request of ours outstanding), bounded by the requests
/// outstanding. And the policy message there (§6.7, §6.4 fail closed: it may hide a
/// narrowing), by each object's envelope (`Head::policy_form`, the one reading), those past
/// the summaries kept too (each read by its envelope all the same).
fn ours_past_the_bound(shared: &Shared, past: &[u8]) -> Past {
    let mut sighted = crate::jsonrpc::envelope::batch::BatchSighted::several_all();
    sighted.feed(past);
    let (pieces, unkept, policy_unkept) = sighted.several_pieces(true);
    let owner = super::reader::refusing_policy(shared, Some(POLICY));
    let mut ours = Vec::new();
    let mut policy = policy_unkept.filter(|_| owner);
    for piece in pieces {
        let head = Head::read(&piece);
        if owner && policy != Some(crate::policy::Form::Request) {
            policy = head.policy_form().or(policy);
        }
        if let Some(id) = super::refused::names_ours(&head, shared) {
            if !ours.contains(&id) {
                ours.push(id);
            }
        }
    }
    // Past what the summaries keep, any of ours may be answered there unseen: each fails
    // now, as for a batch not kept whole, rather than waiting for its deadline.
    if unkept {
        for id in super::oversized::outstanding(shared) {
            if !ours.contains(&id) {
                ours.push(id);
            }
        }
    }
    Past { ours, policy }
}

/// The requests of ours answered by entries of a batch refused whole, each once, in the
/// order of the batch: a response entry (an outcome and no method, or an object read whole
/// without a method) whose id names a request outstanding, read by its envelope
/// ([`crate::transport::envelope::batch_entries`]) as far as the batch reads (to the
/// first syntax error outside a value). Reading of JSON-RPC 2.0 §6 (silent on a batch of
/// responses that does not parse): every request of ours an entry names ends now, failed,
/// rather than waiting for its deadline; the rest of the batch is answered as before
/// (`-32700` or `-32600`, `id: null`). Bounded by the requests outstanding.
pub(super) fn ours_in_batch(shared: &Shared, trimmed: &[u8]) -> Vec<RequestId> {
    let mut ours = Vec::new();
    let mut seen = std::collections::HashSet::new();
    crate::transport::envelope::batch_entries(trimmed, |entry, ended| {
        let Some(summary) = entry.summary(ended) else {
            return;
        };
        if let Some(id) = super::refused::names_ours(&Head::read(&summary), shared) {
            if seen.insert(id.clone()) {
                ours.push(id);
            }
        }
    });
    ours
}

/// A single object's text the parser refused (`e`), read by its envelope
/// ([`crate::jsonrpc::unparsed::read_unparsed`], past any nesting), for the one rule a
/// sans-I/O driver is owed its answers by too: [`Read::TooDeep`] when nested past the
/// parser; [`Read::Unparsed`] when it shows a response (an outcome, no method), whose
/// request of ours must not wait for its deadline; [`Read::UnparsedRequest`] when it shows
/// a request whose id was read before the error (the rule of
/// [`crate::jsonrpc::refused_request_id`]); else the parse error as it is (`-32700`,
/// `id: null`).
fn refused(trimmed: &str, e: serde_json::Error) -> Read {
    use crate::jsonrpc::unparsed::Unparsed;
    match crate::jsonrpc::unparsed::read_unparsed(trimmed, &e) {
        Unparsed::TooDeep(head) => Read::TooDeep {
            head,
            error: e.to_string(),
        },
        Unparsed::Response(head) => Read::Unparsed {
            head,
            error: e.to_string(),
        },
        Unparsed::Request(Some(id)) => Read::UnparsedRequest {
            id,
            error: e.to_string(),
            policy: is_policy(trimmed),
        },
        Unparsed::Request(None) => match policy_form(trimmed) {
            Some(form) => Read::UnparsedPolicy { error: e, form },
            None => Read::Top(Err(e)),
        },
    }
}

/// The form of the policy message (§6.7) `trimmed`, an object the parser refused with no
/// request id read without doubt, shows (the one reading, `jsonrpc::head::policy_in`): a
/// Notification when it shows no `id` member, else a Request whose id is in doubt
/// (answered under a null id).
fn policy_form(trimmed: &str) -> Option<crate::policy::Form> {
    crate::jsonrpc::head::policy_in(trimmed)
}

/// Whether the envelope of `trimmed`, an object the parser refused, names the policy
/// Request (§6.7) as its method (the one reading, `jsonrpc::head::policy_in`).
fn is_policy(trimmed: &str) -> bool {
    policy_form(trimmed).is_some()
}

impl Shared {
    /// Notes request `id` of `method`, just registered (waiting in order,
    /// [`Peer::send_request`] and a driver's outbox, or for its answer, [`Peer::request`],
    /// [`Peer::request_raw`] and their forms), as one whose answer is read whole
    /// ([`Shared::read_whole`]) when its answer decides authority
    /// (`jsonrpc::doubled::answer_read_whole`: `initialize`, `mcpl/manifest`), so the one
    /// scan reads it whichever way it was sent. Ids no longer awaited either way are dropped
    /// from the note here, each lock taken alone, so the note never outgrows the requests
    /// outstanding (and a note of one way is never dropped by a send of the other). Never on
    /// the hot path: only those two methods.
    pub(super) fn note_read_whole(&self, method: &str, id: &RequestId) {
        if !crate::jsonrpc::doubled::answer_read_whole(method) {
            return;
        }
        let noted: Vec<RequestId> = lock(&self.read_whole).iter().cloned().collect();
        let stale: Vec<RequestId> = noted
            .into_iter()
            .filter(|id| {
                !lock(&self.pending).contains_key(id) && !lock(&self.in_order).contains(id)
            })
            .collect();
        let mut whole = lock(&self.read_whole);
        for id in &stale {
            whole.remove(id);
        }
        whole.insert(id.clone());
    }

    /// Whether the answer under `id` is noted to be read whole ([`Shared::read_whole`]),
    /// leaving the note for the reading that takes it: a look only while one is noted.
    pub(super) fn read_whole_noted(&self, id: &RequestId) -> bool {
        let whole = lock(&self.read_whole);
        !whole.is_empty() && whole.contains(id)
    }
}
