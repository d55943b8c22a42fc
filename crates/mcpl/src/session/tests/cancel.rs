//! MCP's `notifications/cancelled` at the server: a host request handed out and not yet
//! answered is answered `-32800` at once and forgotten ([`ServerOutput::Cancelled`]), so the
//! application's answer is refused and its in-flight slot is free; any other cancel is
//! handed on as it was.

use super::*;

/// A plain MCP server (one in-flight slot) with the host's `tools/call` `id` handed out.
fn one_call_handed(id: i64) -> Pair {
    let mut rules = server_rules();
    rules.max_in_flight = 1;
    let mut p = Pair::new(&[], rules);
    initialize_plain(&mut p.server);
    p.collect();
    server_reads(&mut p, call_frame(id));
    assert_eq!(handed(&p), vec![RequestId::from(id)]);
    p
}

fn call_frame(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "t", "arguments": {}}})
}

fn cancel(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "stopped"}})
}

/// The ids of the requests the server handed to its application, in order.
fn handed(p: &Pair) -> Vec<RequestId> {
    p.server_out
        .iter()
        .filter_map(|o| match o {
            ServerOutput::Request { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// Answers written to the host for `id`.
fn answers(p: &Pair, id: i64) -> Vec<Value> {
    p.to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v["id"] == json!(id) && v.get("method").is_none())
        .collect()
}

fn answers_to(p: &Pair, id: i64) -> usize {
    answers(p, id).len()
}

#[test]
fn a_cancelled_request_is_answered_as_cancelled_forgotten_and_its_slot_freed() {
    let mut p = one_call_handed(7);
    let from = p.server_out.len();
    server_reads(&mut p, cancel(json!(7)));
    match &p.server_out[from..] {
        [ServerOutput::Cancelled { id, notification }] => {
            assert_eq!(*id, RequestId::from(7i64));
            assert_eq!(notification.params.as_ref().unwrap()["reason"], "stopped");
        }
        other => panic!("one Cancelled, not {other:?}"),
    }
    // Answered once, as cancelled; the application's late answer is refused, and nothing
    // more is written.
    let cancelled = answers(&p, 7);
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(
        cancelled[0]["error"]["code"],
        crate::jsonrpc::codes::REQUEST_CANCELLED
    );
    assert!(matches!(
        p.server
            .answer(RequestId::from(7i64), Ok(json!({"content": []}))),
        Err(SendRefusal::UnknownRequest(_))
    ));
    p.collect();
    assert_eq!(answers_to(&p, 7), 1);
    // The one slot is free: the next call is handed out, not answered busy.
    server_reads(&mut p, call_frame(8));
    assert_eq!(
        handed(&p),
        vec![RequestId::from(7i64), RequestId::from(8i64)]
    );
    assert_eq!(answers_to(&p, 8), 0, "not answered busy");
}

/// A cancel naming a request not handed out (unknown, already answered) or with no usable
/// `requestId` changes nothing: it is handed on as the notification it is.
#[test]
fn a_cancel_of_nothing_in_flight_is_handed_on() {
    let mut p = one_call_handed(7);
    p.server
        .answer(RequestId::from(7i64), Ok(json!({"content": []})))
        .expect("handed out");
    for frame in [
        cancel(json!(7)),
        cancel(json!(99)),
        cancel(json!({"not": "an id"})),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled"}),
    ] {
        let from = p.server_out.len();
        server_reads(&mut p, frame.clone());
        assert!(
            matches!(&p.server_out[from..], [ServerOutput::Notification(n)] if n.method == "notifications/cancelled"),
            "{frame}: {:?}",
            &p.server_out[from..]
        );
    }
    assert_eq!(answers_to(&p, 7), 1, "answered once, before the cancel");
}

/// MCP forbids cancelling `initialize`: one handed to the application
/// (`initialize_by_application`) stays handed out and is answered.
#[test]
fn initialize_is_never_cancelled() {
    let mut rules = server_rules();
    rules.initialize_by_application = true;
    let mut p = Pair::new(&[], rules);
    server_reads(
        &mut p,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "h", "version": "0"}}}),
    );
    assert_eq!(handed(&p), vec![RequestId::from(1i64)]);
    let from = p.server_out.len();
    server_reads(&mut p, cancel(json!(1)));
    assert!(matches!(
        &p.server_out[from..],
        [ServerOutput::Notification(_)]
    ));
    p.server
        .answer(
            RequestId::from(1i64),
            Ok(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "serverInfo": {"name": "s", "version": "1"}})),
        )
        .expect("still handed out");
    p.collect();
    assert_eq!(answers_to(&p, 1), 1);
}

/// At the host, the server's cancel of an `inference/request` handed to the application:
/// answered `-32800` at once and forgotten ([`HostOutput::Cancelled`]), the application's
/// later answer refused; a cancel naming nothing handed out changes nothing and is no
/// defect (MCP lets a receiver ignore one: the request may have just been answered).
#[test]
fn s11_the_host_answers_a_cancelled_server_request_and_forgets_it() {
    let (mut p, asked) = asked_without_stream();
    p.drive();
    let id = handed_inference(&p);
    let from = p.host_out.len();
    p.server_writes(cancel(id.to_value()));
    p.step_host();
    assert_eq!(
        p.host_out[from..],
        [HostOutput::Cancelled { id: id.clone() }]
    );
    assert_eq!(
        p.host.answer(id.clone(), Ok(json!({"content": "late"}))),
        Err(StateError::UnknownRequest(id.to_value().to_string()))
    );
    p.drive();
    let answered: Vec<&ServerOutput> = p
        .server_out
        .iter()
        .filter(|o| matches!(o, ServerOutput::Response { id, .. } if *id == asked))
        .collect();
    assert!(
        matches!(answered[..], [ServerOutput::Response { outcome: Err(e), .. }]
            if e.code == crate::jsonrpc::codes::REQUEST_CANCELLED),
        "{answered:?}"
    );
    for frame in [cancel(id.to_value()), cancel(json!(4242))] {
        let from = p.host_out.len();
        p.server_writes(frame);
        p.step_host();
        assert!(p.host_out[from..].is_empty(), "{:?}", &p.host_out[from..]);
    }
}
