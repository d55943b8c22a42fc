//! `mcpl check-host`'s manifest-change probes judged by §6.7's order against a policy
//! Request and its receipt: a reduction takes effect before its Request is sent, an
//! expansion only once its receipt is read. The library host, reached through a proxy
//! that rewrites what crosses it, is made to take a change in the wrong order; the library
//! host as it is (revoked before the Request, activated at the receipt) still passes. And
//! the checker's own announcements are schema-valid (App. B.3), so a strict host fetches
//! them.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

mod common;
mod manifest_proxy;

use manifest_proxy::*;

/// An accepted `channels/incoming` answering `request`, as a host still honouring it sends.
fn accepted(request: &Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"], "result": { "results": [
        { "messageId": request["params"]["messages"][0]["messageId"], "accepted": true,
          "conversationId": "conv-1" } ] } })
}

/// A proxy rule for a host that tells the fetched narrowing by its `featureSets/update`
/// Request but revokes `channels.incoming` only when that Request's receipt arrives: while
/// the Request is unanswered, `channels/incoming` is accepted for the host.
fn revoking_at_receipt() -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let mut pending: Option<Value> = None;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
        }
        // The second fetch is the valid narrowing; the host's Request after it tells it.
        if to == To::Checker && answered == 2 && v["method"] == "featureSets/update" {
            pending = Some(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && pending.as_ref() == Some(&v["id"]) {
            pending = None;
        }
        if to == To::Host && pending.is_some() && v["method"] == "channels/incoming" {
            return vec![(To::Checker, accepted(&v))];
        }
        vec![(to, v)]
    })
}

/// §6.7 (a reduction takes effect before its Request is sent), §17.5 step 3: a host that
/// sends the narrowing Request first and revokes only at its receipt fails
/// `host.manifest-removals-revoked`, the probe written while the receipt was held.
#[tokio::test]
async fn a_host_revoking_only_at_the_receipt_fails_removals_revoked() {
    let (_, doc) = run("revoke_late.json", revoking_at_receipt()).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[2]]), "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("receipt was held"), "{d}");
    assert!(d.contains("§6.7"), "{d}");
}

/// The library host revokes before it sends the Request: the probe written while the
/// receipt is held is refused, and says so.
#[tokio::test]
async fn a_host_revoking_before_its_request_passes_removals_revoked() {
    let (_, doc) = run("revoke_first.json", Box::new(|to, v| vec![(to, v)])).await;
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(
        d.contains("channels/incoming for check:a while the narrowing Request's receipt was held"),
        "{d}"
    );
    assert_eq!(phase_with(&doc, "fail"), set(&[]), "{doc:#}");
}

/// A proxy rule for a host that, once the partially invalid manifest (the third fetch) is
/// read, grants the added `modelInfo` by a `featureSets/update` Request of its own
/// (`widen-1`, its receipt kept from the library host) and answers `model/info` from when
/// it sends that Request (`early`) or only once the receipt passed (`!early`).
fn widening(early: bool) -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let (mut sent, mut receipted) = (false, false);
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && v["id"] == "widen-1" {
            receipted = true;
            return vec![];
        }
        let active = if early { sent } else { receipted };
        if to == To::Host && active && v["method"] == "model/info" {
            let info = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "id": "m", "vendor": "p", "contextWindow": 1000,
                            "capabilities": [] } });
            return vec![(To::Checker, info)];
        }
        let mut out = vec![(to, v.clone())];
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 && !sent {
                sent = true;
                let widen = json!({ "jsonrpc": "2.0", "id": "widen-1",
                    "method": "featureSets/update", "params": { "effectiveCapabilities":
                        ["pushEvents", "channels.register", "modelInfo",
                         "contextHooks.beforeInference.inject.beforeUser"] } });
                out.push((To::Checker, widen));
            }
        }
        out
    })
}

/// §6.7 (an expansion takes effect only once its receipt is read), §17.5 step 3: a host
/// answering `model/info` from when it sends the Request granting `modelInfo`, before the
/// receipt, fails `host.manifest-additions-not-granted`.
#[tokio::test]
async fn a_host_activating_an_addition_when_it_asks_fails_additions_not_granted() {
    let (_, doc) = run("widen_early.json", widening(true)).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[4]]), "{doc:#}");
    let d = detail(&doc, IDS[4]);
    assert!(
        d.contains("model/info got a result") && d.contains("was held"),
        "{d}"
    );
}

/// The same host activating `modelInfo` only once the receipt came passes: refused while
/// the receipt was held, answered after it.
#[tokio::test]
async fn a_host_activating_an_addition_at_its_receipt_passes_additions_not_granted() {
    let (_, doc) = run("widen_at_receipt.json", widening(false)).await;
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
    let d = detail(&doc, IDS[4]);
    assert!(
        d.contains("model/info refused while the receipt of the Request granting modelInfo"),
        "{d}"
    );
    assert_eq!(phase_with(&doc, "fail"), set(&[]), "{doc:#}");
}

/// App. B.3, §17.3: a host ignoring a `mcpl/manifestChanged` whose `revision` is not of the
/// digest's shape (as it MAY, the announcement being schema-invalid) still gets the phase's
/// checks judged: every announcement the checker sends is well-formed, the unparseable
/// change's included, and each names a revision of its own (§17.8).
#[tokio::test]
async fn a_host_ignoring_schema_invalid_announcements_still_gets_the_checks_judged() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = seen.clone();
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            let revision = v["params"]["revision"].as_str().unwrap_or("").to_owned();
            kept.lock().unwrap().push(revision.clone());
            if !well_formed(&revision) {
                return vec![];
            }
        }
        vec![(to, v)]
    });
    let (_, doc) = run("strict_announce.json", rule).await;
    let revisions = seen.lock().unwrap().clone();
    assert_eq!(revisions.len(), 3, "{revisions:?}");
    for r in &revisions {
        assert!(well_formed(r), "{r:?} is not of App. B.3's shape");
    }
    let distinct: std::collections::BTreeSet<_> = revisions.iter().collect();
    assert_eq!(distinct.len(), 3, "{revisions:?}");
    assert_eq!(phase_with(&doc, "skip"), set(&[]), "{doc:#}");
    assert_eq!(phase_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(status(&doc, IDS[1]), "pass", "{doc:#}");
}

/// App. B.3's `^sha256:[A-Za-z0-9_-]{43}$`, written out here (not the library's rule) so
/// the test judges the checker's announcements independently.
fn well_formed(revision: &str) -> bool {
    revision.strip_prefix("sha256:").is_some_and(|b| {
        b.len() == 43
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    })
}

/// §6.7, §5.4: a host whose policy Request after the narrowed fetch still grants the
/// withdrawn `channels.incoming` (the library host's Request with it put back) has told no
/// narrowing: `host.manifest-narrowing-requested` does not pass, and the withdrawn probe,
/// gated on a Request that left it out, is not judged as if one had.
#[tokio::test]
async fn a_request_still_granting_the_withdrawn_capability_tells_no_narrowing() {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let rule: Rule = Box::new(move |to, mut v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
        }
        if to == To::Checker && answered == 2 && v["method"] == "featureSets/update" {
            if let Some(caps) = v["params"]["effectiveCapabilities"].as_array_mut() {
                caps.push(json!("channels.incoming"));
            }
        }
        vec![(to, v)]
    });
    let (_, doc) = run("still_granting.json", rule).await;
    let told = "host.manifest-narrowing-requested";
    assert_eq!(status(&doc, told), "fail", "{doc:#}");
    assert!(detail(&doc, told).contains("still granting"), "{doc:#}");
    let withdrawn = "host.manifest-withdrawn-refused";
    assert_eq!(status(&doc, withdrawn), "skip", "{doc:#}");
}

/// The check judging the withdrawn capability once the narrowing is in force.
const WITHDRAWN: &str = "host.manifest-withdrawn-refused";

/// A rule answering the checker's withdrawn probe (its one message `withdrawn-1`) itself
/// with `answer` (given the request's id); everything else passes through.
fn answering_withdrawn(answer: fn(Value) -> Value) -> Rule {
    Box::new(move |to, v| {
        let probe = v["params"]["messages"][0]["messageId"] == "withdrawn-1";
        if to == To::Host && v["method"] == "channels/incoming" && probe {
            return vec![(To::Checker, answer(v["id"].clone()))];
        }
        vec![(to, v)]
    })
}

/// §6.6: a host refusing the withdrawn capability per message inside a result fails, the
/// detail saying the defect is the refusal's form, not that it still honours it.
#[tokio::test]
async fn a_per_message_refusal_of_the_withdrawn_capability_fails_for_its_form() {
    let rule = answering_withdrawn(|id| {
        json!({ "jsonrpc": "2.0", "id": id, "result": { "results": [
            { "messageId": "withdrawn-1", "accepted": false, "reason": "denied" } ] } })
    });
    let (_, doc) = run("withdrawn_form.json", rule).await;
    assert_eq!(status(&doc, WITHDRAWN), "fail", "{doc:#}");
    let d = detail(&doc, WITHDRAWN);
    assert!(d.contains("refusal's form") && d.contains("§6.6"), "{d}");
    assert!(!d.contains("still honours"), "{d}");
}

/// §14.6 documents `-32017` for lacking the capability to receive from a channel: a
/// refusal with it warns (not `-32002`), without calling the code undocumented.
#[tokio::test]
async fn a_channel_not_permitted_refusal_of_the_withdrawn_capability_warns() {
    let rule = answering_withdrawn(|id| {
        json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32017,
            "message": "Channel not permitted", "data": { "channelId": "check:a" } } })
    });
    let (_, doc) = run("withdrawn_32017.json", rule).await;
    assert_eq!(status(&doc, WITHDRAWN), "warn", "{doc:#}");
    let d = detail(&doc, WITHDRAWN);
    assert!(d.contains("-32017") && d.contains("§14.6"), "{d}");
    assert!(!d.contains("undocumented"), "{d}");
}

/// A host silent to `channels/incoming` after the narrowed fetch: the withdrawn probe is
/// not sent (skipped, saying why), so the third change keeps its budget and its checks are
/// judged.
#[tokio::test]
async fn a_host_silent_to_the_incoming_probe_skips_the_withdrawn_probe() {
    let mut fetches = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Host && fetches == 2 && v["method"] == "channels/incoming" {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("withdrawn_silent.json", rule).await;
    assert_eq!(status(&doc, WITHDRAWN), "skip", "{doc:#}");
    assert!(detail(&doc, WITHDRAWN).contains("no answer"), "{doc:#}");
    assert_eq!(status(&doc, IDS[3]), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
}

/// A proxy rule for a host that handles nothing else while a `featureSets/update` Request
/// of its own awaits its receipt (§6.7 does not require it to answer meanwhile): what the
/// checker sends then reaches the host only after that receipt, in order. Once the
/// partially invalid manifest (the third fetch) is read, it also grants what that manifest
/// adds by a Request of its own (`widen-deaf`, its receipt kept from the library host, which
/// still refuses both).
fn deaf_until_receipt() -> Rule {
    let mut pending: Vec<Value> = Vec::new();
    let mut kept: Vec<Value> = Vec::new();
    let mut fetches = Vec::new();
    let mut answered = 0;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Checker && v["method"] == "featureSets/update" && v.get("id").is_some() {
            pending.push(v["id"].clone());
            return vec![(to, v)];
        }
        if to == To::Checker {
            return vec![(to, v)];
        }
        let mut out = Vec::new();
        if v.get("method").is_none() && pending.contains(&v["id"]) {
            pending.retain(|p| *p != v["id"]);
            if v["id"] != "widen-deaf" {
                out.push((To::Host, v.clone()));
            }
            if pending.is_empty() {
                out.extend(kept.drain(..).map(|k| (To::Host, k)));
            }
            return out;
        }
        if !pending.is_empty() {
            kept.push(v);
            return out;
        }
        out.push((To::Host, v.clone()));
        if v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 {
                pending.push(json!("widen-deaf"));
                let widen = json!({ "jsonrpc": "2.0", "id": "widen-deaf",
                    "method": "featureSets/update", "params": { "effectiveCapabilities":
                        ["pushEvents", "channels.register", "channels.incoming", "modelInfo",
                         "contextHooks.beforeInference.inject.beforeUser"] } });
                out.push((To::Checker, widen));
            }
        }
        out
    })
}

/// §6.7: a conforming host answering nothing while its Request's receipt is outstanding
/// loses the phase no budget to the probes sent while the receipt is held: each is bounded
/// by the hold's own bound and, once one got no answer, none is sent again, so the partial
/// change's and the additions' checks are still judged, and nothing fails (silence is no
/// acceptance).
#[tokio::test]
async fn a_host_deaf_while_its_receipt_is_held_still_gets_the_later_checks_judged() {
    let (_, doc) = run("deaf_until_receipt.json", deaf_until_receipt()).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[3]), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
}

/// A proxy rule for a host that, once the partially invalid manifest (the third fetch) is
/// read, sends two widening Requests at once (`widen-a` granting `modelInfo`, `widen-b`
/// granting `channels.incoming` too; their receipts kept from the library host) and answers
/// `model/info` from when it sends them, before either receipt.
fn pipelined_widenings() -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let mut sent = false;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host
            && v.get("method").is_none()
            && ["widen-a", "widen-b"].contains(&v["id"].as_str().unwrap_or(""))
        {
            return vec![];
        }
        if to == To::Host && sent && v["method"] == "model/info" {
            let info = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "id": "m", "vendor": "p", "contextWindow": 1000,
                            "capabilities": [] } });
            return vec![(To::Checker, info)];
        }
        let mut out = vec![(to, v.clone())];
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 && !sent {
                sent = true;
                let base = [
                    "pushEvents",
                    "channels.register",
                    "contextHooks.beforeInference.inject.beforeUser",
                    "modelInfo",
                ];
                let mut wider = base.to_vec();
                wider.push("channels.incoming");
                for (id, caps) in [("widen-a", base.to_vec()), ("widen-b", wider)] {
                    let widen = json!({ "jsonrpc": "2.0", "id": id,
                        "method": "featureSets/update",
                        "params": { "effectiveCapabilities": caps } });
                    out.push((To::Checker, widen));
                }
            }
        }
        out
    })
}

/// §6.7: a second widening Request read while the first one's held probe awaits its answer
/// starts a hold of its own there; the probe's answer that hold reads is still the probe's
/// (finding F2), so a host answering `model/info` before either receipt fails
/// `host.manifest-additions-not-granted`.
#[tokio::test]
async fn a_host_activating_early_behind_two_pipelined_widenings_fails_additions() {
    let (_, doc) = run("widen_pipelined.json", pipelined_widenings()).await;
    assert_eq!(status(&doc, IDS[4]), "fail", "{doc:#}");
    let d = detail(&doc, IDS[4]);
    assert!(
        d.contains("model/info got a result") && d.contains("was held"),
        "{d}"
    );
}

/// §6.6, §14.5: a host refusing every `channels/incoming` after the narrowed fetch per
/// message inside a result (`accepted: false`) still refused it: the held probe, the one
/// after the fetch and the one after the third change count as refusals for the order
/// checks (finding F1); the form's defect is reported once, under
/// `host.manifest-withdrawn-refused`.
#[tokio::test]
async fn per_message_refusals_count_as_refusals_for_the_order_checks() {
    let mut fetches = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Host && fetches >= 2 && v["method"] == "channels/incoming" {
            let results: Vec<Value> = v["params"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    json!({ "messageId": m["messageId"], "accepted": false,
                                 "reason": "capability_denied" })
                })
                .collect();
            let answer = json!({ "jsonrpc": "2.0", "id": v["id"],
                                 "result": { "results": results } });
            return vec![(To::Checker, answer)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("per_message_refusals.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(
        d.contains("while the narrowing Request's receipt was held"),
        "{d}"
    );
    assert!(d.contains("every message inside a result"), "{d}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
    let d = detail(&doc, IDS[4]);
    assert!(
        d.contains("channels/incoming for check:a (channels.incoming advertised again) refused"),
        "{d}"
    );
    assert_eq!(status(&doc, WITHDRAWN), "fail", "{doc:#}");
    assert!(
        detail(&doc, WITHDRAWN).contains("refusal's form"),
        "{doc:#}"
    );
}

/// A `model/info` result answering `request`.
fn model_info(request: &Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"],
        "result": { "id": "m", "vendor": "p", "contextWindow": 1000, "capabilities": [] } })
}

/// A `featureSets/update` Request `id` of the library host's grant with `extra` added.
fn grant_request(id: &str, extra: &[&str]) -> Value {
    let mut caps = vec![
        "pushEvents",
        "channels.register",
        "contextHooks.beforeInference.inject.beforeUser",
    ];
    caps.extend_from_slice(extra);
    json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update",
            "params": { "effectiveCapabilities": caps } })
}

/// What the host of [`later_requests`] grants by its first Request (`widen-1`), what it
/// sends while the checker holds that Request's receipt, and when it answers the held
/// `model/info` probe.
#[derive(Clone, Copy, PartialEq)]
enum Later {
    /// `widen-1` grants `modelInfo`; on the held `model/info` probe, `widen-2` (granting
    /// `modelInfo` and `channels.incoming`), the probe answered right behind it.
    Early,
    /// As [`Later::Early`], the probe answered only once `widen-2`'s receipt came.
    Granting,
    /// `widen-2` grants what `widen-1` did (no expansion), the probe answered right behind
    /// it (r11 F1).
    Same,
    /// `widen-2` and `widen-3` (each granting `modelInfo` and `channels.incoming`) sent
    /// back to back, the probe answered right behind them (r11 F1, pipelined).
    Three,
    /// `[widen-2, widen-3]` as one batch, each granting what `widen-1` did, the probe
    /// answered right behind it (r11 F3).
    Batch,
    /// `widen-1` grants `channels.incoming` and `modelInfo`; on the held
    /// `channels/incoming` probe (passed on to the library host, which refuses it),
    /// `widen-2` granting the same; the held `model/info` probe answered only once
    /// `widen-2`'s receipt came (r11 F2).
    Both,
}

/// The ids of the host's own Requests in [`later_requests`].
const WIDEN: [&str; 3] = ["widen-1", "widen-2", "widen-3"];

/// `v` answers one of [`WIDEN`] (a response, or a batch of them); `Some(true)` when
/// `widen-2`'s answer is among them.
fn answers_widen(v: &Value) -> Option<bool> {
    let entries = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
    let ids: Vec<&str> = entries.iter().filter_map(|e| e["id"].as_str()).collect();
    let mine = !entries.is_empty()
        && entries.iter().all(|e| e.get("method").is_none())
        && ids.len() == entries.len()
        && ids.iter().all(|id| WIDEN.contains(id));
    mine.then(|| ids.contains(&"widen-2"))
}

/// A proxy rule for a host that, once the partially invalid manifest (the third fetch) is
/// read, sends `widen-1`, and while the checker holds its receipt sends later Requests as
/// `when` says; it answers `model/info` with a result from `widen-2`'s receipt on. The
/// receipts of its own Requests are kept from the library host.
fn later_requests(when: Later) -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let (mut sent, mut asked, mut active) = (false, false, false);
    let mut held: Option<Value> = None;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host {
            if let Some(second) = answers_widen(&v) {
                if !second {
                    return vec![];
                }
                active = true;
                return held
                    .take()
                    .map(|p| (To::Checker, model_info(&p)))
                    .into_iter()
                    .collect();
            }
        }
        let w2 = |extra: &[&str]| grant_request("widen-2", extra);
        let incoming = to == To::Host && v["method"] == "channels/incoming";
        if incoming && when == Later::Both && sent && !asked {
            asked = true;
            let widen = w2(&["channels.incoming", "modelInfo"]);
            return vec![(To::Checker, widen), (To::Host, v)];
        }
        if to == To::Host && v["method"] == "model/info" {
            if active {
                return vec![(To::Checker, model_info(&v))];
            }
            if sent && when == Later::Both {
                held = Some(v);
                return vec![];
            }
            if sent && !asked {
                asked = true;
                let both = &["channels.incoming", "modelInfo"];
                let early = (To::Checker, model_info(&v));
                return match when {
                    Later::Early => vec![(To::Checker, w2(both)), early],
                    Later::Same => vec![(To::Checker, w2(&["modelInfo"])), early],
                    Later::Three => {
                        let w3 = grant_request("widen-3", both);
                        vec![(To::Checker, w2(both)), (To::Checker, w3), early]
                    }
                    Later::Batch => {
                        let w3 = grant_request("widen-3", &["modelInfo"]);
                        let batch = json!([w2(&["modelInfo"]), w3]);
                        vec![(To::Checker, batch), early]
                    }
                    Later::Granting | Later::Both => {
                        held = Some(v);
                        vec![(To::Checker, w2(both))]
                    }
                };
            }
        }
        let mut out = vec![(to, v.clone())];
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 && !sent {
                sent = true;
                let extra: &[&str] = if when == Later::Both {
                    &["channels.incoming", "modelInfo"]
                } else {
                    &["modelInfo"]
                };
                out.push((To::Checker, grant_request("widen-1", extra)));
            }
        }
        out
    })
}

/// §6.7 (an expansion takes effect once its receipt is read): the checker writes no later
/// Request's receipt while a held probe awaits its answer (r11), so the host answering the
/// held `model/info` probe of `widen-1`'s addition only once the receipt of `widen-2`, also
/// granting `modelInfo`, came lets that probe time out, which is silence, never a fail: it
/// gets that receipt only after `widen-1`'s.
#[tokio::test]
async fn a_host_answering_a_held_probe_after_a_later_receipt_does_not_fail() {
    let (_, doc) = run("widen_second_receipt.json", later_requests(Later::Granting)).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_ne!(status(&doc, IDS[4]), "fail", "{doc:#}");
    assert!(!detail(&doc, IDS[4]).contains("not judged"), "{doc:#}");
}

/// A result judged as the held probe's early activation: the held probe's own words, not
/// the later `model/info (modelInfo added)` probe's.
fn held_use_fails(doc: &Value) {
    assert_eq!(status(doc, IDS[4]), "fail", "{doc:#}");
    let d = detail(doc, IDS[4]);
    assert!(
        d.contains("model/info got a result") && d.contains("was held"),
        "{d}"
    );
    assert!(!d.contains("not judged"), "{d}");
}

/// The same host answering the held probe right behind `widen-2`: early activation, fails.
#[tokio::test]
async fn a_held_probe_answered_behind_a_later_widening_request_fails() {
    let (_, doc) = run("widen_second_early.json", later_requests(Later::Early)).await;
    held_use_fails(&doc);
}

/// r11 F1: `widen-2` adding nothing to `widen-1`'s grant is held by no ping round trip,
/// yet its receipt is not written while the held probe awaits its answer either, so a
/// result the host gives right behind it (before it could have read any receipt granting
/// `modelInfo`) is early activation (§6.7) and fails. (Passed before: that receipt was
/// written at once and the result read after it went unjudged.)
#[tokio::test]
async fn a_held_probe_answered_behind_a_later_request_of_the_same_grant_fails() {
    let (_, doc) = run("widen_second_same.json", later_requests(Later::Same)).await;
    held_use_fails(&doc);
}

/// r11 F1, pipelined: `widen-3` read during `widen-2`'s hold had its receipt written at
/// once; now both are kept until `widen-1`'s receipt is written, so a result sent right
/// behind them is early (§6.7) and fails. (Passed before.)
#[tokio::test]
async fn a_held_probe_answered_behind_three_pipelined_requests_fails() {
    let (_, doc) = run("widen_three_early.json", later_requests(Later::Three)).await;
    held_use_fails(&doc);
}

/// r11 F3: a batch `[widen-2, widen-3]` read during the held probe is answered, as one
/// array, only once `widen-1`'s receipt is written, so a result sent right behind it is
/// early (§6.7) and fails. (Passed before: each entry counted as a receipt written.)
#[tokio::test]
async fn a_held_probe_answered_behind_a_batch_of_later_requests_fails() {
    let (_, doc) = run("widen_batch_early.json", later_requests(Later::Batch)).await;
    held_use_fails(&doc);
}

/// r11 F2: `widen-1` grants `channels.incoming` and `modelInfo`, so two probes are held;
/// `widen-2`, granting the same, comes during the first. The host refuses that one and
/// answers `model/info` only once `widen-2`'s receipt came: it gets it only after
/// `widen-1`'s, so the second probe times out and nothing fails. (Failed before: that
/// receipt was written during the first probe and the second probe's result judged.)
#[tokio::test]
async fn a_second_held_probe_answered_after_a_later_receipt_does_not_fail() {
    let (_, doc) = run("widen_both_second.json", later_requests(Later::Both)).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let d = detail(&doc, IDS[4]);
    assert!(
        d.contains(
            "channels/incoming for check:a refused while the receipt of the Request granting \
             channels.incoming was held"
        ),
        "{d}"
    );
    assert!(!d.contains("model/info got a result while"), "{d}");
}
