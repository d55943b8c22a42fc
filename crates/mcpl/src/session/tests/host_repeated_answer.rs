//! §5.4, §5.1, §17.2: the answer a sans-I/O [`HostState`] reads its manifest from (the
//! `initialize` result, a fetched `mcpl/manifest`) is read by the one rule the async host
//! applies (`jsonrpc::repeated`): read from its text ([`HostState::handle_text`]), one
//! naming a member twice anywhere fails its request as unreadable, never read as its last
//! copy (I-JSON, RFC 7493 §2.3). Before, a driver had only `handle_message`, whose
//! `Message` no longer shows the repeat: the hidden second copy was granted from.

use super::*;

const NARROW: &str = r#"{"version":"0.5","featureSets":{}}"#;
const WIDE: &str =
    r#"{"version":"0.5","pushEvents":{},"featureSets":{"news":{"uses":["pushEvents"]}}}"#;

/// A host asking `pushEvents`, started: it and the id of its `initialize`.
fn started() -> (HostState, Instant, u64) {
    let now = Instant::now();
    let mut host = HostState::new(HostRules::new(["pushEvents"]), now, SystemTime::UNIX_EPOCH)
        .expect("host policy parses");
    host.start(now);
    let mut id = None;
    while let Some(out) = host.poll_output() {
        if let Some(Ok(Message::Request(r))) = out.frame().map(|f| Message::parse(&f)) {
            if r.method == "initialize" {
                id = r.id.to_value().as_u64();
            }
        }
    }
    (host, now, id.expect("initialize sent"))
}

/// The frames the host writes next, as text.
fn written(host: &mut HostState) -> Vec<String> {
    let mut frames = Vec::new();
    while let Some(out) = host.poll_output() {
        frames.extend(out.frame());
    }
    frames
}

fn init_answer(id: u64, experimental: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2024-11-05","capabilities":{{"tools":{{}},"experimental":{experimental}}},"serverInfo":{{"name":"s","version":"1"}}}}}}"#
    )
}

#[test]
fn s5_4_an_initialize_answer_naming_a_member_twice_grants_nothing() {
    let (mut host, now, id) = started();
    let twice = init_answer(id, &format!(r#"{{"mcpl":{NARROW},"mcpl":{WIDE}}}"#));
    host.handle_text(now, &twice).expect("one message");
    let frames = written(&mut host);
    assert!(
        !frames.iter().any(|f| f.contains("featureSets/update")),
        "a policy went out from a doubled manifest: {frames:?}"
    );
    assert!(
        host.review()
            .is_none_or(|r| !r.advertised().contains(Capability::PushEvents)),
        "pushEvents advertised from the hidden copy"
    );
    assert_ne!(host.mode(), &Mode::Mcpl);

    // The same answer written once is taken: the host sends its initial policy.
    let (mut host, now, id) = started();
    host.handle_text(now, &init_answer(id, &format!(r#"{{"mcpl":{WIDE}}}"#)))
        .expect("one message");
    let frames = written(&mut host);
    assert!(
        frames.iter().any(|f| f.contains("featureSets/update")),
        "{frames:?}"
    );
}

/// §17.2: a fetched manifest naming a member twice fails the fetch, the grant unchanged.
#[test]
fn s17_2_a_fetched_manifest_naming_a_member_twice_is_not_taken() {
    let mut p = Pair::connect(&["pushEvents", "channels.register"], server_rules());
    assert!(p.host.grant().allows(Capability::ChannelsRegister));
    let id = p.host.refresh_manifest(p.now).expect("up");
    p.drive();
    // The server's own answer is dropped; the host reads this text instead.
    p.to_host.clear();
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"version":"0.5","pushEvents":{{}},"channels":{{"register":{{}}}},"channels":{{}},"featureSets":{{"news":{{"uses":["pushEvents"]}}}}}}}}"#
    );
    let before = p.host_out.len();
    p.host.handle_text(p.now, &text).expect("one message");
    p.drive();
    assert!(
        p.host.grant().allows(Capability::ChannelsRegister),
        "the hidden copy's removal was taken"
    );
    assert!(
        p.host_out[before..].iter().any(|o| matches!(
            o,
            HostOutput::Diagnostic(HostDiagnostic::ManifestFetchFailed { .. })
        )),
        "{:?}",
        &p.host_out[before..]
    );
}

/// The same rule for the answer in a batch ([`HostState::handle_frame`], JSON-RPC 2.0 §6)
/// and among several messages on one line: read whole, so a repeat there grants nothing.
#[test]
fn s5_4_an_initialize_answer_naming_a_member_twice_in_a_batch_grants_nothing() {
    let twice = |id| init_answer(id, &format!(r#"{{"mcpl":{NARROW},"mcpl":{WIDE}}}"#));
    let texts: [&dyn Fn(u64) -> String; 2] = [&|id| format!("[{}]", twice(id)), &|id| {
        format!(r#"{} {{"jsonrpc":"2.0","method":"m"}}"#, twice(id))
    }];
    for text in texts {
        let (mut host, now, id) = started();
        host.handle_frame(now, &text(id), 1024);
        let frames = written(&mut host);
        assert!(
            !frames.iter().any(|f| f.contains("featureSets/update")),
            "a policy went out from a doubled manifest: {frames:?}"
        );
        assert_ne!(host.mode(), &Mode::Mcpl);
    }
    // Written once, in a batch, it is taken.
    let (mut host, now, id) = started();
    let once = init_answer(id, &format!(r#"{{"mcpl":{WIDE}}}"#));
    host.handle_frame(now, &format!("[{once}]"), 1024);
    assert!(written(&mut host)
        .iter()
        .any(|f| f.contains("featureSets/update")));
}
