//! `mcpl diff`: the changed §17.1 domains between two manifests and the host's §17.6 change
//! receipt impacts (with dispositions) for that change.

use std::process::ExitCode;

use mcpl::manifest::review::{self, Diff};
use serde_json::Value;

use crate::input::{manifest_of, Shape, ShapeArgs, Source};
use crate::term::{emit, emit_err, pretty_json, CliError, Stream, Style};

/// Arguments of `mcpl diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The manifest in force (an `experimental.mcpl` object or an initialize result/params,
    /// recognised by `protocolVersion`/`serverInfo`/`clientInfo` unless a flag says which).
    #[arg(value_name = "OLD")]
    pub old: String,
    /// The new manifest, same shapes. At most one of OLD and NEW may be `-` (stdin).
    #[arg(value_name = "NEW")]
    pub new: String,
    /// Print `{"domains": [...], "impacts": [...]}`.
    #[arg(long)]
    pub json: bool,
    /// Which shape both inputs are (`--manifest` / `--initialize`).
    #[command(flatten)]
    pub shape: ShapeArgs,
}

fn read_manifest(arg: &str, shape: Shape) -> Result<Value, CliError> {
    let source = Source::new(arg);
    let doc = source.read_json()?;
    manifest_of(&doc, shape).cloned().map_err(|e| {
        CliError::usage(format!("{}: {}: {}", source.name(), e.code(), e.detail()))
            .with_hint("pass experimental.mcpl objects or whole initialize results/params")
    })
}

/// The wire spelling of a serialisable enum (impact, disposition).
fn wire<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

/// Runs `mcpl diff`. Exit 0 whether or not anything changed (a difference is not a failed
/// check); 2 for unreadable input.
pub fn main(args: DiffArgs) -> Result<ExitCode, CliError> {
    if args.old == "-" && args.new == "-" {
        return Err(
            CliError::usage("diff: OLD and NEW cannot both be stdin (`-`)")
                .with_hint("write one of the manifests to a file"),
        );
    }
    let old = read_manifest(&args.old, args.shape.shape())?;
    let new = read_manifest(&args.new, args.shape.shape())?;
    let warn = Style::for_stream(Stream::Stderr);
    for (name, m) in [(&args.old, &old), (&args.new, &new)] {
        let errors = review::validate(m)
            .iter()
            .filter(|f| f.severity == review::Severity::Error)
            .count();
        if errors > 0 {
            emit_err(&format!(
                "{} {name} has {errors} validation error(s); run `mcpl validate {name}`\n",
                warn.warn("warning:")
            ));
        }
    }
    let d = review::diff(&old, &new);
    if args.json {
        emit(&pretty_json(&d));
    } else {
        emit(&human(&d, &old, &new));
    }
    Ok(ExitCode::SUCCESS)
}

fn human(d: &Diff, old: &Value, new: &Value) -> String {
    let s = Style::for_stream(Stream::Stdout);
    if d.domains.is_empty() && d.impacts.is_empty() {
        // `version` is in the manifest but in no domain (§17.1): say so rather than "no
        // change" when it is what differs.
        let (was, now) = (old.get("version"), new.get("version"));
        if was != now {
            return format!(
                "no domain changed; version changed from {} to {} (protocol identity, not a \
                 domain, §17.1)\n",
                shown(was),
                shown(now)
            );
        }
        return "no change\n".to_owned();
    }
    let mut out = String::new();
    let domains: Vec<&str> = d.domains.iter().map(|x| x.as_str()).collect();
    out.push_str(&format!(
        "{} {}\n",
        s.bold("changed domains:"),
        if domains.is_empty() {
            "(none)".to_owned()
        } else {
            domains.join(", ")
        }
    ));
    if d.impacts.is_empty() {
        out.push_str("no impacts\n");
        return out;
    }
    out.push('\n');
    out.push_str(&s.bold(&format!(
        "{:<32} {:<16} {}\n",
        "IMPACT", "DISPOSITION", "SUBJECT"
    )));
    for i in &d.impacts {
        let disposition = wire(&i.disposition);
        let padded = format!("{disposition:<16}");
        let disposition = match disposition.as_str() {
            "decision-needed" => s.warn(&padded),
            "applied" => s.good(&padded),
            _ => s.dim(&padded),
        };
        // Names a manifest's own key: on one line (`term::one_line`).
        let mut subject = crate::term::one_line(&i.subject).into_owned();
        if let Some(r) = i.reason {
            subject.push_str(&format!(" ({r})"));
        }
        out.push_str(&format!(
            "{:<32} {disposition} {subject}\n",
            wire(&i.impact)
        ));
    }
    out
}

/// A `version` value as JSON, `absent` when there is none, cut to 64 characters.
fn shown(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "absent".to_owned();
    };
    let text = v.to_string();
    if text.chars().nth(64).is_none() {
        return text;
    }
    let head: String = text.chars().take(64).collect();
    format!("{head}… ({} bytes)", text.len())
}
