//! The one identity of a request id in flight: when a request under one id is "the same
//! id" as one still in flight, and so refused (the MCP base protocol forbids reusing an id
//! within the session; JSON-RPC 2.0 §5 has a response carry "the same value" as its
//! request's id, so two requests in flight whose ids are the same value could not be told
//! apart by their answers). Applied by the async peer (`peer::serving`) and both sans-I/O
//! machines ([`crate::session::HostState`], [`crate::session::ServerState`]) alike.
//!
//! Reading: a number by its numeric value, as a JSON-RPC peer reading it as a double does
//! (`7`, `7.0` and `7e0` are one id; so are `0`, `0.0` and `-0.0`; `2.5` and `2.50` are
//! one); a string by its exact text (`"7"` is no number, and `"a"` no `"A"`); a number and
//! a string never one. The representation is not the identity: an answer still echoes the
//! id as its own request wrote it (§5). Public, so the checkers (`mcpl check`,
//! `mcpl check-host`) judge an id in flight by this one rule too.

use std::hash::{Hash, Hasher};

use super::{whole_float_integer, RequestId};

/// What makes two request ids one in flight ([`RequestId::identity`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identity<'a> {
    /// A number of integral value: an integer within 64 bits as written, or a whole float
    /// under 2^53 as the integer it names ([`whole_float_integer`]).
    Integer(i128),
    /// Any other number, held as a double: its bits (never zero, which is whole).
    Double(u64),
    /// A string, by its exact text.
    String(&'a str),
}

impl RequestId {
    /// The id's identity in flight (module docs): the one rule by which a request under it
    /// is refused while another of the same identity is in flight.
    pub fn identity(&self) -> Identity<'_> {
        match self {
            RequestId::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Identity::Integer(i128::from(u)),
                (None, Some(i)) => Identity::Integer(i128::from(i)),
                (None, None) => match whole_float_integer(n) {
                    Some(i) => Identity::Integer(i128::from(i)),
                    None => Identity::Double(n.as_f64().unwrap_or(f64::NAN).to_bits()),
                },
            },
            RequestId::String(s) => Identity::String(s),
        }
    }

    /// Whether the two ids are one in flight ([`RequestId::identity`]).
    pub fn same_in_flight(&self, other: &RequestId) -> bool {
        self.identity() == other.identity()
    }
}

/// A request id kept by its identity in flight: equal and hashed as
/// [`RequestId::identity`], so a set or a map of them finds `7.0` under `7`, and keeping the
/// representation it was taken under (what its answer echoes, JSON-RPC 2.0 §5).
#[derive(Debug, Clone)]
pub struct InFlightId(pub(crate) RequestId);

impl InFlightId {
    /// `id` kept by its identity.
    pub fn of(id: &RequestId) -> InFlightId {
        InFlightId(id.clone())
    }

    /// The id as it was taken (its representation, what its answer echoes).
    pub fn id(&self) -> &RequestId {
        &self.0
    }
}

impl PartialEq for InFlightId {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_in_flight(&other.0)
    }
}

impl Eq for InFlightId {}

impl Hash for InFlightId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.identity().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn id(text: &str) -> RequestId {
        let v: Value = serde_json::from_str(text).expect("JSON");
        RequestId::from_request_value(&v).expect("a request id")
    }

    #[test]
    fn jsonrpc_s5_a_number_is_one_id_by_its_value_and_a_string_by_its_text() {
        for (a, b) in [
            ("7", "7.0"),
            ("7", "7e0"),
            ("-3", "-3.0"),
            ("0", "-0.0"),
            ("0", "-0"),
            ("0.0", "-0.0"),
            ("0", "0.0"),
            ("2.5", "2.50"),
            ("18446744073709551615", "18446744073709551615"),
        ] {
            assert!(id(a).same_in_flight(&id(b)), "{a} and {b}");
            assert_eq!(InFlightId(id(a)), InFlightId(id(b)), "{a} and {b}");
            let set: std::collections::HashSet<_> = [InFlightId(id(a))].into();
            assert!(set.contains(&InFlightId(id(b))), "{a} and {b}");
        }
        for (a, b) in [
            ("7", "\"7\""),
            ("7.0", "\"7.0\""),
            ("\"a\"", "\"A\""),
            ("-1", "18446744073709551615"),
            ("2.5", "-2.5"),
            ("7", "7.5"),
        ] {
            assert!(!id(a).same_in_flight(&id(b)), "{a} and {b}");
        }
    }
}
