//! A frame's top-level value read the slow way, a batch bounded as it is read.

use std::fmt;

use serde_json::Value;

/// A frame's top-level JSON value: a batch (JSON array) or anything else.
pub(super) enum Top {
    Batch(BoundedBatch),
    Single(Value),
}

/// A batch read with at most the limit's worth of entries kept.
pub(super) enum BoundedBatch {
    /// Every entry (the limit was not exceeded).
    Within(Vec<Value>),
    /// More entries than the limit: only their count is known, nothing of them is kept, so
    /// the memory a huge batch of tiny entries can drive stays bounded by the limit.
    Over { count: usize },
}

/// Reads a whole frame that starts with `[` as a batch bounded to `limit` entries (entries
/// past it are syntax-checked and counted, not built); errors as `serde_json::from_str`.
pub(super) fn parse_batch(text: &str, limit: usize) -> Result<Top, serde_json::Error> {
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
