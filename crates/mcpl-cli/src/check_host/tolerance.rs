//! `host.unknown-fields-tolerated` (§8's compatibility note: a host MUST tolerate unknown
//! response fields; MCP's receivers ignore members they do not know). The checker answers
//! the host's `initialize`, and a `tools/list` the host sends before the probes are done,
//! with members no spec defines ([`UNKNOWN_MEMBER`]): in the result, in `serverInfo`, in
//! `capabilities`, and (`tools/list`) in the result beside `tools`.
//!
//! Reading, judged by what the host does next, as the host's frames count it
//! ([`super::watched::Repeats`] scans every one):
//! - it **went on** (sent any frame after the answer was written): passes;
//! - it **dropped the connection** having sent nothing since: fails;
//! - it **errored**: a Response with `"id": null` carrying an error (the one answer JSON-RPC
//!   2.0 §5 leaves a receiver for a message it cannot take) read before the first probe,
//!   when the checker has written nothing but valid answers, its receipt and two valid
//!   early requests: fails (the junk line, which a `-32700` may answer, comes later);
//! - it **refused in silence** (still connected at the end of the run, nothing sent since
//!   the answer, not even the `notifications/initialized` MCP's lifecycle requires after
//!   `initialize`, or an answer to a probe after `tools/list`): fails.
//!
//! A host that asked for a protocol version the checker does not speak was answered with
//! another (MCP's version negotiation), and MCP has a host that does not support it
//! disconnect: its ending the connection, or its silence, after `initialize` is then no
//! sign of the unknown members, and the check is skipped, saying so.
//!
//! A `tools/list` answered while listening after the probes is not judged: nothing the
//! checker sends afterwards would show the host going on, and its ending the connection
//! then is the end of the run. An MCP-only host is not judged (§3.2: every check is skipped).
//!
//! No answer of the checker's carries a content block: the one that could, the
//! `context/beforeInference` answer's injections, stays empty so the checker never writes
//! into a host's real turn (and a hook comes only while listening, where nothing after it
//! would show the host going on).

use serde_json::{json, Value};

use super::session::Run;
use crate::check::report::Status;

/// `host.unknown-fields-tolerated`.
pub(super) const UNKNOWN_FIELDS_TOLERATED: &str = "host.unknown-fields-tolerated";

/// The name of the members no spec defines that the checker's answers carry.
pub(super) const UNKNOWN_MEMBER: &str = "mcplCheckUnknownMember";

/// The value of every [`UNKNOWN_MEMBER`]: an object, so a reader that skips scalars only is
/// shown too.
pub(super) fn unknown_value() -> Value {
    json!({ "note": "mcpl check-host: a member no spec defines; a host tolerates it (SPEC §8)" })
}

/// `result` with [`UNKNOWN_MEMBER`] added at its top level (a result that is no object is
/// returned as it is).
pub(super) fn with_unknown(mut result: Value) -> Value {
    if let Some(o) = result.as_object_mut() {
        o.insert(UNKNOWN_MEMBER.into(), unknown_value());
    }
    result
}

/// What the host did after the answers carrying unknown members.
#[derive(Debug)]
pub(super) struct Tolerance {
    /// The answer whose reception is not judged yet: what it answered, and how many of the
    /// host's frames had been read when it was written.
    pending: Option<(&'static str, u64)>,
    /// The answers after which the host sent more, in order.
    went_on: Vec<&'static str>,
    /// Answers are still judged (until the listening after the probes).
    open: bool,
    /// An id-null error read is still the host's word on those answers (until the first
    /// probe).
    errors_open: bool,
    /// The first such error, as quoted, once one came.
    null_error: Option<String>,
    /// The protocol version the host asked for, when `initialize` was answered with
    /// another (quoted, bounded).
    other_version: Option<(String, &'static str)>,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            pending: None,
            went_on: Vec::new(),
            open: true,
            errors_open: true,
            null_error: None,
            other_version: None,
        }
    }
}

impl Tolerance {
    /// Notes an error Response with `"id": null` the peer reported (`code`, `message`).
    pub(super) fn null_error(&mut self, code: i64, message: &str) {
        if self.errors_open && self.null_error.is_none() {
            let message: String = message.chars().take(120).collect();
            self.null_error = Some(format!("error {code} ({message:?})"));
        }
    }

    /// From now on an id-null error is no longer read as the host's word on the answers.
    pub(super) fn close_errors(&mut self) {
        self.errors_open = false;
    }

    /// Notes that `initialize` asked for the protocol version `requested` (a value that is
    /// no string asks for none the checker speaks) and was answered with `answered`.
    pub(super) fn versions(&mut self, requested: Option<&Value>, answered: &'static str) {
        let requested = match requested {
            Some(Value::String(s)) => s.chars().take(40).collect(),
            Some(_) => "a value that is no string".to_owned(),
            None => return,
        };
        if requested != answered {
            self.other_version = Some((requested, answered));
        }
    }

    /// From now on no answer is judged.
    pub(super) fn close(&mut self) {
        self.open = false;
    }
}

impl Run {
    /// The host's frames read so far.
    fn frames_read(&self) -> u64 {
        self.repeats.summary().0
    }

    /// Notes that the answer to `what`, carrying unknown members, was written.
    pub(super) fn answered_unknown(&mut self, what: &'static str) {
        if !self.tolerance.open || self.mcp_only {
            return;
        }
        self.settle_tolerance();
        if self.tolerance.pending.is_none() {
            self.tolerance.pending = Some((what, self.frames_read()));
        }
    }

    /// Moves a pending answer to `went_on` once a frame of the host's came after it.
    fn settle_tolerance(&mut self) {
        if let Some((what, at)) = self.tolerance.pending {
            if self.frames_read() > at {
                self.tolerance.pending = None;
                if !self.tolerance.went_on.contains(&what) {
                    self.tolerance.went_on.push(what);
                }
            }
        }
    }

    /// Closes the judging of id-null errors, reading what the peer reported so far.
    pub(super) fn tolerance_errors_closed(&mut self) {
        self.read_diagnostics();
        self.tolerance.close_errors();
    }

    /// Records `host.unknown-fields-tolerated` from what came (called as the report is
    /// made, before the checks not reached are skipped).
    pub(super) fn conclude_tolerance(&mut self) {
        if self.mcp_only || !self.initialized {
            return;
        }
        self.settle_tolerance();
        let why = " (§8: a host MUST tolerate unknown response fields; MCP: a receiver \
                   ignores members it does not know)";
        let carried = |what: &str| {
            format!(
                "the {what} answer, which carried a member no spec defines \
                 ({UNKNOWN_MEMBER:?})"
            )
        };
        if let Some(err) = self.tolerance.null_error.clone() {
            let d = format!(
                "after answers carrying members no spec defines ({UNKNOWN_MEMBER:?}), the host \
                 wrote {err} under id null, before the checker had sent anything but valid \
                 messages{why}"
            );
            self.record(UNKNOWN_FIELDS_TOLERATED, Status::Fail, d);
            return;
        }
        if let Some((what, _)) = self.tolerance.pending {
            if let (Some((asked, answered)), "initialize") = (&self.tolerance.other_version, what) {
                let d = format!(
                    "the host asked for protocol version {asked:?} and was answered \
                     {answered:?}, which the checker speaks; it sent nothing more, which \
                     MCP's version negotiation asks of a host that does not support the \
                     answered version: no sign of how it treats unknown members"
                );
                self.record(UNKNOWN_FIELDS_TOLERATED, Status::Skip, d);
                return;
            }
            let d = match self.gone() {
                Some(gone) => format!(
                    "after {}, the host sent nothing more: {gone}{why}",
                    carried(what)
                ),
                None => format!(
                    "after {}, the host sent nothing more during the run (no \
                     notifications/initialized, no answer to a probe): it refused it in \
                     silence{why}",
                    carried(what)
                ),
            };
            self.record(UNKNOWN_FIELDS_TOLERATED, Status::Fail, d);
            return;
        }
        if self.tolerance.went_on.is_empty() {
            return;
        }
        let d = format!(
            "the host went on after answers carrying a member no spec defines \
             ({UNKNOWN_MEMBER:?}): {}",
            self.tolerance.went_on.join(", ")
        );
        self.record(UNKNOWN_FIELDS_TOLERATED, Status::Pass, d);
    }
}
