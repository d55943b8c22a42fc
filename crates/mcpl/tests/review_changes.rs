//! Host processing of fetched manifests (§17.5), the change receipt (§17.6), the offline
//! diff and the fetch limiter (§17.8).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mcpl::capability::{Capability, CapabilitySet, Grant};
use mcpl::manifest::review::{
    diff, ChangeReceipt, FetchDecision, FetchLimiter, FetchResult, ManifestReview,
};
use mcpl::manifest::{revision, ChangeDomain, ChangeImpact, Disposition};
use mcpl::policy::FeatureSetStatus;
use serde_json::{json, Value};

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// `m` without its `chat.relay` feature set.
fn without_relay(m: &Value) -> Value {
    let mut m = m.clone();
    if let Some(sets) = m["featureSets"].as_object_mut() {
        sets.remove("chat.relay");
    }
    m
}

fn base() -> Value {
    json!({"version":"0.5","pushEvents":true,
        "channels":{"publish":true,"incoming":true},
        "featureSets":{
            "chat.relay":{"description":"Relay","uses":["channels.publish","channels.incoming"]},
            "push.alerts":{"description":"Alerts","uses":["pushEvents"],
                "tagOntology":{"tags":{"acme:alert":{"desc":"An alert"},"acme:page":{}}}}}})
}

fn review_all(m: &Value) -> ManifestReview {
    ManifestReview::initial(m, None, ["*", "channels.*"], t(0))
        .unwrap()
        .0
}

fn receipt(r: &mut ManifestReview, m: &Value) -> ChangeReceipt {
    let out = r.on_fetched(m, None, t(10));
    out.receipt()
        .cloned()
        .unwrap_or_else(|| panic!("no receipt: {out:?}"))
}

fn pairs(rc: &ChangeReceipt) -> Vec<(ChangeImpact, Disposition, String)> {
    rc.impacts
        .iter()
        .map(|i| (i.impact, i.disposition, i.subject.clone()))
        .collect()
}

#[test]
fn s17_5_initial_grant_is_advertisement_intersect_policy() {
    let (r, findings) = ManifestReview::initial(&base(), None, ["channels.*"], t(0)).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    let want: CapabilitySet = [Capability::ChannelsPublish, Capability::ChannelsIncoming]
        .into_iter()
        .collect();
    assert_eq!(r.grant().grant.capabilities(), want);
    assert_eq!(r.grant().provenance, "initialize");
    assert_eq!(r.revision(), Some(revision(&base()).unwrap().as_str()));
    assert!(r.statuses()["chat.relay"].is_available());
    assert!(!r.statuses()["push.alerts"].is_available());
}

#[test]
fn s17_5_partially_invalid_manifest_still_revokes_removals() {
    let mut r = review_all(&base());
    let mut m = base();
    // Narrow one capability while malforming a declaration.
    m["channels"] = json!({"incoming":true});
    m["featureSets"]["push.alerts"]["uses"] = json!(["pushEvents.bogus"]);
    let out = r.on_fetched(&m, None, t(10));
    assert!(out.findings.iter().any(|f| f.code == "invalid_uses"));
    let rc = out.receipt().unwrap();
    let p = pairs(rc);
    assert!(p.contains(&(
        ChangeImpact::CapabilityRevoked,
        Disposition::Applied,
        "channels.publish".into()
    )));
    assert!(!r.grant().grant.allows(Capability::ChannelsPublish));
    assert!(r.grant().grant.allows(Capability::ChannelsIncoming));
    assert_eq!(r.grant().at, t(10));
    assert_eq!(r.grant().provenance, "manifest-change");
    // Derivation follows: relay lost publish, alerts has invalid uses.
    assert!(matches!(
        r.statuses()["push.alerts"],
        FeatureSetStatus::Unavailable { .. }
    ));
    let degraded: Vec<_> = rc
        .impacts
        .iter()
        .filter(|i| i.impact == ChangeImpact::FeatureDegraded)
        .map(|i| (i.subject.as_str(), i.reason, i.disposition))
        .collect();
    assert_eq!(
        degraded,
        vec![
            (
                "chat.relay",
                Some("capability_denied"),
                Disposition::Applied
            ),
            ("push.alerts", Some("invalid_uses"), Disposition::Applied),
        ]
    );
}

#[test]
fn s17_5_removed_member_revokes_every_leaf_and_feature_set() {
    let mut r = review_all(&base());
    let mut m = without_relay(&base());
    m.as_object_mut().unwrap().remove("channels");
    let rc = receipt(&mut r, &m);
    assert_eq!(
        rc.domains,
        vec![ChangeDomain::Capabilities, ChangeDomain::FeatureSets]
    );
    let p = pairs(&rc);
    for path in ["channels.incoming", "channels.publish"] {
        assert!(p.contains(&(
            ChangeImpact::CapabilityRevoked,
            Disposition::Applied,
            path.into()
        )));
    }
    let removed = rc
        .impacts
        .iter()
        .find(|i| i.subject == "chat.relay")
        .unwrap();
    assert_eq!(
        (removed.impact, removed.reason),
        (ChangeImpact::FeatureDegraded, Some("removed"))
    );
    assert!(r
        .grant()
        .grant
        .capabilities()
        .iter()
        .all(|c| !c.as_str().starts_with("channels")));
}

#[test]
fn s17_5_additions_are_pending_never_granted() {
    let mut r = review_all(&base());
    let mut m = base();
    m["modelInfo"] = json!(true);
    m["channels"]["typing"] = json!(true);
    let rc = receipt(&mut r, &m);
    assert_eq!(
        pairs(&rc),
        vec![
            (
                ChangeImpact::CapabilityExpansionPending,
                Disposition::DecisionNeeded,
                "modelInfo".into()
            ),
            (
                ChangeImpact::CapabilityExpansionPending,
                Disposition::DecisionNeeded,
                "channels.typing".into()
            ),
        ]
    );
    // Host policy "*" and "channels.*" would match both, but nothing was auto-granted.
    assert!(!r.grant().grant.allows(Capability::ModelInfo));
    assert!(!r.grant().grant.allows(Capability::ChannelsTyping));
    assert_eq!(r.grant().provenance, "initialize");
    assert!(r.advertised().contains(Capability::ModelInfo));
    // A host decision can then widen, up to the advertisement only.
    let g = r.set_grant(Grant::from_set(CapabilitySet::ALL), t(20), "operator");
    assert!(g.allows(Capability::ModelInfo));
    assert!(!g.allows(Capability::InferenceRequest));
}

#[test]
fn s17_2_digest_mismatch_is_a_defect_not_a_rejection() {
    let mut r = review_all(&base());
    let mut m = base();
    m["modelInfo"] = json!(true);
    m["revision"] = json!(revision(&base()).unwrap()); // stale, hand-kept
    let announced = "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let out = r.on_fetched(&m, Some(announced), t(10));
    let codes: Vec<_> = out.defects.iter().map(|d| d.code).collect();
    assert_eq!(
        codes,
        vec!["revision_mismatch", "announced_revision_mismatch"]
    );
    let rc = out
        .receipt()
        .expect("content is acted on despite the mismatch");
    assert_eq!(rc.revision, revision(&m).unwrap());
    assert_eq!(r.manifest(), &m);
}

#[test]
fn s17_2_matching_announcement_is_no_defect() {
    let mut r = review_all(&base());
    let mut m = base();
    m["modelInfo"] = json!(true);
    let rev = revision(&m).unwrap();
    m["revision"] = json!(rev);
    let out = r.on_fetched(&m, Some(&rev), t(10));
    assert!(out.defects.is_empty(), "{:?}", out.defects);
}

#[test]
fn s17_5_unparseable_leaves_previous_standing_and_counts_failures() {
    let mut r = review_all(&base());
    let before = r.grant().clone();
    for (i, bad) in [json!([1, 2]), json!("nope"), json!(null)]
        .iter()
        .enumerate()
    {
        let out = r.on_fetched(bad, None, t(10));
        assert!(matches!(
            out.result,
            FetchResult::PreviousStands { consecutive_failures, .. } if consecutive_failures == i as u32 + 1
        ));
        assert!(out.receipt().is_none());
        assert_eq!(r.manifest(), &base());
        assert_eq!(r.grant(), &before);
    }
    assert_eq!(r.consecutive_failures(), 3);
    assert!(r.may_suspend(3));
    // Never on a single failure, whatever threshold the host configured.
    let mut r1 = review_all(&base());
    r1.on_fetched(&json!(null), None, t(10));
    assert!(!r1.may_suspend(1) && !r1.may_suspend(0));
    // A usable fetch resets the count.
    assert!(matches!(
        r.on_fetched(&base(), None, t(11)).result,
        FetchResult::Unchanged
    ));
    assert_eq!(r.consecutive_failures(), 0);
}

/// §17.5 step 1: a manifest that parses but that the digest refuses (a bad identifier) is
/// partially invalid — every removal it shows applies, nothing it adds, and it is not an
/// unparseable response (no failure counted towards suspension).
#[test]
fn s17_5_a_digest_refused_manifest_still_applies_its_removals() {
    let mut r = review_all(&base());
    let before = r.grant().clone();
    assert!(before.grant.allows(Capability::PushEvents));
    // Drops pushEvents while adding a set under a bad identifier.
    let mut next = base();
    next.as_object_mut().unwrap().remove("pushEvents");
    next["featureSets"]["bad name"] = json!({"description": "x", "uses": ["channels.publish"]});
    let out = r.on_fetched(&next, None, t(10));
    assert!(out.findings.iter().any(|f| f.code == "identifier_charset"));
    assert!(out
        .defects
        .iter()
        .any(|f| f.code == "partially_invalid_manifest"));
    let receipt = out.receipt().expect("the removal is a change");
    assert!(receipt
        .impacts
        .iter()
        .any(|i| i.impact == ChangeImpact::CapabilityRevoked && i.subject == "pushEvents"));
    assert!(!r.grant().grant.allows(Capability::PushEvents));
    assert!(!r.manifest()["featureSets"]
        .as_object()
        .unwrap()
        .contains_key("bad name"));
    assert_eq!(r.consecutive_failures(), 0);
    // Nothing removed (the manifest in force plus a bad addition): nothing changes, no
    // receipt, and still no failure counted.
    let in_force = r.manifest().clone();
    let mut same = in_force.clone();
    same["pushEvents"] = json!(true); // an addition: never granted
    same["bad key"] = json!(true);
    let again = r.on_fetched(&same, None, t(11));
    assert!(again
        .defects
        .iter()
        .any(|f| f.code == "partially_invalid_manifest"));
    assert!(again.receipt().is_none(), "{again:?}");
    assert_eq!(r.manifest(), &in_force);
    assert_eq!(r.consecutive_failures(), 0);
    // A changed declaration in such a manifest disables the set (neither old nor new uses).
    let mut changed = in_force.clone();
    changed["featureSets"]["chat.relay"]["uses"] = json!(["channels.publish"]);
    changed["bad key"] = json!(true);
    r.on_fetched(&changed, None, t(12));
    assert!(matches!(
        r.statuses().get("chat.relay"),
        Some(FeatureSetStatus::Unavailable { .. })
    ));
}

#[test]
fn s17_5_changed_tag_ontology_invalidates_acceptance() {
    let mut r = review_all(&base());
    let d = r.accept_ontology("push.alerts").unwrap();
    assert_eq!(r.accepted_ontology("push.alerts"), Some(d.as_str()));
    assert!(r.accept_ontology("chat.relay").is_err());
    let mut m = base();
    m["featureSets"]["push.alerts"]["tagOntology"]["open"] = json!(true);
    let rc = receipt(&mut r, &m);
    assert_eq!(rc.domains, vec![ChangeDomain::TagOntology]);
    assert_eq!(
        pairs(&rc),
        vec![(
            ChangeImpact::OntologyAcceptanceInvalidated,
            Disposition::Applied,
            "push.alerts".into()
        )]
    );
    assert_eq!(r.accepted_ontology("push.alerts"), None);
}

#[test]
fn s17_5_reordered_ontology_set_keeps_acceptance() {
    let mut m = base();
    m["featureSets"]["push.alerts"]["tagOntology"]["coreTags"] = json!(["chat:dm", "chat:mention"]);
    let mut r = review_all(&m);
    r.accept_ontology("push.alerts").unwrap();
    let mut m2 = m.clone();
    m2["featureSets"]["push.alerts"]["tagOntology"]["coreTags"] =
        json!(["chat:mention", "chat:dm"]);
    m2["modelInfo"] = json!(true);
    receipt(&mut r, &m2);
    assert!(r.accepted_ontology("push.alerts").is_some());
}

/// §16.7, §17.6: a pattern that is malformed or can never match refuses the call whole,
/// each named, and the patterns set before stand; it was skipped unseen, so a rule's
/// reference was never watched.
#[test]
fn s16_7_a_malformed_consumer_pattern_is_refused_not_skipped() {
    let mut r = review_all(&base());
    r.set_consumer_patterns(["acme:page"]).unwrap();
    let refused = r.set_consumer_patterns(["other:*", "acme page", "page"]);
    assert_eq!(
        refused,
        Err(vec![
            mcpl::tags::RuleError::InvalidPattern("acme page".into()),
            mcpl::tags::RuleError::UnnamespacedPattern("page".into()),
        ])
    );
    let mut m = base();
    m["featureSets"]["push.alerts"]["tagOntology"]["tags"]
        .as_object_mut()
        .unwrap()
        .remove("acme:page");
    let rc = receipt(&mut r, &m);
    assert!(
        pairs(&rc)
            .iter()
            .any(|(i, _, s)| *i == ChangeImpact::OntologyReferenceUndeclared && s == "acme:page"),
        "the pattern set before still watched: {:?}",
        pairs(&rc)
    );
}

#[test]
fn s17_6_ontology_reference_undeclared_is_informational() {
    let mut r = review_all(&base());
    r.set_consumer_patterns(["acme:page", "other:*"]).unwrap();
    let mut m = base();
    m["featureSets"]["push.alerts"]["tagOntology"]["tags"]
        .as_object_mut()
        .unwrap()
        .remove("acme:page");
    let rc = receipt(&mut r, &m);
    assert_eq!(
        pairs(&rc),
        vec![(
            ChangeImpact::OntologyReferenceUndeclared,
            Disposition::Informational,
            "acme:page".into()
        )]
    );
}

#[test]
fn s17_5_one_receipt_per_change_none_for_no_change() {
    let mut r = review_all(&base());
    // Same content, members reordered and a revision added: same digest, no receipt.
    let mut same = base();
    same["revision"] = json!(revision(&base()).unwrap());
    assert!(matches!(
        r.on_fetched(&same, None, t(5)).result,
        FetchResult::Unchanged
    ));
    assert!(r.last_receipt().is_none());
    // A change touching all three domains yields exactly one receipt.
    let mut m = base();
    m["modelInfo"] = json!(true);
    m["featureSets"]["chat.relay"]["description"] = json!("Relay v2");
    m["featureSets"]["push.alerts"]["tagOntology"]["open"] = json!(true);
    let rc = receipt(&mut r, &m);
    assert_eq!(rc.domains, ChangeDomain::ALL.to_vec());
    assert_eq!(rc.previous_revision, Some(revision(&base()).unwrap()));
    assert_eq!(r.last_receipt(), Some(&rc));
    // Fetching it again is no change.
    assert!(matches!(
        r.on_fetched(&m, None, t(6)).result,
        FetchResult::Unchanged
    ));
    assert_eq!(r.last_receipt(), Some(&rc));
}

#[test]
fn s17_5_fixed_uses_restores_feature() {
    let mut m = base();
    m["featureSets"]["chat.relay"]["uses"] = json!([]);
    let mut r = review_all(&m);
    assert!(!r.statuses()["chat.relay"].is_available());
    let rc = receipt(&mut r, &base());
    assert_eq!(
        pairs(&rc),
        vec![(
            ChangeImpact::FeatureRestored,
            Disposition::Applied,
            "chat.relay".into()
        )]
    );
}

#[test]
fn s17_5_tools_is_kept_from_the_outer_capabilities() {
    let outer = json!({"tools":{},"experimental":{"mcpl":base()}});
    let (mut r, _) =
        ManifestReview::initial(&base(), Some(&outer), ["*", "channels.*"], t(0)).unwrap();
    assert!(r.grant().grant.allows(Capability::Tools));
    let mut m = base();
    m["modelInfo"] = json!(true);
    let rc = receipt(&mut r, &m);
    assert!(rc.impacts.iter().all(|i| i.subject != "tools"));
    assert!(r.grant().grant.allows(Capability::Tools));
}

#[test]
fn s17_6_receipt_serialises_with_b4_spellings() {
    let mut r = review_all(&base());
    let mut m = base();
    m.as_object_mut().unwrap().remove("pushEvents");
    let v = serde_json::to_value(receipt(&mut r, &m)).unwrap();
    assert_eq!(v["revision"], json!(revision(&m).unwrap()));
    assert_eq!(v["previousRevision"], json!(revision(&base()).unwrap()));
    assert_eq!(v["domains"], json!(["capabilities"]));
    assert_eq!(
        v["impacts"][0],
        json!({"impact":"capability-revoked","disposition":"applied",
               "domain":"capabilities","subject":"pushEvents"})
    );
    assert_eq!(
        v["impacts"][1],
        json!({"impact":"feature-degraded","disposition":"applied","domain":"featureSets",
               "subject":"push.alerts","reason":"capability_denied"})
    );
}

#[test]
fn s17_7_surface_changed_receipt() {
    let mut r = review_all(&base());
    let rc = r.surface_changed("tools").unwrap();
    let v = serde_json::to_value(&rc).unwrap();
    assert_eq!(
        v["impacts"],
        json!([{"impact":"surface-changed","disposition":"informational","subject":"tools"}])
    );
}

/// A change receipt handed to the application weighs what it holds against
/// `max_event_bytes` (`HostEvent::weight`): its revisions and each impact's subject. It
/// weighed nothing beyond the event itself, so receipts naming long subjects waited for an
/// application unweighed; `announced_surface` names the only surfaces a server's MCP
/// notification may change (§17.7).
#[test]
fn s17_6_a_change_receipt_weighs_what_it_holds() {
    let mut r = review_all(&base());
    let subject = "x".repeat(100_000);
    let rc = r.surface_changed(&subject).unwrap();
    let weight = mcpl::session::HostEvent::ManifestChange(rc.clone()).weight();
    assert!(weight > subject.len() + rc.revision.len(), "{weight}");
    assert_eq!(
        mcpl::manifest::review::announced_surface("notifications/tools/list_changed"),
        Some("tools")
    );
    for other in [
        "notifications/roots/list_changed",
        "notifications/evil/list_changed",
        "notifications/tools/list_changed/x",
    ] {
        assert_eq!(mcpl::manifest::review::announced_surface(other), None);
    }
}

#[test]
fn s17_5_offline_diff_shape_and_host_assumption() {
    let old = base();
    let mut new = base();
    new.as_object_mut().unwrap().remove("pushEvents");
    new["modelInfo"] = json!(true);
    new["featureSets"]["push.alerts"]["tagOntology"]["open"] = json!(false);
    let d = diff(&old, &new);
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 2);
    assert_eq!(v["domains"], json!(["capabilities", "tagOntology"]));
    let got: Vec<_> = d
        .impacts
        .iter()
        .map(|i| (i.impact, i.disposition, i.subject.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                ChangeImpact::CapabilityRevoked,
                Disposition::Applied,
                "pushEvents"
            ),
            (
                ChangeImpact::CapabilityExpansionPending,
                Disposition::DecisionNeeded,
                "modelInfo"
            ),
            (
                ChangeImpact::FeatureDegraded,
                Disposition::Applied,
                "push.alerts"
            ),
            (
                ChangeImpact::OntologyAcceptanceInvalidated,
                Disposition::Applied,
                "push.alerts"
            ),
        ]
    );
    assert_eq!(
        diff(&old, &old),
        mcpl::manifest::review::Diff {
            domains: vec![],
            impacts: vec![]
        }
    );
    // Total over junk.
    assert_eq!(
        diff(&json!([]), &json!("x")).domains,
        ChangeDomain::ALL.to_vec()
    );
}

#[test]
fn s17_8_storm_of_1000_notifications_is_bounded() {
    // burst 3, 1 token/s; 1000 notifications over 1s, each fetch completing at once.
    let mut l = FetchLimiter::new(3, 1.0);
    let t0 = Instant::now();
    let mut fetches = 0u32;
    for i in 0..1000u64 {
        let now = t0 + Duration::from_millis(i);
        if l.on_notification(now) == FetchDecision::FetchNow {
            fetches += 1;
            if l.on_fetch_complete(now) {
                fetches += 1;
            }
        }
    }
    // Window ~1s: at most burst + refill·1s = 4 fetches.
    assert!(fetches <= 4, "{fetches} fetches");
    assert!(fetches >= 3);
    assert_eq!(l.dropped(), 1000 - u64::from(fetches));
}

#[test]
fn s17_8_notifications_during_a_pending_fetch_coalesce_into_one() {
    let mut l = FetchLimiter::new(2, 0.0);
    let t0 = Instant::now();
    assert_eq!(l.on_notification(t0), FetchDecision::FetchNow);
    for i in 1..1000u64 {
        assert_eq!(
            l.on_notification(t0 + Duration::from_micros(i)),
            FetchDecision::Coalesced
        );
    }
    assert!(l.is_pending());
    // One follow-up fetch for all 999.
    assert!(l.on_fetch_complete(t0 + Duration::from_millis(5)));
    assert!(!l.on_fetch_complete(t0 + Duration::from_millis(6)));
    assert_eq!(l.dropped(), 0);
    // Bucket empty, no refill: the next one is dropped and counted.
    assert_eq!(
        l.on_notification(t0 + Duration::from_millis(7)),
        FetchDecision::Dropped
    );
    assert_eq!(l.dropped(), 1);
}

#[test]
fn s17_8_tokens_refill_with_passed_in_time() {
    let mut l = FetchLimiter::new(1, 2.0);
    let t0 = Instant::now();
    assert_eq!(l.on_notification(t0), FetchDecision::FetchNow);
    assert!(!l.on_fetch_complete(t0));
    assert_eq!(
        l.on_notification(t0 + Duration::from_millis(100)),
        FetchDecision::Dropped
    );
    l.on_fetch_complete(t0 + Duration::from_millis(100));
    assert_eq!(
        l.on_notification(t0 + Duration::from_millis(600)),
        FetchDecision::FetchNow
    );
}

#[test]
fn s17_5_refused_initial_manifest_grants_nothing_and_accepts_no_ontology() {
    let mut m = base();
    m["bad key"] = json!(true);
    let (mut r, findings) = ManifestReview::initial(&m, None, ["*", "channels.*"], t(0)).unwrap();
    assert!(findings.iter().any(|f| f.code == "identifier_charset"));
    assert!(r.grant().grant.capabilities().is_empty());
    assert_eq!(r.revision(), None);
    assert!(r.accept_ontology("push.alerts").is_err());
    assert!(r.surface_changed("tools").is_none());
    // A later good manifest: everything is an addition, pending, nothing granted.
    let rc = receipt(&mut r, &base());
    assert_eq!(rc.previous_revision, None);
    assert!(rc
        .impacts
        .iter()
        .filter(|i| i.domain == Some(ChangeDomain::Capabilities))
        .all(|i| i.impact == ChangeImpact::CapabilityExpansionPending));
    assert!(r.grant().grant.capabilities().is_empty());
}

#[test]
fn s5_4_bad_host_policy_pattern_is_an_error() {
    let err = ManifestReview::initial(&base(), None, ["channels.pub*"], t(0)).unwrap_err();
    assert!(!err.code().is_empty());
}

/// The manifest in force is kept as its text (idle memory) and read back exactly: numbers
/// (floats at the edge of f64, -0.0, integers past i64), escapes and vendor members come
/// back as given, and a changed fetch is diffed against the kept manifest (one domain
/// changed), after the getter was asked or not. A fetch of the same content stays
/// `Unchanged` (§17.5: judged by its digest, which the kept text does not enter).
#[test]
fn s17_5_the_manifest_in_force_reads_back_exactly_and_diffs_against_the_kept_one() {
    let mut m = base();
    m["x-vendor"] = json!({
        "f": [0.1, 1e-7, 2.2250738585072014e-308, 1.7976931348623157e308, -0.0, 0.30000000000000004],
        "u": 18446744073709551615u64, "i": -9223372036854775808i64,
        "s": "é\u{0}\"\\\n😀"
    });
    for ask_first in [false, true] {
        let mut r = review_all(&m);
        if ask_first {
            assert_eq!(r.manifest(), &m);
        }
        assert!(matches!(
            r.on_fetched(&m.clone(), None, t(5)).result,
            FetchResult::Unchanged
        ));
        let narrowed = without_relay(&m);
        let rc = receipt(&mut r, &narrowed);
        assert_eq!(
            rc.previous_revision.as_deref(),
            Some(revision(&m).unwrap().as_str())
        );
        assert_eq!(rc.domains, [ChangeDomain::FeatureSets]);
        assert_eq!(r.manifest(), &narrowed);
        // `Value`'s equality takes -0.0 for 0.0: the sign is checked on its own.
        assert!(r.manifest()["x-vendor"]["f"][4]
            .as_f64()
            .is_some_and(f64::is_sign_negative));
        assert_eq!(r.revision(), Some(revision(&narrowed).unwrap().as_str()));
    }
}

/// The manifest in force reads back whatever its depth: a vendor member nested past
/// `serde_json`'s parse depth (128) is still the manifest given, not `null` (the kept text
/// must not be read back through a limit the given `Value` was never subject to), and is
/// diffed as one (one domain changed).
#[test]
fn s17_5_a_deeply_nested_manifest_in_force_reads_back_exactly() {
    let mut deep = json!("leaf");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let mut m = base();
    m["x-vendor"] = deep;
    let mut r = review_all(&m);
    let narrowed = without_relay(&m);
    let rc = receipt(&mut r, &narrowed);
    assert_eq!(rc.domains, [ChangeDomain::FeatureSets]);
    assert_eq!(r.manifest(), &narrowed);
    assert!(matches!(
        r.on_fetched(&narrowed.clone(), None, t(20)).result,
        FetchResult::Unchanged
    ));
}
