//! A text's top-level value read the slow way, a batch bounded as it is read, and the
//! requests of a batch that begins a text the parser refused for what follows it: the one
//! reading of the async peer and of [`super::ParseError::owed_answers`].

use crate::jsonrpc::RequestId;

use std::fmt;

use serde_json::Value;

/// A frame's top-level JSON value: a batch (JSON array) or anything else.
pub(crate) enum Top {
    Batch(BoundedBatch),
    Single(Value),
}

/// A batch read with at most the limit's worth of entries kept.
pub(crate) enum BoundedBatch {
    /// Every entry (the limit was not exceeded).
    Within(Vec<Value>),
    /// More entries than the limit: only their count is known, nothing of them is kept, so
    /// the memory a huge batch of tiny entries can drive stays bounded by the limit.
    Over { count: usize },
}

/// Reads a whole frame that starts with `[` as a batch bounded to `limit` entries (entries
/// past it are syntax-checked and counted, not built); errors as `serde_json::from_str`.
pub(crate) fn parse_batch(text: &str, limit: usize) -> Result<Top, serde_json::Error> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

    struct Seed(usize);
    impl<'de> Visitor<'de> for Seed {
        type Value = BoundedBatch;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BoundedBatch, A::Error> {
            let mut entries = Vec::new();
            while entries.len() < self.0 {
                match seq.next_element::<Value>()? {
                    Some(v) => entries.push(v),
                    None => return Ok(BoundedBatch::Within(entries)),
                }
            }
            // At the limit: one more entry makes the batch too large.
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(BoundedBatch::Within(entries));
            }
            drop(entries);
            let mut count = self.0 + 1;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                count += 1;
            }
            Ok(BoundedBatch::Over { count })
        }
    }
    impl<'de> DeserializeSeed<'de> for Seed {
        type Value = BoundedBatch;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<BoundedBatch, D::Error> {
            d.deserialize_seq(self)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let batch = Seed(limit).deserialize(&mut de)?;
    de.end()?;
    Ok(Top::Batch(batch))
}

/// What the batch a text begins with shows, the parser having refused the text for what
/// follows that batch ([`batch_requests_before`]).
#[derive(Debug, Default)]
pub(crate) struct BatchFirst {
    /// Each request's id, with whether it is the policy Request (§6.7), in order, each once.
    pub(crate) requests: Vec<(RequestId, bool)>,
    /// An entry is the policy Notification (§6.7: `featureSets/update` with no `id`),
    /// refused unread with the line.
    pub(crate) policy_notification: bool,
    /// An entry is the policy Request (§6.7, an `id` member) not among `requests`: its id
    /// in doubt (named twice), none (`null`, `1.5`), or one an earlier entry had; refused
    /// unread with the line all the same.
    pub(crate) policy_in_doubt: bool,
}

/// The policy message's method (§6.7), as every refusal reads it.
use super::head::POLICY;

/// The requests of the batch `trimmed` begins with, which the parser refused for what
/// follows that batch (`trailing characters`): the batch, read alone, within `max_batch`
/// entries; each entry with a `method` and an id read without doubt (a valid id, named
/// once, `jsonrpc::doubled`), in order, each once; and whether an entry is the policy
/// Notification. Empty for anything else (no complete batch first, one over the bound):
/// the line keeps its one `-32700` under a null id. Run only on a text the parser refused,
/// never on a valid one.
pub(crate) fn batch_requests_before(trimmed: &str, max_batch: usize) -> BatchFirst {
    let mut first = BatchFirst::default();
    let mut stream =
        serde_json::Deserializer::from_str(trimmed).into_iter::<serde::de::IgnoredAny>();
    if !matches!(stream.next(), Some(Ok(_))) {
        return first;
    }
    let Some(batch) = trimmed.get(..stream.byte_offset()) else {
        return first;
    };
    let Ok(Top::Batch(BoundedBatch::Within(entries))) = parse_batch(batch, max_batch) else {
        return first;
    };
    // Linear in the batch, whatever the peer sends (this runs on every line refused for
    // what follows its batch): `doubled` is in entry order (`doubled_in_batch`), walked
    // beside the entries as the reader's walk is, and the ids seen are a set.
    let doubled = super::doubled::doubled_in_batch(batch, &entries, &[]);
    let mut doubled = doubled.iter().peekable();
    let mut seen = std::collections::HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let mut id_in_doubt = false;
        while let Some((_, d)) = doubled.next_if(|(at, _)| *at <= i) {
            id_in_doubt |= *d == super::doubled::Doubled::Id;
        }
        let Some(method) = entry.get("method") else {
            continue;
        };
        let policy = method.as_str() == Some(POLICY);
        if id_in_doubt {
            first.policy_in_doubt |= policy;
            continue;
        }
        match entry.get("id") {
            None => first.policy_notification |= policy,
            Some(id) => match RequestId::from_request_value(id) {
                // Each once by its identity (`jsonrpc::identity::Identity`): `1.0` after `1` would be
                // a second answer under one id (JSON-RPC 2.0 §5).
                Some(id) if seen.insert(super::InFlightId::of(&id)) => {
                    first.requests.push((id, policy))
                }
                _ => first.policy_in_doubt |= policy,
            },
        }
    }
    first
}
