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

/// The parsed cost of `text` in units of one JSON value: each object counts
/// [`OBJECT_COST`], each array, member and element one more (counted at `[`, `:` and `,`
/// outside strings), plus one for the top-level value. Linear in the text, no allocation;
/// the text need not be valid JSON (an invalid one fails to parse later, at a cost within
/// the bound).
pub fn parsed_cost(text: &str) -> usize {
    let mut cost: usize = 1;
    let mut in_string = false;
    let mut escaped = false;
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
            b'[' | b':' | b',' => cost = cost.saturating_add(1),
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
/// long string, at its length.
pub fn parsed_bytes(len: usize, cost: usize) -> usize {
    len.saturating_add(cost.saturating_mul(UNIT_BYTES))
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
        assert_eq!(parsed_cost(&text), 1 + 1 + 999 + 1000 * (OBJECT_COST + 1));
    }

    #[test]
    fn short_texts_are_never_scanned() {
        assert!(!may_exceed("{}", 1 + 2 * OBJECT_COST));
        assert!(may_exceed("{}", 2 * OBJECT_COST));
    }
}
