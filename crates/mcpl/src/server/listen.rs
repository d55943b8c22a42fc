//! Serving a [`Server`] on a listener: the transport accept loop of
//! [`crate::transport::listen::serve`] (accept errors survived, transport handshakes off the
//! loop under a timeout), plus a bound on the MCP handshake of each connection.
//!
//! Reading (issue #20): a connection that has not completed MCP `initialize` within
//! [`ServeConfig::initialize_timeout`] is closed. Before `initialize` the session answers
//! nothing but `ping` (every other request is refused as premature), so a connection that
//! lingers there only holds a descriptor and memory; closing it fails closed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::throttle::Throttle;

use crate::transport::listen::{self, Listen, ListenConfig};
use crate::transport::Transport;

use super::Server;

/// How a listener is served ([`serve`]). `ServeConfig::default()` is a sensible start.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The accept loop's limits (handshake timeout, backoff, reports).
    pub listen: ListenConfig,
    /// Longest a connection may take from its transport handshake to a handled
    /// `initialize` request (10 s); a slower one is closed, freeing its place under
    /// [`ListenConfig::max_connections`], and said through [`ListenConfig::report`] and
    /// `tracing` (at most once per [`listen::REPORT_INTERVAL`], the rest counted). At least
    /// 1 ms ([`serve`] refuses less, [`ServeConfig::defects`]). There is no "off": a
    /// connection that never initializes would hold its place for ever (fail closed); a
    /// caller wanting a long wait sets a long one.
    pub initialize_timeout: Duration,
    /// Hand the heap memory freed by ended connections back to the operating system
    /// ([`RELEASE_DELAY`] after the first of them ends; on by default). See
    /// [`release_freed_memory`].
    pub release_memory: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: ListenConfig::default(),
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            release_memory: true,
        }
    }
}

impl ServeConfig {
    /// The values of this configuration that cannot work, each naming its field
    /// (`ServeConfig.…`); empty when it can serve. [`serve`] and [`serve_each`] refuse a
    /// configuration with any ([`ServeConfigError`]) before accepting a connection.
    ///
    /// Reading (issue #20 sets no floor): an `initialize_timeout` under 1 ms closes every
    /// connection before its `initialize` could be read, so nothing could ever be served;
    /// 1 ms is the floor [`crate::peer::PeerConfig::defects`] sets for its timeouts. The
    /// listener's own values are judged by [`ListenConfig::defects`].
    pub fn defects(&self) -> Vec<String> {
        let mut out = Vec::new();
        crate::config_rules::timeout(
            &mut out,
            &"ServeConfig.initialize_timeout",
            self.initialize_timeout,
            "every connection would be closed before its initialize could be read",
        );
        out.extend(self.listen.defects().into_iter().map(|d| {
            format!(
                "ServeConfig.listen.{}",
                d.trim_start_matches("ListenConfig.")
            )
        }));
        out
    }
}

/// Why [`serve`] or [`serve_each`] refused to start: the [`ServeConfig`] has values that
/// cannot work ([`ServeConfig::defects`]). Nothing was accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the ServeConfig is refused, nothing is served: {}", .defects.join("; "))]
pub struct ServeConfigError {
    /// Each defect, naming its field, as [`ServeConfig::defects`] lists them.
    pub defects: Vec<String>,
}

/// How long after a connection ends [`ServeConfig::release_memory`] releases memory: the
/// connections ending within it (a burst of closes) are covered by one release, so there is
/// at most one per second however fast connections come and go.
pub const RELEASE_DELAY: Duration = Duration::from_secs(1);

/// Schedules at most one [`release_freed_memory`] per [`RELEASE_DELAY`] after connections end.
#[derive(Default)]
struct Release {
    scheduled: AtomicBool,
}

impl Release {
    fn connection_ended(self: &Arc<Self>) {
        if self.scheduled.swap(true, Ordering::SeqCst) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RELEASE_DELAY).await;
            // Cleared first: a connection ending during the release schedules the next one.
            this.scheduled.store(false, Ordering::SeqCst);
            let _ = tokio::task::spawn_blocking(release_freed_memory).await;
        });
    }
}

/// Returns the free memory of the process's heap to the operating system, where the
/// allocator keeps it otherwise: with glibc, `malloc_trim(0)`.
///
/// Reading (issue #20: memory returned after idle connections close): glibc gives memory
/// back on `free` only from the top of each arena's heap, above `M_TRIM_THRESHOLD`; a burst
/// of connections leaves their freed blocks interleaved with live ones (the listener's,
/// the runtime's, connections still open), so the top rarely moves and RSS stayed ≈ 60–130
/// MiB above its start after 2,000 connections closed. Raising or lowering
/// `M_TRIM_THRESHOLD` / `M_ARENA_MAX` with `mallopt` changes neither (the freed pages are
/// not at the top); `malloc_trim(0)` walks every arena and hands back each whole free page
/// wherever it lies (`MADV_DONTNEED`), which is the one call that does. It costs a walk of
/// the free lists under each arena's lock, so it runs on a blocking thread, at most once
/// per [`RELEASE_DELAY`], and only after connections end. On other allocators and targets
/// this does nothing (they manage their own release).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes a plain integer (the padding to keep at the top of the
    // heap) and only rearranges glibc's free lists under their locks; it is documented as
    // safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The default [`ServeConfig::initialize_timeout`]: 10 s.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `server` on every connection `listener` accepts, forever (drop the future to stop
/// accepting; connections already served go on). Each connection runs in its own task.
///
/// Returns only an error: a `config` with values that cannot work is refused before
/// anything is accepted ([`ServeConfigError`], also logged with `tracing`, for a caller
/// that spawned the future and never reads its output). The accept loop itself never ends,
/// so `Ok` is never returned.
pub async fn serve<L: Listen + 'static>(
    server: Server,
    listener: Arc<L>,
    config: ServeConfig,
) -> Result<(), ServeConfigError> {
    serve_each(move || server.clone(), listener, config).await
}

/// Like [`serve`], but every connection is served by its own [`Server`], made by `make`
/// when the connection arrives. The heavier option: each connection then holds a whole
/// server (builder output, handler table, tool registry, manifest tracker with its digested
/// manifest; ≈ 34 KiB for the reference server, issue #20). State that belongs to one
/// connection fits one shared server ([`serve`]) as
/// [`ServerBuilder::connection_state`](super::ServerBuilder::connection_state), and a
/// manifest one connection changes alone as [`Session::own_manifest`](super::Session::own_manifest).
/// A `config` that cannot work is refused as [`serve`] refuses it.
pub async fn serve_each<L, F>(
    make: F,
    listener: Arc<L>,
    config: ServeConfig,
) -> Result<(), ServeConfigError>
where
    L: Listen + 'static,
    F: Fn() -> Server + Send + Sync + 'static,
{
    let defects = config.defects();
    if !defects.is_empty() {
        let e = ServeConfigError { defects };
        tracing::error!("{e}");
        return Err(e);
    }
    let initialize_timeout = config.initialize_timeout;
    let release = config.release_memory.then(Arc::<Release>::default);
    let closed = Arc::new(InitializeClosed {
        report: config.listen.report.clone(),
        throttle: Mutex::new(Throttle::new(listen::REPORT_INTERVAL)),
    });
    listen::serve(listener, config.listen, move |transport, addr| {
        let served = serve_one(make(), transport, addr, initialize_timeout, closed.clone());
        let release = release.clone();
        async move {
            served.await;
            if let Some(release) = release {
                release.connection_ended();
            }
        }
    })
    .await;
    Ok(())
}

/// Says that connections were closed for want of `initialize`: through `tracing` and the
/// listener's [`ListenConfig::report`], at most once per [`listen::REPORT_INTERVAL`] (the
/// others counted in the next line), as the accept loop says its refused handshakes, so a
/// flood of silent connections makes a bounded number of lines.
struct InitializeClosed {
    report: Option<listen::Reporter>,
    throttle: Mutex<Throttle>,
}

impl InitializeClosed {
    fn say(&self, addr: SocketAddr, init: Duration) {
        let now = tokio::time::Instant::now().into_std();
        let line = {
            let mut throttle = self.throttle.lock().unwrap_or_else(|e| e.into_inner());
            throttle.line_at(now, || {
                format!(
                    "{addr}: no initialize within {init:?} \
                     (ServeConfig.initialize_timeout); connection closed"
                )
            })
        };
        let Some(line) = line else { return };
        tracing::warn!(target: "mcpl::listen", "{line}");
        if let Some(report) = &self.report {
            report(&line);
        }
    }
}

async fn serve_one(
    server: Server,
    transport: Transport,
    addr: SocketAddr,
    init: Duration,
    closed: Arc<InitializeClosed>,
) {
    let session = server.start(transport);
    let mut state = session.grant_changes();
    let initialized = tokio::time::timeout(init, async {
        state.wait_for(|s| s.initialized).await.is_ok()
    })
    .await;
    drop(state);
    if initialized != Ok(true) {
        closed.say(addr, init);
        session.close();
    }
    let reason = session.closed().await;
    tracing::debug!("{addr}: connection ended: {reason}");
}
