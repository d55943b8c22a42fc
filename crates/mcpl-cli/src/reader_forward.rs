//! The one list of the [`mcpl::transport::FrameReader`] methods a checker's reader wrapper
//! passes to the reader it wraps unchanged (the wrappers differ only in how they yield
//! frames). Each wrapper still denies `clippy::missing_trait_methods`, so a method the
//! trait gains later and this list lacks is named at build time instead of silently
//! defaulted (a default would undo what the wrapped reader does).

/// Expands to the pass-through methods of a `FrameReader` impl whose wrapped reader is
/// the field `$inner`.
macro_rules! forward_reader_state {
    ($inner:tt) => {
        fn recycle(&mut self, text: String) {
            self.$inner.recycle(text);
        }

        fn set_max_message_size(&mut self, limit: usize) {
            self.$inner.set_max_message_size(limit);
        }

        fn unfinished(&self) -> Option<&[u8]> {
            self.$inner.unfinished()
        }

        fn discarding(&self) -> Option<usize> {
            self.$inner.discarding()
        }

        fn ended_mid_line(&self) -> bool {
            self.$inner.ended_mid_line()
        }

        fn not_text_began_as_json(&self) -> bool {
            self.$inner.not_text_began_as_json()
        }

        fn discarded_head(&self) -> Option<&[u8]> {
            self.$inner.discarded_head()
        }

        fn discarded_rest(&self) -> &[Vec<u8>] {
            self.$inner.discarded_rest()
        }

        fn set_message_budget(&mut self, budget: mcpl::transport::MessageBudget) {
            self.$inner.set_message_budget(budget);
        }
    };
}

pub(crate) use forward_reader_state;

#[cfg(test)]
mod tests {
    use mcpl::transport::{BoxFuture, Frame, FrameReader, LineReader};
    use std::io;
    use std::task::{Context, Poll};
    use tokio::io::AsyncWriteExt;

    /// A wrapper as the checkers write one: frames its own way, the rest forwarded.
    struct Wrapper(LineReader<tokio::io::DuplexStream>);

    #[deny(clippy::missing_trait_methods)]
    impl FrameReader for Wrapper {
        fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
            self.0.next_frame()
        }

        fn poll_next_frame(
            &mut self,
            cx: &mut Context<'_>,
        ) -> Option<Poll<io::Result<Option<Frame>>>> {
            self.0.poll_next_frame(cx)
        }

        super::forward_reader_state!(0);
    }

    /// A line over the size bound holding several messages: what the wrapped reader keeps
    /// of the first and of the others (the peer answers each by them) reaches the peer
    /// through the wrapper, where the trait's defaults (nothing kept) would hide it.
    #[tokio::test]
    async fn what_the_wrapped_reader_kept_of_a_discarded_line_passes_through() {
        let (mut tx, rx) = tokio::io::duplex(1 << 16);
        let mut r = Wrapper(LineReader::new(rx));
        r.set_max_message_size(64);
        let pad = "x".repeat(80);
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"p\":\"{pad}\"}}}} \
             {{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}}\n"
        );
        tx.write_all(line.as_bytes()).await.unwrap();
        let frame = r.next_frame().await.unwrap();
        assert!(matches!(frame, Some(Frame::Oversized { .. })), "{frame:?}");
        let head = String::from_utf8_lossy(r.discarded_head().unwrap_or_default()).into_owned();
        assert!(head.contains("\"id\":1"), "{head}");
        let rest = r.discarded_rest();
        assert_eq!(rest.len(), 1, "the second message's envelope");
        assert!(String::from_utf8_lossy(&rest[0]).contains('2'), "{rest:?}");
    }
}
