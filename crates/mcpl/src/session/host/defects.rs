//! The one rule for what a host may be configured with ([`HostRules::defects`]), applied
//! at both entry points: [`HostState::new`] and `host::HostSession::connect` (whose
//! `HostConfig::defects` is this rule under the config's field names).

use super::*;
use crate::config_rules::Named;

/// Why `field` holding `value` (read as `entry` of a feature-set list) selects nothing:
/// the text every refusal of a selection entry gives (§6.3,
/// [`crate::manifest::edit::is_feature_set_pattern`]).
pub(crate) fn not_a_set_pattern(field: &str, entry: &str) -> String {
    format!(
        "{field} entry {entry:?} is not a feature-set name or pattern, so it selects \
         nothing: write dot-separated segments of [A-Za-z0-9_:-], or `*` as a whole \
         segment (`memory.*`, §6.3)"
    )
}

/// The first entry of `entries` that is not a feature-set name or pattern (§6.3), refused
/// as [`not_a_set_pattern`] says.
pub(crate) fn check_set_patterns(field: &str, entries: &[String]) -> Result<(), String> {
    match entries
        .iter()
        .find(|e| !crate::manifest::edit::is_feature_set_pattern(e))
    {
        Some(bad) => Err(not_a_set_pattern(field, bad)),
        None => Ok(()),
    }
}

impl HostRules {
    /// Every value of these rules that cannot work, each naming its field
    /// (`HostRules.…`), what it holds and what to write; empty when there is none.
    /// [`HostState::new`] refuses rules with any ([`RulesError::Invalid`]), and
    /// `host::HostSession::connect` refuses a `HostConfig` by the same rule.
    ///
    /// Readings (the spec sets none of these numbers unless cited):
    /// - A zero timeout would end every wait at once; each is at least 1 ms
    ///   (`answer_timeout` too when `Some`; `None` is no deadline).
    /// - `suspend_after_failures` is at least 2 (§17.5: never suspend on a single failure).
    /// - `manifest_fetch_burst` is at least 1 and `manifest_fetch_per_sec` a finite rate of
    ///   at least 0 (§17.8 bounds the rate; NaN, a negative or an infinite one was read as
    ///   0, the opposite of what an infinite one asks).
    /// - Every count or byte bound is at least 1. Zero in none of them is a deliberate
    ///   "accept none": each would refuse every message of its kind while the grant still
    ///   tells the server it may send it (§5.4), so the server is blamed for the host's
    ///   setting. Not accepting a kind is said by leaving it out of `policy` (channels,
    ///   hooks' inject leaves, `pushEvents`) or by `channels.patterns: Some(vec![])`. In
    ///   turn: `max_pending_outputs` 0 would deliver no event or request (it was read as
    ///   1); `dedupe_window` 0 would remember no `eventId` (§9.4: hosts SHOULD deduplicate;
    ///   it was read as 1); `max_event_id_bytes` 0 refuses every `push/event` (§9.2 requires
    ///   an `eventId`); `max_feature_sets` 0 refuses every manifest that declares a set at
    ///   connect (§6.1); `max_injections_per_hook` 0 fails every hook answer that injects
    ///   (§10.2); the channel bounds (§14.5) 0 reject every registration `channel_limit`,
    ///   every `channels/register`/`changed` and `channels/incoming` that carries anything,
    ///   and every descriptor.
    /// - Each `enabled` and `disabled` entry is a feature-set name or pattern (§6.3,
    ///   [`crate::manifest::edit::is_feature_set_pattern`]), since any other selects
    ///   nothing.
    /// - Each `channels.patterns` entry is an exact channel id or a prefix followed by one
    ///   `*` ([`ChannelLimits::permits`]): an empty entry matches no id, and a `*` anywhere
    ///   else matches only that literal text, so either refuses every registration it was
    ///   written to admit (§14.5).
    pub fn defects(&self) -> Vec<String> {
        self.defects_named(&|field| format!("HostRules.{field}"))
    }

    /// The rule of [`Self::defects`], each field named by `name` from its path in
    /// `HostRules` (`channels.max_channels`, say): `HostConfig` names them as its own.
    pub(crate) fn defects_named(&self, name: &dyn Fn(&'static str) -> String) -> Vec<String> {
        let mut out = Vec::new();
        for (field, d) in [
            ("initialize_timeout", self.initialize_timeout),
            ("policy_timeout", self.policy_timeout),
            ("hook_timeout", self.hook_timeout),
            ("manifest_timeout", self.manifest_timeout),
        ] {
            crate::config_rules::timeout(
                &mut out,
                &Named(name, field),
                d,
                "every wait would end at once",
            );
        }
        crate::config_rules::optional_timeout(
            &mut out,
            &Named(name, "answer_timeout"),
            self.answer_timeout,
            "every server request would be answered -32603 before the application could",
        );
        let mut at_least = |field: &'static str, value: u128, min: u128, why: &str| {
            if value < min {
                out.push(format!(
                    "{} is {value}: give at least {min} ({why})",
                    name(field)
                ));
            }
        };
        let never = "nothing could ever pass";
        let burst = u128::from(self.manifest_fetch_burst);
        at_least("manifest_fetch_burst", burst, 1, never);
        at_least(
            "suspend_after_failures",
            u128::from(self.suspend_after_failures),
            2,
            "§17.5: MCPL is never suspended on a single failure",
        );
        let c = &self.channels;
        let counts: [(&'static str, usize, &str); 8] = [
            ("max_pending_outputs", self.max_pending_outputs, never),
            (
                "dedupe_window",
                self.dedupe_window,
                "§9.4: hosts SHOULD deduplicate, and no eventId would be remembered",
            ),
            (
                "max_event_id_bytes",
                self.max_event_id_bytes,
                "every push/event carrying an eventId would be refused (§9.2 requires one)",
            ),
            (
                "max_feature_sets",
                self.max_feature_sets,
                "every manifest declaring a feature set (§6.1) would be refused at connect; \
                 to grant a server nothing, give it an empty policy",
            ),
            (
                "max_injections_per_hook",
                self.max_injections_per_hook,
                "every hook answer that injects would fail (§10.2); to take no injections, \
                 leave contextHooks.beforeInference.inject.* out of the policy",
            ),
            (
                "channels.max_channels",
                c.max_channels,
                "every registration would be rejected channel_limit (§14.5); to take no \
                 channels, leave channels.* out of the policy or give an empty list of \
                 channel patterns",
            ),
            (
                "channels.max_per_message",
                c.max_per_message,
                "every channels/register and channels/changed carrying a descriptor would \
                 be refused (§14.5)",
            ),
            (
                "channels.max_incoming_per_batch",
                c.max_incoming_per_batch,
                "every channels/incoming carrying a message would be refused (§14.3)",
            ),
        ];
        for (field, value, why) in counts {
            at_least(field, value as u128, 1, why);
        }
        at_least(
            "channels.max_descriptor_bytes",
            c.max_descriptor_bytes as u128,
            1,
            "every channel descriptor would be rejected (§14.2)",
        );
        let rate = self.manifest_fetch_per_sec;
        if !(rate.is_finite() && rate >= 0.0) {
            out.push(format!(
                "{} is {rate}: give a finite rate of at least 0 fetches per second (§17.8 \
                 bounds the rate; 0.2 by default, 0 for no more than manifest_fetch_burst \
                 fetches)",
                name("manifest_fetch_per_sec")
            ));
        }
        for entry in c.patterns.iter().flatten() {
            let star = entry.find('*');
            if entry.is_empty() || star.is_some_and(|at| at + 1 != entry.len()) {
                out.push(format!(
                    "{} entry {entry:?} is no channel-id pattern, so it matches only itself: \
                     write an exact id, or a prefix followed by one `*` (`discord:*`; `*` \
                     alone permits every id)",
                    name("channels.patterns")
                ));
            }
        }
        let lists: [(&'static str, &[String]); 2] = [
            ("enabled", self.enabled.as_deref().unwrap_or_default()),
            ("disabled", &self.disabled),
        ];
        for (field, list) in lists {
            for entry in list {
                if !crate::manifest::edit::is_feature_set_pattern(entry) {
                    out.push(not_a_set_pattern(&name(field), entry));
                }
            }
        }
        out
    }
}
