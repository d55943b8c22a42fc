//! Regressions found by `tests/hostile_state_machines.rs` (a hostile peer, time and the
//! application against each machine), each the smallest reproduction of one defect.

use super::*;

/// No busy loop (the sans-I/O contract of `poll_timeout`/`handle_timeout`): after
/// `handle_close`, `handle_timeout` changes nothing, so no deadline may be due any more. A
/// request the application sent after the close (a race its driver cannot rule out) left
/// its deadline behind, and `poll_timeout` returned it forever: a driver sleeping until it
/// spun.
#[test]
fn after_close_no_deadline_stays_due() {
    let mut p = inference_pair();
    p.server.handle_close(p.now);
    let _ = p.server.request(p.now, "inference/request", ask(false));
    let later = p.now + crate::session::DEFAULT_REQUEST_TIMEOUT * 2;
    p.server.handle_timeout(later);
    let due = p.server.poll_timeout().filter(|d| *d <= later);
    assert_eq!(due, None, "handle_timeout({later:?}) left a deadline due");
}
