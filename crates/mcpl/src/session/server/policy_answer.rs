//! The server's answer to a policy Request (§5.3, §5.4, §6.7): one rule for the library's
//! server and `mcpl check-host`.

use serde_json::Value;

use crate::capability::CapabilitySet;
use crate::jsonrpc::ErrorObject;
use crate::policy::{Fallback, Form, Receipt, ServerPolicyState};
use crate::session::ServerDiagnostic;

impl super::ServerState {
    /// A policy Request refused before it was read (an id in use by a request in flight,
    /// `jsonrpc` not `"2.0"`, over a bound of the connection's such as
    /// `PeerConfig::max_message_size` or `max_parsed_cost`; its error already written by
    /// whoever refused it) is a
    /// grant of nothing, as one whose params cannot be read is, and reported
    /// (`policy_malformed`). Reading (§6.7: a reduction is respected whatever its carrier,
    /// and at once; a host revokes before it sends): the server cannot see what it asked,
    /// so it may be a reduction, and fail closed is to hold nothing until the next policy
    /// Request is read. Before (F6), the wider grant before it stayed in force. Does
    /// nothing before `initialize` or after the close.
    pub fn handle_policy_unread(&mut self) {
        self.handle_policy_unread_as(Form::Request);
    }

    /// [`Self::handle_policy_unread`] for a policy message refused before it was read in
    /// either `form`. A Notification (no `id`) refused unread (over a bound, or refused by
    /// the parser; never answered, JSON-RPC 2.0 §4.1) is a grant of nothing too. Reading
    /// (§6.7: a narrowing Notification is applied at once; §6.4 fail closed): what it asked
    /// cannot be seen, so it may be a narrowing, and nothing is held until the next policy
    /// Request is read; the user is told by the diagnostic (`policy_malformed`, form
    /// Notification), since nothing answers the host. Before, the peer only reported the
    /// refusal and the grant before it stayed. Does nothing before `initialize` or after
    /// the close.
    pub fn handle_policy_unread_as(&mut self, form: Form) {
        if self.closed || !self.initialized {
            return;
        }
        self.generation += 1;
        let error = match form {
            Form::Request => {
                let answer =
                    answer_policy_request(&mut self.policy, self.rules.required, &Value::Null);
                drop(answer);
                "refused before it was read (its id in use, not JSON-RPC 2.0, or over a bound \
                 of the connection's: size, parse cost, buffer budget, nesting): nothing is \
                 granted until the next policy Request (§6.7)"
            }
            Form::Notification => {
                // As params that cannot be read do (`ServerPolicyState::apply`).
                self.policy.grant_nothing();
                "a policy Notification refused before it was read (over a bound of the \
                 connection's: size, parse cost, buffer budget, nesting; or not JSON): it may \
                 have been a narrowing, so nothing is granted until the next policy Request \
                 (§6.7, §6.4 fail closed)"
            }
        };
        self.out.push_back(super::ServerOutput::Diagnostic(
            ServerDiagnostic::PolicyMalformed {
                form,
                error: error.into(),
            },
        ));
        self.after_policy();
    }
}

impl super::ServerState {
    /// Reads one frame's text as one message ([`crate::jsonrpc::Message::parse`], the
    /// peer's reading) and handles it ([`Self::handle_message`]). `Err`, the message not
    /// handled: the text is no single valid message; the driver writes what it is owed
    /// ([`crate::jsonrpc::ParseError::owed_answers`]), and a batch read whole is the
    /// driver's to split (its entries' texts come here one by one). A text so refused that
    /// shows the policy message (§6.7: `featureSets/update`, its method read as a parser
    /// reads it, in a single object or a batch's entries, as far as the text reads) is
    /// refused unread: this state treats it as such itself
    /// ([`Self::handle_policy_unread_as`], in the form it shows; §6.4 fail closed), so a
    /// driver cannot forget it, as the async peer tells its server. A batch that parses is
    /// not refused here (its entries are read), so it is not. [`Self::handle_frame`] takes
    /// every frame whole instead (batches, several messages, junk), never `Err`.
    pub fn handle_text(
        &mut self,
        now: std::time::Instant,
        text: &str,
    ) -> Result<(), crate::jsonrpc::ParseError> {
        match crate::jsonrpc::Message::parse(text) {
            Ok(msg) => {
                crate::session::frames::report_fractional(self, &msg);
                self.handle_message(now, msg);
                Ok(())
            }
            Err(e) => {
                let start = crate::jsonrpc::message_start(text);
                let batch_read =
                    matches!(e, crate::jsonrpc::ParseError::Invalid(_)) && start.starts_with('[');
                if !batch_read {
                    if let Some(form) = crate::jsonrpc::head::policy_in(start) {
                        self.handle_policy_unread_as(form);
                    }
                }
                Err(e)
            }
        }
    }
}

/// How a server answers one policy Request ([`answer_policy_request`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyAnswer {
    /// The response: the receipt (accepting or refusing), or `-32602` for malformed params.
    pub response: Result<Value, ErrorObject>,
    /// Defects of the host to report (`policy_malformed`, `unknown_feature_set`, …).
    pub diagnostics: Vec<ServerDiagnostic>,
    /// `Some` when the policy was refused for lacking `required` capabilities: the state was
    /// reset (not ready, nothing granted) and the caller does what the fallback says
    /// (`mcp-only`: no MCPL on this connection; `close`: close after the receipt).
    pub refused: Option<Fallback>,
}

/// Applies one `featureSets/update` Request (§5.3, §6.7) to `policy` and decides the answer:
/// [`ServerState`](super::ServerState) (which `server::Server` drives) and `mcpl check-host` answer through it.
/// Only the part of the grant within `policy`'s advertisement is in force
/// ([`ServerPolicyState::set_advertised`], §5.4); the rest is reported first
/// ([`ServerDiagnostic::GrantBeyondAdvertisement`]). Capabilities in `required` that the
/// grant lacks refuse the policy with their fallback; a refused policy is not operated
/// under, so the state becomes not ready with nothing granted.
pub fn answer_policy_request(
    policy: &mut ServerPolicyState,
    required: Option<(CapabilitySet, Fallback)>,
    params: &Value,
) -> PolicyAnswer {
    let outcome = match policy.apply(Form::Request, params) {
        Ok(o) => o,
        Err(e) => {
            return PolicyAnswer {
                response: Err(e.to_error()),
                diagnostics: vec![ServerDiagnostic::PolicyMalformed {
                    form: Form::Request,
                    error: e.to_string(),
                }],
                refused: None,
            }
        }
    };
    // §5.4: what the host granted beyond the advertisement is not in force; said first.
    let excess = outcome.excess;
    let beyond = (!excess.is_empty()).then_some(ServerDiagnostic::GrantBeyondAdvertisement {
        named: excess.named,
        by_pattern: excess.by_pattern,
    });
    let diagnostics = beyond
        .into_iter()
        .chain(names_no_path(params))
        .chain(crate::session::server_report::from_policy(
            outcome.diagnostics,
        ))
        .collect();
    if let Some((required, fallback)) = required {
        let missing = required.difference(policy.grant().capabilities());
        if !missing.is_empty() {
            let refused = Receipt::refused(
                fallback,
                missing,
                Some("required capabilities are not granted".into()),
            );
            policy.reset();
            return PolicyAnswer {
                response: Ok(refused.to_value()),
                diagnostics,
                refused: Some(fallback),
            };
        }
    }
    let receipt = outcome.receipt.unwrap_or_else(|| policy.receipt());
    PolicyAnswer {
        response: Ok(receipt.to_value()),
        diagnostics,
        refused: None,
    }
}

/// How many entries naming no path a `grant_names_no_path` diagnostic quotes, each with what
/// to write instead.
const NAMELESS_QUOTED: usize = 8;

/// The longest entry given a "did you mean" hint (ranking the paths by edit distance costs
/// in the entry's length; a longer one is no typo of a path).
const HINTED_ENTRY_BYTES: usize = 64;

/// §5.4, §6.2: the `effectiveCapabilities` entries of an applied policy Request that name no
/// capability path (a typo, a case variant, a bare parent such as `channels`, a pattern short
/// of the paths' depth such as `contextHooks.*`): they grant nothing, as absence is denial,
/// and that the host wrote them is reported once per Request
/// ([`ServerDiagnostic::GrantNamesNoPath`]) rather than absorbed. The entries were read
/// (and bounded, `policy::MAX_POLICY_LIST_ENTRIES`) by the apply before this runs.
fn names_no_path(params: &Value) -> Option<ServerDiagnostic> {
    let entries = params.get("effectiveCapabilities")?.as_array()?;
    let mut quoted = Vec::new();
    let mut count = 0usize;
    for e in entries.iter().filter_map(Value::as_str) {
        let Ok(p) = crate::capability::Pattern::parse(e) else {
            continue;
        };
        if !p.resolved().is_empty() {
            continue;
        }
        count += 1;
        if quoted.len() < NAMELESS_QUOTED {
            let hint = if e.len() <= HINTED_ENTRY_BYTES {
                match crate::capability::Grant::from_policy([e]) {
                    Err(crate::capability::PatternError::NoPath { hint, .. }) => hint,
                    _ => String::new(),
                }
            } else {
                "name a capability path".to_owned()
            };
            let mut entry = e.to_owned();
            crate::session::clip_text(&mut entry);
            quoted.push((entry, hint));
        }
    }
    (count > 0).then_some(ServerDiagnostic::GrantNamesNoPath {
        entries: quoted,
        count,
    })
}
