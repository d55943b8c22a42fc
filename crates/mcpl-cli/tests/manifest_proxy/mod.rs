//! The proxy the manifest-change tests (`check_host_manifest*.rs`) reach the library host
//! through, and the helpers reading the checker's report. Each test file uses a subset.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use mcpl::transport::{child, Frame, FrameWriter, Transport};
use serde_json::{json, Value};

use super::common::ids_with;

/// The flags every run here uses: the checker's bound is then 24 × 2 + 1 + 0 = 49 s.
pub const BOUNDS: [&str; 6] = ["--timeout", "2", "--inference-timeout", "1", "--watch", "0"];

/// That bound plus a margin for a loaded machine: only a hung checker reaches it.
pub const GUARD: Duration = Duration::from_secs(49 + 60);

/// The six checks of the phase.
pub const IDS: [&str; 6] = [
    "host.manifest-fetched-before-acting",
    "host.manifest-unparseable-keeps-previous",
    "host.manifest-removals-revoked",
    "host.manifest-partial-removals-applied",
    "host.manifest-additions-not-granted",
    "host.manifest-one-update-per-change",
];

pub fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-manifest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Which way a message goes through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    Host,
    Checker,
}

/// What the proxy does with each message: the messages to write instead, each with its way.
pub type Rule = Box<dyn FnMut(To, Value) -> Vec<(To, Value)> + Send>;

pub type Writer = Arc<tokio::sync::Mutex<Box<dyn FrameWriter>>>;

/// Moves the frames `reader` reads towards `to` through `rule`; closes both writers at the
/// end of its stream, so either side ending ends the other.
pub fn pump(
    mut reader: Box<dyn mcpl::transport::FrameReader>,
    to: To,
    rule: Arc<Mutex<Rule>>,
    writers: (Writer, Writer),
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(Some(frame)) = reader.next_frame().await {
            let Frame::Text(text) = frame else { continue };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let out = (rule.lock().unwrap())(to, v);
            for (way, v) in out {
                let w = if way == To::Host {
                    &writers.0
                } else {
                    &writers.1
                };
                if w.lock().await.send(&v.to_string()).await.is_err() {
                    return;
                }
            }
        }
        let _ = writers.0.lock().await.close().await;
        let _ = writers.1.lock().await.close().await;
    })
}

/// The host's end of a proxy to `checker` applying `rule`.
pub fn proxy(checker: Transport, rule: Rule) -> Transport {
    let (host_side, ours) = mcpl::transport::memory::pair();
    let rule = Arc::new(Mutex::new(rule));
    let to_host: Writer = Arc::new(tokio::sync::Mutex::new(ours.writer));
    let to_checker: Writer = Arc::new(tokio::sync::Mutex::new(checker.writer));
    let writers = (to_host, to_checker);
    pump(checker.reader, To::Host, rule.clone(), writers.clone());
    pump(ours.reader, To::Checker, rule, writers);
    let mut host_side = host_side;
    host_side.guard = checker.guard;
    host_side
}

/// The library host's policy in [`run`]: pushes, every channel capability, the hook.
pub const POLICY: [&str; 3] = [
    "pushEvents",
    "channels.*",
    "contextHooks.beforeInference.inject.*",
];

/// Runs the checker against the library host behind a proxy applying `rule`; the report.
pub async fn run(name: &str, rule: Rule) -> (i32, Value) {
    run_with(name, &POLICY, rule).await
}

/// [`run`] with the library host granting what `policy` reaches of the advertisement.
pub async fn run_with(name: &str, policy: &[&str], rule: Rule) -> (i32, Value) {
    let report = report_path(name);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args(["check-host", "--json"])
        .args(BOUNDS)
        .arg("--report")
        .arg(&report);
    let (transport, ctl) = child::spawn(&mut cmd).unwrap();
    let config = HostConfig {
        policy: policy.iter().map(|p| p.to_string()).collect(),
        ..HostConfig::default()
    };
    let (session, streams) = HostSession::connect(proxy(transport, rule), config)
        .await
        .unwrap();
    let status = tokio::time::timeout(GUARD, ctl.wait())
        .await
        .expect("the checker ends within its bound")
        .unwrap();
    session.close();
    drop(streams);
    let text = std::fs::read_to_string(&report).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status.code().unwrap(), doc)
}

/// The status of check `id` in `doc`.
pub fn status<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["status"].as_str())
        .unwrap_or_else(|| panic!("{id} not in {doc:#}"))
}

/// The detail of check `id` in `doc`.
pub fn detail(doc: &Value, id: &str) -> String {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_else(|| panic!("{id} not in {doc:#}"))
        .to_owned()
}

/// The phase's checks with `status` in `doc`.
pub fn phase_with(doc: &Value, status: &str) -> BTreeSet<String> {
    ids_with(doc, status)
        .into_iter()
        .filter(|id| IDS.contains(&id.as_str()))
        .collect()
}

pub fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// The library host's grant (what its policy reaches of the checker's advertisement)
/// without `channels.incoming`.
pub fn narrower_grant(id: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update", "params": {
        "effectiveCapabilities": ["pushEvents", "channels.register",
                                  "contextHooks.beforeInference.inject.beforeUser"] } })
}

/// A rule rewriting the checker's answers to the host's `mcpl/manifest` fetches: `answer`
/// gets the fetch's number (0 the first) and the answer, and returns the answer to pass on.
pub fn on_fetch_answers(mut answer: impl FnMut(usize, Value) -> Value + Send + 'static) -> Rule {
    let mut fetch_ids = Vec::new();
    let mut answered = 0;
    Box::new(move |to, v| {
        if to == To::Checker && v["method"] == "mcpl/manifest" {
            fetch_ids.push(v["id"].clone());
        }
        if to == To::Host && v.get("method").is_none() && fetch_ids.contains(&v["id"]) {
            let n = answered;
            answered += 1;
            return vec![(to, answer(n, v))];
        }
        vec![(to, v)]
    })
}
