//! `mcpl uri`: resolve endpoint URIs (RFC-004) into their three values, or say why one is
//! refused.

use std::process::ExitCode;

use mcpl::uri::{self, EndpointUri, RejectReason};
use serde_json::{json, Value};

use crate::term::{emit, one_line, pretty_json, CliError, Stream, Style};

/// Arguments of `mcpl uri`.
#[derive(Debug, clap::Args)]
pub struct UriArgs {
    /// One or more endpoint URIs (`mcpl://…`, `wss://…`, `ws://…`).
    #[arg(value_name = "URI", required = true)]
    pub uris: Vec<String>,
    /// Print one JSON array with one object per URI, in argument order:
    /// `{configuredUri, canonicalUri, resolvedTransport}`, or for a refused URI
    /// `{configuredUri, error: {code, message}}`.
    #[arg(long)]
    pub json: bool,
}

/// The JSON object of one URI's outcome (RFC-004 §5 values, or the refusal).
fn to_json(configured: &str, outcome: &Result<EndpointUri, RejectReason>) -> Value {
    match outcome {
        Ok(e) => json!({
            "configuredUri": e.configured_uri(),
            "canonicalUri": e.canonical_uri(),
            "resolvedTransport": e.resolved_transport(),
        }),
        Err(r) => json!({
            "configuredUri": configured,
            "error": {"code": r.code(), "message": r.to_string()},
        }),
    }
}

/// Runs `mcpl uri`. Exit 1 when any URI is refused; every URI is reported either way.
///
/// Output choice: `--json` prints a single JSON array (one document, so `jq '.[0]'` works
/// and a consumer needs one parse), not JSON Lines.
pub fn main(args: UriArgs) -> Result<ExitCode, CliError> {
    let outcomes: Vec<_> = args
        .uris
        .iter()
        .map(|u| (u.as_str(), uri::resolve(u)))
        .collect();
    let any_refused = outcomes.iter().any(|(_, o)| o.is_err());
    if args.json {
        let all: Vec<Value> = outcomes.iter().map(|(c, o)| to_json(c, o)).collect();
        emit(&pretty_json(&all));
    } else {
        let s = Style::for_stream(Stream::Stdout);
        let mut out = String::new();
        // Each value is kept on its own line (`one_line`): the configured URI is the
        // caller's text as given, and a line break in it (refused, but still echoed) would
        // otherwise print a line of the report's own shape.
        for (i, (configured, outcome)) in outcomes.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&format!("configuredUri      {}\n", one_line(configured)));
            match outcome {
                Ok(e) => {
                    out.push_str(&format!(
                        "canonicalUri       {}\n",
                        one_line(e.canonical_uri())
                    ));
                    out.push_str(&format!(
                        "resolvedTransport  {}\n",
                        one_line(e.resolved_transport())
                    ));
                }
                Err(r) => {
                    out.push_str(&format!(
                        "{}              {}: {}\n",
                        s.bad("error"),
                        r.code(),
                        one_line(&r.to_string())
                    ));
                }
            }
        }
        emit(&out);
    }
    Ok(if any_refused {
        ExitCode::from(crate::term::EXIT_REFUSED)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc004_rejected_json_names_code_and_configured_uri() {
        let v = to_json("mcpl:///evil", &uri::resolve("mcpl:///evil"));
        assert_eq!(v["configuredUri"], "mcpl:///evil");
        assert_eq!(v["error"]["code"], "empty_authority");
        assert!(v.get("canonicalUri").is_none());
    }
}
