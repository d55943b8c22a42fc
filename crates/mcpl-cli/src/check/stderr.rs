//! A spawned server's stderr: passed through to ours (made printable and bounded,
//! [`crate::server_stderr`]), and its last lines kept for the report,
//! so a server that exits before answering `initialize` is reported with what it said on the
//! way out (issue #18 item 8), not as a conformance failure.
//!
//! Until the server answers `initialize`, what it writes is held (at most [`HOLD_BYTES`]):
//! when it then exits, the report quotes its last lines once instead of after a copy of
//! them (issue #18 item 7); otherwise the held bytes are written out as they were.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// At most this many of the last stderr lines are kept.
pub const TAIL_LINES: usize = 8;

/// Each kept line is cut to this many characters (the rest of a longer line is dropped).
pub const TAIL_LINE_CHARS: usize = 200;

/// Most bytes of stderr held before `initialize` is answered; past it, they pass through.
pub const HOLD_BYTES: usize = 64 * 1024;

/// Bytes of one unfinished line kept while its end has not arrived: a line never ending
/// costs no more than this.
const PARTIAL_BYTES: usize = TAIL_LINE_CHARS * 4;

/// The last lines of a stream, bounded by [`TAIL_LINES`] × [`TAIL_LINE_CHARS`].
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<TailState>>);

#[derive(Debug)]
struct TailState {
    lines: VecDeque<String>,
    /// The line being read (at most [`PARTIAL_BYTES`]).
    partial: Vec<u8>,
    /// Lines seen in all, kept or not.
    total: usize,
    /// Stderr not yet passed through ([`HOLD_BYTES`]); `None` once released or discarded.
    held: Option<Vec<u8>>,
}

impl Default for TailState {
    fn default() -> TailState {
        TailState {
            lines: VecDeque::new(),
            partial: Vec::new(),
            total: 0,
            held: Some(Vec::new()),
        }
    }
}

impl Tail {
    /// Adds `bytes` as read from the stream.
    fn push(&self, bytes: &[u8]) {
        let Ok(mut st) = self.0.lock() else { return };
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut st.partial);
                st.keep(&line);
            } else if st.partial.len() < PARTIAL_BYTES {
                st.partial.push(b);
            }
        }
    }

    /// The kept lines, oldest first, with an unfinished last line included, and how many
    /// lines the stream had in all.
    pub fn lines(&self) -> (Vec<String>, usize) {
        let Ok(mut st) = self.0.lock() else {
            return (Vec::new(), 0);
        };
        let partial = std::mem::take(&mut st.partial);
        st.keep(&partial);
        (st.lines.iter().cloned().collect(), st.total)
    }

    /// Writes what is held to our stderr and passes everything later straight through.
    pub fn release(&self) {
        use std::io::Write as _;
        let Ok(mut st) = self.0.lock() else { return };
        if let Some(held) = st.held.take() {
            // Under the lock, so that nothing passed through later overtakes it.
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(&held);
            let _ = err.flush();
        }
    }

    /// Drops what is held (the report quotes its last lines instead); later bytes pass
    /// straight through.
    pub fn discard(&self) {
        if let Ok(mut st) = self.0.lock() {
            st.held = None;
        }
    }

    /// Holds `chunk` while holding and it fits; otherwise what must be written now (the
    /// held bytes first, when the hold overflowed).
    fn hold_or_pass(&self, chunk: &[u8]) -> Vec<u8> {
        let Ok(mut st) = self.0.lock() else {
            return chunk.to_vec();
        };
        match st.held.as_mut() {
            Some(held) if held.len() + chunk.len() <= HOLD_BYTES => {
                held.extend_from_slice(chunk);
                Vec::new()
            }
            Some(_) => {
                let mut out = st.held.take().unwrap_or_default();
                out.extend_from_slice(chunk);
                out
            }
            None => chunk.to_vec(),
        }
    }
}

impl TailState {
    fn keep(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        self.total += 1;
        let mut kept: String = text.chars().take(TAIL_LINE_CHARS).collect();
        if kept.len() < text.len() {
            kept.push('…');
        }
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(kept);
    }
}

/// Copies `stderr` to this process's stderr until it ends, as
/// [`crate::server_stderr::Shown`] shows it (printable, bounded; held until
/// [`Tail::release`]), keeping its tail in `tail`.
pub async fn pass_through(mut stderr: impl AsyncRead + Unpin, tail: Tail) {
    let mut shown = crate::server_stderr::Shown::default();
    let mut buf = [0u8; 4096];
    let mut out = tokio::io::stderr();
    loop {
        let text = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default();
                tail.push(chunk);
                shown.feed(chunk)
            }
        };
        let now = tail.hold_or_pass(text.as_bytes());
        if !now.is_empty() {
            let _ = out.write_all(&now).await;
        }
    }
    let now = tail.hold_or_pass(shown.finish().as_bytes());
    let _ = out.write_all(&now).await;
    let _ = out.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_bounded() {
        let t = Tail::default();
        for i in 0..20 {
            t.push(format!("line {i}\n").as_bytes());
        }
        t.push(&[b'x'; 10_000]);
        let (lines, total) = t.lines();
        assert_eq!(total, 21);
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 13");
        assert_eq!(lines[TAIL_LINES - 1].chars().count(), TAIL_LINE_CHARS + 1);
    }

    /// Held until released or discarded, and bounded: past [`HOLD_BYTES`] the held bytes
    /// and the new chunk are written at once, in order.
    #[test]
    fn holds_until_released_within_its_bound() {
        let t = Tail::default();
        assert!(t.hold_or_pass(b"a\n").is_empty());
        let big = vec![b'x'; HOLD_BYTES];
        let out = t.hold_or_pass(&big);
        assert_eq!(out.len(), HOLD_BYTES + 2);
        assert!(out.starts_with(b"a\n"));
        assert_eq!(t.hold_or_pass(b"b"), b"b".to_vec());
        let t = Tail::default();
        assert!(t.hold_or_pass(b"c").is_empty());
        t.discard();
        assert_eq!(t.hold_or_pass(b"d"), b"d".to_vec());
    }
}
