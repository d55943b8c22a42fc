//! Terminal conventions shared by every subcommand: colour only on a terminal (and never
//! when `NO_COLOR` is set and non-empty, per no-color.org), the error type that carries the
//! exit code, and output that survives a closed pipe.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: the input was refused or a check failed.
pub const EXIT_REFUSED: u8 = 1;
/// Exit code: usage or I/O error (including input that is not JSON or has the wrong shape).
pub const EXIT_USAGE: u8 = 2;

/// Which standard stream a [`Style`] is for.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// ANSI styling that is a no-op unless the stream is a terminal and `NO_COLOR` is unset.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    enabled: bool,
}

impl Style {
    /// The style for `stream`, decided from `IsTerminal` and `NO_COLOR`.
    pub fn for_stream(stream: Stream) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let tty = match stream {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        };
        Style {
            enabled: tty && !no_color,
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Bold red, for refusals and failures.
    pub fn bad(self, text: &str) -> String {
        self.paint("1;31", text)
    }

    /// Green, for passes and granted paths.
    pub fn good(self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Yellow, for warnings and hints.
    pub fn warn(self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Bold, for headings.
    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Dimmed, for secondary detail.
    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// A failure that ends a subcommand: its exit code, a message naming the input and the
/// problem, and optionally what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The process exit code ([`EXIT_REFUSED`] or [`EXIT_USAGE`]).
    pub exit: u8,
    /// What went wrong, naming the file or argument concerned.
    pub message: String,
    /// What the user can do about it.
    pub hint: Option<String>,
}

impl CliError {
    /// A usage, I/O or bad-input error (exit 2).
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            exit: EXIT_USAGE,
            message: message.into(),
            hint: None,
        }
    }

    /// Refused input (exit 1).
    pub fn refused(message: impl Into<String>) -> CliError {
        CliError {
            exit: EXIT_REFUSED,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint line saying what to do next.
    pub fn with_hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    /// Prints the error (and hint) on stderr and returns its exit code. The message names
    /// what a file or a peer wrote, so it is printed on one line ([`one_line`]).
    pub fn report(&self) -> ExitCode {
        let style = Style::for_stream(Stream::Stderr);
        let mut text = format!("{} {}\n", style.bad("error:"), one_line(&self.message));
        if let Some(hint) = &self.hint {
            text.push_str(&format!("{} {}\n", style.warn("hint:"), one_line(hint)));
        }
        emit_err(&text);
        ExitCode::from(self.exit)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Writes `text` to stdout in one go. A closed pipe (`mcpl … | head`) is not an error worth
/// a panic: the write failure is ignored and the exit code stays the command's own.
/// What a terminal would act on is made [`visible`] first.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(visible(text).as_bytes());
    let _ = out.flush();
}

/// Writes `text` to stdout as [`emit`] does, but byte for byte when stdout is not a terminal:
/// for output that is data whose exact bytes matter (the §17.2 canonical JSON, whose hash
/// is the revision), where [`visible`] would change what a pipe or a file receives. On a
/// terminal it is made visible all the same.
pub fn emit_data(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(shown_data(text).as_bytes());
    let _ = out.flush();
}

/// `text` as [`emit_data`] writes it: unchanged unless stdout is a terminal, [`visible`]
/// there.
pub fn shown_data(text: &str) -> std::borrow::Cow<'_, str> {
    if std::io::stdout().is_terminal() {
        visible(text)
    } else {
        text.into()
    }
}

/// Writes `text` to stderr (warnings that accompany a successful result), made
/// [`visible`] first.
pub fn emit_err(text: &str) {
    let _ = std::io::stderr().lock().write_all(visible(text).as_bytes());
}

/// The colour sequences [`Style`] writes: the only escape sequences [`visible`] lets through.
const OWN_SEQUENCES: [&str; 6] = [
    "\x1b[0m",
    "\x1b[1;31m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[1m",
    "\x1b[2m",
];

/// Whether a terminal would act on `c` rather than show it: C0 and C1 controls (newline and
/// tab aside), DEL, and the bidirectional overrides and isolates that reorder what is shown
/// after them (the "Trojan Source" characters).
pub(crate) fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as it is safe to print: the strings a peer or a file supplies (a server's names,
/// errors and stderr, a manifest's keys) reach every human report, and a terminal would
/// act on their escape sequences (clear the screen, move the cursor over earlier lines,
/// retitle the window, hide or reorder text). Every character a terminal acts on is
/// written as its escape (`\u{1b}`), except the colour sequences [`Style`] itself writes;
/// newlines and tabs stay. JSON output never holds such characters (its strings escape
/// them), so it passes unchanged.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(own) = OWN_SEQUENCES.iter().find(|s| rest.starts_with(**s)) {
            out.push_str(own);
            rest = &rest[own.len()..];
            continue;
        }
        if acts_on_terminal(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out.into()
}

/// Whether Unicode reads `c` as ending a line (UAX #14's mandatory breaks: LF, VT, FF, CR,
/// NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR): some terminals and log viewers break a line
/// at each of them, not only at `\n`.
pub(crate) fn breaks_line(c: char) -> bool {
    matches!(
        c,
        '\n' | '\u{b}' | '\u{c}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// `text` kept on one line: every line break in it ([`breaks_line`], U+2028 and NEL as
/// much as a newline) is written as its escape (`\u{a}`, `\u{2028}`), so text a peer or a
/// file supplies cannot start a line of its own in a report (a forged `PASS` line, a
/// forged finding). The rest as [`visible`].
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(breaks_line) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks_line(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Serialises a value as pretty JSON followed by a newline ([`json_text`]).
pub fn pretty_json<T: serde::Serialize>(value: &T) -> String {
    // Serialising our own report types and `serde_json::Value` cannot fail (string keys
    // only); fall back to an explicit marker rather than panicking.
    let s = serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\":\"serialisation failed: {e}\"}}"));
    json_text(s)
}

/// Serialises a value as one compact JSON line followed by a newline ([`json_text`]).
pub fn compact_json<T: serde::Serialize>(value: &T) -> String {
    let s = serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"error\":\"serialisation failed: {e}\"}}"));
    json_text(s)
}

/// Serialised JSON as the CLI prints it, with a newline: every character a terminal acts on
/// ([`acts_on_terminal`]) written as a JSON `\uXXXX` escape. serde_json escapes only C0
/// controls (all JSON requires), so DEL, C1 controls and the bidirectional overrides from a
/// file or a peer stayed raw, and [`visible`] then rewrote them as `\u{7f}`, which is no
/// JSON escape: the output no longer parsed. Such characters occur only inside strings
/// (JSON's own text is printable ASCII and whitespace), where the escape reads back as the
/// same character; all of them are in the BMP, so one `\uXXXX` each.
pub fn json_text(mut s: String) -> String {
    if s.chars().any(acts_on_terminal) {
        let mut out = String::with_capacity(s.len() + 16);
        for c in s.chars() {
            if acts_on_terminal(c) {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            } else {
                out.push(c);
            }
        }
        s = out;
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_when_enabled() {
        assert_eq!(Style { enabled: false }.bad("x"), "x");
        assert_eq!(Style { enabled: true }.bad("x"), "\x1b[1;31mx\x1b[0m");
    }

    #[test]
    fn visible_writes_what_a_terminal_acts_on_as_escapes_and_keeps_own_colours() {
        let hostile = "a\x1b]0;PWNED\x07b\x1b[2Jc\x1b[1Ad\u{9b}31m\u{202e}gnp.exe\x7f";
        assert_eq!(
            visible(hostile),
            "a\\u{1b}]0;PWNED\\u{7}b\\u{1b}[2Jc\\u{1b}[1Ad\\u{9b}31m\\u{202e}gnp.exe\\u{7f}"
        );
        let own = Style { enabled: true };
        let text = format!("{} line\n\tnext {}", own.bad("FAIL"), own.dim("x"));
        assert_eq!(visible(&text), text);
        // A server's own colour code is let through only as one of ours.
        assert_eq!(visible("\x1b[8mhidden"), "\\u{1b}[8mhidden");
    }

    #[test]
    fn one_line_escapes_line_breaks() {
        assert_eq!(one_line("a\n  PASS  x\rb"), "a\\u{a}  PASS  x\\u{d}b");
        assert_eq!(one_line("plain"), "plain");
    }

    /// Every character Unicode reads as ending a line (UAX #14 mandatory breaks: LF, VT,
    /// FF, CR, NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR) is written as its escape: some
    /// terminals and log viewers break a line at U+2028, U+2029 and U+0085, so a peer's
    /// text could still start a line of its own (a forged `PASS`).
    #[test]
    fn one_line_escapes_every_unicode_line_break() {
        for (c, escaped) in [
            ('\u{b}', "\\u{b}"),
            ('\u{c}', "\\u{c}"),
            ('\u{85}', "\\u{85}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
        ] {
            let text = format!("a{c}  PASS  x");
            assert_eq!(one_line(&text), format!("a{escaped}  PASS  x"), "{c:?}");
        }
        // Other separators stay as they are.
        assert_eq!(one_line("a\u{2027}b\u{a0}c"), "a\u{2027}b\u{a0}c");
    }

    #[test]
    fn errors_carry_their_exit_code() {
        assert_eq!(CliError::usage("u").exit, EXIT_USAGE);
        assert_eq!(
            CliError::refused("r").with_hint("h").hint.as_deref(),
            Some("h")
        );
    }
}
