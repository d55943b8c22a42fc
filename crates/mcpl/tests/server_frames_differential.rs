//! `ServerState::handle_frame` (sans-I/O) against the async `Server` over a real pipe:
//! for each frame of a list (batches of requests the machine answers itself, an empty
//! batch, one past the bound, invalid entries, several messages on one line, junk, the
//! policy Request in a batch, a request reusing an id taken earlier in its batch, by value
//! too, a cancel freeing one), both write the same answers, frame by frame, and end in the
//! same grant (JSON-RPC 2.0 §5, §6; MCPL §6.7). The frames are raw JSON lines, every byte
//! written by the test.
#![cfg(feature = "runtime")]

use std::time::Instant;

use mcpl::capability::Capability;
use mcpl::peer::{PeerConfig, DEFAULT_MAX_BATCH_ENTRIES};
use mcpl::server::{Server, Session};
use mcpl::session::{ServerOutput, ServerRules, ServerState};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The manifest both servers advertise: one feature set `work` (`pushEvents`).
fn manifest() -> Value {
    json!({"version": "0.5", "pushEvents": {}, "featureSets": {"work": {"uses": ["pushEvents"]}}})
}

/// The policy Request granting `work`, under `id`.
fn policy(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update", "params": {
        "enabled": ["work"], "disabled": [], "effectiveCapabilities": ["pushEvents"]}})
}

fn ping(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// MCP's `notifications/cancelled` naming `id`.
fn cancel(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}})
}

/// The frames sent to both, in order (after `initialize`).
fn frames() -> Vec<String> {
    let over: Vec<Value> = (0..=DEFAULT_MAX_BATCH_ENTRIES as u64)
        .map(|i| ping(100 + i))
        .collect();
    let mut refused_policy = policy(31);
    refused_policy["jsonrpc"] = json!("1.0");
    vec![
        json!([ping(1), ping(2)]).to_string(),
        json!([ping(3)]).to_string(),
        "[]".into(),
        json!([{"jsonrpc": "2.0", "id": 8, "method": 5}, 1, ping(7)]).to_string(),
        json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]).to_string(),
        "[1,2]".into(),
        format!("{} {}", ping(9), json!([ping(10)])),
        r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"#.into(),
        r#"[{"jsonrpc":"2.0","id":6,"method":"ping"},{"#.into(),
        "not json".into(),
        r#"{"jsonrpc":"1.0","id":11,"method":"ping"}"#.into(),
        json!([policy(30), ping(12)]).to_string(),
        json!([refused_policy, ping(13)]).to_string(),
        json!([policy(32)]).to_string(),
        r#"{"jsonrpc":"2.0","id":33,"method":"featureSets/update","params":{"#.into(),
        json!([policy(34)]).to_string(),
        r#"[{"jsonrpc":"2.0","id":35,"method":"featureSets/update","params":{}},{"#.into(),
        json!([policy(36)]).to_string(),
        r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{"#.into(),
        json!([policy(37)]).to_string(),
        format!(
            "{} {}",
            ping(38),
            r#"{"jsonrpc":"2.0","id":39,"method":"featureSets/update","params":{"#
        ),
        json!([policy(40)]).to_string(),
        // A request reusing the id of one taken earlier in the batch is refused (its id in
        // use, `peer::serving`); the policy Request so sent is not applied and grants
        // nothing until the next (§6.7, §6.4 fail closed), in either order.
        json!([ping(41), policy(41)]).to_string(),
        json!([policy(42)]).to_string(),
        json!([policy(43), ping(43)]).to_string(),
        json!([policy(44), policy(44)]).to_string(),
        json!([ping(45), ping(45), ping(46)]).to_string(),
        // A cancel naming a request taken earlier in the batch frees its id for the entries
        // after it (`peer::serving`: the `Server` answers a cancelled request as it handles
        // the cancel), so the policy Request after it is applied (§6.7).
        json!([ping(47), cancel(json!(47)), policy(47)]).to_string(),
        // One id in flight is one numeric value (JSON-RPC 2.0 §5): `48.0` and `4.8e1` are
        // refused while `48` is in flight, `-0.0` while `0.0` is, each answered under its
        // own representation; the string `"48"` is another id.
        r#"[{"jsonrpc":"2.0","id":48,"method":"ping"},{"jsonrpc":"2.0","id":48.0,"method":"ping"},{"jsonrpc":"2.0","id":4.8e1,"method":"ping"},{"jsonrpc":"2.0","id":"48","method":"ping"}]"#.into(),
        r#"[{"jsonrpc":"2.0","id":0.0,"method":"ping"},{"jsonrpc":"2.0","id":-0.0,"method":"ping"}]"#.into(),
        r#"[{"jsonrpc":"2.0","id":49.0,"method":"ping"},{"jsonrpc":"2.0","id":49,"method":"featureSets/update","params":{"enabled":["work"],"disabled":[],"effectiveCapabilities":["pushEvents"]}}]"#.into(),
        json!([policy(50)]).to_string(),
        json!(over).to_string(),
    ]
}

/// The host's end of a pipe to a started async server.
struct Wire {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    session: Session,
}

impl Wire {
    async fn start() -> Wire {
        Wire::start_with(&[Capability::PushEvents]).await
    }

    /// A server whose feature set `work` uses `caps`, with a tool `hold` that never
    /// returns.
    async fn start_with(caps: &[Capability]) -> Wire {
        Wire::start_bounded(caps, PeerConfig::default().max_in_flight_requests).await
    }

    /// [`Wire::start_with`], holding at most `in_flight` host requests at once.
    async fn start_bounded(caps: &[Capability], in_flight: usize) -> Wire {
        let config = PeerConfig {
            max_in_flight_requests: in_flight,
            ..PeerConfig::default()
        };
        let server = Server::builder("diff", "1")
            .peer_config(config)
            .feature_set("work", "Work", caps)
            .tool(
                "hold",
                "Never returns",
                json!({"type": "object"}),
                |_s, _p| std::future::pending(),
            )
            .build()
            .expect("server builds");
        let (a, b) = tokio::io::duplex(1 << 20);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let session = server.start(Transport::lines(br, bw, "test"));
        Wire {
            lines: BufReader::new(ar).lines(),
            write: aw,
            session,
        }
    }

    async fn send(&mut self, line: &str) {
        let line = format!("{line}\n");
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    /// The first `n` lines the server writes for `frame` (a guard, never a synchronisation:
    /// a missing line fails the test): for a frame behind which a marking `ping` would be
    /// answered busy, ahead of the frame's own answers.
    async fn answers_counted(&mut self, frame: &str, n: usize) -> Vec<Value> {
        self.send(frame).await;
        let mut got = Vec::new();
        for _ in 0..n {
            let line =
                tokio::time::timeout(std::time::Duration::from_secs(60), self.lines.next_line())
                    .await
                    .expect("a line in time")
                    .expect("read")
                    .expect("a line");
            got.push(serde_json::from_str(&line).expect("JSON"));
        }
        got
    }

    /// Every line the server writes for `frame`: read up to the answer to a ping sent
    /// behind it (the server answers in wire order), that answer left out.
    async fn answers(&mut self, frame: &str, n: usize) -> Vec<Value> {
        self.send(frame).await;
        let mark = format!("mark-{n}");
        self.send(&json!({"jsonrpc": "2.0", "id": mark, "method": "ping"}).to_string())
            .await;
        let mut got = Vec::new();
        loop {
            let line = self.lines.next_line().await.expect("read").expect("a line");
            let v: Value = serde_json::from_str(&line).expect("JSON");
            if v["id"] == json!(mark) {
                return got;
            }
            got.push(v);
        }
    }
}

/// Every frame the state wrote for `frame`.
fn state_answers(state: &mut ServerState, frame: &str) -> Vec<Value> {
    state.handle_frame(Instant::now(), frame, DEFAULT_MAX_BATCH_ENTRIES);
    let mut got = Vec::new();
    while let Some(o) = state.poll_output() {
        if let ServerOutput::Transmit(t) = &o {
            got.push(serde_json::from_str(&t.to_json()).expect("JSON"));
        }
    }
    got
}

#[tokio::test]
async fn the_sans_io_server_answers_every_frame_as_the_async_server_does() {
    let rules =
        ServerRules::new(json!({"name": "diff", "version": "1"}), manifest()).expect("rules");
    let mut state = ServerState::new(rules);
    let mut wire = Wire::start().await;
    state_answers(&mut state, INITIALIZE);
    state_answers(&mut state, INITIALIZED);
    wire.send(INITIALIZE).await;
    wire.lines
        .next_line()
        .await
        .expect("read")
        .expect("the answer");
    wire.send(INITIALIZED).await;
    for (n, frame) in frames().iter().enumerate() {
        let sans_io = state_answers(&mut state, frame);
        let async_server = wire.answers(frame, n).await;
        assert_eq!(sans_io, async_server, "frame {n}: {frame:.200}");
        assert_eq!(
            state.grant().allows(Capability::PushEvents),
            wire.session.granted(Capability::PushEvents),
            "frame {n}: {frame:.200}"
        );
    }
}

/// §6.7, §6.4 fail closed: a policy Request, then a `ping`, under the id of a request still
/// with the application (a tool call that never returns; handed out by the sans-I/O
/// server) are refused alike by both (id in use, the policy not applied), and both then
/// hold no grant until the next policy Request.
#[tokio::test]
async fn a_request_under_the_id_of_one_in_flight_is_refused_as_the_async_server_refuses_it() {
    let manifest = json!({"version": "0.5", "pushEvents": {},
        "featureSets": {"work": {"uses": ["pushEvents", "tools"]}}});
    let mut rules =
        ServerRules::new(json!({"name": "diff", "version": "1"}), manifest).expect("rules");
    rules.mcp_capabilities.insert("tools".into(), json!({}));
    let mut state = ServerState::new(rules);
    let mut wire = Wire::start_with(&[Capability::PushEvents, Capability::Tools]).await;
    let policy = |id: u64| {
        let mut p = policy(id);
        p["params"]["effectiveCapabilities"] = json!(["pushEvents", "tools"]);
        p
    };
    state_answers(&mut state, INITIALIZE);
    state_answers(&mut state, INITIALIZED);
    wire.send(INITIALIZE).await;
    wire.lines
        .next_line()
        .await
        .expect("read")
        .expect("the answer");
    wire.send(INITIALIZED).await;
    let call = json!({"jsonrpc": "2.0", "id": 61, "method": "tools/call",
        "params": {"name": "hold", "arguments": {}}});
    let call65 = || {
        json!({"jsonrpc": "2.0", "id": 65, "method": "tools/call",
            "params": {"name": "hold", "arguments": {}}})
        .to_string()
    };
    let frames = [
        policy(60).to_string(),
        call.to_string(),
        policy(61).to_string(),
        policy(62).to_string(),
        ping(61).to_string(),
        // The same id by value (JSON-RPC 2.0 §5): refused, answered as written.
        r#"{"jsonrpc":"2.0","id":61.0,"method":"ping"}"#.into(),
        // A cancel naming it by another representation cancels it: answered `-32800`
        // under the id as its request wrote it, and the id is free again.
        cancel(json!(61.0)).to_string(),
        ping(61).to_string(),
        // Request 65 handed out alone, then a batch cancelling it and reusing its id: the
        // `-32800` answers a request sent alone, so it goes alone (JSON-RPC 2.0 §5), and
        // only the batch's own `ping` is its array (§6). Before, `ServerState` wrote both
        // as one array (r15 F3).
        call65(),
        json!([cancel(json!(65)), {"jsonrpc": "2.0", "id": 65.0, "method": "ping"}]).to_string(),
    ];
    for (n, frame) in frames.iter().enumerate() {
        let sans_io = state_answers(&mut state, frame);
        let async_server = wire.answers(frame, n).await;
        assert_eq!(sans_io, async_server, "frame {n}: {frame:.200}");
        assert_eq!(
            state.grant().allows(Capability::PushEvents),
            wire.session.granted(Capability::PushEvents),
            "frame {n}: {frame:.200}"
        );
        if n == 2 {
            assert_eq!(sans_io.len(), 1, "{sans_io:?}");
            assert_eq!(sans_io[0]["error"]["data"]["applied"], false, "{sans_io:?}");
            assert!(!state.grant().allows(Capability::PushEvents));
        }
    }
    assert!(state.grant().allows(Capability::PushEvents));
}

/// A request refused busy (past the bound of requests in flight) is never in flight: its id
/// is free for the entries after it in its batch, as the async server's peer refuses it
/// before taking its id (`peer::reader`), so the policy Request after it under that id is
/// applied by both (§6.7: it is never busy). Before, `ServerState` kept the busy request's
/// id as taken and refused the policy Request (id in use, not applied).
#[tokio::test]
async fn a_request_refused_busy_frees_its_id_in_its_batch_as_the_async_server_does() {
    let manifest = json!({"version": "0.5", "pushEvents": {},
        "featureSets": {"work": {"uses": ["pushEvents", "tools"]}}});
    let mut rules =
        ServerRules::new(json!({"name": "diff", "version": "1"}), manifest).expect("rules");
    rules.mcp_capabilities.insert("tools".into(), json!({}));
    rules.max_in_flight = 1;
    let mut state = ServerState::new(rules);
    let mut wire = Wire::start_bounded(&[Capability::PushEvents, Capability::Tools], 1).await;
    let policy = |id: u64| {
        let mut p = policy(id);
        p["params"]["effectiveCapabilities"] = json!(["pushEvents", "tools"]);
        p
    };
    state_answers(&mut state, INITIALIZE);
    state_answers(&mut state, INITIALIZED);
    wire.send(INITIALIZE).await;
    wire.lines
        .next_line()
        .await
        .expect("read")
        .expect("the answer");
    wire.send(INITIALIZED).await;
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "hold", "arguments": {}}})
    };
    // The first call holds the one slot (unanswered), so a marking `ping` would be answered
    // busy ahead of a frame's answers: the async server's lines are read by the count the
    // sans-I/O one wrote, and a last policy Request (never busy) shows nothing more came.
    let frames = [
        json!([policy(80)]).to_string(),
        call(81).to_string(),
        json!([call(83), policy(83)]).to_string(),
        policy(84).to_string(),
    ];
    for (n, frame) in frames.iter().enumerate() {
        let sans_io = state_answers(&mut state, frame);
        let async_server = wire.answers_counted(frame, sans_io.len()).await;
        assert_eq!(sans_io, async_server, "frame {n}: {frame:.200}");
        assert_eq!(
            state.grant().allows(Capability::PushEvents),
            wire.session.granted(Capability::PushEvents),
            "frame {n}: {frame:.200}"
        );
    }
    assert!(state.grant().allows(Capability::PushEvents));
    // Call 81 cancelled frees the one slot; then in `[policy 90, call 91, policy 91]` the
    // policy Request's answer is owed until the batch's array is queued, so both count it
    // (`peer::reader`): call 91 is busy, and policy 91 under the id it freed is applied
    // (§6.7: the two servers grant the same). Before, `ServerState` counted only requests
    // handed out: it handed call 91 out and refused policy 91, granting nothing (r15 F2).
    let cancel81 = cancel(json!(81)).to_string();
    let sans_io = state_answers(&mut state, &cancel81);
    assert_eq!(
        sans_io,
        wire.answers_counted(&cancel81, sans_io.len()).await
    );
    let batch = json!([policy(90), call(91), policy(91)]).to_string();
    let sans_io = state_answers(&mut state, &batch);
    // The async server writes the batch's one array (its answers are joined, §6).
    let async_server = wire.answers_counted(&batch, 1).await;
    // The same answers (the order of a batch's answers is free, JSON-RPC 2.0 §6: the async
    // server writes its busy answer with the refusals, first).
    let sorted = |v: &[Value]| {
        let mut each: Vec<String> = v
            .iter()
            .flat_map(|a| a.as_array().cloned().unwrap_or_default())
            .map(|a| a.to_string())
            .collect();
        each.sort();
        each
    };
    assert_eq!(sorted(&sans_io), sorted(&async_server), "{batch}");
    assert_eq!(async_server.len(), 1, "{async_server:?}");
    assert_eq!(sans_io.len(), 1, "{sans_io:?}");
    assert_eq!(sans_io[0][1]["error"]["code"], -32000, "{sans_io:?}");
    assert!(sans_io[0][2].get("result").is_some(), "{sans_io:?}");
    assert!(state.grant().allows(Capability::PushEvents));
    assert!(wire.session.granted(Capability::PushEvents));
}
