use super::*;
use serde_json::json;

#[test]
fn json_type_names_follow_the_json_vocabulary() {
    let names: Vec<&str> = [
        json!(null),
        json!(true),
        json!(0),
        json!("s"),
        json!([]),
        json!({}),
    ]
    .iter()
    .map(json_type_name)
    .collect();
    assert_eq!(
        names,
        ["null", "boolean", "number", "string", "array", "object"]
    );
}

#[test]
fn zero_is_a_valid_id_and_string_one_differs_from_number_one() {
    let m = Message::from_value(json!({"jsonrpc":"2.0","id":0,"method":"ping"})).unwrap();
    let Message::Request(r) = m else {
        panic!("not a request")
    };
    assert_eq!(r.id, RequestId::from(0i64));
    assert_ne!(RequestId::from("1"), RequestId::from(1i64));
}

#[test]
fn absent_and_null_params_are_distinguished() {
    let a = Message::from_value(json!({"jsonrpc":"2.0","method":"x"})).unwrap();
    let b = Message::from_value(json!({"jsonrpc":"2.0","method":"x","params":null})).unwrap();
    assert_ne!(a, b);
    assert_eq!(a.to_value(), json!({"jsonrpc":"2.0","method":"x"}));
    assert_eq!(
        b.to_value(),
        json!({"jsonrpc":"2.0","method":"x","params":null})
    );
}

#[test]
fn error_data_round_trips() {
    let e = ErrorObject::capability_denied("pushEvents");
    let m = Message::Response(Response {
        id: Some(7i64.into()),
        outcome: Err(e.clone()),
    });
    let back = Message::parse(&m.to_json()).unwrap();
    let Message::Response(r) = back else { panic!() };
    assert_eq!(r.outcome, Err(e));
}

#[test]
fn notification_params_decode_or_give_32602() {
    let n = Notification {
        method: "x".into(),
        params: Some(json!({"a": 1})),
    };
    let ok: std::collections::BTreeMap<String, i64> = n.params_as().unwrap();
    assert_eq!(ok["a"], 1);
    let err = n.params_as::<Vec<i64>>().unwrap_err();
    assert_eq!(err.code, codes::INVALID_PARAMS);
}

#[test]
fn invalid_message_keeps_its_id() {
    let err = Message::from_value(json!({"jsonrpc":"1.0","id":"a","method":"x"})).unwrap_err();
    assert_eq!(err.id, Some(RequestId::from("a")));
}

/// The slow path exactly as `peer::handle_frame` runs it when the fast path declines.
fn slow(text: &str) -> Result<Message, ParseError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
    // What a `Value` loses: a request naming a member more than once is refused.
    let doubled = super::doubled::doubled_in(text, &value);
    super::doubled::from_value_read(value, doubled).map_err(ParseError::Invalid)
}

/// Runs both paths and asserts the contract: a fast `Some(m)` means a slow `Ok(m)`, down to
/// the printed text (`Number` equality alone would let `-0.0` pass for `0.0`).
fn both(text: &str) -> (Option<Message>, Result<Message, ParseError>) {
    let fast = Message::parse_object(text);
    let slow = slow(text);
    if let Some(m) = &fast {
        assert_eq!(slow.as_ref(), Ok(m), "fast path accepted {text}");
        assert_eq!(
            slow.as_ref().map(Message::to_json),
            Ok(m.to_json()),
            "{text}"
        );
    }
    assert_eq!(
        Message::parse(text),
        slow,
        "parse differs from the slow path: {text}"
    );
    (fast, slow)
}

/// A text both paths accept, as the same message.
fn fast_ok(text: &str) -> Message {
    let (fast, _) = both(text);
    fast.unwrap_or_else(|| panic!("fast path declined a valid message: {text}"))
}

/// A text the fast path declines; returns the slow path's verdict.
fn declined(text: &str) -> Result<Message, ParseError> {
    let (fast, slow) = both(text);
    assert_eq!(fast, None, "fast path accepted {text}");
    slow
}

fn reason(r: Result<Message, ParseError>) -> String {
    match r {
        Err(ParseError::Invalid(e)) => e.reason,
        other => panic!("expected an invalid message, got {other:?}"),
    }
}

#[test]
fn s4_fast_path_reads_every_ordinary_message_kind() {
    let req = fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[1,2]}}"#);
    assert!(matches!(req, Message::Request(_)));
    let note = fast_ok(r#"{"method":"notifications/x","jsonrpc":"2.0"}"#);
    assert!(matches!(
        note,
        Message::Notification(Notification { params: None, .. })
    ));
    let ok = fast_ok(r#" {"jsonrpc":"2.0","id":"a","result":{}} "#);
    assert!(matches!(
        ok,
        Message::Response(Response { outcome: Ok(_), .. })
    ));
    let err =
        fast_ok(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32002,"message":"m","data":{"c":1}}}"#);
    assert!(matches!(
        err,
        Message::Response(Response {
            outcome: Err(_),
            ..
        })
    ));
    // A response to a message whose id could not be read.
    let null_id = fast_ok(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#);
    assert!(matches!(
        null_id,
        Message::Response(Response { id: None, .. })
    ));
}

#[test]
fn s4_fast_path_jsonrpc_must_be_exactly_the_string_2_0() {
    for text in [
        r#"{"id":1,"method":"x"}"#,
        r#"{"jsonrpc":2.0,"id":1,"method":"x"}"#,
        r#"{"jsonrpc":"2.0 ","id":1,"method":"x"}"#,
        r#"{"jsonrpc":"2.00","id":1,"method":"x"}"#,
        r#"{"jsonrpc":null,"id":1,"method":"x"}"#,
        r#"{"jsonrpc":["2.0"],"id":1,"method":"x"}"#,
    ] {
        assert_eq!(
            reason(declined(text)),
            "\"jsonrpc\" must be \"2.0\"",
            "{text}"
        );
    }
    // The same string spelled with an escape is the same string to both paths.
    fast_ok(r#"{"jsonrpc":"2\u002e0","id":1,"method":"x"}"#);
}

#[test]
fn s4_1_fast_path_declines_a_null_or_non_string_method() {
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":["x"]}"#,
        r#"{"jsonrpc":"2.0","method":{}}"#,
    ] {
        assert_eq!(reason(declined(text)), "method must be a string", "{text}");
    }
}

#[test]
fn s4_1_fast_path_declines_a_request_with_a_null_id() {
    let r = declined(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#);
    assert_eq!(reason(r), "a request id must not be null");
}

#[test]
fn s4_1_fast_path_declines_ids_that_are_not_number_string_or_null() {
    for id in ["true", "false", "[]", "[1]", "{}", r#"{"a":1}"#] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
        assert_eq!(
            reason(declined(&text)),
            "id must be a number, a string or null"
        );
    }
}

#[test]
fn s4_1_fast_path_declines_params_that_are_not_object_array_or_null() {
    for params in ["1", "\"s\"", "true", "0.5"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{params}}}"#);
        assert_eq!(
            reason(declined(&text)),
            "params must be an object or an array"
        );
    }
    fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#);
    fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#);
}

#[test]
fn s4_fast_path_declines_both_or_neither_result_and_error() {
    let both_ = r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#;
    assert_eq!(
        reason(declined(both_)),
        "response has both result and error"
    );
    let neither = r#"{"jsonrpc":"2.0","id":1}"#;
    assert_eq!(reason(declined(neither)), super::NO_METHOD_NOR_OUTCOME);
    assert_eq!(
        reason(declined(r#"{"jsonrpc":"2.0","result":1}"#)),
        "message has neither method nor id"
    );
}

#[test]
fn s4_fast_path_declines_a_malformed_error_object() {
    for error in [
        r#"{"message":"m"}"#,
        r#"{"code":1}"#,
        r#"{"code":"1","message":"m"}"#,
        r#"{"code":1.5,"message":"m"}"#,
        r#"{"code":1.0,"message":"m"}"#,
        r#"{"code":9223372036854775808,"message":"m"}"#,
        r#""boom""#,
        "null",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"error":{error}}}"#);
        assert!(
            reason(declined(&text)).starts_with("malformed error object"),
            "{text}"
        );
    }
    // Duplicates inside the error object are the slow path's (last one wins) on both.
    let m = fast_ok(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"code":2,"message":"m"}}"#);
    let Message::Response(Response {
        outcome: Err(e), ..
    }) = m
    else {
        panic!("not an error response")
    };
    assert_eq!(e.code, 2);
}

#[test]
fn s4_fast_path_declines_duplicate_envelope_members() {
    // `Value` keeps the last duplicate; the fast path must not pick one of its own. A
    // request's `id` named twice is refused (`DOUBLED_ID`, JSON-RPC 2.0 §4, §5), under no id.
    let r = declined(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#);
    assert!(
        matches!(
            &r,
            Err(ParseError::Invalid(InvalidMessage { id: None, .. }))
        ),
        "{r:?}"
    );
    // A response's is read as its last, as a parser reads it.
    let r = declined(r#"{"jsonrpc":"2.0","id":1,"id":2,"result":0}"#).unwrap();
    let Message::Response(r) = r else {
        panic!("not a response")
    };
    assert_eq!(r.id, Some(RequestId::from(2i64)));
    for text in [
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"x"}"#,
        r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"x"}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":null,"error":{"code":1,"message":"m"}}"#,
    ] {
        assert!(declined(text).is_ok(), "{text}");
    }
    // A request's `method` or `params` named twice is refused under its id (`doubled`):
    // which one the sender meant is in doubt; also spelled once with an escape.
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":"x","method":"y"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x","params":1,"params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x","m\u0065thod":"y"}"#,
    ] {
        let r = declined(text);
        assert!(
            matches!(&r, Err(ParseError::Invalid(InvalidMessage { id: Some(id), .. })) if *id == RequestId::from(1_i64)),
            "{text}: {r:?}"
        );
    }
}

#[test]
fn s4_fast_path_ignores_unknown_members_like_the_slow_path() {
    let m = fast_ok(r#"{"jsonrpc":"2.0","x":[1,{"y":null}],"id":1,"x":2,"method":"m"}"#);
    let plain = fast_ok(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#);
    assert_eq!(m, plain);
    // An unknown member is still read as a `Value`: what `Value` refuses, both refuse.
    for extra in ["1e400", r#""\ud800""#, "01", "[1,]"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":{extra}}}"#);
        assert!(
            matches!(declined(&text), Err(ParseError::Json(_))),
            "{text}"
        );
    }
}

#[test]
fn s4_fast_path_numbers_match_the_slow_path_exactly() {
    // Integers within 64 bits are ids, kept digit for digit by both paths.
    for id in ["0", "18446744073709551615", "-9223372036854775808"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
        let m = fast_ok(&text);
        let Message::Request(r) = m else {
            panic!("not a request")
        };
        let Ok(Message::Request(s)) = slow(&text) else {
            panic!("slow path refused {text}")
        };
        let (RequestId::Number(a), RequestId::Number(b)) = (&r.id, &s.id) else {
            panic!("not a numeric id")
        };
        assert_eq!(a.to_string(), b.to_string(), "{id}");
        assert_eq!(
            (a.is_u64(), a.is_i64(), a.is_f64()),
            (b.is_u64(), b.is_i64(), b.is_f64())
        );
    }
    // JSON-RPC 2.0 §4/§5: any other number on a request is held as a double
    // (`request_id_number`), taken by both paths alike and echoed as parsed; on a response
    // both refuse it (a response's id is read against ours, `whole_float_integer`).
    for id in [
        "-0",
        "1.0",
        "-0.0",
        "1e3",
        "1E+3",
        "0.1",
        "2.5e-8",
        "5e-324",
        "0.30000000000000004",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
        let Message::Request(s) = fast_ok(&text) else {
            panic!("not a request: {text}")
        };
        assert!(s.id.is_fractional(), "{id}");
        let echoed: f64 = serde_json::from_str(id).expect("a number");
        assert_eq!(
            s.id.to_value(),
            json!(echoed),
            "{id} is answered under its value"
        );
        let response = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#);
        assert!(
            reason(declined(&response)).contains("integer within 64 bits"),
            "{id}"
        );
    }
    // A whole value past the 64-bit integers may be an integer the double rounded: never
    // an id, on a request too.
    for id in [
        "18446744073709551616",
        "18446744073709551617",
        "-9223372036854775809",
        "1.7976931348623157e308",
        "1e30",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
        // The text says what a request's id may be and what this one is not: whole floats
        // under 2^53 are taken, so "must be an integer within 64 bits" alone was untrue.
        let why = reason(declined(&text));
        assert!(why.contains("integer within 64 bits"), "{id}: {why}");
        assert!(why.contains("under 2^53"), "{id}: {why}");
        assert!(why.contains("2^53 or more"), "{id}: {why}");
    }
    declined(r#"{"jsonrpc":"2.0","id":1e400,"method":"x"}"#).unwrap_err();
}

#[test]
fn s4_fast_path_unescapes_method_id_and_member_names() {
    let m = fast_ok(
        r#"{"\u006asonrpc":"2.0","\u0069d":"a\"b\\c\u00e9\ud83d\ude00","m\u0065thod":"p\u0069ng"}"#,
    );
    let Message::Request(r) = m else {
        panic!("not a request")
    };
    assert_eq!(r.method, "ping");
    assert_eq!(r.id, RequestId::from("a\"b\\c\u{e9}\u{1f600}"));
    // A lone surrogate is not a string to either path.
    declined(r#"{"jsonrpc":"2.0","id":"\ud800","method":"x"}"#).unwrap_err();
    declined(r#"{"jsonrpc":"2.0","id":1,"method":"\udc00"}"#).unwrap_err();
}

#[test]
fn s4_fast_path_declines_what_is_not_one_json_object() {
    for text in [
        "",
        "[]",
        r#"[{"jsonrpc":"2.0","method":"x"}]"#,
        "1",
        "\"x\"",
        "null",
        r#"{"jsonrpc":"2.0","method":"x"} junk"#,
        r#"{"jsonrpc":"2.0","method":"x"}{}"#,
        r#"{"jsonrpc":"2.0","method":"x",}"#,
        r#"{"jsonrpc":"2.0","method":"x""#,
    ] {
        declined(text).unwrap_err();
    }
    // Nesting deeper than serde_json's limit fails the same way on both paths.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"x","params":{}{}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    assert!(matches!(declined(&deep), Err(ParseError::Json(_))));
    let ok_depth = format!(
        r#"{{"jsonrpc":"2.0","method":"x","params":{}{}}}"#,
        "[".repeat(120),
        "]".repeat(120)
    );
    fast_ok(&ok_depth);
}

mod equivalence {
    use super::*;
    use proptest::prelude::*;

    /// Member names: the envelope's, some spelled with escapes, and unknown ones.
    /// Each comes with the name it unescapes to.
    fn key() -> impl Strategy<Value = (&'static str, &'static str)> {
        prop::sample::select(vec![
            ("jsonrpc", "jsonrpc"),
            ("id", "id"),
            ("method", "method"),
            ("params", "params"),
            ("result", "result"),
            ("error", "error"),
            ("\\u0069d", "id"),
            ("m\\u0065thod", "method"),
            ("jsonrpc\\u0000", "jsonrpc\0"),
            ("extra", "extra"),
            ("Method", "Method"),
            ("", ""),
        ])
    }

    /// Member values, valid and invalid for each member, and some that are not JSON.
    fn value() -> impl Strategy<Value = String> {
        let fixed = prop::sample::select(vec![
            "null",
            "true",
            "false",
            "0",
            "-0",
            "1",
            "1.0",
            "-0.0",
            "1e3",
            "2.5E-3",
            "18446744073709551616",
            "-9223372036854775809",
            "1e400",
            "01",
            "\"2.0\"",
            "\"2\\u002e0\"",
            "\"2.0 \"",
            "\"1.0\"",
            "2.0",
            "\"ping\"",
            "\"p\\u0069ng\"",
            "\"a\\\"b\\\\n\\/\"",
            "\"\\ud83d\\ude00\"",
            "\"\\ud800\"",
            "\"\"",
            "[]",
            "[1,{\"a\":null}]",
            "[1,]",
            "{}",
            "{\"a\":1,\"a\":2}",
            "{\"code\":-32600,\"message\":\"m\"}",
            "{\"code\":1,\"message\":\"m\",\"data\":{\"k\":[1.5]}}",
            "{\"code\":1,\"message\":\"m\",\"data\":null}",
            "{\"code\":\"1\",\"message\":\"m\"}",
            "{\"code\":1.5,\"message\":\"m\"}",
            "{\"message\":\"m\"}",
            "{\"code\":1,\"message\":\"m\",\"x\":1e400}",
            "{\"code\":1,\"code\":2,\"message\":\"m\"}",
        ])
        .prop_map(str::to_owned);
        let number = any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string());
        let int = any::<i64>().prop_map(|i| i.to_string());
        let string = "[a-z\\\\\"/]{0,6}"
            .prop_map(|s| serde_json::to_string(&s).unwrap_or_else(|_| "\"\"".to_owned()));
        prop_oneof![6 => fixed, 1 => number, 1 => int, 1 => string]
    }

    /// A whole text: members in random order, sometimes repeated, odd spacing, and
    /// sometimes trailing junk. Returns the text and whether an envelope member repeats.
    fn text() -> impl Strategy<Value = (String, bool)> {
        let member = (key(), value(), prop::sample::select(vec!["", " ", "\n\t"]));
        let preset = prop::collection::vec(
            prop_oneof![
                Just(("jsonrpc", "jsonrpc")).prop_map(|k| (k, "\"2.0\"".to_owned())),
                Just(("id", "id")).prop_map(|k| (k, "7".to_owned())),
                Just(("method", "method")).prop_map(|k| (k, "\"m\"".to_owned())),
                Just(("result", "result")).prop_map(|k| (k, "{}".to_owned())),
            ],
            0..4,
        );
        (
            prop::collection::vec(member, 0..6),
            preset,
            prop::sample::select(vec!["", " ", "\n", " x", "}", ","]),
        )
            .prop_flat_map(|(members, preset, tail)| {
                let mut all: Vec<((&str, &str), String, &str)> = members;
                all.extend(preset.into_iter().map(|(k, v)| (k, v, "")));
                let n = all.len();
                (Just(all), Just(n), Just(tail)).prop_flat_map(|(all, n, tail)| {
                    (
                        Just(all),
                        Just(tail),
                        Just(()).prop_perturb(move |_, mut rng| {
                            let mut order: Vec<usize> = (0..n).collect();
                            // Fisher-Yates with the test runner's rng.
                            for i in (1..order.len()).rev() {
                                let j = (rng.next_u32() as usize) % (i + 1);
                                order.swap(i, j);
                            }
                            order
                        }),
                    )
                })
            })
            .prop_map(|(all, tail, order)| {
                const ENVELOPE: [&str; 6] =
                    ["jsonrpc", "id", "method", "params", "result", "error"];
                let mut seen: Vec<&str> = Vec::new();
                let mut dup = false;
                let mut body = Vec::new();
                for i in order {
                    let ((raw, name), v, ws) = &all[i];
                    if ENVELOPE.contains(name) {
                        dup |= seen.contains(name);
                        seen.push(name);
                    }
                    body.push(format!("{ws}\"{raw}\"{ws}:{ws}{v}{ws}"));
                }
                (format!("{{{}}}{tail}", body.join(",")), dup)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Issue #8 contract: fast `Some(m)` implies slow `Ok(m)`; the fast path declines
        /// exactly the texts the slow path refuses plus those with a repeated member.
        #[test]
        fn s4_fast_path_is_exactly_equivalent_to_the_value_path((text, dup) in text()) {
            let (fast, slow) = both(&text);
            prop_assert_eq!(fast.is_some(), slow.is_ok() && !dup, "{}", text);
        }
    }
}

/// An encoded value is written as it is: the notification and response lines built around
/// it are the ones `Message::to_json` writes for the same value (JSON-RPC 2.0 §4, §5), escapes
/// and all.
#[test]
fn encoded_values_make_the_same_lines_as_message_to_json() {
    let values = [
        json!(null),
        json!({"z": 1, "a": [1.5, "x\u{2028}", {"k": null}], "é\n\"": true}),
        json!([1, -2, "three"]),
        json!("just text"),
    ];
    for v in &values {
        let e = Encoded::encode(v).unwrap();
        assert_eq!(e.to_value().unwrap(), *v);
        let n = Message::Notification(Notification {
            method: "inference/lifecycle".into(),
            params: Some(v.clone()),
        });
        assert_eq!(e.notification("inference/lifecycle"), n.to_json());
        for id in [RequestId::from(7u64), RequestId::from("a\"b")] {
            let r = Message::Response(Response {
                id: Some(id.clone()),
                outcome: Ok(v.clone()),
            });
            assert_eq!(e.response(&id), r.to_json());
        }
    }
}

/// RFC 8259 §2, §8.1: only JSON whitespace and one byte order mark may precede a message
/// (`message_lead`, the peer's reading too). After other Unicode whitespace a request is
/// refused, owed `-32700` under its id; a notification or a response is owed nothing.
#[test]
fn only_json_whitespace_and_a_byte_order_mark_precede_a_message() {
    for ok in [
        " \t\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"} \r",
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}",
        " \u{feff}\t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}",
    ] {
        assert!(Message::parse(ok).is_ok(), "{ok:?}");
    }
    for before in ["\u{a0}", "\u{2028}", "\u{feff}\u{3000}", "\u{85}"] {
        let request = format!("{before}{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}}");
        let Err(e) = Message::parse(&request) else {
            panic!("{before:?}: taken");
        };
        let answer = e.owed_answer(&request);
        let answer = answer.unwrap_or_else(|| panic!("{before:?}: owed nothing"));
        let Err(error) = &answer.outcome else {
            panic!("no error");
        };
        assert_eq!(error.code, codes::PARSE_ERROR, "{before:?}");
        let notification = format!("{before}{{\"jsonrpc\":\"2.0\",\"method\":\"m\"}}");
        let response = format!("{before}{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}}");
        for text in [notification, response] {
            let Err(e) = Message::parse(&text) else {
                panic!("{text:?}: taken");
            };
            assert_eq!(e.owed_answer(&text), None, "{text:?}");
        }
    }
    let after = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\u{a0}";
    assert!(Message::parse(after).is_err());
}

/// [`ParseError::owed_answer`] given a text the error did not come from (one that parses):
/// a response or a notification is never owed an answer (JSON-RPC 2.0 §5: answering a
/// response can loop; §4.1: a notification is not answered); anything else is answered
/// `-32700`, failing closed.
#[test]
fn a_parse_error_for_a_text_that_parses_owes_a_response_or_notification_nothing() {
    let e = ParseError::Json("x".into());
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"result":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
        r#" {"jsonrpc":"2.0","id":null,"result":null} "#,
        r#"{"jsonrpc":"2.0","method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":[1]}"#,
    ] {
        assert_eq!(e.owed_answer(text), None, "{text}");
    }
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"result":1}]"#,
    ] {
        let answer = e.owed_answer(text);
        let answer = answer.unwrap_or_else(|| panic!("{text}: owed nothing"));
        let Err(error) = &answer.outcome else {
            panic!("{text}: no error");
        };
        assert_eq!(error.code, codes::PARSE_ERROR, "{text}");
        assert_eq!(answer.id, None, "{text}");
    }
}

/// An object with an id and neither a `method` nor a `result` or an `error` is no Request
/// (JSON-RPC 2.0 §4) nor a Response object (§5): a driver owes it `-32600` under that id,
/// as the peer answers it (unless it names a request of the driver's own, which it fails:
/// `InvalidThen::AnswerUnlessOurs`); a response gone wrong is still owed nothing.
#[test]
fn s4_an_id_with_no_method_nor_outcome_is_owed_an_answer_under_its_id() {
    for (text, id) in [
        (r#"{"jsonrpc":"2.0","id":302}"#, RequestId::from(302_i64)),
        (r#"{"jsonrpc":"2.0","id":"a","params":{}}"#, "a".into()),
    ] {
        let Err(e) = Message::parse(text) else {
            panic!("{text}: taken");
        };
        let v: Value = serde_json::from_str(text).unwrap_or_default();
        let ParseError::Invalid(invalid) = &e else {
            panic!("{text}: {e:?}");
        };
        assert_eq!(
            invalid_then(&v, invalid),
            InvalidThen::AnswerUnlessOurs(id.clone())
        );
        let answer = e.owed_answer(text).expect("owed an answer");
        assert_eq!(answer.id, Some(id), "{text}");
        let Err(error) = &answer.outcome else {
            panic!("{text}: no error");
        };
        assert_eq!(error.code, codes::INVALID_REQUEST, "{text}");
        assert!(error.message.contains("method"), "{}", error.message);
    }
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":5}"#,
    ] {
        let Err(e) = Message::parse(text) else {
            panic!("{text}: taken");
        };
        assert_eq!(e.owed_answer(text), None, "{text}");
    }
    // A text refused before it is built reads alike (`refusal_of`, whole).
    assert_eq!(
        refusal_of(br#"{"jsonrpc":"2.0","id":302,"params":[1]}"#, true),
        Refusal::AnswerUnlessOurs(302_i64.into())
    );
    // Naming `id` twice: which is in doubt, so it names no request of the driver's to fail,
    // as the value read whole names none (`jsonrpc::doubled`); a response's id is its last.
    assert_eq!(
        refusal_of(br#"{"jsonrpc":"2.0","id":302,"id":303}"#, true),
        Refusal::Response(None)
    );
    let text = r#"{"jsonrpc":"2.0","id":302,"id":303}"#;
    let Err(ParseError::Invalid(invalid)) = Message::parse(text) else {
        panic!("{text}: taken");
    };
    let v: Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(invalid_then(&v, &invalid), InvalidThen::Fail(None));
    assert_eq!(
        refusal_of(br#"{"jsonrpc":"2.0","id":302,"id":303,"result":1}"#, true),
        Refusal::Response(Some(303_i64.into()))
    );
}

/// A line that is several whole messages: `several_values` finds each (the peer reads each
/// alone, and a driver may); a driver that only writes `owed_answer` still answers the
/// first request `-32700` under its id, never leaving every request on the line silent.
/// One followed by what is no whole message keeps its `-32700`.
#[test]
fn several_messages_on_a_line_are_owed_no_refusal() {
    let two =
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"} {"jsonrpc":"2.0","id":9,"method":"ping"}"#;
    let Err(e) = Message::parse(two) else {
        panic!("taken");
    };
    let owed = e
        .owed_answer(two)
        .expect("the first request is owed its -32700");
    assert_eq!(owed.id, Some(8_i64.into()));
    assert_eq!(several_values(two, 10).map(|s| s.values.len()), Some(2));
    let cut = r#"{"jsonrpc":"2.0","id":8,"method":"ping"} {"jsonrpc""#;
    let Err(e) = Message::parse(cut) else {
        panic!("taken");
    };
    assert!(e.owed_answer(cut).is_some());
}

/// A batch of responses only is owed nothing when refused for a bound (the peer's reading,
/// `Head::then`), but one the parser refuses is still owed its `-32700` under a null id, as
/// the peer answers it: a text that does not parse is not known to hold responses only.
#[test]
fn a_batch_of_responses_only_that_does_not_parse_is_still_owed_its_parse_error() {
    let text = r#"[{"jsonrpc":"2.0","id":1,"result":1e400}]"#;
    let Err(e) = Message::parse(text) else {
        panic!("taken");
    };
    let owed = e.owed_answer(text).expect("owed a -32700");
    assert_eq!(owed.id, None);
}

/// JSON-RPC 2.0 §5, §6: a text that begins with a batch the parser refused only for what
/// follows it is owed each of the batch's requests answered `-32700` under its id, in one
/// array (`ParseError::owed_answers`, the peer's rule); any other text what
/// `ParseError::owed_answer` gives.
#[test]
fn a_batch_first_text_refused_for_what_follows_is_owed_each_request_under_its_id() {
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":"r","result":1}]"#;
    let text = format!("{batch} junk");
    let e = Message::parse(&text).expect_err("junk after the batch");
    let Some(OwedAnswer::Batch(answers)) = e.owed_answers(&text, 16) else {
        panic!("{:?}", e.owed_answers(&text, 16));
    };
    // Each request once, in order; no notification nor response is answered.
    let ids: Vec<_> = answers.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, [Some(RequestId::from(1u64))]);
    assert_eq!(answers[0].outcome.as_ref().map_err(|e| e.code), Err(-32700));
    // Over the driver's bound on a batch: the text keeps its one answer under a null id.
    let over = e.owed_answers(&text, 2).map(|a| a.to_value());
    assert_eq!(
        over,
        e.owed_answer(&text)
            .map(|r| Message::Response(r).to_value())
    );
    for other in [
        r#"{"jsonrpc":"2.0","id":2,"method":"m"} x"#,
        "[1,",
        r#"{"id":3,"#,
    ] {
        let e = Message::parse(other).expect_err(other);
        assert_eq!(
            e.owed_answers(other, 16),
            e.owed_answer(other).map(OwedAnswer::One),
            "{other}"
        );
    }
}

/// JSON-RPC 2.0 §5.1, §6; §6.7: the requests of a batch the parser refused for what
/// follows it, each once in order (by value: `1.0` is `1` again, `jsonrpc::identity::Identity`), an
/// entry naming its `id` twice left out (its id in doubt), and the policy Request and Notification told apart; pinned while the walk is
/// made linear (each entry's doubled member read beside it, the ids seen a set).
#[test]
fn batch_requests_before_pins_each_id_once_in_order() {
    let text = concat!(
        r#"[{"jsonrpc":"2.0","id":1,"method":"a"},"#,
        r#"{"jsonrpc":"2.0","id":2,"id":3,"method":"b"},"#,
        r#"{"jsonrpc":"2.0","id":"s","method":"featureSets/update","params":{}},"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"again"},"#,
        r#"{"jsonrpc":"2.0","id":1.0,"method":"again"},"#,
        r#"{"jsonrpc":"2.0","method":"featureSets/update","params":{}},"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"c","method":"d"},"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"e"}] x"#
    );
    let first = crate::jsonrpc::batch::batch_requests_before(text, 100);
    assert_eq!(
        first.requests,
        [
            (RequestId::Number(1.into()), false),
            (RequestId::String("s".into()), true),
            (RequestId::Number(4.into()), false),
            (RequestId::Number(5.into()), false),
        ]
    );
    assert!(first.policy_notification);
}

/// §6.7: the name a streamed batch's reader keeps a policy entry by is the policy's method.
#[test]
fn the_policy_entry_kept_of_a_refused_batch_is_named_as_the_policy() {
    let written = crate::jsonrpc::envelope::batch::POLICY_WRITTEN;
    assert_eq!(written, format!("\"{}\"", crate::jsonrpc::head::POLICY));
}

/// JSON-RPC 2.0 §5.1: a message refused for the shared budget of partial messages may be a
/// valid Request, refused only for this side's resources at that moment, so its answer is
/// the `-32000` server error a busy side gives, never `-32600` (invalid request): the one
/// public answer the peer writes and a checker writes too
/// (`ErrorObject::over_message_budget`).
#[test]
fn s5_1_a_message_over_the_shared_budget_is_answered_as_busy_not_invalid() {
    let e = ErrorObject::over_message_budget(70_000, 65_536, false);
    assert_eq!(e.code, codes::BUSY);
    assert_ne!(e.code, codes::INVALID_REQUEST);
    assert_eq!(
        e.data,
        Some(serde_json::json!({"limit": 65_536, "reason": "message_budget"}))
    );
    assert!(e
        .message
        .contains("the request was refused after 70000 bytes"));
    assert!(ErrorObject::over_message_budget(1, 2, true)
        .message
        .contains("the batch was refused"));
}

/// JSON-RPC 2.0 §5: a whole float names the integer a double holds exactly and alone; at
/// 2^53 a double also stands for 2^53 + 1, so it names no id, on every side alike.
#[test]
fn a_whole_float_names_an_integer_only_under_2_pow_53() {
    let read = |t: &str| {
        let n: serde_json::Number = serde_json::from_str(t).expect("a number");
        super::whole_float_integer(&n)
    };
    assert_eq!(read("7.0"), Some(7));
    assert_eq!(read("7e0"), Some(7));
    assert_eq!(read("-3.0"), Some(-3));
    assert_eq!(read("9007199254740991.0"), Some(9_007_199_254_740_991));
    assert_eq!(read("-9007199254740991.0"), Some(-9_007_199_254_740_991));
    assert_eq!(read("9007199254740992.0"), None, "2^53 names two integers");
    assert_eq!(read("9007199254740993.0"), None, "rounds to 2^53");
    assert_eq!(read("2.5"), None);
    assert_eq!(read("7"), None, "an integer is read exactly elsewhere");
}

/// JSON-RPC 2.0 §4: a numeric id SHOULD NOT have a fractional part, a SHOULD NOT: a request
/// with one is valid and its answer carries the same value (§5), the number as parsed
/// (`2.0` as `2.0`, not `2`); a response's id `7.0` is still no id as read exactly (the
/// peer reads it as our `7`, `whole_float_integer`).
#[test]
fn s4_a_request_with_a_fractional_id_is_answered_under_the_same_value() {
    for (id, echoed) in [
        ("2.0", "2.0"),
        ("2.5", "2.5"),
        ("-3.0", "-3.0"),
        ("1e0", "1.0"),
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let Ok(Message::Request(r)) = Message::parse(&text) else {
            panic!("{text} was not taken as a request")
        };
        assert!(r.id.is_fractional());
        let answer = Message::Response(Response {
            id: Some(r.id.clone()),
            outcome: Ok(json!({})),
        });
        assert!(
            answer.to_json().contains(&format!(r#""id":{echoed},"#)),
            "{}",
            answer.to_json()
        );
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(RequestId::from_request_value(&v["id"]), Some(r.id.clone()));
        assert_eq!(RequestId::from_value(&v["id"]), None, "read exactly, no id");
    }
    assert!(!RequestId::from(2_i64).is_fractional());
    assert_ne!(
        Message::parse(r#"{"jsonrpc":"2.0","id":2.0,"method":"ping"}"#).ok(),
        Message::parse(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).ok(),
        "2.0 and 2 are answered each as written"
    );
    for refused in [
        r#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
        // Whole past 2^53: the double stands for several integers (…993 reads as …992), so
        // no answer could carry the same value.
        r#"{"jsonrpc":"2.0","id":9007199254740993.0,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":9.2e18,"method":"ping"}"#,
    ] {
        assert!(Message::parse(refused).is_err(), "{refused}");
    }
    // A response's whole float is no id as read exactly; it is read against ours elsewhere.
    let response = Message::parse(r#"{"jsonrpc":"2.0","id":7.0,"result":1}"#);
    assert!(response.is_err(), "{response:?}");
    let n: serde_json::Number = serde_json::from_str("7.0").expect("a number");
    assert_eq!(super::whole_float_integer(&n), Some(7));
}

/// The refusal rule (`head::Head::then`) answers a request refused unbuilt under its
/// fractional id as taking it would (JSON-RPC 2.0 §4/§5): one rule.
#[test]
fn s5_a_refused_request_with_a_fractional_id_is_answered_under_it() {
    let two_and_a_half: serde_json::Number = serde_json::from_str("2.5").expect("a number");
    assert_eq!(
        refusal_of(
            br#"{"jsonrpc":"2.0","id":2.5,"method":"ping","params":{"#,
            false
        ),
        Refusal::Answer(Some(RequestId::Number(two_and_a_half)))
    );
    assert_eq!(
        refusal_of(
            br#"{"jsonrpc":"2.0","id":1e30,"method":"ping","params":{"#,
            false
        ),
        Refusal::Answer(None)
    );
}
