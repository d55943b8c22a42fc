//! `mcpl inspect`'s dashboard API, driven over real HTTP against a real `mcpl inspect`
//! process: against the bundled reference server (grant apply → receipt, a tool call → its
//! result, a push in the event stream), the scripted server (a refused frame marked with its
//! rule), a flooding server of the test's own (the log stays bounded and the API answers), the
//! security of every route (401 without the token, 403 for a foreign Origin or Host), and the
//! REPL over a pipe.
//!
//! Every wait is bounded and driven by what the inspector says (its first stderr line, its
//! event stream), never by sleeping.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod inspect_support;
use inspect_support::{Inspect, BIN, SCRIPTED, WAIT};

#[test]
fn grant_apply_returns_the_receipt_a_tool_call_its_result_and_a_push_reaches_the_stream() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    assert_eq!(state["connection"]["serverInfo"]["name"], "mcpl-reference");
    assert_eq!(state["connection"]["hostAdvertisement"]["version"], "0.5");
    assert!(state["grant"]["inForce"]
        .as_array()
        .unwrap()
        .contains(&json!("channels.register")));

    // A narrower grant by Request (§6.7): channels dropped, so ref.chat degrades.
    let narrower = json!([
        "pushEvents",
        "tools",
        "modelInfo",
        "inferenceLifecycle",
        "contextHooks.beforeInference.inject.beforeUser"
    ]);
    let r = insp.post("/api/grant", json!({ "patterns": narrower }));
    assert_eq!(r["ok"], true, "{r}");
    let change = &r["result"];
    let receipt = &change["receipt"];
    assert_eq!(receipt["accepted"], true, "{receipt}");
    assert_eq!(receipt["mode"], "degraded");
    let chat = receipt["unavailableFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["featureSet"] == "ref.chat")
        .unwrap_or_else(|| panic!("ref.chat degraded in {receipt}"));
    assert_eq!(chat["effect"], "disabled");
    assert!(change["narrowed"]
        .as_array()
        .unwrap()
        .contains(&json!("channels.register")));
    assert!(!change["grant"]
        .as_array()
        .unwrap()
        .contains(&json!("channels.register")));
    // The state shows it too, and the preview computes a grant without applying it.
    let s = insp.get("/api/state");
    assert_eq!(s["policy"]["receipt"], *receipt);
    assert_eq!(
        s["grant"]["report"]["featureSets"]["ref.chat"]["available"],
        false
    );
    let p = insp.post("/api/grant/preview", json!({ "patterns": ["tools"] }));
    assert_eq!(p["result"]["featureSets"]["ref.events"]["available"], false);
    let bad = insp.post("/api/grant", json!({ "patterns": ["chan*"] }));
    assert_eq!(bad["ok"], false, "a malformed pattern is refused: {bad}");

    // A tool call and its result.
    let r = insp.post(
        "/api/tools/call",
        json!({ "name": "echo", "arguments": { "text": "hi there" } }),
    );
    assert_eq!(r["result"]["content"][0]["text"], "hi there", "{r}");

    // A tool that makes the server push: the push is on the event stream, tags expanded.
    let r = insp.post(
        "/api/tools/call",
        json!({ "name": "schedule_event", "arguments": { "text": "pushed by a test" } }),
    );
    assert_eq!(r["ok"], true, "{r}");
    let ev = events.until("push", |v| {
        v["type"] == "event"
            && v["event"]["kind"] == "push"
            && v["event"]["params"]["payload"]["content"][0]["text"] == "pushed by a test"
    });
    let ev = &ev["event"];
    assert_eq!(ev["featureSet"], "ref.events");
    assert_eq!(ev["tags"], json!(["ref:scheduled"]));
    assert_eq!(ev["treatment"]["behavior"], "queue");
}

#[test]
fn a_waiting_server_request_blocks_nothing_else_and_hooks_show_their_injections() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    insp.ready(&mut events);
    // The `model` tool makes the server ask `model/info` (§12.1), which waits for an answer.
    let (tx, rx) = mpsc::channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let r = insp.post(
                "/api/tools/call",
                json!({ "name": "model", "arguments": {} }),
            );
            tx.send(r).unwrap();
        });
        let waiting = events.until("a waiting request", |v| v["type"] == "request");
        assert_eq!(waiting["method"], "model/info");
        // Meanwhile everything else goes on: a tool call, a hook fan-out.
        let r = insp.post(
            "/api/tools/call",
            json!({ "name": "echo", "arguments": { "text": "not blocked" } }),
        );
        assert_eq!(r["result"]["content"][0]["text"], "not blocked");
        let hook = insp.post("/api/hook", json!({ "text": "hello hooks" }));
        let hook = &hook["result"];
        assert_eq!(hook["consulted"], json!(["mcpl-reference"]), "{hook}");
        assert_eq!(hook["beforeUser"][0]["injection"]["namespace"], "reference");
        assert_eq!(hook["lifecycle"], "started, completed");
        assert!(rx.try_recv().is_err(), "the model tool still waits");
        let pending = insp.get("/api/state")["pending"].clone();
        assert_eq!(pending[0]["method"], "model/info");
        let answered = insp.post(
            "/api/answer",
            json!({ "id": waiting["id"], "text": "model-from-the-test" }),
        );
        assert_eq!(answered["ok"], true, "{answered}");
        let r = rx
            .recv_timeout(WAIT)
            .expect("the model tool returns once answered");
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.contains("model-from-the-test"), "{text}");
    });
    assert!(insp.get("/api/state")["pending"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// §4.1: a `channels/register` sent as a Notification is not applied by the host
/// (`protocol::Kind::takes`); the log says why in those words, where it said the host does
/// not receive the method at all.
#[test]
fn s4_1_a_request_sent_as_a_notification_is_marked_for_its_form() {
    let insp = Inspect::start(&["--", SCRIPTED, "register-notification"]);
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    let mark = loop {
        let page = insp.get("/api/log?dir=host&method=channels/register");
        let hit = page["entries"].as_array().unwrap().iter().find_map(|e| {
            e["marks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["rule"] == "unexpected_method")
                .cloned()
        });
        if let Some(m) = hit {
            break m;
        }
        events
            .next(deadline)
            .expect("log updates until the register Notification is reported");
    };
    let detail = mark["detail"].as_str().unwrap();
    assert!(
        detail.contains("came as a Notification; §4.1 gives it only as a Request"),
        "{mark}"
    );
}

#[test]
fn a_refused_frame_is_marked_with_its_rule() {
    // The scripted server pushes before the policy receipt: the host answers -32002 (§5.3).
    let insp = Inspect::start(&["--", SCRIPTED, "early-push"]);
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    let marked = loop {
        let page = insp.get("/api/log?marked=1&dir=received");
        let hit = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| {
                e["id"] == "\"s-early\""
                    && e["marks"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|m| m["rule"] == "privileged_before_ready")
            })
            .cloned();
        if let Some(e) = hit {
            break e;
        }
        events
            .next(deadline)
            .expect("log updates until the refused push is marked");
    };
    assert_eq!(marked["method"], "push/event");
    let marks = marked["marks"].as_array().unwrap();
    let early = marks
        .iter()
        .find(|m| m["rule"] == "privileged_before_ready")
        .unwrap();
    assert_eq!(early["section"], "§5.3");
    // The host's own answer marks it too, by its Appendix A code.
    let answer = marks
        .iter()
        .find(|m| m["rule"] == "capability_denied")
        .unwrap_or_else(|| panic!("the -32002 answer marks the frame: {marks:?}"));
    assert!(answer["detail"].as_str().unwrap().contains("-32002"));
    // The full entry has the raw frame, and the diagnostic is a log entry of its own.
    let full = insp.get(&format!("/api/log/{}", marked["seq"]));
    let frame: Value = serde_json::from_str(full["text"].as_str().unwrap()).unwrap();
    assert_eq!(frame["id"], "s-early");
    let diags = insp.get("/api/log?dir=host&method=push/event");
    assert!(diags["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "diagnostic" && e["marks"][0]["section"] == "§5.3"));
    // The export is the transcript format of `mcpl check --transcript`, marks included.
    let (status, head, body) = insp.request(
        "GET",
        &format!("/api/export?token={}", insp.token),
        &[],
        None,
    );
    assert_eq!(status, 200);
    assert!(head.contains("content-disposition: attachment"));
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["direction"] == "sent" || l["direction"] == "received"));
    assert!(lines
        .iter()
        .any(|l| l["message"]["id"] == "s-early" && l["marks"].is_array()));
}

/// `GET /api/state` with the token and `headers`: the status.
fn state_status(insp: &Inspect, headers: &[(&str, String)]) -> u16 {
    let mut all = vec![("X-MCPL-Token", insp.token.clone())];
    all.extend(headers.iter().cloned());
    insp.request("GET", "/api/state", &all, None).0
}

/// Listening on every address (`--host 0.0.0.0`), a client on the network names the
/// dashboard by this machine's IP address: that `Host` (and `Origin`) is taken, with the
/// dashboard's port, where it got `403` and the dashboard could be reached by no one but
/// this machine. A name is still refused (DNS rebinding needs one), as is another port;
/// on the default loopback address an IP that is not its own is refused as before.
#[test]
fn listening_on_every_address_a_client_may_name_it_by_ip_but_not_by_name() {
    let insp = Inspect::start(&["--host", "0.0.0.0"]);
    let p = insp.port;
    for host in [format!("192.0.2.7:{p}"), format!("[2001:db8::1]:{p}")] {
        assert_eq!(
            state_status(&insp, &[("Host", host.clone())]),
            200,
            "{host}"
        );
        let origin = format!("http://{host}");
        assert_eq!(
            state_status(&insp, &[("Origin", origin.clone())]),
            200,
            "{origin}"
        );
    }
    for host in [
        format!("evil.example:{p}"),
        "192.0.2.7:1".into(),
        "192.0.2.7".into(),
    ] {
        assert_eq!(
            state_status(&insp, &[("Host", host.clone())]),
            403,
            "{host}"
        );
    }
    let origin = format!("http://evil.example:{p}");
    assert_eq!(state_status(&insp, &[("Origin", origin)]), 403);
    assert_eq!(state_status(&insp, &[]), 200, "127.0.0.1 still names it");

    let local = Inspect::start(&[]);
    let host = format!("192.0.2.7:{}", local.port);
    assert_eq!(state_status(&local, &[("Host", host)]), 403);
}

#[test]
fn without_the_token_401_and_with_a_foreign_origin_or_host_403() {
    let insp = Inspect::start(&[]);
    let token = || ("X-MCPL-Token", insp.token.clone());
    // The token with its first digit changed.
    let wrong = format!(
        "{}{}",
        if insp.token.starts_with('0') {
            '1'
        } else {
            '0'
        },
        &insp.token[1..]
    );
    for path in [
        "/",
        "/app.js",
        "/api/state",
        "/api/events",
        "/api/log",
        "/api/export",
    ] {
        let (status, head, _) = insp.request("GET", path, &[], None);
        assert_eq!(status, 401, "{path} without the token");
        assert!(head.contains("content-security-policy"), "{path}");
        let (status, _, _) = insp.request("GET", &format!("{path}?token={wrong}"), &[], None);
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let (status, _, _) = insp.request(
        "POST",
        "/api/restart",
        &[("Content-Type", "application/json".into())],
        Some("{}"),
    );
    assert_eq!(status, 401, "a write without the token");
    // A foreign Origin or Host is refused even with the token (cross-site, DNS rebinding).
    let (status, _, _) = insp.request(
        "GET",
        "/api/state",
        &[token(), ("Origin", "http://evil.example".into())],
        None,
    );
    assert_eq!(status, 403);
    let (status, _, _) = insp.request(
        "GET",
        "/api/state",
        &[token(), ("Host", format!("evil.example:{}", insp.port))],
        None,
    );
    assert_eq!(status, 403);
    let (status, _, _) = insp.request(
        "POST",
        "/api/tools/list",
        &[
            token(),
            ("Origin", "null".into()),
            ("Content-Type", "application/json".into()),
        ],
        Some("{}"),
    );
    assert_eq!(status, 403);
    // The dashboard's own origin and `localhost` are fine; a form-encoded write is not.
    let (status, _, _) = insp.request(
        "GET",
        "/api/state",
        &[token(), ("Origin", format!("http://{}", insp.host()))],
        None,
    );
    assert_eq!(status, 200);
    let (status, _, _) = insp.request(
        "GET",
        "/api/state",
        &[token(), ("Host", format!("localhost:{}", insp.port))],
        None,
    );
    assert_eq!(status, 200);
    let (status, _, _) = insp.request(
        "POST",
        "/api/tools/list",
        &[
            token(),
            ("Content-Type", "application/x-www-form-urlencoded".into()),
        ],
        Some("a=1"),
    );
    assert_eq!(status, 415);
    // The page: its token in its asset URLs, no inline script, a strict policy.
    let (status, head, body) = insp.request("GET", &format!("/?token={}", insp.token), &[], None);
    assert_eq!(status, 200);
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(head.contains("referrer-policy: no-referrer"));
    assert!(body.contains(&format!("app.js?token={}", insp.token)));
    assert!(!body.contains("<script>"), "no inline script");
}

/// A server of the test's own: MCP-only, answers what it must, then floods.
fn flooding_server(listener: TcpListener, done: mpsc::Sender<()>) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut next = |line: &mut String| -> Value {
        line.clear();
        reader.read_line(line).unwrap();
        serde_json::from_str(line).unwrap()
    };
    let init = next(&mut line);
    assert_eq!(init["method"], "initialize");
    let reply = json!({ "jsonrpc": "2.0", "id": init["id"], "result": {
        "protocolVersion": "2024-11-05", "capabilities": { "tools": {} },
        "serverInfo": { "name": "flood", "version": "1" } } });
    writeln!(writer, "{reply}").unwrap();
    assert_eq!(next(&mut line)["method"], "notifications/initialized");
    let list = next(&mut line);
    assert_eq!(list["method"], "tools/list");
    writeln!(
        writer,
        "{}",
        json!({ "jsonrpc": "2.0", "id": list["id"], "result": { "tools": [] } })
    )
    .unwrap();
    // 100,000 notifications, one 10 MB frame, then a ping whose answer says the host has
    // read them all (it answers in wire order, after the tap logged each frame).
    let mut out = std::io::BufWriter::new(writer);
    for i in 0..100_000 {
        writeln!(
            out,
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"flood {i}"}}}}"#
        )
        .unwrap();
    }
    let huge = "x".repeat(10 * 1024 * 1024);
    writeln!(
        out,
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{huge}"}}}}"#
    )
    .unwrap();
    writeln!(out, r#"{{"jsonrpc":"2.0","id":"done","method":"ping"}}"#).unwrap();
    out.flush().unwrap();
    loop {
        let v = next(&mut line);
        if v["id"] == "done" {
            let _ = done.send(());
            break;
        }
    }
    // Keep the connection open until the test ends (the inspector is killed then).
    let _ = reader.read_line(&mut line);
}

#[test]
fn a_flood_and_a_huge_frame_leave_the_dashboard_responsive_and_the_log_bounded() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || flooding_server(listener, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the host read the whole flood");

    let state = insp.get("/api/state");
    assert_eq!(state["connection"]["phase"], "ready");
    let page = insp.get("/api/log?limit=500");
    let kept = page["kept"].as_u64().unwrap();
    assert!(
        kept <= 10_000,
        "the log keeps at most 10,000 entries, kept {kept}"
    );
    assert!(page["lastSeq"].as_u64().unwrap() > 100_000);
    assert!(page["evicted"].as_u64().unwrap() > 90_000);
    assert_eq!(page["entries"].as_array().unwrap().len(), 500);
    // The 10 MB frame is logged with its size but kept cut to 256 KiB.
    let received = insp.get("/api/log?dir=received&limit=3");
    let huge = received["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["bytes"].as_u64().unwrap() > 10 * 1024 * 1024)
        .unwrap_or_else(|| panic!("the huge frame is among the newest: {received}"))
        .clone();
    assert_eq!(huge["truncated"], true);
    assert_eq!(huge["method"], "notifications/message");
    assert!(huge["preview"].as_str().unwrap().chars().count() <= 240);
    let full = insp.get(&format!("/api/log/{}", huge["seq"]));
    assert!(full["text"].as_str().unwrap().len() <= 256 * 1024);
    // An entry evicted by the flood is gone, not an error of the server.
    let (status, _, _) = insp.request(
        "GET",
        &format!("/api/log/2?token={}", insp.token),
        &[],
        None,
    );
    assert_eq!(status, 404);
    // Memory stayed bounded: what stays resident is far below the 30 MB the flood carried
    // (the log's own bound is 10,000 entries and 32 MiB of text, 256 KiB per frame).
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", insp.child.id())) {
        let rss_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(rss_kb < 100 * 1024, "resident {rss_kb} kB");
    }
}

#[test]
fn the_repl_is_scriptable_from_a_pipe_with_json_output() {
    let script = "tools\n\
                  call echo {\"text\": \"from the repl\"}\n\
                  grant pushEvents tools\n\
                  hook hello\n\
                  nonsense\n\
                  log 3\n\
                  quit\n";
    let mut child = Command::new(BIN)
        .args(["inspect", "--repl", "--json", "--timeout", "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "one command failed");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let result = |cmd: &str| {
        lines
            .iter()
            .find(|l| l["command"] == cmd)
            .unwrap_or_else(|| panic!("no result for {cmd}: {lines:?}"))
            .clone()
    };
    let tools = result("tools");
    assert!(tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "schedule_event"));
    assert_eq!(
        result("call")["result"]["content"][0]["text"],
        "from the repl"
    );
    let grant = result("grant");
    assert_eq!(grant["result"]["receipt"]["accepted"], true);
    assert_eq!(grant["result"]["grant"], json!(["pushEvents", "tools"]));
    // With the hook's inject leaf revoked, nothing was consulted.
    assert_eq!(result("hook")["result"]["consulted"], json!([]));
    assert_eq!(result("nonsense")["ok"], false);
    assert_eq!(result("log")["result"].as_array().unwrap().len(), 3);
}

#[test]
fn the_check_button_runs_the_check_suite_against_the_same_target() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    insp.ready(&mut events);
    let r = insp.post("/api/check", json!({}));
    assert_eq!(r["ok"], true, "{r}");
    let report = &r["result"]["report"];
    assert_eq!(r["result"]["exitCode"], 0, "{report}");
    assert_eq!(report["summary"]["fail"], 0);
    assert!(report["summary"]["pass"].as_u64().unwrap() > 10);
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "initialize.mcpl-present" && c["status"] == "pass"));
    // The report is kept for the page.
    assert_eq!(insp.get("/api/state")["check"]["last"]["report"], *report);

    // Restart: a second connection, the log of the first kept.
    let r = insp.post("/api/restart", json!({}));
    assert_eq!(r["result"]["generation"], 2, "{r}");
    assert_eq!(r["result"]["phase"], "ready");
    let log = insp.get("/api/log?limit=500&method=initialize");
    let generations: Vec<u64> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["dir"] == "sent" && e["method"] == "initialize")
        .map(|e| e["generation"].as_u64().unwrap())
        .collect();
    assert_eq!(
        generations,
        vec![1, 2],
        "one initialize per connection, both kept"
    );
}

/// A server of the test's own, with a manifest when `mcpl` (else plain MCP): one tool until
/// the host has listed it, then a second one announced with MCP's
/// `notifications/tools/list_changed`.
fn tool_adding_server(listener: TcpListener, mcpl: bool) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let tool = |name: &str| json!({ "name": name, "inputSchema": { "type": "object" } });
    let manifest = json!({ "version": "0.5", "featureSets": {} });
    let mut listed = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => {
                let mut caps = json!({ "tools": { "listChanged": true } });
                if mcpl {
                    caps["experimental"] = json!({ "mcpl": manifest });
                }
                json!({ "protocolVersion": "2025-06-18", "capabilities": caps,
                    "serverInfo": { "name": "adder", "version": "1" } })
            }
            "featureSets/update" => json!({ "accepted": true }),
            "mcpl/manifest" => manifest.clone(),
            "tools/list" => {
                listed += 1;
                let tools = if listed == 1 {
                    vec![tool("first")]
                } else {
                    vec![tool("first"), tool("second")]
                };
                json!({ "tools": tools })
            }
            _ => json!({}),
        };
        writeln!(
            writer,
            "{}",
            json!({ "jsonrpc": "2.0", "id": id, "result": result })
        )
        .unwrap();
        if listed == 1 && msg["method"] == "tools/list" {
            writeln!(
                writer,
                r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}"#
            )
            .unwrap();
            writeln!(
                writer,
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"added"}}}}"#
            )
            .unwrap();
        }
    }
}

/// §17.7: a tool added at runtime, announced with `notifications/tools/list_changed`, shows
/// up in the Tools panel without the user asking for the list again.
#[test]
fn a_tools_list_changed_refreshes_the_tools_panel() {
    tools_panel_follows_list_changed(true, |_| true);
}

/// The same from a plain MCP server (no manifest, §3.3): the change is a `list_changed`
/// event naming the list, and the Tools panel re-lists as under MCPL; its log message is a
/// `notification` event naming the method.
#[test]
fn a_plain_mcp_servers_list_changed_refreshes_the_tools_panel() {
    let has = |state: &Value, kind: &str, key: &str, value: &str| {
        state["events"]
            .as_array()
            .is_some_and(|es| es.iter().any(|e| e["kind"] == kind && e[key] == value))
    };
    tools_panel_follows_list_changed(false, |state| {
        has(state, "list_changed", "list", "tools")
            && has(state, "notification", "method", "notifications/message")
    });
}

/// Runs [`tool_adding_server`] and waits until the Tools panel shows both tools and `done`
/// holds of the state (each event or the deadline).
fn tools_panel_follows_list_changed(mcpl: bool, done: impl Fn(&Value) -> bool) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || tool_adding_server(listener, mcpl));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    insp.ready(&mut events);
    let names = |s: &Value| -> Vec<String> {
        s["tools"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = insp.get("/api/state");
        if names(&state) == ["first", "second"] && done(&state) {
            return;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("the Tools panel was not refreshed: {state}"));
    }
}

/// A plain MCP server that, once listed, announces `FLOOD` tool-list changes at once and
/// tells `seen` how many `tools/list` it read when a `tools/call` comes.
fn announcing_server(listener: TcpListener, seen: mpsc::Sender<usize>) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut listed = 0;
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": { "listChanged": true } },
                "serverInfo": { "name": "announcer", "version": "1" } }),
            "tools/list" => {
                listed += 1;
                json!({ "tools": [{ "name": "t", "inputSchema": { "type": "object" } }] })
            }
            "tools/call" => {
                let _ = seen.send(listed);
                json!({ "content": [] })
            }
            _ => json!({}),
        };
        let answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        writeln!(writer, "{answer}").unwrap();
        if listed == 1 && msg["method"] == "tools/list" {
            let change = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
            writer
                .write_all(format!("{change}\n").repeat(FLOOD).as_bytes())
                .unwrap();
        }
    }
}

/// How many changes [`announcing_server`] announces at once.
const FLOOD: usize = 150;

/// A server announcing many tool-list changes at once costs the dashboard two `tools/list`
/// more, not one each: one runs at a time and the changes announced meanwhile make one more
/// (one each would fill the peer's pending requests and refuse the user's own).
#[test]
fn a_flood_of_list_changes_is_relisted_once_more_not_once_each() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || announcing_server(listener, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    insp.ready(&mut events);
    // Every announcement has reached the dashboard (each relist it asks for is asked).
    let deadline = Instant::now() + WAIT;
    loop {
        let state = insp.get("/api/state");
        let announced = state["events"].as_array().map_or(0, |es| {
            es.iter().filter(|e| e["kind"] == "list_changed").count()
        });
        if announced == FLOOD {
            break;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("{announced} of {FLOOD} announcements shown"));
    }
    insp.post("/api/tools/call", json!({ "name": "t", "arguments": {} }));
    let listed = rx
        .recv_timeout(WAIT)
        .expect("the tools/call reached the server");
    assert!(
        listed <= 3,
        "{listed} tools/list for one listing and {FLOOD} announcements"
    );
}

/// `--open` hands the dashboard URL, token included, to `$BROWSER`: a script writing its
/// argument into a FIFO the test reads (bounded by a channel timeout, no polling).
#[test]
fn open_hands_the_tokened_url_to_the_browser() {
    let dir = std::env::temp_dir().join(format!("mcpl-inspect-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("opened");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let browser = dir.join("browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", fifo.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (tx, rx) = mpsc::channel();
    let reading = fifo.clone();
    thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(reading));
    });
    let insp = Inspect::start_with_env(&["--open"], &[("BROWSER", browser.to_str().unwrap())]);
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the browser was started with the URL")
        .unwrap();
    assert_eq!(url, insp.url());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `model/info` waits for the user (the reference's `model` tool asks it, §12.1) when the
/// user takes `modelInfo` out of the grant. The library then sends `-32002` whatever is
/// typed (§5.4: a message needing a denied capability is not delivered), but the page kept
/// offering the request as answerable and listed the typed answer as the one given. Now
/// the waiting request says it will be refused, and the answered list shows the refusal
/// the wire carried (the typed text beside it).
#[test]
fn an_answer_after_its_capability_was_revoked_is_shown_as_the_hosts_refusal() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    let (tx, rx) = mpsc::channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let r = insp.post(
                "/api/tools/call",
                json!({ "name": "model", "arguments": {} }),
            );
            tx.send(r).unwrap();
        });
        let waiting = events.until("a waiting request", |v| v["type"] == "request");
        assert_eq!(waiting["method"], "model/info");
        let without: Vec<Value> = state["grant"]["vocabulary"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| *p != "modelInfo")
            .cloned()
            .collect();
        let applied = insp.post("/api/grant", json!({ "patterns": without }));
        assert_eq!(applied["ok"], true, "{applied}");
        let pending = insp.get("/api/state")["pending"].clone();
        let revoked = pending[0]["revoked"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            revoked.contains("modelInfo") && revoked.contains("-32002"),
            "{pending}"
        );
        let answered = insp.post(
            "/api/answer",
            json!({ "id": waiting["id"], "text": "typed-model" }),
        );
        let record = &answered["result"];
        assert_eq!(record["answer"]["error"]["code"], -32002, "{answered}");
        assert_eq!(record["by"], "host", "{answered}");
        assert_eq!(record["typed"]["result"]["id"], "typed-model", "{answered}");
        rx.recv_timeout(WAIT).expect("the model tool returns");
    });
    // What the wire carried.
    let sent = insp.get("/api/log?dir=sent&limit=500");
    assert!(
        sent["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "error" && e["preview"].as_str().unwrap_or("").contains("-32002")),
        "{sent}"
    );
}

/// A server of the test's own that, once listed, asks the host's model (`inference/request`,
/// §11) and ends its output (a TCP half-close) while still reading: the answer it reads is
/// sent on `answers`.
fn asking_then_ending_server(listener: TcpListener, answers: mpsc::Sender<Value>) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let manifest = json!({ "version": "0.5", "inferenceRequest": true,
        "featureSets": { "assist": { "uses": ["inferenceRequest"] } } });
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg["id"] == "ask" {
            let _ = answers.send(msg);
            continue;
        }
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let method = msg["method"].as_str().unwrap_or("");
        let result = match method {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": "ender", "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "tools/list" => json!({ "tools": [] }),
            _ => json!({}),
        };
        writeln!(
            writer,
            "{}",
            json!({ "jsonrpc": "2.0", "id": id, "result": result })
        )
        .unwrap();
        if method == "tools/list" {
            let ask = json!({ "jsonrpc": "2.0", "id": "ask", "method": "inference/request",
                "params": { "featureSet": "assist",
                            "messages": [{ "role": "user", "content": "still there?" }] } });
            writeln!(writer, "{ask}").unwrap();
            writer.shutdown(std::net::Shutdown::Write).unwrap();
        }
    }
}

/// A server of the test's own that, once listed, asks the host's model (`inference/request`
/// `"ask"`, §11) and, once it reads `go` on `cancel`, cancels it (MCP's
/// `notifications/cancelled`); it answers `ping`s meanwhile.
fn asking_then_cancelling_server(listener: TcpListener, cancel: mpsc::Receiver<()>) {
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let manifest = json!({ "version": "0.5", "inferenceRequest": true,
        "featureSets": { "assist": { "uses": ["inferenceRequest"] } } });
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let method = msg["method"].as_str().unwrap_or("");
        let result = match method {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": "canceller", "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "tools/list" => json!({ "tools": [] }),
            _ => json!({}),
        };
        writeln!(
            writer,
            "{}",
            json!({ "jsonrpc": "2.0", "id": id, "result": result })
        )
        .unwrap();
        if method == "tools/list" {
            let ask = json!({ "jsonrpc": "2.0", "id": "ask", "method": "inference/request",
                "params": { "featureSet": "assist",
                            "messages": [{ "role": "user", "content": "never mind" }] } });
            writeln!(writer, "{ask}").unwrap();
            if cancel.recv_timeout(WAIT).is_ok() {
                let c = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": { "requestId": "ask", "reason": "changed my mind" } });
                writeln!(writer, "{c}").unwrap();
            }
        }
    }
}

/// The server cancels a request of its that waits for the user's answer: the library
/// stops the handler (the request is no longer the host's to answer), but the inspector
/// kept showing it waiting, answerable, for up to `PENDING_TIMEOUT` (600 s), one of the 64
/// `MAX_PENDING` slots taken; 64 such requests and every later one was refused `-32603`.
/// The same for a request the library answered itself (its `answer_timeout`) or whose
/// connection closed. Now a request whose handler is stopped leaves the waiting list, with
/// a note in the log.
#[test]
fn a_request_the_server_cancels_is_no_longer_shown_waiting() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, cancel) = mpsc::channel();
    thread::spawn(move || asking_then_cancelling_server(listener, cancel));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let waiting = events.until("a waiting request", |v| v["type"] == "request");
    assert_eq!(waiting["method"], "inference/request");
    go.send(()).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let s = insp.get("/api/state");
        if s["pending"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("the cancelled request is still shown waiting: {s}"));
    }
    let answered = insp.post(
        "/api/answer",
        json!({ "id": waiting["id"], "text": "too late" }),
    );
    assert_eq!(answered["ok"], false, "{answered}");
    let notes = insp.get("/api/log?dir=host&limit=500");
    assert!(notes.to_string().contains("no longer waits"), "{notes}");
}

/// A server that ends its output while a request it sent waits for the user's answer:
/// the connection shows `server ended` (not `ready`) with the request still waiting, the
/// end is on the event stream and in the log, and the answer still reaches the server.
/// Before, the connection showed `ready` until it closed.
#[test]
fn a_server_that_ends_its_output_is_shown_ended_while_its_request_waits() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, answers) = mpsc::channel();
    thread::spawn(move || asking_then_ending_server(listener, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    // Not `insp.ready`: the server ends its output as soon as the host has listed its
    // tools. Each state read follows a change on the event stream.
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    let state = loop {
        let s = insp.get("/api/state");
        let ended = s["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["kind"] == "end"));
        if ended {
            break s;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("the end of the server's output was not shown: {s}"));
    };
    let conn = &state["connection"];
    assert_eq!(conn["phase"], "server ended", "{conn}");
    assert!(
        conn["detail"].as_str().unwrap_or("").contains("EOF"),
        "{conn}"
    );
    let waiting = &state["pending"][0];
    assert_eq!(waiting["method"], "inference/request", "{state}");
    let notes = insp.get("/api/log?limit=500");
    assert!(
        notes.to_string().contains("the server ended its output"),
        "{notes}"
    );
    let answered = insp.post(
        "/api/answer",
        json!({ "id": waiting["id"], "text": "yes, still here" }),
    );
    assert_eq!(answered["ok"], true, "{answered}");
    let answer = answers
        .recv_timeout(WAIT)
        .expect("the answer reaches the server after its EOF");
    assert_eq!(answer["result"]["content"], "yes, still here", "{answer}");
}

/// A spawned server (`sh`, over its stdio) that, once listed, asks the host's model
/// (`inference/request`, §11) and then `END`s: `exit 0` (it can read no answer), or
/// `exec 1>&-` (closes its output, keeps reading) and, once the answer comes, writes it to
/// `$ANSWER_FILE` and exits.
fn asking_child(end: &str) -> String {
    format!(
        r#"while read l; do
  id=$(printf '%s' "$l" | sed -n 's/^{{"id":\([0-9]*\),.*/\1/p')
  case "$l" in
    *'"method":"initialize"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}},"experimental":{{"mcpl":{{"version":"0.5","inferenceRequest":true,"featureSets":{{"assist":{{"description":"d","uses":["inferenceRequest"]}}}}}}}}}},"serverInfo":{{"name":"ender","version":"1"}}}}}}\n' "$id";;
    *'"method":"tools/list"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{"tools":[]}}}}\n' "$id"; printf '%s\n' '{{"jsonrpc":"2.0","id":"ask","method":"inference/request","params":{{"featureSet":"assist","messages":[{{"role":"user","content":"still there?"}}]}}}}'; {end};;
    *'"id":"ask"'*) printf '%s\n' "$l" > "$ANSWER_FILE"; exit 0;;
    *) [ -n "$id" ] && printf '{{"jsonrpc":"2.0","id":%s,"result":{{"accepted":true}}}}\n' "$id";;
  esac
done"#
    )
}

/// Waits (on the event stream) until the connection's phase is `phase`.
fn wait_phase(insp: &Inspect, phase: &str) -> Value {
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    loop {
        let s = insp.get("/api/state");
        if s["connection"]["phase"] == phase {
            return s;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("the connection never became {phase}: {s}"));
    }
}

/// A spawned server's request left unanswered when the server exits: the connection closes
/// at its exit, the request no longer shows as waiting, and the log says it closed
/// unanswered. (Before, it stayed listed as waiting on a closed connection, and answering
/// it reported success while nothing was sent.) Since the drain after a server's EOF now
/// waits for the user's answers (`PeerConfig::eof_drain`, `PENDING_TIMEOUT`), the exit is
/// what ends it; this test waited out the library's 5 s drain before.
#[test]
fn a_request_left_waiting_when_the_connection_closes_is_no_longer_shown_waiting() {
    let script = asking_child("exit 0");
    let insp = Inspect::start(&["--", "sh", "-c", &script]);
    let state = wait_phase(&insp, "closed");
    assert_eq!(state["pending"], json!([]), "{state}");
    let log = insp.get("/api/log?limit=500");
    assert!(log.to_string().contains("closed unanswered"), "{log}");
}

/// A spawned server that closes its output after asking, and keeps reading: the request
/// stays answerable after its EOF (shown `server ended`), the user's answer reaches it, and
/// its exit then closes the connection.
#[test]
fn a_spawned_server_that_ended_its_output_still_gets_the_users_answer() {
    let dir = std::env::temp_dir().join(format!("mcpl-inspect-eof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A named pipe: the test's read waits for the server's write, no polling.
    let file = dir.join("answer.fifo");
    let _ = std::fs::remove_file(&file);
    let made = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = mpsc::channel();
    let fifo = file.clone();
    thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(&fifo));
    });
    let script = asking_child("exec 1>&-");
    let insp = Inspect::start_with_env(
        &["--", "sh", "-c", &script],
        &[("ANSWER_FILE", file.to_str().unwrap())],
    );
    let state = wait_phase(&insp, "server ended");
    let waiting = &state["pending"][0];
    assert_eq!(waiting["method"], "inference/request", "{state}");
    let answered = insp.post(
        "/api/answer",
        json!({ "id": waiting["id"], "text": "yes, still here" }),
    );
    assert_eq!(answered["ok"], true, "{answered}");
    let written = rx
        .recv_timeout(WAIT)
        .expect("the answer reaches the server after its EOF")
        .unwrap();
    let answer: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(answer["result"]["content"], "yes, still here", "{answer}");
    // The answer written, the connection closes (nothing more is owed, and the server exits).
    wait_phase(&insp, "closed");
    let log = insp.get("/api/log?limit=500");
    assert!(!log.to_string().contains("closed unanswered"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `N of its requests wait for an answer` of a server that ended its output was counted
/// once, when the end was handled: a request the server sent just before its end, parked by
/// its own task after the end was handled, showed `0 of its requests wait` beside it in the
/// waiting list. The count now follows the waiting list when the state is shown.
#[test]
fn an_ended_servers_waiting_count_follows_its_waiting_requests() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, answers) = mpsc::channel();
    thread::spawn(move || asking_then_ending_server(listener, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let deadline = Instant::now() + WAIT;
    // Each state read follows a change on the event stream.
    let mut state_when = |what: &str, done: &dyn Fn(&Value) -> bool| loop {
        let s = insp.get("/api/state");
        if done(&s) {
            break s;
        }
        events
            .next(deadline)
            .unwrap_or_else(|| panic!("{what} was not shown: {s}"));
    };
    let ended_and_waiting = |s: &Value| {
        let ended = s["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["kind"] == "end"));
        ended && s["pending"].as_array().is_some_and(|p| p.len() == 1)
    };
    let state = state_when("the end with its request waiting", &ended_and_waiting);
    let detail = state["connection"]["detail"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(detail.contains("1 of its requests wait"), "{detail}");
    let answered = insp.post(
        "/api/answer",
        json!({ "id": state["pending"][0]["id"], "text": "here" }),
    );
    assert_eq!(answered["ok"], true, "{answered}");
    answers
        .recv_timeout(WAIT)
        .expect("the answer reaches the server after its EOF");
}
