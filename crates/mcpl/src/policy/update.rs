//! The server side of `featureSets/update` (§5.3, §6.7): params, the grant state machine
//! and its diagnostics.

use super::*;

// featureSets/update (§5.3, §6.7)

/// The JSON-RPC form a `featureSets/update` arrived in (§6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Carries an id: may set the grant, answered with a receipt.
    Request,
    /// No id: only `disabled` reductions apply; never establishes readiness.
    Notification,
}

/// A `featureSets/update` the receiver must reject as malformed (`-32602`); the state then
/// grants nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `params` is neither an object nor absent/`null`.
    #[error("featureSets/update params must be an object: the sender must send {{effectiveCapabilities, enabled?, disabled?}} (§5.3)")]
    ParamsNotObject,
    /// A list member is not an array of strings, `null` included. Reading (§5.3, §6.7): a
    /// list written `null` is not read as absent, since `enabled` absent enables every
    /// declared set and `disabled` absent disables none, either of which may widen what a
    /// host writing `null` meant; so it is refused (fail closed), and the text says how to
    /// leave the member out.
    #[error("featureSets/update `{field}` must be an array of strings (`null` is refused, not read as absent: omit the member to leave it out): the sender must list capability paths or feature-set names as strings (§5.3)")]
    NotStringArray {
        /// The offending member.
        field: &'static str,
    },
    /// An `effectiveCapabilities` entry is not a well-formed path or pattern.
    #[error("featureSets/update effectiveCapabilities: {0}; the sender must fix the entry")]
    Pattern(#[from] PatternError),
    /// A path is both granted and denied (§5.4: fail closed, reject as malformed).
    #[error(
        "featureSets/update: {path:?} appears in both effectiveCapabilities and deniedCapabilities, so the update is malformed (§5.4); the sender must list it in one of them only"
    )]
    GrantedAndDenied {
        /// The conflicting path (or entry).
        path: String,
    },
    /// A list has more entries than [`MAX_POLICY_LIST_ENTRIES`] (for `disabled` on a
    /// Notification: the accumulated list would).
    #[error("featureSets/update {field}: {count} entries exceed the limit of {limit}; the sender must send fewer (a `prefix.*` pattern names many at once)")]
    TooManyEntries {
        /// The list.
        field: &'static str,
        /// The limit.
        limit: usize,
        /// How many entries it had (or the accumulated list would have).
        count: usize,
    },
    /// An `enabled` or `disabled` list whose entries hold more than
    /// [`MAX_POLICY_LIST_BYTES`] (for `disabled` on a Notification: the accumulated list
    /// would).
    #[error("featureSets/update {field}: its entries hold {bytes} bytes, over the limit of {limit}; the sender must send shorter names (a `prefix.*` pattern names many at once)")]
    ListTooLarge {
        /// The list.
        field: &'static str,
        /// The limit.
        limit: usize,
        /// How many bytes its entries hold (or the accumulated list's would).
        bytes: usize,
    },
}

/// Most entries read from each `featureSets/update` list (`effectiveCapabilities`,
/// `deniedCapabilities`, `enabled`, `disabled`), and most `disabled` entries accumulated by
/// Notifications (§6.7). The vocabulary has 17 capability paths and a manifest declares its
/// sets, so a longer list is hostile rather than useful; it is refused whole, before any
/// entry is read, with `-32602` and `data: { reason, field, limit, count }`, and the grant
/// fails closed like any malformed update.
pub const MAX_POLICY_LIST_ENTRIES: usize = 1024;

/// Most bytes the entries of an `enabled` or `disabled` list hold, the `disabled` entries
/// accumulated by Notifications included (§6.7): the server keeps them, and §6.3 sets no
/// length for a name. 256 KiB: 1,024 names of 256 bytes. A longer list is refused whole
/// with `-32602` and `data: { reason, field, limit, bytes }`, and the grant fails closed
/// like any malformed update.
pub const MAX_POLICY_LIST_BYTES: usize = 256 * 1024;

impl PolicyError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::ParamsNotObject => "params_not_object",
            PolicyError::NotStringArray { .. } => "not_string_array",
            PolicyError::Pattern(p) => p.code(),
            PolicyError::GrantedAndDenied { .. } => "granted_and_denied",
            PolicyError::TooManyEntries { .. } => "too_many_entries",
            PolicyError::ListTooLarge { .. } => "list_too_large",
        }
    }

    /// The `-32602` answer, with `data: { reason }` (plus `field`, `limit` and `count` for
    /// [`PolicyError::TooManyEntries`]).
    pub fn to_error(&self) -> ErrorObject {
        let data = match self {
            PolicyError::TooManyEntries {
                field,
                limit,
                count,
            } => json!({ "reason": self.code(), "field": field, "limit": limit, "count": count }),
            PolicyError::ListTooLarge {
                field,
                limit,
                bytes,
            } => json!({ "reason": self.code(), "field": field, "limit": limit, "bytes": bytes }),
            _ => json!({ "reason": self.code() }),
        };
        ErrorObject::invalid_params(self.to_string()).with_data(data)
    }
}

/// Validated `featureSets/update` params (either form). Parsing does not yet apply the
/// Notification restrictions; [`ServerPolicyState::apply`] does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateParams {
    /// `effectiveCapabilities` resolved to a grant; `None` when absent.
    pub effective: Option<Grant>,
    /// Whether `deniedCapabilities` was present (diagnostic only, never used to authorize).
    pub denied_present: bool,
    /// `enabled`, if present.
    pub enabled: Option<Vec<NamePattern>>,
    /// `disabled` (empty when absent).
    pub disabled: Vec<NamePattern>,
}

pub(super) fn string_array<'a>(
    params: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<Vec<&'a str>>, PolicyError> {
    match params.get(field) {
        None => Ok(None),
        Some(Value::Array(a)) if a.len() > MAX_POLICY_LIST_ENTRIES => {
            Err(PolicyError::TooManyEntries {
                field,
                limit: MAX_POLICY_LIST_ENTRIES,
                count: a.len(),
            })
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().ok_or(PolicyError::NotStringArray { field }))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(PolicyError::NotStringArray { field }),
    }
}

impl UpdateParams {
    /// Validates a params object. `null` is read as `{}`. Malformed lists, malformed grant
    /// entries and a path both granted and denied are errors. An explicit `null` list member
    /// is malformed too (fail closed: it is not "absent"). A denied entry conflicts when it
    /// equals a granted entry or resolves to a granted path. Each list holds at most
    /// [`MAX_POLICY_LIST_ENTRIES`] entries, and the conflict check is linear in them.
    pub fn parse(params: &Value) -> Result<UpdateParams, PolicyError> {
        let empty = Map::new();
        let obj = match params {
            Value::Null => &empty,
            Value::Object(o) => o,
            _ => return Err(PolicyError::ParamsNotObject),
        };
        let effective_entries = string_array(obj, "effectiveCapabilities")?;
        let denied_entries = string_array(obj, "deniedCapabilities")?;
        let enabled = string_array(obj, "enabled")?;
        let disabled = string_array(obj, "disabled")?;
        for (field, list) in [("enabled", &enabled), ("disabled", &disabled)] {
            let bytes = list.iter().flatten().map(|e| e.len()).sum();
            if bytes > MAX_POLICY_LIST_BYTES {
                return Err(PolicyError::ListTooLarge {
                    field,
                    limit: MAX_POLICY_LIST_BYTES,
                    bytes,
                });
            }
        }
        let effective = match &effective_entries {
            Some(e) => Some(Grant::from_patterns(e.iter().copied())?),
            None => None,
        };
        if let (Some(denied), Some(granted)) = (&denied_entries, &effective) {
            let entries: HashSet<&str> = effective_entries.iter().flatten().copied().collect();
            for d in denied {
                let textual = entries.contains(d);
                let overlap = Pattern::parse(d).ok().and_then(|p| {
                    p.resolved()
                        .intersection(granted.capabilities())
                        .iter()
                        .next()
                });
                if textual || overlap.is_some() {
                    let path = overlap.map_or_else(|| (*d).to_owned(), |c| c.as_str().to_owned());
                    return Err(PolicyError::GrantedAndDenied { path });
                }
            }
        }
        let names = |v: Vec<&str>| v.into_iter().map(|s| NamePattern(s.to_owned())).collect();
        Ok(UpdateParams {
            effective,
            denied_present: denied_entries.is_some(),
            enabled: enabled.map(names),
            disabled: disabled.map(names).unwrap_or_default(),
        })
    }
}

/// A non-fatal observation while applying an update, for the session's diagnostics stream.
/// `Display` says what the host wrote and what came of it (the server's diagnostic text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDiagnostic {
    /// `notification_field_discarded` (a grant field on a Notification, §6.7) or
    /// `unknown_feature_set` (an `enabled`/`disabled` entry matching no declared set).
    pub code: &'static str,
    /// The field name or entry concerned.
    pub detail: String,
}

/// The kinds of [`PolicyDiagnostic`] the policy state machine makes: [`Self::code`] is the
/// one place each code is spelt and [`Self::describe`] the one place its text is written,
/// so the state machine and the server's diagnostics cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyCode {
    /// An `enabled`/`disabled` entry that matches no declared feature set (§6.3).
    UnknownFeatureSet,
    /// A grant field a Notification may not change (§6.7).
    NotificationFieldDiscarded,
}

impl PolicyCode {
    /// Every kind, for reading a code back ([`Self::of`]).
    const ALL: [Self; 2] = [Self::UnknownFeatureSet, Self::NotificationFieldDiscarded];

    /// The stable machine code.
    pub(crate) const fn code(self) -> &'static str {
        match self {
            Self::UnknownFeatureSet => "unknown_feature_set",
            Self::NotificationFieldDiscarded => "notification_field_discarded",
        }
    }

    /// The kind a code names, if it is one of the policy module's.
    fn of(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == code)
    }

    /// What a diagnostic of this kind about `detail` says.
    fn describe(self, detail: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownFeatureSet => write!(
                f,
                "featureSets/update lists {detail} in enabled or disabled, matching no feature \
                 set this server declares, so selecting or disabling nothing (§6.3)"
            ),
            Self::NotificationFieldDiscarded => write!(
                f,
                "a featureSets/update Notification carried {detail}, which only a Request may \
                 change (§6.7): discarded, only its disabled list applied"
            ),
        }
    }
}

impl PolicyDiagnostic {
    /// A diagnostic of `kind` about `detail`.
    pub(crate) fn new(kind: PolicyCode, detail: String) -> Self {
        Self {
            code: kind.code(),
            detail,
        }
    }

    /// Whether this diagnostic is of `kind`.
    pub(crate) fn is(&self, kind: PolicyCode) -> bool {
        self.code == kind.code()
    }
}

impl std::fmt::Display for PolicyDiagnostic {
    /// The text for a code of the policy module's; a code it does not know (a diagnostic
    /// built by hand) shows its detail as it is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match PolicyCode::of(self.code) {
            Some(kind) => kind.describe(&self.detail, f),
            None => f.write_str(&self.detail),
        }
    }
}

/// What applying an update produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// For a Request, the degradation receipt to answer with; `None` for a Notification.
    pub receipt: Option<Receipt>,
    /// Diagnostics to surface (never silently dropped).
    pub diagnostics: Vec<PolicyDiagnostic>,
    /// What a Request granted beyond the server's advertisement
    /// ([`ServerPolicyState::set_advertised`]), narrowed away (empty for a Notification).
    pub excess: GrantExcess,
}

/// The paths a policy Request granted that the server does not advertise. §5.4 makes
/// `effectiveCapabilities` the intersection of the advertisement and host policy, so
/// [`ServerPolicyState::apply`] grants only the advertised part (fail closed: advertisement
/// is never the host's to widen) and reports the rest here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantExcess {
    /// Unadvertised paths `effectiveCapabilities` named exactly: a defect of the host.
    pub named: CapabilitySet,
    /// Unadvertised paths reached only by a `*` pattern, which resolves against the
    /// vocabulary rather than the advertisement (§5.4's one-segment wildcard).
    pub by_pattern: CapabilitySet,
}

impl GrantExcess {
    /// What the `effectiveCapabilities` entries `entries` grant beyond `advertised`: the
    /// one §5.4 reading the server ([`ServerPolicyState::apply`]) and `mcpl check-host`
    /// share. An entry that is no well-formed path or pattern reaches nothing.
    pub fn of(entries: &[&str], advertised: CapabilitySet) -> GrantExcess {
        let mut named = CapabilitySet::EMPTY;
        let mut reached = CapabilitySet::EMPTY;
        for e in entries {
            // An exact entry (a `*` pattern never parses as a path).
            if let Ok(c) = e.parse::<Capability>() {
                named.insert(c);
            } else if let Ok(p) = crate::capability::Pattern::parse(e) {
                reached = reached.union(p.resolved());
            }
        }
        let named = named.difference(advertised);
        GrantExcess {
            named,
            by_pattern: reached.difference(advertised).difference(named),
        }
    }

    /// Whether nothing was granted beyond the advertisement.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.by_pattern.is_empty()
    }
}

/// The server's negotiated-policy state (§5.3, §6.7), driven by `featureSets/update`.
/// Starts not ready and granting nothing; only a well-formed Request makes it ready.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerPolicyState {
    pub(super) ready: bool,
    pub(super) grant: Grant,
    pub(super) selection: Selection,
    /// Shared with the other connections of a server serving the same manifest.
    pub(super) declarations: std::sync::Arc<FeatureSets>,
    /// The ceiling of every grant: what the server advertises (§5.4).
    pub(super) advertised: CapabilitySet,
    /// The grant the last policy Request sent; `grant` is its part within `advertised`.
    pub(super) offered: Grant,
}

impl ServerPolicyState {
    /// A fresh state for a server declaring `declarations` and advertising `advertised`
    /// (the ceiling of every grant, §5.4; [`Self::set_advertised`] changes it): not ready,
    /// nothing granted. The advertisement is an argument, not a default, so a caller that
    /// forgets it gets no grant wider than it chose ([`CapabilitySet::ALL`] says "every
    /// path", e.g. to test the policy alone).
    pub fn new(
        declarations: impl Into<std::sync::Arc<FeatureSets>>,
        advertised: CapabilitySet,
    ) -> Self {
        ServerPolicyState {
            ready: false,
            grant: Grant::none(),
            selection: Selection::default(),
            declarations: declarations.into(),
            advertised,
            offered: Grant::none(),
        }
    }

    /// What the server advertises (§5.1: the `experimental.mcpl` tree, and `tools` from
    /// the MCP capabilities): the ceiling of every grant [`Self::apply`] takes, which
    /// grants only the advertised part of a Request's `effectiveCapabilities` (§5.4: the
    /// grant is the intersection of the advertisement and host policy; advertisement is
    /// never widened by the host) and reports the rest ([`Outcome::excess`]). The grant in
    /// force only narrows here: a path the server stops advertising leaves it at once
    /// (§6.7: removals first), and a path it adds (or advertises again) is granted by no
    /// earlier Request, even one whose `effectiveCapabilities` reached it (`channels.*`,
    /// or a path named while unadvertised): §17.5 step 3, additions never auto-grant, and a
    /// widening follows tell → receipt → activate (§6.7), so only a later Request grants it.
    pub fn set_advertised(&mut self, advertised: CapabilitySet) {
        self.advertised = advertised;
        // What the last Request offered beyond the grant in force is forgotten, so no
        // later advertisement revives it.
        self.offered = self.grant.intersect(advertised);
        self.grant = self.offered;
    }

    /// Takes `offered` as the host's grant: in force within the advertisement.
    fn take_grant(&mut self, offered: Grant) {
        self.offered = offered;
        self.grant = offered.intersect(self.advertised);
    }

    /// The ceiling of every grant: as [`Self::new`] or [`Self::set_advertised`] set it.
    pub fn advertised(&self) -> CapabilitySet {
        self.advertised
    }

    /// Whether the initial policy Request has been applied (§5.3).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The current grant (empty until ready).
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The grant the last policy Request offered, as sent: [`Self::grant`] is its part
    /// within the advertisement (§5.4), what is outside is what the host took as granted
    /// though the server never advertised it ([`Outcome::excess`]).
    pub fn offered(&self) -> &Grant {
        &self.offered
    }

    /// The current selection (`enabled` / accumulated `disabled`).
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The declarations the derivation runs over.
    pub fn declarations(&self) -> &FeatureSets {
        &self.declarations
    }

    /// Grants nothing, keeping readiness and the selection: what a policy message that could
    /// not be read leaves (§6.7, §6.4 fail closed), as malformed params do in [`Self::apply`].
    pub fn grant_nothing(&mut self) {
        self.take_grant(Grant::none());
    }

    /// Back to the state before any policy was applied (not ready, nothing granted, no
    /// selection), keeping the declarations (still shared with the other connections).
    pub fn reset(&mut self) {
        self.ready = false;
        self.take_grant(Grant::none());
        self.selection = Selection::default();
    }

    /// Replaces the declarations (e.g. after a manifest change; an `Arc` shares them with
    /// other connections); the grant is unaffected.
    pub fn set_declarations(&mut self, declarations: impl Into<std::sync::Arc<FeatureSets>>) {
        self.declarations = declarations.into();
    }

    /// Whether behaviour needing `c` may run now: ready and granted.
    pub fn allows(&self, c: Capability) -> bool {
        self.ready && self.grant.allows(c)
    }

    /// Each declared set's current status. Before readiness every set is unavailable.
    pub fn statuses(&self) -> BTreeMap<String, FeatureSetStatus> {
        derive(&self.declarations, &self.grant, &self.selection)
    }

    /// Whether the named set is available now (false before readiness or if undeclared).
    pub fn is_available(&self, name: &str) -> bool {
        self.ready
            && self
                .declarations
                .sets
                .get(name)
                .is_some_and(|d| derive_one(name, d, &self.grant, &self.selection).is_available())
    }

    /// The accepting receipt for the current state (§6.7).
    pub fn receipt(&self) -> Receipt {
        Receipt::from_statuses(&self.statuses())
    }

    /// Applies one `featureSets/update` (§5.3, §6.7).
    ///
    /// - **Request**: the whole policy is replaced. Absent `effectiveCapabilities` grants
    ///   nothing, and only its advertised part is granted ([`Self::set_advertised`]; the
    ///   rest is [`Outcome::excess`]); `enabled` (if present) is the allowlist; `disabled`
    ///   is the new disabled list. The state becomes ready and the accepting receipt is
    ///   returned.
    /// - **Notification**: only `disabled` entries apply, added to the current disabled list;
    ///   `effectiveCapabilities`, `deniedCapabilities` and `enabled` are discarded with a
    ///   diagnostic; readiness and the grant are untouched.
    ///
    /// Malformed params (either form) fail closed: the grant becomes empty and the error is
    /// returned for the caller to answer `-32602` (a Notification cannot be answered; the
    /// caller reports it as a diagnostic).
    pub fn apply(&mut self, form: Form, params: &Value) -> Result<Outcome, PolicyError> {
        let parsed = match UpdateParams::parse(params) {
            Ok(p) => p,
            Err(e) => {
                self.take_grant(Grant::none());
                return Err(e);
            }
        };
        let mut diagnostics = Vec::new();
        match form {
            Form::Request => {
                let offered = parsed.effective.unwrap_or_default();
                self.take_grant(offered);
                let entries: Vec<&str> = params
                    .get("effectiveCapabilities")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let excess = GrantExcess::of(&entries, self.advertised);
                self.selection = Selection {
                    enabled: parsed.enabled,
                    disabled: parsed.disabled,
                };
                self.ready = true;
                let all = self
                    .selection
                    .enabled
                    .iter()
                    .flatten()
                    .map(|p| (p, true))
                    .chain(self.selection.disabled.iter().map(|p| (p, false)));
                for (p, is_enabled) in all {
                    let hit = self.declarations.sets.keys().any(|n| {
                        if is_enabled {
                            p.selects(n)
                        } else {
                            p.covers(n)
                        }
                    });
                    if !hit {
                        diagnostics.push(PolicyDiagnostic::new(
                            PolicyCode::UnknownFeatureSet,
                            p.as_str().to_owned(),
                        ));
                    }
                }
                Ok(Outcome {
                    receipt: Some(self.receipt()),
                    diagnostics,
                    excess,
                })
            }
            Form::Notification => {
                let obj = params.as_object();
                for field in ["effectiveCapabilities", "deniedCapabilities", "enabled"] {
                    if obj.is_some_and(|o| o.contains_key(field)) {
                        diagnostics.push(PolicyDiagnostic::new(
                            PolicyCode::NotificationFieldDiscarded,
                            field.to_owned(),
                        ));
                    }
                }
                // Linear: repeats are found in a set, and the accumulated list is bounded.
                let mut known: HashSet<String> = self
                    .selection
                    .disabled
                    .iter()
                    .map(|p| p.as_str().to_owned())
                    .collect();
                let mut fresh = HashSet::new();
                for p in &parsed.disabled {
                    if !known.contains(p.as_str()) {
                        fresh.insert(p.as_str());
                    }
                }
                let count = known.len() + fresh.len();
                if count > MAX_POLICY_LIST_ENTRIES {
                    self.take_grant(Grant::none());
                    return Err(PolicyError::TooManyEntries {
                        field: "disabled",
                        limit: MAX_POLICY_LIST_ENTRIES,
                        count,
                    });
                }
                let bytes = known.iter().map(String::len).sum::<usize>()
                    + fresh.iter().map(|e| e.len()).sum::<usize>();
                if bytes > MAX_POLICY_LIST_BYTES {
                    self.take_grant(Grant::none());
                    return Err(PolicyError::ListTooLarge {
                        field: "disabled",
                        limit: MAX_POLICY_LIST_BYTES,
                        bytes,
                    });
                }
                drop(fresh);
                for p in parsed.disabled {
                    // As for a Request: an entry that disables nothing declared (a misspelt
                    // name, a partial `*` like `memory*`) is reported, never a silent no-op.
                    if !self.declarations.sets.keys().any(|n| p.covers(n)) {
                        diagnostics.push(PolicyDiagnostic::new(
                            PolicyCode::UnknownFeatureSet,
                            p.as_str().to_owned(),
                        ));
                    }
                    if known.insert(p.as_str().to_owned()) {
                        self.selection.disabled.push(p);
                    }
                }
                Ok(Outcome {
                    receipt: None,
                    diagnostics,
                    excess: GrantExcess::default(),
                })
            }
        }
    }
}
