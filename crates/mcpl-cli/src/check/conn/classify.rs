//! How the pump reads one received text ([`classify_answered`]): a JSON frame, an invalid one
//! (nested too deep, a number out of range) or junk, and the answer a request that does not
//! parse is owed ([`refusal`]); and the notes said before a frame ([`repeated_name`]). A line
//! of several whole messages is read message by message ([`text_events`]), and the other
//! messages of a discarded line are answered each ([`rest_answers`]), as the peer reads them.

use serde_json::Value;

use super::{Event, Transcript, EVENT_BYTES, JUNK_CHARS, UNIT_BYTES};

/// One received text: a JSON frame, or junk. Logged to the transcript either way (junk as
/// a JSON string).
#[cfg(test)]
pub(super) fn classify(text: &str, transcript: Option<&Transcript>) -> Event {
    classify_answered(text, transcript).0
}

/// One received text read: a JSON frame, junk or an invalid one (logged to the transcript
/// either way, junk as a JSON string), with the [`Event::Refused`] a text that begins as a
/// message and does not parse is owed ([`refusal`]), to be said after it.
pub(super) fn classify_answered(
    text: &str,
    transcript: Option<&Transcript>,
) -> (Event, Option<Event>) {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => {
            if let Some(t) = transcript {
                t.write("received", v.clone());
            }
            (Event::Frame(v), None)
        }
        Err(e) => {
            let refused = refusal(text, &e);
            (unparsed(text, e, transcript), refused)
        }
    }
}

/// A received frame's text as the library's peer reads it ([`mcpl::jsonrpc::message_lead`],
/// [`mcpl::jsonrpc::message_read`], one reading): its message (`message`, without the JSON
/// whitespace around it), whether a UTF-8 byte order mark preceded it (`marked`, said as
/// [`Event::ByteOrderMark`]), and whether only JSON whitespace and that mark did
/// (`json_lead`, RFC 8259 §2, §8.1).
pub(super) struct Received<'a> {
    pub(super) message: &'a str,
    pub(super) marked: bool,
    pub(super) json_lead: bool,
}

impl Received<'_> {
    /// Whether the text is blank as the library's peer reads a blank line: JSON whitespace
    /// and a byte order mark only (other whitespace alone is junk, RFC 8259 §2).
    pub(super) fn blank(&self) -> bool {
        self.message.is_empty() && self.json_lead
    }
}

/// Reads `text` as [`Received`] says.
pub(super) fn received(text: &str) -> Received<'_> {
    let (start, json_lead) = mcpl::jsonrpc::message_lead(text);
    let lead = text
        .get(..text.len().saturating_sub(start.len()))
        .unwrap_or_default();
    Received {
        message: mcpl::jsonrpc::message_read(text).0,
        marked: lead.contains('\u{feff}'),
        json_lead,
    }
}

/// One received text read ([`classify_answered`]), as the library's peer reads it: a
/// message after more than JSON whitespace and a byte order mark (a no-break space, say) is
/// no JSON text (RFC 8259 §2) and the peer refuses it, so it is an invalid message here,
/// with the answer the peer gives it (the library's one rule, `Message::parse` and
/// [`mcpl::jsonrpc::ParseError::owed_answers`]: a request `-32700` under its id).
pub(super) fn classify_received(
    text: &str,
    read: &Received<'_>,
    transcript: Option<&Transcript>,
) -> (Event, Option<Event>) {
    let json_after = || serde_json::from_str::<serde::de::IgnoredAny>(read.message).is_ok();
    if read.json_lead || !json_after() {
        // Whitespace JSON does not have, alone: junk, said as it came.
        let junk = !read.json_lead && read.message.is_empty();
        return classify_answered(if junk { text } else { read.message }, transcript);
    }
    let refused = match mcpl::jsonrpc::Message::parse(text) {
        Ok(_) => None,
        Err(e) => owed_event(&e, text),
    };
    let why = format!(
        "a message of {} bytes preceded by whitespace JSON does not have (only space, tab, \
         line feed, carriage return and one byte order mark may precede one, RFC 8259 §2, \
         §8.1; refused, as the library's peer refuses it)",
        read.message.len()
    );
    (discard(why, transcript).0, refused)
}

/// One received text read as the library's peer reads it: [`Classified::Several`] when it
/// is several whole messages separated by JSON whitespace (the peer's one test:
/// [`mcpl::jsonrpc::trailing_detail`], then [`mcpl::jsonrpc::several_values`], bounded by
/// [`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`]), each then read alone; else as
/// [`classify_received`] reads it.
pub(super) fn classify_text(
    raw: &str,
    read: &Received<'_>,
    transcript: Option<&Transcript>,
) -> Classified {
    if !read.json_lead {
        let (event, refused) = classify_received(raw, read, transcript);
        return Classified::One(event, refused);
    }
    // [`classify_answered`] of the message, parsed once: the several test runs only on a
    // text the parser refused.
    let text = read.message;
    match serde_json::from_str::<Value>(text) {
        Ok(v) => {
            if let Some(t) = transcript {
                t.write("received", v.clone());
            }
            Classified::One(Event::Frame(v), None)
        }
        Err(e) => {
            let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
            let several = mcpl::jsonrpc::trailing_detail(&e.to_string())
                .then(|| mcpl::jsonrpc::several_values(text, limit))
                .flatten();
            if let Some(several) = several {
                return Classified::Several(several);
            }
            let refused = refusal(text, &e);
            Classified::One(unparsed(text, e, transcript), refused)
        }
    }
}

/// What [`classify_text`] read.
pub(super) enum Classified {
    /// One text: its event, and the answer it is owed, said after it.
    One(Event, Option<Event>),
    /// Several messages on one line, where each is and where what was past the bound begins.
    Several(mcpl::jsonrpc::Several),
}

/// The note said before the messages of a line of `count` (MCP's stdio framing: one message
/// per line), each read alone as the library's peer reads them; `refused_past`: more came
/// past the bound, refused unread ([`past_the_bound`]).
pub(super) fn several_note(count: usize, refused_past: bool) -> Event {
    let past = if refused_past {
        format!(
            ", and more past the {} a library peer reads of one line (refused unread with one \
             -32600 under id null)",
            mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES
        )
    } else {
        String::new()
    };
    Event::Several(format!(
        "{count} messages on one line{past} (§4: MCP's stdio framing is one message per line; \
         each was read alone, as the library's peer reads them)"
    ))
}

/// The one answer to the messages of a line past the bound (`limit` messages): refused
/// unread with one `-32600` under id null, as the library's peer refuses them.
pub(super) fn past_the_bound(limit: usize) -> Event {
    Event::Unanswerable {
        id: None,
        why: format!(
            "more than {limit} messages on one line (one message per line); those past the \
             first {limit} were refused unread"
        ),
    }
}

/// The messages after the first on a line the transport discarded whole (`rest`, the
/// summaries [`mcpl::transport::FrameReader::discarded_rest`] gives), each answered as the
/// library's peer answers it, by its one reading ([`mcpl::peer::rest_refusals`]): MCP's
/// stdio framing is one message per line, and the peer refuses each message of a line it
/// discarded as if it had come alone, by the rule the first was refused by: for a line that
/// is no text (`not_text`, its reason) a request `-32700` as [`not_text_refusal`] reads it,
/// else as [`discard_answer`] reads it (`why`, the line's bound): a request `-32600` under
/// its id or id null, an answer to a request of the checker's ending that wait. Bounded as
/// the peer bounds it: [`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`] messages the first
/// included; past them one `-32600` under id null ([`past_the_bound`]), an answer to ours
/// there still ending its wait. Messages not kept end the awaited wait
/// ([`Event::UnreadSome`]) and are answered with one `-32600` under id null. A
/// notification is said with the line.
pub(super) fn rest_answers(why: &str, rest: &[Vec<u8>], not_text: Option<&str>) -> Vec<Event> {
    use mcpl::jsonrpc::Refusal;
    use mcpl::peer::RestRefusal;
    let plan = mcpl::peer::rest_refusals(rest, mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES);
    let why = format!("{why}; a further message on that line, refused with it");
    let ours = |piece: &[u8]| match mcpl::jsonrpc::refusal_of(piece, false) {
        Refusal::Response(Some(id)) | Refusal::AnswerUnlessOurs(id) => Some(id),
        _ => None,
    };
    let mut events = Vec::new();
    for refusal in plan.each {
        match refusal {
            RestRefusal::NotKept { answered } => {
                events.push(Event::UnreadSome { why: why.clone() });
                if answered {
                    events.push(Event::Unanswerable {
                        id: None,
                        why: format!("{why} (past what could be kept of the line's messages)"),
                    });
                }
            }
            RestRefusal::PastTheBound(piece) => {
                events.extend(ours(piece).map(|id| Event::Unread {
                    id,
                    why: why.clone(),
                }))
            }
            RestRefusal::Alone(piece) => match not_text {
                Some(reason) => {
                    let began = piece.first() == Some(&b'{');
                    match not_text_refusal(reason, began, Some(piece)) {
                        Some(Event::Refused { id, error, .. }) => events.push(Event::Refused {
                            id,
                            error,
                            unless_ours: match mcpl::jsonrpc::refusal_of(piece, false) {
                                Refusal::AnswerUnlessOurs(id) => Some(id),
                                _ => None,
                            },
                        }),
                        _ => events.extend(ours(piece).map(|id| Event::Unread {
                            id,
                            why: why.clone(),
                        })),
                    }
                }
                None => match discard_answer(why.clone(), Some(piece), false, None).0 {
                    Event::Invalid(_) => {}
                    event => events.push(event),
                },
            },
            // A policy among those not kept: the checker is no server, nothing to answer.
            _ => {}
        }
    }
    if plan.refused_past {
        events.push(past_the_bound(plan.limit));
    }
    events
}

/// `why` a frame was discarded, saying how many messages its line held when it held more
/// than one (`rest`, the others' summaries: MCP's stdio framing is one message per line).
/// The count is the library's ([`mcpl::peer::rest_refusals`]).
pub(super) fn on_the_line(why: String, rest: &[Vec<u8>]) -> String {
    match mcpl::peer::rest_refusals(rest, usize::MAX).count {
        0 | 1 => why,
        n => format!(
            "{why}; the line held {n} messages (one message per line), each refused with it"
        ),
    }
}

/// The events of one text received (a line, or a WebSocket message), in order, each with
/// what it holds of [`super::QUEUED_BYTES`]: the notes said before a frame (`spread`, a byte order
/// mark, a repeated member name), the frame's event, and the answer a text that does not
/// parse is owed; or, for a line of several whole messages, a note saying so
/// ([`Event::Several`]), then each message's own, read alone as the library's peer reads
/// them, and past the bound one refusal ([`past_the_bound`]). Never empty.
pub(super) fn text_events(
    raw: &str,
    read: &Received<'_>,
    spread: Option<Event>,
    transcript: Option<&Transcript>,
) -> Vec<(Event, usize)> {
    let text = read.message;
    let parsed = mcpl::jsonrpc::parsed_cost(text);
    let limit = mcpl::jsonrpc::DEFAULT_MAX_PARSED_COST;
    if parsed > limit {
        let why = format!(
            "a message of {} bytes that would cost {parsed} units parsed, over the limit of \
             {limit} (discarded unread)",
            text.len()
        );
        return vec![costly_answer(why, text, transcript)];
    }
    let with_cost = |e: Event| {
        let cost = e.held_bytes();
        (e, cost)
    };
    let (event, refused) = match classify_text(raw, read, transcript) {
        Classified::One(event, refused) => (event, refused),
        Classified::Several(several) => {
            let past = several.refused_from.is_some();
            let mut all = vec![with_cost(several_note(several.values.len(), past))];
            for piece in several.values.iter().filter_map(|r| text.get(r.clone())) {
                all.extend(text_events(piece, &received(piece), None, transcript));
            }
            // Refused unread, an answer of the checker's there ending its wait now.
            if let Some(rest) = several.refused_from.and_then(|at| text.get(at..)) {
                let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
                all.extend(
                    super::past::past_answers(rest, limit)
                        .into_iter()
                        .map(with_cost),
                );
            }
            return all;
        }
    };
    let frame = matches!(event, Event::Frame(_));
    // Said before the frame they are about, so each is judged with it.
    let marked = (read.marked && frame).then_some(Event::ByteOrderMark);
    let notes = spread.filter(|_| frame).into_iter().chain(marked);
    let notes = notes.chain(repeated_name(text, &event)).chain(refused);
    let mut all: Vec<(Event, usize)> = notes.map(with_cost).collect();
    let cost = match &event {
        Event::Frame(_) => text
            .len()
            .saturating_add(parsed.saturating_mul(UNIT_BYTES))
            .saturating_add(EVENT_BYTES),
        other => other.held_bytes(),
    };
    all.push((event, cost));
    all
}

/// A text the parser refused (`e`): an invalid message when it is JSON the parser cannot
/// hold, else junk.
fn unparsed(text: &str, e: serde_json::Error, transcript: Option<&Transcript>) -> Event {
    match e {
        // JSON, but nested past what a parser takes (serde_json's 128 levels): not junk, an
        // invalid message, said so.
        e if mcpl::jsonrpc::too_deep(&e) => {
            discard(
                format!(
                    "a JSON text of {} bytes nested deeper than 128 levels (not parsed)",
                    text.len()
                ),
                transcript,
            )
            .0
        }
        // JSON with a number past a 64-bit float (RFC 8259 §6 lets a reader limit the
        // range): read as JSON by its grammar alone, it is an invalid message, said so.
        e if e.to_string().starts_with("number out of range")
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            discard(
                format!(
                    "a JSON text of {} bytes with a number out of range of a 64-bit float \
                     ({e}; not parsed)",
                    text.len()
                ),
                transcript,
            )
            .0
        }
        // JSON by its grammar alone (RFC 8259 §7 takes any `\uXXXX`), with a string holding
        // an escaped surrogate that pairs with nothing (§8.2 leaves such strings to the
        // reader, I-JSON, RFC 7493 §2.1, forbids them): an invalid message, said so.
        e if ["surrogate", "unicode code point", "hex escape"]
            .iter()
            .any(|m| e.to_string().contains(m))
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            discard(
                format!(
                    "a JSON text of {} bytes with a string holding a lone surrogate escape \
                     (an unpaired \\uD800-\\uDFFF; {e}; not parsed)",
                    text.len()
                ),
                transcript,
            )
            .0
        }
        _ => {
            if let Some(t) = transcript {
                t.write_junk(text);
            }
            Event::Junk(text.chars().take(JUNK_CHARS).collect())
        }
    }
}

/// What the library's peer answers a text that does not parse (`e`), as an
/// [`Event::Refused`] (or [`Event::RefusedBatch`]); `None` when it answers nothing: the
/// library's one rule, [`mcpl::jsonrpc::ParseError::owed_answers`] (JSON-RPC 2.0 §5.1, §6). A junk line, a response,
/// and a notification or an object with no `method` nested past the parser are never
/// answered; a text nested past the parser is refused `-32600` (`reason: "nesting"`), any
/// other `-32700`, under the id of a request told without doubt
/// ([`mcpl::jsonrpc::refused_request_id`]), else id null.
pub(super) fn refusal(text: &str, e: &serde_json::Error) -> Option<Event> {
    owed_event(&mcpl::jsonrpc::ParseError::Json(e.to_string()), text)
}

/// What the library's peer answers `text`, refused by the parser with `e`, as an event: the
/// library's one rule, [`mcpl::jsonrpc::ParseError::owed_answers`] within the peer's bound
/// on a batch ([`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`]): one [`Event::Refused`], or for a
/// line beginning with a batch refused only for what follows it, each of the batch's
/// requests answered under its id in one array ([`Event::RefusedBatch`], JSON-RPC 2.0 §5,
/// §6); `None` when the peer answers nothing.
fn owed_event(e: &mcpl::jsonrpc::ParseError, text: &str) -> Option<Event> {
    match e.owed_answers(text, mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES)? {
        mcpl::jsonrpc::OwedAnswer::One(answer) => Some(Event::Refused {
            id: answer.id,
            error: answer.outcome.err()?,
            unless_ours: unless_ours(text),
        }),
        mcpl::jsonrpc::OwedAnswer::Batch(answers) => Some(Event::RefusedBatch(answers)),
        // A kind of answer this checker does not know yet: one `-32700` under id null,
        // failing closed (JSON-RPC 2.0 §5.1).
        _ => Some(Event::Refused {
            id: None,
            error: mcpl::jsonrpc::ErrorObject::parse_error(e.to_string()),
            unless_ours: None,
        }),
    }
}

/// The id of `text` (whole, refused by the parser) when it is an object with an id and
/// neither a `method` nor an outcome, by the library's one reading
/// ([`mcpl::jsonrpc::refusal_of`]): answered only when that id names none of the checker's
/// own requests.
fn unless_ours(text: &str) -> Option<mcpl::jsonrpc::RequestId> {
    match mcpl::jsonrpc::refusal_of(text.as_bytes(), true) {
        mcpl::jsonrpc::Refusal::AnswerUnlessOurs(id) => Some(id),
        _ => None,
    }
}

/// What the library's peer answers a frame that is not text (`reason`; RFC 8259 §8.1: JSON
/// text is UTF-8, so it does not parse), as an [`Event::Refused`]: the library's one rule,
/// [`mcpl::jsonrpc::not_text_answer`], from whether it `began_as_json` (`{` or `[`) and its
/// envelope summary (`head`, read past the bytes of another encoding): `-32700` under the
/// id a request's summary tells without doubt, else id null; nothing for junk that does not
/// begin as a message, nor for a response (whole or cut short).
pub(super) fn not_text_refusal(
    reason: &str,
    began_as_json: bool,
    head: Option<&[u8]>,
) -> Option<Event> {
    let answer = mcpl::jsonrpc::not_text_answer(reason, began_as_json, head)?;
    let error = answer.outcome.err()?;
    Some(Event::Refused {
        id: answer.id,
        error,
        unless_ours: None,
    })
}

/// The notes that `text`, parsed into `event`, repeats a member name: the frame's first
/// repeat ([`crate::check::repeated::first_repeated`], [`Event::Repeated`]), then, for a
/// batch, each entry's first ([`mcpl::jsonrpc::repeated::first_repeated_each`], the
/// library's reading, [`Event::RepeatedInEntry`]; the first
/// [`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`] entries, a longer batch being refused whole);
/// none for a frame that does not repeat one, or no frame. A batch is scanned a second time
/// only when the first scan found a repeat.
pub(super) fn repeated_name(text: &str, event: &Event) -> Vec<Event> {
    let Event::Frame(v) = event else {
        return Vec::new();
    };
    let Some(found) = crate::check::repeated::first_repeated(text) else {
        return Vec::new();
    };
    let mut notes = vec![Event::Repeated(crate::check::repeated::describe(&found, v))];
    if v.is_array() {
        let each = mcpl::jsonrpc::repeated::first_repeated_each(text);
        let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
        notes.extend(each.into_iter().filter(|(entry, _)| *entry < limit).map(
            |(entry, mut found)| {
                found.path = match found.path.as_str() {
                    "" => format!("[{entry}]"),
                    p if p.starts_with('[') => format!("[{entry}]{p}"),
                    p => format!("[{entry}].{p}"),
                };
                let what = crate::check::repeated::describe(&found, v);
                Event::RepeatedInEntry { entry, what }
            },
        ));
    }
    notes
}

/// A frame the checker did not read (discarded by the transport, or refused unbuilt for
/// its parsed cost; `why`), logged as [`discard`] logs it, and told by the library's peer's
/// one rule ([`mcpl::jsonrpc::refusal_of`]) from what was kept of it (`kept`: the first
/// bytes or envelope summary a transport kept, [`mcpl::transport::FrameReader::discarded_head`],
/// or the whole text, `whole_text`, as the peer holds a text refused for its cost): an
/// [`Event::Unread`] when it shows a response under a usable id, so a wait for that answer
/// ends on it, said as what it is (not as silence); an [`Event::Unanswerable`] when the
/// peer answers it (a request, under id null when its id is none, named twice or cut:
/// JSON-RPC 2.0 §5; a batch; bytes that are no UTF-8; a whole text that shows nothing of a
/// message and is no object); else as [`discard`].
pub(super) fn discard_answer(
    why: String,
    kept: Option<&[u8]>,
    whole_text: bool,
    transcript: Option<&Transcript>,
) -> (Event, usize) {
    if let Some(t) = transcript {
        t.write_discarded(&why);
    }
    use mcpl::jsonrpc::Refusal;
    let event = match kept.map(|kept| mcpl::jsonrpc::refusal_of(kept, whole_text)) {
        Some(Refusal::Answer(id)) => Event::Unanswerable { id, why },
        Some(Refusal::Response(Some(id))) => Event::Unread { id, why },
        // An id and neither a method nor an outcome: the peer answers it unless it names a
        // request of its own; the pump does not know the driver's, so it is said as a
        // response, which ends a wait for that id (the driver does not answer it yet).
        Some(Refusal::AnswerUnlessOurs(id)) => Event::Unread { id, why },
        // A response under no usable id (it answers nothing of the checker's), a
        // notification, or nothing kept: discarded, as [`discard`] says it.
        _ => Event::Invalid(why),
    };
    let cost = event.held_bytes();
    (event, cost)
}

/// A text the pump holds whole refused unbuilt for its parsed cost (`why`), told as the
/// library's peer tells it: read whole ([`discard_answer`] with the whole-text flag), as
/// the peer reads it.
pub(super) fn costly_answer(
    why: String,
    text: &str,
    transcript: Option<&Transcript>,
) -> (Event, usize) {
    discard_answer(why, Some(text.as_bytes()), true, transcript)
}

/// A frame the transport discarded, logged to the transcript, with what its event holds.
pub(super) fn discard(why: String, transcript: Option<&Transcript>) -> (Event, usize) {
    if let Some(t) = transcript {
        t.write_discarded(&why);
    }
    let event = Event::Invalid(why);
    let cost = event.held_bytes();
    (event, cost)
}

impl Event {
    /// What a queued event holds besides a parsed frame's values: its kept text (junk, a
    /// discarded frame's reason) and its slot in the queue ([`EVENT_BYTES`]).
    pub(super) fn held_bytes(&self) -> usize {
        let text = match self {
            Event::Junk(s)
            | Event::Invalid(s)
            | Event::Closed(s)
            | Event::Repeated(s)
            | Event::RepeatedInEntry { what: s, .. }
            | Event::Spread(s)
            | Event::Several(s)
            | Event::UnreadSome { why: s }
            | Event::Unread { why: s, .. }
            | Event::Unanswerable { why: s, .. } => s.capacity(),
            Event::Refused { error, .. } => error.message.len(),
            Event::RefusedBatch(answers) => answers.len().saturating_mul(EVENT_BYTES),
            Event::Frame(_) | Event::ByteOrderMark => 0,
        };
        text.saturating_add(EVENT_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mark of a policy not kept (a string piece) is no message on the line.
    #[test]
    fn the_mark_of_a_policy_not_kept_is_no_message_on_the_line() {
        let rest = [b"{}".to_vec(), b"\"policy request not kept\"".to_vec()];
        let said = on_the_line("refused".into(), &rest);
        assert!(said.contains("the line held 2 messages"), "{said}");
        assert_eq!(on_the_line("refused".into(), &[]), "refused");
    }

    /// What a line transport keeps of a text it discards whole for its size: its envelope
    /// summary ([`Envelope::summary`], bounded); for a text that is no object, its first
    /// bytes ([`mcpl::transport::FrameReader::discarded_head`]).
    ///
    /// [`Envelope::summary`]: mcpl::transport::envelope::Envelope::summary
    fn envelope_of(text: &str) -> Option<Vec<u8>> {
        let mut envelope = mcpl::transport::envelope::Envelope::new();
        envelope.feed(text.as_bytes());
        envelope.summary(true).or_else(|| {
            let head = text.as_bytes();
            let kept = head.len().min(mcpl::transport::DISCARDED_HEAD_BYTES);
            Some(head.get(..kept).unwrap_or(head).to_vec())
        })
    }

    /// JSON-RPC 2.0 §5.1, as the library's peer reads a text that does not parse: a request
    /// whose id was told before the error is answered `-32700` under it; one whose id is
    /// `null`, cut by the error, doubled past it, or no request at all, under id null; one
    /// nested past the parser `-32600` from its envelope; a response, or a line that does
    /// not begin as a message, never.
    #[test]
    fn a_text_that_does_not_parse_is_answered_as_the_library_answers_it() {
        let refused = |text: &str| {
            let e = serde_json::from_str::<Value>(text).unwrap_err();
            match refusal(text, &e) {
                Some(Event::Refused { id, error, .. }) => Some((id, error.code)),
                _ => None,
            }
        };
        let parse = mcpl::jsonrpc::codes::PARSE_ERROR;
        let invalid = mcpl::jsonrpc::codes::INVALID_REQUEST;
        let deep = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0",{id}"method":"x","params":{}{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
        };
        for (text, want) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":}}"#.to_owned(),
                Some((Some(7_i64.into()), parse)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"x","params":{"#.to_owned(),
                Some((None, parse)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":},"id":8}"#.to_owned(),
                Some((None, parse)),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"x","params":{"a":},"id":7}"#.to_owned(),
                Some((None, parse)),
            ),
            (
                r#"{"id":7,"method":"x","params":{"a":}}"#.to_owned(),
                Some((None, parse)),
            ),
            ("{oops".to_owned(), Some((None, parse))),
            ("[1,".to_owned(), Some((None, parse))),
            // A batch nested past the parser: one `-32700` under id null, as the peer and
            // `ParseError::answer` answer it.
            (
                format!("[{}{}]", "[".repeat(200), "]".repeat(200)),
                Some((None, parse)),
            ),
            (deep(r#""id":8,"#), Some((Some(8_i64.into()), invalid))),
            (deep(r#""id":null,"#), Some((None, invalid))),
            // Two ids: which request it is cannot be told (`jsonrpc::doubled::DOUBLED_ID`),
            // as the peer and `refused_request_id` read it: under id null.
            (deep(r#""id":7,"id":8,"#), Some((None, invalid))),
            (deep(""), None),
            // An object with no `method` nested past the parser: read as the peer reads
            // it (a response), never answered.
            (
                format!(
                    r#"{{"jsonrpc":"2.0","x":{}{}}}"#,
                    "[".repeat(200),
                    "]".repeat(200)
                ),
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"a":}}"#.to_owned(),
                None,
            ),
            ("not json".to_owned(), None),
        ] {
            assert_eq!(refused(&text), want, "{text}");
        }
    }

    /// A frame that is no text is answered as the library's peer answers it
    /// (`Discarded::not_text`): from the envelope summary the transport keeps of it (read
    /// past the bytes of another encoding, here by the library's own envelope), a response
    /// is never answered, its summary cut short or not (a line ending inside its `id`);
    /// a request is answered `-32700` under its id, or under id null; junk that does not
    /// begin as a message never. Before, a summary cut short did not read as an object,
    /// so `mcpl check` answered a response `-32700` where the peer stays silent.
    #[test]
    fn a_frame_that_is_no_text_is_answered_as_the_library_answers_it() {
        // `~` stands for a byte that is no UTF-8.
        let answered = |line: &str| {
            let line: Vec<u8> = line
                .bytes()
                .map(|b| if b == b'~' { 0xff } else { b })
                .collect();
            let line = line.as_slice();
            let bad = line.iter().position(|b| *b >= 0x80).unwrap_or(line.len());
            let mut envelope = mcpl::transport::envelope::Envelope::lenient(bad);
            envelope.feed(line);
            let summary = envelope.summary(true);
            let began = line.first() == Some(&b'{');
            match not_text_refusal("no UTF-8", began, summary.as_deref()) {
                Some(Event::Refused { id, error, .. }) => Some((id, error.code)),
                _ => None,
            }
        };
        let parse = mcpl::jsonrpc::codes::PARSE_ERROR;
        for (line, want) in [
            (r#"{"jsonrpc":"2.0","x":"~","result":1,"id":"ab"#, None),
            (
                r#"{"jsonrpc":"2.0","x":"~","error":{"code":1},"id":1"#,
                None,
            ),
            (r#"{"jsonrpc":"2.0","id":"a","result":["~"]}"#, None),
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"m","params":["~"]}"#,
                Some((Some(9_i64.into()), parse)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"m","params":["~"]}"#,
                Some((None, parse)),
            ),
            ("~~ not a message", None),
        ] {
            assert_eq!(answered(line), want, "{line}");
        }
    }

    /// A message the checker discarded unread is answered as the library's peer answers it
    /// (`peer::refused`, one rule: `jsonrpc::discarded_refusal`), from its envelope summary:
    /// a request naming `id` twice under id null, as the peer refuses it (which request it
    /// is cannot be told), not under the last one; a request refused part read whose `id`
    /// the cut split (`"id":12` may be `"id":123`) under id null, not left unanswered; a
    /// response's id, cut so, names nothing; a notification is not answered.
    #[test]
    fn a_discarded_message_is_answered_as_the_library_answers_it() {
        let read = |summary: Option<Vec<u8>>| match discard_answer(
            "why".into(),
            summary.as_deref(),
            false,
            None,
        )
        .0
        {
            Event::Unanswerable { id, .. } => Some(Ok(id)),
            Event::Unread { id, .. } => Some(Err(id)),
            _ => None,
        };
        let part = |text: &str| {
            let mut envelope = mcpl::transport::envelope::Envelope::new();
            envelope.feed(text.as_bytes());
            envelope.summary(false)
        };
        let whole = |text: &str| envelope_of(text);
        assert_eq!(
            read(whole(r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"m"}"#)),
            Some(Ok(None))
        );
        assert_eq!(
            read(part(r#"{"jsonrpc":"2.0","method":"m","id":12"#)),
            Some(Ok(None))
        );
        assert_eq!(
            read(part(r#"{"jsonrpc":"2.0","method":"m","id":"ab"#)),
            Some(Ok(None))
        );
        assert_eq!(read(part(r#"{"jsonrpc":"2.0","result":1,"id":12"#)), None);
        assert_eq!(
            read(part(r#"{"jsonrpc":"2.0","id":12,"result":["#)),
            Some(Err(12_i64.into()))
        );
        assert_eq!(
            read(part(r#"{"jsonrpc":"2.0","method":"m","params":["#)),
            None
        );
        assert_eq!(read(whole(r#"{"jsonrpc":"2.0","method":"m"}"#)), None);
    }

    /// The messages after the first on a discarded line (their summaries) are answered each
    /// as the library's peer answers them (`Discarded::rest_refused`): by the line's rule a
    /// request under its id, an answer to ours ending its wait, a notification not at all;
    /// for a line that is no text whatever does not parse `-32700`; the mark of summaries not kept ends
    /// the awaited wait and is answered under id null; past the bound, one refusal under
    /// id null, an answer to ours there still ending its wait.
    #[test]
    fn the_other_messages_of_a_discarded_line_are_answered_as_the_peer_answers_them() {
        let summary = |text: &str| envelope_of(text).unwrap_or_default();
        let request = summary(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#);
        let response = summary(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
        let note = summary(r#"{"jsonrpc":"2.0","method":"n"}"#);
        let rest = vec![request.clone(), response.clone(), note.clone()];
        let got = rest_answers("why", &rest, None);
        assert!(
            matches!(&got[..], [
            Event::Unanswerable { id: Some(a), .. },
            Event::Unread { id: b, .. },
        ] if *a == 4_i64.into() && *b == 5_i64.into()),
            "{got:?}"
        );
        // No text: what does not parse is answered `-32700` (under id null when it has
        // none, a notification too: JSON-RPC 2.0 §5.1), a response never.
        let got = rest_answers("why", &rest, Some("no UTF-8"));
        assert!(
            matches!(&got[..], [
            Event::Refused { id: Some(a), error, .. },
            Event::Unread { id: b, .. },
            Event::Refused { id: None, .. },
        ] if *a == 4_i64.into() && *b == 5_i64.into()
            && error.code == mcpl::jsonrpc::codes::PARSE_ERROR),
            "{got:?}"
        );
        let unkept = br#""responses not kept""#.to_vec();
        let got = rest_answers("why", &[note.clone(), unkept.clone()], None);
        assert!(
            matches!(
                &got[..],
                [
                    Event::UnreadSome { .. },
                    Event::Unanswerable { id: None, .. },
                ]
            ),
            "{got:?}"
        );
        // The mark of a policy among the messages not kept (§6.7) is no mark of summaries
        // not kept, nor a message: nothing more is owed for it (the peer's one reading).
        let policy = br#""policy request not kept""#.to_vec();
        let got = rest_answers("why", &[note.clone(), policy, unkept], None);
        assert!(
            matches!(
                &got[..],
                [
                    Event::UnreadSome { .. },
                    Event::Unanswerable { id: None, .. },
                ]
            ),
            "{got:?}"
        );
        let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
        let mut many = vec![note; limit - 1];
        many.extend([request, response]);
        let got = rest_answers("why", &many, None);
        assert!(
            matches!(&got[..], [
            Event::Unread { id, .. },
            Event::Unanswerable { id: None, why },
        ] if *id == 5_i64.into() && why.contains("more than 1024 messages")),
            "{got:?}"
        );
    }

    /// A message after whitespace JSON does not have is refused by the library's peer (RFC
    /// 8259 §2): an invalid message here, a request owed `-32700` under its id; after JSON
    /// whitespace and a byte order mark it is a frame, the mark said.
    #[test]
    fn a_message_after_whitespace_json_does_not_have_is_invalid_and_refused() {
        let request = "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"}";
        let read = received(request);
        assert!(!read.json_lead);
        let (event, refused) = classify_received(request, &read, None);
        assert!(matches!(event, Event::Invalid(why) if why.contains("RFC 8259 §2")));
        assert!(matches!(
            refused,
            Some(Event::Refused { id: Some(id), error, .. }) if id == 7_i64.into()
                && error.code == mcpl::jsonrpc::codes::PARSE_ERROR
        ));
        let notification = "\u{2028}{\"jsonrpc\":\"2.0\",\"method\":\"m\"}";
        let (event, refused) = classify_received(notification, &received(notification), None);
        assert!(matches!(event, Event::Invalid(_)) && refused.is_none());
        let marked = " \u{feff}\t{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"} \r";
        let read = received(marked);
        assert!(read.marked && read.json_lead);
        assert!(matches!(
            classify_received(marked, &read, None),
            (Event::Frame(_), None)
        ));
    }

    /// A line of whitespace JSON does not have is junk, as the library's peer reports it
    /// (RFC 8259 §2), not a blank line: only JSON whitespace and a byte order mark are blank.
    #[test]
    fn a_line_of_unicode_whitespace_is_junk_not_blank() {
        for blank in [" \t\r", "\u{feff} ", ""] {
            assert!(received(blank).blank(), "{blank:?}");
        }
        let line = "\u{a0}\u{2028}";
        let read = received(line);
        assert!(!read.blank());
        assert!(matches!(
            classify_received(line, &read, None),
            (Event::Junk(kept), None) if kept == line
        ));
    }

    /// A text refused unbuilt for its parsed cost is held whole, and read whole as the
    /// library's peer reads it (`Head::then` with the whole-text flag): an object broken
    /// before any `method` or outcome (`{"a":[…] x`) is answered `-32600` under id null by
    /// the peer (JSON-RPC 2.0 §5), so the checker says it is owed an answer, not a discard;
    /// a whole object with no `method` reads as a response, never answered.
    #[test]
    fn a_costly_text_is_read_whole_as_the_peer_reads_it() {
        let costly = |text: &str| match costly_answer("why".into(), text, None).0 {
            Event::Unanswerable { id, .. } => Some(Ok(id)),
            Event::Unread { id, .. } => Some(Err(id)),
            _ => None,
        };
        let broken = format!(r#"{{"a":[{}0] x"#, "0,".repeat(50));
        assert_eq!(costly(&broken), Some(Ok(None)), "{broken}");
        let whole = format!(r#"{{"a":[{}0]}}"#, "0,".repeat(50));
        assert_eq!(costly(&whole), None, "{whole}");
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"m","params":[{}0]}}"#,
            "0,".repeat(50)
        );
        assert_eq!(costly(&request), Some(Ok(Some(3_i64.into()))));
        // An id and neither a `method` nor an outcome (the peer's `AnswerUnlessOurs`): a
        // wait for that id ends on it.
        let bare = format!(
            r#"{{"jsonrpc":"2.0","id":4,"params":[{}0]}}"#,
            "0,".repeat(50)
        );
        assert_eq!(costly(&bare), Some(Err(4_i64.into())), "{bare}");
    }

    /// JSON-RPC 2.0 §5: a request the checker discarded unread is answered even when its id
    /// cannot be used (`null`, a fraction, an object, an id or method name too long to keep,
    /// which the summary writes `null`): under id null, as the library's peer answers it.
    /// A notification (no `id` member) is not; a response under no usable id answers
    /// nothing of the checker's.
    #[test]
    fn a_discarded_request_under_an_unusable_id_is_answered_under_null() {
        let answered = |text: &str| match discard_answer(
            "why".into(),
            envelope_of(text).as_deref(),
            false,
            None,
        )
        .0
        {
            Event::Unanswerable { id, .. } => Some(id),
            _ => None,
        };
        let long = "m".repeat(2 * mcpl::transport::envelope::MAX_VALUE_BYTES);
        let long_method = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"{long}"}}"#);
        let long_id = format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"x"}}"#);
        for (text, id) in [
            (
                r#"{"jsonrpc":"2.0","id":9,"method":"x","params":{}}"#,
                Some(9_i64.into()),
            ),
            (r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, None),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, None),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#, None),
            (&long_id, None),
            (&long_method, Some(4_i64.into())),
        ] {
            assert_eq!(answered(text), Some(id), "{text}");
        }
        assert_eq!(answered(r#"{"jsonrpc":"2.0","method":"x"}"#), None);
        let response = r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#;
        assert!(matches!(
            discard_answer("why".into(), envelope_of(response).as_deref(), false, None).0,
            Event::Invalid(_)
        ));
    }

    /// A frame that is JSON but nested past what a parser takes is an invalid message,
    /// reported as such, not "junk (not JSON)"; text that is no JSON stays junk.
    #[test]
    fn json_nested_too_deep_is_invalid_not_junk() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            classify(&deep, None),
            Event::Invalid(why) if why.contains("nested deeper than 128 levels")
        ));
        assert!(matches!(classify("hello", None), Event::Junk(kept) if kept == "hello"));
        assert!(matches!(classify("[[1]]", None), Event::Frame(_)));
    }

    /// JSON whose number no parser here holds (`1e400`, past a 64-bit float) is JSON all
    /// the same (RFC 8259 §6 lets a reader set the range): an invalid message said so, where
    /// it read as "junk (not JSON)".
    #[test]
    fn a_number_out_of_range_is_invalid_not_junk() {
        let text = r#"{"jsonrpc":"2.0","id":7,"result":{},"x":1e400}"#;
        assert!(matches!(
            classify(text, None),
            Event::Invalid(why) if why.contains("number out of range")
        ));
        assert!(matches!(classify("1e400x", None), Event::Junk(_)));
    }

    /// JSON by RFC 8259's grammar whose string holds an escaped lone surrogate (`"\ud800"`,
    /// which §8.2 leaves to the reader and I-JSON, RFC 7493 §2.1, forbids): an invalid
    /// message said so, where it read as "junk (not JSON)". A broken escape stays junk.
    #[test]
    fn a_lone_surrogate_is_invalid_not_junk() {
        for text in [
            r#"{"jsonrpc":"2.0","id":7,"result":{"x":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"x":"a\udc00b"}}"#,
        ] {
            let got = classify(text, None);
            assert!(
                matches!(&got, Event::Invalid(why) if why.contains("surrogate")),
                "{text}: {got:?}"
            );
        }
        assert!(matches!(classify(r#"{"x":"\ud80"}"#, None), Event::Junk(_)));
        assert!(matches!(
            classify(r#"{"x":"\ud800\udc00"}"#, None),
            Event::Frame(_)
        ));
    }
}
