//! State management (§8): checkpoint state on `tools/call` results and `state/rollback`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Extra;

/// The `state` member of a stateful `tools/call` result (§8.2, §8.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateInfo {
    /// The new checkpoint id.
    pub checkpoint: String,
    /// The parent checkpoint: absent, explicit `null` (a root, §8.3) or an id; the three
    /// are kept apart so they round-trip.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::nullable"
    )]
    pub parent: Option<Option<String>>,
    /// Full state for the host to store (§8.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// RFC 6902 JSON Patch operations, kept as received (§8.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<Vec<Value>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl StateInfo {
    /// A new checkpoint `checkpoint` with `parent` absent and no `data` or `patch`; set
    /// [`Self::parent`] (`Some(None)` for an explicit root, §8.3) and the state as needed.
    pub fn new(checkpoint: impl Into<String>) -> Self {
        StateInfo {
            checkpoint: checkpoint.into(),
            parent: None,
            data: None,
            patch: None,
            extra: Extra::new(),
        }
    }
}

/// `state/rollback` params (§8.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackParams {
    /// The feature set whose state is rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_set: Option<String>,
    /// The checkpoint to return to.
    pub checkpoint: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `state/rollback` result (§8.6). A pruned checkpoint is an error (`-32005`), not a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RollbackResult {
    /// The checkpoint targeted.
    pub checkpoint: String,
    /// Whether the rollback succeeded (best-effort).
    pub success: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl RollbackResult {
    /// The rollback to `checkpoint` succeeded (§8.6).
    pub fn rolled_back(checkpoint: impl Into<String>) -> Self {
        RollbackResult {
            checkpoint: checkpoint.into(),
            success: true,
            reason: None,
            extra: Extra::new(),
        }
    }

    /// The rollback to `checkpoint` was attempted and failed, for `reason` (§8.6: best
    /// effort; a pruned checkpoint is the `-32005` error instead).
    pub fn failed(checkpoint: impl Into<String>, reason: impl Into<String>) -> Self {
        RollbackResult {
            success: false,
            reason: Some(reason.into()),
            ..RollbackResult::rolled_back(checkpoint)
        }
    }
}

method!(
    /// `state/rollback` (§8.5): Host → Server Request. The spec names no capability for it;
    /// rollback undoes tool effects, so the reading here is that it requires `tools`
    /// (fail closed: a server without tools has nothing to roll back).
    StateRollback, "state/rollback", Mcpl, Request, HostToServer, RollbackParams, RollbackResult,
    requires: One(Tools)
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s8_3_parent_null_absent_and_value_round_trip() {
        for v in [
            json!({"checkpoint":"a","parent":null,"data":{"notes":[]}}),
            json!({"checkpoint":"a"}),
            json!({"checkpoint":"b","parent":"a"}),
        ] {
            let s: StateInfo = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&s).unwrap(), v);
        }
    }
}
