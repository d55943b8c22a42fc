//! `mcpl check-host` against hosts a reviewer ran (r1: M1–M3, W2, W3): a defect the probes
//! let through (fan-out pipelined behind the policy Request, a `channels/incoming` batch
//! validated by its first message, `channels/changed` never sent), and verdicts that blamed the safe behaviour (a refusal after a reduction sent as a
//! Notification, `-32002` with `pushEvents` not granted). Each host is raw lines over the
//! checker's stdio, so what it sends, and in which order, is exactly what the test writes:
//! no verdict here hangs on timing.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Only a hung checker reaches it: its own bound with these flags is 24 × 1 + 1 + 0 s.
const GUARD: Duration = Duration::from_secs(25 + 60);

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-slips-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn line(v: Value) -> String {
    format!("{v}\n")
}

/// The host's `initialize` (advertising every MCPL path, so the own-advertisement warning
/// stays out of the way), `notifications/initialized`, and its policy Request (id 2)
/// granting `grant`.
fn head(grant: &[&str]) -> String {
    let mcpl = json!({ "version": "0.5", "pushEvents": true,
        "inferenceRequest": { "streaming": true }, "modelInfo": true, "inferenceLifecycle": true,
        "contextHooks": { "beforeInference": true },
        "channels": { "register": true, "incoming": true, "publish": true } });
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18",
                    "capabilities": { "experimental": { "mcpl": mcpl } },
                    "clientInfo": { "name": "slips", "version": "0" } } });
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let policy = json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                         "params": { "effectiveCapabilities": grant } });
    format!("{}{}{}", line(init), line(initialized), line(policy))
}

/// The answer to the checker's request `m`: a result.
fn result(m: &Value, r: Value) -> String {
    line(json!({ "jsonrpc": "2.0", "id": m["id"], "result": r }))
}

/// The answer to the checker's request `m`: an error with `code`.
fn error(m: &Value, code: i64) -> String {
    line(json!({ "jsonrpc": "2.0", "id": m["id"],
                 "error": { "code": code, "message": "refused by the scripted host" } }))
}

/// Whether `m` is the checker's receipt for the host's policy Request (id 2).
fn is_receipt(m: &Value) -> bool {
    m.get("method").is_none() && m["id"] == 2 && m.get("result").is_some()
}

/// A host over raw pipes: writes `head`, then, for every message the checker writes
/// (requests and responses alike, in order), the lines `react` returns. The checker runs
/// with `--timeout 1 --inference-timeout 1 --watch 0`: it ends the run once its probes are
/// done. Returns the JSON report.
async fn raw_host(name: &str, head: String, mut react: impl FnMut(&Value) -> String) -> Value {
    let report = report_path(name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--json", "--timeout", "1"])
        .args(["--inference-timeout", "1", "--watch", "0", "--report"])
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
    let host = async {
        while let Ok(Some(l)) = lines.next_line().await {
            let Ok(m) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            let out = react(&m);
            if !out.is_empty() && stdin.write_all(out.as_bytes()).await.is_err() {
                break;
            }
        }
        drop(stdin);
        child.wait().await
    };
    let status = tokio::time::timeout(GUARD, host)
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

/// A strict host's answer to a request of the checker's: `ping` answered, anything else
/// refused `-32002`; nothing for a response.
fn refuse_all(m: &Value) -> String {
    match m["method"].as_str() {
        None => String::new(),
        Some("ping") => result(m, json!({})),
        Some(_) => error(m, -32002),
    }
}

/// A hook (`context/beforeInference`, id 3) and two `inference/lifecycle` signals.
fn fan_out() -> (String, String) {
    let hook = json!({ "jsonrpc": "2.0", "id": 3, "method": "context/beforeInference",
        "params": { "inferenceId": "inf_1", "conversationId": "c1", "turnIndex": 0,
                    "userMessage": null,
                    "model": { "id": "m", "vendor": "v", "contextWindow": 1000,
                               "capabilities": [] } } });
    let signal = |phase: &str| {
        json!({ "jsonrpc": "2.0", "method": "inference/lifecycle",
                "params": { "inferenceId": "inf_1", "conversationId": "c1",
                            "turnIndex": 0, "phase": phase } })
    };
    (
        line(hook),
        format!("{}{}", line(signal("started")), line(signal("completed"))),
    )
}

/// M1 (§5.3, §6.7: fan-out begins only once the receipt is read, and a host cannot have read
/// a receipt not yet written): a host that writes its policy Request and, without awaiting
/// the answer, a hook or two lifecycle signals. The checker read them behind the Request
/// and judged them when it handled them, after writing its receipt: both passed ("2
/// context/beforeInference message(s) conform", "4 … within the grant"). The same host
/// sending them once it has read the receipt conforms (no verdict on the ping the checker
/// now sends ahead of its receipt).
#[tokio::test]
async fn fan_out_pipelined_behind_the_policy_request_is_before_the_receipt() {
    let grant = [
        "contextHooks.beforeInference.inject.beforeUser",
        "inferenceLifecycle",
    ];
    let (hook, signals) = fan_out();
    let (early_hook, early_signals) = tokio::join!(
        raw_host("early-hook.json", head(&grant) + &hook, refuse_all),
        raw_host("early-lifecycle.json", head(&grant) + &signals, refuse_all),
    );
    let (status, detail) = verdict(&early_hook, "host.hooks-after-ready");
    assert_eq!(status, "fail", "{early_hook:#}");
    assert!(detail.contains("before the policy receipt"), "{detail}");
    let (status, detail) = verdict(&early_signals, "host.deliveries-within-grant");
    assert_eq!(status, "fail", "{early_signals:#}");
    assert!(detail.contains("before the policy receipt"), "{detail}");

    let mut sent = false;
    let after = raw_host("after-receipt.json", head(&grant), move |m| {
        if is_receipt(m) && !std::mem::replace(&mut sent, true) {
            return format!("{hook}{signals}");
        }
        refuse_all(m)
    })
    .await;
    for id in ["host.hooks-after-ready", "host.deliveries-within-grant"] {
        assert_eq!(verdict(&after, id).0, "pass", "{id}: {after:#}");
    }
}

/// A host granting channels whose `channels/incoming` is judged by `incoming` (the ids of
/// the channels it holds, the messages); `channels/register` and `channels/changed` are
/// answered one result per descriptor, accepting each id not yet held. Before it has read
/// its receipt, it refuses everything but `ping` (§5.3).
fn channel_host(
    incoming: impl Fn(&BTreeSet<String>, &[Value]) -> Value + Send + 'static,
) -> impl FnMut(&Value) -> String {
    let mut held = BTreeSet::new();
    let mut ready = false;
    move |m| {
        ready |= is_receipt(m);
        if !ready {
            return refuse_all(m);
        }
        let itemize = |held: &mut BTreeSet<String>, descriptors: &Value| {
            let results: Vec<Value> = descriptors
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| {
                    let id = d["id"].as_str().unwrap_or_default().to_owned();
                    json!({ "id": id, "accepted": held.insert(id.clone()) })
                })
                .collect();
            json!({ "results": results })
        };
        match m["method"].as_str() {
            Some("channels/register") => {
                let r = itemize(&mut held, &m["params"]["channels"]);
                result(m, r)
            }
            Some("channels/changed") => {
                let r = itemize(&mut held, &m["params"]["added"]);
                result(m, r)
            }
            Some("channels/incoming") => {
                let messages = m["params"]["messages"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                match incoming(&held, &messages) {
                    Value::Null => error(m, -32023),
                    r => result(m, r),
                }
            }
            _ => refuse_all(m),
        }
    }
}

/// M2 (§14.5: each message of `channels/incoming` is validated on its own, against the
/// channels actually registered): a host that refuses the whole batch when its first
/// message's channel is unknown and otherwise accepts every message. The probe's batch held
/// two unregistered channels, so it passed. Now, with `check:a` registered, a batch mixing
/// it with an unregistered channel is sent: accepting the second fails; a host judging each
/// message passes. M3 (§14.1, §14.5): the same hosts answer `channels/changed` one result
/// per descriptor, which `host.changed-itemized` passes.
#[tokio::test]
async fn a_mixed_incoming_batch_is_judged_message_by_message() {
    let grant = ["channels.register", "channels.incoming"];
    let first_only = |held: &BTreeSet<String>, messages: &[Value]| {
        let first = messages.first().and_then(|m| m["channelId"].as_str());
        if !first.is_some_and(|c| held.contains(c)) {
            return Value::Null;
        }
        let results: Vec<Value> = messages
            .iter()
            .map(|m| json!({ "messageId": m["messageId"], "accepted": true }))
            .collect();
        json!({ "results": results })
    };
    let each = |held: &BTreeSet<String>, messages: &[Value]| {
        let known = |m: &Value| m["channelId"].as_str().is_some_and(|c| held.contains(c));
        if !messages.iter().any(known) {
            return Value::Null;
        }
        let results: Vec<Value> = messages
            .iter()
            .map(|m| json!({ "messageId": m["messageId"], "accepted": known(m) }))
            .collect();
        json!({ "results": results })
    };
    let (first, per_message) = tokio::join!(
        raw_host(
            "incoming-first.json",
            head(&grant),
            channel_host(first_only)
        ),
        raw_host("incoming-each.json", head(&grant), channel_host(each)),
    );
    let id = "host.incoming-unregistered-refused";
    let (status, detail) = verdict(&first, id);
    assert_eq!(status, "fail", "{first:#}");
    assert!(detail.contains("not refused"), "{detail}");
    assert_eq!(verdict(&per_message, id).0, "pass", "{per_message:#}");
    for doc in [&first, &per_message] {
        let (status, detail) = verdict(doc, "host.changed-itemized");
        assert_eq!(status, "pass", "{doc:#}");
        assert!(detail.contains("one result per descriptor"), "{detail}");
    }
}

/// M3 (§14.1: `channels/changed` needs `channels.register`; §14.5: its Request form is
/// answered one result per descriptor): the checker never sent it. A host granting
/// `channels.register` that answers it with one flag for the whole request fails, and so
/// does a host that does not grant `channels.register` yet accepts it.
#[tokio::test]
async fn channels_changed_is_refused_without_the_grant_and_itemized_with_it() {
    let whole = |m: &Value| match m["method"].as_str() {
        Some("channels/changed") => result(m, json!({ "accepted": true })),
        _ => refuse_all(m),
    };
    let ungated = |m: &Value| match m["method"].as_str() {
        Some("channels/changed") => result(
            m,
            json!({ "results": [ { "id": "check:changed", "accepted": true },
                                 { "id": "check:a", "accepted": true } ] }),
        ),
        _ => refuse_all(m),
    };
    let (whole, ungated) = tokio::join!(
        raw_host("changed-whole.json", head(&["channels.register"]), whole),
        raw_host("changed-ungated.json", head(&[]), ungated),
    );
    let id = "host.changed-itemized";
    let (status, detail) = verdict(&whole, id);
    assert_eq!(status, "fail", "{whole:#}");
    assert!(detail.contains("not one per descriptor"), "{detail}");
    let (status, detail) = verdict(&ungated, id);
    assert_eq!(status, "fail", "{ungated:#}");
    assert!(
        detail.contains("channels.register is not granted"),
        "{detail}"
    );
}

/// W2 (§6.7: a reduction binds the host first, whatever its carrier): a host that, once it
/// has read its receipt, narrows its grant by a `featureSets/update` Notification (its
/// `disabled` list, which the server applies, names `check.hints`; its
/// `effectiveCapabilities`, which the server discards, drop `pushEvents` and
/// `inferenceRequest`) and then refuses pushes and inference `-32002`. The Notification
/// fails `host.policy-is-request`; the refusals had failed `host.push-follows-grant` too
/// ("the policy allows check.push, yet the push was refused"), telling the author to accept
/// what the host had withdrawn. Either answer now conforms there, and in
/// `host.inference-follows-grant`; `-32002` passes `host.rejects-with-error` (W3).
#[tokio::test]
async fn a_refusal_after_a_reduction_by_notification_is_not_blamed() {
    let grant = ["pushEvents", "inferenceRequest", "channels.register"];
    let mut narrowed = false;
    let doc = raw_host("reduce-notification.json", head(&grant), move |m| {
        if is_receipt(m) && !std::mem::replace(&mut narrowed, true) {
            let n = json!({ "jsonrpc": "2.0", "method": "featureSets/update",
                "params": { "disabled": ["check.hints"],
                            "effectiveCapabilities": ["channels.register"] } });
            return line(n);
        }
        refuse_all(m)
    })
    .await;
    let (status, detail) = verdict(&doc, "host.policy-is-request");
    assert_eq!(status, "fail", "{doc:#}");
    assert!(detail.contains("Notification"), "{detail}");
    for id in [
        "host.push-follows-grant",
        "host.inference-follows-grant",
        "host.rejects-with-error",
        "host.register-itemized",
    ] {
        let (status, detail) = verdict(&doc, id);
        assert_eq!(status, "pass", "{id}: {detail}");
    }
}

/// W3 (§6.6: `-32002` for a denied capability): a host granting nothing refuses the push
/// under an undeclared feature set `-32002`, as admission refuses before the set is looked
/// at; `host.rejects-with-error` warned "SHOULD be -32003". The same host answers
/// `channels/list` though `channels.register` is not granted: `host.answers-follow-grant`
/// fails citing §14.1 and §5.4, not §12's `model/info` rule it had cited first. M3: its
/// refusal of `channels/changed` passes `host.changed-itemized`.
#[tokio::test]
async fn a_host_granting_nothing_is_judged_by_the_rules_that_apply() {
    let doc = raw_host("grant-nothing.json", head(&[]), |m| {
        match m["method"].as_str() {
            Some("channels/list") => result(m, json!({ "channels": [] })),
            _ => refuse_all(m),
        }
    })
    .await;
    let (status, detail) = verdict(&doc, "host.rejects-with-error");
    assert_eq!(status, "pass", "{detail}");
    assert!(detail.contains("-32002"), "{detail}");
    let (status, detail) = verdict(&doc, "host.answers-follow-grant");
    assert_eq!(status, "fail", "{doc:#}");
    assert!(detail.contains("§14.1"), "{detail}");
    assert!(!detail.contains("§12"), "{detail}");
    let (status, detail) = verdict(&doc, "host.changed-itemized");
    assert_eq!(status, "pass", "{detail}");
    assert!(detail.contains("refused with error -32002"), "{detail}");
}

/// The same class, found by the hunt: `-32003` (§6.6: the unknown feature set's code) is a
/// refusal, yet refusing the inference sent before the receipt with it warned "the host may
/// have run the inference". And a `channels/incoming` for `check:a`, never registered,
/// refused `-32023` with `channels.incoming` not granted passes
/// `host.incoming-follows-grant`, saying it shows nothing of the grant rule (a host ignoring
/// the grant refuses that channel too).
#[tokio::test]
async fn an_early_inference_refused_as_unknown_set_is_a_refusal() {
    let doc = raw_host("early-unknown-set.json", head(&[]), |m| {
        match m["method"].as_str() {
            Some("inference/request") => error(m, -32003),
            Some("channels/incoming") => error(m, -32023),
            _ => refuse_all(m),
        }
    })
    .await;
    let (status, detail) = verdict(&doc, "host.inference-refused-before-ready");
    assert_eq!(status, "pass", "{detail}");
    assert_eq!(detail, "refused with error -32003");
    let (status, detail) = verdict(&doc, "host.incoming-follows-grant");
    assert_eq!(status, "pass", "{detail}");
    assert!(detail.contains("the grant rule is not shown"), "{detail}");
}

/// §10.1 (r1 round 3, F2): a hook whose params are nulls and wrong types, or leave out
/// `userMessage`, fails `host.hook-params-shape`, naming what is wrong; before, no check
/// judged a hook's params and such a host passed every check. The well-formed hook of
/// [`fan_out`] passes it.
#[tokio::test]
async fn a_hook_with_malformed_params_fails_its_shape() {
    let grant = ["contextHooks.beforeInference.inject.beforeUser"];
    let bad = |params: Value| {
        let mut sent = false;
        let hook = line(json!({ "jsonrpc": "2.0", "id": 3,
            "method": "context/beforeInference", "params": params }));
        move |m: &Value| {
            if is_receipt(m) && !std::mem::replace(&mut sent, true) {
                return hook.clone();
            }
            refuse_all(m)
        }
    };
    let nulls = json!({ "inferenceId": null, "conversationId": null, "turnIndex": null,
                        "userMessage": null, "model": null });
    let typed = json!({ "inferenceId": 5, "conversationId": "c1", "turnIndex": "x" });
    let (hook, _) = fan_out();
    let mut sent = false;
    let (nulls, typed, good) = tokio::join!(
        raw_host("hook-nulls.json", head(&grant), bad(nulls)),
        raw_host("hook-typed.json", head(&grant), bad(typed)),
        raw_host("hook-good.json", head(&grant), move |m| {
            if is_receipt(m) && !std::mem::replace(&mut sent, true) {
                return hook.clone();
            }
            refuse_all(m)
        }),
    );
    let (status, detail) = verdict(&nulls, "host.hook-params-shape");
    assert_eq!(status, "fail", "{nulls:#}");
    assert!(
        detail.contains("inferenceId null is not a string"),
        "{detail}"
    );
    assert!(detail.contains("turnIndex null"), "{detail}");
    let (status, detail) = verdict(&typed, "host.hook-params-shape");
    assert_eq!(status, "fail", "{typed:#}");
    assert!(detail.contains("inferenceId 5"), "{detail}");
    assert!(detail.contains("userMessage missing"), "{detail}");
    assert_eq!(
        verdict(&good, "host.hook-params-shape").0,
        "pass",
        "{good:#}"
    );
}
