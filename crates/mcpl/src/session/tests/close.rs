//! [`HostState::handle_close`]: the end of a connection at the host, as
//! [`ServerState::handle_close`] is at the server.

use super::*;

/// Every kind of request of ours waits when the connection ends: only the hook gets an
/// outcome (its fail-open verdict, §10.1), nothing is reported as the server's fault, nothing
/// more is sent, no deadline stays and a late answer changes nothing.
#[test]
fn s10_1_close_fails_a_waiting_hook_open_and_forgets_the_other_requests() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    assert!(p.host.is_ready());
    let hook = p
        .host
        .before_inference(p.now, hook_params())
        .expect("granted");
    let app = p
        .host
        .request(p.now, "tools/list", json!({}), Duration::from_secs(30))
        .expect("sent");
    let fetch = p.host.refresh_manifest(p.now).expect("MCPL");
    p.host
        .set_policy(
            p.now,
            vec!["contextHooks.beforeInference.inject.afterUser".into()],
        )
        .expect("sent");
    p.collect();
    let written = p.host_wrote.len();
    let from = p.host_out.len();
    assert!(p.host.poll_timeout().is_some());

    p.host.handle_close(p.now);
    let out = p.host_outputs_from(from);
    assert_eq!(out.len(), 1, "{out:?}");
    let HostOutput::Hook { id, verdict } = &out[0] else {
        panic!("a hook verdict, not {out:?}");
    };
    assert_eq!(*id, hook);
    assert!(verdict.accepted.is_empty() && verdict.rejected.is_empty());
    assert!(
        verdict
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("closed")),
        "{verdict:?}"
    );
    for id in [hook, app, fetch] {
        assert!(!p.host.is_pending(id), "{id} still waits");
    }
    assert_eq!(p.host.poll_timeout(), None, "no deadline stays due");

    // A tick a century on, and the answers arriving late, change nothing.
    p.host
        .handle_timeout(p.now + Duration::from_secs(100 * 365 * 24 * 3600));
    let late = json!({"jsonrpc": "2.0", "id": hook, "result": {"featureSet": "ctx",
        "contextInjections": [{"namespace": "n", "position": "afterUser", "content": "late"}]}});
    p.host
        .handle_message(p.now, Message::parse(&late.to_string()).expect("valid"));
    p.host.handle_message(
        p.now,
        Message::parse(&json!({"jsonrpc": "2.0", "id": app, "result": {"tools": []}}).to_string())
            .expect("valid"),
    );
    assert_eq!(p.host_outputs_from(from).len(), 1, "nothing more");
    assert_eq!(p.host_wrote.len(), written, "nothing more is written");

    // A second close is nothing new.
    p.host.handle_close(p.now);
    assert_eq!(p.host_outputs_from(from).len(), 1);
}

/// After close every call that would send is refused, and nothing is written.
#[test]
fn every_sending_call_is_refused_after_close() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("open", "c", 0).expect("granted");
    p.host.start_stream("s", None).expect("opens");
    p.collect();
    let written = p.host_wrote.len();
    p.host.handle_close(p.now);

    let refused = |r: Result<(), StateError>| assert_eq!(r, Err(StateError::NotConnected));
    refused(p.host.start_turn("i", "c", 1));
    refused(
        p.host
            .end_turn("open", crate::session::Terminal::Completed, None),
    );
    refused(p.host.start_stream("t", None));
    refused(p.host.stream_chunk("s", "ch", "x"));
    refused(p.host.stream_complete("s", "ch"));
    refused(p.host.end_stream("s"));
    refused(p.host.notify("notifications/roots/list_changed", json!({})));
    refused(p.host.answer(RequestId::from(1u64), Ok(json!({}))));
    refused(p.host.inference_chunk(p.now, &RequestId::from(1u64), "x"));
    refused(p.host.set_policy(p.now, vec![]));
    refused(p.host.disable_by_notification(&["news".into()]));
    assert_eq!(
        p.host
            .request(p.now, "tools/list", json!({}), Duration::from_secs(1))
            .err(),
        Some(StateError::NotConnected)
    );
    assert_eq!(
        p.host.refresh_manifest(p.now).err(),
        Some(StateError::NotConnected)
    );
    assert_eq!(p.host.before_inference(p.now, hook_params()), None);
    p.collect();
    assert_eq!(
        p.host_wrote.len(),
        written,
        "nothing is written after close"
    );
    assert_eq!(p.host.poll_timeout(), None);
}

/// A server request handed to the application and not yet answered is forgotten: its late
/// answer is refused, not written to a closed connection.
#[test]
fn s11_a_server_request_handed_out_is_not_answered_after_close() {
    let (mut p, _asked, id) = streaming_asked();
    let written = p.host_wrote.len();
    p.host.handle_close(p.now);
    assert_eq!(
        p.host.inference_chunk(p.now, &id, "late"),
        Err(StateError::NotConnected)
    );
    assert_eq!(
        p.host.answer(id, Ok(json!({"content": "late"}))),
        Err(StateError::NotConnected)
    );
    p.collect();
    assert_eq!(p.host_wrote.len(), written);
}

/// A close during the handshake (§5.2) or the initial policy exchange (§5.3) ends the
/// connect with `ConnectError::Closed`, once, and asks for no second close.
#[test]
fn s5_3_close_before_ready_ends_the_connect_as_closed() {
    // `initialize` in flight.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.collect();
    p.host.handle_close(p.now);
    p.collect();
    assert_eq!(p.connected(), vec![&Err(ConnectError::Closed)]);
    assert!(!p.host_out.iter().any(|o| matches!(o, HostOutput::Close)));
    assert_eq!(p.host.poll_timeout(), None);

    // The initial policy Request in flight: `initialize` answered, the receipt not yet.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host();
    assert!(p.connected().is_empty() && !p.host.is_ready());
    p.host.handle_close(p.now);
    p.host.handle_close(p.now);
    p.collect();
    assert_eq!(p.connected(), vec![&Err(ConnectError::Closed)]);

    // Closed before it started: nothing to end.
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.handle_close(p.now);
    p.host.start(p.now);
    p.collect();
    assert!(
        p.host_out.is_empty() && p.host_wrote.is_empty(),
        "{:?}",
        p.host_out
    );
}
