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
//! Only during the manifest-change phase, within its budget (a step at most per probe), and
//! only when no hold's own loop is running ([`Run::call_held`]); a probe that got neither a
//! result nor an error shows nothing.

use mcpl::capability::{Capability, Grant};
use mcpl::protocol::channels::ChannelsIncoming;
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::super::served;
use super::super::session::{Reply, Run};
use super::Seen;

/// Which order a probe sent while a receipt was held judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// The Request told a narrowing: the capability must already be refused.
    Revoked,
    /// The Request widened the grant: the capability must still be refused.
    Added,
}

/// A probe sent while a receipt was held and what it got: `Some(description)` when a result
/// came (a use), `None` when it was refused with an error; probes that got neither are not
/// kept.
#[derive(Debug)]
pub(super) struct HeldProbe {
    pub(super) order: Order,
    pub(super) capability: Capability,
    pub(super) what: String,
    pub(super) used: Option<String>,
}

impl Run {
    /// Called for a policy Request the checker is about to receipt (the Request applied to
    /// its view of the grant, `before` the grant it replaced; `tells` when it tells the last
    /// fetched narrowing): probes what it withdrew or added, as far as the checker has a
    /// probe for it ([`Run::held_probe_of`]), before the receipt is written.
    pub(in crate::check_host) async fn probe_held_receipt(&mut self, before: Grant, tells: bool) {
        let c = &self.changes;
        if !c.watching || c.probing_held || self.closed || !self.holds.is_empty() {
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
                due.push((Order::Added, cap));
            }
        }
        self.changes.probing_held = true;
        for (order, cap) in due {
            let Some((method, params, what)) = self.held_probe_of(cap) else {
                continue;
            };
            let bound = self.bound_within(deadline);
            if bound.is_zero() || self.closed {
                break;
            }
            let used = match self.call_held(method, params, bound).await {
                Reply::Result(v) => Some(Reply::Result(v).describe()),
                Reply::Error(_) => None,
                _ => continue,
            };
            let probe = HeldProbe {
                order,
                capability: cap,
                what: what.to_owned(),
                used,
            };
            self.changes.held.push(probe);
        }
        self.changes.probing_held = false;
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
                    "{} refused while the receipt of the Request granting {} was held",
                    p.what,
                    p.capability.as_str()
                )),
            }
        }
        (used, refused)
    }
}
