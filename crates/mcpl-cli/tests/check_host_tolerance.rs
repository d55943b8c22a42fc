//! `host.unknown-fields-tolerated` (§8: hosts MUST tolerate unknown response fields): the
//! checker answers `initialize` (and `tools/list`) with members no spec defines, and a host
//! that ends the connection, writes an error under id null, or falls silent after reading
//! them fails. Each host here is raw JSON lines over the spawned checker's stdio, reading
//! the checker's answers as a strict host would (only the members MCP defines).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const ID: &str = "host.unknown-fields-tolerated";

/// Only a hung checker reaches it: its own bound with these flags is 24 × 0.5 + 0.5 + 0.
const GUARD: Duration = Duration::from_secs(60);

fn report_path(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mcpl-check-host-tolerance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The checker over raw pipes, its JSON report to `report`.
fn spawn(report: &PathBuf) -> (Child, ChildStdin, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--json", "--timeout", "0.5"])
        .args(["--inference-timeout", "0.5", "--watch", "0", "--report"])
        .arg(report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    (child, stdin, BufReader::new(stdout).lines())
}

fn line(v: &Value) -> String {
    format!("{v}\n")
}

async fn send(stdin: &mut ChildStdin, v: Value) {
    stdin.write_all(line(&v).as_bytes()).await.unwrap();
}

/// The next JSON message the checker writes (its junk line skipped).
async fn next(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    loop {
        let l = lines.next_line().await.unwrap().expect("the checker wrote");
        if let Ok(v) = serde_json::from_str::<Value>(&l) {
            return v;
        }
    }
}

/// The members of `v` (an object) a strict reader of MCP's `result` of `method` does not
/// know, and those of its `capabilities` and `serverInfo`.
fn unknown_members(method: &str, result: &Value) -> Vec<String> {
    let known: &[&str] = match method {
        "initialize" => &[
            "protocolVersion",
            "capabilities",
            "serverInfo",
            "instructions",
        ],
        _ => &["tools", "nextCursor"],
    };
    let mut found: Vec<String> = result
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !known.contains(&k.as_str()) && k.as_str() != "_meta")
        .cloned()
        .collect();
    let nested: [(&str, &[&str]); 2] = [
        (
            "capabilities",
            &[
                "experimental",
                "logging",
                "completions",
                "prompts",
                "resources",
                "tools",
            ],
        ),
        ("serverInfo", &["name", "version", "title"]),
    ];
    for (member, known) in nested {
        if let Some(o) = result.get(member).and_then(Value::as_object) {
            found.extend(o.keys().filter(|k| !known.contains(&k.as_str())).cloned());
        }
    }
    found
}

fn initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
        "clientInfo": { "name": "strict", "version": "0" } } })
}

/// Answers the checker's requests (a ping with a result, the rest refused) until it ends.
async fn answer_all(stdin: &mut ChildStdin, lines: &mut Lines<BufReader<ChildStdout>>) {
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if m.get("method").is_none() || m.get("id").is_none() {
            continue;
        }
        let a = if m["method"] == "ping" {
            json!({ "jsonrpc": "2.0", "id": m["id"], "result": {} })
        } else {
            json!({ "jsonrpc": "2.0", "id": m["id"],
                    "error": { "code": -32001, "message": "denied" } })
        };
        if stdin.write_all(line(&a).as_bytes()).await.is_err() {
            break;
        }
    }
}

/// The checker's exit code and report, once it ends.
async fn finished(mut child: Child, report: &PathBuf) -> (i32, Value) {
    let status = tokio::time::timeout(GUARD, child.wait())
        .await
        .expect("the checker ended within its bound")
        .unwrap();
    let text = std::fs::read_to_string(report).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status.code().unwrap(), doc)
}

fn verdict(doc: &Value) -> (&str, &str) {
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == ID)
        .unwrap_or_else(|| panic!("{ID} in {doc:#}"));
    (c["status"].as_str().unwrap(), c["detail"].as_str().unwrap())
}

/// A host that ends the connection on reading an `initialize` result with a member it does
/// not know (a strict decoder's failure): before, no answer of the checker's carried one, so
/// it passed whatever it would do. Now the answer carries them and the host fails, the
/// detail naming the member and the end of the connection.
#[tokio::test]
async fn a_host_that_drops_on_unknown_members_fails() {
    let report = report_path("drops.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    send(&mut stdin, initialize()).await;
    let answer = next(&mut lines).await;
    let unknown = unknown_members("initialize", &answer["result"]);
    assert!(!unknown.is_empty(), "{answer:#}");
    drop(stdin);
    let (code, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "fail", "{doc:#}");
    assert!(
        detail.contains("mcplCheckUnknownMember") && detail.contains("EOF"),
        "{detail}"
    );
    assert!(detail.contains("§8"), "{detail}");
    // The host went away before the probes: the run is incomplete.
    assert_eq!(code, 2, "{doc:#}");
}

/// A host that answers the unknown members with an error under id null (JSON-RPC 2.0 §5,
/// the only answer left to a receiver for a response it cannot take), then goes on: it
/// fails, the rest of its run judged as usual.
#[tokio::test]
async fn a_host_that_errors_on_unknown_members_fails() {
    let report = report_path("errors.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    send(&mut stdin, initialize()).await;
    let answer = next(&mut lines).await;
    assert!(!unknown_members("initialize", &answer["result"]).is_empty());
    let err = json!({ "jsonrpc": "2.0", "id": null,
        "error": { "code": -32600, "message": "unknown field `mcplCheckUnknownMember`" } });
    send(&mut stdin, err).await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                "params": { "effectiveCapabilities": [] } }),
    )
    .await;
    answer_all(&mut stdin, &mut lines).await;
    drop(stdin);
    let (code, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "fail", "{doc:#}");
    assert!(
        detail.contains("-32600") && detail.contains("id null"),
        "{detail}"
    );
    assert_eq!(code, 1, "{doc:#}");
}

/// A host that reads the unknown members and then sends nothing at all (no
/// `notifications/initialized`, no policy, no answer to any probe): it refused the answer
/// in silence, and fails.
#[tokio::test]
async fn a_host_silent_after_unknown_members_fails() {
    let report = report_path("silent.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    send(&mut stdin, initialize()).await;
    let answer = next(&mut lines).await;
    assert!(!unknown_members("initialize", &answer["result"]).is_empty());
    // Reads whatever comes and answers none of it, until the checker ends the connection.
    while let Ok(Some(_)) = lines.next_line().await {}
    drop(stdin);
    let (_, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "fail", "{doc:#}");
    assert!(detail.contains("in silence"), "{detail}");
}

/// A host that takes the `initialize` answer but ends the connection on the `tools/list`
/// answer's unknown member: judged on the later answer too.
#[tokio::test]
async fn a_host_that_drops_on_the_tools_list_answer_fails() {
    let report = report_path("tools.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    send(&mut stdin, initialize()).await;
    let _ = next(&mut lines).await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }),
    )
    .await;
    let answer = loop {
        let m = next(&mut lines).await;
        if m["id"] == 2 && m.get("method").is_none() {
            break m;
        }
    };
    assert!(
        !unknown_members("tools/list", &answer["result"]).is_empty(),
        "{answer:#}"
    );
    drop(stdin);
    let (_, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "fail", "{doc:#}");
    assert!(
        detail.contains("tools/list") && detail.contains("EOF"),
        "{detail}"
    );
}

/// The same script, tolerating the members: it sends its policy and answers every probe,
/// so it passes, the detail naming both answers it went on after.
#[tokio::test]
async fn a_host_that_goes_on_after_unknown_members_passes() {
    let report = report_path("tolerant.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    send(&mut stdin, initialize()).await;
    let _ = next(&mut lines).await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }),
    )
    .await;
    send(
        &mut stdin,
        json!({ "jsonrpc": "2.0", "id": 3, "method": "featureSets/update",
                "params": { "effectiveCapabilities": [] } }),
    )
    .await;
    answer_all(&mut stdin, &mut lines).await;
    drop(stdin);
    let (_, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "pass", "{doc:#}");
    assert!(
        detail.contains("initialize") && detail.contains("tools/list"),
        "{detail}"
    );
}

/// MCP's version negotiation: a host asking for a protocol version the checker does not
/// speak is answered with another, and a host that does not support that one SHOULD
/// disconnect. Such a host ending the connection after the answer is no sign it refused the
/// unknown members: `host.unknown-fields-tolerated` is skipped, saying why, not failed.
#[tokio::test]
async fn a_drop_after_another_protocol_version_is_not_blamed_on_unknown_members() {
    let report = report_path("version.json");
    let (child, mut stdin, mut lines) = spawn(&report);
    let mut init = initialize();
    init["params"]["protocolVersion"] = json!("2099-01-01");
    send(&mut stdin, init).await;
    let answer = next(&mut lines).await;
    assert_ne!(
        answer["result"]["protocolVersion"], "2099-01-01",
        "{answer:#}"
    );
    drop(stdin);
    let (_, doc) = finished(child, &report).await;
    let (status, detail) = verdict(&doc);
    assert_eq!(status, "skip", "{doc:#}");
    assert!(
        detail.contains("2099-01-01") && detail.contains("protocol version"),
        "{detail}"
    );
}

/// The mirror, the checker as a server (§8: servers MUST tolerate and ignore unknown request
/// fields; MCP: a receiver ignores members it does not know): a host whose `initialize`
/// and policy Request carry members no spec defines (and MCP's `_meta`), and whose every
/// answer carries one in its result or error object and beside its envelope members, is
/// judged exactly as the same host without them.
#[tokio::test]
async fn unknown_members_in_a_hosts_messages_are_tolerated() {
    async fn run(name: &str, extra: bool) -> Value {
        let add = |mut v: Value| {
            if extra {
                if let Some(o) = v.as_object_mut() {
                    o.insert("x-extra".into(), json!({ "unknown": true }));
                    o.insert("_meta".into(), json!({ "trace": name }));
                }
            }
            v
        };
        let report = report_path(name);
        let (child, mut stdin, mut lines) = spawn(&report);
        let mut init = initialize();
        init["params"] = add(init["params"].clone());
        send(&mut stdin, init).await;
        let _ = next(&mut lines).await;
        send(
            &mut stdin,
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        )
        .await;
        let policy = add(json!({ "effectiveCapabilities": ["pushEvents"] }));
        send(
            &mut stdin,
            json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update", "params": policy }),
        )
        .await;
        while let Ok(Some(l)) = lines.next_line().await {
            let Ok(m) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            if m.get("method").is_none() || m.get("id").is_none() {
                continue;
            }
            let a = match m["method"].as_str() {
                Some("ping") => {
                    json!({ "jsonrpc": "2.0", "id": m["id"], "result": add(json!({})) })
                }
                Some("push/event") if m["params"]["featureSet"] == "check.push" => {
                    json!({ "jsonrpc": "2.0", "id": m["id"], "result": add(json!({ "accepted": true })) })
                }
                _ => json!({ "jsonrpc": "2.0", "id": m["id"],
                    "error": add(json!({ "code": -32001, "message": "denied" })) }),
            };
            // A member beside the envelope's, too.
            let a = match (extra, a) {
                (true, Value::Object(mut o)) => {
                    o.insert("x-envelope".into(), json!(1));
                    Value::Object(o)
                }
                (_, a) => a,
            };
            if stdin.write_all(line(&a).as_bytes()).await.is_err() {
                break;
            }
        }
        drop(stdin);
        finished(child, &report).await.1
    }
    let plain = run("plain.json", false).await;
    let extra = run("extra.json", true).await;
    let statuses = |doc: &Value| -> Vec<(String, String)> {
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let id = c["id"].as_str().unwrap_or_default().to_owned();
                (id, c["status"].as_str().unwrap_or_default().to_owned())
            })
            .collect()
    };
    assert_eq!(statuses(&extra), statuses(&plain), "{extra:#}\n{plain:#}");
    let (status, _) = verdict(&extra);
    assert_eq!(status, "pass", "{extra:#}");
}
