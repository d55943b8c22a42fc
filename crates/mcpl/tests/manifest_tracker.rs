//! §17.3, §17.4 and the §17.10 implementation note: the server-side `ManifestTracker`,
//! exercised with recording sinks (live-connection tests come with the server session).
#![cfg(feature = "runtime")]

use mcpl::manifest::{revision, ChangeDomain, ManifestChanged, ManifestTracker};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use ChangeDomain::*;

#[path = "support/recorder.rs"]
mod recorder;
use recorder::Recorder;

fn base() -> Value {
    json!({"version":"0.5","pushEvents":true,"channels":{"publish":true},
           "featureSets":{"demo.messaging":{"description":"Demo","uses":["pushEvents","channels.publish"]}}})
}

fn tracker_with_connection() -> (ManifestTracker, Arc<Recorder>) {
    let t = ManifestTracker::new(base()).unwrap();
    let rec = Arc::new(Recorder::default());
    let init_rev = t.snapshot().revision().to_owned();
    t.attach(rec.clone(), &init_rev);
    (t, rec)
}

#[test]
fn s17_10_no_announcement_right_after_attach_with_initialize_revision() {
    let (t, rec) = tracker_with_connection();
    assert!(rec.take().is_empty());
    assert_eq!(t.revision(), revision(&base()).unwrap());
}

#[test]
fn s17_10_attach_with_stale_revision_announces_current_with_all_domains() {
    let t = ManifestTracker::new(base()).unwrap();
    let rec = Arc::new(Recorder::default());
    let id = t.attach(rec.clone(), "sha256:something-else");
    let got = rec.take();
    assert_eq!(
        got,
        vec![ManifestChanged {
            revision: t.revision(),
            domains: ChangeDomain::ALL.to_vec()
        }]
    );
    assert_eq!(t.announced_revision(id), Some(t.revision()));
}

#[test]
fn s17_10_attach_snapshot_diffs_against_what_initialize_carried() {
    let t = ManifestTracker::new(base()).unwrap();
    let initialized = t.snapshot();
    t.transaction(|m| m["pushEvents"] = json!(false)).unwrap();
    let rec = Arc::new(Recorder::default());
    t.attach_snapshot(rec.clone(), initialized);
    assert_eq!(
        rec.take(),
        vec![ManifestChanged {
            revision: t.revision(),
            domains: vec![Capabilities]
        }]
    );
}

#[test]
fn s17_10_no_op_edit_sends_nothing() {
    let (t, rec) = tracker_with_connection();
    // Same content with members and `uses` reordered and a bogus revision: same digest.
    let same = json!({"featureSets":{"demo.messaging":{"uses":["channels.publish","pushEvents","pushEvents"],
        "description":"Demo"}},"channels":{"publish":true},"pushEvents":true,"version":"0.5","revision":"sha256:lie"});
    let out = t.set_manifest(same).unwrap();
    assert!(!out.changed);
    assert_eq!(out.announced, 0);
    assert!(rec.take().is_empty());
    let out = t.transaction(|_| {}).unwrap();
    assert!(!out.changed);
    assert!(rec.take().is_empty());
}

#[test]
fn s17_10_one_announcement_per_transaction() {
    let (t, rec) = tracker_with_connection();
    let out = t
        .transaction(|m| {
            m["pushEvents"] = json!(false);
            m["channels"]["incoming"] = json!(true);
            m["featureSets"]["demo.messaging"]["uses"] = json!(["channels.publish"]);
            m["featureSets"]["demo.messaging"]["tagOntology"] =
                json!({"coreTags":["chat:mention"]});
            m["featureSets"]["demo.extra"] = json!({"description":"x","uses":["tools"]});
            m["modelInfo"] = json!(true);
        })
        .unwrap();
    assert!(out.changed);
    assert_eq!(out.announced, 1);
    let got = rec.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].revision, out.revision);
    assert_eq!(got[0].domains, vec![Capabilities, FeatureSets, TagOntology]);
    // The announcement carries exactly {revision, domains}.
    let wire = serde_json::to_value(&got[0]).unwrap();
    assert_eq!(wire.as_object().unwrap().len(), 2);
    assert_eq!(
        wire["domains"],
        json!(["capabilities", "featureSets", "tagOntology"])
    );
}

#[test]
fn s17_3_member_appearing_and_disappearing_announce_its_domains() {
    let t = ManifestTracker::new(json!({"version":"0.5"})).unwrap();
    let rec = Arc::new(Recorder::default());
    t.attach(rec.clone(), &t.revision());
    t.set_manifest(json!({"version":"0.5","featureSets":null}))
        .unwrap();
    t.set_manifest(json!({"version":"0.5","featureSets":{}}))
        .unwrap();
    t.set_manifest(json!({"version":"0.5","featureSets":{},"pushEvents":false}))
        .unwrap();
    t.set_manifest(json!({"version":"0.5"})).unwrap();
    let domains: Vec<_> = rec.take().into_iter().map(|c| c.domains).collect();
    assert_eq!(
        domains,
        vec![
            vec![FeatureSets, TagOntology],
            vec![FeatureSets, TagOntology],
            vec![Capabilities],
            vec![Capabilities, FeatureSets, TagOntology],
        ]
    );
}

#[test]
fn s17_4_manifest_result_equals_what_was_announced() {
    let (t, rec) = tracker_with_connection();
    t.transaction(|m| m["channels"]["incoming"] = json!(true))
        .unwrap();
    let announced = rec.take().pop().unwrap();
    let result = t.manifest_result();
    // Flat experimental.mcpl object (no wrapper), complete, carrying the announced revision
    // which is the digest of its own content.
    assert_eq!(result["revision"], json!(announced.revision));
    assert_eq!(result["channels"], json!({"publish":true,"incoming":true}));
    assert_eq!(result["version"], json!("0.5"));
    assert!(result.get("capabilities").is_none());
    assert_eq!(revision(&result).unwrap(), announced.revision);
}

#[test]
fn s17_1_supplied_revision_is_replaced_by_the_digest() {
    let (t, rec) = tracker_with_connection();
    let mut next = base();
    next["pushEvents"] = json!(false);
    next["revision"] = json!("sha256:hand-maintained");
    let out = t.set_manifest(next).unwrap();
    let served = t.manifest_result();
    assert_eq!(served["revision"], json!(out.revision));
    assert_eq!(revision(&served).unwrap(), out.revision);
    assert_eq!(rec.take()[0].revision, out.revision);
}

#[test]
fn s17_2_refused_manifest_installs_nothing() {
    let (t, rec) = tracker_with_connection();
    let before = t.revision();
    let err = t
        .set_manifest(json!({"version":"0.5","bad key":true}))
        .unwrap_err();
    assert_eq!(err.code(), "identifier_charset");
    assert_eq!(
        t.set_manifest(json!([])).unwrap_err().code(),
        "manifest_not_object"
    );
    assert_eq!(t.revision(), before);
    assert!(rec.take().is_empty());
}

#[test]
fn s17_10_each_connection_diffed_against_its_own_last_announcement() {
    let (t, a) = tracker_with_connection();
    t.transaction(|m| m["pushEvents"] = json!(false)).unwrap();
    let b = Arc::new(Recorder::default());
    let b_id = t.attach(b.clone(), &t.revision());
    t.transaction(|m| m["featureSets"]["demo.messaging"]["description"] = json!("Renamed"))
        .unwrap();
    assert_eq!(
        a.take()
            .iter()
            .map(|c| c.domains.clone())
            .collect::<Vec<_>>(),
        vec![vec![Capabilities], vec![FeatureSets]]
    );
    assert_eq!(
        b.take()
            .iter()
            .map(|c| c.domains.clone())
            .collect::<Vec<_>>(),
        vec![vec![FeatureSets]]
    );
    assert!(t.detach(b_id));
    assert!(!t.detach(b_id));
    t.transaction(|m| m["pushEvents"] = json!(true)).unwrap();
    assert_eq!(a.take().len(), 1);
    assert!(b.take().is_empty());
}

#[test]
fn s17_10_version_only_change_is_served_but_not_announced() {
    let (t, rec) = tracker_with_connection();
    let before = t.revision();
    let out = t.transaction(|m| m["version"] = json!("0.6")).unwrap();
    assert!(out.changed);
    assert!(out.domains.is_empty());
    assert!(rec.take().is_empty(), "App. B.3: domains has minItems 1");
    assert_eq!(t.manifest_result()["version"], json!("0.6"));
    // Back to the announced content: the connection's revision already matches.
    t.transaction(|m| m["version"] = json!("0.5")).unwrap();
    assert_eq!(t.revision(), before);
    assert!(rec.take().is_empty());
}

#[test]
fn s17_10_closure_sink_and_reads_from_inside_a_sink() {
    let t = Arc::new(ManifestTracker::new(base()).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (t2, seen2) = (Arc::clone(&t), Arc::clone(&seen));
    let sink = move |c: ManifestChanged| {
        // A sink may read the snapshot; it must see the revision it is told about.
        seen2.lock().unwrap().push((c.revision, t2.revision()));
    };
    t.attach(Arc::new(sink), &t.revision());
    t.transaction(|m| m["pushEvents"] = json!(false)).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, seen[0].1);
}

#[test]
fn s17_4_concurrent_set_and_snapshot_are_consistent() {
    let t = Arc::new(ManifestTracker::new(base()).unwrap());
    let rec = Arc::new(Recorder::default());
    t.attach(rec.clone(), &t.revision());
    let writer = {
        let t = Arc::clone(&t);
        std::thread::spawn(move || {
            for i in 0..200u32 {
                t.transaction(|m| {
                    m["demoCounter"] = json!({"n": i % 7});
                    m["featureSets"]["demo.messaging"]["description"] =
                        json!(format!("d{}", i % 5));
                })
                .unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let m = t.manifest_result();
                    // Never a mix: the revision served is the digest of the content served.
                    assert_eq!(revision(&m).unwrap(), m["revision"].as_str().unwrap());
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    let got = rec.take();
    // Announcements arrive in install order and the last one is what is installed.
    assert_eq!(got.last().unwrap().revision, t.revision());
    for pair in got.windows(2) {
        assert_ne!(pair[0].revision, pair[1].revision);
    }
}
