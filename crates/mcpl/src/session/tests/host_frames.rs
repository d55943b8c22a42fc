//! [`HostState::handle_frame`]: every message a frame's text holds, handled as the async
//! peer and host handle it. Before, [`HostState::handle_text`] took single messages only: a
//! JSON-RPC batch (JSON-RPC 2.0 §6), or several messages on one line, was `Err` and nothing
//! was answered or settled by the machine itself, so a batch of responses to the host's own
//! requests left those requests waiting for their deadlines, and a request in a batch was
//! answered by nobody unless the driver split the batch itself.

use super::*;
use crate::jsonrpc::codes;

/// The bound on a batch these drivers apply (the peer's default).
const MAX_BATCH: usize = 1024;

/// A connected pair whose host has sent two requests of its own, ids `(a, b)`, not yet
/// answered (the server never sees them: the test answers for it).
fn two_requests() -> (Pair, u64, u64) {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let t = Duration::from_secs(30);
    let a = p
        .host
        .request(p.now, "tools/list", json!({}), t)
        .expect("sent");
    let b = p
        .host
        .request(p.now, "tools/list", json!({}), t)
        .expect("sent");
    p.collect();
    p.to_server.clear();
    (p, a, b)
}

/// The frames the host wrote after the first `from`, as JSON.
fn wrote_from(p: &mut Pair, from: usize) -> Vec<Value> {
    p.collect();
    p.host_wrote[from..]
        .iter()
        .map(|t| serde_json::from_str(t).expect("the host writes JSON"))
        .collect()
}

/// The answers ([`HostOutput::Response`]) handed out after the first `from` outputs.
fn answered(p: &mut Pair, from: usize) -> Vec<(u64, Result<Value, i64>)> {
    p.host_outputs_from(from)
        .into_iter()
        .filter_map(|o| match o {
            HostOutput::Response { id, outcome } => Some((id, outcome.map_err(|e| e.code))),
            _ => None,
        })
        .collect()
}

/// The host's diagnostics after the first `from` outputs.
fn host_diags(p: &mut Pair, from: usize) -> Vec<HostDiagnostic> {
    p.host_outputs_from(from)
        .into_iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn result(id: u64, n: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [], "n": n}})
}

/// JSON-RPC 2.0 §6: a batch of responses settles each request it answers, at once.
#[test]
fn s6_a_batch_of_responses_settles_each_request_it_answers() {
    let (mut p, a, b) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    let text = json!([result(b, 2), result(a, 1)]).to_string();
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let got = answered(&mut p, from);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&(a, Ok(json!({"tools": [], "n": 1})))));
    assert!(got.contains(&(b, Ok(json!({"tools": [], "n": 2})))));
    assert!(!p.host.is_pending(a) && !p.host.is_pending(b));
    // Responses are owed nothing (JSON-RPC 2.0 §5).
    assert!(wrote_from(&mut p, wrote).is_empty());
    assert!(host_diags(&mut p, from).is_empty());
    // The old entry point still refuses it, nothing handled (its callers unchanged).
    let (mut q, a, _) = two_requests();
    assert!(q
        .host
        .handle_text(q.now, &json!([result(a, 1)]).to_string())
        .is_err());
    assert!(q.host.is_pending(a));
}

/// Several messages on one line (a framing defect: one message per line) are each read
/// alone, as the peer reads them, and the defect is reported once.
#[test]
fn several_messages_on_one_line_are_each_handled_and_reported_once() {
    let (mut p, a, b) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
    let text = format!("{} {}\t{}", result(a, 1), ping, json!([result(b, 2)]));
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let got = answered(&mut p, from);
    assert_eq!(got.len(), 2, "{got:?}");
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames, [json!({"jsonrpc": "2.0", "id": "p", "result": {}})]);
    let diags = host_diags(&mut p, from);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(
        matches!(&diags[0], HostDiagnostic::Unreadable { detail, answered: false, .. }
            if detail.contains("3 messages on one line")),
        "{diags:?}"
    );
}

/// JSON-RPC 2.0 §6: each request of a batch is answered under its id (here all in one array
/// frame, as the machine answered each itself: see `handle_frame`'s reading), a notification is handled, an entry that is no valid
/// message is answered `-32600` under its id (a request) or under `null` (no object) and
/// reported, a malformed answer to a request of ours fails that request at once rather
/// than at its deadline (never answered back), and a response to nothing is reported.
#[test]
fn s6_every_entry_of_a_mixed_batch_is_handled_by_the_one_rule() {
    let (mut p, a, b) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    let text = json!([
        {"jsonrpc": "2.0", "id": 7, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "id": 8, "method": 5},
        1,
        {"jsonrpc": "2.0", "id": a, "result": {}, "error": {"code": 1, "message": "m"}},
        result(b, 2),
        result(999, 0),
    ])
    .to_string();
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let frames = wrote_from(&mut p, wrote);
    // Every answer the batch is owed was the machine's own: one array frame (JSON-RPC 2.0
    // §6), as the async host writes it.
    assert_eq!(frames.len(), 1, "{frames:?}");
    let ids: Vec<(Value, Option<i64>)> = frames[0]
        .as_array()
        .expect("one array")
        .iter()
        .map(|f| (f["id"].clone(), f["error"]["code"].as_i64()))
        .collect();
    assert_eq!(
        ids,
        // The refusals first, then the answers as they came (the peer's order).
        [
            (json!(8), Some(codes::INVALID_REQUEST)),
            (Value::Null, Some(codes::INVALID_REQUEST)),
            (json!(7), None),
        ],
        "{frames:?}"
    );
    let got = answered(&mut p, from);
    assert_eq!(
        got,
        [
            (a, Err(codes::INTERNAL_ERROR)),
            (b, Ok(json!({"tools": [], "n": 2})))
        ]
    );
    let outs = p.host_outputs_from(from);
    // Under MCPL a list change is a `surface-changed` receipt (§17.7).
    assert!(outs.iter().any(|o| matches!(
        o,
        HostOutput::Event(HostEvent::ListChanged(_) | HostEvent::ManifestChange(_))
    )));
    let diags = host_diags(&mut p, from);
    let unreadable = diags
        .iter()
        .filter(|d| matches!(d, HostDiagnostic::Unreadable { .. }))
        .count();
    assert_eq!(unreadable, 3, "{diags:?}");
    assert!(diags
        .iter()
        .any(|d| matches!(d, HostDiagnostic::UnexpectedResponse { id } if id == "999")));
}

/// An empty batch and one past the bound are answered with one `-32600` under `null`
/// (JSON-RPC 2.0 §6), as the peer answers them, and reported; a batch past the bound of
/// responses only is owed nothing, and each request of ours it answers fails at once.
#[test]
fn s6_an_empty_batch_and_one_past_the_bound_are_refused_whole() {
    let (mut p, a, b) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    p.host.handle_frame(p.now, " [ ] ", MAX_BATCH);
    let pings = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]);
    p.host.handle_frame(p.now, &pings.to_string(), 2);
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 2, "{frames:?}");
    for f in &frames {
        assert_eq!(f["id"], Value::Null);
        assert_eq!(f["error"]["code"], codes::INVALID_REQUEST);
    }
    assert_eq!(frames[1]["error"]["data"], json!({"limit": 2, "count": 3}));
    assert_eq!(host_diags(&mut p, from).len(), 2);
    let wrote = p.host_wrote.len();
    let from = p.host_out.len();
    let answers = json!([result(a, 1), result(b, 2), result(999, 3)]).to_string();
    p.host.handle_frame(p.now, &answers, 2);
    assert!(wrote_from(&mut p, wrote).is_empty());
    let got = answered(&mut p, from);
    assert_eq!(
        got,
        [
            (a, Err(codes::INTERNAL_ERROR)),
            (b, Err(codes::INTERNAL_ERROR))
        ]
    );
}

/// A text that is no message is never `Err` here: it is answered as the peer answers it
/// (`ParseError::owed_answers`: `-32700` under the id a request showed, else `null`) and
/// reported; an answer of ours that does not parse fails its request at once.
#[test]
fn s5_a_text_that_is_no_message_is_answered_and_reported_and_fails_ours() {
    let (mut p, a, _) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    p.host.handle_frame(
        p.now,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"#,
        MAX_BATCH,
    );
    p.host.handle_frame(p.now, "not json", MAX_BATCH);
    let cut = format!(r#"{{"jsonrpc":"2.0","id":{a},"result":{{"x":"#);
    p.host.handle_frame(p.now, &cut, MAX_BATCH);
    let frames = wrote_from(&mut p, wrote);
    let ids: Vec<(Value, Value)> = frames
        .iter()
        .map(|f| (f["id"].clone(), f["error"]["code"].clone()))
        .collect();
    assert_eq!(ids, [(json!(5), json!(codes::PARSE_ERROR))], "{frames:?}");
    assert_eq!(answered(&mut p, from), [(a, Err(codes::INTERNAL_ERROR))]);
    let diags = host_diags(&mut p, from);
    assert_eq!(diags.len(), 3, "{diags:?}");
    assert!(diags
        .iter()
        .all(|d| matches!(d, HostDiagnostic::Unreadable { .. })));
}

/// A single message goes as `handle_text` takes it: the answer deciding authority read
/// whole there too (`host_repeated_answer`), here a plain request answered.
#[test]
fn a_single_message_is_handled_as_handle_text_handles_it() {
    let (mut p, a, _) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    p.host
        .handle_frame(p.now, &format!("\u{feff}{}\r\n", result(a, 1)), MAX_BATCH);
    assert_eq!(
        answered(&mut p, from),
        [(a, Ok(json!({"tools": [], "n": 1})))]
    );
    assert!(wrote_from(&mut p, wrote).is_empty());
}

/// Past the bound on messages per line, the rest is refused unread with one `-32600` under
/// `null` (the peer's words and data), and an answer of ours there fails its request now
/// rather than at its deadline.
#[test]
fn messages_past_the_bound_on_a_line_are_refused_and_fail_ours_there() {
    let (mut p, a, b) = two_requests();
    let (from, wrote) = (p.host_out.len(), p.host_wrote.len());
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let text = format!("{} {} {} {}", ping(1), result(b, 2), ping(3), result(a, 1));
    p.host.handle_frame(p.now, &text, 2);
    let frames = wrote_from(&mut p, wrote);
    let ids: Vec<Value> = frames.iter().map(|f| f["id"].clone()).collect();
    assert_eq!(ids, [json!(1), Value::Null], "{frames:?}");
    assert_eq!(
        frames[1]["error"]["data"],
        json!({"limit": 2, "reason": "messages_per_line"})
    );
    let got = answered(&mut p, from);
    assert_eq!(
        got,
        [
            (b, Ok(json!({"tools": [], "n": 2}))),
            (a, Err(codes::INTERNAL_ERROR))
        ]
    );
}

/// JSON-RPC 2.0 §5 (reviewer r3, finding 2): an object with an id and neither a method nor
/// an outcome, under the id of a request of the host's own already answered, is a late,
/// malformed answer: reported, never answered (a `-32600` under that number could end a
/// request of the server's own that shares it), as the async peer reads it
/// (`peer::settle::answers_ours`). Alone, and as an entry of a batch.
#[test]
fn s5_a_late_malformed_answer_of_ours_is_not_answered() {
    let (mut p, a, b) = two_requests();
    p.host
        .handle_frame(p.now, &result(a, 1).to_string(), MAX_BATCH);
    p.host
        .handle_frame(p.now, &result(b, 2).to_string(), MAX_BATCH);
    let wrote = p.host_wrote.len();
    let from = p.host_out.len();
    p.host.handle_frame(
        p.now,
        &json!({"jsonrpc": "2.0", "id": a}).to_string(),
        MAX_BATCH,
    );
    p.host.handle_frame(
        p.now,
        &json!([{"jsonrpc": "2.0", "id": b}]).to_string(),
        MAX_BATCH,
    );
    let out = wrote_from(&mut p, wrote);
    assert!(out.is_empty(), "{out:?}");
    let unanswered = host_diags(&mut p, from)
        .into_iter()
        .filter(|d| {
            matches!(
                d,
                HostDiagnostic::Unreadable {
                    answered: false,
                    ..
                }
            )
        })
        .count();
    assert_eq!(unanswered, 2, "each reported");
    // An id the host never used is still answered `-32600` under it.
    let wrote = p.host_wrote.len();
    p.host.handle_frame(
        p.now,
        &json!({"jsonrpc": "2.0", "id": 900}).to_string(),
        MAX_BATCH,
    );
    let out = wrote_from(&mut p, wrote);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["id"], 900);
    assert_eq!(out[0]["error"]["code"], codes::INVALID_REQUEST);
}

/// JSON-RPC 2.0 §5 (reviewer r3, finding 3): a response whose id echoes a request of the
/// host's as a whole float (`7.0`) answers that request, as the async peer reads it
/// (`peer::ids::integral_id`): alone, in a batch, and (failing it at once) when the
/// response is refused. A true fraction names none.
#[test]
fn s5_a_whole_float_id_answers_our_request() {
    let (mut p, a, b) = two_requests();
    let from = p.host_out.len();
    let text = format!(r#"{{"jsonrpc":"2.0","id":{a}.0,"result":{{"tools":[],"n":1}}}}"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let text = format!(r#"[{{"jsonrpc":"2.0","id":{b}.0,"result":{{"tools":[],"n":2}}}}]"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let got = answered(&mut p, from);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, a);
    assert_eq!(
        got[0].1.as_ref().ok().map(|v| v["n"].clone()),
        Some(json!(1))
    );
    assert_eq!(got[1].0, b);
    assert_eq!(
        got[1].1.as_ref().ok().map(|v| v["n"].clone()),
        Some(json!(2))
    );

    let (mut p, a, b) = two_requests();
    let from = p.host_out.len();
    let text = format!(r#"{{"jsonrpc":"2.0","id":{a}.0,"result":1e400}}"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let text = format!(r#"{{"jsonrpc":"2.0","id":{b}.5,"result":{{"tools":[]}}}}"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let got = answered(&mut p, from);
    assert_eq!(got, vec![(a, Err(codes::INTERNAL_ERROR))], "{got:?}");
}

/// The same for a request of the host's given up at its deadline (30 s in `two_requests`):
/// an id-only object under its id after that is a late, malformed answer, not answered.
#[test]
fn s5_an_id_alone_under_a_request_given_up_is_not_answered() {
    let (mut p, a, _) = two_requests();
    p.host.handle_timeout(p.now + Duration::from_secs(31));
    p.collect();
    // The host's own writes at the deadline (`notifications/cancelled`) are before this.
    let wrote = p.host_wrote.len();
    p.host.handle_frame(
        p.now,
        &json!({"jsonrpc": "2.0", "id": a}).to_string(),
        MAX_BATCH,
    );
    let out = wrote_from(&mut p, wrote);
    assert!(out.is_empty(), "{out:?}");
}

/// JSON-RPC 2.0 §6: a batch of two `ping`s, each answered by the machine itself, is
/// answered in one array frame, each under its id, as the async host writes it
/// (`tests/host_hostile_wire.rs`, `s6_a_batch_of_pings_is_answered_in_one_array`). Before,
/// one frame each.
#[test]
fn s6_a_batch_of_pings_is_answered_in_one_array() {
    let (mut p, _, _) = two_requests();
    let wrote = p.host_wrote.len();
    let text = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "two", "method": "ping"},
    ])
    .to_string();
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    assert_eq!(
        wrote_from(&mut p, wrote),
        [json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": "two", "result": {}},
        ])]
    );
}

/// §6.7: the policy Request the parser refused (its id read) is answered `-32700` saying it
/// was not applied, as the async peer answers it on either side (`peer::unparsed`); before,
/// `handle_frame` wrote the bare `-32700`.
#[test]
fn s6_7_a_refused_policy_request_is_answered_as_not_applied() {
    let (mut p, _, _) = two_requests();
    let wrote = p.host_wrote.len();
    let cut = r#"{"jsonrpc":"2.0","id":33,"method":"featureSets/update","params":{"#;
    p.host.handle_frame(p.now, cut, MAX_BATCH);
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 33);
    assert_eq!(frames[0]["error"]["code"], codes::PARSE_ERROR);
    assert_eq!(
        frames[0]["error"]["data"],
        json!({"method": "featureSets/update", "applied": false})
    );
}

/// MCP base protocol (an id is not reused while its request is in flight), JSON-RPC 2.0 §5,
/// §6: a request reusing the id of one taken earlier in the same batch is refused `-32600`
/// (id in use), never run, as the async host's peer refuses it (`peer::serving`). Before,
/// both `push/event`s were delivered and answered.
#[test]
fn s6_a_request_reusing_an_id_taken_earlier_in_its_batch_is_refused() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.collect();
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    let mut first = push(0, "e1");
    first["id"] = json!("e");
    let mut second = push(0, "e2");
    second["id"] = json!("e");
    p.host
        .handle_frame(p.now, &json!([first, second]).to_string(), MAX_BATCH);
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let answers = frames[0].as_array().expect("one array");
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["id"], "e");
    assert_eq!(answers[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(
        answers[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in use")),
        "{answers:?}"
    );
    assert_eq!(answers[1]["id"], "e");
    assert!(answers[1].get("result").is_some(), "{answers:?}");
    let outs = p.host_outputs_from(out);
    let delivered = outs
        .iter()
        .filter(|o| matches!(o, HostOutput::Event(HostEvent::Push { .. })))
        .count();
    assert_eq!(delivered, 1, "{outs:?}");
    let reported = host_diags(&mut p, out).into_iter().any(|d| {
        matches!(d, HostDiagnostic::Unreadable { id, detail, answered: true }
            if id.as_deref() == Some("\"e\"") && detail.contains("in use"))
    });
    assert!(reported);
}

/// MCP base protocol, JSON-RPC 2.0 §5: every request under the id of one the application
/// still holds is refused (id in use), whatever its method, as the async host refuses it.
/// Before, only `inference/request` and `model/info` were checked: a `ping` so sent was
/// answered `{}`.
#[test]
fn s5_any_request_under_the_id_of_one_the_application_holds_is_refused() {
    let mut rules = server_rules();
    rules.manifest["modelInfo"] = json!({});
    let mut p = Pair::new(&["modelInfo"], rules);
    p.host = HostState::new(HostRules::new(["modelInfo"]), p.now, SystemTime::UNIX_EPOCH)
        .expect("host rules");
    p.host.start(p.now);
    p.drive();
    assert!(p.host.grant().allows(Capability::ModelInfo));
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    let info = json!({"jsonrpc": "2.0", "id": 7, "method": "model/info"});
    p.host.handle_frame(p.now, &info.to_string(), MAX_BATCH);
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    p.host.handle_frame(p.now, &ping.to_string(), MAX_BATCH);
    let outs = p.host_outputs_from(out);
    let handed = outs
        .iter()
        .filter(|o| matches!(o, HostOutput::Request { .. }))
        .count();
    assert_eq!(handed, 1, "{outs:?}");
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], 7);
    assert_eq!(frames[0]["error"]["code"], codes::INVALID_REQUEST);
    assert!(
        frames[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in use")),
        "{frames:?}"
    );
}

/// JSON-RPC 2.0 §5, MCP base protocol: one id in flight is one numeric value
/// (`jsonrpc::identity::Identity`), as the async host's peer holds it (`peer::serving`): while the
/// server's `model/info` under `7.0` is with the application, a `ping` under `7` is refused
/// (id in use) under its own `7`; a cancel naming `7` cancels it, answered `-32800` under
/// `7.0` as it was written; a batch `[ping 8, ping 8.0]` runs the first only, and
/// `[ping 9, cancel 9, ping 9.0]` both (the cancel frees the id). Before, `7` and `7.0`
/// were two ids.
#[test]
fn s5_an_id_in_flight_is_one_numeric_value() {
    let mut rules = server_rules();
    rules.manifest["modelInfo"] = json!({});
    let mut p = Pair::new(&["modelInfo"], rules);
    p.host = HostState::new(HostRules::new(["modelInfo"]), p.now, SystemTime::UNIX_EPOCH)
        .expect("host rules");
    p.host.start(p.now);
    p.drive();
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    let info = r#"{"jsonrpc":"2.0","id":7.0,"method":"model/info"}"#;
    p.host.handle_frame(p.now, info, MAX_BATCH);
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    p.host.handle_frame(p.now, &ping.to_string(), MAX_BATCH);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7}});
    p.host.handle_frame(p.now, &cancel.to_string(), MAX_BATCH);
    let outs = p.host_outputs_from(out);
    let handed = outs
        .iter()
        .filter(|o| matches!(o, HostOutput::Request { .. }))
        .count();
    assert_eq!(handed, 1, "{outs:?}");
    assert!(
        outs.iter().any(|o| matches!(o, HostOutput::Cancelled { id }
            if id.to_value() == json!(7.0))),
        "{outs:?}"
    );
    let frames: Vec<String> = wrote_from(&mut p, wrote)
        .iter()
        .map(|f| format!("{} {}", f["id"], f["error"]["code"]))
        .collect();
    assert_eq!(frames, ["7 -32600", "7.0 -32800"]);
    let wrote = p.host_wrote.len();
    let batch =
        r#"[{"jsonrpc":"2.0","id":8,"method":"ping"},{"jsonrpc":"2.0","id":8.0,"method":"ping"}]"#;
    p.host.handle_frame(p.now, batch, MAX_BATCH);
    let batch = r#"[{"jsonrpc":"2.0","id":9,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}},{"jsonrpc":"2.0","id":9.0,"method":"ping"}]"#;
    p.host.handle_frame(p.now, batch, MAX_BATCH);
    let frames: Vec<Vec<String>> = wrote_from(&mut p, wrote)
        .iter()
        .map(|f| {
            let answers = f.as_array().expect("a batch's answers");
            answers
                .iter()
                .map(|a| format!("{} {}", a["id"], a["error"]["code"]))
                .collect()
        })
        .collect();
    assert_eq!(
        frames,
        [vec!["8.0 -32600", "8 null"], vec!["9 null", "9.0 null"]]
    );
}

/// JSON-RPC 2.0 §6: a batch is complete when each of its requests is answered, counted
/// per entry, never per id. `[model/info 47, cancel 47, model/info 47]`: the cancel frees
/// 47 and the second `model/info` is handed out under it, so 47 is owed two answers; the
/// `-32800` alone is no complete array. Before, it was written as the array `[-32800]` and
/// the second request's answer later alone (r15 F1).
#[test]
fn s6_a_batch_owing_one_id_twice_is_not_complete_with_one_answer() {
    let mut rules = server_rules();
    rules.manifest["modelInfo"] = json!({});
    let mut p = Pair::new(&["modelInfo"], rules);
    p.host = HostState::new(HostRules::new(["modelInfo"]), p.now, SystemTime::UNIX_EPOCH)
        .expect("host rules");
    p.host.start(p.now);
    p.drive();
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    let info = json!({"jsonrpc": "2.0", "id": 47, "method": "model/info"});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 47}});
    p.host
        .handle_frame(p.now, &json!([info, cancel, info]).to_string(), MAX_BATCH);
    let outs = p.host_outputs_from(out);
    let handed = outs
        .iter()
        .filter(|o| matches!(o, HostOutput::Request { .. }))
        .count();
    assert_eq!(handed, 2, "{outs:?}");
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].is_object(), "no array yet: {frames:?}");
    assert_eq!(frames[0]["id"], 47, "{frames:?}");
    assert_eq!(frames[0]["error"]["code"], -32800, "{frames:?}");
}

/// JSON-RPC 2.0 §6: an entry that closes the machine mid-batch (here a failed `initialize`
/// answer, §5.2) takes nothing more of the batch, but the refusals of the entries before it
/// are still written: each was reported answered, so each is owed its answer.
#[test]
fn s6_a_batch_that_closes_the_machine_still_answers_what_it_refused() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.collect();
    let init: Value =
        serde_json::from_str(p.to_server.front().expect("initialize sent")).expect("JSON");
    p.to_server.clear();
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    let failed = json!({"jsonrpc": "2.0", "id": init["id"],
        "error": {"code": -32603, "message": "no"}});
    let text = json!([{"jsonrpc": "2.0", "id": "x", "method": 5}, failed, ping_of("y")]);
    p.host.handle_frame(p.now, &text.to_string(), MAX_BATCH);
    let outs = p.host_outputs_from(out);
    assert!(
        outs.iter()
            .any(|o| matches!(o, HostOutput::Connected(Err(_)))),
        "{outs:?}"
    );
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], "x", "{frames:?}");
    assert_eq!(frames[0]["error"]["code"], codes::INVALID_REQUEST);
}

fn ping_of(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// JSON-RPC 2.0 §4: a request whose id is a number with a fraction or an exponent is taken
/// and answered under it, and reported for its form once per request
/// ([`HostDiagnostic::FractionalId`]), as the async host's peer reports it
/// (`peer::Diagnostic::FractionalId`): alone, in a batch, and refused in use alike. An
/// integer id is not reported. Before, the sans-I/O host reported nothing.
#[test]
fn jsonrpc_s4_a_request_id_with_a_fraction_is_reported_once_per_request() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.collect();
    let (wrote, out) = (p.host_wrote.len(), p.host_out.len());
    p.host.handle_frame(
        p.now,
        r#"{"jsonrpc":"2.0","id":2.5,"method":"ping"}"#,
        MAX_BATCH,
    );
    p.host.handle_frame(
        p.now,
        r#"[{"jsonrpc":"2.0","id":3.0,"method":"ping"},{"jsonrpc":"2.0","id":3e0,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
        MAX_BATCH,
    );
    p.host
        .handle_text(p.now, r#"{"jsonrpc":"2.0","id":5.5,"method":"ping"}"#)
        .expect("a message");
    let reported: Vec<String> = host_diags(&mut p, out)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::FractionalId { id, method } => Some(format!("{id} {method}")),
            _ => None,
        })
        .collect();
    assert_eq!(reported, ["2.5 ping", "3.0 ping", "3.0 ping", "5.5 ping"]);
    let frames = wrote_from(&mut p, wrote);
    assert_eq!(
        frames[0],
        json!({"jsonrpc": "2.0", "id": 2.5, "result": {}})
    );
}
