//! The checker's own connection: newline-delimited JSON over a child's stdio or a TCP
//! stream, read on a thread so every wait is a bounded `recv_timeout`, with an optional
//! JSON Lines transcript of every frame.
//!
//! WebSocket targets use `mcpl::transport::ws` on a private tokio runtime thread and feed
//! the same event channel.
//!
//! This is deliberately not `mcpl::peer`: the checker needs raw frames (junk lines,
//! notifications posing as requests, responses to ids it never sent, batches) that a
//! well-behaved peer would answer or hide for it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// Longest accepted line from the server; a longer one ends the connection (16 MiB).
const MAX_LINE: u64 = 16 * 1024 * 1024;

/// What the reader thread saw.
#[derive(Debug)]
pub enum Event {
    /// A line that parsed as JSON.
    Frame(Value),
    /// A line that is not JSON (kept for the report).
    Junk(String),
    /// End of stream, a read error, or an over-long line.
    Closed(String),
}

/// A JSON Lines transcript: `{direction, time, message}` per frame.
#[derive(Debug, Clone)]
pub struct Transcript(Arc<Mutex<BufWriter<File>>>);

impl Transcript {
    /// Creates (truncates) `path`.
    pub fn create(path: &std::path::Path) -> io::Result<Transcript> {
        Ok(Transcript(Arc::new(Mutex::new(BufWriter::new(
            File::create(path)?,
        )))))
    }

    /// Appends one frame; `direction` is `sent` or `received`. Write errors are reported
    /// once on stderr rather than aborting the run.
    fn write(&self, direction: &str, message: Value) {
        let line = json!({ "direction": direction, "time": rfc3339(SystemTime::now()), "message": message });
        if let Ok(mut w) = self.0.lock() {
            if writeln!(w, "{line}").and_then(|()| w.flush()).is_err() {
                eprintln!("mcpl check: cannot write the transcript");
            }
        }
    }
}

/// Formats a time as RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant), valid for the Unix era.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Where [`Conn::send`] writes.
enum Sink {
    /// A byte stream (child stdin, TCP) carrying newline-delimited JSON.
    Bytes(Box<dyn Write + Send>),
    /// The WebSocket writer task; one message text per frame.
    Ws(tokio::sync::mpsc::UnboundedSender<String>),
}

/// A live connection to the server under test.
pub struct Conn {
    writer: Sink,
    rx: Receiver<Event>,
    child: Option<Child>,
    tcp: Option<TcpStream>,
    transcript: Option<Transcript>,
}

impl Conn {
    /// Spawns `argv` and talks over its stdin/stdout (stderr is inherited).
    pub fn spawn(argv: &[String], transcript: Option<Transcript>) -> io::Result<Conn> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("child has no stdio pipes"));
        };
        let rx = start_reader(stdout, transcript.clone());
        Ok(Conn {
            writer: Sink::Bytes(Box::new(stdin)),
            rx,
            child: Some(child),
            tcp: None,
            transcript,
        })
    }

    /// Connects to `host:port`, waiting at most `timeout` per resolved address.
    pub fn tcp(addr: &str, timeout: Duration, transcript: Option<Transcript>) -> io::Result<Conn> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for sa in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let rx = start_reader(s.try_clone()?, transcript.clone());
                    return Ok(Conn {
                        writer: Sink::Bytes(Box::new(s.try_clone()?)),
                        rx,
                        child: None,
                        tcp: Some(s),
                        transcript,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends one message as one line.
    pub fn send(&mut self, message: &Value) -> io::Result<()> {
        if let Some(t) = &self.transcript {
            t.write("sent", message.clone());
        }
        match &mut self.writer {
            Sink::Bytes(w) => {
                let mut line = message.to_string();
                line.push('\n');
                w.write_all(line.as_bytes())?;
                w.flush()
            }
            Sink::Ws(tx) => tx
                .send(message.to_string())
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")),
        }
    }

    /// Connects to a `ws://` or `wss://` URL (TLS trusts `tls`), bounded by `timeout`.
    pub fn ws(
        url: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
        transcript: Option<Transcript>,
    ) -> io::Result<Conn> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        let (tx, rx) = mpsc::channel();
        let (out_tx, mut out_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let url = url.to_owned();
        let tr = transcript.clone();
        thread::spawn(move || {
            runtime.block_on(async move {
                let connect = mcpl::transport::ws::connect(&url, tls);
                let mut transport = match tokio::time::timeout(timeout, connect).await {
                    Ok(Ok(t)) => t,
                    Ok(Err(e)) => {
                        let _ = ready_tx.send(Err(io::Error::other(e.to_string())));
                        return;
                    }
                    Err(_) => {
                        let _ = ready_tx.send(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "WebSocket connect timed out",
                        )));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                loop {
                    tokio::select! {
                        out = out_rx.recv() => match out {
                            Some(text) => {
                                if let Err(e) = transport.writer.send(&text).await {
                                    let _ = tx.send(Event::Closed(format!("write error: {e}")));
                                    return;
                                }
                            }
                            None => {
                                let _ = transport.writer.close().await;
                                return;
                            }
                        },
                        frame = transport.reader.next_frame() => {
                            let event = match frame {
                                Ok(Some(mcpl::transport::Frame::Text(text))) => classify(&text, tr.as_ref()),
                                Ok(Some(other)) => Event::Junk(format!("{other:?}")),
                                Ok(None) => Event::Closed("end of stream".into()),
                                Err(e) => Event::Closed(format!("read error: {e}")),
                            };
                            let done = matches!(event, Event::Closed(_));
                            if tx.send(event).is_err() || done {
                                return;
                            }
                        }
                    }
                }
            });
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Conn {
                writer: Sink::Ws(out_tx),
                rx,
                child: None,
                tcp: None,
                transcript,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("WebSocket thread ended")),
        }
    }

    /// The next event, or `None` when `deadline` passes first.
    pub fn recv(&self, deadline: Instant) -> Option<Event> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(e) => Some(e),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Event::Closed("connection closed".into())),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(s) = &self.tcp {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(child) = &mut self.child {
            // The run is over: a server that would not exit on its own must not outlive it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_reader<R: Read + Send + 'static>(
    source: R,
    transcript: Option<Transcript>,
) -> Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(source);
        loop {
            let mut buf = Vec::new();
            let n = match reader
                .by_ref()
                .take(MAX_LINE + 1)
                .read_until(b'\n', &mut buf)
            {
                Ok(0) => {
                    let _ = tx.send(Event::Closed("end of stream".into()));
                    return;
                }
                Ok(n) => n,
                Err(e) => {
                    let _ = tx.send(Event::Closed(format!("read error: {e}")));
                    return;
                }
            };
            if n as u64 > MAX_LINE {
                let _ = tx.send(Event::Closed(format!("line longer than {MAX_LINE} bytes")));
                return;
            }
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            if tx.send(classify(text, transcript.as_ref())).is_err() {
                return;
            }
        }
    });
    rx
}

/// One received text: a JSON frame, or junk. Logged to the transcript either way (junk as
/// a JSON string).
fn classify(text: &str, transcript: Option<&Transcript>) -> Event {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => {
            if let Some(t) = transcript {
                t.write("received", v.clone());
            }
            Event::Frame(v)
        }
        Err(_) => {
            if let Some(t) = transcript {
                t.write("received", Value::String(text.to_owned()));
            }
            Event::Junk(text.to_owned())
        }
    }
}

/// A rustls client configuration trusting the PEM certificates in `ca_file` (ring provider).
pub fn tls_config(ca_file: &std::path::Path) -> io::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| io::Error::other(format!("{}: {e}", ca_file.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| io::Error::other(format!("{}: {e}", ca_file.display())))?;
        // A single unusable certificate in a system bundle is skipped, not fatal.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(io::Error::other(format!(
            "{}: no usable CA certificates",
            ca_file.display()
        )));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io::Error::other(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_200_123); // 2024-03-01
        assert_eq!(rfc3339(t), "2024-03-01T00:00:00.123Z");
    }
}
