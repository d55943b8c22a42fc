//! Reading input files (or stdin for `-`), parsing JSON, and finding the manifest inside
//! the shapes a user is likely to have at hand.

use std::io::Read;

use serde_json::Value;

use crate::term::CliError;

/// One input source: a path, or stdin when written as `-`.
#[derive(Debug, Clone)]
pub struct Source {
    /// The argument as given (`-` for stdin).
    pub arg: String,
}

impl Source {
    /// A source from a command-line argument.
    pub fn new(arg: impl Into<String>) -> Source {
        Source { arg: arg.into() }
    }

    /// Standard input.
    pub fn stdin() -> Source {
        Source::new("-")
    }

    /// The name used in messages: the path, or `<stdin>`.
    pub fn name(&self) -> &str {
        if self.arg == "-" {
            "<stdin>"
        } else {
            &self.arg
        }
    }

    /// Reads the whole source as UTF-8 text. Missing files, unreadable files and invalid
    /// UTF-8 are usage errors (exit 2) naming the source.
    pub fn read_text(&self) -> Result<String, CliError> {
        let bytes = if self.arg == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| CliError::usage(format!("<stdin>: cannot read: {e}")))?;
            buf
        } else {
            std::fs::read(&self.arg).map_err(|e| {
                let what = match e.kind() {
                    std::io::ErrorKind::NotFound => "no such file".to_owned(),
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                    _ => e.to_string(),
                };
                CliError::usage(format!("{}: cannot read: {what}", self.arg))
                    .with_hint("check the path, or pass `-` to read from stdin")
            })?
        };
        String::from_utf8(bytes).map_err(|e| {
            CliError::usage(format!(
                "{}: not UTF-8 text (invalid byte at offset {})",
                self.name(),
                e.utf8_error().valid_up_to()
            ))
        })
    }

    /// Reads and parses the source as one JSON document.
    pub fn read_json(&self) -> Result<Value, CliError> {
        let text = self.read_text()?;
        parse_json(self.name(), &text)
    }

    /// [`Source::read_json`], with `hint` in place of the generic one when the text is not
    /// one JSON document (a read failure keeps its own hint).
    pub fn read_json_or_hint(&self, hint: &str) -> Result<Value, CliError> {
        let text = self.read_text()?;
        parse_json(self.name(), &text).map_err(|e| e.with_hint(hint))
    }
}

/// Parses `text` as one JSON document; a parse failure is a usage error naming `name`.
pub fn parse_json(name: &str, text: &str) -> Result<Value, CliError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text).map_err(|e| {
        if text.trim().is_empty() {
            CliError::usage(format!("{name}: empty input, expected a JSON document"))
        } else {
            CliError::usage(format!("{name}: not JSON: {e}"))
        }
        .with_hint("the input must be one JSON document")
    })
}

/// Why [`manifest_of`] could not find a manifest in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// The document is not a JSON object.
    NotObject(&'static str),
    /// The document is an `initialize` result/params or a `capabilities` object but carries
    /// no `experimental.mcpl`.
    NoMcpl,
    /// The document is a JSON-RPC message whose `result`/`params` is missing or not an object.
    NotInitialize,
}

impl ShapeError {
    /// A stable snake_case code, printed by `digest --lines`.
    pub fn code(&self) -> &'static str {
        match self {
            ShapeError::NotObject(_) => "manifest_not_object",
            ShapeError::NoMcpl => "no_manifest",
            ShapeError::NotInitialize => "no_manifest",
        }
    }

    /// A one-line explanation.
    pub fn detail(&self) -> String {
        match self {
            ShapeError::NotObject(found) => format!(
                "expected a JSON object (an experimental.mcpl manifest or an initialize \
                 result), found {found}"
            ),
            ShapeError::NoMcpl => {
                "the initialize result/params has no capabilities.experimental.mcpl \
                 (the server does not advertise MCPL)"
                    .to_owned()
            }
            ShapeError::NotInitialize => {
                "the JSON-RPC message has no object `result` or `params` to read".to_owned()
            }
        }
    }
}

/// Unwraps a JSON-RPC envelope (`{"jsonrpc", "result"|"params"}`) to its payload; any other
/// value is returned as is.
pub fn unwrap_envelope(doc: &Value) -> Result<&Value, ShapeError> {
    let Some(obj) = doc.as_object() else {
        return Ok(doc);
    };
    if !obj.contains_key("jsonrpc") {
        return Ok(doc);
    }
    match obj.get("result").or_else(|| obj.get("params")) {
        Some(inner @ Value::Object(_)) => Ok(inner),
        _ => Err(ShapeError::NotInitialize),
    }
}

/// The manifest (§17.1: the `experimental.mcpl` object) held by a document.
///
/// A JSON-RPC message is unwrapped to its `result`/`params` first; the rest is
/// [`mcpl::manifest::review::extract_manifest`] (an `initialize` result or params, an MCP
/// `capabilities` object with `experimental`, or the manifest itself), so every subcommand
/// finds the same manifest in the same document. A wrapper without `experimental.mcpl` is
/// [`ShapeError::NoMcpl`]; a document that is not an object is [`ShapeError::NotObject`].
pub fn manifest_of(doc: &Value) -> Result<&Value, ShapeError> {
    let doc = unwrap_envelope(doc)?;
    if !doc.is_object() {
        return Err(ShapeError::NotObject(mcpl::jsonrpc::json_type_name(doc)));
    }
    mcpl::manifest::review::extract_manifest(doc)
        .map(|(manifest, _caps)| manifest)
        .ok_or(ShapeError::NoMcpl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s17_1_manifest_is_experimental_mcpl_of_initialize() {
        let m = json!({"version":"0.5","pushEvents":true});
        let result =
            json!({"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":m}}});
        assert_eq!(manifest_of(&result), Ok(&m));
        let envelope = json!({"jsonrpc":"2.0","id":1,"result":result});
        assert_eq!(manifest_of(&envelope), Ok(&m));
        assert_eq!(manifest_of(&m), Ok(&m));
        let caps = json!({"tools":{},"experimental":{"mcpl":m}});
        assert_eq!(manifest_of(&caps), Ok(&m));
    }

    #[test]
    fn s17_1_initialize_without_mcpl_is_no_manifest() {
        let result = json!({"capabilities":{"tools":{}}});
        assert_eq!(manifest_of(&result), Err(ShapeError::NoMcpl));
        assert_eq!(
            manifest_of(&json!([1])),
            Err(ShapeError::NotObject("array"))
        );
        assert_eq!(
            manifest_of(&json!({"jsonrpc":"2.0","id":1,"error":{}})),
            Err(ShapeError::NotInitialize)
        );
    }
}
