//! `host.lifecycle-metadata-only` and `host.lifecycle-paired` (§10.5; AUDIT-001 §2.2):
//! `inference/lifecycle` replaced `context/afterInference`, which handed every subscriber the
//! user's and the model's text, with a metadata-only signal. The checker advertises
//! `inferenceLifecycle` (under `check.turns`), so a host granting it sends the signal when
//! its turns run, and each one is judged:
//!
//! - **metadata only**: well-formed §10.5 params (`inferenceId`, a phase of the four), no
//!   message content (the library's [`LifecycleParams::content_like_members`]), `model` only
//!   when `modelInfo` is granted ([`mcpl::policy::ungranted_lifecycle_model`]; the checker
//!   advertises no `modelInfo`, so never here), `usage` only on `completed`; a member
//!   outside §10.5's fields carrying text warns ([`super::unlisted`]: §10.5 lists its
//!   fields, §8 tolerates unknown ones);
//! - **paired**: the library's consumer, [`LifecycleTracker`], reads the stream as a server
//!   does; a terminal with no `started`, a second terminal, or a second `started` for one
//!   `inferenceId` is a conformance defect (§10.5: a host MUST attempt exactly one terminal
//!   per `started`). A missing terminal is not: the host may lose control, and the run may
//!   end mid-turn.
//!
//! Bounded: the tracker holds at most [`MAX_OPEN_TURNS`] open turns and remembers
//! [`REMEMBERED_TERMINALS`] ended ones, ids of at most [`mcpl::lifecycle::DEFAULT_MAX_ID_BYTES`]
//! bytes (a longer one is not tracked: not a defect, §10.5 sets no length); each check keeps
//! [`KEPT`] described defects, each capped, and counts the rest.

use std::time::{Duration, Instant};

use mcpl::capability::Grant;
use mcpl::lifecycle::{LifecycleConfig, LifecycleDiagnostic, LifecycleTracker};
use mcpl::protocol::lifecycle::{LifecycleParams, CONTENT_LIKE_MEMBERS};
use serde::Deserialize;
use serde_json::Value;

use super::judge::capped;
use super::session::Run;
use super::tally::Tally;
use super::unlisted::{text_members, LIFECYCLE_LISTED};
use crate::check::report::Status;

/// The check on what one signal carries.
pub(super) const METADATA: &str = "host.lifecycle-metadata-only";

/// The check on how the signals pair up.
pub(super) const PAIRED: &str = "host.lifecycle-paired";

/// Most turns the checker tracks open at once; a `started` past it ends the oldest as timed
/// out (its later terminal is then no defect).
pub(super) const MAX_OPEN_TURNS: usize = 64;

/// Most ended `inferenceId`s remembered to recognise a second terminal; one for an id
/// forgotten since reads as a terminal with no `started`, a defect all the same.
pub(super) const REMEMBERED_TERMINALS: usize = 256;

/// Described defects kept per check; later ones are counted.
const KEPT: usize = 4;

/// Bytes of one described defect.
const DESCRIBED_BYTES: usize = 200;

/// What one check found: how many defects, the first [`KEPT`] described.
type Found = Tally<KEPT>;

/// Notes one defect of `found`, its description capped at [`DESCRIBED_BYTES`].
fn push(found: &mut Found, said: String) {
    found.note(|| capped(said, DESCRIBED_BYTES));
}

/// The `inference/lifecycle` signals the host sent, read as a server consumes them.
#[derive(Debug)]
pub(super) struct Lifecycles {
    tracker: LifecycleTracker,
    seen: u64,
    metadata: Found,
    paired: Found,
    /// Members outside §10.5's table carrying text: warned, not failed
    /// ([`super::unlisted`]'s reading).
    unlisted: Found,
    /// Integer members written with a fraction or an exponent (`turnIndex: 1.0`): read as
    /// the integer, warned, as `host.chunks-well-formed` warns a chunk's `index: 0.0`
    /// ([`written_whole_floats`]).
    floats: Found,
    /// Signals carrying `model` under a `modelInfo` the host's own grant reaches though the
    /// server never advertised it (§5.4): the grant's defect, judged once, there.
    beyond: u64,
    /// The `inferenceId`s of signals refused for their shape that were not a terminal (a
    /// `started` with a `turnIndex` of -1, or a phase of none of the four): their terminal's
    /// "no started" is the same defect, counted once, under [`METADATA`] (finding F6). At
    /// most [`REMEMBERED_TERMINALS`], the oldest forgotten; ids past the library's
    /// `DEFAULT_MAX_ID_BYTES` are not kept.
    refused_starts: std::collections::VecDeque<String>,
}

impl Default for Lifecycles {
    fn default() -> Self {
        Lifecycles {
            tracker: LifecycleTracker::new(LifecycleConfig {
                // No turn times out within a run: a slow terminal is never misread.
                safety_timeout: Duration::MAX,
                remembered_terminals: REMEMBERED_TERMINALS,
                max_open_turns: MAX_OPEN_TURNS,
                ..LifecycleConfig::default()
            }),
            seen: 0,
            metadata: Tally::default(),
            paired: Tally::default(),
            unlisted: Tally::default(),
            floats: Tally::default(),
            beyond: 0,
            refused_starts: std::collections::VecDeque::new(),
        }
    }
}

impl Lifecycles {
    /// Judges one signal's `params` under `grant`, the grant in force when it came, and
    /// under `before`, the grant (as the host sent it) a held later receipt replaces
    /// ([`Run::expanding`]): a signal read before the host could have read that receipt is
    /// under both (§6.7).
    /// `offered`: the grant as the host sent it ([`mcpl::policy::ServerPolicyState::offered`]);
    /// a `model` it allows though `grant` does not follows the host's grant beyond the
    /// advertisement, counted once as that grant's defect ([`Run::conclude_lifecycles`]).
    fn judge(
        &mut self,
        params: Option<&Value>,
        (grant, offered): (&Grant, &Grant),
        before: Option<&Grant>,
    ) {
        self.seen = self.seen.saturating_add(1);
        let n = self.seen;
        let ungranted = |g: &Grant| mcpl::policy::ungranted_lifecycle_model(g, params);
        if ungranted(offered) {
            push(
                &mut self.metadata,
                format!("signal {n} carried model, though modelInfo is not granted"),
            );
        } else if before.is_some_and(ungranted) {
            push(
                &mut self.metadata,
                format!(
                    "signal {n} carried model under a modelInfo a later policy Request granted, \
                     sent before the host could have read its receipt (§6.7: an expansion \
                     takes effect once the receipt is read)"
                ),
            );
        } else if ungranted(grant) {
            self.beyond = self.beyond.saturating_add(1);
        }
        let unlisted = text_members(params, LIFECYCLE_LISTED, CONTENT_LIKE_MEMBERS);
        if !unlisted.is_empty() {
            push(
                &mut self.unlisted,
                format!(
                    "signal {n} carries text under {}, outside §10.5's fields",
                    unlisted.join(", ")
                ),
            );
        }
        let parsed = params
            .ok_or_else(|| "no params".to_owned())
            .and_then(|p| LifecycleParams::deserialize(p).map_err(|e| e.to_string()));
        if parsed.is_ok() {
            let floats = written_whole_floats(params);
            if !floats.is_empty() {
                push(
                    &mut self.floats,
                    format!("signal {n} wrote {}", floats.join(", ")),
                );
            }
        }
        let params = match parsed {
            Ok(p) => p,
            Err(e) => {
                push(
                    &mut self.metadata,
                    format!("signal {n} is not §10.5's params: {e}"),
                );
                self.remember_refused_start(params);
                return;
            }
        };
        let missing = params.missing_members();
        if !missing.is_empty() {
            push(
                &mut self.metadata,
                format!(
                    "signal {n} ({:?}) leaves out {}, which §10.5's table requires on started",
                    params.phase,
                    missing.join(" and ")
                ),
            );
        }
        for d in self.tracker.observe(&params, Instant::now()).diagnostics {
            if !d.is_conformance_defect() {
                continue;
            }
            match d {
                LifecycleDiagnostic::ContentMembers { .. }
                | LifecycleDiagnostic::UsageOnNonCompleted { .. } => {
                    push(&mut self.metadata, format!("signal {n}: {d}"))
                }
                LifecycleDiagnostic::TerminalWithoutStarted {
                    ref inference_id, ..
                } if self.forget_refused_start(inference_id) => {}
                other => push(&mut self.paired, format!("signal {n}: {other}")),
            }
        }
    }
}

impl Lifecycles {
    /// Keeps the `inferenceId` of a signal refused for its shape unless its phase is one of
    /// the three terminals (a terminal refused has no terminal to follow it).
    fn remember_refused_start(&mut self, params: Option<&Value>) {
        let Some(p) = params.and_then(Value::as_object) else {
            return;
        };
        let terminal = matches!(
            p.get("phase").and_then(Value::as_str),
            Some("completed" | "aborted" | "failed")
        );
        let Some(id) = p.get("inferenceId").and_then(Value::as_str) else {
            return;
        };
        if terminal || id.len() > mcpl::lifecycle::DEFAULT_MAX_ID_BYTES {
            return;
        }
        if self.refused_starts.len() >= REMEMBERED_TERMINALS {
            self.refused_starts.pop_front();
        }
        self.refused_starts.push_back(id.to_owned());
    }

    /// Whether `id` was a refused start's (forgetting it: one terminal is excused).
    fn forget_refused_start(&mut self, id: &str) -> bool {
        match self.refused_starts.iter().position(|r| r == id) {
            Some(i) => {
                self.refused_starts.remove(i);
                true
            }
            None => false,
        }
    }
}

/// The integer members of a signal (§10.5: `turnIndex`, `usage`'s token counts) written
/// with a fraction or an exponent, each as `turnIndex 1.0 (the integer 1)`: the same value,
/// which the library reads as the integer, but not an integer as written. The one rule
/// ([`crate::check::conn::integral_number`], `mcpl::jsonrpc::whole_float_integer`) by
/// which `host.chunks-well-formed` reads a chunk's `index: 0.0`.
fn written_whole_floats(params: Option<&Value>) -> Vec<String> {
    let usage = params.and_then(|p| p.get("usage"));
    let members = [
        ("turnIndex", params.and_then(|p| p.get("turnIndex"))),
        (
            "usage.inputTokens",
            usage.and_then(|u| u.get("inputTokens")),
        ),
        (
            "usage.outputTokens",
            usage.and_then(|u| u.get("outputTokens")),
        ),
    ];
    members
        .into_iter()
        .filter_map(|(name, v)| match v {
            Some(Value::Number(n)) => crate::check::conn::integral_number(n)
                .map(|(i, written)| format!("{name} {written} (the integer {i})")),
            _ => None,
        })
        .collect()
}

/// The verdict of one check on `seen` signals.
fn verdict(found: &Found, seen: u64, what: &str, rule: &str) -> (Status, String) {
    if found.count() == 0 {
        return (
            Status::Pass,
            format!("{seen} inference/lifecycle signal(s), {what}"),
        );
    }
    let shown = found
        .cut()
        .map_or_else(String::new, |n| format!(", the first {n} shown"));
    let d = format!(
        "{} of {seen} inference/lifecycle signal(s) break §10.5 ({rule}){shown}: {}",
        found.count(),
        found.joined()
    );
    (Status::Fail, d)
}

impl Run {
    /// Judges an `inference/lifecycle` the host sent (in either form) under the grant in
    /// force (none before the receipt), and while a later receipt is held under the grant
    /// before it too (§6.7, [`Run::expanding`], as [`Run::judge_hook`] reads a hook).
    pub(super) fn judge_lifecycle(&mut self, params: Option<&Value>) {
        let in_force = if self.policy.is_ready() {
            *self.policy.grant()
        } else {
            Grant::none()
        };
        let offered = if self.policy.is_ready() {
            *self.policy.offered()
        } else {
            Grant::none()
        };
        let before = self.expanding.map(|(_, offered)| offered);
        self.lifecycles
            .judge(params, (&in_force, &offered), before.as_ref());
    }

    /// Records [`METADATA`] and [`PAIRED`] from the signals that came, however the run ended.
    pub(super) fn conclude_lifecycles(&mut self) {
        let l = &self.lifecycles;
        if l.seen == 0 {
            let why = "the host sent no inference/lifecycle during the run";
            self.record_unset(&[METADATA, PAIRED], Status::Skip, why);
            return;
        }
        let metadata = verdict(
            &l.metadata,
            l.seen,
            "each metadata only",
            "a lifecycle signal MUST NOT carry message content; model only when modelInfo is \
             granted, usage on completed only",
        );
        let paired = verdict(
            &l.paired,
            l.seen,
            "each terminal after its started, none twice",
            "a host MUST attempt exactly one terminal per started; a terminal with no started \
             or a second terminal is a conformance defect",
        );
        let beyond = l.beyond;
        let metadata = match metadata {
            (Status::Pass, d) if beyond > 0 => (
                Status::Pass,
                format!(
                    "{d}; {beyond} carried model under modelInfo, which the host's \
                     effectiveCapabilities reach though the server never advertised it (one \
                     defect: host.grant-within-advertisement)"
                ),
            ),
            other => other,
        };
        // An integer written with a fraction: the same value, as a chunk's `index: 0.0`
        // warns (`host.chunks-well-formed`); said beside any other warning.
        let floats = (l.floats.count() > 0).then(|| {
            format!(
                "{} of {} inference/lifecycle signal(s) wrote an integer member with a \
                 fraction or an exponent, the same value (read as the integer) but not an \
                 integer as written (§10.5: integer){}: {}",
                l.floats.count(),
                l.seen,
                l.floats
                    .cut()
                    .map_or_else(String::new, |k| format!(", the first {k} shown")),
                l.floats.joined()
            )
        });
        let n = l.unlisted.count();
        let metadata = match metadata {
            (Status::Pass, _) if n > 0 => {
                let shown = l
                    .unlisted
                    .cut()
                    .map_or_else(String::new, |k| format!(", the first {k} shown"));
                let d = format!(
                    "{n} of {} inference/lifecycle signal(s) carry text outside §10.5's fields \
                     (which MUST NOT carry message content; an unknown member is tolerated, \
                     §8, but text in one may be content: a warning){shown}: {}",
                    l.seen,
                    l.unlisted.joined()
                );
                (Status::Warn, d)
            }
            other => other,
        };
        let metadata = match (metadata, floats) {
            ((Status::Pass, _), Some(f)) => (Status::Warn, f),
            ((Status::Warn, d), Some(f)) => (Status::Warn, format!("{d}; {f}")),
            (other, _) => other,
        };
        if beyond > 0 {
            let d = format!(
                "the host acted on a grant beyond the advertisement: inference/lifecycle \
                 carried model in {beyond} signal(s), modelInfo taken as granted though the \
                 server never advertised it (§5.4: effectiveCapabilities is the intersection \
                 of the server's advertisement and host policy; §10.5: model only if modelInfo \
                 is granted)"
            );
            self.record("host.grant-within-advertisement", Status::Fail, d);
        }
        self.record(METADATA, metadata.0, metadata.1);
        self.record(PAIRED, paired.0, paired.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judged(signals: &[Value]) -> Lifecycles {
        let mut l = Lifecycles::default();
        let grant = Grant::from_patterns(["inferenceLifecycle"]).unwrap_or_default();
        for s in signals {
            l.judge(Some(s), (&grant, &grant), None);
        }
        l
    }

    /// §10.5: a started and its completed, usage on the terminal, conform.
    #[test]
    fn s10_5_a_clean_turn_has_no_defect() {
        let l = judged(&[
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0, "phase": "started"}),
            json!({"inferenceId": "i1", "phase": "completed",
                   "usage": {"inputTokens": 1, "outputTokens": 2}}),
        ]);
        assert_eq!((l.seen, l.metadata.count(), l.paired.count()), (2, 0, 0));
    }

    /// §10.5, §6.7: a `model` under a `modelInfo` a later policy Request granted, read
    /// while its receipt is held (the host could not have read it), is one defect; after
    /// the receipt, none.
    #[test]
    fn s6_7_a_model_under_a_grant_not_yet_in_force_is_a_defect() {
        let wide = Grant::from_patterns(["inferenceLifecycle", "modelInfo"]).unwrap_or_default();
        let narrow = Grant::from_patterns(["inferenceLifecycle"]).unwrap_or_default();
        let signal = json!({ "inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                             "phase": "started", "model": { "id": "m" } });
        let mut l = Lifecycles::default();
        l.judge(Some(&signal), (&wide, &wide), Some(&narrow));
        assert_eq!(l.metadata.count(), 1, "{:?}", l.metadata);
        assert!(l.metadata.joined().contains("§6.7"), "{:?}", l.metadata);
        let mut l = Lifecycles::default();
        l.judge(Some(&signal), (&wide, &wide), None);
        assert_eq!(l.metadata.count(), 0, "{:?}", l.metadata);
    }

    /// §10.5: members written `null` carry nothing (`protocol::given`'s reading): a host
    /// serializing "not set" as `null` sends metadata only.
    #[test]
    fn s10_5_members_written_null_carry_no_content() {
        let l = judged(&[
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                   "phase": "started", "userMessage": null,
                   "content": null, "model": null, "usage": null}),
            json!({"inferenceId": "i1", "phase": "completed", "assistantMessage": null}),
        ]);
        assert_eq!((l.seen, l.metadata.count(), l.paired.count()), (2, 0, 0));
    }

    /// F5 (§10.5's table, §15.2): a `started` without `conversationId` (or with `null`)
    /// is a defect as one without `inferenceId` is; a terminal carrying only its id and
    /// phase is not.
    #[test]
    fn s10_5_a_started_without_its_conversation_is_a_defect() {
        let l = judged(&[
            json!({ "inferenceId": "a", "conversationId": null, "turnIndex": 0,
                    "phase": "started" }),
            json!({ "inferenceId": "a", "phase": "completed" }),
            json!({ "inferenceId": "b", "turnIndex": 0, "phase": "started" }),
            json!({ "inferenceId": "b", "phase": "aborted" }),
        ]);
        assert_eq!(
            (l.metadata.count(), l.paired.count()),
            (2, 0),
            "{:?}",
            l.metadata
        );
        assert!(
            l.metadata.joined().contains("conversationId"),
            "{:?}",
            l.metadata
        );
    }

    /// F6 (§10.5): a `started` refused for its shape (a `turnIndex` of -1, 1.5 or "0", an
    /// odd phase) is one defect, under the metadata check; its terminal's "no preceding
    /// started" is not counted again. A second terminal for it still is, and an orphan
    /// terminal for another id too.
    #[test]
    fn s10_5_a_started_refused_for_its_shape_is_counted_once() {
        for bad in [
            json!({ "turnIndex": -1 }),
            json!({ "turnIndex": 1.5 }),
            json!({ "turnIndex": "0" }),
            json!({ "phase": "begun" }),
        ] {
            let mut started = json!({ "inferenceId": "z", "turnIndex": 0, "phase": "started" });
            for (k, v) in bad.as_object().into_iter().flatten() {
                started[k] = v.clone();
            }
            let l = judged(&[started, json!({ "inferenceId": "z", "phase": "completed" })]);
            assert_eq!(
                (l.metadata.count(), l.paired.count()),
                (1, 0),
                "{bad}: {:?}",
                l.paired
            );
        }
        let l = judged(&[
            json!({ "inferenceId": "z", "turnIndex": -1, "phase": "started" }),
            json!({ "inferenceId": "z", "phase": "completed" }),
            json!({ "inferenceId": "z", "phase": "completed" }),
            json!({ "inferenceId": "y", "phase": "failed" }),
        ]);
        assert_eq!(
            (l.metadata.count(), l.paired.count()),
            (1, 2),
            "{:?}",
            l.paired
        );
    }

    /// §10.5: `turnIndex: 1.0` (or a token count `2e0`) is the integer it names, read so,
    /// but noted to warn as a chunk's `index: 0.0` warns (one whole-float rule); no defect,
    /// and a true integer is not noted.
    #[test]
    fn s10_5_an_integer_written_with_a_fraction_is_noted_to_warn() {
        let l = judged(&[
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 1.0,
                   "phase": "started"}),
            json!({"inferenceId": "i1", "phase": "completed",
                   "usage": {"inputTokens": 2e0, "outputTokens": 3}}),
        ]);
        assert_eq!(
            (l.metadata.count(), l.paired.count()),
            (0, 0),
            "{:?}",
            l.metadata
        );
        assert_eq!(l.floats.count(), 2, "{:?}", l.floats);
        let said = l.floats.joined();
        assert!(
            said.contains("turnIndex 1.0 (the integer 1)") && said.contains("usage.inputTokens"),
            "{said}"
        );
        assert!(!said.contains("outputTokens"), "{said}");
    }

    /// §10.5: content members, a model without modelInfo, usage on started and an unknown
    /// phase break the metadata rule; an orphan and a second terminal break the pairing.
    #[test]
    fn s10_5_content_model_usage_and_pairing_are_found() {
        let l = judged(&[
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 0,
                   "phase": "started", "userMessage": "secret",
                   "usage": {"inputTokens": 1, "outputTokens": 0}}),
            json!({"inferenceId": "i1", "phase": "completed", "assistantMessage": "reply",
                   "model": {"id": "m"}}),
            json!({"inferenceId": "i1", "phase": "aborted"}),
            json!({"inferenceId": "i9", "phase": "failed"}),
            json!({"inferenceId": "i2", "phase": "paused"}),
        ]);
        assert_eq!(l.metadata.count(), 5, "{:?}", l.metadata);
        assert_eq!(l.paired.count(), 2, "{:?}", l.paired);
        let said = l.metadata.joined();
        assert!(
            said.contains("userMessage") && said.contains("modelInfo"),
            "{said}"
        );
    }
}
