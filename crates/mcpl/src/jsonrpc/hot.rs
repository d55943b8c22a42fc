//! The server's hot notification read straight into its type (issue #24): a host's
//! `inference/lifecycle` (§10.5), two per turn, went text → `Value` tree → `LifecycleParams`,
//! and the tree was most of its allocations. [`parse_lifecycle`] reads the params from the
//! text directly, and only where the result is exactly what the `Value` way gives
//! ([`super::Message::parse`] then [`super::parse_params`]); anything else declines, and the
//! caller takes the `Value` way as before.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, Visitor};
use serde_json::Value;

use super::{Key, Version2};
use crate::protocol::lifecycle::LifecycleParams;

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
/// envelope members are read as `Value`s, as [`super::Message::parse_object`] does.
pub(crate) fn parse_lifecycle(text: &str) -> Option<LifecycleParams> {
    if !text.starts_with(LIFECYCLE_LINE_START) {
        return None;
    }
    let Lifecycle(params) = serde_json::from_str(text).ok()?;
    let declared_only = params.extra.is_empty()
        && params.model.as_ref().map_or(true, |m| m.extra.is_empty())
        && params.usage.as_ref().map_or(true, |u| u.extra.is_empty());
    declared_only.then_some(params)
}

/// One `inference/lifecycle` notification's params, read from its whole text.
struct Lifecycle(LifecycleParams);

/// The method member: exactly `inference/lifecycle` (after unescaping).
struct LifecycleMethod;

impl<'de> Deserialize<'de> for LifecycleMethod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = LifecycleMethod;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the string \"inference/lifecycle\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LifecycleMethod, E> {
                match v {
                    "inference/lifecycle" => Ok(LifecycleMethod),
                    _ => Err(E::custom("another method")),
                }
            }
        }
        d.deserialize_str(V)
    }
}

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
                            map.next_value::<Version2>()?;
                            jsonrpc = true;
                        }
                        Key::Method if !method => {
                            map.next_value::<LifecycleMethod>()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{parse_params, Message};

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
}
