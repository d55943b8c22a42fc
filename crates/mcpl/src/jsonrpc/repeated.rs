//! The first member name a JSON text repeats within one of its objects, at any depth: the one
//! scan the checkers (`transport.member-names-unique`, `host.member-names-unique`) and the
//! library (where a message decides authority, `jsonrpc::doubled`) share.
//!
//! RFC 8259 §4 says the names of an object SHOULD be unique; I-JSON (RFC 7493 §2.3), which
//! the §17.2 digest canonicalises, says they MUST be. A reader such as `serde_json::Value`
//! keeps the last of them and says nothing, so `{"id":7,"id":12345}` is read as id 12345
//! while a reader keeping the first reads 7: what a `Value` holds no longer shows the
//! repeat, so the scan reads the text. It is never run on the hot path (`tools/call`,
//! `push/event`, plain responses): only on texts whose meaning decides authority.
//!
//! Bounded: the scan holds the names of the objects open along one path (at most the
//! parser's 128 levels, within a frame its reader already bounds), and what it reports
//! quotes at most [`NAME_CHARS`] characters of the name and [`PATH_CHARS`] of where it is.

use std::collections::HashSet;
use std::fmt;

/// Which answers are read whole with this scan (`initialize`, `mcpl/manifest`): the library's
/// peer and `mcpl check` refuse one naming a member twice (§5.4).
pub use super::doubled::answer_read_whole;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

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
    Scan { halt: false }
        .deserialize(&mut de)
        .ok()?
        .map(Found::reported)
}

/// [`first_repeated`], with where the repeat is in `text`: the line and the column (both
/// counted from 1, as `serde_json` counts them) at the end of the repeated name, for a
/// reader that points a person at it (`mcpl`'s offline tools). The same scan, run again to
/// stop there, only once a repeat is found.
pub fn first_repeated_at(text: &str) -> Option<(Repeated, usize, usize)> {
    let found = first_repeated(text)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let stopped = Scan { halt: true }.deserialize(&mut de).err()?;
    Some((found, stopped.line(), stopped.column()))
}

/// [`first_repeated`] of each entry of the JSON array in `text`, by its index in the array
/// (every entry counts; paths start at the entry); empty for a text that is no array or does
/// not parse. One pass over the text, as bounded as [`first_repeated`]. The library's
/// reading of a batch whose entry decides authority, and `mcpl check`'s.
pub fn first_repeated_each(text: &str) -> Vec<(usize, Repeated)> {
    let mut de = serde_json::Deserializer::from_str(text);
    Each.deserialize(&mut de).unwrap_or_default()
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

impl Found {
    /// As reported: the path written outermost first, both cut.
    fn reported(self) -> Repeated {
        let mut path = String::new();
        for step in self.path.iter().rev() {
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
        Repeated {
            name: cut(&self.name, NAME_CHARS),
            path: cut(&path, PATH_CHARS),
        }
    }
}

/// [`Scan`] of each entry of an array.
struct Each;

impl<'de> DeserializeSeed<'de> for Each {
    type Value = Vec<(usize, Repeated)>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Each {
    type Value = Vec<(usize, Repeated)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = Vec::new();
        let mut index = 0usize;
        while let Some(entry) = seq.next_element_seed(Scan { halt: false })? {
            if let Some(entry) = entry {
                found.push((index, entry.reported()));
            }
            index += 1;
        }
        Ok(found)
    }
}

/// Scans one value; yields the first repeat inside it, if any. `halt`: stops with an error
/// where the repeated name is read instead, so the parser tells where that is.
#[derive(Clone, Copy)]
struct Scan {
    halt: bool,
}

impl<'de> DeserializeSeed<'de> for Scan {
    type Value = Option<Found>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
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
        while let Some(found) = seq.next_element_seed(self)? {
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
                if self.halt {
                    return Err(serde::de::Error::custom("a repeated member name"));
                }
                map.next_value::<IgnoredAny>()?;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Some(Found {
                    name,
                    path: Vec::new(),
                }));
            }
            if let Some(mut found) = map.next_value_seed(self)? {
                found.path.push(Step::Member(name));
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Some(found));
            }
            names.insert(name);
        }
        Ok(None)
    }
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

    #[cfg(feature = "runtime")]
    #[test]
    fn each_entry_of_an_array_is_scanned_alone() {
        let each = first_repeated_each(r#"[{"a":1},{"b":{"k":1,"k":2}},3,{"c":1,"c":2}]"#);
        let each: Vec<_> = each.into_iter().map(|(i, r)| (i, r.name, r.path)).collect();
        assert_eq!(
            each,
            [(1, "k".into(), "b".into()), (3, "c".into(), String::new())]
        );
        // The same name in two entries is no repeat.
        assert!(first_repeated_each(r#"[{"a":1},{"a":1}]"#).is_empty());
        assert!(first_repeated_each(r#"{"a":1,"a":2}"#).is_empty());
    }

    #[test]
    fn unique_names_and_non_json_find_nothing() {
        assert_eq!(at(r#"{"a":{"a":{"a":[{"a":1},{"a":2}]}}}"#), None);
        assert_eq!(at(r#"{"a":1,"A":2}"#), None);
        assert_eq!(at("[1,2,3]"), None);
        assert_eq!(at("not json"), None);
    }

    #[test]
    fn where_a_repeat_is_is_told_by_line_and_column() {
        let (found, line, column) =
            first_repeated_at("{\"a\":1,\n \"b\":{\"k\":1,\"k\":2}}").unwrap();
        assert_eq!((found.name.as_str(), found.path.as_str()), ("k", "b"));
        assert_eq!((line, column), (2, 15));
        assert_eq!(first_repeated_at(r#"{"a":1}"#), None);
    }

    #[test]
    fn what_is_quoted_is_cut() {
        let long = "n".repeat(1000);
        let text = format!(r#"{{"{long}":1,"{long}":2}}"#);
        let found = first_repeated(&text).unwrap();
        assert_eq!(found.name.chars().count(), NAME_CHARS + 1);
        assert!(found.name.ends_with('…'));
    }
}
