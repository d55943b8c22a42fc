//! The removal probes (§17.5 step 3, §6.7): a use the fetched manifest withdrew, sent
//! once the host read it and judged by the order the host told its change in, and the
//! policy Request a narrowing of the grant is told by.

use serde_json::Value;
use tokio::time::Instant;

use super::super::session::{secs, Reply, Run};
use super::{refuses_every_message, Changes, Seen, NARROWING_TOLD, PHASE_STEPS};
use crate::check::report::Status;

impl Run {
    /// Sends `probe` (a method, its params and the params to send it again with), which
    /// the manifest the host read no longer allows, and notes `what` in `seen`: shown when
    /// judged, a defect when not refused with an error.
    ///
    /// Reading (§6.7, §17.5 step 3; finding F1): the host revokes host-first, then tells the
    /// server by Request, but nothing bounds when it applies a fetched manifest: a host may
    /// validate and diff it off its reader. What a server can hold it to is the order: once
    /// the host sent a policy message after the fetch, the removal is in force. So a result
    /// that came before any such message is not judged yet: the host is given until a step
    /// after the fetch (within the phase's `deadline`) to tell the change, and the probe is
    /// sent again after that message (the push under a fresh `eventId`, §9.4) and judged.
    /// A host that told nothing within the step is judged by the probe sent then: §6.7 wants
    /// a Request for a narrowed grant, and a removal not in force a step after the fetch is
    /// reduced late, the over-permission window §6.7 forbids (fail closed: the spec names no
    /// time, and a step is what every other wait of the checker's is given).
    ///
    /// Whether the host had told is read where the result stands on the wire
    /// ([`Run::told_when_answered`]; r3 finding 1): a policy message between the probe and
    /// its result puts the removal in force before that result, which is then judged as it
    /// is (§6.7: reduction first, then the Request; §17.5: judged at response receipt). A
    /// result held when the phase's budget leaves no time to send the probe again is judged
    /// as it is too (r3 finding 3): it was accepted after the host read the removal, and
    /// the excuse of a later tell cannot be tried (fail closed).
    pub(super) async fn refused_after(
        &mut self,
        probe: (&str, Value, Value),
        what: &str,
        deadline: Instant,
        seen: &mut Seen,
    ) {
        let (method, params, again) = probe;
        let bound = self.bound_within(deadline);
        if bound.is_zero() {
            seen.unsent = true;
            return;
        }
        // A result refusing every message inside it refused the use: counted as a refusal
        // here, its form reported by host.manifest-withdrawn-refused (finding F1).
        let used = |r: &Reply| matches!(r, Reply::Result(v) if !refuses_every_message(v));
        let mut reply = self.call_within(method, params, bound).await;
        let mut retold = "";
        if used(&reply) && !self.told_when_answered() {
            let told = self.await_tell(deadline).await;
            let bound = self.bound_within(deadline);
            if self.closed {
                return;
            }
            if bound.is_zero() {
                seen.shown.push(what.to_owned());
                seen.defects.push(format!(
                    "{what} got {} after the host read the manifest removing it, before any \
                     policy message of the host's followed the fetch, and the phase's budget \
                     ({PHASE_STEPS} × --timeout) left no time to send it again: judged by that \
                     answer",
                    reply.describe()
                ));
                return;
            }
            retold = if told {
                " (sent again after the host's policy message following the fetch)"
            } else {
                " (sent again a step after the fetch, no policy message having followed it)"
            };
            reply = self.call_within(method, again, bound).await;
            if matches!(reply, Reply::Error(_) | Reply::Result(_)) && !used(&reply) {
                seen.late.push((what.to_owned(), told));
            }
        }
        let Seen {
            shown,
            defects,
            in_result,
            ..
        } = seen;
        match reply {
            Reply::Error(_) => shown.push(what.to_owned()),
            Reply::Result(r) if refuses_every_message(&r) => {
                shown.push(what.to_owned());
                in_result.push(what.to_owned());
            }
            Reply::Result(r) => {
                shown.push(what.to_owned());
                let reply = Reply::Result(r);
                defects.push(format!("{what} got {}{retold}", reply.describe()));
            }
            // Silence, or an answer that could not be read, is no acceptance: it shows
            // nothing of the removal (the silence is host.answers-every-request's kind).
            Reply::Closed => {}
            other => {
                let d = format!("{what} got {}", other.describe());
                self.changes.quiet.push(d);
            }
        }
    }

    /// Awaits the host's first policy message since the last change was fetched (none counted
    /// yet), handling what comes meanwhile, until a step after that answer or `deadline`;
    /// whether it came.
    async fn await_tell(&mut self, deadline: Instant) -> bool {
        self.await_policy(deadline, |c| c.since_fetch).await
    }

    /// [`Run::await_tell`] for what `count` reads off the phase's state.
    async fn await_policy(&mut self, deadline: Instant, count: fn(&Changes) -> u32) -> bool {
        let from = self.changes.fetched_at.unwrap_or_else(Instant::now);
        let until = (from + self.bounds.step).min(deadline);
        while count(&self.changes) == 0 {
            match self.next_until(until).await {
                Some(m) => self.handle(m).await,
                None => break,
            }
        }
        count(&self.changes) > 0
    }

    /// §6.7 (a Request for any change to the effective grant, reductions included) and
    /// §17.5 step 3 (revoked host-first, then the Request): when the fetched narrowing took
    /// a capability out of the grant ([`Changes::lost_at_fetch`]), a `featureSets/update`
    /// Request follows, awaited until a step after the fetch (within `deadline`). None by
    /// then fails (fail closed: the spec names no time; a step is every wait's bound);
    /// the budget ending first, before a step passed, skips. When the grant did not change
    /// (only a feature set went: a set carries no authority, §6.4), no Request is required.
    pub(super) async fn judge_narrowing_told(&mut self, deadline: Instant) {
        let lost = self.changes.lost_at_fetch.join(", ");
        if lost.is_empty() {
            let d = "the fetched narrowing took no capability out of the grant (only a feature \
                     set went, which carries no authority, §6.4): no policy Request is required \
                     (§6.7: one for a change to the effective grant)";
            self.record(NARROWING_TOLD, Status::Skip, d);
            return;
        }
        if self.await_policy(deadline, |c| c.told).await {
            let d = format!(
                "the fetched narrowing withdrew {lost}, and the host told it by a \
                 featureSets/update Request (§6.7: reduced first, then the Request)"
            );
            self.record(NARROWING_TOLD, Status::Pass, d);
            return;
        }
        if self.closed {
            return;
        }
        let waited = self
            .changes
            .fetched_at
            .map(|f| f.elapsed())
            .unwrap_or_default();
        let how = if self.changes.requested > 0 {
            "only a featureSets/update Request still granting it followed it (§5.4: the host's \
             grant still names what the manifest withdrew; §6.7: the Request states the \
             narrowed grant)"
        } else if self.changes.since_fetch > 0 {
            "only a featureSets/update Notification followed it (§6.7: a grant change goes by \
             Request; host.policy-is-request)"
        } else {
            "no policy message followed it"
        };
        if waited < self.bounds.step {
            let d = format!(
                "the fetched narrowing withdrew {lost}; {how} before the manifest-change \
                 probes' budget ({PHASE_STEPS} × --timeout) ran out, {} after the fetch",
                secs(waited)
            );
            self.record(NARROWING_TOLD, Status::Skip, d);
            return;
        }
        let d = format!(
            "the fetched narrowing withdrew {lost} from the grant, and {how} within {} of the \
             fetch (§6.7: a Request for any change to the effective grant, reductions \
             included; §17.5 step 3: revoked host-first, then the Request)",
            secs(waited)
        );
        self.record(NARROWING_TOLD, Status::Fail, d);
    }

    /// Records `id` from what the probes showed (`seen`); `why` says why they must be
    /// refused, `none` why nothing was probed.
    pub(super) fn judge_refusals(&mut self, id: &str, seen: &Seen, why: &str, none: &str) {
        let Seen {
            shown,
            defects,
            late,
            unsent,
            in_result,
        } = seen;
        if !defects.is_empty() {
            let d = format!("{}, though {why}", defects.join("; "));
            self.record(id, Status::Fail, d);
        } else if shown.is_empty() && !self.changes.quiet.is_empty() {
            let d = format!(
                "{}: which shows nothing of the removal",
                self.changes.quiet.join("; ")
            );
            self.record(id, Status::Skip, d);
        } else if shown.is_empty() && *unsent {
            // Finding F7: a probe was due, the budget left no time to send it.
            let d = format!(
                "the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out before \
                 the probes after the change could be sent"
            );
            self.record(id, Status::Skip, d);
        } else if shown.is_empty() {
            self.record(id, Status::Skip, none);
        } else {
            let mut d = format!("{} refused with an error once {why}", shown.join(" and "));
            if !in_result.is_empty() {
                d.push_str(&format!(
                    " ({} refused every message inside a result instead: counted as refused \
                     here, its form judged under host.manifest-withdrawn-refused, §6.6)",
                    in_result.join(" and ")
                ));
            }
            let (told, silent): (Vec<_>, Vec<_>) = late.iter().partition(|(_, t)| *t);
            let names = |l: Vec<&(String, bool)>| {
                l.into_iter()
                    .map(|(w, _)| w.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            };
            if !told.is_empty() {
                d.push_str(&format!(
                    " ({} got a result before the host told its policy change, and was refused \
                     once it had: the host applies a fetched manifest after reading it, §6.7's \
                     order kept)",
                    names(told)
                ));
            }
            if !silent.is_empty() {
                d.push_str(&format!(
                    " ({} got a result after the fetch, and was refused when sent again a step \
                     after it, no policy message having followed the fetch)",
                    names(silent)
                ));
            }
            self.record(id, Status::Pass, d);
        }
        self.changes.quiet.clear();
    }
}
