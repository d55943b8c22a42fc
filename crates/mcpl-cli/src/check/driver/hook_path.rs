//! `hooks.no-inference-in-hook` (§10.7): whether a hook's answer waits on inference.
//!
//! §10.7: "Context hooks MUST NOT trigger `inference/request` calls. Servers needing
//! inference for hook processing should do so asynchronously outside the hook response
//! path." Reading: an `inference/request` sent while a hook is outstanding is no violation
//! by itself (the second sentence allows one sent asynchronously, and a server's own timer
//! may fire then); what breaks the MUST is a hook *answer* that depends on inference. The
//! checker tests the dependency: while a judged `context/beforeInference` is outstanding, each
//! `inference/request` the server sends is held, not answered ([`MAX_HELD`] at most). The
//! hook's answer arriving while one is held shows the answer did not wait on it (pass); no
//! answer for a whole `--timeout` after the first was held, then one as soon as the checker
//! answers the held requests, shows it did (fail). A hook answered by neither is the hook's
//! own missing answer, reported where it always is, and judged nothing here.

use mcpl::jsonrpc::{ErrorObject, RequestId};
use serde_json::Value;

use super::Listed;

/// At most this many `inference/request`s are held unanswered during one judged hook; more
/// are answered at once, as any other time.
pub(super) const MAX_HELD: usize = 4;

/// The §10.7 state of a session: the hold of the hook outstanding now, and what each judged
/// hook came to.
#[derive(Debug, Default)]
pub(super) struct HookPath {
    /// A judged hook is outstanding and inference requests are held (until its answer, or
    /// until the checker gives up waiting for one and answers them).
    holding: bool,
    /// The held requests, with the answer the checker gives each when it lets go.
    held: Vec<(RequestId, Result<Value, ErrorObject>)>,
    /// The held requests' ids as quoted in a detail.
    held_ids: Vec<String>,
    /// The checker let go of this hook's held requests without the hook's answer.
    released: bool,
    /// Inference requests during this hook answered at once (in a batch, whose answers go
    /// back together, or past [`MAX_HELD`] with none held): the dependency not tested.
    unheld: usize,
    /// Hooks answered only once the checker answered the inference held (fail).
    waited: Listed,
    /// Hooks answered while inference was held (pass).
    free: Listed,
    /// Hooks answered with no inference request sent meanwhile (pass).
    quiet: usize,
    /// Hooks whose answer says nothing: answered with inference answered at once, or never
    /// answered even once the held inference was.
    untested: Listed,
}

impl HookPath {
    /// A judged hook is sent: hold what inference it triggers.
    pub(super) fn begin(&mut self) {
        self.holding = true;
        self.held.clear();
        self.held_ids.clear();
        self.released = false;
        self.unheld = 0;
    }

    /// Whether an `inference/request` arriving now, outside a batch, is held.
    pub(super) fn holds(&self) -> bool {
        self.holding && self.held.len() < MAX_HELD
    }

    /// An `inference/request` arrived and was answered at once (counted during a judged hook).
    pub(super) fn answered_at_once(&mut self) {
        if self.holding {
            self.unheld += 1;
        }
    }

    /// Holds request `id` (quoted as `quoted`), to be answered with `outcome` on release.
    pub(super) fn hold(
        &mut self,
        id: RequestId,
        quoted: String,
        outcome: Result<Value, ErrorObject>,
    ) {
        self.held.push((id, outcome));
        self.held_ids.push(quoted);
    }

    /// Whether anything is held.
    pub(super) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Lets go of the held requests (their answers are the caller's to send); holds nothing
    /// more for this hook. `unanswered`: the hook's answer had not come.
    pub(super) fn release(
        &mut self,
        unanswered: bool,
    ) -> Vec<(RequestId, Result<Value, ErrorObject>)> {
        self.holding = false;
        self.released |= unanswered && !self.held.is_empty();
        std::mem::take(&mut self.held)
    }

    /// The judged hook ended: `answered`, whether its answer came (at all).
    pub(super) fn end(&mut self, answered: bool) {
        self.holding = false;
        let ids = self.held_ids.join(", ");
        match (answered, self.released, ids.is_empty()) {
            (true, true, _) => self.waited.push(format!(
                "no answer within --timeout while inference/request {ids} was held \
                 unanswered; answered once the checker answered it"
            )),
            (true, false, false) => self.free.push(format!(
                "answered while inference/request {ids} was held unanswered"
            )),
            (true, false, true) if self.unheld > 0 => self.untested.push(format!(
                "answered, with {} inference/request answered at once (a batch's, or past \
                 {MAX_HELD} held): not tested",
                self.unheld
            )),
            (true, false, true) => self.quiet += 1,
            (false, true, _) => self.untested.push(format!(
                "not answered while inference/request {ids} was held, nor within --timeout \
                 once the checker answered it: a hook left unanswered, not one shown to wait \
                 on inference"
            )),
            (false, false, _) => {}
        }
        self.held_ids.clear();
        self.released = false;
        self.unheld = 0;
    }

    /// The verdict, its detail (`None`: skip, with the reason).
    pub(super) fn verdict(&self) -> (Option<bool>, String) {
        if !self.waited.is_empty() {
            let d = format!(
                "a context/beforeInference answer waited on inference: {} (§10.7: a hook MUST \
                 NOT trigger inference/request; inference for a hook is done asynchronously, \
                 outside the hook's response path)",
                self.waited.join("; ")
            );
            return (Some(false), d);
        }
        if !self.free.is_empty() || self.quiet > 0 {
            let mut d = Vec::new();
            if !self.free.is_empty() {
                d.push(format!(
                    "context/beforeInference {} (asked for asynchronously, §10.7)",
                    self.free.join("; ")
                ));
            }
            if self.quiet > 0 {
                d.push(format!(
                    "{} context/beforeInference answered with no inference/request meanwhile",
                    self.quiet
                ));
            }
            return (Some(true), d.join("; "));
        }
        let why = if self.untested.is_empty() {
            "no context/beforeInference sent right after a ping round trip was answered: no \
             hook path to judge"
                .to_owned()
        } else {
            format!(
                "no hook's dependency on inference was tested: {}",
                self.untested.join("; ")
            )
        };
        (None, why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n.into())
    }

    /// §10.7: a hook answered while inference is held did not wait on it (pass); one answered
    /// only once the held request was answered did (fail, and a fail outweighs any pass); one
    /// never answered, or answered with its inference answered at once, shows nothing.
    #[test]
    fn s10_7_the_verdict_follows_the_dependency_not_the_arrival() {
        let mut p = HookPath::default();
        assert_eq!(p.verdict().0, None, "no hook judged: skip");

        // Answered while held: pass, naming the held id.
        p.begin();
        assert!(p.holds());
        p.hold(id(7), "id 7".into(), Ok(json!({})));
        assert!(p.has_held());
        assert_eq!(p.release(false).len(), 1, "let go once the hook answered");
        p.end(true);
        let (v, d) = p.verdict();
        assert_eq!(v, Some(true), "{d}");
        assert!(d.contains("id 7") && d.contains("held"), "{d}");

        // Never answered, even once let go: not a wait on inference.
        let mut q = HookPath::default();
        q.begin();
        q.hold(id(8), "id 8".into(), Ok(json!({})));
        assert_eq!(q.release(true).len(), 1);
        q.end(false);
        let (v, d) = q.verdict();
        assert_eq!(v, None, "{d}");
        assert!(d.contains("not one shown to wait"), "{d}");

        // Answered with inference answered at once (a batch's): not tested either.
        q.begin();
        q.answered_at_once();
        q.end(true);
        assert_eq!(q.verdict().0, None, "{}", q.verdict().1);

        // Answered only once the held request was: fail, over the earlier pass.
        p.begin();
        p.hold(
            id(9),
            "id 9".into(),
            Err(ErrorObject::method_not_found("inference/request")),
        );
        assert_eq!(p.release(true).len(), 1);
        assert!(!p.holds(), "nothing more is held once let go");
        p.end(true);
        let (v, d) = p.verdict();
        assert_eq!(v, Some(false), "{d}");
        assert!(d.contains("id 9") && d.contains("§10.7"), "{d}");
    }

    /// The hold is bounded: past [`MAX_HELD`] a request is answered at once, and outside a
    /// judged hook nothing is held.
    #[test]
    fn at_most_max_held_are_held_and_only_during_a_judged_hook() {
        let mut p = HookPath::default();
        assert!(!p.holds(), "no hook outstanding");
        p.begin();
        for n in 0..MAX_HELD {
            assert!(p.holds());
            p.hold(id(n as i64), format!("id {n}"), Ok(json!({})));
        }
        assert!(!p.holds(), "past {MAX_HELD}");
        p.answered_at_once();
        assert_eq!(p.release(false).len(), MAX_HELD);
        p.end(true);
        assert!(!p.holds(), "the hook ended");
        assert_eq!(p.verdict().0, Some(true));
    }
}
