//! Manifest changes (§17): announcements, fetches, review, revocations told by Request, coalescing and rate limits.

use super::*;

/// §17.3, §14.3: a method the host receives only as a Notification, sent as a Request, is
/// answered `-32601` (as `host::HostSession` answers it), not handed to the driver: found by
/// `host_differential.rs`.
#[test]
fn s17_3_a_notification_method_sent_as_a_request_is_not_found() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let methods = [
        "mcpl/manifestChanged",
        "notifications/tools/list_changed",
        "ping",
    ];
    for (id, method) in (72..).zip(methods) {
        p.server_writes(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}));
    }
    p.drive();
    assert_eq!(p.host_answer(72).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(73).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(74).unwrap()["result"], json!({}));
}

#[test]
fn s17_5_a_fetched_manifest_that_removes_a_capability_revokes_it_and_is_told() {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    assert!(p.host.grant().allows(Capability::ChannelsRegister));
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    p.drive();
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    assert!(
        answer_fetch(&mut p, smaller),
        "the host fetched mcpl/manifest"
    );
    let policy_requests_before = p
        .host_wrote
        .iter()
        .filter(|t| t.contains("featureSets/update"))
        .count();
    p.drive();
    // §17.5 step 3: revoked host-side at once, and told by Request (§6.7).
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.host.grant().allows(Capability::PushEvents));
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
    let after = p
        .host_wrote
        .iter()
        .filter(|t| t.contains("featureSets/update"))
        .count();
    assert_eq!(after, policy_requests_before + 1);
    assert!(
        !p.server.grant().allows(Capability::ChannelsRegister),
        "the server was told"
    );
}

/// §17.4: the application may fetch the manifest at any time; the answer is reviewed like an
/// announced one (§17.5: a revocation applies at once and is told by Request), and spends
/// nothing of the announcement rate limit (§17.8).
#[test]
fn s17_4_a_fetch_the_application_asks_for_is_reviewed_like_an_announced_one() {
    let mut p = Pair::new(&["pushEvents", "channels.register"], server_rules());
    assert_eq!(
        p.host.refresh_manifest(p.now),
        Err(StateError::NotConnected)
    );
    p.host.start(p.now);
    p.drive();
    for _ in 0..5 {
        p.host.refresh_manifest(p.now).expect("up, MCPL advertised");
        p.drive();
        assert!(answer_fetch(&mut p, manifest()), "fetched at once");
        p.drive();
    }
    assert!(
        !p.host_out.iter().any(|o| matches!(
            o,
            HostOutput::Diagnostic(HostDiagnostic::ManifestFetchDropped { .. })
        )),
        "outside the announcement limit"
    );
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    p.host.refresh_manifest(p.now).expect("up");
    p.drive();
    assert!(answer_fetch(&mut p, smaller));
    p.drive();
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
    assert!(
        !p.server.grant().allows(Capability::ChannelsRegister),
        "the revocation was told by Request (§6.7)"
    );
    // Announcements still get their own burst.
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    p.drive();
    assert!(answer_fetch(&mut p, manifest()), "an announcement fetches");

    let mut mcp = Pair::connect_plain_mcp(&["tools"]);
    assert_eq!(
        mcp.host.refresh_manifest(mcp.now),
        Err(StateError::McpOnly(McpOnlyReason::NotAdvertised))
    );
}

#[test]
fn s17_8_announcements_are_coalesced_and_rate_limited() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for _ in 0..5 {
        p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
    }
    p.drive();
    let fetches = |p: &Pair| {
        p.host_wrote
            .iter()
            .filter(|t| t.contains("\"mcpl/manifest\""))
            .count()
    };
    // One fetch in flight; the others fold into a single follow-up.
    assert_eq!(fetches(&p), 1);
    assert!(answer_fetch(&mut p, manifest()));
    p.drive();
    assert_eq!(fetches(&p), 2, "one coalesced follow-up");
    assert!(answer_fetch(&mut p, manifest()));
    p.drive();
    assert_eq!(fetches(&p), 2, "nothing more was announced");
}

#[test]
fn s17_5_repeated_unusable_manifests_suspend_mcpl() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for _ in 0..3 {
        p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}}));
        p.drive();
        assert!(answer_fetch(&mut p, json!("not a manifest")));
        p.drive();
    }
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::Suspended));
    assert!(!p.host.grant().allows(Capability::PushEvents));
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::ManifestUnparseable { .. })
    )));
}

/// §17.3: a malformed announcement is reported by the shape rule `mcpl check` fails it by
/// ([`crate::protocol::manifest::manifest_changed_defects`]), and still fetches (it is only
/// a hint); a well-formed one is not reported. `HostSession` reports alike
/// (`host_session.rs`, `s17_3_a_malformed_announcement_is_reported_and_still_fetches`).
#[test]
fn s17_3_a_malformed_announcement_is_reported_and_still_fetches() {
    let bad_params = |p: &Pair| -> Vec<String> {
        p.host_out
            .iter()
            .filter_map(|o| match o {
                HostOutput::Diagnostic(HostDiagnostic::BadParams { method, detail })
                    if method == "mcpl/manifestChanged" =>
                {
                    Some(detail.clone())
                }
                _ => None,
            })
            .collect()
    };
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let good = json!({"revision": "sha256:QLXa7BigUFzNlw_IWPSqpYbDzdvBX7PVQIPS5lgnkaw", "domains": ["capabilities"]});
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": good}));
    p.step_host();
    assert_eq!(bad_params(&p), Vec::<String>::new());
    assert_eq!(fetches(&p), 1);
    let bad = json!({"revision": "sha256:y", "domains": ["tools"], "added": ["a"]});
    let expected = crate::protocol::manifest::manifest_changed_defects(Some(&bad)).join("; ");
    assert!(expected.contains("unknown domain") && expected.contains("payload member"));
    p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": bad}));
    p.step_host();
    assert_eq!(bad_params(&p), [expected]);
}

#[test]
fn s17_8_a_follow_up_due_before_ready_is_fetched_and_later_announcements_still_fetch() {
    // Two announcements during the initial policy exchange: the first fetches, the second
    // is coalesced into a follow-up. The fetch is answered before the receipt.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // its result: initialized and the policy Request go out
    p.server_writes(announce());
    p.server_writes(announce());
    p.step_host();
    p.step_host();
    assert_eq!(fetches(&p), 1, "one fetch, one coalesced follow-up");
    let id = last_fetch_id(&p);
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": id, "result": manifest()}).to_string());
    p.step_host(); // the fetch answer, read while the policy Request is in flight
                   // The coalesced follow-up is due now (a token was spent for it).
    assert_eq!(fetches(&p), 2, "the coalesced follow-up is fetched");
}

#[test]
fn s17_8_announcements_after_ready_are_fetched_after_a_follow_up_came_due_before_ready() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host();
    p.server_writes(announce());
    p.server_writes(announce());
    p.step_host();
    p.step_host();
    let id = last_fetch_id(&p);
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": id, "result": manifest()}).to_string());
    p.step_host();
    p.drive();
    while answer_fetch(&mut p, manifest()) {
        p.drive();
    }
    assert_eq!(p.connected(), vec![&Ok(())]);
    let before = fetches(&p);
    // Much later (the bucket refilled), the server announces a change: it must be fetched.
    p.now += Duration::from_secs(3600);
    p.server_writes(announce());
    p.drive();
    assert_eq!(
        fetches(&p),
        before + 1,
        "an announcement once ready is fetched (§17.5 revocations depend on it)"
    );
}

#[test]
fn s17_3_a_manifest_change_on_a_live_connection_is_declared_and_announced() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(p
        .server
        .request(p.now, "push/event", sports_push())
        .is_err());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.collect();
    let sent = announcements_in_flight(&p);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["params"],
        json!({ "revision": "r2", "domains": ["featureSets"] })
    );
    // §17.5: the added set is derived under the grant in force, so it may be used at once.
    assert!(p.server.request(p.now, "push/event", sports_push()).is_ok());
}

#[test]
fn s17_8_changes_made_before_the_driver_polls_are_one_announcement() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.server
        .manifest_changed(manifest(), changed("r3", &[ChangeDomain::Capabilities]));
    p.collect();
    let sent = announcements_in_flight(&p);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["params"],
        json!({ "revision": "r3", "domains": ["capabilities", "featureSets"] })
    );
}

#[test]
fn s17_10_a_change_before_initialize_is_answered_by_initialize_not_announced() {
    use crate::manifest::domains::ChangeDomain;
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.host.start(p.now);
    p.step_server(); // initialize
    assert!(announcements_in_flight(&p).is_empty());
    let init: Value =
        serde_json::from_str(p.to_host.front().expect("initialize answered")).expect("json");
    assert!(
        init["result"]["capabilities"]["experimental"]["mcpl"]["featureSets"]["sports"].is_object(),
        "{init}"
    );
    p.drive();
    assert!(p.server.request(p.now, "push/event", sports_push()).is_ok());
}

#[test]
fn s17_4_a_fetch_is_answered_with_the_manifest_in_force_when_the_rules_say_so() {
    use crate::manifest::domains::ChangeDomain;
    let mut rules = server_rules();
    rules.answers_manifest_fetch = true;
    let mut p = Pair::connect(&["pushEvents"], rules);
    p.server.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    p.collect();
    p.step_host(); // the announcement: the host fetches
    let fetch = last_fetch_id(&p);
    p.step_server();
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(fetch))
        .expect("answered by the state machine");
    assert_eq!(answer["result"], manifest_with_sports());
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { method, .. } if method == "mcpl/manifest")));
}

/// §16.5, §17.5: ontology acceptance is an input of the state machine: accepted as declared
/// in the manifest in force, withdrawn on request, and invalidated by a fetched manifest
/// that changes the declaration.
#[test]
#[allow(deprecated)] // `accept_ontology`'s own rule, unchanged for existing callers.
fn s16_5_an_accepted_ontology_is_invalidated_by_a_changed_declaration() {
    let mut rules = server_rules();
    rules.manifest["featureSets"]["news"]["tagOntology"] = json!({ "tags": { "acme:a": {} } });
    let mut p = Pair::new(&["pushEvents"], rules.clone());
    assert!(
        p.host.accept_ontology("news").is_err(),
        "nothing reviewed yet"
    );
    p.host.start(p.now);
    p.drive();
    let digest = p.host.accept_ontology("news").expect("declared");
    assert_eq!(p.host.revoke_ontology("news"), Some(digest.clone()));
    assert_eq!(p.host.revoke_ontology("news"), None);
    assert_eq!(p.host.accept_ontology("news").as_ref(), Ok(&digest));
    p.host.set_consumer_patterns(["acme:a"]).unwrap();
    assert!(matches!(
        p.host.set_consumer_patterns(["acme:a", "a"]),
        Err(StateError::TagPatterns(e)) if e.len() == 1
    ));
    let id = p.host.refresh_manifest(p.now).expect("up");
    assert!(p.host.is_pending(id));
    p.drive();
    let mut changed = rules.manifest.clone();
    changed["featureSets"]["news"]["tagOntology"] = json!({ "tags": { "acme:b": {} } });
    assert!(answer_fetch(&mut p, changed));
    p.drive();
    assert!(!p.host.is_pending(id), "answered");
    assert_eq!(
        p.host.review().and_then(|r| r.accepted_ontology("news")),
        None
    );
    let receipt = last_change_receipt(&p);
    use crate::manifest::domains::ChangeImpact;
    let impacts: Vec<_> = receipt.impacts.iter().map(|i| i.impact).collect();
    assert!(impacts.contains(&ChangeImpact::OntologyAcceptanceInvalidated));
    assert!(impacts.contains(&ChangeImpact::OntologyReferenceUndeclared));
}

/// The latest change receipt the host handed out (§17.6).
fn last_change_receipt(p: &Pair) -> &crate::manifest::review::ChangeReceipt {
    p.host_out
        .iter()
        .rev()
        .find_map(|o| match o {
            HostOutput::Event(HostEvent::ManifestChange(r)) => Some(r),
            _ => None,
        })
        .expect("a change receipt")
}

/// §17.6: tag patterns a sans-I/O host sets before the manifest is reviewed are kept and
/// watched once it is; they were dropped with `Ok(())`, so a rule's reference was never
/// watched and no `ontology-reference-undeclared` came.
#[test]
fn s17_6_consumer_patterns_set_before_the_review_are_watched() {
    let mut rules = server_rules();
    rules.manifest["featureSets"]["news"]["tagOntology"] = json!({ "tags": { "acme:a": {} } });
    let mut p = Pair::new(&["pushEvents"], rules.clone());
    p.host.set_consumer_patterns(["acme:a"]).unwrap();
    p.host.start(p.now);
    p.drive();
    let id = p.host.refresh_manifest(p.now).expect("up");
    p.drive();
    let mut changed = rules.manifest.clone();
    changed["featureSets"]["news"]["tagOntology"] = json!({ "tags": { "acme:b": {} } });
    assert!(answer_fetch(&mut p, changed));
    p.drive();
    assert!(!p.host.is_pending(id), "answered");
    let receipt = last_change_receipt(&p);
    use crate::manifest::domains::ChangeImpact;
    assert!(
        receipt
            .impacts
            .iter()
            .any(|i| i.impact == ChangeImpact::OntologyReferenceUndeclared && i.subject == "acme:a"),
        "{receipt:?}"
    );
}

/// A driver forwarding events into a bounded application queue reports the queue's room
/// (`set_event_room`): a `push/event` past it is answered `host_busy` (never told delivered
/// and then dropped), an event with no answer is reported as `EventDropped`, and room made
/// again is used.
#[test]
fn events_past_the_applications_room_are_refused_not_dropped() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.host.set_event_room(1);
    let list_changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    for frame in [push(120, "a"), push(121, "b"), list_changed.clone()] {
        p.host
            .handle_message(p.now, Message::parse(&frame.to_string()).unwrap());
    }
    let mut answers = Vec::new();
    let mut events = 0;
    let mut dropped = Vec::new();
    while let Some(o) = p.host.poll_output() {
        match o {
            HostOutput::Transmit(Transmission::Message(Message::Response(r))) => {
                answers.push(r.outcome)
            }
            HostOutput::Event(_) => events += 1,
            HostOutput::Diagnostic(HostDiagnostic::EventDropped { event }) => dropped.push(event),
            _ => {}
        }
    }
    assert_eq!(events, 1);
    assert_eq!(answers[0], Ok(json!({"accepted": true})));
    assert_eq!(
        answers[1],
        Ok(json!({"accepted": false, "reason": "host_busy"}))
    );
    assert_eq!(dropped, ["ManifestChange"]);
    // The application took what it had: room again.
    p.host.set_event_room(1);
    p.host
        .handle_message(p.now, Message::parse(&push(122, "b").to_string()).unwrap());
    assert!(std::iter::from_fn(|| p.host.poll_output())
        .any(|o| matches!(o, HostOutput::Event(HostEvent::Push { .. }))));
}

/// §17.8 (F8): announcements dropped over the fetch limit are told as one
/// `ManifestFetchDropped` carrying the total: at the first drop, then at most once per
/// window while drops go on, and once more when a fetch starts again. Before, each drop
/// was a diagnostic of its own (20,000 announcements, 20,000 diagnostics).
#[test]
fn s17_8_dropped_announcements_are_told_once_per_window_with_the_total() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.manifest_fetch_burst = 1;
    rules.manifest_fetch_per_sec = 0.05; // a token each 20 s
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).expect("rules");
    p.host.start(p.now);
    p.drive();
    let announce = |p: &mut Pair, n: usize| {
        for _ in 0..n {
            p.server_writes(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged",
                "params": {}}));
        }
        p.drive();
    };
    let told = |p: &mut Pair, from: usize| -> Vec<u64> {
        p.host_outputs_from(from)
            .into_iter()
            .filter_map(|o| match o {
                HostOutput::Diagnostic(HostDiagnostic::ManifestFetchDropped { dropped_total }) => {
                    Some(dropped_total)
                }
                _ => None,
            })
            .collect()
    };
    announce(&mut p, 1);
    assert!(answer_fetch(&mut p, manifest()), "the one token fetches");
    p.drive();
    let from = p.host_out.len();
    announce(&mut p, 1000);
    assert_eq!(
        told(&mut p, from),
        [1],
        "the first drop at once, the rest counted"
    );
    let from = p.host_out.len();
    p.now += Duration::from_secs(9);
    announce(&mut p, 10);
    assert_eq!(told(&mut p, from), Vec::<u64>::new(), "within the window");
    p.now += Duration::from_secs(1);
    announce(&mut p, 10);
    assert_eq!(
        told(&mut p, from),
        [1011],
        "the first drop past the window, with the total"
    );
    let from = p.host_out.len();
    p.now += Duration::from_secs(5);
    announce(&mut p, 5);
    assert_eq!(told(&mut p, from), Vec::<u64>::new());
    // 21 s after the last fetch a token is back: the run ends, told with its total.
    p.now += Duration::from_secs(6);
    announce(&mut p, 1);
    assert_eq!(told(&mut p, from), [1025]);
    assert!(answer_fetch(&mut p, manifest()), "the token fetched");
}
