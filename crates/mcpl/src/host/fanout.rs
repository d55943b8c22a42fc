//! The `context/beforeInference` fan-out over several sessions (§10).

use super::*;
use crate::protocol::hooks::BeforeInference;

/// One accepted injection.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedInjection {
    /// The server's label.
    pub server: String,
    /// The injection object as received (its `featureSet`/`namespace` are testimony).
    pub injection: Value,
}

/// One rejected injection and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedInjection {
    /// The server's label.
    pub server: String,
    /// The injection object as received.
    pub injection: Value,
    /// Why it was refused.
    pub reason: policy::InjectionDenied,
}

/// A hook that contributed nothing (fail-open).
#[derive(Debug, Clone, PartialEq)]
pub struct HookFailure {
    /// The server's label.
    pub server: String,
    /// Why (timeout, error, bad result).
    pub detail: String,
}

/// The fan-out result, grouped by position (§10.4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Injections {
    /// `system` injections.
    pub system: Vec<AcceptedInjection>,
    /// `beforeUser` injections.
    pub before_user: Vec<AcceptedInjection>,
    /// `afterUser` injections.
    pub after_user: Vec<AcceptedInjection>,
    /// Every rejected injection.
    pub rejected: Vec<RejectedInjection>,
    /// Hooks that failed or timed out (fail-open).
    pub failures: Vec<HookFailure>,
    /// Servers the hook was sent to.
    pub consulted: Vec<String>,
}

/// Sends `context/beforeInference` (§10.1) to every session granted observe or any inject
/// leaf, concurrently, each with its own timeout, fail-open. `userMessage` is `null` where
/// `observe` is not granted. Each returned injection is authorized by its `position` against
/// that session's grant **current when the response is received** (§5.4); the claimed
/// `featureSet` and `namespace` never enter the decision.
pub async fn before_inference(sessions: &[&HostSession], params: &Value) -> Injections {
    let calls = sessions.iter().filter_map(|s| {
        let grant = {
            let st = s.inner.state();
            if st.mode != Mode::Mcpl || !st.ready {
                return None;
            }
            st.grant
        };
        if !policy::before_inference_applies(&grant) {
            return None;
        }
        let mut p = params.clone();
        policy::redact_before_inference(&grant, &mut p);
        let s = (*s).clone();
        Some(async move {
            let timeout = s.inner.config.hook_timeout;
            let limit = s.inner.config.max_injections_per_hook;
            // Judged where the response is read (§5.4, §17.5): the dispatch loop calls this
            // before it handles the next message, so the grant and the manifest review are
            // the ones in force at receipt, after any receipt or fetch read before it and
            // before any read after it.
            let verdict = s
                .exchange(BeforeInference::NAME, p, timeout, move |s, answer| {
                    let st = s.inner.state();
                    rules::judge_hook_answer(
                        answer.map_err(|e| e.to_string()),
                        &st.grant,
                        st.review.as_ref(),
                        limit,
                    )
                })
                .await
                .unwrap_or_else(|e| {
                    rules::judge_hook_answer(Err(e.to_string()), &Grant::none(), None, limit)
                });
            (s, verdict)
        })
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut out = Injections::default();
    for (s, verdict) in answers {
        let server = s.label();
        out.consulted.push(server.clone());
        let fail = |out: &mut Injections, detail: String| {
            s.inner.diag(HostDiagnostic::HookFailed {
                server: server.clone(),
                detail: detail.clone(),
            });
            out.failures.push(HookFailure {
                server: server.clone(),
                detail,
            });
        };
        if let Some(detail) = verdict.failure {
            fail(&mut out, detail);
            continue;
        }
        for (c, inj) in verdict.accepted {
            let a = AcceptedInjection {
                server: server.clone(),
                injection: inj,
            };
            match c {
                Capability::InjectSystem => out.system.push(a),
                Capability::InjectBeforeUser => out.before_user.push(a),
                _ => out.after_user.push(a),
            }
        }
        for (inj, reason) in verdict.rejected {
            s.inner.diag(HostDiagnostic::InjectionRejected {
                server: server.clone(),
                reason: reason.to_string(),
            });
            out.rejected.push(RejectedInjection {
                server: server.clone(),
                injection: inj,
                reason,
            });
        }
    }
    out
}
