//! The handshake, readiness and the policy exchange (§3.2, §3.3, §4.1, §5.1, §5.3, §6.6, §6.7).

use super::*;
use crate::policy::Form;

#[test]
fn s5_3_handshake_then_policy_request_then_ready_in_mcpl() {
    let p = Pair::connect(&["pushEvents"], server_rules());
    assert_eq!(p.connected(), vec![&Ok(())]);
    assert_eq!(p.host.mode(), &Mode::Mcpl);
    assert!(p.host.is_ready());
    assert!(p.host.grant().allows(Capability::PushEvents));
    // §5.4: nothing the policy did not name is granted, whatever the server advertised.
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.server.is_ready());
    assert_eq!(p.server.grant(), p.host.grant());
    assert_eq!(p.host.label(), "pair-server");
    assert!(matches!(
        p.server_out.last(),
        Some(ServerOutput::PolicyApplied { .. })
    ));
}

#[test]
fn s5_3_a_push_right_behind_the_receipt_is_admitted() {
    // RELIABILITY.md's first ordering bug: readiness set in another task refused a greeting
    // written right after the receipt. In wire order the receipt is handled first.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // its result: the host sends initialized and the policy Request
    p.step_server(); // initialized
    p.step_server(); // the policy Request: the receipt is on the wire to the host
    assert!(p.server.is_ready(), "the server applied the policy");
    assert!(!p.host.is_ready(), "its receipt is still on the wire");
    let id = p
        .server
        .request(p.now, "push/event", push(0, "e1")["params"].clone())
        .expect("ready and granted");
    p.drive();
    assert_eq!(p.pushes(), 1);
    assert!(p.server_out.iter().any(|o| matches!(
        o,
        ServerOutput::Response { id: got, outcome: Ok(v) } if *got == id && v["accepted"] == true
    )));
}

#[test]
fn s5_3_a_push_read_before_the_receipt_is_refused_however_late_judged() {
    // The mirror case, which failed open: a push on the wire ahead of the receipt is judged
    // under the state it arrived in.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // initialize result: the host sends initialized + the policy Request
    p.step_server(); // initialized
    p.step_server(); // the policy Request: the receipt is now on the wire to the host
                     // A racing server slips a push ahead of its receipt.
    let receipt = p.to_host.pop_front().expect("receipt in flight");
    p.server_writes(push(900, "early"));
    p.to_host.push_back(receipt);
    p.drive();
    let answer = p.host_answer(900).expect("the push was answered");
    assert_eq!(answer["error"]["code"], -32002);
    assert_eq!(p.pushes(), 0);
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::PrivilegedBeforeReady { method }) if method == "push/event"
    )));
    // The receipt after it still made the session ready.
    assert!(p.host.is_ready());
}

#[test]
fn s6_7_a_narrowing_applies_before_the_request_and_a_widening_on_the_receipt() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.host
        .set_policy(p.now, vec![])
        .expect("no exchange in flight");
    // Narrowed at once, before the Request is even written.
    assert!(!p.host.grant().allows(Capability::PushEvents));
    // A push already on the wire is refused: the narrowing wins.
    p.server_writes(push(60, "n1"));
    p.drive();
    assert_eq!(p.host_answer(60).unwrap()["error"]["code"], -32002);
    // Widening back activates only with the accepting receipt.
    p.host
        .set_policy(p.now, vec!["pushEvents".into()])
        .expect("previous exchange ended");
    assert!(!p.host.grant().allows(Capability::PushEvents));
    assert_eq!(
        p.host.set_policy(p.now, vec![]),
        Err(StateError::PolicyInFlight)
    );
    p.drive();
    assert!(p.host.grant().allows(Capability::PushEvents));
    let changes: Vec<_> = p
        .host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::PolicyChanged(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(changes.len(), 2);
    assert!(changes[1].activated.contains(Capability::PushEvents));
}

/// §6.7: a `disabled` carried by a Notification is a reduction; the host applies it before
/// the Notification is written, and every later policy Request repeats it after the host's
/// configured `disabled` (one rule with `HostSession::disable_by_notification`:
/// `HostPolicy::disable_later`).
#[test]
fn s6_7_disabling_by_notification_narrows_the_host_first_and_sticks() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.disabled = vec!["configured".into()];
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).expect("policy parses");
    p.host.start(p.now);
    p.drive();
    p.server_writes(push(70, "before"));
    p.drive();
    assert_eq!(p.host_answer(70).unwrap()["result"]["accepted"], true);

    p.host
        .disable_by_notification(&["news".to_owned()])
        .expect("ready, nothing in flight");
    // Applied before anything is written: a push already on the wire is refused (-32001:
    // declared, but not available now).
    p.server_writes(push(71, "after"));
    let written = p.host_wrote.len();
    p.drive();
    let note: Value = serde_json::from_str(&p.host_wrote[written]).unwrap();
    assert_eq!(note["method"], "featureSets/update");
    assert_eq!(note["params"], json!({ "disabled": ["news"] }));
    assert!(note.get("id").is_none(), "a Notification: {note}");
    assert_eq!(p.host_answer(71).unwrap()["error"]["code"], -32001);
    assert!(
        p.host.grant().allows(Capability::PushEvents),
        "nothing narrowed the grant"
    );

    // A later Request repeats it after the configured list, so it never re-enables the set.
    let written = p.host_wrote.len();
    p.host
        .set_policy(p.now, vec!["pushEvents".into()])
        .expect("nothing in flight");
    p.drive();
    let request: Value = serde_json::from_str(&p.host_wrote[written]).unwrap();
    assert_eq!(request["method"], "featureSets/update");
    assert_eq!(request["params"]["disabled"], json!(["configured", "news"]));
    p.server_writes(push(72, "later"));
    p.drive();
    assert_eq!(p.host_answer(72).unwrap()["error"]["code"], -32001);

    // Past the list bound: refused before anything is sent or applied.
    let many: Vec<String> = (0..1025).map(|i| format!("s{i}")).collect();
    let written = p.host_wrote.len();
    assert!(matches!(
        p.host.disable_by_notification(&many),
        Err(StateError::Selection(_))
    ));
    p.drive();
    assert_eq!(p.host_wrote.len(), written);
}

/// §6.3: a name given to `disable_by_notification` that is neither a feature-set name nor a
/// pattern (`"a b"`, `""`, `"memory..x"`, `"memory.*x"`) was sent and applied: it selects
/// nothing, so the tester believed sets disabled that were not, and every later policy
/// Request repeated it in `disabled`. Refused as the configured `enabled`/`disabled`
/// entries are (`HostRules::defects`, one rule): nothing sent, nothing applied, and a
/// later Request carries none of it; well-formed names and patterns still go.
#[test]
fn s6_3_disabling_by_notification_refuses_a_name_that_is_not_a_feature_set_pattern() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for bad in ["a b", "", "memory..x", "memory.*x", ".memory"] {
        let names = vec!["news".to_owned(), bad.to_owned()];
        let written = p.host_wrote.len();
        match p.host.disable_by_notification(&names) {
            Err(StateError::Selection(why)) => {
                assert!(why.contains(&format!("{bad:?}")), "{bad:?}: {why}");
                assert!(why.contains("§6.3"), "{bad:?}: {why}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
        p.drive();
        assert_eq!(p.host_wrote.len(), written, "{bad:?}: nothing sent");
    }
    let disabled = &p.host.review().expect("reviewed").selection().disabled;
    assert!(disabled.is_empty(), "nothing applied: {disabled:?}");
    let written = p.host_wrote.len();
    p.host
        .set_policy(p.now, vec!["pushEvents".into()])
        .expect("nothing in flight");
    p.drive();
    let request: Value = serde_json::from_str(&p.host_wrote[written]).unwrap();
    assert_eq!(request["method"], "featureSets/update");
    let carried = request["params"].get("disabled").cloned();
    assert!(
        carried.is_none() || carried == Some(json!([])),
        "none of it repeated: {request}"
    );
    for good in ["news", "memory.*", "*", "a-b_c:d"] {
        p.drive();
        assert_eq!(
            p.host.disable_by_notification(&[good.to_owned()]),
            Ok(()),
            "{good:?}"
        );
    }
}

/// Disabling by Notification again and again keeps the host's selection to the sets named,
/// each once: every call re-read the whole list so far and appended all of it, so the
/// selection grew quadratically with the calls, past the `disabled` list's bound (30 calls
/// naming ten 150 KB names each took the inspector to 2.8 GB).
#[test]
fn s6_7_repeated_disabling_by_notification_keeps_each_set_once() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    for round in 0..50 {
        let names: Vec<String> = (0..10)
            .map(|i| format!("set{}", (round * 3 + i) % 40))
            .collect();
        p.host.disable_by_notification(&names).expect("ready");
        p.drive();
    }
    let disabled = &p.host.review().expect("reviewed").selection().disabled;
    let unique: std::collections::BTreeSet<&str> = disabled.iter().map(|n| n.as_str()).collect();
    assert_eq!(unique.len(), disabled.len(), "each set once: {disabled:?}");
    assert_eq!(disabled.len(), 40);
}

/// A disable by Notification waits like a policy change: not before the connection is up,
/// not while a policy Request is in flight, never on an MCP-only connection (§3.2).
#[test]
fn s6_7_disabling_by_notification_is_refused_while_a_policy_exchange_is_in_flight() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let names = ["news".to_owned()];
    assert_eq!(
        p.host.disable_by_notification(&names),
        Err(StateError::NotConnected)
    );
    p.host.start(p.now);
    // The initial policy Request is in flight.
    p.step_server();
    p.step_host();
    assert_eq!(
        p.host.disable_by_notification(&names),
        Err(StateError::PolicyInFlight)
    );
    p.drive();
    p.host.set_policy(p.now, vec![]).expect("nothing in flight");
    assert_eq!(
        p.host.disable_by_notification(&names),
        Err(StateError::PolicyInFlight)
    );
    p.drive();
    assert_eq!(p.host.disable_by_notification(&names), Ok(()));

    let mut mcp = Pair::connect_plain_mcp(&["tools"]);
    assert!(
        matches!(mcp.host.mode(), Mode::McpOnly(_)),
        "{:?}",
        mcp.host.mode()
    );
    assert!(matches!(
        mcp.host.disable_by_notification(&names),
        Err(StateError::McpOnly(_))
    ));
}

#[test]
fn s5_3_an_unanswered_policy_request_times_out_into_mcp_only_and_is_told() {
    let mut p = Pair::new(&["pushEvents", "tools"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host(); // the policy Request is now on the wire; the server never answers it
    let deadline = p
        .host
        .poll_timeout()
        .expect("the policy Request has a deadline");
    assert_eq!(deadline, p.now + Duration::from_secs(10));
    p.to_server.clear();
    p.host.handle_timeout(deadline);
    p.collect();
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::PolicyTimeout));
    assert!(p.host.grant().allows(Capability::Tools));
    assert!(!p.host.grant().allows(Capability::PushEvents));
    // §6.7: the server may believe the grant it was told; the reduction is told.
    let told: Vec<Value> = p
        .to_server
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    assert!(told.iter().any(|v| v["method"] == "featureSets/update"
        && v["params"]["effectiveCapabilities"]
            .as_array()
            .is_some_and(|a| !a.iter().any(|c| c == "pushEvents"))));
    assert!(
        p.connected().is_empty(),
        "connected once the reduction ends"
    );
    p.drive();
    assert_eq!(p.connected(), vec![&Ok(())]);
}

#[test]
fn s6_7_a_refusal_naming_close_ends_the_connection() {
    let mut rules = server_rules();
    rules.required = Some((
        crate::capability::CapabilitySet::EMPTY.with(Capability::ChannelsRegister),
        crate::policy::Fallback::Close,
    ));
    let p = Pair::connect(&["pushEvents"], rules);
    assert_eq!(p.connected(), vec![&Err(ConnectError::Refused)]);
    assert!(p.host_out.contains(&HostOutput::Close));
    assert!(p.server_out.contains(&ServerOutput::Close));
}

#[test]
fn s3_3_a_server_without_mcpl_is_mcp_only_with_tools_at_most() {
    let p = Pair::connect_plain_mcp(&["tools", "pushEvents"]);
    assert_eq!(p.host.mode(), &Mode::McpOnly(McpOnlyReason::NotAdvertised));
    assert_eq!(
        p.host.grant().capabilities(),
        crate::capability::CapabilitySet::EMPTY.with(Capability::Tools)
    );
    // No policy Request goes to a server with no MCPL to configure.
    assert!(!p.to_server.iter().any(|t| t.contains("featureSets/update")));
}

#[test]
fn s4_1_a_host_method_sent_by_the_server_is_not_found() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {}}));
    p.server_writes(json!({"jsonrpc": "2.0", "id": 71, "method": "ping"}));
    p.drive();
    assert_eq!(p.host_answer(70).unwrap()["error"]["code"], -32601);
    assert_eq!(p.host_answer(71).unwrap()["result"], json!({}));
}

/// The server's admission (`session::admit_at_server`, as `server::Server`): nothing but
/// `initialize` and `ping` before `initialize`; then, on an MCP-only connection, MCP methods
/// run ungated and MCPL ones do not exist (§3.2).
#[test]
fn s3_2_a_server_admits_by_initialize_then_mcp_only() {
    let mut server = ServerState::new(server_rules());
    let answer = |server: &mut ServerState, frame: Value| -> Value {
        server.handle_message(
            Instant::now(),
            Message::parse(&frame.to_string()).expect("valid"),
        );
        let mut last = Value::Null;
        while let Some(o) = server.poll_output() {
            if let ServerOutput::Transmit(m) = o {
                last = serde_json::from_str(&m.to_json()).expect("valid");
            }
        }
        last
    };
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}),
    );
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    );
    assert_eq!(r["result"], json!({}));
    // A host without `experimental.mcpl`.
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "plain", "version": "1"}}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let r = answer(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 4, "method": "context/beforeInference", "params": {}}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");
    server.handle_message(
        Instant::now(),
        Message::parse(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "t"}})
                .to_string(),
        )
        .expect("valid"),
    );
    assert!(matches!(
        server.poll_output(),
        Some(ServerOutput::Request { method, .. }) if method == "tools/call"
    ));
}

/// §3.2, §6.7: on a connection whose host does not speak MCPL 0.5, `featureSets/update` is
/// no method: the one server rule (`host_notification`, as `server::Server` applies it)
/// reports it and hands nothing out; the application's notifications still come out.
#[test]
fn s3_2_a_policy_notification_on_an_mcp_only_connection_is_reported_not_applied() {
    let mut s = ServerState::new(server_rules());
    let now = Instant::now();
    let feed = |s: &mut ServerState, v: Value| {
        s.handle_message(now, Message::parse(&v.to_string()).unwrap());
    };
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "mcp-host", "version": "0"}}}),
    );
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "method": "featureSets/update",
        "params": {"effectiveCapabilities": ["pushEvents"]}}),
    );
    feed(
        &mut s,
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
    );
    let out: Vec<ServerOutput> = std::iter::from_fn(|| s.poll_output()).collect();
    assert!(!s.mcpl() && !s.is_ready());
    let rest: Vec<&ServerOutput> = out
        .iter()
        .filter(|o| !matches!(o, ServerOutput::Transmit(_)))
        .collect();
    assert!(
        matches!(
            rest[..],
            [
                ServerOutput::Diagnostic(ServerDiagnostic::UnknownNotification {
                    mcp_only: true,
                    ..
                }),
                ServerOutput::Notification(n),
            ] if n.method == "notifications/roots/list_changed"
        ),
        "{rest:?}"
    );
}

/// Issue #24 item 3: the feature-set step every host answers a tagged server request by
/// (`rules::gate_tagged_request`, §6.4 rule 2, §6.5, §6.6), which `judge_push`,
/// `check_inference_feature_set` and the checkers' strict hosts call alike.
#[test]
fn s6_6_tagged_requests_are_gated_by_one_rule() {
    use crate::capability::Grant;
    use crate::jsonrpc::codes;
    use crate::policy::{derive, FeatureSets, Selection};
    let (decls, _) = FeatureSets::parse(&json!({
        "a.push": { "description": "a", "uses": ["pushEvents"] },
        "b.hints": { "description": "b", "uses": ["modelInfo"] },
        "c.infer": { "description": "c", "uses": ["inferenceRequest"] }
    }));
    let grant = Grant::from_patterns(["pushEvents", "modelInfo"]).unwrap();
    let statuses = derive(&decls, &grant, &Selection::default());
    let code = |method: &str, params: Value| {
        let mut diags = Vec::new();
        let r = rules::gate_tagged_request(&mut diags, method, Some(&params), &decls, &statuses);
        (r.err().map(|e| e.code), diags.len())
    };
    assert_eq!(
        code("push/event", json!({"featureSet": "a.push"})),
        (None, 0)
    );
    assert_eq!(
        code("push/event", json!({"featureSet": "zzz"})),
        (Some(codes::UNKNOWN_FEATURE_SET), 0)
    );
    assert_eq!(
        code("inference/request", json!({"featureSet": "c.infer"})),
        (Some(codes::FEATURE_SET_NOT_ENABLED), 0)
    );
    // Available, but its `uses` lacks pushEvents: refused and reported (§6.4 rule 2).
    assert_eq!(
        code("push/event", json!({"featureSet": "b.hints"})),
        (Some(codes::CAPABILITY_DENIED), 1)
    );
    assert_eq!(
        code("push/event", json!({})),
        (Some(codes::INVALID_PARAMS), 1)
    );
}

#[test]
fn s6_7_a_revocation_fetched_while_the_reduction_is_in_flight_is_told_too() {
    let policy = ["pushEvents", "channels.register"];
    let mut p = Pair::new(&policy, server_rules());
    p.host.start(p.now);
    p.step_server(); // initialize
    p.step_host(); // initialized + policy Request
    p.server_writes(announce());
    p.step_host(); // fetch #1 goes out
    let fetch1 = last_fetch_id(&p);
    p.step_server(); // initialized
    p.step_server(); // policy Request: its receipt is on the wire to the host
    p.step_server(); // the fetch reaches the server application (not answered there)
                     // Fetch #1 answered ahead of the receipt: `channels` is gone.
    let mut smaller = manifest();
    smaller.as_object_mut().unwrap().remove("channels");
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch1, "result": smaller}).to_string());
    p.step_host(); // the revocation, during the exchange
    p.step_host(); // the receipt: the grant applied is narrower than told → reduction Request
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    assert!(p.host.grant().allows(Capability::PushEvents));
    assert!(p.connected().is_empty(), "the reduction is in flight");
    // While the reduction is in flight, a second change removes pushEvents too.
    p.server_writes(announce());
    p.step_host(); // fetch #2 goes out
    let fetch2 = last_fetch_id(&p);
    assert_ne!(fetch1, fetch2);
    let smallest = json!({"version": "0.5", "featureSets": {}});
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch2, "result": smallest}).to_string());
    p.step_host();
    assert!(
        !p.host.grant().allows(Capability::PushEvents),
        "revoked host-side"
    );
    p.drive();
    assert_eq!(p.connected(), vec![&Ok(())]);
    // §6.7: any change to the effective grant goes by Request; the server must not be left
    // believing a capability the host revoked.
    assert!(
        !p.server.grant().allows(Capability::PushEvents),
        "the server was told the second revocation"
    );
}

/// Found by `tests/model_host_state.rs`: a revocation fetched while a widening Request is in
/// flight is told at once by a reduction Request, which the server reads, and applies, after
/// the widening. The widening's accepting receipt, read later, must not activate what that
/// reduction withheld: the server's last word is the reduction (§6.7: every change to the
/// grant goes by Request, and nothing is activated the server does not believe it has).
#[test]
fn s6_7_a_widening_in_flight_activates_no_more_than_a_later_reduction_told() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(!p.host.grant().allows(Capability::ChannelsRegister));
    p.host
        .set_policy(p.now, vec!["pushEvents".into(), "channels.register".into()])
        .unwrap();
    p.server_writes(announce());
    p.step_host(); // the fetch goes out behind the widening Request
    let fetch = last_fetch_id(&p);
    p.step_server(); // the widening Request: applied, its receipt is on the wire to the host
    p.step_server(); // the fetch reaches the server application
                     // The fetch answered ahead of that receipt: `pushEvents` is gone.
    let smaller = json!({"version": "0.5", "channels": {"register": {}}, "featureSets": {}});
    p.to_host
        .push_front(json!({"jsonrpc": "2.0", "id": fetch, "result": smaller}).to_string());
    p.step_host(); // the revocation: nothing is left, and a reduction Request tells so
    assert!(!p.host.grant().allows(Capability::PushEvents));
    p.drive(); // the widening's receipt; the server reads the reduction and answers it
    let change = p
        .host_out
        .iter()
        .find_map(|o| match o {
            HostOutput::PolicyChanged(c) => Some(c),
            _ => None,
        })
        .expect("the change ended");
    assert!(change.activated.is_empty(), "{change:?}");
    assert!(change.not_activated.contains(Capability::ChannelsRegister));
    assert!(
        !p.host.grant().allows(Capability::ChannelsRegister),
        "activated past the reduction the server applied last"
    );
    assert_eq!(p.server.grant(), p.host.grant());
}

#[test]
fn s3_2_an_mcp_only_connection_is_not_told_of_manifest_changes() {
    use crate::manifest::domains::ChangeDomain;
    let mut s = ServerState::new(server_rules());
    initialize_plain(&mut s);
    while s.poll_output().is_some() {}
    assert!(!s.mcpl());
    s.manifest_changed(
        manifest_with_sports(),
        changed("r2", &[ChangeDomain::FeatureSets]),
    );
    assert_eq!(s.poll_output(), None);
}

#[test]
fn s5_3_every_accepted_policy_request_is_a_ready_moment_and_only_the_first_is_first() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert_eq!(ready_moments(&p), [true]);
    p.host
        .set_policy(p.now, vec!["pushEvents".into(), "channels.register".into()])
        .expect("a new policy");
    p.drive();
    assert_eq!(ready_moments(&p), [true, false]);
}

#[test]
fn s6_7_a_hook_whose_own_set_is_unavailable_is_answered_empty_without_running() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        split_hook_rules("sys"),
    );
    let id = p
        .host
        .before_inference(p.now, hook_params())
        .expect("an inject leaf is granted");
    p.drive();
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].accepted.is_empty() && v[0].rejected.is_empty(),
        "{:?}",
        v[0]
    );
    assert!(v[0].failure.is_none(), "{:?}", v[0]);
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Hook { id: got, .. } if *got == id)));
}

#[test]
fn s5_1_initialize_carries_the_servers_instructions() {
    let mut rules = server_rules();
    rules.instructions = Some("Ask about the news.".into());
    let mut s = ServerState::new(rules);
    initialize_plain(&mut s);
    let Some(ServerOutput::Transmit(Transmission::Message(Message::Response(r)))) = s.poll_output()
    else {
        panic!("initialize answered first")
    };
    let result = r.outcome.expect("accepted");
    assert_eq!(result["instructions"], "Ask about the news.");
    assert_eq!(result["capabilities"]["tools"], json!({}));
    assert_eq!(result["capabilities"]["experimental"]["mcpl"], manifest());
}

#[test]
fn s6_7_s7_s10_5_removed_surfaces_are_unknown_and_never_reach_the_application() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 11, "method": "scope/elevate", "params": {}}),
    );
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "featureSets/changed", "params": {}}),
    );
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(11))
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let out = &p.server_out[from..];
    assert!(
        matches!(
            out,
            [ServerOutput::Diagnostic(ServerDiagnostic::UnknownNotification { method, mcp_only: false })]
                if method == "featureSets/changed"
        ),
        "{out:?}"
    );
}

/// §6.7, the interleaving `reliability_host_race.rs` hunts with threads: a `push/event` for
/// a feature set only a widening's receipt makes available, read before that receipt, is
/// judged under the grant in force where it was read (`-32001`); read after it, admitted.
#[test]
fn s6_7_a_push_for_a_set_only_the_widening_enables_read_before_its_receipt_is_refused() {
    let mut rules = server_rules();
    rules.manifest["featureSets"]["relay"] = json!({ "uses": ["pushEvents", "channels.register"] });
    let mut p = Pair::connect(&["pushEvents"], rules);
    p.host
        .set_policy(p.now, vec!["pushEvents".into(), "channels.register".into()])
        .expect("no exchange in flight");
    p.step_server(); // the policy Request: its receipt is now on the wire to the host
    let receipt = p.to_host.pop_front().expect("receipt in flight");
    let mut early = push(61, "r1");
    early["params"]["featureSet"] = json!("relay");
    p.server_writes(early);
    p.to_host.push_back(receipt);
    p.drive();
    assert_eq!(p.host_answer(61).unwrap()["error"]["code"], -32001);
    assert!(p.host.grant().allows(Capability::ChannelsRegister));
    let mut late = push(62, "r2");
    late["params"]["featureSet"] = json!("relay");
    p.server_writes(late);
    p.drive();
    assert_eq!(
        p.host_answer(62).unwrap()["result"],
        json!({ "accepted": true })
    );
}

/// §6.7 ("Servers MUST immediately respect a reduction"), reading for the handler budget:
/// the policy Request is answered by the state itself, not by a handler, so it takes none
/// of [`ServerRules::max_in_flight`]'s slots and is never answered busy by the state: a
/// narrowing that arrives while every slot is held applies at once. (Over the wire, the
/// peer's own `max_in_flight_requests` counts every request, this one included.)
#[test]
fn s6_7_a_policy_request_past_the_handler_budget_is_applied() {
    let mut rules = server_rules();
    rules.max_in_flight = 1;
    let mut p = Pair::connect(&["pushEvents", "tools"], rules);
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "t", "arguments": {}}})
    };
    let answer = |p: &Pair, id: i64| -> Value {
        p.to_host
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .find(|v| v["id"] == json!(id) && v.get("method").is_none())
            .unwrap_or(Value::Null)
    };
    server_reads(&mut p, call(500));
    server_reads(&mut p, call(501));
    assert_eq!(
        answer(&p, 501)["error"]["code"],
        -32000,
        "the one slot is held"
    );
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 502, "method": "featureSets/update",
               "params": {"effectiveCapabilities": ["tools"]}}),
    );
    let receipt = answer(&p, 502);
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    assert!(!p.server.grant().allows(Capability::PushEvents));
}

#[test]
fn s6_7_a_policy_notification_refused_unread_grants_nothing_and_says_so() {
    // §6.7, §6.4 fail closed: an unread Notification may have been a narrowing, so the grant
    // is dropped (readiness kept: only a Request sets it) and the driver's user told.
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(p.server.grant().allows(Capability::PushEvents));
    let generation = p.server.generation();
    p.server_out.clear();
    p.server.handle_policy_unread_as(Form::Notification);
    p.collect();
    assert!(!p.server.grant().allows(Capability::PushEvents));
    assert!(p.server.is_ready(), "a Notification never ends readiness");
    assert!(p.server.generation() > generation);
    assert!(
        p.server_out.iter().any(|o| matches!(
            o,
            ServerOutput::Diagnostic(ServerDiagnostic::PolicyMalformed {
                form: Form::Notification,
                ..
            })
        )),
        "{:?}",
        p.server_out
    );
    assert!(p
        .server
        .request(p.now, "push/event", push(0, "e1")["params"].clone())
        .is_err());
}

/// §6.7, §6.4: a driver feeding frames to `ServerState::handle_text` cannot forget a
/// policy message refused unread: a text the reading refuses that shows the policy (the
/// parser's refusal, alone or in a batch; refused at the envelope; its method escaped)
/// grants nothing and says so, in the form it shows; a batch that parses is the driver's
/// to split (its policy entry then read), so it drops nothing; a message read is handled.
#[test]
fn s6_7_a_policy_in_a_text_refused_unread_grants_nothing_by_the_state_itself() {
    let refused = [
        (
            r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["a"]}} x"#,
            Form::Notification,
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"featureSets\/update","params":{}} x"#,
            Form::Request,
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"featureSets\u002fupdate","params":{}}] x"#,
            Form::Notification,
        ),
        (
            r#"{"jsonrpc":"1.0","id":9,"method":"featureSets/update","params":{}}"#,
            Form::Request,
        ),
    ];
    for (text, form) in refused {
        let mut p = Pair::connect(&["pushEvents"], server_rules());
        assert!(p.server.grant().allows(Capability::PushEvents));
        p.server_out.clear();
        assert!(p.server.handle_text(p.now, text).is_err(), "{text}");
        p.collect();
        assert!(!p.server.grant().allows(Capability::PushEvents), "{text}");
        assert!(
            p.server_out.iter().any(|o| matches!(
                o,
                ServerOutput::Diagnostic(ServerDiagnostic::PolicyMalformed { form: f, .. })
                    if *f == form
            )),
            "{text}: {:?}",
            p.server_out
        );
    }
    // A batch that parses: the driver's to split, nothing dropped here.
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let batch = r#"[{"jsonrpc":"2.0","method":"featureSets/update","params":{}}]"#;
    assert!(p.server.handle_text(p.now, batch).is_err());
    assert!(p.server.grant().allows(Capability::PushEvents));
    // Another refused text keeps the grant; a message read is handled.
    assert!(p
        .server
        .handle_text(p.now, r#"{"jsonrpc":"2.0","method":"m"} x"#)
        .is_err());
    assert!(p.server.grant().allows(Capability::PushEvents));
    let ping = r#"{"jsonrpc":"2.0","id":"k","method":"ping"}"#;
    assert!(p.server.handle_text(p.now, ping).is_ok());
}
