//! What an awaited answer of the host's came to ([`Reply`]), as the probes judge it.

use mcpl::jsonrpc::ErrorObject;
use mcpl::peer::PeerError;
use serde_json::Value;

use super::judge::{capped, excerpt};

/// What an awaited answer came to.
pub(super) enum Reply {
    Result(Value),
    Error(ErrorObject),
    /// A response that is not valid JSON-RPC (the peer's reading of it).
    Invalid(String),
    /// An answer the checker's own bounds kept it from reading (over the message size, the
    /// budget for partial messages, the parsed cost): its peer failed the request itself, so
    /// the `-32603` it delivered is no error of the host's (`Peer::failed_here`), and each
    /// bound is named as what it is ([`Reply::unread`]).
    /// Reading: the spec sets no size; an answer the checker documents it cannot read shows
    /// no conforming answer, as an invalid one does not (fail closed), and is said as what
    /// it is.
    Unread(String),
    /// No response within the bound; `note` names responses that came meanwhile under an id
    /// the checker never sent (empty when none did).
    Timeout {
        note: String,
    },
    Closed,
}

impl Reply {
    /// The reply a settled call's outcome reads as.
    pub(super) fn of(r: Result<Value, PeerError>) -> Reply {
        match r {
            Ok(v) => Reply::Result(v),
            Err(PeerError::Timeout { .. }) => Reply::Timeout {
                note: String::new(),
            },
            Err(PeerError::Remote(e)) => Reply::Error(e),
            Err(PeerError::Closed(_)) => Reply::Closed,
            Err(e) => Reply::Invalid(e.to_string()),
        }
    }

    /// What the peer's own failure of a request (`reason`, its words, never the host's:
    /// `PeerError::InvalidResponse`, or an error `Peer::failed_here` marks) says of an
    /// answer one of the checker's bounds kept it from reading: the message size, the
    /// budget for partial messages, or the parsed cost, each named with its numbers. `None`
    /// for any other reason (an answer read and found not valid JSON-RPC). Read by the
    /// exact start of the library's wording (`peer/refused.rs`), never by words anywhere in
    /// it: a reason quoting the host's text (a malformed error object's) cannot pass for one.
    pub(super) fn unread(reason: &str) -> Option<String> {
        let num = |s: &str| s.parse::<usize>().ok();
        if let Some(rest) = reason.strip_prefix("the response of ") {
            let (bytes, rest) = rest.split_once(" bytes exceeds the ")?;
            let (limit, _) = rest.split_once("-byte limit")?;
            let (bytes, limit) = (num(bytes)?, num(limit)?);
            return Some(format!(
                "the host's answer of {bytes} bytes is over the checker's {limit}-byte message \
                 limit and was discarded unread"
            ));
        }
        if let Some(rest) = reason.strip_prefix("the response was refused after ") {
            let (bytes, rest) = rest.split_once(" bytes, unread: the budget of ")?;
            let (limit, _) = rest.split_once(" bytes")?;
            let (bytes, limit) = (num(bytes)?, num(limit)?);
            return Some(format!(
                "the host's answer was refused unread after {bytes} bytes: the checker's budget \
                 of {limit} bytes for partial messages ran out"
            ));
        }
        if let Some(rest) = reason.strip_prefix("the message would cost ") {
            let (cost, rest) = rest.split_once(" units parsed, over the limit of ")?;
            let limit = rest.split(|c: char| !c.is_ascii_digit()).next()?;
            let (cost, limit) = (num(cost)?, num(limit)?);
            return Some(format!(
                "the host's answer would cost {cost} units parsed, over the checker's budget \
                 of {limit} units, and was refused unread"
            ));
        }
        None
    }

    /// The answer in a few words, quoting at most an excerpt of what the host sent.
    pub(super) fn describe(&self) -> String {
        match self {
            Reply::Result(v) => format!("a result {}", excerpt(v)),
            Reply::Error(e) => format!("error {} {:?}", e.code, capped(e.message.to_string(), 120)),
            Reply::Invalid(why) => format!("an invalid response ({})", capped(why.clone(), 120)),
            Reply::Unread(why) => {
                format!("an answer it could not read ({})", capped(why.clone(), 160))
            }
            Reply::Timeout { note } => format!("no response within the timeout{note}"),
            Reply::Closed => "no response: the connection ended".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library's words for each bound it refuses an answer by are read with their
    /// numbers; anything else, a text quoting them inside included, is not.
    #[test]
    fn each_bound_is_read_from_the_peers_own_words_only() {
        let size = "the response of 1048661 bytes exceeds the 1048576-byte limit \
                    (PeerConfig::max_message_size) and was discarded unread";
        let got = Reply::unread(size).unwrap();
        assert!(
            got.contains("1048661 bytes") && got.contains("1048576-byte"),
            "{got}"
        );
        let budget = "the response was refused after 70000 bytes, unread: the budget of 65536 \
                      bytes for buffered partial messages is exhausted (message_budget; …)";
        let got = Reply::unread(budget).unwrap();
        assert!(
            got.contains("70000") && got.contains("65536 bytes"),
            "{got}"
        );
        let cost = "the message would cost 300000 units parsed, over the limit of 262144 \
                    (PeerConfig::max_parsed_cost); send fewer or larger values";
        let got = Reply::unread(cost).unwrap();
        assert!(
            got.contains("300000 units") && got.contains("262144 units"),
            "{got}"
        );
        let quoted = format!("malformed error object: invalid type: string \"{size}\"");
        assert_eq!(Reply::unread(&quoted), None);
        assert_eq!(Reply::unread("response has both result and error"), None);
    }
}
