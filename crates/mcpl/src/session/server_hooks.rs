//! A server's `context/beforeInference` hook (§10.1): whether it runs, and what of its
//! answer is sent. Part of [`ServerState`](super::ServerState), which `server::Server`
//! drives.

use std::collections::BTreeMap;

use super::rules::hook_answer_to_send;
use super::ServerDiagnostic;
use crate::capability::Grant;
use crate::policy::{FeatureSetStatus, FeatureSets};
use crate::protocol::hooks::BeforeInferenceResult;

/// The answer sent without running the hook when the hook's own set `hook_set` is not
/// available now (`available` says whether it is): the hook belongs to its feature set, and
/// while that set is disabled, not selected or its uses not granted, the turn's content is
/// not read under a set the receipt reported off (§6.7), and no injection is answered. The
/// empty answer still names the hook's set: §6.5 is silent for one, and other MCPL libraries
/// require `featureSet` on every answer (be liberal in what we send). `None`: run the hook
/// (a hook with no set of its own always runs, its answer judged when sent).
pub(crate) fn hook_not_run(
    hook_set: Option<&str>,
    available: impl FnOnce(&str) -> bool,
) -> Option<BeforeInferenceResult> {
    let set = hook_set.filter(|s| !available(s))?;
    Some(BeforeInferenceResult {
        feature_set: Some(set.to_owned()),
        ..BeforeInferenceResult::default()
    })
}

/// Drops what the host would refuse of the hook's answer `r`, by the core rule
/// ([`hook_answer_to_send`], the host's own judgement of each injection under the grant in
/// force now, §5.4, §10.8: checked as late as the server can), and returns an
/// `injection_dropped` diagnostic for each drop, telling the author what to change. The
/// grant in force is `grant` on an MCPL connection (`mcpl`) that is `ready`, else nothing
/// (§3.2, §5.3).
pub(crate) fn filter_hook_answer(
    r: &mut BeforeInferenceResult,
    hook_set: Option<&str>,
    mcpl: bool,
    ready: bool,
    grant: &Grant,
    decls: &FeatureSets,
    statuses: &BTreeMap<String, FeatureSetStatus>,
) -> Vec<ServerDiagnostic> {
    let grant = if mcpl && ready { *grant } else { Grant::none() };
    hook_answer_to_send(r, hook_set, &grant, decls, statuses)
        .into_iter()
        .map(|dropped| ServerDiagnostic::InjectionDropped {
            hook_set: hook_set.map(str::to_owned),
            dropped,
        })
        .collect()
}
