//! The log's bounds, pairing and marks.

use super::*;

#[test]
fn the_log_keeps_its_bounds_and_cuts_huge_frames() {
    let mut log = Log::default();
    for i in 0..(MAX_ENTRIES + 50) {
        log.record_frame(
            1,
            Dir::Received,
            SystemTime::now(),
            &format!(r#"{{"jsonrpc":"2.0","method":"x/{i}"}}"#),
        );
    }
    assert_eq!(log.len(), MAX_ENTRIES);
    assert_eq!(log.evicted, 50);
    assert!(log.get(1).is_none());
    assert_eq!(
        log.get(log.last_seq()).and_then(|e| e.method.clone()),
        Some(format!("x/{}", MAX_ENTRIES + 49))
    );
    let huge = format!(
        r#"{{"jsonrpc":"2.0","method":"big","params":{{"s":"{}"}}}}"#,
        "é".repeat(MAX_KEPT_FRAME)
    );
    log.record_frame(1, Dir::Received, SystemTime::now(), &huge);
    let e = log.get(log.last_seq()).unwrap();
    assert!(e.truncated && e.text.len() <= MAX_KEPT_FRAME && e.bytes == huge.len());
    assert_eq!(e.method.as_deref(), Some("big"));
    assert_eq!(e.kind, Kind::Notification);
}

#[test]
fn an_error_answer_marks_the_request_it_refuses() {
    let mut log = Log::default();
    let t = SystemTime::now();
    log.record_frame(
        1,
        Dir::Received,
        t,
        r#"{"jsonrpc":"2.0","id":"p1","method":"push/event","params":{}}"#,
    );
    log.record_frame(
        1,
        Dir::Sent,
        t,
        r#"{"jsonrpc":"2.0","id":"p1","error":{"code":-32002,"message":"Capability denied"}}"#,
    );
    let e = log.get(1).unwrap();
    assert_eq!(e.marks.len(), 1);
    assert_eq!(e.marks[0].rule, "capability_denied");
    let page = log.page(
        None,
        10,
        &Filter {
            marked: true,
            ..Filter::default()
        },
    );
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(1));
}

#[test]
fn pages_go_back_from_before() {
    let mut log = Log::default();
    for i in 0..30 {
        log.record_frame(1, Dir::Sent, SystemTime::now(), &format!("junk {i}"));
    }
    let p = log.page(Some(11), 5, &Filter::default());
    let seqs: Vec<u64> = p["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
    assert_eq!(p["more"], json!(true));
}

/// Ids are kept as compact JSON, whatever the frame wrote; one that is no JSON-RPC id
/// (an array, an object) as its text, cut, never built.
#[test]
fn ids_are_read_as_text() {
    let mut log = Log::default();
    let now = SystemTime::now();
    let info = log.record_frame(1, Dir::Received, now, r#"{"id": 7 ,"method":"m"}"#);
    assert_eq!(info.id.as_deref(), Some("7"));
    let info = log.record_frame(1, Dir::Received, now, r#"{"id":"a\u0062","method":"m"}"#);
    assert_eq!(info.id.as_deref(), Some(r#""ab""#));
    let huge = format!(
        r#"{{"id":[{}],"method":"m"}}"#,
        vec!["{}"; 100_000].join(",")
    );
    let info = log.record_frame(1, Dir::Received, now, &huge);
    assert_eq!(info.kind, Some(Kind::Request));
    let id = info.id.unwrap_or_default();
    assert!(id.starts_with("[{},{}") && id.len() <= MAX_ID, "{id}");
    let info = log.record_frame(1, Dir::Received, now, r#"{"id":null,"method":"m"}"#);
    assert_eq!((info.kind, info.id), (Some(Kind::Notification), None));
}

/// `(rule, entry)` of each mark of entry `seq`.
fn marks_of(log: &Log, seq: u64) -> Vec<(String, Option<usize>)> {
    log.get(seq)
        .map(|e| e.marks.iter().map(|m| (m.rule.clone(), m.entry)).collect())
        .unwrap_or_default()
}

/// A batch of requests the server sent (JSON-RPC 2.0 §6) and the host's batch answer
/// refusing two of them: each refusal marks the received batch, naming its entry; the
/// request it took stays unmarked. Before, a batch's entries were never read: no mark.
#[test]
fn error_answers_in_a_batch_mark_the_entries_of_the_batch_they_answer() {
    let mut log = Log::default();
    let t = SystemTime::now();
    log.record_frame(
        1,
        Dir::Received,
        t,
        r#"[{"jsonrpc":"2.0","id":200,"method":"push/event","params":{}},
            {"jsonrpc":"2.0","id":201,"method":"push/event","params":{"featureSet":"x"}},
            {"jsonrpc":"2.0","method":"notifications/progress"},
            {"jsonrpc":"2.0","id":"s","method":"push/event"}]"#,
    );
    log.record_frame(
        1,
        Dir::Sent,
        t,
        r#"[{"jsonrpc":"2.0","id":200,"result":{}},
            {"jsonrpc":"2.0","id":201,"error":{"code":-32003,"message":"Unknown feature set"}},
            {"jsonrpc":"2.0","id":"s","error":{"code":-32002,"message":"Capability denied"}}]"#,
    );
    assert_eq!(
        marks_of(&log, 1),
        [
            ("unknown_feature_set".to_owned(), Some(1)),
            ("capability_denied".to_owned(), Some(3)),
        ]
    );
    let e = log.get(1).unwrap();
    let methods: Vec<_> = e.units().map(|u| (u.kind, u.method, u.id)).collect();
    assert_eq!(
        methods[2],
        (Kind::Notification, Some("notifications/progress"), None)
    );
    assert!(e
        .units()
        .nth(1)
        .unwrap()
        .text
        .contains(r#""featureSet":"x""#));
    let marked = log.page(
        None,
        10,
        &Filter {
            marked: true,
            ..Filter::default()
        },
    );
    assert_eq!(marked["entries"][0]["seq"], json!(1), "{marked}");
    assert_eq!(
        marked["entries"][0]["marks"][0]["entry"],
        json!(1),
        "{marked}"
    );
    // A mark on a frame says no entry.
    assert!(log.get(2).unwrap().summary()["marks"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Responses inside a received batch are paired with the host's requests one by one: the
/// one answering nothing in flight is a stray, marked on its entry, and a diagnostic about
/// a response (the library's `unknown_response`) lands on that entry too.
#[test]
fn responses_in_a_batch_are_paired_and_diagnosed_by_entry() {
    let mut log = Log::default();
    let t = SystemTime::now();
    log.record_frame(
        1,
        Dir::Sent,
        t,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
    );
    log.record_frame(
        1,
        Dir::Received,
        t,
        r#"[{"jsonrpc":"2.0","id":5,"result":{}},{"jsonrpc":"2.0","id":9,"result":{}}]"#,
    );
    assert_eq!(marks_of(&log, 2), [(STRAY_RESPONSE.to_owned(), Some(1))]);
    let mark = |rule: &str| Mark {
        rule: rule.into(),
        section: "JSON-RPC 2.0",
        detail: String::new(),
        entry: None,
    };
    assert_eq!(
        log.mark_response(1, "9", true, mark("unknown_response")),
        Some((2, Some(1)))
    );
    assert_eq!(
        marks_of(&log, 2),
        [
            (STRAY_RESPONSE.to_owned(), Some(1)),
            ("unknown_response".to_owned(), Some(1)),
        ]
    );
    // A diagnostic about the batch as a whole marks it with no entry.
    assert_eq!(log.mark_batch(1, mark("batch_too_large")), Some((2, None)));
    assert_eq!(
        marks_of(&log, 2).last().unwrap(),
        &("batch_too_large".to_owned(), None)
    );
}

/// A batch of more entries than the peer takes has the heads of the first [`MAX_PARTS`]
/// read, the rest skipped unread; what they hold counts against the log's byte bound.
#[test]
fn a_batch_has_at_most_max_parts_heads_read() {
    let mut log = Log::default();
    let entry = r#"{"jsonrpc":"2.0","method":"m"}"#;
    let batch = format!("[{}]", vec![entry; MAX_PARTS + 500].join(","));
    log.record_frame(1, Dir::Received, SystemTime::now(), &batch);
    let e = log.get(1).unwrap();
    assert_eq!(e.kind, Kind::Batch);
    assert_eq!(e.parts.len(), MAX_PARTS);
    assert!(e.cost() > e.text.len());
    // Not an array after all: junk to the peer, no entries read.
    log.record_frame(1, Dir::Received, SystemTime::now(), "[1, 2");
    assert!(log.get(2).unwrap().parts.is_empty());
}

/// A batch of 100 requests the host refused one by one: each refusal marks its entry, up
/// to [`MAX_BATCH_MARKS`] on the frame (a single frame keeps [`MAX_MARKS`]); what the marks
/// hold counts against the log's byte bound.
#[test]
fn a_batch_keeps_a_mark_per_entry_within_its_bound() {
    let mut log = Log::default();
    let t = SystemTime::now();
    let n = MAX_BATCH_MARKS + 36;
    let requests: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"push/event"}}"#))
        .collect();
    log.record_frame(1, Dir::Received, t, &format!("[{}]", requests.join(",")));
    let before = log.text_bytes;
    let errors: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{"jsonrpc":"2.0","id":{i},"error":{{"code":-32003,"message":"no"}}}}"#)
        })
        .collect();
    log.record_frame(1, Dir::Sent, t, &format!("[{}]", errors.join(",")));
    let marks = marks_of(&log, 1);
    assert_eq!(marks.len(), MAX_BATCH_MARKS);
    // In the order of the answers: the first 64 entries, the later refusals dropped.
    let entries: Vec<usize> = marks.iter().filter_map(|(_, e)| *e).collect();
    assert_eq!(entries, (0..MAX_BATCH_MARKS).collect::<Vec<_>>());
    let sent = log.get(2).unwrap().cost();
    assert!(log.text_bytes > before + sent, "the marks are counted");
}

/// A diagnostic's entry names the frame its mark went on: `"marked": {"seq": N}` (with
/// `"entry"` on a batch entry), `null` when it marked none; frames and notes have no
/// `marked`, and no existing field changed.
#[test]
fn a_diagnostic_entry_names_the_frame_it_marked() {
    let mut log = Log::default();
    let t = SystemTime::now();
    log.record_frame(
        1,
        Dir::Received,
        t,
        r#"{"jsonrpc":"2.0","method":"push/event","params":{}}"#,
    );
    let mark = Mark {
        rule: "invalid_params".into(),
        section: "§9.2",
        detail: "push/event: bad".into(),
        entry: None,
    };
    let marked = log.mark_fresh(|u| u.method == Some("push/event"), mark.clone());
    assert_eq!(marked, Some((1, None)));
    let d = log.record_host(
        1,
        Kind::Diagnostic,
        None,
        "d".into(),
        vec![mark.clone()],
        marked,
    );
    let none = log.record_host(1, Kind::Diagnostic, None, "n".into(), vec![mark], None);
    let note = log.record_host(1, Kind::Note, None, "note".into(), Vec::new(), None);
    let summary = |seq| log.get(seq).unwrap().summary();
    assert_eq!(summary(d)["marked"], json!({ "seq": 1 }));
    assert_eq!(summary(none)["marked"], Value::Null);
    assert!(summary(none).get("marked").is_some());
    assert!(summary(note).get("marked").is_none());
    assert!(summary(1).get("marked").is_none());
    for key in ["seq", "dir", "kind", "marks", "preview"] {
        assert!(summary(d).get(key).is_some(), "{key}");
    }
    // On a batch entry, the entry too.
    log.record_frame(
        1,
        Dir::Received,
        t,
        r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]"#,
    );
    let m = Mark {
        rule: "unexpected_method".into(),
        section: "§4",
        detail: String::new(),
        entry: None,
    };
    let at = log.mark_fresh(|u| u.method == Some("b"), m.clone());
    let seq = log.record_host(1, Kind::Diagnostic, None, "b".into(), vec![m], at);
    assert_eq!(
        log.get(seq).unwrap().summary()["marked"],
        json!({ "seq": 5, "entry": 1 })
    );
}

/// A frame that already carries [`MAX_MARKS`] takes no more: a diagnostic whose mark was
/// dropped there marked nothing, so its `marked` is `None` (`null`), not that frame.
#[test]
fn a_mark_dropped_at_the_cap_names_no_frame() {
    let mut log = Log::default();
    log.record_frame(
        1,
        Dir::Received,
        SystemTime::now(),
        r#"{"jsonrpc":"2.0","method":"push/event","params":{}}"#,
    );
    let mark = |i: usize| Mark {
        rule: format!("rule_{i}"),
        section: "§9.2",
        detail: String::new(),
        entry: None,
    };
    for i in 0..MAX_MARKS {
        assert_eq!(log.mark_latest(|_| true, mark(i)), Some((1, None)));
    }
    assert_eq!(log.mark_latest(|_| true, mark(MAX_MARKS)), None);
    assert_eq!(log.mark_fresh(|_| true, mark(MAX_MARKS + 1)), None);
    assert_eq!(marks_of(&log, 1).len(), MAX_MARKS);
    // The same mark again is there already: it names the frame.
    assert_eq!(log.mark_latest(|_| true, mark(0)), Some((1, None)));
}
