//! The texts of [`ServerDiagnostic`]s too long to write inline (`grant_beyond_advertisement`,
//! `injection_dropped`) and the policy module's diagnostics as the server reports them.

use super::{DroppedInjections, ServerDiagnostic};
use crate::policy::{InjectionDenied, PolicyCode};
use crate::session::clip_text;

/// How many `unknown_feature_set` entries of one policy message are named; the rest are
/// counted.
const UNKNOWN_SETS_NAMED: usize = 8;

/// The policy module's diagnostics for one `featureSets/update` (§6.3, §6.7) as the
/// server reports them: every `unknown_feature_set` entry of the message in one diagnostic
/// (its `detail` names the first [`UNKNOWN_SETS_NAMED`] entries, each quoted, and counts
/// the rest), the others as they are. One per entry let a single message of a thousand
/// misnamed entries push everything else out of what a `Session::diagnostics` subscriber
/// holds.
pub(crate) fn from_policy(
    diagnostics: Vec<crate::policy::PolicyDiagnostic>,
) -> Vec<ServerDiagnostic> {
    let (unknown, rest): (Vec<_>, Vec<_>) = diagnostics
        .into_iter()
        .partition(|d| d.is(PolicyCode::UnknownFeatureSet));
    let mut out: Vec<ServerDiagnostic> = rest.into_iter().map(ServerDiagnostic::Policy).collect();
    if !unknown.is_empty() {
        let mut named: Vec<String> = unknown
            .iter()
            .take(UNKNOWN_SETS_NAMED)
            .map(|d| {
                let mut entry = d.detail.clone();
                clip_text(&mut entry);
                format!("{entry:?}")
            })
            .collect();
        if unknown.len() > UNKNOWN_SETS_NAMED {
            named.push(format!("{} more", unknown.len() - UNKNOWN_SETS_NAMED));
        }
        out.push(ServerDiagnostic::Policy(
            crate::policy::PolicyDiagnostic::new(PolicyCode::UnknownFeatureSet, named.join(", ")),
        ));
    }
    out
}

/// The `grant_beyond_advertisement` detail: what was granted beyond the advertisement, and
/// that it is not in force (§5.4).
pub(super) fn grant_beyond_advertisement(
    f: &mut std::fmt::Formatter<'_>,
    named: crate::capability::CapabilitySet,
    by_pattern: crate::capability::CapabilitySet,
) -> std::fmt::Result {
    f.write_str("the policy Request granted what this server does not advertise (")?;
    if !named.is_empty() {
        write!(f, "named: {}", named.sorted_paths().join(", "))?;
    }
    if !by_pattern.is_empty() {
        let sep = if named.is_empty() { "" } else { "; " };
        let paths = by_pattern.sorted_paths().join(", ");
        write!(f, "{sep}reached by a `*` pattern: {paths}")?;
    }
    f.write_str(
        "); the grant is the intersection of the advertisement and host policy (§5.4), so \
         those paths are not in force and behave as never granted",
    )
}

/// The `injection_dropped` detail: what was dropped and what to change (§5.4, §6.4, §10.8).
pub(super) fn injection_dropped(
    f: &mut std::fmt::Formatter<'_>,
    hook_set: &Option<String>,
    dropped: &DroppedInjections,
) -> std::fmt::Result {
    match dropped {
        DroppedInjections::All {
            feature_set,
            count,
            reason,
        } => {
            // `ServerState` does not know the hook's own set (`hook_set` is `None`), and the
            // reason (`Unknown feature set` …) does not name the set: name the one claimed.
            match hook_set {
                Some(hook) => write!(
                    f,
                    "the before-inference hook of feature set {hook:?} answered {count} \
                     injection(s)"
                )?,
                None => write!(f, "a before-inference answer carried {count} injection(s)")?,
            }
            if feature_set.as_deref() != hook_set.as_deref() {
                match feature_set {
                    Some(claimed) => write!(f, " under feature set {claimed:?}")?,
                    None => f.write_str(" under no feature set")?,
                }
            }
            write!(f, " that were dropped: {reason}")
        }
        DroppedInjections::One {
            feature_set,
            position,
            denied,
        } => {
            write!(
                f,
                "feature set {feature_set:?}: dropped an injection at position {position}: "
            )?;
            match denied {
                InjectionDenied::Denied(d) => write!(
                    f,
                    "`{c}` is not granted (§5.4): declare it in the set's uses, or inject there \
                     only while the grant in force allows `{c}`",
                    c = d.capability
                ),
                InjectionDenied::UnknownPosition(_) | InjectionDenied::MissingPosition => f
                    .write_str(
                        "it is not an App. B.4 position (system, beforeUser, afterUser) and is \
                         never authorized",
                    ),
                InjectionDenied::Undeclared { capability, .. } => write!(
                    f,
                    "the set does not declare `{capability}` in its uses (§6.4 rule 2); add it \
                     to the uses"
                ),
                other => write!(f, "{other}"),
            }
        }
    }
}
