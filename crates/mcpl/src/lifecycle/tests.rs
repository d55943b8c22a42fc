//! The §10.5 tracker's unit tests.

use super::*;
use serde_json::json;

fn sig(v: serde_json::Value) -> LifecycleParams {
    serde_json::from_value(v).unwrap()
}

fn tracker(timeout_s: u64) -> LifecycleTracker {
    LifecycleTracker::new(LifecycleConfig {
        safety_timeout: Duration::from_secs(timeout_s),
        remembered_terminals: 8,
        ..LifecycleConfig::default()
    })
}

#[test]
fn s10_5_started_then_completed_gives_one_start_and_one_end() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    let o = t.observe(
        &sig(
            json!({"inferenceId": "i1", "conversationId": "c", "turnIndex": 3, "phase": "started"}),
        ),
        t0,
    );
    assert!(o.diagnostics.is_empty());
    match o.event {
        Some(TurnEvent::Started(s)) => {
            assert_eq!(s.inference_id, "i1");
            assert_eq!(s.turn_index, Some(3));
            assert_eq!(s.at, t0);
        }
        other => panic!("expected start, got {other:?}"),
    }
    assert!(t.is_open("i1"));
    let t1 = t0 + Duration::from_secs(1);
    let o = t.observe(
        &sig(json!({"inferenceId": "i1", "phase": "completed", "usage": {"inputTokens": 5}})),
        t1,
    );
    assert!(o.diagnostics.is_empty());
    match o.event {
        Some(TurnEvent::Ended(e)) => {
            assert_eq!(e.conversation_id.as_deref(), Some("c"));
            assert_eq!(e.turn_index, Some(3));
            assert_eq!(e.started_at, t0);
            assert_eq!(e.at, t1);
            match e.outcome {
                TurnOutcome::Completed { usage: Some(u) } => {
                    assert_eq!(u.input_tokens, Some(5))
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("expected end, got {other:?}"),
    }
    assert_eq!(t.open_turns(), 0);
    assert_eq!(t.next_deadline(), None);
}

#[test]
fn s10_5_aborted_and_failed_are_terminal_outcomes() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    for (id, phase, want) in [
        ("a", "aborted", TurnOutcome::Aborted),
        ("f", "failed", TurnOutcome::Failed),
    ] {
        t.observe(&sig(json!({"inferenceId": id, "phase": "started"})), t0);
        let o = t.observe(&sig(json!({"inferenceId": id, "phase": phase})), t0);
        match o.event {
            Some(TurnEvent::Ended(e)) => assert_eq!(e.outcome, want),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn s10_5_second_terminal_is_deduplicated_and_reported() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    t.observe(&sig(json!({"inferenceId": "i", "phase": "started"})), t0);
    assert!(t
        .observe(&sig(json!({"inferenceId": "i", "phase": "completed"})), t0)
        .event
        .is_some());
    let o = t.observe(&sig(json!({"inferenceId": "i", "phase": "failed"})), t0);
    assert_eq!(o.event, None);
    assert_eq!(
        o.diagnostics,
        vec![LifecycleDiagnostic::SecondTerminal {
            inference_id: "i".into(),
            phase: Phase::Failed
        }]
    );
    assert!(o.diagnostics[0].is_conformance_defect());
    assert_eq!(o.diagnostics[0].code(), "lifecycle_second_terminal");
}

#[test]
fn s10_5_terminal_without_started_is_a_defect_and_no_turn_end() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    let o = t.observe(&sig(json!({"inferenceId": "x", "phase": "completed"})), t0);
    assert_eq!(o.event, None);
    assert_eq!(
        o.diagnostics,
        vec![LifecycleDiagnostic::TerminalWithoutStarted {
            inference_id: "x".into(),
            phase: Phase::Completed
        }]
    );
    // A repeat is now a second terminal, and a late started is a duplicate, not a turn.
    let o = t.observe(&sig(json!({"inferenceId": "x", "phase": "aborted"})), t0);
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::SecondTerminal { .. }]
    ));
    let o = t.observe(&sig(json!({"inferenceId": "x", "phase": "started"})), t0);
    assert_eq!(o.event, None);
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::DuplicateStarted { .. }]
    ));
}

#[test]
fn s10_5_duplicate_started_is_dropped() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    assert!(t
        .observe(&sig(json!({"inferenceId": "i", "phase": "started"})), t0)
        .event
        .is_some());
    let o = t.observe(
        &sig(json!({"inferenceId": "i", "phase": "started"})),
        t0 + Duration::from_secs(30),
    );
    assert_eq!(o.event, None);
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::DuplicateStarted { .. }]
    ));
    // The original deadline stands: the duplicate did not re-arm the timeout.
    assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(60)));
}

#[test]
fn s10_5_safety_timeout_ends_the_turn_once_and_late_terminal_is_a_note() {
    let t0 = Instant::now();
    let mut t = tracker(10);
    t.observe(
        &sig(json!({"inferenceId": "b", "phase": "started"})),
        t0 + Duration::from_secs(1),
    );
    t.observe(&sig(json!({"inferenceId": "a", "phase": "started"})), t0);
    assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(10)));
    assert!(t.expire(t0 + Duration::from_secs(9)).is_empty());
    let ends = t.expire(t0 + Duration::from_secs(10));
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].inference_id, "a");
    assert_eq!(ends[0].outcome, TurnOutcome::TimedOut);
    let ends = t.expire(t0 + Duration::from_secs(100));
    assert_eq!(
        ends.iter()
            .map(|e| e.inference_id.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(t.open_turns(), 0);

    let o = t.observe(
        &sig(json!({"inferenceId": "a", "phase": "completed"})),
        t0 + Duration::from_secs(200),
    );
    assert_eq!(o.event, None);
    assert_eq!(
        o.diagnostics,
        vec![LifecycleDiagnostic::TerminalAfterTimeout {
            inference_id: "a".into(),
            phase: Phase::Completed
        }]
    );
    assert!(!o.diagnostics[0].is_conformance_defect());
    // A further terminal is a genuine second terminal.
    let o = t.observe(
        &sig(json!({"inferenceId": "a", "phase": "failed"})),
        t0 + Duration::from_secs(201),
    );
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::SecondTerminal { .. }]
    ));
}

#[test]
fn s10_5_content_members_and_misplaced_usage_are_reported() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    t.observe(&sig(json!({"inferenceId": "i", "phase": "started"})), t0);
    let o = t.observe(
        &sig(
            json!({"inferenceId": "i", "phase": "aborted", "usage": {"inputTokens": 1},
                    "userMessage": "secret", "content": []}),
        ),
        t0,
    );
    assert!(matches!(
        o.event,
        Some(TurnEvent::Ended(TurnEnd {
            outcome: TurnOutcome::Aborted,
            ..
        }))
    ));
    assert_eq!(
        o.diagnostics,
        vec![
            LifecycleDiagnostic::ContentMembers {
                inference_id: "i".into(),
                members: vec!["content".into(), "userMessage".into()]
            },
            LifecycleDiagnostic::UsageOnNonCompleted {
                inference_id: "i".into(),
                phase: Phase::Aborted
            },
        ]
    );
}

#[test]
fn s10_5_close_all_ends_open_turns_in_start_order() {
    let t0 = Instant::now();
    let mut t = tracker(60);
    t.observe(&sig(json!({"inferenceId": "z", "phase": "started"})), t0);
    t.observe(
        &sig(json!({"inferenceId": "y", "phase": "started"})),
        t0 + Duration::from_secs(1),
    );
    let ends = t.close_all(t0 + Duration::from_secs(2));
    assert_eq!(
        ends.iter()
            .map(|e| e.inference_id.as_str())
            .collect::<Vec<_>>(),
        ["z", "y"]
    );
    assert_eq!(t.open_turns(), 0);
}

/// §10.5 sets no id length: a signal with an id past `max_id_bytes` is reported and
/// changes nothing (no turn, nothing remembered); one at the limit is taken.
#[test]
fn s10_5_ids_past_the_limit_are_dropped_and_reported() {
    let t0 = Instant::now();
    let mut t = LifecycleTracker::new(LifecycleConfig {
        max_id_bytes: 4,
        ..LifecycleConfig::default()
    });
    let o = t.observe(
        &sig(json!({"inferenceId": "12345", "phase": "started"})),
        t0,
    );
    assert_eq!(o.event, None);
    assert_eq!(
        o.diagnostics,
        [LifecycleDiagnostic::IdTooLong {
            member: "inferenceId",
            length: 5,
            limit: 4
        }]
    );
    assert!(!o.diagnostics[0].is_conformance_defect());
    let o = t.observe(
        &sig(json!({"inferenceId": "a", "conversationId": "12345", "phase": "started"})),
        t0,
    );
    assert_eq!(o.event, None);
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::IdTooLong {
            member: "conversationId",
            ..
        }]
    ));
    let o = t.observe(
        &sig(json!({"inferenceId": "12345", "phase": "completed"})),
        t0,
    );
    assert_eq!(o.event, None);
    assert_eq!((t.open_turns(), t.ended.len()), (0, 0));
    let o = t.observe(&sig(json!({"inferenceId": "1234", "phase": "started"})), t0);
    assert!(matches!(o.event, Some(TurnEvent::Started(_))));
}

#[test]
fn remembered_terminals_are_bounded() {
    let t0 = Instant::now();
    let mut t = LifecycleTracker::new(LifecycleConfig {
        safety_timeout: Duration::from_secs(60),
        remembered_terminals: 2,
        ..LifecycleConfig::default()
    });
    for id in ["a", "b", "c"] {
        t.observe(&sig(json!({"inferenceId": id, "phase": "started"})), t0);
        t.observe(&sig(json!({"inferenceId": id, "phase": "completed"})), t0);
    }
    assert_eq!(t.ended.len(), 2);
    // "a" was forgotten: its repeat is still a defect, still no callback.
    let o = t.observe(&sig(json!({"inferenceId": "a", "phase": "completed"})), t0);
    assert_eq!(o.event, None);
    assert!(matches!(
        o.diagnostics[..],
        [LifecycleDiagnostic::TerminalWithoutStarted { .. }]
    ));
}

/// §10.5 sets no number of open turns: past `max_open_turns` a `started` ends the oldest
/// turn as timed out (reported, delivered before the new start), its late terminal is no
/// defect, and the deadlines stay in order.
#[test]
fn s10_5_open_turns_are_bounded_by_ending_the_oldest() {
    let mut t = LifecycleTracker::new(LifecycleConfig {
        safety_timeout: Duration::from_secs(60),
        remembered_terminals: 8,
        max_open_turns: 2,
        max_id_bytes: DEFAULT_MAX_ID_BYTES,
    });
    let t0 = Instant::now();
    let start = |id: &str| sig(json!({"inferenceId": id, "phase": "started"}));
    for (i, id) in ["a", "b"].iter().enumerate() {
        let o = t.observe(&start(id), t0 + Duration::from_secs(i as u64));
        assert!(o.evicted.is_none() && o.diagnostics.is_empty());
    }
    let o = t.observe(&start("c"), t0 + Duration::from_secs(2));
    let evicted = o.evicted.expect("the oldest was ended");
    assert_eq!(evicted.inference_id, "a");
    assert_eq!(evicted.outcome, TurnOutcome::TimedOut);
    assert!(matches!(o.event, Some(TurnEvent::Started(ref s)) if s.inference_id == "c"));
    assert_eq!(
        o.diagnostics,
        [LifecycleDiagnostic::OpenTurnsLimit {
            ended: "a".into(),
            limit: 2
        }]
    );
    assert!(!o.diagnostics[0].is_conformance_defect());
    assert_eq!(t.open_ids(), ["b", "c"]);
    assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(61)));
    let late = t.observe(
        &sig(json!({"inferenceId": "a", "phase": "completed"})),
        t0 + Duration::from_secs(3),
    );
    assert!(late.event.is_none());
    assert!(matches!(
        late.diagnostics.as_slice(),
        [LifecycleDiagnostic::TerminalAfterTimeout { .. }]
    ));
    // Ending b by its terminal takes it out of the deadlines too.
    t.observe(
        &sig(json!({"inferenceId": "b", "phase": "aborted"})),
        t0 + Duration::from_secs(4),
    );
    assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(62)));
    let ends = t.expire(t0 + Duration::from_secs(62));
    assert_eq!(ends.len(), 1);
    assert_eq!(t.next_deadline(), None);
}

/// A sender starting ids without end holds at most the limit open, whatever it sends.
#[test]
fn s10_5_a_flood_of_starts_holds_the_limit() {
    let mut t = LifecycleTracker::default();
    let now = Instant::now();
    let mut ended = 0;
    for i in 0..20_000 {
        let o = t.observe(
            &sig(json!({"inferenceId": format!("i{i}"), "phase": "started"})),
            now,
        );
        ended += usize::from(o.evicted.is_some());
    }
    assert_eq!(t.open_turns(), DEFAULT_MAX_OPEN_TURNS);
    assert_eq!(ended, 20_000 - DEFAULT_MAX_OPEN_TURNS);
}
