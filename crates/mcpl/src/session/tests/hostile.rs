//! Regressions found by `tests/hostile_state_machines.rs` (a hostile peer, time and the
//! application against each machine), each the smallest reproduction of one defect.

use super::*;

/// No busy loop (the sans-I/O contract of `poll_timeout`/`handle_timeout`): after
/// `handle_close`, `handle_timeout` changes nothing, so no deadline may be due any more. A
/// request the application sent after the close (a race its driver cannot rule out) left
/// its deadline behind, and `poll_timeout` returned it forever: a driver sleeping until it
/// spun. Such a request is now refused ([`SendRefusal::Closed`]), and one sent before the
/// close leaves no deadline behind either.
#[test]
fn after_close_no_deadline_stays_due() {
    let mut p = inference_pair();
    p.server
        .request(p.now, "inference/request", ask(false))
        .expect("sent before the close");
    assert!(p.server.poll_timeout().is_some(), "its deadline is pending");
    p.server.handle_close(p.now);
    p.collect();
    let written = p.to_host.len();
    // Refused: no outcome would ever come for it, and nothing is written.
    assert_eq!(
        p.server.request(p.now, "inference/request", ask(false)),
        Err(SendRefusal::Closed)
    );
    assert_eq!(
        p.server
            .notify("channels/incoming", json!({ "channelId": "c" })),
        Err(SendRefusal::Closed)
    );
    p.collect();
    assert_eq!(p.to_host.len(), written);
    let later = p.now + crate::session::DEFAULT_REQUEST_TIMEOUT * 2;
    p.server.handle_timeout(later);
    let due = p.server.poll_timeout().filter(|d| *d <= later);
    assert_eq!(due, None, "handle_timeout({later:?}) left a deadline due");
}

/// No panic: a timeout past what `Instant` can hold (`Duration::MAX`, "wait for ever") is
/// no deadline, as the server's own requests read it (`server_pending`). The host added
/// every timeout to `now` with `+`, which panics on overflow: `HostState::request` with
/// `Duration::MAX`, and `start` with such an `initialize_timeout` (likewise the policy,
/// hook and manifest timeouts).
#[test]
fn a_timeout_instant_cannot_hold_is_no_deadline() {
    let now = Instant::now();
    let forever = Duration::MAX;
    let rules = HostRules {
        initialize_timeout: forever,
        policy_timeout: forever,
        hook_timeout: forever,
        manifest_timeout: forever,
        ..HostRules::new(["pushEvents"])
    };
    let mut p = Pair::new(&[], server_rules());
    p.host = HostState::new(rules, now, SystemTime::UNIX_EPOCH).expect("policy parses");
    p.host.start(now);
    assert_eq!(p.host.poll_timeout(), None, "nothing expires");
    p.drive();
    assert!(p.host.is_ready());
    let id = p
        .host
        .request(p.now, "ping", json!({}), forever)
        .expect("sent");
    let much_later = p.now + Duration::from_secs(1_000 * 365 * 24 * 3600);
    p.host.handle_timeout(much_later);
    p.collect();
    assert!(p.host.is_pending(id), "not given up: it has no deadline");
    p.drive();
    assert!(!p.host.is_pending(id), "answered");
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Response { id: r, outcome: Ok(_) } if *r == id)));
}

/// §10.5 "retain a safety timeout": a turn ends by it only once it has passed. A safety
/// timeout past what `Instant` can hold (`Duration::MAX`: "never, in practice") made the
/// tracker's deadline `now` itself, so every turn ended `TimedOut` at the first tick after
/// its `started`, and its real terminal was then reported as coming after a timeout.
#[test]
fn s10_5_a_safety_timeout_instant_cannot_hold_never_ends_a_turn() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    rules.lifecycle.safety_timeout = Duration::MAX;
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    p.drive();
    p.server.handle_timeout(p.now + Duration::from_secs(3600));
    p.collect();
    p.host
        .end_turn("i1", Terminal::Completed, None)
        .expect("open");
    p.drive();
    let ends: Vec<&TurnOutcome> = p
        .server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Turn(TurnEvent::Ended(e)) => Some(&e.outcome),
            _ => None,
        })
        .collect();
    assert!(
        matches!(ends[..], [TurnOutcome::Completed { .. }]),
        "{ends:?}"
    );
}

/// JSON-RPC 2.0 §4.2: `params` is an object or an array. The application's scalar params
/// are refused by each machine's outbound gate (`OutboundRefusal::InvalidParams`,
/// `SendRefusal::InvalidParams`, by the one rule `jsonrpc::params_shape`): no frame goes
/// out, where one did that no peer may accept (`Message::parse` refuses it).
#[test]
fn scalar_params_from_the_application_are_refused_not_sent() {
    let mut p = inference_pair();
    p.collect();
    let (host_before, server_before) = (p.to_server.len(), p.to_host.len());
    for params in [json!(false), json!(1.5), json!("hi")] {
        let kind = crate::jsonrpc::json_type_name(&params);
        assert_eq!(
            p.host
                .request(p.now, "ping", params.clone(), Duration::from_secs(5)),
            Err(StateError::NotSent(OutboundRefusal::InvalidParams(kind)))
        );
        assert_eq!(
            p.host.notify("notifications/acme", params.clone()),
            Err(StateError::NotSent(OutboundRefusal::InvalidParams(kind)))
        );
        assert_eq!(
            p.server.request(p.now, "inference/request", params.clone()),
            Err(SendRefusal::InvalidParams(kind))
        );
        assert_eq!(
            p.server.notify("notifications/acme", params),
            Err(SendRefusal::InvalidParams(kind))
        );
    }
    p.collect();
    assert_eq!(p.to_server.len(), host_before, "the host wrote nothing");
    assert_eq!(p.to_host.len(), server_before, "the server wrote nothing");
    // Structured params still go.
    p.host
        .request(p.now, "ping", json!({}), Duration::from_secs(5))
        .expect("an object is params");
    p.collect();
    assert_eq!(p.to_server.len(), host_before + 1, "the ping is written");
    // `null` params go as no member (§4.2), from both machines (their generic `notify`
    // sends typed methods only, whose params are objects).
    p.host
        .request(p.now, "ping", Value::Null, Duration::from_secs(5))
        .expect("sent");
    p.server.request(p.now, "ping", Value::Null).expect("sent");
    p.collect();
    for text in p
        .to_server
        .iter()
        .skip(host_before + 1)
        .chain(p.to_host.iter().skip(server_before))
    {
        let frame: Value = serde_json::from_str(text).expect("JSON");
        assert!(frame.get("params").is_none(), "{text}");
    }
    assert_eq!(p.to_server.len(), host_before + 2);
    assert_eq!(p.to_host.len(), server_before + 1);
}

/// JSON-RPC 2.0 §4.2 and §10.1: hook params the application passes as a scalar go nowhere:
/// the hook fails at once (fail-open, a `Hook` verdict with its failure and a `HookFailed`
/// diagnostic), where `before_inference` wrote a request no server may accept.
#[test]
fn scalar_hook_params_fail_the_hook_without_a_frame() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    p.collect();
    let written = p.to_server.len();
    let id = p
        .host
        .before_inference(p.now, json!("hello"))
        .expect("an inject leaf is granted");
    p.collect();
    assert_eq!(p.to_server.len(), written, "nothing written");
    let verdicts = hook_verdicts(&p);
    assert_eq!(verdicts.len(), 1);
    let failure = verdicts[0].failure.as_deref().unwrap_or_default();
    assert!(failure.contains("§4.2"), "{failure}");
    assert!(!p.host.is_pending(id));
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::HookFailed { .. }))));
}
