//! The same server bytes to the async `host::HostSession` (over an in-memory pipe, its peer
//! reading them) and to the sans-I/O `session::HostState` (`handle_frame`, its frames
//! drained by `poll_output` as a driver writes them): both take an answer only under the id
//! of a request of theirs whose frame was written (JSON-RPC 2.0 §5), and both report an id
//! written as a whole float, the answers and reports compared.
//!
//! The server guesses the id of the host's next request (ids are sequential) and sends, in
//! one batch, `mcpl/manifestChanged` (the host queues its `mcpl/manifest` fetch, §17.3,
//! §17.4) and a response under that id: a stray for both, reviewed by neither, the fetch
//! settled by its real answer. The ids each host gives its requests are asserted equal, so
//! the bytes each reads are the same.
#![cfg(feature = "runtime")]

use std::time::{Duration, Instant, SystemTime};

use mcpl::host::{HostConfig, HostDiagnostic, HostEvent, HostSession, HostStreams};
use mcpl::peer::{Diagnostic, PeerConfig};
use mcpl::session::{HostOutput, HostRules, HostState};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{init_result, raw_peer, Raw};

/// A deadlock guard, never a synchronisation: only a failing comparison waits this long.
const GUARD: Duration = Duration::from_secs(10);

const POLICY: [&str; 1] = ["pushEvents"];

fn manifest(sets: &[&str]) -> Value {
    let sets: serde_json::Map<String, Value> = sets
        .iter()
        .map(|s| {
            let set = json!({ "description": s, "uses": ["pushEvents"] });
            (s.to_string(), set)
        })
        .collect();
    json!({ "version": "0.5", "pushEvents": {}, "featureSets": sets })
}

fn announce() -> Value {
    json!({"jsonrpc": "2.0", "method": "mcpl/manifestChanged", "params": {}})
}

/// The sets of a manifest, sorted.
fn sets(m: &Value) -> Vec<String> {
    let mut v: Vec<String> = m["featureSets"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A diagnostic as both hosts are compared on it: a stray, an id read from a whole float,
/// or any other by its form (the same type for both). A step's diagnostics are compared
/// sorted: their order within one step is not (as in `host_differential`).
fn norm_session(d: &HostDiagnostic) -> String {
    match d {
        HostDiagnostic::Connection(Diagnostic::UnknownResponse { id, .. }) => format!(
            "stray {}",
            id.as_ref()
                .map_or("null".into(), |i| i.to_value().to_string())
        ),
        HostDiagnostic::Connection(Diagnostic::IntegralId { id, written }) => {
            format!("integral {} {written}", id.to_value())
        }
        other => format!("{other:?}"),
    }
}

fn norm_state(d: &HostDiagnostic) -> String {
    match d {
        HostDiagnostic::UnexpectedResponse { id } => format!("stray {id}"),
        HostDiagnostic::IntegralId { id, written } => format!("integral {id} {written}"),
        other => format!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The async host
// ---------------------------------------------------------------------------------------

async fn recv(raw: &mut Raw) -> Value {
    tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("the host said nothing")
}

/// The host's next request, skipping its notifications.
async fn next_request(raw: &mut Raw) -> Value {
    loop {
        let v = recv(raw).await;
        if v.get("id").is_some() && v.get("method").is_some() {
            return v;
        }
    }
}

async fn session_connected(m: Value) -> (HostSession, HostStreams, Raw, Vec<u64>) {
    let cfg = HostConfig {
        policy: POLICY.iter().map(|s| s.to_string()).collect(),
        ..HostConfig::default()
    };
    let (peer, incoming, mut raw) = raw_peer(PeerConfig::default());
    let connect = tokio::spawn(HostSession::connect_peer(peer, incoming, cfg));
    let init = next_request(&mut raw).await;
    assert_eq!(init["method"], "initialize");
    raw.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))}))
        .await;
    let policy = next_request(&mut raw).await;
    assert_eq!(policy["method"], "featureSets/update");
    raw.send_json(json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}}))
        .await;
    let (s, mut streams) = connect.await.unwrap().unwrap();
    // What connecting reported is not compared (the state machine's is cleared alike).
    session_diags(&mut streams);
    let ids = [&init, &policy]
        .iter()
        .map(|r| r["id"].as_u64().expect("an integer id"))
        .collect();
    (s, streams, raw, ids)
}

fn session_diags(streams: &mut HostStreams) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(d) = streams.diagnostics.try_recv() {
        v.push(norm_session(&d));
    }
    v.sort();
    v
}

/// The next manifest change the session hands out, as the sets it declares after it.
async fn session_changed(s: &HostSession, streams: &mut HostStreams) -> Vec<String> {
    loop {
        let e = tokio::time::timeout(GUARD, streams.events.recv())
            .await
            .expect("no manifest change")
            .expect("the session ended");
        if let HostEvent::ManifestChange(_) = e {
            return sets(&s.manifest().expect("MCPL").0);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The state machine, driven as a driver drives it
// ---------------------------------------------------------------------------------------

struct Machine {
    host: HostState,
    now: Instant,
    /// The frames it wrote and the server has not read yet.
    wrote: Vec<Value>,
    outs: Vec<HostOutput>,
}

impl Machine {
    fn drain(&mut self) {
        while let Some(o) = self.host.poll_output() {
            match o.frame() {
                Some(t) => self.wrote.push(serde_json::from_str(&t).expect("json")),
                None => self.outs.push(o),
            }
        }
    }

    fn read(&mut self, line: &str) {
        self.host.handle_frame(self.now, line, 1024);
        self.drain();
    }

    /// The next request it wrote, skipping notifications.
    fn next_request(&mut self) -> Value {
        loop {
            assert!(!self.wrote.is_empty(), "no request written");
            let v = self.wrote.remove(0);
            if v.get("id").is_some() && v.get("method").is_some() {
                return v;
            }
        }
    }

    fn connected(m: Value) -> (Machine, Vec<u64>) {
        let now = Instant::now();
        let host = HostState::new(
            HostRules::new(POLICY.iter().copied()),
            now,
            SystemTime::UNIX_EPOCH,
        )
        .expect("rules");
        let mut h = Machine {
            host,
            now,
            wrote: Vec::new(),
            outs: Vec::new(),
        };
        h.host.start(now);
        h.drain();
        let init = h.next_request();
        assert_eq!(init["method"], "initialize");
        h.read(
            &json!({"jsonrpc": "2.0", "id": init["id"], "result": init_result(Some(m))})
                .to_string(),
        );
        let policy = h.next_request();
        assert_eq!(policy["method"], "featureSets/update");
        h.read(
            &json!({"jsonrpc": "2.0", "id": policy["id"], "result": {"accepted": true}})
                .to_string(),
        );
        assert!(h.host.is_ready());
        h.outs.clear();
        let ids = [&init, &policy]
            .iter()
            .map(|r| r["id"].as_u64().expect("an integer id"))
            .collect();
        (h, ids)
    }

    fn diags(&mut self) -> Vec<String> {
        let mut v: Vec<String> = self
            .outs
            .iter()
            .filter_map(|o| match o {
                HostOutput::Diagnostic(d) => Some(norm_state(d)),
                _ => None,
            })
            .collect();
        self.outs.clear();
        v.sort();
        v
    }

    fn sets(&self) -> Vec<String> {
        sets(&self.host.review().expect("MCPL").manifest_owned())
    }
}

// ---------------------------------------------------------------------------------------
// The comparisons
// ---------------------------------------------------------------------------------------

/// JSON-RPC 2.0 §5, §17.4: a response guessing the id of the fetch an announcement in the
/// same batch makes the host queue is a stray for both hosts, and the real answer settles
/// the fetch in both.
#[tokio::test]
async fn s5_both_hosts_read_an_answer_guessing_an_unwritten_id_as_a_stray() {
    let m0 = manifest(&["news"]);
    let (s, mut streams, mut raw, session_ids) = session_connected(m0.clone()).await;
    let (mut h, state_ids) = Machine::connected(m0);
    assert_eq!(session_ids, state_ids, "both number their requests alike");
    let guess = state_ids.iter().max().expect("ids") + 1;
    let batch = json!([
        announce(),
        {"jsonrpc": "2.0", "id": guess, "result": manifest(&["news", "forged"])},
    ])
    .to_string();

    raw.send(&batch).await;
    let fetch = next_request(&mut raw).await;
    h.read(&batch);
    let fetch_state = h.next_request();
    assert_eq!(fetch["method"], "mcpl/manifest");
    assert_eq!(fetch_state["method"], "mcpl/manifest");
    assert_eq!(
        fetch["id"],
        json!(guess),
        "the guess is right for the session"
    );
    assert_eq!(fetch_state["id"], json!(guess), "and for the state machine");
    // Nothing reviewed yet, the guess reported as a stray by both.
    assert_eq!(sets(&s.manifest().expect("MCPL").0), ["news"]);
    assert_eq!(h.sets(), ["news"]);
    assert!(h.host.is_pending(guess));
    let (session, state) = (session_diags(&mut streams), h.diags());
    assert_eq!(session, state);
    // The announcement's params are `{}` (§17.3 asks for `revision` and `domains`): both
    // report them, and fetch all the same.
    assert!(state.contains(&format!("stray {guess}")), "{state:?}");
    assert_eq!(state.len(), 2, "{state:?}");

    let real =
        json!({"jsonrpc": "2.0", "id": guess, "result": manifest(&["news", "sports"])}).to_string();
    raw.send(&real).await;
    h.read(&real);
    assert_eq!(session_changed(&s, &mut streams).await, ["news", "sports"]);
    assert_eq!(h.sets(), ["news", "sports"]);
    assert!(!h.host.is_pending(guess));
    let (session, state) = (session_diags(&mut streams), h.diags());
    assert_eq!(session, state);
    assert!(state.is_empty(), "{state:?}");
}

/// JSON-RPC 2.0 §5: an answer under its request's id written as a whole float settles it
/// in both hosts, with the same result, and both report its form.
#[tokio::test]
async fn s5_both_hosts_take_a_whole_float_id_and_report_it() {
    let m0 = manifest(&["news"]);
    let (s, mut streams, mut raw, _) = session_connected(m0.clone()).await;
    let (mut h, _) = Machine::connected(m0);

    let call = tokio::spawn(async move { s.request_raw("tools/list", json!({})).await });
    let asked = next_request(&mut raw).await;
    let id_state = h
        .host
        .request(h.now, "tools/list", json!({}), Duration::from_secs(30))
        .expect("sent");
    h.drain();
    let asked_state = h.next_request();
    assert_eq!(asked["id"], asked_state["id"], "both number it alike");
    assert_eq!(asked_state["id"], json!(id_state));

    let line = format!(r#"{{"jsonrpc":"2.0","id":{id_state}.0,"result":{{"tools":[]}}}}"#);
    raw.send(&line).await;
    h.read(&line);
    let got = tokio::time::timeout(GUARD, call)
        .await
        .expect("answered")
        .expect("the task ran")
        .expect("a result");
    let got_state = h.outs.iter().find_map(|o| match o {
        HostOutput::Response { id, outcome } if *id == id_state => outcome.clone().ok(),
        _ => None,
    });
    assert_eq!(Some(got), got_state);
    assert!(!h.host.is_pending(id_state));
    let (session, state) = (session_diags(&mut streams), h.diags());
    assert_eq!(session, state);
    assert_eq!(state, [format!("integral {id_state} {id_state}.0")]);
}
