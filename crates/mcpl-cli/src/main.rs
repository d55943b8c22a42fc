//! `mcpl`: offline tools for MCPL 0.5 manifests, grants and URIs, a reference server, and a
//! live conformance checker. Exit codes: 0 ok, 1 refused input or failed checks, 2 usage or
//! I/O error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;

/// The `mcpl` command line.
#[derive(Debug, Parser)]
#[command(
    name = "mcpl",
    version,
    about = "MCP Live (MCPL) 0.5 tools and conformance checker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a live server against the spec, acting as a strict host.
    Check(check::CheckArgs),
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
    match cli.command {
        Command::Check(args) => check::main(args),
    }
}
