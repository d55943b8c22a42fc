//! `initialize` answered by the application ([`ServerRules::initialize_by_application`], as
//! `server::Server` hands it to its MCP fallback): read by the session, answered by the
//! application, made the session's.

use super::*;
use crate::jsonrpc::ErrorObject;

fn by_application() -> ServerRules {
    ServerRules {
        initialize_by_application: true,
        ..server_rules()
    }
}

/// The `initialize` handed to the server application, taken out of its outputs.
fn handed_initialize(p: &mut Pair) -> (RequestId, Option<Value>) {
    let i = p
        .server_out
        .iter()
        .position(|o| matches!(o, ServerOutput::Request { method, .. } if method == "initialize"))
        .expect("handed to the application");
    let ServerOutput::Request { id, params, .. } = p.server_out.remove(i) else {
        unreachable!("matched above")
    };
    (id, params)
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18",
                      "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}}}})
}

fn answered(p: &Pair, id: i64) -> Option<Value> {
    p.to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v["id"] == json!(id) && v.get("method").is_none())
}

/// §5.1, §17.1: the application's result goes out with the manifest under
/// `experimental.mcpl` (one it set is replaced and reported), and the session is MCPL from
/// then on: the host connects and the policy exchange makes it ready.
#[test]
fn s5_1_an_initialize_answered_by_the_application_carries_the_manifest() {
    let mut p = Pair::new(&["pushEvents"], by_application());
    p.host.start(p.now);
    p.step_server();
    assert!(!p.server.is_ready());
    let (id, params) = handed_initialize(&mut p);
    assert_eq!(params.expect("params")["protocolVersion"], "2025-06-18");
    let result = json!({"protocolVersion": "2025-06-18", "serverInfo": {"name": "mcp"},
                        "capabilities": {"experimental": {"mcpl": {"bogus": true}}}});
    p.server.answer(id, Ok(result)).expect("handed out");
    p.collect();
    let answer = answered(&p, 1).expect("answered");
    assert_eq!(
        answer["result"]["capabilities"]["experimental"]["mcpl"],
        manifest()
    );
    assert_eq!(
        answer["result"]["capabilities"]["tools"],
        json!({}),
        "the server's own MCP capabilities are added"
    );
    assert_eq!(
        p.server_details("fallback_mcpl_replaced").len(),
        1,
        "{:?}",
        p.server_out
    );
    p.drive();
    assert_eq!(p.host.mode(), &Mode::Mcpl);
    assert!(p.server.is_ready());
    assert!(p.server.mcpl());
    // The MCP handshake's last step is the application's too.
    let initialized = p.server_out.iter().filter(
        |o| matches!(o, ServerOutput::Notification(n) if n.method == "notifications/initialized"),
    );
    assert_eq!(initialized.count(), 1);
}

/// An error, or a result that is no object, is answered as such (`-32603` for the latter)
/// and leaves the connection uninitialized: what comes before a successful `initialize`
/// is refused as before it, and a later `initialize` is read afresh.
#[test]
fn s5_1_an_initialize_the_application_fails_leaves_the_connection_uninitialized() {
    let mut p = Pair::new(&[], by_application());
    for (id, outcome, code) in [
        (1, Err(ErrorObject::internal("down")), -32603),
        (2, Ok(json!("no object")), -32603),
        (3, Ok(json!({"capabilities": []})), -32603),
    ] {
        server_reads(&mut p, initialize(id));
        let (handed, _) = handed_initialize(&mut p);
        p.server.answer(handed, outcome).expect("handed out");
        p.collect();
        assert_eq!(answered(&p, id).expect("answered")["error"]["code"], code);
        let tools = json!({"jsonrpc": "2.0", "id": 100 + id, "method": "tools/list"});
        server_reads(&mut p, tools);
        assert_eq!(
            answered(&p, 100 + id).expect("answered")["error"]["code"],
            -32600,
            "still before initialize"
        );
    }
    assert!(!p.server.mcpl());
}

/// While the application holds an `initialize`, another one is a second one (`-32600`),
/// and nothing else is admitted yet.
#[test]
fn s5_1_a_second_initialize_while_the_first_is_with_the_application_is_refused() {
    let mut p = Pair::new(&[], by_application());
    server_reads(&mut p, initialize(1));
    let (first, _) = handed_initialize(&mut p);
    server_reads(&mut p, initialize(2));
    assert_eq!(answered(&p, 2).expect("answered")["error"]["code"], -32600);
    assert!(
        !p.server_out
            .iter()
            .any(|o| matches!(o, ServerOutput::Request { method, .. } if method == "initialize")),
        "not handed out"
    );
    let result = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
    p.server.answer(first, Ok(result)).expect("handed out");
    p.collect();
    assert!(answered(&p, 1).expect("answered").get("result").is_some());
    assert!(p.server.mcpl());
}
