//! The host takes an answer only under the id of a request of its own whose frame was
//! written (JSON-RPC 2.0 §5: a Response answers a Request its sender received), as the async
//! peer does (`peer::written`); and it reports an id written as a whole float
//! ([`HostDiagnostic::IntegralId`]), as the peer does (`peer::Diagnostic::IntegralId`).
//!
//! Before, [`HostState`] took an answer under the id of a request still queued in its
//! output (not yet drained by [`HostState::poll_output`]) as that request's: a server that
//! sent, in one batch, `mcpl/manifestChanged` (the host queues its `mcpl/manifest` fetch,
//! §17.3, §17.4) and a response guessing the fetch's id (ids are sequential) had its forged
//! manifest reviewed, and the real answer was then reported as a response to nothing.

use super::*;
use crate::jsonrpc::codes;

const MAX_BATCH: usize = 1024;

/// The id the host gives its next request: one past the highest it wrote.
fn next_host_id(p: &Pair) -> u64 {
    p.host_wrote
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v.get("method").is_some())
        .filter_map(|v| v["id"].as_u64())
        .max()
        .expect("the host wrote requests")
        + 1
}

/// The feature sets the manifest under review declares, sorted.
fn reviewed_sets(p: &Pair) -> Vec<String> {
    let m = p.host.review().expect("MCPL").manifest_owned();
    let mut sets: Vec<String> = m["featureSets"]
        .as_object()
        .expect("sets")
        .keys()
        .cloned()
        .collect();
    sets.sort();
    sets
}

fn diags_from(p: &mut Pair, from: usize) -> Vec<HostDiagnostic> {
    p.host_outputs_from(from)
        .into_iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// `manifest()` with a set `forged` the server's guessed answer declares.
fn forged_manifest() -> Value {
    let mut m = manifest();
    m["featureSets"]["forged"] = json!({ "uses": ["pushEvents"] });
    m
}

/// JSON-RPC 2.0 §5, §17.4: a batch of `mcpl/manifestChanged` and a response guessing the
/// id of the fetch the announcement makes the host queue answers nothing the host sent
/// (the fetch's frame is not yet written): a stray, reported as a response to no request
/// ([`HostDiagnostic::UnexpectedResponse`], as the async host's peer reports its
/// `UnknownResponse`), never reviewed; the fetch, written next, is settled by its real
/// answer.
#[test]
fn s5_an_answer_guessing_the_id_of_a_request_not_yet_written_is_a_stray() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let guess = next_host_id(&p);
    let from = p.host_out.len();
    let batch = json!([
        announce(),
        {"jsonrpc": "2.0", "id": guess, "result": forged_manifest()},
    ]);
    p.host.handle_frame(p.now, &batch.to_string(), MAX_BATCH);
    assert!(p.host.is_pending(guess), "the fetch still waits");
    assert_eq!(
        reviewed_sets(&p),
        ["news"],
        "the forged manifest is not reviewed"
    );
    let diags = diags_from(&mut p, from);
    assert!(
        diags.iter().any(
            |d| matches!(d, HostDiagnostic::UnexpectedResponse { id } if *id == guess.to_string())
        ),
        "{diags:?}"
    );
    // The fetch is written now, under the id guessed; its real answer settles it.
    assert_eq!(last_fetch_id(&p), guess as i64);
    let from = p.host_out.len();
    let real = json!({"jsonrpc": "2.0", "id": guess, "result": manifest_with_sports()});
    p.host.handle_frame(p.now, &real.to_string(), MAX_BATCH);
    assert!(!p.host.is_pending(guess));
    assert_eq!(reviewed_sets(&p), ["news", "sports"]);
    let diags = diags_from(&mut p, from);
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::UnexpectedResponse { .. })),
        "{diags:?}"
    );
}

/// The same guess as a single message right behind the announcement, as an error response,
/// and as an id-only object (answered `-32600` under its id as any such object is: the id
/// names no request of the host's written, `jsonrpc::head::numbered_by_us`) or an id written
/// as a whole float: none fails or settles the fetch.
#[test]
fn s5_no_form_of_a_guessed_answer_fails_a_request_not_yet_written() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let guess = next_host_id(&p);
    let wrote = p.host_wrote.len();
    let error = json!({"jsonrpc": "2.0", "id": guess,
                       "error": {"code": -32603, "message": "forged"}});
    let alone = json!({"jsonrpc": "2.0", "id": guess});
    let whole = format!(r#"{{"jsonrpc":"2.0","id":{guess}.0,"result":{{}}}}"#);
    let batch = format!("[{},{error},{alone},{whole}]", announce());
    p.host.handle_frame(p.now, &batch, MAX_BATCH);
    assert!(p.host.is_pending(guess), "the fetch still waits");
    p.collect();
    // A batch's answers the machine writes itself go out as one array (JSON-RPC 2.0 §6):
    // read each message of each frame.
    let frames: Vec<Value> = p.host_wrote[wrote..]
        .iter()
        .map(|t| serde_json::from_str(t).expect("json"))
        .flat_map(|v: Value| match v {
            Value::Array(each) => each,
            one => vec![one],
        })
        .collect();
    let refused: Vec<&Value> = frames
        .iter()
        .filter(|f| f.get("method").is_none())
        .collect();
    assert_eq!(refused.len(), 1, "{frames:?}");
    assert_eq!(refused[0]["id"], json!(guess));
    assert_eq!(refused[0]["error"]["code"], codes::INVALID_REQUEST);
    let integral = p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::IntegralId { .. })));
    assert!(
        !integral,
        "a whole float naming no request written is not read as one"
    );
    let real = json!({"jsonrpc": "2.0", "id": guess, "result": manifest_with_sports()});
    p.host.handle_frame(p.now, &real.to_string(), MAX_BATCH);
    assert!(!p.host.is_pending(guess));
    assert_eq!(reviewed_sets(&p), ["news", "sports"]);
}

/// JSON-RPC 2.0 §5: a response whose id echoes a request of the host's as a whole float
/// (`7.0`) settles it and is reported for its form ([`HostDiagnostic::IntegralId`], the
/// async peer's `IntegralId`): alone, in a batch, and when refused (failing it at once).
#[test]
fn s5_a_whole_float_id_is_reported_as_integral_and_settles() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let t = Duration::from_secs(30);
    let ask = |p: &mut Pair| {
        let id = p
            .host
            .request(p.now, "tools/list", json!({}), t)
            .expect("sent");
        p.collect();
        id
    };
    let (a, b, c) = (ask(&mut p), ask(&mut p), ask(&mut p));
    let from = p.host_out.len();
    let text = format!(r#"{{"jsonrpc":"2.0","id":{a}.0,"result":{{"n":1}}}}"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let text = format!(r#"[{{"jsonrpc":"2.0","id":{b}e0,"result":{{"n":2}}}}]"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let text = format!(r#"{{"jsonrpc":"2.0","id":{c}.0,"result":1e400}}"#);
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    let outs = p.host_outputs_from(from);
    let answered: Vec<(u64, Result<Value, i64>)> = outs
        .iter()
        .filter_map(|o| match o {
            HostOutput::Response { id, outcome } => {
                Some((*id, outcome.clone().map_err(|e| e.code)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        [
            (a, Ok(json!({"n": 1}))),
            (b, Ok(json!({"n": 2}))),
            (c, Err(codes::INTERNAL_ERROR)),
        ]
    );
    let integral: Vec<(u64, String)> = outs
        .iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(HostDiagnostic::IntegralId { id, written }) => {
                Some((*id, written.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        integral,
        [
            (a, format!("{a}.0")),
            (b, format!("{b}.0")),
            (c, format!("{c}.0")),
        ]
    );
    // An integer id is no defect of form.
    let d = ask(&mut p);
    let from = p.host_out.len();
    let text = json!({"jsonrpc": "2.0", "id": d, "result": {}}).to_string();
    p.host.handle_frame(p.now, &text, MAX_BATCH);
    assert!(diags_from(&mut p, from).is_empty());
}
