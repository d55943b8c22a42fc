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

/// `levels` arrays nested in one another (`[]` is 1).
fn nested(levels: usize) -> Value {
    (1..levels).fold(json!([]), |inner, _| json!([inner]))
}

/// JSON-RPC 2.0 §4.2: `params` is an object or an array. The application's scalar params,
/// and params nested past `jsonrpc::MAX_MEMBER_NESTING` (which `Message::parse` cannot read
/// inside a message), are refused by each machine's outbound gate
/// (`OutboundRefusal::InvalidParams`, `SendRefusal::InvalidParams`, by the one rule
/// `jsonrpc::params_shape`): no frame goes out, where one did that no peer may accept.
#[test]
fn scalar_or_too_deep_params_from_the_application_are_refused_not_sent() {
    use crate::jsonrpc::{ParamsDefect, MAX_MEMBER_NESTING};
    let mut p = inference_pair();
    p.collect();
    let (host_before, server_before) = (p.to_server.len(), p.to_host.len());
    let too_deep = nested(MAX_MEMBER_NESTING + 1);
    assert!(
        Message::parse(&json!({"jsonrpc": "2.0", "method": "m", "params": too_deep}).to_string())
            .is_err(),
        "a message this deep is not read"
    );
    for params in [json!(false), json!(1.5), json!("hi"), too_deep] {
        let kind = match crate::jsonrpc::json_type_name(&params) {
            "array" => ParamsDefect::TooDeep,
            scalar => ParamsDefect::Scalar(scalar),
        };
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
    // Structured params still go, up to the deepest a peer reads.
    p.host
        .request(p.now, "ping", json!({}), Duration::from_secs(5))
        .expect("an object is params");
    let deepest = nested(MAX_MEMBER_NESTING);
    p.host
        .request(p.now, "ping", deepest.clone(), Duration::from_secs(5))
        .expect("as deep as a peer reads");
    p.collect();
    assert_eq!(p.to_server.len(), host_before + 2, "both are written");
    let read = Message::parse(p.to_server.back().expect("written")).expect("read back");
    assert!(matches!(read, Message::Request(r) if r.params == Some(deepest)));
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
        .skip(host_before + 2)
        .chain(p.to_host.iter().skip(server_before))
    {
        let frame: Value = serde_json::from_str(text).expect("JSON");
        assert!(frame.get("params").is_none(), "{text}");
    }
    assert_eq!(p.to_server.len(), host_before + 3);
    assert_eq!(p.to_host.len(), server_before + 1);
}

/// An application's answer nested past what the other side reads
/// (`jsonrpc::MAX_MEMBER_NESTING`) goes as `-32603` saying so, from either machine, so the
/// requester is answered instead of waiting for its timeout; each reports it to its
/// application (`HostDiagnostic::AnswerReplaced`, `ServerDiagnostic::ResultUnencodable`). Error `data` that deep too.
#[test]
fn answers_nested_past_what_the_peer_reads_go_as_32603() {
    use crate::jsonrpc::{codes, ErrorObject, MAX_MEMBER_NESTING};
    let too_deep = nested(MAX_MEMBER_NESTING + 1);
    // The host answers the server's `inference/request`: well-formed (§11.3; a member
    // the spec does not name is tolerated) but that deep, then malformed.
    for (result, why) in [
        (
            json!({"content": "x", "finishReason": "end_turn", "x-deep": too_deep.clone()}),
            "deeper than 126 levels",
        ),
        (json!({"content": 5}), "(§11.3)"),
    ] {
        let (mut p, asked) = asked_without_stream();
        p.drive();
        let id = handed_inference(&p);
        p.host.answer(id, Ok(result)).expect("handed out");
        p.collect();
        let sent: Value = serde_json::from_str(p.to_server.back().expect("written")).expect("read");
        assert_eq!(sent["id"], json!(asked));
        assert_eq!(sent["error"]["code"], codes::INTERNAL_ERROR, "{sent}");
        // The host's application sees why (not only a log line).
        assert!(
            p.host_out.iter().any(|o| matches!(
                o,
                HostOutput::Diagnostic(HostDiagnostic::AnswerReplaced { id, reason })
                    if *id == asked.to_string() && reason.contains(why)
            )),
            "{:?}",
            p.host_out
        );
    }
    // The server answers the host's `tools/call`, handed to its application, with a result
    // and with error data that deep.
    for outcome in [
        Ok(too_deep.clone()),
        Err(ErrorObject::new(-32000, "app").with_data(too_deep.clone())),
    ] {
        let mut p = Pair::connect(&["tools"], server_rules());
        let call = json!({"name": "t", "arguments": {}});
        p.host
            .request(p.now, "tools/call", call, Duration::from_secs(5))
            .expect("sent");
        p.step_server();
        let id = p
            .server_out
            .iter()
            .find_map(|o| match o {
                ServerOutput::Request { id, method, .. } if method == "tools/call" => {
                    Some(id.clone())
                }
                _ => None,
            })
            .expect("handed to the server application");
        p.server.answer(id.clone(), outcome).expect("handed out");
        p.collect();
        let sent: Value = serde_json::from_str(p.to_host.back().expect("written")).expect("read");
        assert_eq!(sent["id"], id.to_value());
        assert_eq!(sent["error"]["code"], codes::INTERNAL_ERROR, "{sent}");
        assert!(p.server_out.iter().any(|o| matches!(
            o,
            ServerOutput::Diagnostic(ServerDiagnostic::ResultUnencodable { error, .. })
                if error.contains("deeper than 126 levels")
        )));
    }
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

/// A diagnostic holds at most [`DIAGNOSTIC_TEXT_BYTES`] of the text the peer chose, saying
/// its length, at both machines: a host speaking an MCPL "version" of 1 MiB, and a server
/// notification named with 1 MiB, are reported with that text cut (the server's
/// diagnostics kept the whole version).
#[test]
fn diagnostics_keep_the_peers_text_cut_to_its_bound() {
    let long = "9".repeat(1 << 20);
    let mut server = ServerState::new(server_rules());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": long}}}}});
    server.handle_message(
        Instant::now(),
        Message::from_value(init).expect("a request"),
    );
    let server_kept = std::iter::from_fn(|| server.poll_output()).find_map(|o| match o {
        ServerOutput::Diagnostic(ServerDiagnostic::HostMcplVersion { version }) => Some(version),
        _ => None,
    });
    let mut p = Pair::connect(&["tools"], server_rules());
    let method = format!("vendor/{long}");
    p.host.handle_message(
        p.now,
        Message::Notification(crate::jsonrpc::Notification {
            method: method.clone(),
            params: None,
        }),
    );
    p.collect();
    let host_kept = p.host_out.iter().find_map(|o| match o {
        HostOutput::Diagnostic(HostDiagnostic::UnexpectedMethod { method }) => Some(method.clone()),
        _ => None,
    });
    // The version is kept as the JSON text it came as: quoted.
    for (kept, whole) in [(server_kept, long.len() + 2), (host_kept, method.len())] {
        let kept = kept.expect("reported");
        assert!(kept.len() <= DIAGNOSTIC_TEXT_BYTES, "{}", kept.len());
        assert!(kept.ends_with(&format!("({whole} bytes)")), "{kept}");
    }
}
