//! `mcpl digest`: the §17.2 manifest revision (or canonical JSON) of one manifest, or of
//! every line of a JSON Lines file.

use std::process::ExitCode;

use mcpl::manifest::digest;
use serde_json::{json, Value};

use crate::input::{
    detection_note, manifest_of, too_large, Shape, ShapeArgs, Source, MAX_INPUT_BYTES,
};
use crate::term::{
    compact_json, emit, emit_data, emit_err, CliError, EXIT_OK, EXIT_REFUSED, EXIT_USAGE,
};

/// Arguments of `mcpl digest`.
#[derive(Debug, clap::Args)]
pub struct DigestArgs {
    /// The manifest: an `experimental.mcpl` object, or a whole `initialize` result or
    /// params (its `capabilities.experimental.mcpl` is used), recognised by
    /// `protocolVersion`/`serverInfo`/`clientInfo` unless a flag says which. `-` or nothing
    /// reads stdin.
    #[arg(value_name = "FILE")]
    pub file: Option<String>,
    /// Which shape the input is (`--manifest` / `--initialize`).
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Print the canonical JSON (JCS, `revision` stripped, sets sorted) instead of the
    /// revision: byte for byte the text the revision hashes, except on a terminal, where
    /// control and bidirectional characters are shown as escapes.
    #[arg(long)]
    pub canonical: bool,
    /// Read JSON Lines (one manifest per line) and print one result per line, in order; a
    /// refused line prints `error: <code>: <detail>` and the rest continue. Exit 1 if any
    /// line was refused, 2 if any line was not JSON (`invalid_json`), would cost too much
    /// to parse (`too_costly`), or was read as an `initialize` result or params without a
    /// `capabilities` object.
    #[arg(long)]
    pub lines: bool,
    /// Print `{"revision","sha256Hex","canonicalJson"}` (one object per line with `--lines`;
    /// a refused line prints `{"error":{"code","message"}}`).
    #[arg(long)]
    pub json: bool,
}

/// Why one manifest got no digest.
struct Refusal {
    code: &'static str,
    detail: String,
    /// True for refusals of the manifest itself (exit 1); false for input that is not a
    /// manifest document at all (not JSON, wrong type: exit 2).
    refused: bool,
    /// Input of the wrong shape even as a `--lines` line (an `initialize` without
    /// `capabilities`): exit 2 there too.
    wrong_shape: bool,
}

/// One manifest's outcome, rendered as one line (or one pretty document without `--lines`).
fn digest_one(doc: &Value, shape: Shape) -> Result<digest::ManifestDigest, Refusal> {
    let manifest = manifest_of(doc, shape).map_err(|e| Refusal {
        code: e.code(),
        detail: e.detail(),
        refused: false,
        wrong_shape: e.is_wrong_shape(),
    })?;
    digest::digest(manifest).map_err(|e| match e {
        // The manifest found (`experimental.mcpl`) has the wrong type: input of the wrong
        // shape, like a top-level non-object (exit 2), not a §17.2 identifier refusal.
        digest::DigestError::ManifestNotObject { found } => Refusal {
            code: e.code(),
            detail: format!(
                "expected the manifest (experimental.mcpl) to be a JSON object, found {found}"
            ),
            refused: false,
            wrong_shape: false,
        },
        digest::DigestError::IdentifierCharset { .. } => Refusal {
            code: e.code(),
            detail: detail_of(&e),
            refused: true,
            wrong_shape: false,
        },
    })
}

/// The error's message without its leading `code: ` (the CLI prints the code itself).
fn detail_of(e: &digest::DigestError) -> String {
    let text = e.to_string();
    match text.strip_prefix(e.code()) {
        Some(rest) => rest.trim_start_matches(':').trim_start().to_owned(),
        None => text,
    }
}

fn render(args: &DigestArgs, d: &digest::ManifestDigest) -> String {
    if args.json {
        compact_json(&json!({
            "revision": d.revision,
            "sha256Hex": d.sha256_hex,
            "canonicalJson": d.canonical,
        }))
    } else if args.canonical {
        format!("{}\n", d.canonical)
    } else {
        format!("{}\n", d.revision)
    }
}

fn render_refusal(args: &DigestArgs, r: &Refusal) -> String {
    if args.json {
        compact_json(&json!({"error": {"code": r.code, "message": r.detail}}))
    } else {
        // The detail quotes the manifest's own names (a position's path): one line, so
        // `--lines` keeps one answer per input line.
        format!("error: {}: {}\n", r.code, crate::term::one_line(&r.detail))
    }
}

/// Runs `mcpl digest`.
pub fn main(args: DigestArgs) -> Result<ExitCode, CliError> {
    let source = args.file.as_deref().map_or_else(Source::stdin, Source::new);
    if args.lines {
        return lines(&args, &source);
    }
    let doc = source.read_json_or_hint(
        "the input must be one JSON document (use `digest --lines` for JSON Lines)",
    )?;
    if let Some(note) = detection_note(&doc, args.shape.shape()) {
        emit_err(&note);
    }
    match digest_one(&doc, args.shape.shape()) {
        Ok(d) => {
            let text = render(&args, &d);
            if args.canonical && !args.json {
                // The canonical text is data: its bytes are what the revision hashes.
                emit_data(&text);
            } else {
                emit(&text);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(r) => {
            let err = format!("{}: {}: {}", source.name(), r.code, r.detail);
            Err(if r.refused {
                CliError::refused(err).with_hint(
                    "§17.2 refuses identifiers outside [A-Za-z0-9._:*-]; fix the named position",
                )
            } else {
                CliError::usage(err).with_hint(
                    "pass an experimental.mcpl object or a whole initialize result/params \
                     (--manifest / --initialize say which)",
                )
            })
        }
    }
}

/// `--lines`: every line gets exactly one output line, so results stay aligned with input,
/// written as the line is read (memory stays bounded by one line however long the input).
/// Exit 2 if any line was not JSON (or blank) or was read as an `initialize` without a
/// `capabilities` object, else 1 if any JSON line got no digest (an identifier refusal, a
/// non-object, an initialize result without MCPL), else 0. A line longer than
/// [`MAX_INPUT_BYTES`] ends the run there (exit 2, on stderr): where the next line starts
/// cannot be known without reading all of it.
fn lines(args: &DigestArgs, source: &Source) -> Result<ExitCode, CliError> {
    use std::io::{BufRead, Read, Write};
    let mut reader = source.open()?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut worst = EXIT_OK;
    let mut buf = Vec::new();
    for i in 0.. {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_INPUT_BYTES as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|e| CliError::usage(format!("{}: cannot read: {e}", source.name())))?;
        if read == 0 {
            break;
        }
        let mut line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        if i == 0 {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.len() > MAX_INPUT_BYTES {
            let _ = stdout.flush();
            return Err(too_large(source.name(), Some(i + 1)));
        }
        let outcome = match std::str::from_utf8(line) {
            Err(e) => Err(Refusal {
                code: "invalid_json",
                detail: format!(
                    "line {}: not UTF-8 text (invalid byte at offset {})",
                    i + 1,
                    e.valid_up_to()
                ),
                refused: false,
                wrong_shape: false,
            }),
            Ok(line) => one_line(args, i, line),
        };
        let (text, data) = match outcome {
            Ok(d) => (render(args, &d), args.canonical && !args.json),
            Err(r) => {
                worst = worst.max(if r.refused { EXIT_REFUSED } else { EXIT_USAGE });
                (render_refusal(args, &r), false)
            }
        };
        // What a terminal would act on is made visible, as `emit` does for one document;
        // canonical text is data, exact off a terminal as `emit_data` writes it.
        let shown = if data {
            crate::term::shown_data(&text)
        } else {
            crate::term::visible(&text)
        };
        if stdout.write_all(shown.as_bytes()).is_err() {
            // Nobody reads the answers any more (a closed pipe): stop reading too.
            break;
        }
    }
    let _ = stdout.flush();
    Ok(ExitCode::from(worst))
}

/// The outcome of line `i` (0-based) of `--lines`.
fn one_line(args: &DigestArgs, i: usize, line: &str) -> Result<digest::ManifestDigest, Refusal> {
    if line.trim().is_empty() {
        return Err(Refusal {
            code: "invalid_json",
            detail: format!("line {}: blank line, expected a JSON manifest", i + 1),
            refused: false,
            wrong_shape: false,
        });
    }
    if let Some(defect) = crate::input::cost_defect(line) {
        return Err(Refusal {
            code: "too_costly",
            detail: format!("line {}: {defect}", i + 1),
            refused: false,
            wrong_shape: false,
        });
    }
    match crate::input::from_str_unique(line) {
        // A line that is JSON is a manifest document: whatever stops its digest
        // (including `manifest_not_object`, a §17.2 refusal code) is a refusal, except a
        // line of the wrong shape for what was asked.
        Ok(doc) => digest_one(&doc, args.shape.shape()).map_err(|r| Refusal {
            refused: !r.wrong_shape,
            ..r
        }),
        Err(e) => Err(Refusal {
            code: "invalid_json",
            detail: format!("line {}: {e}", i + 1),
            refused: false,
            wrong_shape: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s17_2_detail_drops_the_code_prefix() {
        let e = digest::canonical_json(&json!({"featureSets":{"a b":{}}})).unwrap_err();
        let d = detail_of(&e);
        assert!(!d.starts_with("identifier_charset"), "{d}");
        assert!(d.contains("featureSets.a b"), "{d}");
    }
}
