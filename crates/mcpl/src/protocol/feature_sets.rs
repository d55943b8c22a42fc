//! `featureSets/update` (§5.3, §6.7) and its degradation receipt: wire types only. What the
//! fields mean for the grant (absent `effectiveCapabilities` in a Request = nothing granted,
//! Notification narrows only …) is the policy module's job.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Extra;

/// `featureSets/update` params (§5.3). Lists are kept as received (patterns such as
/// `channels.*` are legal grant entries, §5.4); absent and empty are kept apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateParams {
    /// The sole normative allowlist (§5.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_capabilities: Option<Vec<String>>,
    /// Diagnostic only; never used to authorize (§5.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_capabilities: Option<Vec<String>>,
    /// Feature-set allowlist when present (§5.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Vec<String>>,
    /// Feature sets to subtract (§5.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Vec<String>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a refusing server says happens next (§6.7 `fallback`). Unknown values are kept as
/// `Other`: the receipt is testimony, the host MAY close regardless, and dropping the whole
/// receipt would hide the refusal itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fallback {
    /// `"mcp-only"`: disable MCPL, keep MCP (§3.2).
    #[serde(rename = "mcp-only")]
    McpOnly,
    /// `"close"`: close the transport.
    #[serde(rename = "close")]
    Close,
    /// A value outside §6.7, kept as received.
    #[serde(untagged)]
    Other(String),
}

/// One `unavailableFeatures` entry of a receipt (§6.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableFeature {
    /// The feature set.
    pub feature_set: String,
    /// What it lacks, as the server reports it (testimony).
    #[serde(default)]
    pub missing_capabilities: Vec<String>,
    /// The consequence (e.g. `"disabled"`); REQUIRED by §6.7.
    pub effect: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The `featureSets/update` result: a degradation receipt or a refusal (§6.7). Testimony,
/// never an input that widens a grant.
///
/// This is the lenient wire form (unknown members and fallbacks kept as sent). Its validated
/// reading is [`crate::policy::Receipt`], produced by [`crate::policy::parse_receipt`] with
/// every §6.7 defect listed; a server builds one with [`crate::policy::Receipt`] and writes
/// it with [`crate::policy::Receipt::to_value`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// Whether the server accepted the policy.
    pub accepted: bool,
    /// `"degraded"` when something degraded; omitted when nothing did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Feature sets that will not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_features: Option<Vec<UnavailableFeature>>,
    /// Free-form notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<Vec<Value>>,
    /// REQUIRED when `accepted` is false (§6.7); the rule is checked by
    /// [`crate::policy::parse_receipt`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// What a refusing server says it lacks (testimony).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_capabilities: Option<Vec<String>>,
    /// Human-readable reason for a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// `featureSets/update` (§6.7): Host → Server, Notification or Request; unprivileged
    /// (it is how the grant is delivered).
    FeatureSetsUpdate, "featureSets/update", Mcpl, Either, HostToServer, UpdateParams, Receipt,
    requires: None
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s6_7_refusal_without_fallback_is_flagged() {
        // The typed receipt reads a refusal as sent; `policy::parse_receipt` reports the
        // missing fallback (one place for the §6.7 rule).
        let raw = json!({"accepted": false});
        let r: Receipt = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(r.fallback, None);
        assert!(crate::policy::parse_receipt(&raw).receipt.is_none());
        let r: Receipt =
            serde_json::from_value(json!({"accepted": false, "fallback": "mcp-only"})).unwrap();
        assert_eq!(r.fallback, Some(Fallback::McpOnly));
        let r: Receipt =
            serde_json::from_value(json!({"accepted": false, "fallback": "retry"})).unwrap();
        assert_eq!(r.fallback, Some(Fallback::Other("retry".into())));
    }

    #[test]
    fn s6_7_unavailable_feature_requires_effect() {
        let r = serde_json::from_value::<UnavailableFeature>(
            json!({"featureSet": "a", "missingCapabilities": []}),
        );
        assert!(r.is_err());
    }

    #[test]
    fn s5_3_absent_and_empty_lists_stay_apart() {
        let a: UpdateParams = serde_json::from_value(json!({})).unwrap();
        let b: UpdateParams = serde_json::from_value(json!({"effectiveCapabilities": []})).unwrap();
        assert_eq!(a.effective_capabilities, None);
        assert_eq!(b.effective_capabilities, Some(vec![]));
    }
}
