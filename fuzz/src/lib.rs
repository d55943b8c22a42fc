//! Bodies of the mcpl fuzz targets, as plain functions.
//!
//! Each `fuzz_targets/<name>.rs` calls one of these with libFuzzer's bytes; the same file is
//! compiled into the workspace test `crates/mcpl/tests/reliability_fuzz_bodies.rs` (through
//! `#[path]`), where proptest feeds it, so the same invariants run on the stable toolchain.
//! A body panics only when an invariant of the library is broken: rejecting the input with a
//! typed error is a pass.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use mcpl::capability::{self, advertisement_to_value, Capability};
use mcpl::jsonrpc::Message;
use mcpl::manifest::digest;
use mcpl::transport::{Frame, LineReader};
use mcpl::uri;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// `mcpl::manifest::digest::revision` on any JSON text.
pub fn digest(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        digest_value(&value);
    }
}

/// Invariants of the §17.2 digest on one JSON value: a revision is `sha256:` plus 43
/// base64url characters, equals the hash of the canonical text, and the canonical text is a
/// fixpoint (parsing it back gives the same revision). Refusals carry a code.
pub fn digest_value(value: &Value) {
    match digest::revision(value) {
        Ok(rev) => {
            let hash = rev
                .strip_prefix("sha256:")
                .expect("revision has the sha256: prefix");
            assert_eq!(hash.len(), 43, "unpadded base64url of 32 bytes: {rev}");
            assert!(hash
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            let canonical = digest::canonical_json(value).expect("revision succeeded");
            assert_eq!(digest::revision_of_canonical(&canonical), rev);
            let reparsed: Value =
                serde_json::from_str(&canonical).expect("canonical JSON is valid JSON");
            assert_eq!(
                digest::revision(&reparsed).as_deref(),
                Ok(rev.as_str()),
                "canonical text is not a fixpoint: {canonical}"
            );
        }
        Err(e) => assert!(!e.code().is_empty()),
    }
}

/// `mcpl::uri::resolve` on any UTF-8 text.
pub fn uri(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        uri_text(text);
    }
}

/// Invariants of the RFC-004 resolver: the configured URI is kept byte for byte, the
/// canonical URI is a fixpoint (resolving it gives itself and the same transport), the
/// transport is `ws://` or `wss://` and `is_secure` says which. Refusals carry a code.
pub fn uri_text(text: &str) {
    match uri::resolve(text) {
        Ok(endpoint) => {
            assert_eq!(endpoint.configured_uri(), text);
            let transport = endpoint.resolved_transport();
            assert!(
                transport.starts_with("wss://") || transport.starts_with("ws://"),
                "transport {transport:?}"
            );
            assert_eq!(endpoint.is_secure(), transport.starts_with("wss://"));
            let again = uri::resolve(endpoint.canonical_uri()).unwrap_or_else(|e| {
                panic!(
                    "canonical {:?} of {text:?} does not resolve: {e}",
                    endpoint.canonical_uri()
                )
            });
            assert_eq!(
                again.canonical_uri(),
                endpoint.canonical_uri(),
                "from {text:?}"
            );
            assert_eq!(again.resolved_transport(), transport, "from {text:?}");
        }
        Err(reason) => assert!(!reason.code().is_empty()),
    }
}

/// `mcpl::capability::advertised` on any JSON text.
pub fn advertised(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        advertised_value(&value);
    }
}

/// Invariants of the §5.1 advertisement walk: `tools` is never sourced from
/// `experimental.mcpl`, and writing the result back in the 0.5 form and reading it again
/// gives the same set with no findings (the walk's output is closed under ancestors).
pub fn advertised_value(value: &Value) {
    let adv = capability::advertised(value);
    assert!(!adv.capabilities.contains(Capability::Tools));
    let written = advertisement_to_value(adv.capabilities);
    let again = capability::advertised(&written);
    assert_eq!(again.capabilities, adv.capabilities, "through {written}");
    assert!(
        again.findings.is_empty(),
        "own output has findings: {:?}",
        again.findings
    );
}

/// The line reader and message parser on any byte stream: the first byte picks the size
/// limit (1..=64), the second the chunking, the rest is the stream.
pub fn framing(data: &[u8]) {
    let [a, b, stream @ ..] = data else { return };
    let limit = 1 + usize::from(*a) % 64;
    let mut state = u32::from(*b) | 1;
    let chunks: Vec<usize> = (0..16)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            1 + (state >> 16) as usize % 23
        })
        .collect();
    framing_case(stream, limit, &chunks);
}

/// Runs [`LineReader`] over `stream` delivered in pieces of the given sizes (cycled) and
/// checks it against [`reference_frames`]; every text frame also goes through
/// `Message::parse`, and a parsed message survives its own serialisation. Returns the frames.
pub fn framing_case(stream: &[u8], limit: usize, chunks: &[usize]) -> Vec<Frame> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let frames = runtime.block_on(async {
        let mut reader = LineReader::new(Chunked {
            data: stream,
            chunks,
            next: 0,
        });
        mcpl::transport::FrameReader::set_max_message_size(&mut reader, limit);
        let mut frames = Vec::new();
        while let Some(frame) = reader
            .read_frame()
            .await
            .expect("in-memory reads cannot fail")
        {
            frames.push(frame);
        }
        frames
    });
    // The reason text of `NotText` is free-form: compare the kinds.
    let normalised: Vec<Frame> = frames
        .iter()
        .map(|f| match f {
            Frame::NotText { .. } => Frame::NotText {
                reason: String::new(),
            },
            other => other.clone(),
        })
        .collect();
    assert_eq!(normalised, reference_frames(stream, limit));
    for frame in &frames {
        if let Frame::Text(text) = frame {
            if let Ok(message) = Message::parse(text) {
                let again = Message::parse(&message.to_json()).expect("own output parses");
                assert_eq!(again.to_value(), message.to_value());
            }
        }
    }
    frames
}

/// What the framing must produce, computed the obvious way on the whole stream: split at
/// `\n`; an unterminated tail is a line too; one trailing `\r` is dropped and does not count
/// towards the limit; a longer line is `Oversized` with its full length; bytes that are not
/// UTF-8 are `NotText` (with an empty reason).
pub fn reference_frames(stream: &[u8], limit: usize) -> Vec<Frame> {
    let mut lines: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
        .into_iter()
        .map(|raw| {
            let body = raw.strip_suffix(b"\r").unwrap_or(raw);
            if body.len() > limit {
                Frame::Oversized {
                    bytes: raw.len(),
                    limit,
                }
            } else {
                match std::str::from_utf8(body) {
                    Ok(s) => Frame::Text(s.to_owned()),
                    Err(_) => Frame::NotText {
                        reason: String::new(),
                    },
                }
            }
        })
        .collect()
}

/// An in-memory reader that hands out at most one chunk size per read, cycling through
/// `chunks`, so lines arrive split at arbitrary points.
struct Chunked<'a> {
    data: &'a [u8],
    chunks: &'a [usize],
    next: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let size = match self.chunks {
            [] => usize::MAX,
            chunks => chunks[self.next % chunks.len()].max(1),
        };
        self.next = self.next.wrapping_add(1);
        let n = size.min(self.data.len()).min(buf.remaining());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}
