//! The server's own requests when the host does not answer them: each is given up at its
//! deadline, at most `max_pending` wait at once, and what waited on one (the §14.5 channel
//! ledger, a §11.4 stream) no longer does.

use super::*;

/// The ids of the requests `p`'s server gave up, after its first `from` outputs.
fn timed_out(p: &Pair, from: usize) -> Vec<u64> {
    p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::RequestTimedOut { id } => Some(*id),
            _ => None,
        })
        .collect()
}

/// The ids of the answers `p`'s server delivered.
fn responses(p: &Pair) -> Vec<u64> {
    p.server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Response { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn s11_a_request_the_host_never_answers_is_given_up_at_its_deadline() {
    let (mut p, asked) = asked_without_stream();
    p.to_host.clear(); // the host never reads it
    let deadline = p.now + crate::session::DEFAULT_REQUEST_TIMEOUT;
    assert_eq!(p.server.poll_timeout(), Some(deadline));
    let from = p.server_out.len();
    p.server.handle_timeout(deadline - Duration::from_millis(1));
    p.collect();
    assert!(timed_out(&p, from).is_empty(), "not before its deadline");
    p.server.handle_timeout(deadline);
    p.collect();
    assert_eq!(timed_out(&p, from), vec![asked]);
    assert_eq!(p.server.poll_timeout(), None, "nothing waits any more");
    p.server.handle_timeout(deadline + Duration::from_secs(1));
    p.collect();
    assert_eq!(timed_out(&p, from), vec![asked], "given up once");
    // The answer that comes after all is reported, not delivered.
    let late = json!({"jsonrpc": "2.0", "id": asked, "result": {"content": "late"}});
    let from = p.server_out.len();
    server_reads(&mut p, late);
    assert!(responses(&p).is_empty());
    let codes: Vec<_> = server_diagnostics(&p, from)
        .iter()
        .map(|d| d.code())
        .collect();
    assert_eq!(codes, ["unexpected_response"]);
}

#[test]
fn a_host_that_never_answers_holds_at_most_max_pending_requests() {
    for timeout in [Some(Duration::from_secs(1)), None] {
        let rules = ServerRules {
            max_pending: 3,
            request_timeout: timeout,
            ..inference_rules()
        };
        let mut p = Pair::connect(&["inferenceRequest", "inferenceRequest.streaming"], rules);
        for _ in 0..3 {
            p.server
                .request(p.now, "inference/request", ask(false))
                .expect("within the bound");
        }
        assert_eq!(
            p.server.request(p.now, "inference/request", ask(false)),
            Err(SendRefusal::TooManyPending { limit: 3 })
        );
        p.collect();
        assert_eq!(p.to_host.len(), 3, "the refused one is not written");
        p.to_host.clear();
        let later = p.now + Duration::from_secs(1);
        p.server.handle_timeout(later);
        let sent_again = p.server.request(later, "inference/request", ask(false));
        // Given up at their deadline, they make room; without one, they wait.
        assert_eq!(sent_again.is_ok(), timeout.is_some(), "{timeout:?}");
    }
}

#[test]
fn s14_5_a_channel_change_never_answered_settles_closed_and_unblocks_the_next() {
    let mut p = registering(json!([channel("a", "old"), channel("z", "kept")]));
    p.drive();
    assert_eq!(labels(&p.server).len(), 2);
    let lost = p
        .server
        .request(
            p.now,
            "channels/changed",
            json!({ "updated": [channel("a", "new")] }),
        )
        .expect("granted");
    p.collect();
    p.to_host.clear(); // the host never reads it
    p.server
        .request(
            p.now,
            "channels/register",
            json!({ "channels": [channel("b", "two")] }),
        )
        .expect("granted");
    p.drive();
    assert_eq!(
        labels(&p.server),
        vec![
            ("a".into(), Some("old".into())),
            ("z".into(), Some("kept".into()))
        ],
        "the answered registration waits for the change sent before it"
    );
    let from = p.server_out.len();
    p.server
        .handle_timeout(p.now + crate::session::DEFAULT_REQUEST_TIMEOUT);
    p.collect();
    assert_eq!(timed_out(&p, from), vec![lost]);
    // The host may or may not hold `a` as updated: the server no longer claims it.
    assert_eq!(
        labels(&p.server),
        vec![
            ("b".into(), Some("two".into())),
            ("z".into(), Some("kept".into()))
        ]
    );
}

#[test]
fn s11_4_a_stream_given_up_takes_no_more_chunks() {
    let (mut p, asked, id) = streaming_asked();
    p.server
        .handle_timeout(p.now + crate::session::DEFAULT_REQUEST_TIMEOUT);
    p.collect();
    assert_eq!(timed_out(&p, 0), vec![asked]);
    let from = p.server_out.len();
    p.host
        .inference_chunk(p.now, &id, "late")
        .expect("streamed");
    p.drive();
    assert!(!p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::InferenceChunk { .. })));
    let codes: Vec<_> = server_diagnostics(&p, from)
        .iter()
        .map(|d| d.code())
        .collect();
    assert_eq!(codes, ["unknown_inference_chunk"]);
}

#[test]
fn a_closed_connection_waits_on_nothing() {
    let (mut p, _) = asked_without_stream();
    p.server.handle_close(p.now);
    assert_eq!(p.server.poll_timeout(), None);
    let from = p.server_out.len();
    p.server
        .handle_timeout(p.now + crate::session::DEFAULT_REQUEST_TIMEOUT);
    p.collect();
    assert!(timed_out(&p, from).is_empty());
}

/// Issue #24: an answer the application encoded itself (`ServerState::answer_encoded`)
/// reaches the host as the same result a `Value` answer would, once (a second answer to the
/// id is refused). A hook's encoded answer is still filtered: `hooks.rs`, §10.8.
#[test]
fn an_encoded_answer_reaches_the_host_as_the_same_result() {
    use crate::jsonrpc::Encoded;
    let mut p = Pair::new(&["tools", "pushEvents"], server_rules());
    p.host.start(p.now);
    p.drive();
    let result = json!({ "content": [{ "type": "text", "text": "é\n\"x\"" }], "isError": false });
    let id = p
        .host
        .request(
            p.now,
            "tools/call",
            json!({ "name": "echo", "arguments": {} }),
            Duration::from_secs(1),
        )
        .expect("tools granted");
    p.drive();
    let Some(ServerOutput::Request { id: sid, .. }) = p.server_out.last().cloned() else {
        panic!("the server got the call: {:?}", p.server_out);
    };
    let encoded = Encoded::encode(&result).unwrap();
    p.server
        .answer_encoded(sid.clone(), encoded.clone())
        .expect("handed out");
    p.drive();
    assert!(p.host_out.contains(&HostOutput::Response {
        id,
        outcome: Ok(result)
    }));
    assert!(matches!(
        p.server.answer_encoded(sid, encoded),
        Err(SendRefusal::UnknownRequest(_))
    ));
}

/// `ServerRules` that cannot work (a bound of 0, a timeout under 1 ms, a lifecycle bound of
/// 0) are the author's mistake, told as the state's first output, naming each field; the
/// defaults tell nothing. Before, a `max_in_flight` of 0 answered every request busy
/// unexplained.
#[test]
fn server_rules_that_cannot_work_are_told_first_naming_each_field() {
    let fresh = |rules: ServerRules| {
        let mut s = ServerState::new(rules);
        std::iter::from_fn(move || s.poll_output()).collect::<Vec<_>>()
    };
    assert!(fresh(server_rules()).is_empty(), "the defaults are fine");
    let mut rules = server_rules();
    rules.max_in_flight = 0;
    rules.request_timeout = Some(Duration::ZERO);
    rules.lifecycle.max_open_turns = 0;
    let out = fresh(rules);
    let [ServerOutput::Diagnostic(d @ ServerDiagnostic::InvalidRules { defects })] = &out[..]
    else {
        panic!("{out:?}");
    };
    assert!(d.is_author_mistake(), "{d}");
    assert_eq!(d.code(), "invalid_rules");
    for field in [
        "ServerRules.max_in_flight",
        "ServerRules.request_timeout",
        "LifecycleConfig.max_open_turns",
    ] {
        assert!(
            defects.iter().any(|l| l.starts_with(field)),
            "{field}: {defects:?}"
        );
    }
    assert_eq!(defects.len(), 3, "{defects:?}");
}
