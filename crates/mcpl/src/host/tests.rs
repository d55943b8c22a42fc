use super::*;

fn g(caps: &[Capability]) -> Grant {
    Grant::from_set(caps.iter().fold(CapabilitySet::EMPTY, |s, c| s.with(*c)))
}

/// §5.3: a privileged message read before the receipt that made the session ready is
/// judged not ready, however late it is handled; one read after it is judged ready.
#[test]
fn s5_3_readiness_counts_from_the_receipt() {
    let mut w = Widenings::default();
    let push = g(&[Capability::PushEvents]);
    w.record(10, (false, Grant::none()), (true, push));
    assert_eq!(w.judge(9, (true, push)), (false, Grant::none()));
    assert_eq!(w.judge(10, (true, push)), (true, push));
    assert_eq!(w.judge(11, (true, push)), (true, push));
}

/// §6.7: a widening applies from its receipt on; a narrowing needs no record because
/// it applies to every message at once.
#[test]
fn s6_7_widening_counts_from_the_receipt_and_narrowing_at_once() {
    let mut w = Widenings::default();
    let tools = g(&[Capability::Tools]);
    let both = g(&[Capability::Tools, Capability::PushEvents]);
    w.record(5, (true, tools), (true, both));
    assert_eq!(w.judge(4, (true, both)), (true, tools));
    assert_eq!(w.judge(5, (true, both)), (true, both));
    // A narrowing records nothing: the earlier message still sees the older state.
    w.record(8, (true, both), (true, tools));
    assert_eq!(w.0.len(), 1);
    assert_eq!(w.judge(4, (true, tools)), (true, tools));
    assert_eq!(w.judge(7, (true, Grant::none())), (true, Grant::none()));
}

#[test]
fn records_are_dropped_once_handling_passes_them() {
    let mut w = Widenings::default();
    let push = g(&[Capability::PushEvents]);
    w.record(3, (false, Grant::none()), (true, Grant::none()));
    w.record(7, (true, Grant::none()), (true, push));
    w.reached(2);
    assert_eq!(w.0.len(), 2);
    w.reached(3);
    assert_eq!(w.0.len(), 1);
    w.reached(7);
    assert!(w.0.is_empty());
}

/// Past the limit the two oldest records merge into the stricter of both: a message
/// between their boundaries is judged more strictly than before, never less.
#[test]
fn merged_records_only_ever_deny_more() {
    let mut w = Widenings::default();
    let push = g(&[Capability::PushEvents]);
    let tools = g(&[Capability::Tools]);
    w.record(1, (false, Grant::none()), (true, push));
    for i in 0..BEFORE_LIMIT as u64 {
        let (old, new) = if i % 2 == 0 {
            (push, tools)
        } else {
            (tools, push)
        };
        w.record(2 + i, (true, old), (true, new));
    }
    assert_eq!(w.0.len(), BEFORE_LIMIT);
    // Read before everything: not ready and nothing granted, as without the merge.
    assert_eq!(w.judge(0, (true, push)), (false, Grant::none()));
    // Read between the first two boundaries: now also judged not ready (stricter).
    assert!(!w.judge(1, (true, push)).0);
    // Read after every boundary: the current state.
    assert_eq!(w.judge(1000, (true, push)), (true, push));
}
