//! `mcpl check`: the live conformance checker. Acts as a strict host against a live server
//! and reports, check by check, what conforms (ids and sections in [`report::CATALOGUE`]).
//!
//! Exit codes: 0 nothing failed, 1 a check failed, 2 the target could not be started or
//! reached (or the arguments were unusable).

pub(crate) mod conn;
mod driver;
pub(crate) mod ids;
pub(crate) mod inspect;
pub(crate) mod repeated;
pub(crate) mod report;
mod scenario;
pub(crate) mod spread;
mod stderr;
pub(crate) mod vocabulary;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub(crate) use conn::tls_config;
use conn::{Conn, Transcript};
use report::{Recorder, Report, SessionReport};
use scenario::Scenario;
use serde_json::Value;

/// Arguments of `mcpl check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// List every check (id, section, what conforms) and exit.
    #[arg(long)]
    pub list: bool,
    /// Print the report as JSON: `{ target, checks: [{id, section, status, detail}], summary }`.
    #[arg(long)]
    pub json: bool,
    /// Bound on every single wait, in seconds. A whole run of N sessions ends within
    /// N × (43 × timeout + 5 × watch + the scenario's time + 2.5 s).
    #[arg(long, value_name = "SECS", default_value_t = 5.0, value_parser = wait_arg)]
    pub timeout: f64,
    /// How long to listen, at each of the first session's four windows and once in each
    /// later session, for messages the server sends on its own (push events, channel
    /// registrations).
    #[arg(long, value_name = "SECS", default_value_t = 1.0, value_parser = secs_arg)]
    pub watch: f64,
    /// Run at most N sessions: the first under the full grant, each further one
    /// reconnected and under a narrowed grant (nothing granted; only `tools`; everything but
    /// `pushEvents`; everything but `channels.*`; everything but the hook leaves; each set
    /// seen in use disabled in turn). `--sessions 1` is a single session.
    #[arg(long, value_name = "N", default_value_t = driver::DEFAULT_SESSIONS,
          value_parser = sessions_arg)]
    pub sessions: usize,
    /// A single session under the full grant: the same as `--sessions 1`.
    #[arg(long, conflicts_with = "sessions")]
    pub quick: bool,
    /// Write every frame exchanged to FILE as JSON Lines (`direction`, `time`, `session`,
    /// `message`).
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    /// PEM file of CA certificates trusted for `wss://` and `mcpl://` targets (default: the
    /// bundled webpki (Mozilla) roots). Refused (exit 2) with any other target, which has no
    /// TLS to verify.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// After the policy exchange, call TOOL with the JSON object ARGS (`tools/call`).
    /// Repeatable; calls run in order, after the `--scenario` steps, in every session.
    #[arg(long = "call", num_args = 2, value_names = ["TOOL", "JSON"], action = clap::ArgAction::Append)]
    pub call: Vec<String>,
    /// Run the `--call` and `--scenario` steps in the first session only.
    #[arg(long)]
    pub call_once: bool,
    /// Send SET (a feature set name or `prefix.*`) in the `enabled` list of every policy
    /// Request (§5.3: an allowlist). Repeatable.
    #[arg(long = "enable", value_name = "SET", action = clap::ArgAction::Append)]
    pub enable: Vec<String>,
    /// Steps to run after the policy exchange: a JSON array of `call`, `waitFor`,
    /// `publish`, `open`, `close` and `sleep` steps (README, "Scenario steps").
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Target address: `tcp://HOST:PORT`, `ws://…`, `wss://…` or `mcpl://…`. Options may
    /// follow it. Without a target (and without `-- CMD ARGS…`) the bundled reference server
    /// is spawned (`mcpl serve --stdio`).
    #[arg(value_name = "TARGET")]
    pub target: Vec<String>,
    /// A server command to spawn and check over its stdio; everything after `--` is the
    /// command and its arguments, never options of `mcpl check`.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,
}

/// Where the server under test is (also read by `mcpl inspect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Spawn this command and talk over its stdio.
    Command(Vec<String>),
    /// `host:port` over TCP.
    Tcp(String),
    /// A `ws://` or `wss://` URL (an `mcpl://` URI already resolved, RFC-004).
    Ws(String),
}

/// Whether `word` names an address (a URL scheme `mcpl check` dials) rather than a command.
fn is_address(word: &str) -> bool {
    ["tcp://", "ws://", "wss://", "mcpl://"]
        .iter()
        .any(|scheme| word.starts_with(scheme))
}

/// Reads the target: `words` are the positional words before `--`, `command` what follows
/// `--`. An address is a single word with a URL scheme; a command comes after `--` (plain
/// words without one, e.g. `mcpl check ./server`, are still read as a command line).
/// Neither: the bundled reference server.
pub(crate) fn parse_target(
    words: &[String],
    command: &[String],
) -> Result<(Target, String), String> {
    match (words, command) {
        ([], []) => {}
        ([], cmd) => return Ok((Target::Command(cmd.to_vec()), cmd.join(" "))),
        (_, [_, ..]) => {
            return Err(format!(
                "{}: give either an address or `-- CMD ARGS…`, not both",
                words.join(" ")
            ))
        }
        ([one], []) if is_address(one) => return parse_address(one),
        ([one], []) => {
            if let Some(hint) = misread_address(one) {
                return Err(hint);
            }
            return Ok((Target::Command(vec![one.clone()]), one.clone()));
        }
        ([first, rest @ ..], []) if is_address(first) => {
            return Err(format!(
                "{first}: an address takes no further words (got {:?}); a command goes after `--`",
                rest.join(" ")
            ))
        }
        (words, []) => return Ok((Target::Command(words.to_vec()), words.join(" "))),
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot locate the mcpl executable: {e}"))?;
    let argv = vec![
        exe.to_string_lossy().into_owned(),
        "serve".into(),
        "--stdio".into(),
    ];
    Ok((
        Target::Command(argv),
        "reference server (mcpl serve --stdio)".into(),
    ))
}

/// A single target word that looks like an address `mcpl check` does not dial (a bare
/// `HOST:PORT`, an `http://` or `https://` URL): the usage error suggesting the address it
/// probably means, rather than trying to run it as a command. A word naming an existing
/// file is a command, whatever it looks like.
fn misread_address(word: &str) -> Option<String> {
    if std::path::Path::new(word).exists() {
        return None;
    }
    let (rest, tls) = if let Some(r) = word.strip_prefix("http://") {
        (r, false)
    } else if let Some(r) = word.strip_prefix("https://") {
        (r, true)
    } else {
        let (host, port) = word.rsplit_once(':')?;
        let plain = |c: char| !(c.is_whitespace() || c == '/');
        let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
        if host.is_empty() || !host.chars().all(plain) || !is_port {
            return None;
        }
        return Some(format!(
            "{word}: not an address mcpl check dials; did you mean tcp://{word}? \
             (a command goes after `--`)"
        ));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let hostport = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:PORT")
    };
    let ws = if tls { "wss" } else { "ws" };
    Some(format!(
        "{word}: mcpl check dials tcp://, ws://, wss:// and mcpl:// addresses, not HTTP; did you mean tcp://{hostport}? \
         (or {ws}://{rest} for a WebSocket endpoint)"
    ))
}

/// Reads one address word (`is_address` holds for it).
fn parse_address(one: &str) -> Result<(Target, String), String> {
    if let Some(rest) = one.strip_prefix("tcp://") {
        let hostport = rest.trim_end_matches('/');
        if hostport.is_empty() || !hostport.contains(':') {
            return Err(format!("{one}: expected tcp://HOST:PORT"));
        }
        return Ok((Target::Tcp(hostport.to_owned()), one.to_owned()));
    }
    if one.starts_with("mcpl://") {
        let resolved = mcpl::uri::resolve(one).map_err(|e| format!("{one}: {e}"))?;
        let label = format!("{one} ({})", resolved.resolved_transport());
        return Ok((Target::Ws(resolved.resolved_transport().to_owned()), label));
    }
    Ok((Target::Ws(one.to_owned()), one.to_owned()))
}

/// `--sessions N`: 1 to [`driver::DEFAULT_SESSIONS`].
fn sessions_arg(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (1..=driver::DEFAULT_SESSIONS).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of sessions from 1 to {}",
            driver::DEFAULT_SESSIONS
        )),
    }
}

/// The least wait a `--timeout`-like flag takes, in seconds: the host's own least
/// (`mcpl::session::HostRules::defects`: a timeout under 1 ms ends every wait at once).
const LEAST_WAIT_SECS: f64 = 0.001;

/// A `--NAME SECS` flag that bounds a wait (`--timeout`, `--inference-timeout`): a number of
/// seconds from 0.001 to 86400, refused by clap otherwise (a usage error, exit code 2).
/// 0 (or anything under 1 ms) would end every wait at once: `mcpl inspect` took it to its
/// host's configuration, which refused it only at connect (`HostError::InvalidConfig`).
pub(crate) fn wait_arg(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if (LEAST_WAIT_SECS..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "expected a number of seconds from {LEAST_WAIT_SECS} to 86400 (a wait under 1 ms \
             would end at once)"
        )),
    }
}

/// A `--NAME SECS` flag that may be 0 (`--watch`: listen for nothing): 0 to 86400 seconds,
/// refused by clap otherwise.
pub(crate) fn secs_arg(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(s),
        _ => Err("expected a number of seconds from 0 to 86400".to_owned()),
    }
}

/// A `--NAME SECS` value as a duration (0 to one day), or the usage error to print.
pub(crate) fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    if (0.0..=86_400.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{name} must be a number of seconds between 0 and 86400"
        ))
    }
}

/// Runs `mcpl check` and returns its exit code.
pub fn main(args: CheckArgs) -> ExitCode {
    if args.list {
        crate::term::emit(&report::catalogue_text());
        return ExitCode::SUCCESS;
    }
    let report = run(&args);
    if std::io::stderr().is_terminal() {
        report::progress_clear();
    }
    // A target that could not be started or reached, or unusable arguments: one error line,
    // not a report of checks that never ran (the JSON document still carries it).
    if let Some(e) = &report.error {
        crate::term::emit_err(&format!("mcpl check: {e}\n"));
    }
    if args.json {
        // `json_text`: what a terminal acts on, escaped as JSON, so the document parses.
        crate::term::emit(&crate::term::json_text(report.to_json().to_string()));
    } else if report.error.is_none() {
        crate::term::emit(&report.to_text());
    }
    ExitCode::from(report.exit_code())
}

fn unreachable_report(target: String, error: String) -> Report {
    let mut rec = Recorder::new(false);
    rec.skip_rest("target could not be started or reached");
    let mut r = rec.finish(target);
    r.error = Some(error);
    r
}

/// Waits of one session beyond the scenario's, in units of `--timeout` ([`session_bound`]).
pub const SESSION_STEPS: u32 = 40;
/// `--watch` windows of one session ([`session_bound`]).
pub const SESSION_WATCHES: u32 = 5;

/// The wall time one session may take once connected (issue #20): `40 × --timeout +
/// 5 × --watch + the scenario's time` ([`Scenario::time`]: its `sleep`/`waitFor` durations,
/// `--timeout` for each other step). Past it the connection reads as ended and the session
/// reports that. Opening (`--timeout`) and ending a connection (`--timeout` for the orderly
/// close, at most 2.5 s for a spawned process group, [`conn::EXIT_GRACE`] +
/// 2 × [`conn::TERM_GRACE`], and `--timeout` for its exit status) come on top, so a run of N
/// sessions ends within `N × (43 × --timeout + 5 × --watch + scenario + 2.5 s)`.
fn session_bound(timing: driver::Timing, scenario: &Scenario) -> std::time::Duration {
    timing.step * SESSION_STEPS + timing.watch * SESSION_WATCHES + scenario.time(timing.step)
}

fn run(args: &CheckArgs) -> Report {
    let label = match (args.target.is_empty(), args.command.is_empty()) {
        (true, true) => "reference server".to_owned(),
        (false, true) => args.target.join(" "),
        (true, false) => args.command.join(" "),
        (false, false) => format!("{} -- {}", args.target.join(" "), args.command.join(" ")),
    };
    let timing = match (
        seconds("timeout", args.timeout),
        seconds("watch", args.watch),
    ) {
        (Ok(step), Ok(watch)) if !step.is_zero() => driver::Timing { step, watch },
        (Err(e), _) | (_, Err(e)) => return unreachable_report(label, e),
        _ => return unreachable_report(label, "--timeout must be greater than 0".into()),
    };
    let (target, label) = match parse_target(&args.target, &args.command) {
        Ok(t) => t,
        Err(e) => return unreachable_report(label, e),
    };
    let scenario = Scenario::from_args(
        &args.call,
        args.scenario.as_deref(),
        args.call_once,
        &args.enable,
    );
    let mut scenario = match scenario {
        Ok(s) => s,
        Err(e) => return unreachable_report(label, e),
    };
    // The bundled reference server only shows some behaviour when its tools are called:
    // unless the user gave steps, the checker's own scenario calls them.
    if args.target.is_empty() && args.command.is_empty() && scenario.steps.is_empty() {
        scenario = Scenario {
            enable: scenario.enable,
            ..Scenario::reference_default()
        };
    }
    // `--ca` only means something for a TLS dial: refused rather than silently ignored, so
    // nobody believes a `tcp://` or `ws://` connection was verified against it.
    let tls = matches!(&target, Target::Ws(url) if url.starts_with("wss://"));
    if let (Some(ca), false) = (&args.ca, tls) {
        return unreachable_report(
            label,
            format!(
                "--ca {}: only wss:// and mcpl:// targets use TLS; this target has none to verify",
                ca.display()
            ),
        );
    }
    let transcript = match &args.transcript {
        None => None,
        Some(p) => match Transcript::create(p) {
            Ok(t) => Some(t),
            Err(e) => {
                return unreachable_report(label, format!("cannot create {}: {e}", p.display()))
            }
        },
    };
    // The library's errors name the program (`child::spawn`) or the address.
    let dial = match target {
        Target::Command(argv) => conn::Dial::Command(argv),
        Target::Tcp(addr) => {
            let address = format!("tcp://{addr}");
            conn::Dial::Endpoint { address, tls: None }
        }
        Target::Ws(url) => {
            // `None` lets the library trust its bundled (webpki) roots for `wss:`.
            let tls = match (url.starts_with("wss://"), &args.ca) {
                (true, Some(ca)) => match conn::tls_config(ca) {
                    Ok(c) => Some(c),
                    Err(e) => return unreachable_report(label, format!("TLS setup: {e}")),
                },
                _ => None,
            };
            conn::Dial::Endpoint { address: url, tls }
        }
    };
    let bound = session_bound(timing, &scenario);
    let conn = Conn::open(dial.clone(), timing.step, transcript.clone()).map_err(|e| e.to_string());
    let mut conn = match conn {
        Ok(c) => c,
        Err(e) => return unreachable_report(label, e),
    };
    conn.set_time_bound(bound);
    // Each later session is a fresh connection: a command is spawned again, an address
    // dialled again (§5.3: nothing carries over).
    let open = |session: usize| {
        let t = transcript.as_ref().map(|t| t.for_session(session));
        Conn::open(dial.clone(), timing.step, t).map(|mut c| {
            c.set_time_bound(bound);
            c
        })
    };
    // Later sessions run one after the other, as a host reconnects: a server may hold a
    // resource (a port, a lock, a cache) one instance at a time, and several at once would
    // be judged for that. The bundled reference server holds none, so its run does not wait.
    let reconnect = driver::Reconnect {
        open: &open,
        concurrent: args.target.is_empty() && args.command.is_empty(),
    };
    let progress = std::io::stderr().is_terminal();
    let max = if args.quick { 1 } else { args.sessions };
    let scenario = std::sync::Arc::new(scenario);
    let mut runs = driver::run(conn, &reconnect, timing, max, progress, &scenario).into_iter();
    let Some(first) = runs.next() else {
        return unreachable_report(label, "internal: no session ran".into());
    };
    let steps: Vec<Value> = std::iter::once(&first)
        .chain(runs.as_slice())
        .flat_map(|run| run.steps.iter().map(scenario::Outcome::to_json))
        .collect();
    let mut report = if let Some(e) = &first.fatal {
        unreachable_report(label, e.clone())
    } else {
        let sessions = std::iter::once(&first)
            .chain(runs.as_slice())
            .map(|run| SessionReport {
                label: run.label.clone(),
                grant: run.grant.clone(),
                checks: run.rec.recorded(),
                error: run.error.clone(),
            })
            .collect::<Vec<_>>();
        first.rec.finish(label).with_sessions(sessions)
    };
    if !steps.is_empty() {
        report.extra.insert("scenario".into(), Value::Array(steps));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn targets_are_read_by_scheme() {
        let none: &[String] = &[];
        assert_eq!(
            parse_target(&s(&["tcp://127.0.0.1:9"]), none).map(|t| t.0),
            Ok(Target::Tcp("127.0.0.1:9".into()))
        );
        assert!(parse_target(&s(&["tcp://nohost"]), none).is_err());
        assert_eq!(
            parse_target(&s(&["ws://127.0.0.1:9/mcpl"]), none).map(|t| t.0),
            Ok(Target::Ws("ws://127.0.0.1:9/mcpl".into()))
        );
        assert!(matches!(
            parse_target(&s(&["mcpl://example.com/x"]), none).map(|t| t.0),
            Ok(Target::Ws(url)) if url.starts_with("wss://example.com")
        ));
        assert_eq!(
            parse_target(none, &s(&["srv", "--flag"])).map(|t| t.0),
            Ok(Target::Command(s(&["srv", "--flag"])))
        );
        // Plain words before `--` are still a command line.
        assert_eq!(
            parse_target(&s(&["srv", "arg"]), none).map(|t| t.0),
            Ok(Target::Command(s(&["srv", "arg"])))
        );
        // A command only follows `--`; words after an address are refused, not run.
        assert!(parse_target(&s(&["tcp://127.0.0.1:9", "extra"]), none).is_err());
        assert!(parse_target(&s(&["tcp://127.0.0.1:9"]), &s(&["srv"])).is_err());
        assert!(matches!(
            parse_target(none, none).map(|t| t.0),
            Ok(Target::Command(argv)) if argv.ends_with(&s(&["serve", "--stdio"]))
        ));
    }

    /// Options after an address are options (clap parsing of `mcpl check`).
    #[test]
    fn options_after_an_address_are_parsed_as_options() {
        use clap::{Args, FromArgMatches};
        let parse = |argv: &[&str]| {
            let cmd = CheckArgs::augment_args(clap::Command::new("check").no_binary_name(true));
            cmd.try_get_matches_from(argv)
                .and_then(|m| CheckArgs::from_arg_matches(&m))
        };
        let a = parse(&["tcp://127.0.0.1:9", "--json", "--timeout", "2"]).unwrap();
        assert!(a.json);
        assert_eq!(a.timeout, 2.0);
        assert_eq!(a.target, s(&["tcp://127.0.0.1:9"]));
        assert!(a.command.is_empty());
        let a = parse(&["--json", "--", "srv", "--json", "-x"]).unwrap();
        assert!(a.json);
        assert!(a.target.is_empty());
        assert_eq!(a.command, s(&["srv", "--json", "-x"]));
        let a = parse(&[]).unwrap();
        assert!(a.target.is_empty() && a.command.is_empty());
    }
}
