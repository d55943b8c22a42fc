//! Every public error's `Display` says what happened and what to change (issue #21): the
//! messages a user reads when an example's `main` prints an error. Each assertion pins the
//! remedy, not the whole sentence, so the wording may improve without breaking the test.

use std::time::Duration;

use mcpl::capability::{Capability, PatternError};
use mcpl::host::{HostError, McpOnlyReason};
use mcpl::jsonrpc::RequestId;
use mcpl::peer::{CloseReason, PeerError};
use mcpl::policy::UsesError;
use mcpl::server::{SendError, ToolChangeError};

fn says(e: &impl std::fmt::Display, parts: &[&str]) {
    let text = e.to_string();
    for p in parts {
        assert!(text.contains(p), "{text:?} does not say {p:?}");
    }
    assert!(!text.contains('\n'), "one line: {text:?}");
}

/// §5.4: the issue's own example, `tools/call` with a policy that leaves out `tools`.
#[test]
fn s5_4_not_granted_names_the_capability_and_the_policy_to_change() {
    says(
        &HostError::NotGranted(Capability::Tools),
        &["`tools`", "not granted", "HostConfig.policy"],
    );
    let text = HostError::NotGranted(Capability::Tools).to_string();
    assert!(!text.contains("NotGranted("), "Display, not Debug: {text}");
}

/// §3.2, §6.7: MCP-only says why, in words (not a Debug dump), and what to check.
#[test]
fn s3_2_mcp_only_says_why_and_what_to_check() {
    for (reason, why) in [
        (McpOnlyReason::NotAdvertised, "does not advertise"),
        (McpOnlyReason::PolicyMethodNotFound, "-32601"),
        (McpOnlyReason::PolicyTimeout, "policy_timeout"),
        (McpOnlyReason::Refused, "mcp-only"),
        (McpOnlyReason::Suspended, "§17.5"),
    ] {
        let e = HostError::McpOnly(reason);
        says(&e, &[why, "HostSession::mode()"]);
        assert!(!e.to_string().contains("McpOnly"), "{e}");
    }
    says(
        &HostError::Refused("close"),
        &["\"close\"", "grant what its manifest requires"],
    );
    says(
        &HostError::ChannelNotPermitted("d:#x".into()),
        &["channel_patterns", "HostSession::channels()"],
    );
}

/// The peer's errors name the limit or timeout to raise.
#[test]
fn peer_errors_name_the_setting_to_change() {
    says(
        &PeerError::Timeout {
            method: "tools/call".into(),
            id: RequestId::Number(7.into()),
            after: Duration::from_secs(30),
        },
        &["tools/call", "PeerConfig::request_timeout"],
    );
    says(
        &PeerError::TooManyPending { limit: 1024 },
        &["1024", "PeerConfig::max_pending_requests"],
    );
    says(
        &PeerError::Closed(CloseReason::Eof),
        &["closed", "reconnect"],
    );
}

/// The server's senders say which check to make before sending (§5.3, §5.4, §6.4).
#[test]
fn s5_4_send_errors_say_what_to_check_before_sending() {
    says(&SendError::McpOnly, &["Session::is_mcpl()"]);
    says(
        &SendError::NotReady {
            capability: Capability::PushEvents,
        },
        &["pushEvents", "on_ready"],
    );
    says(
        &ToolChangeError::Unknown("remind".into()),
        &["\"remind\"", "Server::add_tool"],
    );
}

/// §5.4, §6.2: configuration mistakes name the rule to follow.
#[test]
fn s5_4_s6_2_pattern_and_uses_errors_name_the_rule() {
    says(
        &PatternError::EmptySegment("channels..x".into()),
        &["\"channels..x\"", "stray dot"],
    );
    says(
        &PatternError::PartialWildcard("chan*".into()),
        &["whole segment", "`channels.*`"],
    );
    says(&UsesError::Empty, &["at least one", "capability path"]);
    says(&UsesError::Absent, &["capability paths"]);
}
