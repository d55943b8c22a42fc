//! `mcpl inspect --repl`: the engine on stdin/stdout, one command per line, scriptable from
//! a pipe. Events (admitted pushes and channel messages, waiting requests) are printed as
//! they come, each on its own line (`* …`, or `{"event": …}` with `--json`). A result is
//! one line with `--json` (`{"command", "ok", "result" | "error"}`). With `--json` every
//! line on stdout is one JSON object, a note that events were not shown too
//! (`{"resync": {"missed": N}}`).
//!
//! Input lines are read up to [`MAX_LINE`] bytes; a longer one is refused whole. Output goes
//! through a queue of at most [`output::OUTPUT_LINES`] lines to a writer thread ([`output`]): a
//! stalled reader of stdout holds up the commands, never the connection; events past the
//! queue's room are dropped and told (`{"resync": {"missed": N}}`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::task::JoinHandle;

use super::engine::{AutoAnswer, Engine};
use super::log::Filter;
use super::ops::OpResult;
use crate::term::one_line;

mod output;

/// Longest command line accepted, in bytes.
pub const MAX_LINE: usize = 1024 * 1024;

/// The commands, as `help` prints them.
pub const HELP: &str = "\
commands (one per line):
  state                      connection, mode and grant in force
  tools                      tools/list
  call NAME [JSON]           tools/call with JSON arguments (default {})
  grant [PATTERN…]           apply a host policy by featureSets/update Request (none: show it)
  narrow SET…                disable feature sets by a featureSets/update Notification (§6.7)
  hook TEXT                  run a context/beforeInference fan-out with TEXT as user message
  publish CHANNEL TEXT       channels/publish TEXT on CHANNEL
  stream CHANNEL TEXT        stream TEXT to CHANNEL (channels/outgoing/chunk + complete)
  open TYPE [JSON]           channels/open a channel of TYPE at the JSON address
  close CHANNEL              channels/close CHANNEL
  channels                   registered channels with their descriptors
  events [N]                 the last N admitted events (default 10)
  pending                    server → host requests waiting for an answer (id= the server's, handle = what answer takes)
  answer HANDLE TEXT         answer the waiting request of that handle (pending's) with TEXT
  auto off|echo|TEXT         how server → host requests are answered from now on
  manifest [refresh]         the manifest in force (refresh: fetch mcpl/manifest now)
  raw METHOD [JSON]          send any request through the host's gate
  notify METHOD [JSON]       send any notification through the host's gate
  log [N]                    the last N log entries (default 20), marks included
  check                      run the mcpl check suite against the same target
  restart                    re-spawn or re-dial and redo the handshake, keeping the log
  help                       this list
  quit                       end (so does the end of input)";

/// Splits `rest` into its first word and the remainder (trimmed).
fn word(rest: &str) -> (&str, &str) {
    let rest = rest.trim();
    match rest.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (rest, ""),
    }
}

/// Reads an optional JSON argument (`default` when empty).
fn json_arg(text: &str, default: Value) -> Result<Value, String> {
    if text.is_empty() {
        return Ok(default);
    }
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

fn need<'a>(v: &'a str, what: &str) -> Result<&'a str, String> {
    if v.is_empty() {
        Err(format!("missing {what} (see `help`)"))
    } else {
        Ok(v)
    }
}

/// The optional count of `events [N]` and `log [N]`: `default` when absent; a word that is
/// no count is refused (it was read as the default, as if the command had been given none).
fn count(text: &str, default: usize) -> Result<usize, String> {
    if text.is_empty() {
        return Ok(default);
    }
    text.parse::<usize>()
        .map_err(|_| format!("{text:?} is not a count (see `help`)"))
}

/// Runs one command line; `None` for `quit`.
async fn command(engine: &Engine, line: &str) -> Option<OpResult> {
    let (cmd, rest) = word(line);
    let r = match cmd {
        "quit" | "exit" => return None,
        "help" => Ok(json!(HELP)),
        "state" => {
            let s = engine.snapshot();
            Ok(json!({ "target": s["target"], "connection": {
                "generation": s["connection"]["generation"], "phase": s["connection"]["phase"],
                "mode": s["connection"]["mode"], "detail": s["connection"]["detail"],
                "serverInfo": s["connection"]["serverInfo"] },
                "grant": s["grant"]["inForce"], "patterns": s["grant"]["patterns"],
                "featureSets": s["grant"]["report"]["featureSets"] }))
        }
        "tools" => engine.tools_list().await,
        "call" => {
            let (name, args) = word(rest);
            match (need(name, "tool name"), json_arg(args, json!({}))) {
                (Ok(n), Ok(a)) => engine.tools_call(n, a).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        "grant" if rest.is_empty() => Ok(engine.snapshot()["grant"].clone()),
        "grant" => {
            let patterns = rest.split_whitespace().map(str::to_owned).collect();
            engine.apply_grant(patterns).await
        }
        "narrow" => {
            let sets = rest.split_whitespace().map(str::to_owned).collect();
            engine.narrow_by_notification(sets).await
        }
        "hook" => engine.hook(rest).await,
        "publish" | "stream" => {
            let (channel, text) = word(rest);
            match need(channel, "channel id") {
                Ok(c) if cmd == "publish" => engine.publish(c, text).await,
                Ok(c) => engine.stream(c, text).await,
                Err(e) => Err(e),
            }
        }
        "open" => {
            let (kind, address) = word(rest);
            match (need(kind, "channel type"), json_arg(address, Value::Null)) {
                (Ok(k), Ok(a)) => engine.channel_open(k, (!a.is_null()).then_some(a)).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        "close" => match need(rest, "channel id") {
            Ok(c) => engine.channel_close(c).await,
            Err(e) => Err(e),
        },
        "channels" => Ok(engine.snapshot()["channels"].clone()),
        "events" => count(rest, 10).map(|n| {
            let st = engine.state();
            let events: Vec<Value> = st.events.iter().rev().take(n).rev().cloned().collect();
            json!(events)
        }),
        "pending" => Ok(engine.snapshot()["pending"].clone()),
        "answer" => {
            let (id, text) = word(rest);
            match id.parse::<u64>() {
                Ok(id) => {
                    let method = engine
                        .state()
                        .pending
                        .get(&id)
                        .map(|p| p.method.clone())
                        .unwrap_or_default();
                    engine.answer(id, Ok(super::engine::text_answer(&method, text)))
                }
                Err(_) => Err(
                    "answer HANDLE TEXT: HANDLE is the waiting request's handle, as pending shows it (id=7 (handle 3): 3)"
                        .into(),
                ),
            }
        }
        "auto" => {
            let auto = match rest {
                "off" => AutoAnswer::Off,
                "echo" | "" => AutoAnswer::Echo,
                t => AutoAnswer::Text(t.to_owned()),
            };
            Ok(engine.set_auto_answer(auto))
        }
        "manifest" if rest == "refresh" => engine.manifest_refresh().await,
        "manifest" if !rest.is_empty() => Err(format!(
            "manifest takes `refresh` or nothing, not {rest:?} (see `help`)"
        )),
        "manifest" => {
            let s = engine.snapshot();
            Ok(json!({ "manifest": s["manifest"], "changes": s["manifestChanges"] }))
        }
        "raw" | "notify" => {
            let (method, params) = word(rest);
            match (need(method, "method"), json_arg(params, json!({}))) {
                (Ok(m), Ok(p)) => engine.raw(m, p, cmd == "notify").await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        "log" => count(rest, 20)
            .map(|n| engine.log().page(None, n, &Filter::default())["entries"].clone()),
        "check" => engine.run_check().await,
        "restart" => engine.restart().await,
        "" => return Some(Ok(Value::Null)),
        other => Err(format!("unknown command {other:?} (see `help`)")),
    };
    Some(r)
}

/// Joins the strings of a JSON array with `sep`.
fn joined(v: &Value, sep: &str) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(sep)
        })
        .unwrap_or_default()
}

/// The text of content (a string or content blocks).
fn content_text(c: &Value) -> String {
    super::engine::echo_text(&json!({ "messages": [{ "role": "user", "content": c }] }))
}

/// The text of an event's content, or a note that the event was cut
/// ([`super::engine::MAX_EVENT_BYTES`]) with `member`, the member that held it.
fn shown_content(member: &Value, content: &Value) -> String {
    if member["truncated"] == json!(true) {
        format!("(cut: {} bytes)", member["bytes"])
    } else {
        content_text(content)
    }
}

/// A string member the REPL shows inside one of its lines (a name, a reason, a preview): a
/// newline the peer put in it is written as its escape, so it cannot start a line that
/// reads as the REPL's own (`term::one_line`); not a string: empty.
fn field(v: &Value) -> std::borrow::Cow<'_, str> {
    one_line(v.as_str().unwrap_or(""))
}

/// A receipt (§6.7) in lines.
fn receipt_lines(r: &Value) -> String {
    if r.is_null() {
        return "receipt: none usable (nothing widened)".into();
    }
    let mut out = if r["accepted"] == json!(true) {
        format!(
            "receipt: accepted{}",
            r["mode"]
                .as_str()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        )
    } else {
        format!(
            "receipt: refused, fallback {}",
            r["fallback"].as_str().map_or("?".into(), one_line)
        )
    };
    for u in r["unavailableFeatures"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {} {}: {} (missing {})",
            field(&u["featureSet"]),
            field(&u["effect"]),
            field(&u["reason"]),
            joined(&u["missingCapabilities"], ", ")
        ));
    }
    out
}

/// The readable form of a result: the few shapes a person reads often in lines, strings as
/// they are, anything else as pretty JSON.
fn readable(cmd: &str, v: &Value) -> String {
    match (cmd, v) {
        (_, Value::Null) => String::new(),
        (_, Value::String(s)) => s.clone(),
        ("state", _) => {
            let c = &v["connection"];
            let sets: Vec<String> = v["featureSets"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, s)| {
                    let status = if s["available"] == json!(true) {
                        "available".to_owned()
                    } else {
                        format!("unavailable ({})", field(&s["reason"]))
                    };
                    format!("  {}: {status}", one_line(name))
                })
                .collect();
            format!(
                "target: {}\nstate: {} ({}), connection {}\nserver: {} {}\ngrant: {}\nfeature sets:\n{}",
                field(&v["target"]),
                field(&c["phase"]),
                field(&c["mode"]),
                c["generation"],
                field(&c["serverInfo"]["name"]),
                field(&c["serverInfo"]["version"]),
                joined(&v["grant"], " "),
                sets.join("\n")
            )
        }
        ("grant", _) if v.get("receipt").is_some() => {
            let list = |k: &str| match joined(&v[k], " ") {
                s if s.is_empty() => "none".to_owned(),
                s => s,
            };
            format!(
                "{}\nnarrowed: {}\nactivated: {}\ngrant: {}",
                receipt_lines(&v["receipt"]),
                list("narrowed"),
                list("activated"),
                list("grant")
            )
        }
        ("hook", _) => {
            let mut out = format!(
                "consulted: {}\nlifecycle: {}",
                joined(&v["consulted"], ", "),
                field(&v["lifecycle"])
            );
            if let Some(why) = v["userMessageWithheld"].as_str() {
                out.push_str(&format!("\nuserMessage: withheld ({})", one_line(why)));
            }
            for pos in ["system", "beforeUser", "afterUser"] {
                for a in v[pos].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "\n{pos} [{}]: {}",
                        field(&a["injection"]["namespace"]),
                        content_text(&a["injection"]["content"])
                    ));
                }
            }
            for r in v["rejected"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "\ndropped ({}): {}",
                    field(&r["category"]),
                    field(&r["reason"])
                ));
            }
            out
        }
        ("log", Value::Array(entries)) => entries
            .iter()
            .map(|e| {
                let marks: String = e["marks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let entry = m["entry"]
                            .as_u64()
                            .map(|i| format!(" (entry {i})"))
                            .unwrap_or_default();
                        format!("  [{} {}{entry}]", field(&m["section"]), field(&m["rule"]))
                    })
                    .collect();
                let preview: String = field(&e["preview"]).chars().take(100).collect();
                // A diagnostic names the frame it marked, by the seq this list shows.
                let marked = match e["marked"]["seq"].as_u64() {
                    Some(seq) => match e["marked"]["entry"].as_u64() {
                        Some(i) => format!(" -> frame {seq} (entry {i})"),
                        None => format!(" -> frame {seq}"),
                    },
                    None => String::new(),
                };
                format!(
                    "{:>6} {:<8} {:<12} {}{}{}",
                    e["seq"],
                    field(&e["dir"]),
                    field(&e["kind"]),
                    preview,
                    marks,
                    marked
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        // The id the server sent each under, then the handle `answer` takes.
        ("pending", Value::Array(waiting)) if !waiting.is_empty() => waiting
            .iter()
            .map(|p| {
                let revoked = match p["revoked"].as_str() {
                    Some(why) => format!(" (revoked: {})", one_line(why)),
                    None => String::new(),
                };
                format!(
                    "{} {} since {}{revoked}",
                    wire_and_handle(p),
                    field(&p["method"]),
                    field(&p["since"])
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        ("call", _) if v.get("content").is_some_and(Value::is_array) => {
            let texts: Vec<String> = v["content"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| match b.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => b.to_string(),
                })
                .collect();
            let err = if v.get("isError") == Some(&json!(true)) {
                "error: "
            } else {
                ""
            };
            format!("{err}{}", texts.join("\n"))
        }
        ("tools", _) if v.get("tools").is_some_and(Value::is_array) => v["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| format!("{:<16} {}", field(&t["name"]), field(&t["description"])))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

/// `v` as one line of JSON that still parses once printed: what a terminal acts on is
/// escaped as JSON ([`crate::term::compact_json`]), which stdout's writer leaves as it is.
fn json_line(v: &Value) -> String {
    let mut s = crate::term::compact_json(v);
    s.pop();
    s
}

/// What the live stream handed the REPL, as a message to print: a lag (the subscriber fell
/// more than [`super::engine::UI_CAPACITY`] messages behind) is `{"type": "resync",
/// "missed": N}`; `None` once the engine is gone.
fn received(r: Result<Value, tokio::sync::broadcast::error::RecvError>) -> Option<Value> {
    match r {
        Ok(m) => Some(m),
        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
            Some(json!({ "type": "resync", "missed": n }))
        }
        Err(_) => None,
    }
}

/// A waiting request as `id=7 (handle 3)`: the id the server sent it under (JSON-RPC 2.0
/// §4; `id=?` when the library told none) and the inspector's own number `answer` takes.
fn wire_and_handle(p: &Value) -> String {
    let wire = match &p["wireId"] {
        Value::Null => "?".to_owned(),
        id => one_line(&id.to_string()).into_owned(),
    };
    format!("id={wire} (handle {})", p["id"])
}

/// The line printed for a message of the live stream, `None` for one the REPL does not
/// show. With `json_out` every line is one JSON object: `{"event": …}`, `{"request": {id,
/// method}}`, or `{"resync": {"missed": N}}` when N events and requests were not shown.
fn event_line(msg: &Value, json_out: bool) -> Option<String> {
    let line = match msg["type"].as_str() {
        Some("event") if json_out => json_line(&json!({ "event": msg["event"] })),
        Some("event") => {
            let e = &msg["event"];
            match e["kind"].as_str() {
                Some("push") => format!(
                    "* push {} [{}] {}",
                    field(&e["featureSet"]),
                    e["tags"]
                        .as_array()
                        .map(|t| t
                            .iter()
                            .filter_map(Value::as_str)
                            .map(one_line)
                            .collect::<Vec<_>>()
                            .join(" "))
                        .unwrap_or_default(),
                    shown_content(&e["params"], &e["params"]["payload"]["content"])
                ),
                Some("channel") => format!(
                    "* message on {}: {}",
                    field(&e["channelId"]),
                    shown_content(&e["message"], &e["message"]["content"])
                ),
                _ => format!("* {e}"),
            }
        }
        Some("request") if json_out => json_line(&json!({ "request": {
            "id": msg["id"], "wireId": msg["wireId"], "method": msg["method"] } })),
        Some("request") => format!(
            "* {} {} waiting: answer {} TEXT",
            field(&msg["method"]),
            wire_and_handle(msg),
            msg["id"]
        ),
        Some("resync") if json_out => json_line(&json!({ "resync": { "missed": msg["missed"] } })),
        Some("resync") => format!("* {} events were not shown", msg["missed"]),
        _ => return None,
    };
    Some(line)
}

/// Queues events for stdout as they come ([`output::Lines::event`], never waiting; a waiting
/// request's notice waits for room, [`output::Lines::result`]) until
/// the engine goes away, stdout is gone or the task is aborted. A lag of the live stream is
/// counted with the events the queue had no room for, and told with them.
fn print_events(engine: &Engine, out: output::Lines, json_out: bool) -> JoinHandle<()> {
    let mut rx = engine.subscribe();
    tokio::spawn(async move {
        while let Some(msg) = received(rx.recv().await) {
            if msg["type"] == "resync" {
                out.lost(msg["missed"].as_u64().unwrap_or(0));
                continue;
            }
            let Some(line) = event_line(&msg, json_out) else {
                continue;
            };
            // A waiting request's notice is what the user answers from: it waits for room,
            // never dropped ([`output`]); the live stream meanwhile lags, told as a resync.
            let shown = if msg["type"] == "request" {
                out.result(line).await
            } else {
                out.event(line)
            };
            if !shown {
                break;
            }
        }
    })
}

/// Runs the REPL until `quit` or the end of input. Its stdout is written by a thread of
/// its own ([`output`]): a reader of stdout that stalls never holds up the connection.
pub async fn run(engine: Engine, json_out: bool) -> ExitCode {
    let out = output::Output::start(json_out);
    let events = print_events(&engine, out.lines().clone(), json_out);
    let code = commands(&engine, out.lines(), json_out).await;
    events.abort();
    let _ = events.await;
    let written = out.finish().await;
    if code == ExitCode::SUCCESS && !written {
        ExitCode::from(1)
    } else {
        code
    }
}

/// Reads and runs commands until `quit` or the end of input, queueing their results.
async fn commands(engine: &Engine, out: &output::Lines, json_out: bool) -> ExitCode {
    if let Err(e) = engine.connect().await {
        crate::term::emit_err(&format!("mcpl inspect: {e}\n"));
        return ExitCode::from(2);
    }
    let failed = Arc::new(AtomicBool::new(false));
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = (&mut stdin)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await;
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            // Skip the rest of the over-long line, a bounded piece at a time.
            loop {
                buf.clear();
                let n = (&mut stdin)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut buf)
                    .await
                    .unwrap_or(0);
                if n == 0 || buf.ends_with(b"\n") {
                    break;
                }
            }
            failed.store(true, Ordering::SeqCst);
            // Not `eprintln!`, which panics when stderr is a closed pipe.
            crate::term::emit_err(&format!(
                "mcpl inspect: a command line over {MAX_LINE} bytes was refused\n"
            ));
            continue;
        }
        let line = String::from_utf8_lossy(&buf).trim().to_owned();
        let cmd = word(&line).0.to_owned();
        let Some(result) = command(engine, &line).await else {
            break;
        };
        if line.is_empty() {
            continue;
        }
        let text = match (&result, json_out) {
            (Ok(v), true) => json_line(&json!({ "command": cmd, "ok": true, "result": v })),
            (Err(e), true) => json_line(&json!({ "command": cmd, "ok": false, "error": e })),
            (Ok(v), false) => readable(&cmd, v),
            (Err(e), false) => format!("error: {e}"),
        };
        if !text.is_empty() && !out.result(text).await {
            // Nobody reads the results any more (`mcpl inspect --repl | head`): end.
            failed.store(true, Ordering::SeqCst);
            break;
        }
        if result.is_err() {
            failed.store(true, Ordering::SeqCst);
        }
    }
    if let Some(s) = engine.session() {
        s.close();
    }
    if failed.load(Ordering::SeqCst) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The help and the README's `mcpl inspect --repl` list name each command the same way,
    /// argument words included: `answer` takes the handle `pending` prints after the
    /// server's id (`id=7 (handle 3)`), so both say `answer HANDLE TEXT` (r14 F6).
    #[test]
    fn the_help_and_the_readme_name_each_command_alike() {
        let readme = include_str!("../../../../README.md");
        let from = readme
            .find("`mcpl inspect --repl` runs the same engine")
            .expect("the README's REPL section");
        let section: String = readme[from..]
            .split("\n\n")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let synopses: Vec<&str> = HELP
            .lines()
            .skip(1)
            .filter_map(|l| l.trim().split("  ").next())
            .collect();
        assert!(synopses.contains(&"answer HANDLE TEXT"), "{synopses:?}");
        for synopsis in synopses {
            assert!(
                section.contains(&format!("`{synopsis}`")),
                "the README's REPL list lacks `{synopsis}`: {section}"
            );
        }
    }

    #[test]
    fn words_split_once() {
        assert_eq!(
            word("  call echo {\"text\": \"a b\"} "),
            ("call", "echo {\"text\": \"a b\"}")
        );
        assert_eq!(word("tools"), ("tools", ""));
        assert!(json_arg("", json!({})).unwrap().is_object());
        assert!(json_arg("{", json!({})).is_err());
    }

    /// The REPL's printer falls more than the stream's capacity behind (forced here with a
    /// stream of capacity 1): with `--json`, the note of what it missed is one JSON object,
    /// `{"resync": {"missed": N}}`, as every other line; it was the text `* N events were
    /// not shown`.
    #[test]
    fn a_lag_is_printed_as_json_with_json_out() {
        let (tx, mut rx) = tokio::sync::broadcast::channel::<Value>(1);
        for i in 0..4 {
            tx.send(json!({ "type": "event", "event": { "kind": "push", "seq": i } }))
                .unwrap();
        }
        let lag = received(rx.try_recv().map_err(|e| match e {
            tokio::sync::broadcast::error::TryRecvError::Lagged(n) => {
                tokio::sync::broadcast::error::RecvError::Lagged(n)
            }
            _ => tokio::sync::broadcast::error::RecvError::Closed,
        }))
        .expect("a lag is a message");
        let line = event_line(&lag, true).expect("a lag is printed");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(v, json!({ "resync": { "missed": 3 } }));
        assert_eq!(
            event_line(&lag, false).as_deref(),
            Some("* 3 events were not shown")
        );
        // Every other line the stream prints with `--json` parses as one object too.
        let event = received(
            rx.try_recv()
                .map_err(|_| tokio::sync::broadcast::error::RecvError::Closed),
        )
        .expect("the newest event is kept");
        let request = json!({ "type": "request", "id": 1, "method": "inference/request" });
        for msg in [&event, &request] {
            let line = event_line(msg, true).expect("printed");
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(v.is_object() && !line.contains('\n'), "{line}");
        }
        assert_eq!(event_line(&json!({ "type": "changed" }), true), None);
    }

    /// JSON-RPC 2.0 §4: a waiting request is shown by the id the server sent it under and
    /// the handle `answer` takes (`id=7 (handle 3)`), in `pending` and in its notice; `id=?`
    /// when none was told.
    #[test]
    fn a_waiting_request_shows_its_wire_id_and_its_handle() {
        let waiting = json!([
            { "id": 3, "wireId": 7, "method": "inference/request", "since": "t" },
            { "id": 4, "wireId": "ask", "method": "model/info", "since": "u",
              "revoked": "the grant no longer allows it" },
            { "id": 5, "method": "model/info", "since": "v" }
        ]);
        let text = readable("pending", &waiting);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0], "id=7 (handle 3) inference/request since t",
            "{text}"
        );
        assert!(
            lines[1].starts_with(r#"id="ask" (handle 4) model/info"#),
            "{text}"
        );
        assert!(lines[1].contains("revoked"), "{text}");
        assert!(lines[2].starts_with("id=? (handle 5)"), "{text}");
        let notice = json!({ "type": "request", "id": 3, "wireId": 7, "method": "model/info" });
        assert_eq!(
            event_line(&notice, false).as_deref(),
            Some("* model/info id=7 (handle 3) waiting: answer 3 TEXT")
        );
        let line = event_line(&notice, true).unwrap_or_default();
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["request"]["wireId"], 7, "{line}");
        assert_eq!(v["request"]["id"], 3, "{line}");
    }

    /// The text `log` names the frame a diagnostic marked by the seq it lists frames under
    /// (and the batch entry); a diagnostic that marked none, and a frame, say nothing of it.
    #[test]
    fn the_text_log_names_the_frame_a_diagnostic_marked() {
        let mark = json!({ "section": "§4", "rule": "invalid_params", "detail": "d" });
        let diag = |marked: Value| {
            json!({ "seq": 9, "dir": "host", "kind": "diagnostic", "preview": "§4 invalid_params: d",
                    "marks": [mark], "marked": marked })
        };
        let frame = json!({ "seq": 7, "dir": "received", "kind": "notification",
                            "preview": "{}", "marks": [mark] });
        let text = readable(
            "log",
            &json!([
                frame,
                diag(json!({ "seq": 7 })),
                diag(json!({ "seq": 8, "entry": 2 })),
                diag(Value::Null)
            ]),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(!lines[0].contains("-> frame"), "{text}");
        assert!(lines[1].ends_with("-> frame 7"), "{text}");
        assert!(lines[2].ends_with("-> frame 8 (entry 2)"), "{text}");
        assert!(!lines[3].contains("-> frame"), "{text}");
    }

    /// A count that is no number is refused, not read as the default.
    #[test]
    fn counts_are_numbers_or_absent() {
        assert_eq!(count("", 10), Ok(10));
        assert_eq!(count("3", 10), Ok(3));
        assert!(count("abc", 10).is_err());
        assert!(count("99999999999999999999999", 10).is_err());
        assert!(count("-1", 10).is_err());
    }
}
