//! MCP's `notifications/cancelled` at the host: `requestId` is required and is a request
//! id (a string, or a number a request's id can be, `jsonrpc::request_id_number`). One that names no id at all is the server's mistake: it is
//! reported ([`HostDiagnostic::BadParams`]), never silently dropped, and cancels nothing.
//! One naming an id not handed out is ignored, as MCP lets a receiver (it may have just
//! been answered).

use super::*;

fn cancel(params: Option<Value>) -> Value {
    let mut n = json!({"jsonrpc": "2.0", "method": "notifications/cancelled"});
    if let Some(p) = params {
        n["params"] = p;
    }
    n
}

fn bad_params(p: &Pair) -> Vec<String> {
    p.host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(HostDiagnostic::BadParams { method, detail })
                if method == "notifications/cancelled" =>
            {
                Some(detail.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_cancel_naming_no_request_id_is_reported_and_cancels_nothing() {
    let mut p = Pair::connect(
        &["inferenceRequest", "inferenceRequest.*"],
        inference_rules(),
    );
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": 5, "method": "inference/request",
        "params": {"featureSet": "assist", "messages": []}}),
    );
    p.drive();
    assert_eq!(handed_inference(&p), RequestId::from(5i64));
    for params in [
        None,
        Some(json!({})),
        Some(json!({"reason": "stop"})),
        Some(json!({"requestId": null})),
        // A whole value past 64 bits is no id (`jsonrpc::request_id_number`); `5.5` would be.
        Some(json!({"requestId": 1e30})),
        Some(json!({"requestId": {"id": 5}})),
        Some(json!([5])),
    ] {
        let before = bad_params(&p).len();
        p.server_writes(cancel(params.clone()));
        p.drive();
        assert_eq!(bad_params(&p).len(), before + 1, "{params:?}: not reported");
    }
    assert!(
        bad_params(&p)[0].contains("requestId"),
        "{:?}",
        bad_params(&p)
    );
    // Nothing was cancelled: the request still waits for its answer.
    assert_eq!(p.host_answer(5), None);
    p.host
        .answer(
            RequestId::from(5i64),
            Ok(json!({"content": "ok", "finishReason": "end_turn"})),
        )
        .unwrap();
    p.collect();
    assert_eq!(p.host_answer(5).unwrap()["result"]["content"], "ok");
    // A well-formed cancel naming nothing handed out is ignored, unreported (MCP).
    let before = p.host_out.len();
    p.server_writes(cancel(Some(json!({"requestId": 99}))));
    p.drive();
    assert_eq!(p.host_out.len(), before, "{:?}", &p.host_out[before..]);
}
