//! Accept loops that survive their environment: [`serve`] accepts connections from any
//! [`Listen`] implementation ([`tcp::Listener`](super::tcp::Listener),
//! [`ws::Listener`](super::ws::Listener)) until it is dropped, and never returns on an error.
//!
//! Readings (issue #20, hostile peers from outside):
//! - **Accept errors** are never fatal. Running out of descriptors (`EMFILE`, `ENFILE`) or
//!   memory leaves the pending connection in the kernel's backlog, so the listener stays
//!   readable and a loop that retried at once would spin on a core. After a failed accept the
//!   loop waits ([`ListenConfig::min_backoff`], doubled per consecutive failure up to
//!   [`ListenConfig::max_backoff`]) and tries again. The first failure of a run is reported
//!   once; the rest of the run is counted and summarised in one line when an accept succeeds
//!   again, so a run of any length costs two log lines. An error that concerns only the
//!   connection being accepted (aborted or reset before the accept, refused by a firewall
//!   rule, a protocol error: `is_connection_error`) takes that connection with it and
//!   leaves nothing pending: the next accept is tried at once, and such errors are reported
//!   as failed handshakes are (at most once per [`REPORT_INTERVAL`]), so a storm of aborted
//!   dials does not slow every other client by the backoff.
//! - **Handshakes** (TLS, WebSocket upgrade) run in their own task, never on the accept loop,
//!   each bounded by [`ListenConfig::handshake_timeout`]: one client that never completes its
//!   upgrade delays nobody. At most [`ListenConfig::max_handshakes`] run at once; past that the
//!   loop stops accepting (the kernel's backlog holds further dials) until one finishes.
//!   One address (counted as below) runs at most
//!   [`ListenConfig::max_handshakes_per_address`] of them
//!   ([`DEFAULT_MAX_HANDSHAKES_PER_ADDRESS`]); one more from it is accepted but waits, in
//!   its own task and holding no slot, for one of its address's handshakes to end, all within
//!   its own handshake timeout. A client stalling its upgrades (slowloris) thus holds at most
//!   that many slots and the loop goes on accepting the others, while a burst from one
//!   address (a NAT) is delayed, never refused.
//! - **Connections** served at once are at most [`ListenConfig::max_connections`]
//!   ([`DEFAULT_MAX_CONNECTIONS`]); a connection holds its place from its accept until it
//!   ends. At the limit the loop stops accepting (the kernel's backlog holds further dials,
//!   and refuses past its own size) and says so at most once per [`REPORT_INTERVAL`], so
//!   idle connections cannot grow the server's memory without bound.
//! - **Connections from one address** (an IPv4 address, or an IPv6 /64, which one client
//!   commonly holds whole) are at most [`ListenConfig::max_connections_per_address`]
//!   ([`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]), so one peer cannot take every place. One
//!   more from it is closed as soon as it is accepted, before any handshake, and reported
//!   like a failed handshake.
//! - **Failed handshakes** are per connection and reported at most once per
//!   [`REPORT_INTERVAL`], with a count of those not shown, so a flood of bad connections
//!   cannot flood the log either.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{BoxFuture, MessageBudget, Transport};

/// A callback receiving each line an operator should see (e.g. printed on stderr).
pub type Reporter = Arc<dyn Fn(&str) + Send + Sync>;

/// Limits of an accept loop ([`serve`]). `ListenConfig::default()` is a sensible start.
#[derive(Clone)]
pub struct ListenConfig {
    /// Longest a connection's transport handshake (TLS, WebSocket upgrade) may take (10 s);
    /// a slower one is dropped.
    pub handshake_timeout: Duration,
    /// Most handshakes in progress at once (256); past it the loop waits before accepting.
    pub max_handshakes: usize,
    /// Most handshakes in progress at once from one peer address
    /// ([`DEFAULT_MAX_HANDSHAKES_PER_ADDRESS`]; counted as
    /// [`Self::max_connections_per_address`] counts); one more from it waits, holding none
    /// of the [`Self::max_handshakes`] slots, until one of them ends, within its
    /// [`Self::handshake_timeout`].
    pub max_handshakes_per_address: usize,
    /// Most connections served at once, handshakes included ([`DEFAULT_MAX_CONNECTIONS`]);
    /// past it the loop waits before accepting, and reports it (at most once per
    /// [`REPORT_INTERVAL`]).
    pub max_connections: usize,
    /// Most connections served at once from one peer address, handshakes included
    /// ([`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]; IPv6 addresses count by their /64 prefix);
    /// one more from it is closed at once and reported (at most once per
    /// [`REPORT_INTERVAL`], the rest counted).
    pub max_connections_per_address: usize,
    /// Wait after the first failed accept of a run (10 ms).
    pub min_backoff: Duration,
    /// Longest wait between two failed accepts (1 s).
    pub max_backoff: Duration,
    /// Receives the loop's reports (accept failures and recoveries, refused handshakes);
    /// `None` reports through `tracing` only. Every report also goes to `tracing`.
    pub report: Option<Reporter>,
    /// The budget every accepted connection's partial messages are taken from, shared by
    /// them all (see [`super::budget`]); `None` (default) leaves each transport with
    /// [`MessageBudget::process`] (256 MiB for the whole process). A connection's own
    /// `PeerConfig::message_budget`, when set, replaces it.
    pub message_budget: Option<MessageBudget>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_handshakes: 256,
            max_handshakes_per_address: DEFAULT_MAX_HANDSHAKES_PER_ADDRESS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            report: None,
            message_budget: None,
        }
    }
}

impl ListenConfig {
    /// The values of this configuration that cannot work, each naming its field
    /// (`ListenConfig.…`); empty when it can accept. `server::listen::serve` refuses them
    /// (through `ServeConfig::defects`). Readings: a `handshake_timeout` under 1 ms drops
    /// nearly every TLS or WebSocket handshake before its first read (1 ms is the floor
    /// `PeerConfig::defects` sets for timeouts); a count of 0 admits nothing, so it is a
    /// mistake, not a way to refuse connections (the loop would raise it to 1 unsaid).
    pub fn defects(&self) -> Vec<String> {
        use crate::config_rules::{count, timeout};
        let mut out = Vec::new();
        timeout(
            &mut out,
            &"ListenConfig.handshake_timeout",
            self.handshake_timeout,
            "nearly every handshake would be dropped before its first read",
        );
        for (name, value) in [
            ("max_handshakes", self.max_handshakes),
            (
                "max_handshakes_per_address",
                self.max_handshakes_per_address,
            ),
            ("max_connections", self.max_connections),
            (
                "max_connections_per_address",
                self.max_connections_per_address,
            ),
        ] {
            count(
                &mut out,
                &format_args!("ListenConfig.{name}"),
                value,
                "0 would admit nothing",
            );
        }
        if self.min_backoff > self.max_backoff {
            out.push(format!(
                "ListenConfig.min_backoff ({:?}) is over max_backoff ({:?})",
                self.min_backoff, self.max_backoff
            ));
        }
        out
    }
}

impl std::fmt::Debug for ListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenConfig")
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_handshakes", &self.max_handshakes)
            .field(
                "max_handshakes_per_address",
                &self.max_handshakes_per_address,
            )
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_address",
                &self.max_connections_per_address,
            )
            .field("min_backoff", &self.min_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("report", &self.report.is_some())
            .field("message_budget", &self.message_budget)
            .finish()
    }
}

/// The default [`ListenConfig::handshake_timeout`]: 10 s.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`ListenConfig::max_handshakes_per_address`]: 32, an eighth of the default
/// [`ListenConfig::max_handshakes`] (256), so one address stalling its upgrades leaves the
/// other slots to the others.
pub const DEFAULT_MAX_HANDSHAKES_PER_ADDRESS: usize = 32;

/// The default [`ListenConfig::max_connections`]: 10,000 (about 280 MiB of idle MCPL
/// connections of the reference server, issue #20's ≈ 28 KiB each).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The default [`ListenConfig::max_connections_per_address`]: 1,000, a tenth of
/// [`DEFAULT_MAX_CONNECTIONS`], so one peer address leaves nine tenths of the places to the
/// others (a host behind a NAT or a proxy may still open that many).
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 1_000;

/// Failed handshakes are reported at most once per this interval (the others are counted).
pub const REPORT_INTERVAL: Duration = Duration::from_secs(10);

impl ListenConfig {
    fn say(&self, line: &str) {
        tracing::warn!(target: "mcpl::listen", "{line}");
        if let Some(report) = &self.report {
            report(line);
        }
    }
}

/// A listening socket whose accept is split from the connection's handshake, so that an
/// accept loop ([`serve`]) can run each handshake in its own task.
pub trait Listen: Send + Sync {
    /// A connection accepted by the kernel whose transport handshake has not run yet.
    type Accepted: Send + 'static;

    /// Waits for the next connection; no handshake, no read from it.
    fn accept_raw(&self) -> BoxFuture<'_, io::Result<(Self::Accepted, SocketAddr)>>;

    /// Runs the connection's transport handshake (none for plain TCP) and returns its
    /// transport; the error is a human-readable reason.
    fn handshake(
        &self,
        accepted: Self::Accepted,
        addr: SocketAddr,
    ) -> BoxFuture<'static, Result<Transport, String>>;
}

/// Whether an accept error comes from this process's or the system's resources (descriptors,
/// memory), which persist until something is released, rather than from the one connection.
pub fn is_resource_exhaustion(e: &io::Error) -> bool {
    // EMFILE 24, ENFILE 23, ENOBUFS 105, ENOMEM 12 on Linux; other systems' numbers differ,
    // and there every non-connection error is treated alike anyway (backoff either way).
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12)) || e.kind() == io::ErrorKind::OutOfMemory
}

/// Whether an accept error concerns only the connection being accepted, which is gone
/// with it (aborted or reset before the accept, refused by a firewall rule, a network or
/// protocol error the kernel passes on from it, an interrupted call): nothing stays pending,
/// so the next accept is tried at once. accept(2) on Linux asks callers to retry those
/// as they would `EAGAIN`. Any other error (resources, or the listener itself) backs off.
fn is_connection_error(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    // Linux's numbers of the errors with no `ErrorKind` of their own: EPROTO 71,
    // ENOPROTOOPT 92, EOPNOTSUPP 95, ENONET 64, EHOSTDOWN 112; elsewhere they back off.
    let linux =
        cfg!(target_os = "linux") && matches!(e.raw_os_error(), Some(71 | 92 | 95 | 64 | 112));
    linux
        || matches!(
            e.kind(),
            K::ConnectionAborted
                | K::ConnectionReset
                | K::ConnectionRefused
                | K::PermissionDenied
                | K::Interrupted
                | K::TimedOut
                | K::HostUnreachable
                | K::NetworkUnreachable
                | K::NetworkDown
        )
}

/// The accept loop's memory of a run of failures: the next wait, and how many failures the
/// run has had since its first one was reported.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    failures: u64,
}

impl Backoff {
    fn new(config: &ListenConfig) -> Backoff {
        Backoff {
            next: config.min_backoff,
            failures: 0,
        }
    }

    /// A failed accept: reported if it starts a run; returns how long to wait.
    fn failed(&mut self, config: &ListenConfig, e: &io::Error) -> Duration {
        self.failures += 1;
        if self.failures == 1 {
            let kind = if is_resource_exhaustion(e) {
                "out of resources"
            } else {
                "accept failed"
            };
            config.say(&format!(
                "{kind}: {e}; still listening, retrying with backoff (up to {:?})",
                config.max_backoff
            ));
        }
        let wait = self.next;
        self.next = (self.next * 2).min(config.max_backoff.max(config.min_backoff));
        wait
    }

    /// A successful accept: ends a run of failures, with one summary line.
    fn succeeded(&mut self, config: &ListenConfig) {
        if self.failures > 0 {
            config.say(&format!(
                "accepting again after {} failed accept{}",
                self.failures,
                if self.failures == 1 { "" } else { "s" }
            ));
        }
        self.failures = 0;
        self.next = config.min_backoff;
    }
}

/// Reports failed handshakes at most once per [`REPORT_INTERVAL`], counting the rest.
#[derive(Debug)]
struct HandshakeLog(crate::throttle::Throttle);

impl Default for HandshakeLog {
    fn default() -> Self {
        HandshakeLog(crate::throttle::Throttle::new(REPORT_INTERVAL))
    }
}

impl HandshakeLog {
    fn failed(log: &Mutex<HandshakeLog>, config: &ListenConfig, addr: SocketAddr, why: &str) {
        HandshakeLog::report(
            log,
            config,
            format!("connection from {addr} refused: {why}"),
        );
    }

    /// Says `line`, unless a line was said less than [`REPORT_INTERVAL`] ago (then it is
    /// counted, and the count said with the next).
    fn report(log: &Mutex<HandshakeLog>, config: &ListenConfig, line: String) {
        // The runtime's clock (paused in tests), as `REPORT_INTERVAL` is measured on it.
        let now = Instant::now().into_std();
        let said = log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .line_at(now, || line);
        if let Some(line) = said {
            config.say(&line);
        }
    }
}

/// The address a connection counts against ([`ListenConfig::max_connections_per_address`]):
/// an IPv4 address as it is, an IPv6 one by its /64 prefix (an IPv4-mapped one as IPv4).
fn address_key(addr: &SocketAddr) -> IpAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut o = v6.octets();
                o[8..].fill(0);
                IpAddr::V6(o.into())
            }
        },
        v4 => v4,
    }
}

/// The connections open per address ([`address_key`]), each address with the slots of its
/// handshakes ([`ListenConfig::max_handshakes_per_address`]); an address with no connection
/// has no entry, so it holds at most [`ListenConfig::max_connections`] entries.
#[derive(Debug, Default)]
struct PerAddress(Mutex<HashMap<IpAddr, (usize, Arc<Semaphore>)>>);

/// One connection's place in its address's count, given back when dropped, and its
/// address's handshake slots.
struct AddressPlace {
    counts: Arc<PerAddress>,
    key: IpAddr,
    handshakes: Arc<Semaphore>,
}

impl PerAddress {
    /// A place for one more connection from `key`, or `None` when it holds `limit`; an
    /// address new to the map gets `handshakes` handshake slots.
    fn take(
        counts: &Arc<PerAddress>,
        key: IpAddr,
        limit: usize,
        handshakes: usize,
    ) -> Option<AddressPlace> {
        let mut map = counts.0.lock().unwrap_or_else(|e| e.into_inner());
        let (n, slots) = map
            .entry(key)
            .or_insert_with(|| (0, Arc::new(Semaphore::new(handshakes))));
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(AddressPlace {
            counts: counts.clone(),
            key,
            handshakes: slots.clone(),
        })
    }
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((n, _)) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Accepts connections from `listener` forever (it never returns; drop the future to stop)
/// and hands each one's transport to `on_connection` in a task of its own, after the
/// transport handshake has succeeded within [`ListenConfig::handshake_timeout`]. See the
/// module docs for how errors are survived.
pub async fn serve<L, F, Fut>(listener: Arc<L>, config: ListenConfig, on_connection: F)
where
    L: Listen + 'static,
    F: Fn(Transport, SocketAddr) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let on_connection = Arc::new(on_connection);
    let handshakes = Arc::new(Semaphore::new(config.max_handshakes.max(1)));
    let limit = config.max_connections.max(1);
    let connections = Arc::new(Semaphore::new(limit));
    let per_address_limit = config.max_connections_per_address.max(1);
    let per_address = Arc::new(PerAddress::default());
    let handshakes_per_address = config.max_handshakes_per_address.max(1);
    let log = Arc::new(Mutex::new(HandshakeLog::default()));
    // Accept errors of one connection, reported as failed handshakes are.
    let lost = Mutex::new(HandshakeLog::default());
    let mut backoff = Backoff::new(&config);
    // When reaching the connection limit was last reported.
    let mut full_since: Option<Instant> = None;
    loop {
        // Places first: past a limit, dials wait in the kernel's backlog, not here.
        let place = match connections.clone().try_acquire_owned() {
            Ok(place) => place,
            Err(_) => {
                // Once per `REPORT_INTERVAL` at most, however often it is reached.
                if !full_since.is_some_and(|at| at.elapsed() < REPORT_INTERVAL) {
                    full_since = Some(Instant::now());
                    config.say(&format!(
                        "{limit} connections are open, the limit \
                         (ListenConfig::max_connections): new ones wait to be accepted \
                         until one ends"
                    ));
                }
                let Ok(place) = connections.clone().acquire_owned().await else {
                    return;
                };
                place
            }
        };
        let Ok(slot) = handshakes.clone().acquire_owned().await else {
            return;
        };
        let (accepted, addr) = match listener.accept_raw().await {
            Ok(a) => a,
            Err(e) if is_connection_error(&e) => {
                // That connection is gone, and nothing waits behind it: no backoff, which
                // would slow every other client for a storm of aborted dials.
                drop((slot, place));
                let line = format!("a connection was lost before it was accepted: {e}");
                HandshakeLog::report(&lost, &config, line);
                // Others run between two such errors, however many come.
                tokio::task::yield_now().await;
                continue;
            }
            Err(e) => {
                drop((slot, place));
                let wait = backoff.failed(&config, &e);
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        backoff.succeeded(&config);
        let key = address_key(&addr);
        let Some(address_place) =
            PerAddress::take(&per_address, key, per_address_limit, handshakes_per_address)
        else {
            // Closed before any handshake: it costs nothing more.
            drop((accepted, slot, place));
            let why = format!(
                "{per_address_limit} connections from {key} are open, the limit \
                 (ListenConfig::max_connections_per_address)"
            );
            HandshakeLog::failed(&log, &config, addr, &why);
            continue;
        };
        // Both slots at once, or neither: one past its address's handshakes gives its
        // slot back to the loop and waits for its address's turn in its own task.
        let ready = match address_place.handshakes.clone().try_acquire_owned() {
            Ok(own) => Some((slot, own)),
            Err(_) => None,
        };
        let handshake = listener.handshake(accepted, addr);
        let (on_connection, config, log) = (on_connection.clone(), config.clone(), log.clone());
        let slots = handshakes.clone();
        tokio::spawn(async move {
            // Held until the connection has ended, however it ends.
            let places = (place, address_place);
            let result = tokio::time::timeout(config.handshake_timeout, async {
                let held = match ready {
                    Some(held) => held,
                    None => {
                        let own = places.1.handshakes.clone().acquire_owned().await;
                        let slot = slots.acquire_owned().await;
                        match (slot, own) {
                            (Ok(slot), Ok(own)) => (slot, own),
                            _ => return Err("the accept loop has stopped".to_owned()),
                        }
                    }
                };
                let transport = handshake.await;
                drop(held);
                transport
            })
            .await;
            match result {
                Ok(Ok(mut transport)) => {
                    if let Some(budget) = &config.message_budget {
                        transport.reader.set_message_budget(budget.clone());
                    }
                    on_connection(transport, addr).await
                }
                Ok(Err(why)) => HandshakeLog::failed(&log, &config, addr, &why),
                Err(_) => HandshakeLog::failed(
                    &log,
                    &config,
                    addr,
                    &format!(
                        "handshake not completed within {:?}",
                        config.handshake_timeout
                    ),
                ),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet() -> (ListenConfig, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let config = ListenConfig {
            report: Some(Arc::new(move |l: &str| {
                sink.lock().unwrap().push(l.to_owned())
            })),
            ..ListenConfig::default()
        };
        (config, lines)
    }

    #[test]
    fn a_run_of_failures_is_reported_once_and_summarised_once() {
        let (config, lines) = quiet();
        let mut b = Backoff::new(&config);
        let emfile = io::Error::from_raw_os_error(24);
        let waits: Vec<Duration> = (0..12).map(|_| b.failed(&config, &emfile)).collect();
        b.succeeded(&config);
        b.succeeded(&config);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("out of resources"), "{lines:?}");
        assert_eq!(lines[1], "accepting again after 12 failed accepts");
        assert_eq!(waits[0], Duration::from_millis(10));
        assert_eq!(waits[1], Duration::from_millis(20));
        assert_eq!(*waits.last().unwrap(), Duration::from_secs(1));
    }

    #[test]
    fn descriptor_and_memory_errors_are_resource_exhaustion() {
        for code in [24, 23, 105, 12] {
            assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(code)));
        }
        assert!(!is_resource_exhaustion(&io::Error::from_raw_os_error(103)));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_handshakes_are_reported_at_most_once_per_interval() {
        let (config, lines) = quiet();
        let log = Mutex::new(HandshakeLog::default());
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for _ in 0..100 {
            HandshakeLog::failed(&log, &config, addr, "bad upgrade");
        }
        tokio::time::advance(REPORT_INTERVAL).await;
        HandshakeLog::failed(&log, &config, addr, "bad upgrade");
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].ends_with("(and 99 more not shown)"), "{lines:?}");
    }

    /// A listener whose accepts follow a script (an error, or a connection), each noting
    /// the (paused) time it was made at; past the script it waits for ever.
    struct Scripted {
        script: Mutex<std::collections::VecDeque<Option<io::Error>>>,
        calls: Mutex<Vec<Instant>>,
    }

    impl Listen for Scripted {
        type Accepted = ();

        fn accept_raw(&self) -> BoxFuture<'_, io::Result<((), SocketAddr)>> {
            self.calls.lock().unwrap().push(Instant::now());
            let next = self.script.lock().unwrap().pop_front();
            Box::pin(async move {
                match next {
                    Some(Some(e)) => Err(e),
                    Some(None) => Ok(((), "127.0.0.1:9".parse().unwrap())),
                    None => std::future::pending().await,
                }
            })
        }

        fn handshake(
            &self,
            _accepted: (),
            _addr: SocketAddr,
        ) -> BoxFuture<'static, Result<Transport, String>> {
            Box::pin(async { Ok(super::super::memory::pair().0) })
        }
    }

    /// Runs `serve` over `script` until its one connection is handed out; the times of the
    /// accepts, from the first.
    async fn accept_times(script: Vec<Option<io::Error>>) -> Vec<Duration> {
        let (config, _lines) = quiet();
        let len = script.len();
        let listener = Arc::new(Scripted {
            script: Mutex::new(script.into()),
            calls: Mutex::new(Vec::new()),
        });
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let serving = tokio::spawn(serve(listener.clone(), config, move |_t, _a| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(()).await;
            }
        }));
        rx.recv().await.expect("the connection is handed out");
        serving.abort();
        // The accepts up to the connection (the loop has begun the next one since).
        let calls = listener.calls.lock().unwrap();
        calls
            .iter()
            .take(len)
            .map(|t| t.duration_since(calls[0]))
            .collect()
    }

    /// An accept error that concerns only the connection being accepted (it was aborted or
    /// reset before the accept, refused by a firewall rule, a protocol error) does not delay
    /// the next accept: that connection is gone, nothing stays pending. Before, every error
    /// backed off, doubling: a storm of aborted handshakes slowed every other client by up
    /// to `max_backoff` (1 s) per accept.
    #[tokio::test(start_paused = true)]
    async fn an_error_of_one_connection_does_not_delay_the_next_accept() {
        let mut script: Vec<Option<io::Error>> = Vec::new();
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::Interrupted,
        ] {
            for _ in 0..4 {
                script.push(Some(io::Error::from(kind)));
            }
        }
        #[cfg(target_os = "linux")]
        script.push(Some(io::Error::from_raw_os_error(71))); // EPROTO
        script.push(None);
        let times = accept_times(script).await;
        assert!(times.iter().all(|t| t.is_zero()), "{times:?}");
    }

    /// A resource error (here `EMFILE`) still backs off: the pending connection stays in the
    /// kernel's backlog, and retrying at once would spin.
    #[tokio::test(start_paused = true)]
    async fn a_resource_error_still_backs_off() {
        let times = accept_times(vec![Some(io::Error::from_raw_os_error(24)), None]).await;
        assert_eq!(times, [Duration::ZERO, Duration::from_millis(10)]);
    }
}
