//! §5.1, §5.2: one MCPL version rule for host and server (`handshake::mcpl_version`).
//! `"0.5"` and the document's full names of the same version (`"0.5.0"`, `"0.5.0-draft"`,
//! `handshake::MCPL_VERSION_ALIASES`) are MCPL 0.5; any other version (`"0.4"`, `"0.5.1"`,
//! `"0.6"`, a number) is another protocol. The spec defines no negotiation, so the host
//! fails closed: a server advertising another version is served as plain MCP (§3.3) — no
//! MCPL method sent (not even the policy Request), none of its MCPL methods admitted (refused
//! as a server advertising no MCPL has them refused) — and
//! the version is reported. Before, the host reported `unsupported_version` and went on in
//! MCPL mode. The server is raw lines, so what is checked is exactly the wire.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostSession, HostStreams, McpOnlyReason, Mode};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

fn cfg() -> HostConfig {
    HostConfig {
        policy: vec!["*".into(), "*.*".into(), "*.*.*".into()],
        ..HostConfig::default()
    }
}

fn manifest(version: Value) -> Value {
    json!({ "version": version, "pushEvents": true, "channels": { "register": true },
            "featureSets": { "alerts": { "description": "Alerts", "uses": ["pushEvents"] } } })
}

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

/// Answers `initialize` with a manifest of `version` and returns the first line the host
/// sends after `notifications/initialized`, with the pending connect.
async fn start(
    version: Value,
) -> (
    tokio::task::JoinHandle<Result<(HostSession, HostStreams), mcpl::host::HostError>>,
    Raw,
    Value,
) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest(version)))}))
        .await;
    let mut next = recv(&mut raw).await;
    if next["method"] == "notifications/initialized" {
        next = recv(&mut raw).await;
    }
    (connect, raw, next)
}

#[tokio::test]
async fn s5_1_every_spelling_of_0_5_is_served_as_mcpl() {
    for v in ["0.5", "0.5.0", "0.5.0-draft"] {
        let (connect, mut raw, policy) = start(json!(v)).await;
        assert_eq!(policy["method"], "featureSets/update", "{v}: {policy}");
        raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"],
                             "result": {"accepted": true}}))
            .await;
        let (s, _streams) = connect.await.unwrap().expect("the host connects");
        assert_eq!(s.mode(), Mode::Mcpl, "{v}");
    }
}

#[tokio::test]
async fn s5_1_a_server_of_another_mcpl_version_is_served_as_plain_mcp() {
    for v in [json!("0.4"), json!("0.5.1"), json!("0.6"), json!(5)] {
        // No `featureSets/update`: the host is up with no MCPL method sent, and the first
        // line after `notifications/initialized` is the application's ping.
        let (peer, incoming, mut raw) = raw_peer(Default::default());
        let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
        let init = recv(&mut raw).await;
        raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                             "result": init_result(Some(manifest(v.clone())))}))
            .await;
        let (s, mut streams) = connect.await.unwrap().expect("the host connects");
        assert_eq!(
            s.mode(),
            Mode::McpOnly(McpOnlyReason::OtherVersion(v.to_string())),
            "{v}"
        );
        assert!(s.is_ready(), "{v}");
        let line = recv(&mut raw).await;
        assert_eq!(line["method"], "notifications/initialized", "{v}: {line}");
        let s2 = s.clone();
        let ping = tokio::spawn(async move { s2.request_raw("ping", json!({})).await });
        let line = recv(&mut raw).await;
        assert_eq!(
            line["method"], "ping",
            "{v}: an MCPL method went out: {line}"
        );
        raw.send_json(json!({"jsonrpc": "2.0", "id": line["id"], "result": {}}))
            .await;
        ping.await.unwrap().unwrap();
        // The application's MCPL sends are refused locally.
        assert!(
            s.notify_raw("channels/publish", json!({"channelId": "c", "content": []}))
                .await
                .is_err(),
            "{v}"
        );
        // None of the server's MCPL methods is admitted: `push/event` is refused, as from a
        // server that advertises no MCPL.
        raw.send_json(json!({"jsonrpc": "2.0", "id": 77, "method": "push/event",
            "params": { "featureSet": "alerts", "eventId": "e1",
                        "timestamp": "2026-01-23T10:30:00.123Z",
                        "payload": { "content": [{ "type": "text", "text": "hi" }] } }}))
            .await;
        let answer = recv(&mut raw).await;
        assert_eq!(answer["id"], 77, "{v}: {answer}");
        assert!(answer.get("result").is_none(), "{v}: {answer}");
        assert!(answer["error"]["code"].is_i64(), "{v}: {answer}");
        // The version is reported.
        let mut reported = false;
        while let Ok(d) = streams.diagnostics.try_recv() {
            reported |= matches!(&d, HostDiagnostic::ManifestFinding { code, .. }
                                 if *code == "unsupported_version");
        }
        assert!(reported, "{v}");
    }
}

/// §5.1, App. B.3: the manifest's schema requires `version`. A manifest without one does not
/// say it is MCPL 0.5, so the host fails closed as for another version: served as plain MCP
/// (`McpOnlyReason::Unversioned`), no policy Request, its MCPL methods refused, and the
/// `missing_version` finding reported. Before, a missing `version` was read as 0.5
/// (`HostMcpl::is_v05`) and the server was spoken to as MCPL.
#[tokio::test]
async fn s5_1_a_manifest_without_version_is_served_as_plain_mcp() {
    let mut m = manifest(json!("0.5"));
    m.as_object_mut().unwrap().remove("version");
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(m))}))
        .await;
    let (s, mut streams) = connect.await.unwrap().expect("the host connects");
    assert_eq!(s.mode(), Mode::McpOnly(McpOnlyReason::Unversioned));
    assert!(s.is_ready());
    assert_eq!(recv(&mut raw).await["method"], "notifications/initialized");
    // No policy Request went out: the next line is the answer to a refused `push/event`.
    raw.send_json(json!({"jsonrpc": "2.0", "id": 78, "method": "push/event",
        "params": { "featureSet": "alerts", "eventId": "e1",
                    "timestamp": "2026-01-23T10:30:00.123Z",
                    "payload": { "content": [{ "type": "text", "text": "hi" }] } }}))
        .await;
    let answer = recv(&mut raw).await;
    assert_eq!(answer["id"], 78, "a policy Request went out: {answer}");
    assert!(answer["error"]["code"].is_i64(), "{answer}");
    let mut reported = false;
    while let Ok(d) = streams.diagnostics.try_recv() {
        reported |= matches!(&d, HostDiagnostic::ManifestFinding { code, .. }
                             if *code == "missing_version");
    }
    assert!(reported);
}

/// §5.1, §17.5 step 1 over the wire: a manifest fetched on a live MCPL 0.5 connection that
/// names another version only narrows. Its removal (`channels.register`) is applied and told
/// by Request; its addition (`inferenceRequest`) is not advertised, so a policy change the
/// server accepts does not grant it. Before, the fetched manifest was adopted whole and the
/// change granted `inferenceRequest` on its word.
#[tokio::test]
async fn s17_5_a_fetched_manifest_of_another_version_only_narrows() {
    let mut config = cfg();
    config.policy = vec!["pushEvents".into(), "channels.register".into()];
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, config));
    let init = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest(json!("0.5"))))}))
        .await;
    assert_eq!(recv(&mut raw).await["method"], "notifications/initialized");
    let policy = recv(&mut raw).await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, mut streams) = connect.await.unwrap().expect("the host connects");
    let register = mcpl::capability::Capability::ChannelsRegister;
    let inference = mcpl::capability::Capability::InferenceRequest;
    assert!(s.grant().allows(register));

    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest", "{fetch}");
    let fetched = json!({ "version": "0.6", "pushEvents": true, "inferenceRequest": true,
        "featureSets": { "alerts": { "description": "Alerts", "uses": ["pushEvents"] },
                         "assist": { "description": "Assist", "uses": ["inferenceRequest"] } } });
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": fetched}))
        .await;
    // The removal is told by Request (§6.7).
    let told = recv(&mut raw).await;
    assert_eq!(told["method"], "featureSets/update", "{told}");
    assert!(!told["params"]["effectiveCapabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("channels.register")));
    raw.send_json(json!({"jsonrpc": "2.0", "id": told["id"], "result": {"accepted": true}}))
        .await;
    refresh.await.unwrap().expect("reviewed");
    assert!(!s.grant().allows(register));

    let s2 = s.clone();
    let widen = tokio::spawn(async move {
        s2.set_policy(vec!["pushEvents".into(), "inferenceRequest".into()])
            .await
    });
    let asked = recv(&mut raw).await;
    assert_eq!(asked["method"], "featureSets/update", "{asked}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"accepted": true}}))
        .await;
    widen.await.unwrap().expect("a policy change");
    assert!(
        !s.grant().allows(inference),
        "granted on the word of a manifest of another version"
    );
    let mut reported = false;
    while let Ok(d) = streams.diagnostics.try_recv() {
        reported |= matches!(&d, HostDiagnostic::ManifestFinding { code, .. }
                             if *code == "unsupported_version");
    }
    assert!(reported);
}

/// §5.1, §3.3: a server whose `experimental.mcpl` is no object (`null`, `true`, a number,
/// a string, an array) advertises no manifest the host can read. It is still a valid MCP
/// server, so the host fails closed on MCPL only: served as plain MCP
/// (`McpOnlyReason::NotAnObject`, the value as JSON text), no policy Request, its MCPL
/// methods refused, and the `manifest_not_object` finding reported. Before, the connect failed
/// with `BadInitialize` and the MCP connection was lost with it.
#[tokio::test]
async fn s5_1_an_mcpl_member_that_is_no_object_is_served_as_plain_mcp() {
    for m in [json!(null), json!(true), json!(1), json!("0.5"), json!([])] {
        let (peer, incoming, mut raw) = raw_peer(Default::default());
        let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
        let init = recv(&mut raw).await;
        raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                             "result": init_result(Some(m.clone()))}))
            .await;
        let (s, mut streams) = connect
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{m}: the host refused a valid MCP server: {e}"));
        assert_eq!(
            s.mode(),
            Mode::McpOnly(McpOnlyReason::NotAnObject(m.to_string())),
            "{m}"
        );
        assert!(s.is_ready(), "{m}");
        assert!(s.grant().allows(mcpl::capability::Capability::Tools), "{m}");
        assert_eq!(recv(&mut raw).await["method"], "notifications/initialized");
        // No policy Request went out: the next line answers a refused `push/event`.
        raw.send_json(json!({"jsonrpc": "2.0", "id": 79, "method": "push/event",
            "params": { "featureSet": "alerts", "eventId": "e1",
                        "timestamp": "2026-01-23T10:30:00.123Z",
                        "payload": { "content": [{ "type": "text", "text": "hi" }] } }}))
            .await;
        let answer = recv(&mut raw).await;
        assert_eq!(answer["id"], 79, "{m}: a policy Request went out: {answer}");
        assert!(answer["error"]["code"].is_i64(), "{m}: {answer}");
        let mut reported = false;
        while let Ok(d) = streams.diagnostics.try_recv() {
            reported |= matches!(&d, HostDiagnostic::ManifestFinding { code, .. }
                                 if *code == "manifest_not_object");
        }
        assert!(reported, "{m}");
    }
}

/// §5.1, §3.3: a server whose `capabilities.experimental` itself is no object (`5`, `true`,
/// a string, an array; MCP gives it as an object of experimental capabilities) advertises
/// no `experimental.mcpl`: still served as plain MCP (`McpOnlyReason::NotAdvertised`, its
/// MCP connection kept), and now the defect is reported (`experimental_not_object`, naming
/// the JSON type) rather than read as silence. `null` is read as absent (the reading of
/// `protocol::given`): not reported, as a server that leaves the member out is not.
#[tokio::test]
async fn s5_1_an_experimental_member_that_is_no_object_is_reported_and_served_as_plain_mcp() {
    for (experimental, reported) in [
        (json!(5), true),
        (json!(true), true),
        (json!("mcpl"), true),
        (json!([{"mcpl": {"version": "0.5"}}]), true),
        (json!(null), false),
    ] {
        let (peer, incoming, mut raw) = raw_peer(Default::default());
        let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
        let init = recv(&mut raw).await;
        let mut result = init_result(None);
        result["capabilities"]["experimental"] = experimental.clone();
        raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": result}))
            .await;
        let (s, mut streams) = connect
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{experimental}: the host refused an MCP server: {e}"));
        assert_eq!(
            s.mode(),
            Mode::McpOnly(McpOnlyReason::NotAdvertised),
            "{experimental}"
        );
        assert!(s.grant().allows(mcpl::capability::Capability::Tools));
        assert_eq!(recv(&mut raw).await["method"], "notifications/initialized");
        let found: Vec<(String, String)> =
            std::iter::from_fn(|| streams.diagnostics.try_recv().ok())
                .filter_map(|d| match d {
                    HostDiagnostic::ManifestFinding {
                        code: "experimental_not_object",
                        path,
                        message,
                        ..
                    } => Some((path, message)),
                    _ => None,
                })
                .collect();
        if reported {
            assert_eq!(found.len(), 1, "{experimental}: {found:?}");
            let (path, message) = &found[0];
            assert_eq!(path, "capabilities.experimental");
            let kind = match &experimental {
                Value::Number(_) => "number",
                Value::Bool(_) => "boolean",
                Value::String(_) => "string",
                _ => "array",
            };
            assert!(message.contains(kind), "{experimental}: {message}");
        } else {
            assert!(found.is_empty(), "{experimental}: {found:?}");
        }
    }
}

/// §17.4, §3.3: a server served as plain MCP has no manifest to fetch, so
/// `refresh_manifest` is refused with the reason the session records (`HostSession::mode`),
/// whatever it is. Before, every such refusal said `NotAdvertised`, also for a server that
/// advertised a manifest of another version or one that is no object.
#[tokio::test]
async fn s17_4_a_refresh_on_a_plain_mcp_server_names_the_recorded_reason() {
    for m in [manifest(json!("0.4")), json!(null)] {
        let (peer, incoming, mut raw) = raw_peer(Default::default());
        let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg()));
        let init = recv(&mut raw).await;
        raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                             "result": init_result(Some(m.clone()))}))
            .await;
        let (s, _streams) = connect.await.unwrap().expect("the host connects");
        let Mode::McpOnly(reason) = s.mode() else {
            panic!("{m}: served as MCPL");
        };
        assert_ne!(reason, McpOnlyReason::NotAdvertised, "{m}");
        match s.refresh_manifest().await {
            Err(mcpl::host::HostError::McpOnly(r)) => assert_eq!(r, reason, "{m}"),
            other => panic!("{m}: {other:?}"),
        }
    }
}
