//! `mcpl vectors`: run the frozen §17.2 digest conformance corpus and report
//! `N passed, M failed`.

use std::path::PathBuf;
use std::process::ExitCode;

use mcpl::manifest::vectors::{self, VectorKind, VectorReport};
use serde_json::json;

use crate::input::{parse_json, Source};
use crate::term::{emit, pretty_json, CliError, Stream, Style, EXIT_REFUSED};

/// The environment variable that points at the vector file when no FILE is given.
pub const ENV_VAR: &str = "MCPL_DIGEST_VECTORS";
/// The default location, relative to the current directory.
pub const DEFAULT_PATH: &str = "../shared/conformance/manifest-digest-vectors.json";

/// Arguments of `mcpl vectors`.
#[derive(Debug, clap::Args)]
pub struct VectorsArgs {
    /// The vector file (`-` for stdin). Default: `$MCPL_DIGEST_VECTORS`, else
    /// `../shared/conformance/manifest-digest-vectors.json` relative to the current directory.
    #[arg(value_name = "FILE", conflicts_with = "builtin")]
    pub file: Option<String>,
    /// Run the vectors built into this binary (the §17.2 worked example and a few pinned
    /// cases) instead of a file.
    #[arg(long)]
    pub builtin: bool,
    /// List every vector, not only the failing ones.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print `{passed, failed, results: [{name, kind, passed, failures}]}`.
    #[arg(long)]
    pub json: bool,
}

/// Where the vector file is read from, and why (for messages).
fn locate(args: &VectorsArgs) -> (Source, &'static str) {
    if let Some(f) = &args.file {
        return (Source::new(f.clone()), "the FILE argument");
    }
    match std::env::var_os(ENV_VAR) {
        Some(p) if !p.is_empty() => (
            Source::new(PathBuf::from(p).to_string_lossy().into_owned()),
            "$MCPL_DIGEST_VECTORS",
        ),
        _ => (Source::new(DEFAULT_PATH), "the default path"),
    }
}

fn kind_name(k: VectorKind) -> &'static str {
    match k {
        VectorKind::Manifest => "manifest",
        VectorKind::Sort => "sort",
    }
}

/// Runs `mcpl vectors`. Exit 1 if any vector failed, 2 if the file cannot be read, is not
/// JSON, or is not a vector file (including one with no vectors).
pub fn main(args: VectorsArgs) -> Result<ExitCode, CliError> {
    let (file, name) = if args.builtin {
        (vectors::builtin(), "<builtin>".to_owned())
    } else {
        let (source, why) = locate(&args);
        let hint = format!(
            "looked at {} ({why}); pass a FILE, set {ENV_VAR}=path, or use --builtin",
            source.name()
        );
        let text = source.read_text().map_err(|e| e.with_hint(hint.clone()))?;
        let value = parse_json(source.name(), &text).map_err(|e| e.with_hint(hint.clone()))?;
        (value, source.name().to_owned())
    };
    let report = vectors::run(&file);
    if !report.file_errors.is_empty() {
        return Err(CliError::usage(format!(
            "{name}: not a digest vector file: {}",
            report.file_errors.join("; ")
        ))
        .with_hint("expected the format of shared/conformance/manifest-digest-vectors.json"));
    }
    // A file with nothing to run proves nothing: "0 passed, 0 failed" would read as success.
    if report.results.is_empty() {
        return Err(CliError::usage(format!(
            "{name}: not a digest vector file: its `vectors` array is empty, nothing to run"
        ))
        .with_hint("expected the format of shared/conformance/manifest-digest-vectors.json"));
    }
    let passed = report.results.iter().filter(|r| r.passed()).count();
    let failed = report.results.len() - passed;
    if args.json {
        emit(&pretty_json(&json!({
            "file": name,
            "passed": passed,
            "failed": failed,
            "results": report.results.iter().map(|r| json!({
                "name": r.name,
                "kind": kind_name(r.kind),
                "passed": r.passed(),
                "failures": r.failures,
            })).collect::<Vec<_>>(),
        })));
    } else {
        emit(&human(&report, args.verbose, passed, failed));
    }
    Ok(if failed > 0 {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Failing vectors (all vectors with `--verbose`) then the `N passed, M failed` line.
fn human(report: &VectorReport, verbose: bool, passed: usize, failed: usize) -> String {
    let s = Style::for_stream(Stream::Stdout);
    let mut out = String::new();
    for r in &report.results {
        if r.passed() {
            if verbose {
                out.push_str(&format!(
                    "{} {} {}\n",
                    s.good("ok  "),
                    s.dim(&format!("{:<8}", kind_name(r.kind))),
                    r.name
                ));
            }
        } else {
            out.push_str(&format!(
                "{} {} {}\n",
                s.bad("FAIL"),
                s.dim(&format!("{:<8}", kind_name(r.kind))),
                r.name
            ));
            for f in &r.failures {
                out.push_str(&format!("       {f}\n"));
            }
        }
    }
    let tally = format!("{passed} passed, {failed} failed");
    out.push_str(&if failed > 0 {
        s.bad(&tally)
    } else {
        s.good(&tally)
    });
    out.push('\n');
    out
}
