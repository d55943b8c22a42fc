//! A spawned server's stderr: passed through to ours as it arrives, and its last lines kept
//! for the report, so a server that exits before answering `initialize` is reported with
//! what it said on the way out (issue #18 item 8), not as a conformance failure.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// At most this many of the last stderr lines are kept.
pub const TAIL_LINES: usize = 8;

/// Each kept line is cut to this many characters (the rest of a longer line is dropped).
pub const TAIL_LINE_CHARS: usize = 200;

/// Bytes of one unfinished line kept while its end has not arrived: a line never ending
/// costs no more than this.
const PARTIAL_BYTES: usize = TAIL_LINE_CHARS * 4;

/// The last lines of a stream, bounded by [`TAIL_LINES`] × [`TAIL_LINE_CHARS`].
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<TailState>>);

#[derive(Debug, Default)]
struct TailState {
    lines: VecDeque<String>,
    /// The line being read (at most [`PARTIAL_BYTES`]).
    partial: Vec<u8>,
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

    /// The kept lines, oldest first, with an unfinished last line included.
    pub fn lines(&self) -> Vec<String> {
        let Ok(mut st) = self.0.lock() else {
            return Vec::new();
        };
        let partial = std::mem::take(&mut st.partial);
        st.keep(&partial);
        st.lines.iter().cloned().collect()
    }
}

impl TailState {
    fn keep(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
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

/// Copies `stderr` to this process's stderr until it ends, keeping its tail in `tail`.
pub async fn pass_through(mut stderr: impl AsyncRead + Unpin, tail: Tail) {
    let mut buf = [0u8; 4096];
    let mut out = tokio::io::stderr();
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default();
                let _ = out.write_all(chunk).await;
                tail.push(chunk);
            }
        }
    }
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
        let lines = t.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 13");
        assert_eq!(lines[TAIL_LINES - 1].chars().count(), TAIL_LINE_CHARS + 1);
    }
}
