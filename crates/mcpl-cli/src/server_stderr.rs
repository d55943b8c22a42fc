//! A spawned server's stderr as the CLI shows it (`mcpl check`, `mcpl inspect`): made
//! printable (every character a terminal acts on is written as its escape, `\u{1b}`, with
//! no exception: not even the colour sequences the CLI's own reports use, so a server
//! cannot colour a forged `PASS`; newlines and tabs kept) and bounded, a line at
//! [`LINE_BYTES`] and the whole at [`TOTAL_BYTES`]. A server that is broken, or not the program the user meant to run,
//! wrote screen clears, OSC 52 clipboard writes or a line of megabytes straight into the
//! user's terminal. Past the total bound the stderr is still read (a child blocked on a
//! full pipe stops answering), only not shown. A CRLF line ending is shown as a newline.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Most bytes of one stderr line shown, escapes as written out (4 KiB); the rest of a
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
        let mut escaped = [0u8; 16];
        let shown: &str = if crate::term::acts_on_terminal(c) {
            let mut n = 0;
            for e in c.escape_unicode() {
                n += e
                    .encode_utf8(escaped.get_mut(n..).unwrap_or_default())
                    .len();
            }
            std::str::from_utf8(escaped.get(..n).unwrap_or_default()).unwrap_or_default()
        } else {
            c.encode_utf8(&mut escaped)
        };
        if self.line + shown.len() > LINE_BYTES {
            self.cut = true;
            out.push('…');
            return;
        }
        self.line += shown.len();
        out.push_str(shown);
    }

    /// `text` (printable already), within what is left of [`TOTAL_BYTES`].
    fn bounded(&mut self, shown: &str) -> String {
        let left = TOTAL_BYTES.saturating_sub(self.total);
        if shown.len() <= left {
            self.total += shown.len();
            return shown.to_owned();
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
    let task = tokio::spawn(copy(stderr));
    let mut copies = COPIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    copies.retain(|t| !t.is_finished());
    copies.push(task);
    Ok((transport, control))
}

/// The copies [`spawn`] started (finished ones dropped at each spawn), for [`drain`].
static COPIES: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// How long [`drain`] waits at most for servers' stderr to end (500 ms, as `mcpl check`'s
/// grace for it).
pub const DRAIN_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits, at most [`DRAIN_GRACE`] in all, for every copy [`spawn`] started to show what its
/// server wrote last, so a command ending does not cut a server's last lines (the runtime's
/// end would cancel the copies mid-read). Call it before leaving the runtime.
pub async fn drain() {
    let copies = std::mem::take(
        &mut *COPIES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let _ = tokio::time::timeout(DRAIN_GRACE, futures_util::future::join_all(copies)).await;
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

    /// The CLI's own colour sequences are escaped too when the server writes them (a
    /// coloured forged `PASS`), and a line's bound counts what is shown: 4,096 ESC bytes
    /// are not 24 KiB of `\u{1b}` on one line.
    #[test]
    fn a_servers_colours_are_escaped_and_its_escapes_count_in_the_line_bound() {
        let mut s = Shown::default();
        assert_eq!(
            s.feed(b"\x1b[32mPASS\x1b[0m\n"),
            "\\u{1b}[32mPASS\\u{1b}[0m\n"
        );
        let out = s.feed(&[0x1b; LINE_BYTES]);
        assert!(out.len() <= LINE_BYTES + '…'.len_utf8(), "{}", out.len());
        assert!(out.ends_with('…') && !out.contains('\x1b'));
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
