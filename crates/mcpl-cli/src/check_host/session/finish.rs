//! The report: the checks judged on everything that came (hooks, forms, frames, ids), the
//! head-of-line check settled, every check not reached saying why.

use super::*;

impl Run {
    /// The report: hooks judged by what arrived, the head-of-line check settled, every check
    /// not reached saying why.
    pub(in crate::check_host) fn finish(mut self, label: String) -> Report {
        let hook_ids = [
            "host.hooks-after-ready",
            "host.hook-params-shape",
            "host.user-message-redacted",
        ];
        let form = "host.hook-is-request";
        if self.hooks == 0 {
            let why = "the host sent no context/beforeInference during the run";
            self.record_unset(&hook_ids, Status::Skip, why);
            self.record_unset(&[form], Status::Skip, why);
        } else {
            let d = format!("{} context/beforeInference message(s) conform", self.hooks);
            self.record_unset(&hook_ids, Status::Pass, &d);
            if self.hooks_notified > 0 {
                let d = format!(
                    "{} of {} context/beforeInference sent as a Notification (§4.1: a Request, \
                     whose answer carries the injections: a Notification gets none)",
                    self.hooks_notified, self.hooks
                );
                self.record(form, Status::Fail, d);
            } else {
                let d = format!("{} context/beforeInference, each a Request", self.hooks);
                self.record(form, Status::Pass, d);
            }
        }
        let form = "host.notifications-have-no-id";
        if let Some(first) = &self.first_notification_with_id {
            let d = crate::check::vocabulary::notifications_with_id_detail(
                self.notifications_with_id,
                self.notifications,
                first,
            );
            self.record(form, Status::Fail, d);
        } else if self.notifications > 0 {
            let d = format!(
                "{} message(s) of a notification-only method, each without an id",
                self.notifications
            );
            self.record(form, Status::Pass, d);
        } else {
            let why = "the host sent no notification-only method (§4.1) during the run";
            self.record_unset(&[form], Status::Skip, why);
        }
        // §11.2, §11.4: a chunk naming a request of the checker's that asked for no stream
        // (`stream` defaults to false) is one nobody asked for. Reading: §11.4 says when a
        // host sends chunks (for `stream: true`) but no MUST NOT forbids them otherwise, so
        // this warns rather than fails. The streamed probe's chunks, and chunks naming no
        // request of the checker's, are `host.chunks-well-formed`'s ([`super::super::streamed`]).
        let chunks = "host.chunks-only-when-streamed";
        if let Some(first) = &self.first_chunk_for {
            let d = format!(
                "{} inference/chunk sent (the first with requestId {first}) for a request of the \
                 checker's that asked for no stream (§11.2: stream defaults to false; §11.4 \
                 describes chunks for stream: true; a warning, no MUST forbids them otherwise)",
                self.chunks
            );
            self.record(chunks, Status::Warn, d);
        } else if self.inference_answered {
            let d = "the checker's inference/request (no stream) was answered with no chunk";
            self.record(chunks, Status::Pass, d);
        } else if self.stream.asked() {
            let why =
                "the inference probe asked for a stream (inferenceRequest.streaming granted), \
                       and no inference/request asking for none was answered with a result: its \
                       chunks are host.chunks-well-formed's";
            self.record_unset(&[chunks], Status::Skip, why);
        } else if self.inference_probed {
            let why = "the host answered no inference/request of the checker's with a result";
            self.record_unset(&[chunks], Status::Skip, why);
        }
        // Else the inference probe was never sent (the run ended before it): "not reached",
        // said below, not an answer the host never gave.
        self.conclude_stream();
        self.conclude_deliveries();
        self.conclude_lifecycles();
        // JSON-RPC 2.0 §5: one Response per call; judged on what came, however the run ended.
        self.read_diagnostics();
        self.conclude_frames(self.repeats.summary().0);
        self.conclude_seen();
        self.conclude_tolerance();
        let once = "host.responses-once";
        match &self.twice {
            (0, _) if self.repeats.summary().0 == 0 => {}
            (0, _) => {
                let d = "no request of the checker's was answered twice".to_owned();
                // Told by the peer as diagnostics: a bounded stream.
                let (status, d) = self.view_lost(Status::Pass, d, "a second answer");
                self.record(once, status, d);
            }
            (n, kept) => {
                let d = format!(
                    "{n} response(s) came under the id of a request already answered (JSON-RPC \
                     2.0 §5: one Response per call; the second is dropped unread, so whatever \
                     it said, an acceptance after a refusal, never counts): request id(s) {}",
                    kept.join(", ")
                );
                let (status, d) = self.view_lost(Status::Fail, d, "");
                self.record(once, status, d);
            }
        }
        self.conclude_stray();
        // What the pairs showed, however the run ended: a host that answered nothing is
        // said as that, not as one answering in order nor as one blocking the ping.
        let early = self.unfinished.is_some() || self.gone.is_some();
        let why = match (&self.paired.silent, self.paired.in_order) {
            (Some(method), _) => Some(format!(
                "the host answered neither {method} nor the ping sent right behind it within \
                 the timeout: no request was answered while another was outstanding, so \
                 independence could not be judged (the silence is that probe's finding, not \
                 a second one here)"
            )),
            (None, 0) if early => None,
            (None, n) => Some(format!(
                "each of {n} request(s) was answered before the ping sent right behind it{}: \
                 none was outstanding for another to wait behind",
                match (&self.unfinished, &self.gone) {
                    (Some(_), _) => ", before the run ended early",
                    (None, Some(_)) => ", before the host went away",
                    (None, None) => "",
                }
            )),
        };
        if let Some(why) = why {
            self.record_unset(&[REQUESTS_INDEPENDENT], Status::Skip, &why);
        }
        // RFC 8259 §4 (SHOULD), I-JSON (RFC 7493 §2.3): judged on every message that came,
        // however the run ended.
        let unique = "host.member-names-unique";
        match self.repeats.summary() {
            (_, Some(said)) => self.record(unique, Status::Warn, said),
            (0, None) => {}
            (n, None) => {
                let d = format!("no object repeated a member name in {n} frame(s)");
                self.record(unique, Status::Pass, d);
            }
        }
        // §4: one message per line over line framing (MCP's stdio transport: no embedded
        // newline); judged on every message that came, however the run ended.
        let one_line = "host.messages-one-line";
        match self.spreads.seen() {
            (0, _) if self.repeats.summary().0 == 0 => {}
            (0, _) => {
                let d = "no message was spread over several lines";
                self.record(one_line, Status::Pass, d);
            }
            (n, kept) => {
                let d = format!(
                    "{n} message(s) spread over several lines, where a message must be one line \
                     (§4: JSON-RPC as MCP carries it, whose stdio transport delimits messages \
                     by newlines and forbids embedded ones; each was read whole, so the run \
                     went on){}: {}",
                    if n > kept.len() as u64 {
                        format!(", the first {} shown", kept.len())
                    } else {
                        String::new()
                    },
                    kept.join("; ")
                );
                self.record(one_line, Status::Fail, d);
            }
        }
        // JSON-RPC 2.0 §5: the same value, written otherwise; judged however the run ended.
        let ids = "host.response-ids-as-sent";
        match self.integral.summary() {
            Some(said) => self.record(ids, Status::Warn, said),
            None if self.repeats.summary().0 == 0 => {}
            None => {
                let d = "no response wrote a request's id with a fraction or an exponent";
                self.record(ids, Status::Pass, d);
            }
        }
        // RFC 8259 §8.1: a writer must not add a byte order mark (a parser may ignore it).
        let mark = "host.no-byte-order-mark";
        match self.repeats.marks() {
            (_, Some(said)) => self.record(mark, Status::Warn, said),
            (0, None) => {}
            (n, None) => {
                let d = format!("none of {n} frame(s) began with a byte order mark");
                self.record(mark, Status::Pass, d);
            }
        }
        match (&self.unfinished, &self.gone) {
            (Some(why), _) => {
                let why = format!("not reached: {why}");
                self.skip_rest(&why);
            }
            (None, Some(gone)) => {
                let why = format!("not reached: {gone}");
                self.skip_rest(&why);
            }
            (None, None) => {}
        }
        let mut report = self.rec.finish(label);
        Run::apply_raised(self.raised, &mut report);
        report.error = self.unfinished.map(|e| capped(e, DETAIL_LIMIT));
        report
    }

    /// `host.responses-answer-requests` (JSON-RPC 2.0 §5: a response answers one request of
    /// the receiver's, once), the mirror of `mcpl check`'s `rpc.responses-answer-requests`
    /// by one reading ([`crate::check::ids::stray_response`]): a response under an id the
    /// checker never sent, or a result under id null, fails. A second answer to a request
    /// already answered is `host.responses-once`'s finding, counted there only; a `-32700`
    /// under id null is the answer owed to the checker's junk line. Judged on what came,
    /// however the run ended (no verdict when no frame came); told by the peer as
    /// diagnostics, a bounded stream ([`Run::view_lost`]).
    fn conclude_stray(&mut self) {
        let id = "host.responses-answer-requests";
        let (status, d) = match self.stray.count() {
            0 if self.repeats.summary().0 == 0 => return,
            0 => (
                Status::Pass,
                "every response the host sent answered a request of the checker's".to_owned(),
            ),
            n => (
                Status::Fail,
                format!(
                    "{n} response(s) answered no request of the checker's (JSON-RPC 2.0 §5: a \
                     response answers one request, once; the peer drops such a response \
                     unread, so a host answering under the wrong id reads as a silent one){}: \
                     {}",
                    self.stray
                        .cut()
                        .map(|k| format!(", the first {k}"))
                        .unwrap_or_default(),
                    self.stray.joined()
                ),
            ),
        };
        let (status, d) = self.view_lost(status, d, "a response under an id never sent");
        self.record(id, status, d);
    }
}
