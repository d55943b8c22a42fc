//! `model/info` (§12) and the `ModelInfo` object it shares with `context/beforeInference`
//! (§10.1) and `inference/lifecycle` (§10.5).

use serde::{Deserialize, Serialize};

use super::{EmptyObject, Extra};

/// Metadata describing a model (§10.1 `model`, §12.2 result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// Model identifier, e.g. `"claude-opus-4-5-20251101"`.
    pub id: String,
    /// Vendor, e.g. `"anthropic"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Context window in tokens.
    #[serde(
        default,
        deserialize_with = "super::int::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub context_window: Option<u64>,
    /// Free-form capability labels (`"vision"`, `"tools"` …): descriptive, never grant paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// Unknown members (e.g. further models a host exposes, §12), kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// `model/info` (§12.1): Server → Host Request; requires `modelInfo`.
    ModelInfoRequest, "model/info", Mcpl, Request, ServerToHost, EmptyObject, ModelInfo,
    requires: One(ModelInfo)
);
