//! `host.deliveries-within-grant` (§5.4; AUDIT-001 §2.2, §2.3, §2.4): every MCPL message the
//! host delivers is one the grant in force allows. A denied capability behaves as if never
//! advertised, and the host MUST NOT deliver a message requiring one (§5.4); before the
//! receipt nothing is granted (§5.3). Judged by the library server's own admission rule
//! ([`mcpl::session::admit`] at a server), so what a conforming server would refuse is what
//! fails here. `context/beforeInference` is left to `host.hooks-after-ready`.
//!
//! A method 0.5.0 removed that a host would send (`context/afterInference`, §10.5) needs a
//! capability no grant can hold, so it always fails: it handed every subscriber the user's
//! and the model's text, the surface the grant exists to withhold (AUDIT-001 §2.2).

use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::Method;
use mcpl::session::{Receiver, Refusal};
use serde_json::Value;

use super::session::Run;
use crate::check::report::Status;

/// The check's id.
pub(super) const ID: &str = "host.deliveries-within-grant";

/// How many of the messages outside the grant are described; later ones are counted.
const KEPT: usize = 4;

/// At most this many characters of a host-chosen method name are quoted.
const MAX_NAME_CHARS: usize = 64;

/// The MCPL messages the host delivered that need a capability (or were removed in 0.5.0),
/// and those outside the grant: how many, the first [`KEPT`] described.
#[derive(Debug, Default)]
pub(super) struct Deliveries {
    judged: u64,
    outside: u64,
    kept: Vec<String>,
}

impl Deliveries {
    fn outside(&mut self, said: String) {
        self.outside = self.outside.saturating_add(1);
        if self.kept.len() < KEPT && !self.kept.contains(&said) {
            self.kept.push(said);
        }
    }
}

impl Run {
    /// Judges one message the host sent (a request or a notification) against readiness and
    /// the grant in force now (§5.3, §5.4).
    pub(super) fn judge_delivery(&mut self, method: &str, params: Option<&Value>) {
        if method == BeforeInference::NAME {
            return;
        }
        let name: String = method.chars().take(MAX_NAME_CHARS).collect();
        if let Some(section) = mcpl::protocol::removed_in(method) {
            // Only the one a host would send; the others are a server's (§6.7, §7).
            if method == "context/afterInference" {
                self.deliveries.judged = self.deliveries.judged.saturating_add(1);
                self.deliveries.outside(format!(
                    "{name} (removed in 0.5.0, {section}: no grant allows it)"
                ));
            }
            return;
        }
        if !mcpl::protocol::is_known_method(method) {
            return;
        }
        let grant = *self.policy.grant();
        let admitted = mcpl::session::admit(Receiver::Server, method, params, self.ready, &grant);
        let needed = match &admitted {
            Ok(req) => *req != mcpl::capability::Requirement::None,
            Err(_) => true,
        };
        if !needed {
            return;
        }
        self.deliveries.judged = self.deliveries.judged.saturating_add(1);
        match admitted {
            // §6.7: while a later receipt is held, a message the grant before it refused
            // came before the host could have read it (an expansion is not yet in force).
            Ok(_)
                if self.expanding.is_some_and(|(b, _)| {
                    mcpl::session::admit(Receiver::Server, method, params, self.ready, &b).is_err()
                }) =>
            {
                self.deliveries.outside(format!(
                    "{name}, newly granted by a later policy Request, sent before the host \
                     could have read its receipt (§6.7: an expansion takes effect only once \
                     the receipt is read)"
                ))
            }
            Ok(_) => {}
            Err(Refusal::NotReady(d)) => self.deliveries.outside(format!(
                "{name} before the policy receipt (§5.3; it needs {})",
                d.capability.as_str()
            )),
            Err(Refusal::Denied(d)) => self.deliveries.outside(format!(
                "{name}, which needs {}, not granted",
                d.capability.as_str()
            )),
            Err(Refusal::NotReceived) => {
                self.deliveries
                    .outside(format!("{name}, a method a server does not receive (§4.1)"));
            }
            // A refusal of a kind added later (`Refusal` is non-exhaustive): still outside.
            Err(other) => self
                .deliveries
                .outside(format!("{name}, which the grant refuses ({other:?})")),
        }
    }

    /// Records [`ID`] from what the host delivered during the run.
    pub(super) fn conclude_deliveries(&mut self) {
        let d = &self.deliveries;
        // Judged on what came, however the run ended (as the hooks are).
        let (status, detail) = match (d.judged, d.outside) {
            (0, _) => (
                Status::Skip,
                "the host sent no MCPL message that needs a capability (hooks aside) during \
                 the run"
                    .to_owned(),
            ),
            (n, 0) => (
                Status::Pass,
                format!("{n} MCPL message(s) needing a capability, each within the grant"),
            ),
            (n, out) => (
                Status::Fail,
                format!(
                    "{out} of {n} MCPL message(s) needing a capability were delivered outside \
                     the grant (§5.4: a host MUST NOT deliver a message requiring a denied \
                     capability){}: {}",
                    if out > d.kept.len() as u64 {
                        format!(", the first {} shown", d.kept.len())
                    } else {
                        String::new()
                    },
                    d.kept.join("; ")
                ),
            ),
        };
        self.record_unset(&[ID], status, &detail);
    }
}
