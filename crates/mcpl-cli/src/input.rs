//! Reading input files (or stdin for `-`), parsing JSON, and finding the manifest in a
//! document: the manifest itself, or an `initialize` result or params, as `--manifest` /
//! `--initialize` say or as recognised by `protocolVersion`/`serverInfo`/`clientInfo`.

use std::io::{BufRead, Read};

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

    /// Opens the source for reading. A missing or unreadable file is a usage error (exit 2)
    /// naming it.
    pub fn open(&self) -> Result<Box<dyn BufRead>, CliError> {
        if self.arg == "-" {
            return Ok(Box::new(std::io::stdin().lock()));
        }
        let file = std::fs::File::open(&self.arg).map_err(|e| self.read_error(&e))?;
        Ok(Box::new(std::io::BufReader::new(file)))
    }

    fn read_error(&self, e: &std::io::Error) -> CliError {
        let what = match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        };
        CliError::usage(format!("{}: cannot read: {what}", self.name()))
            .with_hint("check the path, or pass `-` to read from stdin")
    }

    /// Reads the whole source as UTF-8 text, at most [`MAX_INPUT_BYTES`]. Missing files,
    /// unreadable files, a larger input and invalid UTF-8 are usage errors (exit 2) naming
    /// the source.
    pub fn read_text(&self) -> Result<String, CliError> {
        let mut bytes = Vec::new();
        self.open()?
            .take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.read_error(&e))?;
        if bytes.len() > MAX_INPUT_BYTES {
            return Err(too_large(self.name(), None));
        }
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

/// The most bytes an offline tool reads of one input (a file or stdin), and of one line of
/// `digest --lines`: 64 MiB, four times the largest message the library reads from a
/// transport ([`mcpl::transport::DEFAULT_MAX_MESSAGE_SIZE`]), so every manifest a server
/// can send fits. Past it the input is refused (exit 2) without being read further: a file
/// like `/dev/zero` or an endless pipe is not held in memory.
pub const MAX_INPUT_BYTES: usize = 64 * 1024 * 1024;

/// The refusal of an input (or of its line `line`) past [`MAX_INPUT_BYTES`].
pub fn too_large(name: &str, line: Option<usize>) -> CliError {
    let what = match line {
        Some(n) => format!("line {n} is longer than"),
        None => "larger than".to_owned(),
    };
    CliError::usage(format!(
        "{name}: {what} 64 MiB ({MAX_INPUT_BYTES} bytes), the most an offline tool reads"
    ))
    .with_hint("a manifest is at most 16 MiB on the wire; pass the manifest itself")
}

/// The most [`mcpl::jsonrpc::parsed_cost`] an offline tool parses of one input (or one line
/// of `digest --lines`): 16,777,216 units, four times the library's default bound for one
/// message ([`mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST`]) as [`MAX_INPUT_BYTES`] is four times
/// its message size, so every manifest a server can send fits. At worst that is about 1.1 GB
/// parsed (measured: 64 MiB of one-character strings, each its own allocation, under both
/// bounds; the units count a string's 32-byte slot, not its heap block). Past it the input
/// is refused (exit 2) before it is built: within the byte bound, a text
/// of small objects holds some 80 times its size parsed (64 MiB of `{"a":0}`: over 5 GB).
pub const MAX_INPUT_COST: usize = 4 * mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST;

/// Why `text` is not parsed for its cost ([`MAX_INPUT_COST`]), or `None` when it is within
/// the bound. One rule for every input an offline tool parses.
pub fn cost_defect(text: &str) -> Option<String> {
    if !mcpl::jsonrpc::may_exceed(text, MAX_INPUT_COST) {
        return None;
    }
    let cost = mcpl::jsonrpc::parsed_cost(text);
    (cost > MAX_INPUT_COST).then(|| {
        format!(
            "would hold more than {MAX_INPUT_COST} JSON values parsed (it costs {cost}: each \
             object counts {}), the most an offline tool builds",
            mcpl::jsonrpc::OBJECT_COST
        )
    })
}

/// Parses `text` as one JSON document; a parse failure (a repeated member name included,
/// [`from_str_unique`]) or a text past [`MAX_INPUT_COST`] is a usage error naming `name`.
pub fn parse_json(name: &str, text: &str) -> Result<Value, CliError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Some(defect) = cost_defect(text) {
        return Err(CliError::usage(format!("{name}: {defect}"))
            .with_hint("a manifest a host accepts is far smaller; pass the manifest itself"));
    }
    from_str_unique(text).map_err(|e| {
        if text.trim().is_empty() {
            CliError::usage(format!("{name}: empty input, expected a JSON document"))
        } else {
            CliError::usage(format!("{name}: not JSON: {e}"))
        }
        .with_hint("the input must be one JSON document")
    })
}

/// Parses one JSON document as `serde_json::from_str` does, refusing an object that repeats
/// a member name ("duplicate member name \"x\" … at line L column C", where the repeat is).
///
/// Reading: the §17.2 digest is JCS, which canonicalises I-JSON only (RFC 8785 §3.1), and
/// I-JSON forbids duplicate names (RFC 7493 §2.3). A parser that keeps the last (or first)
/// of them would digest, validate, diff or grant a manifest the document does not uniquely
/// say, silently; so every tool refuses the document instead (exit 2, like input that is not
/// JSON). The repeat is found by the library's scan
/// ([`mcpl::jsonrpc::repeated::first_repeated_at`]), the one the library's readers and the
/// checks run, so the tools and the library hold one rule. Depth stays bounded by
/// serde_json's recursion limit.
pub fn from_str_unique(text: &str) -> Result<Value, serde_json::Error> {
    let value: Value = serde_json::from_str(text)?;
    match mcpl::jsonrpc::repeated::first_repeated_at(text) {
        None => Ok(value),
        Some((repeated, line, column)) => {
            Err(<serde_json::Error as serde::de::Error>::custom(format!(
                "duplicate member name {:?} (I-JSON, RFC 7493 §2.3: a manifest names each \
                 member once, or it has no one §17.2 canonical form) at line {line} column \
                 {column}",
                repeated.name
            )))
        }
    }
}

/// What the input document is, as `--manifest` / `--initialize` say, or detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// Detected: an `initialize` result or params when it carries `protocolVersion`,
    /// `serverInfo` or `clientInfo` ([`mcpl::manifest::review::is_initialize`]), else the
    /// manifest itself. Nothing is guessed from other members.
    #[default]
    Detect,
    /// `--manifest`: the document is the manifest (the `experimental.mcpl` object), taken
    /// as it is.
    Manifest,
    /// `--initialize`: the document is an `initialize` result or params, whose
    /// `capabilities.experimental.mcpl` is the manifest; anything without a `capabilities`
    /// object does not fit (exit 2).
    Initialize,
}

/// The `--manifest` / `--initialize` flags shared by `digest`, `validate` and `grant`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ShapeArgs {
    /// The input is the manifest itself (the `experimental.mcpl` object), even when it has
    /// members named like an `initialize` result's.
    #[arg(long, conflicts_with = "initialize")]
    pub manifest: bool,
    /// The input is an `initialize` result or params (its `capabilities.experimental.mcpl`
    /// is the manifest), even without `protocolVersion`/`serverInfo`/`clientInfo`; exit 2
    /// when it has no `capabilities` object.
    #[arg(long)]
    pub initialize: bool,
}

impl ShapeArgs {
    /// The shape the flags name ([`Shape::Detect`] with neither).
    pub fn shape(self) -> Shape {
        if self.manifest {
            Shape::Manifest
        } else if self.initialize {
            Shape::Initialize
        } else {
            Shape::Detect
        }
    }
}

/// Why [`manifest_of`] could not find a manifest in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// The document is not a JSON object.
    NotObject(&'static str),
    /// The document is an `initialize` result/params but carries no `experimental.mcpl`.
    NoMcpl,
    /// The document is a JSON-RPC message whose `result`/`params` is missing or not an object.
    EmptyMessage,
    /// The document is not an `initialize` result or params: it was read as one (by
    /// `--initialize`, or for its `protocolVersion`/`serverInfo`/`clientInfo`) but has no
    /// `capabilities` object. Holds what was found instead.
    NotInitialize(String),
}

impl ShapeError {
    /// A stable snake_case code, printed by `digest --lines`.
    pub fn code(&self) -> &'static str {
        match self {
            ShapeError::NotObject(_) => "manifest_not_object",
            ShapeError::NoMcpl | ShapeError::EmptyMessage => "no_manifest",
            ShapeError::NotInitialize(_) => "not_initialize",
        }
    }

    /// Whether the document is of the wrong shape for what was asked even as a line of
    /// `digest --lines` (exit 2 there, not a refusal): an `initialize` without `capabilities`.
    pub fn is_wrong_shape(&self) -> bool {
        matches!(self, ShapeError::NotInitialize(_))
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
            ShapeError::EmptyMessage => {
                "the JSON-RPC message has no object `result` or `params` to read".to_owned()
            }
            ShapeError::NotInitialize(found) => format!(
                "expected an initialize result or params (an object with a `capabilities` \
                 object), found {found}"
            ),
        }
    }
}

/// Unwraps a JSON-RPC 2.0 message (an object whose `jsonrpc` is `"2.0"`, JSON-RPC 2.0 §4/§5)
/// to its `result`/`params`, e.g. a captured `initialize` or `mcpl/manifest` response; any
/// other value is returned as is.
pub fn unwrap_envelope(doc: &Value) -> Result<&Value, ShapeError> {
    let Some(obj) = doc.as_object() else {
        return Ok(doc);
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Ok(doc);
    }
    match obj.get("result").or_else(|| obj.get("params")) {
        Some(inner @ Value::Object(_)) => Ok(inner),
        _ => Err(ShapeError::EmptyMessage),
    }
}

/// What a document holds once its shape is known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Document<'a> {
    /// The manifest itself.
    Manifest(&'a Value),
    /// An `initialize` result or params: its `capabilities` object (the outer MCP
    /// capabilities, where `tools` is advertised, §5.1).
    Initialize {
        /// The `capabilities` object.
        capabilities: &'a Value,
    },
}

impl<'a> Document<'a> {
    /// The manifest (§17.1: the `experimental.mcpl` object) the document holds.
    pub fn manifest(self) -> Result<&'a Value, ShapeError> {
        match self {
            Document::Manifest(m) => Ok(m),
            Document::Initialize { capabilities } => capabilities
                .get("experimental")
                .and_then(|e| e.get("mcpl"))
                .ok_or(ShapeError::NoMcpl),
        }
    }
}

/// Reads `doc` as `shape` says. A JSON-RPC message is unwrapped to its `result`/`params`
/// first; then [`Shape::Detect`] takes an `initialize` only when
/// [`mcpl::manifest::review::is_initialize`] recognises one, and the manifest otherwise.
pub fn document(doc: &Value, shape: Shape) -> Result<Document<'_>, ShapeError> {
    let doc = unwrap_envelope(doc)?;
    let Some(obj) = doc.as_object() else {
        let found = mcpl::jsonrpc::json_type_name(doc);
        return Err(match shape {
            Shape::Initialize => ShapeError::NotInitialize(format!("a JSON {found}")),
            _ => ShapeError::NotObject(found),
        });
    };
    let initialize = match shape {
        Shape::Manifest => false,
        Shape::Initialize => true,
        Shape::Detect => mcpl::manifest::review::is_initialize(doc),
    };
    if !initialize {
        return Ok(Document::Manifest(doc));
    }
    match obj.get("capabilities") {
        Some(caps @ Value::Object(_)) => Ok(Document::Initialize { capabilities: caps }),
        Some(other) => Err(ShapeError::NotInitialize(format!(
            "`capabilities` of type {}",
            mcpl::jsonrpc::json_type_name(other)
        ))),
        None => Err(ShapeError::NotInitialize("no `capabilities` member".into())),
    }
}

/// The manifest (§17.1: the `experimental.mcpl` object) held by a document read as
/// `shape` ([`document`]), so every subcommand finds the same manifest in the same
/// document.
pub fn manifest_of(doc: &Value, shape: Shape) -> Result<&Value, ShapeError> {
    document(doc, shape)?.manifest()
}

/// A note for a document [`Shape::Detect`] read as the manifest although it looks like a
/// wrapper (no `version`, but a `capabilities` or `experimental` member), so the reading is
/// visible; `None` otherwise, and always with a flag.
pub fn detection_note(doc: &Value, shape: Shape) -> Option<String> {
    let Ok(Document::Manifest(m)) = document(doc, shape) else {
        return None;
    };
    let wrapper = ["capabilities", "experimental"]
        .into_iter()
        .find(|k| m.get(*k).is_some_and(Value::is_object));
    match (shape, wrapper) {
        (Shape::Detect, Some(member)) if m.get("version").is_none() => Some(format!(
            "note: read as the manifest itself (it has no protocolVersion, serverInfo or \
             clientInfo); its `{member}` member is not unwrapped. Pass --initialize if it is \
             an initialize result or params, or --manifest to say it is the manifest\n"
        )),
        _ => None,
    }
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
        assert_eq!(manifest_of(&result, Shape::Detect), Ok(&m));
        let envelope = json!({"jsonrpc":"2.0","id":1,"result":result});
        assert_eq!(manifest_of(&envelope, Shape::Detect), Ok(&m));
        assert_eq!(manifest_of(&m, Shape::Detect), Ok(&m));
        // `--initialize` needs only the `capabilities` object.
        let trimmed = json!({"capabilities":{"experimental":{"mcpl":m}}});
        assert_eq!(manifest_of(&trimmed, Shape::Initialize), Ok(&m));
        assert_eq!(manifest_of(&trimmed, Shape::Detect), Ok(&trimmed));
        // `--manifest` takes even an initialize-looking object as it is.
        assert_eq!(manifest_of(&result, Shape::Manifest), Ok(&result));
    }

    #[test]
    fn s17_1_initialize_without_mcpl_is_no_manifest() {
        let result = json!({"protocolVersion":"x","capabilities":{"tools":{}}});
        assert_eq!(manifest_of(&result, Shape::Detect), Err(ShapeError::NoMcpl));
        assert_eq!(
            manifest_of(&json!([1]), Shape::Detect),
            Err(ShapeError::NotObject("array"))
        );
        assert_eq!(
            manifest_of(&json!({"jsonrpc":"2.0","id":1,"error":{}}), Shape::Detect),
            Err(ShapeError::EmptyMessage)
        );
        let e = manifest_of(&json!({"version":"0.5"}), Shape::Initialize).unwrap_err();
        assert!(e.is_wrong_shape(), "{e:?}");
        let e = manifest_of(&json!({"serverInfo":{}}), Shape::Detect).unwrap_err();
        assert_eq!(e.code(), "not_initialize");
        let e = manifest_of(&json!(3), Shape::Initialize).unwrap_err();
        assert_eq!(e.detail(), "expected an initialize result or params (an object with a `capabilities` object), found a JSON number");
    }

    /// The tools refuse what the library's scan finds (one rule, RFC 7493 §2.3), naming
    /// the member and where it repeats, escapes resolved, at any depth.
    #[test]
    fn a_repeated_member_is_refused_by_the_librarys_scan() {
        let nested = "{\"a\":1,\n \"b\":{\"k\":1,\"\\u006b\":2}}";
        let e = from_str_unique(nested).unwrap_err().to_string();
        assert!(e.starts_with("duplicate member name \"k\" (I-JSON"), "{e}");
        assert!(e.ends_with("at line 2 column 20"), "{e}");
        assert!(mcpl::jsonrpc::repeated::first_repeated(nested).is_some());
        assert_eq!(
            from_str_unique(r#"{"a":{"a":[{"a":1},{"a":2}]}}"#).unwrap(),
            json!({"a":{"a":[{"a":1},{"a":2}]}})
        );
        // Not JSON: serde_json's own error, as before.
        assert!(from_str_unique("{")
            .unwrap_err()
            .to_string()
            .contains("EOF"));
    }

    /// Only `jsonrpc: "2.0"` marks a JSON-RPC message; another value is a manifest member.
    #[test]
    fn only_a_jsonrpc_2_0_member_marks_a_message() {
        let m = json!({"version":"0.5","jsonrpc":"vendor","result":{}});
        assert_eq!(manifest_of(&m, Shape::Detect), Ok(&m));
    }

    #[test]
    fn a_wrapper_read_as_the_manifest_gets_a_note() {
        let caps = json!({"tools":{},"experimental":{"mcpl":{"version":"0.5"}}});
        assert!(detection_note(&caps, Shape::Detect).is_some());
        assert!(detection_note(&caps, Shape::Manifest).is_none());
        let vendor = json!({"version":"0.5","capabilities":{"x":1}});
        assert!(detection_note(&vendor, Shape::Detect).is_none());
    }
}
