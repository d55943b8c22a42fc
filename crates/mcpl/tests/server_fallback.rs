//! Wire-level tests of `ServerBuilder::mcp_fallback`: a scripted host (a real `Peer` over the
//! in-memory transport, real JSON lines) talks to a `Server` whose MCP methods are served by
//! a recording `McpFallback`, and checks that the MCP traffic reaches it while everything
//! MCPL stays with the session (§3.2, §5.3, §5.4).
#![cfg(feature = "runtime")]

use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::jsonrpc::{ErrorObject, RequestId};
use mcpl::peer::{IncomingMessage, Peer, PeerConfig, PeerError};
use mcpl::server::{
    BuildError, FallbackFuture, McpFallback, SendError, Server, ServerBuilder, Session,
};
use mcpl::transport::memory;
use serde_json::{json, Value};

/// What the fallback saw, in order: `request <method> <id>` / `notification <method>`.
type Log = Arc<Mutex<Vec<String>>>;

struct Recording {
    log: Log,
}

impl McpFallback for Recording {
    fn initialize(&self, _id: &RequestId, params: Value) -> FallbackFuture {
        self.log.lock().unwrap().push("initialize".into());
        let version = params["protocolVersion"].clone();
        Box::pin(async move {
            Ok(json!({"protocolVersion": version,
                "capabilities": {"tools": {"listChanged": true}, "resources": {},
                                 "experimental": {"inner": {}}},
                "serverInfo": {"name": "inner", "version": "9"},
                "instructions": "from the fallback"}))
        })
    }

    fn request(&self, id: &RequestId, method: &str, params: Option<Value>) -> FallbackFuture {
        self.log
            .lock()
            .unwrap()
            .push(format!("request {method} {id}"));
        let method = method.to_owned();
        Box::pin(async move {
            match method.as_str() {
                "resources/list" => Ok(json!({"resources": []})),
                "tools/list" => Ok(json!({"tools": [{"name": "inner_tool",
                    "inputSchema": {"type": "object"}}]})),
                "tools/call" => Ok(json!({"content": [{"type": "text", "text": "called"}],
                    "args": params})),
                _ => Err(ErrorObject::method_not_found(&method)),
            }
        })
    }

    fn notification(&self, method: &str, _params: Option<Value>) {
        self.log
            .lock()
            .unwrap()
            .push(format!("notification {method}"));
    }
}

/// A server with one push feature set and `tools` advertised, its MCP side the fallback.
fn builder(log: Log, sessions: Arc<Mutex<Vec<Session>>>) -> ServerBuilder {
    Server::builder("outer", "1")
        .feature_set("alerts", "Push alerts", &[Capability::PushEvents])
        .advertise(&[Capability::Tools])
        .mcp_fallback(move |session| {
            sessions.lock().unwrap().push(session);
            Arc::new(Recording { log: log.clone() })
        })
}

struct Host {
    peer: Peer,
    init: Value,
    log: Log,
    session: Session,
    incoming: mcpl::peer::Incoming,
}

async fn connect(mcpl: bool) -> Host {
    connect_with(mcpl, |b| b).await
}

/// [`connect`] to the server `more` makes of [`builder`]'s.
async fn connect_with(mcpl: bool, more: impl FnOnce(ServerBuilder) -> ServerBuilder) -> Host {
    let log: Log = Arc::default();
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let server = more(builder(log.clone(), sessions.clone()))
        .build()
        .unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    let caps = if mcpl {
        json!({"experimental": {"mcpl": {"version": "0.5", "pushEvents": true}}})
    } else {
        json!({})
    };
    let init = peer
        .request_raw(
            "initialize",
            Some(
                json!({"protocolVersion": "2025-06-18", "capabilities": caps,
                        "clientInfo": {"name": "scripted-host", "version": "0"}}),
            ),
        )
        .await
        .unwrap();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    assert_eq!(
        sessions.lock().unwrap().len(),
        1,
        "one fallback per connection"
    );
    Host {
        peer,
        init,
        log,
        session,
        incoming,
    }
}

fn err_of(r: Result<Value, PeerError>) -> ErrorObject {
    r.unwrap_err().remote().cloned().expect("a remote error")
}

fn logged(h: &Host) -> Vec<String> {
    h.log.lock().unwrap().clone()
}

#[tokio::test]
async fn s3_1_initialize_is_the_fallbacks_result_with_the_manifest_merged_in() {
    let h = connect(true).await;
    assert_eq!(h.init["protocolVersion"], "2025-06-18");
    assert_eq!(
        h.init["serverInfo"],
        json!({"name": "inner", "version": "9"})
    );
    assert_eq!(h.init["instructions"], "from the fallback");
    let caps = &h.init["capabilities"];
    assert_eq!(caps["tools"], json!({"listChanged": true}));
    assert_eq!(caps["resources"], json!({}));
    assert_eq!(caps["experimental"]["inner"], json!({}));
    let mcpl = &caps["experimental"]["mcpl"];
    assert_eq!(mcpl["version"], "0.5");
    assert!(mcpl["featureSets"]["alerts"].is_object());
    assert!(mcpl["revision"].as_str().unwrap().starts_with("sha256:"));
    h.peer.request_raw("ping", None).await.unwrap();
    assert_eq!(
        logged(&h),
        ["initialize", "notification notifications/initialized"]
    );
}

/// The author's `mcp_capability` is an explicit statement of what the server declares: under
/// the same name it wins over the fallback's (`experimental` member by member), where the
/// fallback names none it is added, and what only the builder derived (`tools` from
/// `advertise`) never replaces the fallback's (§5.1, §17.1).
#[tokio::test]
async fn s5_1_the_authors_mcp_capability_wins_over_the_fallbacks() {
    let h = connect_with(true, |b| {
        b.mcp_capability("resources", json!({"listChanged": false}))
            .mcp_capability("logging", json!({}))
            .mcp_capability(
                "experimental",
                json!({"inner": {"author": true}, "extra": {}}),
            )
    })
    .await;
    let caps = &h.init["capabilities"];
    assert_eq!(caps["resources"], json!({"listChanged": false}), "{caps}");
    assert_eq!(caps["logging"], json!({}), "{caps}");
    assert_eq!(caps["tools"], json!({"listChanged": true}), "{caps}");
    assert_eq!(
        caps["experimental"]["inner"],
        json!({"author": true}),
        "{caps}"
    );
    assert_eq!(caps["experimental"]["extra"], json!({}), "{caps}");
    assert_eq!(caps["experimental"]["mcpl"]["version"], "0.5", "{caps}");
}

/// `instructions` set on the builder is as explicit as an `mcp_capability`: it wins over the
/// fallback's; unset, the fallback's stand (see above).
#[tokio::test]
async fn the_authors_instructions_win_over_the_fallbacks() {
    let h = connect_with(true, |b| b.instructions("from the author")).await;
    assert_eq!(h.init["instructions"], "from the author", "{}", h.init);
    assert_eq!(h.init["serverInfo"]["name"], "inner", "{}", h.init);
}

#[tokio::test]
async fn s5_3_mcp_methods_reach_the_fallback_but_tools_call_waits_for_the_grant() {
    let h = connect(true).await;
    // Not MCPL's: served before the policy, by the fallback.
    let r = h.peer.request_raw("resources/list", None).await.unwrap();
    assert_eq!(r, json!({"resources": []}));
    let r = h.peer.request_raw("tools/list", None).await.unwrap();
    assert_eq!(r["tools"][0]["name"], "inner_tool");
    // tools/call needs `tools` (§5.4), unavailable before the policy Request (§5.3): the
    // session refuses it and the fallback never sees it.
    let e = err_of(
        h.peer
            .request_raw("tools/call", Some(json!({"name": "inner_tool"})))
            .await,
    );
    assert_eq!(e.code, -32002);
    assert!(!logged(&h)
        .iter()
        .any(|l| l.starts_with("request tools/call")));
    h.peer
        .request_raw(
            "featureSets/update",
            Some(json!({"effectiveCapabilities": ["tools", "pushEvents"]})),
        )
        .await
        .unwrap();
    let r = h
        .peer
        .request_raw("tools/call", Some(json!({"name": "inner_tool"})))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "called");
    assert_eq!(r["args"], json!({"name": "inner_tool"}));
    // An unknown method is the fallback's to answer.
    assert_eq!(
        err_of(h.peer.request_raw("vendor/thing", None).await).code,
        -32601
    );
    assert!(logged(&h)
        .iter()
        .any(|l| l.starts_with("request vendor/thing ")));
}

#[tokio::test]
async fn s5_4_mcpl_methods_and_removed_surfaces_never_reach_the_fallback() {
    let h = connect(true).await;
    for method in [
        "context/afterInference",
        "scope/elevate",
        "featureSets/changed",
        "push/event",
    ] {
        assert_eq!(
            err_of(h.peer.request_raw(method, Some(json!({}))).await).code,
            -32601,
            "{method}"
        );
    }
    h.peer
        .notify_raw("featureSets/changed", Some(json!({})))
        .await
        .unwrap();
    h.peer
        .notify_raw("notifications/cancelled", Some(json!({"requestId": 1})))
        .await
        .unwrap();
    // The manifest is the session's.
    let m = h.peer.request_raw("mcpl/manifest", None).await.unwrap();
    assert_eq!(m["version"], "0.5");
    h.peer.request_raw("ping", None).await.unwrap();
    assert_eq!(
        logged(&h),
        [
            "initialize",
            "notification notifications/initialized",
            "notification notifications/cancelled"
        ]
    );
}

#[tokio::test]
async fn s3_2_mcp_only_host_gets_the_fallbacks_tools_ungated() {
    let h = connect(false).await;
    let r = h
        .peer
        .request_raw("tools/call", Some(json!({"name": "inner_tool"})))
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "called");
    assert_eq!(
        err_of(h.peer.request_raw("mcpl/manifest", None).await).code,
        -32601
    );
}

#[tokio::test]
async fn s5_4_plain_mcp_senders_refuse_mcpl_methods() {
    let mut h = connect(true).await;
    for method in ["push/event", "inference/request", "channels/register"] {
        let e = h
            .session
            .send_mcp_request(method, Some(json!({})))
            .await
            .unwrap_err();
        assert_eq!(e, SendError::NotMcp(method.into()));
        assert_eq!(e.code(), "not_mcp");
    }
    let e = h
        .session
        .send_mcp_notification("mcpl/manifestChanged", Some(json!({})))
        .await
        .unwrap_err();
    assert_eq!(e, SendError::NotMcp("mcpl/manifestChanged".into()));
    // Plain MCP goes out, before any policy (§3.2: MCP needs no grant).
    h.session
        .send_mcp_notification("notifications/message", Some(json!({"level": "info"})))
        .await
        .unwrap();
    let Some(IncomingMessage::Notification(n)) = h.incoming.recv().await else {
        panic!("expected the notification");
    };
    assert_eq!(n.method, "notifications/message");
}

#[test]
fn tools_and_a_fallback_are_refused_at_build() {
    let e = builder(Arc::default(), Arc::default())
        .tool("t", "t", json!({"type": "object"}), |_, _| async {
            Err(ErrorObject::internal("unused"))
        })
        .build()
        .unwrap_err();
    assert_eq!(e, BuildError::ToolsWithFallback);
}

/// Tells when it is dropped; holds its connection's Session, as a bridge does.
struct DropSignal {
    tx: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    _session: Session,
}

impl McpFallback for DropSignal {
    fn initialize(&self, _id: &RequestId, _params: Value) -> FallbackFuture {
        Box::pin(async { Ok(json!({"protocolVersion": "2025-06-18", "capabilities": {}})) })
    }
    fn request(&self, _id: &RequestId, method: &str, _params: Option<Value>) -> FallbackFuture {
        let e = ErrorObject::method_not_found(method);
        Box::pin(async move { Err(e) })
    }
    fn notification(&self, _method: &str, _params: Option<Value>) {}
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test]
async fn the_fallback_is_dropped_when_its_connection_ends() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Mutex::new(Some(tx));
    let server = Server::builder("outer", "1")
        .mcp_fallback(move |session| {
            Arc::new(DropSignal {
                tx: Mutex::new(tx.lock().unwrap().take()),
                _session: session,
            })
        })
        .build()
        .unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    drop(server.start(server_t));
    peer.request_raw("initialize", Some(json!({"protocolVersion": "2025-06-18"})))
        .await
        .unwrap();
    drop(peer);
    // Bounded so a leak fails instead of hanging the suite.
    tokio::time::timeout(std::time::Duration::from_secs(10), rx)
        .await
        .expect("the fallback was not dropped when its connection ended")
        .unwrap();
}

/// A fallback declaring no MCP capability at all.
struct Bare;

impl McpFallback for Bare {
    fn initialize(&self, _id: &RequestId, params: Value) -> FallbackFuture {
        let version = params["protocolVersion"].clone();
        Box::pin(async move { Ok(json!({"protocolVersion": version, "capabilities": {}})) })
    }
    fn request(&self, _id: &RequestId, method: &str, _params: Option<Value>) -> FallbackFuture {
        let e = ErrorObject::method_not_found(method);
        Box::pin(async move { Err(e) })
    }
    fn notification(&self, _method: &str, _params: Option<Value>) {}
}

/// The `tools` the builder derives from `advertise` is added where the fallback names none
/// (it never replaces the fallback's, see above), and the author's `tools` wins over both.
#[tokio::test]
async fn s5_1_the_derived_tools_fills_in_and_the_authors_tools_wins() {
    for (declared, sent) in [
        (None, json!({})),
        (
            Some(json!({"listChanged": false})),
            json!({"listChanged": false}),
        ),
    ] {
        let mut b = Server::builder("outer", "1")
            .advertise(&[Capability::Tools])
            .mcp_fallback(|_| Arc::new(Bare));
        if let Some(d) = declared {
            b = b.mcp_capability("tools", d);
        }
        let server = b.build().unwrap();
        let (host_t, server_t) = memory::pair();
        let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
        let _session = server.start(server_t);
        let init = peer
            .request_raw("initialize", Some(json!({"protocolVersion": "2025-06-18"})))
            .await
            .unwrap();
        assert_eq!(init["capabilities"]["tools"], sent, "{init}");
    }
}

/// MCP's handshake with a fallback: the one `notifications/initialized` that acknowledges
/// the fallback's `initialize` answer reaches it; a second one acknowledges nothing and is
/// reported (`ignored_notification`) without reaching the fallback, as it is without one.
#[tokio::test]
async fn a_stray_initialized_notification_is_reported_not_handed_to_the_fallback() {
    for mcpl in [true, false] {
        let h = connect(mcpl).await;
        let mut diags = h.session.diagnostics();
        h.peer
            .notify_raw("notifications/initialized", None)
            .await
            .unwrap();
        h.peer.request_raw("ping", None).await.unwrap();
        let initialized = logged(&h)
            .iter()
            .filter(|l| *l == "notification notifications/initialized")
            .count();
        assert_eq!(initialized, 1, "mcpl {mcpl}: {:?}", logged(&h));
        let d = diags.try_recv().expect("reported");
        assert_eq!(d.code(), "ignored_notification", "{d}");
        assert!(d.detail().contains("notifications/initialized"), "{d}");
    }
}

/// Before the fallback's `initialize` answer, `notifications/initialized` acknowledges
/// nothing either: reported, not handed to the fallback.
#[tokio::test]
async fn an_initialized_notification_before_initialize_is_not_handed_to_the_fallback() {
    let log: Log = Arc::default();
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let server = builder(log.clone(), sessions).build().unwrap();
    let (host_t, server_t) = memory::pair();
    let (peer, _incoming) = Peer::new(host_t, PeerConfig::default());
    let session = server.start(server_t);
    let mut diags = session.diagnostics();
    peer.notify_raw("notifications/initialized", None)
        .await
        .unwrap();
    peer.request_raw("ping", None).await.unwrap();
    assert_eq!(*log.lock().unwrap(), Vec::<String>::new());
    let d = diags.try_recv().expect("reported");
    assert_eq!(d.code(), "ignored_notification", "{d}");
}
