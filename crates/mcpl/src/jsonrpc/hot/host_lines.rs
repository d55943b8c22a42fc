//! The host's own `inference/lifecycle` lines read without serde (issue #24, §10.5): the
//! shape `session::host::turns` writes, read by prefix tests and one scan per string, to
//! exactly the params serde reads from it ([`super::parse_lifecycle`] takes anything else
//! the serde way).

use serde::de::value::BorrowedStrDeserializer;
use serde::Deserialize;

use crate::protocol::lifecycle::{LifecycleParams, Phase};
use crate::protocol::Extra;

/// The params of a lifecycle line exactly as this crate's host writes one without `usage`
/// (`session::host::turns`: `conversationId`, `inferenceId`, `phase`, `turnIndex`, in that
/// order, nothing else), `rest` being what follows [`super::LIFECYCLE_LINE_START`]; `None` for
/// anything else, which [`super::parse_lifecycle`] then reads with serde (issue #24: the host's
/// own lines, two per turn, are read by a few prefix tests and one scan per string). Taken
/// only where serde would read the same: each string holds no quote, backslash or control
/// character, so it is its own text; the phase is read by `Phase`'s own rule; the index is
/// plain decimal digits (no sign, fraction, exponent or leading zero) within `u64`.
pub(super) fn host_written_lifecycle(rest: &str) -> Option<LifecycleParams> {
    let rest = rest.strip_prefix("\"conversationId\":")?;
    let (conversation_id, rest) = literal_string(rest)?;
    let rest = rest.strip_prefix(",\"inferenceId\":")?;
    let (inference_id, rest) = literal_string(rest)?;
    let rest = rest.strip_prefix(",\"phase\":")?;
    let (phase, rest) = literal_string(rest)?;
    let phase = Phase::deserialize(BorrowedStrDeserializer::<serde::de::value::Error>::new(
        phase,
    ))
    .ok()?;
    let digits = rest.strip_prefix(",\"turnIndex\":")?.strip_suffix("}}")?;
    Some(LifecycleParams {
        inference_id: inference_id.to_owned(),
        conversation_id: Some(conversation_id.to_owned()),
        turn_index: Some(plain_u64(digits)?),
        phase,
        model: None,
        usage: None,
        extra: Extra::new(),
    })
}

/// The JSON string `text` starts with and what follows it, when the string is written
/// without any escape and holds nothing JSON requires escaped (so its text is its value).
fn literal_string(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix('"')?;
    let end = memchr::memchr(b'"', body.as_bytes())?;
    let (value, rest) = (body.get(..end)?, body.get(end + 1..)?);
    (!crate::manifest::jcs::needs_escape(value.as_bytes())).then_some((value, rest))
}

/// `digits` as a `u64` when it is a JSON integer written plainly: one to twenty ASCII
/// digits, no leading zero but for `0` itself, within `u64`.
fn plain_u64(digits: &str) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.bytes().try_fold(0u64, |n, b| {
        let d = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(d)
    })
}

#[cfg(test)]
mod tests {
    use super::super::{parse_lifecycle, Lifecycle, LIFECYCLE_LINE_START};
    use super::*;

    /// §10.5: the host's own lines are read by the literal scan, to exactly what serde
    /// reads from them; any line off that shape (escapes, controls, other numbers, other
    /// members or order, a trailing byte) is left to serde, which reads what it reads.
    #[test]
    fn s10_5_host_written_lifecycle_is_what_serde_reads() {
        let serde_read = |text: &str| {
            serde_json::from_str::<Lifecycle>(text)
                .ok()
                .map(|Lifecycle(p)| p)
        };
        let start = LIFECYCLE_LINE_START;
        let line = |c: &str, i: &str, p: &str, n: &str| {
            format!(
                r#"{start}"conversationId":"{c}","inferenceId":"{i}","phase":"{p}","turnIndex":{n}}}}}"#
            )
        };
        for phase in ["started", "completed", "aborted", "failed"] {
            for (c, i, n) in [
                ("c", "a-0000001", "0"),
                ("", "", "7"),
                ("conv é \u{7f} \u{2028} 🦀", "i'd/x", "18446744073709551615"),
                (" ", "a b", "1200"),
            ] {
                let text = line(c, i, phase, n);
                let fast = host_written_lifecycle(&text[start.len()..])
                    .unwrap_or_else(|| panic!("declined {text}"));
                assert_eq!(Some(&fast), serde_read(&text).as_ref(), "{text}");
                assert_eq!(parse_lifecycle(&text), Some(fast));
            }
        }
        for (c, i, p, n) in [
            ("c\\u0041", "a", "started", "1"),
            ("c", "a\\\"b", "started", "1"),
            ("c", "a\u{1}", "started", "1"),
            ("c", "a\u{1f}", "started", "1"),
            ("c", "a", "paused", "1"),
            ("c", "a", "Started", "1"),
            ("c", "a", "started", "01"),
            ("c", "a", "started", "-1"),
            ("c", "a", "started", "1.0"),
            ("c", "a", "started", "1e2"),
            ("c", "a", "started", "18446744073709551616"),
            ("c", "a", "started", "123456789012345678901"),
            ("c", "a", "started", ""),
            ("c", "a", "started", "null"),
            ("c", "a", "started", " 1"),
        ] {
            let text = line(c, i, p, n);
            assert_eq!(host_written_lifecycle(&text[start.len()..]), None, "{text}");
            assert_eq!(parse_lifecycle(&text), serde_read(&text), "{text}");
        }
        let host = line("c", "a", "started", "1");
        for other in [
            format!("{host} "),
            format!("{host}}}"),
            host.replace(r#""phase""#, r#""phase" "#),
            host.replace(r#""turnIndex":1"#, r#""turnIndex":1,"x":1"#),
            host.replace(
                r#""c","inferenceId""#,
                r#""c","conversationId":"d","inferenceId""#,
            ),
        ] {
            assert_eq!(
                host_written_lifecycle(&other[start.len()..]),
                None,
                "{other}"
            );
            assert_eq!(
                parse_lifecycle(&other),
                serde_read(&other).filter(|p| p.extra.is_empty()),
                "{other}"
            );
        }
    }
}
