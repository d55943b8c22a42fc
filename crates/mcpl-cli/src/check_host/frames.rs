//! `host.frames-valid` (§4: all messages use JSON-RPC 2.0): every frame the host writes is a
//! JSON-RPC 2.0 message, as `mcpl check`'s `transport.frames-valid` asks of a server. The
//! checker's peer skips a line that is not JSON, answers a frame that does not parse
//! (`-32700`) or a request that is no valid JSON-RPC (`-32600`), and reports each on its
//! diagnostics stream ([`NotRpc::note`] reads them there); such frames had been counted only
//! in a "discarded meanwhile" note where a wait timed out, so a host answering every probe
//! with a log line between them failed nothing.
//!
//! Readings: a frame the checker refused for its own bounds (over [`super::MAX_MESSAGE`],
//! the partial-message budget, the parsed cost, the batch size) is no proof the host broke
//! JSON-RPC, and a response under an id the checker never sent (`id: null` included: the
//! host's `-32700` to the checker's junk line is one) is valid JSON-RPC; neither counts
//! here (the detail says how many frames were discarded unread for their size); nor does a
//! request the peer refused because its id is in use by one still in flight (valid
//! JSON-RPC, judged by `host.in-flight-ids-unique`). Diagnostics the stream dropped (it
//! holds [`super::DIAGNOSTICS_KEPT`]) are not counted either: the count is of the frames
//! reported, a floor, and the detail says so; a pass on such an incomplete view warns
//! ([`Run::view_lost`]). A request whose numeric id has a fraction or an exponent
//! (`101.0`) is valid JSON-RPC (JSON-RPC 2.0 §4: SHOULD NOT), taken and answered under the
//! same value: a warning here, as `mcpl check` warns under `transport.frames-valid`. A
//! response that comes as an entry of a batch fails, as it does there: the checker sends
//! every request alone (JSON-RPC 2.0 §5, [`crate::check::ids::batched_response`]).

use mcpl::peer::Diagnostic;

use super::judge::capped;
use super::session::Run;
use super::tally::Tally;
use crate::check::report::Status;

/// The check's id.
pub(super) const ID: &str = "host.frames-valid";

/// The host's frames that are not JSON-RPC 2.0: how many, the first [`NotRpc::KEPT`]
/// described; how many the transport discarded unread for their size (said in the
/// detail, judged neither way); and the host's requests whose id has a fractional part or
/// an exponent (JSON-RPC 2.0 §4: SHOULD NOT; valid, taken and answered under the same
/// value by the peer, `Diagnostic::FractionalId`): a warning, never a failure.
#[derive(Debug, Default)]
pub(super) struct NotRpc(Tally<{ NotRpc::KEPT }>, u64, Tally<{ NotRpc::KEPT }>);

impl NotRpc {
    /// How many are described in the report.
    pub(super) const KEPT: usize = 3;

    /// Notes `d` when it reports a frame of the host's that is not JSON-RPC 2.0.
    pub(super) fn note(&mut self, d: &Diagnostic) {
        // A reused id (valid JSON-RPC): `host.in-flight-ids-unique`'s finding alone.
        if super::seen::refused_in_use(d).is_some() {
            return;
        }
        if let Diagnostic::Oversized { .. } = d {
            self.1 = self.1.saturating_add(1);
            return;
        }
        if let Diagnostic::FractionalId { id, method } = d {
            let method = capped(method.clone(), 64);
            self.2.note(|| format!("id {id} on {method}"));
            return;
        }
        let said = match d {
            Diagnostic::JunkLine { excerpt } => {
                format!("a line that is not JSON: {:?}", capped(excerpt.clone(), 80))
            }
            Diagnostic::ParseError { error } => {
                format!(
                    "a frame that does not parse ({})",
                    capped(error.clone(), 80)
                )
            }
            Diagnostic::NotText { reason } => {
                format!("a frame that is not text ({})", capped(reason.clone(), 80))
            }
            Diagnostic::InvalidMessage { reason, .. } => {
                format!("not valid JSON-RPC 2.0 ({})", capped(reason.clone(), 80))
            }
            Diagnostic::EmptyBatch => "an empty batch".to_owned(),
            _ => return,
        };
        self.0.note(|| said);
    }
}

impl Run {
    /// Records [`ID`] from the diagnostics read so far, out of `frames` frames read; nothing
    /// when none was read.
    pub(super) fn conclude_frames(&mut self, frames: u64) {
        let seen = &self.not_rpc.0;
        // Frames too large to read are no proof either way, but not passed over unsaid.
        let mut unread = match self.not_rpc.1 {
            0 => String::new(),
            n => format!(
                "; {n} frame(s) over the checker's {}-byte message limit were discarded \
                 unread, neither judged here",
                super::MAX_MESSAGE
            ),
        };
        // A line over the limit still coming when the run ended: no frame yet, said all
        // the same (§4 sets no size: the checker's bound, not judged).
        if let Some(bytes) = self.left.discarding() {
            unread.push_str(&format!(
                "; when the run ended {}",
                super::watched::describe_discarding(bytes)
            ));
        }
        let fractional = &self.not_rpc.2;
        // A response in a batch, to a request sent alone (JSON-RPC 2.0 §5): a failure too.
        let batched = self
            .integral
            .batched_summary()
            .map_or_else(String::new, |said| format!("; {said}"));
        let detail = match seen.count() {
            0 if !batched.is_empty() => format!(
                "{} (§4: all messages use JSON-RPC 2.0){unread}",
                batched.trim_start_matches("; ")
            ),
            0 if frames == 0 && unread.is_empty() => return,
            0 if fractional.count() > 0 => {
                let d = format!(
                    "each of {frames} frame(s) was a JSON-RPC 2.0 message, but {} request(s) \
                     had a numeric id with a fractional part or an exponent (JSON-RPC 2.0 §4: \
                     SHOULD NOT; taken and answered under the same value, §5){}: {}{unread}",
                    fractional.count(),
                    match fractional.cut() {
                        Some(kept) => format!(", the first {kept} shown"),
                        None => String::new(),
                    },
                    fractional.joined()
                );
                self.record(ID, Status::Warn, d);
                return;
            }
            0 => {
                let d = format!("each of {frames} frame(s) was a JSON-RPC 2.0 message{unread}");
                let (status, d) = self.view_lost(Status::Pass, d, "a frame that is not one");
                self.record(ID, status, d);
                return;
            }
            n => format!(
                "{n} frame(s) that are not JSON-RPC 2.0 messages (§4: all messages use \
                 JSON-RPC 2.0){}: {}{batched}{unread}",
                match seen.cut() {
                    Some(kept) => format!(", the first {kept} shown"),
                    None => String::new(),
                },
                seen.joined()
            ),
        };
        let (status, detail) = self.view_lost(Status::Fail, detail, "");
        self.record(ID, status, detail);
    }
}
