//! `host.refusal-data` (§6.6, §14.6, Appendix A): a `-32002` refusal says which capability
//! was denied, in `data: { capability }`.
//!
//! Reading: §6.6 asks a rejecting host for "`-32002` with `data: { capability }`" for a
//! denied capability, in the sentence whose first half is a SHOULD (`-32003` for an unknown
//! feature set), and §14.6 and Appendix A give `data: { capability }` as part of the code's
//! description. So the check warns, never fails: a `-32002` with no `data`, with a `data`
//! that is not an object, without a string `capability`, or naming a capability the refused
//! method does not need (a push refused naming `tools`: the server is told the wrong thing
//! to ask for) each warn. Members beside `capability` (a `featureSet`, a `reason`, as the
//! library's `declaration_mismatch` writes) are tolerated. Every `-32002` answering a
//! request of the checker's is read (a probe refused for the grant, for readiness, or for
//! a set's undeclared use): whichever check judges the refusal itself, its `data` is this
//! one's, one finding per defect.

use mcpl::capability::{Capability, CapabilitySet};
use serde_json::Value;

use super::judge::{capped, excerpt};
use crate::check::report::Status;
use mcpl::jsonrpc::{codes, ErrorObject};

/// The check's id.
pub(super) const REFUSAL_DATA: &str = "host.refusal-data";

/// Described refusals kept; later ones are counted only.
const KEPT: usize = 4;

/// The `-32002` refusals read so far: how each named its capability.
#[derive(Debug, Default)]
pub(super) struct RefusalData {
    judged: usize,
    wrong: Vec<String>,
    wrong_count: usize,
}

impl RefusalData {
    /// Notes the error `e` answering `method`, which needs `needs` (empty: nothing, then
    /// any capability path named is taken), when it is a `-32002`. Returns whether it was
    /// judged.
    pub(super) fn note(&mut self, method: &str, needs: CapabilitySet, e: &ErrorObject) -> bool {
        if e.code != codes::CAPABILITY_DENIED {
            return false;
        }
        self.judged = self.judged.saturating_add(1);
        let named = e
            .data
            .as_ref()
            .and_then(|d| d.get("capability"))
            .and_then(Value::as_str);
        let fits = |c: &str| {
            c.parse::<Capability>()
                .is_ok_and(|c| needs.is_empty() || needs.contains(c))
        };
        let wanted: Vec<&str> = needs.iter().map(|c| c.as_str()).collect();
        let defect = match (&e.data, named) {
            (_, Some(c)) if fits(c) => return true,
            (None, _) => "carries no data".to_owned(),
            (Some(d), None) => format!("carries data without a capability string: {}", excerpt(d)),
            (Some(_), Some(c)) if wanted.is_empty() => {
                format!("names {:?}, no capability path", capped(c.to_owned(), 64))
            }
            (Some(_), Some(c)) => format!(
                "names capability {:?}, though {method} needs {}",
                capped(c.to_owned(), 64),
                wanted.join(" or ")
            ),
        };
        self.wrong_count = self.wrong_count.saturating_add(1);
        if self.wrong.len() < KEPT {
            self.wrong.push(format!("{method} refused -32002 {defect}"));
        }
        true
    }

    /// The verdict so far: `None` while no `-32002` was judged.
    pub(super) fn verdict(&self) -> Option<(Status, String)> {
        if self.judged == 0 {
            return None;
        }
        if self.wrong_count == 0 {
            let d = format!(
                "{} -32002 refusal(s), each naming the denied capability in data.capability",
                self.judged
            );
            return Some((Status::Pass, d));
        }
        let more = self.wrong_count.saturating_sub(self.wrong.len());
        let more = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        let d = format!(
            "{} of {} -32002 refusal(s) do not name the denied capability: {}{more} (§6.6, \
             §14.6: -32002 with data: {{ capability }}, the capability the method needs)",
            self.wrong_count,
            self.judged,
            self.wrong.join("; ")
        );
        Some((Status::Warn, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn denied(data: Option<Value>) -> ErrorObject {
        let mut e = ErrorObject::new(codes::CAPABILITY_DENIED, "Capability denied");
        e.data = data;
        e
    }

    /// §6.6, §14.6: a -32002 naming the capability the method needs passes (other members
    /// tolerated); none, a non-object, no string capability, or the wrong one warns.
    #[test]
    fn s6_6_a_capability_denial_names_the_capability() {
        let push = CapabilitySet::EMPTY.with(Capability::PushEvents);
        let mut r = RefusalData::default();
        assert_eq!(r.verdict(), None);
        let good = denied(Some(json!({ "capability": "pushEvents", "reason": "x" })));
        assert!(r.note("push/event", push, &good));
        assert_eq!(r.verdict().map(|v| v.0), Some(Status::Pass));
        // Not judged: another code.
        let other = ErrorObject::new(codes::FEATURE_SET_NOT_ENABLED, "x");
        assert!(!r.note("push/event", push, &other));
        // A method needing nothing: any capability path is taken, a non-path is not.
        let any = denied(Some(json!({ "capability": "modelInfo" })));
        assert!(r.note("ping", CapabilitySet::EMPTY, &any));
        assert_eq!(r.verdict().map(|v| v.0), Some(Status::Pass));
        for data in [
            None,
            Some(json!("pushEvents")),
            Some(json!({ "capability": 1 })),
            Some(json!({ "capability": "tools" })),
        ] {
            assert!(r.note("push/event", push, &denied(data)));
        }
        let (status, detail) = r.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Warn, "{detail}");
        for said in [
            "4 of 6",
            "carries no data",
            "without a capability string",
            "\"tools\", though push/event needs pushEvents",
        ] {
            assert!(detail.contains(said), "{said}: {detail}");
        }
    }
}
