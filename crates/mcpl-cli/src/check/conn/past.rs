//! The messages of a held line past the bound on how many one line may carry
//! ([`mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES`]): refused unread with one `-32600` under id
//! null ([`super::classify::past_the_bound`]), and, as the library's peer does
//! (`peer::text`'s `ours_past_the_bound`), every answer among them to a request of the
//! checker's ends that request's wait at once ([`past_answers`]) rather than leaving it
//! to time out as silence.

use mcpl::jsonrpc::Refusal;

use super::Event;

/// Why an answer past the bound was not read, in the library peer's words.
pub(super) fn past_why(limit: usize) -> String {
    format!(
        "the line holding it has more than {limit} messages (one message per line; a library \
         peer's max_batch_entries); those past the first {limit} were refused unread"
    )
}

/// The events owed to what follows the first `limit` messages of a line (`rest`, from
/// where the bound was reached, [`mcpl::jsonrpc::Several::refused_from`]): the one
/// refusal under id null, then an [`Event::Unread`] for each response among them that
/// names an id (each id once), which ends the checker's wait for that id now.
///
/// Read as the held line's first messages are, message by message
/// ([`mcpl::jsonrpc::several_values`], `limit` at a time, so what is held at once stays
/// within the bound), each by its envelope as the peer reads a message it refused unread
/// ([`mcpl::jsonrpc::refusal_of`]: an outcome and no `method`, or an object with an id and
/// neither). Where the rest stops being a run of whole messages, the first message of what
/// is left is read by its envelope alone and reading ends there. Bounded: at most `limit`
/// ids are said; past them, or past what could not be read, one [`Event::UnreadSome`] ends
/// whatever request is awaited (any may be answered among those not said), as the peer
/// fails its requests outstanding past what it kept (JSON-RPC 2.0 §6 is silent; fail
/// closed).
pub(super) fn past_answers(rest: &str, limit: usize) -> Vec<Event> {
    let limit = limit.max(2);
    let why = past_why(limit);
    let mut events = vec![super::classify::past_the_bound(limit)];
    let mut ids: Vec<mcpl::jsonrpc::RequestId> = Vec::new();
    let mut unsaid = false;
    let note = |piece: &[u8], ids: &mut Vec<_>, unsaid: &mut bool| {
        let id = match mcpl::jsonrpc::refusal_of(piece, false) {
            Refusal::Response(Some(id)) | Refusal::AnswerUnlessOurs(id) => id,
            _ => return,
        };
        if ids.contains(&id) {
            return;
        }
        if ids.len() < limit {
            ids.push(id);
        } else {
            *unsaid = true;
        }
    };
    let mut at = 0;
    while let Some(text) = rest.get(at..).filter(|t| !t.trim_start().is_empty()) {
        match mcpl::jsonrpc::several_values(text, limit) {
            Some(several) => {
                for piece in several.values.iter().filter_map(|r| text.get(r.clone())) {
                    note(piece.as_bytes(), &mut ids, &mut unsaid);
                }
                match several.refused_from {
                    Some(next) if next > 0 => at += next,
                    _ => break,
                }
            }
            // One message left, or what is no run of messages: its first read by its
            // envelope; in the second case any of the checker's requests may be answered
            // in what could not be read (fail closed).
            None => {
                let alone = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
                note(text.trim_start().as_bytes(), &mut ids, &mut unsaid);
                unsaid |= !alone;
                break;
            }
        }
    }
    events.extend(ids.into_iter().map(|id| Event::Unread {
        id,
        why: why.clone(),
    }));
    if unsaid {
        events.push(Event::UnreadSome { why });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpl::jsonrpc::RequestId;

    fn unread_ids(events: &[Event]) -> Vec<RequestId> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Unread { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every answer past the bound is said once, whatever chunk it falls in; requests and
    /// notifications there are not; the refusal under id null comes first.
    #[test]
    fn answers_past_the_bound_are_said_once_each() {
        let mut rest = String::new();
        for i in 0..7 {
            rest.push_str(&format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}} "#));
            rest.push_str(r#"{"jsonrpc":"2.0","method":"n"} "#);
            rest.push_str(r#"{"jsonrpc":"2.0","id":"q","method":"ping"} "#);
        }
        rest.push_str(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#);
        let events = past_answers(&rest, 2);
        assert!(matches!(
            events.first(),
            Some(Event::Unanswerable { id: None, .. })
        ));
        let ids = unread_ids(&events);
        assert_eq!(ids, (0i64..2).map(RequestId::from).collect::<Vec<_>>());
        assert!(
            matches!(events.last(), Some(Event::UnreadSome { why }) if why.contains("more than 2")),
            "{events:?}"
        );
        let events = past_answers(&rest, 1024);
        assert_eq!(
            unread_ids(&events),
            (0i64..7).map(RequestId::from).collect::<Vec<_>>()
        );
        assert!(!events.iter().any(|e| matches!(e, Event::UnreadSome { .. })));
    }

    /// A last message alone, and one followed by what is no message, are read by their
    /// envelope.
    #[test]
    fn a_lone_or_broken_last_message_is_read_by_its_envelope() {
        let one = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
        assert_eq!(
            unread_ids(&past_answers(one, 1024)),
            vec![RequestId::from(9i64)]
        );
        let broken = format!("{one} 7 junk");
        let events = past_answers(&broken, 1024);
        assert_eq!(unread_ids(&events), vec![RequestId::from(9i64)]);
        assert!(matches!(events.last(), Some(Event::UnreadSome { .. })));
    }
}
