//! Member names repeated within one JSON object of a message, as the checkers see them on the
//! wire (`transport.member-names-unique`, `host.member-names-unique`).
//!
//! RFC 8259 §4 says the names of an object SHOULD be unique; I-JSON (RFC 7493 §2.3), which
//! the §17.2 digest canonicalises, says they MUST be. A reader such as `serde_json::Value`
//! keeps the last of them and says nothing, so `{"id":7,"id":12345}` is read as id 12345
//! while a reader keeping the first reads 7. The library's peer reads frames that way, on
//! its hot path, and is not changed: only the checkers, which read raw frames themselves,
//! look again ([`first_repeated`]), once a frame has parsed.
//!
//! Bounded: the scan holds the names of the objects open along one path (at most the
//! parser's 128 levels, within a frame the checkers already bound), and what it reports
//! quotes at most [`NAME_CHARS`] characters of the name and [`PATH_CHARS`] of where it is.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Characters of a repeated name quoted (a longer one is cut, marked `…`).
pub const NAME_CHARS: usize = 64;
/// Characters of the path to the object that repeats it (a longer one is cut, marked `…`).
pub const PATH_CHARS: usize = 160;

/// The first member name a message repeats, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeated {
    /// The name, as parsed (escapes resolved), cut to [`NAME_CHARS`].
    pub name: String,
    /// Where the object repeating it is: empty for the top level, else a path such as
    /// `result.serverInfo` or `params.content[0]`, cut to [`PATH_CHARS`].
    pub path: String,
}

/// The first member name repeated in an object of `text` (one JSON text, already known to
/// parse), or `None` when every object names each member once or the text does not parse.
pub fn first_repeated(text: &str) -> Option<Repeated> {
    let mut de = serde_json::Deserializer::from_str(text);
    let found = Scan.deserialize(&mut de).ok()??;
    let mut path = String::new();
    for step in found.path.iter().rev() {
        match step {
            Step::Member(name) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    Some(Repeated {
        name: cut(&found.name, NAME_CHARS),
        path: cut(&path, PATH_CHARS),
    })
}

/// `s` cut to `limit` characters, the cut marked `…`.
fn cut(s: &str, limit: usize) -> String {
    match s.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", s.get(..end).unwrap_or_default()),
        None => s.to_owned(),
    }
}

/// One step of the path from the top level to an object, innermost first while unwinding.
enum Step {
    Member(String),
    Index(usize),
}

/// What the scan found: the name, and the path to its object (innermost step first).
struct Found {
    name: String,
    path: Vec<Step>,
}

/// Scans one value; yields the first repeat inside it, if any.
struct Scan;

impl<'de> DeserializeSeed<'de> for Scan {
    type Value = Option<Found>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Scan)
    }
}

impl<'de> Visitor<'de> for Scan {
    type Value = Option<Found>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut index = 0usize;
        while let Some(found) = seq.next_element_seed(Scan)? {
            if let Some(mut found) = found {
                found.path.push(Step::Index(index));
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(Some(found));
            }
            index += 1;
        }
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if names.contains(&name) {
                map.next_value::<IgnoredAny>()?;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Some(Found {
                    name,
                    path: Vec::new(),
                }));
            }
            if let Some(mut found) = map.next_value_seed(Scan)? {
                found.path.push(Step::Member(name));
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Some(found));
            }
            names.insert(name);
        }
        Ok(None)
    }
}

/// The message a frame is, as a report names it: `request "ping" id 12345`, `notification
/// "x"`, `response id 2`, `a batch`; the method and id as a `serde_json::Value` reader takes
/// them (the last of repeated ones). The method is cut to [`NAME_CHARS`] characters, the id
/// to [`NAME_CHARS`] characters of its JSON.
pub fn message_name(v: &Value) -> String {
    let Value::Object(o) = v else {
        return if v.is_array() {
            "a batch".to_owned()
        } else {
            "a message".to_owned()
        };
    };
    let id = o.get("id").map(|id| cut(&id.to_string(), NAME_CHARS));
    let method = o.get("method").map(|m| match m {
        Value::String(s) => format!("{:?}", cut(s, NAME_CHARS)),
        other => cut(&other.to_string(), NAME_CHARS),
    });
    match (method, id) {
        (Some(m), Some(id)) => format!("request {m} id {id}"),
        (Some(m), None) => format!("notification {m}"),
        (None, Some(id)) => format!("response id {id}"),
        (None, None) => "a message".to_owned(),
    }
}

/// How a report says it: `"id" repeated in the top-level object of request "ping" id 12345
/// (read as the last one)`.
pub fn describe(found: &Repeated, message: &Value) -> String {
    let at = if found.path.is_empty() {
        "the top-level object".to_owned()
    } else {
        found.path.clone()
    };
    format!(
        "{:?} repeated in {at} of {} (read as the last one)",
        found.name,
        message_name(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Option<(String, String)> {
        first_repeated(text).map(|r| (r.name, r.path))
    }

    #[test]
    fn repeats_are_found_at_any_depth_with_their_path() {
        assert_eq!(at(r#"{"id":7,"id":8}"#), Some(("id".into(), String::new())));
        assert_eq!(
            at(r#"{"a":1,"params":{"content":[{"x":1},{"type":"t","type":"u"}]}}"#),
            Some(("type".into(), "params.content[1]".into()))
        );
        assert_eq!(
            at(r#"[1,{"m":{"k":1,"k":2}}]"#),
            Some(("k".into(), "[1].m".into()))
        );
        // Escapes resolved: "\u0069d" is "id".
        assert_eq!(
            at(r#"{"id":1,"\u0069d":2}"#),
            Some(("id".into(), String::new()))
        );
    }

    #[test]
    fn unique_names_and_non_json_find_nothing() {
        assert_eq!(at(r#"{"a":{"a":{"a":[{"a":1},{"a":2}]}}}"#), None);
        assert_eq!(at(r#"{"a":1,"A":2}"#), None);
        assert_eq!(at("[1,2,3]"), None);
        assert_eq!(at("not json"), None);
    }

    #[test]
    fn what_is_quoted_is_cut() {
        let long = "n".repeat(1000);
        let text = format!(r#"{{"{long}":1,"{long}":2}}"#);
        let found = first_repeated(&text).unwrap();
        assert_eq!(found.name.chars().count(), NAME_CHARS + 1);
        assert!(found.name.ends_with('…'));
    }

    #[test]
    fn messages_are_named_as_read() {
        let v: Value =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":7,"id":12345,"method":"ping"}"#).unwrap();
        let found = first_repeated(r#"{"id":7,"id":12345}"#).unwrap();
        assert_eq!(
            describe(&found, &v),
            r#""id" repeated in the top-level object of request "ping" id 12345 (read as the last one)"#
        );
        assert_eq!(
            message_name(&serde_json::json!({"id": 2, "result": {}})),
            "response id 2"
        );
        assert_eq!(
            message_name(&serde_json::json!({"method": "x"})),
            "notification \"x\""
        );
        assert_eq!(message_name(&serde_json::json!([])), "a batch");
    }
}
