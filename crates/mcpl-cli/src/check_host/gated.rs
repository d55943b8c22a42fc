//! `host.answers-follow-grant`'s reading of the `model/info` and `channels/list` probes
//! ([`Gated`]), apart from the probes that send them.

use mcpl::capability::Capability;

use super::judge::{excerpt, Meanwhile};
use super::session::Reply;
use crate::check::report::Status;

/// `host.answers-follow-grant` (§5.4, §12, §14.1; AUDIT-001 §2.3): `model/info` needs
/// `modelInfo` and the inbound `channels/list` needs `channels.register`; a host that does
/// not grant it MUST reply with an error (§12), as it rejects any inbound method requiring a
/// denied capability (§5.4). Judged under the grant in force when the host answered
/// ([`Meanwhile`]); a silence or an invalid answer is `host.answers-every-request`'s.
#[derive(Debug, Default)]
pub(super) struct Gated {
    judged: Vec<String>,
    outside: Vec<String>,
    /// Answers outside the grant in force that the host's own grant allowed: its
    /// `effectiveCapabilities` reached a path the server never advertised (by name or by a
    /// `*` pattern, §5.4), and the host took it as granted. One defect, the grant's
    /// (`host.grant-within-advertisement` fails naming the answer); the answer follows the
    /// grant the host sent, so `host.answers-follow-grant` does not count it again.
    pub(super) beyond: Vec<String>,
    /// Which of the two were answered outside the grant: `model/info`, `channels/list`.
    rules: (bool, bool),
}

impl Gated {
    /// Judges `reply` to `method` under `m`; `offered`: the grant the host sent, as sent
    /// (unintersected with the advertisement), allows `needs` when it answered.
    pub(super) fn judge(
        &mut self,
        method: &str,
        needs: Capability,
        m: Meanwhile,
        offered: bool,
        reply: &Reply,
    ) {
        let cap = needs.as_str();
        match (m.expected(), reply) {
            (Some(false), Reply::Result(r)) if offered && !m.notified => {
                self.beyond.push(format!(
                    "{method} answered {}, {cap} taken as granted though the server never \
                     advertised it",
                    excerpt(r)
                ));
                self.judged.push(format!(
                    "{method} answered under {cap}, which the host's effectiveCapabilities \
                     reach though the server never advertised it (one defect: \
                     host.grant-within-advertisement)"
                ));
            }
            (Some(false), Reply::Result(r)) => {
                if needs == Capability::ModelInfo {
                    self.rules.0 = true;
                } else {
                    self.rules.1 = true;
                }
                self.outside.push(format!(
                    "{method} answered {} though {cap} is not granted{}",
                    excerpt(r),
                    m.note()
                ))
            }
            (Some(false), Reply::Error(e)) => self
                .judged
                .push(format!("{method} refused {} ({cap} not granted)", e.code)),
            (Some(true), Reply::Result(_)) => self
                .judged
                .push(format!("{method} answered ({cap} granted)")),
            (None, Reply::Result(_)) => self.judged.push(format!("{method} answered{}", m.note())),
            (_, Reply::Error(e)) => self.judged.push(format!("{method} refused {}", e.code)),
            _ => {}
        }
    }

    /// The verdict, citing the rule each method answered outside the grant breaks: §12 for
    /// `model/info`, §14.1 and §5.4 for `channels/list`.
    pub(super) fn verdict(self) -> (Status, String) {
        if !self.outside.is_empty() {
            let mut rules = Vec::new();
            if self.rules.0 {
                rules.push(
                    "§12: a host that does not grant modelInfo MUST reply to model/info with an \
                     error",
                );
            }
            if self.rules.1 {
                rules.push(
                    "§14.1: channels/list needs channels.register, and §5.4: a host MUST reject \
                     an inbound method requiring a denied capability",
                );
            }
            let d = format!("{} ({})", self.outside.join("; "), rules.join("; "));
            return (Status::Fail, d);
        }
        if self.judged.is_empty() {
            let why = "neither model/info nor channels/list was answered: nothing to judge";
            return (Status::Skip, why.to_owned());
        }
        (Status::Pass, self.judged.join("; "))
    }
}
