//! The manifest the host reads from a server's answer, written with a member named twice,
//! against a `HostSession`, over a real transport (raw JSON lines, every byte of the
//! server's written by the test).
//!
//! serde_json keeps the last of repeated names, so before, an `initialize` result whose
//! `capabilities.experimental` named `mcpl` twice was granted from the hidden second copy
//! (`pushEvents` here), while `mcpl validate` refuses the same text (I-JSON, RFC 7493 §2.3)
//! and a validator reading the first copy saw no `pushEvents` at all; an `mcpl/manifest`
//! answer likewise. §5.4, fail closed: the answer is not read (the request fails, `invalid
//! response`, and the peer reports why), so nothing is granted from either copy. The same
//! answer written once is taken.
#![cfg(feature = "runtime")]

use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostDiagnostic, HostSession};
use mcpl::peer::{Diagnostic, Diagnostics, PeerConfig};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{raw_peer, Raw};

fn config() -> HostConfig {
    HostConfig {
        policy: vec!["pushEvents".into()],
        policy_timeout: Duration::from_secs(30),
        manifest_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    }
}

/// A manifest declaring no feature set and no capability: nothing to grant.
const NARROW: &str = r#"{"version":"0.5","featureSets":{}}"#;
/// A manifest advertising `pushEvents` in a feature set.
const WIDE: &str = r#"{"version":"0.5","pushEvents":true,"featureSets":{"a":{"description":"A","uses":["pushEvents"]}}}"#;

/// An `initialize` result under `id` whose `experimental` is the text `experimental`.
fn init_answer(id: &Value, experimental: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2024-11-05","capabilities":{{"tools":{{}},"experimental":{experimental}}},"serverInfo":{{"name":"s","version":"1"}}}}}}"#
    )
}

/// The reasons of the invalid messages the peer reported so far.
fn invalid_reasons(diags: &mut Diagnostics) -> Vec<String> {
    let mut reasons = Vec::new();
    while let Some(d) = diags.try_recv() {
        if let Diagnostic::InvalidMessage { reason, .. } = d {
            reasons.push(reason);
        }
    }
    reasons
}

/// The host's next line, as JSON.
async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host said nothing")
}

/// §5.1, §5.4: `experimental` naming `mcpl` twice (the wide copy last) fails the handshake
/// and is reported; no policy Request granting `pushEvents` goes out. Alone or in a batch.
#[tokio::test]
async fn s5_4_an_initialize_result_naming_mcpl_twice_grants_nothing() {
    for batch in [false, true] {
        let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
        let mut diags = peer.diagnostics();
        let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, config()));
        let init = recv(&mut raw).await;
        assert_eq!(init["method"], "initialize");
        let answer = init_answer(
            &init["id"],
            &format!(r#"{{"mcpl":{NARROW},"mcpl":{WIDE}}}"#),
        );
        match batch {
            true => raw.send(&format!("[{answer}]")).await,
            false => raw.send(&answer).await,
        }
        let connected = connect.await.expect("the connect task ends");
        let Err(e) = connected else {
            let (s, _) = connected.unwrap();
            panic!("batch {batch}: connected, granting {:?}", s.grant());
        };
        assert!(e.to_string().contains("mcpl"), "batch {batch}: {e}");
        let reasons = invalid_reasons(&mut diags);
        assert!(
            reasons.iter().any(|r| r.contains("\"mcpl\"")),
            "batch {batch}: {reasons:?}"
        );
    }
}

/// §17.2, §5.4: an `mcpl/manifest` answer naming `pushEvents` and `featureSets` twice (the
/// wide copies last) is not taken: the fetch fails (`ManifestFetchFailed`, as any failed
/// fetch), the grant stays as it was, and the peer reports why.
/// The same manifest written once is taken.
#[tokio::test]
async fn s17_2_a_fetched_manifest_naming_a_member_twice_is_not_taken() {
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let mut diags = peer.diagnostics();
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, config()));
    let init = recv(&mut raw).await;
    raw.send(&init_answer(
        &init["id"],
        &format!(r#"{{"mcpl":{NARROW}}}"#),
    ))
    .await;
    let mut policy = recv(&mut raw).await;
    if policy["method"] == "notifications/initialized" {
        policy = recv(&mut raw).await;
    }
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, mut streams) = connect.await.unwrap().unwrap();
    assert!(!s.grant().allows(Capability::PushEvents));

    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = recv(&mut raw).await;
    assert_eq!(fetch["method"], "mcpl/manifest");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"version":"0.5","featureSets":{{}},"pushEvents":false,"pushEvents":true,"featureSets":{{"a":{{"description":"A","uses":["pushEvents"]}}}}}}}}"#,
        fetch["id"]
    ))
    .await;
    // Nothing changed (`None`), and the failed fetch is reported as any failed fetch is.
    let refreshed = refresh.await.unwrap();
    assert!(matches!(refreshed, Ok(None)), "{refreshed:?}");
    assert!(!s.grant().allows(Capability::PushEvents));
    let reasons = invalid_reasons(&mut diags);
    assert!(
        reasons.iter().any(|r| r.contains("\"pushEvents\"")),
        "{reasons:?}"
    );
    let mut failed = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        if let HostDiagnostic::ManifestFetchFailed { detail } = d {
            failed.push(detail);
        }
    }
    assert!(
        failed.iter().any(|d| d.contains("\"pushEvents\"")),
        "{failed:?}"
    );

    // Written once, the wide manifest is taken: it is the manifest in force.
    let s2 = s.clone();
    let refresh = tokio::spawn(async move { s2.refresh_manifest().await });
    let fetch = recv(&mut raw).await;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{WIDE}}}"#,
        fetch["id"]
    ))
    .await;
    refresh.await.unwrap().expect("the refresh is taken");
    let (manifest, _) = s.manifest().expect("a manifest in force");
    assert_eq!(manifest["pushEvents"], true, "{manifest}");
}
