//! [`Encoded`]: a JSON value encoded straight from its type (issue #24: the `Value` trees
//! in between were a third of a round trip's allocations), with the guarantees the
//! `Value` path gave for free.

use std::cell::Cell;
use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};
use serde_json::Value;

use super::{ErrorObject, Message, Notification, RequestId, Response};

/// A JSON value already encoded as text (a typed handler's result, a typed message's
/// params), written into its message as it is. [`Encoded::encode`] makes the same text the
/// `Value` path would write, but for member order: always one complete value on one line,
/// no object with a member name twice. Two are equal when their texts are.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The value's text, or the response line framed around it ([`Encoded::response_for`]).
    text: String,
    /// Where the value is in `text`.
    value: std::ops::Range<usize>,
    /// The integer id of the response line `text` is, when it is one (only the runtime's
    /// senders frame a value ahead).
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    framed: Option<serde_json::Number>,
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// Deepest object nesting whose member names are checked as the value is written; past it
/// (or past [`KEYS_CHECKED`] members in one object) the value goes the `Value` way.
const DEPTH_CHECKED: usize = 8;
/// Most members of one object checked as the value is written.
const KEYS_CHECKED: usize = 16;

/// serde_json's compact formatter, noting what the direct text would get wrong where the
/// `Value` path does not: a raw fragment (a `RawValue`, written as it is: its newlines and
/// all, or no JSON at all when forged), and a member name written twice in one object (a
/// `#[serde(flatten)]` map naming a declared field: the `Value` path keeps one), a member
/// name that is no string in Rust (an integer key), an `f32` (the `Value` path writes it as
/// the `f64` it holds) and an integer past 64 bits (which the `Value` path refuses). Names
/// are compared by hash; a collision only sends the value the `Value` way.
struct Checked<'a> {
    /// The direct text is not to be used.
    fallback: &'a Cell<bool>,
    /// Object nesting now (0: outside any).
    depth: usize,
    /// Array and object nesting now: past [`super::MAX_MEMBER_NESTING`] the value is refused.
    nesting: usize,
    /// Member names written so far in each open object (by hash), and how many.
    keys: [[u64; KEYS_CHECKED]; DEPTH_CHECKED],
    counts: [usize; DEPTH_CHECKED],
    /// The hash of the member name being written, while one is.
    key: Option<u64>,
}

/// FNV-1a over `bytes`, from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl<'a> Checked<'a> {
    fn new(fallback: &'a Cell<bool>) -> Checked<'a> {
        Checked {
            fallback,
            depth: 0,
            nesting: 0,
            keys: [[0; KEYS_CHECKED]; DEPTH_CHECKED],
            counts: [0; DEPTH_CHECKED],
            key: None,
        }
    }

    /// A scalar is being written: if it is a member name, the value goes the `Value` way.
    fn no_key(&self) {
        if self.key.is_some() {
            self.fallback.set(true);
        }
    }

    /// One level deeper: an error past [`super::MAX_MEMBER_NESTING`] (no peer reads it).
    fn deeper(&mut self) -> io::Result<()> {
        self.nesting += 1;
        if self.nesting > super::MAX_MEMBER_NESTING {
            return Err(io::Error::other(format!(
                "nested deeper than {} levels, which the peer cannot read",
                super::MAX_MEMBER_NESTING
            )));
        }
        Ok(())
    }

    fn hash_key_part(&mut self, bytes: &[u8]) {
        if let Some(h) = self.key.as_mut() {
            *h = fnv(*h, bytes);
        }
    }
}

/// Formatter methods for scalars that also write member names that are no strings in Rust.
macro_rules! key_writes {
    ($($name:ident: $t:ty),* $(,)?) => {
        $(
            fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W, value: $t) -> io::Result<()> {
                self.no_key();
                CompactFormatter.$name(w, value)
            }
        )*
    };
}

impl Formatter for Checked<'_> {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.deeper()?;
        CompactFormatter.begin_array(w)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.nesting = self.nesting.saturating_sub(1);
        CompactFormatter.end_array(w)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.deeper()?;
        self.depth += 1;
        match self.counts.get_mut(self.depth - 1) {
            Some(count) => *count = 0,
            None => self.fallback.set(true),
        }
        CompactFormatter.begin_object(w)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.nesting = self.nesting.saturating_sub(1);
        self.depth = self.depth.saturating_sub(1);
        CompactFormatter.end_object(w)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.key = Some(0xcbf2_9ce4_8422_2325);
        CompactFormatter.begin_object_key(w, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if let (Some(h), Some(level)) = (self.key.take(), self.depth.checked_sub(1)) {
            match (self.keys.get_mut(level), self.counts.get_mut(level)) {
                (Some(keys), Some(count)) => {
                    let seen = keys.get(..*count).unwrap_or_default();
                    if seen.contains(&h) {
                        self.fallback.set(true);
                    } else if let Some(slot) = keys.get_mut(*count) {
                        *slot = h;
                        *count += 1;
                    } else {
                        self.fallback.set(true);
                    }
                }
                _ => self.fallback.set(true),
            }
        }
        CompactFormatter.end_object_key(w)
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.hash_key_part(fragment.as_bytes());
        CompactFormatter.write_string_fragment(w, fragment)
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        // The same name always escapes the same way: hashing the escape is enough.
        let mark: [u8; 2] = match escape {
            CharEscape::Quote => *b"\\\"",
            CharEscape::ReverseSolidus => *b"\\\\",
            CharEscape::Solidus => *b"\\/",
            CharEscape::Backspace => *b"\\b",
            CharEscape::FormFeed => *b"\\f",
            CharEscape::LineFeed => *b"\\n",
            CharEscape::CarriageReturn => *b"\\r",
            CharEscape::Tab => *b"\\t",
            CharEscape::AsciiControl(c) => [b'u', c],
        };
        self.hash_key_part(&mark);
        CompactFormatter.write_char_escape(w, escape)
    }

    // A member name that is no string in Rust (an integer, a bool, a float key) is written by
    // these between its quotes, which the name check does not read: such a name sends the
    // value the `Value` way (`1` and `"1"` are one name there).
    key_writes! {
        write_bool: bool,
        write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
        write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64,
        write_f64: f64,
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.no_key();
        // The `Value` path holds an f32 as an f64, and writes that.
        CompactFormatter.write_f64(w, f64::from(value))
    }

    fn write_i128<W: ?Sized + io::Write>(&mut self, w: &mut W, value: i128) -> io::Result<()> {
        self.no_key();
        // Past 64 bits the `Value` path refuses the number: it decides.
        if i64::try_from(value).is_err() && u64::try_from(value).is_err() {
            self.fallback.set(true);
        }
        CompactFormatter.write_i128(w, value)
    }

    fn write_u128<W: ?Sized + io::Write>(&mut self, w: &mut W, value: u128) -> io::Result<()> {
        self.no_key();
        if u64::try_from(value).is_err() {
            self.fallback.set(true);
        }
        CompactFormatter.write_u128(w, value)
    }

    fn write_raw_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.fallback.set(true);
        CompactFormatter.write_raw_fragment(w, fragment)
    }
}

impl Encoded {
    /// Encodes `value` (`Err` if it does not serialize, or nests arrays and objects past
    /// [`super::MAX_MEMBER_NESTING`] levels, which no peer could read inside its message).
    /// Written straight from its type;
    /// one that holds a `RawValue`, names a member twice in one object, or nests objects
    /// past what is checked goes through `serde_json::to_value` as before (which reads a raw
    /// fragment, refusing one that is no JSON, and keeps one member of each name).
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        let mut buf = Vec::with_capacity(128);
        encode_into(&mut buf, value)?;
        Self::from_written(buf)
    }

    /// [`Self::encode`], written into `buf` (a spare frame buffer, emptied first) framed as
    /// the result response line answering `id` when `id` is an integer, so that answering
    /// that id with it ([`Self::into_response`]) copies nothing (issue #24: the copy was one
    /// allocation per answered request). A string id gets the value alone.
    #[cfg(feature = "runtime")]
    pub(crate) fn response_for<T: Serialize + ?Sized>(
        mut buf: Vec<u8>,
        id: &RequestId,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        buf.clear();
        let RequestId::Number(n) = id else {
            encode_into(&mut buf, value)?;
            return Self::from_written(buf);
        };
        buf.reserve(128);
        buf.extend_from_slice(b"{\"id\":");
        serde_json::to_writer(&mut buf, n)?;
        buf.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
        let start = buf.len();
        encode_into(&mut buf, value)?;
        let end = buf.len();
        buf.push(b'}');
        let mut line = Self::from_written(buf)?;
        line.value = start..end;
        line.framed = Some(n.clone());
        Ok(line)
    }

    /// The result response line answering `id` with this value: the text itself when it was
    /// framed for that id ([`Self::response_for`]), else written into `buf()`.
    #[cfg(feature = "runtime")]
    pub(crate) fn into_response(self, buf: impl FnOnce() -> Vec<u8>, id: &RequestId) -> String {
        match (&self.framed, id) {
            (Some(framed), RequestId::Number(n)) if framed == n => self.text,
            _ => self.response_in(buf(), id),
        }
    }

    /// The request line of `method` numbered `id` with `params` encoded straight from their
    /// type into it ([`Self::encode`]'s text), written into `buf` (emptied first): params
    /// that encode as `null` go as no member. `Err` (nothing to send) when they do not
    /// encode or are no object or array ([`super::params_shape`]'s rule, JSON-RPC 2.0 §4.2).
    #[cfg(feature = "runtime")]
    pub(crate) fn typed_request_in<P: Serialize + ?Sized>(
        mut buf: Vec<u8>,
        id: &RequestId,
        method: &str,
        params: &P,
    ) -> Result<String, String> {
        buf.clear();
        buf.reserve(method.len() + 128);
        buf.extend_from_slice(b"{\"id\":");
        serde_json::to_writer(&mut buf, id).map_err(|e| e.to_string())?;
        buf.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"method\":");
        serde_json::to_writer(&mut buf, method).map_err(|e| e.to_string())?;
        let without_params = buf.len();
        buf.extend_from_slice(b",\"params\":");
        let start = buf.len();
        // Writing into a `Vec` fails only where the encoder refuses a depth: the refusal is
        // the one `params_shape` gives the `Value` way, word for word.
        encode_into(&mut buf, params).map_err(|e| match e.is_io() {
            true => super::ParamsDefect::TooDeep.to_string(),
            false => e.to_string(),
        })?;
        let kind = match buf.get(start) {
            Some(b'{' | b'[') => None,
            Some(b'n') => {
                buf.truncate(without_params);
                None
            }
            Some(b'"') => Some("string"),
            Some(b't' | b'f') => Some("boolean"),
            _ => Some("number"),
        };
        if let Some(kind) = kind {
            return Err(super::ParamsDefect::Scalar(kind).to_string());
        }
        buf.push(b'}');
        String::from_utf8(buf).map_err(|e| e.to_string())
    }

    /// Text a caller wrote itself, member by member, as [`Self::encode`] would have: one
    /// complete value on one line, no member named twice (the caller's tests pin it).
    pub(crate) fn from_written(text: Vec<u8>) -> Result<Self, serde_json::Error> {
        // serde_json writes UTF-8 only.
        let text =
            String::from_utf8(text).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        Ok(Encoded {
            value: 0..text.len(),
            text,
            framed: None,
        })
    }

    /// [`Self::from_written`] of text written as a `String` (no UTF-8 check to make: issue
    /// #24, the host's lifecycle params, written with [`crate::manifest::jcs::write_string`]).
    pub(crate) fn from_written_text(text: String) -> Self {
        Encoded {
            value: 0..text.len(),
            text,
            framed: None,
        }
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.text.get(self.value.clone()).unwrap_or_default()
    }

    /// The value as a `Value` (for a rule that must read it).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.get())
    }

    /// The notification `method` with these params, as one line of JSON text (members in
    /// [`Message::to_json`]'s order).
    pub fn notification(&self, method: &str) -> String {
        self.notification_in(Vec::new(), method)
    }

    /// [`Self::notification`], written into `buf` (a spare frame buffer; emptied first).
    pub(crate) fn notification_in(&self, buf: Vec<u8>, method: &str) -> String {
        notification_line(buf, method, self).unwrap_or_else(|| {
            Message::Notification(Notification {
                method: method.to_owned(),
                params: self.to_value().ok(),
            })
            .to_json()
        })
    }

    /// The answer to request `id` with this result, as one line of JSON text (members in
    /// [`Message::to_json`]'s order).
    pub fn response(&self, id: &RequestId) -> String {
        self.response_in(Vec::new(), id)
    }

    /// [`Self::response`], written into `buf` (a spare frame buffer; emptied first).
    pub(crate) fn response_in(&self, buf: Vec<u8>, id: &RequestId) -> String {
        response_line(buf, id, self).unwrap_or_else(|| {
            Message::Response(Response {
                id: Some(id.clone()),
                outcome: self
                    .to_value()
                    .map_err(|e| ErrorObject::internal(e.to_string())),
            })
            .to_json()
        })
    }
}

/// Appends `value` encoded straight from its type ([`Encoded::encode`]) to `buf`; what the
/// direct text would get wrong ([`Checked`]) is written the `Value` way instead.
fn encode_into<T: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    value: &T,
) -> Result<(), serde_json::Error> {
    let start = buf.len();
    let fallback = Cell::new(false);
    let direct = value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut *buf,
        Checked::new(&fallback),
    ));
    if let Err(e) = direct {
        buf.truncate(start);
        return Err(e);
    }
    if fallback.get() {
        buf.truncate(start);
        let v = serde_json::to_value(value)?;
        serde_json::to_writer(&mut *buf, &v)?;
    }
    Ok(())
}

/// The notification line of `method` with `params`, written into `buf` (emptied first);
/// `None` only if the method name does not encode (a `&str` always does). The line is
/// written as a `String` from the start (issue #24: no UTF-8 check of the whole line per
/// notification), the method escaped by [`crate::manifest::jcs::write_string`], which
/// escapes exactly as serde_json does (pinned by its tests).
fn notification_line(mut buf: Vec<u8>, method: &str, params: &Encoded) -> Option<String> {
    const HEAD: &str = "{\"jsonrpc\":\"2.0\",\"method\":";
    const MIDDLE: &str = ",\"params\":";
    buf.clear();
    // Empty, so there is nothing to check.
    let mut line = String::from_utf8(buf).ok()?;
    let value = params.get();
    line.reserve(HEAD.len() + method.len() + MIDDLE.len() + value.len() + 8);
    line.push_str(HEAD);
    crate::manifest::jcs::write_string(&mut line, method);
    line.push_str(MIDDLE);
    line.push_str(value);
    line.push('}');
    Some(line)
}

/// The result response line answering `id` with `result`, written into `buf` (emptied
/// first); `None` only if the id does not encode.
fn response_line(buf: Vec<u8>, id: &RequestId, result: &Encoded) -> Option<String> {
    line(
        buf,
        b"{\"id\":",
        id,
        b",\"jsonrpc\":\"2.0\",\"result\":",
        result,
    )
}

/// `head`, `member` as JSON, `middle`, `value` as it is, and the closing brace: the members
/// in [`Message::to_json`]'s (sorted) order.
fn line<T: Serialize + ?Sized>(
    mut buf: Vec<u8>,
    head: &[u8],
    member: &T,
    middle: &[u8],
    value: &Encoded,
) -> Option<String> {
    buf.clear();
    buf.reserve(head.len() + middle.len() + value.get().len() + 32);
    buf.extend_from_slice(head);
    serde_json::to_writer(&mut buf, member).ok()?;
    buf.extend_from_slice(middle);
    buf.extend_from_slice(value.get().as_bytes());
    buf.push(b'}');
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the direct text would get wrong goes the `Value` way, and comes out as the
    /// `Value` path wrote it: a pretty-printed `RawValue` on one line, a forged raw
    /// fragment refused, a member named twice (a flattened map naming a declared field)
    /// once, with the map's value.
    #[test]
    fn encoded_text_is_what_the_value_path_reads() {
        use serde_json::value::RawValue;
        #[derive(Serialize)]
        struct Doc {
            doc: Box<RawValue>,
        }
        let doc = RawValue::from_string("[\n{\"a\": 1}\n]".into()).unwrap();
        let e = Encoded::encode(&Doc { doc }).unwrap();
        assert_eq!(e.get(), r#"{"doc":[{"a":1}]}"#);

        struct Forged;
        impl Serialize for Forged {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                // What `RawValue` itself emits, with a fragment that is no value.
                let mut st = s.serialize_struct("$serde_json::private::RawValue", 1)?;
                st.serialize_field("$serde_json::private::RawValue", "1,\"id\":99")?;
                st.end()
            }
        }
        assert!(Encoded::encode(&Forged).is_err());

        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct WithExtra {
            is_error: bool,
            #[serde(flatten)]
            extra: serde_json::Map<String, Value>,
        }
        let mut extra = serde_json::Map::new();
        extra.insert("isError".into(), json!(true));
        let r = WithExtra {
            is_error: false,
            extra,
        };
        assert_eq!(Encoded::encode(&r).unwrap().get(), r#"{"isError":true}"#);
        // Nested, escaped names too; the same name in sibling objects is no duplicate.
        let v = json!({ "a": { "k\"\n": 1, "b": [{ "k": 1 }, { "k": 2 }] }, "k": 3 });
        assert_eq!(Encoded::encode(&v).unwrap().to_value().unwrap(), v);
        assert_eq!(Encoded::encode(&v).unwrap().get(), v.to_string());
    }

    /// A value nested as deep as a peer reads inside its message encodes; one level more is
    /// refused (`MAX_MEMBER_NESTING`), typed or a `Value`, arrays or objects: no peer could
    /// read the message it would go in (`Message::parse` refuses it).
    #[test]
    fn values_nested_past_what_a_peer_reads_are_refused() {
        use crate::jsonrpc::MAX_MEMBER_NESTING;
        let arrays = |n: usize| (1..n).fold(json!([]), |v, _| json!([v]));
        let objects = |n: usize| (1..n).fold(json!({}), |v, _| json!({ "k": v }));
        for make in [arrays, objects] {
            let deepest = Encoded::encode(&make(MAX_MEMBER_NESTING)).expect("as deep as read");
            let line = deepest.response(&RequestId::from(1u64));
            assert!(Message::parse(&line).is_ok(), "the answer is read back");
            let e = Encoded::encode(&make(MAX_MEMBER_NESTING + 1)).expect_err("too deep");
            assert!(e.to_string().contains("nested deeper than 126"), "{e}");
        }
        #[derive(Serialize)]
        struct Deep(Option<Box<Deep>>, [u8; 0]);
        let mut deep = Deep(None, []);
        for _ in 0..MAX_MEMBER_NESTING * 2 {
            deep = Deep(Some(Box::new(deep)), []);
        }
        assert!(Encoded::encode(&deep).is_err(), "a typed value too");
    }

    /// Objects nested past what is checked, or with more members than that, are encoded
    /// the `Value` way: the same value, no member lost or doubled, even a name doubled
    /// where it is not checked.
    #[test]
    fn values_past_the_checked_bounds_still_encode_whole() {
        #[derive(Serialize)]
        struct Deep {
            next: Option<Box<Deep>>,
            #[serde(flatten)]
            extra: serde_json::Map<String, Value>,
        }
        let mut extra = serde_json::Map::new();
        extra.insert("next".into(), json!(1));
        let mut deep = Deep { next: None, extra };
        for _ in 0..DEPTH_CHECKED + 2 {
            deep = Deep {
                next: Some(Box::new(deep)),
                extra: serde_json::Map::new(),
            };
        }
        let text = Encoded::encode(&deep).unwrap().get().to_owned();
        assert_eq!(
            text.matches("\"next\":").count(),
            DEPTH_CHECKED + 3,
            "one `next` per object: {text}"
        );
        assert!(
            text.ends_with(&format!("1{}", "}".repeat(DEPTH_CHECKED + 3))),
            "{text}"
        );

        let mut deep = json!({ "leaf": 1 });
        for _ in 0..DEPTH_CHECKED + 2 {
            deep = json!({ "next": deep });
        }
        assert_eq!(Encoded::encode(&deep).unwrap().to_value().unwrap(), deep);
        let wide: serde_json::Map<String, Value> = (0..KEYS_CHECKED * 2)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        let wide = Value::Object(wide);
        assert_eq!(Encoded::encode(&wide).unwrap().to_value().unwrap(), wide);
    }

    /// Member names that are no strings in Rust are names all the same: an integer or bool key
    /// naming a string key or a declared field is one member, as the `Value` path writes it
    /// (audit of `a8ac049`).
    #[test]
    fn a_key_that_is_no_string_is_checked_as_a_name() {
        use serde::ser::{SerializeMap, Serializer};
        use std::collections::BTreeMap;
        struct Mixed;
        impl Serialize for Mixed {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("1", &"string key")?;
                m.serialize_entry(&1u64, &"integer key")?;
                m.serialize_entry("true", &1)?;
                m.serialize_entry(&true, &2)?;
                m.end()
            }
        }
        let via_value = serde_json::to_string(&serde_json::to_value(&Mixed).unwrap()).unwrap();
        assert_eq!(Encoded::encode(&Mixed).unwrap().get(), via_value);
        assert_eq!(via_value, r#"{"1":"integer key","true":2}"#);

        #[derive(Serialize)]
        struct R {
            #[serde(rename = "1")]
            one: u8,
            #[serde(flatten)]
            extra: BTreeMap<u32, u8>,
        }
        let r = R {
            one: 0,
            extra: BTreeMap::from([(1, 2)]),
        };
        assert_eq!(Encoded::encode(&r).unwrap().get(), r#"{"1":2}"#);
    }

    /// Numbers come out as the `Value` path writes them: an `f32` as the `f64` it holds, an
    /// integer past 64 bits refused (audit of `a8ac049`).
    #[test]
    fn numbers_are_written_as_the_value_path_writes_them() {
        let x = 0.1f32;
        let via_value = serde_json::to_string(&serde_json::to_value(x).unwrap()).unwrap();
        assert_eq!(Encoded::encode(&x).unwrap().get(), via_value);
        let big = u128::from(u64::MAX) + 1;
        assert!(serde_json::to_value(big).is_err());
        assert!(Encoded::encode(&big).is_err());
        assert!(Encoded::encode(&-i128::from(u64::MAX)).is_err());
        assert_eq!(
            Encoded::encode(&u128::from(u64::MAX)).unwrap().get(),
            u64::MAX.to_string()
        );
        assert_eq!(Encoded::encode(&f64::NAN).unwrap().get(), "null");
    }

    /// A typed request line reads as the request the `Value` way writes for the same params
    /// (JSON-RPC 2.0 §4): `null` params as no member, a scalar or params nested past what a
    /// peer reads refused, and the `Value` way's reading where the direct text would differ.
    #[cfg(feature = "runtime")]
    #[test]
    fn a_typed_request_line_is_the_request_the_value_way_writes() {
        use std::collections::BTreeMap;
        #[derive(Serialize)]
        struct P {
            name: &'static str,
            #[serde(flatten)]
            extra: BTreeMap<String, Value>,
        }
        let id = RequestId::from(7u64);
        let value_way = |params: Option<Value>| {
            Message::Request(super::super::Request {
                id: id.clone(),
                method: "m/x".into(),
                params,
            })
            .to_json()
        };
        let read = |line: &str| serde_json::from_str::<Value>(line).unwrap();
        let plain = P {
            name: "a",
            extra: BTreeMap::from([("z".into(), json!([1, {"y": "\n"}]))]),
        };
        let line = Encoded::typed_request_in(Vec::new(), &id, "m/x", &plain).unwrap();
        assert_eq!(
            read(&line),
            read(&value_way(Some(serde_json::to_value(&plain).unwrap())))
        );
        assert!(!line.contains('\n'));
        // A flattened map naming a declared member: the `Value` way keeps one.
        let twice = P {
            name: "a",
            extra: BTreeMap::from([("name".into(), json!("b"))]),
        };
        let line = Encoded::typed_request_in(Vec::new(), &id, "m/x", &twice).unwrap();
        assert_eq!(line, value_way(Some(serde_json::to_value(&twice).unwrap())));
        // `null` params: no member, as the `Value` way sends them.
        let line = Encoded::typed_request_in(Vec::new(), &id, "m/x", &()).unwrap();
        assert_eq!(line, value_way(None));
        assert_eq!(line, r#"{"id":7,"jsonrpc":"2.0","method":"m/x"}"#);
        // Scalars and params too deep for any peer are refused.
        for (scalar, kind) in [
            (json!(1), "number"),
            (json!("s"), "string"),
            (json!(true), "boolean"),
        ] {
            let e = Encoded::typed_request_in(Vec::new(), &id, "m/x", &scalar).unwrap_err();
            assert_eq!(e, super::super::ParamsDefect::Scalar(kind).to_string());
        }
        let mut deep = json!(1);
        for _ in 0..=super::super::MAX_MEMBER_NESTING {
            deep = json!([deep]);
        }
        assert!(Encoded::typed_request_in(Vec::new(), &id, "m/x", &deep).is_err());
    }

    /// JSON-RPC 2.0 §4.1: a notification line written around encoded params is the line the
    /// `Value` path writes, word for word, whatever the method name holds (quotes,
    /// backslashes, controls, DEL, U+2028, non-ASCII) and whatever the spare buffer held.
    #[test]
    fn notification_lines_match_the_value_path() {
        let params = json!({"a": [1, "x\u{1}"], "b": null});
        let encoded = Encoded::encode(&params).unwrap();
        for method in [
            "inference/lifecycle",
            "",
            "q\"b\\c",
            "\u{0}\u{8}\t\n\u{b}\u{c}\r\u{1f}",
            "del\u{7f} ls\u{2028} é 🦀",
        ] {
            let expected = Message::Notification(Notification {
                method: method.into(),
                params: Some(params.clone()),
            })
            .to_json();
            assert_eq!(encoded.notification(method), expected, "{method:?}");
            let spare = b"{\"stale\":\"bytes\"}".to_vec();
            assert_eq!(encoded.notification_in(spare, method), expected);
        }
    }

    /// JSON-RPC 2.0 §5: a result framed ahead of time as the response line of its integer id
    /// is that id's response line, word for word as one framed when answered; answering
    /// another id (or a string one) frames it anew, and its value reads as unframed.
    #[cfg(feature = "runtime")]
    #[test]
    fn a_result_framed_ahead_answers_its_own_id_only() {
        let value = json!({"content": [{"type": "text", "text": "a\nb"}], "n": 1.5});
        let plain = Encoded::encode(&value).unwrap();
        let seven = RequestId::Number(7.into());
        let framed = Encoded::response_for(b"old bytes".to_vec(), &seven, &value).unwrap();
        assert_eq!(framed, plain);
        assert_eq!(framed.get(), plain.get());
        assert_eq!(framed.to_value().unwrap(), value);
        let expected = plain.response_in(Vec::new(), &seven);
        assert_eq!(expected, response_line(Vec::new(), &seven, &plain).unwrap());
        let taken = std::cell::Cell::new(false);
        let buf = || {
            taken.set(true);
            Vec::new()
        };
        assert_eq!(framed.clone().into_response(buf, &seven), expected);
        assert!(!taken.get(), "the framed line is written as it is");
        for other in [RequestId::Number(8.into()), RequestId::String("7".into())] {
            let line = framed.clone().into_response(Vec::new, &other);
            assert_eq!(line, plain.response_in(Vec::new(), &other));
        }
        let by_name = RequestId::String("s".into());
        let unframed = Encoded::response_for(Vec::new(), &by_name, &value).unwrap();
        assert_eq!(unframed.get(), plain.get());
        assert_eq!(
            unframed.into_response(Vec::new, &by_name),
            plain.response_in(Vec::new(), &by_name)
        );
        // What does not encode is refused as `encode` refuses it.
        let mut deep = json!(1);
        for _ in 0..=super::super::MAX_MEMBER_NESTING {
            deep = json!([deep]);
        }
        assert!(Encoded::encode(&deep).is_err());
        assert!(Encoded::response_for(Vec::new(), &seven, &deep).is_err());
    }

    /// A result whose direct text would be wrong (a pretty-printed `RawValue`, a member
    /// named twice through a flattened map) goes the `Value` way inside its frame as it does
    /// alone: the framed line is the unframed one, head kept, one line, one member each.
    #[cfg(feature = "runtime")]
    #[test]
    fn a_result_framed_ahead_goes_the_value_way_where_encode_does() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Both {
            doc: Box<serde_json::value::RawValue>,
            is_error: bool,
            #[serde(flatten)]
            extra: serde_json::Map<String, Value>,
        }
        let doc = serde_json::value::RawValue::from_string("[\n{\"a\": 1}\n]".into()).unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert("isError".into(), json!(true));
        let both = Both {
            doc,
            is_error: false,
            extra,
        };
        let plain = Encoded::encode(&both).unwrap();
        assert_eq!(plain.get(), r#"{"doc":[{"a":1}],"isError":true}"#);
        for id in [RequestId::from(3u64), RequestId::String("3".into())] {
            let framed = Encoded::response_for(b"{\"id\":9".to_vec(), &id, &both).unwrap();
            assert_eq!(framed.get(), plain.get());
            let line = framed.into_response(Vec::new, &id);
            assert_eq!(line, plain.response(&id));
            assert!(!line.contains('\n'), "{line}");
        }
    }

    /// JSON-RPC 2.0 §5, on generated ids and values: a result framed ahead for any id
    /// (integers across both signs and the ends of 64 bits, strings with escapes) answers
    /// that id word for word as the unframed result does, whatever the spare buffer held;
    /// any other id is framed anew, and its line reads back as that id and that value.
    #[cfg(feature = "runtime")]
    #[test]
    fn generated_results_framed_ahead_answer_as_unframed_ones() {
        use proptest::prelude::*;
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, TestRunner};
        let id = prop_oneof![
            any::<u64>().prop_map(|n| RequestId::Number(n.into())),
            any::<i64>().prop_map(|n| RequestId::Number(n.into())),
            prop::sample::select(vec![0i64, -1, 1, i64::MIN, i64::MAX])
                .prop_map(|n| RequestId::Number(n.into())),
            prop::sample::select(vec![0u64, u64::MAX, 1 << 53, (1 << 53) + 1])
                .prop_map(|n| RequestId::Number(n.into())),
            "[a0-9\"\\\\é\n-]{0,6}".prop_map(RequestId::String),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a\"\\\\é😀\n\u{1}]{0,5}".prop_map(Value::from),
        ];
        let value = leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z\"]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        let junk = prop::collection::vec(any::<u8>(), 0..300);
        let case = (id.clone(), id, value, junk);
        let mut runner = TestRunner::new(Config::with_cases(2048));
        for _ in 0..2048 {
            let (id, other, value, junk) = case.new_tree(&mut runner).unwrap().current();
            let plain = Encoded::encode(&value).unwrap();
            let framed = Encoded::response_for(junk, &id, &value).unwrap();
            assert_eq!(framed.get(), plain.get(), "{id:?} {value}");
            assert_eq!(framed.to_value().unwrap(), value);
            for answered in [&id, &other] {
                let line = framed.clone().into_response(Vec::new, answered);
                assert_eq!(
                    line,
                    plain.response_in(Vec::new(), answered),
                    "{answered:?}"
                );
                assert!(!line.contains('\n'), "{line}");
                let Ok(Message::Response(r)) = Message::parse(&line) else {
                    panic!("not a response: {line}");
                };
                assert_eq!(r.id.as_ref(), Some(answered), "{line}");
                assert_eq!(r.outcome.ok().as_ref(), Some(&value), "{line}");
            }
        }
    }
}
