//! `BridgeConfig` is refused where it is taken (`builder_with`, `fallback_with`) when it
//! cannot work: an `initialize_timeout` under 1 ms would give up every `initialize` rmcp
//! does not answer at once, so no host could ever connect.

use std::time::Duration;

use mcpl_rmcp::{BridgeConfig, BridgeConfigError};
use rmcp::ServerHandler;

#[derive(Clone, Default)]
struct Empty;

impl ServerHandler for Empty {}

#[test]
fn a_zero_initialize_timeout_is_refused_where_the_config_is_taken() {
    let mut by_field = BridgeConfig::default();
    by_field.initialize_timeout = Duration::ZERO;
    for config in [
        BridgeConfig::default().initialize_timeout(Duration::ZERO),
        BridgeConfig::default().initialize_timeout(Duration::from_micros(999)),
        by_field,
    ] {
        let Err(e) = mcpl_rmcp::builder_with(Empty, config.clone()) else {
            panic!("{config:?} was taken");
        };
        assert!(
            matches!(e, BridgeConfigError::InitializeTimeout(_)),
            "{e:?}"
        );
        let message = e.to_string();
        assert!(
            message.contains("initialize_timeout") && message.contains("1ms"),
            "{message}"
        );
        assert!(mcpl_rmcp::fallback_with(Empty, config).is_err());
    }
    let at_least = BridgeConfig::default().initialize_timeout(Duration::from_millis(1));
    mcpl_rmcp::builder_with(Empty, at_least.clone())
        .expect("1 ms is taken")
        .build()
        .expect("builds");
    assert!(mcpl_rmcp::fallback_with(Empty, at_least).is_ok());
}
