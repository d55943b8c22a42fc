//! `context/beforeInference` (§10.1): running the hook and filtering its injections.

use std::sync::Arc;

use super::conn::Conn;
use super::dispatch::{guarded, respond};
use super::*;
use crate::capability::Grant;
use crate::jsonrpc::ErrorObject;
use crate::peer::IncomingRequest;
use crate::protocol::hooks::{BeforeInference, BeforeInferenceParams, BeforeInferenceResult};
use crate::protocol::Method;

pub(super) fn on_before_inference(conn: &Arc<Conn>, req: IncomingRequest) {
    let Some((default_set, handler)) = conn.server.handlers.before_inference.clone() else {
        let m = req.method().to_owned();
        tokio::spawn(
            async move { respond::<()>(req, Err(ErrorObject::method_not_found(&m))).await },
        );
        return;
    };
    let mut params: BeforeInferenceParams = match req.params() {
        Ok(p) => p,
        Err(e) => {
            tokio::spawn(async move { respond::<()>(req, Err(e)).await });
            return;
        }
    };
    // §10.1: admitted, so ready; the grant in force is the session's.
    let grant = conn.grant_state().grant;
    if let Some(d) = crate::session::unredacted_hook(&grant, req.request().params.as_ref()) {
        params.user_message = None;
        conn.diagnostic(d);
    }
    let conn = conn.clone();
    tokio::spawn(async move {
        // The hook belongs to its feature set: while that set is unavailable (disabled, not
        // selected, its uses not granted) the server does not run it, so the turn's content
        // is not read under a set the receipt reported off (§6.7), and answers no injections.
        let state = conn.grant_state();
        if let Some(set) = default_set
            .as_deref()
            .filter(|s| !state.feature_available(s))
        {
            tracing::debug!(
                feature_set = set,
                "hook not run: its feature set is unavailable"
            );
            // An empty answer still names the hook's set: §6.5 is silent for one, and other
            // MCPL libraries require `featureSet` on every answer (be liberal in what we send).
            let empty = BeforeInferenceResult {
                feature_set: Some(set.to_owned()),
                ..BeforeInferenceResult::default()
            };
            respond(req, Ok(empty)).await;
            return;
        }
        let out = guarded(&conn, BeforeInference::NAME, handler(state, params)).await;
        let out = out.map(|r| filter_injections(&conn, r, default_set.as_deref()));
        respond(req, out).await;
    });
}

/// Drops what the host would refuse of the hook's answer, by the core rule
/// ([`crate::session::rules::hook_answer_to_send`], the host's own judgement of each
/// injection, §5.4, §10.8: checked as late as the server can), telling the author what was
/// dropped and what to change.
pub(super) fn filter_injections(
    conn: &Conn,
    mut r: BeforeInferenceResult,
    default_set: Option<&str>,
) -> BeforeInferenceResult {
    use crate::session::rules::hook_answer_to_send;
    let state = conn.grant_state();
    let grant = if state.mcpl && state.ready {
        state.grant
    } else {
        Grant::none()
    };
    let decls = lock(&conn.state).policy.declarations().clone();
    let dropped = hook_answer_to_send(&mut r, default_set, &grant, &decls, &state.feature_sets);
    for dropped in dropped {
        conn.diagnostic(ServerDiagnostic::InjectionDropped {
            hook_set: default_set.map(str::to_owned),
            dropped,
        });
    }
    r
}
