//! A host author's mistakes in what the host is configured with, refused the same way at
//! both entry points: `HostSession::connect` (`HostConfig`) and the sans-I/O
//! `HostState::new` (`HostRules`), by one rule (`HostRules::defects`).
#![cfg(feature = "runtime")]

use std::time::{Duration, Instant, SystemTime};

use mcpl::host::{HostConfig, HostError, HostSession};
use mcpl::session::{ChannelLimits, HostRules, HostState};

/// One `HostRules` per value that cannot work, with the field a refusal must name.
fn broken_rules() -> Vec<(&'static str, HostRules)> {
    let d = || HostRules::new(["pushEvents"]);
    let zero = Duration::ZERO;
    let ch = |f: fn(&mut ChannelLimits)| {
        let mut c = ChannelLimits::default();
        f(&mut c);
        HostRules { channels: c, ..d() }
    };
    vec![
        (
            "initialize_timeout",
            HostRules {
                initialize_timeout: zero,
                ..d()
            },
        ),
        (
            "policy_timeout",
            HostRules {
                policy_timeout: zero,
                ..d()
            },
        ),
        (
            "hook_timeout",
            HostRules {
                hook_timeout: zero,
                ..d()
            },
        ),
        (
            "manifest_timeout",
            HostRules {
                manifest_timeout: zero,
                ..d()
            },
        ),
        (
            "manifest_fetch_burst",
            HostRules {
                manifest_fetch_burst: 0,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostRules {
                manifest_fetch_per_sec: f64::NAN,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostRules {
                manifest_fetch_per_sec: -1.0,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostRules {
                manifest_fetch_per_sec: f64::INFINITY,
                ..d()
            },
        ),
        (
            "suspend_after_failures",
            HostRules {
                suspend_after_failures: 1,
                ..d()
            },
        ),
        (
            "max_pending_outputs",
            HostRules {
                max_pending_outputs: 0,
                ..d()
            },
        ),
        (
            "dedupe_window",
            HostRules {
                dedupe_window: 0,
                ..d()
            },
        ),
        (
            "max_event_id_bytes",
            HostRules {
                max_event_id_bytes: 0,
                ..d()
            },
        ),
        (
            "max_feature_sets",
            HostRules {
                max_feature_sets: 0,
                ..d()
            },
        ),
        (
            "max_injections_per_hook",
            HostRules {
                max_injections_per_hook: 0,
                ..d()
            },
        ),
        ("channels.max_channels", ch(|c| c.max_channels = 0)),
        ("channels.max_per_message", ch(|c| c.max_per_message = 0)),
        (
            "channels.max_incoming_per_batch",
            ch(|c| c.max_incoming_per_batch = 0),
        ),
        (
            "channels.max_descriptor_bytes",
            ch(|c| c.max_descriptor_bytes = 0),
        ),
        (
            "enabled",
            HostRules {
                enabled: Some(vec!["a b".into()]),
                ..d()
            },
        ),
        (
            "disabled",
            HostRules {
                disabled: vec!["memory..x".into()],
                ..d()
            },
        ),
    ]
}

/// `HostConfig::defects` was checked only by `HostSession::connect`: the sans-I/O
/// `HostState::new`, given the same values as `HostRules`, took zero timeouts (every
/// `initialize` failed at once), a zero event bound (quietly read as 1), a NaN fetch rate
/// and feature-set names that select nothing. Each is refused there too, naming the field.
#[test]
fn host_state_new_refuses_rules_that_cannot_work_naming_each_field() {
    let now = Instant::now();
    for (field, rules) in broken_rules() {
        let expected = rules.defects();
        match HostState::new(rules, now, SystemTime::UNIX_EPOCH) {
            Ok(_) => panic!("{field}: HostState::new accepted a value that cannot work"),
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("HostRules.{field} ")),
                    "{field}: {text}"
                );
                assert_eq!(expected.len(), 1, "{field}: {expected:?}");
            }
        }
    }
    let all = HostRules {
        hook_timeout: Duration::ZERO,
        dedupe_window: 0,
        ..HostRules::new(["pushEvents"])
    };
    assert_eq!(all.defects().len(), 2, "{:?}", all.defects());
    assert!(HostRules::new(["pushEvents"]).defects().is_empty());
    assert!(HostState::new(HostRules::new(["pushEvents"]), now, SystemTime::UNIX_EPOCH).is_ok());
}

/// Zero in a per-message or per-connection limit let nothing through, and nothing said so:
/// `max_channels: 0` rejected every registration `channel_limit` (the server was granted
/// `channels` and told it had hit a limit), `max_injections_per_hook: 0` failed every hook
/// answer that injected, `max_feature_sets: 0` refused every MCPL server at connect,
/// `dedupe_window: 0` was quietly read as 1. Each is refused at connect, naming the
/// `HostConfig` field (the one rule `HostState::new` applies, under the config's names).
#[tokio::test]
async fn zero_in_a_host_config_limit_is_refused_at_connect_naming_the_field() {
    let d = HostConfig::default;
    let cases: Vec<(&str, HostConfig)> = vec![
        (
            "dedupe_window",
            HostConfig {
                dedupe_window: 0,
                ..d()
            },
        ),
        (
            "max_event_id_bytes",
            HostConfig {
                max_event_id_bytes: 0,
                ..d()
            },
        ),
        (
            "max_feature_sets",
            HostConfig {
                max_feature_sets: 0,
                ..d()
            },
        ),
        (
            "max_injections_per_hook",
            HostConfig {
                max_injections_per_hook: 0,
                ..d()
            },
        ),
        (
            "max_channels",
            HostConfig {
                max_channels: 0,
                ..d()
            },
        ),
        (
            "max_channels_per_message",
            HostConfig {
                max_channels_per_message: 0,
                ..d()
            },
        ),
        (
            "max_incoming_per_batch",
            HostConfig {
                max_incoming_per_batch: 0,
                ..d()
            },
        ),
        (
            "max_descriptor_bytes",
            HostConfig {
                max_descriptor_bytes: 0,
                ..d()
            },
        ),
    ];
    for (field, config) in cases {
        assert_eq!(config.defects().len(), 1, "{field}: {:?}", config.defects());
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        match HostSession::connect(host_side, config).await {
            Err(e @ HostError::InvalidConfig(_)) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("HostConfig.{field} ")),
                    "{field}: {text}"
                );
                assert!(text.contains("at least 1"), "{field}: {text}");
                assert!(!text.contains("HostRules"), "{field}: {text}");
            }
            Err(e) => panic!("{field}: {e}"),
            Ok(_) => panic!("{field}: connected with a limit that lets nothing through"),
        }
    }
}

/// `connect_peer` judges the peer it is given, whose configuration is the one in force, not
/// `config.peer`: a peer built with a zero request timeout is refused under a default
/// `HostConfig` as `connect` refuses the same setting in `config.peer`.
#[tokio::test]
async fn connect_peer_judges_the_peer_in_force_not_config_peer() {
    let (host_side, server_side) = mcpl::transport::memory::pair();
    tokio::spawn(mcpl::reference::serve(server_side));
    let zero = mcpl::peer::PeerConfig {
        request_timeout: Some(std::time::Duration::ZERO),
        ..mcpl::peer::PeerConfig::default()
    };
    let (peer, incoming) = mcpl::peer::Peer::new(host_side, zero);
    match HostSession::connect_peer(peer, incoming, HostConfig::default()).await {
        Err(e @ HostError::InvalidConfig(_)) => {
            let text = e.to_string();
            assert!(text.contains("HostConfig.peer.request_timeout"), "{text}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("connected over a peer whose requests time out at once"),
    }
}
