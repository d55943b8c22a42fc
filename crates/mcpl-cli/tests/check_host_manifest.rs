//! `mcpl check-host`'s manifest-change probes (§17): the library host, reached through a
//! proxy that rewrites what crosses it, breaks one §17 rule per test and fails exactly the
//! check judging it; the library host unproxied passes them all (`check_host.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

mod common;
mod manifest_proxy;

use manifest_proxy::*;
/// §17.3: a host may ignore the announcement; the checks are skipped, saying so, and the
/// run is not held up past one step for the fetch that never comes.
#[tokio::test]
async fn a_host_that_never_fetches_skips_every_manifest_check() {
    let rule: Rule = Box::new(|to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            return vec![];
        }
        vec![(to, v)]
    });
    let (code, doc) = run("ignores.json", rule).await;
    assert_eq!(phase_with(&doc, "skip"), set(&IDS), "{doc:#}");
    let detail = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == IDS[2])
        .unwrap()["detail"]
        .to_string();
    assert!(detail.contains("MAY ignore"), "{detail}");
    assert_eq!(code, 0, "{doc:#}");
}

/// §17.3: a policy change between the announcement and the fetch fails
/// `host.manifest-fetched-before-acting`, and nothing else of the phase.
#[tokio::test]
async fn a_host_narrowing_before_it_fetches_fails_fetched_before_acting() {
    let mut done = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" && !done {
            done = true;
            return vec![(To::Checker, narrower_grant("early-1")), (to, v)];
        }
        if to == To::Host && v["id"] == "early-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("early.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[0]]), "{doc:#}");
    assert_eq!(status(&doc, IDS[1]), "pass", "{doc:#}");
}

/// §17.5 step 1: a grant narrowed to nothing after one unparseable answer fails
/// `host.manifest-unparseable-keeps-previous`.
#[tokio::test]
async fn a_host_dropping_its_grant_after_one_unparseable_manifest_fails() {
    let mut fetches = Vec::new();
    let mut done = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && fetches.contains(&v["id"]) && v["result"].is_string() && !done {
            done = true;
            let nothing = json!({ "jsonrpc": "2.0", "id": "suspend-1",
                "method": "featureSets/update", "params": { "effectiveCapabilities": [] } });
            return vec![(to, v), (To::Checker, nothing)];
        }
        if to == To::Host && v["id"] == "suspend-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("unparseable.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[1]]), "{doc:#}");
}

/// §17.5 step 3: a host that never takes the removals in (it is handed the manifest it
/// initialized with in place of the narrowed one) accepts what they withdrew and fails
/// `host.manifest-removals-revoked`; the capability advertised again then shows nothing,
/// and only the one added (`modelInfo`) is judged.
#[tokio::test]
async fn a_host_keeping_what_a_manifest_removed_fails_removals_revoked() {
    let rule = on_fetch_answers(|n, mut v| {
        if n == 1 {
            // The manifest as initialized: the narrowed one with its removals put back.
            let m = &mut v["result"];
            m["channels"]["incoming"] = json!(true);
            m["featureSets"]["check.gone"] =
                json!({ "description": "kept", "uses": ["pushEvents"] });
            m.as_object_mut().unwrap().remove("revision");
        }
        v
    });
    let (_, doc) = run("removals.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[2]]), "{doc:#}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
    assert!(
        detail(&doc, IDS[4]).contains("channels/incoming not probed"),
        "{doc:#}"
    );
    assert_eq!(status(&doc, IDS[3]), "pass", "{doc:#}");
}

/// §17.5 step 1: a host that drops a partially invalid manifest whole (here: it reads it as
/// nothing) keeps the set it removed and fails `host.manifest-partial-removals-applied`.
#[tokio::test]
async fn a_host_ignoring_a_partially_invalid_manifest_fails_partial_removals() {
    let rule = on_fetch_answers(|n, mut v| {
        if n == 2 {
            v["result"] = json!("partially invalid: dropped whole");
        }
        v
    });
    let (_, doc) = run("partial.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[3]]), "{doc:#}");
    assert_eq!(status(&doc, IDS[4]), "pass", "{doc:#}");
}

/// §17.5 step 3, §6.7: a host accepting `channels/incoming` once `channels.incoming` is
/// advertised again, with no policy Request granting it, fails
/// `host.manifest-additions-not-granted`.
#[tokio::test]
async fn a_host_auto_granting_an_addition_fails_additions_not_granted() {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
        }
        // After the third fetch (the addition), the host accepts channels/incoming.
        if to == To::Host && answered >= 3 && v["method"] == "channels/incoming" {
            let ok = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "results": [ { "messageId": "m1", "accepted": true } ] } });
            return vec![(To::Checker, ok)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("additions.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[4]]), "{doc:#}");
}

/// §17.5 step 3, §6.7: a host answering `model/info` once `modelInfo` is newly advertised,
/// with no policy Request granting it (as one recomputing a `*` policy over the new
/// manifest would), fails `host.manifest-additions-not-granted`.
#[tokio::test]
async fn a_host_granting_a_newly_advertised_capability_fails_additions_not_granted() {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
        }
        if to == To::Host && answered >= 3 && v["method"] == "model/info" {
            let info = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "model": { "id": "m", "provider": "p" } } });
            return vec![(To::Checker, info)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("new_capability.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[4]]), "{doc:#}");
    assert!(
        detail(&doc, IDS[4]).contains("model/info (modelInfo added)"),
        "{doc:#}"
    );
}

/// §17.5 step 4: two policy Requests for one change (the reduction sent twice) warn
/// `host.manifest-one-update-per-change`.
#[tokio::test]
async fn a_host_sending_a_policy_update_per_item_warns_one_update_per_change() {
    let mut fetched = 0;
    let mut done = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetched += 1;
        }
        if to == To::Checker && v["method"] == "featureSets/update" && fetched >= 2 && !done {
            done = true;
            let mut again = v.clone();
            again["id"] = json!("again-1");
            return vec![(to, v), (to, again)];
        }
        if to == To::Host && v["id"] == "again-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("per_item.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    assert_eq!(phase_with(&doc, "warn"), set(&[IDS[5]]), "{doc:#}");
}

/// §5.4 with §17.5: once the host has read a manifest removing `channels.incoming`, a policy
/// Request naming it grants beyond the advertisement in force, and fails
/// `host.grant-within-advertisement` as one naming a path never advertised does.
#[tokio::test]
async fn a_grant_naming_a_removed_path_is_beyond_the_advertisement() {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
            if answered == 2 {
                let stale = json!({ "jsonrpc": "2.0", "id": "stale-1",
                    "method": "featureSets/update", "params": { "effectiveCapabilities":
                        ["pushEvents", "channels.register", "channels.incoming",
                         "contextHooks.beforeInference.inject.beforeUser"] } });
                return vec![(to, v), (To::Checker, stale)];
            }
        }
        if to == To::Host && v["id"] == "stale-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("stale_grant.json", rule).await;
    let id = "host.grant-within-advertisement";
    assert_eq!(status(&doc, id), "fail", "{doc:#}");
    let check = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap();
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("no longer advertises: channels.incoming"),
        "{detail}"
    );
}

/// A host that goes silent once it has fetched (it reads nothing more of the checker's) is
/// not held against the §17 checks (its silence is `host.answers-every-request`'s kind),
/// and the phase ends within its budget: the run ends within its bound.
#[tokio::test]
async fn a_host_silent_after_its_first_fetch_fails_no_manifest_check() {
    let mut fetches = Vec::new();
    let mut deaf = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && deaf && v.get("method").is_some() {
            return vec![];
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            deaf = true;
        }
        vec![(to, v)]
    });
    let (_, doc) = run("silent.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    assert_eq!(status(&doc, IDS[1]), "skip", "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "skip", "{doc:#}");
}

/// §14.3: a host that does not serve `channels/list` refuses it with an error, before the
/// changes as after; a refusal it gave before the unparseable manifest is no privilege
/// dropped by it, so `host.manifest-unparseable-keeps-previous` does not fail (r2 #1).
#[tokio::test]
async fn a_host_refusing_channels_list_throughout_keeps_the_previous_manifest() {
    let rule: Rule = Box::new(|to, v| {
        if to == To::Host && v["method"] == "channels/list" {
            let refused = json!({ "jsonrpc": "2.0", "id": v["id"], "error": {
                "code": -32601, "message": "channels/list is not served by this host" } });
            return vec![(To::Checker, refused)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("no_list.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    assert_eq!(status(&doc, IDS[1]), "pass", "{doc:#}");
    assert!(detail(&doc, IDS[1]).contains("refused"), "{doc:#}");
}

/// §6.7 (tell → receipt → activate) with §17.5 step 3: a host answering `model/info` with
/// a result right behind the policy Request granting the newly advertised `modelInfo`,
/// before it could have read the receipt, fails `host.manifest-additions-not-granted`
/// (r2 #2: the answer was judged under the widened grant).
#[tokio::test]
async fn a_host_using_an_addition_before_its_receipt_fails_additions_not_granted() {
    let mut fetches = Vec::new();
    let mut answered = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetches.contains(&v["id"]) {
            answered += 1;
        }
        if to == To::Host && v["id"] == "widen-1" && v.get("method").is_none() {
            return vec![];
        }
        if to == To::Host && answered >= 3 && v["method"] == "model/info" {
            let widen = json!({ "jsonrpc": "2.0", "id": "widen-1",
                "method": "featureSets/update", "params": { "effectiveCapabilities":
                    ["pushEvents", "channels.register", "modelInfo",
                     "contextHooks.beforeInference.inject.beforeUser"] } });
            let info = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "model": { "id": "m", "provider": "p" } } });
            return vec![(To::Checker, widen), (To::Checker, info)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("early_activate.json", rule).await;
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[4]]), "{doc:#}");
}

/// §17.5 step 1: after one unparseable manifest a host disabling every feature set (by a
/// Notification, which may carry `disabled`, §6.7) has not kept the previous manifest, and
/// fails `host.manifest-unparseable-keeps-previous` (r2 #3: only capabilities were compared).
#[tokio::test]
async fn a_host_disabling_its_sets_after_one_unparseable_manifest_fails() {
    let mut fetches = Vec::new();
    let mut done = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && fetches.contains(&v["id"]) && v["result"].is_string() && !done {
            done = true;
            let off = json!({ "jsonrpc": "2.0", "method": "featureSets/update",
                "params": { "disabled": ["check.push", "check.hints", "check.turns",
                    "check.infer", "check.gone", "check.gone-too"] } });
            return vec![(to, v), (To::Checker, off)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("unparseable_disable.json", rule).await;
    assert_eq!(status(&doc, IDS[1]), "fail", "{doc:#}");
    assert!(detail(&doc, IDS[1]).contains("check.push"), "{doc:#}");
}

/// §5.4 with §17.5, wire order: a policy Request the host sent right behind its
/// `mcpl/manifest`, before it could have read the answer, is judged against the
/// advertisement it held then; naming `channels.incoming`, which the answer removes, is no
/// grant beyond it (r2 #4).
#[tokio::test]
async fn a_policy_request_pipelined_behind_a_fetch_is_judged_before_the_answer() {
    let mut fetched = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetched += 1;
            if fetched == 2 {
                let same = json!({ "jsonrpc": "2.0", "id": "piped-1",
                    "method": "featureSets/update", "params": { "effectiveCapabilities":
                        ["pushEvents", "channels.register", "channels.incoming",
                         "contextHooks.beforeInference.inject.beforeUser"] } });
                return vec![(to, v), (To::Checker, same)];
            }
        }
        if to == To::Host && v["id"] == "piped-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("pipelined.json", rule).await;
    assert_ne!(
        status(&doc, "host.grant-within-advertisement"),
        "fail",
        "{doc:#}"
    );
}

/// §17.8: a host MAY coalesce announcements, here fetching once per revision; each change
/// announces its own revision, so every change is fetched and judged (r2 #5: the
/// unparseable and the narrowing change shared one, and four checks were skipped).
#[tokio::test]
async fn a_host_coalescing_by_revision_fetches_every_change() {
    let mut revisions = Vec::new();
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            let r = v["params"]["revision"].clone();
            if revisions.contains(&r) {
                return vec![];
            }
            revisions.push(r);
        }
        vec![(to, v)]
    });
    let (_, doc) = run("coalesced.json", rule).await;
    assert_eq!(phase_with(&doc, "skip"), BTreeSet::new(), "{doc:#}");
    assert_eq!(phase_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
}

/// §5.4 with §17.5 and §6.7, wire order: a fetch read while a later policy Request's receipt
/// is held is held itself, so a policy Request the host sent right behind the fetch, before
/// it could read the answer, is judged against the advertisement it held then. Here an
/// expansion (`inferenceLifecycle`), the second fetch (the narrowing) and a Request naming
/// `channels.incoming`, which that answer removes, come together (h3 #2: the fetch's answer
/// was written at once, the Request judged against the narrowed advertisement).
#[tokio::test]
async fn a_fetch_read_during_a_held_receipt_is_held_itself() {
    let mut fetched = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetched += 1;
            if fetched == 2 {
                let grant = |id: &str| {
                    json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update",
                        "params": { "effectiveCapabilities": ["pushEvents",
                            "channels.register", "channels.incoming", "inferenceLifecycle",
                            "contextHooks.beforeInference.inject.beforeUser"] } })
                };
                return vec![
                    (To::Checker, grant("widen-2")),
                    (to, v),
                    (To::Checker, grant("behind-2")),
                ];
            }
        }
        let ours = v["id"] == "widen-2" || v["id"] == "behind-2";
        if to == To::Host && ours && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("fetch_in_hold.json", rule).await;
    let id = "host.grant-within-advertisement";
    assert_ne!(status(&doc, id), "fail", "{}", detail(&doc, id));
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
}

/// §14.1 (`channels/list`, either direction, needs `channels.register`) with §5.4: a host
/// that did not grant `channels.register` asking the checker for its channels is refused
/// (`-32002`, the capability named, as the library server's admission refuses it), and the
/// request is a delivery outside the grant (h3 #4: the checker answered whatever the grant).
#[tokio::test]
async fn a_channels_list_the_grant_does_not_allow_is_refused() {
    let answer: Arc<Mutex<Option<Value>>> = Arc::default();
    let seen = answer.clone();
    let mut policy_id = None;
    let mut asked = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "featureSets/update" && policy_id.is_none() {
            policy_id = Some(v["id"].clone());
        }
        if to == To::Host && v["id"] == "list-1" && v.get("method").is_none() {
            *seen.lock().unwrap() = Some(v);
            return vec![];
        }
        // Right behind the receipt of the host's first policy Request.
        if to == To::Host
            && !asked
            && v.get("method").is_none()
            && Some(&v["id"]) == policy_id.as_ref()
        {
            asked = true;
            let list = json!({ "jsonrpc": "2.0", "id": "list-1", "method": "channels/list",
                "params": {} });
            return vec![(to, v), (To::Checker, list)];
        }
        vec![(to, v)]
    });
    let policy = ["pushEvents", "contextHooks.beforeInference.inject.*"];
    let (_, doc) = run_with("list_ungranted.json", &policy, rule).await;
    let got = answer
        .lock()
        .unwrap()
        .clone()
        .expect("the checker answered channels/list");
    assert_eq!(got["error"]["code"], -32002, "{got}");
    assert_eq!(
        got["error"]["data"]["capability"], "channels.register",
        "{got}"
    );
    let id = "host.deliveries-within-grant";
    assert_eq!(status(&doc, id), "fail", "{doc:#}");
    assert!(detail(&doc, id).contains("channels/list"), "{doc:#}");
}

/// §14.5 judged under the grant in force when the host answered (`Run::as_answered`): a
/// host accepting both messages of the mixed `channels/incoming` (one for a channel never
/// registered) and narrowing its grant right behind that answer fails
/// `host.incoming-unregistered-refused`; the narrowing came after, and does not reach back
/// to the answer (h3 #6: the live grant was read, and the verdict dropped).
#[tokio::test]
async fn a_narrowing_behind_an_accepted_mixed_incoming_does_not_excuse_it() {
    let rule: Rule = Box::new(move |to, v| {
        // The mixed probe: `mixed-1` for check:a beside one for a channel never registered.
        let mixed = v["method"] == "channels/incoming"
            && v["params"]["messages"][0]["messageId"] == "mixed-1";
        if to == To::Host && mixed {
            let ids: Vec<Value> = v["params"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["messageId"].clone())
                .collect();
            let results: Vec<Value> = ids
                .iter()
                .map(|id| json!({ "messageId": id, "accepted": true }))
                .collect();
            let ok = json!({ "jsonrpc": "2.0", "id": v["id"], "result": { "results": results } });
            return vec![(To::Checker, ok), (To::Checker, narrower_grant("narrow-6"))];
        }
        if to == To::Host && v["id"] == "narrow-6" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("mixed_then_narrowed.json", rule).await;
    let id = "host.incoming-unregistered-refused";
    assert_eq!(status(&doc, id), "fail", "{doc:#}");
    assert!(
        detail(&doc, id).contains("the second was not refused"),
        "{doc:#}"
    );
}

/// §14.2, §14.5 judged under the grant in force when the host answered: a host accepting
/// both descriptors of the `channels/register` naming one id twice, and withdrawing
/// `channels.register` right behind that answer, fails `host.register-duplicate-id` (h3 #6:
/// the live grant was read, and the check skipped as if withdrawn while outstanding).
#[tokio::test]
async fn a_narrowing_behind_an_accepted_duplicate_register_does_not_excuse_it() {
    let rule: Rule = Box::new(move |to, v| {
        let duplicate = v["method"] == "channels/register"
            && v["params"]["channels"][1]["id"] == "check:dup"
            && v["params"]["channels"][0]["id"] == "check:dup";
        if to == To::Host && duplicate {
            let one = json!({ "id": "check:dup", "accepted": true });
            let ok = json!({ "jsonrpc": "2.0", "id": v["id"],
                "result": { "results": [one.clone(), one] } });
            let narrow = json!({ "jsonrpc": "2.0", "id": "narrow-dup",
                "method": "featureSets/update", "params": { "effectiveCapabilities":
                    ["pushEvents", "channels.incoming",
                     "contextHooks.beforeInference.inject.beforeUser"] } });
            return vec![(To::Checker, ok), (To::Checker, narrow)];
        }
        if to == To::Host && v["id"] == "narrow-dup" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("duplicate_then_narrowed.json", rule).await;
    let id = "host.register-duplicate-id";
    assert_eq!(status(&doc, id), "fail", "{doc:#}");
}

/// The `channels/list` asked just before the unparseable change has a step of its own, not
/// one of the phase's three (h3 #3): a host silent to it, and to the pushes under the sets
/// the changes remove (each awaited a step), still has its additions probed and judged
/// (`model/info` refused: `modelInfo` was never granted), where the budget had run out
/// before them.
#[tokio::test]
async fn the_list_before_the_changes_does_not_shrink_the_phase_budget() {
    let mut announced = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            announced = true;
        }
        let gone = v["method"] == "push/event"
            && v["params"]["featureSet"]
                .as_str()
                .is_some_and(|s| s.starts_with("check.gone"));
        let early_list = v["method"] == "channels/list" && !announced;
        if to == To::Host && (gone || early_list) {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("list_budget.json", rule).await;
    assert_eq!(status(&doc, IDS[4]), "pass", "{}", detail(&doc, IDS[4]));
    assert!(detail(&doc, IDS[4]).contains("model/info"), "{doc:#}");
}

/// Finding F1 (§6.7, §17.5 step 3): a host applying a fetched manifest off its reader
/// (here: the proxy holds the answer to each valid fetch from the library host until the
/// checker's first probe of a removal, and accepts that probe itself, as a host that has
/// not yet read the manifest does) revokes host-first and then tells its narrowing by
/// Request. Nothing bounds when it applies what it fetched, only the order, so the probe
/// sent after that Request decides: both removal checks pass, saying the first probe was
/// accepted before the host told the change. Before, the one answered first failed them.
#[tokio::test]
async fn a_host_applying_a_fetched_manifest_after_reading_it_passes_the_removal_checks() {
    let mut fetch_ids = Vec::new();
    let mut held: Option<Value> = None;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetch_ids.push(v["id"].clone());
        }
        let answer = v.get("method").is_none() && fetch_ids.contains(&v["id"]);
        if to == To::Host && answer && v["result"].is_object() {
            held = Some(v);
            return vec![];
        }
        let first_probe = v["method"] == "push/event"
            && v["params"]["eventId"]
                .as_str()
                .is_some_and(|e| e.starts_with("gone-") && !e.ends_with("-again"));
        if to == To::Host && first_probe {
            if let Some(fetched) = held.take() {
                let ok = json!({ "jsonrpc": "2.0", "id": v["id"],
                    "result": { "accepted": true } });
                return vec![(To::Checker, ok), (To::Host, fetched)];
            }
        }
        vec![(to, v)]
    });
    let (_, doc) = run("async-fetch.json", rule).await;
    assert!(phase_with(&doc, "fail").is_empty(), "{doc:#}");
    for id in [IDS[2], IDS[3]] {
        assert_eq!(status(&doc, id), "pass", "{doc:#}");
    }
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("before the host told its policy change"), "{d}");
    // The partial change takes no capability out of the grant: the host tells nothing
    // after it, and the detail says so (r3 finding 2: it said the host had told).
    let d = detail(&doc, IDS[3]);
    assert!(
        d.contains("no policy message having followed the fetch"),
        "{d}"
    );
    assert!(!d.contains("once it had"), "{d}");
    assert_eq!(status(&doc, NARROWING_TOLD), "pass", "{doc:#}");
}

/// Finding F3 (§17.5 step 3): after a change the host sends its narrowing Request and then
/// a separate widening one (tell → receipt → activate; here the proxy splits the library
/// host's narrowing Request into a narrower one and then the host's own, which gives a
/// capability back). Only the narrowing belongs to the change: one update per change
/// passes. Before, the two warned `host.manifest-one-update-per-change`.
#[tokio::test]
async fn a_widening_request_after_a_changes_narrowing_is_not_counted_against_it() {
    let mut fetches = 0;
    let split = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = split.clone();
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Checker
            && v["method"] == "featureSets/update"
            && fetches >= 2
            && !seen.load(SeqCst)
        {
            seen.store(true, SeqCst);
            let mut narrower = v.clone();
            narrower["id"] = json!("narrower-1");
            let caps = narrower["params"]["effectiveCapabilities"]
                .as_array_mut()
                .unwrap();
            let held = "contextHooks.beforeInference.inject.beforeUser";
            assert!(caps.contains(&json!(held)), "{v}");
            caps.retain(|c| c != held);
            narrower["params"]
                .as_object_mut()
                .unwrap()
                .remove("deniedCapabilities");
            return vec![(To::Checker, narrower), (To::Checker, v)];
        }
        if to == To::Host && v["id"] == "narrower-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("widen-after.json", rule).await;
    assert!(
        split.load(SeqCst),
        "the host sent no narrowing Request after the change"
    );
    assert_eq!(status(&doc, IDS[5]), "pass", "{doc:#}");
    assert!(phase_with(&doc, "fail").is_empty(), "{doc:#}");
}

/// Finding F7: when the phase's budget runs out before the removal probes are sent (here
/// the proxy keeps the checker's pings and `channels/list` from the host after its first
/// fetch, so each wait runs to its bound; and `channels/incoming`, so the probe written while
/// the narrowing Request's receipt is held shows nothing either), `host.manifest-removals-revoked`
/// is skipped saying so, not that nothing was granted before the change (pushes were).
#[tokio::test]
async fn removals_skipped_for_the_budget_say_the_budget_ran_out() {
    let mut fetched = false;
    let mut announced = 0;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetched = true;
        }
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            announced += 1;
        }
        let kept = v["method"] == "ping"
            || v["method"] == "channels/list"
            || v["method"] == "channels/incoming";
        if to == To::Host && fetched && announced < 3 && kept {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("budget.json", rule).await;
    assert_eq!(status(&doc, IDS[2]), "skip", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("budget"), "{d}");
    assert!(!d.contains("was granted before the change"), "{d}");
}

/// A run where a hook carrying `channels: context` in its params (§14.4) goes to the
/// checker with the library host's first `mcpl/manifestChanged` (well after the receipt:
/// the library host starts no turn of its own here); the report.
async fn run_with_channel_context(name: &str, context: Value) -> Value {
    let mut sent = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Host && v["method"] == "mcpl/manifestChanged" && !sent {
            sent = true;
            let hook = json!({ "jsonrpc": "2.0", "id": "hook-1",
                "method": "context/beforeInference", "params": {
                    "inferenceId": "inf_1", "conversationId": "conv_1", "turnIndex": 0,
                    "userMessage": null, "channels": context.clone(),
                    "model": { "id": "m", "vendor": "v", "contextWindow": 8000,
                               "capabilities": [] } } });
            return vec![(To::Checker, hook), (to, v)];
        }
        if to == To::Host && v["id"] == "hook-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    run(name, rule).await.1
}

/// Finding F2 (§14.4, §10.1): the channel context a host MAY include in the hook (ids of
/// the incoming message, its thread, the default outgoing channel, the candidates) is no
/// text outside §10.1's fields: `host.user-message-redacted` passes without observe (it
/// warned). Text beside those ids (`channels.incoming.text`) still warns: §14.4 lists no
/// message content there.
#[tokio::test]
async fn the_hooks_channel_context_is_listed_and_text_beside_it_still_warns() {
    const REDACTED: &str = "host.user-message-redacted";
    let ids = json!({
        "incoming": { "channelId": "check:a", "messageId": "dmsg_123", "threadId": "t_42" },
        "defaultOutgoing": { "channelId": "ui" },
        "candidates": ["ui", "check:a"] });
    let doc = run_with_channel_context("channel-context.json", ids).await;
    assert_eq!(status(&doc, REDACTED), "pass", "{doc:#}");
    let text = json!({ "incoming": { "channelId": "check:a", "text": "what the user said" } });
    let doc = run_with_channel_context("channel-text.json", text).await;
    assert_eq!(status(&doc, REDACTED), "warn", "{doc:#}");
    assert!(
        detail(&doc, REDACTED).contains("channels.incoming.text"),
        "{doc:#}"
    );
}

/// The check judging that a fetched manifest narrowing the effective grant is told by a
/// policy Request (§6.7, §17.5 step 3).
const NARROWING_TOLD: &str = "host.manifest-narrowing-requested";

/// What the proxies below do around the narrowing (the second fetch): each takes the
/// host's policy messages after that fetch to the checker, or keeps them (answering a
/// kept Request itself, so the host's own wait ends), and answers the checker's first push
/// under the removed set with a result of its own, the host's answer to it dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tell {
    /// The host's first policy Request after the narrowing fetch is held until the push
    /// probe is written, then passed on just ahead of the forged result: the wire order a
    /// host accepting under the removed set after it told its narrowing gives.
    Before,
    /// The host's policy messages after the narrowing fetch never reach the checker.
    Never,
}

/// A rule doing what `tell` says around the narrowing fetch; `released` is set once a held
/// Request was passed on, `stall`, when set, keeps the checker's pings and `channels/list`
/// from the host during the first (unparseable) change, so each runs to its bound.
fn around_narrowing(
    tell: Tell,
    forge: bool,
    stall: bool,
    released: Arc<std::sync::atomic::AtomicBool>,
) -> Rule {
    let (mut fetches, mut announced) = (0, 0);
    let mut held: Option<Value> = None;
    let mut probe_id: Option<Value> = None;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Host && v["method"] == "mcpl/manifestChanged" {
            announced += 1;
        }
        let stalled = v["method"] == "ping" || v["method"] == "channels/list";
        if stall && to == To::Host && announced == 1 && fetches >= 1 && stalled {
            return vec![];
        }
        let policy = to == To::Checker && v["method"] == "featureSets/update";
        if policy && fetches == 2 && tell == Tell::Before && probe_id.is_none() && held.is_none() {
            held = Some(v);
            return vec![];
        }
        if policy && fetches == 2 && tell == Tell::Never {
            if v.get("id").is_some() {
                let ok = json!({ "jsonrpc": "2.0", "id": v["id"],
                    "result": { "accepted": true } });
                return vec![(To::Host, ok)];
            }
            return vec![];
        }
        let answer = v.get("method").is_none();
        if to == To::Checker && answer && probe_id.as_ref() == Some(&v["id"]) {
            return vec![];
        }
        if forge
            && to == To::Host
            && v["method"] == "push/event"
            && v["params"]["eventId"] == "gone-1"
        {
            probe_id = Some(v["id"].clone());
            let mut out = Vec::new();
            if let Some(request) = held.take() {
                released.store(true, SeqCst);
                out.push((To::Checker, request));
            }
            let ok = json!({ "jsonrpc": "2.0", "id": v["id"], "result": { "accepted": true } });
            out.push((To::Checker, ok));
            out.push((To::Host, v));
            return out;
        }
        vec![(to, v)]
    })
}

/// r3 finding 1 (§6.7: a reduction takes effect first, then the Request; §17.5: judged at
/// response receipt): the host's narrowing Request comes after the checker's push under
/// the removed set was written and before that push's result (the proxy holds it, then
/// forges the result). The result was accepted after the host told its narrowing: it fails
/// `host.manifest-removals-revoked`, where reading "told" as it stood when the probe was
/// sent excused it and retried.
#[tokio::test]
async fn a_result_after_the_hosts_narrowing_request_fails_removals_revoked() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule = around_narrowing(Tell::Before, true, false, released.clone());
    let (_, doc) = run("told-before-result.json", rule).await;
    assert!(
        released.load(SeqCst),
        "no policy Request followed the narrowing fetch before its probe"
    );
    assert_eq!(status(&doc, IDS[2]), "fail", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("push/event under check.gone got"), "{d}");
    assert!(!d.contains("sent again"), "{d}");
    assert_eq!(status(&doc, NARROWING_TOLD), "pass", "{doc:#}");
}

/// r3 finding 2 (§6.7: a Request for any change to the effective grant; §17.5 step 3):
/// the host revokes what the narrowing removed (`channels.incoming`, granted before) but
/// its policy messages after that fetch never reach the checker. The removal probe it
/// accepted first and refused when sent again a step later passes
/// `host.manifest-removals-revoked`, saying no policy message came (it said the host had
/// told its change), and `host.manifest-narrowing-requested` fails.
#[tokio::test]
async fn a_narrowing_no_policy_request_followed_fails_narrowing_requested() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule = around_narrowing(Tell::Never, true, false, released);
    let (_, doc) = run("never-told.json", rule).await;
    assert_eq!(status(&doc, NARROWING_TOLD), "fail", "{doc:#}");
    assert!(
        detail(&doc, NARROWING_TOLD).contains("channels.incoming"),
        "{doc:#}"
    );
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("no policy message"), "{d}");
    assert!(!d.contains("once it had"), "{d}");
}

/// r3 finding 2, the other side: when the narrowing changes no capability the host granted
/// (its policy never reached `channels.incoming`; only a feature set went), no Request is
/// required (§6.7: a Request for a change to the effective grant): a host telling nothing
/// after it fails nothing, and `host.manifest-narrowing-requested` is skipped saying so.
#[tokio::test]
async fn a_narrowing_that_changed_no_grant_needs_no_request() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule = around_narrowing(Tell::Never, false, false, released);
    let policy = [
        "pushEvents",
        "channels.register",
        "contextHooks.beforeInference.inject.*",
    ];
    let (_, doc) = run_with("never-told-no-grant.json", &policy, rule).await;
    assert_eq!(status(&doc, NARROWING_TOLD), "skip", "{doc:#}");
    assert!(phase_with(&doc, "fail").is_empty(), "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
}

/// r3 finding 3: a host fetching the narrowing two steps into the phase (here the proxy
/// keeps the checker's ping and `channels/list` from it during the first change, so each
/// runs to its bound) and accepting the push under the removed set, with no policy message
/// since, leaves no time to send the probe again: the result the checker holds is judged,
/// and fails `host.manifest-removals-revoked` (§6.7: revoked first), where it was skipped.
#[tokio::test]
async fn a_result_with_no_time_left_to_retry_is_judged() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule = around_narrowing(Tell::Never, true, true, released);
    let (_, doc) = run("slow-fetch.json", rule).await;
    assert_eq!(status(&doc, IDS[2]), "fail", "{doc:#}");
    let d = detail(&doc, IDS[2]);
    assert!(d.contains("push/event under check.gone got"), "{d}");
    assert!(d.contains("budget"), "{d}");
}

/// `inner`, plus one more `mcpl/manifest` of the host's sent right behind the answer to its
/// narrowing fetch (the second), its answer kept from the host (§17.4: a host may fetch at
/// any time; the manifest served has not changed since).
fn refetching(mut inner: Rule) -> Rule {
    let mut fetch_ids = Vec::new();
    let mut sent = false;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetch_ids.push(v["id"].clone());
        }
        if to == To::Host && v["id"] == "refetch-1" && v.get("method").is_none() {
            return vec![];
        }
        let second = fetch_ids.get(1) == Some(&v["id"]);
        let mut out = inner(to, v.clone());
        if to == To::Host && v.get("method").is_none() && second && !sent {
            sent = true;
            let again = json!({ "jsonrpc": "2.0", "id": "refetch-1", "method": "mcpl/manifest" });
            out.push((To::Checker, again));
        }
        out
    })
}

/// r4 finding 1 (§17.4: a host may fetch at any time; §6.7): a host that never tells its
/// narrowing but fetches the unchanged manifest once more right after reading it still
/// fails `host.manifest-narrowing-requested`: the second fetch is no change, so it neither
/// forgets what the narrowing withdrew nor restarts the wait for its Request. Before, it
/// was skipped "only a feature set went".
#[tokio::test]
async fn a_fetch_of_the_unchanged_manifest_does_not_excuse_a_missing_request() {
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rule = refetching(around_narrowing(Tell::Never, false, false, released));
    let (_, doc) = run("refetch-never-told.json", rule).await;
    assert_eq!(status(&doc, NARROWING_TOLD), "fail", "{doc:#}");
    assert!(
        detail(&doc, NARROWING_TOLD).contains("channels.incoming"),
        "{doc:#}"
    );
}

/// r4 finding 1, the conforming side: a host that tells its narrowing by Request and then
/// fetches the unchanged manifest again passes `host.manifest-narrowing-requested` (the
/// Request counted for the change is not forgotten by the later fetch), one update per
/// change passing too.
#[tokio::test]
async fn a_fetch_after_the_narrowing_request_keeps_it_counted() {
    let mut fetches = 0;
    let mut told = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Host && v["id"] == "refetch-1" && v.get("method").is_none() {
            return vec![];
        }
        let request = v["method"] == "featureSets/update" && v.get("id").is_some();
        if to == To::Checker && request && fetches == 2 && !told {
            told = true;
            let again = json!({ "jsonrpc": "2.0", "id": "refetch-1", "method": "mcpl/manifest" });
            return vec![(to, v), (To::Checker, again)];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("request-then-refetch.json", rule).await;
    assert_eq!(status(&doc, NARROWING_TOLD), "pass", "{doc:#}");
    assert_eq!(status(&doc, IDS[5]), "pass", "{doc:#}");
    assert!(phase_with(&doc, "fail").is_empty(), "{doc:#}");
}

/// r4 finding 2 (§6.7, §17.5 step 3): one Request that both tells the narrowing (it leaves
/// `channels.incoming` out) and grants a capability denied before (`inferenceLifecycle`,
/// which the library host's policy here does not reach) tells the change: it passes
/// `host.manifest-narrowing-requested`. Before, it counted as a pure widening against the
/// grant already narrowed by the fetch, and failed "no policy message followed".
#[tokio::test]
async fn a_request_narrowing_and_widening_at_once_tells_the_narrowing() {
    let mut fetches = 0;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = done.clone();
    let rule: Rule = Box::new(move |to, mut v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        let request = v["method"] == "featureSets/update" && v.get("id").is_some();
        if to == To::Checker && request && fetches == 2 && !seen.load(SeqCst) {
            seen.store(true, SeqCst);
            let params = &mut v["params"];
            let caps = params["effectiveCapabilities"].as_array_mut().unwrap();
            assert!(!caps.contains(&json!("channels.incoming")), "{caps:?}");
            caps.push(json!("inferenceLifecycle"));
            if let Some(denied) = params["deniedCapabilities"].as_array_mut() {
                denied.retain(|c| c != "inferenceLifecycle");
            }
        }
        vec![(to, v)]
    });
    let (_, doc) = run("narrow-and-widen.json", rule).await;
    assert!(
        done.load(SeqCst),
        "the host sent no policy Request after the narrowing fetch"
    );
    assert_eq!(status(&doc, NARROWING_TOLD), "pass", "{doc:#}");
    assert_ne!(status(&doc, IDS[5]), "fail", "{doc:#}");
}

/// The check judging that a capability the fetched narrowing withdrew is refused once the
/// host's Request telling it is answered (§5.4, §6.7, §17.5 step 3).
const WITHDRAWN: &str = "host.manifest-withdrawn-refused";

/// A rule answering the checker's `channels/incoming` itself, with a result accepting its
/// messages, from the narrowing fetch (the second) until the next one, but for the first
/// `passed` of them, which reach the host (the library host refuses them).
fn honouring_incoming(passed: usize) -> Rule {
    let (mut fetches, mut seen) = (0, 0);
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches += 1;
        }
        if to == To::Host && fetches == 2 && v["method"] == "channels/incoming" {
            seen += 1;
            if seen > passed {
                let id = v["params"]["messages"][0]["messageId"].clone();
                let ok = json!({ "jsonrpc": "2.0", "id": v["id"],
                    "result": { "results": [ { "messageId": id, "accepted": true } ] } });
                return vec![(To::Checker, ok)];
            }
        }
        vec![(to, v)]
    })
}

/// §5.4, §6.7: a host that keeps honouring `channels.incoming` after the fetched narrowing
/// withdrew it fails `host.manifest-withdrawn-refused`, its detail naming the capability
/// and the section, beside `host.manifest-removals-revoked` (its probe, before and after
/// the host's policy message, was accepted too: two observations, each its own check's).
#[tokio::test]
async fn a_host_honouring_a_withdrawn_capability_fails_withdrawn_refused() {
    let (code, doc) = run("withdrawn.json", honouring_incoming(0)).await;
    assert_eq!(status(&doc, WITHDRAWN), "fail", "{doc:#}");
    let d = detail(&doc, WITHDRAWN);
    assert!(d.contains("channels.incoming") && d.contains("§5.4"), "{d}");
    assert_eq!(status(&doc, NARROWING_TOLD), "pass", "{doc:#}");
    assert_eq!(phase_with(&doc, "fail"), set(&[IDS[2]]), "{doc:#}");
    assert_eq!(code, 1, "{doc:#}");
}

/// §5.4, §6.7: a host refusing `channels/incoming` right after the narrowing (so
/// `host.manifest-removals-revoked` passes) but honouring it once its Request telling the
/// narrowing was answered fails `host.manifest-withdrawn-refused` alone: the narrowed grant
/// in force, the withdrawn capability is still used. The two refused are the probe written
/// while that Request's receipt was held and the one after the fetch.
#[tokio::test]
async fn a_host_honouring_a_withdrawn_capability_after_its_request_fails_alone() {
    let (code, doc) = run("withdrawn-late.json", honouring_incoming(2)).await;
    assert_eq!(status(&doc, WITHDRAWN), "fail", "{doc:#}");
    assert!(
        detail(&doc, WITHDRAWN).contains("still honours channels.incoming"),
        "{doc:#}"
    );
    assert_eq!(phase_with(&doc, "fail"), BTreeSet::new(), "{doc:#}");
    assert_eq!(status(&doc, IDS[2]), "pass", "{doc:#}");
    assert_eq!(code, 1, "{doc:#}");
}

/// §5.4: the library host refuses the withdrawn capability `-32002` once its narrowing
/// Request is answered: `host.manifest-withdrawn-refused` passes (through the proxy doing
/// nothing, as the unproxied run in `check_host.rs` does).
#[tokio::test]
async fn a_host_refusing_a_withdrawn_capability_passes_withdrawn_refused() {
    let (_, doc) = run("withdrawn-ok.json", Box::new(|to, v| vec![(to, v)])).await;
    assert_eq!(status(&doc, WITHDRAWN), "pass", "{doc:#}");
    assert!(detail(&doc, WITHDRAWN).contains("-32002"), "{doc:#}");
}

/// §17.5 step 1: a host withdrawing `channels.register` by a policy Request sent while the
/// `channels/list` after one unparseable manifest is outstanding, then refusing that list,
/// fails `host.manifest-unparseable-keeps-previous`, and the detail says the narrowing as
/// it came (it said "no policy change since").
#[tokio::test]
async fn a_narrowing_while_the_list_after_an_unparseable_manifest_is_outstanding_is_said() {
    let mut fetches = Vec::new();
    let mut unparseable_read = false;
    let rule: Rule = Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetches.push(v["id"].clone());
        }
        if to == To::Host && fetches.contains(&v["id"]) && v["result"].is_string() {
            unparseable_read = true;
        }
        if to == To::Host && unparseable_read && v["method"] == "channels/list" {
            unparseable_read = false;
            let narrower = json!({ "jsonrpc": "2.0", "id": "no-register-1",
                "method": "featureSets/update", "params": { "effectiveCapabilities":
                    ["pushEvents", "channels.incoming",
                     "contextHooks.beforeInference.inject.beforeUser"] } });
            let refused = json!({ "jsonrpc": "2.0", "id": v["id"],
                "error": { "code": -32002, "message": "Capability denied",
                           "data": { "capability": "channels.register" } } });
            return vec![(To::Checker, narrower), (To::Checker, refused)];
        }
        if to == To::Host && v["id"] == "no-register-1" && v.get("method").is_none() {
            return vec![];
        }
        vec![(to, v)]
    });
    let (_, doc) = run("unparseable-list.json", rule).await;
    assert_eq!(status(&doc, IDS[1]), "fail", "{doc:#}");
    let d = detail(&doc, IDS[1]);
    assert!(
        d.contains("withdrawing channels.register while channels/list was outstanding"),
        "{d}"
    );
    assert!(!d.contains("no policy change since"), "{d}");
}
