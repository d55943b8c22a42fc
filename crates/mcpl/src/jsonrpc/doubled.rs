//! What a `Value` loses that decides a request: a top-level member named more than once.
//! serde_json keeps the last of them, so a request naming `id`, `method` or `params` twice
//! would be handled as one the sender may not have meant (and one a validator in between,
//! reading the first, did not see).
//!
//! Reading of JSON-RPC 2.0 §4 and §5 (RFC 8259 §4 leaves an object's duplicate names to the
//! reader, I-JSON forbids them, RFC 7493 §2.3, as `mcpl-cli` does for manifests; fail
//! closed): such a request is an Invalid Request, answered `-32600` and never
//! handled: under a null id when `id` is named twice (which request it is cannot be told,
//! [`DOUBLED_ID`]), under its id when `method` or `params` is. A response naming a member
//! twice is read as its last, as a parser reads it: only the side that sent the request
//! writes its id back, and the answer is that side's to give (save the answers below).
//!
//! A message that decides authority ([`decides_authority`]: the policy, `featureSets/update`,
//! either form) is read further: a member named twice anywhere in its text
//! ([`super::repeated::first_repeated`]) leaves the policy in doubt, and §5.4 rejects a
//! policy whose meaning is in doubt as malformed, fail closed. Reading: it is refused as
//! one naming `params` twice is, an Invalid Request (`-32600` under its id; a Notification
//! is reported), never handled, so what a validator in between read (the first copy) and
//! what would be handled (the last) cannot differ. No other message is read further: the
//! hot path (`tools/call`, `push/event`, responses) never runs the scan. The answer to a
//! request whose answer decides authority (`answer_read_whole`: `initialize`,
//! `mcpl/manifest`, noted by the peer when it sends one, through a session's
//! `send_request` or a plain `Peer::request`/`request_raw` alike, and by a sans-I/O
//! `HostState` reading the text, `HostState::handle_text`) is read whole the same way, and
//! one naming a member twice fails that request as unreadable (`invalid response`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::repeated::{first_repeated, Repeated};
use super::{invalid, InvalidMessage, Message};

/// Why a request-shaped object whose `id` member is named more than once is no valid
/// request: which request the sender meant, and so which id an answer names, is in doubt.
pub(crate) const DOUBLED_ID: &str =
    "the id member is named more than once, so which request it is cannot be told";

/// The request envelope member an object names more than once: `id` first, then `method`,
/// then `params` (the first of them that is); else, in a message deciding authority, the
/// first member named twice anywhere in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Doubled {
    Id,
    Method,
    Params,
    /// In a message that [`decides_authority`]: the first name it repeats, and where.
    Within(Repeated),
}

/// Whether a message with this `method` decides authority, and so is refused for a member
/// named twice anywhere in its text (see the module docs): the policy, `featureSets/update`
/// (§5.3, §6.7), in either form.
pub(crate) fn decides_authority(method: Option<&str>) -> bool {
    use crate::protocol::Method as _;
    method == Some(crate::protocol::feature_sets::FeatureSetsUpdate::NAME)
}

/// Whether the answer to a request of `method` decides authority, and so is refused for a
/// member named twice anywhere in its text: the manifest the host reads from an
/// `initialize` result (§5.1) or an `mcpl/manifest` result (§17.2), which decides what is
/// granted. Reading (§5.4, fail closed; I-JSON, RFC 7493 §2.3, which `mcpl validate`
/// applies to the same text): the request fails as its answer could not be read (the
/// peer's `invalid response`), reported, and the repeat is never taken as its last copy.
pub fn answer_read_whole(method: &str) -> bool {
    method == "initialize" || method == "mcpl/manifest"
}

/// Whether the message `value` [`decides_authority`] (its `method` member, as read).
fn value_decides(value: &Value) -> bool {
    decides_authority(value.get("method").and_then(Value::as_str))
}

/// [`Message::from_value`] of a request-shaped `value` read from a text that names
/// `doubled` more than once (see the module docs): an Invalid Request; anything else as
/// `from_value` reads it.
pub(crate) fn from_value_read(
    value: Value,
    doubled: Option<Doubled>,
) -> Result<Message, InvalidMessage> {
    // A request, or an id with no method nor outcome, which is answered as one is
    // (`InvalidThen::AnswerUnlessOurs`): an `id` named twice leaves either unanswered.
    let asks = |v: &Value| v.get("method").is_some() || super::Shape::of(v).bare();
    // A member named twice within a message noted as deciding authority: a response too.
    let within = |d: &Doubled| matches!(d, Doubled::Within(_));
    let Some(doubled) = doubled.filter(|d| within(d) || asks(&value)) else {
        return Message::from_value(value);
    };
    let reason =
        match &doubled {
            Doubled::Id => return Err(invalid(None, DOUBLED_ID)),
            Doubled::Method | Doubled::Params => {
                format!(
            "the {} member is named more than once, so which one the sender meant cannot be \
             told",
            if doubled == Doubled::Method { "method" } else { "params" }
        )
            }
            Doubled::Within(r) => {
                let at = match r.path.as_str() {
                    "" => "the top-level object".to_owned(),
                    path => path.to_owned(),
                };
                let what = match value.get("method") {
                    Some(_) => "policy",
                    None => "manifest",
                };
                format!(
                "{:?} is named more than once in {at}, so which {what} the sender meant cannot \
                 be told: malformed, refused whole (§5.4; member names are unique, I-JSON, \
                 RFC 7493 §2.3); the sender must name each member once",
                r.name
            )
            }
        };
    match Message::from_value(value)? {
        Message::Request(r) => Err(invalid(Some(r.id), reason)),
        Message::Response(r) => Err(invalid(r.id, reason)),
        Message::Notification(_) => Err(invalid(None, reason)),
    }
}

/// The member the JSON object in `text` names more than once at its top level (names
/// unescaped: `"i\u0064"` is `id`), read again from the text, as a `Value` keeps only one;
/// `None` for a text that is no object or does not parse. Only the slow path reads it: the
/// fast reader ([`Message::parse_object`]) declines any duplicated envelope member.
pub(crate) fn doubled_member(text: &str) -> Option<Doubled> {
    let mut de = serde_json::Deserializer::from_str(text);
    Members.deserialize(&mut de).ok().flatten()
}

/// What the message `value`, read from `text`, names more than once: [`doubled_member`],
/// else, when it [`decides_authority`], the first name repeated anywhere in `text`
/// ([`Doubled::Within`]). The one reading of a single message, the peer's and
/// [`Message::parse`]'s.
pub(crate) fn doubled_in(text: &str, value: &Value) -> Option<Doubled> {
    doubled_member(text).or_else(|| {
        value_decides(value)
            .then(|| first_repeated(text).map(Doubled::Within))
            .flatten()
    })
}

/// [`doubled_in`] for each object entry of a batch in `text` (`entries` being its entries
/// as read; `answers` the indices of those answering a request whose answer is read whole,
/// [`answer_read_whole`]): its index in the batch (every entry counts) and what it names more than once,
/// in entry order (the peer's reading; a sans-I/O driver splits a batch itself). The text
/// is scanned whole again only when an entry [`decides_authority`].
pub(crate) fn doubled_in_batch(
    text: &str,
    entries: &[Value],
    answers: &[usize],
) -> Vec<(usize, Doubled)> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut doubled = Entries.deserialize(&mut de).unwrap_or_default();
    if answers.is_empty() && !entries.iter().any(value_decides) {
        return doubled;
    }
    for (at, repeated) in super::repeated::first_repeated_each(text) {
        let decides = answers.contains(&at) || entries.get(at).is_some_and(value_decides);
        if decides && !doubled.iter().any(|(i, _)| *i == at) {
            doubled.push((at, Doubled::Within(repeated)));
        }
    }
    doubled.sort_by_key(|(at, _)| *at);
    doubled
}

/// Counts an object's top-level `id`, `method` and `params` members.
struct Members;

impl<'de> DeserializeSeed<'de> for Members {
    type Value = Option<Doubled>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Members {
    type Value = Option<Doubled>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut ids, mut methods, mut params) = (0_usize, 0_usize, 0_usize);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => ids += 1,
                "method" => methods += 1,
                "params" => params += 1,
                _ => {}
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(if ids > 1 {
            Some(Doubled::Id)
        } else if methods > 1 {
            Some(Doubled::Method)
        } else if params > 1 {
            Some(Doubled::Params)
        } else {
            None
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// [`Members`] of each entry of an array.
struct Entries;

impl<'de> DeserializeSeed<'de> for Entries {
    type Value = Vec<(usize, Doubled)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Entries {
    type Value = Vec<(usize, Doubled)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut doubled = Vec::new();
        let mut index = 0;
        while let Some(entry) = seq.next_element_seed(Members)? {
            if let Some(d) = entry {
                doubled.push((index, d));
            }
            index += 1;
        }
        Ok(doubled)
    }
}
