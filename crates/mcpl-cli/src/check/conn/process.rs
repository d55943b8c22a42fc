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

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use super::super::{Conn, Dial};

    /// A spawned server is told its run is over the way stdio servers expect, by the end
    /// of its input, before any signal: one that ignores SIGTERM still sees it and finishes
    /// on its own. Its stdin had been closed only after the process group was signalled
    /// (the writer was dropped last), so no server ever saw it: each was sent SIGTERM once
    /// [`super::EXIT_GRACE`] had been waited out, on every session of every run.
    #[test]
    fn a_server_sees_the_end_of_its_input_before_any_signal() {
        let mark = std::env::temp_dir().join(format!("mcpl-check-eof-{}", std::process::id()));
        let _ = std::fs::remove_file(&mark);
        // SIGTERM ignored (by `cat` too: an ignored signal stays ignored across exec), so
        // only the end of its input, or the SIGKILL, ends it.
        let script = format!(
            "trap '' TERM; cat >/dev/null; echo eof > '{}'",
            mark.display()
        );
        let dial = Dial::Command(vec!["sh".into(), "-c".into(), script]);
        let conn = Conn::open(dial, Duration::from_secs(5), None).unwrap();
        // Dropping the connection ends the run: it returns once the group is gone.
        drop(conn);
        let seen = std::fs::read_to_string(&mark).ok();
        let _ = std::fs::remove_file(&mark);
        assert_eq!(
            seen.as_deref(),
            Some("eof\n"),
            "the server never saw its input end"
        );
    }
}
