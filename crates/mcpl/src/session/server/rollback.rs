//! §8.5 at the server: a host's `state/rollback` names the feature set whose checkpoint it
//! returns to, and reaches the application only when that set keeps checkpoints (§8.1:
//! declared with `rollback: true`) and is available now (§6.7: a reduction, a `disabled`
//! entry included, is respected at once).

use serde_json::Value;

use super::ServerState;
use crate::jsonrpc::ErrorObject;
use crate::protocol::state::StateRollback;
use crate::protocol::Method as _;

impl ServerState {
    /// The error a host's `method` with `params` is answered with instead of reaching the
    /// application, for a `state/rollback` naming a feature set: undeclared `-32003`,
    /// declared without `rollback: true` `-32602`, unavailable now `-32001` (§6.6's codes).
    /// Reading (fail closed; the spec names no server answer): a rollback of a set that keeps
    /// no checkpoints, or that the host disabled, must not run. One naming no set is the
    /// handler's to judge (`featureSet` is optional in the params type).
    pub(super) fn rollback_refused(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Option<ErrorObject> {
        if method != StateRollback::NAME {
            return None;
        }
        let set = params?.get("featureSet")?.as_str()?;
        let Some(declared) = self.policy.declarations().sets.get(set) else {
            return Some(ErrorObject::unknown_feature_set(set));
        };
        if declared.extra.get("rollback") != Some(&Value::Bool(true)) {
            return Some(ErrorObject::invalid_params(format!(
                "state/rollback: feature set {set:?} keeps no checkpoints (it does not declare \
                 rollback: true, §8.1)"
            )));
        }
        if !self.policy.is_available(set) {
            return Some(ErrorObject::feature_set_not_enabled(set));
        }
        None
    }
}
