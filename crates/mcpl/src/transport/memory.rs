//! An in-memory pair of connected transports for tests and in-process wiring. Bytes go
//! through the real newline framing, so tests exercise the same code as the wire.

use super::Transport;

/// Buffer size of each direction of the in-memory pipe.
const PIPE_CAPACITY: usize = 64 * 1024;

/// Two transports connected to each other: what one writes, the other reads.
pub fn pair() -> (Transport, Transport) {
    let (a, b) = tokio::io::duplex(PIPE_CAPACITY);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (
        Transport::lines(ar, aw, "memory (a)"),
        Transport::lines(br, bw, "memory (b)"),
    )
}
