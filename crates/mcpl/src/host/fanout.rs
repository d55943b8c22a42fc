//! The `context/beforeInference` fan-out over several sessions (§10).

use super::*;
use crate::session::rules::HookVerdict;

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
    /// Hooks that failed or timed out (fail-open), and sessions given that could not be
    /// sent the hook (closed): those are not in [`Self::consulted`].
    pub failures: Vec<HookFailure>,
    /// Servers the hook was sent to.
    pub consulted: Vec<String>,
    /// Why the application's params were refused before any hook was sent (they lack a
    /// member §10.1 requires, or one has the wrong type); `None` when they were sent.
    pub params_refused: Option<String>,
}

/// Sends `context/beforeInference` (§10.1) to every session granted observe or any inject
/// leaf, concurrently, each with its own timeout, fail-open. `userMessage` is `null` where
/// `observe` is not granted. Each returned injection is authorized by its `position` against
/// that session's grant **current when the response is received** (§5.4); the claimed
/// `featureSet` and `namespace` never enter the decision. Each session's state machine
/// decides whether the hook applies, redacts, and judges the answer where it is read
/// ([`crate::session::HostState::before_inference`]); it also reports the failures and the
/// rejected injections on that session's diagnostics.
///
/// A session whose driver carries out no input for its `hook_timeout` plus
/// [`DRIVER_GRACE`] (it waits on a server that stopped reading) holds up the fan-out no
/// longer: it counts as consulted and failed, and is sent no late hook (one it had sent is
/// cancelled, once its driver moves again). Dropping the returned future cancels every hook
/// still waiting with MCP's `notifications/cancelled` (as the bare [`Peer`] cancels a
/// dropped request), rather than at `hook_timeout`: at once, or, on a session whose driver
/// is stuck with its queue full, at its next input.
///
/// `params` are the application's, sent as given apart from `userMessage`: give every member
/// of §10.1's table, `model` included. Params the core's own reading of them refuses
/// ([`crate::protocol::hooks::BeforeInferenceParams`], as a server built on this crate reads
/// them: `inferenceId`, `conversationId` and `turnIndex` present and typed) are sent to no
/// server: the result has [`Injections::params_refused`] set and nothing else, so the
/// application's mistake is not reported as every server's failure. Servers built on
/// `mcpl-core` refuse a hook whose `model` lacks `id`, `vendor` or `contextWindow` (it then
/// fails open, and is reported).
pub async fn before_inference(sessions: &[&HostSession], params: &Value) -> Injections {
    // Read borrowed (`params_of`): the check copies only the few members the type keeps,
    // not the whole tree once more per fan-out.
    if let Err(e) =
        crate::jsonrpc::params_of::<crate::protocol::hooks::BeforeInferenceParams>(Some(params))
    {
        let detail = format!(
            "context/beforeInference params refused before sending ({}): give `inferenceId` \
             (string), `conversationId` (string), `turnIndex` (integer from 0), and \
             `model` with its `id` (§10.1)",
            e.message
        );
        tracing::warn!("{detail}");
        return Injections {
            params_refused: Some(detail),
            ..Injections::default()
        };
    }
    let calls = sessions.iter().map(|s| {
        let s = (*s).clone();
        let p = params.clone();
        async move {
            let limit = s.inner.shared.config.hook_timeout + DRIVER_GRACE;
            // Dropped with the fan-out, or given up below: the hook is cancelled (`GiveUp`).
            let mut give_up = GiveUp::new(&s);
            let n = give_up.call;
            let call = s.call(|r| Cmd::Hook(p, n, r));
            let verdict = match while_driver_moves(&s.inner.shared, call, limit).await {
                Some(v) => {
                    give_up.answered();
                    v.map_err(|e| format!("the hook was not sent: {e}"))
                }
                None => Ok(Some(HookVerdict {
                    failure: Some(format!(
                        "the session did not take the hook within {limit:?} (its server is not reading)"
                    )),
                    ..HookVerdict::default()
                })),
            };
            // Given up (`None` above): cancelled when the driver takes calls again.
            drop(give_up);
            (s, verdict)
        }
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut out = Injections::default();
    for (s, verdict) in answers {
        let server = s.label();
        let verdict = match verdict {
            Ok(Some(verdict)) => verdict,
            // Not sent: the server ended its output (EOF), so nothing could answer it; a
            // failure, as one in flight at the EOF is, not a consultation.
            Ok(None) if s.input_ended() => {
                out.failures.push(HookFailure {
                    server,
                    detail: "the hook was not sent: the server ended its output (EOF)".into(),
                });
                continue;
            }
            // The hook does not apply to this session (§10.1: nothing granted that it needs).
            Ok(None) => continue,
            // Never sent (the session is closed): a failure, not a consultation.
            Err(detail) => {
                out.failures.push(HookFailure { server, detail });
                continue;
            }
        };
        out.consulted.push(server.clone());
        if let Some(detail) = verdict.failure {
            out.failures.push(HookFailure { server, detail });
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
            out.rejected.push(RejectedInjection {
                server: server.clone(),
                injection: inj,
                reason,
            });
        }
    }
    out
}
