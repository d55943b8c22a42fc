//! Negotiated policy: feature sets (§6), `featureSets/update` (§5.3, §6.7), receipts,
//! host grant computation and the method table (§5.4, §10.1, §14.1).

use mcpl::capability::*;
use mcpl::policy::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn decls(v: Value) -> FeatureSets {
    FeatureSets::parse(&v).0
}

fn memory() -> FeatureSets {
    decls(json!({
        "memory.retrieval": {"description": "r", "uses": ["contextHooks.beforeInference.observe",
            "contextHooks.beforeInference.inject.system"], "rollback": true},
        "memory.extraction": {"description": "e", "uses": ["inferenceLifecycle"]},
        "memory.proactive": {"description": "p", "uses": ["pushEvents"]},
        "memory.deep.dive": {"description": "d", "uses": ["pushEvents"]},
        "tools.edit": {"description": "t", "uses": ["tools"]}
    }))
}

fn status(state: &ServerPolicyState, name: &str) -> FeatureSetStatus {
    state.statuses()[name]
}

fn unavailable(reason: UnavailableReason) -> impl Fn(FeatureSetStatus) -> bool {
    move |s| matches!(s, FeatureSetStatus::Unavailable { reason: r, .. } if r == reason)
}

// ---- §6.1 / §6.2 / §6.4 declarations ----

#[test]
fn s6_2_invalid_uses_fails_closed() {
    let (fs, findings) = FeatureSets::parse(&json!({
        "absent": {"description": "x"},
        "empty": {"description": "x", "uses": []},
        "parent": {"description": "x", "uses": ["contextHooks.beforeInference"]},
        "pattern": {"description": "x", "uses": ["channels.*"]},
        "legacy": {"description": "x", "uses": ["channels.observe"]},
        "number": {"description": "x", "uses": [1]},
        "string": {"description": "x", "uses": "tools"},
        "ok": {"description": "x", "uses": ["tools"]}
    }));
    let all = Grant::from_set(CapabilitySet::ALL);
    let st = derive(&fs, &all, &Selection::default());
    for name in [
        "absent", "empty", "parent", "pattern", "legacy", "number", "string",
    ] {
        assert!(
            unavailable(UnavailableReason::InvalidUses)(st[name]),
            "{name}"
        );
    }
    assert!(st["ok"].is_available());
    assert_eq!(
        findings
            .iter()
            .filter(|f| f.kind == FindingKind::InvalidUses)
            .count(),
        7
    );
}

#[test]
fn s6_1_unknown_members_are_kept_and_written_as_object() {
    let v = json!({"notes.edit": {"description": "n", "uses": ["tools"], "rollback": true,
        "tagOntology": {"a": 1}, "x-vendor": "v"}});
    let (fs, findings) = FeatureSets::parse(&v);
    assert!(findings.is_empty());
    assert_eq!(fs.sets["notes.edit"].extra["rollback"], json!(true));
    assert_eq!(fs.to_value(), v);
}

#[test]
fn s6_2_missing_description_is_reported() {
    let (_, findings) = FeatureSets::parse(&json!({"a": {"uses": ["tools"]}}));
    assert_eq!(findings[0].kind, FindingKind::MissingDescription);
}

#[test]
fn s6_1_legacy_array_form_is_read_and_reported() {
    let (fs, findings) = FeatureSets::parse(&json!([
        {"name": "memory.retrieval", "description": "r", "uses": ["tools"]},
        {"description": "no name", "uses": ["tools"]},
        {"name": "memory.retrieval", "description": "dup", "uses": ["tools"]}
    ]));
    assert_eq!(fs.sets.len(), 1);
    assert_eq!(
        fs.sets["memory.retrieval"].description.as_deref(),
        Some("r")
    );
    assert!(!fs.sets["memory.retrieval"].extra.contains_key("name"));
    let kinds: Vec<_> = findings.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FindingKind::LegacyFeatureSetsArray));
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == FindingKind::FeatureSetUnnamed)
            .count(),
        2
    );
    // writing produces the 0.5 object form
    assert!(fs.to_value().is_object());
}

#[test]
fn s6_4_denied_capability_disables_sets_requiring_it() {
    let g = Grant::from_patterns(["contextHooks.beforeInference.observe", "pushEvents"]).unwrap();
    let st = derive(&memory(), &g, &Selection::default());
    match st["memory.retrieval"] {
        FeatureSetStatus::Unavailable { reason, missing } => {
            assert_eq!(reason, UnavailableReason::CapabilityDenied);
            assert_eq!(
                missing.sorted_paths(),
                ["contextHooks.beforeInference.inject.system"]
            );
        }
        s => panic!("{s:?}"),
    }
    assert!(st["memory.proactive"].is_available());
}

// ---- §5.3 / §6.7 featureSets/update ----

#[test]
fn s5_3_state_starts_not_ready_and_grants_nothing() {
    let s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    assert!(!s.is_ready());
    assert!(s.grant().capabilities().is_empty());
    assert!(!s.is_available("memory.proactive"));
    assert!(!s.allows(Capability::PushEvents));
}

#[test]
fn s5_3_request_with_absent_effective_capabilities_grants_nothing() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"]}),
    )
    .unwrap();
    assert!(s.is_available("memory.proactive"));
    // absence is not "no change": the previous wider grant must not stand
    let out = s
        .apply(Form::Request, &json!({"enabled": ["memory.proactive"]}))
        .unwrap();
    assert!(s.is_ready());
    assert!(s.grant().capabilities().is_empty());
    assert!(!s.is_available("memory.proactive"));
    let v = out.receipt.unwrap().to_value();
    assert_eq!(v["mode"], "degraded");
    let entry = v["unavailableFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["featureSet"] == "memory.proactive")
        .unwrap();
    assert_eq!(entry["missingCapabilities"], json!(["pushEvents"]));
    assert_eq!(entry["effect"], "disabled");
}

/// A refused policy Request puts the state back (§6.7: nothing was applied) and keeps the
/// declarations it shares with the server's other connections, uncopied.
#[test]
fn s6_7_reset_forgets_the_grant_and_keeps_the_shared_declarations() {
    let shared = std::sync::Arc::new(memory());
    let mut s = ServerPolicyState::new(FeatureSets::default(), CapabilitySet::ALL);
    s.set_declarations(shared.clone());
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"]}),
    )
    .unwrap();
    assert!(s.is_ready() && s.is_available("memory.proactive"));
    s.reset();
    assert!(!s.is_ready());
    assert!(s.grant().capabilities().is_empty());
    assert!(!s.is_available("memory.proactive"));
    assert!(std::ptr::eq(s.declarations(), &*shared));
}

#[test]
fn s5_3_request_even_empty_makes_ready() {
    let mut s = ServerPolicyState::new(FeatureSets::default(), CapabilitySet::ALL);
    let out = s.apply(Form::Request, &Value::Null).unwrap();
    assert!(s.is_ready());
    // nothing degraded: mode omitted
    assert_eq!(
        out.receipt.unwrap().to_value(),
        json!({"accepted": true, "unavailableFeatures": []})
    );
}

#[test]
fn s5_3_enabled_is_an_allowlist_that_never_widens() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents", "tools"],
                "enabled": ["memory.proactive", "memory.extraction"]}),
    )
    .unwrap();
    assert!(s.is_available("memory.proactive"));
    // selected but its uses is not granted: stays unavailable
    assert!(unavailable(UnavailableReason::CapabilityDenied)(status(
        &s,
        "memory.extraction"
    )));
    // not selected although fully granted
    assert!(unavailable(UnavailableReason::NotSelected)(status(
        &s,
        "tools.edit"
    )));
}

#[test]
fn s5_3_absent_enabled_constrains_nothing() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents", "tools"]}),
    )
    .unwrap();
    assert!(s.is_available("tools.edit"));
    assert!(s.is_available("memory.proactive"));
}

#[test]
fn s5_3_disabled_always_subtracts() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"], "enabled": ["memory.proactive"],
                "disabled": ["memory.proactive"]}),
    )
    .unwrap();
    assert!(unavailable(UnavailableReason::Disabled)(status(
        &s,
        "memory.proactive"
    )));
}

#[test]
fn s6_3_wildcards_in_enabled_and_disabled() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"], "enabled": ["memory.*"]}),
    )
    .unwrap();
    assert!(s.is_available("memory.proactive"));
    // enabled: one segment only
    assert!(unavailable(UnavailableReason::NotSelected)(status(
        &s,
        "memory.deep.dive"
    )));
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"], "disabled": ["memory.*"]}),
    )
    .unwrap();
    // disabled: trailing * covers any depth
    assert!(unavailable(UnavailableReason::Disabled)(status(
        &s,
        "memory.proactive"
    )));
    assert!(unavailable(UnavailableReason::Disabled)(status(
        &s,
        "memory.deep.dive"
    )));
}

#[test]
fn s6_7_notification_only_narrows_and_never_makes_ready() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    let out = s
        .apply(
            Form::Notification,
            &json!({"effectiveCapabilities": ["pushEvents"], "enabled": ["memory.proactive"]}),
        )
        .unwrap();
    assert!(!s.is_ready());
    assert!(s.grant().capabilities().is_empty());
    assert!(out.receipt.is_none());
    let discarded: Vec<_> = out
        .diagnostics
        .iter()
        .filter(|d| d.code == "notification_field_discarded")
        .map(|d| d.detail.as_str())
        .collect();
    assert_eq!(discarded, ["effectiveCapabilities", "enabled"]);

    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents", "tools"]}),
    )
    .unwrap();
    assert!(s.is_available("memory.proactive"));
    let before = *s.grant();
    s.apply(
        Form::Notification,
        &json!({"effectiveCapabilities": ["*"], "disabled": ["memory.proactive"]}),
    )
    .unwrap();
    assert_eq!(*s.grant(), before);
    assert!(unavailable(UnavailableReason::Disabled)(status(
        &s,
        "memory.proactive"
    )));
    assert!(s.is_available("tools.edit"));
}

#[test]
fn s6_7_disabled_notifications_accumulate_within_the_bound_and_repeats_are_counted_once() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"]}),
    )
    .unwrap();
    let names = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| format!("gone.n{i}")).collect()
    };
    let half = MAX_POLICY_LIST_ENTRIES / 2;
    s.apply(Form::Notification, &json!({ "disabled": names(0, half) }))
        .unwrap();
    // Repeats of entries already held cost nothing against the bound.
    s.apply(Form::Notification, &json!({ "disabled": names(0, half) }))
        .unwrap();
    s.apply(
        Form::Notification,
        &json!({ "disabled": names(half, MAX_POLICY_LIST_ENTRIES) }),
    )
    .unwrap();
    assert_eq!(s.selection().disabled.len(), MAX_POLICY_LIST_ENTRIES);
    assert!(!s.grant().capabilities().is_empty());
    // One more distinct entry would pass the bound: refused, and the grant fails closed.
    let err = s
        .apply(
            Form::Notification,
            &json!({ "disabled": ["gone.one_more"] }),
        )
        .unwrap_err();
    assert_eq!(
        err,
        PolicyError::TooManyEntries {
            field: "disabled",
            limit: MAX_POLICY_LIST_ENTRIES,
            count: MAX_POLICY_LIST_ENTRIES + 1
        }
    );
    let e = err.to_error();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data.unwrap()["limit"], MAX_POLICY_LIST_ENTRIES);
    assert!(s.grant().capabilities().is_empty());
}

#[test]
fn s5_4_granted_and_denied_is_malformed_and_grants_nothing() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents", "tools"]}),
    )
    .unwrap();
    let err = s
        .apply(
            Form::Request,
            &json!({"effectiveCapabilities": ["tools"], "deniedCapabilities": ["tools"]}),
        )
        .unwrap_err();
    assert_eq!(err.code(), "granted_and_denied");
    let e = err.to_error();
    assert_eq!(e.code, -32602);
    assert!(s.grant().capabilities().is_empty());
    assert!(!s.is_available("memory.proactive"));
    // overlap through a pattern conflicts too
    let err = UpdateParams::parse(
        &json!({"effectiveCapabilities": ["channels.*"], "deniedCapabilities": ["channels.publish"]}),
    )
    .unwrap_err();
    assert_eq!(
        err,
        PolicyError::GrantedAndDenied {
            path: "channels.publish".into()
        }
    );
}

#[test]
fn s5_4_denied_capabilities_never_enter_the_decision() {
    let a = UpdateParams::parse(&json!({"effectiveCapabilities": ["tools"]})).unwrap();
    let b = UpdateParams::parse(
        &json!({"effectiveCapabilities": ["tools"], "deniedCapabilities": ["pushEvents", "junk"]}),
    )
    .unwrap();
    assert_eq!(a.effective, b.effective);
}

#[test]
fn s6_7_malformed_params_are_refused() {
    for bad in [
        json!([]),
        json!("x"),
        json!({"effectiveCapabilities": "tools"}),
        json!({"effectiveCapabilities": [1]}),
        json!({"effectiveCapabilities": ["a..b"]}),
        json!({"effectiveCapabilities": null}),
        json!({"enabled": [true]}),
        json!({"disabled": {}}),
        json!({"deniedCapabilities": "x"}),
    ] {
        let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
        assert!(s.apply(Form::Request, &bad).is_err(), "{bad}");
        assert!(s.grant().capabilities().is_empty());
    }
}

#[test]
fn s6_7_unknown_feature_set_names_are_diagnosed() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    let out = s
        .apply(
            Form::Request,
            &json!({"enabled": ["nope"], "disabled": ["memory.*"]}),
        )
        .unwrap();
    assert_eq!(out.diagnostics.len(), 1);
    assert_eq!(out.diagnostics[0].code, "unknown_feature_set");
    assert_eq!(out.diagnostics[0].detail, "nope");
    // A Notification's `disabled` entries too: one that disables nothing declared (a partial
    // `*`, a case or spelling slip) is reported, not a silent no-op.
    let out = s
        .apply(
            Form::Notification,
            &json!({"disabled": ["memory*", "Memory.retrieval", "memory.retrieval"]}),
        )
        .unwrap();
    let unknown: Vec<&str> = out
        .diagnostics
        .iter()
        .filter(|d| d.code == "unknown_feature_set")
        .map(|d| d.detail.as_str())
        .collect();
    assert_eq!(unknown, ["memory*", "Memory.retrieval"]);
}

// ---- §6.7 receipts ----

#[test]
fn s6_7_degraded_receipt_shape() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    let out = s
        .apply(
            Form::Request,
            &json!({"effectiveCapabilities": ["pushEvents", "tools",
                "contextHooks.beforeInference.*", "contextHooks.beforeInference.inject.*"]}),
        )
        .unwrap();
    let v = out.receipt.unwrap().to_value();
    assert_eq!(
        v,
        json!({"accepted": true, "mode": "degraded", "unavailableFeatures": [
            {"featureSet": "memory.extraction", "missingCapabilities": ["inferenceLifecycle"],
             "effect": "disabled", "reason": "capability_denied"}
        ]})
    );
    let report = parse_receipt(&v);
    assert!(report.defects.is_empty());
    assert_eq!(report.accepted, Some(true));
}

#[test]
fn s6_7_refusal_always_names_fallback() {
    let r = Receipt::refused(
        Fallback::McpOnly,
        CapabilitySet::EMPTY.with(Capability::InjectSystem),
        Some("needs system".into()),
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        v,
        json!({"accepted": false, "fallback": "mcp-only",
               "missingCapabilities": ["contextHooks.beforeInference.inject.system"],
               "reason": "needs system"})
    );
    assert_eq!(parse_receipt(&v).receipt, Some(r));
    assert_eq!(
        serde_json::to_value(Receipt::refused(
            Fallback::Close,
            CapabilitySet::EMPTY,
            None
        ))
        .unwrap()["fallback"],
        "close"
    );
}

fn codes(v: Value) -> Vec<&'static str> {
    parse_receipt(&v).defects.iter().map(|d| d.code).collect()
}

#[test]
fn s6_7_parse_receipt_reports_defects() {
    assert_eq!(codes(json!({"accepted": false})), ["fallback_missing"]);
    assert_eq!(
        codes(json!({"accepted": false, "fallback": "retry"})),
        ["fallback_invalid"]
    );
    assert_eq!(codes(json!({})), ["accepted_missing"]);
    assert_eq!(codes(json!({"accepted": null})), ["accepted_missing"]);
    // §6.7: `accepted` is a boolean; a string `"true"` is there, of the wrong type.
    assert_eq!(codes(json!({"accepted": "true"})), ["accepted_not_boolean"]);
    assert_eq!(codes(json!({"accepted": 1})), ["accepted_not_boolean"]);
    assert_eq!(codes(json!("yes")), ["not_object"]);
    assert_eq!(
        codes(
            json!({"accepted": true, "mode": "degraded", "unavailableFeatures": [
            {"featureSet": "a", "missingCapabilities": []}]})
        ),
        ["effect_missing"]
    );
    assert_eq!(
        codes(json!({"accepted": true, "unavailableFeatures": [{"effect": "disabled"}]})),
        ["feature_set_missing"]
    );
    assert_eq!(
        codes(json!({"accepted": true, "mode": "degraded", "unavailableFeatures": []})),
        ["mode_without_degradation"]
    );
    let r = parse_receipt(&json!({"accepted": false}));
    assert_eq!(r.accepted, Some(false));
    assert!(r.receipt.is_none());
    // the non-fatal defect keeps the receipt
    let r = parse_receipt(&json!({"accepted": true, "mode": "degraded"}));
    assert!(r.receipt.is_some());
    assert!(!r.defects[0].fatal);
}

// ---- host side ----

#[test]
fn s5_4_host_grant_is_advertised_intersect_policy() {
    let adv = advertised(
        &json!({"pushEvents": true, "contextHooks": {"beforeInference": true},
        "channels": {"publish": true}}),
    )
    .capabilities;
    let hg = HostGrant::compute(
        adv,
        [
            "contextHooks.beforeInference.observe",
            "contextHooks.beforeInference.inject.beforeUser",
            "channels.*",
            "modelInfo",
        ],
    )
    .unwrap();
    assert_eq!(
        hg.effective.to_effective_capabilities(),
        [
            "channels.publish",
            "contextHooks.beforeInference.inject.beforeUser",
            "contextHooks.beforeInference.observe"
        ]
    );
    assert_eq!(
        hg.denied.sorted_paths(),
        [
            "contextHooks.beforeInference.inject.afterUser",
            "contextHooks.beforeInference.inject.system",
            "pushEvents"
        ]
    );
    // the params the host sends round-trip through the server parser without conflict
    let p = hg.update_params(None, &[]);
    let parsed = UpdateParams::parse(&p).unwrap();
    assert_eq!(parsed.effective, Some(hg.effective));
    assert!(parsed.denied_present);
}

#[test]
fn s14_1_method_table() {
    use Capability as C;
    let one = |m: &str| method_requirement(m, None);
    assert_eq!(
        one("channels/register"),
        Some(Requirement::One(C::ChannelsRegister))
    );
    assert_eq!(
        one("channels/changed"),
        Some(Requirement::One(C::ChannelsRegister))
    );
    assert_eq!(
        one("channels/list"),
        Some(Requirement::One(C::ChannelsRegister))
    );
    assert_eq!(
        one("channels/open"),
        Some(Requirement::One(C::ChannelsLifecycle))
    );
    assert_eq!(
        one("channels/close"),
        Some(Requirement::One(C::ChannelsLifecycle))
    );
    assert_eq!(
        one("channels/publish"),
        Some(Requirement::One(C::ChannelsPublish))
    );
    assert_eq!(
        one("channels/incoming"),
        Some(Requirement::One(C::ChannelsIncoming))
    );
    assert_eq!(
        one("channels/outgoing/chunk"),
        Some(Requirement::One(C::ChannelsStreaming))
    );
    assert_eq!(
        one("channels/outgoing/complete"),
        Some(Requirement::One(C::ChannelsStreaming))
    );
    assert_eq!(
        one("channels/acknowledge"),
        Some(Requirement::One(C::ChannelsAcknowledge))
    );
    assert_eq!(
        one("channels/typing"),
        Some(Requirement::One(C::ChannelsTyping))
    );
    assert_eq!(method_direction("channels/list"), Some(Direction::Either));
    assert_eq!(
        method_direction("channels/incoming"),
        Some(Direction::ServerToHost)
    );
    assert_eq!(
        method_direction("channels/changed"),
        Some(Direction::ServerToHost)
    );
    assert_eq!(
        method_direction("channels/publish"),
        Some(Direction::HostToServer)
    );
    assert_eq!(
        method_direction("channels/outgoing/chunk"),
        Some(Direction::HostToServer)
    );
    assert_eq!(
        method_direction("channels/open"),
        Some(Direction::HostToServer)
    );
}

#[test]
fn s5_4_method_table_mcpl_methods() {
    use Capability as C;
    assert_eq!(
        method_requirement("push/event", None),
        Some(Requirement::One(C::PushEvents))
    );
    assert_eq!(
        method_requirement("model/info", None),
        Some(Requirement::One(C::ModelInfo))
    );
    assert_eq!(
        method_requirement("inference/lifecycle", None),
        Some(Requirement::One(C::InferenceLifecycle))
    );
    assert_eq!(
        method_requirement("tools/call", None),
        Some(Requirement::One(C::Tools))
    );
    assert_eq!(
        method_requirement("inference/request", Some(&json!({"stream": false}))),
        Some(Requirement::One(C::InferenceRequest))
    );
    let streaming =
        method_requirement("inference/request", Some(&json!({"stream": true}))).unwrap();
    let g = Grant::from_patterns(["inferenceRequest"]).unwrap();
    assert!(!g.satisfies(streaming));
    assert_eq!(
        g.check(streaming).unwrap_err().capability,
        C::InferenceRequestStreaming
    );
    // a non-boolean stream is not trusted to mean "no"
    let odd = method_requirement("inference/request", Some(&json!({"stream": "yes"}))).unwrap();
    assert!(!g.satisfies(odd));
    let hook = method_requirement("context/beforeInference", None).unwrap();
    assert!(
        Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"])
            .unwrap()
            .satisfies(hook)
    );
    assert!(!Grant::none().satisfies(hook));
    assert_eq!(
        method_requirement("featureSets/update", None),
        Some(Requirement::None)
    );
    assert_eq!(method_requirement("scope/elevate", None), None);
    assert_eq!(method_requirement("context/afterInference", None), None);
    let e = Grant::none()
        .check(Requirement::One(C::PushEvents))
        .unwrap_err()
        .to_error();
    assert_eq!(e.code, -32002);
    assert_eq!(e.data, Some(json!({"capability": "pushEvents"})));
}

#[test]
fn s5_4_each_injection_authorized_by_position() {
    let g = Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"]).unwrap();
    let mixed = json!([
        {"namespace": "m", "position": "afterUser", "content": "ok"},
        {"namespace": "m", "position": "system", "content": "no"},
        {"namespace": "m", "position": "sidebar", "content": "no"},
        {"namespace": "m", "content": "no"}
    ]);
    let r: Vec<_> = mixed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| authorize_injection(&g, i))
        .collect();
    assert_eq!(r[0], Ok(Capability::InjectAfterUser));
    assert!(
        matches!(&r[1], Err(InjectionDenied::Denied(d)) if d.capability == Capability::InjectSystem)
    );
    assert_eq!(
        r[2],
        Err(InjectionDenied::UnknownPosition("sidebar".into()))
    );
    assert_eq!(r[3], Err(InjectionDenied::MissingPosition));
}

#[test]
fn s10_1_user_message_null_without_observe() {
    let inject_only =
        Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"]).unwrap();
    assert!(before_inference_applies(&inject_only));
    let mut p = json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0,
        "userMessage": "secret"});
    redact_before_inference(&inject_only, &mut p);
    assert_eq!(p["userMessage"], Value::Null);
    assert_eq!(p["inferenceId"], "i");
    let mut p = json!({"inferenceId": "i"});
    redact_before_inference(&inject_only, &mut p);
    assert_eq!(p.get("userMessage"), Some(&Value::Null));
    let observe = Grant::from_patterns(["contextHooks.beforeInference.observe"]).unwrap();
    let mut p = json!({"userMessage": "hello"});
    redact_before_inference(&observe, &mut p);
    assert_eq!(p["userMessage"], "hello");
    assert!(!before_inference_applies(&Grant::none()));
}

/// §10.1: what the host sends (`redact_before_inference`) is never what `mcpl check-host`
/// fails (`unredacted_user_message`), and an unredacted message is failed exactly when the
/// grant withholds it: the two sides read one rule (`user_message_allowed`).
#[test]
fn s10_1_redaction_and_its_check_are_one_rule() {
    let grants = [
        Grant::none(),
        Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"]).unwrap(),
        Grant::from_patterns(["contextHooks.beforeInference.observe"]).unwrap(),
        Grant::from_patterns(["contextHooks.*"]).unwrap(),
    ];
    let sent = [
        json!({"inferenceId": "i", "userMessage": "secret"}),
        json!({"inferenceId": "i", "userMessage": null}),
        json!({"inferenceId": "i"}),
    ];
    for g in &grants {
        for p in &sent {
            let mut redacted = p.clone();
            redact_before_inference(g, &mut redacted);
            assert!(!unredacted_user_message(g, Some(&redacted)), "{g:?} {p}");
            let carries = p.get("userMessage").is_some_and(|u| !u.is_null());
            let expected = carries && !user_message_allowed(g);
            assert_eq!(unredacted_user_message(g, Some(p)), expected, "{g:?} {p}");
        }
    }
    assert!(user_message_allowed(&grants[2]) && !user_message_allowed(&grants[1]));
    assert!(!unredacted_user_message(&Grant::none(), None));
}

/// §10.5: `inference/lifecycle` carries `model` only when `modelInfo` is granted; a null or
/// absent one is nothing carried.
#[test]
fn s10_5_lifecycle_model_only_with_model_info() {
    let model = json!({"inferenceId": "i", "phase": "started", "model": {"id": "m"}});
    let none = Grant::none();
    let info = Grant::from_patterns(["modelInfo"]).unwrap();
    assert!(ungranted_lifecycle_model(&none, Some(&model)));
    assert!(!ungranted_lifecycle_model(&info, Some(&model)));
    let bare = json!({"inferenceId": "i", "phase": "started", "model": null});
    assert!(!ungranted_lifecycle_model(&none, Some(&bare)));
    assert!(!ungranted_lifecycle_model(&none, None));
}

#[test]
fn s5_4_grant_report_for_cli() {
    let caps = json!({"tools": {}, "experimental": {"mcpl": {"version": "0.5", "tools": true,
        "pushEvents": true, "inferenceLifecycle": true,
        "featureSets": {"memory.proactive": {"description": "p", "uses": ["pushEvents"]},
                        "memory.extraction": {"description": "e", "uses": ["inferenceLifecycle"]},
                        "bad": {"description": "b", "uses": []}}}}});
    let r = grant_report_from_value(&caps, ["pushEvents", "tools"]).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        v["advertised"],
        json!(["inferenceLifecycle", "pushEvents", "tools"])
    );
    assert_eq!(v["effectiveCapabilities"], json!(["pushEvents", "tools"]));
    assert_eq!(v["deniedCapabilities"], json!(["inferenceLifecycle"]));
    assert_eq!(
        v["featureSets"],
        json!({
            "bad": {"available": false, "missingCapabilities": [], "reason": "invalid_uses"},
            "memory.extraction": {"available": false, "missingCapabilities": ["inferenceLifecycle"],
                                  "reason": "capability_denied"},
            "memory.proactive": {"available": true, "missingCapabilities": []}
        })
    );
    assert!(r
        .findings
        .iter()
        .any(|f| f.starts_with("tools_inside_mcpl")));
    assert!(r.findings.iter().any(|f| f.starts_with("invalid_uses")));
}

// ---- properties ----

fn any_set() -> impl Strategy<Value = CapabilitySet> {
    (0u32..(1 << 17)).prop_map(|bits| {
        Capability::ALL
            .into_iter()
            .filter(|c| bits & (1 << c.index()) != 0)
            .collect()
    })
}

fn any_patterns() -> impl Strategy<Value = Vec<String>> {
    let one = prop_oneof![
        proptest::sample::select(Capability::ALL.to_vec()).prop_map(|c| c.as_str().to_owned()),
        proptest::sample::select(vec![
            "*",
            "*.*",
            "*.*.*",
            "*.*.*.*",
            "channels.*",
            "contextHooks.*",
            "contextHooks.beforeInference.*",
            "contextHooks.beforeInference.inject.*",
            "inferenceRequest.*",
            "channels",
            "x.y"
        ])
        .prop_map(str::to_owned),
    ];
    proptest::collection::vec(one, 0..6)
}

const NAMES: [&str; 6] = ["a", "a.b", "a.c", "a.b.c", "b", "memory.x"];

fn any_names() -> impl Strategy<Value = Vec<String>> {
    let one =
        proptest::sample::select(vec!["a", "a.b", "a.*", "*", "b", "memory.*", "a.*.c", "zz"])
            .prop_map(str::to_owned);
    proptest::collection::vec(one, 0..4)
}

fn any_decls() -> impl Strategy<Value = FeatureSets> {
    proptest::collection::vec(any_set(), NAMES.len()).prop_map(|sets| FeatureSets {
        sets: NAMES
            .iter()
            .zip(sets)
            .map(|(n, s)| {
                let uses: Vec<Capability> = s.iter().collect();
                (n.to_string(), FeatureSetDeclaration::new("d", &uses))
            })
            .collect(),
    })
}

fn available(st: &ServerPolicyState) -> Vec<String> {
    st.statuses()
        .into_iter()
        .filter(|(_, s)| s.is_available())
        .map(|(n, _)| n)
        .collect()
}

proptest! {
    #[test]
    fn s5_4_prop_grant_never_exceeds_advertisement(adv in any_set(), pol in any_patterns()) {
        let hg = HostGrant::compute(adv, pol.iter().map(String::as_str)).unwrap();
        prop_assert!(hg.effective.capabilities().is_subset(adv));
        prop_assert!(hg.denied.intersection(hg.effective.capabilities()).is_empty());
        prop_assert_eq!(hg.denied.union(hg.effective.capabilities()), adv);
    }

    #[test]
    fn s5_3_prop_adding_disabled_never_enables(
        d in any_decls(), g in any_set(), en in proptest::option::of(any_names()),
        dis in any_names(), extra in any_names()
    ) {
        let mk = |dis: Vec<String>| json!({
            "effectiveCapabilities": g.sorted_paths(),
            "enabled": en, "disabled": dis,
        });
        let mut p = mk(dis.clone());
        if en.is_none() { p.as_object_mut().unwrap().remove("enabled"); }
        let mut a = ServerPolicyState::new(d.clone(), CapabilitySet::ALL);
        a.apply(Form::Request, &p).unwrap();
        let mut more = dis.clone();
        more.extend(extra.clone());
        let mut q = mk(more);
        if en.is_none() { q.as_object_mut().unwrap().remove("enabled"); }
        let mut b = ServerPolicyState::new(d, CapabilitySet::ALL);
        b.apply(Form::Request, &q).unwrap();
        let (av_a, av_b) = (available(&a), available(&b));
        prop_assert!(av_b.iter().all(|n| av_a.contains(n)));
        // and as a Notification on top of a
        let before = available(&a);
        a.apply(Form::Notification, &json!({"disabled": extra})).unwrap();
        prop_assert!(available(&a).iter().all(|n| before.contains(n)));
    }

    #[test]
    fn s6_7_prop_notification_never_widens(
        d in any_decls(), g in any_set(), ready in any::<bool>(),
        eff in any_patterns(), en in any_names(), dis in any_names()
    ) {
        let mut s = ServerPolicyState::new(d, CapabilitySet::ALL);
        if ready {
            s.apply(Form::Request, &json!({"effectiveCapabilities": g.sorted_paths()})).unwrap();
        }
        let (grant, was_ready, before) = (*s.grant(), s.is_ready(), available(&s));
        let r = s.apply(Form::Notification,
            &json!({"effectiveCapabilities": eff, "enabled": en, "disabled": dis}));
        prop_assert!(s.grant().capabilities().is_subset(grant.capabilities()));
        prop_assert_eq!(s.is_ready(), was_ready);
        prop_assert!(available(&s).iter().all(|n| before.contains(n)));
        if r.is_ok() { prop_assert_eq!(*s.grant(), grant); }
    }

    #[test]
    fn s6_4_prop_available_sets_are_fully_granted(d in any_decls(), g in any_set()) {
        let grant = Grant::from_set(g);
        for (name, st) in derive(&d, &grant, &Selection::default()) {
            if st.is_available() {
                let uses = d.sets[&name].validated_uses().unwrap();
                prop_assert!(uses.is_subset(g));
            }
        }
    }
}

#[test]
fn s6_6_feature_set_rejections_use_error_objects() {
    let g = Grant::from_patterns(["pushEvents"]).unwrap();
    let st = derive(&memory(), &g, &Selection::default());
    assert!(check_feature_set(&st, "memory.proactive").is_ok());
    let e = check_feature_set(&st, "memory.extraction").unwrap_err();
    assert_eq!(e.code, -32001);
    assert_eq!(e.data, Some(json!({"featureSet": "memory.extraction"})));
    let e = check_feature_set(&st, "nope").unwrap_err();
    assert_eq!(e.code, -32003);
}

#[test]
fn s6_4_declaration_mismatch_is_diagnosed() {
    let d = memory();
    let push = method_requirement("push/event", None).unwrap();
    assert_eq!(declaration_mismatch(&d, "memory.proactive", push), None);
    assert_eq!(
        declaration_mismatch(&d, "memory.extraction", push),
        Some(CapabilitySet::EMPTY.with(Capability::PushEvents))
    );
    // AnyOf: one declared leaf covers the hook
    assert_eq!(
        declaration_mismatch(&d, "memory.retrieval", BEFORE_INFERENCE),
        None
    );
    assert!(declaration_mismatch(&d, "tools.edit", BEFORE_INFERENCE).is_some());
    assert_eq!(declaration_mismatch(&d, "undeclared", push), None);
}

/// The server keeps the `enabled` and `disabled` entries it is sent (a Notification's
/// `disabled` accumulates, §6.7), and §6.3 sets no length for them: 1,024 Notifications of
/// one 16 MiB name each were all kept. Each list is bounded in bytes as well as in entries
/// (`MAX_POLICY_LIST_BYTES`); past it the update is refused like any malformed one, and the
/// grant fails closed.
#[test]
fn s6_7_kept_policy_lists_are_bounded_in_bytes() {
    let mut s = ServerPolicyState::new(memory(), CapabilitySet::ALL);
    s.apply(
        Form::Request,
        &json!({"effectiveCapabilities": ["pushEvents"]}),
    )
    .unwrap();
    let limit = MAX_POLICY_LIST_BYTES;
    let name = |c: char| c.to_string().repeat(limit / 2);
    s.apply(Form::Notification, &json!({ "disabled": [name('a')] }))
        .unwrap();
    // A repeat costs nothing against the bound.
    s.apply(Form::Notification, &json!({ "disabled": [name('a')] }))
        .unwrap();
    assert!(!s.grant().capabilities().is_empty());
    let err = s
        .apply(Form::Notification, &json!({ "disabled": [name('b'), "x"] }))
        .unwrap_err();
    assert_eq!(
        err,
        PolicyError::ListTooLarge {
            field: "disabled",
            limit,
            bytes: limit + 1
        }
    );
    let e = err.to_error();
    assert_eq!(e.code, -32602);
    assert_eq!(e.data.unwrap()["reason"], "list_too_large");
    assert!(s.grant().capabilities().is_empty());
    assert_eq!(s.selection().disabled.len(), 1);

    // A Request's lists are held to the same bound.
    for field in ["enabled", "disabled"] {
        let err = s
            .apply(
                Form::Request,
                &json!({"effectiveCapabilities": ["pushEvents"], field: [name('a'), name('b'), "x"]}),
            )
            .unwrap_err();
        assert_eq!(
            err,
            PolicyError::ListTooLarge {
                field,
                limit,
                bytes: limit + 1
            }
        );
    }
}
