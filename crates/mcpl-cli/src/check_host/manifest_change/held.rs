//! The probes sent while a policy Request's receipt is held (§6.7): the order a change
//! takes effect in, against its Request and its receipt, as a server sees it on the wire.
//!
//! - A **reduction** takes effect before its Request is sent: while the Request telling a
//!   fetched narrowing ([`Run::tells_lost_at_fetch`]) is unanswered, the capability it
//!   withdrew is already refused (`host.manifest-removals-revoked`).
//! - An **expansion** takes effect only once the receipt is read: while a widening Request's
//!   receipt is unwritten, what it adds is still refused (`host.manifest-additions-not-granted`).
//!
//! Judged by wire order: each probe is written after the Request was read and before its
//! receipt is written, so the host has sent the Request and cannot have read the receipt.
//! Only during the manifest-change phase, within its budget, and only when no hold's own
//! loop is running ([`Run::call_held`]); a probe that got neither a result nor an error
//! shows nothing (silence is never acceptance).
//!
//! Reading (finding F3): §6.7 does not require a host to answer anything while its Request
//! awaits the receipt, so a conforming host may leave every held probe unanswered. So the
//! probes cost the phase little: each is bounded as a hold is ([`Run::hold_each`]: half a
//! step, at most 1 s), not by a step; once one got no answer, none is sent again in the
//! run; the held `channels/incoming` of a capability advertised again is sent only when the
//! probe after the narrowed fetch was answered; and a request the checker was awaiting
//! when the Request came is given the time spent back ([`Run::held_waited`]).
//!
//! Reading (§6.7, a later receipt): an expansion takes effect once the host reads its
//! receipt, whichever Request that receipt answers, and a host may send another policy
//! Request while the checker holds the first one's receipt. A receipt the checker writes
//! during a probe's wait, of any later Request, whose grant allows the probed capability
//! (as the checker applied it, cut to its advertisement) may have been read by the host
//! before it answered: from then on the capability may be in force, so a result read after
//! that receipt was written shows no order, either way. It is not judged: not as an early
//! activation (`host.manifest-additions-not-granted`, said in its verdict as not judged),
//! nor as a removal not in force (`host.manifest-removals-revoked`). Read by wire order
//! ([`Run::receipts_written`]): an answer read before that receipt was written, a hold's
//! loop's included (kept with the run as it stood then, [`Run::call_held`]), is judged as
//! before, as is one after a receipt not granting the capability, or read once a later
//! Request left it out again, that receipt written before or after (fail closed: a
//! reduction is in force before its Request is sent); a refusal is a refusal whenever it
//! came.

use mcpl::capability::{Capability, Grant};
use mcpl::protocol::channels::ChannelsIncoming;
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::super::served;
use super::super::session::{Reply, Run};
use super::{refuses_every_message, Seen};

/// Which order a probe sent while a receipt was held judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// The Request told a narrowing: the capability must already be refused.
    Revoked,
    /// The Request widened the grant: the capability must still be refused.
    Added,
}

/// A probe sent while a receipt was held and what it got: `Some(description)` when a result
/// came (a use), `None` when it was refused (with an error, or by a result refusing every
/// message inside it, [`refuses_every_message`]); probes that got neither are not kept.
#[derive(Debug)]
pub(super) struct HeldProbe {
    pub(super) order: Order,
    pub(super) capability: Capability,
    pub(super) what: String,
    pub(super) used: Option<String>,
    /// Refused by a result refusing every message inside it ([`refuses_every_message`]).
    pub(super) in_result: bool,
    /// Its answer was read once a receipt granting its capability had been written during
    /// its wait ([`Run::receipt_written`]): a result then shows no order (§6.7).
    pub(super) regranted: bool,
}

impl Run {
    /// Called for a policy Request the checker is about to receipt (the Request applied to
    /// its view of the grant, `before` the grant it replaced; `tells` when it tells the last
    /// fetched narrowing): probes what it withdrew or added, as far as the checker has a
    /// probe for it ([`Run::held_probe_of`]), before the receipt is written.
    pub(in crate::check_host) async fn probe_held_receipt(&mut self, before: Grant, tells: bool) {
        let c = &self.changes;
        if !c.watching || c.probing_held || c.held_silent || self.closed || !self.holds.is_empty() {
            return;
        }
        let Some(deadline) = c.deadline else {
            return;
        };
        let grant = *self.policy.grant();
        let mut due = Vec::new();
        for cap in [Capability::ChannelsIncoming, Capability::ModelInfo] {
            let lost = c.lost_at_fetch.iter().any(|l| l == cap.as_str());
            if tells && lost && !grant.allows(cap) {
                due.push((Order::Revoked, cap));
            } else if grant.allows(cap) && !before.allows(cap) {
                // channels.incoming advertised again shows an addition only once the probe
                // after the narrowed fetch was answered (the verdict's `again`).
                if cap != Capability::ChannelsIncoming || c.incoming_answered {
                    due.push((Order::Added, cap));
                }
            }
        }
        self.changes.probing_held = true;
        for (order, cap) in due {
            let Some((method, params, what)) = self.held_probe_of(cap) else {
                continue;
            };
            // The hold's own bound, not a step (finding F3).
            let bound = self.hold_each.min(self.bound_within(deadline));
            if bound.is_zero() || self.closed {
                break;
            }
            let start = Instant::now();
            self.changes.regrant = Some((cap, None));
            let (reply, read_at) = self.call_held(method, params, bound).await;
            self.changes.held_waited = self.changes.held_waited.saturating_add(start.elapsed());
            // Read once a receipt granting `cap` was written during the wait (§6.7).
            let regranted =
                matches!(self.changes.regrant.take(), Some((_, Some(at))) if read_at >= at);
            let in_result = matches!(&reply, Reply::Result(v) if refuses_every_message(v));
            let used = match reply {
                // Refused, in a form host.manifest-withdrawn-refused reports (finding F1).
                Reply::Result(_) if in_result => None,
                Reply::Result(v) => Some(Reply::Result(v).describe()),
                Reply::Error(_) => None,
                Reply::Closed => break,
                // No answer: the host may answer nothing until its receipt, so no more are
                // sent in the run.
                _ => {
                    self.changes.held_silent = true;
                    break;
                }
            };
            let probe = HeldProbe {
                order,
                capability: cap,
                what: what.to_owned(),
                used,
                in_result,
                regranted,
            };
            self.changes.held.push(probe);
        }
        self.changes.probing_held = false;
    }

    /// The receipts of later policy Requests written so far, in all: an answer read when this
    /// was `n` came after the `n`th such receipt was written, and may follow the host's
    /// reading of it (§6.7).
    pub(in crate::check_host) fn receipts_written(&self) -> u64 {
        self.changes.receipts
    }

    /// Notes the receipt of a later policy Request written, its grant `granted` (as the
    /// checker applied it): when it allows the capability a probe sent while a receipt is
    /// held awaits, that probe's answer read from now on is not judged by the order
    /// ([`HeldProbe::regranted`], §6.7: an expansion takes effect once its receipt is read,
    /// whichever Request it answers), unless a Request read since left it out
    /// ([`Run::policy_request_applied`]: the checker's grant now does not allow it).
    pub(in crate::check_host) fn receipt_written(&mut self, granted: &Grant) {
        let now = *self.policy.grant();
        let c = &mut self.changes;
        c.receipts = c.receipts.saturating_add(1);
        let n = c.receipts;
        if let Some((cap, at @ None)) = &mut c.regrant {
            if granted.allows(*cap) && now.allows(*cap) {
                *at = Some(n);
            }
        }
    }

    /// Notes a later policy Request the checker applied (§6.7: each replaces the grant):
    /// one leaving out the capability a probe sent while a receipt is held awaits undoes a
    /// receipt granting it written before (fail closed: a reduction is in force before its
    /// Request is sent), so an answer read from then on is judged by the order again.
    pub(in crate::check_host) fn policy_request_applied(&mut self) {
        let now = *self.policy.grant();
        if let Some((cap, at)) = &mut self.changes.regrant {
            if !now.allows(*cap) {
                *at = None;
            }
        }
    }

    /// The time spent awaiting the probes sent while a receipt was held, in all (the
    /// phase's; zero outside it): a request awaited across one such wait is judged against
    /// its deadline extended by what the wait took ([`Run::call_within`], finding F3).
    pub(in crate::check_host) fn held_waited(&self) -> std::time::Duration {
        self.changes.held_waited
    }

    /// The probe for `cap` while a receipt is held: `channels/incoming` for the checker's
    /// registered channel (only when it holds one) or `model/info`.
    fn held_probe_of(&self, cap: Capability) -> Option<(&'static str, Value, &'static str)> {
        match cap {
            Capability::ChannelsIncoming if self.channel_held => Some((
                ChannelsIncoming::NAME,
                served::incoming_message("check:a", "m-held"),
                "channels/incoming for check:a",
            )),
            Capability::ModelInfo => Some((ModelInfoRequest::NAME, json!({}), "model/info")),
            _ => None,
        }
    }

    /// Adds what the probes sent while a narrowing Request's receipt was held showed to
    /// `seen` (`host.manifest-removals-revoked`): a result is a defect (§6.7: a reduction
    /// takes effect before its Request is sent), a refusal shows the removal too. A result
    /// read once a later receipt granting the capability again was written is not judged
    /// ([`HeldProbe::regranted`]): the host may have read that receipt first (§6.7).
    pub(super) fn held_removals(&mut self, seen: &mut Seen) {
        let (mine, rest) = std::mem::take(&mut self.changes.held)
            .into_iter()
            .partition(|p| p.order == Order::Revoked);
        self.changes.held = rest;
        for p in mine {
            if p.regranted && p.used.is_some() {
                continue;
            }
            let what = format!("{} while the narrowing Request's receipt was held", p.what);
            if let Some(d) = p.used {
                seen.defects.push(format!(
                    "{what} got {d} (the host sent its featureSets/update Request telling the \
                     narrowing before it revoked {}: §6.7, a reduction takes effect before its \
                     Request is sent)",
                    p.capability.as_str()
                ));
            }
            if p.in_result {
                seen.in_result.push(what.clone());
            }
            seen.shown.push(what);
        }
    }

    /// The probes sent while a widening Request's receipt was held, for
    /// `host.manifest-additions-not-granted` (`incoming`: whether channels/incoming shows an
    /// addition at all): the uses (§6.7: an expansion takes effect only once the receipt is
    /// read), the refusals, and the results not judged, read once a later receipt granting
    /// the capability was written ([`HeldProbe::regranted`]: the host may have read it
    /// first), described.
    pub(super) fn held_additions(&mut self, incoming: bool) -> HeldAdditions {
        let (mine, rest) = std::mem::take(&mut self.changes.held)
            .into_iter()
            .partition(|p| p.order == Order::Added);
        self.changes.held = rest;
        let mut seen = HeldAdditions::default();
        let HeldAdditions {
            used,
            refused,
            unjudged,
        } = &mut seen;
        for p in mine {
            if p.capability == Capability::ChannelsIncoming && !incoming {
                continue;
            }
            match p.used {
                Some(d) if p.regranted => unjudged.push(format!(
                    "{} got {d} while the receipt of the Request granting {} was held, read \
                     once the receipt of a later Request granting {} was written: not judged \
                     (§6.7: the host may have read that receipt first)",
                    p.what,
                    p.capability.as_str(),
                    p.capability.as_str()
                )),
                Some(d) => used.push(format!(
                    "{} got {d} while the receipt of the Request granting {} was held (the \
                     host activated it before it could have read the receipt)",
                    p.what,
                    p.capability.as_str()
                )),
                None => refused.push(format!(
                    "{} refused{} while the receipt of the Request granting {} was held",
                    p.what,
                    if p.in_result {
                        ", every message inside a result,"
                    } else {
                        ""
                    },
                    p.capability.as_str()
                )),
            }
        }
        seen
    }
}

/// What the probes sent while a widening Request's receipt was held showed
/// ([`Run::held_additions`]), each described.
#[derive(Debug, Default)]
pub(super) struct HeldAdditions {
    /// Results read before any receipt granting the capability was written: uses.
    pub(super) used: Vec<String>,
    /// Refusals.
    pub(super) refused: Vec<String>,
    /// Results read once a later receipt granting it was written: not judged.
    pub(super) unjudged: Vec<String>,
}
