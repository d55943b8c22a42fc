//! Tests of the line framing ([`LineReader`], [`LineWriter`]): split from `mod.rs` to keep
//! each file of a size a reader can hold.

use super::*;
use proptest::prelude::Strategy as _;
use tokio::io::AsyncWriteExt;

async fn frames(input: &[u8], limit: usize) -> Vec<Frame> {
    let (mut a, b) = tokio::io::duplex(7); // tiny buffer: lines arrive in pieces
    let input = input.to_vec();
    tokio::spawn(async move {
        a.write_all(&input).await.unwrap();
    });
    let mut r = LineReader::new(b);
    r.set_max_message_size(limit);
    let mut out = Vec::new();
    while let Some(f) = r.read_frame().await.unwrap() {
        out.push(f);
    }
    out
}

/// Reads every frame from `r` until EOF, in a task.
fn collect_frames<R: AsyncRead + Unpin + Send + 'static>(
    r: R,
) -> tokio::task::JoinHandle<Vec<Frame>> {
    tokio::spawn(async move {
        let mut r = LineReader::new(r);
        let mut got = Vec::new();
        while let Some(f) = r.read_frame().await.unwrap() {
            got.push(f);
        }
        got
    })
}

fn text(s: &str) -> Frame {
    Frame::Text(s.into())
}

#[tokio::test]
async fn lines_split_on_newline_and_crlf_is_tolerated() {
    let got = frames(b"{\"a\":1}\r\n{\"b\":2}\nlast", 100).await;
    assert_eq!(
        got,
        vec![text("{\"a\":1}"), text("{\"b\":2}"), text("last")]
    );
}

#[tokio::test]
async fn a_recycled_small_frame_buffer_holds_the_next_line_and_a_large_one_is_dropped() {
    let mut input = b"{\"a\":1}\n{\"b\":2}\n".to_vec();
    input.extend(vec![b'x'; RECYCLED_LINE_BYTES + 1]);
    input.extend_from_slice(b"\nok\n");
    let mut r = LineReader::new(&input[..]);
    let Some(Frame::Text(first)) = r.read_frame().await.unwrap() else {
        panic!("a text frame");
    };
    assert_eq!(first, "{\"a\":1}");
    let kept = first.as_ptr();
    r.recycle(first);
    let Some(Frame::Text(second)) = r.read_frame().await.unwrap() else {
        panic!("a text frame");
    };
    assert_eq!(second, "{\"b\":2}");
    assert_eq!(second.as_ptr(), kept, "read into the recycled buffer");
    r.recycle(second);
    let Some(Frame::Text(large)) = r.read_frame().await.unwrap() else {
        panic!("a text frame");
    };
    assert!(large.capacity() > RECYCLED_LINE_BYTES);
    r.recycle(large);
    assert_eq!(r.line.capacity(), 0, "a large buffer is not kept");
    assert_eq!(r.read_frame().await.unwrap(), Some(text("ok")));
}

#[tokio::test]
async fn oversized_line_is_discarded_and_the_next_line_survives() {
    let mut input = vec![b'x'; 50];
    input.extend_from_slice(b"\nok\n");
    let got = frames(&input, 10).await;
    assert_eq!(
        got,
        vec![
            Frame::Oversized {
                bytes: 50,
                limit: 10
            },
            text("ok")
        ]
    );
}

#[tokio::test]
async fn a_line_exactly_at_the_limit_passes_with_or_without_cr() {
    let got = frames(b"0123456789\n0123456789\r\n01234567890\n", 10).await;
    assert_eq!(
        got,
        vec![
            text("0123456789"),
            text("0123456789"),
            Frame::Oversized {
                bytes: 11,
                limit: 10
            }
        ]
    );
}

#[tokio::test]
async fn try_send_now_writes_what_fits_and_the_rest_follows_first() {
    // An 8-byte pipe: the first message fits, the second only in part, the third not at
    // all until the reader drains it.
    let (a, b) = tokio::io::duplex(8);
    let mut w = LineWriter::new(a);
    assert_eq!(w.try_send_now("[1]").unwrap(), TrySend::Written);
    assert_eq!(w.try_send_now("[2,22]").unwrap(), TrySend::Partial);
    // Something is owed: nothing else is taken without waiting.
    assert_eq!(w.try_send_now("[3]").unwrap(), TrySend::NotTaken);
    let reader = collect_frames(b);
    w.flush_pending().await.unwrap();
    w.send("[4]").await.unwrap();
    w.close().await.unwrap();
    drop(w);
    assert_eq!(
        reader.await.unwrap(),
        vec![text("[1]"), text("[2,22]"), text("[4]")]
    );
}

#[tokio::test]
async fn try_send_now_on_a_full_pipe_takes_nothing_and_send_finishes_a_partial_one() {
    let (a, b) = tokio::io::duplex(4);
    let mut w = LineWriter::new(a);
    assert_eq!(w.try_send_now("abc").unwrap(), TrySend::Written);
    // The pipe is full: not a byte is taken, and nothing is owed afterwards.
    assert_eq!(w.try_send_now("abcdefgh").unwrap(), TrySend::NotTaken);
    let reader = tokio::spawn(async move {
        let mut r = LineReader::new(b);
        let mut got = Vec::new();
        while let Some(f) = r.read_frame().await.unwrap() {
            got.push(f);
            if got.len() == 1 {
                break;
            }
        }
        (r, got)
    });
    let (r, first) = reader.await.unwrap();
    assert_eq!(first, vec![text("abc")]);
    let (b, unframed) = r.into_parts();
    assert!(
        unframed.is_empty(),
        "nothing past the first line was sent yet"
    );
    assert_eq!(w.try_send_now("abcdefgh").unwrap(), TrySend::Partial);
    let reader = collect_frames(b);
    // `send` writes the owed rest before its own message.
    w.send("next").await.unwrap();
    w.close().await.unwrap();
    drop(w);
    assert_eq!(reader.await.unwrap(), vec![text("abcdefgh"), text("next")]);
}

#[tokio::test]
async fn send_many_writes_each_text_as_its_own_line_in_order() {
    let (a, b) = tokio::io::duplex(64);
    let texts: Vec<String> = (0..100).map(|i| format!("{{\"n\":{i}}}")).collect();
    let expected: Vec<Frame> = texts.iter().map(|t| text(t)).collect();
    let writer = tokio::spawn(async move {
        let mut w = LineWriter::new(a);
        w.send("first").await.unwrap();
        w.send_many(&texts).await.unwrap();
        w.send_many(&[]).await.unwrap();
        w.send("last").await.unwrap();
    });
    let mut r = LineReader::new(b);
    let mut got = Vec::new();
    while let Some(f) = r.read_frame().await.unwrap() {
        got.push(f);
    }
    writer.await.unwrap();
    assert_eq!(got.first(), Some(&text("first")));
    assert_eq!(got.last(), Some(&text("last")));
    assert_eq!(&got[1..got.len() - 1], &expected[..]);
}

/// A source that is always ready: `len` bytes of `x`, then a newline, then EOF, in
/// reads of at most 2 KiB. It never returns `Pending`, so only the reader itself can
/// let another task run while the line is assembled.
struct AlwaysReady {
    left: usize,
    newline: bool,
}

impl AsyncRead for AlwaysReady {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.left.min(buf.remaining()).min(2048);
        if n > 0 {
            buf.put_slice(&vec![b'x'; n]);
            self.left -= n;
        } else if self.newline {
            buf.put_slice(b"\n");
            self.newline = false;
        }
        Poll::Ready(Ok(()))
    }
}

/// Issue #20: a connection streaming a long line shares its thread. While a 1 MiB line
/// is assembled from a source that never blocks, another task on the same
/// single-threaded runtime runs at least once per [`YIELD_AFTER`] bytes (before, not at
/// all until the line was complete).
#[tokio::test(flavor = "current_thread")]
async fn a_long_line_yields_to_other_tasks_while_it_is_read() {
    const LINE: usize = 1024 * 1024;
    let ticker = Ticker::start().await;
    let mut r = LineReader::new(AlwaysReady {
        left: LINE,
        newline: true,
    });
    r.set_max_message_size(2 * LINE);
    let frame = r.read_frame().await.unwrap();
    let during = ticker.stop();
    assert!(matches!(&frame, Some(Frame::Text(t)) if t.len() == LINE));
    assert!(
        during >= LINE / YIELD_AFTER - 1,
        "the other task ran {during} times while a {LINE}-byte line was read"
    );
}

/// A byte reader that hands out `chunks` one per read, each read after the first
/// waiting once (waking itself) as a socket between packets does.
struct Chunked {
    chunks: std::collections::VecDeque<Vec<u8>>,
    wait: bool,
}

impl Chunked {
    /// `input` cut into reads of the sizes `cuts` gives, in turn (one read for all of it
    /// when `cuts` is empty).
    fn cut(input: &[u8], cuts: &[usize]) -> Chunked {
        let mut chunks = std::collections::VecDeque::new();
        let mut rest = input;
        for c in cuts.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (head, tail) = rest.split_at((*c).clamp(1, rest.len()));
            chunks.push_back(head.to_vec());
            rest = tail;
        }
        if !rest.is_empty() {
            chunks.push_back(rest.to_vec());
        }
        Chunked {
            chunks,
            wait: false,
        }
    }
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if std::mem::replace(&mut self.wait, false) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.wait = true;
        if let Some(mut c) = self.chunks.pop_front() {
            let n = c.len().min(buf.remaining());
            buf.put_slice(&c[..n]);
            if n < c.len() {
                self.chunks.push_front(c.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The frames of `input` as the framing rules define them: split at `\n`, one `\r`
/// before it dropped, a line over `limit` (the `\r` not counted) oversized, a last
/// line without terminator still a frame.
fn expected_frames(input: &[u8], limit: usize) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut parts: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    if parts.last().is_some_and(|l| l.is_empty()) {
        parts.pop();
    }
    for line in parts {
        let body = line.strip_suffix(b"\r").unwrap_or(line);
        if body.len() > limit {
            out.push(Frame::Oversized {
                bytes: line.len(),
                limit,
            });
        } else {
            out.push(Frame::Text(String::from_utf8(body.to_vec()).unwrap()));
        }
    }
    out
}

proptest::proptest! {
    /// However the bytes are cut into reads (and however many lines one read carries,
    /// with a wait between reads), the frames are the same.
    #[test]
    fn frames_do_not_depend_on_where_reads_cut_the_bytes(
        lines in proptest::collection::vec("[a-c\r]{0,40}", 0..30),
        cuts in proptest::collection::vec(1usize..3 * READ_CHUNK, 0..12),
        limit in 8usize..48,
    ) {
        let input = lines.join("\n").into_bytes();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let got = rt.block_on(async {
            let mut r = LineReader::new(Chunked::cut(&input, &cuts));
            r.set_max_message_size(limit);
            let mut got = Vec::new();
            while let Some(f) = r.read_frame().await.unwrap() {
                got.push(f);
            }
            got
        });
        proptest::prop_assert_eq!(got, expected_frames(&input, limit));
    }
}

/// Every frame of `r` until EOF, each read through `poll_next_frame`: a fresh future per
/// poll, dropped after every `Pending` (cancel safety).
async fn frames_polled<R: AsyncRead + Unpin + Send>(r: &mut LineReader<R>) -> Vec<Frame> {
    let mut got = Vec::new();
    loop {
        let f = std::future::poll_fn(|cx| r.poll_next_frame(cx).unwrap()).await;
        match f.unwrap() {
            Some(f) => got.push(f),
            None => return got,
        }
    }
}

proptest::proptest! {
    /// Lines far past a read (up to 40 KiB), a budget refusing whatever is not
    /// covered by the unbudgeted bytes, any cuts, read through fresh futures per poll:
    /// a line over 16 KiB is one `OverBudget`, every other line its text, nothing lost
    /// or reordered across `pending`.
    #[test]
    fn budget_refusals_across_reads_lose_no_following_line(
        lines in proptest::collection::vec(
            proptest::prop_oneof![
                "[a-c\\r]{0,60}".prop_map(|s| s.into_bytes()),
                (20_000usize..40_000).prop_map(|n| vec![b'y'; n]),
            ],
            0..12,
        ),
        cuts in proptest::collection::vec(1usize..3 * READ_CHUNK, 1..12),
        trailing_newline in proptest::bool::ANY,
    ) {
        let mut input = lines.join(&b'\n');
        if trailing_newline && !lines.is_empty() {
            input.push(b'\n');
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let got = rt.block_on(async {
            let mut r = LineReader::new(Chunked::cut(&input, &cuts));
            r.set_max_message_size(1 << 20);
            r.set_message_budget(MessageBudget::new(0));
            frames_polled(&mut r).await
        });
        let mut want_lines: Vec<&Vec<u8>> = lines.iter().collect();
        if !trailing_newline && want_lines.last().is_some_and(|l| l.is_empty()) {
            want_lines.pop();
        }
        proptest::prop_assert_eq!(got.len(), want_lines.len(), "{:?}", got);
        for (g, w) in got.iter().zip(want_lines) {
            if w.len() > UNBUDGETED_BYTES {
                proptest::prop_assert!(matches!(g, Frame::OverBudget { .. }), "{:?}", g);
            } else {
                let body = w.strip_suffix(b"\r").unwrap_or(w);
                proptest::prop_assert_eq!(g, &Frame::Text(String::from_utf8(body.to_vec()).unwrap()));
            }
        }
    }
}

#[tokio::test]
async fn a_reader_waiting_for_bytes_holds_no_read_buffer_and_keeps_what_followed_a_line() {
    let (mut a, b) = tokio::io::duplex(64 * 1024);
    let many: String = (0..100).map(|i| format!("{{\"n\":{i}}}\n")).collect();
    a.write_all(many.as_bytes()).await.unwrap();
    let mut r = LineReader::new(b);
    // One read took them all; the first frame leaves the other 99 lines unframed.
    assert_eq!(r.read_frame().await.unwrap(), Some(text("{\"n\":0}")));
    assert!(r.pending.len() - r.pos > 0);
    for i in 1..100 {
        assert_eq!(
            r.read_frame().await.unwrap(),
            Some(text(&format!("{{\"n\":{i}}}")))
        );
    }
    // Nothing more to read: the read waits, and the reader gives its buffer back.
    {
        let mut next = std::pin::pin!(r.read_frame());
        let waited = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx).is_pending()));
        assert!(waited.await);
    }
    assert_eq!(r.pending.capacity(), 0);
    // A partial line is kept across the wait, and what follows a line is handed back by
    // `into_parts`.
    a.write_all(b"{\"half\":").await.unwrap();
    {
        let mut next = std::pin::pin!(r.read_frame());
        let waited = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx).is_pending()));
        assert!(waited.await);
    }
    a.write_all(b"1}\nnext\npart").await.unwrap();
    assert_eq!(r.read_frame().await.unwrap(), Some(text("{\"half\":1}")));
    let (_b, unframed) = r.into_parts();
    assert_eq!(unframed, b"next\npart");
}

/// `into_parts` hands back a line still without its end too: bytes read but taken by no
/// frame, as its docs (and the README) say.
#[tokio::test]
async fn into_parts_hands_back_a_partial_line() {
    let (mut a, b) = tokio::io::duplex(1024);
    a.write_all(b"{\"a\":1}\n{\"b\"").await.unwrap();
    let mut r = LineReader::new(b);
    assert_eq!(r.read_frame().await.unwrap(), Some(text("{\"a\":1}")));
    // The rest of that read becomes the line being assembled; the next read waits.
    {
        let mut next = std::pin::pin!(r.read_frame());
        let waited = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx).is_pending()));
        assert!(waited.await);
    }
    a.write_all(b":2}\nnext").await.unwrap();
    let (mut b, unframed) = r.into_parts();
    assert_eq!(unframed, b"{\"b\"");
    // Nothing was read past it: the rest is still in the byte reader.
    let mut rest = [0u8; 16];
    let n = tokio::io::AsyncReadExt::read(&mut b, &mut rest)
        .await
        .unwrap();
    assert_eq!(&rest[..n], b":2}\nnext");
}

/// `unfinished` shows the line a reader waits to see the end of (for a diagnostic when a
/// wait ends), and nothing once it ends or while one is discarded; `ended_mid_line` says
/// that the stream ended inside the last line, which is still framed.
#[tokio::test]
async fn a_line_without_its_end_is_shown_and_an_end_of_stream_inside_one_is_said() {
    let (mut a, b) = tokio::io::duplex(1024);
    a.write_all(b"{\"a\":1}\n{\"b\"").await.unwrap();
    let mut r = LineReader::new(b);
    r.set_max_message_size(16);
    assert_eq!(r.read_frame().await.unwrap(), Some(text("{\"a\":1}")));
    assert_eq!(FrameReader::unfinished(&r), None, "nothing begun yet");
    {
        let mut next = std::pin::pin!(r.read_frame());
        let waited = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx).is_pending()));
        assert!(waited.await);
    }
    assert_eq!(FrameReader::unfinished(&r), Some(&b"{\"b\""[..]));
    // Past the limit, the line is discarded and nothing of it is kept to show.
    a.write_all(b":2, \"long\": true").await.unwrap();
    {
        let mut next = std::pin::pin!(r.read_frame());
        let waited = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx).is_pending()));
        assert!(waited.await);
    }
    assert_eq!(FrameReader::unfinished(&r), None);
    a.write_all(b"}\n[1]\n[2").await.unwrap();
    assert!(matches!(
        r.read_frame().await.unwrap(),
        Some(Frame::Oversized { .. })
    ));
    assert_eq!(r.read_frame().await.unwrap(), Some(text("[1]")));
    assert!(!r.ended_mid_line());
    drop(a);
    // The stream ends inside `[2`: still a frame, and said to have ended mid-line.
    assert_eq!(r.read_frame().await.unwrap(), Some(text("[2")));
    assert!(r.ended_mid_line());
    assert_eq!(FrameReader::unfinished(&r), None);
    assert_eq!(r.read_frame().await.unwrap(), None);
    // A stream that ends after a newline did not end mid-line.
    let (mut a, b) = tokio::io::duplex(1024);
    a.write_all(b"[1]\n").await.unwrap();
    drop(a);
    let mut r = LineReader::new(b);
    assert_eq!(r.read_frame().await.unwrap(), Some(text("[1]")));
    assert_eq!(r.read_frame().await.unwrap(), None);
    assert!(!r.ended_mid_line());
}

/// A limit of `usize::MAX` (an application's "no limit") frames lines as any other: the
/// one `\r` tolerated on top of the limit must not overflow it (a panic in the reader
/// in debug builds; in release every non-empty line was oversized).
#[tokio::test]
async fn a_limit_of_usize_max_does_not_overflow() {
    let got = frames(b"{\"a\":1}\r\nok\n", usize::MAX).await;
    assert_eq!(got, vec![text("{\"a\":1}"), text("ok")]);
}

#[tokio::test]
async fn invalid_utf8_is_not_text() {
    let got = frames(b"\xff\xfe\nok\n", 10).await;
    assert!(matches!(got[0], Frame::NotText { .. }));
    assert_eq!(got[1], text("ok"));
}

/// Another task on the same runtime, counting how often it gets to run: a read that never
/// waits must still let it run (the `YIELD_AFTER` tests here and in `budget.rs`).
pub(super) struct Ticker {
    ticks: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    before: usize,
}

impl Ticker {
    /// Spawns it and lets it start, so every tick counted happens after this returns.
    pub(super) async fn start() -> Ticker {
        use std::sync::atomic::Ordering;
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let task = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        Ticker {
            ticks,
            task,
            before,
        }
    }

    /// Stops it: how many times it ran since [`Ticker::start`] returned.
    pub(super) fn stop(self) -> usize {
        self.task.abort();
        self.ticks.load(std::sync::atomic::Ordering::Relaxed) - self.before
    }
}

/// The summary of `bytes`' envelope read at once (`ended`: the object may be whole).
fn summary_at_once(bytes: &[u8], ended: bool) -> Option<Vec<u8>> {
    let mut e = envelope::Envelope::new();
    e.feed(bytes);
    e.summary(ended)
}

/// Every frame of `r` until EOF, each with what [`FrameReader::discarded_head`] then shows.
async fn frames_and_heads<R: AsyncRead + Unpin + Send>(
    r: &mut LineReader<R>,
) -> Vec<(Frame, Option<Vec<u8>>)> {
    let mut got = Vec::new();
    loop {
        let f = std::future::poll_fn(|cx| r.poll_next_frame(cx).unwrap()).await;
        match f.unwrap() {
            Some(f) => got.push((f, r.discarded_head().map(<[u8]>::to_vec))),
            None => return got,
        }
    }
}

/// A line refused with more than [`SCAN_AT_ONCE`] bytes buffered (the size limit crossed
/// mid-line, crossed by its last byte, at the end of the stream; the budget refusing a
/// line past 256 KiB) has its buffered part read into its envelope a step at a time (issue
/// #20), and the result is the one read at once: the same frames, the same summary, the
/// line after it intact, however the reads cut the bytes.
#[tokio::test]
async fn a_large_refused_lines_envelope_read_in_steps_is_the_one_read_at_once() {
    const LIMIT: usize = 300 * 1024;
    let object = |len: usize, id: &str| {
        let (open, close) = (r#"{"method":"m","params":["#, format!(r#"0],"id":{id}}}"#));
        let fill = len - open.len() - close.len();
        format!(
            "{open}{}{}{close}",
            "1,".repeat(fill / 2),
            " ".repeat(fill % 2)
        )
        .into_bytes()
    };
    let mid = object(LIMIT + 70_000, "1");
    let by_one = object(LIMIT + 1, "\"two\"");
    let at_eof = object(LIMIT + 5, "3");
    let mut input = [mid.as_slice(), b"\n{\"a\":1}\n", &by_one, b"\n"].concat();
    input.extend_from_slice(&at_eof);
    for cuts in [
        vec![],
        vec![1000],
        vec![3 * READ_CHUNK - 1],
        vec![7, 65_536, 333],
    ] {
        let mut r = LineReader::new(Chunked::cut(&input, &cuts));
        r.set_max_message_size(LIMIT);
        let got = frames_and_heads(&mut r).await;
        let want = vec![
            (
                Frame::Oversized {
                    bytes: mid.len(),
                    limit: LIMIT,
                },
                summary_at_once(&mid, true),
            ),
            (text(r#"{"a":1}"#), None),
            (
                Frame::Oversized {
                    bytes: by_one.len(),
                    limit: LIMIT,
                },
                summary_at_once(&by_one, true),
            ),
            (
                Frame::Oversized {
                    bytes: at_eof.len(),
                    limit: LIMIT,
                },
                summary_at_once(&at_eof, true),
            ),
        ];
        assert_eq!(got, want, "cuts {cuts:?}");
        // Each shows its id, which comes after the part buffered.
        for (i, id) in [(0, "1"), (2, "\"two\""), (3, "3")] {
            let head =
                String::from_utf8_lossy(want[i].1.as_deref().unwrap_or_default()).into_owned();
            assert!(head.contains(&format!(r#""id":{id}"#)), "{head}");
        }
    }
    // The budget refuses the line past 256 KiB. Its id comes first: the summary is that of
    // the bytes read, yielded at once. Its id comes last (what was read shows no id, reported
    // only were it yielded then): the rest of the line is read into its envelope, and the
    // summary is that of the whole line, its id shown (JSON-RPC 2.0 §5: a request is
    // answered), yielded at its end.
    let id_first = {
        let mut line = br#"{"id":5,"#.to_vec();
        line.extend_from_slice(mid.get(1..).unwrap());
        line
    };
    for cuts in [vec![], vec![1000], vec![7, 65_536, 333]] {
        for (line, whole) in [(&id_first, false), (&mid, true)] {
            let input = [line.as_slice(), b"\n{\"a\":1}\n"].concat();
            let mut r = LineReader::new(Chunked::cut(&input, &cuts));
            r.set_max_message_size(1 << 20);
            r.set_message_budget(MessageBudget::new(256 * 1024));
            let got = frames_and_heads(&mut r).await;
            assert_eq!(got.len(), 2, "cuts {cuts:?}: {got:?}");
            let Frame::OverBudget { bytes, .. } = got[0].0 else {
                panic!("cuts {cuts:?}: {:?}", got[0].0);
            };
            assert!(bytes > SCAN_AT_ONCE, "cuts {cuts:?}: refused after {bytes}");
            let want = match whole {
                true => summary_at_once(line, true),
                false => summary_at_once(&line[..bytes], false),
            };
            assert_eq!(got[0].1, want, "cuts {cuts:?}, whole {whole}");
            let head = String::from_utf8_lossy(want.as_deref().unwrap_or_default()).into_owned();
            let id = if whole { r#""id":1"# } else { r#""id":5"# };
            assert!(head.contains(id), "{head}");
            assert_eq!(got[1], (text(r#"{"a":1}"#), None), "cuts {cuts:?}");
        }
    }
    // Its end never comes (the stream ends mid-line): yielded at the end of the stream,
    // read as far as it went.
    let mut r = LineReader::new(Chunked::cut(&mid, &[1000]));
    r.set_max_message_size(1 << 20);
    r.set_message_budget(MessageBudget::new(256 * 1024));
    let got = frames_and_heads(&mut r).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        matches!(got[0].0, Frame::OverBudget { .. }),
        "{:?}",
        got[0].0
    );
    assert_eq!(got[0].1, summary_at_once(&mid, true));
    assert!(r.ended_mid_line());
}

/// `begins_as_json` reads bytes as `jsonrpc::message_start` reads text (whitespace,
/// one byte order mark, then `{` or `[`), for valid UTF-8 and for the valid prefix of bytes
/// that go on invalid.
#[test]
fn begins_as_json_reads_as_message_start_does() {
    for text in [
        "{}",
        "[1]",
        " \t\r\n{",
        "\u{feff}[",
        " \u{feff} {",
        "\u{a0}{",
        "\u{2028}\u{feff}\u{3000}[",
        "\u{feff}\u{feff}{",
        "x{",
        "",
        "   ",
        "\u{feff}",
        "\"s\"",
        "1",
    ] {
        let start = crate::jsonrpc::message_start(text);
        let expected = start.starts_with('{') || start.starts_with('[');
        assert_eq!(begins_as_json(text.as_bytes()), expected, "{text:?}");
        // A tail that is no UTF-8 changes nothing once the message has begun, and nothing
        // before it: the decision is the valid prefix's.
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(b"\xff\xfe{");
        assert_eq!(begins_as_json(&bytes), expected, "{text:?} + invalid tail");
    }
    // Bytes no UTF-8 before the message begins: no message.
    assert!(!begins_as_json(b" \xff{"));
    // A character cut by the end of the bytes: no message.
    assert!(!begins_as_json(b" \xc2"));
}

/// `begins_as_json` reads the bytes only up to where the message would begin (its cost is
/// the leading whitespace), not a whole WebSocket binary frame of up to 16 MiB in one
/// poll: every byte after the first one past the lead is left unread.
#[test]
fn begins_as_json_reads_no_byte_past_the_lead() {
    for (lead, first) in [("", b'{'), ("  \u{feff}\u{a0}\t", b'['), (" ", b'x')] {
        let mut bytes = lead.as_bytes().to_vec();
        bytes.push(first);
        bytes.extend(std::iter::repeat_n(0xff, 1 << 16));
        let mut read = 0_usize;
        let began = begins_as_json_from(bytes.iter().copied().inspect(|_| read += 1));
        assert_eq!(began, first != b'x', "{lead:?}");
        assert_eq!(read, lead.len() + 1, "{lead:?}: bytes read");
    }
}
