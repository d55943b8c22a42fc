//! `mcpl grant`: what a host with a given policy would grant a server with a given
//! advertisement (§5.4 effective = advertised ∩ policy), and which declared feature sets
//! that leaves available (§6.4).

use std::process::ExitCode;

use mcpl::capability::{self, Pattern};
use mcpl::jsonrpc::json_type_name;
use mcpl::policy::{self, FeatureSets, GrantReport};
use serde_json::Value;

use crate::input::{unwrap_envelope, Source};
use crate::term::{emit, emit_err, pretty_json, CliError, Stream, Style};

/// Arguments of `mcpl grant`.
#[derive(Debug, clap::Args)]
pub struct GrantArgs {
    /// The server's advertisement: an `experimental.mcpl` object, an MCP `capabilities`
    /// object, or a whole `initialize` result/params (the outer `tools` then counts). `-`
    /// reads stdin.
    #[arg(long, value_name = "FILE")]
    pub advertised: String,
    /// Host policy: capability paths or §5.4 patterns (`*` matches exactly one segment).
    /// Takes one or more values and may repeat. Without it nothing is allowed.
    #[arg(long, value_name = "PATTERN", num_args = 1.., action = clap::ArgAction::Append)]
    pub allow: Vec<String>,
    /// Print the report as JSON (`advertised`, `effectiveCapabilities`,
    /// `deniedCapabilities`, `featureSets`, and `findings` when there are any).
    #[arg(long)]
    pub json: bool,
}

/// Computes the report for a parsed document. Patterns must already be valid.
fn report(doc: &Value, allow: &[String]) -> Result<GrantReport, String> {
    let doc = unwrap_envelope(doc).map_err(|e| e.detail())?;
    if !doc.is_object() {
        return Err(format!(
            "expected a JSON object (experimental.mcpl, capabilities or an initialize \
             result), found {}",
            json_type_name(doc)
        ));
    }
    let patterns = allow.iter().map(String::as_str);
    let result = match doc.get("capabilities") {
        // An initialize result/params: read its capabilities object directly, so an MCP-only
        // advertisement (no `experimental`) still counts its outer `tools`.
        Some(caps @ Value::Object(_)) => {
            let mut adv = capability::advertised_from_capabilities(caps);
            let mcpl = caps
                .get("experimental")
                .and_then(|e| e.get("mcpl"))
                .unwrap_or(&Value::Null);
            let (decls, findings) = FeatureSets::from_mcpl(mcpl);
            adv.findings.extend(findings);
            policy::grant_report(&adv, &decls, patterns)
        }
        _ => policy::grant_report_from_value(doc, patterns),
    };
    result.map_err(|e| format!("{}: {e}", e.code()))
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
            emit_err(&format!(
                "{} --allow {p:?} names no capability path and grants nothing \
                 (a bare parent like `channels` is not a path; try `{p}.*`)\n",
                err_style.warn("warning:")
            ));
        }
    }
    let source = Source::new(args.advertised.clone());
    let doc = source.read_json()?;
    let report = report(&doc, &args.allow)
        .map_err(|e| CliError::usage(format!("{}: {e}", source.name())))?;
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
        let doc = json!({"capabilities":{"tools":{}}});
        let r = report(&doc, &["tools".to_owned()]).unwrap();
        assert_eq!(r.advertised, vec!["tools"]);
        assert_eq!(r.effective_capabilities, vec!["tools"]);
    }

    #[test]
    fn s5_4_absence_of_policy_is_denial() {
        let doc = json!({"pushEvents":true});
        let r = report(&doc, &[]).unwrap();
        assert_eq!(r.advertised, vec!["pushEvents"]);
        assert!(r.effective_capabilities.is_empty());
        assert_eq!(r.denied_capabilities, vec!["pushEvents"]);
    }

    #[test]
    fn non_object_advertisement_is_rejected() {
        assert!(report(&json!([1]), &[]).is_err());
    }
}
