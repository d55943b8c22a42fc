//! The one server rule for each message the host sends, applied by
//! [`ServerState`](super::ServerState) (which `server::Server` drives): where a request goes
//! ([`route_host_request`]: §4.1, §5.3, §5.4) and what a notification does
//! ([`host_notification`]: §6.7, §10.5), under the connection's readiness and grant in
//! force.

use std::time::Instant;

use serde_json::Value;

use super::{admit_at_server, Refusal, ServerDiagnostic};
use crate::capability::{Capability, CapabilitySet, Denied, Grant};
use crate::jsonrpc::{ErrorObject, Notification};
use crate::lifecycle::{LifecycleTracker, TurnEnd, TurnEvent};
use crate::policy::{Form, ServerPolicyState};
use crate::protocol::hooks::BeforeInference;
use crate::protocol::lifecycle::LifecycleParams;
use crate::protocol::Method as _;

/// What [`host_notification`] decided for one host notification.
// Returned once and matched at once: boxing the turns would cost the allocation their
// inline form saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum NotificationStep {
    /// Refused or fully handled here; the diagnostics say why.
    Done,
    /// A `featureSets/update` Notification was applied (§6.7): the grant may have changed.
    PolicyApplied,
    /// `inference/lifecycle` paired into §10.5 turn boundaries: the end of a turn evicted to
    /// make room, then the signal's own event ([`LifecycleTracker::observe_owned`]).
    Turns(Option<TurnEnd>, Option<TurnEvent>),
    /// For the application: `notifications/initialized`, or an admitted MCPL notification.
    Deliver(Notification),
    /// A method this crate does not type and MCPL did not remove:
    /// [`ServerState`](super::ServerState) hands it out (`server::Server`'s driver then
    /// reports it or hands it to its MCP fallback).
    Untyped(Notification),
}

/// A host notification as [`host_notification`] takes it: as read, or an
/// `inference/lifecycle` whose params were read straight into their type.
pub(crate) enum HostNotice {
    /// As read.
    Message(Notification),
    /// `inference/lifecycle` (§10.5) with these params (`server::Server`'s reader).
    // Made only by the runtime's driver, boxed by its reader.
    #[cfg_attr(not(feature = "runtime"), allow(dead_code))]
    Lifecycle(Box<LifecycleParams>),
}

impl From<Notification> for HostNotice {
    fn from(n: Notification) -> HostNotice {
        HostNotice::Message(n)
    }
}

/// The one server rule for a host notification, applied by
/// [`ServerState`](super::ServerState) (which `server::Server` drives): `featureSets/update`
/// as a Notification (§6.7; on an MCP-only connection it is no method, §3.2), the admission
/// of every other MCPL notification taken in that form (§4.1, [`crate::protocol::Kind::takes`];
/// §5.3, §5.4: a refused one has no response to carry the
/// error, so it is reported), a removed surface (`protocol::REMOVED_METHODS`) reported as
/// unknown, and `inference/lifecycle` observed by the §10.5 tracker. What it reports is
/// pushed on `diags`.
pub(crate) fn host_notification(
    mcpl: bool,
    policy: &mut ServerPolicyState,
    turns: &mut LifecycleTracker,
    now: Instant,
    n: HostNotice,
    diags: &mut Vec<ServerDiagnostic>,
) -> NotificationStep {
    let n = match n {
        HostNotice::Message(n) => n,
        // What the steps below do for this method, its params being of its type already:
        // a typed method, taken as a Notification (§4.1), admitted as a Notification whose
        // params do not change its requirement (`InferenceLifecycle::REQUIREMENT`).
        HostNotice::Lifecycle(p) => {
            let method = crate::protocol::lifecycle::InferenceLifecycle::NAME;
            if let Err(refusal) = admit_under(policy, mcpl, method, None) {
                diags.push(ServerDiagnostic::NotificationDenied {
                    method: method.into(),
                    refusal,
                });
                return NotificationStep::Done;
            }
            return observe(turns, *p, now, diags);
        }
    };
    let method = n.method.as_str();
    match method {
        "notifications/initialized" => return NotificationStep::Deliver(n),
        "featureSets/update" if !mcpl => {
            diags.push(ServerDiagnostic::UnknownNotification {
                method: n.method,
                mcp_only: true,
            });
            return NotificationStep::Done;
        }
        "featureSets/update" => {
            let params = n.params.unwrap_or(Value::Null);
            match policy.apply(Form::Notification, &params) {
                Ok(o) => diags.extend(super::server_report::from_policy(o.diagnostics)),
                Err(e) => diags.push(ServerDiagnostic::PolicyMalformed {
                    form: Form::Notification,
                    error: e.to_string(),
                }),
            }
            return NotificationStep::PolicyApplied;
        }
        _ => {}
    }
    if crate::protocol::method_info(method).is_none() {
        if crate::protocol::removed_in(method).is_some() {
            // A surface MCPL 0.5 removed is unknown, whoever would take it.
            diags.push(ServerDiagnostic::UnknownNotification {
                method: n.method,
                mcp_only: false,
            });
            return NotificationStep::Done;
        }
        return NotificationStep::Untyped(n);
    }
    // §4.1: a method in a form its table does not give it is not applied, whatever the
    // grant (`protocol::Kind::takes`, the host's rule too).
    if !crate::protocol::takes_form(method, true) {
        diags.push(ServerDiagnostic::UnexpectedNotification { method: n.method });
        return NotificationStep::Done;
    }
    if let Err(refusal) = admit_under(policy, mcpl, method, n.params.as_ref()) {
        diags.push(ServerDiagnostic::NotificationDenied {
            method: n.method,
            refusal,
        });
        return NotificationStep::Done;
    }
    if method != "inference/lifecycle" {
        return NotificationStep::Deliver(n);
    }
    let p: LifecycleParams = match crate::jsonrpc::parse_params(n.params) {
        Ok(p) => p,
        Err(e) => {
            diags.push(ServerDiagnostic::InvalidNotification {
                method: n.method,
                error: e.message.into_owned(),
            });
            return NotificationStep::Done;
        }
    };
    observe(turns, p, now, diags)
}

/// `inference/lifecycle` params observed by the §10.5 tracker.
fn observe(
    turns: &mut LifecycleTracker,
    p: LifecycleParams,
    now: Instant,
    diags: &mut Vec<ServerDiagnostic>,
) -> NotificationStep {
    // §10.5's table requires these on `started` (the one rule, `missing_members`): a
    // defect of the host, reported; the turn still correlates by its `inferenceId`. An id
    // past the tracker's bound is the tracker's to refuse (`IdTooLong`), so it is not
    // quoted here. No allocation unless something is missing.
    let missing = p.missing_members();
    if !missing.is_empty() && p.inference_id.len() <= turns.config().max_id_bytes {
        diags.push(ServerDiagnostic::LifecycleMissingMembers {
            inference_id: p.inference_id.clone(),
            members: missing,
        });
    }
    let obs = turns.observe_owned(p, now);
    diags.extend(obs.diagnostics.into_iter().map(ServerDiagnostic::Lifecycle));
    NotificationStep::Turns(obs.evicted, obs.event)
}

/// Where [`route_host_request`] sends a host request that is not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestRoute {
    /// `initialize` ([`read_initialize`] decides the rest).
    Initialize,
    /// `ping`: answered `{}` at any time.
    Ping,
    /// An admitted `featureSets/update` Request (§6.7, [`answer_policy_request`]).
    Policy,
    /// A method this crate does not type: the application's own, or its MCP fallback's.
    Untyped,
    /// A typed host → server method the admission rule admitted (§5.3, §5.4).
    Admitted,
}

/// The one server rule for where a host request goes, applied by
/// [`ServerState`](super::ServerState) (which `server::Server` drives): `initialize` and
/// `ping` at any time; nothing else before `initialize` (`-32600`); a notification method
/// sent with an id is `-32601` (the rule the host keeps too, `notification_as_request`); a
/// surface MCPL 0.5 removed (`protocol::REMOVED_METHODS`) is `-32601`; any other method this crate does not type is the application's; every typed
/// one passes [`admit_at_server`] (`-32601`, or `-32002` naming the capability).
pub(crate) fn route_host_request(
    method: &str,
    params: Option<&Value>,
    initialized: bool,
    mcpl: bool,
    policy: &ServerPolicyState,
) -> Result<RequestRoute, ErrorObject> {
    match method {
        "initialize" => return Ok(RequestRoute::Initialize),
        "ping" => return Ok(RequestRoute::Ping),
        _ if !initialized => return Err(super::rules::before_initialize(method)),
        _ => {}
    }
    let Some(info) = crate::protocol::method_info(method) else {
        if crate::protocol::removed_in(method).is_some() {
            // A surface MCPL 0.5 removed is an unknown method, whoever would take it.
            return Err(ErrorObject::method_not_found(method));
        }
        return Ok(RequestRoute::Untyped);
    };
    if let Some(e) = super::admission::notification_as_request(info.name) {
        return Err(e);
    }
    admit_under(policy, mcpl, method, params).map_err(|r| match r {
        Refusal::Denied(_) | Refusal::NotReady(_) if method == BeforeInference::NAME => Denied {
            capability: hook_leaf_needed(params, policy.advertised()),
        }
        .to_error(),
        r => r.to_error(method),
    })?;
    Ok(if method == "featureSets/update" {
        RequestRoute::Policy
    } else {
        RequestRoute::Admitted
    })
}

/// The hook leaf a refused `context/beforeInference` with `params` needed, for its `-32002`
/// `data.capability` (§5.4: one path). The method is admitted under `observe` or any inject
/// leaf (§10.1), and the admission rule names the first of those alternatives, `observe`;
/// but a call carrying no user text (`userMessage` `null` or absent, §10.1: as it is sent
/// whenever observe is not granted) does not need `observe`, and naming it would tell the
/// host to hand a write-only server the user's text. Reading where §5.4 is silent on which
/// alternative to name: with user text, `observe` (only it lets the text be sent); without,
/// the first inject leaf this server advertises (§5.1: what its hook's set `uses`, App. B.4
/// order), then `observe` if it advertises only that, else `inject.system`.
fn hook_leaf_needed(params: Option<&Value>, advertised: CapabilitySet) -> Capability {
    let text = params
        .and_then(Value::as_object)
        .and_then(|p| crate::protocol::given(p, "userMessage"))
        .is_some();
    if text {
        return Capability::Observe;
    }
    [
        Capability::InjectSystem,
        Capability::InjectBeforeUser,
        Capability::InjectAfterUser,
        Capability::Observe,
    ]
    .into_iter()
    .find(|c| advertised.contains(*c))
    .unwrap_or(Capability::InjectSystem)
}

/// The grant in force under `policy`: nothing until the first policy Request (§5.3).
pub(super) fn grant_in_force(policy: &ServerPolicyState) -> Grant {
    if policy.is_ready() {
        *policy.grant()
    } else {
        Grant::none()
    }
}

/// [`admit_at_server`] under `policy`'s readiness and grant in force.
fn admit_under(
    policy: &ServerPolicyState,
    mcpl: bool,
    method: &str,
    params: Option<&Value>,
) -> Result<crate::capability::Requirement, Refusal> {
    let grant = grant_in_force(policy);
    admit_at_server(method, params, mcpl, policy.is_ready(), &grant)
}

/// §10.1 at the server, applied by [`ServerState`](super::ServerState) (which `server::Server` drives):
/// `context/beforeInference` params carrying a `userMessage` that the grant in force
/// `grant` withholds ([`crate::policy::unredacted_user_message`]) are a host defect, reported as
/// [`ServerDiagnostic::UserMessageUnredacted`]. Reading where the spec is silent (fail
/// closed): the grant does not let the server read the message, so the caller withholds it
/// from the hook, which runs as if the host had redacted it.
pub(crate) fn unredacted_hook(grant: &Grant, params: Option<&Value>) -> Option<ServerDiagnostic> {
    crate::policy::unredacted_user_message(grant, params)
        .then_some(ServerDiagnostic::UserMessageUnredacted)
}
