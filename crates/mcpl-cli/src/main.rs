//! `mcpl`: offline tools for MCPL 0.5 manifests, grants and URIs, a reference server, and a
//! live conformance checker. Exit codes: 0 ok, 1 refused input or failed checks, 2 usage or
//! I/O error (including input that is not JSON or has the wrong shape).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod check_host;
mod diff;
mod digest;
mod grant;
mod input;
mod inspect;
mod reader_forward;
mod serve;
mod server_stderr;
mod term;
mod uri;
mod validate;
mod vectors;

/// The `mcpl` command line.
#[derive(Debug, Parser)]
#[command(
    name = "mcpl",
    version,
    about = "MCP Live (MCPL) 0.5 tools and conformance checker",
    after_help = "Exit codes: 0 ok, 1 refused input or failed checks, 2 usage or I/O error. \
                  FILE arguments accept `-` for stdin. Colour only on a terminal; NO_COLOR \
                  disables it."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a manifest's §17.2 revision (`sha256:…`) or its canonical JSON.
    Digest(digest::DigestArgs),
    /// Report every validation finding of a manifest with severity and spec section.
    Validate(validate::ValidateArgs),
    /// Show the changed domains and the host's §17.6 change receipt between two manifests.
    Diff(diff::DiffArgs),
    /// Show what a host would grant an advertisement under a policy (§5.4, §6.4).
    Grant(grant::GrantArgs),
    /// Resolve mcpl:// (and ws/wss) endpoint URIs into their three values (RFC-004).
    Uri(uri::UriArgs),
    /// Run the frozen §17.2 digest conformance vectors.
    Vectors(vectors::VectorsArgs),
    /// Run the reference MCPL server.
    Serve(serve::ServeArgs),
    /// Check a live server against the spec, acting as a strict host.
    Check(check::CheckArgs),
    /// Check a host against the spec, acting as a server it connects to.
    CheckHost(check_host::CheckHostArgs),
    /// Drive a server by hand as a strict host: a web dashboard (or `--repl`) with tools,
    /// grants, hooks, events, channels, requests, manifest, log and the check suite.
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Digest(args) => digest::main(args),
        Command::Validate(args) => validate::main(args),
        Command::Diff(args) => diff::main(args),
        Command::Grant(args) => grant::main(args),
        Command::Uri(args) => uri::main(args),
        Command::Vectors(args) => vectors::main(args),
        Command::Serve(args) => serve::main(args),
        Command::Check(args) => return check::main(args),
        Command::CheckHost(args) => return check_host::main(args),
        Command::Inspect(args) => return inspect::main(args),
    };
    result.unwrap_or_else(|e| e.report())
}
