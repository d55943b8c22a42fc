//! The junk-line probe's writer (§4: every message is JSON-RPC 2.0; `host.survives-junk-line`
//! sends one line that is not). The peer only writes JSON, so the transport's writer is
//! wrapped: the one notification text [`MARKER`] is replaced on the wire by [`JUNK_LINE`],
//! keeping its place in the peer's frame order (so the ping after it follows it).

use std::io;

use mcpl::transport::{BoxFuture, FrameWriter, Transport, TrySend};

/// The method of the notification that stands for the junk line (never on the wire).
pub(super) const MARKER_METHOD: &str = "mcpl-check-host/junk-line";

/// The peer's text for `notify_raw(MARKER_METHOD, None)` (its envelope members sorted, no
/// params); a unit test pins it to what the peer writes.
const MARKER: &str = r#"{"jsonrpc":"2.0","method":"mcpl-check-host/junk-line"}"#;

/// The line the probe sends: text, no JSON, no newline.
pub(super) const JUNK_LINE: &str = "mcpl check-host: this line is not JSON";

/// `transport` with its writer wrapped by [`JunkWriter`].
pub(super) fn with_junk_line(mut transport: Transport) -> Transport {
    transport.writer = Box::new(JunkWriter(transport.writer));
    transport
}

/// A writer that sends [`JUNK_LINE`] in place of [`MARKER`] and everything else unchanged.
struct JunkWriter(Box<dyn FrameWriter>);

fn swap(text: &str) -> &str {
    if text == MARKER {
        JUNK_LINE
    } else {
        text
    }
}

impl FrameWriter for JunkWriter {
    fn send<'a>(&'a mut self, text: &'a str) -> BoxFuture<'a, io::Result<()>> {
        self.0.send(swap(text))
    }

    fn send_many<'a>(&'a mut self, texts: &'a [String]) -> BoxFuture<'a, io::Result<()>> {
        if texts.iter().any(|t| t == MARKER) {
            let swapped: Vec<String> = texts.iter().map(|t| swap(t).to_owned()).collect();
            Box::pin(async move { self.0.send_many(&swapped).await })
        } else {
            self.0.send_many(texts)
        }
    }

    fn close(&mut self) -> BoxFuture<'_, io::Result<()>> {
        self.0.close()
    }

    fn try_send_now(&mut self, text: &str) -> io::Result<TrySend> {
        self.0.try_send_now(swap(text))
    }

    fn flush_pending(&mut self) -> BoxFuture<'_, io::Result<()>> {
        self.0.flush_pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpl::peer::{Peer, PeerConfig};
    use tokio::io::AsyncBufReadExt;

    /// The marker notification reaches the wire as the junk line, in its place between the
    /// frames around it.
    #[tokio::test]
    async fn the_marker_goes_out_as_the_junk_line() {
        let (ours, theirs) = tokio::io::duplex(4096);
        let (read, write) = tokio::io::split(ours);
        let transport = with_junk_line(Transport::lines(read, write, "test"));
        let (peer, _incoming) = Peer::new(transport, PeerConfig::default());
        peer.notify_raw("before", None).await.unwrap();
        peer.notify_raw(MARKER_METHOD, None).await.unwrap();
        peer.notify_raw("after", None).await.unwrap();
        let mut lines = tokio::io::BufReader::new(theirs).lines();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(lines.next_line().await.unwrap().unwrap());
        }
        assert_eq!(
            got,
            [
                r#"{"jsonrpc":"2.0","method":"before"}"#,
                JUNK_LINE,
                r#"{"jsonrpc":"2.0","method":"after"}"#
            ]
        );
    }
}
