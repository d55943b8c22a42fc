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
//! receipt is written, so the host has sent the Request and cannot have read the receipt,
//! nor that of any policy Request it sent later: from reading the Request until its receipt
//! is written, the later ones are applied when read but answered only then, in the order
//! they came ([`Run::deferred`]; reading of §6.7, r11: an expansion takes effect once its
//! receipt is read, whichever Request it answers, so a later receipt written during a
//! probe's wait would leave its answer unjudgeable). A result is then always early, and a
//! host that waits for a later receipt before answering lets the probe time out.
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
}

impl Run {
    /// Called for a policy Request the checker is about to receipt (the Request applied to
    /// its view of the grant, `before` the grant it replaced; `tells` when it tells the last
    /// fetched narrowing): probes what it withdrew or added, as far as the checker has a
    /// probe for it ([`Run::held_probe_of`]), before the receipt is written. `true` when it
    /// sent one: the later policy Requests read from now until this one's receipt
    /// is written are then kept unanswered ([`Run::deferred`]), so no receipt granting what
    /// a probe asks for goes out while it awaits its answer (§6.7).
    pub(in crate::check_host) async fn probe_held_receipt(
        &mut self,
        before: Grant,
        tells: bool,
    ) -> bool {
        let c = &self.changes;
        if !c.watching || c.probing_held || c.held_silent || self.closed || !self.holds.is_empty() {
            return false;
        }
        let Some(deadline) = c.deadline else {
            return false;
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
        let mut opened = false;
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
            // The window opens with the first probe actually sent (r13 F6).
            if self.deferred.is_none() {
                self.deferred = Some(std::collections::VecDeque::new());
                opened = true;
            }
            let start = Instant::now();
            let reply = self.call_held(method, params, bound).await;
            self.changes.held_waited = self.changes.held_waited.saturating_add(start.elapsed());
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
            };
            self.changes.held.push(probe);
        }
        self.changes.probing_held = false;
        opened
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
    /// takes effect before its Request is sent), a refusal shows the removal too.
    pub(super) fn held_removals(&mut self, seen: &mut Seen) {
        let (mine, rest) = std::mem::take(&mut self.changes.held)
            .into_iter()
            .partition(|p| p.order == Order::Revoked);
        self.changes.held = rest;
        for p in mine {
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
    /// read), and the refusals, described.
    pub(super) fn held_additions(&mut self, incoming: bool) -> (Vec<String>, Vec<String>) {
        let (mine, rest) = std::mem::take(&mut self.changes.held)
            .into_iter()
            .partition(|p| p.order == Order::Added);
        self.changes.held = rest;
        let (mut used, mut refused) = (Vec::new(), Vec::new());
        for p in mine {
            if p.capability == Capability::ChannelsIncoming && !incoming {
                continue;
            }
            match p.used {
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
        (used, refused)
    }
}
