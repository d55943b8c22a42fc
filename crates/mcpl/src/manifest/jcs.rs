//! RFC 8785 JSON Canonicalization Scheme (JCS) over [`serde_json::Value`], with no MCPL rules.
//!
//! This is the plain canonicaliser the §17.2 manifest digest is built on: member names sorted
//! by UTF-16 code units, strings escaped as ECMAScript `JSON.stringify` does, every number
//! written as ECMAScript `Number::toString` of its IEEE-754 double (via `ryu-js`).
//!
//! A `serde_json::Value` cannot hold NaN or an infinity, so canonicalisation is total here.
//! serde_json must be built with `float_roundtrip` and never with `arbitrary_precision`
//! (which would keep integers beyond 2^53 exact instead of rounding them to a double).

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;

/// Canonicalises `value` with RFC 8785 and returns the canonical JSON text.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_value(&mut out, value);
    out
}

/// Appends the RFC 8785 canonical form of `value` to `out`.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            let mut first = true;
            for_each_member_sorted(map, |name, member| {
                if !first {
                    out.push(',');
                }
                first = false;
                write_string(out, name);
                out.push(':');
                write_value(out, member);
            });
            out.push('}');
        }
    }
}

/// Appends a JSON number as RFC 8785 §3.2.2.3 requires: the ECMAScript rendering of the
/// nearest IEEE-754 double (`-0` → `0`, `1.0` → `1`, `1e21` → `1e+21`, integers beyond 2^53
/// rounded to their nearest double).
pub fn write_number(out: &mut String, n: &Number) {
    // Integers that are exactly representable as a double print as plain decimal digits,
    // which is what ECMAScript produces for |n| < 1e21; skip ryu for them.
    const EXACT: u64 = 1 << 53;
    if let Some(u) = n.as_u64() {
        if u <= EXACT {
            push_u64(out, u);
            return;
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= EXACT {
            if i < 0 {
                out.push('-');
            }
            push_u64(out, i.unsigned_abs());
            return;
        }
    }
    // `as_f64` is total for a Number without `arbitrary_precision`; integers round to nearest.
    let f = n.as_f64().unwrap_or(0.0);
    if f.is_finite() {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format_finite(f));
    } else {
        // Unreachable for a serde_json Number; RFC 8785 has no spelling for it. `null` is
        // what ECMAScript JSON.stringify writes, and keeps this function total.
        out.push_str("null");
    }
}

/// Appends `v` in plain decimal digits (as serde_json and ECMAScript write an integer).
pub(crate) fn push_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // All bytes are ASCII digits.
    for &b in &buf[i..] {
        out.push(b as char);
    }
}

/// Appends a JSON string literal escaped as ECMAScript `JSON.stringify` does (RFC 8785
/// §3.2.2.2): only `"`, `\` and C0 controls are escaped, with the `\b \t \n \f \r` short forms
/// and lowercase `\u00xx` otherwise; DEL, U+2028 and U+2029 stay literal; no normalisation.
pub fn write_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    if !needs_escape(s.as_bytes()) {
        // The common case: one scan, one copy.
        out.push_str(s);
        out.push('"');
        return;
    }
    write_escaped_body(out, s);
    out.push('"');
}

/// Whether any byte of `b` is a quote, a backslash or a C0 control: what a JSON string
/// must escape (RFC 8259 §7), so text without one is its own string literal's body.
#[inline]
pub(crate) fn needs_escape(b: &[u8]) -> bool {
    any_word(b, word_needs_escape)
}

/// Whether `hit` is true of any of the 8-byte little-endian words that cover `b`. Every byte
/// is looked at through whole words; a short or ragged tail is read with overlapping loads of
/// real bytes (a byte seen twice changes nothing), and strings under 4 bytes are padded with
/// `a`, so `hit` must be false of `a` bytes. Shared by the escape scan and the §17.2
/// identifier check.
#[inline]
pub(crate) fn any_word(b: &[u8], hit: impl Fn(u64) -> bool) -> bool {
    let n = b.len();
    if n >= 8 {
        let mut chunks = b.chunks_exact(8);
        for chunk in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            if hit(u64::from_le_bytes(w)) {
                return true;
            }
        }
        if chunks.remainder().is_empty() {
            return false;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[n - 8..]);
        hit(u64::from_le_bytes(w))
    } else if n >= 4 {
        let mut lo = [0u8; 4];
        lo.copy_from_slice(&b[..4]);
        let mut hi = [0u8; 4];
        hi.copy_from_slice(&b[n - 4..]);
        hit(u64::from(u32::from_le_bytes(lo)) | (u64::from(u32::from_le_bytes(hi)) << 32))
    } else if n > 0 {
        hit(u64::from_le_bytes([
            b[0],
            b[n / 2],
            b[n - 1],
            b'a',
            b'a',
            b'a',
            b'a',
            b'a',
        ]))
    } else {
        false
    }
}

/// The escaping loop of [`write_string`], for a string known to need at least one escape;
/// writes the body without the surrounding quotes.
fn write_escaped_body(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Eight bytes at a time while none of them needs escaping (the common case); a
        // shorter tail is padded with a byte that never needs escaping.
        // (Built in a register: a variable-length copy into a buffer stalls the load.)
        let rest = &bytes[i..];
        let (word, n) = match rest.first_chunk::<8>() {
            Some(chunk) => (u64::from_le_bytes(*chunk), 8),
            None => {
                let mut w = u64::from_le_bytes([b'a'; 8]);
                for (k, &b) in rest.iter().enumerate() {
                    let shift = 8 * k;
                    w = (w & !(0xff << shift)) | (u64::from(b) << shift);
                }
                (w, rest.len())
            }
        };
        if !word_needs_escape(word) {
            i += n;
            continue;
        }
        let b = bytes[i];
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            0x00..=0x1f => "",
            _ => {
                i += 1;
                continue;
            }
        };
        // `i` is an ASCII byte, so both slice bounds are char boundaries.
        out.push_str(&s[start..i]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(short);
        }
        i += 1;
        start = i;
    }
    out.push_str(&s[start..]);
}

/// Whether any byte of `w` is a quote, a backslash or a C0 control (exact, no false negatives; the
/// classic SWAR "has a byte less than n" and "has a zero byte" tests).
#[inline]
const fn word_needs_escape(w: u64) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(LO * 0x20) & !w & HI;
    let q = w ^ (LO * b'"' as u64);
    let quote = q.wrapping_sub(LO) & !q & HI;
    let bs = w ^ (LO * b'\\' as u64);
    let backslash = bs.wrapping_sub(LO) & !bs & HI;
    (control | quote | backslash) != 0
}

/// Compares two strings by their UTF-16 code-unit sequences, the member-name order of
/// RFC 8785 §3.2.3, without transcoding.
///
/// UTF-8 byte order agrees with UTF-16 order except when the first differing character is
/// in U+E000..=U+FFFF on one side and above U+FFFF (a surrogate pair) on the other.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    match ab.iter().zip(bb).position(|(x, y)| x != y) {
        None => ab.len().cmp(&bb.len()),
        Some(i) => {
            let (x, y) = (ab[i], bb[i]);
            let high_bmp = |c: u8| c == 0xee || c == 0xef;
            let astral = |c: u8| c >= 0xf0;
            if high_bmp(x) && astral(y) {
                Ordering::Greater
            } else if astral(x) && high_bmp(y) {
                Ordering::Less
            } else {
                x.cmp(&y)
            }
        }
    }
}

/// Calls `f` for every member of `map` in RFC 8785 member order (UTF-16 code units).
///
/// With serde_json's default `BTreeMap` the iteration order is UTF-8 byte order, which is
/// already correct unless names mix U+E000..=U+FFFF with astral characters (or
/// `preserve_order` was enabled somewhere); only then are the members re-sorted.
pub fn for_each_member_sorted<'a>(
    map: &'a Map<String, Value>,
    mut f: impl FnMut(&'a str, &'a Value),
) {
    let mut prev: Option<&str> = None;
    let mut sorted = true;
    for name in map.keys() {
        if let Some(p) = prev {
            if cmp_utf16(p, name) != Ordering::Less {
                sorted = false;
                break;
            }
        }
        prev = Some(name);
    }
    if sorted {
        for (name, member) in map {
            f(name, member);
        }
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|a, b| cmp_utf16(a.0, b.0));
        for (name, member) in members {
            f(name, member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc8785_numbers() {
        let v: Value = serde_json::from_str(
            "[0,-0,-0.0,1.0,100,1e20,1e21,1e-6,1e-7,5e-324,12345678901234567890,-9007199254740993,0.1,2.5]",
        )
        .unwrap();
        assert_eq!(
            to_string(&v),
            "[0,0,0,1,100,100000000000000000000,1e+21,0.000001,1e-7,5e-324,12345678901234567000,-9007199254740992,0.1,2.5]"
        );
    }

    #[test]
    fn serde_json_arbitrary_precision_is_not_enabled() {
        // With `arbitrary_precision` the parsed text would survive verbatim instead of
        // becoming a double, and the digest would stop being RFC 8785.
        let v: Value = serde_json::from_str("100000000000000000000000").unwrap();
        assert_ne!(v.to_string(), "100000000000000000000000");
        assert_eq!(to_string(&v), "1e+23");
    }

    #[test]
    fn rfc8785_string_escapes() {
        let s = "\"\\\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}\u{2028}\u{2029}é";
        assert_eq!(
            to_string(&json!(s)),
            "\"\\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}\u{2028}\u{2029}é\""
        );
    }

    #[test]
    fn rfc8785_string_escapes_at_every_offset_of_the_word_scan() {
        // The 8-byte scan must find an escapable byte wherever it sits; serde_json's string
        // escaping coincides with ECMAScript's for these characters.
        for special in [
            '"', '\\', '\u{0}', '\u{8}', '\t', '\n', '\u{1f}', '\u{7f}', 'é', '\u{2028}',
        ] {
            for len in 0..20 {
                for at in 0..=len {
                    let mut s: String = "abcdefghijklmnopqrstuvwxyz"[..len].to_owned();
                    s.insert(at, special);
                    s.push(special);
                    let mut out = String::new();
                    write_string(&mut out, &s);
                    assert_eq!(out, serde_json::to_string(&s).unwrap(), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn rfc8785_single_escape_found_by_overlapping_loads_at_every_length() {
        // One escapable byte alone, at every offset of strings of 1..=24 bytes: the whole-string
        // scan reads short and ragged tails with overlapping loads, and must see every byte.
        for special in ['"', '\\', '\u{0}', '\u{1f}', '\n'] {
            for len in 0..24 {
                for at in 0..=len {
                    let mut s: String = "abcdefghijklmnopqrstuvwxyz"[..len].to_owned();
                    s.insert(at, special);
                    let mut out = String::new();
                    write_string(&mut out, &s);
                    assert_eq!(out, serde_json::to_string(&s).unwrap(), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn rfc8785_member_order_is_utf16() {
        // U+FFFD sorts after U+10000 in UTF-16 (surrogate D800 < FFFD), before it in UTF-8.
        let v = json!({"\u{fffd}": 1, "\u{10000}": 2, "a": 3, "": 4});
        assert_eq!(
            to_string(&v),
            "{\"\":4,\"a\":3,\"\u{10000}\":2,\"\u{fffd}\":1}"
        );
        assert_eq!(cmp_utf16("\u{10000}", "\u{fffd}"), Ordering::Less);
        assert_eq!(cmp_utf16("ab", "a"), Ordering::Greater);
    }
}
