//! Several sessions per run (issue #18): after the first session under the full grant, the
//! checker reconnects (re-spawns a command, re-dials an address) and runs each further
//! session under a grant narrowed from that one. Sessions are independent (§5.3): each is a
//! fresh connection with its own handshake and initial policy, and nothing carries over
//! but the plan.
//!
//! A narrowed session is short: the handshake, the policy Request (§5.3), the per-session
//! steps, one `context/beforeInference` when its grant lets the host send one (§10.1), and
//! one window (a `ping` round trip, then `--watch`). What the server sends is judged against
//! that session's grant: a use the full grant allowed and this grant withholds fails
//! `grant.narrowed-respected` (§5.4), a tagged use of a set it leaves unavailable fails
//! `featuresets.narrowed-respected` (§6.4, §6.5); everything else is judged by the same
//! checks as in the first session.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use mcpl::capability::{self, Capability, CapabilitySet};
use mcpl::policy::{self, FeatureSets, HostGrant};
use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::Method;
use serde_json::Value;

use super::*;
use crate::check::report::{self, Recorder, Status};

/// At most this many feature sets are disabled in turn, one session each: the sets the
/// first session saw in use, in name order.
pub const MAX_DISABLED_IN_TURN: usize = 8;

/// The default and the largest `--sessions`.
pub const DEFAULT_SESSIONS: usize = 16;

/// Check ids only a narrowed session decides.
const NARROWED_IDS: [&str; 2] = ["grant.narrowed-respected", "featuresets.narrowed-respected"];

/// One planned later session: the paths of the full grant it keeps, the sets its policy
/// disables or selects, and how its policy Request spells the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// How the session is named in the report.
    pub(super) label: String,
    /// Paths kept from the full grant (the effective grant is the full one ∩ this).
    keep: CapabilitySet,
    /// `disabled` of its policy Request (§5.3).
    disabled: Vec<String>,
    /// `enabled` of its policy Request in place of `--enable`'s (§5.3: an allowlist).
    enabled: Option<Vec<String>>,
    /// How the grant is written on the wire.
    form: Form,
}

/// How a narrowed session's policy Request spells its grant. The grant is the same under
/// each: only the spelling differs, in the ways live servers were seen to misread
/// (AUDIT-001: absence taken as "no change", one-segment wildcards read as subtrees,
/// `deniedCapabilities` used as the authority).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// As [`HostGrant::update_params`] writes it: every path granted and every one denied.
    Plain,
    /// No `effectiveCapabilities` (nor `deniedCapabilities`): a grant of nothing (§5.3's
    /// pinned field semantics), not "no change". Sent after the full grant was accepted,
    /// so a server reading it as "no change" keeps a wider grant and shows it.
    Absent,
    /// `deniedCapabilities` omitted (§5.4: diagnostic only, MAY be omitted, never an
    /// authority), and beside the granted paths two entries that grant nothing (§5.4):
    /// `contextHooks.*` (one segment: no hook leaf, which are deeper) and a bare
    /// `channels` (a parent path grants no leaf).
    Decoys,
}

/// The entries [`Form::Decoys`] adds to `effectiveCapabilities`: each grants no path a
/// method requires (§5.4).
pub(super) const DECOYS: [&str; 2] = ["contextHooks.*", "channels"];

impl Form {
    /// `params` (as [`HostGrant::update_params`] wrote them) spelt this way.
    pub(super) fn spell(self, mut params: Value) -> Value {
        let Some(obj) = params.as_object_mut() else {
            return params;
        };
        match self {
            Form::Plain => {}
            Form::Absent => {
                obj.remove("effectiveCapabilities");
                obj.remove("deniedCapabilities");
            }
            Form::Decoys => {
                obj.remove("deniedCapabilities");
                if let Some(Value::Array(granted)) = obj.get_mut("effectiveCapabilities") {
                    granted.extend(DECOYS.map(Value::from));
                }
            }
        }
        params
    }
}

/// The later sessions for a server whose first session was granted `full`, and which was
/// seen using the feature sets `used`: nothing granted; only `tools`; everything but
/// `pushEvents`; everything but `channels.*`; everything but the hook leaves; nothing
/// granted with `effectiveCapabilities` absent ([`Form::Absent`]); only `tools` spelt with
/// [`Form::Decoys`]; only the first used set selected by `enabled` (unless `enable_given`:
/// `--enable` already selects in every session); then each used set disabled in turn. A
/// plan whose grant, selection and spelling equal the full session's or an earlier plan's
/// is dropped (it would show nothing new).
pub(super) fn plan(full: &HostGrant, used: &BTreeSet<String>, enable_given: bool) -> Vec<Plan> {
    let all = CapabilitySet::ALL;
    let below = |prefix: &str| -> CapabilitySet {
        Capability::ALL
            .into_iter()
            .filter(|c| c.is_at_or_below(prefix))
            .collect()
    };
    let only = |c: Capability| -> CapabilitySet { [c].into_iter().collect() };
    let grants = [
        ("nothing granted", CapabilitySet::EMPTY),
        ("only tools", only(Capability::Tools)),
        (
            "everything but pushEvents",
            all.difference(only(Capability::PushEvents)),
        ),
        (
            "everything but channels.*",
            all.difference(below("channels")),
        ),
        (
            "everything but the hook leaves",
            all.difference(below("contextHooks")),
        ),
    ];
    let grant = |label: &str, keep, form| Plan {
        label: label.to_owned(),
        keep,
        disabled: Vec::new(),
        enabled: None,
        form,
    };
    let mut plans: Vec<Plan> = grants
        .into_iter()
        .map(|(label, keep)| grant(label, keep, Form::Plain))
        .collect();
    plans.push(grant(
        "nothing granted, effectiveCapabilities absent after the full grant",
        CapabilitySet::EMPTY,
        Form::Absent,
    ));
    plans.push(grant(
        "only tools, deniedCapabilities omitted, contextHooks.* and channels listed",
        only(Capability::Tools),
        Form::Decoys,
    ));
    if let (Some(first), false) = (used.iter().next(), enable_given || used.len() < 2) {
        plans.push(Plan {
            enabled: Some(vec![first.clone()]),
            ..grant(&format!("only {first} enabled"), all, Form::Plain)
        });
    }
    plans.extend(used.iter().take(MAX_DISABLED_IN_TURN).map(|set| Plan {
        disabled: vec![set.clone()],
        ..grant(&format!("{set} disabled"), all, Form::Plain)
    }));
    let granted = full.effective.capabilities();
    let mut seen = vec![(granted, Vec::new(), None, Form::Plain)];
    plans.retain(|p| {
        let key = (
            granted.intersection(p.keep),
            p.disabled.clone(),
            p.enabled.clone(),
            p.form,
        );
        let new = !seen.contains(&key);
        if new {
            seen.push(key);
        }
        new
    });
    plans
}

/// One finished session: what narrowed it, the policy it sent, and its verdicts.
pub struct SessionRun {
    /// `full grant` for the first session, else what narrows it ("only tools", …).
    pub label: String,
    /// The params of its policy Request (`effectiveCapabilities`, `deniedCapabilities`,
    /// `disabled`), when one was sent.
    pub grant: Option<Value>,
    /// Its verdicts.
    pub rec: Recorder,
    /// Why it could not run (the reconnection failed), when it could not.
    pub error: Option<String>,
    /// What each of its scenario steps came to.
    pub steps: Vec<scenario::Outcome>,
    /// A usage error that stopped the run (exit 2), found in this session.
    pub fatal: Option<String>,
}

/// How the later sessions of a run connect.
pub struct Reconnect<'a> {
    /// Opens session `n`'s connection (`n` from 2).
    pub open: &'a (dyn Fn(usize) -> io::Result<Conn> + Sync),
    /// Whether the later sessions may run at once (each on its own connection) rather
    /// than one after the other: only for a server known to share nothing between
    /// instances or connections.
    pub concurrent: bool,
}

/// Runs the first session on `first`, then up to `max_sessions - 1` narrowed sessions,
/// each on a connection from `reconnect`. When they run one after the other, a failed
/// reconnection is reported on its session and ends the run (the target has shown it takes
/// no further connection). `progress` prints the first session's checks as they are
/// recorded and one line per later session.
pub fn run(
    first: Conn,
    reconnect: &Reconnect<'_>,
    timing: Timing,
    max_sessions: usize,
    progress: bool,
    scenario: &Arc<Scenario>,
) -> Vec<SessionRun> {
    let runner = Runner::new(scenario.clone(), 1);
    let mut s = Session::new(first, timing, Recorder::new(progress), runner);
    s.full_session();
    if s.fatal.is_some() {
        return vec![s.into_run("full grant".to_owned())];
    }
    let plans = match s.host_grant {
        Some(full) if max_sessions > 1 => {
            plan(&full, &s.used_sets, s.runner.scenario().enabled().is_some())
        }
        _ => Vec::new(),
    };
    let why = if max_sessions <= 1 {
        Some("one session (--sessions 1 or --quick): no narrowed grant was tried")
    } else if s.host_grant.is_none() {
        Some("no MCPL advertisement to narrow a grant from")
    } else if plans.is_empty() {
        Some("no narrower grant differs from the full one")
    } else {
        None
    };
    if let Some(why) = why {
        s.rec.skip_all(&NARROWED_IDS, why);
    }
    let full = s.host_grant;
    let mut runs = vec![s.into_run("full grant".to_owned())];
    let Some(full) = full.filter(|_| why.is_none()) else {
        return runs;
    };
    let plans: Vec<(usize, &Plan)> = plans
        .iter()
        .take(max_sessions.saturating_sub(1))
        .enumerate()
        .map(|(i, p)| (i + 2, p))
        .collect();
    let one = |(n, plan): (usize, &Plan)| -> SessionRun {
        let run = match (reconnect.open)(n) {
            Ok(conn) => {
                let runner = Runner::new(scenario.clone(), n);
                let mut s = Session::new(conn, timing, Recorder::new(false), runner);
                s.narrowed_session(plan, &full);
                s.into_run(plan.label.clone())
            }
            Err(e) => SessionRun {
                label: plan.label.clone(),
                grant: None,
                rec: Recorder::new(false),
                error: Some(format!("could not reconnect for session {n}: {e}")),
                steps: Vec::new(),
                fatal: None,
            },
        };
        if progress {
            let verdict = match (&run.error, run.rec.failed()) {
                (Some(e), _) => e.clone(),
                (None, f) if f.is_empty() => "nothing failed".to_owned(),
                (None, f) => format!("failed {}", f.join(", ")),
            };
            report::progress_line(&format!(
                "mcpl check: session {n} ({}): {verdict}",
                plan.label
            ));
        }
        run
    };
    if reconnect.concurrent {
        std::thread::scope(|scope| {
            let handles: Vec<_> = plans
                .iter()
                .map(|&p| (p, scope.spawn(move || one(p))))
                .collect();
            for ((n, plan), h) in handles {
                runs.push(h.join().unwrap_or_else(|_| SessionRun {
                    label: plan.label.clone(),
                    grant: None,
                    rec: Recorder::new(false),
                    error: Some(format!("internal: session {n} panicked")),
                    steps: Vec::new(),
                    fatal: None,
                }));
            }
        });
    } else {
        for p in plans {
            let run = one(p);
            let failed = run.error.is_some();
            runs.push(run);
            if failed {
                break;
            }
        }
    }
    summarise_narrowed(&mut runs);
    runs
}

/// The first session's verdict on the narrowed checks, from the later sessions': a pass
/// that counts every session it held in, a skip (the failing session's verdict is the
/// merged one), or a skip saying why no session could judge.
fn summarise_narrowed(runs: &mut [SessionRun]) {
    let Some((first, later)) = runs.split_first_mut() else {
        return;
    };
    for id in NARROWED_IDS {
        let statuses: Vec<Status> = later.iter().filter_map(|r| r.rec.status(id)).collect();
        let passed = statuses.iter().filter(|s| **s == Status::Pass).count();
        if statuses.contains(&Status::Fail) {
            first
                .rec
                .record(id, Status::Skip, "failed in a narrowed session");
        } else if passed > 0 {
            let d = format!("held under the {passed} narrowed grant(s) whose policy was accepted");
            first.rec.record(id, Status::Pass, d);
        } else {
            let why = "no narrowed session had its policy accepted";
            first.rec.record(id, Status::Skip, why);
        }
    }
}

impl Session {
    /// Ends the session (its connection is closed, a spawned server killed) and hands
    /// back what it found.
    fn into_run(self, label: String) -> SessionRun {
        SessionRun {
            label,
            grant: self.sent_policy,
            rec: self.rec,
            error: self.start_error,
            steps: self.runner.into_outcomes(),
            fatal: self.fatal,
        }
    }

    /// A later session under `plan`'s narrowing of `full` (see the module docs).
    pub(super) fn narrowed_session(&mut self, plan: &Plan, full: &HostGrant) {
        self.narrowed = Some(Narrowed {
            label: plan.label.clone(),
            full: full.effective,
            full_available: BTreeSet::new(),
        });
        let Some((capabilities, mcpl)) = self.handshake() else {
            return;
        };
        // The instance reached this time may present another manifest: past the bound it
        // is refused as in the first session, before any set is built.
        if !self.feature_sets_within_bound(&mcpl) {
            return;
        }
        let (sets, _) = FeatureSets::from_mcpl(&mcpl);
        self.adopt_declarations(sets.clone());
        let full_params = self.policy_params(full, &[]);
        let full_available = super::negotiation::derivation(&sets, &full_params)
            .into_iter()
            .filter(|(_, st)| st.is_available())
            .map(|(n, _)| n)
            .collect();
        if let Some(n) = &mut self.narrowed {
            n.full_available = full_available;
        }
        let advertised = capability::advertised_from_capabilities(&capabilities).capabilities;
        let granting = |keep: CapabilitySet| {
            let effective = full.effective.intersect(keep).intersect(advertised);
            HostGrant {
                advertised,
                effective,
                denied: advertised.difference(effective.capabilities()),
            }
        };
        let host_grant = granting(plan.keep);
        self.policy_sent = true;
        if plan.form == Form::Absent {
            // §5.3, §6.7: absence must not leave an earlier, wider grant standing, so the
            // full grant comes first, and the policy without `effectiveCapabilities` then
            // narrows it (what the server sends before that receipt is the full grant's).
            let wide = granting(CapabilitySet::ALL);
            let params = self.policy_params(&wide, &[]);
            self.policy_as(&wide, &sets, params);
            self.settle();
        }
        // Absent: only once the full grant is in force is there a grant to take back (else
        // the narrowed checks are skipped: no receipt made the session ready).
        if plan.form != Form::Absent || self.ready {
            let mut params = self.policy_params(&host_grant, &plan.disabled);
            if let (Some(enabled), Some(obj)) = (&plan.enabled, params.as_object_mut()) {
                obj.insert("enabled".into(), serde_json::json!(enabled));
            }
            let params = plan.form.spell(params);
            let narrowing = plan.form == Form::Absent;
            let statuses = narrowing.then(|| super::negotiation::derivation(&sets, &params));
            self.policy_as(&host_grant, &sets, params);
            if let Some(statuses) = statuses {
                // §6.7: a reduction binds the host first, whatever the server answers (an
                // error, a refusal, nothing): from its answer on, what the server sends is
                // judged under the narrowed grant, so a server that refuses the absent
                // form and goes on under the full grant fails the narrowed check.
                self.grant = host_grant.effective;
                self.statuses = statuses;
            }
        }
        self.settle();
        if !self.after_policy_exchange() {
            return;
        }
        self.widening_notification(&granting(CapabilitySet::ALL));
        self.narrowed_hook();
        self.window();
        self.conclude();
    }

    /// One `context/beforeInference` when this session's grant lets the host send it
    /// (§5.3, §10.1): its answer is judged as every hook answer is
    /// ([`Session::judge_hook_answer`]): each injection authorized against the grant at
    /// receipt (§5.4), under a set the grant leaves available (§6.5).
    fn narrowed_hook(&mut self) {
        if !self.ready || !policy::before_inference_applies(&self.grant) {
            return;
        }
        let params = self.hook_params(0);
        let reply = self.request(BeforeInference::NAME, params.clone());
        if !matches!(reply, Reply::Result(_)) {
            self.later_hook_answered(&params, reply);
        }
    }

    /// The first session's grant (this session's own in the first session).
    pub(super) fn full_grant(&self) -> Grant {
        self.narrowed.as_ref().map_or(self.grant, |n| n.full)
    }

    /// A finding in a narrowed session about something this grant withholds: the
    /// narrowing's (`grant.narrowed-respected`) when the full grant allowed it, else
    /// `otherwise`'s, the check the first session counts it under.
    pub(super) fn narrowing_finding(
        &mut self,
        full_allowed: bool,
        otherwise: &'static str,
        detail: String,
    ) {
        if full_allowed {
            self.narrowed_outside.push(detail);
        } else {
            self.rec.record(otherwise, Status::Fail, detail);
        }
    }

    /// A tagged use of `fs`, declared but unavailable under this session's grant: the
    /// narrowing's (`featuresets.narrowed-respected`) when the full grant left it available,
    /// else `otherwise`'s.
    pub(super) fn unavailable_use(&mut self, fs: &str, otherwise: &'static str, detail: String) {
        let was_available = self
            .narrowed
            .as_ref()
            .is_some_and(|n| n.full_available.contains(fs));
        if was_available {
            self.narrowed_unavailable.push(detail);
        } else {
            let detail = format!("{detail}, which the grant leaves unavailable");
            self.rec.record(otherwise, Status::Fail, detail);
        }
    }

    /// The verdicts only a narrowed session gives (called by `conclude`).
    pub(super) fn conclude_narrowed(&mut self) {
        let Some(label) = self.narrowed.as_ref().map(|n| n.label.clone()) else {
            return;
        };
        let [grant_id, sets_id] = NARROWED_IDS;
        if !self.ready {
            let why = match self.unaccepted {
                Some(what) => format!("{what}: the policy of {label} is not in force"),
                None => format!("no receipt for the policy of {label}"),
            };
            self.rec.skip_all(&NARROWED_IDS, &why);
            return;
        }
        let verdicts = [
            (
                grant_id,
                self.narrowed_outside.clone(),
                self.privileged_after_ready,
                "privileged message(s), all within the grant",
                "nothing privileged sent",
            ),
            (
                sets_id,
                self.narrowed_unavailable.clone(),
                self.tagged_uses,
                "tagged use(s), none under an unavailable set",
                "nothing feature-set-tagged sent",
            ),
        ];
        for (id, findings, seen, held, nothing) in verdicts {
            let widening = self.after_widening(id);
            match (findings.is_empty(), seen) {
                (false, _) => {
                    let d = format!("{}{widening}", findings.join("; "));
                    self.rec.record(id, Status::Fail, d);
                }
                (true, 0) => self
                    .rec
                    .record(id, Status::Pass, format!("{nothing}{widening}")),
                (true, n) => self
                    .rec
                    .record(id, Status::Pass, format!("{n} {held}{widening}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(paths: &[Capability]) -> HostGrant {
        let advertised: CapabilitySet = paths.iter().copied().collect();
        HostGrant::compute(advertised, host_policy()).unwrap()
    }

    #[test]
    fn the_plan_narrows_in_the_issue_order_and_drops_what_changes_nothing() {
        let g = full(&[
            Capability::Tools,
            Capability::PushEvents,
            Capability::ChannelsRegister,
            Capability::InjectBeforeUser,
        ]);
        let used: BTreeSet<String> = ["b.push", "a.hint"].map(str::to_owned).into();
        let labels: Vec<String> = plan(&g, &used, false)
            .into_iter()
            .map(|p| p.label)
            .collect();
        assert_eq!(
            labels,
            [
                "nothing granted",
                "only tools",
                "everything but pushEvents",
                "everything but channels.*",
                "everything but the hook leaves",
                "nothing granted, effectiveCapabilities absent after the full grant",
                "only tools, deniedCapabilities omitted, contextHooks.* and channels listed",
                "only a.hint enabled",
                "a.hint disabled",
                "b.push disabled",
            ]
        );
        // `--enable` selects in every session: no plan of its own.
        let labels: Vec<String> = plan(&g, &used, true).into_iter().map(|p| p.label).collect();
        assert!(!labels.iter().any(|l| l.ends_with("enabled")), "{labels:?}");
        // Only tools advertised: every plan but the two granting nothing is the full grant
        // again, and only the decoys' spelling of it is new (a server must still read
        // `contextHooks.*` and a bare `channels` as granting nothing, not refuse them).
        let labels: Vec<String> = plan(&full(&[Capability::Tools]), &BTreeSet::new(), false)
            .into_iter()
            .map(|p| p.label)
            .collect();
        assert_eq!(
            labels,
            [
                "nothing granted",
                "nothing granted, effectiveCapabilities absent after the full grant",
                "only tools, deniedCapabilities omitted, contextHooks.* and channels listed",
            ]
        );
    }

    /// §5.3 (absent `effectiveCapabilities` grants nothing), §5.4 (`*` is one segment, a
    /// bare parent grants no leaf, `deniedCapabilities` is no authority): each spelling of
    /// a plan's policy grants, by the library's own reading of the params, exactly the
    /// grant the session is judged under.
    #[test]
    fn s5_3_s5_4_every_spelling_grants_exactly_the_plans_grant() {
        let g = full(&Capability::ALL);
        let used: BTreeSet<String> = ["a.hint", "b.push"].map(str::to_owned).into();
        for p in plan(&g, &used, false) {
            let effective = g.effective.intersect(p.keep);
            let judged = HostGrant {
                advertised: g.advertised,
                effective,
                denied: g.advertised.difference(effective.capabilities()),
            };
            let params = p.form.spell(judged.update_params(None, &p.disabled));
            let read = policy::UpdateParams::parse(&params).expect("well-formed policy");
            assert_eq!(
                read.effective.unwrap_or_default().capabilities(),
                effective.capabilities(),
                "{}: {params}",
                p.label
            );
            match p.form {
                Form::Plain => assert!(read.denied_present, "{}", p.label),
                Form::Absent => assert!(params.get("effectiveCapabilities").is_none()),
                Form::Decoys => {
                    assert!(!read.denied_present, "{}", p.label);
                    let listed = params["effectiveCapabilities"].to_string();
                    assert!(DECOYS.iter().all(|d| listed.contains(d)), "{listed}");
                }
            }
        }
    }

    #[test]
    fn at_most_max_disabled_in_turn_sets_are_disabled() {
        let g = full(&[Capability::PushEvents]);
        let used: BTreeSet<String> = (0..20).map(|i| format!("s{i:02}")).collect();
        let disabled = plan(&g, &used, false)
            .into_iter()
            .filter(|p| !p.disabled.is_empty())
            .count();
        assert_eq!(disabled, MAX_DISABLED_IN_TURN);
    }
}
