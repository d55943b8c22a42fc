//! A manifest change on a live server connection (§17.3, §17.8): the changed manifest's
//! feature sets declared on the session, and the `mcpl/manifestChanged` announcements still
//! to send coalesced into one, part of [`ServerState`](super::ServerState), which
//! `server::Server` drives; and the manifest the connections of one server share
//! ([`SharedManifest`]).

use std::sync::Arc;

use serde_json::Value;

use crate::capability::{Capability, CapabilitySet};
use crate::jsonrpc::{Message, Notification};
use crate::manifest::domains::ChangeDomain;
use crate::manifest::ManifestChanged;
use crate::policy::{FeatureSets, ServerPolicyState};

/// A manifest and its feature-set declarations (§6.1) parsed once, for the
/// [`ServerState`](super::ServerState)s of many connections to share: a clone copies two pointers, so a
/// server's idle connections hold one manifest between them, not one each.
#[derive(Debug, Clone)]
pub struct SharedManifest {
    manifest: Arc<Value>,
    declarations: Arc<FeatureSets>,
    /// The paths its capability tree advertises (§5.1; `tools` is never sourced here).
    advertised: CapabilitySet,
}

impl From<Value> for SharedManifest {
    fn from(manifest: Value) -> SharedManifest {
        SharedManifest::new(manifest)
    }
}

impl SharedManifest {
    /// Parses `manifest`'s feature-set declarations and capability tree and keeps them.
    pub fn new(manifest: Value) -> SharedManifest {
        let declarations = FeatureSets::from_mcpl(&manifest).0;
        let advertised = crate::capability::advertised(&manifest).capabilities;
        SharedManifest {
            manifest: Arc::new(manifest),
            declarations: Arc::new(declarations),
            advertised,
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> &Value {
        &self.manifest
    }

    /// Its feature-set declarations.
    pub fn declarations(&self) -> &Arc<FeatureSets> {
        &self.declarations
    }
}

/// What a server serving `manifest` advertises (§5.1): its capability tree, and `tools`
/// when the MCP capabilities carry it (`tools` is never an `experimental.mcpl` member).
pub(crate) fn advertisement(manifest: &SharedManifest, tools: bool) -> CapabilitySet {
    let mut advertised = manifest.advertised;
    if tools {
        advertised.insert(Capability::Tools);
    }
    advertised
}

/// Declares the changed `manifest`'s feature sets on the live session, and makes its
/// advertisement the grant's ceiling (§5.4, [`ServerPolicyState::set_advertised`]; `tools`
/// as it was). The grant in force only narrows: a path the change no longer advertises
/// leaves it at once (§6.7: removals first), and a path the change adds is not granted,
/// even when the host's last grant reached it (a `channels.*` pattern, or a path named
/// while unadvertised), until a later policy Request grants it (§17.5 step 3: additions
/// never auto-grant; §6.7: tell → receipt → activate). Reading: a set the change adds is
/// derived like any other under the grant in force (and the host's `enabled` allowlist,
/// when it sent one), so a set using only granted paths may be available at once; a set
/// only names granted capabilities it uses (§6.4), so no capability is widened, and a host
/// that has not yet fetched the change refuses a use of the new name (`-32003`), which
/// fails closed.
pub(crate) fn declare_changed(policy: &mut ServerPolicyState, manifest: &SharedManifest) {
    policy.set_declarations(manifest.declarations().clone());
    let tools = policy.advertised().contains(Capability::Tools);
    policy.set_advertised(advertisement(manifest, tools));
}

/// The `mcpl/manifestChanged` not yet handed to the wire: at most one, later changes merged
/// into it, so a host that does not read holds a connection to one announcement however many
/// changes it misses (§17.8). Boxed for an idle connection's memory (issue #20).
#[derive(Debug, Default)]
pub(crate) struct PendingAnnouncement(Option<Box<ManifestChanged>>);

impl PendingAnnouncement {
    /// Adds `change` to what is still to be announced ([`coalesce`]).
    pub(crate) fn offer(&mut self, change: ManifestChanged) {
        match self.0.as_mut() {
            Some(pending) => coalesce(pending, change),
            None => self.0 = Some(Box::new(change)),
        }
    }

    /// The announcement to send now, if any; nothing is pending after it.
    pub(crate) fn take(&mut self) -> Option<ManifestChanged> {
        self.0.take().map(|c| *c)
    }

    /// Drops what is pending (the connection no longer announces: §3.2, §17.10).
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }
}

/// Merges `next` into the announcement still waiting to be sent: the newest revision, and
/// the union of both changes' domains in wire order. Reading (§17.3, §17.8): only the latest
/// revision matters, since the host fetches the complete manifest (§17.4) and diffs it
/// against the one in force; a server SHOULD coalesce rapid changes, and the union may name
/// a domain that changed and changed back, which over-announces, the safe direction.
fn coalesce(pending: &mut ManifestChanged, next: ManifestChanged) {
    let domains = ChangeDomain::ALL
        .into_iter()
        .filter(|d| pending.domains.contains(d) || next.domains.contains(d))
        .collect();
    *pending = ManifestChanged {
        revision: next.revision,
        domains,
    };
}

/// `change` as the notification a server writes (§17.3).
pub(crate) fn announcement(change: &ManifestChanged) -> Message {
    Message::Notification(Notification {
        method: ManifestChanged::METHOD.to_owned(),
        params: serde_json::to_value(change).ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(revision: &str, domains: &[ChangeDomain]) -> ManifestChanged {
        ManifestChanged {
            revision: revision.into(),
            domains: domains.to_vec(),
        }
    }

    #[test]
    fn s17_8_pending_announcements_coalesce_to_the_newest_revision_and_union_of_domains() {
        let mut p = PendingAnnouncement::default();
        p.offer(change("r1", &[ChangeDomain::ALL[2]]));
        p.offer(change("r2", &[ChangeDomain::ALL[0]]));
        assert_eq!(
            p.take(),
            Some(change("r2", &[ChangeDomain::ALL[0], ChangeDomain::ALL[2]]))
        );
        assert_eq!(p.take(), None);
    }
}
