//! The policy exchange (§5.3, §6.7): the initial Request, later changes, receipts and
//! fallbacks.

use super::*;
use crate::protocol::feature_sets::FeatureSetsUpdate;

impl HostSession {
    /// The initial exchange (§5.3): Request even with an empty grant; decide on the receipt.
    /// `Ok(true)` when the grant applied is narrower than the one the Request told and the
    /// server cannot know it: a manifest revocation landed meanwhile, or the host fell back
    /// to MCP-only on its own (no answer in time, an error, an unusable receipt). The caller
    /// then tells the reduction once the policy lock is free (§6.7: any change to the grant
    /// goes by Request). A fallback the server chose itself is not told again: a `-32601`
    /// server has no MCPL to configure, and a refusal named `mcp-only` as its consequence.
    pub(super) async fn initial_policy(&self, hg: HostGrant) -> Result<bool, HostError> {
        let _g = self.inner.policy_lock.lock().await;
        let cfg = &self.inner.config;
        let params = self.inner.state().initial_params(&hg);
        self.exchange(
            FeatureSetsUpdate::NAME,
            params,
            cfg.policy_timeout,
            move |s, answer| s.apply_initial(hg, answer),
        )
        .await?
    }

    /// Decides the initial exchange on its answer, where it is read (§5.3): only what is
    /// read after an accepting receipt is judged as ready.
    fn apply_initial(
        &self,
        hg: HostGrant,
        answer: Result<Value, PeerError>,
    ) -> Result<bool, HostError> {
        let decision = rules::initial_decision(match &answer {
            Ok(v) => PolicyAnswer::Receipt(self.read_receipt(v)),
            Err(PeerError::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                PolicyAnswer::MethodNotFound
            }
            Err(PeerError::Timeout { .. }) => PolicyAnswer::Timeout,
            Err(PeerError::Closed(c)) => return Err(HostError::Peer(PeerError::Closed(c.clone()))),
            Err(e) => PolicyAnswer::Failed(e.to_string()),
        });
        let decided = self
            .inner
            .state()
            .decide_initial(&hg, decision, SystemTime::now());
        match decided {
            Err(()) => {
                self.inner.peer.close();
                Err(HostError::Refused("close"))
            }
            Ok((told_wider, effects)) => {
                self.effects(effects);
                // Fetches that failed during the exchange count too (§17.5): suspension
                // waits for MCPL to be in force, so it is checked here, as the receipt
                // applies, before the dispatch loop reads the next message.
                let suspended = self.suspend_if_due();
                Ok(told_wider | suspended)
            }
        }
    }

    /// Reports a mode a decision entered and closes when it says so.
    pub(super) fn effects(&self, effects: Effects) {
        if let Some(mode) = effects.entered {
            tracing::info!(server = ?self.inner.label.get(), ?mode, "MCPL disabled: MCP-only");
            self.inner.event_or_report(HostEvent::ModeChanged(mode));
        }
        if effects.close {
            self.inner.peer.close();
        }
    }

    /// Parses a receipt by [`rules::read_receipt`], reporting every defect and keeping a
    /// usable one as the last receipt; `None` when unusable.
    pub(super) fn read_receipt(&self, v: &Value) -> Option<Receipt> {
        let mut diags = Vec::new();
        let receipt = self.inner.state().read_receipt(&mut diags, v);
        self.report(diags);
        receipt
    }

    /// Changes host policy (§6.7 orderings): a narrowing applies host-side at once, then the
    /// Request goes out; a widening activates only after an accepting receipt.
    pub async fn set_policy(&self, patterns: Vec<String>) -> Result<PolicyChange, HostError> {
        let _g = self.inner.policy_lock.lock().await;
        // Narrowing first, atomically (§6.7).
        let plan = self
            .inner
            .state()
            .begin_change(patterns, SystemTime::now())
            .map_err(|e| match e {
                ChangeRefused::McpOnly(r) => HostError::McpOnly(r),
                ChangeRefused::Policy(p) => HostError::Policy(p),
            })?;
        let cfg = &self.inner.config;
        let params = self.inner.state().update_params(&plan.hg);
        Ok(self
            .exchange(FeatureSetsUpdate::NAME, params, cfg.policy_timeout, move |s, answer| {
                let receipt = match answer {
                    Ok(v) => s.read_receipt(&v),
                    Err(e) => {
                        tracing::warn!(server = ?s.inner.label.get(), error = %e, "policy Request unanswered");
                        None
                    }
                };
                let (change, effects) =
                    s.inner
                        .state()
                        .finish_change(plan, receipt, SystemTime::now());
                s.effects(effects);
                change
            })
            .await?)
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
        let _g = self.inner.policy_lock.lock().await;
        let params = self
            .inner
            .state()
            .disable_later(sets)
            .map_err(|e| match e {
                DisableRefused::McpOnly(r) => HostError::McpOnly(r),
                DisableRefused::Selection(e) => HostError::BadSelection(e),
            })?;
        Ok(self
            .inner
            .peer
            .notify_raw(FeatureSetsUpdate::NAME, Some(params))
            .await?)
    }

    /// Sends the Request for a reduction already applied host-side (§6.7), telling the grant
    /// in force once no other exchange is in flight: the receipt is testimony, never a
    /// widening; a refusal falls back as it says.
    pub(super) async fn tell_reduction(&self) {
        let _g = self.inner.policy_lock.lock().await;
        let params = {
            let st = self.inner.state();
            st.update_params(&st.reduction())
        };
        let cfg = &self.inner.config;
        let told = self
            .exchange(
                FeatureSetsUpdate::NAME,
                params,
                cfg.policy_timeout,
                |s, answer| {
                    let receipt = match answer {
                        Ok(v) => s.read_receipt(&v),
                        Err(e) => {
                            tracing::warn!(error = %e, "reduction Request unanswered");
                            None
                        }
                    };
                    let effects = s.inner.state().after_reduction(receipt, SystemTime::now());
                    s.effects(effects);
                },
            )
            .await;
        if let Err(e) = told {
            tracing::debug!(error = %e, "reduction Request abandoned");
        }
    }
}
