//! `mcpl inspect --repl` whose stdout nobody reads: the REPL wrote each line with a blocking
//! write inside a task of the runtime, so a full pipe held the runtime's thread and the
//! connection stopped being read (a server's `ping` went unanswered). Now stdout has a
//! writer thread of its own behind a bounded queue; events past it are dropped and told
//! (`{"resync": {"missed": N}}`). Every wait is bounded ([`WAIT`]), never a sleep.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

mod inspect_support;
use inspect_support::{BIN, WAIT};

/// Pushes the server floods the REPL with, each with a text of [`TEXT_BYTES`]: about 2.5 MB
/// of event lines, far past a pipe's 64 KiB and the REPL's queue of 256 lines.
const PUSHES: u64 = 2000;
const TEXT_BYTES: usize = 1024;

/// A manifest with one feature set that may push.
fn manifest() -> Value {
    json!({ "version": "0.5", "pushEvents": true,
        "featureSets": { "h.push": { "description": "p", "uses": ["pushEvents"] } } })
}

/// What the server saw of the host's answers.
enum Seen {
    /// The host's answer to push `id`: whether it admitted it (a result).
    Push(bool),
    /// The host answered the server's `ping`.
    Pong,
}

/// A server over TCP: answers the handshake; after answering the first policy, writes
/// [`PUSHES`] `push/event` requests from a thread of its own and then a `ping`, while this
/// thread reads the host's frames and reports its answers to `seen`.
fn server(listener: TcpListener, seen: mpsc::Sender<Seen>) {
    let (stream, _) = listener.accept().unwrap();
    // One writer for both threads, each line written whole under its lock (two handles
    // writing at once interleaved their lines).
    let out = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let write = |out: &Mutex<TcpStream>, msg: &Value| {
        let line = format!("{msg}\n");
        out.lock().unwrap().write_all(line.as_bytes())
    };
    let mut reader = BufReader::new(stream);
    let mut writer = Some(out.clone());
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        line.clear();
        let Some(method) = msg["method"].as_str() else {
            // An answer of the host's.
            let seen_now = match &msg["id"] {
                Value::String(s) if s == "ping-1" => Some(Seen::Pong),
                Value::Number(_) => Some(Seen::Push(msg.get("result").is_some())),
                _ => None,
            };
            if let Some(s) = seen_now {
                let _ = seen.send(s);
            }
            continue;
        };
        let Some(id) = msg.get("id") else { continue };
        let result = match method {
            "initialize" => json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "experimental": { "mcpl": manifest() } },
                "serverInfo": { "name": "flood", "version": "1" } }),
            "featureSets/update" => json!({ "accepted": true }),
            "mcpl/manifest" => manifest(),
            "tools/list" => json!({ "tools": [] }),
            _ => json!({}),
        };
        let answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        write(&out, &answer).unwrap();
        if method == "featureSets/update" {
            if let Some(w) = writer.take() {
                std::thread::spawn(move || {
                    let text = "x".repeat(TEXT_BYTES);
                    for i in 0..PUSHES {
                        let push = json!({ "jsonrpc": "2.0", "id": i, "method": "push/event",
                            "params": { "featureSet": "h.push", "eventId": format!("e{i}"),
                                "timestamp": "2026-01-01T00:00:00Z",
                                "payload": { "content": [{ "type": "text", "text": text }] } } });
                        if write(&w, &push).is_err() {
                            return;
                        }
                    }
                    let ping = json!({ "jsonrpc": "2.0", "id": "ping-1", "method": "ping" });
                    let _ = write(&w, &ping);
                });
            }
        }
    }
}

fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// The REPL's stdout is a pipe the test does not read while the server floods it with
/// pushes and then pings: the host still reads every frame and answers the ping (seen by
/// the server, over TCP). Then stdout is read: the events shown and the ones told missed
/// (`{"resync": {"missed": N}}`) cover every push the host admitted.
///
/// The inspector runs with one runtime worker (`TOKIO_WORKER_THREADS=1`): a write blocking
/// that worker then stalls the whole connection, as it did on a machine whose every worker
/// was held so; with more workers the stall took only the worker that blocked.
#[test]
fn a_stalled_stdout_does_not_stall_the_connection_and_the_loss_is_told() {
    let (listener, addr) = listen();
    let (seen_tx, seen) = mpsc::channel();
    std::thread::spawn(move || server(listener, seen_tx));
    let mut child = Command::new(BIN)
        .args(["inspect", "--repl", "--json", "--timeout", "5"])
        .arg(format!("tcp://{addr}"))
        .env("NO_COLOR", "1")
        .env("TOKIO_WORKER_THREADS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    // Nobody reads stdout until the server's ping and every push are answered (the
    // host may answer the ping before the last pushes: each is answered where handled).
    let (mut admitted, mut answered, mut pong) = (0u64, 0u64, false);
    let deadline = std::time::Instant::now() + WAIT;
    while !pong || answered < PUSHES {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match seen.recv_timeout(left) {
            Ok(Seen::Push(ok)) => {
                answered += 1;
                admitted += u64::from(ok);
            }
            Ok(Seen::Pong) => pong = true,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the server's ping ({pong}) and pushes ({answered} of {PUSHES}) were not \
                     all answered within {WAIT:?} while stdout was not read"
                );
            }
        }
    }
    assert!(admitted > PUSHES / 2, "{admitted} admitted");
    // Now stdout is read. The count of what was dropped is told before the next line that
    // finds room: commands (`help`) are sent, each result read, until every admitted push
    // is shown or counted missed.
    let (line_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut shown, mut missed) = (0u64, 0u64);
    while shown + missed < admitted {
        writeln!(stdin, "help").unwrap();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!("{shown} shown + {missed} missed of {admitted} within {WAIT:?}")
            });
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            if v["event"]["kind"] == "push" {
                shown += 1;
            } else if let Some(n) = v["resync"]["missed"].as_u64() {
                missed += n;
            } else if v["command"] == "help" {
                break;
            }
        }
    }
    writeln!(stdin, "quit").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(missed > 0, "the loss is told: {shown} shown");
    assert!(shown < admitted, "{shown} shown of {admitted}");
    assert!(status.success(), "{status:?}");
}
