//! Mistakes a new server author makes that `ServerBuilder::build` (or `Server::add_tool`)
//! let through, each found by writing a first server against the README (issue #21's rule:
//! a user's mistake is reported, not absorbed). `server_builder.rs` holds the earlier ones.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::hooks::BeforeInferenceResult;
use mcpl::server::{BuildError, Server, ServerBuilder, ToolChangeError, ToolSpec};
use serde_json::{json, Value};

fn build_err(b: ServerBuilder) -> BuildError {
    match b.build() {
        Ok(_) => panic!("build() accepted the mistake"),
        Err(e) => e,
    }
}

fn tool(name: &str, schema: Value) -> ToolSpec {
    ToolSpec::new(name, "A tool", schema, |_s, _p| async {
        Ok(ToolsCallResult::text("ok"))
    })
}

fn with_tool(name: &str, schema: Value) -> ServerBuilder {
    Server::builder("tools", "1.0.0").tool(name, "A tool", schema, |_s, _p| async {
        Ok(ToolsCallResult::text("ok"))
    })
}

/// MCP's `Tool.inputSchema` is an object schema (`"type": "object"`, schema.ts); a typed
/// tool whose argument type is not an object was refused, but a hand-written schema that is
/// not one (`{}`, `{"type": "string"}`, `null`) went out in `tools/list` as it was, for a host
/// to refuse the whole list or the tool. And a tool with an empty name could never be
/// called by name. Each is refused at build time, naming the tool and what to write.
#[test]
fn a_hand_written_tool_schema_that_is_not_an_object_schema_is_refused() {
    for schema in [
        json!({}),
        json!({"type": "string"}),
        Value::Null,
        json!("object"),
    ] {
        match build_err(with_tool("remind", schema.clone())) {
            BuildError::ToolSchema { name, reason } => {
                assert_eq!(name, "remind");
                assert!(
                    reason.contains("\"type\": \"object\""),
                    "{schema}: {reason}"
                );
            }
            other => panic!("{schema}: {other:?}"),
        }
    }
    assert!(with_tool("remind", json!({"type": "object"}))
        .build()
        .is_ok());
}

#[test]
fn a_tool_with_an_empty_name_is_refused() {
    match build_err(with_tool("", json!({"type": "object"}))) {
        BuildError::ToolSchema { name, reason } => {
            assert_eq!(name, "");
            assert!(reason.contains("empty name"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The same rule for a tool added to a live server.
#[test]
fn add_tool_refuses_the_same_tools() {
    let server = with_tool("first", json!({"type": "object"}))
        .build()
        .expect("builds");
    for (name, schema) in [
        ("second", json!({"type": "array"})),
        ("", json!({"type": "object"})),
    ] {
        match server.add_tool(tool(name, schema.clone())) {
            Err(ToolChangeError::Schema { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name:?} {schema}: {other:?}"),
        }
    }
    assert_eq!(server.tools().len(), 1);
}

/// `on_before_inference("reminders.push", …)` where that set's `uses` names no
/// `contextHooks.beforeInference` path (it pushes): every injection the hook makes under it
/// exercises a capability the set does not declare, so a host rejects it (§6.4 rule 2), and
/// §6.4 asks implementations to warn at declaration time. It built, and the hook's work was
/// dropped at run time on every turn. Refused, naming the set and the paths to add.
#[test]
fn a_hook_bound_to_a_set_that_declares_no_hook_path_is_refused() {
    let e = build_err(
        Server::builder("reminders", "1.0.0")
            .feature_set(
                "reminders.push",
                "Fired reminders",
                &[Capability::PushEvents],
            )
            .on_before_inference("reminders.push", |_g, _p| async {
                Ok(BeforeInferenceResult::default())
            }),
    );
    match e {
        BuildError::InvalidFeatureSet { name, reason } => {
            assert_eq!(name, "reminders.push");
            assert!(reason.contains("on_before_inference"), "{reason}");
            assert!(reason.contains("contextHooks.beforeInference"), "{reason}");
            assert!(reason.contains("§6.4"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Observing only is a use of its own (§10.1): such a hook builds.
    for uses in [Capability::Observe, Capability::InjectAfterUser] {
        Server::builder("reminders", "1.0.0")
            .feature_set("reminders.context", "Context", &[uses])
            .on_before_inference("reminders.context", |_g, _p| async {
                Ok(BeforeInferenceResult::default())
            })
            .build()
            .unwrap_or_else(|e| panic!("{uses}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------
// The host author's mistakes
// ---------------------------------------------------------------------------------------

/// A `HostConfig::policy` entry that names no path of the vocabulary: a bare parent
/// (`channels`), a wildcard with too few segments (`contextHooks.*`: §5.4's `*` matches one
/// whole segment and segment counts must be equal), or a typo (`pushEvent`). It was taken
/// and granted nothing, with no word: the host author saw a server that never pushed.
/// Refused as the malformed patterns are (`HostError::Policy`), saying what to write.
#[tokio::test]
async fn a_host_policy_entry_that_names_no_path_is_refused_with_what_to_write() {
    use mcpl::host::{HostConfig, HostError, HostSession};
    for (entry, hint) in [
        ("channels", "`channels.*`"),
        ("contextHooks.*", "`contextHooks.*.*.*`"),
        ("contextHooks", "`contextHooks.*.*`"),
        ("pushEvent", "`pushEvents`"),
    ] {
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        let config = HostConfig {
            policy: vec!["tools".into(), entry.into()],
            ..HostConfig::default()
        };
        match HostSession::connect(host_side, config).await {
            Err(HostError::Policy(e)) => {
                let text = e.to_string();
                assert_eq!(e.code(), "pattern_no_path", "{entry}: {text}");
                assert!(text.contains(&format!("{entry:?}")), "{entry}: {text}");
                assert!(text.contains(hint), "{entry}: {text}");
            }
            Err(e) => panic!("{entry}: {e}"),
            Ok(_) => panic!("{entry}: connected with a policy entry that grants nothing"),
        }
    }
}

/// The same entry given later, to `HostSession::set_policy`, is refused before anything is
/// sent, and the grant in force stands.
#[tokio::test]
async fn set_policy_refuses_an_entry_that_names_no_path() {
    use mcpl::host::{HostConfig, HostError, HostSession};
    let (host_side, server_side) = mcpl::transport::memory::pair();
    tokio::spawn(mcpl::reference::serve(server_side));
    let config = HostConfig {
        policy: vec!["pushEvents".into()],
        ..HostConfig::default()
    };
    let (session, _streams) = HostSession::connect(host_side, config)
        .await
        .expect("connects");
    let before = session.grant();
    match session.set_policy(vec!["channel.*".into()]).await {
        Err(HostError::Policy(e)) => assert_eq!(e.code(), "pattern_no_path", "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(session.grant(), before);
}

/// A custom method named `rpc.…` (JSON-RPC 2.0 §4 reserves the prefix for the protocol's
/// own methods) or with an empty name: built, where a protocol method's name is refused.
#[test]
fn a_custom_method_with_a_json_rpc_reserved_or_empty_name_is_refused() {
    for name in ["rpc.discover", ""] {
        let b = Server::builder("custom", "1.0.0").method(name, |_s, _p| async { Ok(json!({})) });
        match build_err(b) {
            BuildError::ReservedMethod(n) => assert_eq!(n, name),
            other => panic!("{name:?}: {other:?}"),
        }
    }
    let b =
        Server::builder("custom", "1.0.0").method("acme/rpc.x", |_s, _p| async { Ok(json!({})) });
    assert!(b.build().is_ok());
}

/// A handler for a host → server method whose capability the server never advertises: a
/// conforming host grants only what is advertised (§5.4) and the session answers the method `-32002`
/// without calling the handler, so it could never run (`on_channels_open` on a server with
/// no `channels.lifecycle`, `on_turn_end` with no `inferenceLifecycle` …). It built; it is
/// refused, naming the registration, the method and the path to advertise.
#[test]
fn a_handler_for_a_method_whose_capability_is_never_advertised_is_refused() {
    use mcpl::jsonrpc::ErrorObject;
    use mcpl::protocol::channels::{ListResult, OpenResult, PublishResult};
    let no = || ErrorObject::new(-32000, "no");
    let cases: Vec<(ServerBuilder, &str, &str, &str)> = vec![
        (
            Server::builder("s", "1")
                .on_channels_open(move |_s, _p| async move { Err::<OpenResult, _>(no()) }),
            "on_channels_open",
            "channels/open",
            "channels.lifecycle",
        ),
        (
            Server::builder("s", "1")
                .on_channels_publish(move |_s, _p| async move { Err::<PublishResult, _>(no()) }),
            "on_channels_publish",
            "channels/publish",
            "channels.publish",
        ),
        (
            Server::builder("s", "1")
                .on_channels_list(move |_s| async move { Err::<ListResult, _>(no()) }),
            "on_channels_list",
            "channels/list",
            "channels.register",
        ),
        (
            Server::builder("s", "1").on_channels_typing(move |_s, _p| async move { Err(no()) }),
            "on_channels_typing",
            "channels/typing",
            "channels.typing",
        ),
        (
            Server::builder("s", "1").on_rollback(move |_s, _p| async move { Err(no()) }),
            "on_rollback",
            "state/rollback",
            "tools",
        ),
        (
            Server::builder("s", "1").on_turn_end(|_t| {}),
            "on_turn_end",
            "inference/lifecycle",
            "inferenceLifecycle",
        ),
        (
            Server::builder("s", "1").on_outgoing_complete(|_c| {}),
            "on_outgoing_complete",
            "channels/outgoing/complete",
            "channels.streaming",
        ),
    ];
    for (b, registration, method, path) in cases {
        match build_err(b) {
            BuildError::NotAdvertised {
                registration: r,
                method: m,
                needs,
            } => {
                assert_eq!((r, m), (registration, method));
                assert_eq!(needs, path);
            }
            other => panic!("{registration}: {other:?}"),
        }
    }
    // Advertised (by a feature set, by `advertise`, or `tools` by a registered tool): built.
    Server::builder("s", "1")
        .feature_set("turns", "Turns", &[Capability::InferenceLifecycle])
        .advertise(&[Capability::ChannelsLifecycle])
        .on_turn_end(|_t| {})
        .on_channels_open(move |_s, _p| async move { Err::<OpenResult, _>(no()) })
        .build()
        .expect("advertised");
    with_tool("t", json!({"type": "object"}))
        .on_rollback(move |_s, _p| async move { Err(no()) })
        .build()
        .expect("tools registered");
}

/// `mcp_capability("experimental", {"acme.trace": {}})`: the builder's `initialize` wrote
/// `experimental` as `{"mcpl": manifest}` over it, so the author's other experimental
/// capabilities were dropped without a word (an MCP fallback's are kept, §3.1). They are
/// kept now, beside `mcpl`, over a real connection; an `experimental` that is not an object,
/// or that carries `mcpl` itself (the session writes that one), is refused at build time.
#[tokio::test]
async fn experimental_capabilities_given_to_the_builder_are_sent_beside_mcpl() {
    use mcpl::peer::{Peer, PeerConfig};
    let server = Server::builder("s", "1")
        .feature_set("p", "Pushes", &[Capability::PushEvents])
        .mcp_capability("experimental", json!({"acme.trace": {"level": 2}}))
        .build()
        .expect("builds");
    let (host_t, server_t) = mcpl::transport::memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let _session = server.start(server_t);
    let init = peer
        .request_raw(
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                        "clientInfo": {"name": "h", "version": "0"}})),
        )
        .await
        .expect("initialize answered");
    let experimental = &init["capabilities"]["experimental"];
    assert_eq!(experimental["acme.trace"], json!({"level": 2}), "{init}");
    assert_eq!(experimental["mcpl"]["version"], "0.5", "{init}");

    for bad in [json!(true), json!({"mcpl": {"version": "0.5"}})] {
        let b = Server::builder("s", "1").mcp_capability("experimental", bad.clone());
        match build_err(b) {
            BuildError::Manifest(m) => assert!(m.contains("experimental"), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

/// A feature set named `memory.*` (or `memory..recall`, `.memory`): §6.3 makes `*` select
/// sets in `enabled`/`disabled`, so a host's `memory.*` there is a pattern, never this name.
/// A live manifest edit refuses such a name (`ManifestEditError::InvalidName`); the builder
/// took it. It is refused at build time by the same rule (`manifest::edit::is_feature_set_name`).
#[test]
fn a_feature_set_name_the_manifest_edit_refuses_is_refused_by_the_builder_too() {
    for name in ["memory.*", "memory..recall", ".memory", "a b", ""] {
        let b = Server::builder("s", "1").feature_set(name, "Pushes", &[Capability::PushEvents]);
        match build_err(b) {
            BuildError::InvalidFeatureSet { name: n, reason } => {
                assert_eq!(n, name);
                assert!(reason.contains("§6.3"), "{name:?}: {reason}");
            }
            other => panic!("{name:?}: {other:?}"),
        }
    }
}

/// `HostConfig` values that cannot work were taken and quietly changed or left to fail later:
/// `event_capacity: 0` and `manifest_fetch_burst: 0` became 1, `suspend_after_failures` 0 or 1
/// became 2 (§17.5: never suspend on a single failure), a zero timeout failed every
/// `initialize`, policy exchange, hook or fetch, a `manifest_fetch_per_sec` that is NaN,
/// negative or infinite was read as 0 and stopped every fetch after the burst (§17.8 wants a
/// bound; an infinite rate asked for the opposite), and `max_event_bytes: 0` held one event at a time. Each is refused at connect,
/// naming the field and what to write; several at once are all named.
#[tokio::test]
async fn host_config_values_that_cannot_work_are_refused_at_connect_naming_each_field() {
    use mcpl::host::{HostConfig, HostError, HostSession};
    use std::time::Duration;
    let zero = Duration::ZERO;
    let d = HostConfig::default;
    let cases: Vec<(&str, HostConfig)> = vec![
        (
            "event_capacity",
            HostConfig {
                event_capacity: 0,
                ..d()
            },
        ),
        (
            "max_event_bytes",
            HostConfig {
                max_event_bytes: 0,
                ..d()
            },
        ),
        (
            "hook_timeout",
            HostConfig {
                hook_timeout: zero,
                ..d()
            },
        ),
        (
            "policy_timeout",
            HostConfig {
                policy_timeout: zero,
                ..d()
            },
        ),
        (
            "initialize_timeout",
            HostConfig {
                initialize_timeout: zero,
                ..d()
            },
        ),
        (
            "manifest_timeout",
            HostConfig {
                manifest_timeout: zero,
                ..d()
            },
        ),
        (
            "suspend_after_failures",
            HostConfig {
                suspend_after_failures: 0,
                ..d()
            },
        ),
        (
            "suspend_after_failures",
            HostConfig {
                suspend_after_failures: 1,
                ..d()
            },
        ),
        (
            "manifest_fetch_burst",
            HostConfig {
                manifest_fetch_burst: 0,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostConfig {
                manifest_fetch_per_sec: f64::NAN,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostConfig {
                manifest_fetch_per_sec: -1.0,
                ..d()
            },
        ),
        (
            "manifest_fetch_per_sec",
            HostConfig {
                manifest_fetch_per_sec: f64::INFINITY,
                ..d()
            },
        ),
    ];
    for (field, config) in cases {
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        match HostSession::connect(host_side, config).await {
            Err(e @ HostError::InvalidConfig(_)) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("HostConfig.{field}")),
                    "{field}: {text}"
                );
                assert!(
                    text.contains("at least") || text.contains("above 0"),
                    "{field}: {text}"
                );
            }
            Err(e) => panic!("{field}: {e}"),
            Ok(_) => panic!("{field}: connected with a value that cannot work"),
        }
    }
    let all = HostConfig {
        event_capacity: 0,
        hook_timeout: zero,
        suspend_after_failures: 1,
        manifest_fetch_per_sec: f64::NAN,
        ..d()
    };
    assert!(all.defects().len() == 4, "{:?}", all.defects());
    let (host_side, _server_side) = mcpl::transport::memory::pair();
    match HostSession::connect(host_side, all).await {
        Err(e) => {
            let text = e.to_string();
            for field in [
                "event_capacity",
                "hook_timeout",
                "suspend_after_failures",
                "manifest_fetch_per_sec",
            ] {
                assert!(text.contains(field), "{field}: {text}");
            }
        }
        Ok(_) => panic!("connected"),
    }
    assert!(HostConfig::default().defects().is_empty());
}

/// A `HostConfig::enabled` or `disabled` entry that is neither a feature-set name nor a
/// pattern (§6.3: dot-separated segments, `*` a whole segment) selected nothing, silently:
/// a host that enabled `"memory retrieval"` got a server with no sets on. Refused at connect,
/// quoting the entry and the rule; names and patterns that are well-formed still connect.
#[tokio::test]
async fn a_feature_set_selection_entry_that_is_not_a_name_or_pattern_is_refused_at_connect() {
    use mcpl::host::{HostConfig, HostError, HostSession};
    for (field, entry) in [
        ("enabled", "a b"),
        ("enabled", ""),
        ("enabled", "memory..retrieval"),
        ("enabled", "memory.*x"),
        ("disabled", "memory."),
        ("disabled", "mem ory.*"),
    ] {
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        let list = vec![entry.to_owned()];
        let config = if field == "enabled" {
            HostConfig {
                enabled: Some(list),
                ..HostConfig::default()
            }
        } else {
            HostConfig {
                disabled: list,
                ..HostConfig::default()
            }
        };
        match HostSession::connect(host_side, config).await {
            Err(e @ HostError::InvalidConfig(_)) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("HostConfig.{field}")),
                    "{entry:?}: {text}"
                );
                assert!(text.contains(&format!("{entry:?}")), "{entry:?}: {text}");
                assert!(text.contains("§6.3"), "{entry:?}: {text}");
            }
            Err(e) => panic!("{entry:?}: {e}"),
            Ok(_) => panic!("{entry:?}: connected with an entry that selects nothing"),
        }
    }
    for entry in [
        "memory.retrieval",
        "memory.*",
        "*",
        "*.retrieval",
        "a-b_c:d",
    ] {
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        let config = HostConfig {
            enabled: Some(vec![entry.to_owned()]),
            disabled: vec![entry.to_owned()],
            ..HostConfig::default()
        };
        if let Err(e) = HostSession::connect(host_side, config).await {
            panic!("{entry:?}: {e}");
        }
    }
}

/// The rest of a `HostConfig` is judged by the same one rule: the `PeerConfig` inside it
/// (`HostConfig::peer`, by `PeerConfig::defects`), `diagnostics_capacity` and the form of
/// `channel_patterns`. Before, a zero `request_timeout` failed every request at once, a zero
/// `max_message_size` or `max_parsed_cost` refused every message, zero queue capacities and
/// bounds were raised to 1 unseen, `diagnostics_capacity` 0 or 1 was raised to 2 unseen, and
/// a channel pattern with `*` anywhere but at its end (`discord:*/general`) or an empty one
/// matched only itself, refusing every registration it was meant to admit.
#[tokio::test]
async fn host_config_peer_values_capacities_and_channel_pattern_forms_are_refused_at_connect() {
    use mcpl::host::{HostConfig, HostError, HostSession};
    use mcpl::peer::PeerConfig;
    use std::time::Duration;
    let d = HostConfig::default;
    let p = PeerConfig::default;
    let zero = Some(Duration::ZERO);
    let peer = |peer: PeerConfig| HostConfig { peer, ..d() };
    let patterns = |p: &[&str]| HostConfig {
        channel_patterns: Some(p.iter().map(|s| s.to_string()).collect()),
        ..d()
    };
    let cases: Vec<(&str, HostConfig)> = vec![
        (
            "peer.request_timeout",
            peer(PeerConfig {
                request_timeout: zero,
                ..p()
            }),
        ),
        (
            "peer.write_timeout",
            peer(PeerConfig {
                write_timeout: zero,
                ..p()
            }),
        ),
        (
            "peer.idle_timeout",
            peer(PeerConfig {
                idle_timeout: zero,
                ..p()
            }),
        ),
        (
            "peer.max_message_size",
            peer(PeerConfig {
                max_message_size: 0,
                ..p()
            }),
        ),
        (
            "peer.incoming_capacity",
            peer(PeerConfig {
                incoming_capacity: 0,
                ..p()
            }),
        ),
        (
            "peer.outgoing_capacity",
            peer(PeerConfig {
                outgoing_capacity: 0,
                ..p()
            }),
        ),
        (
            "peer.max_pending_requests",
            peer(PeerConfig {
                max_pending_requests: 0,
                ..p()
            }),
        ),
        (
            "peer.diagnostics_capacity",
            peer(PeerConfig {
                diagnostics_capacity: 0,
                ..p()
            }),
        ),
        (
            "peer.remembered_timeouts",
            peer(PeerConfig {
                remembered_timeouts: 0,
                ..p()
            }),
        ),
        (
            "peer.max_parsed_cost",
            peer(PeerConfig {
                max_parsed_cost: 0,
                ..p()
            }),
        ),
        (
            "peer.max_in_flight_requests",
            peer(PeerConfig {
                max_in_flight_requests: 0,
                ..p()
            }),
        ),
        (
            "diagnostics_capacity",
            HostConfig {
                diagnostics_capacity: 0,
                ..d()
            },
        ),
        (
            "diagnostics_capacity",
            HostConfig {
                diagnostics_capacity: 1,
                ..d()
            },
        ),
        ("channel_patterns", patterns(&["discord:*/general"])),
        ("channel_patterns", patterns(&["ui", ""])),
        ("channel_patterns", patterns(&["a**"])),
    ];
    for (field, config) in cases {
        let named = format!("HostConfig.{field}");
        let defects = config.defects();
        assert!(
            defects.len() == 1 && defects[0].contains(&named),
            "{field}: {defects:?}"
        );
        let (host_side, server_side) = mcpl::transport::memory::pair();
        tokio::spawn(mcpl::reference::serve(server_side));
        match HostSession::connect(host_side, config).await {
            Err(e @ HostError::InvalidConfig(_)) => {
                let text = e.to_string();
                assert!(text.contains(&named), "{field}: {text}");
            }
            Err(e) => panic!("{field}: {e}"),
            Ok(_) => panic!("{field}: connected with a value that cannot work"),
        }
    }
    // The same rule under the peer's own names, and the core's for the patterns.
    let bad = PeerConfig {
        max_message_size: 0,
        request_timeout: zero,
        ..p()
    };
    let defects = bad.defects();
    assert_eq!(defects.len(), 2, "{defects:?}");
    assert!(
        defects.iter().all(|d| d.starts_with("PeerConfig.")),
        "{defects:?}"
    );
    let mut rules = mcpl::session::HostRules::new(["channels.register"]);
    rules.channels.patterns = Some(vec!["x*y".into()]);
    assert!(
        rules.defects()[0].contains("HostRules.channels.patterns"),
        "{:?}",
        rules.defects()
    );
    // Values that work, at their edges, still connect.
    let fine = HostConfig {
        diagnostics_capacity: 2,
        channel_patterns: Some(vec!["*".into(), "discord:*".into(), "ui".into()]),
        peer: PeerConfig {
            request_timeout: None,
            max_batch_entries: 0,
            max_in_flight_bytes: 0,
            eof_drain: zero,
            ..p()
        },
        ..d()
    };
    assert!(fine.defects().is_empty(), "{:?}", fine.defects());
    let (host_side, server_side) = mcpl::transport::memory::pair();
    tokio::spawn(mcpl::reference::serve(server_side));
    assert!(HostSession::connect(host_side, fine).await.is_ok());
}

/// `ServerBuilder::peer_config` took any `PeerConfig`: a zero `max_message_size` refused
/// every message and a `request_timeout` of `Some(0)` failed every request at once, found
/// only when the server ran. `build` judges it by the peer's own rule (`PeerConfig::defects`,
/// the one a host applies at connect), naming each field; values that work still build.
#[test]
fn a_peer_config_that_cannot_work_is_refused_by_build_naming_each_field() {
    use mcpl::peer::PeerConfig;
    use std::time::Duration;
    let p = PeerConfig::default;
    let cases: Vec<(&str, PeerConfig)> = vec![
        (
            "PeerConfig.max_message_size",
            PeerConfig {
                max_message_size: 0,
                ..p()
            },
        ),
        (
            "PeerConfig.request_timeout",
            PeerConfig {
                request_timeout: Some(Duration::from_micros(500)),
                ..p()
            },
        ),
        (
            "PeerConfig.idle_timeout",
            PeerConfig {
                idle_timeout: Some(Duration::ZERO),
                ..p()
            },
        ),
        (
            "PeerConfig.incoming_capacity",
            PeerConfig {
                incoming_capacity: 0,
                ..p()
            },
        ),
    ];
    for (field, config) in cases {
        let e = build_err(Server::builder("s", "1.0.0").peer_config(config.clone()));
        let BuildError::InvalidConfig(defects) = &e else {
            panic!("{field}: expected InvalidConfig, got {e:?}");
        };
        assert_eq!(defects, &config.defects(), "{field}: the peer's own rule");
        assert!(
            defects.len() == 1 && defects[0].starts_with(field),
            "{field}: {defects:?}"
        );
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    // Every defect is listed, not only the first.
    let two = PeerConfig {
        max_message_size: 0,
        request_timeout: Some(Duration::ZERO),
        ..p()
    };
    match Server::builder("s", "1.0.0").peer_config(two).build() {
        Err(BuildError::InvalidConfig(d)) => assert_eq!(d.len(), 2, "{d:?}"),
        other => panic!("expected InvalidConfig, got {:?}", other.err()),
    }
    // Edge values that work still build: 1 byte, 1 ms, `None` for no limit.
    let edge = PeerConfig {
        max_message_size: 1,
        request_timeout: Some(Duration::from_millis(1)),
        idle_timeout: None,
        ..p()
    };
    assert!(Server::builder("s", "1.0.0")
        .peer_config(edge)
        .build()
        .is_ok());
}

/// `ServerBuilder::lifecycle_config` took any `LifecycleConfig`: a `safety_timeout` under
/// 1 ms ended every turn as timed out at once, and `max_open_turns` or `max_id_bytes` 0
/// were raised to 1 unseen. `build` refuses them by `LifecycleConfig::defects`, naming each
/// field, beside the peer config's; `remembered_terminals` 0 (a choice) still builds.
#[test]
fn a_lifecycle_config_that_cannot_work_is_refused_by_build_naming_each_field() {
    use mcpl::lifecycle::LifecycleConfig;
    use mcpl::peer::PeerConfig;
    use std::time::Duration;
    let l = LifecycleConfig::default;
    let cases: Vec<(&str, LifecycleConfig)> = vec![
        (
            "LifecycleConfig.safety_timeout",
            LifecycleConfig {
                safety_timeout: Duration::from_micros(999),
                ..l()
            },
        ),
        (
            "LifecycleConfig.max_open_turns",
            LifecycleConfig {
                max_open_turns: 0,
                ..l()
            },
        ),
        (
            "LifecycleConfig.max_id_bytes",
            LifecycleConfig {
                max_id_bytes: 0,
                ..l()
            },
        ),
    ];
    for (field, config) in cases {
        let e = build_err(Server::builder("s", "1.0.0").lifecycle_config(config));
        let BuildError::InvalidConfig(defects) = &e else {
            panic!("{field}: expected InvalidConfig, got {e:?}");
        };
        assert_eq!(defects, &config.defects(), "{field}");
        assert!(
            defects.len() == 1 && defects[0].starts_with(field),
            "{field}: {defects:?}"
        );
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    // Both configs' defects are listed together.
    let both = Server::builder("s", "1.0.0")
        .peer_config(PeerConfig {
            max_message_size: 0,
            ..PeerConfig::default()
        })
        .lifecycle_config(LifecycleConfig {
            safety_timeout: Duration::ZERO,
            ..l()
        });
    match build_err(both) {
        BuildError::InvalidConfig(d) => assert_eq!(d.len(), 2, "{d:?}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let edge = LifecycleConfig {
        safety_timeout: Duration::from_millis(1),
        max_open_turns: 1,
        max_id_bytes: 1,
        remembered_terminals: 0,
    };
    assert!(edge.defects().is_empty());
    assert!(Server::builder("s", "1.0.0")
        .lifecycle_config(edge)
        .build()
        .is_ok());
}
