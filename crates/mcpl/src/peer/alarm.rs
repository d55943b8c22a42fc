//! A driver's one timer (issue #24): a session's driver wakes for the earliest deadline of
//! its state machine. A new timer per turn of its loop cost a timer-wheel registration and
//! removal for every message while any deadline was set (a server with an open §10.5 turn
//! has one); this one stays registered and is moved only to an earlier deadline. A later
//! one waits until the armed one fires: the state machine's `handle_timeout` does nothing
//! before a deadline is due, so an early wake-up only re-arms.

use std::pin::Pin;
use std::time::Instant;

use tokio::time::Sleep;

/// The timer (module docs).
#[derive(Debug)]
pub(crate) struct Alarm {
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl Alarm {
    /// An alarm that is not armed.
    pub(crate) fn new() -> Alarm {
        Alarm {
            sleep: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
            armed: None,
        }
    }

    /// Asks for a wake-up at `deadline` (none: nothing asked). Re-arms only for a deadline
    /// earlier than the one armed.
    pub(crate) fn want(&mut self, deadline: Option<Instant>) {
        let Some(d) = deadline else { return };
        if self.armed.is_some_and(|a| a <= d) {
            return;
        }
        self.sleep.as_mut().reset(tokio::time::Instant::from_std(d));
        self.armed = Some(d);
    }

    /// Whether a wake-up is armed.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Resolves at the armed instant, disarming the alarm; only poll it while
    /// [`Alarm::is_armed`]. Cancel-safe.
    pub(crate) async fn fired(&mut self) {
        self.sleep.as_mut().await;
        self.armed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Armed for the earliest deadline asked; a later one waits for it, an earlier one
    /// moves it; it disarms when it fires.
    #[tokio::test(start_paused = true)]
    async fn it_wakes_for_the_earliest_deadline_asked() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut a = Alarm::new();
        assert!(!a.is_armed());
        a.want(None);
        assert!(!a.is_armed());
        a.want(Some(t0 + Duration::from_secs(10)));
        a.want(Some(t0 + Duration::from_secs(20)));
        a.want(Some(t0 + Duration::from_secs(5)));
        a.fired().await;
        assert_eq!(
            tokio::time::Instant::now().into_std() - t0,
            Duration::from_secs(5)
        );
        assert!(!a.is_armed());
        a.want(Some(t0 + Duration::from_secs(20)));
        a.fired().await;
        assert_eq!(
            tokio::time::Instant::now().into_std() - t0,
            Duration::from_secs(20)
        );
    }
}
