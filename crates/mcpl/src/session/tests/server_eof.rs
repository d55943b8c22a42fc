//! [`ServerState::handle_eof`]: the host ended its output (EOF, a half-close) while the
//! connection is still writable. Nothing more will be read, so nothing of the server's
//! waits for an answer, but the host may still read: what the server owes it still goes
//! out. The server's side of [`super::eof`].

use super::*;

/// At the host's EOF the application is told once ([`ServerDiagnostic::InputEnded`], a
/// notice); every request the server sent and still waits on ends at once (§11.3, a
/// streaming one's chunks with it, §11.4) rather than at its deadline, so no deadline
/// stays, each told by its id ([`ServerDiagnostic::RequestUnanswered`]) so a sans-I/O
/// driver fails its caller; a request is refused from then on ([`SendRefusal::InputEnded`])
/// and nothing more is written. Before, they waited for their deadline (or the close), and
/// a request sent after the EOF went out to a host that could no longer answer it; later,
/// they ended with no outcome naming them.
#[test]
fn s11_3_at_the_hosts_eof_the_servers_requests_end_at_once_and_the_application_is_told() {
    let mut p = inference_pair();
    let a = p
        .server
        .request(p.now, "inference/request", ask(false))
        .expect("granted");
    let b = p
        .server
        .request(p.now, "inference/request", ask(true))
        .expect("granted");
    p.collect();
    let written = p.to_host.len();
    let from = p.server_out.len();
    assert!(!p.server.input_ended());
    assert!(p.server.poll_timeout().is_some(), "their deadlines run");

    p.server.handle_eof(p.now);
    p.collect();
    let unanswered =
        |id| ServerOutput::Diagnostic(ServerDiagnostic::RequestUnanswered { id, closed: false });
    assert_eq!(
        p.server_out[from..],
        [
            ServerOutput::Diagnostic(ServerDiagnostic::InputEnded),
            unanswered(a),
            unanswered(b)
        ]
    );
    let told = server_diagnostics(&p, from);
    assert_eq!(told[0].code(), "input_ended");
    assert_eq!(told[0].kind(), DiagnosticKind::Notice);
    assert_eq!(told[1].code(), "request_unanswered");
    assert_eq!(told[1].kind(), DiagnosticKind::Notice);
    assert!(told[1].to_string().contains("the host ended its output"));
    assert!(p.server.input_ended());
    assert_eq!(p.server.poll_timeout(), None, "no request waits any more");
    assert_eq!(
        p.server.request(p.now, "inference/request", ask(false)),
        Err(SendRefusal::InputEnded)
    );
    // A second EOF is nothing new; nothing more is written.
    p.server.handle_eof(p.now);
    p.server.handle_close(p.now);
    p.collect();
    assert_eq!(p.server_out.len(), from + 3, "each request is told once");
    assert_eq!(p.to_host.len(), written);
}

/// At the close, each request the server sent and still waits on is told by its id
/// ([`ServerDiagnostic::RequestUnanswered`], `closed: true`), once: a sans-I/O driver fails
/// its caller by it. Before, the close forgot them with no outcome naming them.
#[test]
fn at_the_close_each_request_the_server_still_waits_on_is_told_unanswered_by_its_id() {
    let mut p = inference_pair();
    let a = p
        .server
        .request(p.now, "inference/request", ask(false))
        .expect("granted");
    let b = p
        .server
        .request(p.now, "inference/request", ask(true))
        .expect("granted");
    p.collect();
    let from = p.server_out.len();
    p.server.handle_close(p.now);
    p.server.handle_close(p.now);
    p.server.handle_eof(p.now);
    p.collect();
    let told: Vec<_> = server_diagnostics(&p, from)
        .into_iter()
        .filter(|d| d.code() == "request_unanswered")
        .cloned()
        .collect();
    assert_eq!(
        told,
        [
            ServerDiagnostic::RequestUnanswered {
                id: a,
                closed: true
            },
            ServerDiagnostic::RequestUnanswered {
                id: b,
                closed: true
            }
        ]
    );
    assert!(told[0].to_string().contains("the connection closed"));
}

/// A host request handed to the application before the host's EOF is still answered, and
/// the answer written: the host may still read (its half-close ends only its output).
#[test]
fn a_call_handed_out_before_the_hosts_eof_is_still_answered() {
    let mut p = Pair::connect(&["tools"], server_rules());
    let call = json!({"name": "t", "arguments": {}});
    let asked = p
        .host
        .request(p.now, "tools/call", call, Duration::from_secs(5))
        .expect("sent");
    p.step_server();
    let id = p
        .server_out
        .iter()
        .find_map(|o| match o {
            ServerOutput::Request { id, method, .. } if method == "tools/call" => Some(id.clone()),
            _ => None,
        })
        .expect("handed to the server application");
    p.server.handle_eof(p.now);
    p.server
        .answer(id, Ok(json!({"content": []})))
        .expect("still waiting for its answer");
    p.drive();
    assert!(p.host_out.iter().any(|o| matches!(
        o,
        HostOutput::Response { id, outcome: Ok(_) } if *id == asked
    )));
}

/// §10.5: a turn open at the host's EOF can get no terminal any more, so it ends then
/// ([`TurnOutcome::TimedOut`], as at a close), not at its safety timeout; the close after
/// ends nothing twice, and an EOF after the close changes nothing.
#[test]
fn s10_5_a_turn_open_at_the_hosts_eof_ends_then_and_only_once() {
    let mut rules = server_rules();
    rules.manifest["inferenceLifecycle"] = json!({});
    let mut p = Pair::connect(&["inferenceLifecycle"], rules);
    p.host.start_turn("i1", "c", 0).expect("granted");
    p.drive();
    let ends = |p: &Pair| {
        p.server_out
            .iter()
            .filter(|o| {
                matches!(o, ServerOutput::Turn(TurnEvent::Ended(e))
                    if e.inference_id == "i1" && matches!(e.outcome, TurnOutcome::TimedOut))
            })
            .count()
    };
    assert_eq!(ends(&p), 0);
    p.server.handle_eof(p.now);
    p.collect();
    assert_eq!(ends(&p), 1);
    assert_eq!(p.server.poll_timeout(), None, "no safety timeout runs");
    p.server.handle_close(p.now);
    p.server.handle_eof(p.now);
    p.collect();
    assert_eq!(ends(&p), 1);
    let told = p
        .server_out
        .iter()
        .filter(|o| **o == ServerOutput::Diagnostic(ServerDiagnostic::InputEnded))
        .count();
    assert_eq!(told, 1, "an EOF after the close is not told");
}
