//! The engine's unit tests: what it reads of the frames it is tapped.

use super::*;

fn engine() -> Engine {
    Engine::new(Settings {
        target: Target::Tcp("127.0.0.1:1".into()),
        label: "t".into(),
        tls: None,
        check_args: Vec::new(),
        patterns: Vec::new(),
        auto_answer: AutoAnswer::Off,
        timeout: Duration::from_secs(1),
    })
}

/// Taps `text` as connection `generation`'s frame in `direction`.
fn tap(engine: &Engine, generation: u64, direction: FrameDirection, text: &str) {
    engine.on_frame(
        generation,
        TapEvent {
            direction,
            at: std::time::SystemTime::now(),
            text,
            // Unnumbered: a diagnostic here names no frame (the newest of its kind is taken).
            frame: 0,
        },
    );
}

/// The rules marked on log entry `seq`.
fn marks(engine: &Engine, seq: u64) -> Vec<String> {
    let log = engine.log();
    let e = log.get(seq).expect("kept");
    e.marks.iter().map(|m| m.rule.clone()).collect()
}

/// The peer taps a frame before its bytes reach the transport (f1e6941), so an answer
/// tapped before the request under its id was written by the server before the request
/// was on the wire: a stray, answering nothing. It was taken as the server's `initialize`
/// result (a workaround of 7c007e9 for the older peer, which tapped an inline write after
/// it), and the real answer after the request counted as one the host ignored. Now the
/// stray is marked in the log and the answer after the request is the result.
#[test]
fn an_answer_tapped_before_its_request_is_a_stray_not_the_result() {
    let engine = engine();
    tap(
        &engine,
        0,
        FrameDirection::Inbound,
        r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"stray"}}}"#,
    );
    tap(
        &engine,
        0,
        FrameDirection::Outbound,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    );
    tap(
        &engine,
        0,
        FrameDirection::Inbound,
        r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"real"}}}"#,
    );
    let st = engine.state();
    assert_eq!(
        st.server_init,
        Some(json!({ "serverInfo": { "name": "real" } }))
    );
    assert_eq!(st.ignored_init, None);
    drop(st);
    assert_eq!(marks(&engine, 1), ["stray_response"]);
    assert!(marks(&engine, 3).is_empty(), "{:?}", marks(&engine, 3));
}

/// The library's peer settles `initialize` with its first answer and drops a later one
/// under the same id (an answer to no request in flight): the connection panel shows the
/// first, an error included (then no result at all), and counts the later ones as ignored.
/// One tapped before the request is a stray, neither the result nor counted.
#[test]
fn only_the_first_answer_to_initialize_is_the_servers_result() {
    for stray_first in [false, true] {
        for first_is_error in [false, true] {
            let engine = engine();
            let frame = |d, text: &str| tap(&engine, 0, d, text);
            let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
            let first = if first_is_error {
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"no"}}"#
            } else {
                r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"first"}}}"#
            };
            let later = r#"{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"later"}}}"#;
            if stray_first {
                frame(FrameDirection::Inbound, later);
            }
            frame(FrameDirection::Outbound, request);
            frame(FrameDirection::Inbound, first);
            frame(FrameDirection::Inbound, later);
            let st = engine.state();
            let expected = (!first_is_error).then(|| json!({ "serverInfo": { "name": "first" } }));
            assert_eq!(
                st.server_init, expected,
                "stray {stray_first}, error {first_is_error}"
            );
            let (count, last) = st.ignored_init.clone().expect("counted");
            assert_eq!(count, 1);
            assert_eq!(last, json!({ "serverInfo": { "name": "later" } }));
        }
    }
}

/// The same for any request of the host: an answer written before its request (a server
/// guessing the next id), to an id never sent, or a second answer to one already answered
/// is marked a stray in the log, and the answer after the request is not. An id the peer
/// reads as the request's (`2.0` for `2`, JSON-RPC 2.0 §5) answers it; a string `"2"` does
/// not.
#[test]
fn responses_are_paired_with_the_requests_on_the_wire() {
    let engine = engine();
    let frames = [
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#,
        ),
        (
            FrameDirection::Outbound,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        ),
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":"2","result":{}}"#,
        ),
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":2.0,"result":{"tools":[]}}"#,
        ),
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"again"}}"#,
        ),
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        ),
    ];
    for (d, f) in frames {
        tap(&engine, 0, d, f);
    }
    let stray = ["stray_response"];
    assert_eq!(marks(&engine, 1), stray);
    assert!(marks(&engine, 2).is_empty());
    assert_eq!(marks(&engine, 3), stray);
    assert!(marks(&engine, 4).is_empty(), "{:?}", marks(&engine, 4));
    assert_eq!(marks(&engine, 5), stray);
    assert_eq!(marks(&engine, 6), stray);
}

/// A diagnostic is handled on its own task, after later frames may have been logged, in
/// both directions. A response's diagnostic marked the newest received frame of its id:
/// the server's own request under the same id (ids of the two directions are separate
/// spaces), or the answer that came after a stray; a request's diagnostic could mark a
/// response; and a diagnostic of a new connection marked a frame of the old one.
#[test]
fn a_diagnostic_marks_the_frame_it_is_about_under_interleaving() {
    use mcpl::jsonrpc::RequestId;
    use mcpl::peer::Diagnostic;
    let engine = engine();
    let id = RequestId::Number(7.into());
    // Connection 0: a server request under id 7 (answered), nothing to mark.
    tap(
        &engine,
        0,
        FrameDirection::Inbound,
        r#"{"jsonrpc":"2.0","id":7,"method":"model/info","params":{}}"#,
    );
    // Connection 1.
    engine.state().generation = 1;
    let frames = [
        // 2: a stray under 7, before the host's request 7.
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":7,"result":{"stray":true}}"#,
        ),
        // 3: the host's request 7; 4: the server's request under its own 7.
        (
            FrameDirection::Outbound,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
        ),
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":7,"method":"model/info","params":{}}"#,
        ),
        // 5: the answer to request 7.
        (
            FrameDirection::Inbound,
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#,
        ),
    ];
    for (d, f) in frames {
        tap(&engine, 1, d, f);
    }
    // The library dropped the stray (read before request 7 was in flight).
    engine.on_diagnostic(
        1,
        &HostDiagnostic::Connection(Diagnostic::UnknownResponse {
            id: Some(id.clone()),
            error: None,
        }),
        None,
    );
    // The server's request 7 found no handler.
    engine.on_diagnostic(
        1,
        &HostDiagnostic::NoHandler {
            method: "model/info".into(),
            id: "7".into(),
        },
        None,
    );
    assert!(marks(&engine, 1).is_empty(), "{:?}", marks(&engine, 1));
    assert_eq!(marks(&engine, 2), ["stray_response", "unknown_response"]);
    assert!(marks(&engine, 3).is_empty());
    assert_eq!(marks(&engine, 4), ["no_handler"]);
    assert!(marks(&engine, 5).is_empty(), "{:?}", marks(&engine, 5));
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

/// Diagnostics about a server's message name its method, and some what identifies it (a
/// repeated `eventId`, §9.4; a rejected channel's id, §14.5). Handled after later frames of
/// the same method were logged, each marked the newest of the method: a later push with
/// another `eventId`, and two diagnostics of one rule the same frame (the other unmarked).
#[test]
fn a_diagnostic_of_a_method_marks_the_frame_it_identifies() {
    let engine = engine();
    let push = |id: &str| {
        format!(r#"{{"jsonrpc":"2.0","method":"push/event","params":{{"eventId":"{id}"}}}}"#)
    };
    for id in ["e1", "e1", "e2"] {
        tap(&engine, 0, FrameDirection::Inbound, &push(id));
    }
    engine.on_diagnostic(
        0,
        &HostDiagnostic::DuplicateEvent {
            event_id: "e1".into(),
        },
        None,
    );
    assert_eq!(marks(&engine, 2), ["duplicate_event"]);
    assert!(marks(&engine, 3).is_empty(), "{:?}", marks(&engine, 3));
    // Two refused frames of one method, both diagnosed after both were logged.
    let denied = HostDiagnostic::CapabilityDenied {
        method: "push/event".into(),
        capability: mcpl::capability::Capability::PushEvents,
    };
    tap(&engine, 0, FrameDirection::Inbound, &push("e4"));
    tap(&engine, 0, FrameDirection::Inbound, &push("e5"));
    engine.on_diagnostic(0, &denied, None);
    engine.on_diagnostic(0, &denied, None);
    // 4 is the first diagnostic's own entry.
    assert_eq!(marks(&engine, 5), ["capability_denied"]);
    assert_eq!(marks(&engine, 6), ["capability_denied"]);
}
