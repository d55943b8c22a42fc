//! What each side sends the other once up: pushes (§9), the application's requests and answers, inference (§11), channels and outgoing streams (§14), lifecycle turns (§10.5), admission (§5.4).

use super::*;

#[test]
fn s9_4_a_duplicate_event_is_acknowledged_once_and_not_redelivered() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(push(50, "same"));
    p.server_writes(push(51, "same"));
    p.drive();
    assert_eq!(p.pushes(), 1);
    assert_eq!(
        p.host_answer(50).unwrap()["result"],
        json!({"accepted": true})
    );
    assert_eq!(
        p.host_answer(51).unwrap()["result"],
        json!({"accepted": true, "reason": "duplicate"})
    );
}

#[test]
fn s5_4_the_server_does_not_send_what_the_host_would_refuse() {
    let mut p = Pair::connect(&[], server_rules());
    assert!(p.host.is_ready());
    let refused = p
        .server
        .request(p.now, "push/event", push(0, "x")["params"].clone());
    assert!(matches!(
        refused,
        Err(server::SendRefusal::Admission(Refusal::Denied(_), _))
    ));
    // Before readiness it is refused as not ready.
    let mut q = Pair::new(&["pushEvents"], server_rules());
    let early = q
        .server
        .request(q.now, "push/event", push(0, "x")["params"].clone());
    assert!(matches!(
        early,
        Err(server::SendRefusal::Admission(Refusal::NotReady(_), _))
    ));
    // `channels/changed` needs `channels.register`.
    let changed = json!({"added": [{"id": "c1", "type": "chat", "direction": "inbound"}]});
    assert!(matches!(
        p.server.request(p.now, "channels/changed", changed.clone()),
        Err(server::SendRefusal::Admission(Refusal::Denied(_), _))
    ));
    // Notifications go through the same gate.
    assert!(matches!(
        p.server.notify("context/beforeInference", json!({})),
        Err(server::SendRefusal::Admission(Refusal::NotReceived, _))
    ));
    let mut c = Pair::connect(
        &["channels.register", "channels.incoming"],
        channels_rules(),
    );
    c.server
        .request(c.now, "channels/changed", changed)
        .expect("granted");
    c.drive();
    assert_eq!(c.host.channels().ids(), ["c1"]);
}

/// §14.5, §17.3: `notify` refuses the notifications that have a path of their own and
/// names it (as the host's generic path does, `StateError::UseDedicated`): a Notification-
/// form `channels/changed` has no itemized result for the channel ledger to follow, and a
/// raw `mcpl/manifestChanged` would bypass the declarations and the coalescing.
#[test]
fn s14_5_s17_3_notify_refuses_what_has_a_path_of_its_own() {
    let mut c = Pair::connect(
        &["channels.register", "channels.incoming"],
        channels_rules(),
    );
    let changed = json!({"added": [{"id": "c1", "type": "chat", "direction": "inbound"}]});
    let announce = json!({"revision": "r2", "domains": ["featureSets"]});
    for (method, params, instead) in [
        (
            "channels/changed",
            changed,
            "ServerState::request (the Request form)",
        ),
        (
            "mcpl/manifestChanged",
            announce,
            "ServerState::manifest_changed",
        ),
    ] {
        assert_eq!(
            c.server.notify(method, params),
            Err(server::SendRefusal::UseDedicated {
                method: method.into(),
                instead
            })
        );
        assert_eq!(server::dedicated_to_host(method), Some(instead));
    }
    c.collect();
    assert!(c.to_host.is_empty(), "nothing written");
    assert!(c.host.channels().ids().is_empty());
    assert_eq!(server::dedicated_to_host("notifications/message"), None);
}

/// §11.3: the application's `inference/request` result is held to the one result rule
/// before it is sent: a malformed one is answered `-32603`, as `host::HostSession` answers
/// it (found by `host_differential.rs`); a well-formed one goes out unchanged.
#[test]
fn s11_3_a_malformed_application_result_is_answered_internal_error() {
    let rules = ServerRules::new(
        json!({ "name": "asker", "version": "1" }),
        json!({ "version": "0.5", "inferenceRequest": {},
                "featureSets": { "assist": { "uses": ["inferenceRequest"] } } }),
    )
    .unwrap();
    let mut p = Pair::connect(&["inferenceRequest"], rules);
    for id in [90, 91] {
        p.server_writes(
            json!({"jsonrpc": "2.0", "id": id, "method": "inference/request",
            "params": {"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}}),
        );
    }
    p.drive();
    let handed: Vec<RequestId> = p
        .host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Request { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(handed, [RequestId::from(90i64), RequestId::from(91i64)]);
    let good = json!({ "content": "ok", "finishReason": "end_turn" });
    p.host
        .answer(RequestId::from(90i64), Ok(json!({ "content": 5 })))
        .unwrap();
    p.host
        .answer(RequestId::from(91i64), Ok(good.clone()))
        .unwrap();
    p.collect();
    assert_eq!(p.host_answer(90).unwrap()["error"]["code"], -32603);
    assert_eq!(p.host_answer(91).unwrap()["result"], good);
}

#[test]
fn s11_1_inference_requests_go_to_the_application_after_the_gates() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    // Not granted: refused before the application sees it.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 80, "method": "inference/request",
        "params": {"featureSet": "news", "messages": []}}),
    );
    p.drive();
    assert_eq!(p.host_answer(80).unwrap()["error"]["code"], -32002);
    assert!(!p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Request { .. })));
    // An answer to nothing handed out is refused.
    assert!(matches!(
        p.host.answer(RequestId::from(80i64), Ok(json!({}))),
        Err(StateError::UnknownRequest(_))
    ));
}

/// §11.4: the chunks of a streamed `inference/request` (`requestId` its id, `index` from 0)
/// go out before its answer; one that got none gets the result's text as one chunk; a
/// request that is not streamed takes no chunk; and the answer is held to §11.3 (a
/// malformed result is answered `-32603` in its place).
#[test]
fn s11_4_chunks_go_before_the_answer_and_a_stream_without_any_owes_one() {
    let mut p = Pair::connect(
        &["inferenceRequest", "inferenceRequest.streaming"],
        inference_rules(),
    );
    assert!(p.host.grant().allows(Capability::InferenceRequestStreaming));
    let streamed = json!({ "featureSet": "assist", "stream": true,
                           "messages": [{ "role": "user", "content": "hi" }] });
    let result = json!({ "content": "Hello", "finishReason": "end_turn" });

    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 90, "method": "inference/request",
                           "params": streamed}),
    );
    p.drive();
    let id = handed_inference(&p);
    let from = p.host_wrote.len();
    p.host
        .inference_chunk(p.now, &id, "Hel")
        .expect("streamed, waiting");
    p.host
        .inference_chunk(p.now, &id, "lo")
        .expect("streamed, waiting");
    p.host
        .answer(id.clone(), Ok(result.clone()))
        .expect("handed out");
    p.drive();
    let wrote: Vec<Value> = p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(wrote.len(), 3, "{wrote:?}");
    assert_eq!(
        wrote[0]["params"],
        json!({ "requestId": 90, "index": 0, "delta": "Hel" })
    );
    assert_eq!(
        wrote[1]["params"],
        json!({ "requestId": 90, "index": 1, "delta": "lo" })
    );
    assert_eq!(wrote[2]["result"], result);
    assert!(matches!(
        p.host.inference_chunk(p.now, &id, "late"),
        Err(StateError::Stream(_))
    ));

    // None sent: the text goes out as chunk 0 before the answer.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 91, "method": "inference/request",
                           "params": streamed}),
    );
    p.drive();
    let id = handed_inference(&p);
    let from = p.host_wrote.len();
    p.host.answer(id, Ok(result.clone())).expect("handed out");
    p.drive();
    let wrote: Vec<Value> = p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(wrote.len(), 2, "{wrote:?}");
    assert_eq!(wrote[0]["method"], "inference/chunk");
    assert_eq!(
        wrote[0]["params"],
        json!({ "requestId": 91, "index": 0, "delta": "Hello" })
    );

    // Not streamed: no chunk, before or with the answer; a malformed result is not sent.
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 92, "method": "inference/request",
                           "params": { "featureSet": "assist",
                                       "messages": [{ "role": "user", "content": "hi" }] }}),
    );
    p.drive();
    let id = handed_inference(&p);
    assert!(matches!(
        p.host.inference_chunk(p.now, &id, "x"),
        Err(StateError::Stream(_))
    ));
    let from = p.host_wrote.len();
    p.host
        .answer(id, Ok(json!({ "content": 7 })))
        .expect("handed out");
    p.drive();
    assert_eq!(p.host_wrote.len(), from + 1);
    assert_eq!(p.host_answer(92).unwrap()["error"]["code"], -32603);
}

#[test]
fn an_unknown_response_is_reported_not_dropped() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.server_writes(json!({"jsonrpc": "2.0", "id": 4242, "result": {}}));
    p.drive();
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::UnexpectedResponse { id }) if id == "4242"
    )));
}

#[test]
fn events_past_the_bound_are_answered_host_busy() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.max_pending_outputs = 2;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    // The application drains nothing: the outputs stay queued in the host.
    let before = p.host_out.len();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        p.server_writes(push(100 + i as i64, id));
    }
    // Deliver without draining the host's outputs into `host_out`.
    while let Some(text) = p.to_host.pop_front() {
        let msg = Message::parse(&text).unwrap();
        p.host.handle_message(p.now, msg);
    }
    let mut answers = Vec::new();
    let mut events = 0;
    while let Some(o) = p.host.poll_output() {
        match o {
            HostOutput::Transmit(Transmission::Message(Message::Response(r))) => {
                answers.push(r.outcome)
            }
            HostOutput::Event(HostEvent::Push { .. }) => events += 1,
            _ => {}
        }
    }
    assert_eq!(p.host_out.len(), before);
    assert_eq!(events, 2);
    assert_eq!(
        answers.last().cloned(),
        Some(Ok(json!({"accepted": false, "reason": "host_busy"})))
    );
}

/// An event with no answer to carry a refusal (here a `surface-changed` receipt of a
/// `notifications/tools/list_changed`, §17.7) that finds the queue full is reported, never
/// lost silently.
#[test]
fn an_event_the_queue_cannot_take_is_reported() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    let mut rules = HostRules::new(["pushEvents"]);
    rules.max_pending_outputs = 1;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    let list_changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    for frame in [push(110, "a"), list_changed.clone()] {
        let msg = Message::parse(&frame.to_string()).unwrap();
        p.host.handle_message(p.now, msg);
    }
    let mut dropped = Vec::new();
    let mut receipts = 0;
    while let Some(o) = p.host.poll_output() {
        match o {
            HostOutput::Diagnostic(HostDiagnostic::EventDropped { event }) => dropped.push(event),
            HostOutput::Event(HostEvent::ManifestChange(_)) => receipts += 1,
            _ => {}
        }
    }
    assert_eq!(dropped, ["ManifestChange"]);
    assert_eq!(receipts, 0);
    // With room, the same notification is delivered.
    p.host
        .handle_message(p.now, Message::parse(&list_changed.to_string()).unwrap());
    assert!(std::iter::from_fn(|| p.host.poll_output())
        .any(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))));
}

/// §5.4: what the application sends goes through the host's outbound gate, methods with an
/// API of their own are refused by name, and every request ends in its answer or its
/// timeout, a late answer reported rather than dropped.
#[test]
fn s5_4_the_applications_own_requests_are_gated_and_end_in_an_answer_or_a_timeout() {
    let mut p = Pair::new(&["tools", "pushEvents"], server_rules());
    let call = json!({ "name": "echo", "arguments": {} });
    assert_eq!(
        p.host
            .request(p.now, "tools/call", call.clone(), Duration::from_secs(1)),
        Err(StateError::NotConnected)
    );
    p.host.start(p.now);
    p.drive();
    for (method, instead) in [
        ("featureSets/update", "HostState::set_policy"),
        ("context/beforeInference", "HostState::before_inference"),
        ("inference/lifecycle", "HostState::start_turn"),
        ("channels/outgoing/chunk", "HostState::start_stream"),
        ("inference/chunk", "HostState::inference_chunk"),
    ] {
        assert_eq!(
            p.host.notify(method, json!({})),
            Err(StateError::UseDedicated {
                method: method.into(),
                instead
            })
        );
    }
    // Not granted (channels.publish): refused locally, nothing written.
    let written = p.host_wrote.len();
    assert!(matches!(
        p.host
            .notify("channels/publish", json!({ "channelId": "c" })),
        Err(StateError::NotSent(_))
    ));
    p.drive();
    assert_eq!(p.host_wrote.len(), written);

    let id = p
        .host
        .request(p.now, "tools/call", call.clone(), Duration::from_secs(1))
        .expect("tools granted");
    p.drive();
    let Some(ServerOutput::Request { id: sid, .. }) = p
        .server_out
        .iter()
        .rfind(|o| matches!(o, ServerOutput::Request { method, .. } if method == "tools/call"))
        .cloned()
    else {
        panic!("the server got the call: {:?}", p.server_out);
    };
    p.server
        .answer(sid, Ok(json!({ "content": [] })))
        .expect("handed out");
    p.drive();
    assert!(p.host_out.contains(&HostOutput::Response {
        id,
        outcome: Ok(json!({ "content": [] }))
    }));

    // Unanswered: it times out at its deadline, and the late answer is reported.
    let late = p
        .host
        .request(p.now, "tools/call", call, Duration::from_secs(1))
        .expect("tools granted");
    p.drive();
    let Some(ServerOutput::Request { id: sid, .. }) = p.server_out.last().cloned() else {
        panic!("the server got the call");
    };
    p.host.handle_timeout(p.now + Duration::from_secs(2));
    p.collect();
    assert!(p
        .host_out
        .contains(&HostOutput::RequestTimedOut { id: late }));
    p.server.answer(sid, Ok(json!({}))).expect("handed out");
    p.drive();
    assert!(matches!(
        p.host_out.last(),
        Some(HostOutput::Diagnostic(
            HostDiagnostic::UnexpectedResponse { .. }
        ))
    ));
}

#[test]
fn s14_5_channels_are_authorized_item_wise_and_messages_against_what_was_registered() {
    let mut p = Pair::connect(
        &["channels.register", "channels.incoming"],
        channels_rules(),
    );
    let limits = ChannelLimits {
        patterns: Some(vec!["chat-*".into()]),
        ..ChannelLimits::default()
    };
    let mut rules = HostRules::new(["channels.register", "channels.incoming"]);
    rules.channels = limits;
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.server = ServerState::new(channels_rules());
    p.host.start(p.now);
    p.drive();
    let r = call(
        &mut p,
        200,
        "channels/register",
        json!({"channels": [
            {"id": "chat-1", "type": "chat", "direction": "bidirectional"},
            {"id": "ops", "type": "chat", "direction": "inbound"},
            {"id": "chat-2"}
        ]}),
    );
    assert_eq!(
        r["result"]["results"],
        json!([
            {"id": "chat-1", "accepted": true},
            {"id": "ops", "accepted": false, "reason": "capability_denied"},
            {"id": "chat-2", "accepted": false, "reason": "invalid_descriptor"}
        ])
    );
    assert_eq!(p.host.channels().ids(), ["chat-1"]);
    let r = call(
        &mut p,
        201,
        "channels/incoming",
        json!({"messages": [
            {"channelId": "chat-1", "messageId": "m1", "content": "hi"},
            {"channelId": "ops", "messageId": "m2", "content": "no"}
        ]}),
    );
    let results = &r["result"]["results"];
    assert_eq!(results[0], json!({"messageId": "m1", "accepted": true}));
    assert_eq!(results[1]["code"], -32023, "{results}");
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Event(HostEvent::ChannelMessage { channel_id, .. }) if channel_id == "chat-1"
    )));
    // §6.7: without channels.register, a removal still applies (it narrows).
    p.host
        .set_policy(p.now, vec!["channels.incoming".into()])
        .unwrap();
    p.drive();
    let r = call(
        &mut p,
        202,
        "channels/changed",
        json!({"removed": ["chat-1"],
        "added": [{"id": "chat-3", "type": "chat"}]}),
    );
    assert_eq!(
        r["result"]["results"],
        json!([
            {"id": "chat-1", "accepted": true},
            {"id": "chat-3", "accepted": false, "reason": "capability_denied"}
        ])
    );
    assert!(p.host.channels().ids().is_empty());
}

/// §10.5 at the server: the host's signal is admitted by the one rule first (a
/// notification the grant does not allow is reported `notification_denied`, never a turn),
/// then paired; an open turn is ended by the safety timeout the state machine asks to be
/// woken for.
#[test]
fn s10_5_the_server_gates_then_pairs_turns_and_times_them_out() {
    let lifecycle = |phase: &str| {
        json!({"jsonrpc": "2.0", "method": "inference/lifecycle",
               "params": {"inferenceId": "i9", "conversationId": "c", "turnIndex": 0, "phase": phase}})
        .to_string()
    };
    let turns = |p: &Pair| {
        p.server_out
            .iter()
            .filter(|o| matches!(o, ServerOutput::Turn(_)))
            .count()
    };
    // Not granted: reported, no turn.
    let mut q = Pair::connect(&["pushEvents"], server_rules());
    q.to_server.push_back(lifecycle("started"));
    q.drive();
    assert_eq!(turns(&q), 0);
    assert!(q.server_out.iter().any(|o| matches!(
        o,
        ServerOutput::Diagnostic(d) if d.code() == "notification_denied"
    )));

    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    rules.lifecycle.safety_timeout = Duration::from_secs(30);
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    assert_eq!(p.server.poll_timeout(), None);
    p.to_server.push_back(lifecycle("started"));
    p.to_server.push_back(lifecycle("started"));
    p.drive();
    assert_eq!(turns(&p), 1, "a second started is no second turn");
    let due = p
        .server
        .poll_timeout()
        .expect("an open turn has a deadline");
    assert_eq!(due, p.now + Duration::from_secs(30));
    p.server.handle_timeout(due - Duration::from_millis(1));
    p.collect();
    assert_eq!(turns(&p), 1);
    p.server.handle_timeout(due);
    p.collect();
    assert!(matches!(
        p.server_out.last(),
        Some(ServerOutput::Turn(TurnEvent::Ended(e))) if e.outcome == TurnOutcome::TimedOut
    ));
    // A terminal after the timeout ends nothing twice.
    p.to_server.push_back(lifecycle("completed"));
    p.drive();
    assert_eq!(turns(&p), 2);
    assert_eq!(p.server.poll_timeout(), None);
}

#[test]
fn requests_the_application_holds_unanswered_are_bounded() {
    // The application drains every output but answers nothing yet (a slow model): each
    // server request it was handed stays in `app_pending`. The peer must not grow that set
    // without bound (the async host bounds it by `PeerConfig::max_in_flight_requests`).
    let mut rules = server_rules();
    rules.manifest["modelInfo"] = json!({});
    let mut p = Pair::new(&["modelInfo"], rules);
    let mut hr = HostRules::new(["modelInfo"]);
    hr.max_pending_outputs = 4;
    p.host = HostState::new(hr, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    assert!(p.host.grant().allows(Capability::ModelInfo));
    for i in 0..100 {
        p.server_writes(json!({"jsonrpc": "2.0", "id": 500 + i, "method": "model/info"}));
    }
    p.drive(); // drains every output into `host_out`
    let handed = p
        .host_out
        .iter()
        .filter(|o| matches!(o, HostOutput::Request { .. }))
        .count();
    assert!(
        handed <= 4,
        "{handed} requests held unanswered by the application at once"
    );
}

#[test]
fn s14_5_the_channels_the_host_accepted_are_kept_from_itemized_results() {
    let mut p = registering(json!([channel("a", "one"), channel("b", "two")]));
    p.drive();
    assert_eq!(
        labels(&p.server),
        vec![
            ("a".into(), Some("one".into())),
            ("b".into(), Some("two".into()))
        ]
    );
    p.server
        .request(p.now, "channels/changed", json!({ "removed": ["a"] }))
        .expect("granted");
    p.drive();
    assert_eq!(labels(&p.server), vec![("b".into(), Some("two".into()))]);
}

#[test]
fn s14_5_channel_results_apply_in_send_order_whatever_order_the_answers_arrive_in() {
    let mut p = registering(json!([channel("a", "old")]));
    p.server
        .request(
            p.now,
            "channels/changed",
            json!({ "updated": [channel("a", "new")] }),
        )
        .expect("granted");
    p.step_host();
    p.step_host();
    assert_eq!(p.to_server.len(), 2, "both answered by the host");
    p.to_server.swap(0, 1); // the update's answer is read first
    p.drive();
    assert_eq!(labels(&p.server), vec![("a".into(), Some("new".into()))]);
}

#[test]
fn s14_5_a_refused_or_malformed_channel_answer_accepts_nothing() {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    let refused = p
        .server
        .request(
            p.now,
            "channels/register",
            json!({ "channels": [channel("a", "x")] }),
        )
        .expect("granted");
    let malformed = p
        .server
        .request(
            p.now,
            "channels/register",
            json!({ "channels": [channel("b", "y")] }),
        )
        .expect("granted");
    p.collect();
    p.to_host.clear(); // the host never reads them; these answers come instead
    let answers = [
        json!({"jsonrpc": "2.0", "id": refused, "error": {"code": -32002, "message": "no"}}),
        json!({"jsonrpc": "2.0", "id": malformed, "result": {"results": "all"}}),
    ];
    for a in answers {
        let msg = Message::parse(&a.to_string()).expect("json-rpc");
        p.server.handle_message(p.now, msg);
    }
    assert!(p.server.channels().is_empty());
}

#[test]
fn s11_4_the_hosts_chunks_reach_the_streaming_request_before_its_response() {
    let (mut p, asked, id) = streaming_asked();
    p.host.inference_chunk(p.now, &id, "Hel").expect("streamed");
    p.host.inference_chunk(p.now, &id, "lo").expect("streamed");
    let result = json!({ "content": "Hello", "finishReason": "end_turn" });
    p.host.answer(id, Ok(result.clone())).expect("handed out");
    let from = p.server_out.len();
    p.drive();
    let got: Vec<(u64, Option<String>)> = p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::InferenceChunk { id, chunk } => Some((*id, Some(chunk.delta.clone()))),
            ServerOutput::Response { id, outcome } => {
                assert_eq!(outcome, &Ok(result.clone()));
                Some((*id, None))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (asked, Some("Hel".into())),
            (asked, Some("lo".into())),
            (asked, None)
        ]
    );
    assert!(server_diagnostics(&p, from).is_empty());
    // Answered: a chunk after it has no stream to go to.
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk",
               "params": { "requestId": asked, "index": 2, "delta": "!" }}),
    );
    assert!(matches!(
        server_diagnostics(&p, from)[..],
        [ServerDiagnostic::UnknownInferenceChunk { .. }]
    ));
}

#[test]
fn s11_4_a_chunk_for_no_streaming_request_or_unreadable_is_reported() {
    let (mut p, asked) = asked_without_stream();
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk",
               "params": { "requestId": asked, "index": 0, "delta": "x" }}),
    );
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "inference/chunk", "params": { "index": "0" }}),
    );
    let d = server_diagnostics(&p, from);
    assert!(
        matches!(
            d[..],
            [
                ServerDiagnostic::UnknownInferenceChunk { .. },
                ServerDiagnostic::InvalidNotification { .. }
            ]
        ),
        "{d:?}"
    );
    assert!(!p.server_out[from..].iter().any(|o| matches!(
        o,
        ServerOutput::InferenceChunk { .. } | ServerOutput::Notification(_)
    )));
}

#[test]
fn s11_3_a_malformed_inference_result_is_reported_and_still_answered() {
    let (mut p, asked) = asked_without_stream();
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": asked, "result": { "content": 7 }}),
    );
    assert!(matches!(
        server_diagnostics(&p, from)[..],
        [ServerDiagnostic::InferenceResultMalformed { .. }]
    ));
    assert!(p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::Response { id, .. } if *id == asked)));
}

#[test]
fn s10_5_open_turns_end_when_the_connection_closes_and_nothing_is_read_after() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    p.drive();
    let from = p.server_out.len();
    p.server.handle_close(p.now);
    p.collect();
    let ended: Vec<&str> = p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Turn(TurnEvent::Ended(e)) => Some(e.inference_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ended, ["i1"]);
    assert_eq!(p.server.poll_timeout(), None);
    // A frame read after the close (a driver's mistake) is not acted on.
    server_reads(&mut p, json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert!(p.to_host.is_empty());
}

#[test]
fn s5_4_a_typed_host_request_whose_params_do_not_parse_reaches_no_application() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 9, "method": "context/beforeInference",
               "params": {"inferenceId": 5}}),
    );
    let answer = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(9))
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(!p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
}

#[test]
fn s5_4_a_typed_host_notification_whose_params_do_not_parse_is_reported() {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "typing": {} });
    let mut p = Pair::connect(&["channels.typing"], rules);
    let from = p.server_out.len();
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "method": "channels/typing", "params": {"channelId": 5}}),
    );
    let out = &p.server_out[from..];
    assert!(
        matches!(
            out,
            [ServerOutput::Diagnostic(ServerDiagnostic::InvalidNotification { method, .. })]
                if method == "channels/typing"
        ),
        "{out:?}"
    );
}

#[test]
fn s14_3_channels_list_is_answered_with_the_channels_the_host_accepted() {
    let mut p = registering(json!([channel("a", "one")]));
    p.drive();
    let asked = p
        .host
        .request(p.now, "channels/list", json!({}), Duration::from_secs(5))
        .expect("granted");
    p.drive();
    let listed = p.host_out.iter().find_map(|o| match o {
        HostOutput::Response { id, outcome } if *id == asked => Some(outcome.clone()),
        _ => None,
    });
    assert_eq!(
        listed,
        Some(Ok(json!({ "channels": [channel("a", "one")] })))
    );
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { .. })));
    // An application that lists them itself is handed the request.
    let mut rules = server_rules();
    rules.channels_list_by_application = true;
    let mut q = Pair::connect(&["pushEvents", "channels.register"], rules);
    q.host
        .request(q.now, "channels/list", json!({}), Duration::from_secs(5))
        .expect("granted");
    q.drive();
    assert!(q
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { method, .. } if method == "channels/list")));
}
