//! Negotiated policy (§5.3, §6, §6.7, §10.1, §14.1): feature-set declarations and their
//! derivation from the grant, the `featureSets/update` server state machine, degradation
//! receipts, host-side grant computation, and the method → capability table.
//!
//! Everything here is pure: the server and host sessions drive it. The grant
//! ([`Grant`]) is the only authority; feature sets, receipts and `deniedCapabilities` are
//! testimony or diagnostics and never widen anything.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use std::fmt;

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use serde_json::{json, Map, Value};

use crate::capability::{
    Advertisement, Capability, CapabilitySet, Denied, Finding, FindingKind, Grant, Pattern,
    PatternError, Requirement,
};

use crate::jsonrpc::ErrorObject;

// Host side (§5.4, §10.1, §14.1)

/// The host's computation for one connection (§5.4): effective = advertised ∩ policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostGrant {
    /// What the server advertised (as the host understands it).
    pub advertised: CapabilitySet,
    /// The effective grant: the only authority.
    pub effective: Grant,
    /// Derived `deniedCapabilities` diagnostic: advertised paths not granted. Paths the
    /// server never advertised are not listed (they are denied all the same).
    pub denied: CapabilitySet,
}

impl HostGrant {
    /// Computes the grant from the advertisement and host policy patterns (§5.4 matching).
    /// A malformed policy pattern is an error: the host's own configuration is wrong.
    pub fn compute<'a, I>(advertised: CapabilitySet, policy: I) -> Result<HostGrant, PatternError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let effective = Grant::from_patterns(policy)?.intersect(advertised);
        Ok(HostGrant {
            advertised,
            effective,
            denied: advertised.difference(effective.capabilities()),
        })
    }

    /// `featureSets/update` params carrying this grant, to send as a Request (§5.3, §6.7).
    /// `enabled: None` omits the allowlist; an empty `disabled` is omitted.
    pub fn update_params(&self, enabled: Option<&[String]>, disabled: &[String]) -> Value {
        let mut m = Map::new();
        m.insert(
            "effectiveCapabilities".into(),
            json!(self.effective.to_effective_capabilities()),
        );
        m.insert(
            "deniedCapabilities".into(),
            json!(self.denied.sorted_paths()),
        );
        if let Some(en) = enabled {
            m.insert("enabled".into(), json!(en));
        }
        if !disabled.is_empty() {
            m.insert("disabled".into(), json!(disabled));
        }
        Value::Object(m)
    }
}

/// Requirement of `context/beforeInference`: observe or any inject leaf (§10.1).
pub const BEFORE_INFERENCE: Requirement =
    <crate::protocol::hooks::BeforeInference as crate::protocol::Method>::REQUIREMENT;

/// Requirement of streaming inference: `inferenceRequest` and `.streaming` (§11.4).
pub const STREAMING_INFERENCE: Requirement =
    <crate::protocol::inference::InferenceChunk as crate::protocol::Method>::REQUIREMENT;

/// The method → capability table (§5.4, §10, §11, §12, §14.1): a lookup over the typed
/// registry, each method's requirement written once in its [`crate::protocol::Method`] impl.
/// `None` means the method is not typed (MCP methods other than the handshake pieces and
/// `tools/call` are outside it).
///
/// Readings where the spec is silent, each failing closed:
/// - `inference/request` needs `.streaming` as well whenever `stream` is present and not
///   `false`/`null` (a non-boolean `stream` is not trusted to mean "no");
/// - `inference/chunk` (the stream itself) needs both inference paths;
/// - `state/rollback` acts on tool state (§8) and needs `tools`;
/// - `featureSets/update`, `mcpl/manifest` and `mcpl/manifestChanged` are unprivileged.
pub fn method_requirement(method: &str, params: Option<&Value>) -> Option<Requirement> {
    crate::protocol::method_requirement(method, params)
}

pub use crate::protocol::Direction;

mod feature_sets;
mod receipt;
mod update;

pub use feature_sets::*;
pub use receipt::*;
pub use update::*;

/// The sending direction of a method (§4.1, §14.3), from the typed registry in
/// [`crate::protocol`]. A session receiving a method from the wrong side should answer
/// `-32601`.
pub fn method_direction(method: &str) -> Option<Direction> {
    crate::protocol::method_info(method).map(|info| info.direction)
}

/// Why one `contextInjections` entry is refused (§5.4, §10.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectionDenied {
    /// The entry is not an object or has no string `position`.
    #[error(
        "injection has no position: give each contextInjections entry a string `position` (§10.4)"
    )]
    MissingPosition,
    /// A position outside App. B.4: denied (no leaf can authorise it).
    #[error(
        "unknown injection position {0:?}: use one of the App. B.4 positions (e.g. beforeUser)"
    )]
    UnknownPosition(String),
    /// The position's inject leaf is not granted.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// A required member is missing or mistyped (§10.4: `namespace` a string, `content` a
    /// string or content blocks, `metadata` an object).
    #[error("malformed injection: {0}; §10.4 wants a string `namespace`, `content` as a string or content blocks, and `metadata` an object")]
    Malformed(String),
    /// The response names no `featureSet`, an undeclared one, or one not available now
    /// (§6.5, §6.6); `code` is `missing`, `unknown_feature_set` or `feature_set_not_enabled`.
    #[error("feature set {feature_set:?}: {code}: name a declared feature set that is available on this connection in the answer's `featureSet` (§6.5, §6.6)")]
    FeatureSet {
        /// The claimed set, if any.
        feature_set: Option<String>,
        /// Why it cannot carry the injection.
        code: &'static str,
    },
    /// The claimed set's `uses` does not declare the position's inject leaf: the host rejects
    /// that use (§6.4 rule 2, a declaration mismatch).
    #[error("feature set {feature_set:?} does not declare {} in its uses, so the host rejects this use (§6.4 rule 2); add it to the set's uses", capability.as_str())]
    Undeclared {
        /// The claimed set.
        feature_set: String,
        /// The leaf exercised.
        capability: Capability,
    },
}

/// Authorises one injection by its `position` against the grant current at
/// response-receipt (§5.4). Never consults `featureSet` or `namespace`.
pub fn authorize_injection(
    grant: &Grant,
    injection: &Value,
) -> Result<Capability, InjectionDenied> {
    let position = injection
        .get("position")
        .and_then(Value::as_str)
        .ok_or(InjectionDenied::MissingPosition)?;
    let c = Capability::for_position(position)
        .ok_or_else(|| InjectionDenied::UnknownPosition(position.to_owned()))?;
    if grant.allows(c) {
        Ok(c)
    } else {
        Err(Denied { capability: c }.into())
    }
}

/// Judges one injection of a `context/beforeInference` response that claims `feature_set`:
/// its position against `grant` ([`authorize_injection`], §5.4, §10.8), its shape (§10.4),
/// then the claimed set — named, declared, available under `statuses`, and declaring the
/// position's leaf (§6.5, §6.6, §6.4 rule 2). The grant authorizes; the set can only refuse.
pub fn judge_injection(
    grant: &Grant,
    decls: &FeatureSets,
    statuses: &BTreeMap<String, FeatureSetStatus>,
    feature_set: Option<&str>,
    injection: &Value,
) -> Result<Capability, InjectionDenied> {
    let c = authorize_injection(grant, injection)?;
    // §10.4 (content: a plain string or blocks of App. B.1's four shapes, §10.3), by the
    // rule `mcpl check` reports.
    let defects = crate::protocol::hooks::injection_defects(injection, "injection");
    if !defects.is_empty() {
        return Err(InjectionDenied::Malformed(defects.join("; ")));
    }
    let Some(name) = feature_set else {
        return Err(InjectionDenied::FeatureSet {
            feature_set: None,
            code: "missing",
        });
    };
    match feature_set_gate(decls, statuses, name, Requirement::One(c)) {
        Ok(()) => Ok(c),
        Err(SetRefusal::Undeclared(_)) => Err(InjectionDenied::Undeclared {
            feature_set: name.to_owned(),
            capability: c,
        }),
        Err(refusal) => Err(InjectionDenied::FeatureSet {
            feature_set: Some(name.to_owned()),
            code: refusal.code(),
        }),
    }
}

/// Whether the host sends `context/beforeInference` to this server at all (§10.1: observe
/// or any inject leaf).
pub fn before_inference_applies(grant: &Grant) -> bool {
    grant.satisfies(BEFORE_INFERENCE)
}

/// Whether `context/beforeInference` may carry the user's message under `grant` (§10.1):
/// only when `observe` is granted; otherwise `userMessage` is `null`. The host redacts by
/// it ([`redact_before_inference`]) and `mcpl check-host` judges a host by it
/// ([`unredacted_user_message`]).
pub fn user_message_allowed(grant: &Grant) -> bool {
    grant.allows(Capability::Observe)
}

/// Whether received `context/beforeInference` params carry a `userMessage` that
/// [`user_message_allowed`] withholds under `grant`, the grant in force (§10.1): a non-null
/// one, which [`redact_before_inference`] never leaves.
pub fn unredacted_user_message(grant: &Grant, params: Option<&Value>) -> bool {
    !user_message_allowed(grant)
        && params
            .and_then(|p| p.get("userMessage"))
            .is_some_and(|u| !u.is_null())
}

/// Whether received `inference/lifecycle` params carry a `model` that §10.5 withholds under
/// `grant`, the grant in force: a non-null one while `modelInfo` is not granted (§10.5:
/// `model` is sent "only if `modelInfo` is granted"). `mcpl check-host` judges a host by it.
pub fn ungranted_lifecycle_model(grant: &Grant, params: Option<&Value>) -> bool {
    !grant.allows(Capability::ModelInfo)
        && params
            .and_then(|p| p.get("model"))
            .is_some_and(|m| !m.is_null())
}

/// Sets `userMessage` to `null` in `context/beforeInference` params unless
/// [`user_message_allowed`] (§10.1). Non-object params are left alone (the caller built
/// them).
pub fn redact_before_inference(grant: &Grant, params: &mut Value) {
    if !user_message_allowed(grant) {
        if let Some(o) = params.as_object_mut() {
            o.insert("userMessage".into(), Value::Null);
        }
    }
}

// `mcpl grant` report

/// One feature set in a [`GrantReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FeatureSetReport {
    /// Whether the set is available under the grant.
    pub available: bool,
    /// `uses` paths not granted, sorted.
    pub missing_capabilities: Vec<&'static str>,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// What `mcpl grant` prints: the host computation for an advertisement and a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantReport {
    /// Advertised paths, sorted.
    pub advertised: Vec<&'static str>,
    /// The effective grant, sorted.
    pub effective_capabilities: Vec<&'static str>,
    /// Advertised but not granted, sorted.
    pub denied_capabilities: Vec<&'static str>,
    /// Per declared feature set.
    pub feature_sets: BTreeMap<String, FeatureSetReport>,
    /// Non-conformances of the advertisement (`code at path`), omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

/// Builds the `mcpl grant` report from a read advertisement, the declarations and host
/// policy patterns (no selection: derivation from the grant alone).
pub fn grant_report<'a, I>(
    adv: &Advertisement,
    decls: &FeatureSets,
    policy: I,
) -> Result<GrantReport, PatternError>
where
    I: IntoIterator<Item = &'a str>,
{
    let hg = HostGrant::compute(adv.capabilities, policy)?;
    let feature_sets = derive(decls, &hg.effective, &Selection::default())
        .into_iter()
        .map(|(name, s)| {
            let r = match s {
                FeatureSetStatus::Available => FeatureSetReport {
                    available: true,
                    missing_capabilities: Vec::new(),
                    reason: None,
                },
                FeatureSetStatus::Unavailable { reason, missing } => FeatureSetReport {
                    available: false,
                    missing_capabilities: missing.sorted_paths(),
                    reason: Some(reason.code()),
                },
            };
            (name, r)
        })
        .collect();
    Ok(GrantReport {
        advertised: hg.advertised.sorted_paths(),
        effective_capabilities: hg.effective.to_effective_capabilities(),
        denied_capabilities: hg.denied.sorted_paths(),
        feature_sets,
        findings: adv
            .findings
            .iter()
            .map(ToString::to_string)
            .chain((adv.unrecognised_not_kept > 0).then(|| {
                format!(
                    "{} more members outside the vocabulary not listed",
                    adv.unrecognised_not_kept
                )
            }))
            .collect(),
    })
}

/// [`grant_report`] from a whole MCP `capabilities` object (or, if it has no `experimental`
/// member, an `experimental.mcpl` object itself), reading its `featureSets` too.
pub fn grant_report_from_value<'a, I>(value: &Value, policy: I) -> Result<GrantReport, PatternError>
where
    I: IntoIterator<Item = &'a str>,
{
    let (mut adv, mcpl) = if value.get("experimental").is_some() {
        (
            crate::capability::advertised_from_capabilities(value),
            value
                .get("experimental")
                .and_then(|e| e.get("mcpl"))
                .cloned()
                .unwrap_or(Value::Null),
        )
    } else {
        (crate::capability::advertised(value), value.clone())
    };
    let (decls, findings) = FeatureSets::from_mcpl(&mcpl);
    adv.findings.extend(findings);
    grant_report(&adv, &decls, policy)
}
