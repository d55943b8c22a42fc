//! A capability the application has no handler for is neither advertised nor granted
//! (§5.4: absence is denial; §11, §12). A host whose policy named `inferenceRequest` or
//! `modelInfo` with no `HostConfig::request_handler` (and, for inference, no
//! `stream_handler`) advertised and granted them, and a server's `inference/request` then
//! found nobody to answer it (`-32601`, `NoHandler`) though the server was told it may send
//! it. Now the leaves are left out of `initialize` and of every grant, the server's request
//! is refused as not granted (`-32002`), and a policy entry that grants nothing once they
//! are taken out is reported at connect ([`HostDiagnostic::NotServed`]).
//! The server is raw lines; a `ping` orders each check (the host handles what it reads in
//! order), no sleeps.
#![cfg(feature = "runtime")]

use std::sync::Arc;
use std::time::Duration;

use mcpl::host::{HostConfig, HostDiagnostic, HostSession, HostStreams, StreamHandler};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the host sent nothing")
}

/// The server's manifest: every leaf §11 and §12 name, and a feature set using them.
fn manifest() -> Value {
    json!({
        "version": "0.5",
        "pushEvents": true,
        "modelInfo": true,
        "inferenceRequest": { "streaming": true },
        "featureSets": {
            "mem": { "uses": ["inferenceRequest", "inferenceRequest.streaming"] },
            "model": { "uses": ["modelInfo"] }
        }
    })
}

/// What the host sent while connecting: its `initialize` advertisement and the
/// `effectiveCapabilities` of its initial policy Request.
struct Sent {
    advertised: Value,
    effective: Vec<String>,
}

/// A session over a raw server advertising [`manifest`], its policy Request accepted.
async fn connected(cfg: HostConfig) -> (HostSession, HostStreams, Raw, Sent) {
    let (peer, incoming, mut raw) = raw_peer(Default::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = recv(&mut raw).await;
    assert_eq!(init["method"], "initialize", "{init}");
    let advertised = init["params"]["capabilities"]["experimental"]["mcpl"].clone();
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"],
                         "result": init_result(Some(manifest()))}))
        .await;
    let mut update = recv(&mut raw).await;
    if update["method"] == "notifications/initialized" {
        update = recv(&mut raw).await;
    }
    assert_eq!(update["method"], "featureSets/update", "{update}");
    let effective = update["params"]["effectiveCapabilities"]
        .as_array()
        .expect("effectiveCapabilities")
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    raw.send_json(json!({"jsonrpc": "2.0", "id": update["id"],
                         "result": {"accepted": true}}))
        .await;
    let (s, streams) = connect.await.unwrap().expect("the host connects");
    let sent = Sent {
        advertised,
        effective,
    };
    (s, streams, raw, sent)
}

/// Sends `request` and returns the host's answer to it.
async fn answer_to(raw: &mut Raw, request: Value) -> Value {
    let id = request["id"].clone();
    raw.send_json(request).await;
    loop {
        let v = recv(raw).await;
        if v["id"] == id && v.get("method").is_none() {
            return v;
        }
    }
}

fn inference(id: u64, stream: bool) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "inference/request",
           "params": {"featureSet": "mem", "stream": stream,
                      "messages": [{"role": "user", "content": "hi"}]}})
}

fn policy(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|e| e.to_string()).collect()
}

/// Every diagnostic delivered so far.
fn diagnostics(streams: &mut HostStreams) -> Vec<HostDiagnostic> {
    let mut out = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        out.push(d);
    }
    out
}

#[tokio::test]
async fn s5_4_leaves_no_handler_serves_are_neither_advertised_nor_granted() {
    let cfg = HostConfig {
        policy: policy(&[
            "pushEvents",
            "modelInfo",
            "inferenceRequest",
            "inferenceRequest.*",
        ]),
        ..HostConfig::default()
    };
    let (_s, mut streams, mut raw, sent) = connected(cfg).await;
    assert_eq!(
        sent.advertised.get("modelInfo"),
        None,
        "{}",
        sent.advertised
    );
    assert_eq!(
        sent.advertised.get("inferenceRequest"),
        None,
        "{}",
        sent.advertised
    );
    assert_eq!(sent.advertised["pushEvents"], true, "{}", sent.advertised);
    assert_eq!(sent.effective, vec!["pushEvents".to_owned()]);
    for (request, capability) in [
        (inference(1, false), "inferenceRequest"),
        (inference(2, true), "inferenceRequest"),
        (
            json!({"jsonrpc": "2.0", "id": 3, "method": "model/info", "params": {}}),
            "modelInfo",
        ),
    ] {
        let answer = answer_to(&mut raw, request).await;
        assert_eq!(answer["error"]["code"], -32002, "{answer}");
        assert_eq!(
            answer["error"]["data"]["capability"], capability,
            "{answer}"
        );
    }
    let diags = diagnostics(&mut streams);
    let named: Vec<_> = diags
        .iter()
        .filter_map(|d| match d {
            HostDiagnostic::NotServed {
                entries,
                capabilities,
            } => Some((entries.clone(), capabilities.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        named,
        vec![(
            policy(&["modelInfo", "inferenceRequest", "inferenceRequest.*"]),
            vec![
                "inferenceRequest",
                "inferenceRequest.streaming",
                "modelInfo"
            ]
        )],
        "{diags:?}"
    );
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::NoHandler { .. })),
        "{diags:?}"
    );
}

/// A wildcard that also grants what is served is no mistake: the host connects, the
/// unserved leaves are left out, and nothing is reported.
#[tokio::test]
async fn s5_4_a_wildcard_policy_without_handlers_connects_and_reports_nothing() {
    let cfg = HostConfig {
        policy: policy(&["*"]),
        ..HostConfig::default()
    };
    let (_s, mut streams, mut raw, sent) = connected(cfg).await;
    assert_eq!(
        sent.advertised.get("modelInfo"),
        None,
        "{}",
        sent.advertised
    );
    assert_eq!(
        sent.advertised.get("inferenceRequest"),
        None,
        "{}",
        sent.advertised
    );
    assert_eq!(sent.effective, policy(&["pushEvents", "tools"]));
    let answer = answer_to(&mut raw, inference(1, false)).await;
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    let diags = diagnostics(&mut streams);
    assert!(
        !diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::NotServed { .. })),
        "{diags:?}"
    );
}

/// A stream handler alone serves `inferenceRequest` and its streaming leaf (a request
/// without `stream: true` gets its final result, no chunk); `modelInfo` has no handler.
#[tokio::test]
async fn s11_a_stream_handler_alone_serves_inference_and_not_model_info() {
    let stream: StreamHandler = Arc::new(|_p: Value, mut sink| {
        Box::pin(async move {
            let _ = sink.send("par").await;
            Ok(json!({"content": "partial", "model": "m", "finishReason": "end_turn"}))
        })
    });
    let cfg = HostConfig {
        policy: policy(&["*", "inferenceRequest.streaming"]),
        stream_handler: Some(stream),
        ..HostConfig::default()
    };
    let (_s, _streams, mut raw, sent) = connected(cfg).await;
    assert_eq!(
        sent.advertised.get("modelInfo"),
        None,
        "{}",
        sent.advertised
    );
    assert_eq!(
        sent.advertised["inferenceRequest"],
        json!({"streaming": true}),
        "{}",
        sent.advertised
    );
    assert_eq!(
        sent.effective,
        policy(&[
            "inferenceRequest",
            "inferenceRequest.streaming",
            "pushEvents",
            "tools"
        ])
    );
    raw.send_json(inference(1, false)).await;
    let answer = recv(&mut raw).await;
    assert_eq!(
        answer["id"], 1,
        "no chunk for a request that asked for none: {answer}"
    );
    assert_eq!(answer["result"]["content"], "partial", "{answer}");
    let answer = answer_to(
        &mut raw,
        json!({"jsonrpc": "2.0", "id": 2, "method": "model/info", "params": {}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
}
