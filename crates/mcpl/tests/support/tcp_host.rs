//! A host speaking raw JSON lines to a server over TCP, so every frame the server sends is
//! under test: shared by the wire-level server tests (tools, manifest edits).
#![allow(dead_code)] // each test file uses a different part

use mcpl::server::Server;
use mcpl::transport::tcp::Listener;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A host speaking raw JSON lines over TCP.
pub struct RawHost {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    next_id: u64,
}

impl RawHost {
    /// Connects to a fresh TCP listener served by `server` and answers `initialize` as an MCP
    /// host (no `experimental.mcpl`: tools are not gated, §3.2); returns the initialize result.
    pub async fn connect(server: &Server) -> (RawHost, Value) {
        Self::connect_with(server, json!({})).await
    }

    /// Like [`Self::connect`], advertising `capabilities` in `initialize`.
    pub async fn connect_with(server: &Server, capabilities: Value) -> (RawHost, Value) {
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = server.clone();
        tokio::spawn(async move {
            let (transport, _) = listener.accept().await.unwrap();
            server.serve(transport).await;
        });
        let (read, write) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut host = RawHost {
            lines: BufReader::new(read).lines(),
            write,
            next_id: 0,
        };
        let init = host
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                       "clientInfo": {"name": "raw-host", "version": "0"}}),
            )
            .await;
        host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        (host, init["result"].clone())
    }

    /// Writes one frame.
    pub async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next frame the server sent.
    pub async fn frame(&mut self) -> Value {
        let line = self.lines.next_line().await.unwrap().expect("a frame");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends a request and returns its whole response (no other frame may come first).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let r = self.frame().await;
        assert_eq!(r["id"], json!(id), "{r}");
        r
    }

    /// The names `tools/list` answers.
    pub async fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({})).await;
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Calls tool `name` with `arguments`.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }
}
