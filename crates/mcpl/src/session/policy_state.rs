//! [`HostPolicy`]: the host's policy lifecycle over plain data (§3.3, §5.3, §6.7) — the
//! initial decision, MCP-only fallbacks, narrowing before a later Request and widening on
//! its accepting receipt. [`HostState`](super::HostState) holds one (the async
//! `host::HostSession` through the `HostState` its driver runs) and changes it only through
//! these methods.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::rules::{self, Diagnostics, InitialDecision};
use super::{HostDiagnostic, McpOnlyReason, Mode, PolicyChange};
use crate::capability::{Capability, CapabilitySet, Grant, PatternError};
use crate::manifest::review::{ChangeOutcome, FetchResult, ManifestReview};
use crate::policy::{Fallback, HostGrant, Receipt, Selection, UpdateParams};

/// The host's policy state of one connection.
#[derive(Debug)]
pub(crate) struct HostPolicy {
    pub(crate) mode: Mode,
    pub(crate) ready: bool,
    pub(crate) grant: Grant,
    pub(crate) policy: Vec<String>,
    /// Shared copy-on-write with what a driver publishes (`host::HostSession`'s getters): a
    /// change copies it only while a published view still holds it.
    pub(crate) review: Option<std::sync::Arc<ManifestReview>>,
    /// Shared with what a driver publishes (as `review`), so a published view neither
    /// copies it nor compares it by value after every input.
    pub(crate) last_receipt: Option<std::sync::Arc<Receipt>>,
    /// The host's configured `enabled` allowlist, sent in every policy Request (§6.7).
    enabled: Option<Vec<String>>,
    /// The host's configured `disabled` list, sent in every policy Request (§6.7).
    disabled: Vec<String>,
    /// Feature sets disabled later by Notification ([`HostPolicy::disable_later`]), sent
    /// again in every later policy Request's `disabled` so a Request never re-enables them.
    disabled_later: Vec<String>,
}

/// A later policy change in flight: what [`HostPolicy::begin_change`] narrowed and what an
/// accepting receipt would widen.
#[derive(Debug, Clone)]
pub(crate) struct ChangePlan {
    pub(crate) hg: HostGrant,
    pub(crate) narrowed: CapabilitySet,
    pub(crate) widening: CapabilitySet,
}

impl ChangePlan {
    /// Caps what this change's accepting receipt may activate at `told`, the grant a
    /// reduction Request sent after it tells. SPEC §6.7 is silent on a reduction overtaking
    /// a change in flight; read fail-closed: the server applies the reduction after the
    /// change, so activating more would widen past the server's last word, untold.
    pub(crate) fn cap(&mut self, told: &Grant) {
        self.hg.effective = self.hg.effective.intersect(told.capabilities());
    }
}

/// What a decision did beyond the state: the mode it entered (for a `ModeChanged` event)
/// and whether the connection must close.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Effects {
    pub(crate) entered: Option<Mode>,
    pub(crate) close: bool,
}

impl HostPolicy {
    /// The review in force, to change (copied first if a published view shares it).
    pub(crate) fn review_mut(&mut self) -> Option<&mut ManifestReview> {
        self.review.as_mut().map(std::sync::Arc::make_mut)
    }

    /// Not ready, nothing granted, under the host's `policy`, with the `enabled` allowlist
    /// and `disabled` list its policy Requests carry.
    pub(crate) fn new(
        policy: Vec<String>,
        enabled: Option<Vec<String>>,
        disabled: Vec<String>,
    ) -> HostPolicy {
        HostPolicy {
            mode: Mode::McpOnly(McpOnlyReason::NotAdvertised),
            ready: false,
            grant: Grant::none(),
            policy,
            review: None,
            last_receipt: None,
            enabled,
            disabled,
            disabled_later: Vec::new(),
        }
    }

    /// The params of a policy Request telling `hg` (§6.7): the configured `enabled`, and the
    /// configured `disabled` followed by every set disabled since by Notification.
    pub(crate) fn update_params(&self, hg: &HostGrant) -> Value {
        let mut disabled = self.disabled.clone();
        disabled.extend(
            self.disabled_later
                .iter()
                .filter(|s| !self.disabled.contains(s))
                .cloned(),
        );
        hg.update_params(self.enabled.as_deref(), &disabled)
    }

    /// The params of the initial policy Request telling `hg` (§5.3); the host's own selection
    /// narrows derivation at once (it can never widen).
    pub(crate) fn initial_params(&mut self, hg: &HostGrant) -> Value {
        let params = self.update_params(hg);
        if let (Ok(up), Some(r)) = (UpdateParams::parse(&params), self.review_mut()) {
            r.set_selection(Selection {
                enabled: up.enabled,
                disabled: up.disabled,
            });
        }
        params
    }

    /// Disables feature sets `sets` for a `featureSets/update` **Notification** (§6.7: a
    /// reduction servers must respect): applied here, before the Notification is written, and
    /// repeated by every later policy Request ([`Self::update_params`]). Returns the
    /// Notification's params (`disabled` only, no grant: nothing widens). Refused on an
    /// MCP-only connection, and when the sets disabled this way would exceed the `disabled`
    /// list's bound ([`UpdateParams::parse`]) or one is not a feature-set name or pattern
    /// (§6.3: it would select nothing; the rule the configured `enabled`/`disabled`
    /// entries are held to, [`super::HostRules::defects`]): nothing is applied then.
    pub(crate) fn disable_later(&mut self, sets: &[String]) -> Result<Value, DisableRefused> {
        if let Mode::McpOnly(r) = &self.mode {
            return Err(DisableRefused::McpOnly(r.clone()));
        }
        super::host::check_set_patterns("disabled", sets).map_err(DisableRefused::Selection)?;
        let mut later = self.disabled_later.clone();
        later.extend(
            sets.iter()
                .filter(|s| !self.disabled_later.contains(s))
                .cloned(),
        );
        let up = UpdateParams::parse(&json!({ "disabled": later }))
            .map_err(|e| DisableRefused::Selection(e.to_string()))?;
        if let Some(r) = self.review_mut() {
            // `up.disabled` is every set disabled this way so far: only the ones the
            // selection lacks join it (appending them all made it grow by the whole list at
            // each call, quadratically, past the bound `later` keeps).
            let mut selection = r.selection().clone();
            for name in up.disabled {
                if !selection.disabled.contains(&name) {
                    selection.disabled.push(name);
                }
            }
            r.set_selection(selection);
        }
        self.disabled_later = later;
        Ok(json!({ "disabled": sets }))
    }

    fn advertised(&self) -> CapabilitySet {
        self.review
            .as_deref()
            .map_or(CapabilitySet::EMPTY, ManifestReview::advertised)
    }

    /// Reads a receipt by [`rules::read_receipt_within`] (at most `max_entries`
    /// `unavailableFeatures`), keeping a usable one as the last receipt.
    pub(crate) fn read_receipt(
        &mut self,
        diags: &mut Diagnostics,
        v: &Value,
        max_entries: usize,
    ) -> Option<Receipt> {
        let receipt = rules::read_receipt_within(diags, v, max_entries);
        if let Some(r) = &receipt {
            self.last_receipt = Some(std::sync::Arc::new(r.clone()));
        }
        receipt
    }

    /// The server is served as plain MCP (§3.3) for `reason` from its `initialize` on
    /// (`caps` its `initialize` capabilities): its grant at most `tools` and final.
    pub(crate) fn mcp_only(
        &mut self,
        caps: &Value,
        reason: McpOnlyReason,
    ) -> Result<(), PatternError> {
        let mut adv = CapabilitySet::EMPTY;
        if crate::capability::declares_tools(caps.get("tools")) {
            adv.insert(Capability::Tools);
        }
        let hg = HostGrant::compute(adv, self.policy.iter().map(String::as_str))?;
        self.ready = true;
        self.grant = hg.effective;
        self.mode = Mode::McpOnly(reason);
        Ok(())
    }

    /// Applies the initial decision (§5.3) for the Request that told `hg`. `Ok(told_wider)`:
    /// whether the grant now in force is narrower than what the server was told and the
    /// server cannot know it (a reduction must then be told, §6.7); `Err` when the
    /// connection closes (a refusal naming `close`).
    pub(crate) fn decide_initial(
        &mut self,
        hg: &HostGrant,
        decision: InitialDecision,
        now: SystemTime,
    ) -> Result<(bool, Effects), ()> {
        let server_named_it = decision.server_named_it();
        match decision {
            InitialDecision::Close => Err(()),
            InitialDecision::Mcpl(receipt) => {
                // A manifest revocation that landed during the exchange stays applied.
                let applied = hg.effective.intersect(self.advertised());
                self.ready = true;
                self.grant = applied;
                self.mode = Mode::Mcpl;
                self.last_receipt = Some(std::sync::Arc::new(receipt));
                if let Some(r) = self.review_mut() {
                    r.set_grant(applied, now, "initial-policy");
                }
                Ok((applied != hg.effective, Effects::default()))
            }
            InitialDecision::McpOnly(reason) => {
                let effects = self.enter_mcp_only(reason, now);
                Ok((!server_named_it && self.grant != hg.effective, effects))
            }
        }
    }

    /// Falls back to MCP-only for `reason` (§3.2), keeping only what
    /// [`rules::mcp_only_grant`] keeps.
    pub(crate) fn enter_mcp_only(&mut self, reason: McpOnlyReason, now: SystemTime) -> Effects {
        let grant = rules::mcp_only_grant(
            self.grant,
            self.ready,
            self.review.as_deref(),
            self.policy.iter().map(String::as_str),
        );
        self.ready = true;
        self.grant = grant;
        self.mode = Mode::McpOnly(reason);
        // Later manifest changes are judged against the grant in force (§17.6).
        if let Some(r) = self.review_mut() {
            r.set_grant(grant, now, "mcp-only");
        }
        Effects {
            entered: Some(self.mode.clone()),
            close: false,
        }
    }

    /// Starts a policy change to `patterns` (§6.7): the narrowing applies now, before the
    /// Request goes out. Refused on an MCP-only connection.
    pub(crate) fn begin_change(
        &mut self,
        patterns: Vec<String>,
        now: SystemTime,
    ) -> Result<ChangePlan, ChangeRefused> {
        if let Mode::McpOnly(r) = &self.mode {
            return Err(ChangeRefused::McpOnly(r.clone()));
        }
        let hg = HostGrant::compute(self.advertised(), patterns.iter().map(String::as_str))
            .map_err(ChangeRefused::Policy)?;
        let old = self.grant;
        let kept = old.intersect(hg.effective.capabilities());
        self.grant = kept;
        self.policy = patterns;
        if let Some(r) = self.review_mut() {
            r.set_grant(kept, now, "policy-narrowing");
        }
        Ok(ChangePlan {
            narrowed: old.capabilities().difference(hg.effective.capabilities()),
            widening: hg.effective.capabilities().difference(old.capabilities()),
            hg,
        })
    }

    /// Ends a change on its (usable) receipt, `None` when unanswered or unusable (§6.7): an
    /// accepting receipt activates the widening, re-intersected with what the manifest
    /// advertises now; a refusal falls back as it says; nothing else activates anything.
    pub(crate) fn finish_change(
        &mut self,
        plan: ChangePlan,
        receipt: Option<Receipt>,
        now: SystemTime,
    ) -> (PolicyChange, Effects) {
        let mut activated = CapabilitySet::EMPTY;
        let mut effects = Effects::default();
        match &receipt {
            // MCPL was left while the Request was in flight: nothing widens.
            Some(Receipt::Accepted { .. }) if self.mode != Mode::Mcpl => {}
            Some(Receipt::Accepted { .. }) => {
                let g = plan.hg.effective.intersect(self.advertised());
                activated = g.capabilities().difference(self.grant.capabilities());
                self.grant = g;
                if let Some(r) = self.review_mut() {
                    r.set_grant(g, now, "policy-receipt");
                }
            }
            Some(Receipt::Refused { fallback, .. }) => {
                effects = self.enter_mcp_only(McpOnlyReason::Refused, now);
                effects.close = *fallback == Fallback::Close;
            }
            None => {}
        }
        let change = PolicyChange {
            narrowed: plan.narrowed,
            activated,
            not_activated: plan.widening.difference(activated),
            receipt,
            grant: self.grant,
        };
        (change, effects)
    }

    /// Reviews a fetched manifest (§17.5): the review in force judges it; removals revoke
    /// host-side at once (§17.5 step 3, §6.7); `suspend_after` consecutive unusable fetches
    /// (at least 2) suspend MCPL. `None` when no manifest is under review (MCP-only).
    pub(crate) fn review_fetched(
        &mut self,
        fetched: &Value,
        announced: Option<&str>,
        now: SystemTime,
        suspend_after: u32,
    ) -> Option<Reviewed> {
        self.review_with(
            |r| r.on_fetched(fetched, announced, now),
            now,
            suspend_after,
        )
    }

    /// [`Self::review_fetched`] for a manifest past the host's feature-set bound: only its
    /// removals apply ([`ManifestReview::on_fetched_past_bound`], §17.5 step 1).
    pub(crate) fn review_past_bound(
        &mut self,
        fetched: &Value,
        now: SystemTime,
        suspend_after: u32,
    ) -> Option<Reviewed> {
        self.review_with(
            |r| r.on_fetched_past_bound(fetched, now),
            now,
            suspend_after,
        )
    }

    /// Runs `review` on the review in force, then applies its outcome to the grant.
    fn review_with(
        &mut self,
        review: impl FnOnce(&mut ManifestReview) -> ChangeOutcome,
        now: SystemTime,
        suspend_after: u32,
    ) -> Option<Reviewed> {
        let under_review = self.review.as_mut().map(std::sync::Arc::make_mut)?;
        let outcome = review(under_review);
        let review = under_review;
        let kept = self.grant.intersect(review.advertised());
        let narrowed = kept != self.grant;
        if narrowed {
            self.grant = kept;
            review.set_grant(kept, now, "manifest-revocation");
        }
        let effects = if matches!(outcome.result, FetchResult::PreviousStands { .. }) {
            self.suspend_if_due(suspend_after, now)
        } else {
            Effects::default()
        };
        Some(Reviewed {
            outcome,
            narrowed,
            effects,
        })
    }

    /// Suspends MCPL (§17.5) when it is active and `threshold` consecutive fetches (at least
    /// 2) were unusable.
    pub(crate) fn suspend_if_due(&mut self, threshold: u32, now: SystemTime) -> Effects {
        let due = self.mode == Mode::Mcpl
            && self
                .review
                .as_ref()
                .is_some_and(|r| r.may_suspend(threshold));
        if due {
            self.enter_mcp_only(McpOnlyReason::Suspended, now)
        } else {
            Effects::default()
        }
    }

    /// The grant a reduction Request tells: what is in force now (§6.7).
    pub(crate) fn reduction(&self) -> HostGrant {
        let adv = self.advertised();
        HostGrant {
            advertised: adv,
            effective: self.grant,
            denied: adv.difference(self.grant.capabilities()),
        }
    }

    /// Ends a reduction Request on its receipt: a refusal falls back (and closes if it says
    /// so); anything else is testimony only.
    pub(crate) fn after_reduction(&mut self, receipt: Option<Receipt>, now: SystemTime) -> Effects {
        let Some(Receipt::Refused { fallback, .. }) = receipt else {
            return Effects::default();
        };
        let mut effects = if self.mode == Mode::Mcpl {
            self.enter_mcp_only(McpOnlyReason::Refused, now)
        } else {
            Effects::default()
        };
        effects.close = fallback == Fallback::Close;
        effects
    }
}

/// What reviewing a fetched manifest did ([`HostPolicy::review_fetched`], §17.5).
#[derive(Debug, Clone)]
pub(crate) struct Reviewed {
    pub(crate) outcome: ChangeOutcome,
    /// Removals revoked capabilities host-side: the server must be told (§6.7).
    pub(crate) narrowed: bool,
    /// MCPL was suspended after repeated unusable fetches (the server must be told too).
    pub(crate) effects: Effects,
}

impl Reviewed {
    /// The diagnostics the review produced, in order: findings, defects, an unusable fetch.
    /// A finding the review also made a conformance defect (§17.2 `revision_mismatch`) is
    /// reported once, as the defect: one defect, one diagnostic.
    pub(crate) fn diagnostics(&self) -> Vec<HostDiagnostic> {
        let defects = &self.outcome.defects;
        let findings: Vec<_> = self
            .outcome
            .findings
            .iter()
            .filter(|f| {
                !defects
                    .iter()
                    .any(|d| d.code == f.code && d.message == f.message)
            })
            .cloned()
            .collect();
        let mut d = finding_diagnostics(&findings);
        d.extend(
            self.outcome
                .defects
                .iter()
                .map(|f| HostDiagnostic::ManifestDefect {
                    code: f.code,
                    message: f.message.clone(),
                }),
        );
        if let FetchResult::PreviousStands {
            code,
            consecutive_failures,
        } = self.outcome.result
        {
            d.push(HostDiagnostic::ManifestUnparseable {
                code,
                consecutive_failures,
            });
        }
        d
    }

    /// Whether the server must be told a reduction by Request (§6.7).
    pub(crate) fn tell_reduction(&self) -> bool {
        self.narrowed || self.effects.entered.is_some()
    }
}

/// The diagnostics of a manifest's validation findings (§17.5 step 1), listed as a
/// refusal's defects are: the first [`crate::protocol::MAX_LISTED_DEFECTS`], then one
/// `findings_not_listed` counting the rest. A manifest of
/// 50,000 members outside the vocabulary was 50,000 diagnostics (each logged), at
/// `initialize` and again on every fetch.
pub(crate) fn finding_diagnostics(
    findings: &[crate::manifest::review::Finding],
) -> Vec<HostDiagnostic> {
    let listed = crate::protocol::MAX_LISTED_DEFECTS;
    let mut d: Vec<HostDiagnostic> = findings
        .iter()
        .take(listed)
        .map(|f| HostDiagnostic::ManifestFinding {
            code: f.code,
            section: f.section,
            path: f.path.clone(),
            message: f.message.clone(),
        })
        .collect();
    let more = findings.len().saturating_sub(listed);
    if more > 0 {
        // Under the section of the worst of those not listed, as `findings_not_kept`.
        let section = findings
            .iter()
            .skip(listed)
            .min_by_key(|f| f.severity)
            .map_or("§17.5", |f| f.section);
        d.push(HostDiagnostic::ManifestFinding {
            code: "findings_not_listed",
            section,
            path: String::new(),
            message: format!("… and {more} more not listed"),
        });
    }
    d
}

/// Why [`HostPolicy::disable_later`] refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DisableRefused {
    McpOnly(McpOnlyReason),
    /// Not a valid `disabled` list (§5.3): too many names, or not names or patterns.
    Selection(String),
}

/// Why [`HostPolicy::begin_change`] refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ChangeRefused {
    McpOnly(McpOnlyReason),
    Policy(PatternError),
}
