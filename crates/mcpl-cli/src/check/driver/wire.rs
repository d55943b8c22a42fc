//! The wire side of the strict host: sending, bounded waiting, batches, and the answer the
//! host gives to every message the server sends on its own.

use std::time::Instant;

use mcpl::capability::Requirement;
use mcpl::jsonrpc::{ErrorObject, InvalidThen, Message, RequestId};
use mcpl::protocol::channels::{ChannelsChanged, ChannelsIncoming, ChannelsList, ChannelsRegister};
use mcpl::protocol::handshake::Ping;
use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::inference::InferenceRequest;
use mcpl::protocol::manifest::ManifestChanged;
use mcpl::protocol::model::ModelInfoRequest;
use mcpl::protocol::push::PushEvent;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::others::Others;
use super::*;
use crate::check::conn::Event;
use crate::check::inspect;
use crate::check::report::Status;

/// At most this many characters of a request id (peer-chosen) are quoted in a detail.
const MAX_QUOTED_ID_CHARS: usize = 64;

impl Session {
    pub(super) fn notify(&mut self, method: &str, params: Value) -> bool {
        self.fenced = false;
        self.settle();
        let msg = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.send(&msg)
    }

    pub(super) fn send(&mut self, msg: &Value) -> bool {
        if self.closed.is_some() {
            return false;
        }
        if let Err(e) = self.conn.send(msg) {
            self.closed = Some(format!("write failed: {e}"));
            return false;
        }
        true
    }

    /// Sends a request and waits (bounded) for its response, handling whatever else the
    /// server sends meanwhile.
    /// A `context/beforeInference` sent right after an answered `ping` is judged for §10.7:
    /// the `inference/request`s the server sends while it is outstanding are held
    /// ([`super::hook_path`]), and answered once its answer comes, or once the checker stops
    /// waiting for it.
    pub(super) fn request(&mut self, method: &str, params: Value) -> Reply {
        let hook = method == BeforeInference::NAME && self.fenced;
        if hook {
            // What an earlier batch still carries was sent before the hook: not held.
            self.settle();
            self.hook_path.begin();
        }
        let lifecycle = mcpl::session::ChannelLifecycle::of(method, Some(&params));
        // Every hook answer is judged ([`super::hooks`]), whichever step asked.
        let sent = (method == BeforeInference::NAME).then(|| params.clone());
        let reply = self.request_as(method, params, true);
        if let (Some(params), Reply::Result(result)) = (&sent, &reply) {
            self.judge_hook_answer(params, result);
        }
        if let Some(op) = &lifecycle {
            self.settle_lifecycle(op, &reply);
        }
        if hook {
            let answered = matches!(
                reply,
                Reply::Result(_) | Reply::Error(_) | Reply::Invalid(_) | Reply::Unread(_)
            );
            self.release_held(false);
            self.hook_path.end(answered);
        }
        reply
    }

    /// Answers the `inference/request`s held during a judged hook, as the checker answers
    /// any (`unanswered`: the hook's answer has not come). Each goes alone, never into the
    /// answers of a batch being gathered: none came in one.
    fn release_held(&mut self, unanswered: bool) {
        for (id, outcome) in self.hook_path.release(unanswered) {
            let id = id.to_value();
            self.answer_now(match outcome {
                Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e }),
            });
        }
    }

    /// [`Self::request`] for a request whose missing answer no check reports (a window's
    /// `ping`): if it is the first left unanswered, the next judged one that goes unanswered
    /// is where the silence is reported.
    pub(super) fn unjudged_request(&mut self, method: &str, params: Value) -> Reply {
        self.request_as(method, params, false)
    }

    fn request_as(&mut self, method: &str, params: Value, judged: bool) -> Reply {
        let reply = self.request_unfenced(method, params, judged);
        self.fenced = method == Ping::NAME && matches!(reply, Reply::Result(_) | Reply::Error(_));
        reply
    }

    fn request_unfenced(&mut self, method: &str, params: Value, judged: bool) -> Reply {
        self.settle();
        self.next_id += 1;
        let id = RequestId::Number(self.next_id.into());
        let msg =
            json!({ "jsonrpc": "2.0", "id": id.to_value(), "method": method, "params": params });
        if !self.send(&msg) {
            return Reply::Closed(self.closed.clone().unwrap_or_default());
        }
        self.last_request = Some(msg);
        let marks = (self.junk.count, self.invalid.count, self.stray.count);
        // The requests and notifications that came while waiting (a flood is no answer).
        let mut others = Others::default();
        let mut deadline = Instant::now() + self.timing.step;
        // §10.7: a judged hook gets a whole step from the first inference request it holds,
        // and, unanswered then, one more once the checker answers it ([`super::hook_path`]).
        let mut extended = false;
        loop {
            let Some(ev) = self.conn.recv(deadline) else {
                if self.hook_path.has_held() {
                    self.release_held(true);
                    deadline = Instant::now() + self.timing.step;
                    continue;
                }
                if method == BeforeInference::NAME {
                    let params = self.last_request.as_ref().and_then(|m| m.get("params"));
                    if let Some(params) = params {
                        self.late_hooks.insert(id.clone(), params.clone());
                    }
                }
                self.timed_out.insert(id);
                self.unanswered += 1;
                // Where the silence is reported, a line the server began and left without
                // its end is quoted there (§4): it is in no frame.
                if self.unanswered == 1 {
                    self.silent_after = Some((method.to_owned(), self.last_answered.clone()));
                    self.silent_unjudged = !judged;
                    self.silent_marks = marks;
                    let meanwhile = if judged {
                        self.meanwhile(&others)
                    } else {
                        None
                    };
                    return Reply::Timeout {
                        note: None,
                        meanwhile,
                    };
                }
                if judged && std::mem::take(&mut self.silent_unjudged) {
                    // The unanswered `ping` before it is reported nowhere: this is the root.
                    let first = self.silent_after.as_ref().map(|(m, _)| m.clone());
                    self.silent_after = Some((method.to_owned(), self.last_answered.clone()));
                    return Reply::Timeout {
                        note: Some(format!(
                            "{} (nor was the {} before it answered)",
                            crate::check::report::NO_RESPONSE,
                            first.as_deref().unwrap_or("request")
                        )),
                        meanwhile: self.meanwhile(&others),
                    };
                }
                return Reply::Timeout {
                    note: Some(self.cascade_note()),
                    meanwhile: None,
                };
            };
            if let Event::Frame(v) = &ev {
                others.note(v);
            }
            match self.handle_event(ev, Some(&id)) {
                Handled::Awaited(reply) => {
                    let reply = self.read_whole(method, reply);
                    let how = match &reply {
                        Reply::Error(e) => format!("error {}", e.code),
                        _ => "a result".to_owned(),
                    };
                    self.last_answered = Some(format!("{method} ({how})"));
                    return reply;
                }
                Handled::Continue if !extended && self.hook_path.has_held() => {
                    extended = true;
                    deadline = deadline.max(Instant::now() + self.timing.step);
                }
                Handled::Continue => {}
                Handled::Closed => {
                    return Reply::Closed(self.closed.clone().unwrap_or_default());
                }
            }
        }
    }

    /// What came instead of an answer since the silence began (the requests and
    /// notifications read while waiting, [`Others`]; the frames no host could take as one:
    /// junk, invalid JSON-RPC, responses under ids never sent, counted since
    /// [`Session::silent_marks`], the last of each quoted), and the line the server left
    /// without its end, if any; `None` when none of these.
    fn meanwhile(&self, others: &Others) -> Option<String> {
        let (junk, invalid, stray) = self.silent_marks;
        let mut parts = Vec::new();
        if let Some(last) = &others.last {
            parts.push(format!(
                "{} request(s) or notification(s) (the last: {last})",
                others.count
            ));
        }
        for (sample, since, what) in [
            (&self.junk, junk, "not JSON"),
            (&self.invalid, invalid, "not valid JSON-RPC"),
            (&self.stray, stray, "answering no request of the checker's"),
        ] {
            let n = sample.count.saturating_sub(since);
            if n > 0 {
                parts.push(format!("{n} frame(s) {what} (the last: {:?})", sample.last));
            }
        }
        let mut said = Vec::new();
        if !parts.is_empty() {
            said.push(format!(
                "meanwhile it sent {}, none an answer",
                parts.join(" and ")
            ));
        }
        said.extend(self.conn.unfinished());
        (!said.is_empty()).then(|| said.join("; "))
    }

    /// Judges and answers one event. A response to `awaiting` is handed back instead; a
    /// JSON-RPC batch is split, and the answers to its requests go back as one batch.
    pub(super) fn handle_event(&mut self, ev: Event, awaiting: Option<&RequestId>) -> Handled {
        self.settle();
        let v = match ev {
            Event::Frame(v) => {
                self.frame_begins();
                v
            }
            Event::Junk(line) => {
                self.junk.push(line);
                return Handled::Continue;
            }
            Event::Invalid(why) => {
                self.discarded(why);
                return Handled::Continue;
            }
            // The awaited answer, not read: said now, not waited out as silence (and a frame
            // the checker could not take, as any discarded one is).
            Event::Unread { id, why } if Some(&id) == awaiting => {
                self.discarded(&why);
                self.unanswered = 0;
                self.silent_unjudged = false;
                return Handled::Awaited(Reply::Unread(why));
            }
            Event::Unread { why, .. } => {
                self.discarded(why);
                return Handled::Continue;
            }
            // The awaited answer may be among what was not kept of a discarded line: said
            // now, as the library's peer fails its requests outstanding.
            Event::UnreadSome { why } => {
                self.discarded(&why);
                if awaiting.is_none() {
                    return Handled::Continue;
                }
                self.unanswered = 0;
                self.silent_unjudged = false;
                return Handled::Awaited(Reply::Unread(why));
            }
            // The framing defect (§4), said under `transport.frames-valid`; the messages
            // follow, each judged.
            Event::Several(said) => {
                self.invalid.push(said);
                return Handled::Continue;
            }
            // A request with an id is answered, unread as it is (JSON-RPC 2.0 §5), as the
            // library's peer answers it: `-32600` under its id, or under id null when its id
            // cannot be used.
            Event::Unanswerable { id, why } => {
                self.discarded(&why);
                let id = id.map_or(Value::Null, |id| id.to_value());
                self.answer_as(id, Err(ErrorObject::invalid_request(why)));
                return Handled::Continue;
            }
            // A request that does not parse, answered as the library's peer answers it
            // (JSON-RPC 2.0 §5.1); the frame itself was said as junk or an invalid one.
            Event::Refused {
                id,
                error,
                unless_ours,
            } => {
                // The unusable answer to a request of ours is never answered back (as the
                // library's peer reads it): the awaited one's ends the wait now.
                if let Some(ours) = unless_ours {
                    if Some(&ours) == awaiting {
                        return Handled::Awaited(Reply::Invalid(error.message.into_owned()));
                    }
                    if self.timed_out.contains(&ours) {
                        return Handled::Continue;
                    }
                }
                self.answer_as(id.map_or(Value::Null, |id| id.to_value()), Err(error));
                return Handled::Continue;
            }
            // A batch refused only for what follows it on its line: each of its requests
            // answered `-32700` under its id in one array (JSON-RPC 2.0 §5, §6), as the
            // library's peer answers it.
            Event::RefusedBatch(answers) => {
                let answers = answers
                    .into_iter()
                    .map(|r| mcpl::jsonrpc::Message::Response(r).to_value())
                    .collect();
                self.answer_now(Value::Array(answers));
                return Handled::Continue;
            }
            Event::Repeated(what) => {
                self.repeat_reported(&what);
                self.repeated.push(what);
                return Handled::Continue;
            }
            // Judged with the entry only ([`super::authority`]); the frame's own
            // [`Event::Repeated`] is what `transport.member-names-unique` lists.
            Event::RepeatedInEntry { entry, what } => {
                self.entry_repeat_reported(entry, what);
                return Handled::Continue;
            }
            Event::Spread(said) => {
                self.spread.push(said);
                return Handled::Continue;
            }
            Event::ByteOrderMark => {
                self.marked = self.marked.saturating_add(1);
                return Handled::Continue;
            }
            Event::Closed(why) => {
                // Where its loop died, so what follows is not read as unrelated.
                self.closed = Some(match &self.last_answered {
                    Some(after) => format!("{why}, after the server answered {after}"),
                    None => why,
                });
                return Handled::Closed;
            }
        };
        let Value::Array(items) = v else {
            let handled = self.handle_value(v, awaiting);
            if let Handled::Awaited(_) = handled {
                self.awaited_in(None);
            }
            return handled;
        };
        if items.is_empty() {
            self.invalid.push("empty batch");
            self.answer_now(json!({ "jsonrpc": "2.0", "id": null,
                "error": ErrorObject::invalid_request("empty batch") }));
            return Handled::Continue;
        }
        let limit = mcpl::peer::DEFAULT_MAX_BATCH_ENTRIES;
        if items.len() > limit {
            return self.batch_too_large(&items, limit, awaiting);
        }
        // The checker sends no batch: a response here answers a request sent alone.
        for said in items.iter().filter_map(crate::check::ids::batched_response) {
            self.invalid.push(said);
        }
        self.batch = Some(Vec::new());
        let mut items = items.into_iter().enumerate();
        while let Some((entry, item)) = items.next() {
            if let Handled::Awaited(r) = self.handle_value(item, awaiting) {
                self.awaited_in(Some(entry));
                // The rest was written after this response: judged once it is applied.
                self.deferred.extend(items.map(|(_, item)| item));
                if self.deferred.is_empty() {
                    self.flush_batch();
                }
                return Handled::Awaited(r);
            }
        }
        self.flush_batch();
        Handled::Continue
    }

    /// A batch of more than `limit` entries, refused whole as a library host refuses it
    /// ([`mcpl::peer::PeerConfig::max_batch_entries`], its default): one `-32600` under id
    /// null with `data: {limit, count}`, no entry handled, said under
    /// `transport.frames-valid` as the checker's other bounds are. A response of ours among
    /// the entries ends the awaited request as unusable (the peer ends each it answers), so
    /// it is not waited out as silence. Without it every entry was handled and answered, a
    /// 100,000-entry batch building 100,000 answers.
    fn batch_too_large(
        &mut self,
        items: &[Value],
        limit: usize,
        awaiting: Option<&RequestId>,
    ) -> Handled {
        let count = items.len();
        let why = format!(
            "a batch of {count} entries, over the {limit} a library host reads: refused whole \
             (-32600), no entry handled"
        );
        self.invalid.push(why.clone());
        let error = ErrorObject::invalid_request_because(format_args!(
            "batch of {count} entries exceeds the limit of {limit}"
        ))
        .with_data(json!({ "limit": limit, "count": count }));
        self.answer_now(json!({ "jsonrpc": "2.0", "id": null, "error": error }));
        let ours = awaiting.is_some_and(|a| {
            items.iter().any(|i| {
                i.get("method").is_none()
                    && i.get("id").and_then(RequestId::from_value).as_ref() == Some(a)
            })
        });
        if ours {
            return Handled::Awaited(Reply::Invalid(why));
        }
        Handled::Continue
    }

    /// Handles what a batch carried after an awaited response, now that the response has
    /// been applied, and sends the batch's answers.
    pub(super) fn settle(&mut self) {
        while let Some(item) = self.deferred.pop_front() {
            let _ = self.handle_value(item, None);
        }
        self.flush_batch();
    }

    pub(super) fn flush_batch(&mut self) {
        if let Some(answers) = self.batch.take() {
            if !answers.is_empty() {
                self.answer_now(Value::Array(answers));
            }
        }
    }

    pub(super) fn handle_value(&mut self, v: Value, awaiting: Option<&RequestId>) -> Handled {
        let v = self.integral_id_read(v, awaiting);
        if self.last_request.as_ref() == Some(&v) {
            self.echoed = true;
        }
        // Any response (a late one too) shows the server answers again: no cascade.
        if v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some()) {
            self.unanswered = 0;
            self.silent_unjudged = false;
        }
        // A request gone wrong is answered `-32600` under its id; a response gone wrong
        // (no `method`) never is, as the library's peer reads it (JSON-RPC 2.0 answers
        // requests only, and answering a response can loop). A batch entry that is no
        // object (`1`) is an invalid Request, answered under id null (JSON-RPC 2.0 §6, as
        // the library's peer reads it); a whole frame that is a scalar is junk to the
        // library, reported only.
        let entry = self.batch.is_some() && !v.is_object();
        let request_like = v.get("method").is_some() || entry;
        let has_id = v.get("id").is_some() || entry;
        let shape = mcpl::jsonrpc::Shape::of(&v);
        match Message::from_value(v) {
            Err(e) => {
                self.invalid.push(e.reason.clone());
                // An id with neither a `method` nor an outcome (no Request nor Response
                // object, JSON-RPC 2.0 §4, §5): the library's one rule (`invalid_then`).
                if let InvalidThen::AnswerUnlessOurs(id) = shape.then(&e) {
                    if Some(&id) == awaiting {
                        return Handled::Awaited(Reply::Invalid(e.reason));
                    }
                    if !self.timed_out.contains(&id) {
                        self.answer(&id, Err(e.answer_error()));
                    }
                    return Handled::Continue;
                }
                match (e.id, request_like) {
                    (Some(id), true) => {
                        self.answer(&id, Err(ErrorObject::invalid_request(e.reason)));
                    }
                    // A request whose id cannot be used (`null`, a fraction, an object …)
                    // is answered with `id: null`, as the library's peer answers it; one with
                    // no id is a notification, never answered.
                    (None, true) if has_id => {
                        self.answer_as(Value::Null, Err(ErrorObject::invalid_request(e.reason)));
                    }
                    // The awaited answer, unusable: said now, not waited out as silence.
                    (Some(id), false) if Some(&id) == awaiting => {
                        return Handled::Awaited(Reply::Invalid(e.reason));
                    }
                    _ => {}
                }
            }
            Ok(Message::Response(r)) if r.id.is_some() && r.id.as_ref() == awaiting => {
                return Handled::Awaited(match r.outcome {
                    Ok(v) => Reply::Result(v),
                    Err(e) => Reply::Error(e),
                });
            }
            Ok(Message::Response(r))
                if r.id.as_ref().is_some_and(|i| self.timed_out.contains(i)) =>
            {
                tracing::debug!("late response to timed-out request {:?}", r.id);
                // A hook's answer is judged however late it comes (§5.4: its injections
                // are authorized at receipt, against the grant then; §6.7: none under a set
                // disabled since), as an answer in time is.
                let params = r.id.as_ref().and_then(|i| self.late_hooks.remove(i));
                if let (Some(params), Ok(result)) = (params, &r.outcome) {
                    self.judge_hook_answer(&params, result);
                }
            }
            // A valid message that answers nothing (JSON-RPC 2.0 §5: a response answers a
            // request, once): `rpc.responses-answer-requests`, as the library's peer reports
            // it (`Diagnostic::UnknownResponse`), not `transport.frames-valid`.
            Ok(Message::Response(r)) => {
                let stray = self.stray_response(r.id.as_ref());
                self.stray.push(stray);
            }
            Ok(Message::Notification(n)) => self.server_message(None, &n.method, n.params),
            Ok(Message::Request(r)) => {
                if r.id.is_fractional() {
                    let m: String = r.method.chars().take(64).collect();
                    self.fractional_ids.push(format!("id {} on {m}", r.id));
                }
                self.server_message(Some(r.id), &r.method, r.params)
            }
        }
        Handled::Continue
    }

    /// How a response under `id` that answers no request of the checker's still awaited is
    /// said: the checker's ids are the integers it counted up to [`Session::next_id`], so
    /// one among them was answered already (or ended unusable); any other, `null` included
    /// (every request the checker sends is valid, so none is owed an answer under id null),
    /// was never sent; said by the reading `mcpl check-host` shares
    /// ([`crate::check::ids::stray_response`]).
    fn stray_response(&self, id: Option<&RequestId>) -> String {
        let sent = matches!(id, Some(RequestId::Number(n))
            if n.as_i64().is_some_and(|n| (1..=self.next_id).contains(&n)));
        crate::check::ids::stray_response(id, sent)
    }

    /// A response (no `method`) whose numeric id is written with a fraction or an exponent
    /// (`2.0`, `2e0`) but whose value is the integer id of a request of ours still awaited or
    /// timed out, given back with that integer id, and counted in [`Session::integral_ids`]
    /// (a warning under `transport.frames-valid`); any other value is given back untouched.
    ///
    /// Reading: JSON-RPC 2.0 §5 asks that a response's id be "the same as the value" of the
    /// request's, and an RFC 8259 §6 number is a value (`2.0` is the number 2): no MUST is
    /// broken, so the checker takes it as the answer rather than wait it out as silence. Yet
    /// the request's id had no fraction (§4 of JSON-RPC: ids SHOULD NOT), and a host that
    /// matches ids as written never pairs it (the library's peer refuses a numeric id that is
    /// not an integer, [`RequestId::from_value`]): a warning, not a pass. A value with a true
    /// fraction (`2.5`), or one no request of ours carried, is left to fail as before.
    fn integral_id_read(&mut self, mut v: Value, awaiting: Option<&RequestId>) -> Value {
        let Some((id, written)) = crate::check::conn::integral_response_id(&v) else {
            return v;
        };
        let id = RequestId::from(id);
        if Some(&id) != awaiting && !self.timed_out.contains(&id) {
            return v;
        }
        self.integral_ids
            .push(format!("id {written} for request {id}"));
        if let Some(obj) = v.as_object_mut() {
            obj.insert("id".into(), id.to_value());
        }
        v
    }

    pub(super) fn answer(&mut self, id: &RequestId, outcome: Result<Value, ErrorObject>) {
        self.answer_as(id.to_value(), outcome);
    }

    /// [`Self::answer`] under the JSON `id` (`null` for a request whose id cannot be read,
    /// JSON-RPC 2.0 §5).
    fn answer_as(&mut self, id: Value, outcome: Result<Value, ErrorObject>) {
        let msg = match outcome {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e }),
        };
        match &mut self.batch {
            Some(answers) => answers.push(msg),
            None => self.answer_now(msg),
        }
    }

    /// Sends `msg`, an answer or a batch of answers: the requests it answers are no longer
    /// in flight once the server could have read it ([`crate::check::ids::InFlightIds`]).
    pub(super) fn answer_now(&mut self, msg: Value) {
        self.send(&msg);
        let frame = self.conn.sent_frames();
        let answers = match &msg {
            Value::Array(a) => &a[..],
            one => std::slice::from_ref(one),
        };
        for id in answers
            .iter()
            .filter_map(|a| a.get("id").and_then(RequestId::from_request_value))
        {
            self.in_flight.answered(&id, frame);
        }
    }

    /// A message the server sent on its own: judged, and answered if it is a request.
    pub(super) fn server_message(
        &mut self,
        id: Option<RequestId>,
        method: &str,
        params: Option<Value>,
    ) {
        if let Some(n) = self.methods_seen.get_mut(method) {
            *n += 1;
        } else if self.methods_seen.len() < MAX_METHODS_COUNTED
            && method.len() <= MAX_COUNTED_NAME_BYTES
        {
            self.methods_seen.insert(method.to_owned(), 1);
        }
        self.foreign.note(method);
        self.foreign.note_sent(method, true);
        if let Some(id) = &id {
            self.request_ids.note(id);
        }
        // MCP: an id is not reused while its request is in flight (`rpc.in-flight-ids-unique`).
        let written = self.conn.written_before();
        let in_use = id
            .as_ref()
            .is_some_and(|id| self.in_flight.opened(id, written));
        // §4.1: a notification-only method carries no id (mcpl/manifestChanged has its own
        // check, manifest.changed-is-notification).
        if method != ManifestChanged::NAME && vocabulary::notification_only(method) {
            self.notifications_seen = self.notifications_seen.saturating_add(1);
            if let Some(id) = &id {
                self.notifications_with_id = self.notifications_with_id.saturating_add(1);
                if self.first_notification_with_id.is_none() {
                    let id: String = id.to_string().chars().take(MAX_QUOTED_ID_CHARS).collect();
                    self.first_notification_with_id = Some(format!("{method} (id {id})"));
                }
            }
        }
        let requirement = server_requirement(method, params.as_ref());
        // Whether the grant in force withholds what this message needs: its feature set is
        // then not judged as well (one defect, one finding).
        let mut denied = false;
        if let Some(req) = requirement.filter(|r| *r != Requirement::None) {
            if self.receipt_seen {
                // §5.4: judged only under an accepted receipt; without one nothing is ready.
                if self.ready {
                    self.privileged_after_ready += 1;
                    if self.reduction_answered {
                        self.after_reduction += 1;
                    }
                    if self.grant.check(req).is_err() {
                        denied = true;
                        let needs = req.capabilities().sorted_paths().join(" / ");
                        let why = self.withdrawn_note(req.capabilities(), None);
                        let revoked = self
                            .pre_reduction_grant
                            .is_some_and(|g| g.check(req).is_ok());
                        if self.narrowed.is_some() {
                            let full_allowed = self.full_grant().check(req).is_ok();
                            let detail = format!("{method} needs {needs}, not granted{why}");
                            self.narrowing_finding(
                                full_allowed,
                                "grant.messages-within-grant",
                                detail,
                            );
                        } else if !revoked {
                            self.outside_grant
                                .push(format!("{method} needs {needs}, not granted{why}"));
                        } else if self.reduction_answered {
                            self.reduction_violations
                                .push(format!("{method}, though the reduction revoked {needs}"));
                        }
                        // Revoked but not yet answered: the server may not have read the
                        // reduction; refused (-32002), not its failure.
                    }
                } else {
                    // §5.3, §6.7: a refused (or malformed) receipt leaves the server not
                    // operating under the policy; the host rejects this (-32002).
                    self.privileged_unaccepted.push(method.to_owned());
                }
            } else if self.grant_notified && !self.policy_sent {
                self.ready_by_notification.push(method.to_owned());
            } else {
                self.privileged_before_notification |= !self.grant_notified;
                self.privileged_before_ready.push(method.to_owned());
            }
        }
        match method {
            PushEvent::NAME => self.judge_push(id.is_some(), params.as_ref(), denied),
            InferenceRequest::NAME => self.judge_inference(id.is_some(), params.as_ref(), denied),
            ChannelsRegister::NAME => {
                self.register_seen += 1;
                if id.is_none() {
                    self.rec.record(
                        "channels.register-is-request",
                        Status::Fail,
                        "channels/register sent as a notification (§4.1: Request)",
                    );
                }
                let descs = params
                    .as_ref()
                    .and_then(|p| p.get("channels"))
                    .and_then(Value::as_array)
                    .cloned();
                match descs {
                    Some(d) => {
                        self.judge_descriptors(&d, ChannelsRegister::NAME);
                        let arrays = [("channels", &d[..])];
                        self.judge_ids_unique(&arrays, ChannelsRegister::NAME);
                        self.registered_again(&arrays, &[], ChannelsRegister::NAME);
                    }
                    None => {
                        self.descriptors_seen += 1;
                        self.rec.record(
                            "channels.descriptor-shape",
                            Status::Fail,
                            "channels/register params.channels is not an array",
                        );
                    }
                }
            }
            ChannelsChanged::NAME => {
                let arrays: Vec<(&str, Vec<Value>)> = ["added", "updated"]
                    .into_iter()
                    .filter_map(|key| {
                        let d = params.as_ref()?.get(key)?.as_array()?.clone();
                        Some((key, d))
                    })
                    .collect();
                for (_, d) in &arrays {
                    self.judge_descriptors(d, ChannelsChanged::NAME);
                }
                let views: Vec<(&str, &[Value])> =
                    arrays.iter().map(|(k, d)| (*k, &d[..])).collect();
                self.judge_ids_unique(&views, ChannelsChanged::NAME);
                let removed: Vec<&str> = params
                    .as_ref()
                    .and_then(|p| p.get("removed"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let added: Vec<(&str, &[Value])> = views
                    .iter()
                    .filter(|(k, _)| *k == "added")
                    .copied()
                    .collect();
                self.registered_again(&added, &removed, ChannelsChanged::NAME);
            }
            ChannelsIncoming::NAME => {
                self.incoming_seen += 1;
                let messages = params
                    .as_ref()
                    .and_then(|p| p.get("messages"))
                    .and_then(Value::as_array);
                for m in messages.into_iter().flatten() {
                    self.judge_ambient(ChannelsIncoming::NAME, m.get("tags"));
                }
                let defects = inspect::incoming_defects(params.as_ref());
                if !defects.is_empty() {
                    self.rec
                        .record("channels.incoming-shape", Status::Fail, defects.join("; "));
                }
                if id.is_none() {
                    self.rec.record(
                        "channels.incoming-is-request",
                        Status::Fail,
                        "channels/incoming sent as a notification (§4.1: Request; §14.3 results)",
                    );
                }
            }
            ManifestChanged::NAME => {
                self.changed_seen += 1;
                if id.is_some() {
                    self.rec.record(
                        "manifest.changed-is-notification",
                        Status::Fail,
                        "mcpl/manifestChanged sent as a Request, with an id (§17.3: a \
                         Notification; the library host answers it -32601)",
                    );
                }
                // Kept by the host's rule: only a revision of the digest's shape, the latest
                // announcement's (a malformed one fails `manifest.changed-shape`, once).
                self.announced = mcpl::protocol::manifest::announced_revision(params.as_ref())
                    .map(str::to_owned);
                let domains = params
                    .as_ref()
                    .and_then(|p| p.get("domains"))
                    .and_then(Value::as_array);
                // Only the three domains §17.3 names are kept (so the set stays bounded
                // whatever a server announces); another is a shape defect, judged below.
                for d in domains.into_iter().flatten().filter_map(Value::as_str) {
                    if let Some(known) = mcpl::manifest::ChangeDomain::ALL
                        .iter()
                        .find(|c| c.as_str() == d)
                    {
                        self.announced_domains.insert(known.as_str());
                    }
                }
                let d = inspect::manifest_changed_defects(params.as_ref());
                if !d.is_empty() {
                    self.rec
                        .record("manifest.changed-shape", Status::Fail, d.join("; "));
                }
            }
            _ => {}
        }
        let Some(id) = id else {
            if matches!(method, ChannelsRegister::NAME | ChannelsChanged::NAME)
                && mcpl::protocol::takes_form(method, true)
            {
                // `channels/changed`'s Notification form changes the channel set as well
                // (§14.5): the strict host applies it (grant permitting) and has nothing to
                // answer. A `channels/register` Notification (§4.1: Request only,
                // `channels.register-is-request`) is not applied, as the library host
                // does not apply it (`protocol::Kind::takes`).
                let _ = self.reply_to(method, params.as_ref());
            }
            return;
        };
        if in_use {
            // Refused, never run, as the library's peer and host refuse it (JSON-RPC 2.0 §5:
            // its answer cannot be told from the earlier one's; this one is -32600).
            let refusal = mcpl::jsonrpc::InvalidMessage::id_in_use(id.clone()).answer_error();
            self.answer(&id, Err(refusal));
            return;
        }
        let outcome = self.reply_to(method, params.as_ref());
        if method == InferenceRequest::NAME {
            // §10.7: held while a judged hook is outstanding, unless a batch's answers are
            // being gathered (they go back together).
            if self.batch.is_none() && self.hook_path.holds() {
                let quoted: String = id.to_string().chars().take(MAX_QUOTED_ID_CHARS).collect();
                self.hook_path.hold(id, format!("id {quoted}"), outcome);
                return;
            }
            self.hook_path.answered_at_once();
        }
        self.answer(&id, outcome);
    }

    /// The strict host's answer to a server request.
    pub(super) fn reply_to(
        &mut self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, ErrorObject> {
        // The library host's admission rule (direction §4.1, readiness §5.3, grant §5.4,
        // the channels/changed exception §14.5).
        if let Err(r) = mcpl::session::admit_at_host(method, params, self.ready, &self.grant) {
            return Err(r.to_error(method));
        }
        match method {
            // MCP's `ping`, which either party may send: an empty result, as the library
            // host answers it (it was `-32601`, and a server checking its host went away).
            Ping::NAME => Ok(json!({})),
            PushEvent::NAME => {
                // The library host's rule: tags are a shape finding (`push.event-shape`),
                // never a refusal (§16.6: admission is decided before tags are read).
                if !mcpl::protocol::push::push_event_defects(params).is_empty() {
                    return Err(ErrorObject::invalid_params("push/event params malformed"));
                }
                self.feature_set_gate(method, params)
                    .map(|()| json!({ "accepted": true }))
            }
            // §14.5, by the library host's own rules (`session::ChannelTable`): item-wise
            // authorization, descriptor shape and size, removals that always apply,
            // incoming messages judged against what was registered.
            ChannelsRegister::NAME
            | ChannelsChanged::NAME
            | ChannelsIncoming::NAME
            | ChannelsList::NAME => {
                let mut diags = Vec::new();
                let limits = mcpl::session::ChannelLimits::default();
                let grant = if self.ready {
                    self.grant
                } else {
                    Grant::none()
                };
                let result = match method {
                    ChannelsRegister::NAME => self
                        .channels
                        .register(&mut diags, params, false, &grant, &limits),
                    ChannelsChanged::NAME => self
                        .channels
                        .changed(&mut diags, params, false, &grant, &limits),
                    ChannelsIncoming::NAME => self.channels.incoming(
                        &mut diags,
                        params,
                        &grant,
                        &limits,
                        None,
                        "server",
                        |_| true,
                    ),
                    _ => Ok(self.channels.list()),
                };
                if matches!(method, ChannelsRegister::NAME | ChannelsChanged::NAME) {
                    self.note_registered(method, params);
                }
                if method == ChannelsIncoming::NAME {
                    self.judge_incoming_registered(&diags);
                }
                result
            }
            // §12.2: the model the checker's (pretend) inference would use.
            ModelInfoRequest::NAME => Ok(checker_model()),
            InferenceRequest::NAME => {
                if !inspect::inference_request_defects(params).is_empty() {
                    return Err(ErrorObject::invalid_params(
                        "inference/request params malformed",
                    ));
                }
                // The checker performs no inference: a host without a model (§6.6).
                self.feature_set_gate(method, params)
                    .and(Err(ErrorObject::method_not_found(method)))
            }
            // `channels/list` and the rest are answered with an error rather than silence
            // (§6.6).
            _ => Err(ErrorObject::method_not_found(method)),
        }
    }

    /// The strict host's feature-set check of a tagged request (§6.5, §6.6), by the host's
    /// own rule ([`mcpl::session::rules::gate_tagged_request`]): `-32003` for an undeclared
    /// set, `-32001` for one the grant leaves unavailable, and `-32002` for a use the set's
    /// `uses` does not declare (§6.4 rule 2: the host rejects that use).
    pub(super) fn feature_set_gate(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<(), ErrorObject> {
        let mut diags = Vec::new();
        mcpl::session::rules::gate_tagged_request(
            &mut diags,
            method,
            params,
            &self.decls,
            &self.statuses,
        )
    }
}

impl Session {
    /// `channels.incoming-registered` (§14.5: each incoming message is validated against the
    /// channels actually registered; finding F8b): a message the strict host refused as
    /// `unknown_channel` names a channel the server never registered, or one it removed
    /// (`channels/changed`) or was closed since. Reading: a warning, not a failure: the
    /// validation is the host's duty (§14.5 sets the server none), and a server pipelining
    /// a message behind a registration the host refuses cannot know yet; but a message for a
    /// channel it removed itself is lost, which it can know.
    fn judge_incoming_registered(&mut self, diags: &[mcpl::session::HostDiagnostic]) {
        let unknown: Vec<String> = diags
            .iter()
            .filter_map(|d| match d {
                mcpl::session::HostDiagnostic::ChannelRejected {
                    id,
                    reason: "unknown_channel",
                    ..
                } => Some(format!("{:?}", id.chars().take(64).collect::<String>())),
                _ => None,
            })
            .take(4)
            .collect();
        if !unknown.is_empty() {
            self.rec.record(
                "channels.incoming-registered",
                Status::Warn,
                format!(
                    "channels/incoming message(s) {} name a channel not registered on this \
                     connection (never registered, or removed by channels/changed or closed \
                     since): refused unknown_channel (§14.5: validated against the channels \
                     actually registered)",
                    unknown.join(", ")
                ),
            );
        }
    }
}
