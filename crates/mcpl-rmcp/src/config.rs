//! The bridge's own bounds ([`BridgeConfig`]) and why one is refused ([`BridgeConfigError`]).

use std::time::Duration;

/// How long rmcp's `initialize` may take by default ([`BridgeConfig::initialize_timeout`]).
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest [`BridgeConfig::initialize_timeout`] taken. Reading (the spec sets no
/// number): a shorter one gives up every `initialize` rmcp does not answer at once, so no
/// host could connect; 1 ms is the floor the library's `HostConfig` timeouts have too.
pub const MIN_INITIALIZE_TIMEOUT: Duration = Duration::from_millis(1);

/// The bridge's own bounds, per connection, besides the library's
/// ([`mcpl::peer::PeerConfig`]) and the constants of this crate. Taken by
/// [`crate::builder_with`] and [`crate::fallback_with`], which refuse one that cannot work
/// ([`Self::check`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BridgeConfig {
    /// How long rmcp's `initialize` may take before the host is answered `-32603` and the
    /// service serving it is stopped ([`INITIALIZE_TIMEOUT`]); the library's request
    /// timeout, when set and shorter, gives up first. At least [`MIN_INITIALIZE_TIMEOUT`].
    pub initialize_timeout: Duration,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            initialize_timeout: INITIALIZE_TIMEOUT,
        }
    }
}

impl BridgeConfig {
    /// This config with `initialize_timeout` set to `timeout`.
    pub fn initialize_timeout(mut self, timeout: Duration) -> Self {
        self.initialize_timeout = timeout;
        self
    }

    /// Whether this config can work: an `initialize_timeout` under
    /// [`MIN_INITIALIZE_TIMEOUT`] is refused ([`BridgeConfigError::InitializeTimeout`]).
    pub fn check(&self) -> Result<(), BridgeConfigError> {
        if self.initialize_timeout < MIN_INITIALIZE_TIMEOUT {
            return Err(BridgeConfigError::InitializeTimeout(
                self.initialize_timeout,
            ));
        }
        Ok(())
    }
}

/// Why a [`BridgeConfig`] was refused: nothing was built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BridgeConfigError {
    /// `initialize_timeout` (the value given) is under [`MIN_INITIALIZE_TIMEOUT`].
    InitializeTimeout(Duration),
}

impl std::fmt::Display for BridgeConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BridgeConfigError::InitializeTimeout(given) => write!(
                f,
                "BridgeConfig.initialize_timeout is {given:?}: every initialize rmcp does not \
                 answer at once would be given up, so no host could connect; give at least \
                 {MIN_INITIALIZE_TIMEOUT:?} (mcpl_rmcp::INITIALIZE_TIMEOUT, {INITIALIZE_TIMEOUT:?}, \
                 by default)"
            ),
        }
    }
}

impl std::error::Error for BridgeConfigError {}
