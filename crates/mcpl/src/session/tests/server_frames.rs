//! [`ServerState::handle_frame`]: every message a frame's text holds, handled as the async
//! `server::Server` handles it, by the one reading [`HostState::handle_frame`] shares
//! (`session::frames`). Before, the sans-I/O server had only `handle_text`, which was `Err`
//! for a batch (JSON-RPC 2.0 §6), several messages on one line and junk: its driver split
//! and answered them itself, or did not.

use super::*;
use crate::jsonrpc::codes;
use crate::policy::Form;

/// The bound on a batch these drivers apply (the peer's default).
const MAX_BATCH: usize = 1024;

/// A connected pair, and where the server's frames and outputs stand.
fn connected() -> (Pair, usize, usize) {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.collect();
    p.to_host.clear();
    let from = p.server_out.len();
    (p, 0, from)
}

/// The frames the server wrote since the last look, as JSON (taken off the wire).
fn server_frames(p: &mut Pair) -> Vec<Value> {
    p.collect();
    p.to_host
        .drain(..)
        .map(|t| serde_json::from_str(&t).expect("the server writes JSON"))
        .collect()
}

fn ping(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// The unreadable diagnostics since `from`.
fn unreadable(p: &Pair, from: usize) -> Vec<(Option<String>, String, bool)> {
    server_diagnostics(p, from)
        .into_iter()
        .filter_map(|d| match d {
            ServerDiagnostic::Unreadable {
                id,
                detail,
                answered,
            } => Some((id.clone(), detail.clone(), *answered)),
            _ => None,
        })
        .collect()
}

/// The policy Request the host sent at connect (its params), under `id`.
fn policy_request(p: &Pair, id: u64) -> Value {
    let sent = p
        .host_wrote
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["method"] == "featureSets/update")
        .expect("the host sent its policy");
    json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update", "params": sent["params"]})
}

/// JSON-RPC 2.0 §6: a batch of requests the machine answers itself is answered under each
/// id, in one array frame, as the async server writes it.
#[test]
fn s6_a_batch_of_requests_is_answered_in_one_array() {
    let (mut p, _, from) = connected();
    let text = json!([ping(json!(1)), ping(json!("two"))]).to_string();
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(
        frames,
        [json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": "two", "result": {}},
        ])]
    );
    assert!(unreadable(&p, from).is_empty());
    // JSON-RPC 2.0 §6: an array even for one answer.
    p.server
        .handle_frame(p.now, &json!([ping(json!(3))]).to_string(), MAX_BATCH);
    assert_eq!(
        server_frames(&mut p),
        [json!([{"jsonrpc": "2.0", "id": 3, "result": {}}])]
    );
    // A fractional id (JSON-RPC 2.0 §4, a SHOULD NOT) is a request's id: its answer joins
    // the array too (it went out alone, after an array of the others).
    let text =
        r#"[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":2.5,"method":"ping"}]"#;
    p.server.handle_frame(p.now, text, MAX_BATCH);
    assert_eq!(
        server_frames(&mut p),
        [json!([
            {"jsonrpc": "2.0", "id": 4, "result": {}},
            {"jsonrpc": "2.0", "id": 2.5, "result": {}},
        ])]
    );
}

/// JSON-RPC 2.0 §6: notifications in a batch are handled and owed nothing; an invalid
/// entry is answered `-32600` under its id (or `null`) and reported; a batch of
/// notifications only is answered with nothing.
#[test]
fn s6_a_batch_mixing_notifications_and_requests() {
    let (mut p, _, from) = connected();
    let text = json!([
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        ping(json!(7)),
        {"jsonrpc": "2.0", "id": 8, "method": 5},
        1,
    ])
    .to_string();
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let got: Vec<(Value, Option<i64>)> = frames[0]
        .as_array()
        .expect("one array")
        .iter()
        .map(|f| (f["id"].clone(), f["error"]["code"].as_i64()))
        .collect();
    // The refusals first, then the answers as they came (the peer's order).
    assert_eq!(
        got,
        [
            (json!(8), Some(codes::INVALID_REQUEST)),
            (Value::Null, Some(codes::INVALID_REQUEST)),
            (json!(7), None),
        ]
    );
    assert_eq!(unreadable(&p, from).len(), 2);
    let notes = json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]);
    p.server.handle_frame(p.now, &notes.to_string(), MAX_BATCH);
    assert!(server_frames(&mut p).is_empty());
}

/// A request of the batch handed to the application: each answer its own frame (the
/// documented reading), the machine's own first, the application's when it answers.
#[test]
fn s6_a_batch_with_a_request_for_the_application_is_answered_frame_by_frame() {
    let (mut p, _, from) = connected();
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "example/work", "params": {}});
    p.server.handle_frame(
        p.now,
        &json!([call, ping(json!(10))]).to_string(),
        MAX_BATCH,
    );
    assert_eq!(
        server_frames(&mut p),
        [json!({"jsonrpc": "2.0", "id": 10, "result": {}})]
    );
    let handed = p.server_out[from..]
        .iter()
        .any(|o| matches!(o, ServerOutput::Request { id, .. } if *id == RequestId::from(9u64)));
    assert!(handed, "{:?}", &p.server_out[from..]);
    p.server
        .answer(RequestId::from(9u64), Ok(json!({"content": []})))
        .expect("answered");
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 9);
}

/// A request reusing, in its batch, the id of one handed to the application: its refusal
/// is no answer to the request the application holds, so the batch is not complete and
/// goes out frame by frame (the documented reading), the refusal now, the application's
/// answer when it comes (it was joined as if the batch were all answered).
#[test]
fn s6_a_refusal_under_the_id_of_a_request_the_application_holds_answers_nothing_else() {
    let (mut p, _, _) = connected();
    let call = json!({"jsonrpc": "2.0", "id": 50, "method": "example/work", "params": {}});
    p.server.handle_frame(
        p.now,
        &json!([call, ping(json!(50))]).to_string(),
        MAX_BATCH,
    );
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 50, "{frames:?}");
    assert_eq!(frames[0]["error"]["code"], -32600, "{frames:?}");
    p.server
        .answer(RequestId::from(50u64), Ok(json!({"content": []})))
        .expect("answered");
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 50, "{frames:?}");
    assert!(frames[0].get("result").is_some(), "{frames:?}");
}

/// JSON-RPC 2.0 §6: a batch is answered whole once each of its requests is, counted per
/// entry, never per id: in `[call 47, cancel 47, call 47]` the cancel frees 47 and the
/// second call is handed out under it, so 47 is owed two answers; the `-32800` alone is no
/// complete array (the second call still waits for the application). Before, the batch's
/// ids were a set, the `-32800` was written as the complete array `[-32800]` and the second
/// call's answer came later alone (r15 F1); the async `Server` counts requests.
#[test]
fn s6_a_batch_owing_one_id_twice_is_not_complete_with_one_answer() {
    let (mut p, _, from) = connected();
    let call = json!({"jsonrpc": "2.0", "id": 47, "method": "example/work", "params": {}});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 47}});
    p.server
        .handle_frame(p.now, &json!([call, cancel, call]).to_string(), MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].is_object(), "no array yet: {frames:?}");
    assert_eq!(frames[0]["id"], 47, "{frames:?}");
    assert_eq!(frames[0]["error"]["code"], -32800, "{frames:?}");
    let handed = p.server_out[from..]
        .iter()
        .filter(|o| matches!(o, ServerOutput::Request { id, .. } if *id == RequestId::from(47u64)))
        .count();
    assert_eq!(handed, 2, "{:?}", &p.server_out[from..]);
}

/// JSON-RPC 2.0 §6: an empty batch, and one past the bound, are answered with one
/// `-32600` under `null` and reported.
#[test]
fn s6_an_empty_batch_and_one_past_the_bound_are_refused_whole() {
    let (mut p, _, from) = connected();
    p.server.handle_frame(p.now, " [ ] ", MAX_BATCH);
    let pings = json!([ping(json!(1)), ping(json!(2)), ping(json!(3))]);
    p.server.handle_frame(p.now, &pings.to_string(), 2);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 2, "{frames:?}");
    for f in &frames {
        assert_eq!(f["id"], Value::Null);
        assert_eq!(f["error"]["code"], codes::INVALID_REQUEST);
    }
    assert_eq!(frames[1]["error"]["data"], json!({"limit": 2, "count": 3}));
    assert_eq!(unreadable(&p, from).len(), 2);
}

/// Several messages on one line are each read alone and the defect reported once; past
/// the bound the rest is refused with one `-32600` under `null`.
#[test]
fn several_messages_on_one_line_are_each_handled_and_reported_once() {
    let (mut p, _, from) = connected();
    let text = format!("{} {}", ping(json!(1)), json!([ping(json!(2))]));
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    assert_eq!(
        server_frames(&mut p),
        [
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            json!([{"jsonrpc": "2.0", "id": 2, "result": {}}]),
        ]
    );
    let diags = unreadable(&p, from);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(diags[0].1.contains("2 messages on one line"), "{diags:?}");
    let three = format!("{} {} {}", ping(json!(1)), ping(json!(2)), ping(json!(3)));
    p.server.handle_frame(p.now, &three, 2);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert_eq!(frames[2]["id"], Value::Null);
    assert_eq!(
        frames[2]["error"]["data"],
        json!({"limit": 2, "reason": "messages_per_line"})
    );
}

/// JSON-RPC 2.0 §5: junk is answered as the peer answers it (`-32700` under the id a
/// request showed) and reported, never `Err`.
#[test]
fn s5_junk_is_answered_and_reported() {
    let (mut p, _, from) = connected();
    p.server.handle_frame(
        p.now,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"#,
        MAX_BATCH,
    );
    p.server.handle_frame(p.now, "not json", MAX_BATCH);
    let frames = server_frames(&mut p);
    let ids: Vec<(Value, Value)> = frames
        .iter()
        .map(|f| (f["id"].clone(), f["error"]["code"].clone()))
        .collect();
    // A text that shows no JSON value is not answered (the peer's reading).
    assert_eq!(ids, [(json!(5), json!(codes::PARSE_ERROR))]);
    let diags = unreadable(&p, from);
    let answered: Vec<bool> = diags.iter().map(|(_, _, answered)| *answered).collect();
    assert_eq!(answered, [true, false], "{diags:?}");
}

/// §6.7: a valid policy Request in a batch is applied and answered like any request of
/// the batch (the peer delivers it so); one refused (invalid) there is answered as not
/// applied and refused unread: nothing is granted until the next policy Request (§6.4).
#[test]
fn s6_7_the_policy_request_in_a_batch() {
    let (mut p, _, from) = connected();
    assert!(p.server.is_ready());
    let text = json!([policy_request(&p, 40), ping(json!(41))]).to_string();
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let answers = frames[0].as_array().expect("one array");
    assert_eq!(answers[0]["id"], 40);
    assert_eq!(answers[0]["result"]["accepted"], true, "{answers:?}");
    assert_eq!(answers[1]["id"], 41);
    assert!(p.server.is_ready());
    assert!(p.server.grant().allows(Capability::PushEvents));
    let mut refused = policy_request(&p, 42);
    refused["jsonrpc"] = json!("1.0");
    p.server.handle_frame(
        p.now,
        &json!([refused, ping(json!(43))]).to_string(),
        MAX_BATCH,
    );
    let frames = server_frames(&mut p);
    let answers = frames[0].as_array().expect("one array");
    assert_eq!(answers[0]["id"], 42);
    assert_eq!(answers[0]["error"]["code"], codes::INVALID_REQUEST);
    assert_eq!(answers[0]["error"]["data"]["applied"], false, "{answers:?}");
    assert_eq!(answers[1]["id"], 43);
    assert!(!p.server.grant().allows(Capability::PushEvents));
    let malformed = server_diagnostics(&p, from).into_iter().any(|d| {
        matches!(
            d,
            ServerDiagnostic::PolicyMalformed {
                form: Form::Request,
                ..
            }
        )
    });
    assert!(malformed);
}

/// §6.7, §6.4: a batch past the bound holding the policy Request refuses it unread.
#[test]
fn s6_7_the_policy_request_in_a_batch_past_the_bound_is_refused_unread() {
    let (mut p, _, _) = connected();
    let text = json!([ping(json!(1)), ping(json!(2)), policy_request(&p, 3)]).to_string();
    p.server.handle_frame(p.now, &text, 2);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], Value::Null);
    assert!(!p.server.grant().allows(Capability::PushEvents));
}

/// JSON-RPC 2.0 §5 (the peer's `ids::integral_id`): an answer to a request of the
/// server's own under its id written as a whole float answers it, alone or in a batch; a
/// malformed one fails it at once rather than at its deadline.
#[test]
fn s5_a_whole_float_id_answers_the_servers_own_request() {
    let (mut p, _, from) = connected();
    let a = p
        .server
        .request(p.now, "push/event", push(0, "e1")["params"].clone())
        .expect("sent");
    let b = p
        .server
        .request(p.now, "push/event", push(1, "e2")["params"].clone())
        .expect("sent");
    let c = p
        .server
        .request(p.now, "push/event", push(2, "e3")["params"].clone())
        .expect("sent");
    server_frames(&mut p);
    let single = format!(r#"{{"jsonrpc":"2.0","id":{a}.0,"result":{{"accepted":true}}}}"#);
    p.server.handle_frame(p.now, &single, MAX_BATCH);
    let batch = format!(r#"[{{"jsonrpc":"2.0","id":{b}.0,"result":{{"accepted":true}}}}]"#);
    p.server.handle_frame(p.now, &batch, MAX_BATCH);
    let bad =
        format!(r#"{{"jsonrpc":"2.0","id":{c},"result":{{}},"error":{{"code":1,"message":"m"}}}}"#);
    p.server.handle_frame(p.now, &bad, MAX_BATCH);
    assert!(
        server_frames(&mut p).is_empty(),
        "responses are owed nothing"
    );
    let got: Vec<(u64, bool)> = p.server_out[from..]
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Response { id, outcome } => Some((*id, outcome.is_ok())),
            _ => None,
        })
        .collect();
    assert_eq!(got, [(a, true), (b, true), (c, false)]);
}

/// MCP base protocol (an id is not reused while its request is in flight), JSON-RPC 2.0 §5,
/// §6; §6.7, §6.4 fail closed: a request reusing the id of one taken earlier in the same
/// batch is refused `-32600` (id in use), never run, as the async server's peer refuses it
/// (`peer::serving`); the policy Request so sent is not applied and grants nothing until
/// the next one. Before, both were answered and the policy applied.
#[test]
fn s6_7_a_request_reusing_an_id_taken_earlier_in_its_batch_is_refused() {
    let (mut p, _, from) = connected();
    assert!(p.server.grant().allows(Capability::PushEvents));
    let text = json!([ping(json!(1)), policy_request(&p, 1)]).to_string();
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let answers = frames[0].as_array().expect("one array");
    assert_eq!(answers.len(), 2, "{answers:?}");
    // The refusal first, as the peer writes a batch's refusals before its answers.
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(answers[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(
        answers[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in use")),
        "{answers:?}"
    );
    assert_eq!(answers[0]["error"]["data"]["applied"], false, "{answers:?}");
    assert_eq!(answers[1], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert!(!p.server.grant().allows(Capability::PushEvents));
    let reported = unreadable(&p, from);
    assert!(
        reported
            .iter()
            .any(|(id, detail, answered)| id.as_deref() == Some("1")
                && detail.contains("in use")
                && *answered),
        "{reported:?}"
    );
    // The other order: the policy Request taken (granting), the ping after it refused.
    let text = json!([policy_request(&p, 2), ping(json!(2))]).to_string();
    p.server.handle_frame(p.now, &text, MAX_BATCH);
    let frames = server_frames(&mut p);
    let answers = frames[0].as_array().expect("one array");
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["id"], 2);
    assert_eq!(answers[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(answers[0]["error"].get("data").is_none(), "{answers:?}");
    assert_eq!(answers[1]["result"]["accepted"], true, "{answers:?}");
    assert!(p.server.grant().allows(Capability::PushEvents));
}

/// §6.7, §6.4 fail closed: a policy Request under the id of a request still with the
/// application is refused as the async server refuses it (id in use, not applied), and
/// the grant before it no longer holds. Before, it was refused without saying so and the
/// previous grant stayed.
#[test]
fn s6_7_a_policy_request_under_the_id_of_a_request_in_flight_grants_nothing() {
    let (mut p, _, from) = connected();
    assert!(p.server.grant().allows(Capability::PushEvents));
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "example/work", "params": {}});
    p.server.handle_frame(p.now, &call.to_string(), MAX_BATCH);
    assert!(server_frames(&mut p).is_empty());
    let policy = policy_request(&p, 9).to_string();
    p.server.handle_frame(p.now, &policy, MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 9);
    assert_eq!(frames[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(
        frames[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in use")),
        "{frames:?}"
    );
    assert_eq!(frames[0]["error"]["data"]["applied"], false, "{frames:?}");
    assert!(!p.server.grant().allows(Capability::PushEvents));
    assert!(unreadable(&p, from)
        .iter()
        .any(|(id, _, answered)| id.as_deref() == Some("9") && *answered));
    // A ping under it: refused alike, and the application's answer still goes out.
    p.server
        .handle_frame(p.now, &ping(json!(9)).to_string(), MAX_BATCH);
    let frames = server_frames(&mut p);
    assert_eq!(frames[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(frames[0]["error"].get("data").is_none(), "{frames:?}");
    p.server
        .answer(RequestId::from(9u64), Ok(json!({"content": []})))
        .expect("answered");
    let frames = server_frames(&mut p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["result"], json!({"content": []}));
}

/// JSON-RPC 2.0 §4: a request whose id is a number with a fraction or an exponent is taken
/// and answered under it, and reported for its form once per request
/// ([`ServerDiagnostic::FractionalId`]), as the async server's peer reports it
/// (`peer::Diagnostic::FractionalId`): alone, in a batch, and refused in use alike (the
/// peer reports it as it reads the request, before its id is judged). An integer id is
/// not reported. Before, the sans-I/O server reported nothing.
#[test]
fn jsonrpc_s4_a_request_id_with_a_fraction_is_reported_once_per_request() {
    let (mut p, _, from) = connected();
    p.server.handle_frame(
        p.now,
        r#"{"jsonrpc":"2.0","id":2.5,"method":"ping"}"#,
        MAX_BATCH,
    );
    p.server.handle_frame(
        p.now,
        r#"[{"jsonrpc":"2.0","id":3.0,"method":"ping"},{"jsonrpc":"2.0","id":3e0,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
        MAX_BATCH,
    );
    p.server
        .handle_text(p.now, r#"{"jsonrpc":"2.0","id":5.5,"method":"ping"}"#)
        .expect("a message");
    let frames = server_frames(&mut p);
    assert_eq!(
        frames[0],
        json!({"jsonrpc": "2.0", "id": 2.5, "result": {}})
    );
    let reported: Vec<String> = server_diagnostics(&p, from)
        .into_iter()
        .filter_map(|d| match d {
            ServerDiagnostic::FractionalId { id, method } => Some(format!("{id} {method}")),
            _ => None,
        })
        .collect();
    assert_eq!(reported, ["2.5 ping", "3.0 ping", "3.0 ping", "5.5 ping"]);
    let d = server_diagnostics(&p, from)
        .into_iter()
        .find(|d| matches!(d, ServerDiagnostic::FractionalId { .. }))
        .expect("reported")
        .clone();
    assert_eq!(d.code(), "fractional_id");
    assert_eq!(d.kind(), crate::session::DiagnosticKind::PeerDefect);
    assert!(d.to_string().contains("§4"), "{d}");
}
