//! Every `context/beforeInference` answer the checker reads is judged by the `hooks.*`
//! checks ([`Session::judge_hook_answer`]), whichever step asked (the hooks probe, the
//! narrowing and reduction probes, a narrowed session, a scenario step): a server whose
//! first answer is well-formed and a later one is not fails them, where only the first was
//! judged.

use mcpl::capability::{Capability, CapabilitySet, Requirement};
use mcpl::policy;
use serde_json::Value;

use super::{inspect, Session};
use crate::check::report::Status;

/// The checks this module records.
const SHAPE: &str = "hooks.injection-shape";
const POSITIONS: &str = "hooks.injection-positions";
const DECLARED: &str = "hooks.feature-set-declared";

impl Session {
    /// Judges one `context/beforeInference` result (`params` as sent), recording failures
    /// only: its shape (§10.2, §10.4, §6.5: `hooks.injection-shape`), each injection's
    /// position against the grant at receipt (§5.4: `hooks.injection-positions`), and the
    /// set its injections come under (§6.5: `hooks.feature-set-declared`), each by the rule
    /// a push's set is judged by ([`Session::judge_tagged`]): a set disabled by the §6.7
    /// probes is their finding (the Notification's once the server read it, the
    /// reduction's, with every set it keeps disabled, once it is answered), a set a
    /// narrowed grant leaves unavailable the narrowing's, a `featureSet` that is no string
    /// the shape's and, after the reduction, the reduction's. The passes and skips are the
    /// hooks probe's ([`Session::before_inference`]), on the first answer.
    pub(super) fn judge_hook_answer(&mut self, params: &Value, result: &Value) {
        let at = format!(
            "the context/beforeInference of turn {}",
            params.get("turnIndex").unwrap_or(&Value::Null)
        );
        let defects = inspect::before_inference_defects(result);
        if !defects.is_empty() {
            let detail = format!("{at}: {}", defects.join("; "));
            self.rec.record(SHAPE, Status::Fail, detail);
        }
        let injections = match result.get("contextInjections") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            Some(Value::Array(_)) | None => return,
            Some(other) => {
                let detail = format!("{at}: contextInjections is not an array: {other}");
                self.rec.record(POSITIONS, Status::Fail, detail);
                return;
            }
        };
        for (i, inj) in injections.iter().enumerate() {
            if let Err(e) = policy::authorize_injection(&self.grant, inj) {
                let detail = format!("{at}: contextInjections[{i}]: {e}");
                match self.narrowed {
                    Some(_) => {
                        let full = policy::authorize_injection(&self.full_grant(), inj).is_ok();
                        self.narrowing_finding(full, POSITIONS, detail);
                    }
                    None => self.rec.record(POSITIONS, Status::Fail, detail),
                }
            }
        }
        let what = format!("beforeInference injected {} item(s)", injections.len());
        let fs = match result.get("featureSet") {
            // Missing: the shape's finding.
            None => return,
            Some(Value::String(fs)) => fs.clone(),
            Some(tag) => {
                let tag = tag.clone();
                self.unnamed_after_reduction(&what, &tag);
                return;
            }
        };
        for inj in injections.clone() {
            let leaf = inj
                .get("position")
                .and_then(Value::as_str)
                .and_then(Capability::for_position);
            if let Some(leaf) = leaf {
                self.note_use(fs.clone(), Requirement::One(leaf));
            }
        }
        let what = format!("{what} under featureSet {fs:?}");
        let disabled_by_probe = self.reduced.contains(&fs) || self.notified_disabled.contains(&fs);
        if !self.declared(&fs) {
            let detail = format!(
                "{at}: injections under featureSet {fs:?}, which is not declared{}",
                self.withdrawn_note(CapabilitySet::EMPTY, Some(&fs))
            );
            self.rec.record(DECLARED, Status::Fail, detail);
        } else if self.reduction_answered && disabled_by_probe {
            // §6.7: every set the reduction keeps disabled, the Notification's included.
            self.reduction_violations.push(what);
        } else if self.notified_disabled.contains(&fs) {
            if self.narrowing_read {
                self.narrowing_violations.push(what);
            }
        } else if self.reduced.contains(&fs) {
            // Disabled by the reduction, not yet answered: refused, not the server's failure.
        } else if self.narrowed.is_some() && !self.available(&fs) {
            self.unavailable_use(&fs, DECLARED, format!("{at}: {what}"));
        } else if !self.available(&fs) {
            let detail = format!(
                "{at}: injections under featureSet {fs:?}, which the grant leaves unavailable"
            );
            self.rec.record(DECLARED, Status::Fail, detail);
        }
    }
}
