//! What a server sends the application before its `initialize` result: MCP's
//! initialization is the first interaction and MCPL's handshake comes before anything else
//! (§5.2, §5.3), and before the result the host cannot know whether a reviewed manifest
//! will take a `list_changed` (§17.7 `surface-changed` receipt) or the server is served as
//! plain MCP (§3.3, [`HostEvent::ListChanged`]). So neither `list_changed` nor an MCP
//! notification for the application is handed out then: each is reported
//! ([`HostDiagnostic::UnexpectedMethod`]), as any method the host does not take then is.

use super::*;

const LIST_CHANGED: &str = "notifications/tools/list_changed";
const LOG: &str = "notifications/message";

fn notification(method: &str) -> Value {
    if method == LOG {
        json!({"jsonrpc": "2.0", "method": method, "params": {"level": "info", "data": "hi"}})
    } else {
        json!({"jsonrpc": "2.0", "method": method})
    }
}

/// The host's start and the server's `initialize` result in flight, with `first` sent by
/// the server before that result (the host reads them in that order).
fn before_the_result(first: &[&str], plain_mcp: bool) -> Pair {
    let mut p = Pair::new(&["tools", "pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    if plain_mcp {
        p.to_host.clear();
        p.server_writes(json!({
            "jsonrpc": "2.0", "id": 1,
            "result": { "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                        "serverInfo": { "name": "plain" } }
        }));
    }
    for m in first.iter().rev() {
        p.to_host.push_front(notification(m).to_string());
    }
    p.drive();
    assert!(matches!(p.connected()[..], [Ok(())]), "{:?}", p.host_out);
    p
}

/// The application's events from the host's outputs at `from` on: (list changes,
/// notifications, manifest-change receipts).
fn events(p: &mut Pair, from: usize) -> (usize, usize, usize) {
    let out = p.host_outputs_from(from);
    let count = |f: fn(&HostOutput) -> bool| out.iter().filter(|o| f(o)).count();
    (
        count(|o| matches!(o, HostOutput::Event(HostEvent::ListChanged(_)))),
        count(|o| matches!(o, HostOutput::Event(HostEvent::Notification { .. }))),
        count(|o| matches!(o, HostOutput::Event(HostEvent::ManifestChange(_)))),
    )
}

fn unexpected(p: &Pair) -> Vec<String> {
    p.host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(HostDiagnostic::UnexpectedMethod { method }) => {
                Some(method.clone())
            }
            _ => None,
        })
        .collect()
}

/// An MCPL server's `list_changed` and log before its `initialize` result: reported, not
/// handed out; the same after the handshake are a receipt (§17.7) and a notification.
#[test]
fn s5_3_an_mcpl_servers_list_changed_or_log_before_its_initialize_result_is_not_handed_out() {
    let mut p = before_the_result(&[LIST_CHANGED, LOG], false);
    assert_eq!(events(&mut p, 0), (0, 0, 0), "{:?}", p.host_out);
    assert_eq!(unexpected(&p), [LIST_CHANGED, LOG]);
    let from = p.host_out.len();
    p.server_writes(notification(LIST_CHANGED));
    p.server_writes(notification(LOG));
    p.drive();
    assert_eq!(events(&mut p, from), (0, 1, 1), "{:?}", p.host_out);
}

/// A server answering `initialize` as plain MCP (§3.3): its `list_changed` and log before
/// that answer are reported likewise; after it they are handed out as normal MCP.
#[test]
fn s3_3_a_plain_mcp_servers_list_changed_or_log_before_its_initialize_result_is_not_handed_out() {
    let mut p = before_the_result(&[LIST_CHANGED, LOG], true);
    assert_eq!(events(&mut p, 0), (0, 0, 0), "{:?}", p.host_out);
    assert_eq!(unexpected(&p), [LIST_CHANGED, LOG]);
    let from = p.host_out.len();
    p.server_writes(notification(LIST_CHANGED));
    p.server_writes(notification(LOG));
    p.drive();
    assert_eq!(events(&mut p, from), (1, 1, 0), "{:?}", p.host_out);
}
