//! A spawned server's stderr as the CLI shows it (`mcpl check`, `mcpl inspect`): made
//! printable ([`crate::term::visible`]: every character a terminal acts on is written as
//! its escape, newlines and tabs kept) and bounded, a line at [`LINE_BYTES`] and the whole
//! at [`TOTAL_BYTES`]. A server that is broken, or not the program the user meant to run,
//! wrote screen clears, OSC 52 clipboard writes or a line of megabytes straight into the
//! user's terminal. Past the total bound the stderr is still read (a child blocked on a
//! full pipe stops answering), only not shown. A CRLF line ending is shown as a newline.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Most bytes of one stderr line shown, as the server wrote them (4 KiB); the rest of a
/// longer line is dropped and the line ends in `…`.
pub const LINE_BYTES: usize = 4 * 1024;

/// Most bytes of a server's stderr shown in all (4 MiB, escapes as written out); past it
/// one line says the rest is not shown, and the rest is read and dropped.
pub const TOTAL_BYTES: usize = 4 * 1024 * 1024;

/// Turns the bytes a server writes to its stderr into text safe to show, within the bounds.
#[derive(Debug, Default)]
pub struct Shown {
    /// The start of a UTF-8 character the last chunk ended in (at most 3 bytes).
    carry: Vec<u8>,
    /// A carriage return whose next character is not read yet (dropped before `\n`).
    cr: bool,
    /// Bytes of the current line taken.
    line: usize,
    /// The current line went past [`LINE_BYTES`]: the rest of it is dropped.
    cut: bool,
    /// Bytes shown so far.
    total: usize,
    /// [`TOTAL_BYTES`] was reached: nothing more is shown.
    ended: bool,
}

impl Shown {
    /// What to show of `chunk`, the next bytes read (empty once the total bound is reached).
    pub fn feed(&mut self, chunk: &[u8]) -> String {
        if self.ended {
            return String::new();
        }
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(chunk);
        let mut text = String::with_capacity(bytes.len());
        let mut rest = bytes.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.take_str(s, &mut text);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    self.take_str(std::str::from_utf8(good).unwrap_or_default(), &mut text);
                    match e.error_len() {
                        // An incomplete character at the end: wait for its other bytes.
                        None => {
                            self.carry = bad.to_vec();
                            break;
                        }
                        Some(n) => {
                            self.take('\u{fffd}', &mut text);
                            rest = bad.get(n..).unwrap_or_default();
                        }
                    }
                }
            }
        }
        self.bounded(&text)
    }

    /// What is left to show once the stream ended: an incomplete last character, a last
    /// carriage return.
    pub fn finish(&mut self) -> String {
        if self.ended {
            return String::new();
        }
        let mut text = String::new();
        if !std::mem::take(&mut self.carry).is_empty() {
            self.take('\u{fffd}', &mut text);
        }
        if std::mem::take(&mut self.cr) {
            self.take_in_line('\r', &mut text);
        }
        self.bounded(&text)
    }

    fn take_str(&mut self, s: &str, out: &mut String) {
        for c in s.chars() {
            self.take(c, out);
        }
    }

    fn take(&mut self, c: char, out: &mut String) {
        if std::mem::take(&mut self.cr) && c != '\n' {
            self.take_in_line('\r', out);
        }
        match c {
            '\r' => self.cr = true,
            '\n' => {
                self.line = 0;
                self.cut = false;
                out.push('\n');
            }
            c => self.take_in_line(c, out),
        }
    }

    fn take_in_line(&mut self, c: char, out: &mut String) {
        if self.cut {
            return;
        }
        if self.line + c.len_utf8() > LINE_BYTES {
            self.cut = true;
            out.push('…');
            return;
        }
        self.line += c.len_utf8();
        out.push(c);
    }

    /// `text` made printable, within what is left of [`TOTAL_BYTES`].
    fn bounded(&mut self, text: &str) -> String {
        let shown = crate::term::visible(text);
        let left = TOTAL_BYTES.saturating_sub(self.total);
        if shown.len() <= left {
            self.total += shown.len();
            return shown.into_owned();
        }
        let mut end = left;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        self.ended = true;
        self.total = TOTAL_BYTES;
        format!(
            "{}…\n[mcpl: the server's stderr passed {} MiB; the rest of the server's stderr is not shown]\n",
            shown.get(..end).unwrap_or_default(),
            TOTAL_BYTES / (1024 * 1024)
        )
    }
}

/// Copies a server's `stderr` to this process's stderr as [`Shown`] shows it, until it ends.
pub async fn copy(mut stderr: impl AsyncRead + Unpin) {
    let mut shown = Shown::default();
    let mut buf = [0u8; 4096];
    let mut out = tokio::io::stderr();
    loop {
        let text = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => shown.feed(buf.get(..n).unwrap_or_default()),
        };
        if !text.is_empty() {
            let _ = out.write_all(text.as_bytes()).await;
        }
    }
    let _ = out.write_all(shown.finish().as_bytes()).await;
    let _ = out.flush().await;
}

/// Spawns `command` as [`mcpl::transport::child::spawn`] does, its stderr shown through
/// [`copy`] instead of inherited. Must be called inside a Tokio runtime.
pub fn spawn(
    command: &mut tokio::process::Command,
) -> std::io::Result<(
    mcpl::transport::Transport,
    mcpl::transport::child::ChildControl,
)> {
    let (transport, control, stderr) = mcpl::transport::child::spawn_with_stderr(command)?;
    tokio::spawn(copy(stderr));
    Ok((transport, control))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_cuts_long_lines_and_keeps_characters_split_across_reads() {
        let mut s = Shown::default();
        assert_eq!(s.feed(b"a\x1b[2Jb\r\n"), "a\\u{1b}[2Jb\n");
        // `é` split across two reads, a lone CR escaped.
        assert_eq!(s.feed(b"\xc3"), "");
        assert_eq!(s.feed(b"\xa9\rx\xff\n"), "é\\u{d}x\u{fffd}\n");
        let long = vec![b'y'; LINE_BYTES + 10];
        let out = s.feed(&long);
        assert_eq!(out.len(), LINE_BYTES + '…'.len_utf8());
        assert_eq!(s.feed(b"yyy\nnext"), "\nnext");
        s.feed(b"\r");
        assert_eq!(s.finish(), "\\u{d}");
    }

    #[test]
    fn stops_at_the_total_bound_with_one_note() {
        let mut s = Shown::default();
        let line = [vec![b'z'; 1023], vec![b'\n']].concat();
        let mut shown = 0;
        let mut notes = 0;
        for _ in 0..(TOTAL_BYTES / 1024 + 10) {
            let out = s.feed(&line);
            shown += out.len();
            notes += out.matches("is not shown").count();
        }
        assert_eq!(notes, 1);
        assert!(shown <= TOTAL_BYTES + 200, "{shown}");
        assert_eq!(s.feed(b"more\n"), "");
        assert_eq!(s.finish(), "");
    }
}
