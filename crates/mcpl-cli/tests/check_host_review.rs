//! `mcpl check-host` on hosts an outside reviewer built (findings F5, F7, F9) and on
//! messages read while a later receipt is held: each a scripted host writing raw lines over
//! the checker's stdio, each a false verdict before its fix. The report is read from
//! `--report FILE` (stdout carries the protocol).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-review-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The checker's own bound on a run with these flags (`24 × 2 + 1 + 0`), plus a margin for
/// a loaded machine. Only a hung checker reaches it.
const GUARD: Duration = Duration::from_secs(48 + 1 + 60);

/// One message as a line.
fn line(v: &Value) -> String {
    format!("{v}\n")
}

/// `initialize` advertising every MCPL path, `notifications/initialized`, then the initial
/// policy Request (id 2) granting `grant`.
fn head(grant: Value) -> String {
    let mcpl = json!({ "version": "0.5", "pushEvents": true, "inferenceRequest": true,
        "modelInfo": true, "inferenceLifecycle": true,
        "contextHooks": { "beforeInference": { "observe": true,
            "inject": { "system": true, "user": true } } },
        "channels": { "register": true, "incoming": true, "publish": true } });
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18",
                    "capabilities": { "experimental": { "mcpl": mcpl } },
                    "clientInfo": { "name": "scripted", "version": "0" } } });
    let policy = json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                         "params": { "effectiveCapabilities": grant } });
    format!(
        "{}{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n{}",
        line(&init),
        line(&policy)
    )
}

/// A result under the request's id.
fn ok(m: &Value, result: Value) -> String {
    line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": result }))
}

/// An error under the request's id.
fn err(m: &Value, error: Value) -> String {
    line(&json!({ "jsonrpc": "2.0", "id": m["id"], "error": error }))
}

/// The strict answer: `ping` answered, `model/info` with a result when `model` says so,
/// anything else refused `-32002` naming what it needs (`-32601` for what needs nothing).
fn strict(m: &Value, model: bool) -> String {
    let needs = match m["method"].as_str().unwrap_or("") {
        // A response of the checker's: nothing to answer.
        "" => return String::new(),
        "ping" => return ok(m, json!({})),
        "model/info" if model => return ok(m, json!({ "id": "m", "vendor": "v" })),
        "model/info" => "modelInfo",
        "push/event" => "pushEvents",
        "inference/request" => "inferenceRequest",
        "channels/register" | "channels/list" | "channels/changed" => "channels.register",
        "channels/incoming" => "channels.incoming",
        _ => return err(m, json!({ "code": -32601, "message": "not found" })),
    };
    err(
        m,
        json!({ "code": -32002, "message": "Capability denied",
                   "data": { "capability": needs } }),
    )
}

/// Runs `mcpl check-host` (`--watch 0`: the run ends once its probes are done) over raw
/// pipes: writes `head`, then for each request and response of the checker's the lines
/// `answer` gives (in the order the checker sent them). Returns the report.
async fn scripted(name: &str, head: String, mut answer: impl FnMut(&Value) -> String) -> Value {
    let report = report_path(name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([
            "check-host",
            "--json",
            "--timeout",
            "2",
            "--inference-timeout",
            "1",
        ])
        .args(["--watch", "0", "--report"])
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (mut stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    stdin.write_all(head.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        // The checker's requests, and its responses (a host may wait for one).
        if m.get("id").is_none() {
            continue;
        }
        if stdin.write_all(answer(&m).as_bytes()).await.is_err() {
            break;
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(GUARD, child.wait())
        .await
        .expect("the checker ended within its bound")
        .unwrap();
    assert_ne!(status.code(), Some(101), "the checker panicked");
    let text = std::fs::read_to_string(&report).unwrap();
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

/// F9 (§6.6, §14.6: a denied capability is refused `-32002` with `data: { capability }`):
/// a host refusing the push, the inference and `model/info` it does not grant with
/// `-32002` but no `data`, or naming `tools` (none needs it), passed: the code was judged,
/// never what it said. Each now warns `host.refusal-data`; the one naming what each method
/// needs passes it. The codes stay `host.refusal-code`'s and `host.answers-follow-grant`'s,
/// and pass.
#[tokio::test]
async fn a_capability_denial_naming_no_or_the_wrong_capability_warns() {
    for (case, expected) in [("none", "warn"), ("tools", "warn"), ("needed", "pass")] {
        let doc = scripted(
            &format!("refusal-data-{case}.json"),
            head(json!(["inferenceLifecycle"])),
            |m| match (case, m["method"].as_str().unwrap_or("")) {
                ("none", "push/event" | "inference/request" | "model/info") => {
                    err(m, json!({ "code": -32002, "message": "Capability denied" }))
                }
                ("tools", "push/event" | "inference/request" | "model/info") => err(
                    m,
                    json!({ "code": -32002, "message": "Capability denied",
                            "data": { "capability": "tools" } }),
                ),
                _ => strict(m, false),
            },
        )
        .await;
        let (status, detail) = verdict(&doc, "host.refusal-data");
        assert_eq!(status, expected, "{case}: {detail}");
        match case {
            "none" => assert!(detail.contains("carries no data"), "{detail}"),
            "tools" => assert!(
                detail.contains("\"tools\", though push/event needs pushEvents")
                    && detail.contains("model/info needs modelInfo"),
                "{detail}"
            ),
            _ => {}
        }
        for id in ["host.refusal-code", "host.answers-follow-grant"] {
            assert_eq!(verdict(&doc, id).0, "pass", "{case} {id}: {doc:#}");
        }
    }
}

/// F5 (§5.4, §12): the checker advertises no `modelInfo`. A host granting `*` (which does
/// reach the depth-1 path `modelInfo`, §5.4) or naming `modelInfo`, then answering
/// `model/info`, has one defect: its grant is not the intersection with the advertisement,
/// and it acted on it. Before, `host.answers-follow-grant` failed saying "modelInfo is not
/// granted" (false on the wire: the host's grant reaches it) while the `*` only warned, and
/// the named grant failed twice. Now the grant's check fails naming the answer, and the
/// answer passes, naming that check. A `*` the host does not act on (it refuses
/// `model/info`) still only warns.
#[tokio::test]
async fn a_grant_beyond_the_advertisement_acted_on_is_one_defect() {
    for (grant, answers, within) in [
        (json!(["*"]), true, "fail"),
        (json!(["pushEvents", "modelInfo"]), true, "fail"),
        (json!(["*"]), false, "warn"),
    ] {
        let name = format!("beyond-{}-{answers}.json", grant.as_array().unwrap().len());
        let doc = scripted(&name, head(grant.clone()), |m| strict(m, answers)).await;
        let (status, detail) = verdict(&doc, "host.grant-within-advertisement");
        assert_eq!(status, within, "{grant} {answers}: {detail}");
        if grant == json!(["*"]) && answers {
            assert!(
                detail.contains("acted on a grant beyond the advertisement")
                    && detail.contains("model/info answered"),
                "{detail}"
            );
        }
        let (status, detail) = verdict(&doc, "host.answers-follow-grant");
        assert_eq!(status, "pass", "{grant} {answers}: {detail}");
        assert!(!detail.contains("is not granted"), "{detail}");
        if answers {
            assert!(
                detail.contains("host.grant-within-advertisement"),
                "{detail}"
            );
        }
    }
}

/// F7 (§10.5: a lifecycle signal MUST NOT carry message content, its fields listed; §10.1:
/// without `observe` the user's text is absent): content under a name outside the library's
/// denylist passed, whether an `inference/lifecycle` carrying `output` (the reply) or
/// `metadata.userText`, or a hook carrying `history` with `observe` not granted. Each now
/// warns (text outside the listed fields; §8 tolerates unknown members, so never a fail).
/// The same host sending unknown members that hold no text passes both checks.
#[tokio::test]
async fn text_outside_the_listed_fields_warns() {
    for texty in [true, false] {
        let extra = |text: Value| {
            if texty {
                text
            } else {
                json!({ "n": 3, "ok": true })
            }
        };
        let signals = [
            json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
                "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                "phase": "started", "metadata": extra(json!({ "userText": "secret" })) } }),
            json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
                "inferenceId": "i1", "phase": "completed",
                "output": extra(json!("the full reply the model produced")) } }),
            json!({ "jsonrpc": "2.0", "id": "h1", "method": "context/beforeInference",
                "params": { "inferenceId": "i2", "conversationId": "c1", "turnIndex": 1,
                    "userMessage": null,
                    "history": extra(json!([{ "role": "user", "content": "earlier" }])) } }),
        ];
        let mut pending: String = signals.iter().map(line).collect();
        let grant = json!([
            "pushEvents",
            "inferenceLifecycle",
            "contextHooks.beforeInference.inject.beforeUser"
        ]);
        let doc = scripted(&format!("unlisted-{texty}.json"), head(grant), |m| {
            format!("{}{}", std::mem::take(&mut pending), strict(m, false))
        })
        .await;
        let expected = if texty { "warn" } else { "pass" };
        let (status, detail) = verdict(&doc, "host.lifecycle-metadata-only");
        assert_eq!(status, expected, "{detail}");
        if texty {
            for said in ["2 of 2", "metadata", "output", "§10.5"] {
                assert!(detail.contains(said), "{said}: {detail}");
            }
        }
        assert_eq!(verdict(&doc, "host.lifecycle-paired").0, "pass", "{doc:#}");
        let (status, detail) = verdict(&doc, "host.user-message-redacted");
        assert_eq!(status, expected, "{detail}");
        if texty {
            assert!(
                detail.contains("history") && detail.contains("observe"),
                "{detail}"
            );
        }
    }
}

/// §6.7, wire order: a probe's answer read while a later policy Request's receipt is held
/// is judged under the grant in force where it came. The host, asked to register the
/// checker's channels (granted), sends a policy Request keeping the grant, then its answer
/// to the probe, then a policy Request withdrawing `channels.register`. The checker set the
/// answer aside for the probe's loop but handled the withdrawal first, and judged the
/// answer under it: "channels.register is not granted, yet channels/register was
/// answered". Now what follows a set-aside answer is set aside behind it, in wire order.
#[tokio::test]
async fn an_answer_read_during_a_held_receipt_is_judged_before_what_followed_it() {
    let grant = json!(["pushEvents", "channels.register"]);
    let mut sent = false;
    let doc = scripted("held-receipt-order.json", head(grant.clone()), |m| {
        let probe =
            m["method"] == "channels/register" && m["params"]["channels"][0]["id"] == "check:a";
        if !probe || std::mem::replace(&mut sent, true) {
            return strict(m, false);
        }
        let keep = json!({ "jsonrpc": "2.0", "id": "p1", "method": "featureSets/update",
                           "params": { "effectiveCapabilities": grant } });
        let answer = ok(
            m,
            json!({ "results": [{ "id": "check:a", "accepted": true },
                                { "id": "check:b", "accepted": true }] }),
        );
        let withdraw = json!({ "jsonrpc": "2.0", "id": "p2", "method": "featureSets/update",
                               "params": { "effectiveCapabilities": ["pushEvents"] } });
        format!("{}{answer}{}", line(&keep), line(&withdraw))
    })
    .await;
    assert!(sent, "the register probe came: {doc:#}");
    let (status, detail) = verdict(&doc, "host.register-itemized");
    assert_eq!(status, "pass", "{detail}");
    assert!(detail.contains("one result per descriptor"), "{detail}");
}

/// §10.5, §6.7: an `inference/lifecycle` carrying `model`, pipelined behind a policy
/// Request that newly grants `modelInfo`, came before the host could read the receipt: it
/// fails `host.lifecycle-metadata-only` saying so (judged under the grant the host held
/// before the held receipt, as a hook is; `judge_lifecycle` had ignored it). Naming the
/// unadvertised `modelInfo` is the grant's own defect besides.
#[tokio::test]
async fn a_model_pipelined_behind_a_widening_fails() {
    let grant = json!(["pushEvents", "inferenceLifecycle"]);
    let mut pending = {
        let widen = json!({ "jsonrpc": "2.0", "id": "p1", "method": "featureSets/update",
            "params": { "effectiveCapabilities": ["pushEvents", "inferenceLifecycle",
                                                  "modelInfo"] } });
        let signal = json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
            "inferenceId": "i1", "phase": "started", "model": { "id": "m" } } });
        format!("{}{}", line(&widen), line(&signal))
    };
    let doc = scripted("model-behind-widening.json", head(grant), |m| {
        format!("{}{}", std::mem::take(&mut pending), strict(m, false))
    })
    .await;
    let (status, detail) = verdict(&doc, "host.lifecycle-metadata-only");
    assert_eq!(status, "fail", "{detail}");
    assert!(
        detail.contains("carried model") && detail.contains("could have read its receipt"),
        "{detail}"
    );
    assert_eq!(verdict(&doc, "host.grant-within-advertisement").0, "fail");
}

/// F5's pattern on the lifecycle signal (§5.4, §10.5): a host granting `*`, which reaches
/// `modelInfo` though the checker never advertised it, then sending `inference/lifecycle`
/// with a `model`, has one defect, its grant. `host.lifecycle-metadata-only` failed saying
/// "modelInfo is not granted" (false on the wire) beside the grant's warning. Now the
/// grant's check fails naming the signal, and the signal's check passes naming that check.
#[tokio::test]
async fn a_lifecycle_model_under_a_grant_beyond_the_advertisement_is_one_defect() {
    let mut pending: String = [
        json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
            "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
            "phase": "started", "model": { "id": "m" } } }),
        json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
            "inferenceId": "i1", "phase": "completed" } }),
    ]
    .iter()
    .map(line)
    .collect();
    let doc = scripted("lifecycle-model-star.json", head(json!(["*"])), |m| {
        format!("{}{}", std::mem::take(&mut pending), strict(m, false))
    })
    .await;
    let (status, detail) = verdict(&doc, "host.grant-within-advertisement");
    assert_eq!(status, "fail", "{detail}");
    assert!(
        detail.contains("inference/lifecycle carried model"),
        "{detail}"
    );
    let (status, detail) = verdict(&doc, "host.lifecycle-metadata-only");
    assert_eq!(status, "pass", "{detail}");
    assert!(
        detail.contains("host.grant-within-advertisement"),
        "{detail}"
    );
}

/// §6.7, wire order without a deadlock: a host that answers the register probe, then
/// withdraws `channels.register` by a policy Request and reads nothing more of the
/// checker's until that Request's receipt comes (its paired ping waits unanswered till
/// then). The answer came before the withdrawal, so it is judged under the grant before
/// it; and the receipt is written at once, so the ping is answered: a checker that held
/// the host's Request behind the ping's answer would wait out its step for nothing.
#[tokio::test]
async fn a_host_awaiting_its_receipt_behind_a_probe_answer_is_not_held_up() {
    let grant = json!(["pushEvents", "channels.register"]);
    let (mut sent, mut held, mut to_hold) = (false, None::<Value>, true);
    let doc = scripted("receipt-awaited.json", head(grant), |m| {
        if m["id"] == "p2" && m.get("method").is_none() {
            // The receipt: the host reads on, and answers the ping it held.
            return held.take().map_or_else(String::new, |p| ok(&p, json!({})));
        }
        if sent && to_hold && m["method"] == "ping" {
            to_hold = false;
            held = Some(m.clone());
            return String::new();
        }
        let probe =
            m["method"] == "channels/register" && m["params"]["channels"][0]["id"] == "check:a";
        if !probe || sent {
            return strict(m, false);
        }
        sent = true;
        let answer = ok(
            m,
            json!({ "results": [{ "id": "check:a", "accepted": true },
                                { "id": "check:b", "accepted": true }] }),
        );
        let withdraw = json!({ "jsonrpc": "2.0", "id": "p2", "method": "featureSets/update",
                               "params": { "effectiveCapabilities": ["pushEvents"] } });
        format!("{answer}{}", line(&withdraw))
    })
    .await;
    assert!(sent, "the register probe came: {doc:#}");
    let (status, detail) = verdict(&doc, "host.register-itemized");
    assert_eq!(status, "pass", "{detail}");
    let (status, detail) = verdict(&doc, "host.requests-independent");
    assert_ne!(status, "fail", "{detail}");
    assert!(!detail.contains("no answer"), "{detail}");
}

/// §6.7, wire order, for the verdicts read beside `Meanwhile`: the host refuses the push
/// under `check.typo` (its `uses` invalid, §6.4 rule 1) with an error, then withdraws
/// `pushEvents` before answering the paired ping. The refusal came under the grant that
/// allowed pushes, so `host.invalid-uses-refused` judges it (pass); it had skipped, saying
/// the host withdrew `pushEvents` while the probe was outstanding.
#[tokio::test]
async fn a_refusal_before_a_withdrawal_is_judged_under_the_grant_it_came_under() {
    let mut sent = false;
    let doc = scripted(
        "typo-then-withdraw.json",
        head(json!(["pushEvents"])),
        |m| {
            let typo = m["method"] == "push/event" && m["params"]["featureSet"] == "check.typo";
            if !typo || std::mem::replace(&mut sent, true) {
                return strict(m, false);
            }
            let refusal = err(
                m,
                json!({ "code": -32001, "message": "Feature set not enabled",
                                         "data": { "featureSet": "check.typo" } }),
            );
            let withdraw = json!({ "jsonrpc": "2.0", "id": "p2", "method": "featureSets/update",
                                   "params": { "effectiveCapabilities": [] } });
            format!("{refusal}{}", line(&withdraw))
        },
    )
    .await;
    assert!(sent, "the typo probe came: {doc:#}");
    let (status, detail) = verdict(&doc, "host.invalid-uses-refused");
    assert_eq!(status, "pass", "{detail}");
}

/// F4 (§10.5, §10.1 with §8): text nested under a listed member passed, the scans stopping
/// at the top level: a `completed` signal whose `usage` carries `assistantText`, and a hook
/// whose `model` carries `lastPrompt` with `observe` not granted. Each now warns naming the
/// nested member; a `usage` carrying a denylisted `text` fails (the library's scan reaches
/// nested members too).
#[tokio::test]
async fn text_nested_under_a_listed_member_is_read() {
    for denylisted in [false, true] {
        let key = if denylisted { "text" } else { "assistantText" };
        let signals = [
            json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
                "inferenceId": "q", "conversationId": "c", "turnIndex": 0,
                "phase": "started" } }),
            json!({ "jsonrpc": "2.0", "method": "inference/lifecycle", "params": {
                "inferenceId": "q", "conversationId": "c", "turnIndex": 0,
                "phase": "completed",
                "usage": { "inputTokens": 1, "outputTokens": 1, key: "the full reply" } } }),
            json!({ "jsonrpc": "2.0", "id": "h1", "method": "context/beforeInference",
                "params": { "inferenceId": "i2", "conversationId": "c", "turnIndex": 1,
                    "model": { "id": "m", "vendor": "v", "contextWindow": 1,
                               "capabilities": [], "lastPrompt": "secret user text" } } }),
        ];
        let mut pending: String = signals.iter().map(line).collect();
        let grant = json!([
            "pushEvents",
            "inferenceLifecycle",
            "contextHooks.beforeInference.inject.beforeUser"
        ]);
        let doc = scripted(&format!("nested-{denylisted}.json"), head(grant), |m| {
            format!("{}{}", std::mem::take(&mut pending), strict(m, false))
        })
        .await;
        let (status, detail) = verdict(&doc, "host.lifecycle-metadata-only");
        let expected = if denylisted { "fail" } else { "warn" };
        assert_eq!(status, expected, "{detail}");
        assert!(detail.contains(&format!("usage.{key}")), "{detail}");
        let (status, detail) = verdict(&doc, "host.user-message-redacted");
        assert_eq!(status, "warn", "{detail}");
        assert!(detail.contains("model.lastPrompt"), "{detail}");
    }
}

/// F8a (§14.3, §14.2): a host whose `channels/list` names a channel the checker never
/// registered (`evil:invented`), or one id twice, passed `host.channels-list-complete`
/// since it named `check:a`. Each now warns naming the entry; the honest list passes.
#[tokio::test]
async fn a_list_inventing_or_repeating_a_channel_warns() {
    let honest = json!([{ "id": "check:a", "type": "check" }]);
    let invented = json!([{ "id": "check:a", "type": "check" },
                          { "id": "evil:invented", "type": "evil" }]);
    let repeated = json!([{ "id": "check:a", "type": "check" },
                          { "id": "check:a", "type": "check" }]);
    for (name, listed, expected, said) in [
        ("honest", honest, "pass", "check:a among them"),
        ("invented", invented, "warn", "evil:invented"),
        ("repeated", repeated, "warn", "repeats the id"),
    ] {
        let grant = json!(["pushEvents", "channels.register"]);
        let doc = scripted(&format!("list-{name}.json"), head(grant), |m| {
            match m["method"].as_str().unwrap_or("") {
                "channels/register" => {
                    let results: Vec<Value> = m["params"]["channels"]
                        .as_array()
                        .map(|cs| {
                            cs.iter()
                                .map(|c| json!({ "id": c["id"], "accepted": true }))
                                .collect()
                        })
                        .unwrap_or_default();
                    ok(m, json!({ "results": results }))
                }
                "channels/list" => ok(m, json!({ "channels": listed })),
                _ => strict(m, false),
            }
        })
        .await;
        let (status, detail) = verdict(&doc, "host.channels-list-complete");
        assert_eq!(status, expected, "{name}: {detail}");
        assert!(detail.contains(said), "{name}: {detail}");
    }
}
