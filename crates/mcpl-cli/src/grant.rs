//! `mcpl grant`: what a host with a given policy would grant a server with a given
//! advertisement (§5.4 effective = advertised ∩ policy), and which declared feature sets
//! that leaves available (§6.4).

use std::process::ExitCode;

use mcpl::capability::{self, Grant, Pattern};
use mcpl::policy::{self, FeatureSets, GrantReport};
use serde_json::Value;

use crate::input::{detection_note, document, Document, Shape, ShapeArgs, Source};
use crate::term::{emit, emit_err, pretty_json, CliError, Stream, Style};

/// Arguments of `mcpl grant`.
#[derive(Debug, clap::Args)]
pub struct GrantArgs {
    /// The server's advertisement: an `experimental.mcpl` object, or a whole `initialize`
    /// result/params (the outer `tools` then counts), recognised by
    /// `protocolVersion`/`serverInfo`/`clientInfo` unless a flag says which. `-` reads stdin.
    #[arg(long, value_name = "FILE")]
    pub advertised: String,
    /// Which shape the advertisement is (`--manifest` / `--initialize`).
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Host policy: capability paths or §5.4 patterns (`*` matches exactly one segment).
    /// Takes one or more values and may repeat. Without it nothing is allowed.
    #[arg(long, value_name = "PATTERN", num_args = 1.., action = clap::ArgAction::Append)]
    pub allow: Vec<String>,
    /// Print the report as JSON (`advertised`, `effectiveCapabilities`,
    /// `deniedCapabilities`, `featureSets`, and `findings` when there are any).
    #[arg(long)]
    pub json: bool,
}

/// Computes the report for a parsed document read as `shape`. Patterns must already be
/// valid.
fn report(doc: &Value, shape: Shape, allow: &[String]) -> Result<GrantReport, String> {
    let doc = document(doc, shape).map_err(|e| format!("{}: {}", e.code(), e.detail()))?;
    let (mut adv, mcpl) = match doc {
        // An initialize result/params: its capabilities object, so an MCP-only advertisement
        // (no `experimental`) still counts its outer `tools` (§5.1).
        Document::Initialize { capabilities } => (
            capability::advertised_from_capabilities(capabilities),
            capabilities
                .get("experimental")
                .and_then(|e| e.get("mcpl"))
                .unwrap_or(&Value::Null),
        ),
        Document::Manifest(m) => (capability::advertised(m), m),
    };
    let (decls, findings) = FeatureSets::from_mcpl(mcpl);
    adv.findings.extend(findings);
    policy::grant_report(&adv, &decls, allow.iter().map(String::as_str))
        .map_err(|e| format!("{}: {e}", e.code()))
}

/// Runs `mcpl grant`.
pub fn main(args: GrantArgs) -> Result<ExitCode, CliError> {
    // Patterns first: a malformed pattern is the user's own configuration, a usage error.
    let err_style = Style::for_stream(Stream::Stderr);
    for p in &args.allow {
        let pattern = Pattern::parse(p).map_err(|e| {
            CliError::usage(format!("invalid --allow pattern: {e}")).with_hint(
                "use exact paths like `channels.publish` or whole-segment wildcards like \
                 `channels.*`",
            )
        })?;
        if pattern.resolved().is_empty() {
            // The library's rule for a host's own policy, with its hint; a warning here, as
            // `grant` only reports what the patterns would grant.
            if let Err(e) = Grant::from_policy([p.as_str()]) {
                emit_err(&format!("{} --allow: {e}\n", err_style.warn("warning:")));
            }
        }
    }
    let source = Source::new(args.advertised.clone());
    let doc = source.read_json()?;
    let shape = args.shape.shape();
    let report = report(&doc, shape, &args.allow).map_err(|e| {
        CliError::usage(format!("{}: {e}", source.name())).with_hint(
            "pass an experimental.mcpl object or a whole initialize result/params \
             (--manifest / --initialize say which)",
        )
    })?;
    if let Some(note) = detection_note(&doc, shape) {
        emit_err(&note);
    }
    if args.json {
        emit(&pretty_json(&report));
    } else {
        emit(&table(&report, args.allow.is_empty()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The readable form: every advertised path with its decision, then every feature set.
fn table(r: &GrantReport, no_policy: bool) -> String {
    let s = Style::for_stream(Stream::Stdout);
    let mut out = String::new();
    let width = r
        .advertised
        .iter()
        .map(|p| p.len())
        .chain(r.feature_sets.keys().map(String::len))
        .chain([24])
        .max()
        .unwrap_or(24)
        + 2;
    out.push_str(&s.bold(&format!("{:<width$}{}\n", "ADVERTISED CAPABILITY", "GRANT")));
    if r.advertised.is_empty() {
        out.push_str(&s.dim("(nothing advertised)\n"));
    }
    for path in &r.advertised {
        let decision = if r.effective_capabilities.contains(path) {
            s.good("granted")
        } else {
            s.bad("denied")
        };
        out.push_str(&format!("{path:<width$}{decision}\n"));
    }
    out.push_str(&format!(
        "{} of {} advertised paths granted\n",
        r.effective_capabilities.len(),
        r.advertised.len()
    ));
    if !r.feature_sets.is_empty() {
        out.push('\n');
        out.push_str(&s.bold(&format!("{:<width$}{}\n", "FEATURE SET", "STATUS")));
        for (name, fs) in &r.feature_sets {
            // The advertisement's own key: on one line (`term::one_line`).
            let name = crate::term::one_line(name);
            let status = if fs.available {
                s.good("available")
            } else {
                let mut t = format!("unavailable: {}", fs.reason.unwrap_or("unknown"));
                if !fs.missing_capabilities.is_empty() {
                    t.push_str(&format!(
                        " (missing {})",
                        fs.missing_capabilities.join(", ")
                    ));
                }
                s.bad(&t)
            };
            out.push_str(&format!("{name:<width$}{status}\n"));
        }
    }
    if !r.findings.is_empty() {
        out.push('\n');
        out.push_str(&s.bold("ADVERTISEMENT FINDINGS\n"));
        for f in &r.findings {
            out.push_str(&format!("{} {f}\n", s.warn("note:")));
        }
    }
    if no_policy {
        out.push_str(&s.dim(
            "\nno --allow given: absence is denial, nothing is granted (try --allow '*' or \
             --allow channels.*)\n",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s5_1_outer_tools_counts_for_initialize_result_without_experimental() {
        let doc = json!({"protocolVersion":"2025-06-18","capabilities":{"tools":{}}});
        let r = report(&doc, Shape::Detect, &["tools".to_owned()]).unwrap();
        assert_eq!(r.advertised, vec!["tools"]);
        let doc = json!({"capabilities":{"tools":{}}});
        let r = report(&doc, Shape::Initialize, &["tools".to_owned()]).unwrap();
        assert_eq!(r.advertised, vec!["tools"]);
        assert_eq!(r.effective_capabilities, vec!["tools"]);
    }

    #[test]
    fn s5_4_absence_of_policy_is_denial() {
        let doc = json!({"pushEvents":true});
        let r = report(&doc, Shape::Detect, &[]).unwrap();
        assert_eq!(r.advertised, vec!["pushEvents"]);
        assert!(r.effective_capabilities.is_empty());
        assert_eq!(r.denied_capabilities, vec!["pushEvents"]);
    }

    #[test]
    fn non_object_advertisement_is_rejected() {
        assert!(report(&json!([1]), Shape::Detect, &[]).is_err());
    }
}
