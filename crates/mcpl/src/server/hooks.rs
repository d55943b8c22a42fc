//! `context/beforeInference` (§10.1): running the hook. The session decided the rest: it
//! withheld a `userMessage` the grant does not let the server read (§10.1), answered empty
//! without running the hook while its own set is unavailable (§6.7), and filters the
//! answer's injections by the host's own rule when it is sent (§5.4, §10.8:
//! `session::ServerState::answer`).

use std::sync::Arc;

use serde_json::Value;

use super::conn::Conn;
use super::dispatch::{run_handler, Handled};
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::protocol::hooks::{BeforeInference, BeforeInferenceParams};
use crate::protocol::Method;

pub(super) fn on_before_inference(
    conn: &Arc<Conn>,
    id: RequestId,
    params: Option<Value>,
) -> Handled {
    let Some((_, handler)) = conn.server.handlers.before_inference.clone() else {
        return Handled::now(Err(ErrorObject::method_not_found(BeforeInference::NAME)));
    };
    let params: BeforeInferenceParams = match crate::jsonrpc::parse_params(params) {
        Ok(p) => p,
        Err(e) => return Handled::now(Err(e)),
    };
    let state = conn.grant_state();
    run_handler(
        conn,
        id,
        BeforeInference::NAME.into(),
        handler(state, params),
        // A rule reads the answer (§10.8): as a `Value`.
        false,
    )
}
