//! Interop slips found against the other MCPL libraries (issue #21), on the wire: a host
//! spoken to in raw JSON lines over a real TCP connection drives a `Server`.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::handshake::{ToolContent, ToolsCallResult};
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{PushEvent, SendError, Server, ServerBuilder, Session};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// The host side of one TCP connection, in raw lines.
struct RawHost {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    next_id: u64,
}

impl RawHost {
    /// Serves one connection of `server` on a fresh loopback listener and dials it.
    async fn connect(server: &Server) -> RawHost {
        Self::connect_with_session(server).await.0
    }

    /// [`Self::connect`], and the server's [`Session`] of the connection (taken before
    /// anything is sent).
    async fn connect_with_session(server: &Server) -> (RawHost, Session) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = server.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let session = server.start(mcpl::transport::tcp::from_stream(stream));
            let _ = tx.send(session);
        });
        let (r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        let host = RawHost {
            lines: BufReader::new(r).lines(),
            write: w,
            next_id: 0,
        };
        (host, rx.await.unwrap())
    }

    async fn send(&mut self, v: Value) {
        self.write
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Sends a request and returns the response with its id, answering nothing else: any
    /// other line that comes first is returned in `others`.
    async fn request(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let mut others = Vec::new();
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .unwrap()
                .expect("server hung up");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(id)) && v.get("method").is_none() {
                return (v, others);
            }
            others.push(v);
        }
    }

    /// `initialize` with `mcpl` as the host's `experimental.mcpl` (none when `None`), then
    /// `notifications/initialized`.
    async fn initialize(&mut self, mcpl: Option<Value>) -> Value {
        let mut caps = json!({});
        if let Some(m) = mcpl {
            caps = json!({"experimental": {"mcpl": m}});
        }
        let (init, _) = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": caps,
                       "clientInfo": {"name": "raw-host", "version": "1"}}),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }
}

fn hook_server(inject: bool) -> ServerBuilder {
    Server::builder("hooks", "1.0.0")
        .feature_set(
            "notes.context",
            "Notes before the user message",
            &[Capability::InjectBeforeUser],
        )
        .on_before_inference("notes.context", move |_g, _p| async move {
            let injections = inject
                .then(|| ContextInjection::new("notes", Position::BeforeUser, "a note"))
                .into_iter();
            Ok(BeforeInferenceResult::with_injections(injections))
        })
}

const HOST_MCPL: &str =
    r#"{"version": "0.5", "contextHooks": {"beforeInference": true}, "featureSets": true}"#;

fn turn() -> Value {
    json!({"inferenceId": "inf_1", "conversationId": "c1", "turnIndex": 0})
}

/// §6.5 says the server's hook answer carries `featureSet` and is silent for an answer that
/// injects nothing; we name the hook's set in every answer (the other libraries require it).
#[tokio::test]
async fn s6_5_hook_answers_that_inject_nothing_name_the_feature_set() {
    // The handler injects nothing.
    let server = hook_server(false).build().unwrap();
    let mut host = RawHost::connect(&server).await;
    host.initialize(Some(serde_json::from_str(HOST_MCPL).unwrap()))
        .await;
    let grant =
        json!({"effectiveCapabilities": ["contextHooks.beforeInference.inject.beforeUser"]});
    let (receipt, _) = host.request("featureSets/update", grant).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let (r, _) = host.request("context/beforeInference", turn()).await;
    assert_eq!(
        r["result"],
        json!({"featureSet": "notes.context", "contextInjections": []})
    );

    // The set disabled by the host: the hook does not run, the empty answer names it.
    let server = hook_server(true).build().unwrap();
    let mut host = RawHost::connect(&server).await;
    host.initialize(Some(serde_json::from_str(HOST_MCPL).unwrap()))
        .await;
    let grant = json!({"effectiveCapabilities": ["contextHooks.beforeInference.inject.beforeUser"],
                       "disabled": ["notes.context"]});
    let (receipt, _) = host.request("featureSets/update", grant).await;
    assert_eq!(receipt["result"]["accepted"], true, "{receipt}");
    let (r, _) = host.request("context/beforeInference", turn()).await;
    assert_eq!(
        r["result"],
        json!({"featureSet": "notes.context", "contextInjections": []})
    );
}

/// Our host keeps accepting an answer without `featureSet` when it injects nothing.
#[tokio::test]
async fn host_accepts_an_empty_hook_answer_without_feature_set() {
    use mcpl::host::{before_inference, HostConfig, HostSession};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_side = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        let manifest = json!({"version": "0.5", "contextHooks": {"beforeInference": {"inject": {"beforeUser": true}}},
            "featureSets": {"notes.context": {"description": "d", "uses": ["contextHooks.beforeInference.inject.beforeUser"]}}});
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            let Some(id) = v.get("id").cloned() else {
                continue;
            };
            let result = match v["method"].as_str() {
                Some("initialize") => json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": manifest}},
                    "serverInfo": {"name": "bare", "version": "1"}}),
                Some("featureSets/update") => json!({"accepted": true}),
                // The answer other implementations send: no `featureSet`.
                Some("context/beforeInference") => json!({"contextInjections": []}),
                _ => json!({}),
            };
            let out = json!({"jsonrpc": "2.0", "id": id, "result": result});
            w.write_all(format!("{out}\n").as_bytes()).await.unwrap();
            if v["method"] == "context/beforeInference" {
                break;
            }
        }
    });
    let config = HostConfig {
        policy: vec!["contextHooks.beforeInference.inject.*".into()],
        ..HostConfig::default()
    };
    let transport = mcpl::transport::tcp::connect(addr).await.unwrap();
    let (session, _streams) = HostSession::connect(transport, config).await.unwrap();
    let injections = before_inference(&[&session], &turn()).await;
    assert!(injections.before_user.is_empty());
    assert_eq!(injections.consulted, ["bare"]);
    assert!(
        injections.failures.is_empty() && injections.rejected.is_empty(),
        "an empty answer is neither a failure nor a rejection: {injections:?}"
    );
    server_side.await.unwrap();
}

fn tool_server() -> Server {
    Server::builder("tools", "1.0.0")
        .feature_set("alerts", "Alerts", &[Capability::PushEvents])
        .tool(
            "echo",
            "Echo",
            json!({"type": "object"}),
            |_s, p| async move {
                let text = p
                    .arguments
                    .map(|a| a["text"].to_string())
                    .unwrap_or_default();
                Ok(ToolsCallResult {
                    content: vec![ToolContent::text(text)],
                    is_error: None,
                    state: None,
                    extra: Default::default(),
                })
            },
        )
        .build()
        .unwrap()
}

/// A host advertising MCPL 0.4 (and sending no policy Request, as the public 0.4 hosts do)
/// and a host advertising no MCPL are both served as plain MCP hosts (§3.2): `tools/call`
/// works without a grant, MCPL methods are unknown, and the application's MCPL sends are
/// refused locally. Only the 0.4 host gets a diagnostic naming its version.
#[tokio::test]
async fn s3_2_a_host_of_another_mcpl_version_is_served_as_a_plain_mcp_host() {
    let cases = [
        (
            Some(json!({"version": "0.4", "pushEvents": true, "featureSets": true})),
            Some("\"0.4\""),
        ),
        (None, None),
    ];
    for (host_mcpl, named) in cases {
        let server = tool_server();
        let (mut host, session) = RawHost::connect_with_session(&server).await;
        let mut diags = session.diagnostics();
        let init = host.initialize(host_mcpl.clone()).await;
        // The server still advertises its manifest (the host may ignore it).
        assert_eq!(
            init["result"]["capabilities"]["experimental"]["mcpl"]["version"],
            "0.5"
        );
        let (r, others) = host
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
            )
            .await;
        assert_eq!(
            r["result"]["content"][0]["text"], "\"hi\"",
            "{host_mcpl:?}: {r}"
        );
        assert!(others.is_empty(), "the server sent {others:?}");
        let (r, _) = host.request("tools/list", json!({})).await;
        assert_eq!(r["result"]["tools"][0]["name"], "echo");
        // MCPL does not exist on this connection.
        let (r, _) = host
            .request(
                "featureSets/update",
                json!({"effectiveCapabilities": ["pushEvents"]}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32601, "{r}");
        assert!(!session.is_mcpl());
        let e = session
            .push_event(PushEvent::text("alerts", "x"))
            .await
            .unwrap_err();
        assert_eq!(e, SendError::McpOnly);
        assert!(e.to_string().contains("plain MCP host"), "{e}");
        let mut seen = Vec::new();
        while let Ok(d) = diags.try_recv() {
            seen.push(d);
        }
        // The refused push is this server's own mistake (it did not check is_mcpl).
        assert!(
            seen.iter()
                .any(|d| d.code() == "send_refused" && d.is_author_mistake()),
            "{seen:?}"
        );
        let version: Vec<_> = seen
            .iter()
            .filter(|d| d.code() == "host_mcpl_version")
            .collect();
        match named {
            Some(named) => {
                assert_eq!(version.len(), 1, "{seen:?}");
                assert!(
                    version[0].detail().contains(named),
                    "{}",
                    version[0].detail()
                );
            }
            None => assert!(version.is_empty(), "no MCPL, nothing to diagnose: {seen:?}"),
        }
        // Nothing server-initiated arrived: a ping is answered with nothing before it.
        let (_, others) = host.request("ping", json!({})).await;
        assert!(others.is_empty(), "the server sent {others:?}");
    }
}
