//! The texts, codes and kinds of [`ServerDiagnostic`].

use super::*;
use crate::capability::{Capability, Denied};
use crate::policy::InjectionDenied;

/// Issue #24 item 4: the texts of what the sans-I/O `ServerState` reports too are true
/// for it: they name no API of `server::Server` (`SendError`, `GrantState`, `Session`,
/// `ServerBuilder`), with their codes and kinds unchanged.
#[test]
fn shared_diagnostics_name_no_server_api() {
    let denied = Denied {
        capability: Capability::InjectBeforeUser,
    };
    let shared = [
        (
            ServerDiagnostic::HostMcplVersion {
                version: "\"0.4\"".into(),
            },
            "host_mcpl_version",
            DiagnosticKind::Notice,
        ),
        (
            ServerDiagnostic::InjectionDropped {
                hook_set: None,
                dropped: DroppedInjections::One {
                    feature_set: "mem".into(),
                    position: "beforeUser".into(),
                    denied: InjectionDenied::Denied(denied),
                },
            },
            "injection_dropped",
            DiagnosticKind::AuthorMistake,
        ),
        (
            ServerDiagnostic::NotificationDenied {
                method: "inference/lifecycle".into(),
                refusal: Refusal::Denied(denied),
            },
            "notification_denied",
            DiagnosticKind::PeerDefect,
        ),
    ];
    for (d, code, kind) in shared {
        let text = d.to_string();
        for api in ["SendError", "GrantState", "Session", "ServerBuilder"] {
            assert!(!text.contains(api), "{text}");
        }
        assert_eq!((d.code(), d.kind()), (code, kind), "{text}");
    }
}

/// `injection_dropped` for a whole answer names the set the answer claimed when it is not
/// the hook's own (the refusal reason does not name it), and calls no set "(none)".
#[test]
fn a_dropped_answer_names_the_set_it_claimed() {
    let all = |hook_set: Option<&str>, claimed: Option<&str>| {
        ServerDiagnostic::InjectionDropped {
            hook_set: hook_set.map(str::to_owned),
            dropped: DroppedInjections::All {
                feature_set: claimed.map(str::to_owned),
                count: 2,
                reason: "Unknown feature set".into(),
            },
        }
        .detail()
    };
    assert_eq!(
        all(Some("mem"), Some("mem")),
        "the before-inference hook of feature set \"mem\" answered 2 injection(s) that \
         were dropped: Unknown feature set"
    );
    assert!(all(Some("mem"), Some("ghost")).contains("under feature set \"ghost\""));
    let unknown_hook = all(None, Some("ghost"));
    assert!(unknown_hook.contains("\"ghost\""), "{unknown_hook}");
    assert!(!unknown_hook.contains("(none)"), "{unknown_hook}");
}

/// The codes are a published contract (they were `SessionDiagnostic::code` before the
/// enum): each variant keeps its code and its kind.
#[test]
fn each_variant_keeps_its_published_code_and_kind() {
    use DiagnosticKind::{AuthorMistake as A, Notice as N, PeerDefect as P};
    use ServerDiagnostic as D;
    let m = || "m/x".to_owned();
    let cases = [
        (
            D::SendRefused {
                method: m(),
                reason: "capability_denied",
                detail: "no".into(),
            },
            "send_refused",
            A,
        ),
        (
            D::SendRefusedPolicyChanged {
                method: m(),
                reason: "feature_set_unavailable",
                detail: "no".into(),
            },
            "send_refused_policy_changed",
            N,
        ),
        (
            D::SendRefusedChannelsChanged {
                method: m(),
                channel_id: "lobby".into(),
                detail: "no".into(),
            },
            "send_refused_channels_changed",
            N,
        ),
        (
            D::InjectionDropped {
                hook_set: None,
                dropped: DroppedInjections::All {
                    feature_set: None,
                    count: 1,
                    reason: "r".into(),
                },
            },
            "injection_dropped",
            A,
        ),
        (D::HandlerPanicked { method: m() }, "handler_panicked", A),
        (
            D::ResultUnencodable {
                method: m(),
                error: "e".into(),
            },
            "result_unencodable",
            A,
        ),
        (
            D::HandlerFailed {
                method: m(),
                error: ErrorObject::internal("e"),
            },
            "handler_failed",
            A,
        ),
        (
            D::UnhandledNotification { method: m() },
            "unhandled_notification",
            A,
        ),
        (
            D::FallbackExperimentalReplaced,
            "fallback_experimental_replaced",
            A,
        ),
        (D::FallbackMcplReplaced, "fallback_mcpl_replaced", A),
        (
            D::PolicyMalformed {
                form: Form::Request,
                error: "e".into(),
            },
            "policy_malformed",
            P,
        ),
        (
            D::Policy(PolicyDiagnostic {
                code: "unknown_feature_set",
                detail: "x".into(),
            }),
            "unknown_feature_set",
            P,
        ),
        (
            D::NotificationDenied {
                method: m(),
                refusal: Refusal::Denied(Denied {
                    capability: Capability::PushEvents,
                }),
            },
            "notification_denied",
            P,
        ),
        (
            D::InvalidNotification {
                method: m(),
                error: "e".into(),
            },
            "invalid_notification",
            P,
        ),
        (
            D::UnknownNotification {
                method: m(),
                mcp_only: false,
            },
            "unknown_notification",
            P,
        ),
        (
            D::IgnoredNotification { method: m() },
            "ignored_notification",
            P,
        ),
        (
            D::GrantNamesNoPath {
                entries: vec![("Tools".into(), "did you mean `tools`?".into())],
                count: 2,
            },
            "grant_names_no_path",
            P,
        ),
        (
            D::RequestBeforeInitialized { method: m() },
            "request_before_initialized",
            P,
        ),
        (
            D::UnexpectedNotification { method: m() },
            "unexpected_notification",
            P,
        ),
        (
            D::UnknownChannel {
                method: m(),
                channel_id: "c".into(),
            },
            "unknown_channel",
            P,
        ),
        (
            D::HostMcplVersionAlias { version: "0.5.0" },
            "host_mcpl_version_alias",
            N,
        ),
        (
            D::OpenAnswerRefused {
                channel_id: "c".into(),
                reason: "type_mismatch",
            },
            "open_answer_refused",
            A,
        ),
        (
            D::OpenedChannelDropped {
                channel_id: "c".into(),
                cancelled: false,
            },
            "opened_channel_dropped",
            N,
        ),
        (
            D::UnknownInferenceChunk {
                request_id: RequestId::from(1i64),
            },
            "unknown_inference_chunk",
            P,
        ),
        (
            D::InferenceChunkDropped {
                request_id: RequestId::from(1i64),
                reason: "full",
            },
            "inference_chunks_dropped",
            DiagnosticKind::Notice,
        ),
        (
            D::NotificationDropped {
                method: m(),
                limit: 1,
            },
            "notification_dropped",
            DiagnosticKind::Notice,
        ),
        (
            D::NotificationDroppedBytes {
                method: m(),
                bytes: 2,
                limit: 1,
            },
            "notification_dropped",
            DiagnosticKind::Notice,
        ),
        (
            D::InferenceResultMalformed {
                defects: vec!["d".into()],
            },
            "inference_result_malformed",
            P,
        ),
        (D::UnexpectedResponse { id: None }, "unexpected_response", P),
        (
            D::FractionalId {
                id: serde_json::from_str("2.5").expect("an id"),
                method: m(),
            },
            "fractional_id",
            P,
        ),
        (
            D::Unreadable {
                id: None,
                detail: "d".into(),
                answered: true,
            },
            "unreadable",
            P,
        ),
        (
            D::Lifecycle(LifecycleDiagnostic::SecondTerminal {
                inference_id: "i".into(),
                phase: crate::protocol::lifecycle::Phase::Completed,
            }),
            "lifecycle_second_terminal",
            P,
        ),
        (
            D::Lifecycle(LifecycleDiagnostic::TerminalAfterTimeout {
                inference_id: "i".into(),
                phase: crate::protocol::lifecycle::Phase::Completed,
            }),
            "lifecycle_terminal_after_timeout",
            N,
        ),
        (
            D::Lifecycle(LifecycleDiagnostic::OpenTurnsLimit {
                ended: "i".into(),
                limit: 1,
            }),
            "lifecycle_open_turns_limit",
            N,
        ),
        (
            D::Lifecycle(LifecycleDiagnostic::IdTooLong {
                member: "inferenceId",
                length: 2,
                limit: 1,
            }),
            "lifecycle_id_too_long",
            N,
        ),
        (
            D::HostMcplVersion {
                version: "0.4".into(),
            },
            "host_mcpl_version",
            N,
        ),
        (
            D::HostMcplMalformed {
                found: "boolean",
                mcpl: false,
            },
            "host_mcpl_malformed",
            P,
        ),
        (
            D::HostMcplMalformed {
                found: "object without a version",
                mcpl: true,
            },
            "host_mcpl_malformed",
            P,
        ),
        (D::UserMessageUnredacted, "user_message_unredacted", P),
        #[cfg(feature = "runtime")]
        (
            D::Connection(crate::peer::Diagnostic::JunkLine {
                excerpt: "x".into(),
            }),
            "connection",
            P,
        ),
        #[cfg(feature = "runtime")]
        (
            D::Connection(crate::peer::Diagnostic::Busy {
                id: RequestId::from(1i64),
                method: m(),
                limit: 1,
            }),
            "connection",
            N,
        ),
    ];
    for (d, code, kind) in cases {
        assert_eq!((d.code(), d.kind()), (code, kind), "{d:?}");
        assert_eq!(d.is_author_mistake(), kind == A);
        assert_eq!(d.to_string(), format!("{code}: {}", d.detail()));
        assert!(!d.detail().is_empty(), "{d:?}");
    }
}

/// The policy Request's own host defects say what the host wrote and what came of it, not
/// only the entry: an `enabled`/`disabled` entry matching no declared set selects or
/// disables nothing (§6.3), and a grant field in a Notification is discarded (§6.7). Before,
/// the text was the bare entry (`nope`, `effectiveCapabilities`).
#[test]
fn policy_defects_say_what_the_host_wrote_and_what_came_of_it() {
    let d = |code: &'static str, detail: &str| {
        ServerDiagnostic::Policy(crate::policy::PolicyDiagnostic {
            code,
            detail: detail.into(),
        })
    };
    let unknown = d("unknown_feature_set", "\"nope\"").to_string();
    for needle in ["\"nope\"", "declares", "§6.3"] {
        assert!(unknown.contains(needle), "{needle:?} not in {unknown}");
    }
    let discarded = d("notification_field_discarded", "enabled").to_string();
    for needle in ["enabled", "Notification", "Request", "§6.7"] {
        assert!(discarded.contains(needle), "{needle:?} not in {discarded}");
    }
}
