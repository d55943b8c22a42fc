//! Which requests of ours are on the wire: an answer may name only those (JSON-RPC 2.0 §5,
//! MCPL §5). A request is registered before its frame is written (so a fast answer finds
//! it), and the writer may hold the frame longer still; an answer read meanwhile, under an
//! id the other side guessed (ours are sequential), settled it, and the real answer was
//! then reported as unknown. The writer notes each request frame as it takes it for the
//! wire, off the frame's first bytes ([`request_frame_id`]), and `settle` takes an answer
//! only under an id so noted. Reading: "written" is handed to the transport, in the
//! writer's batch or a direct write, before its first byte can go out (so a fast answer is
//! never refused); a frame handed over in a write that still waits (the other side not
//! reading) counts as written. Costs one atomic read per answer read and one look at the
//! first bytes of each frame written, no allocation (`peer_allocs` pins it).

use super::*;

impl Shared {
    /// Notes `text`, a frame about to be written (before any of its bytes can reach the
    /// other side), as on the wire when it is a request of ours: its id then bounds the
    /// ids an answer may name ([`Shared::was_written`]). Read off the frame's first bytes
    /// only ([`request_frame_id`]), no scan, no allocation.
    pub(super) fn note_written(&self, text: &str) {
        if let Some(id) = request_frame_id(text) {
            self.written_ids.fetch_max(id, Ordering::SeqCst);
        }
    }

    /// Whether `id` may name a request of ours whose frame was written: JSON-RPC 2.0 §5 (a
    /// Response answers a Request its sender received), MCPL §5. A number above the highest
    /// request id taken for the wire names a request not yet written (a peer that guessed
    /// it, our ids being sequential): a stray, which settles nothing. Reading: a lower id
    /// still queued behind a higher one written (two senders racing) passes; a legitimate
    /// answer never fails it, its id being noted before its request's first byte went out.
    pub(super) fn was_written(&self, id: &RequestId) -> bool {
        match id {
            RequestId::Number(n) => n
                .as_u64()
                .map_or(true, |k| k <= self.written_ids.load(Ordering::SeqCst)),
            RequestId::String(_) => true,
        }
    }
}

/// The id of a request frame this side wrote (`{"id":N,"jsonrpc":"2.0","method":…`, the
/// members in the order every writer of ours puts them: `wire::request_in`,
/// `Encoded::typed_request_in`, `Message::to_json`; or `{"jsonrpc":"2.0","id":N,"method":…`,
/// should a map keep insertion order), read off its first bytes only (at most 20 digits);
/// `None` for any other frame (a notification, a response of ours).
fn request_frame_id(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let (rest, then): (&[u8], &[u8]) = match bytes.strip_prefix(b"{\"id\":") {
        Some(rest) => (rest, b",\"jsonrpc\":\"2.0\",\"method\":"),
        None => (
            bytes.strip_prefix(b"{\"jsonrpc\":\"2.0\",\"id\":")?,
            b",\"method\":",
        ),
    };
    let digits = rest
        .iter()
        .take(21)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 20 {
        return None;
    }
    let (number, after) = rest.split_at(digits);
    if !after.starts_with(then) {
        return None;
    }
    std::str::from_utf8(number).ok()?.parse().ok()
}

#[cfg(test)]
mod request_frame_tests {
    use super::request_frame_id;

    /// Only our request frames give their id; responses, notifications and anything cut
    /// give none.
    #[test]
    fn a_request_frame_gives_its_id_and_nothing_else_does() {
        assert_eq!(
            request_frame_id(r#"{"id":42,"jsonrpc":"2.0","method":"m"}"#),
            Some(42)
        );
        assert_eq!(
            request_frame_id(r#"{"id":18446744073709551615,"jsonrpc":"2.0","method":"m"}"#),
            Some(u64::MAX)
        );
        assert_eq!(
            request_frame_id(r#"{"jsonrpc":"2.0","id":7,"method":"m"}"#),
            Some(7)
        );
        for other in [
            r#"{"id":42,"jsonrpc":"2.0","result":{}}"#,
            r#"{"error":{"code":1,"message":"m"},"id":42,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"id":"s","jsonrpc":"2.0","method":"m"}"#,
            r#"{"id":99999999999999999999,"jsonrpc":"2.0","method":"m"}"#,
            r#"{"id":123456789012345678901,"jsonrpc":"2.0","method":"m"}"#,
            r#"{"id":4"#,
            "",
        ] {
            assert_eq!(request_frame_id(other), None, "{other}");
        }
    }
}
