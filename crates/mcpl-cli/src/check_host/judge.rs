//! Pure verdict helpers: the §11.3 result shape, and the bounded excerpts every report
//! detail is made of (a detail quotes what the host sent, so it is capped, issue #20).

use std::io;

use serde_json::Value;

/// Most bytes of one report detail; longer ones are cut at a character boundary and end
/// in `…`. With the catalogue's 30 checks the whole report stays under 30 × 6 × 512 B
/// (90 KiB, JSON escaping included) whatever the host sends.
pub(super) const DETAIL_LIMIT: usize = 512;

/// Most bytes of the JSON a detail quotes from the host (a result, a list of paths).
const QUOTE_LIMIT: usize = 200;

/// `s` cut to at most `limit` bytes at a character boundary, `…` marking a cut.
pub(super) fn capped(mut s: String, limit: usize) -> String {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// A writer that keeps the first `limit` bytes and fails past them, so a huge value is
/// never serialised whole just to be cut.
struct Bounded {
    out: Vec<u8>,
    limit: usize,
    cut: bool,
}

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.out.len());
        if buf.len() > room {
            self.out
                .extend_from_slice(buf.get(..room).unwrap_or_default());
            self.cut = true;
            return Err(io::Error::other("excerpt limit reached"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The compact JSON of `v`, at most [`QUOTE_LIMIT`] bytes of it (`…` marking a cut).
pub(super) fn excerpt(v: &Value) -> String {
    let mut w = Bounded {
        out: Vec::new(),
        limit: QUOTE_LIMIT,
        cut: false,
    };
    let _ = serde_json::to_writer(&mut w, v);
    let mut s = String::from_utf8_lossy(&w.out).into_owned();
    if w.cut {
        // The cut may split a character: the lossy decoding turned it into U+FFFD.
        s.push('…');
    }
    s
}

/// `items` joined with `, ` ("nothing" when empty), at most [`QUOTE_LIMIT`] bytes of them
/// and a count of the rest.
pub(super) fn list(items: &[&str]) -> String {
    if items.is_empty() {
        return "nothing".to_owned();
    }
    let mut s = String::new();
    for (n, item) in items.iter().enumerate() {
        if s.len() + item.len() > QUOTE_LIMIT {
            let rest = items.len() - n;
            return format!("{}… and {rest} more", capped(s, QUOTE_LIMIT));
        }
        if n > 0 {
            s.push_str(", ");
        }
        s.push_str(item);
    }
    s
}

/// A probe's grant rule read twice (§5.4, §6.7): `sent`, whether the grant in force when
/// the checker sent it allows it; `answered`, whether the one in force when the host
/// answered does (every policy Request the host sent before its answer, in wire order,
/// applied). A reduction takes effect at the host before its Request goes out, so an answer
/// after it is judged under it; an expansion takes effect only once the host has read the
/// receipt, which the checker cannot see, so either answer is then conforming.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meanwhile {
    pub(super) sent: bool,
    pub(super) answered: bool,
}

impl Meanwhile {
    /// What the host must do: allow it (`Some(true)`), refuse it (`Some(false)`), or either
    /// (`None`: allowed only by an expansion the host may not have taken up yet).
    pub(super) fn expected(self) -> Option<bool> {
        match (self.sent, self.answered) {
            (_, false) => Some(false),
            (true, true) => Some(true),
            (false, true) => None,
        }
    }

    /// Said in a verdict when the grant changed under the probe; empty when it did not.
    pub(super) fn note(self) -> &'static str {
        match (self.sent, self.answered) {
            (true, false) => {
                " (under the grant the host narrowed while the probe was outstanding: a \
                 reduction takes effect first, §6.7)"
            }
            (false, true) => {
                " (the host widened its grant while the probe was outstanding: an expansion \
                 takes effect once the receipt is read, §6.7, so either answer conforms)"
            }
            _ => "",
        }
    }
}

/// `accepted` of the first per-message result.
pub(super) fn first_accepted(r: &Value) -> Option<bool> {
    r.get("results")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|m| m.get("accepted"))
        .and_then(Value::as_bool)
}

/// §11.3's result rule, the core's ([`mcpl::protocol::inference::result_defects`]), with
/// what it quotes bounded.
pub(super) fn inference_result_defects(r: &Value) -> (Vec<String>, Vec<String>) {
    let (fail, warn) = mcpl::protocol::inference::result_defects(r);
    let cap = |v: Vec<String>| v.into_iter().map(|d| capped(d, QUOTE_LIMIT)).collect();
    (cap(fail), cap(warn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §11.3 / App. B.4: content is required and a string; blocks only warn; the other
    /// members are judged when present, `finishReason` against the enum.
    #[test]
    fn s11_3_inference_result_defects() {
        let ok = json!({ "content": "OK", "model": "m", "finishReason": "max_tokens",
                         "usage": { "inputTokens": 1, "outputTokens": 1 } });
        assert_eq!(inference_result_defects(&ok), (vec![], vec![]));
        assert_eq!(
            inference_result_defects(&json!({ "content": "OK" })),
            (vec![], vec![])
        );
        let blocks = json!({ "content": [ { "type": "text", "text": "OK" } ] });
        let (fail, warn) = inference_result_defects(&blocks);
        assert!(fail.is_empty() && warn.len() == 1, "{warn:?}");
        let bad = json!({ "content": [ { "type": "video" } ], "model": 3,
                          "finishReason": "tired", "usage": [] });
        let (fail, warn) = inference_result_defects(&bad);
        assert_eq!(fail.len(), 4, "{fail:?}");
        assert!(fail[0].starts_with("content[0] type \"video\""), "{fail:?}");
        assert_eq!(fail[2], "finishReason \"tired\" is not one of App. B.4's");
        assert!(warn.is_empty(), "{warn:?}");
        // The value an audited host sent (issue #19): "stop" is OpenAI's, not App. B.4's.
        let (fail, _) =
            inference_result_defects(&json!({ "content": "OK", "finishReason": "stop" }));
        assert_eq!(fail, ["finishReason \"stop\" is not one of App. B.4's"]);
        let (_, warn) = inference_result_defects(
            &json!({ "content": "OK", "usage": { "inputTokens": -1, "outputTokens": "9" } }),
        );
        assert_eq!(warn.len(), 2, "{warn:?}");
        let (fail, _) = inference_result_defects(&json!({}));
        assert_eq!(fail, ["content missing"]);
        let (fail, _) = inference_result_defects(&json!("OK"));
        assert_eq!(fail, ["the result is not an object"]);
    }

    /// §6.7: an answer after a reduction must follow it; one after an expansion may follow
    /// either grant (the host takes it up once it has read the receipt).
    #[test]
    fn s6_7_a_grant_changed_under_a_probe_is_read_as_its_direction_says() {
        let m = |sent, answered| Meanwhile { sent, answered };
        assert_eq!(m(true, true).expected(), Some(true));
        assert_eq!(m(false, false).expected(), Some(false));
        assert_eq!(m(true, false).expected(), Some(false));
        assert_eq!(m(false, true).expected(), None);
        assert_eq!(m(true, true).note(), "");
        assert!(m(true, false).note().contains("narrowed"));
        assert!(m(false, true).note().contains("widened"));
    }

    /// Issue #20: what a detail quotes from the host is bounded, however large.
    #[test]
    fn excerpts_and_lists_are_bounded() {
        let huge = json!({ "content": "x".repeat(1 << 20) });
        let e = excerpt(&huge);
        assert!(e.len() <= QUOTE_LIMIT + '…'.len_utf8(), "{}", e.len());
        assert!(
            e.starts_with("{\"content\":\"xxx") && e.ends_with('…'),
            "{e}"
        );
        assert_eq!(excerpt(&json!({ "a": 1 })), "{\"a\":1}");
        let many: Vec<String> = (0..100_000).map(|i| format!("path{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let l = list(&refs);
        assert!(l.len() < QUOTE_LIMIT + 40 && l.ends_with(" more"), "{l}");
        assert_eq!(list(&["a", "b"]), "a, b");
        assert_eq!(list(&[]), "nothing");
        let c = capped("é".repeat(600), DETAIL_LIMIT);
        assert!(c.len() <= DETAIL_LIMIT + 3 && c.ends_with('…'));
    }
}
