//! What may precede a message in a frame's text, read by one function ([`message_lead`]).

use super::head;

/// JSON whitespace (RFC 8259 §2): space, horizontal tab, line feed, carriage return.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// Whether byte `b` is JSON whitespace ([`JSON_WHITESPACE`]): the one reading of the byte
/// scanners (`envelope`, its batch reading).
pub(crate) const fn is_json_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The `-32700` detail of a text whose message is preceded by more than RFC 8259 lets
/// precede it ([`message_lead`]).
pub(crate) const LEAD_REFUSED: &str =
    "only JSON whitespace and one byte order mark may precede a message (RFC 8259 §2, §8.1)";

/// The one reading of what precedes a message: `text` from where its message starts, and
/// whether only what RFC 8259 allows came before it (JSON whitespace, §2: space, tab, line
/// feed, carriage return; and one UTF-8 byte order mark, which §8.1 lets a parser ignore).
/// The start is read past any whitespace `str::trim_start` takes, NUL bytes, and byte
/// order marks, so a message after other whitespace (a no-break space, U+2028), or after
/// more than one mark, is still read for the id it is answered under; but such a text is no JSON text, so the peer and
/// [`super::Message::parse`] refuse it (`false`): taking what a strict peer or proxy rejects
/// would be a parser differential. Refused by the one rule for a refused text (a request
/// answered `-32700` under its id, a notification or response not answered).
pub fn message_lead(text: &str) -> (&str, bool) {
    let strict = text.trim_start_matches(JSON_WHITESPACE);
    let strict = match strict.strip_prefix('\u{feff}') {
        Some(rest) => rest.trim_start_matches(JSON_WHITESPACE),
        None => strict,
    };
    // The hot path: a message begins right there.
    if strict.starts_with('{') || strict.starts_with('[') {
        return (strict, true);
    }
    // NUL counts with the other whitespace here (a stream padded with zeros), and so does
    // a byte order mark past the one §8.1 lets a reader skip: the message after them is
    // read for its id, and refused all the same.
    let lax = |c: char| c.is_whitespace() || c == '\0' || c == '\u{feff}';
    let lenient = text.trim_start_matches(lax);
    (lenient, lenient.len() == strict.len())
}

/// `text` from where its message starts ([`message_lead`]).
pub(crate) fn message_start(text: &str) -> &str {
    message_lead(text).0
}

/// The message in a frame's text, from [`message_lead`] to before the JSON whitespace after
/// it (other whitespace after it is text the parser refuses), and whether what precedes it
/// is JSON whitespace and a byte order mark only. The one reading of the peer's reader and
/// of [`super::Message::parse`] (and so of the answers [`super::ParseError`] gives, read from the same
/// text).
pub fn message_read(text: &str) -> (&str, bool) {
    let (start, json) = message_lead(text);
    (start.trim_end_matches(JSON_WHITESPACE), json)
}

/// The message in a frame's text ([`message_read`]).
pub(crate) fn message_text(text: &str) -> &str {
    message_read(text).0
}

/// What the one rule for a refused text does with `text` when it is refused for what
/// precedes its message alone ([`message_lead`]): read whole, as the peer reads it; `None`
/// when it is not (nothing but JSON whitespace and a byte order mark before it, or no
/// JSON after it: refused by the parser's error as any text is).
pub(crate) fn lead_refusal(text: &str) -> Option<head::Then> {
    let (message, json) = message_read(text);
    if json {
        return None;
    }
    lead_refused(message).map(|head| head.then(true, false))
}

/// The head of a `message` ([`message_read`]) refused for what precedes it alone, read
/// whole: `None` when it is no JSON (refused by the parser's error, as any text is).
pub(crate) fn lead_refused(message: &str) -> Option<head::Head> {
    serde_json::from_str::<serde::de::IgnoredAny>(message).ok()?;
    Some(head::Head::read_str(message))
}
