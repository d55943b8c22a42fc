//! The channel probes that judge a batch item by item (§14.5): `channels/incoming` mixing a
//! registered channel with one never registered (`host.incoming-unregistered-refused`), and
//! `channels/changed` as a Request (`host.changed-itemized`). Each sends what a host
//! validating only the first item, or the request as a whole, answers otherwise than one
//! validating each.

use mcpl::capability::Capability;
use mcpl::jsonrpc::codes;
use mcpl::protocol::channels::{ChannelsChanged, ChannelsIncoming, ChannelsList};
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::judge::{excerpt, itemized_defects, Meanwhile};
use super::served::{changed_descriptors, mixed_incoming, CHANGED_IDS, MIXED_UNREGISTERED};
use super::session::{poll_once, Reply, Run};
use crate::check::report::Status;

/// The check of the `channels/list` sent once a channel is registered.
const LIST: &str = "host.channels-list-complete";

/// Every channel id the checker offers a host in a run (`channels/register`,
/// `channels/changed`): a listed id outside them was never registered on this connection.
const OFFERED: &[&str] = &[
    "check:a",
    "check:b",
    "check:early",
    super::served::CHANGED_IDS[0],
    super::served::DUPLICATE_ID,
];

/// §14.3 (`channels/list` lists the channels known for this connection): why `result`, the
/// host's answer, does not list `held` (a channel the host accepted in `channels/register`),
/// as `(status, detail)`. Reading, as `mcpl check`'s `channels.list-answered` reads a
/// server's list: no `channels` array fails (§14.3's result), a list leaving `held` out
/// warns (no MUST names the list's content; a stub answering `[]` is the case).
pub(super) fn list_verdict(result: &Value, held: &str) -> (Status, String) {
    let Some(listed) = result.get("channels").and_then(Value::as_array) else {
        let d = format!(
            "the result {} has no channels array (§14.3)",
            excerpt(result)
        );
        return (Status::Fail, d);
    };
    let named = listed
        .iter()
        .any(|c| c.get("id").and_then(Value::as_str) == Some(held));
    let n = listed.len();
    // F8a: an id the checker never registered, or one listed twice (the library's rule).
    let defects = mcpl::protocol::channels::list_defects(listed, |id| OFFERED.contains(&id));
    if !defects.is_empty() {
        let d = format!(
            "channels/list listed {n} channel(s), disagreeing with the channels the checker \
             registered: {} (a warning, as a list leaving one out: no MUST names the list's \
             content)",
            defects.join("; ")
        );
        return (Status::Warn, d);
    }
    if named {
        return (
            Status::Pass,
            format!("listed {n} channel(s), {held} among them"),
        );
    }
    let d = format!(
        "channels/list listed {n} channel(s) and left out {held}, which the host accepted in \
         its answer to channels/register (§14.3: the list is of the channels known for this \
         connection, so the two sides disagree on which exist): {}",
        excerpt(result)
    );
    (Status::Warn, d)
}

/// The check the mixed `channels/incoming` adds to.
const INCOMING: &str = "host.incoming-unregistered-refused";

/// The check of the `channels/changed` probe.
const CHANGED: &str = "host.changed-itemized";

/// Whether `result`, an answer to `channels/register`, accepts the descriptor `id` (§14.5:
/// one result per descriptor, `accepted: true`).
pub(super) fn accepts(result: &Value, id: &str) -> bool {
    result
        .get("results")
        .and_then(Value::as_array)
        .is_some_and(|items| {
            items.iter().any(|i| {
                i.get("id").and_then(Value::as_str) == Some(id)
                    && i.get("accepted") == Some(&Value::Bool(true))
            })
        })
}

/// Whether the per-message result for [`MIXED_UNREGISTERED`] in `result` refuses it
/// (`accepted: false`); `Err` says why no such result can be read. Found by its `messageId`,
/// else (a host that leaves the ids out) by its position, the second.
fn second_refused(result: &Value) -> Result<bool, String> {
    let Some(items) = result.get("results").and_then(Value::as_array) else {
        return Err("no results array".to_owned());
    };
    let by_id = items
        .iter()
        .find(|i| i.get("messageId").and_then(Value::as_str) == Some(MIXED_UNREGISTERED.1));
    let any_id = items.iter().any(|i| i.get("messageId").is_some());
    let item = match (by_id, any_id) {
        (Some(i), _) => i,
        (None, false) => items
            .get(1)
            .ok_or_else(|| format!("{} result(s) for 2 messages", items.len()))?,
        (None, true) => return Err(format!("no result for message {}", MIXED_UNREGISTERED.1)),
    };
    Ok(item.get("accepted") == Some(&Value::Bool(false)))
}

impl Run {
    /// The `channels/register` probe repeating an id, with a `channels/list` (§14.3) sent
    /// just before it once the host accepted `check:a` in the `channels/register` probe:
    /// the list must name `check:a` ([`list_verdict`]). The two are outstanding together,
    /// each within its own step, so the run's bound is unchanged (as the requests sent
    /// before the receipt, [`super::exchange`]).
    pub(super) async fn register_duplicate_and_list(&mut self) {
        let held = "check:a";
        let list = if self.channel_held && !self.closed {
            let mut call = self.start(ChannelsList::NAME, Some(json!({})), self.bounds.step);
            let settled = poll_once(&mut call).await;
            Some((settled, call))
        } else {
            None
        };
        self.register_duplicate().await;
        let Some((settled, call)) = list else {
            if !self.closed {
                let why = "the host accepted no channel of the checker's in the channels/register \
                           probe: no channel the list must name";
                self.record(LIST, Status::Skip, why);
            }
            return;
        };
        self.stage = "the channels/list sent once check:a was registered";
        let reply = match settled {
            Some(r) => self.reply(r),
            None => self.settle(call).await,
        };
        let needs = super::session::needs_of(ChannelsList::NAME, &json!({}));
        self.note_refusal_data(ChannelsList::NAME, needs, &reply);
        let (status, detail) = match reply {
            Reply::Closed => return,
            Reply::Result(r) => list_verdict(&r, held),
            // The inbound form may be refused (§14.3: with an error, not silence); its gate
            // is `host.answers-follow-grant`'s.
            Reply::Error(e) => (
                Status::Skip,
                format!(
                    "channels/list refused with error {}: no list to compare",
                    e.code
                ),
            ),
            Reply::Timeout { note } => (
                Status::Fail,
                format!(
                    "channels/list, sent once {held} was registered, got no response within \
                     the timeout{note} (§6.6: must error, not silence)"
                ),
            ),
            other @ (Reply::Invalid(_) | Reply::Unread(_)) => (
                Status::Fail,
                format!("channels/list got {}", other.describe()),
            ),
        };
        self.record(LIST, status, detail);
    }

    /// §14.5 (receipt-time validation, each message on its own): with `channels.incoming`
    /// granted and `check:a` registered (the `channels/register` probe accepted it), a
    /// `channels/incoming` carrying one message for `check:a` and one for a channel never
    /// registered ([`mixed_incoming`]). The second is refused: a per-message result with
    /// `accepted: false`, or an error refusing the whole (safe: it refuses the second too).
    /// A host that validates only `messages[0]` accepts it and fails. Run in place of
    /// `host.incoming-follows-grant`'s probe, which needs `channels.incoming` withheld, so
    /// the run's step count is unchanged. The message for `check:a` may reach the host's
    /// conversation: it reads "mcpl check-host probe".
    pub(super) async fn incoming_mixed(&mut self) {
        let granted = |run: &Run| {
            run.ready && run.policy.allows(Capability::ChannelsIncoming) && !run.grant_notified
        };
        if !self.channel_held || !granted(self) {
            return;
        }
        self.stage = "the channels/incoming probe mixing a registered channel with another";
        let reply = self
            .call_paired(ChannelsIncoming::NAME, mixed_incoming(), self.bounds.step)
            .await;
        // Under the grant in force when the host answered (`Run::as_answered`): a narrowing
        // it sent behind its answer does not reach back to it (§6.7, wire order).
        if !self.as_answered(granted) {
            // The grant changed under the probe: a refusal would show only that.
            return;
        }
        let (unregistered, message) = MIXED_UNREGISTERED;
        match reply {
            Reply::Error(_) | Reply::Closed => {}
            Reply::Result(r) => match second_refused(&r) {
                Ok(true) => {}
                Ok(false) => self.record(
                    INCOMING,
                    Status::Fail,
                    format!(
                        "a channels/incoming carrying a message for check:a (registered) and \
                         one ({message}) for {unregistered} (never registered) was answered {} \
                         : the second was not refused (§14.5: each message is validated at \
                         receipt against the channels actually registered)",
                        excerpt(&r)
                    ),
                ),
                Err(why) => self.record(
                    INCOMING,
                    Status::Fail,
                    format!(
                        "a channels/incoming mixing check:a (registered) with {unregistered} \
                         (never registered) was answered {} ({why}): §14.5 asks a result per \
                         message",
                        excerpt(&r)
                    ),
                ),
            },
            Reply::Timeout { note } => self.record(
                INCOMING,
                Status::Fail,
                format!(
                    "a channels/incoming mixing a registered channel with one never registered \
                     got no response within the timeout{note} (§6.6: must error, not silence)"
                ),
            ),
            other @ (Reply::Invalid(_) | Reply::Unread(_)) => self.record(
                INCOMING,
                Status::Fail,
                format!(
                    "a channels/incoming mixing channels got {}",
                    other.describe()
                ),
            ),
        }
    }

    /// §14.1, §14.5 (`channels/changed` is dual-mode; its Request form is the one a host can
    /// answer): a `channels/changed` Request adding one new descriptor and one naming
    /// `check:a` ([`changed_descriptors`]). Without `channels.register` granted it is refused:
    /// with an error (§5.4), or, once ready, with one result per descriptor accepting none
    /// (the library host's reading, [`mcpl::session::admit_at_host`]: `channels/changed` is
    /// then admitted so that its removals, which only narrow, still apply, its additions
    /// refused item by item); a result accepting any, or not one per descriptor, fails. With
    /// it granted, the answer is one result per
    /// descriptor in `added`; an error refusing the whole warns (safe, yet §14.5 asks an
    /// itemized answer), any other result fails. Judged under the grant when the host
    /// answered ([`Meanwhile`]).
    pub(super) async fn changed_itemized(&mut self) {
        self.stage = "the channels/changed probe";
        let allowed = |run: &Run| run.ready && run.policy.allows(Capability::ChannelsRegister);
        let sent = allowed(self);
        let reply = self
            .call_paired(
                ChannelsChanged::NAME,
                changed_descriptors(),
                self.bounds.step,
            )
            .await;
        let meanwhile = self.as_answered(|run| Meanwhile {
            sent,
            answered: allowed(run),
            notified: run.grant_notified && run.ready,
        });
        let note = meanwhile.note();
        let (status, detail) = match (meanwhile.expected(), reply) {
            (_, Reply::Closed) => return,
            (Some(false), Reply::Error(e)) => (
                Status::Pass,
                format!(
                    "channels.register not granted, refused with error {}{note}",
                    e.code
                ),
            ),
            (Some(false), Reply::Result(r)) => {
                let defects = itemized_defects(&r, &CHANGED_IDS);
                if defects.is_empty()
                    && !CHANGED_IDS
                        .iter()
                        .any(|id| super::channels::accepts(&r, id))
                {
                    let d = format!(
                        "channels.register not granted, every descriptor in added refused in \
                         its result{note}"
                    );
                    (Status::Pass, d)
                } else {
                    let d = format!(
                        "channels.register is not granted, yet channels/changed was answered {} \
                         (§14.1: adding channels needs channels.register; §5.4: a host MUST \
                         reject an inbound method requiring a denied capability){note}",
                        excerpt(&r)
                    );
                    (Status::Fail, d)
                }
            }
            (_, Reply::Result(r)) => {
                let defects = itemized_defects(&r, &CHANGED_IDS);
                if defects.is_empty() {
                    let d = format!("one result per descriptor in added{note}");
                    (Status::Pass, d)
                } else {
                    let d = format!(
                        "results are not one per descriptor in added ({}): {}{note}",
                        defects.join("; "),
                        excerpt(&r)
                    );
                    (Status::Fail, d)
                }
            }
            (None, Reply::Error(e)) => {
                (Status::Pass, format!("refused with error {}{note}", e.code))
            }
            (Some(true), Reply::Error(e)) => {
                let what = if e.code == codes::METHOD_NOT_FOUND {
                    "not implemented (-32601)".to_owned()
                } else {
                    format!("refused whole with error {}", e.code)
                };
                let d = format!(
                    "channels.register granted, yet the channels/changed Request was {what}: \
                     §14.5 asks one result per descriptor, so the server can tell which of its \
                     channels exist{note}"
                );
                (Status::Warn, d)
            }
            (_, Reply::Timeout { note: n }) => (
                Status::Fail,
                format!("no response within the timeout{n} (§6.6: must error, not silence)"),
            ),
            (_, other @ (Reply::Invalid(_) | Reply::Unread(_))) => (
                Status::Fail,
                format!("channels/changed got {}", other.describe()),
            ),
        };
        self.record(CHANGED, status, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §14.5: the result for the unregistered message is found by messageId, else by
    /// position; one accepted, or none to be found, is no refusal.
    #[test]
    fn s14_5_the_second_message_is_read_by_id_or_position() {
        let (_, m) = MIXED_UNREGISTERED;
        let by_id = json!({ "results": [
            { "messageId": m, "accepted": false },
            { "messageId": "mixed-1", "accepted": true } ] });
        assert_eq!(second_refused(&by_id), Ok(true));
        let accepted = json!({ "results": [
            { "messageId": "mixed-1", "accepted": true },
            { "messageId": m, "accepted": true } ] });
        assert_eq!(second_refused(&accepted), Ok(false));
        let by_position = json!({ "results": [ { "accepted": true }, { "accepted": false } ] });
        assert_eq!(second_refused(&by_position), Ok(true));
        assert!(second_refused(&json!({ "results": [ { "accepted": true } ] })).is_err());
        let missing = json!({ "results": [ { "messageId": "mixed-1", "accepted": true } ] });
        assert!(second_refused(&missing).is_err());
        assert!(second_refused(&json!({ "accepted": true })).is_err());
    }

    /// §14.3: a list naming the held channel passes, one leaving it out (a stub's `[]`)
    /// warns, a result without a channels array fails.
    #[test]
    fn s14_3_a_list_leaving_out_a_held_channel_warns() {
        let listed = json!({ "channels": [ { "id": "check:a", "type": "check" } ] });
        assert_eq!(list_verdict(&listed, "check:a").0, Status::Pass);
        let (status, d) = list_verdict(&json!({ "channels": [] }), "check:a");
        assert_eq!(status, Status::Warn);
        assert!(d.contains("left out check:a") && d.contains("§14.3"), "{d}");
        assert_eq!(list_verdict(&json!({}), "check:a").0, Status::Fail);
        // F8a (§14.3, §14.2): an invented id, or one listed twice, warns naming it.
        for bad in [
            json!({ "channels": [ { "id": "check:a" }, { "id": "evil:invented" } ] }),
            json!({ "channels": [ { "id": "check:a" }, { "id": "check:a" } ] }),
        ] {
            let (status, d) = list_verdict(&bad, "check:a");
            assert_eq!(status, Status::Warn, "{d}");
            assert!(d.contains("evil:invented") || d.contains("repeats"), "{d}");
        }
        let both = json!({ "channels": [ { "id": "check:a" }, { "id": "check:b" },
                                          { "id": "check:dup" } ] });
        assert_eq!(list_verdict(&both, "check:a").0, Status::Pass);
    }

    /// `check:a` is held only when its own result accepts it.
    #[test]
    fn s14_5_a_descriptor_is_held_when_its_result_accepts_it() {
        let r = json!({ "results": [ { "id": "check:a", "accepted": true },
                                     { "id": "check:b", "accepted": false } ] });
        assert!(accepts(&r, "check:a"));
        assert!(!accepts(&r, "check:b"));
        assert!(!accepts(&json!({ "accepted": true }), "check:a"));
    }
}
