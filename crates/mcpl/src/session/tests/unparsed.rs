//! A line that is no message, answered by a driver of the machines (JSON-RPC 2.0 §5): a
//! request whose id the text showed whole and without doubt before the parser's error is
//! answered `-32700` under that id ([`crate::jsonrpc::ParseError::owed_answer`], the rule
//! the async peer answers by); every id in doubt keeps `null`. Before, `ParseError::Json`
//! carried no id, so such a driver answered `id: null` and the sender waited for its own
//! deadline.

use super::*;
use crate::jsonrpc::codes;

/// A driver's reading of one line the host wrote: a message goes to the machine; a text
/// that is none is answered by the driver with what `ParseError::owed_answer` gives, and
/// only then (a response, a notification nested past the parser, a junk line are owed
/// nothing).
fn server_reads(p: &mut Pair, line: &str) {
    match Message::parse(line) {
        Ok(m) => {
            p.server.handle_message(p.now, m);
            p.collect();
        }
        Err(e) => {
            if let Some(answer) = e.owed_answer(line) {
                p.to_host.push_back(Message::Response(answer).to_json());
            }
        }
    }
}

/// The one frame the driver wrote for `line`, which must be a `-32700`: its id.
fn parse_error_id(p: &mut Pair, line: &str) -> Value {
    p.collect();
    let before = p.to_host.len();
    server_reads(p, line);
    p.collect();
    let wrote: Vec<Value> = p
        .to_host
        .iter()
        .skip(before)
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    assert_eq!(wrote.len(), 1, "{line}: {wrote:?}");
    assert_eq!(
        wrote[0]["error"]["code"],
        json!(codes::PARSE_ERROR),
        "{line}: {}",
        wrote[0]
    );
    wrote[0]["id"].clone()
}

/// A `tools/call` whose params hold a number out of a float's range, after a clean id: the
/// driver's answer is under that id, and the machine still serves the next request.
#[test]
fn a_request_that_does_not_parse_after_a_clean_id_is_answered_under_it() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    assert!(p.server.is_ready());
    let line = r#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"x","arguments":{"n":1e400}}}"#;
    assert_eq!(parse_error_id(&mut p, line), json!(41));
    let line = r#"{"jsonrpc":"2.0","method":"tools/call","id":"s","params":{"name":"\ud800"}}"#;
    assert_eq!(parse_error_id(&mut p, line), json!("s"));
    // Cut short after the id; text after a whole object; an escaped member name read as
    // the `id` it names.
    let line = r#"{"jsonrpc":"2.0","id":"cut","method":"tools/call","params":[1,2"#;
    assert_eq!(parse_error_id(&mut p, line), json!("cut"));
    let line = r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{}} {"x":1}"#;
    assert_eq!(parse_error_id(&mut p, line), json!(7));
    let line = r#"{"jsonrpc":"2.0","i\u0064":8,"method":"m","params":[1e400]}"#;
    assert_eq!(parse_error_id(&mut p, line), json!(8));
    // The machine was never handed those lines, and decides the next request as before
    // (here, a `tools/call` outside the host's capabilities: answered by the machine).
    server_reads(
        &mut p,
        r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"x"}}"#,
    );
    let answered = p
        .to_host
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .any(|v| v["id"] == json!(42) && v["error"]["code"] != json!(codes::PARSE_ERROR));
    assert!(answered, "{:?}", p.to_host);
}

/// Every id the peer treats as in doubt keeps `null`: two `id` members (on either side of
/// the error, one named with an escape), an id that is no string or number a request is taken under,
/// a string over `MAX_ID_BYTES`, an id after the error or cut by it, no `jsonrpc` or another
/// version, no `method`, an id only inside the params, a batch, a notification.
#[test]
fn an_id_in_doubt_is_answered_under_null() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    let long = "i".repeat(crate::jsonrpc::MAX_ID_BYTES + 1);
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1e400],"id":2}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1e400],"id":1}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"i\u0064":2,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1e30,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":true,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":null,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":[1],"method":"m","params":[1e400]}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"m","params":[1e400]}}"#),
        r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":[1e400],"id":3}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","id":"cu"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","id":12"#.to_owned(),
        r#"{"id":4,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"1.0","id":4,"method":"m","params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"params":[1e400]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":{"id":5,"x":1e400}}"#.to_owned(),
        r#"[{"jsonrpc":"2.0","id":6,"method":"m","params":[1e400]}]"#.to_owned(),
        r#"{"jsonrpc":"2.0" "id":7,"method":"m"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"m","params":[1e400]}"#.to_owned(),
    ];
    for line in lines {
        assert_eq!(parse_error_id(&mut p, &line), Value::Null, "{line}");
    }
    // JSON-RPC 2.0 §4/§5: a fractional id is a request's id, answered under the same value
    // as a taken request is (`jsonrpc::request_id_number`).
    for (id, same) in [
        ("1.5", serde_json::json!(1.5)),
        ("1.0", serde_json::json!(1.0)),
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":[1e400]}}"#);
        assert_eq!(parse_error_id(&mut p, &line), same, "{line}");
    }
}

/// A text that parses but is no valid message keeps its `-32600` under the id it carries.
#[test]
fn an_invalid_message_keeps_its_32600_under_its_id() {
    let line = r#"{"jsonrpc":"2.0","id":3,"method":42}"#;
    let Err(e) = Message::parse(line) else {
        panic!("{line} is no message");
    };
    let answer = e.answer(line);
    assert_eq!(answer.id, Some(RequestId::from(3_i64)));
    assert!(matches!(&answer.outcome, Err(err) if err.code == codes::INVALID_REQUEST));
}

/// A request nested past what the parser reads may be valid JSON: a driver answers it as
/// the peer does, `-32600` (`reason: "nesting"`) under its id read past the nesting, or
/// under a null id when that id is in doubt (two of them).
#[test]
fn a_request_nested_too_deep_is_answered_32600_under_its_id() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for (line, id) in [
        (
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{deep},"id":"after"}}"#),
            Some(RequestId::from("after")),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{deep}}}"#),
            Some(RequestId::from(3_i64)),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":{deep},"id":4}}"#),
            None,
        ),
    ] {
        let Err(e) = Message::parse(&line) else {
            panic!("parsed");
        };
        let answer = e.answer(&line);
        assert_eq!(answer.id, id, "{}", &line[..40]);
        let Err(error) = &answer.outcome else {
            panic!("no error");
        };
        assert_eq!(error.code, codes::INVALID_REQUEST);
        assert_eq!(
            error.data.as_ref().map(|d| &d["reason"]),
            Some(&json!("nesting"))
        );
    }
}

/// A line owed no answer gets none from a driver (JSON-RPC 2.0 §5: a response is never
/// answered, that could loop; §4.1: nor a notification; a junk line is no message): a
/// response that does not parse, a notification nested past the parser, a response nested
/// so, a junk line. A driver writes [`crate::jsonrpc::ParseError::owed_answer`], as the peer
/// answers.
#[test]
fn a_line_owed_nothing_gets_no_answer_from_the_driver() {
    let mut p = Pair::connect(&["pushEvents"], server_rules());
    p.collect();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"result":[1e400]}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","method":"m","params":{deep}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":2,"result":{deep}}}"#),
        "not json at all".to_owned(),
    ];
    for line in lines {
        assert!(Message::parse(&line).is_err(), "{line}");
        let before = p.to_host.len();
        server_reads(&mut p, &line);
        p.collect();
        let wrote: Vec<&String> = p.to_host.iter().skip(before).collect();
        assert!(
            wrote.is_empty(),
            "{}: {wrote:?}",
            &line[..line.len().min(40)]
        );
    }
}
