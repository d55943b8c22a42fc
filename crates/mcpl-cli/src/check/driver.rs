//! The live run: a strict host that performs the handshake, sends policy, exercises the
//! server and judges everything it sends on its own. Every wait is bounded by the step
//! timeout, so an MCP-only, 0.4 or silent server still gets a complete report.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use mcpl::capability::{self, Capability, CapabilitySet, Grant, Requirement};
use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::policy::{self, FeatureSetStatus, FeatureSets, HostGrant};
use mcpl::protocol::handshake::{Initialize, Initialized};
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::conn::Conn;

mod authority;
mod channels;
mod hook_path;
mod hooks;
mod in_force;
mod judge;
mod negotiation;
mod others;
mod probes;
mod sample;
mod sessions;
mod widening;
mod wire;

use sample::{Listed, Sample};
pub use sessions::{run, Reconnect, DEFAULT_SESSIONS};

use super::inspect;
use super::report::{Recorder, Status};
use super::scenario::{self, Runner, Scenario};
use super::vocabulary;

/// How a request of ours ended.
#[derive(Debug)]
enum Reply {
    Result(Value),
    Error(ErrorObject),
    /// No answer within the step timeout: `note`, the cascade note when an earlier request
    /// was already left unanswered ([`Session::cascade_note`]); `meanwhile`, said where the
    /// silence is reported, what came instead of an answer: the frames since the silence
    /// began that no host could take as one ([`Session::meanwhile`]), and what the server
    /// had written of a line without its end when the wait ended (§4,
    /// [`super::conn::Conn::unfinished`]).
    Timeout {
        note: Option<String>,
        meanwhile: Option<String>,
    },
    Closed(String),
    /// A response under the request's id that is not valid JSON-RPC 2.0 (a result and an
    /// error both, neither, a malformed error object): an answer no host can use, said at
    /// once rather than waited out as silence.
    Invalid(String),
    /// A response under the request's id that the checker did not read, over one of its
    /// bounds (the message size, the budget for partial messages, the parsed cost), which
    /// `why` names with its numbers: said as what it is rather than as silence. Reading: the
    /// spec sets no size; an answer the checker documents it cannot read shows no answer a
    /// host can use, so it fails where an invalid one does (fail closed).
    Unread(String),
}

impl Reply {
    fn describe(&self) -> String {
        match self {
            Reply::Result(_) => "a result".into(),
            Reply::Error(e) => format!("error {} {:?}", e.code, e.message),
            Reply::Timeout { note, meanwhile } => {
                let note = note.as_deref().unwrap_or(super::report::NO_RESPONSE);
                match meanwhile {
                    Some(line) => format!("{note}; {line}"),
                    None => note.to_owned(),
                }
            }
            Reply::Closed(why) => format!("no response: {why}"),
            Reply::Invalid(why) => format!("an invalid response ({why})"),
            Reply::Unread(why) => format!("an answer it could not read: {why}"),
        }
    }
}

/// What handling one event came to.
enum Handled {
    /// The awaited response arrived.
    Awaited(Reply),
    /// Anything else; keep waiting.
    Continue,
    /// The connection ended.
    Closed,
}

/// Timing knobs of a run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Bound on every single wait.
    pub step: Duration,
    /// How long to keep listening for unsolicited messages after the last step.
    pub watch: Duration,
}

/// Host state of a run.
struct Session {
    conn: Conn,
    timing: Timing,
    next_id: i64,
    /// The last request the checker sent, to recognise a server that writes it back.
    last_request: Option<Value>,
    /// The server wrote one of the checker's own requests back unchanged (`cat`).
    echoed: bool,
    /// The last request of ours the server answered, and how ("mcpl/manifest (a
    /// result)"), to name where it stopped answering.
    last_answered: Option<String>,
    /// Our requests left unanswered since the last response of any kind: from the second,
    /// a timeout is the cascade of the first, and says so (issue #18 item 7).
    unanswered: usize,
    /// The first of those, and the last request answered before it.
    silent_after: Option<(String, Option<String>)>,
    /// The first of those is a window's `ping`, whose answer no check judges: the next
    /// timeout is where the silence is reported, not a cascade of it.
    silent_unjudged: bool,
    /// How many junk, invalid frames and stray responses had come when the wait for the first of those
    /// began: what came since, instead of an answer, is said where the silence is reported
    /// ([`Session::meanwhile`]).
    silent_marks: (u64, u64, u64),
    closed: Option<String>,
    /// A valid accepted receipt was received: privileged inbound methods are now judged
    /// against the grant (§5.3).
    ready: bool,
    /// The server answered the policy Request with a result: it has, by its own account,
    /// received its policy, so privileged messages from now on are not "before ready".
    receipt_seen: bool,
    grant: Grant,
    /// The declarations of this session's manifest, parsed once (§6.1).
    decls: FeatureSets,
    /// The strict host's derivation of `decls` (§6.4) as it stands: under no grant until an
    /// accepted receipt, then under the grant, with the sets its probes disable marked so.
    statuses: BTreeMap<String, FeatureSetStatus>,
    /// Declaration mismatches seen (§6.4), as "set exercises paths".
    mismatches: Listed,
    /// Feature-set-tagged uses seen (push events, hook results), for the §6.4 check.
    tagged_uses: usize,
    /// The channels the server registered, as the library host holds them (§14.5).
    channels: mcpl::session::ChannelTable,
    /// The ids of those the server registered itself (`channels/register`, `channels/changed`
    /// `added`), not opened by the host: §14.2 across the connection ([`Self::registered_again`]).
    registered: BTreeSet<String>,
    /// The ids of the requests the server sent on this connection (`rpc.request-ids-unique`).
    request_ids: crate::check::ids::RequestIds,
    /// The server's requests the checker has not answered yet (`rpc.in-flight-ids-unique`).
    in_flight: crate::check::ids::InFlightIds,
    /// Non-JSON frames: the first few, and how many.
    junk: Sample,
    /// Messages repeating a member name (RFC 8259 §4, I-JSON): the first few, and how many.
    repeated: Sample,
    /// Frames that began with a UTF-8 byte order mark, read past it (RFC 8259 §8.1).
    marked: u64,
    /// Messages spread over several lines, read whole ([`crate::check::spread`]).
    spread: Sample,
    /// Responses whose integer id was written `2.0` or `2e0`, read as that integer
    /// ([`Session::integral_id_read`]): the first few, and how many.
    integral_ids: Sample,
    /// The server's requests whose numeric id has a fraction or an exponent (`500.0`):
    /// taken and answered under the same value (JSON-RPC 2.0 §4: SHOULD NOT, §5), warned.
    fractional_ids: Sample,
    /// While a batch is being handled: the answers to its requests, sent as one array.
    batch: Option<Vec<Value>>,
    /// Items of a batch that came after the awaited response: handled once the caller has
    /// applied that response ([`Session::settle`]), so they are judged in wire order.
    deferred: std::collections::VecDeque<Value>,
    /// The policy Request has been sent: from then on a privileged message is no longer
    /// the grant-carrying Notification's doing.
    policy_sent: bool,
    /// Ids of our requests that timed out: a late answer is lateness (already reported by
    /// the step that waited), not an invalid frame.
    timed_out: HashSet<RequestId>,
    /// The params of each `context/beforeInference` of ours that timed out: its late answer
    /// is still judged when it comes (§5.4: authorized at response receipt, against the
    /// grant then), never dropped as mere lateness. One per hook the checker sent.
    late_hooks: std::collections::HashMap<RequestId, Value>,
    /// Frames that are not valid JSON-RPC 2.0 (discarded, malformed): the first few, and how
    /// many.
    invalid: Sample,
    /// Frames discarded unread for one of the checker's own bounds
    /// ([`crate::check::conn::own_bound_reason`]): not shown invalid, said as the bound.
    own_bounds: Sample,
    /// Responses that answer no request of the checker's still awaited (never sent, or
    /// answered already; JSON-RPC 2.0 §5): `rpc.responses-answer-requests`.
    stray: Sample,
    privileged_before_ready: Listed,
    /// The grant-carrying `featureSets/update` Notification has been sent (§6.7 probe):
    /// privileged messages from then until the receipt are judged by that probe.
    grant_notified: bool,
    /// Privileged messages after that Notification and before the receipt.
    ready_by_notification: Listed,
    /// A privileged message came before that Notification was sent: the server was acting
    /// before any grant (fail-open, AUDIT-001 §2.7), so what it sends after the Notification
    /// tells nothing of how it read the Notification.
    privileged_before_notification: bool,
    /// Set when the receipt was a refusal or malformed: what it was, for the report. The
    /// server is then not operating under the policy (§5.3, §6.7), so nothing is granted.
    unaccepted: Option<&'static str>,
    /// Privileged messages after such a receipt.
    privileged_unaccepted: Listed,
    /// Privileged messages judged after an accepted receipt (§5.4).
    privileged_after_ready: usize,
    /// Those outside the grant.
    outside_grant: Listed,
    /// Member names repeated in the answer awaited, for an answer that decides authority.
    doubled: authority::Doubled,
    /// The manifest in force (§17.5): the host's review of what `mcpl/manifest` served.
    in_force: in_force::InForce,
    /// The manifest `mcpl/manifest` returned, for the unknown-member probe.
    fetched: Option<Value>,
    /// The `channels/list` result, for the unknown-member and unknown-channel probes.
    listed: Option<Value>,
    /// A `ping` was answered (result or error): it can show the server is still answering.
    ping_answered: bool,
    push_seen: usize,
    inference_seen: usize,
    descriptors_seen: usize,
    incoming_seen: usize,
    register_seen: usize,
    changed_seen: usize,
    /// Messages of a notification-only method (§4.1) other than `mcpl/manifestChanged`
    /// (judged by its own check), in either form; how many came with an id, and the first
    /// of those (`rpc.notifications-have-no-id`).
    notifications_seen: usize,
    notifications_with_id: usize,
    first_notification_with_id: Option<String>,
    /// The revision the last `mcpl/manifestChanged` announced, until it is checked.
    announced: Option<String>,
    /// Every domain any `mcpl/manifestChanged` announced (§17.3).
    announced_domains: BTreeSet<&'static str>,
    /// The manifest presented at `initialize`, to derive what changed since.
    initial_manifest: Option<Value>,
    /// The grant sent in the initial policy, reused by the reduction probe.
    host_grant: Option<HostGrant>,
    /// Feature sets the reduction probe disabled (§6.7): unavailable from the moment the
    /// Request is sent (revocation takes effect first).
    reduced: BTreeSet<String>,
    /// The server answered the reduction: from here on, a use of a set in `reduced` breaks
    /// "servers MUST immediately respect a reduction" (§6.7). Before the answer, the server
    /// may not have read it yet; such a use is refused (`-32001`) but is not its failure.
    reduction_answered: bool,
    /// Feature-set-tagged messages judged after the reduction was answered.
    after_reduction: usize,
    /// Uses of a disabled set, or of a capability the reduction revoked, after the reduction
    /// was answered.
    reduction_violations: Listed,
    /// The grant before the reduction probe narrowed it (set when the reduction is sent).
    pre_reduction_grant: Option<Grant>,
    /// The set the first hook injected under, for the narrowing-Notification probe.
    hook_set: Option<String>,
    /// The checker's last message was a `ping` the server answered (a fence: whatever the
    /// server wrote before reading what follows has arrived).
    fenced: bool,
    /// Whether fenced hooks' answers waited on inference (`hooks.no-inference-in-hook`).
    hook_path: hook_path::HookPath,
    /// Sets disabled by a `featureSets/update` Notification (§6.7 probe); every later
    /// Request keeps them disabled.
    notified_disabled: BTreeSet<String>,
    /// The server has answered a ping sent after that Notification: it has read it.
    narrowing_read: bool,
    /// Feature-set-tagged messages judged after that point and before the reduction.
    after_narrowing: usize,
    /// Uses of a set disabled by that Notification once it was read.
    narrowing_violations: Listed,
    /// Of those, how many were push events or inference requests, by the `declared` check
    /// id that would otherwise count them as conforming.
    reduction_hits: BTreeMap<&'static str, usize>,
    /// `Some` in a later session (issue #18): what narrows its grant; `None` in the first,
    /// full-grant session.
    narrowed: Option<Narrowed>,
    /// In a narrowed session: what the server sent (or injected) that this session's grant
    /// withholds and the full grant allowed (`grant.narrowed-respected`).
    narrowed_outside: Listed,
    /// In a narrowed session: uses of a set this session's grant leaves unavailable and the
    /// full grant left available (`featuresets.narrowed-respected`).
    narrowed_unavailable: Listed,
    /// In a narrowed session: the §6.7 widening Notification's probe.
    widening: widening::Widening,
    /// Feature sets seen in a tagged use (push events, inference requests, injections):
    /// the sets later sessions disable in turn.
    used_sets: BTreeSet<String>,
    /// Why a later session could not start (its `initialize` was not answered).
    start_error: Option<String>,
    /// The params of the policy Request the session is judged under (a narrowed session's
    /// last: `Form::Absent` sends two), reported as the session's grant.
    sent_policy: Option<Value>,
    /// Methods the server sent that are neither MCP nor MCPL 0.5, with their counts (at
    /// most [`vocabulary::MAX_FOREIGN_METHODS`] names; the rest are counted together).
    foreign: vocabulary::ForeignMethods,
    rec: Recorder,
    /// This session's scenario steps (`--call`, `--scenario`) and `--enable`.
    runner: Runner,
    /// A usage error found in the session (a tool the server does not list, an `--enable`
    /// entry selecting nothing): the run stops and exits 2.
    fatal: Option<String>,
    /// How many messages of each method the server sent (at most [`MAX_METHODS_COUNTED`]
    /// distinct methods are counted), for the scenario's `waitFor` steps.
    methods_seen: BTreeMap<String, u64>,
}

/// The most distinct method names [`Session::methods_seen`] counts (a hostile server can
/// invent any number).
const MAX_METHODS_COUNTED: usize = 256;

/// The longest method name [`Session::methods_seen`] counts, in bytes (a hostile server can
/// send one as long as a whole message, and 256 of them were kept whole): no method of MCP
/// or MCPL comes near it, and a `waitFor` step for a longer one waits its whole time.
const MAX_COUNTED_NAME_BYTES: usize = 256;

/// At most this many feature-set names are remembered as used (the sets later sessions
/// disable in turn; only the first [`sessions::MAX_DISABLED_IN_TURN`] are).
const MAX_USED_SETS: usize = 64;

/// What narrows a later session's grant, and what the full grant allowed, so a finding
/// there is about the narrowing and not a defect the first session already counts.
struct Narrowed {
    /// How the session is named in the report ("only tools", "ref.events disabled" …).
    label: String,
    /// The first session's effective grant.
    full: Grant,
    /// The sets the full grant leaves available (derived from this session's declarations).
    full_available: BTreeSet<String>,
}

/// Host capabilities the checker advertises (§5.2).
fn host_capabilities() -> Value {
    json!({
        "experimental": { "mcpl": {
            "version": "0.5",
            "pushEvents": true,
            "contextHooks": { "beforeInference": true },
            "inferenceLifecycle": true,
            "channels": { "register": true, "publish": true, "incoming": true },
            "featureSets": true
        }}
    })
}

/// The `ModelInfo` the checker presents (§10.1 `model`, §12.2).
fn checker_model() -> Value {
    json!({ "id": "mcpl-check", "vendor": "mcpl", "contextWindow": 8192, "capabilities": [] })
}

/// The checker's host policy: everything in the vocabulary except observe, so `userMessage:
/// null` handling and injection-without-observe are exercised (§10.1).
fn host_policy() -> Vec<&'static str> {
    Capability::ALL
        .into_iter()
        .filter(|c| *c != Capability::Observe)
        .map(Capability::as_str)
        .collect()
}

impl Session {
    /// A fresh host state over `conn`: nothing sent yet, nothing granted.
    fn new(conn: Conn, timing: Timing, rec: Recorder, runner: Runner) -> Session {
        Session {
            conn,
            timing,
            next_id: 0,
            last_request: None,
            echoed: false,
            last_answered: None,
            unanswered: 0,
            silent_after: None,
            silent_unjudged: false,
            silent_marks: (0, 0, 0),
            closed: None,
            ready: false,
            receipt_seen: false,
            grant: Grant::default(),
            decls: FeatureSets::default(),
            statuses: BTreeMap::new(),
            mismatches: Listed::default(),
            tagged_uses: 0,
            channels: mcpl::session::ChannelTable::default(),
            registered: BTreeSet::new(),
            request_ids: crate::check::ids::RequestIds::default(),
            in_flight: crate::check::ids::InFlightIds::default(),
            junk: Sample::default(),
            repeated: Sample::default(),
            marked: 0,
            spread: Sample::default(),
            integral_ids: Sample::default(),
            fractional_ids: Sample::default(),
            batch: None,
            deferred: std::collections::VecDeque::new(),
            policy_sent: false,
            timed_out: HashSet::new(),
            late_hooks: std::collections::HashMap::new(),
            invalid: Sample::default(),
            own_bounds: Sample::default(),
            stray: Sample::default(),
            privileged_before_ready: Listed::default(),
            grant_notified: false,
            ready_by_notification: Listed::default(),
            privileged_before_notification: false,
            unaccepted: None,
            privileged_unaccepted: Listed::default(),
            privileged_after_ready: 0,
            outside_grant: Listed::default(),
            doubled: authority::Doubled::default(),
            in_force: in_force::InForce::default(),
            fetched: None,
            listed: None,
            ping_answered: false,
            push_seen: 0,
            inference_seen: 0,
            descriptors_seen: 0,
            incoming_seen: 0,
            register_seen: 0,
            changed_seen: 0,
            notifications_seen: 0,
            notifications_with_id: 0,
            first_notification_with_id: None,
            announced: None,
            announced_domains: BTreeSet::new(),
            initial_manifest: None,
            host_grant: None,
            reduced: BTreeSet::new(),
            reduction_answered: false,
            after_reduction: 0,
            reduction_violations: Listed::default(),
            reduction_hits: BTreeMap::new(),
            pre_reduction_grant: None,
            hook_set: None,
            fenced: false,
            hook_path: hook_path::HookPath::default(),
            notified_disabled: BTreeSet::new(),
            narrowing_read: false,
            after_narrowing: 0,
            narrowing_violations: Listed::default(),
            narrowed: None,
            narrowed_outside: Listed::default(),
            narrowed_unavailable: Listed::default(),
            widening: widening::Widening::default(),
            used_sets: BTreeSet::new(),
            sent_policy: None,
            start_error: None,
            foreign: vocabulary::ForeignMethods::default(),
            rec,
            runner,
            fatal: None,
            methods_seen: BTreeMap::new(),
        }
    }

    /// The first session, under the full grant: every probe, in this order.
    fn full_session(&mut self) {
        self.exercise();
        if self.fatal.is_some() {
            return;
        }
        self.watch();
        self.narrowing_notification();
        self.reduction();
        self.contradiction();
        self.check_announced();
        self.conclude();
    }

    /// The single place where per-session steps run: right after the policy exchange of
    /// every session (the first and each narrowed one), before that session's own probes.
    /// Scenario steps (`--call`, `--scenario`: issue #18 item 6) run here; false when a
    /// usage error stopped the run.
    fn after_policy_exchange(&mut self) -> bool {
        let mut runner = std::mem::take(&mut self.runner);
        let r = runner.run(self);
        self.runner = runner;
        match r {
            Ok(()) => true,
            Err(e) => {
                self.fatal = Some(e);
                false
            }
        }
    }

    /// `update_params` of `grant` with `disabled`, carrying `--enable` as `enabled`: every
    /// policy Request restates the selection (§5.3).
    pub(super) fn policy_params(&self, grant: &HostGrant, disabled: &[String]) -> Value {
        grant.update_params(self.runner.scenario().enabled(), disabled)
    }

    /// The policy in force (§6.7): `hg` narrowed to the grant in force, and the sets
    /// disabled so far (reduced, or disabled by a revocation), keeping only the sets the
    /// served manifest still declares when `declared_only` (a revocation names no set the
    /// manifest dropped, §17.5).
    pub(super) fn policy_in_force(&self, hg: HostGrant, declared_only: bool) -> Value {
        let now = HostGrant {
            advertised: hg.advertised,
            effective: self.grant,
            denied: hg.advertised.difference(self.grant.capabilities()),
        };
        let disabled: Vec<String> = self
            .reduced
            .union(&self.notified_disabled)
            .filter(|s| !declared_only || self.decls.sets.contains_key(*s))
            .cloned()
            .collect();
        self.policy_params(&now, &disabled)
    }

    /// `initialize` and `notifications/initialized` (§4.1, MCP): the capabilities and the
    /// `experimental.mcpl` object, or `None` (recorded) when there is no MCPL to check. In
    /// the first session that also settles every MCPL check (skipped, or the MCP-only
    /// remainder); a narrowed session just ends.
    fn handshake(&mut self) -> Option<(Value, Value)> {
        let init = self.request(
            Initialize::NAME,
            json!({
                "protocolVersion": mcpl::protocol::handshake::MCP_PROTOCOL_VERSION,
                "capabilities": host_capabilities(),
                "clientInfo": { "name": "mcpl-check", "version": env!("CARGO_PKG_VERSION") }
            }),
        );
        let first = self.narrowed.is_none();
        let init = match init {
            Reply::Result(r) => {
                self.conn.release_stderr();
                self.rec
                    .record("initialize.answered", Status::Pass, "initialize answered");
                r
            }
            // A reconnection that is never answered says more about the connection (a
            // listener that serves one connection at a time) than about conformance, which
            // the first session judged: the session could not start.
            other if !first => {
                self.start_error = Some(format!("initialize got {}", other.describe()));
                return None;
            }
            other => {
                // Issue #18 item 8: a server that never started is not a conformance result.
                if let Some(e) = self.startup_error(&other) {
                    self.fatal = Some(e);
                    return None;
                }
                self.conn.release_stderr();
                self.rec.record(
                    "initialize.answered",
                    Status::Fail,
                    format!("initialize got {}", other.describe()),
                );
                self.record_repeated(); // the repeat that refused it, say: judged all the same
                self.rec
                    .skip_rest("no initialize result: nothing further can be checked");
                return None;
            }
        };
        let capabilities = init.get("capabilities").cloned().unwrap_or(Value::Null);
        let mcpl = capabilities
            .get("experimental")
            .and_then(|e| e.get("mcpl"))
            .cloned();
        let _ = self.notify(Initialized::NAME, json!({}));
        let missing = match mcpl {
            Some(m @ Value::Object(_)) => {
                self.rec.record(
                    "initialize.mcpl-present",
                    Status::Pass,
                    "experimental.mcpl advertised",
                );
                return Some((capabilities, m));
            }
            Some(other) => format!("experimental.mcpl is not an object: {other}"),
            // Not an MCP-only server: MCP's initialize result is an object with a
            // `capabilities` object, and a host (the library's `ConnectError::BadInitialize`)
            // refuses one without.
            None if !capabilities.is_object() => format!(
                "the initialize result (a JSON {}) has no capabilities object (MCP): a host \
                 refuses such a server before any MCPL, so it is no MCP-only server either",
                mcpl::jsonrpc::json_type_name(&init)
            ),
            None => "no capabilities.experimental.mcpl: an MCP-only server (§3.3)".to_owned(),
        };
        self.rec
            .record("initialize.mcpl-present", Status::Fail, missing);
        if first {
            self.finish_mcp_only();
        }
        None
    }

    /// Why `initialize` got `reply` when that is a startup problem rather than a finding
    /// (exit 2): the server echoes its input (`cat`), or it exited (its exit status and the
    /// last lines of its stderr), or the connection closed before any answer. A server
    /// that stays up and stays silent, or answers with an error, is judged
    /// (`initialize.answered`).
    fn startup_error(&mut self, reply: &Reply) -> Option<String> {
        if self.echoed {
            return Some(
                "the server wrote the checker's own initialize request back unchanged: \
                 it echoes its input (like `cat`) and is not an MCP server"
                    .to_owned(),
            );
        }
        let Reply::Closed(why) = reply else {
            return None;
        };
        let ended = match self.conn.exited(self.timing.step) {
            Some(exit) => format!("the server stopped before answering initialize: {exit}"),
            None => format!("the connection closed before initialize was answered ({why})"),
        };
        // No check reports them: what it wrote instead of an answer (a usage text on
        // stdout, a half line at exit) is quoted here, not dropped.
        let mut wrote = Vec::new();
        if !self.junk.is_empty() {
            wrote.push(self.junk.summary("junk (not JSON)"));
        }
        if !self.invalid.is_empty() {
            wrote.push(self.invalid.summary("invalid JSON-RPC"));
        }
        if !self.stray.is_empty() {
            wrote.push(
                self.stray
                    .summary("responses to no request of the checker's"),
            );
        }
        Some(if wrote.is_empty() {
            ended
        } else {
            format!(
                "{ended}\n  before that, instead of an answer, it wrote {}",
                wrote.join("; ")
            )
        })
    }

    pub(super) fn exercise(&mut self) {
        let Some((capabilities, mcpl)) = self.handshake() else {
            return;
        };
        if !self.feature_sets_within_bound(&mcpl) {
            self.finish_over_bound(&mcpl);
            return;
        }
        // The declarations, parsed once for the manifest checks and the session (§6.1).
        let (sets, findings) = FeatureSets::from_mcpl(&mcpl);
        self.judge_manifest(&mcpl, &sets, &findings);
        self.initial_manifest = Some(mcpl.clone());

        // §5.3: the initial policy Request, granting what is advertised except observe.
        if let Err(e) = self.runner.scenario().check_enable(&sets) {
            self.fatal = Some(e);
            return;
        }
        self.adopt_declarations(sets.clone());
        self.review_initial(&mcpl, &capabilities);
        let advertised = capability::advertised_from_capabilities(&capabilities).capabilities;
        let host_grant = match HostGrant::compute(advertised, host_policy()) {
            Ok(g) => g,
            Err(e) => {
                // The policy is ours and built from the vocabulary; this cannot be input.
                self.rec
                    .skip_rest(&format!("internal: host policy invalid: {e}"));
                return;
            }
        };
        self.quiet_windows(&host_grant);
        self.policy_sent = true;
        self.policy(&host_grant, &sets, &[]);
        // Held from here: a revocation by the served manifest is told on this grant
        // (§17.5 step 3, [`Session::tell_revocation`]).
        self.host_grant = Some(self.grant_in_force(host_grant));
        self.settle();
        if !self.after_policy_exchange() {
            return;
        }

        self.fetch_manifest(&mcpl);
        self.ping_answered();
        self.unknown_method();
        self.before_inference(&host_grant);
        self.channel_probes();
        self.unknown_member();
        self.rollback_unknown_checkpoint();
        self.close_unknown_channel();
        self.defensive_lifecycle();
        self.host_grant = Some(self.grant_in_force(host_grant));
    }

    /// `manifest.feature-set-count` recorded ([`inspect::feature_set_count`]); whether the
    /// manifest's feature sets are within the bound a library host reads, so the session
    /// may go on to judge them.
    pub(super) fn feature_sets_within_bound(&mut self, mcpl: &Value) -> bool {
        let ((st, d), within) = inspect::feature_set_count(mcpl);
        self.rec.record("manifest.feature-set-count", st, d);
        within
    }

    /// A manifest past the feature-set bound (`manifest.feature-set-count` warned): a library
    /// host refuses it at `initialize` and grants nothing (fail closed), so the checker goes
    /// no further with MCPL than such a host would. The checks that read only the
    /// advertisement's top level are still made, what the server sends on its own is still
    /// judged (nothing is granted, §5.3), and an unknown method must still get an error;
    /// everything else that reads the feature sets or needs a policy is skipped saying why.
    /// Nothing here builds the sets, so memory and time stay those of reading the
    /// `initialize` answer.
    pub(super) fn finish_over_bound(&mut self, mcpl: &Value) {
        let (st, d) = inspect::version(mcpl);
        self.rec.record("initialize.version", st, d);
        let (st, d) = inspect::advertisement_shape(mcpl);
        self.rec.record("initialize.advertisement-shape", st, d);
        self.ping_answered();
        self.unknown_method();
        let why = format!(
            "the manifest declares more than {} feature sets, which a library host refuses \
             (manifest.feature-set-count): nothing was granted",
            mcpl::manifest::DEFAULT_MAX_FEATURE_SETS
        );
        self.rec.skip_all(MCPL_BEHAVIOUR_IDS, &why);
        self.rec.skip_all(
            &["grant.narrowed-respected", "featuresets.narrowed-respected"],
            &why,
        );
    }

    /// An MCP-only server: everything MCPL is skipped (§3.3), but what it sends on its own
    /// is still judged, and an unknown method must still get an error.
    pub(super) fn finish_mcp_only(&mut self) {
        self.ping_answered();
        self.unknown_method();
        let why = "server does not advertise MCPL (§3.3)";
        self.rec.skip_all(
            &[
                "initialize.version",
                "initialize.advertisement-shape",
                "manifest.feature-set-count",
            ],
            why,
        );
        self.rec.skip_all(MCPL_BEHAVIOUR_IDS, why);
    }

    /// Why the host does not use `c` now, for a skip that names the real cause (issue #18
    /// item 7): no receipt was accepted, so nothing is granted (§5.3, §6.7), or this
    /// session's grant withholds it (the first session grants everything advertised but
    /// `observe`, so there: the server does not advertise it). `None` when `c` is usable.
    pub(super) fn unusable(&self, c: Capability) -> Option<String> {
        if !self.ready {
            return Some(self.not_ready_reason("nothing is granted (§5.3)"));
        }
        if self.grant.allows(c) {
            return None;
        }
        Some(match self.narrowed {
            Some(_) => format!("{} not granted in this session", c.as_str()),
            None => format!(
                "{} not granted: the server does not advertise it",
                c.as_str()
            ),
        })
    }

    /// "no receipt was accepted" with what the policy Request got instead, then `then`.
    pub(super) fn not_ready_reason(&self, then: &str) -> String {
        match (self.unaccepted, self.receipt_seen) {
            (Some(what), _) => format!("no receipt was accepted (the policy got {what}): {then}"),
            (None, true) => format!("no receipt was accepted: {then}"),
            (None, false) => {
                format!("no receipt was accepted (the policy Request got none): {then}")
            }
        }
    }

    /// Takes `sets` as this session's declarations (§6.1): none is available before an
    /// accepted receipt (§5.3), which is the derivation under no grant.
    pub(super) fn adopt_declarations(&mut self, sets: FeatureSets) {
        self.statuses = policy::derive(&sets, &Grant::none(), &policy::Selection::default());
        self.decls = sets;
    }

    /// Whether the strict host holds `name` declared (§6.1).
    pub(super) fn declared(&self, name: &str) -> bool {
        self.decls.sets.contains_key(name)
    }

    /// Whether the strict host holds `name` available now (§6.4).
    pub(super) fn available(&self, name: &str) -> bool {
        self.statuses
            .get(name)
            .is_some_and(FeatureSetStatus::is_available)
    }

    /// The sets available now, by name.
    pub(super) fn available_sets(&self) -> BTreeSet<String> {
        self.statuses
            .iter()
            .filter(|(_, st)| st.is_available())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Marks `name` disabled (§5.3): refused from now on, whatever the grant.
    pub(super) fn disable(&mut self, name: &str) {
        if let Some(st) = self.statuses.get_mut(name) {
            *st = FeatureSetStatus::Unavailable {
                reason: policy::UnavailableReason::Disabled,
                missing: CapabilitySet::EMPTY,
            };
        }
    }

    pub(super) fn judge_manifest(
        &mut self,
        mcpl: &Value,
        sets: &FeatureSets,
        findings: &[capability::Finding],
    ) {
        let (st, d) = inspect::version(mcpl);
        self.rec.record("initialize.version", st, d);
        let (st, d) = inspect::advertisement_shape(mcpl);
        self.rec.record("initialize.advertisement-shape", st, d);
        let (st, d) = inspect::feature_sets_shape(mcpl, sets, findings);
        self.rec.record("manifest.feature-sets-shape", st, d);
        let (st, d) = inspect::uses_valid(sets, findings);
        self.rec.record("manifest.uses-valid", st, d);
        let (st, d) = inspect::identifier_charset(mcpl);
        self.rec.record("manifest.identifier-charset", st, d);
        let (st, d) = inspect::revision_matches(mcpl);
        self.rec.record("manifest.revision-matches-digest", st, d);
        let (st, d) = inspect::tag_facets(mcpl);
        self.rec.record("manifest.tag-facets", st, d);
        let (st, d) = inspect::tag_ontology(mcpl);
        self.rec.record("manifest.tag-ontology", st, d);
    }

    /// Keeps listening for unsolicited messages for the watch period.
    pub(super) fn watch(&mut self) {
        self.settle();
        if self.closed.is_some() {
            return;
        }
        let deadline = Instant::now() + self.timing.watch;
        while let Some(ev) = self.conn.recv(deadline) {
            if let Handled::Closed = self.handle_event(ev, None) {
                break;
            }
        }
    }
}

/// The requirement of a method the server sent, or `None` for methods a server may not
/// send (host→server methods, unknown ones): those are answered -32601. Which methods a
/// host receives is the library host's rule ([`mcpl::session::Receiver::receives`], §4.1).
fn server_requirement(method: &str, params: Option<&Value>) -> Option<Requirement> {
    if !mcpl::session::Receiver::Host.receives(method) {
        return None;
    }
    policy::method_requirement(method, params)
}

/// The checks that read the feature sets or need the policy exchange: skipped whole for a
/// server whose MCPL a host does not use (MCP-only, §3.3; a manifest past the feature-set
/// bound).
const MCPL_BEHAVIOUR_IDS: &[&str] = &[
    "manifest.feature-sets-shape",
    "manifest.uses-valid",
    "manifest.identifier-charset",
    "manifest.revision-matches-digest",
    "manifest.tag-facets",
    "manifest.tag-ontology",
    "policy.request-answered",
    "policy.receipt-shape",
    "policy.refusal-names-fallback",
    "policy.no-invented-mode",
    "policy.receipt-matches-derivation",
    "policy.no-privileged-unless-accepted",
    "manifest.fetch",
    "hooks.answers-without-observe",
    "hooks.injection-positions",
    "hooks.injection-shape",
    "channels.list-answered",
    "channels.unknown-channel-error",
    "policy.reduction-answered",
    "policy.reduction-respected",
    "manifest.revocation-answered",
    "policy.notification-narrowing-respected",
    "policy.notification-not-ready",
    "policy.contradiction-rejected",
    "grant.messages-within-grant",
    "hooks.feature-set-declared",
    "rpc.unknown-members-ignored",
    "state.rollback-unknown-checkpoint",
    "channels.close-unknown-error",
    "lifecycle.defensive",
];

/// Whether two manifests are the same manifest (equal canonical forms, §17.2).
fn same_manifest(a: &Value, b: &Value) -> bool {
    mcpl::manifest::canonical_json(a).ok() == mcpl::manifest::canonical_json(b).ok()
}

/// The scenario runner's view of a session: its requests and listening go through the same
/// judging as every other step.
impl scenario::Host for Session {
    fn ask(&mut self, method: &str, params: Value) -> scenario::Answer {
        match self.request(method, params) {
            Reply::Result(r) => scenario::Answer::Result(r),
            Reply::Error(e) => scenario::Answer::Error {
                code: e.code,
                message: e.message.into_owned(),
            },
            other => scenario::Answer::Nothing(other.describe()),
        }
    }

    fn listen(&mut self, until: Option<(&str, u64)>, deadline: Instant) -> bool {
        self.settle();
        let done = |s: &Session| until.is_some_and(|(m, n)| scenario::Host::seen(s, m) > n);
        while !done(self) && self.closed.is_none() {
            let Some(ev) = self.conn.recv(deadline) else {
                break;
            };
            if let Handled::Closed = self.handle_event(ev, None) {
                break;
            }
        }
        done(self)
    }

    fn seen(&self, method: &str) -> u64 {
        self.methods_seen.get(method).copied().unwrap_or(0)
    }

    fn allows(&self, c: Capability) -> bool {
        self.ready && self.grant.allows(c)
    }

    fn channels(&self) -> Vec<String> {
        self.channels.ids()
    }

    fn step_timeout(&self) -> Duration {
        self.timing.step
    }
}
