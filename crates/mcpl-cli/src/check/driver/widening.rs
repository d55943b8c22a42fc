//! §6.7 probe of a narrowed session: once its narrowed policy is in force, the checker sends
//! a `featureSets/update` **Notification** restating the full grant (every path the first
//! session granted, no set disabled). A host never widens that way (§6.7: any change to the
//! grant goes by Request), and a server handed one discards its `effectiveCapabilities`,
//! `enabled` and any widening. So the narrowed grant stays in force, and whatever the server
//! sends after it is judged by the narrowed session's checks as before:
//! `grant.narrowed-respected` (§5.4: nothing the grant withholds) and
//! `featuresets.narrowed-respected` (§6.4: no set it leaves unavailable), whose text covers
//! it (the grant in force is the narrowed one). Their detail says how many findings came
//! after the Notification.
//!
//! The strict host's own state does not change with it: the Notification widens nothing
//! host-side (§6.7: an expansion activates only on an accepting receipt to a Request).

use mcpl::policy::HostGrant;
use mcpl::protocol::feature_sets::FeatureSetsUpdate;
use mcpl::protocol::Method;

use super::*;

/// The findings of the narrowed checks counted when the widening Notification was sent:
/// `None` until then.
#[derive(Debug, Default)]
pub(super) struct Widening {
    sent: Option<[u64; 2]>,
}

/// How many findings `l` holds, kept or only counted.
fn count(l: &Listed) -> u64 {
    (l.kept.len() as u64).saturating_add(l.more)
}

impl Session {
    /// Sends the widening Notification: `wide` (the full grant as this session's server
    /// advertises it), with `--enable`'s selection and no set disabled. Only once the
    /// narrowed policy is in force (an accepted receipt), on an open connection.
    pub(super) fn widening_notification(&mut self, wide: &HostGrant) {
        if !self.ready || self.closed.is_some() {
            return;
        }
        let params = self.policy_params(wide, &[]);
        self.widening.sent = Some([
            count(&self.narrowed_outside),
            count(&self.narrowed_unavailable),
        ]);
        let _ = self.notify(FeatureSetsUpdate::NAME, params);
    }

    /// What the detail of narrowed check `id` adds about the widening Notification: how many
    /// of its `failing` findings came after it, or, with none, that it was ignored; empty
    /// when it was not sent.
    pub(super) fn after_widening(&self, id: &str) -> String {
        let Some([outside, unavailable]) = self.widening.sent else {
            return String::new();
        };
        let (before, now) = if id == "grant.narrowed-respected" {
            (outside, count(&self.narrowed_outside))
        } else {
            (unavailable, count(&self.narrowed_unavailable))
        };
        let after = now.saturating_sub(before);
        if after > 0 {
            format!(
                " ({after} of them after a featureSets/update Notification restating the full \
                 grant, whose widening a server discards: §6.7)"
            )
        } else {
            " (a featureSets/update Notification restating the full grant was sent once \
             ready; nothing after it used its widening, which a server discards: §6.7)"
                .to_owned()
        }
    }
}
