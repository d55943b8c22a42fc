//! The withdrawn capability used once the narrowing is in force (§5.4, §6.7, §17.5 step 3):
//! after the host's `featureSets/update` Request told the fetched narrowing (and the checker
//! answered it), the checker uses what that narrowing took out of the grant once more and
//! the host must refuse it as a capability never advertised.
//!
//! The probe is `channels/incoming` for the channel the checker registered: the valid change
//! ([`super::super::served::manifest_narrowed`]) withdraws `channels.incoming`, the one
//! capability the phase's manifests take out of the grant (the feature sets they remove
//! carry no authority, §6.4, and are probed by `host.manifest-removals-revoked`).
//!
//! Readings:
//! - "in force" is read as the checker's receipt to the Request telling the narrowing
//!   having been written: §6.7 revokes host-first, so by then the host has no excuse left,
//!   whatever it answered `host.manifest-removals-revoked`'s earlier probe with;
//! - the refusal's code is §5.4/§14.6's for a denied capability, `-32002` (§6.6: hosts
//!   "SHOULD" use it): another error refuses (the grant held) with the wrong code, a
//!   warning; `-32017` (channel not permitted, which App. A and §14.6 document for lacking
//!   the capability to receive from a channel) warns too, named as documented; a result
//!   honours a withdrawn capability, a failure, but for one refusing every message inside
//!   the result (`accepted: false`): the refusal held, its form is the defect (§6.6: a
//!   rejection is an error object), a failure said as that;
//! - when the probe after the fetch got no answer, this one is not sent: a silent host
//!   would spend a step of the phase's budget here, and the third change's checks lose it.

use mcpl::capability::Capability;
use mcpl::jsonrpc::codes;
use mcpl::protocol::channels::ChannelsIncoming;
use mcpl::protocol::Method;
use tokio::time::Instant;

use super::super::served;
use super::super::session::{Reply, Run};
use super::{refuses_every_message, PHASE_STEPS, WITHDRAWN_REFUSED};
use crate::check::report::Status;

/// The withdrawn capability the probe uses.
const WITHDRAWN: Capability = Capability::ChannelsIncoming;

/// The message id of the probe's one message: none other of the checker's uses it, so a
/// host deduplicating by message id has no earlier delivery to point at.
const MESSAGE_ID: &str = "withdrawn-1";

impl Run {
    /// Judges `host.manifest-withdrawn-refused` once the valid change's narrowing was told
    /// (called after [`Run::judge_narrowing_told`]); `held`, whether the checker held a
    /// registered channel with `channels.incoming` granted before the change, and
    /// `answered`, whether the `channels/incoming` probe after the fetch got an answer.
    pub(super) async fn judge_withdrawn_refused(
        &mut self,
        (held, answered): (bool, bool),
        deadline: Instant,
    ) {
        let cap = WITHDRAWN.as_str();
        let lost = self.changes.lost_at_fetch.iter().any(|c| c == cap);
        let why = if !lost {
            Some(format!(
                "the fetched narrowing took no {cap} out of the grant"
            ))
        } else if !held {
            Some(format!(
                "{cap} was not granted with a registered channel before the change: a \
                 channels/incoming refused now shows nothing of the withdrawal"
            ))
        } else if !answered {
            Some(
                "the channels/incoming probe after the fetch got no answer: another would \
                 spend the phase's budget on a host that does not answer it"
                    .to_owned(),
            )
        } else if self.changes.told == 0 {
            Some(format!(
                "no featureSets/update Request leaving out {cap} told the narrowing \
                 (host.manifest-narrowing-requested): the narrowed grant was never put in \
                 force by one"
            ))
        } else if self.policy.allows(WITHDRAWN) {
            Some(format!("a later policy Request granted {cap} again"))
        } else {
            None
        };
        if let Some(why) = why {
            self.record(WITHDRAWN_REFUSED, Status::Skip, why);
            return;
        }
        let bound = self.bound_within(deadline);
        if bound.is_zero() {
            let d = format!(
                "the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out before \
                 {cap}, withdrawn, could be used again"
            );
            self.record(WITHDRAWN_REFUSED, Status::Skip, d);
            return;
        }
        let what = "channels/incoming for check:a";
        let params = served::incoming_message("check:a", MESSAGE_ID);
        let reply = self
            .call_within(ChannelsIncoming::NAME, params, bound)
            .await;
        let told = format!(
            "the host's featureSets/update Request telling the fetched narrowing, which \
             withdrew {cap}, was answered"
        );
        match reply {
            Reply::Closed => {}
            Reply::Error(e) if e.code == codes::CAPABILITY_DENIED => {
                let d = format!(
                    "{what} refused -32002 once {told} (§5.4: a denied capability behaves as \
                     if never advertised)"
                );
                self.record(WITHDRAWN_REFUSED, Status::Pass, d);
            }
            Reply::Error(e) if e.code == codes::CHANNEL_NOT_PERMITTED => {
                let d = format!(
                    "{what} refused -32017 once {told}: refused with the code App. A and \
                     §14.6 document for lacking the capability to receive from a channel; \
                     §5.4's code for a denied capability is -32002 (§6.6), a warning"
                );
                self.record(WITHDRAWN_REFUSED, Status::Warn, d);
            }
            Reply::Error(e) => {
                let d = format!(
                    "{what} refused {} once {told}: refused, but not with -32002, the code for \
                     a denied capability (§5.4, §6.6, §14.6)",
                    e.code
                );
                self.record(WITHDRAWN_REFUSED, Status::Warn, d);
            }
            Reply::Result(r) if refuses_every_message(&r) => {
                let d = format!(
                    "{what} got {} once {told}: every message refused inside a result, so \
                     the withdrawal held, but the refusal's form is wrong (§6.6: a \
                     rejection is an error object; §5.4: -32002 for a denied capability)",
                    Reply::Result(r).describe()
                );
                self.record(WITHDRAWN_REFUSED, Status::Fail, d);
            }
            Reply::Result(r) => {
                let d = format!(
                    "{what} got {} once {told}: the host still honours {cap}, withdrawn from \
                     the grant (§5.4: a host MUST reject an inbound method requiring a denied \
                     capability; §6.7, §17.5 step 3: the narrowing revoked host-first)",
                    Reply::Result(r).describe()
                );
                self.record(WITHDRAWN_REFUSED, Status::Fail, d);
            }
            other => {
                let d = format!(
                    "{what} got {} once {told}: neither a use nor a refusal, so nothing is \
                     shown",
                    other.describe()
                );
                self.record(WITHDRAWN_REFUSED, Status::Skip, d);
            }
        }
    }
}
