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
//!    step after the fetch, and judged then ([`Run::refused_after`]); while the host's
//!    Request telling the narrowing awaits its receipt, `channels/incoming` is probed too
//!    and must already be refused ([`held`], §6.7: a reduction before its Request); the capability the
//!    narrowing takes out of the grant is told by a policy Request (§6.7,
//!    [`Run::judge_narrowing_told`]); once that Request is answered, `channels/incoming`
//!    is used once more and must be refused as a denied capability (§5.4,
//!    [`withdrawn`]).
//! 3. **A partially invalid change**: [`served::manifest_partial`] parses, declares two sets
//!    invalidly, removes the other set of [`GONE_SETS`], adds `modelInfo` and advertises
//!    `channels.incoming` again: the removal still applies (§17.5 step 1), and the additions
//!    are granted by no earlier policy (§17.5 step 3: tell → receipt → activate, §6.7), so
//!    `model/info` and `channels/incoming` are refused unless a policy Request granting
//!    their capability came (and was answered) since; while such a Request awaits its
//!    receipt, they are probed and must still be refused ([`held`], §6.7).
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

use serde_json::{json, Value};
use tokio::time::Instant;

use super::served;
use super::session::Run;
use crate::check::report::Status;

mod held;
mod phase;
mod removals;
mod verdicts;
mod withdrawn;

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
const WITHDRAWN_REFUSED: &str = "host.manifest-withdrawn-refused";
const IDS: [&str; 8] = [
    FETCHED_FIRST,
    UNPARSEABLE,
    REMOVALS,
    PARTIAL,
    ADDITIONS,
    ONE_UPDATE,
    NARROWING_TOLD,
    WITHDRAWN_REFUSED,
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
    /// Those of `shown` refused by a result refusing every message inside it
    /// ([`refuses_every_message`]): said in the verdict, the form judged elsewhere.
    in_result: Vec<String>,
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
    /// Of those, the Requests that told the fetched narrowing: they left out, as sent, a
    /// capability it withdrew ([`Run::tells_lost_at_fetch`]).
    told: u32,
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
    /// When the phase's budget ends, while it runs: what the probes sent while a receipt is
    /// held ([`held`]) are bounded by.
    deadline: Option<Instant>,
    /// Those probes are being sent: a policy Request read meanwhile sends none of its own.
    probing_held: bool,
    /// What they got since the last change was fetched, each kept until its verdict.
    held: Vec<held::HeldProbe>,
    /// One of them got no answer: none is sent again in the run ([`held`], finding F3).
    held_silent: bool,
    /// The time the checker spent awaiting them, in all: a request awaited meanwhile is
    /// given it back ([`Run::held_waited`]).
    held_waited: std::time::Duration,
    /// The `channels/incoming` probe after the narrowed fetch got an answer (a result or an
    /// error): the held probe of `channels.incoming` advertised again is sent only then.
    incoming_answered: bool,
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
            told: 0,
            lost_at_fetch: Vec::new(),
            fetched_at: None,
            last_read: Some(served::manifest()),
            grant_at_fetch: mcpl::capability::Grant::none(),
            available_at_fetch: Vec::new(),
            list_before: None,
            quiet: Vec::new(),
            deadline: None,
            probing_held: false,
            held: Vec::new(),
            held_silent: false,
            held_waited: std::time::Duration::ZERO,
            incoming_answered: false,
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
        self.changes.told = 0;
        self.changes.held.clear();
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

    /// Whether a policy Request offering `offered` (its grant as sent, not cut to the
    /// advertisement) tells the last fetched change's narrowing (r4 finding 2): no Request
    /// since that fetch told it yet, and this one leaves out a capability the fetch withdrew
    /// ([`Changes::lost_at_fetch`]), whatever else it grants. Against the grant after the
    /// fetch, already narrowed, such a Request would read as a pure widening (§6.7, §17.5
    /// step 3: revoked host-first, then the Request). A Request still offering the withdrawn
    /// capability tells nothing (§5.4: the host's grant still names it; §6.7).
    pub(super) fn tells_lost_at_fetch(&self, offered: &mcpl::capability::Grant) -> bool {
        let c = &self.changes;
        c.watching
            && c.told == 0
            && c.lost_at_fetch.iter().any(|lost| {
                !offered
                    .capabilities()
                    .iter()
                    .any(|cap| cap.as_str() == lost)
            })
    }

    /// Notes a policy Request that told the fetched narrowing ([`Changes::told`]).
    pub(super) fn narrowing_told(&mut self) {
        self.changes.told = self.changes.told.saturating_add(1);
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
        self.changes.deadline = Some(deadline);
        let mut counts = Vec::new();
        let why = self.each_change(deadline, &mut counts).await;
        self.changes.watching = false;
        self.changes.deadline = None;
        self.changes.awaiting_fetch = false;
        if self.closed {
            return;
        }
        self.conclude_changes(&counts, why);
    }
}

/// The answer to a fetch that is no manifest (§17.5 step 1: "does not parse at all"): a
/// JSON string, not an object. The digest of that value names the first change's
/// announcement (`phase::announced_revision`: App. B.3's shape, as every announcement's).
fn unparseable() -> Value {
    json!("mcpl check-host: this is not a manifest (§17.5 probe)")
}

/// Whether a result refuses every message it answers: a non-empty `results` list, each
/// entry `accepted: false` (§14.5's per-message form of a `channels/incoming` answer). The
/// one rule every probe of the phase reads a result by: such an answer refused the use, so
/// the order checks count it as a refusal, and only `host.manifest-withdrawn-refused`
/// reports its form (§6.6: a rejection is an error object), once ([`withdrawn`]).
fn refuses_every_message(result: &Value) -> bool {
    result
        .get("results")
        .and_then(Value::as_array)
        .is_some_and(|r| {
            !r.is_empty()
                && r.iter()
                    .all(|m| m.get("accepted") == Some(&Value::Bool(false)))
        })
}
