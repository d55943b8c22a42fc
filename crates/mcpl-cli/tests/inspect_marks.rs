//! `mcpl inspect`'s log marks the frame each refusal and diagnostic of the host is about,
//! an entry of a batch too (JSON-RPC 2.0 §6), under the section that decides it; and the
//! REPL says what the wire carried. Every wait is bounded (the event stream, the
//! inspector's own deadlines), never a sleep.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

mod inspect_support;
use inspect_support::{Inspect, BIN, WAIT};

/// A manifest with two findings `mcpl validate` places outside §17: `tools` inside
/// `experimental.mcpl` (§5.1) and a tag of a facet RFC-001 does not name (§16.4); a feature
/// set that may push and one whose `uses` lacks `pushEvents`.
fn manifest() -> Value {
    json!({ "version": "0.5", "pushEvents": true, "tools": {},
        "featureSets": {
            "h.push": { "description": "p", "uses": ["pushEvents"],
                "tagOntology": { "tags": { "h:reminder": { "desc": "r", "facet": "kind" } } } },
            "h.other": { "description": "o", "uses": ["tools"] } } })
}

fn push(id: u64, feature_set: &str, event_id: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "push/event", "params": {
        "featureSet": feature_set, "eventId": event_id, "timestamp": "2026-01-01T00:00:00Z",
        "payload": { "content": [{ "type": "text", "text": event_id }] } } })
}

/// A server advertising `manifest`: answers every request (`{}` past the handshake), and
/// after answering the first policy writes the lines of `after_policy`, in one write.
fn server(listener: std::net::TcpListener, manifest: Value, after_policy: Vec<Value>) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut after_policy = Some(after_policy);
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
            continue;
        };
        let result = match method {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": "scripted", "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "mcpl/manifest" => manifest.clone(),
            "tools/list" => json!({ "tools": [] }),
            _ => json!({}),
        };
        let reply = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        writeln!(writer, "{reply}").unwrap();
        if method == "featureSets/update" {
            // All in one write: the host reads them together.
            let lines: String = after_policy
                .take()
                .into_iter()
                .flatten()
                .map(|l| format!("{l}\n"))
                .collect();
            writer.write_all(lines.as_bytes()).unwrap();
        }
    }
}

/// [`server`] of [`manifest`] writing, after the policy, one batch of three pushes: one
/// the host takes, one under a set the manifest does not declare (§6.6, answered -32003),
/// one under a set whose `uses` lacks `pushEvents` (§6.4, refused -32002 and diagnosed
/// `declaration_mismatch`).
fn batch_server(listener: std::net::TcpListener) {
    let batch = json!([
        push(200, "h.push", "b1"),
        push(201, "nope.undeclared", "b2"),
        push(202, "h.other", "b3")
    ]);
    server(listener, manifest(), vec![batch]);
}

/// `(rule, section, entry)` of each mark of a log entry.
fn marks(e: &Value) -> Vec<(String, String, Option<u64>)> {
    e["marks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["rule"].as_str().unwrap_or("").to_owned(),
                m["section"].as_str().unwrap_or("").to_owned(),
                m["entry"].as_u64(),
            )
        })
        .collect()
}

/// A server's batch carries a push the host takes, one under an undeclared set and one
/// whose set's `uses` lacks `pushEvents`. The received batch frame had no marks: the -32003
/// refusal showed only inside the host's batch answer, the `declaration_mismatch`
/// diagnostic marked no frame, and *marked only* hid the batch. Now the batch is marked
/// once per refusal and diagnostic, each naming its entry; the one it took is unmarked.
#[test]
fn refusals_inside_a_batch_mark_the_batch_entry_they_are_about() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || batch_server(listener));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let want = [
        ("unknown_feature_set", "§6.6", Some(1)),
        ("capability_denied", "§5.4", Some(2)),
        ("declaration_mismatch", "§6.4", Some(2)),
    ];
    let deadline = Instant::now() + WAIT;
    let batch = loop {
        let page = insp.get("/api/log?dir=received&limit=500");
        let found = page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["kind"] == "batch")
            .cloned();
        if let Some(b) = found.filter(|b| marks(b).len() >= want.len()) {
            break b;
        }
        if events.next(deadline).is_none() {
            panic!("the batch is not marked within {WAIT:?}: {page}");
        }
    };
    let mut got = marks(&batch);
    got.sort();
    let mut want: Vec<_> = want
        .iter()
        .map(|(r, s, e)| (r.to_string(), s.to_string(), *e))
        .collect();
    want.sort();
    assert_eq!(got, want, "{batch}");
    // *Marked only* lists it.
    let marked = insp.get("/api/log?marked=true&dir=received&limit=500");
    assert!(
        marked["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["seq"] == batch["seq"]),
        "{marked}"
    );
    // The marks are in the export too, with their entry.
    let (status, _, body) = insp.request(
        "GET",
        "/api/export",
        &[("X-MCPL-Token", insp.token.clone())],
        None,
    );
    assert_eq!(status, 200, "{body}");
    let exported = body
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"].is_array() && l["direction"] == "received")
        .unwrap_or_else(|| panic!("the batch is exported: {body}"));
    assert!(
        exported["marks"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["entry"] == 1)),
        "{exported}"
    );
}

/// Manifest findings at `initialize` were all marked §17.5 (no §17 change involved) while
/// `mcpl validate` gives each its own section (§5.1, §16.4 here). Now the log gives each
/// finding the section validate gives it.
#[test]
fn manifest_findings_are_marked_under_the_section_validate_gives() {
    let mut validate = Command::new(BIN)
        .args(["validate", "--json", "--manifest", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    validate
        .stdin
        .take()
        .unwrap()
        .write_all(manifest().to_string().as_bytes())
        .unwrap();
    let out = validate.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sections: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_owned();
            (s("code"), s("section"))
        })
        .collect();
    for code in ["tools_inside_mcpl", "unnamed_facet"] {
        assert!(
            sections.iter().any(|(c, s)| c == code && s != "§17.5"),
            "{code}: {report}"
        );
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || batch_server(listener));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    let logged = loop {
        let page = insp.get("/api/log?dir=host&limit=500");
        let logged: Vec<(String, String)> = page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "diagnostic")
            .flat_map(|e| marks(e).into_iter().map(|(r, s, _)| (r, s)))
            .filter(|(r, _)| sections.iter().any(|(c, _)| c == r))
            .collect();
        if logged.len() >= sections.len() {
            break logged;
        }
        if events.next(deadline).is_none() {
            panic!("the findings are not all logged within {WAIT:?}: {page}");
        }
    };
    for (code, section) in &sections {
        assert!(
            logged.iter().any(|(r, s)| r == code && s == section),
            "{code} under {section}, as validate gives it: {logged:?}"
        );
    }
}

/// `hook TEXT` without `observe` granted: the library sends `userMessage: null` (§10.1),
/// but the REPL's result showed the typed text in `params.userMessage`. Now it shows what
/// the frame carried and says the text was withheld; granted, the text is sent and shown.
#[test]
fn the_hook_result_shows_the_user_message_the_wire_carried() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hooked = json!({ "version": "0.5",
        "contextHooks": { "beforeInference": { "observe": true, "inject": { "beforeUser": true } } },
        "featureSets": { "h.hook": { "description": "h", "uses": [
            "contextHooks.beforeInference.inject.beforeUser",
            "contextHooks.beforeInference.observe"] } } });
    std::thread::spawn(move || server(listener, hooked, Vec::new()));
    let mut child = Command::new(BIN)
        .args(["inspect", "--repl", "--json", "--timeout", "5"])
        .arg(format!("tcp://{addr}"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "grant contextHooks.*.*.*\nhook hello\nlog 40\n\
         grant contextHooks.*.*.* contextHooks.*.*\nhook again\nlog 40\nquit"
    )
    .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .filter(|v: &Value| v.get("command").is_some())
        .collect();
    let of = |cmd: &str| -> Vec<&Value> {
        results
            .iter()
            .filter(|r| r["command"] == cmd)
            .map(|r| &r["result"])
            .collect()
    };
    let (hooks, logs) = (of("hook"), of("log"));
    assert_eq!((hooks.len(), logs.len()), (2, 2), "{results:?}");
    // The `userMessage` of the `context/beforeInference` frame the host sent for a turn.
    let sent = |log: &Value, inference_id: &Value| -> Value {
        let frame = log
            .as_array()
            .unwrap()
            .iter()
            .find(|e| {
                e["dir"] == "sent"
                    && e["method"] == "context/beforeInference"
                    && e["preview"]
                        .as_str()
                        .is_some_and(|p| p.contains(&inference_id.to_string()))
            })
            .unwrap_or_else(|| panic!("the fan-out frame of {inference_id}: {log}"));
        let text: Value = serde_json::from_str(frame["preview"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("a whole frame in the preview: {e}: {frame}"));
        text["params"]["userMessage"].clone()
    };
    let (withheld, granted) = (hooks[0], hooks[1]);
    assert_eq!(sent(logs[0], &withheld["inferenceId"]), Value::Null);
    assert_eq!(withheld["params"]["userMessage"], Value::Null, "{withheld}");
    assert!(
        withheld["userMessageWithheld"]
            .as_str()
            .is_some_and(|w| w.contains("contextHooks.beforeInference.observe")),
        "{withheld}"
    );
    assert_eq!(sent(logs[1], &granted["inferenceId"]), json!("again"));
    assert_eq!(
        granted["params"]["userMessage"],
        json!("again"),
        "{granted}"
    );
    assert!(granted.get("userMessageWithheld").is_none(), "{granted}");
}

/// `mcpl inspect --repl --json` on `tcp://addr`, fed `log 50` until an entry `found` picks
/// is listed (each round one command and its one result line, within [`WAIT`]); returns
/// that `log` result.
fn repl_log_until(addr: std::net::SocketAddr, found: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut child = Command::new(BIN)
        .args(["inspect", "--repl", "--json", "--timeout", "5"])
        .arg(format!("tcp://{addr}"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    let entries = 'rounds: loop {
        writeln!(stdin, "log 50").unwrap();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log with the entry within {WAIT:?}"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            if v["command"] != "log" {
                continue;
            }
            let entries = v["result"].as_array().cloned().unwrap_or_default();
            if found(&entries) {
                break 'rounds entries;
            }
            break;
        }
    };
    let _ = writeln!(stdin, "quit");
    drop(stdin);
    let _ = child.wait();
    entries
}

/// `notifications/cancelled` with `params`, a notification of the server.
fn cancelled(params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params })
}

/// The host's diagnostic entries said which rule applied but not to which frame: the
/// mark sat on a frame, and the diagnostic's own entry did not name it. Now a diagnostic's
/// entry names the frame it marked (`marked.seq`, the seq the log gives frames), in the
/// REPL's `--json` log as on the dashboard; the fields it had are unchanged.
#[test]
fn a_diagnostic_entry_names_the_frame_it_marked() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // No requestId: the host reports it (`invalid_params`, a method-only diagnostic).
    let defective = cancelled(json!({}));
    std::thread::spawn(move || server(listener, manifest(), vec![defective]));
    let is_diag = |e: &Value| {
        e["kind"] == "diagnostic"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.contains("invalid_params"))
    };
    let log = repl_log_until(addr, |es| es.iter().any(is_diag));
    let diag = log.iter().find(|e| is_diag(e)).unwrap();
    let frame = log
        .iter()
        .find(|e| e["dir"] == "received" && e["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("the frame is logged: {log:?}"));
    assert_eq!(diag["marked"], json!({ "seq": frame["seq"] }), "{diag}");
    assert!(
        marks(frame).iter().any(|(r, _, _)| r == "invalid_params"),
        "{frame}"
    );
    for key in [
        "seq",
        "time",
        "generation",
        "dir",
        "kind",
        "method",
        "id",
        "bytes",
        "truncated",
        "marks",
        "preview",
    ] {
        assert!(diag.get(key).is_some(), "{key}: {diag}");
    }
    // Entries that are not diagnostics carry no `marked`.
    assert!(frame.get("marked").is_none(), "{frame}");
}

/// A diagnostic naming only a method (`invalid_params` of `notifications/cancelled`, no id)
/// marked the newest frame of that method not yet marked for its rule when it was handled:
/// of two such frames read together, the first defective (no `requestId`) and the second
/// well formed, the second was marked. Now it marks the frame whose handling raised it
/// (the session names it, `DiagnosticTap`), whatever was read after it.
#[test]
fn a_method_only_diagnostic_marks_the_frame_it_was_raised_for() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Both in one write, so the host reads the second before it handles the first.
    let both = vec![cancelled(json!({})), cancelled(json!({ "requestId": 999 }))];
    std::thread::spawn(move || server(listener, manifest(), both));
    let is_diag = |e: &Value| {
        e["kind"] == "diagnostic"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.contains("invalid_params"))
    };
    let log = repl_log_until(addr, |es| {
        es.iter().any(is_diag)
            && es
                .iter()
                .filter(|e| e["dir"] == "received" && e["method"] == "notifications/cancelled")
                .count()
                == 2
    });
    let frames: Vec<&Value> = log
        .iter()
        .filter(|e| e["dir"] == "received" && e["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(frames.len(), 2, "{log:?}");
    let (first, second) = (frames[0], frames[1]);
    assert!(
        first["preview"].as_str().unwrap().contains("{}"),
        "the defective one came first: {first}"
    );
    assert!(
        marks(first).iter().any(|(r, _, _)| r == "invalid_params"),
        "the defective frame is marked: {first}"
    );
    assert_eq!(
        marks(second),
        Vec::new(),
        "the well-formed one is not: {second}"
    );
    let diags: Vec<&Value> = log.iter().filter(|e| is_diag(e)).collect();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(
        diags[0]["marked"],
        json!({ "seq": first["seq"] }),
        "{}",
        diags[0]
    );
}

/// Every entry of a batch shares the batch's frame number, so a diagnostic naming only a
/// method, raised for entry 0, marked entry 1 of the same method (the newest unmarked).
/// The session names the entry too (`RaisedFor::entry`): entry 0, the defective one (no
/// `requestId`), is marked, and the diagnostic's `marked` says so.
#[test]
fn a_method_only_diagnostic_marks_the_batch_entry_it_was_raised_for() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let batch = json!([cancelled(json!({})), cancelled(json!({ "requestId": 999 }))]);
    std::thread::spawn(move || server(listener, manifest(), vec![batch]));
    let is_diag = |e: &Value| {
        e["kind"] == "diagnostic"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.contains("invalid_params"))
    };
    let is_batch = |e: &Value| {
        e["dir"] == "received"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.starts_with('[') && p.contains("notifications/cancelled"))
    };
    let log = repl_log_until(addr, |es| es.iter().any(is_diag) && es.iter().any(is_batch));
    let frame = log
        .iter()
        .find(|e| is_batch(e))
        .expect("the batch is logged");
    let marked: Vec<Option<u64>> = marks(frame)
        .into_iter()
        .filter(|(rule, _, _)| rule == "invalid_params")
        .map(|(_, _, entry)| entry)
        .collect();
    assert_eq!(
        marked,
        [Some(0)],
        "entry 0 is marked, entry 1 is not: {frame}"
    );
    let diags: Vec<&Value> = log.iter().filter(|e| is_diag(e)).collect();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(
        diags[0]["marked"],
        json!({ "seq": frame["seq"], "entry": 0 }),
        "{}",
        diags[0]
    );
}

/// README (the log): in a batch each refused or diagnosed entry marks the batch frame. A
/// server's batch `["junk", 5, ping]`: entries 0 and 1 are no objects, refused `-32600`
/// (JSON-RPC 2.0 §6) and each diagnosed `invalid_message`, but neither diagnostic marked
/// the batch (the peer's reader raised them, told with no frame). Now each marks its entry
/// and its log entry says so (`marked`).
#[test]
fn entries_that_are_no_objects_mark_their_batch_entry() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let batch = json!(["junk", 5, { "jsonrpc": "2.0", "id": "b-ping", "method": "ping" }]);
    std::thread::spawn(move || server(listener, manifest(), vec![batch]));
    let is_diag = |e: &Value| {
        e["kind"] == "diagnostic"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.contains("invalid_message"))
    };
    let is_batch = |e: &Value| {
        e["dir"] == "received"
            && e["preview"]
                .as_str()
                .is_some_and(|p| p.starts_with("[\"junk\""))
    };
    let log = repl_log_until(addr, |es| {
        es.iter().filter(|e| is_diag(e)).count() >= 2 && es.iter().any(is_batch)
    });
    let frame = log
        .iter()
        .find(|e| is_batch(e))
        .expect("the batch is logged");
    let mut marked: Vec<Option<u64>> = marks(frame)
        .into_iter()
        .filter(|(rule, _, _)| rule == "invalid_message")
        .map(|(_, _, entry)| entry)
        .collect();
    marked.sort();
    assert_eq!(marked, [Some(0), Some(1)], "{frame}");
    let diags: Vec<&Value> = log.iter().filter(|e| is_diag(e)).collect();
    let mut entries: Vec<Value> = diags.iter().map(|d| d["marked"].clone()).collect();
    entries.sort_by_key(|m| m["entry"].as_u64());
    assert_eq!(
        entries,
        [
            json!({ "seq": frame["seq"], "entry": 0 }),
            json!({ "seq": frame["seq"], "entry": 1 })
        ],
        "{diags:?}"
    );
}
