//! §14.5 at the server: a `channels/open` or `channels/close` the host gives up (before or
//! across the application's answer) ends the channel here too; §14.2: a channel opened twice
//! keeps its first descriptor.

use super::*;

/// §14.3, §14.5, MCP's cancellation, fail closed: a host that gives up its `channels/close`
/// (abandoned, or expired) drops the channel at once (the server may have closed it:
/// `ChannelTable::unconfirmed`) and tells the server with `notifications/cancelled`. The
/// server, which answers the close `-32800` and refuses the application's late answer, no
/// longer holds the channel either: it lists it no more and the host's methods on it are
/// `-32023`. Found by the server hunt: the server kept serving and listing it.
#[test]
fn s14_5_a_close_the_host_cancelled_ends_the_channel_on_the_server_too() {
    let mut p = with_c1();
    let close = p
        .host
        .request(
            p.now,
            "channels/close",
            json!({ "channelId": "c1" }),
            Duration::from_secs(30),
        )
        .expect("granted");
    let from = p.server_out.len();
    assert!(p.step_server());
    let handed = p.server_out[from..].iter().find_map(|o| match o {
        ServerOutput::Request { id, method, .. } if method == "channels/close" => Some(id.clone()),
        _ => None,
    });
    let handed = handed.expect("the close is handed out");
    assert!(p.host.abandon_request(close));
    assert!(p.host.channels().ids().is_empty(), "the host dropped c1");
    let (frames, out) = host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": close, "reason": "given up" } }),
    );
    assert_eq!(frames[0]["error"]["code"], -32800, "{frames:?}");
    assert!(
        matches!(out.last(), Some(ServerOutput::Cancelled { .. })),
        "{out:?}"
    );
    assert!(p
        .server
        .answer(handed, Ok(json!({ "closed": false })))
        .is_err());
    assert!(p.server.channels().is_empty(), "{:?}", labels(&p.server));
    assert_eq!(reaches(&mut p, "c1"), all(false));
}

/// §14.3, §14.5, MCP's cancellation, fail closed: the host gives up its `channels/open`
/// after the application answered it but before it read the answer (the answer, read
/// after, is a late one it never applies) and tells the server with
/// `notifications/cancelled`. The server, which had taken the channel as opened, no longer
/// holds it (`-32023`, left out of `channels/list`) and reports it
/// (`opened_channel_dropped`). Found by the server hunt: the server held chat:9 for good.
#[test]
fn s14_5_an_open_the_host_gave_up_before_reading_its_answer_is_not_held() {
    let mut p = open_answered_unread();
    let wrote: Value = serde_json::from_str(p.host_wrote.last().expect("the open")).expect("json");
    assert_eq!(wrote["method"], "channels/open", "{wrote}");
    let open = wrote["id"].as_u64().expect("the host's id");
    assert!(p.host.abandon_request(open));
    let (frames, out) = host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": open, "reason": "given up" } }),
    );
    assert!(frames.is_empty(), "{frames:?}");
    assert!(
        out.iter().any(
            |o| matches!(o, ServerOutput::Diagnostic(d) if d.code() == "opened_channel_dropped")
        ),
        "{out:?}"
    );
    p.drive();
    assert!(
        p.host.channels().ids().is_empty(),
        "the late answer is not applied"
    );
    assert_eq!(serves_chat9(&mut p, 340), (false, false));
}

/// §14.2 (an id is unique within the connection), §14.3: the application answering a second
/// `channels/open` with a channel it already opened, described another way, leaves the
/// channel as the first answer described it on both sides. The host keeps the descriptor it
/// holds (`ChannelTable::settle`: an open answer does not rewrite a registration); the server
/// listed the second one in its `channels/list` answer, a channel the host does not hold.
#[test]
fn s14_2_a_channel_opened_again_stays_as_first_described_on_the_server_too() {
    let mut p = open_answered_unread();
    p.drive();
    let first = json!({ "id": "chat:9", "type": "chat" });
    assert_eq!(p.host.channels().get("chat:9"), Some(&first));
    p.host
        .request(
            p.now,
            "channels/open",
            json!({ "type": "chat" }),
            Duration::from_secs(30),
        )
        .expect("granted");
    let from = p.server_out.len();
    assert!(p.step_server());
    let handed = p.server_out[from..].iter().find_map(|o| match o {
        ServerOutput::Request { id, method, .. } if method == "channels/open" => Some(id.clone()),
        _ => None,
    });
    let again = json!({ "id": "chat:9", "type": "chat", "direction": "inbound", "label": "x" });
    p.server
        .answer(
            handed.expect("the open is handed out"),
            Ok(json!({ "channel": again })),
        )
        .expect("handed");
    p.drive();
    assert_eq!(
        p.host.channels().get("chat:9"),
        Some(&first),
        "the host keeps it"
    );
    let (frames, _) = host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "id": 900, "method": "channels/list", "params": {} }),
    );
    let listed: Vec<&Value> = frames[0]["result"]["channels"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|c| c["id"] == "chat:9")
        .collect();
    assert_eq!(listed, [&first], "{frames:?}");
}

/// §14.5, MCP's cancellation, the crossing left by the test above: the application answers
/// the host's `channels/close` `closed: false` (or the host's `channels/open` with a new
/// channel) while the host gives the request up; the host drops the channel (or opens
/// nothing) and its `notifications/cancelled` reaches the server after the answer went out.
/// Read the same way (fail closed: the host no longer holds the channel), the server no longer
/// holds it either. Before, the cancel named a request already answered and was handed on,
/// and the server kept listing and serving a channel the host did not hold.
#[test]
fn s14_5_a_lifecycle_request_cancelled_across_its_answer_ends_the_channel_on_the_server_too() {
    // A close answered `closed: false`, given up before the host read the answer.
    let mut p = with_c1();
    let close = p
        .host
        .request(
            p.now,
            "channels/close",
            json!({ "channelId": "c1" }),
            Duration::from_secs(30),
        )
        .expect("granted");
    let from = p.server_out.len();
    assert!(p.step_server());
    let handed = p.server_out[from..].iter().find_map(|o| match o {
        ServerOutput::Request { id, method, .. } if method == "channels/close" => Some(id.clone()),
        _ => None,
    });
    p.server
        .answer(handed.expect("handed"), Ok(json!({ "closed": false })))
        .expect("handed");
    p.collect();
    assert!(p.host.abandon_request(close));
    assert!(p.host.channels().ids().is_empty(), "the host dropped c1");
    host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": close, "reason": "given up" } }),
    );
    assert!(p.server.channels().is_empty(), "{:?}", labels(&p.server));
    assert_eq!(reaches(&mut p, "c1"), all(false));

    // An open answered with chat:9, given up before the host read the answer.
    let mut policy: Vec<String> = without_lifecycle();
    policy.push("channels.lifecycle".into());
    let policy: Vec<&str> = policy.iter().map(String::as_str).collect();
    let mut p = Pair::connect(&policy, gate_rules());
    let open = p
        .host
        .request(
            p.now,
            "channels/open",
            json!({ "type": "chat" }),
            Duration::from_secs(30),
        )
        .expect("granted");
    let from = p.server_out.len();
    assert!(p.step_server());
    let handed = p.server_out[from..].iter().find_map(|o| match o {
        ServerOutput::Request { id, method, .. } if method == "channels/open" => Some(id.clone()),
        _ => None,
    });
    let opened = json!({ "channel": { "id": "chat:9", "type": "chat" } });
    p.server
        .answer(handed.expect("handed"), Ok(opened))
        .expect("handed");
    p.collect();
    assert!(p.host.abandon_request(open));
    assert!(
        p.host.channels().ids().is_empty(),
        "the host opened nothing"
    );
    host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": open, "reason": "given up" } }),
    );
    assert_eq!(serves_chat9(&mut p, 950), (false, false));
}

/// The same two give-ups, the cancel naming the request by the same value written as a
/// float (`requestId: 7.0` for `channels/open` 7): one id by the library's identity in
/// flight (`jsonrpc::Identity`, MCP's cancellation names the request by its id), so the
/// channel ledger finds the answered open and close under it. Before, it kept them by
/// representation and the server held both channels.
#[test]
fn s14_5_a_cancel_naming_the_answered_request_as_a_float_ends_the_channel_too() {
    let mut p = open_answered_unread();
    let wrote: Value = serde_json::from_str(p.host_wrote.last().expect("the open")).expect("json");
    let open = wrote["id"].as_u64().expect("the host's id");
    assert!(p.host.abandon_request(open));
    #[allow(clippy::cast_precision_loss)]
    let as_float = json!(open as f64);
    assert!(as_float.is_f64(), "{as_float}");
    let (_, out) = host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": as_float, "reason": "given up" } }),
    );
    assert!(
        out.iter().any(
            |o| matches!(o, ServerOutput::Diagnostic(d) if d.code() == "opened_channel_dropped")
        ),
        "{out:?}"
    );
    p.drive();
    assert_eq!(serves_chat9(&mut p, 360), (false, false));

    let mut p = with_c1();
    let close = p
        .host
        .request(
            p.now,
            "channels/close",
            json!({ "channelId": "c1" }),
            Duration::from_secs(30),
        )
        .expect("granted");
    let from = p.server_out.len();
    assert!(p.step_server());
    let handed = p.server_out[from..].iter().find_map(|o| match o {
        ServerOutput::Request { id, method, .. } if method == "channels/close" => Some(id.clone()),
        _ => None,
    });
    p.server
        .answer(handed.expect("handed"), Ok(json!({ "closed": false })))
        .expect("handed");
    p.collect();
    assert!(p.host.abandon_request(close));
    #[allow(clippy::cast_precision_loss)]
    let as_float = json!(close as f64);
    host_sends(
        &mut p,
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": as_float, "reason": "given up" } }),
    );
    assert!(p.server.channels().is_empty(), "{:?}", labels(&p.server));
    assert_eq!(reaches(&mut p, "c1"), all(false));
}
