//! The consumer side of `inference/lifecycle` (§10.5): a pure pairing tracker that turns the
//! best-effort signal stream into at most one *turn start* and at most one *turn end* per
//! `inferenceId`, with a safety timeout, and reports the sender's conformance defects.
//!
//! §10.5 obliges consumers to be defensive: deduplicate terminals by `inferenceId`, tolerate
//! a missing terminal, and retain a safety timeout for anything gated on turn completion.
//! [`LifecycleTracker`] does exactly that and nothing else. It has no clock and no runtime:
//! the caller passes the current [`Instant`] to [`LifecycleTracker::observe`] and
//! [`LifecycleTracker::expire`], and asks [`LifecycleTracker::next_deadline`] when to call
//! `expire` next. Both the server session (which consumes the signal) and the host session
//! (which checks its own emission, or a relay's) can use it.
//!
//! Readings where §10.5 is silent, all fail-closed (never a second callback):
//! - a **second `started`** for an `inferenceId` already seen is dropped and reported
//!   ([`LifecycleDiagnostic::DuplicateStarted`]); an inference id names one inference;
//! - a **terminal with no preceding `started`** is a defect (§10.5) and produces no turn end:
//!   no turn was open from the consumer's point of view;
//! - a terminal that arrives **after the safety timeout** already ended the turn produces no
//!   second turn end; it is reported as [`LifecycleDiagnostic::TerminalAfterTimeout`], which
//!   is *not* a conformance defect (the host may simply be slow);
//! - `usage` on a phase other than `completed` is reported (§10.5: "`completed` only") and
//!   dropped from the turn end;
//! - content-like members are reported (§10.5 "MUST NOT carry message content") and never
//!   surfaced.
//!
//! Memory is bounded: open turns by the safety timeout and by
//! [`LifecycleConfig::max_open_turns`] (past it a `started` ends the oldest open turn), and
//! the set of already-terminated ids is a ring of [`LifecycleConfig::remembered_terminals`]
//! entries.
//! A duplicate terminal for an id that has left the ring is reported as
//! [`LifecycleDiagnostic::TerminalWithoutStarted`] — still a defect, still no callback.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::inference::Usage;
use crate::protocol::lifecycle::{LifecycleParams, Phase};
use crate::protocol::model::ModelInfo;

/// Default safety timeout: how long a turn may stay open without a terminal before the
/// tracker ends it itself. Generous, since it only bounds state after a lost terminal.
pub const DEFAULT_SAFETY_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest safety timeout counted: a longer one (`Duration::MAX`, "never") counts as
/// this, which no connection outlives, so its deadline is one `Instant` holds.
const LONGEST_SAFETY_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// When a turn started at `now` times out: `now + timeout`, a timeout longer than
/// [`LONGEST_SAFETY_TIMEOUT`] counted as that. Open turns keep their start order (the
/// oldest is the one a full tracker ends first).
fn safety_deadline(now: Instant, timeout: Duration) -> Instant {
    let timeout = timeout.min(LONGEST_SAFETY_TIMEOUT);
    // `None` only for an instant within a century of the end of `Instant`, which no clock
    // reaches (it holds hundreds of billions of years): due at once then.
    now.checked_add(timeout).unwrap_or(now)
}

/// Default number of terminated `inferenceId`s remembered for duplicate detection.
pub const DEFAULT_REMEMBERED_TERMINALS: usize = 4096;

/// Default most turns open at once on one connection ([`LifecycleConfig::max_open_turns`]).
pub const DEFAULT_MAX_OPEN_TURNS: usize = 1024;

/// Default longest `inferenceId` or `conversationId` taken, in bytes
/// ([`LifecycleConfig::max_id_bytes`]).
pub const DEFAULT_MAX_ID_BYTES: usize = 1024;

/// Tuning of a [`LifecycleTracker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// How long after `started` a turn is ended with [`TurnOutcome::TimedOut`] if no
    /// terminal arrived (§10.5 "retain a safety timeout"); one longer than a century
    /// (`Duration::MAX`) counts as a century.
    pub safety_timeout: Duration,
    /// How many terminated `inferenceId`s are remembered to recognise a second terminal.
    pub remembered_terminals: usize,
    /// The most turns open at once (at least 1). §10.5 sets no number; a `started` past it
    /// ends the oldest open turn as [`TurnOutcome::TimedOut`] (its safety timeout, brought
    /// forward; reported as [`LifecycleDiagnostic::OpenTurnsLimit`]), so what a sender can
    /// make the tracker hold stays bounded however many ids it starts.
    pub max_open_turns: usize,
    /// The longest `inferenceId` or `conversationId` taken, in bytes (at least 1). §10.5 sets
    /// no length, and the tracker keeps ids (each open turn's, each remembered terminal's): a
    /// signal with a longer one is dropped and reported
    /// ([`LifecycleDiagnostic::IdTooLong`]), so what a sender can make the tracker hold stays
    /// bounded in bytes as well as in number.
    pub max_id_bytes: usize,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            safety_timeout: DEFAULT_SAFETY_TIMEOUT,
            remembered_terminals: DEFAULT_REMEMBERED_TERMINALS,
            max_open_turns: DEFAULT_MAX_OPEN_TURNS,
            max_id_bytes: DEFAULT_MAX_ID_BYTES,
        }
    }
}

impl LifecycleConfig {
    /// The values that cannot work, each naming its field (`LifecycleConfig.…`); empty when
    /// it can track turns. `server::ServerBuilder::build` refuses a config with any.
    /// Readings (§10.5 sets no numbers): a `safety_timeout` under 1 ms ends every turn as
    /// timed out at once; `max_open_turns` 0 and `max_id_bytes` 0 were raised to 1 unseen;
    /// `remembered_terminals` 0 stays allowed (no second terminal is recognised: a choice).
    pub fn defects(&self) -> Vec<String> {
        use crate::config_rules::{count, timeout};
        let mut out = Vec::new();
        timeout(
            &mut out,
            &"LifecycleConfig.safety_timeout",
            self.safety_timeout,
            "every turn would end as timed out at once",
        );
        for (field, value) in [
            ("max_open_turns", self.max_open_turns),
            ("max_id_bytes", self.max_id_bytes),
        ] {
            count(
                &mut out,
                &format_args!("LifecycleConfig.{field}"),
                value,
                "0 was raised to 1 unseen",
            );
        }
        out
    }
}

/// A turn began: delivered once per `inferenceId`, on its first `started`.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStart {
    /// The inference this turn is.
    pub inference_id: String,
    /// Conversation, if the host said.
    pub conversation_id: Option<String>,
    /// Turn number, if the host said.
    pub turn_index: Option<u64>,
    /// Model metadata, present only when the host sent it (`modelInfo` granted).
    pub model: Option<ModelInfo>,
    /// When the `started` was observed.
    pub at: Instant,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// `phase: "completed"`, with `usage` if the host sent it.
    Completed {
        /// Token usage, if sent.
        usage: Option<Usage>,
    },
    /// `phase: "aborted"`.
    Aborted,
    /// `phase: "failed"`.
    Failed,
    /// No terminal arrived within the safety timeout (§10.5).
    TimedOut,
}

/// A turn ended: delivered at most once per `inferenceId`, and only after its [`TurnStart`].
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    /// The inference that ended.
    pub inference_id: String,
    /// Conversation, from the `started` (or the terminal if only it carried one).
    pub conversation_id: Option<String>,
    /// Turn number, from the `started` (or the terminal if only it carried one).
    pub turn_index: Option<u64>,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// When the matching `started` was observed.
    pub started_at: Instant,
    /// When the end was decided (terminal observed, or the `now` of [`LifecycleTracker::expire`]).
    pub at: Instant,
}

/// A turn boundary the application acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// See [`TurnStart`].
    Started(TurnStart),
    /// See [`TurnEnd`].
    Ended(TurnEnd),
}

/// Something about the signal stream worth logging (§10.5 "SHOULD be logged").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleDiagnostic {
    /// §10.5 conformance defect: a terminal for an `inferenceId` with no preceding `started`.
    TerminalWithoutStarted {
        /// The id.
        inference_id: String,
        /// The terminal phase received.
        phase: Phase,
    },
    /// §10.5 conformance defect: a second terminal for an already-terminated `inferenceId`.
    SecondTerminal {
        /// The id.
        inference_id: String,
        /// The phase of the extra terminal.
        phase: Phase,
    },
    /// A `started` for an `inferenceId` already started (open or ended); dropped.
    DuplicateStarted {
        /// The id.
        inference_id: String,
    },
    /// The real terminal arrived after the safety timeout had ended the turn; not a
    /// conformance defect, no second turn end.
    TerminalAfterTimeout {
        /// The id.
        inference_id: String,
        /// The phase received.
        phase: Phase,
    },
    /// §10.5 conformance defect: `usage` on a phase other than `completed`; ignored.
    UsageOnNonCompleted {
        /// The id.
        inference_id: String,
        /// The phase that carried it.
        phase: Phase,
    },
    /// §10.5 conformance defect: the signal carried content-like members; never surfaced.
    ContentMembers {
        /// The id.
        inference_id: String,
        /// The offending member names, sorted.
        members: Vec<String>,
    },
    /// A `started` found [`LifecycleConfig::max_open_turns`] turns open: the oldest,
    /// `ended`, was ended as timed out ([`Observation::evicted`]). Not a conformance defect.
    OpenTurnsLimit {
        /// The turn ended to make room.
        ended: String,
        /// The limit.
        limit: usize,
    },
    /// A signal whose `member` (`inferenceId` or `conversationId`) is longer than
    /// [`LifecycleConfig::max_id_bytes`]: dropped, with no turn event and nothing
    /// remembered. Not a conformance defect (§10.5 sets no length).
    IdTooLong {
        /// The member.
        member: &'static str,
        /// Its length in bytes.
        length: usize,
        /// The limit.
        limit: usize,
    },
}

impl LifecycleDiagnostic {
    /// Whether this is a conformance defect of the sender (§10.5), as opposed to an
    /// informational note ([`Self::TerminalAfterTimeout`]).
    pub fn is_conformance_defect(&self) -> bool {
        !matches!(
            self,
            LifecycleDiagnostic::TerminalAfterTimeout { .. }
                | LifecycleDiagnostic::OpenTurnsLimit { .. }
                | LifecycleDiagnostic::IdTooLong { .. }
        )
    }

    /// Stable machine-readable code, for logs and the CLI.
    pub fn code(&self) -> &'static str {
        match self {
            LifecycleDiagnostic::TerminalWithoutStarted { .. } => {
                "lifecycle_terminal_without_started"
            }
            LifecycleDiagnostic::SecondTerminal { .. } => "lifecycle_second_terminal",
            LifecycleDiagnostic::DuplicateStarted { .. } => "lifecycle_duplicate_started",
            LifecycleDiagnostic::TerminalAfterTimeout { .. } => "lifecycle_terminal_after_timeout",
            LifecycleDiagnostic::UsageOnNonCompleted { .. } => "lifecycle_usage_on_non_completed",
            LifecycleDiagnostic::ContentMembers { .. } => "lifecycle_content_members",
            LifecycleDiagnostic::OpenTurnsLimit { .. } => "lifecycle_open_turns_limit",
            LifecycleDiagnostic::IdTooLong { .. } => "lifecycle_id_too_long",
        }
    }
}

impl std::fmt::Display for LifecycleDiagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LifecycleDiagnostic::TerminalWithoutStarted { inference_id, phase } => write!(
                f,
                "§10.5 defect: terminal {phase:?} for inferenceId {inference_id:?} with no preceding started"
            ),
            LifecycleDiagnostic::SecondTerminal { inference_id, phase } => write!(
                f,
                "§10.5 defect: second terminal {phase:?} for already-terminated inferenceId {inference_id:?}"
            ),
            LifecycleDiagnostic::DuplicateStarted { inference_id } => write!(
                f,
                "duplicate started for inferenceId {inference_id:?}; ignored"
            ),
            LifecycleDiagnostic::TerminalAfterTimeout { inference_id, phase } => write!(
                f,
                "terminal {phase:?} for inferenceId {inference_id:?} arrived after the safety timeout ended the turn"
            ),
            LifecycleDiagnostic::UsageOnNonCompleted { inference_id, phase } => write!(
                f,
                "§10.5 defect: usage on phase {phase:?} for inferenceId {inference_id:?} (completed only); ignored"
            ),
            LifecycleDiagnostic::ContentMembers { inference_id, members } => write!(
                f,
                "§10.5 defect: lifecycle signal for inferenceId {inference_id:?} carried content members {members:?}; not surfaced"
            ),
            LifecycleDiagnostic::OpenTurnsLimit { ended, limit } => write!(
                f,
                "{limit} turns were open, the limit: the oldest, inferenceId {ended:?}, was ended as timed out"
            ),
            LifecycleDiagnostic::IdTooLong { member, length, limit } => write!(
                f,
                "lifecycle signal dropped: its {member} of {length} bytes is over the limit of {limit} (LifecycleConfig::max_id_bytes)"
            ),
        }
    }
}

/// What one observed signal produced: at most one turn event, and any diagnostics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// The turn boundary to deliver, if this signal was the first of its kind for its id.
    pub event: Option<TurnEvent>,
    /// What to log.
    pub diagnostics: Vec<LifecycleDiagnostic>,
    /// The oldest open turn, ended as timed out to make room for this `started`
    /// ([`LifecycleConfig::max_open_turns`]); deliver it before [`Self::event`].
    pub evicted: Option<TurnEnd>,
}

#[derive(Debug, Clone)]
struct OpenTurn {
    conversation_id: Option<String>,
    turn_index: Option<u64>,
    started_at: Instant,
    deadline: Instant,
}

/// How a remembered id was ended, to tell a late terminal from a second one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    ByTerminal,
    ByTimeout,
    /// A terminal arrived with no `started`; the id is remembered so that a second one is
    /// a second terminal and a late `started` is a duplicate.
    Orphan,
}

/// The pure §10.5 pairing state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct LifecycleTracker {
    config: LifecycleConfig,
    /// Each id is held once, shared by these maps (`Arc<str>`), and keyed by SipHash:
    /// the ids are the peer's.
    open: HashMap<Arc<str>, OpenTurn>,
    /// The open turns by deadline (ties by id): the next deadline, expiry and the oldest
    /// turn without a scan.
    deadlines: BTreeSet<(Instant, Arc<str>)>,
    ended: HashMap<Arc<str>, Ended>,
    ended_order: VecDeque<Arc<str>>,
}

impl Default for LifecycleTracker {
    fn default() -> Self {
        Self::new(LifecycleConfig::default())
    }
}

impl LifecycleTracker {
    /// A tracker with no open turns.
    pub fn new(config: LifecycleConfig) -> Self {
        LifecycleTracker {
            config,
            open: HashMap::new(),
            deadlines: BTreeSet::new(),
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> LifecycleConfig {
        self.config
    }

    /// Number of turns started and not yet ended.
    pub fn open_turns(&self) -> usize {
        self.open.len()
    }

    /// Whether `inference_id` is started and not yet ended.
    pub fn is_open(&self, inference_id: &str) -> bool {
        self.open.contains_key(inference_id)
    }

    /// The earliest safety deadline among open turns: call [`Self::expire`] at (or after)
    /// that instant. `None` when no turn is open.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Feed one received `inference/lifecycle` signal observed at `now`.
    pub fn observe(&mut self, params: &LifecycleParams, now: Instant) -> Observation {
        if let Some(too_long) = self.id_too_long(params) {
            return Observation {
                diagnostics: vec![too_long],
                ..Observation::default()
            };
        }
        self.observe_owned(params.clone(), now)
    }

    /// [`Self::observe`] taking the signal by value: its strings move into the turn event
    /// instead of being copied (issue #24: the server's path, which owns the params it read).
    pub fn observe_owned(&mut self, params: LifecycleParams, now: Instant) -> Observation {
        if let Some(too_long) = self.id_too_long(&params) {
            return Observation {
                diagnostics: vec![too_long],
                ..Observation::default()
            };
        }
        let mut diagnostics = Vec::new();
        let mut members: Vec<String> = params.content_like_members();
        let LifecycleParams {
            inference_id: id,
            conversation_id,
            turn_index,
            phase,
            model,
            usage,
            ..
        } = params;
        if !members.is_empty() {
            members.sort();
            diagnostics.push(LifecycleDiagnostic::ContentMembers {
                inference_id: id.clone(),
                members,
            });
        }
        if usage.is_some() && phase != Phase::Completed {
            diagnostics.push(LifecycleDiagnostic::UsageOnNonCompleted {
                inference_id: id.clone(),
                phase,
            });
        }

        let mut evicted = None;
        let event = if phase == Phase::Started {
            if self.open.contains_key(id.as_str()) || self.ended.contains_key(id.as_str()) {
                diagnostics.push(LifecycleDiagnostic::DuplicateStarted { inference_id: id });
                None
            } else {
                let deadline = safety_deadline(now, self.config.safety_timeout);
                let limit = self.config.max_open_turns.max(1);
                if self.open.len() >= limit {
                    let oldest = self.deadlines.first().cloned();
                    if let Some(end) = oldest.and_then(|o| self.time_out(vec![o], now).pop()) {
                        diagnostics.push(LifecycleDiagnostic::OpenTurnsLimit {
                            ended: end.inference_id.clone(),
                            limit,
                        });
                        evicted = Some(end);
                    }
                }
                // One copy of the id, shared by the open turn, its deadline and (once it
                // ends) the memory of it; the event takes the received string.
                let key: Arc<str> = Arc::from(id.as_str());
                self.deadlines.insert((deadline, key.clone()));
                self.open.insert(
                    key,
                    OpenTurn {
                        conversation_id: conversation_id.clone(),
                        turn_index,
                        started_at: now,
                        deadline,
                    },
                );
                Some(TurnEvent::Started(TurnStart {
                    inference_id: id,
                    conversation_id,
                    turn_index,
                    model,
                    at: now,
                }))
            }
        } else if let Some((key, turn)) = self.open.remove_entry(id.as_str()) {
            // The open turn's own id serves the lookup and the memory of it.
            self.deadlines.remove(&(turn.deadline, key.clone()));
            self.remember(key, Ended::ByTerminal);
            let outcome = match phase {
                Phase::Completed => TurnOutcome::Completed { usage },
                Phase::Aborted => TurnOutcome::Aborted,
                // `Started` is handled above; the remaining phase is `Failed`.
                Phase::Failed | Phase::Started => TurnOutcome::Failed,
            };
            Some(TurnEvent::Ended(TurnEnd {
                inference_id: id,
                conversation_id: turn.conversation_id.or(conversation_id),
                turn_index: turn.turn_index.or(turn_index),
                outcome,
                started_at: turn.started_at,
                at: now,
            }))
        } else {
            match self.ended.get_mut(id.as_str()) {
                Some(how @ Ended::ByTimeout) => {
                    // The first real terminal after a timeout: a late one, not a defect.
                    // Any further terminal is a second terminal.
                    *how = Ended::ByTerminal;
                    diagnostics.push(LifecycleDiagnostic::TerminalAfterTimeout {
                        inference_id: id,
                        phase,
                    });
                }
                Some(Ended::ByTerminal) | Some(Ended::Orphan) => {
                    diagnostics.push(LifecycleDiagnostic::SecondTerminal {
                        inference_id: id,
                        phase,
                    });
                }
                None => {
                    self.remember(Arc::from(id.as_str()), Ended::Orphan);
                    diagnostics.push(LifecycleDiagnostic::TerminalWithoutStarted {
                        inference_id: id,
                        phase,
                    });
                }
            }
            None
        };
        Observation {
            event,
            diagnostics,
            evicted,
        }
    }

    /// The first id of `params` past [`LifecycleConfig::max_id_bytes`], as its diagnostic.
    fn id_too_long(&self, params: &LifecycleParams) -> Option<LifecycleDiagnostic> {
        let limit = self.config.max_id_bytes.max(1);
        [
            ("inferenceId", Some(&params.inference_id)),
            ("conversationId", params.conversation_id.as_ref()),
        ]
        .into_iter()
        .find_map(|(member, id)| {
            let length = id?.len();
            (length > limit).then_some(LifecycleDiagnostic::IdTooLong {
                member,
                length,
                limit,
            })
        })
    }

    /// End every open turn whose safety deadline is at or before `now`, returning their
    /// [`TurnOutcome::TimedOut`] ends in deadline order (ties by id).
    pub fn expire(&mut self, now: Instant) -> Vec<TurnEnd> {
        let due: Vec<(Instant, Arc<str>)> = self
            .deadlines
            .iter()
            .take_while(|(d, _)| *d <= now)
            .cloned()
            .collect();
        self.time_out(due, now)
    }

    /// End every open turn now (e.g. the connection closed, so no terminal can come),
    /// as [`TurnOutcome::TimedOut`], in start order (ties by id).
    pub fn close_all(&mut self, now: Instant) -> Vec<TurnEnd> {
        let all: Vec<(Instant, Arc<str>)> = self
            .open
            .iter()
            .map(|(id, t)| (t.started_at, id.clone()))
            .collect();
        self.time_out(all, now)
    }

    /// Ends the given open turns as [`TurnOutcome::TimedOut`], ordered by the instant paired
    /// with each id (ties by id).
    fn time_out(&mut self, mut turns: Vec<(Instant, Arc<str>)>, now: Instant) -> Vec<TurnEnd> {
        turns.sort();
        let mut ends = Vec::with_capacity(turns.len());
        for (_, id) in turns {
            if let Some(turn) = self.open.remove(&id) {
                self.deadlines.remove(&(turn.deadline, id.clone()));
                self.remember(id.clone(), Ended::ByTimeout);
                ends.push(TurnEnd {
                    inference_id: id.to_string(),
                    conversation_id: turn.conversation_id,
                    turn_index: turn.turn_index,
                    outcome: TurnOutcome::TimedOut,
                    started_at: turn.started_at,
                    at: now,
                });
            }
        }
        ends
    }

    /// The `inferenceId`s of open turns, sorted.
    pub fn open_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.open.keys().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    fn remember(&mut self, id: Arc<str>, how: Ended) {
        if self.config.remembered_terminals == 0 {
            return;
        }
        if self.ended.insert(id.clone(), how).is_none() {
            self.ended_order.push_back(id);
        }
        while self.ended_order.len() > self.config.remembered_terminals {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests;
