//! `mcpl serve` end to end: the reference server answers `initialize` over stdio, TCP and
//! WebSocket, and its advertised manifest carries the §17.2 revision that `mcpl digest`
//! computes and no validation error.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command as StdCommand, Stdio};

use assert_cmd::Command;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_mcpl");

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18",
        "capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},
        "clientInfo":{"name":"cli_serve","version":"0"}}})
}

/// Checks an initialize response: MCPL manifest present, §17.2 revision right, valid.
fn assert_initialize_response(line: &str) {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["id"], 1, "{v}");
    let manifest = &v["result"]["capabilities"]["experimental"]["mcpl"];
    assert_eq!(manifest["version"], "0.5", "{v}");
    let claimed = manifest["revision"].as_str().unwrap();

    let digest = Command::new(BIN)
        .args(["digest", "-"])
        .write_stdin(v["result"].to_string())
        .output()
        .unwrap();
    assert!(digest.status.success());
    assert_eq!(String::from_utf8(digest.stdout).unwrap().trim(), claimed);

    let validate = Command::new(BIN)
        .args(["validate", "--json", "-"])
        .write_stdin(manifest.to_string())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&validate.stdout).unwrap();
    assert!(validate.status.success(), "{report}");
}

#[test]
fn stdio_answers_initialize_and_ends_with_stdin() {
    let o = Command::new(BIN)
        .args(["serve", "--stdio"])
        .write_stdin(format!("{}\n", initialize()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let first = stdout.lines().next().expect("a response line");
    assert_initialize_response(first);

    // stdio is the default transport.
    let o = Command::new(BIN)
        .arg("serve")
        .write_stdin(format!("{}\n", initialize()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_initialize_response(String::from_utf8(o.stdout).unwrap().lines().next().unwrap());
}

/// A listening `mcpl serve`, killed when dropped.
struct Listening {
    child: Child,
    addr: String,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `mcpl serve FLAG 127.0.0.1:0` and reads the bound address from its first stderr
/// line (`mcpl serve: listening on SCHEME://ADDR`).
fn listen(flag: &str, scheme: &str) -> Listening {
    let mut child = StdCommand::new(BIN)
        .args(["serve", flag, "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let prefix = format!("mcpl serve: listening on {scheme}://");
    let addr = line
        .trim()
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Listening { child, addr }
}

#[test]
fn tcp_listener_answers_initialize() {
    let server = listen("--tcp", "tcp");
    let stream = std::net::TcpStream::connect(&server.addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    writer
        .write_all(format!("{}\n", initialize()).as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    assert_initialize_response(&line);
}

#[test]
fn ws_listener_answers_initialize() {
    let server = listen("--ws", "ws");
    let url = format!("ws://{}", server.addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let text = rt.block_on(async {
        let mut t = mcpl::transport::ws::connect(&url, None).await.unwrap();
        t.writer.send(&initialize().to_string()).await.unwrap();
        match t.reader.next_frame().await.unwrap() {
            Some(mcpl::transport::Frame::Text(s)) => s,
            other => panic!("unexpected frame {other:?}"),
        }
    });
    assert_initialize_response(&text);
}

#[test]
fn serve_takes_at_most_one_transport() {
    let o = Command::new(BIN)
        .args(["serve", "--stdio", "--tcp", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn unusable_listen_address_is_exit_2_with_the_reason() {
    let o = Command::new(BIN)
        .args(["serve", "--tcp", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert!(
        stderr.contains("cannot listen on tcp not-an-address"),
        "{stderr}"
    );
}
