//! A refused batch's responses, read as its bytes stream past (a line over the size limit,
//! one the budget refused, a message that is not UTF-8): the envelope of each object entry
//! that shows a response (an outcome, or an id and no method), kept as the summary
//! [`super::Envelope::summary`] writes, so a peer can still end each request of its own
//! that an entry answers. Before, only the batch's first
//! `transport::DISCARDED_HEAD_BYTES` were kept, and an answer past them left its
//! request waiting.

use super::{At, Envelope, Lead};
use crate::policy::Form;

/// The most bytes of entry summaries kept of one refused batch (64 KiB: about 1,400
/// answers with short ids). Entries past it are not kept: the summary then begins with
/// the string entry `"responses not kept"`, and the peer fails every request of its own outstanding, as any may have
/// been answered there.
pub const MAX_BATCH_SUMMARY_BYTES: usize = 64 * 1024;

/// The first entry of a batch's summary when some of its responses were not kept (past
/// [`MAX_BATCH_SUMMARY_BYTES`]): a string, where every summary kept is an object, so no
/// summary reads as it, and the envelope reading of the entries skips it.
pub(crate) const UNKEPT: &[u8] = b"\"responses not kept\"";

/// An entry of a batch's summary when the batch is not known to hold responses only (an
/// entry that is no response, or what was not read of it): a string, which no response
/// is, so the summary read again ([`responses_only`]) tells what the batch did.
pub(crate) const NOT_ONLY_RESPONSES: &[u8] = b"\"not only responses\"";

/// The policy message's method (§6.7) as a JSON string, as an envelope keeps it.
pub(crate) const POLICY_WRITTEN: &str = "\"featureSets/update\"";

/// The summary a batch's reader writes for a policy Request (§6.7) among the entries it had
/// no room to keep ([`MAX_BATCH_SUMMARY_BYTES`]): its id in doubt (none is kept), read
/// again as the policy Request (`Head::policy_form`).
const POLICY_REQUEST_NOT_KEPT: &[u8] = br#"{"id":null,"method":"featureSets/update"}"#;

/// The same for a policy Notification (no `id` member) among the entries not kept.
const POLICY_NOTIFICATION_NOT_KEPT: &[u8] = br#"{"method":"featureSets/update"}"#;

/// The piece a reader of several messages on one line adds (before [`UNKEPT`]) when a
/// policy Request was among the messages it had no room to keep: a string, which no
/// summary is, so nothing else reads as it ([`policy_not_kept`]).
const POLICY_REQUEST_MARK: &[u8] = b"\"policy request not kept\"";

/// The same for a policy Notification among them.
const POLICY_NOTIFICATION_MARK: &[u8] = b"\"policy notification not kept\"";

/// The mark of a policy message (§6.7) among the messages of a line not kept, in its form.
pub(crate) fn policy_mark(form: Form) -> &'static [u8] {
    match form {
        Form::Request => POLICY_REQUEST_MARK,
        Form::Notification => POLICY_NOTIFICATION_MARK,
    }
}

/// The form of the policy message a piece of a line's rest marks as not kept
/// ([`policy_mark`]), if it is such a mark.
pub(crate) fn policy_not_kept(piece: &[u8]) -> Option<Form> {
    match piece {
        POLICY_REQUEST_MARK => Some(Form::Request),
        POLICY_NOTIFICATION_MARK => Some(Form::Notification),
        _ => None,
    }
}

/// The form of the policy message an entry's envelope shows (§6.7; its method read as a
/// parser reads it, `jsonrpc::head::is_policy_written`): a Request when it names `id`.
fn policy_of(envelope: &Envelope) -> Option<Form> {
    let method = envelope.method.as_ref().and_then(|m| m.as_deref())?;
    crate::jsonrpc::head::is_policy_written(method).then_some(if envelope.ids > 0 {
        Form::Request
    } else {
        Form::Notification
    })
}

/// The stronger of two forms seen: a Request (which may set the grant) over a Notification.
fn stronger(a: Option<Form>, b: Option<Form>) -> Option<Form> {
    match (a, b) {
        (Some(Form::Request), _) | (_, Some(Form::Request)) => Some(Form::Request),
        (a, b) => a.or(b),
    }
}

/// Whether `text`, a JSON array (a batch, or a batch's summary as
/// [`BatchSighted::summary`] writes it), holds responses only, read to its end: one entry
/// at least, each an object with a `result` or an `error` and no `method`. Reading
/// (JSON-RPC 2.0 §5, §6): such a batch is owed nothing, as a response never is, however it
/// was refused (its size, its parsed cost): answering it could loop. Anything else (an
/// entry that is a request, a notification, an id with neither, a scalar; an array not
/// read to its `]`) is not.
pub(crate) fn responses_only(text: &[u8]) -> bool {
    let mut s = BatchSighted::default();
    s.feed(text);
    s.closed && !s.asks && s.responses > 0
}

/// Whether `summary` (a batch's, as [`BatchSighted::summary`] writes it) says some of the
/// batch's responses were not kept ([`UNKEPT`]).
pub(crate) fn unkept(summary: &[u8]) -> bool {
    summary
        .strip_prefix(b"[")
        .is_some_and(|rest| rest.starts_with(UNKEPT))
}

/// Where the scan of the array is.
#[derive(Debug)]
enum Step {
    /// Before the array: what precedes a message skipped ([`Lead`]).
    Start,
    /// Expecting an entry (or the array's end).
    Before,
    /// Inside an object entry.
    Object(Box<Envelope>),
    /// Inside any other entry: its nesting, and whether inside a string (after a `\`).
    Other {
        depth: usize,
        string: bool,
        escaped: bool,
    },
    /// After an entry: a `,` or the array's end.
    After,
    /// The array ended, was no array, or broke: nothing more is read.
    Done,
}

/// The responses of a batch, fed its bytes in order in any number of pieces, in bounded
/// memory: one entry's envelope and at most [`MAX_BATCH_SUMMARY_BYTES`] of summaries.
#[derive(Debug)]
pub(crate) struct BatchSighted {
    step: Step,
    /// What precedes the array, read past as before an object ([`Lead`]).
    lead: Lead,
    /// `[` and the summaries kept, each after a `,` but the first.
    kept: Vec<u8>,
    /// A response's summary found no room ([`MAX_BATCH_SUMMARY_BYTES`]).
    unkept: bool,
    /// An entry that is no response was read ([`responses_only`]).
    asks: bool,
    /// Responses read.
    responses: usize,
    /// The array's `]` was read.
    closed: bool,
    /// Reading several objects separated by JSON whitespace on one line
    /// ([`BatchSighted::several`]), not an array.
    several: bool,
    /// How many objects were begun (several mode).
    objects: usize,
    /// The summary of each object after the first (several mode), within
    /// [`MAX_BATCH_SUMMARY_BYTES`] in all.
    pieces: Vec<Vec<u8>>,
    /// A policy message (§6.7) among the entries not kept, in its stronger form: every
    /// entry is read as it streams past, kept or not, so one past the room is still told
    /// ([`POLICY_REQUEST_NOT_KEPT`], [`policy_mark`]).
    policy_unkept: Option<Form>,
}

impl Default for BatchSighted {
    fn default() -> Self {
        BatchSighted {
            step: Step::Start,
            lead: Lead::default(),
            kept: Vec::new(),
            unkept: false,
            asks: false,
            responses: 0,
            closed: false,
            several: false,
            objects: 0,
            pieces: Vec::new(),
            policy_unkept: None,
        }
    }
}

impl BatchSighted {
    /// A reader of several objects separated by JSON whitespace on one line (what
    /// `jsonrpc::several_values` reads one by one from a line it holds), for a line
    /// refused unread: the summary of every object after the first, request or response
    /// ([`BatchSighted::several_pieces`]), so each is handled as if it had come alone and
    /// been refused (the first is the line's own envelope). Anything else between or
    /// after them (a comma, a byte order mark, a scalar, an array) ends the read.
    pub(crate) fn several() -> BatchSighted {
        BatchSighted {
            several: true,
            ..BatchSighted::default()
        }
    }

    /// [`BatchSighted::several`], keeping the first object's summary too: for the text of
    /// a line past the messages already read of it (`peer`'s bound on a line held).
    pub(crate) fn several_all() -> BatchSighted {
        BatchSighted {
            several: true,
            objects: 1,
            ..BatchSighted::default()
        }
    }

    /// Reads the next bytes of the message.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some((&b, after)) = rest.split_first() {
            match &mut self.step {
                Step::Done => return,
                // Several mode: an object begins (its `{` is the envelope's to read). Past
                // what the summaries have room for, each object is still read by its
                // envelope, for a policy message among them (§6.7, §6.4 fail closed).
                Step::Start | Step::After if self.several && b == b'{' => {
                    let start = matches!(self.step, Step::Start);
                    if start && self.lead.step(b) != Some(b'{') {
                        self.step = Step::Done;
                        return;
                    }
                    self.objects += 1;
                    // (`several_all` starts counting at one: every object is kept.)
                    if self.objects == 1 {
                        // The line's own envelope reads the first: only its end is sought.
                        self.step = Self::other(b, 0);
                        rest = after;
                    } else {
                        self.step = Step::Object(Box::default());
                    }
                }
                Step::Object(envelope) => {
                    let Some(n) = envelope.feed_object(rest) else {
                        if matches!(envelope.at, At::Broken | At::NotObject) {
                            self.end_object(false);
                            self.step = Step::Done;
                        }
                        return;
                    };
                    self.end_object(true);
                    self.step = Step::After;
                    rest = rest.get(n..).unwrap_or_default();
                }
                Step::Before if b == b'{' => {
                    self.step = Step::Object(Box::default());
                }
                _ => {
                    self.step_byte(b);
                    rest = after;
                }
            }
        }
    }

    /// One byte outside an object entry.
    fn step_byte(&mut self, b: u8) {
        let space = crate::jsonrpc::lead::is_json_whitespace(b);
        let step = std::mem::replace(&mut self.step, Step::Done);
        self.step = match step {
            Step::Start => match self.lead.step(b) {
                Lead::SKIP => Step::Start,
                Some(b'[') if !self.several => Step::Before,
                Some(_) => Step::Done,
            },
            Step::Before if space => Step::Before,
            // Several mode reads one line: a newline ends it (a WebSocket frame's lines are
            // its messages, each read alone, and a stream's budget sees every line).
            Step::After if self.several && b == b'\n' => Step::Done,
            Step::After if space => Step::After,
            // Several mode: only whitespace and objects (RFC 8259 §2).
            Step::Before | Step::After if self.several => Step::Done,
            Step::Before if b == b']' || b == b',' => Step::Done,
            Step::Before => {
                // An entry that is no object: no response.
                self.asks = true;
                Self::other(b, 0)
            }
            Step::After if b == b',' => Step::Before,
            Step::After if b == b']' => {
                self.closed = true;
                Step::Done
            }
            Step::Other {
                depth,
                string: true,
                escaped,
            } => match b {
                b'"' if !escaped && depth == 0 => Step::After,
                _ => Step::Other {
                    depth,
                    string: escaped || b != b'"',
                    escaped: !escaped && b == b'\\',
                },
            },
            Step::Other { depth, .. } => match b {
                b',' if depth == 0 => Step::Before,
                _ if space && depth == 0 => Step::After,
                b']' if depth == 0 => {
                    self.closed = true;
                    Step::Done
                }
                b']' | b'}' if depth == 0 => Step::Done,
                b']' | b'}' if depth == 1 => Step::After,
                b']' | b'}' => Step::Other {
                    depth: depth - 1,
                    string: false,
                    escaped: false,
                },
                _ => Self::other(b, depth),
            },
            _ => Step::Done,
        };
    }

    /// The step for byte `b` of a non-object entry at `depth` (its first byte, or one inside).
    fn other(b: u8, depth: usize) -> Step {
        Step::Other {
            depth: match b {
                b'[' | b'{' => depth.saturating_add(1),
                _ => depth,
            },
            string: b == b'"',
            escaped: false,
        }
    }

    /// Keeps the summary of the object entry just read (`ended`: its `}` was read), if it
    /// shows a response and there is room for it.
    fn end_object(&mut self, ended: bool) {
        let Step::Object(envelope) = &self.step else {
            return;
        };
        if self.several {
            // Every object after the first (the line's own envelope reads that one).
            if self.objects <= 1 {
                return;
            }
            if !self.unkept {
                let kept: usize = self.pieces.iter().map(Vec::len).sum();
                match envelope.summary(ended) {
                    Some(s) if kept + s.len() > MAX_BATCH_SUMMARY_BYTES => self.unkept = true,
                    Some(s) => {
                        self.pieces.push(s);
                        return;
                    }
                    None => return,
                }
            }
            // Not kept: a policy message among them is still told.
            self.policy_unkept = stronger(self.policy_unkept, policy_of(envelope));
            return;
        }
        if envelope.outcome && !envelope.method_named {
            self.responses += 1;
        } else {
            self.asks = true;
        }
        let response = envelope.outcome || (!envelope.method_named && envelope.id.is_some());
        // The policy message (§6.7) is kept too: a batch refused unread that held it may
        // hide a narrowing, which its reader must fail closed on (`jsonrpc::head::policy_in`
        // reads the summary as it reads a batch's text). Its method read as a parser reads
        // it (escapes undone).
        let policy = policy_of(envelope);
        let kept = response || policy.is_some();
        let Some(summary) = kept.then(|| envelope.summary(ended)).flatten() else {
            return;
        };
        if self.kept.len() + summary.len() + 2 > MAX_BATCH_SUMMARY_BYTES {
            self.unkept = true;
            // Past the room, a policy entry is still told ([`BatchSighted::summary`]).
            self.policy_unkept = stronger(self.policy_unkept, policy);
            return;
        }
        self.kept
            .push(if self.kept.is_empty() { b'[' } else { b',' });
        self.kept.extend_from_slice(&summary);
    }

    /// Several mode, the line cut here (refused part read): whether the read went past the
    /// line's first object and had not ended, so the object it is in (or what may follow)
    /// is unseen past the cut. A line reader then reads the line to its end
    /// (`transport::envelope::Sighted::in_doubt`), so each of its messages is told by what
    /// it is rather than as not kept; [`BatchSighted::several_pieces`] marks it not kept when
    /// the line was cut for good.
    pub(crate) fn tail_unseen(&self) -> bool {
        let past_first = self.objects > 1 || matches!(self.step, Step::After);
        self.several && past_first && !matches!(self.step, Step::Done)
    }

    /// Several mode: the summaries of the objects after the first (with the one being read
    /// when the bytes ended, cut), each as [`super::Envelope::summary`] writes it, and
    /// whether some found no room ([`MAX_BATCH_SUMMARY_BYTES`]) or, when the line did not
    /// end (`ended`), may follow unseen.
    ///
    /// Also the policy message (§6.7) among the objects not kept, in its stronger form:
    /// each was still read by its envelope.
    pub(crate) fn several_pieces(mut self, ended: bool) -> (Vec<Vec<u8>>, bool, Option<Form>) {
        // Cut before its end (a line refused by the budget part read) while reading past
        // the first object: what follows the cut is unseen, so told as not kept (every
        // request of ours then fails rather than waiting for an answer it may hold).
        let unseen = !ended && self.tail_unseen();
        // The object the cut fell in is kept as far as it was read first (a request whose
        // id was read before the cut is answered under it, JSON-RPC 2.0 §5), then marked.
        self.end_object(false);
        if unseen {
            self.unkept = true;
        }
        (self.pieces, self.unkept, self.policy_unkept)
    }

    /// The summaries kept (with the entry being read when the bytes ended, cut), as a JSON
    /// array text (each entry read by
    /// [`super::batch_entries`] as its envelope was), led by [`UNKEPT`] when some found no
    /// room; `None` when none was found. A policy message (§6.7) among the entries not kept
    /// is written last all the same, in constant room ([`POLICY_REQUEST_NOT_KEPT`]), so its
    /// reader tells it (`jsonrpc::head::policy_in`, §6.4 fail closed).
    pub(crate) fn summary(mut self) -> Option<Vec<u8>> {
        // An entry cut by the end of what was fed (a batch refused part read) shows what
        // it read, cut, as a cut message does.
        self.end_object(false);
        let mut kept = self.kept;
        if let Some(form) = self.policy_unkept {
            kept.push(if kept.is_empty() { b'[' } else { b',' });
            kept.extend_from_slice(match form {
                Form::Request => POLICY_REQUEST_NOT_KEPT,
                Form::Notification => POLICY_NOTIFICATION_NOT_KEPT,
            });
        }
        if !kept.is_empty() && (self.asks || !self.closed) {
            // Not known to hold responses only: said in the summary, so that read again it
            // tells the same ([`responses_only`]); the entries kept follow.
            let mut marked = Vec::with_capacity(kept.len() + NOT_ONLY_RESPONSES.len() + 1);
            marked.push(b'[');
            marked.extend_from_slice(NOT_ONLY_RESPONSES);
            marked.push(b',');
            marked.extend_from_slice(kept.get(1..).unwrap_or_default());
            kept = marked;
        }
        if self.unkept {
            // `[`, the mark, then the entries kept (after their own `[`).
            let entries = kept.get(1..).unwrap_or_default();
            let mut marked = Vec::with_capacity(kept.len() + UNKEPT.len() + 2);
            marked.push(b'[');
            marked.extend_from_slice(UNKEPT);
            if !entries.is_empty() {
                marked.push(b',');
                marked.extend_from_slice(entries);
            }
            kept = marked;
        }
        if kept.is_empty() {
            return None;
        }
        kept.push(b']');
        Some(kept)
    }
}
