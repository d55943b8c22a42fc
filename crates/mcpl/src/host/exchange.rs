//! The application's policy calls (§5.3, §6.7), carried out by the state machine one at a
//! time, in the order they were made.

use super::*;
use crate::protocol::feature_sets::FeatureSetsUpdate;

impl HostSession {
    /// Changes host policy (§6.7 orderings): a narrowing applies host-side at once, then the
    /// Request goes out; a widening activates only after an accepting receipt. A call made
    /// while another policy exchange is in flight waits for it to end. `patterns` are held to
    /// the rule of [`HostConfig::policy`]: one that is malformed or names no path is
    /// [`HostError::Policy`], and nothing is sent. Dropping the future does not cancel a
    /// Request already sent: the exchange's outcome is the session's (a narrowing already
    /// applied, a widening on its receipt, §6.7), so it runs to its end.
    pub async fn set_policy(&self, patterns: Vec<String>) -> Result<PolicyChange, HostError> {
        let timeout = self.inner.shared.config.policy_timeout;
        self.call_within(FeatureSetsUpdate::NAME, Some(timeout), |r| {
            Cmd::SetPolicy(patterns, r)
        })
        .await?
    }

    /// Disables feature sets `sets` with a `featureSets/update` **Notification** carrying only
    /// `disabled` — the non-conforming carrier §6.7 still makes servers respect as a
    /// reduction, which a tester (such as `mcpl inspect`) sends to see whether they do.
    /// A reduction applies first (§6.7): the host stops accepting the sets' uses before the
    /// Notification is written, and every later policy Request repeats them in `disabled`.
    /// The grant is unchanged and nothing widens. Errors: MCP-only, a name list past
    /// [`policy::MAX_POLICY_LIST_ENTRIES`] in total, or a name that is not a feature-set
    /// name or pattern.
    pub async fn disable_by_notification(&self, sets: &[String]) -> Result<(), HostError> {
        let sets = sets.to_vec();
        self.call_bounded(FeatureSetsUpdate::NAME, |r| Cmd::Disable(sets, r))
            .await?
    }
}
