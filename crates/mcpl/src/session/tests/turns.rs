//! Lifecycle turns (§10.5) and outgoing streams (§14.3) the host starts, through the real
//! pair: one terminal per `started`, one index and one `complete` per channel, both gated
//! and bounded.

use super::*;

#[test]
fn s10_5_a_turn_gets_exactly_one_started_and_one_terminal() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    assert!(matches!(
        p.host.start_turn("i1", "c", 0),
        Err(StateError::Turn(_))
    ));
    p.host
        .end_turn("i1", Terminal::Completed, Some(json!({"outputTokens": 3})))
        .unwrap();
    assert!(matches!(
        p.host.end_turn("i1", Terminal::Aborted, None),
        Err(StateError::Turn(_))
    ));
    // Ended ids are remembered: the same inference cannot start a second turn.
    assert!(matches!(
        p.host.start_turn("i1", "c", 1),
        Err(StateError::Turn(_))
    ));
    p.drive();
    // The server pairs them with its §10.5 tracker: one start, one end, usage kept.
    let turns: Vec<String> = p
        .server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Turn(TurnEvent::Started(s)) => Some(format!("start {}", s.inference_id)),
            ServerOutput::Turn(TurnEvent::Ended(e)) => Some(format!(
                "end {} {:?}",
                e.inference_id,
                matches!(&e.outcome, TurnOutcome::Completed { usage: Some(u) } if u.output_tokens == Some(3))
            )),
            _ => None,
        })
        .collect();
    assert_eq!(turns, ["start i1", "end i1 true"]);
    // Not granted: nothing is sent (§5.4).
    let mut q = Pair::connect(&["pushEvents"], server_rules());
    assert!(matches!(
        q.host.start_turn("i2", "c", 0),
        Err(StateError::NotSent(OutboundRefusal::NotGranted(_)))
    ));
    q.collect();
    assert!(!q
        .to_server
        .iter()
        .any(|t| t.contains("inference/lifecycle")));
}

/// §10.5: `usage` is token usage, and a lifecycle signal MUST NOT carry message content.
/// An application's `usage` that is no object, or holds a member that is not a number (a
/// text, an object: where content would go), was sent as given, the host writing the
/// defect onto the wire unseen. Now `completed` still goes (exactly one terminal), without
/// that `usage`, and the call says so (`StateError::UsageNotSent`); token counts (and other
/// numeric counters) go as before, `null` is absent.
#[test]
fn s10_5_a_usage_that_is_not_token_usage_is_refused_and_the_terminal_still_goes() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    let bad = [
        json!("lots"),
        json!({"outputTokens": 3, "assistantMessage": "the reply"}),
        json!({"outputTokens": "3"}),
    ];
    for (i, usage) in bad.into_iter().enumerate() {
        let id = format!("bad{i}");
        p.host.start_turn(&id, "c", 0).expect("granted");
        let r = p.host.end_turn(&id, Terminal::Completed, Some(usage));
        assert!(matches!(&r, Err(StateError::UsageNotSent(_))), "{r:?}");
        assert!(r.unwrap_err().to_string().contains("§10.5"));
    }
    p.host.start_turn("ok", "c", 0).expect("granted");
    let counts = json!({"inputTokens": 1, "outputTokens": 2, "cacheReadTokens": 0});
    p.host
        .end_turn("ok", Terminal::Completed, Some(counts))
        .unwrap();
    p.collect();
    let lines: Vec<Value> = p
        .to_server
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v["method"] == "inference/lifecycle" && v["params"]["phase"] == "completed")
        .collect();
    assert_eq!(lines.len(), 4, "one completed per turn: {lines:?}");
    for l in &lines[..3] {
        assert!(l["params"].get("usage").is_none(), "{l}");
    }
    assert_eq!(
        lines[3]["params"]["usage"]["outputTokens"], 2,
        "{}",
        lines[3]
    );
}

/// A driver that handles only `Transmit` writes every frame: the lifecycle notifications
/// the session encodes from their type come out as that one variant, like every other frame
/// (a loop matching `Transmit` alone used to miss them, silently).
#[test]
fn s10_5_encoded_lifecycle_frames_come_out_as_transmit() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    p.host
        .end_turn("i1", Terminal::Completed, None)
        .expect("open");
    let mut phases = Vec::new();
    while let Some(o) = p.host.poll_output() {
        if let HostOutput::Transmit(t) = o {
            let Message::Notification(n) = t.to_message() else {
                panic!("a notification: {t:?}")
            };
            assert_eq!(
                Message::parse(&t.to_json()),
                Ok(Message::Notification(n.clone()))
            );
            assert_eq!(n.method, "inference/lifecycle");
            let params = n.params.expect("params");
            phases.push(format!("{} {}", params["inferenceId"], params["phase"]));
        }
    }
    assert_eq!(phases, [r#""i1" "started""#, r#""i1" "completed""#]);
}

/// §10.5 and §14.3 bounds: past `ENDED_IDS_REMEMBERED` open turns or streams a new id is
/// `TooManyOpen`, while an id already open is still refused as the duplicate it is (ending
/// others would not make room for it); ending one makes room.
#[test]
fn open_turns_and_streams_are_bounded_and_a_duplicate_at_the_bound_stays_a_duplicate() {
    let limit = crate::session::ENDED_IDS_REMEMBERED;
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    for i in 0..limit {
        p.host.start_turn(&format!("t{i}"), "c", 0).expect("room");
        p.host.start_stream(&format!("s{i}"), None).expect("room");
    }
    assert!(matches!(
        p.host.start_turn("new", "c", 0),
        Err(StateError::TooManyOpen { what: "lifecycle turns", limit: l }) if l == limit
    ));
    assert!(matches!(
        p.host.start_stream("new", None),
        Err(StateError::TooManyOpen { what: "outgoing streams", limit: l }) if l == limit
    ));
    assert!(matches!(
        p.host.start_turn("t0", "c", 1),
        Err(StateError::Turn(_))
    ));
    assert!(matches!(
        p.host.start_stream("s0", None),
        Err(StateError::Stream(_))
    ));
    p.host.end_turn("t0", Terminal::Completed, None).unwrap();
    p.host.start_turn("new", "c", 0).expect("room again");
    p.host.end_stream("s0").unwrap();
    p.host.start_stream("new", None).expect("room again");
}

/// §14.3 through the real pair: one index across the inference's channels, one `complete`
/// per channel with its whole text (also when the stream just ends), a completed channel
/// closed, one stream per inference, and every frame gated (§5.4, §14.1): a channel the
/// server did not register as outbound, or a stream without `channels.streaming`, sends
/// nothing; a `complete` the gate no longer allows at the end is reported, not sent.
#[test]
fn s14_3_outgoing_streams_index_per_inference_complete_once_and_are_gated() {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "streaming": {} });
    let mut p = Pair::connect(&["channels.register", "channels.streaming"], rules.clone());
    // Through the server's own request: a chunk names a channel it registered (§14.6).
    p.server
        .request(
            p.now,
            "channels/register",
            json!({"channels": [
                {"id": "a", "type": "chat", "direction": "outbound"},
                {"id": "b", "type": "chat", "direction": "bidirectional"},
                {"id": "in", "type": "chat", "direction": "inbound"}
            ]}),
        )
        .expect("granted");
    p.drive();
    assert_eq!(p.server.channels().len(), 3);
    p.host.start_stream("i1", Some("c1")).unwrap();
    assert!(matches!(
        p.host.start_stream("i1", None),
        Err(StateError::Stream(_))
    ));
    p.host.stream_chunk("i1", "a", "Hel").unwrap();
    p.host.stream_chunk("i1", "b", "x").unwrap();
    assert!(matches!(
        p.host.stream_chunk("i1", "in", "no"),
        Err(StateError::NotSent(OutboundRefusal::ChannelNotPermitted(_)))
    ));
    p.host.stream_chunk("i1", "a", "lo").unwrap();
    p.host.stream_complete("i1", "a").unwrap();
    assert!(matches!(
        p.host.stream_chunk("i1", "a", "again"),
        Err(StateError::Completed(_))
    ));
    p.host.end_stream("i1").unwrap();
    assert!(matches!(
        p.host.start_stream("i1", None),
        Err(StateError::Stream(_))
    ));
    p.drive();
    let chunks = server_notifications(&p, "channels/outgoing/chunk");
    let indexes: Vec<(&Value, &Value)> = chunks
        .iter()
        .map(|c| (&c["channelId"], &c["index"]))
        .collect();
    assert_eq!(
        indexes,
        [
            (&json!("a"), &json!(0)),
            (&json!("b"), &json!(1)),
            (&json!("a"), &json!(2))
        ]
    );
    assert!(chunks.iter().all(|c| c["conversationId"] == "c1"));
    let completes = server_notifications(&p, "channels/outgoing/complete");
    let texts: Vec<(&Value, &Value)> = completes
        .iter()
        .map(|c| (&c["channelId"], &c["content"][0]["text"]))
        .collect();
    assert_eq!(
        texts,
        [(&json!("a"), &json!("Hello")), (&json!("b"), &json!("x"))]
    );

    // Narrowed mid-stream: the owed `complete` is reported, not sent.
    p.host.start_stream("i2", None).unwrap();
    p.host.stream_chunk("i2", "b", "y").unwrap();
    p.host
        .set_policy(p.now, vec!["channels.register".into()])
        .unwrap();
    p.drive();
    p.host.end_stream("i2").unwrap();
    p.drive();
    assert_eq!(
        server_notifications(&p, "channels/outgoing/complete").len(),
        2
    );
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Diagnostic(HostDiagnostic::OutgoingNotCompleted { inference_id, channel_id, .. })
            if inference_id == "i2" && channel_id == "b"
    )));

    // Without channels.streaming nothing is streamed.
    let mut q = Pair::connect(&["channels.register"], rules);
    call(
        &mut q,
        301,
        "channels/register",
        json!({"channels": [{"id": "a", "type": "chat", "direction": "outbound"}]}),
    );
    q.host.start_stream("i1", None).unwrap();
    assert!(matches!(
        q.host.stream_chunk("i1", "a", "x"),
        Err(StateError::NotSent(OutboundRefusal::NotGranted(
            Capability::ChannelsStreaming
        )))
    ));
    q.drive();
    assert!(server_notifications(&q, "channels/outgoing/chunk").is_empty());
}

/// The host gates its `inference/lifecycle` without reading its params
/// (`session/host/turns.rs`, encoded straight from their type): that holds only while the
/// method's requirement does not depend on them (§10.5), whatever they carry.
#[test]
fn s10_5_the_lifecycle_requirement_reads_no_params() {
    let full = json!({ "inferenceId": "i", "conversationId": "c", "turnIndex": 1,
                       "phase": "completed", "model": { "id": "m" },
                       "usage": { "inputTokens": 1, "outputTokens": 2 } });
    let started = json!({ "phase": "started" });
    let of = |p| crate::protocol::method_requirement("inference/lifecycle", p);
    assert_eq!(of(None), of(Some(&full)));
    assert_eq!(of(None), of(Some(&started)));
    assert!(of(None).is_some(), "a typed method");
}

/// §10.5's table requires `conversationId` and `turnIndex` on `started`
/// (`LifecycleParams::missing_members`, the rule `mcpl check-host` judges a host by): the
/// library server judged a `started` without them by nothing, only `check-host` did. Now it
/// reports `lifecycle_missing_members` (a defect of the host) naming what is left out, and
/// still pairs the turn by its `inferenceId` (correlation needs nothing more); a terminal
/// without them is fine (§15.2's example carries neither).
#[test]
fn s10_5_a_started_without_conversation_id_or_turn_index_is_reported_by_the_server() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    let from = p.server_out.len();
    let signal = |params: Value| json!({"jsonrpc": "2.0", "method": "inference/lifecycle", "params": params});
    server_reads(
        &mut p,
        signal(json!({"inferenceId": "bare", "phase": "started"})),
    );
    server_reads(
        &mut p,
        signal(json!({"inferenceId": "half", "conversationId": "c", "phase": "started"})),
    );
    server_reads(
        &mut p,
        signal(
            json!({"inferenceId": "full", "conversationId": "c", "turnIndex": 0,
                      "phase": "started"}),
        ),
    );
    server_reads(
        &mut p,
        signal(json!({"inferenceId": "bare", "phase": "completed"})),
    );
    let reported: Vec<(&str, String, DiagnosticKind)> = server_diagnostics(&p, from)
        .into_iter()
        .map(|d| (d.code(), d.detail(), d.kind()))
        .collect();
    assert_eq!(reported.len(), 2, "{reported:?}");
    assert!(reported
        .iter()
        .all(|(code, _, kind)| *code == "lifecycle_missing_members"
            && *kind == DiagnosticKind::PeerDefect));
    assert!(
        reported[0].1.contains("bare") && reported[0].1.contains("conversationId and turnIndex")
    );
    assert!(reported[1].1.contains("half") && reported[1].1.contains("turnIndex"));
    assert!(!reported[1].1.contains("conversationId and"));
    // The turns are paired all the same.
    let started = p.server_out[from..]
        .iter()
        .filter(|o| matches!(o, ServerOutput::Turn(TurnEvent::Started(_))))
        .count();
    assert_eq!(started, 3);
}
