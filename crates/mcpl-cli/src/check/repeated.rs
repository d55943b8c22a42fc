//! Member names repeated within one JSON object of a message, as the checkers report them
//! (`transport.member-names-unique`, `host.member-names-unique`). The scan is the library's
//! ([`mcpl::jsonrpc::repeated`]), the one the library's own readers run where a message
//! decides authority; what is here only names the message a repeat was found in.

use serde_json::Value;

pub use mcpl::jsonrpc::repeated::{first_repeated, Repeated, NAME_CHARS};

/// `s` cut to `limit` characters, the cut marked `…`.
fn cut(s: &str, limit: usize) -> String {
    match s.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", s.get(..end).unwrap_or_default()),
        None => s.to_owned(),
    }
}

/// The message a frame is, as a report names it: `request "ping" id 12345`, `notification
/// "x"`, `response id 2`, `a batch`; the method and id as a `serde_json::Value` reader takes
/// them (the last of repeated ones). The method is cut to [`NAME_CHARS`] characters, the id
/// to [`NAME_CHARS`] characters of its JSON.
pub fn message_name(v: &Value) -> String {
    let Value::Object(o) = v else {
        return if v.is_array() {
            "a batch".to_owned()
        } else {
            "a message".to_owned()
        };
    };
    let id = o.get("id").map(|id| cut(&id.to_string(), NAME_CHARS));
    let method = o.get("method").map(|m| match m {
        Value::String(s) => format!("{:?}", cut(s, NAME_CHARS)),
        other => cut(&other.to_string(), NAME_CHARS),
    });
    match (method, id) {
        (Some(m), Some(id)) => format!("request {m} id {id}"),
        (Some(m), None) => format!("notification {m}"),
        (None, Some(id)) => format!("response id {id}"),
        (None, None) => "a message".to_owned(),
    }
}

/// How a report says it: `"id" repeated in the top-level object of request "ping" id 12345
/// (read as the last one)`.
pub fn describe(found: &Repeated, message: &Value) -> String {
    let at = if found.path.is_empty() {
        "the top-level object".to_owned()
    } else {
        found.path.clone()
    };
    format!(
        "{:?} repeated in {at} of {} (read as the last one)",
        found.name,
        message_name(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_named_as_read() {
        let v: Value =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":7,"id":12345,"method":"ping"}"#).unwrap();
        let found = first_repeated(r#"{"id":7,"id":12345}"#).unwrap();
        assert_eq!(
            describe(&found, &v),
            r#""id" repeated in the top-level object of request "ping" id 12345 (read as the last one)"#
        );
        assert_eq!(
            message_name(&serde_json::json!({"id": 2, "result": {}})),
            "response id 2"
        );
        assert_eq!(
            message_name(&serde_json::json!({"method": "x"})),
            "notification \"x\""
        );
        assert_eq!(message_name(&serde_json::json!([])), "a batch");
    }
}
