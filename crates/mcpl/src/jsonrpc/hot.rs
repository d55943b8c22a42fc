//! The server's hot notification read straight into its type (issue #24): a host's
//! `inference/lifecycle` (§10.5), two per turn, went text → `Value` tree → `LifecycleParams`,
//! and the tree was most of its allocations. [`parse_lifecycle`] reads the params from the
//! text directly, and only where the result is exactly what the `Value` way gives
//! ([`super::Message::parse`] then [`super::parse_params`]); anything else declines, and the
//! caller takes the `Value` way as before. A `tools/call` request's params are read the
//! same way ([`parse_tools_call`]): the server's hottest request. A result response is
//! checked and its result's text handed to a typed caller ([`parse_answer`]).

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, Visitor};
use serde_json::Value;

use super::{read_id, ExactStr, Key, RequestId, JSONRPC_2_0};
use crate::protocol::handshake::{ToolContent, ToolsCall, ToolsCallParams, ToolsCallResult};
use crate::protocol::lifecycle::{InferenceLifecycle, LifecycleParams};
use crate::protocol::Method as _;

mod host_lines;

use host_lines::host_written_lifecycle;

/// How a host writing the members in `Message::to_json`'s order (as this crate's does)
/// starts the line of an `inference/lifecycle` notification whose params are an object.
const LIFECYCLE_LINE_START: &str =
    "{\"jsonrpc\":\"2.0\",\"method\":\"inference/lifecycle\",\"params\":{";

/// The params of `text` when it is one `inference/lifecycle` notification read the fast
/// way; `None` sends it the `Value` way. Declined: a text not starting as this crate's host
/// writes it (a cheap prefix test, so other messages pay next to nothing), a member named
/// twice (the `Value` way keeps the last), an `id`, `result` or `error`, any syntax error,
/// params that do not decode, and params holding any member the type does not name (at any
/// level: `extra` of the params, their `model` or `usage`). With that, every value in the
/// params is read by a declared field, which reads exactly what a `Value` would (no value
/// is skipped unchecked), and decodes to what it would decode to from that `Value`; other
/// envelope members are read as `Value`s, as [`super::Message::parse_object`] does. A line
/// exactly as this crate's host writes one is read without serde
/// ([`host_written_lifecycle`], to the same params).
pub(crate) fn parse_lifecycle(text: &str) -> Option<LifecycleParams> {
    let rest = text.strip_prefix(LIFECYCLE_LINE_START)?;
    if let Some(params) = host_written_lifecycle(rest) {
        return Some(params);
    }
    let Lifecycle(params) = serde_json::from_str(text).ok()?;
    let declared_only = params.extra.is_empty()
        && params.model.as_ref().map_or(true, |m| m.extra.is_empty())
        && params.usage.as_ref().map_or(true, |u| u.extra.is_empty());
    declared_only.then_some(params)
}

/// One `inference/lifecycle` notification's params, read from its whole text.
struct Lifecycle(LifecycleParams);

impl<'de> Deserialize<'de> for Lifecycle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lifecycle;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an inference/lifecycle notification")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lifecycle, A::Error> {
                let (mut jsonrpc, mut method, mut params) = (false, false, None);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Jsonrpc if !jsonrpc => {
                            map.next_value_seed(JSONRPC_2_0)?;
                            jsonrpc = true;
                        }
                        Key::Method if !method => {
                            map.next_value_seed(ExactStr(InferenceLifecycle::NAME))?;
                            method = true;
                        }
                        Key::Params if params.is_none() => params = Some(map.next_value()?),
                        // Read as a `Value`, not skipped, as `Message::parse_object` does.
                        Key::Other => drop(map.next_value::<Value>()?),
                        _ => return Err(A::Error::custom("not a lone lifecycle notification")),
                    }
                }
                match (jsonrpc, method, params) {
                    (true, true, Some(p)) => Ok(Lifecycle(p)),
                    _ => Err(A::Error::custom("not a lifecycle notification")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// What follows the integer id of a `tools/call` request line as this crate's host writes
/// it (`Message::to_json`'s sorted members: `id`, `jsonrpc`, `method`, `params`).
const TOOLS_CALL_AFTER_ID: &str = ",\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{";

/// The id and params of `text` when it is one `tools/call` request read the fast way (as
/// [`parse_lifecycle`]); `None` sends it the `Value` way. Declined: a line not written as
/// this crate's host writes one with an integer id (a cheap prefix test), a member named
/// twice, a `result` or `error`, an id the envelope rule refuses or `null`, any syntax
/// error, and params that are not an object holding `name` and only the members the type
/// names (so `extra` is empty, as the `Value` way would leave it). Also declined: any text
/// that may spell serde_json's raw-value marker as a member name
/// ([`may_spell_raw_value_marker`]), which `arguments` and `state` (read as `Value`s the
/// `Value` way, twice, in two member orders) would read differently.
pub(crate) fn parse_tools_call(text: &str) -> Option<(RequestId, ToolsCallParams)> {
    if may_spell_raw_value_marker(text) {
        return None;
    }
    let rest = text.strip_prefix("{\"id\":")?;
    let digits = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'-')
        .count();
    if !rest.get(digits..)?.starts_with(TOOLS_CALL_AFTER_ID) {
        return None;
    }
    let CallLine(id, params) = serde_json::from_str(text).ok()?;
    Some((id, params))
}

/// Whether `text` may hold serde_json's raw-value marker (`$serde_json::private::RawValue`,
/// live with the `raw_value` feature) as a member name: a `Value` built from an object whose
/// first member is so named is the marker's string parsed as JSON, which a `Map` read from
/// the text is not. The marker holds no character JSON escapes by name, so any spelling of
/// it has `RawValue` or a `\u` escape in the text.
fn may_spell_raw_value_marker(text: &str) -> bool {
    text.contains("RawValue") || text.contains("\\u")
}

/// One `tools/call` request's id and params, read from its whole text.
struct CallLine(RequestId, ToolsCallParams);

impl<'de> Deserialize<'de> for CallLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CallLine;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tools/call request")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CallLine, A::Error> {
                let (mut jsonrpc, mut method) = (false, false);
                let (mut id, mut params) = (None, None);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Jsonrpc if !jsonrpc => {
                            map.next_value_seed(JSONRPC_2_0)?;
                            jsonrpc = true;
                        }
                        Key::Id if id.is_none() => {
                            let read = read_id(map.next_value()?, true).ok().flatten();
                            id = Some(read.ok_or_else(|| A::Error::custom("not a request id"))?);
                        }
                        Key::Method if !method => {
                            map.next_value_seed(ExactStr(ToolsCall::NAME))?;
                            method = true;
                        }
                        Key::Params if params.is_none() => {
                            let CallParams(p) = map.next_value()?;
                            params = Some(p);
                        }
                        // Read as a `Value`, not skipped, as `Message::parse_object` does.
                        Key::Other => drop(map.next_value::<Value>()?),
                        _ => return Err(A::Error::custom("not a lone tools/call request")),
                    }
                }
                match (jsonrpc, method, id, params) {
                    (true, true, Some(id), Some(p)) => Ok(CallLine(id, p)),
                    _ => Err(A::Error::custom("not a tools/call request")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// A member name of `tools/call` params (after unescaping); `Other` is any name the type
/// does not name.
enum ParamKey {
    Name,
    Arguments,
    State,
    Checkpoint,
    Other,
}

impl<'de> Deserialize<'de> for ParamKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ParamKey, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ParamKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ParamKey, E> {
                Ok(match v {
                    "name" => ParamKey::Name,
                    "arguments" => ParamKey::Arguments,
                    "state" => ParamKey::State,
                    "checkpoint" => ParamKey::Checkpoint,
                    _ => ParamKey::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// `tools/call` params holding only the members [`ToolsCallParams`] names, each once.
struct CallParams(ToolsCallParams);

impl<'de> Deserialize<'de> for CallParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CallParams;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tools/call params")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CallParams, A::Error> {
                let mut name = None;
                let (mut arguments, mut state, mut checkpoint) = (None, None, None);
                while let Some(key) = map.next_key::<ParamKey>()? {
                    match key {
                        ParamKey::Name if name.is_none() => {
                            name = Some(map.next_value::<String>()?)
                        }
                        ParamKey::Arguments if arguments.is_none() => {
                            arguments = Some(map.next_value::<Option<_>>()?)
                        }
                        ParamKey::State if state.is_none() => {
                            state = Some(map.next_value::<Option<_>>()?)
                        }
                        ParamKey::Checkpoint if checkpoint.is_none() => {
                            checkpoint = Some(map.next_value::<Option<_>>()?)
                        }
                        _ => return Err(A::Error::custom("a member the type does not name")),
                    }
                }
                let name = name.ok_or_else(|| A::Error::custom("no name"))?;
                Ok(CallParams(ToolsCallParams {
                    name,
                    arguments: arguments.flatten(),
                    state: state.flatten(),
                    checkpoint: checkpoint.flatten(),
                    extra: Default::default(),
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// What follows the integer id of a result response line as this crate's peers write it
/// (`Message::to_json`'s sorted members: `id`, `jsonrpc`, `result`).
const ANSWER_AFTER_ID: &str = ",\"jsonrpc\":\"2.0\",\"result\":";

/// The id, and where the result's text is in `text`, when it is one result response read the fast way
/// (as [`parse_tools_call`]), for a typed caller to decode its result from the text rather
/// than from a `Value` tree ([`crate::peer::Peer::request`]); `None` sends it the `Value`
/// way. Declined: a line not written as this crate's peers write a result response with an
/// integer id (a cheap prefix test), a member named twice or any member but the three, an
/// id the envelope rule refuses, any text that may spell the raw-value marker
/// ([`may_spell_raw_value_marker`]), and a result the `Value` way would read differently
/// from the text or not at all: any syntax error, a number out of range, nesting past
/// serde_json's limit, an escaped member name, an object naming a member twice (a `Value`
/// keeps the last; a type decoding from the text would refuse it) or holding more than
/// [`ANSWER_KEYS_CHECKED`] members. What is read is the result's exact text, which every
/// type decodes as it would decode the `Value` read from it.
pub(crate) fn parse_answer(text: &str) -> Option<(RequestId, std::ops::Range<usize>)> {
    if may_spell_raw_value_marker(text) {
        return None;
    }
    let rest = text.strip_prefix("{\"id\":")?;
    let digits = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'-')
        .count();
    if !rest.get(digits..)?.starts_with(ANSWER_AFTER_ID) {
        return None;
    }
    let AnswerLine(id) = serde_json::from_str(text).ok()?;
    // The envelope holds exactly `id`, `jsonrpc` and `result`, the first two written as the
    // prefix says: the result runs from the prefix to the envelope's closing brace.
    let start = "{\"id\":".len() + digits + ANSWER_AFTER_ID.len();
    let end = text.trim_end().strip_suffix('}')?.len();
    text.get(start..end)?;
    Some((id, start..end))
}

/// Most members of one object a result read the fast way may hold ([`parse_answer`]); one
/// holding more goes the `Value` way.
const ANSWER_KEYS_CHECKED: usize = 32;

/// One result response's id, its result checked ([`Checked`]), read from its whole text.
struct AnswerLine(RequestId);

impl<'de> Deserialize<'de> for AnswerLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnswerLine;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a result response")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnswerLine, A::Error> {
                let (mut jsonrpc, mut result, mut id) = (false, false, None);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Jsonrpc if !jsonrpc => {
                            map.next_value_seed(JSONRPC_2_0)?;
                            jsonrpc = true;
                        }
                        Key::Id if id.is_none() => {
                            let read = read_id(map.next_value()?, false).ok().flatten();
                            id = Some(read.ok_or_else(|| A::Error::custom("not a request id"))?);
                        }
                        Key::Result if !result => {
                            map.next_value::<Checked>()?;
                            result = true;
                        }
                        _ => return Err(A::Error::custom("not a lone result response")),
                    }
                }
                match (jsonrpc, result, id) {
                    (true, true, Some(id)) => Ok(AnswerLine(id)),
                    _ => Err(A::Error::custom("not a result response")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// A `tools/call` result read from its text (the range [`parse_answer`] found) when it holds
/// nothing but `content` of text blocks (each exactly `type` and `text`) and `isError`: the
/// shape a tool's plain answer has. The derived decoding buffers each block twice (for
/// `ToolContent`'s `untagged` and the `flatten`ed `extra`), most of a typed round trip's
/// allocations on the host (issue #24); this reads what it would read from that shape, and
/// declines (`None`, the derived way decides) anything else: another member, a block of
/// another type or with another member, a member named twice, an escaped member name.
pub(crate) fn read_tools_call_result(text: &str) -> Option<ToolsCallResult> {
    let PlainCallResult(result) = serde_json::from_str(text).ok()?;
    Some(result)
}

/// A `tools/call` result of the plain shape [`read_tools_call_result`] reads.
struct PlainCallResult(ToolsCallResult);

impl<'de> Deserialize<'de> for PlainCallResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PlainCallResult;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a plain tools/call result")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut content, mut is_error) = (None, None);
                while let Some(name) = map.next_key::<&'de str>()? {
                    match name {
                        "content" if content.is_none() => {
                            let TextBlocks(blocks) = map.next_value()?;
                            content = Some(blocks);
                        }
                        "isError" if is_error.is_none() => {
                            is_error = Some(map.next_value::<Option<bool>>()?)
                        }
                        _ => return Err(A::Error::custom("not a plain tools/call result")),
                    }
                }
                Ok(PlainCallResult(ToolsCallResult {
                    content: content.unwrap_or_default(),
                    is_error: is_error.flatten(),
                    state: None,
                    extra: Default::default(),
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// A `content` array of text blocks, each exactly `{"type":"text","text":…}`.
struct TextBlocks(Vec<ToolContent>);

impl<'de> Deserialize<'de> for TextBlocks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextBlocks;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("text blocks")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<TextBlocks, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(16));
                while let Some(TextOnly(text)) = seq.next_element()? {
                    blocks.push(ToolContent::text(text));
                }
                Ok(TextBlocks(blocks))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One block that is exactly `{"type":"text","text":…}` (members in either order).
struct TextOnly(String);

impl<'de> Deserialize<'de> for TextOnly {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextOnly;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a text block")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextOnly, A::Error> {
                let (mut kind, mut text) = (false, None);
                while let Some(name) = map.next_key::<&'de str>()? {
                    match name {
                        "type" if !kind => {
                            map.next_value_seed(ExactStr("text"))?;
                            kind = true;
                        }
                        "text" if text.is_none() => text = Some(map.next_value::<String>()?),
                        _ => return Err(A::Error::custom("not a plain text block")),
                    }
                }
                match (kind, text) {
                    (true, Some(text)) => Ok(TextOnly(text)),
                    _ => Err(A::Error::custom("not a text block")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON value read through, checked to read from its text as it reads from the `Value`
/// parsed from it ([`parse_answer`]); nothing is kept.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Checked;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_unit<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                let mut names: [&'de str; ANSWER_KEYS_CHECKED] = [""; ANSWER_KEYS_CHECKED];
                let mut count = 0;
                // A name that is not borrowed from the text held an escape: declined.
                while let Some(name) = map.next_key::<&'de str>()? {
                    let seen = names.get(..count).unwrap_or_default();
                    if seen.contains(&name) {
                        return Err(A::Error::custom("a member named twice"));
                    }
                    let slot = names
                        .get_mut(count)
                        .ok_or_else(|| A::Error::custom("too many members to check"))?;
                    *slot = name;
                    count += 1;
                    map.next_value::<Checked>()?;
                }
                Ok(Checked)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{parse_params, Message};
    use crate::protocol::handshake::ToolsCallParams;

    /// §10.5: whatever the fast way reads, the `Value` way reads the same message with the
    /// same params; and it reads the host's own lines.
    #[test]
    fn s10_5_lifecycle_read_fast_is_what_the_value_way_reads() {
        let start = LIFECYCLE_LINE_START;
        let read = [
            r#""conversationId":"c","inferenceId":"a-1","phase":"started","turnIndex":0}}"#,
            r#""inferenceId":"a\u002d1","phase":"completed","usage":{"inputTokens":1.0,"outputTokens":2}}}"#,
            r#""inferenceId":"é\n","phase":"failed","turnIndex":7,"model":{"id":"m","capabilities":["x"]}},"x":1}"#,
            r#""inferenceId":"a","phase":"aborted","conversationId":null,"turnIndex":null}}"#,
        ];
        for rest in read {
            let text = format!("{start}{rest}");
            let fast = parse_lifecycle(&text).unwrap_or_else(|| panic!("declined {text}"));
            let Ok(Message::Notification(n)) = Message::parse(&text) else {
                panic!("the Value way refuses {text}");
            };
            assert_eq!(n.method, "inference/lifecycle");
            assert_eq!(parse_params::<LifecycleParams>(n.params).unwrap(), fast);
        }
        // Declined: the `Value` way decides (some of these it takes, with other params).
        let declined = [
            r#""inferenceId":"a","phase":"started","phase":"failed"}}"#,
            r#""inferenceId":"a","phase":"started"},"params":{}}"#,
            r#""inferenceId":"a","phase":"started"},"id":1}"#,
            r#""inferenceId":"a","phase":"started","text":"content"}}"#,
            r#""inferenceId":"a","phase":"started","$serde_json::private::RawValue":"{}"}}"#,
            r#""inferenceId":"a","phase":"completed","usage":{"inputTokens":1,"x":1e400}}}"#,
            r#""inferenceId":"a","phase":"started","turnIndex":1e400}}"#,
            r#""inferenceId":"a","phase":"paused"}}"#,
            r#""inferenceId":"a","phase":"started"},"x":1e400}"#,
            r#""inferenceId":"a","phase":"started"},"jsonrpc":"2.0"}"#,
            r#""inferenceId":"a","phase":"started"}"#,
        ];
        for rest in declined {
            let text = format!("{start}{rest}");
            assert_eq!(parse_lifecycle(&text), None, "{text}");
        }
        for other in [
            r#"{"method":"inference/lifecycle","jsonrpc":"2.0","params":{"inferenceId":"a","phase":"started"}}"#,
            r#"{"jsonrpc":"2.0","method":"inference/lifecycle","params":[]}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#,
        ] {
            assert_eq!(parse_lifecycle(other), None, "{other}");
        }
    }

    /// Whatever the fast way reads of a `tools/call` request, the `Value` way reads as the
    /// same request with the same params; the host's own lines are read fast.
    #[test]
    fn tools_call_read_fast_is_what_the_value_way_reads() {
        let start = |id: &str| format!("{{\"id\":{id}{TOOLS_CALL_AFTER_ID}");
        let read = [
            ("1", r#""arguments":{"text":"hello"},"name":"echo"}}"#),
            (
                "-7",
                r#""name":"echo","arguments":{"n":1.0,"d":{"x":[1,2e3]}}}}"#,
            ),
            (
                "18446744073709551615",
                r#""name":"é\n","arguments":null,"state":null}}"#,
            ),
            (
                "0",
                r#""name":"t","state":{"k":[true]},"checkpoint":"c-1"},"x":[1]}"#,
            ),
            ("2", r#""name":"t","checkpoint":null,"arguments":{}}}"#),
        ];
        for (id, rest) in read {
            let text = format!("{}{rest}", start(id));
            let (fast_id, fast) =
                parse_tools_call(&text).unwrap_or_else(|| panic!("declined {text}"));
            let Ok(Message::Request(r)) = Message::parse(&text) else {
                panic!("the Value way refuses {text}");
            };
            assert_eq!(
                (r.method.as_str(), &r.id),
                ("tools/call", &fast_id),
                "{text}"
            );
            assert_eq!(
                parse_params::<ToolsCallParams>(r.params).unwrap(),
                fast,
                "{text}"
            );
        }
        // Declined: the `Value` way decides (it takes some, with other params or an error).
        let declined = [
            ("1", r#""name":"a","name":"b"}}"#),
            ("1", r#""arguments":{}}}"#),
            ("1", r#""name":"a","_meta":{"progressToken":1}}}"#),
            ("1", r#""name":"a","arguments":[1]}}"#),
            ("1", r#""name":1}}"#),
            ("1", r#""name":"a","arguments":{"x":1e400}}}"#),
            ("1", r#""name":"a"},"params":{}}"#),
            ("1", r#""name":"a"},"result":1}"#),
            ("1", r#""name":"a"},"id":2}"#),
            ("1", r#""name":"a"},"jsonrpc":"2.0"}"#),
            ("1", r#""name":"a"},"x":1e400}"#),
            ("1", r#""name":"a"}"#),
            ("1.5", r#""name":"a"}}"#),
            // serde_json's raw-value marker, which the `Value` way reads as its string's JSON
            // (review of `70e1ed8`), and any `\u` escape, which could spell it.
            (
                "1",
                r#""name":"a","arguments":{"$serde_json::private::RawValue":"{\"t\":1}"}}}"#,
            ),
            (
                "1",
                r#""name":"a","state":{"b":1,"$serde_json::private::RawValue":"[2]"}}}"#,
            ),
            (
                "1",
                r#""name":"a","arguments":{"\u0024serde_json::private::Raw\u0056alue":"{"}}}"#,
            ),
            ("1", r#""name":"e\u0063ho"}}"#),
            ("18446744073709551616", r#""name":"a"}}"#),
        ];
        for (id, rest) in declined {
            let text = format!("{}{rest}", start(id));
            assert_eq!(parse_tools_call(&text), None, "{text}");
        }
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
            r#"{"id":"s","jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#,
            r#"{"id":null,"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/list","params":{"name":"a"}}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":[]}"#,
        ] {
            assert_eq!(parse_tools_call(other), None, "{other}");
        }
    }

    /// A result read fast is the result's exact text: it parses to the `Value` the `Value`
    /// way reads, and a typed result decodes from it as from that `Value`; anything that
    /// could read otherwise is declined.
    #[test]
    fn answer_read_fast_is_what_the_value_way_reads() {
        use crate::protocol::handshake::ToolsCallResult;
        let read = [
            ("1", r#"{"content":[{"text":"hello","type":"text"}]}"#),
            (
                "-7",
                r#"{"content":[{"type":"text","text":"é\n\"x\""}],"isError":false,"x":{"y":[1,2e3,null]}}"#,
            ),
            ("18446744073709551615", r#"{"content":[]} "#),
            ("0", "null"),
            ("3", r#"[1,{"a":{"a":{"a":1}}},"s"]"#),
            (
                "4",
                r#"{"content":[{"type":"image","data":"AA==","mimeType":"image/png","extra":1}],"structuredContent":{"n":1.5}}"#,
            ),
        ];
        for (id, result) in read {
            let text = format!("{{\"id\":{id}{ANSWER_AFTER_ID}{result}}}");
            let (fast_id, range) = parse_answer(&text).unwrap_or_else(|| panic!("declined {text}"));
            let raw = &text[range];
            assert_eq!(raw, result, "{text}");
            let Ok(Message::Response(r)) = Message::parse(&text) else {
                panic!("the Value way refuses {text}");
            };
            assert_eq!(r.id.as_ref(), Some(&fast_id), "{text}");
            let value = r.outcome.expect("a result");
            assert_eq!(serde_json::from_str::<Value>(raw).unwrap(), value, "{text}");
            let typed = serde_json::from_str::<ToolsCallResult>(raw).map_err(|e| e.to_string());
            let from_value =
                serde_json::from_value::<ToolsCallResult>(value).map_err(|e| e.to_string());
            assert_eq!(typed.is_ok(), from_value.is_ok(), "{text}");
            assert_eq!(typed.ok(), from_value.ok(), "{text}");
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let wide = format!(
            "{{{}}}",
            (0..=ANSWER_KEYS_CHECKED)
                .map(|i| format!("\"k{i}\":1"))
                .collect::<Vec<_>>()
                .join(",")
        );
        // Declined: the `Value` way decides (it takes some, others it refuses).
        let declined = [
            r#"{"content":[],"content":[{"type":"text","text":"x"}]}"#.to_owned(),
            r#"{"content":[{"type":"text","text":"a","text":"b"}]}"#.to_owned(),
            r#"{"c\u006fntent":[]}"#.to_owned(),
            r#"{"$serde_json::private::RawValue":"{}"}"#.to_owned(),
            r#"{"n":1e400}"#.to_owned(),
            r#"{"n":01}"#.to_owned(),
            r#"{"n":1"#.to_owned(),
            r#"{"n":1}}"#.to_owned(),
            r#"{},"result":{}"#.to_owned(),
            r#"{},"error":{"code":1,"message":"m"}"#.to_owned(),
            r#"{},"x":1"#.to_owned(),
            r#"{},"jsonrpc":"2.0""#.to_owned(),
            r#"{},"id":2"#.to_owned(),
            deep,
            wide,
        ];
        for result in &declined {
            let text = format!("{{\"id\":1{ANSWER_AFTER_ID}{result}}}");
            assert_eq!(parse_answer(&text), None, "{text}");
        }
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"id":"s","jsonrpc":"2.0","result":{}}"#,
            r#"{"id":null,"jsonrpc":"2.0","result":{}}"#,
            r#"{"id":1.5,"jsonrpc":"2.0","result":{}}"#,
            r#"{"id":18446744073709551616,"jsonrpc":"2.0","result":{}}"#,
            r#"{"id":1,"jsonrpc":"2.0","error":{"code":1,"message":"m"}}"#,
            r#"{"id":1,"jsonrpc":"1.0","result":{}}"#,
            r#"{"id":1,"jsonrpc":"2.0","result":{}"#,
        ] {
            assert_eq!(parse_answer(other), None, "{other}");
        }
    }

    /// §3.1 (`tools/call` is MCP's): a plain result read without the derive reads what the
    /// derive reads, and every other shape is left to the derive.
    #[test]
    fn a_plain_tools_call_result_reads_as_the_derive_reads_it() {
        let read = [
            r#"{"content":[{"type":"text","text":"hello"}]}"#,
            r#"{"content":[{"text":"a\n\"b\"","type":"text"},{"type":"text","text":""}]}"#,
            r#"{"isError":true,"content":[{"type":"text","text":"failed"}]}"#,
            r#"{"content":[],"isError":null}"#,
            r#"{"content":[ { "type" : "text" , "text" : "é" } ] }"#,
            r#"{}"#,
        ];
        for text in read {
            let fast = read_tools_call_result(text).unwrap_or_else(|| panic!("declined {text}"));
            let derived: ToolsCallResult = serde_json::from_str(text).unwrap();
            assert_eq!(fast, derived, "{text}");
        }
        let declined = [
            r#"{"content":[{"type":"text","text":"a","annotations":{}}]}"#,
            r#"{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}"#,
            r#"{"content":[{"type":"resource_link","uri":"x:y","name":"n"}]}"#,
            r#"{"content":[{"type":"text"}]}"#,
            r#"{"content":[{"text":"a"}]}"#,
            r#"{"content":[{"type":"text","text":1}]}"#,
            r#"{"content":[{"type":"text","type":"text","text":"a"}]}"#,
            r#"{"content":[{"type":"text","text":"a"}],"structuredContent":{}}"#,
            r#"{"content":[{"type":"text","text":"a"}],"state":{"data":1}}"#,
            r#"{"content":null}"#,
            r#"{"content":[{"type":"text","text":"a"}],"isError":"no"}"#,
            r#"{"con\u0074ent":[]}"#,
            r#"{"content":[{"t\u0079pe":"text","text":"a"}]}"#,
            r#"[]"#,
        ];
        for text in declined {
            assert_eq!(read_tools_call_result(text), None, "{text}");
        }
    }

    /// One JSON string's text holding `chars`, each written raw, by its short escape or as
    /// `\u` (a surrogate pair past the BMP); `bad` adds a lone surrogate or a raw control
    /// character, which no reading takes.
    fn json_string(chars: &[(char, u8)], bad: u8) -> String {
        let mut s = String::from("\"");
        for &(c, how) in chars {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                _ => None,
            };
            match (how % 3, short) {
                (0, _) if !matches!(c, '"' | '\\') && !c.is_control() => s.push(c),
                (1, Some(e)) => s.push_str(e),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        s.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        match bad {
            1 => s.push_str("\\ud800"),
            2 => s.push('\u{1}'),
            _ => {}
        }
        s.push('"');
        s
    }

    /// A JSON object's text from members already written (`name` as spelled, `value`),
    /// spaced by `gap`.
    fn json_object(members: &[(String, String)], gap: &str) -> String {
        let body: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{k}{gap}:{gap}{v}"))
            .collect();
        format!("{{{gap}{}{gap}}}", body.join(&format!(",{gap}")))
    }

    /// Texts of `tools/call` results and near misses: the plain shape, its member names
    /// and `type` spelled with escapes, other members and block types, members named
    /// twice, `isError` of every JSON type, strings written every way JSON allows.
    fn call_result_texts() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let chars = prop::collection::vec(
            (
                prop::sample::select(vec![
                    'a', 'é', '😀', '"', '\\', '/', '\n', '\t', ' ', '\u{7f}',
                ]),
                any::<u8>(),
            ),
            0..5,
        );
        let string = (chars, prop::sample::select(vec![0u8, 0, 0, 0, 0, 1, 2]))
            .prop_map(|(c, bad)| json_string(&c, bad));
        let gap = prop::sample::select(vec!["", "", " ", "\n "]);
        let block_name = prop::sample::select(vec![
            r#""type""#,
            r#""type""#,
            r#""text""#,
            r#""text""#,
            r#""t\u0079pe""#,
            r#""te\u0078t""#,
            r#""annotations""#,
            r#""_meta""#,
            r#""data""#,
            r#""mimeType""#,
        ]);
        let type_value = prop::sample::select(vec![
            r#""text""#,
            r#""text""#,
            r#""text""#,
            r#""t\u0065xt""#,
            r#""te\/xt""#,
            r#""image""#,
            r#""Text""#,
            "0",
            "null",
            r#""text ""#,
        ]);
        let other_value = prop::sample::select(vec!["{}", "1", r#""image/png""#, "null", "[]"]);
        let member = (block_name, type_value, string.clone(), other_value).prop_map(
            |(name, t, s, other)| {
                let value = match name {
                    r#""type""# | r#""t\u0079pe""# => t.to_owned(),
                    r#""text""# | r#""te\u0078t""# => s,
                    _ => other.to_owned(),
                };
                (name.to_owned(), value)
            },
        );
        let plain_block = (string.clone(), any::<bool>()).prop_map(|(s, flip)| {
            let t = (r#""type""#.to_owned(), r#""text""#.to_owned());
            let x = (r#""text""#.to_owned(), s);
            if flip {
                vec![x, t]
            } else {
                vec![t, x]
            }
        });
        let members = prop_oneof![3 => plain_block, 2 => prop::collection::vec(member, 0..4)];
        let block = (members, gap.clone()).prop_map(|(m, g)| json_object(&m, g));
        let element = prop_oneof![
            6 => block,
            1 => prop::sample::select(vec!["[]", "\"text\"", "null", "1"]).prop_map(str::to_owned),
        ];
        let content = prop_oneof![
            6 => (prop::collection::vec(element, 0..4), gap.clone())
                .prop_map(|(e, g)| format!("[{g}{}{g}]", e.join(&format!(",{g}")))),
            1 => prop::sample::select(vec!["null", "{}", "5", "[[]]", "\"x\""]).prop_map(str::to_owned),
        ];
        let is_error = prop::sample::select(vec![
            "true",
            "false",
            "null",
            "0",
            "1",
            "1.0",
            r#""true""#,
            "[]",
            "{}",
        ]);
        let top_name = prop::sample::select(vec![
            r#""content""#,
            r#""content""#,
            r#""content""#,
            r#""isError""#,
            r#""isError""#,
            r#""con\u0074ent""#,
            r#""is\u0045rror""#,
            r#""is_error""#,
            r#""state""#,
            r#""structuredContent""#,
            r#""_meta""#,
        ]);
        let top_member = (top_name, content, is_error).prop_map(|(name, c, e)| {
            let value = match name {
                r#""content""# | r#""con\u0074ent""# => c,
                r#""isError""# | r#""is\u0045rror""# | r#""is_error""# => e.to_owned(),
                r#""state""# => r#"{"data":1}"#.to_owned(),
                _ => "{}".to_owned(),
            };
            (name.to_owned(), value)
        });
        prop_oneof![
            12 => (prop::collection::vec(top_member, 0..4), gap)
                .prop_map(|(m, g)| json_object(&m, g)),
            1 => prop::sample::select(vec!["[]", "null", "\"s\"", "{", "{}}"]).prop_map(str::to_owned),
        ]
    }

    /// §3.1 and issue #24: on generated result texts, whatever [`read_tools_call_result`]
    /// reads is what the derive and the `Value` way read; and a typed caller handed a
    /// result by [`parse_answer`] gets what the `Value` way gives, result or refusal, whichever
    /// way `Answer::decode` took. Plenty of the texts are read fast, so the comparison is
    /// not vacuous.
    #[test]
    fn generated_tools_call_results_read_fast_as_the_derive_and_the_value_way_read_them() {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::{Config, TestRunner};
        let mut runner = TestRunner::new(Config::with_cases(4096));
        let strategy = call_result_texts();
        let (mut fast, mut handed) = (0, 0);
        for _ in 0..4096 {
            let text = strategy.new_tree(&mut runner).unwrap().current();
            let value_way = serde_json::from_str::<Value>(&text)
                .and_then(serde_json::from_value::<ToolsCallResult>);
            if let Some(read) = read_tools_call_result(&text) {
                fast += 1;
                let derived = serde_json::from_str::<ToolsCallResult>(&text);
                assert_eq!(derived.ok().as_ref(), Some(&read), "derive on {text}");
                assert_eq!(value_way.as_ref().ok(), Some(&read), "Value way on {text}");
            }
            let line = format!("{{\"id\":1{ANSWER_AFTER_ID}{text}}}");
            let Some((_, range)) = parse_answer(&line) else {
                continue;
            };
            handed += 1;
            let result = &line[range];
            // As `Answer::decode` takes a `tools/call` result handed as text.
            let decoded = match read_tools_call_result(result) {
                Some(read) => Ok(read),
                None => serde_json::from_str::<ToolsCallResult>(result).or_else(|_| {
                    serde_json::from_str::<Value>(result).and_then(serde_json::from_value)
                }),
            };
            let Ok(Message::Response(r)) = Message::parse(&line) else {
                panic!("parse_answer took what the Value way refuses: {line}");
            };
            let value_way = r.outcome.map_err(|e| e.message.into_owned()).and_then(|v| {
                serde_json::from_value::<ToolsCallResult>(v).map_err(|e| e.to_string())
            });
            assert_eq!(decoded.is_ok(), value_way.is_ok(), "{line}");
            assert_eq!(decoded.ok(), value_way.ok(), "{line}");
        }
        assert!(fast > 400, "only {fast} of 4096 read fast");
        assert!(handed > 800, "only {handed} of 4096 handed as text");
    }
}
