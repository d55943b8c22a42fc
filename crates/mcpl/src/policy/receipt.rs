//! Degradation receipts (§6.7): what the server answers a policy Request with, and the
//! host's reading of it.

use super::*;

// Degradation receipts (§6.7)

/// The consequence a refusing server names (§6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Disable MCPL, keep MCP tools/resources/prompts (§3.2).
    McpOnly,
    /// Close the transport.
    Close,
}

impl Fallback {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::McpOnly => "mcp-only",
            Fallback::Close => "close",
        }
    }
}

/// One `unavailableFeatures` entry. Parsed entries keep paths as strings: a receipt is
/// testimony and may name anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableFeature {
    /// `featureSet`.
    pub feature_set: String,
    /// `missingCapabilities`.
    pub missing_capabilities: Vec<String>,
    /// `effect` (this crate writes `"disabled"`).
    pub effect: String,
    /// `reason` (an extension member: `invalid_uses`, `disabled`, `not_selected`,
    /// `capability_denied`).
    pub reason: Option<String>,
}

/// The `featureSets/update` result (§6.7): testimony about what the server will do.
/// The validated reading of the wire form [`crate::protocol::feature_sets::Receipt`]: a
/// refusal always names a known fallback, which [`parse_receipt`] checks.
#[derive(Debug, Clone, PartialEq)]
pub enum Receipt {
    /// `accepted: true`.
    Accepted {
        /// `mode`: written as `"degraded"` only when something is unavailable, else omitted.
        mode: Option<String>,
        /// `unavailableFeatures`.
        unavailable_features: Vec<UnavailableFeature>,
        /// `notes` (free-form; omitted when empty).
        notes: Vec<Value>,
    },
    /// `accepted: false`, always with a `fallback`.
    Refused {
        /// `fallback`.
        fallback: Fallback,
        /// `missingCapabilities` (testimony; confers nothing).
        missing_capabilities: Vec<String>,
        /// `reason`.
        reason: Option<String>,
    },
}

impl Receipt {
    /// The accepting receipt for derived statuses: `mode` omitted when nothing degraded.
    pub fn from_statuses(statuses: &BTreeMap<String, FeatureSetStatus>) -> Receipt {
        let unavailable_features: Vec<UnavailableFeature> = statuses
            .iter()
            .filter_map(|(name, s)| match s {
                FeatureSetStatus::Available => None,
                FeatureSetStatus::Unavailable { reason, missing } => Some(UnavailableFeature {
                    feature_set: name.clone(),
                    missing_capabilities: missing
                        .sorted_paths()
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    effect: "disabled".into(),
                    reason: Some(reason.code().into()),
                }),
            })
            .collect();
        Receipt::Accepted {
            mode: (!unavailable_features.is_empty()).then(|| "degraded".to_owned()),
            unavailable_features,
            notes: Vec::new(),
        }
    }

    /// A refusal naming its consequence.
    pub fn refused(fallback: Fallback, missing: CapabilitySet, reason: Option<String>) -> Receipt {
        Receipt::Refused {
            fallback,
            missing_capabilities: missing
                .sorted_paths()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            reason,
        }
    }

    /// Whether this is `accepted: true`.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Receipt::Accepted { .. })
    }

    /// The §6.7 JSON shape.
    pub fn to_value(&self) -> Value {
        match self {
            Receipt::Accepted {
                mode,
                unavailable_features,
                notes,
            } => {
                let mut m = Map::new();
                m.insert("accepted".into(), Value::Bool(true));
                if let Some(mode) = mode {
                    m.insert("mode".into(), Value::from(mode.as_str()));
                }
                let entries = unavailable_features
                    .iter()
                    .map(|u| {
                        let mut e = json!({
                            "featureSet": u.feature_set,
                            "missingCapabilities": u.missing_capabilities,
                            "effect": u.effect,
                        });
                        if let (Some(r), Some(o)) = (&u.reason, e.as_object_mut()) {
                            o.insert("reason".into(), Value::from(r.as_str()));
                        }
                        e
                    })
                    .collect();
                m.insert("unavailableFeatures".into(), Value::Array(entries));
                if !notes.is_empty() {
                    m.insert("notes".into(), Value::Array(notes.clone()));
                }
                Value::Object(m)
            }
            Receipt::Refused {
                fallback,
                missing_capabilities,
                reason,
            } => {
                let mut v = json!({
                    "accepted": false,
                    "fallback": fallback.as_str(),
                    "missingCapabilities": missing_capabilities,
                });
                if let (Some(r), Some(o)) = (reason, v.as_object_mut()) {
                    o.insert("reason".into(), Value::from(r.as_str()));
                }
                v
            }
        }
    }
}

impl Serialize for Receipt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// A shape defect found in a peer's receipt (check `policy.receipt-shape`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptDefect {
    /// Machine code: `not_object`, `accepted_missing` (absent or `null`),
    /// `accepted_not_boolean` (present, of another type: `"true"`), `fallback_missing`,
    /// `fallback_invalid`, `unavailable_features_not_array`, `entry_not_object`,
    /// `feature_set_missing`, `effect_missing`, `missing_capabilities_invalid`,
    /// `mode_not_string`, `notes_not_array`, `reason_not_string`,
    /// `mode_without_degradation`.
    pub code: &'static str,
    /// Where (a JSON pointer-ish path; a result that is no object names the whole result
    /// and its JSON type, `(the whole result, a JSON null)`).
    pub path: String,
    /// Whether the defect violates a MUST (the receipt is then not usable); only
    /// `mode_without_degradation` is non-fatal.
    pub fatal: bool,
}

/// The result of reading a peer's receipt. Nothing here widens a grant: a host reads it to
/// log, surface to a human, or apply the named fallback.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptReport {
    /// `accepted`, if it was a boolean.
    pub accepted: Option<bool>,
    /// The receipt, when no fatal defect was found.
    pub receipt: Option<Receipt>,
    /// Every defect found.
    pub defects: Vec<ReceiptDefect>,
}

/// Validates a `featureSets/update` result's shape (§6.7) and reads it. An optional member
/// written `null` (`mode`, `reason`, `notes`, `unavailableFeatures`, `missingCapabilities`)
/// is read as absent, as [`crate::protocol::given`] reads every optional member; `accepted`,
/// a refusal's `fallback` and an entry's `featureSet` and `effect` are required and a `null`
/// there is the defect it names.
pub fn parse_receipt(v: &Value) -> ReceiptReport {
    let mut defects = Vec::new();
    let mut defect = |code: &'static str, path: &str, fatal: bool| {
        defects.push(ReceiptDefect {
            code,
            path: path.to_owned(),
            fatal,
        })
    };
    let Some(obj) = v.as_object() else {
        // Named in words: an empty pointer printed as "receipt defect at " named nothing.
        let whole = format!(
            "(the whole result, a JSON {})",
            crate::jsonrpc::json_type_name(v)
        );
        defect("not_object", &whole, true);
        return ReceiptReport {
            accepted: None,
            receipt: None,
            defects,
        };
    };
    let accepted = obj.get("accepted").and_then(Value::as_bool);
    let strings = |v: Option<&Value>| -> Option<Vec<String>> {
        match v.filter(|v| !v.is_null()) {
            None => Some(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(|x| x.as_str().map(str::to_owned)).collect(),
            Some(_) => None,
        }
    };
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            defect("reason_not_string", "/reason", true);
            None
        }
    };
    let receipt = match accepted {
        // §6.7: a boolean; one written as another type (`"true"`) is there, and said so.
        None if obj.get("accepted").is_some_and(|a| !a.is_null()) => {
            defect("accepted_not_boolean", "/accepted", true);
            None
        }
        None => {
            defect("accepted_missing", "/accepted", true);
            None
        }
        Some(false) => {
            let fallback = match obj.get("fallback") {
                None | Some(Value::Null) => {
                    defect("fallback_missing", "/fallback", true);
                    None
                }
                Some(Value::String(s)) if s == "mcp-only" => Some(Fallback::McpOnly),
                Some(Value::String(s)) if s == "close" => Some(Fallback::Close),
                Some(_) => {
                    defect("fallback_invalid", "/fallback", true);
                    None
                }
            };
            let missing = strings(obj.get("missingCapabilities"));
            if missing.is_none() {
                defect("missing_capabilities_invalid", "/missingCapabilities", true);
            }
            match (fallback, missing) {
                (Some(fallback), Some(missing_capabilities)) => Some(Receipt::Refused {
                    fallback,
                    missing_capabilities,
                    reason,
                }),
                _ => None,
            }
        }
        Some(true) => {
            let mode = match obj.get("mode") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    defect("mode_not_string", "/mode", true);
                    None
                }
            };
            let mut entries = Vec::new();
            let mut ok = true;
            match obj.get("unavailableFeatures") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let at = format!("/unavailableFeatures/{i}");
                        let Some(e) = item.as_object() else {
                            defect("entry_not_object", &at, true);
                            ok = false;
                            continue;
                        };
                        let fs = e.get("featureSet").and_then(Value::as_str);
                        let effect = e.get("effect").and_then(Value::as_str);
                        let missing = strings(e.get("missingCapabilities"));
                        if fs.is_none() {
                            defect("feature_set_missing", &format!("{at}/featureSet"), true);
                        }
                        if effect.is_none() {
                            defect("effect_missing", &format!("{at}/effect"), true);
                        }
                        if missing.is_none() {
                            defect(
                                "missing_capabilities_invalid",
                                &format!("{at}/missingCapabilities"),
                                true,
                            );
                        }
                        match (fs, effect, missing) {
                            (Some(fs), Some(effect), Some(missing)) => {
                                entries.push(UnavailableFeature {
                                    feature_set: fs.to_owned(),
                                    missing_capabilities: missing,
                                    effect: effect.to_owned(),
                                    reason: e
                                        .get("reason")
                                        .and_then(Value::as_str)
                                        .map(str::to_owned),
                                })
                            }
                            _ => ok = false,
                        }
                    }
                }
                Some(_) => {
                    defect(
                        "unavailable_features_not_array",
                        "/unavailableFeatures",
                        true,
                    );
                    ok = false;
                }
            }
            let notes = match obj.get("notes") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(n)) => n.clone(),
                Some(_) => {
                    defect("notes_not_array", "/notes", true);
                    ok = false;
                    Vec::new()
                }
            };
            if mode.is_some() && entries.is_empty() && ok {
                defect("mode_without_degradation", "/mode", false);
            }
            ok.then_some(Receipt::Accepted {
                mode,
                unavailable_features: entries,
                notes,
            })
        }
    };
    let fatal = defects.iter().any(|d| d.fatal);
    ReceiptReport {
        accepted,
        receipt: if fatal { None } else { receipt },
        defects,
    }
}
