//! A text holding several messages ([`several_values`]): MCP's stdio framing is one
//! message per line, so a line with more is the sender's framing defect. Reading (the
//! transports' specs are silent on what a receiver does with one), recovering every id
//! that can be: a text that is several complete JSON values, each an object or an array,
//! separated by JSON whitespace (RFC 8259 §2), is read as that many messages, each as if
//! it had come on its own line; a value followed by anything else (a scalar, text that is
//! no complete value, two values with nothing between them) keeps the parser's `-32700`.
//! The one rule of the peer and of `mcpl check`.

use std::ops::Range;

use serde::de::IgnoredAny;

pub use super::unparsed::trailing_detail;

/// The messages a text holds ([`several_values`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Several {
    /// Where each message is in the text, in order (at most the bound asked for).
    pub values: Vec<Range<usize>>,
    /// Where what follows the bound begins, when more messages were there: refused unread.
    pub refused_from: Option<usize>,
}

/// The messages `text` holds when it is more than one complete JSON value, each an object
/// or an array, separated by JSON whitespace (the module's reading); `None` for anything
/// else (one value, or a value followed by what is no such value). At most `max` values
/// are read (`max` at least 2, else 2): the rest of the text is not read, only its start
/// given ([`Several::refused_from`]). Linear in what is read; run only once the parser
/// refused a text for the characters after its first value, never on a valid one.
pub fn several_values(text: &str, max: usize) -> Option<Several> {
    let max = max.max(2);
    let bytes = text.as_bytes();
    let mut values = Vec::new();
    let mut at = 0;
    loop {
        let start = at
            + bytes
                .get(at..)?
                .iter()
                .position(|&b| !super::lead::is_json_whitespace(b))
                .unwrap_or(bytes.len() - at);
        if start == bytes.len() {
            break;
        }
        // A byte order mark is no JSON whitespace (RFC 8259 §2), and §8.1 lets a reader
        // ignore one only at the start of a text (the caller reads past a line's own):
        // one here is junk, so the text is no run of messages (`-32700`).
        if start == at && at > 0 {
            // Nothing between two values.
            return None;
        }
        if !matches!(bytes.get(start), Some(b'{' | b'[')) {
            return None;
        }
        if values.len() == max {
            return Some(Several {
                values,
                refused_from: Some(start),
            });
        }
        let rest = text.get(start..)?;
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<IgnoredAny>();
        match stream.next() {
            Some(Ok(_)) => {}
            _ => return None,
        }
        let end = start + stream.byte_offset();
        values.push(start..end);
        at = end;
    }
    (values.len() > 1).then_some(Several {
        values,
        refused_from: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several objects and arrays separated by JSON whitespace are read each; anything
    /// else is not; past the bound the rest is left unread.
    #[test]
    fn only_complete_messages_separated_by_whitespace_are_several() {
        let two = r#"{"a":1} [2]"#;
        assert_eq!(
            several_values(two, 10),
            Some(Several {
                values: vec![0..7, 8..11],
                refused_from: None
            })
        );
        assert_eq!(
            several_values("{} \t\r\n{} ", 10).map(|s| s.values.len()),
            Some(2)
        );
        for not in [
            "{}",
            "{}{}",
            "{} 5",
            "{} {",
            "{} x",
            r#"{} "s""#,
            "{} ]",
            "",
        ] {
            assert_eq!(several_values(not, 10), None, "{not}");
        }
        // RFC 8259 §2, §8.1: a byte order mark between two messages is no separator.
        assert_eq!(several_values("{} \u{feff} []", 10), None);
        assert_eq!(several_values("{} \u{feff}[]", 10), None);
        let over = several_values("{} {} {} {", 2).expect("several");
        assert_eq!(over.values, vec![0..2, 3..5]);
        assert_eq!(over.refused_from, Some(6));
    }
}
