//! [`HostState::handle_eof`]: the server ended its output (EOF, a half-close) while the
//! connection is up. Nothing more will be read, so nothing of ours waits for an answer, but
//! the server may still read: what the application owes it still goes out.

use super::*;

/// At the server's EOF the application is told once ([`HostEvent::InputEnded`]); a hook in
/// flight fails open at once (§10.1) and a policy change in flight ends with its widening
/// not activated (§6.7), as nothing can answer them any more; a fetch is forgotten; no
/// deadline stays, nothing is reported as the server's fault and nothing more is written.
/// Calls that would need an answer are refused from then on.
#[test]
fn s10_1_at_the_servers_eof_our_requests_end_at_once_and_the_application_is_told() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let hook = p
        .host
        .before_inference(p.now, hook_params())
        .expect("granted");
    let fetch = p.host.refresh_manifest(p.now).expect("MCPL");
    p.host
        .set_policy(
            p.now,
            vec![
                "contextHooks.beforeInference.inject.afterUser".into(),
                "contextHooks.beforeInference.inject.system".into(),
            ],
        )
        .expect("sent");
    p.collect();
    let written = p.host_wrote.len();
    let from = p.host_out.len();
    assert!(!p.host.input_ended());

    p.host.handle_eof(p.now);
    let out = p.host_outputs_from(from);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[0], HostOutput::Event(HostEvent::InputEnded));
    let HostOutput::Hook { id, verdict } = &out[1] else {
        panic!("a hook verdict, not {:?}", out[1]);
    };
    assert_eq!(*id, hook);
    assert!(verdict.accepted.is_empty() && verdict.rejected.is_empty());
    assert!(
        verdict
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("ended its output")),
        "{verdict:?}"
    );
    let HostOutput::PolicyChanged(change) = &out[2] else {
        panic!("the policy change's outcome, not {:?}", out[2]);
    };
    assert!(change.activated.is_empty(), "{change:?}");
    assert!(change.not_activated.contains(Capability::InjectSystem));
    assert!(!p.host.grant().allows(Capability::InjectSystem));
    assert!(p.host.input_ended());
    assert!(!p.host.is_pending(fetch) && !p.host.is_pending(hook));
    assert_eq!(p.host.poll_timeout(), None, "no deadline stays due");

    // What would need an answer is refused; nothing is written.
    assert_eq!(p.host.before_inference(p.now, hook_params()), None);
    assert_eq!(
        p.host.refresh_manifest(p.now).err(),
        Some(StateError::NotConnected)
    );
    assert_eq!(
        p.host
            .request(p.now, "tools/list", json!({}), Duration::from_secs(1))
            .err(),
        Some(StateError::NotConnected)
    );
    assert_eq!(
        p.host.set_policy(p.now, vec![]),
        Err(StateError::NotConnected)
    );
    // A second EOF is nothing new.
    p.host.handle_eof(p.now);
    assert_eq!(p.host_outputs_from(from).len(), 3);
    assert_eq!(p.host_wrote.len(), written, "nothing more is written");
}

/// A server request handed to the application before the EOF is still answered, its
/// chunks and its answer written (the server may still read, §11.4); the application was
/// told of the end before it answered.
#[test]
fn s11_a_request_handed_out_before_the_servers_eof_is_still_answered() {
    let (mut p, asked, id) = streaming_asked();
    let from = p.host_out.len();
    p.host.handle_eof(p.now);
    assert_eq!(
        p.host_outputs_from(from),
        vec![HostOutput::Event(HostEvent::InputEnded)]
    );
    p.host
        .inference_chunk(p.now, &id, "one")
        .expect("still open");
    p.host
        .answer(id, Ok(json!({"content": "one", "model": "m"})))
        .expect("still waiting");
    p.collect();
    let answer = p
        .host_answer(i64::try_from(asked).expect("small"))
        .expect("the answer is written");
    assert_eq!(answer["result"]["content"], "one", "{answer}");
    // The server reads it.
    p.drive();
    assert!(p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Response { id, .. } if *id == asked)));
}

/// An EOF before the connection is up ends the connect as a close (§5.2, §5.3): there is
/// no session to tell of the end.
#[test]
fn s5_3_an_eof_before_ready_ends_the_connect_as_closed() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.step_host();
    assert!(p.connected().is_empty());
    p.host.handle_eof(p.now);
    p.collect();
    assert_eq!(p.connected(), vec![&Err(ConnectError::Closed)]);
    assert!(p.host_out.iter().any(|o| matches!(o, HostOutput::Close)));
    assert!(!p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Event(HostEvent::InputEnded))));
    assert_eq!(p.host.poll_timeout(), None);
}
