//! Manifest change announcements, fetches and review (§17.5–§17.8).

use super::*;
use crate::protocol::manifest::{ManifestChanged, ManifestFetch};

impl HostSession {
    /// Fetches `mcpl/manifest` now (§17.4: a host MAY at any time) and reviews it.
    pub async fn refresh_manifest(&self) -> Result<Option<ChangeReceipt>, HostError> {
        if !self.inner.mcpl_advertised.load(Ordering::SeqCst) {
            return Err(HostError::McpOnly(McpOnlyReason::NotAdvertised));
        }
        Ok(self.fetch_and_review(None).await)
    }

    pub(super) fn on_manifest_changed(&self, params: Option<&Value>) {
        if !self.inner.mcpl_advertised.load(Ordering::SeqCst) {
            self.inner.diag(HostDiagnostic::UnexpectedMethod {
                method: ManifestChanged::NAME.into(),
            });
            return;
        }
        // §17.3: a malformed announcement is reported; it is only a hint to fetch either way.
        let defects = crate::protocol::manifest::manifest_changed_defects(params);
        if !defects.is_empty() {
            let detail = defects.join("; ");
            let method = ManifestChanged::NAME.into();
            self.inner
                .diag(HostDiagnostic::BadParams { method, detail });
        }
        let announced = params
            .and_then(|p| p.get("revision"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let decision = {
            let mut st = self.inner.state();
            if announced.is_some() {
                st.announced = announced;
            }
            let d = st.limiter.on_notification(Instant::now());
            (d, st.limiter.dropped())
        };
        match decision {
            (FetchDecision::FetchNow, _) => {
                let s = self.clone();
                tokio::spawn(async move { s.fetch_loop().await });
            }
            (FetchDecision::Coalesced, _) => {}
            (FetchDecision::Dropped, total) => {
                self.inner.diag(HostDiagnostic::ManifestFetchDropped {
                    dropped_total: total,
                })
            }
        }
    }

    pub(super) async fn fetch_loop(&self) {
        loop {
            let announced = self.inner.state().announced.take();
            let (_, tell) = self.fetch_reviewed(announced).await;
            // The fetch ended with its review (§17.8): an announcement folded into it is
            // fetched now, not once the reduction it prompted is answered (as `HostState`).
            if tell {
                let s = self.clone();
                tokio::spawn(async move { s.tell_reduction().await });
            }
            let (again, dropped) = {
                let mut st = self.inner.state();
                let before = st.limiter.dropped();
                let again = st.limiter.on_fetch_complete(Instant::now());
                (
                    again,
                    (st.limiter.dropped() > before).then(|| st.limiter.dropped()),
                )
            };
            if let Some(total) = dropped {
                self.inner.diag(HostDiagnostic::ManifestFetchDropped {
                    dropped_total: total,
                });
            }
            if !again {
                break;
            }
        }
    }

    /// One `mcpl/manifest` fetch and its review; returns the change receipt, if any. The
    /// answer is reviewed by the dispatch loop where it is read ([`Self::exchange`]), so a
    /// revocation is in force for every message read after it (§17.5 step 3, §6.7), as in
    /// `session::HostState`.
    pub(super) async fn fetch_and_review(
        &self,
        announced: Option<String>,
    ) -> Option<ChangeReceipt> {
        let (receipt, tell) = self.fetch_reviewed(announced).await;
        if tell {
            // The grant shrank (a revocation, a suspension): the server is told by Request
            // like any reduction (§6.7).
            self.tell_reduction().await;
        }
        receipt
    }

    /// One `mcpl/manifest` fetch, reviewed where its answer is read: the change receipt,
    /// and whether a reduction must be told.
    async fn fetch_reviewed(&self, announced: Option<String>) -> (Option<ChangeReceipt>, bool) {
        let reviewed = self
            .exchange(
                ManifestFetch::NAME,
                json!({}),
                self.inner.config.manifest_timeout,
                move |s, answer| s.apply_fetched(answer, announced),
            )
            .await;
        reviewed.unwrap_or_else(|e| {
            self.inner.diag(HostDiagnostic::ManifestFetchFailed {
                detail: e.to_string(),
            });
            (None, false)
        })
    }

    /// Reviews a fetch answer where it is read: the receipt, and whether a reduction must
    /// be told.
    fn apply_fetched(
        &self,
        answer: Result<Value, PeerError>,
        announced: Option<String>,
    ) -> (Option<ChangeReceipt>, bool) {
        let fetched = match answer {
            Ok(v) => v,
            Err(e) => {
                self.inner.diag(HostDiagnostic::ManifestFetchFailed {
                    detail: e.to_string(),
                });
                return (None, false);
            }
        };
        let limit = self.inner.config.max_feature_sets;
        if let Err(e) = within_feature_set_bound(&fetched, limit) {
            self.inner.diag(HostDiagnostic::ManifestFetchFailed {
                detail: format!("{e}; it is refused and the manifest in force stands"),
            });
            return (None, false);
        }
        let reviewed = self.inner.state().review_fetched(
            &fetched,
            announced.as_deref(),
            SystemTime::now(),
            self.inner.config.suspend_after_failures,
        );
        let Some(reviewed) = reviewed else {
            return (None, false);
        };
        self.report(reviewed.diagnostics());
        let receipt = reviewed.outcome.receipt().cloned();
        let tell = reviewed.tell_reduction();
        self.effects(reviewed.effects);
        if let Some(r) = &receipt {
            self.inner
                .event_or_report(HostEvent::ManifestChange(r.clone()));
        }
        (receipt, tell)
    }

    /// Suspends MCPL (§17.5) when it is active and enough consecutive fetches were
    /// unusable; `true` when it did (the caller then tells the reduction).
    pub(super) fn suspend_if_due(&self) -> bool {
        let threshold = self.inner.config.suspend_after_failures;
        let effects = self
            .inner
            .state()
            .suspend_if_due(threshold, SystemTime::now());
        let due = effects.entered.is_some();
        self.effects(effects);
        due
    }
}
