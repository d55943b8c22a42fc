//! The server-side manifest tracker (§17.10 implementation note, §17.3, §17.4).
//!
//! A server never hand-authors an announcement: it calls [`ManifestTracker::edit`] (typed
//! operations, [`ManifestEdit`]; a mistake is an error, not a no-op), or
//! [`ManifestTracker::set_manifest`] / [`ManifestTracker::transaction`] with raw JSON, and the tracker
//! canonicalises, digests, diffs, installs atomically and sends `mcpl/manifestChanged`
//! `{revision, domains}` — nothing else — to every attached connection whose last-announced
//! revision differs. `mcpl/manifest` is answered from the same installed snapshot.
//!
//! The tracker generates no prose and no policy conclusions: change impacts
//! ([`ChangeImpact`](super::domains::ChangeImpact)) are host-derived (§17.6).
//!
//! Readings (the spec is silent on these):
//! - Domains are derived per connection, against the manifest that connection was last told
//!   about, so a connection never hears a diff against a state it did not see.
//! - A change of `version` alone alters the revision but no domain. App. B.3 requires at
//!   least one domain, so no announcement is sent for it; the connection keeps its older
//!   baseline and later announcements are diffed against that. `mcpl/manifest` serves it.
//! - A connection attached with a revision the tracker cannot match (a `set_manifest` raced
//!   the initialize response) has an unknown baseline: it is told the current revision
//!   immediately, with all three domains (over-announcing is the safe direction; the host
//!   diffs anyway, §17.1).
//!
//! Concurrency: state sits behind a `std::sync::Mutex` and snapshots are `Arc`s, so a
//! [`ManifestTracker::snapshot`] racing a `set_manifest` sees one whole manifest, old or new.
//! Writers are serialised by a second lock held while sinks are called, so announcements
//! reach every sink in install order; snapshot reads from inside a sink are fine, but a sink
//! must not call `set_manifest`/`transaction`/`attach` (it would deadlock) and should only
//! enqueue the notification. Sinks are called outside the state lock.

use super::digest::{self, DigestError};
use super::domains::{ChangeDomain, DomainProjection};
use super::edit::{ManifestEdit, ManifestEditError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Params of the `mcpl/manifestChanged` notification (§17.3): a revision and changed domains.
/// The strict form a server sends (closed domain vocabulary, no other members); a host reads
/// the lenient [`crate::protocol::manifest::ManifestChangedParams`], which keeps unknown
/// domains and members so they can be reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestChanged {
    /// The new manifest revision (§17.2).
    pub revision: String,
    /// The domains that changed since this connection's last announcement, in wire order.
    pub domains: Vec<ChangeDomain>,
}

impl ManifestChanged {
    /// The notification's method name, from the typed registry
    /// ([`crate::protocol::manifest::ManifestChanged`]).
    pub const METHOD: &'static str =
        <crate::protocol::manifest::ManifestChanged as crate::protocol::Method>::NAME;
}

/// One installed manifest: the complete `experimental.mcpl` object with its `revision`.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestSnapshot {
    manifest: Value,
    revision: String,
    projection: DomainProjection,
}

impl ManifestSnapshot {
    /// Digests `manifest` and builds a snapshot whose `revision` member is set to the digest
    /// (any supplied `revision` is replaced, never trusted).
    pub fn new(manifest: Value) -> Result<Self, DigestError> {
        let revision = digest::revision(&manifest)?;
        Ok(Self::with_revision(manifest, revision))
    }

    fn with_revision(mut manifest: Value, revision: String) -> Self {
        let projection = DomainProjection::of(&manifest);
        if let Value::Object(map) = &mut manifest {
            map.insert("revision".to_owned(), Value::String(revision.clone()));
        }
        ManifestSnapshot {
            manifest,
            revision,
            projection,
        }
    }

    /// The flat manifest object including `revision`: the `mcpl/manifest` result (§17.4) and
    /// the `experimental.mcpl` object for `initialize`.
    pub fn manifest(&self) -> &Value {
        &self.manifest
    }

    /// The revision (`sha256:…`).
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The manifest without its `revision` member, as a server would edit it.
    pub fn content(&self) -> Value {
        let mut m = self.manifest.clone();
        if let Value::Object(map) = &mut m {
            map.remove("revision");
        }
        m
    }
}

/// Where a connection's announcements go: the server session sends them as notifications.
pub trait ManifestSink: Send + Sync {
    /// Delivers one `mcpl/manifestChanged`. Must not block or call back into the tracker's
    /// writers.
    fn manifest_changed(&self, change: ManifestChanged);
}

impl<F: Fn(ManifestChanged) + Send + Sync> ManifestSink for F {
    fn manifest_changed(&self, change: ManifestChanged) {
        self(change)
    }
}

/// Identifies one attached connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// What a `set_manifest` or `transaction` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOutcome {
    /// The revision now installed.
    pub revision: String,
    /// Whether the revision changed (false: nothing installed, nothing announced).
    pub changed: bool,
    /// Domains changed relative to the previously installed manifest.
    pub domains: Vec<ChangeDomain>,
    /// How many connections were sent an announcement.
    pub announced: usize,
}

struct Connection {
    sink: Arc<dyn ManifestSink>,
    /// The snapshot this connection was last told about; `None` when unknown.
    baseline: Option<Arc<ManifestSnapshot>>,
}

struct State {
    current: Arc<ManifestSnapshot>,
    connections: BTreeMap<ConnectionId, Connection>,
    next_id: u64,
}

type Delivery = (Arc<dyn ManifestSink>, ManifestChanged);

/// Server-side manifest state: the installed snapshot and each connection's last
/// announcement (§17.10). Share it as `Arc<ManifestTracker>`.
pub struct ManifestTracker {
    state: Mutex<State>,
    writer: Mutex<()>,
    /// Feature sets a server registration is bound to, with the registration: a typed edit
    /// refuses to remove them ([`ManifestEditError::BoundFeatureSet`]). Set before the
    /// tracker is shared, read-only after.
    bound: BTreeMap<String, &'static str>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state whole (installs are single assignments), so a
    // poisoned lock still guards consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ManifestTracker {
    /// A tracker with `initial` installed (digested; any `revision` in it is replaced).
    pub fn new(initial: Value) -> Result<Self, DigestError> {
        let current = Arc::new(ManifestSnapshot::new(initial)?);
        Ok(ManifestTracker {
            state: Mutex::new(State {
                current,
                connections: BTreeMap::new(),
                next_id: 0,
            }),
            writer: Mutex::new(()),
            bound: BTreeMap::new(),
        })
    }

    /// Records that `registration` (e.g. `on_before_inference`) is bound to `feature_set`, so
    /// a typed edit refuses to remove it.
    #[cfg(feature = "runtime")]
    pub(crate) fn bind_feature_set(&mut self, feature_set: String, registration: &'static str) {
        self.bound.insert(feature_set, registration);
    }

    /// A new tracker with this one's installed snapshot (shared, not copied) and its bound
    /// feature sets, and no connection attached: e.g. one connection's own copy of a
    /// server's manifest.
    pub fn fork(&self) -> Self {
        ManifestTracker {
            state: Mutex::new(State {
                current: self.snapshot(),
                connections: BTreeMap::new(),
                next_id: 0,
            }),
            writer: Mutex::new(()),
            bound: self.bound.clone(),
        }
    }

    /// The installed snapshot; one consistent manifest even while a `set_manifest` runs.
    pub fn snapshot(&self) -> Arc<ManifestSnapshot> {
        Arc::clone(&lock(&self.state).current)
    }

    /// The installed revision.
    pub fn revision(&self) -> String {
        lock(&self.state).current.revision.clone()
    }

    /// The `mcpl/manifest` result (§17.4): the complete flat manifest with its `revision`.
    pub fn manifest_result(&self) -> Value {
        self.snapshot().manifest.clone()
    }

    /// Attaches a connection whose `initialize` carried `announced_revision`, so nothing is
    /// re-announced for it. If that is not the installed revision, the connection is told the
    /// current one at once, with all three domains (its baseline is unknown).
    pub fn attach(&self, sink: Arc<dyn ManifestSink>, announced_revision: &str) -> ConnectionId {
        let _w = lock(&self.writer);
        let (id, delivery) = {
            let mut st = lock(&self.state);
            let baseline =
                (st.current.revision == announced_revision).then(|| Arc::clone(&st.current));
            Self::insert(&mut st, sink, baseline)
        };
        Self::deliver(delivery);
        id
    }

    /// Attaches a connection whose `initialize` carried `initialized` (a snapshot this tracker
    /// handed out). If it is no longer installed, the connection is told about the change at
    /// once, with domains diffed against what it saw.
    pub fn attach_snapshot(
        &self,
        sink: Arc<dyn ManifestSink>,
        initialized: Arc<ManifestSnapshot>,
    ) -> ConnectionId {
        let _w = lock(&self.writer);
        let (id, delivery) = {
            let mut st = lock(&self.state);
            Self::insert(&mut st, sink, Some(initialized))
        };
        Self::deliver(delivery);
        id
    }

    fn insert(
        st: &mut State,
        sink: Arc<dyn ManifestSink>,
        baseline: Option<Arc<ManifestSnapshot>>,
    ) -> (ConnectionId, Vec<Delivery>) {
        let id = ConnectionId(st.next_id);
        st.next_id += 1;
        let mut conn = Connection { sink, baseline };
        let current = Arc::clone(&st.current);
        let delivery = Self::announce(&mut conn, &current).into_iter().collect();
        st.connections.insert(id, conn);
        (id, delivery)
    }

    /// Detaches a connection; returns whether it was attached.
    pub fn detach(&self, id: ConnectionId) -> bool {
        lock(&self.state).connections.remove(&id).is_some()
    }

    /// The revision last announced to (or initialized on) a connection; `None` when the
    /// connection is unknown or its baseline is.
    pub fn announced_revision(&self, id: ConnectionId) -> Option<String> {
        let st = lock(&self.state);
        let conn = st.connections.get(&id)?;
        conn.baseline.as_ref().map(|b| b.revision.clone())
    }

    /// Installs `next` as the manifest (§17.10): canonicalise and digest (a refused manifest
    /// installs nothing), diff, install atomically, and announce to every connection whose
    /// last-announced revision differs. No change, no message.
    pub fn set_manifest(&self, next: Value) -> Result<SetOutcome, DigestError> {
        let _w = lock(&self.writer);
        self.set_locked(next)
    }

    /// Applies several related edits to a copy of the current manifest (without `revision`)
    /// and installs the result once: N edits, at most one announcement per connection. No
    /// other writer can interleave. If `edit` leaves a manifest the digest refuses, nothing is
    /// installed. The JSON is taken as written: a misspelt member is installed, not refused,
    /// and removing a set a server hook is bound to leaves that hook silent (its set is then
    /// undeclared, so unavailable, §6.4); [`Self::edit`] refuses both.
    pub fn transaction(&self, edit: impl FnOnce(&mut Value)) -> Result<SetOutcome, DigestError> {
        let _w = lock(&self.writer);
        let mut next = self.snapshot().content();
        edit(&mut next);
        self.set_locked(next)
    }

    /// Applies typed edits ([`ManifestEdit`]) to a copy of the current manifest and installs
    /// the result once, announced as [`Self::set_manifest`] announces (§17.3, §17.10). An
    /// operation that finds something other than it expects (a feature set that exists, or
    /// does not, a name that is not one, empty `uses`, a capability advertised or not, one a
    /// set still uses, a set a server hook is bound to) is an error naming the problem; the
    /// closure's first error (or its own) installs nothing, so the edit is all or nothing.
    /// No other writer can interleave; `edit` must not call the tracker's writers.
    ///
    /// ```
    /// # use mcpl::manifest::ManifestTracker;
    /// # use mcpl::capability::Capability;
    /// # use mcpl::policy::FeatureSetDeclaration;
    /// # use serde_json::json;
    /// let tracker = ManifestTracker::new(json!({"version": "0.5"})).unwrap();
    /// tracker.edit(|m| {
    ///     let decl = FeatureSetDeclaration::new("Push reminders", &[Capability::PushEvents]);
    ///     m.add_feature_set("reminders.push", decl)
    /// }).unwrap();
    /// let typo = tracker.edit(|m| m.remove_feature_set("reminder.push")).unwrap_err();
    /// assert!(typo.to_string().contains("did you mean \"reminders.push\""));
    /// ```
    pub fn edit(
        &self,
        edit: impl FnOnce(&mut ManifestEdit<'_>) -> Result<(), ManifestEditError>,
    ) -> Result<SetOutcome, ManifestEditError> {
        let _w = lock(&self.writer);
        let mut draft = ManifestEdit::new(self.snapshot().content(), &self.bound);
        edit(&mut draft)?;
        Ok(self.set_locked(draft.into_value())?)
    }

    /// Caller holds the writer lock.
    fn set_locked(&self, next: Value) -> Result<SetOutcome, DigestError> {
        let revision = digest::revision(&next)?;
        let (outcome, deliveries) = {
            let mut st = lock(&self.state);
            if st.current.revision == revision {
                let outcome = SetOutcome {
                    revision,
                    changed: false,
                    domains: Vec::new(),
                    announced: 0,
                };
                return Ok(outcome);
            }
            let snap = Arc::new(ManifestSnapshot::with_revision(next, revision.clone()));
            let domains = st.current.projection.diff(&snap.projection);
            st.current = Arc::clone(&snap);
            let deliveries: Vec<Delivery> = st
                .connections
                .values_mut()
                .filter_map(|conn| Self::announce(conn, &snap))
                .collect();
            let outcome = SetOutcome {
                revision,
                changed: true,
                domains,
                announced: deliveries.len(),
            };
            (outcome, deliveries)
        };
        Self::deliver(deliveries);
        Ok(outcome)
    }

    /// The announcement `conn` needs to learn of `current`, updating its baseline; `None` when
    /// it already knows this revision or no domain differs from what it knows.
    fn announce(conn: &mut Connection, current: &Arc<ManifestSnapshot>) -> Option<Delivery> {
        let domains = match &conn.baseline {
            Some(b) if b.revision == current.revision => return None,
            Some(b) => b.projection.diff(&current.projection),
            None => ChangeDomain::ALL.to_vec(),
        };
        if domains.is_empty() {
            return None;
        }
        conn.baseline = Some(Arc::clone(current));
        let change = ManifestChanged {
            revision: current.revision.clone(),
            domains,
        };
        Some((Arc::clone(&conn.sink), change))
    }

    fn deliver(deliveries: impl IntoIterator<Item = Delivery>) {
        for (sink, change) in deliveries {
            sink.manifest_changed(change);
        }
    }
}

impl std::fmt::Debug for ManifestTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("ManifestTracker")
            .field("revision", &st.current.revision)
            .field("connections", &st.connections.len())
            .finish()
    }
}
