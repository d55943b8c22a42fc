//! Keeping one server connected: [`Supervisor`] dials, runs the handshake and the initial
//! policy exchange, and when the connection ends dials again after a backoff.
//!
//! Every connection is a new [`HostSession`] with its own handshake and policy exchange
//! (§5.3): nothing of an earlier session's grant, manifest review, channels or accepted
//! ontologies carries over, because nothing is handed from one session to the next.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{HostConfig, HostSession, HostStreams};
use crate::peer::CloseReason;
use crate::transport::Transport;

/// How long the [`Supervisor`] waits between attempts.
///
/// After the `n`th consecutive failure the wait is `initial · 2ⁿ⁻¹`, capped at `max`. A
/// connection that ends before `reset_after` counts as a failure too, so a server that
/// accepts and drops at once is not re-dialled in a tight loop; one that lasted longer
/// starts the count again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
    /// How long a connection must last for the failure count to start again.
    pub reset_after: Duration,
    /// Consecutive failures after which the supervisor gives up; `None` never gives up.
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl Backoff {
    /// The wait after the `failures`th consecutive failure (counted from 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// The shortest wait a backoff may hold, `initial` and `max` alike: 100 ms, the default
    /// `initial`. A supervisor re-dials a server that keeps failing at most ten times a
    /// second, and only until the doubling takes the wait up towards `max`; under it, a
    /// crowd of hosts whose server went down re-dials it in a storm as it comes back (a
    /// zero wait is a busy loop).
    pub const MIN_WAIT: Duration = Duration::from_millis(100);

    /// Every value of this backoff that cannot work, each naming its field, what it holds
    /// and what to write; empty when there is none. [`Supervisor::spawn`] refuses a backoff
    /// with any before it dials. `initial` and `max` are at least [`Backoff::MIN_WAIT`],
    /// `max` at least `initial` (the waits would never grow), and `max_attempts`, when
    /// given, at least 1.
    pub fn defects(&self) -> Vec<String> {
        let mut out = Vec::new();
        let floor = Self::MIN_WAIT;
        if self.initial < floor {
            out.push(format!(
                "Backoff.initial is {:?}: give at least {floor:?} (Backoff.MIN_WAIT: a shorter \
                 wait re-dials a failing server in a storm, a zero one in a busy loop; 100 ms \
                 by default)",
                self.initial
            ));
        }
        if self.max < self.initial.max(floor) {
            out.push(format!(
                "Backoff.max is {:?}, below Backoff.initial ({:?}) or Backoff.MIN_WAIT \
                 ({floor:?}): give at least both (30 s by default)",
                self.max, self.initial
            ));
        }
        if self.max_attempts == Some(0) {
            out.push(
                "Backoff.max_attempts is Some(0): give at least Some(1), or None never to give \
                 up"
                .to_owned(),
            );
        }
        out
    }
}

/// What happened to the supervised connection, in order.
#[derive(Debug)]
pub enum SupervisorEvent {
    /// A new session finished its handshake and initial policy exchange. `generation` counts
    /// the sessions of this supervisor from 1.
    Connected {
        /// Which session this is.
        generation: u64,
        /// The session; [`Supervisor::current`] returns it until it ends.
        session: HostSession,
        /// Its event and diagnostic streams.
        streams: HostStreams,
    },
    /// The session of `generation` ended.
    Disconnected {
        /// Which session ended.
        generation: u64,
        /// Why.
        reason: CloseReason,
    },
    /// Dialling or the handshake failed (or a connection ended before
    /// [`Backoff::reset_after`]); the next attempt comes after `retry_in`, or never when it
    /// is `None` (the supervisor stops and the event stream ends). A configuration or backoff
    /// refused before any dial ([`Supervisor::spawn`]) is `attempt: 0`.
    Failed {
        /// Consecutive failures so far; 0 when nothing was dialled.
        attempt: u32,
        /// What failed.
        error: String,
        /// The wait before the next attempt; `None` when giving up.
        retry_in: Option<Duration>,
    },
}

/// Events the supervisor holds for the application before it waits (each `Connected` holds
/// a session and its streams, so unread events are bounded rather than piling up).
pub const EVENT_CAPACITY: usize = 32;

type DialFuture = Pin<Box<dyn Future<Output = Result<Transport, String>> + Send>>;
type Dial = Arc<dyn Fn() -> DialFuture + Send + Sync>;

/// Keeps one server connected (see the module docs). Dropping the supervisor stops it and
/// closes the current session, even while the application still holds a handle to it.
///
/// Read the events: with [`EVENT_CAPACITY`] of them unread, the supervisor waits for the
/// application before it dials again.
///
/// ```no_run
/// use mcpl::host::{Backoff, HostConfig, Supervisor, SupervisorEvent};
/// use mcpl::transport::endpoint;
///
/// # async fn run() {
/// let config = HostConfig { policy: vec!["pushEvents".into()], ..HostConfig::default() };
/// let mut sup = Supervisor::spawn(
///     || endpoint::connect("tcp://127.0.0.1:7400", None),
///     config,
///     Backoff::default(),
/// );
/// while let Some(event) = sup.next_event().await {
///     match event {
///         SupervisorEvent::Connected { session, streams, .. } => { /* use them */ }
///         SupervisorEvent::Disconnected { reason, .. } => eprintln!("lost: {reason}"),
///         SupervisorEvent::Failed { error, retry_in, .. } => eprintln!("{error}, next in {retry_in:?}"),
///     }
/// }
/// # }
/// ```
pub struct Supervisor {
    events: mpsc::Receiver<SupervisorEvent>,
    current: watch::Receiver<Option<HostSession>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("connected", &self.current.borrow().is_some())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Starts supervising: `dial` opens a new transport to the server each time one is
    /// needed (for example `|| transport::endpoint::connect(addr, None)`), and every
    /// transport gets its own [`HostSession::connect`] with `config`. A `config` or
    /// `backoff` that cannot work ([`HostConfig::defects`], [`Backoff::defects`]) is never
    /// dialled: the first event is [`SupervisorEvent::Failed`] naming each defect, with
    /// `attempt: 0` and no retry, and the events end.
    pub fn spawn<F, Fut, E>(dial: F, config: HostConfig, backoff: Backoff) -> Supervisor
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Transport, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let dial: Dial = Arc::new(move || {
            let attempt = dial();
            Box::pin(async move { attempt.await.map_err(|e| e.to_string()) })
        });
        let (events_tx, events) = mpsc::channel(EVENT_CAPACITY);
        let (current_tx, current) = watch::channel(None);
        let task = tokio::spawn(supervise(dial, config, backoff, events_tx, current_tx));
        Supervisor {
            events,
            current,
            task,
        }
    }

    /// The next event; `None` once the supervisor has stopped (it gave up).
    pub async fn next_event(&mut self) -> Option<SupervisorEvent> {
        self.events.recv().await
    }

    /// The session currently connected, if any.
    pub fn current(&self) -> Option<HostSession> {
        self.current.borrow().clone()
    }

    /// Stops supervising and closes the current session.
    pub fn stop(self) {
        // Drop does it.
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(s) = self.current.borrow().as_ref() {
            s.close();
        }
    }
}

async fn supervise(
    dial: Dial,
    config: HostConfig,
    backoff: Backoff,
    events: mpsc::Sender<SupervisorEvent>,
    current: watch::Sender<Option<HostSession>>,
) {
    // The application's mistake, certain to fail every attempt: said once, nothing dialled.
    let mut defects = config.defects();
    defects.extend(backoff.defects());
    if !defects.is_empty() {
        let failed = SupervisorEvent::Failed {
            attempt: 0,
            error: format!("not dialled: {}", defects.join("; ")),
            retry_in: None,
        };
        let _ = events.send(failed).await;
        return;
    }
    let mut failures = 0u32;
    let mut generation = 0u64;
    loop {
        let error = match connect(&dial, &config).await {
            Ok((session, streams)) => {
                generation += 1;
                let since = Instant::now();
                current.send_replace(Some(session.clone()));
                let peer = session.peer().clone();
                let connected = SupervisorEvent::Connected {
                    generation,
                    session,
                    streams,
                };
                if events.send(connected).await.is_err() {
                    return;
                }
                let reason = peer.closed().await;
                current.send_replace(None);
                let ended = SupervisorEvent::Disconnected {
                    generation,
                    reason: reason.clone(),
                };
                if events.send(ended).await.is_err() {
                    return;
                }
                if since.elapsed() >= backoff.reset_after {
                    failures = 0;
                    // A connection that held: re-dial after the first wait, counted afresh.
                    tokio::time::sleep(backoff.delay(1)).await;
                    continue;
                }
                format!(
                    "connection {generation} ended after {:?}: {reason}",
                    since.elapsed()
                )
            }
            Err(e) => e,
        };
        failures = failures.saturating_add(1);
        let give_up = backoff.max_attempts.is_some_and(|m| failures >= m);
        let retry_in = (!give_up).then(|| backoff.delay(failures));
        let failed = SupervisorEvent::Failed {
            attempt: failures,
            error,
            retry_in,
        };
        if events.send(failed).await.is_err() {
            return;
        }
        match retry_in {
            Some(wait) => tokio::time::sleep(wait).await,
            None => return,
        }
    }
}

/// One attempt: dial, then handshake and initial policy exchange.
async fn connect(dial: &Dial, config: &HostConfig) -> Result<(HostSession, HostStreams), String> {
    let transport = dial().await.map_err(|e| format!("dial: {e}"))?;
    HostSession::connect(transport, config.clone())
        .await
        .map_err(|e| format!("handshake: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_and_stops_at_max() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            ..Backoff::default()
        };
        let waits: Vec<u128> = (1..=6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        // No overflow however long it has been failing.
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
        assert_eq!(b.delay(0), Duration::from_millis(100));
    }

    /// The floor: the default and a backoff at `MIN_WAIT` pass; a millisecond under it, in
    /// `initial` or in `max`, is named.
    #[test]
    fn a_wait_under_the_floor_is_a_defect() {
        assert!(Backoff::default().defects().is_empty());
        let at = Backoff {
            initial: Backoff::MIN_WAIT,
            max: Backoff::MIN_WAIT,
            ..Backoff::default()
        };
        assert!(at.defects().is_empty(), "{:?}", at.defects());
        let under = Backoff::MIN_WAIT - Duration::from_millis(1);
        let d = Backoff {
            initial: under,
            ..at
        }
        .defects();
        assert!(d.len() == 1 && d[0].starts_with("Backoff.initial"), "{d:?}");
        let d = Backoff { max: under, ..at }.defects();
        assert!(d.len() == 1 && d[0].starts_with("Backoff.max"), "{d:?}");
    }
}
