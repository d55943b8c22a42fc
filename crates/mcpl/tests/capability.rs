//! Capability vocabulary, `*` patterns, grants and the advertisement walk (§5.1, §5.4, §6.2).

use mcpl::capability::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::str::FromStr;

fn grant(entries: &[&str]) -> Grant {
    Grant::from_patterns(entries.iter().copied()).unwrap()
}

#[test]
fn s6_2_vocabulary_is_seventeen_distinct_round_tripping_paths() {
    assert_eq!(Capability::ALL.len(), 17);
    assert_eq!(CapabilitySet::ALL.len(), 17);
    for (i, c) in Capability::ALL.into_iter().enumerate() {
        assert_eq!(c.index(), i);
        assert_eq!(Capability::from_str(c.as_str()).unwrap(), c);
    }
    assert!(Capability::from_str("contextHooks.beforeInference").is_err());
    assert!(Capability::from_str("channels.observe").is_err());
}

#[test]
fn s5_4_star_matches_one_segment() {
    let g = grant(&["channels.*"]);
    assert!(g.allows(Capability::ChannelsPublish));
    assert!(g.allows(Capability::ChannelsTyping));
    assert!(!g.allows(Capability::PushEvents));
    // channels.publish.x is not in the vocabulary; a pattern of another depth matches nothing.
    let p = Pattern::parse("channels.publish.*").unwrap();
    assert!(p.resolved().is_empty());
}

#[test]
fn s5_4_context_hooks_star_grants_no_depth4_leaf() {
    let g = grant(&["contextHooks.*"]);
    assert!(g.capabilities().is_empty());
    // a depth-3 pattern reaches only the depth-3 observe leaf, never a depth-4 inject leaf
    let g = grant(&["contextHooks.*.*"]);
    assert_eq!(
        g.capabilities(),
        CapabilitySet::EMPTY.with(Capability::Observe)
    );
    let g = grant(&["contextHooks.beforeInference.*"]);
    assert_eq!(
        g.capabilities(),
        CapabilitySet::EMPTY.with(Capability::Observe)
    );
    let g = grant(&["contextHooks.beforeInference.inject.*"]);
    assert_eq!(g.capabilities().len(), 3);
    assert!(!g.allows(Capability::Observe));
}

#[test]
fn s5_4_bare_star_matches_only_depth1() {
    let g = grant(&["*"]);
    let expect: CapabilitySet = [
        Capability::PushEvents,
        Capability::Tools,
        Capability::ModelInfo,
        Capability::InferenceRequest,
        Capability::InferenceLifecycle,
    ]
    .into_iter()
    .collect();
    assert_eq!(g.capabilities(), expect);
}

#[test]
fn s5_4_trailing_star_is_not_subtree() {
    let g = grant(&["inferenceRequest.*"]);
    assert_eq!(
        g.capabilities(),
        CapabilitySet::EMPTY.with(Capability::InferenceRequestStreaming)
    );
    assert!(!g.allows(Capability::InferenceRequest));
}

#[test]
fn s5_4_bare_parent_grants_no_leaves() {
    assert!(grant(&["channels"]).capabilities().is_empty());
    assert!(grant(&["contextHooks.beforeInference"])
        .capabilities()
        .is_empty());
    assert!(grant(&["contextHooks"]).capabilities().is_empty());
    // a parent that is itself a path grants only itself
    let g = grant(&["inferenceRequest"]);
    assert!(g.allows(Capability::InferenceRequest));
    assert!(!g.allows(Capability::InferenceRequestStreaming));
}

/// §5.4: an entry naming no path is either a node above paths (a bare parent, a `*`
/// pattern short of the leaves' depth: it grants none of them) or names nothing at all (a
/// typo, a case variant); `mcpl check-host` warns of the first and fails the second.
#[test]
fn s5_4_an_entry_naming_a_node_is_told_from_a_typo() {
    for node in [
        "channels",
        "contextHooks",
        "contextHooks.*",
        "contextHooks.beforeInference",
        "*.*",
    ] {
        assert!(mcpl::capability::names_a_node(node), "{node}");
    }
    for other in [
        "PushEvents",
        "pushevents",
        "channels.publish",
        "channels.*",
        "tools.call",
        "x",
    ] {
        assert!(!mcpl::capability::names_a_node(other), "{other}");
    }
}

#[test]
fn s5_4_absence_is_denial() {
    let g = Grant::none();
    assert!(Capability::ALL.iter().all(|c| !g.allows(*c)));
    assert_eq!(Grant::default(), Grant::none());
    assert!(Grant::from_patterns([]).unwrap().capabilities().is_empty());
    assert!(!g.satisfies(Requirement::One(Capability::Tools)));
    assert!(g.satisfies(Requirement::None));
}

#[test]
fn s5_4_malformed_patterns_are_refused() {
    for bad in [
        "",
        "a..b",
        ".channels",
        "channels.",
        "chan*",
        "channels.pub*",
    ] {
        assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        assert!(Grant::from_patterns([bad]).is_err());
    }
    // unknown but well-formed entries are allowed and grant nothing
    assert!(grant(&["vendor.thing", "*.*.*.*.*"])
        .capabilities()
        .is_empty());
}

#[test]
fn s5_4_requirements_and_denial_error() {
    let g = grant(&[
        "contextHooks.beforeInference.inject.afterUser",
        "inferenceRequest",
    ]);
    let hook = Requirement::AnyOf(&[
        Capability::Observe,
        Capability::InjectSystem,
        Capability::InjectBeforeUser,
        Capability::InjectAfterUser,
    ]);
    assert!(g.satisfies(hook));
    let stream = Requirement::AllOf(&[
        Capability::InferenceRequest,
        Capability::InferenceRequestStreaming,
    ]);
    assert!(!g.satisfies(stream));
    let d = g.check(stream).unwrap_err();
    assert_eq!(d.capability, Capability::InferenceRequestStreaming);
    let e = d.to_error();
    assert_eq!(e.code, -32002);
    assert_eq!(
        e.data,
        Some(json!({"capability": "inferenceRequest.streaming"}))
    );
    assert!(!g.satisfies(Requirement::AnyOf(&[])));
    assert!(g.check(Requirement::None).is_ok());
}

#[test]
fn s10_4_positions_map_to_inject_leaves() {
    assert_eq!(
        Capability::for_position("system"),
        Some(Capability::InjectSystem)
    );
    assert_eq!(
        Capability::for_position("beforeUser"),
        Some(Capability::InjectBeforeUser)
    );
    assert_eq!(
        Capability::for_position("afterUser"),
        Some(Capability::InjectAfterUser)
    );
    assert_eq!(Capability::for_position("System"), None);
    assert_eq!(Capability::for_position("observe"), None);
}

// ---- §5.1 advertisement ----

#[test]
fn s5_1_true_at_any_level_is_every_leaf_beneath() {
    let a = advertised(&json!({"version": "0.5", "contextHooks": {"beforeInference": true}}));
    assert_eq!(a.capabilities.len(), 4);
    assert!(a.findings.is_empty());
    let a = advertised(&json!({"contextHooks": true}));
    assert_eq!(a.capabilities.len(), 4);
    let a = advertised(&json!({"inferenceRequest": true}));
    assert_eq!(
        a.capabilities.sorted_paths(),
        ["inferenceRequest", "inferenceRequest.streaming"]
    );
}

#[test]
fn s5_1_spec_example_advertisement() {
    let a = advertised(&json!({
        "version": "0.5",
        "revision": "sha256:QLXa7BigUFzNlw_IWPSqpYbDzdvBX7PVQIPS5lgnkaw",
        "pushEvents": true,
        "contextHooks": {"beforeInference": {"observe": true,
            "inject": {"system": false, "beforeUser": true, "afterUser": true}}},
        "inferenceLifecycle": true,
        "inferenceRequest": {"streaming": true},
        "modelInfo": true,
        "channels": {"register": true, "publish": true, "incoming": true},
        "featureSets": {}
    }));
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    assert_eq!(
        a.capabilities.sorted_paths(),
        [
            "channels.incoming",
            "channels.publish",
            "channels.register",
            "contextHooks.beforeInference.inject.afterUser",
            "contextHooks.beforeInference.inject.beforeUser",
            "contextHooks.beforeInference.observe",
            "inferenceLifecycle",
            "inferenceRequest",
            "inferenceRequest.streaming",
            "modelInfo",
            "pushEvents",
        ]
    );
}

#[test]
fn s5_1_false_null_absent_and_non_objects_advertise_nothing() {
    let a = advertised(&json!({"pushEvents": false, "modelInfo": null,
        "inferenceLifecycle": 1, "channels": "all", "contextHooks": {"beforeInference": []}}));
    assert!(a.capabilities.is_empty());
    let kinds: Vec<_> = a.findings.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == FindingKind::NotBooleanOrObject)
            .count(),
        3
    );
    assert!(advertised(&json!({})).capabilities.is_empty());
    let a = advertised(&json!(true));
    assert!(a.capabilities.is_empty());
    assert_eq!(a.findings[0].kind, FindingKind::McplNotObject);
}

#[test]
fn s5_1_unrecognised_member_mints_nothing() {
    let a = advertised(
        &json!({"channels": {"observe": true, "publish": {"x": true}},
        "contextHooks": {"afterInference": true}, "vendorThing": true}),
    );
    assert_eq!(a.capabilities.sorted_paths(), ["channels.publish"]);
    let paths: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::UnrecognisedMember)
        .map(|f| f.path.as_str())
        .collect();
    assert!(paths.contains(&"channels.observe"));
    assert!(paths.contains(&"channels.publish.x"));
    assert!(paths.contains(&"contextHooks.afterInference"));
    assert!(paths.contains(&"vendorThing"));
}

/// §5.1: the advertisement is a nested object. A dotted member name is no member of it, at
/// any depth: it mints nothing (read as a path it would advertise whole subtrees unseen).
#[test]
fn s5_1_dotted_member_names_mint_nothing() {
    for mcpl in [
        json!({"contextHooks.beforeInference.inject.system": true}),
        json!({"contextHooks": {"beforeInference.inject": true}}),
        json!({"inferenceRequest.streaming": {}}),
        json!({"channels": {"publish.": true, ".publish": true, "": true}}),
    ] {
        let a = advertised(&mcpl);
        assert_eq!(a.capabilities, CapabilitySet::EMPTY, "{mcpl}");
        assert!(
            a.findings
                .iter()
                .any(|f| f.kind == FindingKind::UnrecognisedMember),
            "{mcpl}"
        );
    }
}

#[test]
fn s5_1_object_at_a_path_node_advertises_it_and_descends() {
    let a = advertised(&json!({"inferenceRequest": {}}));
    assert_eq!(a.capabilities.sorted_paths(), ["inferenceRequest"]);
    let a = advertised(&json!({"inferenceRequest": {"streaming": false}}));
    assert_eq!(a.capabilities.sorted_paths(), ["inferenceRequest"]);
    let a = advertised(&json!({"pushEvents": {}}));
    assert_eq!(a.capabilities.sorted_paths(), ["pushEvents"]);
    // a non-path interior node as an empty object advertises nothing
    assert!(advertised(&json!({"channels": {}})).capabilities.is_empty());
}

#[test]
fn s5_1_tools_never_sourced_from_inside_mcpl() {
    // seed review finding 1
    let a = advertised(&json!({"version": "0.5", "tools": true}));
    assert!(!a.capabilities.contains(Capability::Tools));
    assert_eq!(a.findings[0].kind, FindingKind::ToolsInsideMcpl);
    let caps = json!({"experimental": {"mcpl": {"version": "0.5", "tools": true}}});
    assert!(advertised_from_capabilities(&caps).capabilities.is_empty());
    let caps = json!({"tools": {}, "experimental": {"mcpl": {"version": "0.5"}}});
    assert_eq!(
        advertised_from_capabilities(&caps)
            .capabilities
            .sorted_paths(),
        ["tools"]
    );
    let caps = json!({"tools": {"listChanged": true}});
    assert!(advertised_from_capabilities(&caps)
        .capabilities
        .contains(Capability::Tools));
    let caps = json!({"tools": false});
    assert!(advertised_from_capabilities(&caps).capabilities.is_empty());
}

#[test]
fn s5_1_legacy_channels_true_is_read_and_reported() {
    let a = advertised(&json!({"channels": true}));
    assert_eq!(a.capabilities.len(), 7);
    assert_eq!(a.findings[0].kind, FindingKind::LegacyChannelsTrue);
}

/// §5.1: beside `version: "0.5"` (or a spelling of it), `channels: true` is 0.5's shorthand
/// for every channels leaf, read and not reported, as `contextHooks: true` is.
#[test]
fn s5_1_channels_true_in_a_0_5_advertisement_is_shorthand_not_legacy() {
    for version in ["0.5", "0.5.0", "0.5.0-draft"] {
        let a = advertised(&json!({"version": version, "channels": true, "contextHooks": true}));
        assert_eq!(a.capabilities.len(), 11, "{version}");
        assert!(a.findings.is_empty(), "{version}: {:?}", a.findings);
    }
    let a = advertised(&json!({"version": "0.4", "channels": true}));
    assert_eq!(a.findings[0].kind, FindingKind::LegacyChannelsTrue);
}

#[test]
fn s5_1_writing_emits_explicit_0_5_tree() {
    let set: CapabilitySet = [
        Capability::Tools,
        Capability::InferenceRequest,
        Capability::InjectAfterUser,
        Capability::ChannelsPublish,
    ]
    .into_iter()
    .collect();
    assert_eq!(
        advertisement_to_value(set),
        json!({
            "inferenceRequest": {},
            "contextHooks": {"beforeInference": {"inject": {"afterUser": true}}},
            "channels": {"publish": true}
        })
    );
}

fn any_set() -> impl Strategy<Value = CapabilitySet> {
    (0u32..(1 << 17)).prop_map(|bits| {
        Capability::ALL
            .into_iter()
            .filter(|c| bits & (1 << c.index()) != 0)
            .collect()
    })
}

fn any_pattern() -> impl Strategy<Value = String> {
    let seg = prop_oneof![
        Just("*".to_owned()),
        Just("channels".to_owned()),
        Just("contextHooks".to_owned()),
        Just("beforeInference".to_owned()),
        Just("inject".to_owned()),
        Just("publish".to_owned()),
        Just("streaming".to_owned()),
        Just("inferenceRequest".to_owned()),
        Just("system".to_owned()),
        Just("observe".to_owned()),
        "[a-z]{1,6}",
    ];
    proptest::collection::vec(seg, 1..6).prop_map(|v| v.join("."))
}

proptest! {
    #[test]
    fn s5_4_prop_no_pattern_grants_a_different_segment_count(p in any_pattern()) {
        let pat = Pattern::parse(&p).unwrap();
        let depth = p.split('.').count();
        for c in pat.resolved().iter() {
            prop_assert_eq!(c.depth(), depth);
        }
    }

    #[test]
    fn s5_4_prop_pattern_without_star_is_exact(p in any_pattern()) {
        prop_assume!(!p.contains('*'));
        let pat = Pattern::parse(&p).unwrap();
        let expect = Capability::from_str(&p).ok().into_iter().collect::<CapabilitySet>();
        prop_assert_eq!(pat.resolved(), expect);
    }

    /// Whatever a tree holds, a member whose name has a dot advertises nothing: the paths
    /// read are the same with or without such members.
    #[test]
    fn s5_1_prop_dotted_members_add_nothing(
        set in any_set(),
        at in 0usize..17,
        leaf in proptest::bool::ANY,
    ) {
        let clean = advertisement_to_value(set);
        let mut dirty = clean.clone();
        let path = Capability::ALL[at].as_str();
        let v = if leaf { json!(true) } else { json!({}) };
        if let Some(o) = dirty.as_object_mut() {
            o.insert(path.to_owned(), v.clone());
        }
        // The same path one level down, still dotted (`beforeInference.inject.system` inside
        // `contextHooks`).
        if let Some((head, tail)) = path.split_once('.').filter(|(_, t)| t.contains('.')) {
            if let Some(Value::Object(o)) = dirty.get_mut(head) {
                o.insert(tail.to_owned(), v);
            }
        }
        let expect = advertised(&clean).capabilities;
        if path.contains('.') {
            prop_assert_eq!(advertised(&dirty).capabilities, expect);
        }
    }

    #[test]
    fn s5_1_prop_write_then_read_round_trips(set in any_set()) {
        let a = advertised(&advertisement_to_value(set));
        prop_assert!(a.findings.is_empty());
        // §5.1: an object at a node that is itself a path advertises that path, so a leaf
        // (inferenceRequest.streaming) cannot be written without its path ancestor.
        let closure: CapabilitySet = set
            .iter()
            .flat_map(|c| Capability::ALL.into_iter().filter(move |d| c.is_at_or_below(d.as_str())))
            .collect();
        prop_assert_eq!(a.capabilities, closure.without(Capability::Tools));
    }

    #[test]
    fn s5_4_prop_set_algebra(a in any_set(), b in any_set()) {
        prop_assert!(a.intersection(b).is_subset(a));
        prop_assert!(a.difference(b).intersection(b).is_empty());
        prop_assert_eq!(a.union(b).len() + a.intersection(b).len(), a.len() + b.len());
    }
}

#[test]
fn s5_4_grant_serialises_as_sorted_exact_paths() {
    let g = grant(&["channels.*", "tools"]);
    let v = serde_json::to_value(g).unwrap();
    assert_eq!(
        v,
        json!([
            "channels.acknowledge",
            "channels.incoming",
            "channels.lifecycle",
            "channels.publish",
            "channels.register",
            "channels.streaming",
            "channels.typing",
            "tools"
        ])
    );
    assert_eq!(
        Requirement::AllOf(&[Capability::Tools, Capability::PushEvents]).capabilities(),
        grant(&["tools", "pushEvents"]).capabilities()
    );
}
