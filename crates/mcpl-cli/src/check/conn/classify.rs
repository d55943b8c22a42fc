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
        let why = super::event::own_bound(format_args!(
            "a message of {} bytes that would cost {parsed} units parsed, over the limit of \
             {limit} (discarded unread)",
            text.len()
        ));
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
        e if mcpl::jsonrpc::too_deep(&e) => unparsed_json(
            text,
            format!(
                "a JSON text of {} bytes nested deeper than 128 levels (not parsed)",
                text.len()
            ),
            transcript,
        ),
        // JSON with a number past a 64-bit float (RFC 8259 §6 lets a reader limit the
        // range): read as JSON by its grammar alone, it is an invalid message, said so.
        e if e.to_string().starts_with("number out of range")
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            unparsed_json(
                text,
                format!(
                    "a JSON text of {} bytes with a number out of range of a 64-bit float \
                     ({e}; not parsed)",
                    text.len()
                ),
                transcript,
            )
        }
        // JSON by its grammar alone (RFC 8259 §7 takes any `\uXXXX`), with a string holding
        // an escaped surrogate that pairs with nothing (§8.2 leaves such strings to the
        // reader, I-JSON, RFC 7493 §2.1, forbids them): an invalid message, said so.
        e if ["surrogate", "unicode code point", "hex escape"]
            .iter()
            .any(|m| e.to_string().contains(m))
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            unparsed_json(
                text,
                format!(
                    "a JSON text of {} bytes with a string holding a lone surrogate escape \
                     (an unpaired \\uD800-\\uDFFF; {e}; not parsed)",
                    text.len()
                ),
                transcript,
            )
        }
        _ => {
            if let Some(t) = transcript {
                t.write_junk(text);
            }
            Event::Junk(text.chars().take(JUNK_CHARS).collect())
        }
    }
}

/// A text that is JSON by its grammar the parser refused (`why`), read whole as the
/// library's peer reads it ([`mcpl::jsonrpc::refusal_of`] with the whole-text flag): a
/// response under an id ends the checker's wait for that id now, as the peer fails its
/// request at once (`peer::refused`), rather than at the deadline; anything else is an
/// invalid frame. A request's answer is [`refusal`]'s, said after it.
fn unparsed_json(text: &str, why: String, transcript: Option<&Transcript>) -> Event {
    match (
        discard(why, transcript).0,
        mcpl::jsonrpc::refusal_of(text.as_bytes(), true),
    ) {
        (Event::Invalid(why), mcpl::jsonrpc::Refusal::Response(Some(id))) => {
            Event::Unread { id, why }
        }
        (event, _) => event,
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
mod tests;
