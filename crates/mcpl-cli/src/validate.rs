//! `mcpl validate`: every validation finding of a manifest, with severity and the spec
//! section that decides it (§5.1, §6, §17.1, §17.2).

use std::process::ExitCode;

use mcpl::manifest::review::{self, Finding, Severity};
use serde_json::json;

use crate::input::{detection_note, manifest_of, ShapeArgs, Source};
use crate::term::{emit, emit_err, pretty_json, CliError, Stream, Style, EXIT_REFUSED};

/// Arguments of `mcpl validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The manifest: an `experimental.mcpl` object, or a whole `initialize` result/params
    /// (recognised by `protocolVersion`/`serverInfo`/`clientInfo` unless a flag says which).
    /// `-` reads stdin.
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Which shape the input is (`--manifest` / `--initialize`).
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Print `{"findings": [{code, severity, section, path, message}]}`.
    #[arg(long)]
    pub json: bool,
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Runs `mcpl validate`. Exit 1 when any finding is an error.
pub fn main(args: ValidateArgs) -> Result<ExitCode, CliError> {
    let source = Source::new(args.file.clone());
    let doc = source.read_json_or_hint(
        "validate reads one JSON document: an experimental.mcpl object or a whole initialize \
         result/params",
    )?;
    let shape = args.shape.shape();
    let manifest = manifest_of(&doc, shape).map_err(|e| {
        CliError::usage(format!("{}: {}: {}", source.name(), e.code(), e.detail())).with_hint(
            "pass an experimental.mcpl object or a whole initialize result/params \
             (--manifest / --initialize say which)",
        )
    })?;
    if let Some(note) = detection_note(&doc, shape) {
        emit_err(&note);
    }
    let findings = review::validate(manifest);
    if args.json {
        emit(&pretty_json(&json!({ "findings": findings })));
    } else {
        emit(&human(&findings));
    }
    Ok(if review::has_errors(&findings) {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::SUCCESS
    })
}

/// One line per finding (`severity section path: code: message`), then a tally.
fn human(findings: &[Finding]) -> String {
    let s = Style::for_stream(Stream::Stdout);
    let mut out = String::new();
    for f in findings {
        let sev = severity_name(f.severity);
        let sev = match f.severity {
            Severity::Error => s.bad(&format!("{sev:<7}")),
            Severity::Warning => s.warn(&format!("{sev:<7}")),
            Severity::Info => s.dim(&format!("{sev:<7}")),
        };
        // A finding's path and message quote the manifest's own keys: one line each.
        let text = f.to_string();
        out.push_str(&format!(
            "{sev} {:<6} {}\n",
            f.section,
            crate::term::one_line(&text)
        ));
    }
    let count = |sev| findings.iter().filter(|f| f.severity == sev).count();
    let tally = format!(
        "{} errors, {} warnings, {} info",
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info)
    );
    out.push_str(&if count(Severity::Error) > 0 {
        s.bad(&tally)
    } else {
        s.good(&tally)
    });
    out.push('\n');
    out
}
