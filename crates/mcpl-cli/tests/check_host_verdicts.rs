//! `mcpl check-host` verdicts on hosts built to slip past a check: the defect in a form the
//! other suites do not send (a later policy Request rather than the first, a grant entry in
//! the wrong case), each a false pass before its fix. The report is read from `--report
//! FILE` (stdout carries the protocol).

mod common;

use std::path::PathBuf;

use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use mcpl::transport::child;
use serde_json::{json, Value};

use common::ids_with;

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-verdicts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Spawns `mcpl check-host` (JSON report to `report`, `--watch 60`: the host ends the run by
/// closing the connection once it has done what it came to do).
fn spawn_checker(report: &PathBuf) -> (mcpl::transport::Transport, child::ChildControl) {
    spawn_checker_watching(report, "60")
}

/// [`spawn_checker`] listening `watch` seconds after its probes (`0`: the run ends once the
/// probes are done, whatever the host does).
fn spawn_checker_watching(
    report: &PathBuf,
    watch: &str,
) -> (mcpl::transport::Transport, child::ChildControl) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args(["check-host", "--json", "--timeout", "5", "--watch", watch])
        .arg("--report")
        .arg(report);
    child::spawn(&mut cmd).unwrap()
}

async fn finished_report(ctl: child::ChildControl, report: &PathBuf) -> Value {
    let status = ctl.wait().await.unwrap();
    assert_ne!(status.code(), Some(101), "the checker panicked");
    let text = std::fs::read_to_string(report).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The status and detail of check `id`.
fn verdict(doc: &Value, id: &str) -> (String, String) {
    let c = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("{id} missing: {doc:#}"));
    (
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["detail"].as_str().unwrap_or_default().to_owned(),
    )
}

/// What a scripted host answers one request of the checker's (its method and params).
type Answer = Result<Value, mcpl::jsonrpc::ErrorObject>;

/// The strict host's answer: `ping` answered, everything else refused `-32002`.
fn refuse_all(method: &str, _: &Value) -> Answer {
    if method == "ping" {
        Ok(json!({}))
    } else {
        Err(mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents"))
    }
}

/// A host played by hand: `initialize` (advertising every MCPL path, so the own-advertisement
/// warning stays out of the way), `notifications/initialized`, then `policy` as its initial
/// Request; every request from the checker gets `-32002` (as a strict host refuses what it
/// does not allow) except `ping`. Returns the host's peer and the policy's answer.
async fn host_with_policy(
    transport: mcpl::transport::Transport,
    policy: Value,
) -> (Peer, Result<Value, i64>) {
    host_answering(transport, policy, refuse_all).await
}

/// [`host_with_policy`], answering the checker's requests as `answer` says.
async fn host_answering(
    transport: mcpl::transport::Transport,
    policy: Value,
    answer: impl Fn(&str, &Value) -> Answer + Send + 'static,
) -> (Peer, Result<Value, i64>) {
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            if let IncomingMessage::Request(r) = m {
                let params = r.request().params.clone().unwrap_or_default();
                let _ = match answer(r.method(), &params) {
                    Ok(v) => r.respond(v).await,
                    Err(e) => r.respond_error(e).await,
                };
            }
        }
    });
    let mcpl = json!({ "version": "0.5", "pushEvents": true, "inferenceRequest": true,
        "modelInfo": true, "inferenceLifecycle": true,
        "contextHooks": { "beforeInference": true },
        "channels": { "register": true, "incoming": true, "publish": true } });
    host.request_raw(
        "initialize",
        Some(json!({ "protocolVersion": "2025-06-18",
                     "capabilities": { "experimental": { "mcpl": mcpl } },
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

/// §5.4, §6.7: every policy Request carries a grant, not only the first. A host whose
/// initial policy conforms and whose later one grants a path the server never advertised
/// (`modelInfo`), or names a path both granted and denied, breaks the same rules; the
/// checker judged only the first Request and passed both checks.
#[tokio::test]
async fn a_later_policy_request_is_judged_like_the_first() {
    for (later, id) in [
        (
            json!({ "effectiveCapabilities": ["pushEvents", "modelInfo"] }),
            "host.grant-within-advertisement",
        ),
        (
            json!({ "effectiveCapabilities": ["pushEvents"],
                    "deniedCapabilities": ["pushEvents"] }),
            "host.grant-not-contradictory",
        ),
    ] {
        let report = report_path(&format!("later-{}.json", id.replace('.', "-")));
        let (transport, ctl) = spawn_checker(&report);
        let (host, answer) = host_with_policy(
            transport,
            json!({ "effectiveCapabilities": ["pushEvents"] }),
        )
        .await;
        assert_eq!(answer.unwrap()["accepted"], true);
        // Whatever the checker answers (a receipt, -32602), the grant was the host's to get
        // right.
        let _ = host.request_raw("featureSets/update", Some(later)).await;
        host.request_raw("ping", None).await.unwrap();
        host.close();
        let doc = finished_report(ctl, &report).await;
        let (status, detail) = verdict(&doc, id);
        assert_eq!(status, "fail", "{id}: {doc:#}");
        assert!(detail.contains("later"), "{detail}");
    }
}

/// §5.4, §6.2: an `effectiveCapabilities` entry that names no capability path grants
/// nothing. One in the wrong case (`PushEvents`) is a path the server never advertised, so
/// it fails; a bare parent (`channels`) or a wildcard short of the leaves' depth
/// (`contextHooks.*`, the divergence §5.4 pinned) names a node the server did advertise but
/// grants none of its leaves, so it warns. Each had passed as "grants PushEvents".
#[tokio::test]
async fn a_grant_entry_naming_no_path_is_not_passed() {
    for (entry, expected) in [
        ("PushEvents", "fail"),
        ("pushevents", "fail"),
        ("channels", "warn"),
        ("contextHooks.*", "warn"),
        ("contextHooks.beforeInference", "warn"),
    ] {
        let report = report_path(&format!("no-path-{}.json", entry.replace(['.', '*'], "-")));
        let (transport, ctl) = spawn_checker(&report);
        let policy = json!({ "effectiveCapabilities": ["inferenceRequest", entry] });
        let (host, answer) = host_with_policy(transport, policy).await;
        assert_eq!(answer.unwrap()["accepted"], true);
        host.request_raw("ping", None).await.unwrap();
        host.close();
        let doc = finished_report(ctl, &report).await;
        let (status, detail) = verdict(&doc, "host.grant-within-advertisement");
        assert_eq!(status, expected, "{entry}: {doc:#}");
        assert!(detail.contains(entry), "{entry}: {detail}");
        assert!(detail.contains("grants nothing"), "{entry}: {detail}");
        assert!(!ids_with(&doc, "fail").contains("host.grant-not-contradictory"));
    }
}

/// §14.5: `channels/register` is answered with one result per submitted descriptor. A result
/// naming an id never submitted, or one descriptor twice with opposite verdicts (which the
/// library server reads as accepted: the two sides then disagree about which channels
/// exist), is no such answer; it passed, since each submitted id was found once at least.
/// One per descriptor in another order, with members §14.5 does not name, conforms.
#[tokio::test]
async fn register_results_are_one_per_descriptor_exactly() {
    let a = |accepted: bool| json!({ "id": "check:a", "accepted": accepted });
    let b = json!({ "id": "check:b", "accepted": true });
    for (results, expected) in [
        (
            json!([a(true), b, { "id": "check:z", "accepted": true }]),
            "fail",
        ),
        (json!([a(true), a(false), b]), "fail"),
        (json!([a(true), a(true), b]), "fail"),
        (
            json!([b, { "id": "check:a", "accepted": false, "reason": "capability_denied", "x": 1 }]),
            "pass",
        ),
    ] {
        let report = report_path(&format!("register-{}.json", results.to_string().len()));
        let (transport, ctl) = spawn_checker_watching(&report, "0");
        let answer = move |method: &str, params: &Value| match method {
            "channels/register" => Ok(json!({ "results": results.clone(), "note": "x" })),
            _ => refuse_all(method, params),
        };
        let policy = json!({ "effectiveCapabilities": ["channels.register"] });
        let (host, answer) = host_answering(transport, policy, answer).await;
        assert_eq!(answer.unwrap()["accepted"], true);
        // The checker ends the run once its probes are done (`--watch 0`).
        let doc = finished_report(ctl, &report).await;
        drop(host);
        let (status, detail) = verdict(&doc, "host.register-itemized");
        assert_eq!(status, expected, "{detail}");
    }
}

/// Issue #19 item 5: the report names the probe during which the host went away. A host that
/// answers the push under an undeclared set and then hangs up is gone by the time the next
/// probe (`model/info`) is sent; that send failed, the probe returned without a word, so did
/// every one after it, and the report named the junk-line probe, the first to notice.
#[tokio::test]
async fn a_host_gone_between_probes_is_said_gone_during_the_next() {
    let report = report_path("gone-between.json");
    let (transport, ctl) = spawn_checker(&report);
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    let closer = host.clone();
    tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            if let IncomingMessage::Request(r) = m {
                let params = r.request().params.clone().unwrap_or_default();
                let last = params["eventId"] == "u1";
                let e = mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents");
                let _ = r.respond_error(e).await;
                if last {
                    closer.close();
                    return;
                }
            }
        }
    });
    host.request_raw(
        "initialize",
        Some(json!({ "protocolVersion": "2025-06-18",
                     "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                     "clientInfo": { "name": "leaves", "version": "0" } })),
    )
    .await
    .unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let receipt = host
        .request_raw(
            "featureSets/update",
            Some(json!({ "effectiveCapabilities": [] })),
        )
        .await
        .unwrap();
    assert_eq!(receipt["accepted"], true);
    let doc = finished_report(ctl, &report).await;
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("during the model/info probe"), "{doc:#}");
    let (status, detail) = verdict(&doc, "host.answers-every-request");
    assert_eq!(status, "skip");
    assert_eq!(detail, format!("not reached: {error}"));
}

/// §10.5: the library host, granted `inferenceLifecycle`, runs a turn: `started`, then
/// `completed` with usage, metadata only. Both lifecycle checks pass, nothing fails.
#[tokio::test]
async fn the_library_hosts_lifecycle_signals_pass() {
    use mcpl::host::{HostConfig, HostEvent, HostSession};
    let report = report_path("lifecycle-library.json");
    let (transport, ctl) = spawn_checker(&report);
    let config = HostConfig {
        policy: vec!["pushEvents".into(), "inferenceLifecycle".into()],
        ..HostConfig::default()
    };
    let (session, mut streams) = HostSession::connect(transport, config).await.unwrap();
    // The last probe is a push the grant allows: once it is admitted, the probes are done.
    loop {
        if let HostEvent::Push { .. } = streams.events.recv().await.expect("the push probe") {
            break;
        }
    }
    let turn = session.start_turn("i1", "c1", 0).await.unwrap();
    turn.complete(Some(json!({ "inputTokens": 3, "outputTokens": 1 })))
        .await
        .unwrap();
    // Answered once the checker has read the turn's signals (it reads in order).
    session.peer().request_raw("ping", None).await.unwrap();
    session.close();
    let doc = finished_report(ctl, &report).await;
    assert_eq!(ids_with(&doc, "fail"), Default::default(), "{doc:#}");
    for id in ["host.lifecycle-metadata-only", "host.lifecycle-paired"] {
        let (status, detail) = verdict(&doc, id);
        assert_eq!(status, "pass", "{id}: {detail}");
        assert!(detail.starts_with("2 inference/lifecycle"), "{detail}");
    }
}

/// §10.5 (AUDIT-001 §2.2: `context/afterInference` handed every subscriber the user's and
/// the model's text; its replacement MUST NOT carry content): a host granted
/// `inferenceLifecycle` whose signals carry the messages, a `model` the checker never asked
/// for (no `modelInfo`), and terminals that do not pair (a second one, one for an inference
/// never started). The checker advertised no `inferenceLifecycle`, so no grant it would take
/// let a host send the signal, and what a granted one carried was never judged.
#[tokio::test]
async fn lifecycle_signals_carrying_content_or_unpaired_fail() {
    let report = report_path("lifecycle-leaks.json");
    let (transport, ctl) = spawn_checker(&report);
    let (host, answer) = host_with_policy(
        transport,
        json!({ "effectiveCapabilities": ["pushEvents", "inferenceLifecycle"] }),
    )
    .await;
    assert_eq!(answer.unwrap()["accepted"], true);
    for params in [
        json!({ "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                "phase": "started", "userMessage": "the user's secret" }),
        json!({ "inferenceId": "i1", "phase": "completed", "assistantMessage": "the reply",
                "model": { "id": "m" } }),
        json!({ "inferenceId": "i1", "phase": "aborted" }),
        json!({ "inferenceId": "i9", "phase": "failed" }),
    ] {
        host.notify_raw("inference/lifecycle", Some(params))
            .await
            .unwrap();
    }
    host.request_raw("ping", None).await.unwrap();
    host.close();
    let doc = finished_report(ctl, &report).await;
    let (status, detail) = verdict(&doc, "host.lifecycle-metadata-only");
    assert_eq!(status, "fail", "{detail}");
    for said in ["userMessage", "assistantMessage", "modelInfo", "3 of 4"] {
        assert!(detail.contains(said), "{said}: {detail}");
    }
    let (status, detail) = verdict(&doc, "host.lifecycle-paired");
    assert_eq!(status, "fail", "{detail}");
    for said in ["second terminal", "no preceding started", "2 of 4"] {
        assert!(detail.contains(said), "{said}: {detail}");
    }
    // Granted, so delivered within the grant: only the content and pairing fail.
    assert_eq!(verdict(&doc, "host.deliveries-within-grant").0, "pass");
}

/// §14.5 (receipt-time validation against the actually registered channel): every message of
/// a `channels/incoming` for channels never registered is refused, not only the first. A
/// host that refuses the first message and accepts the rest (it looked at `messages[0]`
/// alone) passed, as the checker read only `results[0]` of the answer.
#[tokio::test]
async fn incoming_unregistered_judges_every_result() {
    let refused =
        |m: &str| json!({ "messageId": m, "accepted": false, "reason": "unknown_channel" });
    let accepted = |m: &str| json!({ "messageId": m, "accepted": true, "conversationId": "c" });
    for (results, expected) in [
        (json!([refused("m1"), accepted("m2")]), "fail"),
        (json!([refused("m1"), refused("m2")]), "pass"),
        (json!([]), "fail"),
    ] {
        let report = report_path(&format!("incoming-{}.json", results.to_string().len()));
        let (transport, ctl) = spawn_checker_watching(&report, "0");
        let answer = move |method: &str, params: &Value| match method {
            "channels/incoming" => Ok(json!({ "results": results.clone() })),
            _ => refuse_all(method, params),
        };
        let policy = json!({ "effectiveCapabilities": ["channels.incoming"] });
        let (host, answer) = host_answering(transport, policy, answer).await;
        assert_eq!(answer.unwrap()["accepted"], true);
        let doc = finished_report(ctl, &report).await;
        drop(host);
        let (status, detail) = verdict(&doc, "host.incoming-unregistered-refused");
        assert_eq!(status, expected, "{detail}");
    }
}

/// §14.2 (a descriptor's id is unique within the connection), §14.5 (one result per
/// submitted descriptor): a `channels/register` naming one id in two descriptors of
/// different direction. A host that accepts both holds one channel under that id (the later
/// overwriting the earlier, or two under one key) while the server was told both were
/// taken; it was never judged. Refusing the request, or accepting at most one of the two
/// (one result per descriptor, in order, as the library host does), conforms.
#[tokio::test]
async fn a_register_repeating_a_channel_id_is_judged() {
    let dup = |accepted: bool| json!({ "id": "check:dup", "accepted": accepted });
    for (results, expected) in [
        (Some(json!([dup(true), dup(true)])), "fail"),
        (Some(json!([dup(true)])), "fail"),
        (
            Some(json!([dup(true), { "id": "check:dup", "accepted": "yes" }])),
            "fail",
        ),
        (Some(json!([dup(true), dup(false)])), "pass"),
        (Some(json!([dup(false), dup(false)])), "pass"),
        (None, "pass"),
    ] {
        let name = format!(
            "dup-{}.json",
            results.as_ref().map_or(0, |r| r.to_string().len())
        );
        let report = report_path(&name);
        let (transport, ctl) = spawn_checker_watching(&report, "0");
        let answer = move |method: &str, params: &Value| {
            let repeats = params["channels"][0]["id"] == params["channels"][1]["id"];
            match (method, &results) {
                ("channels/register", Some(r)) if repeats => Ok(json!({ "results": r.clone() })),
                ("channels/register", None) if repeats => Err(
                    mcpl::jsonrpc::ErrorObject::invalid_params("a repeated channel id"),
                ),
                ("channels/register", _) => Ok(json!({ "results": [
                    { "id": "check:a", "accepted": true }, { "id": "check:b", "accepted": true }
                ] })),
                _ => refuse_all(method, params),
            }
        };
        let policy = json!({ "effectiveCapabilities": ["channels.register"] });
        let (host, answer) = host_answering(transport, policy, answer).await;
        assert_eq!(answer.unwrap()["accepted"], true);
        let doc = finished_report(ctl, &report).await;
        drop(host);
        let (status, detail) = verdict(&doc, "host.register-duplicate-id");
        assert_eq!(status, expected, "{name}: {detail}");
        assert_eq!(verdict(&doc, "host.register-itemized").0, "pass", "{name}");
    }
}

/// §5.3, §5.4: a malformed initial policy (a path both granted and denied) is rejected
/// `-32602` and grants nothing; the server never becomes ready, exactly as when no policy
/// comes. A host sending none is probed as one that granted nothing, but one sending a
/// malformed one had every probe skipped ("never became ready"), so a host that then
/// accepts a push it must refuse passed where the one that sent nothing failed.
#[tokio::test]
async fn a_malformed_policy_is_probed_as_granting_nothing() {
    let report = report_path("malformed-policy.json");
    let (transport, ctl) = spawn_checker_watching(&report, "0");
    // Accepts every push/event: with nothing granted each one is a defect (§5.3, §5.4).
    let answer = |method: &str, params: &Value| match method {
        "push/event" => Ok(json!({})),
        _ => refuse_all(method, params),
    };
    let policy = json!({ "effectiveCapabilities": ["pushEvents"],
                         "deniedCapabilities": ["pushEvents"] });
    let (host, answer) = host_answering(transport, policy, answer).await;
    assert_eq!(answer, Err(-32602));
    let doc = finished_report(ctl, &report).await;
    drop(host);
    // The malformed policy keeps its own verdict.
    assert_eq!(verdict(&doc, "host.grant-not-contradictory").0, "fail");
    let (status, detail) = verdict(&doc, "host.push-follows-grant");
    assert_eq!(status, "fail", "{doc:#}");
    assert!(!detail.contains("never became ready"), "{detail}");
    // The probes the grant does not decide ran too.
    assert_eq!(
        verdict(&doc, "host.survives-junk-line").0,
        "pass",
        "{doc:#}"
    );
    assert_eq!(
        verdict(&doc, "host.answers-every-request").0,
        "pass",
        "{doc:#}"
    );
}
