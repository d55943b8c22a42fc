//! The engine's unit tests: what it reads of the frames it is tapped.

use super::*;

/// The peer taps a frame it writes inline only once written, so a fast server's answer
/// to `initialize` can be tapped before the request: the connection panel still shows
/// the server's `initialize` result (seen flaking in `inspect_api.rs` as a null
/// `serverInfo`).
#[test]
fn an_initialize_answer_tapped_before_its_request_is_still_the_servers_result() {
    let engine = Engine::new(Settings {
        target: Target::Tcp("127.0.0.1:1".into()),
        label: "t".into(),
        tls: None,
        check_args: Vec::new(),
        patterns: Vec::new(),
        auto_answer: AutoAnswer::Off,
        timeout: Duration::from_secs(1),
    });
    let frame = |direction, text: &str| {
        engine.on_frame(
            0,
            TapEvent {
                direction,
                at: std::time::SystemTime::now(),
                text,
            },
        )
    };
    let result = r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"fast"}}}"#;
    frame(FrameDirection::Inbound, result);
    frame(
        FrameDirection::Outbound,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    );
    assert_eq!(
        engine.state().server_init,
        Some(json!({ "serverInfo": { "name": "fast" } }))
    );
}

/// The library's peer settles `initialize` with its first answer and drops a later one
/// under the same id (an answer to no request in flight): the connection panel shows
/// the first, an error included (then no result at all), and counts the later ones as
/// ignored, whether they came before the request was tapped or after.
#[test]
fn only_the_first_answer_to_initialize_is_the_servers_result() {
    for early in [false, true] {
        for first_is_error in [false, true] {
            let engine = Engine::new(Settings {
                target: Target::Tcp("127.0.0.1:1".into()),
                label: "t".into(),
                tls: None,
                check_args: Vec::new(),
                patterns: Vec::new(),
                auto_answer: AutoAnswer::Off,
                timeout: Duration::from_secs(1),
            });
            let frame = |direction, text: &str| {
                engine.on_frame(
                    0,
                    TapEvent {
                        direction,
                        at: std::time::SystemTime::now(),
                        text,
                    },
                )
            };
            let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
            let first = if first_is_error {
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"no"}}"#
            } else {
                r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"first"}}}"#
            };
            let later = r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"later"}}}"#;
            if !early {
                frame(FrameDirection::Outbound, request);
            }
            frame(FrameDirection::Inbound, first);
            frame(FrameDirection::Inbound, later);
            if early {
                frame(FrameDirection::Outbound, request);
                // One more after the request too.
                frame(FrameDirection::Inbound, later);
            }
            let st = engine.state();
            let expected = (!first_is_error).then(|| json!({ "serverInfo": { "name": "first" } }));
            assert_eq!(
                st.server_init, expected,
                "early {early}, error {first_is_error}"
            );
            let (count, last) = st.ignored_init.clone().expect("counted");
            assert_eq!(count, if early { 2 } else { 1 });
            assert_eq!(last, json!({ "serverInfo": { "name": "later" } }));
        }
    }
}

#[test]
fn echo_answers_the_last_user_message() {
    let p = json!({ "messages": [
        { "role": "user", "content": "first" },
        { "role": "user", "content": [{ "type": "text", "text": "sec" }, { "type": "text", "text": "ond" }] },
        { "role": "assistant", "content": "no" },
    ]});
    assert_eq!(echo_text(&p), "second");
    assert_eq!(echo_text(&json!({})), "");
    assert_eq!(text_answer("inference/request", "x")["content"], "x");
    assert_eq!(text_answer("model/info", "m")["id"], "m");
}

/// A manifest change event is handled after the session has published the change, possibly
/// after a later one too (the events queue behind the state): the event showed the manifest
/// in force when it was handled, with that manifest's revision, beside a receipt naming
/// another (§17.6: a receipt's revision is the manifest it produced). Now the event shows
/// the receipt's revision, and the manifest only while it is the one that receipt names.
#[tokio::test]
async fn a_manifest_change_is_shown_with_its_own_manifest_only() {
    use mcpl::host::{HostConfig, HostEvent, HostSession};
    use mcpl::manifest::review::ChangeReceipt;
    let engine = Engine::new(Settings {
        target: Target::Tcp("127.0.0.1:1".into()),
        label: "t".into(),
        tls: None,
        check_args: Vec::new(),
        patterns: Vec::new(),
        auto_answer: AutoAnswer::Off,
        timeout: Duration::from_secs(5),
    });
    let (host_side, server_side) = mcpl::transport::memory::pair();
    tokio::spawn(mcpl::reference::serve(server_side));
    let (session, _streams) = HostSession::connect(host_side, HostConfig::default())
        .await
        .expect("connects");
    let (manifest, in_force) = session.manifest().expect("a manifest in force");
    let in_force = in_force.expect("its revision");
    *lock(&engine.inner.session) = Some(session.clone());
    let receipt = |revision: &str| ChangeReceipt {
        previous_revision: None,
        revision: revision.to_owned(),
        domains: Vec::new(),
        impacts: Vec::new(),
    };
    // A receipt of a change since superseded: not shown with the manifest in force now.
    engine.on_event(
        0,
        "ref",
        HostEvent::ManifestChange(receipt("sha256:superseded")),
    );
    // The receipt of the manifest in force: shown with it.
    engine.on_event(0, "ref", HostEvent::ManifestChange(receipt(&in_force)));
    let events: Vec<Value> = engine.state().events.iter().cloned().collect();
    let [old, current] = events.as_slice() else {
        panic!("two events: {events:?}")
    };
    assert_eq!(old["revision"], "sha256:superseded", "{old}");
    assert_eq!(old["manifest"], Value::Null, "{old}");
    assert_eq!(old["superseded"], true, "{old}");
    assert_eq!(current["revision"], json!(in_force), "{current}");
    assert_eq!(current["manifest"], manifest, "{current}");
    assert_eq!(current["superseded"], false, "{current}");
    session.close();
}
