//! `context/beforeInference` (§10.1): running the hook and filtering its injections.

use std::sync::Arc;

use super::conn::Conn;
use super::dispatch::{guarded, respond};
use super::*;
use crate::capability::Requirement;
use crate::jsonrpc::ErrorObject;
use crate::peer::IncomingRequest;
use crate::protocol::hooks::{BeforeInferenceParams, BeforeInferenceResult};

pub(super) fn on_before_inference(conn: &Arc<Conn>, req: IncomingRequest) {
    let Some((default_set, handler)) = conn.server.handlers.before_inference.clone() else {
        let m = req.method().to_owned();
        tokio::spawn(
            async move { respond::<()>(req, Err(ErrorObject::method_not_found(&m))).await },
        );
        return;
    };
    let params: BeforeInferenceParams = match req.params() {
        Ok(p) => p,
        Err(e) => {
            tokio::spawn(async move { respond::<()>(req, Err(e)).await });
            return;
        }
    };
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
        let out = guarded(&conn, "context/beforeInference", handler(state, params)).await;
        let out = out.map(|r| filter_injections(&conn, r, default_set.as_deref()));
        respond(req, out).await;
    });
}

/// Drops injections the session must not send: all of them when the response's feature set
/// is undeclared or unavailable (the answer then names the hook's own set, §6.5), and each one whose position is not granted *now* (§5.4,
/// §10.8 — the host authorizes at response-receipt, so the server checks as late as it can).
pub(super) fn filter_injections(
    conn: &Conn,
    mut r: BeforeInferenceResult,
    default_set: Option<&str>,
) -> BeforeInferenceResult {
    if r.feature_set.is_none() {
        r.feature_set = default_set.map(str::to_owned);
    }
    let state = conn.grant_state();
    if r.context_injections.is_empty() {
        return r;
    }
    let set_ok = match &r.feature_set {
        Some(name) => state.check_feature_set(name),
        None => Err(SendError::UnknownFeatureSet(String::new())),
    };
    if let Err(e) = set_ok {
        let hook = default_set.unwrap_or("(none)");
        conn.author_mistake(
            "injection_dropped",
            format!(
                "the before-inference hook of feature set {hook:?} answered {} injection(s) \
                 that were dropped: {e}",
                r.context_injections.len()
            ),
        );
        r.context_injections.clear();
        // Nothing is injected under a set the session may not use; the empty answer names
        // the hook's own set (never the handler's undeclared one), as every answer does.
        r.feature_set = default_set.map(str::to_owned);
        return r;
    }
    let decls = lock(&conn.state).policy.declarations().clone();
    let name = r.feature_set.clone().unwrap_or_default();
    r.context_injections.retain(|inj| {
        let position = inj.position.as_str();
        let Some(c) = inj.position.capability().filter(|c| state.granted(*c)) else {
            let detail = match inj.position.capability() {
                Some(c) => format!(
                    "`{c}` is not granted (§5.4): declare it in the set's uses, or inject there \
                     only when GrantState::granted(Capability::{c:?}) holds in the hook"
                ),
                None => "it is not an App. B.4 position (system, beforeUser, afterUser) and is \
                         never authorized"
                    .to_owned(),
            };
            conn.author_mistake(
                "injection_dropped",
                format!(
                    "feature set {name:?}: dropped an injection at position {position}: {detail}"
                ),
            );
            return false;
        };
        // A host rejects a use the set's `uses` does not declare (§6.4 rule 2): the host's
        // own gate, whose status steps passed above.
        if state
            .gate_feature_set(&decls, &name, Requirement::One(c))
            .is_err()
        {
            conn.author_mistake(
                "injection_dropped",
                format!(
                    "feature set {name:?}: dropped an injection at position {position}: the set \
                     does not declare `{c}` in its uses (§6.4 rule 2); add it to the uses"
                ),
            );
            return false;
        }
        true
    });
    r
}
