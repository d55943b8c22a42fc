//! `mcpl check-host`'s streamed inference probe (§11.4): when the grant in force allows
//! `inferenceRequest.streaming`, its one `inference/request` asks `stream: true`, and the
//! chunks that come are judged by `host.chunks-well-formed`. Scripted hosts over raw pipes
//! show each verdict (real JSON over the checker's stdio); the library host, granting the
//! leaf with a stream handler, passes.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpl::host::{HostConfig, HostSession};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use common::ids_with;

const WELL_FORMED: &str = "host.chunks-well-formed";
const UNASKED: &str = "host.chunks-only-when-streamed";

fn report_path(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mcpl-check-host-streaming-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The checker's bound with these flags (`24 × 1 + 1 + 0` s) and a margin for a loaded
/// machine: only a hung checker reaches it.
const GUARD: Duration = Duration::from_secs(24 + 1 + 60);

fn line(v: &Value) -> String {
    format!("{v}\n")
}

/// A host over raw pipes: `initialize`, `notifications/initialized`, a policy Request
/// granting `grant`, then each request of the checker answered with what `answer` writes
/// for it: a `ping` `{}`, everything else refused `-32001` when `answer` returns `None`.
async fn raw_host(name: &str, grant: &[&str], answer: impl Fn(&Value) -> Option<String>) -> Value {
    let report = report_path(name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--json", "--timeout", "1"])
        .args(["--inference-timeout", "1", "--watch", "0", "--report"])
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (mut stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let head = [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": { "experimental": { "mcpl": {
                "version": "0.5", "pushEvents": true,
                "inferenceRequest": { "streaming": true } } } },
            "clientInfo": { "name": "scripted", "version": "0" } } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                "params": { "effectiveCapabilities": grant } }),
    ];
    let head: String = head.iter().map(line).collect();
    stdin.write_all(head.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if m.get("method").is_none() || m.get("id").is_none() {
            continue;
        }
        let a = answer(&m).unwrap_or_else(|| {
            let v = if m["method"] == "ping" {
                json!({ "jsonrpc": "2.0", "id": m["id"], "result": {} })
            } else {
                json!({ "jsonrpc": "2.0", "id": m["id"],
                        "error": { "code": -32001, "message": "denied" } })
            };
            line(&v)
        });
        if stdin.write_all(a.as_bytes()).await.is_err() {
            break;
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(GUARD, child.wait())
        .await
        .expect("the checker ended within its bound")
        .unwrap();
    assert_ne!(status.code(), Some(101), "the checker panicked");
    let text = std::fs::read_to_string(&report).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id}: {doc:#}"))
}

/// The grant of a host streaming: both inference leaves, and pushes.
const STREAMING: [&str; 3] = [
    "pushEvents",
    "inferenceRequest",
    "inferenceRequest.streaming",
];

/// A scripted case: its report's name, what the host writes for the streamed request's id,
/// and what the verdict's detail says.
type Case = (&'static str, fn(&Value) -> String, &'static str);

/// A chunk of request `id`.
fn chunk(id: &Value, index: Value, delta: Value) -> String {
    line(&json!({ "jsonrpc": "2.0", "method": "inference/chunk",
                  "params": { "requestId": id, "index": index, "delta": delta } }))
}

/// The result `content` under request `id` (§11.3).
fn result(id: &Value, content: &str) -> String {
    line(&json!({ "jsonrpc": "2.0", "id": id, "result": {
        "content": content, "model": "m", "finishReason": "end_turn" } }))
}

/// A host answering the checker's streamed `inference/request` with what `script` writes
/// for its id (chunks, the response, in its order); the early, unstreamed one refused.
async fn streaming_host(name: &str, script: fn(&Value) -> String) -> Value {
    raw_host(name, &STREAMING, move |m| {
        (m["method"] == "inference/request" && m["params"]["stream"] == true)
            .then(|| script(&m["id"]))
    })
    .await
}

/// §11.4: the probe asks `stream: true` under `check.stream` once the leaf is granted; two
/// chunks counting from 0 whose deltas join to the content, then the response: passes.
#[tokio::test]
async fn a_correct_streaming_host_passes() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let doc = raw_host("correct.json", &STREAMING, move |m| {
        if m["method"] != "inference/request" {
            return None;
        }
        kept.lock().unwrap().push(m["params"].clone());
        let id = &m["id"];
        (m["params"]["stream"] == true).then(|| {
            [
                chunk(id, json!(0), json!("O")),
                chunk(id, json!(1), json!("K")),
                result(id, "OK"),
            ]
            .concat()
        })
    })
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "pass", "{doc:#}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("joined are the result's content"),
        "{c}"
    );
    assert_eq!(
        check(&doc, "host.inference-follows-grant")["status"],
        "pass",
        "{doc:#}"
    );
    assert_eq!(
        check(&doc, "host.inference-result-shape")["status"],
        "pass",
        "{doc:#}"
    );
    // The one inference asked for the stream, under the set declaring it (§6.4 rule 2).
    let sent = seen.lock().unwrap().clone();
    let streamed: Vec<_> = sent.iter().filter(|p| p["stream"] == true).collect();
    assert_eq!(streamed.len(), 1, "{sent:?}");
    assert_eq!(streamed[0]["featureSet"], "check.stream", "{sent:?}");
    // No request asking for none got a chunk; none was answered with a result.
    assert_eq!(check(&doc, UNASKED)["status"], "skip", "{doc:#}");
}

/// Each defect of form fails `host.chunks-well-formed`, named: an index repeated or going
/// back (the order is lost), a chunk after the response, a delta that is no string, a chunk
/// naming a request the checker never sent.
#[tokio::test]
async fn each_defective_chunk_fails() {
    let cases: [Case; 5] = [
        (
            "repeat.json",
            |id| {
                [
                    chunk(id, json!(0), json!("O")),
                    chunk(id, json!(0), json!("K")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "index 0 again",
        ),
        (
            "backwards.json",
            |id| {
                [
                    chunk(id, json!(0), json!("O")),
                    chunk(id, json!(2), json!("K")),
                    chunk(id, json!(1), json!("")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "index 1 again, or out of order",
        ),
        (
            "late.json",
            |id| [result(id, "OK"), chunk(id, json!(0), json!("OK"))].concat(),
            "after the response",
        ),
        (
            "delta.json",
            |id| [chunk(id, json!(0), json!(7)), result(id, "OK")].concat(),
            "not a string",
        ),
        (
            "stray.json",
            |id| {
                [
                    chunk(&json!(99999), json!(0), json!("OK")),
                    chunk(id, json!(0), json!("OK")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "99999",
        ),
    ];
    for (name, script, said) in cases {
        let doc = streaming_host(name, script).await;
        let c = check(&doc, WELL_FORMED);
        assert_eq!(c["status"], "fail", "{name}: {doc:#}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.contains(said), "{name}: {d}");
        // The request itself was answered as §11.3 shows.
        assert_eq!(
            check(&doc, "host.inference-follows-grant")["status"],
            "pass",
            "{name}"
        );
    }
}

/// The readings that warn (§11.4 states no MUST): a result with text and no chunk before
/// it; deltas joined that are not the result's content.
#[tokio::test]
async fn no_chunk_or_another_text_warns() {
    let cases: [Case; 2] = [
        ("none.json", |id| result(id, "OK"), "no inference/chunk"),
        (
            "differs.json",
            |id| [chunk(id, json!(0), json!("NO")), result(id, "OK")].concat(),
            "not the result's content",
        ),
    ];
    for (name, script, said) in cases {
        let doc = streaming_host(name, script).await;
        let c = check(&doc, WELL_FORMED);
        assert_eq!(c["status"], "warn", "{name}: {doc:#}");
        assert!(c["detail"].as_str().unwrap().contains(said), "{name}: {c}");
    }
}

/// §11.4 sets no MUST on `index`, and §14.3's chunk index is monotonic, gaps allowed: an
/// index gap, or a first index other than 0, keeps the order and warns (it failed); the
/// deltas are still compared with the content.
#[tokio::test]
async fn a_gap_or_a_first_index_past_0_warns() {
    let cases: [Case; 2] = [
        (
            "gap.json",
            |id| {
                [
                    chunk(id, json!(0), json!("O")),
                    chunk(id, json!(2), json!("K")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "chunk 2 has index 2, 1 was next: a gap",
        ),
        (
            "from1.json",
            |id| {
                [
                    chunk(id, json!(1), json!("O")),
                    chunk(id, json!(2), json!("K")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "chunk 1 has index 1, 0 was next: a gap",
        ),
    ];
    for (name, script, said) in cases {
        let doc = streaming_host(name, script).await;
        let c = check(&doc, WELL_FORMED);
        assert_eq!(c["status"], "warn", "{name}: {doc:#}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.contains(said), "{name}: {d}");
        assert!(d.contains("joined are the result's content"), "{name}: {d}");
        assert!(
            d.contains("increasing") && !d.contains("in order"),
            "{name}: {d}"
        );
    }
}

/// An integral number written with a fraction (`index: 0.0`, `requestId: 29.0`) is read as
/// the integer it is and warns, as `host.response-ids-as-sent` reads a response id `2.0`
/// (JSON-RPC 2.0 §5: the same value); it failed (an index no integer, a chunk of no request).
#[tokio::test]
async fn an_integral_number_written_with_a_fraction_is_read_and_warns() {
    let cases: [Case; 2] = [
        (
            "floatidx.json",
            |id| {
                [
                    chunk(id, json!(0.0), json!("O")),
                    chunk(id, json!(1.0), json!("K")),
                    result(id, "OK"),
                ]
                .concat()
            },
            "chunk 1's index 0.0 read as 0",
        ),
        (
            "floatrid.json",
            |id| {
                let written = json!(id.as_f64().unwrap());
                [
                    chunk(&written, json!(0), json!("O")),
                    chunk(&written, json!(1), json!("K")),
                    result(id, "OK"),
                ]
                .concat()
            },
            ".0 read as",
        ),
    ];
    for (name, script, said) in cases {
        let doc = streaming_host(name, script).await;
        let c = check(&doc, WELL_FORMED);
        assert_eq!(c["status"], "warn", "{name}: {doc:#}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.contains(said), "{name}: {d}");
        assert!(d.contains("joined are the result's content"), "{name}: {d}");
    }
}

/// A streamed probe answered after its timeout, then chunks for it (§11.4: chunks come
/// before the response): the response, read late, still marks the stream answered, and the
/// chunks after it fail. The host answers when the checker's next request (not a ping)
/// shows the probe was given up on: no timing.
#[tokio::test]
async fn chunks_after_a_response_read_late_fail() {
    let held: Arc<Mutex<Option<Value>>> = Arc::default();
    let doc = raw_host("late.json", &STREAMING, move |m| {
        let mut held = held.lock().unwrap();
        if m["method"] == "inference/request" && m["params"]["stream"] == true {
            *held = Some(m["id"].clone());
            return Some(String::new());
        }
        if m["method"] == "ping" {
            return None;
        }
        let id = held.take()?;
        let deny = json!({ "jsonrpc": "2.0", "id": m["id"],
                           "error": { "code": -32001, "message": "denied" } });
        Some(
            [
                result(&id, "OK"),
                chunk(&id, json!(0), json!("OK")),
                line(&deny),
            ]
            .concat(),
        )
    })
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap();
    assert!(d.contains("after the response"), "{c}");
    assert!(!d.contains("no response came"), "{c}");
}

/// A streamed result with no `content` and no chunk: nothing streamed to judge (the
/// result's shape is `host.inference-result-shape`'s); it passed, describing "0 chunk(s),
/// indexes 0 to 0".
#[tokio::test]
async fn a_result_with_no_content_and_no_chunk_is_skipped() {
    let doc = streaming_host("nocontent.json", |id| {
        line(&json!({ "jsonrpc": "2.0", "id": id, "result": {
            "text": "OK", "model": "m", "finishReason": "end_turn" } }))
    })
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "skip", "{doc:#}");
    assert!(!c["detail"].as_str().unwrap().contains("indexes"), "{c}");
    assert_eq!(
        check(&doc, "host.inference-result-shape")["status"],
        "fail",
        "{doc:#}"
    );
}

/// §11.4 read fail closed: a chunk naming a request of the checker's the host had already
/// refused (the early, unstreamed `inference/request`, answered `-32001`) streams for a
/// request that is over, after its final response: it fails `host.chunks-well-formed`,
/// named, as a chunk after the streamed probe's response does. Before, it only warned
/// `host.chunks-only-when-streamed`, as a chunk for a request still waiting does.
#[tokio::test]
async fn a_chunk_for_a_request_the_host_refused_fails() {
    let refused = std::sync::Mutex::new(None::<Value>);
    let doc = raw_host("after-refusal.json", &STREAMING, |m| {
        if m["method"] != "inference/request" {
            return None;
        }
        if m["params"]["stream"] != true {
            // Refused (`raw_host`'s -32001), its id kept.
            *refused.lock().unwrap() = Some(m["id"].clone());
            return None;
        }
        let id = &m["id"];
        let old = refused
            .lock()
            .unwrap()
            .clone()
            .expect("an unstreamed one came first");
        Some(
            [
                chunk(&old, json!(0), json!("stale")),
                chunk(id, json!(0), json!("OK")),
                result(id, "OK"),
            ]
            .concat(),
        )
    })
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap();
    assert!(d.contains("already answered"), "{d}");
    // Not counted as one for a request still waiting too.
    assert_ne!(check(&doc, UNASKED)["status"], "warn", "{doc:#}");
}

/// The same, whatever form the answer takes (r14 F5): the host refuses the unstreamed
/// request under its id written as a whole float (`"id": 3.0`, the same value, JSON-RPC 2.0
/// §5, read by the library's one rule as the checker's request), or on one line with the
/// stale chunk after it (a line of several messages: the chunk after the refusal in wire
/// order, within the frame). Either chunk streams for a request already over: a fail, not
/// a warning. Before, the first recorded no answer (the id read before its rewrite, as an
/// integer only) and the second was not ordered within its frame: both only warned.
#[tokio::test]
async fn a_chunk_for_a_request_refused_in_another_form_fails() {
    for (name, same_line) in [
        ("after-float-refusal.json", false),
        ("after-refusal-same-line.json", true),
    ] {
        let refused = std::sync::Mutex::new(None::<Value>);
        let doc = raw_host(name, &STREAMING, |m| {
            if m["method"] != "inference/request" {
                return None;
            }
            let id = &m["id"];
            if m["params"]["stream"] != true {
                *refused.lock().unwrap() = Some(id.clone());
                let refusal =
                    r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"denied"},"id":"#;
                return Some(if same_line {
                    let stale = chunk(id, json!(0), json!("stale"));
                    format!("{refusal}{id}}} {stale}")
                } else {
                    format!("{refusal}{id}.0}}\n")
                });
            }
            let old = refused
                .lock()
                .unwrap()
                .clone()
                .expect("an unstreamed one came first");
            let stale = if same_line {
                String::new()
            } else {
                chunk(&old, json!(0), json!("stale"))
            };
            Some([stale, chunk(id, json!(0), json!("OK")), result(id, "OK")].concat())
        })
        .await;
        let c = check(&doc, WELL_FORMED);
        assert_eq!(c["status"], "fail", "{name}: {doc:#}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.contains("already answered"), "{name}: {d}");
        assert_ne!(check(&doc, UNASKED)["status"], "warn", "{name}: {doc:#}");
    }
}

/// Without the streaming leaf the probe stays unstreamed (under `check.infer`); a chunk for
/// it warns `host.chunks-only-when-streamed` as before, and `host.chunks-well-formed` has
/// no stream to judge.
#[tokio::test]
async fn chunks_for_the_unstreamed_request_warn_as_before() {
    let doc = raw_host(
        "unstreamed.json",
        &["pushEvents", "inferenceRequest"],
        |m| {
            if m["method"] != "inference/request" {
                return None;
            }
            assert_ne!(
                m["params"]["stream"], true,
                "stream asked though not granted: {m}"
            );
            let id = &m["id"];
            Some([chunk(id, json!(0), json!("OK")), result(id, "OK")].concat())
        },
    )
    .await;
    assert_eq!(check(&doc, UNASKED)["status"], "warn", "{doc:#}");
    assert_eq!(check(&doc, WELL_FORMED)["status"], "skip", "{doc:#}");
}

/// The library host granting `inferenceRequest.streaming`, answering the streamed probe
/// with a stream handler that sends the text as two chunks, or with a plain request handler
/// (the library then sends the text as the one chunk owed, `session::rules::owed_chunk`):
/// nothing fails or warns, and the stream passes.
#[tokio::test]
async fn the_library_host_streaming_passes() {
    let stream: mcpl::host::StreamHandler = Arc::new(|_params, mut sink| {
        Box::pin(async move {
            if sink.is_streamed() {
                for delta in ["O", "K"] {
                    sink.send(delta)
                        .await
                        .map_err(|e| mcpl::jsonrpc::ErrorObject::internal(e.to_string()))?;
                }
            }
            Ok(json!({ "content": "OK", "model": "test-model", "finishReason": "end_turn" }))
        })
    });
    let config = HostConfig {
        stream_handler: Some(stream),
        ..HostConfig::default()
    };
    library_host_streaming("library-stream.json", config, "2 chunk(s)").await;
    let plain: mcpl::host::RequestHandler = Arc::new(|_method, _params| {
        Box::pin(async move {
            Ok(json!({ "content": "OK", "model": "test-model", "finishReason": "end_turn" }))
        })
    });
    let config = HostConfig {
        request_handler: Some(plain),
        ..HostConfig::default()
    };
    library_host_streaming("library-plain.json", config, "1 chunk(s)").await;
}

/// Runs the checker against the library host with `config`, granting both inference leaves
/// and pushes; asserts nothing fails or warns and the stream passes, its detail saying `said`.
async fn library_host_streaming(name: &str, mut config: HostConfig, said: &str) {
    let report = report_path(name);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args([
        "check-host",
        "--json",
        "--timeout",
        "5",
        "--watch",
        "0",
        "--report",
    ])
    .arg(&report);
    let (transport, ctl) = mcpl::transport::child::spawn(&mut cmd).unwrap();
    config.policy = STREAMING.iter().map(|p| (*p).to_owned()).collect();
    let (session, _streams) = HostSession::connect(transport, config).await.unwrap();
    let status = tokio::time::timeout(GUARD, ctl.wait())
        .await
        .unwrap()
        .unwrap();
    session.close();
    let text = std::fs::read_to_string(&report).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(ids_with(&doc, "fail"), BTreeSet::new(), "{name}: {doc:#}");
    assert_eq!(ids_with(&doc, "warn"), BTreeSet::new(), "{name}: {doc:#}");
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "pass", "{name}: {doc:#}");
    assert!(c["detail"].as_str().unwrap().contains(said), "{name}: {c}");
    assert_eq!(status.code(), Some(0), "{name}: {doc:#}");
}

/// Wire order through a held receipt (§6.7 with §11.4): the host sends a policy Request
/// widening the grant, then the result, then a chunk. The checker holds that receipt behind
/// a `ping` round trip, keeping the result for the probe's loop while it handles what comes
/// after it; the chunk came after the response all the same, and fails.
#[tokio::test]
async fn a_chunk_after_the_response_read_during_a_held_receipt_fails() {
    let doc = streaming_host("late-held.json", |id| {
        let mut wider = STREAMING.to_vec();
        wider.push("channels.register");
        let widen = json!({ "jsonrpc": "2.0", "id": "widen", "method": "featureSets/update",
                            "params": { "effectiveCapabilities": wider } });
        [
            line(&widen),
            result(id, "OK"),
            chunk(id, json!(0), json!("OK")),
        ]
        .concat()
    })
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(
        c["detail"].as_str().unwrap().contains("after the response"),
        "{c}"
    );
}

/// A host granting the streaming leaf yet refusing the streamed probe fails
/// `host.inference-follows-grant`, which names the set the probe went under (`check.stream`),
/// not `check.infer`; with no chunk and an error, there is no stream to judge.
#[tokio::test]
async fn a_streamed_probe_refused_under_its_grant_names_its_set() {
    let doc = streaming_host("refused.json", |id| {
        line(&json!({ "jsonrpc": "2.0", "id": id,
                      "error": { "code": -32001, "message": "denied" } }))
    })
    .await;
    let c = check(&doc, "host.inference-follows-grant");
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("allows check.stream"),
        "{c}"
    );
    assert_eq!(check(&doc, WELL_FORMED)["status"], "skip", "{doc:#}");
}

/// A chunk naming a request the checker never sent is no chunk of any request: it fails
/// `host.chunks-well-formed` even when no stream was asked, and is not counted as one for a
/// request that asked for none (`host.chunks-only-when-streamed` passes on the unstreamed
/// probe answered without a chunk).
#[tokio::test]
async fn a_chunk_of_no_request_fails_with_no_stream_asked() {
    let doc = raw_host(
        "stray-unstreamed.json",
        &["pushEvents", "inferenceRequest"],
        |m| {
            (m["method"] == "inference/request" && m["params"]["featureSet"] == "check.infer").then(
                || {
                    [
                        chunk(&json!("no-such-request"), json!(0), json!("OK")),
                        result(&m["id"], "OK"),
                    ]
                    .concat()
                },
            )
        },
    )
    .await;
    let c = check(&doc, WELL_FORMED);
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(
        c["detail"].as_str().unwrap().contains("no-such-request"),
        "{c}"
    );
    assert_eq!(check(&doc, UNASKED)["status"], "pass", "{doc:#}");
}
