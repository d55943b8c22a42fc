//! The dashboard's HTTP side (axum): the embedded page, a JSON API over the engine's
//! operations, and live updates as server-sent events.
//!
//! Security (every response, whatever the route):
//! - a `Host` header that is not the dashboard's own address (`127.0.0.1:PORT`,
//!   `localhost:PORT`, `[::1]:PORT`, or `--host`'s `HOST:PORT`; listening on every address,
//!   `--host 0.0.0.0` or `::`, any IP address with `PORT`, never a name) gets `403`, and so
//!   does an `Origin` that is not `http://` one of those (DNS rebinding, cross-site
//!   requests);
//! - then every request (the page, its script and style, the API, the event stream) needs
//!   the per-run random token, as `?token=` or an `X-MCPL-Token` header: `401` without it;
//! - API writes are `POST` with `Content-Type: application/json` (no form can send that
//!   cross-site without a preflight), a body of at most [`MAX_BODY`] bytes (`413`) that
//!   arrives within [`BODY_TIMEOUT`] (`408`); a write, once its body is in, runs to its end
//!   even when the client goes away before its answer, at most [`MAX_WRITES`] at once
//!   (`503`; a restart always runs);
//! - the page renders server content as text only (`textContent`, never HTML), under a
//!   `Content-Security-Policy` that allows no inline script and no other origin, with
//!   `Referrer-Policy: no-referrer` so the token never leaves in a `Referer`.
//!
//! Bounds (a client needs no token to open a connection, so these hold before it is read):
//! at most [`MAX_CONNECTIONS`] connections at once (one more is closed as soon as it is
//! accepted), and each must send a request head within [`HEAD_TIMEOUT`] of connecting or of
//! its previous response (a keep-alive connection idle longer is closed), and take each
//! response's bytes within [`WRITE_TIMEOUT`] (else it is closed), so a client trickling its
//! headers (slowloris), holding idle connections or never reading its answers cannot take
//! them all.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::broadcast::error::RecvError;

use super::engine::{AutoAnswer, Engine};
use super::log::{Dir, Filter};
use super::ops::OpResult;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The policy the page runs under: its own script and style only, images and audio only as
/// `data:` URLs (content blocks), no frames, no forms, no other origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; media-src data:; connect-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How often at most the event stream reports new log entries.
const LOG_TICK_EVERY: Duration = Duration::from_millis(250);

/// Most dashboard connections open at once (the page needs a few: its event stream and its
/// requests); a connection past it is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 256;
/// Longest a connection may take to send a request head, from its opening or its previous
/// response; it is closed then.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a response may wait for the client to take it (its bytes not written, the
/// socket's buffers full); the connection is closed then.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest an API write's body may take to arrive (`408` then).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body of an API write, in bytes (`413` past it).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

/// Most API writes running at once (each runs to its end even when its client has gone,
/// so they are counted apart from connections); one more is answered `503`. A restart is
/// not counted: it is the way out when every write waits on a server that does not answer.
pub const MAX_WRITES: usize = 256;

/// A bound dashboard listener, not yet serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    host: String,
    port: u16,
    token: String,
}

/// A fresh per-run token: 32 random bytes, hex.
fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Binds `host:port` (port 0: any free one).
pub async fn bind(host: &str, port: u16) -> io::Result<Server> {
    let bare = host.trim_matches(|c| c == '[' || c == ']');
    let listener = tokio::net::TcpListener::bind((bare, port)).await?;
    let port = listener.local_addr()?.port();
    let host = if bare.contains(':') {
        format!("[{bare}]")
    } else {
        bare.to_owned()
    };
    Ok(Server {
        listener,
        host,
        port,
        token: new_token()?,
    })
}

/// What every handler shares.
struct App {
    engine: Arc<Engine>,
    token: String,
    /// `Host` values that name the dashboard.
    hosts: Vec<String>,
    /// The dashboard's port.
    port: u16,
    /// Listening on every address (`--host 0.0.0.0` or `::`): a `Host` that is an IP
    /// address with the dashboard's port names it too (how a client on the network reaches
    /// it). DNS rebinding needs a name the attacker controls, so an IP literal is no such
    /// request; names stay refused.
    any_address: bool,
    /// Slots of the API writes running ([`MAX_WRITES`]).
    writes: Arc<tokio::sync::Semaphore>,
}

impl App {
    /// Whether `authority` (a `Host` value, or an `Origin` without `http://`) names this
    /// dashboard.
    fn names_dashboard(&self, authority: &str) -> bool {
        self.hosts.iter().any(|a| a.eq_ignore_ascii_case(authority))
            || (self.any_address
                && authority
                    .parse::<std::net::SocketAddr>()
                    .is_ok_and(|a| a.port() == self.port))
    }
}

impl Server {
    /// The dashboard's URL with its token.
    pub fn url(&self) -> String {
        format!("http://{}:{}/?token={}", self.host, self.port, self.token)
    }

    /// Serves the dashboard until the listener fails: each connection on its own task, at
    /// most [`MAX_CONNECTIONS`] at once, each request head within [`HEAD_TIMEOUT`].
    pub async fn serve(self, engine: Arc<Engine>) -> io::Result<()> {
        let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{}", self.port))
            .collect();
        let own = format!("{}:{}", self.host, self.port);
        if !hosts.contains(&own) {
            hosts.push(own);
        }
        let any_address = self
            .host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        let app = Arc::new(App {
            engine,
            token: self.token,
            hosts,
            port: self.port,
            any_address,
            writes: Arc::new(tokio::sync::Semaphore::new(MAX_WRITES)),
        });
        let router = router(app);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) if is_transient(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, say: wait for some to close, as hyper does.
                    crate::term::emit_err(&format!("mcpl inspect: accept failed: {e}\n"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let router = router.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut router = router.clone();
                    tower_service::Service::call(&mut router, req.map(Body::new))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(WriteDeadline::new(stream)), service)
                    .await;
                drop(slot);
            });
        }
    }
}

/// A connection whose writes fail once one has waited [`WRITE_TIMEOUT`] without progress:
/// hyper's request-head deadline does not run while a response is being written, so a
/// client that sends requests and never reads the answers held its connection for ever.
struct WriteDeadline {
    stream: tokio::net::TcpStream,
    /// Running while a write waits; cleared by any progress.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteDeadline {
    fn new(stream: tokio::net::TcpStream) -> WriteDeadline {
        WriteDeadline {
            stream,
            timer: None,
        }
    }

    /// `poll` as it went, a wait past [`WRITE_TIMEOUT`] turned into an error.
    fn deadline<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.timer = None;
            return poll;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_TIMEOUT)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no data for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.deadline(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.deadline(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.deadline(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.deadline(cx, poll)
    }
}

/// An accept error about one connection only (the listener goes on at once).
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route(
            "/app.js",
            get(|| async { asset(APP_JS, "text/javascript") }),
        )
        .route("/app.css", get(|| async { asset(APP_CSS, "text/css") }))
        .route("/api/state", get(state))
        .route("/api/log", get(log_page))
        .route("/api/log/{seq}", get(log_entry))
        .route("/api/export", get(export))
        .route("/api/events", get(events))
        .route("/api/grant/preview", post(grant_preview))
        .route("/api/grant", post(grant))
        .route("/api/narrow", post(narrow))
        .route("/api/tools/list", post(tools_list))
        .route("/api/tools/call", post(tools_call))
        .route("/api/hook", post(hook))
        .route("/api/channels/open", post(channel_open))
        .route("/api/channels/close", post(channel_close))
        .route("/api/channels/publish", post(publish))
        .route("/api/channels/stream", post(stream))
        .route("/api/manifest/refresh", post(manifest_refresh))
        .route("/api/raw", post(raw))
        .route("/api/answer", post(answer))
        .route("/api/auto-answer", post(auto_answer))
        .route("/api/restart", post(restart))
        .route("/api/check", post(check))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Compares without an early exit, so the time taken says nothing about the token.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token a request carries, from `?token=` or the `X-MCPL-Token` header.
fn token_of(req: &Request) -> Option<String> {
    if let Some(t) = req
        .headers()
        .get("x-mcpl-token")
        .and_then(|v| v.to_str().ok())
    {
        return Some(t.to_owned());
    }
    req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .map(str::to_owned)
    })
}

fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (k, v) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    r
}

fn refuse(status: StatusCode, why: &str) -> Response {
    secure((status, Json(json!({ "ok": false, "error": why }))).into_response())
}

fn too_large() -> (StatusCode, String) {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("API writes take a body of at most {MAX_BODY} bytes"),
    )
}

/// A write's body, read whole: at most [`MAX_BODY`] bytes, within [`BODY_TIMEOUT`]; else the
/// status and reason to refuse it with.
async fn read_body(body: Body) -> Result<Body, (StatusCode, String)> {
    let read = async {
        let mut data = body.into_data_stream();
        let mut out = Vec::new();
        while let Some(chunk) = data.next().await {
            let chunk = chunk.map_err(|e| {
                (
                    StatusCode::BAD_REQUEST,
                    format!("the request body could not be read: {e}"),
                )
            })?;
            if out.len() + chunk.len() > MAX_BODY {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Body::from(out))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
        )),
    }
}

/// Host and Origin first (403), then the token (401), then the JSON content type of writes
/// and their body (bounded in size and time).
async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    if !host.is_some_and(|h| app.names_dashboard(h)) {
        return refuse(
            StatusCode::FORBIDDEN,
            "the Host header does not name this dashboard",
        );
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let ok = origin.to_str().ok().is_some_and(|o| {
            o.get(..7)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
                && o.get(7..).is_some_and(|a| app.names_dashboard(a))
        });
        if !ok {
            return refuse(
                StatusCode::FORBIDDEN,
                "requests from another origin are refused",
            );
        }
    }
    if !token_of(&req).is_some_and(|t| same(&t, &app.token)) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "this dashboard needs its token: open the URL `mcpl inspect` printed",
        );
    }
    if req.method() == Method::POST {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("application/json"));
        if !json {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "API writes take Content-Type: application/json",
            );
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            let (status, why) = too_large();
            return refuse(status, &why);
        }
        let (parts, body) = req.into_parts();
        let body = match read_body(body).await {
            Ok(body) => body,
            Err((status, why)) => return refuse(status, &why),
        };
        // A write runs on its own task, to its end, whoever waits for its answer: the client
        // going away (a reloaded page) drops this future, and an operation dropped half-way
        // left the engine untrue (a check `running` for ever, a grant applied and not shown,
        // a turn started and never completed). At most MAX_WRITES run at once, but for a
        // restart: the way out when every slot waits on a server that does not answer (it
        // ends those writes, and runs one at a time).
        let slot = if parts.uri.path() == "/api/restart" {
            None
        } else {
            match app.writes.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    return refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("{MAX_WRITES} API writes are running already"),
                    )
                }
            }
        };
        let write = tokio::spawn(async move {
            let response = next.run(Request::from_parts(parts, body)).await;
            drop(slot);
            response
        });
        return match write.await {
            Ok(response) => secure(response),
            Err(e) => refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the operation failed: {e}"),
            ),
        };
    }
    secure(next.run(req).await)
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

async fn index(State(app): State<Arc<App>>) -> Response {
    // The token is hex; it goes into the script and style URLs of the page.
    let page = INDEX_HTML.replace("{{TOKEN}}", &app.token);
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        Body::from(page),
    )
        .into_response()
}

fn reply(r: OpResult) -> Response {
    match r {
        Ok(v) => Json(json!({ "ok": true, "result": v })).into_response(),
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "ok": false, "error": e })),
        )
            .into_response(),
    }
}

fn bad(why: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "ok": false, "error": why.into() })),
    )
        .into_response()
}

fn string_field<'a>(body: &'a Value, key: &str) -> Result<&'a str, String> {
    body.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{key}` must be a string"))
}

fn strings_field(body: &Value, key: &str) -> Result<Vec<String>, String> {
    body.get(key)
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| format!("`{key}` must be an array of strings"))
}

async fn state(State(app): State<Arc<App>>) -> Response {
    Json(app.engine.snapshot()).into_response()
}

async fn log_page(
    State(app): State<Arc<App>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    // A parameter given and not understood is refused: read as absent, it listed entries
    // the page did not ask for (`dir=recieved` listed every direction).
    let num = |k: &str| -> Result<Option<u64>, String> {
        q.get(k)
            .filter(|v| !v.is_empty())
            .map(|v| v.parse::<u64>())
            .transpose()
            .map_err(|_| format!("`{k}` must be a number"))
    };
    let dir = match q
        .get("dir")
        .filter(|d| !d.is_empty())
        .map(|d| Dir::parse(d))
    {
        None => None,
        Some(Some(d)) => Some(d),
        Some(None) => return bad("`dir` is sent, received or host"),
    };
    let (limit, before) = match (num("limit"), num("before")) {
        (Ok(l), Ok(b)) => (l, b),
        (Err(e), _) | (_, Err(e)) => return bad(e),
    };
    let filter = Filter {
        method: q.get("method").cloned(),
        dir,
        marked: q.get("marked").is_some_and(|m| m == "1" || m == "true"),
    };
    let limit = limit.map_or(100, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let page = app.engine.log().page(before, limit, &filter);
    Json(page).into_response()
}

async fn log_entry(State(app): State<Arc<App>>, Path(seq): Path<u64>) -> Response {
    let entry = app.engine.log().get(seq).map(|e| e.full());
    match entry {
        Some(e) => Json(e).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "ok": false, "error": format!("entry {seq} is not kept (any more)") })),
        )
            .into_response(),
    }
}

async fn export(State(app): State<Arc<App>>) -> Response {
    // The frames are copied under the log's lock and rendered off it (on the blocking
    // pool): up to the log's 32 MiB of JSON, which the connection's recording must not wait
    // behind.
    let frames = app.engine.log().frames();
    let body = match tokio::task::spawn_blocking(move || super::log::export_jsonl(&frames)).await {
        Ok(body) => body,
        Err(e) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the export failed: {e}"),
            )
        }
    };
    (
        [
            (header::CONTENT_TYPE, "application/jsonl; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"mcpl-inspect.jsonl\"",
            ),
        ],
        body,
    )
        .into_response()
}

/// The live stream: `hello` first, then each engine message as it comes (`event` carries
/// the admitted event itself), `log` at most every [`LOG_TICK_EVERY`] with the newest log
/// seq, and `resync` when this subscriber fell behind (reload the state).
async fn events(State(app): State<Arc<App>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.engine.subscribe();
    let ticks = app.engine.log_ticks();
    let hello = Event::default().data(json!({ "type": "hello" }).to_string());
    let stream = futures_util::stream::unfold(
        (Some(hello), rx, ticks),
        |(mut first, mut rx, mut ticks)| async move {
            if let Some(hello) = first.take() {
                return Some((Ok(hello), (None, rx, ticks)));
            }
            let data = tokio::select! {
                r = rx.recv() => match r {
                    Ok(v) => v,
                    Err(RecvError::Lagged(n)) => json!({ "type": "resync", "missed": n }),
                    Err(RecvError::Closed) => return None,
                },
                r = ticks.changed() => {
                    if r.is_err() {
                        return None;
                    }
                    tokio::time::sleep(LOG_TICK_EVERY).await;
                    let seq = *ticks.borrow_and_update();
                    json!({ "type": "log", "lastSeq": seq })
                }
            };
            Some((
                Ok(Event::default().data(data.to_string())),
                (None, rx, ticks),
            ))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn grant_preview(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match strings_field(&body, "patterns") {
        Ok(p) => reply(app.engine.grant_preview(&p)),
        Err(e) => bad(e),
    }
}

async fn grant(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match strings_field(&body, "patterns") {
        Ok(p) => reply(app.engine.apply_grant(p).await),
        Err(e) => bad(e),
    }
}

async fn narrow(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match strings_field(&body, "disabled") {
        Ok(d) => reply(app.engine.narrow_by_notification(d).await),
        Err(e) => bad(e),
    }
}

async fn tools_list(State(app): State<Arc<App>>) -> Response {
    reply(app.engine.tools_list().await)
}

async fn tools_call(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    let name = match string_field(&body, "name") {
        Ok(n) => n.to_owned(),
        Err(e) => return bad(e),
    };
    let arguments = body.get("arguments").cloned().unwrap_or_else(|| json!({}));
    if !arguments.is_object() {
        return bad("`arguments` must be an object");
    }
    reply(app.engine.tools_call(&name, arguments).await)
}

async fn hook(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match string_field(&body, "text") {
        Ok(t) => reply(app.engine.hook(t).await),
        Err(e) => bad(e),
    }
}

async fn channel_open(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match string_field(&body, "type") {
        Ok(t) => reply(
            app.engine
                .channel_open(t, body.get("address").cloned())
                .await,
        ),
        Err(e) => bad(e),
    }
}

async fn channel_close(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match string_field(&body, "channelId") {
        Ok(c) => reply(app.engine.channel_close(c).await),
        Err(e) => bad(e),
    }
}

async fn publish(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match (
        string_field(&body, "channelId"),
        string_field(&body, "text"),
    ) {
        (Ok(c), Ok(t)) => reply(app.engine.publish(c, t).await),
        (Err(e), _) | (_, Err(e)) => bad(e),
    }
}

async fn stream(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    match (
        string_field(&body, "channelId"),
        string_field(&body, "text"),
    ) {
        (Ok(c), Ok(t)) => reply(app.engine.stream(c, t).await),
        (Err(e), _) | (_, Err(e)) => bad(e),
    }
}

async fn manifest_refresh(State(app): State<Arc<App>>) -> Response {
    reply(app.engine.manifest_refresh().await)
}

async fn raw(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    let method = match string_field(&body, "method") {
        Ok(m) => m.to_owned(),
        Err(e) => return bad(e),
    };
    let params = body.get("params").cloned().unwrap_or_else(|| json!({}));
    let notify = body.get("notification").and_then(Value::as_bool) == Some(true);
    reply(app.engine.raw(&method, params, notify).await)
}

async fn answer(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    let Some(id) = body.get("id").and_then(Value::as_u64) else {
        return bad("`id` must be the waiting request's number");
    };
    let method = app
        .engine
        .state()
        .pending
        .get(&id)
        .map(|p| p.method.clone())
        .unwrap_or_default();
    // Exactly one answer, each member as given: a code or message of another type (or a
    // second answer) was replaced by a default and sent to the server as if given.
    let given = ["text", "result", "error"]
        .iter()
        .filter(|k| body.get(**k).is_some())
        .count();
    if given != 1 {
        return bad("give one of `text`, `result` or `error`");
    }
    let answer = if let Some(r) = body.get("result") {
        Ok(r.clone())
    } else if let Some(e) = body.get("error") {
        let code = match e.get("code").map(Value::as_i64) {
            None => -32603,
            Some(Some(c)) => c,
            Some(None) => return bad("`error.code` must be an integer"),
        };
        let message = match e.get("message").map(Value::as_str) {
            None => "refused in the inspector",
            Some(Some(m)) => m,
            Some(None) => return bad("`error.message` must be a string"),
        };
        if !e.is_object() {
            return bad("`error` must be an object");
        }
        Err(mcpl::jsonrpc::ErrorObject::new(code, message.to_owned()))
    } else if let Some(t) = body.get("text").and_then(Value::as_str) {
        Ok(super::engine::text_answer(&method, t))
    } else {
        return bad("`text` must be a string");
    };
    reply(app.engine.answer(id, answer))
}

async fn auto_answer(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    let auto = match body.get("mode").and_then(Value::as_str) {
        Some("off") => AutoAnswer::Off,
        Some("echo") => AutoAnswer::Echo,
        Some("text") => match body.get("text").and_then(Value::as_str) {
            Some(t) => AutoAnswer::Text(t.to_owned()),
            None => return bad("mode `text` needs `text`"),
        },
        _ => return bad("`mode` is off, echo or text"),
    };
    reply(Ok(app.engine.set_auto_answer(auto)))
}

async fn restart(State(app): State<Arc<App>>) -> Response {
    reply(app.engine.restart().await)
}

async fn check(State(app): State<Arc<App>>) -> Response {
    reply(app.engine.run_check().await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        let t = new_token().unwrap();
        assert_eq!(t.len(), 64);
        assert_ne!(t, new_token().unwrap());
    }
}
