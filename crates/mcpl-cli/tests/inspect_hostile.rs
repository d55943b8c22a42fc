//! `mcpl inspect` against hostile clients of its dashboard and a hostile server under
//! inspection: every connection, body and list the inspector keeps has a bound, and a
//! hostile party past it gets an answer or a close, not a hold on the inspector.
//!
//! Every wait is bounded (a read timeout, the inspector's own deadlines), never a sleep.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod inspect_support;
use inspect_support::{Inspect, WAIT};

/// The dashboard's bounds (`inspect::http`): connections at once, the deadline of a request
/// head, of a write's body and of writing a response.
const MAX_CONNECTIONS: usize = 256;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_WRITES: usize = 256;

/// Reads until the peer closes (`Some(bytes read)`), or `None` if `within` passes first.
fn read_until_closed(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(got),
            Err(_) => return None,
        }
    }
}

/// Slowloris: connections that never finish their request head (no token needed to open
/// one) were kept forever, as many as the client opened (8,000 held 240 MB and 8,000
/// descriptors). Now past [`MAX_CONNECTIONS`] one is closed at once, and every one is closed
/// [`HEAD_TIMEOUT`] after it opened; the dashboard serves its page all along.
#[test]
fn slow_request_heads_are_closed_and_connections_are_bounded() {
    let insp = Inspect::start(&[]);
    let extra = 64;
    let opened = Instant::now();
    let mut slow: Vec<TcpStream> = (0..MAX_CONNECTIONS + extra)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
            // A head begun, never finished (a connection past the bound may be closed
            // before this is written).
            let _ = write!(
                s,
                "GET /api/state HTTP/1.1\r\nHost: {}\r\nX-Slow: ",
                insp.host()
            );
            s
        })
        .collect();
    // The connections past the bound are closed at once (well before any head deadline).
    for s in slow.iter_mut().skip(MAX_CONNECTIONS + 8) {
        assert!(
            read_until_closed(s, WAIT).is_some(),
            "a connection past the bound was kept"
        );
    }
    assert!(
        opened.elapsed() < HEAD_TIMEOUT,
        "the connections past the bound were closed only after {:?}",
        opened.elapsed()
    );
    // The rest: closed by the head deadline, not kept.
    for (i, s) in slow.iter_mut().enumerate() {
        assert!(
            read_until_closed(s, HEAD_TIMEOUT + WAIT).is_some(),
            "slow connection {i} still open after {:?}",
            opened.elapsed()
        );
    }
    // And the dashboard is there for everyone else.
    assert!(insp.get("/api/state")["target"].is_string());
}

/// An idle keep-alive connection is closed too, not kept open for ever.
#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let insp = Inspect::start(&[]);
    let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
    write!(
        s,
        "GET /api/state HTTP/1.1\r\nHost: {}\r\nX-MCPL-Token: {}\r\n\r\n",
        insp.host(),
        insp.token
    )
    .unwrap();
    let got = read_until_closed(&mut s, HEAD_TIMEOUT + WAIT).expect("closed when idle");
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

/// A write whose body never arrives in full (`Content-Length` larger than what is sent)
/// was waited for without end; now it is answered `408` after [`BODY_TIMEOUT`].
#[test]
fn a_body_that_never_arrives_is_answered_408() {
    let insp = Inspect::start(&[]);
    let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
    write!(
        s,
        "POST /api/tools/call HTTP/1.1\r\nHost: {}\r\nX-MCPL-Token: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"name\"",
        insp.host(),
        insp.token
    )
    .unwrap();
    let got = read_until_closed(&mut s, BODY_TIMEOUT + WAIT).expect("an answer, then a close");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("did not arrive"), "{got}");
    // A body declared over the bound is refused before it is read, with a JSON error.
    let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
    write!(
        s,
        "POST /api/tools/call HTTP/1.1\r\nHost: {}\r\nX-MCPL-Token: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n{{",
        insp.host(),
        insp.token
    )
    .unwrap();
    let got = read_until_closed(&mut s, WAIT).expect("an answer, then a close");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 413"), "{got}");
    assert!(got.contains("\"ok\":false"), "{got}");
}

/// The events list was bounded in number (1,000) but not in bytes: each event kept the
/// server's params whole, so a server pushing 1.5 MB events made `/api/state` (the last 200)
/// 225 MB and the inspector's memory grow by each event (16 MiB frames: 16 GB for the list).
/// Now an event over 64 KiB keeps its head, and its params are cut to a preview with their
/// size, in the list, the live stream and the state alike.
#[test]
fn a_huge_event_is_kept_cut() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    insp.ready(&mut events);
    let text = format!("huge {}", "x".repeat(1 << 20));
    let r = insp.post(
        "/api/tools/call",
        serde_json::json!({ "name": "schedule_event", "arguments": { "text": text } }),
    );
    assert_eq!(r["ok"], true, "{r}");
    // The reference server's greeting push comes first; this one is cut or starts "huge".
    let ev = events.until("the huge push", |v| {
        let e = &v["event"];
        v["type"] == "event"
            && e["kind"] == "push"
            && (e["params"]["truncated"] == true
                || e["params"]["payload"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("huge")))
    });
    let ev = &ev["event"];
    assert!(
        ev.to_string().len() <= 64 * 1024 + 1024,
        "a {} byte event",
        ev.to_string().len()
    );
    assert_eq!(ev["truncated"], true);
    assert_eq!(ev["params"]["truncated"], true);
    assert!(ev["params"]["bytes"].as_u64().unwrap() > 1 << 20);
    assert!(ev["params"]["preview"].as_str().unwrap().starts_with('{'));
    // Its head is whole: the kind, feature set, id and treatment.
    assert!(ev["featureSet"].is_string() && ev["eventId"].is_string());
    assert!(ev["treatment"]["behavior"].is_string());
    let state = insp.get("/api/state");
    let kept = state["events"].as_array().unwrap();
    assert!(kept.iter().all(|e| e.to_string().len() <= 64 * 1024 + 1024));
    assert!(kept.iter().any(|e| e["truncated"] == true));
}

/// `mcpl inspect --repl | head`: the REPL's stdout closes while it has results and events
/// to print. `println!` panicked ("failed printing to stdout", exit 101); now the REPL
/// says so once on stderr and ends with 1.
#[test]
fn the_repl_ends_cleanly_when_its_output_is_closed() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(inspect_support::BIN)
        .args(["inspect", "--repl", "--timeout", "5"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // The first result line, then nobody reads any more.
    writeln!(stdin, "help").unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let feeder = std::thread::spawn(move || {
        for _ in 0..10_000 {
            if writeln!(stdin, "help").is_err() {
                break;
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        let _ = tx.send(err);
    });
    let Ok(err) = rx.recv_timeout(WAIT) else {
        let _ = child.kill();
        panic!("the REPL did not end within {WAIT:?} once its output was closed");
    };
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    waiter.join().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("cannot write the output"), "{err}");
    assert_eq!(status.code(), Some(1), "{err}");
}

/// The peak resident memory of process `pid` in KiB (`VmHWM`), if the system tells.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A server of the test's own: MCP-only, answers the handshake and `tools/list`, sends
/// `frame`, then a ping whose answer says the host has read it; then holds the connection.
fn server_sending(listener: std::net::TcpListener, frame: String, done: mpsc::Sender<()>) {
    use std::io::{BufRead, BufReader};
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut next = |line: &mut String| -> Value {
        line.clear();
        reader.read_line(line).unwrap();
        serde_json::from_str(line).unwrap_or(Value::Null)
    };
    let init = next(&mut line);
    let reply = json!({ "jsonrpc": "2.0", "id": init["id"], "result": {
        "protocolVersion": "2024-11-05", "capabilities": { "tools": {} },
        "serverInfo": { "name": "odd", "version": "1" } } });
    writeln!(writer, "{reply}").unwrap();
    loop {
        let v = next(&mut line);
        if v["method"] == "tools/list" {
            let r = json!({ "jsonrpc": "2.0", "id": v["id"], "result": { "tools": [] } });
            writeln!(writer, "{r}").unwrap();
            break;
        }
    }
    writer.write_all(frame.as_bytes()).unwrap();
    writeln!(writer, r#"{{"jsonrpc":"2.0","id":"done","method":"ping"}}"#).unwrap();
    loop {
        if next(&mut line)["id"] == "done" {
            let _ = done.send(());
            break;
        }
    }
    let _ = next(&mut line);
}

/// The log read each frame's head as it came, its `id` built whole as a JSON value before
/// the peer's parsed-cost bound could refuse the frame: one 8 MB frame whose id is an array
/// of a million small objects took the inspector to about 700 MB (16 MB: 1.4 GB). Now the id
/// is read as its text, unbuilt, and the frame logged cut as any other.
#[test]
fn a_frame_with_a_huge_id_is_logged_unbuilt() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let objects = vec![r#"{"a":1}"#; 1_000_000].join(",");
    let frame = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"id\":[{objects}]}}\n");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || server_sending(listener, frame, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    rx.recv_timeout(WAIT).expect("the host read the frame");
    let page = insp.get("/api/log?dir=received&limit=3");
    let entry = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["bytes"].as_u64().unwrap() > 8_000_000)
        .unwrap_or_else(|| panic!("the frame is logged: {page}"))
        .clone();
    assert_eq!(entry["kind"], "request", "{entry}");
    assert!(entry["id"].as_str().unwrap().len() <= 256, "{entry}");
    if let Some(peak) = peak_kib(insp.child.id()) {
        assert!(peak < 200 * 1024, "peak resident {peak} KiB");
    }
}

/// Reads the state on each change the event stream announces until `pred` holds for it.
fn state_until(
    insp: &Inspect,
    events: &mut inspect_support::Events,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = insp.get("/api/state");
        if pred(&s) {
            return s;
        }
        if events.next(deadline).is_none() {
            panic!("{what}: not within {WAIT:?}; last state {}", s["check"]);
        }
    }
}

/// A client that sends an API write and goes away before its answer (a reloaded page, a
/// closed tab): the operation was dropped half-way. For the Check button, `check.running`
/// stayed `true` for ever (every later check refused "a check is already running") and the
/// `mcpl check` child was killed unreported. Now a write runs to its end whoever waits for
/// it: the check's report lands in the state.
#[test]
fn a_write_whose_client_goes_away_still_runs_to_its_end() {
    let insp = Inspect::start(&[]);
    let mut events = insp.events();
    insp.ready(&mut events);
    let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
    write!(
        s,
        "POST /api/check HTTP/1.1\r\nHost: {}\r\nX-MCPL-Token: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        insp.host(),
        insp.token
    )
    .unwrap();
    state_until(&insp, &mut events, "the check runs", |s| {
        s["check"]["running"] == true
    });
    drop(s);
    let done = state_until(&insp, &mut events, "the check ends", |s| {
        s["check"]["running"] == false
    });
    let last = &done["check"]["last"];
    assert!(
        last["report"]["summary"]["pass"].as_u64().is_some(),
        "{last}"
    );
    let r = insp.post("/api/check", json!({}));
    assert_eq!(r["ok"], true, "{r}");
}

/// A server of the test's own, named `name`, advertising `manifest`: answers `initialize`,
/// the policy, the manifest fetch and `tools/list` (none), and once it has answered
/// `tools/list` writes the lines `after_listing` gives, until the connection ends.
fn scripted_server(
    listener: std::net::TcpListener,
    name: &str,
    manifest: Value,
    after_listing: impl Fn() -> Vec<Value>,
) {
    use std::io::{BufRead, BufReader};
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let method = msg["method"].as_str().unwrap_or("");
        let result = match method {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": name, "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "mcpl/manifest" => manifest.clone(),
            "tools/list" => json!({ "tools": [] }),
            _ => json!({}),
        };
        let reply = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        writeln!(writer, "{reply}").unwrap();
        if method == "tools/list" {
            for line in after_listing() {
                writeln!(writer, "{line}").unwrap();
            }
        }
    }
}

/// A server of the test's own that may ask for inference (§11) under `big`, and once the
/// host has listed its tools asks `count` times with a user message of `bytes` bytes.
fn asking_server(listener: std::net::TcpListener, count: usize, bytes: usize) {
    let manifest = json!({ "version": "0.5", "inferenceRequest": true, "featureSets": {
        "big": { "description": "asks", "uses": ["inferenceRequest"] } } });
    scripted_server(listener, "asker", manifest, || {
        let text = "y".repeat(bytes);
        (0..count)
            .map(|i| {
                json!({ "jsonrpc": "2.0", "id": format!("ask{i}"),
                    "method": "inference/request", "params": { "featureSet": "big",
                    "messages": [ { "role": "user", "content": text } ] } })
            })
            .collect()
    });
}

/// A server of the test's own whose `beforeInference` hook answers with one `system`
/// injection of `bytes` bytes (§10.4).
fn injecting_server(listener: std::net::TcpListener, bytes: usize) {
    use std::io::{BufRead, BufReader};
    let manifest = json!({ "version": "0.5",
        "contextHooks": { "beforeInference": { "inject": { "system": true } } },
        "featureSets": { "ctx": { "description": "injects",
            "uses": ["contextHooks.beforeInference.inject.system"] } } });
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let text = "z".repeat(bytes);
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": "injector", "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "mcpl/manifest" => manifest.clone(),
            "tools/list" => json!({ "tools": [] }),
            "context/beforeInference" => json!({ "featureSet": "ctx", "contextInjections": [
                { "namespace": "big", "position": "system", "content": text } ] }),
            _ => json!({}),
        };
        let reply = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        writeln!(writer, "{reply}").unwrap();
    }
}

/// The hook runs the inspector remembers (50) kept each server's injections whole: a server
/// injecting 1 MiB per turn made every `/api/state` carry the last ten whole and the
/// inspector hold 50 MiB (16 MiB frames: 800 MiB). Now each remembered run is kept within
/// the bound of an event, cut as events are; the run's own answer is still whole.
#[test]
fn a_hook_run_with_a_huge_injection_is_remembered_cut() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || injecting_server(listener, 1 << 20));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    insp.ready(&mut events);
    let r = insp.post("/api/hook", json!({ "text": "hello" }));
    assert_eq!(r["ok"], true, "{r}");
    let run = r["result"].to_string();
    assert!(
        run.len() > 1 << 20,
        "the run's answer is whole: {} bytes",
        run.len()
    );
    let state = insp.get("/api/state");
    let hooks = state["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{state}");
    let size = hooks[0].to_string().len();
    assert!(
        size <= 64 * 1024 + 1024,
        "a {size} byte remembered hook run"
    );
    assert_eq!(hooks[0]["truncated"], true);
    assert_eq!(
        hooks[0]["system"]["truncated"], true,
        "{}",
        hooks[0]["system"]
    );
    // Its head is whole.
    assert_eq!(hooks[0]["inferenceId"], r["result"]["inferenceId"]);
}

/// A server → host request waiting for an answer kept its params whole, and the state
/// listed each with them and its suggested answer (the message echoed) whole: up to 64
/// waiting requests of 16 MiB each, 1 GiB held and 2 GiB written per `/api/state`. Now each
/// is kept within the bound of an event, cut as events are.
#[test]
fn a_huge_waiting_request_is_kept_cut() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || asking_server(listener, 3, 1 << 20));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "three requests wait", |s| {
        s["pending"].as_array().is_some_and(|p| p.len() == 3)
    });
    for p in state["pending"].as_array().unwrap() {
        assert_eq!(p["method"], "inference/request");
        let size = p.to_string().len();
        assert!(size <= 64 * 1024 + 1024, "a {size} byte waiting request");
        assert_eq!(p["params"]["truncated"], true, "{}", p["params"]);
    }
    // It is still answered as any other.
    let id = state["pending"][0]["id"].clone();
    let r = insp.post("/api/answer", json!({ "id": id, "text": "short" }));
    assert_eq!(r["ok"], true, "{r}");
}

/// JSON-RPC 2.0 §4: each waiting server → host request is listed with the id the server sent
/// it under (`wireId`), besides the inspector's own number (`id`, the handle an answer
/// takes). Before, only the handle was shown, and a person could not tell which of the
/// server's requests was waiting.
#[test]
fn a_waiting_request_shows_the_id_the_server_sent() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || asking_server(listener, 2, 10));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "two requests wait", |s| {
        s["pending"].as_array().is_some_and(|p| p.len() == 2)
    });
    let mut wire: Vec<String> = state["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert!(p["id"].is_u64(), "{p}");
            p["wireId"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    wire.sort();
    assert_eq!(wire, ["ask0", "ask1"], "{state}");
    // Answered by its handle, the answer remembered under both.
    let id = state["pending"][0]["id"].clone();
    let r = insp.post("/api/answer", json!({ "id": id, "text": "short" }));
    assert_eq!(r["ok"], true, "{r}");
    let answered = insp.get("/api/state")["answered"].clone();
    assert!(
        answered
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == id && a["wireId"] == state["pending"][0]["wireId"]),
        "{answered}"
    );
}

/// A client that sends requests and never reads the answers (no token needed: a `401` is
/// an answer too) held its connection for ever once the answers filled the socket's
/// buffers: the request-head deadline does not run while a response is being written, so
/// 256 such clients locked everyone out. Now a response that cannot be written within
/// [`WRITE_TIMEOUT`] closes the connection (the client's writes then fail).
#[test]
fn a_client_that_never_reads_its_answers_is_closed() {
    let insp = Inspect::start(&[]);
    let s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
    let request = format!("GET /api/state HTTP/1.1\r\nHost: {}\r\n\r\n", insp.host()).repeat(100);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = s;
        let mut sent = 0u64;
        while s.write_all(request.as_bytes()).is_ok() {
            sent += 100;
        }
        let _ = tx.send(sent);
    });
    let sent = rx
        .recv_timeout(WRITE_TIMEOUT + WAIT)
        .expect("the connection of a client that never reads is closed");
    assert!(sent > 0);
    // And the dashboard is there for everyone else.
    assert!(insp.get("/api/state")["target"].is_string());
}

/// `mcpl inspect --repl` whose stderr is a closed pipe, fed a command line over the 1 MiB
/// bound: the refusal was written with `eprintln!`, which panicked (exit 101). Now it is
/// written as every other line on stderr, its failure ignored, and the REPL goes on.
#[test]
fn an_over_long_line_with_stderr_closed_is_refused_not_a_panic() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(inspect_support::BIN)
        .args(["inspect", "--repl", "--timeout", "5"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let long = "x".repeat(1024 * 1024 + 10);
        let _ = writeln!(stdin, "{long}\nhelp");
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let Ok(out) = rx.recv_timeout(WAIT) else {
        let _ = child.kill();
        panic!("the REPL did not end within {WAIT:?}");
    };
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    assert_ne!(status.code(), Some(101), "the REPL panicked");
    assert!(out.contains("commands (one per line)"), "{out}");
    assert_eq!(status.code(), Some(1));
}

/// `--repl` commands whose argument is not one they take: `events abc`, `log 1e3` and
/// `manifest x` answered as if given none (the last 10 events, 20 entries, the manifest),
/// ok and exit 0. Now each is an error naming the argument, and the REPL exits 1.
#[test]
fn repl_arguments_that_are_not_taken_are_refused() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(inspect_support::BIN)
        .args(["inspect", "--repl", "--json", "--timeout", "5"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "events abc\nlog 1e3\nmanifest x\nevents 2").unwrap();
    drop(stdin);
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let Ok(out) = rx.recv_timeout(WAIT) else {
        let _ = child.kill();
        panic!("the REPL did not end within {WAIT:?}");
    };
    let status = child.wait().unwrap();
    let results: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("command").is_some())
        .collect();
    let oks: Vec<(String, bool)> = results
        .iter()
        .map(|r| (r["command"].as_str().unwrap().to_owned(), r["ok"] == true))
        .collect();
    assert_eq!(
        oks,
        [
            ("events".to_owned(), false),
            ("log".to_owned(), false),
            ("manifest".to_owned(), false),
            ("events".to_owned(), true),
        ],
        "{out}"
    );
    assert!(results[0]["error"].as_str().unwrap().contains("\"abc\""));
    assert_eq!(status.code(), Some(1));
}

/// `/api/log` parameters it does not understand (`dir=recieved`, `limit=ten`,
/// `before=yesterday`) were read as absent: a page of every direction, 100 entries, the
/// newest, answered 200 as if asked for. Now each is `400` naming the parameter.
#[test]
fn log_parameters_that_are_not_understood_are_refused() {
    let insp = Inspect::start(&[]);
    let token = ("X-MCPL-Token", insp.token.clone());
    for (query, name) in [
        ("dir=recieved", "dir"),
        ("limit=ten", "limit"),
        ("before=yesterday", "before"),
    ] {
        let (status, _, body) = insp.request(
            "GET",
            &format!("/api/log?{query}"),
            std::slice::from_ref(&token),
            None,
        );
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(&format!("`{name}`")), "{query}: {body}");
    }
    let page = insp.get("/api/log?dir=received&limit=5");
    assert!(page["entries"].is_array(), "{page}");
}

/// A server of the test's own serving `manifest`: answers `initialize`, the policy, the
/// manifest fetch and `tools/list` (none), until the connection ends.
fn manifest_server(listener: std::net::TcpListener, manifest: Value) {
    scripted_server(listener, "many-sets", manifest, Vec::new);
}

/// A server whose `initialize` result passes the log's 256 KiB per frame (1,000 feature
/// sets with long descriptions, within the library's 1,024): the connection panel read the
/// server's result from the kept frame only, so it showed no server info, no advertisement
/// and no feature sets, and the grant preview answered "no initialize result yet", for a
/// session that was ready. Now that one frame is read whatever its size.
#[test]
fn a_large_initialize_result_still_fills_the_connection_panel() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sets: serde_json::Map<String, Value> = (0..1000)
        .map(|i| {
            let description = format!("set {i} {}", "d".repeat(300));
            (
                format!("set.{i:04}"),
                json!({ "description": description, "uses": ["pushEvents"] }),
            )
        })
        .collect();
    let manifest = json!({ "version": "0.5", "pushEvents": true, "featureSets": sets });
    assert!(manifest.to_string().len() > 256 * 1024);
    std::thread::spawn(move || manifest_server(listener, manifest));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    assert_eq!(state["connection"]["serverInfo"]["name"], "many-sets");
    let sets = state["grant"]["report"]["featureSets"].as_object();
    assert_eq!(sets.map(|s| s.len()), Some(1000), "{}", state["grant"]);
    let preview = insp.post("/api/grant/preview", json!({ "patterns": ["pushEvents"] }));
    assert_eq!(preview["ok"], true, "{preview}");
}

/// A server that may register channels and, once the host has listed its tools, registers
/// `descriptors` in one `channels/register`.
fn registering_server(listener: std::net::TcpListener, descriptors: Vec<Value>) {
    let manifest = json!({ "version": "0.5", "channels": { "register": true },
                           "featureSets": {} });
    scripted_server(listener, "registrar", manifest, || {
        vec![
            json!({ "jsonrpc": "2.0", "id": "reg", "method": "channels/register",
                     "params": { "channels": descriptors } }),
        ]
    });
}

/// A `channels/register` over the log's 256 KiB per frame (1,000 channels with 300-byte
/// labels, and one whose 100 KB descriptor the host refuses): the Channels panel read
/// descriptors from kept frames only, so it listed all 1,000 channels with
/// `descriptor: null`. Now such a frame is read too, each descriptor remembered within the
/// library host's 4 KiB (a refused one had been kept whole, up to 256 KiB each).
#[test]
fn a_large_register_keeps_every_descriptor_bounded() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut descriptors: Vec<Value> = (0..1000)
        .map(|i| {
            json!({ "id": format!("c:{i}"), "type": "chat", "direction": "bidirectional",
                         "label": "l".repeat(300) })
        })
        .collect();
    descriptors.push(
        json!({ "id": "c:huge", "type": "chat", "direction": "inbound",
                             "label": "h".repeat(100_000) }),
    );
    std::thread::spawn(move || registering_server(listener, descriptors));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "1,000 channels", |s| {
        s["channels"].as_array().is_some_and(|c| c.len() == 1000)
    });
    for c in state["channels"].as_array().unwrap() {
        let d = &c["descriptor"];
        assert_eq!(d["id"], c["id"], "{c}");
        assert_eq!(d["label"].as_str().map(str::len), Some(300), "{c}");
    }
}

/// The Check button against a server that writes 64 MiB to stderr and never answers:
/// `mcpl check` passes a server's stderr through, and the inspector read all of the check's
/// stderr into memory to show its first 4,096 characters (peak above 85 MiB here; a server
/// writing without end would have taken it without bound for the check's 300 s). Now the
/// check's output is read as it comes, only its head kept.
#[test]
fn the_check_button_keeps_only_the_head_of_a_flood_on_stderr() {
    let script = "head -c 67108864 /dev/zero | tr '\\0' e >&2; exec sleep 100";
    let insp = Inspect::start(&["--", "sh", "-c", script]);
    let r = insp.post("/api/check", json!({}));
    assert_eq!(r["ok"], true, "{r}");
    let stderr = r["result"]["stderr"].as_str().unwrap();
    assert!(stderr.starts_with("eeee") && stderr.chars().count() <= 4096);
    if let Some(peak) = peak_kib(insp.child.id()) {
        assert!(peak < 48 * 1024, "peak resident {peak} KiB");
    }
}

/// `/api/answer` bodies that do not say one answer: an error code that is no integer, a
/// message that is no string, an `error` that is no object, a result and an error at once.
/// Each was answered with a default in its place (-32603, a stock message, the result) and
/// sent to the server as if given. Now each is `400` and the request still waits.
#[test]
fn an_answer_that_is_not_one_is_refused_and_the_request_still_waits() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || asking_server(listener, 1, 10));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "a request waits", |s| {
        s["pending"].as_array().is_some_and(|p| p.len() == 1)
    });
    let id = state["pending"][0]["id"].clone();
    let token = ("X-MCPL-Token", insp.token.clone());
    let json_type = ("Content-Type", "application/json".to_owned());
    for body in [
        json!({ "id": id, "error": { "code": "-32000" } }),
        json!({ "id": id, "error": { "message": 7 } }),
        json!({ "id": id, "error": "no" }),
        json!({ "id": id, "result": {}, "error": { "code": 1 } }),
        json!({ "id": id, "text": 3 }),
    ] {
        let (status, _, reply) = insp.request(
            "POST",
            "/api/answer",
            &[token.clone(), json_type.clone()],
            Some(&body.to_string()),
        );
        assert_eq!(status, 400, "{body}: {reply}");
    }
    assert_eq!(
        insp.get("/api/state")["pending"].as_array().map(Vec::len),
        Some(1)
    );
    let r = insp.post(
        "/api/answer",
        json!({ "id": id, "error": { "code": -32000 } }),
    );
    assert_eq!(r["ok"], true, "{r}");
}

/// A server that answers the handshake and `tools/list` on each connection, then reads on
/// and answers nothing more.
fn mute_server(listener: std::net::TcpListener) {
    use std::io::{BufRead, BufReader};
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        std::thread::spawn(move || {
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let mut listed = false;
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                line.clear();
                let result = match msg["method"].as_str() {
                    Some("initialize") => json!({ "protocolVersion": "2024-11-05",
                        "capabilities": { "tools": {} },
                        "serverInfo": { "name": "mute", "version": "1" } }),
                    Some("tools/list") if !listed => {
                        listed = true;
                        json!({ "tools": [] })
                    }
                    _ => continue,
                };
                let reply = json!({ "jsonrpc": "2.0", "id": msg["id"], "result": result });
                let _ = writeln!(writer, "{reply}");
            }
        });
    }
}

/// Every API write slot taken by a write that waits on a server that never answers (256
/// tool calls, each bounded only by `--timeout 600`): `/api/restart`, the way out, was a
/// write like the others and answered `503`. It takes no slot now, and restarting ends
/// the writes that waited on the old connection.
#[test]
fn restart_answers_when_every_write_slot_is_taken() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || mute_server(listener));
    let insp = Inspect::start_with(&[&format!("tcp://{addr}")], &[], "600");
    let mut events = insp.events();
    insp.ready(&mut events);
    let body = json!({ "name": "never", "arguments": {} }).to_string();
    // In batches well within the connection bound; a batch's connections are closed once
    // its calls are on the wire (each write runs on, holding its slot).
    let deadline = Instant::now() + WAIT;
    for batch in 1..=4 {
        let writes: Vec<TcpStream> = (0..MAX_WRITES / 4)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", insp.port)).unwrap();
                write!(
                    s,
                    "POST /api/tools/call HTTP/1.1\r\nHost: {}\r\nX-MCPL-Token: {}\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    insp.host(),
                    insp.token,
                    body.len()
                )
                .unwrap();
                s
            })
            .collect();
        loop {
            let sent = insp.get("/api/log?method=tools/call&dir=sent&limit=500");
            if sent["entries"].as_array().map(Vec::len) == Some(batch * MAX_WRITES / 4) {
                break;
            }
            events
                .next(deadline)
                .unwrap_or_else(|| panic!("the tool calls were not all sent: {sent}"));
        }
        drop(writes);
    }
    // Every slot is taken: another write is refused.
    let r = insp.post(
        "/api/tools/call",
        json!({ "name": "one-more", "arguments": {} }),
    );
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("running already"),
        "{r}"
    );
    let r = insp.post("/api/restart", json!({}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["generation"], 2, "{r}");
}

/// Channel descriptors are remembered by their id: the descriptor was kept within 4 KiB, but
/// its id, the key it was kept under, whole, so 4,096 `channels/register` frames each with
/// one channel whose id is 4 MiB (every one refused by the host) took 16 GiB; 64 of them
/// took the inspector past 256 MiB here. Now a descriptor whose id alone is over the 4 KiB a
/// descriptor may take is not remembered (the host refuses it; it names no channel).
#[test]
fn register_frames_with_huge_channel_ids_are_not_remembered_whole() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let long = "i".repeat(4 << 20);
    let frame: String = (0..64)
        .map(|n| {
            let d = json!({ "id": format!("{n}{long}"), "type": "chat", "direction": "inbound" });
            format!(
                "{}\n",
                json!({ "jsonrpc": "2.0", "id": format!("reg{n}"), "method": "channels/register",
                        "params": { "channels": [d] } })
            )
        })
        .collect();
    drop(long);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || server_sending(listener, frame, tx));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    rx.recv_timeout(WAIT).expect("the host read the frames");
    let state = insp.get("/api/state");
    assert_eq!(state["channels"], json!([]), "{state}");
    if let Some(peak) = peak_kib(insp.child.id()) {
        assert!(peak < 160 * 1024, "peak resident {peak} KiB");
    }
}

/// An event is kept within `MAX_EVENT_BYTES` (64 KiB) by cutting its biggest members, but
/// the list of members cut left out the feature set's name: a server declaring a feature set
/// whose name is 200 KB and pushing under it had each of its 1,000 kept events hold the name
/// whole (a name as long as a manifest allows: 16 GB). Now the name is cut as params are.
#[test]
fn an_event_under_a_huge_feature_set_name_is_kept_cut() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let name = "n".repeat(200_000);
    let manifest = json!({ "version": "0.5", "pushEvents": true, "featureSets": {
        name.clone(): { "description": "pushes", "uses": ["pushEvents"] } } });
    std::thread::spawn(move || {
        scripted_server(listener, "pusher", manifest, || {
            vec![
                json!({ "jsonrpc": "2.0", "id": "p1", "method": "push/event",
                "params": { "featureSet": name, "eventId": "e1", "timestamp": "2026-01-01T00:00:00Z",
                            "payload": { "content": [{ "type": "text", "text": "hi" }] } } }),
            ]
        })
    });
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let ev = events.until("the push", |v| {
        v["type"] == "event" && v["event"]["kind"] == "push"
    });
    let size = ev["event"].to_string().len();
    assert!(size <= 64 * 1024 + 1024, "a {size} byte event");
    let state = insp.get("/api/state");
    let kept = state["events"].as_array().unwrap();
    assert!(!kept.is_empty(), "{state}");
    assert!(kept.iter().all(|e| e.to_string().len() <= 64 * 1024 + 1024));
}

/// A server answering `initialize` twice under its id: first `wide` as `wide-real`, then
/// `narrow` as `harmless-looking`; then as [`scripted_server`] (the manifest fetch answers
/// `wide`).
fn twice_initializing_server(listener: std::net::TcpListener, wide: Value, narrow: Value) {
    initializing_server(listener, wide, narrow, None)
}

/// [`twice_initializing_server`], or with `decoy` (`"other-id"`, `"both"`): before its
/// only answer, the `narrow` one under the request's id as a string where it is a number
/// (another id: the peer takes it for no answer), or with an error beside its result (an
/// invalid response, which settles the request as an error).
fn initializing_server(
    listener: std::net::TcpListener,
    wide: Value,
    narrow: Value,
    decoy: Option<&str>,
) {
    use std::io::{BufRead, BufReader};
    let (stream, _) = listener.accept().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue;
        };
        let answer = |result: Value| json!({ "jsonrpc": "2.0", "id": id, "result": result });
        let init = |name: &str, manifest: &Value| {
            answer(json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "tools": {}, "experimental": { "mcpl": manifest } },
                "serverInfo": { "name": name, "version": "1" } }))
        };
        match msg["method"].as_str().unwrap_or("") {
            "initialize" if decoy == Some("float-id") => {
                // The request's id 1 written 1.0: the same id to the peer (an integral
                // number), another text.
                let text = init("wide-real", &wide).to_string();
                let text = text.replacen(&format!("\"id\":{id}"), &format!("\"id\":{id}.0"), 1);
                assert!(text.contains(".0"), "{text}");
                writeln!(writer, "{text}").unwrap();
            }
            "initialize" if decoy.is_some() => {
                let mut d = init("harmless-looking", &narrow);
                if decoy == Some("both") {
                    d["error"] = json!({ "code": -32603, "message": "and an error" });
                } else {
                    d["id"] = json!(id.to_string());
                }
                writeln!(writer, "{d}").unwrap();
                writeln!(writer, "{}", init("wide-real", &wide)).unwrap();
            }
            "initialize" => {
                writeln!(writer, "{}", init("wide-real", &wide)).unwrap();
                writeln!(writer, "{}", init("harmless-looking", &narrow)).unwrap();
            }
            "featureSets/update" => {
                writeln!(writer, "{}", answer(json!({ "accepted": true }))).unwrap()
            }
            "mcpl/manifest" => writeln!(writer, "{}", answer(wide.clone())).unwrap(),
            "tools/list" => {
                writeln!(writer, "{}", answer(json!({ "tools": [] }))).unwrap();
                // An answer to the id the host sends next, before it is sent.
                if let (Some("next-id"), Some(n)) = (decoy, id.as_u64()) {
                    let stray = json!({ "jsonrpc": "2.0", "id": n + 1,
                        "result": { "tools": [{ "name": "stray", "inputSchema": {} }] } });
                    writeln!(writer, "{stray}").unwrap();
                }
            }
            _ => writeln!(writer, "{}", answer(json!({}))).unwrap(),
        }
    }
}

/// A server writes an answer under the id the host will send next, before the host sends
/// it (`"next-id"` of [`initializing_server`]). The peer taps a frame before its bytes reach
/// the transport, so the log sees the answer ahead of any request under its id: it is
/// marked a stray (and the library's `unknown_response` lands on it, not on the real answer
/// that comes after the request); the request sent next gets the server's real answer,
/// shown in the Tools panel, and that answer carries no mark.
#[test]
fn an_answer_to_the_id_sent_next_is_a_stray_never_the_next_answer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let manifest = json!({ "version": "0.5", "featureSets": {} });
    std::thread::spawn(move || {
        initializing_server(listener, manifest.clone(), manifest, Some("next-id"))
    });
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    assert_eq!(state["tools"], json!({ "tools": [] }));
    let received = |insp: &Inspect| {
        insp.get("/api/log?dir=received&limit=500")["entries"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let rules = |e: &Value| -> Vec<String> {
        e["marks"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|m| m["rule"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let is_stray = |e: &Value| {
        e["preview"]
            .as_str()
            .is_some_and(|p| p.contains("\"stray\""))
    };
    // The stray, marked both ways, whenever the library's diagnostic is handled.
    let deadline = std::time::Instant::now() + inspect_support::WAIT;
    let stray = loop {
        let found = received(&insp)
            .into_iter()
            .find(|e| is_stray(e) && rules(e).len() == 2);
        if let Some(e) = found {
            break e;
        }
        events
            .next(deadline)
            .expect("the stray is logged and diagnosed");
    };
    assert_eq!(
        rules(&stray),
        ["stray_response", "unknown_response"],
        "{stray}"
    );
    // The request under that id now: its real answer, not the stray.
    let listed = insp.post("/api/tools/list", json!({}));
    assert_eq!(listed["result"], json!({ "tools": [] }), "{listed}");
    assert_eq!(insp.get("/api/state")["tools"], json!({ "tools": [] }));
    let answers: Vec<Value> = received(&insp)
        .into_iter()
        .filter(|e| e["id"] == stray["id"] && !is_stray(e))
        .collect();
    let [answer] = answers.as_slice() else {
        panic!("one real answer under {}: {answers:?}", stray["id"])
    };
    assert!(rules(answer).is_empty(), "{answer}");
}

/// A server answers `initialize` twice: a wide manifest (a `beforeInference` hook), then
/// an empty one under another name. The library host settles the request with the first
/// answer and drops the second as an answer to no request in flight, but the inspector
/// read every answer under the `initialize` id, the last one winning: the operator was
/// shown `harmless-looking`, no feature sets, and a grant preview against the empty
/// manifest, while the host ran under the wide one. Now the connection panel and the grant
/// views show what the host runs under, and the second answer is shown for what it is.
#[test]
fn a_second_initialize_answer_is_not_what_the_inspector_shows() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let wide = json!({ "version": "0.5", "contextHooks": { "beforeInference": true },
        "featureSets": { "ctx": { "description": "reads every turn",
                                  "uses": ["contextHooks.beforeInference.observe"] } } });
    let narrow = json!({ "version": "0.5", "featureSets": {} });
    std::thread::spawn(move || twice_initializing_server(listener, wide, narrow));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    let c = &state["connection"];
    assert_eq!(c["serverInfo"]["name"], "wide-real", "{c}");
    assert_eq!(
        c["serverAdvertisement"]["contextHooks"]["beforeInference"], true,
        "{c}"
    );
    assert_eq!(
        c["serverInitialize"]["serverInfo"]["name"], "wide-real",
        "{c}"
    );
    // The second answer, for what it is: one the host ignored.
    let ignored = &c["ignoredInitializeAnswers"];
    assert_eq!(ignored["count"], 1, "{c}");
    assert_eq!(
        ignored["last"]["serverInfo"]["name"], "harmless-looking",
        "{c}"
    );
    let g = &state["grant"];
    assert!(g["featureSets"]["ctx"].is_object(), "{g}");
    assert_eq!(g["report"]["featureSets"]["ctx"]["available"], true, "{g}");
    let p = insp.post(
        "/api/grant/preview",
        json!({ "patterns": ["contextHooks.beforeInference.observe"] }),
    );
    assert_eq!(p["ok"], true, "{p}");
    assert_eq!(p["result"]["featureSets"]["ctx"]["available"], true, "{p}");
    assert!(
        p["result"]["advertised"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("contextHooks.beforeInference.observe"))),
        "{p}"
    );
}

/// A server registers channel `c:1` twice in one `channels/register` (outbound, then
/// inbound: the host keeps the first and refuses the second, `duplicate_descriptor`), adds
/// `c:2`, updates it twice in one `channels/changed` (the first stands, the later is
/// refused alike), then adds `c:3`. The inspector's Channels panel kept every descriptor of
/// every frame, the last one winning: it showed `c:1` as the refused inbound one and `c:2`
/// as the refused update, while the host enforced the first of each. Now it shows the
/// host's channel table.
#[test]
fn the_channels_shown_are_the_descriptors_the_host_holds() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let manifest = json!({ "version": "0.5", "channels": { "register": true },
                           "featureSets": {} });
    let d = |id: &str, direction: &str, label: &str| json!({ "id": id, "type": "chat", "direction": direction, "label": label });
    let frames = vec![
        json!({ "jsonrpc": "2.0", "id": "reg", "method": "channels/register",
            "params": { "channels": [ d("c:1", "outbound", "first-outbound"),
                                      d("c:1", "inbound", "second-inbound-refused") ] } }),
        json!({ "jsonrpc": "2.0", "id": "add2", "method": "channels/changed",
            "params": { "added": [ d("c:2", "bidirectional", "added") ] } }),
        json!({ "jsonrpc": "2.0", "id": "upd2", "method": "channels/changed",
            "params": { "updated": [ d("c:2", "bidirectional", "update-applied"),
                                     d("c:2", "inbound", "update-refused") ] } }),
        json!({ "jsonrpc": "2.0", "id": "add3", "method": "channels/changed",
            "params": { "added": [ d("c:3", "bidirectional", "last") ] } }),
    ];
    std::thread::spawn(move || {
        scripted_server(listener, "registrar", manifest, move || frames.clone())
    });
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "c:3 registered", |s| {
        s["channels"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["id"] == "c:3"))
    });
    let channels = state["channels"].as_array().unwrap();
    let shown = |id: &str| {
        channels
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("{id} not shown: {channels:?}"))["descriptor"]
            .clone()
    };
    assert_eq!(shown("c:1")["label"], "first-outbound", "{channels:?}");
    assert_eq!(shown("c:1")["direction"], "outbound", "{channels:?}");
    assert_eq!(shown("c:2")["label"], "update-applied", "{channels:?}");
    assert_eq!(shown("c:3")["label"], "last", "{channels:?}");
    assert_eq!(channels.len(), 3, "{channels:?}");
}

/// A server advertising MCPL under another version (`0.4`) with a feature set: the library
/// host serves it as plain MCP (§3.3; it grants at most `tools`), but the Grant panel and
/// the preview judged the advertisement as written, offering `pushEvents` and the set as
/// grantable. Now they judge what the host runs under: no MCPL at all.
#[test]
fn a_server_served_as_plain_mcp_is_offered_no_mcpl_grant() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let manifest = json!({ "version": "0.4", "pushEvents": true, "featureSets": {
        "ev": { "description": "pushes", "uses": ["pushEvents"] } } });
    std::thread::spawn(move || manifest_server(listener, manifest));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    let mode = state["connection"]["mode"].as_str().unwrap_or("");
    assert!(mode.starts_with("McpOnly"), "{}", state["connection"]);
    // What the server wrote is still shown as written.
    assert_eq!(state["connection"]["serverAdvertisement"]["version"], "0.4");
    let report = &state["grant"]["report"];
    assert_eq!(report["advertised"], json!(["tools"]), "{report}");
    assert_eq!(
        state["grant"]["featureSets"],
        json!({}),
        "{}",
        state["grant"]
    );
    let p = insp.post("/api/grant/preview", json!({ "patterns": ["pushEvents"] }));
    assert_eq!(p["ok"], true, "{p}");
    assert_eq!(p["result"]["effectiveCapabilities"], json!([]), "{p}");
    assert!(p["result"]["featureSets"]["ev"].is_null(), "{p}");
}

/// A server whose manifest changes (§17): `initialize` advertises `pushEvents` with feature
/// set `ev`, the manifest fetched after `mcpl/manifestChanged` drops both. The library host
/// reviews the new one and runs under it, but the Grant panel and the preview judged the
/// `initialize` answer for ever: `ev` listed and grantable. Now they judge the manifest the
/// session has in force.
#[test]
fn the_grant_views_follow_a_manifest_change() {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let before = json!({ "version": "0.5", "pushEvents": true, "modelInfo": true,
        "featureSets": {
            "ev": { "description": "pushes", "uses": ["pushEvents"] },
            "m": { "description": "asks the model", "uses": ["modelInfo"] } } });
    let after = json!({ "version": "0.5", "modelInfo": true, "featureSets": {
        "m": { "description": "asks the model", "uses": ["modelInfo"] } } });
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            line.clear();
            let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
                continue;
            };
            let method = msg["method"].as_str().unwrap_or("");
            let result = match method {
                "initialize" => json!({ "protocolVersion": "2025-06-18",
                    "capabilities": { "tools": {}, "experimental": { "mcpl": before } },
                    "serverInfo": { "name": "changer", "version": "1" } }),
                "featureSets/update" => json!({ "accepted": true }),
                "mcpl/manifest" => after.clone(),
                "tools/list" => json!({ "tools": [] }),
                _ => json!({}),
            };
            let reply = json!({ "jsonrpc": "2.0", "id": id, "result": result });
            writeln!(writer, "{reply}").unwrap();
            if method == "tools/list" {
                let changed = json!({ "jsonrpc": "2.0", "method": "mcpl/manifestChanged",
                    "params": { "revision": "r2", "domains": ["capabilities", "featureSets"] } });
                writeln!(writer, "{changed}").unwrap();
            }
        }
    });
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    events.until("the manifest change", |v| {
        v["type"] == "event" && v["event"]["kind"] == "manifest"
    });
    let state = insp.get("/api/state");
    let g = &state["grant"];
    assert!(g["featureSets"]["ev"].is_null(), "{g}");
    assert!(g["featureSets"]["m"].is_object(), "{g}");
    assert!(g["report"]["featureSets"]["ev"].is_null(), "{g}");
    let p = insp.post(
        "/api/grant/preview",
        json!({ "patterns": ["pushEvents", "modelInfo"] }),
    );
    assert_eq!(p["ok"], true, "{p}");
    assert_eq!(
        p["result"]["effectiveCapabilities"],
        json!(["modelInfo"]),
        "{p}"
    );
    assert!(p["result"]["featureSets"]["ev"].is_null(), "{p}");
    // The initialize answer is still shown as the server wrote it.
    assert_eq!(
        state["connection"]["serverAdvertisement"]["pushEvents"], true,
        "{}",
        state["connection"]
    );
}

/// A frame under the `initialize` request's id as text that the library's peer reads
/// otherwise, written before the real answer: the id as a string where the request's is a
/// number (another id: no answer), or a result with an error beside it (an invalid
/// response: the request is settled as an error and the session does not start). Read by
/// its id's text alone, each was taken for the server's result (the first answer), and the
/// real one counted as ignored. Now a frame answers `initialize` as the library reads it
/// (`Message::parse`: the id with its type; an invalid response with the id is an error).
#[test]
fn a_frame_the_peer_reads_otherwise_is_not_the_initialize_result() {
    let wide = json!({ "version": "0.5", "contextHooks": { "beforeInference": true },
        "featureSets": { "ctx": { "description": "reads every turn",
                                  "uses": ["contextHooks.beforeInference.observe"] } } });
    let narrow = json!({ "version": "0.5", "featureSets": {} });
    let start = |decoy: &'static str| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (wide, narrow) = (wide.clone(), narrow.clone());
        std::thread::spawn(move || initializing_server(listener, wide, narrow, Some(decoy)));
        Inspect::start(&[&format!("tcp://{addr}")])
    };
    // Another id: the real answer is the server's result, nothing ignored.
    let insp = start("other-id");
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    let c = &state["connection"];
    assert_eq!(c["serverInfo"]["name"], "wide-real", "{c}");
    assert_eq!(c["ignoredInitializeAnswers"], Value::Null, "{c}");
    assert!(
        state["grant"]["featureSets"]["ctx"].is_object(),
        "{}",
        state["grant"]
    );
    // An invalid response: initialize was answered with an error, so no server result.
    let insp = start("both");
    let mut events = insp.events();
    let state = state_until(&insp, &mut events, "the session refused", |s| {
        s["connection"]["phase"] == "closed"
    });
    let c = &state["connection"];
    assert_eq!(c["serverInitialize"], Value::Null, "{c}");
    assert_eq!(c["serverInfo"], Value::Null, "{c}");
    // The real answer, if it was read before the connection closed, is one ignored.
    let ignored = &c["ignoredInitializeAnswers"];
    assert!(
        ignored.is_null() || ignored["last"]["serverInfo"]["name"] == "wide-real",
        "{c}"
    );
}

/// The server answers `initialize` with the request's id `1` written `1.0`: the library's
/// peer reads an integral number as that id and runs under the answer, but the inspector
/// matched the answer's id by its text and showed no server at all.
#[test]
fn an_answer_under_the_id_written_otherwise_is_the_initialize_result() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let wide = json!({ "version": "0.5", "pushEvents": true, "featureSets": {
        "ev": { "description": "pushes", "uses": ["pushEvents"] } } });
    let narrow = json!({ "version": "0.5", "featureSets": {} });
    std::thread::spawn(move || initializing_server(listener, wide, narrow, Some("float-id")));
    let insp = Inspect::start(&[&format!("tcp://{addr}")]);
    let mut events = insp.events();
    let state = insp.ready(&mut events);
    let c = &state["connection"];
    assert_eq!(c["serverInfo"]["name"], "wide-real", "{c}");
    assert!(
        state["grant"]["featureSets"]["ev"].is_object(),
        "{}",
        state["grant"]
    );
}
