//! `mcpl check-host` spawned as a host's server over stdio: the library host passes every
//! check it can be judged on, and a host written to break the rules fails exactly those
//! checks. The report is read from `--report FILE` (stdout carries the protocol).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
    spawn_checker_with(report, &["--timeout", "5", "--watch", watch])
}

/// [`spawn_checker`] with its own bounds (`--timeout`, `--watch`, …).
fn spawn_checker_with(
    report: &PathBuf,
    bounds: &[&str],
) -> (mcpl::transport::Transport, child::ChildControl) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args(["check-host", "--json"])
        .args(bounds)
        .arg("--report")
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

/// A tap on a host's own frames counting the `inference/request`s it read (`read`) and,
/// once it has written its answer to a `ping` read after the latest one, recording that
/// request's number in `released_up_to` (and waking `released`). An early inference the
/// host refuses before the receipt counts too, so a handler waits for the ping read after
/// its own request, not after an earlier one.
fn ping_overtakes_inference(
    released: Arc<tokio::sync::Notify>,
) -> (mcpl::peer::Tap, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use mcpl::peer::FrameDirection;
    let read = Arc::new(AtomicUsize::new(0));
    let released_up_to = Arc::new(AtomicUsize::new(0));
    let (count, up_to) = (read.clone(), released_up_to.clone());
    // The id of the ping read after the latest inference/request.
    let ping: Mutex<Option<Value>> = Mutex::new(None);
    let tap = mcpl::peer::Tap::new(move |ev| {
        let Ok(frame) = serde_json::from_str::<Value>(ev.text) else {
            return;
        };
        let mut ping = ping.lock().unwrap();
        match (ev.direction, frame["method"].as_str()) {
            (FrameDirection::Inbound, Some("inference/request")) => {
                count.fetch_add(1, Ordering::SeqCst);
                *ping = None;
            }
            (FrameDirection::Inbound, Some("ping"))
                if ping.is_none() && count.load(Ordering::SeqCst) > 0 =>
            {
                *ping = Some(frame["id"].clone())
            }
            (FrameDirection::Outbound, None)
                if ping.is_some() && ping.as_ref() == Some(&frame["id"]) =>
            {
                up_to.store(count.load(Ordering::SeqCst), Ordering::SeqCst);
                released.notify_waiters();
            }
            _ => {}
        }
    });
    (tap, read, released_up_to)
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
        // §14.2: the second descriptor under check:dup is refused, duplicate_descriptor.
        "host.register-duplicate-id",
        "host.hooks-after-ready",
        "host.user-message-redacted",
        // §6.4 rule 2: check.hints is available (inject.* granted) but does not declare
        // pushEvents; §5.4: inferenceRequest is not granted, so refused -32002.
        "host.undeclared-use-refused",
        "host.inference-follows-grant",
        "host.grant-within-own-advertisement",
        // §4: the junk line is skipped, the ping after it answered.
        "host.survives-junk-line",
        // §12: model/info refused -32002 (modelInfo is never advertised by the checker).
        "host.answers-follow-grant",
        // §7: scope/elevate is an unknown method (-32601).
        "host.removed-methods-refused",
        // §6.6: the inference/request it does not grant is refused -32002.
        "host.refusal-code",
        // §6.6, §14.6: that -32002 names inferenceRequest in data.capability.
        "host.refusal-data",
        // §6.4 rule 1: check.typo's uses holds "pushEvent", so the set is invalid_uses.
        "host.invalid-uses-refused",
        // §4: every frame it writes is JSON-RPC 2.0, each request under its own id.
        "host.frames-valid",
        "host.request-ids-unique",
        "host.in-flight-ids-unique",
        // MCP's lifecycle: notifications/initialized after initialize.
        "host.initialized-sent",
        // §8: it goes on after an initialize answer carrying members no spec defines.
        "host.unknown-fields-tolerated",
        // §5.2: its advertisement mirrors the server's shape.
        "host.advertisement-shape",
        // §17: it fetches each announcement before acting, keeps its grant after one
        // unparseable manifest, revokes what a fetched manifest removes (a partially invalid
        // one too) host-first with one reduction, and grants nothing an addition offers.
        "host.manifest-fetched-before-acting",
        "host.manifest-unparseable-keeps-previous",
        "host.manifest-removals-revoked",
        "host.manifest-partial-removals-applied",
        "host.manifest-additions-not-granted",
        "host.manifest-one-update-per-change",
        // §6.7: the narrowing it revoked is told by Request.
        "host.manifest-narrowing-requested",
        // §5.4: once that Request is answered, channels/incoming is refused -32002.
        "host.manifest-withdrawn-refused",
    ] {
        assert!(passed.contains(id), "{id}: {doc:#}");
    }
    // Nothing to judge: no inference ran, and every request was answered at once, so none
    // was outstanding for the paired ping to overtake (the TCP test below holds one).
    let skipped = ids_with(&doc, "skip");
    assert!(skipped.contains("host.inference-result-shape"), "{doc:#}");
    assert!(skipped.contains("host.requests-independent"), "{doc:#}");
    // It delivers nothing but the hook, and refuses the unregistered channel in its result.
    assert!(skipped.contains("host.deliveries-within-grant"), "{doc:#}");
    assert!(skipped.contains("host.unknown-channel-code"), "{doc:#}");
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
        "contextHooks.beforeInference.inject.beforeUser", "modelInfo"] });
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
        set(&[
            "host.policy-is-request",
            "host.grant-within-advertisement",
            "host.refuses-before-ready",
            "host.register-refused-before-ready",
            "host.inference-refused-before-ready",
            "host.rejects-with-error",
            "host.unknown-method-errors",
            "host.incoming-unregistered-refused",
            "host.register-itemized",
            // channels/changed answered `{}`: no per-descriptor refusal (§14.1, §14.5).
            "host.changed-itemized",
            "host.incoming-follows-grant",
            "host.hooks-after-ready",
            "host.user-message-redacted",
            "host.undeclared-use-refused",
            // A push under check.typo, whose uses is invalid (§6.4 rule 1), answered too.
            "host.invalid-uses-refused",
            "host.inference-result-shape",
            // model/info and channels/list answered with a result, neither granted (§12).
            "host.answers-follow-grant",
            // scope/elevate (removed, §7) answered with a result too.
            "host.removed-methods-refused",
        ]),
        "{doc:#}"
    );
    // Declining a push it may receive is allowed (§9.3), so only warned; so is granting what
    // its own advertisement (version only) does not claim (§5.2, AUDIT-001 §4.2 item 10).
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&[
            "host.push-follows-grant",
            "host.grant-within-own-advertisement",
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
    assert_eq!(text.lines().count(), 60, "{text}");
    assert!(text.contains("host.refuses-before-ready"), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout"));
}

/// A listener that cannot start is one error line, as `mcpl check` says an unreachable
/// server, not that line after 60 SKIP lines of checks that never ran; `--json` still
/// carries the whole report with its `error`.
#[test]
fn a_listener_that_cannot_start_is_one_error_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--tcp", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("cannot listen on tcp nope").count(), 1, "{err}");
    assert!(!err.contains("SKIP"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--tcp", "nope", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_str(err.lines().next().unwrap()).unwrap();
    assert_eq!(doc["summary"]["skip"], 60, "{doc}");
    assert!(
        doc["error"].as_str().unwrap().contains("cannot listen"),
        "{doc}"
    );
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
    // This host grants inference and answers it as §11.3 shows, but only once it has
    // answered a ping that came while the inference was outstanding (read off its own
    // frames), so the checker sees a later request answered before an earlier one.
    let released = Arc::new(tokio::sync::Notify::new());
    let (tap, read, released_up_to) = ping_overtakes_inference(released.clone());
    let answer: mcpl::host::RequestHandler = Arc::new(move |_method, _params| {
        let (released, up_to) = (released.clone(), released_up_to.clone());
        // This request was read (the tap saw it) before its handler ran.
        let mine = read.load(Ordering::SeqCst);
        Box::pin(async move {
            loop {
                let notified = released.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if up_to.load(Ordering::SeqCst) >= mine {
                    break;
                }
                notified.await;
            }
            Ok(
                json!({ "content": "OK", "model": "test-model", "finishReason": "end_turn",
                       "usage": { "inputTokens": 9, "outputTokens": 1 } }),
            )
        })
    });
    let config = HostConfig {
        policy: vec!["pushEvents".into(), "inferenceRequest".into()],
        request_handler: Some(answer),
        peer: PeerConfig {
            tap: Some(tap),
            ..PeerConfig::default()
        },
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
        "host.requests-independent",
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
/// and the server never becomes ready: it holds no grant (§5.3), so the host is probed as
/// one that granted nothing (as when no policy comes). The push already sent before the
/// receipt is judged all the same (it was skipped as if never sent).
#[tokio::test]
async fn a_contradictory_policy_is_rejected_and_probed_as_granting_nothing() {
    let report = report_path("contradictory.json");
    let (transport, ctl) = spawn_checker(&report, "0");
    let policy = json!({ "effectiveCapabilities": ["pushEvents"],
                         "deniedCapabilities": ["pushEvents"] });
    let (host, answer) = raw_host_policy(transport, policy).await;
    assert_eq!(answer, Err(-32602));
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    assert!(
        ids_with(&doc, "fail").contains("host.grant-not-contradictory"),
        "{doc:#}"
    );
    // Nothing is granted and this host refuses the push: as it should.
    assert!(
        ids_with(&doc, "pass").contains("host.push-follows-grant"),
        "{doc:#}"
    );
    // The push sent before the receipt (there never was one) went out and was refused, as
    // §5.3 asks: judged, not skipped as "never reached".
    assert!(
        ids_with(&doc, "pass").contains("host.refuses-before-ready"),
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

/// §5.4, §6.7: a host that narrows its grant while a probe is outstanding (a reduction
/// takes effect first, then goes out as a Request) and only then answers the probe is
/// judged against the grant in force when it answered, read off the wire: the push under
/// `check.push`, allowed when it was sent, must be refused once `pushEvents` is revoked. It
/// was judged against the grant before the probe: the refusal failed
/// `host.push-follows-grant` and the push accepted after the reduction passed it.
#[tokio::test]
async fn an_answer_is_judged_under_the_grant_in_force_when_the_host_answered() {
    for (refuse, verdict) in [(true, "pass"), (false, "fail")] {
        let report = report_path(&format!("narrowed-meanwhile-{refuse}.json"));
        let (transport, ctl) = spawn_checker(&report, "0");
        let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
        let narrowing = host.clone();
        let answers = tokio::spawn(async move {
            while let Some(m) = incoming.recv().await {
                let IncomingMessage::Request(r) = m else {
                    continue;
                };
                let params = r.request().params.clone().unwrap_or_default();
                if r.method() == "ping" {
                    let _ = r.respond(json!({})).await;
                } else if r.method() == "push/event" && params["eventId"] == "p1" {
                    // The reduction first (on the wire before the answer), then the answer.
                    narrowing
                        .send_request(
                            "featureSets/update",
                            Some(json!({ "effectiveCapabilities": [] })),
                            |_| {},
                        )
                        .await
                        .unwrap();
                    let _ = if refuse {
                        let e = mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents");
                        r.respond_error(e).await
                    } else {
                        r.respond(json!({ "accepted": true })).await
                    };
                } else {
                    let e = mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents");
                    let _ = r.respond_error(e).await;
                }
            }
        });
        host.request_raw(
            "initialize",
            Some(json!({ "protocolVersion": "2025-06-18",
                         "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                         "clientInfo": { "name": "narrows", "version": "0" } })),
        )
        .await
        .unwrap();
        host.notify_raw("notifications/initialized", None)
            .await
            .unwrap();
        let receipt = host
            .request_raw(
                "featureSets/update",
                Some(json!({ "effectiveCapabilities": ["pushEvents"] })),
            )
            .await
            .unwrap();
        assert_eq!(receipt["accepted"], true);
        let (_, doc) = finished_report(ctl, &report).await;
        answers.abort();
        let push = doc["checks"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["id"] == "host.push-follows-grant"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(push["status"], verdict, "refuse {refuse}: {doc:#}");
    }
}

/// The ids as a set, to compare with [`ids_with`].
fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|&id| id.to_owned()).collect()
}

/// What a scripted host does with one request from the checker.
enum Act {
    Answer(Value),
    /// An error object (-32002), as a strict host refuses what it does not allow.
    Refuse,
    /// No answer, ever (AUDIT-001 §4.1).
    Silent,
    /// Holds the request and reads nothing after it: head-of-line blocking.
    Block,
    /// Ends the connection.
    HangUp,
}

/// A host played by hand over the checker's stdio: `initialize` advertising MCPL `version`,
/// `notifications/initialized`, then the policy Request when one is given (awaiting its
/// receipt); every request from the checker is met as `act` says for its method.
async fn scripted_host(
    transport: mcpl::transport::Transport,
    version: &str,
    policy: Option<Value>,
    act: impl Fn(&str) -> Act + Send + 'static,
) -> Peer {
    let mcpl = json!({ "version": version });
    scripted_host_advertising(transport, mcpl, policy, act).await
}

/// [`scripted_host`] advertising `mcpl` as its `experimental.mcpl`.
async fn scripted_host_advertising(
    transport: mcpl::transport::Transport,
    mcpl: Value,
    policy: Option<Value>,
    act: impl Fn(&str) -> Act + Send + 'static,
) -> Peer {
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    let closer = host.clone();
    tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            let IncomingMessage::Request(r) = m else {
                continue;
            };
            match act(r.method()) {
                Act::Answer(v) => drop(r.respond(v).await),
                Act::Refuse => {
                    let e = mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents");
                    drop(r.respond_error(e).await)
                }
                Act::Silent => drop(r.into_id()),
                Act::Block => {
                    let _held = r;
                    std::future::pending::<()>().await
                }
                Act::HangUp => {
                    // Unanswered: a dropped request would be answered -32601 on the way out.
                    drop(r.into_id());
                    return closer.close();
                }
            }
        }
    });
    host.request_raw(
        "initialize",
        Some(json!({ "protocolVersion": "2025-06-18",
                     "capabilities": { "experimental": { "mcpl": mcpl } },
                     "clientInfo": { "name": "scripted", "version": "0" } })),
    )
    .await
    .unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    if let Some(p) = policy {
        host.request_raw("featureSets/update", Some(p))
            .await
            .unwrap();
    }
    host
}

/// The probes that mean something without a grant (issue #19 item 1), plus the two new ones.
const PROBES: [&str; 16] = [
    "host.refuses-before-ready",
    "host.register-refused-before-ready",
    "host.inference-refused-before-ready",
    "host.rejects-with-error",
    "host.push-follows-grant",
    "host.answers-every-request",
    "host.unknown-method-errors",
    "host.removed-methods-refused",
    "host.incoming-unregistered-refused",
    "host.register-itemized",
    "host.changed-itemized",
    "host.incoming-follows-grant",
    "host.inference-follows-grant",
    "host.inference-result-shape",
    "host.requests-independent",
    "host.survives-junk-line",
];

/// Issue #19 item 1: a 0.4-era host that never sends a policy still gets every probe judged,
/// as a host that granted nothing, with the defects the audit found by hand: silence for
/// model/info, channels/list and an unknown method; scope/elevate (removed, §7) approved;
/// `{accepted: false}` results instead of
/// errors (§6.6); a message for a channel never registered accepted (§14.5); a registration
/// answered without per-descriptor results; an ungranted inference answered, with a
/// `finishReason` outside App. B.4.
#[tokio::test]
async fn a_host_without_a_policy_gets_every_probe_judged() {
    let report = report_path("no-policy.json");
    let (transport, ctl) = spawn_checker_with(&report, &["--timeout", "1", "--watch", "0"]);
    let host = scripted_host(transport, "0.4", None, |method| match method {
        "model/info" | "channels/list" | "mcpl-check-host/no-such-method" => Act::Silent,
        "push/event" => Act::Answer(json!({ "accepted": false, "reason": "not today" })),
        "channels/incoming" => {
            Act::Answer(json!({ "results": [ { "messageId": "m1", "accepted": true } ] }))
        }
        "channels/register" => Act::Answer(json!({ "accepted": true })),
        "inference/request" => Act::Answer(json!({ "content": "OK", "finishReason": "stop" })),
        _ => Act::Answer(json!({})),
    })
    .await;
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    let skipped = ids_with(&doc, "skip");
    for id in PROBES {
        assert!(!skipped.contains(id), "{id} skipped: {doc:#}");
    }
    // It fails every probe but the two below, besides its 0.4 version and missing policy.
    let passed = set(&["host.requests-independent", "host.survives-junk-line"]);
    let mut failed = set(&["host.initialize-advertises-mcpl", "host.policy-is-request"]);
    failed.extend(set(&PROBES).difference(&passed).cloned());
    assert_eq!(ids_with(&doc, "fail"), failed, "{doc:#}");
    // The ping behind the unanswered model/info was answered; the junk line was survived;
    // the library's peer names each member once and writes no byte order mark; its
    // notifications/initialized carries no id (§4.1); it writes each message on one line.
    let mut passed = passed;
    passed.insert("host.messages-one-line".to_owned());
    passed.insert("host.member-names-unique".to_owned());
    passed.insert("host.no-byte-order-mark".to_owned());
    passed.insert("host.response-ids-as-sent".to_owned());
    passed.insert("host.notifications-have-no-id".to_owned());
    // Each request answered once, however wrongly, and no response under an id never sent
    // (JSON-RPC 2.0 §5); each frame JSON-RPC 2.0.
    passed.insert("host.responses-once".to_owned());
    passed.insert("host.responses-answer-requests".to_owned());
    passed.insert("host.frames-valid".to_owned());
    passed.insert("host.request-ids-unique".to_owned());
    passed.insert("host.in-flight-ids-unique".to_owned());
    passed.insert("host.initialized-sent".to_owned());
    // Its ping answered with an empty result, as MCP asks.
    passed.insert("host.ping-answered".to_owned());
    // It went on after the initialize answer's unknown members (§8); its advertisement
    // ({version: "0.4"}) holds nothing out of shape (§5.2).
    passed.insert("host.unknown-fields-tolerated".to_owned());
    passed.insert("host.advertisement-shape".to_owned());
    // Its inference answers came with no chunk (none was asked for, §11.4).
    passed.insert("host.chunks-only-when-streamed".to_owned());
    assert_eq!(ids_with(&doc, "pass"), passed, "{doc:#}");
    assert_eq!(code, 1);
}

/// §5.2, App. B.3: an advertisement with no `version` fails
/// `host.initialize-advertises-mcpl` by the library's own reading
/// (`handshake::host_mcpl`, which still serves it as 0.5), and every other check judges the
/// host as it judges the same host advertising version 0.5.
#[tokio::test]
async fn an_unversioned_advertisement_fails_and_is_probed_as_0_5() {
    let mut verdicts = Vec::new();
    for (name, mcpl) in [
        ("unversioned.json", json!({ "pushEvents": true })),
        (
            "versioned.json",
            json!({ "version": "0.5", "pushEvents": true }),
        ),
    ] {
        let report = report_path(name);
        let (transport, ctl) = spawn_checker_with(&report, &["--timeout", "1", "--watch", "0"]);
        let policy = json!({ "effectiveCapabilities": [] });
        let host = scripted_host_advertising(transport, mcpl, Some(policy), |_| Act::Refuse).await;
        let (code, doc) = finished_report(ctl, &report).await;
        drop(host);
        verdicts.push((code, doc));
    }
    let [(code, doc), (_, versioned)] = &verdicts[..] else {
        unreachable!()
    };
    let check = detail_of(doc, "host.initialize-advertises-mcpl");
    assert_eq!(check["status"], "fail", "{doc:#}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("no version member"), "{detail}");
    let judged = detail_of(versioned, "host.initialize-advertises-mcpl");
    assert_eq!(judged["status"], "pass", "{versioned:#}");
    for status in ["pass", "fail", "warn", "skip"] {
        let others = |d: &Value| {
            let mut ids = ids_with(d, status);
            ids.remove("host.initialize-advertises-mcpl");
            ids
        };
        assert_eq!(others(doc), others(versioned), "{status}: {doc:#}");
    }
    assert!(
        ids_with(doc, "pass").contains("host.push-follows-grant"),
        "{doc:#}"
    );
    assert_eq!(*code, 1);
}

/// Issue #19 item 2: a host that holds the granted `inference/request` and reads nothing
/// after it leaves the ping sent right behind it unanswered. (The one sent before the
/// receipt, `host.inference-refused-before-ready`, it refuses.)
#[tokio::test]
async fn head_of_line_blocking_fails_requests_independent() {
    let report = report_path("head-of-line.json");
    let bounds = ["--timeout", "1", "--inference-timeout", "1", "--watch", "0"];
    let (transport, ctl) = spawn_checker_with(&report, &bounds);
    let policy = json!({ "effectiveCapabilities": ["inferenceRequest"] });
    let early = std::sync::atomic::AtomicBool::new(true);
    let host = scripted_host(transport, "0.5", Some(policy), move |method| match method {
        "inference/request" if early.swap(false, std::sync::atomic::Ordering::Relaxed) => {
            Act::Refuse
        }
        "inference/request" => Act::Block,
        "ping" => Act::Answer(json!({})),
        _ => Act::Refuse,
    })
    .await;
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    let check = detail_of(&doc, "host.requests-independent");
    assert_eq!(check["status"], "fail", "{doc:#}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("inference/request"), "{detail}");
    assert_eq!(code, 1);
}

/// The report entry of check `id`.
fn detail_of<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} missing: {doc:#}"))
}

/// Issue #19 items 3 and 5: a host that dies on a line that is not JSON fails
/// `host.survives-junk-line`, and the probe after it says it was not reached, and why.
#[tokio::test]
async fn a_host_killed_by_a_junk_line_fails_survives_junk_line() {
    let report = report_path("junk.json");
    let (transport, ctl) = spawn_checker_with(&report, &["--timeout", "2", "--watch", "0"]);
    let policy = json!({ "effectiveCapabilities": [] });
    let host = scripted_host(transport, "0.5", Some(policy), |method| match method {
        "ping" => Act::Answer(json!({})),
        _ => Act::Refuse,
    })
    .await;
    // The library skips a non-JSON line with a diagnostic; this host dies of it instead.
    let mut diagnostics = host.diagnostics();
    let dying = host.clone();
    tokio::spawn(async move {
        while let Some(d) = diagnostics.recv().await {
            if let mcpl::peer::Diagnostic::JunkLine { .. } = d {
                return dying.close();
            }
        }
    });
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    let junk = detail_of(&doc, "host.survives-junk-line");
    assert_eq!(junk["status"], "fail", "{doc:#}");
    assert!(junk["detail"].as_str().unwrap().contains("(EOF)"), "{junk}");
    let after = detail_of(&doc, "host.push-follows-grant");
    assert_eq!(after["status"], "skip", "{doc:#}");
    let why = after["detail"].as_str().unwrap();
    assert!(
        why.starts_with("not reached: the host ended the connection (EOF)")
            && why.contains("during the junk-line probe"),
        "{why}"
    );
    // The probes before it were all judged: the host's death is a failure, not a hang-up.
    assert_eq!(code, 1, "{doc:#}");
}

/// Issue #19 item 5: when the host goes away mid-run the report says how, when and during
/// which probe, and every check not reached says so.
#[tokio::test]
async fn a_host_that_goes_away_is_reported_with_how_and_where() {
    let report = report_path("gone.json");
    let (transport, ctl) = spawn_checker_with(&report, &["--timeout", "2", "--watch", "0"]);
    let policy = json!({ "effectiveCapabilities": ["pushEvents"] });
    let host = scripted_host(transport, "0.5", Some(policy), |method| match method {
        "channels/list" => Act::HangUp,
        "ping" => Act::Answer(json!({})),
        _ => Act::Refuse,
    })
    .await;
    let (code, doc) = finished_report(ctl, &report).await;
    drop(host);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("the host ended the connection (EOF)")
            && error.contains(" s into the run, during the channels/list probe"),
        "{doc:#}"
    );
    for id in ["host.answers-every-request", "host.unknown-method-errors"] {
        let check = detail_of(&doc, id);
        assert_eq!(check["status"], "skip", "{doc:#}");
        assert_eq!(check["detail"], format!("not reached: {error}"), "{doc:#}");
    }
    assert_eq!(code, 2);
}

/// Issue #19 item 7: `initialize` is answered with the MCP version the host asked for when
/// the checker speaks it.
#[tokio::test]
async fn initialize_is_answered_with_the_version_the_host_asked_for() {
    let report = report_path("version.json");
    let (transport, ctl) = spawn_checker_with(&report, &["--timeout", "1", "--watch", "0"]);
    let (host, _incoming) = Peer::new(transport, PeerConfig::default());
    let result = host
        .request_raw(
            "initialize",
            Some(json!({ "protocolVersion": "2025-03-26",
                         "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                         "clientInfo": { "name": "older", "version": "0" } })),
        )
        .await
        .unwrap();
    assert_eq!(result["protocolVersion"], "2025-03-26", "{result}");
    host.close();
    let (code, _) = finished_report(ctl, &report).await;
    assert_eq!(code, 2);
}
