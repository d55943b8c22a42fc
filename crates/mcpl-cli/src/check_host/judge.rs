//! Pure verdict helpers: the §11.3 result shape, and the bounded excerpts every report
//! detail is made of (a detail quotes what the host sent, so it is capped, issue #20).

use std::io;

use mcpl::jsonrpc::codes;
use serde_json::Value;

use crate::check::report::Status;

/// Most bytes of one report detail; longer ones are cut at a character boundary and end
/// in `…`. With the catalogue's 60 checks the whole report stays under 60 × 6 × 512 B
/// (180 KiB, JSON escaping included) whatever the host sends.
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
///
/// `notified`: the host changed its grant by a Notification since its last receipt
/// (`host.policy-is-request` fails it). The server applies only its `disabled` list (§6.7),
/// the host may have applied all of it, so the checker does not know the grant the host
/// holds: either answer conforms. A refusal is what a reduction asks (§6.7: it binds the
/// host first, whatever the carrier); a result follows a widening the host believes made.
/// The one defect is the Notification, judged once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meanwhile {
    pub(super) sent: bool,
    pub(super) answered: bool,
    pub(super) notified: bool,
}

impl Meanwhile {
    /// What the host must do: allow it (`Some(true)`), refuse it (`Some(false)`), or either
    /// (`None`: allowed only by an expansion the host may not have taken up yet, or under a
    /// grant the host changed by Notification).
    pub(super) fn expected(self) -> Option<bool> {
        if self.notified {
            return None;
        }
        match (self.sent, self.answered) {
            (_, false) => Some(false),
            (true, true) => Some(true),
            (false, true) => None,
        }
    }

    /// Said in a verdict when the grant changed under the probe; empty when it did not.
    pub(super) fn note(self) -> &'static str {
        if self.notified {
            return " (after a grant change the host sent as a featureSets/update Notification, \
                    host.policy-is-request: the server applies only its disabled list, §6.7, \
                    so the grant the host holds is not known and either answer conforms)";
        }
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

/// `host.refusal-code` (§6.6): "when a host does reject, it MUST use a JSON-RPC error object
/// … and MUST populate the documented code". A server-initiated request the policy does not
/// allow (a `push/event`, an `inference/request`) is refused for a disabled feature set
/// (`-32001`) or a denied capability (`-32002`, §5.4, §14.6); any other code breaks that
/// MUST (AUDIT-001 §2.1: the documented factories were never invoked). Reading: `-32601`
/// from a host whose own advertisement (§5.2) does not claim the capability the method needs
/// is JSON-RPC's "method not found" from a host that does not implement it, not a §6.6
/// rejection, so it passes; from a host that claims it, it fails. `-32003`, §6.6's code for
/// an unknown feature set (SHOULD), passes only under a set the host may treat as not
/// declared: one whose declaration is invalid (§6.4 rule 1, `check.typo`), which a host may
/// discard rather than keep as disabled (`invalid_uses`); under a valid declaration the set
/// is known, and `-32003` fails. Only refusals the grant asks for are judged
/// (`expected == Some(false)`): an allowed request refused for another reason, or one the
/// grant widened under (either answer conforms, §6.7), is not.
#[derive(Debug, Default)]
pub(super) struct RefusalCodes {
    judged: Vec<String>,
    wrong: Vec<String>,
}

impl RefusalCodes {
    /// Notes the `code` refusing `method` (which needs `needs`), under the grant's
    /// expectation ([`Meanwhile::expected`]); `claimed`: the host's own advertisement claims
    /// `needs`; `undeclarable`: the request's feature set is one the host may treat as not
    /// declared (its declaration invalid, §6.4 rule 1). Returns whether the refusal was
    /// judged (for the tests).
    pub(super) fn note(
        &mut self,
        method: &str,
        needs: &str,
        expected: Option<bool>,
        code: i64,
        (claimed, undeclarable): (bool, bool),
    ) -> bool {
        if expected != Some(false) {
            return false;
        }
        let documented = [codes::FEATURE_SET_NOT_ENABLED, codes::CAPABILITY_DENIED];
        if documented.contains(&code) {
            self.judged.push(format!("{method} refused {code}"));
        } else if code == codes::UNKNOWN_FEATURE_SET && undeclarable {
            self.judged.push(format!(
                "{method} refused {code}, the unknown feature set's code (§6.6), for a set whose \
                 declaration is invalid (§6.4 rule 1)"
            ));
        } else if code == codes::METHOD_NOT_FOUND && !claimed {
            self.judged.push(format!(
                "{method} refused -32601 by a host whose advertisement does not claim {needs} \
                 (it does not implement it)"
            ));
        } else {
            let why = if code == codes::METHOD_NOT_FOUND {
                format!(" (the host advertises {needs}, so the method is known to it)")
            } else if code == codes::UNKNOWN_FEATURE_SET {
                " (the unknown feature set's code, for a set validly declared)".to_owned()
            } else {
                String::new()
            };
            self.wrong.push(format!(
                "{method}, not allowed by the policy, refused {code}{why}"
            ));
        }
        true
    }

    /// The verdict so far: `None` while nothing was judged.
    pub(super) fn verdict(&self) -> Option<(Status, String)> {
        if !self.wrong.is_empty() {
            let d = format!(
                "{} (§6.6: a rejecting host MUST populate the documented code, -32001 for a \
                 feature set not enabled or -32002 for a denied capability){}",
                self.wrong.join("; "),
                if self.judged.is_empty() {
                    String::new()
                } else {
                    format!("; {}", self.judged.join("; "))
                }
            );
            return Some((Status::Fail, d));
        }
        (!self.judged.is_empty()).then(|| (Status::Pass, self.judged.join("; ")))
    }
}

/// §14.5: what keeps `result` from being an itemized answer to descriptors `submitted`: a
/// `results` array holding exactly one `{id, accepted: boolean}` entry per submitted id (in
/// any order; other members allowed), none naming an id not submitted. Reading: §14.5 asks
/// for "one entry per submitted descriptor"; an extra or repeated entry leaves the two sides
/// able to disagree about which channels exist (a reader taking the first entry under an id
/// and one taking the last differ), which is what itemizing exists to prevent. Each defect
/// quotes at most [`QUOTE_LIMIT`] bytes of the host's ids.
pub(super) fn itemized_defects(result: &Value, submitted: &[&str]) -> Vec<String> {
    let Some(items) = result.get("results").and_then(Value::as_array) else {
        return vec!["no results array".to_owned()];
    };
    let mut counts = vec![0usize; submitted.len()];
    let (mut unknown, mut malformed) = (Vec::new(), 0usize);
    for item in items {
        let id = item.get("id").and_then(Value::as_str);
        let judged = item.get("accepted").is_some_and(Value::is_boolean);
        match (id, judged) {
            (Some(id), true) => match submitted.iter().position(|s| *s == id) {
                Some(i) => {
                    if let Some(c) = counts.get_mut(i) {
                        *c = c.saturating_add(1);
                    }
                }
                None => unknown.push(id),
            },
            _ => malformed = malformed.saturating_add(1),
        }
    }
    let mut defects = Vec::new();
    let missing: Vec<&str> = submitted
        .iter()
        .zip(&counts)
        .filter(|(_, c)| **c == 0)
        .map(|(s, _)| *s)
        .collect();
    if !missing.is_empty() {
        defects.push(format!("no result for {}", list(&missing)));
    }
    let repeated: Vec<&str> = submitted
        .iter()
        .zip(&counts)
        .filter(|(_, c)| **c > 1)
        .map(|(s, _)| *s)
        .collect();
    if !repeated.is_empty() {
        defects.push(format!("more than one result for {}", list(&repeated)));
    }
    if !unknown.is_empty() {
        defects.push(format!(
            "results for ids never submitted: {}",
            list(&unknown)
        ));
    }
    if malformed > 0 {
        defects.push(format!(
            "{malformed} result(s) without a string id and a boolean accepted"
        ));
    }
    defects
}

/// §14.5 (receipt-time validation against the actually registered channel): why `result`
/// does not refuse every one of `sent` messages for channels never registered, or `None`
/// when it does. Every per-message result is judged, not only the first: a host that
/// validated `messages[0]` alone refuses it and accepts the rest. Reading (fail closed): a
/// refusal is `accepted: false`; a result without a boolean `accepted`, or fewer results
/// than messages sent, shows no refusal of a message.
pub(super) fn unrefused_messages(result: &Value, sent: usize) -> Option<String> {
    let Some(items) = result.get("results").and_then(Value::as_array) else {
        return Some("no results array".to_owned());
    };
    let not_refused = items
        .iter()
        .filter(|m| m.get("accepted").and_then(Value::as_bool) != Some(false))
        .count();
    if not_refused > 0 {
        return Some(format!(
            "{not_refused} of {} per-message result(s) not refused (accepted: false)",
            items.len()
        ));
    }
    (items.len() < sent).then(|| format!("{} result(s) for {sent} messages", items.len()))
}

/// `host.register-duplicate-id` (§14.2: a descriptor's `id` is unique within the
/// connection; §14.5: one result per submitted descriptor): why `result`, the answer to a
/// `channels/register` naming one id in `submitted` descriptors, is not one the server can
/// act on, or `None`. Reading (the spec is silent on a repeated id within one request; fail
/// closed): the host holds at most one channel under an id, so at most one of the
/// descriptors may be accepted, and the results, all under the same id, can say which only
/// by position: exactly one per descriptor. More than one accepted (the later overwriting
/// the earlier, or both held under one key) fails; so does a result whose `accepted` is not
/// a boolean (counted as accepted) and a count other than `submitted`.
pub(super) fn duplicate_defects(result: &Value, submitted: usize) -> Option<String> {
    let Some(items) = result.get("results").and_then(Value::as_array) else {
        return Some("no results array".to_owned());
    };
    let accepted = items
        .iter()
        .filter(|m| m.get("accepted").and_then(Value::as_bool) != Some(false))
        .count();
    if accepted > 1 {
        return Some(format!(
            "{accepted} of the descriptors sharing one id accepted (or not refused with \
             accepted: false), where the host can hold one channel under it"
        ));
    }
    (items.len() != submitted).then(|| {
        format!(
            "{} result(s) for {submitted} descriptors sharing one id: only their position can \
             say which was accepted",
            items.len()
        )
    })
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
        let m = |sent, answered| Meanwhile {
            sent,
            answered,
            notified: false,
        };
        assert_eq!(m(true, true).expected(), Some(true));
        assert_eq!(m(false, false).expected(), Some(false));
        assert_eq!(m(true, false).expected(), Some(false));
        assert_eq!(m(false, true).expected(), None);
        assert_eq!(m(true, true).note(), "");
        assert!(m(true, false).note().contains("narrowed"));
        assert!(m(false, true).note().contains("widened"));
    }

    /// §6.7: after a grant change by Notification the server holds only its `disabled`
    /// list, the host maybe all of it: either answer conforms, whatever the server's grant.
    #[test]
    fn s6_7_after_a_grant_change_by_notification_either_answer_conforms() {
        for (sent, answered) in [(true, true), (false, false), (true, false), (false, true)] {
            let m = Meanwhile {
                sent,
                answered,
                notified: true,
            };
            assert_eq!(m.expected(), None);
            assert!(m.note().contains("Notification"));
        }
    }

    /// §6.6: only a refusal the grant asks for is judged; -32001 and -32002 pass, -32601
    /// only from a host not claiming the capability, any other code fails.
    #[test]
    fn s6_6_a_refusal_carries_the_documented_code() {
        let mut r = RefusalCodes::default();
        assert!(!r.note(
            "push/event",
            "pushEvents",
            Some(true),
            -32603,
            (true, false)
        ));
        assert!(!r.note("push/event", "pushEvents", None, -32603, (true, false)));
        assert_eq!(r.verdict(), None);
        assert!(r.note(
            "push/event",
            "pushEvents",
            Some(false),
            -32002,
            (true, false)
        ));
        assert!(r.note(
            "inference/request",
            "inferenceRequest",
            Some(false),
            -32601,
            (false, false)
        ));
        assert_eq!(r.verdict().map(|v| v.0), Some(Status::Pass));
        assert!(r.note(
            "push/event",
            "pushEvents",
            Some(false),
            -32601,
            (true, false)
        ));
        let (status, detail) = r.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Fail);
        assert!(detail.starts_with("push/event, not allowed by the policy, refused -32601"));
        assert!(detail.contains("§6.6") && detail.contains("inference/request refused -32601"));
        let mut r = RefusalCodes::default();
        r.note(
            "push/event",
            "pushEvents",
            Some(false),
            -32603,
            (false, false),
        );
        assert_eq!(r.verdict().map(|v| v.0), Some(Status::Fail));
    }

    /// §6.6's `-32003` (unknown feature set) is a documented refusal of a request under a
    /// set whose declaration is invalid (§6.4 rule 1: a host may discard it and treat the set
    /// as not declared), and only there: under a validly declared set it fails.
    #[test]
    fn s6_6_unknown_set_code_passes_only_for_an_invalid_declaration() {
        let mut r = RefusalCodes::default();
        assert!(r.note(
            "push/event under check.typo",
            "pushEvents",
            Some(false),
            -32003,
            (true, true)
        ));
        let (status, detail) = r.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Pass, "{detail}");
        assert!(
            detail.contains("-32003") && detail.contains("§6.4"),
            "{detail}"
        );
        assert!(r.note(
            "push/event under check.push",
            "pushEvents",
            Some(false),
            -32003,
            (true, false)
        ));
        let (status, detail) = r.verdict().unwrap_or((Status::Skip, String::new()));
        assert_eq!(status, Status::Fail, "{detail}");
        assert!(
            detail.starts_with(
                "push/event under check.push, not allowed by the policy, refused -32003"
            ),
            "{detail}"
        );
        // Only -32003 is widened: another undocumented code under the invalid set still fails.
        let mut r = RefusalCodes::default();
        r.note(
            "push/event under check.typo",
            "pushEvents",
            Some(false),
            -32603,
            (true, true),
        );
        assert_eq!(r.verdict().map(|v| v.0), Some(Status::Fail));
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
