use super::*;

fn summary_of(text: &[u8], ended: bool) -> Option<String> {
    let mut e = Envelope::new();
    e.feed(text);
    e.summary(ended)
        .map(|s| String::from_utf8_lossy(&s).into_owned())
}

/// The members that say which request a message is or answers are found wherever they
/// are, past any amount of params, at the top level only, their names unescaped.
#[test]
fn the_envelope_members_are_found_anywhere_at_the_top_level() {
    let pad = "x".repeat(100_000);
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"id":1,"s":"\"id\":2","a":[{{"method":3}}],"p":"{pad}"}},"id":11}}"#
    );
    assert_eq!(
        summary_of(text.as_bytes(), true).as_deref(),
        Some(r#"{"jsonrpc":"2.0","id":11,"method":"tools/call"}"#)
    );
    let text = format!(r#"{{"result":{{"pad":"{pad}"}},"i\u0064" : "a\"b" }}"#);
    assert_eq!(
        summary_of(text.as_bytes(), true).as_deref(),
        Some(r#"{"id":"a\"b","result":0}"#)
    );
    // A notification: no id anywhere.
    let text = format!(r#"{{"method":"n","params":["{pad}"]}}"#);
    assert_eq!(
        summary_of(text.as_bytes(), true).as_deref(),
        Some(r#"{"method":"n"}"#)
    );
    // The last of a member named twice (a second `id` written, as `null`, so the summary
    // still shows two); a value too long to be an id is none.
    let long = "y".repeat(MAX_VALUE_BYTES);
    let text = format!(r#"{{"id":1,"error":{{}},"id":"{long}"}}"#);
    assert_eq!(
        summary_of(text.as_bytes(), true).as_deref(),
        Some(r#"{"id":null,"id":null,"result":0}"#)
    );
    let text = r#"{"jsonrpc":"2.0","id":1,"method":"m","id":2}"#;
    assert_eq!(
        summary_of(text.as_bytes(), true).as_deref(),
        Some(r#"{"jsonrpc":"2.0","id":null,"id":2,"method":"m"}"#)
    );
}

/// What is cut is written last, cut as it was; an object not ended is not closed.
#[test]
fn a_cut_member_is_written_last_and_cut() {
    assert_eq!(
        summary_of(br#"{"id":7,"method":"m","params":{"a":"#, false).as_deref(),
        Some(r#"{"id":7,"method":"m","#)
    );
    assert_eq!(
        summary_of(br#"{"method":"m","id":12"#, false).as_deref(),
        Some(r#"{"method":"m","id":12"#)
    );
    assert_eq!(
        summary_of(br#"{"id":7,"result":{"x":"#, false).as_deref(),
        Some(r#"{"id":7,"result":["#)
    );
    let long = "y".repeat(MAX_VALUE_BYTES + 10);
    assert_eq!(
        summary_of(format!(r#"{{"method":"m","id":"{long}"#).as_bytes(), false).as_deref(),
        Some(r#"{"method":"m","id":""#)
    );
}

/// Not an object: nothing summarised (the caller keeps the first bytes); bytes that are
/// no UTF-8 anywhere: one byte that is none; a syntax error at the top level stops the read.
#[test]
fn what_is_no_object_no_text_or_broken_reads_as_it_would() {
    assert_eq!(summary_of(br#"[{"id":1,"method":"m"}]"#, true), None);
    assert_eq!(summary_of(b"junk", true), None);
    assert_eq!(summary_of(b"  \t", true), None);
    let mut bad = br#"{"id":1,"method":"m","p":""#.to_vec();
    bad.extend_from_slice(&[b'x'; 5000]);
    bad.extend_from_slice(b"\xc3\x28\"}");
    assert_eq!(summary_of(&bad, true).as_deref(), Some("\u{fffd}"));
    // A character cut at the end of a line that ended is none either; cut, it may go on.
    assert_eq!(
        summary_of(b"{\"id\":1,\"p\":\"\xc3", true).as_deref(),
        Some("\u{fffd}")
    );
    assert!(summary_of(b"{\"id\":1,\"p\":\"\xc3", false).is_some_and(|s| s.contains("\"id\":1")));
    assert_eq!(
        summary_of(br#"{"id":1 "method":"m"}"#, true).as_deref(),
        Some(r#"{"#)
    );
    assert_eq!(
        summary_of(br#"{"a":1 2,"id":3}"#, true).as_deref(),
        Some(r#"{"#)
    );
    assert_eq!(
        summary_of(b"\xef\xbb\xbf {\"id\":4}", true).as_deref(),
        Some(r#"{"id":4}"#)
    );
    // What a parser refuses at the top level stops the read there, the object unclosed.
    for (text, summary) in [
        (r#"{"id":1,"method":"m"} x"#, r#"{"id":1,"method":"m"}"#),
        (r#"{"id":1,"method":"m"}  "#, r#"{"id":1,"method":"m"}"#),
        (r#"{"id":12"x","method":"m"}"#, r#"{"#),
        (r#"{"a":"x""y","id":1}"#, r#"{"#),
        (r#"{"a":{}[],"id":1}"#, r#"{"#),
        (r#"{"id":,"method":"m"}"#, r#"{"#),
        (r#"{"id":1,}"#, r#"{"id":1,"#),
    ] {
        let got = summary_of(text.as_bytes(), true);
        let want = if text.ends_with("} x") {
            // Closed, then junk: the members stand, the object no longer reads whole.
            Some(r#"{"id":1,"method":"m","#.to_owned())
        } else {
            Some(summary.to_owned())
        };
        assert_eq!(got, want, "{text}");
    }
}

/// Fed in pieces split at every byte boundary (and a byte at a time), the summary is the
/// one of the whole text: nothing depends on where the reads fell.
#[test]
fn the_summary_does_not_depend_on_where_the_pieces_split() {
    let texts: [&[u8]; 8] = [
        br#"{"id":1,"method":"m"} x"#,
        br#"{"a":"x""y","id":1}"#,
        "{\"jsonrpc\":\"2.0\",\"i\\u0064\":\"é\\\"x\",\"method\":\"m\",\"params\":{\"id\":[1,{\"a\":\"}\"}]}}"
            .as_bytes(),
        br#"{ "result" : [ "a\\", {"b":"]"} ] , "id" : -12.5e3 }"#,
        "\u{feff}{\"id\":\"日本\",\"error\":{}}".as_bytes(),
        b"{\"id\":1,\"p\":\"\xe6\x97\xa5\xff\"}",
        br#"{"method":"m","id":1"#,
        br#"{"a":1 2,"id":3}"#,
    ];
    for text in texts {
        for ended in [true, false] {
            let whole = summary_of(text, ended);
            for cut in 0..=text.len() {
                let (a, b) = text.split_at(cut);
                let mut e = Envelope::new();
                e.feed(a);
                e.feed(b);
                let got = e
                    .summary(ended)
                    .map(|s| String::from_utf8_lossy(&s).into_owned());
                assert_eq!(
                    got,
                    whole,
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(text)
                );
            }
            let mut e = Envelope::new();
            for b in text {
                e.feed(std::slice::from_ref(b));
            }
            let got = e
                .summary(ended)
                .map(|s| String::from_utf8_lossy(&s).into_owned());
            assert_eq!(
                got,
                whole,
                "{:?} byte by byte",
                String::from_utf8_lossy(text)
            );
        }
    }
}

/// A request's id is named without doubt only with `"jsonrpc": "2.0"`, a `method` and one
/// `id` member whose value ended, all at the top level; a `jsonrpc` member is never
/// summarised, even cut.
#[test]
fn a_sole_request_id_needs_the_version_a_method_and_one_ended_id() {
    let sole = |text: &str| {
        let mut e = Envelope::new();
        e.feed(text.as_bytes());
        e.sole_request_id()
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(
        sole(r#"{"jsonrpc":"2.0","id":"a","method":"m","#).as_deref(),
        Some(r#""a""#)
    );
    assert_eq!(
        sole(r#"{"method":"m","j\u0073onrpc":"\u0032.0","id":7}"#).as_deref(),
        Some("7")
    );
    for text in [
        r#"{"jsonrpc":"2.0","method":"m","id":7"#,
        r#"{"jsonrpc":"2.0","id":7,"id":7,"method":"m","#,
        r#"{"jsonrpc":"2.0","id":7,"#,
        r#"{"jsonrpc":"1.0","id":7,"method":"m","#,
        r#"{"id":7,"method":"m","#,
        r#"{"jsonrpc":"2.0","params":{"id":7},"method":"m","#,
        r#"{"jsonrpc":"2.0","x":"\"id\":7,","method":"m","#,
    ] {
        assert_eq!(sole(text), None, "{text}");
    }
    assert_eq!(
        summary_of(br#"{"id":1,"jsonrpc":"2."#, false).as_deref(),
        Some(r#"{"id":1,"#)
    );
}

/// A batch's object entries are read one at a time, in order, whatever is between them
/// (scalars, strings holding brackets and commas, nested arrays); the read stops at the
/// array's end, at its text's end (the cut entry handed over, not ended), or at a syntax
/// error between entries.
#[test]
fn a_batchs_object_entries_are_read_in_order() {
    let entries = |text: &str| {
        let mut seen = Vec::new();
        batch_entries(text.as_bytes(), |e, ended| {
            let s = e.summary(ended).unwrap_or_default();
            seen.push((String::from_utf8_lossy(&s).into_owned(), ended));
        });
        seen
    };
    let got = entries(
        r#" [1, "a,]}", [2,{"id":9}], {"id":1,"result":[]} ,null,{"method":"m","id":"x"},{"id":3,"res"#,
    );
    let want = [
        (r#"{"id":1,"result":0}"#, true),
        (r#"{"id":"x","method":"m"}"#, true),
        (r#"{"id":3,"#, false),
    ];
    let want: Vec<(String, bool)> = want.iter().map(|(s, e)| (s.to_string(), *e)).collect();
    assert_eq!(got, want);
    assert_eq!(entries(r#"[{"id":1} {"id":2}]"#).len(), 1);
    assert_eq!(entries(r#"[{"id":1},]"#).len(), 1);
    assert_eq!(entries(r#"{"id":1}"#).len(), 0);
    assert_eq!(entries(r#"[{"id":1,x},{"id":2}]"#).len(), 1);
    assert_eq!(entries("[]").len(), 0);
    assert_eq!(entries(r#"[],{"id":1}"#).len(), 0);
}

/// A lenient envelope reads past bytes that are no UTF-8; its summary tells a request's id
/// only when told before the first of them (`bad_at`), else it shows a second `id`.
#[test]
fn a_lenient_envelope_tells_a_requests_id_only_before_the_bad_byte() {
    let lenient = |text: &[u8], bad_at: usize, pieces: usize| {
        let mut e = Envelope::lenient(bad_at);
        for piece in text.chunks(pieces) {
            e.feed(piece);
        }
        String::from_utf8_lossy(&e.summary(true).unwrap_or_default()).into_owned()
    };
    let before = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"caf\xe9\"}";
    let after = b"{\"jsonrpc\":\"2.0\",\"method\":\"caf\xe9\",\"id\":1}";
    for pieces in [1, 3, 64] {
        assert_eq!(
            lenient(before, 37, pieces),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"caf\u{fffd}\"}"
        );
        assert_eq!(
            lenient(after, 30, pieces),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"id\":1,\"method\":\"caf\u{fffd}\"}"
        );
        assert_eq!(
            lenient(before, 0, pieces),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"id\":1,\"method\":\"caf\u{fffd}\"}"
        );
    }
}

/// A refused batch keeps the summaries of its responses only (an outcome, or an id and no
/// method), as a JSON array, whatever the pieces it is fed in, led by the
/// `NOT_ONLY_RESPONSES` mark when it held anything else or was not read to its end; non-object entries, strings
/// holding brackets and nested arrays are skipped; a syntax error between entries ends the
/// read; the summaries kept stay within their bound.
#[test]
fn a_batchs_responses_are_kept_in_bounded_memory() {
    use super::batch::{BatchSighted, MAX_BATCH_SUMMARY_BYTES};
    let kept = |text: &[u8], piece: usize| {
        let mut b = BatchSighted::default();
        for p in text.chunks(piece) {
            b.feed(p);
        }
        b.summary()
            .map(|s| String::from_utf8_lossy(&s).into_owned())
    };
    let text = br#" [1, "a,]}", [2,{"id":9}], {"id":1,"result":[{"x":"]"}]}, {"method":"m","id":2}, {"id":3}, null, {"error":{},"id":"e"} , {"id":4,"res"#;
    for piece in [1, 2, 7, text.len()] {
        assert_eq!(
            kept(text, piece).as_deref(),
            Some(
                r#"["not only responses",{"id":1,"result":0},{"id":3},{"id":"e","result":0},{"id":4,]"#
            ),
            "pieces of {piece}"
        );
    }
    assert_eq!(
        kept(br#"[{"id":1,"result":0} x {"id":2,"result":0}]"#, 3).as_deref(),
        Some(r#"["not only responses",{"id":1,"result":0}]"#)
    );
    assert_eq!(kept(br#"{"id":1,"result":0}"#, 5), None);
    assert_eq!(kept(br#"[{"method":"m","id":1}]"#, 5), None);
    let many = format!("[{}0]", r#"{"id":123456,"result":0},"#.repeat(10_000));
    let got = kept(many.as_bytes(), 4096).unwrap_or_default();
    let mark = super::batch::UNKEPT.len() + super::batch::NOT_ONLY_RESPONSES.len() + 2;
    assert!(
        got.len() <= MAX_BATCH_SUMMARY_BYTES + 1 + mark,
        "{}",
        got.len()
    );
    assert!(got.len() > MAX_BATCH_SUMMARY_BYTES / 2, "{}", got.len());
    // Some found no room: the summary says so first, and reads as no response.
    assert!(super::batch::unkept(got.as_bytes()), "{}", &got[..40]);
    let kept_all = kept(br#"[{"id":1,"result":0}]"#, 3).unwrap_or_default();
    assert!(!super::batch::unkept(kept_all.as_bytes()));
    let mut named = 0;
    super::batch_entries(got.as_bytes(), |e, _| {
        named += usize::from(e.id_members() == 1);
    });
    assert!(named > 1000, "{named}");
}

/// The one structural scanner ([`value_extent`]) against serde_json: wherever serde_json
/// reads one whole value from the start of the bytes, the scanner ends where it does (but
/// for a scalar that runs to the end of the bytes, which may go on past them), and never
/// past its bound; on anything else (hostile bytes: unterminated strings, stray escapes,
/// bytes that are no UTF-8, brackets that do not pair) it ends, within its bound.
mod extent {
    use super::value_extent;
    use proptest::prelude::*;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    /// Where serde_json's first value read from `bytes` ends, if it reads one whole.
    fn serde_end(bytes: &[u8]) -> Option<usize> {
        let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<IgnoredAny>();
        match values.next() {
            Some(Ok(_)) => Some(values.byte_offset()),
            _ => None,
        }
    }

    fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
        let got = value_extent(bytes, usize::MAX);
        prop_assert!(got.is_none_or(|end| end <= bytes.len()));
        for max in [0, bytes.len() / 2, bytes.len().saturating_sub(1)] {
            let bounded = value_extent(bytes, max);
            prop_assert!(bounded.is_none_or(|end| end <= max), "{max}: {bounded:?}");
            prop_assert!(bounded.is_none() || bounded == got);
        }
        if let Some(end) = serde_end(bytes) {
            let last = end.checked_sub(1).and_then(|i| bytes.get(i));
            if end == bytes.len() && !matches!(last, Some(b'"' | b']' | b'}')) {
                prop_assert_eq!(got, None, "a scalar to the end may go on");
            } else {
                prop_assert_eq!(got, Some(end));
            }
        }
        Ok(())
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\"\\\\{}\\[\\], :]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Bytes a hostile peer writes around and inside values: structure, quotes and
    /// escapes, scalars' letters and digits, whitespace, and bytes that are no UTF-8.
    fn hostile() -> impl Strategy<Value = Vec<u8>> {
        let byte =
            prop::sample::select(b"[]{}\",:\\ \t\r\n0123456789-+.eEtrufalsn\xff\xc3\x80u".to_vec());
        prop::collection::vec(byte, 0..48)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_value_followed_by_anything_ends_where_serde_json_ends_it(
            space in "[ \t\r\n]{0,3}",
            value in json(),
            pretty in any::<bool>(),
            tail in hostile(),
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            };
            let mut bytes = space.into_bytes();
            bytes.extend_from_slice(text.unwrap_or_default().as_bytes());
            bytes.extend_from_slice(&tail);
            check(&bytes)?;
        }

        #[test]
        fn hostile_bytes_end_within_the_bound(bytes in hostile()) {
            check(&bytes)?;
        }
    }

    /// Nesting far past serde_json's 128 levels is followed in constant memory: a closed
    /// one ends after its last bracket, an unclosed one (or one cut by the bound) nowhere.
    #[test]
    fn deep_nesting_is_followed_to_its_end() {
        let n = 100_000;
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(value_extent(deep.as_bytes(), usize::MAX), Some(2 * n));
        assert_eq!(value_extent(deep.as_bytes(), 2 * n - 1), None);
        assert_eq!(
            value_extent(&deep.as_bytes()[..2 * n - 1], usize::MAX),
            None
        );
        // Brackets inside strings are no nesting: `n` arrays opened, one closed.
        let strings = format!("{}1]", "[\"]\",".repeat(n));
        assert_eq!(value_extent(strings.as_bytes(), usize::MAX), None);
        assert_eq!(value_extent(b"\"\\\"\\\\\"x", usize::MAX), Some(6));
        assert_eq!(value_extent(b"\"unterminated \\\"", usize::MAX), None);
        assert_eq!(
            value_extent(b"  ,1", usize::MAX),
            Some(2),
            "no value: its start"
        );
        assert_eq!(value_extent(b"\xff\xfe,", usize::MAX), Some(2));
    }
}

/// Several objects separated by JSON whitespace on one line: the summary of each after the
/// first (request or response), fed in any pieces; anything else between them (a comma, a
/// byte order mark, a scalar) ends the read (RFC 8259 §2: no separator); one object alone,
/// or an array, gives none.
#[test]
fn several_objects_on_a_line_are_each_summarised_after_the_first() {
    let read = |text: &str, step: usize| {
        let mut s = batch::BatchSighted::several();
        for piece in text.as_bytes().chunks(step) {
            s.feed(piece);
        }
        let (pieces, unkept, _) = s.several_pieces(true);
        let pieces: Vec<String> = pieces
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        (pieces, unkept)
    };
    let line = r#" {"id":1,"result":"x"} {"jsonrpc":"2.0","id":2,"method":"m","params":[1]}	{"id":3,"error":{}}"#;
    for step in [1, 3, line.len()] {
        assert_eq!(
            read(line, step),
            (
                vec![
                    r#"{"jsonrpc":"2.0","id":2,"method":"m"}"#.to_owned(),
                    r#"{"id":3,"result":0}"#.to_owned()
                ],
                false
            ),
            "{step}"
        );
    }
    for none in [
        r#"{"id":1,"result":1}"#,
        r#"{"id":1,"result":1},{"id":2,"result":1}"#,
        "{\"id\":1,\"result\":1} \u{feff}{\"id\":2,\"result\":1}",
        r#"{"id":1,"result":1} 5 {"id":2,"result":1}"#,
        r#"[{"id":1,"result":1}] {"id":2,"result":1}"#,
        // One line only: what follows a newline is the next line's (a WebSocket frame's
        // lines, a budget's stream), not read here.
        "{\"id\":1,\"result\":1}\r\n{\"id\":2,\"result\":1}",
    ] {
        assert_eq!(read(none, 7), (vec![], false), "{none}");
    }
    // Past the summaries' room the rest is told as not kept (each still read by its
    // envelope, for a policy among them: below).
    let many: String = (0..100_000).map(|i| format!("{{\"id\":{i}}} ")).collect();
    let (pieces, unkept) = read(&many, 4096);
    assert!(unkept && pieces.len() < 100_000, "{}", pieces.len());
    // Cut by the end of what was fed: the last one as cut.
    let (pieces, _) = read(r#"{"id":1,"result":1} {"id":2,"result":"xx"#, 4);
    assert_eq!(pieces, vec![r#"{"id":2,"result":["#.to_owned()]);
    // A line that did not end (refused by the budget part read): what follows the cut may
    // hold more, so it is told as not kept once past the first object, never within it.
    let cut = |text: &str| {
        let mut s = batch::BatchSighted::several();
        s.feed(text.as_bytes());
        s.several_pieces(false).1
    };
    assert!(cut(r#"{"id":1,"result":1} {"id":2,"res"#));
    assert!(cut(r#"{"id":1,"result":1} "#));
    assert!(
        !cut(r#"{"id":1,"result":"#),
        "within the first: the line's own envelope"
    );
    // Cut right after the first object: the line goes on unseen, so more may follow.
    assert!(cut(r#"{"id":1,"result":1}"#));
}

/// A batch of responses only, read to its `]`, is owed nothing (JSON-RPC 2.0 §5, §6); any
/// other entry, or an array not read to its end, makes it one that may ask. A batch's
/// summary says so (`NOT_ONLY_RESPONSES`), so read again it tells what the batch did.
#[test]
fn a_batch_of_responses_only_is_told_and_its_summary_tells_it_again() {
    let r = r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1]}}"#;
    let e = r#"{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"]"}}"#;
    for yes in [format!("[{r}]"), format!(" [ {r} , {e} ] ")] {
        assert!(batch::responses_only(yes.as_bytes()), "{yes}");
    }
    for no in [
        "[]".to_owned(),
        format!("[{r},1]"),
        format!("[{r},{{\"id\":3}}]"),
        format!("[{r},{{\"id\":3,\"method\":\"m\"}}]"),
        format!("[{r},{{\"method\":\"m\"}}]"),
        format!("[{r},"),
        format!("[{r}"),
        r.to_owned(),
    ] {
        assert!(!batch::responses_only(no.as_bytes()), "{no}");
    }
    let summary = |text: &str| {
        let mut s = batch::BatchSighted::default();
        s.feed(text.as_bytes());
        s.summary().unwrap_or_default()
    };
    assert!(batch::responses_only(&summary(&format!("[{r},{e}]"))));
    assert!(!batch::responses_only(&summary(&format!(
        "[{r},{{\"id\":3,\"method\":\"m\"}}]"
    ))));
    assert!(!batch::responses_only(&summary(&format!("[{r},{e}"))));
}

/// §6.7, §6.4: a policy message past the room for summaries (of a batch's entries, or of
/// the messages of a line of several) is still told, in its stronger form, its method read
/// as a parser reads it (escaped or not): in a batch's summary as a last entry
/// (`{"id":null,"method":...}` for a Request), on a line by its mark.
#[test]
fn s6_7_a_policy_past_the_room_for_summaries_is_told() {
    use crate::jsonrpc::head::{Head, POLICY};
    use crate::policy::Form;
    let filler: Vec<String> = (0..3000)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#))
        .collect();
    let request = r#"{"jsonrpc":"2.0","id":"n","method":"featureSets\/update","params":{}}"#;
    let note = r#"{"jsonrpc":"2.0","method":"featureSets\u002fupdate","params":{}}"#;
    for (policy, form) in [
        (request, Form::Request),
        (note, Form::Notification),
        (&*format!("{note} {request}"), Form::Request),
    ] {
        let batch = format!("[{},{}]", filler.join(","), policy.replace(' ', ","));
        let mut sighted = batch::BatchSighted::default();
        sighted.feed(batch.as_bytes());
        let summary = sighted.summary().unwrap_or_default();
        assert!(batch::unkept(&summary));
        let last = summary.rsplit(|&b| b == b'{').next().unwrap_or_default();
        let entry = [b"{".as_slice(), last.strip_suffix(b"]").unwrap_or(last)].concat();
        let head = Head::read(&entry);
        assert_eq!(head.method_name.as_deref(), Some(POLICY), "{policy}");
        assert_eq!(
            matches!(head.id, crate::jsonrpc::head::IdSeen::Absent),
            form == Form::Notification,
            "{policy}"
        );
        let line = format!("{} {policy}", filler.join(" "));
        let mut sighted = batch::BatchSighted::several();
        sighted.feed(line.as_bytes());
        let (pieces, unkept, told) = sighted.several_pieces(true);
        assert!(unkept && pieces.len() < filler.len(), "{policy}");
        assert_eq!(told, Some(form), "{policy}");
        assert_eq!(batch::policy_not_kept(batch::policy_mark(form)), Some(form));
    }
    // None told when none was there.
    let line = filler.join(" ");
    let mut sighted = batch::BatchSighted::several();
    sighted.feed(line.as_bytes());
    assert_eq!(sighted.several_pieces(true).2, None);
}
