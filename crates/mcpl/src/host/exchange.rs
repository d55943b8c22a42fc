//! The policy exchange (§5.3, §6.7): the initial Request, later changes, receipts and
//! fallbacks.

use super::*;

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
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        // The host's own selection narrows derivation at once (it can never widen).
        if let Ok(up) = policy::UpdateParams::parse(&params) {
            if let Some(r) = self.inner.state().review.as_mut() {
                r.set_selection(policy::Selection {
                    enabled: up.enabled,
                    disabled: up.disabled,
                });
            }
        }
        self.exchange(
            "featureSets/update",
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
        let server_named_it = decision.server_named_it();
        let decision = match decision {
            InitialDecision::Close => {
                self.inner.peer.close();
                return Err(HostError::Refused("close"));
            }
            InitialDecision::Mcpl(r) => Ok(r),
            InitialDecision::McpOnly(reason) => Err(reason),
        };
        let told_wider = match decision {
            Ok(receipt) => {
                let mut st = self.inner.state();
                // A manifest revocation that landed during the exchange stays applied.
                let adv = st
                    .review
                    .as_ref()
                    .map_or(CapabilitySet::EMPTY, |r| r.advertised());
                let applied = hg.effective.intersect(adv);
                st.ready = true;
                st.grant = applied;
                st.mode = Mode::Mcpl;
                st.last_receipt = Some(receipt);
                if let Some(r) = st.review.as_mut() {
                    r.set_grant(applied, SystemTime::now(), "initial-policy");
                }
                applied != hg.effective
            }
            Err(reason) => {
                self.enter_mcp_only(reason);
                !server_named_it && self.grant() != hg.effective
            }
        };
        Ok(told_wider)
    }

    /// Parses a receipt by [`rules::read_receipt`], reporting every defect and keeping a
    /// usable one as the last receipt; `None` when unusable.
    pub(super) fn read_receipt(&self, v: &Value) -> Option<Receipt> {
        let mut diags = Vec::new();
        let receipt = rules::read_receipt(&mut diags, v);
        self.report(diags);
        if let Some(r) = &receipt {
            self.inner.state().last_receipt = Some(r.clone());
        }
        receipt
    }

    pub(super) fn enter_mcp_only(&self, reason: McpOnlyReason) {
        tracing::info!(server = ?self.inner.label.get(), ?reason, "MCPL disabled: MCP-only");
        let mode = Mode::McpOnly(reason);
        {
            let mut st = self.inner.state();
            let grant = rules::mcp_only_grant(
                st.grant,
                st.ready,
                st.review.as_ref(),
                st.policy.iter().map(String::as_str),
            );
            st.ready = true;
            st.grant = grant;
            st.mode = mode.clone();
            // The review judges later manifest changes against the grant in force (§17.6): a
            // capability MCP-only never held is not reported as revoked.
            if let Some(r) = st.review.as_mut() {
                r.set_grant(grant, SystemTime::now(), "mcp-only");
            }
        }
        self.inner.event(HostEvent::ModeChanged(mode));
    }

    /// Changes host policy (§6.7 orderings): a narrowing applies host-side at once, then the
    /// Request goes out; a widening activates only after an accepting receipt.
    pub async fn set_policy(&self, patterns: Vec<String>) -> Result<PolicyChange, HostError> {
        let _g = self.inner.policy_lock.lock().await;
        let (hg, old) = {
            let mut st = self.inner.state();
            if let Mode::McpOnly(r) = &st.mode {
                return Err(HostError::McpOnly(r.clone()));
            }
            let advertised = st
                .review
                .as_ref()
                .map(|r| r.advertised())
                .unwrap_or(CapabilitySet::EMPTY);
            let hg = HostGrant::compute(advertised, patterns.iter().map(String::as_str))?;
            let old = st.grant;
            // Narrowing first, atomically (§6.7).
            let kept = old.intersect(hg.effective.capabilities());
            st.narrow_to(kept);
            st.policy = patterns.clone();
            if let Some(r) = st.review.as_mut() {
                r.set_grant(kept, SystemTime::now(), "policy-narrowing");
            }
            (hg, old)
        };
        let narrowed = old.capabilities().difference(hg.effective.capabilities());
        let widening = hg.effective.capabilities().difference(old.capabilities());
        let cfg = &self.inner.config;
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        let timeout = cfg.policy_timeout;
        Ok(self
            .exchange("featureSets/update", params, timeout, move |s, answer| {
                s.apply_change(hg, narrowed, widening, answer)
            })
            .await?)
    }

    /// Applies the answer to a later policy Request where it is read (§6.7): an accepting
    /// receipt activates the widening; a refusal falls back as it says; no usable answer
    /// leaves the narrowing in force and activates nothing.
    fn apply_change(
        &self,
        hg: HostGrant,
        narrowed: CapabilitySet,
        widening: CapabilitySet,
        answer: Result<Value, PeerError>,
    ) -> PolicyChange {
        let receipt = match answer {
            Ok(v) => self.read_receipt(&v),
            Err(e) => {
                tracing::warn!(server = ?self.inner.label.get(), error = %e, "policy Request unanswered");
                None
            }
        };
        let mut activated = CapabilitySet::EMPTY;
        match &receipt {
            // MCPL was left (suspended) while the Request was in flight: a receipt widens
            // nothing on an MCP-only connection.
            Some(Receipt::Accepted { .. }) if self.mode() != Mode::Mcpl => {}
            Some(Receipt::Accepted { .. }) => {
                let mut st = self.inner.state();
                // Re-intersect with whatever happened meanwhile (a manifest revocation).
                let adv = st
                    .review
                    .as_ref()
                    .map(|r| r.advertised())
                    .unwrap_or(CapabilitySet::EMPTY);
                let g = hg.effective.intersect(adv);
                activated = g.capabilities().difference(st.grant.capabilities());
                st.grant = g;
                if let Some(r) = st.review.as_mut() {
                    r.set_grant(g, SystemTime::now(), "policy-receipt");
                }
            }
            Some(Receipt::Refused {
                fallback: Fallback::Close,
                ..
            }) => {
                self.enter_mcp_only(McpOnlyReason::Refused);
                self.inner.peer.close();
            }
            Some(Receipt::Refused { .. }) => self.enter_mcp_only(McpOnlyReason::Refused),
            None => {}
        }
        let grant = self.grant();
        PolicyChange {
            narrowed,
            activated,
            not_activated: widening.difference(activated),
            receipt,
            grant,
        }
    }

    /// The `disabled` list of a policy Request: the configured one, then the sets
    /// [`Self::disable_by_notification`] disabled since.
    pub(super) fn disabled_list(&self) -> Vec<String> {
        let later = self.inner.state().disabled_later.clone();
        let mut all = self.inner.config.disabled.clone();
        all.extend(
            later
                .into_iter()
                .filter(|s| !self.inner.config.disabled.contains(s)),
        );
        all
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
        let params = json!({ "disabled": sets });
        {
            let mut st = self.inner.state();
            if let Mode::McpOnly(r) = &st.mode {
                return Err(HostError::McpOnly(r.clone()));
            }
            let mut later = st.disabled_later.clone();
            later.extend(
                sets.iter()
                    .filter(|s| !st.disabled_later.contains(s))
                    .cloned(),
            );
            let all = json!({ "disabled": later });
            let up = policy::UpdateParams::parse(&all)
                .map_err(|e| HostError::BadSelection(e.to_string()))?;
            if let Some(r) = st.review.as_mut() {
                let mut selection = r.selection().clone();
                selection.disabled.extend(up.disabled);
                r.set_selection(selection);
            }
            st.disabled_later = later;
        }
        Ok(self
            .inner
            .peer
            .notify_raw("featureSets/update", Some(params))
            .await?)
    }

    /// Sends the Request for a reduction already applied host-side (§6.7), telling the grant
    /// in force once no other exchange is in flight: the receipt is testimony, never a
    /// widening; a refusal falls back as it says.
    pub(super) async fn tell_reduction(&self) {
        let _g = self.inner.policy_lock.lock().await;
        let (adv, kept) = {
            let st = self.inner.state();
            let adv = st
                .review
                .as_ref()
                .map_or(CapabilitySet::EMPTY, |r| r.advertised());
            (adv, st.grant)
        };
        let hg = HostGrant {
            advertised: adv,
            effective: kept,
            denied: adv.difference(kept.capabilities()),
        };
        let cfg = &self.inner.config;
        let params = hg.update_params(cfg.enabled.as_deref(), &self.disabled_list());
        let told = self
            .exchange(
                "featureSets/update",
                params,
                cfg.policy_timeout,
                |s, answer| match answer {
                    Ok(v) => {
                        if let Some(Receipt::Refused { fallback, .. }) = s.read_receipt(&v) {
                            if s.mode() == Mode::Mcpl {
                                s.enter_mcp_only(McpOnlyReason::Refused);
                            }
                            if fallback == Fallback::Close {
                                s.inner.peer.close();
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "reduction Request unanswered"),
                },
            )
            .await;
        if let Err(e) = told {
            tracing::debug!(error = %e, "reduction Request abandoned");
        }
    }
}
