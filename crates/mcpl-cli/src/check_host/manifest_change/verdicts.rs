//! The phase's verdicts that are not a removal probe's: the unparseable manifest (§17.5
//! step 1), the additions (§17.5 step 3), acting before fetching (§17.3) and one update
//! per change (§17.5 step 4).

use mcpl::capability::Capability;
use mcpl::protocol::channels::{ChannelsIncoming, ChannelsList};
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::Method;
use serde_json::json;
use tokio::time::Instant;

use super::super::served;
use super::super::session::{Reply, Run};
use super::{
    refuses_every_message, ADDITIONS, FETCHED_FIRST, IDS, ONE_UPDATE, PHASE_STEPS, UNPARSEABLE,
};
use crate::check::report::Status;

impl Run {
    /// §17.5 step 1: after an unparseable manifest the previous one stands and a single
    /// failure drops no MCPL privilege: no narrowing policy message since the host read it
    /// (no capability withdrawn, no available feature set made unavailable), the connection
    /// kept, and `channels/list`, when it was granted then, answered as it was just before
    /// the announcement ([`Changes::list_before`]: an error before and after is no change,
    /// §14.3 letting a host refuse it; an error after a result fails).
    pub(super) async fn judge_unparseable(&mut self, deadline: Instant) {
        let listed = self
            .changes
            .grant_at_fetch
            .allows(Capability::ChannelsRegister);
        if self.closed {
            let how = self.gone().unwrap_or("the connection ended").to_owned();
            let d = format!(
                "after one unparseable mcpl/manifest answer, {how} (§17.5 step 1: the previous \
                 manifest stands; MCPL may be suspended after repeated failures, never one)"
            );
            self.record(UNPARSEABLE, Status::Fail, d);
            return;
        }
        if let Some(dropped) = self.dropped_since_fetch() {
            let d = format!(
                "after one unparseable mcpl/manifest answer {dropped} (§17.5 step 1: nothing \
                 was learned, the previous manifest stands, and a single failure must not drop \
                 MCPL privileges)"
            );
            self.record(UNPARSEABLE, Status::Fail, d);
            return;
        }
        let bound = self.bound_within(deadline);
        let kept = "after one unparseable mcpl/manifest answer the host kept the connection and \
                    sent no narrowing policy (no capability withdrawn, no available feature set \
                    disabled)";
        if !listed || bound.is_zero() {
            let why = if listed {
                format!("the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out")
            } else {
                "channels.register not granted".to_owned()
            };
            self.record(
                UNPARSEABLE,
                Status::Pass,
                format!("{kept}; channels/list not probed: {why}"),
            );
            return;
        }
        let before = self.changes.list_before;
        let reply = self.call_within(ChannelsList::NAME, json!({}), bound).await;
        // A policy Request the host sent while channels/list was outstanding is applied
        // before its answer (wire order): that narrowing is the defect, and the answer is
        // not one given under the grant of the fetch ("no policy change since").
        if !matches!(reply, Reply::Closed) {
            if let Some(dropped) = self.dropped_since_fetch() {
                let d = format!(
                    "after one unparseable mcpl/manifest answer {dropped} while channels/list \
                     was outstanding, which then got {} (§17.5 step 1: nothing was learned, the \
                     previous manifest stands, and a single failure must not drop MCPL \
                     privileges)",
                    reply.describe()
                );
                self.record(UNPARSEABLE, Status::Fail, d);
                return;
            }
        }
        match reply {
            Reply::Result(_) => self.record(
                UNPARSEABLE,
                Status::Pass,
                format!("{kept}; channels/list, granted before, still answered with a result"),
            ),
            Reply::Closed => {}
            // §14.3: a host not serving the inbound form refuses it with an error; refused
            // before the change as after, it shows no privilege dropped.
            Reply::Error(e) if before == Some(false) => self.record(
                UNPARSEABLE,
                Status::Pass,
                format!(
                    "{kept}; channels/list refused {} after it as before the change (§14.3: \
                     a host may refuse it), so nothing was dropped",
                    e.code
                ),
            ),
            Reply::Error(e) if before.is_none() => {
                let d = format!(
                    "{kept}; channels/list refused {} after it, and before the change it got \
                     no answer to compare, which shows neither a grant kept nor one dropped",
                    e.code
                );
                self.record(UNPARSEABLE, Status::Skip, d);
            }
            Reply::Error(e) => {
                let d = format!(
                    "after one unparseable mcpl/manifest answer, channels/list (channels.register \
                     granted then, no policy change since, answered with a result just before \
                     the change) was refused {} (§17.5 step 1: the previous manifest stands; a \
                     single failure must not drop MCPL privileges)",
                    e.code
                );
                self.record(UNPARSEABLE, Status::Fail, d);
            }
            other => {
                let d = format!(
                    "after one unparseable mcpl/manifest answer the host kept the connection and \
                     sent no narrowing policy; channels/list got {}, which shows neither a grant \
                     kept nor one dropped",
                    other.describe()
                );
                self.record(UNPARSEABLE, Status::Skip, d);
            }
        }
    }

    /// What the host's policy dropped since it read the last change it fetched, said: the
    /// capabilities withdrawn from the grant, else the feature sets made unavailable (§6.4:
    /// a set's status is the grant's and the host's selection's); `None` when nothing was.
    fn dropped_since_fetch(&self) -> Option<String> {
        let lost = self
            .changes
            .grant_at_fetch
            .capabilities()
            .iter()
            .filter(|c| !self.policy.grant().allows(*c))
            .map(|c| c.as_str())
            .collect::<Vec<_>>();
        if !lost.is_empty() {
            return Some(format!(
                "the host narrowed its grant, withdrawing {}",
                lost.join(", ")
            ));
        }
        let now = self.available_sets();
        let disabled = self
            .changes
            .available_at_fetch
            .iter()
            .filter(|s| !now.contains(s))
            .map(String::as_str)
            .collect::<Vec<_>>();
        if disabled.is_empty() {
            return None;
        }
        Some(format!(
            "the host's policy made feature set(s) {} unavailable",
            disabled.join(", ")
        ))
    }

    /// §17.5 step 3 (additions never auto-grant; §6.7 tell → receipt → activate): the
    /// partially invalid manifest adds `modelInfo`, never advertised before, and advertises
    /// `channels.incoming` again after the host revoked it (`again`: `Err` says why that
    /// one shows nothing). `model/info` and `channels/incoming` for check:a are refused
    /// unless a policy Request granting their capability came since, and was answered,
    /// before the host's answer; only a result is a use (silence shows nothing).
    pub(super) async fn judge_additions(&mut self, again: Result<(), &str>, deadline: Instant) {
        let mut probes = vec![(
            ModelInfoRequest::NAME,
            json!({}),
            Capability::ModelInfo,
            "model/info (modelInfo added)",
        )];
        if again.is_ok() {
            probes.push((
                ChannelsIncoming::NAME,
                served::incoming("check:a"),
                Capability::ChannelsIncoming,
                "channels/incoming for check:a (channels.incoming advertised again)",
            ));
        }
        let (mut refused, mut used, mut quiet) = (Vec::new(), Vec::new(), Vec::new());
        for (method, params, needs, what) in probes {
            let bound = self.bound_within(deadline);
            if bound.is_zero() || self.closed {
                break;
            }
            let reply = self.call_within(method, params, bound).await;
            // §6.7: granted only under the grant in force when the answer came and, were a
            // later receipt held then, under the grant before it too (the host could not
            // have read it yet: tell → receipt → activate).
            let held = self.held_when_answered();
            let granted = self.as_answered(|run| run.policy.allows(needs))
                && held.map_or(true, |(before, _)| before.allows(needs));
            match reply {
                Reply::Closed => return,
                Reply::Error(e) => refused.push(format!("{what} refused {}", e.code)),
                // Refused; the form is host.manifest-withdrawn-refused's to report (F1).
                Reply::Result(r) if refuses_every_message(&r) => {
                    refused.push(format!("{what} refused, every message inside a result"))
                }
                Reply::Result(_) if granted => refused.push(format!(
                    "{what} answered, read after a policy Request granting {} and once its \
                     receipt was written (tell → receipt → activate)",
                    needs.as_str()
                )),
                Reply::Result(r) => {
                    let d = format!("{what} got {}", Reply::Result(r).describe());
                    used.push(d);
                }
                other => quiet.push(format!("{what} got {}", other.describe())),
            }
        }
        // §6.7: what a widening Request added was probed while its receipt was held too
        // ([`super::held`]; before these probes or while one awaited its answer): still
        // refused then, whatever comes once the receipt is written.
        let (held_used, held_refused) = self.held_additions(again.is_ok());
        used.splice(0..0, held_used);
        refused.splice(0..0, held_refused);
        if !used.is_empty() {
            let d = format!(
                "{}, with no policy Request granting it since the fetched manifest advertised \
                 it, or before the host could have read that Request's receipt (§17.5 step 3: \
                 additions never auto-grant; §6.7: tell → receipt → activate)",
                used.join("; ")
            );
            self.record(ADDITIONS, Status::Fail, d);
        } else if !refused.is_empty() {
            let mut d = format!("{} (not auto-granted)", refused.join("; "));
            if let Err(why) = again {
                d.push_str(&format!("; channels/incoming not probed: {why}"));
            }
            self.record(ADDITIONS, Status::Pass, d);
        } else if !quiet.is_empty() {
            let d = format!(
                "{}: neither a use nor a refusal, so nothing is shown",
                quiet.join("; ")
            );
            self.record(ADDITIONS, Status::Skip, d);
        } else {
            let why =
                format!("the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out");
            self.record(ADDITIONS, Status::Skip, why);
        }
    }

    /// The phase's last verdicts: acting before fetching, one update per change, and every
    /// check not judged skipped for `why`.
    pub(super) fn conclude_changes(&mut self, counts: &[u32], why: Option<String>) {
        let fetched = self.changes.fetches > 0;
        if !self.changes.unfetched.is_empty() {
            let d = format!(
                "the host changed its policy after a mcpl/manifestChanged and before fetching \
                 mcpl/manifest: {} (§17.3: a host that acts on the announcement MUST fetch \
                 before changing anything; judged on its policy messages, all a server sees)",
                self.changes.unfetched.join("; ")
            );
            self.record(FETCHED_FIRST, Status::Fail, d);
        } else if fetched {
            let d = format!(
                "{} announcement(s) fetched; no policy change came between an announcement \
                 and its fetch (judged on policy messages, all a server sees)",
                self.changes.fetches
            );
            self.record(FETCHED_FIRST, Status::Pass, d);
        }
        if let Some(most) = counts.iter().copied().max() {
            if most > 1 {
                let d = format!(
                    "{most} policy messages followed one manifest change (§17.5 step 4: one \
                     receipt per change, not one per item; the receipt is host-internal, \
                     §17.6, so this judges its wire consequence, a warning)"
                );
                self.record(ONE_UPDATE, Status::Warn, d);
            } else {
                let d = format!(
                    "at most one policy message per manifest change ({} change(s) fetched; the \
                     receipt itself is host-internal, §17.6, so only its wire consequence is \
                     judged)",
                    counts.len()
                );
                self.record(ONE_UPDATE, Status::Pass, d);
            }
        }
        let why = why.unwrap_or_else(|| "not judged".into());
        self.record_unset(&IDS, Status::Skip, &why);
    }
}
