//! A hostile or merely unusual host on the wire, against a `Server`: raw JSON lines over a
//! real pipe. Whatever the host sends is handled, answered with an error, or reported as a
//! `ServerDiagnostic` the application sees; nothing it sends vanishes.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{Server, ServerDiagnostic, Session};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use tokio::sync::broadcast;

fn server() -> Server {
    Server::builder("hostile", "1")
        .feature_set("work", "Work", &[Capability::Tools])
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s: Session, _p| async { Ok(ToolsCallResult::text("echo")) },
        )
        .tool(
            "wait",
            "Never finishes by itself",
            json!({"type": "object"}),
            |_s: Session, _p| std::future::pending(),
        )
        .build()
        .expect("server builds")
}

/// The host's end of a pipe to a started [`server`], and the session's diagnostics.
struct RawHost {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    diagnostics: broadcast::Receiver<ServerDiagnostic>,
    _session: Session,
}

impl RawHost {
    fn start() -> RawHost {
        RawHost::serving(server())
    }

    /// The host's end of a pipe to `server`, started.
    fn serving(server: Server) -> RawHost {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let session = server.start(Transport::lines(br, bw, "test"));
        RawHost {
            lines: BufReader::new(ar).lines(),
            write: aw,
            diagnostics: session.diagnostics(),
            _session: session,
        }
    }

    async fn send(&mut self, line: &str) {
        let line = format!("{line}\n");
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    async fn recv(&mut self) -> Value {
        let line = self.lines.next_line().await.expect("read").expect("a line");
        serde_json::from_str(&line).expect("the server writes JSON")
    }

    /// `initialize` as an MCPL 0.5 host, `notifications/initialized`, then the policy Request
    /// granting `grant` (a JSON list) as id 1: its answer.
    async fn ready(&mut self, grant: &str) -> Value {
        self.send(&initialize(
            r#"{"experimental":{"mcpl":{"version":"0.5"}}}"#,
        ))
        .await;
        self.recv().await;
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{{"effectiveCapabilities":{grant}}}}}"#
        ))
        .await;
        self.recv().await
    }

    /// A `ping` and its answer: everything sent before it has been taken by then.
    async fn sync(&mut self, id: u64) {
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .await;
        let answer = self.recv().await;
        assert_eq!(answer["id"], json!(id), "{answer}");
    }

    /// The codes of the diagnostics reported so far.
    fn codes(&mut self) -> Vec<&'static str> {
        let mut codes = Vec::new();
        while let Ok(d) = self.diagnostics.try_recv() {
            codes.push(d.code());
        }
        codes
    }
}

/// `initialize` with these `capabilities` (JSON text).
/// A raw host ready (its policy granting `channels.publish` and `channels.register`) with a
/// server whose `channels/publish` handler logs the channel each publish names.
async fn publishing_host() -> (RawHost, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    let server = Server::builder("channels", "1")
        .feature_set(
            "chat",
            "Chat",
            &[Capability::ChannelsPublish, Capability::ChannelsRegister],
        )
        .on_channels_publish(move |_s, p| {
            log.lock().unwrap().push(p.channel_id);
            async { Ok(mcpl::protocol::channels::PublishResult::delivered(None)) }
        })
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let receipt = host
        .ready(r#"["channels.publish","channels.register"]"#)
        .await;
    assert_eq!(receipt["result"]["accepted"], true);
    (host, seen)
}

fn initialize(capabilities: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{capabilities},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#
    )
}

/// §5.2, §3.3: an `experimental.mcpl` that is no object advertises no MCPL, so the host is
/// served as a plain MCP host; that the host wrote one is reported, as another version is
/// (`host_mcpl_version`), never silently taken. `null` reads as absent, as everywhere. An
/// object without `version` is served as MCPL 0.5 (`HostMcpl::Unversioned`), and reported.
#[tokio::test]
async fn s5_2_a_malformed_mcpl_advertisement_is_reported() {
    for (mcpl, reported) in [
        ("true", true),
        (r#""0.5""#, true),
        (r#"["0.5"]"#, true),
        ("5", true),
        ("null", false),
        (r#"{"version":"0.5"}"#, false),
        // An object without the `version` its shape requires: served as MCPL 0.5, reported.
        ("{}", true),
    ] {
        let mut host = RawHost::start();
        host.send(&initialize(&format!(
            r#"{{"experimental":{{"mcpl":{mcpl}}}}}"#
        )))
        .await;
        let init = host.recv().await;
        assert!(init["result"].is_object(), "{init}");
        host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        host.send(r#"{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
            .await;
        let policy = host.recv().await;
        // Served as MCP (no policy method) unless it advertised MCPL 0.5.
        let mcp_only = !mcpl.starts_with('{');
        assert_eq!(
            policy["error"]["code"] == json!(-32601),
            mcp_only,
            "{mcpl}: {policy}"
        );
        host.sync(2).await;
        let codes = host.codes();
        assert_eq!(
            codes.contains(&"host_mcpl_malformed"),
            reported,
            "{mcpl}: {codes:?}"
        );
    }
    // The plain MCP host, which names no `mcpl`, is no defect.
    let mut host = RawHost::start();
    host.send(&initialize("{}")).await;
    host.recv().await;
    host.sync(1).await;
    assert_eq!(host.codes(), Vec::<&str>::new());
}

/// MCP's handshake: `notifications/initialized` acknowledges the `initialize` answer, once.
/// One before `initialize`, or a second one, acknowledges nothing: it is reported
/// (`ignored_notification`), not dropped unseen; the one in turn is no defect.
#[tokio::test]
async fn an_initialized_notification_out_of_turn_is_reported() {
    const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let mut host = RawHost::start();
    host.send(INITIALIZED).await;
    host.sync(1).await;
    assert_eq!(host.codes(), ["ignored_notification"], "before initialize");
    host.send(&initialize(
        r#"{"experimental":{"mcpl":{"version":"0.5"}}}"#,
    ))
    .await;
    host.recv().await;
    host.send(INITIALIZED).await;
    host.sync(2).await;
    assert_eq!(host.codes(), Vec::<&str>::new(), "in turn");
    host.send(INITIALIZED).await;
    host.sync(3).await;
    assert_eq!(host.codes(), ["ignored_notification"], "a second one");
}

/// MCP's lifecycle: once `initialize` is answered the host MUST send
/// `notifications/initialized` before normal operation, and MCPL's policy Request comes
/// "after initialization" (§5.3). A request other than `ping` read before it is a host
/// defect: served (reading: refusing it would strand a host that merely omits the
/// notification, and nothing it asks for depends on it) and reported once per connection
/// (`request_before_initialized`, naming the method). Before, it was served unseen.
#[tokio::test]
async fn a_request_before_the_initialized_notification_is_served_and_reported_once() {
    let mut host = RawHost::start();
    host.send(&initialize(
        r#"{"experimental":{"mcpl":{"version":"0.5"}}}"#,
    ))
    .await;
    host.recv().await;
    host.sync(1).await;
    assert_eq!(host.codes(), Vec::<&str>::new(), "a ping may come first");
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
        .await;
    let receipt = host.recv().await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.send(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    )
    .await;
    let echo = host.recv().await;
    assert_eq!(echo["result"]["content"][0]["text"], "echo", "{echo}");
    host.sync(4).await;
    let mut d = Vec::new();
    while let Ok(x) = host.diagnostics.try_recv() {
        d.push(x);
    }
    assert_eq!(d.len(), 1, "reported once: {d:?}");
    assert_eq!(d[0].code(), "request_before_initialized");
    assert!(d[0].detail().contains("featureSets/update"), "{}", d[0]);
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    host.send(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    )
    .await;
    host.recv().await;
    host.sync(6).await;
    assert_eq!(host.codes(), Vec::<&str>::new(), "after it, nothing");
}

/// §5.4, §6.2: a policy Request whose `effectiveCapabilities` lists entries naming no
/// capability path (a case variant `Tools`, a typo `pushEvent`, a bare parent `channels`,
/// `contextHooks.*` short of the leaves' depth) grants nothing for them (absence is denial),
/// and the host's mistake is reported once per Request (`grant_names_no_path`, each entry
/// with what to write instead), not absorbed. Before, it was absorbed silently: the host
/// operator learnt only that tools were refused. A grant naming paths only reports nothing.
#[tokio::test]
async fn s5_4_grant_entries_naming_no_path_are_reported_with_what_to_write() {
    let mut host = RawHost::start();
    let receipt = host
        .ready(r#"["Tools","pushEvent","channels","contextHooks.*","nope.*.x"]"#)
        .await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    )
    .await;
    let refused = host.recv().await;
    assert_eq!(
        refused["error"]["code"], -32002,
        "nothing granted: {refused}"
    );
    host.sync(3).await;
    let mut d = Vec::new();
    while let Ok(x) = host.diagnostics.try_recv() {
        d.push(x);
    }
    let found: Vec<_> = d
        .iter()
        .filter(|d| d.code() == "grant_names_no_path")
        .collect();
    assert_eq!(found.len(), 1, "{d:?}");
    let text = found[0].to_string();
    for needle in [
        "Tools",
        "`tools`",
        "pushEvent",
        "`pushEvents`",
        "channels",
        "contextHooks.*",
        "nope.*.x",
        "§5.4",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    assert_eq!(found[0].kind(), mcpl::server::DiagnosticKind::PeerDefect);

    let mut host = RawHost::start();
    let receipt = host.ready(r#"["tools","channels.*"]"#).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.sync(2).await;
    assert!(
        !host.codes().contains(&"grant_names_no_path"),
        "paths and patterns reaching paths are no defect"
    );
}

/// MCP's lifecycle has one `initialize` per connection; the spec is silent on a second.
/// Reading (fail closed): it is answered `-32600` under its own id and changes nothing, a
/// second one advertising no MCPL (or another version) neither turns the connection MCP-only
/// nor resets its grant, and one before the first was answered is no different.
#[tokio::test]
async fn a_second_initialize_is_refused_and_changes_nothing() {
    let mut host = RawHost::start();
    let receipt = host.ready(r#"["tools"]"#).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    for (id, caps) in [
        (5, "{}"),
        (6, r#"{"experimental":{"mcpl":{"version":"0.4"}}}"#),
        (7, r#"{"experimental":{"mcpl":{"version":"0.5"}}}"#),
    ] {
        let again = initialize(caps).replace(r#""id":0"#, &format!(r#""id":{id}"#));
        host.send(&again).await;
        let refused = host.recv().await;
        assert_eq!(refused["id"], id, "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
    }
    // Still MCPL, still granted `tools`.
    host.send(
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    )
    .await;
    let echo = host.recv().await;
    assert_eq!(echo["result"]["content"][0]["text"], "echo", "{echo}");
    host.send(r#"{"jsonrpc":"2.0","id":9,"method":"featureSets/update","params":{"effectiveCapabilities":[]}}"#)
        .await;
    let narrowed = host.recv().await;
    assert_eq!(narrowed["result"]["accepted"], true, "{narrowed}");
    host.send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#)
        .await;
    let refused = host.recv().await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
}

/// JSON-RPC 2.0 §4, §5: ids of every JSON type, through each way a request is read (the
/// `tools/call` read straight into its type, `ping` the session answers, a policy Request):
/// a string or an integer within 64 bits is echoed exactly as written; a fraction, `1e3`,
/// `1.0` (which §4 says SHOULD NOT be) are ids, echoed as the same value
/// (`jsonrpc::request_id_number`); `null`, a whole value past 64 bits, a boolean, an object
/// or an array is no id this server can echo, answered `-32600` with `id: null` (never run,
/// never silent).
#[tokio::test]
async fn s4_ids_of_every_json_type_are_echoed_exactly_or_refused_with_a_null_id() {
    let mut host = RawHost::start();
    let receipt = host.ready(r#"["tools"]"#).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let long = format!("\"{}\"", "i".repeat(1024));
    let echoed = [
        "-1",
        "0",
        "18446744073709551615",
        "-9223372036854775808",
        r#""""#,
        r#""\u0000""#,
        r#""a\"b""#,
        r#""é🙂""#,
        long.as_str(),
        "1.5",
        "1e3",
        "1.0",
    ];
    let refused = [
        "null",
        "1e30",
        "18446744073709551616",
        "true",
        r#"{"a":1}"#,
        "[1]",
    ];
    let bodies = [
        r#""method":"tools/call","params":{"name":"echo","arguments":{}}"#,
        r#""method":"ping""#,
        r#""method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}"#,
    ];
    for body in bodies {
        for id in echoed {
            host.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},{body}}}"#))
                .await;
            let answer = host.recv().await;
            let want: Value = serde_json::from_str(id).unwrap();
            assert_eq!(answer["id"], want, "{body} {id}: {answer}");
            assert!(answer.get("result").is_some(), "{body} {id}: {answer}");
        }
        for id in refused {
            host.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},{body}}}"#))
                .await;
            let answer = host.recv().await;
            assert_eq!(answer["id"], Value::Null, "{body} {id}: {answer}");
            assert_eq!(answer["error"]["code"], -32600, "{body} {id}: {answer}");
        }
    }
}

/// §6.3, §6.7: `enabled`/`disabled` entries naming no declared feature set select or
/// disable nothing and are reported, once per message for all of them (the first few named,
/// the rest counted). Before, one diagnostic per entry: a policy Request of 300 such entries
/// made 300, past what a `Session::diagnostics` subscriber holds (256), so one message could
/// push every other report out of the application's view.
#[tokio::test]
async fn s6_3_unknown_feature_set_entries_are_reported_once_per_message() {
    let mut host = RawHost::start();
    let names: Vec<String> = (0..300).map(|i| format!("ghost{i}")).collect();
    let receipt = host
        .ready(&format!(
            r#"["tools"],"enabled":{},"disabled":["ghost-d"]"#,
            serde_json::to_string(&names).unwrap()
        ))
        .await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"featureSets/update","params":{{"disabled":{}}}}}"#,
        serde_json::to_string(&names).unwrap()
    ))
    .await;
    host.sync(2).await;
    let mut d = Vec::new();
    while let Ok(x) = host.diagnostics.try_recv() {
        d.push(x);
    }
    let unknown: Vec<_> = d
        .iter()
        .filter(|d| d.code() == "unknown_feature_set")
        .collect();
    assert_eq!(unknown.len(), 2, "one per message: {}", d.len());
    let text = unknown[0].to_string();
    for needle in ["\"ghost0\"", "\"ghost7\"", "293 more", "§6.3"] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    assert!(!text.contains("ghost299"), "{text}");
}

/// §8.1, §8.5, §6.6, §6.7: a host's `state/rollback` naming a feature set reaches the
/// application's handler only when that set is declared with `rollback: true` and available
/// now: an undeclared one is `-32003`, one declaring no rollback `-32602`, one the host
/// disabled (a reduction the server respects at once) or that is otherwise unavailable
/// `-32001`. Before, every one was handed to the handler, which rolled back whatever it held.
/// A rollback naming no set is the handler's to judge.
#[tokio::test]
async fn s8_5_a_rollback_reaches_the_handler_only_for_an_available_rollback_set() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let notes: mcpl::policy::FeatureSetDeclaration = serde_json::from_value(
        json!({"description": "Notes", "uses": ["tools"], "rollback": true}),
    )
    .unwrap();
    let server = Server::builder("rollback", "1")
        .feature_set("plain", "No checkpoints", &[Capability::Tools])
        .feature_set_declaration("notes", notes)
        .on_rollback(move |_s, p| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                Ok(mcpl::protocol::state::RollbackResult::rolled_back(
                    p.checkpoint,
                ))
            }
        })
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let receipt = host.ready(r#"["tools"]"#).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let rollback = |id: u64, set: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"state/rollback","params":{{"featureSet":"{set}","checkpoint":"k"}}}}"#
        )
    };
    for (id, set, code) in [(2, "ghost", -32003), (3, "plain", -32602)] {
        host.send(&rollback(id, set)).await;
        let answer = host.recv().await;
        assert_eq!(answer["error"]["code"], code, "{set}: {answer}");
    }
    host.send(&rollback(4, "notes")).await;
    let answer = host.recv().await;
    assert_eq!(answer["result"]["success"], true, "{answer}");
    host.send(r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"disabled":["notes"]}}"#)
        .await;
    host.send(&rollback(5, "notes")).await;
    let answer = host.recv().await;
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// MCP's lifecycle, which MCPL keeps intact (§3.1): a server answers `initialize` with the
/// `protocolVersion` asked for when it speaks it, otherwise with one it does speak (the
/// newest). A host asking for a version this server does not know (older, newer, or no date
/// at all) is not told the server speaks it.
#[tokio::test]
async fn an_unknown_protocol_version_is_answered_with_one_the_server_speaks() {
    use mcpl::protocol::handshake::{MCP_PROTOCOL_VERSION, SUPPORTED_MCP_PROTOCOL_VERSIONS};
    let asked = ["1999-01-01", "2099-12-31", "", "latest"];
    for version in asked.iter().chain(SUPPORTED_MCP_PROTOCOL_VERSIONS) {
        let mut host = RawHost::start();
        host.send(&format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#
        ))
        .await;
        let init = host.recv().await;
        let answered = init["result"]["protocolVersion"].as_str().unwrap_or("");
        let expected = if SUPPORTED_MCP_PROTOCOL_VERSIONS.contains(version) {
            *version
        } else {
            MCP_PROTOCOL_VERSION
        };
        assert_eq!(answered, expected, "asked {version:?}: {init}");
    }
}

/// JSON-RPC ids are unique among requests in flight: a request reusing the id of one the
/// server still works on is answered `-32600` and not run, whichever method it names
/// (a `ping`, the policy Request, `tools/list`), as a `tools/call` is; its answer would
/// otherwise read as the answer to both. The policy Request among them, unread, is a grant
/// of nothing (§6.7, F6: `ServerState::handle_policy_unread`). The one in flight is still
/// answered.
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_is_refused_whatever_its_method() {
    let mut host = RawHost::start();
    host.ready(r#"["tools"]"#).await;
    host.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    for reuse in [
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"featureSets/update","params":{"effectiveCapabilities":[]}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}}"#,
    ] {
        host.send(reuse).await;
        let answer = host.recv().await;
        assert_eq!(answer["error"]["code"], json!(-32600), "{reuse}: {answer}");
        assert_eq!(answer["id"], json!(5), "{answer}");
    }
    // The policy Request reusing the id was not read, so it is a grant of nothing (§6.7:
    // it may have been a reduction; fail closed, as one with unreadable params is, F6):
    // `tools` is no longer granted. (Before, the wider grant stayed in force.)
    host.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo"}}"#)
        .await;
    let echo = host.recv().await;
    assert_eq!(echo["error"]["code"], -32002, "{echo}");
    assert_eq!(echo["error"]["data"]["capability"], "tools", "{echo}");
    // The request in flight is still the host's to cancel, and is answered once.
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#)
        .await;
    let cancelled = host.recv().await;
    assert_eq!(cancelled["error"]["code"], json!(-32800), "{cancelled}");
}

/// §14.3, §14.6: a host → server channel method naming a channel the server never
/// registered nor opened reaches no handler: a Request is answered `-32023` naming the
/// channel, a Notification is reported (`unknown_channel`). Once the server registered the
/// channel and the host accepted it, the same methods reach the handler.
#[tokio::test]
async fn s14_6_a_channel_the_server_never_registered_reaches_no_handler() {
    let (mut host, seen) = publishing_host().await;
    let publish = |id: Option<u64>, channel: &str| {
        let id = id.map_or(String::new(), |i| format!(r#""id":{i},"#));
        format!(
            r#"{{"jsonrpc":"2.0",{id}"method":"channels/publish","params":{{"channelId":"{channel}","content":[{{"type":"text","text":"hi"}}]}}}}"#
        )
    };
    host.send(&publish(Some(2), "ghost")).await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "{r}");
    assert_eq!(r["error"]["data"]["channelId"], "ghost", "{r}");
    host.send(&publish(None, "ghost")).await;
    host.sync(3).await;
    assert_eq!(host.codes(), ["unknown_channel"]);
    assert!(seen.lock().unwrap().is_empty());

    let session = host._session.clone();
    let c = mcpl::protocol::channels::ChannelDescriptor::new("c", "chat");
    let register = tokio::spawn(async move { session.channels_register(vec![c]).await });
    let req = host.recv().await;
    assert_eq!(req["method"], "channels/register", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"],
                        "result": {"results": [{"id": "c", "accepted": true}]}});
    host.send(&answer.to_string()).await;
    register.await.expect("joined").expect("registered");
    host.send(&publish(Some(4), "c")).await;
    let r = host.recv().await;
    assert_eq!(r["result"]["delivered"], true, "{r}");
    host.send(&publish(None, "c")).await;
    host.sync(5).await;
    assert_eq!(host.codes(), Vec::<&str>::new());
    assert_eq!(*seen.lock().unwrap(), ["c", "c"]);
}

/// §6.7: a server MUST respect a reduction at once, also while every handler slot is taken.
/// With `max_in_flight_requests` (here 2) requests in flight, the peer answered any further
/// request busy (`-32000`) before the session saw it, the policy Request included: the
/// narrowing was never applied. The policy Request, which the session answers itself,
/// now passes that bound; other requests are still answered busy.
#[tokio::test]
async fn s6_7_a_reduction_past_the_in_flight_bound_is_applied() {
    let peer = mcpl::peer::PeerConfig {
        max_in_flight_requests: 2,
        ..mcpl::peer::PeerConfig::default()
    };
    let server = Server::builder("busy", "1")
        .feature_set("work", "Work", &[Capability::Tools])
        .tool(
            "wait",
            "Never finishes by itself",
            json!({"type": "object"}),
            |_s: Session, _p| std::future::pending(),
        )
        .peer_config(peer)
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let granted = host.ready(r#"["tools"]"#).await;
    assert!(granted["result"].is_object(), "{granted}");
    for id in [10, 11] {
        host.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wait"}}}}"#
        ))
        .await;
    }
    // Both slots are taken: a third call is busy, as before.
    host.send(r#"{"jsonrpc":"2.0","id":12,"method":"tools/list"}"#)
        .await;
    let busy = host.recv().await;
    assert_eq!(busy["id"], json!(12), "{busy}");
    assert_eq!(busy["error"]["code"], json!(-32000), "{busy}");
    // The reduction is taken and answered with its receipt.
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"featureSets/update","params":{"effectiveCapabilities":[]}}"#)
        .await;
    let receipt = host.recv().await;
    assert_eq!(receipt["id"], json!(2), "{receipt}");
    assert!(receipt["result"].is_object(), "{receipt}");
    // Applied: once a slot is free, a tools/call is refused for want of `tools` (§5.4).
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}"#)
        .await;
    let cancelled = host.recv().await;
    assert_eq!(cancelled["id"], json!(10), "{cancelled}");
    host.send(r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"wait"}}"#)
        .await;
    let refused = host.recv().await;
    assert_eq!(refused["id"], json!(13), "{refused}");
    assert_eq!(refused["error"]["code"], json!(-32002), "{refused}");
}

/// §14.5, fail closed: a hostile host answers the server's two channel changes out of order,
/// the later one first, refusing the update of channel `c` (which drops it at the host).
/// The refusal is in, so `c` reaches no handler at once (before, while its update was in
/// flight, as it was), though that answer is applied after the earlier change's; the
/// channel the earlier change proposes (`d`) reaches none until its acceptance is in. It
/// did: a change in flight counted as it proposed, so `c` stayed reachable until the
/// earlier answer arrived, and `d` was reachable before any answer.
#[tokio::test]
async fn s14_5_channel_answers_out_of_order_fail_closed() {
    use mcpl::protocol::channels::{ChangedParams, ChannelDescriptor};
    let (mut host, seen) = publishing_host().await;
    let publish = |id: u64, channel: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"channels/publish","params":{{"channelId":"{channel}","content":[{{"type":"text","text":"hi"}}]}}}}"#
        )
    };
    let answer = |id: &Value, channel: &str, accepted: bool| {
        json!({"jsonrpc": "2.0", "id": id,
               "result": {"results": [{"id": channel, "accepted": accepted}]}})
        .to_string()
    };
    let session = host._session.clone();
    let c = ChannelDescriptor::new("c", "chat");
    let registered = tokio::spawn(async move { session.channels_register(vec![c]).await });
    let req = host.recv().await;
    host.send(&answer(&req["id"], "c", true)).await;
    registered.await.expect("joined").expect("registered");

    let session = host._session.clone();
    let d = ChannelDescriptor::new("d", "chat");
    let first = tokio::spawn(async move { session.channels_register(vec![d]).await });
    let first_req = host.recv().await;
    assert_eq!(first_req["method"], "channels/register", "{first_req}");
    let session = host._session.clone();
    let change = ChangedParams {
        updated: Some(vec![
            ChannelDescriptor::new("c", "chat").with_label("renamed")
        ]),
        ..Default::default()
    };
    let second = tokio::spawn(async move { session.channels_changed(change).await });
    let second_req = host.recv().await;
    assert_eq!(second_req["method"], "channels/changed", "{second_req}");
    host.send(&publish(10, "d")).await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "d before any answer: {r}");
    host.send(&publish(11, "c")).await;
    let r = host.recv().await;
    assert_eq!(r["result"]["delivered"], true, "c as it was: {r}");
    // The later change's answer first: `c`'s update refused.
    host.send(&answer(&second_req["id"], "c", false)).await;
    host.send(&publish(12, "c")).await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "c refused: {r}");
    host.send(&answer(&first_req["id"], "d", true)).await;
    first.await.expect("joined").expect("answered");
    second.await.expect("joined").expect("answered");
    for (n, channel, known) in [(13, "d", true), (14, "c", false)] {
        host.send(&publish(n, channel)).await;
        let r = host.recv().await;
        match known {
            true => assert_eq!(r["result"]["delivered"], true, "{channel}: {r}"),
            false => assert_eq!(r["error"]["code"], -32023, "{channel}: {r}"),
        }
    }
    assert_eq!(*seen.lock().unwrap(), ["c", "d"]);
    let ids: Vec<String> = host._session.channels().into_iter().map(|d| d.id).collect();
    assert_eq!(ids, ["d"]);
}

/// §5.4, §6.7, §14.3 on the wire, fail closed: the server answers the host's `channels/open`
/// (`chat:9`), then reads a policy Request revoking `channels.lifecycle`. The host narrowed
/// before it wrote that Request and may have read the answer only after, refusing it
/// (judged at its receipt); nothing the server read says it read it before. So the server
/// no longer holds chat:9: the host's publish on it is answered `-32023` and reaches no
/// handler, and the drop is reported (`opened_channel_dropped`). A host that published on
/// the channel before it narrowed showed it held it: that channel stays served.
#[tokio::test]
async fn s6_7_an_open_answer_crossing_a_lifecycle_revocation_is_not_held() {
    let opening_host = || async {
        let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let log = seen.clone();
        let server = Server::builder("channels", "1")
            .feature_set(
                "chat",
                "Chat",
                &[Capability::ChannelsPublish, Capability::ChannelsLifecycle],
            )
            .on_channels_open(|_s, p| async move {
                let c = mcpl::protocol::channels::ChannelDescriptor::new("chat:9", &p.kind);
                Ok(mcpl::protocol::channels::OpenResult::new(c))
            })
            .on_channels_publish(move |_s, p| {
                log.lock().unwrap().push(p.channel_id);
                async { Ok(mcpl::protocol::channels::PublishResult::delivered(None)) }
            })
            .build()
            .expect("server builds");
        let mut host = RawHost::serving(server);
        let receipt = host
            .ready(r#"["channels.publish","channels.lifecycle"]"#)
            .await;
        assert_eq!(receipt["result"]["accepted"], true);
        host.send(r#"{"jsonrpc":"2.0","id":2,"method":"channels/open","params":{"type":"chat"}}"#)
            .await;
        let opened = host.recv().await;
        assert_eq!(opened["result"]["channel"]["id"], "chat:9", "{opened}");
        (host, seen)
    };
    let publish = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"channels/publish","params":{{"channelId":"chat:9","content":[{{"type":"text","text":"hi"}}]}}}}"#
        )
    };
    let narrow = r#"{"jsonrpc":"2.0","id":3,"method":"featureSets/update","params":{"effectiveCapabilities":["channels.publish"]}}"#;

    let (mut host, seen) = opening_host().await;
    host.send(narrow).await;
    let receipt = host.recv().await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    host.send(&publish(4)).await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "{r}");
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(host.codes(), ["opened_channel_dropped"]);

    let (mut host, seen) = opening_host().await;
    host.send(&publish(4)).await;
    assert_eq!(host.recv().await["result"]["delivered"], true);
    host.send(narrow).await;
    assert_eq!(host.recv().await["result"]["accepted"], true);
    host.send(&publish(5)).await;
    let r = host.recv().await;
    assert_eq!(r["result"]["delivered"], true, "{r}");
    assert_eq!(*seen.lock().unwrap(), ["chat:9", "chat:9"]);
    assert_eq!(host.codes(), Vec::<&str>::new());
}

/// §5.1, §5.2 (the spec gives no version negotiation; the reading is `handshake::host_mcpl`'s):
/// the host's `experimental.mcpl.version` as each form is served. `"0.5"` (what §5.1, §5.2
/// and the TypeScript library write) is MCPL 0.5; `"0.5.0"` and `"0.5.0-draft"` name the same
/// document (its own header says 0.5.0-draft) and are served as MCPL 0.5 too, reported as a
/// notice (`host_mcpl_version_alias`); any other version (a patch, another pre-release, a
/// higher minor, a number) is another protocol: served as a plain MCP host and reported
/// (`host_mcpl_version`). Found by the server hunt: `"0.5.0"` and `"0.5.0-draft"` were served
/// as plain MCP.
#[tokio::test]
async fn s5_2_each_form_of_the_mcpl_version_is_served_as_read() {
    for (version, mcpl, code) in [
        (r#""0.5""#, true, None),
        (r#""0.5.0""#, true, Some("host_mcpl_version_alias")),
        (r#""0.5.0-draft""#, true, Some("host_mcpl_version_alias")),
        (r#""0.5.1""#, false, Some("host_mcpl_version")),
        (r#""0.5.0-rc.1""#, false, Some("host_mcpl_version")),
        (r#""0.6""#, false, Some("host_mcpl_version")),
        (r#""0.6.0""#, false, Some("host_mcpl_version")),
        (r#""1.0""#, false, Some("host_mcpl_version")),
        (r#""0.4""#, false, Some("host_mcpl_version")),
        (r#"" 0.5""#, false, Some("host_mcpl_version")),
        (r#""0.50""#, false, Some("host_mcpl_version")),
        ("0.5", false, Some("host_mcpl_version")),
    ] {
        let mut host = RawHost::start();
        host.send(&initialize(&format!(
            r#"{{"experimental":{{"mcpl":{{"version":{version}}}}}}}"#
        )))
        .await;
        let init = host.recv().await;
        assert!(init["result"].is_object(), "{version}: {init}");
        host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        host.send(r#"{"jsonrpc":"2.0","id":1,"method":"featureSets/update","params":{"effectiveCapabilities":["tools"]}}"#)
            .await;
        let policy = host.recv().await;
        assert_eq!(
            policy["result"]["accepted"] == json!(true),
            mcpl,
            "{version}: {policy}"
        );
        if !mcpl {
            assert_eq!(policy["error"]["code"], -32601, "{version}: {policy}");
        }
        host.sync(2).await;
        let codes = host.codes();
        assert_eq!(codes, code.into_iter().collect::<Vec<_>>(), "{version}");
    }
}

/// §14.3 on the wire: an `on_channels_open` handler answering a channel of another type than
/// the host asked for is the author's mistake, told (`open_answer_refused`, naming the
/// host's `type_mismatch`), not absorbed; the answer still goes to the host as written, and
/// the channel is not held (the host's publish on it is `-32023`).
#[tokio::test]
async fn s14_3_an_open_handler_answering_another_type_is_reported() {
    let server = Server::builder("channels", "1")
        .feature_set(
            "chat",
            "Chat",
            &[Capability::ChannelsPublish, Capability::ChannelsLifecycle],
        )
        .on_channels_open(|_s, _p| async {
            let c = mcpl::protocol::channels::ChannelDescriptor::new("d:1", "discord");
            Ok(mcpl::protocol::channels::OpenResult::new(c))
        })
        .on_channels_publish(|_s, _p| async {
            Ok(mcpl::protocol::channels::PublishResult::delivered(None))
        })
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let receipt = host
        .ready(r#"["channels.publish","channels.lifecycle"]"#)
        .await;
    assert_eq!(receipt["result"]["accepted"], true);
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"channels/open","params":{"type":"chat"}}"#)
        .await;
    let opened = host.recv().await;
    assert_eq!(opened["result"]["channel"]["type"], "discord", "{opened}");
    host.send(r#"{"jsonrpc":"2.0","id":3,"method":"channels/publish","params":{"channelId":"d:1","content":[{"type":"text","text":"hi"}]}}"#)
        .await;
    assert_eq!(host.recv().await["error"]["code"], -32023);
    let mut told = Vec::new();
    while let Ok(d) = host.diagnostics.try_recv() {
        told.push((d.code(), d.is_author_mistake(), d.detail()));
    }
    let [(code, true, detail)] = &told[..] else {
        panic!("{told:?}");
    };
    assert_eq!(*code, "open_answer_refused");
    assert!(detail.contains("type_mismatch"), "{detail}");
}

/// §14.5 and MCP's cancellation on the wire, fail closed: the host cancels its
/// `channels/close` (it dropped the channel when it gave the close up); the server answers
/// it `-32800`, and no longer serves the channel though its handler never finished: the
/// host's publish on it is `-32023`.
#[tokio::test]
async fn s14_5_a_cancelled_close_ends_the_channel() {
    let server = Server::builder("channels", "1")
        .feature_set(
            "chat",
            "Chat",
            &[Capability::ChannelsPublish, Capability::ChannelsLifecycle],
        )
        .on_channels_open(|_s, p| async move {
            let c = mcpl::protocol::channels::ChannelDescriptor::new("chat:9", &p.kind);
            Ok(mcpl::protocol::channels::OpenResult::new(c))
        })
        .on_channels_close(|_s, _p| std::future::pending())
        .on_channels_publish(|_s, _p| async {
            Ok(mcpl::protocol::channels::PublishResult::delivered(None))
        })
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let receipt = host
        .ready(r#"["channels.publish","channels.lifecycle"]"#)
        .await;
    assert_eq!(receipt["result"]["accepted"], true);
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"channels/open","params":{"type":"chat"}}"#)
        .await;
    assert_eq!(host.recv().await["result"]["channel"]["id"], "chat:9");
    let publish = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"channels/publish","params":{{"channelId":"chat:9","content":[{{"type":"text","text":"hi"}}]}}}}"#
        )
    };
    host.send(&publish(3)).await;
    assert_eq!(host.recv().await["result"]["delivered"], true);
    host.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"channels/close","params":{"channelId":"chat:9"}}"#,
    )
    .await;
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"given up"}}"#)
        .await;
    let r = host.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(4), json!(-32800)),
        "{r}"
    );
    host.send(&publish(5)).await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "{r}");
}

/// §14.5 and MCP's cancellation on the wire, fail closed: the host cancels its
/// `channels/open` after the server answered it (the cancel crossed the answer: the host gave
/// the open up unread, and never applies the late answer). The server no longer holds the
/// channel (the host's publish on it is `-32023`) and reports it
/// (`opened_channel_dropped`).
#[tokio::test]
async fn s14_5_an_open_cancelled_across_its_answer_is_not_held() {
    let server = Server::builder("channels", "1")
        .feature_set(
            "chat",
            "Chat",
            &[Capability::ChannelsPublish, Capability::ChannelsLifecycle],
        )
        .on_channels_open(|_s, p| async move {
            let c = mcpl::protocol::channels::ChannelDescriptor::new("chat:9", &p.kind);
            Ok(mcpl::protocol::channels::OpenResult::new(c))
        })
        .on_channels_publish(|_s, _p| async {
            Ok(mcpl::protocol::channels::PublishResult::delivered(None))
        })
        .build()
        .expect("server builds");
    let mut host = RawHost::serving(server);
    let receipt = host
        .ready(r#"["channels.publish","channels.lifecycle"]"#)
        .await;
    assert_eq!(receipt["result"]["accepted"], true);
    host.send(r#"{"jsonrpc":"2.0","id":2,"method":"channels/open","params":{"type":"chat"}}"#)
        .await;
    assert_eq!(host.recv().await["result"]["channel"]["id"], "chat:9");
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"timed out"}}"#)
        .await;
    host.send(r#"{"jsonrpc":"2.0","id":3,"method":"channels/publish","params":{"channelId":"chat:9","content":[{"type":"text","text":"hi"}]}}"#)
        .await;
    let r = host.recv().await;
    assert_eq!(r["error"]["code"], -32023, "{r}");
    assert!(host.codes().contains(&"opened_channel_dropped"));
}
