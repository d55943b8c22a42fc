//! The rule and § behind every refusal and diagnostic the host session produces, so the log
//! can mark the frame it is about. The library decides (`mcpl::host`); this module only
//! names what it decided.

use mcpl::host::HostDiagnostic;
use mcpl::peer::Diagnostic;
use serde::Serialize;

/// One rule the host applied to a frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// A stable code (`capability_denied`, `privileged_before_ready`, …).
    pub rule: String,
    /// Where the rule is written (`§5.4`, `App. A`, `JSON-RPC 2.0`).
    pub section: &'static str,
    /// What happened, in one line.
    pub detail: String,
    /// On a batch frame (JSON-RPC 2.0 §6), the index (from 0) of the entry it is about;
    /// absent on a single frame, and on a batch when it is about the batch as a whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<usize>,
}

/// Which frame a diagnostic is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum About {
    /// The newest received frame with this method.
    Method(String),
    /// The newest received frame with this method whose text holds `value` as a JSON
    /// string (a repeated `eventId`, a rejected channel's id); failing that, as
    /// [`About::Method`].
    MethodNaming {
        /// The method.
        method: String,
        /// What the frame names.
        value: String,
    },
    /// The newest received frame with this JSON-RPC id (compact JSON), of any kind.
    Id(String),
    /// A request the server sent under this id (compact JSON): never a response, whose id
    /// is of the host's own id space.
    Request(String),
    /// A response under this id (compact JSON), the host's own id space: never a request
    /// of the server's. `stray` when the library says it answered nothing: a frame the
    /// log saw answer nothing on the wire is taken first ([`super::log::Log::mark_response`]).
    Response {
        /// The id.
        id: String,
        /// Whether the diagnostic says the response answered no request.
        stray: bool,
    },
    /// The newest received frame that is not a JSON-RPC message.
    Junk,
    /// The newest received batch (JSON-RPC 2.0 §6), as a whole: an empty or oversized one.
    Batch,
    /// No single frame (a connection-wide or host-side event).
    Nothing,
}

/// The mark for an error answer the host sent, by its Appendix A / JSON-RPC code.
pub fn error_mark(code: i64, message: &str) -> Mark {
    let (rule, section) = match code {
        -32001 => ("feature_set_not_enabled", "§6.6"),
        -32002 => ("capability_denied", "§5.4"),
        -32003 => ("unknown_feature_set", "§6.6"),
        -32005 => ("checkpoint_not_found", "§8.5"),
        -32000 => ("busy", "JSON-RPC 2.0"),
        -32017 => ("channel_not_permitted", "§14.6"),
        -32023 => ("unknown_channel", "§14.6"),
        -32024 => ("channel_open_failed", "§14.6"),
        -32600 => ("invalid_request", "JSON-RPC 2.0"),
        -32601 => ("method_not_found", "JSON-RPC 2.0"),
        -32602 => ("invalid_params", "JSON-RPC 2.0"),
        -32603 => ("internal_error", "JSON-RPC 2.0"),
        -32700 => ("parse_error", "JSON-RPC 2.0"),
        _ => ("error_answered", "App. A"),
    };
    Mark {
        rule: rule.into(),
        section,
        detail: format!("answered {code}: {message}"),
        entry: None,
    }
}

/// The section where `method`'s parameters are defined, for a malformed-params diagnostic.
fn method_section(method: &str) -> &'static str {
    match method {
        "push/event" => "§9.2",
        "inference/request" => "§11.2",
        "model/info" => "§12.1",
        "mcpl/manifestChanged" => "§17.3",
        m if m.starts_with("channels/") => "§14.3",
        m if m.starts_with("featureSets/") => "§6.7",
        _ => "§4",
    }
}

/// The mark of a host diagnostic and the frame it is about.
pub fn diagnostic(d: &HostDiagnostic) -> (Mark, About) {
    let m = |rule: &str, section: &'static str, detail: String| Mark {
        rule: rule.into(),
        section,
        detail,
        entry: None,
    };
    let method = |s: &str| About::Method(s.to_owned());
    match d {
        HostDiagnostic::PrivilegedBeforeReady { method: me } => (
            m(
                "privileged_before_ready",
                "§5.3",
                format!("{me} before the initial policy receipt"),
            ),
            method(me),
        ),
        HostDiagnostic::CapabilityDenied {
            method: me,
            capability,
        } => (
            m(
                "capability_denied",
                "§5.4",
                format!("{me} needs {capability}, not granted"),
            ),
            method(me),
        ),
        HostDiagnostic::UnexpectedMethod { method: me } => (
            m(
                "unexpected_method",
                "§4",
                if only_a_request_from_a_server(me) {
                    format!(
                        "{me} came as a Notification; §4.1 gives it only as a Request (not applied)"
                    )
                } else {
                    format!("{me} is not a method a host receives")
                },
            ),
            method(me),
        ),
        HostDiagnostic::BadParams { method: me, detail } => (
            m("invalid_params", method_section(me), format!("{me}: {detail}")),
            method(me),
        ),
        HostDiagnostic::DuplicateEvent { event_id } => (
            m(
                "duplicate_event",
                "§9.4",
                format!("eventId {event_id:?} repeated; not redelivered"),
            ),
            About::MethodNaming {
                method: "push/event".into(),
                value: event_id.clone(),
            },
        ),
        HostDiagnostic::DeclarationMismatch {
            method: me,
            feature_set,
            missing,
        } => (
            m(
                "declaration_mismatch",
                "§6.4",
                format!(
                    "{me} under {feature_set}, whose uses lacks {}",
                    missing.join(", ")
                ),
            ),
            // The frame naming the set: of two mismatches in one batch, each its own entry.
            About::MethodNaming {
                method: me.clone(),
                value: feature_set.clone(),
            },
        ),
        HostDiagnostic::TagIssue { method: me, issue } => (
            m("tag_issue", "§16.1", format!("{me}: {issue}")),
            method(me),
        ),
        HostDiagnostic::ReceiptDefect { code, path } => (
            m(code, "§6.7", format!("receipt defect at {path}")),
            About::Nothing,
        ),
        HostDiagnostic::ChannelRejected {
            method: me,
            id,
            reason,
            filtered_notification,
        } => (
            m(
                reason,
                "§14.5",
                format!(
                    "{me}: {id:?} rejected{}",
                    if *filtered_notification {
                        " (a Notification: filtered)"
                    } else {
                        ""
                    }
                ),
            ),
            About::MethodNaming {
                method: me.clone(),
                value: id.clone(),
            },
        ),
        // Under the finding's own section, the one `mcpl validate` gives it.
        HostDiagnostic::ManifestFinding {
            code,
            section,
            path,
            message,
        } => (
            m(code, section, format!("{path}: {message}")),
            About::Nothing,
        ),
        HostDiagnostic::ManifestDefect { code, message } => {
            (m(code, "§17.2", message.clone()), About::Nothing)
        }
        HostDiagnostic::ManifestUnparseable {
            code,
            consecutive_failures,
        } => (
            m(
                code,
                "§17.5",
                format!("fetched manifest unusable ({consecutive_failures} in a row); the previous one stands"),
            ),
            About::Nothing,
        ),
        HostDiagnostic::ManifestFetchDropped { dropped_total } => (
            m(
                "manifest_fetch_rate_limited",
                "§17.8",
                format!("mcpl/manifestChanged over the rate limit ({dropped_total} dropped)"),
            ),
            method("mcpl/manifestChanged"),
        ),
        HostDiagnostic::ManifestFetchFailed { detail } => (
            m("manifest_fetch_failed", "§17.4", detail.clone()),
            About::Nothing,
        ),
        HostDiagnostic::HookFailed { server, detail } => (
            m("hook_failed", "§10.6", format!("{server}: {detail}")),
            About::Nothing,
        ),
        HostDiagnostic::InjectionRejected { server, reason } => (
            m("injection_rejected", "§10.4", format!("{server}: {reason}")),
            About::Nothing,
        ),
        HostDiagnostic::LifecycleNotSent {
            inference_id,
            detail,
        } => (
            m(
                "lifecycle_not_sent",
                "§10.5",
                format!("{inference_id}: {detail}"),
            ),
            About::Nothing,
        ),
        HostDiagnostic::OutgoingNotCompleted {
            inference_id,
            channel_id,
            detail,
        } => (
            m(
                "outgoing_not_completed",
                "§14.3",
                format!("{inference_id} on {channel_id}: {detail}"),
            ),
            About::Nothing,
        ),
        HostDiagnostic::UnexpectedResponse { id } => (
            m(
                "unexpected_response",
                "§4",
                format!("a response with id {id} answers no request of the host's"),
            ),
            About::Response {
                id: id.clone(),
                stray: true,
            },
        ),
        HostDiagnostic::EventDropped { event } => (
            m(
                "event_dropped",
                if *event == "ModeChanged" { "§6.7" } else { "§17.6" },
                format!("the event queue was full: a {event} event was not delivered"),
            ),
            About::Nothing,
        ),
        HostDiagnostic::HandlerPanicked { method: me } => (
            m(
                "handler_panicked",
                "JSON-RPC 2.0",
                format!("the host's handler for {me} panicked; answered -32603"),
            ),
            method(me),
        ),
        HostDiagnostic::AnswerReplaced { id, reason } => (
            m(
                "answer_replaced",
                "JSON-RPC 2.0",
                format!("the host's answer to request {id} could not be sent ({reason}); answered -32603"),
            ),
            About::Request(id.clone()),
        ),
        HostDiagnostic::AnswerTimedOut { method, id, after } => (
            m(
                "answer_timed_out",
                "JSON-RPC 2.0",
                format!("the host's application did not answer {method} {id} within {after:?}; answered -32603"),
            ),
            About::Request(id.clone()),
        ),
        HostDiagnostic::LateAnswer { method, id } => (
            m(
                "late_answer",
                "JSON-RPC 2.0",
                format!("the host's application answered {method} {id} after its deadline had answered it; the late answer was dropped"),
            ),
            About::Request(id.clone()),
        ),
        HostDiagnostic::NoHandler { method, id } => (
            m(
                "no_handler",
                "§5.4",
                format!("{method} {id} is granted but the host has no request_handler; answered -32601"),
            ),
            About::Request(id.clone()),
        ),
        HostDiagnostic::NotServed {
            entries,
            capabilities,
        } => (
            m(
                "not_served",
                "§5.4",
                format!(
                    "policy entries {entries:?} grant only {capabilities:?}, which no handler of the host serves: neither advertised nor granted"
                ),
            ),
            About::Nothing,
        ),
        HostDiagnostic::DiagnosticsDropped { count } => (
            m(
                "diagnostics_dropped",
                "host",
                format!("the diagnostics queue was full: {count} not delivered"),
            ),
            About::Nothing,
        ),
        HostDiagnostic::FractionalId { id, method: me } => (
            m(
                "fractional_id",
                "JSON-RPC 2.0",
                format!("took request {id} ({me}) and answer it under that id: JSON-RPC 2.0 §4 says a numeric id SHOULD NOT have a fractional part"),
            ),
            About::Request(id.clone()),
        ),
        HostDiagnostic::Connection(c) => connection(c),
        // A diagnostic of a kind added later (`HostDiagnostic` is non-exhaustive).
        other => (m("host_diagnostic", "host", format!("{other:?}")), About::Nothing),
    }
}

/// The mark of a connection-level (JSON-RPC framing) diagnostic.
fn connection(d: &Diagnostic) -> (Mark, About) {
    let rule = match d {
        Diagnostic::JunkLine { .. } => "junk_line",
        Diagnostic::ParseError { .. } => "parse_error",
        Diagnostic::Oversized { .. } => "oversized",
        Diagnostic::NotText { .. } => "not_text",
        Diagnostic::InvalidMessage { .. } => "invalid_message",
        Diagnostic::EmptyBatch => "empty_batch",
        Diagnostic::BatchTooLarge { .. } => "batch_too_large",
        Diagnostic::TooCostly { .. } => "too_costly",
        Diagnostic::Busy { .. } => "busy",
        Diagnostic::BusyBytes { .. } => "busy_bytes",
        Diagnostic::OverBudget { .. } => "over_budget",
        Diagnostic::LateResponse { .. } => "late_response",
        Diagnostic::IntegralId { .. } => "integral_id",
        Diagnostic::FractionalId { .. } => "fractional_id",
        Diagnostic::UnknownResponse { .. } => "unknown_response",
        Diagnostic::UnhandledNotification { .. } => "unhandled_notification",
        Diagnostic::Dropped { .. } => "diagnostics_dropped",
        // A diagnostic of a kind added later (`peer::Diagnostic` is non-exhaustive).
        _ => "connection_diagnostic",
    };
    let text = |id: &mcpl::jsonrpc::RequestId| id.to_value().to_string();
    let about = match d {
        Diagnostic::JunkLine { .. } | Diagnostic::ParseError { .. } => About::Junk,
        Diagnostic::EmptyBatch | Diagnostic::BatchTooLarge { .. } => About::Batch,
        Diagnostic::InvalidMessage { id: Some(id), .. }
        | Diagnostic::TooCostly { id: Some(id), .. } => About::Id(text(id)),
        Diagnostic::Busy { id, .. }
        | Diagnostic::BusyBytes { id, .. }
        | Diagnostic::FractionalId { id, .. } => About::Request(text(id)),
        Diagnostic::LateResponse { id } | Diagnostic::IntegralId { id, .. } => About::Response {
            id: text(id),
            stray: false,
        },
        Diagnostic::UnknownResponse { id: Some(id), .. } => About::Response {
            id: text(id),
            stray: true,
        },
        Diagnostic::UnhandledNotification { method } => About::Method(method.clone()),
        _ => About::Nothing,
    };
    (
        Mark {
            rule: rule.into(),
            section: "JSON-RPC 2.0",
            detail: d.to_string(),
            entry: None,
        },
        about,
    )
}

/// Whether `method` is one a server sends, only as a Request (§4.1): sent as a Notification,
/// the host reports it `UnexpectedMethod` for its form (`protocol::Kind::takes`).
fn only_a_request_from_a_server(method: &str) -> bool {
    use mcpl::protocol::{method_info, Direction, Kind};
    method_info(method).is_some_and(|m| {
        m.kind == Kind::Request
            && matches!(m.direction, Direction::ServerToHost | Direction::Either)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpl::capability::Capability;

    #[test]
    fn refusals_name_their_rule_and_section() {
        let (mark, about) = diagnostic(&HostDiagnostic::CapabilityDenied {
            method: "push/event".into(),
            capability: Capability::PushEvents,
        });
        assert_eq!(
            (mark.rule.as_str(), mark.section),
            ("capability_denied", "§5.4")
        );
        assert_eq!(about, About::Method("push/event".into()));
        let (mark, _) = diagnostic(&HostDiagnostic::PrivilegedBeforeReady {
            method: "push/event".into(),
        });
        assert_eq!(mark.section, "§5.3");
        assert_eq!(
            error_mark(-32023, "Unknown channel").rule,
            "unknown_channel"
        );
    }

    /// A manifest finding is marked under the section the library's review gave it (the
    /// one `mcpl validate` prints), not §17.5 for all; a declaration mismatch is about the
    /// frame naming its feature set (of two in one batch, each its own entry).
    #[test]
    fn findings_keep_their_section_and_mismatches_name_their_set() {
        let (mark, about) = diagnostic(&HostDiagnostic::ManifestFinding {
            code: "tools_inside_mcpl",
            section: "§5.1",
            path: "tools".into(),
            message: "advertises nothing".into(),
        });
        assert_eq!((mark.section, about), ("§5.1", About::Nothing));
        let (mark, about) = diagnostic(&HostDiagnostic::DeclarationMismatch {
            method: "push/event".into(),
            feature_set: "h.other".into(),
            missing: vec!["pushEvents"],
        });
        assert_eq!(mark.section, "§6.4");
        assert_eq!(
            about,
            About::MethodNaming {
                method: "push/event".into(),
                value: "h.other".into()
            }
        );
    }

    /// Diagnostics added to the non-exhaustive enum get their own mark, not the catch-all's
    /// debug text.
    #[test]
    fn newer_host_diagnostics_have_their_own_marks() {
        let (mark, _) = diagnostic(&HostDiagnostic::NotServed {
            entries: vec!["modelInfo".into()],
            capabilities: vec!["modelInfo"],
        });
        assert_eq!((mark.rule.as_str(), mark.section), ("not_served", "§5.4"));
        let (mark, _) = diagnostic(&HostDiagnostic::NoHandler {
            method: "model/info".into(),
            id: "1".into(),
        });
        assert_eq!(mark.rule, "no_handler");
        // JSON-RPC 2.0 §4: a request id with a fraction, told by the sans-I/O host and by
        // the async host's peer alike, is marked on the request it names.
        let (mark, about) = diagnostic(&HostDiagnostic::FractionalId {
            id: "5.0".into(),
            method: "ping".into(),
        });
        assert_eq!(
            (mark.rule.as_str(), mark.section),
            ("fractional_id", "JSON-RPC 2.0")
        );
        assert!(
            mark.detail.contains("ping") && mark.detail.contains("5.0"),
            "{}",
            mark.detail
        );
        assert_eq!(about, About::Request("5.0".into()));
        let id = mcpl::jsonrpc::RequestId::from_request_value(&serde_json::json!(5.0)).unwrap();
        let (mark, about) = diagnostic(&HostDiagnostic::Connection(Diagnostic::FractionalId {
            id,
            method: "ping".into(),
        }));
        assert_eq!(mark.rule, "fractional_id");
        assert_eq!(about, About::Request("5.0".into()));
    }
}
