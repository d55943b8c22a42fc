//! The phase's course (§17.3–§17.5): the `channels/list` before the changes, the three
//! announcements in order, each awaiting its fetch and a ping round trip, and the push
//! probe after a valid change.

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::protocol::channels::{ChannelsIncoming, ChannelsList};
use mcpl::protocol::manifest::ManifestChanged;
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::super::served::{self, GONE_SETS};
use super::super::session::{secs, Reply, Run};
use super::{unparseable, Seen, Serving, PARTIAL, PHASE_STEPS, REMOVALS};

impl Run {
    /// What `channels/list` gets now, when `channels.register` is granted: the answer the
    /// one after the unparseable manifest is compared with ([`Changes::list_before`]), so a
    /// host refusing it throughout (§14.3) is not read as dropping a privilege.
    pub(super) async fn list_before_change(&mut self, deadline: Instant) {
        self.changes.list_before = None;
        let bound = self.bound_within(deadline);
        if bound.is_zero() || !self.policy.allows(Capability::ChannelsRegister) {
            return;
        }
        self.changes.list_before =
            match self.call_within(ChannelsList::NAME, json!({}), bound).await {
                Reply::Result(_) => Some(true),
                Reply::Error(_) => Some(false),
                _ => None,
            };
    }

    /// The three changes in order; the reason the checks not judged were not, if any.
    /// `counts`: the policy messages each fetched change was followed by.
    pub(super) async fn each_change(
        &mut self,
        deadline: Instant,
        counts: &mut Vec<u32>,
    ) -> Option<String> {
        // 1. Unparseable, announced under a revision of its own (§17.8: a host MAY coalesce
        // announcements, so one sharing the next change's revision could go unfetched).
        let kept = match &self.changes.serving {
            Serving::Manifest(m) | Serving::Unparseable(m) => m.clone(),
        };
        self.changes.serving = Serving::Unparseable(kept);
        if let Some(why) = self.announce(deadline).await {
            return Some(why);
        }
        self.settle_change(deadline).await;
        self.judge_unparseable(deadline).await;
        if self.closed {
            return None;
        }
        // 2. A valid narrowing.
        let incoming = self.channel_held && self.policy.allows(Capability::ChannelsIncoming);
        let narrowed = served::manifest_narrowed();
        let mut seen = match self
            .change_then_push(narrowed, GONE_SETS[0], "gone-1", deadline)
            .await
        {
            Ok(seen) => seen,
            Err(why) => return Some(why),
        };
        let (mut revoked, mut answered) = (false, false);
        if incoming {
            let what = "channels/incoming for check:a".to_owned();
            let n = seen.defects.len();
            let params = served::incoming("check:a");
            let again = params.clone();
            let probe = (ChannelsIncoming::NAME, params, again);
            self.refused_after(probe, &what, deadline, &mut seen).await;
            revoked = seen.defects.len() == n && seen.shown.last() == Some(&what);
            // Shown only when it got a result or an error: silence shows nothing.
            answered = seen.shown.contains(&what);
        }
        self.changes.incoming_answered = answered;
        if self.closed {
            return None;
        }
        self.judge_narrowing_told(deadline).await;
        if self.closed {
            return None;
        }
        self.judge_withdrawn_refused((incoming, answered), deadline)
            .await;
        if self.closed {
            return None;
        }
        counts.push(self.changes.since_fetch);
        self.held_removals(&mut seen);
        self.judge_refusals(
            REMOVALS,
            &seen,
            "the manifest the host fetched removed them (§17.5 step 3, §6.7: revoked at once, \
             host-first)",
            "neither pushEvents (with the removed set available) nor channels.incoming (with a \
             registered channel) was granted before the change: no removal to see revoked",
        );
        // 3. Partially invalid: one more removal, two additions.
        let partial = served::manifest_partial();
        let seen = match self
            .change_then_push(partial, GONE_SETS[1], "gone-2", deadline)
            .await
        {
            Ok(seen) => seen,
            Err(why) => return Some(why),
        };
        if self.closed {
            return None;
        }
        self.judge_refusals(
            PARTIAL,
            &seen,
            "the partially invalid manifest the host fetched removed it (§17.5 step 1: every \
             removal applies, whatever else failed validation)",
            "pushEvents was not granted, or the set unavailable, before the change: no removal \
             to see applied",
        );
        // The re-advertised capability shows an auto-grant only once the host revoked it.
        let again = match (incoming, revoked) {
            (true, true) => Ok(()),
            (true, false) => Err("the host did not refuse channels/incoming once \
                                  channels.incoming was removed (host.manifest-removals-revoked): \
                                  its advertising it again shows nothing"),
            (false, _) => Err(
                "channels.incoming was not granted with a registered channel \
                               before the changes",
            ),
        };
        self.judge_additions(again, deadline).await;
        counts.push(self.changes.since_fetch);
        None
    }

    /// Sends `mcpl/manifestChanged` naming the revision of what the next fetch is answered
    /// with ([`announced_revision`]) and awaits the host's fetch, within a step and the
    /// phase's `deadline`; `Some(why)` when it did not come.
    async fn announce(&mut self, deadline: Instant) -> Option<String> {
        if self.closed {
            return Some("the connection ended".into());
        }
        let revision = announced_revision(&self.changes.serving);
        let params = json!({ "revision": revision, "domains": ["capabilities", "featureSets"] });
        let fetches = self.changes.fetches;
        self.changes.awaiting_fetch = true;
        if self
            .peer
            .notify_raw(ManifestChanged::NAME, Some(params))
            .await
            .is_err()
        {
            self.on_closed();
            return Some("the connection ended".into());
        }
        let until = (Instant::now() + self.bounds.step).min(deadline);
        while self.changes.fetches == fetches {
            match self.next_until(until).await {
                Some(m) => self.handle(m).await,
                None => break,
            }
        }
        if self.changes.fetches > fetches {
            return None;
        }
        Some(if Instant::now() >= deadline {
            format!(
                "the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out \
                 before the host fetched the manifest"
            )
        } else {
            format!(
                "the host did not fetch mcpl/manifest within {} of a mcpl/manifestChanged \
                 (§17.3: a host MAY ignore it)",
                secs(self.bounds.step)
            )
        })
    }

    /// After a fetch: a ping round trip, so what the host sends in answer to the manifest
    /// it read (a policy Request, §6.7) comes before the probes.
    async fn settle_change(&mut self, deadline: Instant) {
        let until = (Instant::now() + self.bounds.step).min(deadline);
        self.round_trip(until).await;
    }

    /// What is left of a step before the phase's `deadline`; zero once it has passed.
    pub(super) fn bound_within(&self, deadline: Instant) -> Duration {
        self.bounds
            .step
            .min(deadline.saturating_duration_since(Instant::now()))
    }

    /// One valid change (§17.5 steps 2 and 3): serves `manifest`, announces it under its
    /// revision and awaits the host's fetch and a ping round trip, then sends a push under
    /// `set` (one of [`GONE_SETS`], which `manifest` removes), with `event_id`, when the
    /// host's rule allowed it before the change, and notes how it was answered
    /// ([`Run::refused_after`]). `Err(why)` when the host did not fetch.
    async fn change_then_push(
        &mut self,
        manifest: Value,
        set: &str,
        event_id: &str,
        deadline: Instant,
    ) -> Result<Seen, String> {
        let pushed = served::push(set, event_id);
        let again = served::push(set, &format!("{event_id}-again"));
        let allowed = self.host_rule(PushEvent::NAME, &pushed) == Ok(true);
        self.changes.serving = Serving::Manifest(manifest);
        if let Some(why) = self.announce(deadline).await {
            return Err(why);
        }
        self.settle_change(deadline).await;
        let mut seen = Seen::default();
        if allowed {
            let what = format!("push/event under {set}");
            let probe = (PushEvent::NAME, pushed, again);
            self.refused_after(probe, &what, deadline, &mut seen).await;
        }
        Ok(seen)
    }
}

/// The `revision` a `mcpl/manifestChanged` announcing `serving` carries: always of App. B.3's
/// shape (`^sha256:[A-Za-z0-9_-]{43}$`), since a host MAY ignore a schema-invalid
/// announcement (§17.3) and every check of the phase would then skip. A manifest's is its
/// §17.2 digest ([`mcpl::manifest::revision`], its own `revision` member left out). What is
/// deliberately no manifest ([`Serving::Unparseable`], §17.5 step 1) has no §17.2 digest
/// (that needs an object), so, reading: the announcement names the digest of the JSON value
/// the fetch is answered with ([`mcpl::manifest::value_digest`], JCS with no manifest rules):
/// well-formed, and its own, so a host coalescing by revision (§17.8) still fetches it. Only
/// what is fetched is broken, never the announcement.
fn announced_revision(serving: &Serving) -> String {
    match serving {
        Serving::Manifest(m) => {
            mcpl::manifest::revision(m).unwrap_or_else(|_| mcpl::manifest::value_digest(m))
        }
        Serving::Unparseable(_) => mcpl::manifest::value_digest(&unparseable()),
    }
}
