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
    /// the `-32603` it delivered is no error of the host's ([`super::watched::Unread`]).
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
