//! What `mcpl inspect`'s tests share: starting `mcpl inspect` and reading its first stderr
//! line (the dashboard URL with its token), plain HTTP requests to the dashboard, and its
//! server-sent events. Every wait is bounded ([`WAIT`]).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `mcpl` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcpl");
/// The scripted server fixture.
pub const SCRIPTED: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
/// Bound on every wait of these tests.
pub const WAIT: Duration = Duration::from_secs(30);

/// A running `mcpl inspect` with its dashboard address and token.
pub struct Inspect {
    /// The process.
    pub child: Child,
    /// The dashboard's port.
    pub port: u16,
    /// The run's token.
    pub token: String,
}

impl Drop for Inspect {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Inspect {
    /// Starts `mcpl inspect --port 0 ARGS` and reads its first stderr line, which must be
    /// exactly `mcpl inspect: http://HOST:PORT/?token=TOKEN` (`127.0.0.1` unless `--host`);
    /// requests go to `127.0.0.1:PORT`.
    pub fn start(args: &[&str]) -> Inspect {
        Self::start_with_env(args, &[])
    }

    /// [`Self::start`] with extra environment variables for the inspector.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Inspect {
        Self::start_with(args, env, "5")
    }

    /// [`Self::start_with_env`] with `--timeout SECS` (each wait of the host).
    pub fn start_with(args: &[&str], env: &[(&str, &str)], timeout: &str) -> Inspect {
        let mut child = Command::new(BIN)
            .args(["inspect", "--port", "0", "--timeout", timeout])
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcpl inspect");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        // Keep draining stderr so the inspector never blocks on it.
        thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = stderr.read_to_end(&mut sink);
        });
        let url = first
            .trim_end()
            .strip_prefix("mcpl inspect: http://")
            .unwrap_or_else(|| panic!("unexpected first stderr line: {first:?}"));
        let (authority, token) = url.split_once("/?token=").expect("url with token");
        let (_, port) = authority.rsplit_once(':').expect("HOST:PORT");
        assert_eq!(token.len(), 64, "a 32-byte hex token");
        Inspect {
            child,
            port: port.parse().unwrap(),
            token: token.to_owned(),
        }
    }

    /// The dashboard's `Host`, `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// One HTTP request: `(status, lower-cased headers, body)`.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&str>,
    ) -> (u16, String, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        let has_host = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host"));
        if !has_host {
            req.push_str(&format!("Host: {}\r\n", self.host()));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = body.unwrap_or("");
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, rest) = raw.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let head = head.to_ascii_lowercase();
        let body = if head.contains("transfer-encoding: chunked") {
            dechunk(rest)
        } else {
            rest.to_owned()
        };
        (status, head, body)
    }

    /// `GET path` with the token header; the body as JSON.
    pub fn get(&self, path: &str) -> Value {
        let (status, _, body) =
            self.request("GET", path, &[("X-MCPL-Token", self.token.clone())], None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// `POST path` with a JSON body and the token; the `{ok, result|error}` reply.
    pub fn post(&self, path: &str, body: Value) -> Value {
        let (_, _, reply) = self.request(
            "POST",
            path,
            &[
                ("X-MCPL-Token", self.token.clone()),
                ("Content-Type", "application/json".into()),
            ],
            Some(&body.to_string()),
        );
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("POST {path}: {e}: {reply}"))
    }

    /// Opens the event stream.
    pub fn events(&self) -> Events {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        write!(
            s,
            "GET /api/events?token={} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            self.token,
            self.host()
        )
        .unwrap();
        let mut events = Events {
            reader: BufReader::new(s),
        };
        // The head, then `hello`: from here on every change is on the stream.
        let mut line = String::new();
        loop {
            line.clear();
            events.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            assert!(!line.is_empty(), "the event stream closed");
        }
        let hello = events.next(Instant::now() + WAIT).expect("hello");
        assert_eq!(hello["type"], "hello");
        events
    }

    /// Waits (on the event stream) until the connection state is `ready`; returns the state.
    pub fn ready(&self, events: &mut Events) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = self.get("/api/state");
            match s["connection"]["phase"].as_str() {
                Some("ready") if s["tools"].is_object() => return s,
                Some("closed") => panic!("the connection closed: {}", s["connection"]),
                _ => {}
            }
            events.next(deadline).expect("state changes until ready");
        }
    }
}

/// Decodes a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// The dashboard's server-sent events.
pub struct Events {
    reader: BufReader<TcpStream>,
}

impl Events {
    /// The next event's data as JSON, or `None` at `deadline` or the end of the stream.
    pub fn next(&mut self, deadline: Instant) -> Option<Value> {
        let mut line = String::new();
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.reader
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .ok()?;
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            // Chunk-size lines and blank lines carry nothing; data lines carry one event.
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                return serde_json::from_str(data).ok();
            }
        }
    }

    /// Reads events until `pred` holds for one; returns it.
    pub fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.next(deadline) {
                Some(v) if pred(&v) => return v,
                Some(_) => {}
                None => panic!("no event {what} within {WAIT:?}"),
            }
        }
    }
}

impl Inspect {
    /// `http://127.0.0.1:PORT/?token=TOKEN`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?token={}", self.port, self.token)
    }
}
