//! Typed manifest edits (issue #21): `ManifestTracker::edit` refuses a mistake with an error
//! naming it and installs nothing; what it installs is announced exactly as a raw edit is
//! (§17.2, §17.3, §17.10). The last tests run over TCP with a raw host, so the announcement
//! and the `mcpl/manifest` answer are the frames the server writes.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::manifest::{ChangeDomain, ManifestChanged, ManifestEditError, ManifestTracker};
use mcpl::policy::FeatureSetDeclaration;
use mcpl::protocol::hooks::BeforeInferenceResult;
use mcpl::server::Server;
use serde_json::{json, Value};
use std::sync::Arc;

#[path = "support/tcp_host.rs"]
mod tcp_host;
use tcp_host::RawHost;

#[path = "support/recorder.rs"]
mod recorder;
use recorder::Recorder;

fn base() -> Value {
    json!({"version": "0.5", "pushEvents": true,
           "inferenceRequest": {"streaming": true},
           "contextHooks": {"beforeInference": true},
           "x-vendor": {"keep": [3, 1, 2]},
           "featureSets": {
               "reminders.push": {"description": "Push reminders", "uses": ["pushEvents"]},
               "reminders.context": {"description": "Pending reminders",
                                     "uses": ["contextHooks.beforeInference.inject.beforeUser"]}}})
}

fn attached() -> (ManifestTracker, Arc<Recorder>) {
    let t = ManifestTracker::new(base()).unwrap();
    let rec = Arc::new(Recorder::default());
    t.attach(rec.clone(), &t.revision());
    (t, rec)
}

fn decl(description: &str, uses: &[Capability]) -> FeatureSetDeclaration {
    FeatureSetDeclaration::new(description, uses)
}

#[test]
fn s17_10_a_misspelt_removal_is_an_error_naming_the_set_and_changes_nothing() {
    let (t, rec) = attached();
    let before = t.snapshot();
    let e = t
        .edit(|m| m.remove_feature_set("reminders.contxt"))
        .unwrap_err();
    assert_eq!(
        e,
        ManifestEditError::UnknownFeatureSet {
            name: "reminders.contxt".into(),
            declared: vec!["reminders.context".into(), "reminders.push".into()],
        }
    );
    assert!(
        e.to_string().contains("did you mean \"reminders.context\""),
        "{e}"
    );
    assert_eq!(t.snapshot(), before);
    assert!(rec.take().is_empty());
    // Changing a set that does not exist is refused the same way.
    let e = t
        .edit(|m| m.set_feature_set_uses("reminder.push", &[Capability::PushEvents]))
        .unwrap_err();
    assert!(
        matches!(e, ManifestEditError::UnknownFeatureSet { .. }),
        "{e}"
    );
    let e = t
        .edit(|m| m.set_feature_set_description("nope", "x"))
        .unwrap_err();
    assert!(
        matches!(e, ManifestEditError::UnknownFeatureSet { .. }),
        "{e}"
    );
    assert_eq!(t.snapshot(), before);
}

#[test]
fn s17_10_an_edit_is_all_or_nothing() {
    let (t, rec) = attached();
    let before = t.snapshot();
    let e = t
        .edit(|m| {
            m.add_feature_set("reminders.snooze", decl("Snooze", &[Capability::Tools]))?;
            m.advertise(Capability::ModelInfo)?;
            m.remove_feature_set("reminders.missing")
        })
        .unwrap_err();
    assert!(
        matches!(e, ManifestEditError::UnknownFeatureSet { .. }),
        "{e}"
    );
    assert_eq!(t.snapshot(), before);
    assert!(rec.take().is_empty());
}

#[test]
fn s6_mistakes_are_refused_by_name() {
    let (t, _rec) = attached();
    let before = t.snapshot();
    let cases: Vec<(ManifestEditError, ManifestEditError)> = vec![
        (
            t.edit(|m| {
                m.add_feature_set("reminders.push", decl("again", &[Capability::PushEvents]))
            })
            .unwrap_err(),
            ManifestEditError::FeatureSetExists("reminders.push".into()),
        ),
        (
            t.edit(|m| m.add_feature_set("reminders.*", decl("x", &[Capability::PushEvents])))
                .unwrap_err(),
            ManifestEditError::InvalidName("reminders.*".into()),
        ),
        (
            t.edit(|m| m.add_feature_set("rappels.é", decl("x", &[Capability::PushEvents])))
                .unwrap_err(),
            ManifestEditError::InvalidName("rappels.é".into()),
        ),
        (
            t.edit(|m| m.add_feature_set("empty", decl("x", &[])))
                .unwrap_err(),
            ManifestEditError::InvalidUses {
                name: "empty".into(),
                reason: mcpl::policy::UsesError::Empty,
            },
        ),
        (
            t.edit(|m| m.set_feature_set_uses("reminders.push", &[]))
                .unwrap_err(),
            ManifestEditError::InvalidUses {
                name: "reminders.push".into(),
                reason: mcpl::policy::UsesError::Empty,
            },
        ),
        (
            t.edit(|m| m.advertise(Capability::PushEvents)).unwrap_err(),
            ManifestEditError::AlreadyAdvertised(Capability::PushEvents),
        ),
        (
            t.edit(|m| m.withdraw(Capability::ModelInfo)).unwrap_err(),
            ManifestEditError::NotAdvertised(Capability::ModelInfo),
        ),
        (
            t.edit(|m| m.withdraw(Capability::PushEvents)).unwrap_err(),
            ManifestEditError::InUse {
                capability: Capability::PushEvents,
                feature_sets: vec!["reminders.push".into()],
            },
        ),
        (
            t.edit(|m| m.withdraw(Capability::InferenceRequest))
                .unwrap_err(),
            ManifestEditError::Implied {
                capability: Capability::InferenceRequest,
                implied_by: Capability::InferenceRequestStreaming,
            },
        ),
        (
            t.edit(|m| m.advertise(Capability::Tools)).unwrap_err(),
            ManifestEditError::ToolsNotInManifest,
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
        assert!(!got.to_string().is_empty());
    }
    assert_eq!(t.snapshot(), before);
}

#[test]
fn s17_3_a_typed_edit_is_announced_as_the_same_raw_edit_is() {
    let (typed, typed_rec) = attached();
    let (raw, raw_rec) = attached();
    let out = typed
        .edit(|m| {
            let d = decl("Snooze a reminder", &[Capability::InjectAfterUser]);
            m.add_feature_set("reminders.snooze", d)
        })
        .unwrap();
    let raw_out = raw
        .transaction(|m| {
            m["featureSets"]["reminders.snooze"] = json!({"description": "Snooze a reminder",
                "uses": ["contextHooks.beforeInference.inject.afterUser"]});
        })
        .unwrap();
    assert_eq!(raw_out, out);
    // `contextHooks.beforeInference: true` already advertised the leaf, so only the
    // feature sets changed, and the untouched shorthand stays as written (§17.2).
    assert_eq!(out.domains, [ChangeDomain::FeatureSets]);
    let m = typed.snapshot().content();
    assert_eq!(m["contextHooks"], json!({"beforeInference": true}));
    assert_eq!(m["x-vendor"], json!({"keep": [3, 1, 2]}));
    assert_eq!(
        typed_rec.take(),
        [ManifestChanged {
            revision: out.revision.clone(),
            domains: vec![ChangeDomain::FeatureSets]
        }]
    );
    assert_eq!(
        raw_rec.take(),
        [ManifestChanged {
            revision: out.revision.clone(),
            domains: vec![ChangeDomain::FeatureSets]
        }]
    );

    // Advertising and withdrawing rewrite only the member they change.
    let out = typed
        .edit(|m| {
            m.advertise(Capability::ModelInfo)?;
            m.withdraw(Capability::InferenceRequestStreaming)?;
            m.withdraw(Capability::InferenceRequest)
        })
        .unwrap();
    let raw_out = raw
        .transaction(|m| {
            m["modelInfo"] = json!(true);
            if let Some(m) = m.as_object_mut() {
                m.remove("inferenceRequest");
            }
        })
        .unwrap();
    assert_eq!(raw_out, out);
    assert_eq!(out.domains, [ChangeDomain::Capabilities]);
    let m = typed.snapshot().content();
    assert_eq!(m["modelInfo"], json!(true));
    assert!(m.get("inferenceRequest").is_none(), "{m}");
    assert_eq!(m["contextHooks"], json!({"beforeInference": true}));
    assert_eq!(
        typed_rec.take(),
        [ManifestChanged {
            revision: out.revision,
            domains: vec![ChangeDomain::Capabilities]
        }]
    );

    // A set's uses that need more are advertised with it.
    let out = typed
        .edit(|m| {
            m.set_feature_set_uses(
                "reminders.push",
                &[Capability::PushEvents, Capability::ChannelsPublish],
            )
        })
        .unwrap();
    assert_eq!(
        out.domains,
        [ChangeDomain::Capabilities, ChangeDomain::FeatureSets]
    );
    assert_eq!(
        typed.snapshot().content()["channels"],
        json!({"publish": true})
    );
}

fn reminders_server() -> Server {
    Server::builder("reminders", "0")
        .feature_set(
            "reminders.push",
            "Push reminders",
            &[Capability::PushEvents],
        )
        .feature_set(
            "reminders.context",
            "Pending reminders",
            &[Capability::InjectBeforeUser],
        )
        .on_before_inference("reminders.context", |_g, _p| async {
            Ok(BeforeInferenceResult::default())
        })
        .build()
        .unwrap()
}

/// An MCPL host over TCP past its policy Request (§5.3).
async fn ready_host(server: &Server) -> RawHost {
    let caps = json!({"experimental": {"mcpl": {"version": "0.5", "pushEvents": true,
        "contextHooks": {"beforeInference": true}, "featureSets": true}}});
    let (mut host, init) = RawHost::connect_with(server, caps).await;
    assert_eq!(
        init["capabilities"]["experimental"]["mcpl"]["revision"],
        server.tracker().revision().as_str()
    );
    let r = host
        .request(
            "featureSets/update",
            json!({"effectiveCapabilities": ["pushEvents", "tools",
                   "contextHooks.beforeInference.inject.beforeUser"]}),
        )
        .await;
    assert_eq!(r["result"]["accepted"], true, "{r}");
    host
}

/// The next frame is the answer to a `ping`: nothing was sent before it.
async fn nothing_sent(host: &mut RawHost) {
    let r = host.request("ping", json!({})).await;
    assert_eq!(r["result"], json!({}), "{r}");
}

#[tokio::test]
async fn s17_3_a_connected_host_is_told_of_a_typed_add_and_fetches_the_new_set() {
    let server = reminders_server();
    let mut host = ready_host(&server).await;

    let out = server
        .tracker()
        .edit(|m| {
            let d = decl("Snooze a reminder that fired", &[Capability::Tools]);
            m.add_feature_set("reminders.snooze", d)
        })
        .unwrap();
    assert_eq!(out.announced, 1);
    let n = host.frame().await;
    assert_eq!(
        n,
        json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged",
               "params": {"revision": out.revision, "domains": ["featureSets"]}})
    );
    let m = host.request("mcpl/manifest", json!({})).await;
    let m = &m["result"];
    assert_eq!(m["revision"], out.revision.as_str());
    assert_eq!(
        m["featureSets"]["reminders.snooze"],
        json!({"description": "Snooze a reminder that fired", "uses": ["tools"]})
    );
    assert_eq!(mcpl::manifest::revision(m).unwrap(), out.revision);
}

#[tokio::test]
async fn s17_3_a_refused_edit_announces_nothing_and_a_bound_set_stays() {
    let server = reminders_server();
    let mut host = ready_host(&server).await;
    let before = server.tracker().revision();

    let e = server
        .tracker()
        .edit(|m| m.remove_feature_set("reminders.ctx"))
        .unwrap_err();
    assert!(
        e.to_string().contains("did you mean \"reminders.context\""),
        "{e}"
    );
    // Fail closed: the hook's set cannot be removed under it (it would never run again).
    let e = server
        .tracker()
        .edit(|m| m.remove_feature_set("reminders.context"))
        .unwrap_err();
    assert_eq!(
        e,
        ManifestEditError::BoundFeatureSet {
            name: "reminders.context".into(),
            registration: "on_before_inference",
        }
    );
    assert_eq!(server.tracker().revision(), before);
    nothing_sent(&mut host).await;
    let m = host.request("mcpl/manifest", json!({})).await;
    assert_eq!(m["result"]["revision"], before.as_str());
    assert!(m["result"]["featureSets"]["reminders.context"].is_object());

    // A set no hook holds can go.
    let out = server
        .tracker()
        .edit(|m| m.remove_feature_set("reminders.push"))
        .unwrap();
    let n = host.frame().await;
    assert_eq!(n["method"], "mcpl/manifestChanged");
    assert_eq!(n["params"]["revision"], out.revision.as_str());
}
