//! The check catalogue and the report: every check has a stable id and a spec section, and
//! every run reports every check exactly once (a check never reached is `skip`).
//!
//! Bounded whatever the server sends (issue #20): a recorded detail holds at most
//! [`DETAIL_LIMIT`] bytes, a line of the terminal report at most [`TEXT_DETAIL_LIMIT`]
//! characters of it, and the whole `--json` document stays under [`REPORT_LIMIT`] bytes
//! (details are cut further, session ones first, until it does). A cut ends in
//! `… (N bytes cut)`.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// Most bytes of one recorded detail (also in `--json`).
pub const DETAIL_LIMIT: usize = 2048;
/// Most characters of a detail shown in the terminal report.
pub const TEXT_DETAIL_LIMIT: usize = 200;
/// How a check's detail starts its cascade note: it failed only because the server had
/// already stopped answering, a defect the first unanswered check reports (issue #18 item 7).
pub const CASCADE: &str = "no answer since the server stopped answering after";
/// How a detail says a request went unanswered: the first check recorded with it (and
/// not [`CASCADE`]) is the one defect the later cascaded checks follow from.
pub const NO_RESPONSE: &str = "no response within the timeout";
/// The `--json` report is always shorter than this many bytes.
pub const REPORT_LIMIT: usize = 1_000_000;

/// `s` cut to at most `limit` bytes at a character boundary, the cut marked with
/// `… (N bytes cut)`.
pub fn cap_detail(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_owned();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &s[..end], s.len() - end)
}

/// `s` cut to at most `limit` characters, marked as by [`cap_detail`].
fn cap_chars(s: &str, limit: usize) -> String {
    match s.char_indices().nth(limit) {
        Some((end, _)) => format!("{}… ({} bytes cut)", &s[..end], s.len() - end),
        None => s.to_owned(),
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The server conformed.
    Pass,
    /// The server violated a MUST.
    Fail,
    /// A SHOULD or a tolerated deviation.
    Warn,
    /// The check could not run (the reason says why).
    Skip,
}

impl Status {
    /// The lowercase wire name used in `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Warn => "warn",
            Status::Skip => "skip",
        }
    }
}

/// One entry of the catalogue: a stable id, the spec section it enforces, and what it means.
#[derive(Debug, Clone, Copy)]
pub struct CheckDef {
    /// Stable id (part of the CLI contract).
    pub id: &'static str,
    /// Spec section, e.g. `§5.3`.
    pub section: &'static str,
    /// One-line description of what conforms.
    pub title: &'static str,
}

/// Defines a catalogue constant: `catalogue! { NAME, "doc"; id, section, title; ... }`.
macro_rules! catalogue {
    ($name:ident, $doc:literal; $($id:literal, $section:literal, $title:literal;)*) => {
        #[doc = $doc]
        pub const $name: &[CheckDef] = &[
            $(CheckDef { id: $id, section: $section, title: $title },)*
        ];
    };
}
pub(crate) use catalogue;

catalogue! {
    CATALOGUE, "Every check `mcpl check` performs, in report order.";
    "transport.frames-valid", "§4", "every frame the server writes is a JSON-RPC 2.0 message";
    "transport.member-names-unique", "§4", "no object in a frame repeats a member name (RFC 8259 §4, I-JSON; a warning)";
    "initialize.answered", "§4.1", "the server answers initialize with a result";
    "initialize.mcpl-present", "§5.1", "capabilities.experimental.mcpl is present and an object";
    "initialize.version", "§5.1", "experimental.mcpl.version is \"0.5\"";
    "initialize.advertisement-shape", "§5.1", "the advertisement mirrors the capability paths";
    "manifest.feature-set-count", "§6.1", "at most 1,024 feature sets, the most a library host reads (more warns)";
    "manifest.feature-sets-shape", "§6.1", "featureSets is an object of {description, uses}";
    "manifest.uses-valid", "§6.2", "every uses value is a capability path of the vocabulary";
    "manifest.identifier-charset", "§17.2", "identifiers are non-empty [A-Za-z0-9._:*-]";
    "manifest.revision-matches-digest", "§17.1", "revision is the canonical digest of the manifest";
    "manifest.tag-facets", "§16.4", "tag facets are ones RFC-001 §5.1 names (another is info)";
    "manifest.tag-ontology", "§16.4", "every tagOntology is well formed (a part a host drops warns)";
    "policy.request-answered", "§5.3", "the initial featureSets/update Request is answered";
    "policy.receipt-shape", "§6.7", "the answer is a well-formed degradation receipt";
    "policy.refusal-names-fallback", "§6.7", "a refusal carries fallback mcp-only or close";
    "policy.no-invented-mode", "§6.7", "mode is omitted when nothing degraded";
    "policy.no-privileged-before-ready", "§5.3", "no privileged message before the receipt";
    "policy.no-privileged-unless-accepted", "§6.7", "after a refused or malformed receipt, no privileged message (the policy is not in force)";
    "policy.reduction-answered", "§6.7", "a reduction (sets disabled, channel capabilities revoked) is answered with a receipt";
    "policy.reduction-respected", "§6.7", "after that receipt, nothing is sent under a disabled set or a revoked capability, nor under a `featureSet` that is no string (it names no set the reduction left enabled)";
    "policy.notification-not-ready", "§6.7", "the grant sent as a Notification does not make the server ready";
    "policy.notification-narrowing-respected", "§6.7", "a set disabled by Notification is no longer used";
    "policy.contradiction-rejected", "§5.4", "a policy naming a path both granted and denied (written in both lists, or granted by a `*` pattern) is rejected with an error";
    "policy.receipt-matches-derivation", "§6.4", "an accepted receipt reports every set the host's derivation disables, and none it allows without a further need";
    "grant.messages-within-grant", "§5.4", "after the receipt, the server sends only what the grant allows";
    "grant.narrowed-respected", "§5.4", "under each narrowed grant (sessions 2 and later), nothing is sent that the grant withholds";
    "featuresets.narrowed-respected", "§6.4", "under each narrowed grant, no push, inference request or injection names a set it leaves unavailable";
    "manifest.fetch", "§17.4", "mcpl/manifest returns the complete manifest, or an error";
    "manifest.changed-shape", "§17.3", "mcpl/manifestChanged carries only {revision, domains}, a revision of the digest's shape (App. B.3)";
    "manifest.changed-is-notification", "§17.3", "mcpl/manifestChanged is sent as a Notification (no id)";
    "manifest.changed-revision-matches", "§17.3", "the announced revision is the digest of the manifest then served";
    "manifest.changed-domains-match", "§17.3", "the announced domains cover every domain that changed (absent ≠ empty)";
    "manifest.revocation-answered", "§17.5", "after the served manifest removes what the grant held, the policy Request that tells it (host-first, then Request and receipt, §6.7) is answered with a receipt";
    "rpc.unknown-method-errors", "§6.6", "an unknown method gets an error (-32601), not silence";
    "rpc.ping-answered", "§6.6", "a ping gets an answer (MCP: an empty result; an error, or a result that is no object, warns), never silence";
    "rpc.unknown-members-ignored", "§8", "a request with an unknown params member is answered as without it";
    "rpc.notifications-have-no-id", "§4.1", "a notification-only method (MCP's notifications/*, MCPL's; mcpl/manifestChanged is judged by manifest.changed-is-notification) is sent without an id";
    "rpc.methods-in-vocabulary", "§4.1", "every request or notification the server sends is MCP or MCPL 0.5 (warns, naming 0.4-era methods)";
    "rpc.methods-direction", "§4.1", "no request or notification the server sends is one §4.1 has only the host send (context/beforeInference, channels/publish, featureSets/update, tools/call …); channels/acknowledge or channels/typing from the server, whose direction SPEC.md leaves open, warns";
    "rpc.request-ids-unique", "§4", "no request the server sends reuses an id it sent before on the connection (MCP: never within a session; a warning)";
    "rpc.in-flight-ids-unique", "§4", "no request the server sends comes under the id of one of its requests the checker has not answered yet (MCP: never while in flight; refused -32600)";
    "rpc.responses-answer-requests", "§4", "every response the server sends answers a request of the checker's not answered yet: none under an id the checker never sent (id null included), none again under one already answered (JSON-RPC 2.0 §5)";
    "state.rollback-unknown-checkpoint", "§8.7", "state/rollback to a checkpoint never issued is refused -32005";
    "lifecycle.defensive", "§10.5", "an orphan or duplicate terminal inference/lifecycle leaves the server answering";
    "hooks.answers-without-observe", "§10.1", "beforeInference with userMessage null is answered";
    "hooks.injection-positions", "§5.4", "every injection is at a granted position";
    "hooks.injection-shape", "§10.4", "injections carry namespace, position, content; featureSet named";
    "hooks.feature-set-declared", "§6.5", "injections come under a declared feature set the grant leaves available";
    "hooks.no-inference-in-hook", "§10.7", "a context/beforeInference (sent after a ping round trip) is answered while the inference/request the server sent meanwhile is held unanswered: the hook's answer does not wait on inference";
    "push.event-is-request", "§4.1", "push/event is sent as a Request";
    "push.event-shape", "§9.2", "push/event params carry featureSet, eventId, an ISO 8601 timestamp, payload of App. B.1 blocks";
    "push.feature-set-declared", "§6.5", "push/event names a declared, available feature set";
    "inference.request-is-request", "§4.1", "inference/request is sent as a Request";
    "inference.request-shape", "§11.2", "inference/request params carry featureSet and well-formed messages";
    "inference.feature-set-declared", "§6.5", "inference/request names a declared, available feature set";
    "featuresets.declaration-matches", "§6.4", "a feature set's uses declares what it exercises (SHOULD)";
    "channels.descriptor-shape", "§14.2", "channel descriptors carry id, type and a valid direction";
    "channels.ids-unique", "§14.2", "no channels/register or channels/changed names one channel id in two descriptors, nor names as another descriptor an id it registered earlier in the connection, neither removed nor closed since (§14.5 results key on the id)";
    "channels.register-is-request", "§4.1", "channels/register is sent as a Request";
    "channels.incoming-is-request", "§4.1", "channels/incoming is sent as a Request";
    "channels.incoming-shape", "§14.3", "incoming messages carry channelId, messageId, content blocks; tags namespaced";
    "channels.incoming-registered", "§14.5", "every channels/incoming message names a channel the server registered and has not removed or seen closed since (one the host refuses as unknown_channel warns)";
    "tags.ambient-not-addressed", "§16.3", "no push/event or channels/incoming message carries chat:ambient beside a tag implying chat:addressed (SHOULD NOT: a warning)";
    "channels.list-answered", "§14.3", "channels/list from the host is answered with the channel list; a list leaving out a channel the server registered and the host accepted warns";
    "channels.unknown-channel-error", "§14.6", "channels/publish to an unregistered channel is refused -32023";
    "channels.close-unknown-error", "§14.6", "channels/close of an unregistered channel is refused -32023";
}

/// The definition of a catalogue id, if it exists.
#[cfg(test)]
pub fn def(id: &str) -> Option<&'static CheckDef> {
    CATALOGUE.iter().find(|d| d.id == id)
}

/// One reported check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Catalogue id.
    pub id: &'static str,
    /// Spec section.
    pub section: &'static str,
    /// Outcome.
    pub status: Status,
    /// One-line reason.
    pub detail: String,
    /// The check whose defect this verdict only follows from (the server had stopped
    /// answering since it: [`CASCADE`]), when this one is such a cascade.
    pub follows_from: Option<&'static str>,
}

impl CheckResult {
    /// Whether this verdict only follows from an earlier defect (the server had stopped
    /// answering: [`CASCADE`]).
    pub fn is_cascade(&self) -> bool {
        self.follows_from.is_some() || self.detail.contains(CASCADE)
    }

    /// Adds `followsFrom` to the check's JSON object when it follows from another.
    fn add_follows(&self, v: &mut Value) {
        if let (Some(root), Some(o)) = (self.follows_from, v.as_object_mut()) {
            o.insert("followsFrom".into(), Value::String(root.to_owned()));
        }
    }
}

/// Results collected while a run progresses; [`Recorder::finish`] turns them into a report
/// that lists every catalogue check once.
#[derive(Debug)]
pub struct Recorder {
    catalogue: &'static [CheckDef],
    command: &'static str,
    results: Vec<Option<(Status, String)>>,
    /// Per check, the check its verdict follows from ([`CheckResult::follows_from`]).
    follows: Vec<Option<&'static str>>,
    /// The first check that failed or warned for want of an answer ([`NO_RESPONSE`]).
    silent_root: Option<&'static str>,
    progress: bool,
}

impl Recorder {
    /// A recorder; `progress` shows each result on the live progress line of stderr (a
    /// terminal: [`progress_line`]) as it is recorded.
    pub fn new(progress: bool) -> Recorder {
        Recorder::with(CATALOGUE, "mcpl check", progress)
    }

    /// A recorder for another catalogue, reported under `command` (e.g. `mcpl check-host`).
    pub fn with(catalogue: &'static [CheckDef], command: &'static str, progress: bool) -> Self {
        Recorder {
            catalogue,
            command,
            results: vec![None; catalogue.len()],
            follows: vec![None; catalogue.len()],
            silent_root: None,
            progress,
        }
    }

    /// Records the outcome of `id`. The first record wins, except that a `fail` replaces an
    /// earlier `pass`/`warn`/`skip` (a later observation can only make things worse).
    ///
    /// # Panics
    /// Panics when `id` is not in the catalogue (a programming error, never input).
    pub fn record(&mut self, id: &str, status: Status, detail: impl Into<String>) {
        let Some(i) = self.catalogue.iter().position(|d| d.id == id) else {
            panic!("check id {id:?} is not in the catalogue");
        };
        let replace = match &self.results[i] {
            None => true,
            Some((old, _)) => status == Status::Fail && *old != Status::Fail,
        };
        if replace {
            let detail = detail.into();
            let detail = if detail.len() > DETAIL_LIMIT {
                cap_detail(&detail, DETAIL_LIMIT)
            } else {
                detail
            };
            if self.progress {
                progress_line(&format!(
                    "{}: {:<4} {} ({})",
                    self.command,
                    status.as_str(),
                    self.catalogue[i].id,
                    detail
                ));
            }
            let id = self.catalogue[i].id;
            if detail.contains(CASCADE) {
                self.follows[i] = self.silent_root.filter(|root| *root != id);
            } else {
                self.follows[i] = None;
                let unanswered = detail.contains(NO_RESPONSE);
                if unanswered && matches!(status, Status::Fail | Status::Warn) {
                    self.silent_root.get_or_insert(id);
                }
            }
            self.results[i] = Some((status, detail));
        }
    }

    /// [`Self::record`], except that a `warn` also replaces an earlier `pass`: for a verdict
    /// on something seen later that the earlier pass did not cover (a manifest served after
    /// `initialize`, §17.5).
    pub fn record_worse(&mut self, id: &str, status: Status, detail: impl Into<String>) {
        if status == Status::Warn && self.status(id) == Some(Status::Pass) {
            if let Some(i) = self.catalogue.iter().position(|d| d.id == id) {
                self.results[i] = None;
            }
        }
        self.record(id, status, detail);
    }

    /// The ids that failed so far, in catalogue order.
    pub fn failed(&self) -> Vec<&'static str> {
        self.catalogue
            .iter()
            .zip(&self.results)
            .filter(|(_, r)| matches!(r, Some((Status::Fail, _))))
            .map(|(d, _)| d.id)
            .collect()
    }

    /// The status recorded for `id`, if any.
    pub fn status(&self, id: &str) -> Option<Status> {
        let i = self.catalogue.iter().position(|d| d.id == id)?;
        self.results[i].as_ref().map(|(s, _)| *s)
    }

    /// Only the checks recorded so far, in catalogue order (a later session's verdicts).
    pub fn recorded(&self) -> Vec<CheckResult> {
        self.catalogue
            .iter()
            .zip(self.results.iter().zip(&self.follows))
            .filter_map(|(d, (r, follows))| {
                r.as_ref().map(|(status, detail)| CheckResult {
                    id: d.id,
                    section: d.section,
                    status: *status,
                    detail: detail.clone(),
                    follows_from: *follows,
                })
            })
            .collect()
    }

    /// Records every check in `ids` as skipped, for one reason.
    pub fn skip_all(&mut self, ids: &[&str], why: &str) {
        for id in ids {
            self.record(id, Status::Skip, why);
        }
    }

    /// Whether `id` already has an outcome.
    pub fn has(&self, id: &str) -> bool {
        self.catalogue
            .iter()
            .position(|d| d.id == id)
            .is_some_and(|i| self.results[i].is_some())
    }

    /// Marks every check without an outcome as skipped with `reason`.
    pub fn skip_rest(&mut self, reason: &str) {
        for d in self.catalogue {
            if !self.has(d.id) {
                self.record(d.id, Status::Skip, reason);
            }
        }
    }

    /// The finished report; checks never recorded are `skip` ("not reached").
    pub fn finish(self, target: String) -> Report {
        let checks = self
            .catalogue
            .iter()
            .zip(self.results.into_iter().zip(self.follows))
            .map(|(d, (r, follows_from))| {
                let (status, detail) = r.unwrap_or((Status::Skip, "not reached".to_owned()));
                CheckResult {
                    id: d.id,
                    section: d.section,
                    status,
                    detail,
                    follows_from,
                }
            })
            .collect();
        Report {
            command: self.command,
            target,
            checks,
            error: None,
            sessions: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }
}

/// One session of a multi-session run (`mcpl check`, issue #18), as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReport {
    /// What narrows its grant (`full grant` for the first session).
    pub label: String,
    /// The params of its policy Request, when one was sent.
    pub grant: Option<Value>,
    /// The verdicts it recorded, in catalogue order (the first session: every check).
    pub checks: Vec<CheckResult>,
    /// Why it could not run, when it could not.
    pub error: Option<String>,
}

/// How much a status says about a server: a later session's verdict replaces the merged
/// one only when it says more (`skip` < `pass` < `warn` < `fail`).
fn weight(s: Status) -> u8 {
    match s {
        Status::Skip => 0,
        Status::Pass => 1,
        Status::Warn => 2,
        Status::Fail => 3,
    }
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The command that ran (`mcpl check`, `mcpl check-host`), for the text header.
    pub command: &'static str,
    /// The target as given (or `reference server`).
    pub target: String,
    /// One entry per catalogue check, in catalogue order.
    pub checks: Vec<CheckResult>,
    /// Why the target could not be started or reached, when it could not (exit 2).
    pub error: Option<String>,
    /// Each session of the run with its own verdicts (empty for a single-session report
    /// such as `check-host`'s).
    pub sessions: Vec<SessionReport>,
    /// Further members of the `--json` document (e.g. `scenario`), after the contract ones.
    pub extra: serde_json::Map<String, Value>,
}

impl Report {
    /// Adds the sessions of a run: `checks` (the first session's, from
    /// [`Recorder::finish`]) become the merged verdicts. A later session's verdict replaces
    /// the merged one when it says more ([`weight`]); the first such session wins, and its
    /// detail names the session.
    pub fn with_sessions(mut self, sessions: Vec<SessionReport>) -> Report {
        for (i, s) in sessions.iter().enumerate().skip(1) {
            for r in &s.checks {
                let Some(c) = self.checks.iter_mut().find(|c| c.id == r.id) else {
                    continue;
                };
                if weight(r.status) > weight(c.status) {
                    c.status = r.status;
                    c.detail = format!("session {} ({}): {}", i + 1, s.label, r.detail);
                    c.follows_from = r.follows_from;
                }
            }
        }
        self.sessions = sessions;
        self
    }

    /// Failed checks that are their own defect: not a cascade of an earlier one
    /// ([`CheckResult::follows_from`], [`CASCADE`]). One defect is counted once.
    pub fn defects(&self) -> usize {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail && !c.is_cascade())
            .count()
    }

    /// Counts of (pass, fail, warn, skip).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let n = |s| self.checks.iter().filter(|c| c.status == s).count();
        (
            n(Status::Pass),
            n(Status::Fail),
            n(Status::Warn),
            n(Status::Skip),
        )
    }

    /// The ids of failed checks, in catalogue order.
    #[cfg(test)]
    pub fn failed(&self) -> Vec<&'static str> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id)
            .collect()
    }

    /// Process exit code: 2 when the target was unreachable, 1 when a check failed, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.error.is_some() {
            2
        } else if self.counts().1 > 0 {
            1
        } else {
            0
        }
    }

    /// The `--json` document: `{ target, checks: [{id, section, status, detail}], summary }`,
    /// plus `error` when the target could not be reached. A check whose verdict only follows
    /// from an earlier defect carries `followsFrom` (that check's id), and `summary.defects`
    /// counts the failures that are not such a cascade (issue #18 item 7).
    /// Every detail is at most [`DETAIL_LIMIT`] bytes; when the document would still reach
    /// [`REPORT_LIMIT`], session details and then all details are cut shorter until it does
    /// not.
    pub fn to_json(&self) -> Value {
        let steps = [
            (DETAIL_LIMIT, DETAIL_LIMIT),
            (DETAIL_LIMIT, 256),
            (512, 64),
            (128, 0),
        ];
        let mut doc = Value::Null;
        for (top, session) in steps {
            doc = self.to_json_capped(top, session);
            if doc.to_string().len() < REPORT_LIMIT {
                break;
            }
        }
        doc
    }

    /// [`Report::to_json`] with top-level details cut to `top` bytes and session ones to
    /// `session`.
    fn to_json_capped(&self, top: usize, session: usize) -> Value {
        let (pass, fail, warn, skip) = self.counts();
        let mut doc = json!({
            "target": self.target,
            "checks": self.checks.iter().map(|c| {
                let mut v = json!({
                    "id": c.id,
                    "section": c.section,
                    "status": c.status.as_str(),
                    "detail": cap_detail(&c.detail, top),
                });
                c.add_follows(&mut v);
                v
            }).collect::<Vec<_>>(),
            "summary": {
                "pass": pass, "fail": fail, "warn": warn, "skip": skip,
                "defects": self.defects(),
            },
        });
        if let Some(o) = doc.as_object_mut() {
            if let Some(e) = &self.error {
                o.insert("error".into(), Value::String(cap_detail(e, DETAIL_LIMIT)));
            }
            for (k, v) in &self.extra {
                o.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        if let (false, Some(o)) = (self.sessions.is_empty(), doc.as_object_mut()) {
            let sessions = self.sessions.iter().enumerate().map(|(i, s)| {
                let mut v = json!({
                    "session": i + 1,
                    "label": s.label,
                    "grant": s.grant,
                    "checks": s.checks.iter().map(|c| {
                        let mut v = json!({
                            "id": c.id,
                            "status": c.status.as_str(),
                            "detail": cap_detail(&c.detail, session),
                        });
                        c.add_follows(&mut v);
                        v
                    }).collect::<Vec<_>>(),
                });
                if let (Some(e), Some(o)) = (&s.error, v.as_object_mut()) {
                    o.insert("error".into(), Value::String(cap_detail(e, DETAIL_LIMIT)));
                }
                v
            });
            o.insert("sessions".into(), Value::Array(sessions.collect()));
        }
        doc
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let target = cap_chars(&self.target, TEXT_DETAIL_LIMIT);
        let _ = writeln!(s, "{} {}", self.command, one_line_text(&target));
        if let Some(e) = &self.error {
            let _ = writeln!(
                s,
                "error: {}",
                one_line_text(&cap_chars(e, TEXT_DETAIL_LIMIT))
            );
        }
        let width = self.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
        for c in &self.checks {
            let _ = writeln!(
                s,
                "  {:<4}  {:<width$}  {:<6}  {}",
                c.status.as_str().to_uppercase(),
                c.id,
                c.section,
                indented(&cap_chars(&c.detail, TEXT_DETAIL_LIMIT))
            );
        }
        let (pass, fail, warn, skip) = self.counts();
        let _ = writeln!(
            s,
            "{pass} passed, {fail} failed, {warn} warned, {skip} skipped"
        );
        if fail > 0 {
            // One defect, counted once: the failures that only follow from the server
            // having stopped answering are named as such.
            let (follow, own): (Vec<&CheckResult>, Vec<&CheckResult>) = self
                .checks
                .iter()
                .filter(|c| c.status == Status::Fail)
                .partition(|c| c.is_cascade());
            let ids = |v: &[&CheckResult]| v.iter().map(|c| c.id).collect::<Vec<_>>().join(", ");
            let _ = writeln!(s, "failed: {}", ids(&own));
            if !follow.is_empty() {
                let root = follow
                    .iter()
                    .find_map(|c| c.follows_from)
                    .map(|r| format!(" after {r}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  and, only because the server had stopped answering{root}: {}",
                    ids(&follow)
                );
            }
        }
        if self.sessions.len() > 1 {
            let _ = writeln!(s, "sessions:");
            for (i, session) in self.sessions.iter().enumerate() {
                let failed: Vec<&str> = session
                    .checks
                    .iter()
                    .filter(|c| c.status == Status::Fail)
                    .map(|c| c.id)
                    .collect();
                let outcome = match (&session.error, failed.is_empty()) {
                    (Some(e), _) => one_line_text(&cap_chars(e, TEXT_DETAIL_LIMIT)).into_owned(),
                    (None, true) => "nothing failed".to_owned(),
                    (None, false) => format!("failed {}", failed.join(", ")),
                };
                let label = one_line_text(&session.label);
                let _ = writeln!(s, "  {:>2}  {label:<34}  {outcome}", i + 1);
            }
        }
        s
    }
}

use crate::term::one_line as one_line_text;

/// How far the lines after the first of a detail are indented at least: a check's own
/// line starts with two spaces and its status, so a line a server's text began (a newline
/// in a name it chose) can never pass for one.
const CONTINUATION: &str = "    ";

/// `detail` with each of its lines after the first indented by at least [`CONTINUATION`]
/// (the checker's own continuation lines already are: a server's stderr, quoted).
fn indented(detail: &str) -> std::borrow::Cow<'_, str> {
    let detail = detail.trim_end_matches(['\n', '\r']);
    if !detail.contains(['\n', '\r']) {
        return detail.into();
    }
    let mut out = String::with_capacity(detail.len() + 16);
    for (i, line) in detail.split('\n').enumerate() {
        let line = line.trim_end_matches('\r').replace('\r', "\\u{d}");
        if i > 0 {
            out.push('\n');
            if !line.starts_with(CONTINUATION) {
                out.push_str(CONTINUATION);
            }
        }
        out.push_str(&line);
    }
    out.into()
}

/// The live progress line is cut to this many characters: a longer one would wrap, and
/// erasing the line only clears its last row.
pub const PROGRESS_CHARS: usize = 79;

/// `s` on one line of at most `max` characters: control characters (a server's text may
/// carry terminal escapes or newlines) become spaces, and a longer text ends in `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Replaces the live progress line on stderr with `line` (carriage return, erase line, no
/// newline), so each check stays on screen once: the report prints it again, after
/// [`progress_clear`]. Only for a terminal.
pub fn progress_line(line: &str) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{}", one_line(line, PROGRESS_CHARS));
    let _ = err.flush();
}

/// Erases the live progress line (before the report or an error is printed).
pub fn progress_clear() {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}

/// The catalogue as text, one check per line (`mcpl check --list`).
pub fn catalogue_text() -> String {
    catalogue_text_of(CATALOGUE)
}

/// `--list` output of any catalogue.
pub fn catalogue_text_of(catalogue: &[CheckDef]) -> String {
    let width = catalogue.iter().map(|d| d.id.len()).max().unwrap_or(0);
    catalogue.iter().fold(String::new(), |mut s, d| {
        let _ = writeln!(s, "{:<width$}  {:<6}  {}", d.id, d.section, d.title);
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detail_cannot_forge_a_line_of_the_report() {
        assert_eq!(
            indented("featureSets.x\n  PASS  forged\r\n    quoted\n"),
            "featureSets.x\n      PASS  forged\n    quoted"
        );
        assert_eq!(indented("a\rb"), "a\\u{d}b");
        assert_eq!(indented("plain"), "plain");
    }

    #[test]
    fn catalogue_ids_are_unique_and_include_the_contract() {
        let mut ids: Vec<_> = CATALOGUE.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for required in [
            "initialize.mcpl-present",
            "initialize.version",
            "manifest.feature-sets-shape",
            "manifest.uses-valid",
            "manifest.identifier-charset",
            "manifest.revision-matches-digest",
            "policy.request-answered",
            "policy.receipt-shape",
            "policy.no-privileged-before-ready",
            "manifest.fetch",
            "rpc.unknown-method-errors",
            "hooks.injection-positions",
            "push.event-shape",
            "channels.descriptor-shape",
        ] {
            assert!(def(required).is_some(), "{required} missing");
        }
    }

    #[test]
    fn fail_overrides_pass_but_not_the_reverse() {
        let mut r = Recorder::new(false);
        r.record("push.event-shape", Status::Pass, "ok");
        r.record("push.event-shape", Status::Fail, "bad");
        r.record("push.event-shape", Status::Pass, "ok again");
        let rep = r.finish("t".into());
        assert_eq!(rep.failed(), vec!["push.event-shape"]);
        assert_eq!(rep.exit_code(), 1);
        let (_, _, _, skip) = rep.counts();
        assert_eq!(skip, CATALOGUE.len() - 1);
    }

    /// A later session's verdict replaces the merged one only when it says more, and its
    /// detail names the session; `sessions` lists each with its own verdicts.
    #[test]
    fn later_sessions_merge_into_the_checks_by_weight() {
        let mut first = Recorder::new(false);
        first.record("push.event-shape", Status::Pass, "ok");
        first.record("grant.narrowed-respected", Status::Skip, "later");
        let later = |status| CheckResult {
            id: "grant.narrowed-respected",
            section: "§5.4",
            status,
            detail: "push/event needs pushEvents".into(),
            follows_from: None,
        };
        let session = |label: &str, checks| SessionReport {
            label: label.into(),
            grant: None,
            checks,
            error: None,
        };
        let sessions = vec![
            session("full grant", first.recorded()),
            session("nothing granted", vec![later(Status::Pass)]),
            session("only tools", vec![later(Status::Fail)]),
            session("x disabled", vec![later(Status::Pass)]),
        ];
        let rep = first.finish("t".into()).with_sessions(sessions);
        let c = rep
            .checks
            .iter()
            .find(|c| c.id == "grant.narrowed-respected")
            .unwrap();
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.detail,
            "session 3 (only tools): push/event needs pushEvents"
        );
        let v = rep.to_json();
        assert_eq!(v["sessions"].as_array().map(Vec::len), Some(4));
        assert_eq!(v["sessions"][2]["label"], "only tools");
        assert_eq!(v["sessions"][2]["checks"][0]["status"], "fail");
        assert!(rep.to_text().contains("only tools"));
    }

    #[test]
    fn json_shape_has_the_contract_fields() {
        let rep = Recorder::new(false).finish("tcp://x:1".into());
        let v = rep.to_json();
        assert_eq!(v["target"], "tcp://x:1");
        assert_eq!(v["checks"].as_array().map(Vec::len), Some(CATALOGUE.len()));
        assert_eq!(v["checks"][0]["status"], "skip");
        assert_eq!(v["summary"]["skip"], CATALOGUE.len());
        assert_eq!(rep.exit_code(), 0);
    }
}
