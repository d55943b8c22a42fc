//! Ending a spawned target's whole process group ([`end_group`]), so that its forked
//! children do not outlive the check (issue #20).

use std::time::Duration;

use mcpl::transport::child::ChildControl;

use super::{EXIT_GRACE, TERM_GRACE};

/// Ends a spawned target and everything in its process group: after its stdin was closed it
/// has [`EXIT_GRACE`] (at most `bound`) to exit; then the group gets SIGTERM, and whatever
/// is still in it [`TERM_GRACE`] later gets SIGKILL. Bounded: at most
/// `EXIT_GRACE + 2 × TERM_GRACE` plus `bound` for the leader's exit status.
pub(super) async fn end_group(child: &ChildControl, bound: Duration) {
    let _ = tokio::time::timeout(EXIT_GRACE.min(bound), child.wait()).await;
    #[cfg(unix)]
    if let Some(pgid) = child.pid().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
        let killed = group::signal(pgid, libc::SIGTERM)
            && !group::gone_within(pgid, TERM_GRACE).await
            && group::signal(pgid, libc::SIGKILL);
        if killed {
            let _ = group::gone_within(pgid, TERM_GRACE).await;
        }
    }
    child.kill();
    let _ = tokio::time::timeout(bound, child.wait()).await;
}

/// Signals to a whole process group (Unix).
#[cfg(unix)]
mod group {
    use std::time::{Duration, Instant};

    /// Sends `signal` to every process of group `pgid`; false when the group is empty (or
    /// the signal could not be sent).
    pub fn signal(pgid: libc::pid_t, signal: libc::c_int) -> bool {
        if pgid <= 1 {
            // Never a broadcast: -1 and -0 mean "every process" and "our own group".
            return false;
        }
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; a negative
        // pid addresses exactly the group the target was spawned into.
        unsafe { libc::kill(-pgid, signal) == 0 }
    }

    /// Waits (polling every 10 ms) until group `pgid` is empty, at most `wait`; true when
    /// it is. A member that already exited and waits to be reaped still counts.
    pub async fn gone_within(pgid: libc::pid_t, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        loop {
            if !signal(pgid, 0) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
