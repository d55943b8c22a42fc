//! `mcpl inspect`: an interactive MCPL 0.5 host for server authors. It connects to a server
//! as a strict host built on the library's [`mcpl::host::HostSession`] and serves a dashboard
//! (`http`, the page in `assets/`) or a line REPL (`repl`) over the same engine (`engine`,
//! `ops`), with a bounded frame log (`log`) whose refused or diagnosed frames carry the rule
//! and § that applied (`rules`).
//!
//! TARGET is read exactly as `mcpl check` reads it ([`crate::check::parse_target`]).
//! Exit codes: 2 when the arguments are unusable, the dashboard cannot listen, or (REPL) the
//! target cannot be reached at start; the REPL exits 1 when a command failed, else 0.

mod engine;
mod http;
mod kept;
mod log;
mod ops;
mod repl;
mod rules;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use mcpl::capability::Capability;

use crate::check::{self, Target};
use crate::term::emit_err;
use engine::{AutoAnswer, Engine, Settings};

/// The dashboard's port unless `--port` says otherwise.
pub const DEFAULT_PORT: u16 = 7357;

/// Arguments of `mcpl inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Dashboard port on the listening address (0 picks a free one).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Address the dashboard listens on. Anything but a loopback address exposes the
    /// inspector (token-protected) to the network, with a warning.
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Open the dashboard in a browser (`$BROWSER`, else `xdg-open`).
    #[arg(long)]
    pub open: bool,
    /// No dashboard: one command per line on stdin, results on stdout (`help` lists them).
    #[arg(long)]
    pub repl: bool,
    /// With `--repl`: one JSON object per line for each result and each event.
    #[arg(long)]
    pub json: bool,
    /// Host policy to start from: capability paths or §5.4 patterns, as `mcpl grant`. Takes
    /// one or more values and may repeat. Default: every path (the grant is then everything
    /// the server advertises).
    #[arg(long, value_name = "PATTERN", num_args = 1.., action = clap::ArgAction::Append)]
    pub allow: Vec<String>,
    /// Answer `inference/request` (and `model/info`) automatically: with `=TEXT` that text,
    /// without one the request's last user message (echo). Without the flag they wait for an
    /// answer in the dashboard (or `answer` in the REPL).
    #[arg(long, value_name = "TEXT", num_args = 0..=1, require_equals = true)]
    pub auto_answer: Option<Option<String>>,
    /// Bound on each wait of the host (initialize, policy receipt, hooks, requests), seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = check::wait_arg)]
    pub timeout: f64,
    /// PEM file of CA certificates trusted for `wss://` and `mcpl://` targets, as for
    /// `mcpl check`.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Target address: `tcp://HOST:PORT`, `ws://…`, `wss://…` or `mcpl://…`, exactly as for
    /// `mcpl check`. None (and no `-- CMD ARGS…`): the bundled reference server.
    #[arg(value_name = "TARGET")]
    pub target: Vec<String>,
    /// A server command to spawn and inspect over its stdio (everything after `--`).
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    emit_err(&format!("mcpl inspect: {msg}\n"));
    ExitCode::from(2)
}

/// Whether `host` names only this machine.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Runs `mcpl inspect`.
pub fn main(args: InspectArgs) -> ExitCode {
    let patterns = if args.allow.is_empty() {
        Capability::ALL
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect()
    } else {
        args.allow.clone()
    };
    if let Err(e) = ops::parse_patterns(&patterns) {
        return usage(format!("--allow: {e}"));
    }
    let timeout = match check::seconds("timeout", args.timeout) {
        Ok(t) if !t.is_zero() => t,
        Ok(_) => return usage("--timeout must be greater than 0"),
        Err(e) => return usage(e),
    };
    let (target, label) = match check::parse_target(&args.target, &args.command) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    let tls = match (&args.ca, &target) {
        (None, _) => None,
        (Some(ca), Target::Ws(url)) if url.starts_with("wss://") => match check::tls_config(ca) {
            Ok(c) => Some(c),
            Err(e) => return usage(format!("TLS setup: {e}")),
        },
        (Some(ca), _) => {
            return usage(format!(
                "--ca {}: only wss:// and mcpl:// targets use TLS; this target has none to verify",
                ca.display()
            ))
        }
    };
    if args.json && !args.repl {
        return usage("--json is for --repl output; the dashboard speaks JSON on its own");
    }
    // `mcpl check --json …` against the same target, for the Check button.
    let mut check_args = Vec::new();
    if let Some(ca) = &args.ca {
        check_args.push("--ca".to_owned());
        check_args.push(ca.to_string_lossy().into_owned());
    }
    check_args.extend(args.target.iter().cloned());
    if !args.command.is_empty() {
        check_args.push("--".into());
        check_args.extend(args.command.iter().cloned());
    }
    let settings = Settings {
        target,
        label,
        tls,
        check_args,
        patterns,
        auto_answer: match &args.auto_answer {
            None => AutoAnswer::Off,
            Some(None) => AutoAnswer::Echo,
            Some(Some(t)) => AutoAnswer::Text(t.clone()),
        },
        timeout,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage(format!("cannot start the runtime: {e}")),
    };
    let engine = Engine::new(settings);
    if args.repl {
        return rt.block_on(async move {
            let code = repl::run(engine, args.json).await;
            crate::server_stderr::drain().await;
            code
        });
    }
    rt.block_on(async move {
        let server = match http::bind(&args.host, args.port).await {
            Ok(s) => s,
            Err(e) => {
                return usage(format!(
                    "cannot listen on {}:{}: {e} (pick another --port; 0 lets the system choose)",
                    args.host, args.port
                ))
            }
        };
        let url = server.url();
        // The first line on stderr, before anything a spawned server might print.
        emit_err(&format!("mcpl inspect: {url}\n"));
        if !is_loopback(&args.host) {
            emit_err(&format!(
                "mcpl inspect: warning: listening on {} is reachable from other machines; \
                 anyone with the URL (and its token) can drive this host\n",
                args.host
            ));
        }
        if args.open {
            open_browser(&url);
        }
        let e = engine.clone();
        tokio::spawn(async move {
            if let Err(err) = e.connect().await {
                emit_err(&format!("mcpl inspect: {err}\n"));
            }
        });
        let served = server.serve(Arc::new(engine)).await;
        crate::server_stderr::drain().await;
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => usage(format!("the dashboard stopped: {e}")),
        }
    })
}

/// Opens `url` in a browser, reporting (not failing on) a missing one.
fn open_browser(url: &str) {
    let browser = std::env::var("BROWSER").unwrap_or_else(|_| "xdg-open".into());
    let spawned = std::process::Command::new(&browser)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        emit_err(&format!(
            "mcpl inspect: warning: cannot open a browser with {browser:?}: {e}; open the URL above\n"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for h in ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["0.0.0.0", "192.168.1.2", "example.com", "::"] {
            assert!(!is_loopback(h), "{h}");
        }
    }

    #[test]
    fn auto_answer_takes_an_optional_text() {
        use clap::{Args, FromArgMatches};
        let parse = |argv: &[&str]| {
            let cmd = InspectArgs::augment_args(clap::Command::new("inspect").no_binary_name(true));
            cmd.try_get_matches_from(argv)
                .and_then(|m| InspectArgs::from_arg_matches(&m))
        };
        let a = parse(&["--auto-answer", "tcp://127.0.0.1:9"]).unwrap();
        assert_eq!(a.auto_answer, Some(None));
        assert_eq!(a.target, vec!["tcp://127.0.0.1:9".to_owned()]);
        let a = parse(&["--auto-answer=hello"]).unwrap();
        assert_eq!(a.auto_answer, Some(Some("hello".into())));
        let a = parse(&[]).unwrap();
        assert_eq!((a.auto_answer, a.port), (None, DEFAULT_PORT));
    }
}
