//! The memory a JSON text costs once parsed, counted from the text alone (issue #20).
//!
//! A parsed message can take far more memory than its text: every non-empty object becomes
//! a map with a node of its own (about 630 bytes for `{"a":1}`, eight bytes of text). A
//! 16 MiB line of such objects took a server to 1.43 GB. [`parsed_cost`] counts what a text
//! would build, linearly and without allocating, so a receiver refuses it before it is built.

/// Cost units an object counts: one map node's allocation, in units of one JSON value.
pub const OBJECT_COST: usize = 20;

/// The default bound on [`parsed_cost`] of one message (4,194,304 units: about 128 MiB
/// parsed at worst, ≈ 190,000 one-member objects or 4 million scalars).
pub const DEFAULT_MAX_PARSED_COST: usize = 4 * 1024 * 1024;

/// Members one map node holds, as [`held_bytes`] counts them: past every this many members
/// of the text, one more node's [`OBJECT_COST`].
const MEMBERS_PER_NODE: usize = 6;

/// The parsed cost of `text` in units of one JSON value: each object counts
/// [`OBJECT_COST`], each array, member and element one more (counted at `[`, `:` and `,`
/// outside strings), every sixth member one more node's [`OBJECT_COST`] (a wide object
/// fills one map node per six members), plus one for the top-level value. The members are
/// counted across the text, not per object, so the cost is never below what the value
/// built from the text holds, as the crate weighs it. Linear in the text, no allocation;
/// the text need not be valid JSON (an invalid one fails to parse later, at a cost within
/// the bound).
pub fn parsed_cost(text: &str) -> usize {
    let mut cost: usize = 1;
    let mut in_string = false;
    let mut escaped = false;
    let mut members = 0usize;
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => cost = cost.saturating_add(OBJECT_COST),
            b':' => {
                cost = cost.saturating_add(1);
                members += 1;
                if members == MEMBERS_PER_NODE {
                    members = 0;
                    cost = cost.saturating_add(OBJECT_COST);
                }
            }
            b'[' | b',' => cost = cost.saturating_add(1),
            _ => {}
        }
    }
    cost
}

/// Heap bytes one [`parsed_cost`] unit stands for: one JSON value (`serde_json::Value`, 32
/// bytes on 64-bit targets); an object's [`OBJECT_COST`] units are about its map node.
pub const UNIT_BYTES: usize = std::mem::size_of::<serde_json::Value>();

/// The heap a text of `len` bytes and [`parsed_cost`] `cost` is estimated to hold once
/// parsed: its length (what its strings can hold) plus [`UNIT_BYTES`] per unit. 2,000
/// `{"a":1}` (16 KB of text) are estimated at 1.4 MB, what they hold parsed; a text of one
/// long string, at its length. A `Value` already built is weighed by `held_bytes`, the
/// same estimate read from it.
pub fn parsed_bytes(len: usize, cost: usize) -> usize {
    len.saturating_add(cost.saturating_mul(UNIT_BYTES))
}

/// The heap a parsed `Value` holds, estimated from its shape: the same quantity
/// [`parsed_bytes`] estimates from a text before anything is built, read from what was
/// built. Each value's slot ([`UNIT_BYTES`]), each string's bytes, and each non-empty
/// object's B-tree nodes ([`OBJECT_COST`] units, 640 bytes, per six members, at least one:
/// the text alone cannot tell how members share nodes, so [`parsed_cost`] counts one node
/// per object and one unit per member). Its JSON text is no measure: `{"a":0}` is 7 bytes
/// of text and about 630 once parsed, so what is held weighed by its text held 30 to 90
/// times its bound for text dense in small objects. Linear in the value, walked with a
/// stack of its own, so any depth is safe.
pub(crate) fn held_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    const NODE_BYTES: usize = OBJECT_COST * UNIT_BYTES;
    let mut total = UNIT_BYTES;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        let here = match v {
            Value::String(s) => s.len(),
            Value::Array(a) => {
                stack.extend(a.iter());
                a.len().saturating_mul(UNIT_BYTES)
            }
            Value::Object(o) if o.is_empty() => 0,
            Value::Object(o) => {
                stack.extend(o.values());
                let nodes = o.len().div_ceil(MEMBERS_PER_NODE);
                let keys: usize = o.keys().map(String::len).sum();
                nodes.saturating_mul(NODE_BYTES).saturating_add(keys)
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        };
        total = total.saturating_add(here);
    }
    total
}

/// Whether `text` might cost more than `limit` without counting it: no text of `n` bytes
/// can cost more than `1 + OBJECT_COST * n`, so a short one is never scanned.
pub fn may_exceed(text: &str, limit: usize) -> bool {
    text.len().saturating_mul(OBJECT_COST).saturating_add(1) > limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_arrays_members_and_elements_are_counted_outside_strings() {
        assert_eq!(parsed_cost("1"), 1);
        assert_eq!(parsed_cost("{}"), 1 + OBJECT_COST);
        assert_eq!(parsed_cost(r#"{"a":1}"#), 1 + OBJECT_COST + 1);
        assert_eq!(parsed_cost("[1,2,3]"), 1 + 1 + 2);
        // Braces, colons and commas inside strings (escaped quotes too) are text.
        assert_eq!(parsed_cost(r#""{[:,\"{,]""#), 1);
        assert_eq!(parsed_cost(r#"{"k\\":"{"}"#), 1 + OBJECT_COST + 1);
    }

    #[test]
    fn a_flood_of_small_objects_costs_in_proportion_to_what_it_builds() {
        let text = format!("[{}]", vec![r#"{"a":1}"#; 1000].join(","));
        assert_eq!(
            parsed_cost(&text),
            1 + 1 + 999 + 1000 * (OBJECT_COST + 1) + 166 * OBJECT_COST
        );
    }

    /// A wide object costs a node per six members, as it holds once built: the text's
    /// estimate is never below what `held_bytes` weighs the parsed value at (it was half of
    /// it for an object of a thousand members, one node counted for all).
    #[test]
    fn wide_objects_cost_what_they_hold_once_built() {
        for members in [1usize, 5, 6, 7, 12, 100, 1000] {
            let text = format!(
                "{{{}}}",
                (0..members)
                    .map(|i| format!(r#""k{i}":{i}"#))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let held = held_bytes(&serde_json::from_str(&text).unwrap());
            let estimated = parsed_bytes(text.len(), parsed_cost(&text));
            assert!(estimated >= held, "{members} members: {estimated} < {held}");
            // … and not far above it: the members are counted across the text, so an
            // object of six members is weighed as two nodes; its text counts what its keys
            // hold, and each member and comma a value's slot.
            assert!(
                estimated <= 3 * held,
                "{members} members: {estimated} > 3 × {held}"
            );
        }
        // A thousand members in one object, counted across objects alike.
        let one = format!("{{{}}}", vec![r#""a":1"#; 1000].join(","));
        assert_eq!(
            parsed_cost(&one),
            1 + OBJECT_COST + 1000 + 999 + 166 * OBJECT_COST
        );
    }

    #[test]
    fn short_texts_are_never_scanned() {
        assert!(!may_exceed("{}", 1 + 2 * OBJECT_COST));
        assert!(may_exceed("{}", 2 * OBJECT_COST));
    }
}
