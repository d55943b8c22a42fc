//! `rpc.methods-in-vocabulary`: every request or notification a server sends is counted,
//! and the methods that are neither MCP (the 2025-06-18 revision the checker speaks,
//! [`mcpl::protocol::is_mcp_method`]) nor MCPL 0.5 (§4.1, the library's typed registry
//! [`mcpl::protocol::METHOD_NAMES`]) are reported with their counts. Methods of the 0.4 era that 0.5.0 removed are named as such,
//! and so are the state/branch methods implementations ship ahead of §8 (AUDIT-001 §4.3).
//!
//! Reading (the spec does not grade this): such a method is answered `-32601` by the strict
//! host, which is correct, but a server that keeps sending it is talking to a host that
//! cannot hear it, so the check warns; it never fails.
//!
//! The same counts keep the methods a side sends that §4.1's Direction column (the library's
//! registry, [`mcpl::protocol::MethodInfo::direction`]) has only the other side send
//! ([`wrong_way`]): `rpc.methods-direction` fails them (`mcpl check-host` judges a host's
//! by the library server's admission rule, under `host.deliveries-within-grant`).

use std::collections::BTreeMap;

/// At most this many distinct foreign method names are remembered; further names are
/// counted together.
pub const MAX_FOREIGN_METHODS: usize = 32;

/// A remembered method name is cut to this many characters (it is peer-chosen text).
const MAX_NAME_CHARS: usize = 64;

/// Whether `method` is MCP or MCPL 0.5.
pub fn in_vocabulary(method: &str) -> bool {
    mcpl::protocol::is_mcp_method(method) || mcpl::protocol::is_known_method(method)
}

/// Whether `method`'s form is Notification only (§4.1): a typed method whose
/// [`mcpl::protocol::Kind`] in the library's table is `Notification`, or one of MCP's
/// untyped methods ([`mcpl::protocol::UNTYPED_MCP_METHODS`]) in its `notifications/`
/// namespace, where MCP puts all of its notifications and nothing else. Sent with an `id`,
/// such a method fails `rpc.notifications-have-no-id` (`mcpl check`) or
/// `host.notifications-have-no-id` (`mcpl check-host`).
pub fn notification_only(method: &str) -> bool {
    match mcpl::protocol::method_info(method) {
        Some(info) => info.kind == mcpl::protocol::Kind::Notification,
        None => {
            mcpl::protocol::UNTYPED_MCP_METHODS.contains(&method)
                && method.starts_with("notifications/")
        }
    }
}

/// The detail of a failed `rpc.notifications-have-no-id` / `host.notifications-have-no-id`:
/// `with_id` of the `seen` messages of a [`notification_only`] method carried an id, the
/// first of them described by `first`.
pub fn notifications_with_id_detail(with_id: usize, seen: usize, first: &str) -> String {
    format!(
        "{with_id} of {seen} message(s) of a notification-only method sent as a Request, with \
         an id (§4.1: a Notification carries none and gets no answer), the first {first}"
    )
}

/// Whether `method`, sent by the server (`by_server`) or the host, goes against §4.1's
/// Direction column: a typed method only the other side sends (`context/beforeInference`
/// or `channels/publish` from a server, `push/event` from a host). An untyped method (MCP's
/// surface the library does not type) is not judged.
pub fn wrong_way(method: &str, by_server: bool) -> bool {
    use mcpl::protocol::Direction;
    match mcpl::protocol::method_info(method).map(|i| i.direction) {
        Some(Direction::HostToServer) => by_server,
        Some(Direction::ServerToHost) => !by_server,
        _ => false,
    }
}

/// What a foreign method is known to be, if anything.
fn era(method: &str) -> Option<String> {
    if let Some(section) = mcpl::protocol::removed_in(method) {
        return Some(format!("0.4-era, removed in 0.5.0, {section}"));
    }
    let state = matches!(method, "state/update" | "state/get") || method.starts_with("branches/");
    state.then(|| "a state/branch extension shipped ahead of §8 (AUDIT-001 §4.3)".to_owned())
}

/// The foreign methods a session saw, with counts (bounded: [`MAX_FOREIGN_METHODS`]), and
/// apart the methods sent the wrong way ([`wrong_way`], bounded alike).
#[derive(Debug, Default)]
pub struct ForeignMethods {
    counts: BTreeMap<String, usize>,
    /// Messages whose method name did not fit in `counts`.
    others: usize,
    /// The methods sent the wrong way, with counts (a typed name: at most the registry's).
    wrong: BTreeMap<&'static str, usize>,
    /// The methods sent against a direction SPEC.md does not give, only the library's
    /// reading ([`mcpl::protocol::direction_is_a_reading`]), with counts.
    against_reading: BTreeMap<&'static str, usize>,
}

impl ForeignMethods {
    /// Counts one request or notification named `method` when it is outside the vocabulary.
    pub fn note(&mut self, method: &str) {
        if in_vocabulary(method) {
            return;
        }
        let name: String = method.chars().take(MAX_NAME_CHARS).collect();
        if let Some(n) = self.counts.get_mut(&name) {
            *n = n.saturating_add(1);
        } else if self.counts.len() < MAX_FOREIGN_METHODS {
            self.counts.insert(name, 1);
        } else {
            self.others = self.others.saturating_add(1);
        }
    }

    /// Counts one request or notification named `method`, sent by the server (`by_server`)
    /// or the host, when it goes the wrong way ([`wrong_way`]).
    pub fn note_sent(&mut self, method: &str, by_server: bool) {
        if !wrong_way(method, by_server) {
            return;
        }
        if let Some(info) = mcpl::protocol::method_info(method) {
            let counts = if mcpl::protocol::direction_is_a_reading(info.name) {
                &mut self.against_reading
            } else {
                &mut self.wrong
            };
            let n = counts.entry(info.name).or_default();
            *n = n.saturating_add(1);
        }
    }

    /// The failure's detail when a method went the wrong way (`sender`: "server" or "host"),
    /// or `None`.
    pub fn describe_wrong_way(&self, sender: &str) -> Option<String> {
        if self.wrong.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .wrong
            .iter()
            .map(|(m, n)| format!("{m:?} ×{n}"))
            .collect();
        let other = if sender == "server" { "host" } else { "server" };
        Some(format!(
            "the {sender} sent what §4.1 has only the {other} send (answered -32601): {}",
            parts.join(", ")
        ))
    }

    /// The warning's detail when a method was sent against the direction only the library
    /// reads into SPEC.md (`sender`: "server" or "host"), or `None`. Reading: SPEC.md
    /// leaves it open, so a peer sending it breaks no rule; the library's side answers it
    /// -32601, so the sender is told it will not be heard: a warning, never a failure.
    pub fn describe_against_reading(&self, sender: &str) -> Option<String> {
        if self.against_reading.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .against_reading
            .iter()
            .map(|(m, n)| format!("{m:?} ×{n}"))
            .collect();
        let other = if sender == "server" { "host" } else { "server" };
        Some(format!(
            "the {sender} sent {}: SPEC.md gives no direction for it (§14.1 names only its \
             capability); this library reads it as sent by the {other} and answers it -32601",
            parts.join(", ")
        ))
    }

    /// The warning's detail, or `None` when every method was in the vocabulary.
    pub fn describe(&self) -> Option<String> {
        if self.counts.is_empty() {
            return None;
        }
        let mut parts: Vec<String> = self
            .counts
            .iter()
            .map(|(m, n)| match era(m) {
                Some(era) => format!("{m:?} ×{n} ({era})"),
                None => format!("{m:?} ×{n}"),
            })
            .collect();
        if self.others > 0 {
            parts.push(format!("{} more message(s) of other methods", self.others));
        }
        Some(format!(
            "outside MCP and MCPL 0.5 (answered -32601): {}",
            parts.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_and_mcpl_methods_are_in_the_vocabulary() {
        for m in [
            "push/event",
            "channels/incoming",
            "mcpl/manifestChanged",
            "notifications/message",
            "sampling/createMessage",
            "ping",
        ] {
            assert!(in_vocabulary(m), "{m}");
        }
        for m in ["state/update", "context/afterInference", "x/y", ""] {
            assert!(!in_vocabulary(m), "{m}");
        }
    }

    #[test]
    fn notification_only_methods_come_from_the_method_table() {
        for m in [
            "notifications/initialized",
            "notifications/message",
            "notifications/progress",
            "notifications/tools/list_changed",
            "inference/lifecycle",
            "inference/chunk",
            "channels/outgoing/chunk",
            "channels/outgoing/complete",
            "mcpl/manifestChanged",
        ] {
            assert!(notification_only(m), "{m}");
        }
        for m in [
            "push/event",
            "ping",
            "channels/changed",
            "featureSets/update",
            "channels/publish",
            "resources/list",
            "notifications/unknown",
            "x/y",
        ] {
            assert!(!notification_only(m), "{m}");
        }
    }

    #[test]
    fn foreign_methods_are_counted_and_0_4_era_ones_named() {
        let mut f = ForeignMethods::default();
        assert_eq!(f.describe(), None);
        for _ in 0..60 {
            f.note("state/update");
        }
        f.note("featureSets/changed");
        f.note("push/event");
        let d = f.describe().unwrap();
        assert!(
            d.contains("\"state/update\" ×60 (a state/branch extension"),
            "{d}"
        );
        assert!(
            d.contains("\"featureSets/changed\" ×1 (0.4-era, removed in 0.5.0, §6.7)"),
            "{d}"
        );
        assert!(!d.contains("push/event"), "{d}");
    }

    /// §4.1's Direction column: a host-to-server method from a server, or a server-to-host
    /// one from a host, is the wrong way; `Either` and untyped methods are not judged.
    #[test]
    fn methods_sent_the_wrong_way_are_counted_by_direction() {
        assert!(wrong_way("context/beforeInference", true));
        assert!(wrong_way("channels/publish", true));
        assert!(wrong_way("tools/call", true));
        assert!(!wrong_way("push/event", true));
        assert!(wrong_way("push/event", false));
        assert!(wrong_way("channels/register", false));
        for m in ["channels/list", "ping", "notifications/message", "x/y"] {
            assert!(!wrong_way(m, true) && !wrong_way(m, false), "{m}");
        }
        let mut f = ForeignMethods::default();
        assert_eq!(f.describe_wrong_way("server"), None);
        f.note_sent("push/event", true);
        f.note_sent("channels/publish", true);
        f.note_sent("channels/publish", true);
        let d = f.describe_wrong_way("server").unwrap_or_default();
        assert!(
            d.contains("\"channels/publish\" ×2") && d.contains("only the host"),
            "{d}"
        );
        assert!(!d.contains("push/event"), "{d}");
    }

    #[test]
    fn distinct_names_are_bounded() {
        let mut f = ForeignMethods::default();
        for i in 0..(MAX_FOREIGN_METHODS + 5) {
            f.note(&format!("x/{i}"));
        }
        f.note(&"y".repeat(10_000));
        assert_eq!(f.counts.len(), MAX_FOREIGN_METHODS);
        assert_eq!(f.others, 6);
        assert!(f
            .describe()
            .unwrap()
            .ends_with("6 more message(s) of other methods"));
    }
}
