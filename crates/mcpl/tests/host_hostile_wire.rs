//! A hostile server against the host, spoken in raw JSON lines over a real transport: every
//! byte the server sends is written by the test, so the host faces exactly what a hostile
//! peer could put on the wire (§5.3, §5.4, §10, §11, §14, §17).
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostDiagnostic, HostSession, HostStreams};
use mcpl::manifest::ChangeImpact;
use mcpl::peer::PeerConfig;
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

fn config(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|s| s.to_string()).collect(),
        policy_timeout: Duration::from_secs(30),
        hook_timeout: Duration::from_secs(30),
        manifest_timeout: Duration::from_secs(30),
        // Served, so grantable (`HostConfig::request_handler`, §5.4).
        request_handler: Some(std::sync::Arc::new(|_m: &str, _p: Value| {
            Box::pin(async {
                Ok(json!({"content": "x", "model": "m", "finishReason": "end_turn"}))
            })
        })),
        ..HostConfig::default()
    }
}

fn manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "inferenceRequest": true,
        "contextHooks": { "beforeInference": {
            "observe": true,
            "inject": { "system": true, "beforeUser": true, "afterUser": true } } },
        "channels": { "register": true, "incoming": true, "publish": true },
        "featureSets": {
            "alerts": { "description": "Alerts", "uses": ["pushEvents"] },
            "assist": { "description": "Assist", "uses": ["inferenceRequest"] },
            "memory": { "description": "Memory",
                "uses": ["contextHooks.beforeInference.observe",
                         "contextHooks.beforeInference.inject.beforeUser"] }
        }
    })
}

/// The host's next line, as JSON.
async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host said nothing")
}

/// Connects a host with `cfg` to the raw server, answering `initialize` with `m` and the
/// policy Request with `{accepted: true}`.
async fn connected(cfg: HostConfig, m: Value) -> (HostSession, HostStreams, Raw) {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, streams) = connect.await.unwrap().unwrap();
    (s, streams, raw)
}

/// Sends a request with `id` and returns the host's answer to it (the next line).
async fn call(raw: &mut Raw, id: Value, method: &str, params: Value) -> Value {
    raw.send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let a = recv(raw).await;
    assert_eq!(a["id"], id, "{a}");
    a
}

fn drain(streams: &mut HostStreams) -> Vec<HostDiagnostic> {
    let mut v = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        v.push(d);
    }
    v
}

/// Starts a host connecting with `cfg`; returns the raw server side once `initialize`
/// arrived (not answered), with that request.
async fn initializing(
    cfg: HostConfig,
) -> (
    tokio::task::JoinHandle<Result<(HostSession, HostStreams), mcpl::host::HostError>>,
    Raw,
    Value,
) {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    (connect, raw, init)
}

/// §17.5, §6.7: a manifest change announced and fetched while the initial policy Request
/// (§5.3) is still unanswered narrows the grant host-side at once; once the initial receipt
/// arrives the server, told a wider grant than the one now in force, is told the narrowed
/// one by a second Request, and nothing the fetched manifest dropped is granted.
#[tokio::test]
async fn s17_5_a_narrowing_fetched_during_the_initial_exchange_is_told_after_it() {
    let (connect, mut raw, init) = initializing(config(&["pushEvents", "inferenceRequest"])).await;
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(manifest()))}),
    )
    .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    assert_eq!(
        policy["params"]["effectiveCapabilities"],
        json!(["inferenceRequest", "pushEvents"])
    );
    raw.send_json(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged",
        "params": {"revision": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                   "domains": ["capabilities"]}}))
        .await;
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest");
    let mut m = manifest();
    m.as_object_mut().unwrap().remove("inferenceRequest");
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": m}))
        .await;
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let told = recv(&mut raw).await;
    assert_eq!(told["method"], "featureSets/update", "{told}");
    assert_eq!(
        told["params"]["effectiveCapabilities"],
        json!(["pushEvents"])
    );
    raw.send_json(json!({"jsonrpc": "2.0", "id": told["id"], "result": {"accepted": true}}))
        .await;
    let (s, _streams) = connect.await.unwrap().unwrap();
    assert!(!s.grant().allows(Capability::InferenceRequest));
    assert!(s.grant().allows(Capability::PushEvents));
    let a = call(
        &mut raw,
        json!(9),
        "inference/request",
        json!({"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(a["error"]["code"], -32002, "{a}");
}

/// A manifest whose `featureSets` carry more entries than the host reads
/// (`HostConfig::max_feature_sets`), with the other members of [`manifest`] minus `drop`.
fn padded_manifest(drop: &str, sets: usize) -> Value {
    let mut m = manifest();
    m.as_object_mut().unwrap().remove(drop);
    let fs = m["featureSets"].as_object_mut().unwrap();
    for i in 0..sets {
        fs.insert(
            format!("pad{i}"),
            json!({ "description": "p", "uses": ["pushEvents"] }),
        );
    }
    m
}

/// §17.5 step 1: a fetched manifest that parses but that the host will not read whole (more
/// feature sets than `max_feature_sets`) still has every removal it shows applied. Here the
/// server drops `contextHooks` (it no longer takes the user's message) and pads its feature
/// sets past the bound: the host must stop granting `observe` and tell the narrowed grant
/// by Request (§6.7). Found by the hostile-wire hunt: the whole manifest was refused and the
/// broader grant stood, so the host kept sending `userMessage` to a server that had
/// withdrawn the capability.
#[tokio::test]
async fn s17_5_a_manifest_past_the_feature_set_bound_still_has_its_removals_applied() {
    let policy = [
        "pushEvents",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.beforeUser",
    ];
    let (s, mut streams, mut raw) = connected(config(&policy), manifest()).await;
    assert!(s.grant().allows(Capability::Observe));
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest");
    let m = padded_manifest("contextHooks", 1100);
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": m}))
        .await;
    let told = recv(&mut raw).await;
    assert_eq!(told["method"], "featureSets/update", "{told}");
    assert_eq!(
        told["params"]["effectiveCapabilities"],
        json!(["pushEvents"])
    );
    raw.send_json(json!({"jsonrpc": "2.0", "id": told["id"], "result": {"accepted": true}}))
        .await;
    let receipt = refresh.await.unwrap().unwrap().expect("a change receipt");
    assert!(
        receipt
            .impacts
            .iter()
            .any(|i| i.impact == ChangeImpact::CapabilityRevoked),
        "{receipt:?}"
    );
    assert!(!s.grant().allows(Capability::Observe));
    assert!(s.grant().allows(Capability::PushEvents));
    // None of the padding was read as a feature set.
    let (in_force, _) = s.manifest().expect("a manifest in force");
    let sets = in_force["featureSets"].as_object().expect("feature sets");
    assert!(sets.keys().all(|k| !k.starts_with("pad")), "{sets:?}");
    let d = drain(&mut streams);
    assert!(
        d.iter().any(
            |d| matches!(d, HostDiagnostic::ManifestFetchFailed { detail }
            if detail.contains("1103 feature sets exceed the limit of 1024"))
        ),
        "{d:?}"
    );
}

/// App. B.3, §17.3: an announcement's `revision` has the digest's shape (`sha256:` and 43
/// base64url characters), judged by the one rule the manifest's own `revision` is judged
/// by (`manifest::review::is_well_formed_revision`). One that is not — a hand-kept `"v2"`,
/// or 100,000 characters — is reported as malformed (and still fetched: it is only a
/// hint), and is not kept to be compared with the fetched manifest's digest, which it can
/// never equal. Found by the hostile-wire hunt: the shape rule checked only that it was a
/// string, so neither was reported as malformed, and the host kept the 100,000 characters
/// until the fetch answered, then quoted them whole in an `announced_revision_mismatch`
/// defect and its log line.
#[tokio::test]
async fn s17_3_an_announced_revision_not_of_the_digest_shape_is_reported_not_kept() {
    let (_s, mut streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    for revision in ["v2".to_owned(), format!("sha256:{}", "A".repeat(100_000))] {
        raw.send_json(json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged",
            "params": {"revision": revision, "domains": ["capabilities"]}}))
            .await;
        let fetch = recv(&mut raw).await;
        assert_eq!(fetch["method"], "mcpl/manifest", "still fetched");
        raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": manifest()}))
            .await;
        let a = call(&mut raw, json!("after"), "ping", json!({})).await;
        assert_eq!(a["result"], json!({}));
        let d = drain(&mut streams);
        assert!(
            d.iter()
                .any(|d| matches!(d, HostDiagnostic::BadParams { method, detail }
                if method == "mcpl/manifestChanged" && detail.contains("App. B.3"))),
            "{d:?}"
        );
        assert!(
            !d.iter()
                .any(|d| matches!(d, HostDiagnostic::ManifestDefect { code, .. }
                if *code == "announced_revision_mismatch")),
            "{d:?}"
        );
    }
}

/// §17.2, §17.5: a fetched manifest whose own `revision` is not its digest is one
/// conformance defect, reported once (as `ManifestDefect`; never grounds to reject it).
/// Found by the hostile-wire hunt: it was reported twice on every fetch, as a
/// `ManifestFinding` and as a `ManifestDefect` of the same code and text.
#[tokio::test]
async fn s17_2_a_fetched_revision_that_is_not_the_digest_is_reported_once() {
    let (s, mut streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest");
    let mut m = manifest();
    m["revision"] = json!("sha256:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB");
    raw.send_json(json!({"jsonrpc": "2.0", "id": fetch["id"], "result": m}))
        .await;
    refresh.await.unwrap().unwrap();
    let reported: Vec<HostDiagnostic> = drain(&mut streams)
        .into_iter()
        .filter(|d| match d {
            HostDiagnostic::ManifestDefect { code, .. }
            | HostDiagnostic::ManifestFinding { code, .. } => *code == "revision_mismatch",
            _ => false,
        })
        .collect();
    assert!(
        matches!(reported.as_slice(), [HostDiagnostic::ManifestDefect { .. }]),
        "one defect, one diagnostic: {reported:?}"
    );
}

/// §5.4, §6.7: the answer to a server's `inference/request` is a message that needs
/// `inferenceRequest`; one whose capability was revoked while the application worked on it
/// is not delivered. The server is answered `-32002` naming the capability (a request with
/// an id is always answered), the generated content never reaches it, and the host reports
/// `CapabilityDenied`. Found by the hostile-wire hunt: the chunks of a streamed answer were
/// gated per chunk, but the final answer, carrying the whole text, went out regardless.
#[tokio::test]
async fn s5_4_an_inference_answer_whose_grant_was_revoked_meanwhile_is_not_delivered() {
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some((started_tx, released))));
    let mut cfg = config(&["pushEvents", "inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(move |_m: &str, _p: Value| {
        let (started, released) = slot.lock().unwrap().take().expect("called once");
        Box::pin(async move {
            let _ = started.send(());
            let _ = released.await;
            Ok(json!({ "content": "the secret summary", "finishReason": "end_turn" }))
        })
    }));
    let (s, mut streams, mut raw) = connected(cfg, manifest()).await;
    raw.send_json(
        json!({"jsonrpc": "2.0", "id": 1, "method": "inference/request",
        "params": {"featureSet": "assist", "messages": [{"role": "user", "content": "hi"}]}}),
    )
    .await;
    started.await.unwrap();
    let s2 = s.clone();
    let change = tokio::spawn(async move { s2.set_policy(vec!["pushEvents".into()]).await });
    let told = recv(&mut raw).await;
    assert_eq!(told["method"], "featureSets/update", "{told}");
    raw.send_json(json!({"jsonrpc": "2.0", "id": told["id"], "result": {"accepted": true}}))
        .await;
    let change = change.await.unwrap().unwrap();
    assert!(change.narrowed.contains(Capability::InferenceRequest));
    release.send(()).unwrap();
    let a = recv(&mut raw).await;
    assert_eq!(a["id"], 1, "{a}");
    assert!(a.get("result").is_none(), "no content delivered: {a}");
    assert_eq!(a["error"]["code"], -32002, "{a}");
    assert_eq!(a["error"]["data"]["capability"], "inferenceRequest", "{a}");
    let d = drain(&mut streams);
    assert!(
        d.iter().any(
            |d| matches!(d, HostDiagnostic::CapabilityDenied { method, .. }
            if method == "inference/request")
        ),
        "{d:?}"
    );
}

/// §14.2, §14.5: channel ids are compared as the exact strings sent ("unique within this
/// connection"): ids differing only by case or by Unicode normalization are distinct
/// channels, each authorized on its own, and the host's channel patterns match exactly too,
/// so such a variant of a permitted id is never permitted by it (the reading can only
/// under-grant). A message on the variant is judged against the variant's registration.
#[tokio::test]
async fn s14_5_ids_differing_by_case_or_normalization_are_distinct_and_never_permitted_by_likeness()
{
    let mut cfg = config(&["channels.register", "channels.incoming"]);
    cfg.channel_patterns = Some(vec!["ok:*".into(), "caf\u{e9}".into()]);
    let (s, _streams, mut raw) = connected(cfg, manifest()).await;
    let d = |id: &str| json!({ "id": id, "type": "k", "direction": "inbound" });
    let ids = ["ok:a", "ok:A", "OK:a", "caf\u{e9}", "cafe\u{301}"];
    let a = call(
        &mut raw,
        json!(1),
        "channels/register",
        json!({ "channels": ids.iter().map(|i| d(i)).collect::<Vec<_>>() }),
    )
    .await;
    let accepted: Vec<bool> = a["result"]["results"]
        .as_array()
        .expect("itemized")
        .iter()
        .map(|r| r["accepted"] == true)
        .collect();
    assert_eq!(accepted, [true, true, false, true, false], "{a}");
    let mut held = s.channels();
    held.sort();
    assert_eq!(held, ["caf\u{e9}", "ok:A", "ok:a"]);
    let m = |c: &str, id: &str| json!({ "channelId": c, "messageId": id, "content": "hi" });
    let a = call(
        &mut raw,
        json!(2),
        "channels/incoming",
        json!({ "messages": [m("OK:a", "m1"), m("cafe\u{301}", "m2"), m("ok:A", "m3")] }),
    )
    .await;
    let results = &a["result"]["results"];
    assert_eq!(results[0]["code"], -32023, "{a}");
    assert_eq!(results[1]["code"], -32023, "{a}");
    assert_eq!(results[2]["accepted"], true, "{a}");
}

/// §14.2 (a channel id is unique within the connection), §14.5: a `channels/register` or a
/// `channels/changed` `added` naming a channel the connection still holds as another
/// descriptor is refused item-wise (`duplicate_descriptor`), reported, and the first
/// registration stays in force; it never silently replaces it (here it would widen an
/// outbound channel to inbound). The very descriptor held, registered again, is accepted
/// and changes nothing; an id removed earlier in the same `channels/changed` may come back.
#[tokio::test]
async fn s14_2_an_id_registered_again_as_another_descriptor_is_refused_and_reported() {
    let cfg = config(&["channels.register", "channels.incoming"]);
    let (s, mut streams, mut raw) = connected(cfg, manifest()).await;
    let out = json!({ "id": "c:a", "type": "k", "direction": "outbound" });
    let inb = json!({ "id": "c:a", "type": "k", "direction": "inbound" });
    let results = |a: &Value| a["result"]["results"].clone();
    let a = call(
        &mut raw,
        json!(1),
        "channels/register",
        json!({ "channels": [out] }),
    )
    .await;
    assert_eq!(
        results(&a),
        json!([{ "id": "c:a", "accepted": true }]),
        "{a}"
    );
    let a = call(
        &mut raw,
        json!(2),
        "channels/register",
        json!({ "channels": [inb] }),
    )
    .await;
    assert_eq!(
        results(&a),
        json!([{ "id": "c:a", "accepted": false, "reason": "duplicate_descriptor" }]),
        "{a}"
    );
    let a = call(
        &mut raw,
        json!(3),
        "channels/register",
        json!({ "channels": [out] }),
    )
    .await;
    assert_eq!(
        results(&a),
        json!([{ "id": "c:a", "accepted": true }]),
        "{a}"
    );
    raw.send_json(json!({ "jsonrpc": "2.0", "method": "channels/changed",
        "params": { "added": [inb] } }))
        .await;
    let listed = call(&mut raw, json!(4), "channels/list", json!({})).await;
    assert_eq!(listed["result"]["channels"], json!([out]), "{listed}");
    let rejected: Vec<_> = drain(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::ChannelRejected {
                method,
                id,
                reason,
                filtered_notification,
            } => Some((method, id, reason, filtered_notification)),
            _ => None,
        })
        .collect();
    assert_eq!(
        rejected,
        [
            (
                "channels/register".into(),
                "c:a".into(),
                "duplicate_descriptor",
                false
            ),
            (
                "channels/changed".into(),
                "c:a".into(),
                "duplicate_descriptor",
                true
            ),
        ]
    );
    let msg = json!({ "messages": [{ "channelId": "c:a", "messageId": "m1", "content": "hi" }] });
    let a = call(&mut raw, json!(5), "channels/incoming", msg.clone()).await;
    assert_eq!(a["result"]["results"][0]["code"], -32017, "{a}");
    // Removed and added again in one message: the removal applies first.
    let a = call(
        &mut raw,
        json!(6),
        "channels/changed",
        json!({ "removed": ["c:a"], "added": [inb] }),
    )
    .await;
    assert_eq!(
        results(&a),
        json!([{ "id": "c:a", "accepted": true }, { "id": "c:a", "accepted": true }]),
        "{a}"
    );
    let a = call(&mut raw, json!(7), "channels/incoming", msg).await;
    assert_eq!(a["result"]["results"][0]["accepted"], true, "{a}");
    assert_eq!(s.channels(), ["c:a"]);
}

/// §14.2, §14.3: the server answering the host's `channels/open` with a channel the
/// connection already holds as another descriptor names two channels by one id: the host
/// keeps the channel as held (an open answer never rewrites a registration) and reports the
/// answer (`ChannelRejected`, `duplicate_descriptor`) rather than absorbing it, since the
/// application is handed an answer the host does not hold. The very descriptor held is no
/// mistake and is not reported.
#[tokio::test]
async fn s14_2_an_open_answered_with_a_channel_held_as_another_descriptor_is_reported() {
    let cfg = config(&["channels.register", "channels.lifecycle"]);
    let mut m = manifest();
    m["channels"]["lifecycle"] = json!(true);
    let (s, mut streams, mut raw) = connected(cfg, m).await;
    let out = json!({ "id": "c:a", "type": "k", "direction": "outbound" });
    let inb = json!({ "id": "c:a", "type": "k", "direction": "inbound" });
    let a = call(
        &mut raw,
        json!(1),
        "channels/register",
        json!({ "channels": [out] }),
    )
    .await;
    assert_eq!(a["result"]["results"][0]["accepted"], true, "{a}");
    for (answered, reported) in [(&inb, true), (&out, false)] {
        let open = {
            let s = s.clone();
            tokio::spawn(
                async move { s.request_raw("channels/open", json!({ "type": "k" })).await },
            )
        };
        let req = recv(&mut raw).await;
        assert_eq!(req["method"], "channels/open", "{req}");
        raw.send_json(json!({ "jsonrpc": "2.0", "id": req["id"],
            "result": { "channel": answered } }))
            .await;
        assert_eq!(open.await.unwrap().unwrap()["channel"], *answered);
        let listed = call(&mut raw, json!(2), "channels/list", json!({})).await;
        assert_eq!(listed["result"]["channels"], json!([out]), "{listed}");
        let rejected: Vec<_> = drain(&mut streams)
            .into_iter()
            .filter_map(|d| match d {
                HostDiagnostic::ChannelRejected {
                    method, id, reason, ..
                } => Some((method, id, reason)),
                _ => None,
            })
            .collect();
        let expected = match reported {
            true => vec![(
                "channels/open".to_owned(),
                "c:a".to_owned(),
                "duplicate_descriptor",
            )],
            false => vec![],
        };
        assert_eq!(rejected, expected, "{answered}");
    }
}

/// §14.2, §14.5: one `channels/changed` naming an id in two descriptors (in `added` and
/// `updated`, or twice in `updated`) leaves its per-item results ambiguous, as two in one
/// `channels/register` do: the later is refused `duplicate_descriptor` and reported, and the
/// first stands. Before, each was applied in turn and both answered accepted (the later
/// silently won). A removal and an addition of one id in one message stay allowed.
#[tokio::test]
async fn s14_2_a_channels_changed_naming_an_id_twice_applies_the_first_only() {
    let cfg = config(&["channels.register"]);
    let (_s, mut streams, mut raw) = connected(cfg, manifest()).await;
    let d = |id: &str, dir: &str| json!({ "id": id, "type": "k", "direction": dir });
    let a = call(
        &mut raw,
        json!(1),
        "channels/register",
        json!({ "channels": [d("c:a", "outbound")] }),
    )
    .await;
    assert_eq!(a["result"]["results"][0]["accepted"], true, "{a}");
    let a = call(
        &mut raw,
        json!(2),
        "channels/changed",
        json!({
        "added": [d("c:b", "outbound")],
        "updated": [d("c:b", "inbound"), d("c:a", "bidirectional"), d("c:a", "inbound")] }),
    )
    .await;
    let refused = json!({ "accepted": false, "reason": "duplicate_descriptor" });
    let mut expect = vec![
        json!({ "id": "c:b", "accepted": true }),
        json!({ "id": "c:b" }),
        json!({ "id": "c:a", "accepted": true }),
        json!({ "id": "c:a" }),
    ];
    for i in [1, 3] {
        expect[i]
            .as_object_mut()
            .unwrap()
            .extend(refused.as_object().unwrap().clone());
    }
    assert_eq!(a["result"]["results"], json!(expect), "{a}");
    let listed = call(&mut raw, json!(3), "channels/list", json!({})).await;
    assert_eq!(
        listed["result"]["channels"],
        json!([d("c:a", "bidirectional"), d("c:b", "outbound")]),
        "{listed}"
    );
    let rejected = drain(&mut streams)
        .into_iter()
        .filter(|d| {
            matches!(d, HostDiagnostic::ChannelRejected { reason, .. }
            if *reason == "duplicate_descriptor")
        })
        .count();
    assert_eq!(rejected, 2);
}

/// A server request reusing the id of one the host still owes an answer (MCP: an id is not
/// reused by its sender within the session) is answered `-32600` under that id (the id is
/// in use) and never run, by the peer's one rule for every request (`peer::serving`), and
/// reported (`HostDiagnostic::Connection`, naming the reason); the request waiting under
/// the id is left to its handler.
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_is_answered_and_reported() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(std::future::pending::<
            Result<Value, mcpl::jsonrpc::ErrorObject>,
        >())
    }));
    let (_s, mut streams, mut raw) = connected(cfg, manifest()).await;
    let req = json!({ "jsonrpc": "2.0", "id": 7, "method": "inference/request",
        "params": { "featureSet": "assist", "messages": [] } });
    raw.send_json(req.clone()).await;
    raw.send_json(req).await;
    let a = recv(&mut raw).await;
    assert_eq!(
        (&a["id"], &a["error"]["code"]),
        (&json!(7), &json!(-32600)),
        "{a}"
    );
    let message = a["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("in use"), "{a}");
    // A deadlock guard, never a synchronisation: the diagnostic is reported with the answer.
    let reported = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(d) = streams.diagnostics.recv().await {
            if let HostDiagnostic::Connection(mcpl::peer::Diagnostic::InvalidMessage {
                id,
                reason,
                answered,
            }) = d
            {
                return Some((id, reason, answered));
            }
        }
        None
    })
    .await
    .expect("no InvalidMessage diagnostic");
    let (id, reason, answered) = reported.expect("diagnostics ended");
    assert_eq!(id, Some(7_i64.into()));
    assert!(answered && reason.contains("in use"), "{reason}");
}

/// MCP base protocol: a request id is not reused while its request is in flight. Every
/// request the host receives goes through the peer's one rule, not only those the session
/// hands its application: two `ping`s, or two `push/event`s, under one id in one batch get
/// one answer each under that id, the second `-32600` (in use) and never run. Before, the
/// host's connection skipped the rule and ran both, two results under one id.
#[tokio::test]
async fn a_batch_reusing_an_id_runs_the_first_only_at_the_host() {
    let (_s, _streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    let push = json!({ "featureSet": "alerts", "eventId": "e1", "event": { "type": "x" } });
    for (method, params) in [("ping", json!({})), ("push/event", push)] {
        let one = json!({ "jsonrpc": "2.0", "id": 5, "method": method, "params": params });
        raw.send_json(json!([one.clone(), one])).await;
        let a = recv(&mut raw).await;
        let answers = a.as_array().expect("a batch answer");
        assert_eq!(answers.len(), 2, "{method}: {a}");
        let refused: Vec<_> = answers
            .iter()
            .filter(|a| a["error"]["code"] == -32600)
            .collect();
        assert_eq!(refused.len(), 1, "{method}: {a}");
        assert_eq!(refused[0]["id"], 5, "{method}: {a}");
        let message = refused[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("in use"), "{method}: {a}");
    }
}

/// The host answers a request of the server's that the server cancels `-32800` as it
/// handles the cancel (MCP cancellation), so the cancel frees the id at once
/// (`Peer::answers_cancels`): a request reusing it right after the cancel is taken, never
/// refused as in use, and the one answer under the cancelled request's id is the `-32800`.
#[tokio::test]
async fn a_request_reusing_a_cancelled_id_at_once_is_taken_by_the_host() {
    let mut cfg = config(&["inferenceRequest"]);
    cfg.request_handler = Some(std::sync::Arc::new(|_m: &str, _p: Value| {
        Box::pin(std::future::pending::<
            Result<Value, mcpl::jsonrpc::ErrorObject>,
        >())
    }));
    let (_s, _streams, mut raw) = connected(cfg, manifest()).await;
    let req = json!({ "jsonrpc": "2.0", "id": 7, "method": "inference/request",
        "params": { "featureSet": "assist", "messages": [] } });
    raw.send_json(req.clone()).await;
    raw.send_json(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 7 } }),
    )
    .await;
    raw.send_json(req).await;
    let a = recv(&mut raw).await;
    assert_eq!(
        (&a["id"], &a["error"]["code"]),
        (&json!(7), &json!(-32800)),
        "{a}"
    );
    // The reused request was taken (its handler waits): the next line answers the ping.
    let a = call(&mut raw, json!("p"), "ping", json!({})).await;
    assert_eq!(a["result"], json!({}), "{a}");
}

/// JSON-RPC 2.0 §4, §5.1, §4.1's table: a server request naming a method that is a
/// notification only (`mcpl/manifestChanged`, the server's own; `inference/lifecycle`,
/// `notifications/initialized`, the host's) is a well-formed Request for a method with no
/// request form: answered `-32601` with `data: {method}`, saying it is a notification, as
/// the server session answers the host (one rule, `session::notification_as_request`), and
/// reported (`UnexpectedMethod`): the server's mistake, never absorbed. `mcpl/manifestChanged`
/// sent so fetches nothing.
#[tokio::test]
async fn s4_1_a_notification_only_method_sent_with_an_id_is_answered_32601_and_reported() {
    let (_s, mut streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    let methods = [
        "mcpl/manifestChanged",
        "inference/lifecycle",
        "notifications/initialized",
    ];
    for (i, method) in methods.into_iter().enumerate() {
        let a = call(&mut raw, json!(i + 1), method, json!({})).await;
        assert_eq!(a["error"]["code"], -32601, "{a}");
        assert_eq!(a["error"]["data"], json!({ "method": method }), "{a}");
        let message = a["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("is a notification"), "{a}");
    }
    // The host's next line answers this ping: no manifest/fetch was sent before it.
    let a = call(&mut raw, json!(9), "ping", json!({})).await;
    assert_eq!(a["result"], json!({}), "{a}");
    let reported: Vec<String> = drain(&mut streams)
        .into_iter()
        .filter_map(|d| match d {
            HostDiagnostic::UnexpectedMethod { method } => Some(method),
            _ => None,
        })
        .collect();
    assert_eq!(reported, methods, "{reported:?}");
}

/// JSON-RPC 2.0 §6: a batch of two `ping`s is answered in one array, each under its id,
/// in entry order; `HostState::handle_frame` writes the same array for the same text
/// (`session::tests::host_frames::s6_a_batch_of_pings_is_answered_in_one_array`).
#[tokio::test]
async fn s6_a_batch_of_pings_is_answered_in_one_array() {
    let (_s, _streams, mut raw) = connected(config(&["pushEvents"]), manifest()).await;
    raw.send_json(json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "two", "method": "ping"},
    ]))
    .await;
    assert_eq!(
        recv(&mut raw).await,
        json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": "two", "result": {}},
        ])
    );
}
