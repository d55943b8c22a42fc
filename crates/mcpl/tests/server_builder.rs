//! `ServerBuilder::build` refuses the mistakes that used to fail silently (issue #21): a hook
//! or tag ontology bound to a feature set the manifest does not declare (§6.1, §6.4: it would
//! never run), and a second registration of a slot (it would replace the first).
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::{ToolContent, ToolsCallResult};
use mcpl::protocol::hooks::BeforeInferenceResult;
use mcpl::server::{BuildError, Server, ServerBuilder};
use mcpl::session::{ServerRules, ServerRulesError};
use serde_json::{json, Map};

fn reminders() -> ServerBuilder {
    Server::builder("reminders", "1.0.0")
        .feature_set(
            "reminders.push",
            "Fired reminders",
            &[Capability::PushEvents],
        )
        .feature_set(
            "reminders.context",
            "Pending reminders before the user message",
            &[Capability::InjectBeforeUser],
        )
        .feature_set("alpha", "Unrelated", &[Capability::InferenceLifecycle])
}

fn remind(b: ServerBuilder, name: &str) -> ServerBuilder {
    b.tool(
        name,
        "Set a reminder",
        json!({"type": "object"}),
        |_s, _p| async {
            Ok(ToolsCallResult {
                content: vec![ToolContent::text("ok")],
                is_error: None,
                state: None,
                extra: Map::new(),
            })
        },
    )
}

fn build_err(b: ServerBuilder) -> BuildError {
    match b.build() {
        Ok(_) => panic!("build() accepted the mistake"),
        Err(e) => e,
    }
}

#[test]
fn hook_bound_to_an_undeclared_set_is_refused_closest_first() {
    let e = build_err(
        reminders().on_before_inference("reminders.ctx", |_g, _p| async {
            Ok(BeforeInferenceResult::default())
        }),
    );
    assert_eq!(
        e,
        BuildError::UndeclaredFeatureSet {
            registration: "on_before_inference",
            name: "reminders.ctx".into(),
            declared: vec![
                "reminders.context".into(),
                "reminders.push".into(),
                "alpha".into()
            ],
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("\"reminders.ctx\""), "{msg}");
    assert!(msg.contains("did you mean \"reminders.context\""), "{msg}");
}

#[test]
fn hook_with_no_declared_set_at_all_says_so() {
    let e = build_err(
        Server::builder("s", "1")
            .on_before_inference("x", |_g, _p| async { Ok(BeforeInferenceResult::default()) }),
    );
    assert!(matches!(&e, BuildError::UndeclaredFeatureSet { declared, .. } if declared.is_empty()));
    assert!(
        e.to_string().contains("declare one with `feature_set`"),
        "{e}"
    );
}

#[test]
fn hook_bound_to_a_declared_set_builds() {
    reminders()
        .on_before_inference("reminders.context", |_g, _p| async {
            Ok(BeforeInferenceResult::default())
        })
        .build()
        .expect("a declared set is fine");
}

#[test]
fn tag_ontology_for_an_undeclared_set_is_refused() {
    let e = build_err(reminders().tag_ontology("reminders.pus", json!({"tags": {}})));
    assert!(
        matches!(&e, BuildError::UndeclaredFeatureSet { registration: "tag_ontology", declared, .. }
            if declared.first().map(String::as_str) == Some("reminders.push")),
        "{e:?}"
    );
}

#[test]
fn second_before_inference_hook_is_refused() {
    let hook = |_g, _p| async { Ok(BeforeInferenceResult::default()) };
    let e = build_err(
        reminders()
            .on_before_inference("reminders.context", hook)
            .on_before_inference("reminders.context", hook),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "on_before_inference".into()
        }
    );
}

#[test]
fn second_tool_with_the_same_name_is_refused() {
    let e = build_err(remind(remind(reminders(), "remind"), "remind"));
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "tool \"remind\"".into()
        }
    );
    // Two different names are two tools.
    remind(remind(reminders(), "remind"), "cancel")
        .build()
        .expect("distinct tools");
}

#[test]
fn second_registration_of_each_single_slot_is_refused() {
    type Twice = fn(ServerBuilder) -> ServerBuilder;
    let cases: Vec<(&str, Twice)> = vec![
        ("on_ready", |b| {
            b.on_ready(|_s| async {}).on_ready(|_s| async {})
        }),
        ("on_rollback", |b| {
            b.on_rollback(|_s, _p| async { Err(mcpl::jsonrpc::ErrorObject::internal("x")) })
                .on_rollback(|_s, _p| async { Err(mcpl::jsonrpc::ErrorObject::internal("x")) })
        }),
        ("on_turn_start", |b| {
            b.on_turn_start(|_| {}).on_turn_start(|_| {})
        }),
        ("on_turn_end", |b| b.on_turn_end(|_| {}).on_turn_end(|_| {})),
        ("on_outgoing_chunk", |b| {
            b.on_outgoing_chunk(|_| {}).on_outgoing_chunk(|_| {})
        }),
        ("on_outgoing_complete", |b| {
            b.on_outgoing_complete(|_| {}).on_outgoing_complete(|_| {})
        }),
        ("on_channels_publish", |b| {
            b.on_channels_publish(|_s, _p| async { Err(mcpl::jsonrpc::ErrorObject::internal("x")) })
                .on_channels_publish(|_s, _p| async {
                    Err(mcpl::jsonrpc::ErrorObject::internal("x"))
                })
        }),
        ("on_channels_list", |b| {
            b.on_channels_list(|_s| async { Err(mcpl::jsonrpc::ErrorObject::internal("x")) })
                .on_channels_list(|_s| async { Err(mcpl::jsonrpc::ErrorObject::internal("x")) })
        }),
        ("method \"x/ping\"", |b| {
            b.method("x/ping", |_s, _p| async { Ok(json!({})) })
                .method("x/ping", |_s, _p| async { Ok(json!({})) })
        }),
        ("feature set \"alpha\"", |b| {
            b.feature_set("alpha", "again", &[Capability::PushEvents])
        }),
    ];
    for (slot, twice) in cases {
        let e = build_err(twice(reminders()));
        assert_eq!(
            e,
            BuildError::DuplicateRegistration { slot: slot.into() },
            "{slot}"
        );
        assert!(e.to_string().contains("registered twice"), "{e}");
    }
}

/// `on::<M>` and the named registration fill one slot: both at once is the same build error
/// as registering either twice (issue #24, item 5).
#[test]
fn the_generic_and_the_named_registration_are_one_slot() {
    use mcpl::protocol::channels::ChannelsTyping;
    let open = |_s, _p| async { Err(mcpl::jsonrpc::ErrorObject::internal("not called")) };
    let e = build_err(
        reminders()
            .on::<mcpl::protocol::channels::ChannelsOpen, _, _>(open)
            .on_channels_open(open),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "on_channels_open".into()
        }
    );
    let e = build_err(
        reminders()
            .on_channels_typing(|_s, _p| async { Ok(()) })
            .on::<ChannelsTyping, _, _>(|_s, _p| async { Ok(Default::default()) }),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "on_channels_typing".into()
        }
    );
}

/// A vendor manifest member or an MCP capability given twice under one name: the second
/// replaced the first silently.
#[test]
fn second_manifest_member_or_mcp_capability_of_a_name_is_refused() {
    let e = build_err(
        reminders()
            .manifest_member("acme", json!({"a": true}))
            .manifest_member("acme", json!({"b": true})),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "manifest_member \"acme\"".into()
        }
    );
    let e = build_err(
        reminders()
            .mcp_capability("resources", json!({}))
            .mcp_capability("resources", json!({"subscribe": true})),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "mcp_capability \"resources\"".into()
        }
    );
}

/// A `manifest_member` is a vendor extension (§17.1: every member is hashed): one named like
/// a member the builder writes itself (`version`, `revision`, `featureSets`, a capability of
/// §5.1, `tools`) was dropped silently (`version`, `featureSets`, an advertised capability)
/// or advertised a capability behind the builder's back; `revision` is derived (§17.1, never
/// hand-maintained). Each is refused, naming the builder call to use instead.
#[test]
fn a_manifest_member_named_like_a_member_the_builder_writes_is_refused() {
    for (name, instead) in [
        ("version", "MCPL"),
        ("revision", "derived"),
        ("featureSets", "feature_set"),
        ("pushEvents", "advertise"),
        ("contextHooks", "advertise"),
        ("tools", "advertise"),
    ] {
        let e = build_err(reminders().manifest_member(name, json!(true)));
        match &e {
            BuildError::Manifest(m) => assert!(
                m.contains(&format!("manifest_member {name:?}")) && m.contains(instead),
                "{name}: {m}"
            ),
            other => panic!("{name}: {other:?}"),
        }
    }
    reminders()
        .manifest_member("acme.extension", json!({"x": 1}))
        .build()
        .expect("a vendor member builds");
}

/// A tag ontology given by `tag_ontology` for a set whose `feature_set_declaration` already
/// carries one: the call replaced the declaration's silently (§16.4: one ontology per set).
#[test]
fn tag_ontology_for_a_set_whose_declaration_carries_one_is_refused() {
    let mut decl = mcpl::policy::FeatureSetDeclaration::new("Alerts", &[Capability::PushEvents]);
    decl.extra
        .insert("tagOntology".into(), json!({"tags": {"acme:a": {}}}));
    let e = build_err(
        Server::builder("s", "1")
            .feature_set_declaration("alerts", decl)
            .tag_ontology("alerts", json!({"tags": {"acme:b": {}}})),
    );
    assert_eq!(
        e,
        BuildError::DuplicateRegistration {
            slot: "tag_ontology for feature set \"alerts\"".into()
        }
    );
}

/// `require` names what the server cannot work without (§6.7); a host grants only what is
/// advertised (§5.4), so a required path the server does not advertise made every policy
/// a refusal, on every connection, with nothing at build time to say why. Refused, naming
/// the path; `tools` counts as advertised when tools are registered or an MCP fallback
/// (which advertises its own) is set.
#[test]
fn require_of_a_capability_the_server_does_not_advertise_is_refused() {
    use mcpl::policy::Fallback;
    let e = build_err(reminders().require(
        &[Capability::PushEvents, Capability::InferenceRequest],
        Fallback::McpOnly,
    ));
    match &e {
        BuildError::Manifest(m) => assert!(
            m.contains("require") && m.contains("inferenceRequest") && !m.contains("pushEvents"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    let e = build_err(reminders().require(&[Capability::Tools], Fallback::Close));
    assert!(
        matches!(&e, BuildError::Manifest(m) if m.contains("tools")),
        "{e:?}"
    );
    remind(reminders(), "remind")
        .require(
            &[Capability::Tools, Capability::PushEvents],
            Fallback::Close,
        )
        .build()
        .expect("registered tools advertise tools");
}

/// A tag ontology the builder is given is the author's (§16.4): one a host reads only in
/// part (not an object; a `coreTags` entry outside §16.2; a tag in the reserved `mcpl:`
/// namespace) was advertised as it was, and hosts dropped the parts with no word to the
/// author. Refused, naming the part.
#[test]
fn a_tag_ontology_a_host_reads_only_in_part_is_refused() {
    for (ontology, code) in [
        (json!("acme"), "ontology_not_object"),
        (json!({"coreTags": ["acme:x"]}), "not_core_tag"),
        (
            json!({"tags": {"mcpl:x": {"desc": "d"}}}),
            "reserved_namespace",
        ),
    ] {
        let e = build_err(reminders().tag_ontology("reminders.push", ontology.clone()));
        match &e {
            BuildError::Manifest(m) => assert!(
                m.contains("tag_ontology for feature set \"reminders.push\"") && m.contains(code),
                "{ontology}: {m}"
            ),
            other => panic!("{ontology}: {other:?}"),
        }
    }
    reminders()
        .tag_ontology(
            "reminders.push",
            json!({"coreTags": ["chat:dm"], "tags": {"acme:x": {"desc": "d", "facet": "sender"}}}),
        )
        .build()
        .expect("a well-formed ontology builds");
}

/// The same for an ontology a `feature_set_declaration` carries itself.
#[test]
fn a_declarations_own_tag_ontology_a_host_reads_only_in_part_is_refused() {
    let mut decl = mcpl::policy::FeatureSetDeclaration::new("Alerts", &[Capability::PushEvents]);
    decl.extra
        .insert("tagOntology".into(), json!({"coreTags": ["chat:shout"]}));
    let e = build_err(Server::builder("s", "1").feature_set_declaration("alerts", decl));
    assert!(
        matches!(&e, BuildError::Manifest(m) if m.contains("\"alerts\"") && m.contains("coreTags")),
        "{e:?}"
    );
}

/// MCP's `serverInfo` (the `initialize` result, §5.1) needs a `name` and a `version`; an empty
/// or whitespace-only one built a server every host shows as nameless or unversioned.
/// Refused, naming which and what was given.
#[test]
fn a_blank_server_name_or_version_is_refused() {
    for (name, version, what, given) in [
        ("", "1.0.0", "server name", ""),
        (" \t", "1.0.0", "server name", " \t"),
        ("notes", "", "server version", ""),
        ("notes", "\n ", "server version", "\n "),
    ] {
        let e = build_err(Server::builder(name, version));
        assert_eq!(
            e,
            BuildError::BlankName {
                what,
                given: given.into()
            },
            "{name:?} {version:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains(what) && msg.contains("serverInfo"), "{msg}");
    }
    Server::builder("notes", "1.0.0")
        .build()
        .expect("a named server builds");
}

/// The sans-I/O `ServerRules::new` holds `server_info` to the builder's rule, with the same
/// message; a `server_info` without a `name` or `version` string is refused too (§5.1).
#[test]
fn server_rules_refuse_a_blank_server_name_or_version_by_the_builders_rule() {
    let manifest = || json!({"version": "0.5"});
    for (name, version, what, given) in [
        ("", "1.0.0", "server name", ""),
        (" \t", "1.0.0", "server name", " \t"),
        ("notes", "", "server version", ""),
        ("notes", "\n ", "server version", "\n "),
    ] {
        let e = ServerRules::new(json!({"name": name, "version": version}), manifest())
            .expect_err("a blank server identity");
        assert_eq!(
            e,
            ServerRulesError::BlankName {
                what,
                given: given.into()
            }
        );
        let built = build_err(Server::builder(name, version));
        assert_eq!(e.to_string(), built.to_string(), "one rule, one message");
    }
    for (info, what) in [
        (json!({"version": "1"}), "name"),
        (json!({"name": "notes", "version": 1}), "version"),
        (json!("notes"), "name"),
    ] {
        let e = ServerRules::new(info.clone(), manifest()).expect_err("no identity");
        assert_eq!(e, ServerRulesError::ServerInfo { what }, "{info}");
        assert!(e.to_string().contains("serverInfo"), "{e}");
    }
    ServerRules::new(json!({"name": "notes", "version": "1.0.0"}), manifest())
        .expect("a named server's rules");
}

/// The other names the builder is given are held to the same rule: a blank `mcp_capability`
/// or `manifest_member` key (a capability or vendor member no host can name), a blank tool
/// name (no `tools/call` can name it; [`BuildError::ToolSchema`] as for an empty one) and a
/// blank custom method name (no host can call it; [`BuildError::ReservedMethod`] as for an
/// empty one).
#[test]
fn the_other_names_the_builder_takes_are_refused_blank() {
    let e = build_err(reminders().mcp_capability(" ", json!({})));
    assert_eq!(
        e,
        BuildError::BlankName {
            what: "mcp_capability key",
            given: " ".into()
        }
    );
    let e = build_err(reminders().manifest_member("", json!({})));
    assert_eq!(
        e,
        BuildError::BlankName {
            what: "manifest_member key",
            given: String::new()
        }
    );
    match build_err(remind(reminders(), "  ")) {
        BuildError::ToolSchema { name, reason } => {
            assert_eq!(name, "  ");
            assert!(reason.contains("blank"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let e = build_err(reminders().method(" \t", |_s, _p| async { Ok(json!({})) }));
    assert_eq!(e, BuildError::ReservedMethod(" \t".into()));
    // A tool added to a live server is held to the tool rule too.
    let server = remind(reminders(), "remind").build().unwrap();
    let blank = mcpl::server::ToolSpec::new("\t", "", json!({"type": "object"}), |_s, _p| async {
        Ok(ToolsCallResult::text("ok"))
    });
    assert!(matches!(
        server.add_tool(blank),
        Err(mcpl::server::ToolChangeError::Schema { .. })
    ));
}

/// An MCP capability is a promise of its methods (MCP `ServerCapabilities`): a host that
/// reads `resources` calls `resources/list` and `resources/read`. Declared with neither a
/// custom handler for them nor an MCP fallback, every such call was `-32601`. The reverse
/// too: a custom handler for such a method without its capability declared never runs (a
/// host calls only what is declared), and one for a method a host never sends a server
/// (`sampling/createMessage` goes the other way) never runs either. Each is refused.
#[test]
fn an_mcp_capability_and_its_methods_go_together() {
    let ok = |_s, _p| async { Ok(json!({})) };
    let e = build_err(reminders().mcp_capability("prompts", json!({})));
    match &e {
        BuildError::Manifest(m) => {
            assert!(
                m.contains("prompts/list") && m.contains("prompts/get"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let e = build_err(
        reminders()
            .mcp_capability("resources", json!({"subscribe": true}))
            .method("resources/list", ok)
            .method("resources/read", ok),
    );
    assert!(e.to_string().contains("resources/subscribe"), "{e}");
    let e = build_err(reminders().method("logging/setLevel", ok));
    assert!(e.to_string().contains("mcp_capability(\"logging\""), "{e}");
    let e = build_err(reminders().method("sampling/createMessage", ok));
    assert!(e.to_string().contains("never sends"), "{e}");
    // Served by custom handlers, or by a fallback: builds.
    reminders()
        .mcp_capability("prompts", json!({}))
        .method("prompts/list", ok)
        .method("prompts/get", ok)
        .build()
        .expect("prompts served by custom methods");
    reminders()
        .mcp_capability("completions", json!({}))
        .mcp_fallback(|_s| -> std::sync::Arc<dyn mcpl::server::McpFallback> { unimplemented!() })
        .build()
        .expect("completions served by the fallback");
}
