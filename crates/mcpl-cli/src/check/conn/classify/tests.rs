//! Tests of the pump's reading of received texts (`classify`).

use super::*;

/// The mark of a policy not kept (a string piece) is no message on the line.
#[test]
fn the_mark_of_a_policy_not_kept_is_no_message_on_the_line() {
    let rest = [b"{}".to_vec(), b"\"policy request not kept\"".to_vec()];
    let said = on_the_line("refused".into(), &rest);
    assert!(said.contains("the line held 2 messages"), "{said}");
    assert_eq!(on_the_line("refused".into(), &[]), "refused");
}

/// What a line transport keeps of a text it discards whole for its size: its envelope
/// summary ([`Envelope::summary`], bounded); for a text that is no object, its first
/// bytes ([`mcpl::transport::FrameReader::discarded_head`]).
///
/// [`Envelope::summary`]: mcpl::transport::envelope::Envelope::summary
fn envelope_of(text: &str) -> Option<Vec<u8>> {
    let mut envelope = mcpl::transport::envelope::Envelope::new();
    envelope.feed(text.as_bytes());
    envelope.summary(true).or_else(|| {
        let head = text.as_bytes();
        let kept = head.len().min(mcpl::transport::DISCARDED_HEAD_BYTES);
        Some(head.get(..kept).unwrap_or(head).to_vec())
    })
}

/// JSON-RPC 2.0 §5.1, as the library's peer reads a text that does not parse: a request
/// whose id was told before the error is answered `-32700` under it; one whose id is
/// `null`, cut by the error, doubled past it, or no request at all, under id null; one
/// nested past the parser `-32600` from its envelope; a response, or a line that does
/// not begin as a message, never.
#[test]
fn a_text_that_does_not_parse_is_answered_as_the_library_answers_it() {
    let refused = |text: &str| {
        let e = serde_json::from_str::<Value>(text).unwrap_err();
        match refusal(text, &e) {
            Some(Event::Refused { id, error, .. }) => Some((id, error.code)),
            _ => None,
        }
    };
    let parse = mcpl::jsonrpc::codes::PARSE_ERROR;
    let invalid = mcpl::jsonrpc::codes::INVALID_REQUEST;
    let deep = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0",{id}"method":"x","params":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        )
    };
    for (text, want) in [
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":}}"#.to_owned(),
            Some((Some(7_i64.into()), parse)),
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"x","params":{"#.to_owned(),
            Some((None, parse)),
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":},"id":8}"#.to_owned(),
            Some((None, parse)),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"x","params":{"a":},"id":7}"#.to_owned(),
            Some((None, parse)),
        ),
        (
            r#"{"id":7,"method":"x","params":{"a":}}"#.to_owned(),
            Some((None, parse)),
        ),
        ("{oops".to_owned(), Some((None, parse))),
        ("[1,".to_owned(), Some((None, parse))),
        // A batch nested past the parser: one `-32700` under id null, as the peer and
        // `ParseError::answer` answer it.
        (
            format!("[{}{}]", "[".repeat(200), "]".repeat(200)),
            Some((None, parse)),
        ),
        (deep(r#""id":8,"#), Some((Some(8_i64.into()), invalid))),
        (deep(r#""id":null,"#), Some((None, invalid))),
        // Two ids: which request it is cannot be told (`jsonrpc::doubled::DOUBLED_ID`),
        // as the peer and `refused_request_id` read it: under id null.
        (deep(r#""id":7,"id":8,"#), Some((None, invalid))),
        (deep(""), None),
        // An object with no `method` nested past the parser: read as the peer reads
        // it (a response), never answered.
        (
            format!(
                r#"{{"jsonrpc":"2.0","x":{}{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"result":{"a":}}"#.to_owned(),
            None,
        ),
        ("not json".to_owned(), None),
    ] {
        assert_eq!(refused(&text), want, "{text}");
    }
}

/// A frame that is no text is answered as the library's peer answers it
/// (`Discarded::not_text`): from the envelope summary the transport keeps of it (read
/// past the bytes of another encoding, here by the library's own envelope), a response
/// is never answered, its summary cut short or not (a line ending inside its `id`);
/// a request is answered `-32700` under its id, or under id null; junk that does not
/// begin as a message never. Before, a summary cut short did not read as an object,
/// so `mcpl check` answered a response `-32700` where the peer stays silent.
#[test]
fn a_frame_that_is_no_text_is_answered_as_the_library_answers_it() {
    // `~` stands for a byte that is no UTF-8.
    let answered = |line: &str| {
        let line: Vec<u8> = line
            .bytes()
            .map(|b| if b == b'~' { 0xff } else { b })
            .collect();
        let line = line.as_slice();
        let bad = line.iter().position(|b| *b >= 0x80).unwrap_or(line.len());
        let mut envelope = mcpl::transport::envelope::Envelope::lenient(bad);
        envelope.feed(line);
        let summary = envelope.summary(true);
        let began = line.first() == Some(&b'{');
        match not_text_refusal("no UTF-8", began, summary.as_deref()) {
            Some(Event::Refused { id, error, .. }) => Some((id, error.code)),
            _ => None,
        }
    };
    let parse = mcpl::jsonrpc::codes::PARSE_ERROR;
    for (line, want) in [
        (r#"{"jsonrpc":"2.0","x":"~","result":1,"id":"ab"#, None),
        (
            r#"{"jsonrpc":"2.0","x":"~","error":{"code":1},"id":1"#,
            None,
        ),
        (r#"{"jsonrpc":"2.0","id":"a","result":["~"]}"#, None),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"m","params":["~"]}"#,
            Some((Some(9_i64.into()), parse)),
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"m","params":["~"]}"#,
            Some((None, parse)),
        ),
        ("~~ not a message", None),
    ] {
        assert_eq!(answered(line), want, "{line}");
    }
}

/// A message the checker discarded unread is answered as the library's peer answers it
/// (`peer::refused`, one rule: `jsonrpc::discarded_refusal`), from its envelope summary:
/// a request naming `id` twice under id null, as the peer refuses it (which request it
/// is cannot be told), not under the last one; a request refused part read whose `id`
/// the cut split (`"id":12` may be `"id":123`) under id null, not left unanswered; a
/// response's id, cut so, names nothing; a notification is not answered.
#[test]
fn a_discarded_message_is_answered_as_the_library_answers_it() {
    let read = |summary: Option<Vec<u8>>| match discard_answer(
        "why".into(),
        summary.as_deref(),
        false,
        None,
    )
    .0
    {
        Event::Unanswerable { id, .. } => Some(Ok(id)),
        Event::Unread { id, .. } => Some(Err(id)),
        _ => None,
    };
    let part = |text: &str| {
        let mut envelope = mcpl::transport::envelope::Envelope::new();
        envelope.feed(text.as_bytes());
        envelope.summary(false)
    };
    let whole = |text: &str| envelope_of(text);
    assert_eq!(
        read(whole(r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"m"}"#)),
        Some(Ok(None))
    );
    assert_eq!(
        read(part(r#"{"jsonrpc":"2.0","method":"m","id":12"#)),
        Some(Ok(None))
    );
    assert_eq!(
        read(part(r#"{"jsonrpc":"2.0","method":"m","id":"ab"#)),
        Some(Ok(None))
    );
    assert_eq!(read(part(r#"{"jsonrpc":"2.0","result":1,"id":12"#)), None);
    assert_eq!(
        read(part(r#"{"jsonrpc":"2.0","id":12,"result":["#)),
        Some(Err(12_i64.into()))
    );
    assert_eq!(
        read(part(r#"{"jsonrpc":"2.0","method":"m","params":["#)),
        None
    );
    assert_eq!(read(whole(r#"{"jsonrpc":"2.0","method":"m"}"#)), None);
}

/// The messages after the first on a discarded line (their summaries) are answered each
/// as the library's peer answers them (`Discarded::rest_refused`): by the line's rule a
/// request under its id, an answer to ours ending its wait, a notification not at all;
/// for a line that is no text whatever does not parse `-32700`; the mark of summaries not kept ends
/// the awaited wait and is answered under id null; past the bound, one refusal under
/// id null, an answer to ours there still ending its wait.
#[test]
fn the_other_messages_of_a_discarded_line_are_answered_as_the_peer_answers_them() {
    let summary = |text: &str| envelope_of(text).unwrap_or_default();
    let request = summary(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#);
    let response = summary(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
    let note = summary(r#"{"jsonrpc":"2.0","method":"n"}"#);
    let rest = vec![request.clone(), response.clone(), note.clone()];
    let got = rest_answers("why", &rest, None);
    assert!(
        matches!(&got[..], [
        Event::Unanswerable { id: Some(a), .. },
        Event::Unread { id: b, .. },
    ] if *a == 4_i64.into() && *b == 5_i64.into()),
        "{got:?}"
    );
    // No text: what does not parse is answered `-32700` (under id null when it has
    // none, a notification too: JSON-RPC 2.0 §5.1), a response never.
    let got = rest_answers("why", &rest, Some("no UTF-8"));
    assert!(
        matches!(&got[..], [
        Event::Refused { id: Some(a), error, .. },
        Event::Unread { id: b, .. },
        Event::Refused { id: None, .. },
    ] if *a == 4_i64.into() && *b == 5_i64.into()
        && error.code == mcpl::jsonrpc::codes::PARSE_ERROR),
        "{got:?}"
    );
    let unkept = br#""responses not kept""#.to_vec();
    let got = rest_answers("why", &[note.clone(), unkept.clone()], None);
    assert!(
        matches!(
            &got[..],
            [
                Event::UnreadSome { .. },
                Event::Unanswerable { id: None, .. },
            ]
        ),
        "{got:?}"
    );
    // The mark of a policy among the messages not kept (§6.7) is no mark of summaries
    // not kept, nor a message: nothing more is owed for it (the peer's one reading).
    let policy = br#""policy request not kept""#.to_vec();
    let got = rest_answers("why", &[note.clone(), policy, unkept], None);
    assert!(
        matches!(
            &got[..],
            [
                Event::UnreadSome { .. },
                Event::Unanswerable { id: None, .. },
            ]
        ),
        "{got:?}"
    );
    let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
    let mut many = vec![note; limit - 1];
    many.extend([request, response]);
    let got = rest_answers("why", &many, None);
    assert!(
        matches!(&got[..], [
        Event::Unread { id, .. },
        Event::Unanswerable { id: None, why },
    ] if *id == 5_i64.into() && why.contains("more than 1024 messages")),
        "{got:?}"
    );
}

/// A message after whitespace JSON does not have is refused by the library's peer (RFC
/// 8259 §2): an invalid message here, a request owed `-32700` under its id; after JSON
/// whitespace and a byte order mark it is a frame, the mark said.
#[test]
fn a_message_after_whitespace_json_does_not_have_is_invalid_and_refused() {
    let request = "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"}";
    let read = received(request);
    assert!(!read.json_lead);
    let (event, refused) = classify_received(request, &read, None);
    assert!(matches!(event, Event::Invalid(why) if why.contains("RFC 8259 §2")));
    assert!(matches!(
        refused,
        Some(Event::Refused { id: Some(id), error, .. }) if id == 7_i64.into()
            && error.code == mcpl::jsonrpc::codes::PARSE_ERROR
    ));
    let notification = "\u{2028}{\"jsonrpc\":\"2.0\",\"method\":\"m\"}";
    let (event, refused) = classify_received(notification, &received(notification), None);
    assert!(matches!(event, Event::Invalid(_)) && refused.is_none());
    let marked = " \u{feff}\t{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"} \r";
    let read = received(marked);
    assert!(read.marked && read.json_lead);
    assert!(matches!(
        classify_received(marked, &read, None),
        (Event::Frame(_), None)
    ));
}

/// A line of whitespace JSON does not have is junk, as the library's peer reports it
/// (RFC 8259 §2), not a blank line: only JSON whitespace and a byte order mark are blank.
#[test]
fn a_line_of_unicode_whitespace_is_junk_not_blank() {
    for blank in [" \t\r", "\u{feff} ", ""] {
        assert!(received(blank).blank(), "{blank:?}");
    }
    let line = "\u{a0}\u{2028}";
    let read = received(line);
    assert!(!read.blank());
    assert!(matches!(
        classify_received(line, &read, None),
        (Event::Junk(kept), None) if kept == line
    ));
}

/// A text refused unbuilt for its parsed cost is held whole, and read whole as the
/// library's peer reads it (`Head::then` with the whole-text flag): an object broken
/// before any `method` or outcome (`{"a":[…] x`) is answered `-32600` under id null by
/// the peer (JSON-RPC 2.0 §5), so the checker says it is owed an answer, not a discard;
/// a whole object with no `method` reads as a response, never answered.
#[test]
fn a_costly_text_is_read_whole_as_the_peer_reads_it() {
    let costly = |text: &str| match costly_answer("why".into(), text, None).0 {
        Event::Unanswerable { id, .. } => Some(Ok(id)),
        Event::Unread { id, .. } => Some(Err(id)),
        _ => None,
    };
    let broken = format!(r#"{{"a":[{}0] x"#, "0,".repeat(50));
    assert_eq!(costly(&broken), Some(Ok(None)), "{broken}");
    let whole = format!(r#"{{"a":[{}0]}}"#, "0,".repeat(50));
    assert_eq!(costly(&whole), None, "{whole}");
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":[{}0]}}"#,
        "0,".repeat(50)
    );
    assert_eq!(costly(&request), Some(Ok(Some(3_i64.into()))));
    // An id and neither a `method` nor an outcome (the peer's `AnswerUnlessOurs`): a
    // wait for that id ends on it.
    let bare = format!(
        r#"{{"jsonrpc":"2.0","id":4,"params":[{}0]}}"#,
        "0,".repeat(50)
    );
    assert_eq!(costly(&bare), Some(Err(4_i64.into())), "{bare}");
}

/// JSON-RPC 2.0 §5: a request the checker discarded unread is answered even when its id
/// cannot be used (`null`, a fraction, an object, an id or method name too long to keep,
/// which the summary writes `null`): under id null, as the library's peer answers it.
/// A notification (no `id` member) is not; a response under no usable id answers
/// nothing of the checker's.
#[test]
fn a_discarded_request_under_an_unusable_id_is_answered_under_null() {
    let answered = |text: &str| match discard_answer(
        "why".into(),
        envelope_of(text).as_deref(),
        false,
        None,
    )
    .0
    {
        Event::Unanswerable { id, .. } => Some(id),
        _ => None,
    };
    let long = "m".repeat(2 * mcpl::transport::envelope::MAX_VALUE_BYTES);
    let long_method = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"{long}"}}"#);
    let long_id = format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"x"}}"#);
    for (text, id) in [
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"x","params":{}}"#,
            Some(9_i64.into()),
        ),
        (r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, None),
        // A fractional id is a request's id (JSON-RPC 2.0 §4: a SHOULD NOT), answered under
        // it; a whole value past 64 bits may be a rounded integer, so no id.
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            mcpl::jsonrpc::RequestId::from_request_value(&serde_json::json!(1.5)),
        ),
        (r#"{"jsonrpc":"2.0","id":1e30,"method":"x"}"#, None),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#, None),
        (&long_id, None),
        (&long_method, Some(4_i64.into())),
    ] {
        assert_eq!(answered(text), Some(id), "{text}");
    }
    assert_eq!(answered(r#"{"jsonrpc":"2.0","method":"x"}"#), None);
    let response = r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#;
    assert!(matches!(
        discard_answer("why".into(), envelope_of(response).as_deref(), false, None).0,
        Event::Invalid(_)
    ));
}

/// A frame that is JSON but nested past what a parser takes is an invalid message,
/// reported as such, not "junk (not JSON)"; text that is no JSON stays junk.
#[test]
fn json_nested_too_deep_is_invalid_not_junk() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(
        classify(&deep, None),
        Event::Invalid(why) if why.contains("nested deeper than 128 levels")
    ));
    assert!(matches!(classify("hello", None), Event::Junk(kept) if kept == "hello"));
    assert!(matches!(classify("[[1]]", None), Event::Frame(_)));
}

/// An answer whose id is read before the text nests past the parser (or holds a number
/// out of range) ends the wait for that id at once, named, as the library's peer fails
/// its request (`peer::refused`, whole text): not silence until the deadline.
#[test]
fn an_answer_the_parser_refuses_ends_its_wait_at_once() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(matches!(
        classify(&deep, None),
        Event::Unread { id, why } if id == mcpl::jsonrpc::RequestId::from(1_i64)
            && why.contains("nested deeper than 128 levels")
    ));
    let far = r#"{"jsonrpc":"2.0","id":2,"result":{"x":1e400}}"#;
    assert!(matches!(
        classify(far, None),
        Event::Unread { id, .. } if id == mcpl::jsonrpc::RequestId::from(2_i64)
    ));
    // A request so refused is answered by `refusal`, not read as an answer.
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(matches!(classify(&request, None), Event::Invalid(_)));
}

/// JSON whose number no parser here holds (`1e400`, past a 64-bit float) is JSON all
/// the same (RFC 8259 §6 lets a reader set the range): an invalid message said so, where
/// it read as "junk (not JSON)" (an answer's so: it also ends the wait for its id).
#[test]
fn a_number_out_of_range_is_invalid_not_junk() {
    let text = r#"{"jsonrpc":"2.0","id":7,"result":{},"x":1e400}"#;
    assert!(matches!(
        classify(text, None),
        Event::Unread { why, .. } if why.contains("number out of range")
    ));
    let text = r#"{"jsonrpc":"2.0","method":"m","x":1e400}"#;
    assert!(matches!(
        classify(text, None),
        Event::Invalid(why) if why.contains("number out of range")
    ));
    assert!(matches!(classify("1e400x", None), Event::Junk(_)));
}

/// JSON by RFC 8259's grammar whose string holds an escaped lone surrogate (`"\ud800"`,
/// which §8.2 leaves to the reader and I-JSON, RFC 7493 §2.1, forbids): an invalid
/// message said so, where it read as "junk (not JSON)" (an answer's so: it also ends the
/// wait for its id). A broken escape stays junk.
#[test]
fn a_lone_surrogate_is_invalid_not_junk() {
    for text in [
        r#"{"jsonrpc":"2.0","id":7,"result":{"x":"\ud800"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"x":"a\udc00b"}}"#,
    ] {
        let got = classify(text, None);
        assert!(
            matches!(&got, Event::Unread { why, .. } if why.contains("surrogate")),
            "{text}: {got:?}"
        );
    }
    assert!(matches!(classify(r#"{"x":"\ud80"}"#, None), Event::Junk(_)));
    assert!(matches!(
        classify(r#"{"x":"\ud800\udc00"}"#, None),
        Event::Frame(_)
    ));
}
