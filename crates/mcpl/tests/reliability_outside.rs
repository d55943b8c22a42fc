//! Attacks from outside (issue #20) on the library's connection and sessions: a client that
//! floods requests and never reads its answers, peer-supplied lists of hostile length, and
//! partial messages held open to exhaust memory. Boundedness is asserted through counts (work
//! in flight, answers, refusals), never RSS or timings; with paused time, `timeout` is a
//! deadlock check and `sleep` lets every task run until it blocks.
#![cfg(feature = "runtime")]

use std::collections::HashSet;
use std::time::Duration;

use mcpl::jsonrpc::codes;
use mcpl::peer::{Diagnostic, IncomingMessage, Peer, PeerConfig};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

const GUARD: Duration = Duration::from_secs(3600);

/// A transport over an in-memory pipe of `buffer` bytes, and the raw far end.
fn raw(buffer: usize) -> (Transport, ReadHalf<DuplexStream>, WriteHalf<DuplexStream>) {
    let (a, b) = tokio::io::duplex(buffer);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (Transport::lines(ar, aw, "outside"), br, bw)
}

fn request(id: usize, method: &str, params: Value) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    )
}

/// Reads `n` response lines and checks each id in `0..n` is answered exactly once; returns
/// how many were refused busy (-32000, with `data.limit`).
async fn read_answers(read: ReadHalf<DuplexStream>, n: usize, limit: usize) -> usize {
    let mut lines = BufReader::new(read).lines();
    let mut seen = HashSet::new();
    let mut busy = 0;
    while seen.len() < n {
        let line = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("an answer is missing (deadlock guard)")
            .unwrap()
            .expect("the connection ended before every request was answered");
        let v: Value = serde_json::from_str(&line).unwrap();
        let id = v["id"].as_u64().expect("an answer without a numeric id") as usize;
        assert!(
            id < n && seen.insert(id),
            "id {id} answered twice or unknown"
        );
        if v["error"]["code"] == codes::BUSY {
            assert_eq!(v["error"]["data"]["limit"], limit, "{v}");
            busy += 1;
        }
    }
    busy
}

#[tokio::test(start_paused = true)]
async fn a_client_that_floods_requests_and_never_reads_meets_the_in_flight_bound() {
    const LIMIT: usize = 8;
    // Past the bound the reader holds up to 1,024 `busy` answers it cannot write yet (as
    // many as a peer of this crate may have requests pending) before it stops reading.
    const SENT: usize = 2_000;
    let config = PeerConfig {
        max_in_flight_requests: LIMIT,
        outgoing_capacity: 4,
        ..PeerConfig::default()
    };
    let (transport, read, mut write) = raw(256);
    let (peer, mut incoming) = Peer::new(transport, config);
    let mut diagnostics = peer.diagnostics();
    // The application answers every request in a task of its own, as a server does.
    tokio::spawn(async move {
        while let Some(msg) = incoming.recv().await {
            if let IncomingMessage::Request(req) = msg {
                tokio::spawn(async move {
                    let _ = req.respond(json!({"pad": "r".repeat(1024)})).await;
                });
            }
        }
    });
    let writer = tokio::spawn(async move {
        for id in 0..SENT {
            let line = request(id, "work", json!({"pad": "q".repeat(1024)}));
            write.write_all(line.as_bytes()).await.unwrap();
        }
        write
    });
    // The first refusal: the bound is met while the client reads nothing.
    let busy = tokio::time::timeout(GUARD, async {
        loop {
            match diagnostics.recv().await {
                Some(Diagnostic::Busy { limit, .. }) => return limit,
                Some(_) => {}
                None => panic!("the connection ended"),
            }
        }
    })
    .await
    .expect("no request was ever refused busy: nothing bounds the work in flight");
    assert_eq!(busy, LIMIT);
    assert!(peer.requests_in_flight() <= LIMIT);
    // Let everything run until it blocks: the flood stalls at the transport.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(peer.requests_in_flight() <= LIMIT);
    assert!(!writer.is_finished(), "the server read the whole flood");
    // Once the client reads, every request is answered exactly once.
    let refused = read_answers(read, SENT, LIMIT).await;
    assert!(refused >= 1);
    let _write = writer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_reference_server_bounds_tool_calls_for_a_client_that_never_reads() {
    // Beyond what the reader holds before it stops reading: the requests in flight, their
    // answers, and up to 1,024 `busy` answers not yet written.
    const SENT: usize = 1_600;
    let (transport, read, mut write) = raw(64 * 1024);
    let session = mcpl::reference::server().start(transport);
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "outside", "version": "0"}});
    let writer = tokio::spawn(async move {
        write
            .write_all(request(0, "initialize", init).as_bytes())
            .await
            .unwrap();
        let text = "x".repeat(16 * 1024);
        for id in 1..SENT {
            let params = json!({"name": "echo", "arguments": {"text": text}});
            write
                .write_all(request(id, "tools/call", params).as_bytes())
                .await
                .unwrap();
        }
        write
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    // Before the bound, every request was read and its 16 KiB answer held in a task.
    assert!(
        !writer.is_finished(),
        "the server read all {SENT} requests from a client that reads nothing"
    );
    let refused = read_answers(read, SENT, mcpl::peer::DEFAULT_MAX_IN_FLIGHT_REQUESTS).await;
    assert!(refused >= 1, "no request was refused busy");
    let _write = writer.await.unwrap();
    session.close();
}

/// Sends `lines` to a fresh reference server over an in-memory pipe and returns the answer
/// to each request, in order.
async fn exchange(lines: &[String]) -> Vec<Value> {
    let (transport, read, mut write) = raw(64 * 1024);
    let session = mcpl::reference::server().start(transport);
    let mut answers = BufReader::new(read).lines();
    let mut out = Vec::new();
    for line in lines {
        write.write_all(line.as_bytes()).await.unwrap();
        loop {
            let answer = tokio::time::timeout(GUARD, answers.next_line())
                .await
                .expect("no answer (deadlock guard)")
                .unwrap()
                .expect("the connection ended");
            let v: Value = serde_json::from_str(&answer).unwrap();
            // Server-initiated traffic (greeting pushes, registrations) is not an answer.
            if v.get("method").is_none() {
                out.push(v);
                break;
            }
        }
    }
    session.close();
    out
}

fn mcpl_initialize() -> String {
    request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
            "clientInfo": {"name": "outside", "version": "0"}}),
    )
}

#[tokio::test]
async fn s6_7_policy_lists_over_the_bound_are_refused_32602_with_limit_and_count() {
    let limit = mcpl::policy::MAX_POLICY_LIST_ENTRIES;
    let many = |path: &'static str, n: usize| vec![path; n];
    let answers = exchange(&[
        mcpl_initialize(),
        // One entry too many in each list, one list at a time.
        request(
            2,
            "featureSets/update",
            json!({"effectiveCapabilities": many("pushEvents", limit + 1)}),
        ),
        request(
            3,
            "featureSets/update",
            json!({"deniedCapabilities": many("observe", limit + 5)}),
        ),
        request(
            4,
            "featureSets/update",
            json!({"enabled": many("ref.*", limit + 2)}),
        ),
        request(
            5,
            "featureSets/update",
            json!({"disabled": many("x", 2 * limit)}),
        ),
    ])
    .await;
    assert_eq!(answers[0]["id"], 1);
    for (answer, (field, count)) in answers[1..].iter().zip([
        ("effectiveCapabilities", limit + 1),
        ("deniedCapabilities", limit + 5),
        ("enabled", limit + 2),
        ("disabled", 2 * limit),
    ]) {
        let e = &answer["error"];
        assert_eq!(e["code"], codes::INVALID_PARAMS, "{answer}");
        assert_eq!(e["data"]["limit"], limit, "{answer}");
        assert_eq!(e["data"]["count"], count, "{answer}");
        assert_eq!(e["data"]["field"], field, "{answer}");
    }
}

#[tokio::test]
async fn s5_4_lists_at_the_bound_are_read_whole_and_a_late_conflict_is_still_found() {
    let limit = mcpl::policy::MAX_POLICY_LIST_ENTRIES;
    // `limit` distinct-looking entries each side; the one conflict is the last denied entry.
    let granted: Vec<String> = (0..limit)
        .map(|i| match i % 2 {
            0 => "pushEvents".to_owned(),
            _ => "channels.*".to_owned(),
        })
        .collect();
    let mut denied: Vec<String> = vec!["observe".to_owned(); limit - 1];
    denied.push("channels.publish".to_owned());
    let clean: Vec<String> = vec!["observe".to_owned(); limit];
    let answers = exchange(&[
        mcpl_initialize(),
        request(
            2,
            "featureSets/update",
            json!({"effectiveCapabilities": granted, "deniedCapabilities": denied}),
        ),
        request(
            3,
            "featureSets/update",
            json!({"effectiveCapabilities": granted, "deniedCapabilities": clean}),
        ),
    ])
    .await;
    let conflict = &answers[1]["error"];
    assert_eq!(conflict["code"], codes::INVALID_PARAMS, "{}", answers[1]);
    assert_eq!(conflict["data"]["reason"], "granted_and_denied");
    assert_eq!(answers[2]["result"]["accepted"], true, "{}", answers[2]);
}

#[tokio::test(start_paused = true)]
async fn s17_8_a_burst_of_manifest_changes_to_a_host_that_does_not_read_is_coalesced() {
    const CHANGES: usize = 500;
    const OUTGOING: usize = 4;
    let server = mcpl::server::Server::builder("outside", "1")
        .feature_set(
            "alerts",
            "Push alerts",
            &[mcpl::capability::Capability::PushEvents],
        )
        .peer_config(PeerConfig {
            outgoing_capacity: OUTGOING,
            ..PeerConfig::default()
        })
        .build()
        .unwrap();
    // A 256-byte pipe: a host that does not read blocks the server's writer at once.
    let (transport, read, mut write) = raw(256);
    let session = server.start(transport);
    write.write_all(mcpl_initialize().as_bytes()).await.unwrap();
    let mut lines = BufReader::new(read).lines();
    let init = lines.next_line().await.unwrap().unwrap();
    assert!(init.contains("\"revision\""), "{init}");
    // The host now reads nothing while the manifest changes CHANGES times.
    for i in 0..CHANGES {
        let out = server
            .tracker()
            .transaction(|m| m["featureSets"]["alerts"]["description"] = json!(format!("v{i}")))
            .unwrap();
        assert_eq!(out.announced, 1);
    }
    let last = server.tracker().revision();
    tokio::time::sleep(Duration::from_secs(60)).await;
    // Once the host reads, it learns the last revision, having been sent at most what the
    // writer queue, the frame being written and the one pending announcement hold.
    let mut announced = 0;
    loop {
        let line = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("the last revision was never announced (deadlock guard)")
            .unwrap()
            .expect("the connection ended");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["method"] != "mcpl/manifestChanged" {
            continue;
        }
        announced += 1;
        assert_eq!(v["params"]["domains"], json!(["featureSets"]), "{v}");
        if v["params"]["revision"] == last.as_str() {
            break;
        }
    }
    assert!(
        announced <= OUTGOING + 2,
        "{announced} of {CHANGES} announcements were queued for a host that did not read"
    );
    session.close();
}

// ---------------------------------------------------------------------------------------
// The process-wide budget for buffered partial messages, over real TCP and WebSocket
// ---------------------------------------------------------------------------------------

/// The budget of these tests, and what each attacking connection sends of its message: two
/// such messages past the per-connection allowance fit in the budget, eight do not.
const BUDGET: usize = 1024 * 1024;
const PARTIAL: usize = 512 * 1024;
const ATTACKERS: usize = 8;
/// Each connection not refused holds at least `PARTIAL - UNBUDGETED_BYTES` of the budget,
/// so at most this many are not refused once everything sent has been read.
const MAY_HOLD: usize = BUDGET / (PARTIAL - mcpl::transport::UNBUDGETED_BYTES);
const REAL_GUARD: Duration = Duration::from_secs(120);

/// A server on 127.0.0.1 whose connections share a budget of [`BUDGET`] bytes.
async fn budget_server<L: mcpl::transport::listen::Listen + 'static>(
    listener: L,
) -> mcpl::transport::MessageBudget {
    let budget = mcpl::transport::MessageBudget::new(BUDGET);
    let config = mcpl::server::listen::ServeConfig {
        listen: mcpl::transport::listen::ListenConfig {
            message_budget: Some(budget.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let server = mcpl::server::Server::builder("outside", "1")
        .build()
        .unwrap();
    tokio::spawn(mcpl::server::listen::serve(
        server,
        std::sync::Arc::new(listener),
        config,
    ));
    budget
}

/// The start of a `ping` whose padding never ends.
fn endless_ping() -> Vec<u8> {
    let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    line.resize(PARTIAL, b'x');
    line
}

/// The refusal of an [`endless_ping`]: `-32000` under the id its first bytes show, as every
/// refused message is answered (`peer/refused.rs`; before, `id: null`, whatever they showed).
fn assert_refused_over_budget(v: &Value) {
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["error"]["code"], codes::BUSY, "{v}");
    assert_eq!(
        v["error"]["data"],
        json!({"limit": BUDGET, "reason": "message_budget"}),
        "{v}"
    );
}

/// Waits for `n` refusals from the attackers' readers.
async fn refusals(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, n: usize) {
    for _ in 0..n {
        let v = tokio::time::timeout(REAL_GUARD, rx.recv())
            .await
            .expect("fewer refusals than the budget allows: partial messages are not bounded")
            .expect("an attacker's connection ended without a refusal");
        assert_refused_over_budget(&v);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_lines_of_many_tcp_connections_stay_within_one_budget() {
    let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let budget = budget_server(listener).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut held = Vec::new();
    for _ in 0..ATTACKERS {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (read, mut write) = stream.into_split();
        write.write_all(&endless_ping()).await.unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Ok(Some(line)) = BufReader::new(read).lines().next_line().await {
                let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        held.push(write);
    }
    // Everything sent is read eventually; at most MAY_HOLD connections can hold theirs.
    refusals(&mut rx, ATTACKERS - MAY_HOLD).await;
    assert!(budget.used() <= BUDGET);
    // A clean probe on another connection is answered while the budget is taken.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    let answer = tokio::time::timeout(REAL_GUARD, BufReader::new(read).lines().next_line())
        .await
        .expect("the probe was not answered")
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"], json!({}), "{answer}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_frames_of_many_websocket_connections_stay_within_one_budget() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let listener = mcpl::transport::ws::Listener::bind("127.0.0.1:0", None)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("ws://{addr}/");
    let _budget = budget_server(listener).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (closes_tx, mut closes) = tokio::sync::mpsc::unbounded_channel();
    let mut held = Vec::new();
    for _ in 0..ATTACKERS {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
            .await
            .unwrap();
        // One masked text frame announcing 1 MiB (the masking key is zero, so the payload
        // goes as it is), of which PARTIAL bytes are sent.
        let mut frame = vec![0x81, 0x80 | 127];
        frame.extend_from_slice(&(2 * PARTIAL as u64).to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.extend_from_slice(&endless_ping());
        // A connection refused before all of it was written is closed by the server with
        // these bytes unread, so the write may end in a reset (more so under load): its
        // refusal and close frame, already sent, are still read below.
        let _ = ws.get_mut().write_all(&frame).await;
        let (tx, closes_tx) = (tx.clone(), closes_tx.clone());
        held.push(tokio::spawn(async move {
            while let Some(Ok(msg)) = ws.next().await {
                match msg {
                    WsMessage::Text(text) => {
                        let _ = tx.send(serde_json::from_str::<Value>(&text).unwrap());
                    }
                    WsMessage::Close(frame) => {
                        let _ = closes_tx.send(frame.map(|f| u16::from(f.code)));
                    }
                    _ => {}
                }
            }
            // The connection ended after the refusal (tungstenite cannot skip the frame).
        }));
    }
    refusals(&mut rx, ATTACKERS - MAY_HOLD).await;
    // Each refused connection then ends with close code 1013 (RFC 6455 §7.4.1 registry:
    // try again later), where its close frame carried no code before.
    for _ in 0..ATTACKERS - MAY_HOLD {
        let code = tokio::time::timeout(REAL_GUARD, closes.recv()).await;
        assert_eq!(code.unwrap().unwrap(), Some(1013));
    }
    // A clean probe on another connection is answered while the budget is taken.
    let mut probe = mcpl::transport::ws::connect(&url, None).await.unwrap();
    probe
        .writer
        .send(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
        .await
        .unwrap();
    let answer = tokio::time::timeout(REAL_GUARD, probe.reader.next_frame())
        .await
        .expect("the probe was not answered")
        .unwrap();
    let Some(mcpl::transport::Frame::Text(answer)) = answer else {
        panic!("no answer to the probe: {answer:?}")
    };
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"], json!({}), "{answer}");
    for task in held {
        task.abort();
    }
}

/// A peer that sends junk and never reads: each junk line is answered `-32700`, and those
/// answers, the reader's own, never hold up its reading (issue #24: they wait for the writer
/// beside the reading, up to the held bound), so the valid message after them is still
/// delivered although not one answer could be written.
#[tokio::test(start_paused = true)]
async fn the_readers_own_answers_to_a_peer_that_never_reads_do_not_stop_its_reading() {
    const JUNK: usize = 200;
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (transport, _read, mut write) = raw(256);
    let (_peer, mut incoming) = Peer::new(transport, config);
    let writer = tokio::spawn(async move {
        for _ in 0..JUNK {
            write.write_all(b"{not json\n").await.unwrap();
        }
        let note = json!({"jsonrpc": "2.0", "method": "after/junk"});
        write
            .write_all(format!("{note}\n").as_bytes())
            .await
            .unwrap();
        write
    });
    let got = tokio::time::timeout(GUARD, incoming.recv())
        .await
        .expect("the reader stopped reading behind its own unwritten answers");
    match got {
        Some(IncomingMessage::Notification(n)) => assert_eq!(n.method, "after/junk"),
        other => panic!("expected the notification, got {other:?}"),
    }
    let _write = writer.await.unwrap();
}

/// The reader's own answers can be far larger than what they answer (a batch of tiny invalid
/// entries gets one error object each, with its id echoed), so what it holds for a peer that
/// never reads is bounded in bytes too, not only in frames: here 300 batches of 1,000 invalid
/// requests, 40 KB each, answered by 300 arrays of 1,000 `-32600` errors, about 100 KB each,
/// would otherwise all be read and their 30 MB of answers held. (Until `jsonrpc::MAX_ID_BYTES`
/// this was 40 requests under 1 MiB ids each, answered under that id.) The reader stops
/// reading while too much is held, and once the peer reads, every answer arrives, in order,
/// and the reading resumes.
#[tokio::test(start_paused = true)]
async fn the_readers_own_held_answers_are_bounded_in_bytes_too() {
    const SENT: usize = 300;
    const ENTRIES: usize = 1000;
    let config = PeerConfig {
        outgoing_capacity: 2,
        ..PeerConfig::default()
    };
    let (transport, read, mut write) = raw(64 * 1024);
    let (_peer, mut incoming) = Peer::new(transport, config);
    let mut writer = tokio::spawn(async move {
        for i in 0..SENT {
            let invalid = json!({"jsonrpc": "2.0", "id": format!("{i:04}"), "method": 1});
            let batch = Value::Array(vec![invalid; ENTRIES]);
            write
                .write_all(format!("{batch}\n").as_bytes())
                .await
                .unwrap();
        }
        let note = json!({"jsonrpc": "2.0", "method": "after/junk"});
        write
            .write_all(format!("{note}\n").as_bytes())
            .await
            .unwrap();
        write
    });
    // Nothing reads the answers: with paused time the guard elapses only once every task is
    // blocked, i.e. the reader stopped taking the peer's frames.
    assert!(
        tokio::time::timeout(GUARD, &mut writer).await.is_err(),
        "the reader took in {SENT} batches whose answers it could not write"
    );
    let mut lines = BufReader::new(read).lines();
    for i in 0..SENT {
        let line = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("an answer is missing (deadlock guard)")
            .unwrap()
            .expect("the connection ended before every junk request was answered");
        let v: Value = serde_json::from_str(&line).unwrap();
        let answers = v.as_array().expect("a batch is answered by an array");
        assert_eq!(answers.len(), ENTRIES, "answer {i}");
        for a in answers {
            assert_eq!(a["error"]["code"], codes::INVALID_REQUEST, "answer {i}");
            assert_eq!(a["id"], format!("{i:04}"), "answers out of order");
        }
    }
    let _write = tokio::time::timeout(GUARD, writer)
        .await
        .expect("the reader did not resume reading (deadlock guard)")
        .unwrap();
    match tokio::time::timeout(GUARD, incoming.recv()).await.unwrap() {
        Some(IncomingMessage::Notification(n)) => assert_eq!(n.method, "after/junk"),
        other => panic!("expected the notification, got {other:?}"),
    }
}

/// A client that sends tool calls whose answers are large (`echo` of 1 MiB each) and never
/// reads: the server holds their answers within a byte bound (the requests in flight,
/// `PeerConfig::max_in_flight_bytes`, and the writer's queue, `peer::OUTGOING_QUEUE_BYTES`),
/// answering the rest busy, not within the count bound alone (128 in flight and 64 queued
/// frames: here all 150 answers, 150 MiB, were held at once).
#[tokio::test(start_paused = true)]
async fn answers_held_for_a_client_that_never_reads_are_bounded_in_bytes() {
    const SENT: usize = 150;
    const MIB: usize = 1024 * 1024;
    let (transport, read, mut write) = raw(64 * 1024);
    let session = mcpl::reference::server().start(transport);
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "outside", "version": "0"}});
    let writer = tokio::spawn(async move {
        write
            .write_all(request(0, "initialize", init).as_bytes())
            .await
            .unwrap();
        let text = "x".repeat(MIB);
        for id in 1..SENT {
            let params = json!({"name": "echo", "arguments": {"text": text}});
            write
                .write_all(request(id, "tools/call", params).as_bytes())
                .await
                .unwrap();
        }
        write
    });
    // Every task runs until it blocks: nothing the server holds is written (64 KiB pipe).
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mut lines = BufReader::new(read).lines();
    let (mut echoed, mut busy) = (0, 0);
    for _ in 0..SENT {
        let line = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("an answer is missing (deadlock guard)")
            .unwrap()
            .expect("the connection ended before every request was answered");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["error"]["code"] == codes::BUSY {
            busy += 1;
        } else if line.len() > MIB {
            echoed += 1;
        }
    }
    let bound = (mcpl::peer::DEFAULT_MAX_IN_FLIGHT_BYTES + mcpl::peer::OUTGOING_QUEUE_BYTES) / MIB;
    assert!(
        echoed <= bound + 4,
        "{echoed} answers of 1 MiB were held for a client that read nothing (bound {bound} MiB)"
    );
    assert!(busy >= 1, "no request was refused busy");
    let _write = writer.await.unwrap();
    session.close();
}

/// An application that reads nothing from its `Incoming` while the other side sends large
/// notifications: the incoming queue holds at most `peer::INCOMING_QUEUE_BYTES` of frames
/// (one frame more when it is empty) before the reader stops reading, not its 64 slots
/// (`PeerConfig::incoming_capacity`): 64 notifications of 1 MiB were all taken in before.
/// Nothing is lost: every notification is received, in order, once the application reads.
#[tokio::test(start_paused = true)]
async fn an_application_that_reads_nothing_holds_queued_messages_within_a_byte_bound() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const SENT: usize = 80;
    const MIB: usize = 1024 * 1024;
    let (transport, _read, mut write) = raw(64 * 1024);
    let (_peer, mut incoming) = Peer::new(transport, PeerConfig::default());
    let written = Arc::new(AtomicUsize::new(0));
    let counted = written.clone();
    let writer = tokio::spawn(async move {
        let text = "x".repeat(MIB);
        for i in 0..SENT {
            let line = format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "method": "big/news", "params": {"i": i, "text": text}})
            );
            write.write_all(line.as_bytes()).await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
        }
        write
    });
    // Every task runs until it blocks: the reader stops once the queue is full.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let taken = written.load(Ordering::SeqCst);
    // The queue's bytes, one frame past them, the frame being delivered and the pipe.
    let bound = mcpl::peer::INCOMING_QUEUE_BYTES / MIB + 3;
    assert!(
        taken <= bound,
        "{taken} notifications of 1 MiB were taken in for an application that read nothing \
         (bound {bound})"
    );
    for i in 0..SENT {
        match tokio::time::timeout(GUARD, incoming.recv()).await.unwrap() {
            Some(IncomingMessage::Notification(n)) => {
                assert_eq!(n.method, "big/news");
                assert_eq!(n.params.as_ref().unwrap()["i"], i, "out of order");
            }
            other => panic!("expected notification {i}, got {other:?}"),
        }
    }
    let _write = tokio::time::timeout(GUARD, writer).await.unwrap().unwrap();
}
