//! `mcpl check-host` against hostile hosts (issue #20): hosts that close at the worst
//! moment, send ids no host should, trickle pings to keep the run alive, or answer with
//! megabytes. Whatever they do, the checker ends within its documented bound with a complete,
//! bounded report, and never panics (exit 101). Most hosts here are raw bytes over the
//! checker's stdio, since the library would not send what they send.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use mcpl::peer::{IncomingMessage, Peer, PeerConfig};
use mcpl::transport::child;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The checker's own bound on a run with these flags, `24 × timeout + inference + watch`,
/// plus a margin for a loaded machine. Only a hung checker reaches it.
const GUARD: Duration = Duration::from_secs(24 + 1 + 60);

/// The flags every run here uses: the wall-time bound is then 24 × 1 + 1 + 0 = 25 s.
const BOUNDS: [&str; 6] = ["--timeout", "1", "--inference-timeout", "1", "--watch", "0"];

fn checker(report: &PathBuf) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcpl"));
    cmd.args(["check-host", "--json"])
        .args(BOUNDS)
        .arg("--report")
        .arg(report)
        .stderr(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// The checker over raw pipes: what the test writes is exactly what the host "sends".
fn spawn_raw(report: &PathBuf) -> (Child, ChildStdin, ChildStdout) {
    let mut child = checker(report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    (child, stdin, stdout)
}

/// The checker's exit code once it ends (guarded); never a panic.
async fn guarded<E: std::fmt::Debug>(
    wait: impl std::future::Future<Output = Result<std::process::ExitStatus, E>>,
) -> i32 {
    let status = tokio::time::timeout(GUARD, wait)
        .await
        .expect("the checker ended within its bound")
        .unwrap();
    let code = status.code().unwrap();
    assert_ne!(code, 101, "the checker panicked");
    code
}

/// The report: complete JSON, within the documented bound (60 checks × 6 × 512 B, each
/// detail's worst JSON escaping, plus 4 KiB of the rest), every detail within the cap.
fn read_report(report: &PathBuf) -> Value {
    let text = std::fs::read_to_string(report).unwrap();
    assert!(
        text.len() < 60 * 6 * 512 + 4096,
        "a {}-byte report",
        text.len()
    );
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 60, "{doc:#}");
    for c in checks {
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.len() <= 512 + '…'.len_utf8(),
            "{} bytes: {detail:.200}",
            detail.len()
        );
    }
    doc
}

/// Waits for the raw checker and reads its report.
async fn report_of(mut child: Child, report: &PathBuf) -> (i32, Value) {
    let code = guarded(child.wait()).await;
    (code, read_report(report))
}

/// `initialize` params advertising MCPL `version`.
fn init_params(version: Value) -> Value {
    json!({ "protocolVersion": "2025-06-18",
            "capabilities": { "experimental": { "mcpl": { "version": version } } },
            "clientInfo": { "name": "hostile", "version": "0" } })
}

fn line(v: &Value) -> String {
    format!("{v}\n")
}

fn initialize(id: Value) -> String {
    line(&json!({ "jsonrpc": "2.0", "id": id, "method": "initialize",
                  "params": init_params(json!("0.5")) }))
}

const INITIALIZED: &str = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

fn policy_request() -> String {
    line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                  "params": { "effectiveCapabilities": ["pushEvents"] } }),
    )
}

/// A host that sends its policy Request and closes (FIN) at once: the early push, polled
/// before the EOF was seen, had made the checker poll a finished future (exit 101).
#[tokio::test]
async fn policy_then_fin_is_reported_not_a_panic() {
    let report = report_path("fin.json");
    let (child, mut stdin, _stdout) = spawn_raw(&report);
    let all = format!("{}{INITIALIZED}{}", initialize(json!(1)), policy_request());
    stdin.write_all(all.as_bytes()).await.unwrap();
    drop(stdin);
    let (code, doc) = report_of(child, &report).await;
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("(EOF)"), "{doc:#}");
    assert_eq!(code, 2);
}

/// The same over TCP, closed with a reset (RST): reported as the connection failing.
#[tokio::test]
async fn policy_then_reset_is_reported_not_a_panic() {
    let report = report_path("rst.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--json", "--tcp", "127.0.0.1:0"])
        .args(BOUNDS)
        .arg("--report")
        .arg(&report)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let addr = first.rsplit("tcp://").next().unwrap().to_owned();
    // Drained, so the checker's stderr never fills.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let mut s = tokio::net::TcpStream::connect(addr.as_str()).await.unwrap();
    let all = format!("{}{INITIALIZED}{}", initialize(json!(1)), policy_request());
    s.write_all(all.as_bytes()).await.unwrap();
    s.set_zero_linger().unwrap();
    drop(s);
    let (code, doc) = report_of(child, &report).await;
    // The reset may come before or after the checker read what preceded it; either way the
    // report says the host went away, and how.
    assert!(doc["error"].is_string(), "{doc:#}");
    assert_eq!(code, 2);
}

/// Reads the checker's stdout to its end: every line it wrote, parsed.
async fn frames(stdout: ChildStdout) -> Vec<Value> {
    let mut lines = BufReader::new(stdout).lines();
    let mut out = Vec::new();
    while let Ok(Some(l)) = lines.next_line().await {
        out.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")));
    }
    out
}

/// A host that initializes, then only pings, then closes: each ping is answered, and the
/// report says the host went away while the policy was awaited (it had panicked).
#[tokio::test]
async fn initialize_then_only_pings_is_reported_not_a_panic() {
    let report = report_path("pings.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let mut all = initialize(json!(1));
    for id in 10..13 {
        all.push_str(&line(
            &json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }),
        ));
    }
    stdin.write_all(all.as_bytes()).await.unwrap();
    drop(stdin);
    let written = tokio::spawn(frames(stdout));
    let (code, doc) = report_of(child, &report).await;
    let written = written.await.unwrap();
    for id in 10..13 {
        assert!(
            written
                .iter()
                .any(|f| f["id"] == id && f["result"] == json!({})),
            "ping {id}: {written:?}"
        );
    }
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("(EOF)") && error.contains("during the wait for the policy"),
        "{doc:#}"
    );
    assert_eq!(code, 2);
}

/// Pings with ids JSON-RPC does not allow (objects, arrays, null, booleans, fractions) or
/// no integer type holds: each is answered or diagnosed by the library, none crashes the
/// checker.
#[tokio::test]
async fn pings_with_odd_ids_are_survived() {
    let report = report_path("odd-ids.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let mut all = initialize(json!(1));
    let ids = [
        "{\"a\":1}",
        "[1,2]",
        "null",
        "true",
        "1.5",
        "123456789012345678901234567890",
        "1e400",
        "-0",
    ];
    for id in ids {
        all.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n"
        ));
    }
    stdin.write_all(all.as_bytes()).await.unwrap();
    drop(stdin);
    let written = tokio::spawn(frames(stdout));
    let (code, doc) = report_of(child, &report).await;
    written.await.unwrap();
    assert!(
        doc["error"].as_str().unwrap_or_default().contains("(EOF)"),
        "{doc:#}"
    );
    assert_eq!(code, 2);
}

/// An `initialize` whose id is a 1 MB string (within the 1 MiB message limit, past
/// `jsonrpc::MAX_ID_BYTES`) is an Invalid Request, answered `-32600` with `id: null` (JSON-RPC
/// 2.0 §5: an id that cannot be used); the host then closing is reported like any other.
#[tokio::test]
async fn initialize_with_a_one_megabyte_id_is_answered() {
    let report = report_path("big-id.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let id = "i".repeat(1_000_000);
    stdin
        .write_all(initialize(json!(id)).as_bytes())
        .await
        .unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    drop(stdin);
    let (code, doc) = report_of(child, &report).await;
    assert!(
        doc["error"].as_str().unwrap_or_default().contains("(EOF)"),
        "{doc:#}"
    );
    assert_eq!(code, 2);
}

/// A host answering every request of the checker at once (as a strict host refusing what
/// it was not granted), with `answer` for its method.
fn answering_host(
    transport: mcpl::transport::Transport,
    answer: impl Fn(&str) -> Result<Value, mcpl::jsonrpc::ErrorObject> + Send + 'static,
) -> Peer {
    let (host, mut incoming) = Peer::new(transport, PeerConfig::default());
    tokio::spawn(async move {
        while let Some(m) = incoming.recv().await {
            if let IncomingMessage::Request(r) = m {
                let _ = match answer(r.method()) {
                    Ok(v) => r.respond(v).await,
                    Err(e) => r.respond_error(e).await,
                };
            }
        }
    });
    host
}

/// A host that sends one ping every half step and never a policy cannot keep the run
/// alive: each phase ends at its deadline, not at a quiet moment (with per-message waits
/// the run had never ended).
#[tokio::test]
async fn a_trickling_host_cannot_keep_the_run_alive() {
    let report = report_path("trickle.json");
    let (transport, ctl) = child::spawn(&mut checker(&report)).unwrap();
    let host = answering_host(transport, |_| {
        Err(mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents"))
    });
    let init = init_params(json!("0.5"));
    host.request_raw("initialize", Some(init)).await.unwrap();
    let pinger = host.clone();
    let trickle = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            every.tick().await;
            if pinger.request_raw("ping", None).await.is_err() {
                return;
            }
        }
    });
    let code = guarded(ctl.wait()).await;
    trickle.abort();
    let doc = read_report(&report);
    let policy = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "host.policy-is-request")
        .unwrap();
    assert_eq!(policy["status"], "fail", "{doc:#}");
    assert_eq!(code, 1, "{doc:#}");
}

/// A host whose every answer carries 800 KB, and whose policy lists 20,000 paths (refused
/// past the list bound): the report quotes excerpts only (each detail capped, the whole under 64 KiB), where it had
/// quoted every answer whole.
#[tokio::test]
async fn huge_answers_leave_the_report_bounded() {
    let report = report_path("huge.json");
    let (transport, ctl) = child::spawn(&mut checker(&report)).unwrap();
    let blob = "x".repeat(400_000);
    let host = answering_host(transport, move |method| match method {
        "ping" => Ok(json!({})),
        _ => Ok(json!({ "accepted": false, "content": blob, "results": [blob] })),
    });
    // The advertised version (500 KB) is quoted by the report too.
    let init = init_params(json!("0.".repeat(250_000)));
    host.request_raw("initialize", Some(init)).await.unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let paths: Vec<&str> = std::iter::repeat_n("tools", 20_000).collect();
    let policy = json!({ "effectiveCapabilities": paths });
    // Past the list bound (issue #20) the checker answers -32602 naming it, not a receipt.
    let refused = host.request_raw("featureSets/update", Some(policy)).await;
    let Err(mcpl::peer::PeerError::Remote(e)) = refused else {
        panic!("a 20,000-entry policy got {refused:?}");
    };
    assert_eq!(e.code, -32602, "{e:?}");
    assert_eq!(
        e.data.as_ref().map(|d| d["count"].clone()),
        Some(json!(20_000))
    );
    let code = guarded(ctl.wait()).await;
    drop(host);
    let doc = read_report(&report);
    assert_eq!(code, 1, "{doc:#}");
}

/// The check `id` of the report.
fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {doc:#}"))
}

/// A host that sends its policy Request before `initialize`: the checker applied it and
/// answered a receipt (ready before initialized), then reported that no policy Request came
/// and that there was no grant to judge, while it probed under that grant. Now it is
/// refused `-32600` as the library server refuses anything but `ping` before `initialize`,
/// and the report says so.
#[tokio::test]
async fn a_policy_before_initialize_is_refused_and_reported() {
    let report = report_path("early-policy.json");
    let (transport, ctl) = child::spawn(&mut checker(&report)).unwrap();
    let host = answering_host(transport, |method| match method {
        "ping" => Ok(json!({})),
        _ => Err(mcpl::jsonrpc::ErrorObject::capability_denied("pushEvents")),
    });
    let policy = json!({ "effectiveCapabilities": ["pushEvents"] });
    let early = host.request_raw("featureSets/update", Some(policy)).await;
    let Err(mcpl::peer::PeerError::Remote(e)) = early else {
        panic!("a policy before initialize got {early:?}");
    };
    assert_eq!(e.code, -32600, "{e:?}");
    host.request_raw("initialize", Some(init_params(json!("0.5"))))
        .await
        .unwrap();
    host.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    let code = guarded(ctl.wait()).await;
    drop(host);
    let doc = read_report(&report);
    let policy = check(&doc, "host.policy-is-request");
    assert_eq!(policy["status"], "fail", "{doc:#}");
    let detail = policy["detail"].as_str().unwrap();
    assert!(detail.contains("before initialize"), "{detail}");
    // Probed as granting nothing: the push refused is what that grant asks.
    assert_eq!(check(&doc, "host.push-follows-grant")["status"], "pass");
    assert_eq!(code, 1, "{doc:#}");
}

/// A host over raw pipes: `initialize`, `notifications/initialized` and a policy granting
/// `pushEvents`, then each request of the checker answered with the line `answer` writes
/// for it (or none), in the order they come.
async fn raw_answering_host(
    report: &PathBuf,
    answer: impl Fn(&Value) -> Option<String>,
) -> (i32, Value) {
    let head = format!("{}{INITIALIZED}{}", initialize(json!(1)), policy_request());
    raw_scripted_host(report, head, answer).await
}

/// As [`raw_answering_host`], the host first writing `head` (its `initialize`,
/// `notifications/initialized` and policy, as it chooses them).
async fn raw_scripted_host(
    report: &PathBuf,
    head: String,
    answer: impl Fn(&Value) -> Option<String>,
) -> (i32, Value) {
    let (child, mut stdin, stdout) = spawn_raw(report);
    let all = head;
    stdin.write_all(all.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if m.get("method").is_none() || m.get("id").is_none() {
            continue;
        }
        if let Some(a) = answer(&m) {
            if stdin.write_all(a.as_bytes()).await.is_err() {
                break;
            }
        }
    }
    drop(stdin);
    report_of(child, report).await
}

/// A host answering `model/info` and `channels/incoming` with a response carrying both
/// `result` and `error` (no valid JSON-RPC response), each before the ping behind it: the
/// peer reports such a response to a request sent in wire order as a diagnostic only, so
/// the checker waited out its timeout and reported "no answer within the timeout", "must
/// error, not silence", and passed host.requests-independent (the ping answered "while
/// model/info was still outstanding"). Now the report says what came, and no order is
/// read from it.
#[tokio::test]
async fn an_invalid_response_is_reported_as_one_not_as_silence() {
    let report = report_path("invalid-response.json");
    let (code, doc) = raw_answering_host(&report, |m| {
        let id = &m["id"];
        let v = match m["method"].as_str().unwrap_or("") {
            "model/info" | "channels/incoming" => json!({ "jsonrpc": "2.0", "id": id,
                "result": {}, "error": { "code": 1, "message": "both" } }),
            "ping" => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
            _ => json!({ "jsonrpc": "2.0", "id": id,
                         "error": { "code": -32001, "message": "denied" } }),
        };
        Some(line(&v))
    })
    .await;
    let answers = check(&doc, "host.answers-every-request");
    assert_eq!(answers["status"], "fail", "{doc:#}");
    let detail = answers["detail"].as_str().unwrap();
    assert!(
        detail.contains("not valid JSON-RPC: model/info") && !detail.contains("no answer"),
        "{detail}"
    );
    let incoming = check(&doc, "host.incoming-unregistered-refused");
    assert_eq!(incoming["status"], "fail", "{doc:#}");
    assert!(
        incoming["detail"]
            .as_str()
            .unwrap()
            .contains("invalid response"),
        "{incoming}"
    );
    assert_ne!(
        check(&doc, "host.requests-independent")["status"],
        "pass",
        "{doc:#}"
    );
    assert_eq!(code, 1, "{doc:#}");
}

/// A host answering each `ping` of the checker's (every request it sends goes alone) with a
/// one-element array holding the response: JSON-RPC 2.0 §5 answers a request with a single
/// Response object, an array answering a batch only (§6), so `host.frames-valid` fails and
/// names the response, the mirror of `mcpl check`'s `transport.frames-valid`. It passed
/// unremarked.
#[tokio::test]
async fn an_answer_to_a_single_request_in_an_array_fails_frames_valid() {
    let report = report_path("batched-answer.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let id = &m["id"];
        let v = match m["method"].as_str().unwrap_or("") {
            "ping" => json!([{ "jsonrpc": "2.0", "id": id, "result": {} }]),
            _ => json!({ "jsonrpc": "2.0", "id": id,
                         "error": { "code": -32001, "message": "denied" } }),
        };
        Some(line(&v))
    })
    .await;
    let frames = check(&doc, "host.frames-valid");
    assert_eq!(frames["status"], "fail", "{doc:#}");
    let detail = frames["detail"].as_str().unwrap();
    assert!(
        detail.contains("in a batch (an array) to a request sent alone") && detail.contains("§5"),
        "{detail}"
    );
}

/// `--ws`: a connection that is no WebSocket client (a plain HTTP request: a port probe, a
/// browser) comes before the host. Its failed handshake ended the run ("accept failed",
/// exit 2) before the host could connect; now it is said on stderr and the host that
/// connects next is checked.
#[tokio::test]
async fn a_failed_websocket_handshake_is_not_the_host() {
    a_probe_before_the_host_is_not_the_host("ws", Probe::Http, "failed its WebSocket handshake")
        .await;
}

/// `--tcp`: a connection that ends before sending anything (a port probe) comes before the
/// host. It was taken for the host, and the run ended (exit 2, "the host sent no initialize
/// request"); now it is said on stderr and the host that connects next is checked (a host
/// speaks first, with its `initialize`).
#[tokio::test]
async fn a_connection_that_ends_before_its_first_byte_is_not_the_host() {
    a_probe_before_the_host_is_not_the_host("tcp", Probe::Ends, "ended before sending anything")
        .await;
}

/// `--tcp` and `--ws`: a connection that stays open and sends nothing (a health check, a
/// client that connected to the wrong port) comes before the host. It was taken for the
/// host (`--tcp`: the checker waited on its first byte until the accept bound, "no host
/// connected"; `--ws`: its stalled upgrade held the accept for the 10 s handshake bound, and
/// a WebSocket client that upgraded and then said nothing was the host). A host speaks
/// first: the one that does is checked, and stderr says the silent one was not the host.
#[tokio::test]
async fn a_connection_that_stays_silent_is_not_the_host() {
    for (scheme, probe) in [
        ("tcp", Probe::Silent),
        ("ws", Probe::Silent),
        ("ws", Probe::SilentWebSocket),
    ] {
        a_probe_before_the_host_is_not_the_host(scheme, probe, "sent nothing").await;
    }
}

/// What connects before the host in [`a_probe_before_the_host_is_not_the_host`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Probe {
    /// Connects and closes at once.
    Ends,
    /// A plain HTTP request, read to its end.
    Http,
    /// Connects and stays open, sending nothing, until the host has been checked.
    Silent,
    /// Completes a WebSocket handshake, then stays open sending nothing.
    SilentWebSocket,
}

/// `check-host --SCHEME`, probed (`probe`) before the host connects over SCHEME: the host is
/// checked, and stderr says `said`.
async fn a_probe_before_the_host_is_not_the_host(scheme: &str, probe: Probe, said: &str) {
    use tokio::io::AsyncReadExt;
    // One file per scheme and probe: the tests calling this run at once in one process.
    let report = report_path(&format!("{scheme}-{probe:?}-probe.json"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([
            "check-host",
            "--json",
            &format!("--{scheme}"),
            "127.0.0.1:0",
        ])
        .args(BOUNDS)
        .arg("--report")
        .arg(&report)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let addr = first
        .rsplit(&format!("{scheme}://"))
        .next()
        .unwrap()
        .to_owned();
    let stderr = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            all.push(l);
        }
        all
    });
    let mut held = None;
    let mut held_ws = None;
    if probe == Probe::SilentWebSocket {
        let url = format!("{scheme}://{addr}");
        held_ws = Some(
            mcpl::transport::endpoint::connect(&url, None)
                .await
                .unwrap(),
        );
    } else {
        let mut stream = tokio::net::TcpStream::connect(addr.as_str()).await.unwrap();
        match probe {
            Probe::Http => {
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
                let mut sink = Vec::new();
                let _ = stream.read_to_end(&mut sink).await;
            }
            Probe::Silent => held = Some(stream),
            Probe::Ends | Probe::SilentWebSocket => {}
        }
    }
    let transport = mcpl::transport::endpoint::connect(&format!("{scheme}://{addr}"), None)
        .await
        .expect("the host connects after the probe");
    let host = answering_host(transport, |_| Ok(json!({})));
    host.request_raw("initialize", Some(init_params(json!("0.5"))))
        .await
        .unwrap();
    host.close();
    let code = guarded(child.wait()).await;
    drop((held, held_ws));
    let stderr = stderr.await.unwrap().join("\n");
    let doc = read_report(&report);
    assert_eq!(
        check(&doc, "host.initialize-advertises-mcpl")["status"],
        "pass",
        "{scheme} {probe:?}: {doc:#}\n{stderr}"
    );
    assert!(stderr.contains(said), "{scheme} {probe:?}: {stderr}");
    assert_eq!(code, 2, "the host went away: {doc:#}");
}

/// The peak resident size of process `pid` in KiB (`VmHWM`), if the system tells.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Pings whose params are 1 MB of small objects (within the 1 MiB message limit): each was
/// built whole (a million-entry parse costs about 90 times its text), so the checker
/// documented as holding a few 1 MiB messages peaked past 100 MiB. Now a message that would
/// cost more than `MAX_PARSED_COST` parsed is refused unbuilt (`-32600`), as the library
/// refuses one past its own, larger bound.
#[tokio::test]
async fn messages_that_cost_more_parsed_than_the_checker_needs_are_refused_unbuilt() {
    let report = report_path("costly.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let written = tokio::spawn(frames(stdout));
    stdin
        .write_all(initialize(json!(1)).as_bytes())
        .await
        .unwrap();
    let objects = vec![r#"{"a":1}"#; 130_000].join(",");
    for id in 0..12 {
        let ping = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\",\"params\":{{\"x\":[{objects}]}}}}\n",
            100 + id
        );
        stdin.write_all(ping.as_bytes()).await.unwrap();
    }
    let peak = peak_kib(child.id().unwrap_or_default());
    drop(stdin);
    let (code, _) = report_of(child, &report).await;
    let written = written.await.unwrap();
    if let Some(peak) = peak {
        assert!(peak < 48 * 1024, "the checker peaked at {peak} KiB");
    }
    let refused = written
        .iter()
        .filter(|f| f["id"].as_i64().is_some_and(|i| i >= 100) && f["error"]["code"] == -32600)
        .count();
    assert!(refused > 0, "{written:?}");
    assert_eq!(code, 2);
}

/// A host answering every request but `ping` under its id turned into a string (`"2"` for
/// `2`): the responses were dropped unreported and the report read as for a silent host,
/// "no response within the timeout". Now a timeout names the responses that came meanwhile
/// under an id the checker never sent (verdicts unchanged).
#[tokio::test]
async fn answers_under_the_wrong_id_are_named_not_taken_for_silence() {
    let report = report_path("wrong-ids.json");
    let (code, doc) = raw_answering_host(&report, |m| {
        let id = &m["id"];
        let v = match m["method"].as_str().unwrap_or("") {
            "ping" => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
            _ => json!({ "jsonrpc": "2.0", "id": id.to_string(),
                         "error": { "code": -32001, "message": "denied" } }),
        };
        Some(line(&v))
    })
    .await;
    let undeclared = check(&doc, "host.rejects-with-error");
    assert_eq!(undeclared["status"], "fail", "{doc:#}");
    let detail = undeclared["detail"].as_str().unwrap();
    assert!(
        detail.contains("1 response(s) came meanwhile under an id the checker never sent"),
        "{detail}"
    );
    assert_eq!(code, 1, "{doc:#}");
}

/// A host whose `experimental.mcpl` is present but no object (`true`, `"0.5"`, `[]`): the
/// report said "no experimental.mcpl: an MCP-only host", skipped every check and exited 0,
/// as for a host that advertises nothing. It is a malformed advertisement: the check fails
/// saying what came, and the rest is skipped as the server stays MCP-only (§3.3).
#[tokio::test]
async fn an_advertisement_that_is_no_object_fails_and_says_what_came() {
    for (n, mcpl) in [json!(true), json!("0.5"), json!([])]
        .into_iter()
        .enumerate()
    {
        let report = report_path(&format!("mcpl-not-object-{n}.json"));
        let (transport, ctl) = child::spawn(&mut checker(&report)).unwrap();
        let host = answering_host(transport, |_| Ok(json!({})));
        let init = json!({ "protocolVersion": "2025-06-18",
                           "capabilities": { "experimental": { "mcpl": mcpl } },
                           "clientInfo": { "name": "hostile", "version": "0" } });
        host.request_raw("initialize", Some(init)).await.unwrap();
        host.close();
        let code = guarded(ctl.wait()).await;
        let doc = read_report(&report);
        let c = check(&doc, "host.initialize-advertises-mcpl");
        assert_eq!(c["status"], "fail", "{mcpl}: {doc:#}");
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("experimental.mcpl is {mcpl}, not an object")),
            "{detail}"
        );
        assert_eq!(code, 1, "{mcpl}: {doc:#}");
    }
}

/// An MCP-only host (no `experimental.mcpl`) that sends `tools/list` and a ping once its
/// `initialize` is answered: the checker ended the connection right after that answer, so
/// neither got a response. It is now served for `--watch` as after the probes: MCP's
/// methods answered, MCPL's `-32601` (the server stays MCP-only, §3.2).
#[tokio::test]
async fn an_mcp_only_host_is_answered_for_the_watch() {
    let report = report_path("mcp-only-watch.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args([
            "check-host",
            "--json",
            "--timeout",
            "1",
            "--inference-timeout",
            "1",
        ])
        .args(["--watch", "1", "--report"])
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (mut stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "mcp-only", "version": "0" } } });
    stdin.write_all(line(&init).as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    let after = format!(
        "{INITIALIZED}{}{}{}",
        line(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" })),
        line(&json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" })),
        line(
            &json!({ "jsonrpc": "2.0", "id": 4, "method": "featureSets/update",
                      "params": { "effectiveCapabilities": [] } })
        ),
    );
    stdin.write_all(after.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        let Ok(Some(l)) = lines.next_line().await else {
            break;
        };
        got.push(serde_json::from_str::<Value>(&l).unwrap());
    }
    assert_eq!(got.len(), 3, "the connection ended with {got:?}");
    assert_eq!(got[0]["result"]["tools"], json!([]), "{got:?}");
    assert_eq!(got[1]["result"], json!({}), "{got:?}");
    assert_eq!(got[2]["error"]["code"], -32601, "{got:?}");
    drop(stdin);
    let (code, doc) = report_of(child, &report).await;
    assert_eq!(
        check(&doc, "host.initialize-advertises-mcpl")["status"],
        "skip",
        "{doc:#}"
    );
    assert_eq!(code, 0, "{doc:#}");
}

/// A host that sends `context/beforeInference` before `initialize`: refused `-32600` (as
/// anything but `ping` is then) and judged as a hook before the receipt, not forgotten:
/// the report must not say the host sent no hook.
#[tokio::test]
async fn a_hook_before_initialize_is_refused_and_judged() {
    let report = report_path("early-hook.json");
    let (transport, ctl) = child::spawn(&mut checker(&report)).unwrap();
    let host = answering_host(transport, |_| Ok(json!({})));
    let hook = json!({ "inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                       "userMessage": null, "model": { "id": "m" } });
    let early = host
        .request_raw("context/beforeInference", Some(hook))
        .await;
    let Err(mcpl::peer::PeerError::Remote(e)) = early else {
        panic!("a hook before initialize got {early:?}");
    };
    assert_eq!(e.code, -32600, "{e:?}");
    host.request_raw("initialize", Some(init_params(json!("0.5"))))
        .await
        .unwrap();
    host.close();
    let code = guarded(ctl.wait()).await;
    let doc = read_report(&report);
    let hooks = check(&doc, "host.hooks-after-ready");
    assert_eq!(hooks["status"], "fail", "{doc:#}");
    assert!(
        hooks["detail"]
            .as_str()
            .unwrap()
            .contains("before the policy receipt"),
        "{hooks}"
    );
    assert_eq!(code, 2, "the host went away: {doc:#}");
}

/// A host that writes part of its policy Request (no newline) and then stalls: the check
/// that waited for it quotes what the host left unfinished, where it said only that no
/// Request came (the bytes were in no frame, so nothing mentioned them).
#[tokio::test]
async fn a_line_the_host_left_unfinished_is_quoted() {
    let report = report_path("unfinished.json");
    let (child, mut stdin, mut stdout) = spawn_raw(&report);
    // What the checker writes is read and dropped: only its report is judged.
    let written =
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
    let half = r#"{"jsonrpc":"2.0","id":2,"method":"featureSets/upd"#;
    let all = format!("{}{INITIALIZED}{half}", initialize(json!(1)));
    stdin.write_all(all.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let (_, doc) = report_of(child, &report).await;
    drop(stdin);
    written.abort();
    let d = check(&doc, "host.policy-is-request")["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(d.contains("no featureSets/update Request"), "{d}");
    assert!(d.contains("unfinished"), "{d}");
    assert!(d.contains(r#"\"method\":\"featureSets/upd"#), "{d}");
}

/// A host that writes part of its `initialize` (no newline) and then stalls: the run's
/// error quotes what the host left unfinished, as the policy's wait does, where it said only
/// "the host sent no initialize request within 1.0 s" (hunt: the bytes were in no frame).
#[tokio::test]
async fn an_initialize_left_unfinished_is_quoted() {
    let report = report_path("unfinished-initialize.json");
    let (child, mut stdin, mut stdout) = spawn_raw(&report);
    let written =
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"initia"#)
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    let (code, doc) = report_of(child, &report).await;
    drop(stdin);
    written.abort();
    assert_eq!(code, 2, "{doc:#}");
    let e = doc["error"].as_str().unwrap_or_default();
    assert!(e.contains("no initialize request within"), "{e}");
    assert!(e.contains("unfinished"), "{e}");
    assert!(e.contains(r#"\"method\":\"initia"#), "{e}");
}

/// A host that answers the unknown-method probe with a line the connection cannot read (an
/// error whose `data` is `1e400`, past a 64-bit float): the check says the answer came and
/// could not be read, naming the parser's error, where it said only "no response within the
/// timeout" as for a silent host. (The peer fails the request at once now, so the check
/// names the invalid answer rather than a timeout with the frame discarded meanwhile.)
#[tokio::test]
async fn an_answer_that_cannot_be_read_is_not_reported_as_silence() {
    let report = report_path("unreadable-answer.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let id = &m["id"];
        Some(match m["method"].as_str().unwrap_or("") {
            "mcpl-check-host/no-such-method" => format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32601,\
                 \"message\":\"no\",\"data\":1e400}}}}\n"
            ),
            "ping" => line(&json!({ "jsonrpc": "2.0", "id": id, "result": {} })),
            _ => line(&json!({ "jsonrpc": "2.0", "id": id,
                               "error": { "code": -32001, "message": "denied" } })),
        })
    })
    .await;
    let unknown = check(&doc, "host.unknown-method-errors");
    assert_eq!(unknown["status"], "fail", "{doc:#}");
    let detail = unknown["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("invalid response") && detail.contains("could not be parsed"),
        "{detail}"
    );
    assert!(!detail.contains("no response"), "{detail}");
}

/// A host whose answers to the checker's pings repeat a member name (`result` twice; RFC 8259
/// §4: names SHOULD be unique, I-JSON forbids it): the peer reads the last one and says
/// nothing, so the report warns under `host.member-names-unique`, naming the member and the
/// message. A host naming each member once passes it.
#[tokio::test]
async fn a_host_repeating_a_member_name_is_warned_naming_it() {
    let answer = |repeat: bool| {
        move |m: &Value| {
            let id = &m["id"];
            Some(match m["method"].as_str().unwrap_or("") {
                "ping" if repeat => {
                    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}},\"result\":{{}}}}\n")
                }
                "ping" => line(&json!({ "jsonrpc": "2.0", "id": id, "result": {} })),
                _ => line(&json!({ "jsonrpc": "2.0", "id": id,
                                   "error": { "code": -32001, "message": "denied" } })),
            })
        }
    };
    let report = report_path("repeated-member.json");
    let (_, doc) = raw_answering_host(&report, answer(true)).await;
    let unique = check(&doc, "host.member-names-unique");
    assert_eq!(unique["status"], "warn", "{doc:#}");
    let d = unique["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains(r#""result" repeated"#) && d.contains("response id"),
        "{d}"
    );

    let report = report_path("unique-members.json");
    let (_, doc) = raw_answering_host(&report, answer(false)).await;
    assert_eq!(
        check(&doc, "host.member-names-unique")["status"],
        "pass",
        "{doc:#}"
    );
}

/// A host that writes part of its policy Request (no newline) and then ends its stream (EOF
/// inside the line), over a pipe and over TCP: the report says the host ended the connection
/// and quotes what it left half-written, as it does when the host stalls there, where it
/// said only "EOF".
#[tokio::test]
async fn an_end_of_stream_inside_a_line_quotes_the_line() {
    let half = r#"{"jsonrpc":"2.0","id":2,"method":"featureSets/upd"#;
    let all = format!("{}{INITIALIZED}{half}", initialize(json!(1)));
    let quoted = r#"\"method\":\"featureSets/upd"#;

    // A pipe: stdin closed after the half line.
    let report = report_path("eof-inside-a-line.json");
    let (child, mut stdin, mut stdout) = spawn_raw(&report);
    let written =
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
    stdin.write_all(all.as_bytes()).await.unwrap();
    drop(stdin);
    let (code, doc) = report_of(child, &report).await;
    written.abort();
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("(EOF)"), "{doc:#}");
    assert!(
        error.contains("unfinished") && error.contains(quoted),
        "{error}"
    );
    assert_eq!(code, 2);

    // TCP: the write side shut down after the half line (FIN).
    let report = report_path("eof-inside-a-line-tcp.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["check-host", "--json", "--tcp", "127.0.0.1:0"])
        .args(BOUNDS)
        .arg("--report")
        .arg(&report)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let addr = first.rsplit("tcp://").next().unwrap().to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let mut s = tokio::net::TcpStream::connect(addr.as_str()).await.unwrap();
    s.write_all(all.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let (code, doc) = report_of(child, &report).await;
    drop(s);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("unfinished") && error.contains(quoted),
        "{error}"
    );
    assert_eq!(code, 2);
}

/// A host that begins its policy Request over several lines (pretty-printed) and ends its
/// stream before its end: the report of how the host went away quotes what it began, as the
/// end of a wait does, where the held lines were handed on as junk and the end said only
/// "EOF" (§4: one message per line).
#[tokio::test]
async fn an_end_of_stream_inside_a_spread_message_quotes_it() {
    let begun = "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"method\": \"featureSets/update\",\n";
    let all = format!("{}{INITIALIZED}{begun}", initialize(json!(1)));
    let report = report_path("eof-inside-a-spread-message.json");
    let (child, mut stdin, mut stdout) = spawn_raw(&report);
    let written =
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
    stdin.write_all(all.as_bytes()).await.unwrap();
    drop(stdin);
    let (code, doc) = report_of(child, &report).await;
    written.abort();
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("(EOF)"), "{doc:#}");
    assert!(
        error.contains("began one message over 4 line(s)")
            && error.contains(r#"\"method\": \"featureSets/update\""#),
        "{error}"
    );
    let policy = check(&doc, "host.policy-is-request")["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(!policy.contains("junk"), "{policy}");
    assert_eq!(code, 2);
}

/// A host that sends `context/beforeInference` (§4.1: a Request) as a Notification, after the
/// receipt and under a granted hook leaf: the run ignored it and reported that the host sent
/// no beforeInference at all (`host.hooks-after-ready` skipped). It now fails
/// `host.hook-is-request`, and the hook is judged as any other (here: the user message was
/// sent though observe is not granted).
#[tokio::test]
async fn a_hook_sent_as_a_notification_fails_its_form() {
    let report = report_path("hook-notification.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let policy = line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
        "params": { "effectiveCapabilities": ["contextHooks.beforeInference.inject.beforeUser"] } }),
    );
    let all = format!("{}{INITIALIZED}{policy}", initialize(json!(1)));
    stdin.write_all(all.as_bytes()).await.unwrap();
    let hook = line(
        &json!({ "jsonrpc": "2.0", "method": "context/beforeInference",
        "params": { "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                    "userMessage": "secret" } }),
    );
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        let reply = match (m.get("method").and_then(Value::as_str), m.get("id")) {
            // The receipt: the hook goes out now, as a Notification.
            (None, Some(id)) if *id == json!(2) => Some(hook.clone()),
            (Some("ping"), Some(id)) => Some(line(&json!({ "jsonrpc": "2.0", "id": id,
                                                           "result": {} }))),
            (Some(_), Some(id)) => Some(line(&json!({ "jsonrpc": "2.0", "id": id,
                "error": { "code": -32001, "message": "denied" } }))),
            _ => None,
        };
        if let Some(r) = reply {
            if stdin.write_all(r.as_bytes()).await.is_err() {
                break;
            }
        }
    }
    drop(stdin);
    let (_, doc) = report_of(child, &report).await;
    let form = check(&doc, "host.hook-is-request");
    assert_eq!(form["status"], "fail", "{doc:#}");
    assert!(
        form["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("Notification"),
        "{form}"
    );
    assert_eq!(
        check(&doc, "host.user-message-redacted")["status"],
        "fail",
        "{doc:#}"
    );
}

/// A host that begins its stream with a UTF-8 byte order mark (RFC 8259 §8.1: a writer must
/// not add one; a parser may ignore it, and the library's does): the run goes on as the
/// library reads it, and `host.no-byte-order-mark` warns, since a server whose parser does not
/// ignore it (Python's `json.loads`, for one) cannot read that message. A host without one
/// passes it.
#[tokio::test]
async fn a_byte_order_mark_from_the_host_warns() {
    for (bom, status) in [("\u{feff}", "warn"), ("", "pass")] {
        let report = report_path(&format!("bom-{}.json", bom.len()));
        let (child, mut stdin, mut stdout) = spawn_raw(&report);
        let written =
            tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
        let all = format!(
            "{bom}{}{INITIALIZED}{}",
            initialize(json!(1)),
            policy_request()
        );
        stdin.write_all(all.as_bytes()).await.unwrap();
        drop(stdin);
        let (_, doc) = report_of(child, &report).await;
        written.abort();
        assert_eq!(
            check(&doc, "host.initialize-advertises-mcpl")["status"],
            "pass",
            "{doc:#}"
        );
        let mark = check(&doc, "host.no-byte-order-mark");
        assert_eq!(mark["status"], status, "{doc:#}");
        if status == "warn" {
            let d = mark["detail"].as_str().unwrap_or_default();
            assert!(
                d.contains("byte order mark") && d.contains("initialize"),
                "{d}"
            );
        }
    }
}

/// A host that sends its `initialize` without an id (a Notification, which no one can answer)
/// and then waits: the run ends without an initialize Request, and the report says one came
/// as a Notification, where it said only that none came.
#[tokio::test]
async fn an_initialize_sent_as_a_notification_is_named() {
    let report = report_path("initialize-notification.json");
    let (child, mut stdin, _stdout) = spawn_raw(&report);
    let init = line(&json!({ "jsonrpc": "2.0", "method": "initialize",
                             "params": init_params(json!("0.5")) }));
    stdin.write_all(init.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let (code, doc) = report_of(child, &report).await;
    drop(stdin);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("no initialize request"), "{doc:#}");
    assert!(error.contains("as a Notification"), "{error}");
    assert_eq!(code, 2);
}

/// A host that sends a notification-only method (§4.1; here `inference/lifecycle`) as a
/// Request, with an id, once it has its receipt: the checker answers it `-32601` and the
/// report said nothing of the form. It now fails `host.notifications-have-no-id`, naming the
/// method and the id; the same message sent without an id passes it.
#[tokio::test]
async fn a_notification_sent_as_a_request_fails_its_form() {
    for (id, status) in [(Some(json!("lc1")), "fail"), (None, "pass")] {
        let report = report_path(&format!("notification-form-{}.json", id.is_some()));
        let (child, mut stdin, stdout) = spawn_raw(&report);
        let all = format!("{}{INITIALIZED}{}", initialize(json!(1)), policy_request());
        stdin.write_all(all.as_bytes()).await.unwrap();
        let mut lifecycle = json!({ "jsonrpc": "2.0", "method": "inference/lifecycle",
            "params": { "inferenceId": "i1", "phase": "started" } });
        if let (Some(id), Some(m)) = (&id, lifecycle.as_object_mut()) {
            m.insert("id".to_owned(), id.clone());
        }
        let lifecycle = line(&lifecycle);
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let Ok(m) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            let reply = match (m.get("method").and_then(Value::as_str), m.get("id")) {
                // The receipt: the lifecycle message goes out now.
                (None, Some(id)) if *id == json!(2) => Some(lifecycle.clone()),
                (Some("ping"), Some(id)) => Some(line(&json!({ "jsonrpc": "2.0", "id": id,
                                                               "result": {} }))),
                (Some(_), Some(id)) => Some(line(&json!({ "jsonrpc": "2.0", "id": id,
                    "error": { "code": -32001, "message": "denied" } }))),
                _ => None,
            };
            if let Some(r) = reply {
                if stdin.write_all(r.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
        drop(stdin);
        let (_, doc) = report_of(child, &report).await;
        let form = check(&doc, "host.notifications-have-no-id");
        assert_eq!(form["status"], status, "{doc:#}");
        if id.is_some() {
            let d = form["detail"].as_str().unwrap_or_default();
            assert!(d.contains("inference/lifecycle"), "{form}");
            assert!(d.contains(r#""lc1""#), "{form}");
        }
    }
}

/// A host that pretty-prints its `initialize` over several lines (as `JSON.stringify(m,
/// null, 2)` writes it): line framing (§4; MCP's stdio transport forbids embedded newlines)
/// made each line a frame of junk, so the run saw no `initialize` at all and said only that
/// none came. It now reads the message whole, so the run goes on, and fails
/// `host.messages-one-line`, saying the message was spread over N lines, quoting it, and that
/// it is otherwise a valid request. A host writing one line per message passes it.
#[tokio::test]
async fn a_message_spread_over_lines_from_the_host_fails_one_line_and_the_run_goes_on() {
    for pretty in [true, false] {
        let report = report_path(&format!("spread-{pretty}.json"));
        let (child, mut stdin, mut stdout) = spawn_raw(&report);
        let written =
            tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
        let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": init_params(json!("0.5")) });
        let init = if pretty {
            format!("{}\n", serde_json::to_string_pretty(&init).unwrap())
        } else {
            line(&init)
        };
        let lines = init.lines().count();
        let all = format!("{init}{INITIALIZED}{}", policy_request());
        stdin.write_all(all.as_bytes()).await.unwrap();
        drop(stdin);
        let (_, doc) = report_of(child, &report).await;
        written.abort();
        assert_eq!(
            check(&doc, "host.initialize-advertises-mcpl")["status"],
            "pass",
            "{doc:#}"
        );
        let one = check(&doc, "host.messages-one-line");
        if pretty {
            assert_eq!(one["status"], "fail", "{doc:#}");
            let d = one["detail"].as_str().unwrap_or_default();
            assert!(d.contains(&format!("spread over {lines} lines")), "{d}");
            assert!(
                d.contains("valid JSON-RPC request (initialize, id 1)"),
                "{d}"
            );
            assert!(d.contains("§4"), "{d}");
        } else {
            assert_eq!(one["status"], "pass", "{doc:#}");
        }
    }
}

/// A host that begins its policy Request pretty-printed (§4: one message per line) and
/// stalls before its end: the lines it wrote are held whole by the checker's reader, waiting
/// for the rest, so the report of the wait said only that no Request came, where `mcpl
/// check` quotes what is held. Now it says a message was begun over several lines and
/// quotes its start.
#[tokio::test]
async fn a_message_begun_over_lines_and_left_is_quoted() {
    let report = report_path("spread-left.json");
    let (child, mut stdin, mut stdout) = spawn_raw(&report);
    let written =
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
    let begun = "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"method\": \"featureSets/update\",\n";
    let all = format!("{}{INITIALIZED}{begun}", initialize(json!(1)));
    stdin.write_all(all.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let (_, doc) = report_of(child, &report).await;
    drop(stdin);
    written.abort();
    let d = check(&doc, "host.policy-is-request")["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(d.contains("no featureSets/update Request"), "{d}");
    assert!(d.contains("began one message over 4 line(s)"), "{d}");
    assert!(d.contains("featureSets/update\\\""), "{d}");
}

/// A host answering the checker's requests under their integer ids written with a fraction
/// or an exponent (`2.0`, `2e0`: the same value, JSON-RPC 2.0 §5, but not as the request
/// wrote it): the library's peer refuses such an id, so each answer was discarded as a
/// frame that is not valid JSON-RPC and its request waited out as silence. `mcpl check`
/// reads them as the answers with a warning; `check-host` now does too, under
/// `host.response-ids-as-sent`, naming the form. A host writing the ids as sent passes it.
#[tokio::test]
async fn response_ids_written_2_0_are_the_answers_with_a_warning() {
    for odd in [true, false] {
        let report = report_path(&format!("integral-ids-{odd}.json"));
        let (_, doc) = raw_answering_host(&report, |m| Some(integral_answer(m, odd, false))).await;
        integral_ids_judged(&doc, odd);
    }
}

/// As [`response_ids_written_2_0_are_the_answers_with_a_warning`], each answer sent as a
/// JSON-RPC batch of one (JSON-RPC 2.0 §6, which the library's peer reads): the id written
/// `2.0` was read only in a single response, so inside the array the answer was discarded
/// and its request waited out as silence.
#[tokio::test]
async fn response_ids_written_2_0_inside_a_batch_are_the_answers_with_a_warning() {
    for odd in [true, false] {
        let report = report_path(&format!("integral-ids-batch-{odd}.json"));
        let (_, doc) = raw_answering_host(&report, |m| Some(integral_answer(m, odd, true))).await;
        integral_ids_judged(&doc, odd);
    }
}

/// The answer to the checker's request `m`: ping with `{}`, anything else with `-32001`;
/// under its id written `N.0` (`Ne0` for ping) when `odd`; as a batch of one when `batch`.
fn integral_answer(m: &Value, odd: bool, batch: bool) -> String {
    let id = &m["id"];
    let id = match (odd, m["method"].as_str().unwrap_or("")) {
        (false, _) => id.to_string(),
        (true, "ping") => format!("{id}e0"),
        (true, _) => format!("{id}.0"),
    };
    let one = match m["method"].as_str().unwrap_or("") {
        "ping" => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}"),
        _ => format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":\
             {{\"code\":-32001,\"message\":\"denied\"}}}}"
        ),
    };
    if batch {
        format!("[{one}]\n")
    } else {
        format!("{one}\n")
    }
}

/// The report of a host answering as [`integral_answer`] does: every answer read, and
/// `host.response-ids-as-sent` a warning naming the form when `odd`, else a pass.
fn integral_ids_judged(doc: &Value, odd: bool) {
    {
        let answers = check(doc, "host.answers-every-request");
        let d = answers["detail"].as_str().unwrap_or_default();
        assert!(
            !d.contains("no answer") && !d.contains("not valid"),
            "{odd}: {d}"
        );
        assert_ne!(
            check(doc, "host.requests-independent")["status"],
            "fail",
            "{odd}: {doc:#}"
        );
        let ids = check(doc, "host.response-ids-as-sent");
        if odd {
            assert_eq!(ids["status"], "warn", "{doc:#}");
            let d = ids["detail"].as_str().unwrap_or_default();
            assert!(
                d.contains("id 2.0 for request 2")
                    && d.contains("response(s) wrote the integer id"),
                "{d}"
            );
        } else {
            assert_eq!(ids["status"], "pass", "{doc:#}");
        }
    }
}

/// The answer a conforming host gives the checker's probe `m`: ping `{}`, a refusal of
/// anything else (`-32001`), or `channels/incoming` refused with `incoming_code`.
fn refusing_answer(m: &Value, incoming_code: i64) -> String {
    let id = &m["id"];
    let v = match m["method"].as_str().unwrap_or("") {
        "ping" => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
        "channels/incoming" => json!({ "jsonrpc": "2.0", "id": id,
            "error": { "code": incoming_code, "message": "refused" } }),
        _ => json!({ "jsonrpc": "2.0", "id": id,
                     "error": { "code": -32001, "message": "denied" } }),
    };
    line(&v)
}

/// AUDIT-001 §2.2, §2.3, §2.4: a host that delivers what the grant withholds. Granted only
/// `pushEvents`, once ready it sends `channels/publish` (`channels.publish`, not even
/// advertised), `inference/lifecycle` (`inferenceLifecycle`, not granted), `channels/outgoing/chunk`
/// (`channels.streaming`) and `context/afterInference` (removed in 0.5.0, §10.5: no grant
/// allows it, and it hands over the user's and the model's text). §5.4: a host MUST NOT
/// deliver a message requiring a denied capability. Nothing judged these: each was answered
/// `-32601` or ignored, and every check passed. They now fail
/// `host.deliveries-within-grant`, each named; a host sending none is skipped there.
#[tokio::test]
async fn deliveries_the_grant_withholds_fail() {
    let report = report_path("deliveries-outside.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" && m["params"]["eventId"] == "u1" {
            for v in [
                json!({ "jsonrpc": "2.0", "method": "channels/publish",
                        "params": { "conversationId": "c", "channelId": "check:a",
                                    "content": [ { "type": "text", "text": "hi" } ] } }),
                json!({ "jsonrpc": "2.0", "method": "inference/lifecycle",
                        "params": { "inferenceId": "i1", "conversationId": "c",
                                    "turnIndex": 0, "phase": "started" } }),
                json!({ "jsonrpc": "2.0", "method": "channels/outgoing/chunk",
                        "params": { "inferenceId": "i1", "conversationId": "c",
                                    "channelId": "check:a", "index": 0, "delta": "hi" } }),
                json!({ "jsonrpc": "2.0", "id": "after-1", "method": "context/afterInference",
                        "params": { "inferenceId": "i1", "userMessage": "secret",
                                    "assistantMessage": "reply" } }),
            ] {
                out.push_str(&line(&v));
            }
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.deliveries-within-grant");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    for said in [
        "channels/publish",
        "channels.publish",
        "inference/lifecycle",
        "inferenceLifecycle",
        "channels/outgoing/chunk",
        "context/afterInference",
        "§10.5",
        "4 of 4",
    ] {
        assert!(d.contains(said), "{said}: {d}");
    }

    // A host that delivers nothing of the kind: nothing to judge.
    let report = report_path("deliveries-none.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    assert_eq!(
        check(&doc, "host.deliveries-within-grant")["status"],
        "skip",
        "{doc:#}"
    );
}

/// AUDIT-001 §2.1: the §14.6 channel codes were "defined, exported, and never thrown". A
/// host refusing `channels/incoming` for a channel never registered with some other code
/// (`-32603`) passed `host.incoming-unregistered-refused` with nothing said; §14.6 names
/// `-32023` (unknown channel) for it, and §6.6 asks a rejecting host to populate the
/// documented code. It now warns under `host.unknown-channel-code`; `-32023` passes.
#[tokio::test]
async fn an_unknown_channel_refused_with_another_code_warns() {
    for (code, status) in [(-32603, "warn"), (-32023, "pass")] {
        let report = report_path(&format!("unknown-channel-code{code}.json"));
        let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, code))).await;
        assert_eq!(
            check(&doc, "host.incoming-unregistered-refused")["status"],
            "pass",
            "{doc:#}"
        );
        let c = check(&doc, "host.unknown-channel-code");
        assert_eq!(c["status"], status, "{code}: {doc:#}");
        let d = c["detail"].as_str().unwrap_or_default();
        assert!(d.contains(&code.to_string()), "{d}");
    }
}

/// §12: "A host that does not support or does not grant model/info MUST reply with an
/// error"; §14.1, §5.4: the inbound `channels/list` needs `channels.register`, and a host
/// MUST reject an inbound method requiring a denied capability. The checker advertises no
/// `modelInfo`, and this host grants only `pushEvents`, yet answers both with a result
/// (AUDIT-001 §2.3, §3: ungated surfaces): `host.answers-every-request` passed them, as any
/// answer is no silence, and nothing else judged them. They now fail
/// `host.answers-follow-grant`; refused with errors, it passes.
#[tokio::test]
async fn model_info_and_channels_list_answered_outside_the_grant_fail() {
    for ungated in [true, false] {
        let report = report_path(&format!("answers-follow-grant-{ungated}.json"));
        let (_, doc) = raw_answering_host(&report, |m| {
            let id = &m["id"];
            Some(match m["method"].as_str().unwrap_or("") {
                "model/info" if ungated => line(&json!({ "jsonrpc": "2.0", "id": id,
                    "result": { "id": "m", "vendor": "v", "contextWindow": 1 } })),
                "channels/list" if ungated => line(&json!({ "jsonrpc": "2.0", "id": id,
                    "result": { "channels": [] } })),
                _ => refusing_answer(m, -32023),
            })
        })
        .await;
        assert_ne!(
            check(&doc, "host.answers-every-request")["status"],
            "fail",
            "{doc:#}"
        );
        let c = check(&doc, "host.answers-follow-grant");
        let d = c["detail"].as_str().unwrap_or_default();
        if ungated {
            assert_eq!(c["status"], "fail", "{doc:#}");
            for said in [
                "model/info",
                "modelInfo",
                "channels/list",
                "channels.register",
                "§12",
            ] {
                assert!(d.contains(said), "{said}: {d}");
            }
        } else {
            assert_eq!(c["status"], "pass", "{doc:#}");
        }
    }
}

/// AUDIT-001 §3: the host implemented `scope/elevate` and approved it ungated. 0.5.0
/// removed it (§7: the host matched a server-supplied label against its whitelist), so it
/// is an unknown method now, to be refused with an error (§6.6). A host approving it passed
/// every check (the checker never sent it); it now fails `host.removed-methods-refused`,
/// quoting the answer; refused, it passes.
#[tokio::test]
async fn a_host_approving_scope_elevate_fails() {
    for approves in [true, false] {
        let report = report_path(&format!("scope-elevate-{approves}.json"));
        let (_, doc) = raw_answering_host(&report, |m| {
            Some(match m["method"].as_str().unwrap_or("") {
                "scope/elevate" if approves => line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                    "result": { "approved": true } })),
                _ => refusing_answer(m, -32023),
            })
        })
        .await;
        let c = check(&doc, "host.removed-methods-refused");
        let d = c["detail"].as_str().unwrap_or_default();
        if approves {
            assert_eq!(c["status"], "fail", "{doc:#}");
            assert!(d.contains("scope/elevate") && d.contains("approved"), "{d}");
            assert!(d.contains("§7"), "{d}");
        } else {
            assert_eq!(c["status"], "pass", "{doc:#}");
        }
    }
}

/// §6.6: "When a host does reject, it MUST use a JSON-RPC error object ... and MUST populate
/// the documented code" (-32001, feature set not enabled; -32002, capability denied). A host
/// granting nothing that refuses the push and the inference request with `-32603` only
/// warned under `host.push-follows-grant` and `host.inference-follows-grant` (verdicts kept:
/// a published contract), so the run passed (exit 0). It now fails `host.refusal-code`;
/// `-32001` and `-32002` pass, and so does `-32601` from a host whose own advertisement
/// claims neither `pushEvents` nor `inferenceRequest` (it does not implement the methods),
/// not from one that claims them.
#[tokio::test]
async fn a_refusal_with_an_undocumented_code_fails_refusal_code() {
    let cases = [
        (-32603, false, "fail"),
        (-32601, true, "fail"),
        (-32001, true, "pass"),
        (-32002, true, "pass"),
        (-32601, false, "pass"),
    ];
    for (code, claims, status) in cases {
        let report = report_path(&format!("refusal-code{code}-{claims}.json"));
        let mcpl = if claims {
            json!({ "version": "0.5", "pushEvents": true, "inferenceRequest": true })
        } else {
            json!({ "version": "0.5" })
        };
        let init = line(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18",
                        "capabilities": { "experimental": { "mcpl": mcpl } },
                        "clientInfo": { "name": "scripted", "version": "0" } } }));
        let nothing = line(
            &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                    "params": { "effectiveCapabilities": [] } }),
        );
        let head = format!("{init}{INITIALIZED}{nothing}");
        let (exit, doc) = raw_scripted_host(&report, head, |m| {
            Some(match m["method"].as_str().unwrap_or("") {
                "push/event" | "inference/request" => line(&json!({ "jsonrpc": "2.0",
                    "id": m["id"], "error": { "code": code, "message": "no" } })),
                _ => refusing_answer(m, -32002),
            })
        })
        .await;
        let c = check(&doc, "host.refusal-code");
        assert_eq!(c["status"], status, "{code} {claims}: {doc:#}");
        let d = c["detail"].as_str().unwrap_or_default();
        assert!(d.contains(&code.to_string()), "{d}");
        for method in ["push/event", "inference/request"] {
            assert!(d.contains(method), "{method}: {d}");
        }
        if status == "fail" {
            assert!(d.contains("§6.6"), "{d}");
            assert_eq!(exit, 1, "{doc:#}");
        }
        // The older checks keep their verdicts: another code warns there, as before.
        let older = if [-32001, -32002].contains(&code) {
            "pass"
        } else {
            "warn"
        };
        for id in ["host.push-follows-grant", "host.inference-follows-grant"] {
            assert_eq!(check(&doc, id)["status"], older, "{id} {code}: {doc:#}");
        }
    }
}

/// §6.2, §6.4 rule 1 (AUDIT-001 §2.5: "neither core library types `uses` as a closed enum";
/// `uses` was wrong in three servers): a feature set whose `uses` holds a value outside §6.2's
/// vocabulary is invalid, and the host disables it (`invalid_uses`); it does not guess what
/// was meant. The checker declares `check.typo` with `uses: ["pushEvents", "pushEvent"]`.
/// A host granting `pushEvents` that reads only the valid entry accepts a push under it; no
/// check sent one, so such a host passed. It now fails `host.invalid-uses-refused`; refusing
/// it (`-32001`, the set disabled) passes.
#[tokio::test]
async fn a_push_under_a_set_with_invalid_uses_is_refused() {
    for validates in [false, true] {
        let report = report_path(&format!("invalid-uses-{validates}.json"));
        let (_, doc) = raw_answering_host(&report, |m| {
            let set = m["params"]["featureSet"].as_str().unwrap_or("");
            Some(match m["method"].as_str().unwrap_or("") {
                "push/event" if set == "check.push" || (set == "check.typo" && !validates) => {
                    line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                                  "result": { "accepted": true } }))
                }
                _ => refusing_answer(m, -32023),
            })
        })
        .await;
        let c = check(&doc, "host.invalid-uses-refused");
        let d = c["detail"].as_str().unwrap_or_default();
        if validates {
            assert_eq!(c["status"], "pass", "{doc:#}");
            assert!(d.contains("-32001"), "{d}");
        } else {
            assert_eq!(c["status"], "fail", "{doc:#}");
            for said in ["check.typo", "pushEvent", "invalid_uses", "§6.4"] {
                assert!(d.contains(said), "{said}: {d}");
            }
        }
        assert_eq!(
            check(&doc, "host.push-follows-grant")["status"],
            "pass",
            "{doc:#}"
        );
    }
}

/// §6.6: "For unknown feature sets, hosts SHOULD reject with `-32003`". A host that discards
/// `check.typo`'s invalid declaration (§6.4 rule 1: its `uses` names `pushEvent`) and so
/// treats the set as not declared refuses the push under it `-32003`: a documented code for
/// that set, yet `host.refusal-code` failed it. It now passes there, and only there: the same
/// `-32003` refusing the push under `check.push`, a valid declaration, still fails.
#[tokio::test]
async fn an_unknown_set_refusal_passes_only_for_the_set_with_invalid_uses() {
    // Granted pushEvents: check.push is accepted, check.typo refused -32003.
    let report = report_path("refusal-code-typo-32003.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let set = m["params"]["featureSet"].as_str().unwrap_or("");
        Some(match (m["method"].as_str().unwrap_or(""), set) {
            ("push/event", "check.push") => line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                "result": { "accepted": true } })),
            ("push/event", "check.typo") => line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                "error": { "code": -32003, "message": "Unknown feature set",
                           "data": { "featureSet": "check.typo" } } })),
            _ => refusing_answer(m, -32023),
        })
    })
    .await;
    let c = check(&doc, "host.refusal-code");
    let d = c["detail"].as_str().unwrap_or_default();
    assert_eq!(c["status"], "pass", "{doc:#}");
    assert!(d.contains("check.typo") && d.contains("-32003"), "{d}");
    assert_eq!(
        check(&doc, "host.invalid-uses-refused")["status"],
        "pass",
        "{doc:#}"
    );

    // Granted nothing: the push under check.push (declared validly) refused -32003 fails.
    let report = report_path("refusal-code-push-32003.json");
    let mcpl = json!({ "version": "0.5", "pushEvents": true, "inferenceRequest": true });
    let init = line(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18",
                    "capabilities": { "experimental": { "mcpl": mcpl } },
                    "clientInfo": { "name": "scripted", "version": "0" } } }));
    let nothing = line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                "params": { "effectiveCapabilities": [] } }),
    );
    let head = format!("{init}{INITIALIZED}{nothing}");
    let (exit, doc) = raw_scripted_host(&report, head, |m| {
        Some(match m["method"].as_str().unwrap_or("") {
            "push/event" => line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                "error": { "code": -32003, "message": "Unknown feature set" } })),
            _ => refusing_answer(m, -32002),
        })
    })
    .await;
    let c = check(&doc, "host.refusal-code");
    let d = c["detail"].as_str().unwrap_or_default();
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(d.contains("-32003") && d.contains("check.push"), "{d}");
    assert_eq!(exit, 1, "{doc:#}");
}

/// JSON-RPC 2.0 §5: one Response per call. A host answering each `push/event` twice, first
/// refusing it and then accepting it, was judged by its first answer alone: the early push
/// passed `host.refuses-before-ready` and nothing said the second answer came (the peer
/// dropped it as a response to no request). It now fails `host.responses-once`, naming the
/// ids; a host answering each request once passes it.
#[tokio::test]
async fn a_request_answered_twice_fails_responses_once() {
    let report = report_path("answered-twice.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" {
            let again = json!({ "jsonrpc": "2.0", "id": m["id"], "result": { "accepted": true } });
            out.push_str(&line(&again));
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.responses-once");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("already answered") && d.contains("request id(s)"),
        "{d}"
    );

    let report = report_path("answered-once.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    assert_eq!(
        check(&doc, "host.responses-once")["status"],
        "pass",
        "{doc:#}"
    );
}

/// JSON-RPC 2.0 §5: a response answers a request of the receiver's. A host answering each
/// `ping` and then writing a response under an id the checker never sent, and a result
/// under id null, passed every check (the peer dropped them as responses to no request;
/// only a timeout's note would have named one). It now fails
/// `host.responses-answer-requests`, as `mcpl check` fails `rpc.responses-answer-requests`
/// for a server doing the same; a host answering each request once passes it.
#[tokio::test]
async fn a_response_under_an_id_never_sent_fails_responses_answer_requests() {
    let report = report_path("answered-never-sent.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "ping" {
            let stray = json!({ "jsonrpc": "2.0", "id": "never-sent", "result": {} });
            let null = json!({ "jsonrpc": "2.0", "id": null, "result": {} });
            out.push_str(&line(&stray));
            out.push_str(&line(&null));
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.responses-answer-requests");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains(r#""never-sent", which the checker never sent"#) && d.contains("id null"),
        "{d}"
    );
    // Neither is a second answer.
    assert_eq!(
        check(&doc, "host.responses-once")["status"],
        "pass",
        "{doc:#}"
    );

    let report = report_path("answered-sent-only.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    assert_eq!(
        check(&doc, "host.responses-answer-requests")["status"],
        "pass",
        "{doc:#}"
    );
}

/// A host granting nothing that answers every `push/event` and `inference/request` with a
/// result over the checker's 1 MiB message limit (an acceptance padded past it). The peer
/// discards such an answer unread and fails the request at once, delivered at its wire
/// position as a `-32603` error it made up: the report read it as the host's refusal,
/// blaming the host for a `-32603` it never sent (`host.refusal-code` failed "refused
/// -32603") and crediting it with refusals (`host.push-follows-grant` only warned, "refused
/// with error -32603"). Now a failure the checker's own peer made is said as what it is, the
/// host's answer over the limit and discarded, never as an error object of the host's.
#[tokio::test]
async fn an_answer_over_the_limit_is_not_read_as_the_hosts_error() {
    let report = report_path("oversized-answer.json");
    let init = initialize(json!(1));
    let nothing = line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                "params": { "effectiveCapabilities": [] } }),
    );
    let head = format!("{init}{INITIALIZED}{nothing}");
    let pad = "x".repeat(1024 * 1024 + 16);
    let (_, doc) = raw_scripted_host(&report, head, |m| {
        Some(match m["method"].as_str().unwrap_or("") {
            "push/event" | "inference/request" => line(&json!({ "jsonrpc": "2.0",
                "id": m["id"], "result": { "accepted": true, "pad": pad } })),
            _ => refusing_answer(m, -32002),
        })
    })
    .await;
    for id in [
        "host.refusal-code",
        "host.push-follows-grant",
        "host.rejects-with-error",
        "host.inference-follows-grant",
        "host.refuses-before-ready",
    ] {
        let c = check(&doc, id);
        let d = c["detail"].as_str().unwrap_or_default();
        assert!(
            !d.contains("-32603"),
            "{id} blames the host for -32603: {doc:#}"
        );
    }
    let push = check(&doc, "host.push-follows-grant");
    assert_eq!(push["status"], "fail", "{doc:#}");
    let d = push["detail"].as_str().unwrap_or_default();
    assert!(d.contains("1048576") && d.contains("discarded"), "{d}");

    // The host's own -32603, even worded as the peer words its failures, stays the host's.
    let report = report_path("own-32603.json");
    let init = initialize(json!(1));
    let nothing = line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                "params": { "effectiveCapabilities": [] } }),
    );
    let head = format!("{init}{INITIALIZED}{nothing}");
    let (_, doc) = raw_scripted_host(&report, head, |m| {
        Some(match m["method"].as_str().unwrap_or("") {
            "push/event" | "inference/request" => line(&json!({ "jsonrpc": "2.0",
                "id": m["id"], "error": { "code": -32603, "message":
                "invalid response: the response of 1048661 bytes exceeds the limit" } })),
            _ => refusing_answer(m, -32002),
        })
    })
    .await;
    let c = check(&doc, "host.refusal-code");
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(
        c["detail"].as_str().unwrap_or_default().contains("-32603"),
        "{doc:#}"
    );
}

/// A host that first sends a notification over the checker's 1 MiB message limit
/// (discarded unread: no answer of the host's), then answers every `push/event` and
/// `inference/request` with its own `-32603` worded exactly as the checker's peer words the
/// failure it makes for an answer of that size. The checker told its peer's failures from
/// the host's by those words and the byte count they name, so the host's error to the push
/// under an undeclared set was read as an answer the checker could not read
/// (`host.rejects-with-error` failed, blaming a size the host never sent). Now the peer marks the failures it makes itself (`Peer::failed_here`),
/// and the host's error, whatever its words, is judged as the host's.
#[tokio::test]
async fn the_hosts_error_in_the_peers_own_words_is_the_hosts() {
    let report = report_path("own-words.json");
    let init = initialize(json!(1));
    let nothing = line(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                "params": { "effectiveCapabilities": [] } }),
    );
    let oversized = json!({ "jsonrpc": "2.0", "method": "notifications/message",
                            "params": { "pad": "x".repeat(1024 * 1024 + 16) } })
    .to_string();
    let bytes = oversized.len();
    let head = format!("{init}{INITIALIZED}{nothing}{oversized}\n");
    let words = format!(
        "invalid response: the response of {bytes} bytes exceeds the 1048576-byte limit \
         (PeerConfig::max_message_size) and was discarded unread"
    );
    let (_, doc) = raw_scripted_host(&report, head, |m| {
        Some(match m["method"].as_str().unwrap_or("") {
            "push/event" | "inference/request" => line(&json!({ "jsonrpc": "2.0",
                "id": m["id"], "error": { "code": -32603, "message": words } })),
            _ => refusing_answer(m, -32002),
        })
    })
    .await;
    // The push under an undeclared set was the one read as unread: said as the host's.
    let c = check(&doc, "host.rejects-with-error");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("error -32603"), "{doc:#}");
    for c in doc["checks"].as_array().unwrap() {
        let d = c["detail"].as_str().unwrap_or_default();
        assert!(!d.contains("could not read"), "{doc:#}");
    }
    let c = check(&doc, "host.refusal-code");
    assert_eq!(c["status"], "fail", "{doc:#}");
}

/// A host that answers the early push (sent before its policy receipt) with a result of
/// 300,000 zeros: 600 KB, within the 1 MiB message limit, but over the checker's parsed-cost
/// budget (262,144 units). Its peer refuses such an answer unbuilt, and the report said
/// "an invalid response (… not valid JSON-RPC 2.0 …)", as if the host had broken JSON-RPC.
/// Now it says the answer was over that budget, naming it, and the verdict stays a
/// failure: an answer the checker cannot read shows no refusal.
#[tokio::test]
async fn a_too_costly_answer_to_the_early_push_is_said_as_over_budget() {
    let report = report_path("costly-early.json");
    let zeros = vec![0u8; 300_000];
    let (_, doc) = raw_answering_host(&report, |m| {
        Some(if m["params"]["eventId"] == "early" {
            line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": { "pad": zeros } }))
        } else {
            refusing_answer(m, -32023)
        })
    })
    .await;
    let c = check(&doc, "host.refuses-before-ready");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(!d.contains("not valid JSON-RPC"), "{d}");
    assert!(
        d.contains("300") && d.contains("units parsed") && d.contains("budget of 262144"),
        "{d}"
    );
}

/// §4: all messages use JSON-RPC 2.0. A host that writes a log line on the protocol stream,
/// a message that says `"jsonrpc": "1.0"`, and a frame that does not parse had each one
/// skipped (the junk) or answered (`-32600`, `-32700`) by the checker's peer and counted
/// only in a "discarded meanwhile" note where a wait timed out: with every probe answered,
/// no check failed. `host.frames-valid` now fails, counting them and naming the first.
#[tokio::test]
async fn frames_that_are_not_json_rpc_fail_frames_valid() {
    let report = report_path("frames-valid.json");
    let head = format!(
        "{}{INITIALIZED}{}{}{}{}",
        initialize(json!(1)),
        "starting up: log output on stdout\n",
        line(
            &json!({ "jsonrpc": "1.0", "method": "notifications/message",
                      "params": { "level": "info", "data": "x" } })
        ),
        "{\"jsonrpc\":\"2.0\",\"method\":\n",
        policy_request()
    );
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.frames-valid");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.starts_with("3 frame(s)"), "{d}");
    assert!(d.contains("starting up"), "the first is quoted: {d}");

    // A host writing only JSON-RPC 2.0 passes, its frames counted.
    let report = report_path("frames-valid-ok.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.frames-valid");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// MCP (which §4 carries MCPL over): a request id MUST NOT have been used before by the
/// requestor within the session. A host that sends its policy Request again under id 2,
/// the id of its first one, already answered, passed everything; `mcpl check` warns of the
/// same in a server (`rpc.request-ids-unique`). `host.request-ids-unique` now warns, naming
/// the id; a host whose requests each have their own id passes.
#[tokio::test]
async fn a_request_id_used_again_warns() {
    let report = report_path("ids-again.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" {
            out.push_str(&policy_request());
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.request-ids-unique");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("the first 2"), "{d}");

    let report = report_path("ids-own.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.request-ids-unique");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// MCP (which §4 carries MCPL over): after a successful `initialize` the client MUST send
/// `notifications/initialized`. A host that went straight from `initialize` to its policy
/// Request, never sending it, passed everything. `host.initialized-sent` now fails; a host
/// that sends it passes.
#[tokio::test]
async fn a_host_that_never_sends_initialized_fails() {
    let report = report_path("no-initialized.json");
    let head = format!("{}{}", initialize(json!(1)), policy_request());
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.initialized-sent");
    assert_eq!(c["status"], "fail", "{doc:#}");

    let report = report_path("initialized.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.initialized-sent");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// §5.3: a host MUST reject inbound privileged methods until the initial policy exchange
/// completes. Only the early `push/event` was probed, so a host refusing it yet accepting a
/// `channels/register` sent before its receipt passed. `host.register-refused-before-ready`
/// now fails it, while the push's own check still passes.
#[tokio::test]
async fn a_register_accepted_before_the_receipt_fails() {
    let report = report_path("early-register.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let early =
            m["method"] == "channels/register" && m["params"]["channels"][0]["id"] == "check:early";
        Some(if early {
            line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": {
                "results": [{ "id": "check:early", "accepted": true }] } }))
        } else {
            refusing_answer(m, -32023)
        })
    })
    .await;
    let c = check(&doc, "host.register-refused-before-ready");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("before the receipt") && d.contains("§5.3"),
        "{d}"
    );
    assert_eq!(
        check(&doc, "host.refuses-before-ready")["status"],
        "pass",
        "{doc:#}"
    );
}

/// §5.3, §11.1: `inference/request` needs `inferenceRequest`, so it is privileged, and a
/// host MUST reject it until the initial policy exchange completes. No probe sent one
/// before the receipt, so a host that ran a server's inference before any grant was in
/// force passed. `host.inference-refused-before-ready` now fails it; the host refusing it
/// (the checker's other hosts, refusing everything) passes.
#[tokio::test]
async fn an_inference_run_before_the_receipt_fails() {
    let report = report_path("early-inference.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        Some(if m["method"] == "inference/request" {
            line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": {
                "content": "OK", "model": "m", "finishReason": "end_turn" } }))
        } else {
            refusing_answer(m, -32023)
        })
    })
    .await;
    let c = check(&doc, "host.inference-refused-before-ready");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("before the receipt") && d.contains("§5.3"),
        "{d}"
    );
    for id in [
        "host.refuses-before-ready",
        "host.register-refused-before-ready",
    ] {
        assert_eq!(check(&doc, id)["status"], "pass", "{id}: {doc:#}");
    }

    let report = report_path("early-inference-refused.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32002))).await;
    let c = check(&doc, "host.inference-refused-before-ready");
    assert_eq!(c["status"], "pass", "{doc:#}");

    // An error that is no refusal (the inference ran and its backend failed) is not one.
    let report = report_path("early-inference-failed.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        Some(if m["method"] == "inference/request" {
            line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                          "error": { "code": -32603, "message": "backend unreachable" } }))
        } else {
            refusing_answer(m, -32002)
        })
    })
    .await;
    let c = check(&doc, "host.inference-refused-before-ready");
    assert_eq!(c["status"], "warn", "{doc:#}");
    assert!(
        c["detail"].as_str().unwrap_or_default().contains("-32603"),
        "{c}"
    );
}

/// §11.2, §11.4: `stream` defaults to `false`, and §11.4 describes chunks for a request with
/// `stream: true`. The checker's `inference/request` asks for no stream, so an
/// `inference/chunk` the host sends is one nobody asked for; no check judged it, and a host
/// streaming every answer passed. `host.chunks-only-when-streamed` now warns on it (§11.2
/// and §11.4 are descriptive, no MUST NOT backs a failure); the host answering with the
/// result alone passes.
#[tokio::test]
async fn a_chunk_for_a_request_that_asked_for_no_stream_warns() {
    let answer = |chunk: bool| {
        move |m: &Value| {
            Some(if m["method"] == "inference/request" {
                let c = json!({ "jsonrpc": "2.0", "method": "inference/chunk",
                                "params": { "requestId": m["id"], "index": 0, "delta": "OK" } });
                let r = json!({ "jsonrpc": "2.0", "id": m["id"], "result": {
                    "content": "OK", "model": "m", "finishReason": "end_turn" } });
                if chunk {
                    format!("{}{}", line(&c), line(&r))
                } else {
                    line(&r)
                }
            } else {
                refusing_answer(m, -32023)
            })
        }
    };
    let report = report_path("unasked-chunk.json");
    let (_, doc) = raw_answering_host(&report, answer(true)).await;
    let c = check(&doc, "host.chunks-only-when-streamed");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("inference/chunk") && d.contains("§11.4"), "{d}");

    let report = report_path("no-unasked-chunk.json");
    let (_, doc) = raw_answering_host(&report, answer(false)).await;
    let c = check(&doc, "host.chunks-only-when-streamed");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// MCP's `ping`: a host answering it `"pong"` (a result that is no object) or with an error
/// was never judged (the checker's pings only fenced other probes). `host.ping-answered` now
/// warns for either, as `mcpl check`'s `rpc.ping-answered` does for a server.
#[tokio::test]
async fn a_ping_answered_with_no_empty_result_warns() {
    let report = report_path("ping-pong.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        Some(if m["method"] == "ping" {
            line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": "pong" }))
        } else {
            refusing_answer(m, -32023)
        })
    })
    .await;
    let c = check(&doc, "host.ping-answered");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("pong") && d.contains("no object"), "{d}");
    let report = report_path("ping-error.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer_ping_too(m))).await;
    let c = check(&doc, "host.ping-answered");
    assert_eq!(c["status"], "warn", "{doc:#}");
}

/// As `refusing_answer`, but a `ping` is refused too.
fn refusing_answer_ping_too(m: &Value) -> String {
    line(&json!({ "jsonrpc": "2.0", "id": m["id"],
                  "error": { "code": -32601, "message": "no ping here" } }))
}

/// §5.2: the host advertises its support mirroring the server's shape (§5.1: `channels` an
/// object of leaves). A host flattening `channels` to `true` (AUDIT-001 §2.4, §4.2 item 2:
/// both libraries did, so no server could see `channels.streaming`) or advertising a member
/// outside the vocabulary was judged by nothing: `mcpl check` warns for such a server
/// (`initialize.advertisement-shape`), check-host said nothing of the host. It now warns
/// (`host.advertisement-shape`), in `mcpl validate`'s words; the mirroring host passes.
/// `channels: true` is no finding of the host's: §5.1 makes `true` at any node shorthand
/// for every leaf beneath it, and §5.2's host example uses the shorthand, so a host
/// advertising it alone passes (it warned, a false finding on a conforming host).
#[tokio::test]
async fn a_flattened_or_odd_advertisement_warns() {
    let report = report_path("flat-channels.json");
    let params = json!({ "protocolVersion": "2025-06-18",
        "capabilities": { "experimental": { "mcpl": {
            "version": "0.5", "pushEvents": true, "channels": true, "pushEvent": true } } },
        "clientInfo": { "name": "flat", "version": "0" } });
    let init =
        line(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params }));
    let head = format!("{init}{INITIALIZED}{}", policy_request());
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.advertisement-shape");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("pushEvent") && !d.contains("channels"), "{d}");

    let report = report_path("channels-true.json");
    let params = json!({ "protocolVersion": "2025-06-18",
        "capabilities": { "experimental": { "mcpl": {
            "version": "0.5", "pushEvents": true, "channels": true } } },
        "clientInfo": { "name": "shorthand", "version": "0" } });
    let init =
        line(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params }));
    let head = format!("{init}{INITIALIZED}{}", policy_request());
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.advertisement-shape");
    assert_eq!(c["status"], "pass", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("channels.streaming"), "every channels leaf: {d}");

    let report = report_path("mirroring.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32023))).await;
    let c = check(&doc, "host.advertisement-shape");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// §11.3, read as the shape rules read every optional member (`protocol::given`): a
/// `model`, `finishReason` or `usage` written `null` is absent, as a host whose serializer
/// writes `null` for "not set" means it. The result rule (`inference::result_defects`, which
/// `mcpl check-host` reports and the server library reports as `inference_result_malformed`)
/// failed such a host: "model is not a string", "finishReason is a JSON null", "usage is
/// not an object". A `content` written `null` is still missing (it is required).
#[tokio::test]
async fn s11_3_optional_result_members_written_null_are_absent() {
    for (content, status) in [(json!("OK"), "pass"), (Value::Null, "fail")] {
        let report = report_path(&format!("inference-nulls-{status}.json"));
        let mcpl = json!({ "version": "0.5", "inferenceRequest": true });
        let init = line(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18",
                        "capabilities": { "experimental": { "mcpl": mcpl } },
                        "clientInfo": { "name": "scripted", "version": "0" } } }));
        let grant = line(
            &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                                  "params": { "effectiveCapabilities": ["inferenceRequest"] } }),
        );
        let head = format!("{init}{INITIALIZED}{grant}");
        let result = json!({ "content": content, "model": null, "finishReason": null,
                             "usage": { "inputTokens": null, "outputTokens": 1 } });
        let (_, doc) = raw_scripted_host(&report, head, |m| {
            Some(match m["method"].as_str().unwrap_or("") {
                "inference/request" => {
                    line(&json!({ "jsonrpc": "2.0", "id": m["id"], "result": result }))
                }
                _ => refusing_answer(m, -32002),
            })
        })
        .await;
        let c = check(&doc, "host.inference-result-shape");
        assert_eq!(c["status"], status, "{doc:#}");
        let d = c["detail"].as_str().unwrap_or_default();
        if status == "fail" {
            assert!(d.contains("content"), "{d}");
        }
        for said in ["model", "finishReason", "usage"] {
            assert!(!d.contains(said), "{said}: {d}");
        }
    }
}

/// MCP's base protocol: a request id is not reused while its request is in flight. A host
/// sending two `ping`s under one id in one batch, the first unanswered when the second is
/// read, fails `host.in-flight-ids-unique` (the checker's peer refuses the second `-32600`,
/// the library's rule, which no check reported, but `host.frames-valid` counted it as a
/// frame that is no JSON-RPC 2.0, which it is); before, only `host.request-ids-unique`
/// warned. A host whose requests each have their own id passes it.
#[tokio::test]
async fn a_host_reusing_an_id_in_flight_fails() {
    let twin = json!([
        { "jsonrpc": "2.0", "id": "dup", "method": "ping" },
        { "jsonrpc": "2.0", "id": "dup", "method": "ping" }
    ]);
    let head = format!(
        "{}{INITIALIZED}{}{}",
        initialize(json!(1)),
        policy_request(),
        line(&twin)
    );
    let report = report_path("in-flight-reuse.json");
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32002))).await;
    let c = check(&doc, "host.in-flight-ids-unique");
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.starts_with("1 of ") && d.contains(r#""dup""#), "{d}");
    // The frame is JSON-RPC 2.0 all the same: one defect, one finding.
    let c = check(&doc, "host.frames-valid");
    assert_eq!(c["status"], "pass", "{doc:#}");

    let report = report_path("no-in-flight-reuse.json");
    let (_, doc) = raw_answering_host(&report, |m| Some(refusing_answer(m, -32002))).await;
    let c = check(&doc, "host.in-flight-ids-unique");
    assert_eq!(c["status"], "pass", "{doc:#}");
}

/// A host writing a notification over the checker's 1 MiB message limit: the frame is
/// discarded unread, no proof either way of JSON-RPC (`host.frames-valid`'s reading), yet
/// the report said nothing of it (hunt: "each of N frame(s) was a JSON-RPC 2.0 message",
/// N counting only the frames read). The check's detail now says how many were discarded
/// unread and why; its verdict is unchanged.
#[tokio::test]
async fn a_frame_over_the_limit_is_said_where_frames_are_judged() {
    let big = json!({ "jsonrpc": "2.0", "method": "notifications/message",
                      "params": { "level": "info", "data": "a".repeat(2 * 1024 * 1024) } });
    let head = format!(
        "{}{INITIALIZED}{}{}",
        initialize(json!(1)),
        policy_request(),
        line(&big)
    );
    let report = report_path("oversized-notification.json");
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32002))).await;
    let c = check(&doc, "host.frames-valid");
    assert_eq!(c["status"], "pass", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("1 frame(s) over the checker's 1048576-byte message limit")
            && d.contains("discarded unread"),
        "{d}"
    );
}

/// A host granting `pushEvents` (which passes `host.grant-within-advertisement`), then, in
/// a later policy Request, `channels` too: a bare parent, which grants none of its leaves
/// (a warning). The recorder kept the first verdict unless a fail followed, so the report
/// said pass; a verdict is the worst of what was seen, and it now warns, naming the later
/// Request.
#[tokio::test]
async fn a_later_policy_request_that_warns_is_not_dropped_after_a_pass() {
    let report = report_path("later-policy-warns.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" && m["params"]["eventId"] == "u1" {
            out.push_str(&line(&json!({ "jsonrpc": "2.0", "id": "p2",
                "method": "featureSets/update",
                "params": { "effectiveCapabilities": ["pushEvents", "channels"] } })));
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.grant-within-advertisement");
    assert_eq!(c["status"], "warn", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.starts_with("a later policy Request: ") && d.contains("channels"),
        "{d}"
    );
}

/// A host reusing an id in flight (the peer refuses the second request, told as a
/// diagnostic), then writing forty lines that are not JSON before its `initialize`: the
/// diagnostics stream holds 16, so the refusal was dropped before the checker read it, and
/// `host.in-flight-ids-unique` passed on a view that had lost it. A check judged on an
/// incomplete view now warns, saying how many diagnostics were lost.
#[tokio::test]
async fn a_refusal_lost_in_a_diagnostics_flood_is_not_a_silent_pass() {
    let twin = json!([
        { "jsonrpc": "2.0", "id": "dup", "method": "ping" },
        { "jsonrpc": "2.0", "id": "dup", "method": "ping" }
    ]);
    let junk = "log line, not JSON\n".repeat(40);
    let head = format!(
        "{}{junk}{}{INITIALIZED}{}",
        line(&twin),
        initialize(json!(1)),
        policy_request()
    );
    let report = report_path("in-flight-flood.json");
    let (_, doc) = raw_scripted_host(&report, head, |m| Some(refusing_answer(m, -32002))).await;
    let c = check(&doc, "host.in-flight-ids-unique");
    assert_ne!(c["status"], "pass", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("diagnostic(s) of the connection were lost"),
        "{d}"
    );
}

/// §14.5: with `channels.register` granted, a host refusing `channels/register` whole
/// (an error) failed `host.register-itemized`, where `host.changed-itemized` warns for the
/// same answer to `channels/changed`. One reading: safe (nothing widened, an error object,
/// §6.6), but no itemized answer: a warning under both.
#[tokio::test]
async fn a_register_refused_whole_under_its_grant_warns_as_changed_does() {
    let head = format!(
        "{}{INITIALIZED}{}",
        initialize(json!(1)),
        line(
            &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
            "params": { "effectiveCapabilities": ["pushEvents", "channels.register"] } })
        )
    );
    let report = report_path("register-refused-whole.json");
    let (_, doc) = raw_scripted_host(&report, head, |m| {
        Some(match m["method"].as_str().unwrap_or("") {
            "channels/register" | "channels/changed" => line(&json!({ "jsonrpc": "2.0",
                "id": m["id"], "error": { "code": -32603, "message": "not now" } })),
            _ => refusing_answer(m, -32023),
        })
    })
    .await;
    for id in ["host.register-itemized", "host.changed-itemized"] {
        let c = check(&doc, id);
        assert_eq!(c["status"], "warn", "{id}: {doc:#}");
        let d = c["detail"].as_str().unwrap_or_default();
        assert!(d.contains("refused whole with error -32603"), "{d}");
    }
}

/// A host that answers nothing (its `initialize` and policy aside): each paired probe's
/// request and the ping behind it went unanswered, and `host.requests-independent` failed
/// ("a ping … got no answer") beside the probe's own silence, one defect counted twice, as
/// did `host.survives-junk-line` beside `host.ping-answered`. Both now say what happened
/// (the host answered neither) and skip; the silences still fail where they are the finding.
#[tokio::test]
async fn a_host_answering_nothing_is_one_finding_per_silence() {
    let report = report_path("answers-nothing.json");
    let (code, doc) = raw_answering_host(&report, |_| None).await;
    let c = check(&doc, "host.requests-independent");
    assert_eq!(c["status"], "skip", "{doc:#}");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains("answered neither"), "{d}");
    let c = check(&doc, "host.survives-junk-line");
    assert_eq!(c["status"], "skip", "{doc:#}");
    assert_eq!(
        check(&doc, "host.ping-answered")["status"],
        "fail",
        "{doc:#}"
    );
    assert_eq!(code, 1, "{doc:#}");
}

/// §14.3: `channels/list` lists the channels known for this connection. A host that
/// accepted `check:a` in `channels/register` and answers `channels/list` with `[]` (a
/// stub) was never seen: the checker listed only before registering. It now warns under
/// `host.channels-list-complete`; a host listing it passes. The checker's own answer to the
/// host's `channels/list` (the same stub, `[]`) now lists what the host accepted.
#[tokio::test]
async fn a_channels_list_stub_after_a_registration_warns() {
    for stub in [true, false] {
        let head = format!(
            "{}{INITIALIZED}{}",
            initialize(json!(1)),
            line(
                &json!({ "jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                "params": { "effectiveCapabilities": ["pushEvents", "channels.register"] } })
            )
        );
        let report = report_path(&format!("channels-list-stub-{stub}.json"));
        let (child, mut stdin, stdout) = spawn_raw(&report);
        stdin.write_all(head.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut registered = false;
        let mut listed_by_checker = None;
        while let Ok(Some(l)) = lines.next_line().await {
            let Ok(m) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            if m["id"] == "host-list" {
                listed_by_checker = Some(m["result"].clone());
                continue;
            }
            if m.get("method").is_none() || m.get("id").is_none() {
                continue;
            }
            let id = &m["id"];
            let mut out = match m["method"].as_str().unwrap_or("") {
                // The early one (before the receipt) and the one repeating an id: refused.
                "channels/register"
                    if registered || m["params"]["channels"][0]["id"] != "check:a" =>
                {
                    refusing_answer(&m, -32023)
                }
                "channels/register" => {
                    registered = true;
                    let items: Vec<Value> = m["params"]["channels"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| json!({ "id": d["id"], "accepted": true }))
                        .collect();
                    line(&json!({ "jsonrpc": "2.0", "id": id, "result": { "results": items } }))
                }
                "channels/list" => {
                    let channels = if registered && !stub {
                        json!([{ "id": "check:a", "type": "check", "direction": "bidirectional" }])
                    } else {
                        json!([])
                    };
                    line(&json!({ "jsonrpc": "2.0", "id": id, "result": { "channels": channels } }))
                }
                _ => refusing_answer(&m, -32023),
            };
            if m["method"] == "channels/changed" {
                out.push_str(&line(
                    &json!({ "jsonrpc": "2.0", "id": "host-list", "method": "channels/list" }),
                ));
            }
            if stdin.write_all(out.as_bytes()).await.is_err() {
                break;
            }
        }
        drop(stdin);
        let (_, doc) = report_of(child, &report).await;
        let c = check(&doc, "host.channels-list-complete");
        if stub {
            assert_eq!(c["status"], "warn", "{doc:#}");
            let d = c["detail"].as_str().unwrap_or_default();
            assert!(d.contains("left out check:a") && d.contains("§14.3"), "{d}");
        } else {
            assert_eq!(c["status"], "pass", "{doc:#}");
        }
        let listed = listed_by_checker.expect("the checker answered the host's channels/list");
        let ids: Vec<&str> = listed["channels"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["id"].as_str())
            .collect();
        assert!(ids.contains(&"check:a"), "{listed}");
    }
}

/// A host still writing a line over the checker's 1 MiB limit when a wait ends (its end
/// never comes): the reader discards it as it streams, holding nothing, so the report said
/// only "no response within the timeout" and nothing of the line. Where the wait ends and
/// where frames are judged, it is now said, with the bytes discarded so far.
#[tokio::test]
async fn a_line_over_the_limit_still_coming_is_said() {
    let report = report_path("oversized-still-coming.json");
    let (_, doc) = raw_answering_host(&report, |m| {
        if m["method"] == "push/event" && m["params"]["eventId"] == "p1" {
            let mut big = String::from(
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"",
            );
            big.push_str(&"a".repeat(1536 * 1024));
            return Some(big);
        }
        Some(refusing_answer(m, -32023))
    })
    .await;
    let said = "is sending a line over the checker's 1048576-byte message limit";
    let c = check(&doc, "host.push-follows-grant");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains(said), "{d}");
    let c = check(&doc, "host.frames-valid");
    let d = c["detail"].as_str().unwrap_or_default();
    assert!(d.contains(said), "{d}");
}

/// §6.7: a reduction needs no hold (what it revokes is refused at once either way), yet
/// each later receipt was held behind a ping round trip out of one shared budget: a host
/// that sent three reductions and left the ping behind the first unanswered used it all up,
/// so its later expansion was answered at once, never held, and a hook under the leaf it
/// newly granted, written right behind it, passed `host.hooks-after-ready`. Only expansions
/// are held now, each with its own budget: the hook fails.
#[tokio::test]
async fn reductions_leave_a_later_expansion_its_hold() {
    let report = report_path("reductions-then-expansion.json");
    let policy = |id: &str, grant: &[&str]| {
        line(
            &json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update",
            "params": { "effectiveCapabilities": grant } }),
        )
    };
    let reductions = [policy("r1", &[]), policy("r2", &[]), policy("r3", &[])].concat();
    let widen = policy(
        "w1",
        &[
            "pushEvents",
            "contextHooks.beforeInference.inject.beforeUser",
        ],
    );
    let hook = line(&json!({ "jsonrpc": "2.0", "id": "h1",
        "method": "context/beforeInference",
        "params": { "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                    "userMessage": null } }));
    // Pings go unanswered from the reductions until the expansion: the hold behind the
    // first reduction waits out its whole budget, and the expansion comes after it.
    let quiet = std::cell::Cell::new(false);
    let widened = std::cell::Cell::new(false);
    // Requests answered since the reductions: the expansion comes with the second, after
    // the hold behind the first reduction ended.
    let since = std::cell::Cell::new(0_u32);
    let (_, doc) = raw_answering_host(&report, |m| {
        if m["method"] == "ping" && quiet.get() {
            return None;
        }
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" && m["params"]["eventId"] == "u1" {
            out.push_str(&reductions);
            quiet.set(true);
        } else if quiet.get() && !widened.get() && m["method"] != "featureSets/update" {
            since.set(since.get() + 1);
            if since.get() < 2 {
                return Some(out);
            }
            widened.set(true);
            quiet.set(false);
            out.push_str(&widen);
            out.push_str(&hook);
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.hooks-after-ready");
    let d = c["detail"].as_str().unwrap_or_default();
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(d.contains("§6.7") && d.contains("receipt"), "{d}");
}

/// §6.7: an expansion read while another's receipt was held was answered at once and
/// never held, so once the first hold's ping was answered a hook under the leaf the second
/// newly granted passed `host.hooks-after-ready`, though the host could not have read the
/// second receipt yet. Each expansion is held now, until its own ping is answered: a host
/// writing two expansions together, then the hook right behind the answer to the ping
/// ahead of the first receipt, fails.
#[tokio::test]
async fn an_expansion_read_during_a_hold_is_held_too() {
    let report = report_path("expansion-during-hold.json");
    let policy = |id: &str, grant: &[&str]| {
        line(
            &json!({ "jsonrpc": "2.0", "id": id, "method": "featureSets/update",
            "params": { "effectiveCapabilities": grant } }),
        )
    };
    let both = [
        policy("e1", &["pushEvents", "inferenceLifecycle"]),
        policy(
            "e2",
            &[
                "pushEvents",
                "inferenceLifecycle",
                "contextHooks.beforeInference.inject.beforeUser",
            ],
        ),
    ]
    .concat();
    let hook = line(&json!({ "jsonrpc": "2.0", "id": "h1",
        "method": "context/beforeInference",
        "params": { "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                    "userMessage": null } }));
    let armed = std::cell::Cell::new(false);
    let pings = std::cell::Cell::new(0_u32);
    let (_, doc) = raw_answering_host(&report, |m| {
        let mut out = refusing_answer(m, -32023);
        if m["method"] == "push/event" && m["params"]["eventId"] == "u1" {
            out.push_str(&both);
            armed.set(true);
        } else if armed.get() && m["method"] == "ping" {
            // The first is the ping paired with the next probe, sent before the checker
            // read the expansions; the second is the one written ahead of the first
            // expansion's receipt.
            pings.set(pings.get() + 1);
            if pings.get() == 2 {
                armed.set(false);
                out.push_str(&hook);
            }
        }
        Some(out)
    })
    .await;
    let c = check(&doc, "host.hooks-after-ready");
    let d = c["detail"].as_str().unwrap_or_default();
    assert_eq!(c["status"], "fail", "{doc:#}");
    assert!(d.contains("§6.7") && d.contains("receipt"), "{d}");
}

/// §6.7: an expansion takes effect only once the host has read its receipt ("the host
/// sends the Request, waits for the receipt, and only then begins fan-out on newly granted
/// hooks"). The initial policy's receipt is held behind a ping round trip so that fan-out
/// pipelined behind it is judged as before it; a later policy Request was answered and
/// applied at once, so a hook under a leaf it newly granted, written right behind it
/// without awaiting the receipt, passed. It now fails `host.hooks-after-ready`; the same
/// hook sent once the receipt is out passes.
#[tokio::test]
async fn a_hook_pipelined_behind_a_later_expansion_is_before_its_receipt() {
    for pipelined in [true, false] {
        let report = report_path(&format!("later-expansion-{pipelined}.json"));
        let widen = line(
            &json!({ "jsonrpc": "2.0", "id": "p2", "method": "featureSets/update",
            "params": { "effectiveCapabilities":
                ["pushEvents", "contextHooks.beforeInference.inject.beforeUser"] } }),
        );
        let hook = line(&json!({ "jsonrpc": "2.0", "id": "h1",
            "method": "context/beforeInference",
            "params": { "inferenceId": "i1", "conversationId": "c1", "turnIndex": 0,
                        "userMessage": null } }));
        let (_, doc) = raw_answering_host(&report, |m| {
            let mut out = refusing_answer(m, -32023);
            if m["method"] == "push/event" && m["params"]["eventId"] == "u1" {
                out.push_str(&widen);
                if pipelined {
                    out.push_str(&hook);
                }
            }
            if !pipelined && m["method"] == "scope/elevate" {
                out.push_str(&hook);
            }
            Some(out)
        })
        .await;
        let c = check(&doc, "host.hooks-after-ready");
        let d = c["detail"].as_str().unwrap_or_default();
        if pipelined {
            assert_eq!(c["status"], "fail", "{doc:#}");
            assert!(d.contains("§6.7") && d.contains("receipt"), "{d}");
        } else {
            assert_eq!(c["status"], "pass", "{doc:#}");
        }
    }
}

/// A host whose policy Request has the id `101.0` (a Python host with float ids): JSON-RPC
/// 2.0 §4 says an id SHOULD NOT have a fraction, a SHOULD NOT, so it is a valid Request.
/// The checker refused it `-32600` under id null, failed `host.policy-is-request` and
/// `host.frames-valid`, and skipped the rest. It is now the policy Request, answered under
/// the same value (§5), the run judges as ever, and `host.frames-valid` warns naming it.
#[tokio::test]
async fn a_policy_request_with_a_fractional_id_is_answered_under_it_with_a_warning() {
    let report = report_path("fractional-policy.json");
    let (child, mut stdin, stdout) = spawn_raw(&report);
    let policy = line(
        &json!({ "jsonrpc": "2.0", "id": 101.0, "method": "featureSets/update",
                  "params": { "effectiveCapabilities": ["pushEvents"] } }),
    );
    let head = format!("{}{INITIALIZED}{policy}", initialize(json!(1)));
    stdin.write_all(head.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut policy_answer = None;
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if m.get("method").is_none() {
            if m["id"] == json!(101.0) {
                policy_answer = Some(l.clone());
            }
            continue;
        }
        if m.get("id").is_none() {
            continue;
        }
        if stdin
            .write_all(refusing_answer(&m, -32023).as_bytes())
            .await
            .is_err()
        {
            break;
        }
    }
    drop(stdin);
    let (_, doc) = report_of(child, &report).await;
    let answer = policy_answer.unwrap_or_else(|| panic!("no answer under 101.0: {doc:#}"));
    assert!(answer.contains(r#""id":101.0"#), "{answer}");
    assert!(answer.contains("\"result\""), "{answer}");
    assert_eq!(
        check(&doc, "host.policy-is-request")["status"],
        "pass",
        "{doc:#}"
    );
    let frames = check(&doc, "host.frames-valid");
    assert_eq!(frames["status"], "warn", "{doc:#}");
    let d = frames["detail"].as_str().unwrap_or_default();
    assert!(
        d.contains("id 101.0 on featureSets/update") && d.contains("§4"),
        "{d}"
    );
    let skipped = doc["checks"]
        .as_array()
        .map_or(0, |cs| cs.iter().filter(|c| c["status"] == "skip").count());
    assert!(skipped < 25, "the run judged as ever: {doc:#}");
}
