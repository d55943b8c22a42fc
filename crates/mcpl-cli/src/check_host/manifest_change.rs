//! The manifest-change probes (§17): the checker announces `mcpl/manifestChanged` three
//! times and judges what the host does with each, as far as a server sees it on the wire.
//!
//! 1. **An unparseable manifest**: the fetch is answered with a result that is no object.
//!    The host learned nothing, so the previous manifest stands and one failure drops no
//!    MCPL privilege (§17.5 step 1): no capability withdrawn nor available feature set made
//!    unavailable, the connection kept, and `channels/list` (when `channels.register` was
//!    granted) answered as it was just before the change (§14.3: a host not serving it
//!    refuses it throughout, which drops nothing). It is announced under a revision of its
//!    own, so a host coalescing announcements by revision (§17.8) fetches every change.
//! 2. **A valid narrowing**: [`served::manifest_narrowed`] removes `channels.incoming` and a
//!    feature set ([`GONE_SETS`]); once the host has read it, a push under the removed set
//!    and a `channels/incoming` for the checker's registered channel are refused (§17.5
//!    step 3, §6.7: revoked host-first, then told). A probe answered with a result before
//!    the host sent any policy message after the fetch is sent again once it has, or a
//!    step after the fetch, and judged then ([`Run::refused_after`]); the capability the
//!    narrowing takes out of the grant is told by a policy Request (§6.7,
//!    [`Run::judge_narrowing_told`]).
//! 3. **A partially invalid change**: [`served::manifest_partial`] parses, declares two sets
//!    invalidly, removes the other set of [`GONE_SETS`], adds `modelInfo` and advertises
//!    `channels.incoming` again: the removal still applies (§17.5 step 1), and the additions
//!    are granted by no earlier policy (§17.5 step 3: tell → receipt → activate, §6.7), so
//!    `model/info` and `channels/incoming` are refused unless a policy Request granting
//!    their capability came (and was answered) since.
//!
//! Throughout, a policy change between an announcement and the host's `mcpl/manifest` is
//! acting before fetching (§17.3), and more than one policy message for one change is one
//! update per item (§17.5 step 4, a warning: the receipt itself is host-internal, §17.6);
//! a Request only widening the grant is not counted (§17.5 step 3: a widening is a policy
//! decision of its own, tell → receipt → activate).
//! Once the host has read a fetched manifest, the checker's own view of the grant follows it
//! as the library server's does ([`mcpl::policy::ServerPolicyState::set_advertised`]: a
//! removal leaves the grant at once, an addition joins it only by a later Request), so the
//! hooks and deliveries judged elsewhere are judged under the narrowed grant from then on.
//!
//! Readings where the spec leaves the wire open (fail closed where it can be told):
//! - "acting" on an announcement (§17.3) is read off the host's policy messages: one that
//!   changes the grant or a set's status before the fetch; a refusal cannot be told from
//!   one for another cause, so it is not read as acting;
//! - a manifest that "does not parse at all" (§17.5 step 1) is served as a result that is
//!   no JSON object (a frame that is not JSON would be a framing fault, not a manifest);
//! - an added feature set whose `uses` the grant already allows is not an addition judged
//!   here: a feature set carries no authority (§6.4), so using it widens no grant; only a
//!   capability advertised again is (§17.5 step 3);
//! - §17.5 step 4's one receipt is host-internal (§17.6): what a server sees of it is the
//!   policy messages one change is followed by, so more than one warns rather than fails;
//! - §17.5 step 3's `tagOntology` bullet (a changed ontology invalidates prior acceptance,
//!   §16.5) is not judged: acceptance is an explicit host or operator act a server never
//!   sees, and what it steers (treatment, `implies` closure, §16.7) is host-internal. Its
//!   only possible trace on the wire, a `push/event` result's `inferenceId` (§9.3), also
//!   follows consumer rules and the host default, so a push answered with or without one
//!   shows nothing of acceptance either way; and §16.6 keeps tags and ontologies out of the
//!   grant, which the checks above already judge whatever the domain changed.
//!
//! A host MAY ignore the announcement (§17.3): a change it does not fetch within a step
//! skips the checks it would have fed. The phase is bounded by [`LIST_STEPS`] step for the
//! `channels/list` before the changes, then [`PHASE_STEPS`] steps for the changes, every
//! wait within each ending at its deadline at the latest.

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::protocol::channels::{ChannelsIncoming, ChannelsList};
use mcpl::protocol::manifest::ManifestChanged;
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::served::{self, GONE_SETS};
use super::session::{secs, Reply, Run};
use crate::check::report::Status;

/// How many steps (`--timeout`) the three changes may take: three announcements, each
/// awaiting its fetch, a ping round trip and its probes, share them.
pub(super) const PHASE_STEPS: u32 = 3;

/// How many steps the `channels/list` asked before the changes may take
/// ([`Changes::list_before`]), before [`PHASE_STEPS`] start: the phase takes both.
pub(super) const LIST_STEPS: u32 = 1;

/// The checks this phase judges.
const FETCHED_FIRST: &str = "host.manifest-fetched-before-acting";
const UNPARSEABLE: &str = "host.manifest-unparseable-keeps-previous";
const REMOVALS: &str = "host.manifest-removals-revoked";
const PARTIAL: &str = "host.manifest-partial-removals-applied";
const ADDITIONS: &str = "host.manifest-additions-not-granted";
const ONE_UPDATE: &str = "host.manifest-one-update-per-change";
const NARROWING_TOLD: &str = "host.manifest-narrowing-requested";
const IDS: [&str; 7] = [
    FETCHED_FIRST,
    UNPARSEABLE,
    REMOVALS,
    PARTIAL,
    ADDITIONS,
    ONE_UPDATE,
    NARROWING_TOLD,
];

/// What the checker answers `mcpl/manifest` with.
#[derive(Debug, Clone)]
enum Serving {
    /// Its current manifest.
    Manifest(Value),
    /// Once a result that is no manifest (§17.5: "does not parse at all"), then the manifest
    /// kept here, unchanged: a host fetching again learns that nothing changed.
    Unparseable(Value),
}

/// What the probes after one change showed: each probe judged (refused or not), and each
/// one not refused with an error, described; `late`, the probes that got a result before
/// the host sent any policy message after the fetch and were refused when sent again, each
/// with whether such a message had come by then ([`Run::refused_after`]); `unsent`, a probe
/// due that the phase's budget left no time for.
#[derive(Debug, Default)]
struct Seen {
    shown: Vec<String>,
    defects: Vec<String>,
    late: Vec<(String, bool)>,
    unsent: bool,
}

/// The phase's state, read and written where the host's messages are handled
/// ([`Run::handle`]).
#[derive(Debug)]
pub(super) struct Changes {
    serving: Serving,
    /// `mcpl/manifest` answers the host has been written.
    fetches: u64,
    /// An announcement went out and no `mcpl/manifest` has come since.
    awaiting_fetch: bool,
    /// The phase is running: policy messages are counted and compared.
    watching: bool,
    /// Policy changes the host made while [`Changes::awaiting_fetch`], described (§17.3).
    unfetched: Vec<String>,
    /// Policy messages (a Request, or a Notification carrying grant fields) since the answer
    /// to the fetch that showed the last change ([`Run::fetch_answered`]), but for a Request only widening the grant (§17.5 step 3: a
    /// widening follows its own tell → receipt → activate, a policy decision of its own).
    since_fetch: u32,
    /// Of those, the Requests (§6.7: a change to the effective grant goes by Request).
    requested: u32,
    /// The capabilities the last fetched manifest took out of the grant as the host read it
    /// (§6.7: a narrowing of the effective grant, which the host must tell by Request).
    lost_at_fetch: Vec<String>,
    /// When the host was written the answer to the fetch that showed the last change.
    fetched_at: Option<Instant>,
    /// The last manifest the host read, the one the initialize result carried (§5.2) until
    /// it fetches another: a fetch answered with it again is no change
    /// ([`Run::fetch_answered`]).
    last_read: Option<Value>,
    /// The grant this server held once the host read the last change it fetched.
    grant_at_fetch: mcpl::capability::Grant,
    /// The feature sets available then (§6.4: a set's status is the grant's and the host's
    /// selection's; a set disabled since is a narrowing too).
    available_at_fetch: Vec<String>,
    /// What `channels/list` got just before the unparseable manifest was announced: `true`
    /// a result, `false` an error (§14.3: a host not serving it refuses it), `None` not
    /// probed or neither.
    list_before: Option<bool>,
    /// The probes since the last verdict that got neither a result nor an error, described.
    quiet: Vec<String>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            serving: Serving::Manifest(served::manifest()),
            fetches: 0,
            awaiting_fetch: false,
            watching: false,
            unfetched: Vec::new(),
            since_fetch: 0,
            requested: 0,
            lost_at_fetch: Vec::new(),
            fetched_at: None,
            last_read: Some(served::manifest()),
            grant_at_fetch: mcpl::capability::Grant::none(),
            available_at_fetch: Vec::new(),
            list_before: None,
            quiet: Vec::new(),
        }
    }
}

impl Changes {
    /// The policy messages counted since the last change was fetched ([`Changes::since_fetch`]).
    pub(super) fn policy_messages_since_fetch(&self) -> u32 {
        self.since_fetch
    }

    /// The answer to a `mcpl/manifest` now, and the manifest the host reads in it (none for
    /// an unparseable answer). Serving once unparseable turns back to the manifest kept.
    fn answer(&mut self) -> (Value, Option<Value>) {
        match std::mem::replace(&mut self.serving, Serving::Manifest(Value::Null)) {
            Serving::Manifest(m) => {
                self.serving = Serving::Manifest(m.clone());
                (m.clone(), Some(m))
            }
            Serving::Unparseable(kept) => {
                self.serving = Serving::Manifest(kept);
                (unparseable(), None)
            }
        }
    }
}

impl Run {
    /// The answer to the host's `mcpl/manifest` (§17.4), noting that it fetched (§17.3: it
    /// may act on the announcement from now on) and, once the answer is written, what it
    /// read ([`Run::fetch_answered`]).
    pub(super) fn fetch_requested(&mut self) -> (Value, Option<Value>) {
        self.changes.awaiting_fetch = false;
        self.changes.answer()
    }

    /// The host has been written the answer to its fetch: the checker's view of the grant
    /// follows the manifest it read (§6.7, §17.5), as the library server's does.
    ///
    /// Reading (§17.4: a host may fetch at any time; r4 finding 1): what a change is
    /// followed by is counted from the fetch that showed it, an unparseable answer or a
    /// manifest other than the last one read. A fetch answered with the manifest the host
    /// last read is no change: it leaves the counts, the withdrawn capabilities and the
    /// fetch's time as they are, so fetching again neither forgets a narrowing nor a
    /// Request that told it, nor restarts the wait for that Request.
    pub(super) fn fetch_answered(&mut self, read: Option<Value>) {
        self.changes.fetches = self.changes.fetches.saturating_add(1);
        if read.is_some() && read == self.changes.last_read {
            return;
        }
        if read.is_some() {
            self.changes.last_read.clone_from(&read);
        }
        self.changes.since_fetch = 0;
        self.changes.requested = 0;
        self.changes.fetched_at = Some(Instant::now());
        let before = *self.policy.grant();
        if let Some(m) = read {
            self.policy.set_advertised(served::advertisement_of(&m));
            self.policy
                .set_declarations(mcpl::policy::FeatureSets::from_mcpl(&m).0);
        }
        self.changes.lost_at_fetch = before
            .capabilities()
            .iter()
            .filter(|c| !self.policy.grant().allows(*c))
            .map(|c| c.as_str().to_owned())
            .collect();
        self.changes.grant_at_fetch = *self.policy.grant();
        self.changes.available_at_fetch = self.available_sets();
    }

    /// Whether a policy Request granting `grant` tells the last fetched change's
    /// narrowing (r4 finding 2): it is the first Request since that fetch and leaves out a
    /// capability the fetch withdrew ([`Changes::lost_at_fetch`]), whatever else it grants.
    /// Against the grant after the fetch, already narrowed, such a Request would read as a
    /// pure widening (§6.7, §17.5 step 3: revoked host-first, then the Request).
    pub(super) fn tells_lost_at_fetch(&self, grant: &mcpl::capability::Grant) -> bool {
        let c = &self.changes;
        c.watching
            && c.requested == 0
            && c.lost_at_fetch
                .iter()
                .any(|lost| !grant.capabilities().iter().any(|cap| cap.as_str() == lost))
    }

    /// The feature sets available now, by name.
    fn available_sets(&self) -> Vec<String> {
        self.policy
            .statuses()
            .into_iter()
            .filter(|(_, s)| s.is_available())
            .map(|(name, _)| name)
            .collect()
    }

    /// What `channels/list` gets now, when `channels.register` is granted: the answer the
    /// one after the unparseable manifest is compared with ([`Changes::list_before`]), so a
    /// host refusing it throughout (§14.3) is not read as dropping a privilege.
    async fn list_before_change(&mut self, deadline: Instant) {
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

    /// Notes a policy message of the host's during the phase: `changed` when it changed the
    /// grant or a set's status, `widening` when it only widened them (nothing withdrawn nor
    /// made unavailable), `request` when it came as a Request, `what` naming it. A widening
    /// is not counted among the messages a change is followed by: §17.5 step 3 makes it a
    /// policy decision of its own, told → receipted → activated after the change's narrowing
    /// (finding F3: a narrowing Request then a widening one warned
    /// `host.manifest-one-update-per-change`).
    pub(super) fn policy_message_seen(
        &mut self,
        (changed, widening, request): (bool, bool, bool),
        what: &str,
    ) {
        let c = &mut self.changes;
        if !c.watching {
            return;
        }
        if !widening {
            c.since_fetch = c.since_fetch.saturating_add(1);
            if request {
                c.requested = c.requested.saturating_add(1);
            }
        }
        if changed && c.awaiting_fetch && c.unfetched.len() < 3 {
            c.unfetched.push(what.to_owned());
        }
    }

    /// The phase: three announcements and their probes, then the verdicts.
    pub(super) async fn manifest_changes(&mut self) {
        self.stage = "the manifest-change probes";
        if self.mcp_only || !self.ready {
            let why = "no policy in force (MCP-only, or no receipt): a manifest change would \
                       change no grant";
            self.record_unset(&IDS, Status::Skip, why);
            return;
        }
        // The list the unparseable change is compared with: a step of its own
        // ([`LIST_STEPS`]), so it never shrinks what the changes' probes may see.
        let listed_by = Instant::now() + self.bounds.step.saturating_mul(LIST_STEPS);
        self.list_before_change(listed_by).await;
        if self.closed {
            return;
        }
        let deadline = Instant::now() + self.bounds.step.saturating_mul(PHASE_STEPS);
        self.changes.watching = true;
        let mut counts = Vec::new();
        let why = self.each_change(deadline, &mut counts).await;
        self.changes.watching = false;
        self.changes.awaiting_fetch = false;
        if self.closed {
            return;
        }
        self.conclude_changes(&counts, why);
    }

    /// The three changes in order; the reason the checks not judged were not, if any.
    /// `counts`: the policy messages each fetched change was followed by.
    async fn each_change(&mut self, deadline: Instant, counts: &mut Vec<u32>) -> Option<String> {
        // 1. Unparseable, announced under a revision of its own (§17.8: a host MAY coalesce
        // announcements, so one sharing the next change's revision could go unfetched).
        let revision = json!(mcpl::manifest::revision(&unparseable()).unwrap_or_default());
        let kept = match &self.changes.serving {
            Serving::Manifest(m) | Serving::Unparseable(m) => m.clone(),
        };
        self.changes.serving = Serving::Unparseable(kept);
        if let Some(why) = self.announce(&revision, deadline).await {
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
        let mut revoked = false;
        if incoming {
            let what = "channels/incoming for check:a".to_owned();
            let n = seen.defects.len();
            let params = served::incoming("check:a");
            let again = params.clone();
            let probe = (ChannelsIncoming::NAME, params, again);
            self.refused_after(probe, &what, deadline, &mut seen).await;
            revoked = seen.defects.len() == n && seen.shown.last() == Some(&what);
        }
        if self.closed {
            return None;
        }
        self.judge_narrowing_told(deadline).await;
        if self.closed {
            return None;
        }
        counts.push(self.changes.since_fetch);
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

    /// Sends `mcpl/manifestChanged` naming `revision` and awaits the host's fetch, within a
    /// step and the phase's `deadline`; `Some(why)` when it did not come.
    async fn announce(&mut self, revision: &Value, deadline: Instant) -> Option<String> {
        if self.closed {
            return Some("the connection ended".into());
        }
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
    fn bound_within(&self, deadline: Instant) -> Duration {
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
        let revision = manifest.get("revision").cloned().unwrap_or(Value::Null);
        self.changes.serving = Serving::Manifest(manifest);
        if let Some(why) = self.announce(&revision, deadline).await {
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

    /// Sends `probe` (a method, its params and the params to send it again with), which
    /// the manifest the host read no longer allows, and notes `what` in `seen`: shown when
    /// judged, a defect when not refused with an error.
    ///
    /// Reading (§6.7, §17.5 step 3; finding F1): the host revokes host-first, then tells the
    /// server by Request, but nothing bounds when it applies a fetched manifest: a host may
    /// validate and diff it off its reader. What a server can hold it to is the order: once
    /// the host sent a policy message after the fetch, the removal is in force. So a result
    /// that came before any such message is not judged yet: the host is given until a step
    /// after the fetch (within the phase's `deadline`) to tell the change, and the probe is
    /// sent again after that message (the push under a fresh `eventId`, §9.4) and judged.
    /// A host that told nothing within the step is judged by the probe sent then: §6.7 wants
    /// a Request for a narrowed grant, and a removal not in force a step after the fetch is
    /// reduced late, the over-permission window §6.7 forbids (fail closed: the spec names no
    /// time, and a step is what every other wait of the checker's is given).
    ///
    /// Whether the host had told is read where the result stands on the wire
    /// ([`Run::told_when_answered`]; r3 finding 1): a policy message between the probe and
    /// its result puts the removal in force before that result, which is then judged as it
    /// is (§6.7: reduction first, then the Request; §17.5: judged at response receipt). A
    /// result held when the phase's budget leaves no time to send the probe again is judged
    /// as it is too (r3 finding 3): it was accepted after the host read the removal, and
    /// the excuse of a later tell cannot be tried (fail closed).
    async fn refused_after(
        &mut self,
        probe: (&str, Value, Value),
        what: &str,
        deadline: Instant,
        seen: &mut Seen,
    ) {
        let (method, params, again) = probe;
        let bound = self.bound_within(deadline);
        if bound.is_zero() {
            seen.unsent = true;
            return;
        }
        let mut reply = self.call_within(method, params, bound).await;
        let mut retold = "";
        if matches!(reply, Reply::Result(_)) && !self.told_when_answered() {
            let told = self.await_tell(deadline).await;
            let bound = self.bound_within(deadline);
            if self.closed {
                return;
            }
            if bound.is_zero() {
                seen.shown.push(what.to_owned());
                seen.defects.push(format!(
                    "{what} got {} after the host read the manifest removing it, before any \
                     policy message of the host's followed the fetch, and the phase's budget \
                     ({PHASE_STEPS} × --timeout) left no time to send it again: judged by that \
                     answer",
                    reply.describe()
                ));
                return;
            }
            retold = if told {
                " (sent again after the host's policy message following the fetch)"
            } else {
                " (sent again a step after the fetch, no policy message having followed it)"
            };
            reply = self.call_within(method, again, bound).await;
            if matches!(reply, Reply::Error(_)) {
                seen.late.push((what.to_owned(), told));
            }
        }
        let Seen { shown, defects, .. } = seen;
        match reply {
            Reply::Error(_) => shown.push(what.to_owned()),
            Reply::Result(r) => {
                shown.push(what.to_owned());
                let reply = Reply::Result(r);
                defects.push(format!("{what} got {}{retold}", reply.describe()));
            }
            // Silence, or an answer that could not be read, is no acceptance: it shows
            // nothing of the removal (the silence is host.answers-every-request's kind).
            Reply::Closed => {}
            other => {
                let d = format!("{what} got {}", other.describe());
                self.changes.quiet.push(d);
            }
        }
    }

    /// Awaits the host's first policy message since the last change was fetched (none counted
    /// yet), handling what comes meanwhile, until a step after that answer or `deadline`;
    /// whether it came.
    async fn await_tell(&mut self, deadline: Instant) -> bool {
        self.await_policy(deadline, |c| c.since_fetch).await
    }

    /// [`Run::await_tell`] for what `count` reads off the phase's state.
    async fn await_policy(&mut self, deadline: Instant, count: fn(&Changes) -> u32) -> bool {
        let from = self.changes.fetched_at.unwrap_or_else(Instant::now);
        let until = (from + self.bounds.step).min(deadline);
        while count(&self.changes) == 0 {
            match self.next_until(until).await {
                Some(m) => self.handle(m).await,
                None => break,
            }
        }
        count(&self.changes) > 0
    }

    /// §6.7 (a Request for any change to the effective grant, reductions included) and
    /// §17.5 step 3 (revoked host-first, then the Request): when the fetched narrowing took
    /// a capability out of the grant ([`Changes::lost_at_fetch`]), a `featureSets/update`
    /// Request follows, awaited until a step after the fetch (within `deadline`). None by
    /// then fails (fail closed: the spec names no time; a step is every wait's bound);
    /// the budget ending first, before a step passed, skips. When the grant did not change
    /// (only a feature set went: a set carries no authority, §6.4), no Request is required.
    async fn judge_narrowing_told(&mut self, deadline: Instant) {
        let lost = self.changes.lost_at_fetch.join(", ");
        if lost.is_empty() {
            let d = "the fetched narrowing took no capability out of the grant (only a feature \
                     set went, which carries no authority, §6.4): no policy Request is required \
                     (§6.7: one for a change to the effective grant)";
            self.record(NARROWING_TOLD, Status::Skip, d);
            return;
        }
        if self.await_policy(deadline, |c| c.requested).await {
            let d = format!(
                "the fetched narrowing withdrew {lost}, and the host told it by a \
                 featureSets/update Request (§6.7: reduced first, then the Request)"
            );
            self.record(NARROWING_TOLD, Status::Pass, d);
            return;
        }
        if self.closed {
            return;
        }
        let waited = self
            .changes
            .fetched_at
            .map(|f| f.elapsed())
            .unwrap_or_default();
        let how = if self.changes.since_fetch > 0 {
            "only a featureSets/update Notification followed it (§6.7: a grant change goes by \
             Request; host.policy-is-request)"
        } else {
            "no policy message followed it"
        };
        if waited < self.bounds.step {
            let d = format!(
                "the fetched narrowing withdrew {lost}; {how} before the manifest-change \
                 probes' budget ({PHASE_STEPS} × --timeout) ran out, {} after the fetch",
                secs(waited)
            );
            self.record(NARROWING_TOLD, Status::Skip, d);
            return;
        }
        let d = format!(
            "the fetched narrowing withdrew {lost} from the grant, and {how} within {} of the \
             fetch (§6.7: a Request for any change to the effective grant, reductions \
             included; §17.5 step 3: revoked host-first, then the Request)",
            secs(waited)
        );
        self.record(NARROWING_TOLD, Status::Fail, d);
    }

    /// Records `id` from what the probes showed (`seen`); `why` says why they must be
    /// refused, `none` why nothing was probed.
    fn judge_refusals(&mut self, id: &str, seen: &Seen, why: &str, none: &str) {
        let Seen {
            shown,
            defects,
            late,
            unsent,
        } = seen;
        if !defects.is_empty() {
            let d = format!("{}, though {why}", defects.join("; "));
            self.record(id, Status::Fail, d);
        } else if shown.is_empty() && !self.changes.quiet.is_empty() {
            let d = format!(
                "{}: which shows nothing of the removal",
                self.changes.quiet.join("; ")
            );
            self.record(id, Status::Skip, d);
        } else if shown.is_empty() && *unsent {
            // Finding F7: a probe was due, the budget left no time to send it.
            let d = format!(
                "the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out before \
                 the probes after the change could be sent"
            );
            self.record(id, Status::Skip, d);
        } else if shown.is_empty() {
            self.record(id, Status::Skip, none);
        } else {
            let mut d = format!("{} refused with an error once {why}", shown.join(" and "));
            let (told, silent): (Vec<_>, Vec<_>) = late.iter().partition(|(_, t)| *t);
            let names = |l: Vec<&(String, bool)>| {
                l.into_iter()
                    .map(|(w, _)| w.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            };
            if !told.is_empty() {
                d.push_str(&format!(
                    " ({} got a result before the host told its policy change, and was refused \
                     once it had: the host applies a fetched manifest after reading it, §6.7's \
                     order kept)",
                    names(told)
                ));
            }
            if !silent.is_empty() {
                d.push_str(&format!(
                    " ({} got a result after the fetch, and was refused when sent again a step \
                     after it, no policy message having followed the fetch)",
                    names(silent)
                ));
            }
            self.record(id, Status::Pass, d);
        }
        self.changes.quiet.clear();
    }

    /// §17.5 step 1: after an unparseable manifest the previous one stands and a single
    /// failure drops no MCPL privilege: no narrowing policy message since the host read it
    /// (no capability withdrawn, no available feature set made unavailable), the connection
    /// kept, and `channels/list`, when it was granted then, answered as it was just before
    /// the announcement ([`Changes::list_before`]: an error before and after is no change,
    /// §14.3 letting a host refuse it; an error after a result fails).
    async fn judge_unparseable(&mut self, deadline: Instant) {
        let listed = self
            .changes
            .grant_at_fetch
            .allows(Capability::ChannelsRegister);
        if self.closed {
            let how = self.gone().unwrap_or("the connection ended").to_owned();
            let d = format!(
                "after one unparseable mcpl/manifest answer, {how} (§17.5 step 1: the previous \
                 manifest stands; MCPL may be suspended after repeated failures, never one)"
            );
            self.record(UNPARSEABLE, Status::Fail, d);
            return;
        }
        let lost = self
            .changes
            .grant_at_fetch
            .capabilities()
            .iter()
            .filter(|c| !self.policy.grant().allows(*c))
            .map(|c| c.as_str())
            .collect::<Vec<_>>();
        if !lost.is_empty() {
            let d = format!(
                "after one unparseable mcpl/manifest answer the host narrowed its grant, \
                 withdrawing {} (§17.5 step 1: nothing was learned, the previous manifest \
                 stands, and a single failure must not drop MCPL privileges)",
                lost.join(", ")
            );
            self.record(UNPARSEABLE, Status::Fail, d);
            return;
        }
        let now = self.available_sets();
        let disabled = self
            .changes
            .available_at_fetch
            .iter()
            .filter(|s| !now.contains(s))
            .map(String::as_str)
            .collect::<Vec<_>>();
        if !disabled.is_empty() {
            let d = format!(
                "after one unparseable mcpl/manifest answer the host's policy made feature \
                 set(s) {} unavailable (§17.5 step 1: nothing was learned, the previous \
                 manifest stands, and a single failure must not drop MCPL privileges)",
                disabled.join(", ")
            );
            self.record(UNPARSEABLE, Status::Fail, d);
            return;
        }
        let bound = self.bound_within(deadline);
        let kept = "after one unparseable mcpl/manifest answer the host kept the connection and \
                    sent no narrowing policy (no capability withdrawn, no available feature set \
                    disabled)";
        if !listed || bound.is_zero() {
            let why = if listed {
                format!("the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out")
            } else {
                "channels.register not granted".to_owned()
            };
            self.record(
                UNPARSEABLE,
                Status::Pass,
                format!("{kept}; channels/list not probed: {why}"),
            );
            return;
        }
        let before = self.changes.list_before;
        match self.call_within(ChannelsList::NAME, json!({}), bound).await {
            Reply::Result(_) => self.record(
                UNPARSEABLE,
                Status::Pass,
                format!("{kept}; channels/list, granted before, still answered with a result"),
            ),
            Reply::Closed => {}
            // §14.3: a host not serving the inbound form refuses it with an error; refused
            // before the change as after, it shows no privilege dropped.
            Reply::Error(e) if before == Some(false) => self.record(
                UNPARSEABLE,
                Status::Pass,
                format!(
                    "{kept}; channels/list refused {} after it as before the change (§14.3: \
                     a host may refuse it), so nothing was dropped",
                    e.code
                ),
            ),
            Reply::Error(e) if before.is_none() => {
                let d = format!(
                    "{kept}; channels/list refused {} after it, and before the change it got \
                     no answer to compare, which shows neither a grant kept nor one dropped",
                    e.code
                );
                self.record(UNPARSEABLE, Status::Skip, d);
            }
            Reply::Error(e) => {
                let d = format!(
                    "after one unparseable mcpl/manifest answer, channels/list (channels.register \
                     granted then, no policy change since, answered with a result just before \
                     the change) was refused {} (§17.5 step 1: the previous manifest stands; a \
                     single failure must not drop MCPL privileges)",
                    e.code
                );
                self.record(UNPARSEABLE, Status::Fail, d);
            }
            other => {
                let d = format!(
                    "after one unparseable mcpl/manifest answer the host kept the connection and \
                     sent no narrowing policy; channels/list got {}, which shows neither a grant \
                     kept nor one dropped",
                    other.describe()
                );
                self.record(UNPARSEABLE, Status::Skip, d);
            }
        }
    }

    /// §17.5 step 3 (additions never auto-grant; §6.7 tell → receipt → activate): the
    /// partially invalid manifest adds `modelInfo`, never advertised before, and advertises
    /// `channels.incoming` again after the host revoked it (`again`: `Err` says why that
    /// one shows nothing). `model/info` and `channels/incoming` for check:a are refused
    /// unless a policy Request granting their capability came since, and was answered,
    /// before the host's answer; only a result is a use (silence shows nothing).
    async fn judge_additions(&mut self, again: Result<(), &str>, deadline: Instant) {
        let mut probes = vec![(
            ModelInfoRequest::NAME,
            json!({}),
            Capability::ModelInfo,
            "model/info (modelInfo added)",
        )];
        if again.is_ok() {
            probes.push((
                ChannelsIncoming::NAME,
                served::incoming("check:a"),
                Capability::ChannelsIncoming,
                "channels/incoming for check:a (channels.incoming advertised again)",
            ));
        }
        let (mut refused, mut used, mut quiet) = (Vec::new(), Vec::new(), Vec::new());
        for (method, params, needs, what) in probes {
            let bound = self.bound_within(deadline);
            if bound.is_zero() || self.closed {
                break;
            }
            let reply = self.call_within(method, params, bound).await;
            // §6.7: granted only under the grant in force when the answer came and, were a
            // later receipt held then, under the grant before it too (the host could not
            // have read it yet: tell → receipt → activate).
            let held = self.held_when_answered();
            let granted = self.as_answered(|run| run.policy.allows(needs))
                && held.map_or(true, |(before, _)| before.allows(needs));
            match reply {
                Reply::Closed => return,
                Reply::Error(e) => refused.push(format!("{what} refused {}", e.code)),
                Reply::Result(_) if granted => refused.push(format!(
                    "{what} answered, read after a policy Request granting {} and once its \
                     receipt was written (tell → receipt → activate)",
                    needs.as_str()
                )),
                Reply::Result(r) => {
                    let d = format!("{what} got {}", Reply::Result(r).describe());
                    used.push(d);
                }
                other => quiet.push(format!("{what} got {}", other.describe())),
            }
        }
        if !used.is_empty() {
            let d = format!(
                "{}, with no policy Request granting it since the fetched manifest advertised \
                 it, or before the host could have read that Request's receipt (§17.5 step 3: \
                 additions never auto-grant; §6.7: tell → receipt → activate)",
                used.join("; ")
            );
            self.record(ADDITIONS, Status::Fail, d);
        } else if !refused.is_empty() {
            let mut d = format!("{} (not auto-granted)", refused.join("; "));
            if let Err(why) = again {
                d.push_str(&format!("; channels/incoming not probed: {why}"));
            }
            self.record(ADDITIONS, Status::Pass, d);
        } else if !quiet.is_empty() {
            let d = format!(
                "{}: neither a use nor a refusal, so nothing is shown",
                quiet.join("; ")
            );
            self.record(ADDITIONS, Status::Skip, d);
        } else {
            let why =
                format!("the manifest-change probes' budget ({PHASE_STEPS} × --timeout) ran out");
            self.record(ADDITIONS, Status::Skip, why);
        }
    }

    /// The phase's last verdicts: acting before fetching, one update per change, and every
    /// check not judged skipped for `why`.
    fn conclude_changes(&mut self, counts: &[u32], why: Option<String>) {
        let fetched = self.changes.fetches > 0;
        if !self.changes.unfetched.is_empty() {
            let d = format!(
                "the host changed its policy after a mcpl/manifestChanged and before fetching \
                 mcpl/manifest: {} (§17.3: a host that acts on the announcement MUST fetch \
                 before changing anything; judged on its policy messages, all a server sees)",
                self.changes.unfetched.join("; ")
            );
            self.record(FETCHED_FIRST, Status::Fail, d);
        } else if fetched {
            let d = format!(
                "{} announcement(s) fetched; no policy change came between an announcement \
                 and its fetch (judged on policy messages, all a server sees)",
                self.changes.fetches
            );
            self.record(FETCHED_FIRST, Status::Pass, d);
        }
        if let Some(most) = counts.iter().copied().max() {
            if most > 1 {
                let d = format!(
                    "{most} policy messages followed one manifest change (§17.5 step 4: one \
                     receipt per change, not one per item; the receipt is host-internal, \
                     §17.6, so this judges its wire consequence, a warning)"
                );
                self.record(ONE_UPDATE, Status::Warn, d);
            } else {
                let d = format!(
                    "at most one policy message per manifest change ({} change(s) fetched; the \
                     receipt itself is host-internal, §17.6, so only its wire consequence is \
                     judged)",
                    counts.len()
                );
                self.record(ONE_UPDATE, Status::Pass, d);
            }
        }
        let why = why.unwrap_or_else(|| "not judged".into());
        self.record_unset(&IDS, Status::Skip, &why);
    }
}

/// The answer to a fetch that is no manifest (§17.5 step 1: "does not parse at all"): a
/// JSON string, not an object. Its revision (§17.2's digest of the value served) names the
/// first change's announcement.
fn unparseable() -> Value {
    json!("mcpl check-host: this is not a manifest (§17.5 probe)")
}
