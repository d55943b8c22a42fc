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
/// is kept unanswered (no receipt is written while the probe waits), so a host answering
/// `model/info` before either receipt fails `host.manifest-additions-not-granted`.
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
    /// As [`Later::Three`], the probe answered only once `widen-3`'s receipt came (r13 F4).
    ThreeAfter,
    /// As [`Later::Batch`], the probe answered only once the batch's array came (r13 F4).
    BatchAfter,
    /// `widen-2` to `widen-18` (17 Requests, each granting `modelInfo` and
    /// `channels.incoming`) back to back, the probe answered only once `widen-18`'s receipt
    /// came (r13 F1: past 16 kept, the 17th's receipt was written at once).
    Many,
    /// `widen-1` grants `channels.incoming` and `modelInfo`; on the held
    /// `channels/incoming` probe (passed on to the library host, which refuses it),
    /// `widen-2` granting the same; the held `model/info` probe answered only once
    /// `widen-2`'s receipt came (r11 F2).
    Both,
}

/// The ids of the host's own Requests in [`later_requests`]: `widen-N`.
fn is_widen(id: &str) -> bool {
    id.strip_prefix("widen-")
        .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// `v` answers some of the host's own Requests ([`is_widen`]; a response, or a batch of
/// them): their ids, in the order written.
fn answers_widen(v: &Value) -> Option<Vec<String>> {
    let entries = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
    let ids: Vec<String> = entries
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    let mine = !entries.is_empty()
        && entries.iter().all(|e| e.get("method").is_none())
        && ids.len() == entries.len()
        && ids.iter().all(|id| is_widen(id));
    mine.then_some(ids)
}

/// The answers to the host's own Requests that reached it, one list per message written
/// (a batch's array is one), in order ([`later_logged`]).
type Receipts = Arc<Mutex<Vec<Vec<String>>>>;

/// `widen-from` to `widen-to`, one message each.
fn one_by_one(from: u32, to: u32) -> Vec<Vec<String>> {
    (from..=to).map(|n| vec![format!("widen-{n}")]).collect()
}

/// A proxy rule for a host that, once the partially invalid manifest (the third fetch) is
/// read, sends `widen-1`, and while the checker holds its receipt sends later Requests as
/// `when` says; it answers `model/info` with a result from `widen-2`'s receipt on. The
/// receipts of its own Requests are kept from the library host.
fn later_requests(when: Later) -> Rule {
    later_logged(when, Receipts::default())
}

/// [`later_requests`], noting in `log` every answer to the host's own Requests that reaches
/// it; `model/info` is answered with a result once the last of them `when` sends was
/// answered (`widen-2`, or `widen-3` for [`Later::ThreeAfter`] and [`Later::BatchAfter`],
/// `widen-18` for [`Later::Many`]).
fn later_logged(when: Later, log: Receipts) -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let (mut sent, mut asked, mut active) = (false, false, false);
    let mut held: Option<Value> = None;
    let last = match when {
        Later::ThreeAfter | Later::BatchAfter => "widen-3",
        Later::Many => "widen-18",
        _ => "widen-2",
    };
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host {
            if let Some(ids) = answers_widen(&v) {
                let releases = ids.iter().any(|id| id == last);
                log.lock().unwrap().push(ids);
                if !releases {
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
                    Later::ThreeAfter => {
                        held = Some(v);
                        let w3 = grant_request("widen-3", both);
                        vec![(To::Checker, w2(both)), (To::Checker, w3)]
                    }
                    Later::BatchAfter => {
                        held = Some(v);
                        let w3 = grant_request("widen-3", &["modelInfo"]);
                        vec![(To::Checker, json!([w2(&["modelInfo"]), w3]))]
                    }
                    Later::Many => {
                        held = Some(v);
                        (2..=18)
                            .map(|n| (To::Checker, grant_request(&format!("widen-{n}"), both)))
                            .collect()
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
    let log = Receipts::default();
    let rule = later_logged(Later::Same, log.clone());
    let (_, doc) = run("widen_second_same.json", rule).await;
    held_use_fails(&doc);
    assert_eq!(*log.lock().unwrap(), one_by_one(1, 2), "{doc:#}");
}

/// r11 F1, pipelined: `widen-3` read during `widen-2`'s hold had its receipt written at
/// once; now both are kept until `widen-1`'s receipt is written, so a result sent right
/// behind them is early (§6.7) and fails. (Passed before.)
#[tokio::test]
async fn a_held_probe_answered_behind_three_pipelined_requests_fails() {
    let log = Receipts::default();
    let rule = later_logged(Later::Three, log.clone());
    let (_, doc) = run("widen_three_early.json", rule).await;
    held_use_fails(&doc);
    assert_eq!(*log.lock().unwrap(), one_by_one(1, 3), "{doc:#}");
}

/// r13 F4: the same three Requests from a conforming host, answering the held probe only
/// once `widen-3`'s receipt came: every Request gets its receipt, in order, none while the
/// probe awaits its answer (§6.7), so the probe times out and nothing fails. (Fails if a
/// later receipt is written during the probe: the result is then judged early.)
#[tokio::test]
async fn a_held_probe_answered_after_three_pipelined_receipts_does_not_fail() {
    let log = Receipts::default();
    let rule = later_logged(Later::ThreeAfter, log.clone());
    let (_, doc) = run("widen_three_after.json", rule).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert!(
        !detail(&doc, IDS[4]).contains("model/info got a result while"),
        "{doc:#}"
    );
    assert_eq!(*log.lock().unwrap(), one_by_one(1, 3), "{doc:#}");
}

/// r13 F1: seventeen later Requests read during the held probe are all kept (past 16 the
/// 17th's receipt was written at once, ahead of the others'), so a conforming host
/// answering the probe only once the last receipt came gets every receipt in order after
/// the probe ended, and nothing fails (§6.7).
#[tokio::test]
async fn a_held_probe_answered_after_seventeen_later_receipts_does_not_fail() {
    let log = Receipts::default();
    let rule = later_logged(Later::Many, log.clone());
    let (_, doc) = run("widen_many_after.json", rule).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(*log.lock().unwrap(), one_by_one(1, 18), "{doc:#}");
}

/// r11 F3: a batch `[widen-2, widen-3]` read during the held probe is answered, as one
/// array, only once `widen-1`'s receipt is written, so a result sent right behind it is
/// early (§6.7) and fails. (Passed before: each entry counted as a receipt written.)
#[tokio::test]
async fn a_held_probe_answered_behind_a_batch_of_later_requests_fails() {
    let log = Receipts::default();
    let rule = later_logged(Later::Batch, log.clone());
    let (_, doc) = run("widen_batch_early.json", rule).await;
    held_use_fails(&doc);
    let both = vec!["widen-2".to_owned(), "widen-3".to_owned()];
    assert_eq!(*log.lock().unwrap(), vec![vec!["widen-1".to_owned()], both]);
}

/// r13 F4: the same batch from a conforming host, answering the held probe only once the
/// batch's array came: the array, both answers in it, is written after `widen-1`'s receipt
/// and after the probe ended (§6.7; JSON-RPC 2.0 §6), so nothing fails.
#[tokio::test]
async fn a_held_probe_answered_after_a_batch_of_later_receipts_does_not_fail() {
    let log = Receipts::default();
    let rule = later_logged(Later::BatchAfter, log.clone());
    let (_, doc) = run("widen_batch_after.json", rule).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert!(
        !detail(&doc, IDS[4]).contains("model/info got a result while"),
        "{doc:#}"
    );
    let both = vec!["widen-2".to_owned(), "widen-3".to_owned()];
    assert_eq!(*log.lock().unwrap(), vec![vec!["widen-1".to_owned()], both]);
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

/// The library host's policy without the hook: its leaf comes only with `widen-1`
/// ([`hook_while_held`]).
const POLICY_NO_HOOK: [&str; 2] = ["pushEvents", "channels.*"];

/// A proxy rule for a host granting no hook at first that, once the partially invalid
/// manifest (the third fetch) is read, sends `widen-1` granting `modelInfo` and the hook
/// leaf (with `batch`, as the first entry of a batch whose second, `widen-2`, also grants
/// `channels.incoming`), keeps every answer to them from the library host, and sends a
/// `context/beforeInference` (`hook-1`) before it could have read any of them: alone, on
/// the held `model/info` probe; with `batch`, on the second `ping` after that probe (the
/// first is `widen-1`'s hold, the second the hold ahead of `widen-2`'s receipt, `widen-1`'s
/// answer then waiting in the array).
fn hook_while_held(batch: bool) -> Rule {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let (mut sent, mut hooked, mut probed, mut pings) = (false, false, false, 0);
    let granted = [
        "pushEvents",
        "channels.register",
        "modelInfo",
        "contextHooks.beforeInference.inject.beforeUser",
    ];
    let hook = json!({ "jsonrpc": "2.0", "id": "hook-1", "method": "context/beforeInference",
        "params": { "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                    "userMessage": null } });
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && (answers_widen(&v).is_some() || v["id"] == "hook-1") {
            return vec![];
        }
        if to == To::Host && sent && !hooked {
            let due = if batch {
                pings += usize::from(probed && v["method"] == "ping");
                probed |= v["method"] == "model/info";
                pings == 2
            } else {
                v["method"] == "model/info"
            };
            if due {
                hooked = true;
                return vec![(To::Checker, hook.clone()), (To::Host, v)];
            }
        }
        let mut out = vec![(to, v.clone())];
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 && !sent {
                sent = true;
                let request = |id: &str, extra: &[&str]| {
                    let mut caps = granted.to_vec();
                    caps.extend_from_slice(extra);
                    json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update",
                            "params": { "effectiveCapabilities": caps } })
                };
                let w1 = request("widen-1", &[]);
                let message = if batch {
                    json!([w1, request("widen-2", &["channels.incoming"])])
                } else {
                    w1
                };
                out.push((To::Checker, message));
            }
        }
        out
    })
}

/// The hook `hook_while_held` sent is judged sent under a leaf not yet in force.
fn early_hook_fails(doc: &Value) {
    assert_eq!(status(doc, "host.hooks-after-ready"), "fail", "{doc:#}");
    let d = detail(doc, "host.hooks-after-ready");
    assert!(d.contains("a later policy Request granted"), "{d}");
}

/// §6.7 (an expansion takes effect only once its receipt is read): a hook under the leaf
/// `widen-1` adds, sent while its held probe awaits its answer (before its receipt is
/// written), fails `host.hooks-after-ready`. (Passed before: the Request's own additions
/// were held only from its ping on, after its probes.)
#[tokio::test]
async fn a_hook_under_a_leaf_being_probed_fails_hooks_after_ready() {
    let rule = hook_while_held(false);
    let (_, doc) = run_with("hook_while_probed.json", &POLICY_NO_HOOK, rule).await;
    early_hook_fails(&doc);
}

/// r13 F2: in a batch `[widen-1, widen-2]`, `widen-1`'s answer waits in the batch until
/// `widen-2`'s is written with it (JSON-RPC 2.0 §6), so a hook under the leaf `widen-1`
/// adds, sent during the hold ahead of that array, is sent before the host could have read
/// either receipt (§6.7) and fails. (Passed before: `widen-1`'s grant counted as in force
/// once its answer was handed to the batch.)
#[tokio::test]
async fn a_hook_under_a_leaf_of_a_batch_entry_not_yet_written_fails_hooks_after_ready() {
    let rule = hook_while_held(true);
    let (_, doc) = run_with("hook_while_batched.json", &POLICY_NO_HOOK, rule).await;
    early_hook_fails(&doc);
}

/// A proxy rule for a host that, once the partially invalid manifest (the third fetch) is
/// read, sends `widen-1` granting `modelInfo` and `channels.incoming`, then `widen-2` to
/// `widen-9` at once, alternately taking `channels.incoming` away and granting it again
/// (four expansions among them), and handles nothing the checker sends until every one of
/// them has its receipt (§6.7 does not require it to answer meanwhile). The receipts are
/// kept from the library host.
fn deaf_behind_many() -> Rule {
    let mut pending: Vec<Value> = Vec::new();
    let mut kept: Vec<Value> = Vec::new();
    let mut fetches = Vec::new();
    let mut answered = 0;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Checker {
            return vec![(to, v)];
        }
        if v.get("method").is_none() && pending.contains(&v["id"]) {
            pending.retain(|p| *p != v["id"]);
            return if pending.is_empty() {
                kept.drain(..).map(|k| (To::Host, k)).collect()
            } else {
                vec![]
            };
        }
        if !pending.is_empty() {
            kept.push(v);
            return vec![];
        }
        let mut out = vec![(To::Host, v.clone())];
        if v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 3 {
                for n in 1..=9 {
                    let id = format!("widen-{n}");
                    pending.push(json!(id));
                    let extra: &[&str] = if n % 2 == 1 {
                        &["modelInfo", "channels.incoming"]
                    } else {
                        &["modelInfo"]
                    };
                    out.push((To::Checker, grant_request(&id, extra)));
                }
            }
        }
        out
    })
}

/// r13 F5: the expansions kept while a held probe ran share one hold before their receipts
/// are written, so a host answering nothing until all its receipts came costs the run one
/// more hold, not one per kept expansion: the later checks are still judged (no "budget
/// ran out" skip) and nothing fails.
#[tokio::test]
async fn a_host_deaf_behind_many_kept_requests_still_gets_the_later_checks_judged() {
    let (_, doc) = run("deaf_behind_many.json", deaf_behind_many()).await;
    assert_eq!(common::ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(phase_with(&doc, "skip"), set(&[]), "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[3]), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
}
