//! A server request handed to the application ([`HostOutput::Request`]) that the
//! application never answers: a request with an id always gets a response (JSON-RPC 2.0
//! §4), so past [`HostRules::answer_timeout`] the machine answers it `-32603` itself
//! (`data.reason: "answer_timeout"`), reports [`HostDiagnostic::AnswerTimedOut`] and hands
//! out [`HostOutput::AnswerTimedOut`] so a driver stops the work. The deadline is the
//! machine's: it is in [`HostState::poll_timeout`] and applied by
//! [`HostState::handle_timeout`].

use super::*;

/// A host whose rules take `answer_timeout`, connected to a server that may ask for
/// inference (`assist`, streaming too).
fn connect_with(answer_timeout: Option<Duration>) -> Pair {
    let mut p = Pair::new(
        &["inferenceRequest", "inferenceRequest.*"],
        inference_rules(),
    );
    let rules = HostRules {
        answer_timeout,
        ..HostRules::new(["inferenceRequest", "inferenceRequest.*"])
    };
    p.host = HostState::new(rules, p.now, SystemTime::UNIX_EPOCH).unwrap();
    p.host.start(p.now);
    p.drive();
    assert!(matches!(p.connected()[..], [Ok(())]), "{:?}", p.host_out);
    assert_eq!(p.host.poll_timeout(), None, "nothing of ours waits");
    p
}

fn ask(p: &mut Pair, id: i64) {
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": id, "method": "inference/request",
        "params": {"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}}),
    );
    p.drive();
}

fn timed_out(p: &Pair) -> Vec<RequestId> {
    p.host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::AnswerTimedOut { id } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_application_that_never_answers_is_answered_at_the_deadline() {
    let after = Duration::from_secs(40);
    let mut p = connect_with(Some(after));
    ask(&mut p, 90);
    assert_eq!(handed_inference(&p), RequestId::from(90i64));
    let due = p.now + after;
    assert_eq!(
        p.host.poll_timeout(),
        Some(due),
        "the deadline is the machine's"
    );
    p.host.handle_timeout(due - Duration::from_millis(1));
    p.collect();
    assert_eq!(p.host_answer(90), None, "not before the deadline");
    p.host.handle_timeout(due);
    p.collect();
    let answer = p.host_answer(90).expect("answered at the deadline");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_timeout",
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["timeoutMs"], 40_000, "{answer}");
    assert_eq!(timed_out(&p), [RequestId::from(90i64)]);
    assert!(p.host_out.iter().any(|o| matches!(o,
        HostOutput::Diagnostic(HostDiagnostic::AnswerTimedOut { method, id, after: a })
            if method == "inference/request" && id == "90" && *a == after)));
    // The application's late answer is refused, nothing more is written, nothing waits.
    assert!(matches!(
        p.host
            .answer(RequestId::from(90i64), Ok(json!({"content": "late"}))),
        Err(StateError::UnknownRequest(_))
    ));
    assert!(p
        .host
        .inference_chunk(p.now, &RequestId::from(90i64), "x")
        .is_err());
    let written = p.host_wrote.len();
    p.collect();
    assert_eq!(p.host_wrote.len(), written);
    assert_eq!(p.host.poll_timeout(), None);
    // The id is free again (JSON-RPC 2.0): a new request under it is handed out.
    ask(&mut p, 90);
    assert_eq!(
        p.host_out
            .iter()
            .filter(|o| matches!(o, HostOutput::Request { .. }))
            .count(),
        2
    );
}

#[test]
fn deadlines_leave_with_the_answer_and_the_cancel_and_expire_in_order() {
    let after = Duration::from_secs(10);
    let mut p = connect_with(Some(after));
    ask(&mut p, 1);
    p.now += Duration::from_secs(3);
    ask(&mut p, 2);
    p.now += Duration::from_secs(3);
    ask(&mut p, 3);
    let t0 = p.now - Duration::from_secs(6);
    assert_eq!(p.host.poll_timeout(), Some(t0 + after));
    // Answered: its deadline goes with it.
    p.host
        .answer(
            RequestId::from(1i64),
            Ok(json!({"content": "ok", "finishReason": "end_turn"})),
        )
        .unwrap();
    assert_eq!(p.host.poll_timeout(), Some(t0 + Duration::from_secs(13)));
    // Cancelled by the server: likewise.
    p.server_writes(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 2}}),
    );
    p.drive();
    assert_eq!(p.host.poll_timeout(), Some(t0 + Duration::from_secs(16)));
    p.host.handle_timeout(t0 + Duration::from_secs(100));
    p.collect();
    assert_eq!(timed_out(&p), [RequestId::from(3i64)]);
    assert_eq!(p.host_answer(1).unwrap()["result"]["content"], "ok");
    assert_eq!(p.host_answer(2).unwrap()["error"]["code"], -32800);
    assert_eq!(p.host_answer(3).unwrap()["error"]["code"], -32603);
    assert_eq!(p.host.poll_timeout(), None);
}

#[test]
fn no_answer_timeout_means_no_deadline() {
    let mut p = connect_with(None);
    ask(&mut p, 5);
    assert_eq!(handed_inference(&p), RequestId::from(5i64));
    assert_eq!(p.host.poll_timeout(), None);
    p.host
        .handle_timeout(p.now + Duration::from_secs(86_400 * 365));
    p.collect();
    assert_eq!(p.host_answer(5), None);
    assert!(timed_out(&p).is_empty());
    p.host
        .answer(
            RequestId::from(5i64),
            Ok(json!({"content": "ok", "finishReason": "end_turn"})),
        )
        .unwrap();
    p.collect();
    assert_eq!(p.host_answer(5).unwrap()["result"]["content"], "ok");
}

/// The default is bounded, and a rule of a deadline under 1 ms is a mistake reported by
/// name ([`HostRules::defects`]).
#[test]
fn the_default_answer_timeout_is_bounded_and_a_tiny_one_is_refused() {
    let rules = HostRules::new(["inferenceRequest"]);
    assert_eq!(rules.answer_timeout, Some(DEFAULT_ANSWER_TIMEOUT));
    let tiny = HostRules {
        answer_timeout: Some(Duration::ZERO),
        ..rules
    };
    let defects = tiny.defects();
    assert!(
        defects
            .iter()
            .any(|d| d.contains("HostRules.answer_timeout")),
        "{defects:?}"
    );
}

/// After the close nothing waits: the deadline of a request handed out goes with it.
#[test]
fn the_close_ends_the_deadlines() {
    let mut p = connect_with(Some(Duration::from_secs(5)));
    ask(&mut p, 7);
    assert!(p.host.poll_timeout().is_some());
    p.host.handle_close(p.now);
    assert_eq!(p.host.poll_timeout(), None);
}

/// A streamed `inference/request` (§11.4) whose application keeps sending chunks is not cut
/// at the deadline: each chunk restarts the count (the deadline bounds silence, not the
/// length of a generation); silence after the last chunk is still answered at the deadline.
#[test]
fn each_chunk_of_a_streamed_request_restarts_its_deadline() {
    let after = Duration::from_secs(40);
    let mut p = connect_with(Some(after));
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 91, "method": "inference/request",
        "params": {"featureSet": "assist", "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}}),
    );
    p.drive();
    let id = handed_inference(&p);
    let start = p.now;
    // A generation three times the timeout, a chunk every 30 s.
    for step in 1..=4u32 {
        p.now = start + Duration::from_secs(30) * step;
        p.host.handle_timeout(p.now);
        p.collect();
        assert_eq!(p.host_answer(91), None, "cut at {step} × 30 s");
        p.host
            .inference_chunk(p.now, &id, "more")
            .expect("still streaming");
        assert_eq!(p.host.poll_timeout(), Some(p.now + after));
    }
    let last = p.now;
    p.host
        .handle_timeout(last + after - Duration::from_millis(1));
    p.collect();
    assert_eq!(
        p.host_answer(91),
        None,
        "not before the silence reached the timeout"
    );
    p.host.handle_timeout(last + after);
    p.collect();
    let answer = p
        .host_answer(91)
        .expect("silence is answered at the deadline");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_timeout",
        "{answer}"
    );
    assert_eq!(timed_out(&p), [RequestId::from(91i64)]);
}

/// The application's answer after the deadline answered its request is reported by the
/// machine ([`HostDiagnostic::LateAnswer`], once, naming the method and the id), so a
/// sans-I/O host learns why it was refused, as `host::HostSession`'s application does; an
/// answer to a request the server cancelled is not late (the server asked for none), and
/// neither is one to an id never handed out.
#[test]
fn an_answer_after_the_deadline_is_reported_late_once() {
    let after = Duration::from_secs(40);
    let mut p = connect_with(Some(after));
    ask(&mut p, 91);
    ask(&mut p, 92);
    p.host.handle_timeout(p.now + after);
    p.server_writes(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 93}}),
    );
    ask(&mut p, 93);
    p.server_writes(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 93}}),
    );
    p.drive();
    let late = |p: &Pair| -> Vec<(String, String)> {
        p.host_out
            .iter()
            .filter_map(|o| match o {
                HostOutput::Diagnostic(HostDiagnostic::LateAnswer { method, id }) => {
                    Some((method.clone(), id.clone()))
                }
                _ => None,
            })
            .collect()
    };
    for id in [91i64, 91, 93, 94] {
        let answered = p
            .host
            .answer(RequestId::from(id), Ok(json!({"content": "x"})));
        assert!(
            matches!(answered, Err(StateError::UnknownRequest(_))),
            "{answered:?}"
        );
    }
    p.collect();
    assert_eq!(
        late(&p),
        [("inference/request".to_owned(), "91".to_owned())]
    );
}

/// JSON-RPC 2.0 lets the server reuse an id once it is answered: a request handed out
/// under an id the deadline answered before is a new one, so the answer to it is judged
/// as its own. Cancelled by the server, it asked for no answer: the application's answer
/// to it is not late (no [`HostDiagnostic::LateAnswer`] for the first request's id), nor is
/// an answer given while it waits (it answers the request waiting).
#[test]
fn an_answer_to_a_reused_id_cancelled_is_not_late() {
    let after = Duration::from_secs(40);
    let mut p = connect_with(Some(after));
    ask(&mut p, 1);
    p.now += after;
    p.host.handle_timeout(p.now);
    p.collect();
    assert_eq!(timed_out(&p), [RequestId::from(1i64)]);
    // The same id again, cancelled by the server before the application answers.
    ask(&mut p, 1);
    p.server_writes(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1}}),
    );
    p.drive();
    assert_eq!(p.host_answer(1).unwrap()["error"]["code"], -32800);
    let answered = p
        .host
        .answer(RequestId::from(1i64), Ok(json!({"content": "x"})));
    assert!(
        matches!(answered, Err(StateError::UnknownRequest(_))),
        "{answered:?}"
    );
    // A driver that knows the answer came from a hand-out that ended asks the same rule.
    assert!(!p.host.late_answer(&RequestId::from(1i64), true));
    // Reused once more and answered while it waits: the answer is the waiting request's.
    ask(&mut p, 1);
    p.now += after;
    p.host.handle_timeout(p.now);
    ask(&mut p, 1);
    p.host
        .answer(
            RequestId::from(1i64),
            Ok(json!({"content": "ok", "finishReason": "end_turn"})),
        )
        .unwrap();
    p.collect();
    assert!(
        !p.host_out
            .iter()
            .any(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::LateAnswer { .. }))),
        "{:?}",
        p.host_out
    );
    // Nothing under the id is remembered as late now: a stray answer is not late either.
    assert!(!p.host.late_answer(&RequestId::from(1i64), true));
}

/// The late answer to the *first* request under an id the server reused (JSON-RPC 2.0
/// lets it, once the id is answered): the deadline answered request 1 (hand-out A), the
/// server asked again under 1 (hand-out B) and cancelled that. The application's answer
/// from hand-out A then comes: it is late, and is reported so; the answer from hand-out B
/// is not (its request was cancelled: no answer was asked for). A driver tells the two
/// apart by the hand-out its answer comes from (`HostState::late_answer_of`); the id alone
/// cannot (`HostState::late_answer`, `answer`: under a reused id, the new request's).
#[test]
fn the_first_requests_late_answer_under_a_reused_id_is_reported() {
    let after = Duration::from_secs(40);
    let mut p = connect_with(Some(after));
    ask(&mut p, 1);
    let first = p.host.polled_handout();
    p.now += after;
    p.host.handle_timeout(p.now);
    p.collect();
    assert_eq!(timed_out(&p), [RequestId::from(1i64)]);
    ask(&mut p, 1);
    let second = p.host.polled_handout();
    assert_ne!(first, second, "each hand-out has its own number");
    p.server_writes(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1}}),
    );
    p.drive();
    assert_eq!(p.host_answer(1).unwrap()["error"]["code"], -32800);
    let id = RequestId::from(1i64);
    assert!(
        !p.host.late_answer_of(&id, second, true),
        "cancelled: not late"
    );
    assert!(
        p.host.late_answer_of(&id, first, true),
        "the first one's is late"
    );
    p.collect();
    let late: Vec<_> = p
        .host_out
        .iter()
        .filter(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::LateAnswer { id, .. }) if id == "1"))
        .collect();
    assert_eq!(late.len(), 1, "{:?}", p.host_out);
    // Reported once; the id alone names the reused request, which was cancelled.
    assert!(!p.host.late_answer_of(&id, first, true));
    assert!(!p.host.late_answer(&id, true));
}

/// §11.4: a chunk names its request by the id the server wrote (`requestId: 7.0`), as the
/// final answer echoes it, whichever spelling of the same value (`7`) the application
/// used (JSON-RPC 2.0 §5 echo). Before, the chunk carried the application's `7`.
#[test]
fn s11_4_a_chunk_names_its_request_as_the_server_wrote_the_id() {
    let mut p = connect_with(None);
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 7.0, "method": "inference/request",
        "params": {"featureSet": "assist", "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}}),
    );
    p.drive();
    let from = p.host_wrote.len();
    let app = RequestId::from(7i64);
    p.host
        .inference_chunk(p.now, &app, "one")
        .expect("streaming");
    p.host
        .answer(app, Ok(json!({"content": "done"})))
        .expect("answered");
    p.collect();
    let wrote: Vec<Value> = p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(wrote.len(), 2, "{wrote:?}");
    assert_eq!(
        wrote[0]["params"]["requestId"].to_string(),
        "7.0",
        "{wrote:?}"
    );
    assert_eq!(wrote[1]["id"].to_string(), "7.0", "{wrote:?}");
}
