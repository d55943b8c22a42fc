//! The channel probes (§14.3, §14.6): `channels/list` is answered, and `channels/publish`
//! and `channels/close` for a channel the server never registered are refused `-32023`
//! (AUDIT-001 §4.2 items 5 and 9: hanging lists, `-32004` instead).
//!
//! Each unknown-channel probe is sent with an id shaped like the server's own registered
//! or listed ones (same prefix, the last segment changed: [`inspect::sibling_channel_id`])
//! as well as the fixed `mcpl-check:never-registered`, and the verdict names which answered
//! what. A server whose id parser refuses the fixed id (`-32602`) before its registration
//! check is not failed for that when the shaped id reached the check and got `-32023`.

use mcpl::capability::Capability;
use mcpl::capability::Grant;
use mcpl::jsonrpc::codes;
use mcpl::protocol::channels::{ChannelsClose, ChannelsList, ChannelsPublish, ChannelsRegister};
use mcpl::session::channels::names_another_channel;
use mcpl::session::ChannelLifecycle;

use super::judge::ID_SHOWN;
use mcpl::protocol::Method;
use serde_json::{json, Value};

use super::*;
use crate::check::inspect;
use crate::check::report::Status;

/// The fixed probe id, which no server registers.
const FIXED_ID: &str = "mcpl-check:never-registered";

impl Session {
    /// `channels/list` (when `channels.register` is granted) and the unknown-channel
    /// `channels/publish` (when `channels.publish` is).
    pub(super) fn channel_probes(&mut self) {
        let list = "channels.list-answered";
        let unknown = "channels.unknown-channel-error";
        if !self.ready {
            let why = self.not_ready_reason("no channel request is sent (§5.3)");
            self.rec.skip_all(&[list, unknown], &why);
            return;
        }
        if !self.grant.allows(Capability::ChannelsRegister) {
            self.rec
                .record(list, Status::Skip, "channels.register not advertised");
        } else {
            match self.request(ChannelsList::NAME, json!({})) {
                Reply::Result(r) => match r.get("channels") {
                    Some(Value::Array(a)) => {
                        let (status, detail) = self.list_against_registered(a);
                        self.rec.record(list, status, detail);
                        self.listed = Some(r.clone());
                    }
                    _ => {
                        self.rec
                            .record(list, Status::Fail, "result has no channels array (§14.3)")
                    }
                },
                Reply::Error(e) => self.rec.record(
                    list,
                    Status::Warn,
                    format!(
                        "answered error {} although channels.register is advertised",
                        e.code
                    ),
                ),
                other => self.rec.record(list, Status::Fail, other.describe()),
            }
        }
        if !self.grant.allows(Capability::ChannelsPublish) {
            self.rec
                .record(unknown, Status::Skip, "channels.publish not advertised");
            return;
        }
        self.unknown_channel_probe(unknown, ChannelsPublish::NAME, Status::Fail, |channel| {
            json!({
                "conversationId": "conv_mcpl_check",
                "channelId": channel,
                "content": [ { "type": "text", "text": "mcpl check probe: not to be delivered" } ]
            })
        });
    }

    /// The verdict on a `channels/list` answer `listed`: §14.3 lists the channels known on
    /// this connection, so one the server registered and the checker accepted (still in
    /// its table: not removed) that the list leaves out warns, naming it (a stub answering
    /// `[]` passed before). Reading: a warning, not a failure, as a server may list a
    /// channel under a scope of its own the spec does not define.
    fn list_against_registered(&self, listed: &[Value]) -> (Status, String) {
        let named: BTreeSet<&str> = listed
            .iter()
            .filter_map(|c| c.get("id").and_then(Value::as_str))
            .collect();
        let missing: Vec<String> = self
            .channels
            .ids()
            .into_iter()
            .filter(|id| !named.contains(id.as_str()))
            .collect();
        let n = listed.len();
        if missing.is_empty() {
            return (Status::Pass, format!("listed {n} channel(s)"));
        }
        // At most 8 named, each cut as `channels.ids-unique` cuts one (server-chosen text).
        let shown: Vec<String> = missing
            .iter()
            .take(8)
            .map(|id| format!("{:?}", id.chars().take(ID_SHOWN).collect::<String>()))
            .collect();
        let more = missing.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let detail = format!(
            "listed {n} channel(s), leaving out {} the server registered and the host \
             accepted (§14.3: the channels known on this connection)",
            shown.join(", ") + &more
        );
        (Status::Warn, detail)
    }

    /// §14.3, §14.6: `channels/close` for a channel the server never registered is refused
    /// with `-32023`; a result (even `closed: false`) leaves the host unable to tell an
    /// unknown channel from a closed one, and warns.
    pub(super) fn close_unknown_channel(&mut self) {
        let id = "channels.close-unknown-error";
        if let Some(why) = self.unusable(Capability::ChannelsLifecycle) {
            self.rec.record(id, Status::Skip, why);
            return;
        }
        self.unknown_channel_probe(
            id,
            ChannelsClose::NAME,
            Status::Warn,
            |channel| json!({ "channelId": channel }),
        );
    }

    /// The probe ids: one shaped like the server's own channel ids (when it registered or
    /// listed any), described with the id it imitates, then the fixed one.
    fn unknown_channel_ids(&self) -> Vec<(String, String)> {
        let mut own: BTreeSet<String> = self.channels.ids().into_iter().collect();
        let listed = self
            .listed
            .as_ref()
            .and_then(|l| l.get("channels"))
            .and_then(Value::as_array);
        for c in listed.into_iter().flatten() {
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                own.insert(id.to_owned());
            }
        }
        let mut ids = Vec::new();
        if let Some(first) = own.iter().next() {
            if let Some(s) = inspect::sibling_channel_id(first, &own) {
                ids.push((s.clone(), format!("{s} (shaped like {first})")));
            }
        }
        ids.push((FIXED_ID.to_owned(), FIXED_ID.to_owned()));
        ids
    }

    /// Sends `method` for each probe id ([`Session::unknown_channel_ids`]) and records `id`:
    /// `-32023` for every one passes; a result is `on_result`; any other error fails (but
    /// `-32602` for the fixed id is tolerated once a shaped id got `-32023`: the server
    /// refused its foreign shape, not an unregistered channel); no answer is judged as by
    /// [`Session::no_answer`].
    fn unknown_channel_probe(
        &mut self,
        id: &'static str,
        method: &str,
        on_result: Status,
        params: impl Fn(&str) -> Value,
    ) {
        let mut worst = Status::Pass;
        let mut parts = Vec::new();
        let mut shaped_refused = false;
        for (channel, described) in self.unknown_channel_ids() {
            let fixed = channel == FIXED_ID;
            let (status, what) = match self.request(method, params(&channel)) {
                Reply::Error(e) if e.code == codes::UNKNOWN_CHANNEL => {
                    shaped_refused |= !fixed;
                    (Status::Pass, format!("{described}: answered -32023"))
                }
                Reply::Error(e) if fixed && shaped_refused && e.code == codes::INVALID_PARAMS => (
                    Status::Pass,
                    format!("{described}: refused as not its id shape ({})", e.code),
                ),
                Reply::Error(e) => (
                    Status::Fail,
                    format!(
                        "{described}: answered error {} {:?} rather than -32023 Unknown channel (§14.6)",
                        e.code, e.message
                    ),
                ),
                Reply::Result(r) => (
                    on_result,
                    format!("{described}: answered with a result, not -32023: {r}"),
                ),
                r @ (Reply::Closed(_) | Reply::Timeout { .. } | Reply::Invalid(_) | Reply::Unread(_)) => {
                    self.no_answer(id, &format!("{method} {described}: "), r);
                    return;
                }
            };
            if status == Status::Fail || (status == Status::Warn && worst == Status::Pass) {
                worst = status;
            }
            parts.push(what);
        }
        self.rec
            .record(id, worst, format!("{method} {}", parts.join("; ")));
    }
}

impl Session {
    /// `channels.ids-unique` across the connection (§14.2: a descriptor's `id` is unique
    /// within the connection): a descriptor of `channels/register` or `channels/changed`
    /// `added` (`arrays`, member and descriptors) naming a channel the server registered
    /// earlier and still holds (neither removed by `channels/changed` nor closed by the host
    /// since, [`Self::settle_lifecycle`]) as another descriptor names two channels by one id;
    /// an update goes in `updated`. Readings (the spec is silent on reuse): the very
    /// descriptor held, registered again, names the one channel, and passes (the host's
    /// state cannot disagree); an id this message also `removed` may come back in it; an id
    /// the host refused was never registered; one the host's `channels/open` answered with
    /// is the host's, not judged. Judged before the message is applied, by the library
    /// host's own rule ([`names_another_channel`]), under which it refuses such a descriptor.
    pub(super) fn registered_again(
        &mut self,
        arrays: &[(&str, &[Value])],
        removed: &[&str],
        via: &str,
    ) {
        for (member, descs) in arrays {
            for (i, d) in descs.iter().enumerate() {
                let Some(id) = d.get("id").and_then(Value::as_str) else {
                    continue;
                };
                if removed.contains(&id) || !self.registered.contains(id) {
                    continue;
                }
                if !names_another_channel(self.channels.get(id), d) {
                    continue;
                }
                let shown: String = id.chars().take(ID_SHOWN).collect();
                let cut = if shown.len() < id.len() { "…" } else { "" };
                self.rec.record(
                    "channels.ids-unique",
                    Status::Fail,
                    format!(
                        "{via} {member}[{i}] names channel id {shown:?}{cut}, already registered \
                         in this connection as another descriptor (neither removed nor closed \
                         since; §14.2: unique within the connection; an update goes in \
                         channels/changed updated)"
                    ),
                );
                return;
            }
        }
    }

    /// Notes the ids a `channels/register` or `channels/changed` (`method`, `params`) just
    /// registered: those of its `channels` or `added` the table now holds; ids no longer
    /// held are forgotten. Bounded by the table's own limit on channels.
    pub(super) fn note_registered(&mut self, method: &str, params: Option<&Value>) {
        let member = if method == ChannelsRegister::NAME {
            "channels"
        } else {
            "added"
        };
        let descs = params.and_then(|p| p.get(member)).and_then(Value::as_array);
        let table = &self.channels;
        self.registered.retain(|id| table.get(id).is_some());
        for d in descs.into_iter().flatten() {
            if let Some(id) = d.get("id").and_then(Value::as_str) {
                if table.get(id).is_some() {
                    self.registered.insert(id.to_owned());
                }
            }
        }
    }

    /// Applies the answer to the checker's `channels/open` or `channels/close` (`op`) to
    /// the channels held, by the library host's rule ([`mcpl::session::ChannelTable::settle`]: a close
    /// answered `closed: true` removes the channel; an unanswered one removes it too,
    /// [`mcpl::session::ChannelTable::unconfirmed`]), so a channel the server closed may be registered
    /// anew (`channels.ids-unique`).
    pub(super) fn settle_lifecycle(&mut self, op: &ChannelLifecycle, reply: &Reply) {
        let grant = if self.ready {
            self.grant
        } else {
            Grant::none()
        };
        let limits = mcpl::session::ChannelLimits::default();
        match reply {
            Reply::Result(r) => self
                .channels
                .settle(&mut Vec::new(), op, r, &grant, &limits),
            Reply::Timeout { .. } => self.channels.unconfirmed(op),
            _ => {}
        }
        let table = &self.channels;
        self.registered.retain(|id| table.get(id).is_some());
    }
}
