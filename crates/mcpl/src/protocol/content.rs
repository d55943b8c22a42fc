//! Content blocks (§10.3, App. B.1) and the `string | ContentBlock[]` content member.
//!
//! Which of [`Content`], [`ContentBlock`] and
//! [`ToolContent`](super::handshake::ToolContent) to use where, and how they convert, is the
//! table in the crate docs ([crate#content-which-type-where](crate#content-which-type-where)).
//!
//! Reading of unknown block `type`s: **rejected** with a typed error. A block the receiver
//! cannot type cannot be rendered faithfully, and guessing (e.g. showing it as text) would
//! surface server bytes the host never understood. Unknown *members* of a known block are
//! kept in `extra`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::Extra;

/// One MCP content block (§10.3): text, image, audio or resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentBlock {
    /// `{"type":"text","text":…}`.
    Text(TextBlock),
    /// `{"type":"image", data+mimeType | uri}`.
    Image(MediaBlock),
    /// `{"type":"audio", data+mimeType | uri}`.
    Audio(MediaBlock),
    /// `{"type":"resource","uri":…}`.
    Resource(ResourceBlock),
}

impl ContentBlock {
    /// A text block with no extra members.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Extra::new(),
        })
    }
}

/// The body of a `text` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The body of an `image` or `audio` block: inline `data` (base64) with `mimeType`, or a
/// `uri` (App. B.1 `oneOf`). A block with neither form, or with both, is rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawMedia")]
pub struct MediaBlock {
    /// Base64 data, present in the inline form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// MIME type: required with `data`, optional with `uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Reference, present in the uri form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMedia {
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    uri: Option<String>,
    #[serde(flatten)]
    extra: Extra,
}

impl TryFrom<RawMedia> for MediaBlock {
    type Error = String;
    fn try_from(r: RawMedia) -> Result<Self, String> {
        let inline = r.data.is_some() && r.mime_type.is_some();
        let by_uri = r.uri.is_some();
        match (inline, by_uri) {
            (true, true) => Err("media block carries both data and uri (App. B.1 oneOf)".into()),
            (false, false) if r.data.is_some() => {
                Err("media block has data but no mimeType (App. B.1)".into())
            }
            (false, false) => Err("media block needs data+mimeType or uri (App. B.1)".into()),
            _ => Ok(MediaBlock {
                data: r.data,
                mime_type: r.mime_type,
                uri: r.uri,
                extra: r.extra,
            }),
        }
    }
}

/// The body of a `resource` block: a URI reference (§10.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceBlock {
    /// The referenced resource.
    pub uri: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// What is wrong with one content block against App. B.1, or `None` when it is one of the
/// four block shapes: `text` with a string `text`; `image` or `audio` with a string `data`
/// and `mimeType`, or a string `uri`, not both forms; `resource` with a string `uri`.
///
/// The same rule as the typed [`ContentBlock`], for hosts and checkers that read blocks as
/// JSON. Reading: a `type` outside the four (MCP's `resource_link`, or a `resource` that
/// nests its `uri` in a `resource` object) is a defect, because B.1 is a closed `oneOf`;
/// a receiver that renders it anyway would show bytes it never understood.
pub fn block_defect(block: &Value) -> Option<String> {
    let Some(obj) = block.as_object() else {
        return Some(format!(
            "is {}, not a content block object",
            json_kind(block)
        ));
    };
    // B.1 types every member it names: present means a string (`null` is absent,
    // `super::given`; a required member written `null` is still missing).
    let string = |k: &str| match super::given(obj, k) {
        None => Ok(false),
        Some(Value::String(_)) => Ok(true),
        Some(other) => Err(format!(
            "{k} is {}, not a string (App. B.1)",
            json_kind(other)
        )),
    };
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(other) => return Some(format!("type is {}, not a string", json_kind(other))),
        None => return Some("has no type".into()),
    };
    let check = || -> Result<(), String> {
        match kind {
            "text" if !string("text")? => Err("text block without a string text (App. B.1)".into()),
            "text" => Ok(()),
            "image" | "audio" => {
                let (data, mime, uri) = (string("data")?, string("mimeType")?, string("uri")?);
                match (data && mime, uri) {
                    (true, true) => Err(format!(
                        "{kind} block carries both data+mimeType and uri (App. B.1 oneOf)"
                    )),
                    (false, false) if data => {
                        Err(format!("{kind} block has data but no mimeType (App. B.1)"))
                    }
                    (false, false) => Err(format!(
                        "{kind} block needs data+mimeType or uri (App. B.1)"
                    )),
                    _ => Ok(()),
                }
            }
            "resource" if !string("uri")? => Err(
                "resource block without a string uri (App. B.1; MCP's nested form is not MCPL's)"
                    .into(),
            ),
            "resource" => Ok(()),
            other => Err(format!(
                "type {other:?} is not a content block type (§10.3: text, image, audio, resource)"
            )),
        }
    };
    check().err()
}

/// What is wrong with the `content` member named `at`, or `None`: the first of
/// [`content_defects`]. The host refuses on it.
pub fn content_defect(content: Option<&Value>, at: &str, string_ok: bool) -> Option<String> {
    content_defects(content, at, string_ok).into_iter().next()
}

/// Every defect of the `content` member named `at`, empty when it is well-formed: an array
/// of blocks each passing [`block_defect`] (each defect named with its block's index), or
/// with `string_ok` the plain-string form §10.3 allows for injections. `None` for `content`
/// means missing. The one content rule of the host ([`content_defect`]) and `mcpl check`,
/// which reports them, as many as [`super::listed_defects`] lists.
pub fn content_defects(content: Option<&Value>, at: &str, string_ok: bool) -> Vec<String> {
    let wanted = if string_ok {
        "a string or an array of content blocks"
    } else {
        "an array of content blocks"
    };
    match content {
        None => vec![format!("{at} is missing; it must be {wanted}")],
        Some(Value::String(_)) if string_ok => Vec::new(),
        Some(Value::Array(blocks)) => super::listed_defects(
            blocks
                .iter()
                .enumerate()
                .filter_map(|(i, b)| block_defect(b).map(|d| format!("{at}[{i}] {d}"))),
        ),
        Some(other) => vec![format!("{at} is {}, not {wanted}", json_kind(other))],
    }
}

/// A `content` member that the spec allows as a plain string (§10.3: equivalent to one text
/// block) or as an array of blocks. The received form is kept so it round-trips.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// The plain-string form.
    Text(String),
    /// The array form.
    Blocks(Vec<ContentBlock>),
}

impl Content {
    /// The content as blocks: the string form becomes one text block (§10.3).
    pub fn to_blocks(&self) -> Vec<ContentBlock> {
        match self {
            Content::Text(t) => vec![ContentBlock::text(t.clone())],
            Content::Blocks(b) => b.clone(),
        }
    }
}

impl From<&str> for Content {
    /// The plain-string form (§10.3: one text block).
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

impl From<String> for Content {
    /// The plain-string form (§10.3: one text block).
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

impl From<ContentBlock> for Content {
    fn from(block: ContentBlock) -> Self {
        Content::Blocks(vec![block])
    }
}

impl From<Vec<ContentBlock>> for Content {
    fn from(blocks: Vec<ContentBlock>) -> Self {
        Content::Blocks(blocks)
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(t) => t.serialize(s),
            Content::Blocks(b) => b.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content::Text(s)),
            v @ Value::Array(_) => serde_json::from_value(v)
                .map(Content::Blocks)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "content must be a string or an array of content blocks, got {}",
                json_kind(&other)
            ))),
        }
    }
}

/// A short name of a JSON value's type ("a string", "an object"…), for error messages that
/// say what was sent instead of what was wanted.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// App. B.1 / §10.3: every bad block is named; the host's refusal is the first of them.
    #[test]
    fn s10_3_content_defects_lists_every_block() {
        let c = json!([{"type": "text"}, {"type": "text", "text": "ok"}, 3]);
        let all = content_defects(Some(&c), "content", true);
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all[0].starts_with("content[0]") && all[1].starts_with("content[2]"));
        assert_eq!(
            content_defect(Some(&c), "content", true).as_ref(),
            all.first()
        );
        assert!(content_defects(Some(&json!("s")), "content", true).is_empty());
        assert_eq!(
            content_defects(Some(&json!("s")), "content", false).len(),
            1
        );
        assert_eq!(content_defects(None, "content", true).len(), 1);
    }

    #[test]
    fn s10_3_string_content_is_one_text_block() {
        let c: Content = serde_json::from_value(json!("Simple text injection")).unwrap();
        assert_eq!(
            c.to_blocks(),
            vec![ContentBlock::text("Simple text injection")]
        );
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!("Simple text injection")
        );
    }

    #[test]
    fn s10_3_media_forms() {
        let img: ContentBlock =
            serde_json::from_value(json!({"type":"image","data":"iVBO","mimeType":"image/png"}))
                .unwrap();
        assert!(matches!(img, ContentBlock::Image(ref m) if m.data.as_deref() == Some("iVBO")));
        let aud: ContentBlock =
            serde_json::from_value(json!({"type":"audio","uri":"file:///a.wav"})).unwrap();
        assert!(matches!(aud, ContentBlock::Audio(ref m) if m.uri.is_some()));
    }

    #[test]
    fn b1_media_without_a_source_or_with_both_is_rejected() {
        for bad in [
            json!({"type":"image"}),
            json!({"type":"image","data":"x"}),
            json!({"type":"audio","data":"x","mimeType":"audio/wav","uri":"u"}),
        ] {
            assert!(serde_json::from_value::<ContentBlock>(bad).is_err());
        }
    }

    #[test]
    fn b1_unknown_block_type_is_rejected() {
        let e = serde_json::from_value::<ContentBlock>(json!({"type":"video","uri":"u"}));
        assert!(e.is_err());
        let e = serde_json::from_value::<Content>(json!(42)).unwrap_err();
        assert!(e.to_string().contains("string or an array"));
    }

    #[test]
    fn b1_block_defect_agrees_with_the_typed_blocks() {
        let good = [
            json!({"type":"text","text":"hi","annotations":{}}),
            json!({"type":"image","data":"iVBO","mimeType":"image/png"}),
            json!({"type":"image","uri":"memory://i/1"}),
            json!({"type":"image","data":"iVBO","uri":"memory://i/1"}),
            json!({"type":"audio","uri":"file:///a.wav","mimeType":"audio/wav"}),
            json!({"type":"resource","uri":"memory://facts/12345"}),
        ];
        for b in good {
            assert_eq!(block_defect(&b), None, "{b}");
            assert!(serde_json::from_value::<ContentBlock>(b).is_ok());
        }
        let bad = [
            (json!("hi"), "not a content block object"),
            (json!({"text":"hi"}), "has no type"),
            (json!({"type":7}), "type is a number"),
            (json!({"type":"text"}), "without a string text"),
            (json!({"type":"text","text":1}), "text is a number"),
            (json!({"type":"image"}), "needs data+mimeType or uri"),
            (json!({"type":"image","data":"x"}), "data but no mimeType"),
            (
                json!({"type":"audio","data":"x","mimeType":"audio/wav","uri":"u"}),
                "both",
            ),
            (
                json!({"type":"image","uri":{"href":"u"}}),
                "uri is an object",
            ),
            (
                json!({"type":"resource","resource":{"uri":"u","text":"t"}}),
                "without a string uri",
            ),
            (
                json!({"type":"resource_link","uri":"u"}),
                "not a content block type",
            ),
            (
                json!({"type":"video","uri":"u"}),
                "not a content block type",
            ),
        ];
        for (b, why) in bad {
            let d = block_defect(&b).unwrap_or_default();
            assert!(d.contains(why), "{b}: {d:?}");
            assert!(serde_json::from_value::<ContentBlock>(b).is_err());
        }
    }

    #[test]
    fn s8_unknown_block_members_survive() {
        let v = json!({"type":"text","text":"hi","annotations":{"priority":1}});
        let b: ContentBlock = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&b).unwrap(), v);
    }
}
