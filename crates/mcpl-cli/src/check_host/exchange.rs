//! The run's order, and its first two phases: the host's `initialize` (§5.2) and its initial
//! policy (§5.3, §5.4), each awaited until one deadline.

use mcpl::capability::{self, Capability, CapabilitySet, Pattern, PatternError};
use mcpl::peer::{IncomingMessage, IncomingRequest};
use mcpl::policy::{Form, PolicyError, UpdateParams};
use mcpl::protocol::channels::ChannelsRegister;
use mcpl::protocol::feature_sets::FeatureSetsUpdate;
use mcpl::protocol::handshake::{self, HostMcpl};
use mcpl::protocol::handshake::{Initialize, Initialized};
use mcpl::protocol::inference::InferenceRequest;
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::judge::{capped, excerpt, list, DETAIL_LIMIT};
use super::served::{self, served_advertisement};
use super::session::{poll_once, secs, Run};
use crate::check::report::Status;

/// The longest the policy receipt waits for the ping sent ahead of it (after the early
/// requests went out; half a step when that is shorter): under any host's own policy
/// timeout a conforming host would set.
pub(super) const RECEIPT_HOLD_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// The codes that refuse an `inference/request` sent before the receipt (§5.3): not granted
/// (`-32002`, `-32001`, §6.6, App. A), an unknown feature set (`-32003`, §6.6: a host that
/// has not taken up the manifest's declarations before its policy), not served (`-32601`),
/// not ready (`-32600`).
const EARLY_INFERENCE_REFUSALS: [i64; 5] = [
    mcpl::jsonrpc::codes::CAPABILITY_DENIED,
    mcpl::jsonrpc::codes::FEATURE_SET_NOT_ENABLED,
    mcpl::jsonrpc::codes::UNKNOWN_FEATURE_SET,
    mcpl::jsonrpc::codes::METHOD_NOT_FOUND,
    mcpl::jsonrpc::codes::INVALID_REQUEST,
];

/// Most `effectiveCapabilities` entries naming no path that a detail gives a hint for.
const HINTED_ENTRIES: usize = 3;

/// Longest such entry given a hint, in bytes: a longer one is no typo of a path.
const HINTED_ENTRY_BYTES: usize = 128;

/// The checks that judge the initial policy itself, not what follows from it.
const GRANT_CHECKS: [&str; 3] = [
    "host.grant-within-advertisement",
    "host.grant-not-contradictory",
    "host.grant-within-own-advertisement",
];

impl Run {
    /// The whole run: initialize, the policy, the probes, then listening for `--watch`.
    pub(super) async fn exercise(&mut self) {
        if !self.initialize().await {
            // An MCP-only host is still served for `--watch` (its `tools/list`, its pings):
            // ending the connection at once left what it sent after `initialize` unanswered.
            if self.unfinished.is_none() && !self.closed {
                self.listen("the listening after initialize (an MCP-only host)")
                    .await;
            }
            return;
        }
        // Whatever the policy's fate (in force, missing, or malformed and refused), the
        // probes run: a malformed policy is rejected and grants nothing (§5.3, §5.4: fail
        // closed), and the server never becomes ready, exactly as when none came, so the
        // host is probed as one that granted nothing; its verdict on the policy stands.
        self.initial_policy().await;
        if self.closed {
            self.unfinished = self.gone().map(str::to_owned);
            return;
        }
        self.probes().await;
        if self.closed {
            // Going away mid-run leaves the report incomplete (exit 2), unless it was the
            // host's answer to the junk line: that probe then failed, and the report says
            // what it did not reach.
            if !self.died_of_junk {
                self.unfinished = self.gone().map(str::to_owned);
            }
            return;
        }
        // A tools/list answered from here on is not judged (`host.unknown-fields-tolerated`).
        self.tolerance.close();
        self.listen("the listening after the probes").await;
    }

    /// Waits for `initialize` (one step from the connection), judges the host's
    /// advertisement and answers it; `false` when the run cannot go on.
    async fn initialize(&mut self) -> bool {
        self.stage = "the wait for initialize";
        let deadline = Instant::now() + self.bounds.step;
        let init = loop {
            match self.next_until(deadline).await {
                Some(IncomingMessage::Request(r)) if r.method() == Initialize::NAME => break r,
                Some(m) => self.handle(m).await,
                None => {
                    let mut discarded = self.discarded();
                    if self.initialize_notified {
                        discarded.push_str(
                            " (an initialize came as a Notification, without an id: MCP's \
                             initialize is a Request, answered under its id)",
                        );
                    }
                    let why = match self.gone() {
                        Some(g) => format!("the host sent no initialize request: {g}{discarded}"),
                        // What the host left unfinished is quoted, as the policy's wait
                        // quotes it.
                        None => format!(
                            "the host sent no initialize request within {}{discarded}{}",
                            secs(self.bounds.step),
                            self.left_unfinished()
                        ),
                    };
                    self.unfinished = Some(why);
                    return false;
                }
            }
        };
        let params = init.request().params.as_ref();
        let requested = params.and_then(|p| p.get("protocolVersion"));
        let version = served::negotiated_version(requested);
        self.tolerance.versions(requested, version);
        let null = Value::Null;
        let params = params.unwrap_or(&null);
        let mcpl = handshake::host_advertisement(params);
        self.host_advertised = mcpl.map_or(CapabilitySet::EMPTY, |m| {
            capability::advertised(m).capabilities
        });
        // The library's reading of the advertisement (§5.2); a host that advertises MCPL in
        // any version is judged on every probe.
        let id = "host.initialize-advertises-mcpl";
        let advertises = match handshake::host_mcpl(params) {
            HostMcpl::V05 => {
                self.record(id, Status::Pass, "experimental.mcpl with version 0.5");
                true
            }
            HostMcpl::Unversioned => {
                let d = "experimental.mcpl has no version member (§5.2 mirrors the server's \
                         shape, which requires it, App. B.3)";
                self.record(id, Status::Fail, d);
                true
            }
            HostMcpl::Other(v) => {
                let v = capped(v, DETAIL_LIMIT / 2);
                let d = format!("experimental.mcpl.version is {v}, not \"0.5\"");
                self.record(id, Status::Fail, d);
                true
            }
            // Present but no object: the library reads it as no advertisement (§3.3), so the
            // server stays MCP-only; it is a malformed one, not an MCP-only host's silence
            // (it had read "no experimental.mcpl" and exit 0).
            HostMcpl::Absent => match params.pointer("/capabilities/experimental/mcpl") {
                Some(other) => {
                    let d = format!(
                        "experimental.mcpl is {}, not an object (§5.2 mirrors the server's \
                         shape, App. B.3): it advertises nothing (§3.3), so the server stays \
                         MCP-only (§3.2)",
                        excerpt(other)
                    );
                    self.record(id, Status::Fail, d);
                    false
                }
                None => {
                    let d = "no experimental.mcpl: an MCP-only host (§3.2)";
                    self.record(id, Status::Skip, d);
                    false
                }
            },
        };
        // §5.2: the host's advertisement mirrors the server's shape (§5.1), read as `mcpl
        // check` reads a server's (`initialize.advertisement-shape`), `channels: true`
        // aside: §5.1's shorthand for every leaf, legal for a host
        // (`inspect::host_advertisement_shape`); an MCP-only host's is skipped with the rest.
        if let (true, Some(m)) = (advertises, mcpl) {
            let (status, detail) = crate::check::inspect::host_advertisement_shape(m);
            self.record("host.advertisement-shape", status, detail);
        }
        let written = init.respond(served::initialize_result(version)).await;
        self.initialized = true;
        if written.is_ok() && advertises {
            self.answered_unknown(Initialize::NAME);
        }
        if written.is_err() && self.peer.close_reason().is_some() {
            self.on_closed();
            self.unfinished = self.gone().map(str::to_owned);
            return false;
        }
        if !advertises {
            self.mcp_only = true;
            self.skip_rest("an MCP-only host: the server stays MCP-only (§3.2)");
        }
        advertises
    }

    /// The initial policy, awaited for one step after `initialize` was answered (issue #19
    /// item 1: without one the run goes on as for a host that granted nothing). Meanwhile a
    /// push goes out once the host said `notifications/initialized` (or sent its policy),
    /// which must be refused whatever the host does with its policy (§5.3).
    async fn initial_policy(&mut self) {
        self.stage = "the wait for the policy";
        let deadline = Instant::now() + self.bounds.step;
        let mut notified = false;
        let mut request = None;
        // Up to `notifications/initialized` (MCP: no server request before it) or the
        // policy Request, whichever comes first.
        while let Some(m) = self.next_until(deadline).await {
            match m {
                IncomingMessage::Notification(n) if n.method == Initialized::NAME => {
                    self.note_form(&n.method, None);
                    break;
                }
                IncomingMessage::Notification(n) if n.method == FeatureSetsUpdate::NAME => {
                    notified |= self.policy_notification(n.params.as_ref());
                }
                IncomingMessage::Request(r) if r.method() == FeatureSetsUpdate::NAME => {
                    request = Some(r);
                    break;
                }
                m => self.handle(m).await,
            }
        }

        // §5.3: polled once, so the frame is written (or queued ahead of the receipt) before
        // anything else goes out; a settled call is not polled again.
        let early_sent = Instant::now();
        let params = Some(served::push("check.push", "early"));
        let mut early = self.start(PushEvent::NAME, params, self.bounds.step);
        let settled = poll_once(&mut early).await;
        // The same for a privileged Request of another family (§5.3: every inbound
        // privileged method), after the push so the push's judgement is as before.
        let register = Some(served::early_descriptor());
        let mut early_register = self.start(ChannelsRegister::NAME, register, self.bounds.step);
        let register_settled = poll_once(&mut early_register).await;
        // And a server-initiated inference (§5.3, §11.1: `inferenceRequest` is a capability,
        // so `inference/request` is privileged), which a host must not run before the grant
        // is in force. Its deadline runs beside the others', so the run's bound is unchanged.
        let infer = Some(served::inference_request());
        let mut early_infer = self.start(InferenceRequest::NAME, infer, self.bounds.step);
        let infer_settled = poll_once(&mut early_infer).await;

        if request.is_none() {
            while let Some(m) = self.next_until(deadline).await {
                match m {
                    IncomingMessage::Request(r) if r.method() == FeatureSetsUpdate::NAME => {
                        request = Some(r);
                        break;
                    }
                    IncomingMessage::Notification(n) if n.method == FeatureSetsUpdate::NAME => {
                        notified |= self.policy_notification(n.params.as_ref());
                    }
                    m => self.handle(m).await,
                }
            }
        }
        // The ping ahead of the receipt is awaited until half a step after the early
        // requests went out at most, and never more than `RECEIPT_HOLD_MAX` (never past
        // the policy's deadline): a host that reads nothing while it awaits its receipt
        // still has time to answer them, and a large `--timeout` cannot hold the receipt
        // past a conforming host's own policy timeout (the library's is 10 s).
        let hold = deadline.min(early_sent + (self.bounds.step / 2).min(RECEIPT_HOLD_MAX));
        match request {
            Some(req) => self.policy(req, notified, hold).await,
            None => {
                let discarded = self.discarded();
                let why = if notified {
                    "the grant came only as a Notification, which cannot make the server ready \
                     (§6.7); probed as a host that granted nothing"
                        .to_owned()
                } else if let Some(g) = self.gone() {
                    format!("no featureSets/update Request: {g}{discarded}")
                } else {
                    let early = if self.policy_before_initialize {
                        " (one came before initialize and was refused -32600)"
                    } else {
                        ""
                    };
                    format!(
                        "no featureSets/update Request within {}{early}{discarded}{}: the \
                         server never becomes ready (§5.3); probed as a host that granted \
                         nothing",
                        secs(self.bounds.step),
                        self.left_unfinished()
                    )
                };
                self.record("host.policy-is-request", Status::Fail, why);
                let why = "no policy Request arrived: there is no grant to judge";
                self.record_unset(&GRANT_CHECKS, Status::Skip, why);
            }
        }

        let (push, register) = ((settled, early), (register_settled, early_register));
        let push_stage = "the push/event sent before the receipt";
        self.judge_early(
            ("host.refuses-before-ready", push_stage),
            PushEvent::NAME,
            push,
            "",
        )
        .await;
        let why = " (§5.3: a host rejects inbound privileged methods until the policy exchange \
                   completes)";
        let register_stage = "the channels/register sent before the receipt";
        self.judge_early(
            ("host.register-refused-before-ready", register_stage),
            ChannelsRegister::NAME,
            register,
            why,
        )
        .await;
        let infer_stage = "the inference/request sent before the receipt";
        self.judge_early(
            ("host.inference-refused-before-ready", infer_stage),
            InferenceRequest::NAME,
            (infer_settled, early_infer),
            why,
        )
        .await;
    }

    /// Judges under `id` (at `stage`) the answer to `method` sent before the receipt (§5.3): passed when
    /// refused with an error, failed (with `why` after the detail) when answered otherwise;
    /// nothing when the connection ended.
    async fn judge_early(
        &mut self,
        (id, stage): (&str, &'static str),
        method: &str,
        (settled, call): (
            Option<Result<Value, mcpl::peer::PeerError>>,
            super::session::Call,
        ),
        why: &str,
    ) {
        self.stage = stage;
        let reply = match settled {
            Some(r) => self.reply(r),
            None => self.settle(call).await,
        };
        let needs = super::session::needs_of(method, &serde_json::json!({}));
        self.note_refusal_data(method, needs, &reply);
        match reply {
            // An inference run and failed (its backend unreachable, say) is an error too, yet
            // not a refusal: a code that refuses (§6.6, App. A; `-32601`/`-32600` for a host
            // that serves none or is not ready) passes, any other warns (§5.3, §11.1).
            super::session::Reply::Error(e)
                if id == "host.inference-refused-before-ready"
                    && !EARLY_INFERENCE_REFUSALS.contains(&e.code) =>
            {
                self.record(
                    id,
                    Status::Warn,
                    format!(
                        "{method} before the receipt got error {}, which is no refusal code \
                         (-32002, -32001, -32003, -32601 or -32600): the host may have run the \
                         inference before any grant was in force{why}",
                        e.code
                    ),
                )
            }
            super::session::Reply::Error(e) => {
                self.record(id, Status::Pass, format!("refused with error {}", e.code))
            }
            super::session::Reply::Closed => {}
            other => self.record(
                id,
                Status::Fail,
                format!("{method} before the receipt got {}{why}", other.describe()),
            ),
        }
    }

    /// Judges the initial policy Request and answers it: the library's receipt for a
    /// well-formed one, `-32602` for a malformed one (§5.4: a path both granted and denied
    /// is rejected; the server then never becomes ready and holds no grant, §5.3).
    ///
    /// §5.3, §6.7: fan-out begins only once the host has read the receipt, and it cannot
    /// have read one not yet written. So before the receipt goes out, a `ping` does a round
    /// trip ([`Run::round_trip`], until `hold`), and everything the host sent before its
    /// answer is handled as before the receipt: a hook or an `inference/lifecycle` the
    /// host pipelined behind its policy Request, without awaiting the receipt, is judged as
    /// what it is (`host.hooks-after-ready`, `host.deliveries-within-grant`), however late
    /// the checker would otherwise have read it. Past `hold` (a host that reads nothing while
    /// it awaits its receipt) the receipt goes out, what follows judged as after it.
    async fn policy(&mut self, req: IncomingRequest, notified: bool, hold: Instant) {
        let id = "host.policy-is-request";
        if notified {
            let d = "the grant came first as a Notification (§6.7: grant changes go by Request)";
            self.record(id, Status::Fail, d);
        } else {
            self.record(id, Status::Pass, "initial policy sent as a Request");
        }
        let params = req.request().params.clone().unwrap_or(Value::Null);
        self.judge_policy_grant(&params, "");
        match self.policy.apply(Form::Request, &params) {
            Ok(outcome) => {
                let receipt = outcome
                    .receipt
                    .map_or_else(|| json!({ "accepted": true }), |r| r.to_value());
                self.round_trip(hold).await;
                match req.respond(receipt).await {
                    Ok(()) => {
                        self.ready = true;
                        self.grant_notified = false;
                    }
                    Err(_) if self.peer.close_reason().is_some() => self.on_closed(),
                    Err(_) => {}
                }
            }
            Err(e) => {
                if req.respond_error(e.to_error()).await.is_err()
                    && self.peer.close_reason().is_some()
                {
                    self.on_closed();
                }
            }
        }
    }

    /// Judges the grant a policy Request carries (§5.3, §5.4, §6.7): the initial one and
    /// every later one alike, since each replaces the grant; `which` prefixes the details
    /// (empty for the initial Request). Each check's verdict is the worst over every policy
    /// Request ([`Run::record`]): a later Request that warns or fails replaces the initial
    /// one's pass.
    pub(super) fn judge_policy_grant(&mut self, params: &Value, which: &str) {
        self.judge_grant_paths(params, which);
        self.judge_own_advertisement(params, which);
        // The library server's own reading of the params (§5.4: a path both granted and
        // denied makes the update malformed; so does a list that is not one of strings).
        match UpdateParams::parse(params) {
            Ok(_) => {
                let d = format!("{which}no path both granted and denied");
                self.record("host.grant-not-contradictory", Status::Pass, d);
            }
            Err(PolicyError::GrantedAndDenied { path }) => {
                let d = format!("{which}{path} is both granted and denied");
                self.record("host.grant-not-contradictory", Status::Fail, d);
            }
            Err(other) => {
                let d = format!("{which}malformed: {other}");
                self.record("host.grant-within-advertisement", Status::Fail, d);
            }
        }
    }

    /// §5.4: `effectiveCapabilities` is the intersection of the advertisement and the
    /// host's policy. A literal path the server never advertised fails, and so does an entry
    /// naming no §6.2 path at all (a typo, a case variant: it grants nothing); a `*` pattern
    /// that reaches beyond the advertisement warns (the server intersects anyway), and so
    /// does an entry naming a node above the paths (a bare parent such as `channels`, or
    /// `contextHooks.*`), which grants none of them ([`capability::names_a_node`]).
    fn judge_grant_paths(&mut self, params: &Value, which: &str) {
        let id = "host.grant-within-advertisement";
        // The advertisement in force: the manifest the host last read (§17.5: once it has
        // read one removing a path, a grant naming it is one beyond the advertisement).
        let advertised = self.policy.advertised();
        let entries: Vec<&str> = params
            .get("effectiveCapabilities")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // The library server's own reading of the excess (§5.4), named by entry.
        let excess = mcpl::policy::GrantExcess::of(&entries, advertised);
        let (mut outside, mut wide, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
        for e in &entries {
            if let Ok(c) = e.parse::<Capability>() {
                if excess.named.contains(c) {
                    outside.push(*e);
                }
            } else if let Ok(p) = Pattern::parse(e) {
                if p.resolved().is_empty() {
                    if capability::names_a_node(e) {
                        nodes.push(*e);
                    } else {
                        outside.push(*e);
                    }
                } else if !p.resolved().intersection(excess.by_pattern).is_empty() {
                    wide.push(*e);
                }
            }
        }
        // The library's hint for each of the first few, short enough to be a typo (a hint
        // ranks the 17 paths by edit distance: its cost grows with the entry's length).
        let nameless = |found: &[&str]| {
            let hints: Vec<String> = found
                .iter()
                .filter(|e| e.len() <= HINTED_ENTRY_BYTES)
                .take(HINTED_ENTRIES)
                .filter_map(|e| match mcpl::capability::Grant::from_policy([*e]) {
                    Err(PatternError::NoPath { pattern, hint }) => Some(format!(
                        "{pattern} names no capability path, so it grants nothing (§5.4, \
                         §6.2): {hint}"
                    )),
                    _ => None,
                })
                .collect();
            hints.join("; ")
        };
        if !outside.is_empty() {
            let initial = served_advertisement();
            let removed: Vec<&str> = outside
                .iter()
                .copied()
                .filter(|e| e.parse::<Capability>().is_ok_and(|c| initial.contains(c)))
                .collect();
            let mut d = if removed.is_empty() {
                format!(
                    "{which}grants what was never advertised: {}",
                    list(&outside)
                )
            } else {
                format!(
                    "{which}grants what the manifest the host fetched no longer advertises: {} \
                     (§17.5: a removal is revoked, §5.4: the grant stays within the \
                     advertisement)",
                    list(&outside)
                )
            };
            let said = nameless(&outside);
            if !said.is_empty() {
                d.push_str(&format!(" ({said})"));
            }
            self.record(id, Status::Fail, d);
        } else if !wide.is_empty() || !nodes.is_empty() {
            let mut parts = Vec::new();
            if !wide.is_empty() {
                parts.push(format!(
                    "patterns reach past the advertisement: {}",
                    list(&wide)
                ));
            }
            if !nodes.is_empty() {
                parts.push(nameless(&nodes));
            }
            self.record(id, Status::Warn, format!("{which}{}", parts.join("; ")));
        } else {
            let d = format!("{which}grants {}", list(&entries));
            self.record(id, Status::Pass, d);
        }
    }

    /// §5.2: the host advertises its MCPL support, mirroring the server's shape; a grant of
    /// a path it does not claim to support is the under-advertising AUDIT-001 §2.5 and §4.2
    /// item 10 found. No sentence of the spec makes it a MUST, so it warns. Patterns count
    /// for what they reach within the server's advertisement; `tools` is MCP's, not here.
    fn judge_own_advertisement(&mut self, params: &Value, which: &str) {
        let id = "host.grant-within-own-advertisement";
        let server = self.policy.advertised();
        let mut granted = CapabilitySet::EMPTY;
        for e in params
            .get("effectiveCapabilities")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if let Ok(p) = Pattern::parse(e) {
                for c in p.resolved().iter() {
                    if !e.contains('*') || server.contains(c) {
                        granted.insert(c);
                    }
                }
            }
        }
        granted.remove(Capability::Tools);
        let unclaimed = granted.difference(self.host_advertised);
        if unclaimed == CapabilitySet::EMPTY {
            let d = format!("{which}every granted path is one the host advertises");
            self.record(id, Status::Pass, d);
        } else {
            let d = format!(
                "{which}grants what its own experimental.mcpl does not claim to support: {}",
                unclaimed.sorted_paths().join(", ")
            );
            self.record(id, Status::Warn, d);
        }
    }
}
