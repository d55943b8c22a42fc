//! Host→server probes after the policy exchange: the manifest fetch, unknown methods and
//! members, channel and rollback refusals, defensive lifecycle handling and the
//! `context/beforeInference` hook.

use mcpl::capability::Capability;
use mcpl::jsonrpc::codes;
use mcpl::policy::{self, HostGrant};
use mcpl::protocol::channels::ChannelsList;
use mcpl::protocol::handshake::{Initialize, Ping, ToolsList};
use mcpl::protocol::hooks::BeforeInference;
use mcpl::protocol::lifecycle::InferenceLifecycle;
use mcpl::protocol::manifest::ManifestFetch;
use mcpl::protocol::state::StateRollback;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::*;
use crate::check::inspect;
use crate::check::report::Status;

impl Session {
    pub(super) fn fetch_manifest(&mut self, initial: &Value) {
        let supports = initial.get("revision").is_some();
        match self.request(ManifestFetch::NAME, json!({})) {
            Reply::Result(m) if m.is_object() => {
                self.fetched = Some(m.clone());
                self.take_fetched(&m);
                let (st, d) = inspect::revision_matches(&m);
                if st == Status::Fail {
                    self.rec.record(
                        "manifest.revision-matches-digest",
                        Status::Fail,
                        format!("fetched manifest: {d}"),
                    );
                }
                let same = same_manifest(&m, initial);
                if !same {
                    self.judge_served_manifest(&m, "the manifest mcpl/manifest served");
                }
                if same || self.changed_seen > 0 {
                    self.rec
                        .record("manifest.fetch", Status::Pass, "complete manifest returned");
                } else {
                    self.rec.record(
                        "manifest.fetch",
                        Status::Fail,
                        "fetched manifest differs from initialize's with no mcpl/manifestChanged",
                    );
                }
            }
            Reply::Result(other) => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!("result is not the manifest object: {other}"),
            ),
            Reply::Error(e) if !supports => self.rec.record(
                "manifest.fetch",
                Status::Pass,
                format!(
                    "not supported (no revision); answered with error {}",
                    e.code
                ),
            ),
            Reply::Error(e) => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!(
                    "advertises a revision (§17) but mcpl/manifest failed: {} {:?}",
                    e.code, e.message
                ),
            ),
            // An answer the host refuses (crate::check::driver::authority): no manifest.
            other @ Reply::Invalid(_) => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!("mcpl/manifest got {}", other.describe()),
            ),
            other => self.rec.record(
                "manifest.fetch",
                Status::Fail,
                format!(
                    "mcpl/manifest got {} (§6.6: must error, not silence)",
                    other.describe()
                ),
            ),
        }
    }

    /// §8: servers tolerate and ignore request members they do not know. A request the
    /// server has answered is sent again with an extra params member and must be answered
    /// as without it: `mcpl/manifest` (the same manifest), else `tools/list` (the same
    /// tools), else `channels/list` (the same channels), else `ping` (a result). Reading:
    /// MCP's `_meta`, wherever it is, is metadata a party attaches to a message (a trace
    /// id per answer, say), not the result: the two are compared without it. A list's
    /// `nextCursor` is compared by its presence only, its items in no order ([`compared`]).
    pub(super) fn unknown_member(&mut self) {
        let id = "rpc.unknown-members-ignored";
        let probe = json!({ "xMcplCheckProbe": { "ignore": "me" } });
        let (method, before) = if let Some(m) = self.fetched.clone() {
            (ManifestFetch::NAME, Some(m))
        } else if let Reply::Result(r) = self.request(ToolsList::NAME, json!({})) {
            (ToolsList::NAME, Some(r))
        } else if let Some(r) = self
            .listed
            .is_some()
            .then(|| self.request(ChannelsList::NAME, json!({})))
            .and_then(|r| match r {
                Reply::Result(r) => Some(r),
                _ => None,
            })
        {
            // Taken now, back to back with the probe: the answer the channel probes took
            // earlier may name fewer channels than the server holds by now (§14.3: the list
            // is of the channels known for this connection, which change).
            (ChannelsList::NAME, Some(r))
        } else if self.ping_answered {
            (Ping::NAME, None)
        } else {
            let why = "no request was answered to repeat with an unknown member";
            self.rec.record(id, Status::Skip, why);
            return;
        };
        let what = format!("{method} with an unknown params member");
        match self.request(method, probe) {
            Reply::Result(r) => {
                if method == ManifestFetch::NAME && r.is_object() {
                    self.take_fetched(&r);
                }
                let same = match &before {
                    Some(b) if method == ManifestFetch::NAME => {
                        same_manifest(&r, b) || self.changed_seen > 0
                    }
                    Some(b) => compared(&r) == compared(b),
                    None => true,
                };
                if same {
                    self.rec
                        .record(id, Status::Pass, format!("{what} answered as without it"));
                    return;
                }
                let after = match (method, &before) {
                    (ToolsList::NAME | ChannelsList::NAME, Some(_)) => {
                        match self.request(method, json!({})) {
                            Reply::Result(a) => Some(a),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                let (status, d) = repeat_verdict(&what, before.as_ref(), &r, after.as_ref());
                self.rec.record(id, status, d);
            }
            r @ (Reply::Closed(_)
            | Reply::Timeout { .. }
            | Reply::Invalid(_)
            | Reply::Unread(_)) => self.no_answer(id, &format!("{what}: "), r),
            Reply::Error(e) => self.rec.record(
                id,
                Status::Fail,
                format!("{what} got error {} {:?}", e.code, e.message),
            ),
        }
    }

    /// §8.5, §8.7: `state/rollback` to a checkpoint the server never issued is refused with
    /// `-32005`, asked of the first available feature set that declares `rollback: true`.
    pub(super) fn rollback_unknown_checkpoint(&mut self) {
        let id = "state.rollback-unknown-checkpoint";
        if let Some(why) = self.unusable(Capability::Tools) {
            self.rec.record(id, Status::Skip, why);
            return;
        }
        let set = self
            .decls
            .sets
            .iter()
            .find(|(name, d)| {
                self.available(name) && d.extra.get("rollback") == Some(&Value::Bool(true))
            })
            .map(|(name, _)| name.clone());
        let Some(set) = set else {
            let why = "no available feature set declares rollback";
            self.rec.record(id, Status::Skip, why);
            return;
        };
        let checkpoint = "mcpl-check-no-such-checkpoint";
        let params = json!({ "featureSet": set, "checkpoint": checkpoint });
        match self.request(StateRollback::NAME, params) {
            Reply::Error(e) if e.code == codes::CHECKPOINT_NOT_FOUND => {
                self.rec
                    .record(id, Status::Pass, format!("{set}: answered {}", e.code))
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "{set}: answered {} {:?}; a checkpoint not found is -32005 (§8.7)",
                    e.code, e.message
                ),
            ),
            // §8.6's `success: false` is for a rollback that could not undo its effects.
            Reply::Result(r) if r.get("success") == Some(&Value::Bool(false)) => self.rec.record(
                id,
                Status::Warn,
                format!("{set}: answered success false, not -32005: {r}"),
            ),
            Reply::Result(r) => self.rec.record(
                id,
                Status::Fail,
                format!("{set}: rolled back to a checkpoint it never issued: {r}"),
            ),
            r @ (Reply::Closed(_)
            | Reply::Timeout { .. }
            | Reply::Invalid(_)
            | Reply::Unread(_)) => self.no_answer(id, &format!("{set}: "), r),
        }
    }

    /// §10.5: lifecycle consumers are defensive. A terminal with no `started`, then a turn
    /// with two terminals, must leave the server answering (here: a `ping`).
    pub(super) fn defensive_lifecycle(&mut self) {
        let id = "lifecycle.defensive";
        if let Some(why) = self.unusable(Capability::InferenceLifecycle) {
            self.rec.record(id, Status::Skip, why);
            return;
        }
        if !self.ping_answered {
            let why = "the server answered no ping: nothing to tell it is still answering";
            self.rec.record(id, Status::Skip, why);
            return;
        }
        let phase = |inference: &str, phase: &str| {
            json!({ "inferenceId": inference, "conversationId": "conv_mcpl_check",
                    "turnIndex": 0, "phase": phase })
        };
        for p in [
            phase("inf_mcpl_check_orphan", "completed"),
            phase("inf_mcpl_check_twice", "started"),
            phase("inf_mcpl_check_twice", "completed"),
            phase("inf_mcpl_check_twice", "aborted"),
        ] {
            if !self.notify(InferenceLifecycle::NAME, p) {
                break;
            }
        }
        match self.request(Ping::NAME, json!({})) {
            Reply::Result(_) | Reply::Error(_) => self.rec.record(
                id,
                Status::Pass,
                "still answering after an orphan terminal and a duplicate terminal",
            ),
            other => self.rec.record(
                id,
                Status::Fail,
                format!(
                    "after an orphan terminal and a duplicate terminal, a ping got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §6.6: a request bearing an id is answered, never met with silence; MCP answers `ping`
    /// with an empty result (an error is an answer, and warns). The pings fencing the
    /// listening windows are not judged, so without this a server ignoring `ping` passed.
    /// Sent before the unknown method, so no hook that follows it is taken as fenced.
    /// Reading: MCP's empty result is an object (its `_meta` and other members allowed); a
    /// result that is no object (`"pong"`) is an answer a host decoding it cannot read,
    /// so it warns as an error does.
    pub(super) fn ping_answered(&mut self) {
        let id = "rpc.ping-answered";
        match self.request(Ping::NAME, json!({})) {
            Reply::Result(v) if v.is_object() => {
                self.rec.record(id, Status::Pass, "answered with a result")
            }
            Reply::Result(v) => {
                let mut said = v.to_string();
                if said.len() > 64 {
                    let mut end = 64;
                    while !said.is_char_boundary(end) {
                        end -= 1;
                    }
                    said.truncate(end);
                    said.push('…');
                }
                let d = format!(
                    "answered with the result {said}, which is no object (MCP: an empty \
                     result, {{}})"
                );
                self.rec.record(id, Status::Warn, d)
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Warn,
                format!(
                    "answered error {} rather than a result (MCP: an empty result)",
                    e.code
                ),
            ),
            other => self.rec.record(id, Status::Fail, other.describe()),
        }
    }

    pub(super) fn unknown_method(&mut self) {
        let id = "rpc.unknown-method-errors";
        match self.request("mcpl-check/no-such-method", json!({})) {
            Reply::Error(e) if e.code == codes::METHOD_NOT_FOUND => {
                self.rec.record(id, Status::Pass, "answered -32601")
            }
            Reply::Error(e) => self.rec.record(
                id,
                Status::Warn,
                format!("answered error {} rather than -32601", e.code),
            ),
            Reply::Result(_) => {
                self.rec
                    .record(id, Status::Fail, "answered an unknown method with a result")
            }
            other => self.rec.record(id, Status::Fail, other.describe()),
        }
    }

    pub(super) fn before_inference(&mut self, host_grant: &HostGrant) {
        let hooks = [
            "hooks.answers-without-observe",
            "hooks.injection-positions",
            "hooks.injection-shape",
            "hooks.feature-set-declared",
        ];
        let [answered, positions, shape, hook_set] = hooks;
        let inject = [
            Capability::InjectSystem,
            Capability::InjectBeforeUser,
            Capability::InjectAfterUser,
        ];
        if !inject.iter().any(|c| host_grant.advertised.contains(*c)) {
            let why = "no injection position advertised";
            self.rec.skip_all(&hooks, why);
            return;
        }
        if !self.ready {
            let why = if self.receipt_seen {
                "no accepted, well-formed receipt: the host does not fan out hooks (§5.3, §6.7)"
            } else {
                "policy not established: the host must not fan out hooks (§5.3)"
            };
            self.rec.skip_all(&hooks, why);
            return;
        }
        if !policy::before_inference_applies(&self.grant) {
            let why = format!(
                "injection not granted{}",
                self.withdrawn_note(inject.into_iter().collect(), None)
            );
            self.rec.skip_all(&hooks, &why);
            return;
        }
        let params = self.hook_params(0);
        let result = match self.request(BeforeInference::NAME, params) {
            Reply::Result(r) => {
                self.rec.record(
                    answered,
                    Status::Pass,
                    "answered with userMessage null and observe denied",
                );
                r
            }
            other => {
                self.rec.record(
                    answered,
                    Status::Fail,
                    format!(
                        "beforeInference (userMessage null) got {}",
                        other.describe()
                    ),
                );
                let why = "no beforeInference result";
                self.rec.skip_all(&[positions, shape, hook_set], why);
                return;
            }
        };
        // Its failures were recorded as it was read ([`Session::judge_hook_answer`]); what
        // passes or is skipped is said here (a pass never replaces a failure).
        if inspect::before_inference_defects(&result).is_empty() {
            self.rec
                .record(shape, Status::Pass, "well-formed beforeInference result");
        }
        // Authorized at response-receipt against the current grant (§5.4).
        let injections = match result.get("contextInjections") {
            None => {
                self.rec
                    .record(positions, Status::Pass, "no injections returned");
                self.rec
                    .record(hook_set, Status::Skip, "no injections returned");
                return;
            }
            Some(Value::Array(a)) => a.clone(),
            Some(_) => {
                self.rec
                    .record(hook_set, Status::Skip, "no injection list to attribute");
                return;
            }
        };
        // §6.5: the response names the set its injections come under, and a host takes
        // them only from a declared set the grant leaves available.
        match result.get("featureSet").and_then(Value::as_str) {
            _ if injections.is_empty() => {
                self.rec
                    .record(hook_set, Status::Skip, "no injections returned")
            }
            // A missing featureSet is hooks.injection-shape's finding.
            None => self
                .rec
                .record(hook_set, Status::Skip, "no featureSet named"),
            Some(fs) if self.declared(fs) && self.available(fs) => {
                self.hook_set = Some(fs.to_owned());
                self.rec.record(
                    hook_set,
                    Status::Pass,
                    format!("injections under {fs:?}, declared and available"),
                )
            }
            Some(_) => {}
        }
        let granted = injections
            .iter()
            .all(|inj| policy::authorize_injection(&self.grant, inj).is_ok());
        if granted {
            self.rec.record(
                positions,
                Status::Pass,
                format!(
                    "{} injection(s), all at granted positions",
                    injections.len()
                ),
            );
        }
    }

    /// The verdict on a probe that got no answer (`reply` is `Closed` or `Timeout`): a
    /// connection that ended skips; a timeout fails (§6.6: a request with an id is answered,
    /// with an error if nothing else). `what` prefixes the detail.
    /// What a timeout that follows an earlier unanswered request says: the server stopped
    /// answering after the last request it answered, and the first it left unanswered is
    /// where the defect is counted (issue #18 item 7).
    pub(super) fn cascade_note(&self) -> String {
        let (first, after) = match &self.silent_after {
            Some((first, after)) => (first.as_str(), after.as_deref()),
            None => ("", None),
        };
        let after = after.map_or_else(|| Initialize::NAME.to_owned(), |a| a.to_owned());
        format!(
            "{} {after}: {first} was the first request left unanswered (one defect, \
             reported there)",
            crate::check::report::CASCADE
        )
    }

    pub(super) fn no_answer(&mut self, id: &'static str, what: &str, reply: Reply) {
        match reply {
            Reply::Closed(why) => self.rec.record(
                id,
                Status::Skip,
                format!("connection ended before the answer: {why}"),
            ),
            Reply::Timeout {
                note: Some(note),
                meanwhile,
            } => {
                let line = meanwhile.map(|l| format!("; {l}")).unwrap_or_default();
                self.rec
                    .record(id, Status::Fail, format!("{what}{note}{line}"));
            }
            Reply::Invalid(why) => self.rec.record(
                id,
                Status::Fail,
                format!("{what}answered with an invalid response ({why})"),
            ),
            Reply::Unread(why) => self.rec.record(
                id,
                Status::Fail,
                format!("{what}answered with an answer it could not read: {why}"),
            ),
            Reply::Timeout {
                note: None,
                meanwhile,
            } => {
                let line = meanwhile.map(|l| format!("; {l}")).unwrap_or_default();
                self.rec.record(
                    id,
                    Status::Fail,
                    format!(
                        "{what}{} (§6.6: must error, not silence){line}",
                        crate::check::report::NO_RESPONSE
                    ),
                );
            }
            _ => self.rec.record(
                id,
                Status::Fail,
                format!("{what}no response within the timeout (§6.6: must error, not silence)"),
            ),
        }
    }

    /// Judges the answer to a later `context/beforeInference` (one a probe or session sends
    /// after `hooks.answers-without-observe`'s own, `params` as sent): a result or an error
    /// is an answer; silence (or an invalid response) fails that check by [`Self::no_answer`]
    /// (§6.6: a request that will never be answered MUST get an error), naming the turn, as
    /// its first hook's would. Every hook the checker sends has `userMessage` null (it never
    /// grants `observe`), so each is one that check speaks for; one that did not would be
    /// another check's, and is left to it.
    pub(super) fn later_hook_answered(&mut self, params: &Value, reply: Reply) {
        if matches!(reply, Reply::Result(_) | Reply::Error(_)) || !params["userMessage"].is_null() {
            return;
        }
        let what = format!(
            "the context/beforeInference of turn {} (userMessage null): ",
            params["turnIndex"]
        );
        self.no_answer("hooks.answers-without-observe", &what, reply);
    }

    /// `context/beforeInference` params for turn `turn`, redacted for the grant (§10.1).
    pub(super) fn hook_params(&self, turn: u64) -> Value {
        let mut params = json!({
            "inferenceId": format!("inf_mcpl_check_{}", turn + 1),
            "conversationId": "conv_mcpl_check",
            "turnIndex": turn,
            "userMessage": "this text must never reach a server denied observe",
            "model": checker_model()
        });
        policy::redact_before_inference(&self.grant, &mut params);
        params
    }
}

/// The verdict on a list answer `probe` (the request with an unknown member) that differs
/// from `before`, the same request without it, given `after`, the same request without it
/// once more (`None`: not asked, or not answered with a result). A server's tools and
/// channels may change at any time (MCP's `list_changed`, §14.3), and a check never fails a
/// conforming server: `probe` as `after` passes (the list changed before the probe); `before`
/// and `after` differing, `probe` as neither, is skipped (the list changed while probed,
/// nothing to compare with); only a probe answered otherwise than the two plain answers
/// around it, which agree, fails.
fn repeat_verdict(
    what: &str,
    before: Option<&Value>,
    probe: &Value,
    after: Option<&Value>,
) -> (Status, String) {
    let Some(after) = after.map(compared) else {
        return (
            Status::Fail,
            format!("{what} returned another result than without it"),
        );
    };
    if compared(probe) == after {
        return (
            Status::Pass,
            format!("{what} answered as without it right after (the list changed before it)"),
        );
    }
    if before.map(compared).as_ref() != Some(&after) {
        return (
            Status::Skip,
            format!(
                "{what}: the list changed with every request (MCP's list_changed, §14.3), so no answer without the member is the same to compare with"
            ),
        );
    }
    (
        Status::Fail,
        format!("{what} returned another result than without it, before and after"),
    )
}

/// A list answer as the unknown-member probe compares it: without `_meta`
/// ([`without_meta`]), a `nextCursor` string read for its presence only, and the `tools`
/// or `channels` listed in no particular order. Readings: MCP's cursor is an opaque token,
/// which a server may issue afresh on every request of the first page, so its text does not
/// tell two answers apart (whether there is a next page does); and neither MCP's
/// `tools/list` nor §14.3's `channels/list` gives its items an order, which a server
/// listing them from a hash map changes from one call to the next.
fn compared(v: &Value) -> Value {
    let mut v = without_meta(v);
    if let Some(cursor) = v.get_mut("nextCursor").filter(|c| c.is_string()) {
        *cursor = Value::String(String::new());
    }
    for list in ["tools", "channels"] {
        if let Some(Value::Array(items)) = v.get_mut(list) {
            items.sort_by_cached_key(Value::to_string);
        }
    }
    v
}

/// `v` without MCP's `_meta` members, at any depth (metadata, not content).
fn without_meta(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| k.as_str() != "_meta")
                .map(|(k, v)| (k.clone(), without_meta(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_meta).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::{compared, repeat_verdict};
    use crate::check::report::Status;
    use serde_json::json;

    /// A probe answer that differs from the plain one before it is judged against a plain
    /// one right after (§14.3: the list may change meanwhile): passed when it matches that,
    /// skipped when the list changed across the probe, failed only when the plain answers
    /// around it agree and it does not.
    #[test]
    fn s8_a_changed_list_is_judged_by_the_answers_around_the_probe() {
        let list = |ids: &[&str]| json!({ "channels": ids.iter().map(|i| json!({ "id": i })).collect::<Vec<_>>() });
        let (a, ab, abc) = (list(&["a"]), list(&["a", "b"]), list(&["a", "b", "c"]));
        let verdict = |before: &serde_json::Value, probe, after: Option<&serde_json::Value>| {
            repeat_verdict("channels/list …", Some(before), probe, after).0
        };
        assert_eq!(verdict(&a, &ab, Some(&ab)), Status::Pass);
        assert_eq!(verdict(&a, &ab, Some(&abc)), Status::Skip);
        assert_eq!(verdict(&a, &ab, Some(&a)), Status::Fail);
        assert_eq!(verdict(&a, &ab, None), Status::Fail);
    }

    /// §8's probe tells answers apart by what they list, not by the order of the items or
    /// the text of an opaque cursor: another tool, or a next page where there was none, is
    /// still another result.
    #[test]
    fn s8_list_answers_compare_by_what_they_list() {
        let a = json!({ "tools": [ { "name": "a" }, { "name": "b" } ], "nextCursor": "x1" });
        let reordered =
            json!({ "tools": [ { "name": "b" }, { "name": "a" } ], "nextCursor": "x2" });
        assert_eq!(compared(&a), compared(&reordered));
        let other = json!({ "tools": [ { "name": "a" }, { "name": "c" } ], "nextCursor": "x1" });
        assert_ne!(compared(&a), compared(&other));
        let last_page = json!({ "tools": [ { "name": "a" }, { "name": "b" } ] });
        assert_ne!(compared(&a), compared(&last_page));
        let fewer = json!({ "tools": [ { "name": "a" } ], "nextCursor": "x1" });
        assert_ne!(compared(&a), compared(&fewer));
    }
}
