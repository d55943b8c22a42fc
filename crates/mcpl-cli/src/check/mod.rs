//! `mcpl check`: the live conformance checker.

use std::process::ExitCode;

/// Arguments of `mcpl check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Target: `tcp://HOST:PORT`, `ws://…`, `wss://…`, `mcpl://…`, or `-- CMD ARGS…`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub target: Vec<String>,
}

/// Runs `mcpl check` and returns its exit code.
pub fn main(_args: CheckArgs) -> ExitCode {
    eprintln!("mcpl check: not implemented yet");
    ExitCode::from(2)
}
