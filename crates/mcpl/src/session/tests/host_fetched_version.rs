//! §5.1, §17.5: a manifest fetched on a live MCPL 0.5 connection (`mcpl/manifest`) that
//! names another MCPL version, or none (App. B.3 requires `version`), is not a 0.5
//! advertisement, so nothing it adds may become grantable. It parses, so §17.5 step 1
//! still applies every removal it shows; what stays in force is the manifest in force less
//! those removals, and the version is reported. Before, it was adopted whole: its
//! additions were advertised (a later `set_policy` granted them) under a version the host
//! does not speak.

use super::*;

const POLICY: [&str; 3] = ["pushEvents", "channels.register", "channels.incoming"];

/// The fetched manifest: `channels.register` gone, `channels.incoming` added, a new set.
fn fetched(version: Option<Value>) -> Value {
    let mut m = json!({
        "pushEvents": {},
        "channels": { "incoming": {} },
        "featureSets": {
            "news": { "uses": ["pushEvents"] },
            "chat": { "uses": ["channels.incoming"] }
        }
    });
    if let Some(v) = version {
        m["version"] = v;
    }
    m
}

/// The codes of the `version` findings reported; each carries §5.1, the section
/// `review::validate` (so `mcpl validate`) gives a missing or other `version`.
fn version_findings(p: &Pair) -> Vec<&'static str> {
    p.host_out
        .iter()
        .filter_map(|o| match o {
            HostOutput::Diagnostic(HostDiagnostic::ManifestFinding {
                code,
                section,
                path,
                ..
            }) if path == "version" => {
                assert_eq!(*section, "§5.1", "{code}");
                Some(*code)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn s17_5_a_fetched_manifest_of_another_version_only_narrows() {
    for (version, code) in [
        (Some(json!("0.6")), "unsupported_version"),
        (Some(json!(5)), "unsupported_version"),
        (None, "missing_version"),
    ] {
        let mut p = Pair::connect(&POLICY, server_rules());
        assert!(p.host.grant().allows(Capability::ChannelsRegister));
        let before = p.host_out.len();
        p.host.refresh_manifest(p.now).expect("up");
        p.drive();
        assert!(answer_fetch(&mut p, fetched(version.clone())));
        p.drive();
        // The removal applies (and is told by Request, §6.7) ...
        assert!(
            !p.host.grant().allows(Capability::ChannelsRegister),
            "{version:?}"
        );
        assert!(
            !p.server.grant().allows(Capability::ChannelsRegister),
            "{version:?}: told"
        );
        assert!(p.host.grant().allows(Capability::PushEvents), "{version:?}");
        // ... nothing it adds is advertised, so no policy change can grant it.
        let review = p.host.review().expect("still MCPL");
        assert!(
            !review.advertised().contains(Capability::ChannelsIncoming),
            "{version:?}: an addition of a manifest of another version was taken"
        );
        assert_eq!(p.host.mode(), &Mode::Mcpl);
        p.host
            .set_policy(p.now, POLICY.map(String::from).to_vec())
            .expect("a policy change");
        p.drive();
        assert!(
            !p.host.grant().allows(Capability::ChannelsIncoming),
            "{version:?}: widened by a manifest of another version"
        );
        p.host_out.drain(..before);
        assert_eq!(version_findings(&p), [code], "{version:?}");
    }
}

/// Every spelling of 0.5 is still reviewed as a change, additions included (pending a
/// policy change, §17.5).
#[test]
fn s17_5_a_fetched_0_5_manifest_is_reviewed_whole() {
    for v in ["0.5", "0.5.0"] {
        let mut p = Pair::connect(&POLICY, server_rules());
        p.host.refresh_manifest(p.now).expect("up");
        p.drive();
        assert!(answer_fetch(&mut p, fetched(Some(json!(v)))));
        p.drive();
        let review = p.host.review().expect("MCPL");
        assert!(
            review.advertised().contains(Capability::ChannelsIncoming),
            "{v}"
        );
        assert!(!p.host.grant().allows(Capability::ChannelsRegister), "{v}");
    }
}
