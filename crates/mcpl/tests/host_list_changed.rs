//! Nothing is lost: a server's MCP `notifications/*/list_changed` (§17.7) is a
//! `surface-changed` receipt on an MCPL connection; on one with no reviewed manifest (an
//! MCP-only server, §3.3, or an MCPL server served as plain MCP) it was reported as
//! `HostDiagnostic::UnexpectedMethod` once per message and the application got no event,
//! though it is normal MCP (2024-11-05: the server's list changed, re-list it). It is now
//! `HostEvent::ListChanged` naming the list, and nothing is reported.
//! The server is raw lines; its `ping` after the notification orders the check (the host
//! handles what it reads in order), no sleeps.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostEvent, HostSession, HostStreams, McpList};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

/// A session over a raw server answering `initialize` with `manifest` (none: MCP-only),
/// its policy Request (if any) accepted.
async fn connected(manifest: Option<Value>) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let cfg = HostConfig {
        policy: vec!["*".into()],
        ..HostConfig::default()
    };
    let mcpl = manifest.is_some();
    let mut connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(manifest)}))
        .await;
    loop {
        tokio::select! {
            up = &mut connect => {
                let (s, streams) = up.unwrap().expect("the host connects");
                return (s, streams, raw);
            }
            v = raw.recv(), if mcpl => {
                if v["method"] == "featureSets/update" {
                    raw.send_json(json!({"jsonrpc": "2.0", "id": v["id"],
                                         "result": {"accepted": true}}))
                        .await;
                }
            }
        }
    }
}

/// Sends each surface's `list_changed`, then a `ping`, and returns once the ping is
/// answered: every notification before it was handled.
async fn announce_all(raw: &mut Raw) -> Vec<&'static str> {
    let methods = vec![
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    ];
    for m in &methods {
        raw.send_json(json!({"jsonrpc": "2.0", "method": m})).await;
    }
    raw.send_json(json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"}))
        .await;
    loop {
        let v = recv(raw).await;
        if v["id"] == "p1" {
            assert_eq!(v["result"], json!({}), "{v}");
            return methods;
        }
    }
}

/// The `list_changed` methods reported, the receipts handed out, and the lists named by
/// `ListChanged` events, in order.
fn seen(streams: &mut HostStreams) -> (Vec<String>, usize, Vec<McpList>) {
    let mut reported = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        if let HostDiagnostic::UnexpectedMethod { method } = d {
            reported.push(method);
        }
    }
    let (mut receipts, mut lists) = (0, Vec::new());
    while let Ok(e) = streams.events.try_recv() {
        match e {
            HostEvent::ManifestChange(_) => receipts += 1,
            HostEvent::ListChanged(list) => lists.push(list),
            _ => {}
        }
    }
    (reported, receipts, lists)
}

const LISTS: [McpList; 3] = [McpList::Tools, McpList::Resources, McpList::Prompts];

#[tokio::test]
async fn s3_3_list_changed_on_an_mcp_only_connection_is_an_event() {
    let (_s, mut streams, mut raw) = connected(None).await;
    announce_all(&mut raw).await;
    let (reported, receipts, lists) = seen(&mut streams);
    assert_eq!(reported, Vec::<String>::new());
    assert_eq!(receipts, 0);
    assert_eq!(lists, LISTS);
}

/// An MCPL server served as plain MCP (another MCPL version, §5.1, §3.3): the same.
#[tokio::test]
async fn s3_3_list_changed_from_an_mcpl_server_served_as_mcp_is_an_event() {
    let (_s, mut streams, mut raw) = connected_as_mcp(json!({ "version": "0.4" })).await;
    announce_all(&mut raw).await;
    let (reported, receipts, lists) = seen(&mut streams);
    assert_eq!(reported, Vec::<String>::new());
    assert_eq!(receipts, 0);
    assert_eq!(lists, LISTS);
}

/// [`connected`] to a server whose `manifest` has it served as plain MCP: no policy
/// Request goes out.
async fn connected_as_mcp(manifest: Value) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let cfg = HostConfig {
        policy: vec!["*".into()],
        ..HostConfig::default()
    };
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest))}))
        .await;
    let (s, streams) = connect.await.unwrap().expect("the host connects");
    (s, streams, raw)
}

/// The reference: under MCPL each is a `surface-changed` receipt (the host's own digest
/// stands in for a `revision` the server did not send), the one account of what changed
/// (§17.7), and no `ListChanged` besides.
#[tokio::test]
async fn s17_7_list_changed_under_mcpl_is_a_receipt() {
    let manifest = json!({ "version": "0.5", "pushEvents": true });
    let (_s, mut streams, mut raw) = connected(Some(manifest)).await;
    let methods = announce_all(&mut raw).await;
    let (reported, receipts, lists) = seen(&mut streams);
    assert_eq!(reported, Vec::<String>::new());
    assert_eq!(receipts, methods.len());
    assert_eq!(lists, Vec::<McpList>::new());
}
