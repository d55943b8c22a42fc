//! `mcpl check-host` spawned as a host's server over stdio: the library host passes every
//! check it can be judged on, and a host written to break the rules fails exactly those
//! checks. The report is read from `--report FILE` (stdout carries the protocol).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use mcpl::host::{before_inference, HostConfig, HostEvent, HostSession};
use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use mcpl::transport::child;
use serde_json::{json, Value};

use common::ids_with;

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Spawns `mcpl check-host` writing its JSON report to `report`, listening `watch` seconds
/// after its probes (a host that ends the connection ends the run sooner).
fn spawn_checker(
    report: &PathBuf,
    watch: &str,
) -> (mcpl::transport::Transport, child::ChildControl) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args([
        "check-host",
        "--json",
        "--timeout",
        "5",
        "--watch",
        watch,
        "--report",
    ])
    .arg(report);
    child::spawn(&mut cmd).unwrap()
}

/// Returns once the checker's last probe (a push the grant allows) has been admitted and
/// answered: the host's answer is written before a later ping's, so once the checker has
/// answered that ping it has read the push's answer too.
async fn after_the_last_probe(session: &HostSession, streams: &mut mcpl::host::HostStreams) {
    loop {
        if let HostEvent::Push { .. } = streams.events.recv().await.expect("the push probe") {
            break;
        }
    }
    session.peer().request_raw("ping", None).await.unwrap();
}

async fn finished_report(ctl: child::ChildControl, report: &PathBuf) -> (i32, Value) {
    let status = ctl.wait().await.unwrap();
    let text = std::fs::read_to_string(report).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status.code().unwrap(), doc)
}

/// The library's `HostSession` against the checker: nothing fails; a turn's hook shows the
/// user message redacted (observe is not granted).
#[tokio::test]
async fn the_library_host_passes_every_check() {
    let report = report_path("library.json");
    let (transport, ctl) = spawn_checker(&report, "60");
    let config = HostConfig {
        policy: vec![
            "pushEvents".into(),
            "channels.*".into(),
            "contextHooks.beforeInference.inject.*".into(),
        ],
        ..HostConfig::default()
    };
    let (session, mut streams) = HostSession::connect(transport, config).await.unwrap();
    after_the_last_probe(&session, &mut streams).await;
    let turn = json!({ "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                       "userMessage": "must not reach a server without observe" });
    before_inference(&[&session], &turn).await;
    session.close();
    let (code, doc) = finished_report(ctl, &report).await;
    assert_eq!(ids_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    assert_eq!(ids_with(&doc, "warn"), BTreeSet::new(), "{doc:#}");
    let passed = ids_with(&doc, "pass");
    for id in [
        "host.initialize-advertises-mcpl",
        "host.policy-is-request",
        "host.grant-within-advertisement",
        "host.grant-not-contradictory",
        "host.refuses-before-ready",
        "host.rejects-with-error",
        "host.push-follows-grant",
        "host.answers-every-request",
        "host.unknown-method-errors",
        "host.incoming-unregistered-refused",
        "host.register-itemized",
        "host.hooks-after-ready",
        "host.user-message-redacted",
        // §6.4 rule 2: check.hints is available (inject.* granted) but does not declare
        // pushEvents; §5.4: inferenceRequest is not granted, so refused -32002.
        "host.undeclared-use-refused",
        "host.inference-follows-grant",
        "host.grant-within-own-advertisement",
    ] {
        assert!(passed.contains(id), "{id}: {doc:#}");
    }
    assert!(
        ids_with(&doc, "skip").contains("host.inference-result-shape"),
        "{doc:#}"
    );
    assert_eq!(code, 0);
}

/// A host that breaks the rules the audit found broken (AUDIT-001 §2.1, §2.3, §2.6): the
/// grant as a Notification first, a grant of what was never advertised, a hook before the
/// receipt carrying the user message, and every server request answered with a result (so
/// a use its set never declared too, §6.4, and an inference with no content, §11.3).
#[tokio::test]
async fn a_careless_host_fails_exactly_what_it_breaks() {
    let report = report_path("careless.json");
    // Everything this host does comes before the receipt, so the run may end on its own.
    let (transport, ctl) = spawn_checker(&report, "0");
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    // Answers every request from the checker with a result, never an error.
    let answering = tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            if let IncomingMessage::Request(r) = m {
                let result = match r.method() {
                    "channels/incoming" => {
                        json!({ "results": [ { "messageId": "m1", "accepted": true } ] })
                    }
                    "push/event" => json!({ "accepted": false, "reason": "not today" }),
                    _ => json!({}),
                };
                let _ = r.respond(result).await;
            }
        }
    });
    host.request_raw(
        "initialize",
        Some(json!({ "protocolVersion": "2025-06-18",
                     "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                     "clientInfo": { "name": "careless", "version": "0" } })),
    )
    .await
    .unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let grant = json!({ "effectiveCapabilities": ["pushEvents", "inferenceRequest",
        "contextHooks.beforeInference.inject.beforeUser", "inferenceLifecycle"] });
    host.notify_raw("featureSets/update", Some(grant.clone()))
        .await
        .unwrap();
    let hook = json!({ "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                       "userMessage": "secret" });
    host.request_raw("context/beforeInference", Some(hook))
        .await
        .unwrap();
    host.request_raw("featureSets/update", Some(grant))
        .await
        .unwrap();
    // The task above answers the probes; the checker then ends the run (watch 0).
    let (code, doc) = finished_report(ctl, &report).await;
    answering.await.unwrap();
    drop(host);
    assert_eq!(
        ids_with(&doc, "fail"),
        [
            "host.policy-is-request",
            "host.grant-within-advertisement",
            "host.refuses-before-ready",
            "host.rejects-with-error",
            "host.unknown-method-errors",
            "host.incoming-unregistered-refused",
            "host.register-itemized",
            "host.incoming-follows-grant",
            "host.hooks-after-ready",
            "host.user-message-redacted",
            "host.undeclared-use-refused",
            "host.inference-result-shape",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<BTreeSet<_>>(),
        "{doc:#}"
    );
    // Declining a push it may receive is allowed (§9.3), so only warned; so is granting what
    // its own advertisement (version only) does not claim (§5.2, AUDIT-001 §4.2 item 10).
    assert_eq!(
        ids_with(&doc, "warn"),
        BTreeSet::from([
            "host.push-follows-grant".to_owned(),
            "host.grant-within-own-advertisement".to_owned()
        ]),
        "{doc:#}"
    );
    assert_eq!(code, 1);
}

/// `--list` prints the host catalogue; an unusable timeout is exit 2 with a report saying so.
#[test]
fn list_and_usage_errors() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 18, "{text}");
    assert!(text.contains("host.refuses-before-ready"), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout"));
}

/// `--tcp` waits for one host connection on the address it prints; the run is the same.
#[tokio::test]
async fn tcp_listener_checks_the_host_that_connects() {
    use tokio::io::AsyncBufReadExt;
    let report = report_path("tcp.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([
            "check-host",
            "--json",
            "--tcp",
            "127.0.0.1:0",
            "--watch",
            "60",
            "--report",
        ])
        .arg(&report)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let addr = line
        .rsplit("tcp://")
        .next()
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let transport = mcpl::transport::tcp::connect(addr.as_str()).await.unwrap();
    // This host grants inference and answers it as §11.3 shows.
    let answer: mcpl::host::RequestHandler = std::sync::Arc::new(|_method, _params| {
        Box::pin(async {
            Ok(
                json!({ "content": "OK", "model": "test-model", "finishReason": "end_turn",
                       "usage": { "inputTokens": 9, "outputTokens": 1 } }),
            )
        })
    });
    let config = HostConfig {
        policy: vec!["pushEvents".into(), "inferenceRequest".into()],
        request_handler: Some(answer),
        ..HostConfig::default()
    };
    let (session, mut streams) = HostSession::connect(transport, config).await.unwrap();
    after_the_last_probe(&session, &mut streams).await;
    session.close();
    let status = child.wait().await.unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(ids_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    let passed = ids_with(&doc, "pass");
    for id in [
        "host.refuses-before-ready",
        "host.inference-follows-grant",
        "host.inference-result-shape",
    ] {
        assert!(passed.contains(id), "{id}: {doc:#}");
    }
    assert_eq!(status.code(), Some(0));
}

/// Plays a host by hand up to its policy Request, answering the checker's requests with
/// errors (as a strict host refuses a server that is not ready); returns the policy answer.
async fn raw_host_policy(
    transport: mcpl::transport::Transport,
    policy: Value,
) -> (Peer, Result<Value, i64>) {
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            if let IncomingMessage::Request(r) = m {
                let _ = r
                    .respond_error(mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents"))
                    .await;
            }
        }
    });
    host.request_raw(
        "initialize",
        Some(json!({ "protocolVersion": "2025-06-18",
                     "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                     "clientInfo": { "name": "by-hand", "version": "0" } })),
    )
    .await
    .unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let answer = host
        .request_raw("featureSets/update", Some(policy))
        .await
        .map_err(|e| e.remote().map_or(0, |e| e.code));
    (host, answer)
}

/// §5.4: a policy naming a path both granted and denied is rejected as malformed (-32602),
/// and the server never becomes ready, so nothing after it is probed.
#[tokio::test]
async fn a_contradictory_policy_is_rejected_and_nothing_more_is_probed() {
    let report = report_path("contradictory.json");
    let (transport, ctl) = spawn_checker(&report, "0");
    let policy = json!({ "effectiveCapabilities": ["pushEvents"],
                         "deniedCapabilities": ["pushEvents"] });
    let (host, answer) = raw_host_policy(transport, policy).await;
    assert_eq!(answer, Err(-32602));
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    assert_eq!(
        ids_with(&doc, "fail"),
        BTreeSet::from(["host.grant-not-contradictory".to_owned()]),
        "{doc:#}"
    );
    assert!(
        ids_with(&doc, "skip").contains("host.push-follows-grant"),
        "{doc:#}"
    );
    assert_eq!(code, 1);
}

/// §5.4: `*` patterns are grants like any other (one segment each); one that reaches past
/// the advertisement is a warning, not a failure, and the probes follow what it grants.
#[tokio::test]
async fn pattern_grants_are_resolved_like_the_library_server_does() {
    let report = report_path("patterns.json");
    let (transport, ctl) = spawn_checker(&report, "0");
    let policy = json!({ "effectiveCapabilities": ["channels.*"] });
    let (host, answer) = raw_host_policy(transport, policy).await;
    assert_eq!(answer.unwrap()["accepted"], true);
    let (_, doc) = finished_report(ctl, &report).await;
    drop(host);
    assert!(
        ids_with(&doc, "warn").contains("host.grant-within-advertisement"),
        "{doc:#}"
    );
    // pushEvents is not granted, and this host refuses the push: as it should.
    assert!(
        ids_with(&doc, "pass").contains("host.push-follows-grant"),
        "{doc:#}"
    );
}

/// A host that connects and never initializes gets no verdicts but exit 2, saying why.
#[test]
fn a_host_that_never_initializes_is_exit_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--timeout", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no initialize"), "{err}");
}

/// §6.7: a grant change later in the session still goes by Request; one sent as a
/// Notification fails the check the initial Request passed.
#[tokio::test]
async fn a_later_grant_change_by_notification_fails() {
    let report = report_path("later-notification.json");
    let (transport, ctl) = spawn_checker(&report, "60");
    let (host, answer) = raw_host_policy(
        transport,
        json!({ "effectiveCapabilities": ["pushEvents"] }),
    )
    .await;
    assert_eq!(answer.unwrap()["accepted"], true);
    host.notify_raw(
        "featureSets/update",
        Some(json!({ "effectiveCapabilities": [] })),
    )
    .await
    .unwrap();
    // Answered after the Notification was read (the checker reads in order).
    host.request_raw("ping", None).await.unwrap();
    host.close();
    let (_, doc) = finished_report(ctl, &report).await;
    assert!(
        ids_with(&doc, "fail").contains("host.policy-is-request"),
        "{doc:#}"
    );
}
