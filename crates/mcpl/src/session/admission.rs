//! The one admission rule for an inbound method: direction (§4.1, §14.3), then the
//! method's required capability under readiness (§5.3) and the grant in force (§5.4).
//! The host session, the server session, [`HostState`](super::HostState),
//! [`ServerState`](super::ServerState) and the checkers' strict hosts all decide through
//! [`admit`]; each maps a [`Refusal`] to its own diagnostic.

use serde_json::Value;

use crate::capability::{Denied, Grant, Requirement};
use crate::jsonrpc::ErrorObject;
use crate::protocol::channels::ChannelsChanged;
use crate::protocol::Method as _;
use crate::protocol::{self, Direction};

/// The side receiving a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// The host receives what a server sends.
    Host,
    /// The server receives what a host sends.
    Server,
}

impl Receiver {
    /// Whether this side receives `method` (§4.1): the typed registry's direction, and on
    /// the host side nothing untyped (the host receives no MCP request it does not know).
    /// Reading where the spec is silent: an untyped method is the server's MCP surface,
    /// which only a server receives (fail closed on the host).
    pub fn receives(self, method: &str) -> bool {
        match (protocol::method_info(method).map(|i| i.direction), self) {
            (Some(Direction::Either), _) => true,
            (Some(Direction::ServerToHost), Receiver::Host) => true,
            (Some(Direction::HostToServer), Receiver::Server) => true,
            (Some(_), _) => false,
            (None, Receiver::Host) => false,
            (None, Receiver::Server) => true,
        }
    }
}

/// Why [`admit`] refused a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// This side does not receive the method (unknown, or sent the wrong way): `-32601`.
    NotReceived,
    /// A privileged method before the initial receipt (§5.3): `-32002` naming the first
    /// capability it needs.
    NotReady(Denied),
    /// A privileged method the grant in force does not allow (§5.4): `-32002`.
    Denied(Denied),
}

impl Refusal {
    /// The wire error answering `method`.
    pub fn to_error(&self, method: &str) -> ErrorObject {
        match self {
            Refusal::NotReceived => ErrorObject::method_not_found(method),
            Refusal::NotReady(d) | Refusal::Denied(d) => d.to_error(),
        }
    }
}

/// The one rule, at host and server alike, for a Request (a message with an `id`) naming a
/// method §4.1's table gives the Notification form only (`protocol::form_refused`): the
/// error answering it, `-32601` with `data: {method}`; `None` for any other method (an
/// untyped one has no form to hold it to). Reading (JSON-RPC 2.0 §4, §4.1, §5.1): such a
/// Request object is well formed, so `-32600` does not fit; the method has no request form,
/// so as a request it "is not available", as a method of the other direction is. Whichever
/// direction the notification has (`mcpl/manifestChanged` is the server's,
/// `inference/lifecycle` the host's). Judged before direction and grant.
pub(crate) fn notification_as_request(method: &str) -> Option<ErrorObject> {
    protocol::form_refused(method, false)?;
    Some(
        ErrorObject::new(
            crate::jsonrpc::codes::METHOD_NOT_FOUND,
            format!("{method} is a notification: it has no request form (send it without an id)"),
        )
        .with_data(serde_json::json!({ "method": method })),
    )
}

/// Admits `method` with `params` at `receiver`, under readiness `ready` and grant `grant`:
/// `Ok` carries the method's requirement (`Requirement::None` for the unprivileged and the
/// untyped MCP methods), for a later feature-set gate.
pub fn admit(
    receiver: Receiver,
    method: &str,
    params: Option<&Value>,
    ready: bool,
    grant: &Grant,
) -> Result<Requirement, Refusal> {
    if !receiver.receives(method) {
        return Err(Refusal::NotReceived);
    }
    let req = protocol::method_requirement(method, params).unwrap_or(Requirement::None);
    admit_requirement(req, ready, grant)
}

/// The part of [`admit`] after direction: requirement `req` (the method's, from its params)
/// under readiness `ready` (§5.3) and the grant in force (§5.4).
fn admit_requirement(req: Requirement, ready: bool, grant: &Grant) -> Result<Requirement, Refusal> {
    if req == Requirement::None {
        return Ok(req);
    }
    if !ready {
        return match Grant::none().check(req) {
            Err(d) => Err(Refusal::NotReady(d)),
            Ok(()) => Ok(req),
        };
    }
    grant.check(req).map(|()| req).map_err(Refusal::Denied)
}

/// [`admit`] at a host, with its one exception (§14.5, §6.7): once ready, `channels/changed`
/// is admitted without `channels.register`, so its removals (which only narrow) apply while
/// its additions and updates are rejected item-wise under the grant that lacks it. Reading
/// where the spec is silent: removal wins over the whole-method refusal, never an addition.
pub fn admit_at_host(
    method: &str,
    params: Option<&Value>,
    ready: bool,
    grant: &Grant,
) -> Result<Requirement, Refusal> {
    if method == ChannelsChanged::NAME
        && ready
        && !grant.allows(crate::capability::Capability::ChannelsRegister)
    {
        return Ok(Requirement::None);
    }
    admit(Receiver::Host, method, params, ready, grant)
}

/// [`admit`] at a server once `initialize` is answered, with MCP-only (§3.2) folded in: on a
/// connection whose host does not speak MCPL (`mcpl` false) the MCPL methods do not exist
/// (`-32601`) and the MCP methods the server receives run ungated (there is no grant to
/// check them against); otherwise [`admit`] under readiness and the grant.
///
/// Reading, for a connection turned MCP-only by the server's own policy refusal
/// (`fallback: "mcp-only"`, §6.7): §6.7 names that outcome as §3.2's, "disable MCPL, retain
/// tools, resources and prompts", so `tools/call` runs ungated there too, whatever the
/// refused grant named; the host decides whether it still calls a tool (its own policy is
/// the host's to keep), and every MCPL method, the policy Request included, is `-32601`.
/// This is no widening: no MCPL capability is exercised without a grant, and the MCP
/// surface is what an MCP host would reach anyway (§3.2).
pub fn admit_at_server(
    method: &str,
    params: Option<&Value>,
    mcpl: bool,
    ready: bool,
    grant: &Grant,
) -> Result<Requirement, Refusal> {
    if !mcpl {
        if protocol::is_mcpl_method(method) || !Receiver::Server.receives(method) {
            return Err(Refusal::NotReceived);
        }
        return Ok(Requirement::None);
    }
    admit(Receiver::Server, method, params, ready, grant)
}

/// The check before sending `method` to `to` (§5.4: what the other side would refuse is
/// not sent): `to`'s own admission rule, [`admit`]. Reading where the spec is silent: a
/// method this crate does not type is refused as [`Refusal::NotReceived`] (it is not known
/// to be the other side's to receive).
pub fn admit_outbound(
    to: Receiver,
    method: &str,
    params: Option<&Value>,
    ready: bool,
    grant: &Grant,
) -> Result<Requirement, Refusal> {
    if protocol::method_info(method).is_none() {
        return Err(Refusal::NotReceived);
    }
    admit(to, method, params, ready, grant)
}

/// [`admit_outbound`] of a typed message whose requirement its type gave
/// (`Method::requirement`, which agrees with the requirement read from its params' wire
/// form): the same decision, without reading the params.
pub fn admit_outbound_typed(
    to: Receiver,
    method: &str,
    req: Requirement,
    ready: bool,
    grant: &Grant,
) -> Result<Requirement, Refusal> {
    if protocol::method_info(method).is_none() || !to.receives(method) {
        return Err(Refusal::NotReceived);
    }
    admit_requirement(req, ready, grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::Capability;
    use serde_json::json;

    fn granted(paths: &[&str]) -> Grant {
        Grant::from_patterns(paths.iter().copied()).expect("test patterns parse")
    }

    fn everything() -> Grant {
        Grant::from_set(crate::capability::CapabilitySet::ALL)
    }

    /// §3.2: on an MCP-only connection MCPL methods are not found and MCP ones run ungated;
    /// with MCPL, readiness and the grant decide (§5.3, §5.4), and direction always (§4.1).
    #[test]
    fn s3_2_admission_at_a_server_folds_in_mcp_only() {
        let none = Grant::none();
        let tools = json!({"name": "t"});
        assert_eq!(
            admit_at_server("tools/call", Some(&tools), false, false, &none),
            Ok(Requirement::None)
        );
        assert_eq!(
            admit_at_server("context/beforeInference", None, false, true, &everything()),
            Err(Refusal::NotReceived)
        );
        assert_eq!(
            admit_at_server("push/event", None, false, true, &everything()),
            Err(Refusal::NotReceived)
        );
        assert!(matches!(
            admit_at_server("tools/call", Some(&tools), true, false, &everything()),
            Err(Refusal::NotReady(_))
        ));
        assert!(matches!(
            admit_at_server(
                "tools/call",
                Some(&tools),
                true,
                true,
                &granted(&["pushEvents"])
            ),
            Err(Refusal::Denied(_))
        ));
        assert!(
            admit_at_server("tools/call", Some(&tools), true, true, &granted(&["tools"])).is_ok()
        );
        assert_eq!(
            admit_at_server("push/event", None, true, true, &everything()),
            Err(Refusal::NotReceived)
        );
    }

    #[test]
    fn s4_1_a_method_sent_the_wrong_way_is_not_received() {
        let all = everything();
        assert_eq!(
            admit(Receiver::Server, "push/event", None, true, &all),
            Err(Refusal::NotReceived)
        );
        assert_eq!(
            admit(Receiver::Host, "featureSets/update", None, true, &all),
            Err(Refusal::NotReceived)
        );
        assert_eq!(
            admit(Receiver::Host, "tools/call", None, true, &all),
            Err(Refusal::NotReceived)
        );
        assert_eq!(
            admit(Receiver::Host, "ping", None, false, &all),
            Ok(Requirement::None)
        );
        assert_eq!(
            admit(
                Receiver::Server,
                "resources/list",
                None,
                false,
                &Grant::none()
            ),
            Ok(Requirement::None)
        );
    }

    #[test]
    fn s14_5_a_ready_host_admits_channels_changed_for_its_removals() {
        let none = Grant::none();
        assert_eq!(
            admit_at_host("channels/changed", None, true, &none),
            Ok(Requirement::None)
        );
        assert!(matches!(
            admit_at_host("channels/changed", None, false, &none),
            Err(Refusal::NotReady(_))
        ));
        assert!(matches!(
            admit_at_host("channels/register", None, true, &none),
            Err(Refusal::Denied(_))
        ));
    }

    #[test]
    fn s5_4_what_the_other_side_would_refuse_is_not_sent() {
        let all = everything();
        let life = granted(&["inferenceLifecycle"]);
        assert!(admit_outbound(Receiver::Server, "inference/lifecycle", None, true, &life).is_ok());
        assert!(matches!(
            admit_outbound(
                Receiver::Server,
                "inference/lifecycle",
                None,
                true,
                &Grant::none()
            ),
            Err(Refusal::Denied(_))
        ));
        assert_eq!(
            admit_outbound(Receiver::Server, "push/event", None, true, &all),
            Err(Refusal::NotReceived)
        );
        assert_eq!(
            admit_outbound(Receiver::Server, "x-vendor/thing", None, true, &all),
            Err(Refusal::NotReceived)
        );
    }

    #[test]
    fn s5_3_privileged_before_ready_is_refused_whatever_the_grant() {
        let all = everything();
        let r = admit(Receiver::Host, "push/event", Some(&json!({})), false, &all);
        assert_eq!(
            r,
            Err(Refusal::NotReady(Denied {
                capability: Capability::PushEvents
            }))
        );
        assert_eq!(r.unwrap_err().to_error("push/event").code, -32002);
    }

    #[test]
    fn s5_4_privileged_outside_the_grant_is_denied_and_inside_admitted() {
        let push = granted(&["pushEvents"]);
        assert_eq!(
            admit(Receiver::Host, "push/event", None, true, &push),
            Ok(Requirement::One(Capability::PushEvents))
        );
        assert_eq!(
            admit(Receiver::Host, "channels/register", None, true, &push),
            Err(Refusal::Denied(Denied {
                capability: Capability::ChannelsRegister
            }))
        );
        // §11.4: `stream: true` needs the streaming leaf too.
        let inference = granted(&["inferenceRequest"]);
        let streamed = json!({"stream": true});
        assert!(matches!(
            admit(
                Receiver::Host,
                "inference/request",
                Some(&streamed),
                true,
                &inference
            ),
            Err(Refusal::Denied(_))
        ));
    }

    /// §4.1's table, JSON-RPC 2.0 §5.1: exactly the notification-only methods, in either
    /// direction, are refused as Requests by the one rule, `-32601` with `data: {method}`;
    /// the methods of either form, the requests and the untyped ones are not its to judge.
    #[test]
    fn s4_1_a_notification_only_method_as_a_request_is_32601_naming_it() {
        let only = protocol::METHODS
            .iter()
            .filter(|m| m.kind == protocol::Kind::Notification)
            .map(|m| m.name);
        for method in only {
            let e = notification_as_request(method).expect(method);
            assert_eq!(e.code, crate::jsonrpc::codes::METHOD_NOT_FOUND, "{method}");
            assert_eq!(e.data, Some(serde_json::json!({ "method": method })));
            assert!(e.message.contains("is a notification"), "{method}");
        }
        for method in [
            "channels/changed",
            "featureSets/update",
            "push/event",
            "ping",
            "notifications/tools/list_changed",
            "acme/own",
        ] {
            assert!(notification_as_request(method).is_none(), "{method}");
        }
    }
}
