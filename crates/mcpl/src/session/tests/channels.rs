//! The channels a host holds follow the confirmed answers to its own `channels/open` and
//! `channels/close` (§14.3, §14.5), in wire order, on the sans-I/O [`HostState`].

use super::*;

fn lifecycle_rules() -> ServerRules {
    let mut rules = server_rules();
    rules.manifest["channels"] = json!({ "register": {}, "incoming": {}, "lifecycle": {} });
    rules
}

/// A host granted registration, incoming and the lifecycle, with inbound channel `c1`
/// registered.
fn with_c1() -> Pair {
    let policy = [
        "channels.register",
        "channels.incoming",
        "channels.lifecycle",
    ];
    let mut p = Pair::connect(&policy, lifecycle_rules());
    let c1 = json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "inbound" }] });
    let r = call(&mut p, 900, "channels/register", c1);
    assert_eq!(r["result"]["results"][0]["accepted"], true, "{r}");
    p
}

/// The host sends `method` with `params`; the server never reads it (the test answers).
fn host_asks(p: &mut Pair, method: &str, params: Value) -> u64 {
    let id = p
        .host
        .request(p.now, method, params, Duration::from_secs(30))
        .expect("granted");
    p.collect();
    p.to_server.clear();
    id
}

fn answer(p: &mut Pair, id: u64, result: Value) {
    p.server_writes(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
}

/// The result of one `channels/incoming` message on `channel`.
fn incoming_on(p: &mut Pair, id: i64, channel: &str) -> Value {
    let m = json!({ "messages": [{ "channelId": channel, "messageId": "m", "content": "hi" }] });
    call(p, id, "channels/incoming", m)["result"]["results"][0].clone()
}

/// §14.5: a message the server sends right behind its confirming `closed: true` is judged
/// without the channel (`-32023`).
#[test]
fn s14_5_a_confirmed_close_is_applied_before_the_next_message() {
    let mut p = with_c1();
    let id = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    answer(&mut p, id, json!({ "closed": true }));
    let r = incoming_on(&mut p, 901, "c1");
    assert_eq!(r["code"], -32023, "{r}");
    assert!(p.host.channels().ids().is_empty());
}

/// Fail closed: an open whose request timed out is not applied by its late answer, and an
/// open answer registers its channel only once confirmed in time; a close that timed out
/// took its channel out already ([`ChannelTable::unconfirmed`]), its late answer changes
/// nothing more.
#[test]
fn s14_5_late_lifecycle_answers_change_nothing() {
    let mut p = with_c1();
    let close = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    let open = host_asks(&mut p, "channels/open", json!({ "type": "chat" }));
    p.host.handle_timeout(p.now + Duration::from_secs(31));
    answer(&mut p, close, json!({ "closed": true }));
    let chat = json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "inbound" } });
    answer(&mut p, open, chat.clone());
    p.drive();
    assert!(p.host.channels().ids().is_empty());
    let open = host_asks(&mut p, "channels/open", json!({ "type": "chat" }));
    answer(&mut p, open, chat);
    assert_eq!(incoming_on(&mut p, 902, "chat:1")["accepted"], true);
    assert_eq!(p.host.channels().ids(), ["chat:1"]);
}

/// §14.3, §14.5: an open or close the application gave up ([`HostState::abandon_request`])
/// is forgotten at once: its answer, read after, is a late response (reported) and changes
/// no channel, so nothing widens on an unconfirmed open; the close given up took its
/// channel out when it was given up (fail closed, [`ChannelTable::unconfirmed`]). Only the application's own
/// requests are given up: the machine's (a hook, a policy Request) are not.
#[test]
fn s14_5_a_lifecycle_request_given_up_is_forgotten_and_its_answer_changes_nothing() {
    let mut p = with_c1();
    let close = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    let open = host_asks(&mut p, "channels/open", json!({ "type": "chat" }));
    let from = p.host_out.len();
    assert!(p.host.abandon_request(close));
    assert!(p.host.abandon_request(open));
    assert!(!p.host.is_pending(open) && !p.host.is_pending(close));
    assert!(!p.host.abandon_request(open), "given up once");
    p.collect();
    assert!(
        p.to_server.is_empty(),
        "the driver writes the cancel, under its id"
    );
    answer(&mut p, close, json!({ "closed": true }));
    let chat = json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "inbound" } });
    answer(&mut p, open, chat);
    assert_eq!(incoming_on(&mut p, 903, "chat:1")["code"], -32023);
    assert_eq!(incoming_on(&mut p, 904, "c1")["code"], -32023);
    assert!(p.host.channels().ids().is_empty());
    let outputs = p.host_outputs_from(from);
    let late = outputs
        .iter()
        .filter(|o| {
            matches!(
                o,
                HostOutput::Diagnostic(HostDiagnostic::UnexpectedResponse { .. })
            )
        })
        .count();
    assert_eq!(late, 2, "each late answer reported");
    assert!(
        !outputs.iter().any(|o| matches!(
            o,
            HostOutput::Response { .. } | HostOutput::RequestTimedOut { .. }
        )),
        "nothing comes out for a request given up"
    );
    let fetch = p.host.refresh_manifest(p.now).expect("up, in MCPL");
    assert!(!p.host.abandon_request(fetch), "the machine's own request");
    assert!(p.host.is_pending(fetch));
}

/// §14.5 on the server's side: the host judges each descriptor on its own, so the server
/// does too. A `channels/register` carrying one descriptor its type cannot read (no `type`)
/// next to a good one: the host accepts the good one, and the server holds it. Found by
/// the channels hunt: the whole change failed to parse, so the server tracked nothing and
/// its `channels/list` answer left out a channel the host had accepted.
#[test]
fn s14_5_the_server_holds_what_the_host_accepted_next_to_an_unreadable_descriptor() {
    let mut p = registering(json!([channel("a", "one"), { "id": "b" }]));
    p.drive();
    let answer = p
        .server_out
        .iter()
        .find_map(|o| match o {
            ServerOutput::Response { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .expect("answered");
    let results = answer.expect("itemized")["results"].clone();
    assert_eq!(results[0], json!({ "id": "a", "accepted": true }));
    assert_eq!(results[1]["accepted"], false);
    assert_eq!(
        labels(&p.server),
        [("a".to_owned(), Some("one".to_owned()))]
    );
}

/// §4.1 on the server's side: [`ServerState::notify`] and [`ServerState::request`] send a
/// method only in the form its table gives it, by the rule the host applies: a
/// `channels/incoming` Notification (AUDIT-001: x-mcpl, xgate) or an `mcpl/manifestChanged`
/// Request is refused, nothing sent. Found by the channels hunt: the gate judged direction
/// and grant only, and the host then dropped the Notification.
#[test]
fn s4_1_the_server_sends_a_method_only_in_its_form() {
    let policy = ["channels.register", "channels.incoming"];
    let mut p = Pair::connect(&policy, lifecycle_rules());
    let m = json!({ "messages": [{ "channelId": "c1", "messageId": "m", "content": "hi" }] });
    let r = p.server.notify("channels/incoming", m);
    assert!(matches!(r, Err(SendRefusal::WrongForm { .. })), "{r:?}");
    let r = p.server.request(p.now, "mcpl/manifestChanged", json!({}));
    assert!(matches!(r, Err(SendRefusal::WrongForm { .. })), "{r:?}");
    p.collect();
    assert!(p.to_host.is_empty(), "{:?}", p.to_host);
}

/// §14.3, §14.5: an open and a close whose answers were read before the application gave
/// them up are facts about the server's channels: applied where they were read, and the
/// give-up that follows finds nothing to forget ([`HostState::abandon_request`] is `false`)
/// and changes nothing back. (The driver feeds a received answer before the give-up: see
/// `host::driver_tests`.)
#[test]
fn s14_5_an_open_or_close_answered_before_it_was_given_up_stays_applied() {
    let mut p = with_c1();
    let close = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    let open = host_asks(&mut p, "channels/open", json!({ "type": "chat" }));
    answer(&mut p, close, json!({ "closed": true }));
    let chat = json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "inbound" } });
    answer(&mut p, open, chat);
    // Both answers read (received), then the caller gives up.
    while p.step_host() {}
    assert!(!p.host.abandon_request(close), "already answered");
    assert!(!p.host.abandon_request(open), "already answered");
    assert_eq!(p.host.channels().ids(), ["chat:1"]);
    assert_eq!(incoming_on(&mut p, 905, "chat:1")["accepted"], true);
    assert_eq!(incoming_on(&mut p, 906, "c1")["code"], -32023);
}

/// §14.5, fail closed: a `channels/changed` refused whole for its size (past
/// `max_per_message` entries, `-32602`) still has its removals applied: a removal only
/// narrows what the server may do, and the server no longer holds the channels it removed.
/// The refusal names what was removed (`data.removed`); so does one refused for another
/// list's shape. Before, the whole message was dropped and the removed channel stayed
/// usable.
#[test]
fn s14_5_removals_of_a_channels_changed_refused_for_its_size_still_apply() {
    let mut p = with_c1();
    let limit = ChannelLimits::default().max_per_message;
    let added: Vec<Value> = (0..limit)
        .map(|i| json!({ "id": format!("x{i}"), "type": "chat", "direction": "inbound" }))
        .collect();
    let changed = json!({ "removed": ["c1", "never"], "added": added });
    let r = call(&mut p, 910, "channels/changed", changed);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["removed"], json!(["c1"]), "{r}");
    assert_eq!(incoming_on(&mut p, 911, "c1")["code"], -32023);
    assert!(p.host.channels().ids().is_empty());
    // Refused for another list's shape: the same.
    let mut p = with_c1();
    let changed = json!({ "removed": ["c1"], "added": "not a list" });
    let r = call(&mut p, 912, "channels/changed", changed);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["removed"], json!(["c1"]), "{r}");
    assert!(p.host.channels().ids().is_empty());
}

/// §14.5, fail closed: a `channels/close` the host sent whose outcome it never learns
/// (its request timed out, or the application gave it up before any answer was read) takes
/// the channel out of the host's table: the server may have closed it (a late `closed:
/// true` is not read), and the host asked for it gone, so `channels/incoming` on it is
/// `-32023` and nothing is published to it. A removal only narrows. Before, the channel
/// stayed registered and its messages were accepted. An open never confirmed still adds
/// nothing.
#[test]
fn s14_5_a_close_never_confirmed_unregisters_the_channel() {
    let mut p = with_c1();
    let close = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    p.host.handle_timeout(p.now + Duration::from_secs(31));
    p.drive();
    assert!(!p.host.is_pending(close));
    assert_eq!(incoming_on(&mut p, 920, "c1")["code"], -32023);
    assert!(p.host.channels().ids().is_empty());
    // Given up before its answer was read: the same.
    let mut p = with_c1();
    let close = host_asks(&mut p, "channels/close", json!({ "channelId": "c1" }));
    assert!(p.host.abandon_request(close));
    assert_eq!(incoming_on(&mut p, 921, "c1")["code"], -32023);
    assert!(p.host.channels().ids().is_empty());
}
