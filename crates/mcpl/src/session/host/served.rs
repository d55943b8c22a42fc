//! What the application serves (§11, §12): a capability it has no one to answer for
//! ([`HostRules::unserved`]) is taken out of the host's policy, so it is neither advertised
//! in `initialize` (§5.2) nor granted (§5.4: absence is denial), and a server's request
//! needing it is refused as not granted (`-32002`) rather than told it may send it and
//! then answered `-32601`.
//!
//! Reading (§5.4 gives the host's policy as patterns; the spec is silent on a host that
//! grants what it cannot serve, so fail closed): each policy entry resolving to an unserved
//! path is replaced by the exact paths it resolves to less the unserved ones, which grants
//! exactly what it granted less those; every other entry stays as written. An entry that
//! then grants nothing named only what cannot be served: its author's mistake, reported
//! ([`HostDiagnostic::NotServed`]), never a refusal to connect. An entry that still grants
//! something served (`*`) is no mistake and is not reported: a handler-less host whose
//! policy is `*` connects as it did, without the unserved leaves.

use super::*;
use crate::capability::{CapabilitySet, Pattern};

/// A policy with the unserved paths taken out (module docs).
pub(super) struct Served {
    /// The policy to apply.
    pub(super) policy: Vec<String>,
    /// The diagnostic naming the entries that grant nothing once the unserved paths are
    /// taken out, if any.
    pub(super) mistake: Option<HostDiagnostic>,
}

/// `policy` less what `unserved` names (module docs). An entry that does not parse is kept
/// as written: the caller refuses it ([`crate::capability::Grant::from_policy`]).
pub(super) fn served(policy: Vec<String>, unserved: CapabilitySet) -> Served {
    let mut out = Vec::with_capacity(policy.len());
    let mut entries = Vec::new();
    let mut named = CapabilitySet::EMPTY;
    for entry in policy {
        let resolved = match Pattern::parse(&entry) {
            Ok(p) => p.resolved(),
            Err(_) => CapabilitySet::EMPTY,
        };
        let dropped = resolved.intersection(unserved);
        if dropped.is_empty() {
            out.push(entry);
            continue;
        }
        let kept = resolved.difference(unserved);
        out.extend(kept.sorted_paths().into_iter().map(str::to_owned));
        if kept.is_empty() {
            named = named.union(dropped);
            entries.push(entry);
        }
    }
    let mistake = (!entries.is_empty()).then(|| HostDiagnostic::NotServed {
        entries,
        capabilities: named.sorted_paths(),
    });
    Served {
        policy: out,
        mistake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::Capability as C;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn s5_4_unserved_paths_leave_the_policy_and_a_policy_naming_only_them_is_reported() {
        let unserved = CapabilitySet::EMPTY
            .with(C::ModelInfo)
            .with(C::InferenceRequest)
            .with(C::InferenceRequestStreaming);
        let s = served(
            strings(&["*", "inferenceRequest.*", "channels.*"]),
            unserved,
        );
        assert_eq!(
            s.policy,
            strings(&["inferenceLifecycle", "pushEvents", "tools", "channels.*"])
        );
        assert_eq!(
            s.mistake,
            Some(HostDiagnostic::NotServed {
                entries: strings(&["inferenceRequest.*"]),
                capabilities: vec!["inferenceRequest.streaming"],
            })
        );
        // Nothing unserved: the policy as written, nothing reported.
        let s = served(strings(&["*", "modelInfo"]), CapabilitySet::EMPTY);
        assert_eq!((s.policy, s.mistake), (strings(&["*", "modelInfo"]), None));
    }
}
