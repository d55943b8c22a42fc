//! `context/beforeInference` (§10.1): running the hook and filtering its injections.

use std::sync::Arc;

use super::conn::Conn;
use super::dispatch::{guarded, respond};
use super::*;
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
        // The one rule (`session::hook_not_run`, as `ServerState` decides it).
        let state = conn.grant_state();
        let skip =
            crate::session::hook_not_run(default_set.as_deref(), |s| state.feature_available(s));
        if let Some(empty) = skip {
            tracing::debug!(
                feature_set = empty.feature_set.as_deref(),
                "hook not run: its feature set is unavailable"
            );
            respond(req, Ok(empty)).await;
            return;
        }
        let out = guarded(&conn, BeforeInference::NAME, handler(state, params)).await;
        let out = out.map(|r| filter_injections(&conn, r, default_set.as_deref()));
        respond(req, out).await;
    });
}

/// Drops what the host would refuse of the hook's answer by the one rule
/// ([`crate::session::filter_hook_answer`], as `ServerState::answer` filters it), reporting
/// each drop.
pub(super) fn filter_injections(
    conn: &Conn,
    mut r: BeforeInferenceResult,
    default_set: Option<&str>,
) -> BeforeInferenceResult {
    let state = conn.grant_state();
    let decls = lock(&conn.state).policy.declarations().clone();
    let diags = crate::session::filter_hook_answer(
        &mut r,
        default_set,
        state.mcpl,
        state.ready,
        &state.grant,
        &decls,
        &state.feature_sets,
    );
    for d in diags {
        conn.diagnostic(d);
    }
    r
}
