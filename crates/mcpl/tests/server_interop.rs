//! Interop slips found against the other MCPL libraries (issue #21), on the wire: a host
//! spoken to in raw JSON lines over a real TCP connection drives a `Server`.

use mcpl::capability::Capability;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{Server, ServerBuilder};
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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = server.clone();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            server
                .serve(mcpl::transport::tcp::from_stream(stream))
                .await;
        });
        let (r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        RawHost {
            lines: BufReader::new(r).lines(),
            write: w,
            next_id: 0,
        }
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
